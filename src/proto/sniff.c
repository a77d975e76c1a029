/* sniff.c - TLS SNI and HTTP/1.x Host read from a growing prefix, with no state kept between calls. */
#include "proto/sniff.h"

#include <stdbool.h>
#include <string.h>

/* TLS wire format: record layer (RFC 8446 5.1), handshake header (RFC 8446
 * 4), ClientHello (RFC 8446 4.1.2, RFC 5246 7.4.1.2), server_name (RFC 6066
 * section 3). */
#define TLS_CONTENT_HANDSHAKE 22 /* ContentType handshake(22) */
#define TLS_RECORD_HEADER 5      /* type(1) legacy_record_version(2) length(2) */
#define TLS_RECORD_MAX 16384     /* "The length MUST NOT exceed 2^14 bytes" */
#define TLS_HANDSHAKE_HEADER 4   /* msg_type(1) length(3) */
#define TLS_CLIENT_HELLO 1       /* HandshakeType client_hello(1) */
#define TLS_RANDOM 32            /* opaque Random[32] */
#define TLS_SESSION_ID_MAX 32    /* legacy_session_id<0..32> */
#define TLS_EXT_SERVER_NAME 0    /* ExtensionType server_name(0) */
#define TLS_NAME_HOST 0          /* NameType host_name(0) */

/* Longest method taken: the longest in the IANA method registry,
 * UPDATEREDIRECTREF, has 17 characters. Bounding it lets binary that happens
 * to start with capitals be refused early. */
#define HTTP_METHOD_MAX 24

/* How far a parse got: the bytes so far are fine, end too soon, or can
 * yield no name whatever follows. */
typedef enum step {
	STEP_OK,
	STEP_MORE,
	STEP_BAD,
} step;

static sniff_result verdict(step s)
{
	return s == STEP_MORE ? SNIFF_NEED_MORE : SNIFF_NONE;
}

/* Writes in[0, n) into out (SNIFF_NAME_MAX + 1 bytes) as the name we hand
 * out: lower-cased, NUL-terminated, one trailing dot dropped (an absolute
 * name, RFC 1034 3.1). Returns its length, or 0 when it is not a host name:
 * longer than SNIFF_NAME_MAX; a label outside 1-63 bytes (RFC 1035 2.3.4);
 * a character other than a letter, digit, '-' or '_'; a label that starts
 * or ends with '-' (RFC 952, kept by RFC 1123 2.1); or a last label that is
 * a number, which makes the whole an IPv4 address to a URL parser (WHATWG
 * URL, "ends in a number": all digits, or "0x" and hex digits). '_' is
 * outside the host name grammar, but names in use carry it and rules may
 * want to match them. out is scratch when 0 is returned. */
static size_t host_clean(const uint8_t *in, size_t n, char *out)
{
	if (n > 0 && in[n - 1] == '.')
		n--;
	if (n == 0 || n > SNIFF_NAME_MAX)
		return 0;
	size_t label = 0; /* where the current label starts */
	for (size_t i = 0; i <= n; i++) {
		if (i == n || in[i] == '.') {
			size_t k = i - label;
			if (k == 0 || k > 63 || out[label] == '-' || out[i - 1] == '-')
				return 0;
			if (i < n) {
				out[i] = '.';
				label = i + 1;
			}
			continue;
		}
		uint8_t c = in[i];
		if (c >= 'A' && c <= 'Z')
			c = (uint8_t)(c - 'A' + 'a');
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_'))
			return 0;
		out[i] = (char)c;
	}
	const char *last = out + label;
	size_t k = n - label, j = 0;
	if (k >= 2 && last[0] == '0' && last[1] == 'x')
		j = 2;
	bool hex = j == 2;
	while (j < k && ((last[j] >= '0' && last[j] <= '9') ||
	                 (hex && last[j] >= 'a' && last[j] <= 'f')))
		j++;
	if (j == k)
		return 0;
	out[n] = '\0';
	return n;
}

/* ---- TLS ---- */

/* Reads the handshake message carried by consecutive handshake records in
 * place: records may split a message at any byte (RFC 8446 5.1). */
typedef struct reader {
	const uint8_t *p;
	size_t len;      /* bytes there are */
	size_t pos;      /* next byte of p to look at */
	size_t rec_left; /* fragment bytes of the current record not yet read */
	size_t msg_left; /* bytes of the message not yet read; reading past them is BAD */
	step st;         /* sticky: reads after a failure do nothing */
} reader;

/* Enters the record whose header starts at r->pos. Each byte of it is
 * checked as soon as it is there, so a wrong one is an answer at once. */
static void next_record(reader *r)
{
	const uint8_t *h = r->p + r->pos;
	size_t avail = r->len - r->pos;
	/* A handshake message is not interleaved with other records (RFC 8446
	 * 5.1); every record version since SSL 3.0 is 3.x. */
	if ((avail > 0 && h[0] != TLS_CONTENT_HANDSHAKE) || (avail > 1 && h[1] != 3)) {
		r->st = STEP_BAD;
		return;
	}
	if (avail < TLS_RECORD_HEADER) {
		r->st = STEP_MORE;
		return;
	}
	size_t n = (size_t)h[3] << 8 | h[4];
	/* "Implementations MUST NOT send zero-length fragments of Handshake types" */
	if (n == 0 || n > TLS_RECORD_MAX) {
		r->st = STEP_BAD;
		return;
	}
	r->pos += TLS_RECORD_HEADER;
	r->rec_left = n;
}

/* Reads the next n bytes of the message into dst, or skips them when dst
 * is NULL. */
static void take(reader *r, uint8_t *dst, size_t n)
{
	if (r->st != STEP_OK)
		return;
	if (n > r->msg_left) {
		r->st = STEP_BAD;
		return;
	}
	r->msg_left -= n;
	/* Each turn reads at least one byte or stops, so this ends within len turns. */
	while (n > 0) {
		if (r->rec_left == 0) {
			next_record(r);
			if (r->st != STEP_OK)
				return;
		}
		size_t k = n < r->rec_left ? n : r->rec_left;
		if (k > r->len - r->pos)
			k = r->len - r->pos;
		if (k == 0) {
			r->st = STEP_MORE;
			return;
		}
		if (dst != NULL) {
			memcpy(dst, r->p + r->pos, k);
			dst += k;
		}
		r->pos += k;
		r->rec_left -= k;
		n -= k;
	}
}

/* A big-endian integer of n <= 3 bytes; 0 once r has failed, so a check
 * on it may fail r again harmlessly. */
static size_t get(reader *r, size_t n)
{
	uint8_t b[3] = {0};
	take(r, b, n);
	size_t v = 0;
	for (size_t i = 0; i < n; i++)
		v = v << 8 | b[i];
	return r->st == STEP_OK ? v : 0;
}

/* Marks r BAD unless it already stopped: the first reason wins. */
static void fail(reader *r)
{
	if (r->st == STEP_OK)
		r->st = STEP_BAD;
}

/* The extension_data of server_name, n bytes (RFC 6066 section 3):
 *   struct { NameType name_type; select (name_type) { case host_name: HostName; } name; } ServerName;
 *   opaque HostName<1..2^16-1>;
 *   struct { ServerName server_name_list<1..2^16-1> } ServerNameList;
 * Cleans the one host_name into out and sets *out_len. */
static void read_server_name(reader *r, size_t n, char *out, size_t *out_len)
{
	if (n < 2) {
		fail(r); /* only a server sends it empty */
		return;
	}
	size_t list = get(r, 2);
	if (list == 0 || list != n - 2)
		fail(r);
	/* Each turn takes at least 4 bytes of the list, or stops. */
	while (r->st == STEP_OK && list > 0) {
		if (list < 3) {
			fail(r);
			return;
		}
		size_t type = get(r, 1);
		size_t len = get(r, 2);
		if (r->st != STEP_OK)
			return;
		list -= 3;
		if (len == 0 || len > list) {
			fail(r);
			return;
		}
		list -= len;
		if (type != TLS_NAME_HOST) {
			/* "all future data structures associated with new NameTypes
			 * MUST begin with a 16-bit length field": skip it like a name */
			take(r, NULL, len);
			continue;
		}
		/* "The ServerNameList MUST NOT contain more than one name of the
		 * same name_type"; a dot more than the longest name may be the
		 * trailing one host_clean drops. */
		uint8_t raw[SNIFF_NAME_MAX + 1];
		if (*out_len != 0 || len > sizeof raw) {
			fail(r);
			return;
		}
		take(r, raw, len);
		if (r->st != STEP_OK)
			return;
		*out_len = host_clean(raw, len, out);
		if (*out_len == 0)
			fail(r);
	}
}

/* data[0] is 0x16. Walks the whole ClientHello, checking each vector's
 * length against the message (RFC 8446 4.1.2):
 *   ProtocolVersion legacy_version; Random random;
 *   opaque legacy_session_id<0..32>; CipherSuite cipher_suites<2..2^16-2>;
 *   opaque legacy_compression_methods<1..2^8-1>; Extension extensions<8..2^16-1>;
 * and answers only when all of it has arrived. With Encrypted Client Hello
 * the name found is the outer hello's public name: the inner one is sealed. */
static sniff_result tls_sniff(const uint8_t *p, size_t len, char *out, size_t *out_len)
{
	reader r = {.p = p, .len = len, .msg_left = TLS_HANDSHAKE_HEADER};
	/* The first message is a ClientHello (RFC 8446 4.1.2). One that cannot
	 * end within the bound is not waited for. */
	if (get(&r, 1) != TLS_CLIENT_HELLO)
		fail(&r);
	size_t hello = get(&r, 3);
	if (hello > SNIFF_MAX_BYTES - TLS_RECORD_HEADER - TLS_HANDSHAKE_HEADER)
		fail(&r);
	if (r.st != STEP_OK)
		return verdict(r.st);
	r.msg_left = hello;

	/* legacy_version: 0x0300 (SSL 3.0) to 0x0303 (TLS 1.2, kept by 1.3) */
	if (get(&r, 2) >> 8 != 3)
		fail(&r);
	take(&r, NULL, TLS_RANDOM);
	size_t sid = get(&r, 1);
	if (sid > TLS_SESSION_ID_MAX)
		fail(&r);
	take(&r, NULL, sid);
	size_t suites = get(&r, 2);
	if (suites < 2 || suites % 2 != 0)
		fail(&r);
	take(&r, NULL, suites);
	size_t methods = get(&r, 1);
	if (methods == 0)
		fail(&r);
	take(&r, NULL, methods);
	if (r.st != STEP_OK)
		return verdict(r.st);
	/* A hello may end here: extensions are optional before TLS 1.3 (RFC
	 * 5246 7.4.1.2), and without them there is no name. */
	if (r.msg_left == 0)
		return SNIFF_NONE;
	size_t exts = get(&r, 2);
	if (exts != r.msg_left)
		fail(&r);

	bool seen = false;
	/* Each turn takes at least the 4-byte extension header, or stops. */
	while (r.st == STEP_OK && r.msg_left > 0) {
		size_t ext = get(&r, 2);
		size_t n = get(&r, 2);
		if (r.st != STEP_OK)
			break;
		if (ext != TLS_EXT_SERVER_NAME) {
			take(&r, NULL, n);
			continue;
		}
		/* "There MUST NOT be more than one extension of the same type"
		 * (RFC 8446 4.2): two names are no name. */
		if (seen) {
			fail(&r);
			break;
		}
		seen = true;
		read_server_name(&r, n, out, out_len);
	}
	if (r.st != STEP_OK)
		return verdict(r.st);
	return *out_len != 0 ? SNIFF_FOUND : SNIFF_NONE;
}

/* ---- HTTP/1.x ---- */

static bool is_alpha(uint8_t c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* tchar (RFC 9110 5.6.2). */
static bool is_tchar(uint8_t c)
{
	if ((c >= '0' && c <= '9') || is_alpha(c))
		return true;
	return c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* Methods are case-sensitive tokens (RFC 9110 9.1); every registered one is
 * upper-case letters and '-', so taking only those (and '_') refuses most
 * other protocols within a byte or two. */
static bool is_method(uint8_t c)
{
	return (c >= 'A' && c <= 'Z') || c == '-' || c == '_';
}

static bool is_ows(uint8_t c)
{
	return c == ' ' || c == '\t';
}

/* field-vchar, obs-text, SP and HTAB (RFC 9110 5.5); other controls,
 * bare CR and LF included, end the value and make the head malformed. */
static bool is_value(uint8_t c)
{
	return c == '\t' || (c >= 0x20 && c != 0x7f);
}

/* Matches the text lit at p[*i] on, as far as p[0, n) goes. */
static step want(const uint8_t *p, size_t n, size_t *i, const char *lit)
{
	for (; *lit != '\0'; lit++, (*i)++) {
		if (*i == n)
			return STEP_MORE;
		if (p[*i] != (uint8_t)*lit)
			return STEP_BAD;
	}
	return STEP_OK;
}

/* The authority of an absolute-form target, scheme "://" authority
 * [path-abempty etc.] (RFC 9112 3.2.2, RFC 3986 3): true with *a, *an set,
 * or false when t[0, n) is in another form. */
static bool absolute_authority(const uint8_t *t, size_t n, const uint8_t **a, size_t *an)
{
	/* scheme = ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ) */
	size_t i = 0;
	if (n == 0 || !is_alpha(t[0]))
		return false;
	while (i < n && (is_alpha(t[i]) || (t[i] >= '0' && t[i] <= '9') || t[i] == '+' ||
	                 t[i] == '-' || t[i] == '.'))
		i++;
	if (n - i < 3 || memcmp(t + i, "://", 3) != 0)
		return false;
	i += 3;
	size_t s = i;
	while (i < n && t[i] != '/' && t[i] != '?' && t[i] != '#')
		i++;
	*a = t + s;
	*an = i - s;
	return true;
}

/* host [":" port] (RFC 9110 7.2, RFC 3986 3.2.2-3.2.3) into out; returns
 * the name's length or 0. A userinfo part is refused: senders must not
 * generate it (RFC 9110 4.2.4) and "good.example@other.example" is a classic
 * way to make one name look like another. An IP literal fails host_clean. */
static size_t authority_host(const uint8_t *a, size_t n, char *out)
{
	if (memchr(a, '@', n) != NULL)
		return 0;
	const uint8_t *colon = memchr(a, ':', n);
	size_t h = colon != NULL ? (size_t)(colon - a) : n;
	if (colon != NULL) {
		size_t digits = n - h - 1; /* port = *DIGIT: empty is allowed */
		unsigned long port = 0;
		if (digits > 5)
			return 0;
		for (size_t i = h + 1; i < n; i++) {
			if (a[i] < '0' || a[i] > '9')
				return 0;
			port = port * 10 + (unsigned long)(a[i] - '0');
		}
		if (port > 65535)
			return 0;
	}
	return host_clean(a, h, out);
}

/* data[0] is an upper-case letter. Walks the request head (RFC 9112 2.1,
 * 3, 5) up to its blank line, and answers only when all of it has arrived:
 * the authority of an absolute-form target, which a server must use instead
 * of Host (RFC 9112 3.2.2), else the one Host field value (RFC 9112 3.2: two
 * Host lines are an error). */
static sniff_result http_sniff(const uint8_t *p, size_t n, char *out, size_t *out_len)
{
	size_t i = 0;
	while (i < n && i <= HTTP_METHOD_MAX && is_method(p[i]))
		i++;
	if (i > HTTP_METHOD_MAX)
		return SNIFF_NONE;
	step s = want(p, n, &i, " ");
	if (s != STEP_OK)
		return verdict(s);

	size_t t = i;
	while (i < n && p[i] > 0x20 && p[i] < 0x7f)
		i++;
	size_t t_len = i - t;
	if (i < n && t_len == 0)
		return SNIFF_NONE;
	s = want(p, n, &i, " HTTP/1.");
	if (s != STEP_OK)
		return verdict(s);
	if (i == n)
		return SNIFF_NEED_MORE;
	if (p[i] < '0' || p[i] > '9')
		return SNIFF_NONE;
	i++;
	s = want(p, n, &i, "\r\n");
	if (s != STEP_OK)
		return verdict(s);

	bool have_host = false;
	size_t hv = 0, hv_len = 0;
	/* Each turn takes a line of at least 4 bytes ("x:" CRLF), or stops. */
	for (;;) {
		if (i == n)
			return SNIFF_NEED_MORE;
		if (p[i] == '\r')
			break;
		size_t f = i;
		while (i < n && is_tchar(p[i]))
			i++;
		if (i == n)
			return SNIFF_NEED_MORE;
		/* No whitespace before the colon (RFC 9112 5.1), and no line folded
		 * onto the previous one (RFC 9112 5.2): both start with a non-tchar. */
		if (i == f || p[i] != ':')
			return SNIFF_NONE;
		bool host = i - f == 4 && (p[f] | 0x20) == 'h' && (p[f + 1] | 0x20) == 'o' &&
		            (p[f + 2] | 0x20) == 's' && (p[f + 3] | 0x20) == 't';
		i++;
		while (i < n && is_ows(p[i]))
			i++;
		size_t v = i;
		while (i < n && is_value(p[i]))
			i++;
		size_t e = i;
		while (e > v && is_ows(p[e - 1]))
			e--;
		s = want(p, n, &i, "\r\n");
		if (s != STEP_OK)
			return verdict(s);
		if (host) {
			if (have_host)
				return SNIFF_NONE;
			have_host = true;
			hv = v;
			hv_len = e - v;
		}
	}
	s = want(p, n, &i, "\r\n");
	if (s != STEP_OK)
		return verdict(s);

	const uint8_t *a;
	size_t an;
	if (absolute_authority(p + t, t_len, &a, &an))
		*out_len = authority_host(a, an, out);
	else if (have_host)
		*out_len = authority_host(p + hv, hv_len, out);
	return *out_len != 0 ? SNIFF_FOUND : SNIFF_NONE;
}

sniff_result sniff_name(const uint8_t *data, size_t len, char *name, size_t name_size,
                        sniff_proto *proto)
{
	size_t n = len < SNIFF_MAX_BYTES ? len : SNIFF_MAX_BYTES;
	char host[SNIFF_NAME_MAX + 1];
	size_t host_len = 0;
	sniff_proto which;
	sniff_result r;

	if (n == 0)
		return SNIFF_NEED_MORE;
	if (data[0] == TLS_CONTENT_HANDSHAKE) {
		which = SNIFF_PROTO_TLS;
		r = tls_sniff(data, n, host, &host_len);
	} else if (data[0] >= 'A' && data[0] <= 'Z') {
		which = SNIFF_PROTO_HTTP;
		r = http_sniff(data, n, host, &host_len);
	} else {
		return SNIFF_NONE;
	}
	if (r == SNIFF_NEED_MORE)
		return n == SNIFF_MAX_BYTES ? SNIFF_NONE : SNIFF_NEED_MORE;
	if (r != SNIFF_FOUND || host_len >= name_size)
		return SNIFF_NONE;
	memcpy(name, host, host_len + 1);
	*proto = which;
	return SNIFF_FOUND;
}
