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

#endif
