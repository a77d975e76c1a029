/* balancer.c - the sans-io balancer core: a health bitmap read lock-free by workers, written by the probe shell through rise/fall counting. */
#include "outbound/balancer.h"

#include <assert.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define WORD_BITS 64
#define MAX_WORDS (BALANCER_MAX_MEMBERS / WORD_BITS)

/* Keeps what every pick reads (the health words) off the lines that picks
 * and failures write (the rotation counter, the requests). 64 bytes is the
 * line of every x86-64 and most arm64 cores. */
#define CACHE_LINE 64

_Static_assert(BALANCER_MAX_MEMBERS % WORD_BITS == 0, "whole health words");
_Static_assert(BALANCER_MAX_MEMBERS <= UINT16_MAX + 1, "balancer_attempt keeps members in 16 bits");
_Static_assert(BALANCER_MAX_TRIES <= UINT8_MAX, "balancer_attempt counts tries in 8 bits");

/* One member's probe history. Control thread only. */
typedef struct member {
	bool up;      /* the member's health bit, as the control thread last set it */
	uint32_t run; /* consecutive results against up; below rise or fall */
} member;

struct balancer {
	/* Fixed by balancer_new. */
	balancer_strategy_kind strategy;
	uint32_t rise;
	uint32_t fall;
	uint32_t retry;
	size_t n;
	size_t n_words;
	member *members;    /* owned, n entries; control thread only */
	uint32_t *upstream; /* owned, n entries; NULL when every member is distinct */

	/* Bit i of word i / 64: member i is healthy. Written by the control
	 * thread (release), read by every pick (acquire). */
	_Alignas(CACHE_LINE) _Atomic uint64_t health[MAX_WORDS];
	/* The round_robin rotations: one step per first pick, and one per
	 * retry on a counter of its own (see balancer_next). */
	_Alignas(CACHE_LINE) _Atomic uint64_t rotation;
	_Atomic uint64_t retry_rotation;
	/* Requests from workers to the control thread. Relaxed: they publish
	 * no data, and the shell's wake-up (uv_async_send) orders the rest. */
	_Alignas(CACHE_LINE) _Atomic uint64_t reprobe[MAX_WORDS];
	atomic_bool reprobe_all;
};

static void set_err(char *err, size_t err_size, const char *text)
{
	if (!err || err_size == 0)
		return;
	/* Every text is a constant shorter than any buffer a caller passes;
	 * a smaller buffer gets it truncated, as the header says. */
	size_t len = strlen(text);
	if (len >= err_size)
		len = err_size - 1;
	memcpy(err, text, len);
	err[len] = '\0';
}

static uint64_t word_bit(size_t i)
{
	return (uint64_t)1 << (i % WORD_BITS);
}

balancer *balancer_new(const balancer_config *cfg, size_t n_members, char *err, size_t err_size)
{
	static const balancer_config defaults;
	if (!cfg)
		cfg = &defaults;
	if (n_members == 0) {
		set_err(err, err_size, BALANCER_ERR_EMPTY);
		return NULL;
	}
	if (n_members > BALANCER_MAX_MEMBERS) {
		set_err(err, err_size, BALANCER_ERR_TOO_MANY);
		return NULL;
	}
	if (cfg->retry > BALANCER_MAX_RETRY) {
		set_err(err, err_size, BALANCER_ERR_RETRY);
		return NULL;
	}
	assert(cfg->strategy == BALANCER_FAILOVER || cfg->strategy == BALANCER_ROUND_ROBIN);

	/* sizeof is a multiple of the struct's alignment, as aligned_alloc
	 * requires. */
	balancer *b = aligned_alloc(_Alignof(balancer), sizeof(balancer));
	if (!b)
		goto nomem;
	memset(b, 0, sizeof(*b));
	b->strategy = cfg->strategy;
	b->rise = cfg->rise ? cfg->rise : 1;
	b->fall = cfg->fall ? cfg->fall : 1;
	b->retry = cfg->retry;
	b->n = n_members;
	b->n_words = (n_members + WORD_BITS - 1) / WORD_BITS;
	b->members = calloc(n_members, sizeof(*b->members));
	if (!b->members)
		goto fail;
	if (cfg->upstream) {
		b->upstream = malloc(n_members * sizeof(*b->upstream));
		if (!b->upstream)
			goto fail;
		memcpy(b->upstream, cfg->upstream, n_members * sizeof(*b->upstream));
	}

	/* Every member starts healthy (seed 000 "The probe task"). */
	for (size_t w = 0; w < MAX_WORDS; w++) {
		uint64_t bits = 0;
		if (w + 1 < b->n_words)
			bits = UINT64_MAX;
		else if (w + 1 == b->n_words)
			bits = n_members % WORD_BITS ? word_bit(n_members) - 1 : UINT64_MAX;
		atomic_init(&b->health[w], bits);
		atomic_init(&b->reprobe[w], 0);
	}
	for (size_t i = 0; i < n_members; i++)
		b->members[i].up = true;
	atomic_init(&b->rotation, 0);
	atomic_init(&b->retry_rotation, 0);
	atomic_init(&b->reprobe_all, false);
	return b;

fail:
	balancer_del(b);
nomem:
	set_err(err, err_size, BALANCER_ERR_NOMEM);
	return NULL;
}

void balancer_del(balancer *b)
{
	if (!b)
		return;
	free(b->upstream);
	free(b->members);
	free(b);
}

/* Copies the health bitmap into snap, one acquire load per word, and
 * returns how many members are healthy in that copy. */
static size_t load_health(balancer *b, uint64_t *snap)
{
	size_t h = 0;
	for (size_t w = 0; w < b->n_words; w++) {
		snap[w] = atomic_load_explicit(&b->health[w], memory_order_acquire);
		h += (size_t)__builtin_popcountll(snap[w]);
	}
	return h;
}

/* The index of the k-th set bit (from 0) of set; the caller knows there
 * are more than k. */
static size_t nth_member(const uint64_t *set, size_t n_words, size_t k)
{
	for (size_t w = 0; w < n_words; w++) {
		size_t c = (size_t)__builtin_popcountll(set[w]);
		if (k < c) {
			uint64_t x = set[w];
			while (k--)
				x &= x - 1;
			return w * WORD_BITS + (size_t)__builtin_ctzll(x);
		}
		k -= c;
	}
	assert(!"nth_member: fewer members than asked for");
	return 0;
}

/* The strategy's pick among the c members of cand (c > 0), stepping
 * rotation under round_robin. */
static size_t pick(balancer *b, _Atomic uint64_t *rotation, const uint64_t *cand, size_t c)
{
	if (b->strategy == BALANCER_ROUND_ROBIN) {
		uint64_t t = atomic_fetch_add_explicit(rotation, 1, memory_order_relaxed);
		return nth_member(cand, b->n_words, (size_t)(t % c));
	}
	return nth_member(cand, b->n_words, 0);
}

/* Raises the every-member re-probe request; true when it was not pending.
 * The load first keeps a pending request from costing each pick a write to
 * a shared line. */
static bool raise_reprobe_all(balancer *b)
{
	if (atomic_load_explicit(&b->reprobe_all, memory_order_relaxed))
		return false;
	return !atomic_exchange_explicit(&b->reprobe_all, true, memory_order_relaxed);
}

size_t balancer_select(balancer *b, bool *wake)
{
	uint64_t snap[MAX_WORDS];
	size_t h = load_health(b, snap);
	bool raised = false;
	size_t m = 0;
	if (h == 0)
		raised = raise_reprobe_all(b); /* seed 000: the first configured member */
	else
		m = pick(b, &b->rotation, snap, h);
	if (wake)
		*wake = raised;
	return m;
}

/* Clears from set member i and, when members share upstreams, every member
 * that reaches the same one. */
static void clear_member(const balancer *b, uint64_t *set, size_t i)
{
	if (!b->upstream) {
		set[i / WORD_BITS] &= ~word_bit(i);
		return;
	}
	for (size_t j = 0; j < b->n; j++)
		if (b->upstream[j] == b->upstream[i])
			set[j / WORD_BITS] &= ~word_bit(j);
}

static size_t record(balancer_attempt *a, size_t m)
{
	a->tried[a->n_tried++] = (uint16_t)m;
	return m;
}

size_t balancer_next(balancer *b, balancer_attempt *a, bool *wake)
{
	if (wake)
		*wake = false;
	if (a->done)
		return SIZE_MAX;
	if (a->n_tried == 0)
		return record(a, balancer_select(b, wake));
	if (a->n_tried > b->retry || a->n_tried >= BALANCER_MAX_TRIES)
		goto done;

	/* untried: every member but those tried, and their upstream mates. */
	uint64_t untried[MAX_WORDS];
	for (size_t w = 0; w < b->n_words; w++)
		untried[w] = UINT64_MAX;
	if (b->n % WORD_BITS)
		untried[b->n_words - 1] = word_bit(b->n) - 1;
	for (size_t t = 0; t < a->n_tried; t++)
		if (a->tried[t] < b->n)
			clear_member(b, untried, a->tried[t]);

	uint64_t cand[MAX_WORDS];
	size_t h = load_health(b, cand);
	size_t c = 0;
	if (h == 0) {
		/* Every member down: the seed's fallback, extended to the
		 * retry, in configured order. */
		for (size_t w = 0; w < b->n_words; w++)
			c += (size_t)__builtin_popcountll(untried[w]);
		if (c == 0)
			goto done;
		bool raised = raise_reprobe_all(b);
		if (wake)
			*wake = raised;
		return record(a, nth_member(untried, b->n_words, 0));
	}
	for (size_t w = 0; w < b->n_words; w++) {
		cand[w] &= untried[w];
		c += (size_t)__builtin_popcountll(cand[w]);
	}
	if (c == 0)
		goto done;
	/* Retries step their own counter: on the first-pick counter, the flows
	 * that land on a dead member would take two steps each and starve the
	 * member after it of first picks; a fixed "next after the failed one"
	 * would pile every retry onto that member instead. */
	return record(a, pick(b, &b->retry_rotation, cand, c));

done:
	a->done = true;
	return SIZE_MAX;
}

balancer_probe_result balancer_report(balancer *b, size_t i, bool up)
{
	if (i >= b->n)
		return BALANCER_UNCHANGED;
	member *m = &b->members[i];
	if (up == m->up) {
		m->run = 0;
		return BALANCER_UNCHANGED;
	}
	if (++m->run < (up ? b->rise : b->fall))
		return BALANCER_UNCHANGED;
	m->run = 0;
	m->up = up;
	/* Release: a pick that sees the new bit sees everything the control
	 * thread did before it (what the concurrency test relies on). */
	_Atomic uint64_t *w = &b->health[i / WORD_BITS];
	if (up) {
		atomic_fetch_or_explicit(w, word_bit(i), memory_order_release);
		return BALANCER_NOW_UP;
	}
	atomic_fetch_and_explicit(w, ~word_bit(i), memory_order_release);
	return BALANCER_NOW_DOWN;
}

bool balancer_dial_failed(balancer *b, size_t i)
{
	if (i >= b->n)
		return false;
	_Atomic uint64_t *w = &b->reprobe[i / WORD_BITS];
	uint64_t bit = word_bit(i);
	if (atomic_load_explicit(w, memory_order_relaxed) & bit)
		return false;
	return !(atomic_fetch_or_explicit(w, bit, memory_order_relaxed) & bit);
}

bool balancer_take_reprobe(balancer *b, size_t i)
{
	if (i >= b->n)
		return false;
	_Atomic uint64_t *w = &b->reprobe[i / WORD_BITS];
	uint64_t bit = word_bit(i);
	if (!(atomic_load_explicit(w, memory_order_relaxed) & bit))
		return false;
	return atomic_fetch_and_explicit(w, ~bit, memory_order_relaxed) & bit;
}

bool balancer_take_reprobe_all(balancer *b)
{
	if (!atomic_load_explicit(&b->reprobe_all, memory_order_relaxed))
		return false;
	return atomic_exchange_explicit(&b->reprobe_all, false, memory_order_relaxed);
}

size_t balancer_size(const balancer *b)
{
	return b->n;
}

balancer_strategy_kind balancer_strategy(const balancer *b)
{
	return b->strategy;
}

uint32_t balancer_retry(const balancer *b)
{
	return b->retry;
}

bool balancer_is_up(const balancer *b, size_t i)
{
	if (i >= b->n)
		return false;
	/* The load does not change the balancer; older compilers refuse a
	 * const _Atomic operand. */
	_Atomic uint64_t *w = &((balancer *)b)->health[i / WORD_BITS];
	return atomic_load_explicit(w, memory_order_relaxed) & word_bit(i);
}
