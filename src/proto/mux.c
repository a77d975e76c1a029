/* mux.c - Mux.Cool frame decoder and encoders, and the client's and server's sub-flow tables. */
#include "proto/mux.h"

#include <assert.h>
#include <string.h>
#include <strings.h>

#include "base/bytes.h"

/* Wire values: v2ray-core common/mux/frame.go and common/protocol/payload.go. */
enum {
	ST_NEW = 0x01,
	ST_KEEP = 0x02,
	ST_END = 0x03,
	ST_KEEPALIVE = 0x04,

	OPT_DATA = 0x01,
	OPT_ERROR = 0x02,

	NET_TCP = 0x01,
	NET_UDP = 0x02,

	ATYP_IPV4 = 0x01,
	ATYP_DOMAIN = 0x02,
	ATYP_IPV6 = 0x03,

	/* Offsets in the metadata. */
	M_ID = 0,
	M_STATUS = 2,
	M_OPTION = 3,
	M_NETWORK = 4,
	M_PORT = 5,
	M_MIN = 4,     /* ID Status Option */
	M_NEW_MIN = 8, /* v2ray's smallest New: ... Network Port AddrType */
};

/* Every text this module shows, for logs and for tests to match word for word. */
enum text {
	T_META_TOO_BIG,
	T_META_SHORT,
	T_STATUS,
	T_NETWORK,
	T_ADDRESS_TYPE,
	T_DOMAIN,
	T_ADDRESS_SHORT,
	T_DATA_TOO_BIG,
	T_ID_IN_USE,
	T_TOO_MANY,
	T_COUNT_,
};

static const char *const TEXTS[T_COUNT_] = {
	[T_META_TOO_BIG] = "mux: frame metadata longer than 512 bytes",
	[T_META_SHORT] = "mux: frame metadata too short",
	[T_STATUS] = "mux: unknown frame status",
	[T_NETWORK] = "mux: unknown network type",
	[T_ADDRESS_TYPE] = "mux: address type not supported",
	[T_DOMAIN] = "mux: empty or malformed domain name",
	[T_ADDRESS_SHORT] = "mux: address runs past the frame metadata",
	[T_DATA_TOO_BIG] = "mux: frame data longer than 8192 bytes",
	[T_ID_IN_USE] = "mux: new sub-flow on an id already open",
	[T_TOO_MANY] = "mux: too many sub-flows on one connection",
};

/* ---- addresses: Port(2) AddrType(1) Address ---- */

/* Wire length of Port AddrType Address for d, or 0 when d is unset or not
 * a valid domain. */
static size_t addr_len(const addr_dest *d)
{
	switch (d->kind) {
	case ADDR_IPV4:
		return 2 + 1 + 4;
	case ADDR_IPV6:
		return 2 + 1 + 16;
	case ADDR_DOMAIN:
		if (d->u.domain.len == 0 || memchr(d->u.domain.name, '\0', d->u.domain.len))
			return 0;
		return 2 + 1 + 1 + (size_t)d->u.domain.len;
	default:
		return 0;
	}
}

/* Writes d (addr_len(d) > 0) at p; returns the bytes written. */
static size_t addr_put(const addr_dest *d, uint8_t *p)
{
	bytes_put16(p, d->port);
	switch (d->kind) {
	case ADDR_IPV4:
		p[2] = ATYP_IPV4;
		memcpy(p + 3, d->u.v4, 4);
		return 3 + 4;
	case ADDR_IPV6:
		p[2] = ATYP_IPV6;
		memcpy(p + 3, d->u.v6, 16);
		return 3 + 16;
	default:
		p[2] = ATYP_DOMAIN;
		p[3] = d->u.domain.len;
		memcpy(p + 4, d->u.domain.name, d->u.domain.len);
		return 4 + (size_t)d->u.domain.len;
	}
}

/* Reads the address block at p, which has avail (>= 3) bytes of metadata
 * left, into *d with network net. Returns 0, or -1 with *why set. */
static int addr_get(const uint8_t *p, size_t avail, addr_network net, addr_dest *d,
                    enum text *why)
{
	uint16_t port = bytes_get16(p);
	*d = (addr_dest){.network = net, .port = port};
	switch (p[2]) {
	case ATYP_IPV4:
		if (avail < 3 + 4)
			break;
		d->kind = ADDR_IPV4;
		memcpy(d->u.v4, p + 3, 4);
		return 0;
	case ATYP_IPV6:
		if (avail < 3 + 16)
			break;
		d->kind = ADDR_IPV6;
		memcpy(d->u.v6, p + 3, 16);
		return 0;
	case ATYP_DOMAIN:
		if (avail < 4 || avail < 4 + (size_t)p[3])
			break;
		if (addr_dest_set_domain(d, (const char *)p + 4, p[3], port) != 0) {
			*d = (addr_dest){0};
			*why = T_DOMAIN;
			return -1;
		}
		d->network = net;
		return 0;
	default:
		*why = T_ADDRESS_TYPE;
		return -1;
	}
	*d = (addr_dest){0};
	*why = T_ADDRESS_SHORT;
	return -1;
}

/* ---- decoder ---- */

/* Reads the metadata m[0, mlen) (mlen >= M_MIN) into ev: kind from the
 * status, id, error bit, destination. Returns 0, or -1 with *why set. */
static int meta_get(const uint8_t *m, size_t mlen, mux_event *ev, enum text *why)
{
	ev->id = bytes_get16(m + M_ID);
	switch (m[M_STATUS]) {
	case ST_NEW:
		if (mlen < M_NEW_MIN) {
			*why = T_META_SHORT;
			return -1;
		}
		if (m[M_NETWORK] != NET_TCP && m[M_NETWORK] != NET_UDP) {
			*why = T_NETWORK;
			return -1;
		}
		ev->kind = MUX_EV_OPEN;
		return addr_get(m + M_PORT, mlen - M_PORT, m[M_NETWORK] == NET_UDP ? ADDR_UDP : ADDR_TCP,
		                &ev->dest, why);
	case ST_KEEP:
		ev->kind = MUX_EV_DATA;
		/* Xray's addressed UDP Keep; any other extra bytes are ignored,
		 * as both v2fly and Xray do. */
		if (mlen <= M_NETWORK || m[M_NETWORK] != NET_UDP)
			return 0;
		if (mlen < M_NEW_MIN) {
			*why = T_META_SHORT;
			return -1;
		}
		return addr_get(m + M_PORT, mlen - M_PORT, ADDR_UDP, &ev->dest, why);
	case ST_END:
		ev->kind = MUX_EV_END;
		ev->error = (m[M_OPTION] & OPT_ERROR) != 0;
		return 0;
	case ST_KEEPALIVE:
		ev->kind = MUX_EV_KEEPALIVE;
		return 0;
	default:
		*why = T_STATUS;
		return -1;
	}
}

ssize_t mux_decode(const uint8_t *in, size_t len, mux_event *ev)
{
	*ev = (mux_event){.kind = MUX_EV_NONE};
	if (len < 2)
		return MUX_NEED_MORE;
	size_t mlen = bytes_get16(in);
	enum text why = T_STATUS;
	ssize_t err = PROTO_ERR_MALFORMED;
	if (mlen > MUX_META_MAX) {
		why = T_META_TOO_BIG;
		err = PROTO_ERR_TOO_BIG;
		goto fail;
	}
	if (mlen < M_MIN) {
		why = T_META_SHORT;
		err = PROTO_ERR_MALFORMED;
		goto fail;
	}
	if (len < 2 + mlen)
		return MUX_NEED_MORE;
	const uint8_t *m = in + 2;
	if (meta_get(m, mlen, ev, &why) != 0) {
		err = PROTO_ERR_MALFORMED;
		goto fail;
	}
	size_t p = 2 + mlen;
	if (m[M_OPTION] & OPT_DATA) {
		if (len < p + 2)
			goto more;
		size_t dlen = bytes_get16(in + p);
		if (dlen > MUX_DATA_MAX) {
			why = T_DATA_TOO_BIG;
			err = PROTO_ERR_TOO_BIG;
			goto fail;
		}
		if (len < p + 2 + dlen)
			goto more;
		/* Data in End and KeepAlive is dropped (muxcool.md; v2ray discards it). */
		if (ev->kind == MUX_EV_OPEN || ev->kind == MUX_EV_DATA) {
			ev->has_data = true;
			ev->data = in + p + 2;
			ev->data_len = dlen;
		}
		p += 2 + dlen;
	} else if (ev->kind == MUX_EV_DATA) {
		ev->kind = MUX_EV_NONE; /* a Keep without data says nothing */
	}
	return (ssize_t)p;

more:
	*ev = (mux_event){.kind = MUX_EV_NONE};
	return MUX_NEED_MORE;
fail:
	*ev = (mux_event){.kind = MUX_EV_NONE, .reason = TEXTS[why]};
	return err;
}

/* ---- encoders ---- */

/* Writes MetaLen and the metadata ID Status Option [Network addr] at p,
 * with net and addr only when addr != NULL; returns the bytes written. */
static size_t meta_put(uint8_t *p, uint16_t id, uint8_t status, uint8_t option, uint8_t net,
                       const addr_dest *addr)
{
	size_t n = 2;
	bytes_put16(p + n, id);
	p[n + M_STATUS] = status;
	p[n + M_OPTION] = option;
	n += M_MIN;
	if (addr) {
		p[n++] = net;
		n += addr_put(addr, p + n);
	}
	bytes_put16(p, (uint16_t)(n - 2));
	return n;
}

/* Appends DataLen and data[0, len) at p; returns the bytes written. */
static size_t data_put(uint8_t *p, const uint8_t *data, size_t len)
{
	bytes_put16(p, (uint16_t)len);
	if (len)
		memcpy(p + 2, data, len);
	return 2 + len;
}

ssize_t mux_encode_new(uint16_t id, const addr_dest *dest, const uint8_t *data, size_t len,
                       uint8_t *out, size_t cap)
{
	size_t alen = addr_len(dest);
	if (alen == 0)
		return PROTO_ERR_MALFORMED;
	bool udp = dest->network == ADDR_UDP;
	if (data && len > (udp ? MUX_UDP_PAYLOAD_MAX : MUX_DATA_MAX))
		return PROTO_ERR_TOO_BIG;
	size_t total = 2 + M_MIN + 1 + alen + (data ? 2 + len : 0);
	if (cap < total)
		return PROTO_ERR_TOO_BIG;
	size_t n = meta_put(out, id, ST_NEW, data ? OPT_DATA : 0, udp ? NET_UDP : NET_TCP, dest);
	if (data)
		n += data_put(out + n, data, len);
	assert(n == total);
	return (ssize_t)n;
}

size_t mux_encode_stream(uint16_t id, const uint8_t *data, size_t len, uint8_t *out, size_t cap,
                         size_t *used)
{
	enum { HDR = 2 + M_MIN + 2 }; /* MetaLen, ID Status Option, DataLen */
	size_t w = 0, u = 0;
	while (u < len && cap - w > HDR) {
		size_t chunk = len - u;
		if (chunk > MUX_DATA_MAX)
			chunk = MUX_DATA_MAX;
		if (chunk > cap - w - HDR)
			chunk = cap - w - HDR;
		w += meta_put(out + w, id, ST_KEEP, OPT_DATA, 0, NULL);
		w += data_put(out + w, data + u, chunk);
		u += chunk;
	}
	*used = u;
	return w;
}

ssize_t mux_encode_datagram(uint16_t id, const addr_dest *addr, const uint8_t *data, size_t len,
                            uint8_t *out, size_t cap)
{
	size_t alen = 0;
	if (addr) {
		alen = addr_len(addr);
		if (alen == 0)
			return PROTO_ERR_MALFORMED;
		alen += 1; /* the network byte */
	}
	if (len > MUX_UDP_PAYLOAD_MAX || cap < 2 + M_MIN + alen + 2 + len)
		return PROTO_ERR_TOO_BIG;
	size_t n = meta_put(out, id, ST_KEEP, OPT_DATA, NET_UDP, addr);
	n += data_put(out + n, data, len);
	return (ssize_t)n;
}

ssize_t mux_encode_end(uint16_t id, bool error, uint8_t *out, size_t cap)
{
	if (cap < MUX_SHORT_FRAME_LEN)
		return PROTO_ERR_TOO_BIG;
	return (ssize_t)meta_put(out, id, ST_END, error ? OPT_ERROR : 0, 0, NULL);
}

ssize_t mux_encode_keepalive(uint8_t *out, size_t cap)
{
	if (cap < MUX_SHORT_FRAME_LEN)
		return PROTO_ERR_TOO_BIG;
	return (ssize_t)meta_put(out, 0, ST_KEEPALIVE, 0, 0, NULL);
}

/* ---- both sides ---- */

/* The frame in ev is dropped: nothing for the shell. */
static void drop(mux_event *ev)
{
	*ev = (mux_event){.kind = MUX_EV_NONE, .id = ev->id};
}

/* Writes End for id into out (which always has room for one). */
static void put_end(uint16_t id, bool error, proto_out *out)
{
	ssize_t n = mux_encode_end(id, error, out->buf, sizeof out->buf);
	assert(n == MUX_SHORT_FRAME_LEN);
	out->len = (size_t)n;
}

/* ---- client side ---- */

void mux_client_init(mux_client *c, unsigned concurrency)
{
	if (concurrency > MUX_CLIENT_SUBS_TOTAL)
		concurrency = MUX_CLIENT_SUBS_TOTAL;
	*c = (mux_client){.concurrency = (uint16_t)concurrency};
}

bool mux_client_is_open(const mux_client *c, uint16_t id)
{
	if (id == 0 || id > MUX_CLIENT_SUBS_TOTAL)
		return false;
	unsigned b = (unsigned)id - 1;
	return (c->open[b / 32] >> (b % 32)) & 1;
}

static void client_mark(mux_client *c, uint16_t id, bool open)
{
	unsigned b = (unsigned)id - 1;
	if (open)
		c->open[b / 32] |= UINT32_C(1) << (b % 32);
	else
		c->open[b / 32] &= ~(UINT32_C(1) << (b % 32));
}

bool mux_client_full(const mux_client *c)
{
	unsigned conc = c->concurrency ? c->concurrency : MUX_CONCURRENCY_DEFAULT;
	return c->n_open >= conc || c->last_id >= MUX_CLIENT_SUBS_TOTAL;
}

bool mux_client_idle(const mux_client *c)
{
	return c->n_open == 0;
}

ssize_t mux_client_open(mux_client *c, const addr_dest *dest, const uint8_t *data, size_t len,
                        uint8_t *out, size_t cap, uint16_t *id)
{
	if (mux_client_full(c))
		return PROTO_ERR_STATE;
	uint16_t next = (uint16_t)(c->last_id + 1);
	ssize_t n = mux_encode_new(next, dest, data, len, out, cap);
	if (n < 0)
		return n;
	c->last_id = next;
	c->n_open++;
	client_mark(c, next, true);
	*id = next;
	return n;
}

int mux_client_end(mux_client *c, uint16_t id, bool error, proto_out *out)
{
	out->len = 0;
	if (!mux_client_is_open(c, id))
		return PROTO_ERR_STATE;
	client_mark(c, id, false);
	c->n_open--;
	put_end(id, error, out);
	return 0;
}

ssize_t mux_client_feed(mux_client *c, const uint8_t *in, size_t len, mux_event *ev,
                        proto_out *out)
{
	out->len = 0;
	ssize_t n = mux_decode(in, len, ev);
	if (n <= 0)
		return n;
	switch (ev->kind) {
	case MUX_EV_OPEN:
		drop(ev); /* the server cannot use New (muxcool.md) */
		break;
	case MUX_EV_DATA:
		if (!mux_client_is_open(c, ev->id)) {
			drop(ev);
			put_end(ev->id, false, out);
		}
		break;
	case MUX_EV_END:
		if (mux_client_is_open(c, ev->id)) {
			client_mark(c, ev->id, false);
			c->n_open--;
		} else {
			drop(ev);
		}
		break;
	default:
		break;
	}
	return n;
}

/* ---- server side ---- */

void mux_server_init(mux_server *s)
{
	s->n_open = 0;
}

/* The index of id in s->subs, or -1. */
static int find(const mux_server *s, uint16_t id)
{
	for (size_t i = 0; i < s->n_open; i++)
		if (s->subs[i].id == id)
			return (int)i;
	return -1;
}

static void forget(mux_server *s, int i)
{
	s->subs[i] = s->subs[--s->n_open];
}

bool mux_server_is_open(const mux_server *s, uint16_t id, addr_network *network)
{
	int i = find(s, id);
	if (i < 0)
		return false;
	if (network)
		*network = s->subs[i].network;
	return true;
}

size_t mux_server_count(const mux_server *s)
{
	return s->n_open;
}

ssize_t mux_server_feed(mux_server *s, const uint8_t *in, size_t len, mux_event *ev,
                        proto_out *out)
{
	out->len = 0;
	ssize_t n = mux_decode(in, len, ev);
	if (n <= 0)
		return n;
	int i = find(s, ev->id);
	switch (ev->kind) {
	case MUX_EV_OPEN:
		if (i >= 0) {
			*ev = (mux_event){.kind = MUX_EV_NONE, .id = ev->id, .reason = TEXTS[T_ID_IN_USE]};
			return PROTO_ERR_MALFORMED;
		}
		if (s->n_open >= MUX_SERVER_SUBS_MAX) {
			*ev = (mux_event){.kind = MUX_EV_REFUSED, .id = ev->id, .reason = TEXTS[T_TOO_MANY]};
			put_end(ev->id, true, out);
			break;
		}
		s->subs[s->n_open++] = (mux_sub){.id = ev->id, .network = ev->dest.network};
		break;
	case MUX_EV_DATA:
		if (i < 0) {
			drop(ev);
			put_end(ev->id, false, out);
		}
		break;
	case MUX_EV_END:
		if (i >= 0)
			forget(s, i);
		else
			drop(ev);
		break;
	default:
		break;
	}
	return n;
}

int mux_server_end(mux_server *s, uint16_t id, bool error, proto_out *out)
{
	out->len = 0;
	int i = find(s, id);
	if (i < 0)
		return PROTO_ERR_STATE;
	forget(s, i);
	put_end(id, error, out);
	return 0;
}

void mux_session_dest(addr_dest *d)
{
	*d = (addr_dest){0};
	if (addr_dest_set_domain(d, MUX_COOL_DOMAIN, sizeof MUX_COOL_DOMAIN - 1, MUX_COOL_PORT))
		*d = (addr_dest){0}; /* never: the name is valid */
	d->network = ADDR_TCP;
}

bool mux_is_session_dest(const addr_dest *d)
{
	return d->kind == ADDR_DOMAIN && d->u.domain.len == sizeof MUX_COOL_DOMAIN - 1 &&
	       strncasecmp(d->u.domain.name, MUX_COOL_DOMAIN, sizeof MUX_COOL_DOMAIN - 1) == 0;
}
