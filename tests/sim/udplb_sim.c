/* udplb_sim.c - deterministic simulation of the UDP load-balancer core: seeded random clients, bursts, replies, time jumps, early timer fires, health flips, backend and config changes (a removed backend's flows closed as a reload does), drains, checked against a shadow model after every step. */
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "udplb/manager.h"

/* Usage: udplb_sim [--steps N] [--trace] SEED [COUNT]
 *
 * Runs seeds SEED .. SEED+COUNT-1, each for N steps. Everything a run does
 * comes from a PRNG seeded with the seed (the core reads no clock and no
 * random source), so a failing seed prints itself and fails the same way
 * every time it is run again. The shell this plays is a faithful one: it
 * drains every output, keeps one timer that an ARM_TIMER replaces, fires
 * it when time passes its deadline, and also fires it early at random, as
 * a timer wheel does (seed 001 section 7). */

#define STEPS_DEFAULT 3000
#define SHADOW_MAX 512   /* above the largest max_flows a run picks */
#define SOURCES_MAX 160
#define POOL_MAX 12      /* backend addresses a run draws from */
#define OUT_MAX 2048     /* outputs of one input: CLOSE_ALL of SHADOW_MAX flows fits */
#define PAYLOAD_MAX 70000

/* ---- PRNG: splitmix64 ---- */

static uint64_t rng_state;

static uint64_t rnd(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static uint32_t below(uint32_t n)
{
	return n ? (uint32_t)(rnd() % n) : 0;
}

static bool chance(uint32_t percent)
{
	return below(100) < percent;
}

/* ---- the world ---- */

typedef struct shadow_flow {
	bool live;
	udplb_flow_id id;
	udplb_addr src, local, backend;
	udplb_cluster c;       /* the cluster it was admitted under */
	uint8_t subnet_prefix; /* the prefix its subnet counter was taken at */
	uint64_t deadline;     /* expected idle deadline */
	uint32_t requests, responses;
} shadow_flow;

typedef struct sim {
	uint64_t seed;
	int step, steps;
	bool trace;
	bool probe_busy; /* try an input before draining the next one */
	const char *action;
	udplb_addr closing; /* the backend of the CLOSE_BACKEND being fed */

	udplb_manager *m;
	udplb_backends *view;
	uint32_t maglev_size;
	udplb_backend pool[POOL_MAX];
	size_t pool_n;
	udplb_backend set[POOL_MAX]; /* the view's current list */
	size_t set_n;

	bool has_cluster;
	udplb_cluster cluster;
	bool draining;
	uint32_t max_flows, max_rx;

	udplb_addr sources[SOURCES_MAX];
	size_t n_sources;
	udplb_addr local4, local6;

	uint64_t now;
	bool timer_armed;
	uint64_t timer_deadline;

	shadow_flow flows[SHADOW_MAX];
	uint32_t live;

	udplb_output out[OUT_MAX];
	size_t n_out;

	uint64_t inputs, forwards, replies, drops, closes, fires, early_fires, admits;
	uint64_t drop_by[UDPLB_DROP_COUNT], close_by[UDPLB_CLOSE_COUNT];
} sim;

static uint8_t payload_buf[PAYLOAD_MAX];
static sim *current; /* for the abort handler */
static jmp_buf fail_jmp;
static char fail_text[512];

static void fail(sim *s, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));

static void fail(sim *s, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = snprintf(fail_text, sizeof fail_text, "step %d (%s): ", s->step,
	                 s->action ? s->action : "-");
	if (n > 0 && (size_t)n < sizeof fail_text)
		vsnprintf(fail_text + n, sizeof fail_text - (size_t)n, fmt, ap);
	va_end(ap);
	longjmp(fail_jmp, 1);
}

#define CHECK(s, cond, ...)                                                                        \
	do {                                                                                       \
		if (!(cond))                                                                       \
			fail((s), __VA_ARGS__);                                                    \
	} while (0)

/* The core aborts on a broken invariant in a debug build: say which seed
 * before the process goes. */
static void on_abort(int sig)
{
	char buf[160];
	int n = snprintf(buf, sizeof buf,
	                 "udplb_sim: seed %" PRIu64 " aborted at step %d; reproduce: udplb_sim "
	                 "--steps %d %" PRIu64 "\n",
	                 current ? current->seed : 0, current ? current->step : 0,
	                 current ? current->steps : 0, current ? current->seed : 0);
	if (n > 0)
		(void)!write(2, buf, (size_t)n);
	signal(sig, SIG_DFL);
	raise(sig);
}

static void trace(sim *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void trace(sim *s, const char *fmt, ...)
{
	if (!s->trace)
		return;
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "[%d t=%" PRIu64 "] ", s->step, s->now);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static shadow_flow *shadow_by_id(sim *s, udplb_flow_id id)
{
	for (int i = 0; i < SHADOW_MAX; i++)
		if (s->flows[i].live && s->flows[i].id == id)
			return &s->flows[i];
	return NULL;
}

static shadow_flow *shadow_by_key(sim *s, const udplb_addr *src, const udplb_addr *local)
{
	for (int i = 0; i < SHADOW_MAX; i++)
		if (s->flows[i].live && udplb_addr_equal(&s->flows[i].src, src) &&
		    udplb_addr_equal(&s->flows[i].local, local))
			return &s->flows[i];
	return NULL;
}

static bool same_subnet(const udplb_addr *a, const udplb_addr *b, uint8_t prefix)
{
	if (a->family != b->family)
		return false;
	if (prefix >= 10 && a->scope != b->scope)
		return false; /* a link-local subnet is its link's */
	for (unsigned bit = 0; bit < prefix; bit++)
		if (((a->ip[bit / 8] ^ b->ip[bit / 8]) >> (7 - bit % 8)) & 1)
			return false;
	return true;
}

static uint8_t prefix_for(const udplb_cluster *c, const udplb_addr *a)
{
	return a->family == UDPLB_AF_INET ? c->subnet_prefix_v4 : c->subnet_prefix_v6;
}

static bool bad_source(const udplb_addr *a)
{
	static const uint8_t zero[16];
	if (a->port == 0)
		return true;
	if (a->family == UDPLB_AF_INET)
		return a->ip[0] == 0 || a->ip[0] >= 224;
	if (a->family == UDPLB_AF_INET6)
		return memcmp(a->ip, zero, 16) == 0 || a->ip[0] == 0xff;
	return true;
}

/* ---- driving the core ---- */

static void drain(sim *s)
{
	udplb_output o;
	s->n_out = 0;
	while (udplb_manager_poll(s->m, &o)) {
		CHECK(s, s->n_out < OUT_MAX, "more than %d outputs from one input", OUT_MAX);
		s->out[s->n_out++] = o;
	}
}

static size_t count_kind(const sim *s, udplb_output_kind k)
{
	size_t n = 0;
	for (size_t i = 0; i < s->n_out; i++)
		n += s->out[i].kind == k;
	return n;
}

/* The outputs every input may produce: closes (always evicted then close,
 * of a flow the shadow knows, for a reason the shadow agrees with) and
 * timer arms. Kinds that belong to one input are checked by its caller. */
static void apply_common(sim *s, udplb_input_kind in_kind, udplb_config_kind cfg_kind)
{
	for (size_t i = 0; i < s->n_out; i++) {
		const udplb_output *o = &s->out[i];
		if (o->kind == UDPLB_OUT_ARM_TIMER) {
			/* The shell's arm replaces the last one. */
			s->timer_armed = true;
			s->timer_deadline = o->u.arm.deadline_ms;
			CHECK(s, o->u.arm.deadline_ms > s->now || in_kind != UDPLB_IN_TIMEOUT,
			      "an expiry armed at %" PRIu64 ", not after now", o->u.arm.deadline_ms);
			continue;
		}
		if (o->kind == UDPLB_OUT_METRIC && o->u.metric.kind == UDPLB_METRIC_FLOW_EVICTED) {
			CHECK(s, i + 1 < s->n_out && s->out[i + 1].kind == UDPLB_OUT_CLOSE_FLOW &&
			             s->out[i + 1].flow == o->flow,
			      "FLOW_EVICTED not followed by its CLOSE_FLOW");
			shadow_flow *f = shadow_by_id(s, o->flow);
			CHECK(s, f, "a close of a flow that is not live (closed twice?)");
			switch (o->u.metric.reason) {
			case UDPLB_CLOSE_IDLE:
				CHECK(s, in_kind == UDPLB_IN_TIMEOUT, "an idle close outside an expiry");
				CHECK(s, f->deadline <= s->now,
				      "idle close at %" PRIu64 " of a flow due at %" PRIu64, s->now,
				      f->deadline);
				break;
			case UDPLB_CLOSE_RESPONSES:
				CHECK(s, f->c.responses && f->responses == f->c.responses,
				      "responses close at %u of cap %u", f->responses, f->c.responses);
				break;
			case UDPLB_CLOSE_REQUESTS:
				CHECK(s, f->c.requests && f->requests == f->c.requests,
				      "requests close at %u of cap %u", f->requests, f->c.requests);
				break;
			case UDPLB_CLOSE_ALL:
				CHECK(s, in_kind == UDPLB_IN_CONFIG && cfg_kind == UDPLB_CFG_CLOSE_ALL,
				      "a close-all reason outside CLOSE_ALL");
				break;
			case UDPLB_CLOSE_ABORT:
				CHECK(s, in_kind == UDPLB_IN_CONFIG && cfg_kind == UDPLB_CFG_ABORT_FLOW,
				      "an abort reason outside ABORT_FLOW");
				break;
			case UDPLB_CLOSE_REMOVED:
				CHECK(s, in_kind == UDPLB_IN_CONFIG && cfg_kind == UDPLB_CFG_CLOSE_BACKEND,
				      "a removed reason outside CLOSE_BACKEND");
				CHECK(s, udplb_addr_equal(&f->backend, &s->closing),
				      "CLOSE_BACKEND closed a flow of another backend");
				break;
			default:
				fail(s, "unknown close reason %d", (int)o->u.metric.reason);
			}
			CHECK(s, o->u.metric.requests == f->requests &&
			             o->u.metric.responses == f->responses,
			      "evicted counts %u/%u, shadow %u/%u", o->u.metric.requests,
			      o->u.metric.responses, f->requests, f->responses);
			f->live = false;
			s->live--;
			s->closes++;
			s->close_by[o->u.metric.reason]++;
			i++; /* the CLOSE_FLOW */
			continue;
		}
		if (o->kind == UDPLB_OUT_CLOSE_FLOW)
			fail(s, "CLOSE_FLOW without FLOW_EVICTED before it");
	}
}

/* After every step: the core's own invariants, the shadow's count, and the
 * lost-wakeup property: with flows live, the shell holds a timer no later
 * than the earliest flow's deadline. */
static void check_world(sim *s)
{
	const char *err = udplb_manager_check(s->m, UDPLB_CHECK_FULL);
	CHECK(s, !err, "core invariant: %s", err);
	udplb_stats st;
	udplb_manager_stats(s->m, &st);
	CHECK(s, st.flows_live == s->live, "core has %u flows, shadow %u", st.flows_live, s->live);
	uint64_t min = UINT64_MAX;
	for (int i = 0; i < SHADOW_MAX; i++) {
		const shadow_flow *f = &s->flows[i];
		if (!f->live)
			continue;
		udplb_flow_info fi;
		CHECK(s, udplb_manager_flow_info(s->m, f->id, &fi), "a shadow flow is unknown to the core");
		CHECK(s, fi.deadline_ms == f->deadline, "deadline %" PRIu64 ", shadow %" PRIu64,
		      fi.deadline_ms, f->deadline);
		CHECK(s, fi.requests == f->requests && fi.responses == f->responses,
		      "counts %u/%u, shadow %u/%u", fi.requests, fi.responses, f->requests,
		      f->responses);
		CHECK(s, udplb_addr_equal(&fi.backend, &f->backend), "a flow changed backend");
		if (f->deadline < min)
			min = f->deadline;
	}
	if (s->live)
		CHECK(s, s->timer_armed && s->timer_deadline <= min,
		      "lost wakeup: timer %s at %" PRIu64 ", earliest flow due at %" PRIu64,
		      s->timer_armed ? "armed" : "not armed", s->timer_deadline, min);
}

static void feed(sim *s, const udplb_input *in, int want_rc)
{
	s->inputs++;
	int rc = udplb_manager_input(s->m, in, s->now);
	CHECK(s, rc == want_rc, "input returned %d (%s), expected %d", rc, udplb_strerror(rc),
	      want_rc);
	if (s->probe_busy) {
		udplb_input t = {.kind = UDPLB_IN_TIMEOUT};
		rc = udplb_manager_input(s->m, &t, s->now + 1000000);
		CHECK(s, rc == UDPLB_E_BUSY, "an input with outputs pending returned %d", rc);
	}
	drain(s);
}

/* The outcome the seed's admission order predicts for a client datagram. */
typedef enum expect { EXPECT_FORWARD, EXPECT_ADMIT, EXPECT_DROP } expect;

static expect predict(sim *s, const udplb_addr *src, const udplb_addr *local, size_t len,
                      bool with_view, udplb_drop_reason *why)
{
	if (len > s->max_rx)
		return *why = UDPLB_DROP_TRUNCATED, EXPECT_DROP;
	if (!s->has_cluster)
		return *why = UDPLB_DROP_NO_BACKEND, EXPECT_DROP;
	if (len == 0 || bad_source(src))
		return *why = UDPLB_DROP_INVALID, EXPECT_DROP;
	if (shadow_by_key(s, src, local))
		return EXPECT_FORWARD;
	if (s->draining)
		return *why = UDPLB_DROP_SHED_DRAINING, EXPECT_DROP;
	uint32_t same_ip = 0, same_net = 0;
	uint8_t prefix = prefix_for(&s->cluster, src);
	for (int i = 0; i < SHADOW_MAX; i++) {
		const shadow_flow *f = &s->flows[i];
		if (!f->live)
			continue;
		same_ip += udplb_addr_same_ip(&f->src, src);
		same_net += f->src.family == src->family && f->subnet_prefix == prefix &&
		            same_subnet(&f->src, src, prefix);
	}
	if (s->cluster.max_flows_per_ip && same_ip >= s->cluster.max_flows_per_ip)
		return *why = UDPLB_DROP_SHED_PER_IP, EXPECT_DROP;
	if (s->cluster.max_flows_per_subnet && same_net >= s->cluster.max_flows_per_subnet)
		return *why = UDPLB_DROP_SHED_PER_SUBNET, EXPECT_DROP;
	if (s->live >= s->max_flows)
		return *why = UDPLB_DROP_SHED_MAX_FLOWS, EXPECT_DROP;
	if (!with_view || s->set_n == 0)
		return *why = UDPLB_DROP_NO_BACKEND, EXPECT_DROP;
	return EXPECT_ADMIT;
}

static void check_send(sim *s, const udplb_output *o, shadow_flow *f, const uint8_t *payload,
                       size_t len)
{
	CHECK(s, o->u.to_backend.payload == payload && o->u.to_backend.len == len,
	      "SEND_TO_BACKEND carries another payload");
	bool want_prefix = f->c.proxy_protocol == UDPLB_PPV2_EVERY ||
	                   (f->c.proxy_protocol == UDPLB_PPV2_FIRST && f->requests == 0);
	if (!want_prefix) {
		CHECK(s, o->u.to_backend.prefix_len == 0, "an unexpected PROXY header");
		return;
	}
	uint8_t hdr[UDPLB_PPV2_MAX];
	size_t n = udplb_ppv2_build(hdr, &f->src, &f->local);
	CHECK(s, o->u.to_backend.prefix_len == n && memcmp(o->u.to_backend.prefix, hdr, n) == 0,
	      "a wrong or missing PROXY header (%zu bytes, want %zu)", o->u.to_backend.prefix_len,
	      n);
}

static void touch(shadow_flow *f, uint64_t now, uint32_t timeout)
{
	if (now + timeout > f->deadline)
		f->deadline = now + timeout;
}

static void client_datagram(sim *s, const udplb_addr *src, const udplb_addr *local, size_t len,
                            bool with_view)
{
	const uint8_t *payload = payload_buf + below(PAYLOAD_MAX - (uint32_t)len);
	udplb_drop_reason why = UDPLB_DROP_COUNT;
	expect e = predict(s, src, local, len, with_view, &why);
	udplb_input in = {.kind = UDPLB_IN_CLIENT};
	in.u.client.src = *src;
	in.u.client.local = *local;
	in.u.client.payload = payload;
	in.u.client.len = len;
	in.u.client.backends = with_view ? s->view : NULL;
	feed(s, &in, 0);

	size_t sends = count_kind(s, UDPLB_OUT_SEND_TO_BACKEND), drops = count_kind(s, UDPLB_OUT_DROP);
	size_t opens = count_kind(s, UDPLB_OUT_OPEN_UPSTREAM);
	if (e == EXPECT_DROP) {
		CHECK(s, drops == 1 && sends == 0 && opens == 0 && s->n_out == 1,
		      "expected only a drop (%s), got %zu outputs", udplb_drop_name(why), s->n_out);
		CHECK(s, s->out[0].u.drop.reason == why && s->out[0].u.drop.len == len,
		      "dropped as %s, expected %s", udplb_drop_name(s->out[0].u.drop.reason),
		      udplb_drop_name(why));
		s->drops++;
		s->drop_by[why]++;
		return;
	}
	/* Forwarded, and counted, exactly once. */
	CHECK(s, sends == 1 && drops == 0, "a datagram forwarded %zu times, dropped %zu", sends, drops);
	CHECK(s, opens == (e == EXPECT_ADMIT), "expected %d opens, got %zu", e == EXPECT_ADMIT, opens);
	shadow_flow *f = NULL;
	size_t i = 0;
	if (e == EXPECT_ADMIT) {
		CHECK(s, s->out[0].kind == UDPLB_OUT_METRIC &&
		             s->out[0].u.metric.kind == UDPLB_METRIC_FLOW_CREATED &&
		             s->out[1].kind == UDPLB_OUT_OPEN_UPSTREAM && s->out[1].flow == s->out[0].flow,
		      "admission is not FLOW_CREATED then OPEN_UPSTREAM");
		const udplb_output *o = &s->out[1];
		CHECK(s, shadow_by_id(s, o->flow) == NULL, "a new flow reuses a live id");
		CHECK(s, udplb_addr_equal(&o->u.open.client, src) &&
		             udplb_addr_equal(&o->u.open.local, local),
		      "OPEN_UPSTREAM names another client");
		int idx = udplb_backends_find(s->view, &o->u.open.backend);
		CHECK(s, idx >= 0, "a flow opened to a backend outside the view");
		if (udplb_backends_healthy_count(s->view) > 0)
			CHECK(s, udplb_backends_at(s->view, (size_t)idx)->healthy,
			      "a new flow went to an unhealthy backend while a healthy one exists");
		for (int k = 0; k < SHADOW_MAX && !f; k++)
			if (!s->flows[k].live)
				f = &s->flows[k];
		CHECK(s, f, "shadow full");
		memset(f, 0, sizeof *f);
		f->live = true;
		f->id = o->flow;
		f->src = *src;
		f->local = *local;
		f->backend = o->u.open.backend;
		f->c = s->cluster;
		f->subnet_prefix = prefix_for(&s->cluster, src);
		f->deadline = s->now + s->cluster.front_timeout_ms;
		s->live++;
		s->admits++;
		i = 2;
	} else {
		f = shadow_by_key(s, src, local);
	}
	CHECK(s, s->out[i].kind == UDPLB_OUT_SEND_TO_BACKEND && s->out[i].flow == f->id,
	      "the datagram went to another flow");
	check_send(s, &s->out[i], f, payload, len);
	touch(f, s->now, f->c.front_timeout_ms);
	f->requests++;
	s->forwards++;
	apply_common(s, UDPLB_IN_CLIENT, 0);
	trace(s, "client %s len %zu -> %s", e == EXPECT_ADMIT ? "admit" : "forward", len,
	      f->live ? "live" : "closed");
}

static void backend_datagram(sim *s, shadow_flow *f, udplb_flow_id stale_id)
{
	size_t len = 1 + below(s->max_rx + 20);
	const uint8_t *payload = payload_buf + below(PAYLOAD_MAX - (uint32_t)len);
	udplb_input in = {.kind = UDPLB_IN_BACKEND};
	in.u.backend.flow = f ? f->id : stale_id;
	in.u.backend.payload = payload;
	in.u.backend.len = len;
	feed(s, &in, 0);
	if (len > s->max_rx || !f) {
		udplb_drop_reason why = len > s->max_rx ? UDPLB_DROP_TRUNCATED : UDPLB_DROP_UNKNOWN_FLOW;
		CHECK(s, s->n_out == 1 && s->out[0].kind == UDPLB_OUT_DROP &&
		             s->out[0].u.drop.reason == why,
		      "a backend datagram not dropped as %s", udplb_drop_name(why));
		s->drops++;
		s->drop_by[why]++;
		return;
	}
	const udplb_output *o = &s->out[0];
	CHECK(s, o->kind == UDPLB_OUT_SEND_TO_CLIENT && o->flow == f->id &&
	             udplb_addr_equal(&o->u.to_client.client, &f->src) &&
	             udplb_addr_equal(&o->u.to_client.local, &f->local) &&
	             o->u.to_client.payload == payload && o->u.to_client.len == len,
	      "a reply not sent back to its client");
	touch(f, s->now, f->c.back_timeout_ms);
	f->responses++;
	s->replies++;
	apply_common(s, UDPLB_IN_BACKEND, 0);
}

static void fire(sim *s)
{
	udplb_input in = {.kind = UDPLB_IN_TIMEOUT};
	if (s->timer_armed && s->now < s->timer_deadline)
		s->early_fires++;
	s->timer_armed = false; /* the shell's timer is spent */
	s->fires++;
	feed(s, &in, 0);
	for (size_t i = 0; i < s->n_out; i++)
		CHECK(s, s->out[i].kind == UDPLB_OUT_ARM_TIMER || s->out[i].kind == UDPLB_OUT_METRIC ||
		             s->out[i].kind == UDPLB_OUT_CLOSE_FLOW,
		      "an expiry emitted output kind %d", (int)s->out[i].kind);
	apply_common(s, UDPLB_IN_TIMEOUT, 0);
	/* Nothing due survives a completed expiry. */
	for (int i = 0; i < SHADOW_MAX; i++)
		CHECK(s, !s->flows[i].live || s->flows[i].deadline > s->now,
		      "a flow due at %" PRIu64 " survived the expiry at %" PRIu64, s->flows[i].deadline,
		      s->now);
	trace(s, "fire: %zu closes", count_kind(s, UDPLB_OUT_CLOSE_FLOW));
}

/* Time moves on; the shell delivers its timer when due. */
static void advance(sim *s, uint64_t dt)
{
	uint64_t end = s->now + dt;
	while (s->timer_armed && s->timer_deadline <= end) {
		if (s->timer_deadline > s->now)
			s->now = s->timer_deadline;
		fire(s);
		check_world(s);
	}
	s->now = end;
}

static void config(sim *s, udplb_config_kind kind, uint32_t value, udplb_flow_id flow,
                   int want_rc)
{
	udplb_input in = {.kind = UDPLB_IN_CONFIG};
	in.u.config.kind = kind;
	in.u.config.value = value;
	in.u.config.flow = flow;
	in.u.config.cluster = s->cluster;
	feed(s, &in, want_rc);
	apply_common(s, UDPLB_IN_CONFIG, kind);
}

/* What a reload does to the flows of a backend it removed: CLOSE_BACKEND
 * closes each of them once, and nothing else. */
static void close_backend(sim *s, const udplb_addr *backend)
{
	uint32_t on_it = 0;
	for (int i = 0; i < SHADOW_MAX; i++)
		on_it += s->flows[i].live && udplb_addr_equal(&s->flows[i].backend, backend);
	uint32_t before = s->live;
	s->closing = *backend;
	udplb_input in = {.kind = UDPLB_IN_CONFIG};
	in.u.config.kind = UDPLB_CFG_CLOSE_BACKEND;
	in.u.config.backend = *backend;
	feed(s, &in, 0);
	apply_common(s, UDPLB_IN_CONFIG, UDPLB_CFG_CLOSE_BACKEND);
	CHECK(s, s->live == before - on_it && count_kind(s, UDPLB_OUT_CLOSE_FLOW) == on_it,
	      "CLOSE_BACKEND closed %zu of %u flows", count_kind(s, UDPLB_OUT_CLOSE_FLOW), on_it);
}

static void random_cluster(sim *s, udplb_cluster *c)
{
	udplb_cluster_defaults(c);
	c->selection = (udplb_select)below(UDPLB_SELECT_COUNT);
	c->affinity = (udplb_affinity)below(2);
	c->front_timeout_ms = 20 + below(3000);
	c->back_timeout_ms = chance(50) ? c->front_timeout_ms : 20 + below(3000);
	c->responses = chance(60) ? 0 : 1 + below(4);
	c->requests = chance(70) ? 0 : 1 + below(8);
	c->max_flows_per_ip = chance(60) ? 0 : 1 + below(4);
	c->max_flows_per_subnet = chance(60) ? 0 : 1 + below(10);
	c->subnet_prefix_v4 = (uint8_t)(chance(50) ? 24 : below(33));
	c->subnet_prefix_v6 = (uint8_t)(chance(50) ? 64 : below(129));
	c->proxy_protocol = (udplb_ppv2_mode)below(3);
	(void)s;
}

static void set_backends(sim *s)
{
	/* A random subset of the pool, random weights, random health. */
	udplb_backend list[POOL_MAX];
	size_t n = 0;
	for (size_t i = 0; i < s->pool_n; i++) {
		if (!chance(60))
			continue;
		list[n] = s->pool[i];
		list[n].weight = chance(70) ? 1 : 1 + below(5);
		list[n].healthy = chance(80);
		n++;
	}
	if (n > s->maglev_size)
		n = s->maglev_size;
	int rc = udplb_backends_set(s->view, list, n);
	CHECK(s, rc == 0, "backends_set: %s", udplb_strerror(rc));
	memcpy(s->set, list, sizeof list[0] * n);
	s->set_n = n;
}

static void make_sources(sim *s)
{
	s->n_sources = 0;
	uint32_t ips = 2 + below(40);
	for (uint32_t i = 0; i < ips; i++) {
		udplb_addr ip;
		if (chance(70)) {
			/* v4 in a few subnets of 10.0.0.0/8 */
			udplb_addr_set4(&ip, (const uint8_t[]){10, (uint8_t)below(3), (uint8_t)below(4),
			                                       (uint8_t)(1 + below(250))},
			                0);
		} else if (chance(80)) {
			uint8_t v6[16] = {0x20, 0x01, 0x0d, 0xb8, 0, (uint8_t)below(3)};
			v6[7] = (uint8_t)below(4);
			v6[15] = (uint8_t)(1 + below(250));
			udplb_addr_set6(&ip, v6, 0);
		} else {
			/* link-local, on one of two links: fe80::x on each is
			 * another host */
			uint8_t v6[16] = {0xfe, 0x80, [15] = (uint8_t)(1 + below(4))};
			udplb_addr_set6(&ip, v6, 0);
			ip.scope = 1 + below(2);
		}
		uint32_t ports = 1 + below(4);
		for (uint32_t p = 0; p < ports && s->n_sources < SOURCES_MAX - 4; p++) {
			ip.port = (uint16_t)(1024 + below(60000));
			s->sources[s->n_sources++] = ip;
		}
	}
	/* A few sources that cannot be flows. */
	udplb_addr bad;
	udplb_addr_set4(&bad, (const uint8_t[]){10, 0, 0, 1}, 0);
	s->sources[s->n_sources++] = bad;
	udplb_addr_set4(&bad, (const uint8_t[]){0, 0, 0, 0}, 53);
	s->sources[s->n_sources++] = bad;
	udplb_addr_set4(&bad, (const uint8_t[]){239, 1, 1, 1}, 53);
	s->sources[s->n_sources++] = bad;
}

static shadow_flow *random_flow(sim *s)
{
	if (!s->live)
		return NULL;
	uint32_t k = below(s->live);
	for (int i = 0; i < SHADOW_MAX; i++)
		if (s->flows[i].live && k-- == 0)
			return &s->flows[i];
	return NULL;
}

static void step(sim *s)
{
	/* Drains and cluster removals end soon, so most steps admit. */
	if (s->draining && chance(3)) {
		s->action = "resume";
		s->draining = false;
		config(s, UDPLB_CFG_RESUME, 0, 0, 0);
	}
	if (!s->has_cluster && chance(3)) {
		s->action = "cluster back";
		s->has_cluster = true;
		config(s, UDPLB_CFG_SET_CLUSTER, 0, 0, 0);
	}
	if (s->set_n == 0 && chance(3))
		set_backends(s);
	uint32_t r = below(1000);
	if (r < 380) {
		s->action = "client burst";
		const udplb_addr *src = &s->sources[below((uint32_t)s->n_sources)];
		const udplb_addr *local = src->family == UDPLB_AF_INET6 ? &s->local6 : &s->local4;
		if (chance(3))
			local = local == &s->local4 ? &s->local6 : &s->local4;
		uint32_t burst = 1 + (chance(30) ? below(6) : 0);
		for (uint32_t i = 0; i < burst; i++) {
			size_t len = chance(3) ? 0 : chance(3) ? s->max_rx + 1 + below(100) : 1 + below(200);
			if (len > s->max_rx && len < s->max_rx + 1)
				len = s->max_rx + 1;
			client_datagram(s, src, local, len, !chance(1));
			check_world(s);
		}
	} else if (r < 600) {
		s->action = "backend replies";
		shadow_flow *f = random_flow(s);
		if (!f) {
			backend_datagram(s, NULL, ((udplb_flow_id)1 << 32) | below(8));
			return;
		}
		udplb_flow_id id = f->id;
		uint32_t n = 1 + below(3);
		for (uint32_t i = 0; i < n; i++) {
			/* Later replies may find the flow closed by its responses cap. */
			backend_datagram(s, shadow_by_id(s, id), id);
			check_world(s);
		}
	} else if (r < 760) {
		s->action = "time passes";
		advance(s, chance(90) ? 1 + below(200) : 500 + below(6000));
	} else if (r < 800) {
		s->action = "early fire";
		/* A wheel tick delivers the timer up to a tick before its deadline,
		 * or a spurious wakeup delivers it with nothing armed. */
		if (s->timer_armed && s->timer_deadline > s->now) {
			uint64_t early = 1 + below(99);
			if (s->timer_deadline - s->now > early)
				advance(s, s->timer_deadline - early - s->now);
			fire(s);
		} else if (chance(30)) {
			fire(s);
		}
	} else if (r < 840) {
		s->action = "health flip";
		if (s->set_n) {
			size_t i = below((uint32_t)s->set_n);
			s->set[i].healthy = !s->set[i].healthy;
			int rc = udplb_backends_set_health(s->view, i, s->set[i].healthy);
			CHECK(s, rc == 0, "set_health: %s", udplb_strerror(rc));
		}
	} else if (r < 860) {
		s->action = "backend set change";
		uint64_t builds = udplb_backends_maglev_builds(s->view);
		udplb_backend was[POOL_MAX];
		size_t was_n = s->set_n;
		memcpy(was, s->set, sizeof was[0] * was_n);
		set_backends(s);
		CHECK(s, udplb_backends_maglev_builds(s->view) <= builds + 1, "more than one rebuild");
		/* most of the time as a reload does it: the flows of the
		 * backends that left close, the others keep theirs */
		bool reload = chance(70);
		for (size_t i = 0; reload && i < was_n; i++) {
			bool stays = false;
			for (size_t j = 0; j < s->set_n; j++)
				stays |= udplb_addr_equal(&was[i].addr, &s->set[j].addr);
			if (!stays)
				close_backend(s, &was[i].addr);
		}
	} else if (r < 900) {
		s->action = "cluster change";
		udplb_cluster c;
		random_cluster(s, &c);
		s->cluster = c;
		s->has_cluster = true;
		config(s, UDPLB_CFG_SET_CLUSTER, 0, 0, 0);
	} else if (r < 910) {
		s->action = "bad cluster";
		udplb_cluster keep = s->cluster;
		s->cluster.front_timeout_ms = 0;
		config(s, UDPLB_CFG_SET_CLUSTER, 0, 0, UDPLB_E_TIMEOUT);
		s->cluster = keep;
	} else if (r < 925) {
		s->action = "max_flows change";
		s->max_flows = 1 + below(SHADOW_MAX - 12);
		config(s, UDPLB_CFG_SET_MAX_FLOWS, s->max_flows, 0, 0);
	} else if (r < 935) {
		s->action = "max_rx change";
		s->max_rx = 16 + below(2000);
		config(s, UDPLB_CFG_SET_MAX_RX, s->max_rx, 0, 0);
	} else if (r < 955) {
		s->action = s->draining ? "resume" : "drain";
		s->draining = !s->draining;
		config(s, s->draining ? UDPLB_CFG_DRAIN : UDPLB_CFG_RESUME, 0, 0, 0);
	} else if (r < 975) {
		s->action = "abort flow";
		shadow_flow *f = random_flow(s);
		udplb_flow_id id = f ? f->id : ((udplb_flow_id)7 << 32 | below(4));
		config(s, UDPLB_CFG_ABORT_FLOW, 0, id, 0);
		if (f)
			CHECK(s, !f->live, "ABORT_FLOW left the flow live");
		if (f) { /* again: a no-op */
			config(s, UDPLB_CFG_ABORT_FLOW, 0, id, 0);
			CHECK(s, s->n_out == 0, "a second abort emitted");
		}
	} else if (r < 980) {
		s->action = "close all";
		uint32_t before = s->live;
		config(s, UDPLB_CFG_CLOSE_ALL, 0, 0, 0);
		CHECK(s, s->live == 0 && count_kind(s, UDPLB_OUT_CLOSE_FLOW) == before,
		      "CLOSE_ALL left %u flows", s->live);
	} else if (r < 990) {
		s->action = "clear cluster";
		s->has_cluster = !s->has_cluster;
		config(s, s->has_cluster ? UDPLB_CFG_SET_CLUSTER : UDPLB_CFG_CLEAR_CLUSTER, 0, 0, 0);
	} else {
		s->action = "input while busy";
		/* The next client datagram always queues an output; a timer input
		 * before that is polled is refused and changes nothing. */
		s->probe_busy = true;
		const udplb_addr *src = &s->sources[below((uint32_t)s->n_sources)];
		client_datagram(s, src, src->family == UDPLB_AF_INET6 ? &s->local6 : &s->local4,
		                1 + below(100), true);
		s->probe_busy = false;
	}
	check_world(s);
}

static void run_seed(sim *s)
{
	rng_state = s->seed;
	for (size_t i = 0; i < PAYLOAD_MAX; i++)
		payload_buf[i] = (uint8_t)rnd();

	udplb_manager_config cfg = {
		.max_flows = s->max_flows = 1 + below(chance(30) ? 8 : 300),
		.max_rx_datagram_size = s->max_rx = 32 + below(1500),
		.seed = {rnd(), rnd()},
		.checks = UDPLB_CHECK_FULL,
	};
	static const uint32_t sizes[] = {13, 101, 251, 1009};
	s->maglev_size = chance(2) ? 65537 : sizes[below(4)];
	int rc = udplb_manager_new(&s->m, &cfg);
	CHECK(s, rc == 0, "manager_new: %s", udplb_strerror(rc));
	rc = udplb_backends_new(&s->view, s->maglev_size);
	CHECK(s, rc == 0, "backends_new: %s", udplb_strerror(rc));

	s->pool_n = 1 + below(POOL_MAX);
	for (size_t i = 0; i < s->pool_n; i++) {
		memset(&s->pool[i], 0, sizeof s->pool[i]);
		udplb_addr_set4(&s->pool[i].addr, (const uint8_t[]){10, 99, 0, (uint8_t)(i + 1)},
		                (uint16_t)(9000 + below(3)));
		s->pool[i].weight = 1;
		s->pool[i].healthy = true;
	}
	set_backends(s);
	make_sources(s);
	udplb_addr_set4(&s->local4, (const uint8_t[]){198, 51, 100, 7}, 53);
	uint8_t l6[16] = {0x20, 0x01, 0x0d, 0xb8, [14] = 0, [15] = 0x53};
	udplb_addr_set6(&s->local6, l6, 53);
	s->now = rnd() % 1000000;

	random_cluster(s, &s->cluster);
	s->has_cluster = true;
	s->action = "initial cluster";
	config(s, UDPLB_CFG_SET_CLUSTER, 0, 0, 0);

	for (s->step = 0; s->step < s->steps; s->step++)
		step(s);

	/* Liveness: with no more traffic, the timer chain alone reaps every
	 * flow. Nothing but the shell's own timer fires from here. */
	s->action = "final reap";
	config(s, UDPLB_CFG_RESUME, 0, 0, 0);
	for (int round = 0; s->live && round < 100000; round++) {
		CHECK(s, s->timer_armed, "flows live and no timer armed: a flow would never be reaped");
		advance(s, s->timer_deadline - s->now);
	}
	CHECK(s, s->live == 0, "%u flows outlived the final reap", s->live);
	udplb_stats st;
	udplb_manager_stats(s->m, &st);
	CHECK(s, st.flows_created == st.flows_evicted, "created %" PRIu64 " != evicted %" PRIu64,
	      st.flows_created, st.flows_evicted);
}

/* Runs one seed; false when it failed (fail() jumps back here). Nothing
 * local changes between setjmp and longjmp. */
static bool run_guarded(sim *s)
{
	if (setjmp(fail_jmp))
		return false;
	run_seed(s);
	return true;
}

static void usage(void)
{
	fprintf(stderr, "usage: udplb_sim [--steps N] [--trace] SEED [COUNT]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	int steps = STEPS_DEFAULT;
	bool trace_on = false;
	int i = 1;
	for (; i < argc && argv[i][0] == '-'; i++) {
		if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
			steps = atoi(argv[++i]);
		else if (strcmp(argv[i], "--trace") == 0)
			trace_on = true;
		else
			usage();
	}
	if (i >= argc || steps <= 0)
		usage();
	uint64_t first = strtoull(argv[i], NULL, 10);
	uint64_t count = i + 1 < argc ? strtoull(argv[i + 1], NULL, 10) : 1;
	signal(SIGABRT, on_abort);

	uint64_t failed = 0, inputs = 0, closes = 0, fires = 0, early = 0, admits = 0;
	uint64_t drop_by[UDPLB_DROP_COUNT] = {0}, close_by[UDPLB_CLOSE_COUNT] = {0};
	static sim s;
	for (uint64_t seed = first; seed < first + count; seed++) {
		memset(&s, 0, sizeof s);
		s.seed = seed;
		s.steps = steps;
		s.trace = trace_on;
		current = &s;
		if (!run_guarded(&s)) {
			failed++;
			fprintf(stderr, "udplb_sim: seed %" PRIu64 " FAILED: %s\n", seed, fail_text);
			fprintf(stderr, "  reproduce: udplb_sim --steps %d %" PRIu64 "\n", steps, seed);
		}
		inputs += s.inputs;
		closes += s.closes;
		fires += s.fires;
		early += s.early_fires;
		admits += s.admits;
		for (int r = 0; r < UDPLB_DROP_COUNT; r++)
			drop_by[r] += s.drop_by[r];
		for (int r = 0; r < UDPLB_CLOSE_COUNT; r++)
			close_by[r] += s.close_by[r];
		udplb_manager_del(s.m);
		udplb_backends_del(s.view);
		current = NULL;
	}
	printf("udplb_sim: %" PRIu64 " seeds from %" PRIu64 ", %d steps each: %" PRIu64
	       " inputs, %" PRIu64 " flows admitted, %" PRIu64 " closed, %" PRIu64
	       " timer fires (%" PRIu64 " early), %" PRIu64 " failed\n",
	       count, first, steps, inputs, admits, closes, fires, early, failed);
	printf("  drops:");
	for (int r = 0; r < UDPLB_DROP_COUNT; r++)
		printf(" %s %" PRIu64, udplb_drop_name((udplb_drop_reason)r), drop_by[r]);
	printf("\n  closes:");
	for (int r = 0; r < UDPLB_CLOSE_COUNT; r++)
		printf(" %s %" PRIu64, udplb_close_name((udplb_close_reason)r), close_by[r]);
	printf("\n");
	return failed ? 1 : 0;
}
