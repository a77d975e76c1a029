/* test_fetched.c - the process's fetched ciphers and digests (each id the algorithm it names) and HKDF-SHA1 against RFC 5869's SHA-1 vectors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "crypto/fetched.h"

static void unhex(const char *hex, uint8_t *out, size_t n)
{
	assert_int_equal(strlen(hex), 2 * n);
	for (size_t i = 0; i < n; i++) {
		unsigned v = 0;
		for (int k = 0; k < 2; k++) {
			char c = hex[2 * i + k];
			v = v << 4 | (unsigned)(c <= '9' ? c - '0' : c - 'a' + 10);
		}
		out[i] = (uint8_t)v;
	}
}

static void test_ids(void **state)
{
	(void)state;
	static const struct {
		fetched_cipher_id id;
		int nid, key_len;
	} CIPHERS[] = {
		{FETCHED_AES_128_GCM, NID_aes_128_gcm, 16},
		{FETCHED_AES_256_GCM, NID_aes_256_gcm, 32},
		{FETCHED_CHACHA20_POLY1305, NID_chacha20_poly1305, 32},
		{FETCHED_AES_128_ECB, NID_aes_128_ecb, 16},
		{FETCHED_AES_256_ECB, NID_aes_256_ecb, 32},
		{FETCHED_CHACHA20, NID_chacha20, 32},
	};
	for (size_t i = 0; i < sizeof CIPHERS / sizeof CIPHERS[0]; i++) {
		const EVP_CIPHER *c = fetched_cipher(CIPHERS[i].id);
		assert_non_null(c);
		assert_int_equal(EVP_CIPHER_get_nid(c), CIPHERS[i].nid);
		assert_int_equal(EVP_CIPHER_get_key_length(c), CIPHERS[i].key_len);
		/* one object for the process: the second call fetches nothing */
		assert_ptr_equal(fetched_cipher(CIPHERS[i].id), c);
	}
	static const struct {
		fetched_md_id id;
		int nid;
	} MDS[] = {
		{FETCHED_MD5, NID_md5},
		{FETCHED_SHA1, NID_sha1},
		{FETCHED_SHA256, NID_sha256},
		{FETCHED_SHAKE128, NID_shake128},
	};
	for (size_t i = 0; i < sizeof MDS / sizeof MDS[0]; i++) {
		const EVP_MD *m = fetched_md(MDS[i].id);
		assert_non_null(m);
		assert_int_equal(EVP_MD_get_type(m), MDS[i].nid);
	}
	assert_null(fetched_cipher(FETCHED_CIPHER_COUNT_));
	assert_null(fetched_md(FETCHED_MD_COUNT_));
}

/* RFC 5869 appendix A.4 to A.7: the SHA-1 cases. A.7's "salt not
 * provided" is HashLen zero bytes (section 2.2). */
static void test_hkdf_rfc5869(void **state)
{
	(void)state;
	static const struct {
		const char *ikm, *salt, *info, *okm;
	} CASES[] = {
		{"0b0b0b0b0b0b0b0b0b0b0b", "000102030405060708090a0b0c", "f0f1f2f3f4f5f6f7f8f9",
		 "085a01ea1b10f36933068b56efa5ad81a4f14b822f5b091568a9cdd4f155fda2c22e422478d305f3f896"},
		{"0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b", "", "",
		 "0ac1af7002b3d761d1e55298da9d0506b9ae52057220a306e07b6b87e8df21d0ea00033de03984d34918"},
		{"0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c", "0000000000000000000000000000000000000000", "",
		 "2c91117204d745f3500d636a62f64f0ab3bae548aa53d423b0d1f27ebba6f5e5673a081d70cce7acfc48"},
	};
	for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
		uint8_t ikm[32], salt[32], info[16], want[42], got[42];
		size_t ni = strlen(CASES[i].ikm) / 2, ns = strlen(CASES[i].salt) / 2,
		       nf = strlen(CASES[i].info) / 2;
		unhex(CASES[i].ikm, ikm, ni);
		unhex(CASES[i].salt, salt, ns);
		unhex(CASES[i].info, info, nf);
		unhex(CASES[i].okm, want, sizeof want);
		/* every length: the last block cut short, or not */
		for (size_t n = 1; n <= sizeof got; n++) {
			memset(got, 0, sizeof got);
			assert_int_equal(fetched_hkdf_sha1(ikm, ni, salt, ns, info, nf, got, n), 0);
			assert_memory_equal(got, want, n);
		}
	}
}

static void test_hkdf_bounds(void **state)
{
	(void)state;
	uint8_t key[65] = {0}, out[20];
	/* a salt longer than SHA-1's block would need hashing first: no caller has one */
	assert_int_equal(fetched_hkdf_sha1(key, 16, key, sizeof key, NULL, 0, out, sizeof out), -1);
	assert_int_equal(fetched_hkdf_sha1(key, 16, key, 64, NULL, 0, out, sizeof out), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ids),
		cmocka_unit_test(test_hkdf_rfc5869),
		cmocka_unit_test(test_hkdf_bounds),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
