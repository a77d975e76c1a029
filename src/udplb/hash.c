/* hash.c - SipHash-2-4 and the 64-bit mixer. */
#include "udplb/hash.h"

#include <string.h>

#include "base/hash.h"

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

#define SIPROUND                                                                                   \
	do {                                                                                       \
		v0 += v1;                                                                          \
		v1 = ROTL(v1, 13);                                                                 \
		v1 ^= v0;                                                                          \
		v0 = ROTL(v0, 32);                                                                 \
		v2 += v3;                                                                          \
		v3 = ROTL(v3, 16);                                                                 \
		v3 ^= v2;                                                                          \
		v0 += v3;                                                                          \
		v3 = ROTL(v3, 21);                                                                 \
		v3 ^= v0;                                                                          \
		v2 += v1;                                                                          \
		v1 = ROTL(v1, 17);                                                                 \
		v1 ^= v2;                                                                          \
		v2 = ROTL(v2, 32);                                                                 \
	} while (0)

static uint64_t load_le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

uint64_t udplb_siphash(const udplb_seed *key, const void *data, size_t len)
{
	const uint8_t *p = data;
	uint64_t v0 = key->k0 ^ 0x736f6d6570736575ULL;
	uint64_t v1 = key->k1 ^ 0x646f72616e646f6dULL;
	uint64_t v2 = key->k0 ^ 0x6c7967656e657261ULL;
	uint64_t v3 = key->k1 ^ 0x7465646279746573ULL;
	size_t whole = len & ~(size_t)7;

	for (size_t i = 0; i < whole; i += 8) {
		uint64_t m = load_le64(p + i);
		v3 ^= m;
		SIPROUND;
		SIPROUND;
		v0 ^= m;
	}
	/* The last block: the remaining bytes, the length's low byte on top. */
	uint8_t last[8] = {0};
	if (len > whole)
		memcpy(last, p + whole, len - whole);
	uint64_t b = load_le64(last) | ((uint64_t)(len & 0xff) << 56);
	v3 ^= b;
	SIPROUND;
	SIPROUND;
	v0 ^= b;
	v2 ^= 0xff;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	return v0 ^ v1 ^ v2 ^ v3;
}

uint64_t udplb_mix64(uint64_t x) { return hash_fmix64(x); }
