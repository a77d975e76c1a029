/* plan_equal.c - the equality of each spec kind, for the planner: every field that changes what an object does. */
#include "supervisor/plan_equal.h"

#include <stdint.h>
#include <string.h>

/* Every field of every struct is compared. So that a field added to spec.h
 * later cannot be forgotten here (a reload would then ignore a change to
 * it), the sizes of the structs are pinned on LP64 builds: a new field
 * fails the build until its comparison is written and the size updated. */

#if UINTPTR_MAX == UINT64_MAX
_Static_assert(sizeof(etm_tls_spec) == 56, "compare the new field in tls_eq");
_Static_assert(sizeof(etm_stream_spec) == 88, "compare the new field in stream_eq");
_Static_assert(sizeof(etm_user_spec) == 56, "compare the new field in user_eq");
_Static_assert(sizeof(etm_settings_spec) == 136, "compare the new field in settings_eq");
_Static_assert(sizeof(etm_inbound_spec) == 256, "compare the new field in plan_inbound_equal");
_Static_assert(sizeof(etm_outbound_spec) == 296, "compare the new field in plan_outbound_equal");
_Static_assert(sizeof(etm_balancer_spec) == 80, "compare the new field in plan_balancer_equal");
_Static_assert(sizeof(etm_cluster_spec) == 192, "compare the new field in plan_cluster_equal");
_Static_assert(sizeof(etm_rule_spec) == 176, "compare the new field in rule_eq");
_Static_assert(sizeof(etm_route_spec) == 40, "compare the new field in plan_route_equal");
_Static_assert(sizeof(etm_dns_spec) == 96, "compare the new field in plan_dns_equal");
_Static_assert(sizeof(etm_dns_server_spec) == 64, "compare the new field in dns_server_eq");
_Static_assert(sizeof(etm_dns_rule_spec) == 88, "compare the new field in dns_rule_eq");
_Static_assert(sizeof(etm_dns_host_spec) == 24, "compare the new field in plan_dns_equal");
/* upgrade_drain_after, upgrade_start_timeout and user_removal are left
 * out: nothing running reads them (an upgrade reads the first two, and a
 * commit the last, from the spec apply installs). */
_Static_assert(sizeof(etm_policy_spec) == 72, "compare the new field in plan_policy_limits_equal");
_Static_assert(sizeof(etm_runtime_spec) == 16, "compare the new field in plan_singletons (plan.c)");
#endif

/* Two optional strings: both absent, or both present and the same. */
static bool str_eq(const char *a, const char *b)
{
	return a == b || (a && b && strcmp(a, b) == 0);
}

static bool strlist_eq(const etm_strlist *a, const etm_strlist *b)
{
	if (a->len != b->len)
		return false;
	for (size_t i = 0; i < a->len; i++)
		if (!str_eq(a->items[i], b->items[i]))
			return false;
	return true;
}

static bool tls_eq(const etm_tls_spec *a, const etm_tls_spec *b)
{
	return str_eq(a->server_name, b->server_name) && strlist_eq(&a->alpn, &b->alpn) &&
	       a->allow_insecure == b->allow_insecure && str_eq(a->ca, b->ca) &&
	       str_eq(a->certificate, b->certificate) && str_eq(a->key, b->key);
}

static bool stream_eq(const etm_stream_spec *a, const etm_stream_spec *b)
{
	return a->network == b->network && a->security == b->security && tls_eq(&a->tls, &b->tls) &&
	       str_eq(a->ws.path, b->ws.path) && str_eq(a->ws.host, b->ws.host) &&
	       str_eq(a->grpc.service_name, b->grpc.service_name);
}

static bool user_eq(const etm_user_spec *a, const etm_user_spec *b)
{
	return str_eq(a->name, b->name) && str_eq(a->username, b->username) &&
	       str_eq(a->password, b->password) && str_eq(a->id, b->id) &&
	       a->up_rate == b->up_rate && a->down_rate == b->down_rate &&
	       a->max_sessions == b->max_sessions;
}

static bool settings_eq(const etm_settings_spec *a, const etm_settings_spec *b)
{
	if (!(str_eq(a->username, b->username) && str_eq(a->password, b->password) &&
	      str_eq(a->id, b->id) && a->security == b->security && a->method == b->method &&
	      str_eq(a->secret_key, b->secret_key) &&
	      str_eq(a->peer_public_key, b->peer_public_key) &&
	      str_eq(a->pre_shared_key, b->pre_shared_key) && str_eq(a->endpoint, b->endpoint) &&
	      strlist_eq(&a->address, &b->address) && a->mtu == b->mtu &&
	      str_eq(a->fallback, b->fallback) && str_eq(a->cluster, b->cluster) &&
	      a->max_flows == b->max_flows && a->max_rx_datagram_size == b->max_rx_datagram_size &&
	      a->users_len == b->users_len))
		return false;
	for (size_t i = 0; i < a->users_len; i++)
		if (!user_eq(&a->users[i], &b->users[i]))
			return false;
	return true;
}

bool plan_outbound_equal(const etm_outbound_spec *a, const etm_outbound_spec *b)
{
	/* The drain keys say what happens to this version's flows once it is
	 * replaced, not what the version does: a change to them alone is a
	 * swap (PLAN_F_DRAIN), never a rebuild that would itself drain. */
	return str_eq(a->tag, b->tag) && a->protocol == b->protocol &&
	       str_eq(a->server, b->server) && a->port == b->port && a->has_port == b->has_port &&
	       a->address_family == b->address_family && settings_eq(&a->settings, &b->settings) &&
	       stream_eq(&a->stream, &b->stream) && a->mux.enabled == b->mux.enabled &&
	       a->mux.concurrency == b->mux.concurrency;
}

bool plan_balancer_equal(const etm_balancer_spec *a, const etm_balancer_spec *b)
{
	/* strategy_kind, not the text: no strategy and "failover" are one. */
	return str_eq(a->tag, b->tag) && strlist_eq(&a->outbounds, &b->outbounds) &&
	       a->strategy_kind == b->strategy_kind && a->probe_interval == b->probe_interval &&
	       a->probe_timeout == b->probe_timeout && a->rise == b->rise && a->fall == b->fall &&
	       a->retry == b->retry;
}

/* The listen address as bound: absent is the schema's default. */
static const char *listen_of(const etm_inbound_spec *in)
{
	return in->listen ? in->listen : "127.0.0.1";
}

bool plan_inbound_equal(const etm_inbound_spec *a, const etm_inbound_spec *b)
{
	return str_eq(a->tag, b->tag) && a->protocol == b->protocol &&
	       strcmp(listen_of(a), listen_of(b)) == 0 && a->port == b->port &&
	       a->sniffing == b->sniffing && settings_eq(&a->settings, &b->settings) &&
	       stream_eq(&a->stream, &b->stream);
}

static bool health_eq(const etm_lb_health_spec *a, const etm_lb_health_spec *b)
{
	return a->tcp_port == b->tcp_port && a->has_tcp_port == b->has_tcp_port &&
	       a->interval == b->interval && a->timeout == b->timeout && a->rise == b->rise &&
	       a->fall == b->fall && str_eq(a->udp_payload, b->udp_payload) &&
	       str_eq(a->udp_payload_hex, b->udp_payload_hex);
}

bool plan_cluster_equal(const etm_cluster_spec *a, const etm_cluster_spec *b)
{
	return str_eq(a->tag, b->tag) && strlist_eq(&a->backends, &b->backends) &&
	       a->selection == b->selection && a->affinity == b->affinity &&
	       etm_cluster_front_timeout(a) == etm_cluster_front_timeout(b) &&
	       etm_cluster_back_timeout(a) == etm_cluster_back_timeout(b) &&
	       a->responses == b->responses &&
	       a->requests == b->requests && a->max_flows_per_ip == b->max_flows_per_ip &&
	       a->max_flows_per_subnet == b->max_flows_per_subnet &&
	       a->subnet_prefix_v4 == b->subnet_prefix_v4 &&
	       a->subnet_prefix_v6 == b->subnet_prefix_v6 && a->proxy_protocol == b->proxy_protocol &&
	       a->maglev_size == b->maglev_size &&
	       a->reuse_upstream_sockets == b->reuse_upstream_sockets &&
	       a->has_health == b->has_health && health_eq(&a->health, &b->health);
}

static bool ports_eq(const etm_port_list *a, const etm_port_list *b)
{
	if (a->len != b->len)
		return false;
	for (size_t i = 0; i < a->len; i++)
		if (a->items[i].first != b->items[i].first || a->items[i].last != b->items[i].last)
			return false;
	return true;
}

static bool rule_eq(const etm_rule_spec *a, const etm_rule_spec *b)
{
	return str_eq(a->outbound, b->outbound) && strlist_eq(&a->domain, &b->domain) &&
	       strlist_eq(&a->domain_suffix, &b->domain_suffix) &&
	       strlist_eq(&a->domain_keyword, &b->domain_keyword) &&
	       strlist_eq(&a->domain_regex, &b->domain_regex) &&
	       strlist_eq(&a->geosite, &b->geosite) && strlist_eq(&a->cidr, &b->cidr) &&
	       strlist_eq(&a->geoip, &b->geoip) && ports_eq(&a->port, &b->port) &&
	       a->networks == b->networks && strlist_eq(&a->inbound_tag, &b->inbound_tag) &&
	       strlist_eq(&a->source_cidr, &b->source_cidr);
}

bool plan_route_equal(const etm_spec *a, const etm_spec *b)
{
	/* Without [route].default the first outbound is the default, so
	 * reordering the outbounds can change the route. */
	const etm_route_spec *ra = &a->route, *rb = &b->route;
	if (!(str_eq(etm_spec_default_tag(a), etm_spec_default_tag(b)) &&
	      str_eq(ra->geoip, rb->geoip) && str_eq(ra->geosite, rb->geosite) &&
	      ra->rules_len == rb->rules_len))
		return false;
	for (size_t i = 0; i < ra->rules_len; i++)
		if (!rule_eq(&ra->rules[i], &rb->rules[i]))
			return false;
	return true;
}

static bool dns_server_eq(const etm_dns_server_spec *a, const etm_dns_server_spec *b)
{
	return str_eq(a->tag, b->tag) && a->protocol == b->protocol &&
	       str_eq(a->address, b->address) && a->through_proxy == b->through_proxy &&
	       str_eq(a->server_name, b->server_name) && str_eq(a->ca, b->ca) &&
	       a->allow_insecure == b->allow_insecure && str_eq(a->path, b->path);
}

static bool dns_rule_eq(const etm_dns_rule_spec *a, const etm_dns_rule_spec *b)
{
	return str_eq(a->server, b->server) && strlist_eq(&a->domain, &b->domain) &&
	       strlist_eq(&a->domain_suffix, &b->domain_suffix) &&
	       strlist_eq(&a->domain_keyword, &b->domain_keyword) &&
	       strlist_eq(&a->domain_regex, &b->domain_regex) &&
	       strlist_eq(&a->geosite, &b->geosite);
}

bool plan_dns_equal(const etm_dns_spec *a, const etm_dns_spec *b)
{
	/* in order: the resolver tries the servers so, the rules decide so */
	if (!(strlist_eq(&a->servers, &b->servers) && a->server_len == b->server_len &&
	      a->rules_len == b->rules_len && a->hosts_len == b->hosts_len &&
	      str_eq(a->final, b->final) && a->cache_size == b->cache_size &&
	      a->prefetch == b->prefetch && a->timeout == b->timeout))
		return false;
	for (size_t i = 0; i < a->server_len; i++)
		if (!dns_server_eq(&a->server[i], &b->server[i]))
			return false;
	for (size_t i = 0; i < a->rules_len; i++)
		if (!dns_rule_eq(&a->rules[i], &b->rules[i]))
			return false;
	for (size_t i = 0; i < a->hosts_len; i++)
		if (!str_eq(a->hosts[i].name, b->hosts[i].name) ||
		    !strlist_eq(&a->hosts[i].address, &b->hosts[i].address))
			return false;
	return true;
}

/* [log] access unset is "off". */
static const char *access_of(const etm_spec *s) { return s->log_access ? s->log_access : "off"; }

bool plan_log_equal(const etm_spec *a, const etm_spec *b)
{
	return a->log_level == b->log_level && str_eq(access_of(a), access_of(b)) &&
	       a->log_access_end == b->log_access_end && a->log_format == b->log_format;
}

bool plan_policy_limits_equal(const etm_policy_spec *a, const etm_policy_spec *b)
{
	return a->handshake_timeout == b->handshake_timeout && a->idle_timeout == b->idle_timeout &&
	       a->max_connections_per_source == b->max_connections_per_source;
}

/* UDP for the protocols that listen on UDP, else TCP: a socket of one type
 * cannot serve the other. */
static bool listens_udp(const etm_inbound_spec *in)
{
	return in->protocol == ETM_PROTO_UDP_LB || in->protocol == ETM_PROTO_HYSTERIA2;
}

bool plan_inbound_same_socket(const etm_inbound_spec *a, const etm_inbound_spec *b)
{
	return listens_udp(a) == listens_udp(b) && strcmp(listen_of(a), listen_of(b)) == 0 &&
	       a->port == b->port;
}
