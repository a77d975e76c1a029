/* fetched.h - OpenSSL 3 algorithms fetched once per process, so that per-connection key setup does not fetch from the providers on every call. */
#ifndef ETM_CRYPTO_FETCHED_H
#define ETM_CRYPTO_FETCHED_H

#include "crypto/ossl.h"

typedef enum {
	FETCHED_AES_128_GCM,
	FETCHED_AES_256_GCM,
	FETCHED_CHACHA20_POLY1305,
	FETCHED_AES_128_ECB,
	FETCHED_AES_256_ECB,
	FETCHED_CHACHA20,
	FETCHED_CIPHER_COUNT_,
} fetched_cipher_id;

typedef enum {
	FETCHED_MD5,
	FETCHED_SHA1,
	FETCHED_SHA256,
	FETCHED_SHAKE128,
	FETCHED_MD_COUNT_,
} fetched_md_id;

/* The cipher, fetched from the default library context on the first call
 * of any thread (pthread_once) and kept until exit (an atexit handler frees
 * it). Where the fetch failed, OpenSSL's legacy constant (EVP_aes_128_gcm()
 * and kin), which still works, only slower. Never NULL for a listed id. */
const EVP_CIPHER *fetched_cipher(fetched_cipher_id id);
const EVP_MD *fetched_md(fetched_md_id id);

/* HKDF (RFC 5869) with the fetched SHA-1: out_len bytes from key, salt
 * (at most 64 bytes) and info. 0, or -1. */
__attribute__((warn_unused_result)) int fetched_hkdf_sha1(const uint8_t *key, size_t key_len,
                                                          const uint8_t *salt, size_t salt_len,
                                                          const uint8_t *info, size_t info_len,
                                                          uint8_t *out, size_t out_len);

#endif
