/* test_stack.c - the layer stack: empty, two toy layers both ways whole and byte by byte, backpressure, errors, when it has become a pass-through. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "stackpair.h"
#include "transport/stack.h"

/* ---- toy layers ---- */

/* "xor": every byte xored with a constant, both ways; always ready. */
#define XOR_KEY 0x5a

static ssize_t xor_below(layer *l, const uint8_t *in, size_t len, layer_buf *up, layer_buf *down)
{
	(void)l, (void)down;
	size_t n = len < layer_buf_room(up) ? len : layer_buf_room(up);
	for (size_t i = 0; i < n; i++)
		up->data[up->len + i] = in[i] ^ XOR_KEY;
	up->len += n;
	return (ssize_t)n;
}

static ssize_t xor_above(layer *l, const uint8_t *in, size_t len, layer_buf *down)
{
	layer_buf none = {0};
	return xor_below(l, in, len, down, &none);
}

static bool always(const layer *l) { return (void)l, true; }
static void plain_free(layer *l) { free(l); }

static const layer_ops xor_ops = {
	.name = "xor",
	.from_below = xor_below,
	.from_above = xor_above,
	.ready = always,
	.free = plain_free,
};

static layer *xor_new(void)
{
	layer *l = calloc(1, sizeof *l);
	l->ops = &xor_ops;
	return l;
}

/* "frame": length-prefixed frames, LEN(1) PAYLOAD(LEN) with LEN 1..254.
 * LEN 0 is the hello: the client's start sends it, the server answers
 * it, each side is ready once it has the peer's. After the hello, LEN 0
 * is the orderly end (shutdown). LEN 255 is refused. A frame is taken
 * only whole, so partial frames wait in the stack's queue. */
#define FRAME_MAX 254

typedef struct frame_layer {
	layer base;
	bool client;
	bool ready;
	bool hello_due;  /* owes the peer a hello byte */
	bool bye_due;    /* owes the peer the end byte */
	bool peer_ended;
	bool shut;       /* its end was asked for: more app bytes are refused */
	const char *err;
} frame_layer;

static void frame_owe(frame_layer *f, layer_buf *down)
{
	if ((f->hello_due || f->bye_due) && layer_buf_room(down) > 0) {
		down->data[down->len++] = 0;
		if (f->hello_due)
			f->hello_due = false;
		else
			f->bye_due = false;
	}
}

static ssize_t frame_below(layer *l, const uint8_t *in, size_t len, layer_buf *up,
                           layer_buf *down)
{
	frame_layer *f = (frame_layer *)l;
	size_t used = 0;
	while (used < len) {
		size_t n = in[used];
		if (n == 255) {
			f->err = "frame: bad length";
			return LAYER_ERR_PROTO;
		}
		if (n == 0) {
			if (f->ready) {
				f->peer_ended = true;
			} else {
				f->ready = true;
				f->hello_due = !f->client;
			}
			used++;
			continue;
		}
		if (len - used < 1 + n || layer_buf_room(up) < n)
			break;
		memcpy(up->data + up->len, in + used + 1, n);
		up->len += n;
		used += 1 + n;
	}
	frame_owe(f, down);
	return (ssize_t)used;
}

static ssize_t frame_above(layer *l, const uint8_t *in, size_t len, layer_buf *down)
{
	frame_layer *f = (frame_layer *)l;
	frame_owe(f, down);
	if (len && f->shut) {
		f->err = "frame: send after shutdown";
		return LAYER_ERR_STATE;
	}
	if (!f->ready || f->hello_due)
		return 0;
	size_t used = 0;
	while (used < len && layer_buf_room(down) >= 2) {
		size_t n = len - used;
		if (n > FRAME_MAX)
			n = FRAME_MAX;
		if (n > layer_buf_room(down) - 1)
			n = layer_buf_room(down) - 1;
		down->data[down->len++] = (uint8_t)n;
		memcpy(down->data + down->len, in + used, n);
		down->len += n;
		used += n;
	}
	return (ssize_t)used;
}

static int frame_start(layer *l, layer_buf *down)
{
	frame_layer *f = (frame_layer *)l;
	f->hello_due = true;
	frame_owe(f, down);
	return 0;
}

static bool frame_ready(const layer *l) { return ((const frame_layer *)l)->ready; }

static int frame_shutdown(layer *l, layer_buf *down)
{
	frame_layer *f = (frame_layer *)l;
	f->bye_due = true;
	f->shut = true;
	frame_owe(f, down);
	return 0;
}

static const char *frame_error(const layer *l) { return ((const frame_layer *)l)->err; }

static const layer_ops frame_client_ops = {
	.name = "frame",
	.start = frame_start,
	.from_below = frame_below,
	.from_above = frame_above,
	.ready = frame_ready,
	.shutdown = frame_shutdown,
	.error = frame_error,
	.free = plain_free,
};

static const layer_ops frame_server_ops = {
	.name = "frame",
	.from_below = frame_below,
	.from_above = frame_above,
	.ready = frame_ready,
	.shutdown = frame_shutdown,
	.error = frame_error,
	.free = plain_free,
};

static frame_layer *frame_new(bool client)
{
	frame_layer *f = calloc(1, sizeof *f);
	f->base.ops = client ? &frame_client_ops : &frame_server_ops;
	f->client = client;
	return f;
}

/* "mute": fails on any byte from below without a text. */
static ssize_t mute_below(layer *l, const uint8_t *in, size_t len, layer_buf *up, layer_buf *down)
{
	(void)l, (void)in, (void)up, (void)down;
	return len ? LAYER_ERR_PROTO : 0;
}

static ssize_t mute_above(layer *l, const uint8_t *in, size_t len, layer_buf *down)
{
	(void)l, (void)in, (void)len, (void)down;
	return 0;
}

static const char *no_text(const layer *l) { return (void)l, NULL; }

static const layer_ops mute_ops = {
	.name = "mute",
	.from_below = mute_below,
	.from_above = mute_above,
	.ready = always,
	.error = no_text,
	.free = plain_free,
};

/* ---- two stacks wired to each other (stackpair.h) ---- */

/* The frame layer on top of e's stack. */
static frame_layer *top(const end *e) { return (frame_layer *)e->l; }

static void pair(end *c, end *s)
{
	memset(c, 0, sizeof *c);
	memset(s, 0, sizeof *s);
	c->s = stack_new();
	s->s = stack_new();
	c->reading = s->reading = true;
	assert_int_equal(stack_push(c->s, xor_new()), 0);
	c->l = &frame_new(true)->base;
	s->l = &frame_new(false)->base;
	assert_int_equal(stack_push(c->s, c->l), 0);
	assert_int_equal(stack_push(s->s, xor_new()), 0);
	assert_int_equal(stack_push(s->s, s->l), 0);
	assert_int_equal(stack_depth(c->s), 2);
	assert_int_equal(stack_start(c->s), 0);
	assert_int_equal(stack_start(s->s), 0);
}

static void unpair(end *c, end *s)
{
	stack_free(c->s);
	stack_free(s->s);
	free(c->rx);
	free(s->rx);
}

/* ---- tests ---- */

static void empty_stack_passes_bytes(void **state)
{
	(void)state;
	stack *s = stack_new();
	const uint8_t *d;
	assert_true(stack_ready(s));
	/* Nothing to write or read yet: "done with 0" is fine (and touches no
	 * unallocated queue, which UBSan would catch). */
	assert_int_equal(stack_wire_out(s, &d), 0);
	assert_int_equal(stack_wire_done(s, 0), 0);
	assert_int_equal(stack_app_done(s, 0), 0);
	assert_int_equal(stack_from_wire(s, (const uint8_t *)"hello", 5), 5);
	assert_int_equal(stack_app_in(s, &d), 5);
	assert_memory_equal(d, "hello", 5);
	assert_int_equal(stack_app_done(s, 5), 0);
	assert_int_equal(stack_app_in(s, &d), 0);
	assert_int_equal(stack_from_app(s, (const uint8_t *)"world!", 6), 6);
	assert_int_equal(stack_wire_out(s, &d), 6);
	assert_memory_equal(d, "world!", 6);
	assert_int_equal(stack_wire_done(s, 6), 0);
	assert_int_equal(stack_wire_out(s, &d), 0);
	assert_int_equal(stack_shutdown(s), 0);
	assert_null(stack_error(s));
	stack_free(s);
}

/* An empty stack holds one queue's worth each way, then takes no more. */
static void empty_stack_is_bounded(void **state)
{
	(void)state;
	stack *s = stack_new();
	uint8_t *big = pattern(STACK_QUEUE_CAP + 100, 1);
	assert_int_equal(stack_from_wire(s, big, STACK_QUEUE_CAP + 100), STACK_QUEUE_CAP);
	assert_int_equal(stack_from_wire(s, big, 1), 0);
	assert_int_equal(stack_app_done(s, 100), 0);
	assert_int_equal(stack_from_wire(s, big + STACK_QUEUE_CAP, 100), 100);
	assert_int_equal(stack_app_room(s), STACK_QUEUE_CAP);
	assert_int_equal(stack_from_app(s, big, STACK_QUEUE_CAP + 1), STACK_QUEUE_CAP);
	assert_int_equal(stack_app_room(s), 0);
	free(big);
	stack_free(s);
}

static void round_trip(size_t len, size_t chunk)
{
	end c, s;
	pair(&c, &s);
	assert_false(stack_ready(c.s));
	uint8_t *up = pattern(len, 7), *down = pattern(len, 8);
	c.tx = up, c.tx_len = len;
	s.tx = down, s.tx_len = len;
	assert_int_equal(run(&c, &s, chunk), 0);
	assert_true(stack_ready(c.s));
	assert_true(stack_ready(s.s));
	assert_int_equal(s.rx_len, len);
	assert_memory_equal(s.rx, up, len);
	assert_int_equal(c.rx_len, len);
	assert_memory_equal(c.rx, down, len);
	free(up);
	free(down);
	unpair(&c, &s);
}

static void two_layers_bulk(void **state)
{
	(void)state;
	round_trip(300 * 1000, SIZE_MAX);
}

static void two_layers_byte_by_byte(void **state)
{
	(void)state;
	round_trip(3000, 1);
}

/* Bytes the app hands in before the handshake are not lost: whatever a
 * call took arrives once the stack is ready. */
static void app_bytes_before_ready(void **state)
{
	(void)state;
	end c, s;
	memset(&c, 0, sizeof c);
	memset(&s, 0, sizeof s);
	c.s = stack_new();
	s.s = stack_new();
	c.reading = s.reading = true;
	assert_int_equal(stack_push(c.s, &frame_new(true)->base), 0);
	assert_int_equal(stack_push(s.s, &frame_new(false)->base), 0);
	ssize_t k = stack_from_app(c.s, (const uint8_t *)"early", 5);
	assert_true(k >= 0 && k <= 5);
	assert_int_equal(stack_start(c.s), 0);
	c.tx = (const uint8_t *)"early", c.tx_len = 5, c.tx_off = (size_t)k;
	assert_int_equal(run(&c, &s, SIZE_MAX), 0);
	assert_int_equal(s.rx_len, 5);
	assert_memory_equal(s.rx, "early", 5);
	unpair(&c, &s);
}

/* The server's app reads nothing: the stacks fill to their bounds and
 * stop taking bytes; once it reads, everything arrives in order. */
static void backpressure(void **state)
{
	(void)state;
	end c, s;
	pair(&c, &s);
	size_t len = 40 * STACK_QUEUE_CAP;
	uint8_t *up = pattern(len, 9);
	c.tx = up, c.tx_len = len;
	s.reading = false;
	assert_int_equal(run(&c, &s, SIZE_MAX), 0);
	/* Held: the client's queues (3 each way per 2 layers), the server's,
	 * and no more. */
	assert_true(c.tx_off < len);
	assert_true(c.tx_off <= 2 * 3 * STACK_QUEUE_CAP);
	const uint8_t *d;
	size_t full = stack_app_in(s.s, &d);
	assert_true(full > STACK_QUEUE_CAP - FRAME_MAX && full <= STACK_QUEUE_CAP);
	assert_int_equal(stack_from_app(c.s, up, 1), 0);
	size_t held = c.tx_off;
	assert_int_equal(run(&c, &s, SIZE_MAX), 0);
	assert_int_equal(c.tx_off, held); /* still stuck: nothing moved */
	s.reading = true;
	assert_int_equal(run(&c, &s, SIZE_MAX), 0);
	assert_int_equal(s.rx_len, len);
	assert_memory_equal(s.rx, up, len);
	free(up);
	unpair(&c, &s);
}

static void error_carries_the_layers_text(void **state)
{
	(void)state;
	end c, s;
	pair(&c, &s);
	assert_int_equal(run(&c, &s, SIZE_MAX), 0);
	uint8_t bad = 255 ^ XOR_KEY;
	assert_int_equal(stack_from_wire(s.s, &bad, 1), LAYER_ERR_PROTO);
	assert_string_equal(stack_error(s.s), "frame: bad length");
	/* The stack stays failed, with the first text. */
	assert_int_equal(stack_from_wire(s.s, &bad, 1), LAYER_ERR_PROTO);
	assert_int_equal(stack_from_app(s.s, &bad, 1), LAYER_ERR_PROTO);
	assert_int_equal(stack_shutdown(s.s), LAYER_ERR_PROTO);
	assert_string_equal(stack_error(s.s), "frame: bad length");
	assert_null(stack_error(c.s));
	unpair(&c, &s);
}

static void error_without_text_names_the_layer(void **state)
{
	(void)state;
	stack *s = stack_new();
	layer *m = calloc(1, sizeof *m);
	m->ops = &mute_ops;
	assert_int_equal(stack_push(s, xor_new()), 0);
	assert_int_equal(stack_push(s, m), 0);
	assert_int_equal(stack_from_wire(s, (const uint8_t *)"x", 1), LAYER_ERR_PROTO);
	assert_string_equal(stack_error(s), "mute: error");
	stack_free(s);
}

static void push_is_bounded(void **state)
{
	(void)state;
	stack *s = stack_new();
	for (size_t i = 0; i < STACK_MAX_LAYERS; i++)
		assert_int_equal(stack_push(s, xor_new()), 0);
	assert_int_equal(stack_push(s, xor_new()), -1); /* freed by the stack */
	assert_int_equal(stack_depth(s), STACK_MAX_LAYERS);
	stack_free(s);
}

/* shutdown sends each layer's orderly end after the app's last bytes. */
static void shutdown_after_data(void **state)
{
	(void)state;
	end c, s;
	pair(&c, &s);
	assert_int_equal(stack_from_app(c.s, (const uint8_t *)"last words", 10), 10);
	assert_int_equal(stack_shutdown(c.s), 0);
	assert_int_equal(stack_shutdown(c.s), 0); /* a second call does nothing */
	assert_false(top(&s)->peer_ended);
	assert_int_equal(run(&c, &s, 1), 0);
	assert_int_equal(s.rx_len, 10);
	assert_memory_equal(s.rx, "last words", 10);
	assert_true(top(&s)->peer_ended);
	assert_false(top(&c)->peer_ended);
	assert_false(stack_shut_pending(c.s));
	unpair(&c, &s);
}

/* The app ends while the layer cannot take what it sent (the wire is not
 * drained, the queue below the layer is full): the layer's end waits for
 * those bytes instead of refusing them after it, and goes last. */
static void shutdown_waits_for_the_bytes_queued_above(void **state)
{
	(void)state;
	end c, s;
	pair(&c, &s);
	size_t len = 3 * STACK_QUEUE_CAP;
	uint8_t *data = pattern(len, 7);
	size_t in = 0;
	ssize_t k;
	while ((k = stack_from_app(c.s, data + in, len - in)) > 0)
		in += (size_t)k;
	assert_int_equal(k, 0);
	assert_true(in < len);
	assert_int_equal(stack_shutdown(c.s), 0);
	assert_true(stack_shut_pending(c.s));
	c.tx = data, c.tx_len = in, c.tx_off = in; /* handed in already */
	assert_int_equal(run(&c, &s, SIZE_MAX), 0);
	assert_false(stack_shut_pending(c.s));
	assert_int_equal(s.rx_len, in);
	assert_memory_equal(s.rx, data, in);
	assert_true(top(&s)->peer_ended);
	free(data);
	unpair(&c, &s);
}

/* "clock": wants to run at 100, writes "due" toward the wire then, and
 * wants nothing after. */
typedef struct clock_layer {
	layer base;
	uint64_t due;
} clock_layer;

static uint64_t clock_deadline(const layer *l) { return ((const clock_layer *)l)->due; }

static int clock_on_time(layer *l, uint64_t now, layer_buf *down)
{
	clock_layer *c = (clock_layer *)l;
	assert_true(now >= c->due);
	c->due = 0;
	return layer_buf_put(down, (const uint8_t *)"due", 3) == 3 ? 0 : LAYER_ERR_STATE;
}

static const layer_ops clock_ops = {
	.name = "clock",
	.from_below = xor_below,
	.from_above = xor_above,
	.ready = always,
	.deadline = clock_deadline,
	.on_time = clock_on_time,
	.free = plain_free,
};

/* The earliest deadline of any layer is the stack's; on_time runs only the
 * layers that are due, and what they write goes down to the wire. */
static void deadlines(void **state)
{
	(void)state;
	stack *s = stack_new();
	layer *x = malloc(sizeof *x);
	clock_layer *c = malloc(sizeof *c);
	x->ops = &xor_ops;
	*c = (clock_layer){.base.ops = &clock_ops, .due = 100};
	assert_int_equal(stack_push(s, &c->base), 0);
	assert_int_equal(stack_push(s, x), 0); /* a layer without timers above */
	assert_int_equal(stack_deadline(s), 100);
	assert_int_equal(stack_on_time(s, 99), 0);
	const uint8_t *d;
	assert_int_equal(stack_wire_out(s, &d), 0);
	assert_int_equal(stack_on_time(s, 100), 0);
	assert_int_equal(stack_wire_out(s, &d), 3);
	assert_memory_equal(d, "due", 3);
	assert_int_equal(stack_deadline(s), 0);
	stack_free(s);
	/* a stack without timers has no deadline */
	s = stack_new();
	x = malloc(sizeof *x);
	x->ops = &xor_ops;
	assert_int_equal(stack_push(s, x), 0);
	assert_int_equal(stack_deadline(s), 0);
	stack_free(s);
}

/* "gate": a proxy client's framing in small: "HELLO" out at start, the
 * peer's "OK" taken, then every byte passes unchanged both ways and the
 * layer says it is a pass-through (layer.h passthrough). */
typedef struct gate_layer {
	layer base;
	size_t ok; /* bytes of "OK" seen */
} gate_layer;

static int gate_start(layer *l, layer_buf *down)
{
	(void)l;
	return layer_buf_put(down, (const uint8_t *)"HELLO", 5) == 5 ? 0 : LAYER_ERR_STATE;
}

static ssize_t gate_below(layer *l, const uint8_t *in, size_t len, layer_buf *up, layer_buf *down)
{
	(void)down;
	gate_layer *g = (gate_layer *)l;
	size_t i = 0;
	for (; i < len && g->ok < 2; i++, g->ok++)
		if (in[i] != "OK"[g->ok])
			return LAYER_ERR_PROTO;
	return (ssize_t)(i + layer_buf_put(up, in + i, len - i));
}

static ssize_t gate_above(layer *l, const uint8_t *in, size_t len, layer_buf *down)
{
	(void)l;
	return (ssize_t)layer_buf_put(down, in, len);
}

static bool gate_open(const layer *l) { return ((const gate_layer *)l)->ok == 2; }

static const layer_ops gate_ops = {
	.name = "gate",
	.start = gate_start,
	.from_below = gate_below,
	.from_above = gate_above,
	.ready = always,
	.passthrough = gate_open,
	.free = plain_free,
};

static layer *gate_new(void)
{
	gate_layer *g = calloc(1, sizeof *g);
	assert_non_null(g);
	g->base.ops = &gate_ops;
	return &g->base;
}

/* A stack is a pass-through once every layer says it is one and no byte
 * waits in any queue: not while its first bytes wait for the wire, not
 * before the peer's answer, not while app bytes wait either way. */
static void passthrough_once_the_layers_are_and_nothing_waits(void **state)
{
	(void)state;
	const uint8_t *d;
	stack *s = stack_new();
	assert_true(stack_passthrough(s)); /* no layer: the identity */
	assert_int_equal(stack_from_wire(s, (const uint8_t *)"x", 1), 1);
	assert_false(stack_passthrough(s)); /* a byte waits for the app */
	assert_int_equal(stack_app_done(s, 1), 0);
	assert_true(stack_passthrough(s));
	stack_free(s);

	s = stack_new();
	assert_int_equal(stack_push(s, gate_new()), 0);
	assert_false(stack_passthrough(s)); /* not started */
	assert_int_equal(stack_start(s), 0);
	assert_int_equal(stack_wire_out(s, &d), 5);
	assert_false(stack_passthrough(s)); /* "HELLO" waits for the wire */
	assert_int_equal(stack_wire_done(s, 5), 0);
	assert_false(stack_passthrough(s)); /* no answer yet */
	assert_int_equal(stack_from_wire(s, (const uint8_t *)"O", 1), 1);
	assert_false(stack_passthrough(s));
	assert_int_equal(stack_from_wire(s, (const uint8_t *)"Kdata", 5), 5);
	assert_int_equal(stack_app_in(s, &d), 4);
	assert_false(stack_passthrough(s)); /* "data" waits for the app */
	assert_int_equal(stack_app_done(s, 4), 0);
	assert_true(stack_passthrough(s));
	assert_int_equal(stack_from_app(s, (const uint8_t *)"abc", 3), 3);
	assert_false(stack_passthrough(s)); /* "abc" waits for the wire */
	assert_int_equal(stack_wire_out(s, &d), 3);
	assert_int_equal(stack_wire_done(s, 3), 0);
	assert_true(stack_passthrough(s));
	assert_int_equal(stack_shutdown(s), 0);
	assert_false(stack_passthrough(s)); /* the orderly end began */
	stack_free(s);
}

/* One layer that changes bytes, or has no say, keeps the stack. */
static void passthrough_needs_every_layer(void **state)
{
	(void)state;
	const uint8_t *d;
	stack *s = stack_new();
	assert_int_equal(stack_push(s, xor_new()), 0);
	assert_int_equal(stack_push(s, gate_new()), 0);
	assert_int_equal(stack_start(s), 0);
	assert_int_equal(stack_wire_done(s, stack_wire_out(s, &d)), 0);
	uint8_t ok[2] = {'O' ^ XOR_KEY, 'K' ^ XOR_KEY};
	assert_int_equal(stack_from_wire(s, ok, 2), 2);
	assert_true(stack_ready(s));
	assert_false(stack_passthrough(s)); /* xor is below the open gate */
	stack_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(empty_stack_passes_bytes),
		cmocka_unit_test(deadlines),
		cmocka_unit_test(empty_stack_is_bounded),
		cmocka_unit_test(two_layers_bulk),
		cmocka_unit_test(two_layers_byte_by_byte),
		cmocka_unit_test(app_bytes_before_ready),
		cmocka_unit_test(backpressure),
		cmocka_unit_test(error_carries_the_layers_text),
		cmocka_unit_test(error_without_text_names_the_layer),
		cmocka_unit_test(push_is_bounded),
		cmocka_unit_test(shutdown_after_data),
		cmocka_unit_test(shutdown_waits_for_the_bytes_queued_above),
		cmocka_unit_test(passthrough_once_the_layers_are_and_nothing_waits),
		cmocka_unit_test(passthrough_needs_every_layer),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
