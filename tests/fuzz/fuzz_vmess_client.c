/* fuzz_vmess_client.c - libFuzzer target: the VMess client layer's response header and body chunk parsing, fed whole and a few bytes at a time. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/vmess.h"

/* Input: flags, then the server's bytes.
 *   flags bits 0-1: security (aes-128-gcm, chacha20-poly1305, none, zero);
 *   bit 2: udp (not with zero);
 *   bit 3: put a valid response header before the bytes (the fuzzer cannot
 *          forge its GCM tags), so the chunk parser sees them;
 *   bits 4-7: the step the bytes arrive in (0: all at once). */

#define CHECK(x)                                                                                   \
	do {                                                                                       \
		if (!(x))                                                                          \
			abort();                                                                   \
	} while (0)

static const uint8_t SECS[4] = {VMESS_SEC_AES_128_GCM, VMESS_SEC_CHACHA20_POLY1305,
                                VMESS_SEC_NONE, VMESS_SEC_ZERO};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	uint8_t flags = data[0];
	data++;
	size--;
	vmess_security sec = SECS[flags & 3];
	bool udp = (flags & 4) && sec != VMESS_SEC_ZERO;
	size_t step = flags >> 4;

	vmess_client_random r;
	memset(&r, 0x11, sizeof r);
	uint8_t ck[VMESS_KEY_LEN] = {1, 2, 3};
	addr_dest dest = {.kind = ADDR_IPV4, .port = 443, .u.v4 = {10, 0, 0, 1}};
	layer *l = vmess_client_new(ck, sec, &dest, udp, 1700000000, &r);
	CHECK(l != NULL);

	/* the server's bytes: maybe a valid header, then the input */
	size_t len = 0;
	uint8_t *srv = malloc(64 + size);
	CHECK(srv != NULL);
	if (flags & 8) {
		uint8_t rk[16], ri[16];
		vmess_response_keys(r.body_key, r.body_iv, rk, ri);
		ssize_t n = vmess_response_seal(rk, ri, r.auth_v, 0, srv, 64);
		CHECK(n > 0);
		len = (size_t)n;
	}
	memcpy(srv + len, data, size);
	len += size;

	static uint8_t up_b[1 << 17], down_b[1 << 15];
	layer_buf up = {.data = up_b, .cap = sizeof up_b};
	layer_buf down = {.data = down_b, .cap = sizeof down_b};
	CHECK(l->ops->start(l, &down) == 0);
	CHECK(l->ops->ready(l));
	uint8_t *held = malloc(len ? len : 1);
	CHECK(held != NULL);
	size_t held_len = 0, arrived = 0;
	while (arrived < len) {
		size_t n = step ? step : len;
		if (n > len - arrived)
			n = len - arrived;
		memcpy(held + held_len, srv + arrived, n);
		held_len += n;
		arrived += n;
		if (up.len > sizeof up_b / 2)
			up.len = 0; /* the app read it */
		ssize_t got = l->ops->from_below(l, held, held_len, &up, &down);
		if (got < 0) {
			CHECK(got == LAYER_ERR_PROTO || got == LAYER_ERR_NOMEM);
			CHECK(got != LAYER_ERR_PROTO || l->ops->error(l) != NULL);
			break;
		}
		CHECK((size_t)got <= held_len);
		memmove(held, held + got, held_len - (size_t)got);
		held_len -= (size_t)got;
	}
	/* the app side keeps working or fails cleanly */
	uint8_t frame[7] = {0, 5, 'h', 'e', 'l', 'l', 'o'};
	down.len = 0;
	ssize_t w = l->ops->from_above(l, frame, sizeof frame, &down);
	CHECK(w == LAYER_ERR_PROTO || (w >= 0 && (size_t)w <= sizeof frame));
	CHECK(l->ops->shutdown(l, &down) == 0);
	free(held);
	free(srv);
	l->ops->free(l);
	return 0;
}
