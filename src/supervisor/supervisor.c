/* supervisor.c - the engine's actor: builds the plane, runs workers and listeners. */
#include "etemenanki/supervisor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "inbound/inbound.h"
#include "runtime/dns_cache.h"
#include "runtime/guard.h"
#include "runtime/listener.h"
#include "runtime/worker.h"
#include "supervisor/build_inbound.h"
#include "supervisor/build_route.h"
#include "supervisor/build_udplb.h"
#include "supervisor/connector.h"
#include "supervisor/plane.h"
#include "supervisor/prober.h"
#include "supervisor/spec_msg.h"
#include "udplb/shell.h"

/* Names the process-wide DNS cache holds. */
#define SUPERVISOR_DNS_CACHE 4096

/* Longest error text a worker reports back while starting. */
#define SUP_ERR_MAX 256

struct etm_supervisor {
	etm_spec spec; /* owned */
	workers *ws;
	plane *plane; /* the actor's reference to the published plane */
	dns_cache *cache;
	connector conn;
	prober *probes; /* the balancers' health probes */
	inbound_rt *inbounds; /* one per spec inbound */
	uint16_t *ports;      /* the port each inbound is bound to */
	udplb_group **lb;     /* per inbound: its UDP load-balancer group, or NULL */
	udplb_health **lb_health; /* per inbound: its checks, on worker 0's loop */
	guard *guard; /* connections per source, our own addresses; every worker's */
};

/* The supervisor's state on one worker (worker_slot). Worker thread only. */
typedef struct sup_worker {
	sup_route route; /* first: what the connector reads */
	listener **listeners; /* one per inbound; NULL where not open */
	udplb_listener **lb_listeners; /* one per inbound; NULL where not a udp_lb one */
} sup_worker;

enum { MSG_LISTENING, MSG_NO_MEMORY, MSG_COUNT_ };
static const char *const msgs[MSG_COUNT_] = {
	[MSG_LISTENING] = "listening on %s%s%s:%u (%s, %zu worker%s)",
	[MSG_NO_MEMORY] = "out of memory",
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
	sup_worker *sw = calloc(1, sizeof *sw);
	size_t n_in = s->spec.inbounds_len ? s->spec.inbounds_len : 1;
	if (sw) {
		sw->listeners = calloc(n_in, sizeof *sw->listeners);
		sw->lb_listeners = calloc(n_in, sizeof *sw->lb_listeners);
	}
	if (!sw || !sw->listeners || !sw->lb_listeners) {
		if (sw) {
			free(sw->listeners);
			free(sw->lb_listeners);
		}
		free(sw);
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
	for (size_t i = 0; i < s->spec.inbounds_len; i++) {
		const etm_inbound_spec *in = &s->spec.inbounds[i];
		const char *ip = in->listen ? in->listen : "127.0.0.1";
		/* port 0: the first worker's bound port, for every worker */
		uint16_t port = s->ports[i] ? s->ports[i] : in->port;
		if (s->lb[i]) {
			if (worker_index(w) == 0 && listener_check_free_udp(ip, port, st->err, sizeof st->err)) {
				st->failed = 1;
				return;
			}
			sw->lb_listeners[i] = udplb_listener_open(s->lb[i], worker_loop(w), worker_index(w),
			                                          ip, port, st->err, sizeof st->err);
			if (!sw->lb_listeners[i]) {
				st->failed = 1;
				return;
			}
			s->ports[i] = udplb_listener_port(sw->lb_listeners[i]);
			/* the checks run in worker 0's loop, not on a thread of their own */
			if (worker_index(w) == 0)
				s->lb_health[i] = udplb_health_start(s->lb[i], worker_loop(w));
			continue;
		}
		if (worker_index(w) == 0 && listener_check_free(ip, port, st->err, sizeof st->err)) {
			st->failed = 1;
			return;
		}
		sw->listeners[i] = listener_open(w, ip, port, inbound_accept, &s->inbounds[i], st->err,
		                                 sizeof st->err);
		if (!sw->listeners[i]) {
			st->failed = 1;
			return;
		}
		s->ports[i] = listener_port(sw->listeners[i]);
		/* on worker 0, before any other worker serves (they dial too) */
		if (worker_index(w) == 0 && guard_listen_add(s->guard, ip, s->ports[i])) {
			snprintf(st->err, sizeof st->err, "%s", msgs[MSG_NO_MEMORY]);
			st->failed = 1;
			return;
		}
	}
}

/* Phase one of a stop: no new connections, every open one ends. */
static void worker_quiesce(worker *w, void *arg)
{
	etm_supervisor *s = arg;
	sup_worker *sw = worker_slot(w);
	if (!sw)
		return;
	for (size_t i = 0; sw->listeners && i < s->spec.inbounds_len; i++)
		if (sw->listeners[i]) {
			listener_close(sw->listeners[i]);
			sw->listeners[i] = NULL;
		}
	for (size_t i = 0; sw->lb_listeners && i < s->spec.inbounds_len; i++) {
		udplb_listener_close(sw->lb_listeners[i]);
		sw->lb_listeners[i] = NULL;
		if (worker_index(w) == 0 && s->lb_health) {
			udplb_health_stop(s->lb_health[i]);
			s->lb_health[i] = NULL;
		}
	}
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

/* ---- start and stop ---- */

static void free_supervisor(etm_supervisor *s)
{
	plane_unref(s->plane);
	dns_cache_del(s->cache);
	for (size_t i = 0; s->inbounds && i < s->spec.inbounds_len; i++)
		inbound_rt_free(&s->inbounds[i]);
	free(s->inbounds);
	free(s->ports);
	for (size_t i = 0; s->lb && i < s->spec.inbounds_len; i++)
		udplb_group_del(s->lb[i]);
	free(s->lb);
	free(s->lb_health);
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
	s->lb = calloc(n_in ? n_in : 1, sizeof *s->lb);
	s->lb_health = calloc(n_in ? n_in : 1, sizeof *s->lb_health);
	if (!s->lb || !s->lb_health) {
		snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
		return -1;
	}
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
		s->lb[i] = udplb_group_new(&cfg, workers_count(s->ws), udplb_auto_flows(n_lb), err,
		                           err_size);
		build_udplb_free(&cfg);
		if (!s->lb[i])
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
	s->spec = *spec;
	*spec = (etm_spec){0};
	sup_connector_init(&s->conn, s);
	size_t n_in = s->spec.inbounds_len;
	s->inbounds = calloc(n_in ? n_in : 1, sizeof *s->inbounds);
	s->ports = calloc(n_in ? n_in : 1, sizeof *s->ports);
	s->cache = dns_cache_new(SUPERVISOR_DNS_CACHE);
	s->guard = guard_new(s->spec.policy.max_connections_per_source);
	if (!s->inbounds || !s->ports || !s->cache || !s->guard) {
		snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
		free_supervisor(s);
		return -1;
	}
	conn_limits limits = {.handshake_ms = s->spec.policy.handshake_timeout * 1000,
	                      .idle_ms = s->spec.policy.idle_timeout * 1000,
	                      .splice = s->spec.runtime.splice};
	for (size_t i = 0; i < n_in; i++)
		if (build_inbound(&s->inbounds[i], &s->spec.inbounds[i], &s->conn, &limits, err,
		                  err_size)) {
			free_supervisor(s);
			return -1;
		}
	s->plane = plane_new(&s->spec, 1, err, err_size);
	if (!s->plane) {
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
	for (size_t i = 0; i < n_in; i++) {
		const etm_inbound_spec *in = &s->spec.inbounds[i];
		const char *ip = in->listen ? in->listen : "127.0.0.1";
		bool v6 = strchr(ip, ':') != NULL;
		size_t nw = workers_count(s->ws);
		log_info("supervisor", msgs[MSG_LISTENING], v6 ? "[" : "", ip, v6 ? "]" : "",
		         s->ports[i], in->tag, nw, nw == 1 ? "" : "s");
	}
	*out = s;
	return 0;
}

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
	return i < s->spec.inbounds_len ? s->ports[i] : 0;
}

/* udplb counts in a struct of its own (udplb_totals); the public one's
 * arrays are sized by the API header's constants, which must name the same
 * kinds, and the copy below must miss no counter. */
_Static_assert(ETM_UDPLB_DROP_KINDS == UDPLB_SHELL_DROP_COUNT, "drop kinds");
_Static_assert(ETM_UDPLB_CLOSE_KINDS == UDPLB_CLOSE_COUNT, "close kinds");
_Static_assert(sizeof(etm_udplb_stats) == sizeof(udplb_totals), "a counter added to one only");

int etm_supervisor_udplb_stats(const etm_supervisor *s, size_t i, etm_udplb_stats *out)
{
	if (!s->lb || i >= s->spec.inbounds_len || !s->lb[i])
		return -1;
	udplb_totals t;
	udplb_group_totals(s->lb[i], &t);
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
	for (size_t i = 0; s->lb && i < s->spec.inbounds_len; i++)
		if (s->lb[i])
			udplb_group_write(s->lb[i], out);
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
