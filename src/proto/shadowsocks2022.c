/* shadowsocks2022.c - Shadowsocks 2022's TCP headers (SIP022 3.1.3): the request's fixed and variable headers, the response's fixed header, sealed and opened with their checks; SIP022-2's identity headers. */
#include <string.h>

#include "crypto/ossl.h"

#include "base/bytes.h"
#include "crypto/blake3.h"
#include "crypto/fetched.h"
#include "proto/shadowsocks.h"

/* SIP022-2, TCP */
#define IDENTITY_CONTEXT "shadowsocks 2022 identity subkey"

/* SIP022 3.1.3: HeaderTypeClientStream, HeaderTypeServerStream */
#define TYPE_CLIENT 0
#define TYPE_SERVER 1

bool ss2022_time_ok(uint64_t ts, int64_t now)
{
	if (ts > INT64_MAX)
		return false;
	int64_t t = (int64_t)ts;
	return t <= now ? now - t <= SS2022_TIME_WINDOW : t - now <= SS2022_TIME_WINDOW;
}

ssize_t ss2022_request_seal(ss_aead *a, int64_t now, const uint8_t *addr, size_t alen,
                            size_t padding, uint8_t *out)
{
	if (alen > SS_ADDR_MAX || padding > SS2022_PADDING_MAX)
		return PROTO_ERR_TOO_BIG;
	size_t vlen = alen + 2 + padding;
	uint8_t fixed[SS2022_REQ_FIXED_LEN];
	fixed[0] = TYPE_CLIENT;
	bytes_put64(fixed + 1, (uint64_t)now);
	bytes_put16(fixed + 9, (uint16_t)vlen);
	uint8_t *var = out + SS2022_REQ_FIXED_SEALED;
	memcpy(var, addr, alen);
	bytes_put16(var + alen, (uint16_t)padding);
	memset(var + alen + 2, 0, padding);
	if (ss_aead_seal(a, fixed, sizeof fixed, out) || ss_aead_seal(a, var, vlen, var))
		return PROTO_ERR_STATE;
	return (ssize_t)(SS2022_REQ_FIXED_SEALED + vlen + SS_TAG_LEN);
}

ssize_t ss2022_request_open_fixed(ss_aead *a, const uint8_t *in, int64_t now)
{
	uint8_t fixed[SS2022_REQ_FIXED_LEN];
	if (ss_aead_open(a, in, SS2022_REQ_FIXED_SEALED, fixed))
		return SS2022_ERR_TAG;
	if (fixed[0] != TYPE_CLIENT)
		return SS2022_ERR_TYPE;
	if (!ss2022_time_ok(bytes_get64(fixed + 1), now))
		return SS2022_ERR_TIME;
	size_t n = bytes_get16(fixed + 9);
	return n ? (ssize_t)n : SS2022_ERR_LENGTH;
}

ssize_t ss2022_response_seal(ss_aead *a, int64_t now, const uint8_t *req_salt, size_t slen,
                             const uint8_t *in, size_t len, uint8_t *out)
{
	if (len == 0 || len > SS2022_CHUNK_PAYLOAD_MAX || slen > SS_KEY_MAX)
		return PROTO_ERR_TOO_BIG;
	uint8_t fixed[SS2022_RESP_FIXED_LEN(SS_KEY_MAX)];
	size_t flen = SS2022_RESP_FIXED_LEN(slen);
	fixed[0] = TYPE_SERVER;
	bytes_put64(fixed + 1, (uint64_t)now);
	memcpy(fixed + 9, req_salt, slen);
	bytes_put16(fixed + 9 + slen, (uint16_t)len);
	if (ss_aead_seal(a, fixed, flen, out) || ss_aead_seal(a, in, len, out + flen + SS_TAG_LEN))
		return PROTO_ERR_STATE;
	return (ssize_t)(flen + SS_TAG_LEN + len + SS_TAG_LEN);
}

ssize_t ss2022_response_open(ss_aead *a, const uint8_t *in, const uint8_t *req_salt, size_t slen,
                             int64_t now)
{
	uint8_t fixed[SS2022_RESP_FIXED_LEN(SS_KEY_MAX)];
	size_t flen = SS2022_RESP_FIXED_LEN(slen);
	if (slen > SS_KEY_MAX || ss_aead_open(a, in, flen + SS_TAG_LEN, fixed))
		return SS2022_ERR_TAG;
	if (fixed[0] != TYPE_SERVER)
		return SS2022_ERR_TYPE;
	/* SIP022 3.1.3: "The client MUST check this field in response header
	 * against the request salt." */
	if (CRYPTO_memcmp(fixed + 9, req_salt, slen) != 0)
		return SS2022_ERR_SALT;
	if (!ss2022_time_ok(bytes_get64(fixed + 1), now))
		return SS2022_ERR_TIME;
	size_t n = bytes_get16(fixed + 9 + slen);
	return n ? (ssize_t)n : SS2022_ERR_LENGTH;
}

/* ---- identity headers (SIP022-2) ---- */

void ss2022_psk_hash(const uint8_t *psk, size_t len, uint8_t hash[SS2022_IDENTITY_LEN])
{
	blake3_hash(psk, len, hash, SS2022_IDENTITY_LEN);
}

/* One AES block of in into out under the identity subkey of ipsk and
 * salt, one way or the other: ECB, no padding, one block. */
static int identity_block(ss_method m, const uint8_t *ipsk, const uint8_t *salt,
                          const uint8_t *in, uint8_t *out, bool enc)
{
	if (!ss_method_has_identity(m))
		return -1;
	size_t n = ss_key_len(m);
	uint8_t material[2 * SS_KEY_MAX], sub[SS_KEY_MAX];
	memcpy(material, ipsk, n);
	memcpy(material + n, salt, n);
	blake3_derive_key(IDENTITY_CONTEXT, material, 2 * n, sub, n);
	OPENSSL_cleanse(material, sizeof material);
	EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
	int len = 0;
	const EVP_CIPHER *ecb = fetched_cipher(n == 16 ? FETCHED_AES_128_ECB : FETCHED_AES_256_ECB);
	int ok = c && EVP_CipherInit_ex(c, ecb, NULL, sub, NULL, enc) &&
	         EVP_CIPHER_CTX_set_padding(c, 0) &&
	         EVP_CipherUpdate(c, out, &len, in, SS2022_IDENTITY_LEN) &&
	         len == SS2022_IDENTITY_LEN;
	EVP_CIPHER_CTX_free(c);
	OPENSSL_cleanse(sub, sizeof sub);
	return ok ? 0 : -1;
}

int ss2022_identity_seal(ss_method m, const uint8_t *ipsk, const uint8_t *salt,
                         const uint8_t *next_psk, uint8_t out[SS2022_IDENTITY_LEN])
{
	uint8_t hash[SS2022_IDENTITY_LEN];
	ss2022_psk_hash(next_psk, ss_key_len(m), hash);
	return identity_block(m, ipsk, salt, hash, out, true);
}

int ss2022_identity_open(ss_method m, const uint8_t *ipsk, const uint8_t *salt,
                         const uint8_t in[SS2022_IDENTITY_LEN], uint8_t hash[SS2022_IDENTITY_LEN])
{
	return identity_block(m, ipsk, salt, in, hash, false);
}
