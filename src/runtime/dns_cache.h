/* dns_cache.h - the process's DNS answer cache: names to addresses, with TTLs, bounded, least recently used out first; no clock and no sockets. */
#ifndef ETM_RUNTIME_DNS_CACHE_H
#define ETM_RUNTIME_DNS_CACHE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* Names the process keeps answers for (the capacity its one cache is made
 * with). A few thousand destinations cover a busy proxy's working set; at
 * about 400 bytes for a full entry that is under 2 MiB. */
#define DNS_CACHE_MAX 4096

/* Largest capacity dns_cache_new accepts: keeps the bucket array and the
 * memory a cache may grow to (a few hundred MiB) within reason. */
#define DNS_CACHE_CAPACITY_LIMIT (1u << 20)

/* Addresses kept per name, both families together. Enough for any
 * round-robin set worth dialling; the rest of an answer is dropped. */
#define DNS_MAX_ADDRS 16

/* RFC 1035 2.3.4 / RFC 2181 11: 255 octets on the wire is 253 characters of
 * text without the root dot. Longer names are refused. */
#define DNS_NAME_MAX 253

/* TTL floor: answers with TTL 0-4 (common on CDNs) still serve a burst of
 * connections to one host from one query, and are refreshed within seconds. */
#define DNS_TTL_MIN_S 5
/* TTL ceiling: a day-long TTL is not trusted for more than an hour, so a moved
 * host is found again without a restart. */
#define DNS_TTL_MAX_S 3600

typedef struct dns_cache dns_cache;

typedef enum dns_cache_result {
	DNS_CACHE_MISS = 0, /* no live entry for the name */
	DNS_CACHE_HIT,      /* the name has addresses; up to max copied out */
	DNS_CACHE_NEGATIVE, /* the name is known to have no address; nothing copied */
} dns_cache_result;

/* Threads: every function but _new and _del may be called from any thread at
 * once; one mutex inside serialises them (each call is a hash lookup and a
 * copy of at most DNS_MAX_ADDRS addresses, so the lock is held briefly).
 *
 * Time: now_ms is a monotonic millisecond clock supplied by the caller (the
 * shell passes uv_now, which every libuv loop takes from the same monotonic
 * clock, so callers on different loops agree to within a loop iteration).
 *
 * Names: compared ASCII case-insensitively, byte for byte otherwise; callers
 * pass them without the root dot. A name that is empty or longer than
 * DNS_NAME_MAX is never stored and never found. */

/* A cache for at most capacity names (1..DNS_CACHE_CAPACITY_LIMIT). Returns
 * NULL for a capacity out of range or when memory runs out. */
__attribute__((warn_unused_result)) dns_cache *dns_cache_new(size_t capacity);

/* Frees the cache and every entry. No other thread may be using it. */
void dns_cache_del(dns_cache *c);

/* Looks name up at now_ms. On DNS_CACHE_HIT copies the first min(max, stored)
 * addresses to out in the order they were stored, each a sockaddr_in or
 * sockaddr_in6 with port 0, and sets *n to how many; otherwise sets *n to 0.
 * A hit makes the entry the most recently used; an expired entry found on
 * the way is removed. */
__attribute__((warn_unused_result)) dns_cache_result
dns_cache_lookup(dns_cache *c, const char *name, uint64_t now_ms, struct sockaddr_storage *out,
                 size_t max, size_t *n);

/* Stores the answer for name, replacing any entry it had, valid for ttl_s
 * seconds clamped to [DNS_TTL_MIN_S, DNS_TTL_MAX_S] from now_ms. n == 0 stores
 * a negative answer. Keeps the first DNS_MAX_ADDRS AF_INET / AF_INET6
 * addresses (other families and ports are ignored). When the cache is full it
 * first evicts an expired entry among the least recently used, else the
 * least recently used one.
 * Best effort, so it returns nothing: a bad name or a failed allocation
 * leaves the cache without the entry, which costs one query later. */
void dns_cache_store(dns_cache *c, const char *name, const struct sockaddr_storage *addrs,
                     size_t n, uint32_t ttl_s, uint64_t now_ms);

/* Entries held, live or expired but not yet removed (for tests and stats). */
size_t dns_cache_count(dns_cache *c);

/* What the cache has done since dns_cache_new. */
typedef struct dns_cache_stats {
	uint64_t hits;      /* lookups answered with addresses (DNS_CACHE_HIT) */
	uint64_t negative;  /* lookups answered "no address" (DNS_CACHE_NEGATIVE) */
	uint64_t misses;    /* lookups without a live entry, an expired one included */
	uint64_t evictions; /* entries dropped by a store to make room (expired or not) */
	uint64_t entries;   /* held now, as dns_cache_count */
} dns_cache_stats;

/* Fills *out without taking the lock: each count is a relaxed atomic, so
 * the set may be a lookup or two out of step with itself. Any thread. */
void dns_cache_stats_get(dns_cache *c, dns_cache_stats *out);

#endif
