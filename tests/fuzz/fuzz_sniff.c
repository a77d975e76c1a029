/* fuzz_sniff.c - libFuzzer target: the sniffer on any prefix, checking bounds, names and that answers never change. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/sniff.h"

/* Input: a mode byte, then the bytes.
 *   mode bit 7 clear: the bytes are the client's stream as they are.
 *   mode bit 7 set: the bytes are a handshake message, carried in handshake
 *     records of (mode & 0x7f) + 1 bytes each, so split ClientHellos are
 *     reached without the fuzzer having to find the record framing. */

#define CHECK(x)                                                                                   \
	do {                                                                                       \
		if (!(x))                                                                          \
			abort();                                                                   \
	} while (0)

/* Prefix lengths tried per input besides the whole: all of them for short
 * inputs, this many spread over longer ones. */
#define ALL_PREFIXES_MAX 300
#define SPREAD 48

/* Room for wrapping a message of up to 2 * SNIFF_MAX_BYTES in one-byte records. */
#define STREAM_MAX (12 * SNIFF_MAX_BYTES)

#define GUARD 16

/* An independent statement of what a FOUND name must be (sniff.h). */
static bool valid_name(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > SNIFF_NAME_MAX)
		return false;
	size_t start = 0;
	for (size_t i = 0; i <= n; i++) {
		if (i < n && s[i] != '.') {
			char c = s[i];
			if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_'))
				return false;
			continue;
		}
		size_t len = i - start;
		if (len == 0 || len > 63 || s[start] == '-' || s[i - 1] == '-')
			return false;
		if (i == n) {
			/* the last label is not a number (decimal, or 0x hex) */
			const char *l = s + start;
			size_t j = len >= 2 && l[0] == '0' && l[1] == 'x' ? 2 : 0;
			bool hex = j == 2;
			while (j < len && ((l[j] >= '0' && l[j] <= '9') || (hex && l[j] >= 'a' && l[j] <= 'f')))
				j++;
			if (j == len)
				return false;
		}
		start = i + 1;
	}
	return true;
}

/* Whether name occurs in p[0, n) ignoring ASCII case. */
static bool occurs(const char *name, const uint8_t *p, size_t n)
{
	size_t k = strlen(name);
	for (size_t i = 0; i + k <= n; i++) {
		size_t j = 0;
		while (j < k) {
			uint8_t c = p[i + j];
			if (c >= 'A' && c <= 'Z')
				c = (uint8_t)(c - 'A' + 'a');
			if (c != (uint8_t)name[j])
				break;
			j++;
		}
		if (j == k)
			return true;
	}
	return false;
}

typedef struct answer {
	sniff_result r;
	sniff_proto proto;
	char name[SNIFF_NAME_MAX + 1 + GUARD];
} answer;

/* Sniffs an exact-size copy of s[0, k), so that ASan sees any read past k. */
static void sniff(const uint8_t *s, size_t k, size_t name_size, answer *a)
{
	uint8_t *copy = malloc(k > 0 ? k : 1);
	CHECK(copy != NULL);
	if (k > 0)
		memcpy(copy, s, k);
	memset(a->name, 0x5a, sizeof a->name);
	a->proto = (sniff_proto)99;
	a->r = sniff_name(k > 0 ? copy : NULL, k, a->name, name_size, &a->proto);
	free(copy);
	for (size_t i = name_size; i < sizeof a->name; i++)
		CHECK((uint8_t)a->name[i] == 0x5a);
	if (a->r == SNIFF_FOUND) {
		CHECK(a->proto == SNIFF_PROTO_TLS || a->proto == SNIFF_PROTO_HTTP);
		CHECK(memchr(a->name, '\0', name_size) != NULL);
		CHECK(valid_name(a->name));
	} else {
		CHECK(a->r == SNIFF_NONE || a->r == SNIFF_NEED_MORE);
		CHECK(a->proto == (sniff_proto)99);
		CHECK((uint8_t)a->name[0] == 0x5a);
	}
}

static uint8_t stream[STREAM_MAX];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	uint8_t mode = data[0];
	const uint8_t *body = data + 1;
	size_t n = size - 1;
	const uint8_t *s = body;
	size_t len = n;
	if (mode & 0x80) {
		size_t chunk = (size_t)(mode & 0x7f) + 1;
		if (n > 2 * SNIFF_MAX_BYTES)
			n = 2 * SNIFF_MAX_BYTES;
		len = 0;
		for (size_t at = 0; at < n; at += chunk) {
			size_t k = n - at < chunk ? n - at : chunk;
			stream[len++] = 22;
			stream[len++] = 3;
			stream[len++] = 1;
			stream[len++] = (uint8_t)(k >> 8);
			stream[len++] = (uint8_t)k;
			memcpy(stream + len, body + at, k);
			len += k;
		}
		s = stream;
	}

	answer whole;
	sniff(s, len, SNIFF_NAME_MAX + 1, &whole);
	if (whole.r == SNIFF_NEED_MORE)
		CHECK(len < SNIFF_MAX_BYTES);
	if (whole.r == SNIFF_FOUND)
		CHECK(occurs(whole.name, body, n)); /* message bytes are contiguous in body */

	/* A smaller name buffer gets the same name or, if it does not fit, none. */
	answer small;
	size_t name_size = n > 0 ? body[n - 1] % (SNIFF_NAME_MAX + 2) : 0;
	sniff(s, len, name_size, &small);
	if (whole.r == SNIFF_FOUND && strlen(whole.name) < name_size) {
		CHECK(small.r == SNIFF_FOUND && strcmp(small.name, whole.name) == 0);
	} else if (whole.r == SNIFF_FOUND) {
		CHECK(small.r == SNIFF_NONE);
	} else {
		CHECK(small.r == whole.r);
	}

	/* Every prefix answers NEED_MORE or what the whole answers. */
	size_t step = len <= ALL_PREFIXES_MAX ? 1 : len / SPREAD;
	for (size_t k = 0; k < len; k += step) {
		answer a;
		sniff(s, k, SNIFF_NAME_MAX + 1, &a);
		if (a.r == SNIFF_NEED_MORE)
			continue;
		CHECK(a.r == whole.r);
		if (a.r == SNIFF_FOUND)
			CHECK(a.proto == whole.proto && strcmp(a.name, whole.name) == 0);
	}
	if (len > SNIFF_MAX_BYTES) {
		answer a;
		sniff(s, SNIFF_MAX_BYTES, SNIFF_NAME_MAX + 1, &a);
		CHECK(a.r == whole.r);
		if (a.r == SNIFF_FOUND)
			CHECK(strcmp(a.name, whole.name) == 0);
	}
	return 0;
}
