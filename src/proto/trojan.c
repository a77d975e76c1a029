/* trojan.c - Trojan client layer, server core (fallback on anything that is not Trojan) and UDP packets. */
#include "proto/trojan.h"

#include "base/bytes.h"
#include "proto/socks_addr.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "crypto/ossl.h"

/* Wire values: trojan-gfw docs/protocol.md; the address is RFC 1928's. */
enum {
	CMD_CONNECT = 0x01,
	CMD_UDP_ASSOCIATE = 0x03,
};

/* Every text this module shows, for logs and for tests to match word for word. */
enum text {
	T_NOT_TROJAN,
	T_PASSWORD,
	T_CRLF,
	T_COMMAND,
	T_ADDRESS,
	T_TIMEOUT,
	T_STATE,
	T_COUNT_,
};

static const char *const TEXTS[T_COUNT_] = {
	[T_NOT_TROJAN] = "trojan: not a trojan request",
	[T_PASSWORD] = "trojan: unknown password",
	[T_CRLF] = "trojan: malformed request: missing CRLF",
	[T_COMMAND] = "trojan: malformed request: unknown command",
	[T_ADDRESS] = "trojan: malformed request: bad address",
	[T_TIMEOUT] = "trojan: no complete request before the handshake deadline",
	[T_STATE] = "trojan: called after the request was decided",
};

/* ---- SOCKS5 addresses: ATYP DST.ADDR DST.PORT (RFC 1928 section 5) ---- */

/* Bytes the address at p spans, as far as its first avail (>= 1) bytes
 * tell; -1 for an unknown ATYP or a zero-length domain, which no more bytes
 * can mend. */
static ssize_t addr_need(const uint8_t *p, size_t avail)
{
	switch (p[0]) {
	case SOCKS_ATYP_IPV4:
		return 1 + 4 + 2;
	case SOCKS_ATYP_IPV6:
		return 1 + 16 + 2;
	case SOCKS_ATYP_DOMAIN:
		if (avail < 2)
			return 2;
		return p[1] == 0 ? -1 : (ssize_t)(1 + 1 + (size_t)p[1] + 2);
	default:
		return -1;
	}
}

/* Whether the CRLF expected at p is still possible given avail bytes. */
static bool crlf_ok(const uint8_t *p, size_t avail)
{
	return (avail < 1 || p[0] == '\r') && (avail < 2 || p[1] == '\n');
}

/* ---- password hash ---- */

int trojan_password_hash(const char *password, char out[TROJAN_HASH_LEN])
{
	static const char hex[] = "0123456789abcdef";
	uint8_t md[EVP_MAX_MD_SIZE];
	unsigned int md_len = 0;
	if (!EVP_Digest(password, strlen(password), md, &md_len, EVP_sha224(), NULL) ||
	    md_len * 2 != TROJAN_HASH_LEN)
		return -1;
	for (unsigned int i = 0; i < md_len; i++) {
		out[2 * i] = hex[md[i] >> 4];
		out[2 * i + 1] = hex[md[i] & 0x0f];
	}
	return 0;
}

/* ---- client layer ---- */

typedef struct trojan_client {
	layer base;
	bool started;
	uint16_t req_len; /* the request, written by start */
	uint16_t req_off; /* how much of it went down so far */
	uint8_t req[TROJAN_REQUEST_MAX];
} trojan_client;

/* Moves what fits of the unsent request into down. */
static void flush(trojan_client *c, layer_buf *down)
{
	c->req_off = (uint16_t)(c->req_off + layer_buf_put(down, c->req + c->req_off,
	                                           (size_t)(c->req_len - c->req_off)));
}

/* Copies what fits of in into to; returns how much. */

static int client_start(layer *l, layer_buf *down)
{
	trojan_client *c = (trojan_client *)l;
	c->started = true;
	flush(c, down);
	return 0;
}

static ssize_t client_from_below(layer *l, const uint8_t *in, size_t len, layer_buf *up,
                                 layer_buf *down)
{
	trojan_client *c = (trojan_client *)l;
	if (c->started)
		flush(c, down);
	return (ssize_t)layer_buf_put(up, in, len);
}

static ssize_t client_from_above(layer *l, const uint8_t *in, size_t len, layer_buf *down)
{
	trojan_client *c = (trojan_client *)l;
	if (!c->started)
		return 0;
	flush(c, down);
	if (c->req_off < c->req_len)
		return 0; /* the request goes first */
	return (ssize_t)layer_buf_put(down, in, len);
}

static bool client_ready(const layer *l)
{
	return ((const trojan_client *)l)->started;
}

/* Trojan answers nothing: once the request is out, bytes cross unchanged. */
static bool client_passthrough(const layer *l)
{
	const trojan_client *c = (const trojan_client *)l;
	return c->started && c->req_off == c->req_len;
}

static const char *client_error(const layer *l)
{
	(void)l;
	return NULL; /* the layer never fails */
}

static void client_free(layer *l)
{
	free(l);
}

static const layer_ops client_ops = {
	.name = "trojan",
	.start = client_start,
	.from_below = client_from_below,
	.from_above = client_from_above,
	.ready = client_ready,
	.passthrough = client_passthrough,
	.shutdown = NULL,
	.error = client_error,
	.free = client_free,
};

layer *trojan_client_new(const uint8_t hash_hex[TROJAN_HASH_LEN], const addr_dest *dest)
{
	size_t alen = socks_addr_wire_len(dest);
	if (alen == 0)
		return NULL;
	trojan_client *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->base.ops = &client_ops;
	uint8_t *p = c->req;
	memcpy(p, hash_hex, TROJAN_HASH_LEN);
	p += TROJAN_HASH_LEN;
	*p++ = '\r';
	*p++ = '\n';
	*p++ = dest->network == ADDR_UDP ? CMD_UDP_ASSOCIATE : CMD_CONNECT;
	p += socks_addr_put(dest, p);
	*p++ = '\r';
	*p++ = '\n';
	c->req_len = (uint16_t)(p - c->req);
	assert(c->req_len <= TROJAN_REQUEST_MAX);
	return &c->base;
}

/* ---- server core ---- */

void trojan_server_init(trojan_server *s, const uint8_t (*hashes)[TROJAN_HASH_LEN],
                        size_t n_users)
{
	*s = (trojan_server){.hashes = hashes, .n_users = n_users, .state = TROJAN_ST_REQUEST};
}

static bool is_hash_digit(uint8_t c)
{
	/* trojan_password_hash writes lowercase, and servers compare the text
	 * as it is, so an uppercase digit is not this protocol either. */
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

/* The index of the account whose hash is h, or -1. Every account is
 * compared in constant time, so the time taken says nothing about h. */
static int find_user(const trojan_server *s, const uint8_t *h)
{
	int user = -1;
	for (size_t i = 0; i < s->n_users; i++)
		if (CRYPTO_memcmp(s->hashes[i], h, TROJAN_HASH_LEN) == 0 && user < 0)
			user = (int)i;
	return user;
}

enum { REJECT = -1 };

/* Parses in[0, len). Returns the request's length with ev filled, 0 when
 * undecided, or REJECT with *why set. Looks at bytes in order and returns
 * at the first one that decides, so every prefix of an input decides the
 * same way as the whole (or not yet). */
static ssize_t parse(const trojan_server *s, const uint8_t *in, size_t len, proto_event *ev,
                     enum text *why)
{
	size_t h = len < TROJAN_HASH_LEN ? len : TROJAN_HASH_LEN;
	for (size_t i = 0; i < h; i++)
		if (!is_hash_digit(in[i])) {
			*why = T_NOT_TROJAN;
			return REJECT;
		}
	if (len < TROJAN_HASH_LEN)
		return 0;
	int user = find_user(s, in);
	if (user < 0) {
		*why = T_PASSWORD;
		return REJECT;
	}
	size_t p = TROJAN_HASH_LEN;
	if (!crlf_ok(in + p, len - p)) {
		*why = T_CRLF;
		return REJECT;
	}
	p += 2;
	if (len <= p)
		return 0;
	uint8_t cmd = in[p];
	if (cmd != CMD_CONNECT && cmd != CMD_UDP_ASSOCIATE) {
		*why = T_COMMAND;
		return REJECT;
	}
	p++;
	if (len <= p)
		return 0;
	ssize_t span = addr_need(in + p, len - p);
	if (span < 0) {
		*why = T_ADDRESS;
		return REJECT;
	}
	if (len - p < (size_t)span)
		return 0;
	addr_network net = cmd == CMD_UDP_ASSOCIATE ? ADDR_UDP : ADDR_TCP;
	if (socks_addr_get(in + p, net, &ev->dest) < 0) {
		*why = T_ADDRESS;
		return REJECT;
	}
	p += (size_t)span;
	if (!crlf_ok(in + p, len - p)) {
		*why = T_CRLF;
		return REJECT;
	}
	if (len - p < 2)
		return 0;
	p += 2;
	ev->kind = PROTO_EV_OPEN;
	ev->cmd = cmd == CMD_UDP_ASSOCIATE ? PROTO_CMD_UDP_ASSOCIATE : PROTO_CMD_CONNECT;
	ev->user = user;
	return (ssize_t)p;
}

ssize_t trojan_server_feed(trojan_server *s, const uint8_t *in, size_t len, proto_out *out,
                           proto_event *ev)
{
	out->len = 0;
	*ev = (proto_event){.kind = PROTO_EV_NONE, .user = -1};
	if (s->state != TROJAN_ST_REQUEST) {
		ev->kind = PROTO_EV_CLOSE;
		ev->reason = TEXTS[T_STATE];
		return PROTO_ERR_STATE;
	}
	enum text why = T_NOT_TROJAN;
	ssize_t n = parse(s, in, len, ev, &why);
	if (n == REJECT) {
		*ev = (proto_event){.kind = PROTO_EV_CLOSE, .user = -1, .reason = TEXTS[why]};
		s->state = TROJAN_ST_FALLBACK;
		return 0;
	}
	if (n > 0)
		s->state = TROJAN_ST_OPEN;
	else
		ev->dest = (addr_dest){0};
	return n;
}

int trojan_server_timeout(trojan_server *s, proto_event *ev)
{
	if (s->state != TROJAN_ST_REQUEST) {
		*ev = (proto_event){.kind = PROTO_EV_CLOSE, .user = -1, .reason = TEXTS[T_STATE]};
		return PROTO_ERR_STATE;
	}
	s->state = TROJAN_ST_FALLBACK;
	*ev = (proto_event){.kind = PROTO_EV_CLOSE, .user = -1, .reason = TEXTS[T_TIMEOUT]};
	return 0;
}

bool trojan_server_wants_fallback(const trojan_server *s)
{
	return s->state == TROJAN_ST_FALLBACK;
}

/* ---- UDP packets ---- */

ssize_t trojan_udp_encode(const addr_dest *dest, size_t payload_len, uint8_t *hdr, size_t cap)
{
	size_t alen = socks_addr_wire_len(dest);
	if (alen == 0)
		return PROTO_ERR_MALFORMED;
	if (payload_len > TROJAN_UDP_PAYLOAD_MAX || cap < alen + 4)
		return PROTO_ERR_TOO_BIG;
	size_t n = socks_addr_put(dest, hdr);
	bytes_put16(hdr + n, (uint16_t)payload_len);
	hdr[n + 2] = '\r';
	hdr[n + 3] = '\n';
	return (ssize_t)(n + 4);
}

ssize_t trojan_udp_decode(const uint8_t *in, size_t len, addr_dest *dest, size_t *payload_off,
                          size_t *payload_len)
{
	if (len == 0)
		return TROJAN_UDP_NEED_MORE;
	ssize_t span = addr_need(in, len);
	if (span < 0)
		return PROTO_ERR_MALFORMED;
	size_t a = (size_t)span;
	if (len < a)
		return TROJAN_UDP_NEED_MORE;
	addr_dest d;
	if (socks_addr_get(in, ADDR_UDP, &d) < 0)
		return PROTO_ERR_MALFORMED;
	if (len < a + 2)
		return TROJAN_UDP_NEED_MORE;
	size_t plen = bytes_get16(in + a);
	if (plen > TROJAN_UDP_PAYLOAD_MAX)
		return PROTO_ERR_TOO_BIG;
	if (!crlf_ok(in + a + 2, len - a - 2))
		return PROTO_ERR_MALFORMED;
	size_t total = a + 4 + plen;
	if (len < total)
		return TROJAN_UDP_NEED_MORE;
	*dest = d;
	*payload_off = a + 4;
	*payload_len = plen;
	return (ssize_t)total;
}
