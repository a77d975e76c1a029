/* api_engine.c - the admin API's provider backed by the running engine: etm_supervisor_*'s tracker, balancers and udp_lb counters, the log level, the reloader and the metrics writer. */
#include "app/api_engine.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"

static int p_flows(void *ctx, int closed, etm_flow_list *out)
{
	return etm_supervisor_flows(((const api_http_conf *)ctx)->sup, closed, out);
}

static void p_traffic(void *ctx, uint64_t *up, uint64_t *down)
{
	etm_supervisor_traffic(((const api_http_conf *)ctx)->sup, up, down);
}

static int p_kill(void *ctx, uint64_t id)
{
	return etm_supervisor_kill(((const api_http_conf *)ctx)->sup, id);
}

static size_t p_kill_where(void *ctx, const etm_flow_filter *f)
{
	return etm_supervisor_kill_where(((const api_http_conf *)ctx)->sup, f);
}

static int p_users(void *ctx, etm_user_list *out)
{
	return etm_supervisor_users(((const api_http_conf *)ctx)->sup, out);
}

static long p_remove_user(void *ctx, const char *inbound, const char *name, char *err,
                          size_t err_size)
{
	return etm_supervisor_remove_user(((const api_http_conf *)ctx)->sup, inbound, name, err,
	                                  err_size);
}

static long p_upsert_user(void *ctx, const char *inbound, const etm_user_spec *u, char *err,
                          size_t err_size)
{
	return etm_supervisor_upsert_user(((const api_http_conf *)ctx)->sup, inbound, u, err,
	                                  err_size);
}

static int p_usage(void *ctx, etm_usage_list *out)
{
	return etm_supervisor_usage(((const api_http_conf *)ctx)->sup, ETM_USAGE_USER, out);
}

static int p_member_up(void *ctx, size_t i, size_t j, int *up)
{
	const char *b, *m;
	return etm_supervisor_balancer_member(((const api_http_conf *)ctx)->sup, i, j, &b, &m, up);
}

static int p_member_probe(void *ctx, size_t i, size_t j, int64_t *delay, uint64_t *when)
{
	return etm_supervisor_member_probe(((const api_http_conf *)ctx)->sup, i, j, delay, when);
}

static uint16_t p_inbound_port(void *ctx, const char *tag)
{
	etm_supervisor *s = ((const api_http_conf *)ctx)->sup;
	for (size_t i = 0, n = etm_supervisor_inbound_count(s); i < n; i++) {
		const char *t = etm_supervisor_inbound_tag(s, i);
		if (t && strcmp(t, tag) == 0)
			return etm_supervisor_inbound_port(s, i);
	}
	return 0;
}

static int p_log_level(void *ctx)
{
	(void)ctx;
	return log_get_level();
}

static void p_set_log_level(void *ctx, int level)
{
	(void)ctx;
	log_set_level(level);
}

static int p_reload(void *ctx, char *err, size_t size)
{
	const api_http_conf *c = ctx;
	return c->reload(c->reload_arg, err, size);
}

static int p_metrics(void *ctx, api_buf *out)
{
	const api_http_conf *c = ctx;
	uint64_t refused = c->metrics ? metrics_http_refused(*c->metrics) : 0;
	return metrics_http_collect(c->sup, c->reloads, c->start_time, refused, out);
}

static int p_udplb(void *ctx, size_t i, const char **tag, etm_udplb_stats *st)
{
	etm_supervisor *s = ((const api_http_conf *)ctx)->sup;
	if (i >= etm_supervisor_inbound_count(s))
		return -2;
	if (etm_supervisor_udplb_stats(s, i, st))
		return -1;
	*tag = etm_supervisor_inbound_tag(s, i);
	return 0;
}

static int p_udplb_backend(void *ctx, size_t i, size_t j, char *addr, size_t size, int *up,
                           uint64_t *flows)
{
	return etm_supervisor_udplb_backend(((const api_http_conf *)ctx)->sup, i, j, addr, size, up,
	                                    flows);
}

/* The resident set (proc(5), /proc/self/statm's second field). */
static uint64_t p_memory(void *ctx)
{
	(void)ctx;
	unsigned long long size = 0, rss = 0;
	FILE *f = fopen("/proc/self/statm", "r");
	if (!f)
		return 0;
	if (fscanf(f, "%llu %llu", &size, &rss) != 2)
		rss = 0;
	fclose(f);
	return (uint64_t)rss * (uint64_t)sysconf(_SC_PAGESIZE);
}

void api_engine_provider(const api_http_conf *conf, api_provider *out)
{
	*out = (api_provider){
		.ctx = (void *)conf,
		.flows = p_flows,
		.traffic = p_traffic,
		.kill = p_kill,
		.kill_where = p_kill_where,
		.usage_users = p_usage,
		.users = p_users,
		.remove_user = p_remove_user,
		.upsert_user = p_upsert_user,
		.member_up = p_member_up,
		.member_probe = p_member_probe,
		.inbound_port = p_inbound_port,
		.log_level = p_log_level,
		.set_log_level = p_set_log_level,
		.reload = p_reload,
		.metrics = p_metrics,
		.udplb = p_udplb,
		.udplb_backend = p_udplb_backend,
		.memory = p_memory,
	};
}
