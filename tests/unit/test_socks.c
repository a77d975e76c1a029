/* test_socks.c - the SOCKS core fed whole, byte by byte and cut in two; the UDP codec. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proto/socks.h"

/* A byte string and its length, for table entries. */
#define B(...) (const uint8_t[]){__VA_ARGS__}, sizeof((const uint8_t[]){__VA_ARGS__})
#define EMPTY (const uint8_t *)"", 0

static const proto_account ACCOUNTS[] = {
	{.user = "alice", .pass = "secret", .user_len = 5, .pass_len = 6},
	{.user = "bob", .pass = "hunter2", .user_len = 3, .pass_len = 7},
};

/* An account without a password never matches, not even an empty one. */
static const proto_account NO_PASSWORD[] = {
	{.user = "carol", .user_len = 5},
};

enum { USERS_NONE, USERS_TWO, USERS_NO_PASSWORD };

typedef struct feed_case {
	const char *name;
	int users; /* USERS_* */
	bool allow_udp;
	const uint8_t *in;
	size_t in_len;
	ssize_t ret;          /* bytes consumed, or the PROTO_ERR_* */
	const uint8_t *reply; /* every byte the core wrote, in order */
	size_t reply_len;
	proto_event_kind kind;
	proto_cmd cmd;
	const char *dest; /* PROTO_EV_OPEN: addr_dest_format of ev.dest */
	addr_network network;
	int user;
	const char *reason;
	const char *version_name;
} feed_case;

static void init_core(socks_server *s, int users, bool allow_udp)
{
	switch (users) {
	case USERS_TWO:
		socks_server_init(s, ACCOUNTS, 2, allow_udp);
		break;
	case USERS_NO_PASSWORD:
		socks_server_init(s, NO_PASSWORD, 1, allow_udp);
		break;
	default:
		socks_server_init(s, NULL, 0, allow_udp);
		break;
	}
}

/* What one run of a case produced, however the input was cut. */
typedef struct run {
	ssize_t ret;
	uint8_t reply[4 * PROTO_OUT_MAX];
	size_t reply_len;
	proto_event ev;
} run;

/* Feeds in[0, len) as one call; returns the call's result and keeps its
 * output. Stops early when an earlier piece already ended the handshake. */
static bool feed_piece(socks_server *s, const uint8_t *in, size_t len, run *r, size_t *consumed)
{
	proto_out out;
	ssize_t n = socks_server_feed(s, in, len, &out, &r->ev);
	assert_true(out.len <= PROTO_OUT_MAX);
	assert_true(r->reply_len + out.len <= sizeof r->reply);
	memcpy(r->reply + r->reply_len, out.buf, out.len);
	r->reply_len += out.len;
	if (n < 0) {
		r->ret = n;
		return false;
	}
	assert_true((size_t)n <= len);
	*consumed += (size_t)n;
	r->ret = (ssize_t)*consumed;
	if (r->ev.kind != PROTO_EV_NONE)
		return false;
	assert_int_equal((size_t)n, len); /* with no event, everything given is taken */
	return true;
}

static void check_run(const feed_case *c, const socks_server *s, const run *r)
{
	char dest[ADDR_TEXT_MAX];
	assert_int_equal(r->ret, c->ret);
	assert_int_equal(r->reply_len, c->reply_len);
	assert_memory_equal(r->reply, c->reply, c->reply_len);
	assert_int_equal(r->ev.kind, c->kind);
	assert_int_equal(r->ev.user, c->user);
	if (c->kind == PROTO_EV_OPEN) {
		assert_int_equal(r->ev.cmd, c->cmd);
		assert_int_equal(r->ev.dest.network, c->network);
		addr_dest_format(&r->ev.dest, dest, sizeof dest);
		assert_string_equal(dest, c->dest);
	}
	if (c->reason)
		assert_string_equal(r->ev.reason, c->reason);
	else
		assert_null(r->ev.reason);
	assert_string_equal(socks_server_version_name(s), c->version_name);
}

/* After an event or an error the core takes no more bytes. */
static void check_done(socks_server *s, const run *r)
{
	if (r->ev.kind == PROTO_EV_NONE && r->ret >= 0)
		return;
	proto_out out;
	proto_event ev;
	uint8_t byte = 0x05;
	assert_int_equal(socks_server_feed(s, &byte, 1, &out, &ev), PROTO_ERR_STATE);
	assert_int_equal(out.len, 0);
	assert_int_equal(ev.kind, PROTO_EV_CLOSE);
	assert_string_equal(ev.reason, "socks: called after the handshake ended");
}

static void run_case(const feed_case *c)
{
	socks_server s;
	run r;
	size_t consumed;

	print_message("%s\n", c->name);

	/* In one piece. */
	init_core(&s, c->users, c->allow_udp);
	r = (run){0};
	consumed = 0;
	feed_piece(&s, c->in, c->in_len, &r, &consumed);
	check_run(c, &s, &r);
	check_done(&s, &r);

	/* One byte at a time. */
	init_core(&s, c->users, c->allow_udp);
	r = (run){0};
	consumed = 0;
	for (size_t i = 0; i < c->in_len; i++)
		if (!feed_piece(&s, c->in + i, 1, &r, &consumed))
			break;
	if (c->in_len == 0)
		feed_piece(&s, c->in, 0, &r, &consumed);
	check_run(c, &s, &r);
	check_done(&s, &r);

	/* In two pieces, cut at every point. */
	for (size_t cut = 0; cut <= c->in_len; cut++) {
		init_core(&s, c->users, c->allow_udp);
		r = (run){0};
		consumed = 0;
		if (feed_piece(&s, c->in, cut, &r, &consumed))
			feed_piece(&s, c->in + cut, c->in_len - cut, &r, &consumed);
		check_run(c, &s, &r);
	}
}

#define GREET_NONE 0x05, 0x01, 0x00
#define GREET_USERPASS 0x05, 0x01, 0x02
#define REPLY_NONE 0x05, 0x00
#define REPLY_USERPASS 0x05, 0x02
#define CONNECT_V4 0x05, 0x01, 0x00, 0x01, 93, 184, 216, 34, 0x00, 0x50
#define ZERO_BND 0x01, 0, 0, 0, 0, 0, 0
#define PAYLOAD 'G', 'E', 'T', ' ', '/', ' ', 'H', 'T', 'T', 'P', '/', '1', '.', '1', '\r', '\n'
#define EXAMPLE_COM 'e', 'x', 'a', 'm', 'p', 'l', 'e', '.', 'c', 'o', 'm'

static const char *const R_NO_METHOD = "socks: no acceptable authentication method";
static const char *const R_AUTH = "socks: wrong username or password";
static const char *const R_CMD = "socks: command not supported";
static const char *const R_ATYP = "socks: address type not supported";
static const char *const R_DOMAIN = "socks: empty or malformed domain name";

static const feed_case CASES[] = {
	{"nothing yet", USERS_NONE, false, EMPTY, 0, EMPTY, PROTO_EV_NONE, 0, NULL, 0, -1, NULL, "socks"},
	{"greeting only: need more", USERS_NONE, false, B(GREET_NONE, 0x05, 0x01), 5, B(REPLY_NONE),
	 PROTO_EV_NONE, 0, NULL, 0, -1, NULL, "socks5"},
	{"no-auth CONNECT to IPv4", USERS_NONE, false, B(GREET_NONE, CONNECT_V4), 13, B(REPLY_NONE),
	 PROTO_EV_OPEN, PROTO_CMD_CONNECT, "93.184.216.34:80", ADDR_TCP, -1, NULL, "socks5"},
	{"no-auth CONNECT to IPv6", USERS_NONE, false,
	 B(GREET_NONE, 0x05, 0x01, 0x00, 0x04, 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	   0x01, 0x01, 0xbb),
	 25, B(REPLY_NONE), PROTO_EV_OPEN, PROTO_CMD_CONNECT, "[2001:db8::1]:443", ADDR_TCP, -1, NULL,
	 "socks5"},
	{"no-auth CONNECT to a domain", USERS_NONE, false,
	 B(GREET_NONE, 0x05, 0x01, 0x00, 0x03, 11, EXAMPLE_COM, 0x00, 0x50), 21, B(REPLY_NONE),
	 PROTO_EV_OPEN, PROTO_CMD_CONNECT, "example.com:80", ADDR_TCP, -1, NULL, "socks5"},
	{"no-auth picked among several methods", USERS_NONE, false,
	 B(0x05, 0x03, 0x01, 0x02, 0x00, CONNECT_V4), 15, B(REPLY_NONE), PROTO_EV_OPEN,
	 PROTO_CMD_CONNECT, "93.184.216.34:80", ADDR_TCP, -1, NULL, "socks5"},
	{"RSV in the request is not checked", USERS_NONE, false,
	 B(GREET_NONE, 0x05, 0x01, 0x7f, 0x01, 10, 0, 0, 1, 0x00, 0x16), 13, B(REPLY_NONE),
	 PROTO_EV_OPEN, PROTO_CMD_CONNECT, "10.0.0.1:22", ADDR_TCP, -1, NULL, "socks5"},
	{"username/password accepted", USERS_TWO, false,
	 B(0x05, 0x02, 0x00, 0x02, 0x01, 3, 'b', 'o', 'b', 7, 'h', 'u', 'n', 't', 'e', 'r', '2', 0x05,
	   0x01, 0x00, 0x01, 127, 0, 0, 1, 0x1f, 0x90),
	 27, B(REPLY_USERPASS, 0x01, 0x00), PROTO_EV_OPEN, PROTO_CMD_CONNECT, "127.0.0.1:8080",
	 ADDR_TCP, 1, NULL, "socks5"},
	{"username/password accepted, first account", USERS_TWO, false,
	 B(GREET_USERPASS, 0x01, 5, 'a', 'l', 'i', 'c', 'e', 6, 's', 'e', 'c', 'r', 'e', 't',
	   CONNECT_V4),
	 27, B(REPLY_USERPASS, 0x01, 0x00), PROTO_EV_OPEN, PROTO_CMD_CONNECT, "93.184.216.34:80",
	 ADDR_TCP, 0, NULL, "socks5"},
	{"wrong password refused", USERS_TWO, false,
	 B(GREET_USERPASS, 0x01, 3, 'b', 'o', 'b', 6, 's', 'e', 'c', 'r', 'e', 't', CONNECT_V4), 15,
	 B(REPLY_USERPASS, 0x01, 0x01), PROTO_EV_CLOSE, 0, NULL, 0, -1, R_AUTH, "socks5"},
	{"password prefix refused", USERS_TWO, false,
	 B(GREET_USERPASS, 0x01, 3, 'b', 'o', 'b', 6, 'h', 'u', 'n', 't', 'e', 'r'), 15,
	 B(REPLY_USERPASS, 0x01, 0x01), PROTO_EV_CLOSE, 0, NULL, 0, -1, R_AUTH, "socks5"},
	{"unknown user refused", USERS_TWO, false,
	 B(GREET_USERPASS, 0x01, 3, 'e', 'v', 'e', 7, 'h', 'u', 'n', 't', 'e', 'r', '2'), 16,
	 B(REPLY_USERPASS, 0x01, 0x01), PROTO_EV_CLOSE, 0, NULL, 0, -1, R_AUTH, "socks5"},
	{"account without a password never matches", USERS_NO_PASSWORD, false,
	 B(GREET_USERPASS, 0x01, 5, 'c', 'a', 'r', 'o', 'l', 0), 11, B(REPLY_USERPASS, 0x01, 0x01),
	 PROTO_EV_CLOSE, 0, NULL, 0, -1, R_AUTH, "socks5"},
	{"RFC 1929 version other than 1", USERS_TWO, false,
	 B(GREET_USERPASS, 0x05, 3, 'b', 'o', 'b', 7, 'h', 'u', 'n', 't', 'e', 'r', '2'),
	 PROTO_ERR_MALFORMED, B(REPLY_USERPASS, 0x01, 0x01), PROTO_EV_CLOSE, 0, NULL, 0, -1,
	 "socks: unknown username/password subnegotiation version", "socks5"},
	{"no acceptable method: only 0x02 without accounts", USERS_NONE, false,
	 B(GREET_USERPASS, CONNECT_V4), 3, B(0x05, 0xff), PROTO_EV_CLOSE, 0, NULL, 0, -1, R_NO_METHOD,
	 "socks5"},
	{"no acceptable method: only 0x00 with accounts", USERS_TWO, false, B(GREET_NONE), 3,
	 B(0x05, 0xff), PROTO_EV_CLOSE, 0, NULL, 0, -1, R_NO_METHOD, "socks5"},
	{"no acceptable method: NMETHODS 0", USERS_NONE, false, B(0x05, 0x00), 2, B(0x05, 0xff),
	 PROTO_EV_CLOSE, 0, NULL, 0, -1, R_NO_METHOD, "socks5"},
	{"BIND not supported", USERS_NONE, false,
	 B(GREET_NONE, 0x05, 0x02, 0x00, 0x01, 10, 0, 0, 1, 0x00, 0x15), 13,
	 B(REPLY_NONE, 0x05, 0x07, 0x00, ZERO_BND), PROTO_EV_CLOSE, 0, NULL, 0, -1, R_CMD, "socks5"},
	{"unknown command not supported", USERS_NONE, true,
	 B(GREET_NONE, 0x05, 0x09, 0x00, 0x01, 10, 0, 0, 1, 0x00, 0x15), 13,
	 B(REPLY_NONE, 0x05, 0x07, 0x00, ZERO_BND), PROTO_EV_CLOSE, 0, NULL, 0, -1, R_CMD, "socks5"},
	{"UDP ASSOCIATE not supported without allow_udp", USERS_NONE, false,
	 B(GREET_NONE, 0x05, 0x03, 0x00, 0x01, 0, 0, 0, 0, 0, 0), 13,
	 B(REPLY_NONE, 0x05, 0x07, 0x00, ZERO_BND), PROTO_EV_CLOSE, 0, NULL, 0, -1, R_CMD, "socks5"},
	{"UDP ASSOCIATE with allow_udp", USERS_NONE, true,
	 B(GREET_NONE, 0x05, 0x03, 0x00, 0x01, 0, 0, 0, 0, 0, 0), 13, B(REPLY_NONE), PROTO_EV_OPEN,
	 PROTO_CMD_UDP_ASSOCIATE, "0.0.0.0:0", ADDR_UDP, -1, NULL, "socks5"},
	{"UDP ASSOCIATE after authentication", USERS_TWO, true,
	 B(GREET_USERPASS, 0x01, 3, 'b', 'o', 'b', 7, 'h', 'u', 'n', 't', 'e', 'r', '2', 0x05, 0x03,
	   0x00, 0x01, 192, 168, 1, 7, 0x13, 0x88),
	 26, B(REPLY_USERPASS, 0x01, 0x00), PROTO_EV_OPEN, PROTO_CMD_UDP_ASSOCIATE, "192.168.1.7:5000",
	 ADDR_UDP, 1, NULL, "socks5"},
	{"address type not supported", USERS_NONE, false,
	 B(GREET_NONE, 0x05, 0x01, 0x00, 0x05, 1, 2, 3, 4, 0, 80), 7,
	 B(REPLY_NONE, 0x05, 0x08, 0x00, ZERO_BND), PROTO_EV_CLOSE, 0, NULL, 0, -1, R_ATYP, "socks5"},
	{"empty domain is malformed", USERS_NONE, false,
	 B(GREET_NONE, 0x05, 0x01, 0x00, 0x03, 0, 0x00, 0x50), PROTO_ERR_MALFORMED,
	 B(REPLY_NONE, 0x05, 0x01, 0x00, ZERO_BND), PROTO_EV_CLOSE, 0, NULL, 0, -1, R_DOMAIN, "socks5"},
	{"domain holding a NUL is malformed", USERS_NONE, false,
	 B(GREET_NONE, 0x05, 0x01, 0x00, 0x03, 3, 'a', 0, 'b', 0x00, 0x50), PROTO_ERR_MALFORMED,
	 B(REPLY_NONE, 0x05, 0x01, 0x00, ZERO_BND), PROTO_EV_CLOSE, 0, NULL, 0, -1, R_DOMAIN, "socks5"},
	{"request version other than 5", USERS_NONE, false,
	 B(GREET_NONE, 0x04, 0x01, 0x00, 0x01, 1, 2, 3, 4, 0, 80), PROTO_ERR_MALFORMED,
	 B(REPLY_NONE), PROTO_EV_CLOSE, 0, NULL, 0, -1, "socks: request version is not 5", "socks5"},
	{"pipelined payload left unconsumed", USERS_NONE, false, B(GREET_NONE, CONNECT_V4, PAYLOAD),
	 13, B(REPLY_NONE), PROTO_EV_OPEN, PROTO_CMD_CONNECT, "93.184.216.34:80", ADDR_TCP, -1, NULL,
	 "socks5"},
	{"pipelined auth, request and payload", USERS_TWO, false,
	 B(GREET_USERPASS, 0x01, 3, 'b', 'o', 'b', 7, 'h', 'u', 'n', 't', 'e', 'r', '2', 0x05, 0x01,
	   0x00, 0x03, 11, EXAMPLE_COM, 0x01, 0xbb, PAYLOAD),
	 34, B(REPLY_USERPASS, 0x01, 0x00), PROTO_EV_OPEN, PROTO_CMD_CONNECT, "example.com:443",
	 ADDR_TCP, 1, NULL, "socks5"},
	{"garbage first byte", USERS_NONE, false, B(PAYLOAD), PROTO_ERR_MALFORMED, EMPTY,
	 PROTO_EV_CLOSE, 0, NULL, 0, -1, "socks: unknown protocol version", "socks"},
	{"SOCKS4 CONNECT", USERS_NONE, false,
	 B(0x04, 0x01, 0x00, 0x50, 93, 184, 216, 34, 'f', 'r', 'e', 'd', 0, PAYLOAD), 13, EMPTY,
	 PROTO_EV_OPEN, PROTO_CMD_CONNECT, "93.184.216.34:80", ADDR_TCP, -1, NULL, "socks4"},
	{"SOCKS4 CONNECT with an empty user id", USERS_NONE, false,
	 B(0x04, 0x01, 0x1f, 0x90, 10, 1, 2, 3, 0), 9, EMPTY, PROTO_EV_OPEN, PROTO_CMD_CONNECT,
	 "10.1.2.3:8080", ADDR_TCP, -1, NULL, "socks4"},
	{"SOCKS4a CONNECT with a host name", USERS_NONE, false,
	 B(0x04, 0x01, 0x01, 0xbb, 0, 0, 0, 1, 'f', 'r', 'e', 'd', 0, EXAMPLE_COM, 0, PAYLOAD), 25,
	 EMPTY, PROTO_EV_OPEN, PROTO_CMD_CONNECT, "example.com:443", ADDR_TCP, -1, NULL, "socks4a"},
	{"SOCKS4a with an empty user id", USERS_NONE, false,
	 B(0x04, 0x01, 0x00, 0x50, 0, 0, 0, 0xff, 0, EXAMPLE_COM, 0), 21, EMPTY, PROTO_EV_OPEN,
	 PROTO_CMD_CONNECT, "example.com:80", ADDR_TCP, -1, NULL, "socks4a"},
	{"SOCKS4a empty host name", USERS_NONE, false, B(0x04, 0x01, 0x00, 0x50, 0, 0, 0, 1, 0, 0),
	 PROTO_ERR_MALFORMED, B(0x00, 0x5b, 0, 0, 0, 0, 0, 0), PROTO_EV_CLOSE, 0, NULL, 0, -1,
	 "socks4: empty host name", "socks4a"},
	{"SOCKS4 refused when accounts are configured", USERS_TWO, false,
	 B(0x04, 0x01, 0x00, 0x50, 93, 184, 216, 34, 0), 8, B(0x00, 0x5b, 0, 0, 0, 0, 0, 0),
	 PROTO_EV_CLOSE, 0, NULL, 0, -1,
	 "socks4: refused, accounts need SOCKS5 username/password authentication", "socks4"},
	{"SOCKS4 BIND refused", USERS_NONE, false, B(0x04, 0x02, 0x00, 0x50, 93, 184, 216, 34, 0), 8,
	 B(0x00, 0x5b, 0, 0, 0, 0, 0, 0), PROTO_EV_CLOSE, 0, NULL, 0, -1,
	 "socks4: command not supported", "socks4"},
};

static void feed_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++)
		run_case(&CASES[i]);
}

/* SOCKS4 fields at and one past their bounds (SOCKS4_USERID_MAX,
 * SOCKS4_HOST_MAX). */
static void socks4_field_bounds(void **state)
{
	(void)state;
	static const uint8_t rejected[] = {0x00, 0x5b, 0, 0, 0, 0, 0, 0};
	static uint8_t in[8 + 300 + 1 + 300 + 1 + sizeof "payload"];
	static char host[300];

	for (size_t userid = SOCKS4_USERID_MAX; userid <= SOCKS4_USERID_MAX + 1; userid++) {
		bool fits = userid <= SOCKS4_USERID_MAX;
		const uint8_t head[] = {0x04, 0x01, 0x00, 0x50, 10, 0, 0, 9};
		memcpy(in, head, 8);
		memset(in + 8, 'u', userid);
		in[8 + userid] = 0;
		memcpy(in + 9 + userid, "payload", 7);
		feed_case c = {"SOCKS4 user id at its bound", USERS_NONE, false, in, 9 + userid + 7,
		               (ssize_t)(9 + userid), NULL, 0, PROTO_EV_OPEN, PROTO_CMD_CONNECT,
		               "10.0.0.9:80", ADDR_TCP, -1, NULL, "socks4"};
		if (!fits) {
			c.name = "SOCKS4 oversize user id";
			c.ret = PROTO_ERR_TOO_BIG;
			c.reply = rejected;
			c.reply_len = sizeof rejected;
			c.kind = PROTO_EV_CLOSE;
			c.reason = "socks4: user id too long";
		}
		run_case(&c);
	}

	for (size_t hlen = SOCKS4_HOST_MAX; hlen <= SOCKS4_HOST_MAX + 1; hlen++) {
		bool fits = hlen <= SOCKS4_HOST_MAX;
		const uint8_t head[] = {0x04, 0x01, 0x00, 0x50, 0, 0, 0, 1, 'i', 'd', 0};
		memcpy(in, head, sizeof head);
		memset(in + sizeof head, 'h', hlen);
		in[sizeof head + hlen] = 0;
		int n = snprintf(host, sizeof host, "%.*s:80", (int)hlen, (const char *)in + sizeof head);
		assert_true(n > 0 && (size_t)n < sizeof host);
		feed_case c = {"SOCKS4a host name at its bound", USERS_NONE, false, in,
		               sizeof head + hlen + 1, (ssize_t)(sizeof head + hlen + 1), NULL, 0,
		               PROTO_EV_OPEN, PROTO_CMD_CONNECT, host, ADDR_TCP, -1, NULL, "socks4a"};
		if (!fits) {
			c.name = "SOCKS4a oversize host name";
			c.ret = PROTO_ERR_TOO_BIG;
			c.reply = rejected;
			c.reply_len = sizeof rejected;
			c.kind = PROTO_EV_CLOSE;
			c.reason = "socks4: host name too long";
		}
		run_case(&c);
	}
}

/* Brings a fresh core to PROTO_EV_OPEN with the given request. */
static void open_core(socks_server *s, bool allow_udp, const uint8_t *in, size_t len)
{
	proto_out out;
	proto_event ev;
	socks_server_init(s, NULL, 0, allow_udp);
	assert_int_equal(socks_server_feed(s, in, len, &out, &ev), (ssize_t)len);
	assert_int_equal(ev.kind, PROTO_EV_OPEN);
}

static const uint8_t V5_CONNECT[] = {GREET_NONE, CONNECT_V4};
static const uint8_t V5_UDP[] = {GREET_NONE, 0x05, 0x03, 0x00, 0x01, 0, 0, 0, 0, 0, 0};
static const uint8_t V4_CONNECT[] = {0x04, 0x01, 0x00, 0x50, 93, 184, 216, 34, 0};

static void failed_replies(void **state)
{
	(void)state;
	static const struct {
		proto_dial_error e;
		uint8_t rep;
	} map[] = {
		{PROTO_DIAL_GENERAL, 0x01},          {PROTO_DIAL_NOT_ALLOWED, 0x02},
		{PROTO_DIAL_NET_UNREACHABLE, 0x03},  {PROTO_DIAL_HOST_UNREACHABLE, 0x04},
		{PROTO_DIAL_REFUSED, 0x05},          {PROTO_DIAL_TIMED_OUT, 0x06},
	};
	for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
		socks_server s;
		proto_out out;
		addr_dest bound = {.kind = ADDR_IPV4, .port = 1};

		open_core(&s, false, V5_CONNECT, sizeof V5_CONNECT);
		assert_int_equal(socks_server_failed(&s, map[i].e, &out), 0);
		const uint8_t want5[] = {0x05, map[i].rep, 0x00, ZERO_BND};
		assert_int_equal(out.len, sizeof want5);
		assert_memory_equal(out.buf, want5, sizeof want5);
		assert_int_equal(socks_server_failed(&s, map[i].e, &out), PROTO_ERR_STATE);
		assert_int_equal(out.len, 0);
		assert_int_equal(socks_server_opened(&s, &bound, &out), PROTO_ERR_STATE);

		open_core(&s, false, V4_CONNECT, sizeof V4_CONNECT);
		assert_int_equal(socks_server_failed(&s, map[i].e, &out), 0);
		const uint8_t want4[] = {0x00, 0x5b, 0, 0, 0, 0, 0, 0};
		assert_int_equal(out.len, sizeof want4);
		assert_memory_equal(out.buf, want4, sizeof want4);
	}
}

static void opened_replies(void **state)
{
	(void)state;
	static const struct {
		const char *name;
		const uint8_t *req;
		size_t req_len;
		const char *bound; /* NULL: no bound address */
		uint8_t want[32];
		size_t want_len;
	} cases[] = {
		{"CONNECT, IPv4 bound", V5_CONNECT, sizeof V5_CONNECT, "10.0.0.1:40000",
		 {0x05, 0x00, 0x00, 0x01, 10, 0, 0, 1, 0x9c, 0x40}, 10},
		{"CONNECT, IPv6 bound", V5_CONNECT, sizeof V5_CONNECT, "[2001:db8::7]:443",
		 {0x05, 0x00, 0x00, 0x04, 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x07,
		  0x01, 0xbb},
		 22},
		{"CONNECT, domain bound", V5_CONNECT, sizeof V5_CONNECT, "relay.test:1080",
		 {0x05, 0x00, 0x00, 0x03, 10, 'r', 'e', 'l', 'a', 'y', '.', 't', 'e', 's', 't', 0x04, 0x38},
		 17},
		{"CONNECT, no bound address", V5_CONNECT, sizeof V5_CONNECT, NULL,
		 {0x05, 0x00, 0x00, ZERO_BND}, 10},
		{"UDP ASSOCIATE, the relay's address", V5_UDP, sizeof V5_UDP, "127.0.0.1:5353",
		 {0x05, 0x00, 0x00, 0x01, 127, 0, 0, 1, 0x14, 0xe9}, 10},
		{"SOCKS4, IPv4 bound", V4_CONNECT, sizeof V4_CONNECT, "10.0.0.1:40000",
		 {0x00, 0x5a, 0x9c, 0x40, 10, 0, 0, 1}, 8},
		{"SOCKS4, IPv6 bound", V4_CONNECT, sizeof V4_CONNECT, "[::1]:80",
		 {0x00, 0x5a, 0, 0, 0, 0, 0, 0}, 8},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		socks_server s;
		proto_out out;
		proto_event ev;
		addr_dest bound = {0};
		print_message("%s\n", cases[i].name);
		if (cases[i].bound)
			assert_int_equal(addr_dest_parse(&bound, cases[i].bound), 0);
		open_core(&s, true, cases[i].req, cases[i].req_len);
		assert_int_equal(socks_server_opened(&s, cases[i].bound ? &bound : NULL, &out), 0);
		assert_int_equal(out.len, cases[i].want_len);
		assert_memory_equal(out.buf, cases[i].want, cases[i].want_len);

		/* The relay state: no more feeding, no second reply. */
		assert_int_equal(socks_server_feed(&s, (const uint8_t *)"x", 1, &out, &ev),
		                 PROTO_ERR_STATE);
		assert_int_equal(out.len, 0);
		assert_int_equal(socks_server_opened(&s, &bound, &out), PROTO_ERR_STATE);
		assert_int_equal(socks_server_failed(&s, PROTO_DIAL_GENERAL, &out), PROTO_ERR_STATE);
	}
}

static void replies_out_of_order(void **state)
{
	(void)state;
	socks_server s;
	proto_out out;
	proto_event ev;
	addr_dest bound = {.kind = ADDR_IPV4};

	/* A zeroed struct is a start state too: no accounts, no UDP. */
	memset(&s, 0, sizeof s);
	assert_int_equal(socks_server_version(&s), 0);
	assert_int_equal(socks_server_opened(&s, &bound, &out), PROTO_ERR_STATE);
	assert_int_equal(socks_server_failed(&s, PROTO_DIAL_REFUSED, &out), PROTO_ERR_STATE);
	assert_int_equal(socks_server_feed(&s, V5_CONNECT, 3, &out, &ev), 3);
	assert_int_equal(socks_server_version(&s), 5);
	assert_int_equal(socks_server_opened(&s, &bound, &out), PROTO_ERR_STATE);
	assert_int_equal(out.len, 0);

	/* While the dial runs, the bytes that follow are payload, not the core's. */
	assert_int_equal(socks_server_feed(&s, V5_CONNECT + 3, 10, &out, &ev), 10);
	assert_int_equal(ev.kind, PROTO_EV_OPEN);
	assert_int_equal(socks_server_feed(&s, V5_CONNECT, 1, &out, &ev), PROTO_ERR_STATE);
	assert_int_equal(socks_server_opened(&s, &bound, &out), 0);

	open_core(&s, false, V4_CONNECT, sizeof V4_CONNECT);
	assert_int_equal(socks_server_version(&s), 4);
}

/* UDP request headers (RFC 1928 section 7). */
static const struct {
	const char *peer;
	uint8_t header[32];
	size_t len;
} UDP_HEADERS[] = {
	{"1.2.3.4:53", {0, 0, 0, 0x01, 1, 2, 3, 4, 0x00, 0x35}, 10},
	{"[2001:db8::2]:443",
	 {0, 0, 0, 0x04, 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, 0x01, 0xbb},
	 22},
	{"example.com:8080", {0, 0, 0, 0x03, 11, EXAMPLE_COM, 0x1f, 0x90}, 18},
};

static void udp_round_trip(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof UDP_HEADERS / sizeof UDP_HEADERS[0]; i++) {
		addr_dest peer = {.network = ADDR_UDP}, got;
		uint8_t pkt[64];
		char text[ADDR_TEXT_MAX];
		size_t n = UDP_HEADERS[i].len;

		assert_int_equal(addr_dest_parse(&peer, UDP_HEADERS[i].peer), 0);
		assert_int_equal(socks_udp_encode(&peer, pkt, sizeof pkt), (ssize_t)n);
		assert_memory_equal(pkt, UDP_HEADERS[i].header, n);
		memcpy(pkt + n, "hello", 5);

		memset(&got, 0xaa, sizeof got);
		assert_int_equal(socks_udp_decode(pkt, n + 5, &got), (ssize_t)n);
		assert_int_equal(got.network, ADDR_UDP);
		assert_int_equal(got.kind, peer.kind);
		addr_dest_format(&got, text, sizeof text);
		assert_string_equal(text, UDP_HEADERS[i].peer);

		/* An empty payload is a datagram too. */
		assert_int_equal(socks_udp_decode(pkt, n, &got), (ssize_t)n);

		/* Every shorter prefix is truncated. */
		for (size_t k = 0; k < n; k++)
			assert_int_equal(socks_udp_decode(pkt, k, &got), PROTO_ERR_MALFORMED);

		/* Every cap below the header's length is too small. */
		for (size_t cap = 0; cap < n; cap++)
			assert_int_equal(socks_udp_encode(&peer, pkt, cap), PROTO_ERR_TOO_BIG);
	}
}

static void udp_refusals(void **state)
{
	(void)state;
	static const struct {
		const char *name;
		uint8_t pkt[16];
		size_t len;
	} bad[] = {
		{"FRAG 1", {0, 0, 1, 0x01, 1, 2, 3, 4, 0, 53, 'x'}, 11},
		{"FRAG 0x80 (end of a sequence)", {0, 0, 0x80, 0x01, 1, 2, 3, 4, 0, 53, 'x'}, 11},
		{"RSV not zero", {0, 1, 0, 0x01, 1, 2, 3, 4, 0, 53, 'x'}, 11},
		{"RSV high byte not zero", {1, 0, 0, 0x01, 1, 2, 3, 4, 0, 53, 'x'}, 11},
		{"unknown ATYP", {0, 0, 0, 0x02, 1, 2, 3, 4, 0, 53, 'x'}, 11},
		{"empty domain", {0, 0, 0, 0x03, 0, 0, 53, 'x'}, 8},
		{"domain holding a NUL", {0, 0, 0, 0x03, 2, 'a', 0, 0, 53, 'x'}, 10},
		{"domain longer than the packet", {0, 0, 0, 0x03, 9, 'a', 'b', 0, 53}, 9},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		addr_dest d = {.kind = ADDR_IPV4, .port = 7};
		print_message("%s\n", bad[i].name);
		assert_int_equal(socks_udp_decode(bad[i].pkt, bad[i].len, &d), PROTO_ERR_MALFORMED);
		assert_int_equal(d.kind, ADDR_IPV4); /* left unchanged */
		assert_int_equal(d.port, 7);
	}

	addr_dest unset = {0};
	uint8_t out[SOCKS_UDP_HEADER_MAX];
	assert_int_equal(socks_udp_encode(&unset, out, sizeof out), PROTO_ERR_MALFORMED);

	/* The longest header is SOCKS_UDP_HEADER_MAX and fits exactly. */
	addr_dest longest = {.network = ADDR_UDP};
	char name[ADDR_DOMAIN_MAX];
	memset(name, 'n', sizeof name);
	assert_int_equal(addr_dest_set_domain(&longest, name, sizeof name, 9), 0);
	assert_int_equal(socks_udp_encode(&longest, out, sizeof out), SOCKS_UDP_HEADER_MAX);
	addr_dest back;
	assert_int_equal(socks_udp_decode(out, sizeof out, &back), SOCKS_UDP_HEADER_MAX);
	assert_int_equal(back.u.domain.len, ADDR_DOMAIN_MAX);
	assert_int_equal(back.port, 9);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(feed_table),
		cmocka_unit_test(socks4_field_bounds),
		cmocka_unit_test(failed_replies),
		cmocka_unit_test(opened_replies),
		cmocka_unit_test(replies_out_of_order),
		cmocka_unit_test(udp_round_trip),
		cmocka_unit_test(udp_refusals),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
