/* test_http_proxy.c - the HTTP proxy core driven like its shell, every case fed byte by byte and at once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "proto/http_proxy.h"

/* Large enough for the oversize-head case (HTTP_HEAD_MAX plus change). */
#define SIM_BUF (4 * HTTP_HEAD_MAX)

/* A fake shell: holds unconsumed bytes per direction like a read buffer,
 * records what reaches each peer, dials only when the test says so. */
struct sim {
	http_server s;
	size_t chunk; /* bytes per delivery: 1 = byte by byte */
	uint8_t cbuf[SIM_BUF]; /* client bytes not consumed yet */
	size_t clen;
	uint8_t ubuf[SIM_BUF]; /* upstream bytes not consumed yet */
	size_t ulen;
	uint8_t to_up[SIM_BUF];
	size_t up_len;
	uint8_t to_cl[SIM_BUF];
	size_t cl_len;
	int opens;
	proto_event open;
	bool dialing, tunnel, closed;
	ssize_t err;
	const char *reason;
};

static struct sim *sim_new(size_t chunk, const proto_account *users, size_t n_users)
{
	struct sim *m = test_calloc(1, sizeof *m);
	assert_non_null(m);
	http_server_init(&m->s, users, n_users);
	m->chunk = chunk;
	return m;
}

static void append(uint8_t *buf, size_t *len, const uint8_t *d, size_t n)
{
	assert_true(*len + n <= SIM_BUF);
	memcpy(buf + *len, d, n);
	*len += n;
}

static void drain(struct sim *m, bool upstream)
{
	const uint8_t *d;
	size_t n;
	while (upstream ? http_server_take_upstream(&m->s, &d, &n)
	                : http_server_take_client(&m->s, &d, &n)) {
		assert_true(n > 0 && n <= HTTP_OUT_HEAD_MAX + SIM_BUF);
		if (upstream)
			append(m->to_up, &m->up_len, d, n);
		else
			append(m->to_cl, &m->cl_len, d, n);
	}
}

static void consume(uint8_t *buf, size_t *len, ssize_t n)
{
	assert_true(n >= 0 && (size_t)n <= *len);
	memmove(buf, buf + n, *len - (size_t)n);
	*len -= (size_t)n;
}

static void pump_client(struct sim *m)
{
	while (!m->closed && !m->dialing && !m->tunnel) {
		proto_out out;
		proto_event ev;
		ssize_t n = http_server_feed(&m->s, m->cbuf, m->clen, &out, &ev);
		assert_true(out.len <= PROTO_OUT_MAX);
		append(m->to_cl, &m->cl_len, out.buf, out.len);
		drain(m, true);
		if (n < 0) {
			m->err = n;
			m->closed = true;
			m->reason = ev.reason;
			return;
		}
		consume(m->cbuf, &m->clen, n);
		if (ev.kind == PROTO_EV_OPEN) {
			m->opens++;
			m->open = ev;
			m->dialing = true;
			return;
		}
		if (ev.kind == PROTO_EV_CLOSE) {
			m->closed = true;
			m->reason = ev.reason;
			return;
		}
		if (n == 0)
			return;
	}
}

static void pump_upstream(struct sim *m)
{
	while (!m->closed && !m->tunnel) {
		proto_out out;
		proto_event ev;
		ssize_t n = http_server_feed_upstream(&m->s, m->ubuf, m->ulen, &out, &ev);
		assert_true(out.len <= PROTO_OUT_MAX);
		append(m->to_cl, &m->cl_len, out.buf, out.len);
		drain(m, false);
		if (n < 0) {
			m->err = n;
			m->closed = true;
			return;
		}
		consume(m->ubuf, &m->ulen, n);
		if (ev.kind == PROTO_EV_CLOSE) {
			m->closed = true;
			m->reason = ev.reason;
			return;
		}
		if (n == 0)
			break;
	}
	pump_client(m); /* a finished response lets a held request through */
}

static void send_client(struct sim *m, const char *text)
{
	size_t len = strlen(text);
	for (size_t i = 0; i < len; i += m->chunk) {
		size_t n = len - i < m->chunk ? len - i : m->chunk;
		append(m->cbuf, &m->clen, (const uint8_t *)text + i, n);
		pump_client(m);
	}
}

static void send_upstream(struct sim *m, const char *text)
{
	size_t len = strlen(text);
	for (size_t i = 0; i < len; i += m->chunk) {
		size_t n = len - i < m->chunk ? len - i : m->chunk;
		append(m->ubuf, &m->ulen, (const uint8_t *)text + i, n);
		pump_upstream(m);
	}
}

static void dial_ok(struct sim *m)
{
	proto_out out;
	assert_true(m->dialing);
	assert_int_equal(http_server_opened(&m->s, &out), 0);
	append(m->to_cl, &m->cl_len, out.buf, out.len);
	drain(m, true);
	m->dialing = false;
	m->tunnel = http_server_is_tunnel(&m->s);
	pump_client(m);
}

static void upstream_eof(struct sim *m)
{
	proto_out out;
	proto_event ev;
	assert_int_equal(http_server_upstream_eof(&m->s, &out, &ev), 0);
	append(m->to_cl, &m->cl_len, out.buf, out.len);
	if (ev.kind == PROTO_EV_CLOSE) {
		m->closed = true;
		m->reason = ev.reason;
	}
}

/* Asserts buf[0, len) is exactly the text want, printing both if not. */
static void assert_bytes(const uint8_t *buf, size_t len, const char *want)
{
	size_t wn = strlen(want);
	if (len != wn || memcmp(buf, want, wn) != 0) {
		print_error("got  %zu [%.*s]\nwant %zu [%s]\n", len, (int)len, (const char *)buf, wn,
		            want);
		fail();
	}
}

static void assert_domain(const addr_dest *d, const char *name, uint16_t port)
{
	assert_int_equal(d->kind, ADDR_DOMAIN);
	assert_string_equal(d->u.domain.name, name);
	assert_int_equal(d->port, port);
}

/* Each case runs twice: a byte per delivery, then everything at once. */
#define BOTH(fn)                                                                                 \
	static void test_##fn(void **state)                                                      \
	{                                                                                        \
		(void)state;                                                                     \
		fn(1);                                                                           \
		fn(SIM_BUF);                                                                     \
	}

static const proto_account USERS[] = {
	{.user = "alice", .pass = "secret", .user_len = 5, .pass_len = 6},
	{.user = "bob", .pass = "pa:ss", .user_len = 3, .pass_len = 5},
};

/* ---- CONNECT ---- */

static void connect_tunnel(size_t chunk)
{
	struct sim *m = sim_new(chunk, NULL, 0);
	send_client(m, "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"
	               "\x16\x03\x01 client hello");
	assert_int_equal(m->opens, 1);
	assert_int_equal(m->open.kind, PROTO_EV_OPEN);
	assert_int_equal(m->open.cmd, PROTO_CMD_CONNECT);
	assert_int_equal(m->open.user, -1);
	assert_domain(&m->open.dest, "example.com", 443);
	/* The pipelined bytes after the head stay with the shell. */
	assert_bytes(m->cbuf, m->clen, "\x16\x03\x01 client hello");
	assert_true(http_server_dialing_connect(&m->s));
	dial_ok(m);
	assert_false(http_server_dialing_connect(&m->s));
	assert_true(m->tunnel);
	assert_bytes(m->to_cl, m->cl_len, "HTTP/1.1 200 Connection established\r\n\r\n");
	assert_int_equal(m->up_len, 0);
	proto_out out;
	proto_event ev;
	assert_int_equal(http_server_feed(&m->s, m->cbuf, m->clen, &out, &ev), PROTO_ERR_STATE);
	assert_int_equal(http_server_feed_upstream(&m->s, m->cbuf, 1, &out, &ev), PROTO_ERR_STATE);
	test_free(m);
}
BOTH(connect_tunnel)

static void connect_ipv6(size_t chunk)
{
	struct sim *m = sim_new(chunk, NULL, 0);
	send_client(m, "CONNECT [2001:db8::1]:8443 HTTP/1.1\r\n\r\n");
	assert_int_equal(m->opens, 1);
	assert_int_equal(m->open.dest.kind, ADDR_IPV6);
	assert_int_equal(m->open.dest.port, 8443);
	assert_int_equal(m->open.dest.u.v6[0], 0x20);
	assert_int_equal(m->open.dest.u.v6[15], 1);
	test_free(m);
}
BOTH(connect_ipv6)

/* ---- absolute-form requests ---- */

static void get_rewritten(size_t chunk)
{
	struct sim *m = sim_new(chunk, NULL, 0);
	send_client(m, "GET http://Example.com/path?q=1 HTTP/1.1\r\n"
	               "Host: wrong.example\r\n"
	               "User-Agent: t/1\r\n"
	               "Proxy-Connection: keep-alive\r\n"
	               "Accept:   */*  \r\n"
	               "\r\n");
	assert_int_equal(m->opens, 1);
	assert_domain(&m->open.dest, "Example.com", 80);
	assert_int_equal(m->up_len, 0); /* nothing goes up before the dial */
	assert_false(http_server_dialing_connect(&m->s)); /* a GET, not a CONNECT */
	dial_ok(m);
	assert_false(m->tunnel);
	assert_bytes(m->to_up, m->up_len,
	             "GET /path?q=1 HTTP/1.1\r\n"
	             "Host: Example.com\r\n"
	             "User-Agent: t/1\r\n"
	             "Accept: */*\r\n"
	             "\r\n");
	assert_int_equal(m->cl_len, 0);
	test_free(m);
}
BOTH(get_rewritten)

static void get_empty_path_and_options(size_t chunk)
{
	struct sim *m = sim_new(chunk, NULL, 0);
	send_client(m, "GET http://h.test:8080?x HTTP/1.1\r\n\r\n");
	assert_domain(&m->open.dest, "h.test", 8080);
	dial_ok(m);
	assert_bytes(m->to_up, m->up_len, "GET /?x HTTP/1.1\r\nHost: h.test:8080\r\n\r\n");
	test_free(m);

	/* RFC 9112 3.2.4: OPTIONS with an empty path becomes "*". */
	m = sim_new(chunk, NULL, 0);
	send_client(m, "OPTIONS http://www.example.org:8001 HTTP/1.1\r\n\r\n");
	dial_ok(m);
	assert_bytes(m->to_up, m->up_len, "OPTIONS * HTTP/1.1\r\nHost: www.example.org:8001\r\n\r\n");
	test_free(m);
}
BOTH(get_empty_path_and_options)

static void hop_by_hop_removed(size_t chunk)
{
	struct sim *m = sim_new(chunk, NULL, 0);
	send_client(m, "GET http://10.0.0.1/ HTTP/1.1\r\n"
	               "Connection: X-Foo, close\r\n"
	               "X-Foo: 1\r\n"
	               "Keep-Alive: timeout=5\r\n"
	               "TE: trailers\r\n"
	               "Upgrade: websocket\r\n"
	               "Trailer: X-Sum\r\n"
	               "x-foo: 2\r\n"
	               "X-Bar: 3\r\n"
	               "Proxy-Connection: keep-alive\r\n"
	               "\r\n");
	assert_int_equal(m->open.dest.kind, ADDR_IPV4);
	assert_int_equal(m->open.dest.u.v4[0], 10);
	dial_ok(m);
	/* The client said close, so the upstream hears it too. */
	assert_bytes(m->to_up, m->up_len,
	             "GET / HTTP/1.1\r\n"
	             "Host: 10.0.0.1\r\n"
	             "Trailer: X-Sum\r\n"
	             "X-Bar: 3\r\n"
	             "Connection: close\r\n"
	             "\r\n");
	test_free(m);
}
BOTH(hop_by_hop_removed)

static void framing_fields_survive_connection(size_t chunk)
{
	/* "Connection: content-length" must not strip the body's framing, and
	 * an allowed list of equal lengths goes on as one value. */
	struct sim *m = sim_new(chunk, NULL, 0);
	send_client(m, "POST http://h/ HTTP/1.1\r\n"
	               "Connection: Content-Length, Host\r\n"
	               "Content-Length: 3, 3\r\n"
	               "content-length: 003\r\n"
	               "\r\n"
	               "abc");
	dial_ok(m);
	assert_bytes(m->to_up, m->up_len,
	             "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc");
	test_free(m);
}
BOTH(framing_fields_survive_connection)

static void leading_empty_lines_ignored(size_t chunk)
{
	struct sim *m = sim_new(chunk, NULL, 0);
	send_client(m, "\r\n\r\nGET http://h/ HTTP/1.1\r\n\r\n");
	assert_int_equal(m->opens, 1);
	dial_ok(m);
	assert_bytes(m->to_up, m->up_len, "GET / HTTP/1.1\r\nHost: h\r\n\r\n");
	test_free(m);
}
BOTH(leading_empty_lines_ignored)

/* ---- keep-alive ---- */

static void keepalive_same_host(size_t chunk)
{
	struct sim *m = sim_new(chunk, NULL, 0);
	/* Pipelined: the second request must wait for the first response. */
	send_client(m, "GET http://h/a HTTP/1.1\r\n\r\nGET http://H:80/b HTTP/1.1\r\n\r\n");
	assert_int_equal(m->opens, 1);
	dial_ok(m);
	assert_bytes(m->to_up, m->up_len, "GET /a HTTP/1.1\r\nHost: h\r\n\r\n");
	assert_bytes(m->cbuf, m->clen, "GET http://H:80/b HTTP/1.1\r\n\r\n");
	send_upstream(m, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
	assert_int_equal(m->opens, 1); /* same host:port, no new dial */
	assert_false(m->dialing);
	assert_int_equal(m->clen, 0);
	assert_bytes(m->to_up, m->up_len,
	             "GET /a HTTP/1.1\r\nHost: h\r\n\r\nGET /b HTTP/1.1\r\nHost: H:80\r\n\r\n");
	send_upstream(m, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
	assert_bytes(m->to_cl, m->cl_len,
	             "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	             "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
	assert_false(m->closed);
	test_free(m);
}
BOTH(keepalive_same_host)

static void keepalive_other_host(size_t chunk)
{
	struct sim *m = sim_new(chunk, NULL, 0);
	send_client(m, "GET http://a.test/ HTTP/1.1\r\n\r\n");
	dial_ok(m);
	send_upstream(m, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nA");
	send_client(m, "GET http://b.test/ HTTP/1.1\r\n\r\n");
	assert_int_equal(m->opens, 2);
	assert_domain(&m->open.dest, "b.test", 80);
	dial_ok(m);
	send_client(m, "GET http://a.test:8080/ HTTP/1.1\r\n\r\n");
	assert_int_equal(m->opens, 2); /* held: b's response has not come */
	send_upstream(m, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nB");
	assert_int_equal(m->opens, 3); /* another port is another upstream */
	assert_domain(&m->open.dest, "a.test", 8080);
	dial_ok(m);
	assert_bytes(m->to_up, m->up_len,
	             "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"
	             "GET / HTTP/1.1\r\nHost: b.test\r\n\r\n"
	             "GET / HTTP/1.1\r\nHost: a.test:8080\r\n\r\n");
	test_free(m);
}
BOTH(keepalive_other_host)

static void upstream_close_forces_redial(size_t chunk)
{
	struct sim *m = sim_new(chunk, NULL, 0);
	send_client(m, "GET http://h/ HTTP/1.1\r\n\r\n");
	dial_ok(m);
	/* Its Connection option and the field it names stay behind too. */
	send_upstream(m, "HTTP/1.1 200 OK\r\nConnection: close, X-Hop\r\nX-Hop: 1\r\n"
	                 "Keep-Alive: timeout=1\r\nContent-Length: 1\r\n\r\nx");
	assert_bytes(m->to_cl, m->cl_len, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx");
	assert_false(m->closed); /* the client did not ask to close */
	upstream_eof(m);         /* the origin goes away while idle */
	assert_false(m->closed);
	send_client(m, "GET http://h/ HTTP/1.1\r\n\r\n");
	assert_int_equal(m->opens, 2);
	test_free(m);
}
BOTH(upstream_close_forces_redial)

static void http10_client(size_t chunk)
{
	struct sim *m = sim_new(chunk, NULL, 0);
	send_client(m, "GET http://h/ HTTP/1.0\r\n\r\n");
	dial_ok(m);
	assert_bytes(m->to_up, m->up_len, "GET / HTTP/1.0\r\nHost: h\r\nConnection: close\r\n\r\n");
	send_upstream(m, "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx");
	assert_true(m->closed);
	assert_bytes(m->to_cl, m->cl_len,
	             "HTTP/1.0 200 OK\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx");
	test_free(m);

	m = sim_new(chunk, NULL, 0);
	send_client(m, "GET http://h/ HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
	dial_ok(m);
	assert_bytes(m->to_up, m->up_len,
	             "GET / HTTP/1.0\r\nHost: h\r\nConnection: keep-alive\r\n\r\n");
	send_upstream(m, "HTTP/1.1 100 Continue\r\n\r\n" /* never shown to a 1.0 client */
	                 "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\nx");
	assert_false(m->closed);
	assert_bytes(m->to_cl, m->cl_len,
	             "HTTP/1.0 200 OK\r\nContent-Length: 1\r\nConnection: keep-alive\r\n\r\nx");
	send_client(m, "GET http://h/2 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
	assert_int_equal(m->opens, 1);
	test_free(m);
}
BOTH(http10_client)

/* ---- response framing ---- */

/* Sends one GET (HEAD when head is set), dials, feeds resp; returns the sim. */
static struct sim *exchange(size_t chunk, bool head, const char *resp)
{
	struct sim *m = sim_new(chunk, NULL, 0);
	send_client(m, head ? "HEAD http://h/ HTTP/1.1\r\n\r\n" : "GET http://h/ HTTP/1.1\r\n\r\n");
	dial_ok(m);
	send_upstream(m, resp);
	return m;
}

/* The response ended where it should: the next request goes up at once. */
static void assert_next_request_flows(struct sim *m)
{
	assert_false(m->closed);
	size_t before = m->up_len;
	send_client(m, "GET http://h/next HTTP/1.1\r\n\r\n");
	assert_int_equal(m->opens, 1);
	assert_bytes(m->to_up + before, m->up_len - before, "GET /next HTTP/1.1\r\nHost: h\r\n\r\n");
}

static void response_content_length(size_t chunk)
{
	const char *r = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello";
	struct sim *m = exchange(chunk, false, r);
	assert_bytes(m->to_cl, m->cl_len, r);
	assert_next_request_flows(m);
	test_free(m);
}
BOTH(response_content_length)

static void response_chunked_trailers(size_t chunk)
{
	const char *r = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n"
	                "5;name=\"v\"\r\nhello\r\n"
	                "A\r\n0123456789\r\n"
	                "0\r\nX-Sum: 42\r\nX-More: y\r\n\r\n";
	struct sim *m = exchange(chunk, false, r);
	assert_bytes(m->to_cl, m->cl_len, r);
	assert_next_request_flows(m);
	test_free(m);
}
BOTH(response_chunked_trailers)

static void response_without_body(size_t chunk)
{
	static const char *const cases[] = {
		"HTTP/1.1 204 No Content\r\nContent-Length: 7\r\n\r\n",
		"HTTP/1.1 304 Not Modified\r\nContent-Length: 100\r\n\r\n",
		"HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n",
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct sim *m = exchange(chunk, false, cases[i]);
		assert_bytes(m->to_cl, m->cl_len, cases[i]);
		assert_next_request_flows(m);
		test_free(m);
	}
	/* A response to HEAD has no body, whatever its fields say. */
	const char *r = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n";
	struct sim *m = exchange(chunk, true, r);
	assert_bytes(m->to_cl, m->cl_len, r);
	assert_next_request_flows(m);
	test_free(m);
}
BOTH(response_without_body)

static void response_until_close(size_t chunk)
{
	struct sim *m = exchange(chunk, false, "HTTP/1.1 200 OK\r\nConnection: keep-alive\r\n\r\nabc");
	assert_false(m->closed);
	send_upstream(m, "def");
	upstream_eof(m);
	assert_true(m->closed);
	assert_bytes(m->to_cl, m->cl_len, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nabcdef");
	test_free(m);
}
BOTH(response_until_close)

static void response_continue_then_final(size_t chunk)
{
	const char *r = "HTTP/1.1 100 Continue\r\n\r\n"
	                "HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n"
	                "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi";
	struct sim *m = exchange(chunk, false, r);
	assert_bytes(m->to_cl, m->cl_len, r);
	assert_next_request_flows(m);
	test_free(m);
}
BOTH(response_continue_then_final)

static void response_te_overrides_length(size_t chunk)
{
	/* RFC 9112 6.3 item 3: Content-Length goes, chunked frames it. */
	struct sim *m = exchange(chunk, false,
	                         "HTTP/1.1 200 OK\r\nContent-Length: 99\r\nTransfer-Encoding: chunked\r\n"
	                         "\r\n1\r\nx\r\n0\r\n\r\n");
	assert_bytes(m->to_cl, m->cl_len,
	             "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n");
	assert_next_request_flows(m);
	test_free(m);
}
BOTH(response_te_overrides_length)

static void response_bad(size_t chunk)
{
	static const struct {
		const char *resp;
		const char *answer;
	} cases[] = {
		{"HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n",
		 "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nContent-Length: 39\r\n"
		 "Connection: close\r\n\r\ninvalid Content-Length in the response\n"},
		{"HTTP/1.1 200 OK\r\nX: 1\r\n folded\r\n\r\n",
		 "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nContent-Length: 40\r\n"
		 "Connection: close\r\n\r\nmalformed response from the destination\n"},
		{"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
		 "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nContent-Length: 35\r\n"
		 "Connection: close\r\n\r\nunexpected 101 Switching Protocols\n"},
		{"ICY 200 OK\r\n\r\n",
		 "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nContent-Length: 40\r\n"
		 "Connection: close\r\n\r\nmalformed response from the destination\n"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct sim *m = exchange(chunk, false, cases[i].resp);
		assert_true(m->closed);
		assert_bytes(m->to_cl, m->cl_len, cases[i].answer);
		test_free(m);
	}
	/* Broken chunking mid-body: nothing to answer, just close. */
	struct sim *m = exchange(chunk, false,
	                         "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n");
	assert_true(m->closed);
	assert_string_equal(m->reason, "malformed chunked response body");
	test_free(m);
}
BOTH(response_bad)

static void upstream_gone_before_response(size_t chunk)
{
	struct sim *m = sim_new(chunk, NULL, 0);
	send_client(m, "GET http://h/ HTTP/1.1\r\n\r\n");
	dial_ok(m);
	send_upstream(m, "HTTP/1.1 200");
	upstream_eof(m);
	assert_true(m->closed);
	assert_bytes(m->to_cl, m->cl_len,
	             "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nContent-Length: 57\r\n"
	             "Connection: close\r\n\r\n"
	             "the destination closed the connection without a response\n");
	test_free(m);

	m = exchange(chunk, false, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc");
	upstream_eof(m);
	assert_true(m->closed);
	assert_string_equal(m->reason, "the destination closed the connection mid-response");
	test_free(m);
}
BOTH(upstream_gone_before_response)

static void client_eof_waits_for_response(size_t chunk)
{
	struct sim *m = sim_new(chunk, NULL, 0);
	send_client(m, "GET http://h/ HTTP/1.1\r\n\r\n");
	dial_ok(m);
	proto_event ev;
	assert_int_equal(http_server_client_eof(&m->s, &ev), 0);
	assert_int_equal(ev.kind, PROTO_EV_NONE);
	send_upstream(m, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx");
	assert_true(m->closed);
	assert_bytes(m->to_cl, m->cl_len,
	             "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx");
	test_free(m);

	m = sim_new(chunk, NULL, 0);
	assert_int_equal(http_server_client_eof(&m->s, &ev), 0);
	assert_int_equal(ev.kind, PROTO_EV_CLOSE);
	test_free(m);
}
BOTH(client_eof_waits_for_response)

/* ---- request bodies ---- */

static void post_content_length(size_t chunk)
{
	struct sim *m = sim_new(chunk, NULL, 0);
	send_client(m, "POST http://h/u HTTP/1.1\r\nContent-Length: 11\r\n\r\nhello world"
	               "GET http://h/ HTTP/1.1\r\n\r\n");
	dial_ok(m);
	assert_bytes(m->to_up, m->up_len,
	             "POST /u HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n\r\nhello world");
	assert_bytes(m->cbuf, m->clen, "GET http://h/ HTTP/1.1\r\n\r\n");
	send_upstream(m, "HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n");
	assert_int_equal(m->clen, 0);
	assert_int_equal(m->opens, 1);
	test_free(m);
}
BOTH(post_content_length)

static void post_chunked(size_t chunk)
{
	const char *body = "4\r\nWiki\r\n5;x=y\r\npedia\r\n0\r\nX-Check: 1\r\n\r\n";
	struct sim *m = sim_new(chunk, NULL, 0);
	send_client(m, "POST http://h/u HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
	dial_ok(m);
	send_client(m, body);
	send_client(m, "GET http://h/ HTTP/1.1\r\n\r\n");
	char want[256];
	snprintf(want, sizeof want, "POST /u HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n%s",
	         body);
	assert_bytes(m->to_up, m->up_len, want);
	assert_bytes(m->cbuf, m->clen, "GET http://h/ HTTP/1.1\r\n\r\n");
	send_upstream(m, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
	assert_int_equal(m->clen, 0);
	test_free(m);

	m = sim_new(chunk, NULL, 0);
	send_client(m, "POST http://h/u HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
	dial_ok(m);
	send_client(m, "4\r\nWikiX");
	assert_true(m->closed);
	assert_string_equal(m->reason, "malformed chunked request body");
	test_free(m);

	/* sizes an origin could read otherwise: refused, never passed on */
	static const char *const bad[] = {"zz\r\n", "-1\r\n", "11111111111111111111\r\n",
	                                  "5 5\r\nhello\r\n", "5\t x\r\n", "\r\n", "5\n",
	                                  /* trailers hold field lines only (RFC 9112 7.1.2) */
	                                  "0\r\nGET /smuggled HTTP/1.1\r\n\r\n",
	                                  "0\r\nX-Trailer\r\n\r\n", "0\r\nX-T : v\r\n\r\n"};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		m = sim_new(chunk, NULL, 0);
		send_client(m, "POST http://h/u HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
		dial_ok(m);
		send_client(m, bad[i]);
		assert_true(m->closed);
		assert_string_equal(m->reason, "malformed chunked request body");
		test_free(m);
	}
	/* whitespace before an extension is allowed (BWS, RFC 9112 7.1.1) */
	m = sim_new(chunk, NULL, 0);
	send_client(m, "POST http://h/u HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
	dial_ok(m);
	send_client(m, "1 \t;a=b\r\nx\r\n0\r\n\r\n");
	assert_false(m->closed);
	test_free(m);
}
BOTH(post_chunked)

static void early_response_during_upload(size_t chunk)
{
	/* The origin answers before the body is in: the body still frames. */
	struct sim *m = sim_new(chunk, NULL, 0);
	send_client(m, "POST http://h/ HTTP/1.1\r\nContent-Length: 6\r\n\r\nabc");
	dial_ok(m);
	send_upstream(m, "HTTP/1.1 413 Too Large\r\nContent-Length: 0\r\n\r\n");
	assert_false(m->closed);
	send_client(m, "defGET http://h/2 HTTP/1.1\r\n\r\n");
	assert_bytes(m->to_up, m->up_len,
	             "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 6\r\n\r\nabcdef"
	             "GET /2 HTTP/1.1\r\nHost: h\r\n\r\n");
	test_free(m);
}
BOTH(early_response_during_upload)

/* ---- accounts ---- */

static const char ANSWER_407[] = "HTTP/1.1 407 Proxy Authentication Required\r\n"
                                 "Proxy-Authenticate: Basic realm=\"etemenanki\"\r\n"
                                 "Content-Type: text/plain\r\n"
                                 "Content-Length: 30\r\n"
                                 "Connection: close\r\n"
                                 "\r\n"
                                 "proxy authentication required\n";

static void auth_required(size_t chunk)
{
	static const char *const bad[] = {
		"GET http://h/ HTTP/1.1\r\n\r\n",
		"GET http://h/ HTTP/1.1\r\nProxy-Authorization: Basic YWxpY2U6d3Jvbmc=\r\n\r\n",
		"GET http://h/ HTTP/1.1\r\nProxy-Authorization: Bearer YWxpY2U6c2VjcmV0\r\n\r\n",
		"GET http://h/ HTTP/1.1\r\nProxy-Authorization: Basic !!!!\r\n\r\n",
		"CONNECT h:443 HTTP/1.1\r\nProxy-Authorization: Basic Ym9iOnBh\r\n\r\n",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct sim *m = sim_new(chunk, USERS, 2);
		send_client(m, bad[i]);
		assert_int_equal(m->opens, 0);
		assert_true(m->closed);
		assert_string_equal(m->reason, "proxy authentication required");
		assert_bytes(m->to_cl, m->cl_len, ANSWER_407);
		test_free(m);
	}
}
BOTH(auth_required)

static void auth_accepted(size_t chunk)
{
	struct sim *m = sim_new(chunk, USERS, 2);
	send_client(m, "GET http://h/ HTTP/1.1\r\nProxy-Authorization: basic  YWxpY2U6c2VjcmV0\r\n"
	               "Accept: */*\r\n\r\n");
	assert_int_equal(m->opens, 1);
	assert_int_equal(m->open.user, 0);
	dial_ok(m);
	/* The credentials are ours: they never reach the origin. */
	assert_bytes(m->to_up, m->up_len, "GET / HTTP/1.1\r\nHost: h\r\nAccept: */*\r\n\r\n");
	send_upstream(m, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
	/* Another account on the same connection is another flow. */
	send_client(m, "GET http://h/ HTTP/1.1\r\nProxy-Authorization: Basic Ym9iOnBhOnNz\r\n\r\n");
	assert_int_equal(m->opens, 2);
	assert_int_equal(m->open.user, 1);
	test_free(m);

	m = sim_new(chunk, USERS, 2);
	send_client(m, "CONNECT h:443 HTTP/1.1\r\nProxy-Authorization: Basic Ym9iOnBhOnNz\r\n\r\n");
	assert_int_equal(m->opens, 1);
	assert_int_equal(m->open.user, 1);
	test_free(m);
}
BOTH(auth_accepted)

/* ---- dial failures ---- */

static void dial_failures(size_t chunk)
{
	static const struct {
		proto_dial_error e;
		const char *reason;
		const char *answer;
	} cases[] = {
		{PROTO_DIAL_REFUSED, "connect: Connection refused",
		 "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nContent-Length: 48\r\n"
		 "Connection: close\r\n\r\nconnection refused: connect: Connection refused\n"},
		{PROTO_DIAL_TIMED_OUT, NULL,
		 "HTTP/1.1 504 Gateway Timeout\r\nContent-Type: text/plain\r\nContent-Length: 21\r\n"
		 "Connection: close\r\n\r\nconnection timed out\n"},
		{PROTO_DIAL_NOT_ALLOWED, "rule 3",
		 "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: 32\r\n"
		 "Connection: close\r\n\r\ndestination not allowed: rule 3\n"},
		{PROTO_DIAL_HOST_UNREACHABLE, "no such\r\nhost",
		 "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nContent-Length: 32\r\n"
		 "Connection: close\r\n\r\nhost unreachable: no such??host\n"},
		{PROTO_DIAL_GENERAL, "",
		 "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nContent-Length: 34\r\n"
		 "Connection: close\r\n\r\ncannot connect to the destination\n"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct sim *m = sim_new(chunk, NULL, 0);
		send_client(m, i % 2 ? "CONNECT h:443 HTTP/1.1\r\n\r\n" : "GET http://h/ HTTP/1.1\r\n\r\n");
		assert_true(m->dialing);
		proto_out out;
		assert_int_equal(http_server_failed(&m->s, cases[i].e, cases[i].reason, &out), 0);
		assert_bytes(out.buf, out.len, cases[i].answer);
		assert_int_equal(http_server_failed(&m->s, cases[i].e, NULL, &out), PROTO_ERR_STATE);
		assert_int_equal(http_server_opened(&m->s, &out), PROTO_ERR_STATE);
		test_free(m);
	}
	/* A long shell reason is cut to HTTP_REASON_MAX. */
	char longr[HTTP_REASON_MAX * 2];
	memset(longr, 'r', sizeof longr - 1);
	longr[sizeof longr - 1] = '\0';
	struct sim *m = sim_new(chunk, NULL, 0);
	send_client(m, "GET http://h/ HTTP/1.1\r\n\r\n");
	proto_out out;
	assert_int_equal(http_server_failed(&m->s, PROTO_DIAL_GENERAL, longr, &out), 0);
	assert_non_null(memmem(out.buf, out.len, "Content-Length: 236\r\n", 21));
	test_free(m);
}
BOTH(dial_failures)

/* ---- malformed requests ---- */

static void malformed_requests(size_t chunk)
{
	static const struct {
		const char *req;
		const char *reason;
	} cases[] = {
		{"GET / HTTP/1.1\r\nHost: h\r\n\r\n", "a proxy request needs an absolute http:// URI"},
		{"OPTIONS * HTTP/1.1\r\n\r\n", "a proxy request needs an absolute http:// URI"},
		{"GET h:80 HTTP/1.1\r\n\r\n", "a proxy request needs an absolute http:// URI"},
		{"GET https://h/ HTTP/1.1\r\n\r\n", "https:// URIs go through CONNECT"},
		{"GET ftp://h/ HTTP/1.1\r\n\r\n", "unsupported URI scheme"},
		{"GET http://h/#frag HTTP/1.1\r\n\r\n", "malformed request target"},
		{"GET http://u:p@h/ HTTP/1.1\r\n\r\n", "userinfo in the request target"},
		{"GET http:///x HTTP/1.1\r\n\r\n", "bad host or port in the request target"},
		{"GET http://h:99999/ HTTP/1.1\r\n\r\n", "bad host or port in the request target"},
		{"GET http://h:0/ HTTP/1.1\r\n\r\n", "bad host or port in the request target"},
		{"GET http://h%41/ HTTP/1.1\r\n\r\n", "bad host or port in the request target"},
		{"GET  http://h/ HTTP/1.1\r\n\r\n", "malformed request line"},
		{"GET http://h/ HTTP/1.1 \r\n\r\n", "malformed request line"},
		{"GET http://h/ HTTX/1.1\r\n\r\n", "malformed request line"},
		{"G(T http://h/ HTTP/1.1\r\n\r\n", "malformed request line"},
		{"GET http://h/\x01 HTTP/1.1\r\n\r\n", "malformed request line"},
		{"GET http://h/ HTTP/2.0\r\n\r\n", "HTTP version not supported"},
		{"GET http://h/ HTTP/1.1\nHost: h\r\n\r\n", "lines must end in CRLF"},
		{"GET http://h/ HTTP/1.1\r\nHost: h\r\r\n\r\n", "lines must end in CRLF"},
		{"GET http://h/ HTTP/1.1\r\nX: 1\r\n  folded\r\n\r\n", "obsolete line folding is not accepted"},
		{"GET http://h/ HTTP/1.1\r\nHost : h\r\n\r\n", "malformed header field"},
		{"GET http://h/ HTTP/1.1\r\nNo colon\r\n\r\n", "malformed header field"},
		{"GET http://h/ HTTP/1.1\r\nX: a\x7f\r\n\r\n", "malformed header field"},
		{"POST http://h/ HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
		 "both Transfer-Encoding and Content-Length"},
		{"POST http://h/ HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
		 "chunked is not the final transfer coding"},
		{"POST http://h/ HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
		 "chunked is not the final transfer coding"},
		{"POST http://h/ HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
		 "unsupported transfer coding"},
		{"POST http://h/ HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
		 "Transfer-Encoding in an HTTP/1.0 request"},
		{"POST http://h/ HTTP/1.1\r\nContent-Length: abc\r\n\r\n", "invalid Content-Length"},
		{"POST http://h/ HTTP/1.1\r\nContent-Length: -1\r\n\r\n", "invalid Content-Length"},
		{"POST http://h/ HTTP/1.1\r\nContent-Length: 5, 6\r\n\r\n", "invalid Content-Length"},
		{"POST http://h/ HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
		 "invalid Content-Length"},
		{"POST http://h/ HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
		 "invalid Content-Length"},
		/* 2^64 + 5 and 2^64 wrapped to 5 and 0 before the limit was checked */
		{"POST http://h/ HTTP/1.1\r\nContent-Length: 18446744073709551621\r\n\r\n",
		 "invalid Content-Length"},
		{"POST http://h/ HTTP/1.1\r\nContent-Length: 18446744073709551616\r\n\r\n",
		 "invalid Content-Length"},
		{"POST http://h/ HTTP/1.1\r\nContent-Length: 4611686018427387905\r\n\r\n",
		 "invalid Content-Length"}, /* 2^62 + 1 */
		{"CONNECT h HTTP/1.1\r\n\r\n", "CONNECT needs host:port"},
		{"CONNECT http://h:443 HTTP/1.1\r\n\r\n", "CONNECT needs host:port"},
		{"CONNECT h:443 HTTP/1.1\r\nContent-Length: 5\r\n\r\n", "CONNECT with a body"},
		{"GET http://h/ HTTP/1.1\r\nConnection: a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q\r\n\r\n",
		 "too many Connection options"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct sim *m = sim_new(chunk, NULL, 0);
		send_client(m, cases[i].req);
		if (!m->closed || strcmp(m->reason, cases[i].reason) != 0)
			print_error("case %zu: %s\n", i, cases[i].req);
		assert_true(m->closed);
		assert_int_equal(m->opens, 0);
		assert_string_equal(m->reason, cases[i].reason);
		/* Every refusal is a complete answer naming the reason. */
		char tail[128];
		snprintf(tail, sizeof tail, "Connection: close\r\n\r\n%s\n", cases[i].reason);
		assert_true(m->cl_len > strlen(tail));
		assert_memory_equal(m->to_cl + m->cl_len - strlen(tail), tail, strlen(tail));
		test_free(m);
	}
	struct sim *m = sim_new(chunk, NULL, 0);
	send_client(m, "GET / HTTP/1.1\r\n\r\n");
	assert_bytes(m->to_cl, m->cl_len,
	             "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: 46\r\n"
	             "Connection: close\r\n\r\na proxy request needs an absolute http:// URI\n");
	proto_out out;
	proto_event ev;
	assert_int_equal(http_server_feed(&m->s, m->cbuf, 0, &out, &ev), PROTO_ERR_STATE);
	test_free(m);
}
BOTH(malformed_requests)

/* ---- bounds ---- */

static void oversize_head(size_t chunk)
{
	static char req[HTTP_HEAD_MAX + 64];
	int n = snprintf(req, sizeof req, "GET http://h/ HTTP/1.1\r\nX-Big: ");
	memset(req + n, 'a', sizeof req - (size_t)n - 1);
	req[sizeof req - 1] = '\0';
	struct sim *m = sim_new(chunk, NULL, 0);
	send_client(m, req);
	assert_true(m->closed);
	assert_int_equal(m->err, PROTO_ERR_TOO_BIG);
	assert_bytes(m->to_cl, m->cl_len,
	             "HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: text/plain\r\n"
	             "Content-Length: 23\r\nConnection: close\r\n\r\nrequest head too large\n");
	test_free(m);

	/* Just under the bound is fine. */
	static char fit[HTTP_HEAD_MAX + 1];
	n = snprintf(fit, sizeof fit, "GET http://h/ HTTP/1.1\r\nX-Big: ");
	memset(fit + n, 'a', HTTP_HEAD_MAX - (size_t)n - 4);
	memcpy(fit + HTTP_HEAD_MAX - 4, "\r\n\r\n", 5);
	m = sim_new(chunk, NULL, 0);
	send_client(m, fit);
	assert_int_equal(m->opens, 1);
	test_free(m);
}

BOTH(oversize_head)

static void too_many_fields(size_t chunk)
{
	static char req[HTTP_HEAD_MAX];
	size_t n = (size_t)snprintf(req, sizeof req, "GET http://h/ HTTP/1.1\r\n");
	for (int i = 0; i <= HTTP_FIELDS_MAX; i++)
		n += (size_t)snprintf(req + n, sizeof req - n, "X-%d: v\r\n", i);
	snprintf(req + n, sizeof req - n, "\r\n");
	struct sim *m = sim_new(chunk, NULL, 0);
	send_client(m, req);
	assert_true(m->closed);
	assert_int_equal(m->err, PROTO_ERR_TOO_BIG);
	assert_bytes(m->to_cl, m->cl_len,
	             "HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: text/plain\r\n"
	             "Content-Length: 23\r\nConnection: close\r\n\r\ntoo many header fields\n");
	test_free(m);
}
BOTH(too_many_fields)

static void response_head_too_big(size_t chunk)
{
	static char resp[HTTP_HEAD_MAX + 64];
	int n = snprintf(resp, sizeof resp, "HTTP/1.1 200 OK\r\nX-Big: ");
	memset(resp + n, 'a', sizeof resp - (size_t)n - 1);
	resp[sizeof resp - 1] = '\0';
	struct sim *m = exchange(chunk, false, resp);
	assert_true(m->closed);
	assert_bytes(m->to_cl, m->cl_len,
	             "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nContent-Length: 45\r\n"
	             "Connection: close\r\n\r\nresponse head from the destination too large\n");
	test_free(m);
}

BOTH(response_head_too_big)

static void wrong_state_calls(void **state)
{
	(void)state;
	http_server s;
	memset(&s, 0, sizeof s); /* a zeroed core is a valid start */
	proto_out out;
	proto_event ev;
	assert_int_equal(http_server_opened(&s, &out), PROTO_ERR_STATE);
	assert_int_equal(http_server_failed(&s, PROTO_DIAL_GENERAL, NULL, &out), PROTO_ERR_STATE);
	assert_int_equal(http_server_feed_upstream(&s, NULL, 0, &out, &ev), 0);
	assert_int_equal(http_server_upstream_eof(&s, &out, &ev), 0);
	assert_int_equal(ev.kind, PROTO_EV_NONE);
	const uint8_t *d;
	size_t n;
	assert_false(http_server_take_upstream(&s, &d, &n));
	assert_false(http_server_take_client(&s, &d, &n));
	const uint8_t stray[] = "HTTP/1.1 200 OK\r\n\r\n";
	assert_int_equal(http_server_feed_upstream(&s, stray, sizeof stray - 1, &out, &ev), 0);
	assert_int_equal(ev.kind, PROTO_EV_CLOSE);
	assert_string_equal(ev.reason, "response bytes without a request");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_connect_tunnel),
		cmocka_unit_test(test_connect_ipv6),
		cmocka_unit_test(test_get_rewritten),
		cmocka_unit_test(test_get_empty_path_and_options),
		cmocka_unit_test(test_hop_by_hop_removed),
		cmocka_unit_test(test_framing_fields_survive_connection),
		cmocka_unit_test(test_leading_empty_lines_ignored),
		cmocka_unit_test(test_keepalive_same_host),
		cmocka_unit_test(test_keepalive_other_host),
		cmocka_unit_test(test_upstream_close_forces_redial),
		cmocka_unit_test(test_http10_client),
		cmocka_unit_test(test_response_content_length),
		cmocka_unit_test(test_response_chunked_trailers),
		cmocka_unit_test(test_response_without_body),
		cmocka_unit_test(test_response_until_close),
		cmocka_unit_test(test_response_continue_then_final),
		cmocka_unit_test(test_response_te_overrides_length),
		cmocka_unit_test(test_response_bad),
		cmocka_unit_test(test_upstream_gone_before_response),
		cmocka_unit_test(test_client_eof_waits_for_response),
		cmocka_unit_test(test_post_content_length),
		cmocka_unit_test(test_post_chunked),
		cmocka_unit_test(test_early_response_during_upload),
		cmocka_unit_test(test_auth_required),
		cmocka_unit_test(test_auth_accepted),
		cmocka_unit_test(test_dial_failures),
		cmocka_unit_test(test_malformed_requests),
		cmocka_unit_test(test_oversize_head),
		cmocka_unit_test(test_too_many_fields),
		cmocka_unit_test(test_response_head_too_big),
		cmocka_unit_test(wrong_state_calls),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
