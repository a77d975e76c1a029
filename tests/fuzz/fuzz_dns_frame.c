/* fuzz_dns_frame.c - libFuzzer target: both DNS stream readers on any bytes in any slicing, checking bounds, progress and that slicing changes nothing. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/dns_frame.h"

/* Input: a slicing byte, then the stream. The slicing byte seeds the slice
 * sizes: 0xff feeds everything at once; otherwise slices are 1 to
 * 2^(byte % 17) bytes long, so byte % 17 == 0 is byte by byte. The same
 * stream goes to the length-prefix reader and to the DoH reader. */

#define CHECK(x)                                                                                   \
	do {                                                                                       \
		if (!(x))                                                                          \
			abort();                                                                   \
	} while (0)

static const char HTTPS_PREFIX[] = "dns: https: ";

typedef struct slicer {
	uint32_t x;
	size_t max; /* 0: all at once */
} slicer;

static slicer slicer_new(uint8_t sel)
{
	slicer s = {.x = 0x9e3779b9u ^ sel, .max = sel == 0xff ? 0 : (size_t)1 << (sel % 17)};
	return s;
}

static size_t slice(slicer *s, size_t left)
{
	if (!s->max)
		return left;
	s->x ^= s->x << 13; /* xorshift32 */
	s->x ^= s->x >> 17;
	s->x ^= s->x << 5;
	size_t k = 1 + s->x % s->max;
	return k < left ? k : left;
}

/* What a run saw: messages counted and hashed (FNV-1a over lengths and
 * bytes), and how it ended. */
typedef struct outcome {
	size_t count;
	uint64_t hash;
	int last;
	char err[64]; /* a copy: the reader's status text is overwritten by the next run */
} outcome;

static void mix(outcome *o, const uint8_t *p, size_t n)
{
	uint8_t l[3] = {(uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n};
	for (size_t i = 0; i < sizeof l; i++)
		o->hash = (o->hash ^ l[i]) * 0x100000001b3ull;
	for (size_t i = 0; i < n; i++)
		o->hash = (o->hash ^ p[i]) * 0x100000001b3ull;
	o->count++;
}

static dns_tcp_reader tcp;
static doh_reader doh;

static outcome run_tcp(const uint8_t *d, size_t n, uint8_t sel)
{
	outcome o = {.hash = 0xcbf29ce484222325ull};
	slicer s = slicer_new(sel);
	dns_tcp_reader_init(&tcp);
	size_t off = 0;
	while (off < n) {
		size_t k = slice(&s, n - off), used = SIZE_MAX, len = 0;
		const uint8_t *msg = NULL;
		int rc = dns_tcp_feed(&tcp, d + off, k, &used, &msg, &len);
		CHECK(used <= k);
		off += used;
		o.last = rc;
		if (rc == 0) {
			CHECK(used == k); /* "need more" took everything: no spinning */
			continue;
		}
		if (rc < 0) {
			size_t again = SIZE_MAX;
			CHECK(dns_tcp_feed(&tcp, d + off, n - off, &again, &msg, &len) == -1);
			CHECK(again == 0);
			break;
		}
		CHECK(rc == 1 && used > 0);
		CHECK(len >= 1 && len <= DNS_FRAME_MAX);
		CHECK(msg >= tcp.buf && msg + len <= tcp.buf + sizeof tcp.buf);
		mix(&o, msg, len);
	}
	return o;
}

static outcome run_doh(const uint8_t *d, size_t n, uint8_t sel)
{
	outcome o = {.hash = 0xcbf29ce484222325ull};
	slicer s = slicer_new(sel);
	doh_reader_init(&doh);
	size_t off = 0;
	while (off < n) {
		size_t k = slice(&s, n - off), used = SIZE_MAX, len = 0;
		const uint8_t *body = NULL;
		const char *err = NULL;
		int rc = doh_feed(&doh, d + off, k, &used, &body, &len, &err);
		CHECK(used <= k);
		off += used;
		o.last = rc;
		if (rc == 0) {
			CHECK(used == k);
			continue;
		}
		if (rc < 0) {
			CHECK(err && strncmp(err, HTTPS_PREFIX, sizeof HTTPS_PREFIX - 1) == 0);
			CHECK(snprintf(o.err, sizeof o.err, "%s", err) < (int)sizeof o.err);
			const char *again = NULL;
			size_t u = SIZE_MAX;
			CHECK(doh_feed(&doh, d + off, n - off, &u, &body, &len, &again) == -1);
			CHECK(u == 0 && again && strcmp(again, err) == 0);
			CHECK(doh_reader_eof(&doh, false) == NULL);
			break;
		}
		CHECK(rc == 1 && used > 0);
		CHECK(len >= 1 && len <= DNS_FRAME_MAX);
		CHECK(body >= (const uint8_t *)&doh && body + len <= (const uint8_t *)(&doh + 1));
		mix(&o, body, len);
		o.hash ^= doh_reader_closing(&doh);
		CHECK(doh_reader_eof(&doh, false) == NULL); /* nothing of the next taken yet */
	}
	const char *e = doh_reader_eof(&doh, true);
	CHECK(e && strncmp(e, HTTPS_PREFIX, sizeof HTTPS_PREFIX - 1) == 0);
	return o;
}

static bool same(const outcome *a, const outcome *b)
{
	return a->count == b->count && a->hash == b->hash && a->last == b->last &&
	       strcmp(a->err, b->err) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	uint8_t sel = data[0];
	const uint8_t *d = data + 1;
	size_t n = size - 1;

	outcome a = run_tcp(d, n, sel);
	outcome b = run_tcp(d, n, 0xff);
	CHECK(same(&a, &b));

	a = run_doh(d, n, sel);
	b = run_doh(d, n, 0xff);
	CHECK(same(&a, &b));
	return 0;
}
