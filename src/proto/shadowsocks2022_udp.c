/* shadowsocks2022_udp.c - Shadowsocks 2022's UDP packets (SIP022 3.2, 4.1; SIP022-2's UDP identity headers): seal, open with the checks, the sliding replay window, XChaCha20-Poly1305 over OpenSSL's ChaCha20-Poly1305. */
#include "proto/shadowsocks2022_udp.h"

#include <string.h>

#include "crypto/ossl.h"

#include "base/bytes.h"
#include "crypto/blake3.h"
#include "crypto/fetched.h"

/* SIP022 2.2, the same context as TCP's; the material is PSK || session ID */
#define SUBKEY_CONTEXT "shadowsocks 2022 session subkey"
/* SIP022 3.2.3: HeaderTypeClientPacket, HeaderTypeServerPacket */
#define TYPE_CLIENT 0
#define TYPE_SERVER 1
/* The main header without padding and address: type, timestamp, (server:
 * client session ID), padding length. */
#define MAIN_LEN(server) (1 + 8 + ((server) ? SS2022_SESSION_ID_LEN : 0) + 2)

enum { T_TAG, T_TYPE, T_TIME, T_TOO_BIG, T_STATE, T_SHORT, T_IDENTITY, T_REPLAY, T_SESSION,
       T_PADDING, T_ADDRESS, T_UNKNOWN, T_COUNT_ };
static const char *const TEXTS[T_COUNT_] = {
	[T_TAG] = "shadowsocks: UDP packet does not open (another key, or bytes changed)",
	[T_TYPE] = "shadowsocks: UDP packet of the wrong type",
	[T_TIME] = "shadowsocks: UDP packet timestamp out of the window",
	[T_TOO_BIG] = "shadowsocks: UDP packet too big",
	[T_STATE] = "shadowsocks: UDP packet cannot be sealed or opened (out of memory)",
	[T_SHORT] = "shadowsocks: UDP packet shorter than its headers",
	[T_IDENTITY] = "shadowsocks: unknown identity (no user's key hash matches the identity header)",
	[T_REPLAY] = "shadowsocks: replayed UDP packet",
	[T_SESSION] = "shadowsocks: UDP packet for another session",
	[T_PADDING] = "shadowsocks: UDP packet padding runs past the packet",
	[T_ADDRESS] = "shadowsocks: UDP packet with a bad address",
	[T_UNKNOWN] = "?",
};

const char *ss2022_udp_strerror(int err)
{
	switch (err) {
	case SS2022_UDP_ERR_TAG: return TEXTS[T_TAG];
	case SS2022_UDP_ERR_TYPE: return TEXTS[T_TYPE];
	case SS2022_UDP_ERR_TIME: return TEXTS[T_TIME];
	case SS2022_UDP_ERR_TOO_BIG: return TEXTS[T_TOO_BIG];
	case SS2022_UDP_ERR_STATE: return TEXTS[T_STATE];
	case SS2022_UDP_ERR_SHORT: return TEXTS[T_SHORT];
	case SS2022_UDP_ERR_IDENTITY: return TEXTS[T_IDENTITY];
	case SS2022_UDP_ERR_REPLAY: return TEXTS[T_REPLAY];
	case SS2022_UDP_ERR_SESSION: return TEXTS[T_SESSION];
	case SS2022_UDP_ERR_PADDING: return TEXTS[T_PADDING];
	case SS2022_UDP_ERR_ADDRESS: return TEXTS[T_ADDRESS];
	default: return TEXTS[T_UNKNOWN];
	}
}

/* ---- the window ---- */

static bool bit_get(const ss2022_window *w, uint64_t id)
{
	size_t i = (size_t)(id % SS2022_UDP_WINDOW);
	return w->bits[i / 64] >> (i % 64) & 1;
}

static void bit_put(ss2022_window *w, uint64_t id, bool on)
{
	size_t i = (size_t)(id % SS2022_UDP_WINDOW);
	uint64_t m = (uint64_t)1 << (i % 64);
	w->bits[i / 64] = on ? w->bits[i / 64] | m : w->bits[i / 64] & ~m;
}

int ss2022_window_check(const ss2022_window *w, uint64_t id)
{
	if (!w->any || id > w->top)
		return 0;
	if (w->top - id >= SS2022_UDP_WINDOW || bit_get(w, id))
		return SS2022_UDP_ERR_REPLAY;
	return 0;
}

void ss2022_window_add(ss2022_window *w, uint64_t id)
{
	if (!w->any || (id > w->top && id - w->top >= SS2022_UDP_WINDOW)) {
		memset(w->bits, 0, sizeof w->bits);
		w->top = id;
	} else if (id > w->top) {
		/* the slots the window slides over held IDs now too old */
		for (uint64_t d = 1; d <= id - w->top; d++)
			bit_put(w, w->top + d, false);
		w->top = id;
	}
	w->any = true;
	bit_put(w, id, true);
}

/* ---- XChaCha20-Poly1305 ---- */

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint32_t rotl(uint32_t v, int n) { return v << n | v >> (32 - n); }

static void quarter(uint32_t *x, int a, int b, int c, int d)
{
	x[a] += x[b], x[d] = rotl(x[d] ^ x[a], 16);
	x[c] += x[d], x[b] = rotl(x[b] ^ x[c], 12);
	x[a] += x[b], x[d] = rotl(x[d] ^ x[a], 8);
	x[c] += x[d], x[b] = rotl(x[b] ^ x[c], 7);
}

/* draft-irtf-cfrg-xchacha-03 2.2: ChaCha20's state with the 16-byte nonce
 * where the counter and nonce go, 20 rounds, no final addition; the first
 * and last rows are the subkey. */
void ss2022_hchacha20(const uint8_t key[SS2022_XKEY_LEN], const uint8_t nonce[16],
                      uint8_t out[SS2022_XKEY_LEN])
{
	uint32_t x[16] = {0x61707865, 0x3320646e, 0x79622d32, 0x6b206574};
	for (int i = 0; i < 8; i++)
		x[4 + i] = le32(key + 4 * i);
	for (int i = 0; i < 4; i++)
		x[12 + i] = le32(nonce + 4 * i);
	for (int r = 0; r < 10; r++) {
		quarter(x, 0, 4, 8, 12), quarter(x, 1, 5, 9, 13);
		quarter(x, 2, 6, 10, 14), quarter(x, 3, 7, 11, 15);
		quarter(x, 0, 5, 10, 15), quarter(x, 1, 6, 11, 12);
		quarter(x, 2, 7, 8, 13), quarter(x, 3, 4, 9, 14);
	}
	static const int ROWS[8] = {0, 1, 2, 3, 12, 13, 14, 15};
	for (int i = 0; i < 8; i++)
		for (int b = 0; b < 4; b++)
			out[4 * i + b] = (uint8_t)(x[ROWS[i]] >> (8 * b));
	OPENSSL_cleanse(x, sizeof x);
}

/* 2.3.1: ChaCha20-Poly1305 (RFC 8439) under HChaCha20(key, nonce[0, 16])
 * with the nonce 0^4 || nonce[16, 24]. */
static int xchacha(const uint8_t *key, const uint8_t *nonce, const uint8_t *aad, size_t alen,
                   const uint8_t *in, size_t len, uint8_t *out, bool seal)
{
	if ((!seal && len < SS_TAG_LEN) || len > INT32_MAX || alen > INT32_MAX)
		return -1;
	size_t body = seal ? len : len - SS_TAG_LEN;
	uint8_t sub[SS2022_XKEY_LEN], n12[SS_NONCE_LEN] = {0}, tag[SS_TAG_LEN];
	ss2022_hchacha20(key, nonce, sub);
	memcpy(n12 + 4, nonce + 16, 8);
	if (!seal)
		memcpy(tag, in + body, SS_TAG_LEN); /* out may be in */
	EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
	int n = 0;
	const EVP_CIPHER *cp = fetched_cipher(FETCHED_CHACHA20_POLY1305);
	int ok = c && EVP_CipherInit_ex(c, cp, NULL, NULL, NULL, seal) &&
	         EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_SET_IVLEN, SS_NONCE_LEN, NULL) &&
	         EVP_CipherInit_ex(c, NULL, NULL, sub, n12, seal) &&
	         (alen == 0 || EVP_CipherUpdate(c, NULL, &n, aad, (int)alen)) &&
	         EVP_CipherUpdate(c, out, &n, in, (int)body) &&
	         (seal || EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_SET_TAG, SS_TAG_LEN, tag)) &&
	         EVP_CipherFinal_ex(c, out + n, &n) > 0 &&
	         (!seal || EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_GET_TAG, SS_TAG_LEN, out + body));
	EVP_CIPHER_CTX_free(c);
	OPENSSL_cleanse(sub, sizeof sub);
	return ok ? 0 : -1;
}

int ss2022_xchacha_seal(const uint8_t key[SS2022_XKEY_LEN], const uint8_t nonce[SS2022_XNONCE_LEN],
                        const uint8_t *aad, size_t alen, const uint8_t *in, size_t len,
                        uint8_t *out)
{
	return xchacha(key, nonce, aad, alen, in, len, out, true);
}

int ss2022_xchacha_open(const uint8_t key[SS2022_XKEY_LEN], const uint8_t nonce[SS2022_XNONCE_LEN],
                        const uint8_t *aad, size_t alen, const uint8_t *in, size_t len,
                        uint8_t *out)
{
	return xchacha(key, nonce, aad, alen, in, len, out, false);
}

/* ---- AES pieces ---- */

/* One AES block under key (klen 16 or 32, used as it is: SIP022 3.2.1 and
 * SIP022-2's UDP headers take the PSK itself, no subkey), ECB. */
static int aes_block(size_t klen, const uint8_t *key, const uint8_t *in, uint8_t *out, bool enc)
{
	EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
	int n = 0;
	const EVP_CIPHER *ecb = fetched_cipher(klen == 16 ? FETCHED_AES_128_ECB : FETCHED_AES_256_ECB);
	int ok = c && EVP_CipherInit_ex(c, ecb, NULL, key, NULL, enc) &&
	         EVP_CIPHER_CTX_set_padding(c, 0) &&
	         EVP_CipherUpdate(c, out, &n, in, SS2022_UDP_SEP_LEN) && n == SS2022_UDP_SEP_LEN;
	EVP_CIPHER_CTX_free(c);
	return ok ? 0 : -1;
}

void ss2022_udp_cipher_free(ss2022_udp_cipher *c)
{
	EVP_CIPHER_CTX_free(c->ctx);
	*c = (ss2022_udp_cipher){0};
}

void ss2022_udp_rx_free(ss2022_udp_rx *rx)
{
	ss2022_udp_cipher_free(&rx->cipher);
	*rx = (ss2022_udp_rx){0};
}

/* Keys c for key's session session (3.2.1's session_subkey), unless it
 * holds that session already. 0, or -1. */
static int cipher_key(ss2022_udp_cipher *c, ss_method m, const uint8_t *key,
                      const uint8_t *session)
{
	if (c->ctx && memcmp(c->session, session, SS2022_SESSION_ID_LEN) == 0)
		return 0;
	ss2022_udp_cipher_free(c);
	size_t kl = ss_key_len(m);
	uint8_t material[SS_KEY_MAX + SS2022_SESSION_ID_LEN], sub[SS_KEY_MAX];
	memcpy(material, key, kl);
	memcpy(material + kl, session, SS2022_SESSION_ID_LEN);
	blake3_derive_key(SUBKEY_CONTEXT, material, kl + SS2022_SESSION_ID_LEN, sub, kl);
	OPENSSL_cleanse(material, sizeof material);
	c->ctx = EVP_CIPHER_CTX_new();
	const EVP_CIPHER *gcm = fetched_cipher(kl == 16 ? FETCHED_AES_128_GCM : FETCHED_AES_256_GCM);
	int ok = c->ctx && EVP_CipherInit_ex(c->ctx, gcm, NULL, NULL, NULL, 1) &&
	         EVP_CIPHER_CTX_ctrl(c->ctx, EVP_CTRL_AEAD_SET_IVLEN, SS_NONCE_LEN, NULL) &&
	         EVP_CipherInit_ex(c->ctx, NULL, NULL, sub, NULL, 1);
	OPENSSL_cleanse(sub, sizeof sub);
	if (!ok) {
		ss2022_udp_cipher_free(c);
		return -1;
	}
	memcpy(c->session, session, SS2022_SESSION_ID_LEN);
	return 0;
}

/* AES-GCM with c's subkey and nonce, either way (out may be in; open:
 * in ends in the tag). 0, or -1. */
static int gcm(ss2022_udp_cipher *c, const uint8_t *nonce, const uint8_t *in, size_t len,
               uint8_t *out, bool seal)
{
	if ((!seal && len < SS_TAG_LEN) || len > INT32_MAX)
		return -1;
	size_t body = seal ? len : len - SS_TAG_LEN;
	uint8_t tag[SS_TAG_LEN];
	if (!seal)
		memcpy(tag, in + body, SS_TAG_LEN);
	int n = 0;
	return EVP_CipherInit_ex(c->ctx, NULL, NULL, NULL, nonce, seal) &&
	               EVP_CipherUpdate(c->ctx, out, &n, in, (int)body) &&
	               (seal || EVP_CIPHER_CTX_ctrl(c->ctx, EVP_CTRL_AEAD_SET_TAG, SS_TAG_LEN, tag)) &&
	               EVP_CipherFinal_ex(c->ctx, out + n, &n) > 0 &&
	               (!seal ||
	                EVP_CIPHER_CTX_ctrl(c->ctx, EVP_CTRL_AEAD_GET_TAG, SS_TAG_LEN, out + body))
	               ? 0
	               : -1;
}

static bool is_chacha(ss_method m) { return m == SS_METHOD_2022_CHACHA20_POLY1305; }

/* ---- the client's server sessions ---- */

static bool slot_is(const ss2022_server_slot *s, const uint8_t *id)
{
	return s->used && memcmp(s->id, id, SS2022_SESSION_ID_LEN) == 0;
}

ss2022_udp_rx *ss2022_server_sessions_lookup(ss2022_server_sessions *s,
                                             const uint8_t id[SS2022_SESSION_ID_LEN], int64_t now)
{
	if (slot_is(&s->cur, id))
		return &s->cur.rx;
	if (slot_is(&s->old, id))
		return &s->old.rx;
	if (s->old.used && now - s->old.last < SS2022_SERVER_SESSION_HOLD)
		return NULL;
	ss2022_udp_rx_free(&s->cand.rx);
	s->cand = (ss2022_server_slot){.used = true};
	memcpy(s->cand.id, id, SS2022_SESSION_ID_LEN);
	return &s->cand.rx;
}

void ss2022_server_sessions_seen(ss2022_server_sessions *s,
                                 const uint8_t id[SS2022_SESSION_ID_LEN], int64_t now)
{
	if (slot_is(&s->old, id)) {
		s->old.last = now;
		return;
	}
	if (!slot_is(&s->cur, id)) {
		if (!slot_is(&s->cand, id))
			return; /* not asked for: nothing to take */
		ss2022_udp_rx_free(&s->old.rx);
		s->old = s->cur;
		s->cur = s->cand;
		s->cand = (ss2022_server_slot){0};
	}
	s->cur.last = now;
}

void ss2022_server_sessions_free(ss2022_server_sessions *s)
{
	ss2022_udp_rx_free(&s->cur.rx);
	ss2022_udp_rx_free(&s->old.rx);
	ss2022_udp_rx_free(&s->cand.rx);
	*s = (ss2022_server_sessions){0};
}

/* ---- seal ---- */

size_t ss2022_udp_overhead(ss_method m, size_t nid, bool server)
{
	size_t head = is_chacha(m) ? SS2022_XNONCE_LEN + SS2022_UDP_SEP_LEN
	                           : SS2022_UDP_SEP_LEN + nid * SS2022_IDENTITY_LEN;
	return head + MAIN_LEN(server) + SS_TAG_LEN;
}

/* The body's plaintext at b: (chacha20: the separate header), the main
 * header, the padding, the address and the payload. Its length. */
static size_t body_put(uint8_t *b, bool chacha, const uint8_t *sep, const ss2022_udp_msg *msg)
{
	size_t k = 0;
	if (chacha) {
		memcpy(b, sep, SS2022_UDP_SEP_LEN);
		k = SS2022_UDP_SEP_LEN;
	}
	b[k++] = msg->client_session ? TYPE_SERVER : TYPE_CLIENT;
	bytes_put64(b + k, (uint64_t)msg->now);
	k += 8;
	if (msg->client_session) {
		memcpy(b + k, msg->client_session, SS2022_SESSION_ID_LEN);
		k += SS2022_SESSION_ID_LEN;
	}
	bytes_put16(b + k, (uint16_t)msg->padding);
	k += 2;
	memset(b + k, 0, msg->padding);
	k += msg->padding;
	memcpy(b + k, msg->addr, msg->alen);
	k += msg->alen;
	memcpy(b + k, msg->payload, msg->plen);
	return k + msg->plen;
}

/* SIP022-2: header i is the next PSK's hash XOR the plaintext separate
 * header, under iPSK i. */
static int identities_put(ss_method m, const uint8_t *key, const ss_identity *id,
                          const uint8_t *sep, uint8_t *out)
{
	for (size_t i = 0; i < id->n; i++) {
		uint8_t h[SS2022_IDENTITY_LEN];
		ss2022_psk_hash(i + 1 < id->n ? id->ipsk[i + 1] : key, ss_key_len(m), h);
		for (size_t k = 0; k < SS2022_IDENTITY_LEN; k++)
			h[k] ^= sep[k];
		if (aes_block(ss_key_len(m), id->ipsk[i], h, out + i * SS2022_IDENTITY_LEN, true))
			return -1;
	}
	return 0;
}

ssize_t ss2022_udp_seal(ss_method m, const uint8_t *key, const ss_identity *id,
                        ss2022_udp_cipher *c, const ss2022_udp_msg *msg, uint8_t *out, size_t cap)
{
	size_t nid = id ? id->n : 0;
	bool server = msg->client_session != NULL, chacha = is_chacha(m);
	if (!ss_method_is_2022(m) || (nid && (!ss_method_has_identity(m) || server)) ||
	    nid > SS2022_IDENTITY_MAX)
		return SS2022_UDP_ERR_STATE;
	size_t fixed = ss2022_udp_overhead(m, nid, server);
	if (msg->padding > SS2022_PADDING_MAX || msg->alen == 0 || msg->alen > SS_ADDR_MAX ||
	    cap < fixed || cap - fixed < msg->padding + msg->alen ||
	    cap - fixed - msg->padding - msg->alen < msg->plen)
		return SS2022_UDP_ERR_TOO_BIG;
	uint8_t sep[SS2022_UDP_SEP_LEN];
	memcpy(sep, msg->session, SS2022_SESSION_ID_LEN);
	bytes_put64(sep + SS2022_SESSION_ID_LEN, msg->packet);
	size_t head = chacha ? SS2022_XNONCE_LEN : SS2022_UDP_SEP_LEN + nid * SS2022_IDENTITY_LEN;
	uint8_t *b = out + head;
	size_t blen = body_put(b, chacha, sep, msg);
	if (chacha) {
		memcpy(out, msg->nonce, SS2022_XNONCE_LEN);
		if (ss2022_xchacha_seal(key, msg->nonce, NULL, 0, b, blen, b))
			return SS2022_UDP_ERR_STATE;
		return (ssize_t)(head + blen + SS_TAG_LEN);
	}
	/* "When iPSKs are used, the separate header MUST be encrypted with the
	 * first iPSK" (SIP022-2) */
	const uint8_t *sep_key = nid ? id->ipsk[0] : key;
	if (aes_block(ss_key_len(m), sep_key, sep, out, true) ||
	    (nid && identities_put(m, key, id, sep, out + SS2022_UDP_SEP_LEN)) ||
	    cipher_key(c, m, key, sep) || gcm(c, sep + 4, b, blen, b, true))
		return SS2022_UDP_ERR_STATE;
	return (ssize_t)(head + blen + SS_TAG_LEN);
}

/* ---- open ---- */

/* Reads the main header at b[0, blen) (the body's plaintext after the
 * separate header): the type, the time, a server's client session (ours),
 * the padding and the address. Offsets into p are b's plus base. Returns
 * the payload's length, or an SS2022_UDP_ERR_*. */
static ssize_t main_read(const uint8_t *b, size_t blen, size_t base, int64_t now,
                         const uint8_t *ours, ss2022_udp_packet *p)
{
	bool server = ours != NULL;
	if (blen < MAIN_LEN(server))
		return SS2022_UDP_ERR_SHORT;
	if (b[0] != (server ? TYPE_SERVER : TYPE_CLIENT))
		return SS2022_UDP_ERR_TYPE;
	if (!ss2022_time_ok(bytes_get64(b + 1), now))
		return SS2022_UDP_ERR_TIME;
	size_t k = 9;
	if (server) {
		memcpy(p->client_session, b + k, SS2022_SESSION_ID_LEN);
		if (CRYPTO_memcmp(b + k, ours, SS2022_SESSION_ID_LEN) != 0)
			return SS2022_UDP_ERR_SESSION;
		k += SS2022_SESSION_ID_LEN;
	}
	size_t pad = bytes_get16(b + k);
	k += 2;
	if (pad > SS2022_PADDING_MAX || pad > blen - k)
		return SS2022_UDP_ERR_PADDING;
	k += pad;
	ssize_t span = ss_addr_span(b + k, blen - k);
	if (span <= 0)
		return SS2022_UDP_ERR_ADDRESS;
	p->addr_off = base + k;
	p->payload_off = base + k + (size_t)span;
	return (ssize_t)(blen - k - (size_t)span);
}

/* The rest after the separate header is known (sep, p->session, p->user):
 * the body opened with rx's cipher (AES) or already (chacha20, plain at
 * out[16, blen)), the main header read, the window asked and moved. */
static ssize_t finish(ss_method m, const uint8_t *key, ss2022_udp_rx *rx, const uint8_t *sep,
                      const uint8_t *body, size_t len, int64_t now, const uint8_t *ours,
                      uint8_t *out, ss2022_udp_packet *p)
{
	size_t base = 0, blen;
	if (is_chacha(m)) {
		base = SS2022_UDP_SEP_LEN;
		blen = len - SS_TAG_LEN - base;
	} else {
		if (cipher_key(&rx->cipher, m, key, sep))
			return SS2022_UDP_ERR_STATE;
		if (gcm(&rx->cipher, sep + 4, body, len, out, false))
			return SS2022_UDP_ERR_TAG;
		blen = len - SS_TAG_LEN;
	}
	ssize_t n = main_read(out + base, blen, base, now, ours, p);
	if (n < 0)
		return n;
	if (ss2022_window_check(&rx->window, p->packet))
		return SS2022_UDP_ERR_REPLAY;
	ss2022_window_add(&rx->window, p->packet);
	return n;
}

/* The separate header in plain at sep into p. */
static void sep_read(const uint8_t *sep, ss2022_udp_packet *p)
{
	memcpy(p->session, sep, SS2022_SESSION_ID_LEN);
	p->packet = bytes_get64(sep + SS2022_SESSION_ID_LEN);
}

/* SIP022-2 on the server: the identity header at in, under the iPSK, XOR
 * the separate header, is a user's PSK hash. The user, or -1. */
static int identify(const ss_account *users, size_t n, const uint8_t *in, const uint8_t *sep)
{
	uint8_t h[SS2022_IDENTITY_LEN];
	if (aes_block(ss_key_len(users[0].method), users[0].ipsk, in, h, false))
		return -1;
	for (size_t k = 0; k < SS2022_IDENTITY_LEN; k++)
		h[k] ^= sep[k];
	/* every user compared, so the time taken does not say which matched */
	int who = -1;
	for (size_t i = 0; i < n; i++)
		if (CRYPTO_memcmp(users[i].hash, h, sizeof h) == 0 && who < 0)
			who = (int)i;
	return who;
}

ssize_t ss2022_udp_open_request(const ss_account *users, size_t n, int64_t now,
                                ss2022_udp_lookup_fn lookup, void *ud, const uint8_t *in,
                                size_t len, uint8_t *out, size_t cap, ss2022_udp_packet *p)
{
	*p = (ss2022_udp_packet){.user = -1};
	if (!n || !lookup || !ss_method_is_2022(users[0].method))
		return SS2022_UDP_ERR_STATE;
	ss_method m = users[0].method;
	bool chacha = is_chacha(m), eih = users[0].identity && !chacha;
	size_t head = chacha ? SS2022_XNONCE_LEN : SS2022_UDP_SEP_LEN + (eih ? SS2022_IDENTITY_LEN : 0);
	if (len < head + (chacha ? SS2022_UDP_SEP_LEN : 0) + MAIN_LEN(false) + SS_TAG_LEN)
		return SS2022_UDP_ERR_SHORT;
	if (cap < len)
		return SS2022_UDP_ERR_TOO_BIG;
	uint8_t sep[SS2022_UDP_SEP_LEN];
	int user = 0;
	if (chacha) {
		if (ss2022_xchacha_open(users[0].key, in, NULL, 0, in + head, len - head, out))
			return SS2022_UDP_ERR_TAG;
		memcpy(sep, out, SS2022_UDP_SEP_LEN);
	} else {
		if (aes_block(ss_key_len(m), eih ? users[0].ipsk : users[0].key, in, sep, false))
			return SS2022_UDP_ERR_STATE;
		user = eih ? identify(users, n, in + SS2022_UDP_SEP_LEN, sep) : 0;
		if (user < 0)
			return SS2022_UDP_ERR_IDENTITY;
	}
	sep_read(sep, p);
	p->user = user;
	ss2022_udp_rx *rx = lookup(ud, user, p->session);
	if (!rx)
		return SS2022_UDP_ERR_SESSION;
	return finish(m, users[user].key, rx, sep, in + head, len - head, now, NULL, out, p);
}

ssize_t ss2022_udp_open_response(ss_method m, const uint8_t *key,
                                 const uint8_t client_session[SS2022_SESSION_ID_LEN], int64_t now,
                                 ss2022_udp_lookup_fn lookup, void *ud, const uint8_t *in,
                                 size_t len, uint8_t *out, size_t cap, ss2022_udp_packet *p)
{
	*p = (ss2022_udp_packet){.user = 0};
	if (!lookup || !ss_method_is_2022(m))
		return SS2022_UDP_ERR_STATE;
	bool chacha = is_chacha(m);
	size_t head = chacha ? SS2022_XNONCE_LEN : SS2022_UDP_SEP_LEN;
	if (len < head + (chacha ? SS2022_UDP_SEP_LEN : 0) + MAIN_LEN(true) + SS_TAG_LEN)
		return SS2022_UDP_ERR_SHORT;
	if (cap < len)
		return SS2022_UDP_ERR_TOO_BIG;
	uint8_t sep[SS2022_UDP_SEP_LEN];
	if (chacha) {
		if (ss2022_xchacha_open(key, in, NULL, 0, in + head, len - head, out))
			return SS2022_UDP_ERR_TAG;
		memcpy(sep, out, SS2022_UDP_SEP_LEN);
	} else if (aes_block(ss_key_len(m), key, in, sep, false)) {
		return SS2022_UDP_ERR_STATE;
	}
	sep_read(sep, p);
	ss2022_udp_rx *rx = lookup(ud, 0, p->session);
	if (!rx)
		return SS2022_UDP_ERR_SESSION;
	return finish(m, key, rx, sep, in + head, len - head, now, client_session, out, p);
}
