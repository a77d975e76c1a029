/* test_dns_answers.c - the DNS service's answer cache: ids and TTLs on the way out, lifetimes against a fake clock, what is not kept, the bound and eviction, the prefetch signal, threads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>

#include <cmocka.h>

#include "runtime/dns_answers.h"

#include "dnstest.h"

#define T0 1000000u /* an arbitrary start on the fake clock, ms */
#define S(x) ((uint64_t)(x) * 1000)

static dns_question question(const char *name, uint16_t qtype, uint16_t id)
{
	uint8_t b[300];
	int len = dns_msg_build_query(name, qtype, id, b, sizeof b);
	assert_true(len > 0);
	dns_question q;
	assert_int_equal(dns_msg_parse_query(b, (size_t)len, &q), DNS_MSG_OK);
	return q;
}

/* A response and what the codec says of it. */
typedef struct resp {
	dns_question q;
	uint8_t b[8192];
	size_t n;
	dns_answer_info info;
} resp;

static void scan_it(resp *r)
{
	assert_int_equal(dns_msg_scan_answer(r->b, r->n, &r->q, &r->info), DNS_MSG_OK);
}

/* The reply build_reply makes: naddr addresses of qtype's family, each with ttl. */
static void answer(resp *r, const char *name, uint16_t qtype, uint8_t rcode, size_t naddr,
                   uint32_t ttl)
{
	uint8_t qb[300];
	int qlen = dns_msg_build_query(name, qtype, 1, qb, sizeof qb);
	assert_true(qlen > 0);
	assert_int_equal(dns_msg_parse_query(qb, (size_t)qlen, &r->q), DNS_MSG_OK);
	struct sockaddr_storage addrs[200];
	assert_true(naddr <= 200);
	for (size_t i = 0; i < naddr; i++) {
		memset(&addrs[i], 0, sizeof addrs[i]);
		if (qtype == DNS_TYPE_AAAA) {
			struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&addrs[i];
			in6->sin6_family = AF_INET6;
			in6->sin6_addr.s6_addr[0] = 0x20;
			in6->sin6_addr.s6_addr[15] = (uint8_t)(i + 1);
		} else {
			struct sockaddr_in *in = (struct sockaddr_in *)&addrs[i];
			in->sin_family = AF_INET;
			in->sin_addr.s_addr = htonl(0x0a000001u + (uint32_t)i);
		}
	}
	int len = dns_msg_build_reply(&r->q, qb, rcode, addrs, naddr, ttl, r->b, sizeof r->b);
	assert_true(len > 0);
	r->n = (size_t)len;
	scan_it(r);
}

/* A negative answer for name (A): NXDOMAIN or NODATA, with an SOA of the
 * given TTL and MINIMUM or none. */
static void negative(resp *r, const char *name, uint16_t flags, bool soa, uint32_t ttl,
                     uint32_t minimum)
{
	r->q = question(name, DNS_TYPE_A, 1);
	wmsg w = {0};
	whdr(&w, 1, flags, 1, 0, soa ? 1 : 0, 0);
	wquestion(&w, name, DNS_TYPE_A, DNS_CLASS_IN);
	if (soa)
		wsoa(&w, ttl, minimum);
	memcpy(r->b, w.b, w.n);
	r->n = w.n;
	scan_it(r);
}

static void store(dns_answers *c, const resp *r, uint64_t now)
{
	dns_answers_store(c, &r->q, r->b, r->n, &r->info, now);
}

static dns_answers_result look(dns_answers *c, const char *name, uint16_t qtype, uint64_t now)
{
	dns_question q = question(name, qtype, 0x5555);
	uint8_t out[DNS_ANSWERS_ENTRY_MAX];
	size_t len = 99;
	dns_answers_result res = dns_answers_lookup(c, &q, now, out, sizeof out, &len);
	if (res == DNS_ANSWERS_MISS)
		assert_int_equal(len, 0);
	else
		assert_true(len >= DNS_HEADER_LEN && len <= DNS_ANSWERS_ENTRY_MAX);
	return res;
}

static uint64_t count(dns_answers *c)
{
	dns_answers_stats st;
	dns_answers_stats_get(c, &st);
	return st.entries;
}

static void hit_rewrites_id_and_ages_ttls(void **state)
{
	(void)state;
	dns_answers *c = dns_answers_new(8);
	assert_non_null(c);
	resp r;
	answer(&r, "www.test", DNS_TYPE_A, DNS_RCODE_NOERROR, 3, 300);
	store(c, &r, T0);

	/* another client, another id, another case, 10.9 s later */
	dns_question q = question("WWW.Test", DNS_TYPE_A, 0x7777);
	uint8_t out[1024];
	size_t len;
	assert_int_equal(dns_answers_lookup(c, &q, T0 + 10999, out, sizeof out, &len),
	                 DNS_ANSWERS_HIT);
	assert_int_equal(len, r.n);
	assert_int_equal(out[0], 0x77);
	assert_int_equal(out[1], 0x77);
	dns_answer_info info;
	assert_int_equal(dns_msg_scan_answer(out, len, &q, &info), DNS_MSG_OK);
	assert_int_equal(info.min_ttl, 290); /* whole seconds */
	for (size_t i = 0; i < info.n_ttl; i++) {
		const uint8_t *p = out + info.ttl_off[i];
		assert_int_equal((uint32_t)p[0] << 24 | p[1] << 16 | p[2] << 8 | p[3], 290);
	}
	/* all else as stored */
	assert_memory_equal(out + 2, r.b + 2, info.ttl_off[0] - 2);
	struct sockaddr_storage a[4];
	uint32_t ttl;
	assert_int_equal(dns_msg_addresses(out, len, DNS_TYPE_A, a, 4, &ttl), 3);
	assert_int_equal(ttl, 290);

	/* the type is part of the key; a buffer too small is a miss */
	assert_int_equal(look(c, "www.test", DNS_TYPE_AAAA, T0), DNS_ANSWERS_MISS);
	assert_int_equal(dns_answers_lookup(c, &q, T0, out, r.n - 1, &len), DNS_ANSWERS_MISS);
	assert_int_equal(len, 0);
	assert_int_equal(look(c, "www.test", DNS_TYPE_A, T0), DNS_ANSWERS_HIT);
	/* the clock going back a little ages nothing */
	assert_int_equal(dns_answers_lookup(c, &q, T0 - 5000, out, sizeof out, &len),
	                 DNS_ANSWERS_HIT);
	assert_int_equal(dns_msg_scan_answer(out, len, &q, &info), DNS_MSG_OK);
	assert_int_equal(info.min_ttl, 300);
	dns_answers_del(c);
}

static void lifetimes(void **state)
{
	(void)state;
	static const struct {
		const char *name;
		uint32_t ttl;
		uint32_t life_s;
	} cases[] = {
		{"zero.test", 0, DNS_ANSWERS_TTL_MIN_S},
		{"four.test", 4, DNS_ANSWERS_TTL_MIN_S},
		{"sixty.test", 60, 60},
		{"day.test", 86400, DNS_ANSWERS_TTL_MAX_S},
		{"huge.test", 0x7fffffff, DNS_ANSWERS_TTL_MAX_S},
	};
	dns_answers *c = dns_answers_new(16);
	assert_non_null(c);
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		resp r;
		answer(&r, cases[i].name, DNS_TYPE_A, DNS_RCODE_NOERROR, 1, cases[i].ttl);
		store(c, &r, T0);
	}
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		/* alive to the last millisecond, gone at the end, and removed */
		assert_int_equal(look(c, cases[i].name, DNS_TYPE_A, T0 + S(cases[i].life_s) - 1),
		                 DNS_ANSWERS_HIT);
		uint64_t before = count(c);
		assert_int_equal(look(c, cases[i].name, DNS_TYPE_A, T0 + S(cases[i].life_s)),
		                 DNS_ANSWERS_MISS);
		assert_int_equal(count(c), before - 1);
	}
	dns_answers_del(c);
}

static void negative_lifetimes(void **state)
{
	(void)state;
	static const struct {
		const char *name;
		uint16_t flags;
		bool soa;
		uint32_t ttl, minimum, life_s;
	} cases[] = {
		{"nx.test", 0x8183, true, 3600, 600, DNS_ANSWERS_NEG_TTL_MAX_S},
		{"nx-short.test", 0x8183, true, 3600, 1, DNS_ANSWERS_NEG_TTL_MIN_S},
		{"nx-zero.test", 0x8183, true, 0, 0, DNS_ANSWERS_NEG_TTL_MIN_S},
		{"nodata.test", 0x8180, true, 60, 900, 60},
		{"nx-nosoa.test", 0x8183, false, 0, 0, DNS_ANSWERS_NEG_TTL_NOSOA_S},
		{"nodata-nosoa.test", 0x8180, false, 0, 0, DNS_ANSWERS_NEG_TTL_NOSOA_S},
	};
	dns_answers *c = dns_answers_new(16);
	assert_non_null(c);
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		resp r;
		negative(&r, cases[i].name, cases[i].flags, cases[i].soa, cases[i].ttl,
		         cases[i].minimum);
		assert_true(r.info.negative);
		store(c, &r, T0);
	}
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		assert_int_equal(look(c, cases[i].name, DNS_TYPE_A, T0 + S(cases[i].life_s) - 1),
		                 DNS_ANSWERS_HIT);
		assert_int_equal(look(c, cases[i].name, DNS_TYPE_A, T0 + S(cases[i].life_s)),
		                 DNS_ANSWERS_MISS);
	}
	dns_answers_stats st;
	dns_answers_stats_get(c, &st);
	assert_int_equal(st.hits, 6);
	assert_int_equal(st.negative_hits, 6);
	assert_int_equal(st.misses, 6);
	assert_int_equal(st.entries, 0);
	dns_answers_del(c);
}

static void not_stored(void **state)
{
	(void)state;
	dns_answers *c = dns_answers_new(8);
	assert_non_null(c);
	resp r;

	answer(&r, "tc.test", DNS_TYPE_A, DNS_RCODE_NOERROR, 1, 60);
	r.b[2] |= 0x02;
	scan_it(&r);
	assert_true(r.info.tc);
	store(c, &r, T0);

	static const uint8_t refused[] = {DNS_RCODE_SERVFAIL, DNS_RCODE_FORMERR, DNS_RCODE_REFUSED,
	                                  DNS_RCODE_NOTIMP};
	for (size_t i = 0; i < sizeof refused; i++) {
		answer(&r, "fail.test", DNS_TYPE_A, refused[i], 0, 60);
		store(c, &r, T0);
	}

	/* 12 + 14 + 28 per AAAA: 146 records are 4114 bytes */
	answer(&r, "big.test", DNS_TYPE_AAAA, DNS_RCODE_NOERROR, 146, 60);
	assert_true(r.n > DNS_ANSWERS_ENTRY_MAX);
	store(c, &r, T0);
	/* 145 are 4086: kept */
	answer(&r, "fits.test", DNS_TYPE_AAAA, DNS_RCODE_NOERROR, 145, 60);
	assert_true(r.n <= DNS_ANSWERS_ENTRY_MAX);
	store(c, &r, T0);

	assert_int_equal(look(c, "tc.test", DNS_TYPE_A, T0), DNS_ANSWERS_MISS);
	assert_int_equal(look(c, "fail.test", DNS_TYPE_A, T0), DNS_ANSWERS_MISS);
	assert_int_equal(look(c, "big.test", DNS_TYPE_AAAA, T0), DNS_ANSWERS_MISS);
	assert_int_equal(look(c, "fits.test", DNS_TYPE_AAAA, T0), DNS_ANSWERS_HIT);
	assert_int_equal(count(c), 1);
	dns_answers_del(c);
}

static void store_name(dns_answers *c, const char *name, uint32_t ttl, uint64_t now)
{
	resp r;
	answer(&r, name, DNS_TYPE_A, DNS_RCODE_NOERROR, 1, ttl);
	store(c, &r, now);
}

static void lru_eviction_order(void **state)
{
	(void)state;
	dns_answers *c = dns_answers_new(4);
	assert_non_null(c);
	store_name(c, "a.test", 600, T0);
	store_name(c, "b.test", 600, T0 + 1);
	store_name(c, "c.test", 600, T0 + 2);
	store_name(c, "d.test", 600, T0 + 3);
	/* touching a makes b the least recently used */
	assert_int_equal(look(c, "a.test", DNS_TYPE_A, T0 + 4), DNS_ANSWERS_HIT);
	store_name(c, "e.test", 600, T0 + 5);
	assert_int_equal(count(c), 4);
	assert_int_equal(look(c, "b.test", DNS_TYPE_A, T0 + 6), DNS_ANSWERS_MISS);
	/* now c is the oldest */
	store_name(c, "f.test", 600, T0 + 7);
	assert_int_equal(look(c, "c.test", DNS_TYPE_A, T0 + 8), DNS_ANSWERS_MISS);
	const char *const kept[] = {"a.test", "d.test", "e.test", "f.test"};
	for (int i = 0; i < 4; i++)
		assert_int_equal(look(c, kept[i], DNS_TYPE_A, T0 + 9), DNS_ANSWERS_HIT);
	/* replacing evicts nothing */
	store_name(c, "d.test", 60, T0 + 10);
	assert_int_equal(count(c), 4);
	dns_answers_stats st;
	dns_answers_stats_get(c, &st);
	assert_int_equal(st.evictions, 2);
	dns_answers_del(c);
}

static void expired_entry_goes_first(void **state)
{
	(void)state;
	dns_answers *c = dns_answers_new(3);
	assert_non_null(c);
	store_name(c, "old-live.test", 600, T0);
	store_name(c, "short.test", 10, T0);
	store_name(c, "new-live.test", 600, T0);
	/* at T0 + 20 s short.test is dead but not the least recently used */
	store_name(c, "next.test", 600, T0 + S(20));
	assert_int_equal(count(c), 3);
	assert_int_equal(look(c, "old-live.test", DNS_TYPE_A, T0 + S(20)), DNS_ANSWERS_HIT);
	assert_int_equal(look(c, "new-live.test", DNS_TYPE_A, T0 + S(20)), DNS_ANSWERS_HIT);
	assert_int_equal(look(c, "next.test", DNS_TYPE_A, T0 + S(20)), DNS_ANSWERS_HIT);
	dns_answers_del(c);
}

static void capacity_bound_under_random_names(void **state)
{
	(void)state;
	assert_null(dns_answers_new(0));
	assert_null(dns_answers_new((size_t)DNS_ANSWERS_CAPACITY_LIMIT + 1));
	enum { CAP = 100, NAMES = 10000 };
	dns_answers *c = dns_answers_new(CAP);
	assert_non_null(c);
	srand(20261202);
	char last[64] = "";
	for (int i = 0; i < NAMES; i++) {
		snprintf(last, sizeof last, "h%08x-%d.test", (unsigned)rand(), i);
		store_name(c, last, 1 + (uint32_t)(rand() % 4000), T0 + (uint64_t)i);
		assert_true(count(c) <= CAP);
		if (i % 3 == 0) {
			dns_answers_result res = look(c, last, DNS_TYPE_A, T0 + (uint64_t)i);
			assert_int_equal(res, DNS_ANSWERS_HIT);
		}
	}
	assert_int_equal(count(c), CAP);
	assert_int_equal(look(c, last, DNS_TYPE_A, T0 + NAMES), DNS_ANSWERS_HIT);
	dns_answers_stats st;
	dns_answers_stats_get(c, &st);
	assert_int_equal(st.evictions, NAMES - CAP);
	dns_answers_del(c);
	dns_answers_del(NULL);
}

static void prefetch_signal_once_per_store(void **state)
{
	(void)state;
	dns_answers *c = dns_answers_new(8);
	assert_non_null(c);
	store_name(c, "hot.test", 100, T0); /* last 10 %: from T0 + 90 s */
	store_name(c, "cold.test", 100, T0);

	/* hit twice early: no signal before the window */
	assert_int_equal(look(c, "hot.test", DNS_TYPE_A, T0 + S(1)), DNS_ANSWERS_HIT);
	assert_int_equal(look(c, "hot.test", DNS_TYPE_A, T0 + S(89)), DNS_ANSWERS_HIT);
	/* in the window: one caller is told, the next ones are not */
	assert_int_equal(look(c, "hot.test", DNS_TYPE_A, T0 + S(90)), DNS_ANSWERS_HIT_PREFETCH);
	assert_int_equal(look(c, "hot.test", DNS_TYPE_A, T0 + S(91)), DNS_ANSWERS_HIT);
	assert_int_equal(look(c, "hot.test", DNS_TYPE_A, T0 + S(99)), DNS_ANSWERS_HIT);

	/* a first hit in the window is not popular enough; the second is */
	assert_int_equal(look(c, "cold.test", DNS_TYPE_A, T0 + S(95)), DNS_ANSWERS_HIT);
	assert_int_equal(look(c, "cold.test", DNS_TYPE_A, T0 + S(96)), DNS_ANSWERS_HIT_PREFETCH);

	/* the refreshed answer starts over: no hits, no mark */
	store_name(c, "hot.test", 100, T0 + S(99));
	assert_int_equal(look(c, "hot.test", DNS_TYPE_A, T0 + S(190)), DNS_ANSWERS_HIT);
	assert_int_equal(look(c, "hot.test", DNS_TYPE_A, T0 + S(191)), DNS_ANSWERS_HIT_PREFETCH);
	assert_int_equal(look(c, "hot.test", DNS_TYPE_A, T0 + S(192)), DNS_ANSWERS_HIT);
	/* storing before the window also clears the mark */
	store_name(c, "hot.test", 100, T0 + S(192));
	assert_int_equal(look(c, "hot.test", DNS_TYPE_A, T0 + S(283)), DNS_ANSWERS_HIT);
	assert_int_equal(look(c, "hot.test", DNS_TYPE_A, T0 + S(284)), DNS_ANSWERS_HIT_PREFETCH);

	dns_answers_stats st;
	dns_answers_stats_get(c, &st);
	assert_int_equal(st.prefetches, 4);
	assert_int_equal(st.hits, 12);
	assert_int_equal(st.negative_hits, 0);
	assert_int_equal(st.misses, 0);
	dns_answers_del(c);
}

static void stats_count_every_lookup(void **state)
{
	(void)state;
	dns_answers *c = dns_answers_new(2);
	assert_non_null(c);
	dns_answers_stats st;
	dns_answers_stats_get(c, &st);
	assert_memory_equal(&st, &(dns_answers_stats){0}, sizeof st);
	assert_int_equal(look(c, "a.test", DNS_TYPE_A, T0), DNS_ANSWERS_MISS);
	store_name(c, "a.test", 60, T0);
	assert_int_equal(look(c, "a.test", DNS_TYPE_A, T0 + 1), DNS_ANSWERS_HIT);
	resp r;
	negative(&r, "nx.test", 0x8183, false, 0, 0);
	store(c, &r, T0);
	assert_int_equal(look(c, "nx.test", DNS_TYPE_A, T0 + 2), DNS_ANSWERS_HIT);
	assert_int_equal(look(c, "nx.test", DNS_TYPE_A, T0 + S(30)), DNS_ANSWERS_MISS); /* expired */
	store_name(c, "b.test", 60, T0 + S(31));
	store_name(c, "c.test", 60, T0 + S(32)); /* full: a.test goes */
	dns_answers_stats_get(c, &st);
	assert_int_equal(st.hits, 2);
	assert_int_equal(st.negative_hits, 1);
	assert_int_equal(st.misses, 2);
	assert_int_equal(st.evictions, 1);
	assert_int_equal(st.prefetches, 0);
	assert_int_equal(st.entries, 2);
	dns_answers_del(c);
}

/* Threads storing and looking up over a small cache at once: under ASan or
 * TSan this shows the lock covers the table, the list and the copies. */
enum { THREADS = 2, OPS = 20000 };

static resp hammer_resp[16];

static void *hammer(void *arg)
{
	dns_answers *c = arg;
	uint8_t out[1024];
	for (unsigned i = 0; i < OPS; i++) {
		const resp *r = &hammer_resp[i % 16];
		size_t len;
		if (i % 3 == 0) {
			dns_answers_store(c, &r->q, r->b, r->n, &r->info, T0 + i);
			continue;
		}
		dns_answers_result res = dns_answers_lookup(c, &r->q, T0 + i, out, sizeof out, &len);
		if (res != DNS_ANSWERS_MISS && (len != r->n || memcmp(out + 2, r->b + 2, 20) != 0))
			return (void *)1;
	}
	return NULL;
}

static void shared_between_threads(void **state)
{
	(void)state;
	for (int i = 0; i < 16; i++) {
		char name[32];
		snprintf(name, sizeof name, "n%d.test", i);
		answer(&hammer_resp[i], name, DNS_TYPE_A, DNS_RCODE_NOERROR, 1 + (size_t)i % 5,
		       (uint32_t)i % 9);
	}
	dns_answers *c = dns_answers_new(8);
	assert_non_null(c);
	pthread_t t[THREADS];
	for (int i = 0; i < THREADS; i++)
		assert_int_equal(pthread_create(&t[i], NULL, hammer, c), 0);
	for (int i = 0; i < THREADS; i++) {
		void *res;
		assert_int_equal(pthread_join(t[i], &res), 0);
		assert_null(res);
	}
	assert_true(count(c) <= 8);
	dns_answers_del(c);
}

/* Many threads hitting one entry in its prefetch window: one is told. */
static unsigned prefetch_told[4];

static void *late_hitter(void *arg)
{
	dns_answers *c = ((void **)arg)[0];
	unsigned *told = ((void **)arg)[1];
	dns_question q = question("hot.test", DNS_TYPE_A, 1);
	uint8_t out[512];
	size_t len;
	for (int i = 0; i < 1000; i++)
		*told += dns_answers_lookup(c, &q, T0 + S(95), out, sizeof out, &len) ==
		         DNS_ANSWERS_HIT_PREFETCH;
	return NULL;
}

static void prefetch_told_once_across_threads(void **state)
{
	(void)state;
	dns_answers *c = dns_answers_new(8);
	assert_non_null(c);
	store_name(c, "hot.test", 100, T0);
	pthread_t t[4];
	void *args[4][2];
	for (int i = 0; i < 4; i++) {
		args[i][0] = c;
		args[i][1] = &prefetch_told[i];
		assert_int_equal(pthread_create(&t[i], NULL, late_hitter, args[i]), 0);
	}
	unsigned total = 0;
	for (int i = 0; i < 4; i++) {
		assert_int_equal(pthread_join(t[i], NULL), 0);
		total += prefetch_told[i];
	}
	assert_int_equal(total, 1);
	dns_answers_del(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(hit_rewrites_id_and_ages_ttls),
		cmocka_unit_test(lifetimes),
		cmocka_unit_test(negative_lifetimes),
		cmocka_unit_test(not_stored),
		cmocka_unit_test(lru_eviction_order),
		cmocka_unit_test(expired_entry_goes_first),
		cmocka_unit_test(capacity_bound_under_random_names),
		cmocka_unit_test(prefetch_signal_once_per_store),
		cmocka_unit_test(stats_count_every_lookup),
		cmocka_unit_test(shared_between_threads),
		cmocka_unit_test(prefetch_told_once_across_threads),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
