/* test_guard.c - the guard's per-source count of connections and what they carry (sub-flows, calls, UDP entries), and the open-rate buckets (issue 32 D2, D3). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <arpa/inet.h>
#include <cmocka.h>
#include <uv.h>

#include "runtime/guard.h"

static struct sockaddr_in addr(const char *ip)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(1234)};
	assert_int_equal(inet_pton(AF_INET, ip, &a.sin_addr), 1);
	return a;
}

#define SA(a) ((const struct sockaddr *)&(a))

/* D2: holds count with the connections against one bound, per source. */
static void holds_share_the_connection_bound(void **state)
{
	(void)state;
	guard *g = guard_new(10);
	assert_non_null(g);
	struct sockaddr_in a = addr("192.0.2.1"), b = addr("192.0.2.2");
	assert_true(guard_source_take(g, SA(a))); /* the carrier: 1 */
	for (int i = 0; i < 9; i++)
		assert_true(guard_source_hold(g, SA(a), 1)); /* its sub-flows: 10 */
	assert_false(guard_source_hold(g, SA(a), 1));
	assert_false(guard_source_take(g, SA(a))); /* a connection too */
	assert_true(guard_source_hold(g, SA(b), 2)); /* another source is apart */
	guard_source_unhold(g, SA(a), 1);
	assert_false(guard_source_hold(g, SA(a), 2)); /* 9 + 2 > 10: all or nothing */
	assert_true(guard_source_hold(g, SA(a), 1));
	guard_stats st;
	guard_stats_get(g, &st);
	assert_int_equal(st.refused_fanout, 2);
	assert_int_equal(st.refused_source, 1);
	/* everything given back: the source's entry goes, and it starts over */
	for (int i = 0; i < 9; i++)
		guard_source_unhold(g, SA(a), 1);
	guard_source_put(g, SA(a));
	for (int i = 0; i < 10; i++)
		assert_true(guard_source_hold(g, SA(a), 1));
	guard_del(g);
}

/* D3: a bucket starts with its burst, refills at its rate, never past the
 * burst. */
static void bucket_rate_and_burst(void **state)
{
	(void)state;
	guard_bucket b = {0};
	for (int i = 0; i < 4; i++)
		assert_true(guard_bucket_take(&b, 1000, 2, 4));
	assert_false(guard_bucket_take(&b, 1000, 2, 4));
	assert_false(guard_bucket_take(&b, 1499, 2, 4)); /* 0.998 of a token */
	assert_true(guard_bucket_take(&b, 1500, 2, 4));  /* 2 a second: one each 500 ms */
	assert_false(guard_bucket_take(&b, 1500, 2, 4));
	int n = 0;
	while (guard_bucket_take(&b, 1000000, 2, 4)) /* a long pause fills it to the burst */
		n++;
	assert_int_equal(n, 4);
	assert_false(guard_bucket_take(&b, 999999, 2, 4)); /* time going back adds nothing */
}

/* D3: a session's opens and its source's, together. */
static void opens_by_session_and_source(void **state)
{
	(void)state;
	guard *g = guard_new(1000);
	struct sockaddr_in a = addr("192.0.2.1");
	assert_true(guard_source_take(g, SA(a)));
	guard_bucket s1 = {0};
	int n = 0;
	while (guard_open_allowed(g, SA(a), &s1, 5000, "mux sub-flow"))
		n++;
	assert_int_equal(n, GUARD_OPEN_BURST_SESSION);
	/* more sessions of the source: the source's burst is the bound */
	guard_bucket more[8] = {0};
	int total = n;
	for (int i = 0; i < 8; i++)
		while (guard_open_allowed(g, SA(a), &more[i], 5000, "grpc call"))
			total++;
	assert_int_equal(total, GUARD_OPEN_BURST_SOURCE);
	/* a second later: the session's rate, within the source's */
	n = 0;
	while (guard_open_allowed(g, SA(a), &s1, 6000, "mux sub-flow"))
		n++;
	assert_int_equal(n, GUARD_OPEN_RATE_SESSION);
	guard_stats st;
	guard_stats_get(g, &st);
	assert_true(st.refused_open_rate >= 9);
	/* no guard: the session's bucket only */
	guard_bucket s2 = {0};
	n = 0;
	while (guard_open_allowed(NULL, SA(a), &s2, 0, "mux sub-flow"))
		n++;
	assert_int_equal(n, GUARD_OPEN_BURST_SESSION);
	guard_source_put(g, SA(a));
	guard_del(g);
}

/* D3: a source that drained its bucket and closed every carrier does not
 * come back with a full one: its entry stays until the bucket refills. */
static void reconnecting_does_not_refill_the_source(void **state)
{
	(void)state;
	guard *g = guard_new(1000);
	struct sockaddr_in a = addr("192.0.2.9");
	uint64_t now = uv_hrtime() / 1000000; /* the guard's own clock for its entries */
	int total = 0;
	for (int i = 0; i < 8; i++) {
		assert_true(guard_source_take(g, SA(a)));
		guard_bucket s = {0};
		while (guard_open_allowed(g, SA(a), &s, now, "mux sub-flow"))
			total++;
		guard_source_put(g, SA(a)); /* the carrier goes; a new one comes */
	}
	assert_int_equal(total, GUARD_OPEN_BURST_SOURCE);
	guard_del(g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(holds_share_the_connection_bound),
		cmocka_unit_test(bucket_rate_and_burst),
		cmocka_unit_test(opens_by_session_and_source),
		cmocka_unit_test(reconnecting_does_not_refill_the_source),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
