/* test_principal.c - admission (seed 002 Session::admit and its failure texts), revocation, session counts, and the token buckets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "runtime/pool.h"
#include "runtime/principal.h"

static void first_flow_binds_and_later_flows_follow_the_binding(void **state)
{
	(void)state;
	principal *alice = principal_new("alice", 0, 0, 0);
	session *s = session_new();
	assert_null(session_admit(s, alice));
	assert_ptr_equal(s->bound, alice);
	assert_int_equal(atomic_load(&alice->sessions), 1);
	assert_null(session_admit(s, alice)); /* a mux sub-flow, a UDP sub-link */
	assert_int_equal(s->flows, 2);
	assert_int_equal(atomic_load(&alice->sessions), 1);
	session_release(s);
	assert_int_equal(atomic_load(&alice->sessions), 0);
	principal_release(alice);
}

static void a_revoked_principal_is_refused_under_every_policy(void **state)
{
	(void)state;
	principal_revoked how[] = {PRINCIPAL_REVOKED_KEEP, PRINCIPAL_REVOKED_CLOSE};
	for (int i = 0; i < 2; i++) {
		principal *p = principal_new("bob", 0, 0, 0);
		principal_revoke(p, how[i]);
		session *s = session_new();
		assert_string_equal(session_admit(s, p),
		                    "the user was removed before the session opened a flow");
		/* the session is closed with it */
		assert_string_equal(session_admit(s, p), "the session was closed");
		assert_int_equal(atomic_load(&p->sessions), 0);
		session_release(s);
		/* no session at all: the principal alone decides */
		assert_string_equal(session_admit(NULL, p),
		                    "the user was removed before the session opened a flow");
		principal_release(p);
	}
}

static void revoking_a_bound_session_closes_it_only_with_close(void **state)
{
	(void)state;
	principal *keep = principal_new("k", 0, 0, 0), *close = principal_new("c", 0, 0, 0);
	session *a = session_new(), *b = session_new();
	assert_null(session_admit(a, keep));
	assert_null(session_admit(b, close));
	principal_revoke(keep, PRINCIPAL_REVOKED_KEEP);
	principal_revoke(close, PRINCIPAL_REVOKED_CLOSE);
	principal_revoke(close, PRINCIPAL_REVOKED_KEEP); /* the first revoke wins */
	assert_int_equal(principal_state(close), PRINCIPAL_REVOKED_CLOSE);
	assert_null(session_admit(a, keep)); /* keep: its open session goes on */
	assert_string_equal(session_admit(b, close), "the session was closed");
	session_close(a);
	assert_string_equal(session_admit(a, keep), "the session was closed");
	session_release(a);
	session_release(b);
	principal_release(keep);
	principal_release(close);
}

static void max_sessions_counts_bound_sessions(void **state)
{
	(void)state;
	principal *p = principal_new("carol", 0, 0, 2);
	session *s[3] = {session_new(), session_new(), session_new()};
	assert_null(session_admit(s[0], p));
	assert_null(session_admit(s[1], p));
	assert_string_equal(session_admit(s[2], p), "the user has reached its max_sessions");
	assert_int_equal(atomic_load(&p->sessions), 2);
	session_release(s[0]);
	assert_null(session_admit(s[2], p)); /* a place came free */
	session_release(s[1]);
	session_release(s[2]);
	assert_int_equal(atomic_load(&p->sessions), 0);
	/* a raised limit applies to the next session */
	principal_set_limits(p, 0, 0, 0);
	session *many[5];
	for (int i = 0; i < 5; i++) {
		many[i] = session_new();
		assert_null(session_admit(many[i], p));
	}
	for (int i = 0; i < 5; i++)
		session_release(many[i]);
	principal_release(p);
}

static void anonymous_flows_are_admitted(void **state)
{
	(void)state;
	session *s = session_new();
	assert_null(session_admit(s, NULL));
	assert_null(session_admit(NULL, NULL));
	session_release(s);
}

static void a_bucket_pays_its_debt_at_the_rate(void **state)
{
	(void)state;
	principal *p = principal_new(NULL, 100000, 0, 0); /* 100 kB/s up */
	int64_t burst = 100000 * PRINCIPAL_BURST_MS / 1000;
	if (burst < POOL_BUF_SIZE)
		burst = POOL_BUF_SIZE;
	/* the first charge fills the bucket: the burst goes at once */
	assert_int_equal(principal_charge(&p->up, (uint64_t)burst, 1000), 0);
	/* 10 kB more is a debt of 10 kB: 100 ms at 100 kB/s */
	assert_int_equal(principal_charge(&p->up, 10000, 1000), 100);
	/* 50 ms later 5 kB came back: still 5 kB short after 0 more bytes */
	assert_int_equal(principal_charge(&p->up, 0, 1050), 50);
	/* a second on, the bucket is full again, never above the burst */
	assert_int_equal(principal_charge(&p->up, (uint64_t)burst, 3000), 0);
	assert_true(principal_charge(&p->up, 1, 3000) > 0);
	/* an unlimited direction never waits */
	assert_int_equal(principal_charge(&p->down, 1u << 30, 3000), 0);
	assert_false(principal_limited(&p->down));
	assert_true(principal_limited(&p->up));
	principal_release(p);
}

static void a_datagram_over_the_rate_is_dropped_and_costs_nothing(void **state)
{
	(void)state;
	principal *p = principal_new(NULL, 0, 100000, 0);
	int64_t burst = 100000 * PRINCIPAL_BURST_MS / 1000;
	assert_true(principal_try(&p->down, (uint64_t)burst - 1000, 500));
	assert_false(principal_try(&p->down, 2000, 500)); /* only 1000 left */
	assert_true(principal_try(&p->down, 1000, 500));  /* the refusal took nothing */
	assert_false(principal_try(&p->down, 1, 500));
	assert_true(principal_try(&p->down, 1000, 510)); /* 10 ms: 1000 bytes */
	assert_true(principal_try(&p->up, 1u << 30, 510)); /* unlimited */
	principal_release(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(first_flow_binds_and_later_flows_follow_the_binding),
		cmocka_unit_test(a_revoked_principal_is_refused_under_every_policy),
		cmocka_unit_test(revoking_a_bound_session_closes_it_only_with_close),
		cmocka_unit_test(max_sessions_counts_bound_sessions),
		cmocka_unit_test(anonymous_flows_are_admitted),
		cmocka_unit_test(a_bucket_pays_its_debt_at_the_rate),
		cmocka_unit_test(a_datagram_over_the_rate_is_dropped_and_costs_nothing),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
