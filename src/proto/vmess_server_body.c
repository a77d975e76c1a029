/* vmess_server_body.c - the VMess server's TCP body as a layer on the upstream's stack: the client's chunks opened going down, the upstream's bytes sealed going up. */
#include <stdlib.h>
#include <string.h>

#include "crypto/ossl.h"

#include "proto/vless.h"
#include "proto/vmess_server.h"

/* The largest chunk we write: a full payload with tag and padding. */
#define TX_MAX (VMESS_CHUNK_PAYLOAD_MAX + VMESS_CHUNK_OVERHEAD_MAX)

typedef struct body_layer {
	layer base;
	bool chunked, udp;
	const char *err;
	vmess_reader rx; /* the client's body */
	vmess_body tx;
	/* sealing: one chunk waiting for room above */
	uint8_t *pend; /* owned, TX_MAX bytes */
	size_t pend_len, pend_off;
} body_layer;

static const char BAD_CHUNK[] = "vmess: bad chunk";

/* The client's bytes: chunks opened, their payload down to the upstream. */
static ssize_t from_above(layer *l, const uint8_t *in, size_t len, layer_buf *down)
{
	body_layer *b = (body_layer *)l;
	if (b->err)
		return LAYER_ERR_PROTO;
	if (!b->chunked)
		return (ssize_t)layer_buf_put(down, in, len);
	ssize_t n = vmess_reader_feed(&b->rx, in, len, down);
	if (n == LAYER_ERR_PROTO)
		b->err = BAD_CHUNK;
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
	vmess_reader_free(&b->rx);
	vmess_body_free(&b->tx);
	free(b->pend);
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
		b->rx.udp = b->udp;
		b->pend = malloc(TX_MAX);
		if (!b->pend || vmess_server_body_init(s, &b->rx.body, &b->tx, pad_seed))
			goto fail;
	}
	return &b->base;
fail:
	body_free(&b->base);
	return NULL;
}
