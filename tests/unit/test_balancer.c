/* test_balancer.c - the balancer core: selection per strategy, rise/fall, retry order, re-probe requests, and picks racing health changes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <pthread.h>
#include <sched.h>

#include "outbound/balancer.h"

enum { A, B, C, D };

static balancer *make(balancer_strategy_kind s, size_t n, uint32_t retry)
{
	balancer_config cfg = {.strategy = s, .retry = retry};
	char err[128] = "";
	balancer *b = balancer_new(&cfg, n, err, sizeof(err));
	assert_non_null(b);
	assert_string_equal(err, "");
	return b;
}

static void set_down(balancer *b, size_t m)
{
	assert_int_equal(balancer_report(b, m, false), BALANCER_NOW_DOWN);
}

static void set_up(balancer *b, size_t m)
{
	assert_int_equal(balancer_report(b, m, true), BALANCER_NOW_UP);
}

static size_t sel(balancer *b)
{
	bool wake = true;
	size_t m = balancer_select(b, &wake);
	assert_true(m < balancer_size(b));
	return m;
}

static void failover_takes_the_first_healthy_member_in_order(void **state)
{
	(void)state;
	balancer *b = make(BALANCER_FAILOVER, 3, 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(sel(b), A); /* all healthy at start: the first */
	set_down(b, A);
	assert_int_equal(sel(b), B);
	set_down(b, B);
	assert_int_equal(sel(b), C);
	set_up(b, B);
	assert_int_equal(sel(b), B);
	set_up(b, A); /* a recovered higher member gets new flows again */
	assert_int_equal(sel(b), A);
	assert_false(balancer_take_reprobe_all(b));
	balancer_del(b);
}

static void round_robin_cycles_only_through_healthy_members(void **state)
{
	(void)state;
	balancer *b = make(BALANCER_ROUND_ROBIN, 3, 0);
	set_down(b, B);
	size_t want[] = {A, C, A, C};
	for (size_t i = 0; i < 4; i++)
		assert_int_equal(sel(b), want[i]);
	balancer_del(b);

	/* Property: over k rounds every healthy member is picked k times,
	 * whatever the counter's start. */
	b = make(BALANCER_ROUND_ROBIN, 5, 0);
	set_down(b, 1);
	set_down(b, 3);
	(void)sel(b);
	size_t count[5] = {0};
	for (int i = 0; i < 3 * 100; i++)
		count[sel(b)]++;
	size_t expect[5] = {100, 0, 100, 0, 100};
	for (size_t m = 0; m < 5; m++)
		assert_int_equal(count[m], expect[m]);
	balancer_del(b);
}

static void every_member_down_still_selects_the_first(void **state)
{
	(void)state;
	balancer_strategy_kind strategies[] = {BALANCER_FAILOVER, BALANCER_ROUND_ROBIN};
	for (size_t s = 0; s < 2; s++) {
		balancer *b = make(strategies[s], 3, 0);
		for (size_t m = 0; m < 3; m++)
			set_down(b, m);
		bool wake = false;
		assert_int_equal(balancer_select(b, &wake), A);
		assert_true(wake); /* the request was raised: wake the shell */
		assert_int_equal(balancer_select(b, &wake), A);
		assert_false(wake); /* already pending: no second wake */
		assert_int_equal(balancer_select(b, NULL), A);
		assert_true(balancer_take_reprobe_all(b));
		assert_false(balancer_take_reprobe_all(b));
		assert_int_equal(balancer_select(b, &wake), A);
		assert_true(wake); /* taken, so the next fallback raises it again */
		set_up(b, C);
		assert_int_equal(balancer_select(b, &wake), C);
		assert_false(wake);
		assert_true(balancer_take_reprobe_all(b));
		assert_false(balancer_take_reprobe_all(b));
		balancer_del(b);
	}
}

static void a_balancer_needs_at_least_one_member(void **state)
{
	(void)state;
	balancer_config cfg = {0};
	char err[128];
	assert_null(balancer_new(&cfg, 0, err, sizeof(err)));
	assert_string_equal(err, "a balancer needs at least one outbound");
	assert_null(balancer_new(&cfg, BALANCER_MAX_MEMBERS + 1, err, sizeof(err)));
	assert_string_equal(err, "a balancer has at most 1024 outbounds");
	cfg.retry = BALANCER_MAX_RETRY + 1;
	assert_null(balancer_new(&cfg, 2, err, sizeof(err)));
	assert_string_equal(err, "balancer retry is at most 8");
	/* Truncated to the buffer; no buffer at all is allowed. */
	char small[6];
	assert_null(balancer_new(NULL, 0, small, sizeof(small)));
	assert_string_equal(small, "a bal");
	assert_null(balancer_new(NULL, 0, NULL, 0));

	/* One member and the largest size are fine. */
	cfg.retry = BALANCER_MAX_RETRY;
	balancer *b = balancer_new(&cfg, 1, err, sizeof(err));
	assert_non_null(b);
	assert_int_equal(sel(b), 0);
	balancer_del(b);
	b = balancer_new(&cfg, BALANCER_MAX_MEMBERS, err, sizeof(err));
	assert_non_null(b);
	assert_true(balancer_is_up(b, BALANCER_MAX_MEMBERS - 1));
	balancer_del(b);
	balancer_del(NULL);
}

static void a_zeroed_config_is_the_seeds_balancer(void **state)
{
	(void)state;
	balancer *b = balancer_new(NULL, 2, NULL, 0);
	assert_non_null(b);
	assert_int_equal(balancer_size(b), 2);
	assert_int_equal(balancer_strategy(b), BALANCER_FAILOVER);
	assert_int_equal(balancer_retry(b), 0);
	assert_true(balancer_is_up(b, 0));
	assert_true(balancer_is_up(b, 1));
	assert_false(balancer_is_up(b, 2)); /* out of range */
	/* rise 1, fall 1: every opposite result flips (seed 003: no threshold). */
	assert_int_equal(balancer_report(b, 0, false), BALANCER_NOW_DOWN);
	assert_false(balancer_is_up(b, 0));
	assert_int_equal(balancer_report(b, 0, false), BALANCER_UNCHANGED);
	assert_int_equal(balancer_report(b, 0, true), BALANCER_NOW_UP);
	assert_int_equal(balancer_report(b, 0, true), BALANCER_UNCHANGED);
	assert_int_equal(balancer_report(b, 7, false), BALANCER_UNCHANGED);
	/* No retry: the first failure ends the flow's attempts. */
	balancer_attempt a = {0};
	assert_int_equal(balancer_next(b, &a, NULL), 0);
	assert_int_equal(balancer_next(b, &a, NULL), SIZE_MAX);
	balancer_del(b);
}

/* Issue 32, "members count as down before any probe has run": whatever
 * the strategy, rise, fall, retry and size, a new balancer has every member
 * healthy (seeds 000 "The probe task" and 003: healthy until probed), asks
 * for no re-probe, a first pick under failover is member 0 and under
 * round_robin walks every member, and a first probe that succeeds changes
 * nothing (no "is now up" line for a member that never was down). */
static void every_member_starts_healthy_whatever_the_config(void **state)
{
	(void)state;
	static const struct {
		balancer_strategy_kind strategy;
		uint32_t rise, fall, retry;
		size_t n;
	} cases[] = {
		{BALANCER_FAILOVER, 0, 0, 0, 1},      {BALANCER_FAILOVER, 1, 1, 0, 2},
		{BALANCER_FAILOVER, 3, 2, 2, 3},      {BALANCER_FAILOVER, 100, 100, 8, 63},
		{BALANCER_ROUND_ROBIN, 2, 3, 1, 64},  {BALANCER_ROUND_ROBIN, 5, 1, 0, 65},
		{BALANCER_ROUND_ROBIN, 1, 5, 8, 129}, {BALANCER_FAILOVER, 2, 2, 0, BALANCER_MAX_MEMBERS},
	};
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		balancer_config cfg = {.strategy = cases[k].strategy, .rise = cases[k].rise,
		                       .fall = cases[k].fall, .retry = cases[k].retry};
		size_t n = cases[k].n;
		balancer *b = balancer_new(&cfg, n, NULL, 0);
		assert_non_null(b);
		for (size_t m = 0; m < n; m++)
			assert_true(balancer_is_up(b, m));
		assert_false(balancer_is_up(b, n));
		assert_false(balancer_take_reprobe_all(b));
		for (size_t m = 0; m < n; m++)
			assert_false(balancer_take_reprobe(b, m));
		if (cfg.strategy == BALANCER_FAILOVER) {
			bool wake = true;
			assert_int_equal(balancer_select(b, &wake), 0);
			assert_false(wake); /* a healthy pick asks for no probe */
		} else {
			for (size_t m = 0; m < n; m++)
				assert_int_equal(sel(b), m);
		}
		assert_false(balancer_take_reprobe_all(b));
		/* the first probes: success keeps every member as it was */
		for (size_t m = 0; m < n; m++)
			assert_int_equal(balancer_report(b, m, true), BALANCER_UNCHANGED);
		for (size_t m = 0; m < n; m++)
			assert_true(balancer_is_up(b, m));
		/* and with fall > 1, failures short of fall leave it healthy */
		uint32_t fall = cfg.fall ? cfg.fall : 1;
		for (uint32_t f = 1; f < fall; f++)
			assert_int_equal(balancer_report(b, n - 1, false), BALANCER_UNCHANGED);
		assert_true(balancer_is_up(b, n - 1));
		assert_int_equal(balancer_report(b, n - 1, false), BALANCER_NOW_DOWN);
		balancer_del(b);
	}
}

/* rise/fall, table-driven: results is a run of probe results ('u' up, 'd'
 * down) from a fresh (healthy) member; expect has one character per result:
 * '.' unchanged, 'U' now up, 'D' now down. */
static const struct {
	uint32_t rise, fall;
	const char *results;
	const char *expect;
} rise_fall_cases[] = {
	{1, 1, "dduudu", "D.U.DU"},
	{2, 3, "ddd", "..D"},        /* down exactly at the third */
	{2, 3, "dddud", "..D.."},    /* one up is not enough to rise */
	{2, 3, "ddduu", "..D.U"},    /* up exactly at the second */
	{2, 3, "ddudddd", ".....D."}, /* a mixed run resets the count */
	{2, 3, "dddudu", "..D..."},  /* an agreeing result breaks the rise */
	{2, 3, "dddudduu", "..D....U"},
	{2, 3, "uuuuddd", "......D"}, /* agreeing results never change anything */
	{1, 2, "ddudd", ".DU.D"}, /* rise 1 */
	{0, 0, "dud", "DUD"},   /* 0 means 1 */
};

static void rise_and_fall_count_consecutive_results(void **state)
{
	(void)state;
	for (size_t c = 0; c < sizeof(rise_fall_cases) / sizeof(rise_fall_cases[0]); c++) {
		balancer_config cfg = {.rise = rise_fall_cases[c].rise,
		                       .fall = rise_fall_cases[c].fall};
		balancer *b = balancer_new(&cfg, 2, NULL, 0);
		assert_non_null(b);
		const char *r = rise_fall_cases[c].results;
		const char *e = rise_fall_cases[c].expect;
		assert_int_equal(strlen(r), strlen(e));
		bool up = true;
		for (size_t i = 0; r[i]; i++) {
			balancer_probe_result got = balancer_report(b, A, r[i] == 'u');
			char g = got == BALANCER_NOW_UP     ? 'U'
			         : got == BALANCER_NOW_DOWN ? 'D'
			                                    : '.';
			if (g != e[i])
				fail_msg("case %zu (rise %u fall %u %s): result %zu is %c, not %c",
				         c, cfg.rise, cfg.fall, r, i, g, e[i]);
			if (g != '.')
				up = g == 'U';
			assert_int_equal(balancer_is_up(b, A), up);
			/* Selection follows the state, not the run. */
			assert_int_equal(sel(b), up ? A : B);
		}
		balancer_del(b);
	}
}

/* Runs balancer_next until it gives SIZE_MAX; returns how many it gave. */
static size_t attempts(balancer *b, size_t *out, size_t max)
{
	balancer_attempt a = {0};
	size_t n = 0;
	for (;;) {
		size_t m = balancer_next(b, &a, NULL);
		if (m == SIZE_MAX)
			break;
		assert_true(m < balancer_size(b));
		assert_true(n < max);
		out[n++] = m;
	}
	assert_int_equal(balancer_next(b, &a, NULL), SIZE_MAX); /* stays done */
	return n;
}

static void retry_order_under_failover(void **state)
{
	(void)state;
	size_t got[16];
	balancer *b = make(BALANCER_FAILOVER, 4, 2);
	/* The first healthy untried member each time, retry (2) more at most. */
	assert_int_equal(attempts(b, got, 16), 3);
	assert_int_equal(got[0], A);
	assert_int_equal(got[1], B);
	assert_int_equal(got[2], C);
	set_down(b, B);
	assert_int_equal(attempts(b, got, 16), 3);
	assert_int_equal(got[0], A);
	assert_int_equal(got[1], C);
	assert_int_equal(got[2], D);
	/* Healthy members exist but all were tried: down ones are not. */
	set_down(b, D);
	assert_int_equal(attempts(b, got, 16), 2);
	assert_int_equal(got[0], A);
	assert_int_equal(got[1], C);
	assert_false(balancer_take_reprobe_all(b));
	/* Every member down: the first untried member in order, and the
	 * every-member re-probe is asked for. */
	set_down(b, A);
	set_down(b, C);
	assert_int_equal(attempts(b, got, 16), 3);
	assert_int_equal(got[0], A);
	assert_int_equal(got[1], B);
	assert_int_equal(got[2], C);
	assert_true(balancer_take_reprobe_all(b));
	balancer_del(b);

	/* Health read at each retry: a member that came up meanwhile is next. */
	b = make(BALANCER_FAILOVER, 4, 3);
	balancer_attempt a = {0};
	assert_int_equal(balancer_next(b, &a, NULL), A);
	set_down(b, A);
	set_down(b, B);
	assert_int_equal(balancer_next(b, &a, NULL), C);
	set_up(b, B);
	assert_int_equal(balancer_next(b, &a, NULL), B);
	assert_int_equal(balancer_next(b, &a, NULL), D);
	assert_int_equal(balancer_next(b, &a, NULL), SIZE_MAX); /* every member tried */
	set_up(b, A);
	assert_int_equal(balancer_next(b, &a, NULL), SIZE_MAX);
	balancer_del(b);

	/* The largest retry over more members: 1 + BALANCER_MAX_RETRY tries. */
	b = make(BALANCER_FAILOVER, 12, BALANCER_MAX_RETRY);
	assert_int_equal(attempts(b, got, 16), BALANCER_MAX_TRIES);
	for (size_t i = 0; i < BALANCER_MAX_TRIES; i++)
		assert_int_equal(got[i], i);
	balancer_del(b);
}

static void retry_order_under_round_robin(void **state)
{
	(void)state;
	size_t got[16];
	balancer *b = make(BALANCER_ROUND_ROBIN, 4, 2);
	/* First picks step the rotation, retries the retry rotation, each
	 * over the healthy untried members: rotation 0 over {a,b,c,d} = a;
	 * retry 0 over {b,c,d} = b; retry 1 over {c,d} = d. */
	assert_int_equal(attempts(b, got, 16), 3);
	assert_int_equal(got[0], A);
	assert_int_equal(got[1], B);
	assert_int_equal(got[2], D);
	/* The first-pick rotation took one step for the whole flow. */
	assert_int_equal(sel(b), B);
	assert_int_equal(attempts(b, got, 16), 3);
	assert_int_equal(got[0], C);
	assert_int_equal(got[1], D); /* retry 2 over {a,b,d} */
	assert_int_equal(got[2], B); /* retry 3 over {a,b} */
	balancer_del(b);

	/* Property: member 0 accepts no dial but probes healthy (seed 003
	 * "Healthy means reachable, not working"), member 2 is down. First
	 * picks stay an even rotation over the four healthy members, the
	 * retries from member 0 spread evenly over the other three, a flow
	 * never gets a member twice and never the down one. */
	b = make(BALANCER_ROUND_ROBIN, 5, 1);
	set_down(b, 2);
	size_t first[5] = {0}, retried[5] = {0};
	for (int f = 0; f < 1200; f++) {
		balancer_attempt a = {0};
		size_t m = balancer_next(b, &a, NULL);
		first[m]++;
		if (m != 0)
			continue;
		size_t r = balancer_next(b, &a, NULL);
		assert_true(r != 0 && r != 2 && r < 5);
		retried[r]++;
		assert_int_equal(balancer_next(b, &a, NULL), SIZE_MAX);
	}
	size_t want_first[5] = {300, 300, 0, 300, 300};
	size_t want_retried[5] = {0, 100, 0, 100, 100};
	for (size_t m = 0; m < 5; m++) {
		assert_int_equal(first[m], want_first[m]);
		assert_int_equal(retried[m], want_retried[m]);
	}
	balancer_del(b);

	/* Every member down: configured order, as under failover. */
	b = make(BALANCER_ROUND_ROBIN, 3, 5);
	for (size_t m = 0; m < 3; m++)
		set_down(b, m);
	assert_int_equal(attempts(b, got, 16), 3);
	assert_int_equal(got[0], A);
	assert_int_equal(got[1], B);
	assert_int_equal(got[2], C);
	balancer_del(b);
}

static void retry_skips_members_on_the_same_upstream(void **state)
{
	(void)state;
	/* outbounds = ["primary", "primary", "secondary"] (seed 003 weights). */
	const uint32_t same[] = {7, 7, 9};
	balancer_strategy_kind strategies[] = {BALANCER_FAILOVER, BALANCER_ROUND_ROBIN};
	for (size_t s = 0; s < 2; s++) {
		balancer_config cfg = {.strategy = strategies[s], .retry = 2, .upstream = same};
		balancer *b = balancer_new(&cfg, 3, NULL, 0);
		assert_non_null(b);
		for (int f = 0; f < 6; f++) {
			size_t got[16];
			assert_int_equal(attempts(b, got, 16), 2);
			if (got[0] == 2)
				assert_true(got[1] == 0 || got[1] == 1);
			else
				assert_int_equal(got[1], 2); /* never primary twice */
		}
		/* Every member down: the fallback order skips mates too. */
		for (size_t m = 0; m < 3; m++)
			set_down(b, m);
		size_t got[16];
		assert_int_equal(attempts(b, got, 16), 2);
		assert_int_equal(got[0], 0);
		assert_int_equal(got[1], 2);
		balancer_del(b);
	}
}

static void a_failed_dial_asks_for_a_reprobe_once(void **state)
{
	(void)state;
	balancer *b = make(BALANCER_FAILOVER, 70, 0);
	assert_false(balancer_take_reprobe(b, 1)); /* nothing pending */
	assert_true(balancer_dial_failed(b, 1));   /* raised: wake the shell */
	assert_false(balancer_dial_failed(b, 1));  /* pending: no second wake */
	assert_true(balancer_dial_failed(b, 69));  /* another word, its own flag */
	assert_true(balancer_dial_failed(b, 0));
	assert_true(balancer_is_up(b, 1)); /* health is left to the probe */
	assert_int_equal(sel(b), 0);
	assert_true(balancer_take_reprobe(b, 1));
	assert_false(balancer_take_reprobe(b, 1));
	assert_false(balancer_take_reprobe(b, 2));
	assert_true(balancer_take_reprobe(b, 69));
	assert_true(balancer_take_reprobe(b, 0));
	assert_true(balancer_dial_failed(b, 1)); /* taken, so it can be raised again */
	assert_true(balancer_take_reprobe(b, 1));
	assert_false(balancer_dial_failed(b, 70)); /* out of range */
	assert_false(balancer_take_reprobe(b, 70));
	assert_false(balancer_take_reprobe_all(b)); /* a dial failure is not "every member down" */
	balancer_del(b);

	/* A retry that falls back because every member is down says wake once. */
	b = make(BALANCER_FAILOVER, 3, 2);
	for (size_t m = 0; m < 3; m++)
		set_down(b, m);
	balancer_attempt a = {0};
	bool wake = false;
	assert_int_equal(balancer_next(b, &a, &wake), A);
	assert_true(wake);
	assert_int_equal(balancer_next(b, &a, &wake), B);
	assert_false(wake);
	assert_true(balancer_take_reprobe_all(b));
	assert_int_equal(balancer_next(b, &a, &wake), C);
	assert_true(wake);
	assert_int_equal(balancer_next(b, &a, &wake), SIZE_MAX);
	assert_false(wake);
	balancer_del(b);
}

static void members_beyond_one_health_word(void **state)
{
	(void)state;
	balancer *b = make(BALANCER_FAILOVER, 130, 2);
	for (size_t m = 0; m < 130; m++)
		if (m != 70 && m != 129 && m != 64)
			set_down(b, m);
	assert_int_equal(sel(b), 64);
	size_t got[16];
	assert_int_equal(attempts(b, got, 16), 3);
	assert_int_equal(got[0], 64);
	assert_int_equal(got[1], 70);
	assert_int_equal(got[2], 129);
	set_down(b, 64);
	balancer_del(b);

	b = make(BALANCER_ROUND_ROBIN, 130, 0);
	for (size_t m = 0; m < 130; m++)
		if (m != 3 && m != 70 && m != 129)
			set_down(b, m);
	size_t want[] = {3, 70, 129, 3, 70, 129};
	for (size_t i = 0; i < 6; i++)
		assert_int_equal(sel(b), want[i]);
	set_down(b, 3);
	set_down(b, 70);
	set_down(b, 129);
	assert_int_equal(sel(b), 0);
	assert_true(balancer_take_reprobe_all(b));
	balancer_del(b);
}

/* Picks racing health changes. Five members: 1 is down for the whole run,
 * 4 is up for the whole run, and a flipper thread (the control thread's
 * role) toggles 0, 2 and 3 while four workers pick. Around each change of
 * member m the flipper bumps seq[m] (odd while the change is under way) and
 * records the new state in state[m]. A worker reads every seq before and
 * after its pick: a member whose seq is even and unchanged across the pick
 * was in state[m] for the whole pick, and the release/acquire pairing of
 * the health bitmap means the pick saw exactly that state (one health word
 * is one snapshot). So, for every pick p:
 * - p is in range and never member 1;
 * - if p was stable, it was up;
 * - under failover, no member q < p was stable and up;
 * - no pick falls back to "every member down" (member 4 is always up). */
#define RACE_MEMBERS 5
#define RACE_WORKERS 4
#define RACE_PICKS 250000 /* per worker */
#define RACE_YIELD_EVERY 32

typedef struct race {
	balancer *b;
	bool failover;
	atomic_uint seq[RACE_MEMBERS];
	atomic_bool state[RACE_MEMBERS];
	atomic_int started;
	atomic_int finished;
	/* Results, per worker. */
	size_t picks[RACE_WORKERS];
	size_t checked[RACE_WORKERS]; /* picks whose member was stable */
	size_t violations[RACE_WORKERS];
	size_t count[RACE_WORKERS][RACE_MEMBERS];
	int next_worker;
} race;

typedef struct worker_arg {
	race *r;
	int id;
} worker_arg;

static void *race_worker(void *p)
{
	worker_arg *w = p;
	race *r = w->r;
	atomic_fetch_add(&r->started, 1);
	for (size_t i = 0; i < RACE_PICKS; i++) {
		unsigned s0[RACE_MEMBERS], s1[RACE_MEMBERS];
		bool st[RACE_MEMBERS];
		for (size_t m = 0; m < RACE_MEMBERS; m++)
			s0[m] = atomic_load(&r->seq[m]);
		for (size_t m = 0; m < RACE_MEMBERS; m++)
			st[m] = atomic_load(&r->state[m]);
		bool wake = false;
		size_t p = balancer_select(r->b, &wake);
		for (size_t m = 0; m < RACE_MEMBERS; m++)
			s1[m] = atomic_load(&r->seq[m]);

		r->picks[w->id]++;
		if (i % RACE_YIELD_EVERY == 0)
			sched_yield(); /* let the flipper in on a machine with few cores */
		if (p >= RACE_MEMBERS || p == 1 || wake) {
			r->violations[w->id]++;
			continue;
		}
		r->count[w->id][p]++;
		bool stable[RACE_MEMBERS];
		for (size_t m = 0; m < RACE_MEMBERS; m++)
			stable[m] = s0[m] == s1[m] && s0[m] % 2 == 0;
		if (stable[p]) {
			r->checked[w->id]++;
			if (!st[p])
				r->violations[w->id]++;
		}
		if (r->failover)
			for (size_t q = 0; q < p; q++)
				if (stable[q] && st[q])
					r->violations[w->id]++;
	}
	atomic_fetch_add(&r->finished, 1);
	return NULL;
}

/* Flips a random member among 0, 2 and 3 until every worker has made its
 * picks. It competes for the CPU with the workers, so on a machine with
 * fewer cores than threads the picks of each time slice see one health set
 * and successive slices see different ones; on more cores flips and picks
 * interleave finely. */
static void race_flipper(race *r)
{
	static const size_t flippable[] = {0, 2, 3};
	uint64_t x = 0x9e3779b97f4a7c15u; /* xorshift64: reproducible */
	while (atomic_load(&r->started) < RACE_WORKERS)
		;
	for (unsigned long i = 0; atomic_load(&r->finished) < RACE_WORKERS; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		size_t m = flippable[x % 3];
		bool up = !atomic_load(&r->state[m]);
		atomic_fetch_add(&r->seq[m], 1);
		balancer_probe_result got = balancer_report(r->b, m, up);
		atomic_store(&r->state[m], up);
		atomic_fetch_add(&r->seq[m], 1);
		if (got != (up ? BALANCER_NOW_UP : BALANCER_NOW_DOWN))
			fail_msg("flip %lu of member %zu gave %d", i, m, (int)got);
		sched_yield();
	}
}

static void run_race(balancer_strategy_kind s)
{
	static race r; /* large: keep it off the stack */
	memset(&r, 0, sizeof(r));
	r.b = make(s, RACE_MEMBERS, 0);
	r.failover = s == BALANCER_FAILOVER;
	for (size_t m = 0; m < RACE_MEMBERS; m++) {
		atomic_init(&r.seq[m], 0);
		atomic_init(&r.state[m], true);
	}
	atomic_init(&r.started, 0);
	atomic_init(&r.finished, 0);
	set_down(r.b, 1);
	atomic_store(&r.state[1], false);

	pthread_t t[RACE_WORKERS];
	worker_arg args[RACE_WORKERS];
	for (int i = 0; i < RACE_WORKERS; i++) {
		args[i] = (worker_arg){&r, i};
		assert_int_equal(pthread_create(&t[i], NULL, race_worker, &args[i]), 0);
	}
	race_flipper(&r);
	for (int i = 0; i < RACE_WORKERS; i++)
		assert_int_equal(pthread_join(t[i], NULL), 0);

	size_t picks = 0, checked = 0, count[RACE_MEMBERS] = {0};
	for (int i = 0; i < RACE_WORKERS; i++) {
		assert_int_equal(r.violations[i], 0);
		assert_int_equal(r.picks[i], RACE_PICKS);
		picks += r.picks[i];
		checked += r.checked[i];
		for (size_t m = 0; m < RACE_MEMBERS; m++)
			count[m] += r.count[i][m];
	}
	assert_false(balancer_take_reprobe_all(r.b));
	assert_int_equal(count[1], 0);
	/* The property was really exercised: most picks saw a stable member. */
	assert_true(checked > 0);
	assert_true(checked * 2 > picks);
	/* And the picks moved with health, under both strategies. */
	assert_true(count[0] > 0 && count[2] > 0 && count[3] > 0 && count[4] > 0);
	balancer_del(r.b);
}

static void picks_race_health_changes(void **state)
{
	(void)state;
	run_race(BALANCER_FAILOVER);
	run_race(BALANCER_ROUND_ROBIN);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(failover_takes_the_first_healthy_member_in_order),
		cmocka_unit_test(round_robin_cycles_only_through_healthy_members),
		cmocka_unit_test(every_member_down_still_selects_the_first),
		cmocka_unit_test(a_balancer_needs_at_least_one_member),
		cmocka_unit_test(a_zeroed_config_is_the_seeds_balancer),
		cmocka_unit_test(every_member_starts_healthy_whatever_the_config),
		cmocka_unit_test(rise_and_fall_count_consecutive_results),
		cmocka_unit_test(retry_order_under_failover),
		cmocka_unit_test(retry_order_under_round_robin),
		cmocka_unit_test(retry_skips_members_on_the_same_upstream),
		cmocka_unit_test(a_failed_dial_asks_for_a_reprobe_once),
		cmocka_unit_test(members_beyond_one_health_word),
		cmocka_unit_test(picks_race_health_changes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
