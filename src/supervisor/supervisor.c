/* supervisor.c - the engine's actor: starts the workers and the first spec, applies later ones (prepare.c, commit.c), stops; its counters. */
#include "etemenanki/supervisor.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "runtime/gun_conn.h"
#include "runtime/mux_conn.h"
#include "outbound/balanced.h"
#include "supervisor/actor.h"
#include "supervisor/build_route.h"
#include "supervisor/build_udplb.h"
#include "supervisor/spec_msg.h"

/* Names the process-wide DNS cache holds. */
#define SUPERVISOR_DNS_CACHE 4096

enum { MSG_NO_MEMORY, MSG_RUNTIME_RESTART, MSG_PROBES_FAILED, MSG_COUNT_ };
static const char *const msgs[MSG_COUNT_] = {
	[MSG_NO_MEMORY] = "out of memory",
	[MSG_RUNTIME_RESTART] = "config reload: [runtime] (workers, splice) applies at the next start",
	[MSG_PROBES_FAILED] = "config reload: balancer probes: %s",
};

/* ---- per worker set-up and teardown ---- */

typedef struct setup {
	etm_supervisor *s;
	char err[SUP_ERR_MAX];
	int failed;
} setup;

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
	sw->route.track = tracker_new(worker_index(w), sup_wall_ms);
	if (!sw->route.track) {
		snprintf(st->err, sizeof st->err, "%s", msgs[MSG_NO_MEMORY]);
		st->failed = 1;
		return;
	}
	const etm_strlist *servers = &s->spec.dns.servers;
	sw->route.dns = dns_resolver_new(worker_loop(w), s->cache, (const char *const *)servers->items,
	                                 servers->len, 0, st->err, sizeof st->err);
	if (!sw->route.dns) {
		st->failed = 1;
		return;
	}
	if (s->dns_conf && !(sw->route.svc = sup_dns_svc_new(w, s->dns_conf, sw->route.dns))) {
		snprintf(st->err, sizeof st->err, "%s", msgs[MSG_NO_MEMORY]);
		st->failed = 1;
		return;
	}
	for (size_t i = 0; i < s->spec.inbounds_len; i++)
		if (sup_open_inbound(s, w, sw, &s->spec.inbounds[i], &s->ins[i], i, st->err,
		                     sizeof st->err)) {
			st->failed = 1;
			return;
		}
}

/* No new connections or datagrams on this worker: its listeners, udp_lb
 * fronts (with their flows) and shadowsocks UDP sockets close, and worker
 * 0 stops the udp_lb checks. Open connections go on. */
static void worker_stop_accepting(worker *w, void *arg)
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
		ss_udp_in_close(sw->ss_udp[i]);
		sw->ss_udp[i] = NULL;
	}
}

/* Phase one of a stop: no new connections, every open one ends; pending
 * close-after drains end unrun (the flows close anyway). */
static void worker_quiesce(worker *w, void *arg)
{
	sup_worker *sw = worker_slot(w);
	if (!sw)
		return;
	worker_stop_accepting(w, arg);
	sup_worker_quiesce_timers(sw);
	conn_close_all(w);
	gun_close_all(w);
	mux_close_all(w);
}

/* Phase two, after the connections' close callbacks ran: what they used. */
static void worker_teardown(worker *w, void *arg)
{
	(void)arg;
	sup_worker *sw = worker_slot(w);
	if (!sw)
		return;
	sup_worker_free_old_dns(sw);
	dns_resolver_del(sw->route.dns);
	dns_svc_shutdown(sw->route.svc);
	plane_unref(sw->route.plane);
	tracker_free(sw->route.track);
	free(sw->listeners);
	free(sw->lb_listeners);
	free(sw->ss_udp);
	free(sw);
	worker_set_slot(w, NULL);
}

/* ---- start, apply and stop ---- */

static void free_supervisor(etm_supervisor *s)
{
	plane_unref(s->plane);
	dns_svc_conf_unref(s->dns_conf);
	outbound_unref(s->dns_ob);
	sup_targets_free(s->obs, s->spec.outbounds_len, s->bals, s->spec.balancers_len);
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
		const etm_cluster_spec *cl = sup_cluster_of(&s->spec, in->settings.cluster);
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
	if (sup_prepare(s, spec, false, &pp, err, err_size)) {
		sup_prepared_free(&pp);
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
	s->dns_conf = pp.dns_conf;
	s->dns_ob = pp.dns_ob;
	s->epoch = 1;
	int rc = plan_versions_commit(&s->versions, &pp.p);
	pp = (prepared){.p = pp.p}; /* what s took */
	sup_prepared_free(&pp);
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
	                         s->spec.dns.servers.len, s->dns_conf, err, err_size);
	if (!s->probes) {
		stop_workers(s);
		free_supervisor(s);
		return -1;
	}
	for (size_t i = 0; i < s->spec.inbounds_len; i++)
		sup_log_listening(s, &s->spec.inbounds[i], s->ins[i].port);
	*out = s;
	return 0;
}

int etm_supervisor_apply(etm_supervisor *s, etm_spec *spec, char *err, size_t err_size)
{
	prepared pp;
	if (sup_prepare(s, spec, true, &pp, err, err_size)) {
		sup_prepared_free(&pp);
		etm_spec_free(spec);
		return -1;
	}
	char line[256];
	if (plan_summary_text(&pp.p, line, sizeof line) == 0)
		log_info("supervisor", "%s", line);
	if (pp.p.restart_needed)
		log_warn("supervisor", "%s", msgs[MSG_RUNTIME_RESTART]);
	/* read when an upgrade drains, by nothing running: it takes effect
	 * whatever else the plan finds */
	s->spec.policy.upgrade_drain_after = spec->policy.upgrade_drain_after;
	s->spec.policy.upgrade_start_timeout = spec->policy.upgrade_start_timeout;
	if (!pp.p.changed) { /* nothing to commit: no worker is bothered */
		sup_prepared_free(&pp);
		etm_spec_free(spec);
		return 0;
	}
	/* The probes follow the balancers: a reload that keeps every one (and
	 * the resolver) leaves the prober running, its probes in flight and
	 * its timing as they were (it holds the plane it started on, whose
	 * balancers are the same objects as the new plane's). */
	bool reprobe = false;
	for (size_t k = 0; k < pp.p.n_entries; k++) {
		const plan_entry *e = &pp.p.entries[k];
		reprobe |= (e->kind == PLAN_BALANCER || e->kind == PLAN_DNS) && e->action != PLAN_REUSED;
	}
	sup_commit(s, &pp);
	if (reprobe) { /* unchanged balancers keep their health; new ones probe at once */
		prober_stop(s->probes);
		s->probes = prober_start(s->plane, s->cache,
		                         (const char *const *)s->spec.dns.servers.items,
		                         s->spec.dns.servers.len, s->dns_conf, err, err_size);
		if (!s->probes)
			log_error("supervisor", msgs[MSG_PROBES_FAILED], err);
	}
	if (plan_applied_text(&pp.p, line, sizeof line) == 0)
		log_debug("supervisor", "%s", line);
	sup_prepared_free(&pp);
	etm_spec_free(spec);
	return 0;
}

_Static_assert(ETM_INHERITED_MAX == LISTENER_INHERITED_MAX, "one bound, two names");

void etm_supervisor_inherit(const int *fds, size_t n) { listener_inherit(fds, n); }

void etm_supervisor_inherit_upgrade(const int *fds, size_t n) { listener_inherit_owned(fds, n); }

void etm_supervisor_inherit_release(void) { listener_inherit_release(); }

/* ---- an upgrade: the sockets handed on, the accepts stopped, the flows counted ---- */

typedef struct fd_list {
	int *fds; /* borrowed from the caller */
	size_t n, max;
	int failed; /* a negative errno: a dup failed */
} fd_list;

/* A copy of fd of the list's own (the worker's may close at a reload). */
static void fd_list_add(fd_list *fl, int fd)
{
	if (fd < 0 || fl->n >= fl->max || fl->failed)
		return;
	int dup = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (dup < 0)
		fl->failed = -errno;
	else
		fl->fds[fl->n++] = dup;
}

static void worker_listen_fds(worker *w, void *arg)
{
	fd_list *fl = arg;
	sup_worker *sw = worker_slot(w);
	int fds[WORKERS_MAX];
	for (size_t i = 0; sw && i < sw->n; i++) {
		size_t k = listener_fds(sw->listeners[i], fds, WORKERS_MAX);
		for (size_t j = 0; j < k; j++)
			fd_list_add(fl, fds[j]);
		if (sw->lb_listeners[i])
			fd_list_add(fl, udplb_listener_fd(sw->lb_listeners[i]));
		if (sw->ss_udp[i])
			fd_list_add(fl, ss_udp_in_fd(sw->ss_udp[i]));
	}
}

int etm_supervisor_listen_fds(etm_supervisor *s, int *fds, size_t max)
{
	/* worker by worker: the sockets of one address in worker order, which
	 * is how the new process deals them out to its own workers */
	fd_list fl = {.fds = fds, .max = max};
	for (size_t i = 0; i < workers_count(s->ws); i++)
		worker_run(workers_at(s->ws, i), worker_listen_fds, &fl);
	if (fl.failed) {
		for (size_t i = 0; i < fl.n; i++)
			close(fds[i]);
		return fl.failed;
	}
	return (int)fl.n;
}

void etm_supervisor_stop_accepting(etm_supervisor *s)
{
	prober_stop(s->probes); /* nothing new is routed: the probes are idle work */
	s->probes = NULL;
	for (size_t i = 0; i < workers_count(s->ws); i++)
		worker_run(workers_at(s->ws, i), worker_stop_accepting, s);
}

static void worker_count_open(worker *w, void *arg)
{
	size_t *n = arg;
	*n += worker_conn_list(w)->n + gun_server_count(w) + mux_session_count(w);
}

size_t etm_supervisor_open_flows(etm_supervisor *s)
{
	size_t n = 0;
	for (size_t i = 0; i < workers_count(s->ws); i++)
		worker_run(workers_at(s->ws, i), worker_count_open, &n);
	return n;
}

typedef struct flow_counts {
	uint64_t open, total;
} flow_counts;

static void worker_count_flows(worker *w, void *arg)
{
	flow_counts *n = arg;
	n->open += worker_conn_list(w)->n + gun_server_count(w) + mux_session_count(w);
	n->total += worker_conn_list(w)->opened;
}

void etm_supervisor_flow_counts(etm_supervisor *s, uint64_t *open, uint64_t *total)
{
	flow_counts n = {0};
	for (size_t i = 0; i < workers_count(s->ws); i++)
		worker_run(workers_at(s->ws, i), worker_count_flows, &n);
	*open = n.open;
	*total = n.total;
}

uint64_t etm_supervisor_upgrade_drain_after(const etm_supervisor *s)
{
	return s->spec.policy.upgrade_drain_after;
}

uint64_t etm_supervisor_upgrade_start_timeout(const etm_supervisor *s)
{
	return s->spec.policy.upgrade_start_timeout;
}

uint64_t etm_supervisor_epoch(const etm_supervisor *s) { return s->epoch; }

int etm_supervisor_check(const etm_spec *spec, char *err, size_t err_size)
{
	if (etm_spec_check_available(spec, err, err_size))
		return -1;
	/* the first plan and prepare of a start, with nothing running: every
	 * outbound (TLS contexts, CA files), balancer, inbound config
	 * (certificate and key) and the plane (the route with its geodata) */
	etm_supervisor s = {0};
	sup_connector_init(&s.conn, &s);
	prepared pp;
	int rc = sup_prepare(&s, (etm_spec *)spec /* read only: nothing commits it */, false, &pp,
	                     err, err_size);
	sup_prepared_free(&pp);
	plan_versions_free(&s.versions);
	/* the udp_lb clusters, as start_lb_groups builds them */
	for (size_t i = 0; rc == 0 && i < spec->inbounds_len; i++) {
		const etm_inbound_spec *in = &spec->inbounds[i];
		if (in->protocol != ETM_PROTO_UDP_LB)
			continue;
		const etm_cluster_spec *cl = sup_cluster_of(spec, in->settings.cluster);
		udplb_group_config cfg;
		if (!cl)
			rc = spec_format(err, err_size, SPEC_UNKNOWN_CLUSTER, in->tag,
			                 in->settings.cluster ? in->settings.cluster : "");
		else if ((rc = build_udplb(in, cl, &cfg, err, err_size)) == 0)
			build_udplb_free(&cfg);
	}
	return rc;
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

size_t etm_supervisor_inbound_count(const etm_supervisor *s) { return s->spec.inbounds_len; }

const char *etm_supervisor_inbound_tag(const etm_supervisor *s, size_t i)
{
	return i < s->spec.inbounds_len ? s->spec.inbounds[i].tag : NULL;
}

_Static_assert(ETM_UDPLB_ADDR_MAX >= UDPLB_ADDR_TEXT_MAX, "a backend address fits");

int etm_supervisor_udplb_backend(const etm_supervisor *s, size_t i, size_t j, char *addr,
                                 size_t addr_size, int *up, uint64_t *flows_created)
{
	if (i >= s->spec.inbounds_len || !s->ins[i].lb ||
	    j >= udplb_group_backend_count(s->ins[i].lb))
		return -1;
	bool is_up;
	udplb_group_backend(s->ins[i].lb, j, addr, addr_size, &is_up, flows_created);
	*up = is_up;
	return 0;
}

int etm_supervisor_balancer_member(const etm_supervisor *s, size_t i, size_t j,
                                   const char **balancer, const char **member, int *up)
{
	if (i >= s->spec.balancers_len || !s->bals || !s->bals[i])
		return -1;
	const etm_balancer_spec *bs = &s->spec.balancers[i];
	/* the members were built from the tag list, one for one */
	if (j >= bs->outbounds.len || j >= balancer_size(s->bals[i]->core))
		return -1;
	*balancer = bs->tag;
	*member = bs->outbounds.items[j];
	*up = balancer_is_up(s->bals[i]->core, j);
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
	fprintf(out,
	        "guard: refused_source=%llu refused_loop=%llu accept_paused=%llu "
	        "refused_fanout=%llu refused_open_rate=%llu\n",
	        (unsigned long long)g.refused_source, (unsigned long long)g.refused_loop,
	        (unsigned long long)g.accept_paused, (unsigned long long)g.refused_fanout,
	        (unsigned long long)g.refused_open_rate);
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
	                         .accept_paused = g.accept_paused,
	                         .refused_fanout = g.refused_fanout,
	                         .refused_open_rate = g.refused_open_rate};
}
