/* vmess_server_body.c - the VMess server's TCP body as a layer on the upstream's stack: the client's chunks opened going down, the upstream's bytes sealed going up. */
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "base/bytes.h"
#include "proto/vless.h"
#include "proto/vmess_server.h"

/* The largest chunk we write: a full payload with tag and padding. */
#define TX_MAX (VMESS_CHUNK_PAYLOAD_MAX + VMESS_CHUNK_OVERHEAD_MAX)
/* The receive buffer starts at this and grows to the largest chunk a
 * 16-bit size allows (v2ray writes about 2 KiB a chunk). */
#define RX_START 4096
#define RX_MAX (2 + VMESS_CHUNK_SIZE_MAX)

typedef struct body_layer {
	layer base;
	bool chunked, udp, ended;
	const char *err;
	vmess_body rx, tx;
	/* sealing: one chunk waiting for room above */
	uint8_t *pend; /* owned, TX_MAX bytes */
	size_t pend_len, pend_off;
	/* opening: the size field, then the chunk, then its payload going down */
	uint8_t size2[2];
	size_t size_fill;
	bool have_size;
	size_t chunk_len, pad_len;
	uint8_t *rbuf; /* owned, rcap bytes; the chunk at rbuf + 2 */
	size_t rcap, rfill;
	size_t out_off, out_len; /* rbuf[out_off, out_len) still goes down */
} body_layer;

static const char BAD_CHUNK[] = "vmess: bad chunk";

/* Passes the opened payload down; true when none is left. A UDP frame
 * goes whole or not at all. */
static bool deliver(body_layer *b, layer_buf *down)
{
	if (b->udp && b->out_off < b->out_len && layer_buf_room(down) < b->out_len - b->out_off)
		return false;
	b->out_off += layer_buf_put(down, b->rbuf + b->out_off, b->out_len - b->out_off);
	return b->out_off == b->out_len;
}

/* The client's bytes: chunks opened, their payload down to the upstream. */
static ssize_t from_above(layer *l, const uint8_t *in, size_t len, layer_buf *down)
{
	body_layer *b = (body_layer *)l;
	if (b->err)
		return LAYER_ERR_PROTO;
	if (!b->chunked)
		return (ssize_t)layer_buf_put(down, in, len);
	size_t used = 0;
	while (deliver(b, down)) {
		if (b->ended)
			return (ssize_t)len; /* after the end chunk: swallowed */
		if (used == len)
			break;
		if (!b->have_size) {
			while (b->size_fill < 2 && used < len)
				b->size2[b->size_fill++] = in[used++];
			if (b->size_fill < 2)
				break;
			int r = vmess_body_open_size(&b->rx, b->size2, &b->chunk_len, &b->pad_len);
			if (r < 0)
				goto bad;
			if (r == 0) {
				b->ended = true;
				continue;
			}
			b->have_size = true;
			if (2 + b->chunk_len > b->rcap) {
				uint8_t *n = realloc(b->rbuf, RX_MAX);
				if (!n)
					return LAYER_ERR_NOMEM;
				b->rbuf = n;
				b->rcap = RX_MAX;
			}
		}
		size_t want = b->chunk_len - b->rfill, take = len - used < want ? len - used : want;
		memcpy(b->rbuf + 2 + b->rfill, in + used, take);
		b->rfill += take;
		used += take;
		if (b->rfill < b->chunk_len)
			break;
		ssize_t n = vmess_body_open(&b->rx, b->rbuf + 2, b->chunk_len, b->pad_len);
		if (n < 0)
			goto bad;
		b->have_size = false;
		b->size_fill = b->rfill = 0;
		if (!b->udp) {
			b->out_off = 2;
			b->out_len = 2 + (size_t)n;
		} else if (n > 0 && n <= VLESS_UDP_PAYLOAD_MAX) {
			bytes_put16(b->rbuf, (uint16_t)n);
			b->out_off = 0;
			b->out_len = 2 + (size_t)n;
		} /* else: an empty or oversized datagram is dropped */
	}
	return (ssize_t)used;
bad:
	b->err = BAD_CHUNK;
	return LAYER_ERR_PROTO;
}

static void flush(body_layer *b, layer_buf *up)
{
	b->pend_off += layer_buf_put(up, b->pend + b->pend_off, b->pend_len - b->pend_off);
	if (b->pend_off == b->pend_len)
		b->pend_off = b->pend_len = 0;
}

/* The upstream's bytes: sealed as chunks, up to the client. */
static ssize_t from_below(layer *l, const uint8_t *in, size_t len, layer_buf *up,
                          layer_buf *down)
{
	(void)down;
	body_layer *b = (body_layer *)l;
	if (b->err)
		return LAYER_ERR_PROTO;
	if (!b->chunked)
		return (ssize_t)layer_buf_put(up, in, len);
	flush(b, up);
	size_t used = 0;
	while (b->pend_len == 0 && used < len) {
		const uint8_t *p = in + used;
		size_t n = len - used, take;
		if (b->udp) {
			size_t plen;
			ssize_t f = vless_udp_decode(p, n, &plen);
			if (f == 0)
				break; /* the frame has not all come */
			if (f < 0)
				return LAYER_ERR_STATE; /* the shell broke its own framing */
			take = (size_t)f;
			if (plen == 0 || plen > VMESS_CHUNK_PAYLOAD_MAX) {
				used += take; /* empty would end the body; too big: dropped */
				continue;
			}
			p += VLESS_UDP_HEADER_LEN;
			n = plen;
		} else {
			take = n = n < VMESS_CHUNK_PAYLOAD_MAX ? n : VMESS_CHUNK_PAYLOAD_MAX;
		}
		ssize_t s = vmess_body_seal(&b->tx, p, n, b->pend, TX_MAX);
		if (s < 0)
			return LAYER_ERR_STATE;
		b->pend_len = (size_t)s;
		used += take;
		flush(b, up);
	}
	return (ssize_t)used;
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
	vmess_body_free(&b->rx);
	vmess_body_free(&b->tx);
	free(b->pend);
	free(b->rbuf);
	OPENSSL_cleanse(b, sizeof *b);
	free(b);
}

static const layer_ops ops = {
	.name = "vmess",
	.from_below = from_below,
	.from_above = from_above,
	.ready = ready,
	.error = error,
	.free = body_free,
};

layer *vmess_server_body_new(const vmess_server *s, const uint8_t pad_seed[32])
{
	if (s->state != VMESS_SV_DIAL && s->state != VMESS_SV_RELAY)
		return NULL;
	body_layer *b = calloc(1, sizeof *b);
	if (!b)
		return NULL;
	b->base.ops = &ops;
	b->chunked = vmess_server_chunked(s);
	b->udp = s->req.cmd == VMESS_CMD_UDP;
	if (b->chunked) {
		b->pend = malloc(TX_MAX);
		b->rbuf = malloc(RX_START);
		b->rcap = RX_START;
		if (!b->pend || !b->rbuf || vmess_server_body_init(s, &b->rx, &b->tx, pad_seed))
			goto fail;
	}
	return &b->base;
fail:
	body_free(&b->base);
	return NULL;
}
