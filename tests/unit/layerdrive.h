/* layerdrive.h - drives a proxy client layer (tests of http_client and socks_client) the way the stack does, against a server's bytes arriving whole, byte by byte or cut in two, and compares what two runs produced. Needs cmocka, included before this header. */
#ifndef ETM_TESTS_LAYERDRIVE_H
#define ETM_TESTS_LAYERDRIVE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/addr.h"
#include "base/layer.h"

/* What a run produced, however the server's bytes arrived. */
typedef struct outcome {
	int err;          /* 0, or the LAYER_ERR_* a call returned */
	const char *text; /* points at text_buf: the layer is freed before comparing */
	char text_buf[256];
	bool ready;
	bool passthrough; /* layer.h passthrough, once the server's bytes are in */
	bool in_handshake; /* the caller's: the module's own in_handshake() */
	uint8_t sent[2048];
	size_t sent_len;
	uint8_t up[256];
	size_t up_len;
	char relay[ADDR_TEXT_MAX]; /* the caller's (SOCKS UDP ASSOCIATE); "" when none */
} outcome;

/* Runs l against the server's bytes srv, which arrive step bytes at a
 * time (0: all at once; otherwise cut at `cut` first when cut > 0), the
 * way the stack drives a layer: bytes not consumed are offered again with
 * the next ones appended. Fills *o but for in_handshake and relay. */
static inline void drive_layer(layer *l, const uint8_t *srv, size_t len, size_t step, size_t cut,
                               outcome *o)
{
	memset(o, 0, sizeof *o);
	layer_buf down = {.data = o->sent, .cap = sizeof o->sent};
	layer_buf up = {.data = o->up, .cap = sizeof o->up};
	uint8_t *held = malloc(len ? len : 1);
	assert_non_null(held);
	size_t held_len = 0, arrived = 0;
	int rc = l->ops->start(l, &down);
	while (rc == 0) {
		size_t n = step ? step : len;
		if (cut && arrived == 0)
			n = cut;
		if (n > len - arrived)
			n = len - arrived;
		memcpy(held + held_len, srv + arrived, n);
		held_len += n;
		arrived += n;
		ssize_t r = l->ops->from_below(l, held, held_len, &up, &down);
		if (r < 0) {
			rc = (int)r;
			break;
		}
		memmove(held, held + r, held_len - (size_t)r);
		held_len -= (size_t)r;
		if (arrived == len)
			break;
	}
	free(held);
	o->err = rc;
	const char *why = l->ops->error(l);
	if (why) {
		snprintf(o->text_buf, sizeof o->text_buf, "%s", why);
		o->text = o->text_buf;
	}
	o->ready = l->ops->ready(l);
	o->passthrough = l->ops->passthrough && l->ops->passthrough(l);
	o->sent_len = down.len;
	o->up_len = up.len;
}

static inline void same(const outcome *a, const outcome *b)
{
	assert_int_equal(a->err, b->err);
	assert_int_equal(a->ready, b->ready);
	assert_int_equal(a->passthrough, b->passthrough);
	assert_int_equal(a->in_handshake, b->in_handshake);
	if (a->text || b->text)
		assert_string_equal(a->text, b->text);
	assert_int_equal(a->sent_len, b->sent_len);
	assert_memory_equal(a->sent, b->sent, a->sent_len);
	assert_int_equal(a->up_len, b->up_len);
	assert_memory_equal(a->up, b->up, a->up_len);
	assert_string_equal(a->relay, b->relay);
}

#endif
