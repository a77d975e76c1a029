/* vmess_client.c - the VMess AEAD client layer: the request, the response header, body chunks both ways. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "crypto/ossl.h"

#include "proto/vless.h"
#include "proto/vmess.h"

enum text { T_RESPONSE, T_CHUNK, T_COUNT_ };
static const char *const TEXTS[T_COUNT_] = {
	[T_RESPONSE] = "vmess: bad response header",
	[T_CHUNK] = "vmess: bad chunk",
};

/* The largest chunk we write: a full payload with tag and padding. */
#define TX_MAX (VMESS_CHUNK_PAYLOAD_MAX + VMESS_CHUNK_OVERHEAD_MAX)

typedef struct vmess_client {
	layer base;
	vmess_security sec;
	bool udp, started, got_response;
	const char *err;
	uint8_t v;
	uint8_t resp_key[16], resp_iv[16];
	vmess_body tx;
	vmess_reader rx; /* the response body */
	/* the request, then sealed chunks, waiting for room below */
	uint8_t *pend; /* owned: TX_MAX + VMESS_REQUEST_MAX bytes */
	size_t pend_len, pend_off;
	bool fin_pending, fin_sent;
} vmess_client;

static bool chunked(const vmess_client *c) { return c->sec != VMESS_SEC_ZERO; }

static void flush(vmess_client *c, layer_buf *down)
{
	layer_buf_put_pending(down, c->pend, &c->pend_len, &c->pend_off);
	if (c->fin_pending && c->pend_len == 0 && chunked(c)) {
		ssize_t n = vmess_body_seal(&c->tx, NULL, 0, c->pend, TX_MAX);
		c->fin_pending = false;
		c->fin_sent = true;
		if (n > 0) {
			c->pend_len = (size_t)n;
			c->pend_off = layer_buf_put(down, c->pend, c->pend_len);
		}
	}
}

static int client_start(layer *l, layer_buf *down)
{
	vmess_client *c = (vmess_client *)l;
	c->started = true;
	flush(c, down);
	return 0;
}

static int fail(vmess_client *c, enum text t)
{
	c->err = TEXTS[t];
	return LAYER_ERR_PROTO;
}

static ssize_t client_from_below(layer *l, const uint8_t *in, size_t len, layer_buf *up,
                                 layer_buf *down)
{
	vmess_client *c = (vmess_client *)l;
	if (c->err)
		return LAYER_ERR_PROTO;
	if (!c->started)
		return 0;
	flush(c, down);
	size_t used = 0;
	if (!c->got_response) {
		ssize_t n = vmess_response_open(c->resp_key, c->resp_iv, c->v, in, len);
		if (n < 0)
			return fail(c, T_RESPONSE);
		if (n == 0)
			return 0; /* not all here: offered again with more */
		used = (size_t)n;
		c->got_response = true;
	}
	if (!chunked(c))
		return (ssize_t)(used + layer_buf_put(up, in + used, len - used));
	ssize_t n = vmess_reader_feed(&c->rx, in + used, len - used, up);
	if (n == LAYER_ERR_PROTO)
		return fail(c, T_CHUNK);
	if (n < 0)
		return n;
	return (ssize_t)used + n;
}

static ssize_t client_from_above(layer *l, const uint8_t *in, size_t len, layer_buf *down)
{
	vmess_client *c = (vmess_client *)l;
	if (c->err)
		return LAYER_ERR_PROTO;
	if (!c->started)
		return 0;
	flush(c, down);
	size_t used = 0;
	/* seal while what is sealed goes straight out */
	while (c->pend_len == 0 && used < len && !c->fin_sent && !c->fin_pending) {
		const uint8_t *p = in + used;
		size_t n = len - used, take;
		if (!chunked(c)) {
			used += layer_buf_put(down, p, n);
			break;
		}
		if (c->udp) {
			size_t plen;
			ssize_t f = vless_udp_decode(p, n, &plen);
			if (f == 0)
				break; /* the frame has not all come */
			if (f < 0)
				return LAYER_ERR_STATE; /* the app broke its own framing */
			take = (size_t)f;
			if (plen == 0) { /* an empty chunk would end the body */
				used += take;
				continue;
			}
			p += VLESS_UDP_HEADER_LEN;
			n = plen;
		} else {
			take = n = n < VMESS_CHUNK_PAYLOAD_MAX ? n : VMESS_CHUNK_PAYLOAD_MAX;
		}
		ssize_t s = vmess_body_seal(&c->tx, p, n, c->pend, TX_MAX);
		if (s < 0)
			return LAYER_ERR_STATE;
		c->pend_len = (size_t)s;
		used += take;
		flush(c, down);
	}
	return (ssize_t)used;
}

static int client_shutdown(layer *l, layer_buf *down)
{
	vmess_client *c = (vmess_client *)l;
	if (!c->err && chunked(c) && !c->fin_sent)
		c->fin_pending = true;
	flush(c, down);
	return 0;
}

static bool client_ready(const layer *l)
{
	const vmess_client *c = (const vmess_client *)l;
	return c->started && !c->err;
}

static const char *client_error(const layer *l) { return ((const vmess_client *)l)->err; }

static void client_free(layer *l)
{
	vmess_client *c = (vmess_client *)l;
	if (!c)
		return;
	vmess_body_free(&c->tx);
	vmess_reader_free(&c->rx);
	free(c->pend);
	OPENSSL_cleanse(c, sizeof *c);
	free(c);
}

/* The server's end chunk came and every payload before it went up: the
 * relay passes the end on at once (v2ray sends it without a FIN). */
static bool client_peer_ended(const layer *l)
{
	const vmess_client *c = (const vmess_client *)l;
	return c->rx.ended && c->rx.out_off >= c->rx.out_len;
}

static const layer_ops client_ops = {
	.name = "vmess",
	.start = client_start,
	.from_below = client_from_below,
	.from_above = client_from_above,
	.ready = client_ready,
	.shutdown = client_shutdown,
	.peer_ended = client_peer_ended,
	.error = client_error,
	.free = client_free,
};

layer *vmess_client_new(const uint8_t cmd_key[VMESS_KEY_LEN], vmess_security sec,
                        const addr_dest *dest, bool udp, int64_t now,
                        const vmess_client_random *r)
{
	if (udp && sec == VMESS_SEC_ZERO)
		return NULL;
	vmess_client *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->base.ops = &client_ops;
	c->sec = sec;
	c->udp = udp;
	c->v = r->auth_v;
	uint8_t opt = vmess_options_for(sec);
	/* zero goes on the wire as none without the chunk stream */
	uint8_t wire_sec = sec == VMESS_SEC_ZERO ? VMESS_SEC_NONE : (uint8_t)sec;
	vmess_response_keys(r->body_key, r->body_iv, c->resp_key, c->resp_iv);
	c->rx.udp = udp;
	c->pend = malloc(TX_MAX + VMESS_REQUEST_MAX);
	if (!c->pend)
		goto fail;
	ssize_t n = vmess_request_seal(cmd_key, now, r, wire_sec, opt,
	                               udp ? VMESS_CMD_UDP : VMESS_CMD_TCP, dest, c->pend,
	                               TX_MAX + VMESS_REQUEST_MAX);
	if (n < 0)
		goto fail;
	c->pend_len = (size_t)n;
	if (chunked(c) &&
	    (vmess_body_init(&c->tx, wire_sec, opt, r->body_key, r->body_iv, true, r->pad_seed) ||
	     vmess_body_init(&c->rx.body, wire_sec, opt, c->resp_key, c->resp_iv, false, NULL)))
		goto fail;
	return &c->base;
fail:
	client_free(&c->base);
	return NULL;
}
