/* test_dns_frame.c - DNS stream framing: length prefixes and DoH POST exchanges, fed whole, byte by byte and in slices. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proto/dns_frame.h"
#include "proto/http_parse.h"

#define S(lit) (const uint8_t *)(lit), sizeof(lit) - 1

/* ---- Length prefixes ---- */

static void tcp_one_call(void **state)
{
	(void)state;
	static dns_tcp_reader r; /* zeroed: a valid start */
	const uint8_t in[] = {0, 5, 'h', 'e', 'l', 'l', 'o'};
	size_t used = 99, len = 0;
	const uint8_t *msg = NULL;
	assert_int_equal(dns_tcp_feed(&r, in, sizeof in, &used, &msg, &len), 1);
	assert_int_equal(used, 7);
	assert_int_equal(len, 5);
	assert_memory_equal(msg, "hello", 5);
	assert_true(msg >= r.buf && msg + len <= r.buf + sizeof r.buf);
	/* nothing more: the next message has not begun */
	assert_int_equal(dns_tcp_feed(&r, in, 0, &used, &msg, &len), 0);
	assert_int_equal(used, 0);
}

static void tcp_byte_by_byte(void **state)
{
	(void)state;
	static dns_tcp_reader r;
	dns_tcp_reader_init(&r);
	const uint8_t in[] = {0, 3, 'a', 'b', 'c', 0, 1, 'z'};
	const uint8_t *msg = NULL;
	size_t used, len, got = 0;
	for (size_t i = 0; i < sizeof in; i++) {
		int rc = dns_tcp_feed(&r, in + i, 1, &used, &msg, &len);
		assert_int_equal(used, 1);
		if (i == 4) {
			assert_int_equal(rc, 1);
			assert_int_equal(len, 3);
			assert_memory_equal(msg, "abc", 3);
			got++;
		} else if (i == 7) {
			assert_int_equal(rc, 1);
			assert_int_equal(len, 1);
			assert_memory_equal(msg, "z", 1);
			got++;
		} else {
			assert_int_equal(rc, 0);
		}
	}
	assert_int_equal(got, 2);
}

static void tcp_two_in_one_buffer(void **state)
{
	(void)state;
	static dns_tcp_reader r;
	dns_tcp_reader_init(&r);
	const uint8_t in[] = {0, 2, 'h', 'i', 0, 4, 'y', 'o', 'u', '!', 0};
	const uint8_t *msg;
	size_t used, len;
	assert_int_equal(dns_tcp_feed(&r, in, sizeof in, &used, &msg, &len), 1);
	assert_int_equal(used, 4);
	assert_int_equal(len, 2);
	assert_memory_equal(msg, "hi", 2);
	size_t off = used;
	assert_int_equal(dns_tcp_feed(&r, in + off, sizeof in - off, &used, &msg, &len), 1);
	assert_int_equal(used, 6);
	assert_int_equal(len, 4);
	assert_memory_equal(msg, "you!", 4);
	off += used;
	/* one byte of a third prefix: taken, more needed */
	assert_int_equal(dns_tcp_feed(&r, in + off, sizeof in - off, &used, &msg, &len), 0);
	assert_int_equal(used, 1);
}

static void tcp_maximum(void **state)
{
	(void)state;
	static dns_tcp_reader r;
	static uint8_t in[2 + DNS_FRAME_MAX + 3];
	dns_tcp_prefix(in, DNS_FRAME_MAX);
	for (size_t i = 0; i < DNS_FRAME_MAX; i++)
		in[2 + i] = (uint8_t)(i * 7 + 1);
	in[2 + DNS_FRAME_MAX] = 0; /* the next message's prefix begins */
	const size_t steps[] = {0, 1000, 1};
	for (size_t s = 0; s < sizeof steps / sizeof steps[0]; s++) {
		dns_tcp_reader_init(&r);
		size_t off = 0, used, len = 0, n = sizeof in;
		const uint8_t *msg = NULL;
		int rc = 0;
		while (rc == 0) {
			size_t k = steps[s] && n - off > steps[s] ? steps[s] : n - off;
			rc = dns_tcp_feed(&r, in + off, k, &used, &msg, &len);
			if (rc == 0)
				assert_int_equal(used, k);
			off += used;
		}
		assert_int_equal(rc, 1);
		assert_int_equal(off, 2 + DNS_FRAME_MAX);
		assert_int_equal(len, DNS_FRAME_MAX);
		assert_memory_equal(msg, in + 2, DNS_FRAME_MAX);
	}
}

static void tcp_zero_length(void **state)
{
	(void)state;
	static dns_tcp_reader r;
	dns_tcp_reader_init(&r);
	const uint8_t in[] = {0, 0, 0, 1, 'x'};
	const uint8_t *msg;
	size_t used, len;
	assert_int_equal(dns_tcp_feed(&r, in, sizeof in, &used, &msg, &len), -1);
	assert_int_equal(used, 2);
	/* failed for good */
	assert_int_equal(dns_tcp_feed(&r, in + 2, 3, &used, &msg, &len), -1);
	assert_int_equal(used, 0);
	/* split over calls, the same */
	dns_tcp_reader_init(&r);
	assert_int_equal(dns_tcp_feed(&r, in, 1, &used, &msg, &len), 0);
	assert_int_equal(dns_tcp_feed(&r, in + 1, 4, &used, &msg, &len), -1);
	assert_int_equal(used, 1);
}

static void tcp_prefix(void **state)
{
	(void)state;
	uint8_t p[2];
	dns_tcp_prefix(p, 0x1234);
	assert_int_equal(p[0], 0x12);
	assert_int_equal(p[1], 0x34);
	dns_tcp_prefix(p, 1);
	assert_int_equal(p[0], 0);
	assert_int_equal(p[1], 1);
	dns_tcp_prefix(p, 300);
	assert_int_equal(p[0], 1);
	assert_int_equal(p[1], 44);
	dns_tcp_prefix(p, DNS_FRAME_MAX);
	assert_int_equal(p[0], 0xff);
	assert_int_equal(p[1], 0xff);
}

/* ---- DoH requests ---- */

static const uint8_t QUERY[] = {0xab, 0xcd, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};

static void check_request(const char *host, uint16_t port, const char *path, const char *head)
{
	uint8_t out[512];
	size_t hn = strlen(head);
	int n = doh_request(host, port, path, QUERY, sizeof QUERY, out, sizeof out);
	assert_int_equal(n, hn + sizeof QUERY);
	assert_memory_equal(out, head, hn);
	assert_memory_equal(out + hn, QUERY, sizeof QUERY);
	/* and it is a request the server core reads as such */
	static http_head h;
	size_t scan = 0;
	assert_int_equal(http_parse_request(out, (size_t)n, &scan, &h), (ssize_t)hn);
	assert_true(http_eq_nocase(out + h.method.off, h.method.len, "post"));
	assert_memory_equal(out + h.target.off, path, strlen(path));
}

static void request_bytes(void **state)
{
	(void)state;
	check_request("192.0.2.1", 443, "/dns-query",
	              "POST /dns-query HTTP/1.1\r\n"
	              "Host: 192.0.2.1\r\n"
	              "Content-Type: application/dns-message\r\n"
	              "Accept: application/dns-message\r\n"
	              "Content-Length: 12\r\n"
	              "\r\n");
	check_request("2001:db8::53", 8443, "/resolve",
	              "POST /resolve HTTP/1.1\r\n"
	              "Host: [2001:db8::53]:8443\r\n"
	              "Content-Type: application/dns-message\r\n"
	              "Accept: application/dns-message\r\n"
	              "Content-Length: 12\r\n"
	              "\r\n");
	check_request("[::1]", 443, "/",
	              "POST / HTTP/1.1\r\n"
	              "Host: [::1]\r\n"
	              "Content-Type: application/dns-message\r\n"
	              "Accept: application/dns-message\r\n"
	              "Content-Length: 12\r\n"
	              "\r\n");
	check_request("dns.example", 80, "/dns-query?ct",
	              "POST /dns-query?ct HTTP/1.1\r\n"
	              "Host: dns.example:80\r\n"
	              "Content-Type: application/dns-message\r\n"
	              "Accept: application/dns-message\r\n"
	              "Content-Length: 12\r\n"
	              "\r\n");
}

static void request_refused(void **state)
{
	(void)state;
	uint8_t out[512];
	const struct {
		const char *host;
		const char *path;
	} bad[] = {
		{"dns.example", "dns-query"},          /* path without its '/' */
		{"dns.example", ""},
		{"", "/dns-query"},
		{"dns.example\r\nX-Forged: 1", "/dns-query"},
		{"dns.example", "/dns-query HTTP/1.1\r\nX-Forged: 1"},
		{"dns.example", "/a b"},
		{"dns.example", "/a\tb"},
		{"dns.example", "/a\nb"},
		{"dns ex", "/"},
		{"dns.example\x7f", "/"},
		{"dns.example", "/\x01"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		assert_int_equal(doh_request(bad[i].host, 443, bad[i].path, QUERY, sizeof QUERY, out,
		                             sizeof out),
		                 -1);

	/* cap: exactly enough fits, one byte less does not */
	int n = doh_request("192.0.2.1", 443, "/dns-query", QUERY, sizeof QUERY, out, sizeof out);
	assert_true(n > 0);
	assert_int_equal(doh_request("192.0.2.1", 443, "/dns-query", QUERY, sizeof QUERY, out,
	                             (size_t)n),
	                 n);
	assert_int_equal(doh_request("192.0.2.1", 443, "/dns-query", QUERY, sizeof QUERY, out,
	                             (size_t)n - 1),
	                 -1);
	assert_int_equal(doh_request("192.0.2.1", 443, "/dns-query", QUERY, sizeof QUERY, out, 10),
	                 -1);
	assert_int_equal(doh_request("192.0.2.1", 443, "/dns-query", QUERY, sizeof QUERY, out, 0), -1);

	/* the largest message fits a large enough buffer; one more byte is no DNS message */
	static uint8_t big[DNS_FRAME_MAX + 1], wide[DNS_FRAME_MAX + 512];
	n = doh_request("192.0.2.1", 443, "/q", big, DNS_FRAME_MAX, wide, sizeof wide);
	assert_true(n > DNS_FRAME_MAX);
	assert_non_null(memmem(wide, (size_t)n, "Content-Length: 65535\r\n\r\n", 25));
	assert_int_equal(doh_request("192.0.2.1", 443, "/q", big, DNS_FRAME_MAX + 1, wide, sizeof wide),
	                 -1);
}

/* ---- DoH responses ---- */

#define BODIES_MAX 3

/* What feeding a whole input did. */
typedef struct run {
	int rc;          /* the last call's return */
	size_t used;     /* bytes taken in all */
	size_t n_bodies;
	size_t body_len[BODIES_MAX];
	uint8_t body[BODIES_MAX][DNS_FRAME_MAX];
	const char *err;
	bool closing;    /* after the last complete response */
} run;

/* Feeds d[0, n) to r in slices of step bytes (0: all at once), going on
 * after each answer with the bytes it left, until an error or the end. */
static void doh_run(doh_reader *r, const uint8_t *d, size_t n, size_t step, run *o)
{
	o->rc = 0;
	o->used = 0;
	o->n_bodies = 0;
	o->err = NULL;
	size_t off = 0;
	while (off < n) {
		size_t k = step && n - off > step ? step : n - off;
		size_t used = SIZE_MAX, len = 0;
		const uint8_t *b = NULL;
		const char *err = NULL;
		int rc = doh_feed(r, d + off, k, &used, &b, &len, &err);
		assert_true(used <= k);
		o->rc = rc;
		off += used;
		o->used = off;
		if (rc < 0) {
			assert_non_null(err);
			o->err = err;
			return;
		}
		if (rc == 0) {
			assert_int_equal(used, k);
			continue;
		}
		assert_int_equal(rc, 1);
		assert_true(used > 0);
		assert_true(b >= (const uint8_t *)r && b + len <= (const uint8_t *)(r + 1));
		assert_true(o->n_bodies < BODIES_MAX);
		memcpy(o->body[o->n_bodies], b, len);
		o->body_len[o->n_bodies++] = len;
		o->closing = doh_reader_closing(r);
	}
}

#define OK_HEAD "HTTP/1.1 200 OK\r\nContent-Type: application/dns-message\r\n"
#define CHUNKED_HEAD OK_HEAD "Transfer-Encoding: chunked\r\n\r\n"

typedef struct response_case {
	const char *name;
	const uint8_t *in;
	size_t len;
	int rc;             /* the last call's return */
	const char *err;    /* for rc -1 */
	const char *bodies[BODIES_MAX];
	bool closing;
} response_case;

static const char T_MALFORMED[] = "dns: https: malformed response";
static const char T_TYPE[] = "dns: https: the answer is not application/dns-message";
static const char T_HEAD[] = "dns: https: response head too large";
static const char T_BODY[] = "dns: https: answer too large";
static const char T_CLOSED[] = "dns: https: the server closed the connection";

static const response_case CASES[] = {
	{"Content-Length", S(OK_HEAD "Content-Length: 5\r\n\r\nhello"), 1, NULL, {"hello"}, false},
	{"chunked with extensions and trailers",
	 S(CHUNKED_HEAD "3;name=value\r\nhel\r\n2 ; x=\"y\"\r\nlo\r\n0;last\r\n"
	                "X-Trailer: 1\r\nServer-Timing: a;dur=1\r\n\r\n"),
	 1, NULL, {"hello"}, false},
	{"two pipelined responses",
	 S(OK_HEAD "Content-Length: 5\r\n\r\nhello" CHUNKED_HEAD "5\r\nworld\r\n0\r\n\r\n"), 1, NULL,
	 {"hello", "world"}, false},
	{"a 100 Continue and a 103 before the 200",
	 S("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n" OK_HEAD
	   "Content-Length: 2\r\n\r\nok"),
	 1, NULL, {"ok"}, false},
	{"404", S("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"), -1,
	 "dns: https: the server answered 404", {NULL}, false},
	{"500 after an answer",
	 S(OK_HEAD "Content-Length: 1\r\n\r\nA"
	           "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 3\r\n\r\nerr"),
	 -1, "dns: https: the server answered 500", {"A"}, false},
	{"a 101 is final", S("HTTP/1.1 101 Switching Protocols\r\n\r\n"), -1,
	 "dns: https: the server answered 101", {NULL}, false},
	{"a 204 is no answer", S("HTTP/1.1 204 No Content\r\n\r\n"), -1,
	 "dns: https: the server answered 204", {NULL}, false},
	{"wrong content type",
	 S("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 5\r\n\r\nhello"), -1, T_TYPE,
	 {NULL}, false},
	{"a longer type with our name as its prefix",
	 S("HTTP/1.1 200 OK\r\nContent-Type: application/dns-messages\r\nContent-Length: 1\r\n\r\nx"),
	 -1, T_TYPE, {NULL}, false},
	{"no content type", S("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"), -1, T_TYPE, {NULL},
	 false},
	{"a second, different content type",
	 S(OK_HEAD "Content-Type: text/plain\r\nContent-Length: 1\r\n\r\nx"), -1, T_TYPE, {NULL}, false},
	{"content type with parameters, names in any case",
	 S("HTTP/1.1 200 OK\r\ncontent-TYPE: Application/DNS-Message ; charset=binary\r\n"
	   "CONTENT-LENGTH: 3\r\n\r\nabc"),
	 1, NULL, {"abc"}, false},
	{"neither length nor chunked", S(OK_HEAD "\r\nhello"), -1, T_MALFORMED, {NULL}, false},
	{"chunked and Content-Length",
	 S(OK_HEAD "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"),
	 -1, T_MALFORMED, {NULL}, false},
	{"a coding we cannot undo",
	 S(OK_HEAD "Transfer-Encoding: gzip, chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n"), -1, T_MALFORMED,
	 {NULL}, false},
	{"chunked in HTTP/1.0",
	 S("HTTP/1.0 200 OK\r\nContent-Type: application/dns-message\r\n"
	   "Transfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n"),
	 -1, T_MALFORMED, {NULL}, false},
	{"differing lengths", S(OK_HEAD "Content-Length: 1, 2\r\n\r\nab"), -1, T_MALFORMED, {NULL},
	 false},
	{"an empty body", S(OK_HEAD "Content-Length: 0\r\n\r\n"), -1, T_MALFORMED, {NULL}, false},
	{"an empty chunked body", S(CHUNKED_HEAD "0\r\n\r\n"), -1, T_MALFORMED, {NULL}, false},
	{"malformed status line", S("HTTP/1.1 2x0 OK\r\n\r\n"), -1, T_MALFORMED, {NULL}, false},
	{"not HTTP", S("SSH-2.0-OpenSSH_9.6\r\n\r\n"), -1, T_MALFORMED, {NULL}, false},
	{"HTTP/2 status line", S("HTTP/2.0 200 OK\r\n\r\n"), -1, T_MALFORMED, {NULL}, false},
	{"bare LF", S("HTTP/1.1 200 OK\nContent-Length: 1\n\nx"), -1, T_MALFORMED, {NULL}, false},
	{"malformed header line", S(OK_HEAD "Content-Length 5\r\n\r\nhello"), -1, T_MALFORMED, {NULL},
	 false},
	{"obs-fold", S(OK_HEAD "Content-Length: 5\r\n x\r\n\r\nhello"), -1, T_MALFORMED, {NULL}, false},
	{"malformed chunk size", S(CHUNKED_HEAD "zz\r\nhello\r\n0\r\n\r\n"), -1, T_MALFORMED, {NULL},
	 false},
	{"chunk data without its CRLF", S(CHUNKED_HEAD "2\r\nhello\r\n0\r\n\r\n"), -1, T_MALFORMED,
	 {NULL}, false},
	{"a request line in the trailer",
	 S(CHUNKED_HEAD "1\r\nx\r\n0\r\nGET / HTTP/1.1\r\n\r\n"), -1, T_MALFORMED, {NULL}, false},
	{"Content-Length over the limit", S(OK_HEAD "Content-Length: 65536\r\n\r\n"), -1, T_BODY,
	 {NULL}, false},
	{"a chunk over the limit", S(CHUNKED_HEAD "10000\r\n"), -1, T_BODY, {NULL}, false},
	{"Connection: close", S(OK_HEAD "Connection: keep-alive, Close\r\nContent-Length: 2\r\n\r\nok"),
	 1, NULL, {"ok"}, true},
	{"HTTP/1.0 without keep-alive",
	 S("HTTP/1.0 200 OK\r\nContent-Type: application/dns-message\r\nContent-Length: 2\r\n\r\nok"), 1,
	 NULL, {"ok"}, true},
	{"HTTP/1.0 with keep-alive",
	 S("HTTP/1.0 200 OK\r\nContent-Type: application/dns-message\r\nConnection: keep-alive\r\n"
	   "Content-Length: 2\r\n\r\nok"),
	 1, NULL, {"ok"}, false},
	{"close on the first of two",
	 S(OK_HEAD "Connection: close\r\nContent-Length: 1\r\n\r\na" OK_HEAD
	           "Content-Length: 1\r\n\r\nb"),
	 1, NULL, {"a", "b"}, false},
	{"head not finished", S(OK_HEAD "Content-Len"), 0, NULL, {NULL}, false},
	{"body not finished", S(OK_HEAD "Content-Length: 9\r\n\r\nhell"), 0, NULL, {NULL}, false},
	{"chunked trailer not finished", S(CHUNKED_HEAD "1\r\nx\r\n0\r\nA: b\r\n"), 0, NULL, {NULL},
	 false},
};

static void response_table(void **state)
{
	(void)state;
	static doh_reader r;
	static run o;
	const size_t steps[] = {0, 1, 3, 17};
	for (size_t c = 0; c < sizeof CASES / sizeof CASES[0]; c++) {
		const response_case *k = &CASES[c];
		for (size_t s = 0; s < sizeof steps / sizeof steps[0]; s++) {
			print_message("%s, step %zu\n", k->name, steps[s]);
			doh_reader_init(&r);
			doh_run(&r, k->in, k->len, steps[s], &o);
			assert_int_equal(o.rc, k->rc);
			if (k->err) {
				assert_string_equal(o.err, k->err);
			} else {
				assert_null(o.err);
				assert_int_equal(o.used, k->len);
			}
			size_t want = 0;
			while (want < BODIES_MAX && k->bodies[want])
				want++;
			assert_int_equal(o.n_bodies, want);
			for (size_t i = 0; i < want; i++) {
				assert_int_equal(o.body_len[i], strlen(k->bodies[i]));
				assert_memory_equal(o.body[i], k->bodies[i], o.body_len[i]);
			}
			if (want)
				assert_int_equal(o.closing, k->closing);
		}
	}
}

/* A failed reader stays failed, with its text, taking nothing. */
static void failure_sticks(void **state)
{
	(void)state;
	static doh_reader r;
	doh_reader_init(&r);
	const uint8_t *b;
	size_t used, len;
	const char *err = NULL;
	assert_int_equal(doh_feed(&r, S("HTTP/1.1 503 Busy\r\n\r\n"), &used, &b, &len, &err), -1);
	assert_string_equal(err, "dns: https: the server answered 503");
	err = NULL;
	assert_int_equal(doh_feed(&r, S(OK_HEAD "Content-Length: 1\r\n\r\nx"), &used, &b, &len, &err),
	                 -1);
	assert_int_equal(used, 0);
	assert_string_equal(err, "dns: https: the server answered 503");
	assert_null(doh_reader_eof(&r, false));
}

static size_t fill_head(uint8_t *p, size_t total, const char *tail)
{
	/* OK_HEAD, then "X: aaa...\r\n" padding, then tail, exactly total bytes */
	size_t a = strlen(OK_HEAD), t = strlen(tail);
	memcpy(p, OK_HEAD, a);
	size_t pad = total - a - t; /* >= 6: "X: " + a value + CRLF */
	memcpy(p + a, "X: ", 3);
	memset(p + a + 3, 'a', pad - 5);
	memcpy(p + a + pad - 2, "\r\n", 2);
	memcpy(p + a + pad, tail, t);
	return total;
}

static void head_limit(void **state)
{
	(void)state;
	static doh_reader r;
	static run o;
	static uint8_t in[DOH_HEAD_MAX + 64];
	const char tail[] = "Content-Length: 2\r\n\r\n";
	const size_t steps[] = {0, 1, 1000};
	for (size_t s = 0; s < sizeof steps / sizeof steps[0]; s++) {
		/* a head of exactly DOH_HEAD_MAX bytes is read */
		size_t n = fill_head(in, DOH_HEAD_MAX, tail);
		memcpy(in + n, "ok", 2);
		doh_reader_init(&r);
		doh_run(&r, in, n + 2, steps[s], &o);
		assert_int_equal(o.rc, 1);
		assert_int_equal(o.n_bodies, 1);
		assert_memory_equal(o.body[0], "ok", 2);

		/* one byte more is not */
		n = fill_head(in, DOH_HEAD_MAX + 1, tail);
		memcpy(in + n, "ok", 2);
		doh_reader_init(&r);
		doh_run(&r, in, n + 2, steps[s], &o);
		assert_int_equal(o.rc, -1);
		assert_string_equal(o.err, T_HEAD);
	}
	/* nor are more field lines than HTTP_FIELDS_MAX, however short */
	size_t n = strlen(OK_HEAD);
	memcpy(in, OK_HEAD, n);
	for (int i = 0; i < HTTP_FIELDS_MAX; i++) {
		memcpy(in + n, "X: y\r\n", 6);
		n += 6;
	}
	memcpy(in + n, "\r\n", 2);
	doh_reader_init(&r);
	doh_run(&r, in, n + 2, 0, &o);
	assert_int_equal(o.rc, -1);
	assert_string_equal(o.err, T_HEAD);
}

static void body_limit(void **state)
{
	(void)state;
	static doh_reader r;
	static run o;
	static uint8_t in[DNS_FRAME_MAX + 512];
	const size_t steps[] = {0, 1, 4096};
	for (size_t s = 0; s < sizeof steps / sizeof steps[0]; s++) {
		/* Content-Length: the maximum */
		int h = snprintf((char *)in, sizeof in, OK_HEAD "Content-Length: %d\r\n\r\n", DNS_FRAME_MAX);
		assert_true(h > 0);
		for (size_t i = 0; i < DNS_FRAME_MAX; i++)
			in[(size_t)h + i] = (uint8_t)(i % 251);
		doh_reader_init(&r);
		doh_run(&r, in, (size_t)h + DNS_FRAME_MAX, steps[s], &o);
		assert_int_equal(o.rc, 1);
		assert_int_equal(o.body_len[0], DNS_FRAME_MAX);
		assert_memory_equal(o.body[0], in + h, DNS_FRAME_MAX);

		/* chunked: the maximum in two chunks, then one byte more */
		h = snprintf((char *)in, sizeof in, CHUNKED_HEAD "fff0\r\n");
		size_t n = (size_t)h;
		for (size_t i = 0; i < 0xfff0; i++)
			in[n++] = (uint8_t)(i % 13);
		memcpy(in + n, "\r\nF\r\n", 5);
		n += 5;
		memset(in + n, 'z', 15);
		n += 15;
		memcpy(in + n, "\r\n0\r\n\r\n", 7);
		doh_reader_init(&r);
		doh_run(&r, in, n + 7, steps[s], &o);
		assert_int_equal(o.rc, 1);
		assert_int_equal(o.body_len[0], DNS_FRAME_MAX);
		assert_memory_equal(o.body[0] + 0xfff0, "zzzzzzzzzzzzzzz", 15);
		memcpy(in + n, "\r\n1\r\nz\r\n0\r\n\r\n", 13);
		doh_reader_init(&r);
		doh_run(&r, in, n + 13, steps[s], &o);
		assert_int_equal(o.rc, -1);
		assert_string_equal(o.err, T_BODY);
	}
}

static void eof(void **state)
{
	(void)state;
	static doh_reader r;
	static run o;
	doh_reader_init(&r);
	assert_null(doh_reader_eof(&r, false));
	assert_string_equal(doh_reader_eof(&r, true), T_CLOSED);

	/* mid-head, mid-body */
	doh_run(&r, S("HTTP/1.1 200"), 0, &o);
	assert_string_equal(doh_reader_eof(&r, false), T_CLOSED);
	doh_reader_init(&r);
	doh_run(&r, S(OK_HEAD "Content-Length: 5\r\n\r\nhe"), 0, &o);
	assert_int_equal(o.rc, 0);
	assert_string_equal(doh_reader_eof(&r, false), T_CLOSED);

	/* between responses: only when one is awaited */
	doh_reader_init(&r);
	doh_run(&r, S(OK_HEAD "Content-Length: 2\r\n\r\nok"), 0, &o);
	assert_int_equal(o.rc, 1);
	assert_null(doh_reader_eof(&r, false));
	assert_string_equal(doh_reader_eof(&r, true), T_CLOSED);
}

/* doh_reader_closing tells of the last complete response, not of one
 * still arriving. */
static void closing_is_per_response(void **state)
{
	(void)state;
	static doh_reader r;
	static run o;
	doh_reader_init(&r);
	assert_false(doh_reader_closing(&r));
	doh_run(&r, S(OK_HEAD "Content-Length: 1\r\n\r\na" OK_HEAD "Connection: close\r\n"), 0, &o);
	assert_int_equal(o.rc, 0);
	assert_int_equal(o.n_bodies, 1);
	assert_false(doh_reader_closing(&r));
	doh_run(&r, S("Content-Length: 1\r\n\r\nb"), 1, &o);
	assert_int_equal(o.rc, 1);
	assert_true(doh_reader_closing(&r));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(tcp_one_call),
		cmocka_unit_test(tcp_byte_by_byte),
		cmocka_unit_test(tcp_two_in_one_buffer),
		cmocka_unit_test(tcp_maximum),
		cmocka_unit_test(tcp_zero_length),
		cmocka_unit_test(tcp_prefix),
		cmocka_unit_test(request_bytes),
		cmocka_unit_test(request_refused),
		cmocka_unit_test(response_table),
		cmocka_unit_test(failure_sticks),
		cmocka_unit_test(head_limit),
		cmocka_unit_test(body_limit),
		cmocka_unit_test(eof),
		cmocka_unit_test(closing_is_per_response),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
