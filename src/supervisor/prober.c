/* prober.c - probe loops: connect, report, wait, again; early when a flow asks; each member's last probe kept for the metrics. */
#include "supervisor/prober.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "base/log.h"
#include "runtime/dial.h"
#include "runtime/worker.h"
#include "supervisor/actor.h"

enum { MSG_NOW_UP, MSG_NOW_DOWN, MSG_PROBE_FAILED, MSG_NO_MEMORY, MSG_TIMED_OUT, MSG_UNKNOWN,
       MSG_COUNT_ };
static const char *const msgs[MSG_COUNT_] = {
	/* Seed 003's words first, then which balancer and, going down, the
	 * probe's failure (issue 32): a member may be in several balancers,
	 * and "down" alone does not say whether to look at the server, the
	 * network or the name. */
	[MSG_NOW_UP] = "balancer member %s is now up (balancer %s)",
	[MSG_NOW_DOWN] = "balancer member %s is now down (balancer %s: probe: %s)",
	[MSG_PROBE_FAILED] = "balancer %s: probe of %s: %s",
	[MSG_NO_MEMORY] = "out of memory",
	[MSG_TIMED_OUT] = "timed out",
	[MSG_UNKNOWN] = "?",
};

typedef struct prober prober;

typedef struct probe {
	prober *pr;
	balanced *bal;
	size_t m;
	uv_timer_t timer; /* the interval's wait, or the probe's timeout */
	connect_pending *dial;
	uint64_t started_ns; /* uv_hrtime when the running probe began */
	bool running;
} probe;

struct prober {
	workers *ws; /* one thread, its own loop */
	plane *p;
	dns_resolver *dns;
	dns_svc_conf *svc_conf; /* a reference, or NULL: no DNS service */
	dns_svc *svc;           /* the resolver's backend over svc_conf */
	dns_cache *cache;
	const char *const *servers;
	size_t n_servers;
	probe *probes;
	size_t n;
	uint64_t *last_all; /* per balancer slot: when every member was last re-probed */
	uv_timer_t tick;
	char err[200];
	int failed;
};

static void probe_start(probe *pb);

static void on_interval(uv_timer_t *t) { probe_start(t->data); }

/* Keeps what a scrape shows of the probe that just ended. */
static void record(probe *pb, bool up)
{
	balanced_probe_last *last = &pb->bal->last[pb->m];
	int64_t delay = up ? (int64_t)((uv_hrtime() - pb->started_ns) / 1000000) : -1;
	struct timespec now;
	uint64_t when = 0;
	if (clock_gettime(CLOCK_REALTIME, &now) == 0)
		when = (uint64_t)now.tv_sec * 1000 + (uint64_t)now.tv_nsec / 1000000;
	atomic_store_explicit(&last->delay_ms, delay, memory_order_relaxed);
	atomic_store_explicit(&last->when_ms, when, memory_order_relaxed);
	atomic_fetch_add_explicit(&last->ended, 1, memory_order_relaxed);
	if (!up)
		atomic_fetch_add_explicit(&last->failed, 1, memory_order_relaxed);
}

static void finish(probe *pb, bool up, const char *why)
{
	pb->running = false;
	uv_timer_stop(&pb->timer);
	record(pb, up);
	const char *tag = pb->bal->members[pb->m]->tag;
	if (!up && why)
		log_debug("balancer", msgs[MSG_PROBE_FAILED], pb->bal->tag, tag, why);
	balancer_probe_result r = balancer_report(pb->bal->core, pb->m, up);
	if (r == BALANCER_NOW_UP)
		log_info("balancer", msgs[MSG_NOW_UP], tag, pb->bal->tag);
	else if (r == BALANCER_NOW_DOWN)
		log_info("balancer", msgs[MSG_NOW_DOWN], tag, pb->bal->tag,
		         why ? why : msgs[MSG_UNKNOWN]);
	uv_timer_start(&pb->timer, on_interval, pb->bal->probe_interval_ms, 0);
}

static void on_dial(const connect_result *r, void *data)
{
	probe *pb = data;
	pb->dial = NULL;
	if (r->ok) /* reachable: close at once, nothing is sent (seed 003) */
		endpoint_close(r->ep, false);
	finish(pb, r->ok, r->msg);
}

static void on_timeout(uv_timer_t *t)
{
	probe *pb = t->data;
	if (pb->dial) {
		pb->dial->cancel(pb->dial);
		pb->dial = NULL;
	}
	finish(pb, false, msgs[MSG_TIMED_OUT]);
}

static void probe_start(probe *pb)
{
	prober *pr = pb->pr;
	pb->running = true;
	pb->started_ns = uv_hrtime();
	worker *w = workers_at(pr->ws, 0);
	/* the timeout covers the lookup and every address (seed 000) */
	uv_timer_start(&pb->timer, on_timeout, pb->bal->probe_timeout_ms, 0);
	pb->dial = dial_tcp(w, pr->dns, &pb->bal->probe[pb->m], DIAL_FAMILY_AUTO, false, 0, on_dial,
	                   pb);
	if (!pb->dial)
		finish(pb, false, msgs[MSG_NO_MEMORY]);
}

/* Early re-probes: a member whose dial failed, or every member of a
 * balancer that had none up at selection. */
static void on_tick(uv_timer_t *t)
{
	prober *pr = t->data;
	uint64_t now = uv_now(t->loop);
	for (size_t i = 0; i < pr->n; i++) {
		probe *pb = &pr->probes[i];
		if (!pb->running && balancer_take_reprobe(pb->bal->core, pb->m))
			probe_start(pb);
	}
	for (size_t s = 0; s < pr->p->n_targets; s++) {
		balanced *b = pr->p->targets[s].bal;
		if (!b || now - pr->last_all[s] < PROBER_ALL_MIN_MS ||
		    !balancer_take_reprobe_all(b->core))
			continue;
		pr->last_all[s] = now;
		for (size_t i = 0; i < pr->n; i++)
			if (pr->probes[i].bal == b && !pr->probes[i].running)
				probe_start(&pr->probes[i]);
	}
}

static void setup(worker *w, void *arg)
{
	prober *pr = arg;
	pr->dns = dns_resolver_new(worker_loop(w), pr->cache, pr->servers, pr->n_servers, 0,
	                           pr->err, sizeof pr->err);
	if (!pr->dns) {
		pr->failed = 1;
		return;
	}
	/* Member names are looked up by the DNS service when there is one
	 * (its rules, hosts and cache). This thread routes no flow: a name
	 * whose upstream is through_proxy fails its lookup. */
	if (pr->svc_conf) {
		if (!(pr->svc = dns_svc_new(w, pr->svc_conf, NULL, NULL))) {
			snprintf(pr->err, sizeof pr->err, "%s", msgs[MSG_NO_MEMORY]);
			dns_resolver_del(pr->dns); /* teardown then closes no timer: none began */
			pr->dns = NULL;
			pr->failed = 1;
			return;
		}
		dns_resolver_set_backend(pr->dns, dns_svc_backend(pr->svc));
	}
	uv_timer_init(worker_loop(w), &pr->tick);
	pr->tick.data = pr;
	uv_timer_start(&pr->tick, on_tick, PROBER_TICK_MS, PROBER_TICK_MS);
	for (size_t i = 0; i < pr->n; i++) {
		uv_timer_init(worker_loop(w), &pr->probes[i].timer);
		pr->probes[i].timer.data = &pr->probes[i];
		probe_start(&pr->probes[i]); /* the first probe runs at once */
	}
}

static void teardown(worker *w, void *arg)
{
	(void)w;
	prober *pr = arg;
	for (size_t i = 0; pr->dns && i < pr->n; i++) {
		probe *pb = &pr->probes[i];
		if (pb->dial) {
			pb->dial->cancel(pb->dial);
			pb->dial = NULL;
		}
		uv_close((uv_handle_t *)&pb->timer, NULL);
	}
	if (pr->dns) {
		uv_close((uv_handle_t *)&pr->tick, NULL);
		dns_resolver_del(pr->dns);
		pr->dns = NULL;
	}
	dns_svc_shutdown(pr->svc);
	pr->svc = NULL;
}

static void free_prober(prober *pr)
{
	plane_unref(pr->p);
	dns_svc_conf_unref(pr->svc_conf);
	free(pr->probes);
	free(pr->last_all);
	free(pr);
}

prober *prober_start(plane *p, dns_cache *cache, const char *const *dns_servers, size_t n_servers,
                     dns_svc_conf *svc_conf, char *err, size_t err_size)
{
	prober *pr = calloc(1, sizeof *pr);
	if (!pr) {
		snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
		return NULL;
	}
	pr->p = plane_ref(p);
	pr->svc_conf = svc_conf ? dns_svc_conf_ref(svc_conf) : NULL;
	pr->cache = cache;
	pr->servers = dns_servers;
	pr->n_servers = n_servers;
	for (size_t s = 0; s < p->n_targets; s++)
		if (p->targets[s].bal)
			pr->n += p->targets[s].bal->n;
	for (size_t u = 0; u < p->n_unrouted; u++)
		pr->n += p->unrouted[u]->n;
	if (pr->n == 0)
		return pr; /* nothing to probe: no thread either */
	pr->probes = calloc(pr->n, sizeof *pr->probes);
	pr->last_all = calloc(p->n_targets, sizeof *pr->last_all);
	if (!pr->probes || !pr->last_all) {
		snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
		free_prober(pr);
		return NULL;
	}
	size_t k = 0;
	for (size_t s = 0; s < p->n_targets; s++) {
		balanced *b = p->targets[s].bal;
		for (size_t m = 0; b && m < b->n; m++)
			pr->probes[k++] = (probe){.pr = pr, .bal = b, .m = m};
	}
	for (size_t u = 0; u < p->n_unrouted; u++)
		for (size_t m = 0; m < p->unrouted[u]->n; m++)
			pr->probes[k++] = (probe){.pr = pr, .bal = p->unrouted[u], .m = m};
	pr->ws = workers_start(1, err, err_size);
	if (!pr->ws) {
		free_prober(pr);
		return NULL;
	}
	worker_run(workers_at(pr->ws, 0), setup, pr);
	if (pr->failed) {
		snprintf(err, err_size, "%s", pr->err);
		prober_stop(pr);
		return NULL;
	}
	return pr;
}

void prober_stop(prober *pr)
{
	if (!pr)
		return;
	if (pr->ws)
		workers_stop(pr->ws, teardown, pr);
	free_prober(pr);
}

/* Member j of balancer i's last-probe record; NULL past the end (the same
 * members etm_supervisor_balancer_member walks). */
static const balanced_probe_last *last_of(const etm_supervisor *s, size_t i, size_t j)
{
	if (i >= s->spec.balancers_len || !s->bals || !s->bals[i] ||
	    j >= s->spec.balancers[i].outbounds.len || j >= s->bals[i]->n)
		return NULL;
	return &s->bals[i]->last[j];
}

int etm_supervisor_member_probe(const etm_supervisor *s, size_t i, size_t j, int64_t *delay_ms,
                                uint64_t *when_ms)
{
	const balanced_probe_last *last = last_of(s, i, j);
	if (!last)
		return -1;
	*delay_ms = atomic_load_explicit(&last->delay_ms, memory_order_relaxed);
	*when_ms = atomic_load_explicit(&last->when_ms, memory_order_relaxed);
	return 0;
}

int etm_supervisor_member_probe_counts(const etm_supervisor *s, size_t i, size_t j,
                                       uint64_t *ended, uint64_t *failed)
{
	const balanced_probe_last *last = last_of(s, i, j);
	if (!last)
		return -1;
	*ended = atomic_load_explicit(&last->ended, memory_order_relaxed);
	*failed = atomic_load_explicit(&last->failed, memory_order_relaxed);
	return 0;
}
