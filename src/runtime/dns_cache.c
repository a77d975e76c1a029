/* dns_cache.c - the DNS answer cache: names to addresses on a ttl_table (base/ttl_table.h) under one mutex. */
#include "runtime/dns_cache.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/bytes.h"
#include "base/hash.h"
#include "base/ttl_table.h"

/* An address without the sockaddr padding: 17 bytes instead of 128. */
typedef struct caddr {
	uint8_t family; /* AF_INET or AF_INET6 */
	uint8_t ip[16]; /* 4 or 16 used */
} caddr;

typedef struct entry {
	ttl_node node;    /* first: the table's bookkeeping */
	uint8_t n;        /* addresses; 0 = a negative answer */
	uint8_t name_len; /* <= DNS_NAME_MAX */
	char *name;       /* in the same allocation, after addrs */
	caddr addrs[];
} entry;

struct dns_cache {
	pthread_mutex_t lock; /* guards t */
	ttl_table t;
	/* dns_cache_stats's, outside the lock for its readers: written with
	 * relaxed atomics (entries under the lock, as a copy of count) */
	_Atomic uint64_t hits, negative, misses, evictions, entries;
};

static void bump(_Atomic uint64_t *n) { atomic_fetch_add_explicit(n, 1, memory_order_relaxed); }

/* 0 when the name is not one the cache keeps, else its length. */
static size_t name_length(const char *name)
{
	size_t len = strnlen(name, DNS_NAME_MAX + 1);
	return len > DNS_NAME_MAX ? 0 : len;
}

/* FNV-1a over the lower-cased name. Unkeyed: chains are bounded by the
 * capacity and the full hash is compared before the name, so even crafted
 * collisions cost integer compares, not string compares. */
static uint32_t name_hash(const char *name, size_t len)
{
	uint32_t h = HASH_FNV32_INIT;
	for (size_t i = 0; i < len; i++)
		h = hash_fnv32_step(h, bytes_ascii_lower((uint8_t)name[i]));
	return h;
}

/* ASCII only, whatever the locale (RFC 4343: DNS names compare that way). */
static bool same_name(const entry *e, uint32_t hash, const char *name, size_t len)
{
	return e->node.hash == hash && bytes_ascii_ieq(e->name, e->name_len, name, len);
}

static entry *find(dns_cache *c, const char *name, size_t len, uint32_t hash)
{
	for (ttl_node *n = ttl_table_chain(&c->t, hash); n; n = n->chain)
		if (same_name((entry *)n, hash, name, len))
			return (entry *)n;
	return NULL;
}

static void to_sockaddr(const caddr *a, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof *ss);
	if (a->family == AF_INET) {
		struct sockaddr_in *in = (struct sockaddr_in *)ss;
		in->sin_family = AF_INET;
		memcpy(&in->sin_addr, a->ip, 4);
	} else {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
		in6->sin6_family = AF_INET6;
		memcpy(&in6->sin6_addr, a->ip, 16);
	}
}

/* Returns false for a family the cache does not keep. */
static bool from_sockaddr(const struct sockaddr_storage *ss, caddr *a)
{
	memset(a, 0, sizeof *a);
	if (ss->ss_family == AF_INET) {
		a->family = AF_INET;
		memcpy(a->ip, &((const struct sockaddr_in *)ss)->sin_addr, 4);
		return true;
	}
	if (ss->ss_family == AF_INET6) {
		a->family = AF_INET6;
		memcpy(a->ip, &((const struct sockaddr_in6 *)ss)->sin6_addr, 16);
		return true;
	}
	return false;
}

static void free_entry(ttl_node *n) { free(n); }

dns_cache *dns_cache_new(size_t capacity)
{
	if (capacity == 0 || capacity > DNS_CACHE_CAPACITY_LIMIT)
		return NULL;
	dns_cache *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	if (ttl_table_init(&c->t, capacity) || pthread_mutex_init(&c->lock, NULL) != 0) {
		ttl_table_free(&c->t, free_entry);
		free(c);
		return NULL;
	}
	return c;
}

void dns_cache_del(dns_cache *c)
{
	if (!c)
		return;
	ttl_table_free(&c->t, free_entry);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

dns_cache_result dns_cache_lookup(dns_cache *c, const char *name, uint64_t now_ms,
                                  struct sockaddr_storage *out, size_t max, size_t *n)
{
	*n = 0;
	size_t len = name_length(name);
	if (len == 0) {
		bump(&c->misses);
		return DNS_CACHE_MISS;
	}
	uint32_t hash = name_hash(name, len);
	entry *dead = NULL;
	dns_cache_result res = DNS_CACHE_MISS;

	pthread_mutex_lock(&c->lock);
	entry *e = find(c, name, len, hash);
	if (e && now_ms >= e->node.expires_ms) {
		ttl_table_detach(&c->t, &e->node);
		dead = e;
	} else if (e) {
		ttl_table_touch(&c->t, &e->node); /* a hit makes it the newest */
		if (e->n == 0) {
			res = DNS_CACHE_NEGATIVE;
		} else {
			size_t k = e->n < max ? e->n : max;
			for (size_t i = 0; i < k; i++)
				to_sockaddr(&e->addrs[i], &out[i]);
			*n = k;
			res = DNS_CACHE_HIT;
		}
	}
	bump(res == DNS_CACHE_HIT ? &c->hits : res == DNS_CACHE_NEGATIVE ? &c->negative : &c->misses);
	atomic_store_explicit(&c->entries, c->t.count, memory_order_relaxed);
	pthread_mutex_unlock(&c->lock);

	free(dead);
	return res;
}

void dns_cache_store(dns_cache *c, const char *name, const struct sockaddr_storage *addrs,
                     size_t n, uint32_t ttl_s, uint64_t now_ms)
{
	size_t len = name_length(name);
	if (len == 0)
		return;

	caddr kept[DNS_MAX_ADDRS];
	size_t k = 0;
	for (size_t i = 0; i < n && k < DNS_MAX_ADDRS; i++)
		if (from_sockaddr(&addrs[i], &kept[k]))
			k++;
	if (n > 0 && k == 0)
		return; /* addresses given but none usable: not a negative answer */

	if (ttl_s < DNS_TTL_MIN_S)
		ttl_s = DNS_TTL_MIN_S;
	if (ttl_s > DNS_TTL_MAX_S)
		ttl_s = DNS_TTL_MAX_S;

	/* Built before taking the lock, so the lock covers only the table. */
	entry *e = malloc(sizeof *e + k * sizeof(caddr) + len + 1);
	if (!e)
		return;
	*e = (entry){
		.node = {.expires_ms = now_ms + (uint64_t)ttl_s * 1000, .hash = name_hash(name, len)},
		.n = (uint8_t)k,
		.name_len = (uint8_t)len,
	};
	memcpy(e->addrs, kept, k * sizeof(caddr));
	e->name = (char *)(e->addrs + k);
	memcpy(e->name, name, len);
	e->name[len] = '\0';

	entry *old, *victim = NULL;
	pthread_mutex_lock(&c->lock);
	old = find(c, name, len, e->node.hash);
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

size_t dns_cache_count(dns_cache *c)
{
	pthread_mutex_lock(&c->lock);
	size_t n = c->t.count;
	pthread_mutex_unlock(&c->lock);
	return n;
}

void dns_cache_stats_get(dns_cache *c, dns_cache_stats *out)
{
	*out = (dns_cache_stats){
		.hits = atomic_load_explicit(&c->hits, memory_order_relaxed),
		.negative = atomic_load_explicit(&c->negative, memory_order_relaxed),
		.misses = atomic_load_explicit(&c->misses, memory_order_relaxed),
		.evictions = atomic_load_explicit(&c->evictions, memory_order_relaxed),
		.entries = atomic_load_explicit(&c->entries, memory_order_relaxed),
	};
}
