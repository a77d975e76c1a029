/* dns_frame.c - DNS messages cut out of streams: length prefixes (RFC 7766) and DoH POST exchanges (RFC 8484) on HTTP/1.1. */
#include "proto/dns_frame.h"

#include <assert.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "base/bytes.h"

/* Every text this module shows, for logs and for tests to match word for word. */
enum msg {
	MSG_NONE,
	MSG_STATUS, /* a format: the status code */
	MSG_TYPE,
	MSG_MALFORMED,
	MSG_HEAD,
	MSG_BODY,
	MSG_CLOSED,
	MSG_COUNT_,
};

static const char *const msgs[MSG_COUNT_] = {
	[MSG_NONE] = "", /* not failed: never shown */
	[MSG_STATUS] = "dns: https: the server answered %d",
	[MSG_TYPE] = "dns: https: the answer is not application/dns-message",
	[MSG_MALFORMED] = "dns: https: malformed response",
	[MSG_HEAD] = "dns: https: response head too large",
	[MSG_BODY] = "dns: https: answer too large",
	[MSG_CLOSED] = "dns: https: the server closed the connection",
};

/* ---- Length prefixes ---- */

void dns_tcp_reader_init(dns_tcp_reader *r)
{
	r->have = 0;
}

void dns_tcp_prefix(uint8_t out[2], size_t len)
{
	assert(len <= DNS_FRAME_MAX);
	bytes_put16(out, (uint16_t)len);
}

int dns_tcp_feed(dns_tcp_reader *r, const uint8_t *d, size_t n, size_t *used, const uint8_t **msg,
                 size_t *len)
{
	size_t i = 0;
	while (r->have < 2 && i < n)
		r->buf[r->have++] = d[i++];
	*used = i;
	if (r->have < 2)
		return 0;
	size_t want = bytes_get16(r->buf);
	if (want == 0)
		return -1; /* r->have stays 2: the reader stays failed */
	size_t take = 2 + want - r->have;
	if (take > n - i)
		take = n - i;
	if (take)
		memcpy(r->buf + r->have, d + i, take);
	r->have += take;
	*used = i + take;
	if (r->have < 2 + want)
		return 0;
	r->have = 0; /* the message stays in buf until the next call writes over it */
	*msg = r->buf + 2;
	*len = want;
	return 1;
}

/* ---- DoH requests ---- */

/* The https default port: no ":port" in Host for it (RFC 9110 4.2.2). */
#define HTTPS_PORT 443

typedef struct wbuf {
	uint8_t *p;
	size_t cap;
	size_t len;
	bool over;
} wbuf;

static void put(wbuf *w, const void *s, size_t n)
{
	if (w->over || w->cap - w->len < n) {
		w->over = true;
		return;
	}
	if (n)
		memcpy(w->p + w->len, s, n);
	w->len += n;
}

static void put_text(wbuf *w, const char *s)
{
	put(w, s, strlen(s));
}

/* Whether s is non-empty and holds no byte that could end or split a
 * request line or field line: controls (CR, LF among them), SP and DEL. */
static bool clean(const char *s)
{
	if (!s[0])
		return false;
	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		if (*p <= 0x20 || *p == 0x7f)
			return false;
	return true;
}

int doh_request(const char *host, uint16_t port, const char *path, const uint8_t *msg, size_t n,
                uint8_t *out, size_t cap)
{
	if (!clean(host) || !clean(path) || path[0] != '/' || n > DNS_FRAME_MAX)
		return -1;
	bool bracket = host[0] != '[' && strchr(host, ':') != NULL;
	char port_text[sizeof ":65535"] = "";
	if (port != HTTPS_PORT) {
		int pk = snprintf(port_text, sizeof port_text, ":%u", (unsigned)port);
		assert(pk > 0 && (size_t)pk < sizeof port_text);
		(void)pk;
	}
	char length_text[sizeof "65535"];
	int k = snprintf(length_text, sizeof length_text, "%zu", n);
	assert(k > 0 && (size_t)k < sizeof length_text);
	(void)k;

	wbuf w = {.p = out, .cap = cap};
	put_text(&w, "POST ");
	put_text(&w, path);
	put_text(&w, " HTTP/1.1\r\nHost: ");
	if (bracket)
		put_text(&w, "[");
	put_text(&w, host);
	if (bracket)
		put_text(&w, "]");
	put_text(&w, port_text);
	/* RFC 8484 4.1: the body is the message in wire format, labelled as
	 * such; Accept says only that answer is wanted (RFC 8484 4.1 and 6). */
	put_text(&w, "\r\nContent-Type: application/dns-message\r\n"
	          "Accept: application/dns-message\r\n"
	          "Content-Length: ");
	put_text(&w, length_text);
	put_text(&w, "\r\n\r\n");
	put(&w, msg, n);
	if (w.over || w.len > INT_MAX)
		return -1;
	return (int)w.len;
}

/* ---- DoH responses ---- */

/* Where a doh_reader is. ST_HEAD is 0 so a zeroed reader is at the start. */
enum {
	ST_HEAD,   /* a response head arriving in head[] */
	ST_BODY,   /* a 200's body arriving in body[] */
	ST_FAILED, /* r->fail says why */
};

void doh_reader_init(doh_reader *r)
{
	r->st = ST_HEAD;
	r->fail = MSG_NONE;
	r->busy = false;
	r->closing = false;
	r->will_close = false;
	r->head_len = 0;
	r->scan = 0;
	r->body_len = 0;
	r->framing = (http_body){0};
	r->status_text[0] = '\0';
}

static const char *failure(const doh_reader *r)
{
	return r->fail == MSG_STATUS ? r->status_text : msgs[r->fail];
}

static int fail(doh_reader *r, enum msg m, const char **err)
{
	r->st = ST_FAILED;
	r->fail = (uint8_t)m;
	*err = failure(r);
	return -1;
}

/* media-type = type "/" subtype parameters (RFC 9110 8.3.1): the type
 * before any ';', case-insensitive. v has no leading or trailing OWS. */
static bool dns_message_type(const uint8_t *v, size_t n)
{
	size_t e = 0;
	while (e < n && v[e] != ';')
		e++;
	while (e > 0 && (v[e - 1] == ' ' || v[e - 1] == '\t'))
		e--;
	return http_eq_nocase(v, e, "application/dns-message");
}

/* Whether the head says its body is a DNS message: at least one
 * Content-Type field, and every one of them that type. */
static bool typed(const uint8_t *in, const http_head *h)
{
	bool any = false;
	for (size_t i = 0; i < h->n_fields; i++) {
		const http_field *f = &h->fields[i];
		if (!http_eq_nocase(in + f->name.off, f->name.len, "content-type"))
			continue;
		if (!dns_message_type(in + f->value.off, f->value.len))
			return false;
		any = true;
	}
	return any;
}

/* A complete final head in r->head: decides whether its body is read, and
 * how it ends (RFC 9112 6.3). Returns 0, or -1 having failed r. */
static int take_head(doh_reader *r, const http_head *h, const char **err)
{
	if (h->status != 200) {
		int k = snprintf(r->status_text, sizeof r->status_text, msgs[MSG_STATUS], h->status);
		assert(k > 0 && (size_t)k < sizeof r->status_text);
		(void)k;
		return fail(r, MSG_STATUS, err);
	}
	if (!typed(r->head, h))
		return fail(r, MSG_TYPE, err);
	http_meta m;
	http_meta_read(r->head, h, &m);
	if (m.has_te) {
		/* Only chunked alone can be undone here; with a Content-Length
		 * too, the two framings disagree on where the next answer starts. */
		if (m.has_cl || m.te_codings != 1 || !m.te_chunked_last)
			return fail(r, MSG_MALFORMED, err);
		/* RFC 9112 6.1: in HTTP/1.0 it is faulty framing */
		if (h->minor == 0)
			return fail(r, MSG_MALFORMED, err);
		http_body_start(&r->framing, HTTP_BODY_CHUNKED, 0);
	} else if (m.has_cl) {
		if (m.cl_bad || m.cl == 0)
			return fail(r, MSG_MALFORMED, err);
		if (m.cl > DNS_FRAME_MAX)
			return fail(r, MSG_BODY, err);
		http_body_start(&r->framing, HTTP_BODY_LENGTH, m.cl);
	} else {
		return fail(r, MSG_MALFORMED, err);
	}
	r->will_close = m.conn_close || (h->minor == 0 && !m.conn_keep);
	r->body_len = 0;
	r->st = ST_BODY;
	return 0;
}

/* Reads head bytes from d[0, n): returns how many it took (all of them
 * while the head is incomplete, exactly up to its blank line when it is),
 * or -1 having failed r. Interim heads are dropped and the next one read. */
static ssize_t read_head(doh_reader *r, const uint8_t *d, size_t n, const char **err)
{
	size_t i = 0;
	while (r->st == ST_HEAD && i < n) {
		size_t take = DOH_HEAD_MAX - r->head_len;
		if (take > n - i)
			take = n - i;
		memcpy(r->head + r->head_len, d + i, take);
		http_head h;
		ssize_t hl = http_parse_response(r->head, r->head_len + take, &r->scan, &h);
		if (hl == HTTP_PARSE_TOO_BIG || hl == HTTP_PARSE_TOO_MANY)
			return fail(r, MSG_HEAD, err);
		if (hl < 0)
			return fail(r, MSG_MALFORMED, err);
		if (hl == 0) {
			r->head_len += take;
			i += take;
			if (r->head_len == DOH_HEAD_MAX)
				return fail(r, MSG_HEAD, err);
			continue;
		}
		/* The head ended inside what was copied: the rest is not taken. */
		i += (size_t)hl - r->head_len;
		r->head_len = 0;
		r->scan = 0;
		if (h.status >= 100 && h.status < 200 && h.status != 101)
			continue; /* interim (RFC 9110 15.2): the final head follows */
		if (take_head(r, &h, err) < 0)
			return -1;
	}
	return (ssize_t)i;
}

/* Reads body bytes from d[0, n) into r->body, chunked framing walked by
 * http_body_step: data runs are copied, framing bytes go one at a time so
 * that no data byte passes uncopied. Returns how many it took, or -1
 * having failed r. */
static ssize_t read_body(doh_reader *r, const uint8_t *d, size_t n, const char **err)
{
	http_body *b = &r->framing;
	size_t i = 0;
	while (!b->done && i < n) {
		if (http_body_in_data(b)) {
			size_t take = n - i;
			if (take > b->left)
				take = (size_t)b->left;
			ssize_t s = http_body_step(b, d + i, take);
			assert(s == (ssize_t)take);
			(void)s;
			memcpy(r->body + r->body_len, d + i, take);
			r->body_len += take;
			i += take;
		} else {
			ssize_t s = http_body_step(b, d + i, 1);
			if (s < 0)
				return fail(r, MSG_MALFORMED, err);
			i += (size_t)s;
		}
		/* a chunk is refused as soon as its size line says it would not fit */
		if (http_body_in_data(b) && b->left > DNS_FRAME_MAX - r->body_len)
			return fail(r, MSG_BODY, err);
	}
	return (ssize_t)i;
}

int doh_feed(doh_reader *r, const uint8_t *d, size_t n, size_t *used, const uint8_t **body,
             size_t *len, const char **err)
{
	*used = 0;
	if (r->st == ST_FAILED) {
		*err = failure(r);
		return -1;
	}
	if (n > 0)
		r->busy = true;
	size_t i = 0;
	if (r->st == ST_HEAD) {
		ssize_t s = read_head(r, d, n, err);
		if (s < 0)
			return -1;
		i = (size_t)s;
		*used = i;
		if (r->st == ST_HEAD)
			return 0;
	}
	ssize_t s = read_body(r, d + i, n - i, err);
	if (s < 0)
		return -1;
	*used = i + (size_t)s;
	if (!r->framing.done)
		return 0;
	if (r->body_len == 0) /* an empty chunked body: no DNS message */
		return fail(r, MSG_MALFORMED, err);
	r->st = ST_HEAD;
	r->busy = false;
	r->closing = r->will_close;
	*body = r->body;
	*len = r->body_len;
	return 1;
}

const char *doh_reader_eof(const doh_reader *r, bool expected)
{
	if (expected || (r->busy && r->st != ST_FAILED))
		return msgs[MSG_CLOSED];
	return NULL;
}

bool doh_reader_closing(const doh_reader *r)
{
	return r->closing;
}
