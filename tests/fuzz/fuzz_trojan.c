/* fuzz_trojan.c - libFuzzer target: the Trojan server core fed whole, as growing prefixes and cut in two; the UDP codec. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/trojan.h"

/* Input: flags, two bytes of cut point, then the client's bytes.
 *   flags bit 0: accounts configured;
 *   bit 1: put a valid account's hash before the bytes (the fuzzer cannot
 *          guess one: hashes are compared in constant time), bit 2 picks
 *          which account. */

#define CHECK(x)                                                                                   \
	do {                                                                                       \
		if (!(x))                                                                          \
			abort();                                                                   \
	} while (0)

static uint8_t HASHES[2][TROJAN_HASH_LEN];

typedef struct outcome {
	ssize_t ret;
	proto_event ev;
	bool fallback;
} outcome;

static void start(trojan_server *s, uint8_t flags)
{
	trojan_server_init(s, (flags & 1) ? (const uint8_t(*)[TROJAN_HASH_LEN])HASHES : NULL,
	                   (flags & 1) ? 2 : 0);
}

static void feed(trojan_server *s, const uint8_t *in, size_t len, outcome *o)
{
	proto_out out;
	o->ret = trojan_server_feed(s, in, len, &out, &o->ev);
	o->fallback = trojan_server_wants_fallback(s);
	CHECK(out.len == 0);
	CHECK(o->ret >= 0);
	switch (o->ev.kind) {
	case PROTO_EV_NONE:
		CHECK(o->ret == 0 && !o->fallback && o->ev.reason == NULL);
		/* The format bounds the request: a decision comes within it. */
		CHECK(len < TROJAN_REQUEST_MAX);
		break;
	case PROTO_EV_OPEN:
		CHECK(o->ret > 0 && (size_t)o->ret <= len && o->ret <= TROJAN_REQUEST_MAX);
		CHECK(!o->fallback && o->ev.user >= 0 && o->ev.user < 2);
		break;
	case PROTO_EV_CLOSE:
		/* The fallback: nothing consumed, the shell still holds it all. */
		CHECK(o->ret == 0 && o->fallback && o->ev.reason != NULL);
		break;
	}
}

static void same(const outcome *a, const outcome *b)
{
	char ta[ADDR_TEXT_MAX], tb[ADDR_TEXT_MAX];
	CHECK(a->ret == b->ret && a->ev.kind == b->ev.kind && a->ev.user == b->ev.user);
	CHECK(a->ev.reason == b->ev.reason && a->fallback == b->fallback);
	if (a->ev.kind == PROTO_EV_OPEN) {
		CHECK(a->ev.cmd == b->ev.cmd && a->ev.dest.network == b->ev.dest.network);
		addr_dest_format(&a->ev.dest, ta, sizeof ta);
		addr_dest_format(&b->ev.dest, tb, sizeof tb);
		CHECK(strcmp(ta, tb) == 0);
	}
}

/* An accepted request is exactly what the client layer writes for it. */
static void round_trip(const uint8_t *in, const outcome *o)
{
	layer *l = trojan_client_new(HASHES[o->ev.user], &o->ev.dest);
	CHECK(l != NULL);
	uint8_t buf[TROJAN_REQUEST_MAX];
	layer_buf down = {.data = buf, .cap = sizeof buf};
	CHECK(l->ops->start(l, &down) == 0);
	CHECK(down.len == (size_t)o->ret && memcmp(buf, in, down.len) == 0);
	l->ops->free(l);
}

static void udp(const uint8_t *in, size_t len)
{
	addr_dest d;
	size_t off, plen;
	ssize_t n = trojan_udp_decode(in, len, &d, &off, &plen);
	CHECK(n == TROJAN_UDP_NEED_MORE || n == PROTO_ERR_MALFORMED || n == PROTO_ERR_TOO_BIG ||
	      n > 0);
	/* A prefix never says more than the whole: need more, or the same error. */
	size_t k = len < 300 ? len : 300;
	for (size_t p = 0; p < k; p++) {
		addr_dest d2;
		size_t o2, l2;
		ssize_t m = trojan_udp_decode(in, p, &d2, &o2, &l2);
		CHECK(m == TROJAN_UDP_NEED_MORE || (n < 0 && m == n) || (n > 0 && m == n && p >= (size_t)n));
	}
	if (n <= 0)
		return;
	CHECK((size_t)n <= len && off + plen == (size_t)n && plen <= TROJAN_UDP_PAYLOAD_MAX);
	CHECK(d.network == ADDR_UDP);
	uint8_t hdr[TROJAN_UDP_HEADER_MAX];
	ssize_t h = trojan_udp_encode(&d, plen, hdr, sizeof hdr);
	CHECK(h == (ssize_t)off && memcmp(hdr, in, off) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool ready;
	if (!ready) {
		CHECK(trojan_password_hash("secret", (char *)HASHES[0]) == 0);
		CHECK(trojan_password_hash("hunter2", (char *)HASHES[1]) == 0);
		ready = true;
	}
	udp(data, size);
	if (size < 3)
		return 0;
	uint8_t flags = data[0];
	static uint8_t in[TROJAN_HASH_LEN + 4096];
	size_t len = 0;
	if (flags & 2) {
		memcpy(in, HASHES[(flags >> 2) & 1], TROJAN_HASH_LEN);
		len = TROJAN_HASH_LEN;
	}
	size_t body = size - 3 < 4096 ? size - 3 : 4096;
	memcpy(in + len, data + 3, body);
	len += body;
	size_t cut = ((size_t)data[1] << 8 | data[2]) % (len + 1);

	trojan_server s;
	outcome whole, other;
	start(&s, flags);
	feed(&s, in, len, &whole);
	if (whole.ev.kind == PROTO_EV_OPEN)
		round_trip(in, &whole);
	if (whole.ev.kind != PROTO_EV_NONE) {
		proto_out out;
		proto_event ev;
		CHECK(trojan_server_feed(&s, in, len, &out, &ev) == PROTO_ERR_STATE);
		CHECK(trojan_server_timeout(&s, &ev) == PROTO_ERR_STATE);
	}

	/* As the shell feeds it: growing prefixes until one decides. */
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
