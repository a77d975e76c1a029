/* test_fanout.c - the UDP fan-out with stub outbounds: eviction, one open at a time, failed opens, attribution, sub-links per destination. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/log.h"
#include "outbound/fanout.h"
#include "runtime/tracker.h"

/* The stub plane: a datagram to port p goes to target p (identity p),
 * except that every port at or above ONE_DEST_PORT goes to the one target
 * ONE_DEST_TARGET when the test routes that way (a VLESS-like outbound
 * whose link reaches one destination), or MULTI_DEST_TARGET (a
 * Trojan-like one whose datagrams carry their address). */
#define MAX_LOG 512
#define ONE_DEST_PORT 1000
#define ONE_DEST_TARGET 900
#define MULTI_DEST_TARGET 901

typedef struct stub_link {
	dgram_link base;
	uint64_t id;
	uint16_t opened_for; /* the port of the datagram that opened it */
	const dgram_handlers *h;
	void *rud;
} stub_link;

typedef struct stub_env {
	bool async;         /* opens complete only when the test says */
	uint64_t high_ports; /* ONE_DEST_TARGET, MULTI_DEST_TARGET or 0: per port */
	int fail_next;      /* this many opens fail first */
	int opens;          /* opens started */
	fanout_opened_cb pending_cb;
	void *pending_oud;
	uint64_t pending_id;
	uint16_t pending_port;
	const dgram_handlers *pending_h;
	void *pending_rud;
	bool cancelled;
	/* what reached the stub links: "id/opened_for>to:payload" for the
	 * high ports, "id:payload" for the others */
	char sent[MAX_LOG][32];
	size_t n_sent;
	uint64_t closed[MAX_LOG];
	uint16_t closed_port[MAX_LOG]; /* each closed link's opened_for */
	size_t n_closed;
	stub_link *links[MAX_LOG];
	size_t n_links;
	bool released;
	tracker *track; /* when set, every sub-link opens with a record from it */
	principal *who; /* ... belonging to this user (NULL: anonymous) */
} stub_env;

static stub_env *current;

static int stub_send(dgram_link *l, const addr_dest *to, const uint8_t *data, size_t len)
{
	stub_link *s = (stub_link *)l;
	char *out = current->sent[current->n_sent++];
	if (to->port >= ONE_DEST_PORT)
		snprintf(out, 32, "%llu/%u>%u:%.*s", (unsigned long long)s->id, s->opened_for,
		         to->port, (int)len, (const char *)data);
	else
		snprintf(out, 32, "%llu:%.*s", (unsigned long long)s->id, (int)len,
		         (const char *)data);
	return 0;
}

static void stub_close(dgram_link *l)
{
	stub_link *s = (stub_link *)l;
	current->closed_port[current->n_closed] = s->opened_for;
	current->closed[current->n_closed++] = s->id;
	for (size_t i = 0; i < current->n_links; i++)
		if (current->links[i] == s)
			current->links[i] = NULL;
	free(s);
}

static const dgram_link_ops stub_ops = {.send_to = stub_send, .close = stub_close};

static uint64_t route(void *env, const addr_dest *to, const void **target, bool *one_dest)
{
	stub_env *e = env;
	uint64_t id = to->port;
	if (e->high_ports && to->port >= ONE_DEST_PORT)
		id = e->high_ports;
	*one_dest = id == ONE_DEST_TARGET;
	*target = (const void *)(uintptr_t)id;
	return id;
}

static stub_link *make_link(uint64_t id, uint16_t opened_for, const dgram_handlers *h,
                            void *rud)
{
	stub_link *s = calloc(1, sizeof *s);
	*s = (stub_link){.base.ops = &stub_ops, .id = id, .opened_for = opened_for, .h = h,
	                 .rud = rud};
	current->links[current->n_links++] = s;
	return s;
}

static void cancel(connect_pending *p)
{
	(void)p;
	current->cancelled = true;
}
static connect_pending pending_handle = {.cancel = cancel};

static connect_pending *open_(void *env, const void *target, const addr_dest *to,
                              const dgram_handlers *h, void *rud, fanout_opened_cb opened,
                              void *oud)
{
	stub_env *e = env;
	uint64_t id = (uint64_t)(uintptr_t)target;
	if (!e->high_ports || to->port < ONE_DEST_PORT)
		assert_int_equal(to->port, id); /* the datagram that opened it */
	e->opens++;
	if (e->async) {
		e->pending_cb = opened;
		e->pending_oud = oud;
		e->pending_id = id;
		e->pending_port = to->port;
		e->pending_h = h;
		e->pending_rud = rud;
		return &pending_handle;
	}
	if (e->fail_next > 0) {
		e->fail_next--;
		opened(oud, NULL, NULL, "stub refused");
		return NULL;
	}
	track_flow *tf = NULL;
	if (e->track) {
		track_open o = {.udp = true, .assoc = 9, .outbound = "stub", .dest = to, .who = e->who};
		tf = tracker_open(e->track, &o, NULL);
	}
	opened(oud, &make_link(id, to->port, h, rud)->base, tf, NULL);
	return NULL;
}

static void release(void *env) { ((stub_env *)env)->released = true; }

static const fanout_env_ops env_ops = {.route = route, .open = open_, .release = release};

/* The association's side: replies with their source. */
static char replies[16][32];
static size_t n_replies;
static void on_reply(const addr_dest *from, uint8_t *data, size_t len, void *ud)
{
	(void)ud;
	snprintf(replies[n_replies++], 32, "%u:%.*s", from->port, (int)len, (const char *)data);
}
static const dgram_handlers assoc = {.recv = on_reply};

static void send_to_host(dgram_link *l, uint8_t host, uint16_t port, const char *payload)
{
	addr_dest to = {.kind = ADDR_IPV4, .network = ADDR_UDP, .port = port,
	                .u.v4 = {192, 0, 2, host}};
	(void)l->ops->send_to(l, &to, (const uint8_t *)payload, strlen(payload));
}

static void send_to(dgram_link *l, uint16_t port, const char *payload)
{
	send_to_host(l, 1, port, payload);
}

/* The async open in flight succeeds. */
static void finish_open(stub_env *e)
{
	stub_link *s = make_link(e->pending_id, e->pending_port, e->pending_h, e->pending_rud);
	e->pending_cb(e->pending_oud, &s->base, NULL, NULL);
}

/* A reply arrives on links[i], reported by the link as from `port`. */
static void reply_on(stub_env *e, size_t i, uint16_t port, const char *payload)
{
	addr_dest from = {.kind = ADDR_IPV4, .network = ADDR_UDP, .port = port,
	                  .u.v4 = {192, 0, 2, 1}};
	uint8_t buf[16];
	size_t len = strlen(payload);
	memcpy(buf, payload, len);
	e->links[i]->h->recv(&from, buf, len, e->links[i]->rud);
}

static dgram_link *start(stub_env *e)
{
	memset(e, 0, sizeof *e);
	current = e;
	n_replies = 0;
	return fanout_new(&env_ops, e, &assoc, NULL);
}

static void the_65th_target_evicts_the_least_recent(void **state)
{
	(void)state;
	static stub_env e;
	dgram_link *l = start(&e);
	for (uint16_t p = 1; p <= FANOUT_MAX_SUBS; p++)
		send_to(l, p, "x");
	assert_int_equal(fanout_sub_count(l), FANOUT_MAX_SUBS);
	assert_int_equal(e.n_closed, 0);
	send_to(l, 1, "again"); /* 1 becomes the most recent; 2 the least */
	assert_int_equal(e.opens, FANOUT_MAX_SUBS);
	send_to(l, FANOUT_MAX_SUBS + 1, "new");
	assert_int_equal(fanout_sub_count(l), FANOUT_MAX_SUBS);
	assert_int_equal(e.n_closed, 1);
	assert_int_equal(e.closed[0], 2);
	assert_string_equal(e.sent[e.n_sent - 1], "65:new");
	l->ops->close(l);
	assert_int_equal(e.n_closed, FANOUT_MAX_SUBS + 1);
	assert_true(e.released);
}

static void a_second_new_target_waits_for_the_open_in_flight(void **state)
{
	(void)state;
	static stub_env e;
	dgram_link *l = start(&e);
	e.async = true;
	send_to(l, 10, "a1");
	send_to(l, 20, "b1"); /* waits: one open at a time */
	send_to(l, 10, "a2"); /* waits behind b1, in order */
	assert_int_equal(e.opens, 1);
	assert_int_equal(e.n_sent, 0);

	/* the open for 10 completes: a1 goes, then b1 starts the next open
	 * and a2, now with a sub-link, still waits behind it */
	finish_open(&e);
	assert_int_equal(e.n_sent, 1);
	assert_string_equal(e.sent[0], "10:a1");
	assert_int_equal(e.opens, 2);
	assert_int_equal(e.pending_id, 20);

	finish_open(&e);
	assert_int_equal(e.n_sent, 3);
	assert_string_equal(e.sent[1], "20:b1");
	assert_string_equal(e.sent[2], "10:a2");
	assert_int_equal(fanout_sub_count(l), 2);
	l->ops->close(l);
}

static void closing_cancels_the_open_in_flight(void **state)
{
	(void)state;
	static stub_env e;
	dgram_link *l = start(&e);
	e.async = true;
	send_to(l, 10, "a");
	send_to(l, 20, "b");
	l->ops->close(l);
	assert_true(e.cancelled);
	assert_true(e.released);
}

static void a_failed_open_drops_its_packet_and_the_next_retries(void **state)
{
	(void)state;
	static stub_env e;
	dgram_link *l = start(&e);
	e.fail_next = 1;
	send_to(l, 7, "lost");
	assert_int_equal(e.n_sent, 0);
	assert_int_equal(fanout_sub_count(l), 0);
	send_to(l, 7, "kept");
	assert_int_equal(e.opens, 2);
	assert_int_equal(e.n_sent, 1);
	assert_string_equal(e.sent[0], "7:kept");
	l->ops->close(l);
}

static void replies_keep_their_source_and_an_ended_sub_link_goes_alone(void **state)
{
	(void)state;
	static stub_env e;
	dgram_link *l = start(&e);
	send_to(l, 1, "q1");
	send_to(l, 2, "q2");
	/* peers answer through their own sub-links, in any order */
	addr_dest from2 = {.kind = ADDR_IPV4, .port = 2}, from1 = {.kind = ADDR_IPV4, .port = 1};
	uint8_t buf[8];
	memcpy(buf, "r2", 2);
	e.links[1]->h->recv(&from2, buf, 2, e.links[1]->rud);
	memcpy(buf, "r1", 2);
	e.links[0]->h->recv(&from1, buf, 2, e.links[0]->rud);
	assert_int_equal(n_replies, 2);
	assert_string_equal(replies[0], "2:r2");
	assert_string_equal(replies[1], "1:r1");

	/* sub-link 1 ends: only it is dropped; 2 still carries traffic */
	e.links[0]->h->end(e.links[0]->rud, "stub ended");
	assert_int_equal(fanout_sub_count(l), 1);
	send_to(l, 2, "q3");
	assert_string_equal(e.sent[e.n_sent - 1], "2:q3");
	/* and a new datagram to 1 opens it again */
	send_to(l, 1, "q4");
	assert_int_equal(e.opens, 3);
	l->ops->close(l);
}

static void each_destination_of_a_one_destination_target_gets_its_own_sub_link(void **state)
{
	(void)state;
	static stub_env e;
	dgram_link *l = start(&e);
	e.high_ports = ONE_DEST_TARGET;
	send_to(l, 1001, "a1");
	send_to(l, 1002, "b1");
	send_to(l, 1001, "a2");
	send_to(l, 1002, "b2");
	assert_int_equal(e.opens, 2);
	assert_int_equal(fanout_sub_count(l), 2);
	/* every datagram on the sub-link opened for its own destination */
	assert_int_equal(e.n_sent, 4);
	assert_string_equal(e.sent[0], "900/1001>1001:a1");
	assert_string_equal(e.sent[1], "900/1002>1002:b1");
	assert_string_equal(e.sent[2], "900/1001>1001:a2");
	assert_string_equal(e.sent[3], "900/1002>1002:b2");
	/* the address is part of the key, not only the port */
	send_to_host(l, 2, 1001, "c1");
	assert_int_equal(e.opens, 3);
	assert_int_equal(e.links[2]->opened_for, 1001);

	/* replies are the destination's the sub-link was opened for, whatever
	 * source the link reports */
	reply_on(&e, 1, 7, "rb");
	reply_on(&e, 0, 7, "ra");
	assert_int_equal(n_replies, 2);
	assert_string_equal(replies[0], "1002:rb");
	assert_string_equal(replies[1], "1001:ra");

	/* one ending leaves the other destinations' sub-links */
	e.links[0]->h->end(e.links[0]->rud, "stub ended");
	assert_int_equal(fanout_sub_count(l), 2);
	send_to(l, 1002, "b3");
	assert_string_equal(e.sent[e.n_sent - 1], "900/1002>1002:b3");
	assert_int_equal(e.opens, 3);
	send_to(l, 1001, "a3");
	assert_int_equal(e.opens, 4);
	assert_string_equal(e.sent[e.n_sent - 1], "900/1001>1001:a3");
	l->ops->close(l);
}

static void a_second_destination_waits_for_the_open_in_flight_then_opens_its_own(void **state)
{
	(void)state;
	static stub_env e;
	dgram_link *l = start(&e);
	e.high_ports = ONE_DEST_TARGET;
	e.async = true;
	send_to(l, 1001, "a1");
	send_to(l, 1002, "b1");
	assert_int_equal(e.opens, 1);
	finish_open(&e);
	assert_int_equal(e.n_sent, 1);
	assert_string_equal(e.sent[0], "900/1001>1001:a1");
	assert_int_equal(e.opens, 2);
	assert_int_equal(e.pending_port, 1002);
	finish_open(&e);
	assert_int_equal(e.n_sent, 2);
	assert_string_equal(e.sent[1], "900/1002>1002:b1");
	assert_int_equal(fanout_sub_count(l), 2);
	l->ops->close(l);
}

static void the_65th_destination_evicts_the_least_recent_and_says_so(void **state)
{
	(void)state;
	static stub_env e;
	dgram_link *l = start(&e);
	e.high_ports = ONE_DEST_TARGET;
	char *log = NULL;
	size_t log_len = 0;
	FILE *mem = open_memstream(&log, &log_len);
	log_set_stream(mem);
	log_set_level(LOG_LEVEL_DEBUG);
	for (uint16_t p = 0; p < FANOUT_MAX_SUBS; p++)
		send_to(l, (uint16_t)(ONE_DEST_PORT + p), "x");
	assert_int_equal(fanout_sub_count(l), FANOUT_MAX_SUBS);
	assert_int_equal(e.opens, FANOUT_MAX_SUBS);
	assert_int_equal(e.n_closed, 0);
	fflush(mem);
	assert_int_equal(log_len, 0);
	send_to(l, 1000, "again"); /* 1000 becomes the most recent; 1001 the least */
	send_to(l, 1000 + FANOUT_MAX_SUBS, "new");
	assert_int_equal(fanout_sub_count(l), FANOUT_MAX_SUBS);
	assert_int_equal(e.n_closed, 1);
	assert_int_equal(e.closed_port[0], 1001);
	assert_string_equal(e.sent[e.n_sent - 1], "900/1064>1064:new");
	log_set_stream(NULL);
	log_set_level(LOG_LEVEL_INFO);
	fclose(mem);
	static const char line[] =
		" outbound: udp fan-out: closing the least recently used sub-link: 64 are open\n";
	assert_true(log_len > strlen(line));
	assert_string_equal(log + log_len - strlen(line), line);
	assert_null(memchr(log, '\n', log_len - 1)); /* one line */
	free(log);

	send_to(l, 1000, "kept"); /* still open */
	assert_int_equal(e.opens, FANOUT_MAX_SUBS + 1);
	assert_string_equal(e.sent[e.n_sent - 1], "900/1000>1000:kept");
	send_to(l, 1001, "back"); /* evicted: opens again, evicting 1002 */
	assert_int_equal(e.opens, FANOUT_MAX_SUBS + 2);
	assert_int_equal(e.closed_port[1], 1002);
	l->ops->close(l);
	assert_int_equal(e.n_closed, FANOUT_MAX_SUBS + 2);
}

static void a_target_whose_datagrams_carry_their_address_keeps_one_sub_link(void **state)
{
	(void)state;
	static stub_env e;
	dgram_link *l = start(&e);
	e.high_ports = MULTI_DEST_TARGET;
	send_to(l, 1001, "a");
	send_to(l, 1002, "b");
	send_to_host(l, 2, 1001, "c");
	assert_int_equal(e.opens, 1);
	assert_int_equal(fanout_sub_count(l), 1);
	/* one sub-link, each datagram with its own address */
	assert_string_equal(e.sent[0], "901/1001>1001:a");
	assert_string_equal(e.sent[1], "901/1001>1002:b");
	assert_string_equal(e.sent[2], "901/1001>1001:c");
	/* replies keep the source the link reports */
	reply_on(&e, 0, 1002, "rb");
	assert_int_equal(n_replies, 1);
	assert_string_equal(replies[0], "1002:rb");
	l->ops->close(l);
}

/* ---- sub-link records (tracker.h) ---- */

static uint64_t zero_clock(void) { return 0; }

static uint64_t now_ms = 1000;
static uint64_t test_clock(void) { return now_ms; }

static bool on_port(const track_flow *f, void *arg) { return f->dest.port == *(uint16_t *)arg; }

static const track_flow *open_on_port(tracker *t, uint16_t port)
{
	for (const list_node *i = tracker_open_list(t)->head; i; i = i->next)
		if (LIST_ENTRY(i, track_flow, node)->dest.port == port)
			return LIST_ENTRY(i, track_flow, node);
	return NULL;
}

/* Each sub-link's record counts its payload each way; killing one drops
 * that sub-link only, and the association goes on; the rest end with
 * the association. */
static void a_killed_sub_link_leaves_its_association_alone(void **state)
{
	(void)state;
	static stub_env e;
	dgram_link *l = start(&e);
	e.track = tracker_new(0, zero_clock);
	send_to(l, 1, "abc");
	send_to(l, 2, "de");
	send_to(l, 1, "fgh");
	reply_on(&e, 0, 1, "12345");
	assert_int_equal(tracker_open_count(e.track), 2);
	const track_flow *f1 = open_on_port(e.track, 1), *f2 = open_on_port(e.track, 2);
	assert_non_null(f1);
	assert_non_null(f2);
	assert_true(f1->udp);
	assert_int_equal(f1->assoc, 9);
	assert_int_equal(f1->bytes[0], 6);
	assert_int_equal(f1->bytes[1], 5);
	assert_int_equal(f2->bytes[0], 2);

	uint16_t port = 1;
	assert_int_equal(tracker_kill(e.track, on_port, &port, "the flow was killed"), 1);
	assert_int_equal(fanout_sub_count(l), 1);
	assert_int_equal(e.n_closed, 1);
	assert_int_equal(e.closed[0], 1);
	assert_int_equal(tracker_open_count(e.track), 1);
	assert_string_equal(tracker_closed_at(e.track, 0)->why, "the flow was killed");
	assert_int_equal(tracker_closed_at(e.track, 0)->bytes[0], 6);

	/* the association goes on: 2 still carries, 1 opens again */
	send_to(l, 2, "q");
	assert_string_equal(e.sent[e.n_sent - 1], "2:q");
	send_to(l, 1, "again");
	assert_int_equal(e.opens, 3);
	assert_int_equal(tracker_open_count(e.track), 2);
	l->ops->close(l);
	assert_int_equal(tracker_open_count(e.track), 0);
	assert_int_equal(tracker_closed_count(e.track), 3);
	assert_string_equal(tracker_closed_at(e.track, 2)->why, "closed");
	tracker_free(e.track);
}

/* A sub-link of a user with a rate drops what is over it (UDP policing):
 * a dropped datagram costs nothing, and the bucket refills with time. */
static void a_users_datagrams_over_its_rate_are_dropped(void **state)
{
	(void)state;
	static stub_env e;
	dgram_link *l = start(&e);
	now_ms = 1000;
	e.track = tracker_new(0, test_clock);
	e.who = principal_new("alice", 1000, 0, 0); /* 1000 B/s up; burst: one pool buffer */
	static uint8_t big[10000];
	addr_dest to = {.kind = ADDR_IPV4, .network = ADDR_UDP, .port = 5, .u.v4 = {192, 0, 2, 1}};
	assert_int_equal(l->ops->send_to(l, &to, big, sizeof big), 0); /* the burst covers it */
	assert_int_equal(e.n_sent, 1);
	assert_int_equal(l->ops->send_to(l, &to, big, sizeof big), -1); /* 6384 left: dropped */
	assert_int_equal(e.n_sent, 1);
	assert_int_equal(l->ops->send_to(l, &to, big, 6000), 0); /* the drop took nothing */
	assert_int_equal(e.n_sent, 2);
	const track_flow *f = open_on_port(e.track, 5);
	assert_int_equal(f->bytes[0], 16000); /* only what went */
	now_ms += 10000; /* ten seconds: full again */
	assert_int_equal(l->ops->send_to(l, &to, big, sizeof big), 0);
	assert_int_equal(e.n_sent, 3);
	/* its own rate only: the other direction is unlimited */
	reply_on(&e, 0, 5, "answer");
	assert_int_equal(n_replies, 1);
	l->ops->close(l);
	tracker_free(e.track);
	principal_release(e.who);
	e.who = NULL;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(a_killed_sub_link_leaves_its_association_alone),
		cmocka_unit_test(a_users_datagrams_over_its_rate_are_dropped),
		cmocka_unit_test(the_65th_target_evicts_the_least_recent),
		cmocka_unit_test(a_second_new_target_waits_for_the_open_in_flight),
		cmocka_unit_test(closing_cancels_the_open_in_flight),
		cmocka_unit_test(a_failed_open_drops_its_packet_and_the_next_retries),
		cmocka_unit_test(replies_keep_their_source_and_an_ended_sub_link_goes_alone),
		cmocka_unit_test(each_destination_of_a_one_destination_target_gets_its_own_sub_link),
		cmocka_unit_test(a_second_destination_waits_for_the_open_in_flight_then_opens_its_own),
		cmocka_unit_test(the_65th_destination_evicts_the_least_recent_and_says_so),
		cmocka_unit_test(a_target_whose_datagrams_carry_their_address_keeps_one_sub_link),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
