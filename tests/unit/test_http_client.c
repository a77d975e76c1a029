/* test_http_client.c - the HTTP CONNECT client layer against hand-written proxy responses (whole, byte by byte, cut in two) and against the HTTP proxy core. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "layerdrive.h"

#include "proto/http_client.h"
#include "proto/http_proxy.h"

#define S(lit) (const uint8_t *)(lit), sizeof(lit) - 1

/* drive_layer (layerdrive.h), then what only this module tells. */
static void drive(layer *l, const uint8_t *srv, size_t len, size_t step, size_t cut, outcome *o)
{
	drive_layer(l, srv, len, step, cut, o);
	o->in_handshake = http_client_in_handshake(l);
}

static const char REQ_V4[] = "CONNECT 93.184.216.34:443 HTTP/1.1\r\n"
                             "Host: 93.184.216.34:443\r\n"
                             "\r\n";

typedef struct response_case {
	const char *name;
	const uint8_t *server;
	size_t server_len;
	int err;
	const char *text;
	bool ready;
	const char *up;
} response_case;

static const response_case CASES[] = {
	{"200, tunnel bytes after the head",
	 S("HTTP/1.1 200 Connection established\r\n\r\nDATA"), 0, NULL, true, "DATA"},
	{"any 2xx; its Content-Length is ignored",
	 S("HTTP/1.0 204 No Content\r\nContent-Length: 5\r\n\r\nabc"), 0, NULL, true, "abc"},
	{"interim 100 and 103 skipped",
	 S("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
	   "HTTP/1.1 200 OK\r\n\r\nX"),
	 0, NULL, true, "X"},
	{"407", S("HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic\r\n\r\n"),
	 LAYER_ERR_AUTH, "http: CONNECT refused: 407 Proxy Authentication Required", false, ""},
	{"a refusal decided before its body", S("HTTP/1.1 502 Bad Gateway\r\nContent-Length: 99\r\n\r\n"),
	 LAYER_ERR_AUTH, "http: CONNECT refused: 502 Bad Gateway", false, ""},
	{"no reason phrase", S("HTTP/1.1 403\r\n\r\n"), LAYER_ERR_AUTH, "http: CONNECT refused: 403",
	 false, ""},
	{"an empty reason phrase", S("HTTP/1.1 403 \r\n\r\n"), LAYER_ERR_AUTH,
	 "http: CONNECT refused: 403", false, ""},
	{"a reason outside ASCII", S("HTTP/1.1 502 Passerelle \xc3\xa9\r\n\r\n"), LAYER_ERR_AUTH,
	 "http: CONNECT refused: 502 Passerelle ??", false, ""},
	{"a 3xx is a refusal", S("HTTP/1.1 301 Moved\r\nLocation: /\r\n\r\n"), LAYER_ERR_AUTH,
	 "http: CONNECT refused: 301 Moved", false, ""},
	{"101 cannot answer CONNECT", S("HTTP/1.1 101 Switching Protocols\r\n\r\n"), LAYER_ERR_AUTH,
	 "http: CONNECT refused: 101 Switching Protocols", false, ""},
	{"not HTTP", S("SSH-2.0-OpenSSH_9.2\r\n\r\n"), LAYER_ERR_PROTO,
	 "http: malformed response from the proxy", false, ""},
	{"bare LF line ends", S("HTTP/1.1 200 OK\n\n"), LAYER_ERR_PROTO,
	 "http: malformed response from the proxy", false, ""},
	{"HTTP/2 status line", S("HTTP/2.0 200 OK\r\n\r\n"), LAYER_ERR_PROTO,
	 "http: malformed response from the proxy", false, ""},
	{"head not finished", S("HTTP/1.1 200 OK\r\nVia: x\r\n"), 0, NULL, false, ""},
};

static layer *make_v4(void)
{
	addr_dest d = {.kind = ADDR_IPV4, .port = 443, .u.v4 = {93, 184, 216, 34}};
	return http_client_new(&d, NULL, NULL);
}

static void check(const response_case *c, const outcome *o)
{
	assert_int_equal(o->err, c->err);
	if (c->text)
		assert_string_equal(o->text, c->text);
	else
		assert_null(o->text);
	assert_int_equal(o->ready, c->ready);
	assert_int_equal(o->passthrough, c->ready); /* past the 2xx head, bytes cross unchanged */
	assert_int_equal(o->in_handshake, !c->ready && !c->err);
	assert_int_equal(o->sent_len, sizeof REQ_V4 - 1);
	assert_memory_equal(o->sent, REQ_V4, o->sent_len);
	assert_int_equal(o->up_len, strlen(c->up));
	assert_memory_equal(o->up, c->up, o->up_len);
}

static void response_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
		const response_case *c = &CASES[i];
		outcome whole, other;
		print_message("%s\n", c->name);
		layer *l = make_v4();
		assert_non_null(l);
		drive(l, c->server, c->server_len, 0, 0, &whole);
		check(c, &whole);
		l->ops->free(l);

		l = make_v4();
		drive(l, c->server, c->server_len, 1, 0, &other);
		same(&whole, &other);
		l->ops->free(l);

		for (size_t cut = 1; cut < c->server_len; cut++) {
			l = make_v4();
			drive(l, c->server, c->server_len, 0, cut, &other);
			same(&whole, &other);
			l->ops->free(l);
		}
	}
}

/* The head is bounded by HTTP_CLIENT_HEAD_MAX; a long reason is cut. */
static void head_bounds(void **state)
{
	(void)state;
	static uint8_t big[HTTP_CLIENT_HEAD_MAX + 64];
	static const char start[] = "HTTP/1.1 200 OK\r\n";
	size_t n = 0;
	memcpy(big, start, sizeof start - 1);
	n = sizeof start - 1;
	/* Filler fields up to exactly the bound, blank line included. */
	while (n + 4 < HTTP_CLIENT_HEAD_MAX) {
		size_t room = HTTP_CLIENT_HEAD_MAX - 2 - n; /* keep 2 for the blank line */
		size_t line = room > 200 ? 200 : room; /* under HTTP_FIELDS_MAX lines */
		if (line < 5)
			break;
		memcpy(big + n, "X:", 2);
		memset(big + n + 2, 'v', line - 4);
		memcpy(big + n + line - 2, "\r\n", 2);
		n += line;
	}
	memcpy(big + n, "\r\n", 2);
	n += 2;
	assert_int_equal(n, HTTP_CLIENT_HEAD_MAX);
	memcpy(big + n, "tail", 4);

	outcome o;
	layer *l = make_v4();
	drive(l, big, n + 4, 0, 0, &o);
	assert_true(o.ready);
	assert_int_equal(o.up_len, 4);
	l->ops->free(l);

	/* One byte more and the head no longer fits. */
	memmove(big + 20, big + 19, n + 4 - 19);
	big[19] = 'v';
	l = make_v4();
	drive(l, big, n + 5, 0, 0, &o);
	assert_int_equal(o.err, LAYER_ERR_PROTO);
	assert_string_equal(o.text, "http: response head too large");
	l->ops->free(l);
	l = make_v4();
	drive(l, big, n + 5, 97, 0, &o);
	assert_int_equal(o.err, LAYER_ERR_PROTO);
	assert_string_equal(o.text, "http: response head too large");
	l->ops->free(l);

	char reason[300];
	memset(reason, 'r', sizeof reason);
	char resp[400];
	int len = snprintf(resp, sizeof resp, "HTTP/1.1 500 %.*s\r\n\r\n", 200, reason);
	l = make_v4();
	drive(l, (const uint8_t *)resp, (size_t)len, 0, 0, &o);
	assert_int_equal(o.err, LAYER_ERR_AUTH);
	assert_int_equal(strlen(o.text), strlen("http: CONNECT refused: 500 ") + HTTP_CLIENT_REASON_MAX);
	l->ops->free(l);
}

static void request_bytes(void **state)
{
	(void)state;
	static const struct {
		addr_dest dest;
		const char *domain;
		const char *user, *pass;
		const char *want;
	} v[] = {
		{{.kind = ADDR_IPV6, .port = 443, .u.v6 = {0x20, 0x01, 0x0d, 0xb8, [15] = 1}}, NULL, NULL,
		 NULL, "CONNECT [2001:db8::1]:443 HTTP/1.1\r\nHost: [2001:db8::1]:443\r\n\r\n"},
		{{0}, "example.com", "alice", "secret",
		 "CONNECT example.com:8443 HTTP/1.1\r\nHost: example.com:8443\r\n"
		 "Proxy-Authorization: Basic YWxpY2U6c2VjcmV0\r\n\r\n"},
		{{0}, "a-b.example_x~", "a", NULL,
		 "CONNECT a-b.example_x~:8443 HTTP/1.1\r\nHost: a-b.example_x~:8443\r\n"
		 "Proxy-Authorization: Basic YTo=\r\n\r\n"},
		{{0}, "h", "ab", "c",
		 "CONNECT h:8443 HTTP/1.1\r\nHost: h:8443\r\nProxy-Authorization: Basic YWI6Yw==\r\n\r\n"},
		{{0}, "h", "", "ignored", "CONNECT h:8443 HTTP/1.1\r\nHost: h:8443\r\n\r\n"},
	};
	for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
		addr_dest d = v[i].dest;
		if (v[i].domain)
			assert_int_equal(addr_dest_set_domain(&d, v[i].domain, strlen(v[i].domain), 8443), 0);
		layer *l = http_client_new(&d, v[i].user, v[i].pass);
		assert_non_null(l);
		assert_string_equal(l->ops->name, "http");
		uint8_t buf[1024];
		layer_buf down = {.data = buf, .cap = sizeof buf};
		assert_int_equal(l->ops->start(l, &down), 0);
		assert_int_equal(down.len, strlen(v[i].want));
		assert_memory_equal(down.data, v[i].want, down.len);
		l->ops->free(l);
	}
}

static void refused_at_start(void **state)
{
	(void)state;
	static const struct {
		const char *domain, *user, *pass, *text;
	} v[] = {
		{"bad host", NULL, NULL, "http: the destination is not a valid host name"},
		{"evil\r\nX-Injected: 1", NULL, NULL, "http: the destination is not a valid host name"},
		{"a/b", NULL, NULL, "http: the destination is not a valid host name"},
		{"ok", "user:name", "p", "http: the username holds a colon"},
	};
	for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
		addr_dest d;
		assert_int_equal(addr_dest_set_domain(&d, v[i].domain, strlen(v[i].domain), 80), 0);
		layer *l = http_client_new(&d, v[i].user, v[i].pass);
		uint8_t buf[1024];
		layer_buf down = {.data = buf, .cap = sizeof buf};
		assert_int_equal(l->ops->start(l, &down), LAYER_ERR_PROTO);
		assert_int_equal(down.len, 0);
		assert_string_equal(l->ops->error(l), v[i].text);
		assert_false(http_client_in_handshake(l));
		l->ops->free(l);
	}
	/* user ":" password over 512 bytes. */
	char pass[HTTP_CLIENT_CREDENTIALS_MAX];
	memset(pass, 'p', sizeof pass - 1);
	pass[sizeof pass - 1] = '\0';
	addr_dest d = {.kind = ADDR_IPV4, .port = 1, .u.v4 = {1, 2, 3, 4}};
	layer *l = http_client_new(&d, "u", pass); /* 1 + 1 + 511 = 513 */
	uint8_t buf[2048];
	layer_buf down = {.data = buf, .cap = sizeof buf};
	assert_int_equal(l->ops->start(l, &down), LAYER_ERR_PROTO);
	assert_string_equal(l->ops->error(l), "http: username and password longer than 512 bytes");
	l->ops->free(l);
	pass[sizeof pass - 2] = '\0'; /* 512 exactly */
	l = http_client_new(&d, "u", pass);
	down.len = 0;
	assert_int_equal(l->ops->start(l, &down), 0);
	l->ops->free(l);

	addr_dest unset = {0};
	assert_null(http_client_new(&unset, NULL, NULL));
}

static void eof_and_small_buffer(void **state)
{
	(void)state;
	outcome o;
	layer *l = make_v4();
	drive(l, S("HTTP/1.1 200"), 0, 0, &o);
	assert_true(http_client_in_handshake(l));
	assert_int_equal(http_client_eof(l), LAYER_ERR_CLOSED);
	assert_string_equal(l->ops->error(l), "http: server closed during the handshake");
	assert_false(http_client_in_handshake(l));
	l->ops->free(l);

	l = make_v4();
	drive(l, S("HTTP/1.1 200 OK\r\n\r\n"), 0, 0, &o);
	assert_int_equal(http_client_eof(l), 0);
	assert_null(l->ops->error(l));
	l->ops->free(l);

	/* A 5-byte window below: the request goes out in pieces, app bytes
	 * are held until ready. */
	l = make_v4();
	uint8_t buf[5], sent[256];
	size_t n_sent = 0;
	layer_buf down = {.data = buf, .cap = sizeof buf};
	assert_int_equal(l->ops->start(l, &down), 0);
	for (;;) {
		memcpy(sent + n_sent, down.data, down.len);
		n_sent += down.len;
		down.len = 0;
		assert_int_equal(l->ops->from_above(l, (const uint8_t *)"app", 3, &down), 0);
		assert_false(l->ops->passthrough(l));
		if (down.len == 0)
			break;
	}
	assert_int_equal(n_sent, sizeof REQ_V4 - 1);
	assert_memory_equal(sent, REQ_V4, n_sent);
	l->ops->free(l);
}

/* ---- against the HTTP proxy core ---- */

static const proto_account ACCOUNTS[] = {{.user = "alice", .pass = "secret", .user_len = 5, .pass_len = 6}};

static http_server core;

static void against_proxy_core(void **state)
{
	(void)state;
	static const struct {
		const char *user, *pass;
		int users;
		int want_user; /* -2: refused */
	} v[] = {
		{NULL, NULL, 0, -1},
		{"alice", "secret", 1, 0},
		{"alice", "wrong", 1, -2},
		{NULL, NULL, 1, -2},
	};
	for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
		addr_dest d = {0};
		assert_int_equal(addr_dest_set_domain(&d, "example.net", 11, 443), 0);
		layer *l = http_client_new(&d, v[i].user, v[i].pass);
		uint8_t dbuf[1024], ubuf[64];
		layer_buf down = {.data = dbuf, .cap = sizeof dbuf},
		          up = {.data = ubuf, .cap = sizeof ubuf};
		assert_int_equal(l->ops->start(l, &down), 0);

		http_server_init(&core, v[i].users ? ACCOUNTS : NULL, (size_t)v[i].users);
		proto_out out;
		proto_event ev;
		ssize_t n = http_server_feed(&core, down.data, down.len, &out, &ev);
		if (v[i].want_user == -2) {
			assert_int_equal(ev.kind, PROTO_EV_CLOSE);
		} else {
			assert_int_equal(n, down.len);
			assert_int_equal(ev.kind, PROTO_EV_OPEN);
			assert_int_equal(ev.user, v[i].want_user);
			char text[ADDR_TEXT_MAX];
			addr_dest_format(&ev.dest, text, sizeof text);
			assert_string_equal(text, "example.net:443");
			assert_int_equal(http_server_opened(&core, &out), 0);
		}
		memcpy(out.buf + out.len, "tunnel", 6);
		ssize_t r = l->ops->from_below(l, out.buf, out.len + 6, &up, &down);
		if (v[i].want_user == -2) {
			assert_int_equal(r, LAYER_ERR_AUTH);
			assert_memory_equal(l->ops->error(l), "http: CONNECT refused: 407 ", 27);
		} else {
			assert_int_equal(r, out.len + 6);
			assert_true(l->ops->ready(l));
			assert_int_equal(up.len, 6);
			assert_memory_equal(up.data, "tunnel", 6);
		}
		l->ops->free(l);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(response_table),
		cmocka_unit_test(head_bounds),
		cmocka_unit_test(request_bytes),
		cmocka_unit_test(refused_at_start),
		cmocka_unit_test(eof_and_small_buffer),
		cmocka_unit_test(against_proxy_core),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
