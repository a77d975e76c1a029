/* principal.c - principals (revocation, session counts, token buckets) and sessions with their admission rule. */
#include "runtime/principal.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/pool.h"

principal *principal_new(const char *name, uint64_t up_rate, uint64_t down_rate,
                         uint32_t max_sessions)
{
	principal *p = calloc(1, sizeof *p);
	if (!p)
		return NULL;
	if (name && !(p->name = strdup(name))) {
		free(p);
		return NULL;
	}
	atomic_init(&p->refs, 1);
	principal_set_limits(p, up_rate, down_rate, max_sessions);
	return p;
}

void principal_hold(principal *p) { atomic_fetch_add_explicit(&p->refs, 1, memory_order_relaxed); }

void principal_release(principal *p)
{
	if (p && atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) == 1) {
		free(p->name);
		free(p);
	}
}

void principal_set_limits(principal *p, uint64_t up_rate, uint64_t down_rate,
                          uint32_t max_sessions)
{
	atomic_store_explicit(&p->up.rate, up_rate > PRINCIPAL_RATE_MAX ? PRINCIPAL_RATE_MAX : up_rate,
	                      memory_order_relaxed);
	atomic_store_explicit(&p->down.rate,
	                      down_rate > PRINCIPAL_RATE_MAX ? PRINCIPAL_RATE_MAX : down_rate,
	                      memory_order_relaxed);
	atomic_store_explicit(&p->max_sessions, max_sessions, memory_order_relaxed);
}

void principal_revoke(principal *p, principal_revoked how)
{
	int live = PRINCIPAL_LIVE;
	atomic_compare_exchange_strong_explicit(&p->revoked, &live, (int)how, memory_order_acq_rel,
	                                        memory_order_acquire);
}

/* The bucket's size: PRINCIPAL_BURST_MS of the rate, at least one pool
 * buffer (a relay moves up to that much at once). */
static int64_t burst(uint64_t rate)
{
	uint64_t b = rate * PRINCIPAL_BURST_MS / 1000;
	return (int64_t)(b < POOL_BUF_SIZE ? POOL_BUF_SIZE : b);
}

/* Adds what the time since the last refill earned, up to the burst (one
 * thread wins each refill). Returns the rate, 0 for an unlimited bucket. */
static uint64_t refill(principal_bucket *b, uint64_t now_ms)
{
	uint64_t rate = atomic_load_explicit(&b->rate, memory_order_relaxed);
	if (!rate)
		return 0;
	int64_t cap = burst(rate);
	uint64_t last = atomic_load_explicit(&b->refill_ms, memory_order_relaxed);
	if (last == 0) {
		if (atomic_compare_exchange_strong_explicit(&b->refill_ms, &last, now_ms,
		                                            memory_order_relaxed, memory_order_relaxed))
			atomic_store_explicit(&b->balance, cap, memory_order_relaxed);
	} else if (now_ms > last &&
	           atomic_compare_exchange_strong_explicit(&b->refill_ms, &last, now_ms,
	                                                   memory_order_relaxed, memory_order_relaxed)) {
		uint64_t ms = now_ms - last > 60000 ? 60000 : now_ms - last; /* full long before */
		uint64_t add = ms * rate / 1000; /* rate <= PRINCIPAL_RATE_MAX: no overflow */
		/* up to full: a debt is paid before the bucket fills */
		int64_t room = cap - atomic_load_explicit(&b->balance, memory_order_relaxed);
		if (room <= 0)
			return rate;
		int64_t add_i = add > (uint64_t)room ? room : (int64_t)add;
		int64_t was = atomic_fetch_add_explicit(&b->balance, add_i, memory_order_relaxed);
		if (was + add_i > cap) /* full: what overflowed is lost */
			atomic_fetch_sub_explicit(&b->balance, was + add_i - cap, memory_order_relaxed);
	}
	return rate;
}

static int64_t clamp_n(uint64_t n) { return n > (uint64_t)INT64_MAX / 2 ? INT64_MAX / 2 : (int64_t)n; }

uint64_t principal_charge(principal_bucket *b, uint64_t n, uint64_t now_ms)
{
	uint64_t rate = b ? refill(b, now_ms) : 0;
	if (!rate)
		return 0;
	int64_t take = clamp_n(n);
	int64_t left = atomic_fetch_sub_explicit(&b->balance, take, memory_order_relaxed) - take;
	if (left >= 0)
		return 0;
	uint64_t debt = (uint64_t)-left;
	uint64_t ms = debt > UINT64_MAX / 1000 ? UINT64_MAX / rate : debt * 1000 / rate;
	return ms ? ms : 1;
}

bool principal_try(principal_bucket *b, uint64_t n, uint64_t now_ms)
{
	if (!b || !refill(b, now_ms))
		return true;
	int64_t take = clamp_n(n);
	int64_t have = atomic_load_explicit(&b->balance, memory_order_relaxed);
	while (have >= take)
		if (atomic_compare_exchange_weak_explicit(&b->balance, &have, have - take,
		                                          memory_order_relaxed, memory_order_relaxed))
			return true;
	return false;
}

/* ---- sessions ---- */

session *session_new(void)
{
	session *s = calloc(1, sizeof *s);
	if (s)
		s->refs = 1;
	return s;
}

void session_hold(session *s) { s->refs++; }

void session_release(session *s)
{
	if (!s || --s->refs)
		return;
	if (s->bound) {
		atomic_fetch_sub_explicit(&s->bound->sessions, 1, memory_order_relaxed);
		principal_release(s->bound);
	}
	free(s);
}

void session_close(session *s) { s->closed = true; }

const char *session_admit(session *s, principal *p)
{
	if (!s)
		return p && principal_state(p) != PRINCIPAL_LIVE ? PRINCIPAL_REMOVED_TEXT : NULL;
	if (s->closed)
		return PRINCIPAL_SESSION_CLOSED_TEXT;
	if (s->bound) {
		if (principal_state(s->bound) == PRINCIPAL_REVOKED_CLOSE) {
			s->closed = true;
			return PRINCIPAL_SESSION_CLOSED_TEXT;
		}
		s->flows++;
		return NULL;
	}
	if (p) {
		if (principal_state(p) != PRINCIPAL_LIVE) {
			s->closed = true;
			return PRINCIPAL_REMOVED_TEXT;
		}
		uint32_t max = atomic_load_explicit(&p->max_sessions, memory_order_relaxed);
		uint32_t now = atomic_fetch_add_explicit(&p->sessions, 1, memory_order_relaxed);
		if (max && now >= max) {
			atomic_fetch_sub_explicit(&p->sessions, 1, memory_order_relaxed);
			return PRINCIPAL_TOO_MANY_SESSIONS_TEXT;
		}
		principal_hold(p);
		s->bound = p;
	}
	s->flows++;
	return NULL;
}
