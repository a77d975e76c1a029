/* test_dns_cache.c - the answer cache: TTLs against a fake clock, the bound and eviction, names, families, threads. */
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

#include "runtime/dns_cache.h"

#define T0 1000000u /* an arbitrary start on the fake clock, ms */

static struct sockaddr_storage ip(const char *text)
{
	struct sockaddr_storage ss;
	memset(&ss, 0, sizeof ss);
	if (strchr(text, ':')) {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
		in6->sin6_family = AF_INET6;
		assert_int_equal(inet_pton(AF_INET6, text, &in6->sin6_addr), 1);
	} else {
		struct sockaddr_in *in = (struct sockaddr_in *)&ss;
		in->sin_family = AF_INET;
		assert_int_equal(inet_pton(AF_INET, text, &in->sin_addr), 1);
	}
	return ss;
}

static void assert_ip(const struct sockaddr_storage *ss, const char *text)
{
	char buf[INET6_ADDRSTRLEN];
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
		assert_int_equal(in->sin_port, 0);
		assert_non_null(inet_ntop(AF_INET, &in->sin_addr, buf, sizeof buf));
	} else {
		assert_int_equal(ss->ss_family, AF_INET6);
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
		assert_int_equal(in6->sin6_port, 0);
		assert_non_null(inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof buf));
	}
	assert_string_equal(buf, text);
}

static void store1(dns_cache *c, const char *name, const char *addr, uint32_t ttl_s, uint64_t now)
{
	struct sockaddr_storage a = ip(addr);
	dns_cache_store(c, name, &a, 1, ttl_s, now);
}

static dns_cache_result look(dns_cache *c, const char *name, uint64_t now, size_t *n)
{
	struct sockaddr_storage out[DNS_MAX_ADDRS];
	return dns_cache_lookup(c, name, now, out, DNS_MAX_ADDRS, n);
}

static void ttl_expiry_on_the_fake_clock(void **state)
{
	(void)state;
	dns_cache *c = dns_cache_new(8);
	assert_non_null(c);
	size_t n;
	assert_int_equal(look(c, "a.test", T0, &n), DNS_CACHE_MISS);
	assert_int_equal(n, 0);

	store1(c, "a.test", "192.0.2.1", 60, T0);
	struct sockaddr_storage out[DNS_MAX_ADDRS];
	assert_int_equal(dns_cache_lookup(c, "a.test", T0, out, DNS_MAX_ADDRS, &n), DNS_CACHE_HIT);
	assert_int_equal(n, 1);
	assert_ip(&out[0], "192.0.2.1");
	/* Alive up to the last millisecond of the TTL, gone at TTL. */
	assert_int_equal(look(c, "a.test", T0 + 60000 - 1, &n), DNS_CACHE_HIT);
	assert_int_equal(look(c, "a.test", T0 + 60000, &n), DNS_CACHE_MISS);
	assert_int_equal(n, 0);
	/* The expired entry was removed when found. */
	assert_int_equal(dns_cache_count(c), 0);
	dns_cache_del(c);
}

static void ttl_floor_and_ceiling(void **state)
{
	(void)state;
	dns_cache *c = dns_cache_new(8);
	assert_non_null(c);
	size_t n;
	store1(c, "zero.test", "192.0.2.1", 0, T0);
	store1(c, "long.test", "192.0.2.2", 7 * 86400, T0);
	store1(c, "max.test", "192.0.2.3", UINT32_MAX, T0);

	assert_int_equal(look(c, "zero.test", T0 + DNS_TTL_MIN_S * 1000 - 1, &n), DNS_CACHE_HIT);
	assert_int_equal(look(c, "zero.test", T0 + DNS_TTL_MIN_S * 1000, &n), DNS_CACHE_MISS);

	assert_int_equal(look(c, "long.test", T0 + DNS_TTL_MAX_S * 1000ull - 1, &n), DNS_CACHE_HIT);
	assert_int_equal(look(c, "long.test", T0 + DNS_TTL_MAX_S * 1000ull, &n), DNS_CACHE_MISS);
	assert_int_equal(look(c, "max.test", T0 + DNS_TTL_MAX_S * 1000ull, &n), DNS_CACHE_MISS);
	dns_cache_del(c);
}

static void names_are_case_insensitive(void **state)
{
	(void)state;
	dns_cache *c = dns_cache_new(8);
	assert_non_null(c);
	size_t n;
	store1(c, "WwW.Example.COM", "192.0.2.7", 60, T0);
	assert_int_equal(look(c, "www.example.com", T0, &n), DNS_CACHE_HIT);
	assert_int_equal(look(c, "WWW.EXAMPLE.COM", T0, &n), DNS_CACHE_HIT);
	assert_int_equal(look(c, "www.example.co", T0, &n), DNS_CACHE_MISS);
	assert_int_equal(look(c, "www.example.comm", T0, &n), DNS_CACHE_MISS);
	/* Storing under another case replaces, it does not add. */
	store1(c, "www.EXAMPLE.com", "192.0.2.8", 60, T0);
	assert_int_equal(dns_cache_count(c), 1);
	struct sockaddr_storage out[2];
	assert_int_equal(dns_cache_lookup(c, "Www.example.com", T0, out, 2, &n), DNS_CACHE_HIT);
	assert_int_equal(n, 1);
	assert_ip(&out[0], "192.0.2.8");
	dns_cache_del(c);
}

static void both_families_kept_in_order(void **state)
{
	(void)state;
	dns_cache *c = dns_cache_new(8);
	assert_non_null(c);
	struct sockaddr_storage in[4] = {ip("192.0.2.1"), ip("2001:db8::1"), ip("192.0.2.2"),
	                                 ip("2001:db8::2")};
	/* Ports given to the cache do not come back. */
	((struct sockaddr_in *)&in[0])->sin_port = htons(443);
	((struct sockaddr_in6 *)&in[1])->sin6_port = htons(443);
	dns_cache_store(c, "dual.test", in, 4, 60, T0);

	struct sockaddr_storage out[DNS_MAX_ADDRS];
	size_t n;
	assert_int_equal(dns_cache_lookup(c, "dual.test", T0, out, DNS_MAX_ADDRS, &n), DNS_CACHE_HIT);
	assert_int_equal(n, 4);
	assert_ip(&out[0], "192.0.2.1");
	assert_ip(&out[1], "2001:db8::1");
	assert_ip(&out[2], "192.0.2.2");
	assert_ip(&out[3], "2001:db8::2");

	/* A smaller out buffer gets the first max. */
	assert_int_equal(dns_cache_lookup(c, "dual.test", T0, out, 3, &n), DNS_CACHE_HIT);
	assert_int_equal(n, 3);
	assert_ip(&out[2], "192.0.2.2");
	dns_cache_del(c);
}

static void at_most_max_addrs_per_name(void **state)
{
	(void)state;
	dns_cache *c = dns_cache_new(8);
	assert_non_null(c);
	struct sockaddr_storage in[DNS_MAX_ADDRS + 5];
	for (size_t i = 0; i < DNS_MAX_ADDRS + 5; i++) {
		char text[32];
		snprintf(text, sizeof text, "10.0.0.%zu", i + 1);
		in[i] = ip(text);
	}
	dns_cache_store(c, "many.test", in, DNS_MAX_ADDRS + 5, 60, T0);
	struct sockaddr_storage out[DNS_MAX_ADDRS + 5];
	size_t n;
	assert_int_equal(dns_cache_lookup(c, "many.test", T0, out, DNS_MAX_ADDRS + 5, &n),
	                 DNS_CACHE_HIT);
	assert_int_equal(n, DNS_MAX_ADDRS);
	assert_ip(&out[0], "10.0.0.1");
	assert_ip(&out[DNS_MAX_ADDRS - 1], "10.0.0.16");

	/* Other families are skipped; with nothing usable nothing is stored. */
	struct sockaddr_storage odd;
	memset(&odd, 0, sizeof odd);
	odd.ss_family = AF_UNIX;
	dns_cache_store(c, "odd.test", &odd, 1, 60, T0);
	assert_int_equal(look(c, "odd.test", T0, &n), DNS_CACHE_MISS);
	dns_cache_del(c);
}

static void capacity_bound_evicts_least_recently_used(void **state)
{
	(void)state;
	dns_cache *c = dns_cache_new(4);
	assert_non_null(c);
	size_t n;
	store1(c, "a.test", "192.0.2.1", 600, T0);
	store1(c, "b.test", "192.0.2.2", 600, T0 + 1);
	store1(c, "c.test", "192.0.2.3", 600, T0 + 2);
	store1(c, "d.test", "192.0.2.4", 600, T0 + 3);
	assert_int_equal(dns_cache_count(c), 4);
	/* Touching a makes b the least recently used. */
	assert_int_equal(look(c, "a.test", T0 + 4, &n), DNS_CACHE_HIT);
	store1(c, "e.test", "192.0.2.5", 600, T0 + 5);
	assert_int_equal(dns_cache_count(c), 4);
	assert_int_equal(look(c, "b.test", T0 + 6, &n), DNS_CACHE_MISS);
	assert_int_equal(look(c, "a.test", T0 + 6, &n), DNS_CACHE_HIT);
	assert_int_equal(look(c, "c.test", T0 + 6, &n), DNS_CACHE_HIT);
	assert_int_equal(look(c, "d.test", T0 + 6, &n), DNS_CACHE_HIT);
	assert_int_equal(look(c, "e.test", T0 + 6, &n), DNS_CACHE_HIT);

	/* Replacing an entry does not evict anything. */
	store1(c, "c.test", "192.0.2.33", 600, T0 + 7);
	assert_int_equal(dns_cache_count(c), 4);
	assert_int_equal(look(c, "a.test", T0 + 8, &n), DNS_CACHE_HIT);
	dns_cache_del(c);
}

static void full_cache_drops_expired_before_live(void **state)
{
	(void)state;
	dns_cache *c = dns_cache_new(3);
	assert_non_null(c);
	size_t n;
	store1(c, "old-live.test", "192.0.2.1", 600, T0);
	store1(c, "short.test", "192.0.2.2", 10, T0);
	store1(c, "new-live.test", "192.0.2.3", 600, T0);
	/* At T0+20 s short.test has expired but is not the least recently used
	 * one: it still goes first. */
	store1(c, "next.test", "192.0.2.4", 600, T0 + 20000);
	assert_int_equal(dns_cache_count(c), 3);
	assert_int_equal(look(c, "old-live.test", T0 + 20000, &n), DNS_CACHE_HIT);
	assert_int_equal(look(c, "new-live.test", T0 + 20000, &n), DNS_CACHE_HIT);
	assert_int_equal(look(c, "next.test", T0 + 20000, &n), DNS_CACHE_HIT);
	dns_cache_del(c);
}

static void negative_answers(void **state)
{
	(void)state;
	dns_cache *c = dns_cache_new(4);
	assert_non_null(c);
	size_t n = 99;
	dns_cache_store(c, "nx.test", NULL, 0, 5, T0);
	assert_int_equal(look(c, "nx.test", T0 + 4999, &n), DNS_CACHE_NEGATIVE);
	assert_int_equal(n, 0);
	assert_int_equal(look(c, "NX.test", T0 + 5000, &n), DNS_CACHE_MISS);
	/* A positive answer replaces a negative one. */
	dns_cache_store(c, "nx.test", NULL, 0, 5, T0);
	store1(c, "nx.test", "192.0.2.9", 60, T0 + 1);
	assert_int_equal(look(c, "nx.test", T0 + 2, &n), DNS_CACHE_HIT);
	assert_int_equal(n, 1);
	dns_cache_del(c);
}

/* Each lookup is counted once by its result; a store that makes room
 * counts an eviction; entries follows the count. */
static void stats_count_every_lookup(void **state)
{
	(void)state;
	dns_cache *c = dns_cache_new(2);
	assert_non_null(c);
	dns_cache_stats st;
	dns_cache_stats_get(c, &st);
	assert_memory_equal(&st, &(dns_cache_stats){0}, sizeof st);
	size_t n;
	assert_int_equal(look(c, "a.test", T0, &n), DNS_CACHE_MISS);
	store1(c, "a.test", "192.0.2.1", 60, T0);
	assert_int_equal(look(c, "a.test", T0 + 1, &n), DNS_CACHE_HIT);
	assert_int_equal(look(c, "A.test", T0 + 2, &n), DNS_CACHE_HIT);
	dns_cache_store(c, "nx.test", NULL, 0, 5, T0);
	assert_int_equal(look(c, "nx.test", T0 + 3, &n), DNS_CACHE_NEGATIVE);
	assert_int_equal(look(c, "nx.test", T0 + 5000, &n), DNS_CACHE_MISS); /* expired */
	assert_int_equal(look(c, "", T0, &n), DNS_CACHE_MISS);              /* never stored */
	store1(c, "b.test", "192.0.2.2", 60, T0 + 5001);
	store1(c, "c.test", "192.0.2.3", 60, T0 + 5002); /* full: a.test goes */
	dns_cache_stats_get(c, &st);
	assert_int_equal(st.hits, 2);
	assert_int_equal(st.negative, 1);
	assert_int_equal(st.misses, 3);
	assert_int_equal(st.evictions, 1);
	assert_int_equal(st.entries, 2);
	assert_int_equal(st.entries, dns_cache_count(c));
	dns_cache_del(c);
}

static void name_bounds(void **state)
{
	(void)state;
	dns_cache *c = dns_cache_new(4);
	assert_non_null(c);
	char name[DNS_NAME_MAX + 2];
	memset(name, 'a', sizeof name);
	name[DNS_NAME_MAX] = '\0'; /* 253 characters: kept */
	size_t n;
	store1(c, name, "192.0.2.1", 60, T0);
	assert_int_equal(look(c, name, T0, &n), DNS_CACHE_HIT);
	name[DNS_NAME_MAX] = 'a';
	name[DNS_NAME_MAX + 1] = '\0'; /* 254: refused */
	store1(c, name, "192.0.2.1", 60, T0);
	assert_int_equal(look(c, name, T0, &n), DNS_CACHE_MISS);
	store1(c, "", "192.0.2.1", 60, T0);
	assert_int_equal(look(c, "", T0, &n), DNS_CACHE_MISS);
	assert_int_equal(dns_cache_count(c), 1);
	dns_cache_del(c);
}

static void capacity_limits(void **state)
{
	(void)state;
	assert_null(dns_cache_new(0));
	assert_null(dns_cache_new((size_t)DNS_CACHE_CAPACITY_LIMIT + 1));
	dns_cache *c = dns_cache_new(DNS_CACHE_MAX);
	assert_non_null(c);
	for (unsigned i = 0; i < DNS_CACHE_MAX + 100; i++) {
		char name[32];
		snprintf(name, sizeof name, "h%u.test", i);
		store1(c, name, "192.0.2.1", 60, T0 + i);
	}
	assert_int_equal(dns_cache_count(c), DNS_CACHE_MAX);
	size_t n;
	assert_int_equal(look(c, "h0.test", T0 + 5000, &n), DNS_CACHE_MISS);
	assert_int_equal(look(c, "h4195.test", T0 + 5000, &n), DNS_CACHE_HIT);
	dns_cache_del(c);
	dns_cache_del(NULL);
}

/* Several threads storing and looking up over a small cache at once: under
 * the sanitizers (or TSan) this shows the lock covers the table and list. */
enum { THREADS = 4, OPS = 20000 };

static void *hammer(void *arg)
{
	dns_cache *c = arg;
	struct sockaddr_storage out[DNS_MAX_ADDRS];
	struct sockaddr_storage in[2] = {ip("192.0.2.1"), ip("2001:db8::1")};
	for (unsigned i = 0; i < OPS; i++) {
		char name[32];
		snprintf(name, sizeof name, "n%u.test", i % 97);
		size_t n;
		if (i % 3 == 0)
			dns_cache_store(c, name, in, 2, i % 7, T0 + i);
		else if (dns_cache_lookup(c, name, T0 + i, out, DNS_MAX_ADDRS, &n) == DNS_CACHE_HIT &&
		         n != 2)
			return (void *)1;
	}
	return NULL;
}

static void shared_between_threads(void **state)
{
	(void)state;
	dns_cache *c = dns_cache_new(32);
	assert_non_null(c);
	pthread_t t[THREADS];
	for (int i = 0; i < THREADS; i++)
		assert_int_equal(pthread_create(&t[i], NULL, hammer, c), 0);
	for (int i = 0; i < THREADS; i++) {
		void *res;
		assert_int_equal(pthread_join(t[i], &res), 0);
		assert_null(res);
	}
	assert_true(dns_cache_count(c) <= 32);
	dns_cache_del(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(ttl_expiry_on_the_fake_clock),
		cmocka_unit_test(ttl_floor_and_ceiling),
		cmocka_unit_test(names_are_case_insensitive),
		cmocka_unit_test(both_families_kept_in_order),
		cmocka_unit_test(at_most_max_addrs_per_name),
		cmocka_unit_test(capacity_bound_evicts_least_recently_used),
		cmocka_unit_test(full_cache_drops_expired_before_live),
		cmocka_unit_test(negative_answers),
		cmocka_unit_test(stats_count_every_lookup),
		cmocka_unit_test(name_bounds),
		cmocka_unit_test(capacity_limits),
		cmocka_unit_test(shared_between_threads),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
