/* stackpair.h - two layer stacks wired to each other in memory, for the unit tests of layers: app bytes in at either end, wire bytes moved across in chunks, until nothing moves. */
#ifndef ETM_TESTS_STACKPAIR_H
#define ETM_TESTS_STACKPAIR_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "transport/stack.h"

/* What run() returns when a stack refuses its own bytes back (a's
 * wire_done, an end's app_done): told apart from the errors a stack
 * returns for what it was given. */
enum { END_ERR_WIRE_DONE = -100, END_ERR_APP_DONE = -101 };

typedef struct end {
	stack *s;
	layer *l;          /* the layer under test, borrowed: the stack owns it */
	const uint8_t *tx; /* app bytes to send */
	size_t tx_len, tx_off;
	uint8_t *rx;       /* app bytes received */
	size_t rx_len, rx_cap;
	bool reading;      /* false: the app takes nothing (backpressure) */
} end;

/* Moves what a's socket would write into b's socket, chunk bytes per call. */
static inline size_t wire(stack *a, stack *b, size_t chunk, int *err)
{
	size_t moved = 0, n;
	const uint8_t *d;
	while (!*err && (n = stack_wire_out(a, &d)) > 0) {
		ssize_t k = stack_from_wire(b, d, n < chunk ? n : chunk);
		if (k < 0)
			*err = (int)k;
		if (k <= 0)
			break;
		if (stack_wire_done(a, (size_t)k) < 0)
			*err = END_ERR_WIRE_DONE;
		moved += (size_t)k;
	}
	return moved;
}

/* Gives e's stack the next chunk of its app bytes and takes what it has
 * for the app (while e is reading). */
static inline size_t app(end *e, size_t chunk, int *err)
{
	size_t moved = 0, n;
	const uint8_t *d;
	if (e->tx_off < e->tx_len && !*err) {
		n = e->tx_len - e->tx_off;
		ssize_t k = stack_from_app(e->s, e->tx + e->tx_off, n < chunk ? n : chunk);
		if (k < 0)
			*err = (int)k;
		else
			e->tx_off += (size_t)k, moved += (size_t)k;
	}
	while (e->reading && !*err && (n = stack_app_in(e->s, &d)) > 0) {
		if (e->rx_len + n > e->rx_cap) {
			e->rx_cap = (e->rx_len + n) * 2;
			e->rx = realloc(e->rx, e->rx_cap);
		}
		memcpy(e->rx + e->rx_len, d, n);
		e->rx_len += n;
		if (stack_app_done(e->s, n) < 0)
			*err = END_ERR_APP_DONE;
		moved += n;
	}
	return moved;
}

/* Runs both ends until nothing moves; returns 0 or the first error. */
static inline int run(end *a, end *b, size_t chunk)
{
	int err = 0;
	size_t moved;
	do {
		moved = app(a, chunk, &err) + app(b, chunk, &err);
		moved += wire(a->s, b->s, chunk, &err) + wire(b->s, a->s, chunk, &err);
	} while (moved > 0 && !err);
	return err;
}

/* n bytes of a seeded pseudo-random pattern (malloc'd). */
static inline uint8_t *pattern(size_t n, uint32_t seed)
{
	uint8_t *p = malloc(n);
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		p[i] = (uint8_t)(seed >> 16);
	}
	return p;
}

/* With the pair open and idle: c sends 1 MiB while s's app reads nothing.
 * c's sends stop short of 8 stack queues (what two stacks of a layer or
 * two can hold), stay stopped, and once s reads everything arrives in
 * order. Needs cmocka, included before this header. */
static inline void check_backpressure(end *c, end *s, uint32_t seed)
{
	size_t len = 1 << 20;
	uint8_t *up = pattern(len, seed);
	c->tx = up, c->tx_len = len, c->tx_off = 0;
	s->reading = false;
	assert_int_equal(run(c, s, SIZE_MAX), 0);
	assert_true(c->tx_off < 8 * STACK_QUEUE_CAP);
	size_t held = c->tx_off;
	assert_int_equal(run(c, s, SIZE_MAX), 0);
	assert_int_equal(c->tx_off, held);
	s->reading = true;
	assert_int_equal(run(c, s, SIZE_MAX), 0);
	assert_int_equal(s->rx_len, len);
	assert_memory_equal(s->rx, up, len);
	c->tx = NULL, c->tx_len = c->tx_off = 0;
	free(up);
}

#endif
