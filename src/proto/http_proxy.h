/* http_proxy.h - the sans-io HTTP/1.1 forward proxy server core: CONNECT tunnels and absolute-form requests. */
#ifndef ETM_PROTO_HTTP_PROXY_H
#define ETM_PROTO_HTTP_PROXY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "proto/http_parse.h"
#include "proto/proto.h"

/* The core speaks to two peers: the client (downstream) and one upstream
 * at a time. It is fed bytes from each side and hands back bytes for the
 * other side; it never touches a socket or a clock. One request is in
 * flight at a time: the next request's bytes stay unconsumed (with the
 * shell) until the response to the current one has ended.
 *
 * Input model (picohttpparser's): a head is parsed in place. Until a whole
 * head has arrived, feed returns 0 and the shell keeps the bytes and feeds
 * them again with more appended, so the shell's read buffer per direction
 * must hold at least HTTP_HEAD_MAX bytes. Body bytes are consumed as they
 * come and forwarded unchanged.
 *
 * Output model: bytes the core writes itself (200 Connection established,
 * 4xx/5xx answers) go to the client through a proto_out. Bytes relayed to
 * the other side come from the take functions, to be called after every
 * feed / opened / feed_upstream call until they return false: first a
 * rewritten head held in the core, then body bytes that are a slice of the
 * `in` just fed. Both are borrowed until the next call on the core (copy
 * them or write them out before calling again).
 *
 * The shell, client side:
 *   loop: n = http_server_feed(s, buf, len, &out, &ev)
 *         write out to the client; drain http_server_take_upstream to the upstream
 *         n < 0 or ev CLOSE: flush what was written, close both sides
 *         drop n bytes from buf; ev OPEN: close the current upstream (if
 *           any), dial ev.dest, feed nothing until the dial ends, then call
 *           http_server_opened or http_server_failed
 *         n == 0: wait for more client bytes (stop reading when buf is full)
 *         else loop
 *   client EOF: http_server_client_eof; close both on ev CLOSE.
 *   After http_server_opened, http_server_is_tunnel says whether it was a
 *   CONNECT: then the connection is a raw tunnel, the shell relays both
 *   ways (the unconsumed client bytes first, to the upstream) and feeds
 *   the core no more (feed returns PROTO_ERR_STATE).
 *
 * The shell, upstream side:
 *   loop: n = http_server_feed_upstream(s, buf, len, &out, &ev)
 *         write out to the client (a 502 the core made up), then drain
 *         http_server_take_client to the client
 *         n < 0 or ev CLOSE: flush, close both sides
 *         drop n bytes; n == 0: wait for more upstream bytes; else loop
 *   After every feed_upstream, run the client loop again on the client
 *   bytes held back: a finished response lets the next request through.
 *   upstream EOF or error: http_server_upstream_eof; close both on ev
 *   CLOSE, else just drop the upstream (the next request dials anew).
 *
 * Choices:
 * - Hop-by-hop fields are removed both ways (RFC 9110 7.6.1): Connection,
 *   the fields it names, Keep-Alive, Proxy-Connection, TE, Upgrade, and on
 *   requests Proxy-Authorization (consumed here, RFC 9110 11.7.2) and Host
 *   (regenerated from the target, RFC 9112 3.2.2). Content-Length and
 *   Transfer-Encoding are kept even when Connection names them, because
 *   bodies pass through unchanged and those fields frame them; removing
 *   them would smuggle. Trailer is kept: the trailer section passes through
 *   and RFC 9110 6.6.2 makes Trailer end-to-end. A Content-Length list of
 *   equal values (RFC 9112 6.3 item 5) is forwarded as one value.
 * - Upgrade is not supported on absolute-form requests: the field is
 *   removed, so the origin never answers 101 (a 101 is treated as a bad
 *   response). WebSocket clients use CONNECT through a proxy (RFC 6455 4.1).
 * - Requests carrying both Content-Length and Transfer-Encoding, a coding
 *   list other than exactly "chunked", or Transfer-Encoding on HTTP/1.0 are
 *   refused (RFC 9112 6.1 allows it and it closes the smuggling door).
 * - The request version is forwarded as received (so an HTTP/1.0 client
 *   gets HTTP/1.0 framing from the origin). The core adds "Connection:
 *   close" upstream when the client connection ends after this exchange,
 *   and "Connection: keep-alive" both ways for a persistent HTTP/1.0 client.
 * - 407 and every other answer close the connection (Connection: close):
 *   clients retry with credentials on a new connection, and no rejected
 *   body has to be skipped. Credentials are checked on every request; a
 *   request by another account is a new flow (a new OPEN).
 * - No deadlines: idle and slow-head timeouts are the shell's to apply. */

/* The rewritten head gains at most a Host line and a Connection line over
 * the received one; 256 bytes covers both. */
#define HTTP_OUT_HEAD_MAX (HTTP_HEAD_MAX + 256)

/* A shell-given dial failure text is cut to this many bytes in the answer. */
#define HTTP_REASON_MAX 200

/* The state of one client connection. Treat the fields as private; a
 * zeroed struct is a core with no accounts waiting for a request. */
typedef struct http_server {
	const proto_account *users; /* borrowed for the core's life; NULL = no auth */
	size_t n_users;
	uint8_t state;
	size_t scan;        /* head bytes already checked (parser restart point) */
	bool connect;       /* the request being dialled is a CONNECT */
	bool head_method;   /* HEAD: the response has no body */
	bool client_10;     /* the client speaks HTTP/1.0 */
	bool client_close;  /* close the client once this response ends */
	http_body req_body;
	http_body resp_body;
	uint8_t resp_phase;
	bool up_open;       /* an upstream is connected */
	bool up_reusable;   /* and may carry the next request */
	int up_user;
	addr_dest up_dest;
	int user;           /* account of the request in flight, -1 for none */
	addr_dest dest;     /* destination of the request in flight */
	/* Output handed out by the take functions. */
	const uint8_t *up_body; /* slice of the last feed's in */
	size_t up_body_len;
	const uint8_t *cl_body; /* slice of the last feed_upstream's in */
	size_t cl_body_len;
	size_t head_len;        /* rewritten head in head[], for... */
	uint8_t head_to;        /* ...this side (0 none, 1 upstream, 2 client) */
	uint8_t head[HTTP_OUT_HEAD_MAX]; /* a request head waits here while dialling */
} http_server;

/* Starts a core. users[0, n_users) are the accounts (proto.h; borrowed, must
 * outlive s); with none, requests need no credentials. */
void http_server_init(http_server *s, const proto_account *users, size_t n_users);

/* Feeds client bytes. Returns how many of in[0, len) were consumed (0 =
 * need more, or the bytes wait for the current response to end), or a
 * PROTO_ERR_*: PROTO_ERR_TOO_BIG for a head over HTTP_HEAD_MAX or
 * HTTP_FIELDS_MAX fields (out holds the 431 answer), PROTO_ERR_STATE when
 * called while dialling, tunnelling or closed. out: bytes for the client.
 * ev: PROTO_EV_OPEN (dial ev->dest, ev->user = account or -1), or
 * PROTO_EV_CLOSE (send out, close; ev->reason says why), else NONE. */
__attribute__((warn_unused_result)) ssize_t http_server_feed(http_server *s, const uint8_t *in,
                                                             size_t len, proto_out *out,
                                                             proto_event *ev);

/* The dial of the last OPEN succeeded. For CONNECT, writes "200 Connection
 * established" into out and the connection becomes a tunnel; otherwise the
 * rewritten request head becomes available to http_server_take_upstream.
 * Returns 0, or PROTO_ERR_STATE when no dial was pending. */
__attribute__((warn_unused_result)) int http_server_opened(http_server *s, proto_out *out);

/* The dial of the last OPEN failed: writes 502 Bad Gateway (504 Gateway
 * Timeout for PROTO_DIAL_TIMED_OUT, 403 Forbidden for NOT_ALLOWED) with a
 * text/plain body naming the failure and, when reason is not NULL, the
 * shell's text (printable ASCII kept, cut to HTTP_REASON_MAX). The shell
 * sends out and closes. Returns 0, or PROTO_ERR_STATE when no dial was
 * pending. */
__attribute__((warn_unused_result)) int http_server_failed(http_server *s, proto_dial_error e,
                                                           const char *reason, proto_out *out);

/* Whether the connection is now a raw tunnel (a CONNECT that
 * http_server_opened answered): the shell relays and calls the core no more. */
bool http_server_is_tunnel(const http_server *s);

/* No request is under way: the core waits for the next request head. */
bool http_server_between_requests(const http_server *s);

/* Whether the OPEN being dialled is a CONNECT (so a shell that sniffs may
 * answer it with http_server_opened before its dial ends). */
bool http_server_dialing_connect(const http_server *s);

/* Next bytes for the upstream from the last feed / opened call: returns
 * true with *data and *len set, false when there are none left. */
__attribute__((warn_unused_result)) bool http_server_take_upstream(http_server *s,
                                                                   const uint8_t **data,
                                                                   size_t *len);

/* Feeds upstream (response) bytes. Returns how many were consumed (0 = need
 * more), or PROTO_ERR_STATE when no exchange is under way. out receives a
 * 502 answer when the response head is unusable (ev CLOSE). ev CLOSE also
 * comes when the response ended and the connection must close (the client
 * asked, or the body ran until close). */
__attribute__((warn_unused_result)) ssize_t http_server_feed_upstream(http_server *s,
                                                                      const uint8_t *in,
                                                                      size_t len, proto_out *out,
                                                                      proto_event *ev);

/* Next bytes for the client from the last feed_upstream call (as above). */
__attribute__((warn_unused_result)) bool http_server_take_client(http_server *s,
                                                                 const uint8_t **data,
                                                                 size_t *len);

/* The upstream closed (EOF or error). Ends a body that runs until close,
 * answers 502 if no response head had arrived, or just forgets an idle
 * upstream (ev NONE: the next request dials anew). Returns 0, or
 * PROTO_ERR_STATE while dialling, tunnelling or closed. */
__attribute__((warn_unused_result)) int http_server_upstream_eof(http_server *s, proto_out *out,
                                                                 proto_event *ev);

/* The client closed its sending side. ev CLOSE when nothing is left to
 * answer (idle, or a request cut short); otherwise the response in flight
 * is delivered and its end brings the CLOSE. Returns 0, or PROTO_ERR_STATE
 * while tunnelling (the relay owns half-closes) or closed. */
__attribute__((warn_unused_result)) int http_server_client_eof(http_server *s, proto_event *ev);

#endif
