/* test_udplb.c - the UDP load balancer core (src/udplb/manager.c): admission and its drop reasons, the opening burst, caps, per-source limits, reconfig, the idle timer, closes, PROXY v2 modes. The texts are in test_udplb_msg.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "udplb/manager.h"

#define OUT_MAX 4096

typedef struct harness {
	udplb_manager *m;
	udplb_backends *b;
	udplb_output out[OUT_MAX];
	size_t n;
	uint64_t now;
} harness;

static const udplb_addr *LOCAL(void)
{
	static udplb_addr a;
	udplb_addr_set4(&a, (const uint8_t[]){198, 51, 100, 7}, 53);
	return &a;
}

static udplb_addr V4(uint8_t a, uint8_t b, uint8_t c, uint8_t d, uint16_t port)
{
	udplb_addr r;
	udplb_addr_set4(&r, (const uint8_t[]){a, b, c, d}, port);
	return r;
}

static udplb_addr V6(uint16_t first, uint16_t last, uint16_t port)
{
	uint8_t ip[16] = {(uint8_t)(first >> 8), (uint8_t)first};
	ip[14] = (uint8_t)(last >> 8);
	ip[15] = (uint8_t)last;
	udplb_addr r;
	udplb_addr_set6(&r, ip, port);
	return r;
}

static void drain(harness *h)
{
	udplb_output o;
	h->n = 0;
	while (udplb_manager_poll(h->m, &o)) {
		assert_true(h->n < OUT_MAX);
		h->out[h->n++] = o;
	}
	assert_null(udplb_manager_check(h->m, UDPLB_CHECK_FULL));
}

static size_t count(const harness *h, udplb_output_kind kind)
{
	size_t c = 0;
	for (size_t i = 0; i < h->n; i++)
		c += h->out[i].kind == kind;
	return c;
}

static const udplb_output *first(const harness *h, udplb_output_kind kind)
{
	for (size_t i = 0; i < h->n; i++)
		if (h->out[i].kind == kind)
			return &h->out[i];
	return NULL;
}

static int feed(harness *h, const udplb_input *in)
{
	int rc = udplb_manager_input(h->m, in, h->now);
	drain(h);
	return rc;
}

static int client_from(harness *h, udplb_addr src, const udplb_addr *local, const void *payload,
                       size_t len, const udplb_backends *view)
{
	udplb_input in = {.kind = UDPLB_IN_CLIENT};
	in.u.client.src = src;
	in.u.client.local = *local;
	in.u.client.payload = payload;
	in.u.client.len = len;
	in.u.client.backends = view;
	return feed(h, &in);
}

/* A client datagram "q" from src to LOCAL, with the harness's view. */
static void client(harness *h, udplb_addr src)
{
	assert_int_equal(client_from(h, src, LOCAL(), "q", 1, h->b), 0);
}

static void backend(harness *h, udplb_flow_id id)
{
	udplb_input in = {.kind = UDPLB_IN_BACKEND};
	in.u.backend.flow = id;
	in.u.backend.payload = (const uint8_t *)"r";
	in.u.backend.len = 1;
	assert_int_equal(feed(h, &in), 0);
}

static int config(harness *h, udplb_config_kind kind, uint32_t value)
{
	udplb_input in = {.kind = UDPLB_IN_CONFIG};
	in.u.config.kind = kind;
	in.u.config.value = value;
	return feed(h, &in);
}

static void set_cluster(harness *h, const udplb_cluster *c)
{
	udplb_input in = {.kind = UDPLB_IN_CONFIG};
	in.u.config.kind = UDPLB_CFG_SET_CLUSTER;
	in.u.config.cluster = *c;
	assert_int_equal(feed(h, &in), 0);
}

static void fire(harness *h, uint64_t now)
{
	h->now = now;
	udplb_input in = {.kind = UDPLB_IN_TIMEOUT};
	assert_int_equal(feed(h, &in), 0);
}

static void abort_flow(harness *h, udplb_flow_id id)
{
	udplb_input in = {.kind = UDPLB_IN_CONFIG};
	in.u.config.kind = UDPLB_CFG_ABORT_FLOW;
	in.u.config.flow = id;
	assert_int_equal(feed(h, &in), 0);
}

static udplb_flow_id find(harness *h, udplb_addr src)
{
	return udplb_manager_flow_find(h->m, &src, LOCAL());
}

static udplb_stats stats(harness *h)
{
	udplb_stats s;
	udplb_manager_stats(h->m, &s);
	return s;
}

/* Three backends 10.1.0.1..3:9000, all healthy; a default cluster with a
 * 1000 ms idle timeout; max_flows 8, max_rx 512. */
static int setup(void **state)
{
	harness *h = calloc(1, sizeof *h);
	udplb_manager_config cfg = {
		.max_flows = 8,
		.max_rx_datagram_size = 512,
		.seed = {1, 2},
		.checks = UDPLB_CHECK_FULL,
	};
	if (!h || udplb_manager_new(&h->m, &cfg) || udplb_backends_new(&h->b, 1009))
		return -1;
	udplb_backend list[3];
	for (int i = 0; i < 3; i++)
		list[i] = (udplb_backend){.addr = V4(10, 1, 0, (uint8_t)(i + 1), 9000), .weight = 1,
		                          .healthy = true};
	if (udplb_backends_set(h->b, list, 3))
		return -1;
	udplb_cluster c;
	udplb_cluster_defaults(&c);
	c.front_timeout_ms = c.back_timeout_ms = 1000;
	udplb_input in = {.kind = UDPLB_IN_CONFIG};
	in.u.config.kind = UDPLB_CFG_SET_CLUSTER;
	in.u.config.cluster = c;
	if (udplb_manager_input(h->m, &in, 0))
		return -1;
	*state = h;
	return 0;
}

static int teardown(void **state)
{
	harness *h = *state;
	udplb_manager_del(h->m);
	udplb_backends_del(h->b);
	free(h);
	return 0;
}

static udplb_cluster base_cluster(void)
{
	udplb_cluster c;
	udplb_cluster_defaults(&c);
	c.front_timeout_ms = c.back_timeout_ms = 1000;
	return c;
}

/* ---- the opening burst ---- */

/* Seed 001 section 4: every datagram of an opening burst is forwarded and
 * counted once; none is held back or lost while the flow opens. */
static void every_datagram_of_an_opening_burst_is_forwarded_and_counted_once(void **state)
{
	harness *h = *state;
	udplb_addr src = V4(192, 0, 2, 1, 5000);
	const char *burst[] = {"one", "two", "three", "four", "five"};

	assert_int_equal(client_from(h, src, LOCAL(), burst[0], 3, h->b), 0);
	assert_int_equal(h->n, 4);
	assert_int_equal(h->out[0].kind, UDPLB_OUT_METRIC);
	assert_int_equal(h->out[0].u.metric.kind, UDPLB_METRIC_FLOW_CREATED);
	assert_int_equal(h->out[1].kind, UDPLB_OUT_OPEN_UPSTREAM);
	assert_true(udplb_addr_equal(&h->out[1].u.open.client, &src));
	assert_int_equal(h->out[2].kind, UDPLB_OUT_SEND_TO_BACKEND);
	assert_ptr_equal(h->out[2].u.to_backend.payload, burst[0]);
	assert_int_equal(h->out[3].kind, UDPLB_OUT_ARM_TIMER);
	udplb_flow_id id = h->out[1].flow;
	assert_int_equal(h->out[2].flow, id);

	for (int i = 1; i < 5; i++) {
		assert_int_equal(client_from(h, src, LOCAL(), burst[i], strlen(burst[i]), h->b), 0);
		assert_int_equal(h->n, 1);
		assert_int_equal(h->out[0].kind, UDPLB_OUT_SEND_TO_BACKEND);
		assert_int_equal(h->out[0].flow, id);
		assert_ptr_equal(h->out[0].u.to_backend.payload, burst[i]);
		assert_int_equal(h->out[0].u.to_backend.len, strlen(burst[i]));
	}
	udplb_flow_info fi;
	assert_true(udplb_manager_flow_info(h->m, id, &fi));
	assert_int_equal(fi.requests, 5);
	assert_int_equal(stats(h).flows_created, 1);
	assert_int_equal(stats(h).flows_live, 1);
}

/* ---- admission drop reasons ---- */

typedef struct drop_case {
	const char *name;
	int prepare;         /* what to set up first, below */
	udplb_addr src;
	size_t len;
	bool null_view;
	udplb_drop_reason reason;
} drop_case;

enum {
	P_NONE,
	P_NO_CLUSTER,
	P_EMPTY_VIEW,
	P_DRAIN,
	P_PER_IP,      /* a flow from 192.0.2.1 with max_flows_per_ip 1 */
	P_PER_SUBNET,  /* a flow from 192.0.2.1 with max_flows_per_subnet 1 at /24 */
	P_FULL,        /* max_flows 1 and one flow from 203.0.113.9 */
};

static void each_admission_drop_reason(void **state)
{
	harness *h = *state;
	static const uint8_t big[600];
	const drop_case cases[] = {
		{"oversize", P_NONE, V4(192, 0, 2, 1, 5000), 513, false, UDPLB_DROP_TRUNCATED},
		{"oversize before no cluster", P_NO_CLUSTER, V4(192, 0, 2, 1, 5000), 600, false,
		 UDPLB_DROP_TRUNCATED},
		{"no cluster", P_NO_CLUSTER, V4(192, 0, 2, 1, 5000), 1, false, UDPLB_DROP_NO_BACKEND},
		{"no cluster before invalid", P_NO_CLUSTER, V4(192, 0, 2, 1, 5000), 0, false,
		 UDPLB_DROP_NO_BACKEND},
		{"empty datagram", P_NONE, V4(192, 0, 2, 1, 5000), 0, false, UDPLB_DROP_INVALID},
		{"source port 0", P_NONE, V4(192, 0, 2, 1, 0), 1, false, UDPLB_DROP_INVALID},
		{"source 0.0.0.0", P_NONE, V4(0, 0, 0, 0, 5000), 1, false, UDPLB_DROP_INVALID},
		{"multicast source", P_NONE, V4(224, 0, 0, 1, 5000), 1, false, UDPLB_DROP_INVALID},
		{"broadcast source", P_NONE, V4(255, 255, 255, 255, 5000), 1, false,
		 UDPLB_DROP_INVALID},
		{"source ::", P_NONE, V6(0, 0, 5000), 1, false, UDPLB_DROP_INVALID},
		{"source ff02::1", P_NONE, V6(0xff02, 1, 5000), 1, false, UDPLB_DROP_INVALID},
		{"no family", P_NONE, {0}, 1, false, UDPLB_DROP_INVALID},
		{"draining", P_DRAIN, V4(192, 0, 2, 1, 5000), 1, false, UDPLB_DROP_SHED_DRAINING},
		{"per-ip limit", P_PER_IP, V4(192, 0, 2, 1, 5001), 1, false, UDPLB_DROP_SHED_PER_IP},
		{"per-subnet limit", P_PER_SUBNET, V4(192, 0, 2, 77, 5000), 1, false,
		 UDPLB_DROP_SHED_PER_SUBNET},
		{"max_flows", P_FULL, V4(192, 0, 2, 1, 5000), 1, false, UDPLB_DROP_SHED_MAX_FLOWS},
		{"empty view", P_EMPTY_VIEW, V4(192, 0, 2, 1, 5000), 1, false, UDPLB_DROP_NO_BACKEND},
		{"no view", P_NONE, V4(192, 0, 2, 1, 5000), 1, true, UDPLB_DROP_NO_BACKEND},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const drop_case *dc = &cases[i];
		harness *fresh;
		assert_int_equal(setup((void **)&fresh), 0);
		h = fresh;
		udplb_backends *view = h->b, *empty = NULL;
		udplb_cluster c = base_cluster();
		switch (dc->prepare) {
		case P_NO_CLUSTER:
			assert_int_equal(config(h, UDPLB_CFG_CLEAR_CLUSTER, 0), 0);
			break;
		case P_EMPTY_VIEW:
			assert_int_equal(udplb_backends_new(&empty, 0), 0);
			view = empty;
			break;
		case P_DRAIN:
			assert_int_equal(config(h, UDPLB_CFG_DRAIN, 0), 0);
			break;
		case P_PER_IP:
			c.max_flows_per_ip = 1;
			set_cluster(h, &c);
			client(h, V4(192, 0, 2, 1, 5000));
			break;
		case P_PER_SUBNET:
			c.max_flows_per_subnet = 1;
			set_cluster(h, &c);
			client(h, V4(192, 0, 2, 1, 5000));
			break;
		case P_FULL:
			assert_int_equal(config(h, UDPLB_CFG_SET_MAX_FLOWS, 1), 0);
			client(h, V4(203, 0, 113, 9, 5000));
			break;
		}
		udplb_stats before = stats(h);
		assert_int_equal(client_from(h, dc->src, LOCAL(), big, dc->len,
		                             dc->null_view ? NULL : view),
		                 0);
		if (h->n != 1 || h->out[0].kind != UDPLB_OUT_DROP ||
		    h->out[0].u.drop.reason != dc->reason)
			fail_msg("%s: expected one drop (%s), got %zu outputs", dc->name,
			         udplb_drop_name(dc->reason), h->n);
		assert_int_equal(h->out[0].u.drop.len, dc->len);
		/* Nothing allocated: the flow count did not move. */
		assert_int_equal(stats(h).flows_live, before.flows_live);
		assert_int_equal(stats(h).flows_created, before.flows_created);
		udplb_backends_del(empty);
		teardown((void **)&fresh);
	}
}

/* A known key is forwarded whatever the admission state: draining, per-IP
 * limits and a full table protect existing flows (seed 001 section 12). */
static void a_known_key_forwards_while_new_ones_shed(void **state)
{
	harness *h = *state;
	udplb_cluster c = base_cluster();
	c.max_flows_per_ip = 1;
	set_cluster(h, &c);
	assert_int_equal(config(h, UDPLB_CFG_SET_MAX_FLOWS, 1), 0);
	client(h, V4(192, 0, 2, 1, 5000));
	assert_int_equal(config(h, UDPLB_CFG_DRAIN, 0), 0);
	client(h, V4(192, 0, 2, 1, 5000));
	assert_int_equal(h->n, 1);
	assert_int_equal(h->out[0].kind, UDPLB_OUT_SEND_TO_BACKEND);
	client(h, V4(192, 0, 2, 2, 5000));
	assert_int_equal(h->out[0].u.drop.reason, UDPLB_DROP_SHED_DRAINING);
	assert_int_equal(config(h, UDPLB_CFG_RESUME, 0), 0);
	client(h, V4(192, 0, 2, 2, 5000));
	assert_int_equal(h->out[0].u.drop.reason, UDPLB_DROP_SHED_MAX_FLOWS);
}

static void exactly_max_rx_is_accepted(void **state)
{
	harness *h = *state;
	static const uint8_t buf[512];
	assert_int_equal(client_from(h, V4(192, 0, 2, 1, 5000), LOCAL(), buf, 512, h->b), 0);
	assert_non_null(first(h, UDPLB_OUT_SEND_TO_BACKEND));
	assert_int_equal(config(h, UDPLB_CFG_SET_MAX_RX, 100), 0);
	assert_int_equal(client_from(h, V4(192, 0, 2, 1, 5000), LOCAL(), buf, 101, h->b), 0);
	assert_int_equal(first(h, UDPLB_OUT_DROP)->u.drop.reason, UDPLB_DROP_TRUNCATED);
}

/* ---- per-source limits ---- */

static void per_ip_limit_counts_live_flows_of_one_ip(void **state)
{
	harness *h = *state;
	udplb_cluster c = base_cluster();
	c.max_flows_per_ip = 2;
	set_cluster(h, &c);
	client(h, V4(192, 0, 2, 1, 1000));
	client(h, V4(192, 0, 2, 1, 1001));
	client(h, V4(192, 0, 2, 1, 1002));
	assert_int_equal(first(h, UDPLB_OUT_DROP)->u.drop.reason, UDPLB_DROP_SHED_PER_IP);
	client(h, V4(192, 0, 2, 2, 1002)); /* another IP of the same /24 */
	assert_non_null(first(h, UDPLB_OUT_OPEN_UPSTREAM));
	/* A closed flow gives its place back. */
	abort_flow(h, find(h, V4(192, 0, 2, 1, 1000)));
	client(h, V4(192, 0, 2, 1, 1002));
	assert_non_null(first(h, UDPLB_OUT_OPEN_UPSTREAM));
	assert_int_equal(stats(h).flows_live, 3);
}

static void per_subnet_limit_uses_the_prefix_lengths(void **state)
{
	harness *h = *state;
	udplb_cluster c = base_cluster();
	c.max_flows_per_subnet = 2;
	c.subnet_prefix_v4 = 24;
	c.subnet_prefix_v6 = 48;
	set_cluster(h, &c);
	assert_int_equal(config(h, UDPLB_CFG_SET_MAX_FLOWS, 64), 0);
	client(h, V4(10, 0, 0, 1, 1000));
	client(h, V4(10, 0, 0, 200, 1000));
	client(h, V4(10, 0, 0, 99, 1000));
	assert_int_equal(first(h, UDPLB_OUT_DROP)->u.drop.reason, UDPLB_DROP_SHED_PER_SUBNET);
	client(h, V4(10, 0, 1, 1, 1000)); /* the next /24 */
	assert_non_null(first(h, UDPLB_OUT_OPEN_UPSTREAM));

	/* IPv6 at /48: 2001::1, 2001::2 and 2001::3 share 2001:0:0::/48. */
	udplb_addr a = V6(0x2001, 1, 1000), b = V6(0x2001, 2, 1000), d = V6(0x2001, 3, 1000);
	client(h, a);
	client(h, b);
	client(h, d);
	assert_int_equal(first(h, UDPLB_OUT_DROP)->u.drop.reason, UDPLB_DROP_SHED_PER_SUBNET);
	udplb_addr same48 = d, next48 = d;
	same48.ip[6] = 1; /* 2001:0:0:100::3: byte 6 lies past the /48 */
	client(h, same48);
	assert_int_equal(first(h, UDPLB_OUT_DROP)->u.drop.reason, UDPLB_DROP_SHED_PER_SUBNET);
	next48.ip[5] = 1; /* 2001:0:1::3: another /48 */
	client(h, next48);
	assert_non_null(first(h, UDPLB_OUT_OPEN_UPSTREAM));

	/* A prefix change applies to new flows: the flows counted at /24 keep
	 * their counter, new ones count at /16. */
	c.subnet_prefix_v4 = 16;
	set_cluster(h, &c);
	client(h, V4(10, 0, 7, 7, 1000));
	assert_non_null(first(h, UDPLB_OUT_OPEN_UPSTREAM));
	client(h, V4(10, 0, 8, 8, 1000));
	assert_non_null(first(h, UDPLB_OUT_OPEN_UPSTREAM));
	client(h, V4(10, 0, 9, 9, 1000));
	assert_int_equal(first(h, UDPLB_OUT_DROP)->u.drop.reason, UDPLB_DROP_SHED_PER_SUBNET);
}

/* ---- caps ---- */

static void responses_cap_closes_after_the_answer(void **state)
{
	harness *h = *state;
	udplb_cluster c = base_cluster();
	c.responses = 1; /* DNS */
	set_cluster(h, &c);
	client(h, V4(192, 0, 2, 1, 5000));
	udplb_flow_id id = first(h, UDPLB_OUT_OPEN_UPSTREAM)->flow;
	backend(h, id);
	assert_int_equal(h->n, 3);
	assert_int_equal(h->out[0].kind, UDPLB_OUT_SEND_TO_CLIENT);
	udplb_addr src = V4(192, 0, 2, 1, 5000);
	assert_true(udplb_addr_equal(&h->out[0].u.to_client.client, &src));
	assert_int_equal(h->out[1].kind, UDPLB_OUT_METRIC);
	assert_int_equal(h->out[1].u.metric.kind, UDPLB_METRIC_FLOW_EVICTED);
	assert_int_equal(h->out[1].u.metric.reason, UDPLB_CLOSE_RESPONSES);
	assert_int_equal(h->out[1].u.metric.responses, 1);
	assert_int_equal(h->out[2].kind, UDPLB_OUT_CLOSE_FLOW);
	assert_int_equal(h->out[2].flow, id);
	assert_int_equal(stats(h).flows_live, 0);
	/* A late reply for the closed flow drops. */
	backend(h, id);
	assert_int_equal(h->out[0].u.drop.reason, UDPLB_DROP_UNKNOWN_FLOW);
}

static void requests_cap_closes_after_the_last_forward(void **state)
{
	harness *h = *state;
	udplb_cluster c = base_cluster();
	c.requests = 3;
	set_cluster(h, &c);
	udplb_addr src = V4(192, 0, 2, 1, 5000);
	client(h, src);
	client(h, src);
	assert_int_equal(count(h, UDPLB_OUT_CLOSE_FLOW), 0);
	client(h, src);
	assert_int_equal(h->n, 3);
	assert_int_equal(h->out[0].kind, UDPLB_OUT_SEND_TO_BACKEND);
	assert_int_equal(h->out[1].u.metric.reason, UDPLB_CLOSE_REQUESTS);
	assert_int_equal(h->out[1].u.metric.requests, 3);
	assert_int_equal(h->out[2].kind, UDPLB_OUT_CLOSE_FLOW);
	/* The fourth datagram opens a new flow. */
	client(h, src);
	assert_non_null(first(h, UDPLB_OUT_OPEN_UPSTREAM));
	assert_int_equal(stats(h).flows_created, 2);
}

static void requests_cap_of_one_closes_on_admission(void **state)
{
	harness *h = *state;
	udplb_cluster c = base_cluster();
	c.requests = 1;
	set_cluster(h, &c);
	client(h, V4(192, 0, 2, 1, 5000));
	const udplb_output_kind want[] = {UDPLB_OUT_METRIC, UDPLB_OUT_OPEN_UPSTREAM,
	                                  UDPLB_OUT_SEND_TO_BACKEND, UDPLB_OUT_METRIC,
	                                  UDPLB_OUT_CLOSE_FLOW};
	assert_int_equal(h->n, 5);
	for (size_t i = 0; i < 5; i++)
		assert_int_equal(h->out[i].kind, want[i]);
	assert_int_equal(stats(h).flows_live, 0);
}

/* ---- reconfig ---- */

/* Seed 001 section 11: a mid-flow reconfig applies to new flows only. */
static void reconfig_midflow_preserves_existing_flow_contract(void **state)
{
	harness *h = *state;
	udplb_cluster c = base_cluster();
	c.responses = 1;
	c.front_timeout_ms = c.back_timeout_ms = 1000;
	set_cluster(h, &c);
	udplb_addr old_src = V4(192, 0, 2, 1, 5000);
	client(h, old_src);
	udplb_flow_id old = first(h, UDPLB_OUT_OPEN_UPSTREAM)->flow;
	assert_int_equal(first(h, UDPLB_OUT_SEND_TO_BACKEND)->u.to_backend.prefix_len, 0);

	c.responses = 0;
	c.requests = 0;
	c.front_timeout_ms = c.back_timeout_ms = 60000;
	c.proxy_protocol = UDPLB_PPV2_EVERY;
	c.selection = UDPLB_SELECT_ROUND_ROBIN;
	set_cluster(h, &c);

	/* The old flow: no PROXY header, its 1000 ms timeout, its cap of 1. */
	client(h, old_src);
	assert_int_equal(h->out[0].u.to_backend.prefix_len, 0);
	udplb_flow_info fi;
	assert_true(udplb_manager_flow_info(h->m, old, &fi));
	assert_int_equal(fi.front_timeout_ms, 1000);
	assert_int_equal(fi.deadline_ms, 1000);
	assert_int_equal(fi.responses_cap, 1);

	/* A new flow: the new contract. */
	udplb_addr new_src = V4(192, 0, 2, 2, 5000);
	client(h, new_src);
	udplb_flow_id new = first(h, UDPLB_OUT_OPEN_UPSTREAM)->flow;
	assert_int_equal(first(h, UDPLB_OUT_SEND_TO_BACKEND)->u.to_backend.prefix_len, 28);
	backend(h, new);
	backend(h, new);
	assert_int_equal(count(h, UDPLB_OUT_CLOSE_FLOW), 0);

	backend(h, old);
	assert_int_equal(first(h, UDPLB_OUT_METRIC)->u.metric.reason, UDPLB_CLOSE_RESPONSES);

	/* The new flow lives past the old timeout. */
	fire(h, 1000);
	assert_int_equal(count(h, UDPLB_OUT_CLOSE_FLOW), 0);
	assert_true(udplb_manager_flow_info(h->m, new, &fi));
	assert_int_equal(fi.deadline_ms, 60000);
}

/* A live flow keeps its backend when the view changes under it. */
static void a_flow_sticks_to_its_backend(void **state)
{
	harness *h = *state;
	udplb_addr src = V4(192, 0, 2, 1, 5000);
	client(h, src);
	udplb_addr chosen = first(h, UDPLB_OUT_OPEN_UPSTREAM)->u.open.backend;
	int idx = udplb_backends_find(h->b, &chosen);
	assert_true(idx >= 0);
	assert_int_equal(udplb_backends_set_health(h->b, (size_t)idx, false), 0);
	client(h, src);
	assert_int_equal(h->n, 1);
	udplb_flow_info fi;
	assert_true(udplb_manager_flow_info(h->m, find(h, src), &fi));
	assert_true(udplb_addr_equal(&fi.backend, &chosen));
	/* A new flow of the same IP (source_ip affinity) now goes elsewhere. */
	client(h, V4(192, 0, 2, 1, 5001));
	assert_false(udplb_addr_equal(&first(h, UDPLB_OUT_OPEN_UPSTREAM)->u.open.backend, &chosen));
}

static void source_ip_affinity_sends_every_port_to_one_backend(void **state)
{
	harness *h = *state;
	udplb_cluster c = base_cluster();
	assert_int_equal(config(h, UDPLB_CFG_SET_MAX_FLOWS, 64), 0);
	set_cluster(h, &c);
	client(h, V4(192, 0, 2, 1, 1000));
	udplb_addr b0 = first(h, UDPLB_OUT_OPEN_UPSTREAM)->u.open.backend;
	for (uint16_t port = 1001; port < 1032; port++) {
		client(h, V4(192, 0, 2, 1, port));
		assert_true(udplb_addr_equal(&first(h, UDPLB_OUT_OPEN_UPSTREAM)->u.open.backend, &b0));
	}
	assert_int_equal(stats(h).flows_live, 32); /* one flow per 4-tuple */

	c.affinity = UDPLB_AFFINITY_SOURCE_IP_PORT;
	set_cluster(h, &c);
	bool moved = false;
	for (uint16_t port = 2000; port < 2032; port++) {
		client(h, V4(192, 0, 2, 1, port));
		moved |= !udplb_addr_equal(&first(h, UDPLB_OUT_OPEN_UPSTREAM)->u.open.backend, &b0);
	}
	assert_true(moved);
}

/* The 4-tuple includes the listener address: one client talking to two
 * listener addresses is two flows. */
static void the_key_is_the_four_tuple(void **state)
{
	harness *h = *state;
	udplb_addr src = V4(192, 0, 2, 1, 5000);
	udplb_addr other_local = V4(198, 51, 100, 8, 53);
	client(h, src);
	assert_int_equal(client_from(h, src, &other_local, "q", 1, h->b), 0);
	assert_non_null(first(h, UDPLB_OUT_OPEN_UPSTREAM));
	assert_int_equal(stats(h).flows_live, 2);
	/* Replies go back from the address the client used. */
	backend(h, udplb_manager_flow_find(h->m, &src, &other_local));
	assert_true(udplb_addr_equal(&h->out[0].u.to_client.local, &other_local));
	assert_true(udplb_addr_equal(&h->out[0].u.to_client.client, &src));
}

/* fe80::1 on the link with interface index 2 and on the one with index 3
 * are two hosts: two flows, two per-IP counts, and each reply names its
 * own link. A scope on any other address is not the core's to keep. */
static void a_link_local_client_is_its_links(void **state)
{
	harness *h = *state;
	udplb_cluster c = base_cluster();
	c.max_flows_per_ip = 1;
	set_cluster(h, &c);
	udplb_addr on2 = V6(0xfe80, 1, 546), on3 = on2;
	on2.scope = 2;
	on3.scope = 3;
	client(h, on2);
	client(h, on3);
	assert_non_null(first(h, UDPLB_OUT_OPEN_UPSTREAM)); /* not shed per IP */
	assert_int_equal(stats(h).flows_live, 2);
	backend(h, find(h, on3));
	assert_int_equal(h->out[0].u.to_client.client.scope, 3);
	assert_true(udplb_addr_equal(&h->out[0].u.to_client.client, &on3));
	client(h, on2); /* the same flow again */
	assert_int_equal(stats(h).flows_live, 2);

	udplb_addr global = V6(0x2001, 1, 546), scoped = global;
	scoped.scope = 7;
	client(h, global);
	client(h, scoped); /* the same client: shed by nothing, one flow */
	assert_int_equal(stats(h).flows_live, 3);
	assert_int_equal(find(h, global), find(h, scoped));
}

/* ---- timers ---- */

static void the_first_flow_arms_the_timer_at_its_deadline(void **state)
{
	harness *h = *state;
	h->now = 100;
	client(h, V4(192, 0, 2, 1, 5000));
	assert_int_equal(first(h, UDPLB_OUT_ARM_TIMER)->u.arm.deadline_ms, 1100);
	/* A later flow does not move an earlier timer. */
	h->now = 200;
	client(h, V4(192, 0, 2, 2, 5000));
	assert_null(first(h, UDPLB_OUT_ARM_TIMER));
	fire(h, 1100);
	assert_int_equal(count(h, UDPLB_OUT_CLOSE_FLOW), 1);
	assert_int_equal(first(h, UDPLB_OUT_ARM_TIMER)->u.arm.deadline_ms, 1200);
}

/* Seed 001 section 7: the shell's wheel fires up to a tick early; an
 * expiry that finds nothing due must arm again, at the same deadline. */
static void early_expiry_that_finds_nothing_due_still_rearms(void **state)
{
	harness *h = *state;
	client(h, V4(192, 0, 2, 1, 5000));
	assert_int_equal(first(h, UDPLB_OUT_ARM_TIMER)->u.arm.deadline_ms, 1000);
	fire(h, 950);
	assert_int_equal(h->n, 1);
	assert_int_equal(h->out[0].kind, UDPLB_OUT_ARM_TIMER);
	assert_int_equal(h->out[0].u.arm.deadline_ms, 1000);
	assert_int_equal(stats(h).flows_live, 1);
}

static void repeated_early_expiries_each_rearm(void **state)
{
	harness *h = *state;
	client(h, V4(192, 0, 2, 1, 5000));
	const uint64_t early[] = {901, 950, 950, 999};
	for (size_t i = 0; i < 4; i++) {
		fire(h, early[i]);
		assert_int_equal(h->n, 1);
		assert_int_equal(h->out[0].kind, UDPLB_OUT_ARM_TIMER);
		assert_int_equal(h->out[0].u.arm.deadline_ms, 1000);
	}
	fire(h, 1000);
	assert_int_equal(h->n, 2);
	assert_int_equal(h->out[0].u.metric.reason, UDPLB_CLOSE_IDLE);
	assert_int_equal(h->out[0].u.metric.duration_ms, 1000);
	assert_int_equal(h->out[1].kind, UDPLB_OUT_CLOSE_FLOW);
	assert_false(stats(h).armed);
	/* A spurious fire with no flows arms nothing. */
	fire(h, 5000);
	assert_int_equal(h->n, 0);
}

/* Seed 001 section 7: a flow that saw traffic after its entry was placed
 * survives the expiry and is re-armed at its real deadline. */
static void deadline_revalidation_defeats_stale_close(void **state)
{
	harness *h = *state;
	udplb_addr busy = V4(192, 0, 2, 1, 5000), quiet = V4(192, 0, 2, 2, 5000);
	client(h, busy);
	client(h, quiet);
	h->now = 800;
	client(h, busy); /* deadline 1800 */
	h->now = 900;
	backend(h, find(h, quiet)); /* back timeout: deadline 1900 */
	fire(h, 1000);
	assert_int_equal(count(h, UDPLB_OUT_CLOSE_FLOW), 0);
	assert_int_equal(first(h, UDPLB_OUT_ARM_TIMER)->u.arm.deadline_ms, 1800);
	fire(h, 1800);
	assert_int_equal(count(h, UDPLB_OUT_CLOSE_FLOW), 1);
	assert_int_equal(find(h, busy), UDPLB_FLOW_NONE);
	assert_int_not_equal(find(h, quiet), UDPLB_FLOW_NONE);
	assert_int_equal(first(h, UDPLB_OUT_ARM_TIMER)->u.arm.deadline_ms, 1900);
}

/* An expiry due for more flows than the output queue holds continues as the
 * shell polls, and closes each flow exactly once. */
static void a_large_expiry_drains_through_the_fixed_queue(void **state)
{
	harness *h = *state;
	assert_int_equal(config(h, UDPLB_CFG_SET_MAX_FLOWS, 1000), 0);
	for (int i = 0; i < 1000; i++)
		client(h, V4(10, 9, (uint8_t)(i / 200), (uint8_t)(i % 200 + 1), 7000));
	assert_int_equal(stats(h).flows_live, 1000);
	h->now = 500;
	client(h, V4(10, 9, 0, 1, 7000)); /* one survivor */
	fire(h, 1000);
	assert_int_equal(count(h, UDPLB_OUT_CLOSE_FLOW), 999);
	assert_int_equal(count(h, UDPLB_OUT_METRIC), 999);
	/* Each CLOSE_FLOW follows its own FLOW_EVICTED. */
	for (size_t i = 0; i + 1 < h->n; i++)
		if (h->out[i].kind == UDPLB_OUT_METRIC) {
			assert_int_equal(h->out[i + 1].kind, UDPLB_OUT_CLOSE_FLOW);
			assert_int_equal(h->out[i + 1].flow, h->out[i].flow);
		}
	assert_int_equal(h->out[h->n - 1].kind, UDPLB_OUT_ARM_TIMER);
	assert_int_equal(h->out[h->n - 1].u.arm.deadline_ms, 1500);
	assert_int_equal(stats(h).flows_live, 1);
}

static void time_never_runs_backwards(void **state)
{
	harness *h = *state;
	h->now = 5000;
	client(h, V4(192, 0, 2, 1, 5000));
	h->now = 10; /* the shell's clock stepped back */
	client(h, V4(192, 0, 2, 2, 5000));
	udplb_flow_info fi;
	assert_true(udplb_manager_flow_info(h->m, find(h, V4(192, 0, 2, 2, 5000)), &fi));
	assert_int_equal(fi.created_ms, 5000);
	assert_int_equal(fi.deadline_ms, 6000);
}

/* ---- closes ---- */

static void closing_a_missing_or_closed_flow_is_a_no_op(void **state)
{
	harness *h = *state;
	client(h, V4(192, 0, 2, 1, 5000));
	udplb_flow_id id = first(h, UDPLB_OUT_OPEN_UPSTREAM)->flow;
	abort_flow(h, id);
	assert_int_equal(h->n, 2);
	assert_int_equal(h->out[0].u.metric.reason, UDPLB_CLOSE_ABORT);
	abort_flow(h, id);
	assert_int_equal(h->n, 0);
	abort_flow(h, UDPLB_FLOW_NONE);
	abort_flow(h, (udplb_flow_id)1 << 32 | 99999);
	assert_int_equal(h->n, 0);
	assert_int_equal(stats(h).flows_evicted, 1);

	/* The slot is reused under a new generation: the old id misses. */
	client(h, V4(192, 0, 2, 9, 5000));
	udplb_flow_id reused = first(h, UDPLB_OUT_OPEN_UPSTREAM)->flow;
	assert_int_equal(udplb_flow_slot(reused), udplb_flow_slot(id));
	assert_int_not_equal(reused, id);
	backend(h, id);
	assert_int_equal(h->out[0].u.drop.reason, UDPLB_DROP_UNKNOWN_FLOW);
	abort_flow(h, id);
	assert_int_equal(h->n, 0);
	assert_int_equal(stats(h).flows_live, 1);
}

static void close_all_closes_every_flow_once(void **state)
{
	harness *h = *state;
	assert_int_equal(config(h, UDPLB_CFG_SET_MAX_FLOWS, 300), 0);
	for (int i = 0; i < 300; i++)
		client(h, V4(10, 8, (uint8_t)(i / 250), (uint8_t)(i % 250 + 1), 7000));
	assert_int_equal(config(h, UDPLB_CFG_CLOSE_ALL, 0), 0);
	assert_int_equal(count(h, UDPLB_OUT_CLOSE_FLOW), 300);
	assert_int_equal(count(h, UDPLB_OUT_METRIC), 300);
	for (size_t i = 0; i < h->n; i += 2) {
		assert_int_equal(h->out[i].u.metric.reason, UDPLB_CLOSE_ALL);
		assert_int_equal(h->out[i + 1].flow, h->out[i].flow);
		for (size_t j = 0; j < i; j += 2)
			assert_int_not_equal(h->out[j + 1].flow, h->out[i + 1].flow);
	}
	assert_int_equal(stats(h).flows_live, 0);
	assert_int_equal(stats(h).flows_created, stats(h).flows_evicted);
}

/* A reload that removes a backend closes that backend's flows, and only
 * those, each once, with the reason removed, through the fixed queue
 * (issue 16); the flows of the backends that stay keep their backend. */
static void close_backend_closes_that_backends_flows_only(void **state)
{
	harness *h = *state;
	assert_int_equal(config(h, UDPLB_CFG_SET_MAX_FLOWS, 300), 0);
	udplb_cluster c = base_cluster();
	c.selection = UDPLB_SELECT_ROUND_ROBIN; /* 100 flows to each of the three */
	set_cluster(h, &c);
	for (int i = 0; i < 300; i++)
		client(h, V4(10, 8, (uint8_t)(i / 250), (uint8_t)(i % 250 + 1), 7000));
	udplb_addr gone = V4(10, 1, 0, 2, 9000);
	udplb_input in = {.kind = UDPLB_IN_CONFIG};
	in.u.config.kind = UDPLB_CFG_CLOSE_BACKEND;
	in.u.config.backend = gone;
	assert_int_equal(feed(h, &in), 0);
	assert_int_equal(count(h, UDPLB_OUT_CLOSE_FLOW), 100);
	assert_int_equal(count(h, UDPLB_OUT_METRIC), 100);
	assert_int_equal(h->n, 200); /* no timer moves: the earliest deadline did not come sooner */
	for (size_t i = 0; i < h->n; i += 2) {
		assert_int_equal(h->out[i].u.metric.reason, UDPLB_CLOSE_REMOVED);
		assert_int_equal(h->out[i + 1].flow, h->out[i].flow);
	}
	assert_int_equal(stats(h).flows_live, 200);
	for (int i = 0; i < 300; i++) {
		udplb_flow_id id = find(h, V4(10, 8, (uint8_t)(i / 250), (uint8_t)(i % 250 + 1), 7000));
		udplb_flow_info fi;
		if (id == UDPLB_FLOW_NONE)
			continue;
		assert_true(udplb_manager_flow_info(h->m, id, &fi));
		assert_false(udplb_addr_equal(&fi.backend, &gone));
	}
	assert_int_equal(feed(h, &in), 0); /* again: nothing left to close */
	assert_int_equal(h->n, 0);
	in.u.config.backend = V4(10, 1, 0, 9, 9000); /* no flow's */
	assert_int_equal(feed(h, &in), 0);
	assert_int_equal(h->n, 0);
	assert_int_equal(stats(h).flows_live, 200);
}

static void an_undrained_queue_refuses_the_next_input(void **state)
{
	harness *h = *state;
	udplb_input in = {.kind = UDPLB_IN_CLIENT};
	in.u.client.src = V4(192, 0, 2, 1, 5000);
	in.u.client.local = *LOCAL();
	in.u.client.payload = (const uint8_t *)"q";
	in.u.client.len = 1;
	in.u.client.backends = h->b;
	assert_int_equal(udplb_manager_input(h->m, &in, 0), 0);
	assert_int_equal(udplb_manager_input(h->m, &in, 0), UDPLB_E_BUSY);
	udplb_output o;
	assert_true(udplb_manager_poll(h->m, &o));
	assert_int_equal(udplb_manager_input(h->m, &in, 0), UDPLB_E_BUSY);
	drain(h);
	assert_int_equal(udplb_manager_input(h->m, &in, 0), 0);
	drain(h);
	assert_int_equal(h->n, 1);

	in.u.client.payload = NULL;
	assert_int_equal(udplb_manager_input(h->m, &in, 0), UDPLB_E_INVAL);
	in.kind = (udplb_input_kind)42;
	assert_int_equal(udplb_manager_input(h->m, &in, 0), UDPLB_E_INVAL);
	drain(h);
	assert_int_equal(h->n, 0);
}

/* ---- config refusals ---- */

static void config_refusals_change_nothing(void **state)
{
	harness *h = *state;
	udplb_cluster c = base_cluster();
	c.front_timeout_ms = 0;
	udplb_input in = {.kind = UDPLB_IN_CONFIG};
	in.u.config.kind = UDPLB_CFG_SET_CLUSTER;
	in.u.config.cluster = c;
	assert_int_equal(feed(h, &in), UDPLB_E_TIMEOUT);
	c = base_cluster();
	c.back_timeout_ms = UDPLB_TIMEOUT_MAX_MS + 1;
	in.u.config.cluster = c;
	assert_int_equal(feed(h, &in), UDPLB_E_TIMEOUT);
	c = base_cluster();
	c.subnet_prefix_v4 = 33;
	in.u.config.cluster = c;
	assert_int_equal(feed(h, &in), UDPLB_E_PREFIX);
	c = base_cluster();
	c.subnet_prefix_v6 = 129;
	in.u.config.cluster = c;
	assert_int_equal(feed(h, &in), UDPLB_E_PREFIX);
	c = base_cluster();
	c.selection = (udplb_select)7;
	in.u.config.cluster = c;
	assert_int_equal(feed(h, &in), UDPLB_E_SELECTION);
	c = base_cluster();
	c.affinity = (udplb_affinity)7;
	in.u.config.cluster = c;
	assert_int_equal(feed(h, &in), UDPLB_E_AFFINITY);
	c = base_cluster();
	c.proxy_protocol = (udplb_ppv2_mode)7;
	in.u.config.cluster = c;
	assert_int_equal(feed(h, &in), UDPLB_E_PPV2);
	assert_int_equal(config(h, UDPLB_CFG_SET_MAX_FLOWS, 0), UDPLB_E_MAX_FLOWS);
	assert_int_equal(config(h, UDPLB_CFG_SET_MAX_FLOWS, UDPLB_MAX_FLOWS_LIMIT + 1),
	                 UDPLB_E_MAX_FLOWS);
	assert_int_equal(config(h, UDPLB_CFG_SET_MAX_RX, 0), UDPLB_E_MAX_RX);
	assert_int_equal(config(h, UDPLB_CFG_SET_MAX_RX, 65536), UDPLB_E_MAX_RX);
	in.u.config.kind = (udplb_config_kind)99;
	assert_int_equal(feed(h, &in), UDPLB_E_INVAL);
	udplb_stats s = stats(h);
	assert_int_equal(s.max_flows, 8);
	assert_int_equal(s.max_rx_datagram_size, 512);
	/* The cluster in force is still the 1000 ms one. */
	client(h, V4(192, 0, 2, 1, 5000));
	assert_int_equal(first(h, UDPLB_OUT_ARM_TIMER)->u.arm.deadline_ms, 1000);

	udplb_manager *m = NULL;
	udplb_manager_config cfg = {.max_flows = 0, .max_rx_datagram_size = 1};
	assert_int_equal(udplb_manager_new(&m, &cfg), UDPLB_E_MAX_FLOWS);
	cfg.max_flows = 1;
	cfg.max_rx_datagram_size = 0;
	assert_int_equal(udplb_manager_new(&m, &cfg), UDPLB_E_MAX_RX);
	assert_null(m);
}

/* ---- PROXY v2 through the manager ---- */

static void ppv2_first_prefixes_only_the_first_datagram(void **state)
{
	harness *h = *state;
	udplb_cluster c = base_cluster();
	c.proxy_protocol = UDPLB_PPV2_FIRST;
	set_cluster(h, &c);
	udplb_addr src = V4(192, 0, 2, 1, 5353);
	client(h, src);
	const udplb_output *o = first(h, UDPLB_OUT_SEND_TO_BACKEND);
	static const uint8_t want[28] = {0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49,
	                                 0x54, 0x0A, 0x21, 0x12, 0x00, 0x0C, 192,  0,    2,    1,
	                                 198,  51,   100,  7,    0x14, 0xE9, 0x00, 0x35};
	assert_int_equal(o->u.to_backend.prefix_len, 28);
	assert_memory_equal(o->u.to_backend.prefix, want, 28);
	assert_int_equal(o->u.to_backend.len, 1); /* the payload length excludes the prefix */
	client(h, src);
	assert_int_equal(h->out[0].u.to_backend.prefix_len, 0);
	client(h, src);
	assert_int_equal(h->out[0].u.to_backend.prefix_len, 0);
	/* Replies never carry one. */
	backend(h, find(h, src));
	assert_int_equal(h->out[0].kind, UDPLB_OUT_SEND_TO_CLIENT);
}

static void ppv2_every_prefixes_each_datagram(void **state)
{
	harness *h = *state;
	udplb_cluster c = base_cluster();
	c.proxy_protocol = UDPLB_PPV2_EVERY;
	set_cluster(h, &c);
	udplb_addr src = V6(0x2001, 1, 40000);
	udplb_addr local = V6(0x2001, 0x53, 53);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(client_from(h, src, &local, "q", 1, h->b), 0);
		const udplb_output *o = first(h, UDPLB_OUT_SEND_TO_BACKEND);
		assert_int_equal(o->u.to_backend.prefix_len, 52);
		assert_int_equal(o->u.to_backend.prefix[13], 0x22);
	}
	/* A v4 client on a v6 listener address: AF_UNSPEC. */
	assert_int_equal(client_from(h, V4(192, 0, 2, 1, 1), &local, "q", 1, h->b), 0);
	assert_int_equal(first(h, UDPLB_OUT_SEND_TO_BACKEND)->u.to_backend.prefix_len, 16);
}

/* ---- growth ---- */

static void the_table_grows_to_max_flows_and_no_further(void **state)
{
	harness *h = *state;
	assert_int_equal(config(h, UDPLB_CFG_SET_MAX_FLOWS, 1500), 0);
	for (int i = 0; i < 1500; i++) {
		client(h, V4(172, 16, (uint8_t)(i >> 8), (uint8_t)i, 1));
		assert_non_null(first(h, UDPLB_OUT_OPEN_UPSTREAM));
	}
	client(h, V4(172, 17, 0, 0, 1));
	assert_int_equal(first(h, UDPLB_OUT_DROP)->u.drop.reason, UDPLB_DROP_SHED_MAX_FLOWS);
	/* Every flow is still found under its key after the rehashes. */
	for (int i = 0; i < 1500; i++)
		assert_int_not_equal(find(h, V4(172, 16, (uint8_t)(i >> 8), (uint8_t)i, 1)),
		                     UDPLB_FLOW_NONE);
	/* Lowering max_flows keeps live flows and sheds new ones. */
	assert_int_equal(config(h, UDPLB_CFG_SET_MAX_FLOWS, 10), 0);
	client(h, V4(172, 16, 0, 0, 1));
	assert_int_equal(h->out[0].kind, UDPLB_OUT_SEND_TO_BACKEND);
	assert_int_equal(stats(h).flows_live, 1500);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(every_datagram_of_an_opening_burst_is_forwarded_and_counted_once),
		cmocka_unit_test(each_admission_drop_reason),
		T(a_known_key_forwards_while_new_ones_shed),
		T(exactly_max_rx_is_accepted),
		T(per_ip_limit_counts_live_flows_of_one_ip),
		T(per_subnet_limit_uses_the_prefix_lengths),
		T(responses_cap_closes_after_the_answer),
		T(requests_cap_closes_after_the_last_forward),
		T(requests_cap_of_one_closes_on_admission),
		T(reconfig_midflow_preserves_existing_flow_contract),
		T(a_flow_sticks_to_its_backend),
		T(source_ip_affinity_sends_every_port_to_one_backend),
		T(a_link_local_client_is_its_links),
		T(the_key_is_the_four_tuple),
		T(the_first_flow_arms_the_timer_at_its_deadline),
		T(early_expiry_that_finds_nothing_due_still_rearms),
		T(repeated_early_expiries_each_rearm),
		T(deadline_revalidation_defeats_stale_close),
		T(a_large_expiry_drains_through_the_fixed_queue),
		T(time_never_runs_backwards),
		T(closing_a_missing_or_closed_flow_is_a_no_op),
		T(close_all_closes_every_flow_once),
		T(close_backend_closes_that_backends_flows_only),
		T(an_undrained_queue_refuses_the_next_input),
		T(config_refusals_change_nothing),
		T(ppv2_first_prefixes_only_the_first_datagram),
		T(ppv2_every_prefixes_each_datagram),
		T(the_table_grows_to_max_flows_and_no_further),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
