/* flowtab.c - the flow slab, its open-addressing index, the per-source counters and the deadline heap. */
#include "udplb/flowtab.h"

#include <stdlib.h>
#include <string.h>

/* Both hash maps use linear probing with backward-shift deletion (no
 * tombstones, so a long-lived table never degrades) at a load factor of at
 * most one half: the index has two buckets per slot, the counter map four
 * (each flow holds an IP counter and a subnet counter). Keys are hashed with
 * the embedder's SipHash key: the sender picks its addresses and ports. */

void udplb_flowtab_init(udplb_flowtab *t, const udplb_seed *seed)
{
	memset(t, 0, sizeof *t);
	t->seed = *seed;
	t->free_head = FLOWTAB_NONE;
}

void udplb_flowtab_free(udplb_flowtab *t)
{
	free(t->flows);
	free(t->index);
	free(t->counts);
	free(t->heap);
	udplb_seed seed = t->seed;
	udplb_flowtab_init(t, &seed);
}

static uint32_t key_hash(const udplb_flowtab *t, const udplb_flow_key *k)
{
	return (uint32_t)udplb_siphash(&t->seed, k, sizeof *k);
}

static uint32_t ckey_hash(const udplb_flowtab *t, const udplb_count_key *k)
{
	return (uint32_t)udplb_siphash(&t->seed, k, sizeof *k);
}

static uint32_t pow2_at_least(uint64_t v)
{
	uint64_t p = 1;
	while (p < v)
		p <<= 1;
	return (uint32_t)p;
}

/* ---- index ---- */

static void index_put(udplb_index_entry *index, uint32_t mask, uint32_t hash, uint32_t slot)
{
	uint32_t i = hash & mask;
	while (index[i].slot1)
		i = (i + 1) & mask;
	index[i].slot1 = slot + 1;
	index[i].hash = hash;
}

static uint32_t index_bucket(const udplb_flowtab *t, const udplb_flow_key *key, uint32_t hash)
{
	if (!t->index)
		return FLOWTAB_NONE;
	for (uint32_t i = hash & t->index_mask;; i = (i + 1) & t->index_mask) {
		const udplb_index_entry *e = &t->index[i];
		if (!e->slot1)
			return FLOWTAB_NONE;
		if (e->hash == hash && memcmp(&t->flows[e->slot1 - 1].key, key, sizeof *key) == 0)
			return i;
	}
}

uint32_t udplb_flowtab_find(const udplb_flowtab *t, const udplb_flow_key *key)
{
	uint32_t b = index_bucket(t, key, key_hash(t, key));
	return b == FLOWTAB_NONE ? FLOWTAB_NONE : t->index[b].slot1 - 1;
}

/* Backward-shift deletion: empty bucket i, then pull each later entry of
 * the run back into the hole when its home bucket does not lie in the
 * cyclic range (i, j]. */
#define SHIFT_DELETE(table, mask, i, used)                                                         \
	do {                                                                                       \
		uint32_t hole = (i), j = (i);                                                      \
		for (;;) {                                                                         \
			j = (j + 1) & (mask);                                                      \
			if (!(table)[j].used)                                                      \
				break;                                                             \
			uint32_t home = (table)[j].hash & (mask);                                  \
			if (((j - home) & (mask)) >= ((j - hole) & (mask))) {                      \
				(table)[hole] = (table)[j];                                        \
				hole = j;                                                          \
			}                                                                          \
		}                                                                                  \
		memset(&(table)[hole], 0, sizeof (table)[hole]);                                   \
	} while (0)

/* ---- per-source counters ---- */

static void counts_put(udplb_count_entry *map, uint32_t mask, const udplb_count_entry *e)
{
	uint32_t i = e->hash & mask;
	while (map[i].count)
		i = (i + 1) & mask;
	map[i] = *e;
}

static uint32_t counts_bucket(const udplb_count_entry *map, uint32_t mask, const udplb_count_key *k,
                              uint32_t hash)
{
	if (!map)
		return FLOWTAB_NONE;
	for (uint32_t i = hash & mask;; i = (i + 1) & mask) {
		if (!map[i].count)
			return FLOWTAB_NONE;
		if (map[i].hash == hash && memcmp(&map[i].key, k, sizeof *k) == 0)
			return i;
	}
}

uint32_t udplb_flowtab_count_get(const udplb_flowtab *t, const udplb_count_key *k)
{
	uint32_t b = counts_bucket(t->counts, t->counts_mask, k, ckey_hash(t, k));
	return b == FLOWTAB_NONE ? 0 : t->counts[b].count;
}

static void count_inc(udplb_flowtab *t, const udplb_count_key *k)
{
	uint32_t hash = ckey_hash(t, k);
	uint32_t b = counts_bucket(t->counts, t->counts_mask, k, hash);
	if (b != FLOWTAB_NONE) {
		t->counts[b].count++;
		return;
	}
	udplb_count_entry e = {.key = *k, .count = 1, .hash = hash};
	counts_put(t->counts, t->counts_mask, &e);
	t->counts_used++;
}

static void count_dec(udplb_flowtab *t, const udplb_count_key *k)
{
	uint32_t b = counts_bucket(t->counts, t->counts_mask, k, ckey_hash(t, k));
	if (b == FLOWTAB_NONE)
		return; /* not reached: every live flow holds its two counters */
	if (--t->counts[b].count == 0) {
		SHIFT_DELETE(t->counts, t->counts_mask, b, count);
		t->counts_used--;
	}
}

void udplb_count_key_ip(udplb_count_key *k, const udplb_addr *a)
{
	memset(k, 0, sizeof *k);
	k->family = a->family;
	k->kind = 0;
	k->prefix = (uint8_t)(udplb_addr_ip_len(a) * 8);
	memcpy(k->ip, a->ip, sizeof k->ip);
	k->scope = a->scope;
}

void udplb_count_key_subnet(udplb_count_key *k, const udplb_addr *a, uint8_t prefix)
{
	uint8_t max = (uint8_t)(udplb_addr_ip_len(a) * 8);
	if (prefix > max)
		prefix = max;
	memset(k, 0, sizeof *k);
	k->family = a->family;
	k->kind = 1;
	k->prefix = prefix;
	/* a link-local subnet is its link's, unless the prefix reaches past
	 * fe80::/10 */
	k->scope = prefix >= 10 ? a->scope : 0;
	for (unsigned bit = 0; bit < prefix; bit += 8) {
		unsigned keep = prefix - bit >= 8 ? 8 : prefix - bit;
		k->ip[bit / 8] = (uint8_t)(a->ip[bit / 8] & (0xff00u >> keep));
	}
}

/* ---- heap ---- */

static void heap_set(udplb_flowtab *t, uint32_t pos, udplb_heap_entry e)
{
	t->heap[pos] = e;
	t->flows[e.slot].heap_pos = pos;
}

static void sift_up(udplb_flowtab *t, uint32_t pos)
{
	udplb_heap_entry e = t->heap[pos];
	while (pos > 0) {
		uint32_t parent = (pos - 1) / 2;
		if (t->heap[parent].key <= e.key)
			break;
		heap_set(t, pos, t->heap[parent]);
		pos = parent;
	}
	heap_set(t, pos, e);
}

static void sift_down(udplb_flowtab *t, uint32_t pos)
{
	udplb_heap_entry e = t->heap[pos];
	uint32_t n = t->heap_n;
	for (;;) {
		uint32_t c = 2 * pos + 1;
		if (c >= n)
			break;
		if (c + 1 < n && t->heap[c + 1].key < t->heap[c].key)
			c++;
		if (e.key <= t->heap[c].key)
			break;
		heap_set(t, pos, t->heap[c]);
		pos = c;
	}
	heap_set(t, pos, e);
}

void udplb_flowtab_heap_push(udplb_flowtab *t, uint32_t slot, uint64_t key)
{
	uint32_t pos = t->heap_n++;
	t->heap[pos] = (udplb_heap_entry){.key = key, .slot = slot};
	t->flows[slot].heap_pos = pos;
	sift_up(t, pos);
}

const udplb_heap_entry *udplb_flowtab_heap_top(const udplb_flowtab *t)
{
	return t->heap_n ? &t->heap[0] : NULL;
}

void udplb_flowtab_heap_retime_top(udplb_flowtab *t, uint64_t key)
{
	t->heap[0].key = key;
	sift_down(t, 0);
}

static void heap_remove(udplb_flowtab *t, uint32_t pos)
{
	uint32_t last = --t->heap_n;
	if (pos == last)
		return;
	udplb_heap_entry moved = t->heap[last];
	uint64_t old = t->heap[pos].key;
	heap_set(t, pos, moved);
	if (moved.key < old)
		sift_up(t, pos);
	else
		sift_down(t, pos);
}

/* ---- slab ---- */

bool udplb_flowtab_reserve(udplb_flowtab *t, uint32_t limit)
{
	if (t->live >= limit)
		return false;
	if (t->free_head != FLOWTAB_NONE)
		return true;
	uint32_t ncap = t->cap ? t->cap * 2 : UDPLB_FLOWTAB_INITIAL;
	if (ncap > limit || ncap < t->cap)
		ncap = limit;

	/* Allocate everything first, so a failure leaves the table as it was. */
	uint32_t imask = pow2_at_least((uint64_t)ncap * 2) - 1;
	uint32_t cmask = pow2_at_least((uint64_t)ncap * 4) - 1;
	udplb_index_entry *index = calloc((size_t)imask + 1, sizeof *index);
	udplb_count_entry *counts = calloc((size_t)cmask + 1, sizeof *counts);
	udplb_heap_entry *heap = malloc(sizeof *heap * ncap);
	udplb_flow *flows = NULL;
	if (index && counts && heap)
		flows = realloc(t->flows, sizeof *flows * ncap);
	if (!flows) {
		free(index);
		free(counts);
		free(heap);
		return false;
	}

	if (t->heap_n)
		memcpy(heap, t->heap, sizeof *heap * t->heap_n);
	free(t->heap);
	t->heap = heap;
	t->flows = flows;
	for (uint32_t i = 0; i < t->cap; i++)
		if (flows[i].phase != FLOW_FREE)
			index_put(index, imask, key_hash(t, &flows[i].key), i);
	for (uint32_t i = 0; t->counts && i <= t->counts_mask; i++)
		if (t->counts[i].count)
			counts_put(counts, cmask, &t->counts[i]);
	free(t->index);
	free(t->counts);
	t->index = index;
	t->index_mask = imask;
	t->counts = counts;
	t->counts_mask = cmask;

	/* New slots join the free list in order, so slot numbers grow from 0. */
	for (uint32_t i = ncap; i-- > t->cap;) {
		memset(&flows[i], 0, sizeof flows[i]);
		flows[i].gen = 1;
		flows[i].next_free = t->free_head;
		t->free_head = i;
	}
	t->cap = ncap;
	return true;
}

uint32_t udplb_flowtab_insert(udplb_flowtab *t, const udplb_flow_key *key,
                              const udplb_count_key *subnet)
{
	uint32_t slot = t->free_head;
	udplb_flow *f = &t->flows[slot];
	uint32_t gen = f->gen;
	t->free_head = f->next_free;
	memset(f, 0, sizeof *f);
	f->gen = gen;
	f->key = *key;
	f->subnet = *subnet;
	f->phase = FLOW_ESTABLISHED;
	f->heap_pos = FLOWTAB_NONE;
	t->live++;
	index_put(t->index, t->index_mask, key_hash(t, key), slot);
	udplb_count_key ip;
	udplb_count_key_ip(&ip, &key->src);
	count_inc(t, &ip);
	count_inc(t, subnet);
	return slot;
}

void udplb_flowtab_remove(udplb_flowtab *t, uint32_t slot)
{
	udplb_flow *f = &t->flows[slot];
	uint32_t b = index_bucket(t, &f->key, key_hash(t, &f->key));
	if (b != FLOWTAB_NONE)
		SHIFT_DELETE(t->index, t->index_mask, b, slot1);
	udplb_count_key ip;
	udplb_count_key_ip(&ip, &f->key.src);
	count_dec(t, &ip);
	count_dec(t, &f->subnet);
	if (f->heap_pos != FLOWTAB_NONE)
		heap_remove(t, f->heap_pos);
	t->live--;

	uint32_t gen = f->gen + 1;
	memset(f, 0, sizeof *f);
	f->gen = gen ? gen : 1; /* 0 never names a flow */
	f->next_free = t->free_head;
	t->free_head = slot;
}

/* ---- checks ---- */

const char *udplb_flowtab_check(const udplb_flowtab *t)
{
	uint32_t live = 0, free_count = 0;
	for (uint32_t i = 0; i < t->cap; i++) {
		const udplb_flow *f = &t->flows[i];
		if (f->phase == FLOW_FREE)
			continue;
		if (f->phase != FLOW_ESTABLISHED)
			return "a flow outside its close is not established";
		live++;
		if (udplb_flowtab_find(t, &f->key) != i)
			return "a flow is not found under its own key";
		if (f->heap_pos >= t->heap_n || t->heap[f->heap_pos].slot != i)
			return "a flow's heap position is wrong";
		if (t->heap[f->heap_pos].key > f->deadline)
			return "a heap entry is later than its flow's deadline";
	}
	if (live != t->live)
		return "the live count differs from the flows in the slab";
	if (t->heap_n != live)
		return "the deadline heap does not hold one entry per flow";
	for (uint32_t i = t->free_head; i != FLOWTAB_NONE; i = t->flows[i].next_free) {
		if (i >= t->cap || t->flows[i].phase != FLOW_FREE || ++free_count > t->cap)
			return "the free list is corrupt";
	}
	if (live + free_count != t->cap)
		return "slots are lost: neither live nor free";
	uint32_t indexed = 0;
	for (uint32_t i = 0; t->index && i <= t->index_mask; i++)
		indexed += t->index[i].slot1 != 0;
	if (indexed != live)
		return "the index holds a different number of flows";
	for (uint32_t i = 1; i < t->heap_n; i++)
		if (t->heap[(i - 1) / 2].key > t->heap[i].key)
			return "the deadline heap is out of order";

	/* Recount: every counter equals the flows that hold it. */
	uint64_t total = 0;
	for (uint32_t i = 0; t->counts && i <= t->counts_mask; i++)
		total += t->counts[i].count;
	if (total != 2 * (uint64_t)live)
		return "per-source counters do not add up to two per flow";
	if (!t->counts)
		return NULL;
	udplb_count_entry *copy = malloc(sizeof *copy * ((size_t)t->counts_mask + 1));
	if (!copy)
		return NULL; /* a debug check that cannot allocate checks less */
	memcpy(copy, t->counts, sizeof *copy * ((size_t)t->counts_mask + 1));
	const char *err = NULL;
	for (uint32_t i = 0; i < t->cap && !err; i++) {
		const udplb_flow *f = &t->flows[i];
		if (f->phase == FLOW_FREE)
			continue;
		udplb_count_key keys[2];
		udplb_count_key_ip(&keys[0], &f->key.src);
		keys[1] = f->subnet;
		for (int k = 0; k < 2; k++) {
			uint32_t b = counts_bucket(copy, t->counts_mask, &keys[k], ckey_hash(t, &keys[k]));
			if (b == FLOWTAB_NONE) {
				err = "a flow's source is missing from the per-source counters";
				break;
			}
			if (copy[b].count == UINT32_MAX) {
				err = "a per-source counter is lower than its flows";
				break;
			}
			/* Not SHIFT_DELETE: the copy keeps its shape so lookups still probe. */
			if (--copy[b].count == 0)
				copy[b].count = UINT32_MAX;
		}
	}
	for (uint32_t i = 0; i <= t->counts_mask && !err; i++)
		if (copy[i].count != 0 && copy[i].count != UINT32_MAX)
			err = "a per-source counter is higher than its flows";
	free(copy);
	return err;
}
