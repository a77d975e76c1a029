/* plan.c - the hot-reload planner: the plan itself, the version registry, the drain policy of an outbound and the log lines. */
#include "supervisor/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/plan_equal.h"

/* The catalogue of the lines a commit logs from a plan. */
enum { MSG_APPLIED, MSG_NO_CHANGES, MSG_CHANGED, MSG_RUNTIME, MSG_COUNT_ };
static const char *const msgs[MSG_COUNT_] = {
	/* seed 002, word for word */
	[MSG_APPLIED] = "applied: %zu built, %zu reused, %zu swapped, %zu drained",
	/* seed 003, word for word */
	[MSG_NO_CHANGES] = "config reload: no changes",
	[MSG_CHANGED] = "config reload: changed ",
	[MSG_RUNTIME] = "runtime (at the next start)",
};

static const char *const kind_names[PLAN_KIND_COUNT_] = {
	[PLAN_INBOUND] = "inbounds", [PLAN_OUTBOUND] = "outbounds", [PLAN_BALANCER] = "balancers",
	[PLAN_CLUSTER] = "clusters", [PLAN_ROUTE] = "route",         [PLAN_DNS] = "dns",
	[PLAN_LOG] = "log",
};

const char *plan_kind_name(plan_kind k)
{
	return (unsigned)k < PLAN_KIND_COUNT_ ? kind_names[k] : "?";
}

const char *plan_action_name(plan_action a)
{
	static const char *const names[] = {
		[PLAN_REUSED] = "reused",
		[PLAN_BUILT] = "built",
		[PLAN_SWAPPED] = "swapped",
		[PLAN_REMOVED] = "removed",
	};
	return (unsigned)a < sizeof names / sizeof names[0] ? names[a] : "?";
}

static bool drain_eq(plan_drain a, plan_drain b)
{
	return a.kind == b.kind && a.after_s == b.after_s;
}

plan_drain plan_drain_of(const etm_spec *s, const etm_outbound_spec *o)
{
	const etm_drain_spec *d = &o->drain;
	if (d->mode == ETM_DRAIN_UNSET && !d->has_after)
		d = &s->policy.drain;
	/* etm_spec_check refused "keep" with drain_after. */
	if (d->has_after && d->after > 0)
		return (plan_drain){.kind = PLAN_DRAIN_CLOSE_AFTER, .after_s = d->after};
	if (d->has_after || d->mode == ETM_DRAIN_CLOSE)
		return (plan_drain){.kind = PLAN_DRAIN_CLOSE};
	return (plan_drain){.kind = PLAN_DRAIN_KEEP};
}

/* ---- files ----
 *
 * The files a config names (TLS certificate, key and CA; geoip, geosite)
 * are read again when they change (issue 16), but the planner reads no
 * file: an object that names files carries PLAN_F_FILES, and the shell's
 * plan_files_changed_fn says whether they were written since the running
 * object was built (the supervisor keeps a signature of their stat). Such
 * an object is changed though its spec is not: an inbound is SWAPPED (a
 * new SSL_CTX on the same socket: an SSL holds a reference to the context
 * it was made from, so open connections finish on the old certificate and
 * new handshakes get the new one), an outbound is a new version (new dials
 * trust the new CA), the route is rebuilt and published. */

static bool stream_names_files(const etm_stream_spec *st)
{
	bool tls = st->security == ETM_SEC_TLS || st->network == ETM_NET_TLS;
	return tls && (st->tls.ca || st->tls.certificate || st->tls.key);
}

/* ---- tag lookup ----
 *
 * A spec may hold thousands of outbounds (a panel writes one blackhole per
 * audited rule, seed 002), so prev's objects are found by binary search
 * over tags sorted once, not by a scan per object. */

typedef struct tag_ref {
	const char *tag;
	size_t i;
} tag_ref;

typedef struct tag_index {
	tag_ref *refs; /* owned, sorted by tag */
	size_t len;
} tag_index;

static int ref_cmp(const void *a, const void *b)
{
	return strcmp(((const tag_ref *)a)->tag, ((const tag_ref *)b)->tag);
}

/* Indexes n structs of size stride at base by their first member, the
 * tag (every spec kind keeps it first). */
static int index_init(tag_index *x, const void *base, size_t n, size_t stride)
{
	*x = (tag_index){0};
	if (n == 0)
		return 0;
	x->refs = malloc(n * sizeof *x->refs);
	if (!x->refs)
		return PLAN_E_NOMEM;
	for (size_t i = 0; i < n; i++)
		x->refs[i] = (tag_ref){*(char *const *)((const char *)base + i * stride), i};
	x->len = n;
	qsort(x->refs, n, sizeof *x->refs, ref_cmp);
	return 0;
}

static size_t index_find(const tag_index *x, const char *tag)
{
	if (!tag || x->len == 0)
		return PLAN_NONE;
	tag_ref key = {tag, 0};
	const tag_ref *r = bsearch(&key, x->refs, x->len, sizeof *x->refs, ref_cmp);
	return r ? r->i : PLAN_NONE;
}

_Static_assert(offsetof(etm_inbound_spec, tag) == 0 && offsetof(etm_outbound_spec, tag) == 0 &&
                       offsetof(etm_balancer_spec, tag) == 0 &&
                       offsetof(etm_cluster_spec, tag) == 0,
               "index_init reads the tag as the first member");

/* ---- the version registry ---- */

static int version_cmp(const void *a, const void *b)
{
	return strcmp(((const plan_version *)a)->tag, ((const plan_version *)b)->tag);
}

static plan_version *version_find(const plan_versions *v, const char *tag)
{
	if (v->len == 0)
		return NULL;
	plan_version key = {.tag = (char *)tag};
	return bsearch(&key, v->items, v->len, sizeof *v->items, version_cmp);
}

uint64_t plan_versions_last(const plan_versions *v, const char *tag)
{
	const plan_version *x = version_find(v, tag);
	return x ? x->last : 0;
}

/* An entry that leaves a version in the registry: a BUILT target. */
static bool versioned(const plan_entry *e)
{
	return (e->kind == PLAN_OUTBOUND || e->kind == PLAN_BALANCER) && e->action == PLAN_BUILT;
}

int plan_versions_commit(plan_versions *v, const plan *p)
{
	/* Everything that can fail runs before v changes. */
	size_t fresh = 0;
	for (size_t i = 0; i < p->n_entries; i++)
		if (versioned(&p->entries[i]) && !version_find(v, p->entries[i].tag))
			fresh++;
	if (fresh) {
		plan_version *items = realloc(v->items, (v->len + fresh) * sizeof *items);
		if (!items)
			return PLAN_E_NOMEM;
		v->items = items; /* len unchanged: v still reads as before */
	}
	size_t at = v->len;
	for (size_t i = 0; i < p->n_entries && at < v->len + fresh; i++) {
		const plan_entry *e = &p->entries[i];
		if (!versioned(e) || version_find(v, e->tag))
			continue;
		char *tag = strdup(e->tag);
		if (!tag) {
			while (at > v->len)
				free(v->items[--at].tag);
			return PLAN_E_NOMEM;
		}
		v->items[at++] = (plan_version){tag, e->version};
	}
	for (size_t i = 0; i < p->n_entries; i++) {
		const plan_entry *e = &p->entries[i];
		plan_version *x = versioned(e) ? version_find(v, e->tag) : NULL;
		if (x && x->last < e->version)
			x->last = e->version;
	}
	v->len = at;
	qsort(v->items, v->len, sizeof *v->items, version_cmp);
	return 0;
}

void plan_versions_free(plan_versions *v)
{
	for (size_t i = 0; i < v->len; i++)
		free(v->items[i].tag);
	free(v->items);
	*v = (plan_versions){0};
}

/* ---- planning ---- */

/* What plan_compute works with: the inputs, prev's indexes and the output. */
typedef struct planner {
	plan_files_changed_fn files_changed; /* NULL: files never change */
	void *files_ud;
	const etm_spec *prev; /* NULL on the first plan */
	const etm_spec *next;
	const etm_spec none;  /* stands in for prev's arrays when prev is NULL */
	const plan_versions *versions;
	tag_index in, out, bal, cl; /* prev's */
	tag_index next_out;         /* next's outbounds, for balancer members */
	plan *p;
	size_t first_outbound; /* index of next's outbound 0 in p->entries */
} planner;

static plan_entry *add(planner *P, plan_kind kind, plan_action action, const char *tag,
                       size_t prev, size_t next)
{
	plan_entry *e = &P->p->entries[P->p->n_entries++];
	*e = (plan_entry){.kind = kind, .action = action, .tag = tag, .prev = prev, .next = next};
	return e;
}

/* The running version of a tag of prev; 0 if the registry lacks it. */
static uint64_t running(const planner *P, const char *tag)
{
	return plan_versions_last(P->versions, tag);
}

/* An object whose spec is unchanged but whose files (PLAN_F_FILES) were
 * written since it was built is changed all the same. */
static bool files_changed(const planner *P, const plan_entry *e)
{
	return (e->flags & PLAN_F_FILES) && P->files_changed &&
	       P->files_changed(P->files_ud, e->kind, e->prev);
}

static int plan_outbounds(planner *P, bool *used)
{
	const etm_spec *prev = P->prev ? P->prev : &P->none;
	P->first_outbound = P->p->n_entries;
	for (size_t j = 0; j < P->next->outbounds_len; j++) {
		const etm_outbound_spec *o = &P->next->outbounds[j];
		size_t i = index_find(&P->out, o->tag);
		plan_entry *e = add(P, PLAN_OUTBOUND, PLAN_BUILT, o->tag, i, j);
		e->drain = plan_drain_of(P->next, o);
		if (stream_names_files(&o->stream))
			e->flags |= PLAN_F_FILES;
		if (i == PLAN_NONE) {
			e->version = running(P, o->tag) + 1;
			continue;
		}
		used[i] = true;
		const etm_outbound_spec *po = &prev->outbounds[i];
		uint64_t v = running(P, o->tag);
		if (v == 0)
			return PLAN_E_UNVERSIONED;
		if (!plan_outbound_equal(po, o) || files_changed(P, e)) {
			e->version = v + 1;
			e->old_version = v;
			/* The policy an old version drains with is the one it ran
			 * under (prev's), not next's: a removed outbound has no
			 * entry in next at all, and one rule for changed and
			 * removed is the one an operator can predict; what the
			 * running config says about a version is what happens to
			 * its flows. A drain-only change is a SWAP that updates
			 * that record without a rebuild (docs/config.md "Drain
			 * policies"). */
			e->old_drain = plan_drain_of(prev, po);
			continue;
		}
		e->version = v;
		e->action = drain_eq(plan_drain_of(prev, po), e->drain) ? PLAN_REUSED : PLAN_SWAPPED;
		if (e->action == PLAN_SWAPPED)
			e->flags |= PLAN_F_DRAIN;
	}
	for (size_t i = 0; i < prev->outbounds_len; i++) {
		if (used[i])
			continue;
		const etm_outbound_spec *po = &prev->outbounds[i];
		plan_entry *e = add(P, PLAN_OUTBOUND, PLAN_REMOVED, po->tag, i, PLAN_NONE);
		e->old_version = running(P, po->tag);
		if (e->old_version == 0)
			return PLAN_E_UNVERSIONED;
		e->old_drain = plan_drain_of(prev, po);
	}
	return 0;
}

/* Whether a member of b is rebuilt by this plan (seed 002: a balancer
 * holds its members' targets, so a rebuilt member rebuilds it). */
static bool member_rebuilt(const planner *P, const etm_balancer_spec *b)
{
	for (size_t m = 0; m < b->outbounds.len; m++) {
		size_t j = index_find(&P->next_out, b->outbounds.items[m]);
		if (j != PLAN_NONE && P->p->entries[P->first_outbound + j].action == PLAN_BUILT)
			return true;
	}
	return false;
}

static int plan_balancers(planner *P, bool *used)
{
	const etm_spec *prev = P->prev ? P->prev : &P->none;
	for (size_t j = 0; j < P->next->balancers_len; j++) {
		const etm_balancer_spec *b = &P->next->balancers[j];
		size_t i = index_find(&P->bal, b->tag);
		plan_entry *e = add(P, PLAN_BALANCER, PLAN_BUILT, b->tag, i, j);
		if (i == PLAN_NONE) {
			e->version = running(P, b->tag) + 1;
			continue;
		}
		used[i] = true;
		uint64_t v = running(P, b->tag);
		if (v == 0)
			return PLAN_E_UNVERSIONED;
		bool same = plan_balancer_equal(&prev->balancers[i], b);
		if (same && !member_rebuilt(P, b)) {
			e->action = PLAN_REUSED;
			e->version = v;
			continue;
		}
		if (same)
			e->flags |= PLAN_F_MEMBER;
		e->version = v + 1;
		e->old_version = v;
	}
	for (size_t i = 0; i < prev->balancers_len; i++) {
		if (used[i])
			continue;
		plan_entry *e =
			add(P, PLAN_BALANCER, PLAN_REMOVED, prev->balancers[i].tag, i, PLAN_NONE);
		e->old_version = running(P, e->tag);
		if (e->old_version == 0)
			return PLAN_E_UNVERSIONED;
	}
	return 0;
}

/* A changed cluster is SWAPPED: the UDP load balancer's core takes new
 * backends, weights, limits, timeouts and health settings in place and
 * existing flows keep their backend while it exists (issue 16). */
static void plan_clusters(planner *P, bool *used)
{
	const etm_spec *prev = P->prev ? P->prev : &P->none;
	for (size_t j = 0; j < P->next->clusters_len; j++) {
		const etm_cluster_spec *c = &P->next->clusters[j];
		size_t i = index_find(&P->cl, c->tag);
		plan_action a = i == PLAN_NONE                            ? PLAN_BUILT
		                : plan_cluster_equal(&prev->clusters[i], c) ? PLAN_REUSED
		                                                            : PLAN_SWAPPED;
		if (i != PLAN_NONE)
			used[i] = true;
		add(P, PLAN_CLUSTER, a, c->tag, i, j);
	}
	for (size_t i = 0; i < prev->clusters_len; i++)
		if (!used[i])
			add(P, PLAN_CLUSTER, PLAN_REMOVED, prev->clusters[i].tag, i, PLAN_NONE);
}

static const etm_cluster_spec *cluster_of(const etm_spec *s, const etm_inbound_spec *in)
{
	for (size_t i = 0; in->settings.cluster && i < s->clusters_len; i++)
		if (strcmp(s->clusters[i].tag, in->settings.cluster) == 0)
			return &s->clusters[i];
	return NULL;
}

/* The flags that make inbound pin of prev, kept on its socket, differ from
 * nin of next beyond its own spec. */
static unsigned inbound_context(const planner *P, const etm_inbound_spec *pin,
                                const etm_inbound_spec *nin)
{
	unsigned f = 0;
	if (nin->protocol == ETM_PROTO_UDP_LB) {
		const etm_cluster_spec *pc = cluster_of(P->prev, pin), *nc = cluster_of(P->next, nin);
		if (!(pc && nc && plan_cluster_equal(pc, nc)))
			f |= PLAN_F_CLUSTER;
	} else if (!plan_policy_limits_equal(&P->prev->policy, &P->next->policy)) {
		f |= PLAN_F_POLICY;
	}
	return f;
}

static void plan_inbounds(planner *P, bool *used)
{
	const etm_spec *prev = P->prev ? P->prev : &P->none;
	size_t first = P->p->n_entries;
	for (size_t j = 0; j < P->next->inbounds_len; j++) {
		const etm_inbound_spec *nin = &P->next->inbounds[j];
		size_t i = index_find(&P->in, nin->tag);
		plan_entry *e = add(P, PLAN_INBOUND, PLAN_BUILT, nin->tag, i, j);
		if (stream_names_files(&nin->stream))
			e->flags |= PLAN_F_FILES;
		if (i == PLAN_NONE)
			continue; /* matched by address below, or new */
		used[i] = true;
		const etm_inbound_spec *pin = &prev->inbounds[i];
		if (!plan_inbound_same_socket(pin, nin)) {
			e->flags |= PLAN_F_REBIND;
			continue;
		}
		e->flags |= inbound_context(P, pin, nin);
		bool changed = !plan_inbound_equal(pin, nin) || (e->flags & ~PLAN_F_FILES) ||
		               files_changed(P, e);
		e->action = changed ? PLAN_SWAPPED : PLAN_REUSED;
	}
	/* A new tag on the address a removed tag listened on takes over its
	 * socket, so a rename refuses no connection either. A scan: renames are
	 * few, and inbounds are listeners, not thousands. */
	for (size_t k = first; k < P->p->n_entries; k++) {
		plan_entry *e = &P->p->entries[k];
		if (e->prev != PLAN_NONE)
			continue;
		const etm_inbound_spec *nin = &P->next->inbounds[e->next];
		for (size_t i = 0; i < prev->inbounds_len; i++) {
			if (used[i] || !plan_inbound_same_socket(&prev->inbounds[i], nin))
				continue;
			used[i] = true;
			e->prev = i;
			e->action = PLAN_SWAPPED;
			e->flags |= PLAN_F_RENAMED | inbound_context(P, &prev->inbounds[i], nin);
			break;
		}
	}
	for (size_t i = 0; i < prev->inbounds_len; i++)
		if (!used[i])
			add(P, PLAN_INBOUND, PLAN_REMOVED, prev->inbounds[i].tag, i, PLAN_NONE);
}

static void plan_singletons(planner *P)
{
	const etm_spec *prev = P->prev, *next = P->next;
	plan_entry *e = add(P, PLAN_ROUTE, PLAN_BUILT, NULL, prev ? 0 : PLAN_NONE, 0);
	if (next->route.geoip || next->route.geosite)
		e->flags |= PLAN_F_FILES;
	if (prev && plan_route_equal(prev, next) && !files_changed(P, e))
		e->action = PLAN_REUSED;
	/* The resolver is the supervisor's, not the outbounds': they resolve
	 * through it per dial, so a new one rebuilds no outbound. */
	e = add(P, PLAN_DNS, PLAN_BUILT, NULL, prev ? 0 : PLAN_NONE, 0);
	if (prev && plan_dns_equal(&prev->dns, &next->dns))
		e->action = PLAN_REUSED;
	e = add(P, PLAN_LOG, PLAN_BUILT, NULL, prev ? 0 : PLAN_NONE, 0);
	if (prev)
		e->action = plan_log_equal(prev, next) ? PLAN_REUSED : PLAN_SWAPPED;
	P->p->restart_needed = prev && (prev->runtime.workers != next->runtime.workers ||
	                                prev->runtime.splice != next->runtime.splice);
}

/* Seed 002 "发布 plane": the plane is published when the route, dns, an
 * outbound or a balancer is built or removed, and on the first plan.
 * Inbounds, users, clusters and the log never publish: the plane holds
 * none of them. A drain-only SWAP of an outbound changes no target. */
static bool needs_publish(const planner *P)
{
	if (!P->prev)
		return true;
	for (size_t i = 0; i < P->p->n_entries; i++) {
		const plan_entry *e = &P->p->entries[i];
		bool target = e->kind == PLAN_OUTBOUND || e->kind == PLAN_BALANCER ||
		              e->kind == PLAN_ROUTE || e->kind == PLAN_DNS;
		if (target && (e->action == PLAN_BUILT || e->action == PLAN_REMOVED))
			return true;
	}
	return false;
}

static void step(plan *p, plan_step_kind kind, size_t entry)
{
	p->steps[p->n_steps++] = (plan_step){kind, entry};
	if (kind == PLAN_STEP_DRAIN)
		p->counts.drained++;
}

/* Whether entry e takes a step of this kind. */
static bool takes(const plan_entry *e, plan_step_kind kind)
{
	switch (kind) {
	case PLAN_STEP_BUILD:
		/* A cluster is built by the udp_lb inbounds that name it: each
		 * runs its own group made from the inbound and the cluster. */
		return e->action == PLAN_BUILT && e->kind != PLAN_CLUSTER;
	case PLAN_STEP_SWAP:
		return e->action == PLAN_SWAPPED && e->kind != PLAN_CLUSTER;
	case PLAN_STEP_START:
		return e->kind == PLAN_INBOUND && e->action == PLAN_BUILT;
	case PLAN_STEP_STOP:
		if (e->kind == PLAN_INBOUND)
			return e->action == PLAN_REMOVED || (e->flags & PLAN_F_REBIND);
		return e->kind == PLAN_BALANCER && e->old_version != 0;
	case PLAN_STEP_DRAIN:
		return e->kind == PLAN_OUTBOUND && e->old_version != 0;
	case PLAN_STEP_PUBLISH:
		break;
	}
	return false;
}

static void make_steps(planner *P)
{
	plan *p = P->p;
	/* Targets before what routes to them; inbounds last, as they are
	 * bound last (seed 000 "Where outbounds live"). */
	static const plan_kind build_order[] = {PLAN_OUTBOUND, PLAN_BALANCER, PLAN_ROUTE,
	                                        PLAN_DNS,      PLAN_LOG,      PLAN_INBOUND};
	for (size_t k = 0; k < sizeof build_order / sizeof build_order[0]; k++)
		for (size_t i = 0; i < p->n_entries; i++)
			if (p->entries[i].kind == build_order[k] && takes(&p->entries[i], PLAN_STEP_BUILD))
				step(p, PLAN_STEP_BUILD, i);
	p->publish = needs_publish(P);
	if (p->publish)
		step(p, PLAN_STEP_PUBLISH, PLAN_NONE);
	/* After the publish, everything a flow can meet: a listener that a
	 * reload starts or changes never serves a connection on the previous
	 * plane (seed 002). Listeners start before the ones they replace stop,
	 * so no connection attempt is refused in between; drains come last. */
	static const plan_step_kind commit_order[] = {PLAN_STEP_SWAP, PLAN_STEP_START,
	                                              PLAN_STEP_STOP, PLAN_STEP_DRAIN};
	for (size_t k = 0; k < sizeof commit_order / sizeof commit_order[0]; k++)
		for (size_t i = 0; i < p->n_entries; i++)
			if (takes(&p->entries[i], commit_order[k]))
				step(p, commit_order[k], i);
}

static void count(plan *p)
{
	for (size_t i = 0; i < p->n_entries; i++) {
		const plan_entry *e = &p->entries[i];
		switch (e->action) {
		case PLAN_REUSED:
			p->counts.reused++;
			continue;
		case PLAN_BUILT:
			p->counts.built++;
			break;
		case PLAN_SWAPPED:
			p->counts.swapped++;
			break;
		case PLAN_REMOVED:
			p->counts.removed++;
			break;
		}
		p->changed |= 1u << e->kind;
	}
}

int plan_compute(plan *out, const etm_spec *prev, const etm_spec *next,
                 const plan_versions *versions)
{
	return plan_compute_files(out, prev, next, versions, NULL, NULL);
}

int plan_compute_files(plan *out, const etm_spec *prev, const etm_spec *next,
                       const plan_versions *versions, plan_files_changed_fn changed, void *ud)
{
	planner P = {.files_changed = changed, .files_ud = ud, .prev = prev, .next = next,
	             .versions = versions, .p = out};
	const etm_spec *pv = prev ? prev : &P.none;
	*out = (plan){0};
	bool *used = NULL;
	int rc = PLAN_E_NOMEM;

	size_t n = pv->inbounds_len + next->inbounds_len + pv->outbounds_len + next->outbounds_len +
	           pv->balancers_len + next->balancers_len + pv->clusters_len +
	           next->clusters_len + 3;
	size_t most_prev = pv->inbounds_len;
	if (pv->outbounds_len > most_prev)
		most_prev = pv->outbounds_len;
	if (pv->balancers_len > most_prev)
		most_prev = pv->balancers_len;
	if (pv->clusters_len > most_prev)
		most_prev = pv->clusters_len;
	out->entries = calloc(n, sizeof *out->entries);
	/* At most three steps an entry (an inbound moved to another address:
	 * BUILD, START, STOP), and the PUBLISH. */
	out->steps = calloc(3 * n + 1, sizeof *out->steps);
	used = calloc(most_prev + 1, sizeof *used);
	if (!out->entries || !out->steps || !used)
		goto fail;
	if (index_init(&P.in, pv->inbounds, pv->inbounds_len, sizeof *pv->inbounds) ||
	    index_init(&P.out, pv->outbounds, pv->outbounds_len, sizeof *pv->outbounds) ||
	    index_init(&P.bal, pv->balancers, pv->balancers_len, sizeof *pv->balancers) ||
	    index_init(&P.cl, pv->clusters, pv->clusters_len, sizeof *pv->clusters) ||
	    index_init(&P.next_out, next->outbounds, next->outbounds_len, sizeof *next->outbounds))
		goto fail;

	if ((rc = plan_outbounds(&P, used)))
		goto fail;
	memset(used, 0, (most_prev + 1) * sizeof *used);
	if ((rc = plan_balancers(&P, used)))
		goto fail;
	memset(used, 0, (most_prev + 1) * sizeof *used);
	plan_clusters(&P, used);
	memset(used, 0, (most_prev + 1) * sizeof *used);
	plan_inbounds(&P, used);
	plan_singletons(&P);
	make_steps(&P);
	count(out);
	rc = 0;
fail:
	free(used);
	free(P.in.refs);
	free(P.out.refs);
	free(P.bal.refs);
	free(P.cl.refs);
	free(P.next_out.refs);
	if (rc)
		plan_free(out);
	return rc;
}

void plan_free(plan *p)
{
	free(p->entries);
	free(p->steps);
	*p = (plan){0};
}

/* ---- the log lines ---- */

int plan_applied_text(const plan *p, char *buf, size_t size)
{
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
	int n = snprintf(buf, size, msgs[MSG_APPLIED], p->counts.built, p->counts.reused,
	                 p->counts.swapped, p->counts.drained);
#pragma GCC diagnostic pop
	return n >= 0 && (size_t)n < size ? 0 : -1;
}

/* Appends s to the string in buf at *at (< size), cutting it at size;
 * false when it was cut. */
static bool put(char *buf, size_t size, size_t *at, const char *s)
{
	size_t len = strlen(s), room = size - 1 - *at;
	bool whole = len <= room;
	if (!whole)
		len = room;
	memcpy(buf + *at, s, len);
	*at += len;
	buf[*at] = '\0';
	return whole;
}

int plan_summary_text(const plan *p, char *buf, size_t size)
{
	if (size == 0)
		return -1;
	size_t at = 0;
	buf[0] = '\0';
	if (!p->changed && !p->restart_needed)
		return put(buf, size, &at, msgs[MSG_NO_CHANGES]) ? 0 : -1;
	/* The kinds in issue 16's order: what carries traffic first. */
	static const plan_kind order[] = {PLAN_INBOUND, PLAN_OUTBOUND, PLAN_BALANCER, PLAN_CLUSTER,
	                                  PLAN_ROUTE,   PLAN_DNS,      PLAN_LOG};
	_Static_assert(sizeof order / sizeof order[0] == PLAN_KIND_COUNT_, "every kind once");
	bool ok = put(buf, size, &at, msgs[MSG_CHANGED]);
	const char *sep = "";
	for (size_t k = 0; k < PLAN_KIND_COUNT_; k++) {
		if (!(p->changed & (1u << order[k])))
			continue;
		ok = ok && put(buf, size, &at, sep) && put(buf, size, &at, kind_names[order[k]]);
		sep = ", ";
	}
	if (p->restart_needed)
		ok = ok && put(buf, size, &at, sep) && put(buf, size, &at, msgs[MSG_RUNTIME]);
	return ok ? 0 : -1;
}
