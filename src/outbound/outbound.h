/* outbound.h - a built outbound, the table of what each protocol is and can do, and connect_stream / connect_datagram through it. */
#ifndef ETM_OUTBOUND_OUTBOUND_H
#define ETM_OUTBOUND_OUTBOUND_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/addr.h"
#include "runtime/connector.h"
#include "runtime/dial.h"
#include "runtime/dns.h"
#include "runtime/dns_service.h"
#include "transport/tls.h"

typedef struct outbound outbound;
typedef struct outbound_proto outbound_proto;
typedef struct proxy_transport proxy_transport;

struct outbound {
	atomic_uint refs;
	uint64_t id;      /* unique for the process's life, never reused: the key
	                   * drains and fan-out sub-links find its flows by */
	uint64_t version; /* the N of tag@vN (seed 002), set by whoever builds it */
	char *tag;        /* owned */
	const outbound_proto *proto; /* its protocol's row, never NULL */
	dial_family af; /* the family dial_tcp takes */
	proxy_transport *proxy; /* owned: a proxy client's server and transport; NULL otherwise */
	void *state; /* owned: proto->state_size bytes of the protocol's own (credentials), or NULL */
};

/* The end of outbound_connect_datagram: the link, or NULL with why (valid
 * during the call). */
typedef void (*outbound_dgram_cb)(void *oud, dgram_link *link, const char *why);

/* What outbound_new builds from, filled by supervisor/build_outbound.c
 * from a checked spec entry. Everything is borrowed for the call:
 * outbound_new copies the strings and takes its own reference on tls, so
 * the spec it came from may be freed while the outbound lives on. */
typedef struct outbound_config {
	const char *tag;
	const char *protocol; /* its name, as outbound_proto_named takes it */
	dial_family af;
	/* Proxy clients (the row's proxy_client) only: */
	addr_dest server;
	tls_client_ctx *tls;  /* NULL: no TLS */
	const char *tls_name; /* the name TLS verifies and sends; with tls */
	bool ws;
	const char *ws_path, *ws_host; /* with ws */
	bool grpc;
	const char *grpc_service, *grpc_host; /* with grpc */
	/* Credentials, each NULL when not set: socks and http a user name and
	 * password, trojan the password, vless the id (a UUID as text). */
	const char *username, *password, *id;
	/* Mux.Cool: sub-flows open on one connection at most; 0: off. */
	unsigned mux_concurrency;
	/* vmess: the body security as vmess_security's wire value
	 * (proto/vmess_crypto.h), 0 for auto (outbound_new picks). */
	uint8_t vmess_security;
	/* shadowsocks: the method's name (proto/shadowsocks.h's), with
	 * password. */
	const char *method;
} outbound_config;

/* What a protocol is and can do as an outbound: one row per protocol in
 * outbound.c, read by outbound_new, the connects and the spec checks
 * (etm_spec_check, etm_protocol_available, through build_outbound_proto).
 * Adding a protocol is one row plus the functions it names. Functions are NULL where a flag says the
 * protocol cannot do it, and all of them are NULL while it is not
 * available. */
struct outbound_proto {
	const char *name; /* etm_protocol_name's */
	/* Dials a proxy server of its own, named by `server` and `port` (the
	 * spec check asks for both); outbound_new builds its proxy_transport
	 * from the config's server, TLS and WebSocket fields. */
	bool proxy_client;
	bool udp;       /* carries datagrams: connect_datagram is set */
	/* Its datagram link reaches only the destination it was opened for:
	 * the request names that one target and the datagrams carry no address
	 * (VLESS, VMess; seed 000 "VLESS and VMess sub-links carry one
	 * target"). A fan-out opens a sub-link per destination for it. */
	bool udp_one_dest;
	bool available; /* this build runs it; the others parse, validate and are
	                   refused at start ("... is not available yet") */

	/* The protocol's state: o->state gets state_size zeroed bytes (0: no
	 * state), which build fills from the config after o->proxy is built;
	 * it returns 0, or -1 with the reason in err. free_state
	 * releases what the state owns, before the state itself is freed.
	 * Either function may be NULL: nothing to do. */
	size_t state_size;
	int (*build)(outbound *o, const outbound_config *cfg, char *err, size_t err_size);
	void (*free_state)(void *state);

	/* outbound_connect_stream and outbound_connect_datagram of this
	 * protocol; contracts as there (to->network is already UDP). */
	connect_pending *(*connect_stream)(const outbound *o, worker *w, dns_resolver *dns,
	                                   const addr_dest *dest, connect_cb cb, void *data);
	connect_pending *(*connect_datagram)(const outbound *o, worker *w, dns_resolver *dns,
	                                     const addr_dest *to, const dgram_handlers *h, void *ud,
	                                     outbound_dgram_cb done, void *oud);

	/* Proxy clients (connect_* = proxy_connect_*): the request layer that
	 * tops a stream's stack, asking the server for dest (dest->network UDP:
	 * the protocol's UDP request). NULL: out of memory. */
	layer *(*request)(const outbound *o, const addr_dest *dest);
	/* Proxy clients that carry UDP: the datagram link over a stream whose
	 * request is done. ep is taken over, request is its stack's top
	 * layer, to the flow's first destination. NULL with err on failure. */
	dgram_link *(*dgram_over)(const outbound *o, worker *w, endpoint *ep,
	                          const layer *request, const addr_dest *to, const dgram_handlers *h,
	                          void *ud, char *err, size_t err_size);
	/* Rows whose dgram_over frames datagrams inside the stream (Trojan,
	 * VLESS, VMess): how (stream_udp.h's stream_udp_framing). */
	int framing;
};

/* The row of the protocol called name; NULL for one no outbound speaks
 * (mixed, udp_lb). */
const outbound_proto *outbound_proto_named(const char *name);

/* Builds an outbound from cfg (borrowed for the call, see outbound_config).
 * Returns NULL with the reason in err (memory, credentials that do not
 * convert, or a protocol this build cannot run). */
outbound *outbound_new(const outbound_config *cfg, char *err, size_t err_size);

/* An outbound is shared by the planes, balancers and datagram opens that
 * use it: a reload reuses an unchanged one as the same object. The new
 * object holds one reference; the last unref frees it. Any thread; NULL is
 * a no-op for unref. */
outbound *outbound_ref(const outbound *o);
void outbound_unref(outbound *o);

/* A fresh id from the sequence outbounds use (balancer targets take theirs
 * from it too, so fan-out keys never collide). */
uint64_t outbound_next_id(void);

/* Opens a stream to dest through o on worker w (seed 000 "connect_stream").
 * freedom dials with the worker's resolver; blackhole answers at once with
 * blackhole = true. Callback contract as connector.h: it runs once unless
 * cancelled, possibly before this returns (then NULL is returned). */
connect_pending *outbound_connect_stream(const outbound *o, worker *w, dns_resolver *dns,
                                         const addr_dest *dest, connect_cb cb, void *data);

/* Opens a datagram link through o (seed 000 "connect_datagram"): freedom's
 * per-family sockets, blackhole's swallowing link, a Trojan, VLESS or VMess
 * stream carrying framed datagrams (VLESS and VMess: to `to` only, see
 * udp_one_dest), a SOCKS5 UDP association.
 * What it receives goes to h with ud. done runs exactly once unless the
 * returned handle is cancelled; it may run before this returns (then NULL is
 * returned). http fails with "http carries no datagrams". */
connect_pending *outbound_connect_datagram(const outbound *o, worker *w, dns_resolver *dns,
                                           const addr_dest *to, const dgram_handlers *h,
                                           void *ud, outbound_dgram_cb done, void *oud);

/* Whether a datagram link of o reaches only the destination it was opened
 * for (the row's udp_one_dest, or a Mux.Cool UDP sub-flow): the fan-out
 * then keys its sub-links by destination. */
bool outbound_udp_one_dest(const outbound *o);

/* The DNS service's target (seed 002 Outbound::Dns): tag "", version as
 * given (the epoch of the plane that first holds it). Its streams and
 * datagram links are the service's (dns_service.h) on the worker they
 * open on, found with svc_of; none is dialled. NULL without memory. */
outbound *outbound_new_dns(dns_svc *(*svc_of)(worker *w), uint64_t version);

#endif
