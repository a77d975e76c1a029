/* test_vless.c - the VLESS server core fed whole, as growing prefixes and cut in two; UUIDs; UDP framing; the client layer against the core. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proto/vless.h"

#define B(...) (const uint8_t[]){__VA_ARGS__}, sizeof((const uint8_t[]){__VA_ARGS__})
#define EMPTY (const uint8_t *)"", 0

#define ALICE_TEXT "b831381d-6324-4d53-ad4f-8cda48b30811"
static const uint8_t USERS[2][VLESS_UUID_LEN] = {
	{0xb8, 0x31, 0x38, 0x1d, 0x63, 0x24, 0x4d, 0x53, 0xad, 0x4f, 0x8c, 0xda, 0x48, 0xb3, 0x08,
	 0x11},
	{0x27, 0x84, 0x8f, 0x6e, 0x54, 0x7b, 0x4e, 0x4c, 0xaa, 0x1f, 0x9c, 0xa2, 0x8c, 0x1d, 0x7e,
	 0x3b},
};
static const uint8_t STRANGER[VLESS_UUID_LEN] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14,
                                                 15, 16};

static void uuid_parse(void **state)
{
	(void)state;
	uint8_t u[VLESS_UUID_LEN];
	assert_int_equal(vless_uuid_parse(ALICE_TEXT, u), 0);
	assert_memory_equal(u, USERS[0], VLESS_UUID_LEN);
	assert_int_equal(vless_uuid_parse("B831381D-6324-4D53-AD4F-8CDA48B30811", u), 0);
	assert_memory_equal(u, USERS[0], VLESS_UUID_LEN);
	memset(u, 0, sizeof u);
	assert_int_equal(vless_uuid_parse("b831381d63244d53ad4f8cda48b30811", u), 0);
	assert_memory_equal(u, USERS[0], VLESS_UUID_LEN);

	static const char *const bad[] = {
		"",
		"b831381d-6324-4d53-ad4f-8cda48b3081",   /* one digit short */
		"b831381d-6324-4d53-ad4f-8cda48b308111", /* one too many */
		"b831381d6-324-4d53-ad4f-8cda48b30811",  /* hyphen moved */
		"b831381d-6324-4d53-ad4f-8cda48b3081g",  /* not hex */
		"b831381d 6324 4d53 ad4f 8cda48b30811",
		"b831381d63244d53ad4f8cda48b3081",       /* 31 digits */
		"my-custom-id",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		memset(u, 0xaa, sizeof u);
		assert_int_equal(vless_uuid_parse(bad[i], u), -1);
		assert_int_equal(u[0], 0xaa); /* unchanged */
	}
}

enum prefix { P_NONE, P_ALICE, P_BOB, P_STRANGER };

typedef struct feed_case {
	const char *name;
	int users;
	enum prefix prefix; /* version 0 and this UUID before tail */
	const uint8_t *tail;
	size_t tail_len;
	ssize_t ret;
	size_t decide; /* the shortest prefix that decides; 0: none does */
	proto_event_kind kind;
	proto_cmd cmd;
	const char *dest;
	addr_network network;
	int user;
	const char *reason;
} feed_case;

#define HDR 17 /* version and UUID */
#define EXAMPLE_COM 'e', 'x', 'a', 'm', 'p', 'l', 'e', '.', 'c', 'o', 'm'

static const feed_case CASES[] = {
	{"nothing yet", 2, P_NONE, EMPTY, 0, 0, PROTO_EV_NONE, 0, NULL, 0, -1, NULL},
	{"TCP to IPv4, payload after", 2, P_ALICE, B(0, 0x01, 0, 80, 0x01, 1, 2, 3, 4, 'p'), 0,
	 HDR + 9, PROTO_EV_OPEN, PROTO_CMD_CONNECT, "1.2.3.4:80", ADDR_TCP, 0, NULL},
	{"TCP to a domain, second account", 2, P_BOB, B(0, 0x01, 0x01, 0xbb, 0x02, 11, EXAMPLE_COM), 0,
	 HDR + 17, PROTO_EV_OPEN, PROTO_CMD_CONNECT, "example.com:443", ADDR_TCP, 1, NULL},
	{"UDP to IPv6", 2, P_ALICE,
	 B(0, 0x02, 0, 53, 0x03, 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 5, 'q'),
	 0, HDR + 21, PROTO_EV_OPEN, PROTO_CMD_UDP_ASSOCIATE, "[2001:db8::1]:53", ADDR_UDP, 0, NULL},
	{"version only", 2, P_NONE, B(0), 0, 0, PROTO_EV_NONE, 0, NULL, 0, -1, NULL},
	{"truncated in the address", 2, P_ALICE, B(0, 0x01, 0, 80, 0x02, 11, 'e', 'x'), 0, 0,
	 PROTO_EV_NONE, 0, NULL, 0, -1, NULL},
	{"unknown user", 2, P_STRANGER, B(0, 0x01, 0, 80, 0x01, 1, 2, 3, 4), 0, HDR, PROTO_EV_CLOSE, 0,
	 NULL, 0, -1, "vless: unknown user"},
	{"no accounts", 0, P_ALICE, B(0, 0x01, 0, 80, 0x01, 1, 2, 3, 4), 0, HDR, PROTO_EV_CLOSE, 0,
	 NULL, 0, -1, "vless: unknown user"},
	{"version 1", 2, P_NONE, B(1, 0, 0, 0), PROTO_ERR_MALFORMED, 1, PROTO_EV_CLOSE, 0, NULL, 0, -1,
	 "vless: unsupported version"},
	{"an HTTP request", 2, P_NONE, B('G', 'E', 'T', ' ', '/'), PROTO_ERR_MALFORMED, 1,
	 PROTO_EV_CLOSE, 0, NULL, 0, -1, "vless: unsupported version"},
	{"addons (a flow) are refused", 2, P_ALICE,
	 B(4, 0x0a, 2, 'x', 'y', 0x01, 0, 80, 0x01, 1, 2, 3, 4), PROTO_ERR_TOO_BIG, HDR + 1,
	 PROTO_EV_CLOSE, 0, NULL, 0, -1, "vless: request addons are not supported"},
	{"mux opens a session: no address, what follows is frames", 2, P_ALICE,
	 B(0, 0x03, 0, 0x0c, 0, 1), 0, HDR + 2, PROTO_EV_OPEN, PROTO_CMD_CONNECT,
	 "v1.mux.cool:9527", ADDR_TCP, 0, NULL},
	{"reverse is refused", 2, P_ALICE, B(0, 0x04, 0, 0, 0x01, 1, 2, 3, 4), PROTO_ERR_MALFORMED,
	 HDR + 2, PROTO_EV_CLOSE, 0, NULL, 0, -1, "vless: command not supported"},
	{"SOCKS's IPv6 type 4 is not VLESS's", 2, P_ALICE, B(0, 0x01, 0, 80, 0x04, 1, 2, 3, 4),
	 PROTO_ERR_MALFORMED, HDR + 5, PROTO_EV_CLOSE, 0, NULL, 0, -1,
	 "vless: address type not supported"},
	{"empty domain", 2, P_ALICE, B(0, 0x01, 0, 80, 0x02, 0), PROTO_ERR_MALFORMED, HDR + 6,
	 PROTO_EV_CLOSE, 0, NULL, 0, -1, "vless: empty or malformed domain name"},
	{"domain holding a NUL", 2, P_ALICE, B(0, 0x01, 0, 80, 0x02, 3, 'a', 0, 'b'),
	 PROTO_ERR_MALFORMED, HDR + 9, PROTO_EV_CLOSE, 0, NULL, 0, -1,
	 "vless: empty or malformed domain name"},
};

static void build(const feed_case *c, uint8_t *in, size_t *len)
{
	size_t n = 0;
	if (c->prefix != P_NONE) {
		in[0] = 0;
		memcpy(in + 1,
		       c->prefix == P_ALICE ? USERS[0] : c->prefix == P_BOB ? USERS[1] : STRANGER,
		       VLESS_UUID_LEN);
		n = HDR;
	}
	memcpy(in + n, c->tail, c->tail_len);
	*len = n + c->tail_len;
}

static void init_core(vless_server *s, int users)
{
	vless_server_init(s, users ? USERS : NULL, (size_t)users);
}

/* The return a case expects: the request's length for an OPEN. */
static ssize_t expected_ret(const feed_case *c)
{
	return c->kind == PROTO_EV_OPEN ? (ssize_t)c->decide : c->ret;
}

static void check_result(const feed_case *c, ssize_t ret, const proto_event *ev,
                         const proto_out *out)
{
	char dest[ADDR_TEXT_MAX];
	assert_int_equal(ret, expected_ret(c));
	assert_int_equal(out->len, 0);
	assert_int_equal(ev->kind, c->kind);
	assert_int_equal(ev->user, c->user);
	if (c->kind == PROTO_EV_OPEN) {
		assert_int_equal(ev->cmd, c->cmd);
		assert_int_equal(ev->dest.network, c->network);
		addr_dest_format(&ev->dest, dest, sizeof dest);
		assert_string_equal(dest, c->dest);
	}
	if (c->reason)
		assert_string_equal(ev->reason, c->reason);
	else
		assert_null(ev->reason);
}

static void check_done(vless_server *s, proto_event_kind kind)
{
	proto_out out;
	proto_event ev;
	assert_int_equal(vless_server_feed(s, (const uint8_t *)"\0", 1, &out, &ev), PROTO_ERR_STATE);
	assert_int_equal(ev.kind, PROTO_EV_CLOSE);
	assert_string_equal(ev.reason, "vless: called after the request was decided");
	if (kind == PROTO_EV_OPEN) {
		assert_int_equal(vless_server_opened(s, &out), 0);
		assert_int_equal(out.len, 2);
		assert_int_equal(out.buf[0], 0);
		assert_int_equal(out.buf[1], 0);
	}
	assert_int_equal(vless_server_opened(s, &out), PROTO_ERR_STATE);
	assert_int_equal(out.len, 0);
}

static void run_case(const feed_case *c)
{
	uint8_t in[2 * VLESS_REQUEST_MAX];
	size_t len;
	vless_server s;
	proto_out out;
	proto_event ev;
	ssize_t n;

	print_message("%s\n", c->name);
	build(c, in, &len);

	init_core(&s, c->users);
	n = vless_server_feed(&s, in, len, &out, &ev);
	check_result(c, n, &ev, &out);
	if (c->kind != PROTO_EV_NONE)
		check_done(&s, c->kind);

	init_core(&s, c->users);
	size_t k = 0;
	do {
		n = vless_server_feed(&s, in, k, &out, &ev);
		if (ev.kind != PROTO_EV_NONE)
			break;
		assert_int_equal(n, 0);
	} while (++k <= len);
	if (c->kind == PROTO_EV_NONE)
		n = vless_server_feed(&s, in, len, &out, &ev);
	else
		assert_int_equal(k, c->decide);
	check_result(c, n, &ev, &out);

	for (size_t cut = 0; cut <= len; cut++) {
		init_core(&s, c->users);
		n = vless_server_feed(&s, in, cut, &out, &ev);
		if (ev.kind == PROTO_EV_NONE)
			n = vless_server_feed(&s, in, len, &out, &ev);
		check_result(c, n, &ev, &out);
	}
}

static void feed_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++)
		run_case(&CASES[i]);
}

/* The longest request we take is VLESS_REQUEST_MAX. */
static void header_bounds(void **state)
{
	(void)state;
	uint8_t in[VLESS_REQUEST_MAX + 4];
	size_t n = 0;
	in[n++] = 0;
	memcpy(in + n, USERS[1], VLESS_UUID_LEN);
	n += VLESS_UUID_LEN;
	in[n++] = 0;
	in[n++] = 0x01;
	in[n++] = 0x01;
	in[n++] = 0xbb;
	in[n++] = 0x02;
	in[n++] = 255;
	memset(in + n, 'v', 255);
	n += 255;
	assert_int_equal(n, VLESS_REQUEST_MAX);
	vless_server s;
	proto_out out;
	proto_event ev;
	init_core(&s, 2);
	assert_int_equal(vless_server_feed(&s, in, n, &out, &ev), VLESS_REQUEST_MAX);
	assert_int_equal(ev.kind, PROTO_EV_OPEN);
	assert_int_equal(ev.dest.u.domain.len, 255);
	assert_int_equal(ev.user, 1);

	/* A zeroed core has no accounts: everyone is unknown. */
	vless_server z = {0};
	assert_int_equal(vless_server_feed(&z, in, n, &out, &ev), 0);
	assert_int_equal(ev.kind, PROTO_EV_CLOSE);
	assert_string_equal(ev.reason, "vless: unknown user");
	assert_int_equal(vless_server_opened(&z, &out), PROTO_ERR_STATE);
}

/* ---- UDP framing ---- */

static void udp_framing(void **state)
{
	(void)state;
	static uint8_t stream[2 * VLESS_UDP_FRAME_MAX];
	static const size_t lens[] = {0, 1, 1400, VLESS_UDP_PAYLOAD_MAX};
	for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
		size_t n = 0;
		for (int rep = 0; rep < 2; rep++) {
			assert_int_equal(vless_udp_encode(lens[k], stream + n, 2), VLESS_UDP_HEADER_LEN);
			n += VLESS_UDP_HEADER_LEN;
			memset(stream + n, 'a' + rep, lens[k]);
			n += lens[k];
		}
		size_t one = n / 2;
		for (size_t p = 0; p < one; p++) {
			size_t plen = 77;
			assert_int_equal(vless_udp_decode(stream, p, &plen), VLESS_UDP_NEED_MORE);
			assert_int_equal(plen, 77);
		}
		size_t plen;
		assert_int_equal(vless_udp_decode(stream, n, &plen), one);
		assert_int_equal(plen, lens[k]);
		assert_int_equal(vless_udp_decode(stream + one, n - one, &plen), one);
		if (plen)
			assert_int_equal(stream[one + VLESS_UDP_HEADER_LEN], 'b');
	}
	uint8_t hdr[2];
	assert_int_equal(vless_udp_encode(VLESS_UDP_PAYLOAD_MAX + 1, hdr, 2), PROTO_ERR_TOO_BIG);
	assert_int_equal(vless_udp_encode(1, hdr, 1), PROTO_ERR_TOO_BIG);
	size_t plen = 5;
	assert_int_equal(vless_udp_decode((const uint8_t[]){0x20, 0x01}, 2, &plen), PROTO_ERR_TOO_BIG);
	assert_int_equal(vless_udp_decode((const uint8_t[]){0xff, 0xff, 0}, 3, &plen),
	                 PROTO_ERR_TOO_BIG);
	assert_int_equal(plen, 5);
}

/* ---- the client layer ---- */

typedef struct wire {
	uint8_t down_data[1024];
	uint8_t up_data[1024];
	layer_buf down, up;
} wire;

static void wire_init(wire *w)
{
	w->down = (layer_buf){.data = w->down_data, .cap = sizeof w->down_data};
	w->up = (layer_buf){.data = w->up_data, .cap = sizeof w->up_data};
}

static void client_request_bytes(void **state)
{
	(void)state;
	addr_dest dom = {0};
	assert_int_equal(addr_dest_set_domain(&dom, "example.com", 11, 443), 0);
	layer *l = vless_client_new(USERS[0], &dom, false);
	assert_non_null(l);
	assert_string_equal(l->ops->name, "vless");
	wire w;
	wire_init(&w);
	assert_false(l->ops->ready(l));
	assert_int_equal(l->ops->start(l, &w.down), 0);
	assert_true(l->ops->ready(l));
	static const uint8_t want_tail[] = {0,   0x01, 0x01, 0xbb, 0x02, 11,  'e', 'x', 'a',
	                                    'm', 'p',  'l',  'e',  '.',  'c', 'o', 'm'};
	assert_int_equal(w.down.len, 1 + 16 + sizeof want_tail);
	assert_int_equal(w.down.data[0], 0);
	assert_memory_equal(w.down.data + 1, USERS[0], 16);
	assert_memory_equal(w.down.data + 17, want_tail, sizeof want_tail);
	l->ops->free(l);

	/* IPv4 and UDP: command 2, address type 1. */
	addr_dest v4 = {.kind = ADDR_IPV4, .port = 53, .u.v4 = {9, 9, 9, 9}};
	l = vless_client_new(USERS[1], &v4, true);
	wire_init(&w);
	assert_int_equal(l->ops->start(l, &w.down), 0);
	assert_int_equal(w.down.len, 17 + 1 + 1 + 2 + 1 + 4);
	assert_memory_equal(w.down.data + 17, ((const uint8_t[]){0, 0x02, 0, 53, 0x01, 9, 9, 9, 9}),
	                    9);
	l->ops->free(l);

	/* IPv6: address type 3. */
	addr_dest v6 = {.kind = ADDR_IPV6, .port = 80, .u.v6 = {[15] = 1}};
	l = vless_client_new(USERS[1], &v6, false);
	wire_init(&w);
	assert_int_equal(l->ops->start(l, &w.down), 0);
	assert_int_equal(w.down.len, 17 + 5 + 16);
	assert_int_equal(w.down.data[21], 0x03);
	l->ops->free(l);

	addr_dest unset = {0};
	assert_null(vless_client_new(USERS[0], &unset, false));
}

/* The response header is skipped once, however it arrives. */
static void client_response_header(void **state)
{
	(void)state;
	addr_dest v4 = {.kind = ADDR_IPV4, .port = 80, .u.v4 = {1, 2, 3, 4}};
	static const uint8_t resp[] = {0, 3, 'a', 'd', 'd', 'H', 'T', 'T', 'P'};
	for (size_t cut = 0; cut <= sizeof resp; cut++) {
		layer *l = vless_client_new(USERS[0], &v4, false);
		wire w;
		wire_init(&w);
		assert_int_equal(l->ops->start(l, &w.down), 0);
		/* As the stack does: unconsumed bytes are offered again with more. */
		size_t held = 0;
		ssize_t r = l->ops->from_below(l, resp, cut, &w.up, &w.down);
		assert_true(r >= 0);
		held = (size_t)r;
		r = l->ops->from_below(l, resp + held, sizeof resp - held, &w.up, &w.down);
		assert_int_equal((size_t)r, sizeof resp - held);
		assert_int_equal(w.up.len, 4);
		assert_memory_equal(w.up.data, "HTTP", 4);
		/* Later bytes that look like a header are payload. */
		assert_int_equal(l->ops->from_below(l, (const uint8_t *)"\0\0", 2, &w.up, &w.down), 2);
		assert_int_equal(w.up.len, 6);
		l->ops->free(l);
	}

	layer *l = vless_client_new(USERS[0], &v4, false);
	wire w;
	wire_init(&w);
	assert_int_equal(l->ops->start(l, &w.down), 0);
	assert_int_equal(l->ops->from_below(l, (const uint8_t[]){1, 0}, 2, &w.up, &w.down),
	                 LAYER_ERR_PROTO);
	assert_false(l->ops->passthrough(l));
	assert_string_equal(l->ops->error(l), "vless: unexpected response version");
	assert_false(l->ops->ready(l));
	assert_int_equal(l->ops->from_above(l, (const uint8_t *)"x", 1, &w.down), LAYER_ERR_PROTO);
	l->ops->free(l);
}

/* The layer is a pass-through once its request is all out and the
 * response header is through, and not before: a header cut anywhere, a
 * request held back by a small buffer below. */
static void client_passthrough(void **state)
{
	(void)state;
	addr_dest v4 = {.kind = ADDR_IPV4, .port = 80, .u.v4 = {1, 2, 3, 4}};
	static const uint8_t resp[] = {0, 2, 'a', 'b', 'x'};
	for (size_t cut = 0; cut < 4; cut++) {
		layer *l = vless_client_new(USERS[0], &v4, false);
		wire w;
		wire_init(&w);
		assert_false(l->ops->passthrough(l));
		assert_int_equal(l->ops->start(l, &w.down), 0);
		assert_true(l->ops->ready(l));
		assert_false(l->ops->passthrough(l)); /* no response yet */
		ssize_t r = l->ops->from_below(l, resp, cut, &w.up, &w.down);
		assert_int_equal(r, 0);
		assert_false(l->ops->passthrough(l));
		assert_int_equal(l->ops->from_below(l, resp, sizeof resp, &w.up, &w.down), sizeof resp);
		assert_true(l->ops->passthrough(l));
		assert_int_equal(w.up.len, 1);
		l->ops->free(l);
	}

	/* 8 bytes of room below: the request waits in the layer, and a
	 * response that came early waits for it. */
	layer *l = vless_client_new(USERS[0], &v4, false);
	uint8_t small[8];
	layer_buf down = {.data = small, .cap = sizeof small}, up = {0};
	static const uint8_t bare[] = {0, 0}; /* the header without addons */
	assert_int_equal(l->ops->start(l, &down), 0);
	assert_int_equal(l->ops->from_below(l, bare, 2, &up, &down), 0);
	assert_false(l->ops->passthrough(l));
	for (int i = 0; i < 10; i++) {
		down.len = 0;
		assert_int_equal(l->ops->from_above(l, NULL, 0, &down), 0);
	}
	assert_false(l->ops->passthrough(l)); /* out, but the header is not taken yet */
	assert_int_equal(l->ops->from_below(l, bare, 2, &up, &down), 2);
	assert_true(l->ops->passthrough(l));
	l->ops->free(l);
}

/* Client request into the server core, the core's response back into the
 * client. */
static void client_server_round_trip(void **state)
{
	(void)state;
	addr_dest dests[3] = {{.kind = ADDR_IPV4, .port = 1, .u.v4 = {192, 0, 2, 1}},
	                      {.kind = ADDR_IPV6, .port = 65535, .u.v6 = {0xfe, 0x80, [15] = 1}},
	                      {0}};
	assert_int_equal(addr_dest_set_domain(&dests[2], "a.b", 3, 8443), 0);
	for (size_t d = 0; d < 3; d++)
		for (int udp = 0; udp < 2; udp++) {
			layer *l = vless_client_new(USERS[1], &dests[d], udp);
			assert_non_null(l);
			wire w;
			wire_init(&w);
			assert_int_equal(l->ops->start(l, &w.down), 0);
			size_t req = w.down.len;
			assert_int_equal(l->ops->from_above(l, (const uint8_t *)"up", 2, &w.down), 2);

			vless_server s;
			proto_out out;
			proto_event ev;
			init_core(&s, 2);
			assert_int_equal(vless_server_feed(&s, w.down.data, w.down.len, &out, &ev), req);
			assert_int_equal(ev.kind, PROTO_EV_OPEN);
			assert_int_equal(ev.user, 1);
			assert_int_equal(ev.cmd, udp ? PROTO_CMD_UDP_ASSOCIATE : PROTO_CMD_CONNECT);
			assert_int_equal(ev.dest.network, udp ? ADDR_UDP : ADDR_TCP);
			char a[ADDR_TEXT_MAX], b[ADDR_TEXT_MAX];
			addr_dest_format(&ev.dest, a, sizeof a);
			addr_dest_format(&dests[d], b, sizeof b);
			assert_string_equal(a, b);
			assert_memory_equal(w.down.data + req, "up", 2);

			assert_int_equal(vless_server_opened(&s, &out), 0);
			memcpy(out.buf + out.len, "down", 4);
			assert_int_equal(l->ops->from_below(l, out.buf, out.len + 4, &w.up, &w.down),
			                 out.len + 4);
			assert_int_equal(w.up.len, 4);
			assert_memory_equal(w.up.data, "down", 4);
			l->ops->free(l);
		}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(uuid_parse),
		cmocka_unit_test(feed_table),
		cmocka_unit_test(header_bounds),
		cmocka_unit_test(udp_framing),
		cmocka_unit_test(client_request_bytes),
		cmocka_unit_test(client_response_header),
		cmocka_unit_test(client_passthrough),
		cmocka_unit_test(client_server_round_trip),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
