/* http_parse.h - HTTP/1.1 message heads, field lists and body framing, parsed in place (RFC 9112). */
#ifndef ETM_PROTO_HTTP_PARSE_H
#define ETM_PROTO_HTTP_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/addr.h"

/* Largest head (start line, fields, blank line) accepted in either
 * direction. 16 KiB is twice nginx's default large header buffer (8 KiB) and
 * above Apache's 8190-byte line limit, so real browsers and servers fit; the
 * shell's read buffer must hold at least this much. */
#define HTTP_HEAD_MAX 16384

/* Field lines per head: Apache's LimitRequestFields default. */
#define HTTP_FIELDS_MAX 100

/* A chunk-size line with its extensions (RFC 9112 7.1.1 lets a recipient
 * bound them): a 16-digit size plus generous room for extensions. */
#define HTTP_CHUNK_LINE_MAX 1024

/* A chunked trailer section (RFC 9112 7.1.2) is a second field block. */
#define HTTP_TRAILER_MAX HTTP_HEAD_MAX

/* Connection options a head may list (each names a field to remove);
 * clients send one or two. */
#define HTTP_CONN_OPTIONS_MAX 16

/* Decoded Basic credentials ("user:password") longer than this are refused;
 * config accounts are far shorter. */
#define HTTP_CREDENTIALS_MAX 512

/* A slice of the head the parser was given: in[off, off + len). */
typedef struct http_span {
	uint32_t off;
	uint32_t len;
} http_span;

typedef struct http_field {
	http_span name;  /* a token, case as received */
	http_span value; /* leading and trailing OWS excluded (RFC 9112 5.1) */
} http_field;

/* A parsed head. Spans point into the caller's bytes, nothing is copied. */
typedef struct http_head {
	size_t len;       /* bytes of the head, its blank line included */
	http_span start;  /* the start line without its CRLF */
	http_span method; /* request only */
	http_span target; /* request only */
	int status;       /* response only: 100..999 */
	int minor;        /* HTTP/1.minor: 0, or 1 for any later 1.x (RFC 9110 2.5) */
	size_t n_fields;
	http_field fields[HTTP_FIELDS_MAX];
} http_head;

/* Parse errors, each mapped by the proxy to its own answer. */
enum {
	HTTP_PARSE_START = -1,      /* malformed request or status line */
	HTTP_PARSE_FIELD = -2,      /* malformed field line (or whitespace before ':') */
	HTTP_PARSE_OBS_FOLD = -3,   /* a line folded onto the previous one (RFC 9112 5.2) */
	HTTP_PARSE_LINE_END = -4,   /* a CR or LF that is not part of a CRLF (RFC 9112 2.2) */
	HTTP_PARSE_VERSION = -5,    /* an HTTP major version other than 1 */
	HTTP_PARSE_TOO_BIG = -6,    /* no blank line within HTTP_HEAD_MAX bytes */
	HTTP_PARSE_TOO_MANY = -7,   /* more than HTTP_FIELDS_MAX field lines */
};

/* Parses the request head at the start of in[0, len). Returns the head's
 * length (> 0) with *h filled, 0 when the blank line has not arrived yet
 * (feed the same bytes again with more appended), or an HTTP_PARSE_* error.
 * *scan remembers how far the bytes were already checked, so re-feeding a
 * growing buffer stays linear; start it at 0 for each new head. Line ends
 * must be CRLF: a bare LF or CR is an error, not a terminator. */
__attribute__((warn_unused_result)) ssize_t http_parse_request(const uint8_t *in, size_t len,
                                                               size_t *scan, http_head *h);

/* The same for a response head ("HTTP/1.1 200 OK"); h->status is set. */
__attribute__((warn_unused_result)) ssize_t http_parse_response(const uint8_t *in, size_t len,
                                                                size_t *scan, http_head *h);

/* Steps through a comma-separated list value (RFC 9110 5.6.1): sets
 * *elem and *elem_len to the next element with OWS trimmed, skipping empty ones,
 * and returns true; false at the end. *pos starts at 0. */
bool http_list_next(const uint8_t *v, size_t len, size_t *pos, const uint8_t **elem,
                    size_t *elem_len);

/* Whether p[0, n) equals the lowercase ASCII text lower, ignoring case. */
bool http_eq_nocase(const uint8_t *p, size_t n, const char *lower);

/* How a message body ends (RFC 9112 6.3). */
typedef enum http_body_mode {
	HTTP_BODY_NONE = 0, /* no body: the message ended with its head */
	HTTP_BODY_LENGTH,   /* Content-Length bytes */
	HTTP_BODY_CHUNKED,  /* the chunked coding, trailer section included */
	HTTP_BODY_CLOSE,    /* until the sender closes (responses only) */
} http_body_mode;

/* Tracks where a body ends while its bytes pass through unchanged. A
 * zeroed struct is a finished empty body. */
typedef struct http_body {
	http_body_mode mode;
	bool done;
	uint8_t state;   /* chunked: where in the framing */
	uint64_t left;   /* LENGTH: bytes to go; CHUNKED: data bytes left in the chunk */
	uint32_t line;   /* chunked: bytes of the current size line */
	uint32_t trailer; /* chunked: bytes of the trailer section so far */
} http_body;

enum {
	HTTP_BODY_MALFORMED = -1, /* chunked framing broken or over its bounds */
};

/* Starts tracking a body; length is used for HTTP_BODY_LENGTH. */
void http_body_start(http_body *b, http_body_mode mode, uint64_t length);

/* Walks in[0, len): returns how many of those bytes belong to the body
 * (they are forwarded as they are), setting b->done when its last byte has
 * been seen; or HTTP_BODY_MALFORMED. A finished body takes 0 bytes;
 * HTTP_BODY_CLOSE takes everything and only the caller can end it. */
__attribute__((warn_unused_result)) ssize_t http_body_step(http_body *b, const uint8_t *in,
                                                           size_t len);

/* Whether the next bytes http_body_step takes are content (b->left of them
 * in a row): inside a chunk's data, or anywhere in an unfinished LENGTH
 * body. A caller that decodes the chunked coding feeds the walker the data
 * in runs and the framing one byte at a time, copying only the runs. */
bool http_body_in_data(const http_body *b);

/* Parses a Content-Length value: 1*DIGIT, or a list of identical such
 * values (RFC 9112 6.3 item 5). Returns 0 with *n set, or -1. Values above
 * 2^62 are refused (no real body is that large). */
__attribute__((warn_unused_result)) int http_parse_length(const uint8_t *v, size_t len,
                                                          uint64_t *n);

/* What a head's fields say about framing, persistence and credentials. */
typedef struct http_meta {
	bool has_cl;          /* Content-Length present... */
	bool cl_bad;          /* ...but invalid or with differing values */
	uint64_t cl;
	bool has_te;          /* Transfer-Encoding present */
	bool te_chunked_last; /* its final coding is chunked */
	size_t te_codings;    /* how many codings it lists */
	bool conn_close;      /* "close" in Connection or Proxy-Connection */
	bool conn_keep;       /* "keep-alive" there */
	size_t n_options;     /* other Connection options: fields to remove */
	const uint8_t *option[HTTP_CONN_OPTIONS_MAX];
	size_t option_len[HTTP_CONN_OPTIONS_MAX];
	bool options_over;    /* more than HTTP_CONN_OPTIONS_MAX of them */
	int auth;             /* index of the first Proxy-Authorization field, -1 */
} http_meta;

/* Reads the fields of h (parsed from in) into *m. Can't fail. */
void http_meta_read(const uint8_t *in, const http_head *h, http_meta *m);

/* Parses host [":" port] (RFC 3986 3.2.2, 3.2.3): a name of letters,
 * digits and "-._~", an IPv4 address or "[" IPv6 "]" (percent-encoding is
 * not taken). An absent or empty port takes default_port; 0 there means a
 * port is required (CONNECT, RFC 9110 9.3.6). Returns 0 with *d set
 * (network TCP), or -1. */
__attribute__((warn_unused_result)) int http_parse_authority(const uint8_t *p, size_t n,
                                                             uint16_t default_port, addr_dest *d);

/* Decodes Basic credentials "Basic <base64 of user:password>" (RFC 7617 2;
 * the scheme name is case-insensitive, RFC 9110 11.1) into out[0, cap).
 * Returns the decoded length with *user_len = the length of the user-id
 * (the password follows its colon), or -1. */
__attribute__((warn_unused_result)) ssize_t http_parse_basic(const uint8_t *v, size_t n,
                                                             uint8_t *out, size_t cap,
                                                             size_t *user_len);

#endif
