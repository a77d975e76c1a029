/* commit.c - commit: the workers take what prepare built (the plane, listeners, resolvers), then old outbound versions drain. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "supervisor/actor.h"

enum {
	MSG_LISTENING,
	MSG_STOPPED,
	MSG_NO_MEMORY,
	MSG_LISTEN_FAILED,
	MSG_DRAINED,
	MSG_DRAIN_LATER,
	MSG_DNS_FAILED,
	MSG_COUNT_
};
static const char *const msgs[MSG_COUNT_] = {
	[MSG_LISTENING] = "listening on %s%s%s:%u (%s, %zu worker%s)",
	[MSG_STOPPED] = "stopped listening on %s%s%s:%u (%s)",
	[MSG_NO_MEMORY] = "out of memory",
	[MSG_LISTEN_FAILED] = "config reload: inbound %s: %s",
	[MSG_DRAINED] = "outbound %s@v%llu drained: %zu flow(s) closed",
	[MSG_DRAIN_LATER] = "outbound %s@v%llu: its flows close in %llu s",
	[MSG_DNS_FAILED] = "config reload: dns: %s; lookups stay on the old servers",
};

const char *sup_listen_ip(const etm_inbound_spec *in) { return in->listen ? in->listen : "127.0.0.1"; }

static void log_address(const etm_supervisor *s, const etm_inbound_spec *in, uint16_t port, int msg)
{
	const char *ip = sup_listen_ip(in);
	bool v6 = strchr(ip, ':') != NULL;
	size_t nw = workers_count(s->ws);
	if (msg == MSG_LISTENING)
		log_info("supervisor", msgs[MSG_LISTENING], v6 ? "[" : "", ip, v6 ? "]" : "", port,
		         in->tag, nw, nw == 1 ? "" : "s");
	else
		log_info("supervisor", msgs[MSG_STOPPED], v6 ? "[" : "", ip, v6 ? "]" : "", port, in->tag);
}

void sup_log_listening(const etm_supervisor *s, const etm_inbound_spec *in, uint16_t port)
{
	log_address(s, in, port, MSG_LISTENING);
}

static void log_stopped(const etm_supervisor *s, const etm_inbound_spec *in, uint16_t port)
{
	log_address(s, in, port, MSG_STOPPED);
}

/* Opens inbound i of spec on w; 0, or -1 with the reason in err. */
int sup_open_inbound(etm_supervisor *s, worker *w, sup_worker *sw, const etm_inbound_spec *in,
                     sup_inbound *si, size_t i, char *err, size_t err_size)
{
	const char *ip = sup_listen_ip(in);
	/* port 0: the first worker's bound port, for every worker */
	uint16_t port = si->port ? si->port : in->port;
	if (si->lb) {
		if (worker_index(w) == 0 && listener_check_free_udp(ip, port, err, err_size))
			return -1;
		sw->lb_listeners[i] = udplb_listener_open(si->lb, worker_loop(w), worker_index(w), ip,
		                                          port, err, err_size);
		if (!sw->lb_listeners[i])
			return -1;
		si->port = udplb_listener_port(sw->lb_listeners[i]);
		/* the checks run in worker 0's loop, not on a thread of their own */
		if (worker_index(w) == 0)
			si->health = udplb_health_start(si->lb, worker_loop(w));
		return 0;
	}
	if (worker_index(w) == 0 && listener_check_free(ip, port, err, err_size))
		return -1;
	sw->listeners[i] = listener_open(w, ip, port, inbound_accept, si->rt, err, err_size);
	if (!sw->listeners[i])
		return -1;
	if (si->rt && inbound_client_speaks_first(si->rt))
		listener_defer_accept(sw->listeners[i], LISTENER_DEFER_ACCEPT_S);
	si->port = listener_port(sw->listeners[i]);
	if (sup_follow_udp(w, sw, in, si, i, err, err_size))
		return -1;
	/* on worker 0, before any other worker serves (they dial too) */
	if (worker_index(w) == 0 && guard_listen_add(s->guard, ip, si->port)) {
		snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
		return -1;
	}
	return 0;
}

int sup_follow_udp(worker *w, sup_worker *sw, const etm_inbound_spec *in, const sup_inbound *si,
                   size_t i, char *err, size_t err_size)
{
	bool wanted = si->rt && ss_udp_in_wanted(si->rt);
	if (!wanted) {
		ss_udp_in_close(sw->ss_udp[i]);
		sw->ss_udp[i] = NULL;
		return 0;
	}
	if (sw->ss_udp[i]) {
		ss_udp_in_set_inbound(sw->ss_udp[i], si->rt);
		return 0;
	}
	const char *ip = sup_listen_ip(in);
	/* the TCP listener's port, for every worker (port 0 chose it) */
	if (worker_index(w) == 0 && listener_check_free_udp(ip, si->port, err, err_size))
		return -1;
	sw->ss_udp[i] = ss_udp_in_open(w, ip, si->port, si->rt, err, err_size);
	return sw->ss_udp[i] ? 0 : -1;
}

sup_worker *sup_worker_new(size_t n)
{
	sup_worker *sw = calloc(1, sizeof *sw);
	if (!sw)
		return NULL;
	sw->n = n;
	sw->listeners = calloc(n ? n : 1, sizeof *sw->listeners);
	sw->lb_listeners = calloc(n ? n : 1, sizeof *sw->lb_listeners);
	sw->ss_udp = calloc(n ? n : 1, sizeof *sw->ss_udp);
	if (!sw->listeners || !sw->lb_listeners || !sw->ss_udp) {
		free(sw->listeners);
		free(sw->lb_listeners);
		free(sw->ss_udp);
		free(sw);
		return NULL;
	}
	return sw;
}

/* ---- close-after drains: timers on worker 0 ---- */

typedef struct grace {
	uv_timer_t timer;
	list_node node; /* in worker 0's graces */
	etm_supervisor *s;
	uint64_t origin;
	uint64_t after_ms;
} grace;

static size_t drain_worker(worker *w, uint64_t origin);

static void drain_here(worker *w, void *arg)
{
	uint64_t origin = (uint64_t)(uintptr_t)arg;
	(void)drain_worker(w, origin);
}

static void grace_closed(uv_handle_t *h) { free(h->data); }

static void grace_end(grace *g)
{
	sup_worker *sw = worker_slot(g->timer.loop->data); /* a worker's loop: the worker */
	list_remove(&sw->graces, &g->node);
	uv_close((uv_handle_t *)&g->timer, grace_closed);
}

static void on_grace(uv_timer_t *t)
{
	grace *g = t->data;
	for (size_t i = 0; i < workers_count(g->s->ws); i++)
		if (worker_post(workers_at(g->s->ws, i), drain_here, (void *)(uintptr_t)g->origin))
			break; /* stopping: the stop ends every flow */
	grace_end(g);
}

/* Posted to worker 0: g's timer starts there. */
static void grace_start(worker *w, void *arg)
{
	grace *g = arg;
	sup_worker *sw = worker_slot(w);
	uv_timer_init(worker_loop(w), &g->timer);
	g->timer.data = g;
	list_push_back(&sw->graces, &g->node);
	uv_timer_start(&g->timer, on_grace, g->after_ms, 0);
}

/* ---- a [dns] change: new resolvers, the old ones retired ---- */

typedef struct old_dns {
	uv_timer_t timer;
	list_node node; /* in the worker's old_dns */
	dns_resolver *r;
	dns_svc *svc; /* r's backend, or NULL */
} old_dns;

static void old_dns_closed(uv_handle_t *h) { free(h->data); }

/* The flows of origin on w, and the upstream connections of the DNS
 * services a [dns] change retired (they still answer the client streams
 * opened on them). */
static size_t drain_worker(worker *w, uint64_t origin)
{
	sup_worker *sw = worker_slot(w);
	size_t n = sup_drain(w, origin);
	for (list_node *i = sw->old_dns.head; i; i = i->next) {
		dns_svc *svc = LIST_ENTRY(i, old_dns, node)->svc;
		if (svc)
			n += dns_svc_drain(svc, origin);
	}
	return n;
}

static void old_dns_end(sup_worker *sw, old_dns *o)
{
	list_remove(&sw->old_dns, &o->node);
	dns_resolver_del(o->r);
	dns_svc_release(o->svc);
	uv_close((uv_handle_t *)&o->timer, old_dns_closed);
}

static void on_old_dns(uv_timer_t *t)
{
	old_dns *o = t->data;
	old_dns_end(worker_slot(t->loop->data), o); /* a worker's loop: the worker */
}

void sup_worker_free_old_dns(sup_worker *sw)
{
	while (sw->old_dns.head)
		old_dns_end(sw, LIST_ENTRY(sw->old_dns.head, old_dns, node));
}

void sup_worker_quiesce_timers(sup_worker *sw)
{
	while (sw->graces.head)
		grace_end(LIST_ENTRY(sw->graces.head, grace, node));
	for (list_node *n = sw->old_dns.head; n; n = n->next)
		uv_timer_stop(&LIST_ENTRY(n, old_dns, node)->timer);
}

typedef struct dns_swap {
	etm_supervisor *s;
	const etm_dns_spec *dns; /* the new [dns] */
} dns_swap;

/* New flows look names up with the new servers (or service); lookups
 * running on the old resolver finish there, and it goes
 * SUP_DNS_RETIRE_MS later, with its service once that service's last
 * stream and link closed. */
static void swap_dns_here(worker *w, void *arg)
{
	dns_swap *ds = arg;
	etm_supervisor *s = ds->s;
	sup_worker *sw = worker_slot(w);
	const etm_strlist *servers = &ds->dns->servers;
	char err[SUP_ERR_MAX];
	old_dns *o = calloc(1, sizeof *o);
	dns_resolver *r = o ? dns_resolver_new(worker_loop(w), s->cache,
	                                       (const char *const *)servers->items, servers->len, 0,
	                                       err, sizeof err)
	                    : NULL;
	dns_svc *svc = r && s->dns_conf ? sup_dns_svc_new(w, s->dns_conf, r) : NULL;
	if (!r || (s->dns_conf && !svc)) {
		const char *why = o && !r ? err : msgs[MSG_NO_MEMORY];
		dns_resolver_del(r);
		free(o);
		if (worker_index(w) == 0)
			log_error("supervisor", msgs[MSG_DNS_FAILED], why);
		return;
	}
	o->r = sw->route.dns;
	o->svc = sw->route.svc;
	sw->route.dns = r;
	sw->route.svc = svc;
	uv_timer_init(worker_loop(w), &o->timer);
	o->timer.data = o;
	list_push_back(&sw->old_dns, &o->node);
	uv_timer_start(&o->timer, on_old_dns, SUP_DNS_RETIRE_MS, 0);
}


/* Each worker swaps its plane between two events: a flow routed before
 * keeps its target, the next one reads the new plane (seed 002). */
static void publish_here(worker *w, void *arg)
{
	sup_worker *sw = worker_slot(w);
	plane *old = sw->route.plane;
	sw->route.plane = plane_ref(arg);
	plane_unref(old);
}

typedef struct relisten {
	etm_supervisor *s;
	prepared *pp;
} relisten;

/* Each worker's listeners follow the plan: an unchanged socket carries
 * over (a swapped one with its new config), new ones open, then removed
 * or moved ones close: a listener an apply starts never served the
 * previous plane, and no connection attempt is refused meanwhile. */
static void relisten_here(worker *w, void *arg)
{
	relisten *r = arg;
	prepared *pp = r->pp;
	sup_worker *sw = worker_slot(w);
	size_t n = pp->next->inbounds_len;
	listener **ls = calloc(n ? n : 1, sizeof *ls);
	udplb_listener **lbs = calloc(n ? n : 1, sizeof *lbs);
	ss_udp_in **us = calloc(n ? n : 1, sizeof *us);
	if (!ls || !lbs || !us) { /* keeps every old socket: none of the new opens */
		free(ls);
		free(lbs);
		free(us);
		log_error("supervisor", msgs[MSG_LISTEN_FAILED], "*", msgs[MSG_NO_MEMORY]);
		return;
	}
	for (size_t k = 0; k < pp->p.n_entries; k++) {
		const plan_entry *e = &pp->p.entries[k];
		if (e->kind != PLAN_INBOUND || e->action == PLAN_REMOVED || e->action == PLAN_BUILT)
			continue;
		ls[e->next] = sw->listeners[e->prev];
		lbs[e->next] = sw->lb_listeners[e->prev];
		us[e->next] = sw->ss_udp[e->prev];
		sw->listeners[e->prev] = NULL;
		sw->lb_listeners[e->prev] = NULL;
		sw->ss_udp[e->prev] = NULL;
		if (ls[e->next])
			listener_set_data(ls[e->next], pp->ins[e->next].rt);
	}
	listener **old_ls = sw->listeners;
	udplb_listener **old_lbs = sw->lb_listeners;
	ss_udp_in **old_us = sw->ss_udp;
	size_t old_n = sw->n;
	sw->listeners = ls;
	sw->lb_listeners = lbs;
	sw->ss_udp = us;
	sw->n = n;
	/* a UDP socket carried over follows its TCP listener: the new build
	 * of the inbound, or closed (or opened) when a swap changed whether
	 * the inbound serves UDP */
	for (size_t k = 0; k < pp->p.n_entries; k++) {
		const plan_entry *e = &pp->p.entries[k];
		char why[SUP_ERR_MAX];
		if (e->kind == PLAN_INBOUND && e->action != PLAN_REMOVED && e->action != PLAN_BUILT &&
		    ls[e->next] &&
		    sup_follow_udp(w, sw, &pp->next->inbounds[e->next], &pp->ins[e->next], e->next,
		                   why, sizeof why) &&
		    worker_index(w) == 0)
			log_error("supervisor", msgs[MSG_LISTEN_FAILED], e->tag, why);
	}
	for (size_t k = 0; k < pp->p.n_entries; k++) {
		const plan_entry *e = &pp->p.entries[k];
		char why[SUP_ERR_MAX];
		if (e->kind == PLAN_INBOUND && e->action == PLAN_BUILT &&
		    sup_open_inbound(r->s, w, sw, &pp->next->inbounds[e->next], &pp->ins[e->next], e->next,
		                 why, sizeof why) &&
		    worker_index(w) == 0)
			log_error("supervisor", msgs[MSG_LISTEN_FAILED], e->tag, why);
	}
	for (size_t i = 0; i < old_n; i++) {
		if (old_ls[i])
			listener_close(old_ls[i]);
		udplb_listener_close(old_lbs[i]);
		ss_udp_in_close(old_us[i]);
	}
	free(old_ls);
	free(old_lbs);
	free(old_us);
}

typedef struct drain_job {
	uint64_t origin;
	size_t n;
} drain_job;

static void drain_count_here(worker *w, void *arg)
{
	drain_job *d = arg;
	d->n += drain_worker(w, d->origin);
}

/* The DRAIN step of outbound version old, last in a commit. */
static void drain(etm_supervisor *s, const outbound *old, plan_drain policy)
{
	drain_job d = {.origin = old->id};
	switch (policy.kind) {
	case PLAN_DRAIN_KEEP:
		return; /* its flows run on; no new flow reaches it */
	case PLAN_DRAIN_CLOSE:
		for (size_t i = 0; i < workers_count(s->ws); i++)
			worker_run(workers_at(s->ws, i), drain_count_here, &d);
		log_info("supervisor", msgs[MSG_DRAINED], old->tag, (unsigned long long)old->version, d.n);
		return;
	case PLAN_DRAIN_CLOSE_AFTER: {
		grace *g = calloc(1, sizeof *g);
		if (g) /* whole before worker 0 can see it */
			*g = (grace){.s = s, .origin = old->id, .after_ms = policy.after_s * 1000};
		if (!g || worker_post(workers_at(s->ws, 0), grace_start, g)) {
			free(g);
			log_error("supervisor", msgs[MSG_LISTEN_FAILED], old->tag, msgs[MSG_NO_MEMORY]);
			return;
		}
		log_info("supervisor", msgs[MSG_DRAIN_LATER], old->tag, (unsigned long long)old->version,
		         (unsigned long long)policy.after_s);
		return;
	}
	}
}

/* ---- users across a reload (seed 002 "Principal") ---- */

static bool opt_eq(const char *a, const char *b)
{
	return a == b || (a && b && strcmp(a, b) == 0);
}

/* User i's credential on inbound in: its username, password and id (a
 * Shadowsocks inbound without users has one, settings.password). */
static void credential(const etm_inbound_spec *in, size_t i, const char **user,
                       const char **pass, const char **id)
{
	if (in->settings.users_len == 0) {
		*user = *id = NULL;
		*pass = in->settings.password;
		return;
	}
	const etm_user_spec *u = &in->settings.users[i];
	*user = u->username;
	*pass = u->password;
	*id = u->id;
}

static bool same_user(const etm_inbound_spec *a, size_t i, const etm_inbound_spec *b, size_t j)
{
	const char *au, *ap, *ai, *bu, *bp, *bi;
	credential(a, i, &au, &ap, &ai);
	credential(b, j, &bu, &bp, &bi);
	return opt_eq(au, bu) && opt_eq(ap, bp) && opt_eq(ai, bi);
}

void sup_revoke(principal *p, etm_user_removal policy, sup_revoked *closing)
{
	bool close = policy == ETM_USER_REMOVAL_CLOSE;
	principal_revoke(p, close ? PRINCIPAL_REVOKED_CLOSE : PRINCIPAL_REVOKED_KEEP);
	if (!close)
		return;
	if (closing->n == closing->cap) {
		size_t cap = closing->cap ? closing->cap * 2 : 8;
		principal **v = realloc(closing->v, cap * sizeof *v);
		if (!v)
			return; /* revoked all the same: its sessions refuse new flows */
		closing->v = v;
		closing->cap = cap;
	}
	principal_hold(p);
	closing->v[closing->n++] = p;
}

/* An inbound swapped to a new config: each user it keeps (same
 * credential) keeps its principal, so its sessions, counts and buckets
 * go on and a new limit reaches its flows on their next read or write; a
 * user it no longer has is revoked under policy. */
static void carry_users(const etm_inbound_spec *old_in, inbound_rt *old_rt,
                        const etm_inbound_spec *new_in, inbound_rt *new_rt,
                        etm_user_removal policy, sup_revoked *closing)
{
	size_t n_old = old_rt && old_rt->principals ? old_rt->n_user_names : 0;
	size_t n_new = new_rt && new_rt->principals ? new_rt->n_user_names : 0;
	bool *kept = calloc(n_old ? n_old : 1, sizeof *kept);
	if (!kept)
		return; /* the users start afresh: nothing is revoked */
	for (size_t j = 0; j < n_new; j++)
		for (size_t k = 0; k < n_old; k++) {
			principal *p = old_rt->principals[k];
			if (kept[k] || !p || principal_state(p) != PRINCIPAL_LIVE ||
			    !same_user(old_in, k, new_in, j))
				continue;
			principal *fresh = new_rt->principals[j];
			principal_set_limits(p, atomic_load(&fresh->up.rate),
			                     atomic_load(&fresh->down.rate),
			                     atomic_load(&fresh->max_sessions));
			principal_hold(p);
			principal_release(fresh);
			new_rt->principals[j] = p;
			kept[k] = true;
			break;
		}
	for (size_t k = 0; k < n_old; k++) {
		principal *p = old_rt->principals[k];
		if (!kept[k] && p && principal_state(p) == PRINCIPAL_LIVE)
			sup_revoke(p, policy, closing);
	}
	free(kept);
}

static bool owned_by(const track_flow *f, void *arg)
{
	const sup_revoked *r = arg;
	for (size_t i = 0; f->who && i < r->n; i++)
		if (f->who == r->v[i])
			return true;
	return false;
}

static void end_revoked_here(worker *w, void *arg)
{
	sup_route *rs = worker_slot(w);
	if (rs && rs->track)
		(void)tracker_kill(rs->track, owned_by, arg, PRINCIPAL_SESSION_CLOSED_TEXT);
}

void sup_end_revoked(etm_supervisor *s, sup_revoked *r)
{
	for (size_t i = 0; r->n && i < workers_count(s->ws); i++)
		worker_run(workers_at(s->ws, i), end_revoked_here, r);
	for (size_t i = 0; i < r->n; i++)
		principal_release(r->v[i]);
	free(r->v);
	*r = (sup_revoked){0};
}

/* Moves the running inbounds' state the plan keeps into pp->ins; what
 * stays in s->ins is what the plan replaces (release_replaced). */
static void take_inbounds(etm_supervisor *s, prepared *pp, sup_revoked *closing)
{
	for (size_t k = 0; k < pp->p.n_entries; k++) {
		const plan_entry *e = &pp->p.entries[k];
		if (e->kind != PLAN_INBOUND || e->action == PLAN_REMOVED || e->action == PLAN_BUILT)
			continue;
		sup_inbound *from = &s->ins[e->prev], *to = &pp->ins[e->next];
		if (e->action == PLAN_REUSED) {
			*to = *from;
			*from = (sup_inbound){0};
		} else { /* swapped: a new config on the same socket */
			carry_users(&s->spec.inbounds[e->prev], from->rt, &pp->next->inbounds[e->next],
			            to->rt, pp->next->policy.user_removal, closing);
			to->lb = from->lb;
			to->health = from->health;
			from->lb = NULL;
			from->health = NULL;
		}
	}
}

/* The configs the plan replaced, once no listener hands them to a new
 * connection: the connections they accepted keep them until they end. */
static void release_replaced(etm_supervisor *s)
{
	for (size_t i = 0; i < s->spec.inbounds_len; i++) {
		if (s->ins[i].rt)
			inbound_rt_release(s->ins[i].rt);
		s->ins[i].rt = NULL;
	}
}

static void log_listeners(const etm_supervisor *s, const prepared *pp)
{
	for (size_t k = 0; k < pp->p.n_entries; k++) {
		const plan_entry *e = &pp->p.entries[k];
		if (e->kind != PLAN_INBOUND)
			continue;
		if (e->action == PLAN_REMOVED || (e->flags & PLAN_F_REBIND))
			log_stopped(s, &s->spec.inbounds[e->prev], s->ins[e->prev].port);
		if (e->action == PLAN_BUILT && pp->ins[e->next].port)
			sup_log_listening(s, &pp->next->inbounds[e->next], pp->ins[e->next].port);
	}
}

/* Worker side of commit_lb: on worker 0 the checks move first, then each
 * listener moves to its group's prepared state. */
static void apply_lb_here(worker *w, void *arg)
{
	prepared *pp = arg;
	sup_worker *sw = worker_slot(w);
	for (size_t k = 0; k < pp->n_lb_swaps; k++) {
		size_t i = pp->lb_swaps[k].next;
		sup_inbound *si = &pp->ins[i];
		if (worker_index(w) == 0) /* the checks run in worker 0's loop */
			si->health = udplb_health_switch(si->health, si->lb, worker_loop(w));
		if (sw->lb_listeners[i])
			udplb_listener_apply(sw->lb_listeners[i]);
	}
}

/* Worker 0: the checks of the groups that leave stop. */
static void stop_lb_health_here(worker *w, void *arg)
{
	etm_supervisor *s = arg;
	(void)w;
	for (size_t i = 0; i < s->spec.inbounds_len; i++) {
		if (!s->ins[i].lb)
			continue;
		udplb_health_stop(s->ins[i].health);
		s->ins[i].health = NULL;
	}
}

/* Commit's udp_lb step, once take_inbounds and relisten_here have moved the
 * listeners: each SWAPPED group takes its prepared state on every worker
 * (udplb_listener_apply: live flows keep their backend while it stays, a
 * removed backend's flows close); the groups take_inbounds left behind
 * (removed inbounds, and those that moved to another address) stop their
 * checks and are let go: their listeners, closed by relisten_here, hold
 * them until their memory goes. */
static void commit_lb(etm_supervisor *s, prepared *pp)
{
	if (pp->n_lb_swaps)
		for (size_t i = 0; i < workers_count(s->ws); i++)
			worker_run(workers_at(s->ws, i), apply_lb_here, pp);
	for (size_t k = 0; k < pp->n_lb_swaps; k++)
		udplb_group_commit(pp->lb_swaps[k].g);
	bool leaving = false;
	for (size_t i = 0; i < s->spec.inbounds_len; i++)
		leaving |= s->ins[i].lb != NULL;
	if (!leaving)
		return;
	worker_run(workers_at(s->ws, 0), stop_lb_health_here, s);
	for (size_t i = 0; i < s->spec.inbounds_len; i++) {
		udplb_group_unref(s->ins[i].lb);
		s->ins[i].lb = NULL;
	}
}

void sup_commit(etm_supervisor *s, prepared *pp)
{
	/* the workers' services first: a plane that names the new target
	 * finds them there */
	dns_svc_conf_unref(s->dns_conf);
	outbound_unref(s->dns_ob);
	s->dns_conf = pp->dns_conf;
	s->dns_ob = pp->dns_ob;
	pp->dns_conf = NULL;
	pp->dns_ob = NULL;
	if (pp->dns_changed) {
		dns_swap ds = {.s = s, .dns = &pp->next->dns};
		for (size_t i = 0; i < workers_count(s->ws); i++)
			worker_run(workers_at(s->ws, i), swap_dns_here, &ds);
	}
	if (pp->p.publish) {
		s->epoch++;
		for (size_t i = 0; i < workers_count(s->ws); i++)
			worker_run(workers_at(s->ws, i), publish_here, pp->plane);
		plane_unref(s->plane);
		s->plane = pp->plane;
		pp->plane = NULL;
	}
	sup_revoked closing = {0};
	take_inbounds(s, pp, &closing);
	relisten r = {.s = s, .pp = pp};
	for (size_t i = 0; i < workers_count(s->ws); i++) /* in order: port 0 is worker 0's */
		worker_run(workers_at(s->ws, i), relisten_here, &r);
	commit_lb(s, pp);
	log_listeners(s, pp);
	release_replaced(s);
	for (size_t k = 0; k < pp->p.n_steps; k++) {
		const plan_step *st = &pp->p.steps[k];
		if (st->kind != PLAN_STEP_DRAIN)
			continue;
		const plan_entry *e = &pp->p.entries[st->entry];
		drain(s, s->obs[e->prev], e->old_drain);
	}
	sup_targets_free(s->obs, s->spec.outbounds_len, s->bals, s->spec.balancers_len);
	s->obs = pp->obs;
	s->bals = pp->bals;
	pp->obs = NULL;
	pp->bals = NULL;
	free(s->ob_files);
	s->ob_files = pp->ob_files;
	pp->ob_files = NULL;
	s->route_files = pp->route_files;
	free(s->ins);
	s->ins = pp->ins;
	pp->ins = NULL;
	etm_spec_free(&s->spec);
	s->spec = *pp->next;
	*pp->next = (etm_spec){0};
	if (plan_versions_commit(&s->versions, &pp->p))
		log_error("supervisor", msgs[MSG_LISTEN_FAILED], "*", msgs[MSG_NO_MEMORY]);
	/* the removed users' flows end once the new configs serve */
	sup_end_revoked(s, &closing);
}

