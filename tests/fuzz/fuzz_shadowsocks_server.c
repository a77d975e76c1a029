/* fuzz_shadowsocks_server.c - libFuzzer target: the Shadowsocks server core (AEAD-2017 and 2022, one key or users behind an identity PSK) fed whole and cut in two, on raw bytes and on a fuzzed first chunk sealed with user 1's key; the body layer on what follows, with and without a sniffing shell's peek before it (the same bytes go down); UDP packets opened. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/shadowsocks_server.h"

/* Input: flags, two bytes of cut point, two bytes of declared length, then
 * the bytes.
 *   flags bits 0-1: the method (3: the first again; with bit 5,
 *          2022-blake3-aes-128-gcm with both users behind an identity PSK,
 *          SIP022-2: sealed bytes then carry user 1's identity header);
 *   bit 2: seal the bytes (the fuzzer cannot forge a tag): the declared
 *          length sealed as the first length (2022: in the fixed header),
 *          the bytes up to it sealed as the first payload (2022: the
 *          variable header; fewer when there are fewer: a truncated
 *          chunk), the rest after it as the body, as raw bytes;
 *   bit 3: the rest sealed as body chunks of at most 255 bytes;
 *   bit 4: a replay filter, and the request fed twice (the second refused);
 *   bit 5: a Shadowsocks 2022 method;
 *   bit 6: (2022) the fixed header's type 1, not 0;
 *   bit 7: (2022) the timestamp 31 s ahead. */

#define CHECK(x)                                                                                   \
	do {                                                                                       \
		if (!(x))                                                                          \
			abort();                                                                   \
	} while (0)

#define NOW 1700000000
#define IN_MAX (2 * SS_CHUNK_MAX + 4096)

static ss_account users[2][SS_METHOD_COUNT_];
/* users 0 and 1 of 2022-blake3-aes-128-gcm behind the iPSK 0x02.. */
static ss_account eih_users[2];
#define IPSK_B64 "AgICAgICAgICAgICAgICAg=="

static const ss_method AEAD[3] = {SS_METHOD_AES_128_GCM, SS_METHOD_AES_256_GCM,
                                  SS_METHOD_CHACHA20_POLY1305};
static const ss_method SS2022[3] = {SS_METHOD_2022_AES_128_GCM, SS_METHOD_2022_AES_256_GCM,
                                    SS_METHOD_2022_CHACHA20_POLY1305};

/* Two users' keys: a password, or for 2022 the base64 of 16 or 32 bytes of
 * zeros and of ones. */
static const char *password(ss_method m, int user)
{
	if (!ss_method_is_2022(m))
		return user ? "one" : "zero";
	if (ss_key_len(m) == 16)
		return user ? "AQEBAQEBAQEBAQEBAQEBAQ==" : "AAAAAAAAAAAAAAAAAAAAAA==";
	return user ? "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE="
	            : "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
}
static bool ready;

static int replay_add(void *ud, const uint8_t *salt, size_t len, int64_t now)
{
	return ss_replay_add(ud, salt, len, now);
}

typedef struct outcome {
	ssize_t used;
	proto_event ev;
} outcome;

/* The shell's loop: feeds what arrived, unconsumed bytes offered again. */
static void serve(ss_server *s, const uint8_t *in, size_t len, size_t cut, outcome *o)
{
	proto_out out;
	size_t off = 0, arrived = cut < len ? cut : len;
	*o = (outcome){0};
	for (int round = 0; round < 2; round++) {
		for (;;) {
			ssize_t n = ss_server_feed(s, in + off, arrived - off, NOW, &out, &o->ev);
			CHECK(out.len == 0);
			if (n < 0) {
				CHECK(o->ev.kind == PROTO_EV_CLOSE && o->ev.reason);
				o->used = n;
				return;
			}
			CHECK((size_t)n <= arrived - off);
			off += (size_t)n;
			if (o->ev.kind == PROTO_EV_CLOSE) {
				CHECK(o->ev.reason && n == 0);
				o->used = (ssize_t)off;
				return;
			}
			if (o->ev.kind == PROTO_EV_OPEN) {
				CHECK(o->ev.dest.kind != ADDR_NONE && o->ev.user >= 0);
				o->used = (ssize_t)off;
				return;
			}
			CHECK(o->ev.reason == NULL);
			if (n == 0 || off == arrived)
				break;
		}
		arrived = len;
	}
	o->used = (ssize_t)off;
	/* no decision: the input must be shorter than a whole first chunk */
	CHECK(len < SS_KEY_MAX + SS2022_IDENTITY_LEN + SS2022_REQ_FIXED_SEALED + SS_CHUNK_BUF_MAX);
}

/* Runs the body on in[0, len), first peeking at it in steps of peek
 * bytes when peek is not 0 (a sniffing shell). What goes down is appended
 * to got (cap bytes of room: the request's whole input, as nothing comes
 * out larger than it went in, the first chunk's rest included).
 * Returns whether every byte went through without a failure. */
static bool body(ss_server *s, const uint8_t *in, size_t len, size_t peek, uint8_t *got,
                 size_t cap, size_t *got_len)
{
	static const uint8_t salt[SS_KEY_MAX] = {7};
	size_t off = 0;
	*got_len = 0;
	if (peek) {
		const uint8_t *plain = NULL;
		size_t plain_len = 0;
		CHECK(ss_server_peek(s, NULL, 0, &plain, &plain_len) == 0);
		while (off < len) {
			size_t n = len - off < peek ? len - off : peek;
			ssize_t used = ss_server_peek(s, in + off, n, &plain, &plain_len);
			CHECK(plain_len <= SS_PEEK_MAX);
			if (used < 0)
				return false;
			CHECK((size_t)used <= n);
			if (used == 0) {
				CHECK(plain_len == SS_PEEK_MAX);
				break;
			}
			off += (size_t)used;
		}
	}
	layer *b = ss_server_body_new(s, salt, NOW);
	if (!b)
		return false; /* out of memory only */
	uint8_t *down_buf = malloc(SS_CHUNK_PAYLOAD_MAX + 1);
	CHECK(down_buf);
	layer_buf down = {down_buf, 0, SS_CHUNK_PAYLOAD_MAX + 1};
	CHECK(b->ops->start(b, &down) == 0);
	bool failed = false;
	for (int guard = 0; guard < 100000; guard++) {
		CHECK(*got_len + down.len <= cap);
		memcpy(got + *got_len, down_buf, down.len);
		*got_len += down.len;
		down.len = 0;
		ssize_t n = b->ops->from_above(b, in + off, len - off, &down);
		if (n < 0) {
			CHECK(b->ops->error(b));
			failed = true;
			break;
		}
		off += (size_t)n;
		if (n == 0 && down.len == 0)
			break;
	}
	uint8_t up_buf[SS_KEY_MAX + SS_CHUNK_MAX];
	layer_buf up = {up_buf, 0, sizeof up_buf};
	/* our direction seals whatever comes, until the layer failed */
	ssize_t n = b->ops->from_below(b, in, len < 100 ? len : 100, &up, NULL);
	CHECK(failed ? n == LAYER_ERR_PROTO : n >= 0);
	b->ops->free(b);
	free(down_buf);
	return !failed;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!ready) {
		for (int m = 0; m < SS_METHOD_COUNT_; m++)
			for (int u = 0; u < 2; u++) {
				const char *pw = password((ss_method)m, u);
				CHECK(ss_account_init(&users[u][m], (ss_method)m, pw, strlen(pw)) == 0);
			}
		for (int u = 0; u < 2; u++) {
			eih_users[u] = users[u][SS_METHOD_2022_AES_128_GCM];
			CHECK(ss_account_set_identity(&eih_users[u], IPSK_B64, strlen(IPSK_B64)) == 0);
		}
		ready = true;
	}
	if (size < 5 || size > IN_MAX)
		return 0;
	uint8_t flags = data[0];
	size_t cut = (size_t)data[1] << 8 | data[2];
	uint16_t declared = (uint16_t)(data[3] << 8 | data[4]);
	data += 5;
	size -= 5;
	ss_method m = (flags & 32 ? SS2022 : AEAD)[(flags & 3) % 3];
	bool eih = (flags & 32) && (flags & 3) == 3;
	const ss_account acc[2] = {eih ? eih_users[0] : users[0][m], eih ? eih_users[1] : users[1][m]};

	uint8_t *in = malloc(IN_MAX + 4 * SS_CHUNK_MAX);
	CHECK(in);
	size_t len;
	if (flags & 4) {
		size_t slen = ss_key_len(m), plen = declared < size ? declared : size;
		uint8_t sub[SS_KEY_MAX], l2[2] = {(uint8_t)(declared >> 8), (uint8_t)declared};
		ss_aead a;
		memset(in, 0x5a, slen);
		memcpy(in, data, size < slen ? size : slen); /* a fuzzed salt */
		CHECK(ss_subkey(m, acc[1].key, in, sub) == 0);
		CHECK(ss_aead_init(&a, m, sub, true) == 0);
		size_t hdr = 0;
		if (eih) {
			/* SIP022-2: user 1's identity header after the salt */
			CHECK(ss2022_identity_seal(m, acc[1].ipsk, in, acc[1].key, in + slen) == 0);
			hdr = SS2022_IDENTITY_LEN;
		}
		if (ss_method_is_2022(m)) {
			uint64_t ts = NOW + (flags & 128 ? 31 : 0);
			uint8_t fixed[SS2022_REQ_FIXED_LEN] = {flags & 64 ? 1 : 0};
			for (int i = 0; i < 8; i++)
				fixed[1 + i] = (uint8_t)(ts >> (56 - 8 * i));
			memcpy(fixed + 9, l2, 2);
			CHECK(ss_aead_seal(&a, fixed, sizeof fixed, in + slen + hdr) == 0);
			len = slen + hdr + SS2022_REQ_FIXED_SEALED;
		} else {
			CHECK(ss_aead_seal(&a, l2, 2, in + slen) == 0);
			len = slen + SS_LEN_BLOCK;
		}
		if (plen) {
			CHECK(ss_aead_seal(&a, data, plen, in + len) == 0);
			len += plen + SS_TAG_LEN;
		}
		const uint8_t *rest = data + plen;
		size_t rlen = size - plen;
		if (flags & 8) {
			for (size_t k = 0; k < rlen;) {
				size_t c = rlen - k < 255 ? rlen - k : 255;
				ssize_t s = ss_chunk_seal(&a, rest + k, c, in + len);
				CHECK(s > 0);
				len += (size_t)s;
				k += c;
			}
		} else {
			memcpy(in + len, rest, rlen);
			len += rlen;
		}
		ss_aead_free(&a);
	} else {
		memcpy(in, data, size);
		len = size;
	}

	uint8_t *got[2] = {malloc(len ? len : 1), malloc(len ? len : 1)};
	CHECK(got[0] && got[1]);
	ss_replay *filter = (flags & 16) ? calloc(1, sizeof *filter) : NULL;
	for (int pass = 0; pass < (filter ? 2 : 1); pass++) {
		ss_server s;
		ss_server_init(&s, acc, 2, filter ? replay_add : NULL, filter);
		outcome whole, split;
		serve(&s, in, len, len, &whole);
		bool whole_ok = false;
		size_t whole_len = 0, split_len = 0;
		if (whole.ev.kind == PROTO_EV_OPEN)
			whole_ok = body(&s, in + whole.used, len - (size_t)whole.used, 0, got[0],
			                len, &whole_len);
		ss_server_free(&s);
		if (!filter) {
			/* any split reaches the same decision */
			ss_server_init(&s, acc, 2, NULL, NULL);
			serve(&s, in, len, cut, &split);
			/* (what a refused feed consumed before does not matter:
			 * the connection is drained) */
			CHECK(split.ev.kind == whole.ev.kind && split.ev.reason == whole.ev.reason);
			if (whole.ev.kind == PROTO_EV_OPEN)
				CHECK(split.used == whole.used &&
				      addr_dest_same(&split.ev.dest, &whole.ev.dest) &&
				      split.ev.user == whole.ev.user);
			/* a peek before the body changes nothing that goes down */
			if (whole.ev.kind == PROTO_EV_OPEN &&
			    body(&s, in + split.used, len - (size_t)split.used, cut % 300 + 1, got[1],
			         len, &split_len) &&
			    whole_ok)
				CHECK(split_len == whole_len && memcmp(got[0], got[1], whole_len) == 0);
			ss_server_free(&s);
		} else if (pass == 1 && whole.ev.kind == PROTO_EV_CLOSE) {
			CHECK(whole.ev.reason);
		}
	}
	free(filter);
	free(got[0]);
	free(got[1]);

	/* the same bytes as a UDP packet */
	uint8_t *plain = malloc(len ? len : 1);
	CHECK(plain);
	ssize_t p = ss_packet_open(m, acc[1].key, in, len, plain, len);
	CHECK(p == PROTO_ERR_MALFORMED || (p >= 0 && (size_t)p + ss_key_len(m) + SS_TAG_LEN == len));
	free(plain);
	free(in);
	return 0;
}
