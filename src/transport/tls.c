/* tls.c - the TLS layer: an SSL object whose BIO reads and writes the stack's buffers in place. */
#include "transport/tls.h"
#include "transport/stack.h"

#include <arpa/inet.h>
#include <limits.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crypto/ossl.h"

/* Plaintext per SSL_write: one full record (RFC 8446 section 5.1). The
 * app side's queue (STACK_QUEUE_CAP) holds one, so a bulk flow is cut into
 * full records, one SSL_write each. */
#define TLS_RECORD_MAX 16384

/* What a record adds to its plaintext on the wire: TLS 1.3 allows 256
 * (RFC 8446 section 5.2); the TLS 1.2 suites OpenSSL offers by default add
 * less (AES-GCM 29, CBC with SHA-384 at most 85). A record is written only
 * when down has room for it whole, so its ciphertext goes straight into
 * down and never through the spill buffer. */
#define TLS_RECORD_SLACK 256
_Static_assert(STACK_QUEUE_CAP >= TLS_RECORD_MAX + TLS_RECORD_SLACK,
               "a stack queue must hold a full record, or a record would wait for room forever");

/* Room for an error text: a path (PATH_MAX would be silly in a log line;
 * longer ones are cut) and OpenSSL's reason. */
#define TLS_ERR_MAX 320

enum {
	M_VERIFY,
	M_HANDSHAKE,
	M_CONN,
	M_CLOSED_HS,
	M_SEND_SHUT,
	M_NOMEM,
	M_CA,
	M_CERT,
	M_KEY,
	M_MISMATCH,
	M_ALPN,
	M_VERSIONS,
	M_NO_NAME,
	M_BAD_NAME,
};

/* Every text this module shows a user; tests assert them word for word. */
static const char *const msgs[] = {
	[M_VERIFY] = "tls: certificate verify failed: %s",
	[M_HANDSHAKE] = "tls: handshake failed: %s",
	[M_CONN] = "tls: connection failed: %s",
	[M_CLOSED_HS] = "tls: peer closed during the handshake",
	[M_SEND_SHUT] = "tls: send after shutdown",
	[M_NOMEM] = "tls: out of memory",
	[M_CA] = "tls: cannot read CA file %s: %s",
	[M_CERT] = "tls: cannot read certificate %s: %s",
	[M_KEY] = "tls: cannot read key %s: %s",
	[M_MISMATCH] = "tls: key does not match certificate",
	[M_ALPN] = "tls: bad ALPN list",
	[M_VERSIONS] = "tls: bad version range",
	[M_NO_NAME] = "tls: no server name to verify",
	[M_BAD_NAME] = "tls: bad server name \"%s\"",
};

struct tls_client_ctx {
	SSL_CTX *ssl;
	atomic_uint refs;
	bool verify;
	char *server_name; /* owned; NULL: none configured */
	/* The last session the server gave, to resume the next connection to
	 * the same name (a full handshake decodes and verifies the server's
	 * certificate again: a quarter of a TLS chain's CPU per connection,
	 * docs/performance.md). Worker threads share it under the lock. */
	pthread_mutex_t lock;
	SSL_SESSION *session; /* a reference, or NULL */
	char *session_name;   /* owned: the name it was made for ("" for none) */
};

struct tls_server_ctx {
	SSL_CTX *ssl;
	atomic_uint refs;
	size_t alpn_len; /* 0: no ALPN */
	uint8_t alpn[TLS_ALPN_WIRE_MAX];
};

typedef struct tls_layer {
	layer base;
	SSL *ssl;          /* owns bio */
	BIO *bio;          /* ours (tls_bio): both ways, see "the BIO" below */
	/* The call under way, for the BIO: its wire input in[0, in_len), of
	 * which in_off went to OpenSSL, and its down. All unset between calls. */
	const uint8_t *in;
	size_t in_len, in_off;
	layer_buf *down;
	/* Ciphertext OpenSSL wrote that down had no room for: it goes first
	 * into the next call's down. spill[spill_off, spill_len) is left. */
	uint8_t *spill;
	size_t spill_len, spill_off, spill_cap;
	bool bio_nomem;    /* the BIO could not grow spill: the failure is ours */
	tls_client_ctx *cctx; /* a reference (client), or NULL */
	tls_server_ctx *sctx; /* a reference (server), or NULL */
	bool done;         /* handshake complete: ready */
	bool peer_closed;  /* close_notify received */
	bool shut;         /* our close_notify written */
	int fail;          /* LAYER_ERR_* found, returned once the alert is out */
	char err[TLS_ERR_MAX];
} tls_layer;

static void say(char *buf, size_t size, int id, ...)
{
	if (!buf || size == 0)
		return;
	va_list ap;
	va_start(ap, id);
	int n = vsnprintf(buf, size, msgs[id], ap);
	va_end(ap);
	if (n < 0)
		buf[0] = '\0'; /* only on an encoding error, never with our texts */
}

/* The root cause of OpenSSL's current error: the oldest entry in the
 * thread's queue (later ones are the callers' wrappers, "PEM lib"). */
static const char *reason(char *buf, size_t size)
{
	unsigned long e = ERR_peek_error();
	if (e == 0)
		return "unknown error";
	if (ERR_SYSTEM_ERROR(e))
		return strerror_r(ERR_GET_REASON(e), buf, size);
	const char *r = ERR_reason_error_string(e);
	return r ? r : "unknown error";
}

/* SSL_get_error needs an empty error queue before each call (its manual
 * page); clearing one that is empty already is what costs, so look first. */
static void clear_errors(void)
{
	if (ERR_peek_error() != 0)
		ERR_clear_error();
}

/* ---- contexts ---- */

/* Encodes a NULL-terminated name list as RFC 7301 section 3.1 wants it:
 * each name prefixed by its length. Returns 0, or -1 for an empty list, an
 * empty or over-long name, or a list over TLS_ALPN_WIRE_MAX. */
static int alpn_encode(const char *const *list, uint8_t out[TLS_ALPN_WIRE_MAX], size_t *len)
{
	size_t n = 0;
	for (size_t i = 0; list[i]; i++) {
		size_t k = strlen(list[i]);
		if (k == 0 || k > 255 || n + 1 + k > TLS_ALPN_WIRE_MAX)
			return -1;
		out[n++] = (uint8_t)k;
		memcpy(out + n, list[i], k);
		n += k;
	}
	if (n == 0)
		return -1;
	*len = n;
	return 0;
}

static int version_of(tls_version v)
{
	return v == TLS_VERSION_12 ? TLS1_2_VERSION : TLS1_3_VERSION;
}

/* OpenSSL hands every new session (a TLS 1.3 ticket, a TLS 1.2 session)
 * here; the context keeps its own copy, independent of the connection that
 * made it. Returns 0: OpenSSL keeps its reference to the original. A
 * session resumes when the connection that made it ended with
 * close_notify both ways (tests/unit/test_tls.c), as relayed flows end. */
static int on_new_session(SSL *ssl, SSL_SESSION *sess)
{
	tls_client_ctx *c = SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl));
	const char *name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
	char *copy = strdup(name ? name : "");
	SSL_SESSION *dup = SSL_SESSION_dup(sess);
	if (!c || !copy || !dup) {
		free(copy);
		SSL_SESSION_free(dup);
		return 0;
	}
	pthread_mutex_lock(&c->lock);
	SSL_SESSION_free(c->session);
	free(c->session_name);
	c->session = dup;
	c->session_name = copy;
	pthread_mutex_unlock(&c->lock);
	return 0;
}

tls_client_ctx *tls_client_ctx_new(const tls_client_config *cfg, char *err, size_t err_size)
{
	char why[128];
	uint8_t wire[TLS_ALPN_WIRE_MAX];
	size_t wire_len = 0;
	int id = M_NOMEM;

	ERR_clear_error();
	if (cfg->alpn && alpn_encode(cfg->alpn, wire, &wire_len) < 0) {
		say(err, err_size, M_ALPN);
		return NULL;
	}
	int min = cfg->min_version ? version_of(cfg->min_version) : TLS1_2_VERSION;
	int max = cfg->max_version ? version_of(cfg->max_version) : TLS1_3_VERSION;
	if (min > max) {
		say(err, err_size, M_VERSIONS);
		return NULL;
	}
	tls_client_ctx *c = calloc(1, sizeof *c);
	if (!c)
		goto fail;
	atomic_init(&c->refs, 1);
	pthread_mutex_init(&c->lock, NULL);
	c->ssl = SSL_CTX_new(TLS_client_method());
	if (!c->ssl)
		goto fail;
	SSL_CTX_set_app_data(c->ssl, c);
	SSL_CTX_set_session_cache_mode(c->ssl,
	                               SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
	SSL_CTX_sess_set_new_cb(c->ssl, on_new_session);
	if (!SSL_CTX_set_min_proto_version(c->ssl, min) ||
	    !SSL_CTX_set_max_proto_version(c->ssl, max))
		goto fail;
	SSL_CTX_set_options(c->ssl, SSL_OP_NO_RENEGOTIATION);
	/* SSL_CTX_set_alpn_protos returns 0 on success. */
	if (wire_len && SSL_CTX_set_alpn_protos(c->ssl, wire, (unsigned)wire_len) != 0)
		goto fail;
	c->verify = !cfg->allow_insecure;
	if (c->verify) {
		SSL_CTX_set_verify(c->ssl, SSL_VERIFY_PEER, NULL);
		int ok = cfg->ca_file ? SSL_CTX_load_verify_locations(c->ssl, cfg->ca_file, NULL)
		                      : SSL_CTX_set_default_verify_paths(c->ssl);
		if (ok != 1) {
			id = M_CA;
			goto fail;
		}
	} else {
		SSL_CTX_set_verify(c->ssl, SSL_VERIFY_NONE, NULL);
	}
	if (cfg->server_name && !(c->server_name = strdup(cfg->server_name)))
		goto fail;
	ERR_clear_error();
	return c;
fail:
	if (id == M_CA)
		say(err, err_size, M_CA, cfg->ca_file ? cfg->ca_file : "(system store)",
		    reason(why, sizeof why));
	else
		say(err, err_size, id);
	ERR_clear_error();
	tls_client_ctx_unref(c);
	return NULL;
}

void tls_client_ctx_ref(tls_client_ctx *c)
{
	atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
}

void tls_client_ctx_unref(tls_client_ctx *c)
{
	if (!c || atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) != 1)
		return;
	SSL_CTX_free(c->ssl);
	SSL_SESSION_free(c->session);
	free(c->session_name);
	pthread_mutex_destroy(&c->lock);
	free(c->server_name);
	free(c);
}

/* The server picks the first of its own names that the client offers
 * (SSL_select_next_proto walks the server's list in order); no overlap
 * goes on without ALPN, as nginx and Xray do. */
static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *out_len,
                       const unsigned char *in, unsigned int in_len, void *arg)
{
	(void)ssl;
	tls_server_ctx *c = arg;
	unsigned char *sel;
	if (SSL_select_next_proto(&sel, out_len, c->alpn, (unsigned)c->alpn_len, in, in_len) !=
	    OPENSSL_NPN_NEGOTIATED)
		return SSL_TLSEXT_ERR_NOACK;
	*out = sel;
	return SSL_TLSEXT_ERR_OK;
}

/* A key file is never encrypted here: refuse instead of OpenSSL's default
 * of prompting on the terminal. */
static int no_passphrase(char *buf, int size, int rw, void *u)
{
	(void)buf, (void)size, (void)rw, (void)u;
	return -1;
}

tls_server_ctx *tls_server_ctx_new(const char *cert_file, const char *key_file,
                                   const char *const *alpn, char *err, size_t err_size)
{
	char why[128];
	int id = M_NOMEM;
	BIO *kb = NULL;
	EVP_PKEY *key = NULL;

	ERR_clear_error();
	tls_server_ctx *c = calloc(1, sizeof *c);
	if (!c)
		goto fail;
	atomic_init(&c->refs, 1);
	if (alpn && alpn_encode(alpn, c->alpn, &c->alpn_len) < 0) {
		id = M_ALPN;
		goto fail;
	}
	c->ssl = SSL_CTX_new(TLS_server_method());
	if (!c->ssl)
		goto fail;
	if (!SSL_CTX_set_min_proto_version(c->ssl, TLS1_2_VERSION) ||
	    !SSL_CTX_set_max_proto_version(c->ssl, TLS1_3_VERSION))
		goto fail;
	SSL_CTX_set_options(c->ssl, SSL_OP_NO_RENEGOTIATION);
	if (SSL_CTX_use_certificate_chain_file(c->ssl, cert_file) != 1) {
		id = M_CERT;
		goto fail;
	}
	/* The key is read by hand so that a key that does not match is told
	 * apart from one that cannot be read (SSL_CTX_use_PrivateKey_file
	 * says "key values mismatch" or "PEM lib" alike). */
	id = M_KEY;
	if (!(kb = BIO_new_file(key_file, "r")))
		goto fail;
	if (!(key = PEM_read_bio_PrivateKey(kb, NULL, no_passphrase, NULL)))
		goto fail;
	if (!X509_check_private_key(SSL_CTX_get0_certificate(c->ssl), key)) {
		id = M_MISMATCH;
		goto fail;
	}
	if (SSL_CTX_use_PrivateKey(c->ssl, key) != 1)
		goto fail;
	if (c->alpn_len)
		SSL_CTX_set_alpn_select_cb(c->ssl, alpn_select, c);
	EVP_PKEY_free(key);
	BIO_free(kb);
	ERR_clear_error();
	return c;
fail:
	if (id == M_CERT)
		say(err, err_size, id, cert_file, reason(why, sizeof why));
	else if (id == M_KEY)
		say(err, err_size, id, key_file, reason(why, sizeof why));
	else
		say(err, err_size, id);
	ERR_clear_error();
	EVP_PKEY_free(key);
	BIO_free(kb);
	tls_server_ctx_unref(c);
	return NULL;
}

void tls_server_ctx_ref(tls_server_ctx *c)
{
	atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
}

void tls_server_ctx_unref(tls_server_ctx *c)
{
	if (!c || atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) != 1)
		return;
	SSL_CTX_free(c->ssl);
	free(c);
}

/* ---- the BIO ----
 *
 * The SSL object reads and writes through a BIO of ours, not a pair of
 * memory BIOs: those cost a copy each way (the stack's queue into the read
 * BIO, the write BIO into down) and a buffer each per connection.
 *
 * Reads. from_below points the layer at its input for the call; the BIO
 * hands OpenSSL bytes straight from it and, once they run out, says
 * "retry" (SSL_ERROR_WANT_READ, as an empty memory BIO did). What OpenSSL
 * took is consumed: it sits in OpenSSL's record buffer, one record at
 * most, as OpenSSL reads only what the record in hand needs. The rest is
 * reported as not consumed and the stack keeps it for the next call; the
 * layer holds no wire input of its own. OpenSSL is asked to read only
 * while up has room, so a full queue above stops intake from the wire.
 *
 * Writes. The BIO always accepts a whole write. OpenSSL has encrypted a
 * record by the time it writes it: a BIO that took only part would leave a
 * half-sent record that only a repeat of the very same call (SSL_write with
 * the same buffer, SSL_do_handshake, SSL_shutdown) may finish, and an
 * alert written on a failure is never retried at all. Accepting keeps
 * every SSL call complete: what fits goes straight into the call's down,
 * the rest into spill, which the next call puts into down first (nothing
 * goes into down while spill holds bytes, so the order is kept). spill is
 * rare and small: from_above writes a record only when spill is empty and
 * down has room for the whole record, so spill carries only what a
 * handshake flight, a session ticket or an alert did not fit. */

static BIO_METHOD *bio_method; /* made once, kept for the process */
static pthread_once_t bio_once = PTHREAD_ONCE_INIT;

static int bio_read(BIO *b, char *buf, size_t len, size_t *got)
{
	tls_layer *t = BIO_get_data(b);
	BIO_clear_retry_flags(b);
	size_t n = t ? t->in_len - t->in_off : 0;
	*got = 0;
	if (n == 0) {
		BIO_set_retry_read(b); /* no bytes yet, not end of file */
		return 0;
	}
	if (n > len)
		n = len;
	memcpy(buf, t->in + t->in_off, n);
	t->in_off += n;
	*got = n;
	return 1;
}

static bool spill_add(tls_layer *t, const uint8_t *d, size_t n)
{
	if (t->spill_len + n > t->spill_cap) {
		size_t cap = t->spill_cap ? t->spill_cap : 4096;
		while (cap < t->spill_len + n)
			cap *= 2;
		uint8_t *p = realloc(t->spill, cap);
		if (!p)
			return false;
		t->spill = p;
		t->spill_cap = cap;
	}
	memcpy(t->spill + t->spill_len, d, n);
	t->spill_len += n;
	return true;
}

static int bio_write(BIO *b, const char *data, size_t len, size_t *put)
{
	tls_layer *t = BIO_get_data(b);
	const uint8_t *d = (const uint8_t *)data;
	BIO_clear_retry_flags(b);
	*put = 0;
	if (!t)
		return 0;
	size_t n = t->spill_len == 0 && t->down ? layer_buf_put(t->down, d, len) : 0;
	if (n < len && !spill_add(t, d + n, len - n)) {
		t->bio_nomem = true; /* the connection fails: a torn record may be out */
		return 0;
	}
	*put = len;
	return 1;
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
	(void)num, (void)ptr;
	const tls_layer *t = BIO_get_data(b);
	switch (cmd) {
	case BIO_CTRL_FLUSH:
		return 1; /* every write is taken whole: nothing waits */
	case BIO_CTRL_PENDING:
		return t ? (long)(t->in_len - t->in_off) : 0;
	case BIO_CTRL_WPENDING:
		return t ? (long)(t->spill_len - t->spill_off) : 0;
	default:
		return 0; /* no kTLS, no push/pop, no dup */
	}
}

static void bio_method_init(void)
{
	int type = BIO_get_new_index();
	BIO_METHOD *m = type == -1 ? NULL : BIO_meth_new(type | BIO_TYPE_SOURCE_SINK, "etm-tls");
	if (m && (!BIO_meth_set_read_ex(m, bio_read) || !BIO_meth_set_write_ex(m, bio_write) ||
	          !BIO_meth_set_ctrl(m, bio_ctrl))) {
		BIO_meth_free(m);
		m = NULL;
	}
	bio_method = m;
}

/* The call's buffers, for the BIO, until detach. */
static void attach(tls_layer *t, const uint8_t *in, size_t len, layer_buf *down)
{
	t->in = in;
	t->in_len = len;
	t->in_off = 0;
	t->down = down;
}

/* Returns how many input bytes OpenSSL took during the call. */
static size_t detach(tls_layer *t)
{
	size_t n = t->in_off;
	t->in = NULL;
	t->in_len = t->in_off = 0;
	t->down = NULL;
	return n;
}

/* ---- the layer ---- */

static int set_err(tls_layer *t, int code, int id, const char *arg)
{
	say(t->err, sizeof t->err, id, arg);
	t->fail = code;
	ERR_clear_error();
	return code;
}

/* Ciphertext down had no room for before, moved into down as far as it
 * fits; spill's memory goes once it is empty (it is rarely needed). */
static void drain(tls_layer *t, layer_buf *down)
{
	if (t->spill_len == 0)
		return;
	layer_buf_put_pending(down, t->spill, &t->spill_len, &t->spill_off);
	if (t->spill_len == 0) {
		free(t->spill);
		t->spill = NULL;
		t->spill_cap = 0;
	}
}

/* Sorts out a failed SSL_do_handshake: 0 when it only wants more bytes,
 * else the error (recorded in t). */
static int handshake_error(tls_layer *t, int ret)
{
	char why[128];
	if (t->bio_nomem)
		return set_err(t, LAYER_ERR_NOMEM, M_NOMEM, NULL);
	switch (SSL_get_error(t->ssl, ret)) {
	case SSL_ERROR_WANT_READ:
	case SSL_ERROR_WANT_WRITE:
		return 0;
	case SSL_ERROR_ZERO_RETURN:
		return set_err(t, LAYER_ERR_CLOSED, M_CLOSED_HS, NULL);
	default:
		break;
	}
	unsigned long e = ERR_peek_error();
	long vr = SSL_get_verify_result(t->ssl);
	if (vr != X509_V_OK && ERR_GET_LIB(e) == ERR_LIB_SSL &&
	    ERR_GET_REASON(e) == SSL_R_CERTIFICATE_VERIFY_FAILED)
		return set_err(t, LAYER_ERR_AUTH, M_VERIFY, X509_verify_cert_error_string(vr));
	return set_err(t, LAYER_ERR_PROTO, M_HANDSHAKE, reason(why, sizeof why));
}

/* A failure after the handshake: the BIO's own, or OpenSSL's. */
static int conn_error(tls_layer *t)
{
	char why[128];
	if (t->bio_nomem)
		return set_err(t, LAYER_ERR_NOMEM, M_NOMEM, NULL);
	return set_err(t, LAYER_ERR_PROTO, M_CONN, reason(why, sizeof why));
}

/* Completed handshakes, [side][resumed]: side 0 client, 1 server. Counts,
 * not state: every worker adds to them, the metrics read them. */
static atomic_uint_fast64_t handshakes[2][2];

static void count_handshake(const tls_layer *t)
{
	int resumed = SSL_session_reused(t->ssl) == 1;
	atomic_fetch_add_explicit(&handshakes[t->sctx != NULL][resumed], 1, memory_order_relaxed);
}

void tls_handshake_counts(uint64_t client[2], uint64_t server[2])
{
	for (int k = 0; k < 2; k++) {
		client[k] = atomic_load_explicit(&handshakes[0][k], memory_order_relaxed);
		server[k] = atomic_load_explicit(&handshakes[1][k], memory_order_relaxed);
	}
}

/* Runs the handshake, then decrypts into up while it has room. The layer
 * is attached to the call's buffers. */
static int advance(tls_layer *t, layer_buf *up)
{
	clear_errors();
	if (!t->done) {
		int r = SSL_do_handshake(t->ssl);
		if (r != 1)
			return handshake_error(t, r);
		t->done = true;
		count_handshake(t);
	}
	while (!t->peer_closed && layer_buf_room(up) > 0) {
		/* Nothing to read saves a trip through the record layer. */
		if (t->in_off == t->in_len && !SSL_has_pending(t->ssl))
			return 0;
		size_t got = 0;
		clear_errors();
		int r = SSL_read_ex(t->ssl, up->data + up->len, layer_buf_room(up), &got);
		if (r == 1) {
			up->len += got;
			continue;
		}
		switch (SSL_get_error(t->ssl, r)) {
		case SSL_ERROR_WANT_READ:
		case SSL_ERROR_WANT_WRITE:
			return t->bio_nomem ? conn_error(t) : 0;
		case SSL_ERROR_ZERO_RETURN:
			t->peer_closed = true;
			return 0;
		default:
			return conn_error(t);
		}
	}
	return 0;
}

/* A failure is returned only once the alert OpenSSL wrote for it has been
 * handed to down: the stack drops a failing call's output, so the peer
 * would otherwise never learn why. While some is still moving (this call
 * put bytes into down since it began at before, or consumed input), the
 * call succeeds and a later one fails. */
static ssize_t failing(tls_layer *t, layer_buf *down, size_t consumed, size_t before)
{
	drain(t, down);
	if (consumed > 0 || down->len > before)
		return (ssize_t)consumed;
	return t->fail;
}

static ssize_t tls_from_below(layer *l, const uint8_t *in, size_t len, layer_buf *up,
                              layer_buf *down)
{
	tls_layer *t = (tls_layer *)l;
	size_t before = down->len;
	if (t->fail)
		return failing(t, down, 0, before);
	drain(t, down);
	/* After close_notify every byte is dropped: nothing may follow it. */
	if (t->peer_closed)
		return (ssize_t)len;
	attach(t, in, len, down);
	int rc = advance(t, up);
	size_t n = detach(t);
	if (rc < 0)
		return failing(t, down, n, before);
	return (ssize_t)n;
}

static ssize_t tls_from_above(layer *l, const uint8_t *in, size_t len, layer_buf *down)
{
	tls_layer *t = (tls_layer *)l;
	drain(t, down);
	if (t->fail || !t->done) /* a failure is from_below's to return */
		return 0;
	if (t->shut)
		return len ? set_err(t, LAYER_ERR_STATE, M_SEND_SHUT, NULL) : 0;
	size_t used = 0;
	attach(t, NULL, 0, down);
	/* One SSL_write per record, each written whole into down: a record
	 * waits until down has room for it (the shell empties down into the
	 * socket), rather than being cut short or spilled. */
	while (used < len && t->spill_len == 0) {
		size_t chunk = len - used, w = 0;
		if (chunk > TLS_RECORD_MAX)
			chunk = TLS_RECORD_MAX;
		if (layer_buf_room(down) < chunk + TLS_RECORD_SLACK)
			break;
		clear_errors();
		if (SSL_write_ex(t->ssl, in + used, chunk, &w) != 1) {
			detach(t);
			return conn_error(t);
		}
		used += w;
	}
	detach(t);
	return (ssize_t)used;
}

static int tls_start(layer *l, layer_buf *down)
{
	tls_layer *t = (tls_layer *)l;
	layer_buf none = {0};
	attach(t, NULL, 0, down);
	int rc = advance(t, &none);
	detach(t);
	return rc;
}

static bool tls_ready(const layer *l) { return ((const tls_layer *)l)->done; }

/* Writes close_notify. Before the handshake there is nothing to close:
 * the shell just shuts the socket. */
static int tls_shutdown(layer *l, layer_buf *down)
{
	tls_layer *t = (tls_layer *)l;
	if (t->fail)
		return t->fail;
	if (!t->done || t->shut)
		return 0;
	drain(t, down);
	ERR_clear_error();
	attach(t, NULL, 0, down);
	int r = SSL_shutdown(t->ssl);
	detach(t);
	if (r < 0) {
		int e = SSL_get_error(t->ssl, r);
		if (t->bio_nomem || (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE))
			return conn_error(t);
	}
	t->shut = true;
	return 0;
}

static const char *tls_error(const layer *l)
{
	const tls_layer *t = (const tls_layer *)l;
	return t->err[0] ? t->err : NULL;
}

static void tls_free(layer *l)
{
	tls_layer *t = (tls_layer *)l;
	SSL_free(t->ssl);
	tls_client_ctx_unref(t->cctx);
	tls_server_ctx_unref(t->sctx);
	free(t->spill);
	free(t);
}

static const layer_ops client_ops = {
	.name = "tls",
	.start = tls_start,
	.from_below = tls_from_below,
	.from_above = tls_from_above,
	.ready = tls_ready,
	.shutdown = tls_shutdown,
	.error = tls_error,
	.free = tls_free,
};

static const layer_ops server_ops = {
	.name = "tls",
	.start = NULL,
	.from_below = tls_from_below,
	.from_above = tls_from_above,
	.ready = tls_ready,
	.shutdown = tls_shutdown,
	.error = tls_error,
	.free = tls_free,
};

static const tls_layer *as_tls(const layer *l)
{
	return l && (l->ops == &client_ops || l->ops == &server_ops) ? (const tls_layer *)l : NULL;
}

/* An SSL object over a BIO of ours; NULL on no memory. */
static tls_layer *layer_new(SSL_CTX *ctx, const layer_ops *ops)
{
	pthread_once(&bio_once, bio_method_init);
	if (!bio_method)
		return NULL;
	tls_layer *t = calloc(1, sizeof *t);
	if (!t)
		return NULL;
	t->base.ops = ops;
	t->ssl = SSL_new(ctx);
	t->bio = BIO_new(bio_method);
	if (!t->ssl || !t->bio) {
		BIO_free(t->bio);
		SSL_free(t->ssl);
		free(t);
		return NULL;
	}
	BIO_set_data(t->bio, t);
	BIO_set_init(t->bio, 1);
	SSL_set_bio(t->ssl, t->bio, t->bio); /* one reference, taken by ssl */
	/* OpenSSL frees its record buffers (some 34 KiB) whenever they empty
	 * and allocates them again for the next record: an idle connection
	 * holds none, and a bulk flow pays a malloc and a free per 16 KiB
	 * record, which measured as nothing beside the cipher (keeping them
	 * while records run full and letting them go after a short one was no
	 * faster; bench/results/2026-12-02-tls.md). */
	SSL_set_mode(t->ssl, SSL_MODE_RELEASE_BUFFERS);
	return t;
}

static bool is_ip(const char *name)
{
	uint8_t a[16];
	return inet_pton(AF_INET, name, a) == 1 || inet_pton(AF_INET6, name, a) == 1;
}

layer *tls_client_new(tls_client_ctx *ctx, const char *server_name, char *err, size_t err_size)
{
	const char *name = server_name ? server_name : ctx->server_name;
	if (name && !*name)
		name = NULL;
	if (ctx->verify && !name) {
		say(err, err_size, M_NO_NAME);
		return NULL;
	}
	ERR_clear_error();
	tls_layer *t = layer_new(ctx->ssl, &client_ops);
	if (!t) {
		say(err, err_size, M_NOMEM);
		ERR_clear_error();
		return NULL;
	}
	tls_client_ctx_ref(ctx);
	t->cctx = ctx;
	SSL_set_connect_state(t->ssl);
	int ok = 1;
	if (name && is_ip(name)) {
		if (ctx->verify)
			ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(t->ssl), name);
	} else if (name) {
		ok = SSL_set_tlsext_host_name(t->ssl, name);
		if (ok && ctx->verify) {
			SSL_set_hostflags(t->ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
			ok = SSL_set1_host(t->ssl, name);
		}
	}
	if (ok != 1) {
		say(err, err_size, M_BAD_NAME, name);
		ERR_clear_error();
		tls_free(&t->base);
		return NULL;
	}
	/* resume the last session made for this name, if any; an IP name sends
	 * no SNI, so its sessions are kept under "" */
	const char *key = name && !is_ip(name) ? name : "";
	pthread_mutex_lock(&ctx->lock);
	if (ctx->session && strcmp(ctx->session_name, key) == 0)
		(void)SSL_set_session(t->ssl, ctx->session);
	pthread_mutex_unlock(&ctx->lock);
	return &t->base;
}

layer *tls_server_new(tls_server_ctx *ctx, char *err, size_t err_size)
{
	ERR_clear_error();
	tls_layer *t = layer_new(ctx->ssl, &server_ops);
	if (!t) {
		say(err, err_size, M_NOMEM);
		ERR_clear_error();
		return NULL;
	}
	tls_server_ctx_ref(ctx);
	t->sctx = ctx;
	SSL_set_accept_state(t->ssl);
	return &t->base;
}

size_t tls_alpn(const layer *l, const uint8_t **proto)
{
	const tls_layer *t = as_tls(l);
	const unsigned char *p = NULL;
	unsigned int n = 0;
	if (t)
		SSL_get0_alpn_selected(t->ssl, &p, &n);
	*proto = p;
	return n;
}

const char *tls_server_name(const layer *l)
{
	const tls_layer *t = as_tls(l);
	return t ? SSL_get_servername(t->ssl, TLSEXT_NAMETYPE_host_name) : NULL;
}

const char *tls_version_name(const layer *l)
{
	const tls_layer *t = as_tls(l);
	return t && t->done ? SSL_get_version(t->ssl) : NULL;
}

bool tls_peer_closed(const layer *l)
{
	const tls_layer *t = as_tls(l);
	return t && t->peer_closed;
}

bool tls_resumed(const layer *l)
{
	const tls_layer *t = as_tls(l);
	return t && SSL_session_reused(t->ssl) == 1;
}
