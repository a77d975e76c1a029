/* socks_client.c - SOCKS5 client layers: method negotiation, RFC 1929 account, CONNECT or UDP ASSOCIATE. */
#include "proto/socks_client.h"

#include "base/bytes.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Wire values: RFC 1928 sections 3-6, RFC 1929 section 2. */
enum {
	VER5 = 0x05,
	AUTH_VER = 0x01,
	METHOD_NONE = 0x00,
	METHOD_USERPASS = 0x02,
	CMD_CONNECT = 0x01,
	CMD_UDP_ASSOCIATE = 0x03,
	ATYP_IPV4 = 0x01,
	ATYP_DOMAIN = 0x03,
	ATYP_IPV6 = 0x04,
	REP_OK = 0x00,
};

/* Every text this module shows, for logs and for tests to match word for
 * word; the first five are seed 000's. */
enum text {
	T_METHOD,
	T_ACCOUNT,
	T_REQUEST, /* a format: the REP code follows */
	T_EOF,
	T_RELAY_DOMAIN,
	T_REPLY,
	T_CREDENTIALS,
	T_COUNT_,
};

static const char *const TEXTS[T_COUNT_] = {
	[T_METHOD] = "auth method not supported",
	[T_ACCOUNT] = "server rejects account",
	[T_REQUEST] = "server rejects request: %u",
	[T_EOF] = "socks: server closed during the handshake",
	[T_RELAY_DOMAIN] = "socks: the relay address is a domain",
	[T_REPLY] = "socks: malformed server reply",
	[T_CREDENTIALS] = "socks: username or password longer than 255 bytes",
};

typedef enum state {
	ST_NEW,    /* start not called yet */
	ST_METHOD, /* greeting sent: waiting for VER METHOD */
	ST_AUTH,   /* account sent: waiting for VER STATUS */
	ST_REPLY,  /* request sent: waiting for the reply */
	ST_READY,
	ST_FAILED,
} state;

/* The largest message we send: the RFC 1929 request. */
#define MSG_MAX (3 + SOCKS_CLIENT_CREDENTIAL_MAX + SOCKS_CLIENT_CREDENTIAL_MAX)

typedef struct socks_client {
	layer base;
	bool udp;
	bool auth;          /* credentials set: offer only method 0x02 */
	bool creds_too_long; /* refused at start */
	state st;
	int err_code;        /* LAYER_ERR_* once failed */
	const char *err;     /* TEXTS entry or err_buf */
	char err_buf[40];
	addr_dest dest;      /* CONNECT: the target */
	addr_dest relay;     /* UDP ASSOCIATE: BND from the reply */
	uint8_t ulen, plen;
	char user[SOCKS_CLIENT_CREDENTIAL_MAX];
	char pass[SOCKS_CLIENT_CREDENTIAL_MAX];
	uint16_t msg_len;    /* the message being sent */
	uint16_t msg_off;    /* how much of it went down */
	uint8_t msg[MSG_MAX];
} socks_client;

static const layer_ops client_ops;

static void flush(socks_client *c, layer_buf *down)
{
	c->msg_off = (uint16_t)(c->msg_off + layer_buf_put(down, c->msg + c->msg_off,
	                                           (size_t)(c->msg_len - c->msg_off)));
}

static int fail(socks_client *c, int code, enum text t)
{
	c->st = ST_FAILED;
	c->err_code = code;
	c->err = TEXTS[t];
	return code;
}

static void queue(socks_client *c, const uint8_t *m, size_t n)
{
	assert(c->msg_off == c->msg_len && n <= MSG_MAX);
	memcpy(c->msg, m, n);
	c->msg_len = (uint16_t)n;
	c->msg_off = 0;
}

static void queue_auth(socks_client *c)
{
	uint8_t m[MSG_MAX];
	size_t n = 0;
	m[n++] = AUTH_VER;
	m[n++] = c->ulen;
	memcpy(m + n, c->user, c->ulen);
	n += c->ulen;
	m[n++] = c->plen;
	memcpy(m + n, c->pass, c->plen);
	n += c->plen;
	queue(c, m, n);
}

/* VER CMD RSV ATYP DST.ADDR DST.PORT; UDP ASSOCIATE names 0.0.0.0:0. */
static void queue_request(socks_client *c)
{
	uint8_t m[3 + 1 + 1 + ADDR_DOMAIN_MAX + 2];
	size_t n = 0;
	m[n++] = VER5;
	m[n++] = c->udp ? CMD_UDP_ASSOCIATE : CMD_CONNECT;
	m[n++] = 0;
	const addr_dest *d = &c->dest;
	switch (d->kind) {
	case ADDR_IPV6:
		m[n++] = ATYP_IPV6;
		memcpy(m + n, d->u.v6, 16);
		n += 16;
		break;
	case ADDR_DOMAIN:
		m[n++] = ATYP_DOMAIN;
		m[n++] = d->u.domain.len;
		memcpy(m + n, d->u.domain.name, d->u.domain.len);
		n += d->u.domain.len;
		break;
	default: /* IPv4, and UDP ASSOCIATE's zeroed dest */
		m[n++] = ATYP_IPV4;
		memcpy(m + n, d->u.v4, 4);
		n += 4;
		break;
	}
	m[n++] = (uint8_t)(d->port >> 8);
	m[n++] = (uint8_t)d->port;
	queue(c, m, n);
}

/* Bytes the reply VER REP RSV ATYP BND.ADDR BND.PORT spans once its ATYP
 * (and a domain's length) are in; 0 while they are not. */
static size_t reply_len(const uint8_t *in, size_t len)
{
	if (len < 4)
		return 0;
	switch (in[3]) {
	case ATYP_IPV4:
		return 4 + 4 + 2;
	case ATYP_IPV6:
		return 4 + 16 + 2;
	default: /* ATYP_DOMAIN: the caller refused the others */
		return len < 5 ? 0 : 4 + 1 + (size_t)in[4] + 2;
	}
}

/* One reply of the current state from in[0, len): returns the bytes it
 * took (> 0, the next message queued), 0 when it has not all arrived, or
 * a LAYER_ERR_* (the layer failed). Decides at the first deciding byte. */
static ssize_t step(socks_client *c, const uint8_t *in, size_t len)
{
	switch (c->st) {
	case ST_METHOD:
		if (len >= 1 && in[0] != VER5)
			return fail(c, LAYER_ERR_PROTO, T_REPLY);
		if (len < 2)
			return 0;
		if (in[1] != (c->auth ? METHOD_USERPASS : METHOD_NONE))
			return fail(c, LAYER_ERR_AUTH, T_METHOD);
		if (c->auth) {
			queue_auth(c);
			c->st = ST_AUTH;
		} else {
			queue_request(c);
			c->st = ST_REPLY;
		}
		return 2;
	case ST_AUTH:
		if (len < 2)
			return 0;
		if (in[1] != 0)
			return fail(c, LAYER_ERR_AUTH, T_ACCOUNT);
		queue_request(c);
		c->st = ST_REPLY;
		return 2;
	case ST_REPLY: {
		if (len >= 1 && in[0] != VER5)
			return fail(c, LAYER_ERR_PROTO, T_REPLY);
		if (len >= 2 && in[1] != REP_OK) {
			fail(c, LAYER_ERR_AUTH, T_REQUEST);
			int n = snprintf(c->err_buf, sizeof c->err_buf, TEXTS[T_REQUEST], in[1]);
			assert(n > 0 && (size_t)n < sizeof c->err_buf);
			(void)n;
			c->err = c->err_buf;
			return LAYER_ERR_AUTH;
		}
		if (len >= 4) {
			if (in[3] != ATYP_IPV4 && in[3] != ATYP_IPV6 && in[3] != ATYP_DOMAIN)
				return fail(c, LAYER_ERR_PROTO, T_REPLY);
			if (c->udp && in[3] == ATYP_DOMAIN)
				return fail(c, LAYER_ERR_PROTO, T_RELAY_DOMAIN);
		}
		size_t n = reply_len(in, len);
		if (n == 0 || len < n)
			return 0;
		if (c->udp) {
			addr_dest *r = &c->relay;
			*r = (addr_dest){.network = ADDR_UDP};
			if (in[3] == ATYP_IPV4) {
				r->kind = ADDR_IPV4;
				memcpy(r->u.v4, in + 4, 4);
			} else {
				r->kind = ADDR_IPV6;
				memcpy(r->u.v6, in + 4, 16);
			}
			r->port = bytes_get16(in + n - 2);
		}
		c->st = ST_READY;
		return (ssize_t)n;
	}
	default:
		return 0;
	}
}

static int client_start(layer *l, layer_buf *down)
{
	socks_client *c = (socks_client *)l;
	if (c->st != ST_NEW)
		return c->st == ST_FAILED ? c->err_code : LAYER_ERR_STATE;
	if (c->creds_too_long)
		return fail(c, LAYER_ERR_PROTO, T_CREDENTIALS);
	uint8_t greeting[3] = {VER5, 1, c->auth ? METHOD_USERPASS : METHOD_NONE};
	queue(c, greeting, sizeof greeting);
	c->st = ST_METHOD;
	flush(c, down);
	return 0;
}

static ssize_t client_from_below(layer *l, const uint8_t *in, size_t len, layer_buf *up,
                                 layer_buf *down)
{
	socks_client *c = (socks_client *)l;
	if (c->st == ST_FAILED)
		return c->err_code;
	if (c->st == ST_NEW)
		return 0;
	flush(c, down);
	size_t used = 0;
	while (c->st != ST_READY) {
		/* A reply that came before our message went out waits for it:
		 * the next message must not overwrite the one still unsent. */
		if (c->msg_off < c->msg_len)
			return (ssize_t)used;
		ssize_t r = step(c, in + used, len - used);
		if (r < 0)
			return r;
		if (r == 0)
			return (ssize_t)used;
		used += (size_t)r;
		flush(c, down);
	}
	return (ssize_t)(used + layer_buf_put(up, in + used, len - used));
}

static ssize_t client_from_above(layer *l, const uint8_t *in, size_t len, layer_buf *down)
{
	socks_client *c = (socks_client *)l;
	if (c->st == ST_FAILED)
		return c->err_code;
	if (c->st == ST_NEW)
		return 0;
	flush(c, down);
	if (c->st != ST_READY)
		return 0;
	return (ssize_t)layer_buf_put(down, in, len);
}

static bool client_ready(const layer *l)
{
	return ((const socks_client *)l)->st == ST_READY;
}

/* Past the CONNECT reply, bytes cross unchanged. Never for UDP ASSOCIATE:
 * its owner keeps reading the relay address from the layer
 * (socks_client_relay), so the layer must stay. */
static bool client_passthrough(const layer *l)
{
	const socks_client *c = (const socks_client *)l;
	return c->st == ST_READY && !c->udp && c->msg_off == c->msg_len;
}

static const char *client_error(const layer *l)
{
	return ((const socks_client *)l)->err;
}

static void client_free(layer *l)
{
	free(l);
}

static const layer_ops client_ops = {
	.name = "socks",
	.start = client_start,
	.from_below = client_from_below,
	.from_above = client_from_above,
	.ready = client_ready,
	.passthrough = client_passthrough,
	.shutdown = NULL,
	.error = client_error,
	.free = client_free,
};

static socks_client *make(const char *username, const char *password)
{
	socks_client *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->base.ops = &client_ops;
	if (username && username[0]) {
		size_t ul = strlen(username), pl = password ? strlen(password) : 0;
		c->auth = true;
		if (ul > SOCKS_CLIENT_CREDENTIAL_MAX || pl > SOCKS_CLIENT_CREDENTIAL_MAX) {
			c->creds_too_long = true;
		} else {
			c->ulen = (uint8_t)ul;
			c->plen = (uint8_t)pl;
			memcpy(c->user, username, ul);
			if (pl)
				memcpy(c->pass, password, pl);
		}
	}
	return c;
}

layer *socks_client_new(const addr_dest *dest, const char *username, const char *password)
{
	switch (dest->kind) {
	case ADDR_IPV4:
	case ADDR_IPV6:
		break;
	case ADDR_DOMAIN:
		if (dest->u.domain.len == 0 || memchr(dest->u.domain.name, '\0', dest->u.domain.len))
			return NULL;
		break;
	default:
		return NULL;
	}
	socks_client *c = make(username, password);
	if (!c)
		return NULL;
	c->dest = *dest;
	return &c->base;
}

layer *socks_client_udp_new(const char *username, const char *password)
{
	socks_client *c = make(username, password);
	if (!c)
		return NULL;
	c->udp = true;
	c->dest = (addr_dest){.kind = ADDR_IPV4, .network = ADDR_UDP}; /* 0.0.0.0:0 */
	return &c->base;
}

const addr_dest *socks_client_relay(const layer *l)
{
	assert(l->ops == &client_ops);
	const socks_client *c = (const socks_client *)l;
	return c->udp && c->st == ST_READY ? &c->relay : NULL;
}

bool socks_client_in_handshake(const layer *l)
{
	assert(l->ops == &client_ops);
	const socks_client *c = (const socks_client *)l;
	return c->st != ST_READY && c->st != ST_FAILED;
}

int socks_client_eof(layer *l)
{
	assert(l->ops == &client_ops);
	socks_client *c = (socks_client *)l;
	if (!socks_client_in_handshake(l))
		return 0;
	return fail(c, LAYER_ERR_CLOSED, T_EOF);
}
