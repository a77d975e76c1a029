/* test_ws.c - WebSocket stacks (alone and over TLS) wired in memory: upgrade, data, ping, close, refusals, bad frames; the frame codec's masking, lengths and checks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include "stackpair.h"
#include "transport/stack.h"
#include "transport/tls.h"
#include "transport/ws.h"
#include "transport/ws_frame.h"

#define PATH "/vless"
#define HOST "example.test"

/* ---- a certificate for the TLS+WS cases ---- */

static char dir[64], cert[96], key[96];

static int make_files(void **state)
{
	(void)state;
	snprintf(dir, sizeof dir, "/tmp/test_ws.XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	snprintf(cert, sizeof cert, "%s/cert.pem", dir);
	snprintf(key, sizeof key, "%s/key.pem", dir);
	EVP_PKEY *k = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
	X509 *x = X509_new();
	X509_set_version(x, 2);
	ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
	X509_gmtime_adj(X509_getm_notBefore(x), -3600);
	X509_gmtime_adj(X509_getm_notAfter(x), 86400);
	X509_set_pubkey(x, k);
	X509_NAME *n = X509_get_subject_name(x);
	X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC, (const unsigned char *)HOST, -1, -1, 0);
	X509_set_issuer_name(x, n);
	X509V3_CTX v3;
	X509V3_set_ctx_nodb(&v3);
	X509V3_set_ctx(&v3, x, x, NULL, NULL, 0);
	X509_EXTENSION *san = X509V3_EXT_conf_nid(NULL, &v3, NID_subject_alt_name, "DNS:" HOST);
	X509_add_ext(x, san, -1);
	X509_EXTENSION_free(san);
	X509_sign(x, k, EVP_sha256());
	FILE *f = fopen(cert, "w");
	PEM_write_X509(f, x);
	fclose(f);
	f = fopen(key, "w");
	PEM_write_PrivateKey(f, k, NULL, NULL, 0, NULL, NULL);
	fclose(f);
	X509_free(x);
	EVP_PKEY_free(k);
	return 0;
}

static int remove_files(void **state)
{
	(void)state;
	unlink(cert), unlink(key);
	rmdir(dir);
	return 0;
}

/* ---- two stacks wired to each other (stackpair.h) ---- */

static layer *client_layer(const char *path, uint8_t seed)
{
	char err[128] = "";
	ws_client_config cfg = {.path = path, .host = HOST};
	memset(cfg.seed, seed, sizeof cfg.seed);
	layer *l = ws_client_new(&cfg, err, sizeof err);
	assert_non_null(l);
	return l;
}

/* A client and a server stack: WebSocket alone, or over TLS. */
static void open_pair(end *c, end *s, bool tls, const char *client_path)
{
	char err[256] = "";
	memset(c, 0, sizeof *c);
	memset(s, 0, sizeof *s);
	c->s = stack_new();
	s->s = stack_new();
	c->reading = s->reading = true;
	if (tls) {
		tls_client_config cfg = {.server_name = HOST, .ca_file = cert};
		tls_client_ctx *cc = tls_client_ctx_new(&cfg, err, sizeof err);
		tls_server_ctx *sc = tls_server_ctx_new(cert, key, NULL, err, sizeof err);
		assert_non_null(cc);
		assert_non_null(sc);
		assert_int_equal(stack_push(c->s, tls_client_new(cc, NULL, err, sizeof err)), 0);
		assert_int_equal(stack_push(s->s, tls_server_new(sc, err, sizeof err)), 0);
		tls_client_ctx_unref(cc);
		tls_server_ctx_unref(sc);
	}
	c->l = client_layer(client_path, 7);
	s->l = ws_server_new(PATH, err, sizeof err);
	assert_non_null(s->l);
	assert_int_equal(stack_push(c->s, c->l), 0);
	assert_int_equal(stack_push(s->s, s->l), 0);
	assert_int_equal(stack_start(c->s), 0);
}

static void close_pair(end *c, end *s)
{
	stack_free(c->s);
	stack_free(s->s);
	free(c->rx);
	free(s->rx);
}

static void exchange(bool tls, size_t len, size_t chunk)
{
	end c, s;
	open_pair(&c, &s, tls, PATH);
	uint8_t *up = pattern(len, 1), *down = pattern(len, 2);
	c.tx = up, c.tx_len = len;
	s.tx = down, s.tx_len = len;
	assert_int_equal(run(&c, &s, chunk), 0);
	assert_true(stack_ready(c.s) && stack_ready(s.s));
	assert_int_equal(s.rx_len, len);
	assert_memory_equal(s.rx, up, len);
	assert_int_equal(c.rx_len, len);
	assert_memory_equal(c.rx, down, len);
	free(up);
	free(down);
	close_pair(&c, &s);
}

/* What a's socket would write next, all of it, as a string. */
static char *take_wire(stack *a, size_t *len)
{
	const uint8_t *d;
	size_t n = stack_wire_out(a, &d);
	char *t = malloc(n + 1);
	memcpy(t, d, n);
	t[n] = '\0';
	if (stack_wire_done(a, n) < 0) /* only a failed stack says no */
		assert_non_null(stack_error(a));
	*len = n;
	return t;
}

/* A frame as a client sends it (masked with 1 2 3 4) or a server does. */
static size_t frame(uint8_t *out, uint8_t b0, const void *payload, size_t n, bool masked)
{
	static const uint8_t mask[4] = {1, 2, 3, 4};
	size_t k = 0;
	out[k++] = b0;
	uint8_t m = masked ? 0x80 : 0;
	if (n < 126) {
		out[k++] = m | (uint8_t)n;
	} else {
		out[k++] = m | 126;
		out[k++] = (uint8_t)(n >> 8);
		out[k++] = (uint8_t)n;
	}
	if (masked) {
		memcpy(out + k, mask, 4);
		k += 4;
	}
	for (size_t i = 0; i < n; i++)
		out[k + i] = ((const uint8_t *)payload)[i] ^ (masked ? mask[i % 4] : 0);
	return k + n;
}

static void upgraded(end *c, end *s)
{
	open_pair(c, s, false, PATH);
	assert_int_equal(run(c, s, SIZE_MAX), 0);
	assert_true(stack_ready(c->s) && stack_ready(s->s));
}

/* ---- tests ---- */

/* RFC 6455 section 1.3's example. */
static void accept_key_example(void **state)
{
	(void)state;
	char out[29];
	assert_int_equal(ws_accept_key("dGhlIHNhbXBsZSBub25jZQ==", 24, out), 0);
	assert_string_equal(out, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
}

static void ws_bulk(void **state) { (void)state, exchange(false, 1 << 20, SIZE_MAX); }
static void ws_byte_by_byte(void **state) { (void)state, exchange(false, 5000, 1); }
static void tls_ws_bulk(void **state) { (void)state, exchange(true, 1 << 20, SIZE_MAX); }
static void tls_ws_byte_by_byte(void **state) { (void)state, exchange(true, 5000, 1); }

static void request_format(void **state)
{
	(void)state;
	stack *a = stack_new(), *b = stack_new();
	assert_int_equal(stack_push(a, client_layer("/vless?ed=2048", 1)), 0);
	assert_int_equal(stack_push(b, client_layer("/vless?ed=2048", 2)), 0);
	assert_int_equal(stack_start(a), 0);
	assert_int_equal(stack_start(b), 0);
	size_t n, m;
	char *r = take_wire(a, &n), *r2 = take_wire(b, &m);
	const char *fixed[] = {"GET /vless?ed=2048 HTTP/1.1\r\n", "\r\nHost: " HOST "\r\n",
	                       "\r\nUpgrade: websocket\r\n", "\r\nConnection: Upgrade\r\n",
	                       "\r\nSec-WebSocket-Version: 13\r\n"};
	assert_memory_equal(r, fixed[0], strlen(fixed[0]));
	for (size_t i = 1; i < sizeof fixed / sizeof fixed[0]; i++)
		assert_non_null(strstr(r, fixed[i]));
	assert_string_equal(r + n - 4, "\r\n\r\n");
	const char *k = strstr(r, "Sec-WebSocket-Key: ");
	assert_non_null(k);
	k += strlen("Sec-WebSocket-Key: ");
	assert_memory_equal(k + 22, "==\r\n", 4);
	/* Another seed, another key. */
	assert_string_not_equal(strstr(r, "Sec-WebSocket-Key: "), strstr(r2, "Sec-WebSocket-Key: "));
	assert_false(stack_ready(a));
	free(r);
	free(r2);
	stack_free(a);
	stack_free(b);
}

/* A wrong path is answered 404 and named on both sides. */
static void wrong_path(void **state)
{
	(void)state;
	static const struct {
		const char *path;
		const char *server_text;
	} cases[] = {
		{"/x", "ws: wrong path \"/x\" (expected \"/vless\")"},
		{"/x?ed=2048", "ws: wrong path \"/x\" (expected \"/vless\")"},
		{"/vless/", "ws: wrong path \"/vless/\" (expected \"/vless\")"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		end c, s;
		open_pair(&c, &s, false, cases[i].path);
		assert_int_equal(run(&c, &s, SIZE_MAX), LAYER_ERR_AUTH);
		assert_string_equal(stack_error(s.s), cases[i].server_text);
		assert_null(stack_error(c.s));
		const uint8_t *d;
		size_t n = stack_wire_out(s.s, &d);
		assert_true(n > 0);
		assert_memory_equal(d, "HTTP/1.1 404 Not Found\r\n", 24);
		assert_int_equal(stack_from_wire(c.s, d, n), LAYER_ERR_AUTH);
		assert_string_equal(stack_error(c.s), "ws: upgrade refused: 404 Not Found");
		close_pair(&c, &s);
	}
}

/* The same refusals over TLS: the 404 is encrypted before the error. */
static void wrong_path_over_tls(void **state)
{
	(void)state;
	end c, s;
	open_pair(&c, &s, true, "/x");
	assert_int_equal(run(&c, &s, SIZE_MAX), LAYER_ERR_AUTH);
	assert_string_equal(stack_error(s.s), "ws: wrong path \"/x\" (expected \"/vless\")");
	const uint8_t *d;
	size_t n = stack_wire_out(s.s, &d);
	assert_int_equal(stack_from_wire(c.s, d, n), LAYER_ERR_AUTH);
	assert_string_equal(stack_error(c.s), "ws: upgrade refused: 404 Not Found");
	close_pair(&c, &s);
}

typedef struct response_case {
	const char *response;
	int err;
	const char *text;
} response_case;

/* The client's checks of the server's answer (RFC 6455 section 4.1). */
static void client_checks_response(void **state)
{
	(void)state;
	const response_case cases[] = {
		{"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n", LAYER_ERR_AUTH,
		 "ws: upgrade refused: 403 Forbidden"},
		{"HTTP/1.1 200 OK\r\n\r\n", LAYER_ERR_AUTH, "ws: upgrade refused: 200 OK"},
		{"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
		 "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n",
		 LAYER_ERR_PROTO, "ws: bad Sec-WebSocket-Accept"},
		{"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
		 LAYER_ERR_PROTO, "ws: bad Sec-WebSocket-Accept"},
		{"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n\r\n", LAYER_ERR_PROTO,
		 "ws: bad upgrade response: no Upgrade: websocket"},
		{"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n", LAYER_ERR_PROTO,
		 "ws: bad upgrade response: no Connection: Upgrade"},
		{"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n"
		 "Sec-WebSocket-Extensions: permessage-deflate\r\n\r\n",
		 LAYER_ERR_PROTO, "ws: bad upgrade response: an extension we did not ask for"},
		{"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n"
		 "Sec-WebSocket-Protocol: chat\r\n\r\n",
		 LAYER_ERR_PROTO, "ws: bad upgrade response: a subprotocol we did not ask for"},
		{"HTTP/1.1 101\nUpgrade: websocket\r\n\r\n", LAYER_ERR_PROTO,
		 "ws: bad upgrade response: malformed head"},
		{"HTTP/1.1 418 \x80\xff tea\r\n\r\n", LAYER_ERR_AUTH, "ws: upgrade refused: 418 ?? tea"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		stack *a = stack_new();
		assert_int_equal(stack_push(a, client_layer(PATH, 3)), 0);
		assert_int_equal(stack_start(a), 0);
		const char *r = cases[i].response;
		assert_int_equal(stack_from_wire(a, (const uint8_t *)r, strlen(r)), cases[i].err);
		assert_string_equal(stack_error(a), cases[i].text);
		stack_free(a);
	}
	/* An endless head is cut at WS_HEAD_MAX. */
	stack *a = stack_new();
	assert_int_equal(stack_push(a, client_layer(PATH, 3)), 0);
	assert_int_equal(stack_start(a), 0);
	char *big = malloc(WS_HEAD_MAX);
	memset(big, 'a', WS_HEAD_MAX);
	memcpy(big, "HTTP/1.1 101 OK\r\nX: ", 20);
	assert_int_equal(stack_from_wire(a, (const uint8_t *)big, WS_HEAD_MAX - 1), WS_HEAD_MAX - 1);
	assert_int_equal(stack_from_wire(a, (const uint8_t *)"a", 1), LAYER_ERR_PROTO);
	assert_string_equal(stack_error(a), "ws: upgrade response head too large");
	free(big);
	stack_free(a);
}

typedef struct request_case {
	const char *request;
	const char *status; /* the answer's start line */
	int err;
	const char *text;
} request_case;

#define KEY_FIELD "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"

/* The server's checks of the request (RFC 6455 section 4.2.1). */
static void server_checks_request(void **state)
{
	(void)state;
	const request_case cases[] = {
		{"GET /vless HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" KEY_FIELD
		 "Sec-WebSocket-Version: 13\r\n\r\n",
		 "HTTP/1.1 101 Switching Protocols\r\n", 0, NULL},
		{"GET /vless?ed=1 HTTP/1.1\r\nHost: h\r\nUpgrade: WebSocket\r\n"
		 "Connection: keep-alive, Upgrade\r\n" KEY_FIELD "Sec-WebSocket-Version: 13\r\n\r\n",
		 "HTTP/1.1 101 Switching Protocols\r\n", 0, NULL},
		{"POST /vless HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" KEY_FIELD
		 "Sec-WebSocket-Version: 13\r\n\r\n",
		 "HTTP/1.1 400 Bad Request\r\n", LAYER_ERR_PROTO, "ws: bad upgrade request: not GET"},
		{"GET /vless HTTP/1.0\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" KEY_FIELD
		 "Sec-WebSocket-Version: 13\r\n\r\n",
		 "HTTP/1.1 400 Bad Request\r\n", LAYER_ERR_PROTO, "ws: bad upgrade request: not HTTP/1.1"},
		{"GET /vless HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" KEY_FIELD
		 "Sec-WebSocket-Version: 13\r\n\r\n",
		 "HTTP/1.1 400 Bad Request\r\n", LAYER_ERR_PROTO, "ws: bad upgrade request: no Host"},
		{"GET /vless HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\n" KEY_FIELD
		 "Sec-WebSocket-Version: 13\r\n\r\n",
		 "HTTP/1.1 400 Bad Request\r\n", LAYER_ERR_PROTO,
		 "ws: bad upgrade request: no Upgrade: websocket"},
		{"GET /vless HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n" KEY_FIELD
		 "Sec-WebSocket-Version: 13\r\n\r\n",
		 "HTTP/1.1 400 Bad Request\r\n", LAYER_ERR_PROTO,
		 "ws: bad upgrade request: no Connection: Upgrade"},
		{"GET /vless HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" KEY_FIELD
		 "Sec-WebSocket-Version: 8\r\n\r\n",
		 "HTTP/1.1 426 Upgrade Required\r\nSec-WebSocket-Version: 13\r\n", LAYER_ERR_PROTO,
		 "ws: unsupported Sec-WebSocket-Version"},
		{"GET /vless HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
		 "Sec-WebSocket-Key: short==\r\nSec-WebSocket-Version: 13\r\n\r\n",
		 "HTTP/1.1 400 Bad Request\r\n", LAYER_ERR_PROTO,
		 "ws: bad upgrade request: bad Sec-WebSocket-Key"},
		{"GET /vless HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
		 "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25j!!==\r\nSec-WebSocket-Version: 13\r\n\r\n",
		 "HTTP/1.1 400 Bad Request\r\n", LAYER_ERR_PROTO,
		 "ws: bad upgrade request: bad Sec-WebSocket-Key"},
		{"GET /vless HTTP/1.1\r\nBad Field\r\n\r\n", "HTTP/1.1 400 Bad Request\r\n",
		 LAYER_ERR_PROTO, "ws: bad upgrade request: malformed head"},
		{"GET /other HTTP/1.1\r\n\r\n", "HTTP/1.1 404 Not Found\r\n", LAYER_ERR_AUTH,
		 "ws: wrong path \"/other\" (expected \"/vless\")"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char err[64];
		stack *b = stack_new();
		assert_int_equal(stack_push(b, ws_server_new(PATH, err, sizeof err)), 0);
		const char *r = cases[i].request;
		size_t len = strlen(r);
		/* Byte by byte: nothing is decided before the blank line. */
		ssize_t got = 0;
		for (size_t k = 0; k < len && got >= 0; k++)
			got = stack_from_wire(b, (const uint8_t *)r + k, 1);
		if (got >= 0 && cases[i].err)
			got = stack_from_wire(b, (const uint8_t *)"", 0);
		assert_int_equal(got < 0 ? got : 0, cases[i].err);
		if (cases[i].text)
			assert_string_equal(stack_error(b), cases[i].text);
		else
			assert_true(stack_ready(b));
		size_t n;
		char *out = take_wire(b, &n);
		assert_memory_equal(out, cases[i].status, strlen(cases[i].status));
		if (!cases[i].err)
			assert_non_null(strstr(out, "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"));
		free(out);
		stack_free(b);
	}
	/* An endless head is cut at WS_HEAD_MAX and answered 431. */
	char err[64];
	stack *b = stack_new();
	assert_int_equal(stack_push(b, ws_server_new(PATH, err, sizeof err)), 0);
	char *big = malloc(WS_HEAD_MAX);
	memset(big, 'a', WS_HEAD_MAX);
	memcpy(big, "GET /vless HTTP/1.1\r\nX: ", 24);
	assert_int_equal(stack_from_wire(b, (const uint8_t *)big, WS_HEAD_MAX - 1), WS_HEAD_MAX - 1);
	ssize_t got = stack_from_wire(b, (const uint8_t *)"a", 1);
	if (got >= 0)
		got = stack_from_wire(b, (const uint8_t *)"", 0);
	assert_int_equal(got, LAYER_ERR_PROTO);
	assert_string_equal(stack_error(b), "ws: upgrade request head too large");
	size_t n;
	char *out = take_wire(b, &n);
	assert_memory_equal(out, "HTTP/1.1 431 ", 13);
	free(out);
	free(big);
	stack_free(b);
}

/* Frames that come in the same read as the request are not lost. */
static void frames_after_the_request(void **state)
{
	(void)state;
	char err[64];
	stack *b = stack_new();
	assert_int_equal(stack_push(b, ws_server_new(PATH, err, sizeof err)), 0);
	uint8_t buf[512];
	static const char req[] = "GET /vless HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n"
	                          "Connection: Upgrade\r\n" KEY_FIELD "Sec-WebSocket-Version: 13\r\n\r\n";
	memcpy(buf, req, sizeof req - 1);
	size_t n = sizeof req - 1;
	n += frame(buf + n, 0x82, "early", 5, true);
	assert_int_equal(stack_from_wire(b, buf, n), (ssize_t)n);
	const uint8_t *d;
	assert_int_equal(stack_app_in(b, &d), 5);
	assert_memory_equal(d, "early", 5);
	stack_free(b);
}

static void ping_is_answered(void **state)
{
	(void)state;
	end c, s;
	upgraded(&c, &s);
	uint8_t buf[64];
	size_t n = frame(buf, 0x89, "ping", 4, true);
	assert_int_equal(stack_from_wire(s.s, buf, n), (ssize_t)n);
	size_t m;
	char *out = take_wire(s.s, &m);
	assert_int_equal(m, 6);
	assert_memory_equal(out, "\x8a\x04ping", 6);
	free(out);
	const uint8_t *d;
	assert_int_equal(stack_app_in(s.s, &d), 0);

	/* The client's pong is masked. */
	n = frame(buf, 0x89, "hello", 5, false);
	assert_int_equal(stack_from_wire(c.s, buf, n), (ssize_t)n);
	out = take_wire(c.s, &m);
	assert_int_equal(m, 2 + 4 + 5);
	assert_int_equal((uint8_t)out[0], 0x8a);
	assert_int_equal((uint8_t)out[1], 0x85);
	for (size_t i = 0; i < 5; i++)
		assert_int_equal(out[6 + i] ^ out[2 + i % 4], "hello"[i]);
	free(out);
	/* Pongs are taken and dropped. */
	n = frame(buf, 0x8a, "x", 1, false);
	assert_int_equal(stack_from_wire(c.s, buf, n), (ssize_t)n);
	assert_int_equal(stack_wire_out(c.s, &d), 0);
	assert_int_equal(stack_app_in(c.s, &d), 0);
	close_pair(&c, &s);
}

/* Text frames and fragmented messages carry bytes like binary ones. */
static void fragments_and_text(void **state)
{
	(void)state;
	end c, s;
	upgraded(&c, &s);
	uint8_t buf[128];
	size_t n = frame(buf, 0x01, "hel", 3, true);         /* text, not final */
	n += frame(buf + n, 0x89, "p", 1, true);             /* a ping between */
	n += frame(buf + n, 0x80, "lo", 2, true);            /* continuation, final */
	n += frame(buf + n, 0x82, "", 0, true);              /* an empty message */
	n += frame(buf + n, 0x82, " world", 6, true);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(stack_from_wire(s.s, buf + i, 1), 1);
	const uint8_t *d;
	assert_int_equal(stack_app_in(s.s, &d), 11);
	assert_memory_equal(d, "hello world", 11);
	close_pair(&c, &s);
}

/* Text frames with bytes that are not UTF-8 carry them like binary ones,
 * as Xray and v2ray read them (wslay alone would close with 1007). */
static void text_frames_are_not_utf8_checked(void **state)
{
	(void)state;
	static const uint8_t bad[] = {0xff, 0xfe, 0xc3, 0x28, 0xed, 0xa0, 0x80};
	end c, s;
	upgraded(&c, &s);
	uint8_t buf[512], big[300];
	for (size_t i = 0; i < sizeof big; i++)
		big[i] = (uint8_t)(0x80 + i % 64); /* continuation bytes only */
	size_t n = frame(buf, 0x81, bad, sizeof bad, true);      /* final text */
	n += frame(buf + n, 0x01, bad, 3, true);                  /* text, not final */
	n += frame(buf + n, 0x89, "p", 1, true);                  /* a ping between */
	n += frame(buf + n, 0x80, bad + 3, 4, true);              /* continuation */
	n += frame(buf + n, 0x81, big, sizeof big, true);         /* 16-bit length */
	for (size_t i = 0; i < n; i++)
		assert_int_equal(stack_from_wire(s.s, buf + i, 1), 1);
	const uint8_t *d;
	assert_int_equal(stack_app_in(s.s, &d), 2 * sizeof bad + sizeof big);
	assert_memory_equal(d, bad, sizeof bad);
	assert_memory_equal(d + sizeof bad, bad, sizeof bad);
	assert_memory_equal(d + 2 * sizeof bad, big, sizeof big);
	size_t m;
	char *out = take_wire(s.s, &m); /* the pong, and no close frame */
	assert_int_equal(m, 3);
	assert_memory_equal(out, "\x8a\x01p", 3);
	free(out);
	/* the client side reads the server's unmasked text frames the same way */
	n = frame(buf, 0x81, bad, sizeof bad, false);
	assert_int_equal(stack_from_wire(c.s, buf, n), (ssize_t)n);
	assert_int_equal(stack_app_in(c.s, &d), sizeof bad);
	assert_memory_equal(d, bad, sizeof bad);
	close_pair(&c, &s);
}

/* A peer that pings and never reads the pongs: the pongs wslay holds stay
 * under WS_CONTROL_QUEUE_MAX, then the layer fails with its text. The
 * wire below takes nothing (the socket's send buffer is full). */
static void pings_without_reading_are_bounded(void **state)
{
	(void)state;
	end c, s;
	upgraded(&c, &s);
	uint8_t buf[64];
	size_t n = frame(buf, 0x82, "data", 4, true);
	assert_int_equal(stack_from_wire(s.s, buf, n), (ssize_t)n);
	const uint8_t *d;
	assert_int_equal(stack_app_in(s.s, &d), 4);
	assert_int_equal(stack_app_done(s.s, 4), 0);
	/* fill the stack's wire queue so pongs must wait in wslay */
	static uint8_t fill[64 * 1024];
	ssize_t took = 0;
	while ((took = stack_from_app(s.s, fill, sizeof fill)) > 0)
		;
	ssize_t r = 0;
	int pings = 0;
	for (; pings < 10000 && r >= 0; pings++) {
		n = frame(buf, 0x89, "0123456789abcdef0123456789abcdef", 32, true);
		r = stack_from_wire(s.s, buf, n);
	}
	assert_int_equal(r, LAYER_ERR_PROTO);
	assert_true(pings <= WS_CONTROL_QUEUE_MAX + 2);
	assert_string_equal(stack_error(s.s), "ws: the peer sends pings and does not read the answers");
	close_pair(&c, &s);
}

/* Before its first data frame a peer has WS_EARLY_PINGS_MAX pings. */
static void pings_before_data_are_limited(void **state)
{
	(void)state;
	end c, s;
	upgraded(&c, &s);
	uint8_t buf[64];
	size_t n = frame(buf, 0x89, "p", 1, true);
	for (int i = 0; i < WS_EARLY_PINGS_MAX; i++) {
		assert_int_equal(stack_from_wire(s.s, buf, n), (ssize_t)n);
		size_t m;
		free(take_wire(s.s, &m));
		assert_int_equal(m, 3);
	}
	assert_int_equal(stack_from_wire(s.s, buf, n), LAYER_ERR_PROTO);
	assert_string_equal(stack_error(s.s), "ws: more than 4 pings before any data");
	close_pair(&c, &s);
	/* after data, pings that are read are not counted */
	upgraded(&c, &s);
	size_t k = frame(buf, 0x82, "x", 1, true);
	assert_int_equal(stack_from_wire(s.s, buf, k), (ssize_t)k);
	const uint8_t *d;
	assert_int_equal(stack_app_in(s.s, &d), 1);
	assert_int_equal(stack_app_done(s.s, 1), 0);
	n = frame(buf, 0x89, "p", 1, true);
	for (int i = 0; i < 100; i++) {
		assert_int_equal(stack_from_wire(s.s, buf, n), (ssize_t)n);
		size_t m;
		free(take_wire(s.s, &m));
		assert_int_equal(m, 3);
	}
	close_pair(&c, &s);
}

static void close_handshake(void **state)
{
	(void)state;
	end c, s;
	upgraded(&c, &s);
	c.tx = (const uint8_t *)"bye now", c.tx_len = 7;
	assert_int_equal(run(&c, &s, SIZE_MAX), 0);
	assert_int_equal(stack_shutdown(c.s), 0);
	const uint8_t *d;
	size_t n = stack_wire_out(c.s, &d);
	assert_int_equal(n, 2 + 4 + 2);
	assert_int_equal(d[0], 0x88);
	assert_int_equal(d[6] ^ d[2], 0x03); /* 1000 */
	assert_int_equal(d[7] ^ d[3], 0xe8);
	assert_int_equal(run(&c, &s, 1), 0);
	assert_int_equal(s.rx_len, 7);
	assert_true(ws_peer_closed(s.l));
	assert_true(ws_peer_closed(c.l)); /* the server's reply came back */
	assert_true(stack_ready(s.s));
	/* After the peer's close, app bytes are dropped; after ours, refused. */
	assert_int_equal(stack_from_app(s.s, (const uint8_t *)"late", 4), 4);
	assert_int_equal(stack_wire_out(s.s, &d), 0);
	assert_int_equal(stack_from_app(c.s, (const uint8_t *)"late", 4), LAYER_ERR_STATE);
	assert_string_equal(stack_error(c.s), "ws: send after shutdown");
	close_pair(&c, &s);
}

/* A client that closes before any data frame: the server answers the
 * close and ends, instead of waiting for the handshake timeout. */
static void close_before_any_data(void **state)
{
	(void)state;
	end c, s;
	upgraded(&c, &s);
	uint8_t buf[16];
	size_t n = frame(buf, 0x88, "\x03\xe8", 2, true);
	assert_int_equal(stack_from_wire(s.s, buf, n), LAYER_ERR_CLOSED);
	assert_string_equal(stack_error(s.s), "ws: peer closed before any data");
	const uint8_t *d;
	assert_int_equal(stack_wire_out(s.s, &d), 4);
	assert_memory_equal(d, "\x88\x02\x03\xe8", 4); /* the close reply went out first */
	close_pair(&c, &s);
}

/* The server closes: the client answers, and bytes after the close frame
 * are dropped. */
static void close_from_server(void **state)
{
	(void)state;
	end c, s;
	upgraded(&c, &s);
	uint8_t buf[32];
	size_t n = frame(buf, 0x88, "\x03\xe8", 2, false);
	n += frame(buf + n, 0x82, "after", 5, false);
	assert_int_equal(stack_from_wire(c.s, buf, n), (ssize_t)n);
	assert_true(ws_peer_closed(c.l));
	const uint8_t *d;
	assert_int_equal(stack_app_in(c.s, &d), 0);
	size_t m;
	char *out = take_wire(c.s, &m);
	assert_int_equal((uint8_t)out[0], 0x88);
	free(out);
	assert_int_equal(stack_shutdown(c.s), 0); /* nothing more to say */
	assert_int_equal(stack_wire_out(c.s, &d), 0);
	close_pair(&c, &s);
}

static void close_mid_message(void **state)
{
	(void)state;
	end c, s;
	upgraded(&c, &s);
	uint8_t buf[32];
	size_t n = frame(buf, 0x02, "ab", 2, true);
	n += frame(buf + n, 0x88, "\x03\xe8", 2, true);
	ssize_t r = stack_from_wire(s.s, buf, n);
	if (r >= 0)
		r = stack_from_wire(s.s, (const uint8_t *)"", 0);
	assert_int_equal(r, LAYER_ERR_CLOSED);
	assert_string_equal(stack_error(s.s), "ws: peer closed in the middle of a message");
	const uint8_t *d;
	assert_int_equal(stack_app_in(s.s, &d), 2);
	close_pair(&c, &s);
}

static void oversize_frame(void **state)
{
	(void)state;
	end c, s;
	upgraded(&c, &s);
	uint64_t len = (uint64_t)WS_FRAME_MAX + 1;
	uint8_t hdr[15] = {0x82, 0x80 | 127};
	for (int i = 0; i < 8; i++)
		hdr[2 + i] = (uint8_t)(len >> (56 - 8 * i));
	/* Refused on the header alone (length and mask key), byte by byte:
	 * no payload byte needs to arrive. */
	ssize_t r = 0;
	for (size_t i = 0; i < 14 && r >= 0; i++)
		r = stack_from_wire(s.s, hdr + i, 1);
	assert_int_equal(r, LAYER_ERR_PROTO);
	assert_string_equal(stack_error(s.s), "ws: frame too large");
	const uint8_t *d;
	size_t n = stack_wire_out(s.s, &d);
	assert_int_equal(n, 4);
	assert_memory_equal(d, "\x88\x02\x03\xf1", 4); /* close 1009 went out first */
	close_pair(&c, &s);

	/* WS_FRAME_MAX itself is fine. */
	upgraded(&c, &s);
	uint8_t *big = pattern(WS_FRAME_MAX, 5);
	hdr[1] = 127;
	for (int i = 0; i < 8; i++)
		hdr[2 + i] = (uint8_t)((uint64_t)WS_FRAME_MAX >> (56 - 8 * i));
	assert_int_equal(stack_from_wire(c.s, hdr, 10), 10);
	size_t off = 0;
	int err = 0;
	while (off < WS_FRAME_MAX) {
		ssize_t k = stack_from_wire(c.s, big + off, WS_FRAME_MAX - off);
		assert_true(k > 0);
		off += (size_t)k;
		app(&c, SIZE_MAX, &err);
		assert_int_equal(err, 0);
	}
	app(&c, SIZE_MAX, &err);
	assert_int_equal(c.rx_len, WS_FRAME_MAX);
	assert_memory_equal(c.rx, big, WS_FRAME_MAX);
	free(big);
	close_pair(&c, &s);
}

static void bad_frames(void **state)
{
	(void)state;
	static const struct {
		uint8_t bytes[8];
		size_t len;
	} cases[] = {
		{{0x82, 0x01, 'x'}, 3},             /* a client frame without a mask */
		{{0x83, 0x81, 1, 2, 3, 4, 'x'}, 7}, /* a reserved opcode */
		{{0xc2, 0x81, 1, 2, 3, 4, 'x'}, 7}, /* RSV1 without an extension */
		{{0x80, 0x81, 1, 2, 3, 4, 'x'}, 7}, /* a continuation of nothing */
		{{0x09, 0x80, 1, 2, 3, 4}, 6},      /* a fragmented ping */
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		end c, s;
		upgraded(&c, &s);
		ssize_t r = stack_from_wire(s.s, cases[i].bytes, cases[i].len);
		if (r >= 0)
			r = stack_from_wire(s.s, (const uint8_t *)"", 0);
		assert_int_equal(r, LAYER_ERR_PROTO);
		assert_string_equal(stack_error(s.s), "ws: bad frame");
		const uint8_t *d;
		size_t n = stack_wire_out(s.s, &d);
		assert_true(n >= 2);
		assert_int_equal(d[0], 0x88); /* a close frame went out first */
		close_pair(&c, &s);
	}
}

/* The server's app reads nothing: the client stops at a bound. */
static void backpressure(void **state)
{
	(void)state;
	end c, s;
	upgraded(&c, &s);
	check_backpressure(&c, &s, 4);
	close_pair(&c, &s);
}

static void config_errors(void **state)
{
	(void)state;
	char err[128], longpath[WS_PATH_MAX + 2];
	memset(longpath, 'a', sizeof longpath - 1);
	longpath[0] = '/';
	longpath[sizeof longpath - 1] = '\0';
	static const struct {
		const char *path, *host, *text;
	} cases[] = {
		{"vless", HOST, "ws: bad path \"vless\""},
		{"/a b", HOST, "ws: bad path \"/a b\""},
		{"/a\r\nX: y", HOST, "ws: bad path \"/a\r\nX: y\""},
		{NULL, HOST, "ws: bad path \"\""},
		{"/", "", "ws: bad host \"\""},
		{"/", "a b", "ws: bad host \"a b\""},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		ws_client_config cfg = {.path = cases[i].path, .host = cases[i].host};
		assert_null(ws_client_new(&cfg, err, sizeof err));
		assert_string_equal(err, cases[i].text);
	}
	ws_client_config cfg = {.path = longpath, .host = HOST};
	assert_null(ws_client_new(&cfg, err, sizeof err));
	assert_memory_equal(err, "ws: bad path \"/aaa", 18);
	assert_null(ws_server_new("vless", err, sizeof err));
	assert_string_equal(err, "ws: bad path \"vless\"");
	static const layer_ops other_ops = {.name = "other"};
	layer other = {.ops = &other_ops};
	assert_false(ws_peer_closed(&other));
}

/* ---- the frame codec (ws_frame.h) ---- */

/* Section 5.3, a byte at a time: the reference the word loop must match. */
static void mask_bytes(uint8_t *dst, const uint8_t *src, size_t n, const uint8_t key[4],
                       uint64_t off)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = src[i] ^ key[(off + i) % 4];
}

/* Every start offset mod 8, every alignment of src and dst, lengths
 * around the word and the 32-byte step, in place and not. */
static void mask_every_offset(void **state)
{
	(void)state;
	static const uint8_t key[4] = {0x37, 0xfa, 0x21, 0x3d};
	uint8_t src[600], want[600], got[600], inplace[600];
	for (size_t i = 0; i < sizeof src; i++)
		src[i] = (uint8_t)(i * 131 + 7);
	static const size_t lens[] = {0, 1, 3, 4, 7, 8, 9, 15, 16, 31, 32, 33, 63, 64, 65, 500};
	for (uint64_t off = 0; off < 19; off++)
		for (size_t a = 0; a < 8; a++)
			for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
				size_t n = lens[li];
				mask_bytes(want, src + a, n, key, off);
				memset(got, 0, sizeof got);
				ws_frame_mask(got + (7 - a), src + a, n, key, off);
				assert_memory_equal(got + (7 - a), want, n);
				memcpy(inplace + a, src + a, n);
				ws_frame_mask(inplace + a, inplace + a, n, key, off);
				assert_memory_equal(inplace + a, want, n);
			}
}

/* A payload masked in pieces of any size is the payload masked at once:
 * the key turns with the offset across the pieces' boundaries. */
static void mask_in_pieces(void **state)
{
	(void)state;
	static const uint8_t key[4] = {1, 0x80, 0xff, 0x5a};
	size_t n = 5000;
	uint8_t *src = pattern(n, 9), *want = malloc(n), *got = malloc(n);
	mask_bytes(want, src, n, key, 0);
	for (size_t piece = 1; piece < 40; piece++) {
		memset(got, 0, n);
		for (size_t off = 0; off < n;) {
			size_t k = piece + off % 13;
			if (k > n - off)
				k = n - off;
			ws_frame_mask(got + off, src + off, k, key, off);
			off += k;
		}
		assert_memory_equal(got, want, n);
	}
	free(src);
	free(want);
	free(got);
}

/* Decodes one frame from p[0, n) fed chunk bytes at a time, payload into
 * out; returns the header's error, or the bytes the frame took. */
static ssize_t decode(ws_frame_dec *d, const uint8_t *p, size_t n, size_t chunk, uint8_t *out)
{
	size_t off = 0;
	while (!ws_frame_dec_done(d)) {
		size_t k = n - off < chunk ? n - off : chunk;
		if (k == 0)
			return 0;
		if (!d->in_payload) {
			ssize_t r = ws_frame_dec_head(d, p + off, k);
			if (r < 0)
				return r;
			off += (size_t)r;
		} else {
			off += ws_frame_dec_payload(d, out + d->done, p + off, k);
		}
	}
	return (ssize_t)off;
}

/* RFC 6455 section 5.7's examples, byte for byte. */
static void rfc_examples(void **state)
{
	(void)state;
	static const uint8_t masked_hello[] = {0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d,
	                                       0x7f, 0x9f, 0x4d, 0x51, 0x58};
	static const uint8_t hello[] = {0x81, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f};
	static const uint8_t key[4] = {0x37, 0xfa, 0x21, 0x3d};
	uint8_t out[16];
	for (size_t chunk = 1; chunk <= sizeof masked_hello; chunk++) {
		ws_frame_dec d = {.masked = true, .max = WS_FRAME_MAX};
		memset(out, 0, sizeof out);
		assert_int_equal(decode(&d, masked_hello, sizeof masked_hello, chunk, out),
		                 sizeof masked_hello);
		assert_int_equal(d.op, WS_OP_TEXT);
		assert_true(d.fin);
		assert_memory_equal(out, "Hello", 5);
		ws_frame_dec c = {.masked = false, .max = WS_FRAME_MAX};
		assert_int_equal(decode(&c, hello, sizeof hello, chunk, out), sizeof hello);
		assert_memory_equal(out, "Hello", 5);
	}
	/* and written back */
	size_t h = ws_frame_head(out, 0x81, 5, key);
	assert_int_equal(h, 6);
	ws_frame_mask(out + h, (const uint8_t *)"Hello", 5, key, 0);
	assert_memory_equal(out, masked_hello, sizeof masked_hello);
	assert_int_equal(ws_frame_head(out, 0x81, 5, NULL), 2);
	assert_memory_equal(out, hello, 2);
	/* "256 bytes binary message": 0x82 0x7E 0x0100; "64KiB": 0x82 0x7F
	 * 0x0000000000010000 */
	assert_int_equal(ws_frame_head(out, 0x82, 256, NULL), 4);
	assert_memory_equal(out, "\x82\x7e\x01\x00", 4);
	assert_int_equal(ws_frame_head(out, 0x82, 65536, NULL), 10);
	assert_memory_equal(out, "\x82\x7f\x00\x00\x00\x00\x00\x01\x00\x00", 10);
}

/* The three length forms at their edges, masked and not, written and read
 * back whole and a byte at a time. */
static void length_boundaries(void **state)
{
	(void)state;
	static const struct {
		uint64_t n;
		size_t head;
	} cases[] = {{0, 2}, {125, 2}, {126, 4}, {65535, 4}, {65536, 10}, {70001, 10}};
	static const uint8_t key[4] = {9, 8, 7, 6};
	uint8_t *payload = pattern(70001, 3);
	uint8_t *wire = malloc(70001 + WS_FRAME_HEAD_MAX), *out = malloc(70001);
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		for (int m = 0; m < 2; m++) {
			size_t n = (size_t)cases[i].n;
			size_t h = ws_frame_head(wire, 0x82, n, m ? key : NULL);
			assert_int_equal(h, cases[i].head + (m ? 4 : 0));
			assert_int_equal(ws_frame_head_len(n, m), h);
			if (m)
				ws_frame_mask(wire + h, payload, n, key, 0);
			else
				memcpy(wire + h, payload, n);
			static const size_t chunks[] = {1, 7, SIZE_MAX};
			for (size_t c = 0; c < 3; c++) {
				ws_frame_dec d = {.masked = m, .max = WS_FRAME_MAX};
				memset(out, 0, n);
				assert_int_equal(decode(&d, wire, h + n, chunks[c], out), h + n);
				assert_int_equal(d.len, n);
				assert_memory_equal(out, payload, n);
			}
		}
	free(payload);
	free(wire);
	free(out);
}

/* Header checks: masking by side, RSV, reserved opcodes, control frames,
 * fragments, and the size bound (section 5). */
static void decoder_refusals(void **state)
{
	(void)state;
	static const struct {
		bool masked; /* the decoder's side: a server's */
		uint8_t bytes[14];
		size_t len;
		ssize_t want;
	} cases[] = {
		{true, {0x82, 0x01}, 2, WS_FRAME_BAD},                /* server: unmasked */
		{false, {0x82, 0x81}, 2, WS_FRAME_BAD},               /* client: masked */
		{true, {0x92, 0x80}, 2, WS_FRAME_BAD},                /* RSV3 */
		{true, {0x87, 0x80}, 2, WS_FRAME_BAD},                /* reserved data opcode */
		{true, {0x8b, 0x80}, 2, WS_FRAME_BAD},                /* reserved control opcode */
		{true, {0x09, 0x80}, 2, WS_FRAME_BAD},                /* fragmented ping */
		{true, {0x89, 0xfe, 0x00, 0x7e}, 4, WS_FRAME_BAD},    /* 126-byte ping */
		{true, {0x80, 0x80}, 2, WS_FRAME_BAD},                /* continuation of nothing */
		{true, {0x82, 0xe5}, 2, WS_FRAME_TOO_BIG},            /* 101 > max 100 */
		{true, {0x82, 0xfe, 0x00, 0x65}, 4, WS_FRAME_TOO_BIG},
		{true, {0x82, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 0}, 10, WS_FRAME_TOO_BIG}, /* 2^63 */
		{true, {0x82, 0xe4, 1, 2, 3, 4}, 6, 6},               /* 100 is fine */
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		ws_frame_dec d = {.masked = cases[i].masked, .max = 100};
		ssize_t r = 0;
		size_t took = 0;
		/* a byte at a time: the verdict comes with the last header byte */
		for (size_t k = 0; k < cases[i].len && r >= 0; k++) {
			r = ws_frame_dec_head(&d, cases[i].bytes + k, 1);
			took += r > 0 ? (size_t)r : 0;
		}
		if (cases[i].want < 0)
			assert_int_equal(r, cases[i].want);
		else
			assert_int_equal(took, (size_t)cases[i].want);
	}
}

/* A fragmented message with a ping between its frames, and a new message
 * inside it refused. */
static void decoder_fragments(void **state)
{
	(void)state;
	ws_frame_dec d = {.masked = false, .max = WS_FRAME_MAX};
	uint8_t out[8];
	static const uint8_t frag1[] = {0x01, 0x03, 'H', 'e', 'l'};
	static const uint8_t ping[] = {0x89, 0x01, 'p'};
	static const uint8_t frag2[] = {0x80, 0x02, 'l', 'o'};
	assert_int_equal(decode(&d, frag1, sizeof frag1, 1, out), sizeof frag1);
	assert_true(d.in_msg);
	ws_frame_dec_next(&d);
	assert_int_equal(decode(&d, ping, sizeof ping, 1, out), sizeof ping);
	assert_int_equal(d.op, WS_OP_PING);
	assert_true(d.in_msg);
	ws_frame_dec_next(&d);
	assert_int_equal(decode(&d, frag2, sizeof frag2, 1, out), sizeof frag2);
	assert_false(d.in_msg);
	ws_frame_dec_next(&d);
	assert_int_equal(decode(&d, frag1, sizeof frag1, SIZE_MAX, out), sizeof frag1);
	ws_frame_dec_next(&d);
	static const uint8_t binary[] = {0x82, 0x00};
	assert_int_equal(ws_frame_dec_head(&d, binary, sizeof binary), WS_FRAME_BAD);
}

/* Frames of every length form through the server layer: the payload comes
 * out whole however the bytes are cut, across frame boundaries. */
static void layer_length_boundaries(void **state)
{
	(void)state;
	static const size_t lens[] = {0, 1, 125, 126, 127, 65535, 65536, 100000};
	size_t total = 0, cap = 0;
	for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
		total += lens[i], cap += lens[i] + WS_FRAME_HEAD_MAX;
	uint8_t *payload = pattern(total, 11), *wire = malloc(cap);
	static const size_t chunks[] = {1, 5, 4096, SIZE_MAX};
	for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
		size_t n = 0, off = 0;
		uint8_t key[4] = {0xde, 0xad, 0xbe, 0xef};
		for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
			key[0]++;
			n += ws_frame_head(wire + n, 0x82, lens[i], key);
			ws_frame_mask(wire + n, payload + off, lens[i], key, 0);
			n += lens[i], off += lens[i];
		}
		end cl, s;
		upgraded(&cl, &s);
		size_t sent = 0;
		int err = 0;
		while (sent < n) {
			size_t k = n - sent < chunks[c] ? n - sent : chunks[c];
			ssize_t r = stack_from_wire(s.s, wire + sent, k);
			assert_true(r >= 0);
			sent += (size_t)r;
			app(&s, SIZE_MAX, &err);
			assert_int_equal(err, 0);
		}
		app(&s, SIZE_MAX, &err);
		assert_int_equal(s.rx_len, total);
		assert_memory_equal(s.rx, payload, total);
		close_pair(&cl, &s);
	}
	free(payload);
	free(wire);
}

/* A client's big write: whole frames of at most WS_MSG_OUT_MAX, each with a
 * key of its own, that unmask to the bytes written. */
static void client_frames_and_keys(void **state)
{
	(void)state;
	end c, s;
	upgraded(&c, &s);
	size_t len = 3 * WS_MSG_OUT_MAX + 100;
	uint8_t *data = pattern(len, 4), *got = malloc(len);
	size_t in = 0, out = 0, frames = 0;
	uint8_t keys[16][4];
	ws_frame_dec d = {.masked = true, .max = WS_FRAME_MAX};
	while (out < len) {
		if (in < len) {
			ssize_t r = stack_from_app(c.s, data + in, len - in);
			assert_true(r >= 0);
			in += (size_t)r;
		}
		const uint8_t *w;
		size_t n = stack_wire_out(c.s, &w), off = 0;
		assert_true(n > 0);
		while (off < n) {
			if (!d.in_payload) {
				ssize_t r = ws_frame_dec_head(&d, w + off, n - off);
				assert_true(r > 0);
				off += (size_t)r;
				if (d.in_payload) {
					assert_int_equal(d.op, WS_OP_BINARY);
					assert_true(d.fin);
					assert_true(d.len <= WS_MSG_OUT_MAX);
					assert_true(frames < 16);
					memcpy(keys[frames++], d.key, 4);
				}
				continue;
			}
			size_t k = ws_frame_dec_payload(&d, got + out, w + off, n - off);
			off += k, out += k;
			if (ws_frame_dec_done(&d))
				ws_frame_dec_next(&d);
		}
		assert_int_equal(stack_wire_done(c.s, n), 0);
	}
	assert_memory_equal(got, data, len);
	assert_true(frames >= 4);
	for (size_t i = 1; i < frames; i++)
		assert_memory_not_equal(keys[i], keys[i - 1], 4);
	free(data);
	free(got);
	close_pair(&c, &s);
}

/* A client refuses a masked frame from the server (section 5.1). */
static void client_refuses_masked(void **state)
{
	(void)state;
	end c, s;
	upgraded(&c, &s);
	uint8_t buf[32];
	size_t n = frame(buf, 0x82, "x", 1, true);
	ssize_t r = stack_from_wire(c.s, buf, n);
	if (r >= 0)
		r = stack_from_wire(c.s, (const uint8_t *)"", 0);
	assert_int_equal(r, LAYER_ERR_PROTO);
	assert_string_equal(stack_error(c.s), "ws: bad frame");
	const uint8_t *d;
	n = stack_wire_out(c.s, &d);
	assert_int_equal(n, 2 + 4 + 2);
	assert_int_equal(d[0], 0x88);
	assert_int_equal(d[1], 0x82);
	assert_int_equal(d[6] ^ d[2], 0x03); /* 1002 */
	assert_int_equal(d[7] ^ d[3], 0xea);
	close_pair(&c, &s);
}

/* The close reply echoes the peer's code, or has no body when the peer's
 * had none; a close with a 1-byte body or a code of the reserved kind is
 * a bad frame (section 7.4). */
static void close_codes(void **state)
{
	(void)state;
	static const struct {
		const char *body;
		size_t len;
		const char *reply;
		size_t reply_len;
		int err;
	} cases[] = {
		{"", 0, "\x88\x00", 2, 0},
		{"\x03\xe9", 2, "\x88\x02\x03\xe9", 4, 0},       /* 1001 */
		{"\x0f\xa0" "bye", 5, "\x88\x02\x0f\xa0", 4, 0}, /* 4000 and a reason */
		{"\x03", 1, "\x88\x02\x03\xea", 4, LAYER_ERR_PROTO},
		{"\x03\xed", 2, "\x88\x02\x03\xea", 4, LAYER_ERR_PROTO}, /* 1005 */
		{"\x00\x00", 2, "\x88\x02\x03\xea", 4, LAYER_ERR_PROTO},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		end c, s;
		upgraded(&c, &s);
		uint8_t buf[64];
		size_t n = frame(buf, 0x82, "d", 1, true); /* data first: no early close */
		n += frame(buf + n, 0x88, cases[i].body, cases[i].len, true);
		ssize_t r = stack_from_wire(s.s, buf, n);
		if (r >= 0 && cases[i].err)
			r = stack_from_wire(s.s, (const uint8_t *)"", 0);
		if (cases[i].err) {
			assert_int_equal(r, cases[i].err);
			assert_string_equal(stack_error(s.s), "ws: bad frame");
			assert_false(ws_peer_closed(s.l));
		} else {
			assert_int_equal(r, (ssize_t)n);
			assert_true(ws_peer_closed(s.l));
		}
		const uint8_t *d;
		assert_int_equal(stack_wire_out(s.s, &d), cases[i].reply_len);
		assert_memory_equal(d, cases[i].reply, cases[i].reply_len);
		close_pair(&c, &s);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(accept_key_example),
		cmocka_unit_test(ws_bulk),
		cmocka_unit_test(ws_byte_by_byte),
		cmocka_unit_test(tls_ws_bulk),
		cmocka_unit_test(tls_ws_byte_by_byte),
		cmocka_unit_test(request_format),
		cmocka_unit_test(wrong_path),
		cmocka_unit_test(wrong_path_over_tls),
		cmocka_unit_test(client_checks_response),
		cmocka_unit_test(server_checks_request),
		cmocka_unit_test(frames_after_the_request),
		cmocka_unit_test(ping_is_answered),
		cmocka_unit_test(fragments_and_text),
		cmocka_unit_test(text_frames_are_not_utf8_checked),
		cmocka_unit_test(pings_without_reading_are_bounded),
		cmocka_unit_test(pings_before_data_are_limited),
		cmocka_unit_test(close_before_any_data),
		cmocka_unit_test(close_handshake),
		cmocka_unit_test(close_from_server),
		cmocka_unit_test(close_mid_message),
		cmocka_unit_test(oversize_frame),
		cmocka_unit_test(bad_frames),
		cmocka_unit_test(backpressure),
		cmocka_unit_test(config_errors),
		cmocka_unit_test(mask_every_offset),
		cmocka_unit_test(mask_in_pieces),
		cmocka_unit_test(rfc_examples),
		cmocka_unit_test(length_boundaries),
		cmocka_unit_test(decoder_refusals),
		cmocka_unit_test(decoder_fragments),
		cmocka_unit_test(layer_length_boundaries),
		cmocka_unit_test(client_frames_and_keys),
		cmocka_unit_test(client_refuses_masked),
		cmocka_unit_test(close_codes),
	};
	return cmocka_run_group_tests(tests, make_files, remove_files);
}
