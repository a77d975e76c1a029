/* ws_frame.c - the frame codec: RFC 6455 section 5.2's header, section 5.3's masking with 64-bit words. */
#include "transport/ws_frame.h"

#include <string.h>

#define FIN 0x80
#define RSV 0x70
#define MASK 0x80

static bool is_data(uint8_t op) { return op <= WS_OP_BINARY; }

/* The header's bytes before the mask key, once byte 1 is known. */
static size_t len_end(const uint8_t *head)
{
	uint8_t l = head[1] & 0x7f;
	return l == 126 ? 4 : l == 127 ? 10 : 2;
}

/* The length is known: the frame's checks, before its key or payload.
 * A data frame over max is refused first, as the length alone says so. */
static int check(ws_frame_dec *d)
{
	uint8_t b0 = d->head[0], b1 = d->head[1], l = b1 & 0x7f;
	const uint8_t *p = d->head + 2;
	uint64_t len = l;
	if (l == 126)
		len = (uint64_t)p[0] << 8 | p[1];
	else if (l == 127)
		for (int i = 0; i < 8; i++)
			len = len << 8 | p[i];
	d->len = len;
	d->fin = b0 & FIN;
	d->op = b0 & 0x0f;
	if (is_data(d->op) && len > d->max)
		return WS_FRAME_TOO_BIG;
	if (b0 & RSV) /* no extension is negotiated (section 5.2) */
		return WS_FRAME_BAD;
	if (!(b1 & MASK) != !d->masked) /* section 5.1 */
		return WS_FRAME_BAD;
	if (d->op > WS_OP_PONG || (d->op > WS_OP_BINARY && d->op < WS_OP_CLOSE))
		return WS_FRAME_BAD;
	if (!is_data(d->op)) /* section 5.5 */
		return d->fin && len <= WS_CONTROL_MAX ? 0 : WS_FRAME_BAD;
	/* Section 5.4: a continuation only inside a message, a new message
	 * only outside one. */
	if ((d->op == WS_OP_CONTINUATION) != d->in_msg)
		return WS_FRAME_BAD;
	d->in_msg = !d->fin;
	return 0;
}

ssize_t ws_frame_dec_head(ws_frame_dec *d, const uint8_t *p, size_t n)
{
	size_t i = 0;
	while (i < n && !d->in_payload) {
		/* Three steps: the first 2 bytes, the length, the key. */
		size_t end = d->have < 2 ? 2 : len_end(d->head);
		bool keying = d->have >= end; /* the length is read and checked */
		size_t want = keying ? end + 4 : end;
		size_t k = want - d->have;
		if (k > n - i)
			k = n - i;
		memcpy(d->head + d->have, p + i, k);
		d->have += (uint8_t)k;
		i += k;
		if (d->have < want)
			break;
		if (keying) {
			memcpy(d->key, d->head + end, 4);
		} else {
			if (d->have == 2 && len_end(d->head) > 2)
				continue; /* an extended length follows */
			int r = check(d);
			if (r < 0)
				return r;
			if (d->masked)
				continue;
		}
		d->in_payload = true;
		d->done = 0;
	}
	return (ssize_t)i;
}

size_t ws_frame_dec_payload(ws_frame_dec *d, uint8_t *dst, const uint8_t *src, size_t n)
{
	uint64_t left = d->len - d->done;
	if (n > left)
		n = (size_t)left;
	if (d->masked)
		ws_frame_mask(dst, src, n, d->key, d->done);
	else if (dst != src && n)
		memcpy(dst, src, n);
	d->done += n;
	return n;
}

void ws_frame_dec_next(ws_frame_dec *d)
{
	d->in_payload = false;
	d->have = 0;
	d->len = d->done = 0;
}

size_t ws_frame_head_len(uint64_t n, bool masked)
{
	return (n < 126 ? 2 : n <= 0xffff ? 4 : 10) + (masked ? 4 : 0);
}

size_t ws_frame_head(uint8_t out[WS_FRAME_HEAD_MAX], uint8_t b0, uint64_t n, const uint8_t *key)
{
	size_t k = 0;
	uint8_t m = key ? MASK : 0;
	out[k++] = b0;
	if (n < 126) {
		out[k++] = m | (uint8_t)n;
	} else if (n <= 0xffff) {
		out[k++] = m | 126;
		out[k++] = (uint8_t)(n >> 8);
		out[k++] = (uint8_t)n;
	} else {
		out[k++] = m | 127;
		for (int i = 7; i >= 0; i--)
			out[k++] = (uint8_t)(n >> (8 * i));
	}
	if (key) {
		memcpy(out + k, key, 4);
		k += 4;
	}
	return k;
}

void ws_frame_mask(uint8_t *dst, const uint8_t *src, size_t n, const uint8_t key[4], uint64_t off)
{
	/* The key turned to start at off, twice over: eight bytes of the
	 * payload take one XOR with the same word wherever they start, as 8
	 * is a multiple of the key's 4. memcpy keeps the loads and stores
	 * legal at any alignment and compiles to plain moves. */
	uint8_t k8[8];
	for (size_t i = 0; i < 8; i++)
		k8[i] = key[(off + i) & 3];
	uint64_t k;
	memcpy(&k, k8, 8);
	size_t i = 0;
	for (; i + 32 <= n; i += 32) {
		uint64_t a, b, c, e;
		memcpy(&a, src + i, 8);
		memcpy(&b, src + i + 8, 8);
		memcpy(&c, src + i + 16, 8);
		memcpy(&e, src + i + 24, 8);
		a ^= k, b ^= k, c ^= k, e ^= k;
		memcpy(dst + i, &a, 8);
		memcpy(dst + i + 8, &b, 8);
		memcpy(dst + i + 16, &c, 8);
		memcpy(dst + i + 24, &e, 8);
	}
	for (; i + 8 <= n; i += 8) {
		uint64_t a;
		memcpy(&a, src + i, 8);
		a ^= k;
		memcpy(dst + i, &a, 8);
	}
	for (; i < n; i++)
		dst[i] = src[i] ^ k8[i & 7];
}
