/* blake3.c - BLAKE3 one 64-byte block at a time: the compression function, chunks, the stack of subtrees and the root's output stream. */
#include "crypto/blake3.h"

#include <stdbool.h>
#include <string.h>

/* Every fact below is from the BLAKE3 specification (O'Connor, Aumasson,
 * Neves, Wilcox-O'Hearn, 2020); the section names are the spec's. */

/* The domain flags ("Compression Function"): which kind of node a
 * compression belongs to, so no two kinds can produce the same value. */
enum {
	CHUNK_START = 1 << 0,         /* the first block of a chunk */
	CHUNK_END = 1 << 1,           /* the last block of a chunk */
	PARENT = 1 << 2,              /* a parent node: two children's chaining values */
	ROOT = 1 << 3,                /* the root node, on each output block */
	KEYED_HASH = 1 << 4,          /* every compression of a keyed hash */
	DERIVE_KEY_CONTEXT = 1 << 5,  /* hashing derive_key's context string */
	DERIVE_KEY_MATERIAL = 1 << 6, /* hashing the key material under the context's key */
};

/* The compression function's rounds: 7, where BLAKE2s has 10. */
#define ROUNDS 7

/* The IV: SHA-256's initial hash value (FIPS 180-4 5.3.3), as in BLAKE2s;
 * the key of a plain hash and of the context's hash in derive_key. */
static const uint32_t IV[8] = {
	0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
	0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
};

/* Between rounds, message word i of the next round is word PERMUTATION[i]
 * of this one ("Compression Function"). */
static const uint8_t PERMUTATION[16] = {2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8};

/* BLAKE3 reads and writes words little-endian, whatever the host. */
static uint32_t load32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void store32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static void load_words(uint32_t *w, const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		w[i] = load32(p + 4 * i);
}

static uint32_t ror(uint32_t x, unsigned n) { return x >> n | x << (32 - n); }

/* The quarter-round, BLAKE2s's G with its rotations 16, 12, 8, 7. */
static void g(uint32_t *v, int a, int b, int c, int d, uint32_t x, uint32_t y)
{
	v[a] = v[a] + v[b] + x;
	v[d] = ror(v[d] ^ v[a], 16);
	v[c] = v[c] + v[d];
	v[b] = ror(v[b] ^ v[c], 12);
	v[a] = v[a] + v[b] + y;
	v[d] = ror(v[d] ^ v[a], 8);
	v[c] = v[c] + v[d];
	v[b] = ror(v[b] ^ v[c], 7);
}

/* Compresses block (16 words) into cv with the node's counter, the number
 * of input bytes in the block and its flags, writing all 16 output words:
 * the first 8 are a chaining value, all 16 one root output block. */
static void compress(const uint32_t cv[8], const uint32_t block[16], uint32_t block_len, uint64_t counter,
	uint32_t flags, uint32_t out[16])
{
	uint32_t m[16], v[16];
	memcpy(m, block, sizeof m);
	memcpy(v, cv, 8 * sizeof *v);
	memcpy(v + 8, IV, 4 * sizeof *v);
	v[12] = (uint32_t)counter;
	v[13] = (uint32_t)(counter >> 32);
	v[14] = block_len;
	v[15] = flags;
	for (int r = 0; r < ROUNDS; r++) {
		/* the columns, then the diagonals */
		g(v, 0, 4, 8, 12, m[0], m[1]);
		g(v, 1, 5, 9, 13, m[2], m[3]);
		g(v, 2, 6, 10, 14, m[4], m[5]);
		g(v, 3, 7, 11, 15, m[6], m[7]);
		g(v, 0, 5, 10, 15, m[8], m[9]);
		g(v, 1, 6, 11, 12, m[10], m[11]);
		g(v, 2, 7, 8, 13, m[12], m[13]);
		g(v, 3, 4, 9, 14, m[14], m[15]);
		uint32_t next[16];
		for (int i = 0; i < 16; i++)
			next[i] = m[PERMUTATION[i]];
		memcpy(m, next, sizeof m);
	}
	for (int i = 0; i < 8; i++) {
		out[i] = v[i] ^ v[i + 8];
		out[i + 8] = v[i + 8] ^ cv[i];
	}
}

/* The flags of the chunk's next block but CHUNK_END, which only the caller
 * knows. */
static uint32_t chunk_flags(const blake3_hasher *h)
{
	return h->flags | (h->blocks_done == 0 ? CHUNK_START : 0);
}

static size_t chunk_len(const blake3_hasher *h)
{
	return (size_t)h->blocks_done * BLAKE3_BLOCK_LEN + h->block_len;
}

/* A parent node's chaining value from its children's, in cv (which may be
 * right). Parents have counter 0 and a full block, keyed like chunks. */
static void parent_cv(const blake3_hasher *h, const uint32_t left[8], const uint32_t right[8], uint32_t cv[8])
{
	uint32_t block[16], out[16];
	memcpy(block, left, 8 * sizeof *block);
	memcpy(block + 8, right, 8 * sizeof *block);
	compress(h->key, block, BLAKE3_BLOCK_LEN, 0, h->flags | PARENT, out);
	memcpy(cv, out, 8 * sizeof *cv);
}

/* Adds the chaining value of a finished chunk, the total'th. Each trailing
 * zero bit of total is a completed pair of equal subtrees on the stack's
 * top: they merge now, and the next chunk only ever joins as a right
 * child ("Chaining Value Stack"). This runs only once input after the
 * chunk has arrived, so the stack never holds the root, which needs ROOT. */
static void push_chunk(blake3_hasher *h, uint32_t cv[8], uint64_t total)
{
	while ((total & 1) == 0) {
		h->stack_len--;
		parent_cv(h, h->stack[h->stack_len], cv, cv);
		total >>= 1;
	}
	memcpy(h->stack[h->stack_len], cv, sizeof h->stack[0]);
	h->stack_len++;
}

static void start(blake3_hasher *h, const uint32_t key[8], uint32_t flags)
{
	*h = (blake3_hasher){.flags = (uint8_t)flags};
	memcpy(h->key, key, sizeof h->key);
	memcpy(h->cv, key, sizeof h->cv);
}

void blake3_init(blake3_hasher *h) { start(h, IV, 0); }

void blake3_init_keyed(blake3_hasher *h, const uint8_t key[BLAKE3_KEY_LEN])
{
	uint32_t k[8];
	load_words(k, key, 8);
	start(h, k, KEYED_HASH);
}

void blake3_init_derive_key(blake3_hasher *h, const char *context)
{
	blake3_hasher ctx;
	uint8_t key[BLAKE3_KEY_LEN];
	uint32_t k[8];
	start(&ctx, IV, DERIVE_KEY_CONTEXT);
	blake3_update(&ctx, context, strlen(context));
	blake3_finalize(&ctx, key, sizeof key);
	load_words(k, key, 8);
	start(h, k, DERIVE_KEY_MATERIAL);
}

void blake3_update(blake3_hasher *h, const void *input, size_t len)
{
	const uint8_t *in = input;
	while (len > 0) {
		/* A full chunk or block is compressed only when more input
		 * follows it: the last one of the input takes CHUNK_END (and
		 * maybe ROOT) in blake3_finalize. */
		if (chunk_len(h) == BLAKE3_CHUNK_LEN) {
			uint32_t block[16], out[16];
			load_words(block, h->block, 16);
			compress(h->cv, block, BLAKE3_BLOCK_LEN, h->chunk, chunk_flags(h) | CHUNK_END, out);
			h->chunk++;
			push_chunk(h, out, h->chunk);
			memcpy(h->cv, h->key, sizeof h->cv);
			h->blocks_done = 0;
			h->block_len = 0;
		} else if (h->block_len == BLAKE3_BLOCK_LEN) {
			uint32_t block[16], out[16];
			load_words(block, h->block, 16);
			compress(h->cv, block, BLAKE3_BLOCK_LEN, h->chunk, chunk_flags(h), out);
			memcpy(h->cv, out, sizeof h->cv);
			h->blocks_done++;
			h->block_len = 0;
		}
		size_t take = BLAKE3_BLOCK_LEN - h->block_len;
		if (take > len)
			take = len;
		memcpy(h->block + h->block_len, in, take);
		h->block_len = (uint8_t)(h->block_len + take);
		in += take;
		len -= take;
	}
}

void blake3_finalize(const blake3_hasher *h, uint8_t *out, size_t out_len)
{
	/* The root is the chunk being filled when it is the only one; else
	 * each subtree on the stack, newest first, takes what is built so far
	 * as its right sibling. The root's own compression is left for the
	 * output loop, which repeats it with ROOT for each 64 output bytes. */
	uint8_t last[BLAKE3_BLOCK_LEN] = {0}; /* the spec pads the last block with zeros */
	memcpy(last, h->block, h->block_len);
	uint32_t cv[8], block[16];
	memcpy(cv, h->cv, sizeof cv);
	load_words(block, last, 16);
	uint32_t block_len = h->block_len, flags = chunk_flags(h) | CHUNK_END;
	uint64_t counter = h->chunk;
	for (size_t i = h->stack_len; i-- > 0;) {
		uint32_t child[16];
		compress(cv, block, block_len, counter, flags, child);
		memcpy(block, h->stack[i], 8 * sizeof *block);
		memcpy(block + 8, child, 8 * sizeof *block);
		memcpy(cv, h->key, sizeof cv);
		block_len = BLAKE3_BLOCK_LEN;
		counter = 0;
		flags = h->flags | PARENT;
	}
	/* "Extendable Output": output block n is the root compressed with
	 * counter n; out_len need not be a multiple of 64. */
	for (uint64_t n = 0; out_len > 0; n++) {
		uint32_t words[16];
		uint8_t bytes[BLAKE3_BLOCK_LEN];
		compress(cv, block, block_len, n, flags | ROOT, words);
		for (int i = 0; i < 16; i++)
			store32(bytes + 4 * i, words[i]);
		size_t take = out_len < sizeof bytes ? out_len : sizeof bytes;
		memcpy(out, bytes, take);
		out += take;
		out_len -= take;
	}
}

void blake3_derive_key(const char *context, const void *material, size_t len, uint8_t *out, size_t out_len)
{
	blake3_hasher h;
	blake3_init_derive_key(&h, context);
	blake3_update(&h, material, len);
	blake3_finalize(&h, out, out_len);
	/* The material is a secret (SIP022: the pre-shared key), and the
	 * hasher's last block still holds up to 64 bytes of it. */
	explicit_bzero(&h, sizeof h);
}

void blake3_hash(const void *input, size_t len, uint8_t *out, size_t out_len)
{
	blake3_hasher h;
	blake3_init(&h);
	blake3_update(&h, input, len);
	blake3_finalize(&h, out, out_len);
}
