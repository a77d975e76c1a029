/* api_view.c - what the admin API shows of a spec (outbounds, balancers, rules in Clash's words, inbounds), copied before the engine takes the spec over. */
#include "app/api.h"
#include "app/api_json.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The name GET /rules gives each matcher kind: mihomo's rule type names
 * where one exists (DOMAIN-SUFFIX is "DomainSuffix" in its API), ours
 * otherwise. */
static const char *const KIND_DOMAIN = "Domain", *const KIND_SUFFIX = "DomainSuffix",
			 *const KIND_KEYWORD = "DomainKeyword", *const KIND_REGEX = "DomainRegex",
			 *const KIND_GEOSITE = "GeoSite", *const KIND_CIDR = "IPCIDR",
			 *const KIND_GEOIP = "GeoIP", *const KIND_PORT = "DstPort",
			 *const KIND_NETWORK = "Network", *const KIND_INBOUND = "InName",
			 *const KIND_SOURCE = "SrcIPCIDR", *const KIND_AND = "AND";

static bool ip_is_loopback(const char *s)
{
	struct in_addr a4;
	struct in6_addr a6;
	if (!s)
		return false;
	if (inet_pton(AF_INET, s, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	if (inet_pton(AF_INET6, s, &a6) == 1)
		return IN6_IS_ADDR_LOOPBACK(&a6) ||
		       (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
	return false;
}

static int dup(char **out, const char *s)
{
	*out = NULL;
	if (!s)
		return 0;
	*out = strdup(s);
	return *out ? 0 : -1;
}

static int add_list(api_buf *b, const etm_strlist *l)
{
	for (size_t i = 0; i < l->len; i++)
		if ((i && api_json_puts(b, ",")) || api_json_puts(b, l->items[i]))
			return -1;
	return 0;
}

/* The kinds a rule uses, in the order docs/routing.md lists them, each
 * with its values written by add_kind. */
static size_t kinds_of(const etm_rule_spec *r, const char **kinds)
{
	size_t n = 0;
	const struct {
		const etm_strlist *l;
		const char *name;
	} lists[] = {{&r->domain, KIND_DOMAIN},
	             {&r->domain_suffix, KIND_SUFFIX},
	             {&r->domain_keyword, KIND_KEYWORD},
	             {&r->domain_regex, KIND_REGEX},
	             {&r->geosite, KIND_GEOSITE},
	             {&r->cidr, KIND_CIDR},
	             {&r->geoip, KIND_GEOIP}};
	for (size_t i = 0; i < sizeof lists / sizeof *lists; i++)
		if (lists[i].l->len)
			kinds[n++] = lists[i].name;
	if (r->port.len)
		kinds[n++] = KIND_PORT;
	if (r->networks)
		kinds[n++] = KIND_NETWORK;
	if (r->inbound_tag.len)
		kinds[n++] = KIND_INBOUND;
	if (r->source_cidr.len)
		kinds[n++] = KIND_SOURCE;
	return n;
}

static int add_kind(api_buf *b, const etm_rule_spec *r, const char *kind)
{
	if (kind == KIND_DOMAIN)
		return add_list(b, &r->domain);
	if (kind == KIND_SUFFIX)
		return add_list(b, &r->domain_suffix);
	if (kind == KIND_KEYWORD)
		return add_list(b, &r->domain_keyword);
	if (kind == KIND_REGEX)
		return add_list(b, &r->domain_regex);
	if (kind == KIND_GEOSITE)
		return add_list(b, &r->geosite);
	if (kind == KIND_CIDR)
		return add_list(b, &r->cidr);
	if (kind == KIND_GEOIP)
		return add_list(b, &r->geoip);
	if (kind == KIND_INBOUND)
		return add_list(b, &r->inbound_tag);
	if (kind == KIND_SOURCE)
		return add_list(b, &r->source_cidr);
	if (kind == KIND_NETWORK) {
		bool tcp = r->networks & ETM_RULE_NET_TCP, udp = r->networks & ETM_RULE_NET_UDP;
		return api_json_puts(b, tcp && udp ? "tcp,udp" : tcp ? "tcp" : "udp");
	}
	for (size_t i = 0; i < r->port.len; i++) {
		char t[16];
		const etm_port_range *p = &r->port.items[i];
		if (p->first == p->last)
			snprintf(t, sizeof t, "%u", p->first);
		else
			snprintf(t, sizeof t, "%u-%u", p->first, p->last);
		if ((i && api_json_puts(b, ",")) || api_json_puts(b, t))
			return -1;
	}
	return 0;
}

/* One kind: its values, comma-separated ("DomainSuffix", "a.com,b.com").
 * Several: "AND" and "((Kind,values),(Kind,values))", as mihomo writes a
 * logic rule's payload. */
static int rule_init(api_rule *out, const etm_rule_spec *r)
{
	const char *kinds[16];
	size_t n = kinds_of(r, kinds);
	api_buf b = {0};
	int rc = api_json_puts(&b, "");
	if (n == 1) {
		rc |= add_kind(&b, r, kinds[0]);
	} else {
		rc |= api_json_puts(&b, "(");
		for (size_t i = 0; i < n; i++)
			rc |= (i ? api_json_puts(&b, ",(") : api_json_puts(&b, "(")) | api_json_puts(&b, kinds[i]) |
			      api_json_puts(&b, ",") | add_kind(&b, r, kinds[i]) | api_json_puts(&b, ")");
		rc |= api_json_puts(&b, ")");
	}
	out->payload = b.p;
	if (rc || b.failed)
		return -1;
	if (dup(&out->type, n == 1 ? kinds[0] : KIND_AND) || dup(&out->proxy, r->outbound))
		return -1;
	return 0;
}

void api_view_free(api_view *v)
{
	for (size_t i = 0; i < v->n_outbounds; i++) {
		free(v->outbounds[i].tag);
		free(v->outbounds[i].server);
	}
	for (size_t i = 0; i < v->n_balancers; i++) {
		free(v->balancers[i].tag);
		for (size_t j = 0; j < v->balancers[i].n_members; j++)
			free(v->balancers[i].members[j]);
		free(v->balancers[i].members);
	}
	for (size_t i = 0; i < v->n_rules; i++) {
		free(v->rules[i].type);
		free(v->rules[i].payload);
		free(v->rules[i].proxy);
	}
	for (size_t i = 0; i < v->n_inbounds; i++)
		free(v->inbounds[i].tag);
	free(v->outbounds);
	free(v->balancers);
	free(v->rules);
	free(v->inbounds);
	free(v->default_tag);
	free(v->secret);
	*v = (api_view){0};
}

int api_view_init(api_view *v, const etm_spec *s)
{
	*v = (api_view){0};
	v->outbounds = calloc(s->outbounds_len + 1, sizeof *v->outbounds);
	v->balancers = calloc(s->balancers_len + 1, sizeof *v->balancers);
	v->rules = calloc(s->route.rules_len + 1, sizeof *v->rules);
	v->inbounds = calloc(s->inbounds_len + 1, sizeof *v->inbounds);
	if (!v->outbounds || !v->balancers || !v->rules || !v->inbounds)
		goto fail;
	for (size_t i = 0; i < s->outbounds_len; i++, v->n_outbounds++) {
		const etm_outbound_spec *o = &s->outbounds[i];
		api_outbound *a = &v->outbounds[i];
		a->protocol = o->protocol;
		a->port = o->port;
		if (dup(&a->tag, o->tag) || dup(&a->server, o->server))
			goto fail_counted;
	}
	for (size_t i = 0; i < s->balancers_len; i++, v->n_balancers++) {
		const etm_balancer_spec *b = &s->balancers[i];
		api_balancer *a = &v->balancers[i];
		a->strategy = b->strategy_kind;
		a->members = calloc(b->outbounds.len + 1, sizeof *a->members);
		if (dup(&a->tag, b->tag) || !a->members)
			goto fail_counted;
		for (; a->n_members < b->outbounds.len; a->n_members++)
			if (dup(&a->members[a->n_members], b->outbounds.items[a->n_members]))
				goto fail_counted;
	}
	for (size_t i = 0; i < s->route.rules_len; i++, v->n_rules++)
		if (rule_init(&v->rules[i], &s->route.rules[i]))
			goto fail_counted;
	for (size_t i = 0; i < s->inbounds_len; i++, v->n_inbounds++) {
		v->inbounds[i].protocol = s->inbounds[i].protocol;
		v->inbounds[i].loopback = ip_is_loopback(s->inbounds[i].listen);
		if (dup(&v->inbounds[i].tag, s->inbounds[i].tag))
			goto fail_counted;
	}
	if (dup(&v->default_tag, etm_spec_default_tag(s)) || dup(&v->secret, s->api_secret))
		goto fail;
	return 0;
fail_counted:
	/* the entry being filled is counted, so that its parts are freed */
	if (v->outbounds && v->n_outbounds < s->outbounds_len && v->outbounds[v->n_outbounds].tag)
		v->n_outbounds++;
	if (v->balancers && v->n_balancers < s->balancers_len &&
	    (v->balancers[v->n_balancers].tag || v->balancers[v->n_balancers].members))
		v->n_balancers++;
	if (v->rules && v->n_rules < s->route.rules_len)
		v->n_rules++;
	if (v->inbounds && v->n_inbounds < s->inbounds_len)
		v->n_inbounds++;
fail:
	api_view_free(v);
	return -1;
}
