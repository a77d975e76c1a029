/* test_trojan.c - the Trojan server core fed whole, as growing prefixes and cut in two; its fallback; the UDP codec; the client layer against the core. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proto/trojan.h"

/* A byte string and its length, for table entries. */
#define B(...) (const uint8_t[]){__VA_ARGS__}, sizeof((const uint8_t[]){__VA_ARGS__})
#define EMPTY (const uint8_t *)"", 0

/* SHA-224 test vectors: FIPS 180-2 appendix for "abc", and the empty
 * string; "password" as `printf password | openssl dgst -sha224` gives. */
static void password_hash_vectors(void **state)
{
	(void)state;
	static const struct {
		const char *password, *hex;
	} v[] = {
		{"abc", "23097d223405d8228642a477bda255b32aadbce4bda0b3f7e36c9da7"},
		{"", "d14a028c2a3a2bc9476102bb288234c415a2b01f828ea62ac5b3e42f"},
		{"password", "d63dc919e201d7bc4c825630d2cf25fdc93d4b2f0d46706d29038d01"},
	};
	for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
		char out[TROJAN_HASH_LEN];
		assert_int_equal(trojan_password_hash(v[i].password, out), 0);
		assert_memory_equal(out, v[i].hex, TROJAN_HASH_LEN);
	}
}

/* The accounts: hashes of "secret" (alice) and "hunter2" (bob). */
static uint8_t HASHES[2][TROJAN_HASH_LEN];
static uint8_t WRONG[TROJAN_HASH_LEN]; /* hash of "nope" */

static int setup_hashes(void **state)
{
	(void)state;
	if (trojan_password_hash("secret", (char *)HASHES[0]) ||
	    trojan_password_hash("hunter2", (char *)HASHES[1]) ||
	    trojan_password_hash("nope", (char *)WRONG))
		return -1;
	return 0;
}

enum prefix { P_NONE, P_ALICE, P_BOB, P_WRONG };

typedef struct feed_case {
	const char *name;
	int users;          /* accounts configured: 0 or 2 */
	enum prefix prefix; /* a hash written before tail */
	const uint8_t *tail;
	size_t tail_len;
	ssize_t ret;   /* bytes consumed */
	size_t decide; /* the shortest prefix that decides; 0: none does */
	proto_event_kind kind;
	proto_cmd cmd;
	const char *dest; /* PROTO_EV_OPEN: addr_dest_format of ev.dest */
	addr_network network;
	int user;
	const char *reason;
} feed_case;

#define H TROJAN_HASH_LEN
#define CRLF '\r', '\n'
#define V4_80 0x01, 127, 0, 0, 1, 0x00, 0x50
#define EXAMPLE_COM 'e', 'x', 'a', 'm', 'p', 'l', 'e', '.', 'c', 'o', 'm'

static const char *const R_NOT = "trojan: not a trojan request";
static const char *const R_PASSWORD = "trojan: unknown password";
static const char *const R_CRLF = "trojan: malformed request: missing CRLF";
static const char *const R_COMMAND = "trojan: malformed request: unknown command";
static const char *const R_ADDRESS = "trojan: malformed request: bad address";

static const feed_case CASES[] = {
	{"nothing yet", 2, P_NONE, EMPTY, 0, 0, PROTO_EV_NONE, 0, NULL, 0, -1, NULL},
	{"CONNECT to IPv4, payload after", 2, P_ALICE, B(CRLF, 0x01, V4_80, CRLF, 'h', 'i'), H + 12,
	 H + 12, PROTO_EV_OPEN, PROTO_CMD_CONNECT, "127.0.0.1:80", ADDR_TCP, 0, NULL},
	{"CONNECT to a domain by the second account", 2, P_BOB,
	 B(CRLF, 0x01, 0x03, 11, EXAMPLE_COM, 0x01, 0xbb, CRLF), H + 20, H + 20, PROTO_EV_OPEN,
	 PROTO_CMD_CONNECT, "example.com:443", ADDR_TCP, 1, NULL},
	{"CONNECT to IPv6", 2, P_ALICE,
	 B(CRLF, 0x01, 0x04, 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0x00, 0x35,
	   CRLF),
	 H + 24, H + 24, PROTO_EV_OPEN, PROTO_CMD_CONNECT, "[2001:db8::1]:53", ADDR_TCP, 0, NULL},
	{"UDP ASSOCIATE", 2, P_ALICE, B(CRLF, 0x03, V4_80, CRLF, 0x01), H + 12, H + 12, PROTO_EV_OPEN,
	 PROTO_CMD_UDP_ASSOCIATE, "127.0.0.1:80", ADDR_UDP, 0, NULL},
	{"hash only: need more", 2, P_ALICE, EMPTY, 0, 0, PROTO_EV_NONE, 0, NULL, 0, -1, NULL},
	{"truncated before the last CRLF", 2, P_ALICE, B(CRLF, 0x01, V4_80, '\r'), 0, 0, PROTO_EV_NONE,
	 0, NULL, 0, -1, NULL},
	{"truncated in the domain", 2, P_ALICE, B(CRLF, 0x01, 0x03, 11, 'e', 'x'), 0, 0,
	 PROTO_EV_NONE, 0, NULL, 0, -1, NULL},
	{"wrong password", 2, P_WRONG, B(CRLF, 0x01, V4_80, CRLF), 0, H, PROTO_EV_CLOSE, 0, NULL, 0,
	 -1, R_PASSWORD},
	{"no accounts: every request falls back", 0, P_ALICE, B(CRLF, 0x01, V4_80, CRLF), 0, H,
	 PROTO_EV_CLOSE, 0, NULL, 0, -1, R_PASSWORD},
	{"an HTTP request falls back at its first byte", 2, P_NONE,
	 B('G', 'E', 'T', ' ', '/', ' ', 'H', 'T', 'T', 'P', '/', '1', '.', '1', CRLF, CRLF), 0, 1,
	 PROTO_EV_CLOSE, 0, NULL, 0, -1, R_NOT},
	{"a TLS ClientHello falls back at its first byte", 2, P_NONE,
	 B(0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03), 0, 1, PROTO_EV_CLOSE, 0,
	 NULL, 0, -1, R_NOT},
	{"hex digits, then not", 2, P_NONE, B('a', 'b', 'c', '1', '2', 'z', '3'), 0, 6,
	 PROTO_EV_CLOSE, 0, NULL, 0, -1, R_NOT},
	{"LF CR after the hash", 2, P_ALICE, B('\n', '\r', 0x01, V4_80, CRLF), 0, H + 1,
	 PROTO_EV_CLOSE, 0, NULL, 0, -1, R_CRLF},
	{"CR CR after the hash", 2, P_ALICE, B('\r', '\r', 0x01, V4_80, CRLF), 0, H + 2,
	 PROTO_EV_CLOSE, 0, NULL, 0, -1, R_CRLF},
	{"BIND is not a Trojan command", 2, P_ALICE, B(CRLF, 0x02, V4_80, CRLF), 0, H + 3,
	 PROTO_EV_CLOSE, 0, NULL, 0, -1, R_COMMAND},
	{"trojan-go's mux command is refused", 2, P_ALICE, B(CRLF, 0x7f, V4_80, CRLF), 0, H + 3,
	 PROTO_EV_CLOSE, 0, NULL, 0, -1, R_COMMAND},
	{"unknown address type", 2, P_ALICE, B(CRLF, 0x01, 0x05, 1, 2, 3, 4, 0, 80, CRLF), 0, H + 4,
	 PROTO_EV_CLOSE, 0, NULL, 0, -1, R_ADDRESS},
	{"empty domain", 2, P_ALICE, B(CRLF, 0x01, 0x03, 0, 0, 80, CRLF), 0, H + 5, PROTO_EV_CLOSE, 0,
	 NULL, 0, -1, R_ADDRESS},
	{"domain holding a NUL", 2, P_ALICE, B(CRLF, 0x01, 0x03, 2, 'a', 0, 0, 80, CRLF), 0, H + 9,
	 PROTO_EV_CLOSE, 0, NULL, 0, -1, R_ADDRESS},
	{"no CRLF after the address", 2, P_ALICE, B(CRLF, 0x01, V4_80, 'x', 'y'), 0, H + 11,
	 PROTO_EV_CLOSE, 0, NULL, 0, -1, R_CRLF},
};

static void build(const feed_case *c, uint8_t *in, size_t *len)
{
	size_t n = 0;
	if (c->prefix == P_ALICE)
		memcpy(in, HASHES[0], H), n = H;
	else if (c->prefix == P_BOB)
		memcpy(in, HASHES[1], H), n = H;
	else if (c->prefix == P_WRONG)
		memcpy(in, WRONG, H), n = H;
	memcpy(in + n, c->tail, c->tail_len);
	*len = n + c->tail_len;
}

static void init_core(trojan_server *s, int users)
{
	trojan_server_init(s, users ? (const uint8_t(*)[TROJAN_HASH_LEN])HASHES : NULL,
	                   (size_t)users);
}

static void check_result(const feed_case *c, ssize_t ret, const proto_event *ev,
                         const proto_out *out, const trojan_server *s)
{
	char dest[ADDR_TEXT_MAX];
	assert_int_equal(ret, c->ret);
	assert_int_equal(out->len, 0); /* Trojan never answers */
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
	/* A rejection consumes nothing and asks for the fallback. */
	assert_int_equal(trojan_server_wants_fallback(s), c->kind == PROTO_EV_CLOSE);
}

/* After a decision the core takes nothing more. */
static void check_done(trojan_server *s)
{
	proto_out out;
	proto_event ev;
	uint8_t byte = 'a';
	trojan_state before = s->state;
	assert_int_equal(trojan_server_feed(s, &byte, 1, &out, &ev), PROTO_ERR_STATE);
	assert_int_equal(out.len, 0);
	assert_int_equal(ev.kind, PROTO_EV_CLOSE);
	assert_string_equal(ev.reason, "trojan: called after the request was decided");
	assert_int_equal(trojan_server_timeout(s, &ev), PROTO_ERR_STATE);
	assert_int_equal(s->state, before);
}

static void run_case(const feed_case *c)
{
	uint8_t in[2 * TROJAN_REQUEST_MAX];
	size_t len;
	trojan_server s;
	proto_out out;
	proto_event ev;
	ssize_t n;

	print_message("%s\n", c->name);
	build(c, in, &len);

	/* Whole. */
	init_core(&s, c->users);
	n = trojan_server_feed(&s, in, len, &out, &ev);
	check_result(c, n, &ev, &out, &s);
	if (c->kind != PROTO_EV_NONE)
		check_done(&s);

	/* As the shell feeds it: every prefix in turn, one more byte each. */
	init_core(&s, c->users);
	size_t k = 0;
	do {
		n = trojan_server_feed(&s, in, k, &out, &ev);
		if (ev.kind != PROTO_EV_NONE)
			break;
		assert_int_equal(n, 0);
	} while (++k <= len);
	if (c->kind == PROTO_EV_NONE) {
		n = trojan_server_feed(&s, in, len, &out, &ev);
		check_result(c, n, &ev, &out, &s);
	} else {
		assert_int_equal(k, c->decide);
		check_result(c, n, &ev, &out, &s);
	}

	/* Two calls, the first with any prefix. */
	for (size_t cut = 0; cut <= len; cut++) {
		init_core(&s, c->users);
		n = trojan_server_feed(&s, in, cut, &out, &ev);
		if (ev.kind == PROTO_EV_NONE)
			n = trojan_server_feed(&s, in, len, &out, &ev);
		check_result(c, n, &ev, &out, &s);
	}
}

static void feed_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++)
		run_case(&CASES[i]);
}

/* An uppercase hash is not what trojan_password_hash writes: the first
 * uppercase digit decides. */
static void uppercase_hash_falls_back(void **state)
{
	(void)state;
	uint8_t in[H + 11];
	memcpy(in, HASHES[0], H);
	size_t first = H;
	for (size_t i = 0; i < H; i++)
		if (in[i] >= 'a' && in[i] <= 'f') {
			in[i] = (uint8_t)(in[i] - 'a' + 'A');
			if (first == H)
				first = i;
		}
	assert_true(first < H);
	memcpy(in + H, (const uint8_t[]){'\r', '\n', 0x01, V4_80, '\r', '\n'}, 11);
	trojan_server s;
	proto_out out;
	proto_event ev;
	init_core(&s, 2);
	assert_int_equal(trojan_server_feed(&s, in, first, &out, &ev), 0);
	assert_int_equal(ev.kind, PROTO_EV_NONE);
	assert_int_equal(trojan_server_feed(&s, in, first + 1, &out, &ev), 0);
	assert_int_equal(ev.kind, PROTO_EV_CLOSE);
	assert_string_equal(ev.reason, R_NOT);
	assert_true(trojan_server_wants_fallback(&s));
}

/* The longest request is TROJAN_REQUEST_MAX; one more byte where its CRLF
 * belongs decides at the bound. */
static void header_bounds(void **state)
{
	(void)state;
	uint8_t in[TROJAN_REQUEST_MAX + 8];
	size_t n = 0;
	memcpy(in, HASHES[1], H);
	n = H;
	in[n++] = '\r';
	in[n++] = '\n';
	in[n++] = 0x01;
	in[n++] = 0x03;
	in[n++] = 255;
	memset(in + n, 'd', 255);
	n += 255;
	in[n++] = 0x1f;
	in[n++] = 0x90;
	in[n++] = '\r';
	in[n++] = '\n';
	assert_int_equal(n, TROJAN_REQUEST_MAX);
	memcpy(in + n, "payload", 7);

	trojan_server s;
	proto_out out;
	proto_event ev;
	init_core(&s, 2);
	assert_int_equal(trojan_server_feed(&s, in, n + 7, &out, &ev), TROJAN_REQUEST_MAX);
	assert_int_equal(ev.kind, PROTO_EV_OPEN);
	assert_int_equal(ev.user, 1);
	assert_int_equal(ev.dest.kind, ADDR_DOMAIN);
	assert_int_equal(ev.dest.u.domain.len, 255);
	assert_int_equal(ev.dest.port, 8080);

	/* Oversize: the domain is followed by more bytes instead of CRLF. */
	in[n - 2] = 'x';
	init_core(&s, 2);
	assert_int_equal(trojan_server_feed(&s, in, n + 7, &out, &ev), 0);
	assert_int_equal(ev.kind, PROTO_EV_CLOSE);
	assert_string_equal(ev.reason, R_CRLF);
	assert_true(trojan_server_wants_fallback(&s));
}

/* A peer that stops before a decision goes to the fallback at the shell's
 * deadline; a core that accepted does not. */
static void timeout_and_state(void **state)
{
	(void)state;
	trojan_server s;
	proto_out out;
	proto_event ev;
	init_core(&s, 2);
	assert_false(trojan_server_wants_fallback(&s));
	assert_int_equal(trojan_server_feed(&s, HASHES[0], 30, &out, &ev), 0);
	assert_int_equal(ev.kind, PROTO_EV_NONE);
	assert_false(trojan_server_wants_fallback(&s));
	assert_int_equal(trojan_server_timeout(&s, &ev), 0);
	assert_int_equal(ev.kind, PROTO_EV_CLOSE);
	assert_string_equal(ev.reason, "trojan: no complete request before the handshake deadline");
	assert_true(trojan_server_wants_fallback(&s));
	check_done(&s);

	/* A zeroed core is a valid start state, with no accounts. */
	trojan_server z = {0};
	assert_int_equal(trojan_server_feed(&z, (const uint8_t *)"GET", 3, &out, &ev), 0);
	assert_int_equal(ev.kind, PROTO_EV_CLOSE);
	assert_true(trojan_server_wants_fallback(&z));
}

/* ---- UDP packets ---- */

static void udp_round_trip(void **state)
{
	(void)state;
	addr_dest dests[3] = {{.kind = ADDR_IPV4, .network = ADDR_UDP, .port = 53, .u.v4 = {8, 8, 8, 8}},
	                      {.kind = ADDR_IPV6, .network = ADDR_UDP, .port = 443, .u.v6 = {0x20, 1}},
	                      {.network = ADDR_UDP}};
	assert_int_equal(addr_dest_set_domain(&dests[2], "example.com", 11, 5353), 0);
	dests[2].network = ADDR_UDP;
	static const size_t lens[] = {0, 1, 512, TROJAN_UDP_PAYLOAD_MAX};
	static uint8_t stream[2 * TROJAN_UDP_FRAME_MAX];

	for (size_t d = 0; d < 3; d++)
		for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
			/* Two packets back to back on the stream. */
			size_t n = 0;
			for (int rep = 0; rep < 2; rep++) {
				ssize_t h = trojan_udp_encode(&dests[d], lens[k], stream + n,
				                              sizeof stream - n);
				assert_true(h > 0 && h <= TROJAN_UDP_HEADER_MAX);
				n += (size_t)h;
				memset(stream + n, 'A' + rep, lens[k]);
				n += lens[k];
			}
			size_t one = n / 2;
			/* Every strict prefix of the first packet needs more. */
			for (size_t p = 0; p < one; p++) {
				addr_dest got = {.port = 1};
				size_t off = 99, plen = 99;
				assert_int_equal(trojan_udp_decode(stream, p, &got, &off, &plen),
				                 TROJAN_UDP_NEED_MORE);
				assert_int_equal(got.port, 1); /* untouched */
				assert_int_equal(off, 99);
			}
			size_t at = 0;
			for (int rep = 0; rep < 2; rep++) {
				addr_dest got;
				size_t off, plen;
				ssize_t r = trojan_udp_decode(stream + at, n - at, &got, &off, &plen);
				assert_int_equal(r, one);
				assert_int_equal(plen, lens[k]);
				assert_int_equal(off + plen, one);
				assert_int_equal(got.network, ADDR_UDP);
				char a[ADDR_TEXT_MAX], b[ADDR_TEXT_MAX];
				addr_dest_format(&got, a, sizeof a);
				addr_dest_format(&dests[d], b, sizeof b);
				assert_string_equal(a, b);
				if (plen)
					assert_int_equal(stream[at + off], 'A' + rep);
				at += (size_t)r;
			}
			assert_int_equal(at, n);
		}
}

static void udp_refusals(void **state)
{
	(void)state;
	addr_dest v4 = {.kind = ADDR_IPV4, .network = ADDR_UDP, .port = 53, .u.v4 = {1, 1, 1, 1}};
	addr_dest unset = {0};
	uint8_t hdr[TROJAN_UDP_HEADER_MAX];
	assert_int_equal(trojan_udp_encode(&unset, 1, hdr, sizeof hdr), PROTO_ERR_MALFORMED);
	assert_int_equal(trojan_udp_encode(&v4, TROJAN_UDP_PAYLOAD_MAX + 1, hdr, sizeof hdr),
	                 PROTO_ERR_TOO_BIG);
	assert_int_equal(trojan_udp_encode(&v4, 1, hdr, 10), PROTO_ERR_TOO_BIG); /* needs 11 */
	assert_int_equal(trojan_udp_encode(&v4, 1, hdr, 11), 11);

	static const struct {
		const char *name;
		uint8_t in[16];
		size_t len;
		ssize_t ret;
	} bad[] = {
		{"unknown ATYP", {0x02, 1, 2, 3, 4}, 5, PROTO_ERR_MALFORMED},
		{"empty domain", {0x03, 0}, 2, PROTO_ERR_MALFORMED},
		{"domain holding a NUL", {0x03, 2, 'a', 0, 0, 53}, 6, PROTO_ERR_MALFORMED},
		{"Length over the bound", {0x01, 1, 1, 1, 1, 0, 53, 0x20, 0x01}, 9, PROTO_ERR_TOO_BIG},
		{"LF where CR belongs", {0x01, 1, 1, 1, 1, 0, 53, 0, 1, '\n'}, 10, PROTO_ERR_MALFORMED},
		{"CR CR", {0x01, 1, 1, 1, 1, 0, 53, 0, 1, '\r', '\r'}, 11, PROTO_ERR_MALFORMED},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		addr_dest d = {.port = 7};
		size_t off = 5, plen = 5;
		print_message("%s\n", bad[i].name);
		assert_int_equal(trojan_udp_decode(bad[i].in, bad[i].len, &d, &off, &plen), bad[i].ret);
		assert_int_equal(d.port, 7);
		assert_int_equal(off, 5);
	}
}

/* ---- the client layer ---- */

typedef struct wire {
	uint8_t down_data[4096];
	uint8_t up_data[4096];
	layer_buf down, up;
} wire;

static void wire_init(wire *w, size_t down_cap)
{
	w->down = (layer_buf){.data = w->down_data, .cap = down_cap};
	w->up = (layer_buf){.data = w->up_data, .cap = sizeof w->up_data};
}

static void client_request_bytes(void **state)
{
	(void)state;
	addr_dest v4 = {.kind = ADDR_IPV4, .port = 80, .u.v4 = {127, 0, 0, 1}};
	layer *l = trojan_client_new(HASHES[0], &v4);
	assert_non_null(l);
	assert_string_equal(l->ops->name, "trojan");
	assert_false(l->ops->ready(l));
	wire w;
	wire_init(&w, sizeof w.down_data);
	assert_int_equal(l->ops->from_above(l, (const uint8_t *)"x", 1, &w.down), 0);
	assert_int_equal(l->ops->start(l, &w.down), 0);
	assert_true(l->ops->ready(l));
	assert_int_equal(w.down.len, H + 12);
	assert_memory_equal(w.down.data, HASHES[0], H);
	assert_memory_equal(w.down.data + H,
	                    ((const uint8_t[]){'\r', '\n', 0x01, 0x01, 127, 0, 0, 1, 0, 80, '\r', '\n'}),
	                    12);
	/* Then everything passes through unchanged. */
	assert_int_equal(l->ops->from_above(l, (const uint8_t *)"GET", 3, &w.down), 3);
	assert_memory_equal(w.down.data + H + 12, "GET", 3);
	assert_int_equal(l->ops->from_below(l, (const uint8_t *)"HTTP", 4, &w.up, &w.down), 4);
	assert_int_equal(w.up.len, 4);
	assert_memory_equal(w.up.data, "HTTP", 4);
	assert_null(l->ops->error(l));
	l->ops->free(l);

	/* A UDP destination asks for UDP ASSOCIATE. */
	addr_dest dom = {0};
	assert_int_equal(addr_dest_set_domain(&dom, "dns.example", 11, 53), 0);
	dom.network = ADDR_UDP;
	l = trojan_client_new(HASHES[1], &dom);
	assert_non_null(l);
	wire_init(&w, sizeof w.down_data);
	assert_int_equal(l->ops->start(l, &w.down), 0);
	assert_int_equal(w.down.len, H + 2 + 1 + 2 + 11 + 2 + 2);
	assert_int_equal(w.down.data[H + 2], 0x03);
	assert_int_equal(w.down.data[H + 3], 0x03);
	l->ops->free(l);

	addr_dest unset = {0};
	assert_null(trojan_client_new(HASHES[0], &unset));
}

/* A small buffer below: the request goes out in pieces, and app bytes
 * wait until all of it has. */
static void client_small_buffer(void **state)
{
	(void)state;
	addr_dest v4 = {.kind = ADDR_IPV4, .port = 80, .u.v4 = {10, 0, 0, 1}};
	layer *l = trojan_client_new(HASHES[0], &v4);
	assert_non_null(l);
	uint8_t sent[256];
	size_t n_sent = 0;
	wire w;
	wire_init(&w, 7);
	assert_false(l->ops->passthrough(l));
	assert_int_equal(l->ops->start(l, &w.down), 0);
	assert_int_equal(w.down.len, 7);
	/* ready, but the rest of the request is still the layer's to send */
	assert_true(l->ops->ready(l));
	assert_false(l->ops->passthrough(l));
	memcpy(sent, w.down.data, 7);
	n_sent = 7;
	size_t app = 0; /* app bytes taken: only once the request is all out */
	for (int i = 0; i < 20 && app < 3; i++) {
		wire_init(&w, 7);
		ssize_t r = l->ops->from_above(l, (const uint8_t *)"app" + app, 3 - app, &w.down);
		assert_true(r >= 0);
		if (r > 0)
			assert_true(n_sent + w.down.len - (size_t)r >= H + 12);
		memcpy(sent + n_sent, w.down.data, w.down.len);
		n_sent += w.down.len;
		app += (size_t)r;
	}
	assert_int_equal(app, 3);
	assert_true(l->ops->passthrough(l)); /* the request is out: Trojan answers nothing */
	assert_int_equal(n_sent, H + 12 + 3);
	assert_memory_equal(sent + H + 12, "app", 3);

	/* The server core reads what the client wrote. */
	trojan_server s;
	proto_out out;
	proto_event ev;
	init_core(&s, 2);
	assert_int_equal(trojan_server_feed(&s, sent, n_sent, &out, &ev), H + 12);
	assert_int_equal(ev.kind, PROTO_EV_OPEN);
	assert_int_equal(ev.user, 0);
	assert_int_equal(ev.cmd, PROTO_CMD_CONNECT);
	l->ops->free(l);
}

/* Client output fed to the server core, for every address kind and both
 * commands. */
static void client_server_round_trip(void **state)
{
	(void)state;
	addr_dest dests[3] = {{.kind = ADDR_IPV4, .port = 1, .u.v4 = {192, 0, 2, 1}},
	                      {.kind = ADDR_IPV6, .port = 65535, .u.v6 = {0xfe, 0x80, [15] = 1}},
	                      {0}};
	assert_int_equal(addr_dest_set_domain(&dests[2], "a.b", 3, 8443), 0);
	for (size_t d = 0; d < 3; d++)
		for (int udp = 0; udp < 2; udp++)
			for (int user = 0; user < 2; user++) {
				addr_dest dest = dests[d];
				dest.network = udp ? ADDR_UDP : ADDR_TCP;
				layer *l = trojan_client_new(HASHES[user], &dest);
				assert_non_null(l);
				wire w;
				wire_init(&w, sizeof w.down_data);
				assert_int_equal(l->ops->start(l, &w.down), 0);
				size_t req = w.down.len;
				assert_int_equal(l->ops->from_above(l, (const uint8_t *)"xyz", 3, &w.down), 3);

				trojan_server s;
				proto_out out;
				proto_event ev;
				init_core(&s, 2);
				assert_int_equal(trojan_server_feed(&s, w.down.data, w.down.len, &out, &ev),
				                 req);
				assert_int_equal(ev.kind, PROTO_EV_OPEN);
				assert_int_equal(ev.user, user);
				assert_int_equal(ev.cmd, udp ? PROTO_CMD_UDP_ASSOCIATE : PROTO_CMD_CONNECT);
				assert_int_equal(ev.dest.network, dest.network);
				char a[ADDR_TEXT_MAX], b[ADDR_TEXT_MAX];
				addr_dest_format(&ev.dest, a, sizeof a);
				addr_dest_format(&dest, b, sizeof b);
				assert_string_equal(a, b);
				assert_memory_equal(w.down.data + req, "xyz", 3);
				l->ops->free(l);
			}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(password_hash_vectors),
		cmocka_unit_test(feed_table),
		cmocka_unit_test(uppercase_hash_falls_back),
		cmocka_unit_test(header_bounds),
		cmocka_unit_test(timeout_and_state),
		cmocka_unit_test(udp_round_trip),
		cmocka_unit_test(udp_refusals),
		cmocka_unit_test(client_request_bytes),
		cmocka_unit_test(client_small_buffer),
		cmocka_unit_test(client_server_round_trip),
	};
	return cmocka_run_group_tests(tests, setup_hashes, NULL);
}
