/* grpc.h - the gRPC transport ("gun"): one flow as one HTTP/2 stream of Hunk messages (nghttp2), client and server. */
#ifndef ETM_TRANSPORT_GRPC_H
#define ETM_TRANSPORT_GRPC_H

#include <stdbool.h>
#include <stddef.h>

#include "base/layer.h"
#include "transport/gun.h"

/* The layer follows layer.h; its ops name is "grpc". It carries one flow on
 * one HTTP/2 connection (over TLS with ALPN h2, or plain h2c): the layer
 * stack is per connection, so a connection holds one stream.
 *
 * Request. The client's start() writes the connection preface, its
 * SETTINGS and
 *   :method POST, :scheme https|http, :path /<service_name>/Tun,
 *   :authority <host>, content-type: application/grpc, te: trailers
 * and the layer is ready once the server's SETTINGS have arrived (an
 * HTTP/2 server answered). The server announces
 * SETTINGS_MAX_CONCURRENT_STREAMS 1, takes the first request whose path,
 * method and content-type fit, answers :status 200 and content-type
 * application/grpc, and is ready then. Any further stream is reset with
 * REFUSED_STREAM.
 *
 * Data. Each from_above piece (at most GRPC_PIECE_MAX bytes) goes out as
 * one gRPC message holding one Hunk (gun.h); the data of every Hunk
 * received goes up as bytes. HTTP/2 flow control is nghttp2's: the layer
 * takes no more wire bytes than it has room for data above, so a full
 * stack stops the reads and the peer's window closes.
 *
 * End of stream. shutdown() ends this side of the stream: the client's
 * last DATA frame carries END_STREAM, the server sends the trailers
 * grpc-status 0. The layers below and the socket stay open
 * (shutdown_in_band), as the peer's HTTP/2 connection must. The peer's
 * END_STREAM is this layer's end (peer_ended): the stack reports EOF above
 * once the bytes before it are taken.
 *
 * Errors (texts from the table in grpc.c, asserted word for word by
 * tests/unit/test_grpc.c):
 *   client  LAYER_ERR_AUTH   "grpc: refused: HTTP status <n>"
 *                            "grpc: refused: grpc-status <n>[: <grpc-message>]"
 *   server  LAYER_ERR_AUTH   "grpc: wrong path \"<path>\" (expected \"<path>\")"
 *                            (answered grpc-status 12, UNIMPLEMENTED)
 *           LAYER_ERR_PROTO  "grpc: bad request: method <m>" (answered :status 405)
 *                            "grpc: bad request: content-type \"<t>\"" (415)
 *           A refusal's error comes once the peer closed the refused stream,
 *           so the answer is read before the connection closes; until then
 *           the layer is not ready (the handshake timeout bounds it).
 *   both    LAYER_ERR_CLOSED "grpc: the peer reset the stream: <HTTP/2 error>"
 *           LAYER_ERR_CLOSED "grpc: the stream ended in the middle of a message"
 *           LAYER_ERR_PROTO  "grpc: http2: <nghttp2's text>"
 *           LAYER_ERR_PROTO  the reader's texts (gun.h)
 *           LAYER_ERR_STATE  "grpc: send after shutdown"
 *           LAYER_ERR_NOMEM  "grpc: out of memory" */

/* Largest piece from_above puts in one message: one HTTP/2 DATA frame of
 * the default SETTINGS_MAX_FRAME_SIZE with its gun header. */
#define GRPC_PIECE_MAX (16384 - GUN_HEADER_MAX)

/* The stream window each side grants (SETTINGS_INITIAL_WINDOW_SIZE) and
 * the connection's: the bytes a peer may send before the reader took any. */
#define GRPC_WINDOW (1024 * 1024)

/* The service name when the config names none (v2ray's and Xray's). */
#define GRPC_DEFAULT_SERVICE "GunService"

/* Limits on the configured service name and host: a name goes into
 * :path, the host into :authority. */
#define GRPC_SERVICE_MAX 256
#define GRPC_HOST_MAX 261

typedef struct grpc_client_config {
	const char *service_name; /* borrowed for the call */
	const char *host;         /* :authority; borrowed for the call */
	bool tls;                 /* :scheme https (else http: h2c) */
} grpc_client_config;

/* A client layer. Returns NULL with the reason in err[0, err_size):
 *   "grpc: bad service name \"<name>\"" (empty, over GRPC_SERVICE_MAX, or
 *                                       holding a space, control byte or '?')
 *   "grpc: bad host \"<host>\""
 *   "grpc: out of memory" */
__attribute__((warn_unused_result)) layer *grpc_client_new(const grpc_client_config *cfg,
                                                           char *err, size_t err_size);

/* A server layer for /<service_name>/Tun. Returns NULL with
 * "grpc: bad service name ..." or "grpc: out of memory" in err. */
__attribute__((warn_unused_result)) layer *grpc_server_new(const char *service_name, char *err,
                                                           size_t err_size);

/* Whether name may be a service name; when not, "grpc: bad service name
 * ..." goes into err (as grpc_*_new would say). */
bool grpc_service_name_ok(const char *name, char *err, size_t err_size);

#endif
