/* shadowsocks.c - Shadowsocks AEAD's primitives over OpenSSL EVP: methods, the master key (or 2022's PSK), HKDF-SHA1 (or 2022's BLAKE3) subkeys, the nonce-counted AEAD, chunks, addresses and UDP packets. */
#include "proto/shadowsocks.h"

#include <string.h>

#include "crypto/ossl.h"

#include "base/bytes.h"
#include "crypto/blake3.h"
#include "crypto/fetched.h"
#include "proto/socks_addr.h"

static const struct {
	const char *name;
	size_t key_len;
	bool is_2022;
} METHODS[SS_METHOD_COUNT_] = {
	[SS_METHOD_AES_128_GCM] = {"aes-128-gcm", 16, false},
	[SS_METHOD_AES_256_GCM] = {"aes-256-gcm", 32, false},
	[SS_METHOD_CHACHA20_POLY1305] = {"chacha20-ietf-poly1305", 32, false},
	/* SIP022 2.1's table; chacha20's key is ChaCha20's, 32 bytes */
	[SS_METHOD_2022_AES_128_GCM] = {"2022-blake3-aes-128-gcm", 16, true},
	[SS_METHOD_2022_AES_256_GCM] = {"2022-blake3-aes-256-gcm", 32, true},
	[SS_METHOD_2022_CHACHA20_POLY1305] = {"2022-blake3-chacha20-poly1305", 32, true},
};

/* SIP022 2.2 */
#define SS2022_SUBKEY_CONTEXT "shadowsocks 2022 session subkey"

static const EVP_CIPHER *cipher_of(ss_method m)
{
	switch (m) {
	case SS_METHOD_AES_128_GCM:
	case SS_METHOD_2022_AES_128_GCM:
		return fetched_cipher(FETCHED_AES_128_GCM);
	case SS_METHOD_AES_256_GCM:
	case SS_METHOD_2022_AES_256_GCM:
		return fetched_cipher(FETCHED_AES_256_GCM);
	case SS_METHOD_CHACHA20_POLY1305:
	case SS_METHOD_2022_CHACHA20_POLY1305:
		return fetched_cipher(FETCHED_CHACHA20_POLY1305);
	default:
		return NULL;
	}
}

int ss_method_parse(const char *name, ss_method *m)
{
	for (size_t i = 0; name && i < SS_METHOD_COUNT_; i++)
		if (strcmp(METHODS[i].name, name) == 0) {
			*m = (ss_method)i;
			return 0;
		}
	return -1;
}

const char *ss_method_name(ss_method m)
{
	return (unsigned)m < SS_METHOD_COUNT_ ? METHODS[m].name : "?";
}

size_t ss_key_len(ss_method m) { return (unsigned)m < SS_METHOD_COUNT_ ? METHODS[m].key_len : 0; }

bool ss_method_is_2022(ss_method m) { return (unsigned)m < SS_METHOD_COUNT_ && METHODS[m].is_2022; }

size_t ss_chunk_max(ss_method m)
{
	if ((unsigned)m >= SS_METHOD_COUNT_)
		return 0;
	return METHODS[m].is_2022 ? SS2022_CHUNK_PAYLOAD_MAX : SS_CHUNK_PAYLOAD_MAX;
}

/* SIP022 2.1: the PSK is given in base64. Strict: the padded form of
 * exactly n bytes (RFC 4648 4), nothing around it, so a key cut short or
 * pasted with a newline is a config error, not another key. */
static int psk_decode(const char *b64, size_t len, size_t n, uint8_t *out)
{
	static const char ALPHABET[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t want = (n + 2) / 3 * 4, pad = (3 - n % 3) % 3;
	if (len != want || len > 64)
		return -1;
	for (size_t i = 0; i < len; i++)
		if (i < len - pad ? !memchr(ALPHABET, b64[i], sizeof ALPHABET - 1) : b64[i] != '=')
			return -1;
	uint8_t buf[48];
	int r = EVP_DecodeBlock(buf, (const uint8_t *)b64, (int)len);
	int ok = r >= 0 && (size_t)r == len / 4 * 3;
	if (ok)
		memcpy(out, buf, n);
	OPENSSL_cleanse(buf, sizeof buf);
	return ok ? 0 : -1;
}

/* EVP_BytesToKey with MD5, no salt, one round: D_i = MD5(D_{i-1} ||
 * password), the key their concatenation (shadowsocks.org's "Key
 * Derivation", which names OpenSSL's function). */
int ss_master_key(ss_method m, const char *password, size_t len, uint8_t out[SS_KEY_MAX])
{
	const EVP_CIPHER *c = cipher_of(m);
	if (!c || len > INT32_MAX)
		return -1;
	if (ss_method_is_2022(m))
		return psk_decode(password, len, ss_key_len(m), out);
	uint8_t key[EVP_MAX_KEY_LENGTH], iv[EVP_MAX_IV_LENGTH];
	/* the cipher only sets how many bytes come out: its key length */
	int n = EVP_BytesToKey(c, fetched_md(FETCHED_MD5), NULL, (const uint8_t *)password, (int)len,
	                       1, key, iv);
	int ok = n == (int)ss_key_len(m);
	if (ok)
		memcpy(out, key, (size_t)n);
	OPENSSL_cleanse(key, sizeof key);
	return ok ? 0 : -1;
}

bool ss_method_has_identity(ss_method m)
{
	return m == SS_METHOD_2022_AES_128_GCM || m == SS_METHOD_2022_AES_256_GCM;
}

int ss_client_keys(ss_method m, const char *password, size_t len, uint8_t key[SS_KEY_MAX],
                   ss_identity *id)
{
	*id = (ss_identity){0};
	if (!ss_method_is_2022(m))
		return ss_master_key(m, password, len, key) ? SS_KEYS_ERR_PSK : 0;
	/* SIP022-2: "A set of PSKs, delimited by `:`"; the last is the user's */
	size_t start = 0;
	for (size_t i = 0; i <= len; i++) {
		if (i < len && password[i] != ':')
			continue;
		bool last = i == len;
		if (!last && id->n == SS2022_IDENTITY_MAX)
			return SS_KEYS_ERR_TOO_MANY;
		uint8_t *out = last ? key : id->ipsk[id->n];
		if (ss_master_key(m, password + start, i - start, out))
			return SS_KEYS_ERR_PSK;
		if (!last)
			id->n++;
		start = i + 1;
	}
	return id->n && !ss_method_has_identity(m) ? SS_KEYS_ERR_METHOD : 0;
}

int ss_subkey(ss_method m, const uint8_t *key, const uint8_t *salt, uint8_t out[SS_KEY_MAX])
{
	size_t n = ss_key_len(m);
	if (!n)
		return -1;
	if (ss_method_is_2022(m)) {
		uint8_t material[2 * SS_KEY_MAX];
		memcpy(material, key, n);
		memcpy(material + n, salt, n);
		blake3_derive_key(SS2022_SUBKEY_CONTEXT, material, 2 * n, out, n);
		OPENSSL_cleanse(material, sizeof material);
		return 0;
	}
	/* once per connection and direction: EVP_PKEY's HKDF set up a context
	 * and fetched HKDF, SHA-1 and HMAC by name on every call */
	return fetched_hkdf_sha1(key, n, salt, n, (const uint8_t *)SS_SUBKEY_INFO,
	                         sizeof SS_SUBKEY_INFO - 1, out, n);
}

/* ---- the AEAD ---- */

int ss_aead_init(ss_aead *a, ss_method m, const uint8_t *subkey, bool seal)
{
	*a = (ss_aead){.seal = seal, .chunk_max = ss_chunk_max(m)};
	const EVP_CIPHER *c = cipher_of(m);
	a->ctx = c ? EVP_CIPHER_CTX_new() : NULL;
	if (!a->ctx || !EVP_CipherInit_ex(a->ctx, c, NULL, NULL, NULL, seal) ||
	    !EVP_CIPHER_CTX_ctrl(a->ctx, EVP_CTRL_AEAD_SET_IVLEN, SS_NONCE_LEN, NULL) ||
	    !EVP_CipherInit_ex(a->ctx, NULL, NULL, subkey, NULL, seal)) {
		ss_aead_free(a);
		return -1;
	}
	return 0;
}

void ss_aead_free(ss_aead *a)
{
	EVP_CIPHER_CTX_free(a->ctx);
	*a = (ss_aead){0};
}

/* The nonce is a little-endian counter (SIP004). */
static void nonce_step(uint8_t n[SS_NONCE_LEN])
{
	for (size_t i = 0; i < SS_NONCE_LEN && ++n[i] == 0; i++)
		;
}

int ss_aead_seal(ss_aead *a, const uint8_t *in, size_t len, uint8_t *out)
{
	int n = 0;
	int ok = a->ctx && a->seal && len <= INT32_MAX &&
	         EVP_CipherInit_ex(a->ctx, NULL, NULL, NULL, a->nonce, 1) &&
	         EVP_EncryptUpdate(a->ctx, out, &n, in, (int)len) &&
	         EVP_EncryptFinal_ex(a->ctx, out + n, &n) &&
	         EVP_CIPHER_CTX_ctrl(a->ctx, EVP_CTRL_AEAD_GET_TAG, SS_TAG_LEN, out + len);
	if (!ok)
		return -1;
	nonce_step(a->nonce);
	return 0;
}

int ss_aead_open(ss_aead *a, const uint8_t *in, size_t len, uint8_t *out)
{
	if (!a->ctx || a->seal || len < SS_TAG_LEN || len > INT32_MAX)
		return -1;
	size_t body = len - SS_TAG_LEN;
	uint8_t tag[SS_TAG_LEN];
	memcpy(tag, in + body, SS_TAG_LEN); /* out may be in: keep the tag first */
	int n = 0;
	int ok = EVP_CipherInit_ex(a->ctx, NULL, NULL, NULL, a->nonce, 0) &&
	         EVP_DecryptUpdate(a->ctx, out, &n, in, (int)body) &&
	         EVP_CIPHER_CTX_ctrl(a->ctx, EVP_CTRL_AEAD_SET_TAG, SS_TAG_LEN, tag) &&
	         EVP_DecryptFinal_ex(a->ctx, out + n, &n) > 0;
	if (!ok)
		return -1;
	nonce_step(a->nonce);
	return 0;
}

/* ---- chunks ---- */

ssize_t ss_chunk_seal(ss_aead *a, const uint8_t *in, size_t len, uint8_t *out)
{
	if (len == 0 || len > a->chunk_max)
		return PROTO_ERR_TOO_BIG;
	uint8_t len2[2];
	bytes_put16(len2, (uint16_t)len);
	if (ss_aead_seal(a, len2, 2, out) || ss_aead_seal(a, in, len, out + SS_LEN_BLOCK))
		return PROTO_ERR_STATE;
	return (ssize_t)(SS_LEN_BLOCK + len + SS_TAG_LEN);
}

ssize_t ss_chunk_open_len(ss_aead *a, const uint8_t *in)
{
	uint8_t len2[2];
	if (ss_aead_open(a, in, SS_LEN_BLOCK, len2))
		return PROTO_ERR_MALFORMED;
	size_t n = bytes_get16(len2);
	/* SIP004: the two high bits are reserved, zero (SIP022 lifts this);
	 * and no sender seals an empty chunk (shadowsocks-libev refuses one
	 * too) */
	if (n == 0 || n > a->chunk_max)
		return PROTO_ERR_TOO_BIG;
	return (ssize_t)n;
}

int ss_chunk_open_payload(ss_aead *a, uint8_t *buf, size_t len)
{
	return ss_aead_open(a, buf, len + SS_TAG_LEN, buf) ? PROTO_ERR_MALFORMED : 0;
}

ssize_t ss_reader_feed(ss_reader *r, ss_aead *a, const uint8_t *in, size_t len, layer_buf *out)
{
	size_t used = 0;
	for (;;) {
		r->out_off += layer_buf_put(out, r->rbuf + r->out_off, r->out_len - r->out_off);
		if (r->out_off < r->out_len || used == len)
			break;
		size_t n;
		if (r->chunk_len == 0) {
			n = SS_LEN_BLOCK - r->len_fill < len - used ? SS_LEN_BLOCK - r->len_fill
			                                            : len - used;
			memcpy(r->len_block + r->len_fill, in + used, n);
			r->len_fill += n;
			used += n;
			if (r->len_fill < SS_LEN_BLOCK)
				break;
			ssize_t c = ss_chunk_open_len(a, r->len_block);
			if (c < 0)
				return c;
			r->chunk_len = (size_t)c;
			r->len_fill = 0;
			continue;
		}
		size_t want = r->chunk_len + SS_TAG_LEN - r->rfill;
		n = want < len - used ? want : len - used;
		memcpy(r->rbuf + r->rfill, in + used, n);
		r->rfill += n;
		used += n;
		if (r->rfill < r->chunk_len + SS_TAG_LEN)
			break;
		if (ss_chunk_open_payload(a, r->rbuf, r->chunk_len))
			return PROTO_ERR_MALFORMED;
		r->out_off = 0;
		r->out_len = r->chunk_len;
		r->chunk_len = r->rfill = 0;
	}
	return (ssize_t)used;
}

/* ---- addresses ---- */

ssize_t ss_addr_span(const uint8_t *p, size_t len)
{
	if (len < 1)
		return 0;
	size_t n;
	switch (p[0]) {
	case SOCKS_ATYP_IPV4:
		n = 1 + 4 + 2;
		break;
	case SOCKS_ATYP_IPV6:
		n = 1 + 16 + 2;
		break;
	case SOCKS_ATYP_DOMAIN:
		if (len < 2)
			return 0;
		if (p[1] == 0)
			return PROTO_ERR_MALFORMED;
		n = 1 + 1 + (size_t)p[1] + 2;
		break;
	default:
		return PROTO_ERR_MALFORMED;
	}
	return len < n ? 0 : (ssize_t)n;
}

/* ---- UDP packets ---- */

/* The AEAD of one packet: its subkey from key and salt, nonce zero. */
static int packet_aead(ss_aead *a, ss_method m, const uint8_t *key, const uint8_t *salt,
                       bool seal)
{
	uint8_t sub[SS_KEY_MAX];
	int r = ss_subkey(m, key, salt, sub) || ss_aead_init(a, m, sub, seal) ? -1 : 0;
	OPENSSL_cleanse(sub, sizeof sub);
	return r;
}

ssize_t ss_packet_seal(ss_method m, const uint8_t *key, const uint8_t *salt, const uint8_t *in,
                       size_t len, uint8_t *out, size_t cap)
{
	size_t s = ss_key_len(m);
	if (ss_method_is_2022(m))
		return PROTO_ERR_STATE; /* SIP022's UDP is another format: shadowsocks2022_udp.h */
	if (!s || cap < s || cap - s < SS_TAG_LEN || cap - s - SS_TAG_LEN < len)
		return PROTO_ERR_TOO_BIG;
	ss_aead a;
	if (packet_aead(&a, m, key, salt, true))
		return PROTO_ERR_STATE;
	memcpy(out, salt, s);
	int bad = ss_aead_seal(&a, in, len, out + s);
	ss_aead_free(&a);
	return bad ? PROTO_ERR_STATE : (ssize_t)(s + len + SS_TAG_LEN);
}

ssize_t ss_packet_open(ss_method m, const uint8_t *key, const uint8_t *in, size_t len,
                       uint8_t *out, size_t cap)
{
	size_t s = ss_key_len(m);
	if (!s || ss_method_is_2022(m) || len < s + SS_TAG_LEN)
		return PROTO_ERR_MALFORMED;
	size_t plain = len - s - SS_TAG_LEN;
	if (cap < plain)
		return PROTO_ERR_TOO_BIG;
	ss_aead a;
	if (packet_aead(&a, m, key, in, false))
		return PROTO_ERR_MALFORMED;
	int bad = ss_aead_open(&a, in + s, len - s, out);
	ss_aead_free(&a);
	return bad ? PROTO_ERR_MALFORMED : (ssize_t)plain;
}
