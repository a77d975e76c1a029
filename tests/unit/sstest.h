/* sstest.h - what the tests of the Shadowsocks AEAD and 2022 server cores share: a fixed salt and destination, the server core fed the way the shell feeds it, the replay filter as its callback, every truncation of a first flight. Needs cmocka, included before this header. */
#ifndef ETM_TESTS_SSTEST_H
#define ETM_TESTS_SSTEST_H

#include <stddef.h>
#include <stdint.h>

#include "proto/shadowsocks.h"
#include "proto/shadowsocks_server.h"

static const uint8_t SALT[32] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15,
                                 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31};

static const char AUTH[] =
	"shadowsocks: authentication failed (no user's key opens the first chunk)";

static inline addr_dest example_com(void)
{
	addr_dest d = {0};
	assert_int_equal(addr_dest_set_domain(&d, "example.com", 11, 443), 0);
	return d;
}

typedef struct result {
	ssize_t used; /* total consumed */
	proto_event ev;
} result;

/* Feeds in[0, len) step bytes at a time (0: whole) the way the shell does:
 * unconsumed bytes offered again with the next ones. Stops at a decision. */
static inline result serve_at(ss_server *s, const uint8_t *in, size_t len, size_t step,
                              int64_t now)
{
	result r = {0};
	size_t arrived = 0, off = 0;
	proto_out out;
	while (arrived < len) {
		arrived += step && len - arrived > step ? step : len - arrived;
		for (;;) {
			ssize_t n = ss_server_feed(s, in + off, arrived - off, now, &out, &r.ev);
			assert_int_equal(out.len, 0);
			if (n < 0 || r.ev.kind != PROTO_EV_NONE) {
				if (n > 0)
					off += (size_t)n;
				r.used = n < 0 ? n : (ssize_t)off;
				return r;
			}
			off += (size_t)n;
			if (n == 0 || off == arrived)
				break;
		}
	}
	r.used = (ssize_t)off;
	return r;
}

/* ss_server_init's replay callback over an ss_replay filter (ud). */
static inline int replay_add(void *ud, const uint8_t *salt, size_t len, int64_t now)
{
	return ss_replay_add(ud, salt, len, now);
}

/* Every cut of first[0, len) short of the whole: the server decides nothing
 * and consumes no more than it was given. */
static inline void assert_waits_on_every_truncation(ss_account *a, const uint8_t *first,
                                                    size_t len, int64_t now)
{
	for (size_t cut = 0; cut < len; cut++) {
		ss_server sv;
		ss_server_init(&sv, a, 1, NULL, NULL);
		result r = serve_at(&sv, first, cut, 0, now);
		assert_int_equal(r.ev.kind, PROTO_EV_NONE);
		assert_true(r.used >= 0 && (size_t)r.used <= cut);
		ss_server_free(&sv);
	}
}


/* Gives l all of data[0, len) from above, its output into *w; l takes some
 * on every call. */
static inline void send_all(layer *l, const uint8_t *data, size_t len, layer_buf *w)
{
	for (size_t off = 0; off < len;) {
		ssize_t n = l->ops->from_above(l, data + off, len - off, w);
		assert_true(n > 0);
		off += (size_t)n;
	}
}

/* Gives l all of data[0, len) from below, what it sends up into *up (and
 * nothing down); l takes some on every call. */
static inline void send_all_up(layer *l, const uint8_t *data, size_t len, layer_buf *up)
{
	for (size_t k = 0; k < len;) {
		ssize_t n = l->ops->from_below(l, data + k, len - k, up, NULL);
		assert_true(n > 0);
		k += (size_t)n;
	}
}

/* Gives l in[off, len) from above, at most step bytes a call, its output
 * into *down; l never fails. */
static inline void feed_above(layer *l, const uint8_t *in, size_t off, size_t len, size_t step,
                              layer_buf *down)
{
	while (off < len) {
		ssize_t n = l->ops->from_above(l, in + off, len - off > step ? step : len - off, down);
		assert_true(n >= 0);
		off += (size_t)n;
	}
}

/* l, a client layer just made, sends exactly first[0, first_len) when
 * started and exactly second[0, second_len) for "hello"; frees l. */
static inline void assert_client_sends(layer *l, const uint8_t *first, size_t first_len,
                                       const uint8_t *second, size_t second_len)
{
	uint8_t out[2048];
	layer_buf down = {out, 0, sizeof out};
	assert_int_equal(l->ops->start(l, &down), 0);
	assert_true(l->ops->ready(l));
	assert_int_equal(down.len, first_len);
	assert_memory_equal(out, first, first_len);
	down.len = 0;
	assert_int_equal(l->ops->from_above(l, (const uint8_t *)"hello", 5, &down), 5);
	assert_int_equal(down.len, second_len);
	assert_memory_equal(out, second, second_len);
	l->ops->free(l);
}

#endif
