/* fuzz_vless.c - libFuzzer target: the VLESS server core fed whole, as growing prefixes and cut in two; the UDP framing. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/vless.h"

/* Input: flags, two bytes of cut point, then the client's bytes.
 *   flags bit 0: accounts configured;
 *   bit 1: put version 0 and a valid account's UUID before the bytes (the
 *          fuzzer cannot guess one: UUIDs are compared in constant time),
 *   bit 2 picks which account. */

#define CHECK(x)                                                                                   \
	do {                                                                                       \
		if (!(x))                                                                          \
			abort();                                                                   \
	} while (0)

static const uint8_t USERS[2][VLESS_UUID_LEN] = {
	{0xb8, 0x31, 0x38, 0x1d, 0x63, 0x24, 0x4d, 0x53, 0xad, 0x4f, 0x8c, 0xda, 0x48, 0xb3, 0x08,
	 0x11},
	{0x27, 0x84, 0x8f, 0x6e, 0x54, 0x7b, 0x4e, 0x4c, 0xaa, 0x1f, 0x9c, 0xa2, 0x8c, 0x1d, 0x7e,
	 0x3b},
};

typedef struct outcome {
	ssize_t ret;
	proto_event ev;
} outcome;

static void start(vless_server *s, uint8_t flags)
{
	vless_server_init(s, (flags & 1) ? USERS : NULL, (flags & 1) ? 2 : 0);
}

static void feed(vless_server *s, const uint8_t *in, size_t len, outcome *o)
{
	proto_out out;
	o->ret = vless_server_feed(s, in, len, &out, &o->ev);
	CHECK(out.len == 0);
	switch (o->ev.kind) {
	case PROTO_EV_NONE:
		CHECK(o->ret == 0 && o->ev.reason == NULL);
		CHECK(len < VLESS_REQUEST_MAX); /* a decision comes within the bound */
		break;
	case PROTO_EV_OPEN:
		CHECK(o->ret > 0 && (size_t)o->ret <= len && o->ret <= VLESS_REQUEST_MAX);
		CHECK(o->ev.user >= 0 && o->ev.user < 2);
		break;
	case PROTO_EV_CLOSE:
		CHECK(o->ev.reason != NULL);
		CHECK(o->ret == 0 || o->ret == PROTO_ERR_MALFORMED || o->ret == PROTO_ERR_TOO_BIG);
		break;
	}
}

static void same(const outcome *a, const outcome *b)
{
	char ta[ADDR_TEXT_MAX], tb[ADDR_TEXT_MAX];
	CHECK(a->ret == b->ret && a->ev.kind == b->ev.kind && a->ev.user == b->ev.user);
	CHECK(a->ev.reason == b->ev.reason);
	if (a->ev.kind == PROTO_EV_OPEN) {
		CHECK(a->ev.cmd == b->ev.cmd && a->ev.dest.network == b->ev.dest.network);
		addr_dest_format(&a->ev.dest, ta, sizeof ta);
		addr_dest_format(&b->ev.dest, tb, sizeof tb);
		CHECK(strcmp(ta, tb) == 0);
	}
}

/* An accepted request is exactly what the client layer writes for it, and
 * the client reads the core's response. */
static void round_trip(vless_server *s, const uint8_t *in, const outcome *o)
{
	layer *l = vless_client_new(USERS[o->ev.user], &o->ev.dest,
	                            o->ev.cmd == PROTO_CMD_UDP_ASSOCIATE);
	CHECK(l != NULL);
	uint8_t buf[VLESS_REQUEST_MAX], ubuf[8];
	layer_buf down = {.data = buf, .cap = sizeof buf}, up = {.data = ubuf, .cap = sizeof ubuf};
	CHECK(l->ops->start(l, &down) == 0);
	CHECK(down.len == (size_t)o->ret && memcmp(buf, in, down.len) == 0);
	proto_out out;
	CHECK(vless_server_opened(s, &out) == 0);
	CHECK(l->ops->from_below(l, out.buf, out.len, &up, &down) == (ssize_t)out.len);
	CHECK(up.len == 0 && l->ops->ready(l));
	CHECK(vless_server_opened(s, &out) == PROTO_ERR_STATE);
	l->ops->free(l);
}

static void udp(const uint8_t *in, size_t len)
{
	size_t plen;
	ssize_t n = vless_udp_decode(in, len, &plen);
	CHECK(n == VLESS_UDP_NEED_MORE || n == PROTO_ERR_TOO_BIG || n > 0);
	if (n <= 0)
		return;
	CHECK((size_t)n == VLESS_UDP_HEADER_LEN + plen && (size_t)n <= len);
	uint8_t hdr[VLESS_UDP_HEADER_LEN];
	CHECK(vless_udp_encode(plen, hdr, sizeof hdr) == VLESS_UDP_HEADER_LEN);
	CHECK(memcmp(hdr, in, VLESS_UDP_HEADER_LEN) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	udp(data, size);
	if (size < 3)
		return 0;
	uint8_t flags = data[0];
	static uint8_t in[1 + VLESS_UUID_LEN + 4096];
	size_t len = 0;
	if (flags & 2) {
		in[0] = VLESS_VERSION;
		memcpy(in + 1, USERS[(flags >> 2) & 1], VLESS_UUID_LEN);
		len = 1 + VLESS_UUID_LEN;
	}
	size_t body = size - 3 < 4096 ? size - 3 : 4096;
	memcpy(in + len, data + 3, body);
	len += body;
	size_t cut = ((size_t)data[1] << 8 | data[2]) % (len + 1);

	vless_server s;
	outcome whole, other;
	start(&s, flags);
	feed(&s, in, len, &whole);
	if (whole.ev.kind != PROTO_EV_NONE) {
		proto_out out;
		proto_event ev;
		CHECK(vless_server_feed(&s, in, len, &out, &ev) == PROTO_ERR_STATE);
	}
	if (whole.ev.kind == PROTO_EV_OPEN)
		round_trip(&s, in, &whole);

	start(&s, flags);
	size_t k = 0;
	do {
		feed(&s, in, k, &other);
	} while (other.ev.kind == PROTO_EV_NONE && ++k <= len);
	same(&whole, &other);

	start(&s, flags);
	feed(&s, in, cut, &other);
	if (other.ev.kind == PROTO_EV_NONE)
		feed(&s, in, len, &other);
	same(&whole, &other);
	return 0;
}
