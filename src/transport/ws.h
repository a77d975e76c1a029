/* ws.h - the WebSocket layer (RFC 6455): the HTTP/1.1 upgrade, then binary messages framed by ws_frame, client and server. */
#ifndef ETM_TRANSPORT_WS_H
#define ETM_TRANSPORT_WS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/layer.h"

/* The layer follows layer.h; its ops name is "ws".
 *
 * Upgrade (RFC 6455 section 4). The client's start() writes
 *   GET <path> HTTP/1.1, Host, Upgrade: websocket, Connection: Upgrade,
 *   Sec-WebSocket-Key, Sec-WebSocket-Version: 13
 * and the layer is ready once a 101 with the right Sec-WebSocket-Accept has
 * arrived. The server reads a request head of at most WS_HEAD_MAX bytes,
 * answers 404 to another path (only the part before '?' is compared), 400
 * to a request that is no valid upgrade, 426 to another version, else 101,
 * and is ready once the 101 is written. Heads are parsed in place: until a
 * whole head has arrived from_below consumes nothing, and the caller offers
 * the same bytes again with more appended (the stack does, as its queues
 * keep what a layer did not take).
 *
 * Data. Every from_above piece goes out as one binary message (at most
 * WS_MSG_OUT_MAX bytes each, and no more than down has room for: a frame is
 * written whole, masked as it is copied); the payload of every text or
 * binary frame received goes up as bytes, unmasked as it is copied, message
 * boundaries dropped: the layer carries a byte stream, as Xray's and
 * v2ray's WebSocket transports do. A ping is answered with a pong. Client
 * frames are masked with keys drawn from ChaCha20 keyed by the config's
 * seed, so they are unpredictable to anyone without it (RFC 6455 section
 * 5.3) while the layer reads no random source.
 *
 * End of stream. shutdown() sends a close frame (1000). A close frame from
 * the peer ends the stream: the layer answers it at once (echoing its
 * code), from_below delivers everything before it and drops whatever
 * follows, ready() stays true, and from_above consumes and drops app bytes
 * from then on (a WebSocket has no half-close: the peer reads nothing after
 * its close). It is not an error; the shell learns EOF from the socket, or
 * from ws_peer_closed() (a server should then close the TCP connection, RFC
 * 6455 section 7.1.1). A close in the middle of a fragmented message is
 * LAYER_ERR_CLOSED.
 *
 * Errors. Where the protocol has an answer (an HTTP error status, a close
 * frame 1002 or 1009) it is handed to down first and the error comes from
 * the next call. Texts, from the table in ws.c, asserted word for word by
 * tests/unit/test_ws.c:
 *   client  LAYER_ERR_AUTH  "ws: upgrade refused: <status line>" ("403 Forbidden")
 *           LAYER_ERR_PROTO "ws: bad Sec-WebSocket-Accept"
 *                           "ws: bad upgrade response: <what>"
 *                           "ws: upgrade response head too large"
 *   server  LAYER_ERR_AUTH  "ws: wrong path \"/x\" (expected \"/vless\")"
 *           LAYER_ERR_PROTO "ws: bad upgrade request: <what>"
 *                           "ws: unsupported Sec-WebSocket-Version"
 *                           "ws: upgrade request head too large"
 *   both    LAYER_ERR_PROTO "ws: frame too large" (over WS_FRAME_MAX)
 *                           "ws: bad frame" (RFC 6455 section 5 broken; 1002)
 *                           "ws: the peer sends pings and does not read the answers"
 *                           "ws: more than 4 pings before any data"
 *           LAYER_ERR_CLOSED "ws: peer closed in the middle of a message"
 *           LAYER_ERR_STATE "ws: send after shutdown"
 *           LAYER_ERR_NOMEM "ws: out of memory" */

/* An upgrade head (request or response) larger than this is refused:
 * nginx's default large_client_header_buffers line (8 KiB); a real
 * upgrade is a few hundred bytes. */
#define WS_HEAD_MAX 8192

/* Largest frame payload accepted. Xray and v2ray send at most a few tens of
 * KiB per frame; 1 MiB leaves room and still refuses a peer that announces
 * 2^63 bytes. Payloads stream through: nothing of this size is buffered. */
#define WS_FRAME_MAX (1024 * 1024)

/* Control replies (pongs, a close) the layer may hold for a peer that does
 * not read them: a peer that keeps pinging past this is closed, "ws: the peer
 * sends pings and does not read the answers". Data never waits here (a
 * data frame is written only whole, into room below), so the bound is the
 * pongs': 16 of at most 131 bytes each. */
#define WS_CONTROL_QUEUE_MAX 16

/* Pings a peer may send before its first data frame (a proxy client sends
 * its request first; pings before it only cost the server): more is
 * "ws: more than 4 pings before any data". */
#define WS_EARLY_PINGS_MAX 4

/* Largest message from_above makes: with its 8-byte client header (2 +
 * 16-bit length + mask key) it fills one 16 KiB TLS record. */
#define WS_MSG_OUT_MAX (16384 - 8)

/* Limits on the configured path and host: both go on one request line or
 * header line, which must stay far below WS_HEAD_MAX at the peer. */
#define WS_PATH_MAX 512
#define WS_HOST_MAX 261 /* a 255-byte name, ':' and a port */

#define WS_SEED_LEN 32

typedef struct ws_client_config {
	const char *path; /* request target, "/..." (a query is allowed); borrowed for the call */
	const char *host; /* Host header value; borrowed for the call */
	/* Random bytes from the shell (getrandom): the Sec-WebSocket-Key and
	 * every mask key are drawn from ChaCha20 keyed by them. */
	uint8_t seed[WS_SEED_LEN];
} ws_client_config;

/* A client layer. Returns NULL with the reason in err[0, err_size):
 *   "ws: bad path \"<path>\"" (not "/...", over WS_PATH_MAX, or holding a
 *                             space or control byte)
 *   "ws: bad host \"<host>\"" (empty, over WS_HOST_MAX, same bytes)
 *   "ws: out of memory" */
__attribute__((warn_unused_result)) layer *ws_client_new(const ws_client_config *cfg, char *err,
                                                         size_t err_size);

/* A server layer accepting upgrades to path (copied). Returns NULL with
 * "ws: bad path ..." or "ws: out of memory" in err. */
__attribute__((warn_unused_result)) layer *ws_server_new(const char *path, char *err,
                                                         size_t err_size);

/* Whether the peer's close frame has arrived (see "End of stream"); false
 * for a layer this module did not make. */
bool ws_peer_closed(const layer *l);

/* Sec-WebSocket-Accept for a Sec-WebSocket-Key: base64(SHA-1(key + the
 * RFC 6455 GUID)), section 4.2.2 item 5.4; out gets 28 characters and a
 * NUL. Returns 0, or -1 for a key over 64 bytes or when OpenSSL fails
 * (out is then ""). */
__attribute__((warn_unused_result)) int ws_accept_key(const char *key, size_t key_len,
                                                      char out[29]);

#endif
