/* plane.c - building, sharing and reading a plane. */
#include "supervisor/plane.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/vec.h"
#include "supervisor/build_outbound.h"
#include "supervisor/build_route.h"

enum { MSG_NO_MEMORY, MSG_NAMES_NOTHING, MSG_COUNT_ };
static const char *const msgs[MSG_COUNT_] = {
	[MSG_NO_MEMORY] = "out of memory",
	[MSG_NAMES_NOTHING] = "route slot %s names nothing",
};

static void free_plane(plane *p)
{
	for (size_t i = 0; i < p->n_unrouted; i++)
		balanced_unref(p->unrouted[i]);
	free(p->unrouted);
	for (size_t i = 0; i < p->n_targets; i++) {
		outbound_unref(p->targets[i].ob);
		balanced_unref(p->targets[i].bal);
	}
	free(p->targets);
	outbound_unref(p->dns.ob);
	route_table_free(p->routes);
	free(p);
}

plane *plane_new(const etm_spec *spec, uint64_t epoch, outbound *const *obs,
                 balanced *const *bals, outbound *dns, char *err, size_t err_size)
{
	plane *p = calloc(1, sizeof *p);
	if (!p) {
		snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
		return NULL;
	}
	atomic_init(&p->refs, 1);
	p->epoch = epoch;
	if (dns)
		p->dns.ob = outbound_ref(dns);
	if (build_route_table(spec, &p->routes, err, err_size)) {
		free(p);
		return NULL;
	}
	size_t n = route_table_slots(p->routes);
	p->targets = calloc(n, sizeof *p->targets);
	if (!p->targets) {
		snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
		free_plane(p);
		return NULL;
	}
	for (size_t i = 0; i < n; i++) {
		const char *tag = route_table_slot_tag(p->routes, i);
		p->n_targets = i + 1;
		for (size_t k = 0; k < spec->outbounds_len && !p->targets[i].ob; k++)
			if (strcmp(spec->outbounds[k].tag, tag) == 0)
				p->targets[i].ob = outbound_ref(obs[k]);
		for (size_t k = 0; k < spec->balancers_len && !p->targets[i].ob && !p->targets[i].bal; k++)
			if (strcmp(spec->balancers[k].tag, tag) == 0)
				p->targets[i].bal = balanced_ref(bals[k]);
		if (!p->targets[i].ob && !p->targets[i].bal) {
			snprintf(err, err_size, msgs[MSG_NAMES_NOTHING], tag);
			free_plane(p);
			return NULL;
		}
	}
	for (size_t k = 0; k < spec->balancers_len; k++) {
		bool routed = false;
		for (size_t i = 0; i < p->n_targets && !routed; i++)
			routed = p->targets[i].bal == bals[k];
		if (routed)
			continue;
		if (vec_reserve(&p->unrouted, &p->unrouted_cap, p->n_unrouted, 1) < 0) {
			snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
			free_plane(p);
			return NULL;
		}
		p->unrouted[p->n_unrouted++] = balanced_ref(bals[k]);
	}
	return p;
}

plane *plane_ref(plane *p)
{
	atomic_fetch_add_explicit(&p->refs, 1, memory_order_relaxed);
	return p;
}

void plane_unref(plane *p)
{
	if (p && atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) == 1)
		free_plane(p);
}

const target *plane_route(const plane *p, const flow *f, const flow_ctx *ctx, int32_t *rule)
{
	if (p->dns.ob && f->dest.port == DNS_PORT) {
		if (rule)
			*rule = -1;
		return &p->dns;
	}
	return plane_route_upstream(p, f, ctx, rule);
}

const target *plane_route_upstream(const plane *p, const flow *f, const flow_ctx *ctx,
                                   int32_t *rule)
{
	const struct sockaddr *source = NULL;
	if (f->has_source)
		source = (const struct sockaddr *)&f->source;
	else if (ctx && ctx->peer.ss_family != AF_UNSPEC)
		source = (const struct sockaddr *)&ctx->peer;
	route_target t = {
		.dest = &f->dest,
		.sniffed = f->sniffed.kind == ADDR_DOMAIN ? f->sniffed.u.domain.name : NULL,
		.inbound_tag = ctx ? ctx->inbound_tag : NULL,
		.source = source,
	};
	route_decision d = route_table_decide(p->routes, &t);
	if (rule)
		*rule = d.rule;
	return &p->targets[d.slot];
}
