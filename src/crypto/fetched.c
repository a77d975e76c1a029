/* fetched.c - OpenSSL 3 algorithms fetched once per process (see fetched.h). */
#include "crypto/fetched.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "crypto/ossl.h"

/* OpenSSL 3 turns a legacy constant such as EVP_aes_128_gcm() into a
 * provider fetch (a name lookup under the method store's lock) on every
 * EVP_CipherInit_ex; one explicit fetch kept for the process skips it
 * (OpenSSL's "Performance" section of crypto(7)). */
static const char *const CIPHER_NAMES[FETCHED_CIPHER_COUNT_] = {
	[FETCHED_AES_128_GCM] = "AES-128-GCM",
	[FETCHED_AES_256_GCM] = "AES-256-GCM",
	[FETCHED_CHACHA20_POLY1305] = "ChaCha20-Poly1305",
	[FETCHED_AES_128_ECB] = "AES-128-ECB",
	[FETCHED_AES_256_ECB] = "AES-256-ECB",
	[FETCHED_CHACHA20] = "ChaCha20",
};

static const char *const MD_NAMES[FETCHED_MD_COUNT_] = {
	[FETCHED_MD5] = "MD5",
	[FETCHED_SHA1] = "SHA1",
	[FETCHED_SHA256] = "SHA256",
	[FETCHED_SHAKE128] = "SHAKE128",
};

static pthread_once_t once = PTHREAD_ONCE_INIT;
static EVP_CIPHER *ciphers[FETCHED_CIPHER_COUNT_];
static EVP_MD *mds[FETCHED_MD_COUNT_];

static const EVP_CIPHER *legacy_cipher(fetched_cipher_id id)
{
	switch (id) {
	case FETCHED_AES_128_GCM:
		return EVP_aes_128_gcm();
	case FETCHED_AES_256_GCM:
		return EVP_aes_256_gcm();
	case FETCHED_CHACHA20_POLY1305:
		return EVP_chacha20_poly1305();
	case FETCHED_AES_128_ECB:
		return EVP_aes_128_ecb();
	case FETCHED_AES_256_ECB:
		return EVP_aes_256_ecb();
	case FETCHED_CHACHA20:
		return EVP_chacha20();
	default:
		return NULL;
	}
}

static const EVP_MD *legacy_md(fetched_md_id id)
{
	switch (id) {
	case FETCHED_MD5:
		return EVP_md5();
	case FETCHED_SHA1:
		return EVP_sha1();
	case FETCHED_SHA256:
		return EVP_sha256();
	case FETCHED_SHAKE128:
		return EVP_shake128();
	default:
		return NULL;
	}
}

/* Runs at exit, after the workers stopped: the objects are the process's,
 * and ASan's leak check (which runs later) must not count them. A context
 * still keyed with one holds its own reference. */
static void release(void)
{
	for (size_t i = 0; i < FETCHED_CIPHER_COUNT_; i++) {
		EVP_CIPHER_free(ciphers[i]);
		ciphers[i] = NULL;
	}
	for (size_t i = 0; i < FETCHED_MD_COUNT_; i++) {
		EVP_MD_free(mds[i]);
		mds[i] = NULL;
	}
}

static void fetch_all(void)
{
	for (size_t i = 0; i < FETCHED_CIPHER_COUNT_; i++)
		ciphers[i] = EVP_CIPHER_fetch(NULL, CIPHER_NAMES[i], NULL);
	for (size_t i = 0; i < FETCHED_MD_COUNT_; i++)
		mds[i] = EVP_MD_fetch(NULL, MD_NAMES[i], NULL);
	/* registered after the fetches, which initialise OpenSSL and register
	 * its own cleanup: handlers run in reverse, so ours runs first */
	atexit(release);
}

const EVP_CIPHER *fetched_cipher(fetched_cipher_id id)
{
	if ((unsigned)id >= FETCHED_CIPHER_COUNT_)
		return NULL;
	pthread_once(&once, fetch_all);
	return ciphers[id] ? ciphers[id] : legacy_cipher(id);
}

const EVP_MD *fetched_md(fetched_md_id id)
{
	if ((unsigned)id >= FETCHED_MD_COUNT_)
		return NULL;
	pthread_once(&once, fetch_all);
	return mds[id] ? mds[id] : legacy_md(id);
}

/* HMAC-SHA1 (RFC 2104) over the concatenation of up to three parts. */
#define SHA1_BLOCK 64
#define SHA1_LEN 20

static int hmac_sha1(EVP_MD_CTX *c, const uint8_t *key, size_t key_len, const uint8_t *m1,
                     size_t l1, const uint8_t *m2, size_t l2, const uint8_t *m3, size_t l3,
                     uint8_t out[SHA1_LEN])
{
	const EVP_MD *md = fetched_md(FETCHED_SHA1);
	uint8_t k[SHA1_BLOCK] = {0}, pad[SHA1_BLOCK], inner[SHA1_LEN];
	if (key_len > SHA1_BLOCK)
		return -1; /* no caller's key is: salts and PRKs are at most 32 bytes */
	memcpy(k, key, key_len);
	for (size_t i = 0; i < SHA1_BLOCK; i++)
		pad[i] = k[i] ^ 0x36;
	int ok = EVP_DigestInit_ex(c, md, NULL) && EVP_DigestUpdate(c, pad, SHA1_BLOCK) &&
	         EVP_DigestUpdate(c, m1, l1) && EVP_DigestUpdate(c, m2, l2) &&
	         EVP_DigestUpdate(c, m3, l3) && EVP_DigestFinal_ex(c, inner, NULL);
	for (size_t i = 0; i < SHA1_BLOCK; i++)
		pad[i] = k[i] ^ 0x5c;
	ok = ok && EVP_DigestInit_ex(c, md, NULL) && EVP_DigestUpdate(c, pad, SHA1_BLOCK) &&
	     EVP_DigestUpdate(c, inner, SHA1_LEN) && EVP_DigestFinal_ex(c, out, NULL);
	OPENSSL_cleanse(k, sizeof k);
	OPENSSL_cleanse(pad, sizeof pad);
	OPENSSL_cleanse(inner, sizeof inner);
	return ok ? 0 : -1;
}

/* By hand over the fetched SHA-1 rather than EVP_KDF "HKDF": OpenSSL 3.0's
 * HKDF cannot be duplicated from a template (no dupctx before 3.1), so each
 * new context would fetch its digest by name, and its HMAC fetches again. */
int fetched_hkdf_sha1(const uint8_t *key, size_t key_len, const uint8_t *salt, size_t salt_len,
                      const uint8_t *info, size_t info_len, uint8_t *out, size_t out_len)
{
	if (out_len > 255 * SHA1_LEN)
		return -1; /* RFC 5869 2.3's bound */
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	uint8_t prk[SHA1_LEN], t[SHA1_LEN];
	/* RFC 5869 2.2: PRK = HMAC(salt, IKM) */
	int bad = !c || hmac_sha1(c, salt, salt_len, key, key_len, NULL, 0, NULL, 0, prk);
	/* 2.3: T(i) = HMAC(PRK, T(i - 1) | info | i), T(0) empty */
	size_t done = 0, tlen = 0;
	for (uint8_t i = 1; !bad && done < out_len; i++) {
		bad = hmac_sha1(c, prk, SHA1_LEN, t, tlen, info, info_len, &i, 1, t);
		tlen = SHA1_LEN;
		size_t n = out_len - done < SHA1_LEN ? out_len - done : SHA1_LEN;
		memcpy(out + done, t, n);
		done += n;
	}
	EVP_MD_CTX_free(c);
	OPENSSL_cleanse(prk, sizeof prk);
	OPENSSL_cleanse(t, sizeof t);
	return bad ? -1 : 0;
}
