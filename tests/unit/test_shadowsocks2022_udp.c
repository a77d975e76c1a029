/* test_shadowsocks2022_udp.c - Shadowsocks 2022 UDP (SIP022 3.2, 4.1; SIP022-2's UDP identity headers): the replay window, HChaCha20 and XChaCha20-Poly1305 against draft-irtf-cfrg-xchacha-03's vectors, packets built here from the primitives compared byte for byte, round trips for the three methods, identity headers, and every refusal with its code and text. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <openssl/evp.h>

#include "crypto/blake3.h"
#include "proto/shadowsocks2022_udp.h"

#define NOW 1700000000

static const ss_method METHODS[3] = {SS_METHOD_2022_AES_128_GCM, SS_METHOD_2022_AES_256_GCM,
                                     SS_METHOD_2022_CHACHA20_POLY1305};

/* base64 of 16 or 32 bytes: 0x00.., 0x01.., 0x02.. */
static const char *psk_b64(size_t n, int which)
{
	static const char *const K16[3] = {"AAAAAAAAAAAAAAAAAAAAAA==", "AQEBAQEBAQEBAQEBAQEBAQ==",
	                                   "AgICAgICAgICAgICAgICAg=="};
	static const char *const K32[3] = {"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
	                                   "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=",
	                                   "AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI="};
	return n == 16 ? K16[which] : K32[which];
}

static const uint8_t CLIENT_SESSION[8] = {0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7};
static const uint8_t SERVER_SESSION[8] = {0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x57};
/* ATYP 1, 127.0.0.1, port 53 */
static const uint8_t ADDR[7] = {1, 127, 0, 0, 1, 0, 53};
static const uint8_t PAYLOAD[5] = {'h', 'e', 'l', 'l', 'o'};
static uint8_t NONCE[SS2022_XNONCE_LEN];

/* The receiver state the lookup hands out, and what it was asked. */
typedef struct peer {
	ss2022_udp_rx rx;
	int user;
	uint8_t session[8];
	bool refuse;
} peer;

static ss2022_udp_rx *lookup(void *ud, int user, const uint8_t *session)
{
	peer *p = ud;
	p->user = user;
	memcpy(p->session, session, 8);
	return p->refuse ? NULL : &p->rx;
}

static ss2022_udp_msg client_msg(uint64_t packet, int64_t now, size_t padding)
{
	return (ss2022_udp_msg){.session = CLIENT_SESSION, .packet = packet, .now = now,
	                        .padding = padding, .addr = ADDR, .alen = sizeof ADDR,
	                        .payload = PAYLOAD, .plen = sizeof PAYLOAD, .nonce = NONCE};
}

static ss2022_udp_msg server_msg(uint64_t packet, int64_t now)
{
	ss2022_udp_msg m = client_msg(packet, now, 0);
	m.session = SERVER_SESSION;
	m.client_session = CLIENT_SESSION;
	return m;
}

static void account(ss_account *a, ss_method m, int which)
{
	const char *b = psk_b64(ss_key_len(m), which);
	assert_int_equal(ss_account_init(a, m, b, strlen(b)), 0);
}

static int setup(void **state)
{
	(void)state;
	for (int i = 0; i < SS2022_XNONCE_LEN; i++)
		NONCE[i] = (uint8_t)(0x30 + i);
	return 0;
}

/* ---- the window ---- */

static void window_takes_each_id_once(void **state)
{
	(void)state;
	ss2022_window w = {0};
	/* counter 0 first, in order */
	for (uint64_t id = 0; id < 3000; id++) {
		assert_int_equal(ss2022_window_check(&w, id), 0);
		ss2022_window_add(&w, id);
		assert_int_equal(ss2022_window_check(&w, id), SS2022_UDP_ERR_REPLAY);
	}
	/* every ID within the window is a duplicate; one behind it too old */
	for (uint64_t id = 3000 - SS2022_UDP_WINDOW; id < 3000; id++)
		assert_int_equal(ss2022_window_check(&w, id), SS2022_UDP_ERR_REPLAY);
	assert_int_equal(ss2022_window_check(&w, 3000 - SS2022_UDP_WINDOW - 1),
	                 SS2022_UDP_ERR_REPLAY);
	assert_int_equal(ss2022_window_check(&w, 0), SS2022_UDP_ERR_REPLAY);
}

static void window_out_of_order(void **state)
{
	(void)state;
	ss2022_window w = {0};
	ss2022_window_add(&w, 2000);
	/* late ones within the window, once each */
	static const uint64_t late[] = {1999, 1500, 2000 - SS2022_UDP_WINDOW + 1, 1000, 1777};
	for (size_t i = 0; i < sizeof late / sizeof late[0]; i++) {
		assert_int_equal(ss2022_window_check(&w, late[i]), 0);
		ss2022_window_add(&w, late[i]);
		assert_int_equal(ss2022_window_check(&w, late[i]), SS2022_UDP_ERR_REPLAY);
	}
	assert_int_equal(ss2022_window_check(&w, 2000 - SS2022_UDP_WINDOW), SS2022_UDP_ERR_REPLAY);
	assert_int_equal(ss2022_window_check(&w, 1998), 0);
	/* a jump forward by less than the window keeps what is still inside */
	ss2022_window_add(&w, 2500);
	assert_int_equal(ss2022_window_check(&w, 1999), SS2022_UDP_ERR_REPLAY);
	assert_int_equal(ss2022_window_check(&w, 1500), SS2022_UDP_ERR_REPLAY);
	assert_int_equal(ss2022_window_check(&w, 1998), 0);
	assert_int_equal(ss2022_window_check(&w, 2499), 0);
	/* and the slots it slid over are free for the IDs they now stand for */
	assert_int_equal(ss2022_window_check(&w, 2501), 0);
	ss2022_window_add(&w, 2000 + SS2022_UDP_WINDOW);
	assert_int_equal(ss2022_window_check(&w, 2000), SS2022_UDP_ERR_REPLAY); /* too old now */
	assert_int_equal(ss2022_window_check(&w, 2001), 0);
	assert_int_equal(ss2022_window_check(&w, 2500), SS2022_UDP_ERR_REPLAY);
	assert_int_equal(ss2022_window_check(&w, 2000 + SS2022_UDP_WINDOW + 1), 0);
}

static void window_large_jumps(void **state)
{
	(void)state;
	ss2022_window w = {0};
	ss2022_window_add(&w, 5);
	ss2022_window_add(&w, 5 + 10 * SS2022_UDP_WINDOW);
	assert_int_equal(ss2022_window_check(&w, 5), SS2022_UDP_ERR_REPLAY);
	/* the ring was cleared: the IDs sharing slots with old ones are new */
	assert_int_equal(ss2022_window_check(&w, 5 + 10 * SS2022_UDP_WINDOW - 1), 0);
	assert_int_equal(ss2022_window_check(&w, 5 + 9 * SS2022_UDP_WINDOW + 1), 0);
	/* the largest ID, and nothing wraps past it */
	ss2022_window_add(&w, UINT64_MAX);
	assert_int_equal(ss2022_window_check(&w, UINT64_MAX), SS2022_UDP_ERR_REPLAY);
	assert_int_equal(ss2022_window_check(&w, UINT64_MAX - 1), 0);
	assert_int_equal(ss2022_window_check(&w, 0), SS2022_UDP_ERR_REPLAY);
	ss2022_window_add(&w, UINT64_MAX - 1);
	assert_int_equal(ss2022_window_check(&w, UINT64_MAX - 1), SS2022_UDP_ERR_REPLAY);
}

/* ---- XChaCha20-Poly1305 (draft-irtf-cfrg-xchacha-03) ---- */

static void hchacha20_vector(void **state)
{
	(void)state;
	/* 2.2.1 */
	uint8_t key[32], out[32];
	for (int i = 0; i < 32; i++)
		key[i] = (uint8_t)i;
	static const uint8_t nonce[16] = {0x00, 0x00, 0x00, 0x09, 0x00, 0x00, 0x00, 0x4a,
	                                  0x00, 0x00, 0x00, 0x00, 0x31, 0x41, 0x59, 0x27};
	/* "Resultant HChaCha20 subkey", read as the byte string it is (the
	 * rows of its figure before are printed the same way; A.3.1's AEAD
	 * vector below fixes the order independently) */
	static const uint8_t want[32] = {
		0x82, 0x41, 0x3b, 0x42, 0x27, 0xb2, 0x7b, 0xfe, 0xd3, 0x0e, 0x42,
		0x50, 0x8a, 0x87, 0x7d, 0x73, 0xa0, 0xf9, 0xe4, 0xd5, 0x8a, 0x74,
		0xa8, 0x53, 0xc1, 0x2e, 0xc4, 0x13, 0x26, 0xd3, 0xec, 0xdc};
	ss2022_hchacha20(key, nonce, out);
	assert_memory_equal(out, want, sizeof want);
}

static void xchacha20_poly1305_vector(void **state)
{
	(void)state;
	/* A.3.1 */
	static const char plain[] = "Ladies and Gentlemen of the class of '99: If I could offer you "
	                            "only one tip for the future, sunscreen would be it.";
	static const uint8_t aad[12] = {0x50, 0x51, 0x52, 0x53, 0xc0, 0xc1,
	                                0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7};
	static const uint8_t want[114 + 16] = {
		0xbd, 0x6d, 0x17, 0x9d, 0x3e, 0x83, 0xd4, 0x3b, 0x95, 0x76, 0x57, 0x94, 0x93, 0xc0,
		0xe9, 0x39, 0x57, 0x2a, 0x17, 0x00, 0x25, 0x2b, 0xfa, 0xcc, 0xbe, 0xd2, 0x90, 0x2c,
		0x21, 0x39, 0x6c, 0xbb, 0x73, 0x1c, 0x7f, 0x1b, 0x0b, 0x4a, 0xa6, 0x44, 0x0b, 0xf3,
		0xa8, 0x2f, 0x4e, 0xda, 0x7e, 0x39, 0xae, 0x64, 0xc6, 0x70, 0x8c, 0x54, 0xc2, 0x16,
		0xcb, 0x96, 0xb7, 0x2e, 0x12, 0x13, 0xb4, 0x52, 0x2f, 0x8c, 0x9b, 0xa4, 0x0d, 0xb5,
		0xd9, 0x45, 0xb1, 0x1b, 0x69, 0xb9, 0x82, 0xc1, 0xbb, 0x9e, 0x3f, 0x3f, 0xac, 0x2b,
		0xc3, 0x69, 0x48, 0x8f, 0x76, 0xb2, 0x38, 0x35, 0x65, 0xd3, 0xff, 0xf9, 0x21, 0xf9,
		0x66, 0x4c, 0x97, 0x63, 0x7d, 0xa9, 0x76, 0x88, 0x12, 0xf6, 0x15, 0xc6, 0x8b, 0x13,
		0xb5, 0x2e,
		/* the tag */
		0xc0, 0x87, 0x59, 0x24, 0xc1, 0xc7, 0x98, 0x79, 0x47, 0xde, 0xaf, 0xd8, 0x78, 0x0a,
		0xcf, 0x49};
	assert_int_equal(sizeof plain - 1, 114);
	uint8_t key[32], nonce[24], out[sizeof want], back[114];
	for (int i = 0; i < 32; i++)
		key[i] = (uint8_t)(0x80 + i);
	for (int i = 0; i < 24; i++)
		nonce[i] = (uint8_t)(0x40 + i);
	assert_int_equal(ss2022_xchacha_seal(key, nonce, aad, sizeof aad, (const uint8_t *)plain,
	                                     114, out),
	                 0);
	assert_memory_equal(out, want, sizeof want);
	assert_int_equal(ss2022_xchacha_open(key, nonce, aad, sizeof aad, want, sizeof want, back),
	                 0);
	assert_memory_equal(back, plain, 114);
	uint8_t bad[sizeof want];
	memcpy(bad, want, sizeof want);
	bad[7] ^= 1;
	assert_int_equal(ss2022_xchacha_open(key, nonce, aad, sizeof aad, bad, sizeof bad, back), -1);
	assert_int_equal(ss2022_xchacha_open(key, nonce, aad, 11, want, sizeof want, back), -1);
}

/* ---- packets built here from the primitives ---- */

static void aes_ecb(size_t kl, const uint8_t *key, const uint8_t *in, uint8_t *out)
{
	EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
	int n = 0;
	assert_non_null(c);
	assert_int_equal(EVP_EncryptInit_ex(c, kl == 16 ? EVP_aes_128_ecb() : EVP_aes_256_ecb(), NULL,
	                                    key, NULL),
	                 1);
	assert_int_equal(EVP_CIPHER_CTX_set_padding(c, 0), 1);
	assert_int_equal(EVP_EncryptUpdate(c, out, &n, in, 16), 1);
	assert_int_equal(n, 16);
	EVP_CIPHER_CTX_free(c);
}

/* Seals in[0, len) with cipher (AES-GCM or ChaCha20-Poly1305) under key
 * and the 12-byte nonce into out, the tag after. */
static void aead(const EVP_CIPHER *cipher, const uint8_t *key, const uint8_t *nonce,
                 const uint8_t *in, size_t len, uint8_t *out)
{
	EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
	int n = 0;
	assert_non_null(c);
	assert_int_equal(EVP_EncryptInit_ex(c, cipher, NULL, key, nonce), 1);
	assert_int_equal(EVP_EncryptUpdate(c, out, &n, in, (int)len), 1);
	assert_int_equal(EVP_EncryptFinal_ex(c, out + n, &n), 1);
	assert_int_equal(EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_GET_TAG, 16, out + len), 1);
	EVP_CIPHER_CTX_free(c);
}

/* The client's main header, padding (zeros), address and payload. */
static size_t client_body(uint8_t *b, int64_t now, size_t padding)
{
	size_t k = 0;
	b[k++] = 0;
	for (int i = 7; i >= 0; i--)
		b[k++] = (uint8_t)((uint64_t)now >> (8 * i));
	b[k++] = (uint8_t)(padding >> 8);
	b[k++] = (uint8_t)padding;
	memset(b + k, 0, padding);
	k += padding;
	memcpy(b + k, ADDR, sizeof ADDR);
	k += sizeof ADDR;
	memcpy(b + k, PAYLOAD, sizeof PAYLOAD);
	return k + sizeof PAYLOAD;
}

static void aes_packet_by_hand(void **state)
{
	(void)state;
	for (int i = 0; i < 2; i++) {
		ss_method m = METHODS[i];
		size_t kl = ss_key_len(m);
		uint8_t key[32];
		memset(key, 1, sizeof key); /* psk_b64(kl, 1) */
		const uint64_t packet = 0x0102030405060708ull;
		/* 3.2.1 and 3.2.2 */
		uint8_t sep[16], want[256], body[128], material[40], sub[32];
		memcpy(sep, CLIENT_SESSION, 8);
		for (int k = 0; k < 8; k++)
			sep[8 + k] = (uint8_t)(packet >> (56 - 8 * k));
		aes_ecb(kl, key, sep, want);
		memcpy(material, key, kl);
		memcpy(material + kl, sep, 8);
		blake3_derive_key("shadowsocks 2022 session subkey", material, kl + 8, sub, kl);
		size_t blen = client_body(body, NOW, 3);
		aead(kl == 16 ? EVP_aes_128_gcm() : EVP_aes_256_gcm(), sub, sep + 4, body, blen,
		     want + 16);
		size_t wlen = 16 + blen + 16;

		uint8_t k2[SS_KEY_MAX], out[256];
		const char *b64 = psk_b64(kl, 1);
		assert_int_equal(ss_master_key(m, b64, strlen(b64), k2), 0);
		ss2022_udp_cipher c = {0};
		ss2022_udp_msg msg = client_msg(packet, NOW, 3);
		ssize_t n = ss2022_udp_seal(m, k2, NULL, &c, &msg, out, sizeof out);
		assert_int_equal(n, (ssize_t)wlen);
		assert_memory_equal(out, want, wlen);
		assert_int_equal(wlen, ss2022_udp_overhead(m, 0, false) + 3 + sizeof ADDR +
		                       sizeof PAYLOAD);
		ss2022_udp_cipher_free(&c);
	}
}

static void chacha_packet_by_hand(void **state)
{
	(void)state;
	ss_method m = SS_METHOD_2022_CHACHA20_POLY1305;
	uint8_t key[32], sub[32], n12[12] = {0}, plain[128], want[256];
	memset(key, 1, sizeof key);
	/* 4.1: session ID, packet ID, then the main header */
	memcpy(plain, CLIENT_SESSION, 8);
	memset(plain + 8, 0, 7);
	plain[15] = 9;
	size_t plen = 16 + client_body(plain + 16, NOW, 0);
	ss2022_hchacha20(key, NONCE, sub);
	memcpy(n12 + 4, NONCE + 16, 8);
	memcpy(want, NONCE, 24);
	aead(EVP_chacha20_poly1305(), sub, n12, plain, plen, want + 24);
	size_t wlen = 24 + plen + 16;

	uint8_t out[256];
	ss2022_udp_cipher c = {0};
	ss2022_udp_msg msg = client_msg(9, NOW, 0);
	assert_int_equal(ss2022_udp_seal(m, key, NULL, &c, &msg, out, sizeof out), (ssize_t)wlen);
	assert_memory_equal(out, want, wlen);
	assert_null(c.ctx); /* no session cipher: the PSK is the key */
}

/* ---- round trips ---- */

static void round_trip_each_method(void **state)
{
	(void)state;
	for (int i = 0; i < 3; i++) {
		ss_method m = METHODS[i];
		ss_account user;
		account(&user, m, 1);
		ss2022_udp_cipher ctx = {0}, stx = {0};
		peer server = {0}, client = {0};
		uint8_t wire[2048], plain[2048];
		for (uint64_t id = 0; id < 3; id++) {
			ss2022_udp_msg msg = client_msg(id, NOW, id * 100);
			ssize_t n = ss2022_udp_seal(m, user.key, NULL, &ctx, &msg, wire, sizeof wire);
			assert_true(n > 0);
			ss2022_udp_packet p;
			ssize_t got = ss2022_udp_open_request(&user, 1, NOW + 5, lookup, &server, wire,
			                                      (size_t)n, plain, sizeof plain, &p);
			assert_int_equal(got, sizeof PAYLOAD);
			assert_int_equal(p.user, 0);
			assert_int_equal(p.packet, id);
			assert_memory_equal(p.session, CLIENT_SESSION, 8);
			assert_memory_equal(server.session, CLIENT_SESSION, 8);
			assert_memory_equal(plain + p.addr_off, ADDR, sizeof ADDR);
			assert_int_equal(p.payload_off, p.addr_off + sizeof ADDR);
			assert_memory_equal(plain + p.payload_off, PAYLOAD, sizeof PAYLOAD);

			ss2022_udp_msg back = server_msg(id, NOW);
			n = ss2022_udp_seal(m, user.key, NULL, &stx, &back, wire, sizeof wire);
			assert_true(n > 0);
			got = ss2022_udp_open_response(m, user.key, CLIENT_SESSION, NOW - 5, lookup,
			                               &client, wire, (size_t)n, plain, sizeof plain, &p);
			assert_int_equal(got, sizeof PAYLOAD);
			assert_memory_equal(p.session, SERVER_SESSION, 8);
			assert_memory_equal(p.client_session, CLIENT_SESSION, 8);
			assert_memory_equal(plain + p.addr_off, ADDR, sizeof ADDR);
			assert_memory_equal(plain + p.payload_off, PAYLOAD, sizeof PAYLOAD);
		}
		ss2022_udp_cipher_free(&ctx);
		ss2022_udp_cipher_free(&stx);
		ss2022_udp_rx_free(&server.rx);
		ss2022_udp_rx_free(&client.rx);
	}
}

/* ---- identity headers ---- */

static void eih_users(ss_account users[2], ss_method m)
{
	const char *ipsk = psk_b64(ss_key_len(m), 0);
	for (int u = 0; u < 2; u++) {
		account(&users[u], m, u + 1);
		assert_int_equal(ss_account_set_identity(&users[u], ipsk, strlen(ipsk)), 0);
	}
}

static void identity_server_finds_the_user(void **state)
{
	(void)state;
	for (int i = 0; i < 2; i++) {
		ss_method m = METHODS[i];
		size_t kl = ss_key_len(m);
		ss_account users[2];
		eih_users(users, m);
		ss_identity id = {.n = 1};
		memcpy(id.ipsk[0], users[0].ipsk, kl);
		ss2022_udp_cipher c = {0};
		uint8_t wire[512], plain[512];
		ss2022_udp_msg msg = client_msg(7, NOW, 0);
		/* user 1's client: "iPSK:uPSK1" */
		ssize_t n = ss2022_udp_seal(m, users[1].key, &id, &c, &msg, wire, sizeof wire);
		assert_int_equal(n, (ssize_t)(ss2022_udp_overhead(m, 1, false) + sizeof ADDR +
		                              sizeof PAYLOAD));
		/* SIP022-2: the separate header under the iPSK, then
		 * AES(iPSK, hash(uPSK)[0, 16] XOR separate header) */
		uint8_t sep[16], want[16], hx[16];
		memcpy(sep, CLIENT_SESSION, 8);
		memset(sep + 8, 0, 7);
		sep[15] = 7;
		aes_ecb(kl, users[0].ipsk, sep, want);
		assert_memory_equal(wire, want, 16);
		ss2022_psk_hash(users[1].key, kl, hx);
		for (int k = 0; k < 16; k++)
			hx[k] ^= sep[k];
		aes_ecb(kl, users[0].ipsk, hx, want);
		assert_memory_equal(wire + 16, want, 16);

		peer server = {0};
		ss2022_udp_packet p;
		assert_int_equal(ss2022_udp_open_request(users, 2, NOW, lookup, &server, wire,
		                                         (size_t)n, plain, sizeof plain, &p),
		                 sizeof PAYLOAD);
		assert_int_equal(p.user, 1);
		assert_int_equal(server.user, 1);
		assert_memory_equal(plain + p.payload_off, PAYLOAD, sizeof PAYLOAD);
		ss2022_udp_rx_free(&server.rx);

		/* the reply: no identity header, the separate header under the uPSK */
		ss2022_udp_cipher s = {0};
		ss2022_udp_msg back = server_msg(0, NOW);
		n = ss2022_udp_seal(m, users[1].key, NULL, &s, &back, wire, sizeof wire);
		assert_true(n > 0);
		peer client = {0};
		assert_int_equal(ss2022_udp_open_response(m, users[1].key, CLIENT_SESSION, NOW, lookup,
		                                          &client, wire, (size_t)n, plain, sizeof plain,
		                                          &p),
		                 sizeof PAYLOAD);
		/* a uPSK the server does not list */
		ss_account stranger;
		account(&stranger, m, 0);
		n = ss2022_udp_seal(m, stranger.key, &id, &c, &msg, wire, sizeof wire);
		assert_true(n > 0);
		peer again = {0};
		assert_int_equal(ss2022_udp_open_request(users, 2, NOW, lookup, &again, wire, (size_t)n,
		                                         plain, sizeof plain, &p),
		                 SS2022_UDP_ERR_IDENTITY);
		ss2022_udp_cipher_free(&c);
		ss2022_udp_cipher_free(&s);
		ss2022_udp_rx_free(&client.rx);
		ss2022_udp_rx_free(&again.rx);
	}
	/* identity headers need an AES method, and go client to server only */
	ss_identity id = {.n = 1};
	ss2022_udp_cipher c = {0};
	uint8_t wire[256];
	ss2022_udp_msg msg = client_msg(0, NOW, 0);
	assert_int_equal(ss2022_udp_seal(SS_METHOD_2022_CHACHA20_POLY1305, id.ipsk[0], &id, &c, &msg,
	                                 wire, sizeof wire),
	                 SS2022_UDP_ERR_STATE);
	msg = server_msg(0, NOW);
	assert_int_equal(ss2022_udp_seal(SS_METHOD_2022_AES_128_GCM, id.ipsk[0], &id, &c, &msg, wire,
	                                 sizeof wire),
	                 SS2022_UDP_ERR_STATE);
}

/* ---- refusals ---- */

static ssize_t open_req(const ss_account *a, const uint8_t *wire, size_t n, int64_t now,
                        peer *pr)
{
	uint8_t plain[2048];
	ss2022_udp_packet p;
	return ss2022_udp_open_request(a, 1, now, lookup, pr, wire, n, plain, sizeof plain, &p);
}

static void refusals(void **state)
{
	(void)state;
	for (int i = 0; i < 3; i++) {
		ss_method m = METHODS[i];
		ss_account user, other;
		account(&user, m, 1);
		account(&other, m, 2);
		ss2022_udp_cipher c = {0};
		uint8_t wire[512], bad[512];
		ss2022_udp_msg msg = client_msg(0, NOW, 0);
		ssize_t n = ss2022_udp_seal(m, user.key, NULL, &c, &msg, wire, sizeof wire);
		assert_true(n > 0);
		peer pr = {0};
		/* a wrong key */
		assert_int_equal(open_req(&other, wire, (size_t)n, NOW, &pr), SS2022_UDP_ERR_TAG);
		/* every byte flipped */
		for (ssize_t k = 0; k < n; k++) {
			memcpy(bad, wire, (size_t)n);
			bad[k] ^= 0x40;
			ss2022_udp_rx_free(&pr.rx);
			assert_int_equal(open_req(&user, bad, (size_t)n, NOW, &pr), SS2022_UDP_ERR_TAG);
		}
		/* every truncation */
		for (ssize_t k = 0; k < n; k++) {
			ss2022_udp_rx_free(&pr.rx);
			ssize_t r = open_req(&user, wire, (size_t)k, NOW, &pr);
			assert_true(r == SS2022_UDP_ERR_SHORT || r == SS2022_UDP_ERR_TAG);
		}
		/* a timestamp 31 s off, either way; 30 s is in */
		ss2022_udp_rx_free(&pr.rx);
		assert_int_equal(open_req(&user, wire, (size_t)n, NOW + 31, &pr), SS2022_UDP_ERR_TIME);
		assert_int_equal(open_req(&user, wire, (size_t)n, NOW - 31, &pr), SS2022_UDP_ERR_TIME);
		/* the first that opens is taken; the same packet again is a replay */
		assert_int_equal(open_req(&user, wire, (size_t)n, NOW + 30, &pr), sizeof PAYLOAD);
		assert_int_equal(open_req(&user, wire, (size_t)n, NOW, &pr), SS2022_UDP_ERR_REPLAY);
		/* a server's packet sent to the server */
		ss2022_udp_msg back = server_msg(1, NOW);
		ss2022_udp_cipher s = {0};
		n = ss2022_udp_seal(m, user.key, NULL, &s, &back, wire, sizeof wire);
		assert_true(n > 0);
		assert_int_equal(open_req(&user, wire, (size_t)n, NOW, &pr), SS2022_UDP_ERR_TYPE);
		/* the client: a server packet for another client session, a
		 * server session it refuses, a client's packet sent back */
		uint8_t plain[512];
		ss2022_udp_packet p;
		peer cl = {0};
		static const uint8_t OTHER[8] = {9};
		assert_int_equal(ss2022_udp_open_response(m, user.key, OTHER, NOW, lookup, &cl, wire,
		                                          (size_t)n, plain, sizeof plain, &p),
		                 SS2022_UDP_ERR_SESSION);
		cl.refuse = true;
		assert_int_equal(ss2022_udp_open_response(m, user.key, CLIENT_SESSION, NOW, lookup, &cl,
		                                          wire, (size_t)n, plain, sizeof plain, &p),
		                 SS2022_UDP_ERR_SESSION);
		cl.refuse = false;
		assert_int_equal(ss2022_udp_open_response(m, user.key, CLIENT_SESSION, NOW, lookup, &cl,
		                                          wire, (size_t)n, plain, sizeof plain, &p),
		                 sizeof PAYLOAD);
		assert_int_equal(ss2022_udp_open_response(m, user.key, CLIENT_SESSION, NOW, lookup, &cl,
		                                          wire, (size_t)n, plain, sizeof plain, &p),
		                 SS2022_UDP_ERR_REPLAY);
		msg = client_msg(5, NOW, 0);
		n = ss2022_udp_seal(m, user.key, NULL, &c, &msg, wire, sizeof wire);
		assert_true(n > 0);
		assert_int_equal(ss2022_udp_open_response(m, user.key, CLIENT_SESSION, NOW, lookup, &cl,
		                                          wire, (size_t)n, plain, sizeof plain, &p),
		                 SS2022_UDP_ERR_TYPE);
		/* bounds of seal: padding, address, room */
		msg = client_msg(6, NOW, SS2022_PADDING_MAX + 1);
		assert_int_equal(ss2022_udp_seal(m, user.key, NULL, &c, &msg, wire, sizeof wire),
		                 SS2022_UDP_ERR_TOO_BIG);
		msg = client_msg(6, NOW, 0);
		msg.alen = 0;
		assert_int_equal(ss2022_udp_seal(m, user.key, NULL, &c, &msg, wire, sizeof wire),
		                 SS2022_UDP_ERR_TOO_BIG);
		msg = client_msg(6, NOW, 0);
		size_t need = ss2022_udp_overhead(m, 0, false) + sizeof ADDR + sizeof PAYLOAD;
		assert_int_equal(ss2022_udp_seal(m, user.key, NULL, &c, &msg, wire, need - 1),
		                 SS2022_UDP_ERR_TOO_BIG);
		assert_int_equal(ss2022_udp_seal(m, user.key, NULL, &c, &msg, wire, need), (ssize_t)need);
		ss2022_udp_cipher_free(&c);
		ss2022_udp_cipher_free(&s);
		ss2022_udp_rx_free(&pr.rx);
		ss2022_udp_rx_free(&cl.rx);
	}
}

/* Bodies the sender's codec would not write, sealed by hand under the
 * session subkey: a padding past the packet, an unknown address type. */
static void bad_bodies(void **state)
{
	(void)state;
	ss_method m = SS_METHOD_2022_AES_128_GCM;
	ss_account user;
	account(&user, m, 1);
	uint8_t sep[16] = {0}, wire[256], material[24], sub[16];
	memcpy(sep, CLIENT_SESSION, 8);
	aes_ecb(16, user.key, sep, wire);
	memcpy(material, user.key, 16);
	memcpy(material + 16, sep, 8);
	blake3_derive_key("shadowsocks 2022 session subkey", material, 24, sub, 16);
	uint8_t body[128];
	size_t blen = client_body(body, NOW, 0);
	struct {
		size_t at;
		uint8_t byte;
		ssize_t want;
	} cases[] = {
		{9, 0x10, SS2022_UDP_ERR_PADDING},  /* a padding length of 4096 */
		{10, 0x60, SS2022_UDP_ERR_PADDING}, /* 96: past the packet */
		{11, 0x09, SS2022_UDP_ERR_ADDRESS}, /* ATYP 9 */
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		uint8_t b[128];
		memcpy(b, body, blen);
		b[cases[i].at] = cases[i].byte;
		aead(EVP_aes_128_gcm(), sub, sep + 4, b, blen, wire + 16);
		peer pr = {0};
		assert_int_equal(open_req(&user, wire, 16 + blen + 16, NOW, &pr), cases[i].want);
		ss2022_udp_rx_free(&pr.rx);
	}
}

/* ---- the client's server sessions ---- */

static void server_sessions_current_and_old(void **state)
{
	(void)state;
	static const uint8_t A[8] = {0xa}, B[8] = {0xb}, C[8] = {0xc};
	ss2022_server_sessions s = {0};
	/* the first session is a candidate until a packet of it opens */
	ss2022_udp_rx *rx = ss2022_server_sessions_lookup(&s, A, NOW);
	assert_ptr_equal(rx, &s.cand.rx);
	assert_false(s.cur.used);
	ss2022_server_sessions_seen(&s, A, NOW);
	assert_true(s.cur.used);
	assert_memory_equal(s.cur.id, A, 8);
	assert_ptr_equal(ss2022_server_sessions_lookup(&s, A, NOW + 1), &s.cur.rx);
	/* a forged packet of a new session asked for but not opened moves nothing */
	assert_ptr_equal(ss2022_server_sessions_lookup(&s, C, NOW + 1), &s.cand.rx);
	assert_memory_equal(s.cur.id, A, 8);
	assert_false(s.old.used);
	/* with no old session a new one is taken: A becomes the old one */
	assert_non_null(ss2022_server_sessions_lookup(&s, B, NOW + 2));
	ss2022_server_sessions_seen(&s, B, NOW + 2);
	assert_memory_equal(s.cur.id, B, 8);
	assert_memory_equal(s.old.id, A, 8);
	assert_ptr_equal(ss2022_server_sessions_lookup(&s, A, NOW + 3), &s.old.rx);
	ss2022_server_sessions_seen(&s, A, NOW + 3);
	assert_memory_equal(s.cur.id, B, 8); /* the old one answering stays old */
	/* a third while the old one spoke under a minute ago: refused */
	assert_null(ss2022_server_sessions_lookup(&s, C, NOW + 3 + SS2022_SERVER_SESSION_HOLD - 1));
	/* once it has been quiet a minute: taken, A dropped */
	rx = ss2022_server_sessions_lookup(&s, C, NOW + 3 + SS2022_SERVER_SESSION_HOLD);
	assert_ptr_equal(rx, &s.cand.rx);
	ss2022_server_sessions_seen(&s, C, NOW + 3 + SS2022_SERVER_SESSION_HOLD);
	assert_memory_equal(s.cur.id, C, 8);
	assert_memory_equal(s.old.id, B, 8);
	/* A was dropped: it would be a new session (B, now old, last spoke
	 * over a minute ago) */
	assert_ptr_equal(ss2022_server_sessions_lookup(&s, A, NOW + 3 + SS2022_SERVER_SESSION_HOLD),
	                 &s.cand.rx);
	/* each session keeps its own window */
	ss2022_window_add(&s.cur.rx.window, 0);
	assert_int_equal(ss2022_window_check(&s.old.rx.window, 0), 0);
	assert_int_equal(ss2022_window_check(&s.cur.rx.window, 0), SS2022_UDP_ERR_REPLAY);
	ss2022_server_sessions_free(&s);
	assert_false(s.cur.used || s.old.used || s.cand.used);
}

static void texts(void **state)
{
	(void)state;
	const struct {
		int err;
		const char *text;
	} t[] = {
		{SS2022_UDP_ERR_TAG, "shadowsocks: UDP packet does not open (another key, or bytes changed)"},
		{SS2022_UDP_ERR_TYPE, "shadowsocks: UDP packet of the wrong type"},
		{SS2022_UDP_ERR_TIME, "shadowsocks: UDP packet timestamp out of the window"},
		{SS2022_UDP_ERR_TOO_BIG, "shadowsocks: UDP packet too big"},
		{SS2022_UDP_ERR_STATE, "shadowsocks: UDP packet cannot be sealed or opened (out of memory)"},
		{SS2022_UDP_ERR_SHORT, "shadowsocks: UDP packet shorter than its headers"},
		{SS2022_UDP_ERR_IDENTITY,
		 "shadowsocks: unknown identity (no user's key hash matches the identity header)"},
		{SS2022_UDP_ERR_REPLAY, "shadowsocks: replayed UDP packet"},
		{SS2022_UDP_ERR_SESSION, "shadowsocks: UDP packet for another session"},
		{SS2022_UDP_ERR_PADDING, "shadowsocks: UDP packet padding runs past the packet"},
		{SS2022_UDP_ERR_ADDRESS, "shadowsocks: UDP packet with a bad address"},
		{0, "?"},
	};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
		assert_string_equal(ss2022_udp_strerror(t[i].err), t[i].text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(window_takes_each_id_once),
		cmocka_unit_test(window_out_of_order),
		cmocka_unit_test(window_large_jumps),
		cmocka_unit_test(hchacha20_vector),
		cmocka_unit_test(xchacha20_poly1305_vector),
		cmocka_unit_test(aes_packet_by_hand),
		cmocka_unit_test(chacha_packet_by_hand),
		cmocka_unit_test(round_trip_each_method),
		cmocka_unit_test(identity_server_finds_the_user),
		cmocka_unit_test(refusals),
		cmocka_unit_test(bad_bodies),
		cmocka_unit_test(server_sessions_current_and_old),
		cmocka_unit_test(texts),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}
