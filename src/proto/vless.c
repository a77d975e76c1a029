/* vless.c - VLESS client layer, server core and UDP length framing. */
#include "proto/vless.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "crypto/ossl.h"

#include "base/bytes.h"
#include "proto/mux.h"

/* Wire values: Xray-core proxy/vless/encoding and common/protocol/headers.go. */
enum {
	CMD_TCP = 0x01,
	CMD_UDP = 0x02,
	CMD_MUX = 0x03, /* a Mux.Cool session, no address (0x04 Reverse is refused) */

	ATYP_IPV4 = 0x01,
	ATYP_DOMAIN = 0x02,
	ATYP_IPV6 = 0x03,

	/* Offsets in a request without addons. */
	OFF_UUID = 1,
	OFF_ADDONS = OFF_UUID + VLESS_UUID_LEN, /* M */
	OFF_CMD = OFF_ADDONS + 1,
	OFF_PORT = OFF_CMD + 1,
	OFF_ATYP = OFF_PORT + 2,
	OFF_ADDR = OFF_ATYP + 1,
};

/* Every text this module shows, for logs and for tests to match word for word. */
enum text {
	T_VERSION,
	T_USER,
	T_ADDONS,
	T_COMMAND,
	T_ADDRESS_TYPE,
	T_DOMAIN,
	T_STATE,
	T_RESPONSE_VERSION,
	T_COUNT_,
};

static const char *const TEXTS[T_COUNT_] = {
	[T_VERSION] = "vless: unsupported version",
	[T_USER] = "vless: unknown user",
	[T_ADDONS] = "vless: request addons are not supported",
	[T_COMMAND] = "vless: command not supported",
	[T_ADDRESS_TYPE] = "vless: address type not supported",
	[T_DOMAIN] = "vless: empty or malformed domain name",
	[T_STATE] = "vless: called after the request was decided",
	[T_RESPONSE_VERSION] = "vless: unexpected response version",
};

int vless_uuid_parse(const char *text, uint8_t out[VLESS_UUID_LEN])
{
	size_t len = strlen(text);
	bool dashed = len == VLESS_UUID_TEXT_LEN;
	if (!dashed && len != 2 * VLESS_UUID_LEN)
		return -1;
	uint8_t u[VLESS_UUID_LEN];
	size_t i = 0;
	for (size_t k = 0; k < VLESS_UUID_LEN; k++) {
		/* Hyphens sit before the 5th, 7th, 9th and 11th byte. */
		if (dashed && (k == 4 || k == 6 || k == 8 || k == 10)) {
			if (text[i] != '-')
				return -1;
			i++;
		}
		int hi = bytes_hex_digit(text[i]), lo = bytes_hex_digit(text[i + 1]);
		if (hi < 0 || lo < 0)
			return -1;
		u[k] = (uint8_t)(hi << 4 | lo);
		i += 2;
	}
	memcpy(out, u, VLESS_UUID_LEN);
	return 0;
}

/* ---- addresses: Port(2) AddrType(1) Address ---- */

/* Wire length of AddrType Address for d, or 0 when d is unset or not a
 * valid domain. */
static size_t addr_wire_len(const addr_dest *d)
{
	switch (d->kind) {
	case ADDR_IPV4:
		return 1 + 4;
	case ADDR_IPV6:
		return 1 + 16;
	case ADDR_DOMAIN:
		if (d->u.domain.len == 0 || memchr(d->u.domain.name, '\0', d->u.domain.len))
			return 0;
		return 1 + 1 + (size_t)d->u.domain.len;
	default:
		return 0;
	}
}

/* ---- client layer ---- */

typedef struct vless_client {
	layer base;
	bool started;
	bool got_response; /* the response header was skipped */
	const char *err;
	uint16_t req_len;
	uint16_t req_off;
	uint8_t req[VLESS_REQUEST_MAX];
} vless_client;

static void flush(vless_client *c, layer_buf *down)
{
	c->req_off = (uint16_t)(c->req_off + layer_buf_put(down, c->req + c->req_off,
	                                           (size_t)(c->req_len - c->req_off)));
}

static int client_start(layer *l, layer_buf *down)
{
	vless_client *c = (vless_client *)l;
	c->started = true;
	flush(c, down);
	return 0;
}

static ssize_t client_from_below(layer *l, const uint8_t *in, size_t len, layer_buf *up,
                                 layer_buf *down)
{
	vless_client *c = (vless_client *)l;
	if (c->err)
		return LAYER_ERR_PROTO;
	if (!c->started)
		return 0;
	flush(c, down);
	if (c->req_off < c->req_len)
		return 0; /* the response is read only once the whole request is out */
	size_t used = 0;
	if (!c->got_response) {
		if (len >= 1 && in[0] != VLESS_VERSION) {
			c->err = TEXTS[T_RESPONSE_VERSION];
			return LAYER_ERR_PROTO;
		}
		if (len < 2 || len < 2 + (size_t)in[1])
			return 0; /* the header has not all arrived */
		used = 2 + (size_t)in[1];
		c->got_response = true;
	}
	return (ssize_t)(used + layer_buf_put(up, in + used, len - used));
}

static ssize_t client_from_above(layer *l, const uint8_t *in, size_t len, layer_buf *down)
{
	vless_client *c = (vless_client *)l;
	if (c->err)
		return LAYER_ERR_PROTO;
	if (!c->started)
		return 0;
	flush(c, down);
	if (c->req_off < c->req_len)
		return 0;
	return (ssize_t)layer_buf_put(down, in, len);
}

static bool client_ready(const layer *l)
{
	const vless_client *c = (const vless_client *)l;
	return c->started && !c->err;
}

/* Past the request and the response header, bytes cross unchanged. */
static bool client_passthrough(const layer *l)
{
	const vless_client *c = (const vless_client *)l;
	return c->started && !c->err && c->got_response && c->req_off == c->req_len;
}

static const char *client_error(const layer *l)
{
	return ((const vless_client *)l)->err;
}

static void client_free(layer *l)
{
	free(l);
}

static const layer_ops client_ops = {
	.name = "vless",
	.start = client_start,
	.from_below = client_from_below,
	.from_above = client_from_above,
	.ready = client_ready,
	.passthrough = client_passthrough,
	.shutdown = NULL,
	.error = client_error,
	.free = client_free,
};

layer *vless_client_new(const uint8_t uuid[VLESS_UUID_LEN], const addr_dest *dest, bool udp)
{
	if (addr_wire_len(dest) == 0)
		return NULL;
	vless_client *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->base.ops = &client_ops;
	uint8_t *p = c->req;
	*p++ = VLESS_VERSION;
	memcpy(p, uuid, VLESS_UUID_LEN);
	p += VLESS_UUID_LEN;
	*p++ = 0; /* no addons */
	if (!udp && mux_is_session_dest(dest)) {
		*p++ = CMD_MUX; /* a Mux.Cool session: no address */
		c->req_len = (uint16_t)(p - c->req);
		return &c->base;
	}
	*p++ = udp ? CMD_UDP : CMD_TCP;
	bytes_put16(p, dest->port);
	p += 2;
	switch (dest->kind) {
	case ADDR_IPV4:
		*p++ = ATYP_IPV4;
		memcpy(p, dest->u.v4, 4);
		p += 4;
		break;
	case ADDR_IPV6:
		*p++ = ATYP_IPV6;
		memcpy(p, dest->u.v6, 16);
		p += 16;
		break;
	default:
		*p++ = ATYP_DOMAIN;
		*p++ = dest->u.domain.len;
		memcpy(p, dest->u.domain.name, dest->u.domain.len);
		p += dest->u.domain.len;
		break;
	}
	c->req_len = (uint16_t)(p - c->req);
	assert(c->req_len <= VLESS_REQUEST_MAX);
	return &c->base;
}

/* ---- server core ---- */

void vless_server_init(vless_server *s, const uint8_t (*uuids)[VLESS_UUID_LEN], size_t n)
{
	*s = (vless_server){.uuids = uuids, .n_users = n, .state = VLESS_ST_REQUEST};
}

/* The index of the account with this UUID, or -1; every account is
 * compared in constant time. */
static int find_user(const vless_server *s, const uint8_t *id)
{
	int user = -1;
	for (size_t i = 0; i < s->n_users; i++)
		if (CRYPTO_memcmp(s->uuids[i], id, VLESS_UUID_LEN) == 0 && user < 0)
			user = (int)i;
	return user;
}

/* What parse decided besides "the request is n bytes" and "not yet". */
enum { REFUSE = -100 };

/* Parses in[0, len) in wire order, returning at the first byte that
 * decides: the request's length (ev filled), 0 when undecided, REFUSE for
 * an unknown user, or a PROTO_ERR_* with *why set. */
static ssize_t parse(const vless_server *s, const uint8_t *in, size_t len, proto_event *ev,
                     enum text *why)
{
	if (len < 1)
		return 0;
	if (in[0] != VLESS_VERSION) {
		*why = T_VERSION;
		return PROTO_ERR_MALFORMED;
	}
	if (len < OFF_ADDONS)
		return 0;
	int user = find_user(s, in + OFF_UUID);
	if (user < 0) {
		*why = T_USER;
		return REFUSE;
	}
	if (len <= OFF_ADDONS)
		return 0;
	if (in[OFF_ADDONS] != 0) {
		*why = T_ADDONS;
		return PROTO_ERR_TOO_BIG;
	}
	if (len <= OFF_CMD)
		return 0;
	uint8_t cmd = in[OFF_CMD];
	if (cmd != CMD_TCP && cmd != CMD_UDP && cmd != CMD_MUX) {
		*why = T_COMMAND;
		return PROTO_ERR_MALFORMED;
	}
	if (cmd == CMD_MUX) {
		mux_session_dest(&ev->dest);
		ev->kind = PROTO_EV_OPEN;
		ev->cmd = PROTO_CMD_CONNECT;
		ev->user = user;
		return OFF_PORT;
	}
	if (len <= OFF_ATYP)
		return 0;
	size_t end;
	switch (in[OFF_ATYP]) {
	case ATYP_IPV4:
		end = OFF_ADDR + 4;
		break;
	case ATYP_IPV6:
		end = OFF_ADDR + 16;
		break;
	case ATYP_DOMAIN:
		if (len <= OFF_ADDR)
			return 0;
		if (in[OFF_ADDR] == 0) {
			*why = T_DOMAIN;
			return PROTO_ERR_MALFORMED;
		}
		end = OFF_ADDR + 1 + (size_t)in[OFF_ADDR];
		break;
	default:
		*why = T_ADDRESS_TYPE;
		return PROTO_ERR_MALFORMED;
	}
	if (len < end)
		return 0;
	addr_dest *d = &ev->dest;
	*d = (addr_dest){.network = cmd == CMD_UDP ? ADDR_UDP : ADDR_TCP};
	uint16_t port = bytes_get16(in + OFF_PORT);
	switch (in[OFF_ATYP]) {
	case ATYP_IPV4:
		d->kind = ADDR_IPV4;
		memcpy(d->u.v4, in + OFF_ADDR, 4);
		d->port = port;
		break;
	case ATYP_IPV6:
		d->kind = ADDR_IPV6;
		memcpy(d->u.v6, in + OFF_ADDR, 16);
		d->port = port;
		break;
	default:
		if (addr_dest_set_domain(d, (const char *)in + OFF_ADDR + 1, in[OFF_ADDR], port) != 0) {
			*d = (addr_dest){0};
			*why = T_DOMAIN;
			return PROTO_ERR_MALFORMED;
		}
		break;
	}
	ev->kind = PROTO_EV_OPEN;
	ev->cmd = cmd == CMD_UDP ? PROTO_CMD_UDP_ASSOCIATE : PROTO_CMD_CONNECT;
	ev->user = user;
	return (ssize_t)end;
}

ssize_t vless_server_feed(vless_server *s, const uint8_t *in, size_t len, proto_out *out,
                          proto_event *ev)
{
	out->len = 0;
	*ev = (proto_event){.kind = PROTO_EV_NONE, .user = -1};
	if (s->state != VLESS_ST_REQUEST) {
		ev->kind = PROTO_EV_CLOSE;
		ev->reason = TEXTS[T_STATE];
		return PROTO_ERR_STATE;
	}
	enum text why = T_VERSION;
	ssize_t n = parse(s, in, len, ev, &why);
	if (n > 0) {
		s->state = VLESS_ST_DIAL;
		return n;
	}
	if (n == 0)
		return 0;
	*ev = (proto_event){.kind = PROTO_EV_CLOSE, .user = -1, .reason = TEXTS[why]};
	s->state = VLESS_ST_CLOSED;
	return n == REFUSE ? 0 : n;
}

int vless_server_opened(vless_server *s, proto_out *out)
{
	out->len = 0;
	if (s->state != VLESS_ST_DIAL)
		return PROTO_ERR_STATE;
	out->buf[0] = VLESS_VERSION;
	out->buf[1] = 0; /* no addons */
	out->len = 2;
	s->state = VLESS_ST_RELAY;
	return 0;
}

/* ---- UDP framing ---- */

ssize_t vless_udp_encode(size_t payload_len, uint8_t *hdr, size_t cap)
{
	if (cap < VLESS_UDP_HEADER_LEN || payload_len > VLESS_UDP_PAYLOAD_MAX)
		return PROTO_ERR_TOO_BIG;
	bytes_put16(hdr, (uint16_t)payload_len);
	return VLESS_UDP_HEADER_LEN;
}

ssize_t vless_udp_decode(const uint8_t *in, size_t len, size_t *payload_len)
{
	if (len < VLESS_UDP_HEADER_LEN)
		return VLESS_UDP_NEED_MORE;
	size_t n = bytes_get16(in);
	if (n > VLESS_UDP_PAYLOAD_MAX)
		return PROTO_ERR_TOO_BIG;
	if (len < VLESS_UDP_HEADER_LEN + n)
		return VLESS_UDP_NEED_MORE;
	*payload_len = n;
	return (ssize_t)(VLESS_UDP_HEADER_LEN + n);
}
