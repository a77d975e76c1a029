/* flowtab.h - the UDP load balancer core's storage: a slab of flows, a keyed open-addressing index on the client 4-tuple, per-source counters and a deadline heap. Private to the core (manager.c). */
#ifndef ETM_UDPLB_FLOWTAB_H
#define ETM_UDPLB_FLOWTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "udplb/addr.h"
#include "udplb/hash.h"

/* The table starts this small and doubles up to max_flows, so an idle
 * listener with a large max_flows holds kilobytes, not megabytes; growth
 * happens log2(max_flows / 256) times in a table's life, never per datagram
 * once the table has reached its working size. */
#define UDPLB_FLOWTAB_INITIAL 256

#define FLOWTAB_NONE UINT32_MAX

/* A flow's identity: the client endpoint and the listener endpoint it sent
 * to (seed 001 section 3: keying on the source IP alone merged two sockets
 * of one client into one flow). */
typedef struct udplb_flow_key {
	udplb_addr src;
	udplb_addr local;
} udplb_flow_key;

/* A per-source counter's key: one client IP (kind 0) or one masked subnet
 * at a given prefix length (kind 1). */
typedef struct udplb_count_key {
	uint8_t family;
	uint8_t kind;
	uint8_t prefix;
	uint8_t pad;
	uint8_t ip[16];
	uint32_t scope; /* an IPv6 link-local address's link: its own host, its own subnet */
} udplb_count_key;

/* What a flow keeps of the cluster it was admitted under: a later config
 * change does not touch it (seed 001 section 11). */
typedef struct udplb_contract {
	uint32_t front_timeout_ms;
	uint32_t back_timeout_ms;
	uint32_t responses; /* 0 = unlimited */
	uint32_t requests;  /* 0 = unlimited */
	uint8_t ppv2;       /* udplb_ppv2_mode */
} udplb_contract;

typedef enum flow_phase {
	FLOW_FREE = 0,
	FLOW_ESTABLISHED,
	FLOW_CLOSING,
} flow_phase;

typedef struct udplb_flow {
	udplb_flow_key key;
	udplb_addr backend;
	udplb_count_key subnet; /* the subnet counter this flow holds */
	udplb_contract c;
	uint64_t created;  /* ms */
	uint64_t deadline; /* ms: the idle deadline, only ever pushed later */
	uint32_t requests, responses;
	uint32_t gen;       /* bumped when the slot is freed: stale ids miss */
	uint32_t heap_pos;  /* index in the deadline heap */
	uint32_t next_free; /* free-list link while FLOW_FREE */
	uint8_t phase;      /* flow_phase */
	bool ppv2_pending;  /* first-only PROXY header not sent yet */
} udplb_flow;

/* A deadline heap entry. key is the deadline the flow had when the entry
 * was last placed: never later than the flow's own deadline, so the heap's
 * minimum is a safe wakeup time and a flow whose deadline moved is pushed
 * down only when the expiry reaches it (deadline revalidation, seed 001
 * section 7). */
typedef struct udplb_heap_entry {
	uint64_t key;
	uint32_t slot;
} udplb_heap_entry;

typedef struct udplb_count_entry {
	udplb_count_key key;
	uint32_t count; /* 0: empty bucket */
	uint32_t hash;  /* of key: its home bucket, kept for deletion */
} udplb_count_entry;

typedef struct udplb_index_entry {
	uint32_t slot1; /* slot + 1; 0: empty bucket */
	uint32_t hash;  /* of the flow's key */
} udplb_index_entry;

typedef struct udplb_flowtab {
	udplb_seed seed;
	udplb_flow *flows;    /* cap slots (owned) */
	uint32_t cap, live;
	uint32_t free_head;   /* FLOWTAB_NONE when every slot in use */
	udplb_index_entry *index; /* index_mask + 1 buckets (owned) */
	uint32_t index_mask;
	udplb_count_entry *counts; /* counts_mask + 1 buckets (owned) */
	uint32_t counts_mask;
	uint32_t counts_used;
	udplb_heap_entry *heap; /* heap_n entries, one per flow once pushed (owned) */
	uint32_t heap_n;
} udplb_flowtab;

/* A zeroed table is empty and owns nothing; init only stores the seed. */
void udplb_flowtab_init(udplb_flowtab *t, const udplb_seed *seed);
void udplb_flowtab_free(udplb_flowtab *t);

/* Makes room for one more flow, growing to at most limit slots. Returns
 * true when a free slot exists afterwards; false when the table holds limit
 * flows or an allocation failed (the table is then unchanged). */
__attribute__((warn_unused_result)) bool udplb_flowtab_reserve(udplb_flowtab *t, uint32_t limit);

/* The slot of the flow with this key, or FLOWTAB_NONE. */
__attribute__((warn_unused_result)) uint32_t udplb_flowtab_find(const udplb_flowtab *t,
                                                               const udplb_flow_key *key);

/* Takes a free slot (udplb_flowtab_reserve said one exists), zeroes the
 * flow, sets its key and subnet, indexes it, counts it against its source
 * IP and subnet, and marks it ESTABLISHED; the caller fills the rest and
 * then calls udplb_flowtab_heap_push. Returns the slot. */
uint32_t udplb_flowtab_insert(udplb_flowtab *t, const udplb_flow_key *key,
                              const udplb_count_key *subnet);

/* Unindexes the flow, uncounts it, takes it off the heap, bumps its
 * generation and frees its slot. */
void udplb_flowtab_remove(udplb_flowtab *t, uint32_t slot);

/* How many live flows hold this per-source counter (0 when none). */
uint32_t udplb_flowtab_count_get(const udplb_flowtab *t, const udplb_count_key *k);

/* The deadline heap: one entry per live flow. */
void udplb_flowtab_heap_push(udplb_flowtab *t, uint32_t slot, uint64_t key);
/* The smallest entry, or NULL for an empty heap. */
const udplb_heap_entry *udplb_flowtab_heap_top(const udplb_flowtab *t);
/* Moves the top entry's key later (to the flow's real deadline). */
void udplb_flowtab_heap_retime_top(udplb_flowtab *t, uint64_t key);

/* The per-source key helpers. */
void udplb_count_key_ip(udplb_count_key *k, const udplb_addr *a);
void udplb_count_key_subnet(udplb_count_key *k, const udplb_addr *a, uint8_t prefix);

/* Checks the structure itself: index and slab agree, heap order and
 * positions, heap keys not after deadlines, counters equal a recount from
 * the flows. Returns NULL, or a text saying what broke. O(capacity). */
const char *udplb_flowtab_check(const udplb_flowtab *t);

#endif
