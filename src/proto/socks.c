/* socks.c - SOCKS server core: SOCKS5 + RFC 1929 accounts, SOCKS4/4a CONNECT, UDP headers. */
#include "proto/socks.h"

#include "base/bytes.h"
#include "proto/socks_addr.h"

#include <assert.h>
#include <string.h>

/* Wire values: RFC 1928 sections 3-7, RFC 1929 section 2, and the SOCKS4 and
 * SOCKS4A protocol documents (Ying-Da Lee). */
enum {
	VER4 = 0x04,
	VER5 = 0x05,
	AUTH_VER = 0x01, /* RFC 1929: the subnegotiation's own version */
	AUTH_OK = 0x00,
	AUTH_FAILED = 0x01, /* any non-zero STATUS is a failure; the client must close */

	METHOD_NONE = 0x00,
	METHOD_USERPASS = 0x02,
	METHOD_REFUSED = 0xff,

	CMD_CONNECT = 0x01,
	CMD_UDP_ASSOCIATE = 0x03, /* BIND (0x02) is refused like any unknown command */

	REP_OK = 0x00,
	REP_GENERAL = 0x01,
	REP_NOT_ALLOWED = 0x02,
	REP_NET_UNREACHABLE = 0x03,
	REP_HOST_UNREACHABLE = 0x04,
	REP_REFUSED = 0x05,
	REP_TTL_EXPIRED = 0x06,
	REP_CMD = 0x07,
	REP_ATYP = 0x08,

	S4_HEADER_LEN = 8, /* VN CD DSTPORT(2) DSTIP(4) */
	S4_GRANTED = 0x5a, /* 90 */
	S4_REJECTED = 0x5b, /* 91: the only refusal that fits; 92/93 are about identd */
};

/* Every text this module shows, for logs and for tests to match word for word. */
enum text {
	T_NAME_UNKNOWN,
	T_NAME_SOCKS5,
	T_NAME_SOCKS4,
	T_NAME_SOCKS4A,
	T_VERSION,
	T_NO_METHOD,
	T_AUTH_VERSION,
	T_AUTH_FAILED,
	T_REQUEST_VERSION,
	T_COMMAND,
	T_ADDRESS_TYPE,
	T_DOMAIN,
	T_STATE,
	T4_ACCOUNTS,
	T4_COMMAND,
	T4_USERID,
	T4_HOST_LONG,
	T4_HOST_EMPTY,
	T_COUNT_,
};

static const char *const TEXTS[T_COUNT_] = {
	[T_NAME_UNKNOWN] = "socks",
	[T_NAME_SOCKS5] = "socks5",
	[T_NAME_SOCKS4] = "socks4",
	[T_NAME_SOCKS4A] = "socks4a",
	[T_VERSION] = "socks: unknown protocol version",
	[T_NO_METHOD] = "socks: no acceptable authentication method",
	[T_AUTH_VERSION] = "socks: unknown username/password subnegotiation version",
	[T_AUTH_FAILED] = "socks: wrong username or password",
	[T_REQUEST_VERSION] = "socks: request version is not 5",
	[T_COMMAND] = "socks: command not supported",
	[T_ADDRESS_TYPE] = "socks: address type not supported",
	[T_DOMAIN] = "socks: empty or malformed domain name",
	[T_STATE] = "socks: called after the handshake ended",
	[T4_ACCOUNTS] = "socks4: refused, accounts need SOCKS5 username/password authentication",
	[T4_COMMAND] = "socks4: command not supported",
	[T4_USERID] = "socks4: user id too long",
	[T4_HOST_LONG] = "socks4: host name too long",
	[T4_HOST_EMPTY] = "socks4: empty host name",
};


/* Appends to out. Every reply is bounded well under PROTO_OUT_MAX (at most
 * 14 bytes per feed, 262 per opened), so running out is a bug here. */
static void put(proto_out *out, const uint8_t *b, size_t n)
{
	assert(out->len + n <= PROTO_OUT_MAX);
	memcpy(out->buf + out->len, b, n);
	out->len += n;
}

/* Bytes the ATYP ADDR PORT block at p spans, as far as its first avail
 * (>= 1) bytes tell; an unknown ATYP spans 1 and addr_get refuses it. */
static size_t addr_need(const uint8_t *p, size_t avail)
{
	switch (p[0]) {
	case SOCKS_ATYP_IPV4:
		return 1 + 4 + 2;
	case SOCKS_ATYP_IPV6:
		return 1 + 16 + 2;
	case SOCKS_ATYP_DOMAIN:
		return avail < 2 ? 2 : 1 + 1 + (size_t)p[1] + 2;
	default:
		return 1;
	}
}

/* VER REP RSV ATYP BND.ADDR BND.PORT (RFC 1928 section 6); an unset bound is
 * 0.0.0.0:0, what every refusal carries. */
static void reply5(proto_out *out, uint8_t rep, const addr_dest *bound)
{
	static const addr_dest none = {.kind = ADDR_IPV4};
	uint8_t b[3 + 1 + 1 + ADDR_DOMAIN_MAX + 2];
	if (!bound || socks_addr_wire_len(bound) == 0)
		bound = &none;
	b[0] = VER5;
	b[1] = rep;
	b[2] = 0;
	put(out, b, 3 + socks_addr_put(bound, b + 3));
}

/* VN(0) CD DSTPORT DSTIP: the client ignores the last six bytes, so they
 * carry the bound IPv4 address when there is one, else zeros. */
static void reply4(proto_out *out, uint8_t cd, const addr_dest *bound)
{
	uint8_t b[S4_HEADER_LEN] = {0, cd};
	if (bound && bound->kind == ADDR_IPV4) {
		bytes_put16(b + 2, bound->port);
		memcpy(b + 4, bound->u.v4, 4);
	}
	put(out, b, sizeof b);
}

static int refuse(socks_server *s, proto_event *ev, enum text why)
{
	s->state = SOCKS_ST_CLOSED;
	ev->kind = PROTO_EV_CLOSE;
	ev->reason = TEXTS[why];
	return 0;
}

static int fail(socks_server *s, proto_event *ev, enum text why, int err)
{
	refuse(s, ev, why);
	return err;
}

/* The whole current message is in s->msg once s->have reaches this; it only
 * reads bytes already held. */
static size_t msg_need(const socks_server *s)
{
	const uint8_t *m = s->msg;
	size_t have = s->have, ulen;
	switch (s->state) {
	case SOCKS_ST_HELLO:
		return 1;
	case SOCKS_ST_GREETING: /* VER NMETHODS METHODS */
		return have < 2 ? 2 : 2 + (size_t)m[1];
	case SOCKS_ST_AUTH: /* VER ULEN UNAME PLEN PASSWD */
		if (have < 2)
			return 2;
		ulen = m[1];
		if (have < 3 + ulen)
			return 3 + ulen;
		return 3 + ulen + m[2 + ulen];
	case SOCKS_ST_REQUEST: /* VER CMD RSV, then ATYP DST.ADDR DST.PORT */
		return have < 4 ? 4 : 3 + addr_need(m + 3, have - 3);
	case SOCKS_ST_S4_HEADER:
		return S4_HEADER_LEN;
	default:
		return 0;
	}
}

static int hello(socks_server *s, proto_event *ev)
{
	if (s->msg[0] == VER5) {
		s->version = 5;
		s->state = SOCKS_ST_GREETING;
		return 0;
	}
	if (s->msg[0] == VER4) {
		s->version = 4;
		s->state = SOCKS_ST_S4_HEADER;
		return 0;
	}
	return fail(s, ev, T_VERSION, PROTO_ERR_MALFORMED);
}

/* RFC 1928 section 3: the server picks one method the client offered. The
 * core offers exactly one: 0x02 with accounts, 0x00 without. */
static int greeting(socks_server *s, proto_out *out, proto_event *ev)
{
	uint8_t method = s->n_users ? METHOD_USERPASS : METHOD_NONE;
	bool offered = memchr(s->msg + 2, method, s->msg[1]) != NULL;
	uint8_t reply[2] = {VER5, offered ? method : METHOD_REFUSED};
	put(out, reply, sizeof reply);
	s->have = 0;
	if (!offered)
		return refuse(s, ev, T_NO_METHOD);
	s->state = method == METHOD_USERPASS ? SOCKS_ST_AUTH : SOCKS_ST_REQUEST;
	return 0;
}

/* Compares in time that depends on the client's length only, so the reply
 * time does not tell how much of a password matched. */
static bool secret_equal(const char *want, size_t want_len, const uint8_t *got, size_t got_len)
{
	unsigned diff = want_len != got_len;
	for (size_t i = 0; i < got_len; i++)
		diff |= (uint8_t)(want_len ? want[i < want_len ? i : 0] : 0) ^ got[i];
	return diff == 0;
}

/* The first account with this username and password, or -1. Every account
 * is looked at, whichever matches. */
static int find_account(const socks_server *s, const uint8_t *uname, size_t ulen,
                        const uint8_t *passwd, size_t plen)
{
	int found = -1;
	for (size_t i = 0; i < s->n_users; i++) {
		const proto_account *u = &s->users[i];
		if (!u->user || !u->pass)
			continue;
		bool same_name = u->user_len == ulen && memcmp(u->user, uname, ulen) == 0;
		bool same_pass = secret_equal(u->pass, u->pass_len, passwd, plen);
		if (same_name && same_pass && found < 0)
			found = (int)i;
	}
	return found;
}

/* RFC 1929 section 2: VER(1) ULEN UNAME PLEN PASSWD -> VER STATUS. */
static int auth(socks_server *s, proto_out *out, proto_event *ev)
{
	const uint8_t *m = s->msg;
	size_t ulen = m[1], plen = m[2 + ulen];
	s->have = 0;
	if (m[0] != AUTH_VER) {
		uint8_t reply[2] = {AUTH_VER, AUTH_FAILED};
		put(out, reply, sizeof reply);
		return fail(s, ev, T_AUTH_VERSION, PROTO_ERR_MALFORMED);
	}
	int user = find_account(s, m + 2, ulen, m + 3 + ulen, plen);
	uint8_t reply[2] = {AUTH_VER, user >= 0 ? AUTH_OK : AUTH_FAILED};
	put(out, reply, sizeof reply);
	if (user < 0)
		return refuse(s, ev, T_AUTH_FAILED);
	s->user = user;
	s->state = SOCKS_ST_REQUEST;
	return 0;
}

/* RFC 1928 section 4: VER CMD RSV ATYP DST.ADDR DST.PORT. RSV is not
 * checked: nothing depends on it and some clients leave garbage there. The
 * command is judged before the address type. */
static int request(socks_server *s, proto_out *out, proto_event *ev)
{
	const uint8_t *m = s->msg;
	s->have = 0;
	if (m[0] != VER5)
		return fail(s, ev, T_REQUEST_VERSION, PROTO_ERR_MALFORMED);
	bool udp = m[1] == CMD_UDP_ASSOCIATE;
	if (m[1] != CMD_CONNECT && !(udp && s->allow_udp)) {
		reply5(out, REP_CMD, NULL);
		return refuse(s, ev, T_COMMAND);
	}
	addr_dest d;
	int r = socks_addr_get(m + 3, udp ? ADDR_UDP : ADDR_TCP, &d);
	if (r == SOCKS_ADDR_BAD_ATYP) {
		reply5(out, REP_ATYP, NULL);
		return refuse(s, ev, T_ADDRESS_TYPE);
	}
	if (r == SOCKS_ADDR_BAD_DOMAIN) {
		reply5(out, REP_GENERAL, NULL);
		return fail(s, ev, T_DOMAIN, PROTO_ERR_MALFORMED);
	}
	ev->kind = PROTO_EV_OPEN;
	ev->cmd = udp ? PROTO_CMD_UDP_ASSOCIATE : PROTO_CMD_CONNECT;
	ev->dest = d;
	s->state = SOCKS_ST_DIAL;
	return 0;
}

/* SOCKS4: VN CD DSTPORT DSTIP, then USERID NUL (and HOSTNAME NUL for 4a,
 * when DSTIP is 0.0.0.x with x != 0). Refusals come as soon as the header
 * tells; the header stays in msg for the open. */
static int s4_header(socks_server *s, proto_out *out, proto_event *ev)
{
	const uint8_t *m = s->msg;
	if (s->n_users) {
		reply4(out, S4_REJECTED, NULL);
		return refuse(s, ev, T4_ACCOUNTS);
	}
	if (m[1] != CMD_CONNECT) {
		reply4(out, S4_REJECTED, NULL);
		return refuse(s, ev, T4_COMMAND);
	}
	s->v4a = m[4] == 0 && m[5] == 0 && m[6] == 0 && m[7] != 0;
	s->state = SOCKS_ST_S4_USERID;
	s->field = 0;
	return 0;
}

static int s4_open(socks_server *s, proto_out *out, proto_event *ev)
{
	const uint8_t *m = s->msg;
	addr_dest d = {.kind = ADDR_IPV4, .network = ADDR_TCP, .port = bytes_get16(m + 2)};
	if (s->v4a) {
		/* The field cannot hold a NUL: the NUL ends it. */
		if (addr_dest_set_domain(&d, (const char *)m + S4_HEADER_LEN, s->field, d.port) != 0) {
			reply4(out, S4_REJECTED, NULL);
			return fail(s, ev, T4_HOST_EMPTY, PROTO_ERR_MALFORMED);
		}
	} else {
		memcpy(d.u.v4, m + 4, 4);
	}
	s->have = 0;
	ev->kind = PROTO_EV_OPEN;
	ev->cmd = PROTO_CMD_CONNECT;
	ev->dest = d;
	s->state = SOCKS_ST_DIAL;
	return 0;
}

/* Reads the NUL-terminated user id (counted, not kept) or 4a host name (kept
 * after the header) from in at *pos, up to and including its NUL. */
static int s4_field(socks_server *s, const uint8_t *in, size_t len, size_t *pos, proto_out *out,
                    proto_event *ev)
{
	bool host = s->state == SOCKS_ST_S4_HOST;
	size_t max = host ? SOCKS4_HOST_MAX : SOCKS4_USERID_MAX;
	const uint8_t *p = in + *pos;
	const uint8_t *nul = memchr(p, 0, len - *pos);
	size_t n = nul ? (size_t)(nul - p) : len - *pos;
	if (s->field + n > max) {
		reply4(out, S4_REJECTED, NULL);
		return fail(s, ev, host ? T4_HOST_LONG : T4_USERID, PROTO_ERR_TOO_BIG);
	}
	if (host)
		memcpy(s->msg + S4_HEADER_LEN + s->field, p, n);
	s->field = (uint16_t)(s->field + n);
	*pos += n;
	if (!nul)
		return 0;
	*pos += 1;
	if (!host && s->v4a) {
		s->state = SOCKS_ST_S4_HOST;
		s->field = 0;
		return 0;
	}
	return s4_open(s, out, ev);
}

/* Acts on the complete message in s->msg. */
static int step(socks_server *s, proto_out *out, proto_event *ev)
{
	switch (s->state) {
	case SOCKS_ST_HELLO:
		return hello(s, ev);
	case SOCKS_ST_GREETING:
		return greeting(s, out, ev);
	case SOCKS_ST_AUTH:
		return auth(s, out, ev);
	case SOCKS_ST_REQUEST:
		return request(s, out, ev);
	case SOCKS_ST_S4_HEADER:
		return s4_header(s, out, ev);
	default:
		return fail(s, ev, T_STATE, PROTO_ERR_STATE);
	}
}

void socks_server_init(socks_server *s, const proto_account *users, size_t n_users, bool allow_udp)
{
	*s = (socks_server){
		.users = users,
		.n_users = users ? n_users : 0,
		.allow_udp = allow_udp,
		.user = -1,
	};
}

ssize_t socks_server_feed(socks_server *s, const uint8_t *in, size_t len, proto_out *out,
                          proto_event *ev)
{
	out->len = 0;
	*ev = (proto_event){.kind = PROTO_EV_NONE, .user = -1};
	if (s->state >= SOCKS_ST_DIAL) {
		ev->kind = PROTO_EV_CLOSE;
		ev->reason = TEXTS[T_STATE];
		return PROTO_ERR_STATE;
	}
	size_t pos = 0;
	int r = 0;
	while (r == 0 && ev->kind == PROTO_EV_NONE) {
		if (s->state == SOCKS_ST_S4_USERID || s->state == SOCKS_ST_S4_HOST) {
			if (pos == len)
				break;
			r = s4_field(s, in, len, &pos, out, ev);
			continue;
		}
		size_t need = msg_need(s);
		if (s->have < need) {
			if (pos == len)
				break;
			size_t n = need - s->have < len - pos ? need - s->have : len - pos;
			memcpy(s->msg + s->have, in + pos, n);
			s->have = (uint16_t)(s->have + n);
			pos += n;
			continue;
		}
		r = step(s, out, ev);
	}
	if (ev->kind != PROTO_EV_NONE)
		ev->user = s->n_users ? s->user : -1;
	if (r < 0)
		return r;
	return (ssize_t)pos;
}

int socks_server_opened(socks_server *s, const addr_dest *bound, proto_out *out)
{
	out->len = 0;
	if (s->state != SOCKS_ST_DIAL)
		return PROTO_ERR_STATE;
	if (s->version == 5)
		reply5(out, REP_OK, bound);
	else
		reply4(out, S4_GRANTED, bound);
	s->state = SOCKS_ST_RELAY;
	return 0;
}

/* RFC 1928 section 6 REP codes; TTL expired (0x06) is the nearest to a
 * timeout the RFC has. */
static uint8_t dial_rep(proto_dial_error e)
{
	switch (e) {
	case PROTO_DIAL_NOT_ALLOWED:
		return REP_NOT_ALLOWED;
	case PROTO_DIAL_NET_UNREACHABLE:
		return REP_NET_UNREACHABLE;
	case PROTO_DIAL_HOST_UNREACHABLE:
		return REP_HOST_UNREACHABLE;
	case PROTO_DIAL_REFUSED:
		return REP_REFUSED;
	case PROTO_DIAL_TIMED_OUT:
		return REP_TTL_EXPIRED;
	case PROTO_DIAL_GENERAL:
	default:
		return REP_GENERAL;
	}
}

int socks_server_failed(socks_server *s, proto_dial_error e, proto_out *out)
{
	out->len = 0;
	if (s->state != SOCKS_ST_DIAL)
		return PROTO_ERR_STATE;
	if (s->version == 5)
		reply5(out, dial_rep(e), NULL);
	else
		reply4(out, S4_REJECTED, NULL);
	s->state = SOCKS_ST_CLOSED;
	return 0;
}

int socks_server_version(const socks_server *s)
{
	return s->version;
}

const char *socks_server_version_name(const socks_server *s)
{
	if (s->version == 5)
		return TEXTS[T_NAME_SOCKS5];
	if (s->version == 4)
		return TEXTS[s->v4a ? T_NAME_SOCKS4A : T_NAME_SOCKS4];
	return TEXTS[T_NAME_UNKNOWN];
}

/* RFC 1928 section 7: RSV(2) FRAG ATYP DST.ADDR DST.PORT DATA. Fragments
 * are optional, and an implementation without them MUST drop FRAG != 0. */
ssize_t socks_udp_decode(const uint8_t *pkt, size_t len, addr_dest *dest)
{
	if (len < 4 || pkt[0] != 0 || pkt[1] != 0 || pkt[2] != 0)
		return PROTO_ERR_MALFORMED;
	if (len - 3 < addr_need(pkt + 3, len - 3))
		return PROTO_ERR_MALFORMED;
	addr_dest d;
	int r = socks_addr_get(pkt + 3, ADDR_UDP, &d);
	if (r < 0)
		return PROTO_ERR_MALFORMED;
	*dest = d;
	return 3 + r;
}

ssize_t socks_udp_encode(const addr_dest *peer, uint8_t *out, size_t cap)
{
	size_t n = socks_addr_wire_len(peer);
	if (n == 0)
		return PROTO_ERR_MALFORMED;
	if (cap < 3 + n)
		return PROTO_ERR_TOO_BIG;
	out[0] = 0;
	out[1] = 0;
	out[2] = 0;
	return (ssize_t)(3 + socks_addr_put(peer, out + 3));
}
