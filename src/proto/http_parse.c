/* http_parse.c - HTTP/1.1 heads and body framing parsed in place, in picohttpparser's manner. */
#include "proto/http_parse.h"

#include <stdio.h>
#include <string.h>

#include "base/bytes.h"

/* tchar (RFC 9110 5.6.2): the characters of a token. */
static bool is_tchar(uint8_t c)
{
	if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
		return true;
	return c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* field-vchar / obs-text plus SP and HTAB: what a field value, a reason
 * phrase or a chunk extension may hold (RFC 9110 5.5). */
static bool is_text(uint8_t c)
{
	return c == '\t' || (c >= 0x20 && c != 0x7f);
}

static bool is_ows(uint8_t c)
{
	return c == ' ' || c == '\t';
}

static http_span span(size_t off, size_t len)
{
	return (http_span){.off = (uint32_t)off, .len = (uint32_t)len};
}

/* Looks for the blank line that ends a head, checking on the way that every
 * CR is followed by LF and every LF preceded by CR. Returns the head length,
 * 0 when not there yet, or an error. */
static ssize_t find_end(const uint8_t *in, size_t len, size_t *scan)
{
	size_t i = *scan <= len ? *scan : 0; /* a shorter buffer than last time: start over */
	size_t lim = len < HTTP_HEAD_MAX ? len : HTTP_HEAD_MAX;
	for (; i < lim; i++) {
		uint8_t c = in[i];
		bool after_cr = i > 0 && in[i - 1] == '\r';
		if (c == '\n') {
			if (!after_cr)
				return HTTP_PARSE_LINE_END;
			if (i >= 3 && in[i - 2] == '\n' && in[i - 3] == '\r') {
				*scan = 0;
				return (ssize_t)(i + 1);
			}
		} else if (after_cr) {
			return HTTP_PARSE_LINE_END;
		}
	}
	*scan = i;
	return len >= HTTP_HEAD_MAX ? HTTP_PARSE_TOO_BIG : 0;
}

/* "HTTP/" DIGIT "." DIGIT (RFC 9112 2.3); the name is case-sensitive. */
static int parse_version(const uint8_t *p, size_t n, int *minor)
{
	if (n != 8 || memcmp(p, "HTTP/", 5) != 0 || p[5] < '0' || p[5] > '9' || p[6] != '.' ||
	    p[7] < '0' || p[7] > '9')
		return HTTP_PARSE_START;
	if (p[5] != '1')
		return HTTP_PARSE_VERSION;
	*minor = p[7] == '0' ? 0 : 1;
	return 0;
}

/* request-line = method SP request-target SP HTTP-version (RFC 9112 3). */
static int parse_request_line(const uint8_t *p, size_t n, http_head *h)
{
	size_t i = 0;
	while (i < n && is_tchar(p[i]))
		i++;
	if (i == 0 || i >= n || p[i] != ' ')
		return HTTP_PARSE_START;
	h->method = span(0, i);
	size_t t = ++i;
	while (i < n && p[i] > 0x20 && p[i] < 0x7f)
		i++;
	if (i == t || i >= n || p[i] != ' ')
		return HTTP_PARSE_START;
	h->target = span(t, i - t);
	i++;
	return parse_version(p + i, n - i, &h->minor);
}

/* status-line = HTTP-version SP status-code SP [ reason-phrase ] (RFC 9112 4);
 * a missing SP before an empty reason is tolerated, as most clients do. */
static int parse_status_line(const uint8_t *p, size_t n, http_head *h)
{
	if (n < 12 || p[8] != ' ')
		return HTTP_PARSE_START;
	int rc = parse_version(p, 8, &h->minor);
	if (rc < 0)
		return rc;
	int status = 0;
	for (size_t i = 9; i < 12; i++) {
		if (p[i] < '0' || p[i] > '9')
			return HTTP_PARSE_START;
		status = status * 10 + (p[i] - '0');
	}
	if (status < 100)
		return HTTP_PARSE_START;
	if (n > 12 && p[12] != ' ')
		return HTTP_PARSE_START;
	for (size_t i = 13; i < n; i++)
		if (!is_text(p[i]))
			return HTTP_PARSE_START;
	h->status = status;
	return 0;
}

/* field-line = field-name ":" OWS field-value OWS (RFC 9112 5). off is
 * where the line starts in the head. */
static int parse_field(const uint8_t *head, size_t off, size_t n, http_field *f)
{
	const uint8_t *p = head + off;
	if (is_ows(p[0]))
		return HTTP_PARSE_OBS_FOLD;
	size_t i = 0;
	while (i < n && is_tchar(p[i]))
		i++;
	/* No whitespace between name and colon: RFC 9112 5.1 says reject. */
	if (i == 0 || i >= n || p[i] != ':')
		return HTTP_PARSE_FIELD;
	f->name = span(off, i);
	i++;
	while (i < n && is_ows(p[i]))
		i++;
	size_t v = i, end = n;
	while (end > v && is_ows(p[end - 1]))
		end--;
	for (size_t k = v; k < end; k++)
		if (!is_text(p[k]))
			return HTTP_PARSE_FIELD;
	f->value = span(off + v, end - v);
	return 0;
}

static ssize_t parse_head(const uint8_t *in, size_t len, size_t *scan, http_head *h, bool request)
{
	ssize_t end = find_end(in, len, scan);
	if (end <= 0)
		return end;
	h->len = (size_t)end;
	h->n_fields = 0;
	h->status = 0;
	h->method = h->target = span(0, 0);
	/* Every line ends in CRLF (find_end checked): split on CR. */
	size_t pos = 0, body_end = (size_t)end - 2; /* the blank line */
	const uint8_t *cr = memchr(in, '\r', body_end + 1);
	size_t n = (size_t)(cr - in);
	h->start = span(0, n);
	int rc = request ? parse_request_line(in, n, h) : parse_status_line(in, n, h);
	if (rc < 0)
		return rc;
	pos = n + 2;
	while (pos < body_end) {
		cr = memchr(in + pos, '\r', body_end + 1 - pos);
		n = (size_t)(cr - (in + pos));
		if (h->n_fields == HTTP_FIELDS_MAX)
			return HTTP_PARSE_TOO_MANY;
		rc = parse_field(in, pos, n, &h->fields[h->n_fields]);
		if (rc < 0)
			return rc;
		h->n_fields++;
		pos += n + 2;
	}
	return end;
}

ssize_t http_parse_request(const uint8_t *in, size_t len, size_t *scan, http_head *h)
{
	return parse_head(in, len, scan, h, true);
}

ssize_t http_parse_response(const uint8_t *in, size_t len, size_t *scan, http_head *h)
{
	return parse_head(in, len, scan, h, false);
}

bool http_list_next(const uint8_t *v, size_t len, size_t *pos, const uint8_t **elem,
                    size_t *elem_len)
{
	size_t i = *pos;
	while (i < len && (is_ows(v[i]) || v[i] == ','))
		i++;
	if (i >= len) {
		*pos = len;
		return false;
	}
	size_t s = i;
	while (i < len && v[i] != ',')
		i++;
	size_t e = i;
	while (e > s && is_ows(v[e - 1]))
		e--;
	*elem = v + s;
	*elem_len = e - s;
	*pos = i;
	return true;
}

bool http_eq_nocase(const uint8_t *p, size_t n, const char *lower)
{
	size_t k = strlen(lower);
	if (n != k)
		return false;
	for (size_t i = 0; i < n; i++) {
		uint8_t c = p[i];
		if (c >= 'A' && c <= 'Z')
			c = (uint8_t)(c - 'A' + 'a');
		if (c != (uint8_t)lower[i])
			return false;
	}
	return true;
}

/* Bodies above this are refused; it keeps the arithmetic far from overflow. */
#define LENGTH_LIMIT ((uint64_t)1 << 62)

int http_parse_length(const uint8_t *v, size_t len, uint64_t *n)
{
	size_t pos = 0, elen;
	const uint8_t *e;
	bool any = false;
	uint64_t first = 0;
	while (http_list_next(v, len, &pos, &e, &elen)) {
		uint64_t x = 0;
		for (size_t i = 0; i < elen; i++) {
			if (e[i] < '0' || e[i] > '9')
				return -1;
			uint64_t d = (uint64_t)(e[i] - '0');
			if (x > (LENGTH_LIMIT - d) / 10) /* before the product can wrap */
				return -1;
			x = x * 10 + d;
		}
		if (any && x != first)
			return -1;
		first = x;
		any = true;
	}
	if (!any)
		return -1;
	*n = first;
	return 0;
}

/* Where the chunked walker is (RFC 9112 7.1). */
enum {
	CH_SIZE0,      /* first digit of a chunk-size */
	CH_SIZE,       /* more digits */
	CH_BWS,        /* whitespace after the size: only ';' or CR may follow */
	CH_EXT,        /* chunk extensions, up to CR */
	CH_SIZE_LF,
	CH_DATA,
	CH_DATA_CR,
	CH_DATA_LF,
	CH_TRAILER0,   /* start of a trailer line, or the final CRLF */
	CH_TRAILER_NAME, /* a trailer field's name, up to its colon */
	CH_TRAILER,
	CH_TRAILER_LF,
	CH_END_LF,
};

void http_body_start(http_body *b, http_body_mode mode, uint64_t length)
{
	*b = (http_body){.mode = mode, .left = length, .state = CH_SIZE0};
	b->done = mode == HTTP_BODY_NONE || (mode == HTTP_BODY_LENGTH && length == 0);
}

static ssize_t chunked_step(http_body *b, const uint8_t *in, size_t len)
{
	size_t i = 0;
	while (i < len) {
		uint8_t c = in[i];
		int d;
		switch (b->state) {
		case CH_SIZE0:
			if ((d = bytes_hex_digit(c)) < 0)
				return HTTP_BODY_MALFORMED;
			b->left = (uint64_t)d;
			b->line = 1;
			b->state = CH_SIZE;
			break;
		case CH_SIZE:
			if ((d = bytes_hex_digit(c)) >= 0) {
				if (b->left >= LENGTH_LIMIT >> 4)
					return HTTP_BODY_MALFORMED;
				b->left = b->left << 4 | (uint64_t)d;
			} else if (c == ';') {
				b->state = CH_EXT;
			} else if (is_ows(c)) {
				b->state = CH_BWS;
			} else if (c == '\r') {
				b->state = CH_SIZE_LF;
			} else {
				return HTTP_BODY_MALFORMED;
			}
			if (++b->line > HTTP_CHUNK_LINE_MAX)
				return HTTP_BODY_MALFORMED;
			break;
		case CH_BWS:
			/* chunk-ext = *( BWS ";" BWS ext-name [ BWS "=" BWS ext-val ] ),
			 * RFC 9112 7.1.1: "5 5" is no size an origin reads as 5 */
			if (c == ';')
				b->state = CH_EXT;
			else if (c == '\r')
				b->state = CH_SIZE_LF;
			else if (!is_ows(c) || ++b->line > HTTP_CHUNK_LINE_MAX)
				return HTTP_BODY_MALFORMED;
			break;
		case CH_EXT:
			if (c == '\r')
				b->state = CH_SIZE_LF;
			else if (!is_text(c) || ++b->line > HTTP_CHUNK_LINE_MAX)
				return HTTP_BODY_MALFORMED;
			break;
		case CH_SIZE_LF:
			if (c != '\n')
				return HTTP_BODY_MALFORMED;
			b->state = b->left ? CH_DATA : CH_TRAILER0;
			break;
		case CH_DATA: {
			size_t take = len - i;
			if (take > b->left)
				take = (size_t)b->left;
			b->left -= take;
			i += take;
			if (b->left == 0)
				b->state = CH_DATA_CR;
			continue;
		}
		case CH_DATA_CR:
			if (c != '\r')
				return HTTP_BODY_MALFORMED;
			b->state = CH_DATA_LF;
			break;
		case CH_DATA_LF:
			if (c != '\n')
				return HTTP_BODY_MALFORMED;
			b->state = CH_SIZE0;
			break;
		case CH_TRAILER0:
			if (c == '\r')
				b->state = CH_END_LF;
			else if (is_tchar(c)) /* a leading space would be obs-fold */
				b->state = CH_TRAILER_NAME;
			else
				return HTTP_BODY_MALFORMED;
			break;
		case CH_TRAILER_NAME:
			/* RFC 9112 7.1.2: a trailer holds field lines, name ":" value;
			 * "GET /x HTTP/1.1" there is a request smuggled in */
			if (c == ':')
				b->state = CH_TRAILER;
			else if (!is_tchar(c))
				return HTTP_BODY_MALFORMED;
			break;
		case CH_TRAILER:
			if (c == '\r')
				b->state = CH_TRAILER_LF;
			else if (!is_text(c))
				return HTTP_BODY_MALFORMED;
			break;
		case CH_TRAILER_LF:
			if (c != '\n')
				return HTTP_BODY_MALFORMED;
			b->state = CH_TRAILER0;
			break;
		case CH_END_LF:
			if (c != '\n')
				return HTTP_BODY_MALFORMED;
			b->done = true;
			return (ssize_t)(i + 1);
		default:
			return HTTP_BODY_MALFORMED;
		}
		if (b->state >= CH_TRAILER0 && ++b->trailer > HTTP_TRAILER_MAX)
			return HTTP_BODY_MALFORMED;
		i++;
	}
	return (ssize_t)i;
}

ssize_t http_body_step(http_body *b, const uint8_t *in, size_t len)
{
	if (b->done)
		return 0;
	switch (b->mode) {
	case HTTP_BODY_LENGTH: {
		size_t take = len;
		if (take > b->left)
			take = (size_t)b->left;
		b->left -= take;
		b->done = b->left == 0;
		return (ssize_t)take;
	}
	case HTTP_BODY_CHUNKED:
		return chunked_step(b, in, len);
	case HTTP_BODY_CLOSE:
		return (ssize_t)len;
	default:
		b->done = true;
		return 0;
	}
}

bool http_body_in_data(const http_body *b)
{
	if (b->done)
		return false;
	if (b->mode == HTTP_BODY_CHUNKED)
		return b->state == CH_DATA;
	return b->mode == HTTP_BODY_LENGTH;
}

void http_meta_read(const uint8_t *in, const http_head *h, http_meta *m)
{
	*m = (http_meta){.auth = -1};
	for (size_t i = 0; i < h->n_fields; i++) {
		const http_field *f = &h->fields[i];
		const uint8_t *name = in + f->name.off, *v = in + f->value.off;
		size_t nlen = f->name.len, vlen = f->value.len, pos = 0, elen;
		const uint8_t *e;
		if (http_eq_nocase(name, nlen, "content-length")) {
			uint64_t n = 0;
			if (http_parse_length(v, vlen, &n) < 0 || (m->has_cl && n != m->cl))
				m->cl_bad = true;
			m->cl = n;
			m->has_cl = true;
		} else if (http_eq_nocase(name, nlen, "transfer-encoding")) {
			m->has_te = true;
			while (http_list_next(v, vlen, &pos, &e, &elen)) {
				m->te_codings++;
				m->te_chunked_last = http_eq_nocase(e, elen, "chunked");
			}
		} else if (http_eq_nocase(name, nlen, "connection") ||
		           http_eq_nocase(name, nlen, "proxy-connection")) {
			bool named = nlen == 10; /* only Connection names fields */
			while (http_list_next(v, vlen, &pos, &e, &elen)) {
				if (http_eq_nocase(e, elen, "close")) {
					m->conn_close = true;
				} else if (http_eq_nocase(e, elen, "keep-alive")) {
					m->conn_keep = true;
				} else if (named && m->n_options == HTTP_CONN_OPTIONS_MAX) {
					m->options_over = true;
				} else if (named) {
					m->option[m->n_options] = e;
					m->option_len[m->n_options++] = elen;
				}
			}
		} else if (http_eq_nocase(name, nlen, "proxy-authorization") && m->auth < 0) {
			m->auth = (int)i;
		}
	}
}

static bool host_char(uint8_t c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '.' || c == '_' || c == '~';
}

static bool v6_char(uint8_t c)
{
	return c == ':' || c == '.' || bytes_hex_digit(c) >= 0;
}

int http_parse_authority(const uint8_t *p, size_t n, uint16_t default_port, addr_dest *d)
{
	size_t i = 0;
	if (n > 0 && p[0] == '[') {
		i = 1;
		while (i < n && p[i] != ']') {
			if (!v6_char(p[i]))
				return -1;
			i++;
		}
		if (i >= n || i == 1)
			return -1;
		i++; /* past "]" */
	} else {
		while (i < n && p[i] != ':') {
			if (!host_char(p[i]))
				return -1;
			i++;
		}
		if (i == 0)
			return -1;
	}
	size_t hn = i;
	if (hn > ADDR_DOMAIN_MAX)
		return -1;
	unsigned port = default_port;
	if (i < n) {
		if (p[i] != ':' || n - i - 1 > 5)
			return -1;
		if (n - i - 1 > 0) { /* RFC 3986 3.2.3: an empty port is the default */
			port = 0;
			for (size_t k = i + 1; k < n; k++) {
				if (p[k] < '0' || p[k] > '9')
					return -1;
				port = port * 10 + (unsigned)(p[k] - '0');
			}
		}
	}
	if (port == 0 || port > 65535)
		return -1;
	char text[ADDR_TEXT_MAX + 1];
	int tn = snprintf(text, sizeof text, "%.*s:%u", (int)hn, (const char *)p, port);
	if (tn < 0 || (size_t)tn >= sizeof text)
		return -1;
	*d = (addr_dest){.network = ADDR_TCP};
	return addr_dest_parse(d, text);
}

static int b64_value(uint8_t c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

/* Base64 (RFC 4648 4), padding optional. Returns the decoded length or -1. */
static ssize_t b64_decode(const uint8_t *in, size_t n, uint8_t *out, size_t cap)
{
	size_t pad = 0;
	while (n > 0 && in[n - 1] == '=' && pad < 2) {
		n--;
		pad++;
	}
	if ((pad && (n + pad) % 4) || n % 4 == 1)
		return -1;
	uint32_t acc = 0;
	int bits = 0;
	size_t o = 0;
	for (size_t i = 0; i < n; i++) {
		int v = b64_value(in[i]);
		if (v < 0)
			return -1;
		acc = acc << 6 | (uint32_t)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			if (o == cap)
				return -1;
			out[o++] = (uint8_t)(acc >> bits);
			acc &= (1u << bits) - 1;
		}
	}
	return (ssize_t)o;
}

ssize_t http_parse_basic(const uint8_t *v, size_t n, uint8_t *out, size_t cap, size_t *user_len)
{
	if (n < 7 || !http_eq_nocase(v, 5, "basic") || v[5] != ' ')
		return -1;
	size_t i = 6;
	while (i < n && v[i] == ' ')
		i++;
	ssize_t cn = b64_decode(v + i, n - i, out, cap);
	if (cn < 0)
		return -1;
	/* RFC 7617 2: the first colon ends the user-id. */
	const uint8_t *colon = memchr(out, ':', (size_t)cn);
	if (!colon)
		return -1;
	*user_len = (size_t)(colon - out);
	return cn;
}
