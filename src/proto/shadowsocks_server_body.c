/* shadowsocks_server_body.c - the Shadowsocks server's relayed body as a layer on the upstream's stack: the client's chunks opened going down, the upstream's bytes sealed going up behind our salt. */
#include <stdlib.h>
#include <string.h>

#include "crypto/ossl.h"

#include "proto/shadowsocks_server.h"

static const char BAD_CHUNK[] = "shadowsocks: bad chunk";
static const char BAD_LENGTH[] = "shadowsocks: chunk length out of bounds";

/* What waits for room above at most: our salt, 2022's response header
 * and one full chunk of the method. */
static size_t pend_max(ss_method m)
{
	return SS_KEY_MAX + SS2022_RESP_FIXED_SEALED_MAX + ss_chunk_max(m) + SS_TAG_LEN;
}

typedef struct body_layer {
	layer base;
	const char *err;
	ss_aead rx, tx;
	/* 2022: the first chunk up is the response header and its payload */
	bool resp_pending;
	int64_t now;
	uint8_t req_salt[SS_KEY_MAX];
	size_t slen;
	/* sealing: our salt (before the first chunk), then chunks waiting for
	 * room above */
	uint8_t *pend; /* owned, pend_max bytes */
	size_t pend_len, pend_off;
	/* opening, the peek's plaintext and the first chunk's rest going down
	 * first; rd.rbuf owned */
	uint8_t *pre; /* owned, NULL: no peek; pre[pre_off, pre_len) still goes down */
	size_t pre_len, pre_off;
	ss_reader rd;
} body_layer;

/* Whether the peek's plaintext has all gone down (it goes first). */
static bool pre_sent(body_layer *b, layer_buf *down)
{
	if (b->pre)
		b->pre_off += layer_buf_put(down, b->pre + b->pre_off, b->pre_len - b->pre_off);
	return b->pre_off == b->pre_len;
}

/* The client's bytes: chunks opened, their payload down to the upstream. */
static ssize_t from_above(layer *l, const uint8_t *in, size_t len, layer_buf *down)
{
	body_layer *b = (body_layer *)l;
	if (b->err)
		return LAYER_ERR_PROTO;
	if (!pre_sent(b, down))
		return 0;
	ssize_t n = ss_reader_feed(&b->rd, &b->rx, in, len, down);
	if (n < 0) {
		b->err = n == PROTO_ERR_TOO_BIG ? BAD_LENGTH : BAD_CHUNK;
		return LAYER_ERR_PROTO;
	}
	return n;
}

static void flush(body_layer *b, layer_buf *up)
{
	layer_buf_put_pending(up, b->pend, &b->pend_len, &b->pend_off);
}

/* The upstream's bytes: sealed as chunks, up to the client. */
static ssize_t from_below(layer *l, const uint8_t *in, size_t len, layer_buf *up,
                          layer_buf *down)
{
	(void)down;
	body_layer *b = (body_layer *)l;
	if (b->err)
		return LAYER_ERR_PROTO;
	/* SIP022 3.1.3: the salt and the header leave in one write */
	if (!b->resp_pending)
		flush(b, up);
	size_t used = 0, max = b->tx.chunk_max;
	/* the salt alone may wait: the first chunk goes behind it */
	while ((b->pend_len == 0 || b->resp_pending) && used < len) {
		size_t n = len - used < max ? len - used : max;
		ssize_t s = b->resp_pending ? ss2022_response_seal(&b->tx, b->now, b->req_salt, b->slen,
		                                                   in + used, n, b->pend + b->pend_len)
		                            : ss_chunk_seal(&b->tx, in + used, n, b->pend);
		if (s < 0)
			return LAYER_ERR_STATE;
		b->pend_len = (b->resp_pending ? b->pend_len : 0) + (size_t)s;
		b->resp_pending = false;
		used += n;
		flush(b, up);
	}
	return (ssize_t)used;
}

/* The peek's plaintext, then the first chunk's payload after the address
 * (or the rest of the chunk the peek left) go down first (what does not
 * fit follows on the stack's next pump, from_above with len 0). */
static int start(layer *l, layer_buf *down)
{
	body_layer *b = (body_layer *)l;
	ss_reader *r = &b->rd;
	if (!pre_sent(b, down))
		return 0;
	r->out_off += layer_buf_put(down, r->rbuf + r->out_off, r->out_len - r->out_off);
	return 0;
}

static bool ready(const layer *l)
{
	(void)l;
	return true;
}

static const char *error(const layer *l) { return ((const body_layer *)l)->err; }

static void body_free(layer *l)
{
	body_layer *b = (body_layer *)l;
	if (!b)
		return;
	ss_aead_free(&b->rx);
	ss_aead_free(&b->tx);
	free(b->pend);
	free(b->rd.rbuf);
	if (b->pre) {
		OPENSSL_cleanse(b->pre, SS_PEEK_MAX);
		free(b->pre);
	}
	OPENSSL_cleanse(b, sizeof *b);
	free(b);
}

static const layer_ops ops = {
	.name = "shadowsocks",
	.start = start,
	.from_below = from_below,
	.from_above = from_above,
	.ready = ready,
	.error = error,
	.free = body_free,
};

layer *ss_server_body_new(ss_server *s, const uint8_t *salt, int64_t now)
{
	if (s->state != SS_SV_OPEN || s->user < 0 || !s->first)
		return NULL;
	const ss_account *a = &s->users[s->user];
	size_t slen = ss_key_len(a->method);
	body_layer *b = calloc(1, sizeof *b);
	if (!b)
		return NULL;
	b->base.ops = &ops;
	b->pend = malloc(pend_max(a->method));
	if (!b->pend)
		goto fail;
	uint8_t sub[SS_KEY_MAX];
	int bad = ss_subkey(a->method, a->key, salt, sub) ||
	          ss_aead_init(&b->tx, a->method, sub, true);
	OPENSSL_cleanse(sub, sizeof sub);
	if (bad)
		goto fail;
	/* our salt leaves with the first chunk; from_below's flush would send
	 * it alone on a drain call, which is as good */
	memcpy(b->pend, salt, slen);
	b->pend_len = slen;
	b->resp_pending = ss_method_is_2022(a->method);
	b->now = now;
	memcpy(b->req_salt, s->salt, slen);
	b->slen = slen;
	/* take the client's direction and the first chunk over: its payload
	 * after the address goes down first */
	b->rx = s->rx;
	s->rx = (ss_aead){0};
	b->rd = s->rd;
	s->first = NULL;
	s->rd = (ss_reader){0};
	b->pre = s->plain;
	b->pre_len = s->plain_len;
	s->plain = NULL;
	s->plain_len = 0;
	return &b->base;
fail:
	body_free(&b->base);
	return NULL;
}
