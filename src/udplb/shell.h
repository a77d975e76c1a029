/* shell.h - the UDP load balancer's I/O shell: one listener socket per worker, a connected socket per flow, health checks, counters. */
#ifndef ETM_UDPLB_SHELL_H
#define ETM_UDPLB_SHELL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <uv.h>

#include "udplb/conf.h"

/* The shell is everything the core (manager.h) leaves out: sockets, the
 * clock, randomness. Per udp_lb inbound there is one group, shared by the
 * workers; per worker one listener, which owns its core, its flow sockets
 * and its own copy of the backend view. The kernel spreads clients over the
 * workers' SO_REUSEPORT sockets by source IP (a classic BPF program), so a
 * worker owns every flow of the client IPs it sees.
 *
 * A reload changes a running group in three steps, the supervisor's
 * prepare and commit (docs/reload.md):
 *
 *   udplb_group_prepare    control thread: builds the new state, or fails
 *                          with nothing changed (udplb_group_abort drops it)
 *   udplb_health_switch    on the checks' loop (worker 0's)
 *   udplb_listener_apply   on each worker, for its listener
 *   udplb_group_commit     control thread, once every worker has moved
 *
 * Live flows keep their backend while it stays in the cluster; the flows of
 * a backend that left close at once (counted as evicted, removed). */

/* Datagrams one recvmmsg / sendmmsg moves. */
#define UDPLB_BATCH 32
/* Datagrams toward backends held over one receive round, so that a
 * flow's share leaves in one send: as many as one UDP GSO send carries. */
#define UDPLB_GATHER 64
/* Datagrams queued on one flow's socket when the kernel refuses more, and
 * on a listener's socket toward clients: past these a datagram drops
 * (queue_full). UDP is best effort; these bound memory, not loss. */
#define UDPLB_FLOW_QUEUE_MAX 32
#define UDPLB_LISTENER_QUEUE_MAX 1024
/* Messages (each a reply or a coalesced train of up to 64) one flow may
 * deliver per readiness event, so one busy backend cannot starve the
 * rest of the loop for long. */
#define UDPLB_FLOW_READS_MAX 64
/* The share of the soft RLIMIT_NOFILE automatic max_flows takes, in
 * percent, and what it assumes when the limit cannot be read. */
#define UDPLB_AUTO_FLOWS_PERCENT 70
#define UDPLB_AUTO_FLOWS_FALLBACK 1024

/* Drops the shell adds to the core's reasons (msg.h). */
enum {
	UDPLB_SHELL_DROP_QUEUE_FULL = UDPLB_DROP_COUNT, /* a send queue was full */
	UDPLB_SHELL_DROP_OPEN_FAILED, /* a flow's socket could not open (EMFILE, ...) */
	UDPLB_SHELL_DROP_SEND_ERROR,  /* the kernel refused a send (ICMP unreachable, ...) */
	UDPLB_SHELL_DROP_COUNT,
};

/* The metric label of a drop index below UDPLB_SHELL_DROP_COUNT. */
const char *udplb_shell_drop_name(unsigned i);

/* A snapshot of a group's counters, summed over its workers
 * (docs/udp-lb.md "Metrics" names each). The supervisor copies it into the
 * public etm_udplb_stats, and checks there that the two agree. */
typedef struct udplb_totals {
	uint64_t active_flows;
	uint64_t flows_created, flows_evicted, flows_shed;
	uint64_t datagrams_to_backends, bytes_to_backends;
	uint64_t datagrams_to_clients, bytes_to_clients;
	uint64_t flow_duration_ms;              /* summed over evicted flows */
	uint64_t sockets_reused;                /* flows given a pooled upstream socket */
	uint64_t drops[UDPLB_SHELL_DROP_COUNT]; /* index i is udplb_shell_drop_name(i) */
	uint64_t evicted[UDPLB_CLOSE_COUNT];    /* index i is udplb_close_name(i) */
} udplb_totals;

typedef struct udplb_group udplb_group;
typedef struct udplb_listener udplb_listener;
typedef struct udplb_health udplb_health;

/* What one udp_lb inbound's group is built from (supervisor/build_udplb.c
 * fills it from the spec). Every pointer is borrowed until udplb_group_new
 * or udplb_group_prepare returns: the group copies what it keeps, so the
 * config may go after. */
typedef struct udplb_group_config {
	const char *tag;         /* the inbound's: metric and log lines */
	const char *cluster_tag; /* the cluster's: health log lines */
	udplb_conf conf;         /* checked (udplb_conf_load) */
	uint64_t max_flows;      /* over all workers; 0: the automatic budget */
	uint64_t max_rx;         /* longer datagrams drop; clamped to UDPLB_DATAGRAM_MAX */
	udplb_health_config health;
} udplb_group_config;

/* Builds the group of cfg for n_workers workers, with one reference, the
 * caller's. flows_budget is the automatic max_flows (used when cfg says 0).
 * The random hash key is drawn here, once, for every worker and for the
 * group's life. Returns NULL with the reason in err. Keeps no pointer into
 * cfg. */
udplb_group *udplb_group_new(const udplb_group_config *cfg, size_t n_workers,
                             uint32_t flows_budget, char *err, size_t err_size);
/* Gives the caller's reference back (NULL is fine). Each listener holds one
 * too, until its memory goes after udplb_listener_close: the group lives on
 * until the last is gone, so the owner may let go right after the close. */
void udplb_group_unref(udplb_group *g);

/* ---- reloads (the order is in the comment at the top) ---- */

/* Control thread. Builds what cfg makes of the group: the cluster, its
 * backends (health carried over for the addresses that stay, a new one
 * starting up), limits, timeouts, health settings, names; and, for each
 * worker, the view and reuse pool its listener will take, so that nothing
 * after this can fail. Replaces a state prepared before and not committed.
 * Returns 0, or -1 with "out of memory" or "cluster <tag>: <reason>" in
 * err, and then nothing changed. */
__attribute__((warn_unused_result)) int udplb_group_prepare(udplb_group *g,
                                                            const udplb_group_config *cfg,
                                                            uint32_t flows_budget, char *err,
                                                            size_t err_size);
/* Control thread. Drops the prepared state, if any. */
void udplb_group_abort(udplb_group *g);
/* Control thread, after udplb_health_switch and every listener's
 * udplb_listener_apply: the prepared state becomes the group's, the old one
 * goes. No-op without a prepared state. */
void udplb_group_commit(udplb_group *g);

/* On l's worker thread, between udplb_group_prepare and udplb_group_commit:
 * the listener moves to the prepared state. New flows take the new cluster
 * and limits (max_flows, max_rx_datagram_size); live flows keep their
 * backend and the contract they were admitted with (timeouts, caps, PROXY
 * header); the flows of a backend that left close now (evicted, removed);
 * sockets waiting for reuse close. A change of how clients are spread over
 * the workers (max_flows_per_subnet turned on or off, or its prefix
 * lengths) re-steers them, and a client that lands on another worker opens
 * a new flow there. Cannot fail. No-op when nothing is prepared. */
void udplb_listener_apply(udplb_listener *l);

/* The automatic max_flows budget of one inbound out of n_lb udp_lb
 * inbounds: UDPLB_AUTO_FLOWS_PERCENT of the soft RLIMIT_NOFILE, shared
 * evenly, at least 1. */
uint32_t udplb_auto_flows(size_t n_lb);

/* Opens worker worker_index's listener on loop (that loop's thread only):
 * a UDP socket bound to ip:port with SO_REUSEPORT. Returns NULL with
 * "failed to listen on <ip>:<port>: <reason>" in err. */
udplb_listener *udplb_listener_open(udplb_group *g, uv_loop_t *loop, size_t worker_index,
                                    const char *ip, uint16_t port, char *err, size_t err_size);

/* The port bound (useful with port 0). */
uint16_t udplb_listener_port(const udplb_listener *l);

/* The front socket clients send to (an upgrade passes it on); it stays
 * l's. */
int udplb_listener_fd(const udplb_listener *l);

/* Closes every flow (each counted as evicted, closed), then the listener;
 * memory goes once the loop has run the close callbacks. */
void udplb_listener_close(udplb_listener *l);

/* Starts the cluster's health checks on loop, when it has [cluster.health]
 * (otherwise returns NULL and nothing runs): per backend, every interval, a
 * TCP connect to the companion port and, when configured, a UDP probe;
 * rise/fall hysteresis; state changes log "udp_lb cluster <tag>: backend
 * <addr> is now down" / "is now up" and reach every worker's view before
 * its next batch. */
udplb_health *udplb_health_start(udplb_group *g, uv_loop_t *loop);
/* Stops the probes; memory goes with the close callbacks. NULL is fine. */
void udplb_health_stop(udplb_health *h);
/* On the checks' loop, between udplb_group_prepare and udplb_group_commit:
 * stops h (the checks of g's current state, NULL when none run) and starts
 * those of the prepared state, at once. A backend that stays keeps its
 * state, up or down, and its run of good or failed probes; a new one
 * starts up. Returns the new checks, or NULL when the prepared cluster has
 * no [cluster.health] (every backend then counts as up). With nothing
 * prepared, returns h unchanged. */
udplb_health *udplb_health_switch(udplb_health *h, udplb_group *g, uv_loop_t *loop);

/* ---- counters ---- */

void udplb_group_totals(const udplb_group *g, udplb_totals *out);
size_t udplb_group_backend_count(const udplb_group *g);
/* Backend i's address text, health and the flows it was given. */
void udplb_group_backend(const udplb_group *g, size_t i, char *addr, size_t addr_size, bool *up,
                         uint64_t *flows_created);

/* Writes the group's metric lines (docs/udp-lb.md "Metrics"). */
void udplb_group_write(const udplb_group *g, FILE *out);

#endif
