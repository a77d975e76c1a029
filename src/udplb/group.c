/* group.c - what the workers of one udp_lb inbound share: the cluster, the hash key, health flags, the counters read back as metrics, and the next state a reload prepares. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>

#include "udplb/shell_int.h"

enum { MSG_NOMEM, MSG_NO_SEED, MSG_CLUSTER };
static const char *const msgs[] = {
	[MSG_NOMEM] = "out of memory",
	[MSG_NO_SEED] = "udp_lb %s: no random hash key: %s",
	[MSG_CLUSTER] = "cluster %s: %s",
};

/* Each worker's counters on cache lines of their own. */
#define COUNTERS_STRIDE ((sizeof(udplb_counters) + 63) / 64 * 64)

static const char *const SHELL_DROPS[] = {
	[UDPLB_SHELL_DROP_QUEUE_FULL - UDPLB_DROP_COUNT] = "queue_full",
	[UDPLB_SHELL_DROP_OPEN_FAILED - UDPLB_DROP_COUNT] = "open_failed",
	[UDPLB_SHELL_DROP_SEND_ERROR - UDPLB_DROP_COUNT] = "send_error",
};

const char *udplb_shell_drop_name(unsigned i)
{
	if (i < UDPLB_DROP_COUNT)
		return udplb_drop_name((udplb_drop_reason)i);
	if (i < UDPLB_SHELL_DROP_COUNT)
		return SHELL_DROPS[i - UDPLB_DROP_COUNT];
	return "unknown";
}

uint32_t udplb_auto_flows(size_t n_lb)
{
	struct rlimit rl;
	uint64_t budget = UDPLB_AUTO_FLOWS_FALLBACK;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
		budget = rl.rlim_cur == RLIM_INFINITY
		                 ? UDPLB_MAX_FLOWS_LIMIT
		                 : (uint64_t)rl.rlim_cur * UDPLB_AUTO_FLOWS_PERCENT / 100;
	budget /= n_lb ? n_lb : 1;
	if (budget > UDPLB_MAX_FLOWS_LIMIT)
		budget = UDPLB_MAX_FLOWS_LIMIT;
	return budget ? (uint32_t)budget : 1;
}

static char *dup_text(const char *s) { return strdup(s ? s : ""); }

/* Frees a state, and what a prepared one still holds for workers that
 * did not take it (NULL is fine). */
static void state_free(udplb_state *st, size_t n_workers)
{
	if (!st)
		return;
	for (size_t w = 0; w < n_workers; w++) {
		if (st->backend_flows)
			free((void *)st->backend_flows[w]);
		if (st->views)
			udplb_backends_del(st->views[w]);
		if (st->pools)
			udplb_pool_free(st->pools[w]); /* never handed out: it holds no socket */
	}
	free((void *)st->backend_flows);
	free(st->views);
	free(st->pools);
	free(st->from);
	free((void *)st->up);
	udplb_conf_free(&st->conf);
	free((void *)st->health.payload);
	free(st->tag);
	free(st->cluster_tag);
	free(st);
}

/* What a state built to replace prev needs for the hand-over: where each
 * backend of prev went, their health as prev has it, and each worker's
 * view and reuse pool, built here so that a listener's move to the state
 * cannot fail. Returns 0 or a UDPLB_E_* code. */
static int state_stage(udplb_state *st, const udplb_state *prev, size_t n_workers)
{
	size_t nb = st->conf.n_backends;
	st->n_from = prev->conf.n_backends;
	st->from = malloc((st->n_from ? st->n_from : 1) * sizeof *st->from);
	st->views = calloc(n_workers, sizeof *st->views);
	st->pools = calloc(n_workers, sizeof *st->pools);
	if (!st->from || !st->views || !st->pools)
		return UDPLB_E_NOMEM;
	/* a scan: at most 1024 x 1024 comparisons, once per reload */
	for (size_t i = 0; i < st->n_from; i++) {
		st->from[i] = -1;
		for (size_t j = 0; j < nb; j++) {
			if (!udplb_addr_equal(&prev->conf.backends[i].addr, &st->conf.backends[j].addr))
				continue;
			st->from[i] = (int)j;
			/* without checks every backend counts as up */
			if (st->health.enabled)
				atomic_store(&st->up[j], atomic_load(&prev->up[i]));
			break;
		}
	}
	for (size_t w = 0; w < n_workers; w++) {
		int rc = udplb_backends_new(&st->views[w], st->conf.maglev_size);
		if (!rc)
			rc = udplb_backends_set(st->views[w], st->conf.backends, nb);
		if (rc)
			return rc;
		if (st->conf.reuse_sockets && !(st->pools[w] = udplb_flows_pool_new(st)))
			return UDPLB_E_NOMEM;
	}
	return 0;
}

/* The state of cfg for a group of n_workers; with prev, prepared to
 * replace it. Returns NULL with the reason in err. */
static udplb_state *state_new(const udplb_group_config *cfg, size_t n_workers,
                              uint32_t flows_budget, const udplb_state *prev, char *err,
                              size_t err_size)
{
	int rc = UDPLB_E_NOMEM;
	udplb_state *st = calloc(1, sizeof *st);
	if (!st)
		goto fail;
	st->tag = dup_text(cfg->tag);
	st->cluster_tag = dup_text(cfg->cluster_tag);
	st->health = cfg->health;
	st->health.payload = NULL;
	uint8_t *payload = malloc(cfg->health.payload_len ? cfg->health.payload_len : 1);
	if (payload && cfg->health.payload_len)
		memcpy(payload, cfg->health.payload, cfg->health.payload_len);
	st->health.payload = payload;
	if (!st->tag || !st->cluster_tag || !payload || udplb_conf_copy(&st->conf, &cfg->conf))
		goto fail;
	uint64_t max = cfg->max_flows ? cfg->max_flows : flows_budget;
	st->max_flows = (uint32_t)((max + n_workers - 1) / n_workers); /* max >= 1 */
	uint64_t rx = cfg->max_rx;
	st->max_rx = rx > UDPLB_DATAGRAM_MAX ? UDPLB_DATAGRAM_MAX : (uint32_t)rx;
	size_t nb = st->conf.n_backends;
	st->up = calloc(nb ? nb : 1, sizeof *st->up);
	st->backend_flows = calloc(n_workers, sizeof *st->backend_flows);
	if (!st->up || !st->backend_flows)
		goto fail;
	for (size_t w = 0; w < n_workers; w++)
		if (!(st->backend_flows[w] = calloc(nb ? nb : 1, sizeof *st->backend_flows[w])))
			goto fail;
	for (size_t i = 0; i < nb; i++)
		atomic_init(&st->up[i], 1); /* backends start up */
	if (prev && (rc = state_stage(st, prev, n_workers)))
		goto fail;
	return st;
fail:
	if (rc == UDPLB_E_NOMEM)
		snprintf(err, err_size, "%s", msgs[MSG_NOMEM]);
	else
		snprintf(err, err_size, msgs[MSG_CLUSTER], cfg->cluster_tag ? cfg->cluster_tag : "",
		         udplb_strerror(rc));
	state_free(st, n_workers);
	return NULL;
}

static void group_free(udplb_group *g)
{
	state_free(g->next, g->n_workers);
	state_free(g->st, g->n_workers);
	free(g->ctr);
	free(g);
}

udplb_group *udplb_group_new(const udplb_group_config *cfg, size_t n_workers,
                             uint32_t flows_budget, char *err, size_t err_size)
{
	udplb_group *g = calloc(1, sizeof *g);
	if (!g) {
		snprintf(err, err_size, "%s", msgs[MSG_NOMEM]);
		return NULL;
	}
	atomic_init(&g->refs, 1);
	g->n_workers = n_workers ? n_workers : 1;
	/* One key for every worker, so they agree on each client's backend;
	 * a reload keeps it, so they agree with what they did before too. */
	if (getrandom(&g->seed, sizeof g->seed, 0) != (ssize_t)sizeof g->seed) {
		snprintf(err, err_size, msgs[MSG_NO_SEED], cfg->tag ? cfg->tag : "", strerror(errno));
		group_free(g);
		return NULL;
	}
	g->ctr = aligned_alloc(64, COUNTERS_STRIDE * g->n_workers);
	if (!g->ctr) {
		snprintf(err, err_size, "%s", msgs[MSG_NOMEM]);
		group_free(g);
		return NULL;
	}
	memset(g->ctr, 0, COUNTERS_STRIDE * g->n_workers);
	if (!(g->st = state_new(cfg, g->n_workers, flows_budget, NULL, err, err_size))) {
		group_free(g);
		return NULL;
	}
	return g;
}

udplb_counters *udplb_group_counters(const udplb_group *g, size_t worker)
{
	return (udplb_counters *)((char *)g->ctr + COUNTERS_STRIDE * worker);
}

udplb_group *udplb_group_ref(udplb_group *g)
{
	atomic_fetch_add_explicit(&g->refs, 1, memory_order_relaxed);
	return g;
}

void udplb_group_unref(udplb_group *g)
{
	if (g && atomic_fetch_sub_explicit(&g->refs, 1, memory_order_acq_rel) == 1)
		group_free(g);
}

/* ---- reloads ---- */

int udplb_group_prepare(udplb_group *g, const udplb_group_config *cfg, uint32_t flows_budget,
                        char *err, size_t err_size)
{
	udplb_group_abort(g);
	g->next = state_new(cfg, g->n_workers, flows_budget, g->st, err, err_size);
	return g->next ? 0 : -1;
}

void udplb_group_abort(udplb_group *g)
{
	state_free(g->next, g->n_workers);
	g->next = NULL;
}

void udplb_group_commit(udplb_group *g)
{
	udplb_state *nx = g->next;
	if (!nx)
		return;
	state_free(g->st, g->n_workers);
	g->st = nx;
	g->next = NULL;
	/* what workers without a listener left, and the hand-over's map */
	for (size_t w = 0; w < g->n_workers; w++) {
		udplb_backends_del(nx->views[w]);
		udplb_pool_free(nx->pools[w]);
	}
	free(nx->views);
	free(nx->pools);
	free(nx->from);
	nx->views = NULL;
	nx->pools = NULL;
	nx->from = NULL;
	nx->n_from = 0;
}

/* ---- reading the counters ---- */

void udplb_group_totals(const udplb_group *g, udplb_totals *out)
{
	memset(out, 0, sizeof *out);
	for (size_t w = 0; w < g->n_workers; w++) {
		udplb_counters *c = udplb_group_counters(g, w);
#define SUM(f) out->f += atomic_load_explicit(&c->f, memory_order_relaxed)
		SUM(active_flows);
		SUM(flows_created);
		SUM(flows_evicted);
		SUM(flows_shed);
		SUM(datagrams_to_backends);
		SUM(bytes_to_backends);
		SUM(datagrams_to_clients);
		SUM(bytes_to_clients);
		SUM(flow_duration_ms);
		SUM(sockets_reused);
		for (size_t i = 0; i < UDPLB_SHELL_DROP_COUNT; i++)
			SUM(drops[i]);
		for (size_t i = 0; i < UDPLB_CLOSE_COUNT; i++)
			SUM(evicted[i]);
#undef SUM
	}
}

size_t udplb_group_backend_count(const udplb_group *g) { return g->st->conf.n_backends; }

void udplb_group_backend(const udplb_group *g, size_t i, char *addr, size_t addr_size, bool *up,
                         uint64_t *flows_created)
{
	const udplb_state *st = g->st;
	udplb_addr_format(&st->conf.backends[i].addr, addr, addr_size);
	*up = atomic_load(&st->up[i]) != 0;
	*flows_created = 0;
	for (size_t w = 0; w < g->n_workers; w++)
		*flows_created += atomic_load_explicit(&st->backend_flows[w][i], memory_order_relaxed);
}

void udplb_group_write(const udplb_group *g, FILE *out)
{
	udplb_totals t;
	udplb_group_totals(g, &t);
	const char *tag = g->st->tag;
	fprintf(out,
	        "udp_lb %s: active_flows=%" PRIu64 " flows_created=%" PRIu64
	        " flows_evicted=%" PRIu64 " flows_shed=%" PRIu64 " datagrams_to_backends=%" PRIu64
	        " bytes_to_backends=%" PRIu64 " datagrams_to_clients=%" PRIu64
	        " bytes_to_clients=%" PRIu64 " flow_duration_ms=%" PRIu64
	        " sockets_reused=%" PRIu64 "\n",
	        tag, t.active_flows, t.flows_created, t.flows_evicted, t.flows_shed,
	        t.datagrams_to_backends, t.bytes_to_backends, t.datagrams_to_clients,
	        t.bytes_to_clients, t.flow_duration_ms, t.sockets_reused);
	fprintf(out, "udp_lb %s: drops", tag);
	for (unsigned i = 0; i < UDPLB_SHELL_DROP_COUNT; i++)
		fprintf(out, " %s=%" PRIu64, udplb_shell_drop_name(i), t.drops[i]);
	fprintf(out, "\nudp_lb %s: evicted", tag);
	for (unsigned i = 0; i < UDPLB_CLOSE_COUNT; i++)
		fprintf(out, " %s=%" PRIu64, udplb_close_name((udplb_close_reason)i), t.evicted[i]);
	fputc('\n', out);
	for (size_t i = 0; i < g->st->conf.n_backends; i++) {
		char addr[UDPLB_ADDR_TEXT_MAX];
		bool up;
		uint64_t n;
		udplb_group_backend(g, i, addr, sizeof addr, &up, &n);
		fprintf(out, "udp_lb %s: backend %s %s flows_created=%" PRIu64 "\n", tag, addr,
		        up ? "up" : "down", n);
	}
	fflush(out);
}
