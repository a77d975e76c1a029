/* build_route.c - lowering the spec's [route] into a route_config: the only route code that reads the spec. */
#include "supervisor/build_route.h"

#include <stdlib.h>
#include <string.h>

#include "route/route_msg.h"

static route_strs strs(const etm_strlist *l)
{
	return (route_strs){(const char *const *)l->items, l->len};
}

int build_route(const etm_spec *spec, route_config *out, char *err, size_t err_size)
{
	const etm_route_spec *r = &spec->route;
	memset(out, 0, sizeof *out);
	out->default_tag = etm_spec_default_tag(spec);
	out->geoip = r->geoip;
	out->geosite = r->geosite;
	route_rule_config *rules = calloc(r->rules_len ? r->rules_len : 1, sizeof *rules);
	if (!rules)
		goto nomem;
	out->rules = rules;
	for (size_t i = 0; i < r->rules_len; i++) {
		const etm_rule_spec *rs = &r->rules[i];
		route_rule_config *rc = &rules[i];
		rc->target = rs->outbound;
		rc->domain = strs(&rs->domain);
		rc->domain_suffix = strs(&rs->domain_suffix);
		rc->domain_keyword = strs(&rs->domain_keyword);
		rc->domain_regex = strs(&rs->domain_regex);
		rc->geosite = strs(&rs->geosite);
		rc->cidr = strs(&rs->cidr);
		rc->geoip = strs(&rs->geoip);
		rc->networks = (rs->networks & ETM_RULE_NET_TCP ? ROUTE_NET_TCP : 0u) |
		               (rs->networks & ETM_RULE_NET_UDP ? ROUTE_NET_UDP : 0u);
		rc->inbound_tag = strs(&rs->inbound_tag);
		rc->source_cidr = strs(&rs->source_cidr);
		out->nrules = i + 1;
		if (rs->port.len) {
			route_port_range *p = calloc(rs->port.len, sizeof *p);
			if (!p)
				goto nomem;
			for (size_t k = 0; k < rs->port.len; k++)
				p[k] = (route_port_range){rs->port.items[k].first, rs->port.items[k].last};
			rc->port = (route_ports){p, rs->port.len};
		}
	}
	out->nrules = r->rules_len;
	return 0;
nomem:
	(void)route_fail(err, err_size, ROUTE_ERR_NOMEM);
	build_route_free(out);
	return -1;
}

void build_route_free(route_config *cfg)
{
	for (size_t i = 0; cfg->rules && i < cfg->nrules; i++)
		free((void *)cfg->rules[i].port.items);
	free((void *)cfg->rules);
	cfg->rules = NULL;
	cfg->nrules = 0;
}

int build_route_table(const etm_spec *spec, route_table **out, char *err, size_t err_size)
{
	*out = NULL;
	route_config cfg;
	if (build_route(spec, &cfg, err, err_size))
		return -1;
	int rc = route_table_build(&cfg, out, err, err_size);
	build_route_free(&cfg);
	return rc ? -1 : 0;
}
