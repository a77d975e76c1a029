/* http_client.h - HTTP CONNECT client layer (RFC 9110 9.3.6): a tunnel through an HTTP proxy. */
#ifndef ETM_PROTO_HTTP_CLIENT_H
#define ETM_PROTO_HTTP_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/addr.h"
#include "base/layer.h"

/* start() writes
 *
 *   CONNECT host:port HTTP/1.1\r\n
 *   Host: host:port\r\n
 *   [Proxy-Authorization: Basic base64(user ":" password)\r\n]
 *   \r\n
 *
 * (authority-form, RFC 9112 3.2.3; an IPv6 host in brackets; Basic per
 * RFC 7617). The layer is ready once a 2xx response head has arrived
 * (RFC 9110 9.3.6: any 2xx switches to tunnel mode; its Content-Length or
 * Transfer-Encoding are ignored, as that section requires). Interim 1xx
 * heads other than 101 are skipped (RFC 9110 15.2). Bytes after the head
 * are the tunnel's first bytes and go up in the same call. The head is
 * parsed in place: from_below consumes nothing until it is complete (the
 * stack offers the bytes again with more appended), so the buffer below
 * must hold HTTP_CLIENT_HEAD_MAX bytes; nor before the whole request is
 * out below, so what the layer sends never depends on buffer sizes.
 *
 * Errors (error() texts; the layer's name is "http"):
 *   LAYER_ERR_AUTH   "http: CONNECT refused: <code> <reason>" for any final
 *                    status but 2xx, e.g. "http: CONNECT refused: 407 Proxy
 *                    Authentication Required" (the reason as the proxy
 *                    sent it, printable ASCII only, cut to
 *                    HTTP_CLIENT_REASON_MAX; no reason, no space); a 101
 *                    is a refusal too, as CONNECT cannot switch protocols
 *   LAYER_ERR_PROTO  "http: malformed response from the proxy",
 *                    "http: response head too large",
 *                    and from start: "http: the destination is not a valid
 *                    host name", "http: the username holds a colon",
 *                    "http: username and password longer than 512 bytes"
 *   LAYER_ERR_CLOSED "http: server closed during the handshake", through
 *                    http_client_eof */

/* A response head larger than this is refused; proxies answer CONNECT with
 * a short head (nginx's default header buffer is 8 KiB too). */
#define HTTP_CLIENT_HEAD_MAX 8192

/* user ":" password longer than this is refused (HTTP_CREDENTIALS_MAX, the
 * bound the HTTP server core applies). */
#define HTTP_CLIENT_CREDENTIALS_MAX 512

/* The reason phrase kept in the error text. */
#define HTTP_CLIENT_REASON_MAX 96

/* A CONNECT client for dest (a domain must be an RFC 3986 reg-name:
 * letters, digits, "-._~", sub-delims and "%"; anything else, such as a
 * CR or LF that would forge a header line, fails start). Credentials are
 * used when username is non-NULL and non-empty (password NULL means
 * empty); both are copied. Returns NULL when out of memory or dest is
 * unset. */
layer *http_client_new(const addr_dest *dest, const char *username, const char *password);

/* Whether the handshake is still under way (not ready, not failed). l must
 * be an HTTP client layer. */
bool http_client_in_handshake(const layer *l);

/* The proxy closed its side. Returns 0 when the handshake was done or had
 * already failed, or LAYER_ERR_CLOSED with error() "http: server closed
 * during the handshake" when it was under way. */
__attribute__((warn_unused_result)) int http_client_eof(layer *l);

#endif
