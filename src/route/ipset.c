/* ipset.c - CIDR sets as sorted, merged ranges; membership by binary search. */
#include "route/ipset.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

typedef struct r4 {
	uint32_t lo, hi; /* inclusive */
} r4;

typedef struct r6 {
	ipset_u128 lo, hi; /* inclusive */
} r6;

struct ipset {
	r4 *v4;
	size_t n4, cap4;
	r6 *v6;
	size_t n6, cap6;
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
	free(s);
}

/* Grows an array to hold one more element: doubling, so n adds cost O(n). */
static int grow(void **arr, size_t *cap, size_t n, size_t elem)
{
	if (n < *cap)
		return 0;
	size_t nc = *cap ? *cap * 2 : 16;
	if (nc > SIZE_MAX / elem)
		return -1;
	void *p = realloc(*arr, nc * elem);
	if (!p)
		return -1;
	*arr = p;
	*cap = nc;
	return 0;
}

static int add4(ipset *s, uint32_t v, unsigned prefix)
{
	if (grow((void **)&s->v4, &s->cap4, s->n4, sizeof(r4)) < 0)
		return -1;
	uint32_t m = mask32(prefix);
	s->v4[s->n4++] = (r4){v & m, (v & m) | ~m};
	return 0;
}

static int add6(ipset *s, ipset_u128 v, unsigned prefix)
{
	if (grow((void **)&s->v6, &s->cap6, s->n6, sizeof(r6)) < 0)
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

void ipset_seal(ipset *s)
{
	if (s->n4) {
		qsort(s->v4, s->n4, sizeof(r4), cmp4);
		s->n4 = merge4(s->v4, s->n4);
	}
	if (s->n6) {
		qsort(s->v6, s->n6, sizeof(r6), cmp6);
		s->n6 = merge6(s->v6, s->n6);
	}
}

/* The last range starting at or before v, then one comparison with its end.
 * Merged ranges do not overlap, so no other range can hold v. */
static bool find4(const r4 *a, size_t n, uint32_t v)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (a[mid].lo <= v)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo > 0 && v <= a[lo - 1].hi;
}

static bool find6(const r6 *a, size_t n, ipset_u128 v)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (a[mid].lo <= v)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo > 0 && v <= a[lo - 1].hi;
}

bool ipset_has(const ipset *s, const ipset_addr *a)
{
	if (a->family == 4)
		return find4(s->v4, s->n4, a->v4);
	if (a->family == 6)
		return find6(s->v6, s->n6, a->v6);
	return false;
}

size_t ipset_count(const ipset *s, int family)
{
	return family == 4 ? s->n4 : family == 6 ? s->n6 : 0;
}
