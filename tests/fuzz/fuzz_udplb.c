/* fuzz_udplb.c - libFuzzer target: fuzz bytes become a sequence of UDP load-balancer core inputs; every invariant is checked after each, and at the end the timer chain alone must reap every flow. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "udplb/manager.h"

/* Input: a header byte (max_flows 1..16, max_rx and the cluster shape),
 * then one opcode byte per step with its argument bytes:
 *   0 client datagram: source index, length
 *   1 backend datagram: flow pick, length
 *   2 time passes: two bytes of milliseconds (the shell fires a due timer)
 *   3 timer fire now (early, late or spurious)
 *   4 health flip: backend index
 *   5 backend set: membership bits, weight bits
 *   6 cluster: selection, timeouts, caps, limits, prefixes, PROXY mode
 *   7 max_flows / max_rx / drain / resume / close all / abort / clear
 */

#define CHECK(x)                                                                                   \
	do {                                                                                       \
		if (!(x))                                                                          \
			abort();                                                                   \
	} while (0)

#define POOL 4
#define SOURCES 16
#define OUT_MAX 256

typedef struct world {
	udplb_manager *m;
	udplb_backends *view;
	udplb_backend pool[POOL];
	udplb_cluster cluster;
	uint64_t now;
	bool armed;
	uint64_t deadline;
	udplb_flow_id ids[32]; /* recently opened flows, live or not */
	unsigned n_ids;
	uint64_t opened, closed;
} world;

static uint8_t payload[2048];

typedef struct reader {
	const uint8_t *p;
	size_t n;
} reader;

static uint8_t byte(reader *r)
{
	if (!r->n)
		return 0;
	r->n--;
	return *r->p++;
}

static void drain(world *w, udplb_input_kind kind)
{
	udplb_output o, prev = {.kind = UDPLB_OUT_DROP};
	while (udplb_manager_poll(w->m, &o)) {
		switch (o.kind) {
		case UDPLB_OUT_ARM_TIMER:
			w->armed = true;
			w->deadline = o.u.arm.deadline_ms;
			if (kind == UDPLB_IN_TIMEOUT)
				CHECK(o.u.arm.deadline_ms > w->now);
			break;
		case UDPLB_OUT_OPEN_UPSTREAM:
			w->ids[w->n_ids++ % 32] = o.flow;
			w->opened++;
			break;
		case UDPLB_OUT_CLOSE_FLOW:
			CHECK(prev.kind == UDPLB_OUT_METRIC && prev.flow == o.flow &&
			      prev.u.metric.kind == UDPLB_METRIC_FLOW_EVICTED);
			w->closed++;
			break;
		case UDPLB_OUT_SEND_TO_BACKEND:
			CHECK(o.u.to_backend.prefix_len == 0 || o.u.to_backend.prefix_len == 16 ||
			      o.u.to_backend.prefix_len == 28 || o.u.to_backend.prefix_len == 52);
			break;
		default:
			break;
		}
		prev = o;
	}
	CHECK(udplb_manager_check(w->m, UDPLB_CHECK_FULL) == NULL);
	udplb_stats st;
	udplb_manager_stats(w->m, &st);
	CHECK(st.flows_live == w->opened - w->closed);
	if (st.flows_live)
		CHECK(w->armed && st.armed && st.armed_deadline_ms == w->deadline);
}

static void input(world *w, const udplb_input *in)
{
	int rc = udplb_manager_input(w->m, in, w->now);
	CHECK(rc != UDPLB_E_BUSY);
	drain(w, in->kind);
}

static void fire(world *w)
{
	udplb_input in = {.kind = UDPLB_IN_TIMEOUT};
	w->armed = false;
	input(w, &in);
}

static void advance(world *w, uint64_t dt)
{
	uint64_t end = w->now + dt;
	while (w->armed && w->deadline <= end) {
		if (w->deadline > w->now)
			w->now = w->deadline;
		fire(w);
	}
	w->now = end;
}

/* Client i (0-15); zone 1-3 makes an IPv6 one link-local on that link,
 * and leaves a scope on any other, which the core must not key on. */
static udplb_addr source(unsigned i, unsigned zone)
{
	udplb_addr a;
	if (i & 8) {
		uint8_t ip[16] = {0x20, 0x01, 0x0d, 0xb8, [6] = (uint8_t)(i & 1), [15] = (uint8_t)i};
		if (zone && (i & 2)) {
			ip[0] = 0xfe;
			ip[1] = 0x80;
			ip[2] = ip[3] = 0;
		}
		udplb_addr_set6(&a, ip, (uint16_t)(i & 4 ? 0 : 1000 + (i & 3)));
	} else {
		udplb_addr_set4(&a, (const uint8_t[]){10, 0, (uint8_t)(i & 1), (uint8_t)(i & 6)},
		                (uint16_t)(1000 + (i & 1)));
	}
	a.scope = zone;
	return a;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	reader r = {data, size};
	world w;
	memset(&w, 0, sizeof w);
	uint8_t h = byte(&r);
	udplb_manager_config cfg = {
		.max_flows = 1 + (h & 15),
		.max_rx_datagram_size = 1 + (unsigned)(h >> 4) * 100,
		.seed = {h, 42},
		.checks = UDPLB_CHECK_FULL,
	};
	CHECK(udplb_manager_new(&w.m, &cfg) == 0);
	CHECK(udplb_backends_new(&w.view, 13) == 0);
	for (int i = 0; i < POOL; i++) {
		udplb_addr_set4(&w.pool[i].addr, (const uint8_t[]){10, 9, 0, (uint8_t)(i + 1)}, 53);
		w.pool[i].weight = 1;
		w.pool[i].healthy = true;
	}
	CHECK(udplb_backends_set(w.view, w.pool, POOL) == 0);
	udplb_addr local4, local6;
	udplb_addr_set4(&local4, (const uint8_t[]){127, 0, 0, 1}, 53);
	uint8_t l6[16] = {[15] = 1};
	udplb_addr_set6(&local6, l6, 53);
	udplb_cluster_defaults(&w.cluster);
	w.cluster.front_timeout_ms = w.cluster.back_timeout_ms = 100;
	udplb_input in = {.kind = UDPLB_IN_CONFIG};
	in.u.config.kind = UDPLB_CFG_SET_CLUSTER;
	in.u.config.cluster = w.cluster;
	input(&w, &in);

	for (int steps = 0; r.n && steps < 4096; steps++) {
		uint8_t op = byte(&r);
		memset(&in, 0, sizeof in);
		switch (op & 7) {
		case 0: {
			uint8_t s = byte(&r), len = byte(&r);
			in.kind = UDPLB_IN_CLIENT;
			in.u.client.src = source(s & 15, s >> 6);
			in.u.client.local = (s & 16) ? local6 : local4;
			in.u.client.payload = payload;
			in.u.client.len = (size_t)len * 8;
			in.u.client.backends = (s & 32) ? NULL : w.view;
			input(&w, &in);
			break;
		}
		case 1: {
			uint8_t pick = byte(&r), len = byte(&r);
			in.kind = UDPLB_IN_BACKEND;
			in.u.backend.flow = w.n_ids ? w.ids[pick % (w.n_ids < 32 ? w.n_ids : 32)] : pick;
			in.u.backend.payload = payload;
			in.u.backend.len = (size_t)len * 8;
			input(&w, &in);
			break;
		}
		case 2: {
			uint16_t lo = byte(&r), hi = byte(&r);
			advance(&w, (uint64_t)(lo | hi << 8));
			break;
		}
		case 3:
			fire(&w);
			break;
		case 4: {
			uint8_t i = byte(&r) % POOL;
			const udplb_backend *b = udplb_backends_at(w.view, i);
			if (b)
				CHECK(udplb_backends_set_health(w.view, i, !b->healthy) == 0);
			break;
		}
		case 5: {
			uint8_t bits = byte(&r), weights = byte(&r);
			udplb_backend list[POOL];
			size_t n = 0;
			for (int i = 0; i < POOL; i++)
				if (bits & (1 << i)) {
					list[n] = w.pool[i];
					list[n].weight = 1 + ((weights >> (2 * i)) & 3);
					list[n].healthy = !(bits & (16 << i));
					n++;
				}
			CHECK(udplb_backends_set(w.view, list, n) == 0);
			break;
		}
		case 6: {
			uint8_t a = byte(&r), b = byte(&r), c = byte(&r);
			udplb_cluster *cl = &w.cluster;
			cl->selection = (udplb_select)(a % 4); /* 3 is refused */
			cl->affinity = (udplb_affinity)((a >> 2) & 1);
			cl->proxy_protocol = (udplb_ppv2_mode)((a >> 3) % 3);
			cl->front_timeout_ms = (uint32_t)(b & 15) * 50; /* 0 is refused */
			cl->back_timeout_ms = (uint32_t)(b >> 4) * 50 + 1;
			cl->responses = c & 3;
			cl->requests = (c >> 2) & 3;
			cl->max_flows_per_ip = (c >> 4) & 3;
			cl->max_flows_per_subnet = (c >> 6) & 3;
			cl->subnet_prefix_v4 = (uint8_t)(a >> 3);
			cl->subnet_prefix_v6 = (uint8_t)(b >> 1);
			in.kind = UDPLB_IN_CONFIG;
			in.u.config.kind = UDPLB_CFG_SET_CLUSTER;
			in.u.config.cluster = *cl;
			input(&w, &in);
			break;
		}
		default: {
			uint8_t a = byte(&r);
			static const udplb_config_kind kinds[] = {
				UDPLB_CFG_SET_MAX_FLOWS, UDPLB_CFG_SET_MAX_RX, UDPLB_CFG_DRAIN,
				UDPLB_CFG_RESUME,        UDPLB_CFG_CLOSE_ALL,  UDPLB_CFG_ABORT_FLOW,
				UDPLB_CFG_CLEAR_CLUSTER, UDPLB_CFG_ABORT_FLOW,
			};
			in.kind = UDPLB_IN_CONFIG;
			in.u.config.kind = kinds[a & 7];
			in.u.config.value = (uint32_t)(a >> 3) * 40;
			in.u.config.flow = w.n_ids ? w.ids[(a >> 3) % (w.n_ids < 32 ? w.n_ids : 32)] : 0;
			input(&w, &in);
			break;
		}
		}
	}

	/* With traffic over, the timer chain alone reaps every flow. */
	for (int round = 0; round < 100000; round++) {
		udplb_stats st;
		udplb_manager_stats(w.m, &st);
		if (!st.flows_live)
			break;
		CHECK(w.armed);
		advance(&w, w.deadline > w.now ? w.deadline - w.now : 0);
	}
	udplb_stats st;
	udplb_manager_stats(w.m, &st);
	CHECK(st.flows_live == 0 && st.flows_created == st.flows_evicted);
	udplb_manager_del(w.m);
	udplb_backends_del(w.view);
	return 0;
}
