/* connector.h - what an inbound asks of the layers above: open a flow, get a stream back. */
#ifndef ETM_RUNTIME_CONNECTOR_H
#define ETM_RUNTIME_CONNECTOR_H

#include <stdbool.h>
#include <sys/socket.h>
#include <uv.h>

#include "base/addr.h"
#include "proto/proto.h"
#include "runtime/endpoint.h"
#include "runtime/principal.h"
#include "runtime/worker.h"
#include "transport/stack.h"

/* A flow as a server core produced it (seed 002 "Flow, Principal and
 * FlowContext"): where it goes, who asked, what sniffing saw. */
typedef struct flow {
	addr_dest dest;     /* dest.network says TCP or UDP */
	int user;           /* account index on the inbound, -1 for none */
	addr_dest sniffed;  /* kind ADDR_NONE when nothing was sniffed */
	bool has_source;    /* the flow's own source, when the protocol carries one */
	struct sockaddr_storage source;
} flow;

/* Where it came in: the route matchers inbound_tag and source_cidr read it. */
typedef struct flow_ctx {
	const char *inbound_tag; /* borrowed for the flow's life */
	struct sockaddr_storage peer;
	bool sniffing; /* the inbound sniffs: so do the sub-flows of a Mux.Cool session */
	/* The inbound's user names by account index (flow.user), borrowed for
	 * the flow's life; an entry may be NULL (a user without a name). */
	char *const *user_names;
	size_t n_users;
	/* Who each account's flows belong to, by account index, borrowed
	 * like user_names (NULL when the inbound has no accounts). */
	principal *const *principals;
	/* The session the flow belongs to (principal.h): the connector
	 * admits the flow against it first. NULL: none. */
	session *session;
} flow_ctx;

/* The result of a connect. On success either ep is a connected endpoint on
 * the worker's loop (its layers ready, nothing read from it yet but what
 * came with their handshake), now the callee's, whose events go nowhere
 * until endpoint_set_events; or blackhole is true and ep is NULL (the flow
 * is swallowed). On failure err is the kind and msg (valid during the
 * call) the reason. */
typedef struct connect_result {
	bool ok;
	bool blackhole;
	endpoint *ep;
	proto_dial_error err;
	const char *msg;
	/* The balancer member that answered, when a balancer dialled (valid
	 * during the call); NULL otherwise. */
	const char *member;
} connect_result;

typedef void (*connect_cb)(const connect_result *r, void *data);

/* Room a datagram link leaves before the payload it hands to a receive
 * callback, so the receiver can prepend a header in place (a SOCKS5 UDP
 * header is at most 262 bytes, RFC 1928 section 7). */
#define DGRAM_HEADROOM 264

/* Largest datagram a link carries: the UDP maximum over IPv4. */
#define DGRAM_MAX 65507

/* A datagram arrived from `from`. data[-DGRAM_HEADROOM, len) is writable
 * and valid only during the call. */
typedef void (*dgram_recv_cb)(const addr_dest *from, uint8_t *data, size_t len, void *ud);

/* What a datagram link reports to its owner. */
typedef struct dgram_handlers {
	dgram_recv_cb recv;
	/* The link can no longer receive (a SOCKS control connection closed,
	 * a proxy stream failed); why is valid during the call. The owner
	 * still closes the link. May be NULL. */
	void (*end)(void *ud, const char *why);
} dgram_handlers;

typedef struct dgram_link dgram_link;

typedef struct dgram_link_ops {
	/* Sends one datagram to `to`. Never blocks: a datagram that cannot go
	 * now is dropped (UDP). Returns 0, or -1 when it was dropped. */
	int (*send_to)(dgram_link *l, const addr_dest *to, const uint8_t *data, size_t len);
	/* Closes the link; no callback runs after. */
	void (*close)(dgram_link *l);
} dgram_link_ops;

/* A datagram link (seed 000 "connect_datagram"): the first member of every
 * concrete link. */
struct dgram_link {
	const dgram_link_ops *ops;
	/* The id of the outbound version that opened it (outbound.h), 0 for
	 * none: a drain of that version finds it by this. */
	uint64_t origin;
};

/* A connect in flight. Every pending object starts with this, so whoever
 * holds one can cancel it without knowing which outbound made it. */
typedef struct connect_pending {
	/* Stops the connect: its callback will not run. */
	void (*cancel)(struct connect_pending *p);
} connect_pending;

/* Implemented by the supervisor (admit, route, resolve the target,
 * connect_stream), handed to inbounds as an interface so the lower layer
 * never includes the higher one. */
typedef struct connector {
	/* Opens a stream for f. The callback runs exactly once unless the
	 * returned handle is cancelled; it may run before connect returns, in
	 * which case connect returns NULL. */
	connect_pending *(*connect)(void *self, worker *w, const flow *f, const flow_ctx *ctx,
	                            connect_cb cb, void *data);
	/* Dials dest directly, past the routes (a Trojan fallback is part of
	 * the inbound, not a flow). Callback contract as connect. */
	connect_pending *(*connect_direct)(void *self, worker *w, const addr_dest *dest,
	                                   connect_cb cb, void *data);
	/* Opens the datagram link of a UDP association (the fan-out: every
	 * packet is routed on its own); what it receives goes to h. Returns
	 * NULL with the reason in err. */
	dgram_link *(*connect_datagram)(void *self, worker *w, const flow *f, const flow_ctx *ctx,
	                                const dgram_handlers *h, void *ud, char *err,
	                                size_t err_size);
	void *self;
} connector;

#endif
