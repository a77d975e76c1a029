/* http_client.c - HTTP CONNECT client layer: the request, then the proxy's response head. */
#include "proto/http_client.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/http_parse.h"

/* Every text this module shows, for logs and for tests to match word for word. */
enum text {
	T_REFUSED, /* a format: code, separator, reason */
	T_MALFORMED,
	T_HEAD,
	T_EOF,
	T_HOST,
	T_USER_COLON,
	T_CREDENTIALS,
	T_COUNT_,
};

static const char *const TEXTS[T_COUNT_] = {
	[T_REFUSED] = "http: CONNECT refused: %d%s%s",
	[T_MALFORMED] = "http: malformed response from the proxy",
	[T_HEAD] = "http: response head too large",
	[T_EOF] = "http: server closed during the handshake",
	[T_HOST] = "http: the destination is not a valid host name",
	[T_USER_COLON] = "http: the username holds a colon",
	[T_CREDENTIALS] = "http: username and password longer than 512 bytes",
};

#define B64_LEN(n) (4 * (((n) + 2) / 3))

/* "CONNECT " a " HTTP/1.1\r\n" "Host: " a "\r\n"
 * "Proxy-Authorization: Basic " b64 "\r\n" "\r\n" */
#define REQ_MAX                                                                                    \
	(8 + ADDR_TEXT_MAX + 11 + 6 + ADDR_TEXT_MAX + 2 + 27 +                                     \
	 B64_LEN(HTTP_CLIENT_CREDENTIALS_MAX) + 2 + 2)

typedef enum state {
	ST_NEW,  /* start not called yet */
	ST_HEAD, /* request sent: waiting for the final response head */
	ST_READY,
	ST_FAILED,
} state;

typedef struct http_client {
	layer base;
	state st;
	enum text bad;   /* a refusal start reports, or T_COUNT_ for none */
	int err_code;
	const char *err; /* TEXTS entry or err_buf */
	size_t scan;     /* http_parse_response's restart point in the current head */
	uint16_t req_len;
	uint16_t req_off;
	char err_buf[sizeof "http: CONNECT refused: 999 " + HTTP_CLIENT_REASON_MAX];
	uint8_t req[REQ_MAX];
	http_head head;
} http_client;

static const layer_ops client_ops;

static void flush(http_client *c, layer_buf *down)
{
	c->req_off = (uint16_t)(c->req_off + layer_buf_put(down, c->req + c->req_off,
	                                           (size_t)(c->req_len - c->req_off)));
}

static int fail(http_client *c, int code, enum text t)
{
	c->st = ST_FAILED;
	c->err_code = code;
	c->err = TEXTS[t];
	return code;
}

/* The refusal text: the status code and the reason phrase of the status
 * line (RFC 9112 4: HTTP-version SP status-code SP reason-phrase), with
 * bytes outside printable ASCII shown as '?'. */
static int refuse(http_client *c, const uint8_t *in)
{
	char reason[HTTP_CLIENT_REASON_MAX + 1];
	size_t n = 0;
	const http_span *s = &c->head.start;
	for (size_t i = 13; i < s->len && n < HTTP_CLIENT_REASON_MAX; i++) {
		uint8_t b = in[s->off + i];
		reason[n++] = b >= 0x20 && b < 0x7f ? (char)b : '?';
	}
	reason[n] = '\0';
	fail(c, LAYER_ERR_AUTH, T_REFUSED);
	int w = snprintf(c->err_buf, sizeof c->err_buf, TEXTS[T_REFUSED], c->head.status,
	                 n ? " " : "", reason);
	assert(w > 0 && (size_t)w < sizeof c->err_buf);
	(void)w;
	c->err = c->err_buf;
	return LAYER_ERR_AUTH;
}

/* Reads response heads from in[0, len): returns the bytes of the heads
 * taken (the final 2xx one makes the layer ready), or a LAYER_ERR_*. */
static ssize_t read_heads(http_client *c, const uint8_t *in, size_t len)
{
	size_t used = 0;
	while (c->st == ST_HEAD) {
		size_t avail = len - used;
		if (avail > HTTP_CLIENT_HEAD_MAX)
			avail = HTTP_CLIENT_HEAD_MAX;
		ssize_t r = http_parse_response(in + used, avail, &c->scan, &c->head);
		if (r < 0)
			return fail(c, LAYER_ERR_PROTO, r == HTTP_PARSE_TOO_BIG ? T_HEAD : T_MALFORMED);
		if (r == 0) {
			if (avail == HTTP_CLIENT_HEAD_MAX)
				return fail(c, LAYER_ERR_PROTO, T_HEAD);
			break;
		}
		int status = c->head.status;
		bool interim = status < 200 && status != 101; /* the final head follows */
		if (!interim && (status < 200 || status >= 300))
			return refuse(c, in + used);
		if (!interim)
			c->st = ST_READY;
		used += (size_t)r;
		c->scan = 0;
	}
	return (ssize_t)used;
}

static int client_start(layer *l, layer_buf *down)
{
	http_client *c = (http_client *)l;
	if (c->st != ST_NEW)
		return c->st == ST_FAILED ? c->err_code : LAYER_ERR_STATE;
	if (c->bad != T_COUNT_)
		return fail(c, LAYER_ERR_PROTO, c->bad);
	c->st = ST_HEAD;
	flush(c, down);
	return 0;
}

static ssize_t client_from_below(layer *l, const uint8_t *in, size_t len, layer_buf *up,
                                 layer_buf *down)
{
	http_client *c = (http_client *)l;
	if (c->st == ST_FAILED)
		return c->err_code;
	if (c->st == ST_NEW)
		return 0;
	flush(c, down);
	if (c->req_off < c->req_len)
		return 0; /* a response is read only once the whole request is out */
	size_t used = 0;
	if (c->st == ST_HEAD) {
		ssize_t r = read_heads(c, in, len);
		if (r < 0)
			return r;
		used = (size_t)r;
		if (c->st != ST_READY)
			return (ssize_t)used;
	}
	return (ssize_t)(used + layer_buf_put(up, in + used, len - used));
}

static ssize_t client_from_above(layer *l, const uint8_t *in, size_t len, layer_buf *down)
{
	http_client *c = (http_client *)l;
	if (c->st == ST_FAILED)
		return c->err_code;
	if (c->st == ST_NEW)
		return 0;
	flush(c, down);
	if (c->st != ST_READY)
		return 0;
	return (ssize_t)layer_buf_put(down, in, len);
}

static bool client_ready(const layer *l)
{
	return ((const http_client *)l)->st == ST_READY;
}

/* Past the final 2xx head, bytes cross unchanged. */
static bool client_passthrough(const layer *l)
{
	const http_client *c = (const http_client *)l;
	return c->st == ST_READY && c->req_off == c->req_len;
}

static const char *client_error(const layer *l)
{
	return ((const http_client *)l)->err;
}

static void client_free(layer *l)
{
	free(l);
}

static const layer_ops client_ops = {
	.name = "http",
	.start = client_start,
	.from_below = client_from_below,
	.from_above = client_from_above,
	.ready = client_ready,
	.passthrough = client_passthrough,
	.shutdown = NULL,
	.error = client_error,
	.free = client_free,
};

/* RFC 3986 3.2.2 reg-name: unreserved / pct-encoded / sub-delims. */
static bool reg_name_char(char ch)
{
	unsigned char b = (unsigned char)ch;
	if ((b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= '0' && b <= '9'))
		return true;
	return b != '\0' && strchr("-._~%!$&'()*+,;=", b) != NULL;
}

static size_t base64(const uint8_t *in, size_t n, char *out)
{
	static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t o = 0;
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)in[i] << 16;
		if (i + 1 < n)
			v |= (uint32_t)in[i + 1] << 8;
		if (i + 2 < n)
			v |= in[i + 2];
		out[o++] = a[v >> 18 & 63];
		out[o++] = a[v >> 12 & 63];
		out[o++] = i + 1 < n ? a[v >> 6 & 63] : '=';
		out[o++] = i + 2 < n ? a[v & 63] : '=';
	}
	return o;
}

/* Appends the text t to the request. */
static void put(http_client *c, const char *t, size_t n)
{
	assert(c->req_len + n <= REQ_MAX);
	memcpy(c->req + c->req_len, t, n);
	c->req_len = (uint16_t)(c->req_len + n);
}

#define PUT(c, lit) put(c, lit, sizeof lit - 1)

/* Checks the credentials and appends their field; sets c->bad instead when
 * they cannot be sent. */
static void put_credentials(http_client *c, const char *username, const char *password)
{
	size_t ul = strlen(username), pl = password ? strlen(password) : 0;
	if (memchr(username, ':', ul)) { /* RFC 7617 2: the user-id has no colon */
		c->bad = T_USER_COLON;
		return;
	}
	if (ul + 1 + pl > HTTP_CLIENT_CREDENTIALS_MAX) {
		c->bad = T_CREDENTIALS;
		return;
	}
	uint8_t plain[HTTP_CLIENT_CREDENTIALS_MAX];
	char coded[B64_LEN(HTTP_CLIENT_CREDENTIALS_MAX)];
	memcpy(plain, username, ul);
	plain[ul] = ':';
	if (pl)
		memcpy(plain + ul + 1, password, pl);
	size_t n = base64(plain, ul + 1 + pl, coded);
	PUT(c, "Proxy-Authorization: Basic ");
	put(c, coded, n);
	PUT(c, "\r\n");
}

layer *http_client_new(const addr_dest *dest, const char *username, const char *password)
{
	if (dest->kind != ADDR_IPV4 && dest->kind != ADDR_IPV6 && dest->kind != ADDR_DOMAIN)
		return NULL;
	http_client *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->base.ops = &client_ops;
	c->bad = T_COUNT_;
	if (dest->kind == ADDR_DOMAIN) {
		size_t n = dest->u.domain.len;
		if (n == 0)
			c->bad = T_HOST;
		for (size_t i = 0; i < n; i++)
			if (!reg_name_char(dest->u.domain.name[i]))
				c->bad = T_HOST;
	}
	char authority[ADDR_TEXT_MAX];
	size_t alen = addr_dest_format(dest, authority, sizeof authority);
	PUT(c, "CONNECT ");
	put(c, authority, alen);
	PUT(c, " HTTP/1.1\r\nHost: ");
	put(c, authority, alen);
	PUT(c, "\r\n");
	if (username && username[0])
		put_credentials(c, username, password);
	PUT(c, "\r\n");
	return &c->base;
}

bool http_client_in_handshake(const layer *l)
{
	assert(l->ops == &client_ops);
	const http_client *c = (const http_client *)l;
	return c->st != ST_READY && c->st != ST_FAILED;
}

int http_client_eof(layer *l)
{
	assert(l->ops == &client_ops);
	http_client *c = (http_client *)l;
	if (!http_client_in_handshake(l))
		return 0;
	return fail(c, LAYER_ERR_CLOSED, T_EOF);
}
