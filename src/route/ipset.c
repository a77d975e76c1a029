/* ipset.c - CIDR sets as sorted, merged ranges; membership by binary search. */
#include "route/ipset.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "base/vec.h"

typedef struct r4 {
	uint32_t lo, hi; /* inclusive */
} r4;

typedef struct r6 {
	ipset_u128 lo, hi; /* inclusive */
} r6;

/* After sealing, each family with INDEX_MIN ranges or more gets a bucket
 * index: the span from the first range's start to the last one's end is cut
 * into at most INDEX_BUCKETS buckets of 2^shift addresses, and ub[b] counts
 * the ranges starting at or before bucket b's first address. An address in
 * bucket b then has its range among ub[b]..ub[b+1], a handful, so a lookup
 * is one index load and two or three steps instead of a dozen dependent
 * misses across the whole array (10,000 IPv4 prefixes, measured: 72 ns
 * down to 10). */
#define INDEX_MIN 64
#define INDEX_BUCKETS 4096 /* 16 KiB of uint32_t: fits the L1 cache with room to spare */

typedef struct bucket_index {
	uint32_t *ub; /* nb + 1 entries; NULL when the family has no index */
	unsigned shift;
	size_t nb;
} bucket_index;

struct ipset {
	r4 *v4;
	size_t n4, cap4;
	r6 *v6;
	size_t n6, cap6;
	bucket_index i4, i6;
};

/* ::ffff:0:0/96, RFC 4291 2.5.5.2. */
static const ipset_u128 MAPPED = (ipset_u128)0xffffu << 32;

static ipset_u128 load128(const uint8_t *b)
{
	ipset_u128 v = 0;
	for (int i = 0; i < 16; i++)
		v = v << 8 | b[i];
	return v;
}

static uint32_t load32(const uint8_t *b)
{
	return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* Ones in the top bits of the prefix; no shift by the type's width. */
static uint32_t mask32(unsigned prefix)
{
	return prefix == 0 ? 0 : ~(uint32_t)0 << (32 - prefix);
}

static ipset_u128 mask128(unsigned prefix)
{
	return prefix == 0 ? 0 : ~(ipset_u128)0 << (128 - prefix);
}

static void canon6(ipset_addr *a, ipset_u128 v)
{
	if ((v >> 32) == (MAPPED >> 32)) {
		a->family = 4;
		a->v4 = (uint32_t)v;
	} else {
		a->family = 6;
		a->v6 = v;
	}
}

void ipset_addr_from_bytes(ipset_addr *a, const uint8_t *bytes, size_t len)
{
	memset(a, 0, sizeof *a);
	if (len == 4) {
		a->family = 4;
		a->v4 = load32(bytes);
	} else if (len == 16) {
		canon6(a, load128(bytes));
	}
}

void ipset_addr_from_dest(ipset_addr *a, const addr_dest *d)
{
	if (d && d->kind == ADDR_IPV4)
		ipset_addr_from_bytes(a, d->u.v4, 4);
	else if (d && d->kind == ADDR_IPV6)
		ipset_addr_from_bytes(a, d->u.v6, 16);
	else
		memset(a, 0, sizeof *a);
}

void ipset_addr_from_sockaddr(ipset_addr *a, const struct sockaddr *sa)
{
	if (sa && sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		ipset_addr_from_bytes(a, (const uint8_t *)&in->sin_addr, 4);
	} else if (sa && sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
		ipset_addr_from_bytes(a, in6->sin6_addr.s6_addr, 16);
	} else {
		memset(a, 0, sizeof *a);
	}
}

ipset *ipset_new(void) { return calloc(1, sizeof(ipset)); }

void ipset_del(ipset *s)
{
	if (!s)
		return;
	free(s->v4);
	free(s->v6);
	free(s->i4.ub);
	free(s->i6.ub);
	free(s);
}

static int add4(ipset *s, uint32_t v, unsigned prefix)
{
	if (vec_reserve(&s->v4, &s->cap4, s->n4, 1) < 0)
		return -1;
	uint32_t m = mask32(prefix);
	s->v4[s->n4++] = (r4){v & m, (v & m) | ~m};
	return 0;
}

static int add6(ipset *s, ipset_u128 v, unsigned prefix)
{
	if (vec_reserve(&s->v6, &s->cap6, s->n6, 1) < 0)
		return -1;
	ipset_u128 m = mask128(prefix);
	s->v6[s->n6++] = (r6){v & m, (v & m) | ~m};
	return 0;
}

int ipset_add(ipset *s, const uint8_t *addr, size_t len, unsigned prefix)
{
	if (len == 4)
		return add4(s, load32(addr), prefix > 32 ? 32 : prefix);
	if (prefix > 128)
		prefix = 128;
	ipset_u128 v = load128(addr);
	/* Mapped addresses are compared as IPv4 (ipset_addr), so the part of a
	 * range inside ::ffff:0:0/96 is stored as IPv4 too. */
	if (prefix >= 96 && (v >> 32) == (MAPPED >> 32))
		return add4(s, (uint32_t)v, prefix - 96);
	if (prefix <= 96 && ((v ^ MAPPED) & mask128(prefix)) == 0 && add4(s, 0, 0) < 0)
		return -1;
	return add6(s, v, prefix);
}

int ipset_add_text(ipset *s, const char *cidr)
{
	char text[INET6_ADDRSTRLEN + 1];
	const char *slash = strchr(cidr, '/');
	size_t alen = slash ? (size_t)(slash - cidr) : strlen(cidr);
	if (alen == 0 || alen >= sizeof text)
		return -2;
	memcpy(text, cidr, alen);
	text[alen] = '\0';

	uint8_t buf[16];
	size_t len;
	if (inet_pton(AF_INET, text, buf) == 1)
		len = 4;
	else if (inet_pton(AF_INET6, text, buf) == 1)
		len = 16;
	else
		return -2;

	unsigned max = len == 4 ? 32 : 128, prefix = max;
	if (slash) {
		const char *p = slash + 1;
		if (*p == '\0' || strlen(p) > 3)
			return -2;
		prefix = 0;
		for (; *p; p++) {
			if (*p < '0' || *p > '9')
				return -2;
			prefix = prefix * 10 + (unsigned)(*p - '0');
		}
		if (prefix > max)
			return -2;
	}
	return ipset_add(s, buf, len, prefix) < 0 ? -1 : 0;
}

static int cmp4(const void *a, const void *b)
{
	const r4 *x = a, *y = b;
	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static int cmp6(const void *a, const void *b)
{
	const r6 *x = a, *y = b;
	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Merging in place after sorting by start: a range that starts within (or
 * right after) the previous one extends it. "Right after" is written as
 * lo - 1 <= hi, which cannot overflow at the top of the space; lo == 0 after
 * the first range means the previous one starts at 0 too, so they overlap. */
static size_t merge4(r4 *a, size_t n)
{
	size_t out = 0;
	for (size_t i = 0; i < n; i++) {
		if (out > 0 && (a[i].lo == 0 || a[i].lo - 1 <= a[out - 1].hi)) {
			if (a[i].hi > a[out - 1].hi)
				a[out - 1].hi = a[i].hi;
		} else {
			a[out++] = a[i];
		}
	}
	return out;
}

static size_t merge6(r6 *a, size_t n)
{
	size_t out = 0;
	for (size_t i = 0; i < n; i++) {
		if (out > 0 && (a[i].lo == 0 || a[i].lo - 1 <= a[out - 1].hi)) {
			if (a[i].hi > a[out - 1].hi)
				a[out - 1].hi = a[i].hi;
		} else {
			a[out++] = a[i];
		}
	}
	return out;
}

/* Counts of ranges among a[lo..hi) starting at or before v, plus lo: the
 * index just past the last such range. Branch-free halving, so the CPU
 * does not mispredict its way down. */
static size_t upper4(const r4 *a, size_t lo, size_t hi, uint32_t v)
{
	if (lo >= hi)
		return lo;
	const r4 *b = a + lo;
	for (size_t n = hi - lo; n > 1; n -= n / 2)
		b = b[n / 2].lo <= v ? b + n / 2 : b;
	return (size_t)(b - a) + (b->lo <= v);
}

static size_t upper6(const r6 *a, size_t lo, size_t hi, ipset_u128 v)
{
	if (lo >= hi)
		return lo;
	const r6 *b = a + lo;
	for (size_t n = hi - lo; n > 1; n -= n / 2)
		b = b[n / 2].lo <= v ? b + n / 2 : b;
	return (size_t)(b - a) + (b->lo <= v);
}

/* Builds the index of a sealed family; a failed allocation leaves none,
 * which only makes lookups take the whole-array search. */
static void index4(bucket_index *ix, const r4 *a, size_t n)
{
	if (n < INDEX_MIN || n > UINT32_MAX)
		return;
	uint32_t base = a[0].lo, span = a[n - 1].hi - base;
	unsigned shift = 0;
	while ((span >> shift) >= INDEX_BUCKETS)
		shift++;
	size_t nb = (size_t)(span >> shift) + 1;
	uint32_t *ub = malloc((nb + 1) * sizeof *ub);
	if (!ub)
		return;
	for (size_t b = 0; b < nb; b++)
		ub[b] = (uint32_t)upper4(a, 0, n, base + (uint32_t)((uint64_t)b << shift));
	ub[nb] = (uint32_t)n;
	*ix = (bucket_index){ub, shift, nb};
}

static void index6(bucket_index *ix, const r6 *a, size_t n)
{
	if (n < INDEX_MIN || n > UINT32_MAX)
		return;
	ipset_u128 base = a[0].lo, span = a[n - 1].hi - base;
	unsigned shift = 0;
	while ((span >> shift) >= INDEX_BUCKETS)
		shift++;
	size_t nb = (size_t)(span >> shift) + 1;
	uint32_t *ub = malloc((nb + 1) * sizeof *ub);
	if (!ub)
		return;
	for (size_t b = 0; b < nb; b++)
		ub[b] = (uint32_t)upper6(a, 0, n, base + ((ipset_u128)b << shift));
	ub[nb] = (uint32_t)n;
	*ix = (bucket_index){ub, shift, nb};
}

void ipset_seal(ipset *s)
{
	if (s->n4) {
		qsort(s->v4, s->n4, sizeof(r4), cmp4);
		s->n4 = merge4(s->v4, s->n4);
		free(s->i4.ub);
		s->i4 = (bucket_index){0};
		index4(&s->i4, s->v4, s->n4);
	}
	if (s->n6) {
		qsort(s->v6, s->n6, sizeof(r6), cmp6);
		s->n6 = merge6(s->v6, s->n6);
		free(s->i6.ub);
		s->i6 = (bucket_index){0};
		index6(&s->i6, s->v6, s->n6);
	}
}

/* The last range starting at or before v, then one comparison with its end:
 * merged ranges do not overlap, so no other range can hold v. */
static bool find4(const ipset *s, uint32_t v)
{
	const r4 *a = s->v4;
	size_t n = s->n4, lo = 0, hi = n;
	if (n == 0 || v < a[0].lo || v > a[n - 1].hi)
		return false;
	if (s->i4.ub) {
		size_t b = (size_t)((v - a[0].lo) >> s->i4.shift);
		lo = s->i4.ub[b];
		hi = s->i4.ub[b + 1];
	}
	size_t k = upper4(a, lo, hi, v);
	return k > 0 && v <= a[k - 1].hi;
}

static bool find6(const ipset *s, ipset_u128 v)
{
	const r6 *a = s->v6;
	size_t n = s->n6, lo = 0, hi = n;
	if (n == 0 || v < a[0].lo || v > a[n - 1].hi)
		return false;
	if (s->i6.ub) {
		size_t b = (size_t)((v - a[0].lo) >> s->i6.shift);
		lo = s->i6.ub[b];
		hi = s->i6.ub[b + 1];
	}
	size_t k = upper6(a, lo, hi, v);
	return k > 0 && v <= a[k - 1].hi;
}

bool ipset_has(const ipset *s, const ipset_addr *a)
{
	if (a->family == 4)
		return find4(s, a->v4);
	if (a->family == 6)
		return find6(s, a->v6);
	return false;
}

size_t ipset_count(const ipset *s, int family)
{
	return family == 4 ? s->n4 : family == 6 ? s->n6 : 0;
}
