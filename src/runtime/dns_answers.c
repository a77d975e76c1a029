/* dns_answers.c - the DNS service's answer cache: whole responses on a ttl_table (base/ttl_table.h) under one mutex, as dns_cache.c. */
#include "runtime/dns_answers.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/bytes.h"
#include "base/hash.h"
#include "base/ttl_table.h"

typedef struct entry {
	ttl_node node;       /* first: the table's bookkeeping */
	uint64_t stored_ms;  /* TTLs are aged from here */
	uint32_t hits;       /* lookups answered since stored (saturating) */
	bool negative;
	bool prefetched;     /* a caller was given HIT_PREFETCH since stored */
	uint16_t qtype, qclass;
	uint16_t len;        /* response bytes, <= DNS_ANSWERS_ENTRY_MAX */
	uint16_t n_ttl;      /* TTL offsets, each < len - 3 */
	uint8_t name_len;    /* <= DNS_MSG_NAME_TEXT - 1 */
	uint8_t *resp;       /* in the same allocation, after ttl_off */
	char *name;          /* in the same allocation, after resp, lower-cased */
	uint16_t ttl_off[];
} entry;

struct dns_answers {
	pthread_mutex_t lock; /* guards t */
	ttl_table t;
	/* dns_answers_stats's, outside the lock for its readers: written with
	 * relaxed atomics (entries under the lock, as a copy of count) */
	_Atomic uint64_t hits, negative_hits, misses, evictions, prefetches, entries;
};

static void bump(_Atomic uint64_t *n) { atomic_fetch_add_explicit(n, 1, memory_order_relaxed); }

/* The key's name length, or -1 when q's name is not a NUL-terminated text
 * of at most 253 characters. */
static int key_length(const dns_question *q)
{
	size_t len = strnlen(q->name, sizeof q->name);
	return len >= sizeof q->name ? -1 : (int)len;
}

/* FNV-1a over the lower-cased name, then type and class. Unkeyed, as in
 * dns_cache.c: chains are bounded by the capacity and the full hash is
 * compared first. */
static uint32_t key_hash(const dns_question *q, size_t len)
{
	uint32_t h = HASH_FNV32_INIT;
	for (size_t i = 0; i < len; i++)
		h = hash_fnv32_step(h, bytes_ascii_lower((uint8_t)q->name[i]));
	uint8_t tc[4];
	bytes_put16(tc, q->qtype);
	bytes_put16(tc + 2, q->qclass);
	for (size_t i = 0; i < sizeof tc; i++)
		h = hash_fnv32_step(h, tc[i]);
	return h;
}

static entry *find(dns_answers *c, const dns_question *q, size_t len, uint32_t hash)
{
	for (ttl_node *n = ttl_table_chain(&c->t, hash); n; n = n->chain) {
		entry *e = (entry *)n;
		if (n->hash == hash && e->qtype == q->qtype && e->qclass == q->qclass &&
		    bytes_ascii_ieq(e->name, e->name_len, q->name, len))
			return e;
	}
	return NULL;
}

static void free_entry(ttl_node *n) { free(n); }

dns_answers *dns_answers_new(size_t capacity)
{
	if (capacity == 0 || capacity > DNS_ANSWERS_CAPACITY_LIMIT)
		return NULL;
	dns_answers *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	if (ttl_table_init(&c->t, capacity) || pthread_mutex_init(&c->lock, NULL) != 0) {
		ttl_table_free(&c->t, free_entry);
		free(c);
		return NULL;
	}
	return c;
}

void dns_answers_del(dns_answers *c)
{
	if (!c)
		return;
	ttl_table_free(&c->t, free_entry);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

static uint32_t clamp(uint32_t v, uint32_t lo, uint32_t hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

/* How long an answer lives, seconds (dns_answers.h). */
static uint32_t life_s(const dns_answer_info *info)
{
	if (!info->negative)
		return clamp(info->min_ttl, DNS_ANSWERS_TTL_MIN_S, DNS_ANSWERS_TTL_MAX_S);
	if (!info->soa)
		return DNS_ANSWERS_NEG_TTL_NOSOA_S;
	return clamp(info->min_ttl, DNS_ANSWERS_NEG_TTL_MIN_S, DNS_ANSWERS_NEG_TTL_MAX_S);
}

void dns_answers_store(dns_answers *c, const dns_question *q, const uint8_t *resp, size_t n,
                       const dns_answer_info *info, uint64_t now_ms)
{
	int key_len = key_length(q);
	if (key_len < 0 || info->tc || n > DNS_ANSWERS_ENTRY_MAX || n < DNS_HEADER_LEN)
		return;
	if (info->rcode != DNS_RCODE_NOERROR && info->rcode != DNS_RCODE_NXDOMAIN)
		return;
	size_t len = (size_t)key_len;

	/* Only offsets that lie inside the response are kept, so a lookup ages
	 * without checking again. */
	size_t n_ttl = 0;
	for (size_t i = 0; i < info->n_ttl && i < DNS_MSG_MAX_RRS; i++)
		n_ttl += info->ttl_off[i] <= n - 4;

	/* Built before taking the lock, so the lock covers only the table. */
	entry *e = malloc(sizeof *e + n_ttl * sizeof(uint16_t) + n + len + 1);
	if (!e)
		return;
	uint32_t life = life_s(info);
	*e = (entry){
		.node = {.expires_ms = now_ms + (uint64_t)life * 1000, .hash = key_hash(q, len)},
		.stored_ms = now_ms,
		.negative = info->negative,
		.qtype = q->qtype,
		.qclass = q->qclass,
		.len = (uint16_t)n,
		.n_ttl = (uint16_t)n_ttl,
		.name_len = (uint8_t)len,
	};
	for (size_t i = 0, k = 0; i < info->n_ttl && i < DNS_MSG_MAX_RRS; i++)
		if (info->ttl_off[i] <= n - 4)
			e->ttl_off[k++] = info->ttl_off[i];
	e->resp = (uint8_t *)(e->ttl_off + n_ttl);
	memcpy(e->resp, resp, n);
	e->name = (char *)(e->resp + n);
	for (size_t i = 0; i < len; i++)
		e->name[i] = (char)bytes_ascii_lower((uint8_t)q->name[i]);
	e->name[len] = '\0';

	entry *old, *victim = NULL;
	pthread_mutex_lock(&c->lock);
	old = find(c, q, len, e->node.hash);
	if (old)
		ttl_table_detach(&c->t, &old->node);
	if ((victim = (entry *)ttl_table_make_room(&c->t, now_ms)))
		bump(&c->evictions);
	ttl_table_insert(&c->t, &e->node);
	atomic_store_explicit(&c->entries, c->t.count, memory_order_relaxed);
	pthread_mutex_unlock(&c->lock);

	free(old);
	free(victim);
}

static void put32(uint8_t *p, uint32_t v)
{
	bytes_put16(p, (uint16_t)(v >> 16));
	bytes_put16(p + 2, (uint16_t)v);
}

/* The copy's TTLs, each less the whole seconds since the entry was stored,
 * floor 0 (as dns_msg_age, over the entry's own offsets). */
static void age(uint8_t *m, const entry *e, uint64_t now_ms)
{
	uint64_t elapsed = (now_ms - e->stored_ms) / 1000;
	for (size_t i = 0; i < e->n_ttl; i++) {
		uint8_t *p = m + e->ttl_off[i];
		uint32_t ttl = bytes_get32(p);
		put32(p, ttl > elapsed ? (uint32_t)(ttl - elapsed) : 0);
	}
}

/* In the last DNS_ANSWERS_PREFETCH_PCT % of its life at now_ms (alive). */
static bool late(const entry *e, uint64_t now_ms)
{
	uint64_t life = e->node.expires_ms - e->stored_ms, left = e->node.expires_ms - now_ms;
	return left * 100 <= life * DNS_ANSWERS_PREFETCH_PCT;
}

dns_answers_result dns_answers_lookup(dns_answers *c, const dns_question *q, uint64_t now_ms,
                                      uint8_t *out, size_t cap, size_t *len)
{
	*len = 0;
	int key_len = key_length(q);
	if (key_len < 0) {
		bump(&c->misses);
		return DNS_ANSWERS_MISS;
	}
	uint32_t hash = key_hash(q, (size_t)key_len);
	entry *dead = NULL;
	dns_answers_result res = DNS_ANSWERS_MISS;

	pthread_mutex_lock(&c->lock);
	entry *e = find(c, q, (size_t)key_len, hash);
	if (e && now_ms >= e->node.expires_ms) {
		ttl_table_detach(&c->t, &e->node);
		dead = e;
	} else if (e && e->len <= cap) {
		ttl_table_touch(&c->t, &e->node); /* a hit makes it the newest */
		memcpy(out, e->resp, e->len);
		age(out, e, now_ms < e->stored_ms ? e->stored_ms : now_ms);
		dns_msg_set_id(out, q->id);
		*len = e->len;
		if (e->hits < UINT32_MAX)
			e->hits++;
		res = DNS_ANSWERS_HIT;
		if (!e->prefetched && e->hits >= DNS_ANSWERS_PREFETCH_HITS && late(e, now_ms)) {
			e->prefetched = true;
			res = DNS_ANSWERS_HIT_PREFETCH;
		}
		if (e->negative)
			bump(&c->negative_hits);
	}
	bump(res == DNS_ANSWERS_MISS ? &c->misses : &c->hits);
	if (res == DNS_ANSWERS_HIT_PREFETCH)
		bump(&c->prefetches);
	atomic_store_explicit(&c->entries, c->t.count, memory_order_relaxed);
	pthread_mutex_unlock(&c->lock);

	free(dead);
	return res;
}

void dns_answers_stats_get(dns_answers *c, dns_answers_stats *out)
{
	*out = (dns_answers_stats){
		.hits = atomic_load_explicit(&c->hits, memory_order_relaxed),
		.negative_hits = atomic_load_explicit(&c->negative_hits, memory_order_relaxed),
		.misses = atomic_load_explicit(&c->misses, memory_order_relaxed),
		.evictions = atomic_load_explicit(&c->evictions, memory_order_relaxed),
		.prefetches = atomic_load_explicit(&c->prefetches, memory_order_relaxed),
		.entries = atomic_load_explicit(&c->entries, memory_order_relaxed),
	};
}
