/* tracking.c - the engine's view of the flow tracker: snapshots, kills and usage gathered from every worker's table on the worker's own loop. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/actor.h"

void etm_flow_list_free(etm_flow_list *l)
{
	free(l->v);
	*l = (etm_flow_list){0};
}

void etm_usage_list_free(etm_usage_list *l)
{
	free(l->v);
	*l = (etm_usage_list){0};
}

/* The worker's table; NULL on a worker that never finished its set-up. */
static tracker *table(worker *w)
{
	sup_route *rs = worker_slot(w);
	return rs ? rs->track : NULL;
}

static void copy(char *dst, size_t size, const char *src)
{
	snprintf(dst, size, "%s", src ? src : "");
}

/* An IP destination's address as text ("" for a domain or none). */
static void ip_text(const addr_dest *d, char *out, size_t size)
{
	out[0] = '\0';
	if (d->kind == ADDR_IPV4)
		inet_ntop(AF_INET, d->u.v4, out, (socklen_t)size);
	else if (d->kind == ADDR_IPV6)
		inet_ntop(AF_INET6, d->u.v6, out, (socklen_t)size);
}

static void describe(const track_flow *f, etm_flow *out)
{
	*out = (etm_flow){
		.id = f->id,
		.start_ms = f->start_ms,
		.end_ms = f->ended ? f->end_ms : 0,
		.udp = f->udp,
		.assoc = f->assoc,
		.src_port = f->source.kind == ADDR_NONE ? 0 : f->source.port,
		.dst_port = f->dest.port,
		.rule = f->rule,
		.version = f->version,
		.epoch = f->epoch,
	};
	copy(out->inbound, sizeof out->inbound, f->inbound);
	copy(out->user, sizeof out->user, f->user);
	copy(out->outbound, sizeof out->outbound, f->outbound);
	copy(out->member, sizeof out->member, f->member);
	ip_text(&f->source, out->src_ip, sizeof out->src_ip);
	if (f->dest.kind == ADDR_DOMAIN)
		copy(out->dst_host, sizeof out->dst_host, f->dest.u.domain.name);
	else
		ip_text(&f->dest, out->dst_ip, sizeof out->dst_ip);
	if (f->sniffed.kind == ADDR_DOMAIN)
		copy(out->sniffed, sizeof out->sniffed, f->sniffed.u.domain.name);
	track_bytes(f, &out->up, &out->down);
	if (f->ended)
		copy(out->why, sizeof out->why, f->why);
}

/* ---- snapshots ---- */

typedef struct gather {
	int closed;
	etm_flow_list *out;
	size_t cap;
	int failed;
} gather;

static etm_flow *next_slot(gather *g)
{
	if (g->out->n == g->cap) {
		size_t cap = g->cap ? g->cap * 2 : 64;
		etm_flow *v = realloc(g->out->v, cap * sizeof *v);
		if (!v) {
			g->failed = 1;
			return NULL;
		}
		g->out->v = v;
		g->cap = cap;
	}
	return &g->out->v[g->out->n++];
}

static void gather_here(worker *w, void *arg)
{
	gather *g = arg;
	tracker *t = table(w);
	if (!t || g->failed)
		return;
	if (g->closed) {
		for (size_t i = 0; i < tracker_closed_count(t); i++) {
			etm_flow *e = next_slot(g);
			if (!e)
				return;
			describe(tracker_closed_at(t, i), e);
		}
		return;
	}
	for (const list_node *i = tracker_open_list(t)->head; i; i = i->next) {
		etm_flow *e = next_slot(g);
		if (!e)
			return;
		describe(LIST_ENTRY(i, track_flow, node), e);
	}
}

static int by_start(const void *a, const void *b)
{
	const etm_flow *x = a, *y = b;
	if (x->start_ms != y->start_ms)
		return x->start_ms < y->start_ms ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

int etm_supervisor_flows(etm_supervisor *s, int closed, etm_flow_list *out)
{
	*out = (etm_flow_list){0};
	gather g = {.closed = closed, .out = out};
	for (size_t i = 0; i < workers_count(s->ws) && !g.failed; i++)
		worker_run(workers_at(s->ws, i), gather_here, &g);
	if (g.failed) {
		etm_flow_list_free(out);
		return -1;
	}
	if (out->n > 1)
		qsort(out->v, out->n, sizeof *out->v, by_start);
	return 0;
}

typedef struct traffic {
	uint64_t up, down;
} traffic;

static void traffic_here(worker *w, void *arg)
{
	traffic *tr = arg;
	tracker *t = table(w);
	if (!t)
		return;
	uint64_t up, down;
	tracker_ended_bytes(t, &up, &down);
	tr->up += up;
	tr->down += down;
	for (const list_node *i = tracker_open_list(t)->head; i; i = i->next) {
		track_bytes(LIST_ENTRY(i, track_flow, node), &up, &down);
		tr->up += up;
		tr->down += down;
	}
}

void etm_supervisor_traffic(etm_supervisor *s, uint64_t *up, uint64_t *down)
{
	traffic tr = {0};
	for (size_t i = 0; i < workers_count(s->ws); i++)
		worker_run(workers_at(s->ws, i), traffic_here, &tr);
	*up = tr.up;
	*down = tr.down;
}

/* ---- kills ---- */

typedef struct kill_job {
	const etm_flow_filter *filter; /* NULL: by id */
	uint64_t id;
	size_t n;
} kill_job;

static bool same(const char *want, const char *have) { return !want || strcmp(want, have) == 0; }

static bool kill_match(const track_flow *f, void *arg)
{
	const kill_job *k = arg;
	if (!k->filter)
		return f->id == k->id;
	const etm_flow_filter *m = k->filter;
	return same(m->user, f->user) && same(m->inbound, f->inbound) &&
	       (!m->outbound || strcmp(m->outbound, f->outbound) == 0 ||
	        strcmp(m->outbound, f->member) == 0) &&
	       (m->rule == -2 || m->rule == f->rule) && (!m->epoch_below || f->epoch < m->epoch_below);
}

static void kill_here(worker *w, void *arg)
{
	kill_job *k = arg;
	tracker *t = table(w);
	if (t)
		k->n += tracker_kill(t, kill_match, k, ETM_FLOW_KILLED);
}

int etm_supervisor_kill(etm_supervisor *s, uint64_t id)
{
	size_t i = id ? tracker_id_worker(id) : SIZE_MAX;
	if (i >= workers_count(s->ws))
		return -1;
	kill_job k = {.id = id};
	worker_run(workers_at(s->ws, i), kill_here, &k);
	return k.n ? 0 : -1;
}

size_t etm_supervisor_kill_where(etm_supervisor *s, const etm_flow_filter *f)
{
	kill_job k = {.filter = f};
	for (size_t i = 0; i < workers_count(s->ws); i++)
		worker_run(workers_at(s->ws, i), kill_here, &k);
	return k.n;
}

/* ---- usage ---- */

typedef struct usage_job {
	track_usage_by by;
	etm_usage_list *out;
	size_t cap;
	int failed;
} usage_job;

static void add_usage(usage_job *u, const char *name, uint64_t up, uint64_t down, uint64_t open,
                      uint64_t total)
{
	if (u->failed)
		return;
	if (u->out->n == u->cap) {
		size_t cap = u->cap ? u->cap * 2 : 32;
		etm_usage *v = realloc(u->out->v, cap * sizeof *v);
		if (!v) {
			u->failed = 1;
			return;
		}
		u->out->v = v;
		u->cap = cap;
	}
	etm_usage *e = &u->out->v[u->out->n++];
	*e = (etm_usage){.up = up, .down = down, .open = open, .total = total};
	copy(e->name, sizeof e->name, name);
}

static void ended_usage(const char *name, uint64_t up, uint64_t down, uint64_t total, void *arg)
{
	add_usage(arg, name, up, down, 0, total);
}

static void usage_here(worker *w, void *arg)
{
	usage_job *u = arg;
	tracker *t = table(w);
	if (!t)
		return;
	tracker_usage(t, u->by, ended_usage, u);
	for (const list_node *i = tracker_open_list(t)->head; i; i = i->next) {
		const track_flow *f = LIST_ENTRY(i, track_flow, node);
		uint64_t up, down;
		track_bytes(f, &up, &down);
		add_usage(u, track_usage_name(f, u->by), up, down, 1, 0);
	}
}

static int by_name(const void *a, const void *b)
{
	return strcmp(((const etm_usage *)a)->name, ((const etm_usage *)b)->name);
}

int etm_supervisor_usage(etm_supervisor *s, etm_usage_by by, etm_usage_list *out)
{
	*out = (etm_usage_list){0};
	usage_job u = {.by = by == ETM_USAGE_INBOUND    ? TRACK_BY_INBOUND
	                     : by == ETM_USAGE_OUTBOUND ? TRACK_BY_OUTBOUND
	                                                : TRACK_BY_USER,
	               .out = out};
	for (size_t i = 0; i < workers_count(s->ws) && !u.failed; i++)
		worker_run(workers_at(s->ws, i), usage_here, &u);
	if (u.failed) {
		etm_usage_list_free(out);
		return -1;
	}
	/* one entry per name: the workers' and the open flows' rows summed */
	if (out->n > 1)
		qsort(out->v, out->n, sizeof *out->v, by_name);
	size_t k = 0;
	for (size_t i = 0; i < out->n; i++) {
		if (k && strcmp(out->v[k - 1].name, out->v[i].name) == 0) {
			etm_usage *e = &out->v[k - 1];
			e->up += out->v[i].up;
			e->down += out->v[i].down;
			e->open += out->v[i].open;
			e->total += out->v[i].total;
		} else {
			out->v[k++] = out->v[i];
		}
	}
	out->n = k;
	return 0;
}
