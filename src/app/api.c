/* api.c - the admin API's routes and JSON (Clash's shapes, docs/api.md): a request and a provider in, a status and a body out. */
#include "app/api.h"
#include "app/api_json.h"
#include "app/api_route.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>

#include "base/bytes.h"
#include "base/log.h"
#include "etemenanki/etemenanki.h"

static const char *const msgs[API_M_COUNT_] = {
	[API_M_UNAUTHORIZED] = "Unauthorized",
	[API_M_NOT_FOUND] = "resource not found",
	[API_M_METHOD] = "method not allowed",
	[API_M_BODY_INVALID] = "Body invalid",
	[API_M_QUERY_INVALID] = "query parameter invalid",
	[API_M_LEVEL_INVALID] = "log-level must be silent, " LOG_LEVEL_WORDS_TEXT,
	[API_M_TOO_LARGE] = "request body over 65536 bytes",
	[API_M_HEAD_TOO_LARGE] = "request head over 16384 bytes",
	[API_M_BAD_REQUEST] = "bad request",
	[API_M_VERSION] = "only HTTP/1.x is served",
	[API_M_NOMEM] = "out of memory",
	[API_M_TIMEOUT] = "Timeout",
	[API_M_DELAY_FAILED] = "An error occurred in the delay test",
	[API_M_BUSY] = "too many delay tests at once",
	[API_M_USER_UNKNOWN] = ("no running user has that name (to add one, name its inbound: "
	                        "?inbound=<tag>)"),
	[API_M_CREDENTIAL] = "username, password and id must be JSON strings without escapes",
};
_Static_assert(API_BODY_MAX == 65536, "the 413 message names the bound");

const char *api_message(api_msg m) { return (unsigned)m < API_M_COUNT_ ? msgs[m] : ""; }

/* Every status the API answers with, and its reason (RFC 9110 15). */
static const struct {
	int status;
	const char *reason;
} REASONS[] = {
	{101, "Switching Protocols"},
	{200, "OK"},
	{204, "No Content"},
	{400, "Bad Request"},
	{401, "Unauthorized"},
	{404, "Not Found"},
	{405, "Method Not Allowed"},
	{413, "Content Too Large"},
	{431, "Request Header Fields Too Large"},
	{500, "Internal Server Error"},
	{503, "Service Unavailable"},
	{504, "Gateway Timeout"},
	{505, "HTTP Version Not Supported"},
};

const char *api_reason(int status)
{
	for (size_t i = 0; i < sizeof REASONS / sizeof *REASONS; i++)
		if (REASONS[i].status == status)
			return REASONS[i].reason;
	return "";
}

int api_render_message(const char *text, api_buf *b)
{
	return api_json_puts(b, "{\"message\":") | api_json_str(b, text) | api_json_puts(b, "}");
}

int api_answer_message(api_response *r, int status, api_msg m)
{
	r->status = status;
	return api_render_message(msgs[m], &r->body);
}

/* ---- names ---- */

const char *api_level_name(int level)
{
	switch (level) {
	case LOG_LEVEL_ERROR:
		return "error";
	case LOG_LEVEL_WARN:
		return "warning";
	case LOG_LEVEL_INFO:
		return "info";
	default:
		return "debug";
	}
}

int api_level_of(const char *s, size_t n)
{
	/* Clash's "silent" has no level below error here; the rest are log.h's
	 * words, the CLI's and the config's */
	if (n == 6 && memcmp(s, "silent", 6) == 0)
		return LOG_LEVEL_ERROR;
	return log_level_parse(s, n);
}

/* Clash's type of an outbound (mihomo's adapter type names). */
static const char *type_of(etm_protocol p)
{
	switch (p) {
	case ETM_PROTO_FREEDOM:
		return "Direct";
	case ETM_PROTO_BLACKHOLE:
		return "Reject";
	case ETM_PROTO_SOCKS:
		return "Socks5";
	case ETM_PROTO_HTTP:
		return "Http";
	case ETM_PROTO_TROJAN:
		return "Trojan";
	case ETM_PROTO_VLESS:
		return "Vless";
	case ETM_PROTO_VMESS:
		return "Vmess";
	case ETM_PROTO_SHADOWSOCKS:
		return "Shadowsocks";
	case ETM_PROTO_HYSTERIA2:
		return "Hysteria2";
	case ETM_PROTO_WIREGUARD:
		return "WireGuard";
	default:
		return etm_protocol_name(p);
	}
}

/* ---- the request's target ---- */

/* Percent-decodes s[0, n) into out (NUL-terminated; '+' is a space in a
 * query, RFC 1866 8.2.1 form encoding). Returns the length, or -1 when it
 * does not fit or an escape is broken. */
ssize_t api_decode(const char *s, size_t n, bool query, char *out, size_t size)
{
	size_t o = 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (c == '%') {
			if (i + 2 >= n)
				return -1;
			int h = bytes_hex_digit(s[i + 1]), l = bytes_hex_digit(s[i + 2]);
			if (h < 0 || l < 0)
				return -1;
			c = (char)(h * 16 + l);
			i += 2;
		} else if (c == '+' && query) {
			c = ' ';
		}
		if (o + 1 >= size)
			return -1;
		out[o++] = c;
	}
	out[o] = '\0';
	return (ssize_t)o;
}

/* The value of query parameter k, decoded into out. Returns its length,
 * -1 when absent, -2 when it does not decode. */
ssize_t api_query_get(const char *q, size_t n, const char *k, char *out, size_t size)
{
	size_t kl = strlen(k), i = 0;
	while (i < n) {
		size_t e = i;
		while (e < n && q[e] != '&')
			e++;
		if (e - i >= kl && memcmp(q + i, k, kl) == 0 && (e - i == kl || q[i + kl] == '=')) {
			size_t v = e - i == kl ? e : i + kl + 1;
			ssize_t r = api_decode(q + v, e - v, true, out, size);
			return r < 0 ? -2 : r;
		}
		i = e + 1;
	}
	return -1;
}

/* A number parameter in [lo, hi], def when absent; -1 when bad. */
static int64_t query_num(const char *q, size_t n, const char *k, int64_t def, int64_t lo,
                         int64_t hi)
{
	char t[24];
	ssize_t r = api_query_get(q, n, k, t, sizeof t);
	if (r == -1)
		return def;
	if (r <= 0)
		return -1;
	char *end;
	long long v = strtoll(t, &end, 10);
	if (*end || v < lo || v > hi)
		return -1;
	return v;
}

/* Constant-time comparison, so the secret does not leak through timing. */
static bool same_secret(const char *a, size_t an, const char *secret)
{
	size_t sn = strlen(secret);
	unsigned char d = an != sn;
	for (size_t i = 0; i < an; i++)
		d |= (unsigned char)(a[i] ^ secret[i < sn ? i : 0]);
	return d == 0;
}

static bool authorized(const api_view *v, const api_request *r, const char *q, size_t qn)
{
	if (!v->secret || !*v->secret)
		return true;
	/* "Bearer" is case-insensitive (RFC 9110 11.1; RFC 6750 2.1) */
	if (r->auth && r->auth_len > 7 && strncasecmp(r->auth, "bearer ", 7) == 0) {
		size_t i = 7;
		while (i < r->auth_len && r->auth[i] == ' ')
			i++;
		if (same_secret(r->auth + i, r->auth_len - i, v->secret))
			return true;
	}
	/* a browser cannot set a header on a WebSocket: the token goes in
	 * the query (mihomo's convention) */
	if (r->websocket) {
		char t[512];
		ssize_t n = api_query_get(q, qn, "token", t, sizeof t);
		if (n >= 0 && same_secret(t, (size_t)n, v->secret))
			return true;
	}
	return false;
}

/* ---- the endpoints ---- */

static int get_configs(const api_view *v, const api_provider *p, api_buf *b)
{
	uint16_t port = 0, socks = 0, mixed = 0;
	bool lan = false;
	for (size_t i = 0; i < v->n_inbounds; i++) {
		const api_inbound *in = &v->inbounds[i];
		uint16_t *slot = in->protocol == ETM_PROTO_HTTP    ? &port
		                 : in->protocol == ETM_PROTO_SOCKS ? &socks
		                 : in->protocol == ETM_PROTO_MIXED ? &mixed
		                                                   : NULL;
		if (slot && *slot == 0)
			*slot = p->inbound_port(p->ctx, in->tag);
		if (slot)
			lan |= !in->loopback;
	}
	bool f = true;
	return api_json_puts(b, "{") | api_json_key(b, &f, "port") | api_json_u64(b, port) |
	       api_json_key(b, &f, "socks-port") | api_json_u64(b, socks) |
	       api_json_key(b, &f, "mixed-port") | api_json_u64(b, mixed) |
	       api_json_key(b, &f, "redir-port") | api_json_u64(b, 0) |
	       api_json_key(b, &f, "tproxy-port") | api_json_u64(b, 0) |
	       api_json_key(b, &f, "allow-lan") | api_json_puts(b, lan ? "true" : "false") |
	       api_json_key(b, &f, "mode") | api_json_str(b, "rule") |
	       api_json_key(b, &f, "log-level") |
	       api_json_str(b, api_level_name(p->log_level(p->ctx))) | api_json_key(b, &f, "ipv6") |
	       api_json_puts(b, "true") | api_json_puts(b, "}");
}

static const api_outbound *find_outbound(const api_view *v, const char *name)
{
	for (size_t i = 0; i < v->n_outbounds; i++)
		if (strcmp(v->outbounds[i].tag, name) == 0)
			return &v->outbounds[i];
	return NULL;
}

static ssize_t find_balancer(const api_view *v, const char *name)
{
	for (size_t i = 0; i < v->n_balancers; i++)
		if (strcmp(v->balancers[i].tag, name) == 0)
			return (ssize_t)i;
	return -1;
}

/* The member a failover balancer sends to now: the first one up; the
 * first one when none is. */
static const char *now_of(const api_view *v, const api_provider *p, size_t bi)
{
	const api_balancer *bal = &v->balancers[bi];
	for (size_t j = 0; j < bal->n_members; j++) {
		int up = 0;
		if (p->member_up(p->ctx, bi, j, &up) == 0 && up)
			return bal->members[j];
	}
	return bal->n_members ? bal->members[0] : "";
}

/* The last probe of an outbound: of the first balancer member that is
 * it and was probed. */
static int history(const api_view *v, const api_provider *p, const char *name, api_buf *b)
{
	int rc = api_json_puts(b, "[");
	for (size_t i = 0; i < v->n_balancers; i++)
		for (size_t j = 0; j < v->balancers[i].n_members; j++) {
			int64_t delay;
			uint64_t when;
			if (strcmp(v->balancers[i].members[j], name) != 0 ||
			    p->member_probe(p->ctx, i, j, &delay, &when) || when == 0 || delay < 0)
				continue;
			bool f = true;
			rc |= api_json_puts(b, "{") | api_json_key(b, &f, "time") |
			      api_json_time(b, when) | api_json_key(b, &f, "delay") |
			      api_json_i64(b, delay) | api_json_puts(b, "}");
			return rc | api_json_puts(b, "]");
		}
	return rc | api_json_puts(b, "]");
}

static bool udp_of(etm_protocol pr) { return pr != ETM_PROTO_HTTP; }

static int proxy_outbound(const api_view *v, const api_provider *p, const api_outbound *o,
                          api_buf *b)
{
	bool f = true;
	return api_json_puts(b, "{") | api_json_key(b, &f, "name") | api_json_str(b, o->tag) |
	       api_json_key(b, &f, "type") | api_json_str(b, type_of(o->protocol)) |
	       api_json_key(b, &f, "history") | history(v, p, o->tag, b) |
	       api_json_key(b, &f, "udp") |
	       api_json_puts(b, udp_of(o->protocol) ? "true" : "false") | api_json_puts(b, "}");
}

/* A failover balancer is Clash's Fallback (it names the member in use,
 * "now"); round-robin is LoadBalance, which names none, as mihomo's. */
static int proxy_balancer(const api_view *v, const api_provider *p, size_t bi, api_buf *b)
{
	const api_balancer *bal = &v->balancers[bi];
	bool fallback = bal->strategy == ETM_STRATEGY_FAILOVER;
	bool f = true, udp = false;
	int rc = api_json_puts(b, "{") | api_json_key(b, &f, "name") | api_json_str(b, bal->tag) |
	         api_json_key(b, &f, "type") |
	         api_json_str(b, fallback ? "Fallback" : "LoadBalance");
	if (fallback)
		rc |= api_json_key(b, &f, "now") | api_json_str(b, now_of(v, p, bi));
	rc |= api_json_key(b, &f, "all") | api_json_puts(b, "[");
	for (size_t j = 0; j < bal->n_members; j++) {
		rc |= (j ? api_json_puts(b, ",") : 0) | api_json_str(b, bal->members[j]);
		const api_outbound *o = find_outbound(v, bal->members[j]);
		udp |= o && udp_of(o->protocol);
	}
	return rc | api_json_puts(b, "]") | api_json_key(b, &f, "history") |
	       api_json_puts(b, "[]") | api_json_key(b, &f, "udp") |
	       api_json_puts(b, udp ? "true" : "false") | api_json_puts(b, "}");
}

static int get_proxies(const api_view *v, const api_provider *p, api_buf *b)
{
	int rc = api_json_puts(b, "{\"proxies\":{");
	bool f = true;
	for (size_t i = 0; i < v->n_outbounds; i++)
		rc |= api_json_key(b, &f, v->outbounds[i].tag) |
		      proxy_outbound(v, p, &v->outbounds[i], b);
	for (size_t i = 0; i < v->n_balancers; i++)
		rc |= api_json_key(b, &f, v->balancers[i].tag) | proxy_balancer(v, p, i, b);
	return rc | api_json_puts(b, "}}");
}

static int rule_json(api_buf *b, const char *type, const char *payload, const char *proxy)
{
	bool f = true;
	return api_json_puts(b, "{") | api_json_key(b, &f, "type") | api_json_str(b, type) |
	       api_json_key(b, &f, "payload") | api_json_str(b, payload) |
	       api_json_key(b, &f, "proxy") | api_json_str(b, proxy) | api_json_puts(b, "}");
}

static int get_rules(const api_view *v, api_buf *b)
{
	int rc = api_json_puts(b, "{\"rules\":[");
	for (size_t i = 0; i < v->n_rules; i++)
		rc |= rule_json(b, v->rules[i].type, v->rules[i].payload, v->rules[i].proxy) |
		      api_json_puts(b, ",");
	/* the default route, as Clash ends its list with MATCH */
	return rc | rule_json(b, "Match", "", v->default_tag) | api_json_puts(b, "]}");
}

static int connection(const api_view *v, const etm_flow *fl, api_buf *b)
{
	bool f = true, m = true;
	char port[8];
	int rc = api_json_puts(b, "{") | api_json_key(b, &f, "id") | api_json_put(b, "\"", 1) |
	         api_json_u64(b, fl->id) | api_json_put(b, "\"", 1) |
	         api_json_key(b, &f, "metadata") | api_json_puts(b, "{");
	rc |= api_json_key(b, &m, "network") | api_json_str(b, fl->udp ? "udp" : "tcp") |
	      api_json_key(b, &m, "type") | api_json_str(b, fl->inbound) |
	      api_json_key(b, &m, "sourceIP") | api_json_str(b, fl->src_ip) |
	      api_json_key(b, &m, "destinationIP") | api_json_str(b, fl->dst_ip);
	/* ports are strings in mihomo's metadata */
	snprintf(port, sizeof port, "%u", fl->src_port);
	rc |= api_json_key(b, &m, "sourcePort") | api_json_str(b, port);
	snprintf(port, sizeof port, "%u", fl->dst_port);
	rc |= api_json_key(b, &m, "destinationPort") | api_json_str(b, port) |
	      api_json_key(b, &m, "host") |
	      api_json_str(b, fl->dst_host[0] ? fl->dst_host : fl->sniffed) |
	      api_json_key(b, &m, "dnsMode") | api_json_str(b, "normal") |
	      api_json_key(b, &m, "processPath") | api_json_str(b, "") |
	      api_json_key(b, &m, "specialProxy") | api_json_str(b, "") |
	      api_json_key(b, &m, "inboundUser") | api_json_str(b, fl->user) |
	      api_json_puts(b, "}");
	rc |= api_json_key(b, &f, "upload") | api_json_u64(b, fl->up) |
	      api_json_key(b, &f, "download") | api_json_u64(b, fl->down) |
	      api_json_key(b, &f, "start") | api_json_time(b, fl->start_ms) |
	      api_json_key(b, &f, "chains") | api_json_puts(b, "[");
	/* Clash lists the proxy that carries the flow first and the groups
	 * that chose it after */
	if (fl->member[0])
		rc |= api_json_str(b, fl->member) | api_json_puts(b, ",");
	rc |= api_json_str(b, fl->outbound) | api_json_puts(b, "]");
	const char *type = "Match", *payload = "";
	if (fl->rule >= 0 && (size_t)fl->rule < v->n_rules) {
		type = v->rules[fl->rule].type;
		payload = v->rules[fl->rule].payload;
	}
	rc |= api_json_key(b, &f, "rule") | api_json_str(b, type) |
	      api_json_key(b, &f, "rulePayload") | api_json_str(b, payload);
	/* ours, for an ended flow (?closed): when and why */
	if (fl->end_ms)
		rc |= api_json_key(b, &f, "end") | api_json_time(b, fl->end_ms) |
		      api_json_key(b, &f, "why") | api_json_str(b, fl->why);
	return rc | api_json_puts(b, "}");
}

int api_render_connections(const api_view *v, const api_provider *p, bool closed, api_buf *b)
{
	etm_flow_list l = {0};
	if (p->flows(p->ctx, closed, &l))
		return -1;
	uint64_t up = 0, down = 0;
	p->traffic(p->ctx, &up, &down);
	bool f = true;
	int rc = api_json_puts(b, "{") | api_json_key(b, &f, "downloadTotal") |
	         api_json_u64(b, down) | api_json_key(b, &f, "uploadTotal") | api_json_u64(b, up) |
	         api_json_key(b, &f, "connections") | api_json_puts(b, "[");
	for (size_t i = 0; i < l.n; i++)
		rc |= (i ? api_json_puts(b, ",") : 0) | connection(v, &l.v[i], b);
	etm_flow_list_free(&l);
	return rc | api_json_puts(b, "]") | api_json_key(b, &f, "memory") |
	       api_json_u64(b, p->memory(p->ctx)) | api_json_puts(b, "}");
}

int api_render_traffic(uint64_t up, uint64_t down, api_buf *b)
{
	return api_json_puts(b, "{\"up\":") | api_json_u64(b, up) | api_json_puts(b, ",\"down\":") |
	       api_json_u64(b, down) | api_json_puts(b, "}");
}

int api_render_memory(uint64_t inuse, api_buf *b)
{
	return api_json_puts(b, "{\"inuse\":") | api_json_u64(b, inuse) |
	       api_json_puts(b, ",\"oslimit\":0}");
}

int api_render_log(int level, const char *line, size_t len, api_buf *b)
{
	return api_json_puts(b, "{\"type\":") | api_json_str(b, api_level_name(level)) |
	       api_json_puts(b, ",\"payload\":") | api_json_strn(b, line, len) |
	       api_json_puts(b, "}");
}

int api_render_delay(int64_t delay_ms, int *status, api_buf *b)
{
	if (delay_ms >= 0) {
		*status = 200;
		return api_json_puts(b, "{\"delay\":") | api_json_i64(b, delay_ms) |
		       api_json_puts(b, "}");
	}
	*status = delay_ms == API_DELAY_TIMEOUT ? 504 : 503;
	return api_render_message(
		msgs[delay_ms == API_DELAY_TIMEOUT ? API_M_TIMEOUT : API_M_DELAY_FAILED], b);
}

static int get_udplb(const api_provider *p, api_buf *b)
{
	int rc = api_json_puts(b, "{\"udp_lb\":[");
	bool any = false;
	for (size_t i = 0;; i++) {
		const char *tag = NULL;
		etm_udplb_stats st;
		int r = p->udplb(p->ctx, i, &tag, &st);
		if (r == -2)
			break;
		if (r)
			continue;
		bool f = true, d = true, e = true;
		rc |= (any ? api_json_puts(b, ",") : 0) | api_json_puts(b, "{") |
		      api_json_key(b, &f, "inbound") | api_json_str(b, tag);
		any = true;
		const struct {
			const char *k;
			uint64_t v;
		} c[] = {{"active_flows", st.active_flows},
		         {"flows_created", st.flows_created},
		         {"flows_evicted", st.flows_evicted},
		         {"flows_shed", st.flows_shed},
		         {"datagrams_to_backends", st.datagrams_to_backends},
		         {"bytes_to_backends", st.bytes_to_backends},
		         {"datagrams_to_clients", st.datagrams_to_clients},
		         {"bytes_to_clients", st.bytes_to_clients},
		         {"flow_duration_ms", st.flow_duration_ms},
		         {"sockets_reused", st.sockets_reused}};
		for (size_t k = 0; k < sizeof c / sizeof *c; k++)
			rc |= api_json_key(b, &f, c[k].k) | api_json_u64(b, c[k].v);
		rc |= api_json_key(b, &f, "dropped") | api_json_puts(b, "{");
		for (size_t k = 0; k < ETM_UDPLB_DROP_KINDS; k++)
			rc |= api_json_key(b, &d, etm_udplb_drop_name(k)) |
			      api_json_u64(b, st.drops[k]);
		rc |= api_json_puts(b, "}") | api_json_key(b, &f, "closed") | api_json_puts(b, "{");
		for (size_t k = 0; k < ETM_UDPLB_CLOSE_KINDS; k++)
			rc |= api_json_key(b, &e, etm_udplb_close_name(k)) |
			      api_json_u64(b, st.evicted[k]);
		rc |= api_json_puts(b, "}") | api_json_key(b, &f, "backends") |
		      api_json_puts(b, "[");
		for (size_t j = 0;; j++) {
			char addr[ETM_UDPLB_ADDR_MAX];
			int up;
			uint64_t flows;
			if (p->udplb_backend(p->ctx, i, j, addr, sizeof addr, &up, &flows))
				break;
			bool g = true;
			rc |= (j ? api_json_puts(b, ",") : 0) | api_json_puts(b, "{") |
			      api_json_key(b, &g, "address") | api_json_str(b, addr) |
			      api_json_key(b, &g, "up") | api_json_puts(b, up ? "true" : "false") |
			      api_json_key(b, &g, "flows_created") | api_json_u64(b, flows) |
			      api_json_puts(b, "}");
		}
		rc |= api_json_puts(b, "]}");
	}
	return rc | api_json_puts(b, "]}");
}

/* The host and port of a URL (http://host[:port]/..., https default 443),
 * for a direct outbound's delay test. 0 or -1. */
static int url_host(const char *u, char *host, size_t size, uint16_t *port)
{
	uint16_t def = 80;
	if (strncmp(u, "http://", 7) == 0) {
		u += 7;
	} else if (strncmp(u, "https://", 8) == 0) {
		u += 8;
		def = 443;
	} else {
		return -1;
	}
	size_t n = strcspn(u, "/?#");
	const char *colon = NULL;
	if (u[0] == '[') {
		const char *close = memchr(u, ']', n);
		if (!close)
			return -1;
		if ((size_t)(close - u) + 1 < n && close[1] == ':')
			colon = close + 1;
		u++;
		n = (size_t)(close - u);
		if (colon)
			n = (size_t)(close - u);
	} else {
		colon = memchr(u, ':', n);
		if (colon)
			n = (size_t)(colon - u);
	}
	if (n == 0 || n >= size)
		return -1;
	memcpy(host, u, n);
	host[n] = '\0';
	*port = def;
	if (colon) {
		char *end;
		long v = strtol(colon + 1, &end, 10);
		if (v <= 0 || v > 65535 || (*end && !strchr("/?#", *end)))
			return -1;
		*port = (uint16_t)v;
	}
	return 0;
}

/* GET /proxies/:name/delay: where to connect. A balancer's delay is that
 * of the member it would send to. */
static int delay(const api_view *v, const api_provider *p, const char *name, const char *q,
                 size_t qn, api_response *r)
{
	const api_outbound *o = find_outbound(v, name);
	ssize_t bi = o ? -1 : find_balancer(v, name);
	if (!o && bi < 0)
		return api_answer_message(r, 404, API_M_NOT_FOUND);
	if (!o)
		o = find_outbound(v, now_of(v, p, (size_t)bi));
	int64_t t =
		query_num(q, qn, "timeout", API_DELAY_TIMEOUT_DEFAULT, 1, API_DELAY_TIMEOUT_MAX);
	char url[1024];
	ssize_t un = api_query_get(q, qn, "url", url, sizeof url);
	if (t < 0 || un == -2)
		return api_answer_message(r, 400, API_M_QUERY_INVALID);
	if (!o || o->protocol == ETM_PROTO_BLACKHOLE)
		return api_render_delay(API_DELAY_FAILED, &r->status, &r->body);
	if (o->server) {
		snprintf(r->host, sizeof r->host, "%s", o->server);
		r->port = o->port;
	} else if (un < 0 || url_host(url, r->host, sizeof r->host, &r->port)) {
		return api_answer_message(r, 400, API_M_QUERY_INVALID);
	}
	r->action = API_DELAY;
	r->timeout_ms = (uint32_t)t;
	return 0;
}

bool api_method_is(const api_request *r, const char *m)
{
	return r->method_len == strlen(m) && memcmp(r->method, m, r->method_len) == 0;
}

int api_not_allowed(api_response *r, const char *allow)
{
	r->allow = allow;
	return api_answer_message(r, 405, API_M_METHOD);
}

static int patch_configs(const api_provider *p, const api_request *rq, api_response *r)
{
	const char *lv;
	size_t ln;
	if (api_json_find(rq->body, rq->body_len, "log-level", &lv, &ln))
		return api_answer_message(r, 400, API_M_BODY_INVALID);
	if (lv) {
		int l = api_level_of(lv, ln);
		if (l < 0)
			return api_answer_message(r, 400, API_M_LEVEL_INVALID);
		p->set_log_level(p->ctx, l);
	}
	/* the other keys name things this proxy does not have (mode,
	 * allow-lan, ports: the config file's business): ignored */
	r->status = 204;
	return 0;
}

static int put_configs(const api_provider *p, const api_request *rq, api_response *r)
{
	const char *v;
	size_t vn;
	if (rq->body_len && api_json_find(rq->body, rq->body_len, "path", &v, &vn))
		return api_answer_message(r, 400, API_M_BODY_INVALID);
	/* the body's path and payload are ignored: the file given with -c is
	 * reloaded, as SIGHUP does (force=true or not) */
	char err[1024];
	if (p->reload(p->ctx, err, sizeof err)) {
		r->status = 400;
		return api_render_message(err, &r->body);
	}
	r->status = 204;
	return 0;
}

static int stream(api_response *r, api_action a, const api_request *rq, const char *q, size_t qn)
{
	r->status = 200;
	r->action = a;
	r->websocket = rq->websocket;
	if (a == API_STREAM_LOGS) {
		char lv[16];
		ssize_t n = api_query_get(q, qn, "level", lv, sizeof lv);
		r->log_level = n == -1 ? LOG_LEVEL_INFO : n > 0 ? api_level_of(lv, (size_t)n) : -1;
		if (r->log_level < 0)
			goto bad;
	}
	int64_t iv = query_num(q, qn, "interval", API_INTERVAL_DEFAULT, API_INTERVAL_MIN,
	                       API_INTERVAL_MAX);
	if (iv < 0)
		goto bad;
	r->interval_ms = a == API_STREAM_TRAFFIC || a == API_STREAM_MEMORY ? 1000 : (uint32_t)iv;
	return 0;
bad:
	r->action = API_ANSWER;
	r->websocket = false;
	return api_answer_message(r, 400, API_M_QUERY_INVALID);
}

static int route(const api_view *v, const api_provider *p, const api_request *rq, const char *path,
                 const char *q, size_t qn, api_response *r)
{
	bool get = api_method_is(rq, "GET") || api_method_is(rq, "HEAD");
	bool f = true;
	if (strcmp(path, "/") == 0)
		return !get ? api_not_allowed(r, "GET")
		            : api_json_puts(&r->body, "{") | api_json_key(&r->body, &f, "hello") |
		                       api_json_str(&r->body, "etemenanki") |
		                       api_json_puts(&r->body, "}");
	if (strcmp(path, "/version") == 0)
		return !get ? api_not_allowed(r, "GET")
		            : api_json_puts(&r->body, "{") | api_json_key(&r->body, &f, "version") |
		                       api_json_str(&r->body, etm_version()) |
		                       api_json_key(&r->body, &f, "meta") |
		                       api_json_puts(&r->body, "false}");
	if (strcmp(path, "/configs") == 0) {
		if (get)
			return get_configs(v, p, &r->body);
		if (api_method_is(rq, "PATCH"))
			return patch_configs(p, rq, r);
		if (api_method_is(rq, "PUT"))
			return put_configs(p, rq, r);
		return api_not_allowed(r, "GET, PUT, PATCH");
	}
	if (strcmp(path, "/proxies") == 0)
		return get ? get_proxies(v, p, &r->body) : api_not_allowed(r, "GET");
	if (strncmp(path, "/proxies/", 9) == 0) {
		/* the name is decoded alone: a tag may hold a '/' (%2F) */
		char name[ETM_FLOW_NAME_MAX];
		const char *n = path + 9, *slash = strchr(n, '/');
		size_t nl = slash ? (size_t)(slash - n) : strlen(n);
		if (nl == 0 || (slash && strcmp(slash, "/delay") != 0) ||
		    api_decode(n, nl, false, name, sizeof name) <= 0)
			return api_answer_message(r, 404, API_M_NOT_FOUND);
		if (!get)
			return api_not_allowed(r, "GET");
		if (slash)
			return delay(v, p, name, q, qn, r);
		const api_outbound *o = find_outbound(v, name);
		ssize_t bi = find_balancer(v, name);
		if (o)
			return proxy_outbound(v, p, o, &r->body);
		if (bi >= 0)
			return proxy_balancer(v, p, (size_t)bi, &r->body);
		return api_answer_message(r, 404, API_M_NOT_FOUND);
	}
	if (strcmp(path, "/connections") == 0) {
		/* ?closed (any value but false or 0): the recently ended ones */
		char cv[8];
		ssize_t cn = api_query_get(q, qn, "closed", cv, sizeof cv);
		r->closed = cn == 0 || (cn > 0 && strcmp(cv, "false") != 0 && strcmp(cv, "0") != 0);
		if (get && rq->websocket)
			return stream(r, API_STREAM_CONNECTIONS, rq, q, qn);
		if (get)
			return api_render_connections(v, p, r->closed, &r->body);
		if (api_method_is(rq, "DELETE"))
			return api_kill_where(p, q, qn, r);
		return api_not_allowed(r, "GET, DELETE");
	}
	if (strncmp(path, "/connections/", 13) == 0) {
		const char *id = path + 13;
		char *end;
		unsigned long long n = strtoull(id, &end, 10);
		if (!*id || *end || *id < '0' || *id > '9')
			return api_answer_message(r, 404, API_M_NOT_FOUND);
		if (!api_method_is(rq, "DELETE"))
			return api_not_allowed(r, "DELETE");
		if (p->kill(p->ctx, n))
			return api_answer_message(r, 404, API_M_NOT_FOUND);
		r->status = 204;
		return 0;
	}
	if (strcmp(path, "/traffic") == 0)
		return get ? stream(r, API_STREAM_TRAFFIC, rq, q, qn) : api_not_allowed(r, "GET");
	if (strcmp(path, "/logs") == 0)
		return get ? stream(r, API_STREAM_LOGS, rq, q, qn) : api_not_allowed(r, "GET");
	if (strcmp(path, "/memory") == 0)
		return get ? stream(r, API_STREAM_MEMORY, rq, q, qn) : api_not_allowed(r, "GET");
	/* no proxy or rule providers here: dashboards list them, so an empty
	 * set rather than a 404 */
	if (strcmp(path, "/providers/proxies") == 0 || strcmp(path, "/providers/rules") == 0)
		return get ? api_json_puts(&r->body, "{\"providers\":{}}") : api_not_allowed(r, "GET");
	if (strcmp(path, "/rules") == 0)
		return get ? get_rules(v, &r->body) : api_not_allowed(r, "GET");
	if (strcmp(path, "/users") == 0 || strncmp(path, "/users/", 7) == 0)
		return api_route_users(p, rq, path, q, qn, r);
	if (strcmp(path, "/udp-lb") == 0)
		return get ? get_udplb(p, &r->body) : api_not_allowed(r, "GET");
	if (strcmp(path, "/metrics") == 0) {
		if (!get)
			return api_not_allowed(r, "GET");
		r->text = true;
		return p->metrics(p->ctx, &r->body);
	}
	return api_answer_message(r, 404, API_M_NOT_FOUND);
}

void api_response_free(api_response *r)
{
	metrics_buf_free(&r->body);
	*r = (api_response){0};
}

int api_handle(const api_view *v, const api_provider *p, const api_request *rq, api_response *r)
{
	*r = (api_response){.status = 200};
	const char *t = rq->target, *qm = memchr(t, '?', rq->target_len);
	size_t pn = qm ? (size_t)(qm - t) : rq->target_len;
	const char *q = qm ? qm + 1 : "";
	size_t qn = qm ? rq->target_len - pn - 1 : 0;
	char path[1024]; /* as sent: a proxy's name is decoded by itself */
	int rc;
	if (api_method_is(rq, "OPTIONS")) {
		/* a CORS preflight carries no credentials (Fetch standard,
		 * "CORS-preflight request"): answered for any path */
		r->status = 204;
		return 0;
	}
	if (!authorized(v, rq, q, qn))
		rc = api_answer_message(r, 401, API_M_UNAUTHORIZED);
	else if (pn == 0 || pn >= sizeof path || t[0] != '/')
		rc = api_answer_message(r, 404, API_M_NOT_FOUND);
	else {
		memcpy(path, t, pn);
		path[pn] = '\0';
		rc = route(v, p, rq, path, q, qn, r);
	}
	if (rc || r->body.failed) {
		api_response_free(r);
		return -1;
	}
	return 0;
}
