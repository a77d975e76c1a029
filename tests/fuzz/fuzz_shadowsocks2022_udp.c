/* fuzz_shadowsocks2022_udp.c - libFuzzer target: Shadowsocks 2022 UDP packets (SIP022 3.2, 4.1) opened on the server's side for one key and for users behind an identity PSK, and on the client's side; raw bytes, and packets sealed from fuzzed fields with one byte changed or cut. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/shadowsocks2022_udp.h"

/* Input: flags, then the bytes.
 *   flags bits 0-1: the method (3: 2022-blake3-aes-128-gcm with two users
 *                   behind an identity PSK);
 *   bit 2: seal a packet from the bytes (session ID 8, packet ID 8,
 *          padding length 2, time offset 1, a byte to change 2, then the
 *          payload), as user 1's client, or as the server's reply;
 *   bit 3: the server's reply, not the client's packet;
 *   bit 4: change the chosen byte (else the packet must open);
 *   bit 5: cut the packet at the chosen byte;
 *   bit 6: open the bytes as they are on both sides too. */

#define CHECK(x)                                                                                   \
	do {                                                                                       \
		if (!(x))                                                                          \
			abort();                                                                   \
	} while (0)

#define NOW 1700000000
#define IN_MAX 4096

static const ss_method METHODS[3] = {SS_METHOD_2022_AES_128_GCM, SS_METHOD_2022_AES_256_GCM,
                                     SS_METHOD_2022_CHACHA20_POLY1305};
/* two keys a method: base64 of zeros and of ones; the identity PSK 0x02.. */
static ss_account plain_users[3][2], eih[2];
static bool ready;

static const char *b64(size_t n, int which)
{
	static const char *const K16[3] = {"AAAAAAAAAAAAAAAAAAAAAA==", "AQEBAQEBAQEBAQEBAQEBAQ==",
	                                   "AgICAgICAgICAgICAgICAg=="};
	static const char *const K32[3] = {"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
	                                   "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=",
	                                   "AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI="};
	return n == 16 ? K16[which] : K32[which];
}

static void init(void)
{
	for (int m = 0; m < 3; m++)
		for (int u = 0; u < 2; u++) {
			const char *k = b64(ss_key_len(METHODS[m]), u);
			CHECK(ss_account_init(&plain_users[m][u], METHODS[m], k, strlen(k)) == 0);
		}
	for (int u = 0; u < 2; u++) {
		const char *k = b64(16, u), *ipsk = b64(16, 2);
		CHECK(ss_account_init(&eih[u], SS_METHOD_2022_AES_128_GCM, k, strlen(k)) == 0);
		CHECK(ss_account_set_identity(&eih[u], ipsk, strlen(ipsk)) == 0);
	}
	ready = true;
}

/* One receiver state, as the shells keep one per session. */
static ss2022_udp_rx rx;

static ss2022_udp_rx *lookup(void *ud, int user, const uint8_t *session)
{
	(void)ud, (void)session;
	CHECK(user >= 0 && user < 2);
	return &rx;
}

static const uint8_t CLIENT_SESSION[8] = {1, 2, 3, 4, 5, 6, 7, 8};

/* Opens in[0, len) on the side given; checks what an open says. */
static ssize_t open_side(const ss_account *users, size_t n, bool reply, const uint8_t *in,
                         size_t len, const uint8_t *client_session)
{
	uint8_t *out = malloc(len ? len : 1);
	CHECK(out);
	ss2022_udp_packet p;
	ssize_t r = reply ? ss2022_udp_open_response(users[0].method, users[1].key, client_session,
	                                             NOW, lookup, NULL, in, len, out, len, &p)
	                  : ss2022_udp_open_request(users, n, NOW, lookup, NULL, in, len, out, len,
	                                            &p);
	if (r >= 0) {
		CHECK(p.addr_off < p.payload_off && p.payload_off + (size_t)r <= len);
		CHECK(ss_addr_span(out + p.addr_off, p.payload_off - p.addr_off) ==
		      (ssize_t)(p.payload_off - p.addr_off));
		CHECK(reply ? p.user == 0 : p.user >= 0 && (size_t)p.user < n);
	} else {
		CHECK(ss2022_udp_strerror((int)r)[0] != '?');
	}
	free(out);
	return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!ready)
		init();
	if (size < 1 || size > IN_MAX)
		return 0;
	uint8_t flags = data[0];
	data++, size--;
	bool id_users = (flags & 3) == 3, reply = flags & 8;
	ss_method m = id_users ? SS_METHOD_2022_AES_128_GCM : METHODS[flags & 3];
	const ss_account *users = id_users ? eih : plain_users[flags & 3];
	size_t n_users = id_users ? 2 : 1;
	/* the client of a plain server is user 0's key; behind identities user 1 */
	const ss_account *me = id_users ? &users[1] : &users[0];

	if (flags & 64) {
		ss2022_udp_rx_free(&rx);
		(void)open_side(users, n_users, false, data, size, NULL);
		ss2022_udp_rx_free(&rx);
		(void)open_side(users, 2, true, data, size, CLIENT_SESSION);
	}
	if (!(flags & 4) || size < 21)
		goto done;

	uint8_t session[8], addr[SS_ADDR_MAX] = {1, 127, 0, 0, 1, 0, 53};
	memcpy(session, data, 8);
	uint64_t packet = 0;
	for (int i = 0; i < 8; i++)
		packet = packet << 8 | data[8 + i];
	size_t padding = ((size_t)data[16] << 8 | data[17]) % (SS2022_PADDING_MAX + 1);
	int64_t now = NOW + (int8_t)data[18] % 40;
	size_t at = (size_t)data[19] << 8 | data[20];
	uint8_t nonce[SS2022_XNONCE_LEN] = {0};
	memcpy(nonce, data, size < sizeof nonce ? size : sizeof nonce);
	ss_identity id = {.n = id_users ? 1 : 0};
	memcpy(id.ipsk[0], eih[0].ipsk, 16);
	ss2022_udp_msg msg = {.session = reply ? session : CLIENT_SESSION, .packet = packet,
	                      .client_session = reply ? CLIENT_SESSION : NULL, .now = now,
	                      .padding = padding, .addr = addr, .alen = 7, .payload = data + 21,
	                      .plen = size - 21, .nonce = nonce};
	size_t cap = IN_MAX + 2048;
	uint8_t *wire = malloc(cap);
	CHECK(wire);
	ss2022_udp_cipher c = {0};
	ssize_t len = ss2022_udp_seal(m, me->key, reply ? NULL : &id, &c, &msg, wire, cap);
	ss2022_udp_cipher_free(&c);
	CHECK(len > 0);
	size_t wlen = (size_t)len;
	bool changed = false;
	if ((flags & 16) && wlen) {
		wire[at % wlen] ^= (uint8_t)(1 + (flags >> 7));
		changed = true;
	}
	if ((flags & 32) && wlen) {
		wlen = at % wlen;
		changed = true;
	}
	ss2022_udp_rx_free(&rx);
	/* the server's reply is opened by user "me": users[1] of a pair */
	const ss_account reply_pair[2] = {*me, *me};
	ssize_t r = reply ? open_side(reply_pair, 2, true, wire, wlen, CLIENT_SESSION)
	                  : open_side(users, n_users, false, wire, wlen, NULL);
	bool in_time = now - NOW <= SS2022_TIME_WINDOW && NOW - now <= SS2022_TIME_WINDOW;
	if (!changed) {
		CHECK(in_time ? r == (ssize_t)(size - 21) : r == SS2022_UDP_ERR_TIME);
		if (r >= 0) /* the same packet again: a replay */
			CHECK((reply ? open_side(reply_pair, 2, true, wire, wlen, CLIENT_SESSION)
			             : open_side(users, n_users, false, wire, wlen, NULL)) ==
			      SS2022_UDP_ERR_REPLAY);
	} else {
		/* a changed byte or a cut never opens */
		CHECK(r < 0);
	}
	free(wire);
done:
	ss2022_udp_rx_free(&rx);
	return 0;
}
