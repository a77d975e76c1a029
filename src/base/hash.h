/* hash.h - the small unkeyed hashes modules share: FNV-1a steps and the MurmurHash3 64-bit finaliser. */
#ifndef ETM_BASE_HASH_H
#define ETM_BASE_HASH_H

#include <stddef.h>
#include <stdint.h>

/* FNV-1a, 32 bits (the FNV reference's offset basis and prime): start at
 * HASH_FNV32_INIT and fold each byte in with hash_fnv32_step. Unkeyed:
 * fine for tables whose chains are bounded or whose keys the operator
 * chooses, not for keys an attacker picks at will. */
#define HASH_FNV32_INIT 2166136261u

static inline uint32_t hash_fnv32_step(uint32_t h, uint8_t byte) { return (h ^ byte) * 16777619u; }

static inline uint32_t hash_fnv32(const void *p, size_t n)
{
	uint32_t h = HASH_FNV32_INIT;
	for (size_t i = 0; i < n; i++)
		h = hash_fnv32_step(h, ((const uint8_t *)p)[i]);
	return h;
}

/* MurmurHash3's fmix64: a bijection that spreads every input bit over the
 * output, for indexing a table by some of the bits. */
static inline uint64_t hash_fmix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return x;
}

#endif
