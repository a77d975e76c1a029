/* dns_frame.h - DNS messages framed on streams: 2-byte length prefixes (TCP, TLS) and DNS over HTTPS POSTs on HTTP/1.1; sans-io. */
#ifndef ETM_PROTO_DNS_FRAME_H
#define ETM_PROTO_DNS_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/http_parse.h"

/* The largest DNS message a stream carries: the 2-byte length prefix of
 * RFC 1035 4.2.2 / RFC 7766 8 cannot say more, and RFC 8484 6 holds a DoH
 * body to the same bound. */
#define DNS_FRAME_MAX 65535

/* ---- Length-prefixed messages: DNS over TCP (RFC 7766) and TLS (RFC 7858) ----
 *
 * Many messages may follow each other on one connection in either
 * direction (RFC 7766 6.2.1.1 pipelining; answers come in any order and
 * the caller matches them by id). The reader only cuts the stream. */

/* A reader of length-prefixed messages. Holds at most one message: 2 +
 * 65535 bytes inline, so embed it in a per-connection object rather than
 * on a stack. A zeroed struct is a reader at the start of a message. */
typedef struct dns_tcp_reader {
	uint8_t buf[2 + DNS_FRAME_MAX]; /* the prefix, then the message so far */
	size_t have;                    /* bytes of buf filled */
} dns_tcp_reader;

void dns_tcp_reader_init(dns_tcp_reader *r);

/* Takes bytes from d[0, n) into r, stopping at the end of one message:
 * *used says how many it took. Returns
 *    1  a message is complete: *msg, *len point at it inside r, valid until
 *       the next call; the next call starts a new message (feed it
 *       d + *used, n - *used);
 *    0  more bytes are needed: all n were taken;
 *   -1  the prefix announced a zero-length message, which RFC 1035 4.2.2
 *       framing cannot carry: a protocol error, the connection must go.
 *       The reader stays failed: later calls take nothing and return -1. */
__attribute__((warn_unused_result)) int dns_tcp_feed(dns_tcp_reader *r, const uint8_t *d, size_t n,
                                                     size_t *used, const uint8_t **msg,
                                                     size_t *len);

/* The 2-byte big-endian prefix of a message of len bytes (len <=
 * DNS_FRAME_MAX). Can't fail. */
void dns_tcp_prefix(uint8_t out[2], size_t len);

/* ---- DNS over HTTPS on HTTP/1.1, POST form (RFC 8484 4.1) ----
 *
 * Requests are pipelined on one keep-alive connection (RFC 9112 9.3.2), so
 * responses come back in request order and each must say where it ends. */

/* A response head larger than this is refused: a DoH answer's head is a
 * status line and a few fields, and 8 KiB is nginx's default header buffer
 * (the bound http_client.h puts on CONNECT answers too). */
#define DOH_HEAD_MAX 8192

/* Writes the POST request for msg[0, n) into out[0, cap):
 *
 *   POST <path> HTTP/1.1\r\n
 *   Host: <host>[:<port>]\r\n
 *   Content-Type: application/dns-message\r\n
 *   Accept: application/dns-message\r\n
 *   Content-Length: <n>\r\n
 *   \r\n
 *   <msg>
 *
 * host is the Host field's value without a port: a name or an IP address;
 * an IPv6 literal given bare (it holds a ':' and does not start with '[')
 * is put in brackets (RFC 3986 3.2.2). ":port" is appended when port !=
 * 443, the https default (RFC 9110 4.2.2). path starts with '/'. Returns
 * the request's length, or -1 when it does not fit in cap, host is empty,
 * path does not start with '/', host or path hold a CR, LF, space or other
 * control byte (bytes below 0x21 and 0x7f: they would forge or break a
 * line), or n > DNS_FRAME_MAX. out is left partly written on -1. */
__attribute__((warn_unused_result)) int doh_request(const char *host, uint16_t port,
                                                    const char *path, const uint8_t *msg,
                                                    size_t n, uint8_t *out, size_t cap);

/* A reader of DoH responses on one connection. About 8 KiB (the head) +
 * 64 KiB (the body) + small state: allocate one per upstream connection,
 * inside the connection's object, never on a stack. A zeroed struct is a
 * reader waiting for its first response. Fields are private. */
typedef struct doh_reader {
	uint8_t st;          /* where in a response (dns_frame.c) */
	uint8_t fail;        /* the failed reader's text */
	bool busy;           /* bytes of a response taken since the last one ended */
	bool closing;        /* the last complete response ends the connection */
	bool will_close;     /* the response under way does */
	size_t head_len;     /* head[0, head_len) received */
	size_t scan;         /* http_parse_response's restart point in head */
	size_t body_len;     /* body[0, body_len) decoded */
	http_body framing;   /* where the body ends: Content-Length or chunked */
	char status_text[48]; /* "the server answered <code>", when that failed it */
	uint8_t head[DOH_HEAD_MAX];
	uint8_t body[DNS_FRAME_MAX];
} doh_reader;

void doh_reader_init(doh_reader *r);

/* Feeds response bytes d[0, n); like dns_tcp_feed it stops at the end of
 * one response: *used says how many it took. Returns
 *    1  a whole 200 response with a body came: *body, *len point at the
 *       body inside r (chunked coding removed), valid until the next call;
 *       the reader is ready for the next response;
 *    0  more bytes are needed: all n were taken;
 *   -1  *err is one of (word for word):
 *       "dns: https: the server answered <code>"  any final status but 200
 *           (interim 1xx heads other than 101 are skipped, RFC 9110 15.2;
 *           a 101 answers no upgrade we asked for, so it is final);
 *       "dns: https: the answer is not application/dns-message"
 *           Content-Type missing or another type (RFC 8484 4.2.1);
 *           parameters after ';' are allowed, case does not matter;
 *       "dns: https: malformed response"  a bad status line, field line
 *           or chunked framing; a 200 without Content-Length or
 *           Transfer-Encoding: chunked (an answer without a length cannot
 *           be pipelined); Transfer-Encoding other than just chunked, or
 *           together with Content-Length (RFC 9112 6.3 item 3 calls that
 *           an error to handle) or in an HTTP/1.0 response (RFC 9112
 *           6.1); an empty body (no DNS message is empty);
 *       "dns: https: response head too large"  over DOH_HEAD_MAX bytes or
 *           HTTP_FIELDS_MAX field lines;
 *       "dns: https: answer too large"  a body over DNS_FRAME_MAX bytes.
 *       The reader stays failed: later calls take nothing and return -1
 *       with the same text.
 * Header names and the chunked trailer are read as RFC 9112 says (names
 * case-insensitive, trailer fields skipped). */
__attribute__((warn_unused_result)) int doh_feed(doh_reader *r, const uint8_t *d, size_t n,
                                                 size_t *used, const uint8_t **body, size_t *len,
                                                 const char **err);

/* The connection ended. Returns "dns: https: the server closed the
 * connection" when a response was in progress (some of it taken, and the
 * reader not failed) or expected is true (the caller awaits an answer),
 * else NULL. */
__attribute__((warn_unused_result)) const char *doh_reader_eof(const doh_reader *r,
                                                               bool expected);

/* Whether the last complete response ends the connection: it said
 * "Connection: close", or it was HTTP/1.0 without "keep-alive" (RFC 9112
 * 9.3). The caller sends nothing more on that connection. */
bool doh_reader_closing(const doh_reader *r);

#endif
