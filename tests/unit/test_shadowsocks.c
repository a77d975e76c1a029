/* test_shadowsocks.c - Shadowsocks AEAD: keys and first bytes against vectors computed apart (shadowsocks_vectors.h), the server core on every cut and truncation, corrupted tags, oversize lengths, wrong passwords, replays, round trips through the client layer and the server's body layer, UDP packets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proto/shadowsocks.h"
#include "proto/shadowsocks_server.h"
#include "shadowsocks_vectors.h"
#include "sstest.h"

#define NOW 1700000000

typedef struct vec {
	ss_method m;
	const uint8_t *key, *subkey, *first, *second, *packet;
	size_t first_len, second_len, packet_len;
} vec;

#define V(M, T)                                                                                   \
	{M,                  SSV_##T##_KEY,           SSV_##T##_SUBKEY,        SSV_##T##_FIRST,          \
	 SSV_##T##_SECOND,   SSV_##T##_PACKET,        sizeof SSV_##T##_FIRST, sizeof SSV_##T##_SECOND, \
	 sizeof SSV_##T##_PACKET}

static const vec VECS[] = {
	V(SS_METHOD_AES_128_GCM, AES_128_GCM),
	V(SS_METHOD_AES_256_GCM, AES_256_GCM),
	V(SS_METHOD_CHACHA20_POLY1305, CHACHA20_IETF_POLY1305),
};
#define N_VECS (sizeof VECS / sizeof VECS[0])

static void account(ss_account *a, ss_method m, const char *pw)
{
	assert_int_equal(ss_account_init(a, m, pw, strlen(pw)), 0);
}

/* ---- methods and keys ---- */

static void methods_and_keys(void **state)
{
	(void)state;
	ss_method m;
	assert_int_equal(ss_method_parse("aes-128-gcm", &m), 0);
	assert_int_equal(m, SS_METHOD_AES_128_GCM);
	assert_int_equal(ss_method_parse("chacha20-ietf-poly1305", &m), 0);
	assert_int_equal(m, SS_METHOD_CHACHA20_POLY1305);
	assert_int_equal(ss_method_parse("chacha20-poly1305", &m), -1);
	assert_int_equal(ss_method_parse("2022-blake3-aes-128-gcm", &m), 0);
	assert_int_equal(m, SS_METHOD_2022_AES_128_GCM);
	assert_int_equal(ss_method_parse(NULL, &m), -1);
	assert_string_equal(ss_method_name(SS_METHOD_AES_256_GCM), "aes-256-gcm");
	for (size_t i = 0; i < N_VECS; i++) {
		const vec *v = &VECS[i];
		size_t n = ss_key_len(v->m);
		assert_int_equal(n, v->m == SS_METHOD_AES_128_GCM ? 16 : 32);
		uint8_t key[SS_KEY_MAX], sub[SS_KEY_MAX];
		assert_int_equal(ss_master_key(v->m, SSV_PASSWORD, strlen(SSV_PASSWORD), key), 0);
		assert_memory_equal(key, v->key, n);
		assert_int_equal(ss_subkey(v->m, key, SALT, sub), 0);
		assert_memory_equal(sub, v->subkey, n);
	}
}

/* ---- the client layer ---- */

static layer *client(const vec *v)
{
	addr_dest d = example_com();
	layer *l = ss_client_new(v->m, v->key, NULL, &d, SALT, NOW, 0);
	assert_non_null(l);
	return l;
}

static void client_first_bytes_are_exact(void **state)
{
	(void)state;
	for (size_t i = 0; i < N_VECS; i++) {
		const vec *v = &VECS[i];
		layer *l = client(v);
		assert_client_sends(l, v->first, v->first_len, v->second, v->second_len);
	}
}

static void client_refuses_what_it_cannot_send(void **state)
{
	(void)state;
	addr_dest unset = {0};
	assert_null(ss_client_new(SS_METHOD_AES_128_GCM, VECS[0].key, NULL, &unset, SALT, NOW, 0));
	addr_dest d = example_com();
	assert_null(ss_client_new(SS_METHOD_COUNT_, VECS[0].key, NULL, &d, SALT, NOW, 0));
}

/* Server-side bytes for the client: salt, then a chunk of each of
 * payloads, sealed as a server would (ss_aead with the subkey of salt). */
static size_t server_bytes(const vec *v, const uint8_t *salt, const uint8_t *p, size_t len,
                           uint8_t *out)
{
	size_t n = ss_key_len(v->m), off = n;
	memcpy(out, salt, n);
	uint8_t sub[SS_KEY_MAX];
	ss_aead a;
	assert_int_equal(ss_subkey(v->m, v->key, salt, sub), 0);
	assert_int_equal(ss_aead_init(&a, v->m, sub, true), 0);
	for (size_t done = 0; done < len;) {
		size_t k = len - done < SS_CHUNK_PAYLOAD_MAX ? len - done : SS_CHUNK_PAYLOAD_MAX;
		ssize_t s = ss_chunk_seal(&a, p + done, k, out + off);
		assert_true(s > 0);
		off += (size_t)s;
		done += k;
	}
	ss_aead_free(&a);
	return off;
}

/* Feeds in[0, len) to l's from_below step bytes at a time, re-offering what
 * it left; returns the last error or 0, with what went up in up. */
static int client_read(layer *l, const uint8_t *in, size_t len, size_t step, uint8_t *up,
                       size_t cap, size_t *up_len)
{
	layer_buf u = {up, 0, cap}, down = {NULL, 0, 0};
	size_t off = 0, held = 0;
	while (off < len || held) {
		size_t n = step && len - off > step ? step : len - off;
		held += n;
		off += n;
		ssize_t r = l->ops->from_below(l, in + off - held, held, &u, &down);
		if (r < 0)
			return (int)r;
		held -= (size_t)r;
		if (r == 0 && off == len)
			break;
	}
	*up_len = u.len;
	return 0;
}

static void client_reads_the_server(void **state)
{
	(void)state;
	static const uint8_t rsalt[32] = {0xee, 0xdd, 0xcc};
	uint8_t *data = malloc(40000), *wire = malloc(41000), *up = malloc(40000);
	for (size_t i = 0; i < 40000; i++)
		data[i] = (uint8_t)(i * 7);
	for (size_t i = 0; i < N_VECS; i++) {
		const vec *v = &VECS[i];
		size_t wlen = server_bytes(v, rsalt, data, 40000, wire);
		size_t steps[] = {0, 1, 17, 1000};
		for (size_t s = 0; s < sizeof steps / sizeof steps[0]; s++) {
			layer *l = client(v);
			uint8_t first[256];
			layer_buf down = {first, 0, sizeof first};
			assert_int_equal(l->ops->start(l, &down), 0);
			size_t got = 0;
			assert_int_equal(client_read(l, wire, wlen, steps[s], up, 40000, &got), 0);
			assert_int_equal(got, 40000);
			assert_memory_equal(up, data, 40000);
			l->ops->free(l);
		}
		/* every byte after the salt changed fails the layer */
		size_t salt_len = ss_key_len(v->m);
		for (size_t k = salt_len; k < salt_len + SS_LEN_BLOCK + 8; k++) {
			wire[k] ^= 0x40;
			layer *l = client(v);
			uint8_t first[256];
			layer_buf down = {first, 0, sizeof first};
			assert_int_equal(l->ops->start(l, &down), 0);
			size_t got = 0;
			assert_int_equal(client_read(l, wire, wlen, 0, up, 40000, &got), LAYER_ERR_PROTO);
			assert_string_equal(l->ops->error(l), "shadowsocks: bad chunk");
			l->ops->free(l);
			wire[k] ^= 0x40;
		}
	}
	free(data);
	free(wire);
	free(up);
}

/* ---- the server core ---- */

static result serve(ss_server *s, const uint8_t *in, size_t len, size_t step)
{
	return serve_at(s, in, len, step, NOW);
}

static void server_opens_the_first_chunk(void **state)
{
	(void)state;
	for (size_t i = 0; i < N_VECS; i++) {
		const vec *v = &VECS[i];
		ss_account a;
		account(&a, v->m, SSV_PASSWORD);
		uint8_t in[512];
		memcpy(in, v->first, v->first_len);
		memcpy(in + v->first_len, v->second, v->second_len);
		size_t steps[] = {0, 1, 7};
		for (size_t s = 0; s < 3; s++) {
			ss_server sv;
			ss_server_init(&sv, &a, 1, NULL, NULL);
			result r = serve(&sv, in, v->first_len + v->second_len, steps[s]);
			assert_int_equal(r.ev.kind, PROTO_EV_OPEN);
			assert_int_equal(r.used, v->first_len);
			assert_int_equal(r.ev.user, 0);
			assert_int_equal(r.ev.cmd, PROTO_CMD_CONNECT);
			assert_int_equal(r.ev.dest.kind, ADDR_DOMAIN);
			assert_string_equal(r.ev.dest.u.domain.name, "example.com");
			assert_int_equal(r.ev.dest.port, 443);
			assert_int_equal(r.ev.dest.network, ADDR_TCP);
			/* the body layer opens the second chunk */
			layer *b = ss_server_body_new(&sv, SALT, NOW);
			assert_non_null(b);
			uint8_t down_buf[64];
			layer_buf down = {down_buf, 0, sizeof down_buf};
			assert_int_equal(b->ops->start(b, &down), 0);
			assert_int_equal(down.len, 0); /* nothing after the address */
			assert_int_equal(b->ops->from_above(b, v->second, v->second_len, &down),
			                 v->second_len);
			assert_int_equal(down.len, 5);
			assert_memory_equal(down_buf, "hello", 5);
			b->ops->free(b);
			/* decided: a further feed is a state error */
			proto_out out;
			proto_event ev;
			assert_int_equal(ss_server_feed(&sv, in, 1, NOW, &out, &ev), PROTO_ERR_STATE);
			assert_string_equal(ev.reason,
			                    "shadowsocks: called after the request was decided");
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
		account(&a, v->m, SSV_PASSWORD);
		assert_waits_on_every_truncation(&a, v->first, v->first_len, NOW);
	}
}

static void server_refuses_changed_bytes(void **state)
{
	(void)state;
	for (size_t i = 0; i < N_VECS; i++) {
		const vec *v = &VECS[i];
		ss_account a;
		account(&a, v->m, SSV_PASSWORD);
		size_t salt_len = ss_key_len(v->m);
		uint8_t in[256];
		for (size_t k = 0; k < v->first_len; k++) {
			memcpy(in, v->first, v->first_len);
			in[k] ^= 0x01;
			ss_server sv;
			ss_server_init(&sv, &a, 1, NULL, NULL);
			result r = serve(&sv, in, v->first_len, 0);
			assert_int_equal(r.ev.kind, PROTO_EV_CLOSE);
			assert_int_equal(r.used, 0);
			/* salt or length: no key opens it; the payload: a bad chunk */
			assert_string_equal(r.ev.reason, k < salt_len + SS_LEN_BLOCK
			                                         ? AUTH
			                                         : "shadowsocks: bad chunk");
			ss_server_free(&sv);
		}
	}
}

static void server_refuses_a_wrong_password(void **state)
{
	(void)state;
	for (size_t i = 0; i < N_VECS; i++) {
		const vec *v = &VECS[i];
		ss_account wrong;
		account(&wrong, v->m, "wrong horse battery staple");
		ss_server sv;
		ss_server_init(&sv, &wrong, 1, NULL, NULL);
		result r = serve(&sv, v->first, v->first_len, 1);
		assert_int_equal(r.ev.kind, PROTO_EV_CLOSE);
		assert_string_equal(r.ev.reason, AUTH);
		ss_server_free(&sv);
		/* no users: the same */
		ss_server_init(&sv, NULL, 0, NULL, NULL);
		r = serve(&sv, v->first, v->first_len, 0);
		assert_string_equal(r.ev.reason, AUTH);
		ss_server_free(&sv);
	}
}

static void server_tries_every_user(void **state)
{
	(void)state;
	/* users of other passwords and other methods before the right one */
	ss_account users[4];
	account(&users[0], SS_METHOD_AES_256_GCM, "a");
	account(&users[1], SS_METHOD_AES_128_GCM, "b");
	account(&users[2], SS_METHOD_CHACHA20_POLY1305, SSV_PASSWORD);
	account(&users[3], SS_METHOD_AES_128_GCM, SSV_PASSWORD);
	ss_server sv;
	ss_server_init(&sv, users, 4, NULL, NULL);
	result r = serve(&sv, VECS[0].first, VECS[0].first_len, 1);
	assert_int_equal(r.ev.kind, PROTO_EV_OPEN);
	assert_int_equal(r.ev.user, 3);
	ss_server_free(&sv);
	ss_server_init(&sv, users, 4, NULL, NULL);
	r = serve(&sv, VECS[2].first, VECS[2].first_len, 0);
	assert_int_equal(r.ev.user, 2);
	ss_server_free(&sv);
}

/* A first chunk sealed here: salt SALT, length len2 as given, payload p. */
static size_t forge(const vec *v, uint16_t len2, const uint8_t *p, size_t plen, uint8_t *out)
{
	size_t n = ss_key_len(v->m);
	uint8_t sub[SS_KEY_MAX], l2[2] = {(uint8_t)(len2 >> 8), (uint8_t)len2};
	ss_aead a;
	assert_int_equal(ss_subkey(v->m, v->key, SALT, sub), 0);
	assert_int_equal(ss_aead_init(&a, v->m, sub, true), 0);
	memcpy(out, SALT, n);
	assert_int_equal(ss_aead_seal(&a, l2, 2, out + n), 0);
	if (plen)
		assert_int_equal(ss_aead_seal(&a, p, plen, out + n + SS_LEN_BLOCK), 0);
	ss_aead_free(&a);
	return n + SS_LEN_BLOCK + (plen ? plen + SS_TAG_LEN : 0);
}

static void server_refuses_bad_lengths_and_addresses(void **state)
{
	(void)state;
	const vec *v = &VECS[1];
	ss_account a;
	account(&a, v->m, SSV_PASSWORD);
	uint8_t in[512];
	static const struct {
		uint16_t len2;
		const char *p;
		size_t plen;
		const char *why;
	} cases[] = {
		{0x4000, "", 0, "shadowsocks: chunk length out of bounds"},
		{0xffff, "", 0, "shadowsocks: chunk length out of bounds"},
		{0, "", 0, "shadowsocks: chunk length out of bounds"},
		{3, "\x01\x7f\x00", 3, "shadowsocks: the address does not fit the first chunk"},
		{7, "\x05\x7f\x00\x00\x01\x00\x50", 7, "shadowsocks: address type not supported"},
		{4, "\x03\x00\x00\x50", 4, "shadowsocks: empty or malformed domain name"},
		{5, "\x03\x01\x00\x00\x50", 5, "shadowsocks: empty or malformed domain name"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		size_t n = forge(v, cases[i].len2, (const uint8_t *)cases[i].p, cases[i].plen, in);
		ss_server sv;
		ss_server_init(&sv, &a, 1, NULL, NULL);
		result r = serve(&sv, in, n, 0);
		assert_int_equal(r.ev.kind, PROTO_EV_CLOSE);
		assert_string_equal(r.ev.reason, cases[i].why);
		ss_server_free(&sv);
	}
	/* an IPv4 target with bytes after it: those go down first */
	size_t n = forge(v, 10, (const uint8_t *)"\x01\x7f\x00\x00\x01\x00\x50GET", 10, in);
	ss_server sv;
	ss_server_init(&sv, &a, 1, NULL, NULL);
	result r = serve(&sv, in, n, 0);
	assert_int_equal(r.ev.kind, PROTO_EV_OPEN);
	assert_int_equal(r.ev.dest.kind, ADDR_IPV4);
	assert_int_equal(r.ev.dest.port, 80);
	layer *b = ss_server_body_new(&sv, SALT, NOW);
	uint8_t buf[8];
	layer_buf down = {buf, 0, 2};
	assert_int_equal(b->ops->start(b, &down), 0);
	assert_int_equal(down.len, 2); /* what fits; the rest on the next pump */
	down.cap = sizeof buf;
	assert_int_equal(b->ops->from_above(b, NULL, 0, &down), 0);
	assert_int_equal(down.len, 3);
	assert_memory_equal(buf, "GET", 3);
	b->ops->free(b);
	ss_server_free(&sv);
}

static void server_refuses_a_replayed_salt(void **state)
{
	(void)state;
	ss_replay *f = calloc(1, sizeof *f);
	ss_account a;
	account(&a, VECS[0].m, SSV_PASSWORD);
	ss_server sv;
	ss_server_init(&sv, &a, 1, replay_add, f);
	assert_int_equal(serve(&sv, VECS[0].first, VECS[0].first_len, 0).ev.kind, PROTO_EV_OPEN);
	ss_server_free(&sv);
	ss_server_init(&sv, &a, 1, replay_add, f);
	result r = serve(&sv, VECS[0].first, VECS[0].first_len, 0);
	assert_int_equal(r.ev.kind, PROTO_EV_CLOSE);
	assert_string_equal(r.ev.reason, "shadowsocks: replayed salt");
	ss_server_free(&sv);
	/* the filter itself: remembered for the window, then forgotten */
	assert_int_equal(ss_replay_add(f, SALT, 16, NOW + SS_REPLAY_WINDOW), SS_REPLAY_SEEN);
	assert_int_equal(ss_replay_add(f, SALT, 16, NOW + SS_REPLAY_WINDOW + 1), SS_REPLAY_NEW);
	/* a 32-byte salt is not a 16-byte one with the same start */
	assert_int_equal(ss_replay_add(f, SALT, 32, NOW), SS_REPLAY_NEW);
	/* past the probe bound the filter is full, and refuses */
	uint8_t s[32] = {0};
	for (int k = 0; k < SS_REPLAY_PROBES; k++) {
		s[31] = (uint8_t)(k + 1); /* the same first four bytes: one probe run */
		s[0] = 0x55;
		assert_int_equal(ss_replay_add(f, s, 32, NOW), SS_REPLAY_NEW);
	}
	s[31] = 0xff;
	assert_int_equal(ss_replay_add(f, s, 32, NOW), SS_REPLAY_FULL);
	free(f);
}

/* ---- round trips ---- */

static void round_trip_through_client_and_server(void **state)
{
	(void)state;
	size_t big = 100000;
	uint8_t *data = malloc(big), *wire = malloc(2 * big), *got = malloc(big);
	for (size_t i = 0; i < big; i++)
		data[i] = (uint8_t)(i * 13 + 5);
	for (size_t i = 0; i < N_VECS; i++) {
		const vec *v = &VECS[i];
		ss_account a;
		account(&a, v->m, SSV_PASSWORD);
		layer *c = client(v);
		layer_buf w = {wire, 0, 2 * big};
		assert_int_equal(c->ops->start(c, &w), 0);
		send_all(c, data, big, &w);
		/* the server: the first chunk, then the body */
		ss_server sv;
		ss_server_init(&sv, &a, 1, NULL, NULL);
		result r = serve(&sv, wire, w.len, 0);
		assert_int_equal(r.ev.kind, PROTO_EV_OPEN);
		uint8_t our_salt[32];
		memset(our_salt, 0x33, sizeof our_salt);
		layer *b = ss_server_body_new(&sv, our_salt, NOW);
		layer_buf down = {got, 0, big};
		assert_int_equal(b->ops->start(b, &down), 0);
		feed_above(b, wire, (size_t)r.used, w.len, 333, &down);
		assert_int_equal(down.len, big);
		assert_memory_equal(got, data, big);
		/* and back: the body seals, the client opens */
		layer_buf up = {wire, 0, 2 * big};
		send_all_up(b, data, big, &up);
		size_t got_len = 0;
		assert_int_equal(client_read(c, wire, up.len, 4096, got, big, &got_len), 0);
		assert_int_equal(got_len, big);
		assert_memory_equal(got, data, big);
		/* a corrupted chunk from the client fails the body */
		uint8_t bad[SS_CHUNK_MAX];
		layer_buf bw = {bad, 0, sizeof bad};
		assert_int_equal(c->ops->from_above(c, (const uint8_t *)"x", 1, &bw), 1);
		bad[bw.len - 1] ^= 1;
		down = (layer_buf){got, 0, big};
		assert_int_equal(b->ops->from_above(b, bad, bw.len, &down), LAYER_ERR_PROTO);
		assert_string_equal(b->ops->error(b), "shadowsocks: bad chunk");
		b->ops->free(b);
		c->ops->free(c);
		ss_server_free(&sv);
	}
	free(data);
	free(wire);
	free(got);
}

/* ---- the peek a sniffing shell runs between the OPEN and the body ---- */

/* Peeks at wire[*off, len), step bytes a call (0: all at once), until the
 * peek holds SS_PEEK_MAX bytes or all is consumed; returns the plaintext
 * held and moves *off past what was consumed. */
static size_t peek_all(ss_server *sv, const uint8_t *wire, size_t *off, size_t len, size_t step,
                       const uint8_t **plain)
{
	size_t plain_len = 0;
	assert_int_equal(ss_server_peek(sv, NULL, 0, plain, &plain_len), 0);
	while (*off < len) {
		size_t n = step == 0 || len - *off < step ? len - *off : step;
		ssize_t used = ss_server_peek(sv, wire + *off, n, plain, &plain_len);
		assert_true(used >= 0);
		if (used == 0) {
			assert_int_equal(plain_len, SS_PEEK_MAX);
			break;
		}
		*off += (size_t)used;
	}
	return plain_len;
}

static void peek_then_body_on_every_cut(void **state)
{
	(void)state;
	size_t big = 100000;
	uint8_t *data = malloc(big), *wire = malloc(2 * big), *got = malloc(big);
	for (size_t i = 0; i < big; i++)
		data[i] = (uint8_t)(i * 7 + 3);
	static const size_t sizes[] = {100, SS_PEEK_MAX, 100000};
	static const size_t steps[] = {1, 333, 0};
	for (size_t i = 0; i < N_VECS; i++) {
		const vec *v = &VECS[i];
		ss_account a;
		account(&a, v->m, SSV_PASSWORD);
		for (size_t z = 0; z < 3; z++) {
			for (size_t s = 0; s < 3; s++) {
				size_t size = sizes[z];
				layer *c = client(v);
				layer_buf w = {wire, 0, 2 * big};
				assert_int_equal(c->ops->start(c, &w), 0);
				send_all(c, data, size, &w);
				c->ops->free(c);
				ss_server sv;
				ss_server_init(&sv, &a, 1, NULL, NULL);
				const uint8_t *plain = NULL;
				size_t plain_len = 0;
				/* not opened yet */
				assert_int_equal(ss_server_peek(&sv, wire, 1, &plain, &plain_len),
				                 PROTO_ERR_STATE);
				result r = serve(&sv, wire, w.len, 0);
				assert_int_equal(r.ev.kind, PROTO_EV_OPEN);
				size_t off = (size_t)r.used;
				plain_len = peek_all(&sv, wire, &off, w.len, steps[s], &plain);
				size_t want = size < SS_PEEK_MAX ? size : SS_PEEK_MAX;
				assert_int_equal(plain_len, want);
				assert_memory_equal(plain, data, want);
				/* the body sends the plaintext first, then opens on */
				uint8_t our_salt[32] = {0x44};
				layer *b = ss_server_body_new(&sv, our_salt, NOW);
				assert_non_null(b);
				layer_buf down = {got, 0, big};
				assert_int_equal(b->ops->start(b, &down), 0);
				feed_above(b, wire, off, w.len, 333, &down);
				assert_int_equal(b->ops->from_above(b, NULL, 0, &down), 0);
				assert_int_equal(down.len, size);
				assert_memory_equal(got, data, size);
				b->ops->free(b);
				ss_server_free(&sv);
			}
		}
	}
	free(data);
	free(wire);
	free(got);
}

static void peek_reads_the_first_chunk_rest_and_refuses_bad_chunks(void **state)
{
	(void)state;
	const vec *v = &VECS[0];
	ss_account a;
	account(&a, v->m, SSV_PASSWORD);
	uint8_t in[512];
	/* payload in the first chunk (as ss-libev may send): the peek gives it
	 * before any more bytes come, and the body sends it once */
	size_t n = forge(v, 10, (const uint8_t *)"\x01\x7f\x00\x00\x01\x00\x50GET", 10, in);
	ss_server sv;
	ss_server_init(&sv, &a, 1, NULL, NULL);
	result r = serve(&sv, in, n, 0);
	assert_int_equal(r.ev.kind, PROTO_EV_OPEN);
	const uint8_t *plain = NULL;
	size_t plain_len = 0;
	assert_int_equal(ss_server_peek(&sv, NULL, 0, &plain, &plain_len), 0);
	assert_int_equal(plain_len, 3);
	assert_memory_equal(plain, "GET", 3);
	layer *b = ss_server_body_new(&sv, SALT, NOW);
	assert_non_null(b);
	uint8_t buf[8];
	layer_buf down = {buf, 0, 2};
	assert_int_equal(b->ops->start(b, &down), 0);
	assert_int_equal(down.len, 2); /* what fits; the rest on the next pump */
	down.cap = sizeof buf;
	assert_int_equal(b->ops->from_above(b, NULL, 0, &down), 0);
	assert_int_equal(down.len, 3);
	assert_memory_equal(buf, "GET", 3);
	b->ops->free(b);
	ss_server_free(&sv);
	/* a chunk whose tag does not match, or whose length is out of bounds */
	uint8_t wire[256];
	for (int k = 0; k < 2; k++) {
		layer *c = client(v);
		layer_buf w = {wire, 0, sizeof wire};
		assert_int_equal(c->ops->start(c, &w), 0);
		send_all(c, (const uint8_t *)"hello", 5, &w);
		c->ops->free(c);
		ss_server_init(&sv, &a, 1, NULL, NULL);
		r = serve(&sv, wire, w.len, 0);
		assert_int_equal(r.ev.kind, PROTO_EV_OPEN);
		wire[w.len - (k ? 1 : 5 + SS_TAG_LEN + 1)] ^= 1;
		assert_int_equal(ss_server_peek(&sv, wire + r.used, w.len - (size_t)r.used, &plain,
		                                &plain_len),
		                 PROTO_ERR_MALFORMED);
		ss_server_free(&sv);
	}
}

static void oversize_length_fails_the_layers(void **state)
{
	(void)state;
	const vec *v = &VECS[2];
	/* to the client: a server salt, then a length of 0x4000 */
	uint8_t in[128];
	size_t n = forge(v, 0x4000, NULL, 0, in);
	layer *c = client(v);
	uint8_t first[256];
	layer_buf down = {first, 0, sizeof first};
	assert_int_equal(c->ops->start(c, &down), 0);
	size_t got = 0;
	assert_int_equal(client_read(c, in, n, 0, first, sizeof first, &got), LAYER_ERR_PROTO);
	assert_string_equal(c->ops->error(c), "shadowsocks: chunk length out of bounds");
	c->ops->free(c);
}

/* The chunk reader both layers use: one byte at a time or all at once,
 * into room of 1 byte or plenty, the payloads come out whole and in order;
 * a changed byte and an oversize length are its two errors. */
static void reader_opens_chunks_on_every_cut(void **state)
{
	(void)state;
	const vec *v = &VECS[0];
	uint8_t plain[1000], wire[1200], rbuf[SS_CHUNK_PAYLOAD_MAX + SS_TAG_LEN], got[1000];
	for (size_t i = 0; i < sizeof plain; i++)
		plain[i] = (uint8_t)(i * 7);
	/* two chunks, 5 and 995 bytes, after a salt the reader does not read */
	size_t slen = ss_key_len(v->m), n = slen;
	uint8_t tsub[SS_KEY_MAX];
	ss_aead tx;
	assert_int_equal(ss_subkey(v->m, v->key, SALT, tsub), 0);
	assert_int_equal(ss_aead_init(&tx, v->m, tsub, true), 0);
	ssize_t w = ss_chunk_seal(&tx, plain, 5, wire + n);
	assert_true(w > 0);
	n += (size_t)w;
	w = ss_chunk_seal(&tx, plain + 5, sizeof plain - 5, wire + n);
	assert_true(w > 0);
	n += (size_t)w;
	ss_aead_free(&tx);
	static const size_t steps[] = {1, 0};
	static const size_t rooms[] = {1, sizeof got};
	for (size_t s = 0; s < 2; s++)
		for (size_t r = 0; r < 2; r++) {
			uint8_t sub[SS_KEY_MAX];
			ss_aead a;
			assert_int_equal(ss_subkey(v->m, v->key, SALT, sub), 0);
			assert_int_equal(ss_aead_init(&a, v->m, sub, false), 0);
			ss_reader rd = {.rbuf = rbuf};
			layer_buf out = {got, 0, 0};
			size_t off = slen, held = 0;
			while (off < n || held || rd.out_off < rd.out_len) {
				size_t k = steps[s] && n - off > steps[s] ? steps[s] : n - off;
				held += k;
				off += k;
				out.cap = out.len + rooms[r] < sizeof got ? out.len + rooms[r] : sizeof got;
				ssize_t used = ss_reader_feed(&rd, &a, wire + off - held, held, &out);
				assert_true(used >= 0 && (size_t)used <= held);
				held -= (size_t)used;
			}
			assert_int_equal(out.len, sizeof plain);
			assert_memory_equal(got, plain, sizeof plain);
			ss_aead_free(&a);
		}
	/* a changed tag byte: MALFORMED; a length over the bound: TOO_BIG */
	wire[slen + SS_LEN_BLOCK + 5] ^= 1;
	uint8_t sub[SS_KEY_MAX];
	ss_aead a;
	assert_int_equal(ss_subkey(v->m, v->key, SALT, sub), 0);
	assert_int_equal(ss_aead_init(&a, v->m, sub, false), 0);
	ss_reader rd = {.rbuf = rbuf};
	layer_buf out = {got, 0, sizeof got};
	assert_int_equal(ss_reader_feed(&rd, &a, wire + slen, n - slen, &out), PROTO_ERR_MALFORMED);
	ss_aead_free(&a);
	n = forge(&VECS[2], 0x4000, NULL, 0, wire);
	assert_int_equal(ss_subkey(VECS[2].m, VECS[2].key, wire, sub), 0);
	assert_int_equal(ss_aead_init(&a, VECS[2].m, sub, false), 0);
	rd = (ss_reader){.rbuf = rbuf};
	slen = ss_key_len(VECS[2].m);
	assert_int_equal(ss_reader_feed(&rd, &a, wire + slen, n - slen, &out), PROTO_ERR_TOO_BIG);
	ss_aead_free(&a);
}

/* ---- UDP packets ---- */

static void packets(void **state)
{
	(void)state;
	static const uint8_t plain[] = "\x01\x7f\x00\x00\x01\x00\x35"
	                               "dns?";
	for (size_t i = 0; i < N_VECS; i++) {
		const vec *v = &VECS[i];
		uint8_t usalt[32], out[256], back[256];
		for (int k = 0; k < 32; k++)
			usalt[k] = (uint8_t)(0xa0 + k);
		ssize_t n = ss_packet_seal(v->m, v->key, usalt, plain, sizeof plain - 1, out, sizeof out);
		assert_int_equal(n, v->packet_len);
		assert_memory_equal(out, v->packet, v->packet_len);
		assert_int_equal(ss_packet_open(v->m, v->key, v->packet, v->packet_len, back, sizeof back),
		                 sizeof plain - 1);
		assert_memory_equal(back, plain, sizeof plain - 1);
		/* every truncation and every changed byte is refused */
		for (size_t cut = 0; cut < v->packet_len; cut++)
			assert_int_equal(ss_packet_open(v->m, v->key, v->packet, cut, back, sizeof back),
			                 PROTO_ERR_MALFORMED);
		for (size_t k = 0; k < v->packet_len; k++) {
			memcpy(out, v->packet, v->packet_len);
			out[k] ^= 0x80;
			assert_int_equal(ss_packet_open(v->m, v->key, out, v->packet_len, back, sizeof back),
			                 PROTO_ERR_MALFORMED);
		}
		assert_int_equal(ss_packet_seal(v->m, v->key, usalt, plain, sizeof plain - 1, out,
		                                v->packet_len - 1),
		                 PROTO_ERR_TOO_BIG);
	}
}

/* The server's side of UDP: trial decryption across users, the hint
 * first, 2022 users skipped, the target read. */
static void server_opens_packets_of_every_user(void **state)
{
	(void)state;
	ss_account users[N_VECS + 2];
	uint8_t psk[16] = {0};
	users[0] = (ss_account){.method = SS_METHOD_2022_AES_128_GCM};
	memcpy(users[0].key, psk, sizeof psk);
	account(&users[1], SS_METHOD_AES_256_GCM, "another password");
	for (size_t i = 0; i < N_VECS; i++)
		account(&users[2 + i], VECS[i].m, SSV_PASSWORD);
	for (size_t i = 0; i < N_VECS; i++) {
		const vec *v = &VECS[i];
		for (int hint = -1; hint < (int)(N_VECS + 2); hint++) {
			uint8_t out[256];
			int user = -7;
			addr_dest d = {0};
			size_t off = 0;
			ssize_t n = ss_server_packet_open(users, N_VECS + 2, hint, v->packet, v->packet_len,
			                                  out, sizeof out, &user, &d, &off);
			assert_int_equal(n, 4);
			assert_int_equal(user, 2 + (int)i);
			assert_int_equal(off, 7);
			assert_memory_equal(out + off, "dns?", 4);
			char text[ADDR_TEXT_MAX];
			addr_dest_format(&d, text, sizeof text);
			assert_string_equal(text, "127.0.0.1:53");
			assert_int_equal(d.network, ADDR_UDP);
		}
		/* no user of its method and password: dropped */
		int user = -7;
		addr_dest d = {0};
		size_t off = 0;
		uint8_t out[256];
		assert_int_equal(ss_server_packet_open(users, 2, 0, v->packet, v->packet_len, out,
		                                       sizeof out, &user, &d, &off),
		                 PROTO_ERR_MALFORMED);
		assert_int_equal(user, -7);
		assert_int_equal(ss_server_packet_open(users, N_VECS + 2, -1, v->packet, v->packet_len,
		                                       out, 10, &user, &d, &off),
		                 PROTO_ERR_TOO_BIG);
	}
	/* it opens, but its target is no address: ATYP 9, then a cut IPv4 one */
	static const uint8_t bad[][8] = {"\x09\x7f\x00\x00\x01\x00\x35", "\x01\x7f\x00"};
	static const size_t bad_len[] = {7, 3};
	for (size_t k = 0; k < 2; k++) {
		uint8_t salt[16] = {1}, pkt[64], out[64];
		ssize_t n = ss_packet_seal(VECS[0].m, users[2].key, salt, bad[k], bad_len[k], pkt,
		                           sizeof pkt);
		assert_true(n > 0);
		int user = -7;
		addr_dest d = {0};
		size_t off = 0;
		assert_int_equal(ss_server_packet_open(users, N_VECS + 2, -1, pkt, (size_t)n, out,
		                                       sizeof out, &user, &d, &off),
		                 SS_PACKET_ERR_ADDRESS);
		assert_int_equal(user, 2);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(methods_and_keys),
		cmocka_unit_test(client_first_bytes_are_exact),
		cmocka_unit_test(client_refuses_what_it_cannot_send),
		cmocka_unit_test(client_reads_the_server),
		cmocka_unit_test(server_opens_the_first_chunk),
		cmocka_unit_test(server_waits_on_every_truncation),
		cmocka_unit_test(server_refuses_changed_bytes),
		cmocka_unit_test(server_refuses_a_wrong_password),
		cmocka_unit_test(server_tries_every_user),
		cmocka_unit_test(server_refuses_bad_lengths_and_addresses),
		cmocka_unit_test(server_refuses_a_replayed_salt),
		cmocka_unit_test(round_trip_through_client_and_server),
		cmocka_unit_test(peek_then_body_on_every_cut),
		cmocka_unit_test(peek_reads_the_first_chunk_rest_and_refuses_bad_chunks),
		cmocka_unit_test(oversize_length_fails_the_layers),
		cmocka_unit_test(reader_opens_chunks_on_every_cut),
		cmocka_unit_test(packets),
		cmocka_unit_test(server_opens_packets_of_every_user),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
