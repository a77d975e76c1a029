/* build_dns.c - [[dns.server]], [[dns.rule]] and [[dns.host]] built into a dns_svc_conf: upstream addresses and TLS contexts, the rules as a route table over server tags, the hosts. */
#include "supervisor/build_dns.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "route/route.h"

enum { MSG_NO_MEMORY, MSG_SERVER, MSG_RULES, MSG_ADDRESS, MSG_COUNT_ };
static const char *const msgs[MSG_COUNT_] = {
	[MSG_NO_MEMORY] = "dns: out of memory",
	[MSG_SERVER] = "dns: server %s: %s",
	[MSG_RULES] = "dns: %s",
	[MSG_ADDRESS] = "dns: server %s: address \"%s\" is not an IP address with an optional port",
};

/* The rules: a route table whose slots are server tags, and the upstream
 * each slot is. */
typedef struct dns_rules {
	route_table *t;
	size_t *slot_up;
} dns_rules;

static size_t pick(const void *rules, const char *name)
{
	const dns_rules *r = rules;
	/* a name no domain matcher can take (the root) goes to the default */
	addr_dest d = {.kind = ADDR_IPV4};
	if (addr_dest_set_domain(&d, name, strlen(name), DNS_PORT))
		d = (addr_dest){.kind = ADDR_IPV4};
	d.network = ADDR_TCP;
	d.port = DNS_PORT;
	route_decision dec = route_table_decide(r->t, &(route_target){.dest = &d});
	return r->slot_up[dec.slot];
}

static void rules_free(void *rules)
{
	dns_rules *r = rules;
	if (!r)
		return;
	route_table_free(r->t);
	free(r->slot_up);
	free(r);
}

/* "ip", "ip:port", "[v6]", "[v6]:port" or a bare v6 address (checked by
 * etm_spec_check already). */
static int parse_address(const char *s, uint16_t def_port, addr_dest *d)
{
	char host[64];
	const char *port = NULL;
	*d = (addr_dest){.network = ADDR_TCP, .port = def_port};
	if (s[0] == '[') {
		const char *close = strchr(s, ']');
		if (!close || (size_t)(close - s - 1) >= sizeof host)
			return -1;
		memcpy(host, s + 1, (size_t)(close - s - 1));
		host[close - s - 1] = '\0';
		if (close[1] == ':')
			port = close + 2;
	} else if (strchr(s, ':') && strchr(s, ':') == strrchr(s, ':')) {
		const char *colon = strchr(s, ':');
		if ((size_t)(colon - s) >= sizeof host)
			return -1;
		memcpy(host, s, (size_t)(colon - s));
		host[colon - s] = '\0';
		port = colon + 1;
	} else {
		snprintf(host, sizeof host, "%s", s);
	}
	if (inet_pton(AF_INET, host, d->u.v4) == 1)
		d->kind = ADDR_IPV4;
	else if (inet_pton(AF_INET6, host, d->u.v6) == 1)
		d->kind = ADDR_IPV6;
	else
		return -1;
	if (port)
		d->port = (uint16_t)strtoul(port, NULL, 10);
	return 0;
}

static const uint16_t default_ports[] = {
	[ETM_DNS_UDP] = 53, [ETM_DNS_TCP] = 53, [ETM_DNS_TLS] = 853, [ETM_DNS_HTTPS] = 443,
};

static const dns_up_proto protos[] = {
	[ETM_DNS_UDP] = DNS_UP_UDP, [ETM_DNS_TCP] = DNS_UP_TCP, [ETM_DNS_TLS] = DNS_UP_TLS,
	[ETM_DNS_HTTPS] = DNS_UP_HTTPS,
};

static int build_upstream(const etm_dns_server_spec *v, dns_upstream_conf *u, char *err,
                          size_t err_size)
{
	u->proto = protos[v->protocol];
	u->through_proxy = v->through_proxy;
	if (!(u->tag = strdup(v->tag))) {
		snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
		return -1;
	}
	if (parse_address(v->address, default_ports[v->protocol], &u->server)) {
		/* etm_spec_check refuses it first; a spec built past it lands here */
		snprintf(err, err_size, msgs[MSG_ADDRESS], v->tag, v->address);
		return -1;
	}
	if (u->proto != DNS_UP_TLS && u->proto != DNS_UP_HTTPS)
		return 0;
	char ip[INET6_ADDRSTRLEN];
	if (u->server.kind == ADDR_IPV4)
		inet_ntop(AF_INET, u->server.u.v4, ip, sizeof ip);
	else
		inet_ntop(AF_INET6, u->server.u.v6, ip, sizeof ip);
	/* A name is verified and sent; without one the address is checked
	 * against the certificate's IP SANs (tls.h) and not sent. */
	const char *name = v->server_name ? v->server_name : ip;
	char tls_err[256];
	u->tls = tls_client_ctx_new(&(tls_client_config){.server_name = name,
	                                                 .allow_insecure = v->allow_insecure,
	                                                 .ca_file = v->ca},
	                            tls_err, sizeof tls_err);
	if (!u->tls) {
		snprintf(err, err_size, msgs[MSG_SERVER], v->tag, tls_err);
		return -1;
	}
	u->server_name = strdup(name);
	if (u->proto == DNS_UP_HTTPS) {
		if (v->server_name)
			u->host = strdup(v->server_name);
		else if (u->server.kind == ADDR_IPV6 && (u->host = malloc(strlen(ip) + 3)))
			snprintf(u->host, strlen(ip) + 3, "[%s]", ip);
		else
			u->host = strdup(ip);
		u->path = strdup(v->path ? v->path : "/dns-query");
	}
	if (!u->server_name || (u->proto == DNS_UP_HTTPS && (!u->host || !u->path))) {
		snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
		return -1;
	}
	return 0;
}

#define STRS(l) ((route_strs){.items = (const char *const *)(l).items, .len = (l).len})

static int build_rules(const etm_spec *spec, dns_svc_conf *c, char *err, size_t err_size)
{
	const etm_dns_spec *d = &spec->dns;
	dns_rules *r = calloc(1, sizeof *r);
	route_rule_config *rc = calloc(d->rules_len ? d->rules_len : 1, sizeof *rc);
	if (!r || !rc) {
		free(r);
		free(rc);
		snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
		return -1;
	}
	for (size_t i = 0; i < d->rules_len; i++) {
		const etm_dns_rule_spec *s = &d->rules[i];
		rc[i] = (route_rule_config){
			.target = s->server,
			.domain = STRS(s->domain),
			.domain_suffix = STRS(s->domain_suffix),
			.domain_keyword = STRS(s->domain_keyword),
			.domain_regex = STRS(s->domain_regex),
			.geosite = STRS(s->geosite),
		};
	}
	route_config cfg = {
		.default_tag = d->final ? d->final : d->server[0].tag,
		.geosite = spec->route.geosite,
		.rules = rc,
		.nrules = d->rules_len,
	};
	char why[256];
	int rc_build = route_table_build(&cfg, &r->t, why, sizeof why);
	free(rc);
	if (rc_build) {
		free(r);
		snprintf(err, err_size, msgs[MSG_RULES], why);
		return -1;
	}
	size_t n = route_table_slots(r->t);
	if (!(r->slot_up = calloc(n, sizeof *r->slot_up))) {
		rules_free(r);
		snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
		return -1;
	}
	for (size_t i = 0; i < n; i++)
		for (size_t k = 0; k < c->n_ups; k++)
			if (strcmp(route_table_slot_tag(r->t, i), c->ups[k].tag) == 0)
				r->slot_up[i] = k;
	c->rules = r;
	c->pick = pick;
	c->rules_free = rules_free;
	return 0;
}

static int build_hosts(const etm_dns_spec *d, dns_svc_conf *c, char *err, size_t err_size)
{
	if (!d->hosts_len)
		return 0;
	if (!(c->hosts = calloc(d->hosts_len, sizeof *c->hosts))) {
		snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
		return -1;
	}
	for (size_t i = 0; i < d->hosts_len; i++) {
		const etm_dns_host_spec *h = &d->hosts[i];
		dns_host *o = &c->hosts[c->n_hosts++];
		size_t len = strlen(h->name);
		if (len && h->name[len - 1] == '.')
			len--;
		if (!(o->name = strndup(h->name, len))) {
			snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
			return -1;
		}
		for (char *p = o->name; *p; p++)
			*p = (char)tolower((unsigned char)*p);
		for (size_t k = 0; k < h->address.len && o->n < DNS_MAX_ADDRS; k++) {
			struct sockaddr_storage *ss = &o->addrs[o->n];
			struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
			struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
			if (inet_pton(AF_INET, h->address.items[k], &v4->sin_addr) == 1) {
				v4->sin_family = AF_INET;
				o->n++;
			} else if (inet_pton(AF_INET6, h->address.items[k], &v6->sin6_addr) == 1) {
				v6->sin6_family = AF_INET6;
				o->n++;
			}
		}
	}
	return 0;
}

int build_dns(const etm_spec *spec, dns_svc_conf **out, char *err, size_t err_size)
{
	const etm_dns_spec *d = &spec->dns;
	*out = NULL;
	if (d->server_len == 0)
		return 0;
	dns_svc_conf *c = dns_svc_conf_new();
	if (!c || !(c->ups = calloc(d->server_len, sizeof *c->ups))) {
		dns_svc_conf_unref(c);
		snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
		return -1;
	}
	c->prefetch = d->prefetch;
	c->timeout_ms = (d->timeout ? d->timeout : ETM_DEFAULT_DNS_TIMEOUT) * 1000;
	for (size_t i = 0; i < d->server_len; i++) {
		c->n_ups = i + 1;
		if (build_upstream(&d->server[i], &c->ups[i], err, err_size))
			goto fail;
	}
	if (build_rules(spec, c, err, err_size) || build_hosts(d, c, err, err_size))
		goto fail;
	if (d->cache_size && !(c->cache = dns_answers_new(d->cache_size))) {
		snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
		goto fail;
	}
	*out = c;
	return 0;
fail:
	dns_svc_conf_unref(c);
	return -1;
}
