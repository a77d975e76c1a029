/* supervisor.c - the engine's actor: plans, prepares and commits a spec (the first at the start, each later one on a reload), runs the workers and their listeners. */
#include "etemenanki/supervisor.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/hash.h"
#include "base/log.h"
#include "base/vec.h"
#include "inbound/inbound.h"
#include "runtime/dns_cache.h"
#include "runtime/guard.h"
#include "runtime/listener.h"
#include "runtime/worker.h"
#include "supervisor/build_inbound.h"
#include "supervisor/build_outbound.h"
#include "supervisor/build_route.h"
#include "supervisor/build_udplb.h"
#include "supervisor/connector.h"
#include "supervisor/plan.h"
#include "supervisor/plane.h"
#include "supervisor/prober.h"
#include "supervisor/spec_msg.h"
#include "udplb/shell.h"

/* Names the process-wide DNS cache holds. */
#define SUPERVISOR_DNS_CACHE 4096

/* Longest error text a worker reports back while starting. */
#define SUP_ERR_MAX 256

/* What one spec inbound runs as. */
typedef struct sup_inbound {
	inbound_rt *rt;       /* malloc'd, one reference (its connections hold theirs) */
	uint16_t port;        /* the port it is bound to */
	udplb_group *lb;      /* its UDP load-balancer group, or NULL */
	udplb_health *health; /* its checks, on worker 0's loop */
	uint64_t files;       /* files_sig of its TLS files when rt was built */
} sup_inbound;

struct etm_supervisor {
	etm_spec spec; /* owned: the running one */
	workers *ws;
	dns_cache *cache;
	connector conn;
	guard *guard; /* connections per source, our own addresses; every worker's */
	/* What spec was built into, parallel to its arrays (seed 002: the
	 * targets a plane's slots hold; a reload reuses the unchanged ones). */
	outbound **obs;  /* references */
	uint64_t *ob_files; /* files_sig of each outbound's CA when it was built */
	balanced **bals; /* references */
	sup_inbound *ins;
	uint64_t route_files; /* files_sig of the geodata the published route read */
	plane *plane;   /* the actor's reference to the published plane */
	uint64_t epoch; /* the published plane's */
	plan_versions versions;
	prober *probes; /* the balancers' health probes */
};

/* The supervisor's state on one worker (worker_slot). Worker thread only. */
typedef struct sup_worker {
	sup_route route; /* first: what the connector reads */
	size_t n;        /* inbounds, the length of both arrays */
	listener **listeners; /* one per inbound; NULL where not open */
	udplb_listener **lb_listeners; /* one per inbound; NULL where not a udp_lb one */
	list graces; /* worker 0: the close-after drains waiting */
} sup_worker;

enum {
	MSG_LISTENING,
	MSG_NO_MEMORY,
	MSG_DNS_RESTART,
	MSG_UDPLB_RESTART,
	MSG_RUNTIME_RESTART,
	MSG_LISTEN_FAILED,
	MSG_STOPPED,
	MSG_DRAINED,
	MSG_DRAIN_LATER,
	MSG_COUNT_
};
static const char *const msgs[MSG_COUNT_] = {
	[MSG_LISTENING] = "listening on %s%s%s:%u (%s, %zu worker%s)",
	[MSG_NO_MEMORY] = "out of memory",
	[MSG_DNS_RESTART] = "dns: a change to [dns] needs a restart (not applied while running yet)",
	[MSG_UDPLB_RESTART] = "inbound %s: a listener turns into or from udp_lb on the same "
	                      "address only with a restart (not applied while running yet)",
	[MSG_RUNTIME_RESTART] = "config reload: [runtime] (workers, splice) applies at the next start",
	[MSG_LISTEN_FAILED] = "config reload: inbound %s: %s",
	[MSG_STOPPED] = "stopped listening on %s%s%s:%u (%s)",
	[MSG_DRAINED] = "outbound %s@v%llu drained: %zu flow(s) closed",
	[MSG_DRAIN_LATER] = "outbound %s@v%llu: its flows close in %llu s",
};

/* What a reload (or the start) built, until commit installs it. */
typedef struct prepared {
	plan p;
	etm_spec *next;
	outbound **obs;   /* next's, references */
	uint64_t *ob_files;
	uint64_t route_files;
	balanced **bals;  /* next's, references */
	sup_inbound *ins; /* next's; rt NULL where the running one carries over; lb
	                   * set (owned) for a new udp_lb inbound only */
	plane *plane;     /* NULL when nothing is published */
	/* The udp_lb inbounds SWAPPED, each a running group that holds the
	 * prepared state (udplb_group_prepare) */
	struct lb_swap *lb_swaps;
	size_t n_lb_swaps;
} prepared;

/* A SWAPPED udp_lb inbound: its index in next, and its running group,
 * which commit moves to that index. */
typedef struct lb_swap {
	size_t next;
	udplb_group *g;
} lb_swap;

static const char *listen_ip(const etm_inbound_spec *in) { return in->listen ? in->listen : "127.0.0.1"; }

static void log_listening(const etm_supervisor *s, const etm_inbound_spec *in, uint16_t port, int msg)
{
	const char *ip = listen_ip(in);
	bool v6 = strchr(ip, ':') != NULL;
	size_t nw = workers_count(s->ws);
	if (msg == MSG_LISTENING)
		log_info("supervisor", msgs[MSG_LISTENING], v6 ? "[" : "", ip, v6 ? "]" : "", port,
		         in->tag, nw, nw == 1 ? "" : "s");
	else
		log_info("supervisor", msgs[MSG_STOPPED], v6 ? "[" : "", ip, v6 ? "]" : "", port, in->tag);
}

/* ---- per worker set-up and teardown ---- */

typedef struct setup {
	etm_supervisor *s;
	char err[SUP_ERR_MAX];
	int failed;
} setup;

/* Opens inbound i of spec on w; 0, or -1 with the reason in err. */
static int open_inbound(etm_supervisor *s, worker *w, sup_worker *sw, const etm_inbound_spec *in,
                        sup_inbound *si, size_t i, char *err, size_t err_size)
{
	const char *ip = listen_ip(in);
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
	si->port = listener_port(sw->listeners[i]);
	/* on worker 0, before any other worker serves (they dial too) */
	if (worker_index(w) == 0 && guard_listen_add(s->guard, ip, si->port)) {
		snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
		return -1;
	}
	return 0;
}

static sup_worker *sup_worker_new(size_t n)
{
	sup_worker *sw = calloc(1, sizeof *sw);
	if (!sw)
		return NULL;
	sw->n = n;
	sw->listeners = calloc(n ? n : 1, sizeof *sw->listeners);
	sw->lb_listeners = calloc(n ? n : 1, sizeof *sw->lb_listeners);
	if (!sw->listeners || !sw->lb_listeners) {
		free(sw->listeners);
		free(sw->lb_listeners);
		free(sw);
		return NULL;
	}
	return sw;
}

static void worker_setup(worker *w, void *arg)
{
	setup *st = arg;
	etm_supervisor *s = st->s;
	sup_worker *sw = sup_worker_new(s->spec.inbounds_len);
	if (!sw) {
		snprintf(st->err, sizeof st->err, "%s", msgs[MSG_NO_MEMORY]);
		st->failed = 1;
		return;
	}
	worker_set_slot(w, sw);
	worker_set_guard(w, s->guard);
	sw->route.plane = plane_ref(s->plane);
	const etm_strlist *servers = &s->spec.dns.servers;
	sw->route.dns = dns_resolver_new(worker_loop(w), s->cache, (const char *const *)servers->items,
	                                 servers->len, 0, st->err, sizeof st->err);
	if (!sw->route.dns) {
		st->failed = 1;
		return;
	}
	for (size_t i = 0; i < s->spec.inbounds_len; i++)
		if (open_inbound(s, w, sw, &s->spec.inbounds[i], &s->ins[i], i, st->err,
		                 sizeof st->err)) {
			st->failed = 1;
			return;
		}
}

/* ---- close-after drains: timers on worker 0 ---- */

typedef struct grace {
	uv_timer_t timer;
	list_node node; /* in worker 0's graces */
	etm_supervisor *s;
	uint64_t origin;
	uint64_t after_ms;
} grace;

static void drain_here(worker *w, void *arg)
{
	uint64_t origin = (uint64_t)(uintptr_t)arg;
	(void)sup_drain(w, origin);
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

/* Phase one of a stop: no new connections, every open one ends; pending
 * close-after drains end unrun (the flows close anyway). */
static void worker_quiesce(worker *w, void *arg)
{
	etm_supervisor *s = arg;
	sup_worker *sw = worker_slot(w);
	if (!sw)
		return;
	for (size_t i = 0; worker_index(w) == 0 && s->ins && i < s->spec.inbounds_len; i++) {
		udplb_health_stop(s->ins[i].health); /* its timers are on this loop */
		s->ins[i].health = NULL;
	}
	for (size_t i = 0; i < sw->n; i++) {
		if (sw->listeners[i])
			listener_close(sw->listeners[i]);
		sw->listeners[i] = NULL;
		udplb_listener_close(sw->lb_listeners[i]);
		sw->lb_listeners[i] = NULL;
	}
	while (sw->graces.head)
		grace_end(LIST_ENTRY(sw->graces.head, grace, node));
	conn_close_all(w);
}

/* Phase two, after the connections' close callbacks ran: what they used. */
static void worker_teardown(worker *w, void *arg)
{
	(void)arg;
	sup_worker *sw = worker_slot(w);
	if (!sw)
		return;
	dns_resolver_del(sw->route.dns);
	plane_unref(sw->route.plane);
	free(sw->listeners);
	free(sw->lb_listeners);
	free(sw);
	worker_set_slot(w, NULL);
}

/* ---- prepare: what a spec needs built, off the workers ---- */

/* A signature of files: device, inode, size and change time of each, so a
 * save in place or by rename changes it (and a file gone too). */
static uint64_t files_sig(const char *const *paths, size_t n)
{
	uint64_t h = 0;
	for (size_t i = 0; i < n; i++) {
		if (!paths[i])
			continue;
		struct stat st;
		uint64_t v[5] = {(uint64_t)i + 1};
		if (stat(paths[i], &st) == 0) {
			v[1] = (uint64_t)st.st_dev ^ ((uint64_t)st.st_ino << 1);
			v[2] = (uint64_t)st.st_size;
			v[3] = (uint64_t)st.st_mtim.tv_sec;
			v[4] = (uint64_t)st.st_mtim.tv_nsec;
		}
		for (size_t k = 0; k < 5; k++)
			h = hash_fmix64(h ^ v[k]);
	}
	return h;
}

static uint64_t stream_files(const etm_stream_spec *st)
{
	const char *paths[] = {st->tls.ca, st->tls.certificate, st->tls.key};
	return files_sig(paths, 3);
}

static uint64_t route_files(const etm_spec *spec)
{
	const char *paths[] = {spec->route.geoip, spec->route.geosite};
	return files_sig(paths, 2);
}

/* plan_files_changed_fn: the running object's files against its record. */
static bool running_files_changed(void *ud, plan_kind kind, size_t i)
{
	const etm_supervisor *s = ud;
	switch (kind) {
	case PLAN_INBOUND:
		return stream_files(&s->spec.inbounds[i].stream) != s->ins[i].files;
	case PLAN_OUTBOUND:
		return stream_files(&s->spec.outbounds[i].stream) != s->ob_files[i];
	case PLAN_ROUTE:
		return route_files(&s->spec) != s->route_files;
	default:
		return false;
	}
}

static void free_targets(outbound **obs, size_t n_obs, balanced **bals, size_t n_bals)
{
	for (size_t i = 0; obs && i < n_obs; i++)
		outbound_unref(obs[i]);
	for (size_t i = 0; bals && i < n_bals; i++)
		balanced_unref(bals[i]);
	free(obs);
	free(bals);
}

/* An inbound config prepare built and nothing shares yet. */
static void inbound_free(inbound_rt *rt)
{
	if (rt)
		inbound_rt_free(rt);
	free(rt);
}

static void abort_lb(prepared *pp);

static void prepared_free(prepared *pp)
{
	if (pp->next) {
		free_targets(pp->obs, pp->next->outbounds_len, pp->bals, pp->next->balancers_len);
		for (size_t i = 0; pp->ins && i < pp->next->inbounds_len; i++) {
			inbound_free(pp->ins[i].rt); /* built here and not committed */
			udplb_group_unref(pp->ins[i].lb);
		}
	}
	abort_lb(pp);
	free(pp->ins);
	free(pp->ob_files);
	plane_unref(pp->plane);
	plan_free(&pp->p);
	*pp = (prepared){.next = pp->next};
}

/* The plan entry of kind k for index i of next. */
static const plan_entry *entry_of(const plan *p, plan_kind k, size_t i)
{
	for (size_t e = 0; e < p->n_entries; e++)
		if (p->entries[e].kind == k && p->entries[e].next == i)
			return &p->entries[e];
	return NULL;
}

/* What this build cannot change while running: refused like a build
 * error, so nothing changes (seed 002 a_refused_spec_changes_nothing). */
static int refuse_live_limits(const plan *p, char *err, size_t err_size)
{
	for (size_t e = 0; e < p->n_entries; e++) {
		const plan_entry *en = &p->entries[e];
		if (en->kind == PLAN_DNS && en->action != PLAN_REUSED) {
			snprintf(err, err_size, "%s", msgs[MSG_DNS_RESTART]);
			return -1;
		}
	}
	return 0;
}

/* Builds the outbounds and balancers of pp->next, reusing the running
 * ones the plan keeps (the same objects: TLS context, balancer health). */
static int prepare_targets(const etm_supervisor *s, prepared *pp, char *err, size_t err_size)
{
	const etm_spec *next = pp->next;
	pp->obs = calloc(next->outbounds_len ? next->outbounds_len : 1, sizeof *pp->obs);
	pp->ob_files = calloc(next->outbounds_len ? next->outbounds_len : 1, sizeof *pp->ob_files);
	pp->bals = calloc(next->balancers_len ? next->balancers_len : 1, sizeof *pp->bals);
	if (!pp->obs || !pp->ob_files || !pp->bals) {
		snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
		return -1;
	}
	for (size_t i = 0; i < next->outbounds_len; i++) {
		const plan_entry *e = entry_of(&pp->p, PLAN_OUTBOUND, i);
		if (e->action != PLAN_BUILT) {
			pp->obs[i] = outbound_ref(s->obs[e->prev]);
			pp->ob_files[i] = s->ob_files[e->prev];
			continue;
		}
		pp->ob_files[i] = stream_files(&next->outbounds[i].stream); /* before the read */
		if (!(pp->obs[i] = build_outbound(&next->outbounds[i], err, err_size)))
			return -1;
		pp->obs[i]->version = e->version;
	}
	for (size_t i = 0; i < next->balancers_len; i++) {
		const plan_entry *e = entry_of(&pp->p, PLAN_BALANCER, i);
		if (e->action != PLAN_BUILT)
			pp->bals[i] = balanced_ref(s->bals[e->prev]);
		else if (!(pp->bals[i] = build_balanced(next, &next->balancers[i], pp->obs, err,
		                                        err_size)))
			return -1;
		else
			pp->bals[i]->version = e->version;
	}
	return 0;
}

/* Builds the inbound configs pp->next needs anew; a new socket's address
 * must be free (another process may hold it). */
static int prepare_inbounds(const etm_supervisor *s, prepared *pp, bool running, char *err,
                            size_t err_size)
{
	const etm_spec *next = pp->next;
	pp->ins = calloc(next->inbounds_len ? next->inbounds_len : 1, sizeof *pp->ins);
	if (!pp->ins) {
		snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
		return -1;
	}
	conn_limits limits = {.handshake_ms = next->policy.handshake_timeout * 1000,
	                      .idle_ms = next->policy.idle_timeout * 1000,
	                      .splice = running ? s->spec.runtime.splice : next->runtime.splice};
	for (size_t i = 0; i < next->inbounds_len; i++) {
		const plan_entry *e = entry_of(&pp->p, PLAN_INBOUND, i);
		const etm_inbound_spec *in = &next->inbounds[i];
		if (e->action != PLAN_BUILT)
			pp->ins[i].port = s->ins[e->prev].port; /* its socket carries over */
		if (e->action == PLAN_REUSED) {
			pp->ins[i].files = s->ins[e->prev].files;
			continue;
		}
		pp->ins[i].files = stream_files(&in->stream);
		if (!(pp->ins[i].rt = calloc(1, sizeof *pp->ins[i].rt))) {
			snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
			return -1;
		}
		if (build_inbound(pp->ins[i].rt, in, &s->conn, &limits, err, err_size))
			return -1;
		if (running && e->action == PLAN_BUILT && in->port && in->protocol != ETM_PROTO_UDP_LB &&
		    listener_check_free(listen_ip(in), in->port, err, err_size))
			return -1;
	}
	return 0;
}

/* ---- udp_lb groups across a reload ---- */

static const etm_cluster_spec *cluster_of(const etm_spec *spec, const char *tag);

/* The running groups of the SWAPPED udp_lb inbounds drop what prepare
 * readied for them: prepare failed after them, or nothing was committed. */
static void abort_lb(prepared *pp)
{
	for (size_t k = 0; k < pp->n_lb_swaps; k++)
		udplb_group_abort(pp->lb_swaps[k].g); /* after a commit: a no-op */
	free(pp->lb_swaps);
	pp->lb_swaps = NULL;
	pp->n_lb_swaps = 0;
}

/* The udp_lb inbounds of pp->next: a new one (or one on a new address)
 * gets a group of its own, opened by commit; a SWAPPED one's running group
 * prepares the new cluster and settings, which commit applies on every
 * worker (udplb_group_prepare). Either fails the reload with nothing
 * changed: a bad cluster, a busy UDP port, no memory. */
static int prepare_lb(const etm_supervisor *s, prepared *pp, char *err, size_t err_size)
{
	const etm_spec *next = pp->next;
	size_t n_in = next->inbounds_len, n_lb = 0;
	for (size_t i = 0; i < n_in; i++)
		n_lb += next->inbounds[i].protocol == ETM_PROTO_UDP_LB;
	pp->lb_swaps = calloc(n_lb ? n_lb : 1, sizeof *pp->lb_swaps);
	if (!pp->lb_swaps) {
		snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
		return -1;
	}
	uint32_t budget = udplb_auto_flows(n_lb);
	for (size_t i = 0; i < n_in; i++) {
		const plan_entry *e = entry_of(&pp->p, PLAN_INBOUND, i);
		const etm_inbound_spec *in = &next->inbounds[i];
		bool lb = in->protocol == ETM_PROTO_UDP_LB;
		if (e->action == PLAN_SWAPPED && lb != (s->ins[e->prev].lb != NULL)) {
			snprintf(err, err_size, msgs[MSG_UDPLB_RESTART], in->tag);
			return -1;
		}
		if (!lb || e->action == PLAN_REUSED)
			continue;
		const etm_cluster_spec *cl = cluster_of(next, in->settings.cluster);
		if (!cl) /* etm_spec_check refuses this; a caller that skipped it */
			return spec_format(err, err_size, SPEC_UNKNOWN_CLUSTER, in->tag,
			                   in->settings.cluster ? in->settings.cluster : "");
		udplb_group_config cfg;
		if (build_udplb(in, cl, &cfg, err, err_size))
			return -1;
		int rc = 0;
		if (e->action == PLAN_SWAPPED) {
			/* pp->ins[i].lb stays NULL until commit moves the group in */
			udplb_group *g = s->ins[e->prev].lb;
			rc = udplb_group_prepare(g, &cfg, budget, err, err_size);
			if (!rc)
				pp->lb_swaps[pp->n_lb_swaps++] = (lb_swap){.next = i, .g = g};
		} else {
			pp->ins[i].lb = udplb_group_new(&cfg, workers_count(s->ws), budget, err, err_size);
			rc = pp->ins[i].lb ? 0 : -1;
			if (!rc && in->port && listener_check_free_udp(listen_ip(in), in->port, err, err_size))
				rc = -1;
		}
		build_udplb_free(&cfg);
		if (rc)
			return -1;
	}
	return 0;
}

/* Plan and prepare (ARCHITECTURE.md section 7): nothing running changes.
 * Returns 0, or -1 with the reason in err. */
static int prepare(etm_supervisor *s, etm_spec *next, bool running, prepared *pp, char *err,
                   size_t err_size)
{
	*pp = (prepared){.next = next};
	if (plan_compute_files(&pp->p, running ? &s->spec : NULL, next, &s->versions,
	                       running_files_changed, s)) {
		snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
		return -1;
	}
	if (running && refuse_live_limits(&pp->p, err, err_size))
		return -1;
	if (prepare_targets(s, pp, err, err_size) || prepare_inbounds(s, pp, running, err, err_size) ||
	    (running && prepare_lb(s, pp, err, err_size)))
		return -1;
	pp->route_files = s->route_files;
	if (pp->p.publish) {
		pp->route_files = route_files(next);
		if (!(pp->plane = plane_new(next, s->epoch + 1, pp->obs, pp->bals, err, err_size)))
			return -1;
	}
	return 0;
}

/* ---- commit: the workers take what prepare built ---- */

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
	listener **listeners;          /* the new arrays, built on the worker */
	udplb_listener **lb_listeners;
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
	if (!ls || !lbs) { /* keeps every old socket: none of the new opens */
		free(ls);
		free(lbs);
		log_error("supervisor", msgs[MSG_LISTEN_FAILED], "*", msgs[MSG_NO_MEMORY]);
		return;
	}
	for (size_t k = 0; k < pp->p.n_entries; k++) {
		const plan_entry *e = &pp->p.entries[k];
		if (e->kind != PLAN_INBOUND || e->action == PLAN_REMOVED || e->action == PLAN_BUILT)
			continue;
		ls[e->next] = sw->listeners[e->prev];
		lbs[e->next] = sw->lb_listeners[e->prev];
		sw->listeners[e->prev] = NULL;
		sw->lb_listeners[e->prev] = NULL;
		if (ls[e->next])
			listener_set_data(ls[e->next], pp->ins[e->next].rt);
	}
	listener **old_ls = sw->listeners;
	udplb_listener **old_lbs = sw->lb_listeners;
	size_t old_n = sw->n;
	sw->listeners = ls;
	sw->lb_listeners = lbs;
	sw->n = n;
	for (size_t k = 0; k < pp->p.n_entries; k++) {
		const plan_entry *e = &pp->p.entries[k];
		char why[SUP_ERR_MAX];
		if (e->kind == PLAN_INBOUND && e->action == PLAN_BUILT &&
		    open_inbound(r->s, w, sw, &pp->next->inbounds[e->next], &pp->ins[e->next], e->next,
		                 why, sizeof why) &&
		    worker_index(w) == 0)
			log_error("supervisor", msgs[MSG_LISTEN_FAILED], e->tag, why);
	}
	for (size_t i = 0; i < old_n; i++) {
		if (old_ls[i])
			listener_close(old_ls[i]);
		udplb_listener_close(old_lbs[i]);
	}
	free(old_ls);
	free(old_lbs);
}

typedef struct drain_job {
	uint64_t origin;
	size_t n;
} drain_job;

static void drain_count_here(worker *w, void *arg)
{
	drain_job *d = arg;
	d->n += sup_drain(w, d->origin);
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
		if (!g || worker_post(workers_at(s->ws, 0), grace_start, g)) {
			free(g);
			log_error("supervisor", msgs[MSG_LISTEN_FAILED], old->tag, msgs[MSG_NO_MEMORY]);
			return;
		}
		*g = (grace){.s = s, .origin = old->id, .after_ms = policy.after_s * 1000};
		log_info("supervisor", msgs[MSG_DRAIN_LATER], old->tag, (unsigned long long)old->version,
		         (unsigned long long)policy.after_s);
		return;
	}
	}
}

/* Moves the running inbounds' state the plan keeps into pp->ins and
 * retires the configs it replaces. */
static void take_inbounds(etm_supervisor *s, prepared *pp)
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
			to->lb = from->lb;
			to->health = from->health;
			from->lb = NULL;
			from->health = NULL;
		}
	}
	/* what the plan replaces: the connections it accepted keep it */
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
			log_listening(s, &s->spec.inbounds[e->prev], s->ins[e->prev].port, MSG_STOPPED);
		if (e->action == PLAN_BUILT && pp->ins[e->next].port)
			log_listening(s, &pp->next->inbounds[e->next], pp->ins[e->next].port, MSG_LISTENING);
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

/* Commit (seed 002 Actor::commit): publish, then listeners, then drains;
 * the running spec and targets become pp's. Cannot fail: what can was
 * done in prepare. */
static void commit(etm_supervisor *s, prepared *pp)
{
	if (pp->p.publish) {
		s->epoch++;
		for (size_t i = 0; i < workers_count(s->ws); i++)
			worker_run(workers_at(s->ws, i), publish_here, pp->plane);
		plane_unref(s->plane);
		s->plane = pp->plane;
		pp->plane = NULL;
	}
	take_inbounds(s, pp);
	relisten r = {.s = s, .pp = pp};
	for (size_t i = 0; i < workers_count(s->ws); i++) /* in order: port 0 is worker 0's */
		worker_run(workers_at(s->ws, i), relisten_here, &r);
	commit_lb(s, pp);
	log_listeners(s, pp);
	for (size_t k = 0; k < pp->p.n_steps; k++) {
		const plan_step *st = &pp->p.steps[k];
		if (st->kind != PLAN_STEP_DRAIN)
			continue;
		const plan_entry *e = &pp->p.entries[st->entry];
		drain(s, s->obs[e->prev], e->old_drain);
	}
	free_targets(s->obs, s->spec.outbounds_len, s->bals, s->spec.balancers_len);
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
}

/* ---- start, apply and stop ---- */

static void free_supervisor(etm_supervisor *s)
{
	plane_unref(s->plane);
	free_targets(s->obs, s->spec.outbounds_len, s->bals, s->spec.balancers_len);
	free(s->ob_files);
	for (size_t i = 0; s->ins && i < s->spec.inbounds_len; i++) {
		if (s->ins[i].rt)
			inbound_rt_release(s->ins[i].rt);
		udplb_group_unref(s->ins[i].lb);
	}
	free(s->ins);
	plan_versions_free(&s->versions);
	dns_cache_del(s->cache);
	guard_del(s->guard);
	etm_spec_free(&s->spec);
	free(s);
}

static void stop_workers(etm_supervisor *s)
{
	prober_stop(s->probes);
	s->probes = NULL;
	for (size_t i = 0; i < workers_count(s->ws); i++)
		worker_run(workers_at(s->ws, i), worker_quiesce, s);
	workers_stop(s->ws, worker_teardown, s);
	s->ws = NULL;
}

static const etm_cluster_spec *cluster_of(const etm_spec *spec, const char *tag)
{
	for (size_t i = 0; i < spec->clusters_len; i++)
		if (strcmp(spec->clusters[i].tag, tag) == 0)
			return &spec->clusters[i];
	return NULL;
}

/* A group per udp_lb inbound, each with an even share of the automatic
 * flow budget. */
static int start_lb_groups(etm_supervisor *s, char *err, size_t err_size)
{
	size_t n_in = s->spec.inbounds_len, n_lb = 0;
	for (size_t i = 0; i < n_in; i++)
		n_lb += s->spec.inbounds[i].protocol == ETM_PROTO_UDP_LB;
	for (size_t i = 0; i < n_in; i++) {
		const etm_inbound_spec *in = &s->spec.inbounds[i];
		if (in->protocol != ETM_PROTO_UDP_LB)
			continue;
		const etm_cluster_spec *cl = cluster_of(&s->spec, in->settings.cluster);
		if (!cl) {
			/* etm_spec_check refuses this; a caller that skipped it */
			return spec_format(err, err_size, SPEC_UNKNOWN_CLUSTER, in->tag,
			                   in->settings.cluster ? in->settings.cluster : "");
		}
		udplb_group_config cfg;
		if (build_udplb(in, cl, &cfg, err, err_size))
			return -1;
		s->ins[i].lb = udplb_group_new(&cfg, workers_count(s->ws), udplb_auto_flows(n_lb), err,
		                               err_size);
		build_udplb_free(&cfg);
		if (!s->ins[i].lb)
			return -1;
	}
	return 0;
}

int etm_supervisor_start(etm_spec *spec, etm_supervisor **out, char *err, size_t err_size)
{
	*out = NULL;
	etm_supervisor *s = calloc(1, sizeof *s);
	if (!s) {
		snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
		return -1;
	}
	sup_connector_init(&s->conn, s);
	s->cache = dns_cache_new(SUPERVISOR_DNS_CACHE);
	s->guard = guard_new(spec->policy.max_connections_per_source);
	if (!s->cache || !s->guard) {
		snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
		free_supervisor(s);
		return -1;
	}
	/* the first spec goes through the same plan and prepare as a reload */
	prepared pp;
	if (prepare(s, spec, false, &pp, err, err_size)) {
		prepared_free(&pp);
		free_supervisor(s);
		return -1;
	}
	s->spec = *spec;
	*spec = (etm_spec){0};
	s->obs = pp.obs;
	s->ob_files = pp.ob_files;
	s->route_files = pp.route_files;
	s->bals = pp.bals;
	s->ins = pp.ins;
	s->plane = pp.plane;
	s->epoch = 1;
	int rc = plan_versions_commit(&s->versions, &pp.p);
	pp = (prepared){.p = pp.p};
	prepared_free(&pp);
	if (rc) {
		snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
		free_supervisor(s);
		return -1;
	}
	s->ws = workers_start(s->spec.runtime.workers, err, err_size);
	if (!s->ws) {
		free_supervisor(s);
		return -1;
	}
	if (start_lb_groups(s, err, err_size)) {
		workers_stop(s->ws, NULL, NULL);
		s->ws = NULL;
		free_supervisor(s);
		return -1;
	}
	/* One worker after the other, so a port-0 inbound gets its port from
	 * the first and shares it with the rest. */
	for (size_t i = 0; i < workers_count(s->ws); i++) {
		setup st = {.s = s};
		worker_run(workers_at(s->ws, i), worker_setup, &st);
		if (st.failed) {
			snprintf(err, err_size, "%s", st.err);
			stop_workers(s);
			free_supervisor(s);
			return -1;
		}
	}
	/* probes start with the configuration (seed 003) */
	s->probes = prober_start(s->plane, s->cache, (const char *const *)s->spec.dns.servers.items,
	                         s->spec.dns.servers.len, err, err_size);
	if (!s->probes) {
		stop_workers(s);
		free_supervisor(s);
		return -1;
	}
	for (size_t i = 0; i < s->spec.inbounds_len; i++)
		log_listening(s, &s->spec.inbounds[i], s->ins[i].port, MSG_LISTENING);
	*out = s;
	return 0;
}

int etm_supervisor_apply(etm_supervisor *s, etm_spec *spec, char *err, size_t err_size)
{
	prepared pp;
	if (prepare(s, spec, true, &pp, err, err_size)) {
		prepared_free(&pp);
		etm_spec_free(spec);
		return -1;
	}
	char line[256];
	if (plan_summary_text(&pp.p, line, sizeof line) == 0)
		log_info("supervisor", "%s", line);
	if (pp.p.restart_needed)
		log_warn("supervisor", "%s", msgs[MSG_RUNTIME_RESTART]);
	if (!pp.p.changed) { /* nothing to commit: no worker is bothered */
		prepared_free(&pp);
		etm_spec_free(spec);
		return 0;
	}
	bool publish = pp.p.publish;
	commit(s, &pp);
	if (publish) { /* the balancers of the new plane; unchanged ones keep their health */
		prober_stop(s->probes);
		s->probes = prober_start(s->plane, s->cache,
		                         (const char *const *)s->spec.dns.servers.items,
		                         s->spec.dns.servers.len, err, err_size);
		if (!s->probes)
			log_error("supervisor", msgs[MSG_LISTEN_FAILED], "*", err);
	}
	if (plan_applied_text(&pp.p, line, sizeof line) == 0)
		log_debug("supervisor", "%s", line);
	prepared_free(&pp);
	etm_spec_free(spec);
	return 0;
}

uint64_t etm_supervisor_epoch(const etm_supervisor *s) { return s->epoch; }

int etm_supervisor_check(const etm_spec *spec, char *err, size_t err_size)
{
	route_table *t;
	if (build_route_table(spec, &t, err, err_size))
		return -1;
	route_table_free(t);
	return 0;
}

uint16_t etm_supervisor_inbound_port(const etm_supervisor *s, size_t i)
{
	return i < s->spec.inbounds_len ? s->ins[i].port : 0;
}

/* udplb counts in a struct of its own (udplb_totals); the public one's
 * arrays are sized by the API header's constants, which must name the same
 * kinds, and the copy below must miss no counter. */
_Static_assert(ETM_UDPLB_DROP_KINDS == UDPLB_SHELL_DROP_COUNT, "drop kinds");
_Static_assert(ETM_UDPLB_CLOSE_KINDS == UDPLB_CLOSE_COUNT, "close kinds");
_Static_assert(sizeof(etm_udplb_stats) == sizeof(udplb_totals), "a counter added to one only");

int etm_supervisor_udplb_stats(const etm_supervisor *s, size_t i, etm_udplb_stats *out)
{
	if (i >= s->spec.inbounds_len || !s->ins[i].lb)
		return -1;
	udplb_totals t;
	udplb_group_totals(s->ins[i].lb, &t);
	*out = (etm_udplb_stats){
		.active_flows = t.active_flows,
		.flows_created = t.flows_created,
		.flows_evicted = t.flows_evicted,
		.flows_shed = t.flows_shed,
		.datagrams_to_backends = t.datagrams_to_backends,
		.bytes_to_backends = t.bytes_to_backends,
		.datagrams_to_clients = t.datagrams_to_clients,
		.bytes_to_clients = t.bytes_to_clients,
		.flow_duration_ms = t.flow_duration_ms,
		.sockets_reused = t.sockets_reused,
	};
	memcpy(out->drops, t.drops, sizeof out->drops);
	memcpy(out->evicted, t.evicted, sizeof out->evicted);
	return 0;
}

const char *etm_udplb_drop_name(size_t i)
{
	return i < UDPLB_SHELL_DROP_COUNT ? udplb_shell_drop_name((unsigned)i) : "unknown";
}

const char *etm_udplb_close_name(size_t i)
{
	return i < UDPLB_CLOSE_COUNT ? udplb_close_name((udplb_close_reason)i) : "unknown";
}

void etm_supervisor_write_metrics(const etm_supervisor *s, FILE *out)
{
	guard_stats g;
	guard_stats_get(s->guard, &g);
	fprintf(out, "guard: refused_source=%llu refused_loop=%llu accept_paused=%llu\n",
	        (unsigned long long)g.refused_source, (unsigned long long)g.refused_loop,
	        (unsigned long long)g.accept_paused);
	for (size_t i = 0; i < s->spec.inbounds_len; i++)
		if (s->ins[i].lb)
			udplb_group_write(s->ins[i].lb, out);
}

void etm_supervisor_stop(etm_supervisor *s)
{
	if (!s)
		return;
	stop_workers(s);
	free_supervisor(s);
}

void etm_supervisor_guard_stats(const etm_supervisor *s, etm_guard_stats *out)
{
	guard_stats g;
	guard_stats_get(s->guard, &g);
	*out = (etm_guard_stats){.refused_source = g.refused_source,
	                         .refused_loop = g.refused_loop,
	                         .accept_paused = g.accept_paused};
}
