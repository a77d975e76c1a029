/* conn_int.h - the connection's insides, shared by conn.c (handshake, plain relay) and conn_layer.c (layered I/O). */
#ifndef ETM_RUNTIME_CONN_INT_H
#define ETM_RUNTIME_CONN_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "runtime/conn.h"
#include "runtime/splice.h"
#include "transport/stack.h"

/* A handshake reply is small; the write carries its bytes inline. */
typedef struct reply_req {
	uv_write_t req;
	size_t len;
	uint8_t data[];
} reply_req;

typedef struct wslot {
	uv_write_t req;
	uint8_t *buf; /* from the worker's pool; NULL when the slot is free */
} wslot;

/* One direction of the relay: from -> to. */
typedef struct dir {
	uv_stream_t *from, *to;
	wslot slots[RELAY_MAX_PENDING];
	unsigned pending;
	bool reading, eof, shut_sent, done;
	uv_shutdown_t shut;
} dir;

/* One socket of the layered relay. All writes to a stacked socket come
 * from its stack's wire output; a plain socket takes app bytes directly. */
typedef struct side {
	uv_stream_t *s;
	stack *st;      /* borrowed from the conn; NULL: plain */
	wslot slots[RELAY_MAX_PENDING];
	unsigned pending;
	uint8_t *rbuf;  /* the last read's pool buffer, while bytes of it remain */
	size_t roff, rlen;
	bool reading, eof;
	bool shut_sent;   /* the layers' orderly end is queued */
	bool shut_issued; /* the TCP shutdown is requested */
	bool shut_done;   /* and finished */
	uv_shutdown_t shut;
} side;

/* HANDSHAKE and DRIVEN feed the driver the client's bytes; RELAY and
 * BLACKHOLE do not. */
enum conn_state { HANDSHAKE, DRIVEN, RELAY, SPLICE, LAYERED, BLACKHOLE, CLOSING };

struct conn {
	worker *w;
	conn *prev, *next; /* the worker's list */
	const conn_driver *driver;
	void *drv;
	conn_limits limits;
	enum conn_state state;

	uv_tcp_t client;
	uv_tcp_t *up; /* owned, malloc'd; NULL before the relay or for a blackhole */
	uv_timer_t timer;
	uv_timer_t deadline; /* the driver's own deadline */
	int open_handles; /* closes still to come before the free */

	struct sockaddr_storage peer, local;
	bool source_counted; /* peer holds one of the guard's counts */

	uint8_t *hs;      /* handshake bytes not yet consumed (a pool buffer) */
	size_t hs_len;
	bool paused;
	bool client_eof; /* the client's EOF came during the handshake or driven */
	bool close_after_write;
	unsigned replies; /* reply writes in flight */

	dir d[2]; /* [0] client -> up, [1] up -> client */
	splicer *sp; /* the SPLICE state's relay */
	uint64_t relayed; /* bytes the buffered relay moved, toward SPLICE_AFTER */
	uint64_t last_active;

	/* Layers (conn_layer.c): a stack on either side makes the relay a
	 * layered one, moving app bytes between the stacks. */
	stack *cst; /* the client's layers (the inbound's transport), owned; NULL: plain */
	stack *ust; /* the upstream's layers (TLS, WS, a proxy client), owned */
	side sd[2]; /* [0] the client socket, [1] the upstream socket */
};

/* conn.c */
void conn_on_timer(uv_timer_t *t);
void conn_feed_driver(conn *c);
bool conn_fed(const conn *c);

/* A driven connection's driver leaves a full handshake buffer unconsumed
 * because it holds the next request (HTTP pipelining: it waits until the
 * response in flight has ended): reading pauses, and the driver's
 * conn_resume takes it up again; the bytes beyond wait in the socket.
 * Returns false (nothing done) during the handshake, where a full buffer
 * is a request larger than any accepted. */
bool conn_hold_full(conn *c);
void conn_leave_handshake(conn *c);
/* A libuv alloc_cb for a conn's sockets: one buffer of the worker's pool
 * (none when the pool is out, which libuv reports as UV_ENOBUFS). */
void conn_alloc_pool(uv_handle_t *h, size_t suggested, uv_buf_t *buf);

/* conn_layer.c */
/* Bytes read from a stacked client during the handshake. Takes the pool
 * buffer. */
void conn_layer_hs_read(conn *c, uint8_t *buf, size_t n);
/* A reply to a stacked client. Returns 0 or -1. */
int conn_layer_write(conn *c, const uint8_t *data, size_t len);
/* Starts the layered relay between the client and c->up. */
void conn_layer_relay(conn *c);
/* Re-offers a paused stacked client's leftover bytes. */
void conn_layer_hs_resume(conn *c);
/* Every reply to a stacked client is on the wire. */
bool conn_layer_written_all(const conn *c);
/* Releases the layered state's buffers (the handles close with the conn). */
void conn_layer_free(conn *c);

#endif
