/* layer.h - a sans-io stream layer (TLS, WebSocket, a proxy client's framing): wire-side bytes in, app-side bytes out, and back. */
#ifndef ETM_BASE_LAYER_H
#define ETM_BASE_LAYER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

/* A connection is one socket and an ordered stack of layers (ARCHITECTURE.md
 * section 4): layer 0 touches the wire, the last one touches the app. Each
 * layer is a pure state machine; the stack (stack.h) moves bytes between
 * them and the shell moves bytes between the stack and the socket.
 *
 * Output goes into a layer_buf the caller owns. A layer writes as much as
 * fits and keeps the rest pending inside itself (OpenSSL's BIO, a frame
 * half written); the caller drains pending output by calling again with
 * len 0 once it has made room. Calls never block and never fail for lack
 * of room: they just consume less. */

typedef struct layer_buf {
	uint8_t *data;
	size_t len; /* bytes held */
	size_t cap;
} layer_buf;

static inline size_t layer_buf_room(const layer_buf *b) { return b->cap - b->len; }

/* Append as much of in[0..len) as fits; returns the bytes taken. A buffer
 * with no room may have no data pointer, so nothing is copied then. */
static inline size_t layer_buf_put(layer_buf *to, const uint8_t *in, size_t len)
{
	size_t n = len < layer_buf_room(to) ? len : layer_buf_room(to);
	if (n) {
		memcpy(to->data + to->len, in, n);
		to->len += n;
	}
	return n;
}

/* Output a layer made but could not give yet: pend[*off, *len) goes into
 * to as far as it fits; once all of it is out, *off and *len go back to 0,
 * so the next output is written from pend[0]. */
static inline void layer_buf_put_pending(layer_buf *to, const uint8_t *pend, size_t *len,
                                         size_t *off)
{
	*off += layer_buf_put(to, pend + *off, *len - *off);
	if (*off == *len)
		*off = *len = 0;
}

/* Errors a layer returns. The layer's error() text says more. */
enum {
	LAYER_ERR_PROTO = -1,  /* the peer broke the protocol (bad record, bad frame, bad reply) */
	LAYER_ERR_AUTH = -2,   /* refused: certificate, credentials, the proxy said no */
	LAYER_ERR_CLOSED = -3, /* the peer ended the layer cleanly (close_notify, close frame)
	                          where data was still expected */
	LAYER_ERR_NOMEM = -4,
	LAYER_ERR_STATE = -5,  /* a call that does not fit the layer's state */
};

typedef struct layer layer;

typedef struct layer_ops {
	const char *name; /* "tls", "ws", "trojan", ... for logs */

	/* A client layer's first bytes (TLS ClientHello, the WebSocket
	 * upgrade request, a SOCKS greeting) into down. Called once, before
	 * anything else; NULL for layers that wait for the peer. Returns 0 or
	 * an error. */
	int (*start)(layer *l, layer_buf *down);

	/* Bytes from below (the wire side). Appends what they carry for the
	 * layer above into up, and anything the layer must answer on the wire
	 * (handshake messages, a pong) into down. Returns how many bytes of
	 * in it consumed, or an error. len 0 drains pending output. */
	ssize_t (*from_below)(layer *l, const uint8_t *in, size_t len, layer_buf *up,
	                      layer_buf *down);

	/* Bytes from above (the app side) to send. Appends their wire form
	 * into down. Returns how many it consumed (0 before ready), or an
	 * error. len 0 drains pending output. */
	ssize_t (*from_above)(layer *l, const uint8_t *in, size_t len, layer_buf *down);

	/* Whether the handshake is done: app bytes may flow both ways. */
	bool (*ready)(const layer *l);

	/* Whether the layer has become a pass-through: its handshake is done,
	 * it holds nothing it still owes either way, and from here on every
	 * byte crosses it unchanged both ways, up to the socket's own end (a
	 * proxy client's framing once its request and the server's answer are
	 * through: VLESS, Trojan, SOCKS5, HTTP CONNECT). Once true it stays
	 * true. A stack of such layers with nothing queued may be dropped
	 * (stack_passthrough), so the socket under it is plain again and a
	 * relay can splice it. NULL: never (TLS, WebSocket, gRPC, VMess,
	 * Shadowsocks change every byte). */
	bool (*passthrough)(const layer *l);

	/* The app has nothing more to send: the layer's orderly end
	 * (close_notify, a close frame) into down. NULL when the layer has
	 * none (the shell then just shuts the socket's write side). */
	int (*shutdown)(layer *l, layer_buf *down);
	/* Whether the peer ended its side inside this layer and every byte
	 * before the end went up (VMess's end chunk): the stack
	 * reports EOF above once they are taken, though the socket is still
	 * open. NULL: the end is the socket's. */
	bool (*peer_ended)(const layer *l);

	/* Time, for layers with timers of their own (HTTP/2 PING, a mux's
	 * keepalive, QUIC later): the layer reads no clock, it is told the
	 * time (ngtcp2's way). deadline returns the shell's loop time in ms at
	 * which on_time wants to run next, 0 for none; on_time runs then, with
	 * now, and may write into down (a ping) or fail. Both NULL for a layer
	 * without timers; the shell asks again after every call. */
	uint64_t (*deadline)(const layer *l);
	int (*on_time)(layer *l, uint64_t now, layer_buf *down);

	/* Text of the last error, for logs and dial failures ("tls:
	 * certificate verify failed", "ws: upgrade refused: 404"). */
	const char *(*error)(const layer *l);

	void (*free)(layer *l);
} layer_ops;

/* Every concrete layer starts with this. */
struct layer {
	const layer_ops *ops;
};

#endif
