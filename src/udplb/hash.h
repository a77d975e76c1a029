/* hash.h - the UDP load balancer's hashes: keyed SipHash-2-4 for anything an untrusted sender controls, a 64-bit mixer for the rest. */
#ifndef ETM_UDPLB_HASH_H
#define ETM_UDPLB_HASH_H

#include <stddef.h>
#include <stdint.h>

/* The 128-bit key. The embedder passes it in (the core reads no random
 * source); a zeroed key works but lets a sender who knows it aim collisions
 * at the flow table. */
typedef struct udplb_seed {
	uint64_t k0, k1;
} udplb_seed;

/* SipHash-2-4 (Aumasson and Bernstein, "SipHash: a fast short-input PRF",
 * 2012) of len bytes under the key, with k0 and k1 read as the key's two
 * little-endian halves. Keyed, so a sender cannot precompute collisions in
 * the tables it fills (source addresses and ports are the sender's choice).
 * This function can't fail. */
uint64_t udplb_siphash(const udplb_seed *key, const void *data, size_t len);

/* A bijective 64-bit finaliser (the MurmurHash3 fmix64 constants): spreads
 * every input bit over the output. For values already keyed or not chosen
 * by a sender. */
uint64_t udplb_mix64(uint64_t x);

#endif
