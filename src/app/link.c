/* link.c - share links parsed into an [[outbound]]: the URL pieces, percent-encoding, base64, the vmess JSON body, per scheme. */
#include "app/link.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/bytes.h"

/* Every line a bad link or a failed export gives, after the CLI's prefix.
 * %s is the error's detail. docs/links.md lists them. */
static const char *const msgs[LINK_E_COUNT_] = {
	[0] = "ok",
	[-LINK_E_TOO_LONG] = "the link is longer than 8192 bytes",
	[-LINK_E_SCHEME] = "unknown scheme `%s` (expected vless, vmess, trojan, ss, hysteria2 or hy2)",
	[-LINK_E_NO_USER] = "the link has no %s before the `@`",
	[-LINK_E_NO_HOST] = "the link has no host",
	[-LINK_E_NO_PORT] = "the link has no port",
	[-LINK_E_BAD_PORT] = "bad port `%s` (expected a number in 1-65535)",
	[-LINK_E_BAD_UUID] = "bad UUID `%s` (expected 8-4-4-4-12 hex digits)",
	[-LINK_E_BASE64] = "bad base64 in the %s",
	[-LINK_E_JSON] = "bad JSON in the vmess link at byte %s (expected one flat object)",
	[-LINK_E_METHOD] = "unknown method `%s`",
	[-LINK_E_NETWORK] = "unknown network `%s` (expected tcp, ws or grpc)",
	[-LINK_E_SECURITY] = "unknown security `%s` (expected none or tls)",
	[-LINK_E_PERCENT] = "bad percent-encoding in the %s",
	[-LINK_E_UTF8] = "the %s is not UTF-8",
	[-LINK_E_UNSUPPORTED] = "%s is not supported",
	[-LINK_E_LISTEN_ANY] = "inbound %s listens on every address: give --host NAME",
	[-LINK_E_SPACE] = "the output does not fit",
	[-LINK_E_NOMEM] = "out of memory",
	[-LINK_E_CHECK] = "%s", /* the config's own message (link_check.c) */
};

/* The features a link may ask for that the config cannot carry: the
 * detail of LINK_E_UNSUPPORTED, "<feature> is not supported". */
typedef enum link_feature {
	LF_REALITY,
	LF_VISION,
	LF_FLOW,
	LF_VLESS_ENCRYPTION,
	LF_HEADER_TYPE,
	LF_GRPC_MULTI,
	LF_HTTPUPGRADE,
	LF_XHTTP,
	LF_SPLITHTTP,
	LF_WS_PATH,
	LF_ALTER_ID,
	LF_SS_PLUGIN,
	LF_HY2_OBFS,
	LF_COUNT_,
} link_feature;

static const char *const features[LF_COUNT_] = {
	[LF_REALITY] = "REALITY",
	[LF_VISION] = "the XTLS Vision flow",
	[LF_FLOW] = "a vless flow",
	[LF_VLESS_ENCRYPTION] = "vless encryption other than none",
	[LF_HEADER_TYPE] = "a tcp header type other than none",
	[LF_GRPC_MULTI] = "gRPC multi mode",
	[LF_HTTPUPGRADE] = "the httpupgrade transport",
	[LF_XHTTP] = "the xhttp transport",
	[LF_SPLITHTTP] = "the splithttp transport (xhttp)",
	[LF_WS_PATH] = "a ws path that does not start with `/`",
	[LF_ALTER_ID] = "a vmess alterId other than 0",
	[LF_SS_PLUGIN] = "a shadowsocks plugin",
	[LF_HY2_OBFS] = "hysteria2 obfs",
};

const char *link_error_format(const link_error *e, char *out, size_t size)
{
	int c = -(int)e->code;
	if (c < 0 || c >= LINK_E_COUNT_)
		c = 0;
	if (size)
		/* the formats are the constant table; the detail is data */
		(void)snprintf(out, size, msgs[c], e->detail);
	return out;
}

/* Fills e and returns its code. The detail is cut and made printable so
 * that the line the CLI prints cannot carry control bytes. */
static int fail(link_error *e, link_err code, const char *detail, size_t len)
{
	e->code = code;
	size_t n = 0;
	for (; detail && n < len && n + 1 < LINK_DETAIL_MAX; n++) {
		unsigned char ch = (unsigned char)detail[n];
		e->detail[n] = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
	}
	e->detail[n] = '\0';
	return code;
}

static int fails(link_error *e, link_err code, const char *detail)
{
	return fail(e, code, detail, detail ? strlen(detail) : 0);
}

static int unsupported(link_error *e, link_feature f)
{
	return fails(e, LINK_E_UNSUPPORTED, features[f]);
}

/* ---- codecs ---- */

long link_percent_decode(const char *in, size_t len, char *out, size_t size)
{
	size_t n = 0;
	for (size_t i = 0; i < len; i++) {
		char c = in[i];
		if (c == '%') {
			if (i + 2 >= len)
				return -1;
			int hi = bytes_hex_digit(in[i + 1]), lo = bytes_hex_digit(in[i + 2]);
			if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
				return -1;
			c = (char)(hi << 4 | lo);
			i += 2;
		} else if (c == '\0') {
			return -1;
		}
		if (n >= size)
			return -1;
		out[n++] = c;
	}
	return (long)n;
}

static int b64val(char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+' || c == '-')
		return 62;
	if (c == '/' || c == '_')
		return 63;
	return -1;
}

long link_base64_decode(const char *in, size_t len, unsigned char *out, size_t size)
{
	while (len && in[len - 1] == '=')
		len--;
	/* At most two '=' were cut, and only where they complete a quantum. */
	if (len % 4 == 1)
		return -1;
	size_t n = 0;
	unsigned acc = 0;
	int bits = 0;
	for (size_t i = 0; i < len; i++) {
		int v = b64val(in[i]);
		if (v < 0)
			return -1;
		acc = (acc << 6 | (unsigned)v) & 0xffffff;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			if (n >= size)
				return -1;
			out[n++] = (unsigned char)(acc >> bits);
		}
	}
	/* RFC 4648 section 3.5: the bits left over must be zero */
	if (bits && (acc & ((1u << bits) - 1)))
		return -1;
	return (long)n;
}

/* RFC 3629 section 4: shortest forms, no surrogates, at most U+10FFFF. */
static bool utf8_valid(const unsigned char *s, size_t len)
{
	for (size_t i = 0; i < len;) {
		unsigned char c = s[i];
		size_t n;
		unsigned cp;
		if (c < 0x80) {
			i++;
			continue;
		} else if (c >= 0xc2 && c <= 0xdf) {
			n = 1, cp = c & 0x1f;
		} else if (c >= 0xe0 && c <= 0xef) {
			n = 2, cp = c & 0x0f;
		} else if (c >= 0xf0 && c <= 0xf4) {
			n = 3, cp = c & 0x07;
		} else {
			return false;
		}
		if (n >= len - i)
			return false;
		for (size_t k = 1; k <= n; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return false;
			cp = cp << 6 | (s[i + k] & 0x3f);
		}
		if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10ffff ||
		    (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		i += n + 1;
	}
	return true;
}

/* ---- pieces of a link ---- */

typedef struct slice {
	const char *p;
	size_t len;
	bool set;
} slice;

static bool slice_is(slice s, const char *lit)
{
	return s.set && s.len == strlen(lit) && memcmp(s.p, lit, s.len) == 0;
}

/* Percent-decodes s into a new string at *out (NULL when s is not set).
 * what names the part in the error. */
static int take(slice s, char **out, const char *what, link_error *e)
{
	*out = NULL;
	if (!s.set)
		return 0;
	char *d = malloc(s.len + 1);
	if (!d)
		return fails(e, LINK_E_NOMEM, NULL);
	long n = link_percent_decode(s.p, s.len, d, s.len);
	if (n < 0) {
		free(d);
		return fails(e, LINK_E_PERCENT, what);
	}
	if (!utf8_valid((const unsigned char *)d, (size_t)n)) {
		free(d);
		return fails(e, LINK_E_UTF8, what);
	}
	d[n] = '\0';
	*out = d;
	return 0;
}

/* take() for an optional key: written empty is the same as left out. */
static int take_opt(slice s, char **out, const char *what, link_error *e)
{
	int rc = take(s, out, what, e);
	if (rc == 0 && *out && !**out) {
		free(*out);
		*out = NULL;
	}
	return rc;
}

/* The query keys any scheme reads; others are ignored (docs/links.md). */
typedef struct query {
	slice type, security, encryption, flow, header_type, sni, alpn, insecure, allow_insecure,
		path, host, service_name, mode, plugin, obfs;
} query;

static void query_parse(const char *p, size_t len, query *q)
{
	static const struct {
		const char *key;
		size_t off;
	} keys[] = {
		{"type", offsetof(query, type)},
		{"security", offsetof(query, security)},
		{"encryption", offsetof(query, encryption)},
		{"flow", offsetof(query, flow)},
		{"headerType", offsetof(query, header_type)},
		{"sni", offsetof(query, sni)},
		{"peer", offsetof(query, sni)}, /* older trojan clients' name for sni */
		{"alpn", offsetof(query, alpn)},
		{"insecure", offsetof(query, insecure)},
		{"allowInsecure", offsetof(query, allow_insecure)},
		{"path", offsetof(query, path)},
		{"host", offsetof(query, host)},
		{"serviceName", offsetof(query, service_name)},
		{"mode", offsetof(query, mode)}, /* grpc: gun or multi */
		{"plugin", offsetof(query, plugin)},
		{"obfs", offsetof(query, obfs)},
	};
	while (len) {
		const char *amp = memchr(p, '&', len);
		size_t plen = amp ? (size_t)(amp - p) : len;
		const char *eq = memchr(p, '=', plen);
		size_t klen = eq ? (size_t)(eq - p) : plen;
		for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
			if (strlen(keys[k].key) == klen && memcmp(keys[k].key, p, klen) == 0) {
				slice *s = (slice *)((char *)q + keys[k].off);
				s->p = eq ? eq + 1 : p + plen;
				s->len = eq ? plen - klen - 1 : 0;
				s->set = true;
			}
		if (!amp)
			break;
		len -= plen + 1;
		p = amp + 1;
	}
}

/* scheme://user@host:port/path?query#fragment, split (RFC 3986 section 3;
 * the user is taken up to the last '@', as a password may hold one). */
typedef struct url {
	slice user, host, port, query, frag;
	bool bad_host; /* a '[' without its ']' */
} url;

static void url_split(const char *p, size_t len, url *u)
{
	memset(u, 0, sizeof *u);
	const char *hash = memchr(p, '#', len);
	if (hash) {
		u->frag = (slice){hash + 1, len - (size_t)(hash + 1 - p), true};
		len = (size_t)(hash - p);
	}
	const char *qm = memchr(p, '?', len);
	if (qm) {
		u->query = (slice){qm + 1, len - (size_t)(qm + 1 - p), true};
		len = (size_t)(qm - p);
	}
	const char *at = NULL;
	for (size_t i = 0; i < len; i++)
		if (p[i] == '@')
			at = p + i;
	if (at) {
		u->user = (slice){p, (size_t)(at - p), true};
		len -= (size_t)(at + 1 - p);
		p = at + 1;
	}
	const char *slash = memchr(p, '/', len);
	if (slash)
		len = (size_t)(slash - p);
	if (len && p[0] == '[') {
		const char *close = memchr(p, ']', len);
		if (!close) {
			u->bad_host = true;
			return;
		}
		u->host = (slice){p + 1, (size_t)(close - p - 1), true};
		if ((size_t)(close + 1 - p) < len && close[1] == ':')
			u->port = (slice){close + 2, len - (size_t)(close + 2 - p), true};
		else if ((size_t)(close + 1 - p) < len)
			u->port = (slice){close + 1, len - (size_t)(close + 1 - p), true};
		return;
	}
	const char *colon = NULL;
	for (size_t i = 0; i < len; i++)
		if (p[i] == ':')
			colon = p + i;
	if (colon) {
		u->host = (slice){p, (size_t)(colon - p), true};
		u->port = (slice){colon + 1, len - (size_t)(colon + 1 - p), true};
	} else {
		u->host = (slice){p, len, true};
	}
}

static int parse_port(slice s, uint16_t *port, link_error *e)
{
	unsigned long v = 0;
	bool ok = s.len > 0 && s.len <= 5;
	for (size_t i = 0; ok && i < s.len; i++) {
		if (s.p[i] < '0' || s.p[i] > '9')
			ok = false;
		else
			v = v * 10 + (unsigned long)(s.p[i] - '0');
	}
	if (!ok || v < 1 || v > 65535)
		return fail(e, LINK_E_BAD_PORT, s.p, s.len);
	*port = (uint16_t)v;
	return 0;
}

/* Host and port into o; default_port 0: the port is required. */
static int take_endpoint(const url *u, uint16_t default_port, etm_outbound_spec *o, link_error *e)
{
	if (u->bad_host || !u->host.set || u->host.len == 0)
		return fails(e, LINK_E_NO_HOST, NULL);
	int rc = take(u->host, &o->server, "host", e);
	if (rc)
		return rc;
	if (o->server[0] == '\0')
		return fails(e, LINK_E_NO_HOST, NULL);
	if (!u->port.set || u->port.len == 0) {
		if (!default_port)
			return fails(e, LINK_E_NO_PORT, NULL);
		o->port = default_port;
	} else if ((rc = parse_port(u->port, &o->port, e))) {
		return rc;
	}
	o->has_port = true;
	return 0;
}

/* 8-4-4-4-12 hexadecimal digits: what the config's check takes. */
static bool is_uuid(const char *s)
{
	static const int groups[] = {8, 4, 4, 4, 12};
	for (size_t g = 0; g < 5; g++) {
		for (int i = 0; i < groups[g]; i++, s++)
			if (bytes_hex_digit(*s) < 0)
				return false;
		if (g < 4 && *s++ != '-')
			return false;
	}
	return *s == '\0';
}

/* The tag: the link's name when it has one, else "<protocol>-<server>". */
static int take_tag(slice name, etm_outbound_spec *o, link_error *e)
{
	int rc = take(name, &o->tag, "name", e);
	if (rc)
		return rc;
	if (o->tag && o->tag[0])
		return 0;
	free(o->tag);
	const char *pn = etm_protocol_name(o->protocol);
	size_t n = strlen(pn) + 1 + strlen(o->server) + 1;
	if (!(o->tag = malloc(n)))
		return fails(e, LINK_E_NOMEM, NULL);
	(void)snprintf(o->tag, n, "%s-%s", pn, o->server);
	return 0;
}

/* A comma-separated list ("h2,http/1.1") into l. */
static int take_list(slice s, etm_strlist *l, const char *what, link_error *e)
{
	char *all;
	int rc = take(s, &all, what, e);
	if (rc || !all)
		return rc;
	for (char *p = all, *next; p; p = next) {
		next = strchr(p, ',');
		if (next)
			*next++ = '\0';
		if (!*p)
			continue;
		char **items = realloc(l->items, (l->len + 1) * sizeof *items);
		if (!items || !(items[l->len] = strdup(p))) {
			if (items)
				l->items = items;
			free(all);
			return fails(e, LINK_E_NOMEM, NULL);
		}
		l->items = items;
		l->len++;
	}
	free(all);
	return 0;
}

/* The config takes a ws path only from its '/' (a request target, RFC 9112
 * section 3.2.1); an empty one is the default, "/". */
static int ws_path_ok(const char *path, link_error *e)
{
	if (path && path[0] && path[0] != '/')
		return unsupported(e, LF_WS_PATH);
	return 0;
}

static bool truthy(slice s)
{
	return slice_is(s, "1") || slice_is(s, "true");
}

/* The transport and TLS keys trojan and vless links share (the VLESS share
 * link proposal, Xray-core issue 91; trojan-go's URL scheme). */
static int take_stream(const query *q, etm_security default_sec, etm_outbound_spec *o,
                       link_error *e)
{
	/* transports Xray and v2fly have that the config does not: named */
	static const struct {
		const char *type;
		link_feature f;
	} other_nets[] = {
		{"httpupgrade", LF_HTTPUPGRADE},
		{"xhttp", LF_XHTTP},
		{"splithttp", LF_SPLITHTTP},
	};
	etm_stream_spec *st = &o->stream;
	int rc;
	if (slice_is(q->security, "reality"))
		return unsupported(e, LF_REALITY);
	if (!q->type.set || slice_is(q->type, "tcp") || slice_is(q->type, "original")) {
		st->network = ETM_NET_TCP;
	} else if (slice_is(q->type, "ws")) {
		st->network = ETM_NET_WS;
	} else if (slice_is(q->type, "grpc")) {
		st->network = ETM_NET_GRPC;
	} else {
		for (size_t i = 0; i < sizeof other_nets / sizeof other_nets[0]; i++)
			if (slice_is(q->type, other_nets[i].type))
				return unsupported(e, other_nets[i].f);
		return fail(e, LINK_E_NETWORK, q->type.p, q->type.len);
	}
	/* the header type is tcp's (HTTP obfuscation); vmess links write
	 * their grpc mode in the same key ("gun", as v2rayN writes gRPC) */
	if (st->network == ETM_NET_TCP && q->header_type.set && q->header_type.len &&
	    !slice_is(q->header_type, "none"))
		return unsupported(e, LF_HEADER_TYPE);
	if (st->network == ETM_NET_GRPC &&
	    (slice_is(q->header_type, "multi") || slice_is(q->mode, "multi")))
		return unsupported(e, LF_GRPC_MULTI);
	if (!q->security.set || q->security.len == 0)
		st->security = default_sec;
	else if (slice_is(q->security, "tls"))
		st->security = ETM_SEC_TLS;
	else if (slice_is(q->security, "none"))
		st->security = ETM_SEC_NONE;
	else
		return fail(e, LINK_E_SECURITY, q->security.p, q->security.len);
	if (st->security == ETM_SEC_TLS) {
		if ((rc = take_opt(q->sni, &st->tls.server_name, "sni", e)) ||
		    (rc = take_list(q->alpn, &st->tls.alpn, "alpn", e)))
			return rc;
		st->tls.allow_insecure = truthy(q->allow_insecure) || truthy(q->insecure);
	}
	if (st->network == ETM_NET_WS) {
		if ((rc = take_opt(q->path, &st->ws.path, "path", e)) ||
		    (rc = take_opt(q->host, &st->ws.host, "host", e)))
			return rc;
		if ((rc = ws_path_ok(st->ws.path, e)))
			return rc;
	} else if (st->network == ETM_NET_GRPC) {
		if ((rc = take_opt(q->service_name, &st->grpc.service_name, "serviceName", e)))
			return rc;
	}
	return 0;
}

static int need_user(const url *u, const char *what, link_error *e)
{
	if (!u->user.set || u->user.len == 0)
		return fails(e, LINK_E_NO_USER, what);
	return 0;
}

/* ---- per scheme ---- */

/* The opening every user@host scheme shares: the link split into *u and
 * its query into *q, and its user part, which must be there, into *user
 * (named what in an error). */
static int open_user_link(const char *p, size_t len, url *u, query *q, char **user,
                          const char *what, link_error *e)
{
	url_split(p, len, u);
	query_parse(u->query.p, u->query.len, q);
	int rc = need_user(u, what, e);
	return rc ? rc : take(u->user, user, what, e);
}

static int import_vless(const char *p, size_t len, etm_outbound_spec *o, link_error *e)
{
	url u;
	query q = {0};
	int rc = open_user_link(p, len, &u, &q, &o->settings.id, "id", e);
	if (rc)
		return rc;
	if (!is_uuid(o->settings.id))
		return fails(e, LINK_E_BAD_UUID, o->settings.id);
	if ((rc = take_endpoint(&u, 0, o, e)))
		return rc;
	if (q.encryption.set && !slice_is(q.encryption, "none"))
		return unsupported(e, LF_VLESS_ENCRYPTION);
	/* REALITY links carry a flow too: the transport's refusal first */
	if ((rc = take_stream(&q, ETM_SEC_NONE, o, e)))
		return rc;
	/* xtls-rprx-vision, and its -udp443 form */
	static const char vision[] = "xtls-rprx-vision";
	if (q.flow.len >= sizeof vision - 1 && memcmp(q.flow.p, vision, sizeof vision - 1) == 0)
		return unsupported(e, LF_VISION);
	if (q.flow.set && q.flow.len)
		return unsupported(e, LF_FLOW);
	return take_tag(u.frag, o, e);
}

/* trojan://password@host[:port] (trojan-gfw's trojan-url; 443 when the port
 * is left out and TLS unless security=none, as trojan-go's URL scheme). */
static int import_trojan(const char *p, size_t len, etm_outbound_spec *o, link_error *e)
{
	url u;
	query q = {0};
	int rc;
	if ((rc = open_user_link(p, len, &u, &q, &o->settings.password, "password", e)) ||
	    (rc = take_endpoint(&u, 443, o, e)) || (rc = take_stream(&q, ETM_SEC_TLS, o, e)))
		return rc;
	return take_tag(u.frag, o, e);
}

/* hysteria2://auth@host[:port]/?sni=&insecure= (Hysteria 2's URI scheme;
 * 443 by default; its TLS is QUIC's, so only [outbound.stream.tls]). */
static int import_hysteria2(const char *p, size_t len, etm_outbound_spec *o, link_error *e)
{
	url u;
	query q = {0};
	int rc;
	if ((rc = open_user_link(p, len, &u, &q, &o->settings.password, "password", e)) ||
	    (rc = take_endpoint(&u, 443, o, e)))
		return rc;
	if (q.obfs.set && q.obfs.len)
		return unsupported(e, LF_HY2_OBFS);
	if ((rc = take_opt(q.sni, &o->stream.tls.server_name, "sni", e)))
		return rc;
	o->stream.tls.allow_insecure = truthy(q.insecure);
	return take_tag(u.frag, o, e);
}

static const struct {
	const char *name;
	etm_ss_method method;
} ss_methods[] = {
	{"aes-128-gcm", ETM_SS_AES_128_GCM},
	{"aes-256-gcm", ETM_SS_AES_256_GCM},
	{"chacha20-ietf-poly1305", ETM_SS_CHACHA20_IETF_POLY1305},
	{"2022-blake3-aes-128-gcm", ETM_SS_2022_BLAKE3_AES_128_GCM},
	{"2022-blake3-aes-256-gcm", ETM_SS_2022_BLAKE3_AES_256_GCM},
	{"2022-blake3-chacha20-poly1305", ETM_SS_2022_BLAKE3_CHACHA20_POLY1305},
};

/* "method:password" (decoded) into o. */
static int take_ss_user(const char *mp, size_t len, etm_outbound_spec *o, link_error *e)
{
	const char *colon = memchr(mp, ':', len);
	size_t mlen = colon ? (size_t)(colon - mp) : len;
	o->settings.method = ETM_SS_UNSET;
	for (size_t i = 0; i < sizeof ss_methods / sizeof ss_methods[0]; i++)
		if (strlen(ss_methods[i].name) == mlen && memcmp(ss_methods[i].name, mp, mlen) == 0)
			o->settings.method = ss_methods[i].method;
	if (o->settings.method == ETM_SS_UNSET)
		return fail(e, LINK_E_METHOD, mp, mlen);
	if (!colon || colon + 1 == mp + len)
		return fails(e, LINK_E_NO_USER, "password");
	size_t plen = len - mlen - 1;
	if (!utf8_valid((const unsigned char *)colon + 1, plen) || memchr(colon + 1, '\0', plen))
		return fails(e, LINK_E_UTF8, "password");
	if (!(o->settings.password = strndup(colon + 1, plen)))
		return fails(e, LINK_E_NOMEM, NULL);
	return 0;
}

/* ss://userinfo@host:port[/][?plugin=...][#tag] (SIP002): userinfo is
 * base64url(method:password), or both percent-encoded with a ':' between
 * (which 2022 methods must use). The legacy form, base64 of
 * "method:password@host:port" whole, is taken too. */
static int import_ss(const char *p, size_t len, etm_outbound_spec *o, link_error *e)
{
	url u;
	query q = {0};
	int rc;
	char *buf = NULL;
	url_split(p, len, &u);
	if (!u.user.set) { /* legacy: decode, then split what it decodes to */
		const char *hash = memchr(p, '#', len);
		size_t blen = hash ? (size_t)(hash - p) : len;
		if (!(buf = malloc(blen + 1)))
			return fails(e, LINK_E_NOMEM, NULL);
		long n = link_base64_decode(p, blen, (unsigned char *)buf, blen);
		if (n < 0 || !memchr(buf, '@', (size_t)n)) {
			free(buf);
			return fails(e, n < 0 ? LINK_E_BASE64 : LINK_E_NO_USER,
			             n < 0 ? "link" : "method and password");
		}
		slice frag = u.frag;
		url_split(buf, (size_t)n, &u);
		u.frag = frag;
	}
	query_parse(u.query.p, u.query.len, &q);
	if (q.plugin.set && q.plugin.len) {
		rc = unsupported(e, LF_SS_PLUGIN);
		goto out;
	}
	if ((rc = need_user(&u, "method and password", e)))
		goto out;
	char user[LINK_MAX];
	long n;
	if (memchr(u.user.p, ':', u.user.len)) { /* percent-encoded */
		n = link_percent_decode(u.user.p, u.user.len, user, sizeof user);
		if (n < 0) {
			rc = fails(e, LINK_E_PERCENT, "method and password");
			goto out;
		}
	} else {
		char raw[LINK_MAX]; /* some clients write the base64's '=' as %3D */
		long r = link_percent_decode(u.user.p, u.user.len, raw, sizeof raw);
		n = r < 0 ? -1 : link_base64_decode(raw, (size_t)r, (unsigned char *)user, sizeof user);
		if (n < 0) {
			rc = fails(e, LINK_E_BASE64, "method and password");
			goto out;
		}
	}
	if ((rc = take_ss_user(user, (size_t)n, o, e)) || (rc = take_endpoint(&u, 0, o, e)))
		goto out;
	rc = take_tag(u.frag, o, e);
out:
	free(buf);
	return rc;
}

/* ---- the vmess body: a flat JSON object (RFC 8259) ---- */

/* The keys of v2rayN's vmess link (its wiki, "Description of VMess share
 * link") that map to the config; others are read and dropped. */
enum { VK_PS, VK_ADD, VK_PORT, VK_ID, VK_AID, VK_SCY, VK_NET, VK_TYPE, VK_HOST, VK_PATH,
       VK_TLS, VK_SNI, VK_ALPN, VK_INSECURE, VK_COUNT_ };
static const char *const vkeys[VK_COUNT_] = {
	"ps", "add", "port", "id", "aid", "scy", "net", "type", "host", "path", "tls", "sni", "alpn",
	"insecure",
};

typedef struct jreader {
	const char *p;
	size_t len, pos;
} jreader;

static void jspace(jreader *r)
{
	while (r->pos < r->len && (r->p[r->pos] == ' ' || r->p[r->pos] == '\t' ||
	                           r->p[r->pos] == '\n' || r->p[r->pos] == '\r'))
		r->pos++;
}

static void put_utf8(char *out, size_t *n, unsigned cp)
{
	if (cp < 0x80) {
		out[(*n)++] = (char)cp;
	} else if (cp < 0x800) {
		out[(*n)++] = (char)(0xc0 | cp >> 6);
		out[(*n)++] = (char)(0x80 | (cp & 0x3f));
	} else if (cp < 0x10000) {
		out[(*n)++] = (char)(0xe0 | cp >> 12);
		out[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
		out[(*n)++] = (char)(0x80 | (cp & 0x3f));
	} else {
		out[(*n)++] = (char)(0xf0 | cp >> 18);
		out[(*n)++] = (char)(0x80 | ((cp >> 12) & 0x3f));
		out[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
		out[(*n)++] = (char)(0x80 | (cp & 0x3f));
	}
}

static bool hex4(jreader *r, unsigned *cp)
{
	if (r->len - r->pos < 4)
		return false;
	*cp = 0;
	for (int i = 0; i < 4; i++) {
		int v = bytes_hex_digit(r->p[r->pos++]);
		if (v < 0)
			return false;
		*cp = *cp << 4 | (unsigned)v;
	}
	return true;
}

/* A string at r (after its '"') into out, unescaped; out has room for as
 * many bytes as the input has left, which no unescaping exceeds. */
static bool jstring(jreader *r, char *out, size_t *n)
{
	*n = 0;
	while (r->pos < r->len) {
		unsigned char c = (unsigned char)r->p[r->pos++];
		if (c == '"')
			return true;
		if (c < 0x20)
			return false;
		if (c != '\\') {
			out[(*n)++] = (char)c;
			continue;
		}
		if (r->pos >= r->len)
			return false;
		char esc = r->p[r->pos++];
		const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
		const char *hit = esc ? strchr(from, esc) : NULL;
		unsigned cp;
		if (hit) {
			out[(*n)++] = to[hit - from];
		} else if (esc == 'u' && hex4(r, &cp)) {
			if (cp >= 0xd800 && cp <= 0xdbff) { /* a surrogate pair */
				unsigned lo;
				if (r->len - r->pos < 2 || r->p[r->pos] != '\\' || r->p[r->pos + 1] != 'u')
					return false;
				r->pos += 2;
				if (!hex4(r, &lo) || lo < 0xdc00 || lo > 0xdfff)
					return false;
				cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
			} else if ((cp >= 0xdc00 && cp <= 0xdfff) || cp == 0) {
				return false;
			}
			put_utf8(out, n, cp);
		} else {
			return false;
		}
	}
	return false;
}

/* The object into vals (strings owned; a number kept as written, true as
 * "1", false and null as absent). Returns 0, or the byte where it fails. */
static size_t json_object(const char *p, size_t len, char *vals[VK_COUNT_], char *scratch)
{
	jreader r = {p, len, 0};
	jspace(&r);
	if (r.pos >= r.len || r.p[r.pos++] != '{')
		return r.pos ? r.pos : 1;
	jspace(&r);
	if (r.pos < r.len && r.p[r.pos] == '}') {
		r.pos++;
		goto end;
	}
	for (;;) {
		size_t kn, vn;
		char key[16];
		jspace(&r);
		if (r.pos >= r.len || r.p[r.pos++] != '"' || !jstring(&r, scratch, &kn))
			return r.pos;
		memcpy(key, scratch, kn < sizeof key - 1 ? kn : sizeof key - 1);
		key[kn < sizeof key - 1 ? kn : sizeof key - 1] = '\0';
		bool keyfits = kn < sizeof key;
		jspace(&r);
		if (r.pos >= r.len || r.p[r.pos++] != ':')
			return r.pos;
		jspace(&r);
		if (r.pos >= r.len)
			return r.pos + 1;
		char c = r.p[r.pos];
		const char *val = scratch;
		if (c == '"') {
			r.pos++;
			if (!jstring(&r, scratch, &vn) || !utf8_valid((unsigned char *)scratch, vn))
				return r.pos;
		} else if (c == '-' || (c >= '0' && c <= '9')) {
			size_t start = r.pos;
			while (r.pos < r.len && strchr("+-.eE0123456789", r.p[r.pos]) && r.p[r.pos])
				r.pos++;
			val = r.p + start;
			vn = r.pos - start;
		} else if (r.len - r.pos >= 4 && memcmp(r.p + r.pos, "true", 4) == 0) {
			r.pos += 4;
			val = "1";
			vn = 1;
		} else if (r.len - r.pos >= 5 && memcmp(r.p + r.pos, "false", 5) == 0) {
			r.pos += 5;
			val = NULL;
		} else if (r.len - r.pos >= 4 && memcmp(r.p + r.pos, "null", 4) == 0) {
			r.pos += 4;
			val = NULL;
		} else {
			return r.pos + 1; /* a nested object or array: not the flat form */
		}
		for (int k = 0; keyfits && k < VK_COUNT_; k++)
			if (strcmp(key, vkeys[k]) == 0) {
				free(vals[k]); /* a repeated key: the last wins */
				vals[k] = NULL;
				if (val && memchr(val, '\0', vn))
					return r.pos;
				if (val && !(vals[k] = strndup(val, vn)))
					return r.pos; /* out of memory reads as a failure here */
			}
		jspace(&r);
		if (r.pos >= r.len)
			return r.pos + 1;
		c = r.p[r.pos++];
		if (c == '}')
			break;
		if (c != ',')
			return r.pos;
	}
end:
	jspace(&r);
	return r.pos == r.len ? 0 : r.pos + 1;
}

static slice sl(const char *s)
{
	return s ? (slice){s, strlen(s), true} : (slice){NULL, 0, false};
}

static bool empty(const char *s)
{
	return !s || !*s;
}

static char *dup_or_null(const char *s)
{
	return empty(s) ? NULL : strdup(s);
}

static int vmess_fields(char *v[VK_COUNT_], etm_outbound_spec *o, link_error *e)
{
	static const struct {
		const char *name;
		etm_vmess_security sec;
	} secs[] = {
		{"auto", ETM_VMESS_AUTO},   {"aes-128-gcm", ETM_VMESS_AES_128_GCM},
		{"chacha20-poly1305", ETM_VMESS_CHACHA20_POLY1305},
		{"none", ETM_VMESS_NONE},   {"zero", ETM_VMESS_ZERO},
	};
	int rc;
	if (empty(v[VK_ADD]))
		return fails(e, LINK_E_NO_HOST, NULL);
	if (empty(v[VK_PORT]))
		return fails(e, LINK_E_NO_PORT, NULL);
	if ((rc = parse_port(sl(v[VK_PORT]), &o->port, e)))
		return rc;
	o->has_port = true;
	if (empty(v[VK_ID]))
		return fails(e, LINK_E_NO_USER, "id");
	if (!is_uuid(v[VK_ID]))
		return fails(e, LINK_E_BAD_UUID, v[VK_ID]);
	if (!empty(v[VK_AID]) && strcmp(v[VK_AID], "0") != 0)
		return unsupported(e, LF_ALTER_ID);
	o->settings.security = ETM_VMESS_AUTO;
	if (!empty(v[VK_SCY])) {
		size_t i = 0, n = sizeof secs / sizeof secs[0];
		while (i < n && strcmp(secs[i].name, v[VK_SCY]) != 0)
			i++;
		if (i == n)
			return fails(e, LINK_E_METHOD, v[VK_SCY]);
		o->settings.security = secs[i].sec;
	}
	/* the rest as the query keys trojan and vless links use */
	query q = {0};
	q.type = empty(v[VK_NET]) ? (slice){0} : sl(v[VK_NET]);
	q.header_type = sl(v[VK_TYPE]);
	q.security = sl(v[VK_TLS]);
	q.insecure = sl(v[VK_INSECURE]);
	etm_stream_spec *st = &o->stream;
	if ((rc = take_stream(&q, ETM_SEC_NONE, o, e)))
		return rc;
	if (!(o->server = strdup(v[VK_ADD])) || !(o->settings.id = strdup(v[VK_ID])))
		return fails(e, LINK_E_NOMEM, NULL);
	if (st->security == ETM_SEC_TLS) {
		if (!empty(v[VK_SNI]) && !(st->tls.server_name = strdup(v[VK_SNI])))
			return fails(e, LINK_E_NOMEM, NULL);
		char *alpn = v[VK_ALPN];
		for (char *p = alpn, *next; p; p = next) {
			next = strchr(p, ',');
			if (next)
				*next++ = '\0';
			if (!*p)
				continue;
			char **items = realloc(st->tls.alpn.items, (st->tls.alpn.len + 1) * sizeof *items);
			if (!items)
				return fails(e, LINK_E_NOMEM, NULL);
			st->tls.alpn.items = items;
			if (!(items[st->tls.alpn.len] = strdup(p)))
				return fails(e, LINK_E_NOMEM, NULL);
			st->tls.alpn.len++;
		}
	}
	if (st->network == ETM_NET_WS) {
		if ((rc = ws_path_ok(v[VK_PATH], e)))
			return rc;
		st->ws.path = dup_or_null(v[VK_PATH]);
		st->ws.host = dup_or_null(v[VK_HOST]);
	} else if (st->network == ETM_NET_GRPC) {
		st->grpc.service_name = dup_or_null(v[VK_PATH]); /* v2rayN: grpc's path */
	}
	if (empty(v[VK_PS]))
		return take_tag((slice){0}, o, e);
	if (!(o->tag = strdup(v[VK_PS])))
		return fails(e, LINK_E_NOMEM, NULL);
	return 0;
}

/* vmess://base64(JSON) (v2rayN's form). */
static int import_vmess(const char *p, size_t len, etm_outbound_spec *o, link_error *e)
{
	const char *hash = memchr(p, '#', len);
	if (hash)
		len = (size_t)(hash - p);
	char *body = malloc(len + 1), *scratch = malloc(len + 1);
	char *vals[VK_COUNT_] = {0};
	int rc = 0;
	if (!body || !scratch) {
		rc = fails(e, LINK_E_NOMEM, NULL);
		goto out;
	}
	long n = link_base64_decode(p, len, (unsigned char *)body, len);
	if (n < 0) {
		rc = fails(e, LINK_E_BASE64, "vmess link");
		goto out;
	}
	size_t at = json_object(body, (size_t)n, vals, scratch);
	if (at) {
		char num[24];
		(void)snprintf(num, sizeof num, "%zu", at);
		rc = fails(e, LINK_E_JSON, num);
		goto out;
	}
	rc = vmess_fields(vals, o, e);
out:
	for (int k = 0; k < VK_COUNT_; k++)
		free(vals[k]);
	free(body);
	free(scratch);
	return rc;
}

/* ---- entry points ---- */

static void strlist_free(etm_strlist *l)
{
	for (size_t i = 0; i < l->len; i++)
		free(l->items[i]);
	free(l->items);
}

void link_outbound_free(etm_outbound_spec *o)
{
	free(o->tag);
	free(o->server);
	free(o->settings.id);
	free(o->settings.password);
	free(o->stream.tls.server_name);
	strlist_free(&o->stream.tls.alpn);
	free(o->stream.ws.path);
	free(o->stream.ws.host);
	free(o->stream.grpc.service_name);
	memset(o, 0, sizeof *o);
}

int link_import(const char *text, size_t len, etm_outbound_spec *out, link_error *e)
{
	static const struct {
		const char *scheme;
		etm_protocol proto;
		int (*parse)(const char *, size_t, etm_outbound_spec *, link_error *);
	} schemes[] = {
		{"vless", ETM_PROTO_VLESS, import_vless},
		{"vmess", ETM_PROTO_VMESS, import_vmess},
		{"trojan", ETM_PROTO_TROJAN, import_trojan},
		{"ss", ETM_PROTO_SHADOWSOCKS, import_ss},
		{"hysteria2", ETM_PROTO_HYSTERIA2, import_hysteria2},
		{"hy2", ETM_PROTO_HYSTERIA2, import_hysteria2},
	};
	memset(e, 0, sizeof *e);
	if (len > LINK_MAX)
		return fails(e, LINK_E_TOO_LONG, NULL);
	/* surrounding blanks, as a paste brings them */
	while (len && (*text == ' ' || *text == '\t' || *text == '\n' || *text == '\r'))
		text++, len--;
	while (len && (text[len - 1] == ' ' || text[len - 1] == '\t' || text[len - 1] == '\n' ||
	               text[len - 1] == '\r'))
		len--;
	const char *sep = NULL;
	for (size_t i = 0; i + 2 < len && !sep; i++)
		if (text[i] == ':' && text[i + 1] == '/' && text[i + 2] == '/')
			sep = text + i;
	size_t slen = sep ? (size_t)(sep - text) : len;
	for (size_t i = 0; sep && i < sizeof schemes / sizeof schemes[0]; i++) {
		if (strlen(schemes[i].scheme) != slen || strncasecmp(schemes[i].scheme, text, slen))
			continue;
		out->protocol = schemes[i].proto;
		int rc = schemes[i].parse(sep + 3, len - slen - 3, out, e);
		out->protocol = schemes[i].proto;
		if (rc == 0)
			rc = link_check(out, e);
		if (rc) {
			link_outbound_free(out);
			return rc;
		}
		out->protocol = schemes[i].proto;
		return 0;
	}
	const char *colon = memchr(text, ':', len);
	return fail(e, LINK_E_SCHEME, text, colon ? (size_t)(colon - text) : len);
}
