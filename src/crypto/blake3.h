/* blake3.h - BLAKE3, portable scalar C: hash, keyed hash and key derivation, incremental, with extendable output (Shadowsocks 2022's subkeys, SIP022). */
#ifndef ETM_CRYPTO_BLAKE3_H
#define ETM_CRYPTO_BLAKE3_H

#include <stddef.h>
#include <stdint.h>

/* Written from the BLAKE3 specification (O'Connor, Aumasson, Neves,
 * Wilcox-O'Hearn, 2020), because Debian 12 packages no BLAKE3 library.
 * Checked against the official test_vectors.json (tests/unit/test_blake3.c).
 * One block at a time, no SIMD: SIP022 hashes 32 + 32 bytes per session. */

#define BLAKE3_KEY_LEN 32
#define BLAKE3_OUT_LEN 32   /* the default output; any length may be asked */
#define BLAKE3_BLOCK_LEN 64
#define BLAKE3_CHUNK_LEN 1024

/* The chaining values of completed subtrees waiting for their sibling: one
 * per bit of the chunk count, and an input of at most 2^64 bytes has at
 * most 2^54 chunks (spec, "Chaining Value Stack"). */
#define BLAKE3_MAX_DEPTH 54

/* The state of one hash computation, in storage the caller owns; nothing in
 * it is allocated, so it may be copied, and dropped without a _free. A
 * zeroed struct is not a valid start: call one of the three _init. */
typedef struct blake3_hasher {
	uint32_t key[8];          /* IV, the key, or the context's key */
	uint32_t cv[8];           /* chaining value of the chunk being filled */
	uint64_t chunk;           /* that chunk's index in the input */
	uint8_t block[BLAKE3_BLOCK_LEN]; /* its bytes not yet compressed */
	uint8_t block_len;        /* how many of block hold input */
	uint8_t blocks_done;      /* its blocks already compressed into cv */
	uint8_t flags;            /* the mode's flag, on every compression */
	uint8_t stack_len;
	uint32_t stack[BLAKE3_MAX_DEPTH][8]; /* subtrees, oldest first */
} blake3_hasher;

/* Plain hashing. */
void blake3_init(blake3_hasher *h);

/* Keyed hashing (a MAC, a PRF) under a 32-byte key. */
void blake3_init_keyed(blake3_hasher *h, const uint8_t key[BLAKE3_KEY_LEN]);

/* Key derivation: context is a NUL-terminated string, hard-coded and unique
 * to its use ("shadowsocks 2022 session subkey"); the key material is then
 * fed with blake3_update. The context is hashed first and its digest keys
 * the hash of the material (spec, "Modes"). */
void blake3_init_derive_key(blake3_hasher *h, const char *context);

/* Adds input[0, len) after everything given before. Any split of the input
 * into calls gives the same digest. Cannot fail; len 0 does nothing. */
void blake3_update(blake3_hasher *h, const void *input, size_t len);

/* Writes the first out_len bytes of the output stream for the input so far
 * to out (any length: BLAKE3_OUT_LEN is the usual digest, a shorter one is
 * its prefix). h is not changed: more input may follow, and finalizing
 * again gives the digest of the longer input. Cannot fail. */
void blake3_finalize(const blake3_hasher *h, uint8_t *out, size_t out_len);

/* One-shot derive_key: out_len bytes derived from material[0, len) under
 * context. SIP022's session subkey is
 * blake3_derive_key("shadowsocks 2022 session subkey", psk || salt, ...)
 * with out_len the AEAD's key length. */
void blake3_derive_key(const char *context, const void *material, size_t len, uint8_t *out, size_t out_len);

/* One-shot plain hash of input[0, len). */
void blake3_hash(const void *input, size_t len, uint8_t *out, size_t out_len);

#endif
