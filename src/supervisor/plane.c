/* plane.c - building, sharing and reading a plane. */
#include "supervisor/plane.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void free_targets(plane *p)
{
	for (size_t i = 0; i < p->n_targets; i++)
		outbound_del(p->targets[i].ob);
	free(p->targets);
}

plane *plane_new(const etm_spec *spec, uint64_t epoch, char *err, size_t err_size)
{
	plane *p = calloc(1, sizeof *p);
	if (p)
		p->targets = calloc(spec->outbounds_len ? spec->outbounds_len : 1, sizeof *p->targets);
	if (!p || !p->targets) {
		free(p);
		snprintf(err, err_size, "out of memory");
		return NULL;
	}
	atomic_init(&p->refs, 1);
	p->epoch = epoch;
	const char *def = etm_spec_default_tag(spec);
	for (size_t i = 0; i < spec->outbounds_len; i++) {
		p->targets[i].ob = outbound_new(&spec->outbounds[i], err, err_size);
		if (!p->targets[i].ob) {
			free_targets(p);
			free(p);
			return NULL;
		}
		p->n_targets = i + 1;
		if (def && strcmp(def, spec->outbounds[i].tag) == 0)
			p->default_slot = i;
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
	if (p && atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) == 1) {
		free_targets(p);
		free(p);
	}
}

const target *plane_route(const plane *p, const flow *f, const flow_ctx *ctx)
{
	(void)f;
	(void)ctx;
	return &p->targets[p->default_slot];
}
