/* manager.c - the UDP load balancer core: admission, forwarding, teardown, the idle timer and the output queue. */
#include "udplb/manager.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "udplb/flowtab.h"

/* Work that closes many flows (an expiry, CLOSE_ALL) runs in rounds that
 * fill the queue and continue from udplb_manager_poll. */
typedef enum bulk_work {
	WORK_NONE,
	WORK_EXPIRE,
	WORK_CLOSE_ALL,
	WORK_CLOSE_BACKEND,
} bulk_work;

/* A close takes two outputs (evicted, close); a round stops while one more
 * fits after it, for the ARM_TIMER that ends an expiry. */
#define CLOSE_ROOM 3

struct udplb_manager {
	udplb_flowtab ft;
	udplb_seed seed;
	uint32_t max_flows;
	uint32_t max_rx;
	udplb_check_level checks;

	bool has_cluster;
	udplb_cluster cluster;
	bool draining;
	uint64_t rr_turn; /* round-robin turns taken */

	uint64_t now;   /* the latest now seen: time never runs back in here */
	bool armed;     /* the shell holds a timer at armed_deadline */
	uint64_t armed_deadline;
	bool expired;   /* an expiry has completed, at expired_at */
	uint64_t expired_at;

	bulk_work work;
	uint64_t work_now;     /* WORK_EXPIRE: the expiry's now */
	uint32_t work_cursor;  /* WORK_CLOSE_ALL, _BACKEND: the next slot to look at */
	udplb_addr work_backend; /* WORK_CLOSE_BACKEND: whose flows close */

	uint64_t created, evicted;

	udplb_output queue[UDPLB_OUTPUT_MAX];
	uint32_t q_head, q_len;
};

/* ---- cluster ---- */

void udplb_cluster_defaults(udplb_cluster *c)
{
	memset(c, 0, sizeof *c);
	c->selection = UDPLB_SELECT_HRW;
	c->affinity = UDPLB_AFFINITY_SOURCE_IP;
	c->front_timeout_ms = UDPLB_IDLE_TIMEOUT_DEFAULT_MS;
	c->back_timeout_ms = UDPLB_IDLE_TIMEOUT_DEFAULT_MS;
	c->subnet_prefix_v4 = UDPLB_SUBNET_PREFIX_V4_DEFAULT;
	c->subnet_prefix_v6 = UDPLB_SUBNET_PREFIX_V6_DEFAULT;
	c->proxy_protocol = UDPLB_PPV2_NONE;
}

int udplb_cluster_validate(const udplb_cluster *c)
{
	if ((unsigned)c->selection >= UDPLB_SELECT_COUNT)
		return UDPLB_E_SELECTION;
	if ((unsigned)c->affinity > UDPLB_AFFINITY_SOURCE_IP_PORT)
		return UDPLB_E_AFFINITY;
	if ((unsigned)c->proxy_protocol > UDPLB_PPV2_EVERY)
		return UDPLB_E_PPV2;
	if (c->front_timeout_ms < 1 || c->front_timeout_ms > UDPLB_TIMEOUT_MAX_MS ||
	    c->back_timeout_ms < 1 || c->back_timeout_ms > UDPLB_TIMEOUT_MAX_MS)
		return UDPLB_E_TIMEOUT;
	if (c->subnet_prefix_v4 > 32 || c->subnet_prefix_v6 > 128)
		return UDPLB_E_PREFIX;
	return UDPLB_OK;
}

/* ---- life ---- */

static int check_max_flows(uint32_t v)
{
	return v >= 1 && v <= UDPLB_MAX_FLOWS_LIMIT ? UDPLB_OK : UDPLB_E_MAX_FLOWS;
}

static int check_max_rx(uint32_t v)
{
	return v >= 1 && v <= UDPLB_DATAGRAM_MAX ? UDPLB_OK : UDPLB_E_MAX_RX;
}

int udplb_manager_new(udplb_manager **out, const udplb_manager_config *cfg)
{
	int rc = check_max_flows(cfg->max_flows);
	if (!rc)
		rc = check_max_rx(cfg->max_rx_datagram_size);
	if (rc)
		return rc;
	udplb_manager *m = calloc(1, sizeof *m);
	if (!m)
		return UDPLB_E_NOMEM;
	m->seed = cfg->seed;
	m->max_flows = cfg->max_flows;
	m->max_rx = cfg->max_rx_datagram_size;
	m->checks = cfg->checks;
	udplb_flowtab_init(&m->ft, &cfg->seed);
	*out = m;
	return UDPLB_OK;
}

void udplb_manager_del(udplb_manager *m)
{
	if (!m)
		return;
	udplb_flowtab_free(&m->ft);
	free(m);
}

/* ---- output queue ---- */

static uint32_t room(const udplb_manager *m)
{
	return UDPLB_OUTPUT_MAX - m->q_len;
}

/* A zeroed output at the queue's tail. Callers check room first (the
 * per-input bound, or CLOSE_ROOM in bulk rounds). */
static udplb_output *emit(udplb_manager *m, udplb_output_kind kind, udplb_flow_id flow)
{
	if (m->q_len == UDPLB_OUTPUT_MAX)
		abort(); /* not reached: a bound above is wrong, and overwriting would lose a close */
	udplb_output *o = &m->queue[(m->q_head + m->q_len++) % UDPLB_OUTPUT_MAX];
	memset(o, 0, sizeof *o);
	o->kind = kind;
	o->flow = flow;
	return o;
}

static void emit_drop(udplb_manager *m, udplb_drop_reason reason, size_t len)
{
	udplb_output *o = emit(m, UDPLB_OUT_DROP, UDPLB_FLOW_NONE);
	o->u.drop.reason = reason;
	o->u.drop.len = len;
}

/* ---- flows ---- */

static udplb_flow_id flow_id(const udplb_manager *m, uint32_t slot)
{
	return (uint64_t)m->ft.flows[slot].gen << 32 | slot;
}

/* The slot of a live flow id, or FLOWTAB_NONE for a stale or foreign id. */
static uint32_t flow_slot(const udplb_manager *m, udplb_flow_id id)
{
	uint32_t slot = udplb_flow_slot(id);
	if (slot >= m->ft.cap)
		return FLOWTAB_NONE;
	const udplb_flow *f = &m->ft.flows[slot];
	if (f->phase != FLOW_ESTABLISHED || f->gen != (uint32_t)(id >> 32))
		return FLOWTAB_NONE;
	return slot;
}

/* Tells the shell when to wake us: at the earliest heap key. Armed earlier
 * than that already, nothing changes: an early wakeup costs one
 * revalidation, a late one would strand a flow. */
static void reschedule(udplb_manager *m)
{
	const udplb_heap_entry *top = udplb_flowtab_heap_top(&m->ft);
	if (!top)
		return;
	if (m->armed && m->armed_deadline <= top->key)
		return;
	m->armed = true;
	m->armed_deadline = top->key;
	emit(m, UDPLB_OUT_ARM_TIMER, UDPLB_FLOW_NONE)->u.arm.deadline_ms = top->key;
}

/* Every close comes here: FLOW_EVICTED then CLOSE_FLOW, once per flow; a
 * flow already closing or gone is left alone (seed 001 section 7). */
static void close_flow(udplb_manager *m, uint32_t slot, udplb_close_reason reason)
{
	udplb_flow *f = &m->ft.flows[slot];
	if (f->phase != FLOW_ESTABLISHED)
		return;
	f->phase = FLOW_CLOSING;
	udplb_flow_id id = flow_id(m, slot);
	udplb_output *o = emit(m, UDPLB_OUT_METRIC, id);
	o->u.metric.kind = UDPLB_METRIC_FLOW_EVICTED;
	o->u.metric.reason = reason;
	o->u.metric.duration_ms = m->now - f->created;
	o->u.metric.requests = f->requests;
	o->u.metric.responses = f->responses;
	emit(m, UDPLB_OUT_CLOSE_FLOW, id);
	udplb_flowtab_remove(&m->ft, slot);
	m->evicted++;
}

/* Pushes the idle deadline later; it never moves earlier. The heap entry
 * is left where it is: revalidation at expiry moves it (seed 001 section 7),
 * so a datagram on a known flow costs no heap work. */
static void touch(udplb_manager *m, udplb_flow *f, uint32_t timeout_ms)
{
	uint64_t d = m->now + timeout_ms;
	if (d > f->deadline)
		f->deadline = d;
}

static void forward_to_backend(udplb_manager *m, uint32_t slot, const uint8_t *payload,
                               size_t len)
{
	udplb_flow *f = &m->ft.flows[slot];
	touch(m, f, f->c.front_timeout_ms);
	udplb_output *o = emit(m, UDPLB_OUT_SEND_TO_BACKEND, flow_id(m, slot));
	if (f->c.ppv2 == UDPLB_PPV2_EVERY || f->ppv2_pending) {
		o->u.to_backend.prefix_len =
			udplb_ppv2_build(o->u.to_backend.prefix, &f->key.src, &f->key.local);
		f->ppv2_pending = false;
	}
	o->u.to_backend.payload = payload;
	o->u.to_backend.len = len;
	f->requests++;
	if (f->c.requests && f->requests >= f->c.requests)
		close_flow(m, slot, UDPLB_CLOSE_REQUESTS);
}

/* An endpoint as the table compares it: the padding, an IPv4 address's
 * unused tail and the scope of all but a link-local address zeroed,
 * whatever the shell left there. */
static void canon(udplb_addr *a)
{
	a->pad = 0;
	if (a->family == UDPLB_AF_INET)
		memset(a->ip + 4, 0, sizeof a->ip - 4);
	if (!udplb_addr_link_local(a))
		a->scope = 0;
}

static void make_key(udplb_flow_key *key, const udplb_addr *src, const udplb_addr *local)
{
	memset(key, 0, sizeof *key);
	key->src = *src;
	key->local = *local;
	canon(&key->src);
	canon(&key->local);
}

/* A source that cannot be a flow: no reply could reach it, or it is a
 * group or broadcast address no single host sends from. */
static bool bad_source(const udplb_addr *a)
{
	static const uint8_t zero[16];
	if (a->port == 0)
		return true;
	if (a->family == UDPLB_AF_INET)
		return a->ip[0] == 0 || (a->ip[0] & 0xf0) == 0xe0 ||
		       (a->ip[0] == 255 && a->ip[1] == 255 && a->ip[2] == 255 && a->ip[3] == 255);
	if (a->family == UDPLB_AF_INET6)
		return memcmp(a->ip, zero, 16) == 0 || a->ip[0] == 0xff;
	return true;
}

static uint64_t affinity_key(const udplb_manager *m, const udplb_addr *src)
{
	uint8_t buf[23];
	size_t n = 0;
	buf[n++] = src->family;
	memcpy(buf + n, src->ip, 16);
	n += 16;
	if (src->scope) { /* link-local: fe80::1 on each link is its own client */
		memcpy(buf + n, &src->scope, sizeof src->scope);
		n += sizeof src->scope;
	}
	if (m->cluster.affinity == UDPLB_AFFINITY_SOURCE_IP_PORT) {
		buf[n++] = (uint8_t)(src->port >> 8);
		buf[n++] = (uint8_t)src->port;
	}
	return udplb_siphash(&m->seed, buf, n);
}

/* Why a new flow from src is refused before selection, or -1: draining,
 * then the per-IP limit, the per-subnet limit, max_flows (seed 001 section
 * 3, step 5). */
static int shed_reason(const udplb_manager *m, const udplb_addr *src,
                       const udplb_count_key *subnet)
{
	const udplb_cluster *c = &m->cluster;
	udplb_count_key ip;
	udplb_count_key_ip(&ip, src);
	if (m->draining)
		return UDPLB_DROP_SHED_DRAINING;
	if (c->max_flows_per_ip && udplb_flowtab_count_get(&m->ft, &ip) >= c->max_flows_per_ip)
		return UDPLB_DROP_SHED_PER_IP;
	if (c->max_flows_per_subnet &&
	    udplb_flowtab_count_get(&m->ft, subnet) >= c->max_flows_per_subnet)
		return UDPLB_DROP_SHED_PER_SUBNET;
	if (m->ft.live >= m->max_flows)
		return UDPLB_DROP_SHED_MAX_FLOWS;
	return -1;
}

/* A client datagram, in the seed's admission order (section 3): each
 * refusal comes before anything is allocated. */
static void on_client(udplb_manager *m, const udplb_input *in)
{
	const uint8_t *payload = in->u.client.payload;
	size_t len = in->u.client.len;

	if (len > m->max_rx) {
		emit_drop(m, UDPLB_DROP_TRUNCATED, len);
		return;
	}
	if (!m->has_cluster) {
		emit_drop(m, UDPLB_DROP_NO_BACKEND, len);
		return;
	}
	udplb_flow_key key;
	make_key(&key, &in->u.client.src, &in->u.client.local);
	if (len == 0 || bad_source(&key.src)) {
		emit_drop(m, UDPLB_DROP_INVALID, len);
		return;
	}

	uint32_t slot = udplb_flowtab_find(&m->ft, &key);
	if (slot != FLOWTAB_NONE) {
		forward_to_backend(m, slot, payload, len);
		return;
	}

	const udplb_cluster *c = &m->cluster;
	udplb_count_key subnet;
	udplb_count_key_subnet(&subnet, &key.src,
	                       key.src.family == UDPLB_AF_INET ? c->subnet_prefix_v4
	                                                       : c->subnet_prefix_v6);
	int shed = shed_reason(m, &key.src, &subnet);
	if (shed >= 0) {
		emit_drop(m, (udplb_drop_reason)shed, len);
		return;
	}

	const udplb_backends *view = in->u.client.backends;
	int pick = view ? udplb_backends_select(view, c->selection, affinity_key(m, &key.src),
	                                        m->rr_turn)
	                : -1;
	if (pick < 0) {
		emit_drop(m, UDPLB_DROP_NO_BACKEND, len);
		return;
	}
	if (!udplb_flowtab_reserve(&m->ft, m->max_flows)) {
		emit_drop(m, UDPLB_DROP_NO_MEMORY, len);
		return;
	}
	if (c->selection == UDPLB_SELECT_ROUND_ROBIN)
		m->rr_turn++;

	slot = udplb_flowtab_insert(&m->ft, &key, &subnet);
	udplb_flow *f = &m->ft.flows[slot];
	f->backend = udplb_backends_at(view, (size_t)pick)->addr;
	f->c.front_timeout_ms = c->front_timeout_ms;
	f->c.back_timeout_ms = c->back_timeout_ms;
	f->c.responses = c->responses;
	f->c.requests = c->requests;
	f->c.ppv2 = (uint8_t)c->proxy_protocol;
	f->ppv2_pending = c->proxy_protocol == UDPLB_PPV2_FIRST;
	f->created = m->now;
	f->deadline = m->now + c->front_timeout_ms;
	udplb_flowtab_heap_push(&m->ft, slot, f->deadline);
	m->created++;

	udplb_flow_id id = flow_id(m, slot);
	emit(m, UDPLB_OUT_METRIC, id)->u.metric.kind = UDPLB_METRIC_FLOW_CREATED;
	udplb_output *o = emit(m, UDPLB_OUT_OPEN_UPSTREAM, id);
	o->u.open.backend = f->backend;
	o->u.open.client = key.src;
	o->u.open.local = key.local;
	/* The admission datagram goes out now, as every later one of the
	 * opening burst will: none is held back, each is counted once (seed 001
	 * section 4). */
	forward_to_backend(m, slot, payload, len);
}

static void on_backend(udplb_manager *m, const udplb_input *in)
{
	size_t len = in->u.backend.len;
	if (len > m->max_rx) {
		emit_drop(m, UDPLB_DROP_TRUNCATED, len);
		return;
	}
	uint32_t slot = flow_slot(m, in->u.backend.flow);
	if (slot == FLOWTAB_NONE) {
		emit_drop(m, UDPLB_DROP_UNKNOWN_FLOW, len);
		return;
	}
	udplb_flow *f = &m->ft.flows[slot];
	touch(m, f, f->c.back_timeout_ms);
	udplb_output *o = emit(m, UDPLB_OUT_SEND_TO_CLIENT, flow_id(m, slot));
	o->u.to_client.client = f->key.src;
	o->u.to_client.local = f->key.local;
	o->u.to_client.payload = in->u.backend.payload;
	o->u.to_client.len = len;
	f->responses++;
	if (f->c.responses && f->responses >= f->c.responses)
		close_flow(m, slot, UDPLB_CLOSE_RESPONSES);
}

/* ---- bulk work ---- */

/* Runs bulk work until it is done or the queue is too full to go on;
 * returns true when done. */
static bool pump(udplb_manager *m)
{
	if (m->work == WORK_EXPIRE) {
		const udplb_heap_entry *top;
		while ((top = udplb_flowtab_heap_top(&m->ft)) && top->key <= m->work_now) {
			udplb_flow *f = &m->ft.flows[top->slot];
			if (f->deadline > m->work_now) {
				/* Traffic moved it: the flow survives, its entry moves
				 * to the real deadline. */
				udplb_flowtab_heap_retime_top(&m->ft, f->deadline);
				continue;
			}
			if (room(m) < CLOSE_ROOM)
				return false;
			close_flow(m, top->slot, UDPLB_CLOSE_IDLE);
		}
		if (room(m) < 1)
			return false;
		m->work = WORK_NONE;
		m->expired = true;
		m->expired_at = m->work_now;
		reschedule(m);
		/* The strict-advance guard (seed 001 section 7): a timer armed at
		 * or before the expiry's now would fire again at once, forever. */
		assert(!m->armed || m->armed_deadline > m->work_now);
		return true;
	}
	if (m->work == WORK_CLOSE_ALL || m->work == WORK_CLOSE_BACKEND) {
		bool all = m->work == WORK_CLOSE_ALL;
		for (; m->work_cursor < m->ft.cap; m->work_cursor++) {
			const udplb_flow *f = &m->ft.flows[m->work_cursor];
			if (f->phase != FLOW_ESTABLISHED ||
			    (!all && !udplb_addr_equal(&f->backend, &m->work_backend)))
				continue;
			if (room(m) < CLOSE_ROOM)
				return false;
			close_flow(m, m->work_cursor, all ? UDPLB_CLOSE_ALL : UDPLB_CLOSE_REMOVED);
		}
		m->work = WORK_NONE;
		return true;
	}
	return true;
}

/* ---- config ---- */

static int on_config(udplb_manager *m, const udplb_input *in)
{
	int rc;
	switch (in->u.config.kind) {
	case UDPLB_CFG_SET_CLUSTER:
		rc = udplb_cluster_validate(&in->u.config.cluster);
		if (rc)
			return rc;
		m->cluster = in->u.config.cluster;
		m->has_cluster = true;
		return UDPLB_OK;
	case UDPLB_CFG_CLEAR_CLUSTER:
		m->has_cluster = false;
		return UDPLB_OK;
	case UDPLB_CFG_SET_MAX_FLOWS:
		rc = check_max_flows(in->u.config.value);
		if (!rc)
			m->max_flows = in->u.config.value;
		return rc;
	case UDPLB_CFG_SET_MAX_RX:
		rc = check_max_rx(in->u.config.value);
		if (!rc)
			m->max_rx = in->u.config.value;
		return rc;
	case UDPLB_CFG_DRAIN:
		m->draining = true;
		return UDPLB_OK;
	case UDPLB_CFG_RESUME:
		m->draining = false;
		return UDPLB_OK;
	case UDPLB_CFG_CLOSE_ALL:
		m->work = WORK_CLOSE_ALL;
		m->work_cursor = 0;
		(void)pump(m);
		return UDPLB_OK;
	case UDPLB_CFG_ABORT_FLOW: {
		uint32_t slot = flow_slot(m, in->u.config.flow);
		if (slot != FLOWTAB_NONE)
			close_flow(m, slot, UDPLB_CLOSE_ABORT);
		return UDPLB_OK;
	}
	case UDPLB_CFG_CLOSE_BACKEND:
		/* A scan of the table, as CLOSE_ALL: a reload removes few
		 * backends, and a flow keeps no index into the view. */
		m->work = WORK_CLOSE_BACKEND;
		m->work_cursor = 0;
		m->work_backend = in->u.config.backend;
		canon(&m->work_backend);
		(void)pump(m);
		return UDPLB_OK;
	}
	return UDPLB_E_INVAL;
}

/* ---- checks ---- */

const char *udplb_manager_check(const udplb_manager *m, udplb_check_level level)
{
	const udplb_flowtab *t = &m->ft;
	if (m->created - m->evicted != t->live)
		return "flows live != flows created - flows evicted";
	if (t->heap_n != t->live)
		return "the deadline heap does not hold one entry per flow";
	if (m->q_len > UDPLB_OUTPUT_MAX)
		return "the output queue overran";
	if (m->work == WORK_NONE) {
		const udplb_heap_entry *top = udplb_flowtab_heap_top(t);
		if (top && (!m->armed || m->armed_deadline > top->key))
			return "a flow's deadline comes before the armed timer";
		/* Heap keys never pass deadlines, so a due-free heap top proves
		 * no flow in the table is past the last expiry. */
		if (top && m->expired && top->key <= m->expired_at)
			return "a flow is past its deadline after a due expiry";
	}
	if (level == UDPLB_CHECK_FULL) {
		const char *err = udplb_flowtab_check(t);
		if (err)
			return err;
		for (uint32_t i = 0; i < t->cap; i++) {
			const udplb_flow *f = &t->flows[i];
			if (f->phase == FLOW_FREE)
				continue;
			if (m->work == WORK_NONE && m->expired && f->deadline <= m->expired_at)
				return "a flow is past its deadline after a due expiry";
			if (f->deadline < f->created)
				return "a flow's deadline is before its creation";
			if (f->c.requests && f->requests >= f->c.requests)
				return "a flow outlived its requests cap";
			if (f->c.responses && f->responses >= f->c.responses)
				return "a flow outlived its responses cap";
		}
	}
	return NULL;
}

static void debug_check(const udplb_manager *m)
{
#ifndef NDEBUG
	const char *err = udplb_manager_check(m, m->checks);
	if (err) {
		fprintf(stderr, "udplb: invariant broken: %s\n", err);
		abort();
	}
#else
	(void)m;
#endif
}

/* ---- the entry points ---- */

int udplb_manager_input(udplb_manager *m, const udplb_input *in, uint64_t now_ms)
{
	if (m->q_len || m->work != WORK_NONE)
		return UDPLB_E_BUSY;
	if ((in->kind == UDPLB_IN_CLIENT && !in->u.client.payload && in->u.client.len) ||
	    (in->kind == UDPLB_IN_BACKEND && !in->u.backend.payload && in->u.backend.len))
		return UDPLB_E_INVAL;
	if (now_ms > m->now)
		m->now = now_ms;

	int rc = UDPLB_OK;
	switch (in->kind) {
	case UDPLB_IN_CLIENT:
		on_client(m, in);
		reschedule(m);
		break;
	case UDPLB_IN_BACKEND:
		on_backend(m, in);
		reschedule(m);
		break;
	case UDPLB_IN_CONFIG:
		rc = on_config(m, in);
		if (!rc && m->work == WORK_NONE)
			reschedule(m);
		break;
	case UDPLB_IN_TIMEOUT:
		/* The shell's timer is spent, early or not: forget it before
		 * rescheduling, or an expiry that closes nothing would find the
		 * same minimum "already armed" and arm nothing (seed 001 section
		 * 7, the lost wakeup). */
		m->armed = false;
		m->work = WORK_EXPIRE;
		m->work_now = m->now;
		(void)pump(m);
		break;
	default:
		rc = UDPLB_E_INVAL;
	}
	debug_check(m);
	return rc;
}

bool udplb_manager_poll(udplb_manager *m, udplb_output *out)
{
	if (m->q_len == 0 && m->work != WORK_NONE)
		(void)pump(m);
	if (m->q_len == 0) {
		debug_check(m);
		return false;
	}
	*out = m->queue[m->q_head];
	m->q_head = (m->q_head + 1) % UDPLB_OUTPUT_MAX;
	m->q_len--;
	return true;
}

/* ---- queries ---- */

void udplb_manager_stats(const udplb_manager *m, udplb_stats *out)
{
	memset(out, 0, sizeof *out);
	out->flows_live = m->ft.live;
	out->flows_created = m->created;
	out->flows_evicted = m->evicted;
	out->max_flows = m->max_flows;
	out->max_rx_datagram_size = m->max_rx;
	out->has_cluster = m->has_cluster;
	out->draining = m->draining;
	out->armed = m->armed;
	out->armed_deadline_ms = m->armed_deadline;
	out->now_ms = m->now;
}

bool udplb_manager_flow_info(const udplb_manager *m, udplb_flow_id id, udplb_flow_info *out)
{
	uint32_t slot = flow_slot(m, id);
	if (slot == FLOWTAB_NONE)
		return false;
	const udplb_flow *f = &m->ft.flows[slot];
	memset(out, 0, sizeof *out);
	out->client = f->key.src;
	out->local = f->key.local;
	out->backend = f->backend;
	out->created_ms = f->created;
	out->deadline_ms = f->deadline;
	out->requests = f->requests;
	out->responses = f->responses;
	out->front_timeout_ms = f->c.front_timeout_ms;
	out->back_timeout_ms = f->c.back_timeout_ms;
	out->requests_cap = f->c.requests;
	out->responses_cap = f->c.responses;
	out->proxy_protocol = (udplb_ppv2_mode)f->c.ppv2;
	return true;
}

udplb_flow_id udplb_manager_flow_find(const udplb_manager *m, const udplb_addr *src,
                                      const udplb_addr *local)
{
	udplb_flow_key key;
	make_key(&key, src, local);
	uint32_t slot = udplb_flowtab_find(&m->ft, &key);
	return slot == FLOWTAB_NONE ? UDPLB_FLOW_NONE : flow_id(m, slot);
}
