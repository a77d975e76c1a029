/* link_write.c - an imported outbound printed as TOML, and an inbound's users printed as share links. */
#include "app/link.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "base/json.h"

/* Output into the caller's buffer; once something does not fit, every
 * later put is dropped and the result is LINK_E_SPACE. */
typedef struct sbuf {
	char *p;
	size_t size, len;
	bool full;
} sbuf;

static void put(sbuf *b, const char *s, size_t n)
{
	if (b->full || b->size - b->len <= n) {
		b->full = true;
		return;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void puts_(sbuf *b, const char *s)
{
	put(b, s, strlen(s));
}

static int done(sbuf *b)
{
	return b->full ? LINK_E_SPACE : (int)b->len;
}

/* ---- TOML ---- */

/* A TOML basic string (TOML 1.0, "String"): '"' and '\' escaped, control
 * bytes as \uXXXX; the text is UTF-8 already (link_import checks). */
static void toml_str(sbuf *b, const char *s)
{
	puts_(b, "\"");
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		char esc[8];
		if (c == '"' || c == '\\') {
			esc[0] = '\\', esc[1] = (char)c, esc[2] = '\0';
			puts_(b, esc);
		} else if (c < 0x20 || c == 0x7f) {
			(void)snprintf(esc, sizeof esc, "\\u%04X", c);
			puts_(b, esc);
		} else {
			put(b, s, 1);
		}
	}
	puts_(b, "\"");
}

static void toml_kv(sbuf *b, const char *key, const char *val)
{
	if (!val)
		return;
	puts_(b, key);
	puts_(b, " = ");
	toml_str(b, val);
	puts_(b, "\n");
}

int link_toml_write(const etm_outbound_spec *o, char *out, size_t size)
{
	static const char *const vmess_secs[] = {
		[ETM_VMESS_AUTO] = "auto", [ETM_VMESS_AES_128_GCM] = "aes-128-gcm",
		[ETM_VMESS_CHACHA20_POLY1305] = "chacha20-poly1305", [ETM_VMESS_NONE] = "none",
		[ETM_VMESS_ZERO] = "zero",
	};
	static const char *const nets[] = {
		[ETM_NET_TCP] = "tcp", [ETM_NET_TLS] = "tls", [ETM_NET_WS] = "ws", [ETM_NET_GRPC] = "grpc",
	};
	sbuf b = {out, size, 0, size == 0};
	if (size)
		out[0] = '\0';
	const etm_stream_spec *st = &o->stream;
	bool hy2 = o->protocol == ETM_PROTO_HYSTERIA2;
	if (hy2)
		puts_(&b, "# hysteria2 is parsed and checked by the config, but this build cannot run it:\n"
		          "# a start refuses this outbound (docs/links.md).\n");
	puts_(&b, "[[outbound]]\n");
	toml_kv(&b, "tag", o->tag);
	toml_kv(&b, "protocol", etm_protocol_name(o->protocol));
	toml_kv(&b, "server", o->server);
	char num[16];
	(void)snprintf(num, sizeof num, "%u", (unsigned)o->port);
	puts_(&b, "port = ");
	puts_(&b, num);
	puts_(&b, "\n\n[outbound.settings]\n");
	switch (o->protocol) {
	case ETM_PROTO_VLESS:
		toml_kv(&b, "id", o->settings.id);
		break;
	case ETM_PROTO_VMESS:
		toml_kv(&b, "id", o->settings.id);
		toml_kv(&b, "security", vmess_secs[o->settings.security]);
		break;
	case ETM_PROTO_SHADOWSOCKS:
		toml_kv(&b, "method", etm_ss_method_name(o->settings.method));
		toml_kv(&b, "password", o->settings.password);
		break;
	default: /* trojan, hysteria2 */
		toml_kv(&b, "password", o->settings.password);
		break;
	}
	bool tls = st->security == ETM_SEC_TLS || st->network == ETM_NET_TLS || hy2;
	if (!hy2 && (st->network != ETM_NET_TCP || st->security != ETM_SEC_NONE)) {
		puts_(&b, "\n[outbound.stream]\n");
		if (st->network != ETM_NET_TCP)
			toml_kv(&b, "network", nets[st->network]);
		if (st->security == ETM_SEC_TLS)
			toml_kv(&b, "security", "tls");
	}
	if (tls && (st->tls.server_name || st->tls.alpn.len || st->tls.allow_insecure)) {
		puts_(&b, "\n[outbound.stream.tls]\n");
		toml_kv(&b, "server_name", st->tls.server_name);
		if (st->tls.alpn.len) {
			puts_(&b, "alpn = [");
			for (size_t i = 0; i < st->tls.alpn.len; i++) {
				if (i)
					puts_(&b, ", ");
				toml_str(&b, st->tls.alpn.items[i]);
			}
			puts_(&b, "]\n");
		}
		if (st->tls.allow_insecure)
			puts_(&b, "allow_insecure = true\n");
	}
	if (st->network == ETM_NET_WS && (st->ws.path || st->ws.host)) {
		puts_(&b, "\n[outbound.stream.ws]\n");
		toml_kv(&b, "path", st->ws.path);
		toml_kv(&b, "host", st->ws.host);
	}
	if (st->network == ETM_NET_GRPC && st->grpc.service_name) {
		puts_(&b, "\n[outbound.stream.grpc]\n");
		toml_kv(&b, "service_name", st->grpc.service_name);
	}
	return done(&b);
}

/* ---- links ---- */

/* RFC 3986 section 2.3's unreserved characters pass, every other byte is
 * %XX: what encodeURIComponent does, less its few extra marks. */
static void pct(sbuf *b, const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	for (; s && *s; s++) {
		unsigned char c = (unsigned char)*s;
		if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		    c == '-' || c == '.' || c == '_' || c == '~') {
			put(b, s, 1);
		} else {
			char e[3] = {'%', hex[c >> 4], hex[c & 15]};
			put(b, e, 3);
		}
	}
}

/* base64 (RFC 4648 section 4), or base64url without padding (section 5,
 * as SIP002 writes the userinfo). */
static void b64(sbuf *b, const unsigned char *s, size_t n, bool url)
{
	const char *abc = url ? "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	                      : "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	for (size_t i = 0; i < n; i += 3) {
		unsigned v = (unsigned)s[i] << 16 | (i + 1 < n ? (unsigned)s[i + 1] << 8 : 0) |
		             (i + 2 < n ? s[i + 2] : 0);
		char q[4] = {abc[v >> 18], abc[(v >> 12) & 63], abc[(v >> 6) & 63], abc[v & 63]};
		size_t keep = n - i >= 3 ? 4 : n - i + 1;
		put(b, q, keep);
		if (!url)
			put(b, "==", 4 - keep);
	}
}

static void join_alpn(sbuf *b, const etm_strlist *l)
{
	for (size_t i = 0; i < l->len; i++) {
		if (i)
			put(b, ",", 1);
		puts_(b, l->items[i]);
	}
}

/* host:port with an IPv6 address in brackets (RFC 3986 section 3.2.2). */
static void endpoint(sbuf *b, const char *host, uint16_t port)
{
	char num[8];
	bool v6 = strchr(host, ':') != NULL;
	if (v6)
		puts_(b, "[");
	puts_(b, host);
	(void)snprintf(num, sizeof num, ":%u", (unsigned)port);
	puts_(b, v6 ? "]" : "");
	puts_(b, num);
}

/* The query a vless or trojan link carries for the inbound's stream. */
static void stream_query(sbuf *b, const etm_stream_spec *st)
{
	bool tls = st->security == ETM_SEC_TLS || st->network == ETM_NET_TLS;
	puts_(b, st->network == ETM_NET_WS ? "type=ws" : st->network == ETM_NET_GRPC ? "type=grpc"
	                                                                             : "type=tcp");
	if (st->network == ETM_NET_WS) {
		puts_(b, "&path=");
		pct(b, st->ws.path ? st->ws.path : "/");
		if (st->ws.host) {
			puts_(b, "&host=");
			pct(b, st->ws.host);
		}
	} else if (st->network == ETM_NET_GRPC) {
		puts_(b, "&serviceName=");
		pct(b, st->grpc.service_name ? st->grpc.service_name : "GunService");
	}
	puts_(b, tls ? "&security=tls" : "&security=none");
	if (tls && st->tls.server_name) {
		puts_(b, "&sni=");
		pct(b, st->tls.server_name);
	}
	if (tls && st->tls.alpn.len) {
		char list[512];
		sbuf a = {list, sizeof list, 0, false};
		list[0] = '\0';
		join_alpn(&a, &st->tls.alpn);
		puts_(b, "&alpn=");
		pct(b, list);
		if (a.full)
			b->full = true;
	}
}

/* One JSON member of the vmess body: ,"key":"value". */
static void jkv(sbuf *b, const char *key, const char *val, bool first)
{
	char esc[LINK_MAX];
	(void)json_escape(esc, sizeof esc, val ? val : "", val ? strlen(val) : 0);
	if (strlen(val ? val : "") * JSON_ESCAPE_MAX >= sizeof esc)
		b->full = true; /* would be cut: say so rather than print a wrong link */
	puts_(b, first ? "\"" : ",\"");
	puts_(b, key);
	puts_(b, "\":\"");
	puts_(b, esc);
	puts_(b, "\"");
}

static void vmess_link(sbuf *b, const etm_inbound_spec *in, const char *host, const char *id,
                       const char *name)
{
	const etm_stream_spec *st = &in->stream;
	bool tls = st->security == ETM_SEC_TLS || st->network == ETM_NET_TLS;
	char json[LINK_MAX], port[8], alpn[512];
	sbuf j = {json, sizeof json, 0, false}, a = {alpn, sizeof alpn, 0, false};
	json[0] = alpn[0] = '\0';
	(void)snprintf(port, sizeof port, "%u", (unsigned)in->port);
	join_alpn(&a, &st->tls.alpn);
	put(&j, "{", 1);
	jkv(&j, "v", "2", true);
	jkv(&j, "ps", name, false);
	jkv(&j, "add", host, false);
	jkv(&j, "port", port, false);
	jkv(&j, "id", id, false);
	jkv(&j, "aid", "0", false);
	jkv(&j, "scy", "auto", false);
	jkv(&j, "net", st->network == ETM_NET_WS ? "ws" : st->network == ETM_NET_GRPC ? "grpc" : "tcp",
	    false);
	jkv(&j, "type", "none", false);
	jkv(&j, "host", st->network == ETM_NET_WS ? st->ws.host : NULL, false);
	jkv(&j, "path",
	    st->network == ETM_NET_WS     ? (st->ws.path ? st->ws.path : "/")
	    : st->network == ETM_NET_GRPC ? (st->grpc.service_name ? st->grpc.service_name
	                                                           : "GunService")
	                                  : NULL,
	    false);
	jkv(&j, "tls", tls ? "tls" : "", false);
	jkv(&j, "sni", tls ? st->tls.server_name : NULL, false);
	jkv(&j, "alpn", tls ? alpn : NULL, false);
	put(&j, "}", 1);
	if (j.full || a.full) {
		b->full = true;
		return;
	}
	puts_(b, "vmess://");
	b64(b, (const unsigned char *)json, j.len, false);
}

static bool is_2022(etm_ss_method m)
{
	return m == ETM_SS_2022_BLAKE3_AES_128_GCM || m == ETM_SS_2022_BLAKE3_AES_256_GCM ||
	       m == ETM_SS_2022_BLAKE3_CHACHA20_POLY1305;
}

/* One user's link into b; secret is the id or the password. */
static void one_link(sbuf *b, const etm_inbound_spec *in, const char *host, const char *secret,
                     const char *name)
{
	const char *method = etm_ss_method_name(in->settings.method);
	switch (in->protocol) {
	case ETM_PROTO_VMESS:
		vmess_link(b, in, host, secret, name);
		puts_(b, "\n");
		return;
	case ETM_PROTO_VLESS:
	case ETM_PROTO_TROJAN:
		puts_(b, in->protocol == ETM_PROTO_VLESS ? "vless://" : "trojan://");
		pct(b, secret);
		puts_(b, "@");
		endpoint(b, host, in->port);
		puts_(b, in->protocol == ETM_PROTO_VLESS ? "?encryption=none&" : "?");
		stream_query(b, &in->stream);
		break;
	default: /* shadowsocks: SIP002 */
		puts_(b, "ss://");
		if (is_2022(in->settings.method)) {
			/* SIP002: not base64, both parts percent-encoded; a user
			 * behind an identity key has "iPSK:uPSK" (SIP022-2's client
			 * form), its ':' written %3A as docs/inbound-shadowsocks.md
			 * says */
			pct(b, method);
			puts_(b, ":");
			pct(b, secret);
		} else {
			char mp[LINK_MAX];
			int n = snprintf(mp, sizeof mp, "%s:%s", method, secret);
			if (n < 0 || (size_t)n >= sizeof mp) {
				b->full = true;
				return;
			}
			b64(b, (const unsigned char *)mp, (size_t)n, true);
		}
		puts_(b, "@");
		endpoint(b, host, in->port);
		break;
	}
	puts_(b, "#");
	pct(b, name);
	puts_(b, "\n");
}

int link_exportable(etm_protocol p)
{
	return p == ETM_PROTO_TROJAN || p == ETM_PROTO_VLESS || p == ETM_PROTO_VMESS ||
	       p == ETM_PROTO_SHADOWSOCKS;
}

int link_export_inbound(const etm_inbound_spec *in, const char *host, char *out, size_t size,
                        link_error *e)
{
	sbuf b = {out, size, 0, size == 0};
	memset(e, 0, sizeof *e);
	if (size)
		out[0] = '\0';
	if (!link_exportable(in->protocol))
		return 0;
	if (!host) {
		host = in->listen ? in->listen : "127.0.0.1";
		if (strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0) {
			e->code = LINK_E_LISTEN_ANY;
			(void)snprintf(e->detail, sizeof e->detail, "%s", in->tag);
			return LINK_E_LISTEN_ANY;
		}
	}
	const etm_settings_spec *st = &in->settings;
	/* a shadowsocks inbound without users has its one password */
	size_t n = st->users_len ? st->users_len : (st->password ? 1 : 0);
	/* several 2022 users sit behind the identity key in settings.password:
	 * each client needs both, "iPSK:uPSK" (docs/inbound-shadowsocks.md) */
	bool identity = in->protocol == ETM_PROTO_SHADOWSOCKS && is_2022(st->method) &&
	                st->users_len && st->password;
	for (size_t i = 0; i < n; i++) {
		const etm_user_spec *u = st->users_len ? &st->users[i] : NULL;
		const char *secret = !u ? st->password : u->id ? u->id : u->password;
		char both[2 * LINK_MAX];
		if (identity) {
			int k = snprintf(both, sizeof both, "%s:%s", st->password, secret);
			if (k < 0 || (size_t)k >= sizeof both) {
				e->code = LINK_E_SPACE;
				return LINK_E_SPACE;
			}
			secret = both;
		}
		char name[256];
		if (u && u->name)
			(void)snprintf(name, sizeof name, "%s-%s", in->tag, u->name);
		else if (n > 1)
			(void)snprintf(name, sizeof name, "%s-%zu", in->tag, i + 1);
		else
			(void)snprintf(name, sizeof name, "%s", in->tag);
		one_link(&b, in, host, secret, name);
	}
	if (b.full) {
		e->code = LINK_E_SPACE;
		return LINK_E_SPACE;
	}
	return (int)b.len;
}
