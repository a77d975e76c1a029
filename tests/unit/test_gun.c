/* test_gun.c - the gun framing: the writer's header byte for byte, the streaming reader whole, byte by byte and under backpressure, and its errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "transport/gun.h"

/* ---- the writer's header ---- */

typedef struct header_case {
	size_t len;
	uint8_t want[GUN_HEADER_MAX];
	size_t want_len;
} header_case;

/* gRPC's Length-Prefixed-Message (flag, 4-byte big-endian length) around
 * a Hunk whose field 1 (key 0x0a: field 1 << 3 | wire type 2) holds len
 * bytes behind a protobuf varint (7 bits a byte, low first, top bit set
 * on every byte but the last). */
static void header_bytes(void **state)
{
	(void)state;
	static const header_case cases[] = {
		/* flag 0; body 2 = key + varint 0; key; varint 0 */
		{0, {0x00, 0x00, 0x00, 0x00, 0x02, 0x0a, 0x00}, 7},
		/* body 3 = key + varint + 1 byte; varint 1 */
		{1, {0x00, 0x00, 0x00, 0x00, 0x03, 0x0a, 0x01}, 7},
		/* body 129 = 1 + 1 + 127; varint 127 is one byte, 0x7f */
		{127, {0x00, 0x00, 0x00, 0x00, 0x81, 0x0a, 0x7f}, 7},
		/* body 131 = 1 + 2 + 128; varint 128 = 0x80 (low 7 bits 0, more)
		 * 0x01 (128 >> 7) */
		{128, {0x00, 0x00, 0x00, 0x00, 0x83, 0x0a, 0x80, 0x01}, 8},
		/* GRPC_PIECE_MAX: body 16377 = 0x3ff9; varint 16374 = 0xf6
		 * (16374 & 0x7f = 0x76, more) 0x7f (16374 >> 7 = 127) */
		{16374, {0x00, 0x00, 0x00, 0x3f, 0xf9, 0x0a, 0xf6, 0x7f}, 8},
		/* 2^21: body 2097157 = 0x200005; varint 0x80 0x80 0x80 (three
		 * zero groups, more) 0x01 (2^21 >> 21) */
		{1u << 21, {0x00, 0x00, 0x20, 0x00, 0x05, 0x0a, 0x80, 0x80, 0x80, 0x01}, 10},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		uint8_t out[GUN_HEADER_MAX];
		memset(out, 0xee, sizeof out);
		size_t n = gun_header(out, cases[i].len);
		assert_int_equal(n, cases[i].want_len);
		assert_memory_equal(out, cases[i].want, n);
	}
}

/* ---- building messages by hand ---- */

/* A message: the 5-byte prefix (flag 0) and body[0, n); its length. */
static size_t message(uint8_t *out, const void *body, size_t n)
{
	out[0] = 0;
	out[1] = (uint8_t)(n >> 24);
	out[2] = (uint8_t)(n >> 16);
	out[3] = (uint8_t)(n >> 8);
	out[4] = (uint8_t)n;
	memcpy(out + 5, body, n);
	return 5 + n;
}

/* What the writer sends for data[0, n): the header, then the data. */
static size_t hunk(uint8_t *out, const void *data, size_t n)
{
	size_t h = gun_header(out, n);
	memcpy(out + h, data, n);
	return h + n;
}

/* Reads in all at once into a roomy out; returns what gun_read returned. */
static ssize_t read_all(gun_reader *r, const uint8_t *in, size_t len, uint8_t *got, size_t *got_len)
{
	layer_buf out = {.data = got, .len = 0, .cap = 1 << 16};
	ssize_t n = gun_read(r, in, len, &out);
	*got_len = out.len;
	return n;
}

/* ---- the reader ---- */

static void one_message(void **state)
{
	(void)state;
	uint8_t in[64], got[1 << 16];
	size_t n = hunk(in, "hello", 5), got_len;
	gun_reader r;
	gun_reader_init(&r);
	assert_int_equal(read_all(&r, in, n, got, &got_len), (ssize_t)n);
	assert_int_equal(got_len, 5);
	assert_memory_equal(got, "hello", 5);
	assert_true(gun_reader_at_boundary(&r));
}

static void several_messages(void **state)
{
	(void)state;
	uint8_t in[256], got[1 << 16];
	size_t n = hunk(in, "one ", 4);
	n += hunk(in + n, "", 0);
	n += hunk(in + n, "two ", 4);
	n += hunk(in + n, "three", 5);
	size_t got_len;
	gun_reader r = {0}; /* a zeroed reader is a fresh one */
	assert_int_equal(read_all(&r, in, n, got, &got_len), (ssize_t)n);
	assert_int_equal(got_len, 13);
	assert_memory_equal(got, "one two three", 13);
	assert_true(gun_reader_at_boundary(&r));
}

/* Every split of the stream gives the same bytes: one byte at a time, and
 * cut in two at every point. */
static void split_at_every_byte(void **state)
{
	(void)state;
	static uint8_t in[1024], data[300];
	for (size_t i = 0; i < sizeof data; i++)
		data[i] = (uint8_t)(i * 7 + 3);
	size_t n = hunk(in, data, 200); /* a two-byte varint */
	n += hunk(in + n, data + 200, 100);
	uint8_t got[1 << 16];

	gun_reader r;
	gun_reader_init(&r);
	layer_buf out = {.data = got, .cap = sizeof got};
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(gun_read(&r, in + i, 1, &out), 1);
		/* between the two messages only */
		assert_int_equal(gun_reader_at_boundary(&r), i == n - 1 || i == n - 100 - 8);
	}
	assert_int_equal(out.len, 300);
	assert_memory_equal(got, data, 300);

	for (size_t cut = 0; cut <= n; cut++) {
		gun_reader_init(&r);
		out.len = 0;
		assert_int_equal(gun_read(&r, in, cut, &out), (ssize_t)cut);
		assert_int_equal(gun_read(&r, in + cut, n - cut, &out), (ssize_t)(n - cut));
		assert_int_equal(out.len, 300);
		assert_memory_equal(got, data, 300);
	}
}

/* A MultiHunk: field 1 repeated in one message, passed up in order. */
static void multi_hunk(void **state)
{
	(void)state;
	static const uint8_t body[] = {0x0a, 3, 'a', 'b', 'c', 0x0a, 0, 0x0a, 2, 'd', 'e'};
	uint8_t in[64], got[1 << 16];
	size_t n = message(in, body, sizeof body), got_len;
	gun_reader r;
	gun_reader_init(&r);
	assert_int_equal(read_all(&r, in, n, got, &got_len), (ssize_t)n);
	assert_int_equal(got_len, 5);
	assert_memory_equal(got, "abcde", 5);
	assert_true(gun_reader_at_boundary(&r));
}

/* Fields other than 1 are skipped by wire type, and so is field 1 when it
 * is not length-delimited. */
static void unknown_fields_skipped(void **state)
{
	(void)state;
	static const uint8_t body[] = {
		0x10, 0x96, 0x01,                               /* field 2, varint 150 */
		0x0a, 2, 'a', 'b',                              /* field 1: "ab" */
		0x19, 1, 2, 3, 4, 5, 6, 7, 8,                   /* field 3, fixed64 */
		0x22, 3, 'x', 'y', 'z',                         /* field 4, bytes "xyz" */
		0x2d, 9, 9, 9, 9,                               /* field 5, fixed32 */
		0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, /* field 1 as a varint: */
		0xff, 0xff, 0x01,                               /* ten bytes, the most */
		0x0d, 'q', 'q', 'q', 'q',                       /* field 1 as a fixed32 */
		0x0a, 1, 'c',                                   /* field 1: "c" */
		0x82, 0x01, 1, 'w',                             /* field 16 (two-byte key), "w" */
		0x30, 0,                                        /* field 6, varint 0, last */
	};
	uint8_t in[128], got[1 << 16];
	size_t n = message(in, body, sizeof body), got_len;
	gun_reader r;
	gun_reader_init(&r);
	assert_int_equal(read_all(&r, in, n, got, &got_len), (ssize_t)n);
	assert_int_equal(got_len, 3);
	assert_memory_equal(got, "abc", 3);
	assert_true(gun_reader_at_boundary(&r));
	/* and byte by byte */
	gun_reader_init(&r);
	layer_buf out = {.data = got, .cap = sizeof got};
	for (size_t i = 0; i < n; i++)
		assert_int_equal(gun_read(&r, in + i, 1, &out), 1);
	assert_int_equal(out.len, 3);
	assert_memory_equal(got, "abc", 3);
}

/* A message with no fields: nothing passes up, the reader stands between
 * messages right after its prefix. */
static void empty_message(void **state)
{
	(void)state;
	uint8_t in[32], got[1 << 16];
	size_t n = message(in, "", 0);
	n += hunk(in + n, "x", 1);
	size_t got_len;
	gun_reader r;
	gun_reader_init(&r);
	assert_int_equal(read_all(&r, in, 5, got, &got_len), 5);
	assert_int_equal(got_len, 0);
	assert_true(gun_reader_at_boundary(&r));
	assert_int_equal(read_all(&r, in + 5, n - 5, got, &got_len), (ssize_t)(n - 5));
	assert_int_equal(got_len, 1);
	assert_int_equal(got[0], 'x');
}

/* A small out: the reader consumes only the data it could pass up (and
 * the framing before it), and resumes where it stopped. */
static void backpressure(void **state)
{
	(void)state;
	static uint8_t in[1024], data[500];
	for (size_t i = 0; i < sizeof data; i++)
		data[i] = (uint8_t)(i ^ 0x5a);
	size_t n = hunk(in, data, 300);
	size_t first = n;
	n += hunk(in + n, data + 300, 200);
	uint8_t small[7], got[600];
	size_t got_len = 0, off = 0, calls = 0;
	gun_reader r;
	gun_reader_init(&r);

	/* the first call: the 8 header bytes and 7 data bytes */
	layer_buf out = {.data = small, .cap = sizeof small};
	assert_int_equal(gun_read(&r, in, n, &out), 8 + 7);
	assert_int_equal(out.len, 7);
	/* a full out takes nothing more */
	assert_int_equal(gun_read(&r, in + 15, n - 15, &out), 0);

	memcpy(got, small, out.len);
	got_len = out.len;
	off = 15;
	while (off < n) {
		out.len = 0;
		ssize_t k = gun_read(&r, in + off, n - off, &out);
		assert_true(k > 0);
		/* data bytes taken are never more than out could hold */
		assert_true(out.len <= sizeof small);
		memcpy(got + got_len, small, out.len);
		got_len += out.len;
		off += (size_t)k;
		if (off < first)
			assert_int_equal(out.len, sizeof small);
		calls++;
	}
	assert_true(calls > 60);
	assert_int_equal(got_len, 500);
	assert_memory_equal(got, data, 500);
	assert_true(gun_reader_at_boundary(&r));

	/* an out with no room and no data pointer at all */
	gun_reader_init(&r);
	layer_buf none = {0};
	assert_int_equal(gun_read(&r, in, n, &none), 8);
	assert_int_equal(none.len, 0);
}

/* ---- errors ---- */

static void error_texts(void **state)
{
	(void)state;
	assert_string_equal(gun_error(GUN_ERR_COMPRESSED),
	                    "grpc: a compressed message (none was announced)");
	assert_string_equal(gun_error(GUN_ERR_TOO_LARGE), "grpc: a message over 4194304 bytes");
	assert_string_equal(gun_error(GUN_ERR_MALFORMED), "grpc: a malformed Hunk message");
	assert_string_equal(gun_error(0), "grpc: error");
	assert_string_equal(gun_error(-99), "grpc: error");
	assert_int_equal(GUN_MSG_MAX, 4194304);
}

typedef struct bad_case {
	uint8_t in[32];
	size_t len;
	int err;
} bad_case;

/* Each case fails, at once and byte by byte, and stays failed. */
static void errors(void **state)
{
	(void)state;
	static const bad_case cases[] = {
		/* flag 1: compressed */
		{{0x01, 0, 0, 0, 3, 0x0a, 1, 'x'}, 8, GUN_ERR_COMPRESSED},
		{{0x80, 0, 0, 0, 0}, 5, GUN_ERR_COMPRESSED},
		/* length 4194305 = 0x400001 */
		{{0x00, 0x00, 0x40, 0x00, 0x01}, 5, GUN_ERR_TOO_LARGE},
		{{0x00, 0xff, 0xff, 0xff, 0xff}, 5, GUN_ERR_TOO_LARGE},
		/* wire types 3, 4 (groups), 6, 7 (none) */
		{{0, 0, 0, 0, 2, 0x0b, 0}, 7, GUN_ERR_MALFORMED},
		{{0, 0, 0, 0, 2, 0x0c, 0}, 7, GUN_ERR_MALFORMED},
		{{0, 0, 0, 0, 2, 0x0e, 0}, 7, GUN_ERR_MALFORMED},
		{{0, 0, 0, 0, 2, 0x0f, 0}, 7, GUN_ERR_MALFORMED},
		/* a varint value of 11 bytes */
		{{0, 0, 0, 0, 12, 0x08, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
		  0x01},
		 17, GUN_ERR_MALFORMED},
		/* a key of 11 bytes */
		{{0, 0, 0, 0, 11, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00},
		 16, GUN_ERR_MALFORMED},
		/* field 1 of 5 bytes in a body of 4 */
		{{0, 0, 0, 0, 4, 0x0a, 5, 'a', 'b'}, 9, GUN_ERR_MALFORMED},
		/* a fixed64 in a body of 5 */
		{{0, 0, 0, 0, 5, 0x09, 1, 2, 3, 4}, 10, GUN_ERR_MALFORMED},
		/* a fixed32 in a body of 3 */
		{{0, 0, 0, 0, 3, 0x0d, 1, 2}, 8, GUN_ERR_MALFORMED},
		/* a varint value that runs past the body's end */
		{{0, 0, 0, 0, 2, 0x08, 0x80, 0x01}, 8, GUN_ERR_MALFORMED},
		/* a length that runs past it */
		{{0, 0, 0, 0, 2, 0x0a, 0x80, 0x01}, 8, GUN_ERR_MALFORMED},
		/* a key that runs past it */
		{{0, 0, 0, 0, 1, 0x80, 0x01}, 7, GUN_ERR_MALFORMED},
		/* a key with no value before the end */
		{{0, 0, 0, 0, 1, 0x0a}, 6, GUN_ERR_MALFORMED},
		{{0, 0, 0, 0, 1, 0x08}, 6, GUN_ERR_MALFORMED},
		/* a good message, then a bad one */
		{{0, 0, 0, 0, 3, 0x0a, 1, 'x', 0, 0, 0, 0, 2, 0x0f, 0}, 15, GUN_ERR_MALFORMED},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const bad_case *c = &cases[i];
		uint8_t got[1 << 16];
		size_t got_len;
		gun_reader r;
		gun_reader_init(&r);
		assert_int_equal(read_all(&r, c->in, c->len, got, &got_len), c->err);
		assert_false(gun_reader_at_boundary(&r));
		/* a failed reader stays failed, on any input */
		uint8_t good[16];
		size_t n = hunk(good, "ok", 2);
		assert_int_equal(read_all(&r, good, n, got, &got_len), c->err);
		assert_int_equal(got_len, 0);
		assert_int_equal(read_all(&r, good, 0, got, &got_len), c->err);

		ssize_t k = 0;
		gun_reader_init(&r);
		layer_buf out = {.data = got, .cap = sizeof got};
		for (size_t j = 0; j < c->len && k >= 0; j++)
			k = gun_read(&r, c->in + j, 1, &out);
		assert_int_equal(k, c->err);
	}
	/* the largest message is taken */
	gun_reader r;
	gun_reader_init(&r);
	uint8_t prefix[] = {0x00, 0x00, 0x40, 0x00, 0x00}, got[16];
	layer_buf out = {.data = got, .cap = sizeof got};
	assert_int_equal(gun_read(&r, prefix, 5, &out), 5);
	assert_false(gun_reader_at_boundary(&r));
	/* a ten-byte varint is the most, and taken */
	static const uint8_t ten[] = {0, 0, 0, 0, 11, 0x08, 0xff, 0xff, 0xff, 0xff,
	                              0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
	gun_reader_init(&r);
	assert_int_equal(gun_read(&r, ten, sizeof ten, &out), (ssize_t)sizeof ten);
	assert_true(gun_reader_at_boundary(&r));
}

/* The reader stands at a boundary only between messages: not inside a
 * prefix, a key, a length or a payload. */
static void boundary(void **state)
{
	(void)state;
	static const uint8_t body[] = {0x0a, 0x82, 0x01};
	uint8_t in[200], got[1 << 16];
	size_t n = message(in, body, sizeof body);
	memset(in + n, 'p', 130);
	in[4] = (uint8_t)(sizeof body + 130);
	n += 130;
	gun_reader r;
	gun_reader_init(&r);
	assert_true(gun_reader_at_boundary(&r));
	layer_buf out = {.data = got, .cap = sizeof got};
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(gun_read(&r, in + i, 1, &out), 1);
		assert_int_equal(gun_reader_at_boundary(&r), i == n - 1);
	}
	assert_int_equal(out.len, 130);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(header_bytes),
		cmocka_unit_test(one_message),
		cmocka_unit_test(several_messages),
		cmocka_unit_test(split_at_every_byte),
		cmocka_unit_test(multi_hunk),
		cmocka_unit_test(unknown_fields_skipped),
		cmocka_unit_test(empty_message),
		cmocka_unit_test(backpressure),
		cmocka_unit_test(error_texts),
		cmocka_unit_test(errors),
		cmocka_unit_test(boundary),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
