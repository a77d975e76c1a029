/* dns_answers.h - the DNS service's answer cache: whole responses by (name, type, class), aged on the way out, bounded, least recently used out first; shared by every worker, no clock. */
#ifndef ETM_RUNTIME_DNS_ANSWERS_H
#define ETM_RUNTIME_DNS_ANSWERS_H

#include <stddef.h>
#include <stdint.h>

#include "proto/dns_msg.h"

/* Responses longer than this are not stored: a UDP answer with a common
 * EDNS buffer (1232 to 4096 bytes) fits; larger ones are rare (big TXT or
 * DNSSEC sets over TCP) and are asked for again. */
#define DNS_ANSWERS_ENTRY_MAX 4096

/* Largest capacity dns_answers_new accepts (as DNS_CACHE_CAPACITY_LIMIT). */
#define DNS_ANSWERS_CAPACITY_LIMIT (1u << 20)

/* Positive answers live min_ttl clamped to these (as dns_cache.h: TTL 0-4
 * still serves a burst; a day-long TTL is not trusted past an hour). */
#define DNS_ANSWERS_TTL_MIN_S 5
#define DNS_ANSWERS_TTL_MAX_S 3600
/* Negative answers: the RFC 2308 5 TTL clamped to [5, 300] (300 s is the
 * upper end RFC 2308 8 suggests for a negative cache); without an SOA in
 * the authority section there is no TTL to go by: 30 s. */
#define DNS_ANSWERS_NEG_TTL_MIN_S 5
#define DNS_ANSWERS_NEG_TTL_MAX_S 300
#define DNS_ANSWERS_NEG_TTL_NOSOA_S 30
/* An entry hit this often ... */
#define DNS_ANSWERS_PREFETCH_HITS 2
/* ... in the last 10 % of its life asks for a prefetch: popular names are
 * refreshed before they expire, the rest are left to expire. */
#define DNS_ANSWERS_PREFETCH_PCT 10

/* Memory: each entry is one allocation of a fixed part (about 80 bytes),
 * the name (at most 253 bytes), two bytes per TTL offset (at most
 * 2 * DNS_MSG_MAX_RRS = 512) and the response (at most
 * DNS_ANSWERS_ENTRY_MAX). So a cache holds at most
 *   capacity * (~850 + DNS_ANSWERS_ENTRY_MAX) bytes + a bucket array of
 *   8 * (capacity rounded up to a power of two) bytes,
 * about 20 MiB for 4096 entries; typical answers (100-500 bytes) take a
 * tenth of that. */

typedef struct dns_answers dns_answers;

/* Threads: every function but _new and _del may be called from any thread
 * at once; one mutex inside serialises them (a lookup holds it for a hash
 * walk and a copy of at most DNS_ANSWERS_ENTRY_MAX bytes; a store only to
 * link an entry built before).
 *
 * Time: now_ms is a monotonic millisecond clock supplied by the caller (as
 * dns_cache.h: uv_now of any loop).
 *
 * Keys: q->name compared ASCII case-insensitively, qtype and qclass
 * exactly. */

/* A cache for at most capacity entries (1..DNS_ANSWERS_CAPACITY_LIMIT).
 * Returns NULL for a capacity out of range or when memory runs out. */
__attribute__((warn_unused_result)) dns_answers *dns_answers_new(size_t capacity);

/* Frees the cache and every entry. No other thread may be using it. */
void dns_answers_del(dns_answers *c);

/* Stores resp[0, n), a response to q (info from dns_msg_scan_answer on it).
 * Not stored: TC set, rcode other than NOERROR/NXDOMAIN, n >
 * DNS_ANSWERS_ENTRY_MAX (or under a header). TTL: positive min_ttl clamped
 * to [TTL_MIN, TTL_MAX]; negative as the NEG constants. The stored copy
 * keeps the TTL offsets so a lookup can age it. Replaces an entry of the
 * same key; when full evicts an expired entry among the least recently
 * used, else the least recently used one. The entry starts with no hits
 * and no prefetch mark.
 * Best effort, so it returns nothing: a failed allocation leaves the cache
 * without the entry. */
void dns_answers_store(dns_answers *c, const dns_question *q, const uint8_t *resp, size_t n,
                       const dns_answer_info *info, uint64_t now_ms);

typedef enum dns_answers_result {
	DNS_ANSWERS_MISS = 0,     /* nothing written but *len = 0 */
	DNS_ANSWERS_HIT,          /* out[0, *len) is the answer */
	DNS_ANSWERS_HIT_PREFETCH, /* as HIT, and this caller should refresh the entry */
} dns_answers_result;

/* On a hit copies the response into out (cap bytes; a miss if it does not
 * fit) with id = q->id and every TTL aged by the whole seconds since it was
 * stored, sets *len, and makes it most recently used. An expired entry is
 * removed and counts as a miss. HIT_PREFETCH: the entry is in the last
 * PREFETCH_PCT % of its life, has been hit at least PREFETCH_HITS times
 * (this hit included), and nobody was told to prefetch it since it was
 * stored (this call marks it: exactly one caller gets HIT_PREFETCH per
 * stored answer). */
__attribute__((warn_unused_result)) dns_answers_result
dns_answers_lookup(dns_answers *c, const dns_question *q, uint64_t now_ms, uint8_t *out,
                   size_t cap, size_t *len);

/* What the cache has done since dns_answers_new. */
typedef struct dns_answers_stats {
	uint64_t hits;          /* lookups answered (HIT and HIT_PREFETCH), negative ones included */
	uint64_t negative_hits; /* of those, answered with a negative entry */
	uint64_t misses;        /* lookups without a live entry that fits, an expired one included */
	uint64_t evictions;     /* entries dropped by a store to make room (expired or not) */
	uint64_t prefetches;    /* HIT_PREFETCH answers given */
	uint64_t entries;       /* held now, live or expired but not yet removed */
} dns_answers_stats;

/* Fills *out without taking the lock: each count is a relaxed atomic, so
 * the set may be a lookup or two out of step with itself. Any thread. */
void dns_answers_stats_get(dns_answers *c, dns_answers_stats *out);

#endif
