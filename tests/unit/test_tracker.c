/* test_tracker.c - one worker's flow table: registration after the open only, ids, bytes, the ring of ended flows, usage by name, and kills that end other flows on the way. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/tracker.h"

static uint64_t now;
static uint64_t clock_ms(void) { return now; }

static addr_dest dest_v4(uint8_t last, uint16_t port)
{
	return (addr_dest){.kind = ADDR_IPV4, .network = ADDR_TCP, .port = port,
	                   .u.v4 = {192, 0, 2, last}};
}

static track_flow *open_flow(tracker *t, const char *in, const char *user, const char *out,
                             int32_t rule, uint64_t epoch)
{
	addr_dest d = dest_v4(1, 80);
	track_open o = {.inbound = in, .user = user, .outbound = out, .dest = &d, .rule = rule,
	                .version = 3, .epoch = epoch};
	return tracker_open(t, &o, NULL);
}

static void registered_only_once_opened(void **state)
{
	(void)state;
	now = 1000;
	tracker *t = tracker_new(2, clock_ms);
	assert_non_null(t);
	addr_dest d = dest_v4(7, 443);
	track_open o = {.inbound = "in", .outbound = "out", .dest = &d, .rule = -1, .epoch = 4};
	track_flow *f = tracker_prepare(t, &o, NULL);
	assert_non_null(f);
	assert_int_equal(tracker_open_count(t), 0); /* the dial is still running */
	track_discard(f, "connection refused");
	assert_int_equal(tracker_open_count(t), 0);
	assert_int_equal(tracker_closed_count(t), 0); /* a failed dial is never registered */

	f = tracker_prepare(t, &o, NULL);
	now = 1500;
	track_register(f, "member-a");
	assert_int_equal(tracker_open_count(t), 1);
	assert_int_equal(f->start_ms, 1500);
	assert_string_equal(f->member, "member-a");
	assert_string_equal(f->outbound, "out");
	/* ids carry the worker's index and are never 0 */
	assert_int_equal(tracker_id_worker(f->id), 2);
	assert_true((f->id & ((1ull << TRACK_ID_SHIFT) - 1)) != 0);
	f->bytes[0] = 10;
	f->bytes[1] = 20;
	now = 2500;
	track_end(f, NULL);
	assert_int_equal(tracker_open_count(t), 0);
	assert_int_equal(tracker_closed_count(t), 1);
	const track_flow *c = tracker_closed_at(t, 0);
	assert_string_equal(c->why, "closed");
	assert_int_equal(c->end_ms, 2500);
	uint64_t up, down;
	tracker_ended_bytes(t, &up, &down);
	assert_int_equal(up, 10);
	assert_int_equal(down, 20);
	tracker_free(t);
}

static void the_ring_keeps_the_last(void **state)
{
	(void)state;
	tracker *t = tracker_new(0, clock_ms);
	uint64_t last = 0;
	for (int i = 0; i < TRACK_CLOSED_MAX + 10; i++) {
		track_flow *f = open_flow(t, "in", NULL, "out", 0, 1);
		last = f->id;
		track_end(f, "idle");
	}
	assert_int_equal(tracker_closed_count(t), TRACK_CLOSED_MAX);
	assert_int_equal(tracker_closed_at(t, TRACK_CLOSED_MAX - 1)->id, last);
	assert_int_equal(tracker_closed_at(t, 0)->id, last - TRACK_CLOSED_MAX + 1);
	assert_null(tracker_closed_at(t, TRACK_CLOSED_MAX));
	tracker_free(t);
}

typedef struct seen {
	char names[8][32];
	uint64_t up[8], down[8], total[8];
	int n;
} seen;

static void collect(const char *name, uint64_t up, uint64_t down, uint64_t total, void *arg)
{
	seen *s = arg;
	snprintf(s->names[s->n], 32, "%s", name);
	s->up[s->n] = up;
	s->down[s->n] = down;
	s->total[s->n] = total;
	s->n++;
}

static int find(const seen *s, const char *name)
{
	for (int i = 0; i < s->n; i++)
		if (strcmp(s->names[i], name) == 0)
			return i;
	return -1;
}

static void usage_by_name(void **state)
{
	(void)state;
	tracker *t = tracker_new(0, clock_ms);
	track_flow *a = open_flow(t, "in1", "alice", "pool", 0, 1);
	track_flow *b = open_flow(t, "in1", NULL, "direct", 1, 1);
	addr_dest d = dest_v4(2, 53);
	track_open o = {.inbound = "in2", .user = "alice", .outbound = "pool", .dest = &d};
	track_flow *c = tracker_prepare(t, &o, NULL);
	track_register(c, "m1"); /* a balancer's member, known once it opened */
	a->bytes[0] = 1, a->bytes[1] = 2;
	b->bytes[0] = 30, b->bytes[1] = 40;
	track_end(a, NULL);
	track_end(b, NULL);
	seen s = {0};
	tracker_usage(t, TRACK_BY_USER, collect, &s);
	int i = find(&s, "alice"), j = find(&s, "");
	assert_true(i >= 0 && j >= 0);
	assert_int_equal(s.total[i], 2);
	assert_int_equal(s.up[i], 1); /* c is open: its bytes are read from it */
	assert_int_equal(s.down[j], 40);
	memset(&s, 0, sizeof s);
	tracker_usage(t, TRACK_BY_INBOUND, collect, &s);
	assert_int_equal(s.n, 2);
	assert_int_equal(s.total[find(&s, "in1")], 2);
	/* by outbound a flow counts under the member that carried it */
	assert_string_equal(track_usage_name(c, TRACK_BY_OUTBOUND), "m1");
	assert_string_equal(track_usage_name(c, TRACK_BY_USER), "alice");
	track_end(c, NULL);
	tracker_free(t);
}

/* A kill hook that ends its own flow and, for the first one, another. */
typedef struct victim {
	track_flow *f;
	track_flow *also; /* ended by this one's kill, NULL: none */
	char why[64];
	int asked;
} victim;

static void kill_victim(void *ud, const char *why)
{
	victim *v = ud;
	v->asked++;
	snprintf(v->why, sizeof v->why, "%s", why);
	if (v->also) {
		track_end(v->also, "ended by a neighbour");
		v->also = NULL;
	}
	track_end(v->f, why);
}

static bool by_rule(const track_flow *f, void *arg) { return f->rule == *(int32_t *)arg; }

static void kills_survive_cascades(void **state)
{
	(void)state;
	tracker *t = tracker_new(0, clock_ms);
	victim v[4] = {0};
	int32_t rules[4] = {5, 5, 5, 6};
	for (int i = 0; i < 4; i++) {
		v[i].f = open_flow(t, "in", NULL, "out", rules[i], 1);
		track_set_kill(v[i].f, kill_victim, &v[i]);
	}
	v[0].also = v[1].f; /* the first kill ends the second flow itself */
	track_flow *no_hook = open_flow(t, "in", NULL, "out", 5, 1);
	int32_t rule = 5;
	size_t n = tracker_kill(t, by_rule, &rule, "the flow was killed");
	assert_int_equal(n, 2); /* v[0] and v[2]; v[1] ended on the way; no hook: not asked */
	assert_int_equal(v[0].asked, 1);
	assert_int_equal(v[1].asked, 0);
	assert_int_equal(v[2].asked, 1);
	assert_int_equal(v[3].asked, 0);
	assert_string_equal(v[2].why, "the flow was killed");
	assert_int_equal(tracker_open_count(t), 2); /* v[3] and the one without a hook */
	track_end(v[3].f, NULL);
	track_end(no_hook, NULL);
	tracker_free(t);
}

/* A kill whose owner closes later: the flow stays listed until then. */
static void ask_only(void *ud, const char *why)
{
	(void)why;
	((victim *)ud)->asked++;
}

static bool any(const track_flow *f, void *arg) { return (void)f, (void)arg, true; }

static void a_late_close_stays_listed(void **state)
{
	(void)state;
	tracker *t = tracker_new(0, clock_ms);
	victim v = {0};
	v.f = open_flow(t, "in", NULL, "out", 0, 1);
	track_set_kill(v.f, ask_only, &v);
	assert_int_equal(tracker_kill(t, any, NULL, "the flow was killed"), 1);
	assert_int_equal(v.asked, 1);
	assert_int_equal(tracker_open_count(t), 1);
	assert_ptr_equal(tracker_open_list(t)->head, &v.f->node);
	track_end(v.f, "the flow was killed");
	assert_int_equal(tracker_open_count(t), 0);
	tracker_free(t);
}

static void more_bytes(void *ud, uint64_t *up, uint64_t *down)
{
	(void)ud;
	*up = 1000;
	*down = 2000;
}

static void bytes_counted_elsewhere(void **state)
{
	(void)state;
	tracker *t = tracker_new(0, clock_ms);
	track_flow *f = open_flow(t, "in", NULL, "out", 0, 1);
	f->bytes[0] = 1;
	f->bytes[1] = 2;
	track_set_more(f, more_bytes, NULL);
	uint64_t up, down;
	track_bytes(f, &up, &down);
	assert_int_equal(up, 1001);
	assert_int_equal(down, 2002);
	track_end(f, NULL); /* the splicer's bytes are folded in once */
	const track_flow *c = tracker_closed_at(t, 0);
	track_bytes(c, &up, &down);
	assert_int_equal(up, 1001);
	assert_int_equal(down, 2002);
	tracker_free(t);
}

typedef struct name_count {
	int names;
	uint64_t other_total;
} name_count;

static void count_names(const char *name, uint64_t up, uint64_t down, uint64_t total, void *arg)
{
	(void)up, (void)down;
	name_count *c = arg;
	c->names++;
	if (strcmp(name, TRACK_OTHER_NAME) == 0)
		c->other_total = total;
}

static void names_are_cut_and_bounded(void **state)
{
	(void)state;
	tracker *t = tracker_new(0, clock_ms);
	char longname[400];
	memset(longname, 'x', sizeof longname - 1);
	longname[sizeof longname - 1] = '\0';
	track_flow *f = open_flow(t, longname, NULL, "out", 0, 1);
	assert_int_equal(strlen(f->inbound), TRACK_NAME_MAX - 1);
	track_end(f, longname);
	assert_int_equal(strlen(tracker_closed_at(t, 0)->why), TRACK_NAME_MAX - 1);
	/* past TRACK_NAMES_MAX users, the rest count under TRACK_OTHER_NAME */
	for (int i = 0; i < TRACK_NAMES_MAX + 5; i++) {
		char u[32];
		snprintf(u, sizeof u, "user%d", i);
		track_end(open_flow(t, "in", u, "out", 0, 1), NULL);
	}
	name_count c = {0};
	tracker_usage(t, TRACK_BY_USER, count_names, &c);
	assert_int_equal(c.names, TRACK_NAMES_MAX + 1); /* and the (other) row */
	assert_int_equal(c.other_total, 6); /* "" and user0..user4094 fill the table */
	tracker_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(registered_only_once_opened),
		cmocka_unit_test(the_ring_keeps_the_last),
		cmocka_unit_test(usage_by_name),
		cmocka_unit_test(kills_survive_cascades),
		cmocka_unit_test(a_late_close_stays_listed),
		cmocka_unit_test(bytes_counted_elsewhere),
		cmocka_unit_test(names_are_cut_and_bounded),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
