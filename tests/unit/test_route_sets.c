/* test_route_sets.c - the route module's matcher sets (domset, ipset) against brute-force models, over random inputs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "route/domset.h"
#include "route/ipset.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static size_t pick(size_t n) { return (size_t)(rnd() % n); }

/* ---- domset ---- */

static void test_prepare_finds_label_starts(void **state)
{
	(void)state;
	domset_name n;
	assert_true(domset_name_prepare(&n, "A.b.COM.", 8));
	assert_string_equal(n.name, "a.b.com");
	assert_int_equal(n.len, 7);
	assert_int_equal(n.nsuf, 3);
	assert_int_equal(n.off[0], 0);
	assert_int_equal(n.off[1], 2);
	assert_int_equal(n.off[2], 4);

	assert_true(domset_name_prepare(&n, "a..b", 4)); /* an empty label is no boundary */
	assert_int_equal(n.nsuf, 2);
	assert_int_equal(n.off[1], 3);

	assert_false(domset_name_prepare(&n, "", 0));
	assert_false(domset_name_prepare(&n, ".", 1));

	/* "x.x.x...x", 255 bytes: the most labels a name can have. */
	char big[DOMSET_NAME_MAX + 2];
	for (size_t i = 0; i < sizeof big; i++)
		big[i] = i % 2 ? '.' : 'x';
	assert_true(domset_name_prepare(&n, big, DOMSET_NAME_MAX));
	assert_int_equal(n.nsuf, DOMSET_SUFFIX_MAX);
	assert_true(domset_name_prepare(&n, big, DOMSET_NAME_MAX + 1)); /* + the root dot */
	assert_int_equal(n.len, DOMSET_NAME_MAX);
	big[DOMSET_NAME_MAX] = 'x';
	assert_false(domset_name_prepare(&n, big, DOMSET_NAME_MAX + 1));
}

/* Labels that share prefixes and suffixes, mixed case, long enough to cross
 * the 8-byte words the hash reads. */
static const char *const labels[] = {
	"a", "b", "ab", "ba", "abc", "A", "Ab", "example", "examples", "xample",
	"com", "co", "m", "longlabel-0123456789", "longlabel-0123456789x", "q1",
};

static void random_name(char *out, size_t size)
{
	size_t n = 1 + pick(5), len = 0;
	out[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		const char *l = labels[pick(sizeof labels / sizeof labels[0])];
		int w = snprintf(out + len, size - len, "%s%s", i ? "." : "", l);
		assert_true(w > 0 && (size_t)w < size - len);
		len += (size_t)w;
	}
}

static void lower_copy(char *dst, const char *src)
{
	for (; *src; src++)
		*dst++ = (*src >= 'A' && *src <= 'Z') ? (char)(*src - 'A' + 'a') : *src;
	*dst = '\0';
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);
	return a >= b && strcmp(s + a - b, suffix) == 0;
}

typedef struct model {
	char full[8][128], suffix[8][128], sub[8][128], kw[12][64];
	size_t nfull, nsuffix, nsub, nkw;
} model;

static bool model_match(const model *m, const char *cand_in)
{
	char c[256];
	lower_copy(c, cand_in);
	size_t len = strlen(c);
	if (len && c[len - 1] == '.')
		c[--len] = '\0';
	if (len == 0)
		return false;
	char dotted[140];
	for (size_t i = 0; i < m->nfull; i++)
		if (strcmp(c, m->full[i]) == 0)
			return true;
	for (size_t i = 0; i < m->nsuffix; i++) {
		snprintf(dotted, sizeof dotted, ".%s", m->suffix[i]);
		if (strcmp(c, m->suffix[i]) == 0 || ends_with(c, dotted))
			return true;
	}
	for (size_t i = 0; i < m->nsub; i++) {
		snprintf(dotted, sizeof dotted, ".%s", m->sub[i]);
		if (ends_with(c, dotted))
			return true;
	}
	for (size_t i = 0; i < m->nkw; i++)
		if (strstr(c, m->kw[i]))
			return true;
	return false;
}

static void test_domset_matches_its_model(void **state)
{
	(void)state;
	for (int round = 0; round < 300; round++) {
		model m;
		memset(&m, 0, sizeof m);
		domset *s = domset_new();
		assert_non_null(s);
		char name[128];
		m.nfull = pick(4);
		for (size_t i = 0; i < m.nfull; i++) {
			random_name(name, sizeof name);
			assert_int_equal(domset_add_full(s, name, strlen(name)), 0);
			lower_copy(m.full[i], name);
		}
		m.nsuffix = pick(4);
		for (size_t i = 0; i < m.nsuffix; i++) {
			random_name(name, sizeof name);
			assert_int_equal(domset_add_suffix(s, name, strlen(name)), 0);
			lower_copy(m.suffix[i], name);
		}
		m.nsub = pick(3);
		for (size_t i = 0; i < m.nsub; i++) {
			char dotted[130];
			random_name(name, sizeof name);
			snprintf(dotted, sizeof dotted, ".%s", name);
			assert_int_equal(domset_add_suffix(s, dotted, strlen(dotted)), 0);
			lower_copy(m.sub[i], name);
		}
		/* 0-11 keywords: both the memmem path and the index. */
		m.nkw = round % 3 == 0 ? pick(12) : 0;
		for (size_t i = 0; i < m.nkw; i++) {
			const char *l = labels[pick(sizeof labels / sizeof labels[0])];
			size_t from = pick(strlen(l)), n = 1 + pick(strlen(l) - from);
			char kw[64];
			memcpy(kw, l + from, n);
			kw[n] = '\0';
			assert_int_equal(domset_add_keyword(s, kw, n), 0);
			lower_copy(m.kw[i], kw);
		}
		assert_int_equal(domset_seal(s), 0);
		for (int q = 0; q < 200; q++) {
			random_name(name, sizeof name);
			size_t nl = strlen(name);
			if (q % 7 == 0 && nl + 1 < sizeof name) {
				name[nl] = '.';
				name[nl + 1] = '\0';
			}
			domset_name n;
			assert_true(domset_name_prepare(&n, name, strlen(name)));
			if (domset_match(s, &n) != model_match(&m, name))
				fail_msg("round %d: %s: set says %d", round, name, domset_match(s, &n));
		}
		domset_del(s);
	}
}

/* A set big enough for the name filter and a growing table. */
static void test_domset_large(void **state)
{
	(void)state;
	domset *s = domset_new();
	assert_non_null(s);
	char name[64];
	for (int i = 0; i < 20000; i++) {
		snprintf(name, sizeof name, "host%d.Zone%d.example", i, i % 101);
		if (i % 2)
			assert_int_equal(domset_add_suffix(s, name, strlen(name)), 0);
		else
			assert_int_equal(domset_add_full(s, name, strlen(name)), 0);
	}
	assert_int_equal(domset_add_full(s, "host1.zone1.example", 19), 0); /* folded */
	assert_int_equal(domset_count_names(s), 20000);
	assert_int_equal(domset_seal(s), 0);
	for (int i = 0; i < 20000; i++) {
		domset_name n;
		snprintf(name, sizeof name, "www.host%d.zone%d.example", i, i % 101);
		assert_true(domset_name_prepare(&n, name, strlen(name)));
		assert_int_equal(domset_match(s, &n), i % 2 == 1);
		assert_true(domset_name_prepare(&n, name + 4, strlen(name + 4)));
		assert_true(domset_match(s, &n));
		snprintf(name, sizeof name, "host%d.zone%d.example", i, (i + 1) % 101);
		assert_true(domset_name_prepare(&n, name, strlen(name)));
		assert_false(domset_match(s, &n));
	}
	domset_del(s);
}

/* ---- ipset ---- */

__extension__ typedef unsigned __int128 u128;

static const u128 MAPPED = (u128)0xffff << 32;

static u128 mask(unsigned len) { return len == 0 ? 0 : ~(u128)0 << (128 - len); }

typedef struct pfx {
	u128 net; /* IPv4 as ::ffff:a.b.c.d */
	unsigned len; /* of the 128-bit form */
} pfx;

/* The model: every address and prefix in 128-bit form, IPv4 mapped. */
static bool model_has(const pfx *p, size_t n, u128 a)
{
	for (size_t i = 0; i < n; i++)
		if (((a ^ p[i].net) & mask(p[i].len)) == 0)
			return true;
	return false;
}

static void to_bytes(u128 v, uint8_t *b)
{
	for (int i = 15; i >= 0; i--) {
		b[i] = (uint8_t)v;
		v >>= 8;
	}
}

static u128 random_addr(void)
{
	switch (pick(4)) {
	case 0: /* IPv4 in a narrow space, so prefixes overlap */
		return MAPPED | (u128)(0x0a000000u | (uint32_t)(rnd() & 0x00ffffff));
	case 1:
		return MAPPED | (u128)(uint32_t)rnd();
	case 2: /* IPv6 under 2001:db8::/32, narrow as well */
		return (u128)0x20010db8 << 96 | (u128)(rnd() & 0xffffff) << 72 | (u128)rnd();
	default:
		return (u128)rnd() << 64 | (u128)rnd();
	}
}

static void test_ipset_matches_its_model(void **state)
{
	(void)state;
	static const size_t sizes[] = {1, 3, 20, 63, 64, 200, 2000};
	for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
		for (int round = 0; round < 10; round++) {
			size_t n = sizes[si];
			pfx *p = calloc(n, sizeof *p);
			assert_non_null(p);
			ipset *s = ipset_new();
			assert_non_null(s);
			for (size_t i = 0; i < n; i++) {
				u128 a = random_addr();
				uint8_t b[16];
				to_bytes(a, b);
				bool v4 = (a >> 32) == (MAPPED >> 32) && pick(4) != 0;
				if (v4) {
					unsigned len = (unsigned)pick(33);
					if (len < 8 && pick(4))
						len += 8; /* fewer near-universal prefixes */
					assert_int_equal(ipset_add(s, b + 12, 4, len), 0);
					p[i] = (pfx){a & mask(96 + len), 96 + len};
				} else {
					unsigned len = (unsigned)pick(129);
					assert_int_equal(ipset_add(s, b, 16, len), 0);
					p[i] = (pfx){a & mask(len), len};
				}
			}
			ipset_seal(s);
			for (int q = 0; q < 2000; q++) {
				u128 a;
				if (q % 3 == 0) { /* the edges of a prefix, and one past them */
					const pfx *x = &p[pick(n)];
					a = pick(2) ? x->net : (x->net | ~mask(x->len));
					a += (u128)(int)pick(3) - 1;
				} else {
					a = random_addr();
				}
				uint8_t b[16];
				to_bytes(a, b);
				ipset_addr ia;
				ipset_addr_from_bytes(&ia, b, 16);
				if (ipset_has(s, &ia) != model_has(p, n, a))
					fail_msg("size %zu round %d query %d: set says %d", n, round, q,
					         ipset_has(s, &ia));
				if ((a >> 32) == (MAPPED >> 32)) { /* the same address as 4 bytes */
					ipset_addr_from_bytes(&ia, b + 12, 4);
					assert_int_equal(ipset_has(s, &ia), model_has(p, n, a));
				}
			}
			ipset_del(s);
			free(p);
		}
	}
}

static void test_ipset_merges_and_parses(void **state)
{
	(void)state;
	ipset *s = ipset_new();
	assert_non_null(s);
	const char *in[] = {"10.0.0.0/24", "10.0.1.0/24", "10.0.0.128/25", "10.0.3.0/24",
	                    "255.255.255.255/32", "255.255.255.254/31", "0.0.0.0/32", "::/128",
	                    "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe/127"};
	for (size_t i = 0; i < sizeof in / sizeof in[0]; i++)
		assert_int_equal(ipset_add_text(s, in[i]), 0);
	const char *bad[] = {"", "/8", "10.0.0.0/", "10.0.0.0/33", "::/129", "10.0.0/8",
	                     "10.0.0.0/8x", "10.0.0.0/0008", "example.com", "10.0.0.0 /8"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		assert_int_equal(ipset_add_text(s, bad[i]), -2);
	ipset_seal(s);
	/* Adjacent and nested ranges are one; the top of each space is reached. */
	assert_int_equal(ipset_count(s, 4), 4);
	assert_int_equal(ipset_count(s, 6), 2);
	ipset_addr a = {.family = 4, .v4 = 0x0a0001ff};
	assert_true(ipset_has(s, &a));
	a.v4 = 0x0a000200;
	assert_false(ipset_has(s, &a));
	a.v4 = 0xffffffff;
	assert_true(ipset_has(s, &a));
	a.v4 = 0;
	assert_true(ipset_has(s, &a));
	a.v4 = 1;
	assert_false(ipset_has(s, &a));
	a = (ipset_addr){.family = 6, .v6 = ~(u128)0};
	assert_true(ipset_has(s, &a));
	a.family = 0;
	assert_false(ipset_has(s, &a));
	ipset_del(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_prepare_finds_label_starts),
		cmocka_unit_test(test_domset_matches_its_model),
		cmocka_unit_test(test_domset_large),
		cmocka_unit_test(test_ipset_matches_its_model),
		cmocka_unit_test(test_ipset_merges_and_parses),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
