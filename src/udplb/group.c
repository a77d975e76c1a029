/* group.c - what the workers of one udp_lb inbound share: the cluster, the hash key, health flags, and the counters read back as metrics. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>

#include "udplb/shell_int.h"

enum { MSG_NOMEM, MSG_NO_SEED };
static const char *const msgs[] = {
	[MSG_NOMEM] = "out of memory",
	[MSG_NO_SEED] = "udp_lb %s: no random hash key: %s",
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

udplb_group *udplb_group_new(const udplb_group_config *cfg, size_t n_workers,
                             uint32_t flows_budget, char *err, size_t err_size)
{
	udplb_group *g = calloc(1, sizeof *g);
	if (!g) {
		snprintf(err, err_size, "%s", msgs[MSG_NOMEM]);
		return NULL;
	}
	g->n_workers = n_workers ? n_workers : 1;
	g->tag = dup_text(cfg->tag);
	g->cluster_tag = dup_text(cfg->cluster_tag);
	g->health = cfg->health;
	g->health.payload = NULL;
	uint8_t *payload = malloc(cfg->health.payload_len ? cfg->health.payload_len : 1);
	if (payload && cfg->health.payload_len)
		memcpy(payload, cfg->health.payload, cfg->health.payload_len);
	g->health.payload = payload;
	if (!g->tag || !g->cluster_tag || !payload || udplb_conf_copy(&g->conf, &cfg->conf)) {
		snprintf(err, err_size, "%s", msgs[MSG_NOMEM]);
		udplb_group_del(g);
		return NULL;
	}
	uint64_t max = cfg->max_flows ? cfg->max_flows : flows_budget;
	g->max_flows = (uint32_t)((max + g->n_workers - 1) / g->n_workers); /* max >= 1 */
	uint64_t rx = cfg->max_rx;
	g->max_rx = rx > UDPLB_DATAGRAM_MAX ? UDPLB_DATAGRAM_MAX : (uint32_t)rx;
	/* One key for every worker, so they agree on each client's backend. */
	if (getrandom(&g->seed, sizeof g->seed, 0) != (ssize_t)sizeof g->seed) {
		snprintf(err, err_size, msgs[MSG_NO_SEED], g->tag, strerror(errno));
		udplb_group_del(g);
		return NULL;
	}
	size_t nb = g->conf.n_backends;
	g->up = calloc(nb ? nb : 1, sizeof *g->up);
	g->ctr = aligned_alloc(64, COUNTERS_STRIDE * g->n_workers);
	if (!g->up || !g->ctr) {
		snprintf(err, err_size, "%s", msgs[MSG_NOMEM]);
		udplb_group_del(g);
		return NULL;
	}
	memset(g->ctr, 0, COUNTERS_STRIDE * g->n_workers);
	for (size_t i = 0; i < g->n_workers; i++) {
		udplb_counters *c = udplb_group_counters(g, i);
		c->backend_flows = calloc(nb ? nb : 1, sizeof *c->backend_flows);
		if (!c->backend_flows) {
			snprintf(err, err_size, "%s", msgs[MSG_NOMEM]);
			udplb_group_del(g);
			return NULL;
		}
	}
	for (size_t i = 0; i < nb; i++)
		atomic_init(&g->up[i], 1);
	return g;
}

udplb_counters *udplb_group_counters(const udplb_group *g, size_t worker)
{
	return (udplb_counters *)((char *)g->ctr + COUNTERS_STRIDE * worker);
}

void udplb_group_del(udplb_group *g)
{
	if (!g)
		return;
	for (size_t i = 0; g->ctr && i < g->n_workers; i++)
		free((void *)udplb_group_counters(g, i)->backend_flows);
	free(g->ctr);
	free((void *)g->up);
	udplb_conf_free(&g->conf);
	free((void *)g->health.payload);
	free(g->tag);
	free(g->cluster_tag);
	free(g);
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

size_t udplb_group_backend_count(const udplb_group *g) { return g->conf.n_backends; }

void udplb_group_backend(const udplb_group *g, size_t i, char *addr, size_t addr_size, bool *up,
                         uint64_t *flows_created)
{
	udplb_addr_format(&g->conf.backends[i].addr, addr, addr_size);
	*up = atomic_load(&g->up[i]) != 0;
	*flows_created = 0;
	for (size_t w = 0; w < g->n_workers; w++)
		*flows_created += atomic_load_explicit(&udplb_group_counters(g, w)->backend_flows[i],
		                                       memory_order_relaxed);
}

void udplb_group_write(const udplb_group *g, FILE *out)
{
	udplb_totals t;
	udplb_group_totals(g, &t);
	const char *tag = g->tag;
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
	for (size_t i = 0; i < g->conf.n_backends; i++) {
		char addr[UDPLB_ADDR_TEXT_MAX];
		bool up;
		uint64_t n;
		udplb_group_backend(g, i, addr, sizeof addr, &up, &n);
		fprintf(out, "udp_lb %s: backend %s %s flows_created=%" PRIu64 "\n", tag, addr,
		        up ? "up" : "down", n);
	}
	fflush(out);
}
