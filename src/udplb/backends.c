/* backends.c - the backend view: validation, the Maglev table, and round-robin, HRW and Maglev selection. */
#include "udplb/backends.h"

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include "udplb/hash.h"

__extension__ typedef unsigned __int128 u128;

/* Fixed keys for a backend's identity hashes: a backend address is the
 * operator's, not a sender's, and fixed keys give every worker and every
 * instance the same HRW scores and the same Maglev table for the same set. */
static const udplb_seed IDENT_KEY = {0x6574656d656e616eULL, 0x6b692d7564706c62ULL};
static const udplb_seed OFFSET_KEY = {0x6d61676c65762d6fULL, 0x66667365742d6b31ULL};
static const udplb_seed SKIP_KEY = {0x6d61676c65762d73ULL, 0x6b69702d6b65792eULL};

#define NO_ENTRY UINT16_MAX

struct udplb_backends {
	udplb_backend *list; /* n entries, in the order the shell gave them */
	uint64_t *ident;     /* per list entry: the HRW identity hash, premixed */
	size_t n, n_healthy;
	bool uniform;        /* every weight is the same: HRW needs no logarithm */
	/* The Maglev table over the set sorted by address: table[slot] is a
	 * sorted position, order[pos] its index in list. Sorting makes the
	 * table a function of the set, not of the order it was listed in. */
	uint32_t m;
	uint16_t *table;
	uint16_t *order;
	udplb_backend *built; /* the sorted (address, weight) set the table was built from */
	size_t n_built;
	uint64_t builds;
};

static bool is_prime(uint32_t v)
{
	if (v < 2)
		return false;
	for (uint32_t d = 2; d * d <= v; d++)
		if (v % d == 0)
			return false;
	return true;
}

int udplb_backends_new(udplb_backends **out, uint32_t maglev_size)
{
	if (maglev_size == 0)
		maglev_size = UDPLB_MAGLEV_SIZE_DEFAULT;
	if (maglev_size < 3 || maglev_size > UDPLB_MAGLEV_SIZE_MAX || !is_prime(maglev_size))
		return UDPLB_E_MAGLEV;
	udplb_backends *b = calloc(1, sizeof *b);
	if (!b)
		return UDPLB_E_NOMEM;
	b->m = maglev_size;
	b->table = malloc(sizeof *b->table * maglev_size);
	if (!b->table) {
		free(b);
		return UDPLB_E_NOMEM;
	}
	for (uint32_t i = 0; i < maglev_size; i++)
		b->table[i] = NO_ENTRY;
	*out = b;
	return UDPLB_OK;
}

void udplb_backends_del(udplb_backends *b)
{
	if (!b)
		return;
	free(b->list);
	free(b->ident);
	free(b->table);
	free(b->order);
	free(b->built);
	free(b);
}

static int addr_cmp(const udplb_addr *a, const udplb_addr *b)
{
	if (a->family != b->family)
		return a->family < b->family ? -1 : 1;
	int c = memcmp(a->ip, b->ip, sizeof a->ip);
	if (c)
		return c;
	return a->port < b->port ? -1 : a->port > b->port;
}

/* A backend and its index in the shell's list, sorted by address. */
typedef struct sort_item {
	udplb_backend be;
	uint16_t idx;
} sort_item;

static int item_cmp(const void *x, const void *y)
{
	const sort_item *a = x, *b = y;
	return addr_cmp(&a->be.addr, &b->be.addr);
}

static uint64_t addr_hash(const udplb_seed *key, const udplb_addr *a)
{
	return udplb_siphash(key, a, sizeof *a);
}

/* Maglev's table population (Eisenbud et al., "Maglev: A Fast and Reliable
 * Software Network Load Balancer", NSDI 2016, section 3.4, Pseudocode 1):
 * backend i prefers the slots permutation[i][j] = (offset + j * skip) mod M
 * in order of j, with offset = h1(name) mod M and skip = h2(name) mod (M-1)
 * + 1, so with M prime every backend's sequence visits every slot. Backends
 * take turns claiming their next preferred empty slot until the table is
 * full. The paper weights backends "by altering the relative frequency of
 * the backends' turns" without details; here a backend earns its weight in
 * credit each round and takes a turn per max-weight of credit, starting
 * with a full turn so each backend holds at least one slot (M >= N). */
static int maglev_build(udplb_backends *b, const udplb_backend *sorted, size_t n)
{
	uint32_t m = b->m;
	if (n == 0) {
		for (uint32_t i = 0; i < m; i++)
			b->table[i] = NO_ENTRY;
		b->builds++;
		return UDPLB_OK;
	}
	uint32_t *offset = malloc(sizeof *offset * n);
	uint32_t *skip = malloc(sizeof *skip * n);
	uint32_t *next = calloc(n, sizeof *next);
	uint64_t *credit = malloc(sizeof *credit * n);
	int rc = UDPLB_E_NOMEM;
	if (!offset || !skip || !next || !credit)
		goto out;

	uint32_t wmax = 0;
	for (size_t i = 0; i < n; i++) {
		offset[i] = (uint32_t)(addr_hash(&OFFSET_KEY, &sorted[i].addr) % m);
		skip[i] = (uint32_t)(addr_hash(&SKIP_KEY, &sorted[i].addr) % (m - 1) + 1);
		if (sorted[i].weight > wmax)
			wmax = sorted[i].weight;
	}
	for (size_t i = 0; i < n; i++)
		credit[i] = wmax;
	for (uint32_t i = 0; i < m; i++)
		b->table[i] = NO_ENTRY;

	uint32_t filled = 0;
	while (filled < m) {
		for (size_t i = 0; i < n && filled < m; i++) {
			if (credit[i] >= wmax) {
				credit[i] -= wmax;
				uint32_t c;
				do {
					c = (uint32_t)(((uint64_t)offset[i] + (uint64_t)next[i] * skip[i]) % m);
					next[i]++;
				} while (b->table[c] != NO_ENTRY);
				b->table[c] = (uint16_t)i;
				filled++;
			}
			credit[i] += sorted[i].weight;
		}
	}
	b->builds++;
	rc = UDPLB_OK;
out:
	free(offset);
	free(skip);
	free(next);
	free(credit);
	return rc;
}

static bool same_set(const udplb_backend *a, size_t na, const udplb_backend *b, size_t nb)
{
	if (na != nb)
		return false;
	for (size_t i = 0; i < na; i++)
		if (!udplb_addr_equal(&a[i].addr, &b[i].addr) || a[i].weight != b[i].weight)
			return false;
	return true;
}

int udplb_backends_set(udplb_backends *b, const udplb_backend *list, size_t n)
{
	if (n > UDPLB_BACKENDS_MAX)
		return UDPLB_E_BACKENDS;
	if (n > b->m)
		return UDPLB_E_MAGLEV;
	for (size_t i = 0; i < n; i++) {
		const udplb_backend *e = &list[i];
		if (udplb_addr_ip_len(&e->addr) == 0 || e->addr.port == 0)
			return UDPLB_E_BACKEND;
		if (e->weight < 1 || e->weight > UDPLB_WEIGHT_MAX)
			return UDPLB_E_WEIGHT;
	}

	int rc = UDPLB_E_NOMEM;
	size_t cap = n ? n : 1;
	udplb_backend *nlist = malloc(sizeof *nlist * cap);
	uint64_t *nident = malloc(sizeof *nident * cap);
	uint16_t *idx = malloc(sizeof *idx * cap);
	udplb_backend *sorted = malloc(sizeof *sorted * cap);
	sort_item *items = malloc(sizeof *items * cap);
	if (!nlist || !nident || !idx || !sorted || !items)
		goto fail;

	for (size_t i = 0; i < n; i++) {
		nlist[i] = list[i];
		nlist[i].addr.pad = 0;
		if (nlist[i].addr.family == UDPLB_AF_INET) /* the unused tail, as set4 leaves it */
			memset(nlist[i].addr.ip + 4, 0, sizeof nlist[i].addr.ip - 4);
		items[i].be = nlist[i];
		items[i].idx = (uint16_t)i;
	}
	qsort(items, n, sizeof *items, item_cmp);
	for (size_t i = 0; i < n; i++) {
		sorted[i] = items[i].be;
		sorted[i].healthy = false; /* the set compares addresses and weights only */
		idx[i] = items[i].idx;
		if (i > 0 && udplb_addr_equal(&sorted[i].addr, &sorted[i - 1].addr)) {
			rc = UDPLB_E_DUPLICATE;
			goto fail;
		}
	}
	free(items);
	items = NULL;
	if (!same_set(sorted, n, b->built, b->n_built)) {
		rc = maglev_build(b, sorted, n);
		if (rc)
			goto fail;
		free(b->built);
		b->built = sorted;
		b->n_built = n;
		sorted = NULL;
	}

	size_t healthy = 0;
	bool uniform = true;
	for (size_t i = 0; i < n; i++) {
		nident[i] = udplb_mix64(addr_hash(&IDENT_KEY, &nlist[i].addr) + 0x9e3779b97f4a7c15ULL);
		healthy += nlist[i].healthy;
		uniform &= nlist[i].weight == nlist[0].weight;
	}
	free(b->list);
	free(b->ident);
	free(b->order);
	b->list = nlist;
	b->ident = nident;
	b->order = idx;
	b->n = n;
	b->n_healthy = healthy;
	b->uniform = uniform;
	free(sorted);
	return UDPLB_OK;
fail:
	/* maglev_build fails only before it writes the table: the view is as it was. */
	free(items);
	free(nlist);
	free(nident);
	free(idx);
	free(sorted);
	return rc;
}

int udplb_backends_set_health(udplb_backends *b, size_t i, bool healthy)
{
	if (i >= b->n)
		return UDPLB_E_RANGE;
	if (b->list[i].healthy != healthy) {
		b->list[i].healthy = healthy;
		if (healthy)
			b->n_healthy++;
		else
			b->n_healthy--;
	}
	return UDPLB_OK;
}

size_t udplb_backends_count(const udplb_backends *b)
{
	return b->n;
}

size_t udplb_backends_healthy_count(const udplb_backends *b)
{
	return b->n_healthy;
}

const udplb_backend *udplb_backends_at(const udplb_backends *b, size_t i)
{
	return i < b->n ? &b->list[i] : NULL;
}

int udplb_backends_find(const udplb_backends *b, const udplb_addr *addr)
{
	for (size_t i = 0; i < b->n; i++)
		if (udplb_addr_equal(&b->list[i].addr, addr))
			return (int)i;
	return -1;
}

/* Fail-open (seed 001 section 9): with no healthy backend every backend is
 * a candidate, rather than black-holing new flows. */
static bool eligible(const udplb_backends *b, size_t i)
{
	return b->n_healthy == 0 || b->list[i].healthy;
}

static int select_rr(const udplb_backends *b, uint64_t turn)
{
	uint64_t total = 0;
	for (size_t i = 0; i < b->n; i++)
		if (eligible(b, i))
			total += b->list[i].weight;
	uint64_t t = turn % total;
	for (size_t i = 0; i < b->n; i++) {
		if (!eligible(b, i))
			continue;
		if (t < b->list[i].weight)
			return (int)i;
		t -= b->list[i].weight;
	}
	return -1; /* not reached: t < total */
}

/* floor(log2(x) * 2^24) for x >= 1, by repeated squaring of the mantissa:
 * each squaring doubles the exponent, so whether the square reaches 2 is
 * the next binary digit of the logarithm. Integer-only, so every build and
 * every platform computes the same HRW winner. */
#define LOG_FRAC_BITS 24

static uint64_t log2_fixed(uint64_t x)
{
	int msb = 63 - __builtin_clzll(x);
	uint64_t m = x << (63 - msb); /* Q1.63, in [1, 2) */
	uint64_t frac = 0;
	for (int i = 0; i < LOG_FRAC_BITS; i++) {
		u128 sq = (u128)m * m; /* Q2.126, in [1, 4) */
		frac <<= 1;
		if (sq >> 127) {
			frac |= 1;
			m = (uint64_t)(sq >> 64);
		} else {
			m = (uint64_t)(sq >> 63);
		}
	}
	return ((uint64_t)msb << LOG_FRAC_BITS) | frac;
}

/* Weighted rendezvous hashing: backend i scores w_i / -ln(u_i) with u_i a
 * uniform draw from hash(key, backend); the highest score wins, which picks
 * each backend with probability w_i / sum(w) and moves only the keys of a
 * backend that leaves (the "logarithmic method", Schindelhauer and
 * Schomaker, "Weighted distributed hash tables", SPAA 2005). log2 instead
 * of ln scales every score alike; scores compare by cross-multiplying, so
 * no division and no floating point. With equal weights the score orders
 * as the hash does, so the common case skips the logarithm and picks the
 * same winner. */
static int select_hrw(const udplb_backends *b, uint64_t key)
{
	int best = -1;
	uint64_t best_w = 0, best_l = 0, best_h = 0;
	if (b->uniform) {
		for (size_t i = 0; i < b->n; i++) {
			uint64_t h = udplb_mix64(key ^ b->ident[i]);
			if (eligible(b, i) && (best < 0 || h > best_h))
				best = (int)i, best_h = h;
		}
		return best;
	}
	for (size_t i = 0; i < b->n; i++) {
		if (!eligible(b, i))
			continue;
		uint64_t h = udplb_mix64(key ^ b->ident[i]);
		/* -log2(u) with u = (h | 1) / 2^64, in (0, 64]: never 0. */
		uint64_t l = ((uint64_t)64 << LOG_FRAC_BITS) - log2_fixed(h | 1);
		uint64_t w = b->list[i].weight;
		if (best < 0) {
			best = (int)i, best_w = w, best_l = l, best_h = h;
			continue;
		}
		/* w / l > best_w / best_l; ties go to the larger hash. */
		u128 lhs = (u128)w * best_l, rhs = (u128)best_w * l;
		if (lhs > rhs || (lhs == rhs && h > best_h))
			best = (int)i, best_w = w, best_l = l, best_h = h;
	}
	return best;
}

/* Lookup is table[key mod M]; an unhealthy owner sends the key on to the
 * next slot whose owner is eligible, so a health flip moves only the keys
 * of the backend that flipped, spread over the rest, without a rebuild. */
static int select_maglev(const udplb_backends *b, uint64_t key)
{
	uint32_t slot = (uint32_t)(key % b->m);
	for (uint32_t probe = 0; probe < b->m; probe++) {
		uint16_t pos = b->table[slot];
		if (pos != NO_ENTRY && eligible(b, b->order[pos]))
			return b->order[pos];
		if (++slot == b->m)
			slot = 0;
	}
	return -1; /* not reached: every backend owns a slot (maglev_build) */
}

int udplb_backends_select(const udplb_backends *b, udplb_select mode, uint64_t key,
                          uint64_t turn)
{
	if (b->n == 0)
		return -1;
	switch (mode) {
	case UDPLB_SELECT_ROUND_ROBIN:
		return select_rr(b, turn);
	case UDPLB_SELECT_MAGLEV:
		return select_maglev(b, key);
	case UDPLB_SELECT_HRW:
	default:
		return select_hrw(b, key);
	}
}

uint32_t udplb_backends_maglev_size(const udplb_backends *b)
{
	return b->m;
}

int udplb_backends_maglev_entry(const udplb_backends *b, uint32_t slot)
{
	if (b->n == 0 || slot >= b->m || b->table[slot] == NO_ENTRY)
		return -1;
	return b->order[b->table[slot]];
}

uint64_t udplb_backends_maglev_builds(const udplb_backends *b)
{
	return b->builds;
}

/* A decimal number of at most 5 digits in [s, end), or -1. */
static long parse_small(const char *s, const char *end)
{
	if (s == end || end - s > 5)
		return -1;
	long v = 0;
	for (; s < end; s++) {
		if (*s < '0' || *s > '9')
			return -1;
		v = v * 10 + (*s - '0');
	}
	return v;
}

int udplb_backend_parse(const char *text, udplb_backend *out)
{
	const char *sp = strchr(text, ' ');
	const char *end = sp ? sp : text + strlen(text);
	char host[INET6_ADDRSTRLEN];
	const char *colon;
	bool v6 = text[0] == '[';
	if (v6) {
		const char *close = memchr(text, ']', (size_t)(end - text));
		if (!close || close[1] != ':')
			return UDPLB_E_BACKEND;
		colon = close + 1;
		text++;
		end = close; /* the host part for the copy below */
	} else {
		colon = memchr(text, ':', (size_t)(end - text));
		if (!colon)
			return UDPLB_E_BACKEND;
	}
	const char *host_end = v6 ? end : colon;
	size_t hlen = (size_t)(host_end - text);
	if (hlen == 0 || hlen >= sizeof host)
		return UDPLB_E_BACKEND;
	memcpy(host, text, hlen);
	host[hlen] = '\0';
	const char *port_end = sp ? sp : colon + strlen(colon);
	long port = parse_small(colon + 1, port_end);
	if (port < 1 || port > 65535)
		return UDPLB_E_BACKEND;
	uint8_t ip[16];
	memset(out, 0, sizeof *out);
	if (!v6 && inet_pton(AF_INET, host, ip) == 1)
		udplb_addr_set4(&out->addr, ip, (uint16_t)port);
	else if (v6 && inet_pton(AF_INET6, host, ip) == 1)
		udplb_addr_set6(&out->addr, ip, (uint16_t)port);
	else
		return UDPLB_E_BACKEND;
	if (udplb_addr_link_local(&out->addr))
		return UDPLB_E_LINK_LOCAL; /* connect would fail without the link */
	out->weight = 1;
	out->healthy = true;
	if (!sp)
		return 0;
	while (*sp == ' ')
		sp++;
	if (*sp == '\0')
		return 0;
	if (strncmp(sp, "weight=", 7) != 0)
		return UDPLB_E_BACKEND;
	const char *w = sp + 7, *wend = w + strcspn(w, " ");
	long weight = parse_small(w, wend);
	while (*wend == ' ')
		wend++;
	if (*wend != '\0')
		return UDPLB_E_BACKEND;
	if (weight < 1 || weight > UDPLB_WEIGHT_MAX)
		return UDPLB_E_WEIGHT;
	out->weight = (uint32_t)weight;
	return 0;
}
