/* supervisor.h - the engine: takes a spec, runs it on worker threads, stops it. */
#ifndef ETEMENANKI_SUPERVISOR_H
#define ETEMENANKI_SUPERVISOR_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "etemenanki/spec.h"

typedef struct etm_supervisor etm_supervisor;

/* Starts the spec (which must have passed etm_spec_check and
 * etm_spec_check_available): builds the plane, starts the workers, opens
 * every inbound's listener on every worker. Takes the spec over (it is
 * zeroed). Returns 0, or -1 with the reason in err ("failed to listen on
 * 127.0.0.1:1080: address already in use", ...) and nothing left running. */
__attribute__((warn_unused_result)) int etm_supervisor_start(etm_spec *spec, etm_supervisor **out,
                                                             char *err, size_t err_size);

/* Most sockets etm_supervisor_inherit takes. */
#define ETM_INHERITED_MAX 1024

/* Hands the engine sockets a service manager passed (socket activation,
 * sd_listen_fds(3)), borrowed for the life of the process: a TCP inbound
 * whose listen address and port are exactly those a passed stream socket
 * is bound to serves on it instead of binding, at the start and on every
 * reload; the others bind as usual. Call once, before etm_supervisor_start.
 * Takes the first ETM_INHERITED_MAX of them; this function can't fail. */
void etm_supervisor_inherit(const int *fds, size_t n);

/* The same for sockets a process being upgraded passed (etm_supervisor_
 * listen_fds of the old one): owned from now on. TCP ones as above; UDP
 * ones serve a udp_lb inbound or a shadowsocks inbound's UDP on their
 * address, worker i on the i-th of them (a worker past them binds a socket
 * that joins theirs). Call before etm_supervisor_start. */
void etm_supervisor_inherit_upgrade(const int *fds, size_t n);

/* After etm_supervisor_start (whatever its outcome): closes the sockets
 * etm_supervisor_inherit_upgrade passed, every listener holding its own
 * descriptor by then, so none stays open that no inbound serves. */
void etm_supervisor_inherit_release(void);

/* For an upgrade: close-on-exec copies (the caller's to close) of every
 * socket clients reach the engine on: each worker's TCP listening socket
 * of each inbound (every one: a SO_REUSEPORT socket nobody accepts on
 * would keep its share of the port's connections), each udp_lb front
 * socket and each shadowsocks UDP socket, worker by worker. Up to max
 * into fds; returns how many, or a negative errno with none left open.
 * The thread that started the engine. */
__attribute__((warn_unused_result)) int etm_supervisor_listen_fds(etm_supervisor *s, int *fds,
                                                                  size_t max);

/* Closes every listening socket (TCP listeners, udp_lb fronts with their
 * flows, shadowsocks UDP sockets) and stops the balancer probes; the open
 * TCP flows go on. Nothing reopens them but a later apply. The thread that
 * started the engine. */
void etm_supervisor_stop_accepting(etm_supervisor *s);

/* The client connections open on every worker: flows, and gRPC and
 * Mux.Cool server carriers. The thread that started the engine. */
size_t etm_supervisor_open_flows(etm_supervisor *s);

/* What etm_supervisor_open_flows counts (open), and the client
 * connections ever opened (total: TCP connections accepted and gRPC
 * streams served as connections; carriers not counted), both summed over
 * the workers, each worker counting its own on its own loop. The thread
 * that started the engine. */
void etm_supervisor_flow_counts(etm_supervisor *s, uint64_t *open, uint64_t *total);

/* [policy] upgrade_drain_after of the running config, in seconds. */
uint64_t etm_supervisor_upgrade_drain_after(const etm_supervisor *s);

/* [policy] upgrade_start_timeout of the running config, in seconds. */
uint64_t etm_supervisor_upgrade_start_timeout(const etm_supervisor *s);

/* Applies spec, a new config that passed etm_spec_check and
 * etm_spec_check_available, to the running engine (seed 002 "plan and
 * apply"): what it leaves unchanged runs on as the same objects, new
 * outbounds and balancers are built and the plane is published to every
 * worker (open TCP flows keep their target, the next datagram of a UDP
 * association takes the new route), inbounds start, stop or take their
 * new config on the same socket, and old outbound versions get their
 * drain policy. Logs "config reload: no changes" or "config reload:
 * changed <kinds>", and at debug "applied: <n> built, <n> reused, <n>
 * swapped, <n> drained". Takes spec over in every case. Returns 0, or -1
 * with the reason in err (the text a start would print after "failed to
 * start: ") and nothing changed. The thread that started the engine. */
__attribute__((warn_unused_result)) int etm_supervisor_apply(etm_supervisor *s, etm_spec *spec,
                                                             char *err, size_t err_size);

/* The published plane's epoch: 1 after the start, one more for each apply
 * that published (seed 002 Supervisor::epoch). */
uint64_t etm_supervisor_epoch(const etm_supervisor *s);

/* What --test runs after etm_spec_check: etm_spec_check_available, then
 * builds what a start would build, without binding, dialling or probing
 * anything: every outbound (TLS contexts, CA files), balancer and inbound
 * config (certificates and keys), the udp_lb clusters, the compiled
 * routes with their geodata. Returns 0, or -1 with the reason in err, the
 * text a start would print after "failed to start: " ("inbound x: tls:
 * ...", "building route failed: ...", "outbound x: protocol vmess is not
 * available yet"). */
__attribute__((warn_unused_result)) int etm_supervisor_check(const etm_spec *spec, char *err,
                                                             size_t err_size);

/* The port inbound i listens on (the bound one when the config said 0). */
uint16_t etm_supervisor_inbound_port(const etm_supervisor *s, size_t i);

/* The counters of one udp_lb inbound, summed over its workers
 * (docs/udp-lb.md "Metrics" names each). */
#define ETM_UDPLB_DROP_KINDS 12
#define ETM_UDPLB_CLOSE_KINDS 6
typedef struct etm_udplb_stats {
	uint64_t active_flows;
	uint64_t flows_created, flows_evicted, flows_shed;
	uint64_t datagrams_to_backends, bytes_to_backends;
	uint64_t datagrams_to_clients, bytes_to_clients;
	uint64_t flow_duration_ms;              /* summed over evicted flows */
	uint64_t sockets_reused;                /* flows given a pooled upstream socket */
	uint64_t drops[ETM_UDPLB_DROP_KINDS];   /* index i is etm_udplb_drop_name(i) */
	uint64_t evicted[ETM_UDPLB_CLOSE_KINDS]; /* index i is etm_udplb_close_name(i) */
} etm_udplb_stats;

/* Fills *out for inbound i; returns 0, or -1 when inbound i is not a
 * udp_lb one. Any thread, while the engine runs. */
__attribute__((warn_unused_result)) int etm_supervisor_udplb_stats(const etm_supervisor *s, size_t i,
                                                                   etm_udplb_stats *out);

/* The running config's inbounds: how many, and the tag of inbound i
 * (borrowed until the next apply; NULL past the end). The thread that
 * started the engine. */
size_t etm_supervisor_inbound_count(const etm_supervisor *s);
const char *etm_supervisor_inbound_tag(const etm_supervisor *s, size_t i);

/* Backend j of udp_lb inbound i, in its cluster's backends order:
 * "ip:port" into addr[0, addr_size), whether it is up, and the flows it
 * has been given (summed over the workers, relaxed reads). Returns 0, or
 * -1 when inbound i is not a udp_lb one or has no backend j. The thread
 * that started the engine. */
#define ETM_UDPLB_ADDR_MAX 64
__attribute__((warn_unused_result)) int etm_supervisor_udplb_backend(const etm_supervisor *s,
                                                                     size_t i, size_t j,
                                                                     char *addr,
                                                                     size_t addr_size, int *up,
                                                                     uint64_t *flows_created);

/* Member j of balancer i of the running config, in its outbounds order:
 * the balancer's tag and the member's outbound tag (both borrowed until
 * the next apply) and whether its health probes find it up (a relaxed
 * read). Returns 0, or -1 past the end. The thread that started the
 * engine. */
__attribute__((warn_unused_result)) int etm_supervisor_balancer_member(const etm_supervisor *s,
                                                                       size_t i, size_t j,
                                                                       const char **balancer,
                                                                       const char **member,
                                                                       int *up);

/* The last health probe of member j of balancer i (indices as
 * etm_supervisor_balancer_member): *delay_ms the time its TCP connect took
 * (the lookup of a server given as a name, usually from the DNS cache,
 * included; -1 when the last probe failed or none finished yet) and
 * *when_ms the Unix time in ms it finished (0: none yet). Relaxed reads of
 * what the prober's thread wrote. Returns 0, or -1 past the end. The
 * thread that started the engine. */
__attribute__((warn_unused_result)) int etm_supervisor_member_probe(const etm_supervisor *s,
                                                                    size_t i, size_t j,
                                                                    int64_t *delay_ms,
                                                                    uint64_t *when_ms);

/* How many health probes of member j of balancer i ended (*ended) and how
 * many of those failed (*failed), since the balancer was built: a reload
 * that rebuilds it starts them again from 0. Relaxed reads. Returns 0, or
 * -1 past the end. The thread that started the engine. */
__attribute__((warn_unused_result)) int etm_supervisor_member_probe_counts(
	const etm_supervisor *s, size_t i, size_t j, uint64_t *ended, uint64_t *failed);

/* What the admission guard refused since the start (docs/security.md). */
typedef struct etm_guard_stats {
	uint64_t refused_source; /* over [policy] max_connections_per_source */
	uint64_t refused_loop;   /* dials to one of our own listening addresses */
	uint64_t accept_paused;  /* listener pauses for lack of file descriptors */
	uint64_t refused_fanout; /* mux sub-flows, gRPC calls, UDP entries over the same bound */
	uint64_t refused_open_rate; /* mux sub-flow and gRPC call opens over their rate */
} etm_guard_stats;

/* Fills *out; any thread while the engine runs. */
void etm_supervisor_guard_stats(const etm_supervisor *s, etm_guard_stats *out);

/* The metric label of drop kind i ("truncated", ..., "send_error") and of
 * close kind i ("idle", ..., "aborted"); "unknown" past the end. */
const char *etm_udplb_drop_name(size_t i);
const char *etm_udplb_close_name(size_t i);

/* Writes the admission guard's counters (one "guard: ..." line,
 * docs/security.md) and those of every udp_lb inbound, a few lines each
 * (docs/udp-lb.md "Metrics"), to out. Callable from any thread while the
 * engine runs: the counters are read, not locked. */
void etm_supervisor_write_metrics(const etm_supervisor *s, FILE *out);

/* ---- outbound-side counters (docs/metrics.md) ---- */

/* Why opening a flow's upstream stream failed: index i is
 * etm_dial_error_name(i), one of "general", "not_allowed",
 * "net_unreachable", "host_unreachable", "refused", "timed_out"; "unknown"
 * past the end. */
#define ETM_DIAL_ERROR_KINDS 6
const char *etm_dial_error_name(size_t i);

/* Failed opens since the start, by why: every routed TCP flow and Mux.Cool
 * sub-flow whose outbound (or balancer, after its retries) reported a
 * failure; a cancelled open and a blackhole are not failures. Summed over
 * the workers, each read on its own loop. The thread that started the
 * engine. */
void etm_supervisor_dial_errors(etm_supervisor *s, uint64_t out[ETM_DIAL_ERROR_KINDS]);

/* The process's DNS answer cache, which every worker's and the prober's
 * resolver share (a name given as an IP address never reaches it). */
typedef struct etm_dns_cache_stats {
	uint64_t hits;      /* lookups answered from it with addresses */
	uint64_t negative;  /* lookups answered from it with "no such name" */
	uint64_t misses;    /* lookups it could not answer (handed to the resolver) */
	uint64_t evictions; /* entries dropped to make room */
	uint64_t entries;   /* names held now */
} etm_dns_cache_stats;

/* Fills *out with relaxed reads, no lock; any thread while the engine runs. */
void etm_supervisor_dns_cache_stats(const etm_supervisor *s, etm_dns_cache_stats *out);

/* The DNS service ([[dns.server]]; docs/dns.md): its queries summed over
 * the workers since the start (a reload's new service goes on counting),
 * and its answer cache (the current one: a [dns] change starts a new,
 * empty cache). */
typedef struct etm_dns_service_stats {
	bool running;      /* the config has a service; the rest is 0 otherwise */
	uint64_t queries;  /* queries taken: clients' and the outbounds' lookups */
	uint64_t hosts;    /* answered from [[dns.host]] */
	uint64_t cached;   /* answered from the cache */
	uint64_t upstream; /* sent to an upstream */
	uint64_t servfail; /* answered SERVFAIL */
	uint64_t formerr;  /* could not be read */
	uint64_t cache_misses, cache_negative_hits, cache_evictions, cache_prefetches,
		cache_entries;
} etm_dns_service_stats;

/* Reads each worker's counts on its own loop. The thread that started the
 * engine. */
void etm_supervisor_dns_service_stats(etm_supervisor *s, etm_dns_service_stats *out);

/* TLS handshakes this process completed since it started, as a client
 * (outbounds, DoT/DoH upstreams) and as a server (inbounds), full and
 * resumed (an earlier session's ticket taken: no certificate sent or
 * checked). */
typedef struct etm_tls_handshake_stats {
	uint64_t client_full, client_resumed;
	uint64_t server_full, server_resumed;
} etm_tls_handshake_stats;

void etm_tls_handshakes(etm_tls_handshake_stats *out);

/* ---- the flow tracker (seed 002 "Tracker"; docs/api.md) ----
 *
 * Every TCP flow and every UDP sub-link is registered once its outbound
 * opened it (a failed dial never is), on the worker that carries it, and
 * leaves the table when it ends; the last ETM_FLOWS_CLOSED_MAX ended ones
 * per worker are kept for the API. Bytes are the flow's app bytes as the
 * client sent them (up) and received them (down). */

/* Names (tags, users) are cut to this many bytes less one. */
#define ETM_FLOW_NAME_MAX 128
/* A host name (RFC 1035 2.3.4: 255 octets) and its NUL. */
#define ETM_FLOW_HOST_MAX 256
/* An IPv6 address as text (INET6_ADDRSTRLEN). */
#define ETM_FLOW_IP_MAX 46
/* The end why of a closed flow is cut to this many bytes less one. */
#define ETM_FLOW_WHY_MAX 128
/* Ended flows each worker keeps for GET /connections?closed. */
#define ETM_FLOWS_CLOSED_MAX 256

/* The why of a flow ended by etm_supervisor_kill (seed 002's text). */
#define ETM_FLOW_KILLED "the flow was killed"

typedef struct etm_flow {
	uint64_t id;       /* unique for the process's life, never 0 */
	uint64_t start_ms; /* Unix time in ms when it was registered */
	uint64_t end_ms;   /* ended flows: when; 0 while open */
	int udp;           /* 1: a UDP sub-link, 0: a TCP flow */
	uint64_t assoc;    /* UDP: the id of the association it belongs to; 0 for TCP */
	char inbound[ETM_FLOW_NAME_MAX];
	char user[ETM_FLOW_NAME_MAX]; /* "" for the anonymous principal */
	char src_ip[ETM_FLOW_IP_MAX]; /* "" when unknown */
	uint16_t src_port;
	char dst_host[ETM_FLOW_HOST_MAX]; /* the requested domain; "" when the request named an IP */
	char dst_ip[ETM_FLOW_IP_MAX];     /* the requested IP; "" when it named a domain */
	uint16_t dst_port;
	char sniffed[ETM_FLOW_HOST_MAX]; /* "" when nothing was sniffed */
	int32_t rule;                    /* index of the rule that matched; -1: the default route */
	char outbound[ETM_FLOW_NAME_MAX]; /* the tag the route chose (an outbound or a balancer) */
	unsigned long long version;       /* its version: outbound@vN */
	char member[ETM_FLOW_NAME_MAX];   /* the balancer member that carries it; "" when none */
	uint64_t epoch;                   /* the plane's epoch it was routed on */
	uint64_t up, down;
	char why[ETM_FLOW_WHY_MAX]; /* ended flows: what ended it ("closed" when in order) */
} etm_flow;

typedef struct etm_flow_list {
	etm_flow *v; /* owned: etm_flow_list_free */
	size_t n;
} etm_flow_list;

void etm_flow_list_free(etm_flow_list *l);

/* A snapshot of the open flows (closed = 0) or of the recently ended ones
 * (closed = 1), every worker's, each taken on the worker's own loop; open
 * ones oldest first. Returns 0, or -1 when memory ran out (*out empty).
 * The thread that started the engine. */
__attribute__((warn_unused_result)) int etm_supervisor_flows(etm_supervisor *s, int closed,
                                                             etm_flow_list *out);

/* Bytes moved by every flow since the start, ended ones included (the
 * Clash API's uploadTotal and downloadTotal). The thread that started the
 * engine. */
void etm_supervisor_traffic(etm_supervisor *s, uint64_t *up, uint64_t *down);

/* Which flows a kill ends: every condition given must hold (NULL / -2 /
 * 0 for one not given; an empty filter matches every flow). */
typedef struct etm_flow_filter {
	const char *user;     /* the flow's user; "" the anonymous ones */
	const char *inbound;  /* inbound tag */
	const char *outbound; /* the routed tag, or the member that carries it */
	int32_t rule;         /* rule index, -1 the default route, -2 any */
	uint64_t epoch_below; /* routed on a plane older than this */
} etm_flow_filter;

#define ETM_FLOW_FILTER_ALL ((etm_flow_filter){.rule = -2})

/* Ends flow id with ETM_FLOW_KILLED (a UDP sub-link is dropped from its
 * association only). Returns 0, or -1 when no open flow has that id. The
 * thread that started the engine. */
int etm_supervisor_kill(etm_supervisor *s, uint64_t id);

/* Ends every open flow f matches, as etm_supervisor_kill does; returns how
 * many. The thread that started the engine. */
size_t etm_supervisor_kill_where(etm_supervisor *s, const etm_flow_filter *f);

/* Bytes and flows per inbound, outbound (the member that carried it when a
 * balancer chose) or user, since the start. */
typedef enum etm_usage_by { ETM_USAGE_INBOUND, ETM_USAGE_OUTBOUND, ETM_USAGE_USER } etm_usage_by;

typedef struct etm_usage {
	char name[ETM_FLOW_NAME_MAX]; /* "" for the anonymous user */
	uint64_t up, down;            /* ended and open flows */
	uint64_t open, total;         /* flows open now, and ever registered */
} etm_usage;

typedef struct etm_usage_list {
	etm_usage *v; /* owned: etm_usage_list_free; sorted by name */
	size_t n;
} etm_usage_list;

void etm_usage_list_free(etm_usage_list *l);

/* The usage table by `by`, summed over the workers. Returns 0, or -1 when
 * memory ran out. The thread that started the engine. */
__attribute__((warn_unused_result)) int etm_supervisor_usage(etm_supervisor *s, etm_usage_by by,
                                                             etm_usage_list *out);

/* ---- users (seed 002 "Principal"; docs/users.md) ----
 *
 * Each inbound's user is a principal of its own: removing a user on one
 * inbound leaves its sessions on others alone. A user is named by its
 * name (a SOCKS/HTTP user's username when it has none). */

typedef struct etm_user_info {
	char inbound[ETM_FLOW_NAME_MAX];
	char name[ETM_FLOW_NAME_MAX]; /* "" for a user without a name */
	uint64_t up_rate, down_rate;  /* bytes a second; 0: none */
	uint64_t max_sessions;        /* 0: none */
	uint64_t sessions;            /* bound to it now, on every worker */
} etm_user_info;

typedef struct etm_user_list {
	etm_user_info *v; /* owned: etm_user_list_free; in config order */
	size_t n;
} etm_user_list;

void etm_user_list_free(etm_user_list *l);

/* Every user of every running inbound. Returns 0, or -1 without memory.
 * The thread that started the engine. */
__attribute__((warn_unused_result)) int etm_supervisor_users(etm_supervisor *s,
                                                             etm_user_list *out);

/* Edits of the running config's users without touching the file (seed
 * 002 upsert_user / remove_user): each is applied as a reload of the
 * running config with that change. Users it keeps (the same credential
 * on the same inbound) keep their sessions and counts and take their new
 * limits on their flows' next read or write; a user it removes is
 * revoked under [policy] user_removal (close: its open flows end at once).
 * The file decides again at the next reload. The thread that started
 * the engine. */

/* Removes every user called `name` from inbound `inbound` (NULL: from
 * every inbound). Returns how many were removed (0: none had that name;
 * nothing changed), or -1 with the reason in err (the config check's,
 * such as "inbound x: protocol trojan needs settings.users" for its last
 * user). */
long etm_supervisor_remove_user(etm_supervisor *s, const char *inbound, const char *name,
                                char *err, size_t err_size);

/* u->name (required) on inbound `inbound`: where a user of that name
 * exists (on every inbound when inbound is NULL), its credential keys u
 * gives (username, password, id; NULL: kept) and its limits (u's, 0 for
 * none) are set; where none exists and inbound names one, u is added
 * there (a SOCKS/HTTP user with username u->username, else u->name).
 * Returns how many users were added or changed (0: no inbound had one
 * and none was named), or -1 with the reason in err (the config check's
 * message: a missing credential, a malformed UUID, ...). */
long etm_supervisor_upsert_user(etm_supervisor *s, const char *inbound, const etm_user_spec *u,
                                char *err, size_t err_size);

/* Stops accepting, ends every flow, joins the workers and frees everything.
 * Returns within a moment: no flow is waited for. */
void etm_supervisor_stop(etm_supervisor *s);

#endif
