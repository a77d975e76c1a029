/* shadowsocks_server.c - the Shadowsocks server core (AEAD-2017 and 2022): accounts, the salt replay filter, trial decryption of the first length (2022: the fixed header), the first chunk (2022: the variable header) and its target. */
#include "proto/shadowsocks_server.h"

#include <stdlib.h>
#include <string.h>

#include "crypto/ossl.h"

#include "base/bytes.h"
#include "proto/socks_addr.h"

enum text {
	T_AUTH,
	T_REPLAY,
	T_FULL,
	T_LENGTH,
	T_CHUNK,
	T_ADDRESS_TYPE,
	T_DOMAIN,
	T_ADDRESS_SPLIT,
	T_TYPE,
	T_TIME,
	T_PADDING,
	T_EMPTY,
	T_MEMORY,
	T_STATE,
	T_IDENTITY,
	T_COUNT_,
};

static const char *const TEXTS[T_COUNT_] = {
	[T_AUTH] = "shadowsocks: authentication failed (no user's key opens the first chunk)",
	[T_REPLAY] = "shadowsocks: replayed salt",
	[T_FULL] = "shadowsocks: replay filter full",
	[T_LENGTH] = "shadowsocks: chunk length out of bounds",
	[T_CHUNK] = "shadowsocks: bad chunk",
	[T_ADDRESS_TYPE] = "shadowsocks: address type not supported",
	[T_DOMAIN] = "shadowsocks: empty or malformed domain name",
	[T_ADDRESS_SPLIT] = "shadowsocks: the address does not fit the first chunk",
	[T_TYPE] = "shadowsocks: not a request header (type is not 0)",
	[T_TIME] = "shadowsocks: request timestamp out of the window",
	[T_PADDING] = "shadowsocks: the padding runs past the header",
	[T_EMPTY] = "shadowsocks: a request header with neither payload nor padding",
	[T_MEMORY] = "shadowsocks: out of memory",
	[T_STATE] = "shadowsocks: called after the request was decided",
	[T_IDENTITY] = "shadowsocks: unknown identity (no user's key hash matches the identity header)",
};

int ss_account_init(ss_account *a, ss_method m, const char *password, size_t len)
{
	*a = (ss_account){.method = m};
	if (ss_master_key(m, password, len, a->key))
		return -1;
	if (ss_method_is_2022(m))
		ss2022_psk_hash(a->key, ss_key_len(m), a->hash);
	return 0;
}

int ss_account_set_identity(ss_account *a, const char *ipsk, size_t len)
{
	if (!ss_method_has_identity(a->method))
		return SS_KEYS_ERR_METHOD;
	if (ss_master_key(a->method, ipsk, len, a->ipsk))
		return SS_KEYS_ERR_PSK;
	a->identity = true;
	return 0;
}

/* ---- replay filter ---- */

int ss_replay_add(ss_replay *r, const uint8_t *salt, size_t len, int64_t now)
{
	uint8_t key[SS_KEY_MAX] = {0};
	memcpy(key, salt, len < SS_KEY_MAX ? len : SS_KEY_MAX);
	/* random bytes: any four are a uniform hash */
	size_t i = (size_t)bytes_get32(key) % SS_REPLAY_SLOTS;
	ss_replay_slot *free_slot = NULL;
	for (size_t k = 0; k < SS_REPLAY_PROBES; k++) {
		ss_replay_slot *s = &r->slot[(i + k) % SS_REPLAY_SLOTS];
		bool live = s->expiry != 0 && s->expiry >= now;
		if (live && memcmp(s->salt, key, SS_KEY_MAX) == 0)
			return SS_REPLAY_SEEN;
		if (!live && !free_slot)
			free_slot = s;
	}
	if (!free_slot)
		return SS_REPLAY_FULL;
	memcpy(free_slot->salt, key, SS_KEY_MAX);
	free_slot->expiry = now + SS_REPLAY_WINDOW > 0 ? now + SS_REPLAY_WINDOW : 1;
	return SS_REPLAY_NEW;
}

/* ---- the core ---- */

/* What a step returns for a refusal: feed turns it into 0 with ev CLOSE. */
#define REFUSE (-1000)

void ss_server_init(ss_server *s, const ss_account *users, size_t n, ss_replay_fn replay,
                    void *replay_ud)
{
	*s = (ss_server){
		.users = users,
		.n_users = n,
		.replay = replay,
		.replay_ud = replay_ud,
		.state = SS_SV_SALT,
		.user = -1,
	};
}

void ss_server_free(ss_server *s)
{
	ss_aead_free(&s->rx);
	if (s->first) {
		OPENSSL_cleanse(s->first, s->first_cap);
		free(s->first);
	}
	s->first = NULL;
	if (s->plain) {
		OPENSSL_cleanse(s->plain, SS_PEEK_MAX);
		free(s->plain);
	}
	s->plain = NULL;
	s->plain_len = 0;
}

/* Opens the sealed start after the salt with s->rx, keyed for a: the first
 * length (AEAD-2017) or the fixed header (2022, checked at now). Returns
 * the first chunk's length, or PROTO_ERR_MALFORMED (the tag: not this
 * user) or another negative with *why. */
static ssize_t open_start(ss_server *s, const ss_account *a, const uint8_t *in, int64_t now,
                          enum text *why)
{
	ssize_t n = ss_method_is_2022(a->method) ? ss2022_request_open_fixed(&s->rx, in, now)
	                                         : ss_chunk_open_len(&s->rx, in);
	*why = n == SS2022_ERR_TYPE ? T_TYPE : n == SS2022_ERR_TIME ? T_TIME : T_LENGTH;
	return n;
}

/* What follows the salt before the first chunk: a sealed length, or
 * 2022's sealed fixed header. */
static size_t start_len(ss_method m)
{
	return ss_method_is_2022(m) ? SS2022_REQ_FIXED_SEALED : SS_LEN_BLOCK;
}

/* Trial decryption: the first user whose subkey of the salt at in opens
 * the sealed start after it. Returns the bytes used (salt and start) with
 * *plen the first chunk's length, 0 for more, or REFUSE with *why. */
static ssize_t trial(ss_server *s, const uint8_t *in, size_t len, int64_t now, ssize_t *plen,
                     enum text *why)
{
	bool short_ = false;
	size_t slen = 0, start = 0;
	enum text bad_start = T_LENGTH;
	for (size_t i = 0; i < s->n_users && s->user < 0; i++) {
		const ss_account *a = &s->users[i];
		slen = ss_key_len(a->method);
		start = start_len(a->method);
		if (len < slen + start) {
			short_ = true; /* this user's salt is longer than what came */
			continue;
		}
		uint8_t sub[SS_KEY_MAX];
		int bad = ss_subkey(a->method, a->key, in, sub) ||
		          ss_aead_init(&s->rx, a->method, sub, false);
		OPENSSL_cleanse(sub, sizeof sub);
		if (bad) {
			*why = T_MEMORY;
			return REFUSE;
		}
		*plen = open_start(s, a, in + slen, now, &bad_start);
		if (*plen == PROTO_ERR_MALFORMED) {
			ss_aead_free(&s->rx);
			continue;
		}
		s->user = (int)i;
	}
	if (s->user < 0) {
		*why = T_AUTH;
		return short_ ? 0 : REFUSE;
	}
	*why = bad_start; /* if the start is one no client of ours sends */
	return (ssize_t)(slen + start);
}

/* SIP022-2: the identity header after the salt names the user; that
 * user's subkey must open the fixed header. As trial. */
static ssize_t identify(ss_server *s, const uint8_t *in, size_t len, int64_t now, ssize_t *plen,
                        enum text *why)
{
	const ss_account *first = &s->users[0];
	size_t slen = ss_key_len(first->method), start = SS2022_IDENTITY_LEN + SS2022_REQ_FIXED_SEALED;
	if (len < slen + start)
		return 0;
	uint8_t hash[SS2022_IDENTITY_LEN];
	if (ss2022_identity_open(first->method, first->ipsk, in, in + slen, hash)) {
		*why = T_MEMORY;
		return REFUSE;
	}
	/* every user compared, so the time taken does not say which matched */
	int who = -1;
	for (size_t i = 0; i < s->n_users; i++)
		if (CRYPTO_memcmp(s->users[i].hash, hash, sizeof hash) == 0 && who < 0)
			who = (int)i;
	if (who < 0) {
		*why = T_IDENTITY;
		return REFUSE;
	}
	const ss_account *a = &s->users[who];
	uint8_t sub[SS_KEY_MAX];
	int bad = ss_subkey(a->method, a->key, in, sub) || ss_aead_init(&s->rx, a->method, sub, false);
	OPENSSL_cleanse(sub, sizeof sub);
	if (bad) {
		*why = T_MEMORY;
		return REFUSE;
	}
	*plen = open_start(s, a, in + slen + SS2022_IDENTITY_LEN, now, why);
	if (*plen == PROTO_ERR_MALFORMED) {
		*why = T_AUTH;
		return REFUSE;
	}
	s->user = who;
	return (ssize_t)(slen + start);
}

/* Finds the user (trial or identify), then checks the start and the
 * salt. Returns the bytes used, 0 for more, or REFUSE with *why. */
static ssize_t authenticate(ss_server *s, const uint8_t *in, size_t len, int64_t now,
                            enum text *why)
{
	ssize_t plen = 0;
	bool eih = s->n_users && s->users[0].identity;
	ssize_t used = eih ? identify(s, in, len, now, &plen, why) : trial(s, in, len, now, &plen, why);
	if (used <= 0)
		return used;
	if (plen < 0)
		return REFUSE; /* the right key, a start no client of ours sends: *why says */
	size_t slen = ss_key_len(s->users[s->user].method);
	if (s->replay) {
		int r = s->replay(s->replay_ud, in, slen, now);
		if (r != SS_REPLAY_NEW) {
			*why = r == SS_REPLAY_SEEN ? T_REPLAY : T_FULL;
			return REFUSE;
		}
	}
	memcpy(s->salt, in, slen); /* 2022's response names it */
	s->first_len = (size_t)plen;
	s->first_cap = ss_chunk_max(s->users[s->user].method) + SS_TAG_LEN;
	s->first = malloc(s->first_cap);
	if (!s->first) {
		*why = T_MEMORY;
		return REFUSE;
	}
	return used;
}

/* The first chunk is whole in s->first: open it and read the target. 0,
 * or REFUSE with *why. */
static int first_done(ss_server *s, proto_event *ev, enum text *why)
{
	if (ss_chunk_open_payload(&s->rx, s->first, s->first_len)) {
		*why = T_CHUNK;
		return REFUSE;
	}
	ssize_t span = ss_addr_span(s->first, s->first_len);
	if (span <= 0) {
		*why = span == 0                        ? T_ADDRESS_SPLIT
		       : s->first[0] == SOCKS_ATYP_DOMAIN ? T_DOMAIN
		                                          : T_ADDRESS_TYPE;
		return REFUSE;
	}
	if (socks_addr_get(s->first, ADDR_TCP, &ev->dest) < 0) {
		*why = T_DOMAIN;
		return REFUSE;
	}
	s->rest_off = (size_t)span;
	if (ss_method_is_2022(s->users[s->user].method)) {
		/* SIP022 3.1.3: the padding's length and the padding follow the
		 * address, within the header; payload or padding must be there */
		if (s->first_len - s->rest_off < 2) {
			*why = T_PADDING;
			return REFUSE;
		}
		size_t pad = bytes_get16(s->first + s->rest_off);
		s->rest_off += 2;
		if (pad > SS2022_PADDING_MAX || pad > s->first_len - s->rest_off) {
			*why = T_PADDING;
			return REFUSE;
		}
		s->rest_off += pad;
		if (pad == 0 && s->rest_off == s->first_len) {
			*why = T_EMPTY;
			return REFUSE;
		}
	}
	s->rd = (ss_reader){.rbuf = s->first, .out_off = s->rest_off, .out_len = s->first_len};
	ev->kind = PROTO_EV_OPEN;
	ev->cmd = PROTO_CMD_CONNECT;
	ev->user = s->user;
	return 0;
}

ssize_t ss_server_feed(ss_server *s, const uint8_t *in, size_t len, int64_t now,
                       proto_out *out, proto_event *ev)
{
	out->len = 0;
	*ev = (proto_event){.kind = PROTO_EV_NONE, .user = -1};
	enum text why = T_STATE;
	ssize_t used = 0;
	switch (s->state) {
	case SS_SV_SALT:
		used = authenticate(s, in, len, now, &why);
		if (used <= 0)
			break;
		s->state = SS_SV_FIRST;
		/* the first payload may be here already */
		__attribute__((fallthrough));
	case SS_SV_FIRST: {
		size_t want = s->first_len + SS_TAG_LEN - s->first_fill, have = len - (size_t)used;
		size_t n = have < want ? have : want;
		memcpy(s->first + s->first_fill, in + used, n);
		s->first_fill += n;
		used += (ssize_t)n;
		if (s->first_fill < s->first_len + SS_TAG_LEN)
			return used;
		if (first_done(s, ev, &why)) {
			used = REFUSE;
			break;
		}
		s->state = SS_SV_OPEN;
		return used;
	}
	default:
		ev->kind = PROTO_EV_CLOSE;
		ev->reason = TEXTS[T_STATE];
		return PROTO_ERR_STATE;
	}
	if (used == 0)
		return 0;
	*ev = (proto_event){.kind = PROTO_EV_CLOSE, .user = -1, .reason = TEXTS[why]};
	s->state = SS_SV_CLOSED;
	ss_server_free(s);
	return used == REFUSE ? 0 : used;
}

ssize_t ss_server_peek(ss_server *s, const uint8_t *in, size_t len, const uint8_t **plain,
                       size_t *plain_len)
{
	if (s->state != SS_SV_OPEN || !s->first)
		return PROTO_ERR_STATE;
	if (!s->plain) {
		s->plain = malloc(SS_PEEK_MAX);
		if (!s->plain)
			return PROTO_ERR_STATE;
	}
	layer_buf b = {s->plain, s->plain_len, SS_PEEK_MAX};
	ssize_t n = ss_reader_feed(&s->rd, &s->rx, in, len, &b);
	s->plain_len = b.len;
	*plain = s->plain;
	*plain_len = s->plain_len;
	return n;
}

/* ---- UDP packets ---- */

static bool packet_user(const ss_account *a)
{
	return !ss_method_is_2022(a->method);
}

ssize_t ss_server_packet_open(const ss_account *users, size_t n, int hint, const uint8_t *in,
                              size_t len, uint8_t *out, size_t cap, int *user, addr_dest *dest,
                              size_t *off)
{
	ssize_t plain = PROTO_ERR_MALFORMED;
	int who = -1;
	if (hint >= 0 && (size_t)hint < n && packet_user(&users[hint])) {
		plain = ss_packet_open(users[hint].method, users[hint].key, in, len, out, cap);
		who = hint;
	}
	for (size_t i = 0; plain == PROTO_ERR_MALFORMED && i < n; i++) {
		if ((int)i == hint || !packet_user(&users[i]))
			continue;
		plain = ss_packet_open(users[i].method, users[i].key, in, len, out, cap);
		who = (int)i;
	}
	if (plain < 0)
		return plain;
	*user = who;
	ssize_t span = ss_addr_span(out, (size_t)plain);
	if (span <= 0 || socks_addr_get(out, ADDR_UDP, dest) < 0)
		return SS_PACKET_ERR_ADDRESS;
	*off = (size_t)span;
	return plain - span;
}
