/* dns_service.h - the DNS service of seed 002 (DnsSpec::Split): answers applications' queries itself (hosts, a shared answer cache, upstreams chosen by rules) and the outbounds' lookups; one per worker loop over one shared, immutable configuration. */
#ifndef ETM_RUNTIME_DNS_SERVICE_H
#define ETM_RUNTIME_DNS_SERVICE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "runtime/connector.h"
#include "runtime/dns.h"
#include "runtime/dns_answers.h"
#include "runtime/worker.h"
#include "transport/tls.h"

/* The port whose flows the service takes (seed 002 DNS_PORT). */
#define DNS_PORT 53

/* Queries one worker's service has at its upstreams at once; past it a
 * query is answered SERVFAIL at once instead of growing without bound. */
#define DNS_SVC_MAX_INFLIGHT 1024

/* Queries one client stream or datagram link may have unanswered; a
 * stream stops taking bytes (TCP backpressure), a link drops the rest. */
#define DNS_SVC_CLIENT_MAX 64

/* Answer bytes a client stream may hold that its owner has not read yet:
 * a client that sends queries and reads no answers has its stream ended
 * past this (dns: the client leaves its answers unread). */
#define DNS_SVC_STREAM_OUT_MAX (256 * 1024)

/* How long an upstream stream connection may stay without a query before
 * the service closes it (RFC 7766 6.2.3 asks clients to close idle ones). */
#define DNS_SVC_IDLE_MS 30000

/* Queries one UDP socket sends to its upstream before the next goes from
 * a new socket, on a new port (RFC 5452: with the random id, what an
 * off-path forger has to guess). */
#define DNS_SVC_UDP_ROTATE 64

/* The TTL of the answers [[dns.host]] entries give. */
#define DNS_SVC_HOST_TTL 60

typedef enum dns_up_proto {
	DNS_UP_UDP,
	DNS_UP_TCP,
	DNS_UP_TLS,
	DNS_UP_HTTPS,
} dns_up_proto;

/* One upstream, as the supervisor built it from a [[dns.server]]. */
typedef struct dns_upstream_conf {
	char *tag;
	dns_up_proto proto;
	addr_dest server;    /* an IP and port */
	bool through_proxy;  /* dialled through the dialer: a flow with inbound tag "dns" */
	tls_client_ctx *tls; /* a reference; tls and https */
	char *server_name;   /* tls and https: SNI and the name checked; NULL: none (an IP) */
	char *host;          /* https: the Host header */
	char *path;          /* https: the request path */
} dns_upstream_conf;

/* A [[dns.host]]: a name the service answers itself. */
typedef struct dns_host {
	char *name; /* lower case, no trailing dot */
	struct sockaddr_storage addrs[DNS_MAX_ADDRS];
	size_t n;
} dns_host;

/* The service's configuration: built once per [dns] change, then shared
 * read-only by every worker (any thread may take and drop references). */
typedef struct dns_svc_conf {
	atomic_uint refs;
	dns_upstream_conf *ups; /* owned, at least one */
	size_t n_ups;
	/* The rules: pick returns the index in ups of the upstream for a name
	 * (the final one when no rule matches). rules is freed with
	 * rules_free. */
	void *rules;
	size_t (*pick)(const void *rules, const char *name);
	void (*rules_free)(void *rules);
	dns_host *hosts; /* owned */
	size_t n_hosts;
	dns_answers *cache; /* owned; NULL: no cache */
	bool prefetch;
	uint64_t timeout_ms;
} dns_svc_conf;

/* A zeroed conf with one reference, for the supervisor to fill. */
dns_svc_conf *dns_svc_conf_new(void);
dns_svc_conf *dns_svc_conf_ref(dns_svc_conf *c);
/* Drops a reference; the last frees everything the conf owns. NULL: no-op. */
void dns_svc_conf_unref(dns_svc_conf *c);

/* How the service opens a connection to an upstream with through_proxy
 * (seed 002 RoutedDialer): the supervisor routes it as a TCP flow to the
 * server with inbound tag "dns", anonymous, untracked. Contract as
 * connector.h's connect. Returns NULL also when it answered at once. */
typedef struct dns_svc_dialer {
	connect_pending *(*dial)(void *self, worker *w, const addr_dest *server, connect_cb cb,
	                         void *data);
	/* The service is done with self (it is being freed); may be NULL. */
	void (*release)(void *self);
	void *self;
} dns_svc_dialer;

typedef struct dns_svc dns_svc;

typedef struct dns_svc_stats dns_svc_stats;

/* The service on w's loop, over conf (a reference is taken). dialer is
 * copied (NULL: no through_proxy server can be reached). The service adds
 * its counts to *stats (borrowed for its life, so counts outlive a
 * reload's new service; NULL: its own). NULL when memory runs out. Worker
 * thread only, as every call below. */
dns_svc *dns_svc_new(worker *w, dns_svc_conf *conf, const dns_svc_dialer *dialer,
                     dns_svc_stats *stats);

/* The worker lets go of s: streams and links opened on it keep it until
 * they close (their queries are still answered); then it is freed. */
void dns_svc_release(dns_svc *s);

/* The worker is stopping: every query not answered is dropped, every
 * upstream connection closed; streams and links still open answer
 * nothing more. Then as dns_svc_release. */
void dns_svc_shutdown(dns_svc *s);

/* A client stream answered by s (seed 002 DnsTcpStream): DNS over TCP,
 * each message after its 2-byte length, answered in process. The
 * callback gets an endpoint on a channel, ready, with nothing read, from
 * the loop (never inside this call, as a dial's), unless the handle is
 * cancelled first. NULL without memory (no callback then). */
connect_pending *dns_svc_connect(dns_svc *s, connect_cb cb, void *data);

/* A datagram link answered by s (seed 002 DnsUdpLink): each datagram
 * sent on it is a query, its answer is received from the address it was
 * sent to. NULL without memory. */
dgram_link *dns_svc_link(dns_svc *s, const dgram_handlers *h, void *ud);

/* A close drain of the outbound version origin (outbound.h's id): every
 * upstream connection s opened through it ends; what was sent on one is
 * sent again on a new connection, routed by the plane of that moment.
 * Returns how many ended. */
size_t dns_svc_drain(dns_svc *s, uint64_t origin);

/* The lookups of the outbounds on w (dns.h's dns_resolver) go through s
 * when it is set as their backend: A and AAAA through the same rules,
 * hosts, cache and upstreams. */
const dns_backend *dns_svc_backend(dns_svc *s);

/* What services on one worker did: plain counts, the worker's thread
 * writes and reads them. */
struct dns_svc_stats {
	uint64_t queries;  /* queries taken: clients' and the outbounds' lookups */
	uint64_t hosts;    /* answered from [[dns.host]] */
	uint64_t cached;   /* answered from the cache */
	uint64_t upstream; /* sent to an upstream (a prefetch and a retry over TCP too) */
	uint64_t servfail; /* answered SERVFAIL (timeouts, broken upstreams, the bound) */
	uint64_t formerr;  /* queries that could not be read */
};

#endif
