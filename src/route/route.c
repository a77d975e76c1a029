/* route.c - compiling a route config into slots and rules, and the first-match decision. */
#include "route/route.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "route/domset.h"
#include "route/geodata.h"
#include "route/ipset.h"

typedef struct geoip_ref {
	const ipset *set; /* borrowed from the table */
	bool invert;
} geoip_ref;

/* One compiled rule. A NULL set or a zero count means "no such matcher";
 * the rule matches when any matcher it has matches (seed 002, RouteRuleSpec). */
typedef struct rule {
	uint32_t slot;
	unsigned nets;         /* ROUTE_NET_* bits */
	route_port_range *ports; /* owned, sorted, merged */
	size_t nports;
	char **inbound; /* owned */
	size_t ninbound;
	ipset *cidr;      /* owned: the rule's cidr list */
	geoip_ref *ips;   /* owned array */
	size_t nips;
	ipset *source;    /* owned: source_cidr */
	domset *domains;  /* owned: domain, domain_suffix, domain_keyword, domain_regex */
	const domset **sites; /* owned array of borrowed sets */
	size_t nsites;
} rule;

struct route_table {
	char **tags; /* owned; slot i names tags[i] */
	size_t ntags;
	uint32_t default_slot;
	rule *rules; /* owned, in config order */
	size_t nrules;
	domset **sites; /* owned; one per distinct geosite code string */
	size_t nsites;
	ipset **ips; /* owned; one per distinct geoip code string */
	bool *ip_invert;
	size_t nips;
};

/* ---- a string -> index map for build time (tags, code strings) ---- */

typedef struct strmap {
	const char **keys; /* borrowed */
	uint32_t *vals;
	size_t cap;
} strmap;

static uint64_t str_hash(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
	return h ^ h >> 29;
}

/* Room for n keys at most half full. */
static int strmap_init(strmap *m, size_t n)
{
	size_t cap = 16;
	while (cap < 2 * n) {
		if (cap > SIZE_MAX / 4)
			return -1;
		cap *= 2;
	}
	m->cap = cap;
	m->keys = calloc(cap, sizeof *m->keys);
	m->vals = calloc(cap, sizeof *m->vals);
	return m->keys && m->vals ? 0 : -1;
}

static void strmap_free(strmap *m)
{
	free(m->keys);
	free(m->vals);
	*m = (strmap){0};
}

/* The index stored for key; when absent, stores next and returns it with
 * *added set. */
static uint32_t strmap_get(strmap *m, const char *key, uint32_t next, bool *added)
{
	size_t mask = m->cap - 1;
	for (size_t i = (size_t)str_hash(key) & mask;; i = (i + 1) & mask) {
		if (!m->keys[i]) {
			m->keys[i] = key;
			m->vals[i] = next;
			*added = true;
			return next;
		}
		if (strcmp(m->keys[i], key) == 0) {
			*added = false;
			return m->vals[i];
		}
	}
}

/* ---- freeing ---- */

static void rule_free(rule *r)
{
	free(r->ports);
	for (size_t i = 0; i < r->ninbound; i++)
		free(r->inbound[i]);
	free(r->inbound);
	ipset_del(r->cidr);
	free(r->ips);
	ipset_del(r->source);
	domset_del(r->domains);
	free(r->sites);
}

void route_table_free(route_table *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->nrules; i++)
		rule_free(&t->rules[i]);
	free(t->rules);
	for (size_t i = 0; i < t->ntags; i++)
		free(t->tags[i]);
	free(t->tags);
	for (size_t i = 0; i < t->nsites; i++)
		domset_del(t->sites[i]);
	free(t->sites);
	for (size_t i = 0; i < t->nips; i++)
		ipset_del(t->ips[i]);
	free(t->ips);
	free(t->ip_invert);
	free(t);
}

/* ---- building ---- */

#define NOMEM(err, size) route_fail(err, size, ROUTE_ERR_NOMEM)

/* Slots in first-appearance order over the rules, the default's last unless a
 * rule named it (seed 002, slot_of). */
static int build_slots(route_table *t, const route_config *cfg, const char *default_tag,
                       char *err, size_t err_size)
{
	strmap m = {0};
	int rc = 0;
	t->tags = calloc(cfg->nrules + 1, sizeof *t->tags);
	if (!t->tags || strmap_init(&m, cfg->nrules + 1) < 0) {
		rc = NOMEM(err, err_size);
		goto out;
	}
	for (size_t i = 0; i <= cfg->nrules; i++) {
		const char *tag = i < cfg->nrules ? cfg->rules[i].target : default_tag;
		if (!tag) {
			rc = route_fail(err, err_size, ROUTE_ERR_NO_OUTBOUND, i + 1);
			goto out;
		}
		bool added;
		uint32_t slot = strmap_get(&m, tag, (uint32_t)t->ntags, &added);
		if (added) {
			t->tags[t->ntags] = strdup(tag);
			if (!t->tags[t->ntags]) {
				rc = NOMEM(err, err_size);
				goto out;
			}
			t->ntags++;
		}
		if (i < cfg->nrules)
			t->rules[i].slot = slot;
		else
			t->default_slot = slot;
	}
out:
	strmap_free(&m);
	return rc;
}

/* Distinct code strings of one kind in rule order (seed 002: "每个不同的
 * 匹配字符串只加载一次"), and for each rule's entry its index among them. */
typedef struct codes {
	const char **list; /* borrowed from the config */
	size_t n;
	uint32_t **index; /* per rule, per entry of its list */
} codes;

static void codes_free(codes *c, size_t nrules)
{
	if (c->index)
		for (size_t i = 0; i < nrules; i++)
			free(c->index[i]);
	free(c->index);
	free(c->list);
	*c = (codes){0};
}

static int collect(codes *c, const route_config *cfg, bool geoip)
{
	size_t total = 0;
	for (size_t i = 0; i < cfg->nrules; i++)
		total += geoip ? cfg->rules[i].geoip.len : cfg->rules[i].geosite.len;
	strmap m = {0};
	c->list = calloc(total ? total : 1, sizeof *c->list);
	c->index = calloc(cfg->nrules ? cfg->nrules : 1, sizeof *c->index);
	if (!c->list || !c->index || strmap_init(&m, total) < 0)
		goto fail;
	for (size_t i = 0; i < cfg->nrules; i++) {
		const route_strs *l = geoip ? &cfg->rules[i].geoip : &cfg->rules[i].geosite;
		if (l->len == 0)
			continue;
		c->index[i] = calloc(l->len, sizeof(uint32_t));
		if (!c->index[i])
			goto fail;
		for (size_t j = 0; j < l->len; j++) {
			bool added;
			c->index[i][j] = strmap_get(&m, l->items[j], (uint32_t)c->n, &added);
			if (added)
				c->list[c->n++] = l->items[j];
		}
	}
	strmap_free(&m);
	return 0;
fail:
	strmap_free(&m);
	return -1;
}

static int load_sites(route_table *t, const route_config *cfg, const codes *c, char *err,
                      size_t err_size)
{
	if (c->n == 0)
		return 0;
	if (!cfg->geosite)
		return route_fail(err, err_size, ROUTE_ERR_NO_GEOSITE_FILE);
	uint8_t *buf;
	size_t len;
	int rc = geodata_read_file(cfg->geosite, "geosite", &buf, &len, err, err_size);
	if (rc < 0)
		return rc;
	t->sites = calloc(c->n, sizeof *t->sites);
	if (!t->sites) {
		free(buf);
		return NOMEM(err, err_size);
	}
	rc = geodata_sites(buf, len, c->list, c->n, t->sites, err, err_size);
	free(buf);
	if (rc == 0)
		t->nsites = c->n;
	return rc;
}

static int load_ips(route_table *t, const route_config *cfg, const codes *c, char *err,
                    size_t err_size)
{
	if (c->n == 0)
		return 0;
	if (!cfg->geoip)
		return route_fail(err, err_size, ROUTE_ERR_NO_GEOIP_FILE);
	uint8_t *buf;
	size_t len;
	int rc = geodata_read_file(cfg->geoip, "geoip", &buf, &len, err, err_size);
	if (rc < 0)
		return rc;
	t->ips = calloc(c->n, sizeof *t->ips);
	t->ip_invert = calloc(c->n, sizeof *t->ip_invert);
	if (!t->ips || !t->ip_invert) {
		free(buf);
		return NOMEM(err, err_size);
	}
	rc = geodata_ips(buf, len, c->list, c->n, t->ips, t->ip_invert, err, err_size);
	free(buf);
	if (rc == 0)
		t->nips = c->n;
	return rc;
}

static int port_cmp(const void *a, const void *b)
{
	const route_port_range *x = a, *y = b;
	return (x->first > y->first) - (x->first < y->first);
}

static int compile_ports(rule *r, const route_ports *l)
{
	if (l->len == 0)
		return 0;
	r->ports = malloc(l->len * sizeof *r->ports);
	if (!r->ports)
		return -1;
	memcpy(r->ports, l->items, l->len * sizeof *r->ports);
	qsort(r->ports, l->len, sizeof *r->ports, port_cmp);
	size_t out = 0;
	for (size_t i = 0; i < l->len; i++) {
		route_port_range p = r->ports[i];
		if (p.first > p.last)
			continue; /* an empty range; the lowering never makes one */
		if (out > 0 && p.first <= (uint32_t)r->ports[out - 1].last + 1) {
			if (p.last > r->ports[out - 1].last)
				r->ports[out - 1].last = p.last;
		} else {
			r->ports[out++] = p;
		}
	}
	r->nports = out;
	return 0;
}

static int compile_cidrs(ipset **out, const route_strs *l, char *err, size_t err_size)
{
	if (l->len == 0)
		return 0;
	ipset *s = ipset_new();
	if (!s)
		return NOMEM(err, err_size);
	for (size_t i = 0; i < l->len; i++) {
		int r = ipset_add_text(s, l->items[i]);
		if (r < 0) {
			ipset_del(s);
			return r == -1 ? NOMEM(err, err_size)
			               : route_fail(err, err_size, ROUTE_ERR_BAD_CIDR, l->items[i]);
		}
	}
	ipset_seal(s);
	*out = s;
	return 0;
}

static int compile_domains(rule *r, const route_rule_config *rs, char *err, size_t err_size)
{
	if (rs->domain.len + rs->domain_suffix.len + rs->domain_keyword.len +
	        rs->domain_regex.len ==
	    0)
		return 0;
	domset *s = r->domains = domset_new();
	if (!s)
		return NOMEM(err, err_size);
	for (size_t i = 0; i < rs->domain.len; i++)
		if (domset_add_full(s, rs->domain.items[i], strlen(rs->domain.items[i])) < 0)
			return NOMEM(err, err_size);
	for (size_t i = 0; i < rs->domain_suffix.len; i++) {
		const char *v = rs->domain_suffix.items[i];
		if (domset_add_suffix(s, v, strlen(v)) < 0)
			return NOMEM(err, err_size);
	}
	for (size_t i = 0; i < rs->domain_keyword.len; i++) {
		const char *v = rs->domain_keyword.items[i];
		if (domset_add_keyword(s, v, strlen(v)) < 0)
			return NOMEM(err, err_size);
	}
	for (size_t i = 0; i < rs->domain_regex.len; i++) {
		char reason[256];
		const char *v = rs->domain_regex.items[i];
		int rc = domset_add_regex(s, v, reason, sizeof reason);
		if (rc == -2)
			return route_fail(err, err_size, ROUTE_ERR_REGEX, v, reason);
		if (rc < 0)
			return NOMEM(err, err_size);
	}
	return domset_seal(s) < 0 ? NOMEM(err, err_size) : 0;
}

static int compile_rule(route_table *t, size_t i, const route_rule_config *rs, const codes *sites,
                        const codes *ips, char *err, size_t err_size)
{
	rule *r = &t->rules[i];
	r->nets = rs->networks & (ROUTE_NET_TCP | ROUTE_NET_UDP);
	if (compile_ports(r, &rs->port) < 0)
		return NOMEM(err, err_size);

	if (rs->inbound_tag.len) {
		r->inbound = calloc(rs->inbound_tag.len, sizeof *r->inbound);
		if (!r->inbound)
			return NOMEM(err, err_size);
		for (; r->ninbound < rs->inbound_tag.len; r->ninbound++) {
			r->inbound[r->ninbound] = strdup(rs->inbound_tag.items[r->ninbound]);
			if (!r->inbound[r->ninbound])
				return NOMEM(err, err_size);
		}
	}

	int rc = compile_cidrs(&r->cidr, &rs->cidr, err, err_size);
	if (rc == 0)
		rc = compile_cidrs(&r->source, &rs->source_cidr, err, err_size);
	if (rc == 0)
		rc = compile_domains(r, rs, err, err_size);
	if (rc < 0)
		return rc;

	if (rs->geosite.len) {
		r->sites = calloc(rs->geosite.len, sizeof *r->sites);
		if (!r->sites)
			return NOMEM(err, err_size);
		for (; r->nsites < rs->geosite.len; r->nsites++)
			r->sites[r->nsites] = t->sites[sites->index[i][r->nsites]];
	}
	if (rs->geoip.len) {
		r->ips = calloc(rs->geoip.len, sizeof *r->ips);
		if (!r->ips)
			return NOMEM(err, err_size);
		for (; r->nips < rs->geoip.len; r->nips++) {
			uint32_t k = ips->index[i][r->nips];
			r->ips[r->nips] = (geoip_ref){t->ips[k], t->ip_invert[k]};
		}
	}
	return 0;
}

int route_table_build(const route_config *cfg, route_table **out, char *err, size_t err_size)
{
	const char *default_tag = cfg->default_tag;
	*out = NULL;
	if (!default_tag)
		return route_fail(err, err_size, ROUTE_ERR_NO_DEFAULT);
	/* Rule ids are int32_t with -1 for the default (seed 002: RuleId). */
	if (cfg->nrules > INT32_MAX)
		return route_fail(err, err_size, ROUTE_ERR_TOO_MANY_RULES, (long)INT32_MAX);

	codes sites = {0}, ips = {0};
	int rc;
	route_table *t = calloc(1, sizeof *t);
	if (!t || !(t->rules = calloc(cfg->nrules ? cfg->nrules : 1, sizeof(rule)))) {
		rc = NOMEM(err, err_size);
		goto fail;
	}
	t->nrules = cfg->nrules;
	rc = build_slots(t, cfg, default_tag, err, err_size);
	if (rc < 0)
		goto fail;

	/* Geosite before geoip, so a config failing both reports geosite (seed 002,
	 * build_geo_data). */
	if (collect(&sites, cfg, false) < 0 || collect(&ips, cfg, true) < 0) {
		rc = NOMEM(err, err_size);
		goto fail;
	}
	rc = load_sites(t, cfg, &sites, err, err_size);
	if (rc == 0)
		rc = load_ips(t, cfg, &ips, err, err_size);
	for (size_t i = 0; i < cfg->nrules && rc == 0; i++)
		rc = compile_rule(t, i, &cfg->rules[i], &sites, &ips, err, err_size);
	if (rc < 0)
		goto fail;

	codes_free(&sites, cfg->nrules);
	codes_free(&ips, cfg->nrules);
	*out = t;
	return 0;
fail:
	codes_free(&sites, cfg->nrules);
	codes_free(&ips, cfg->nrules);
	route_table_free(t);
	return rc;
}

size_t route_table_slots(const route_table *t) { return t->ntags; }

const char *route_table_slot_tag(const route_table *t, size_t slot)
{
	return slot < t->ntags ? t->tags[slot] : NULL;
}

int route_regex_check(const char *pattern, char *err, size_t err_size)
{
	char reason[256];
	if (domset_regex_check(pattern, reason, sizeof reason) == 0)
		return 0;
	route_msg_format(err, err_size, ROUTE_ERR_REGEX, pattern, reason);
	return -1;
}

/* ---- deciding ---- */

/* What one decision has worked out about its target so far: each part is
 * computed the first time a rule needs it, then reused by every later rule. */
typedef struct view {
	const route_target *t;
	const addr_dest *dest;
	ipset_addr dst;
	ipset_addr src;
	bool src_ready;
	int nnames; /* -1 until the candidates are prepared */
	domset_name names[2];
} view;

static void prepare_names(view *v)
{
	v->nnames = 0;
	if (v->dest->kind == ADDR_DOMAIN &&
	    domset_name_prepare(&v->names[0], v->dest->u.domain.name, v->dest->u.domain.len))
		v->nnames = 1;
	const char *sn = v->t->sniffed;
	if (!sn)
		return;
	domset_name *n = &v->names[v->nnames];
	/* Longer than DOMSET_NAME_MAX + a trailing dot: no candidate. */
	size_t len = strnlen(sn, DOMSET_NAME_MAX + 2);
	if (!domset_name_prepare(n, sn, len))
		return;
	if (v->nnames == 1 && n->len == v->names[0].len &&
	    memcmp(n->name, v->names[0].name, n->len) == 0)
		return; /* the same name twice: testing it once is enough */
	v->nnames++;
}

static bool domains_match(const rule *r, view *v)
{
	if (!r->domains && r->nsites == 0)
		return false;
	if (v->nnames < 0)
		prepare_names(v);
	for (int k = 0; k < v->nnames; k++) {
		if (r->domains && domset_match(r->domains, &v->names[k]))
			return true;
		for (size_t i = 0; i < r->nsites; i++)
			if (domset_match(r->sites[i], &v->names[k]))
				return true;
	}
	return false;
}

/* Cheap matchers first; the order does not change the answer, only how soon
 * a matching rule is found to match. */
static bool rule_matches(const rule *r, view *v)
{
	const addr_dest *d = v->dest;
	unsigned net = d->network == ADDR_UDP ? ROUTE_NET_UDP : ROUTE_NET_TCP;
	if (r->nets & net)
		return true;
	for (size_t i = 0; i < r->nports && r->ports[i].first <= d->port; i++)
		if (d->port <= r->ports[i].last)
			return true;
	if (v->t->inbound_tag)
		for (size_t i = 0; i < r->ninbound; i++)
			if (strcmp(r->inbound[i], v->t->inbound_tag) == 0)
				return true;
	if (r->cidr && ipset_has(r->cidr, &v->dst))
		return true;
	/* A domain destination has no address: geoip never matches it, inverted
	 * or not (family 0 is skipped before the inversion). */
	if (v->dst.family)
		for (size_t i = 0; i < r->nips; i++)
			if (ipset_has(r->ips[i].set, &v->dst) != r->ips[i].invert)
				return true;
	if (r->source) {
		if (!v->src_ready) {
			ipset_addr_from_sockaddr(&v->src, v->t->source);
			v->src_ready = true;
		}
		if (ipset_has(r->source, &v->src))
			return true;
	}
	return domains_match(r, v);
}

route_decision route_table_decide(const route_table *t, const route_target *target)
{
	static const addr_dest none; /* a zeroed destination: nothing to match */
	/* Not zero-initialised as a whole: names[] is 2.6 KiB that is written
	 * only when a domain matcher asks for it. */
	view v;
	v.t = target;
	v.dest = target->dest ? target->dest : &none;
	v.src_ready = false;
	v.nnames = -1;
	ipset_addr_from_dest(&v.dst, v.dest);
	for (size_t i = 0; i < t->nrules; i++)
		if (rule_matches(&t->rules[i], &v))
			return (route_decision){t->rules[i].slot, (int32_t)i};
	return (route_decision){t->default_slot, -1};
}
