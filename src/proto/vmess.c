/* vmess.c - VMess AEAD request and response headers, and the body chunk codec. */
#include "proto/vmess.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "crypto/ossl.h"

#include "base/bytes.h"
#include "base/hash.h"
#include "crypto/fetched.h"
#include "proto/mux.h"
#include "proto/vless.h"

enum { ATYP_IPV4 = 0x01, ATYP_DOMAIN = 0x02, ATYP_IPV6 = 0x03 };

static vmess_slice label(const char *s) { return (vmess_slice){(const uint8_t *)s, strlen(s)}; }

/* KDF(key, l) or KDF(key, l, a, b) when a is set; out is 32 bytes. */
static int kdf(const uint8_t *key, size_t key_len, const char *l, const uint8_t *a, size_t a_len,
               const uint8_t *b, size_t b_len, uint8_t out[VMESS_KDF_LEN])
{
	vmess_slice path[3] = {label(l), {a, a_len}, {b, b_len}};
	return vmess_kdf(key, key_len, path, a ? 3 : 1, out);
}

/* ---- request ---- */

static size_t put_address(uint8_t *p, const addr_dest *d)
{
	uint8_t *s = p;
	bytes_put16(p, d->port);
	p += 2;
	switch (d->kind) {
	case ADDR_IPV4:
		*p++ = ATYP_IPV4;
		memcpy(p, d->u.v4, 4);
		p += 4;
		break;
	case ADDR_IPV6:
		*p++ = ATYP_IPV6;
		memcpy(p, d->u.v6, 16);
		p += 16;
		break;
	default:
		*p++ = ATYP_DOMAIN;
		*p++ = d->u.domain.len;
		memcpy(p, d->u.domain.name, d->u.domain.len);
		p += d->u.domain.len;
		break;
	}
	return (size_t)(p - s);
}

static bool dest_ok(const addr_dest *d)
{
	if (d->kind == ADDR_IPV4 || d->kind == ADDR_IPV6)
		return true;
	return d->kind == ADDR_DOMAIN && d->u.domain.len > 0 &&
	       !memchr(d->u.domain.name, '\0', d->u.domain.len);
}

ssize_t vmess_request_seal(const uint8_t cmd_key[VMESS_KEY_LEN], int64_t now,
                           const vmess_client_random *r, uint8_t sec, uint8_t opt, uint8_t cmd,
                           const addr_dest *dest, uint8_t *out, size_t cap)
{
	if (!dest_ok(dest))
		return PROTO_ERR_MALFORMED;
	if (cap < VMESS_REQUEST_MAX)
		return PROTO_ERR_TOO_BIG;
	uint8_t h[VMESS_HEADER_MAX];
	uint8_t *p = h;
	unsigned plen = r->padding_len % 16;
	*p++ = VMESS_VERSION;
	memcpy(p, r->body_iv, 16);
	p += 16;
	memcpy(p, r->body_key, 16);
	p += 16;
	*p++ = r->auth_v;
	*p++ = opt;
	*p++ = (uint8_t)(plen << 4 | (sec & 0x0f));
	*p++ = 0; /* reserved */
	if (cmd == VMESS_CMD_TCP && mux_is_session_dest(dest))
		cmd = VMESS_CMD_MUX; /* a Mux.Cool session: no address */
	*p++ = cmd;
	if (cmd != VMESS_CMD_MUX)
		p += put_address(p, dest);
	memcpy(p, r->padding, plen);
	p += plen;
	uint32_t f = hash_fnv32(h, (size_t)(p - h));
	for (int i = 0; i < 4; i++)
		*p++ = (uint8_t)(f >> (24 - 8 * i));
	size_t hlen = (size_t)(p - h);
	assert(hlen <= VMESS_HEADER_MAX);

	uint8_t *auth = out, *slen = out + VMESS_AUTH_ID_LEN;
	uint8_t *nonce = slen + 2 + VMESS_TAG_LEN, *sh = nonce + VMESS_CONN_NONCE_LEN;
	uint8_t k[VMESS_KDF_LEN], n[VMESS_KDF_LEN], len2[2];
	bytes_put16(len2, (uint16_t)hlen);
	memcpy(nonce, r->nonce, VMESS_CONN_NONCE_LEN);
	int bad = vmess_auth_id(cmd_key, now, r->auth_rand, auth) ||
	          kdf(cmd_key, VMESS_KEY_LEN, VMESS_KDF_REQ_LEN_KEY, auth, VMESS_AUTH_ID_LEN, nonce,
	              VMESS_CONN_NONCE_LEN, k) ||
	          kdf(cmd_key, VMESS_KEY_LEN, VMESS_KDF_REQ_LEN_IV, auth, VMESS_AUTH_ID_LEN, nonce,
	              VMESS_CONN_NONCE_LEN, n) ||
	          vmess_gcm_seal(k, n, auth, VMESS_AUTH_ID_LEN, len2, 2, slen) ||
	          kdf(cmd_key, VMESS_KEY_LEN, VMESS_KDF_REQ_KEY, auth, VMESS_AUTH_ID_LEN, nonce,
	              VMESS_CONN_NONCE_LEN, k) ||
	          kdf(cmd_key, VMESS_KEY_LEN, VMESS_KDF_REQ_IV, auth, VMESS_AUTH_ID_LEN, nonce,
	              VMESS_CONN_NONCE_LEN, n) ||
	          vmess_gcm_seal(k, n, auth, VMESS_AUTH_ID_LEN, h, hlen, sh);
	OPENSSL_cleanse(k, sizeof k);
	OPENSSL_cleanse(h, sizeof h);
	if (bad)
		return PROTO_ERR_STATE;
	return (ssize_t)(sh + hlen + VMESS_TAG_LEN - out);
}

/* ---- response ---- */

void vmess_response_keys(const uint8_t body_key[16], const uint8_t body_iv[16],
                         uint8_t resp_key[16], uint8_t resp_iv[16])
{
	uint8_t d[32];
	unsigned n = 0;
	if (!EVP_Digest(body_key, 16, d, &n, fetched_md(FETCHED_SHA256), NULL))
		memset(d, 0, sizeof d);
	memcpy(resp_key, d, 16);
	if (!EVP_Digest(body_iv, 16, d, &n, fetched_md(FETCHED_SHA256), NULL))
		memset(d, 0, sizeof d);
	memcpy(resp_iv, d, 16);
}

/* The response header's four key/nonce pairs' halves: len (false) or
 * payload (true). */
static int resp_kn(const uint8_t key[16], const uint8_t iv[16], bool payload,
                   uint8_t k[VMESS_KDF_LEN], uint8_t n[VMESS_KDF_LEN])
{
	return kdf(key, 16, payload ? VMESS_KDF_RESP_KEY : VMESS_KDF_RESP_LEN_KEY, NULL, 0, NULL, 0,
	           k) ||
	       kdf(iv, 16, payload ? VMESS_KDF_RESP_IV : VMESS_KDF_RESP_LEN_IV, NULL, 0, NULL, 0, n);
}

ssize_t vmess_response_seal(const uint8_t resp_key[16], const uint8_t resp_iv[16], uint8_t v,
                            uint8_t opt, uint8_t *out, size_t cap)
{
	const size_t total = 2 + VMESS_TAG_LEN + 4 + VMESS_TAG_LEN;
	if (cap < total)
		return PROTO_ERR_TOO_BIG;
	uint8_t k[VMESS_KDF_LEN], n[VMESS_KDF_LEN];
	const uint8_t len2[2] = {0, 4}, plain[4] = {v, opt, 0, 0};
	if (resp_kn(resp_key, resp_iv, false, k, n) ||
	    vmess_gcm_seal(k, n, NULL, 0, len2, 2, out) ||
	    resp_kn(resp_key, resp_iv, true, k, n) ||
	    vmess_gcm_seal(k, n, NULL, 0, plain, 4, out + 2 + VMESS_TAG_LEN))
		return PROTO_ERR_STATE;
	return (ssize_t)total;
}

ssize_t vmess_response_open(const uint8_t resp_key[16], const uint8_t resp_iv[16], uint8_t v,
                            const uint8_t *in, size_t len)
{
	const size_t head = 2 + VMESS_TAG_LEN;
	if (len < head)
		return 0;
	uint8_t k[VMESS_KDF_LEN], n[VMESS_KDF_LEN], len2[2];
	if (resp_kn(resp_key, resp_iv, false, k, n) || vmess_gcm_open(k, n, NULL, 0, in, head, len2))
		return PROTO_ERR_MALFORMED;
	size_t plen = bytes_get16(len2);
	if (plen < 4 || plen > VMESS_RESPONSE_PLAIN_MAX)
		return PROTO_ERR_MALFORMED;
	if (len < head + plen + VMESS_TAG_LEN)
		return 0;
	uint8_t plain[VMESS_RESPONSE_PLAIN_MAX];
	if (resp_kn(resp_key, resp_iv, true, k, n) ||
	    vmess_gcm_open(k, n, NULL, 0, in + head, plen + VMESS_TAG_LEN, plain))
		return PROTO_ERR_MALFORMED;
	/* V Opt Cmd CmdLen CmdData: a command (dynamic port) is ignored */
	if (plain[0] != v || 4 + (size_t)plain[3] > plen)
		return PROTO_ERR_MALFORMED;
	return (ssize_t)(head + plen + VMESS_TAG_LEN);
}

/* ---- body ---- */

uint8_t vmess_options_for(vmess_security sec)
{
	switch (sec) {
	case VMESS_SEC_AES_128_GCM:
	case VMESS_SEC_CHACHA20_POLY1305:
		return VMESS_OPT_CHUNK_STREAM | VMESS_OPT_CHUNK_MASKING | VMESS_OPT_GLOBAL_PADDING;
	case VMESS_SEC_NONE:
		return VMESS_OPT_CHUNK_STREAM | VMESS_OPT_CHUNK_MASKING;
	default:
		return 0;
	}
}

static size_t tag_len(const vmess_body *b) { return b->aead ? VMESS_TAG_LEN : 0; }

int vmess_body_init(vmess_body *b, uint8_t sec, uint8_t opt, const uint8_t key[16],
                    const uint8_t iv[16], bool seal, const uint8_t *pad_seed)
{
	*b = (vmess_body){.sec = sec, .seal = seal};
	if (!(opt & VMESS_OPT_CHUNK_STREAM))
		return -1;
	b->masking = opt & VMESS_OPT_CHUNK_MASKING;
	/* v2ray takes the padding length from the masking stream only */
	b->padding = b->masking && (opt & VMESS_OPT_GLOBAL_PADDING);
	memcpy(b->nonce, iv, VMESS_NONCE_LEN);
	if (b->masking) {
		if (vmess_shake_init(&b->shake, iv))
			return -1;
		b->has_shake = true;
	}
	const EVP_CIPHER *c = NULL;
	uint8_t ck[32];
	if (sec == VMESS_SEC_AES_128_GCM) {
		c = fetched_cipher(FETCHED_AES_128_GCM);
		memcpy(ck, key, 16);
	} else if (sec == VMESS_SEC_CHACHA20_POLY1305) {
		c = fetched_cipher(FETCHED_CHACHA20_POLY1305);
		vmess_chacha_key(key, ck);
	} else if (sec != VMESS_SEC_NONE) {
		goto fail;
	}
	if (c) {
		b->aead = EVP_CIPHER_CTX_new();
		if (!b->aead ||
		    !(seal ? EVP_EncryptInit_ex(b->aead, c, NULL, ck, b->nonce)
		           : EVP_DecryptInit_ex(b->aead, c, NULL, ck, b->nonce)))
			goto fail;
	}
	OPENSSL_cleanse(ck, sizeof ck);
	if (seal && b->padding) {
		static const uint8_t zero_iv[16];
		b->pad = EVP_CIPHER_CTX_new();
		if (!pad_seed || !b->pad ||
		    !EVP_EncryptInit_ex(b->pad, fetched_cipher(FETCHED_CHACHA20), NULL, pad_seed, zero_iv))
			goto fail;
	}
	return 0;
fail:
	OPENSSL_cleanse(ck, sizeof ck);
	vmess_body_free(b);
	return -1;
}

void vmess_body_free(vmess_body *b)
{
	EVP_CIPHER_CTX_free(b->aead);
	EVP_CIPHER_CTX_free(b->pad);
	if (b->has_shake)
		vmess_shake_free(&b->shake);
	b->aead = b->pad = NULL;
	b->has_shake = false;
}

size_t vmess_body_chunk_max(const vmess_body *b, size_t len)
{
	return 2 + len + tag_len(b) + (b->padding ? VMESS_PADDING_MAX : 0);
}

/* The next chunk's nonce: Count(2, BE) || IV[2:12]; the count wraps as
 * v2ray's does. */
static void next_nonce(vmess_body *b)
{
	bytes_put16(b->nonce, b->count);
	b->count++;
}

ssize_t vmess_body_seal(vmess_body *b, const uint8_t *in, size_t len, uint8_t *out, size_t cap)
{
	if (len > VMESS_CHUNK_PAYLOAD_MAX || cap < vmess_body_chunk_max(b, len) || !b->seal)
		return PROTO_ERR_TOO_BIG;
	/* v2ray's order: the padding length, then the size's mask */
	size_t pad = b->padding ? vmess_shake_next(&b->shake) % 64 : 0;
	size_t sealed = len + tag_len(b);
	uint16_t size = (uint16_t)(sealed + pad);
	if (b->masking)
		size ^= vmess_shake_next(&b->shake);
	bytes_put16(out, size);
	uint8_t *c = out + 2;
	if (b->aead) {
		int n = 0;
		next_nonce(b);
		if (!EVP_EncryptInit_ex(b->aead, NULL, NULL, NULL, b->nonce) ||
		    !EVP_EncryptUpdate(b->aead, c, &n, in, (int)len) ||
		    !EVP_EncryptFinal_ex(b->aead, c + n, &n) ||
		    !EVP_CIPHER_CTX_ctrl(b->aead, EVP_CTRL_AEAD_GET_TAG, VMESS_TAG_LEN, c + len))
			return PROTO_ERR_STATE;
	} else if (len) { /* the end chunk carries nothing, and in may be NULL */
		memmove(c, in, len);
	}
	if (pad) {
		/* sent in clear: a keystream, so nothing about a PRNG's state leaks */
		static const uint8_t zeros[VMESS_PADDING_MAX];
		int n = 0;
		if (!EVP_EncryptUpdate(b->pad, c + sealed, &n, zeros, (int)pad))
			return PROTO_ERR_STATE;
	}
	return (ssize_t)(2 + sealed + pad);
}

int vmess_body_open_size(vmess_body *b, const uint8_t in[2], size_t *chunk_len, size_t *pad_len)
{
	size_t pad = b->padding ? vmess_shake_next(&b->shake) % 64 : 0;
	uint16_t size = bytes_get16(in);
	if (b->masking)
		size ^= vmess_shake_next(&b->shake);
	*chunk_len = size;
	*pad_len = pad;
	if (size == tag_len(b) + pad)
		return 0;
	if (size < tag_len(b) + pad)
		return PROTO_ERR_MALFORMED;
	return 1;
}

ssize_t vmess_body_open(vmess_body *b, uint8_t *buf, size_t chunk_len, size_t pad_len)
{
	size_t t = tag_len(b);
	if (chunk_len < t + pad_len || b->seal)
		return PROTO_ERR_MALFORMED;
	size_t len = chunk_len - pad_len - t;
	if (!b->aead)
		return (ssize_t)len;
	int n = 0;
	next_nonce(b);
	if (!EVP_DecryptInit_ex(b->aead, NULL, NULL, NULL, b->nonce) ||
	    !EVP_DecryptUpdate(b->aead, buf, &n, buf, (int)len) ||
	    !EVP_CIPHER_CTX_ctrl(b->aead, EVP_CTRL_AEAD_SET_TAG, VMESS_TAG_LEN, buf + len) ||
	    EVP_DecryptFinal_ex(b->aead, buf + n, &n) <= 0)
		return PROTO_ERR_MALFORMED;
	return (ssize_t)len;
}

/* The receive buffer's first size, and its largest (a 16-bit size and a
 * UDP frame's 2 bytes before it): v2ray writes about 2 KiB a chunk, so
 * most flows never grow it past the first. */
#define READER_START 4096
#define READER_MAX (2 + VMESS_CHUNK_SIZE_MAX)

/* Passes pending payload out; true when none is left. A UDP frame goes
 * whole or not at all. */
static bool reader_deliver(vmess_reader *r, layer_buf *out)
{
	size_t n = r->out_len - r->out_off;
	if (n == 0)
		return true;
	if (r->udp && layer_buf_room(out) < n)
		return false;
	r->out_off += layer_buf_put(out, r->buf + r->out_off, n);
	return r->out_off == r->out_len;
}

/* The chunk in buf + 2 is complete: open it and queue its payload. */
static int reader_chunk_done(vmess_reader *r)
{
	ssize_t n = vmess_body_open(&r->body, r->buf + 2, r->chunk_len, r->pad_len);
	if (n < 0)
		return LAYER_ERR_PROTO;
	r->have_size = false;
	r->size_fill = r->fill = 0;
	if (!r->udp) {
		r->out_off = 2;
		r->out_len = 2 + (size_t)n;
	} else if (n > 0 && n <= VLESS_UDP_PAYLOAD_MAX) {
		bytes_put16(r->buf, (uint16_t)n);
		r->out_off = 0;
		r->out_len = 2 + (size_t)n;
	} /* else: an empty or oversized datagram is dropped */
	return 0;
}

/* The size field is complete: the chunk's length, the end, or an error;
 * grows the buffer to hold the chunk. */
static int reader_size_done(vmess_reader *r)
{
	int k = vmess_body_open_size(&r->body, r->size2, &r->chunk_len, &r->pad_len);
	if (k < 0)
		return LAYER_ERR_PROTO;
	if (k == 0) {
		r->ended = true;
		return 0;
	}
	r->have_size = true;
	size_t need = 2 + r->chunk_len;
	if (need > r->cap) {
		size_t cap = need <= READER_START ? READER_START : READER_MAX;
		uint8_t *b = realloc(r->buf, cap);
		if (!b)
			return LAYER_ERR_NOMEM;
		r->buf = b;
		r->cap = cap;
	}
	return 0;
}

ssize_t vmess_reader_feed(vmess_reader *r, const uint8_t *in, size_t len, layer_buf *out)
{
	size_t used = 0;
	while (reader_deliver(r, out)) {
		if (r->ended)
			return (ssize_t)len; /* after the end chunk: ignored */
		if (used == len)
			break;
		if (!r->have_size) {
			while (r->size_fill < 2 && used < len)
				r->size2[r->size_fill++] = in[used++];
			if (r->size_fill < 2)
				break;
			int rc = reader_size_done(r);
			if (rc)
				return rc;
			if (r->ended)
				continue;
		}
		size_t want = r->chunk_len - r->fill, take = len - used < want ? len - used : want;
		memcpy(r->buf + 2 + r->fill, in + used, take);
		r->fill += take;
		used += take;
		if (r->fill < r->chunk_len)
			break;
		int rc = reader_chunk_done(r);
		if (rc)
			return rc;
	}
	return (ssize_t)used;
}

void vmess_reader_free(vmess_reader *r)
{
	vmess_body_free(&r->body);
	free(r->buf);
	r->buf = NULL;
	r->cap = 0;
}
