/* manager.h - the UDP load balancer's sans-io core: the flow table, admission, backend selection, teardown and the one idle timer, fed inputs and drained of outputs by the shell. */
#ifndef ETM_UDPLB_MANAGER_H
#define ETM_UDPLB_MANAGER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "udplb/addr.h"
#include "udplb/backends.h"
#include "udplb/hash.h"
#include "udplb/msg.h"
#include "udplb/ppv2.h"

/* The contract with the shell (docs/design/udplb-core.md says it at more
 * length; seed 001 sections 2 to 9):
 *
 *  - The core opens no socket, reads no clock and draws no random number:
 *    the shell passes now_ms (a monotonic clock in milliseconds; a value
 *    earlier than one already seen is taken as that one) with every input,
 *    and the hash key once, at creation.
 *  - After every udplb_manager_input the shell calls udplb_manager_poll
 *    until it returns false and acts on each output in order. Until the
 *    queue is empty the next input is refused with UDPLB_E_BUSY.
 *  - Payload pointers in SEND_TO_BACKEND and SEND_TO_CLIENT are the input's
 *    payload, borrowed: valid until the next udplb_manager_input. A shell
 *    that queues a send copies the bytes.
 *  - One manager serves one listener on one thread. */

/* What a flow id is: the slot number in the low 32 bits, the slot's
 * generation in the high 32. The shell may index an array with the slot
 * (below the largest max_flows it has set); the generation makes an id of a
 * closed flow miss
 * instead of naming the flow that reuses its slot. 0 is never a flow. */
typedef uint64_t udplb_flow_id;
#define UDPLB_FLOW_NONE ((udplb_flow_id)0)

static inline uint32_t udplb_flow_slot(udplb_flow_id id)
{
	return (uint32_t)id;
}

/* The output queue's length. One input other than a timer expiry,
 * CLOSE_ALL or CLOSE_BACKEND emits at most 6 outputs (created, open, send,
 * evicted, close, arm); those three emit 2 per closed flow and are cut into
 * rounds that continue as the shell polls, so a table of any size drains
 * through a fixed queue. */
#define UDPLB_OUTPUT_MAX 64

typedef enum udplb_affinity {
	UDPLB_AFFINITY_SOURCE_IP,      /* every socket of a client IP hashes alike: the default */
	UDPLB_AFFINITY_SOURCE_IP_PORT, /* each client socket hashes on its own */
} udplb_affinity;

typedef enum udplb_ppv2_mode {
	UDPLB_PPV2_NONE,  /* no PROXY header */
	UDPLB_PPV2_FIRST, /* on a flow's first datagram to the backend only */
	UDPLB_PPV2_EVERY, /* on every datagram to the backend */
} udplb_ppv2_mode;

#define UDPLB_IDLE_TIMEOUT_DEFAULT_MS 30000
/* A /24 and a /64 are what one site or one household typically holds, so
 * a per-subnet limit at these lengths bounds one network, not one host. */
#define UDPLB_SUBNET_PREFIX_V4_DEFAULT 24
#define UDPLB_SUBNET_PREFIX_V6_DEFAULT 64

/* The cluster a listener sends to. A new flow takes the cluster in force
 * when it is admitted; a later change does not touch live flows. */
typedef struct udplb_cluster {
	udplb_select selection;
	udplb_affinity affinity;
	uint32_t front_timeout_ms; /* idle after the last client datagram: 1..UDPLB_TIMEOUT_MAX_MS */
	uint32_t back_timeout_ms;  /* idle after the last backend datagram: same range */
	uint32_t responses;        /* close after this many backend datagrams; 0 = no cap (DNS: 1) */
	uint32_t requests;         /* close after this many client datagrams; 0 = no cap */
	uint32_t max_flows_per_ip;     /* 0 = no limit */
	uint32_t max_flows_per_subnet; /* 0 = no limit */
	uint8_t subnet_prefix_v4;      /* 0..32 */
	uint8_t subnet_prefix_v6;      /* 0..128 */
	udplb_ppv2_mode proxy_protocol;
} udplb_cluster;

/* Fills c with the defaults: HRW, source_ip affinity, 30 s both ways, no
 * caps, no per-source limits, /24 and /64, no PROXY header. */
void udplb_cluster_defaults(udplb_cluster *c);

/* Checks c; returns 0 or the error udplb_strerror explains
 * (UDPLB_E_SELECTION, UDPLB_E_AFFINITY, UDPLB_E_TIMEOUT, UDPLB_E_PREFIX,
 * UDPLB_E_PPV2). */
__attribute__((warn_unused_result)) int udplb_cluster_validate(const udplb_cluster *c);

/* How much udplb_manager_check runs after each public mutating call in a
 * build without NDEBUG. CHEAP is O(1) (counters, heap top, armed timer);
 * FULL also walks the table, which makes every datagram O(flows): for
 * tests, the simulator and the fuzzer, not for a debug build under load. */
typedef enum udplb_check_level {
	UDPLB_CHECK_CHEAP,
	UDPLB_CHECK_FULL,
} udplb_check_level;

typedef struct udplb_manager_config {
	uint32_t max_flows;            /* 1..UDPLB_MAX_FLOWS_LIMIT */
	uint32_t max_rx_datagram_size; /* 1..UDPLB_DATAGRAM_MAX: longer datagrams drop as TRUNCATED */
	udplb_seed seed;               /* the hash key: the same for every worker of a listener */
	udplb_check_level checks;
} udplb_manager_config;

typedef struct udplb_manager udplb_manager;

/* ---- inputs ---- */

typedef enum udplb_input_kind {
	UDPLB_IN_CLIENT,  /* a datagram from a client on the listener socket */
	UDPLB_IN_BACKEND, /* a datagram from a flow's upstream socket */
	UDPLB_IN_CONFIG,  /* a config or admin event */
	UDPLB_IN_TIMEOUT, /* the armed timer fired (early is fine) */
} udplb_input_kind;

typedef enum udplb_config_kind {
	UDPLB_CFG_SET_CLUSTER,   /* cluster: new flows use it */
	UDPLB_CFG_CLEAR_CLUSTER, /* new flows drop as NO_BACKEND; live flows go on */
	UDPLB_CFG_SET_MAX_FLOWS, /* value: new cap; live flows over it stay */
	UDPLB_CFG_SET_MAX_RX,    /* value: new max_rx_datagram_size */
	UDPLB_CFG_DRAIN,         /* shed new flows; live flows go on to their own end */
	UDPLB_CFG_RESUME,        /* admit new flows again */
	UDPLB_CFG_CLOSE_ALL,     /* close every flow (listener removed, hard stop) */
	UDPLB_CFG_ABORT_FLOW,    /* flow: close it (e.g. its upstream socket failed to open) */
	UDPLB_CFG_CLOSE_BACKEND, /* backend: close every flow on it (a reload removed it) */
} udplb_config_kind;

typedef struct udplb_input {
	udplb_input_kind kind;
	union {
		struct {
			udplb_addr src;   /* the client */
			udplb_addr local; /* the listener address it sent to */
			const uint8_t *payload; /* borrowed until the next input */
			size_t len;             /* may exceed max_rx: that is how truncation shows */
			const udplb_backends *backends; /* borrowed for this call; NULL = none */
		} client;
		struct {
			udplb_flow_id flow; /* the flow whose upstream socket read it */
			const uint8_t *payload;
			size_t len;
		} backend;
		struct {
			udplb_config_kind kind;
			udplb_cluster cluster; /* SET_CLUSTER */
			uint32_t value;        /* SET_MAX_FLOWS, SET_MAX_RX */
			udplb_flow_id flow;    /* ABORT_FLOW */
			udplb_addr backend;    /* CLOSE_BACKEND */
		} config;
	} u;
} udplb_input;

/* ---- outputs ---- */

typedef enum udplb_output_kind {
	UDPLB_OUT_OPEN_UPSTREAM,   /* open a socket connected to u.open.backend for flow */
	UDPLB_OUT_SEND_TO_BACKEND, /* write prefix then payload, as one datagram, on flow's socket */
	UDPLB_OUT_SEND_TO_CLIENT,  /* send payload from the listener at local to client */
	UDPLB_OUT_ARM_TIMER,       /* (re)arm the one timer at deadline_ms, replacing the last */
	UDPLB_OUT_METRIC,          /* count a flow event */
	UDPLB_OUT_CLOSE_FLOW,      /* close flow's socket and forget the flow */
	UDPLB_OUT_DROP,            /* a datagram was dropped: count it */
} udplb_output_kind;

typedef enum udplb_metric_kind {
	UDPLB_METRIC_FLOW_CREATED, /* before the flow's OPEN_UPSTREAM */
	UDPLB_METRIC_FLOW_EVICTED, /* before the flow's CLOSE_FLOW, exactly once per flow */
} udplb_metric_kind;

typedef struct udplb_output {
	udplb_output_kind kind;
	udplb_flow_id flow; /* every kind but ARM_TIMER and DROP */
	union {
		struct {
			udplb_addr backend;
			udplb_addr client;
			udplb_addr local;
		} open;
		struct {
			uint8_t prefix[UDPLB_PPV2_MAX]; /* the PROXY v2 header, when prefix_len > 0 */
			size_t prefix_len;
			const uint8_t *payload; /* borrowed: the input's payload */
			size_t len;             /* payload bytes, prefix not included */
		} to_backend;
		struct {
			udplb_addr client;
			udplb_addr local;
			const uint8_t *payload; /* borrowed: the input's payload */
			size_t len;
		} to_client;
		struct {
			uint64_t deadline_ms;
		} arm;
		struct {
			udplb_metric_kind kind;
			udplb_close_reason reason; /* FLOW_EVICTED */
			uint64_t duration_ms;      /* FLOW_EVICTED: admission to close */
			uint32_t requests;         /* FLOW_EVICTED: client datagrams forwarded */
			uint32_t responses;        /* FLOW_EVICTED: backend datagrams returned */
		} metric;
		struct {
			udplb_drop_reason reason;
			size_t len; /* the dropped datagram's length */
		} drop;
	} u;
} udplb_output;

/* ---- the manager ---- */

/* Creates a manager with no cluster (client datagrams drop as NO_BACKEND
 * until SET_CLUSTER). Errors: UDPLB_E_MAX_FLOWS, UDPLB_E_MAX_RX,
 * UDPLB_E_NOMEM. *out is set only on success. */
__attribute__((warn_unused_result)) int udplb_manager_new(udplb_manager **out,
                                                          const udplb_manager_config *cfg);

/* Frees the manager and its flows without emitting anything (NULL is fine):
 * a shell that wants CLOSE_FLOW for each flow sends CLOSE_ALL first. */
void udplb_manager_del(udplb_manager *m);

/* Feeds one input. Returns 0, or:
 *   UDPLB_E_BUSY   outputs from the last input are not all polled yet;
 *   UDPLB_E_INVAL  an unknown kind, or a payload pointer NULL with len > 0;
 *   for UDPLB_CFG_SET_CLUSTER, udplb_cluster_validate's errors;
 *   for UDPLB_CFG_SET_MAX_FLOWS / SET_MAX_RX, UDPLB_E_MAX_FLOWS / UDPLB_E_MAX_RX.
 * On an error nothing changed and nothing was queued. A dropped datagram is
 * not an error: it is a DROP output. */
__attribute__((warn_unused_result)) int udplb_manager_input(udplb_manager *m,
                                                            const udplb_input *in,
                                                            uint64_t now_ms);

/* Takes the next output into *out; returns false when there is none left,
 * which is when the core is ready for the next input. */
__attribute__((warn_unused_result)) bool udplb_manager_poll(udplb_manager *m, udplb_output *out);

typedef struct udplb_stats {
	uint32_t flows_live;
	uint64_t flows_created;
	uint64_t flows_evicted;
	uint32_t max_flows;
	uint32_t max_rx_datagram_size;
	bool has_cluster;
	bool draining;
	bool armed;            /* a timer is armed, at armed_deadline_ms */
	uint64_t armed_deadline_ms;
	uint64_t now_ms;       /* the latest now seen */
} udplb_stats;

void udplb_manager_stats(const udplb_manager *m, udplb_stats *out);

/* What the core knows of one flow. */
typedef struct udplb_flow_info {
	udplb_addr client, local, backend;
	uint64_t created_ms;
	uint64_t deadline_ms;
	uint32_t requests, responses;
	/* The contract it was admitted with. */
	uint32_t front_timeout_ms, back_timeout_ms;
	uint32_t requests_cap, responses_cap;
	udplb_ppv2_mode proxy_protocol;
} udplb_flow_info;

/* Fills *out for a live flow; returns false for an id of no live flow. */
__attribute__((warn_unused_result)) bool udplb_manager_flow_info(const udplb_manager *m,
                                                                 udplb_flow_id id,
                                                                 udplb_flow_info *out);

/* The live flow for this client and listener address, or UDPLB_FLOW_NONE. */
__attribute__((warn_unused_result)) udplb_flow_id
udplb_manager_flow_find(const udplb_manager *m, const udplb_addr *src, const udplb_addr *local);

/* Checks every invariant at the given level and returns NULL, or a text
 * naming the first broken one: flows live = created - evicted; per-source
 * counters equal a recount; after a completed expiry no flow is due; the
 * armed timer is no later than the earliest deadline; the table's own
 * structure (udplb_flowtab_check). Builds without NDEBUG run it after
 * every udplb_manager_input and when udplb_manager_poll empties the queue,
 * and abort on a failure. */
const char *udplb_manager_check(const udplb_manager *m, udplb_check_level level);

#endif
