/* test_socks_client.c - the SOCKS5 client layers against hand-written server bytes (whole, byte by byte, cut in two) and against the SOCKS server core. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "layerdrive.h"

#include "proto/socks.h"
#include "proto/socks_client.h"

#define B(...) (const uint8_t[]){__VA_ARGS__}, sizeof((const uint8_t[]){__VA_ARGS__})

/* drive_layer (layerdrive.h), then what only this module tells. */
static void drive(layer *l, const uint8_t *srv, size_t len, size_t step, size_t cut, outcome *o)
{
	drive_layer(l, srv, len, step, cut, o);
	o->in_handshake = socks_client_in_handshake(l);
	const addr_dest *relay = socks_client_relay(l);
	if (relay)
		addr_dest_format(relay, o->relay, sizeof o->relay);
}

enum kind { K_CONNECT_V4, K_CONNECT_DOMAIN, K_UDP };

typedef struct client_case {
	const char *name;
	enum kind kind;
	bool creds;
	const uint8_t *server; /* every byte the server sends */
	size_t server_len;
	const uint8_t *sent; /* every byte the client should have sent */
	size_t sent_len;
	int err;
	const char *text;
	const char *up;    /* app bytes passed up */
	const char *relay; /* UDP: the relay, "" for none */
} client_case;

#define GREET_NONE 0x05, 0x01, 0x00
#define GREET_AUTH 0x05, 0x01, 0x02
#define AUTH_ALICE 0x01, 5, 'a', 'l', 'i', 'c', 'e', 6, 's', 'e', 'c', 'r', 'e', 't'
#define REQ_V4 0x05, 0x01, 0x00, 0x01, 93, 184, 216, 34, 0x00, 0x50
#define REQ_DOMAIN 0x05, 0x01, 0x00, 0x03, 11, 'e', 'x', 'a', 'm', 'p', 'l', 'e', '.', 'c', 'o', 'm', 0x01, 0xbb
#define REQ_UDP 0x05, 0x03, 0x00, 0x01, 0, 0, 0, 0, 0, 0
#define OK_V4 0x05, 0x00, 0x00, 0x01, 10, 0, 0, 1, 0x23, 0x28

static const client_case CASES[] = {
	{"no auth, CONNECT, app bytes after the reply", K_CONNECT_V4, false,
	 B(0x05, 0x00, OK_V4, 'd', 'a', 't', 'a'), B(GREET_NONE, REQ_V4), 0, NULL, "data", ""},
	{"BND as a domain is skipped", K_CONNECT_DOMAIN, false,
	 B(0x05, 0x00, 0x05, 0x00, 0x00, 0x03, 3, 'b', 'n', 'd', 0, 1, 'x'), B(GREET_NONE, REQ_DOMAIN),
	 0, NULL, "x", ""},
	{"BND as IPv6 is skipped", K_CONNECT_V4, false,
	 B(0x05, 0x00, 0x05, 0x00, 0x00, 0x04, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1),
	 B(GREET_NONE, REQ_V4), 0, NULL, "", ""},
	{"RFC 1929 account accepted", K_CONNECT_V4, true, B(0x05, 0x02, 0x01, 0x00, OK_V4),
	 B(GREET_AUTH, AUTH_ALICE, REQ_V4), 0, NULL, "", ""},
	{"account status with VER 5 (a common quirk)", K_CONNECT_V4, true,
	 B(0x05, 0x02, 0x05, 0x00, OK_V4), B(GREET_AUTH, AUTH_ALICE, REQ_V4), 0, NULL, "", ""},
	{"no acceptable method", K_CONNECT_V4, false, B(0x05, 0xff), B(GREET_NONE), LAYER_ERR_AUTH,
	 "auth method not supported", "", ""},
	{"a method we did not offer", K_CONNECT_V4, false, B(0x05, 0x02), B(GREET_NONE),
	 LAYER_ERR_AUTH, "auth method not supported", "", ""},
	{"no auth chosen when we offered only 0x02", K_CONNECT_V4, true, B(0x05, 0x00),
	 B(GREET_AUTH), LAYER_ERR_AUTH, "auth method not supported", "", ""},
	{"account refused", K_CONNECT_V4, true, B(0x05, 0x02, 0x01, 0x01), B(GREET_AUTH, AUTH_ALICE),
	 LAYER_ERR_AUTH, "server rejects account", "", ""},
	{"request refused: connection refused", K_CONNECT_V4, false,
	 B(0x05, 0x00, 0x05, 0x05, 0x00, 0x01, 0, 0, 0, 0, 0, 0), B(GREET_NONE, REQ_V4), LAYER_ERR_AUTH,
	 "server rejects request: 5", "", ""},
	{"request refused before the rest of the reply", K_CONNECT_V4, false,
	 B(0x05, 0x00, 0x05, 0x02), B(GREET_NONE, REQ_V4), LAYER_ERR_AUTH,
	 "server rejects request: 2", "", ""},
	{"not a SOCKS5 server", K_CONNECT_V4, false, B('H', 'T', 'T', 'P'), B(GREET_NONE),
	 LAYER_ERR_PROTO, "socks: malformed server reply", "", ""},
	{"reply with VER 4", K_CONNECT_V4, false, B(0x05, 0x00, 0x04, 0x00), B(GREET_NONE, REQ_V4),
	 LAYER_ERR_PROTO, "socks: malformed server reply", "", ""},
	{"reply with an unknown ATYP", K_CONNECT_V4, false, B(0x05, 0x00, 0x05, 0x00, 0x00, 0x09),
	 B(GREET_NONE, REQ_V4), LAYER_ERR_PROTO, "socks: malformed server reply", "", ""},
	{"handshake not finished", K_CONNECT_V4, false, B(0x05, 0x00, 0x05, 0x00, 0x00, 0x01, 10),
	 B(GREET_NONE, REQ_V4), 0, NULL, "", ""},
	{"UDP ASSOCIATE: the relay", K_UDP, false, B(0x05, 0x00, OK_V4), B(GREET_NONE, REQ_UDP), 0,
	 NULL, "", "10.0.0.1:9000"},
	{"UDP ASSOCIATE with an account, IPv6 relay", K_UDP, true,
	 B(0x05, 0x02, 0x01, 0x00, 0x05, 0x00, 0x00, 0x04, 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0,
	   0, 0, 0, 0, 7, 0x13, 0x88),
	 B(GREET_AUTH, AUTH_ALICE, REQ_UDP), 0, NULL, "", "[2001:db8::7]:5000"},
	{"UDP ASSOCIATE: a domain relay", K_UDP, false,
	 B(0x05, 0x00, 0x05, 0x00, 0x00, 0x03, 4, 'h', 'o', 's', 't', 0, 1), B(GREET_NONE, REQ_UDP),
	 LAYER_ERR_PROTO, "socks: the relay address is a domain", "", ""},
	{"UDP ASSOCIATE refused as an Etemenanki upstream does", K_UDP, false,
	 B(0x05, 0x00, 0x05, 0x02, 0x00, 0x01, 0, 0, 0, 0, 0, 0), B(GREET_NONE, REQ_UDP),
	 LAYER_ERR_AUTH, "server rejects request: 2", "", ""},
};

static layer *make(const client_case *c)
{
	const char *u = c->creds ? "alice" : NULL, *p = c->creds ? "secret" : NULL;
	if (c->kind == K_UDP)
		return socks_client_udp_new(u, p);
	addr_dest d = {.kind = ADDR_IPV4, .port = 80, .u.v4 = {93, 184, 216, 34}};
	if (c->kind == K_CONNECT_DOMAIN)
		assert_int_equal(addr_dest_set_domain(&d, "example.com", 11, 443), 0);
	return socks_client_new(&d, u, p);
}

static void check(const client_case *c, const outcome *o)
{
	assert_int_equal(o->err, c->err);
	if (c->text)
		assert_string_equal(o->text, c->text);
	else
		assert_null(o->text);
	assert_int_equal(o->sent_len, c->sent_len);
	assert_memory_equal(o->sent, c->sent, c->sent_len);
	assert_int_equal(o->up_len, strlen(c->up));
	assert_memory_equal(o->up, c->up, o->up_len);
	assert_string_equal(o->relay, c->relay);
	assert_true(!(o->ready && o->err));
	assert_int_equal(o->in_handshake, !o->ready && !o->err);
	/* past the CONNECT reply bytes cross unchanged; an association's
	 * layer stays, as its owner reads the relay from it */
	assert_int_equal(o->passthrough, o->ready && c->kind != K_UDP);
}

static void client_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
		const client_case *c = &CASES[i];
		outcome whole, other;
		print_message("%s\n", c->name);
		layer *l = make(c);
		assert_non_null(l);
		drive(l, c->server, c->server_len, 0, 0, &whole);
		check(c, &whole);
		l->ops->free(l);

		l = make(c);
		drive(l, c->server, c->server_len, 1, 0, &other);
		same(&whole, &other);
		l->ops->free(l);

		for (size_t cut = 1; cut < c->server_len; cut++) {
			l = make(c);
			drive(l, c->server, c->server_len, 0, cut, &other);
			same(&whole, &other);
			l->ops->free(l);
		}
	}
}

/* A layer does not see EOF: socks_client_eof maps it. */
static void eof_mapping(void **state)
{
	(void)state;
	addr_dest d = {.kind = ADDR_IPV4, .port = 80, .u.v4 = {1, 1, 1, 1}};
	layer *l = socks_client_new(&d, NULL, NULL);
	outcome o;
	drive(l, (const uint8_t[]){0x05, 0x00, 0x05}, 3, 0, 0, &o);
	assert_true(socks_client_in_handshake(l));
	assert_int_equal(socks_client_eof(l), LAYER_ERR_CLOSED);
	assert_string_equal(l->ops->error(l), "socks: server closed during the handshake");
	assert_false(socks_client_in_handshake(l));
	assert_false(l->ops->ready(l));
	uint8_t buf[8];
	layer_buf down = {.data = buf, .cap = sizeof buf}, up = down;
	assert_int_equal(l->ops->from_below(l, buf, 0, &up, &down), LAYER_ERR_CLOSED);
	l->ops->free(l);

	/* After the handshake an EOF is just the stream's end. */
	l = socks_client_new(&d, NULL, NULL);
	drive(l, (const uint8_t[]){0x05, 0x00, OK_V4}, 12, 0, 0, &o);
	assert_true(o.ready);
	assert_int_equal(socks_client_eof(l), 0);
	assert_null(l->ops->error(l));
	l->ops->free(l);

	/* Before start too it counts as during the handshake. */
	l = socks_client_udp_new(NULL, NULL);
	assert_true(socks_client_in_handshake(l));
	assert_null(socks_client_relay(l));
	assert_int_equal(socks_client_eof(l), LAYER_ERR_CLOSED);
	l->ops->free(l);
}

static void credentials_and_dest(void **state)
{
	(void)state;
	char longname[300];
	memset(longname, 'u', sizeof longname - 1);
	longname[sizeof longname - 1] = '\0';
	addr_dest d = {.kind = ADDR_IPV4, .port = 80, .u.v4 = {1, 1, 1, 1}};
	layer *l = socks_client_new(&d, longname, "p");
	assert_non_null(l);
	uint8_t buf[64];
	layer_buf down = {.data = buf, .cap = sizeof buf};
	assert_int_equal(l->ops->start(l, &down), LAYER_ERR_PROTO);
	assert_string_equal(l->ops->error(l), "socks: username or password longer than 255 bytes");
	assert_int_equal(down.len, 0);
	l->ops->free(l);

	/* An empty username means no credentials; a NULL password is empty. */
	l = socks_client_new(&d, "", "ignored");
	down.len = 0;
	assert_int_equal(l->ops->start(l, &down), 0);
	assert_memory_equal(down.data, ((const uint8_t[]){0x05, 0x01, 0x00}), 3);
	l->ops->free(l);
	outcome o;
	l = socks_client_new(&d, "bob", NULL);
	drive(l, (const uint8_t[]){0x05, 0x02, 0x01, 0x00}, 4, 0, 0, &o);
	assert_memory_equal(o.sent + 3, ((const uint8_t[]){0x01, 3, 'b', 'o', 'b', 0}), 6);
	l->ops->free(l);

	addr_dest unset = {0};
	assert_null(socks_client_new(&unset, NULL, NULL));
}

/* Nothing goes up, and app bytes are not taken, before ready; a small
 * buffer below gets the request in pieces. */
static void before_ready_and_small_buffer(void **state)
{
	(void)state;
	addr_dest d = {0};
	assert_int_equal(addr_dest_set_domain(&d, "example.com", 11, 443), 0);
	layer *l = socks_client_new(&d, "alice", "secret");
	uint8_t dbuf[4], ubuf[16];
	uint8_t sent[64];
	size_t n_sent = 0;
	layer_buf down = {.data = dbuf, .cap = sizeof dbuf}, up = {.data = ubuf, .cap = sizeof ubuf};
	assert_int_equal(l->ops->start(l, &down), 0);
	assert_int_equal(l->ops->from_above(l, (const uint8_t *)"app", 3, &down), 0);
	memcpy(sent, down.data, down.len);
	n_sent = down.len;
	static const uint8_t replies[] = {0x05, 0x02, 0x01, 0x00, OK_V4};
	size_t fed = 0;
	for (int i = 0; i < 100 && !l->ops->ready(l); i++) {
		assert_false(l->ops->passthrough(l));
		down.len = 0;
		/* The server answers each message once it has it whole. */
		size_t give = 0;
		if (n_sent >= 3 && fed < 2)
			give = 2;
		else if (n_sent >= 3 + 14 && fed < 4)
			give = 2;
		else if (n_sent >= 3 + 14 + 18 && fed < 14)
			give = 10;
		ssize_t r = l->ops->from_below(l, replies + fed, give, &up, &down);
		assert_int_equal(r, give);
		fed += give;
		memcpy(sent + n_sent, down.data, down.len);
		n_sent += down.len;
	}
	assert_true(l->ops->ready(l));
	assert_true(l->ops->passthrough(l));
	assert_int_equal(n_sent, 3 + 14 + 18);
	assert_memory_equal(sent, ((const uint8_t[]){GREET_AUTH, AUTH_ALICE, REQ_DOMAIN}), n_sent);
	assert_int_equal(up.len, 0);
	down.len = 0;
	assert_int_equal(l->ops->from_above(l, (const uint8_t *)"app", 3, &down), 3);
	l->ops->free(l);
}

/* A server that answers everything at once, before a 4-byte window below
 * has carried our messages: each reply waits for its message to be out. */
static void replies_ahead_of_messages(void **state)
{
	(void)state;
	addr_dest d = {.kind = ADDR_IPV4, .port = 80, .u.v4 = {93, 184, 216, 34}};
	layer *l = socks_client_new(&d, "alice", "secret");
	static const uint8_t replies[] = {0x05, 0x02, 0x01, 0x00, OK_V4, 'x', 'y'};
	uint8_t dbuf[4], ubuf[16], sent[64];
	size_t n_sent = 0, held = 0;
	layer_buf down = {.data = dbuf, .cap = sizeof dbuf}, up = {.data = ubuf, .cap = sizeof ubuf};
	assert_int_equal(l->ops->start(l, &down), 0);
	for (int i = 0; i < 100 && held < sizeof replies; i++) {
		memcpy(sent + n_sent, down.data, down.len);
		n_sent += down.len;
		down.len = 0;
		ssize_t r = l->ops->from_below(l, replies + held, sizeof replies - held, &up, &down);
		assert_true(r >= 0);
		held += (size_t)r;
	}
	memcpy(sent + n_sent, down.data, down.len);
	n_sent += down.len;
	assert_true(l->ops->ready(l));
	assert_int_equal(n_sent, 3 + 14 + 10);
	assert_memory_equal(sent, ((const uint8_t[]){GREET_AUTH, AUTH_ALICE, REQ_V4}), n_sent);
	assert_int_equal(up.len, 2);
	assert_memory_equal(up.data, "xy", 2);
	l->ops->free(l);
}

/* ---- against the SOCKS server core ---- */

static const proto_account ACCOUNTS[] = {
	{.user = "alice", .pass = "secret", .user_len = 5, .pass_len = 6},
};

/* Runs client l against a server core until both are done. Returns the
 * server's event; *bound is passed to socks_server_opened. */
static proto_event exchange(layer *l, socks_server *s, const addr_dest *bound)
{
	uint8_t dbuf[1024], ubuf[64];
	layer_buf down = {.data = dbuf, .cap = sizeof dbuf}, up = {.data = ubuf, .cap = sizeof ubuf};
	proto_event ev = {0};
	proto_out out;
	assert_int_equal(l->ops->start(l, &down), 0);
	for (int round = 0; round < 8; round++) {
		ssize_t n = socks_server_feed(s, down.data, down.len, &out, &ev);
		down.len = 0;
		if (ev.kind == PROTO_EV_OPEN) {
			assert_true(n >= 0);
			assert_int_equal(socks_server_opened(s, bound, &out), 0);
		}
		if (out.len == 0)
			break;
		ssize_t r = l->ops->from_below(l, out.buf, out.len, &up, &down);
		if (r < 0 || ev.kind != PROTO_EV_NONE || n < 0)
			break;
		assert_int_equal(r, out.len);
	}
	return ev;
}

static void against_server_core(void **state)
{
	(void)state;
	addr_dest dests[3] = {{.kind = ADDR_IPV4, .port = 80, .u.v4 = {192, 0, 2, 1}},
	                      {.kind = ADDR_IPV6, .port = 443, .u.v6 = {0x20, 0x01, [15] = 9}},
	                      {0}};
	assert_int_equal(addr_dest_set_domain(&dests[2], "example.org", 11, 8080), 0);
	addr_dest bound = {.kind = ADDR_IPV4, .port = 1080, .u.v4 = {127, 0, 0, 1}};
	for (size_t d = 0; d < 3; d++)
		for (int creds = 0; creds < 2; creds++) {
			layer *l = socks_client_new(&dests[d], creds ? "alice" : NULL,
			                            creds ? "secret" : NULL);
			socks_server s;
			socks_server_init(&s, creds ? ACCOUNTS : NULL, creds ? 1 : 0, false);
			proto_event ev = exchange(l, &s, &bound);
			assert_int_equal(ev.kind, PROTO_EV_OPEN);
			assert_int_equal(ev.cmd, PROTO_CMD_CONNECT);
			char a[ADDR_TEXT_MAX], b[ADDR_TEXT_MAX];
			addr_dest_format(&ev.dest, a, sizeof a);
			addr_dest_format(&dests[d], b, sizeof b);
			assert_string_equal(a, b);
			assert_int_equal(ev.user, creds ? 0 : -1);
			assert_true(l->ops->ready(l));
			l->ops->free(l);
		}

	/* UDP ASSOCIATE: the client names 0.0.0.0:0 and learns the relay. */
	addr_dest relay = {.kind = ADDR_IPV4, .network = ADDR_UDP, .port = 40000,
	                   .u.v4 = {127, 0, 0, 1}};
	layer *l = socks_client_udp_new("alice", "secret");
	socks_server s;
	socks_server_init(&s, ACCOUNTS, 1, true);
	proto_event ev = exchange(l, &s, &relay);
	assert_int_equal(ev.kind, PROTO_EV_OPEN);
	assert_int_equal(ev.cmd, PROTO_CMD_UDP_ASSOCIATE);
	char text[ADDR_TEXT_MAX];
	addr_dest_format(&ev.dest, text, sizeof text);
	assert_string_equal(text, "0.0.0.0:0");
	assert_true(l->ops->ready(l));
	assert_non_null(socks_client_relay(l));
	addr_dest_format(socks_client_relay(l), text, sizeof text);
	assert_string_equal(text, "127.0.0.1:40000");
	assert_int_equal(socks_client_relay(l)->network, ADDR_UDP);
	l->ops->free(l);

	/* A wrong password, and a server without UDP. */
	l = socks_client_new(&dests[0], "alice", "wrong");
	socks_server_init(&s, ACCOUNTS, 1, false);
	ev = exchange(l, &s, &bound);
	assert_int_equal(ev.kind, PROTO_EV_CLOSE);
	assert_string_equal(l->ops->error(l), "server rejects account");
	l->ops->free(l);

	l = socks_client_udp_new(NULL, NULL);
	socks_server_init(&s, NULL, 0, false);
	ev = exchange(l, &s, &relay);
	assert_string_equal(l->ops->error(l), "server rejects request: 7");
	l->ops->free(l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(client_table),
		cmocka_unit_test(eof_mapping),
		cmocka_unit_test(credentials_and_dest),
		cmocka_unit_test(before_ready_and_small_buffer),
		cmocka_unit_test(replies_ahead_of_messages),
		cmocka_unit_test(against_server_core),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
