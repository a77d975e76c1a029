/* metrics.c - writes a snapshot of the engine's counters in the Prometheus text exposition format 0.0.4. */
#include "app/metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/vec.h"

void metrics_buf_free(metrics_buf *b)
{
	free(b->p);
	*b = (metrics_buf){0};
}

int metrics_buf_put(metrics_buf *b, const char *s, size_t n)
{
	if (b->failed)
		return -1;
	/* one more for the NUL that keeps the text a C string */
	if (vec_reserve(&b->p, &b->cap, b->len, n + 1)) {
		b->failed = 1;
		return -1;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
	return 0;
}

static int puts_(metrics_buf *b, const char *s) { return metrics_buf_put(b, s, strlen(s)); }

/* Formats are this file's constants; values are numbers. */
__attribute__((format(printf, 2, 3))) static int putf(metrics_buf *b, const char *fmt, ...)
{
	char tmp[128];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof tmp) {
		b->failed = 1;
		return -1;
	}
	return metrics_buf_put(b, tmp, (size_t)n);
}

int metrics_escape(metrics_buf *b, const char *v)
{
	/* text exposition format, "Line format": a label value escapes
	 * backslash, double quote and line feed */
	for (const char *p = v; *p; p++) {
		const char *rep = *p == '\\' ? "\\\\" : *p == '"' ? "\\\"" : *p == '\n' ? "\\n" : NULL;
		if (rep ? puts_(b, rep) : metrics_buf_put(b, p, 1))
			return -1;
	}
	return 0;
}

/* "# HELP" and "# TYPE" of one family. The help texts are constants
 * without a backslash or a line feed, the only characters HELP escapes. */
static void family(metrics_buf *b, const char *name, const char *type, const char *help)
{
	(void)(puts_(b, "# HELP ") || puts_(b, name) || puts_(b, " ") || puts_(b, help) ||
	       puts_(b, "\n# TYPE ") || puts_(b, name) || puts_(b, " ") || puts_(b, type) ||
	       puts_(b, "\n"));
}

/* name{k1="v1",k2="v2"} and the space before the value: up to two labels
 * (k NULL for none). Returns 0 or -1 as put. */
static int series(metrics_buf *b, const char *name, const char *k1, const char *v1,
                  const char *k2, const char *v2)
{
	if (puts_(b, name))
		return -1;
	if (k1) {
		if (puts_(b, "{") || puts_(b, k1) || puts_(b, "=\"") || metrics_escape(b, v1) ||
		    puts_(b, "\""))
			return -1;
		if (k2 && (puts_(b, ",") || puts_(b, k2) || puts_(b, "=\"") ||
		           metrics_escape(b, v2) || puts_(b, "\"")))
			return -1;
		if (puts_(b, "}"))
			return -1;
	}
	return puts_(b, " ");
}

static void sample(metrics_buf *b, const char *name, const char *k1, const char *v1,
                   const char *k2, const char *v2, unsigned long long value)
{
	if (series(b, name, k1, v1, k2, v2) == 0)
		(void)putf(b, "%llu\n", value);
}

/* A count of milliseconds as seconds, the base unit (Prometheus naming
 * practices), exactly: 12345 is "12.345". */
static void sample_ms(metrics_buf *b, const char *name, const char *k1, const char *v1,
                      const char *k2, const char *v2, uint64_t ms)
{
	if (series(b, name, k1, v1, k2, v2) == 0)
		(void)putf(b, "%llu.%03llu\n", (unsigned long long)(ms / 1000),
		           (unsigned long long)(ms % 1000));
}

/* The per-inbound counters of a udp_lb listener, named after seed 001's
 * udp.* metrics: dots become underscores, the prefix etemenanki_ is
 * added and a counter ends in _total. */
typedef struct udp_family {
	const char *name, *type, *help;
	size_t offset; /* of the uint64_t in etm_udplb_stats */
} udp_family;

#define UF(n, t, field, h) {n, t, h, offsetof(etm_udplb_stats, field)}
static const udp_family UDP_FAMILIES[] = {
	UF("etemenanki_udp_active_flows", "gauge", active_flows,
	   "UDP load-balancer flows open now."),
	UF("etemenanki_udp_flows_created_total", "counter", flows_created,
	   "UDP load-balancer flows opened."),
	UF("etemenanki_udp_flows_evicted_total", "counter", flows_evicted,
	   "UDP load-balancer flows closed, for any reason."),
	UF("etemenanki_udp_flows_shed_total", "counter", flows_shed,
	   "New UDP flows refused by a limit (the sum of the shed_* drops)."),
	UF("etemenanki_udp_datagrams_to_backends_total", "counter", datagrams_to_backends,
	   "Client datagrams sent toward a backend."),
	UF("etemenanki_udp_bytes_to_backends_total", "counter", bytes_to_backends,
	   "Payload bytes of the client datagrams sent toward a backend."),
	UF("etemenanki_udp_datagrams_to_clients_total", "counter", datagrams_to_clients,
	   "Backend datagrams relayed back to clients."),
	UF("etemenanki_udp_bytes_to_clients_total", "counter", bytes_to_clients,
	   "Payload bytes of the backend datagrams relayed back to clients."),
	UF("etemenanki_udp_sockets_reused_total", "counter", sockets_reused,
	   "New UDP flows that took a waiting upstream socket instead of opening one."),
};

static void udp_families(const metrics_snapshot *s, metrics_buf *b)
{
	for (size_t f = 0; f < sizeof UDP_FAMILIES / sizeof *UDP_FAMILIES; f++) {
		const udp_family *uf = &UDP_FAMILIES[f];
		family(b, uf->name, uf->type, uf->help);
		for (size_t i = 0; i < s->n_udplb; i++) {
			uint64_t v;
			memcpy(&v, (const char *)&s->udplb[i].st + uf->offset, sizeof v);
			sample(b, uf->name, "inbound", s->udplb[i].tag, NULL, NULL, v);
		}
	}
	/* the engine sums milliseconds */
	const char *dur = "etemenanki_udp_flow_duration_seconds_total";
	family(b, dur, "counter", "The summed lifetime of every closed UDP flow.");
	for (size_t i = 0; i < s->n_udplb; i++)
		sample_ms(b, dur, "inbound", s->udplb[i].tag, NULL, NULL, s->udplb[i].st.flow_duration_ms);
	const char *drop = "etemenanki_udp_datagrams_dropped_total";
	family(b, drop, "counter", "UDP datagrams dropped, by reason (seed 001 udp.datagrams.dropped).");
	for (size_t i = 0; i < s->n_udplb; i++)
		for (size_t k = 0; k < ETM_UDPLB_DROP_KINDS; k++)
			sample(b, drop, "inbound", s->udplb[i].tag, "reason", etm_udplb_drop_name(k),
			       s->udplb[i].st.drops[k]);
	const char *wq = "etemenanki_udp_datagrams_dropped_wq_full_total";
	family(b, wq, "counter",
	       "UDP datagrams dropped because a flow's write queue was full (seed 001 "
	       "udp.datagrams.dropped.wq_full; also reason=\"queue_full\" above).");
	for (size_t i = 0; i < s->n_udplb; i++)
		for (size_t k = 0; k < ETM_UDPLB_DROP_KINDS; k++)
			if (strcmp(etm_udplb_drop_name(k), "queue_full") == 0)
				sample(b, wq, "inbound", s->udplb[i].tag, NULL, NULL,
				       s->udplb[i].st.drops[k]);
	const char *closed = "etemenanki_udp_flows_closed_total";
	family(b, closed, "counter", "UDP flows closed, by reason.");
	for (size_t i = 0; i < s->n_udplb; i++)
		for (size_t k = 0; k < ETM_UDPLB_CLOSE_KINDS; k++)
			sample(b, closed, "inbound", s->udplb[i].tag, "reason", etm_udplb_close_name(k),
			       s->udplb[i].st.evicted[k]);
	const char *up = "etemenanki_udp_backend_up";
	family(b, up, "gauge", "Whether a UDP backend passes its health checks (1) or not (0).");
	for (size_t i = 0; i < s->n_udplb; i++)
		for (size_t k = 0; k < s->udplb[i].n_backends; k++)
			sample(b, up, "inbound", s->udplb[i].tag, "backend",
			       s->udplb[i].backends[k].addr, s->udplb[i].backends[k].up ? 1 : 0);
	const char *bf = "etemenanki_udp_backend_flows_created_total";
	family(b, bf, "counter", "UDP flows given to a backend.");
	for (size_t i = 0; i < s->n_udplb; i++)
		for (size_t k = 0; k < s->udplb[i].n_backends; k++)
			sample(b, bf, "inbound", s->udplb[i].tag, "backend",
			       s->udplb[i].backends[k].addr, s->udplb[i].backends[k].flows_created);
}

/* The families of one usage table (etm_supervisor_usage): flows open,
 * flows ever registered, bytes each way, under the table's label. */
typedef struct usage_family {
	const char *label;
	const char *open, *total, *bytes;
	const char *open_help, *total_help, *bytes_help;
} usage_family;

static const usage_family USAGE[METRICS_USAGE_KINDS] = {
	[ETM_USAGE_INBOUND] =
		{"inbound", "etemenanki_inbound_flows_open", "etemenanki_inbound_flows_total",
		 "etemenanki_inbound_bytes_total",
		 "Flows open now, by the inbound that accepted them.",
		 "Flows opened since the start, by inbound.",
		 "App bytes of the flows, by inbound and direction (up: from the client)."},
	[ETM_USAGE_OUTBOUND] =
		{"outbound", "etemenanki_outbound_flows_open", "etemenanki_outbound_flows_total",
		 "etemenanki_outbound_bytes_total",
		 "Flows open now, by the outbound that carries them (a balancer's member).",
		 "Flows opened since the start, by outbound.",
		 "App bytes of the flows, by outbound and direction (up: from the client)."},
	[ETM_USAGE_USER] =
		{"user", "etemenanki_user_flows_open", "etemenanki_user_flows_total",
		 "etemenanki_user_bytes_total",
		 "Flows open now, by user (user=\"\": flows without one).",
		 "Flows opened since the start, by user.",
		 "App bytes of the flows, by user and direction (up: from the client)."},
};

static void usage_families(const usage_family *u, const etm_usage_list *l, metrics_buf *b)
{
	family(b, u->open, "gauge", u->open_help);
	for (size_t i = 0; i < l->n; i++)
		sample(b, u->open, u->label, l->v[i].name, NULL, NULL, l->v[i].open);
	family(b, u->total, "counter", u->total_help);
	for (size_t i = 0; i < l->n; i++)
		sample(b, u->total, u->label, l->v[i].name, NULL, NULL, l->v[i].total);
	family(b, u->bytes, "counter", u->bytes_help);
	for (size_t i = 0; i < l->n; i++) {
		sample(b, u->bytes, u->label, l->v[i].name, "direction", "up", l->v[i].up);
		sample(b, u->bytes, u->label, l->v[i].name, "direction", "down", l->v[i].down);
	}
}

static void probe_families(const metrics_snapshot *s, metrics_buf *b)
{
	const char *n = "etemenanki_balancer_member_probe_seconds";
	/* NaN rather than no sample: the series of a member stays one series
	 * whether its probes pass or fail, and a failed probe has no delay */
	family(b, n, "gauge",
	       "The last health probe's time to connect; NaN when it failed or none has ended.");
	for (size_t i = 0; i < s->n_members; i++) {
		const metrics_member *m = &s->members[i];
		if (m->probe_ms >= 0)
			sample_ms(b, n, "balancer", m->balancer, "member", m->member,
			          (uint64_t)m->probe_ms);
		else if (series(b, n, "balancer", m->balancer, "member", m->member) == 0)
			(void)puts_(b, "NaN\n");
	}
	n = "etemenanki_balancer_member_probe_timestamp_seconds";
	family(b, n, "gauge",
	       "When the last health probe ended, in seconds since the Unix epoch; 0 before the "
	       "first.");
	for (size_t i = 0; i < s->n_members; i++)
		sample_ms(b, n, "balancer", s->members[i].balancer, "member", s->members[i].member,
		          s->members[i].probe_when_ms);
	n = "etemenanki_balancer_member_probes_total";
	family(b, n, "counter", "Health probes ended, since the balancer was built.");
	for (size_t i = 0; i < s->n_members; i++)
		sample(b, n, "balancer", s->members[i].balancer, "member", s->members[i].member,
		       s->members[i].probes);
	n = "etemenanki_balancer_member_probes_failed_total";
	family(b, n, "counter", "Health probes that failed, since the balancer was built.");
	for (size_t i = 0; i < s->n_members; i++)
		sample(b, n, "balancer", s->members[i].balancer, "member", s->members[i].member,
		       s->members[i].probes_failed);
}

/* A family of one sample, its value the uint64_t at offset in a struct. */
typedef struct stat_family {
	const char *name, *type, *help;
	size_t offset;
} stat_family;

static void unlabelled_families(const void *base, const stat_family *F, size_t n, metrics_buf *b)
{
	for (size_t f = 0; f < n; f++) {
		uint64_t v;
		memcpy(&v, (const char *)base + F[f].offset, sizeof v);
		family(b, F[f].name, F[f].type, F[f].help);
		sample(b, F[f].name, NULL, NULL, NULL, NULL, v);
	}
}

static void dns_families(const metrics_snapshot *s, metrics_buf *b)
{
	static const stat_family F[] = { /* offsets in etm_dns_cache_stats */
		{"etemenanki_dns_cache_hits_total", "counter",
		 "DNS lookups answered from the cache with addresses.",
		 offsetof(etm_dns_cache_stats, hits)},
		{"etemenanki_dns_cache_negative_hits_total", "counter",
		 "DNS lookups answered from the cache with a name that has no address.",
		 offsetof(etm_dns_cache_stats, negative)},
		{"etemenanki_dns_cache_misses_total", "counter",
		 "DNS lookups the cache could not answer, sent to a server.",
		 offsetof(etm_dns_cache_stats, misses)},
		{"etemenanki_dns_cache_evictions_total", "counter",
		 "DNS cache entries dropped to make room for another.",
		 offsetof(etm_dns_cache_stats, evictions)},
		{"etemenanki_dns_cache_entries", "gauge", "Names the DNS cache holds now.",
		 offsetof(etm_dns_cache_stats, entries)},
	};
	unlabelled_families(&s->dns, F, sizeof F / sizeof *F, b);
}

/* The DNS service's families, when the config has one. */
static void dns_service_families(const metrics_snapshot *s, metrics_buf *b)
{
	if (!s->dns_service.running)
		return;
	static const stat_family F[] = { /* offsets in etm_dns_service_stats */
		{"etemenanki_dns_service_queries_total", "counter",
		 "Queries the DNS service took: clients' and the outbounds' lookups.",
		 offsetof(etm_dns_service_stats, queries)},
		{"etemenanki_dns_service_hosts_answers_total", "counter",
		 "Queries the DNS service answered from [[dns.host]].",
		 offsetof(etm_dns_service_stats, hosts)},
		{"etemenanki_dns_service_cache_answers_total", "counter",
		 "Queries the DNS service answered from its cache.",
		 offsetof(etm_dns_service_stats, cached)},
		{"etemenanki_dns_service_upstream_queries_total", "counter",
		 "Queries the DNS service sent to an upstream, prefetches and retries included.",
		 offsetof(etm_dns_service_stats, upstream)},
		{"etemenanki_dns_service_servfail_total", "counter",
		 "Queries the DNS service answered SERVFAIL (timeouts, failed upstreams).",
		 offsetof(etm_dns_service_stats, servfail)},
		{"etemenanki_dns_service_formerr_total", "counter",
		 "Queries the DNS service could not read.",
		 offsetof(etm_dns_service_stats, formerr)},
		{"etemenanki_dns_service_cache_misses_total", "counter",
		 "Lookups the DNS service's cache could not answer, since it was built.",
		 offsetof(etm_dns_service_stats, cache_misses)},
		{"etemenanki_dns_service_cache_negative_hits_total", "counter",
		 "Cache answers that were NXDOMAIN or empty, since it was built.",
		 offsetof(etm_dns_service_stats, cache_negative_hits)},
		{"etemenanki_dns_service_cache_evictions_total", "counter",
		 "Answers dropped from the DNS service's cache to make room, since it was built.",
		 offsetof(etm_dns_service_stats, cache_evictions)},
		{"etemenanki_dns_service_cache_prefetches_total", "counter",
		 "Popular answers asked again before they expired, since the cache was built.",
		 offsetof(etm_dns_service_stats, cache_prefetches)},
		{"etemenanki_dns_service_cache_entries", "gauge",
		 "Answers the DNS service's cache holds now.",
		 offsetof(etm_dns_service_stats, cache_entries)},
	};
	unlabelled_families(&s->dns_service, F, sizeof F / sizeof *F, b);
}

int metrics_write(const metrics_snapshot *s, metrics_buf *b)
{
	const char *n = "etemenanki_build_info";
	family(b, n, "gauge", "Always 1; the labels name the running build.");
	if (!b->failed && !puts_(b, n) && !puts_(b, "{version=\"") && !metrics_escape(b, s->version) &&
	    !puts_(b, "\",commit=\"") && !metrics_escape(b, s->commit))
		(void)puts_(b, "\"} 1\n");
	n = "etemenanki_start_time_seconds";
	family(b, n, "gauge", "When the process started, in seconds since the Unix epoch.");
	sample(b, n, NULL, NULL, NULL, NULL, s->start_time);
	n = "etemenanki_config_epoch";
	family(b, n, "gauge", "The running config's epoch: 1 at the start, one more per applied reload.");
	sample(b, n, NULL, NULL, NULL, NULL, s->epoch);
	n = "etemenanki_flows_open";
	family(b, n, "gauge", "Client connections open on every worker (flows and mux carriers).");
	sample(b, n, NULL, NULL, NULL, NULL, s->flows_open);
	n = "etemenanki_flows_total";
	family(b, n, "counter", "Client connections opened (TCP accepted, gRPC streams served).");
	sample(b, n, NULL, NULL, NULL, NULL, s->flows_total);
	n = "etemenanki_guard_refused_total";
	family(b, n, "counter", "Connections, sub-flows, calls and dials the admission guard refused, by reason.");
	sample(b, n, "reason", "source", NULL, NULL, s->guard.refused_source);
	sample(b, n, "reason", "loop", NULL, NULL, s->guard.refused_loop);
	sample(b, n, "reason", "fanout", NULL, NULL, s->guard.refused_fanout);
	sample(b, n, "reason", "open_rate", NULL, NULL, s->guard.refused_open_rate);
	n = "etemenanki_accept_paused_total";
	family(b, n, "counter", "Listener pauses for lack of file descriptors.");
	sample(b, n, NULL, NULL, NULL, NULL, s->guard.accept_paused);
	n = "etemenanki_reloads_total";
	family(b, n, "counter", "Config reloads, by result.");
	sample(b, n, "result", "ok", NULL, NULL, s->reloads_ok);
	sample(b, n, "result", "failed", NULL, NULL, s->reloads_failed);
	n = "etemenanki_balancer_member_up";
	family(b, n, "gauge", "Whether a balancer member passes its health probes (1) or not (0).");
	for (size_t i = 0; i < s->n_members; i++)
		sample(b, n, "balancer", s->members[i].balancer, "member", s->members[i].member,
		       s->members[i].up ? 1 : 0);
	probe_families(s, b);
	n = "etemenanki_metrics_connections_refused_total";
	family(b, n, "counter", "Connections to this endpoint closed at once: too many were open.");
	sample(b, n, NULL, NULL, NULL, NULL, s->scrape_connections_refused);
	n = "etemenanki_dial_errors_total";
	family(b, n, "counter", "Failed opens of a flow's upstream, by reason.");
	for (size_t k = 0; k < ETM_DIAL_ERROR_KINDS; k++)
		sample(b, n, "reason", etm_dial_error_name(k), NULL, NULL, s->dial_errors[k]);
	n = "etemenanki_tls_handshakes_total";
	family(b, n, "counter", "TLS handshakes completed, by side and whether a session resumed.");
	sample(b, n, "side", "client", "resumed", "false", s->tls.client_full);
	sample(b, n, "side", "client", "resumed", "true", s->tls.client_resumed);
	sample(b, n, "side", "server", "resumed", "false", s->tls.server_full);
	sample(b, n, "side", "server", "resumed", "true", s->tls.server_resumed);
	dns_families(s, b);
	dns_service_families(s, b);
	for (size_t k = 0; k < METRICS_USAGE_KINDS; k++)
		usage_families(&USAGE[k], &s->usage[k], b);
	udp_families(s, b);
	return b->failed ? -1 : 0;
}
