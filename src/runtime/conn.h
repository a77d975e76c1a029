/* conn.h - the connection shell: one client endpoint, its handshake for a driver, then a relay to an upstream. */
#ifndef ETM_RUNTIME_CONN_H
#define ETM_RUNTIME_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "runtime/endpoint.h"
#include "runtime/worker.h"
#include "transport/stack.h"

/* Largest handshake a driver may need buffered at once (SOCKS is a few
 * hundred bytes, an HTTP request head HTTP_HEAD_MAX): one pool buffer. */
#define CONN_HANDSHAKE_MAX POOL_BUF_SIZE

typedef struct conn conn;

/* The protocol driver of a connection (an inbound's server core). All calls
 * are on the connection's worker thread. */
typedef struct conn_driver {
	/* The connection exists: c is what every later hook gets, valid until
	 * on_close returns. Runs once, before any other hook; it must not
	 * close c. May be NULL. */
	void (*on_open)(conn *c, void *drv);
	/* Handshake bytes from the client: data[0, len) is everything not yet
	 * consumed. Returns how many bytes the driver consumed (it may call
	 * conn_* functions, including conn_close, before returning; after
	 * conn_close the return value is ignored). */
	size_t (*on_data)(conn *c, void *drv, const uint8_t *data, size_t len);
	/* The client ended its sending side (EOF) before the relay. Returns
	 * true to close now, false when the driver still has an answer to
	 * deliver and will close later. NULL: close now. A read error always
	 * closes. The bytes read before the EOF (conn_buffered) stay offered
	 * to on_data. */
	bool (*on_client_end)(conn *c, void *drv);
	/* A conn_write finished; the driver may resume what it paused for the
	 * client's write queue. May be NULL. */
	void (*on_written)(conn *c, void *drv);
	/* The handshake timeout passed. Returns true when the driver takes
	 * it over (a Trojan inbound sends a stalled prober to its fallback),
	 * false to close. May be NULL: close. */
	bool (*on_handshake_timeout)(conn *c, void *drv);
	/* The deadline set with conn_set_deadline passed. May be NULL. */
	void (*on_deadline)(conn *c, void *drv);
	/* The connection is closed and about to be freed: release everything
	 * the driver holds (cancel a dial in flight). */
	void (*on_close)(conn *c, void *drv);
} conn_driver;

typedef struct conn_limits {
	uint64_t handshake_ms; /* 0 = none */
	uint64_t idle_ms;      /* 0 = none */
	bool splice;           /* relay plain TCP to plain TCP with splice(2) */
} conn_limits;

/* Serves fd, a connection a listener accepted, and starts its handshake.
 * peer is the client's address as the accept gave it (NULL: asked of the
 * socket); nodelay says the socket has TCP_NODELAY already (inherited from
 * the listening socket), else it is set here.
 * The worker's guard counts it against its source first: over the limit,
 * fd is closed and NULL returned. cst is the client side's layer stack (an
 * inbound's TLS or WebSocket; NULL for plain TCP), which the connection
 * takes over in every case, as it takes fd. The driver state drv is
 * borrowed until on_close. When a connection is returned, on_open has run
 * and on_close runs exactly once (also when opening the socket failed). Returns NULL when the
 * source is over its limit or memory runs out; drv stays the caller's then
 * (cst is freed, fd closed). */
conn *conn_accept(worker *w, int fd, const struct sockaddr_storage *peer, bool nodelay,
                  const conn_driver *driver, void *drv, const conn_limits *limits, stack *cst);

/* Serves client, an endpoint on a channel of a carrier (an HTTP/2 stream
 * of a gRPC connection), as conn_accept serves a socket: the carrier
 * counted its connection's source; the addresses are the carrier's. The
 * connection takes client in every case. Returns NULL when memory runs
 * out (client closed; drv stays the caller's). */
conn *conn_adopt(worker *w, endpoint *client, const conn_driver *driver, void *drv,
                 const conn_limits *limits);

worker *conn_worker(const conn *c);

/* The client's address and the local address it connected to. */
const struct sockaddr_storage *conn_peer(const conn *c);
const struct sockaddr_storage *conn_local(conn *c);

/* Queues bytes for the client (a handshake reply, an HTTP response, a UDP
 * reply); copied, whatever the room in the client's layers: what waits is
 * conn_write_queue, which the driver bounds (on_written says when it
 * shrank). Returns 0, or -1 when the client's endpoint failed. */
__attribute__((warn_unused_result)) int conn_write(conn *c, const uint8_t *data, size_t len);

/* Stops / resumes reading the client during the handshake or while driven
 * (while dialing, or for backpressure). Resuming feeds the driver the bytes
 * it left unconsumed. */
void conn_pause(conn *c);
void conn_resume(conn *c);

/* The client's request is complete (the dial starts): the handshake
 * timeout no longer applies. The dial is bounded by its own timeouts, so
 * a connect that times out still gets its protocol's reply. */
void conn_request_done(conn *c);

/* Leaves the handshake but keeps feeding the driver the client's bytes: for
 * a protocol core that stays in the stream (HTTP absolute-form requests).
 * The handshake timeout ends and the idle timeout starts. */
void conn_drive(conn *c);

/* Calls the driver's on_deadline after ms, unless cleared (ms = 0) or the
 * connection closes first. One deadline at a time; a new one replaces it. */
void conn_set_deadline(conn *c, uint64_t ms);

/* Offers the driver again the client bytes it left unconsumed (after it
 * became ready for them without new bytes arriving). */
void conn_feed(conn *c);

/* Client bytes read and not yet consumed by the driver. */
size_t conn_buffered(const conn *c);

/* Bytes queued for the client and not yet written, those waiting for room
 * in its layers included. */
size_t conn_write_queue(const conn *c);

/* Ends the handshake and relays between the client and u, a dialled
 * endpoint on the same loop (connector.h), which the connection takes
 * over. Client bytes already read and not consumed by the driver are sent
 * to u first. Between two plain sockets the bytes move with splice(2) when
 * limits.splice is set, else through pool buffers; with layers on either
 * side app bytes move between the stacks. With u == NULL the flow is a
 * blackhole: the client reads EOF at once and what it sends is swallowed
 * until it closes. */
void conn_relay(conn *c, endpoint *u);

/* Ends the handshake and keeps the client connection open, reading and
 * discarding, until the client closes it (a SOCKS5 UDP association's
 * control connection). conn_touch keeps it from idling out. */
void conn_hold(conn *c);

/* Marks activity on the flow (for the idle timeout) from outside the relay. */
void conn_touch(conn *c);

/* Closes the connection once what was queued with conn_write is sent. */
void conn_close_after_write(conn *c);

/* Closes at once; on_close follows when the handles are closed. Safe to call
 * more than once. */
void conn_close(conn *c);

/* Closes every connection of the worker (a stop ends the flows). */
void conn_close_all(worker *w);

/* The outbound version the flow's upstream was opened on (conn_relay
 * takes it from the endpoint; an inbound that keeps an upstream of its
 * own, HTTP's, says it here). */
void conn_set_origin(conn *c, uint64_t origin);

/* A drain (seed 002): closes every connection of the worker whose upstream
 * was opened on origin, each logged at debug as "relay from <peer> ended:
 * the outbound this flow was opened on was drained". Returns how many. */
size_t conn_drain(worker *w, uint64_t origin);

#endif
