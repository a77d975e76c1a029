/* vmess_crypto.h - VMess AEAD's primitives: the command key, the nested-HMAC KDF, AuthID, the SHAKE128 length mask and the body AEADs. */
#ifndef ETM_PROTO_VMESS_CRYPTO_H
#define ETM_PROTO_VMESS_CRYPTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "crypto/ossl.h"

/* Facts from v2ray-core 4.34 (proxy/vmess/aead, proxy/vmess/encoding,
 * common/protocol/id.go) and v2fly's docs/developer/protocols/vmess.md.
 * Everything goes through OpenSSL's EVP but the SHAKE128 squeeze on
 * OpenSSL before 3.3 (no EVP_DigestSqueeze there): see vmess_shake. */

#define VMESS_KEY_LEN 16 /* command key, body key and IV, AuthID */
#define VMESS_KDF_LEN 32 /* a KDF output: one SHA-256 */
#define VMESS_TAG_LEN 16 /* GCM and Poly1305 tags */
#define VMESS_NONCE_LEN 12

/* The KDF's path holds at most this many labels after the root one
 * ("VMess AEAD KDF"): the header keys take three (label, AuthID, nonce). */
#define VMESS_KDF_PATH_MAX 3

/* Labels (proxy/vmess/aead/consts.go). */
#define VMESS_KDF_AUTH_ID_KEY "AES Auth ID Encryption"
#define VMESS_KDF_REQ_LEN_KEY "VMess Header AEAD Key_Length"
#define VMESS_KDF_REQ_LEN_IV "VMess Header AEAD Nonce_Length"
#define VMESS_KDF_REQ_KEY "VMess Header AEAD Key"
#define VMESS_KDF_REQ_IV "VMess Header AEAD Nonce"
#define VMESS_KDF_RESP_LEN_KEY "AEAD Resp Header Len Key"
#define VMESS_KDF_RESP_LEN_IV "AEAD Resp Header Len IV"
#define VMESS_KDF_RESP_KEY "AEAD Resp Header Key"
#define VMESS_KDF_RESP_IV "AEAD Resp Header IV"

typedef struct vmess_slice {
	const uint8_t *p;
	size_t len;
} vmess_slice;

/* The user's command key: MD5(uuid || "c48619fe-8f02-49e0-b9e9-edf763e17e21"). */
void vmess_cmd_key(const uint8_t uuid[16], uint8_t out[VMESS_KEY_LEN]);

/* VMess AEAD KDF: HMAC-SHA256 keyed with "VMess AEAD KDF" is the hash of
 * an HMAC keyed with path[0], which is the hash of one keyed with path[1],
 * and so on; the outermost one (path[n-1]) runs over key. n <=
 * VMESS_KDF_PATH_MAX and every label at most 64 bytes (an HMAC block),
 * key at most 64 bytes; returns 0, or -1 past those bounds or when OpenSSL
 * fails. */
__attribute__((warn_unused_result)) int vmess_kdf(const uint8_t *key, size_t key_len,
                                                  const vmess_slice *path, size_t n,
                                                  uint8_t out[VMESS_KDF_LEN]);

/* AuthID: AES-128-ECB, keyed with KDF(cmd_key, "AES Auth ID Encryption")[:16],
 * of now (8 bytes, BE) || rand4 || CRC32-IEEE of those 12 bytes (BE).
 * Returns 0 or -1 (OpenSSL failed). */
__attribute__((warn_unused_result)) int vmess_auth_id(const uint8_t cmd_key[VMESS_KEY_LEN],
                                                      int64_t now, const uint8_t rand4[4],
                                                      uint8_t out[VMESS_KEY_LEN]);

/* The AuthID key of a user: KDF(cmd_key, "AES Auth ID Encryption")[:16].
 * 0 or -1 (OpenSSL failed). */
__attribute__((warn_unused_result)) int vmess_auth_key(const uint8_t cmd_key[VMESS_KEY_LEN],
                                                       uint8_t out[VMESS_KEY_LEN]);

/* Decrypts AuthID id with a user's AuthID key and checks its CRC32: 0 with
 * *time the client's clock (unix seconds), or -1 (not this user's, or
 * OpenSSL failed). The time window is the caller's to check. */
__attribute__((warn_unused_result)) int vmess_auth_id_open(const uint8_t auth_key[VMESS_KEY_LEN],
                                                           const uint8_t id[VMESS_KEY_LEN],
                                                           int64_t *time);

/* One AES-128-GCM seal or open with a 12-byte nonce and optional AAD.
 * seal writes len + VMESS_TAG_LEN bytes into out; open takes len bytes
 * that end in the tag and writes len - VMESS_TAG_LEN. 0, or -1 (a tag that
 * does not match, or OpenSSL failed). out may be in. */
__attribute__((warn_unused_result)) int vmess_gcm_seal(const uint8_t key[VMESS_KEY_LEN],
                                                       const uint8_t nonce[VMESS_NONCE_LEN],
                                                       const uint8_t *aad, size_t aad_len,
                                                       const uint8_t *in, size_t len,
                                                       uint8_t *out);
__attribute__((warn_unused_result)) int vmess_gcm_open(const uint8_t key[VMESS_KEY_LEN],
                                                       const uint8_t nonce[VMESS_NONCE_LEN],
                                                       const uint8_t *aad, size_t aad_len,
                                                       const uint8_t *in, size_t len,
                                                       uint8_t *out);

/* The SHAKE128 output stream of a 16-byte body IV, two bytes at a time
 * (chunk length masks and global padding lengths). A zeroed struct is not
 * valid: init first. */
typedef struct vmess_shake {
#if OPENSSL_VERSION_NUMBER >= 0x30300000L
	EVP_MD_CTX *ctx; /* owned; vmess_shake_free */
#else
	uint64_t st[25]; /* the Keccak state after absorbing */
#endif
	uint8_t out[168]; /* one block of output (the SHAKE128 rate) */
	size_t used;
} vmess_shake;

__attribute__((warn_unused_result)) int vmess_shake_init(vmess_shake *s,
                                                         const uint8_t iv[VMESS_KEY_LEN]);
/* The next two bytes, big-endian. */
uint16_t vmess_shake_next(vmess_shake *s);
void vmess_shake_free(vmess_shake *s);

/* Body security on the wire (the header's low nibble; common/protocol
 * headers.proto). ZERO is sent as NONE without the chunk stream. */
typedef enum vmess_security {
	VMESS_SEC_AES_128_GCM = 3,
	VMESS_SEC_CHACHA20_POLY1305 = 4,
	VMESS_SEC_NONE = 5,
	VMESS_SEC_ZERO = 6,
} vmess_security;

/* What "auto" means on this machine: AES-128-GCM where the CPU has AES
 * instructions (v2ray's choice: its hasAESGCMHardwareSupport), else
 * ChaCha20-Poly1305. */
vmess_security vmess_security_auto(void);

/* The ChaCha20-Poly1305 key of a 16-byte body key (v2ray's
 * GenerateChacha20Poly1305Key): MD5(key) || MD5(MD5(key)). */
void vmess_chacha_key(const uint8_t key[VMESS_KEY_LEN], uint8_t out[32]);

#endif
