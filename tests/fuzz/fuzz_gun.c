/* fuzz_gun.c - libFuzzer target: the gun reader over arbitrary bytes, whole and in random-ish pieces through small out buffers, which must agree. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "transport/gun.h"

/* Input: one byte seeding the pieces and the out buffers' sizes, then the
 * bytes. Read once whole (out has room for every byte: data is never more
 * than the input) and once in pieces; the data passed up, the error and
 * where the reader stands must be the same. */

#define CHECK(x)                                                                                   \
	do {                                                                                       \
		if (!(x))                                                                          \
			abort();                                                                   \
	} while (0)

static const size_t OUT_CAPS[8] = {0, 1, 2, 3, 7, 64, 4096, 1 << 20};

static bool known_error(ssize_t r)
{
	return r == GUN_ERR_COMPRESSED || r == GUN_ERR_TOO_LARGE || r == GUN_ERR_MALFORMED;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	uint32_t x = data[0] * 2654435761u + 1;
	data++, size--;
	uint8_t *whole = malloc(size + 1), *pieces = malloc(size + 1);
	CHECK(whole && pieces);

	gun_reader a;
	gun_reader_init(&a);
	layer_buf out = {.data = whole, .cap = size};
	ssize_t ra = gun_read(&a, data, size, &out);
	CHECK(ra < 0 ? known_error(ra) : (size_t)ra == size);
	if (ra < 0) {
		CHECK(strncmp(gun_error((int)ra), "grpc: ", 6) == 0);
		CHECK(gun_read(&a, data, size, &out) == ra); /* stays failed */
	}
	size_t whole_len = out.len;

	gun_reader b = {0};
	size_t off = 0, got = 0;
	ssize_t rb = 0;
	while (off < size) {
		x = x * 1103515245u + 12345u;
		size_t n = 1 + (x >> 16) % 64, cap = OUT_CAPS[(x >> 8) & 7];
		if (n > size - off)
			n = size - off;
		if (cap > size - got)
			cap = size - got;
		layer_buf o = {.data = pieces + got, .cap = cap};
		rb = gun_read(&b, data + off, n, &o);
		if (rb < 0) {
			CHECK(known_error(rb));
			got += o.len;
			break;
		}
		CHECK((size_t)rb <= n && o.len <= cap && o.len <= (size_t)rb);
		/* with room for a byte, a piece always moves */
		if (cap > 0)
			CHECK(rb > 0);
		off += (size_t)rb;
		got += o.len;
	}
	CHECK((ra < 0) == (rb < 0));
	if (ra < 0)
		CHECK(ra == rb);
	else
		CHECK(gun_reader_at_boundary(&a) == gun_reader_at_boundary(&b));
	CHECK(got == whole_len && memcmp(whole, pieces, got) == 0);
	free(whole);
	free(pieces);
	return 0;
}
