/* vmess_crypto.c - VMess AEAD's primitives over OpenSSL EVP: command key, KDF, AuthID, GCM, the SHAKE128 mask stream. */
#include "proto/vmess_crypto.h"

#include <assert.h>
#include <string.h>

#include "crypto/ossl.h"

#include "crypto/fetched.h"

/* v2ray's constant for the command key (common/protocol/id.go). */
static const char CMD_KEY_SALT[] = "c48619fe-8f02-49e0-b9e9-edf763e17e21";
static const char KDF_ROOT[] = "VMess AEAD KDF";

#define HMAC_BLOCK 64 /* SHA-256's block; every level of the KDF keeps it */

/* The longest message one level of the KDF hashes: the key (at most an
 * HMAC block) behind one block of padded key per level above it. */
#define KDF_MSG_MAX (HMAC_BLOCK * (VMESS_KDF_PATH_MAX + 2) + VMESS_KDF_LEN)

void vmess_cmd_key(const uint8_t uuid[16], uint8_t out[VMESS_KEY_LEN])
{
	uint8_t m[16 + sizeof CMD_KEY_SALT - 1];
	memcpy(m, uuid, 16);
	memcpy(m + 16, CMD_KEY_SALT, sizeof CMD_KEY_SALT - 1);
	unsigned n = 0;
	if (!EVP_Digest(m, sizeof m, out, &n, fetched_md(FETCHED_MD5), NULL))
		memset(out, 0, VMESS_KEY_LEN); /* cannot happen with the default provider */
}

/* The hash of level `level` over msg: level 0 is SHA-256, level i an HMAC
 * keyed with labels[i - 1] whose hash is level i - 1 (Go's hmac.New with
 * the parent's constructor: the block stays 64 bytes). */
static int kdf_hash(const vmess_slice *labels, size_t level, const uint8_t *msg, size_t len,
                    uint8_t out[VMESS_KDF_LEN])
{
	if (len > KDF_MSG_MAX)
		return -1;
	if (level == 0)
		return EVP_Digest(msg, len, out, NULL, fetched_md(FETCHED_SHA256), NULL) ? 0 : -1;
	const vmess_slice *key = &labels[level - 1];
	uint8_t k[HMAC_BLOCK] = {0};
	if (key->len > HMAC_BLOCK)
		return -1; /* no label is: the callers' bound */
	memcpy(k, key->p, key->len);
	uint8_t buf[HMAC_BLOCK + KDF_MSG_MAX];
	uint8_t inner[VMESS_KDF_LEN];
	for (size_t i = 0; i < HMAC_BLOCK; i++)
		buf[i] = k[i] ^ 0x36;
	memcpy(buf + HMAC_BLOCK, msg, len);
	if (kdf_hash(labels, level - 1, buf, HMAC_BLOCK + len, inner))
		return -1;
	for (size_t i = 0; i < HMAC_BLOCK; i++)
		buf[i] = k[i] ^ 0x5c;
	memcpy(buf + HMAC_BLOCK, inner, VMESS_KDF_LEN);
	return kdf_hash(labels, level - 1, buf, HMAC_BLOCK + VMESS_KDF_LEN, out);
}

int vmess_kdf(const uint8_t *key, size_t key_len, const vmess_slice *path, size_t n,
              uint8_t out[VMESS_KDF_LEN])
{
	if (n > VMESS_KDF_PATH_MAX || key_len > HMAC_BLOCK)
		return -1;
	vmess_slice labels[VMESS_KDF_PATH_MAX + 1];
	labels[0] = (vmess_slice){(const uint8_t *)KDF_ROOT, sizeof KDF_ROOT - 1};
	for (size_t i = 0; i < n; i++)
		labels[i + 1] = path[i];
	return kdf_hash(labels, n + 1, key, key_len, out);
}

int vmess_gcm_seal(const uint8_t key[VMESS_KEY_LEN], const uint8_t nonce[VMESS_NONCE_LEN],
                   const uint8_t *aad, size_t aad_len, const uint8_t *in, size_t len,
                   uint8_t *out)
{
	EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
	int n = 0, ok = c && len <= INT32_MAX &&
	                EVP_EncryptInit_ex(c, fetched_cipher(FETCHED_AES_128_GCM), NULL, key, nonce) &&
	                (!aad_len || EVP_EncryptUpdate(c, NULL, &n, aad, (int)aad_len)) &&
	                EVP_EncryptUpdate(c, out, &n, in, (int)len) &&
	                EVP_EncryptFinal_ex(c, out + n, &n) &&
	                EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_GET_TAG, VMESS_TAG_LEN, out + len);
	EVP_CIPHER_CTX_free(c);
	return ok ? 0 : -1;
}

int vmess_gcm_open(const uint8_t key[VMESS_KEY_LEN], const uint8_t nonce[VMESS_NONCE_LEN],
                   const uint8_t *aad, size_t aad_len, const uint8_t *in, size_t len,
                   uint8_t *out)
{
	if (len < VMESS_TAG_LEN || len > INT32_MAX)
		return -1;
	size_t body = len - VMESS_TAG_LEN;
	uint8_t tag[VMESS_TAG_LEN];
	memcpy(tag, in + body, VMESS_TAG_LEN);
	EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
	const EVP_CIPHER *gcm = fetched_cipher(FETCHED_AES_128_GCM);
	int n = 0, ok = c && EVP_DecryptInit_ex(c, gcm, NULL, key, nonce) &&
	                (!aad_len || EVP_DecryptUpdate(c, NULL, &n, aad, (int)aad_len)) &&
	                EVP_DecryptUpdate(c, out, &n, in, (int)body) &&
	                EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_SET_TAG, VMESS_TAG_LEN, tag) &&
	                EVP_DecryptFinal_ex(c, out + n, &n) > 0;
	EVP_CIPHER_CTX_free(c);
	return ok ? 0 : -1;
}

/* CRC-32 (IEEE 802.3, reflected, as Go's crc32.ChecksumIEEE): OpenSSL has
 * none, and twelve bytes per connection need no table. */
static uint32_t crc32_ieee(const uint8_t *p, size_t n)
{
	uint32_t c = 0xffffffffu;
	for (size_t i = 0; i < n; i++) {
		c ^= p[i];
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1)));
	}
	return ~c;
}

int vmess_auth_key(const uint8_t cmd_key[VMESS_KEY_LEN], uint8_t out[VMESS_KEY_LEN])
{
	uint8_t k[VMESS_KDF_LEN];
	const vmess_slice path[1] = {
		{(const uint8_t *)VMESS_KDF_AUTH_ID_KEY, sizeof VMESS_KDF_AUTH_ID_KEY - 1}};
	if (vmess_kdf(cmd_key, VMESS_KEY_LEN, path, 1, k))
		return -1;
	memcpy(out, k, VMESS_KEY_LEN);
	OPENSSL_cleanse(k, sizeof k);
	return 0;
}

/* One AES-128 block with key, either way (ECB, no padding). */
static int aes_block(const uint8_t key[VMESS_KEY_LEN], bool enc, const uint8_t in[16],
                     uint8_t out[16])
{
	EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
	const EVP_CIPHER *ecb = fetched_cipher(FETCHED_AES_128_ECB);
	int n = 0, ok = c && EVP_CipherInit_ex(c, ecb, NULL, key, NULL, enc) &&
	                EVP_CIPHER_CTX_set_padding(c, 0) && EVP_CipherUpdate(c, out, &n, in, 16) &&
	                n == 16;
	EVP_CIPHER_CTX_free(c);
	return ok ? 0 : -1;
}

int vmess_auth_id(const uint8_t cmd_key[VMESS_KEY_LEN], int64_t now, const uint8_t rand4[4],
                  uint8_t out[VMESS_KEY_LEN])
{
	uint8_t k[VMESS_KEY_LEN];
	if (vmess_auth_key(cmd_key, k))
		return -1;
	uint8_t p[16];
	uint64_t t = (uint64_t)now;
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(t >> (56 - 8 * i));
	memcpy(p + 8, rand4, 4);
	uint32_t crc = crc32_ieee(p, 12);
	for (int i = 0; i < 4; i++)
		p[12 + i] = (uint8_t)(crc >> (24 - 8 * i));
	int r = aes_block(k, true, p, out);
	OPENSSL_cleanse(k, sizeof k);
	return r;
}

int vmess_auth_id_open(const uint8_t auth_key[VMESS_KEY_LEN], const uint8_t id[VMESS_KEY_LEN],
                       int64_t *time)
{
	uint8_t p[16];
	if (aes_block(auth_key, false, id, p))
		return -1;
	uint32_t crc = 0;
	uint64_t t = 0;
	for (int i = 0; i < 4; i++)
		crc = crc << 8 | p[12 + i];
	for (int i = 0; i < 8; i++)
		t = t << 8 | p[i];
	if (crc != crc32_ieee(p, 12))
		return -1;
	*time = (int64_t)t;
	return 0;
}

void vmess_chacha_key(const uint8_t key[VMESS_KEY_LEN], uint8_t out[32])
{
	unsigned n = 0;
	if (!EVP_Digest(key, VMESS_KEY_LEN, out, &n, fetched_md(FETCHED_MD5), NULL) ||
	    !EVP_Digest(out, 16, out + 16, &n, fetched_md(FETCHED_MD5), NULL))
		memset(out, 0, 32);
}

vmess_security vmess_security_auto(void)
{
#if defined(__x86_64__) || defined(__i386__)
	/* GCM is fast with AES-NI and PCLMULQDQ both (Go's check, which v2ray
	 * uses, is the same). OpenSSL 3 no longer exports its CPUID copy
	 * (OPENSSL_ia32cap_loc), so ask the compiler's. */
	if (__builtin_cpu_supports("aes") && __builtin_cpu_supports("pclmul"))
		return VMESS_SEC_AES_128_GCM;
	return VMESS_SEC_CHACHA20_POLY1305;
#elif defined(__aarch64__) || defined(__s390x__)
	return VMESS_SEC_AES_128_GCM; /* v2ray takes AES there too */
#else
	return VMESS_SEC_CHACHA20_POLY1305;
#endif
}

/* ---- SHAKE128 as a stream ---- */

#define SHAKE128_RATE 168

#if OPENSSL_VERSION_NUMBER >= 0x30300000L

int vmess_shake_init(vmess_shake *s, const uint8_t iv[VMESS_KEY_LEN])
{
	s->ctx = EVP_MD_CTX_new();
	s->used = sizeof s->out;
	return s->ctx && EVP_DigestInit_ex(s->ctx, fetched_md(FETCHED_SHAKE128), NULL) &&
	               EVP_DigestUpdate(s->ctx, iv, VMESS_KEY_LEN)
	           ? 0
	           : -1;
}

static void refill(vmess_shake *s)
{
	if (!EVP_DigestSqueeze(s->ctx, s->out, sizeof s->out))
		memset(s->out, 0, sizeof s->out);
	s->used = 0;
}

void vmess_shake_free(vmess_shake *s)
{
	EVP_MD_CTX_free(s->ctx);
	s->ctx = NULL;
}

#else

/* OpenSSL before 3.3 finalises a SHAKE once (EVP_DigestFinalXOF) and
 * cannot squeeze more later, while a VMess body needs an endless mask
 * stream. So the permutation below (FIPS 202, Keccak-f[1600]) squeezes
 * block by block; the unit tests check its output against OpenSSL's
 * one-shot SHAKE128. */

static const uint64_t RC[24] = {
	0x0000000000000001ull, 0x0000000000008082ull, 0x800000000000808aull, 0x8000000080008000ull,
	0x000000000000808bull, 0x0000000080000001ull, 0x8000000080008081ull, 0x8000000000008009ull,
	0x000000000000008aull, 0x0000000000000088ull, 0x0000000080008009ull, 0x000000008000000aull,
	0x000000008000808bull, 0x800000000000008bull, 0x8000000000008089ull, 0x8000000000008003ull,
	0x8000000000008002ull, 0x8000000000000080ull, 0x000000000000800aull, 0x800000008000000aull,
	0x8000000080008081ull, 0x8000000000008080ull, 0x0000000080000001ull, 0x8000000080008008ull,
};
static const unsigned ROT[24] = {1,  3,  6,  10, 15, 21, 28, 36, 45, 55, 2,  14,
                                 27, 41, 56, 8,  25, 43, 62, 18, 39, 61, 20, 44};
static const unsigned PI[24] = {10, 7,  11, 17, 18, 3, 5,  16, 8,  21, 24, 4,
                                15, 23, 19, 13, 12, 2, 20, 14, 22, 9,  6,  1};

static uint64_t rotl(uint64_t x, unsigned n) { return x << n | x >> (64 - n); }

static void keccak_f(uint64_t st[25])
{
	for (int r = 0; r < 24; r++) {
		uint64_t bc[5], t;
		for (int i = 0; i < 5; i++)
			bc[i] = st[i] ^ st[i + 5] ^ st[i + 10] ^ st[i + 15] ^ st[i + 20];
		for (int i = 0; i < 5; i++) {
			t = bc[(i + 4) % 5] ^ rotl(bc[(i + 1) % 5], 1);
			for (int j = 0; j < 25; j += 5)
				st[j + i] ^= t;
		}
		t = st[1];
		for (int i = 0; i < 24; i++) {
			unsigned j = PI[i];
			uint64_t b = st[j];
			st[j] = rotl(t, ROT[i]);
			t = b;
		}
		for (int j = 0; j < 25; j += 5) {
			for (int i = 0; i < 5; i++)
				bc[i] = st[j + i];
			for (int i = 0; i < 5; i++)
				st[j + i] ^= ~bc[(i + 1) % 5] & bc[(i + 2) % 5];
		}
		st[0] ^= RC[r];
	}
}

static void xor_byte(uint64_t st[25], size_t i, uint8_t b) { st[i / 8] ^= (uint64_t)b << (8 * (i % 8)); }

int vmess_shake_init(vmess_shake *s, const uint8_t iv[VMESS_KEY_LEN])
{
	memset(s->st, 0, sizeof s->st);
	for (size_t i = 0; i < VMESS_KEY_LEN; i++)
		xor_byte(s->st, i, iv[i]);
	xor_byte(s->st, VMESS_KEY_LEN, 0x1f); /* SHAKE's domain bits and the first pad bit */
	xor_byte(s->st, SHAKE128_RATE - 1, 0x80);
	s->used = sizeof s->out;
	return 0;
}

static void refill(vmess_shake *s)
{
	keccak_f(s->st);
	for (size_t i = 0; i < SHAKE128_RATE; i++)
		s->out[i] = (uint8_t)(s->st[i / 8] >> (8 * (i % 8)));
	s->used = 0;
}

void vmess_shake_free(vmess_shake *s) { (void)s; }

#endif

uint16_t vmess_shake_next(vmess_shake *s)
{
	/* 168 is even: a pair never straddles two blocks */
	static_assert(SHAKE128_RATE % 2 == 0, "mask pairs align with blocks");
	if (s->used >= sizeof s->out)
		refill(s);
	uint16_t v = (uint16_t)(s->out[s->used] << 8 | s->out[s->used + 1]);
	s->used += 2;
	return v;
}
