/* grpc.h - the gRPC ("gun") call as both sides judge it: its path, the headers a request and a response must carry, and the texts of a refusal. */
#ifndef ETM_TRANSPORT_GRPC_H
#define ETM_TRANSPORT_GRPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A flow is one call (runtime/gun_conn.h runs many on one HTTP/2
 * connection): POST /<service_name>/Tun with
 *   content-type: application/grpc, te: trailers
 * whose two directions are streams of Hunk messages (gun.h). The server
 * answers :status 200, content-type application/grpc, and ends with the
 * trailers grpc-status 0.
 *
 * Texts (from the table in grpc.c, asserted word for word by
 * tests/unit/test_grpc.c):
 *   client  "grpc: refused: HTTP status <n>"
 *           "grpc: refused: grpc-status <n>" or "...: <grpc-message>"
 *   server  "grpc: wrong path \"<path>\" (expected \"<path>\")"  grpc-status 12
 *           "grpc: bad request: method <m>"                      :status 405
 *           "grpc: bad request: content-type \"<t>\""            :status 415
 *   config  "grpc: bad service name \"<name>\"" */

/* The service name when the config names none (v2ray's and Xray's). */
#define GRPC_DEFAULT_SERVICE "GunService"

/* Limits on the configured service name and host: a name goes into
 * :path, the host into :authority. */
#define GRPC_SERVICE_MAX 256
#define GRPC_HOST_MAX 261

/* Header values kept; longer ones are cut (and then do not match). */
#define GRPC_VALUE_MAX 128

/* Whether name may be a service name (at most GRPC_SERVICE_MAX bytes, no
 * space, control byte, '?' or '#'); when not, "grpc: bad service name
 * ..." goes into err (which may be NULL). */
bool grpc_service_name_ok(const char *name, char *err, size_t err_size);

/* The headers of a request or a response that either side reads. */
typedef struct grpc_head {
	char path[GRPC_VALUE_MAX], method[16], type[GRPC_VALUE_MAX];
	char status[8], grpc_status[8], grpc_message[GRPC_VALUE_MAX];
} grpc_head;

/* Keeps one header field if it is one of grpc_head's. */
void grpc_head_add(grpc_head *h, const uint8_t *name, size_t name_len, const uint8_t *value,
                   size_t value_len);

/* The server's verdict on a request's head for the call path (as
 * "/<service>/Tun"). 0: take it. -1: refuse it with :status *status and,
 * when *grpc_status is not NULL, that grpc-status; why says so. */
int grpc_check_request(const grpc_head *h, const char *path, const char **status,
                       const char **grpc_status, char *why, size_t why_size);

/* The client's verdict on a response's head or trailers: 0, or -1 with
 * why. */
int grpc_check_response(const grpc_head *h, char *why, size_t why_size);

/* HTTP/2 frames that carry no payload the connection needs (PRIORITY,
 * WINDOW_UPDATE, PING, SETTINGS, an empty DATA without END_STREAM, and
 * the types above 0x9, which this server ignores) cost a worker time
 * and nothing else, so a client could keep one busy with them forever
 * (issue 32 N6: 110 MB/s of PRIORITY). They are counted in a token
 * bucket per connection: GRPC_CALM_BURST at once, refilled at
 * GRPC_CALM_RATE a second; the next one ends the connection (GOAWAY
 * ENHANCE_YOUR_CALM, RFC 9113 section 7). A client that sends a
 * WINDOW_UPDATE for the stream and one for the connection after every
 * 16 KiB DATA frame of ours (the most any known client does; nghttp2 and
 * Go send one per half or quarter window) stays under it up to 800 MB/s;
 * a flood is cut to a hundredth of what one connection could feed. */
#define GRPC_CALM_RATE 100000
#define GRPC_CALM_BURST GRPC_CALM_RATE

/* The bucket of one connection; a zeroed one is full. */
typedef struct grpc_calm {
	uint64_t last_ms; /* when it was last refilled */
	uint64_t spent;   /* tokens taken and not refilled */
	bool over;        /* the bound passed: stays so */
} grpc_calm;

/* Counts a received frame's header (type, payload length, flags) at
 * now_ms (the caller's clock, monotonic). 0: go on. -1: the bound is
 * passed (now or before): end the connection with ENHANCE_YOUR_CALM,
 * grpc_calm_message() says why. Cannot fail otherwise. */
int grpc_calm_frame(grpc_calm *b, uint8_t type, size_t length, uint8_t flags, uint64_t now_ms);

/* "grpc: more than 100000 frames without payload in a second (...):
 * GOAWAY ENHANCE_YOUR_CALM" */
const char *grpc_calm_message(void);

#endif
