/* counters.c - counts the metrics read that no other module keeps: failed stream opens by kind, per worker; the DNS cache's, read through. */
#include <stdint.h>

#include "supervisor/actor.h"
#include "transport/tls.h"

/* The metric's reason labels, one per proto_dial_error (proto/proto.h). */
static const char *const NAMES[PROTO_DIAL_ERR_KINDS] = {
	[PROTO_DIAL_GENERAL] = "general",
	[PROTO_DIAL_NOT_ALLOWED] = "not_allowed",
	[PROTO_DIAL_NET_UNREACHABLE] = "net_unreachable",
	[PROTO_DIAL_HOST_UNREACHABLE] = "host_unreachable",
	[PROTO_DIAL_REFUSED] = "refused",
	[PROTO_DIAL_TIMED_OUT] = "timed_out",
};
_Static_assert(ETM_DIAL_ERROR_KINDS == PROTO_DIAL_ERR_KINDS, "a dial error kind added to one only");

void sup_count_dial_error(worker *w, proto_dial_error kind)
{
	sup_route *rs = worker_slot(w);
	size_t k = (size_t)kind < PROTO_DIAL_ERR_KINDS ? (size_t)kind : PROTO_DIAL_GENERAL;
	rs->dial_errors[k]++;
}

const char *etm_dial_error_name(size_t i)
{
	return i < PROTO_DIAL_ERR_KINDS ? NAMES[i] : "unknown";
}

/* Runs on each worker in turn (worker_run): its counts are its own
 * thread's, read there, so they need no atomics. */
static void add_counts(worker *w, void *arg)
{
	uint64_t *sum = arg;
	const sup_route *rs = worker_slot(w);
	for (size_t k = 0; rs && k < PROTO_DIAL_ERR_KINDS; k++)
		sum[k] += rs->dial_errors[k];
}

void etm_supervisor_dial_errors(etm_supervisor *s, uint64_t out[ETM_DIAL_ERROR_KINDS])
{
	for (size_t k = 0; k < ETM_DIAL_ERROR_KINDS; k++)
		out[k] = 0;
	for (size_t i = 0; i < workers_count(s->ws); i++)
		worker_run(workers_at(s->ws, i), add_counts, out);
}

void etm_tls_handshakes(etm_tls_handshake_stats *out)
{
	uint64_t c[2], s[2];
	tls_handshake_counts(c, s);
	*out = (etm_tls_handshake_stats){.client_full = c[0], .client_resumed = c[1],
	                                 .server_full = s[0], .server_resumed = s[1]};
}

_Static_assert(sizeof(etm_dns_cache_stats) == sizeof(dns_cache_stats), "a count added to one only");

static void add_dns_counts(worker *w, void *arg)
{
	etm_dns_service_stats *out = arg;
	const dns_svc_stats *c = &((sup_route *)worker_slot(w))->dns_counts;
	out->queries += c->queries;
	out->hosts += c->hosts;
	out->cached += c->cached;
	out->upstream += c->upstream;
	out->servfail += c->servfail;
	out->formerr += c->formerr;
}

void etm_supervisor_dns_service_stats(etm_supervisor *s, etm_dns_service_stats *out)
{
	*out = (etm_dns_service_stats){.running = s->dns_conf != NULL};
	if (!out->running)
		return;
	for (size_t i = 0; i < workers_count(s->ws); i++)
		worker_run(workers_at(s->ws, i), add_dns_counts, out);
	if (s->dns_conf->cache) {
		dns_answers_stats st;
		dns_answers_stats_get(s->dns_conf->cache, &st);
		out->cache_misses = st.misses;
		out->cache_negative_hits = st.negative_hits;
		out->cache_evictions = st.evictions;
		out->cache_prefetches = st.prefetches;
		out->cache_entries = st.entries;
	}
}

void etm_supervisor_dns_cache_stats(const etm_supervisor *s, etm_dns_cache_stats *out)
{
	dns_cache_stats st;
	dns_cache_stats_get(s->cache, &st);
	*out = (etm_dns_cache_stats){.hits = st.hits,
	                             .negative = st.negative,
	                             .misses = st.misses,
	                             .evictions = st.evictions,
	                             .entries = st.entries};
}
