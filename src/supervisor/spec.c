/* spec.c - freeing a spec and the build-time checks the seeds specify. */
#include "supervisor/spec_msg.h"

#include <arpa/inet.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etemenanki/spec.h"
#include "outbound/balancer.h"
#include "outbound/outbound.h"
#include "route/route.h"
#include "supervisor/build_outbound.h"
#include "supervisor/build_udplb.h"
#include "udplb/conf.h"

/* The catalogue: every message etm_spec_check can produce. The first seven are
 * word for word from seed 003 "Common errors" and seed 000 "What may be
 * balanced" / "Where outbounds live"; the rest are ours, in the same voice. */
const char *const spec_msg[SPEC_MSG_COUNT_] = {
	[SPEC_DUPLICATE_OUTBOUND] = "duplicate outbound tag: %s",
	[SPEC_BALANCER_COLLIDES] = "balancer tag %s collides with an outbound tag",
	[SPEC_BALANCER_UNKNOWN_MEMBER] = "balancer %s references unknown outbound tag: %s",
	[SPEC_BALANCER_UNPROBEABLE] =
		"balancer %s: outbound %s has no upstream a TCP health probe can reach, so it "
		"cannot be balanced",
	[SPEC_BALANCER_STRATEGY] =
		"unknown balancer strategy \"%s\" (expected \"failover\" or \"round_robin\")",
	[SPEC_BALANCER_EMPTY] = "a balancer needs at least one outbound",
	[SPEC_BALANCER_RANGE] = "balancer %s: %s must be %s",
	[SPEC_BALANCER_TOO_MANY] = "balancer %s: " BALANCER_ERR_TOO_MANY,
	[SPEC_ROUTE_UNKNOWN_TAG] = "route references unknown outbound tag: %s",
	[SPEC_NO_OUTBOUND] = "no outbound is configured: add at least one [[outbound]]",
	[SPEC_DUPLICATE_INBOUND] = "duplicate inbound tag: %s",
	[SPEC_OUTBOUND_NEEDS_SERVER] = "outbound %s: protocol %s needs `server` and `port`",
	[SPEC_OUTBOUND_NEEDS_SETTING] = "outbound %s: protocol %s needs settings.%s",
	[SPEC_INBOUND_NEEDS_SETTING] = "inbound %s: protocol %s needs settings.%s",
	[SPEC_BAD_UUID] = "%s %s: settings.id \"%s\" is not a UUID",
	[SPEC_BAD_LISTEN] = "inbound %s: listen \"%s\" is not an IP address",
	[SPEC_TLS_NEEDS_CERT] = "inbound %s: a TLS inbound needs stream.tls.certificate and "
				"stream.tls.key",
	[SPEC_RULE_NO_MATCHER] = "route rule #%s (outbound %s) has no matcher, so it can never "
				 "match",
	[SPEC_RULE_BAD_CIDR] = "route rule #%s: invalid CIDR \"%s\"",
	[SPEC_USER_NEEDS] = "inbound %s: every settings.users entry of protocol %s needs %s",
	[SPEC_RULE_BAD_REGEX] = "route rule #%s: bad domain_regex %s",
	[SPEC_BAD_WS_PATH] = "%s %s: stream.ws.path \"%s\" must start with /",
	[SPEC_BAD_DNS_SERVER] = "dns server \"%s\" is not an IP address with an optional port",
	[SPEC_DNS_BOTH] = "dns: servers and [[dns.server]] cannot both be set: with [[dns.server]] "
	                  "the DNS service answers every lookup",
	[SPEC_DNS_NEEDS_SERVER] = "dns: %s needs at least one [[dns.server]]",
	[SPEC_DNS_DUPLICATE_SERVER] = "dns: duplicate server tag: %s",
	[SPEC_DNS_BAD_ADDRESS] = "dns: server %s: address \"%s\" is not an IP address with an "
	                         "optional port",
	[SPEC_DNS_PROXY_UDP] = "dns: server %s: through_proxy needs protocol tcp, tls or https",
	[SPEC_DNS_BAD_PATH] = "dns: server %s: path \"%s\" must start with /",
	[SPEC_DNS_UNKNOWN_SERVER] = "dns: %s references unknown server tag: %s",
	[SPEC_DNS_RULE_NO_MATCHER] = "dns rule #%s (server %s) has no matcher, so it can never "
	                             "match",
	[SPEC_DNS_RULE_BAD_REGEX] = "dns rule #%s: bad domain_regex %s",
	[SPEC_DNS_HOST_EMPTY] = "dns: host %s needs at least one address",
	[SPEC_DNS_HOST_BAD] = "dns: host %s: \"%s\" is not an IP address",
	[SPEC_DNS_RANGE] = "dns: %s must be %s",
	[SPEC_BAD_ACCESS_LOG] = "[log] access \"%s\" is not \"off\", \"stderr\" or a file path",
	[SPEC_BAD_API_LISTEN] = "[api] listen \"%s\" is not an IP address and port (like "
	                        "\"127.0.0.1:9090\")",
	[SPEC_API_NOT_LOOPBACK] = "api: listen address %s is not loopback: set [api] secret",
	[SPEC_BAD_METRICS_LISTEN] = "[metrics] listen \"%s\" is not an IP address and port "
	                            "(like \"127.0.0.1:9100\")",
	[SPEC_UNAVAILABLE_INBOUND] = "inbound %s: protocol %s is not available yet",
	[SPEC_UNAVAILABLE_OUTBOUND] = "outbound %s: protocol %s is not available yet",
	[SPEC_UNAVAILABLE_FEATURE] = "%s is not available yet",
	[SPEC_UNAVAILABLE_IN_FEATURE] = "inbound %s: %s is not available yet",
	[SPEC_SS_IDENTITY_NEEDED] = "inbound %s: several users on a shadowsocks 2022 inbound need "
				    "settings.password, the identity PSK they are behind",
	[SPEC_SS_IDENTITY_METHOD] = "inbound %s: several users on a shadowsocks 2022 inbound need "
				    "an AES method (identity headers are AES blocks), not %s",
	[SPEC_UNAVAILABLE_IN_METHOD] = "inbound %s: shadowsocks method %s is not available yet",
	[SPEC_UNAVAILABLE_OUT_METHOD] = "outbound %s: shadowsocks method %s is not available yet",
	[SPEC_DUPLICATE_CLUSTER] = "duplicate cluster tag: %s",
	[SPEC_CLUSTER_EMPTY] = "cluster %s needs at least one backend",
	[SPEC_CLUSTER_BACKEND] = "cluster %s: backend \"%s\": %s",
	[SPEC_CLUSTER_INVALID] = "cluster %s: %s",
	[SPEC_CLUSTER_RANGE] = "cluster %s: %s must be %s",
	[SPEC_CLUSTER_NO_CHECK] = "cluster %s: health.tcp_port = 0 turns the TCP check off, so "
				  "health.udp_payload or health.udp_payload_hex is needed",
	[SPEC_CLUSTER_TWO_PAYLOADS] = "cluster %s: health.udp_payload and health.udp_payload_hex "
				      "exclude each other",
	[SPEC_CLUSTER_BAD_HEX] = "cluster %s: health.udp_payload_hex is not pairs of hexadecimal "
				 "digits (spaces between bytes are allowed)",
	[SPEC_CLUSTER_REUSE_NO_CAP] = "cluster %s: reuse_upstream_sockets needs a responses cap: "
				      "only a flow that got all its answers hands its socket on",
	[SPEC_CLUSTER_REUSE_FIRST] = "cluster %s: reuse_upstream_sockets cannot go with "
				     "proxy_protocol = \"first\": a backend would take the next "
				     "client for the one the header named",
	[SPEC_UNKNOWN_CLUSTER] = "inbound %s references unknown cluster tag: %s",
	[SPEC_LB_RANGE] = "inbound %s: settings.%s must be %s",
	[SPEC_LB_TAKES_NO] = "inbound %s: protocol udp_lb takes no %s",
	[SPEC_OUT_OF_MEMORY] = "out of memory",
	[SPEC_OUT_DRAIN_RANGE] = "outbound %s: drain_after must be 0 to 86400",
	[SPEC_MUX_PROTOCOL] = "outbound %s: mux needs a trojan, vless or vmess outbound, not %s",
	[SPEC_MUX_RANGE] = "outbound %s: mux.concurrency must be 1 to 128",
	[SPEC_OUT_DRAIN_KEEP] = "outbound %s: drain_after closes the flows of old versions, so it "
				"cannot go with drain = \"keep\"",
	[SPEC_POLICY_DRAIN_RANGE] = "policy.drain_after must be 0 to 86400",
	[SPEC_POLICY_UPGRADE_RANGE] = "policy.upgrade_drain_after must be 0 to 86400",
	[SPEC_POLICY_UPGRADE_START_RANGE] = "policy.upgrade_start_timeout must be 1 to 3600",
	[SPEC_POLICY_DRAIN_KEEP] = "policy.drain_after closes the flows of old versions, so it "
				   "cannot go with policy.drain = \"keep\"",
};

static const char *const proto_names[ETM_PROTO_COUNT_] = {
	[ETM_PROTO_FREEDOM] = "freedom",         [ETM_PROTO_BLACKHOLE] = "blackhole",
	[ETM_PROTO_SOCKS] = "socks",             [ETM_PROTO_HTTP] = "http",
	[ETM_PROTO_MIXED] = "mixed",             [ETM_PROTO_TROJAN] = "trojan",
	[ETM_PROTO_VLESS] = "vless",             [ETM_PROTO_VMESS] = "vmess",
	[ETM_PROTO_SHADOWSOCKS] = "shadowsocks", [ETM_PROTO_HYSTERIA2] = "hysteria2",
	[ETM_PROTO_WIREGUARD] = "wireguard",     [ETM_PROTO_UDP_LB] = "udp_lb",
};

const char *etm_protocol_name(etm_protocol p)
{
	if ((unsigned)p >= ETM_PROTO_COUNT_)
		return "?";
	return proto_names[p];
}

const char *etm_ss_method_name(etm_ss_method m)
{
	/* the names of the schema's ss_methods (src/app/schema.c) */
	static const char *const names[] = {
		[ETM_SS_AES_128_GCM] = "aes-128-gcm",
		[ETM_SS_AES_256_GCM] = "aes-256-gcm",
		[ETM_SS_CHACHA20_IETF_POLY1305] = "chacha20-ietf-poly1305",
		[ETM_SS_2022_BLAKE3_AES_128_GCM] = "2022-blake3-aes-128-gcm",
		[ETM_SS_2022_BLAKE3_AES_256_GCM] = "2022-blake3-aes-256-gcm",
		[ETM_SS_2022_BLAKE3_CHACHA20_POLY1305] = "2022-blake3-chacha20-poly1305",
	};
	return (unsigned)m < sizeof names / sizeof names[0] && names[m] ? names[m] : "?";
}

/* Every method of the schema runs, over TCP and UDP: the AEAD methods of
 * SIP004 and Shadowsocks 2022's (SIP022). */
static bool ss_method_available(etm_ss_method m)
{
	return m == ETM_SS_AES_128_GCM || m == ETM_SS_AES_256_GCM ||
	       m == ETM_SS_CHACHA20_IETF_POLY1305 || m == ETM_SS_2022_BLAKE3_AES_128_GCM ||
	       m == ETM_SS_2022_BLAKE3_AES_256_GCM || m == ETM_SS_2022_BLAKE3_CHACHA20_POLY1305;
}

bool etm_protocol_available(etm_protocol p, bool inbound)
{
	/* What the runtime serves today; every other protocol parses and
	 * validates, and a start names it. */
	if (inbound)
		return p == ETM_PROTO_SOCKS || p == ETM_PROTO_HTTP || p == ETM_PROTO_MIXED ||
		       p == ETM_PROTO_TROJAN || p == ETM_PROTO_VLESS || p == ETM_PROTO_VMESS ||
		       p == ETM_PROTO_SHADOWSOCKS || p == ETM_PROTO_UDP_LB;
	const outbound_proto *op = build_outbound_proto(p);
	return op && op->available;
}

int spec_format(char *msg, size_t size, spec_msg_id id, ...)
{
	va_list ap;
	va_start(ap, id);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
	int n = vsnprintf(msg, size, spec_msg[id], ap);
#pragma GCC diagnostic pop
	va_end(ap);
	(void)n; /* a truncated message is still the message's start */
	return -1;
}

/* ---- freeing ---- */

static void strlist_free(etm_strlist *l)
{
	for (size_t i = 0; i < l->len; i++)
		free(l->items[i]);
	free(l->items);
	*l = (etm_strlist){0};
}

static void tls_free(etm_tls_spec *t)
{
	free(t->server_name);
	strlist_free(&t->alpn);
	free(t->ca);
	free(t->certificate);
	free(t->key);
}

static void stream_free(etm_stream_spec *s)
{
	tls_free(&s->tls);
	free(s->ws.path);
	free(s->ws.host);
	free(s->grpc.service_name);
}

static void settings_free(etm_settings_spec *s)
{
	free(s->username);
	free(s->password);
	free(s->id);
	free(s->secret_key);
	free(s->peer_public_key);
	free(s->pre_shared_key);
	free(s->endpoint);
	strlist_free(&s->address);
	for (size_t i = 0; i < s->users_len; i++) {
		etm_user_spec *u = &s->users[i];
		free(u->name);
		free(u->username);
		free(u->password);
		free(u->id);
	}
	free(s->users);
	free(s->fallback);
	free(s->cluster);
}

static void rule_free(etm_rule_spec *r)
{
	free(r->outbound);
	strlist_free(&r->domain);
	strlist_free(&r->domain_suffix);
	strlist_free(&r->domain_keyword);
	strlist_free(&r->domain_regex);
	strlist_free(&r->geosite);
	strlist_free(&r->cidr);
	strlist_free(&r->geoip);
	free(r->port.items);
	strlist_free(&r->inbound_tag);
	strlist_free(&r->source_cidr);
}

static void dns_free(etm_dns_spec *d)
{
	strlist_free(&d->servers);
	for (size_t i = 0; i < d->server_len; i++) {
		etm_dns_server_spec *v = &d->server[i];
		free(v->tag);
		free(v->address);
		free(v->server_name);
		free(v->ca);
		free(v->path);
	}
	free(d->server);
	for (size_t i = 0; i < d->rules_len; i++) {
		etm_dns_rule_spec *r = &d->rules[i];
		free(r->server);
		strlist_free(&r->domain);
		strlist_free(&r->domain_suffix);
		strlist_free(&r->domain_keyword);
		strlist_free(&r->domain_regex);
		strlist_free(&r->geosite);
	}
	free(d->rules);
	for (size_t i = 0; i < d->hosts_len; i++) {
		free(d->hosts[i].name);
		strlist_free(&d->hosts[i].address);
	}
	free(d->hosts);
	free(d->final);
}

void etm_spec_free(etm_spec *spec)
{
	for (size_t i = 0; i < spec->inbounds_len; i++) {
		etm_inbound_spec *in = &spec->inbounds[i];
		free(in->tag);
		free(in->listen);
		settings_free(&in->settings);
		stream_free(&in->stream);
	}
	free(spec->inbounds);
	for (size_t i = 0; i < spec->outbounds_len; i++) {
		etm_outbound_spec *o = &spec->outbounds[i];
		free(o->tag);
		free(o->server);
		settings_free(&o->settings);
		stream_free(&o->stream);
	}
	free(spec->outbounds);
	for (size_t i = 0; i < spec->balancers_len; i++) {
		etm_balancer_spec *b = &spec->balancers[i];
		free(b->tag);
		strlist_free(&b->outbounds);
		free(b->strategy);
	}
	free(spec->balancers);
	for (size_t i = 0; i < spec->clusters_len; i++) {
		etm_cluster_spec *c = &spec->clusters[i];
		free(c->tag);
		strlist_free(&c->backends);
		free(c->health.udp_payload);
		free(c->health.udp_payload_hex);
	}
	free(spec->clusters);
	free(spec->route.default_tag);
	free(spec->route.geoip);
	free(spec->route.geosite);
	for (size_t i = 0; i < spec->route.rules_len; i++)
		rule_free(&spec->route.rules[i]);
	free(spec->route.rules);
	dns_free(&spec->dns);
	free(spec->log_access);
	free(spec->metrics_listen);
	free(spec->api_listen);
	free(spec->api_secret);
	*spec = (etm_spec){0};
}

/* ---- copying ---- */

/* Every pointer a spec owns is copied below. So that a field added later
 * cannot be forgotten (a copy would then share it, and free it twice),
 * the sizes are pinned on LP64 builds, as plan_equal.c pins them for
 * the planner: a new field fails the build until it is copied here. */
#if UINTPTR_MAX == UINT64_MAX
_Static_assert(sizeof(etm_tls_spec) == 56, "copy the new field in tls_copy");
_Static_assert(sizeof(etm_stream_spec) == 88, "copy the new field in stream_copy");
_Static_assert(sizeof(etm_user_spec) == 56, "copy the new field in settings_copy");
_Static_assert(sizeof(etm_settings_spec) == 136, "copy the new field in settings_copy");
_Static_assert(sizeof(etm_inbound_spec) == 256, "copy the new field in etm_spec_copy");
_Static_assert(sizeof(etm_outbound_spec) == 296, "copy the new field in etm_spec_copy");
_Static_assert(sizeof(etm_balancer_spec) == 80, "copy the new field in etm_spec_copy");
_Static_assert(sizeof(etm_cluster_spec) == 192, "copy the new field in etm_spec_copy");
_Static_assert(sizeof(etm_rule_spec) == 176, "copy the new field in rule_copy");
_Static_assert(sizeof(etm_route_spec) == 40, "copy the new field in etm_spec_copy");
_Static_assert(sizeof(etm_spec) == 336, "copy the new field in etm_spec_copy");
_Static_assert(sizeof(etm_dns_spec) == 96, "copy the new field in dns_copy");
_Static_assert(sizeof(etm_dns_server_spec) == 64, "copy the new field in dns_copy");
_Static_assert(sizeof(etm_dns_rule_spec) == 88, "copy the new field in dns_copy");
_Static_assert(sizeof(etm_dns_host_spec) == 24, "copy the new field in dns_copy");
#endif

/* Each sets *failed when memory runs out; what was copied stays owned by
 * the destination, so one etm_spec_free releases a partial copy. */
static char *copy_str(const char *s, bool *failed)
{
	if (!s)
		return NULL;
	char *d = strdup(s);
	if (!d)
		*failed = true;
	return d;
}

static void *dup_array(const void *a, size_t n, size_t size, bool *failed)
{
	if (!a || !n)
		return NULL;
	void *d = malloc(n * size);
	if (!d)
		*failed = true;
	else
		memcpy(d, a, n * size);
	return d;
}

/* An array whose elements are then deep-copied one by one: NULL (and a
 * length of 0 for the caller to set) when it cannot be made. */
static void *array_or_empty(const void *a, size_t *n, size_t size, bool *failed)
{
	void *d = dup_array(a, *n, size, failed);
	if (!d)
		*n = 0;
	return d;
}

static void strlist_copy(etm_strlist *l, bool *failed)
{
	char **src = l->items;
	l->items = array_or_empty(src, &l->len, sizeof *src, failed);
	for (size_t i = 0; i < l->len; i++)
		l->items[i] = copy_str(src[i], failed);
}

static void tls_copy(etm_tls_spec *t, bool *failed)
{
	t->server_name = copy_str(t->server_name, failed);
	strlist_copy(&t->alpn, failed);
	t->ca = copy_str(t->ca, failed);
	t->certificate = copy_str(t->certificate, failed);
	t->key = copy_str(t->key, failed);
}

static void stream_copy(etm_stream_spec *st, bool *failed)
{
	tls_copy(&st->tls, failed);
	st->ws.path = copy_str(st->ws.path, failed);
	st->ws.host = copy_str(st->ws.host, failed);
	st->grpc.service_name = copy_str(st->grpc.service_name, failed);
}

static void settings_copy(etm_settings_spec *st, bool *failed)
{
	st->username = copy_str(st->username, failed);
	st->password = copy_str(st->password, failed);
	st->id = copy_str(st->id, failed);
	st->secret_key = copy_str(st->secret_key, failed);
	st->peer_public_key = copy_str(st->peer_public_key, failed);
	st->pre_shared_key = copy_str(st->pre_shared_key, failed);
	st->endpoint = copy_str(st->endpoint, failed);
	strlist_copy(&st->address, failed);
	etm_user_spec *users = st->users;
	st->users = array_or_empty(users, &st->users_len, sizeof *users, failed);
	for (size_t i = 0; i < st->users_len; i++) {
		etm_user_spec *u = &st->users[i];
		u->name = copy_str(u->name, failed);
		u->username = copy_str(u->username, failed);
		u->password = copy_str(u->password, failed);
		u->id = copy_str(u->id, failed);
	}
	st->fallback = copy_str(st->fallback, failed);
	st->cluster = copy_str(st->cluster, failed);
}

static void rule_copy(etm_rule_spec *r, bool *failed)
{
	r->outbound = copy_str(r->outbound, failed);
	strlist_copy(&r->domain, failed);
	strlist_copy(&r->domain_suffix, failed);
	strlist_copy(&r->domain_keyword, failed);
	strlist_copy(&r->domain_regex, failed);
	strlist_copy(&r->geosite, failed);
	strlist_copy(&r->cidr, failed);
	strlist_copy(&r->geoip, failed);
	r->port.items = array_or_empty(r->port.items, &r->port.len, sizeof *r->port.items, failed);
	strlist_copy(&r->inbound_tag, failed);
	strlist_copy(&r->source_cidr, failed);
}

static void dns_copy(etm_dns_spec *d, const etm_dns_spec *src, bool *failed)
{
	strlist_copy(&d->servers, failed);
	d->server = array_or_empty(src->server, &d->server_len, sizeof *src->server, failed);
	for (size_t i = 0; i < d->server_len; i++) {
		etm_dns_server_spec *v = &d->server[i];
		v->tag = copy_str(v->tag, failed);
		v->address = copy_str(v->address, failed);
		v->server_name = copy_str(v->server_name, failed);
		v->ca = copy_str(v->ca, failed);
		v->path = copy_str(v->path, failed);
	}
	d->rules = array_or_empty(src->rules, &d->rules_len, sizeof *src->rules, failed);
	for (size_t i = 0; i < d->rules_len; i++) {
		etm_dns_rule_spec *r = &d->rules[i];
		r->server = copy_str(r->server, failed);
		strlist_copy(&r->domain, failed);
		strlist_copy(&r->domain_suffix, failed);
		strlist_copy(&r->domain_keyword, failed);
		strlist_copy(&r->domain_regex, failed);
		strlist_copy(&r->geosite, failed);
	}
	d->hosts = array_or_empty(src->hosts, &d->hosts_len, sizeof *src->hosts, failed);
	for (size_t i = 0; i < d->hosts_len; i++) {
		d->hosts[i].name = copy_str(d->hosts[i].name, failed);
		strlist_copy(&d->hosts[i].address, failed);
	}
	d->final = copy_str(d->final, failed);
}

int etm_spec_copy(etm_spec *dst, const etm_spec *src)
{
	bool failed = false;
	*dst = *src; /* the scalars; every pointer is replaced below */
	dst->inbounds = array_or_empty(src->inbounds, &dst->inbounds_len, sizeof *src->inbounds,
	                               &failed);
	for (size_t i = 0; i < dst->inbounds_len; i++) {
		etm_inbound_spec *in = &dst->inbounds[i];
		in->tag = copy_str(in->tag, &failed);
		in->listen = copy_str(in->listen, &failed);
		settings_copy(&in->settings, &failed);
		stream_copy(&in->stream, &failed);
	}
	dst->outbounds = array_or_empty(src->outbounds, &dst->outbounds_len,
	                                sizeof *src->outbounds, &failed);
	for (size_t i = 0; i < dst->outbounds_len; i++) {
		etm_outbound_spec *o = &dst->outbounds[i];
		o->tag = copy_str(o->tag, &failed);
		o->server = copy_str(o->server, &failed);
		settings_copy(&o->settings, &failed);
		stream_copy(&o->stream, &failed);
	}
	dst->balancers = array_or_empty(src->balancers, &dst->balancers_len,
	                                sizeof *src->balancers, &failed);
	for (size_t i = 0; i < dst->balancers_len; i++) {
		etm_balancer_spec *b = &dst->balancers[i];
		b->tag = copy_str(b->tag, &failed);
		strlist_copy(&b->outbounds, &failed);
		b->strategy = copy_str(b->strategy, &failed);
	}
	dst->clusters = array_or_empty(src->clusters, &dst->clusters_len, sizeof *src->clusters,
	                               &failed);
	for (size_t i = 0; i < dst->clusters_len; i++) {
		etm_cluster_spec *c = &dst->clusters[i];
		c->tag = copy_str(c->tag, &failed);
		strlist_copy(&c->backends, &failed);
		c->health.udp_payload = copy_str(c->health.udp_payload, &failed);
		c->health.udp_payload_hex = copy_str(c->health.udp_payload_hex, &failed);
	}
	dst->route.default_tag = copy_str(dst->route.default_tag, &failed);
	dst->route.geoip = copy_str(dst->route.geoip, &failed);
	dst->route.geosite = copy_str(dst->route.geosite, &failed);
	dst->route.rules = array_or_empty(src->route.rules, &dst->route.rules_len,
	                                  sizeof *src->route.rules, &failed);
	for (size_t i = 0; i < dst->route.rules_len; i++)
		rule_copy(&dst->route.rules[i], &failed);
	dns_copy(&dst->dns, &src->dns, &failed);
	dst->log_access = copy_str(dst->log_access, &failed);
	dst->metrics_listen = copy_str(dst->metrics_listen, &failed);
	dst->api_listen = copy_str(dst->api_listen, &failed);
	dst->api_secret = copy_str(dst->api_secret, &failed);
	if (failed) {
		etm_spec_free(dst);
		return -1;
	}
	return 0;
}

const char *etm_spec_default_tag(const etm_spec *spec)
{
	if (spec->route.default_tag)
		return spec->route.default_tag;
	return spec->outbounds_len ? spec->outbounds[0].tag : NULL;
}

/* ---- checks ---- */

static const etm_outbound_spec *find_outbound(const etm_spec *s, const char *tag)
{
	for (size_t i = 0; i < s->outbounds_len; i++)
		if (strcmp(s->outbounds[i].tag, tag) == 0)
			return &s->outbounds[i];
	return NULL;
}

/* The outbound map of seed 000: outbounds, then balancers[0, upto). */
static bool in_target_map(const etm_spec *s, const char *tag, size_t balancers_upto)
{
	if (find_outbound(s, tag))
		return true;
	for (size_t i = 0; i < balancers_upto; i++)
		if (strcmp(s->balancers[i].tag, tag) == 0)
			return true;
	return false;
}

/* upstream_dest_opt of seed 000: server and port both set, and not a
 * UDP-only protocol. The check looks at the keys only, on purpose (seed 003
 * "Do not work around the check with a stray server"). */
static bool has_probe_target(const etm_outbound_spec *o)
{
	return o->server && o->has_port && o->protocol != ETM_PROTO_HYSTERIA2;
}

/* The outbound table says which protocols dial a server of their own,
 * built or not yet. */
static bool is_proxy_client(etm_protocol p)
{
	const outbound_proto *op = build_outbound_proto(p);
	return op && op->proxy_client;
}

/* 8-4-4-4-12 hexadecimal digits. */
static bool is_uuid(const char *s)
{
	static const int groups[] = {8, 4, 4, 4, 12};
	for (size_t g = 0; g < 5; g++) {
		for (int i = 0; i < groups[g]; i++, s++)
			if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f') ||
			      (*s >= 'A' && *s <= 'F')))
				return false;
		if (g < 4 && *s++ != '-')
			return false;
	}
	return *s == '\0';
}

static bool is_ip(const char *s)
{
	unsigned char buf[16];
	return inet_pton(AF_INET, s, buf) == 1 || inet_pton(AF_INET6, s, buf) == 1;
}

bool spec_cidr_valid(const char *s)
{
	char addr[64];
	const char *slash = strchr(s, '/');
	size_t alen = slash ? (size_t)(slash - s) : strlen(s);
	if (alen == 0 || alen >= sizeof addr)
		return false;
	memcpy(addr, s, alen);
	addr[alen] = '\0';
	unsigned char buf[16];
	int max;
	if (inet_pton(AF_INET, addr, buf) == 1)
		max = 32;
	else if (inet_pton(AF_INET6, addr, buf) == 1)
		max = 128;
	else
		return false;
	if (!slash)
		return true; /* a bare address is a host route */
	const char *p = slash + 1;
	if (*p == '\0' || strlen(p) > 3)
		return false;
	int bits = 0;
	for (; *p; p++) {
		if (*p < '0' || *p > '9')
			return false;
		bits = bits * 10 + (*p - '0');
	}
	return bits <= max;
}

/* "ip", "ip:port", "[v6]", "[v6]:port" or a bare v6 address, the forms the
 * resolver accepts (src/runtime/dns.h). */
static bool dns_server_valid(const char *s)
{
	char host[64];
	const char *port = NULL;
	size_t hlen;
	if (is_ip(s))
		return true;
	if (s[0] == '[') {
		const char *close = strchr(s, ']');
		if (!close)
			return false;
		hlen = (size_t)(close - s - 1);
		if (hlen >= sizeof host)
			return false;
		memcpy(host, s + 1, hlen);
		host[hlen] = '\0';
		if (close[1] == ':')
			port = close + 2;
		else if (close[1] != '\0')
			return false;
		unsigned char buf[16];
		if (inet_pton(AF_INET6, host, buf) != 1)
			return false;
	} else {
		const char *colon = strchr(s, ':');
		if (!colon || strchr(colon + 1, ':'))
			return false;
		hlen = (size_t)(colon - s);
		if (hlen >= sizeof host)
			return false;
		memcpy(host, s, hlen);
		host[hlen] = '\0';
		unsigned char buf[4];
		if (inet_pton(AF_INET, host, buf) != 1)
			return false;
		port = colon + 1;
	}
	if (!port)
		return true;
	if (*port == '\0' || strlen(port) > 5)
		return false;
	unsigned long n = 0;
	for (const char *p = port; *p; p++) {
		if (*p < '0' || *p > '9')
			return false;
		n = n * 10 + (unsigned long)(*p - '0');
	}
	return n >= 1 && n <= 65535;
}

static bool dns_server_known(const etm_dns_spec *d, const char *tag)
{
	for (size_t i = 0; i < d->server_len; i++)
		if (strcmp(d->server[i].tag, tag) == 0)
			return true;
	return false;
}

/* [dns]'s service keys: the upstreams, their rules, the hosts. */
static int check_dns(const etm_dns_spec *d, char *msg, size_t size)
{
	if (d->server_len == 0) {
		const char *what = d->rules_len ? "[[dns.rule]]"
		                   : d->hosts_len ? "[[dns.host]]"
		                   : d->final     ? "final"
		                                  : NULL;
		return what ? spec_format(msg, size, SPEC_DNS_NEEDS_SERVER, what) : 0;
	}
	if (d->servers.len)
		return spec_format(msg, size, SPEC_DNS_BOTH);
	if (d->timeout < 1 || d->timeout > 60)
		return spec_format(msg, size, SPEC_DNS_RANGE, "timeout", "1 to 60 seconds");
	if (d->cache_size > (1u << 20))
		return spec_format(msg, size, SPEC_DNS_RANGE, "cache_size", "at most 1048576");
	for (size_t i = 0; i < d->server_len; i++) {
		const etm_dns_server_spec *v = &d->server[i];
		for (size_t j = 0; j < i; j++)
			if (strcmp(d->server[j].tag, v->tag) == 0)
				return spec_format(msg, size, SPEC_DNS_DUPLICATE_SERVER, v->tag);
		if (!dns_server_valid(v->address))
			return spec_format(msg, size, SPEC_DNS_BAD_ADDRESS, v->tag, v->address);
		if (v->through_proxy && v->protocol == ETM_DNS_UDP)
			return spec_format(msg, size, SPEC_DNS_PROXY_UDP, v->tag);
		if (v->path && v->path[0] != '/')
			return spec_format(msg, size, SPEC_DNS_BAD_PATH, v->tag, v->path);
	}
	if (d->final && !dns_server_known(d, d->final))
		return spec_format(msg, size, SPEC_DNS_UNKNOWN_SERVER, "final", d->final);
	for (size_t i = 0; i < d->rules_len; i++) {
		const etm_dns_rule_spec *r = &d->rules[i];
		char num[24], where[40];
		snprintf(num, sizeof num, "%zu", i + 1);
		snprintf(where, sizeof where, "rule #%zu", i + 1);
		if (!dns_server_known(d, r->server))
			return spec_format(msg, size, SPEC_DNS_UNKNOWN_SERVER, where, r->server);
		if (r->domain.len + r->domain_suffix.len + r->domain_keyword.len +
		        r->domain_regex.len + r->geosite.len ==
		    0)
			return spec_format(msg, size, SPEC_DNS_RULE_NO_MATCHER, num, r->server);
		for (size_t k = 0; k < r->domain_regex.len; k++) {
			char why[256];
			if (route_regex_check(r->domain_regex.items[k], why, sizeof why))
				return spec_format(msg, size, SPEC_DNS_RULE_BAD_REGEX, num, why);
		}
	}
	for (size_t i = 0; i < d->hosts_len; i++) {
		const etm_dns_host_spec *h = &d->hosts[i];
		if (h->address.len == 0)
			return spec_format(msg, size, SPEC_DNS_HOST_EMPTY, h->name);
		for (size_t k = 0; k < h->address.len; k++)
			if (!is_ip(h->address.items[k]))
				return spec_format(msg, size, SPEC_DNS_HOST_BAD, h->name,
				                   h->address.items[k]);
	}
	return 0;
}

/* The drain keys of outbound tag, or of [policy] when tag is NULL. */
static int check_drain(const etm_drain_spec *d, const char *tag, char *msg, size_t size)
{
	_Static_assert(ETM_MAX_DRAIN_AFTER == 86400, "the drain_after messages name the bound");
	if (d->has_after && d->after > ETM_MAX_DRAIN_AFTER)
		return tag ? spec_format(msg, size, SPEC_OUT_DRAIN_RANGE, tag)
		           : spec_format(msg, size, SPEC_POLICY_DRAIN_RANGE);
	if (d->has_after && d->mode == ETM_DRAIN_KEEP)
		return tag ? spec_format(msg, size, SPEC_OUT_DRAIN_KEEP, tag)
		           : spec_format(msg, size, SPEC_POLICY_DRAIN_KEEP);
	return 0;
}

static int check_outbound(const etm_outbound_spec *o, char *msg, size_t size)
{
	const char *pn = etm_protocol_name(o->protocol);
	const etm_settings_spec *st = &o->settings;
	if (o->stream.ws.path && o->stream.ws.path[0] != '/')
		return spec_format(msg, size, SPEC_BAD_WS_PATH, "outbound", o->tag, o->stream.ws.path);
	if (is_proxy_client(o->protocol) && !(o->server && o->has_port))
		return spec_format(msg, size, SPEC_OUTBOUND_NEEDS_SERVER, o->tag, pn);
	if (o->mux.enabled && o->protocol != ETM_PROTO_TROJAN && o->protocol != ETM_PROTO_VLESS &&
	    o->protocol != ETM_PROTO_VMESS)
		return spec_format(msg, size, SPEC_MUX_PROTOCOL, o->tag, pn);
	if ((o->mux.enabled || o->mux.concurrency) &&
	    (o->mux.concurrency < 1 || o->mux.concurrency > ETM_MUX_CONCURRENCY_MAX))
		return spec_format(msg, size, SPEC_MUX_RANGE, o->tag);
	switch (o->protocol) {
	case ETM_PROTO_TROJAN:
	case ETM_PROTO_HYSTERIA2:
		if (!st->password)
			return spec_format(msg, size, SPEC_OUTBOUND_NEEDS_SETTING, o->tag, pn,
			                   "password");
		break;
	case ETM_PROTO_VLESS:
	case ETM_PROTO_VMESS:
		if (!st->id)
			return spec_format(msg, size, SPEC_OUTBOUND_NEEDS_SETTING, o->tag, pn, "id");
		if (!is_uuid(st->id))
			return spec_format(msg, size, SPEC_BAD_UUID, "outbound", o->tag, st->id);
		break;
	case ETM_PROTO_SHADOWSOCKS:
		if (st->method == ETM_SS_UNSET)
			return spec_format(msg, size, SPEC_OUTBOUND_NEEDS_SETTING, o->tag, pn,
			                   "method");
		if (!st->password)
			return spec_format(msg, size, SPEC_OUTBOUND_NEEDS_SETTING, o->tag, pn,
			                   "password");
		break;
	case ETM_PROTO_WIREGUARD:
		if (!st->secret_key)
			return spec_format(msg, size, SPEC_OUTBOUND_NEEDS_SETTING, o->tag, pn,
			                   "secret_key");
		if (!st->peer_public_key)
			return spec_format(msg, size, SPEC_OUTBOUND_NEEDS_SETTING, o->tag, pn,
			                   "peer_public_key");
		if (!st->endpoint)
			return spec_format(msg, size, SPEC_OUTBOUND_NEEDS_SETTING, o->tag, pn,
			                   "endpoint");
		break;
	default:
		break;
	}
	return check_drain(&o->drain, o->tag, msg, size);
}

static int check_inbound(const etm_inbound_spec *in, char *msg, size_t size)
{
	const char *pn = etm_protocol_name(in->protocol);
	const etm_settings_spec *st = &in->settings;
	if (in->listen && !is_ip(in->listen))
		return spec_format(msg, size, SPEC_BAD_LISTEN, in->tag, in->listen);
	if (in->stream.ws.path && in->stream.ws.path[0] != '/')
		return spec_format(msg, size, SPEC_BAD_WS_PATH, "inbound", in->tag, in->stream.ws.path);
	if (in->stream.security == ETM_SEC_TLS && !(in->stream.tls.certificate && in->stream.tls.key))
		return spec_format(msg, size, SPEC_TLS_NEEDS_CERT, in->tag);

	const char *need = NULL; /* what every user of this protocol must carry */
	switch (in->protocol) {
	case ETM_PROTO_TROJAN:
	case ETM_PROTO_HYSTERIA2:
		need = "password";
		if (st->users_len == 0)
			return spec_format(msg, size, SPEC_INBOUND_NEEDS_SETTING, in->tag, pn, "users");
		break;
	case ETM_PROTO_VLESS:
	case ETM_PROTO_VMESS:
		need = "id";
		if (st->users_len == 0)
			return spec_format(msg, size, SPEC_INBOUND_NEEDS_SETTING, in->tag, pn, "users");
		break;
	case ETM_PROTO_SOCKS:
	case ETM_PROTO_HTTP:
	case ETM_PROTO_MIXED:
		need = "username and password";
		break;
	case ETM_PROTO_SHADOWSOCKS:
		need = "password";
		if (st->method == ETM_SS_UNSET)
			return spec_format(msg, size, SPEC_INBOUND_NEEDS_SETTING, in->tag, pn, "method");
		/* one user in settings.password, or several in settings.users */
		if (!st->password && st->users_len == 0)
			return spec_format(msg, size, SPEC_INBOUND_NEEDS_SETTING, in->tag, pn,
			                   "password");
		/* SIP022-2: several 2022 users are told apart by an identity
		 * header under the server's identity PSK, an AES block */
		if (st->users_len && st->method == ETM_SS_2022_BLAKE3_CHACHA20_POLY1305)
			return spec_format(msg, size, SPEC_SS_IDENTITY_METHOD, in->tag,
			                   etm_ss_method_name(st->method));
		if (st->users_len && st->method >= ETM_SS_2022_BLAKE3_AES_128_GCM && !st->password)
			return spec_format(msg, size, SPEC_SS_IDENTITY_NEEDED, in->tag);
		break;
	default:
		break;
	}
	for (size_t i = 0; need && i < st->users_len; i++) {
		const etm_user_spec *u = &st->users[i];
		bool ok = in->protocol == ETM_PROTO_VLESS || in->protocol == ETM_PROTO_VMESS
		                  ? u->id != NULL
		          : in->protocol == ETM_PROTO_TROJAN || in->protocol == ETM_PROTO_HYSTERIA2 ||
		                    in->protocol == ETM_PROTO_SHADOWSOCKS
		                  ? u->password != NULL
		                  : u->username && u->password;
		if (!ok)
			return spec_format(msg, size, SPEC_USER_NEEDS, in->tag, pn, need);
		if (u->id && !is_uuid(u->id))
			return spec_format(msg, size, SPEC_BAD_UUID, "inbound", in->tag, u->id);
	}
	return 0;
}

/* Fills the balancer's strategy_kind: s is not const for that. */
static int check_balancer(etm_spec *s, size_t bi, char *msg, size_t size)
{
	etm_balancer_spec *b = &s->balancers[bi];
	if (in_target_map(s, b->tag, bi))
		return spec_format(msg, size, SPEC_BALANCER_COLLIDES, b->tag);
	for (size_t m = 0; m < b->outbounds.len; m++) {
		const char *member = b->outbounds.items[m];
		/* Looked up among [[outbound]]s only: a balancer is never a member. */
		const etm_outbound_spec *o = find_outbound(s, member);
		if (!o)
			return spec_format(msg, size, SPEC_BALANCER_UNKNOWN_MEMBER, b->tag, member);
		if (!has_probe_target(o))
			return spec_format(msg, size, SPEC_BALANCER_UNPROBEABLE, b->tag, member);
	}
	if (!b->strategy || strcmp(b->strategy, "failover") == 0)
		b->strategy_kind = ETM_STRATEGY_FAILOVER;
	else if (strcmp(b->strategy, "round_robin") == 0)
		b->strategy_kind = ETM_STRATEGY_ROUND_ROBIN;
	else
		return spec_format(msg, size, SPEC_BALANCER_STRATEGY, b->strategy);
	if (b->outbounds.len == 0)
		return spec_format(msg, size, SPEC_BALANCER_EMPTY);
	if (b->outbounds.len > BALANCER_MAX_MEMBERS)
		return spec_format(msg, size, SPEC_BALANCER_TOO_MANY, b->tag);
	if (b->rise < 1 || b->rise > 100)
		return spec_format(msg, size, SPEC_BALANCER_RANGE, b->tag, "rise", "1 to 100");
	if (b->fall < 1 || b->fall > 100)
		return spec_format(msg, size, SPEC_BALANCER_RANGE, b->tag, "fall", "1 to 100");
	if (b->retry > 8)
		return spec_format(msg, size, SPEC_BALANCER_RANGE, b->tag, "retry", "0 to 8");
	return 0;
}

static int check_rule(const etm_spec *s, size_t ri, char *msg, size_t size)
{
	const etm_rule_spec *r = &s->route.rules[ri];
	char num[24];
	snprintf(num, sizeof num, "%zu", ri + 1);
	if (!in_target_map(s, r->outbound, s->balancers_len))
		return spec_format(msg, size, SPEC_ROUTE_UNKNOWN_TAG, r->outbound);
	if (r->domain.len + r->domain_suffix.len + r->domain_keyword.len + r->domain_regex.len +
	            r->geosite.len + r->cidr.len + r->geoip.len + r->port.len + r->inbound_tag.len +
	            r->source_cidr.len ==
	        0 &&
	    r->networks == 0)
		return spec_format(msg, size, SPEC_RULE_NO_MATCHER, num, r->outbound);
	const etm_strlist *lists[] = {&r->cidr, &r->source_cidr};
	for (size_t l = 0; l < 2; l++)
		for (size_t i = 0; i < lists[l]->len; i++)
			if (!spec_cidr_valid(lists[l]->items[i]))
				return spec_format(msg, size, SPEC_RULE_BAD_CIDR, num,
				                   lists[l]->items[i]);
	for (size_t i = 0; i < r->domain_regex.len; i++) {
		char why[256];
		if (route_regex_check(r->domain_regex.items[i], why, sizeof why))
			return spec_format(msg, size, SPEC_RULE_BAD_REGEX, num, why);
	}
	return 0;
}

static const etm_cluster_spec *find_cluster(const etm_spec *s, const char *tag)
{
	for (size_t i = 0; i < s->clusters_len; i++)
		if (strcmp(s->clusters[i].tag, tag) == 0)
			return &s->clusters[i];
	return NULL;
}

static int check_cluster(const etm_cluster_spec *c, char *msg, size_t size)
{
	/* has: offset of the bool saying the key was given, 0 when the value
	 * always counts (a key left out then holds its in-range default). */
	static const struct {
		size_t off, has;
		const char *name;
		uint64_t min, max;
		const char *range;
	} ranges[] = {
		{offsetof(etm_cluster_spec, idle_timeout), 0, "idle_timeout", 1, 86400, "1 to 86400"},
		{offsetof(etm_cluster_spec, front_timeout), offsetof(etm_cluster_spec, has_front_timeout),
		 "front_timeout", 1, 86400, "1 to 86400"},
		{offsetof(etm_cluster_spec, back_timeout), offsetof(etm_cluster_spec, has_back_timeout),
		 "back_timeout", 1, 86400, "1 to 86400"},
		{offsetof(etm_cluster_spec, responses), 0, "responses", 0, UINT32_MAX, "0 to 4294967295"},
		{offsetof(etm_cluster_spec, requests), 0, "requests", 0, UINT32_MAX, "0 to 4294967295"},
		{offsetof(etm_cluster_spec, max_flows_per_ip), 0, "max_flows_per_ip", 0, UINT32_MAX,
		 "0 to 4294967295"},
		{offsetof(etm_cluster_spec, max_flows_per_subnet), 0, "max_flows_per_subnet", 0,
		 UINT32_MAX, "0 to 4294967295"},
		{offsetof(etm_cluster_spec, subnet_prefix_v4), 0, "subnet_prefix_v4", 0, 32, "0 to 32"},
		{offsetof(etm_cluster_spec, subnet_prefix_v6), 0, "subnet_prefix_v6", 0, 128, "0 to 128"},
		{offsetof(etm_cluster_spec, health.interval), 0, "health.interval", 1, 86400,
		 "1 to 86400"},
		{offsetof(etm_cluster_spec, health.timeout), 0, "health.timeout", 1, 86400, "1 to 86400"},
		{offsetof(etm_cluster_spec, health.rise), 0, "health.rise", 1, 100, "1 to 100"},
		{offsetof(etm_cluster_spec, health.fall), 0, "health.fall", 1, 100, "1 to 100"},
	};
	if (c->backends.len == 0)
		return spec_format(msg, size, SPEC_CLUSTER_EMPTY, c->tag);
	for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++) {
		if (ranges[i].has && !*(const bool *)((const char *)c + ranges[i].has))
			continue;
		uint64_t v = *(const uint64_t *)((const char *)c + ranges[i].off);
		if (v < ranges[i].min || v > ranges[i].max)
			return spec_format(msg, size, SPEC_CLUSTER_RANGE, c->tag, ranges[i].name,
			                   ranges[i].range);
	}
	const etm_lb_health_spec *h = &c->health;
	if (h->udp_payload && h->udp_payload_hex)
		return spec_format(msg, size, SPEC_CLUSTER_TWO_PAYLOADS, c->tag);
	if (h->udp_payload_hex && udplb_hex_decode(h->udp_payload_hex, NULL, 0) < 0)
		return spec_format(msg, size, SPEC_CLUSTER_BAD_HEX, c->tag);
	if (c->reuse_upstream_sockets && c->responses == 0)
		return spec_format(msg, size, SPEC_CLUSTER_REUSE_NO_CAP, c->tag);
	if (c->reuse_upstream_sockets && c->proxy_protocol == ETM_LB_PPV2_FIRST)
		return spec_format(msg, size, SPEC_CLUSTER_REUSE_FIRST, c->tag);
	if (c->has_health && h->has_tcp_port && h->tcp_port == 0 && !h->udp_payload &&
	    !h->udp_payload_hex)
		return spec_format(msg, size, SPEC_CLUSTER_NO_CHECK, c->tag);
	udplb_conf conf;
	size_t bad;
	int err = build_udplb_conf(c, &conf, &bad);
	if (err && bad < c->backends.len)
		return spec_format(msg, size, SPEC_CLUSTER_BACKEND, c->tag, c->backends.items[bad],
		                   udplb_strerror(err));
	if (err)
		return spec_format(msg, size, SPEC_CLUSTER_INVALID, c->tag, udplb_strerror(err));
	udplb_conf_free(&conf);
	return 0;
}

static int check_lb_inbound(const etm_spec *s, const etm_inbound_spec *in, char *msg, size_t size)
{
	const etm_settings_spec *st = &in->settings;
	if (!st->cluster)
		return spec_format(msg, size, SPEC_INBOUND_NEEDS_SETTING, in->tag, "udp_lb", "cluster");
	if (!find_cluster(s, st->cluster))
		return spec_format(msg, size, SPEC_UNKNOWN_CLUSTER, in->tag, st->cluster);
	if (st->max_flows > UDPLB_MAX_FLOWS_LIMIT)
		return spec_format(msg, size, SPEC_LB_RANGE, in->tag, "max_flows",
		                   "0 (automatic) to 16777216");
	if (st->max_rx_datagram_size == 0)
		return spec_format(msg, size, SPEC_LB_RANGE, in->tag, "max_rx_datagram_size",
		                   "at least 1");
	if (in->stream.network != ETM_NET_TCP || in->stream.security != ETM_SEC_NONE)
		return spec_format(msg, size, SPEC_LB_TAKES_NO, in->tag, "stream settings");
	if (in->sniffing)
		return spec_format(msg, size, SPEC_LB_TAKES_NO, in->tag, "sniffing");
	return 0;
}

static bool only_lb_inbounds(const etm_spec *s)
{
	for (size_t i = 0; i < s->inbounds_len; i++)
		if (s->inbounds[i].protocol != ETM_PROTO_UDP_LB)
			return false;
	return s->inbounds_len > 0;
}

static int add_direct(etm_spec *s)
{
	etm_outbound_spec *o = calloc(1, sizeof *o);
	char *tag = strdup("direct");
	if (!o || !tag) {
		free(o);
		free(tag);
		return -1;
	}
	o->tag = tag;
	o->protocol = ETM_PROTO_FREEDOM;
	s->outbounds = o;
	s->outbounds_len = 1;
	return 0;
}

int etm_listen_addr_parse(const char *s, struct sockaddr_storage *out)
{
	const char *colon = strrchr(s, ':');
	if (!colon || colon == s || !colon[1] || strlen(colon + 1) > 5)
		return -1;
	char host[INET6_ADDRSTRLEN + 2];
	size_t hlen = (size_t)(colon - s);
	bool v6 = s[0] == '[';
	if (v6 && (hlen < 3 || s[hlen - 1] != ']'))
		return -1;
	const char *h = v6 ? s + 1 : s;
	size_t n = v6 ? hlen - 2 : hlen;
	if (n >= sizeof host)
		return -1;
	memcpy(host, h, n);
	host[n] = '\0';
	unsigned long port = 0;
	for (const char *p = colon + 1; *p; p++) {
		if (*p < '0' || *p > '9')
			return -1;
		port = port * 10 + (unsigned long)(*p - '0');
	}
	if (port > 65535)
		return -1;
	struct sockaddr_storage ss = {0};
	if (v6) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
		if (inet_pton(AF_INET6, host, &a->sin6_addr) != 1)
			return -1;
		a->sin6_family = AF_INET6;
		a->sin6_port = htons((uint16_t)port);
	} else {
		struct sockaddr_in *a = (struct sockaddr_in *)&ss;
		if (inet_pton(AF_INET, host, &a->sin_addr) != 1)
			return -1;
		a->sin_family = AF_INET;
		a->sin_port = htons((uint16_t)port);
	}
	*out = ss;
	return 0;
}

/* An empty string or a directory name ("logs/") cannot be opened for
 * append; every other string is a path the start tries. */
static bool access_target_valid(const char *t)
{
	size_t n = strlen(t);
	return n > 0 && t[n - 1] != '/';
}

/* The order follows seed 000 "Where outbounds live": outbounds, then
 * balancers, then the router; inbounds last, as they are bound last. */
/* 127.0.0.0/8 and ::1 (RFC 1122 3.2.1.3, RFC 4291 2.5.3), and 127/8
 * mapped into IPv6. */
static bool addr_is_loopback(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127;
	const struct in6_addr *a = &((const struct sockaddr_in6 *)ss)->sin6_addr;
	return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
}

int etm_spec_check(etm_spec *s, char *msg, size_t size)
{
	if (size)
		msg[0] = '\0';
	/* A file of UDP load-balancer listeners only routes nothing; it gets
	 * the one outbound the router needs rather than an error. */
	if (s->outbounds_len == 0 && only_lb_inbounds(s) && add_direct(s))
		return spec_format(msg, size, SPEC_OUT_OF_MEMORY);
	if (s->outbounds_len == 0)
		return spec_format(msg, size, SPEC_NO_OUTBOUND);
	if (check_drain(&s->policy.drain, NULL, msg, size))
		return -1;
	if (s->policy.upgrade_drain_after > ETM_MAX_DRAIN_AFTER)
		return spec_format(msg, size, SPEC_POLICY_UPGRADE_RANGE);
	_Static_assert(ETM_MIN_UPGRADE_START_TIMEOUT == 1 && ETM_MAX_UPGRADE_START_TIMEOUT == 3600,
	               "the upgrade_start_timeout message names the bounds");
	if (s->policy.upgrade_start_timeout < ETM_MIN_UPGRADE_START_TIMEOUT ||
	    s->policy.upgrade_start_timeout > ETM_MAX_UPGRADE_START_TIMEOUT)
		return spec_format(msg, size, SPEC_POLICY_UPGRADE_START_RANGE);
	if (s->log_access && !access_target_valid(s->log_access))
		return spec_format(msg, size, SPEC_BAD_ACCESS_LOG, s->log_access);
	struct sockaddr_storage ss;
	if (s->metrics_listen && etm_listen_addr_parse(s->metrics_listen, &ss))
		return spec_format(msg, size, SPEC_BAD_METRICS_LISTEN, s->metrics_listen);
	/* the admin API kills flows and reloads the config: without a secret
	 * only this host may reach it (docs/api.md "Security") */
	if (s->api_listen && etm_listen_addr_parse(s->api_listen, &ss))
		return spec_format(msg, size, SPEC_BAD_API_LISTEN, s->api_listen);
	if (s->api_listen && !(s->api_secret && *s->api_secret) && !addr_is_loopback(&ss))
		return spec_format(msg, size, SPEC_API_NOT_LOOPBACK, s->api_listen);
	for (size_t i = 0; i < s->outbounds_len; i++) {
		const etm_outbound_spec *o = &s->outbounds[i];
		if (find_outbound(s, o->tag) != o)
			return spec_format(msg, size, SPEC_DUPLICATE_OUTBOUND, o->tag);
		if (check_outbound(o, msg, size))
			return -1;
	}
	for (size_t i = 0; i < s->balancers_len; i++)
		if (check_balancer(s, i, msg, size))
			return -1;
	for (size_t i = 0; i < s->route.rules_len; i++)
		if (check_rule(s, i, msg, size))
			return -1;
	if (s->route.default_tag && !in_target_map(s, s->route.default_tag, s->balancers_len))
		return spec_format(msg, size, SPEC_ROUTE_UNKNOWN_TAG, s->route.default_tag);
	for (size_t i = 0; i < s->dns.servers.len; i++)
		if (!dns_server_valid(s->dns.servers.items[i]))
			return spec_format(msg, size, SPEC_BAD_DNS_SERVER, s->dns.servers.items[i]);
	if (check_dns(&s->dns, msg, size))
		return -1;
	for (size_t i = 0; i < s->inbounds_len; i++) {
		const etm_inbound_spec *in = &s->inbounds[i];
		for (size_t j = 0; j < i; j++)
			if (strcmp(s->inbounds[j].tag, in->tag) == 0)
				return spec_format(msg, size, SPEC_DUPLICATE_INBOUND, in->tag);
		if (check_inbound(in, msg, size))
			return -1;
	}
	for (size_t i = 0; i < s->clusters_len; i++) {
		const etm_cluster_spec *c = &s->clusters[i];
		if (find_cluster(s, c->tag) != c)
			return spec_format(msg, size, SPEC_DUPLICATE_CLUSTER, c->tag);
		if (check_cluster(c, msg, size))
			return -1;
	}
	for (size_t i = 0; i < s->inbounds_len; i++)
		if (s->inbounds[i].protocol == ETM_PROTO_UDP_LB &&
		    check_lb_inbound(s, &s->inbounds[i], msg, size))
			return -1;
	return 0;
}


int etm_spec_check_available(const etm_spec *s, char *msg, size_t size)
{
	for (size_t i = 0; i < s->inbounds_len; i++) {
		const etm_inbound_spec *in = &s->inbounds[i];
		if (!etm_protocol_available(in->protocol, true))
			return spec_format(msg, size, SPEC_UNAVAILABLE_INBOUND, in->tag,
			                   etm_protocol_name(in->protocol));
		/* a key this build would accept and ignore is refused (issue 22):
		 * VMess's first bytes are sealed chunks, not the client's */
		if (in->sniffing && in->protocol == ETM_PROTO_VMESS)
			return spec_format(msg, size, SPEC_UNAVAILABLE_IN_FEATURE, in->tag,
			                   "sniffing on a vmess inbound");
		if (in->protocol == ETM_PROTO_SHADOWSOCKS &&
		    !ss_method_available(in->settings.method))
			return spec_format(msg, size, SPEC_UNAVAILABLE_IN_METHOD, in->tag,
			                   etm_ss_method_name(in->settings.method));
	}
	for (size_t i = 0; i < s->outbounds_len; i++) {
		const etm_outbound_spec *o = &s->outbounds[i];
		if (!etm_protocol_available(o->protocol, false))
			return spec_format(msg, size, SPEC_UNAVAILABLE_OUTBOUND, o->tag,
			                   etm_protocol_name(o->protocol));
		if (o->protocol == ETM_PROTO_SHADOWSOCKS && !ss_method_available(o->settings.method))
			return spec_format(msg, size, SPEC_UNAVAILABLE_OUT_METHOD, o->tag,
			                   etm_ss_method_name(o->settings.method));
	}
	return 0;
}
