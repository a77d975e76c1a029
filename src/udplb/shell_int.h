/* shell_int.h - what the listener (shell.c) and the health checks (health.c) share: the group and its counters. */
#ifndef ETM_UDPLB_SHELL_INT_H
#define ETM_UDPLB_SHELL_INT_H

#include "udplb/shell.h"

/* One worker's counters. Each has one writer, its worker, and any thread
 * may read them (relaxed loads): a metrics read never stops the datapath. */
typedef struct udplb_counters {
	_Atomic uint64_t active_flows;
	_Atomic uint64_t flows_created, flows_evicted, flows_shed;
	_Atomic uint64_t datagrams_to_backends, bytes_to_backends;
	_Atomic uint64_t datagrams_to_clients, bytes_to_clients;
	_Atomic uint64_t flow_duration_ms;
	_Atomic uint64_t drops[UDPLB_SHELL_DROP_COUNT];
	_Atomic uint64_t evicted[UDPLB_CLOSE_COUNT];
	_Atomic uint64_t *backend_flows; /* per backend: flows given to it */
} udplb_counters;

struct udplb_group {
	const etm_inbound_spec *in;
	const etm_cluster_spec *cl;
	udplb_conf conf;
	udplb_seed seed;
	size_t n_workers;
	uint32_t max_flows; /* per worker */
	uint32_t max_rx;
	/* Health, written by the checks' loop, read by every worker: a
	 * worker copies the flags into its view when the generation moved. */
	_Atomic unsigned char *up;
	_Atomic uint64_t health_gen;
	void *ctr; /* n_workers cache-line-aligned udplb_counters */
};

udplb_counters *udplb_group_counters(const udplb_group *g, size_t worker);

#endif
