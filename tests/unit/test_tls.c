/* test_tls.c - a client and a server TLS stack wired in memory: handshakes, data, verification, ALPN, SNI, close, errors. */
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

#define NAME "example.test"

/* Files made once for every test: a self-signed certificate for NAME and
 * 127.0.0.1, its key, another key, and a file that is no PEM at all. */
static char dir[64], cert[96], key[96], key2[96], junk[96];

static void write_key(const char *path, EVP_PKEY *k)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(PEM_write_PrivateKey(f, k, NULL, NULL, 0, NULL, NULL), 1);
	fclose(f);
}

static int make_files(void **state)
{
	(void)state;
	snprintf(dir, sizeof dir, "/tmp/test_tls.XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	snprintf(cert, sizeof cert, "%s/cert.pem", dir);
	snprintf(key, sizeof key, "%s/key.pem", dir);
	snprintf(key2, sizeof key2, "%s/key2.pem", dir);
	snprintf(junk, sizeof junk, "%s/junk.pem", dir);

	EVP_PKEY *k = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
	EVP_PKEY *k2 = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
	X509 *x = X509_new();
	X509_set_version(x, 2);
	ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
	X509_gmtime_adj(X509_getm_notBefore(x), -3600);
	X509_gmtime_adj(X509_getm_notAfter(x), 86400);
	X509_set_pubkey(x, k);
	X509_NAME *n = X509_get_subject_name(x);
	X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC, (const unsigned char *)NAME, -1, -1, 0);
	X509_set_issuer_name(x, n);
	X509V3_CTX v3;
	X509V3_set_ctx_nodb(&v3);
	X509V3_set_ctx(&v3, x, x, NULL, NULL, 0);
	X509_EXTENSION *san = X509V3_EXT_conf_nid(NULL, &v3, NID_subject_alt_name,
	                                          "DNS:" NAME ",IP:127.0.0.1");
	X509_add_ext(x, san, -1);
	X509_EXTENSION_free(san);
	X509_sign(x, k, EVP_sha256());

	FILE *f = fopen(cert, "w");
	PEM_write_X509(f, x);
	fclose(f);
	write_key(key, k);
	write_key(key2, k2);
	f = fopen(junk, "w");
	fputs("this is not PEM\n", f);
	fclose(f);
	X509_free(x);
	EVP_PKEY_free(k);
	EVP_PKEY_free(k2);
	return 0;
}

static int remove_files(void **state)
{
	(void)state;
	unlink(cert), unlink(key), unlink(key2), unlink(junk);
	rmdir(dir);
	return 0;
}

/* ---- two stacks wired to each other (stackpair.h) ---- */

static const char *const SERVER_ALPN[] = {"h2", "http/1.1", NULL};
static const char *const CLIENT_ALPN[] = {"http/1.1", "h2", NULL};

static tls_server_ctx *server_ctx(void)
{
	char err[256] = "";
	tls_server_ctx *c = tls_server_ctx_new(cert, key, SERVER_ALPN, err, sizeof err);
	assert_non_null(c);
	return c;
}

/* The usual client: trusts cert, names NAME, offers CLIENT_ALPN. */
static tls_client_config client_cfg(void)
{
	return (tls_client_config){.server_name = NAME, .alpn = CLIENT_ALPN, .ca_file = cert};
}

static void open_pair(end *c, end *s, const tls_client_config *cfg, const char *name)
{
	char err[256] = "";
	memset(c, 0, sizeof *c);
	memset(s, 0, sizeof *s);
	tls_client_ctx *cc = tls_client_ctx_new(cfg, err, sizeof err);
	assert_non_null(cc);
	tls_server_ctx *sc = server_ctx();
	c->l = tls_client_new(cc, name, err, sizeof err);
	s->l = tls_server_new(sc, err, sizeof err);
	assert_non_null(c->l);
	assert_non_null(s->l);
	/* The layers hold their own references. */
	tls_client_ctx_unref(cc);
	tls_server_ctx_unref(sc);
	c->s = stack_new();
	s->s = stack_new();
	assert_int_equal(stack_push(c->s, c->l), 0);
	assert_int_equal(stack_push(s->s, s->l), 0);
	c->reading = s->reading = true;
	assert_int_equal(stack_start(c->s), 0);
	assert_int_equal(stack_start(s->s), 0);
}

static void close_pair(end *c, end *s)
{
	stack_free(c->s);
	stack_free(s->s);
	free(c->rx);
	free(s->rx);
}

static void assert_prefix(const char *text, const char *prefix)
{
	assert_non_null(text);
	if (strncmp(text, prefix, strlen(prefix)) != 0)
		fail_msg("\"%s\" does not start with \"%s\"", text, prefix);
}

static void exchange(tls_version v, size_t len, size_t chunk, const char *version)
{
	end c, s;
	tls_client_config cfg = client_cfg();
	cfg.min_version = cfg.max_version = v;
	open_pair(&c, &s, &cfg, NULL);
	uint8_t *up = pattern(len, 1), *down = pattern(len, 2);
	c.tx = up, c.tx_len = len;
	s.tx = down, s.tx_len = len;
	assert_int_equal(run(&c, &s, chunk), 0);
	assert_true(stack_ready(c.s) && stack_ready(s.s));
	assert_string_equal(tls_version_name(c.l), version);
	assert_string_equal(tls_version_name(s.l), version);
	assert_int_equal(s.rx_len, len);
	assert_memory_equal(s.rx, up, len);
	assert_int_equal(c.rx_len, len);
	assert_memory_equal(c.rx, down, len);
	/* SNI reached the server; ALPN took the server's first choice. */
	assert_string_equal(tls_server_name(s.l), NAME);
	const uint8_t *p;
	assert_int_equal(tls_alpn(c.l, &p), 2);
	assert_memory_equal(p, "h2", 2);
	assert_int_equal(tls_alpn(s.l, &p), 2);
	assert_memory_equal(p, "h2", 2);
	free(up);
	free(down);
	close_pair(&c, &s);
}

/* ---- tests ---- */

static void tls13_bulk(void **state) { (void)state, exchange(TLS_VERSION_13, 1 << 20, SIZE_MAX, "TLSv1.3"); }
static void tls12_bulk(void **state) { (void)state, exchange(TLS_VERSION_12, 1 << 20, SIZE_MAX, "TLSv1.2"); }
static void tls13_byte_by_byte(void **state) { (void)state, exchange(TLS_VERSION_13, 8000, 1, "TLSv1.3"); }
static void tls12_byte_by_byte(void **state) { (void)state, exchange(TLS_VERSION_12, 8000, 1, "TLSv1.2"); }

/* Before the handshake the layer takes no app bytes; after it, it does. */
static void from_above_waits_for_ready(void **state)
{
	(void)state;
	end c, s;
	tls_client_config cfg = client_cfg();
	open_pair(&c, &s, &cfg, NULL);
	uint8_t buf[64];
	layer_buf down = {.data = buf, .cap = sizeof buf};
	assert_false(c.l->ops->ready(c.l));
	assert_int_equal(c.l->ops->from_above(c.l, (const uint8_t *)"x", 1, &down), 0);
	assert_int_equal(run(&c, &s, SIZE_MAX), 0);
	assert_true(c.l->ops->ready(c.l));
	close_pair(&c, &s);
}

static void wrong_name_fails_verification(void **state)
{
	(void)state;
	end c, s;
	tls_client_config cfg = client_cfg();
	open_pair(&c, &s, &cfg, "wrong.test");
	assert_int_equal(run(&c, &s, SIZE_MAX), LAYER_ERR_AUTH);
	assert_string_equal(stack_error(c.s), "tls: certificate verify failed: hostname mismatch");
	assert_null(stack_error(s.s));
	/* The client's alert is still on its way: the server learns why. */
	const uint8_t *d;
	size_t n = stack_wire_out(c.s, &d);
	assert_true(n > 0);
	assert_int_equal(stack_from_wire(s.s, d, n), LAYER_ERR_PROTO);
	assert_prefix(stack_error(s.s), "tls: handshake failed: ");
	assert_non_null(strstr(stack_error(s.s), "alert"));
	close_pair(&c, &s);
}

/* Without the CA file the system store is used, which does not know the
 * self-signed certificate. */
static void system_store_refuses_self_signed(void **state)
{
	(void)state;
	end c, s;
	tls_client_config cfg = client_cfg();
	cfg.ca_file = NULL;
	open_pair(&c, &s, &cfg, NULL);
	assert_int_equal(run(&c, &s, SIZE_MAX), LAYER_ERR_AUTH);
	assert_prefix(stack_error(c.s), "tls: certificate verify failed: ");
	close_pair(&c, &s);
}

static void insecure_skips_verification(void **state)
{
	(void)state;
	end c, s;
	tls_client_config cfg = {.allow_insecure = true};
	open_pair(&c, &s, &cfg, "wrong.test");
	c.tx = (const uint8_t *)"hi", c.tx_len = 2;
	assert_int_equal(run(&c, &s, SIZE_MAX), 0);
	assert_int_equal(s.rx_len, 2);
	assert_string_equal(tls_server_name(s.l), "wrong.test");
	const uint8_t *p;
	assert_int_equal(tls_alpn(c.l, &p), 0); /* offered none */
	close_pair(&c, &s);
}

/* An IP address is verified against the IP SAN and not sent as SNI. */
static void ip_address_name(void **state)
{
	(void)state;
	end c, s;
	tls_client_config cfg = client_cfg();
	cfg.server_name = "127.0.0.1";
	open_pair(&c, &s, &cfg, NULL);
	assert_int_equal(run(&c, &s, SIZE_MAX), 0);
	assert_true(stack_ready(c.s));
	assert_null(tls_server_name(s.l));
	close_pair(&c, &s);
	cfg.server_name = "127.0.0.2";
	open_pair(&c, &s, &cfg, NULL);
	assert_int_equal(run(&c, &s, SIZE_MAX), LAYER_ERR_AUTH);
	assert_prefix(stack_error(c.s), "tls: certificate verify failed: ");
	close_pair(&c, &s);
}

static void alpn_without_overlap(void **state)
{
	(void)state;
	end c, s;
	static const char *const other[] = {"spdy/1", NULL};
	tls_client_config cfg = client_cfg();
	cfg.alpn = other;
	open_pair(&c, &s, &cfg, NULL);
	assert_int_equal(run(&c, &s, SIZE_MAX), 0);
	const uint8_t *p;
	assert_int_equal(tls_alpn(c.l, &p), 0);
	assert_int_equal(tls_alpn(s.l, &p), 0);
	close_pair(&c, &s);
}

/* close_notify ends one direction: the other still carries data (TLS 1.3
 * half-close), and bytes after a close_notify are dropped. */
static void close_notify(void **state)
{
	(void)state;
	end c, s;
	tls_client_config cfg = client_cfg();
	open_pair(&c, &s, &cfg, NULL);
	c.tx = (const uint8_t *)"request", c.tx_len = 7;
	assert_int_equal(run(&c, &s, SIZE_MAX), 0);
	assert_false(tls_peer_closed(s.l));
	assert_int_equal(stack_shutdown(c.s), 0);
	assert_int_equal(stack_shutdown(c.s), 0); /* once is enough */
	assert_int_equal(run(&c, &s, SIZE_MAX), 0);
	assert_true(tls_peer_closed(s.l));
	assert_true(stack_ready(s.s));
	assert_int_equal(s.rx_len, 7);
	assert_memory_equal(s.rx, "request", 7);
	s.tx = (const uint8_t *)"response", s.tx_len = 8;
	assert_int_equal(run(&c, &s, SIZE_MAX), 0);
	assert_int_equal(c.rx_len, 8);
	assert_memory_equal(c.rx, "response", 8);
	assert_false(tls_peer_closed(c.l));
	assert_int_equal(stack_shutdown(s.s), 0);
	assert_int_equal(run(&c, &s, SIZE_MAX), 0);
	assert_true(tls_peer_closed(c.l));
	assert_int_equal(stack_from_wire(s.s, (const uint8_t *)"junk after the end", 18), 18);
	assert_null(stack_error(s.s));
	/* The client said it was done: more app bytes are a mistake. */
	assert_int_equal(stack_from_app(c.s, (const uint8_t *)"more", 4), LAYER_ERR_STATE);
	assert_string_equal(stack_error(c.s), "tls: send after shutdown");
	close_pair(&c, &s);
}

/* A close_notify alert in place of the ServerHello: a reply was due. */
static void close_during_handshake(void **state)
{
	(void)state;
	end c, s;
	tls_client_config cfg = client_cfg();
	open_pair(&c, &s, &cfg, NULL);
	static const uint8_t alert[] = {0x15, 0x03, 0x03, 0x00, 0x02, 0x01, 0x00};
	assert_int_equal(stack_from_wire(c.s, alert, sizeof alert), LAYER_ERR_CLOSED);
	assert_string_equal(stack_error(c.s), "tls: peer closed during the handshake");
	close_pair(&c, &s);
}

static void not_tls_at_all(void **state)
{
	(void)state;
	end c, s;
	tls_client_config cfg = client_cfg();
	open_pair(&c, &s, &cfg, NULL);
	static const char get[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
	ssize_t r = stack_from_wire(s.s, (const uint8_t *)get, sizeof get - 1);
	if (r >= 0) /* the alert went out first; the next call fails */
		r = stack_from_wire(s.s, (const uint8_t *)"", 0);
	assert_int_equal(r, LAYER_ERR_PROTO);
	assert_prefix(stack_error(s.s), "tls: handshake failed: ");
	close_pair(&c, &s);
}

/* The server's app reads nothing: the client's sends stop at a bound (the
 * queues plus one record in each BIO), then everything arrives. */
static void backpressure(void **state)
{
	(void)state;
	end c, s;
	tls_client_config cfg = client_cfg();
	open_pair(&c, &s, &cfg, NULL);
	check_backpressure(&c, &s, 3);
	close_pair(&c, &s);
}

/* One context serves many connections. */
static void shared_context(void **state)
{
	(void)state;
	char err[256];
	tls_client_config cfg = client_cfg();
	tls_client_ctx *cc = tls_client_ctx_new(&cfg, err, sizeof err);
	tls_server_ctx *sc = server_ctx();
	for (int i = 0; i < 3; i++) {
		end c = {0}, s = {0};
		c.l = tls_client_new(cc, NULL, err, sizeof err);
		s.l = tls_server_new(sc, err, sizeof err);
		c.s = stack_new(), s.s = stack_new();
		assert_int_equal(stack_push(c.s, c.l), 0);
		assert_int_equal(stack_push(s.s, s.l), 0);
		c.reading = s.reading = true;
		assert_int_equal(stack_start(c.s), 0);
		assert_int_equal(run(&c, &s, SIZE_MAX), 0);
		assert_true(stack_ready(c.s) && stack_ready(s.s));
		close_pair(&c, &s);
	}
	tls_client_ctx_unref(cc);
	tls_server_ctx_unref(sc);
}

/* The client context keeps the server's last session: every connection
 * after the first resumes it, in TLS 1.3 (a ticket) and 1.2 alike. */
static void later_connections_resume(void **state)
{
	(void)state;
	char err[256];
	tls_version versions[] = {TLS_VERSION_12, TLS_VERSION_13};
	for (int v = 0; v < 2; v++) {
		tls_client_config cfg = client_cfg();
		cfg.min_version = cfg.max_version = versions[v];
		tls_client_ctx *cc = tls_client_ctx_new(&cfg, err, sizeof err);
		tls_server_ctx *sc = server_ctx();
		for (int i = 0; i < 3; i++) {
			end c = {0}, s = {0};
			c.l = tls_client_new(cc, NULL, err, sizeof err);
			s.l = tls_server_new(sc, err, sizeof err);
			c.s = stack_new(), s.s = stack_new();
			assert_int_equal(stack_push(c.s, c.l), 0);
			assert_int_equal(stack_push(s.s, s.l), 0);
			c.reading = s.reading = true;
			assert_int_equal(stack_start(c.s), 0);
			uint8_t *data = pattern(100, (uint32_t)i);
			s.tx = data, s.tx_len = 100; /* the ticket rides with the server's data */
			assert_int_equal(run(&c, &s, SIZE_MAX), 0);
			assert_true(stack_ready(c.s) && stack_ready(s.s));
			assert_int_equal(tls_resumed(c.l), i > 0);
			assert_int_equal(tls_resumed(s.l), i > 0);
			/* an orderly end: both sides send close_notify */
			assert_int_equal(stack_shutdown(c.s), 0);
			assert_int_equal(stack_shutdown(s.s), 0);
			assert_int_equal(run(&c, &s, SIZE_MAX), 0);
			free(data);
			close_pair(&c, &s);
		}
		tls_client_ctx_unref(cc);
		tls_server_ctx_unref(sc);
	}
}

typedef struct ctx_case {
	const char *cert, *key;
	const char *const *alpn;
	const char *text;  /* exact, or the prefix when OpenSSL adds the rest */
	bool prefix;
} ctx_case;

static void server_ctx_errors(void **state)
{
	(void)state;
	static const char *const empty_name[] = {"h2", "", NULL};
	static const char *const none[] = {NULL};
	char missing_cert[128], missing_key[128], junk_cert[128], junk_key[128];
	snprintf(missing_cert, sizeof missing_cert, "tls: cannot read certificate %s/none.pem: ", dir);
	snprintf(missing_key, sizeof missing_key, "tls: cannot read key %s/none.pem: ", dir);
	snprintf(junk_cert, sizeof junk_cert, "tls: cannot read certificate %s: ", junk);
	snprintf(junk_key, sizeof junk_key, "tls: cannot read key %s: ", junk);
	char none_path[128];
	snprintf(none_path, sizeof none_path, "%s/none.pem", dir);
	const ctx_case cases[] = {
		{none_path, key, NULL, missing_cert, true},
		{junk, key, NULL, junk_cert, true},
		{cert, none_path, NULL, missing_key, true},
		{cert, junk, NULL, junk_key, true},
		{cert, key2, NULL, "tls: key does not match certificate", false},
		{cert, key, empty_name, "tls: bad ALPN list", false},
		{cert, key, none, "tls: bad ALPN list", false},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char err[256] = "";
		assert_null(tls_server_ctx_new(cases[i].cert, cases[i].key, cases[i].alpn, err,
		                               sizeof err));
		if (cases[i].prefix)
			assert_prefix(err, cases[i].text);
		else
			assert_string_equal(err, cases[i].text);
	}
	char err[256] = "";
	tls_server_ctx_unref(NULL);
	/* A missing file's reason is the system's. */
	assert_null(tls_server_ctx_new(none_path, key, NULL, err, sizeof err));
	assert_non_null(strstr(err, "No such file or directory"));
}

static void client_ctx_errors(void **state)
{
	(void)state;
	char err[256] = "", want[160];
	tls_client_config cfg = client_cfg();
	cfg.ca_file = junk;
	assert_null(tls_client_ctx_new(&cfg, err, sizeof err));
	snprintf(want, sizeof want, "tls: cannot read CA file %s: ", junk);
	assert_prefix(err, want);

	static const char *const long_list[] = {
	        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
	        "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
	        "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc",
	        NULL};
	cfg = client_cfg();
	cfg.alpn = long_list;
	assert_null(tls_client_ctx_new(&cfg, err, sizeof err));
	assert_string_equal(err, "tls: bad ALPN list");

	cfg = client_cfg();
	cfg.min_version = TLS_VERSION_13;
	cfg.max_version = TLS_VERSION_12;
	assert_null(tls_client_ctx_new(&cfg, err, sizeof err));
	assert_string_equal(err, "tls: bad version range");

	cfg = client_cfg();
	cfg.server_name = NULL;
	tls_client_ctx *cc = tls_client_ctx_new(&cfg, err, sizeof err);
	assert_non_null(cc);
	assert_null(tls_client_new(cc, NULL, err, sizeof err));
	assert_string_equal(err, "tls: no server name to verify");
	assert_null(tls_client_new(cc, "", err, sizeof err));
	assert_string_equal(err, "tls: no server name to verify");
	char huge[300];
	memset(huge, 'a', sizeof huge - 1);
	huge[sizeof huge - 1] = '\0';
	assert_null(tls_client_new(cc, huge, err, sizeof err));
	assert_prefix(err, "tls: bad server name \"aaaa");
	tls_client_ctx_unref(cc);
}

/* ---- two layers driven by hand, without stacks: each test decides how
 * many wire bytes a call sees and how much room its down has ---- */

#define RAW_CAP (1 << 20)

typedef struct raw {
	layer *l;
	uint8_t *out; /* wire bytes it wrote, not yet given to the peer */
	size_t out_len;
	uint8_t *app; /* plaintext it received */
	size_t app_len;
} raw;

/* Gives from's wire bytes to to, step bytes a call, each call's down
 * holding at most room; then drains what to still holds (calls with no
 * input) under the same room. Every byte offered is consumed: the layer
 * takes what OpenSSL reads and OpenSSL reads what the record needs. */
/* What r holds for the wire and had no room for, room bytes a call. */
static void raw_drain(raw *r, size_t room)
{
	layer_buf down;
	do {
		size_t cap = RAW_CAP - r->out_len < room ? RAW_CAP - r->out_len : room;
		layer_buf up = {.data = r->app + r->app_len, .cap = RAW_CAP - r->app_len};
		down = (layer_buf){.data = r->out + r->out_len, .cap = cap};
		assert_int_equal(r->l->ops->from_below(r->l, NULL, 0, &up, &down), 0);
		r->out_len += down.len;
	} while (down.len > 0);
}

static void raw_move(raw *from, raw *to, size_t step, size_t room)
{
	for (size_t off = 0;;) {
		size_t n = from->out_len - off < step ? from->out_len - off : step;
		size_t cap = RAW_CAP - to->out_len < room ? RAW_CAP - to->out_len : room;
		layer_buf up = {.data = to->app + to->app_len, .cap = RAW_CAP - to->app_len};
		layer_buf down = {.data = to->out + to->out_len, .cap = cap};
		ssize_t k = to->l->ops->from_below(to->l, from->out + off, n, &up, &down);
		assert_int_equal(k, (ssize_t)n);
		to->app_len += up.len;
		to->out_len += down.len;
		off += n;
		if (n == 0 && down.len == 0)
			break;
	}
	from->out_len = 0;
}

/* Hands what up to len bytes of in become on the wire to from's out,
 * asserting from takes all of them; each call's down holds at most room. */
static void raw_send(raw *from, const uint8_t *in, size_t len, size_t room)
{
	for (size_t off = 0; off < len;) {
		size_t cap = RAW_CAP - from->out_len < room ? RAW_CAP - from->out_len : room;
		layer_buf down = {.data = from->out + from->out_len, .cap = cap};
		ssize_t k = from->l->ops->from_above(from->l, in + off, len - off, &down);
		assert_true(k > 0);
		from->out_len += down.len;
		off += (size_t)k;
	}
}

static void raw_open(raw *c, raw *s, tls_version v, size_t room)
{
	char err[256] = "";
	tls_client_config cfg = client_cfg();
	cfg.min_version = cfg.max_version = v;
	tls_client_ctx *cc = tls_client_ctx_new(&cfg, err, sizeof err);
	tls_server_ctx *sc = server_ctx();
	assert_non_null(cc);
	memset(c, 0, sizeof *c);
	memset(s, 0, sizeof *s);
	c->l = tls_client_new(cc, NULL, err, sizeof err);
	s->l = tls_server_new(sc, err, sizeof err);
	tls_client_ctx_unref(cc);
	tls_server_ctx_unref(sc);
	assert_non_null(c->l);
	assert_non_null(s->l);
	c->out = malloc(RAW_CAP), c->app = malloc(RAW_CAP);
	s->out = malloc(RAW_CAP), s->app = malloc(RAW_CAP);
	layer_buf down = {.data = c->out, .cap = room};
	assert_int_equal(c->l->ops->start(c->l, &down), 0);
	c->out_len = down.len;
	for (int i = 0; i < 64 && (c->out_len || s->out_len || !c->l->ops->ready(c->l) ||
	                           !s->l->ops->ready(s->l)); i++) {
		raw_move(c, s, SIZE_MAX, room);
		raw_move(s, c, SIZE_MAX, room);
	}
	assert_true(c->l->ops->ready(c->l) && s->l->ops->ready(s->l));
	assert_int_equal(c->out_len + s->out_len + c->app_len + s->app_len, 0);
}

static void raw_close(raw *c, raw *s)
{
	raw *both[] = {c, s};
	for (int i = 0; i < 2; i++) {
		both[i]->l->ops->free(both[i]->l);
		free(both[i]->out);
		free(both[i]->app);
	}
}

/* One full record from each side reaches the other a byte per call: each
 * call consumes its byte (OpenSSL holds the partial record, the layer no
 * copy of it), no plaintext comes out before the last one, and then all of
 * it, byte for byte. */
static void record_byte_by_byte(void **state)
{
	(void)state;
	raw c, s;
	raw_open(&c, &s, TLS_VERSION_13, SIZE_MAX);
	raw *pair[][2] = {{&c, &s}, {&s, &c}};
	for (int i = 0; i < 2; i++) {
		raw *from = pair[i][0], *to = pair[i][1];
		uint8_t *msg = pattern(16384, 7 + (uint32_t)i);
		raw_send(from, msg, 16384, SIZE_MAX);
		assert_true(from->out_len > 16384 && from->out_len <= 16384 + 256); /* one record */
		size_t wire_len = from->out_len;
		for (size_t off = 0; off < wire_len; off++) {
			uint8_t *d = from->out;
			layer_buf up = {.data = to->app + to->app_len, .cap = RAW_CAP - to->app_len};
			layer_buf down = {.data = to->out + to->out_len, .cap = RAW_CAP - to->out_len};
			assert_int_equal(to->l->ops->from_below(to->l, d + off, 1, &up, &down), 1);
			assert_int_equal(up.len, off + 1 < wire_len ? 0 : 16384);
			to->app_len += up.len;
			to->out_len += down.len;
		}
		from->out_len = 0;
		assert_int_equal(to->app_len, 16384);
		assert_memory_equal(to->app, msg, 16384);
		to->app_len = 0;
		free(msg);
	}
	raw_close(&c, &s);
}

/* A write larger than down: a record goes out only when down has room for
 * all of it, so a down with room for one takes one record and then
 * nothing (the rest waits, nothing is cut or held), and the next call with
 * room goes on. Both ways, TLS 1.2 and 1.3, byte for byte. */
static void large_write_resumes(void **state)
{
	(void)state;
	tls_version versions[] = {TLS_VERSION_13, TLS_VERSION_12};
	for (int v = 0; v < 2; v++) {
		raw c, s;
		raw_open(&c, &s, versions[v], SIZE_MAX);
		raw *pair[][2] = {{&c, &s}, {&s, &c}};
		for (int i = 0; i < 2; i++) {
			raw *from = pair[i][0], *to = pair[i][1];
			size_t len = 4 * 16384 + 1000;
			uint8_t *msg = pattern(len, 11 + (uint32_t)i);
			uint8_t *buf = malloc(RAW_CAP);
			layer_buf down = {.data = buf, .cap = 16384 + 256 + 100};
			const layer_ops *o = from->l->ops;
			assert_int_equal(o->from_above(from->l, msg, len, &down), 16384);
			size_t first = down.len;
			assert_true(first > 16384 && first <= 16384 + 256);
			/* 100 bytes of room left: no record fits, none is started */
			assert_int_equal(o->from_above(from->l, msg + 16384, len - 16384, &down), 0);
			assert_int_equal(down.len, first);
			/* room again: the rest, in full records and a short last one */
			down.cap = RAW_CAP;
			assert_int_equal(o->from_above(from->l, msg + 16384, len - 16384, &down),
			                 (ssize_t)(len - 16384));
			memcpy(from->out, buf, down.len);
			from->out_len = down.len;
			raw_move(from, to, 5000, SIZE_MAX);
			assert_int_equal(to->app_len, len);
			assert_memory_equal(to->app, msg, len);
			to->app_len = 0;
			free(buf);
			free(msg);
		}
		raw_close(&c, &s);
	}
}

/* A down with room for a few bytes a call: the handshake flights and the
 * session tickets OpenSSL writes whole go out in pieces over later calls,
 * in order; then data and close_notify flow both ways, byte for byte. */
static void small_down_spills_in_order(void **state)
{
	(void)state;
	raw c, s;
	raw_open(&c, &s, TLS_VERSION_13, 7);
	size_t len = 3 * 16384 + 5;
	uint8_t *msg = pattern(len, 13);
	raw_send(&c, msg, len, SIZE_MAX);
	raw_send(&s, msg, len, SIZE_MAX);
	raw_move(&c, &s, 3, 7);
	raw_move(&s, &c, 3, 7);
	assert_int_equal(c.app_len, len);
	assert_memory_equal(c.app, msg, len);
	assert_int_equal(s.app_len, len);
	assert_memory_equal(s.app, msg, len);
	layer_buf down = {.data = c.out, .cap = 7};
	assert_int_equal(c.l->ops->shutdown(c.l, &down), 0);
	c.out_len = down.len;
	assert_int_equal(c.out_len, 7);
	raw_drain(&c, 7); /* the rest of close_notify, 7 bytes a call */
	assert_true(c.out_len > 7);
	raw_move(&c, &s, SIZE_MAX, 7);
	assert_true(tls_peer_closed(s.l));
	free(msg);
	raw_close(&c, &s);
}

/* The queries answer nothing for a layer that is not TLS. */
static void queries_on_other_layers(void **state)
{
	(void)state;
	static const layer_ops other_ops = {.name = "other"};
	layer other = {.ops = &other_ops};
	const uint8_t *p = (const uint8_t *)"x";
	assert_int_equal(tls_alpn(&other, &p), 0);
	assert_null(p);
	assert_null(tls_server_name(&other));
	assert_null(tls_version_name(&other));
	assert_false(tls_peer_closed(&other));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(tls13_bulk),
		cmocka_unit_test(tls12_bulk),
		cmocka_unit_test(tls13_byte_by_byte),
		cmocka_unit_test(tls12_byte_by_byte),
		cmocka_unit_test(from_above_waits_for_ready),
		cmocka_unit_test(wrong_name_fails_verification),
		cmocka_unit_test(system_store_refuses_self_signed),
		cmocka_unit_test(insecure_skips_verification),
		cmocka_unit_test(ip_address_name),
		cmocka_unit_test(alpn_without_overlap),
		cmocka_unit_test(close_notify),
		cmocka_unit_test(close_during_handshake),
		cmocka_unit_test(not_tls_at_all),
		cmocka_unit_test(backpressure),
		cmocka_unit_test(shared_context),
		cmocka_unit_test(later_connections_resume),
		cmocka_unit_test(server_ctx_errors),
		cmocka_unit_test(client_ctx_errors),
		cmocka_unit_test(queries_on_other_layers),
		cmocka_unit_test(record_byte_by_byte),
		cmocka_unit_test(large_write_resumes),
		cmocka_unit_test(small_down_spills_in_order),
	};
	return cmocka_run_group_tests(tests, make_files, remove_files);
}
