/* fuzz_ws_frame.c - libFuzzer target: the WebSocket frame codec alone, read whole and cut at the fuzzer's points must agree, and word masking must match byte masking. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "transport/ws_frame.h"

/* Input: flags, a chunk size, then frames.
 *   flags bit 0: a server's decoder (frames must be masked);
 *   bits 1-7 with the chunk byte: where the second pass cuts its reads
 *   (1..256 bytes a call).
 * fuzz_ws and fuzz_ws_control drive the same codec through the layer;
 * this one checks its results against themselves and against section 5.3
 * done a byte at a time. */

#define CHECK(x)                                                                                   \
	do {                                                                                       \
		if (!(x))                                                                          \
			abort();                                                                   \
	} while (0)

#define MAX 4096 /* a small bound, so the fuzzer reaches WS_FRAME_TOO_BIG */

typedef struct result {
	ssize_t err;   /* the first error, or 0 */
	size_t taken;  /* bytes read, up to the failing frame's start */
	size_t frames; /* complete frames */
	uint8_t out[1 << 16];
	size_t out_len; /* every payload byte, unmasked, in order */
} result;

static result a, b;

static void run(result *r, bool server, const uint8_t *p, size_t n, size_t chunk)
{
	ws_frame_dec d = {.masked = server, .max = MAX};
	memset(r, 0, offsetof(result, out));
	r->out_len = 0;
	size_t off = 0, start = 0; /* start: where the frame being read began */
	while (off < n || ws_frame_dec_done(&d)) {
		if (ws_frame_dec_done(&d)) {
			r->frames++;
			ws_frame_dec_next(&d);
			start = off;
			continue;
		}
		size_t k = n - off < chunk ? n - off : chunk;
		if (!d.in_payload) {
			ssize_t h = ws_frame_dec_head(&d, p + off, k);
			if (h < 0) { /* a cut read took part of the header before */
				r->err = h;
				off = start;
				break;
			}
			CHECK((size_t)h <= k);
			off += (size_t)h;
			if (d.in_payload) {
				CHECK(d.len <= MAX || d.op > WS_OP_BINARY);
				CHECK(d.op <= WS_OP_BINARY || d.len <= WS_CONTROL_MAX);
			}
			continue;
		}
		size_t room = sizeof r->out - r->out_len;
		if (k > room)
			k = room;
		if (k == 0)
			break;
		size_t got = ws_frame_dec_payload(&d, r->out + r->out_len, p + off, k);
		CHECK(got <= k && d.done <= d.len);
		r->out_len += got;
		off += got;
	}
	r->taken = off;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	bool server = data[0] & 1;
	size_t chunk = ((size_t)(data[0] >> 1) << 8 | data[1]) % 256 + 1;
	data += 2, size -= 2;
	run(&a, server, data, size, SIZE_MAX);
	run(&b, server, data, size, chunk);
	CHECK(a.err == b.err && a.taken == b.taken && a.frames == b.frames);
	CHECK(a.out_len == b.out_len && memcmp(a.out, b.out, a.out_len) == 0);

	/* Masking: the word loop against the byte loop, at the offset and
	 * alignment the input's first bytes pick, in place and not. */
	if (size >= 5) {
		uint8_t key[4];
		memcpy(key, data, 4);
		uint64_t off = data[4];
		const uint8_t *src = data + 5;
		size_t n = size - 5 < sizeof a.out ? size - 5 : sizeof a.out;
		for (size_t i = 0; i < n; i++)
			a.out[i] = src[i] ^ key[(off + i) % 4];
		ws_frame_mask(b.out, src, n, key, off);
		CHECK(memcmp(a.out, b.out, n) == 0);
		memcpy(b.out + 1, src, n < sizeof b.out - 1 ? n : sizeof b.out - 1);
		size_t m = n < sizeof b.out - 1 ? n : sizeof b.out - 1;
		ws_frame_mask(b.out + 1, b.out + 1, m, key, off);
		CHECK(memcmp(a.out, b.out + 1, m) == 0);
	}
	return 0;
}
