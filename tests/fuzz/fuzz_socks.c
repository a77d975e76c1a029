/* fuzz_socks.c - libFuzzer target: the SOCKS core cut three ways, and the UDP codec. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/socks.h"

/* Input: flags, two bytes of cut point, then the client's bytes.
 *   flags bit 0: accounts configured; bit 1: allow_udp;
 *   bit 2: answer an open with opened() instead of failed();
 *   bits 3-5: the proto_dial_error for failed(). */

#define CHECK(x)                                                                                   \
	do {                                                                                       \
		if (!(x))                                                                          \
			abort();                                                                   \
	} while (0)

static const proto_account USERS[] = {
	{.user = "u", .pass = "p", .user_len = 1, .pass_len = 1},
	{.user = "bob", .pass = "hunter2", .user_len = 3, .pass_len = 7},
	{.user = "nopass", .user_len = 6},
};

/* A handshake writes at most a greeting reply, an auth reply and a refusal. */
#define REPLY_MAX 64

typedef struct outcome {
	socks_server s;
	ssize_t ret;
	proto_event ev;
	uint8_t reply[REPLY_MAX];
	size_t reply_len;
} outcome;

static void start(outcome *o, uint8_t flags)
{
	memset(o, 0, sizeof *o);
	socks_server_init(&o->s, (flags & 1) ? USERS : NULL, (flags & 1) ? 3 : 0, (flags & 2) != 0);
}

/* Feeds one piece; false once the handshake has ended. */
static bool piece(outcome *o, const uint8_t *in, size_t len, size_t *consumed)
{
	proto_out out;
	ssize_t n = socks_server_feed(&o->s, in, len, &out, &o->ev);
	CHECK(out.len <= PROTO_OUT_MAX);
	CHECK(o->reply_len + out.len <= REPLY_MAX);
	memcpy(o->reply + o->reply_len, out.buf, out.len);
	o->reply_len += out.len;
	if (n < 0) {
		CHECK(n == PROTO_ERR_MALFORMED || n == PROTO_ERR_TOO_BIG);
		CHECK(o->ev.kind == PROTO_EV_CLOSE && o->ev.reason);
		o->ret = n;
		return false;
	}
	CHECK((size_t)n <= len);
	*consumed += (size_t)n;
	o->ret = (ssize_t)*consumed;
	if (o->ev.kind != PROTO_EV_NONE) {
		CHECK(o->ev.kind == PROTO_EV_OPEN || o->ev.reason);
		return false;
	}
	CHECK((size_t)n == len);
	return true;
}

static void same(const outcome *a, const outcome *b)
{
	char ta[ADDR_TEXT_MAX], tb[ADDR_TEXT_MAX];
	CHECK(a->ret == b->ret);
	CHECK(a->reply_len == b->reply_len && memcmp(a->reply, b->reply, a->reply_len) == 0);
	CHECK(a->ev.kind == b->ev.kind && a->ev.user == b->ev.user && a->ev.reason == b->ev.reason);
	CHECK(socks_server_version(&a->s) == socks_server_version(&b->s));
	if (a->ev.kind == PROTO_EV_OPEN) {
		CHECK(a->ev.cmd == b->ev.cmd);
		CHECK(a->ev.dest.kind == b->ev.dest.kind && a->ev.dest.network == b->ev.dest.network);
		addr_dest_format(&a->ev.dest, ta, sizeof ta);
		addr_dest_format(&b->ev.dest, tb, sizeof tb);
		CHECK(strcmp(ta, tb) == 0);
	}
}

/* Answers an open as the shell would, then checks the core is done. */
static void finish(outcome *o, uint8_t flags)
{
	proto_out out;
	proto_event ev;
	if (o->ev.kind == PROTO_EV_OPEN) {
		int r = (flags & 4) ? socks_server_opened(&o->s, &o->ev.dest, &out)
		                    : socks_server_failed(&o->s, (proto_dial_error)((flags >> 3) & 7), &out);
		CHECK(r == 0);
		CHECK(out.len > 0 && out.len <= PROTO_OUT_MAX);
	}
	if (o->ev.kind != PROTO_EV_NONE || o->ret < 0) {
		CHECK(socks_server_feed(&o->s, (const uint8_t *)"x", 1, &out, &ev) == PROTO_ERR_STATE);
		CHECK(out.len == 0);
		CHECK(socks_server_opened(&o->s, NULL, &out) == PROTO_ERR_STATE);
	}
}

static void udp(const uint8_t *pkt, size_t len)
{
	addr_dest d;
	uint8_t hdr[SOCKS_UDP_HEADER_MAX];
	ssize_t n = socks_udp_decode(pkt, len, &d);
	if (n < 0) {
		CHECK(n == PROTO_ERR_MALFORMED);
		return;
	}
	CHECK((size_t)n <= len && n <= SOCKS_UDP_HEADER_MAX && d.network == ADDR_UDP);
	/* Decoding accepts only the canonical form, so encoding gives it back. */
	CHECK(socks_udp_encode(&d, hdr, sizeof hdr) == n);
	CHECK(memcmp(hdr, pkt, (size_t)n) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	udp(data, size);
	if (size < 3)
		return 0;
	uint8_t flags = data[0];
	const uint8_t *in = data + 3;
	size_t len = size - 3;
	size_t cut = ((size_t)data[1] << 8 | data[2]) % (len + 1);
	static outcome whole, split, bytes;
	size_t consumed;

	start(&whole, flags);
	consumed = 0;
	piece(&whole, in, len, &consumed);

	start(&split, flags);
	consumed = 0;
	if (piece(&split, in, cut, &consumed))
		piece(&split, in + cut, len - cut, &consumed);
	same(&whole, &split);

	start(&bytes, flags);
	consumed = 0;
	for (size_t i = 0; i < len; i++)
		if (!piece(&bytes, in + i, 1, &consumed))
			break;
	if (len == 0)
		piece(&bytes, in, 0, &consumed);
	same(&whole, &bytes);

	finish(&whole, flags);
	return 0;
}
