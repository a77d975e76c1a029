/* guard.c - connections per client source and our own listening addresses, shared by every worker under one lock. */
#include "runtime/guard.h"

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <uv.h>

#include "base/hash.h"
#include "base/log.h"

static const char *const msgs[] = {
	[0] = "refused %llu connection(s) from %s: it has %llu open, the limit (max_connections_per_source)",
	[1] = "refused %llu dial(s) to %s: one of our own listening addresses (a proxy loop)",
	[2] = "%s: out of file descriptors (%s); accepts pause for %u ms (%llu pause(s))",
	[3] = "refused %llu sub-flow(s), call(s) or UDP entry(ies) from %s: it holds %llu with its connections, the limit (max_connections_per_source)",
	[4] = "refused %llu sub-flow or call open(s) from %s (last: %s): over %u a second a session or %u a source",
};

enum { WARN_SOURCE, WARN_LOOP, WARN_EMFILE, WARN_FANOUT, WARN_RATE, WARN_KINDS };

/* One client address: the family and 16 bytes (IPv4 and v4-mapped IPv6 as
 * AF_INET in the first 4). */
typedef struct src_key {
	uint8_t ip[16];
	int family;
} src_key;

typedef struct src_entry {
	src_key key;
	uint64_t open; /* connections and holds */
	guard_bucket opens; /* sub-flow and call opens of all its carriers */
	struct src_entry *next;
} src_entry;

typedef struct listen_addr {
	struct sockaddr_storage ss;
	bool any; /* 0.0.0.0 or :: */
} listen_addr;

struct guard {
	uint64_t limit;
	pthread_mutex_t lock; /* guards buckets */
	src_entry *buckets[GUARD_BUCKETS];

	listen_addr listens[GUARD_LISTENS_MAX]; /* set before the workers run */
	_Atomic size_t n_listens; /* entries [0, n) are complete: a reload adds while workers read */

	_Atomic uint64_t refused_source, refused_loop, accept_paused, refused_fanout,
	        refused_open_rate;
	_Atomic uint64_t last_warn_ms[WARN_KINDS];
	_Atomic uint64_t unwarned[WARN_KINDS]; /* events since the last warning */
};

static uint64_t now_ms(void) { return uv_hrtime() / 1000000; }

/* True when a warning of this kind may be written now; *count gets the
 * events it stands for. */
static bool may_warn(guard *g, int kind, uint64_t *count)
{
	uint64_t n = atomic_fetch_add(&g->unwarned[kind], 1) + 1;
	uint64_t now = now_ms(), last = atomic_load(&g->last_warn_ms[kind]);
	if (last && now - last < GUARD_WARN_INTERVAL_MS)
		return false;
	if (!atomic_compare_exchange_strong(&g->last_warn_ms[kind], &last, now ? now : 1))
		return false;
	*count = atomic_exchange(&g->unwarned[kind], 0);
	if (*count == 0)
		*count = n;
	return true;
}

guard *guard_new(uint64_t max_per_source)
{
	guard *g = calloc(1, sizeof *g);
	if (!g)
		return NULL;
	if (max_per_source == 0) {
		struct rlimit rl;
		uint64_t fds = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
		                   ? (uint64_t)rl.rlim_cur
		                   : 1024 * 1024;
		max_per_source = fds / GUARD_AUTO_SOURCE_DIVISOR;
		if (max_per_source < GUARD_AUTO_SOURCE_MIN)
			max_per_source = GUARD_AUTO_SOURCE_MIN;
	}
	g->limit = max_per_source;
	pthread_mutex_init(&g->lock, NULL);
	return g;
}

void guard_del(guard *g)
{
	if (!g)
		return;
	for (size_t i = 0; i < GUARD_BUCKETS; i++)
		for (src_entry *e = g->buckets[i], *next; e; e = next) {
			next = e->next;
			free(e);
		}
	pthread_mutex_destroy(&g->lock);
	free(g);
}

uint64_t guard_source_limit(const guard *g) { return g ? g->limit : 0; }

static const uint8_t V4_MAPPED[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

static bool key_of(const struct sockaddr *sa, src_key *k)
{
	memset(k, 0, sizeof *k);
	if (sa->sa_family == AF_INET) {
		k->family = AF_INET;
		memcpy(k->ip, &((const struct sockaddr_in *)sa)->sin_addr, 4);
		return true;
	}
	if (sa->sa_family == AF_INET6) {
		const uint8_t *a = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
		if (memcmp(a, V4_MAPPED, 12) == 0) {
			k->family = AF_INET;
			memcpy(k->ip, a + 12, 4);
		} else {
			k->family = AF_INET6;
			memcpy(k->ip, a, 16);
		}
		return true;
	}
	return false;
}

/* FNV-1a over the key: the table is keyed by addresses clients choose, but
 * a bucket only holds the sources that hash there; a long chain costs its
 * own sources time, not memory beyond one entry each. */
static size_t bucket_of(const src_key *k)
{
	uint32_t h = hash_fnv32(k->ip, sizeof k->ip);
	return hash_fnv32_step(h, (uint8_t)k->family) % GUARD_BUCKETS;
}

static void key_text(const src_key *k, char *out, size_t size)
{
	if (!uv_inet_ntop(k->family, k->ip, out, size))
		return;
	snprintf(out, size, "?");
}

/* Whether b, a source's open bucket, is full again at now: the source's
 * entry is then no longer needed once nothing is counted. An entry whose
 * source drained it stays until it refills (at most
 * GUARD_OPEN_BURST_SOURCE / GUARD_OPEN_RATE_SOURCE s), so a client cannot
 * start over with a full bucket by closing its carriers and reconnecting. */
static bool refilled(const guard_bucket *b, uint64_t now)
{
	if (!b->started)
		return true;
	uint64_t cap = (uint64_t)GUARD_OPEN_BURST_SOURCE * 1000;
	uint64_t dt = now > b->last_ms ? now - b->last_ms : 0;
	return dt >= cap || b->level_milli + dt * GUARD_OPEN_RATE_SOURCE >= cap;
}

/* The entry of k in its bucket b, made when missing and make is set
 * (NULL when memory runs out). Entries of the chain that hold nothing and
 * whose open bucket refilled are freed on the way. The lock is held. */
static src_entry *entry_of(guard *g, const src_key *k, size_t b, bool make)
{
	uint64_t now = now_ms();
	src_entry *e = NULL;
	for (src_entry **pp = &g->buckets[b]; *pp;) {
		src_entry *i = *pp;
		if (!memcmp(&i->key, k, sizeof *k)) {
			e = i;
			pp = &i->next;
		} else if (i->open == 0 && refilled(&i->opens, now)) {
			*pp = i->next;
			free(i);
		} else {
			pp = &i->next;
		}
	}
	if (!e && make) {
		e = calloc(1, sizeof *e);
		if (e) {
			e->key = *k;
			e->next = g->buckets[b];
			g->buckets[b] = e;
		}
	}
	return e;
}

/* Adds n to k's count when it stays within the bound; *open gets the count
 * before. */
static bool take_n(guard *g, const src_key *k, unsigned n, uint64_t *open)
{
	size_t b = bucket_of(k);
	bool ok = true;
	pthread_mutex_lock(&g->lock);
	src_entry *e = entry_of(g, k, b, true);
	*open = e ? e->open : 0;
	if (!e || e->open >= g->limit || n > g->limit - e->open) {
		ok = false;
		/* an entry made for this call stays to be pruned (entry_of) */
	} else {
		e->open += n;
	}
	pthread_mutex_unlock(&g->lock);
	return ok;
}

static void put_n(guard *g, const src_key *k, unsigned n)
{
	size_t b = bucket_of(k);
	pthread_mutex_lock(&g->lock);
	src_entry **pp = &g->buckets[b];
	while (*pp && memcmp(&(*pp)->key, k, sizeof *k))
		pp = &(*pp)->next;
	src_entry *e = *pp;
	if (e && e->open > 0) {
		e->open = e->open > n ? e->open - n : 0;
		if (e->open == 0 && refilled(&e->opens, now_ms())) {
			*pp = e->next;
			free(e);
		}
	}
	pthread_mutex_unlock(&g->lock);
}

bool guard_source_take(guard *g, const struct sockaddr *peer)
{
	src_key k;
	if (!g || !key_of(peer, &k))
		return true;
	uint64_t open;
	if (take_n(g, &k, 1, &open))
		return true;
	atomic_fetch_add(&g->refused_source, 1);
	uint64_t count;
	if (may_warn(g, WARN_SOURCE, &count)) {
		char ip[INET6_ADDRSTRLEN];
		key_text(&k, ip, sizeof ip);
		log_warn("guard", msgs[0], (unsigned long long)count, ip, (unsigned long long)open);
	}
	return false;
}

void guard_source_put(guard *g, const struct sockaddr *peer)
{
	src_key k;
	if (g && key_of(peer, &k))
		put_n(g, &k, 1);
}

bool guard_source_hold(guard *g, const struct sockaddr *peer, unsigned n)
{
	src_key k;
	if (!g || !key_of(peer, &k))
		return true;
	uint64_t open;
	if (take_n(g, &k, n, &open))
		return true;
	atomic_fetch_add(&g->refused_fanout, 1);
	uint64_t count;
	if (may_warn(g, WARN_FANOUT, &count)) {
		char ip[INET6_ADDRSTRLEN];
		key_text(&k, ip, sizeof ip);
		log_warn("guard", msgs[3], (unsigned long long)count, ip, (unsigned long long)open);
	}
	return false;
}

void guard_source_unhold(guard *g, const struct sockaddr *peer, unsigned n)
{
	src_key k;
	if (g && key_of(peer, &k))
		put_n(g, &k, n);
}

bool guard_bucket_take(guard_bucket *b, uint64_t now_ms, uint32_t rate, uint32_t burst)
{
	uint64_t cap = (uint64_t)burst * 1000;
	if (!b->started) {
		b->started = true;
		b->level_milli = cap;
		b->last_ms = now_ms;
	}
	if (now_ms > b->last_ms) {
		/* rate tokens a second: rate thousandths a millisecond; a long
		 * pause only fills the bucket */
		uint64_t dt = now_ms - b->last_ms;
		uint64_t add = dt > cap ? cap : dt * rate;
		b->level_milli = add > cap - b->level_milli ? cap : b->level_milli + add;
		b->last_ms = now_ms;
	}
	if (b->level_milli < 1000)
		return false;
	b->level_milli -= 1000;
	return true;
}

bool guard_open_allowed(guard *g, const struct sockaddr *peer, guard_bucket *session,
                        uint64_t now_ms, const char *what)
{
	src_key k;
	bool keyed = g && key_of(peer, &k);
	bool ok = guard_bucket_take(session, now_ms, GUARD_OPEN_RATE_SESSION,
	                            GUARD_OPEN_BURST_SESSION);
	if (ok && keyed) {
		size_t b = bucket_of(&k);
		pthread_mutex_lock(&g->lock);
		src_entry *e = entry_of(g, &k, b, false);
		if (e)
			ok = guard_bucket_take(&e->opens, now_ms, GUARD_OPEN_RATE_SOURCE,
			                       GUARD_OPEN_BURST_SOURCE);
		pthread_mutex_unlock(&g->lock);
	}
	if (ok || !g)
		return ok;
	atomic_fetch_add(&g->refused_open_rate, 1);
	uint64_t count;
	if (may_warn(g, WARN_RATE, &count)) {
		char ip[INET6_ADDRSTRLEN] = "?";
		if (keyed)
			key_text(&k, ip, sizeof ip);
		log_warn("guard", msgs[4], (unsigned long long)count, ip, what,
		         GUARD_OPEN_RATE_SESSION, GUARD_OPEN_RATE_SOURCE);
	}
	return false;
}

int guard_listen_add(guard *g, const char *ip, uint16_t port)
{
	size_t n = g ? atomic_load(&g->n_listens) : GUARD_LISTENS_MAX;
	if (n == GUARD_LISTENS_MAX)
		return -1;
	listen_addr *l = &g->listens[n];
	memset(l, 0, sizeof *l);
	struct sockaddr_in *in = (struct sockaddr_in *)&l->ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&l->ss;
	if (uv_ip4_addr(ip, port, in) == 0)
		l->any = in->sin_addr.s_addr == htonl(INADDR_ANY);
	else if (uv_ip6_addr(ip, port, in6) == 0)
		l->any = IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr);
	else
		return -1;
	atomic_store(&g->n_listens, n + 1); /* published whole */
	return 0;
}

static uint16_t port_of(const struct sockaddr *sa)
{
	return ntohs(sa->sa_family == AF_INET ? ((const struct sockaddr_in *)sa)->sin_port
	                                      : ((const struct sockaddr_in6 *)sa)->sin6_port);
}

/* Whether ip (port ignored) is an address of this host: the kernel lets a
 * socket bind only to those (without IP_FREEBIND). */
static bool is_local(const struct sockaddr *sa)
{
	struct sockaddr_storage probe;
	socklen_t len = sa->sa_family == AF_INET ? sizeof(struct sockaddr_in)
	                                         : sizeof(struct sockaddr_in6);
	memcpy(&probe, sa, len);
	if (probe.ss_family == AF_INET)
		((struct sockaddr_in *)&probe)->sin_port = 0;
	else
		((struct sockaddr_in6 *)&probe)->sin6_port = 0;
	int fd = socket(sa->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return false;
	bool local = bind(fd, (struct sockaddr *)&probe, len) == 0;
	close(fd);
	return local;
}

bool guard_is_own(guard *g, const struct sockaddr *dest)
{
	src_key want;
	if (!g || !key_of(dest, &want))
		return false;
	uint16_t port = port_of(dest);
	bool own = false;
	for (size_t i = 0; i < g->n_listens && !own; i++) {
		const listen_addr *l = &g->listens[i];
		if (port_of((const struct sockaddr *)&l->ss) != port)
			continue;
		src_key have;
		if (!key_of((const struct sockaddr *)&l->ss, &have))
			continue;
		if (l->any) /* "::" takes IPv4 too (listener.c) */
			own = (have.family == want.family || have.family == AF_INET6) && is_local(dest);
		else
			own = memcmp(&have, &want, sizeof have) == 0;
	}
	if (!own)
		return false;
	atomic_fetch_add(&g->refused_loop, 1);
	uint64_t count;
	if (may_warn(g, WARN_LOOP, &count)) {
		char ip[INET6_ADDRSTRLEN], text[INET6_ADDRSTRLEN + 16];
		key_text(&want, ip, sizeof ip);
		snprintf(text, sizeof text, want.family == AF_INET6 ? "[%s]:%u" : "%s:%u", ip, port);
		log_warn("guard", msgs[1], (unsigned long long)count, text);
	}
	return true;
}

void guard_accept_paused(guard *g, const char *where, const char *why, unsigned pause_ms)
{
	if (!g)
		return;
	uint64_t total = atomic_fetch_add(&g->accept_paused, 1) + 1;
	uint64_t count;
	if (may_warn(g, WARN_EMFILE, &count))
		log_warn("guard", msgs[2], where, why, pause_ms, (unsigned long long)total);
}

void guard_stats_get(const guard *g, guard_stats *out)
{
	memset(out, 0, sizeof *out);
	if (!g)
		return;
	out->refused_source = atomic_load(&g->refused_source);
	out->refused_loop = atomic_load(&g->refused_loop);
	out->accept_paused = atomic_load(&g->accept_paused);
	out->refused_fanout = atomic_load(&g->refused_fanout);
	out->refused_open_rate = atomic_load(&g->refused_open_rate);
}
