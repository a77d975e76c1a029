/* ttl_table.h - the bookkeeping of a bounded cache: a chained hash table of nodes that expire, a least-recently-used list, a victim when full; no lock, no clock, no allocation of nodes. */
#ifndef ETM_BASE_TTL_TABLE_H
#define ETM_BASE_TTL_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "base/list.h"

/* The first member of each entry a table holds; the entry's own key and
 * value follow it. */
typedef struct ttl_node {
	struct ttl_node *chain; /* next in the bucket */
	list_node lru;          /* in the table's list, newest first */
	uint64_t expires_ms;    /* dead at and after this instant (the caller's clock) */
	uint32_t hash;          /* of the key: the bucket, and the first compare */
} ttl_node;

/* The caller guards a table (one mutex around every call). */
typedef struct ttl_table {
	size_t capacity; /* nodes it may hold */
	size_t count;
	size_t mask; /* buckets - 1; buckets is a power of two >= capacity */
	ttl_node **buckets;
	list lru; /* every node, the newest (last stored or hit) first */
} ttl_table;

/* When the table is full, this many nodes from the least recently used end
 * are checked for an expired one before the oldest live one is dropped:
 * expired nodes cluster there (nobody has asked for them lately), and the
 * bound keeps the work of a store constant. */
#define TTL_TABLE_EVICT_SCAN 16

/* An empty table for capacity (>= 1) nodes. 0, or -1 without memory. */
__attribute__((warn_unused_result)) int ttl_table_init(ttl_table *t, size_t capacity);

/* Hands every node to free_node, then frees the buckets. */
void ttl_table_free(ttl_table *t, void (*free_node)(ttl_node *n));

/* The chain of nodes whose hash falls in hash's bucket (follow ->chain;
 * compare ->hash first, then the key). */
static inline ttl_node *ttl_table_chain(const ttl_table *t, uint32_t hash)
{
	return t->buckets[hash & t->mask];
}

/* Puts n (its hash and expiry set) in the table as the newest. The caller
 * made room first (ttl_table_make_room). */
void ttl_table_insert(ttl_table *t, ttl_node *n);

/* Takes n out of the table; the caller frees it (outside its lock when it
 * can). */
void ttl_table_detach(ttl_table *t, ttl_node *n);

/* n was used: it becomes the newest. */
void ttl_table_touch(ttl_table *t, ttl_node *n);


/* What to drop for room at now_ms: an expired node among the
 * TTL_TABLE_EVICT_SCAN oldest, else the oldest. NULL when empty. */
ttl_node *ttl_table_victim(const ttl_table *t, uint64_t now_ms);

/* When the table is full, detaches its victim at now_ms and returns it
 * (the caller frees it and counts an eviction); else NULL. */
ttl_node *ttl_table_make_room(ttl_table *t, uint64_t now_ms);

#endif
