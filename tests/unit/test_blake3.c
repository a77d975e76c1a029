/* test_blake3.c - BLAKE3 against the official test vectors in all three modes, at 131 and 32 bytes, fed whole and in awkward pieces. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base/bytes.h"
#include "crypto/blake3.h"

#include "blake3_vectors.h"

#define NVECTORS (sizeof BLAKE3_VECTORS / sizeof BLAKE3_VECTORS[0])

/* The longest input of the vectors (102400) fits. */
#define INPUT_MAX 102400

/* Piece sizes around the block (64) and chunk (1024) boundaries. */
static const size_t PIECES[] = {1, 63, 64, 65, 1023, 1024, 1025};
#define NPIECES (sizeof PIECES / sizeof PIECES[0])

enum mode { HASH, KEYED, DERIVE };

static uint8_t input[INPUT_MAX];

static int setup_input(void **state)
{
	(void)state;
	for (size_t i = 0; i < INPUT_MAX; i++)
		input[i] = (uint8_t)(i % 251);
	return 0;
}

static void unhex(const char *hex, uint8_t *out, size_t n)
{
	assert_int_equal(strlen(hex), 2 * n);
	for (size_t i = 0; i < n; i++) {
		int hi = bytes_hex_digit(hex[2 * i]), lo = bytes_hex_digit(hex[2 * i + 1]);
		assert_true(hi >= 0 && lo >= 0);
		out[i] = (uint8_t)(hi << 4 | lo);
	}
}

static const char *expected_hex(const struct blake3_vector *v, enum mode m)
{
	return m == HASH ? v->hash : m == KEYED ? v->keyed_hash : v->derive_key;
}

static void start(blake3_hasher *h, enum mode m)
{
	if (m == HASH)
		blake3_init(h);
	else if (m == KEYED)
		blake3_init_keyed(h, (const uint8_t *)BLAKE3_VECTOR_KEY);
	else
		blake3_init_derive_key(h, BLAKE3_VECTOR_CONTEXT);
}

/* The vector's input fed in pieces of the sizes in turn from sizes[0,
 * nsizes), cycling; the output is BLAKE3_VECTOR_LEN bytes. */
static void digest_in_pieces(const struct blake3_vector *v, enum mode m, const size_t *sizes, size_t nsizes,
	uint8_t *out)
{
	blake3_hasher h;
	start(&h, m);
	size_t at = 0;
	for (size_t k = 0; at < v->input_len; k++) {
		size_t n = sizes[k % nsizes];
		if (n > v->input_len - at)
			n = v->input_len - at;
		blake3_update(&h, input + at, n);
		at += n;
	}
	blake3_finalize(&h, out, BLAKE3_VECTOR_LEN);
}

static void assert_vector(const struct blake3_vector *v, enum mode m, const uint8_t *got, size_t n)
{
	uint8_t want[BLAKE3_VECTOR_LEN];
	unhex(expected_hex(v, m), want, sizeof want);
	if (memcmp(got, want, n) != 0)
		fail_msg("input_len %zu, mode %d, %zu bytes: digest differs", v->input_len, (int)m, n);
}

/* The json's cases were written with hash.update(whole input), then an
 * extended output; a 32-byte output is its prefix. */
static void vectors_whole_input(void **state)
{
	(void)state;
	for (size_t i = 0; i < NVECTORS; i++) {
		const struct blake3_vector *v = &BLAKE3_VECTORS[i];
		assert_true(v->input_len <= INPUT_MAX);
		for (enum mode m = HASH; m <= DERIVE; m++) {
			blake3_hasher h;
			uint8_t out[BLAKE3_VECTOR_LEN], out32[BLAKE3_OUT_LEN];
			start(&h, m);
			blake3_update(&h, input, v->input_len);
			blake3_finalize(&h, out, sizeof out);
			assert_vector(v, m, out, sizeof out);
			blake3_finalize(&h, out32, sizeof out32);
			assert_vector(v, m, out32, sizeof out32);
		}
	}
}

/* The one-shot helpers give what the hasher gives. */
static void vectors_one_shot(void **state)
{
	(void)state;
	for (size_t i = 0; i < NVECTORS; i++) {
		const struct blake3_vector *v = &BLAKE3_VECTORS[i];
		uint8_t out[BLAKE3_VECTOR_LEN];
		blake3_hash(input, v->input_len, out, sizeof out);
		assert_vector(v, HASH, out, sizeof out);
		blake3_derive_key(BLAKE3_VECTOR_CONTEXT, input, v->input_len, out, sizeof out);
		assert_vector(v, DERIVE, out, sizeof out);
		blake3_derive_key(BLAKE3_VECTOR_CONTEXT, input, v->input_len, out, BLAKE3_OUT_LEN);
		assert_vector(v, DERIVE, out, BLAKE3_OUT_LEN);
	}
}

/* Every piece size alone, then all of them in turn (so pieces start at
 * every offset mod 64 and cross chunk ends at odd places), give the
 * digest of the whole input. */
static void vectors_in_pieces(void **state)
{
	(void)state;
	for (size_t i = 0; i < NVECTORS; i++) {
		const struct blake3_vector *v = &BLAKE3_VECTORS[i];
		for (enum mode m = HASH; m <= DERIVE; m++) {
			uint8_t out[BLAKE3_VECTOR_LEN];
			for (size_t p = 0; p < NPIECES; p++) {
				digest_in_pieces(v, m, &PIECES[p], 1, out);
				assert_vector(v, m, out, sizeof out);
			}
			digest_in_pieces(v, m, PIECES, NPIECES, out);
			assert_vector(v, m, out, sizeof out);
		}
	}
}

/* Empty updates anywhere change nothing. */
static void empty_updates_are_no_ops(void **state)
{
	(void)state;
	const struct blake3_vector *v = &BLAKE3_VECTORS[NVECTORS - 1];
	blake3_hasher h;
	uint8_t out[BLAKE3_VECTOR_LEN];
	blake3_init(&h);
	for (size_t at = 0; at < v->input_len; at += 1024) {
		blake3_update(&h, input + at, 0);
		blake3_update(&h, input + at, 1024);
		blake3_update(&h, NULL, 0);
	}
	blake3_finalize(&h, out, sizeof out);
	assert_vector(v, HASH, out, sizeof out);
}

/* Finalizing leaves the hasher as it was: asking along the way gives each
 * prefix's digest, and the end is still the whole input's. */
static void finalize_does_not_consume(void **state)
{
	(void)state;
	blake3_hasher h;
	blake3_init(&h);
	size_t at = 0;
	for (size_t i = 0; i < NVECTORS; i++) {
		const struct blake3_vector *v = &BLAKE3_VECTORS[i];
		blake3_update(&h, input + at, v->input_len - at);
		at = v->input_len;
		uint8_t out[BLAKE3_VECTOR_LEN];
		blake3_finalize(&h, out, sizeof out);
		assert_vector(v, HASH, out, sizeof out);
		blake3_finalize(&h, out, sizeof out);
		assert_vector(v, HASH, out, sizeof out);
	}
}

/* Every output length from 0 to 131 is the prefix of the longest: the
 * stream does not depend on how much of it is asked. */
static void shorter_outputs_are_prefixes(void **state)
{
	(void)state;
	const struct blake3_vector *v = &BLAKE3_VECTORS[NVECTORS / 2];
	blake3_hasher h;
	blake3_init_keyed(&h, (const uint8_t *)BLAKE3_VECTOR_KEY);
	blake3_update(&h, input, v->input_len);
	for (size_t n = 0; n <= BLAKE3_VECTOR_LEN; n++) {
		uint8_t out[BLAKE3_VECTOR_LEN + 1];
		memset(out, 0xa5, sizeof out);
		blake3_finalize(&h, out, n);
		assert_vector(v, KEYED, out, n);
		for (size_t k = n; k < sizeof out; k++)
			assert_int_equal(out[k], 0xa5); /* nothing past out_len is written */
	}
}

/* SIP022's session subkey: derive_key over the PSK then the salt, as one
 * buffer or two updates. The derive_key mode itself is checked by the
 * vectors above. */
static void sip022_subkey(void **state)
{
	(void)state;
	static const char ctx[] = "shadowsocks 2022 session subkey";
	uint8_t material[64], one_shot[32], incremental[32];
	memcpy(material, input + 1, 32);  /* the PSK */
	memcpy(material + 32, input + 100, 32); /* the salt */
	blake3_derive_key(ctx, material, sizeof material, one_shot, sizeof one_shot);
	blake3_hasher h;
	blake3_init_derive_key(&h, ctx);
	blake3_update(&h, material, 32);
	blake3_update(&h, material + 32, 32);
	blake3_finalize(&h, incremental, sizeof incremental);
	assert_memory_equal(one_shot, incremental, sizeof one_shot);
	/* another context is another key */
	blake3_derive_key(BLAKE3_VECTOR_CONTEXT, material, sizeof material, incremental, sizeof incremental);
	assert_memory_not_equal(one_shot, incremental, sizeof one_shot);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(vectors_whole_input),
		cmocka_unit_test(vectors_one_shot),
		cmocka_unit_test(vectors_in_pieces),
		cmocka_unit_test(empty_updates_are_no_ops),
		cmocka_unit_test(finalize_does_not_consume),
		cmocka_unit_test(shorter_outputs_are_prefixes),
		cmocka_unit_test(sip022_subkey),
	};
	return cmocka_run_group_tests(tests, setup_input, NULL);
}
