/* shadowsocks_client.c - the Shadowsocks client layer (AEAD-2017 and 2022): our salt (2022: and identity headers) and the target's address (for 2022 in the request's headers), then chunks both ways. */
#include <stdlib.h>
#include <string.h>

#include "crypto/ossl.h"

#include "proto/shadowsocks.h"
#include "proto/socks_addr.h"

enum text { T_CHUNK, T_LENGTH, T_HEADER, T_TIME, T_COUNT_ };
static const char *const TEXTS[T_COUNT_] = {
	[T_CHUNK] = "shadowsocks: bad chunk",
	[T_LENGTH] = "shadowsocks: chunk length out of bounds",
	[T_HEADER] = "shadowsocks: bad response header",
	[T_TIME] = "shadowsocks: response timestamp out of the window",
};

/* What waits for room below at most: our salt and the request's headers,
 * or one full chunk of the method. */
static size_t pend_max(ss_method m)
{
	size_t chunk = SS_LEN_BLOCK + ss_chunk_max(m) + SS_TAG_LEN;
	size_t first = SS_KEY_MAX + (ss_method_is_2022(m) ? SS2022_IDENTITY_MAX * SS2022_IDENTITY_LEN +
	                                                        SS2022_REQ_HEADERS_MAX
	                                                  : SS_CHUNK_MAX);
	return chunk > first ? chunk : first;
}

typedef struct ss_client {
	layer base;
	ss_method method;
	uint8_t key[SS_KEY_MAX]; /* the master key */
	/* 2022: our salt, which the response must name, and the request's
	 * time, which its timestamp must be near */
	uint8_t req_salt[SS_KEY_MAX];
	int64_t now;
	bool started;
	const char *err;
	ss_aead tx, rx; /* rx keyed once the server's salt came */
	uint8_t *pend;  /* owned, pend_max(method) bytes: sealed bytes waiting for room below */
	size_t pend_len, pend_off;
	/* receiving: the server's salt, then per chunk its sealed length, then
	 * its sealed payload, then the payload going up */
	uint8_t salt[SS_KEY_MAX];
	size_t salt_fill;
	uint8_t resp[SS2022_RESP_FIXED_SEALED_MAX]; /* 2022: the response's header */
	size_t resp_fill;
	bool resp_done;
	ss_reader rd; /* rd.rbuf owned */
} ss_client;

static void flush(ss_client *c, layer_buf *down)
{
	layer_buf_put_pending(down, c->pend, &c->pend_len, &c->pend_off);
}

static int client_start(layer *l, layer_buf *down)
{
	ss_client *c = (ss_client *)l;
	c->started = true;
	flush(c, down);
	return 0;
}

static ssize_t fail(ss_client *c, enum text t)
{
	c->err = TEXTS[t];
	return LAYER_ERR_PROTO;
}

/* What both directions do first: nothing before start, nothing more after
 * an error, and what waits for room below goes first. Returns true to go
 * on, or false with *ret what the call returns. */
static bool begin(ss_client *c, layer_buf *down, ssize_t *ret)
{
	if (c->err || !c->started) {
		*ret = c->err ? LAYER_ERR_PROTO : 0;
		return false;
	}
	flush(c, down);
	return true;
}

/* Takes up to want bytes of in[*used, len) into dst + *fill; true once
 * want bytes are there. */
static bool gather(uint8_t *dst, size_t *fill, size_t want, const uint8_t *in, size_t len,
                   size_t *used)
{
	size_t n = want - *fill < len - *used ? want - *fill : len - *used;
	memcpy(dst + *fill, in + *used, n);
	*fill += n;
	*used += n;
	return *fill == want;
}

static ssize_t client_from_below(layer *l, const uint8_t *in, size_t len, layer_buf *up,
                                 layer_buf *down)
{
	ss_client *c = (ss_client *)l;
	ssize_t r;
	if (!begin(c, down, &r))
		return r;
	size_t used = 0, slen = ss_key_len(c->method);
	if (!c->rx.ctx) {
		if (!gather(c->salt, &c->salt_fill, slen, in, len, &used))
			return (ssize_t)used;
		uint8_t sub[SS_KEY_MAX];
		int bad = ss_subkey(c->method, c->key, c->salt, sub) ||
		          ss_aead_init(&c->rx, c->method, sub, false);
		OPENSSL_cleanse(sub, sizeof sub);
		if (bad)
			return LAYER_ERR_STATE;
		/* AEAD-2017 has no response header */
		c->resp_done = !ss_method_is_2022(c->method);
	}
	if (!c->resp_done) {
		if (!gather(c->resp, &c->resp_fill, SS2022_RESP_FIXED_LEN(slen) + SS_TAG_LEN, in, len,
		            &used))
			return (ssize_t)used;
		ssize_t n = ss2022_response_open(&c->rx, c->resp, c->req_salt, slen, c->now);
		if (n < 0)
			return fail(c, n == SS2022_ERR_TAG    ? T_CHUNK
			               : n == SS2022_ERR_TIME ? T_TIME
			                                      : T_HEADER);
		/* the header is the first length: its payload follows */
		c->rd.chunk_len = (size_t)n;
		c->resp_done = true;
	}
	ssize_t n = ss_reader_feed(&c->rd, &c->rx, in + used, len - used, up);
	if (n < 0)
		return fail(c, n == PROTO_ERR_TOO_BIG ? T_LENGTH : T_CHUNK);
	return (ssize_t)used + n;
}

static ssize_t client_from_above(layer *l, const uint8_t *in, size_t len, layer_buf *down)
{
	ss_client *c = (ss_client *)l;
	ssize_t r;
	if (!begin(c, down, &r))
		return r;
	size_t used = 0;
	/* seal while what is sealed goes straight out */
	size_t max = c->tx.chunk_max;
	while (c->pend_len == 0 && used < len) {
		size_t n = len - used < max ? len - used : max;
		ssize_t s = ss_chunk_seal(&c->tx, in + used, n, c->pend);
		if (s < 0)
			return LAYER_ERR_STATE;
		c->pend_len = (size_t)s;
		used += n;
		flush(c, down);
	}
	return (ssize_t)used;
}

static bool client_ready(const layer *l)
{
	const ss_client *c = (const ss_client *)l;
	return c->started && !c->err;
}

static const char *client_error(const layer *l) { return ((const ss_client *)l)->err; }

static void client_free(layer *l)
{
	ss_client *c = (ss_client *)l;
	if (!c)
		return;
	ss_aead_free(&c->tx);
	ss_aead_free(&c->rx);
	free(c->pend);
	free(c->rd.rbuf);
	OPENSSL_cleanse(c, sizeof *c);
	free(c);
}

static const layer_ops client_ops = {
	.name = "shadowsocks",
	.start = client_start,
	.from_below = client_from_below,
	.from_above = client_from_above,
	.ready = client_ready,
	.error = client_error,
	.free = client_free,
};

/* SIP022-2: one identity header per iPSK, each naming the next PSK (the
 * next iPSK, the user's for the last), at out. Returns their length, or
 * -1. */
static ssize_t identities(ss_method m, const uint8_t *key, const ss_identity *id,
                          const uint8_t *salt, uint8_t *out)
{
	for (size_t i = 0; i < id->n; i++) {
		const uint8_t *next = i + 1 < id->n ? id->ipsk[i + 1] : key;
		if (ss2022_identity_seal(m, id->ipsk[i], salt, next, out + i * SS2022_IDENTITY_LEN))
			return -1;
	}
	return (ssize_t)(id->n * SS2022_IDENTITY_LEN);
}

layer *ss_client_new(ss_method m, const uint8_t *key, const ss_identity *id, const addr_dest *dest,
                     const uint8_t *salt, int64_t now, uint16_t padding)
{
	static const ss_identity none = {0};
	size_t alen = socks_addr_wire_len(dest), slen = ss_key_len(m);
	if (!id)
		id = &none;
	if (!alen || !slen || id->n > SS2022_IDENTITY_MAX || (id->n && !ss_method_has_identity(m)))
		return NULL;
	ss_client *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->base.ops = &client_ops;
	c->method = m;
	memcpy(c->key, key, slen);
	memcpy(c->req_salt, salt, slen);
	c->now = now;
	c->pend = malloc(pend_max(m));
	c->rd.rbuf = malloc(ss_chunk_max(m) + SS_TAG_LEN);
	if (!c->pend || !c->rd.rbuf)
		goto fail;
	uint8_t sub[SS_KEY_MAX], addr[SS_ADDR_MAX];
	int bad = ss_subkey(m, key, salt, sub) || ss_aead_init(&c->tx, m, sub, true);
	OPENSSL_cleanse(sub, sizeof sub);
	if (bad)
		goto fail;
	memcpy(c->pend, salt, slen);
	ssize_t ih = identities(m, key, id, salt, c->pend + slen);
	if (ih < 0)
		goto fail;
	size_t head = slen + (size_t)ih;
	socks_addr_put(dest, addr);
	ssize_t n = ss_method_is_2022(m)
	                    ? ss2022_request_seal(&c->tx, now, addr, alen,
	                                          1 + padding % SS2022_PADDING_MAX, c->pend + head)
	                    : ss_chunk_seal(&c->tx, addr, alen, c->pend + head);
	if (n < 0)
		goto fail;
	c->pend_len = head + (size_t)n;
	return &c->base;
fail:
	client_free(&c->base);
	return NULL;
}
