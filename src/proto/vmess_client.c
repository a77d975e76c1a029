/* vmess_client.c - the VMess AEAD client layer: the request, the response header, body chunks both ways. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "base/bytes.h"
#include "proto/vless.h"
#include "proto/vmess.h"

enum text { T_RESPONSE, T_CHUNK, T_COUNT_ };
static const char *const TEXTS[T_COUNT_] = {
	[T_RESPONSE] = "vmess: bad response header",
	[T_CHUNK] = "vmess: bad chunk",
};

/* The largest chunk we write: a full payload with tag and padding. */
#define TX_MAX (VMESS_CHUNK_PAYLOAD_MAX + VMESS_CHUNK_OVERHEAD_MAX)

/* The receive buffer starts at this and grows to the largest chunk seen
 * (at most a 16-bit size plus the UDP frame's 2 bytes before it): v2ray
 * writes about 2 KiB a chunk, so most flows never grow it. */
#define RX_START 4096
#define RX_MAX (2 + VMESS_CHUNK_SIZE_MAX)

typedef struct vmess_client {
	layer base;
	vmess_security sec;
	bool udp, started, got_response, ended;
	const char *err;
	uint8_t v;
	uint8_t resp_key[16], resp_iv[16];
	vmess_body tx, rx;
	/* the request, then sealed chunks, waiting for room below */
	uint8_t *pend; /* owned: TX_MAX + VMESS_REQUEST_MAX bytes */
	size_t pend_len, pend_off;
	bool fin_pending, fin_sent;
	/* receiving: the size field, then the chunk, then its plaintext going up */
	uint8_t size2[2];
	size_t size_fill;
	bool have_size;
	size_t chunk_len, pad_len;
	uint8_t *rbuf; /* owned, rcap bytes; the chunk at rbuf + 2 */
	size_t rcap, rfill;
	size_t out_off, out_len; /* rbuf[out_off, out_len) still goes up */
} vmess_client;

static bool chunked(const vmess_client *c) { return c->sec != VMESS_SEC_ZERO; }

static void flush(vmess_client *c, layer_buf *down)
{
	c->pend_off += layer_buf_put(down, c->pend + c->pend_off, c->pend_len - c->pend_off);
	if (c->pend_off == c->pend_len)
		c->pend_off = c->pend_len = 0;
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

/* Passes pending plaintext up; true when none is left. A UDP frame goes
 * whole or not at all. */
static bool deliver(vmess_client *c, layer_buf *up)
{
	size_t n = c->out_len - c->out_off;
	if (n == 0)
		return true;
	if (c->udp && layer_buf_room(up) < n)
		return false;
	c->out_off += layer_buf_put(up, c->rbuf + c->out_off, n);
	return c->out_off == c->out_len;
}

static int fail(vmess_client *c, enum text t)
{
	c->err = TEXTS[t];
	return LAYER_ERR_PROTO;
}

/* The chunk in rbuf + 2 is complete: open it and queue its payload. */
static int chunk_done(vmess_client *c)
{
	ssize_t n = vmess_body_open(&c->rx, c->rbuf + 2, c->chunk_len, c->pad_len);
	if (n < 0)
		return fail(c, T_CHUNK);
	c->have_size = false;
	c->size_fill = c->rfill = 0;
	if (!c->udp) {
		c->out_off = 2;
		c->out_len = 2 + (size_t)n;
	} else if (n > 0 && n <= VLESS_UDP_PAYLOAD_MAX) {
		bytes_put16(c->rbuf, (uint16_t)n);
		c->out_off = 0;
		c->out_len = 2 + (size_t)n;
	} /* else: an empty or oversized datagram is dropped */
	return 0;
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
	while (deliver(c, up)) {
		if (c->ended)
			return (ssize_t)len; /* after the end chunk: ignored */
		if (used == len)
			break;
		if (!c->have_size) {
			while (c->size_fill < 2 && used < len)
				c->size2[c->size_fill++] = in[used++];
			if (c->size_fill < 2)
				break;
			int r = vmess_body_open_size(&c->rx, c->size2, &c->chunk_len, &c->pad_len);
			if (r < 0)
				return fail(c, T_CHUNK);
			if (r == 0) {
				c->ended = true;
				continue;
			}
			c->have_size = true;
			if (2 + c->chunk_len > c->rcap) {
				uint8_t *b = realloc(c->rbuf, RX_MAX);
				if (!b)
					return LAYER_ERR_NOMEM;
				c->rbuf = b;
				c->rcap = RX_MAX;
			}
		}
		size_t want = c->chunk_len - c->rfill, take = len - used < want ? len - used : want;
		memcpy(c->rbuf + 2 + c->rfill, in + used, take);
		c->rfill += take;
		used += take;
		if (c->rfill < c->chunk_len)
			break;
		int rc = chunk_done(c);
		if (rc)
			return rc;
	}
	return (ssize_t)used;
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
	vmess_body_free(&c->rx);
	free(c->pend);
	free(c->rbuf);
	OPENSSL_cleanse(c, sizeof *c);
	free(c);
}

static const layer_ops client_ops = {
	.name = "vmess",
	.start = client_start,
	.from_below = client_from_below,
	.from_above = client_from_above,
	.ready = client_ready,
	.shutdown = client_shutdown,
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
	c->pend = malloc(TX_MAX + VMESS_REQUEST_MAX);
	c->rbuf = malloc(RX_START);
	c->rcap = RX_START;
	if (!c->pend || !c->rbuf)
		goto fail;
	ssize_t n = vmess_request_seal(cmd_key, now, r, wire_sec, opt,
	                               udp ? VMESS_CMD_UDP : VMESS_CMD_TCP, dest, c->pend,
	                               TX_MAX + VMESS_REQUEST_MAX);
	if (n < 0)
		goto fail;
	c->pend_len = (size_t)n;
	if (chunked(c) &&
	    (vmess_body_init(&c->tx, wire_sec, opt, r->body_key, r->body_iv, true, r->pad_seed) ||
	     vmess_body_init(&c->rx, wire_sec, opt, c->resp_key, c->resp_iv, false, NULL)))
		goto fail;
	return &c->base;
fail:
	client_free(&c->base);
	return NULL;
}
