/* metrics.h - the Prometheus text exposition (format 0.0.4) of a snapshot of the engine's counters: no I/O, no clock. */
#ifndef ETM_APP_METRICS_H
#define ETM_APP_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "etemenanki/supervisor.h"

/* The Content-Type of what metrics_write produces (the exposition
 * format's own, https://prometheus.io/docs/instrumenting/exposition_formats/). */
#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

typedef struct metrics_backend {
	char addr[ETM_UDPLB_ADDR_MAX]; /* "ip:port" */
	int up;
	uint64_t flows_created;
} metrics_backend;

typedef struct metrics_udplb {
	const char *tag; /* the inbound's tag; borrowed */
	etm_udplb_stats st;
	size_t n_backends;
	metrics_backend *backends; /* borrowed */
} metrics_udplb;

typedef struct metrics_member {
	const char *balancer, *member; /* tags; borrowed */
	int up;
	int64_t probe_ms;       /* the last probe's delay; -1: it failed, or none yet */
	uint64_t probe_when_ms; /* Unix ms the last probe ended; 0: none yet */
	uint64_t probes, probes_failed; /* ended since the balancer was built, and failed */
} metrics_member;

/* The usage tables a snapshot carries, in this order (etm_usage_by). */
#define METRICS_USAGE_KINDS 3

/* What one scrape shows. Every pointer is borrowed for the call. */
typedef struct metrics_snapshot {
	const char *version, *commit;
	uint64_t start_time;  /* Unix seconds */
	uint64_t flows_open;  /* client connections open on every worker */
	uint64_t flows_total; /* client connections ever opened */
	uint64_t epoch;       /* the published plane's */
	etm_guard_stats guard;
	uint64_t reloads_ok, reloads_failed;
	uint64_t scrape_connections_refused; /* the metrics server's own */
	size_t n_members; /* every balancer's members, a tag listed twice once */
	const metrics_member *members;
	size_t n_udplb;
	const metrics_udplb *udplb;
	uint64_t dial_errors[ETM_DIAL_ERROR_KINDS]; /* index i: etm_dial_error_name(i) */
	etm_dns_cache_stats dns;
	etm_dns_service_stats dns_service; /* its families only when running */
	etm_tls_handshake_stats tls;
	/* flows and bytes by inbound, outbound and user, indexed by
	 * etm_usage_by; the lists borrowed */
	etm_usage_list usage[METRICS_USAGE_KINDS];
} metrics_snapshot;

/* A growing text buffer; a zeroed one is empty. */
typedef struct metrics_buf {
	char *p; /* owned; NUL-terminated once something was written */
	size_t len, cap;
	int failed; /* an allocation failed: the text is incomplete */
} metrics_buf;

void metrics_buf_free(metrics_buf *b);

/* Appends s[0, n) and keeps the text NUL-terminated. Returns 0, or -1
 * when memory ran out (b->failed is set, and every later append fails
 * too). */
int metrics_buf_put(metrics_buf *b, const char *s, size_t n);

/* Appends the exposition of s to b: a HELP and a TYPE line before the
 * samples of each family, the families always in the same order, label
 * values escaped (metrics_escape). Returns 0, or -1 when memory ran out
 * (b->failed is set; free it). */
__attribute__((warn_unused_result)) int metrics_write(const metrics_snapshot *s, metrics_buf *b);

/* Appends v as a label value: backslash, double quote and line feed
 * become \\, \" and \n; nothing else changes. Returns 0 or -1 as above. */
__attribute__((warn_unused_result)) int metrics_escape(metrics_buf *b, const char *v);

#endif
