/* test_mux.c - Mux.Cool: hand-written frame vectors, the decoder on every prefix, round trips, and the client's and server's sub-flow tables. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proto/mux.h"

#define B(...) (const uint8_t[]){__VA_ARGS__}, sizeof((const uint8_t[]){__VA_ARGS__})
#define EXAMPLE_COM 'e', 'x', 'a', 'm', 'p', 'l', 'e', '.', 'c', 'o', 'm'
#define V6_DOC 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1 /* 2001:db8::1 */

/* The vectors below were written by hand from the format in mux.h:
 *
 *   MetaLen(2) | ID(2) Status(1) Option(1) [Network(1) Port(2) AddrType(1) Address]
 *              | [DataLen(2) Data]
 *
 * Status 01 New, 02 Keep, 03 End, 04 KeepAlive; Option 01 data follows,
 * 02 error; Network 01 TCP, 02 UDP; AddrType 01 IPv4, 02 domain, 03 IPv6. */

static addr_dest dest(const char *text, addr_network net)
{
	addr_dest d;
	assert_int_equal(addr_dest_parse(&d, text), 0);
	d.network = net;
	return d;
}

static void expect_bytes(const uint8_t *got, ssize_t n, const uint8_t *want, size_t want_len)
{
	assert_int_equal(n, (ssize_t)want_len);
	assert_memory_equal(got, want, want_len);
}

static void encode_vectors(void **state)
{
	(void)state;
	uint8_t out[MUX_FRAME_MAX];
	addr_dest d;

	/* New, id 1, TCP to 1.2.3.4:80, no data: metadata is 2+1+1+1+2+1+4 = 12. */
	d = dest("1.2.3.4:80", ADDR_TCP);
	expect_bytes(out, mux_encode_new(1, &d, NULL, 0, out, sizeof out),
	             B(0x00, 0x0c,             /* MetaLen 12 */
	               0x00, 0x01,             /* ID 1 */
	               0x01, 0x00,             /* New, no option */
	               0x01,                   /* TCP */
	               0x00, 0x50,             /* port 80 */
	               0x01, 1, 2, 3, 4));     /* IPv4 1.2.3.4 */

	/* New, id 2, TCP to example.com:443 with "hi": metadata 2+1+1+1+2+1+1+11 = 20. */
	d = dest("example.com:443", ADDR_TCP);
	expect_bytes(out, mux_encode_new(2, &d, (const uint8_t *)"hi", 2, out, sizeof out),
	             B(0x00, 0x14,             /* MetaLen 20 */
	               0x00, 0x02, 0x01, 0x01, /* ID 2, New, data follows */
	               0x01, 0x01, 0xbb,       /* TCP, port 443 */
	               0x02, 11, EXAMPLE_COM,  /* domain, length 11 */
	               0x00, 0x02, 'h', 'i')); /* DataLen 2, data */

	/* New, id 3, UDP to [2001:db8::1]:53 with "q": metadata 2+1+1+1+2+1+16 = 24. */
	d = dest("[2001:db8::1]:53", ADDR_UDP);
	expect_bytes(out, mux_encode_new(3, &d, (const uint8_t *)"q", 1, out, sizeof out),
	             B(0x00, 0x18, 0x00, 0x03, 0x01, 0x01, /* MetaLen 24, ID 3, New, data */
	               0x02, 0x00, 0x35,                   /* UDP, port 53 */
	               0x03, V6_DOC,                       /* IPv6 */
	               0x00, 0x01, 'q'));

	/* Keep, id 1, stream bytes "abc". */
	size_t used = 0;
	expect_bytes(out,
	             (ssize_t)mux_encode_stream(1, (const uint8_t *)"abc", 3, out, sizeof out, &used),
	             B(0x00, 0x04, 0x00, 0x01, 0x02, 0x01, /* MetaLen 4, ID 1, Keep, data */
	               0x00, 0x03, 'a', 'b', 'c'));
	assert_int_equal(used, 3);

	/* Keep, id 3, a datagram without an address (v2fly's form). */
	expect_bytes(out, mux_encode_datagram(3, NULL, (const uint8_t *)"x", 1, out, sizeof out),
	             B(0x00, 0x04, 0x00, 0x03, 0x02, 0x01, 0x00, 0x01, 'x'));

	/* Keep, id 3, a datagram from 8.8.8.8:53 (Xray's form): metadata 4+1+2+1+4 = 12. */
	d = dest("8.8.8.8:53", ADDR_UDP);
	expect_bytes(out, mux_encode_datagram(3, &d, (const uint8_t *)"x", 1, out, sizeof out),
	             B(0x00, 0x0c, 0x00, 0x03, 0x02, 0x01, /* MetaLen 12, ID 3, Keep, data */
	               0x02, 0x00, 0x35,                   /* UDP, port 53 */
	               0x01, 8, 8, 8, 8,                   /* IPv4 */
	               0x00, 0x01, 'x'));

	/* End, id 1; End in error, id 0x1234; KeepAlive (id 0). */
	expect_bytes(out, mux_encode_end(1, false, out, sizeof out),
	             B(0x00, 0x04, 0x00, 0x01, 0x03, 0x00));
	expect_bytes(out, mux_encode_end(0x1234, true, out, sizeof out),
	             B(0x00, 0x04, 0x12, 0x34, 0x03, 0x02));
	expect_bytes(out, mux_encode_keepalive(out, sizeof out),
	             B(0x00, 0x04, 0x00, 0x00, 0x04, 0x00));
}

static void encode_errors(void **state)
{
	(void)state;
	uint8_t out[MUX_FRAME_MAX + 16], big[MUX_DATA_MAX + 1] = {0};
	addr_dest tcp = dest("1.2.3.4:80", ADDR_TCP), udp = dest("1.2.3.4:53", ADDR_UDP);
	addr_dest unset = {0}, nul = tcp;
	nul.kind = ADDR_DOMAIN;
	nul.u.domain.len = 3;
	memcpy(nul.u.domain.name, "a\0b", 4);

	memset(out, 0xee, sizeof out);
	assert_int_equal(mux_encode_new(1, &unset, NULL, 0, out, sizeof out), PROTO_ERR_MALFORMED);
	assert_int_equal(mux_encode_new(1, &nul, NULL, 0, out, sizeof out), PROTO_ERR_MALFORMED);
	assert_int_equal(mux_encode_datagram(1, &unset, big, 1, out, sizeof out),
	                 PROTO_ERR_MALFORMED);
	/* A TCP first payload up to MUX_DATA_MAX, a datagram up to MUX_UDP_PAYLOAD_MAX. */
	assert_int_equal(mux_encode_new(1, &tcp, big, MUX_DATA_MAX + 1, out, sizeof out),
	                 PROTO_ERR_TOO_BIG);
	assert_int_equal(mux_encode_new(1, &udp, big, MUX_UDP_PAYLOAD_MAX + 1, out, sizeof out),
	                 PROTO_ERR_TOO_BIG);
	assert_int_equal(mux_encode_datagram(1, NULL, big, MUX_UDP_PAYLOAD_MAX + 1, out, sizeof out),
	                 PROTO_ERR_TOO_BIG);
	/* One byte short of room. */
	assert_int_equal(mux_encode_new(1, &tcp, NULL, 0, out, 13), PROTO_ERR_TOO_BIG);
	assert_int_equal(mux_encode_datagram(1, NULL, big, 1, out, 8), PROTO_ERR_TOO_BIG);
	assert_int_equal(mux_encode_end(1, false, out, MUX_SHORT_FRAME_LEN - 1), PROTO_ERR_TOO_BIG);
	assert_int_equal(mux_encode_keepalive(out, MUX_SHORT_FRAME_LEN - 1), PROTO_ERR_TOO_BIG);
	for (size_t i = 0; i < sizeof out; i++)
		assert_int_equal(out[i], 0xee); /* out unchanged */

	assert_int_equal(mux_encode_new(1, &tcp, big, MUX_DATA_MAX, out, sizeof out),
	                 2 + 12 + 2 + MUX_DATA_MAX);
	assert_int_equal(mux_encode_new(1, &udp, big, MUX_UDP_PAYLOAD_MAX, out, sizeof out),
	                 2 + 12 + 2 + MUX_UDP_PAYLOAD_MAX);

	/* The longest header is a New to a 255-byte domain. */
	addr_dest longest;
	char name[ADDR_DOMAIN_MAX];
	memset(name, 'v', sizeof name);
	assert_int_equal(addr_dest_set_domain(&longest, name, sizeof name, 443), 0);
	assert_int_equal(mux_encode_new(1, &longest, big, 0, out, sizeof out), MUX_HEADER_MAX);
}

/* ---- the decoder, table-driven ---- */

typedef struct decode_case {
	const char *name;
	const uint8_t *in;
	size_t len;
	ssize_t ret;   /* the frame's length, or a PROTO_ERR_* */
	size_t decide; /* errors: the shortest prefix that gives the error */
	mux_event_kind kind;
	uint16_t id;
	const char *dest; /* NULL: unset */
	addr_network network;
	const char *data; /* NULL: no data part */
	size_t data_len;
	bool error;
	const char *reason;
} decode_case;

#define OK(n) (n), 0
#define ERR(e, at) (e), (at)

static const decode_case CASES[] = {
	{"New TCP to IPv4, no data",
	 B(0x00, 0x0c, 0x00, 0x01, 0x01, 0x00, 0x01, 0x00, 0x50, 0x01, 1, 2, 3, 4), OK(14),
	 MUX_EV_OPEN, 1, "1.2.3.4:80", ADDR_TCP, NULL, 0, false, NULL},
	{"New TCP to a domain with data",
	 B(0x00, 0x14, 0x00, 0x02, 0x01, 0x01, 0x01, 0x01, 0xbb, 0x02, 11, EXAMPLE_COM, 0x00, 0x02,
	   'h', 'i'),
	 OK(26), MUX_EV_OPEN, 2, "example.com:443", ADDR_TCP, "hi", 2, false, NULL},
	{"New UDP to IPv6 with a datagram",
	 B(0x00, 0x18, 0x00, 0x03, 0x01, 0x01, 0x02, 0x00, 0x35, 0x03, V6_DOC, 0x00, 0x01, 'q'),
	 OK(29), MUX_EV_OPEN, 3, "[2001:db8::1]:53", ADDR_UDP, "q", 1, false, NULL},
	{"New with an 8-byte GlobalID after the address (ignored, as v2fly does)",
	 B(0x00, 0x14, 0x00, 0x04, 0x01, 0x00, 0x02, 0x00, 0x35, 0x01, 9, 9, 9, 9, 1, 2, 3, 4, 5, 6,
	   7, 8),
	 OK(22), MUX_EV_OPEN, 4, "9.9.9.9:53", ADDR_UDP, NULL, 0, false, NULL},
	{"Keep with stream data", B(0x00, 0x04, 0x00, 0x01, 0x02, 0x01, 0x00, 0x03, 'a', 'b', 'c'),
	 OK(11), MUX_EV_DATA, 1, NULL, 0, "abc", 3, false, NULL},
	{"Keep with an empty data part (an empty datagram)",
	 B(0x00, 0x04, 0x00, 0x05, 0x02, 0x01, 0x00, 0x00), OK(8), MUX_EV_DATA, 5, NULL, 0, "", 0,
	 false, NULL},
	{"Keep without data says nothing", B(0x00, 0x04, 0x00, 0x01, 0x02, 0x00), OK(6), MUX_EV_NONE,
	 1, NULL, 0, NULL, 0, false, NULL},
	{"Keep with the datagram's address (Xray)",
	 B(0x00, 0x0c, 0x00, 0x03, 0x02, 0x01, 0x02, 0x00, 0x35, 0x01, 8, 8, 8, 8, 0x00, 0x01, 'x'),
	 OK(17), MUX_EV_DATA, 3, "8.8.8.8:53", ADDR_UDP, "x", 1, false, NULL},
	{"Keep with extra metadata that is not a UDP address (ignored)",
	 B(0x00, 0x06, 0x00, 0x03, 0x02, 0x01, 0x01, 0xff, 0x00, 0x01, 'x'), OK(11), MUX_EV_DATA, 3,
	 NULL, 0, "x", 1, false, NULL},
	{"End", B(0x00, 0x04, 0x00, 0x01, 0x03, 0x00), OK(6), MUX_EV_END, 1, NULL, 0, NULL, 0, false,
	 NULL},
	{"End in error", B(0x00, 0x04, 0x00, 0x02, 0x03, 0x02), OK(6), MUX_EV_END, 2, NULL, 0, NULL, 0,
	 true, NULL},
	{"End with data: the data is dropped",
	 B(0x00, 0x04, 0x00, 0x02, 0x03, 0x03, 0x00, 0x02, 'z', 'z'), OK(10), MUX_EV_END, 2, NULL, 0,
	 NULL, 0, true, NULL},
	{"KeepAlive with data: the data is dropped",
	 B(0x00, 0x04, 0xab, 0xcd, 0x04, 0x01, 0x00, 0x01, 'p'), OK(9), MUX_EV_KEEPALIVE, 0xabcd,
	 NULL, 0, NULL, 0, false, NULL},
	{"metadata over 512 bytes", B(0x02, 0x01, 0x00, 0x01, 0x02, 0x00),
	 ERR(PROTO_ERR_TOO_BIG, 2), MUX_EV_NONE, 0, NULL, 0, NULL, 0, false,
	 "mux: frame metadata longer than 512 bytes"},
	{"metadata under 4 bytes", B(0x00, 0x03, 0x00, 0x01, 0x02), ERR(PROTO_ERR_MALFORMED, 2),
	 MUX_EV_NONE, 0, NULL, 0, NULL, 0, false, "mux: frame metadata too short"},
	{"unknown status 5", B(0x00, 0x04, 0x00, 0x01, 0x05, 0x00), ERR(PROTO_ERR_MALFORMED, 6),
	 MUX_EV_NONE, 0, NULL, 0, NULL, 0, false, "mux: unknown frame status"},
	{"status 0", B(0x00, 0x04, 0x00, 0x01, 0x00, 0x00), ERR(PROTO_ERR_MALFORMED, 6), MUX_EV_NONE,
	 0, NULL, 0, NULL, 0, false, "mux: unknown frame status"},
	{"New shorter than 8 bytes of metadata",
	 B(0x00, 0x07, 0x00, 0x01, 0x01, 0x00, 0x01, 0x00, 0x50), ERR(PROTO_ERR_MALFORMED, 9),
	 MUX_EV_NONE, 0, NULL, 0, NULL, 0, false, "mux: frame metadata too short"},
	{"unknown network 3",
	 B(0x00, 0x0c, 0x00, 0x01, 0x01, 0x00, 0x03, 0x00, 0x50, 0x01, 1, 2, 3, 4),
	 ERR(PROTO_ERR_MALFORMED, 14), MUX_EV_NONE, 0, NULL, 0, NULL, 0, false,
	 "mux: unknown network type"},
	{"SOCKS's IPv6 type 4 is not Mux.Cool's",
	 B(0x00, 0x0c, 0x00, 0x01, 0x01, 0x00, 0x01, 0x00, 0x50, 0x04, 1, 2, 3, 4),
	 ERR(PROTO_ERR_MALFORMED, 14), MUX_EV_NONE, 0, NULL, 0, NULL, 0, false,
	 "mux: address type not supported"},
	{"empty domain", B(0x00, 0x09, 0x00, 0x01, 0x01, 0x00, 0x01, 0x00, 0x50, 0x02, 0x00),
	 ERR(PROTO_ERR_MALFORMED, 11), MUX_EV_NONE, 0, NULL, 0, NULL, 0, false,
	 "mux: empty or malformed domain name"},
	{"domain holding a NUL",
	 B(0x00, 0x0c, 0x00, 0x01, 0x01, 0x00, 0x01, 0x00, 0x50, 0x02, 3, 'a', 0, 'b'),
	 ERR(PROTO_ERR_MALFORMED, 14), MUX_EV_NONE, 0, NULL, 0, NULL, 0, false,
	 "mux: empty or malformed domain name"},
	{"IPv4 address running past the metadata",
	 B(0x00, 0x08, 0x00, 0x01, 0x01, 0x00, 0x01, 0x00, 0x50, 0x01, 1, 2, 3, 4),
	 ERR(PROTO_ERR_MALFORMED, 10), MUX_EV_NONE, 0, NULL, 0, NULL, 0, false,
	 "mux: address runs past the frame metadata"},
	{"domain running past the metadata",
	 B(0x00, 0x0a, 0x00, 0x01, 0x01, 0x00, 0x01, 0x00, 0x50, 0x02, 5, 'a', 'b'),
	 ERR(PROTO_ERR_MALFORMED, 12), MUX_EV_NONE, 0, NULL, 0, NULL, 0, false,
	 "mux: address runs past the frame metadata"},
	{"addressed Keep shorter than 8 bytes", B(0x00, 0x06, 0x00, 0x01, 0x02, 0x01, 0x02, 0x00),
	 ERR(PROTO_ERR_MALFORMED, 8), MUX_EV_NONE, 0, NULL, 0, NULL, 0, false,
	 "mux: frame metadata too short"},
	{"data over 8192 bytes", B(0x00, 0x04, 0x00, 0x01, 0x02, 0x01, 0x20, 0x01, 'a'),
	 ERR(PROTO_ERR_TOO_BIG, 8), MUX_EV_NONE, 0, NULL, 0, NULL, 0, false,
	 "mux: frame data longer than 8192 bytes"},
	{"bad metadata is refused before its data arrives",
	 B(0x00, 0x04, 0x00, 0x01, 0x09, 0x01, 0x00, 0x10), ERR(PROTO_ERR_MALFORMED, 6), MUX_EV_NONE,
	 0, NULL, 0, NULL, 0, false, "mux: unknown frame status"},
};

static void check_event(const decode_case *c, ssize_t n, const mux_event *ev)
{
	char text[ADDR_TEXT_MAX];
	assert_int_equal(n, c->ret);
	assert_int_equal(ev->kind, c->kind);
	if (c->reason) {
		assert_non_null(ev->reason);
		assert_string_equal(ev->reason, c->reason);
		return;
	}
	assert_null(ev->reason);
	assert_int_equal(ev->id, c->id);
	assert_int_equal(ev->error, c->error);
	if (c->dest) {
		addr_dest_format(&ev->dest, text, sizeof text);
		assert_string_equal(text, c->dest);
		assert_int_equal(ev->dest.network, c->network);
	} else {
		assert_int_equal(ev->dest.kind, ADDR_NONE);
	}
	assert_int_equal(ev->has_data, c->data != NULL);
	if (c->data) {
		assert_int_equal(ev->data_len, c->data_len);
		assert_memory_equal(ev->data, c->data, c->data_len);
		assert_true(ev->data >= c->in && ev->data + ev->data_len <= c->in + c->len);
	} else {
		assert_null(ev->data);
		assert_int_equal(ev->data_len, 0);
	}
}

static void decode_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
		const decode_case *c = &CASES[i];
		mux_event ev;
		print_message("%s\n", c->name);
		check_event(c, mux_decode(c->in, c->len, &ev), &ev);

		/* Every prefix waits, or (from the deciding byte on) gives the
		 * same error; a copy on the heap lets ASan see any overread. */
		size_t decide = c->ret > 0 ? c->len : c->decide;
		for (size_t k = 0; k <= c->len; k++) {
			uint8_t *copy = malloc(k ? k : 1);
			assert_non_null(copy);
			memcpy(copy, c->in, k);
			ssize_t n = mux_decode(copy, k, &ev);
			if (k < decide) {
				assert_int_equal(n, MUX_NEED_MORE);
				assert_int_equal(ev.kind, MUX_EV_NONE);
				assert_null(ev.reason);
			} else if (c->ret < 0) {
				assert_int_equal(n, c->ret);
				assert_string_equal(ev.reason, c->reason);
			}
			free(copy);
		}
	}
}

/* The bounds themselves are accepted: metadata of exactly 512 bytes (a
 * New with trailing bytes), data of exactly 8192. */
static void decode_bounds(void **state)
{
	(void)state;
	static uint8_t in[MUX_FRAME_MAX + 1];
	memset(in, 0x5a, sizeof in);
	uint8_t *p = in;
	p[0] = MUX_META_MAX >> 8;
	p[1] = MUX_META_MAX & 0xff;
	memcpy(p + 2, (const uint8_t[]){0x00, 0x07, 0x01, 0x01, 0x01, 0x00, 0x50, 0x01, 1, 2, 3, 4},
	       12);
	p += 2 + MUX_META_MAX;
	p[0] = MUX_DATA_MAX >> 8;
	p[1] = MUX_DATA_MAX & 0xff;
	p += 2 + MUX_DATA_MAX;
	assert_int_equal(p - in, MUX_FRAME_MAX);

	mux_event ev;
	assert_int_equal(mux_decode(in, MUX_FRAME_MAX + 1, &ev), MUX_FRAME_MAX);
	assert_int_equal(ev.kind, MUX_EV_OPEN);
	assert_int_equal(ev.id, 7);
	assert_int_equal(ev.data_len, MUX_DATA_MAX);
	assert_ptr_equal(ev.data, in + 2 + MUX_META_MAX + 2);
	assert_int_equal(mux_decode(in, MUX_FRAME_MAX - 1, &ev), MUX_NEED_MORE);
}

/* ---- round trips ---- */

static void round_trips(void **state)
{
	(void)state;
	static uint8_t out[4 * MUX_FRAME_MAX], data[20000];
	for (size_t i = 0; i < sizeof data; i++)
		data[i] = (uint8_t)(i * 7 + 3);
	mux_event ev;
	char text[ADDR_TEXT_MAX];

	static const char *const dests[] = {"10.0.0.1:1", "[::1]:65535", "a.example:8080"};
	for (size_t i = 0; i < 3; i++)
		for (int net = ADDR_TCP; net <= ADDR_UDP; net++) {
			addr_dest d = dest(dests[i], (addr_network)net);
			ssize_t n = mux_encode_new((uint16_t)(100 + i), &d, data, 100, out, sizeof out);
			assert_true(n > 0);
			assert_int_equal(mux_decode(out, (size_t)n, &ev), n);
			assert_int_equal(ev.kind, MUX_EV_OPEN);
			assert_int_equal(ev.id, 100 + i);
			assert_int_equal(ev.dest.network, net);
			addr_dest_format(&ev.dest, text, sizeof text);
			assert_string_equal(text, dests[i]);
			assert_true(ev.has_data);
			assert_int_equal(ev.data_len, 100);
			assert_memory_equal(ev.data, data, 100);

			n = mux_encode_datagram(9, &d, data, 7, out, sizeof out);
			assert_true(n > 0);
			assert_int_equal(mux_decode(out, (size_t)n, &ev), n);
			assert_int_equal(ev.kind, MUX_EV_DATA);
			assert_int_equal(ev.dest.network, ADDR_UDP);
			addr_dest_format(&ev.dest, text, sizeof text);
			assert_string_equal(text, dests[i]);
			assert_int_equal(ev.data_len, 7);
		}

	/* A stream is split every MUX_DATA_MAX bytes: 8192 + 8192 + 3616. */
	size_t used = 0;
	size_t w = mux_encode_stream(42, data, sizeof data, out, sizeof out, &used);
	assert_int_equal(used, sizeof data);
	assert_int_equal(w, 3 * 8 + sizeof data);
	size_t off = 0, got = 0, frames = 0;
	while (off < w) {
		ssize_t n = mux_decode(out + off, w - off, &ev);
		assert_true(n > 0);
		assert_int_equal(ev.kind, MUX_EV_DATA);
		assert_int_equal(ev.id, 42);
		assert_memory_equal(ev.data, data + got, ev.data_len);
		assert_true(ev.data_len <= MUX_DATA_MAX);
		got += ev.data_len;
		off += (size_t)n;
		frames++;
	}
	assert_int_equal(got, sizeof data);
	assert_int_equal(frames, 3);

	/* A small buffer takes what fits, in whole frames; nothing when not
	 * even one byte of data fits. */
	w = mux_encode_stream(42, data, sizeof data, out, 8 + 5, &used);
	assert_int_equal(w, 13);
	assert_int_equal(used, 5);
	w = mux_encode_stream(42, data, sizeof data, out, 8, &used);
	assert_int_equal(w, 0);
	assert_int_equal(used, 0);
	w = mux_encode_stream(42, data, 0, out, sizeof out, &used);
	assert_int_equal(w, 0);
	assert_int_equal(used, 0);

	ssize_t n = mux_encode_end(77, true, out, sizeof out);
	assert_int_equal(mux_decode(out, (size_t)n, &ev), MUX_SHORT_FRAME_LEN);
	assert_int_equal(ev.kind, MUX_EV_END);
	assert_int_equal(ev.id, 77);
	assert_true(ev.error);
	n = mux_encode_keepalive(out, sizeof out);
	assert_int_equal(mux_decode(out, (size_t)n, &ev), MUX_SHORT_FRAME_LEN);
	assert_int_equal(ev.kind, MUX_EV_KEEPALIVE);
}

/* ---- a frame stream cut anywhere ---- */

typedef struct trace {
	mux_event_kind kind[16];
	uint16_t id[16];
	size_t data_len[16];
	size_t out_len[16];
	size_t n;
} trace;

/* Feeds buf[0, len) to s the way a shell does: frame after frame, keeping
 * what is left. Returns the bytes consumed. */
static size_t drain(mux_server *s, const uint8_t *buf, size_t len, trace *t)
{
	size_t off = 0;
	for (;;) {
		mux_event ev;
		proto_out out;
		ssize_t n = mux_server_feed(s, buf + off, len - off, &ev, &out);
		assert_true(n >= 0);
		if (n == 0)
			return off;
		assert_true(t->n < 16);
		t->kind[t->n] = ev.kind;
		t->id[t->n] = ev.id;
		t->data_len[t->n] = ev.data_len;
		t->out_len[t->n] = out.len;
		t->n++;
		off += (size_t)n;
	}
}

static void stream_cut_anywhere(void **state)
{
	(void)state;
	uint8_t in[512];
	size_t len = 0;
	addr_dest a = dest("example.com:443", ADDR_TCP), u = dest("1.1.1.1:53", ADDR_UDP);
	size_t used;
	len += (size_t)mux_encode_new(1, &a, (const uint8_t *)"GET", 3, in + len, sizeof in - len);
	len += (size_t)mux_encode_new(2, &u, NULL, 0, in + len, sizeof in - len);
	len += mux_encode_stream(1, (const uint8_t *)" / HTTP/1.1", 11, in + len, sizeof in - len,
	                         &used);
	len += (size_t)mux_encode_datagram(2, &u, (const uint8_t *)"dns?", 4, in + len,
	                                   sizeof in - len);
	len += (size_t)mux_encode_datagram(9, NULL, (const uint8_t *)"??", 2, in + len,
	                                   sizeof in - len);
	len += (size_t)mux_encode_keepalive(in + len, sizeof in - len);
	len += (size_t)mux_encode_end(2, false, in + len, sizeof in - len);
	len += (size_t)mux_encode_end(1, true, in + len, sizeof in - len);

	static const mux_event_kind want[] = {MUX_EV_OPEN, MUX_EV_OPEN, MUX_EV_DATA,
	                                      MUX_EV_DATA, MUX_EV_NONE, MUX_EV_KEEPALIVE,
	                                      MUX_EV_END,  MUX_EV_END};
	mux_server s = {0};
	trace whole = {0};
	assert_int_equal(drain(&s, in, len, &whole), len);
	assert_int_equal(whole.n, 8);
	for (size_t i = 0; i < 8; i++)
		assert_int_equal(whole.kind[i], want[i]);
	assert_int_equal(whole.out_len[4], MUX_SHORT_FRAME_LEN); /* End for unknown id 9 */
	assert_int_equal(mux_server_count(&s), 0);

	for (size_t cut = 0; cut <= len; cut++) {
		trace t = {0};
		mux_server_init(&s);
		size_t off = drain(&s, in, cut, &t);
		assert_int_equal(off + drain(&s, in + off, len - off, &t), len);
		assert_memory_equal(&t, &whole, sizeof t);
	}

	/* Every prefix, fed to the decoder alone, waits or gives a frame. */
	for (size_t k = 0; k <= len; k++) {
		mux_event ev;
		assert_true(mux_decode(in, k, &ev) >= 0);
	}
}

/* ---- server sessions ---- */

static void new_frame(uint16_t id, addr_network net, uint8_t *buf, size_t *len)
{
	addr_dest d = dest("192.0.2.1:443", net);
	ssize_t n = mux_encode_new(id, &d, NULL, 0, buf, MUX_HEADER_MAX);
	assert_true(n > 0);
	*len = (size_t)n;
}

static void server_rules(void **state)
{
	(void)state;
	mux_server s;
	mux_server_init(&s);
	mux_event ev;
	proto_out out;
	uint8_t f[MUX_HEADER_MAX + 16];
	size_t len;
	addr_network net;

	new_frame(7, ADDR_UDP, f, &len);
	assert_int_equal(mux_server_feed(&s, f, len, &ev, &out), (ssize_t)len);
	assert_int_equal(ev.kind, MUX_EV_OPEN);
	assert_int_equal(out.len, 0);
	assert_true(mux_server_is_open(&s, 7, &net));
	assert_int_equal(net, ADDR_UDP);
	assert_int_equal(mux_server_count(&s), 1);

	/* A second New on an open id ends the connection. */
	assert_int_equal(mux_server_feed(&s, f, len, &ev, &out), PROTO_ERR_MALFORMED);
	assert_string_equal(ev.reason, "mux: new sub-flow on an id already open");
	assert_int_equal(out.len, 0);

	/* Data on an open id; on an unknown id it is answered with End (no error bit). */
	ssize_t n = mux_encode_datagram(7, NULL, (const uint8_t *)"x", 1, f, sizeof f);
	assert_int_equal(mux_server_feed(&s, f, (size_t)n, &ev, &out), n);
	assert_int_equal(ev.kind, MUX_EV_DATA);
	assert_int_equal(ev.id, 7);
	assert_int_equal(out.len, 0);
	n = mux_encode_datagram(8, NULL, (const uint8_t *)"x", 1, f, sizeof f);
	assert_int_equal(mux_server_feed(&s, f, (size_t)n, &ev, &out), n);
	assert_int_equal(ev.kind, MUX_EV_NONE);
	assert_int_equal(ev.id, 8);
	assert_null(ev.data);
	expect_bytes(out.buf, (ssize_t)out.len, B(0x00, 0x04, 0x00, 0x08, 0x03, 0x00));

	/* Keep without data and End on an unknown id: nothing, no answer. */
	const uint8_t keep[] = {0x00, 0x04, 0x00, 0x08, 0x02, 0x00};
	assert_int_equal(mux_server_feed(&s, keep, sizeof keep, &ev, &out), 6);
	assert_int_equal(ev.kind, MUX_EV_NONE);
	assert_int_equal(out.len, 0);
	n = mux_encode_end(8, false, f, sizeof f);
	assert_int_equal(mux_server_feed(&s, f, (size_t)n, &ev, &out), n);
	assert_int_equal(ev.kind, MUX_EV_NONE);
	assert_int_equal(out.len, 0);

	/* KeepAlive reaches the shell. */
	n = mux_encode_keepalive(f, sizeof f);
	assert_int_equal(mux_server_feed(&s, f, (size_t)n, &ev, &out), n);
	assert_int_equal(ev.kind, MUX_EV_KEEPALIVE);

	/* The client's End closes the id. */
	n = mux_encode_end(7, true, f, sizeof f);
	assert_int_equal(mux_server_feed(&s, f, (size_t)n, &ev, &out), n);
	assert_int_equal(ev.kind, MUX_EV_END);
	assert_true(ev.error);
	assert_false(mux_server_is_open(&s, 7, NULL));
	assert_int_equal(mux_server_count(&s), 0);

	/* The upstream's end: End written, id forgotten; twice is a state error. */
	new_frame(9, ADDR_TCP, f, &len);
	assert_int_equal(mux_server_feed(&s, f, len, &ev, &out), (ssize_t)len);
	assert_int_equal(mux_server_end(&s, 9, true, &out), 0);
	expect_bytes(out.buf, (ssize_t)out.len, B(0x00, 0x04, 0x00, 0x09, 0x03, 0x02));
	assert_int_equal(mux_server_end(&s, 9, false, &out), PROTO_ERR_STATE);
	assert_int_equal(out.len, 0);
	assert_int_equal(mux_server_count(&s), 0);

	/* Errors from the decoder come through with their text. */
	const uint8_t bad[] = {0x00, 0x04, 0x00, 0x01, 0x07, 0x00};
	assert_int_equal(mux_server_feed(&s, bad, sizeof bad, &ev, &out), PROTO_ERR_MALFORMED);
	assert_string_equal(ev.reason, "mux: unknown frame status");
	assert_int_equal(mux_server_feed(&s, bad, 3, &ev, &out), MUX_NEED_MORE);
}

static void server_cap(void **state)
{
	(void)state;
	static mux_server s; /* zeroed: a valid empty table */
	mux_event ev;
	proto_out out;
	uint8_t f[MUX_HEADER_MAX];
	size_t len;

	/* Ids are the client's choice, in any order. */
	for (unsigned i = 0; i < MUX_SERVER_SUBS_MAX; i++) {
		new_frame((uint16_t)(60000 - i * 3), ADDR_TCP, f, &len);
		assert_int_equal(mux_server_feed(&s, f, len, &ev, &out), (ssize_t)len);
		assert_int_equal(ev.kind, MUX_EV_OPEN);
	}
	assert_int_equal(mux_server_count(&s), MUX_SERVER_SUBS_MAX);

	/* One more is refused with End in error, and stays closed. */
	new_frame(1, ADDR_TCP, f, &len);
	assert_int_equal(mux_server_feed(&s, f, len, &ev, &out), (ssize_t)len);
	assert_int_equal(ev.kind, MUX_EV_REFUSED);
	assert_int_equal(ev.id, 1);
	assert_string_equal(ev.reason, "mux: too many sub-flows on one connection");
	expect_bytes(out.buf, (ssize_t)out.len, B(0x00, 0x04, 0x00, 0x01, 0x03, 0x02));
	assert_false(mux_server_is_open(&s, 1, NULL));
	assert_int_equal(mux_server_count(&s), MUX_SERVER_SUBS_MAX);

	/* A slot freed takes the next one. */
	assert_int_equal(mux_server_end(&s, 60000 - 5 * 3, false, &out), 0);
	assert_int_equal(mux_server_feed(&s, f, len, &ev, &out), (ssize_t)len);
	assert_int_equal(ev.kind, MUX_EV_OPEN);
	assert_true(mux_server_is_open(&s, 1, NULL));
	assert_true(mux_server_is_open(&s, 60000, NULL));
	assert_false(mux_server_is_open(&s, 60000 - 5 * 3, NULL));
}

/* ---- client sessions ---- */

static void client_ids_and_cap(void **state)
{
	(void)state;
	mux_client c = {0}; /* zeroed: default concurrency */
	uint8_t f[MUX_HEADER_MAX];
	addr_dest d = dest("192.0.2.1:80", ADDR_TCP), unset = {0};
	uint16_t id = 0;
	proto_out out;

	assert_true(mux_client_idle(&c));
	for (uint16_t i = 1; i <= MUX_CONCURRENCY_DEFAULT; i++) {
		assert_false(mux_client_full(&c));
		assert_true(mux_client_open(&c, &d, NULL, 0, f, sizeof f, &id) > 0);
		assert_int_equal(id, i); /* 1, 2, 3, ... */
		assert_true(mux_client_is_open(&c, i));
		/* The frame is a New for that id. */
		mux_event ev;
		assert_true(mux_decode(f, sizeof f, &ev) > 0);
		assert_int_equal(ev.kind, MUX_EV_OPEN);
		assert_int_equal(ev.id, i);
	}
	assert_true(mux_client_full(&c));
	assert_false(mux_client_idle(&c));
	assert_int_equal(mux_client_open(&c, &d, NULL, 0, f, sizeof f, &id), PROTO_ERR_STATE);

	/* Ending one frees a slot; the next id is 9, not 3. */
	assert_int_equal(mux_client_end(&c, 3, false, &out), 0);
	expect_bytes(out.buf, (ssize_t)out.len, B(0x00, 0x04, 0x00, 0x03, 0x03, 0x00));
	assert_int_equal(mux_client_end(&c, 3, false, &out), PROTO_ERR_STATE);
	assert_int_equal(out.len, 0);
	assert_int_equal(mux_client_end(&c, 0, false, &out), PROTO_ERR_STATE);
	assert_int_equal(mux_client_end(&c, 500, false, &out), PROTO_ERR_STATE);
	/* A refused destination takes no id. */
	assert_int_equal(mux_client_open(&c, &unset, NULL, 0, f, sizeof f, &id), PROTO_ERR_MALFORMED);
	assert_int_equal(mux_client_open(&c, &d, NULL, 0, f, 3, &id), PROTO_ERR_TOO_BIG);
	assert_true(mux_client_open(&c, &d, NULL, 0, f, sizeof f, &id) > 0);
	assert_int_equal(id, 9);

	/* After MUX_CLIENT_SUBS_TOTAL ids the connection takes no more and is
	 * closed once idle. */
	mux_client_init(&c, 1000);
	for (unsigned i = 1; i <= MUX_CLIENT_SUBS_TOTAL; i++) {
		assert_true(mux_client_open(&c, &d, NULL, 0, f, sizeof f, &id) > 0);
		assert_int_equal(id, i);
		if (i % 2)
			assert_int_equal(mux_client_end(&c, id, false, &out), 0);
	}
	assert_true(mux_client_full(&c));
	assert_int_equal(mux_client_open(&c, &d, NULL, 0, f, sizeof f, &id), PROTO_ERR_STATE);
	for (unsigned i = 2; i <= MUX_CLIENT_SUBS_TOTAL; i += 2) {
		assert_false(mux_client_idle(&c));
		assert_int_equal(mux_client_end(&c, (uint16_t)i, false, &out), 0);
	}
	assert_true(mux_client_idle(&c));
	assert_true(mux_client_full(&c));

	mux_client_init(&c, 2);
	assert_true(mux_client_open(&c, &d, NULL, 0, f, sizeof f, &id) > 0);
	assert_true(mux_client_open(&c, &d, NULL, 0, f, sizeof f, &id) > 0);
	assert_true(mux_client_full(&c));
}

static void client_rules(void **state)
{
	(void)state;
	mux_client c;
	mux_client_init(&c, 0);
	uint8_t f[MUX_HEADER_MAX + 16];
	addr_dest d = dest("192.0.2.1:80", ADDR_TCP);
	uint16_t id;
	mux_event ev;
	proto_out out;
	size_t used;

	assert_true(mux_client_open(&c, &d, NULL, 0, f, sizeof f, &id) > 0);
	assert_int_equal(id, 1);

	/* The server's data for id 1. */
	size_t n = mux_encode_stream(1, (const uint8_t *)"HTTP", 4, f, sizeof f, &used);
	assert_int_equal(mux_client_feed(&c, f, n, &ev, &out), (ssize_t)n);
	assert_int_equal(ev.kind, MUX_EV_DATA);
	assert_int_equal(ev.data_len, 4);
	assert_int_equal(out.len, 0);

	/* Data for an id the client does not have: End. */
	n = mux_encode_stream(2, (const uint8_t *)"HTTP", 4, f, sizeof f, &used);
	assert_int_equal(mux_client_feed(&c, f, n, &ev, &out), (ssize_t)n);
	assert_int_equal(ev.kind, MUX_EV_NONE);
	expect_bytes(out.buf, (ssize_t)out.len, B(0x00, 0x04, 0x00, 0x02, 0x03, 0x00));

	/* A New from the server is dropped. */
	ssize_t m = mux_encode_new(5, &d, (const uint8_t *)"x", 1, f, sizeof f);
	assert_int_equal(mux_client_feed(&c, f, (size_t)m, &ev, &out), m);
	assert_int_equal(ev.kind, MUX_EV_NONE);
	assert_null(ev.data);
	assert_int_equal(out.len, 0);

	/* KeepAlive; End for an unknown id is dropped; End for id 1 closes it. */
	m = mux_encode_keepalive(f, sizeof f);
	assert_int_equal(mux_client_feed(&c, f, (size_t)m, &ev, &out), m);
	assert_int_equal(ev.kind, MUX_EV_KEEPALIVE);
	m = mux_encode_end(4, false, f, sizeof f);
	assert_int_equal(mux_client_feed(&c, f, (size_t)m, &ev, &out), m);
	assert_int_equal(ev.kind, MUX_EV_NONE);
	m = mux_encode_end(1, true, f, sizeof f);
	assert_int_equal(mux_client_feed(&c, f, (size_t)m, &ev, &out), m);
	assert_int_equal(ev.kind, MUX_EV_END);
	assert_true(ev.error);
	assert_false(mux_client_is_open(&c, 1));
	assert_true(mux_client_idle(&c));

	/* Decoder errors and partial frames come through. */
	const uint8_t big[] = {0xff, 0xff};
	assert_int_equal(mux_client_feed(&c, big, 2, &ev, &out), PROTO_ERR_TOO_BIG);
	assert_string_equal(ev.reason, "mux: frame metadata longer than 512 bytes");
	assert_int_equal(mux_client_feed(&c, big, 1, &ev, &out), MUX_NEED_MORE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(encode_vectors),
		cmocka_unit_test(encode_errors),
		cmocka_unit_test(decode_table),
		cmocka_unit_test(decode_bounds),
		cmocka_unit_test(round_trips),
		cmocka_unit_test(stream_cut_anywhere),
		cmocka_unit_test(server_rules),
		cmocka_unit_test(server_cap),
		cmocka_unit_test(client_ids_and_cap),
		cmocka_unit_test(client_rules),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
