/* test_shadowsocks2022.c - Shadowsocks 2022 (SIP022) over TCP: PSKs, subkeys and both sides' first bytes against vectors computed apart (shadowsocks2022_vectors.h), every truncation and changed byte, the time window, replays, bad headers, identity headers (SIP022-2: several users behind an iPSK), round trips with 0xFFFF-byte chunks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proto/shadowsocks.h"
#include "proto/shadowsocks_server.h"
#include "shadowsocks2022_vectors.h"
#include "sstest.h"

#define NOW SS2V_NOW

typedef struct vec {
	ss_method m;
	const char *psk;
	const uint8_t *key, *subkey, *first, *second, *response, *bad_type, *bad_padding, *empty,
		*payload;
	size_t first_len, second_len, response_len, bad_type_len, bad_padding_len, empty_len,
		payload_len;
} vec;

#define V(M, T)                                                                                   \
	{M,                                                                                        \
	 SS2V_##T##_PSK,                                                                           \
	 SS2V_##T##_KEY,                                                                           \
	 SS2V_##T##_SUBKEY,                                                                        \
	 SS2V_##T##_FIRST,                                                                         \
	 SS2V_##T##_SECOND,                                                                        \
	 SS2V_##T##_RESPONSE,                                                                      \
	 SS2V_##T##_BAD_TYPE,                                                                      \
	 SS2V_##T##_BAD_PADDING,                                                                   \
	 SS2V_##T##_EMPTY,                                                                         \
	 SS2V_##T##_PAYLOAD,                                                                       \
	 sizeof SS2V_##T##_FIRST,                                                                  \
	 sizeof SS2V_##T##_SECOND,                                                                 \
	 sizeof SS2V_##T##_RESPONSE,                                                               \
	 sizeof SS2V_##T##_BAD_TYPE,                                                               \
	 sizeof SS2V_##T##_BAD_PADDING,                                                            \
	 sizeof SS2V_##T##_EMPTY,                                                                  \
	 sizeof SS2V_##T##_PAYLOAD}

static const vec VECS[] = {
	V(SS_METHOD_2022_AES_128_GCM, AES_128_GCM),
	V(SS_METHOD_2022_AES_256_GCM, AES_256_GCM),
	V(SS_METHOD_2022_CHACHA20_POLY1305, CHACHA20_POLY1305),
};
#define N_VECS (sizeof VECS / sizeof VECS[0])

/* the server's salt in the vectors: 0x80, 0x81, ... */
static uint8_t server_salt[32];

static int setup(void **state)
{
	(void)state;
	for (int i = 0; i < 32; i++)
		server_salt[i] = (uint8_t)(0x80 + i);
	return 0;
}

static void account(ss_account *a, const vec *v)
{
	assert_int_equal(ss_account_init(a, v->m, v->psk, strlen(v->psk)), 0);
}

static layer *client_at(const vec *v, const uint8_t *salt, int64_t now)
{
	addr_dest d = example_com();
	layer *l = ss_client_new(v->m, v->key, NULL, &d, salt, now, SS2V_PADDING_ARG);
	assert_non_null(l);
	return l;
}

/* ---- methods and keys ---- */

static void methods_and_keys(void **state)
{
	(void)state;
	const char *names[] = {"2022-blake3-aes-128-gcm", "2022-blake3-aes-256-gcm",
	                       "2022-blake3-chacha20-poly1305"};
	for (size_t i = 0; i < N_VECS; i++) {
		const vec *v = &VECS[i];
		ss_method m;
		assert_int_equal(ss_method_parse(names[i], &m), 0);
		assert_int_equal(m, v->m);
		assert_string_equal(ss_method_name(m), names[i]);
		assert_true(ss_method_is_2022(m));
		assert_int_equal(ss_chunk_max(m), 0xFFFF);
		size_t n = ss_key_len(m);
		assert_int_equal(n, i == 0 ? 16 : 32);
		uint8_t key[SS_KEY_MAX], sub[SS_KEY_MAX];
		assert_int_equal(ss_master_key(m, v->psk, strlen(v->psk), key), 0);
		assert_memory_equal(key, v->key, n);
		assert_int_equal(ss_subkey(m, key, SALT, sub), 0);
		assert_memory_equal(sub, v->subkey, n);
	}
	assert_false(ss_method_is_2022(SS_METHOD_AES_128_GCM));
	assert_int_equal(ss_chunk_max(SS_METHOD_AES_128_GCM), 0x3FFF);
	/* keys that are not base64 of exactly the key's length */
	const struct {
		ss_method m;
		const char *psk;
	} bad[] = {
		{SS_METHOD_2022_AES_128_GCM, VECS[1].psk},                /* 32 bytes for 16 */
		{SS_METHOD_2022_AES_256_GCM, VECS[0].psk},                /* 16 for 32 */
		{SS_METHOD_2022_AES_128_GCM, "QEFCQ0RFRkdISUpLTE1OTw"},   /* no padding */
		{SS_METHOD_2022_AES_128_GCM, "QEFCQ0RFRkdISUpLTE1OTw==\n"}, /* a newline */
		{SS_METHOD_2022_AES_128_GCM, " QEFCQ0RFRkdISUpLTE1OTw=="},
		{SS_METHOD_2022_AES_128_GCM, "QEFCQ0RFRkdISUpLTE1OT*=="}, /* not the alphabet */
		{SS_METHOD_2022_AES_128_GCM, "QEFCQ0RFRkdISUpLTE1O===="}, /* padding early */
		{SS_METHOD_2022_AES_128_GCM, "QEFCQ0RFRkdISUpLTE1OTw=A"},
		{SS_METHOD_2022_AES_256_GCM, "correct horse battery staple"},
		{SS_METHOD_2022_AES_128_GCM, ""},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		uint8_t key[SS_KEY_MAX];
		assert_int_equal(ss_master_key(bad[i].m, bad[i].psk, strlen(bad[i].psk), key), -1);
	}
	/* SIP022's UDP is another format (shadowsocks2022_udp.h): the AEAD-2017
	 * packet codec refuses a 2022 method */
	uint8_t out[128];
	assert_true(ss_packet_seal(VECS[0].m, VECS[0].key, SALT, (const uint8_t *)"x", 1, out,
	                           sizeof out) < 0);
	assert_true(ss_packet_open(VECS[0].m, VECS[0].key, VECS[0].first, 64, out, sizeof out) < 0);
}

/* ---- the client layer ---- */

static void client_first_bytes_are_exact(void **state)
{
	(void)state;
	for (size_t i = 0; i < N_VECS; i++) {
		const vec *v = &VECS[i];
		layer *l = client_at(v, SALT, NOW);
		assert_client_sends(l, v->first, v->first_len, v->second, v->second_len);
	}
}

/* Feeds the response to c step bytes at a time; returns its error or NULL,
 * with what came up in got. */
static const char *client_reads(layer *c, const uint8_t *in, size_t len, size_t step,
                                uint8_t *got, size_t *got_len)
{
	uint8_t scratch[64];
	layer_buf up = {got, 0, 64}, down = {scratch, 0, sizeof scratch};
	layer_buf first = {scratch, 0, sizeof scratch};
	if (c->ops->start(c, &first)) /* room below is not this test's subject */
		return "start";
	for (size_t off = 0; off < len;) {
		size_t k = step && len - off > step ? step : len - off;
		ssize_t n = c->ops->from_below(c, in + off, k, &up, &down);
		if (n < 0) {
			*got_len = up.len;
			return c->ops->error(c);
		}
		off += (size_t)n;
	}
	*got_len = up.len;
	return NULL;
}

static void client_reads_the_response(void **state)
{
	(void)state;
	for (size_t i = 0; i < N_VECS; i++) {
		const vec *v = &VECS[i];
		size_t steps[] = {0, 1, 5};
		for (size_t s = 0; s < 3; s++) {
			layer *c = client_at(v, SALT, NOW);
			uint8_t got[64];
			size_t n;
			assert_null(client_reads(c, v->response, v->response_len, steps[s], got, &n));
			assert_int_equal(n, 5);
			assert_memory_equal(got, "world", 5);
			c->ops->free(c);
		}
		/* within 30 s either way of the request: taken */
		for (int d = -30; d <= 30; d += 60) {
			layer *c = client_at(v, SALT, NOW + d);
			uint8_t got[64];
			size_t n;
			assert_null(client_reads(c, v->response, v->response_len, 0, got, &n));
			c->ops->free(c);
		}
		/* 31 s off: a replay */
		for (int d = -31; d <= 31; d += 62) {
			layer *c = client_at(v, SALT, NOW + d);
			uint8_t got[64];
			size_t n;
			assert_string_equal(client_reads(c, v->response, v->response_len, 0, got, &n),
			                    "shadowsocks: response timestamp out of the window");
			c->ops->free(c);
		}
		/* a response to another request (another salt) */
		uint8_t other[32];
		memset(other, 0x77, sizeof other);
		layer *c = client_at(v, other, NOW);
		uint8_t got[64];
		size_t n;
		assert_string_equal(client_reads(c, v->response, v->response_len, 0, got, &n),
		                    "shadowsocks: bad response header");
		c->ops->free(c);
		/* every changed byte after the salt fails a tag; nothing comes up */
		size_t slen = ss_key_len(v->m);
		for (size_t k = slen; k < v->response_len; k++) {
			uint8_t bad[128];
			memcpy(bad, v->response, v->response_len);
			bad[k] ^= 0x01;
			c = client_at(v, SALT, NOW);
			assert_string_equal(client_reads(c, bad, v->response_len, 0, got, &n),
			                    "shadowsocks: bad chunk");
			assert_int_equal(n, 0);
			c->ops->free(c);
		}
		/* a changed salt keys another subkey: the header does not open */
		uint8_t bad[128];
		memcpy(bad, v->response, v->response_len);
		bad[0] ^= 0x01;
		c = client_at(v, SALT, NOW);
		assert_string_equal(client_reads(c, bad, v->response_len, 0, got, &n),
		                    "shadowsocks: bad chunk");
		c->ops->free(c);
	}
}

/* ---- the server core ---- */

static void server_opens_the_request_and_answers_exactly(void **state)
{
	(void)state;
	for (size_t i = 0; i < N_VECS; i++) {
		const vec *v = &VECS[i];
		ss_account a;
		account(&a, v);
		uint8_t in[2048];
		memcpy(in, v->first, v->first_len);
		memcpy(in + v->first_len, v->second, v->second_len);
		size_t steps[] = {0, 1, 7};
		for (size_t s = 0; s < 3; s++) {
			ss_server sv;
			ss_server_init(&sv, &a, 1, NULL, NULL);
			result r = serve_at(&sv, in, v->first_len + v->second_len, steps[s], NOW);
			assert_int_equal(r.ev.kind, PROTO_EV_OPEN);
			assert_int_equal(r.used, v->first_len);
			assert_int_equal(r.ev.user, 0);
			assert_int_equal(r.ev.dest.kind, ADDR_DOMAIN);
			assert_string_equal(r.ev.dest.u.domain.name, "example.com");
			assert_int_equal(r.ev.dest.port, 443);
			layer *b = ss_server_body_new(&sv, server_salt, NOW);
			assert_non_null(b);
			uint8_t buf[256];
			layer_buf down = {buf, 0, sizeof buf};
			assert_int_equal(b->ops->start(b, &down), 0);
			assert_int_equal(down.len, 0); /* the padding does not go down */
			assert_int_equal(b->ops->from_above(b, v->second, v->second_len, &down),
			                 v->second_len);
			assert_int_equal(down.len, 5);
			assert_memory_equal(buf, "hello", 5);
			/* nothing goes up before the upstream speaks: the salt waits for
			 * the header, to leave in one write (SIP022 3.1.3) */
			layer_buf up = {buf, 0, sizeof buf};
			assert_int_equal(b->ops->from_below(b, NULL, 0, &up, NULL), 0);
			assert_int_equal(up.len, 0);
			assert_int_equal(b->ops->from_below(b, (const uint8_t *)"world", 5, &up, NULL), 5);
			assert_int_equal(up.len, v->response_len);
			assert_memory_equal(buf, v->response, v->response_len);
			b->ops->free(b);
			ss_server_free(&sv);
		}
	}
}

static void server_waits_on_every_truncation(void **state)
{
	(void)state;
	for (size_t i = 0; i < N_VECS; i++) {
		const vec *v = &VECS[i];
		ss_account a;
		account(&a, v);
		assert_waits_on_every_truncation(&a, v->first, v->first_len, NOW);
	}
}

static void server_refuses_every_changed_byte(void **state)
{
	(void)state;
	for (size_t i = 0; i < N_VECS; i++) {
		const vec *v = &VECS[i];
		ss_account a;
		account(&a, v);
		size_t fixed_end = ss_key_len(v->m) + SS2022_REQ_FIXED_SEALED;
		for (size_t k = 0; k < v->first_len; k++) {
			uint8_t bad[2048];
			memcpy(bad, v->first, v->first_len);
			bad[k] ^= 0x80;
			ss_server sv;
			ss_server_init(&sv, &a, 1, NULL, NULL);
			result r = serve_at(&sv, bad, v->first_len, 0, NOW);
			assert_int_equal(r.ev.kind, PROTO_EV_CLOSE);
			assert_string_equal(r.ev.reason,
			                    k < fixed_end ? AUTH : "shadowsocks: bad chunk");
			ss_server_free(&sv);
		}
	}
}

static void server_keeps_the_time_window(void **state)
{
	(void)state;
	for (size_t i = 0; i < N_VECS; i++) {
		const vec *v = &VECS[i];
		ss_account a;
		account(&a, v);
		const struct {
			int64_t d;
			bool ok;
		} cases[] = {{0, true}, {30, true}, {-30, true}, {31, false}, {-31, false},
		             {-NOW, false}, {3600, false}};
		for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
			/* the client's clock d seconds off the server's */
			layer *c = client_at(v, SALT, NOW + cases[k].d);
			uint8_t out[2048];
			layer_buf w = {out, 0, sizeof out};
			assert_int_equal(c->ops->start(c, &w), 0);
			ss_server sv;
			ss_server_init(&sv, &a, 1, NULL, NULL);
			result r = serve_at(&sv, out, w.len, 0, NOW);
			if (cases[k].ok) {
				assert_int_equal(r.ev.kind, PROTO_EV_OPEN);
			} else {
				assert_int_equal(r.ev.kind, PROTO_EV_CLOSE);
				assert_string_equal(r.ev.reason,
				                    "shadowsocks: request timestamp out of the window");
			}
			ss_server_free(&sv);
			c->ops->free(c);
		}
	}
}

static void server_refuses_a_replayed_salt(void **state)
{
	(void)state;
	for (size_t i = 0; i < N_VECS; i++) {
		/* a filter each: two methods' vectors share a 32-byte salt */
		ss_replay *f = calloc(1, sizeof *f);
		const vec *v = &VECS[i];
		ss_account a;
		account(&a, v);
		ss_server sv;
		ss_server_init(&sv, &a, 1, replay_add, f);
		assert_int_equal(serve_at(&sv, v->first, v->first_len, 0, NOW).ev.kind,
		                 PROTO_EV_OPEN);
		ss_server_free(&sv);
		/* the same bytes again, within the time window: a replay */
		ss_server_init(&sv, &a, 1, replay_add, f);
		result r = serve_at(&sv, v->first, v->first_len, 0, NOW + 20);
		assert_int_equal(r.ev.kind, PROTO_EV_CLOSE);
		assert_string_equal(r.ev.reason, "shadowsocks: replayed salt");
		ss_server_free(&sv);
		/* later than the window the timestamp refuses it first */
		ss_server_init(&sv, &a, 1, replay_add, f);
		r = serve_at(&sv, v->first, v->first_len, 0, NOW + 31);
		assert_string_equal(r.ev.reason, "shadowsocks: request timestamp out of the window");
		ss_server_free(&sv);
		free(f);
	}
}

static void server_refuses_bad_headers(void **state)
{
	(void)state;
	for (size_t i = 0; i < N_VECS; i++) {
		const vec *v = &VECS[i];
		ss_account a, wrong;
		account(&a, v);
		account(&wrong, &VECS[(i + 1) % N_VECS]);
		const struct {
			const ss_account *a;
			const uint8_t *p;
			size_t len;
			const char *why;
		} cases[] = {
			{&a, v->bad_type, v->bad_type_len, "shadowsocks: not a request header (type is not 0)"},
			{&a, v->bad_padding, v->bad_padding_len, "shadowsocks: the padding runs past the header"},
			{&a, v->empty, v->empty_len,
			 "shadowsocks: a request header with neither payload nor padding"},
			{&wrong, v->first, v->first_len, AUTH},
		};
		for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
			ss_server sv;
			ss_server_init(&sv, cases[k].a, 1, NULL, NULL);
			result r = serve_at(&sv, cases[k].p, cases[k].len, 0, NOW);
			assert_int_equal(r.ev.kind, PROTO_EV_CLOSE);
			assert_string_equal(r.ev.reason, cases[k].why);
			ss_server_free(&sv);
		}
		/* payload and no padding is a request: the payload goes down first */
		ss_server sv;
		ss_server_init(&sv, &a, 1, NULL, NULL);
		result r = serve_at(&sv, v->payload, v->payload_len, 0, NOW);
		assert_int_equal(r.ev.kind, PROTO_EV_OPEN);
		layer *b = ss_server_body_new(&sv, server_salt, NOW);
		uint8_t buf[16];
		layer_buf down = {buf, 0, sizeof buf};
		assert_int_equal(b->ops->start(b, &down), 0);
		assert_int_equal(down.len, 3);
		assert_memory_equal(buf, "GET", 3);
		b->ops->free(b);
		ss_server_free(&sv);
	}
}

/* ---- identity headers (SIP022-2): several users behind an iPSK ---- */

typedef struct eih_vec {
	ss_method m;
	const char *ipsk, *relay_ipsk, *upsk, *other; /* other: a user that is not the client */
	const uint8_t *hash, *first, *two, *response;
	size_t first_len, two_len, response_len;
} eih_vec;

#define E(M, T, O)                                                                                \
	{M,                                                                                        \
	 SS2V_##T##_IPSK,                                                                          \
	 SS2V_##T##_RELAY_IPSK,                                                                    \
	 SS2V_##T##_UPSK,                                                                          \
	 O,                                                                                        \
	 SS2V_##T##_UPSK_HASH,                                                                     \
	 SS2V_##T##_EIH_FIRST,                                                                     \
	 SS2V_##T##_EIH_TWO,                                                                       \
	 SS2V_##T##_EIH_RESPONSE,                                                                  \
	 sizeof SS2V_##T##_EIH_FIRST,                                                              \
	 sizeof SS2V_##T##_EIH_TWO,                                                                \
	 sizeof SS2V_##T##_EIH_RESPONSE}

static const eih_vec EIH[] = {
	E(SS_METHOD_2022_AES_128_GCM, AES_128_GCM, SS2V_AES_128_GCM_PSK),
	E(SS_METHOD_2022_AES_256_GCM, AES_256_GCM, SS2V_AES_256_GCM_PSK),
};
#define N_EIH (sizeof EIH / sizeof EIH[0])

static const char UNKNOWN_IDENTITY[] =
	"shadowsocks: unknown identity (no user's key hash matches the identity header)";

/* users[0] is another user, users[1] the vectors' client; both behind
 * ipsk. */
static void eih_users(ss_account users[2], const eih_vec *e, const char *ipsk)
{
	assert_int_equal(ss_account_init(&users[0], e->m, e->other, strlen(e->other)), 0);
	assert_int_equal(ss_account_init(&users[1], e->m, e->upsk, strlen(e->upsk)), 0);
	for (int i = 0; i < 2; i++)
		assert_int_equal(ss_account_set_identity(&users[i], ipsk, strlen(ipsk)), 0);
	assert_memory_equal(users[1].hash, e->hash, SS2022_IDENTITY_LEN);
}

static layer *eih_client(const eih_vec *e, const char *password)
{
	uint8_t key[SS_KEY_MAX];
	ss_identity id;
	assert_int_equal(ss_client_keys(e->m, password, strlen(password), key, &id), 0);
	addr_dest d = example_com();
	layer *l = ss_client_new(e->m, key, &id, &d, SALT, NOW, SS2V_PADDING_ARG);
	assert_non_null(l);
	return l;
}

static void identity_client_bytes_are_exact(void **state)
{
	(void)state;
	for (size_t i = 0; i < N_EIH; i++) {
		const eih_vec *e = &EIH[i];
		char pw[256];
		const struct {
			const uint8_t *want;
			size_t len;
			int n;
		} cases[] = {{e->first, e->first_len, 1}, {e->two, e->two_len, 2}};
		for (size_t k = 0; k < 2; k++) {
			if (cases[k].n == 1)
				snprintf(pw, sizeof pw, "%s:%s", e->ipsk, e->upsk);
			else
				snprintf(pw, sizeof pw, "%s:%s:%s", e->relay_ipsk, e->ipsk, e->upsk);
			layer *l = eih_client(e, pw);
			uint8_t out[2048];
			layer_buf down = {out, 0, sizeof out};
			assert_int_equal(l->ops->start(l, &down), 0);
			assert_int_equal(down.len, cases[k].len);
			assert_memory_equal(out, cases[k].want, cases[k].len);
			/* the response is the user's: its PSK opens it */
			uint8_t got[64];
			size_t n;
			l->ops->free(l);
			l = eih_client(e, pw);
			assert_null(client_reads(l, e->response, e->response_len, 1, got, &n));
			assert_int_equal(n, 5);
			assert_memory_equal(got, "world", 5);
			l->ops->free(l);
		}
	}
}

static void identity_keys_are_checked(void **state)
{
	(void)state;
	const eih_vec *e = &EIH[0];
	uint8_t key[SS_KEY_MAX];
	ss_identity id;
	char pw[512];
	/* no identity: the plain PSK */
	assert_int_equal(ss_client_keys(e->m, e->upsk, strlen(e->upsk), key, &id), 0);
	assert_int_equal(id.n, 0);
	/* AEAD-2017 passwords may hold a colon: not split */
	assert_int_equal(ss_client_keys(SS_METHOD_AES_128_GCM, "a:b", 3, key, &id), 0);
	assert_int_equal(id.n, 0);
	/* chacha20: identity headers are AES blocks (SIP022-2) */
	snprintf(pw, sizeof pw, "%s:%s", SS2V_CHACHA20_POLY1305_PSK, SS2V_CHACHA20_POLY1305_PSK);
	assert_int_equal(ss_client_keys(SS_METHOD_2022_CHACHA20_POLY1305, pw, strlen(pw), key, &id),
	                 SS_KEYS_ERR_METHOD);
	/* a part that is not the key's length, an empty part */
	snprintf(pw, sizeof pw, "%s:%s", EIH[1].ipsk, e->upsk);
	assert_int_equal(ss_client_keys(e->m, pw, strlen(pw), key, &id), SS_KEYS_ERR_PSK);
	snprintf(pw, sizeof pw, "%s:", e->ipsk);
	assert_int_equal(ss_client_keys(e->m, pw, strlen(pw), key, &id), SS_KEYS_ERR_PSK);
	snprintf(pw, sizeof pw, ":%s", e->upsk);
	assert_int_equal(ss_client_keys(e->m, pw, strlen(pw), key, &id), SS_KEYS_ERR_PSK);
	/* SS2022_IDENTITY_MAX identity PSKs are taken, one more is not */
	int at = 0;
	for (int k = 0; k < SS2022_IDENTITY_MAX; k++)
		at += snprintf(pw + at, sizeof pw - (size_t)at, "%s:", e->ipsk);
	snprintf(pw + at, sizeof pw - (size_t)at, "%s", e->upsk);
	assert_int_equal(ss_client_keys(e->m, pw, strlen(pw), key, &id), 0);
	assert_int_equal(id.n, SS2022_IDENTITY_MAX);
	char more[600];
	snprintf(more, sizeof more, "%s:%s", e->ipsk, pw);
	assert_int_equal(ss_client_keys(e->m, more, strlen(more), key, &id), SS_KEYS_ERR_TOO_MANY);
	/* the server's side */
	ss_account a;
	assert_int_equal(ss_account_init(&a, SS_METHOD_2022_CHACHA20_POLY1305,
	                                 SS2V_CHACHA20_POLY1305_PSK,
	                                 strlen(SS2V_CHACHA20_POLY1305_PSK)),
	                 0);
	assert_int_equal(ss_account_set_identity(&a, SS2V_CHACHA20_POLY1305_PSK,
	                                         strlen(SS2V_CHACHA20_POLY1305_PSK)),
	                 SS_KEYS_ERR_METHOD);
	assert_int_equal(ss_account_init(&a, e->m, e->upsk, strlen(e->upsk)), 0);
	assert_int_equal(ss_account_set_identity(&a, EIH[1].ipsk, strlen(EIH[1].ipsk)),
	                 SS_KEYS_ERR_PSK);
	/* a client layer refuses identities its method cannot carry */
	addr_dest d = example_com();
	id = (ss_identity){.n = 1};
	assert_null(ss_client_new(SS_METHOD_2022_CHACHA20_POLY1305, VECS[2].key, &id, &d, SALT, NOW,
	                          0));
	assert_null(ss_client_new(SS_METHOD_AES_128_GCM, VECS[0].key, &id, &d, SALT, NOW, 0));
}

static void identity_server_finds_the_user(void **state)
{
	(void)state;
	for (size_t i = 0; i < N_EIH; i++) {
		const eih_vec *e = &EIH[i];
		ss_account users[2];
		eih_users(users, e, e->ipsk);
		size_t steps[] = {0, 1, 7};
		for (size_t s = 0; s < 3; s++) {
			ss_server sv;
			ss_server_init(&sv, users, 2, NULL, NULL);
			result r = serve_at(&sv, e->first, e->first_len, steps[s], NOW);
			assert_int_equal(r.ev.kind, PROTO_EV_OPEN);
			assert_int_equal(r.used, e->first_len);
			assert_int_equal(r.ev.user, 1);
			assert_string_equal(r.ev.dest.u.domain.name, "example.com");
			layer *b = ss_server_body_new(&sv, server_salt, NOW);
			assert_non_null(b);
			uint8_t buf[256];
			layer_buf up = {buf, 0, sizeof buf};
			assert_int_equal(b->ops->from_below(b, (const uint8_t *)"world", 5, &up, NULL), 5);
			assert_int_equal(up.len, e->response_len);
			assert_memory_equal(buf, e->response, e->response_len);
			b->ops->free(b);
			ss_server_free(&sv);
		}
		/* every truncation waits */
		for (size_t cut = 0; cut < e->first_len; cut++) {
			ss_server sv;
			ss_server_init(&sv, users, 2, NULL, NULL);
			assert_int_equal(serve_at(&sv, e->first, cut, 0, NOW).ev.kind, PROTO_EV_NONE);
			ss_server_free(&sv);
		}
		/* a client of ours through it: round trip at once */
		char pw[256];
		snprintf(pw, sizeof pw, "%s:%s", e->ipsk, e->other);
		layer *c = eih_client(e, pw);
		uint8_t out[2048];
		layer_buf w = {out, 0, sizeof out};
		assert_int_equal(c->ops->start(c, &w), 0);
		ss_server sv;
		ss_server_init(&sv, users, 2, NULL, NULL);
		result r = serve_at(&sv, out, w.len, 0, NOW);
		assert_int_equal(r.ev.kind, PROTO_EV_OPEN);
		assert_int_equal(r.ev.user, 0);
		ss_server_free(&sv);
		c->ops->free(c);
	}
}

static void identity_server_refuses_strangers(void **state)
{
	(void)state;
	for (size_t i = 0; i < N_EIH; i++) {
		const eih_vec *e = &EIH[i];
		ss_account users[2], other_ipsk[2];
		eih_users(users, e, e->ipsk);
		eih_users(other_ipsk, e, e->relay_ipsk);
		/* the client's user missing: the hash is no one's */
		const struct {
			const ss_account *u;
			size_t n;
			const uint8_t *p;
			size_t len;
			const char *why;
		} cases[] = {
			{users, 1, e->first, e->first_len, UNKNOWN_IDENTITY},
			/* another iPSK decrypts the header into noise */
			{other_ipsk, 2, e->first, e->first_len, UNKNOWN_IDENTITY},
			/* a plain request (no identity header) to a server with users */
			{users, 2, VECS[i].first, VECS[i].first_len, UNKNOWN_IDENTITY},
			/* a relay's request with the relay's header still on */
			{users, 2, e->two, e->two_len, UNKNOWN_IDENTITY},
		};
		for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
			ss_server sv;
			ss_server_init(&sv, cases[k].u, cases[k].n, NULL, NULL);
			result r = serve_at(&sv, cases[k].p, cases[k].len, 0, NOW);
			assert_int_equal(r.ev.kind, PROTO_EV_CLOSE);
			assert_int_equal(r.used, 0); /* nothing consumed: the shell drains */
			assert_string_equal(r.ev.reason, cases[k].why);
			ss_server_free(&sv);
		}
		/* every changed byte: the salt and the identity header name no
		 * one, the fixed header does not open, then a bad chunk */
		size_t slen = ss_key_len(e->m), ident_end = slen + SS2022_IDENTITY_LEN;
		for (size_t k = 0; k < e->first_len; k++) {
			uint8_t bad[2048];
			memcpy(bad, e->first, e->first_len);
			bad[k] ^= 0x80;
			ss_server sv;
			ss_server_init(&sv, users, 2, NULL, NULL);
			result r = serve_at(&sv, bad, e->first_len, 0, NOW);
			assert_int_equal(r.ev.kind, PROTO_EV_CLOSE);
			assert_string_equal(r.ev.reason, k < ident_end ? UNKNOWN_IDENTITY
			                                 : k < ident_end + SS2022_REQ_FIXED_SEALED
			                                         ? AUTH
			                                         : "shadowsocks: bad chunk");
			ss_server_free(&sv);
		}
		/* replays and the time window hold behind an identity too */
		ss_replay *f = calloc(1, sizeof *f);
		ss_server sv;
		ss_server_init(&sv, users, 2, replay_add, f);
		assert_int_equal(serve_at(&sv, e->first, e->first_len, 0, NOW).ev.kind, PROTO_EV_OPEN);
		ss_server_free(&sv);
		ss_server_init(&sv, users, 2, replay_add, f);
		assert_string_equal(serve_at(&sv, e->first, e->first_len, 0, NOW + 1).ev.reason,
		                    "shadowsocks: replayed salt");
		ss_server_free(&sv);
		ss_server_init(&sv, users, 2, NULL, NULL);
		assert_string_equal(serve_at(&sv, e->first, e->first_len, 0, NOW + 31).ev.reason,
		                    "shadowsocks: request timestamp out of the window");
		ss_server_free(&sv);
		free(f);
	}
}

/* ---- round trips ---- */

static void round_trip_with_full_chunks(void **state)
{
	(void)state;
	size_t big = 200000;
	uint8_t *data = malloc(big), *wire = malloc(2 * big), *got = malloc(big);
	for (size_t i = 0; i < big; i++)
		data[i] = (uint8_t)(i * 7 + 3);
	for (size_t i = 0; i < N_VECS; i++) {
		const vec *v = &VECS[i];
		size_t slen = ss_key_len(v->m);
		ss_account a;
		account(&a, v);
		layer *c = client_at(v, SALT, NOW);
		layer_buf w = {wire, 0, 2 * big};
		assert_int_equal(c->ops->start(c, &w), 0);
		size_t head = w.len;
		send_all(c, data, big, &w);
		/* four chunks: three of 0xFFFF, the rest */
		assert_int_equal(w.len - head, big + 4 * (SS_LEN_BLOCK + SS_TAG_LEN));
		ss_server sv;
		ss_server_init(&sv, &a, 1, NULL, NULL);
		result r = serve_at(&sv, wire, w.len, 0, NOW);
		assert_int_equal(r.ev.kind, PROTO_EV_OPEN);
		layer *b = ss_server_body_new(&sv, server_salt, NOW);
		layer_buf down = {got, 0, big};
		assert_int_equal(b->ops->start(b, &down), 0);
		feed_above(b, wire, (size_t)r.used, w.len, 4099, &down);
		assert_int_equal(down.len, big);
		assert_memory_equal(got, data, big);
		/* and back: the header carries the first chunk, then chunks */
		layer_buf up = {wire, 0, 2 * big};
		send_all_up(b, data, big, &up);
		assert_int_equal(up.len, slen + SS2022_RESP_FIXED_LEN(slen) + SS_TAG_LEN + big +
		                             SS_TAG_LEN + 3 * (SS_LEN_BLOCK + SS_TAG_LEN));
		uint8_t scratch[1];
		layer_buf cdown = {scratch, 0, 0};
		layer_buf cup = {got, 0, big};
		memset(got, 0, big);
		for (size_t off = 0; off < up.len;) {
			size_t k = up.len - off > 1000 ? 1000 : up.len - off;
			ssize_t n = c->ops->from_below(c, wire + off, k, &cup, &cdown);
			assert_true(n >= 0);
			off += (size_t)n;
		}
		assert_int_equal(cup.len, big);
		assert_memory_equal(got, data, big);
		b->ops->free(b);
		c->ops->free(c);
		ss_server_free(&sv);
	}
	free(data);
	free(wire);
	free(got);
}

/* A sniffing shell's peek between the OPEN and the body: a 0xFFFF chunk
 * is larger than the peek holds, so the reader keeps what did not fit and
 * the body sends it after the peek's plaintext; every byte once, in order,
 * for every step. */
static void peek_then_body_with_full_chunks(void **state)
{
	(void)state;
	size_t big = 200000;
	uint8_t *data = malloc(big), *wire = malloc(2 * big), *got = malloc(big);
	for (size_t i = 0; i < big; i++)
		data[i] = (uint8_t)(i * 11 + 1);
	static const size_t steps[] = {1, 4099, 0};
	for (size_t i = 0; i < N_VECS; i++) {
		const vec *v = &VECS[i];
		ss_account a;
		account(&a, v);
		for (size_t st = 0; st < 3; st++) {
			layer *c = client_at(v, SALT, NOW);
			layer_buf w = {wire, 0, 2 * big};
			assert_int_equal(c->ops->start(c, &w), 0);
			send_all(c, data, big, &w);
			c->ops->free(c);
			ss_server sv;
			ss_server_init(&sv, &a, 1, NULL, NULL);
			result r = serve_at(&sv, wire, w.len, 0, NOW);
			assert_int_equal(r.ev.kind, PROTO_EV_OPEN);
			const uint8_t *plain = NULL;
			size_t plain_len = 0, off = (size_t)r.used;
			assert_int_equal(ss_server_peek(&sv, NULL, 0, &plain, &plain_len), 0);
			assert_int_equal(plain_len, 0); /* our client's header has padding only */
			for (;;) {
				size_t n = steps[st] == 0 || w.len - off < steps[st] ? w.len - off : steps[st];
				ssize_t used = ss_server_peek(&sv, wire + off, n, &plain, &plain_len);
				assert_true(used >= 0);
				if (used == 0)
					break;
				off += (size_t)used;
			}
			assert_int_equal(plain_len, SS_PEEK_MAX);
			assert_memory_equal(plain, data, SS_PEEK_MAX);
			layer *b = ss_server_body_new(&sv, server_salt, NOW);
			assert_non_null(b);
			layer_buf down = {got, 0, big};
			assert_int_equal(b->ops->start(b, &down), 0);
			feed_above(b, wire, off, w.len, 4099, &down);
			assert_int_equal(b->ops->from_above(b, NULL, 0, &down), 0);
			assert_int_equal(down.len, big);
			assert_memory_equal(got, data, big);
			b->ops->free(b);
			ss_server_free(&sv);
		}
	}
	free(data);
	free(wire);
	free(got);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(methods_and_keys),
		cmocka_unit_test(client_first_bytes_are_exact),
		cmocka_unit_test(client_reads_the_response),
		cmocka_unit_test(server_opens_the_request_and_answers_exactly),
		cmocka_unit_test(server_waits_on_every_truncation),
		cmocka_unit_test(server_refuses_every_changed_byte),
		cmocka_unit_test(server_keeps_the_time_window),
		cmocka_unit_test(server_refuses_a_replayed_salt),
		cmocka_unit_test(server_refuses_bad_headers),
		cmocka_unit_test(identity_client_bytes_are_exact),
		cmocka_unit_test(identity_keys_are_checked),
		cmocka_unit_test(identity_server_finds_the_user),
		cmocka_unit_test(identity_server_refuses_strangers),
		cmocka_unit_test(round_trip_with_full_chunks),
		cmocka_unit_test(peek_then_body_with_full_chunks),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}
