/* vmess_server.c - the VMess AEAD server core: AuthID check and replay filter, the sealed request header, the sealed response and the body codec's keys. */
#include "proto/vmess_server.h"

#include <string.h>

#include "crypto/ossl.h"

#include "base/bytes.h"
#include "base/hash.h"
#include "proto/mux.h"

enum { ATYP_IPV4 = 0x01, ATYP_DOMAIN = 0x02, ATYP_IPV6 = 0x03 };

enum text {
	T_AUTH,
	T_TIME,
	T_REPLAY,
	T_FULL,
	T_HEADER,
	T_LENGTH,
	T_CHECKSUM,
	T_VERSION,
	T_SECURITY,
	T_UDP_RAW,
	T_COMMAND,
	T_ADDRESS_TYPE,
	T_DOMAIN,
	T_STATE,
	T_COUNT_,
};

static const char *const TEXTS[T_COUNT_] = {
	[T_AUTH] = "vmess: authentication failed (no user's AuthID; legacy MD5 headers are refused)",
	[T_TIME] = "vmess: AuthID outside the time window",
	[T_REPLAY] = "vmess: replayed AuthID",
	[T_FULL] = "vmess: replay filter full",
	[T_HEADER] = "vmess: bad header seal",
	[T_LENGTH] = "vmess: header length out of bounds",
	[T_CHECKSUM] = "vmess: bad header checksum",
	[T_VERSION] = "vmess: unsupported version",
	[T_SECURITY] = "vmess: body security not supported",
	[T_UDP_RAW] = "vmess: UDP needs the chunk stream",
	[T_COMMAND] = "vmess: command not supported",
	[T_ADDRESS_TYPE] = "vmess: address type not supported",
	[T_DOMAIN] = "vmess: empty or malformed domain name",
	[T_STATE] = "vmess: called after the request was decided",
};

/* What parse returns for a refusal that is not malformed bytes (an
 * unknown user, a replay): feed turns it into 0 with ev CLOSE. */
#define REFUSE (-1000)

/* AuthID, the sealed length, the connection nonce. */
#define HEAD_LEN (VMESS_AUTH_ID_LEN + 2 + VMESS_TAG_LEN + VMESS_CONN_NONCE_LEN)
/* The shortest header: the fixed fields, no padding, the checksum (a Mux
 * request carries no address; any other is checked by its address). */
#define HEADER_MIN (38 + 4)

/* Offsets in the plaintext header. */
enum {
	OFF_VER = 0,
	OFF_IV = 1,
	OFF_KEY = 17,
	OFF_V = 33,
	OFF_OPT = 34,
	OFF_PSEC = 35,
	OFF_CMD = 37,
	OFF_PORT = 38,
	OFF_ATYP = 40,
	OFF_ADDR = 41,
};

int vmess_account_init(vmess_account *a, const uint8_t uuid[16])
{
	vmess_cmd_key(uuid, a->cmd_key);
	return vmess_auth_key(a->cmd_key, a->auth_key);
}

/* ---- replay filter ---- */

static size_t slot_of(const uint8_t id[VMESS_AUTH_ID_LEN])
{
	/* AES output: any four bytes are uniform */
	return (size_t)bytes_get32(id) % VMESS_REPLAY_SLOTS;
}

int vmess_replay_add(vmess_replay *r, const uint8_t id[VMESS_AUTH_ID_LEN], int64_t expiry,
                     int64_t now)
{
	size_t i = slot_of(id);
	vmess_replay_slot *free_slot = NULL;
	for (size_t k = 0; k < VMESS_REPLAY_PROBES; k++) {
		vmess_replay_slot *s = &r->slot[(i + k) % VMESS_REPLAY_SLOTS];
		bool live = s->expiry != 0 && s->expiry >= now;
		if (live && memcmp(s->id, id, VMESS_AUTH_ID_LEN) == 0)
			return VMESS_REPLAY_SEEN;
		if (!live && !free_slot)
			free_slot = s;
	}
	if (!free_slot)
		return VMESS_REPLAY_FULL;
	memcpy(free_slot->id, id, VMESS_AUTH_ID_LEN);
	free_slot->expiry = expiry > 0 ? expiry : 1;
	return VMESS_REPLAY_NEW;
}

/* ---- request ---- */

void vmess_server_init(vmess_server *s, const vmess_account *users, size_t n,
                       vmess_replay_fn replay, void *replay_ud)
{
	*s = (vmess_server){
		.users = users,
		.n_users = n,
		.replay = replay,
		.replay_ud = replay_ud,
		.state = VMESS_SV_REQUEST,
		.user = -1,
	};
}

/* Finds the user whose AuthID key opens in[0, 16) and checks its time and
 * the filter; sets s->user. 0, or REFUSE with *why. */
static int authenticate(vmess_server *s, const uint8_t *in, int64_t now, enum text *why)
{
	int user = -1;
	int64_t t = 0;
	for (size_t i = 0; i < s->n_users && user < 0; i++)
		if (vmess_auth_id_open(s->users[i].auth_key, in, &t) == 0)
			user = (int)i;
	if (user < 0) {
		*why = T_AUTH;
		return REFUSE;
	}
	if (t < now - VMESS_TIME_WINDOW || t > now + VMESS_TIME_WINDOW) {
		*why = T_TIME;
		return REFUSE;
	}
	if (s->replay) {
		int r = s->replay(s->replay_ud, in, t + VMESS_TIME_WINDOW, now);
		if (r != VMESS_REPLAY_NEW) {
			*why = r == VMESS_REPLAY_SEEN ? T_REPLAY : T_FULL;
			return REFUSE;
		}
	}
	s->user = user;
	memcpy(s->auth_id, in, VMESS_AUTH_ID_LEN);
	return 0;
}

/* KDF(cmd_key, label, AuthID, nonce). */
static int header_kdf(const vmess_server *s, const char *label, const uint8_t *nonce,
                      uint8_t out[VMESS_KDF_LEN])
{
	const vmess_slice path[3] = {
		{(const uint8_t *)label, strlen(label)},
		{s->auth_id, VMESS_AUTH_ID_LEN},
		{nonce, VMESS_CONN_NONCE_LEN},
	};
	return vmess_kdf(s->users[s->user].cmd_key, VMESS_KEY_LEN, path, 3, out);
}

/* Opens the sealed length at in + 16 (HEAD_LEN bytes are there): the
 * header's length, or PROTO_ERR_MALFORMED with *why. */
static ssize_t open_length(const vmess_server *s, const uint8_t *in, enum text *why)
{
	const uint8_t *nonce = in + HEAD_LEN - VMESS_CONN_NONCE_LEN;
	uint8_t k[VMESS_KDF_LEN], n[VMESS_KDF_LEN], len2[2];
	int bad = header_kdf(s, VMESS_KDF_REQ_LEN_KEY, nonce, k) ||
	          header_kdf(s, VMESS_KDF_REQ_LEN_IV, nonce, n) ||
	          vmess_gcm_open(k, n, s->auth_id, VMESS_AUTH_ID_LEN, in + VMESS_AUTH_ID_LEN,
	                         2 + VMESS_TAG_LEN, len2);
	OPENSSL_cleanse(k, sizeof k);
	if (bad) {
		*why = T_HEADER;
		return PROTO_ERR_MALFORMED;
	}
	size_t hlen = bytes_get16(len2);
	if (hlen < HEADER_MIN || hlen > VMESS_HEADER_MAX) {
		*why = T_LENGTH;
		return PROTO_ERR_MALFORMED;
	}
	return (ssize_t)hlen;
}

/* Reads the address at h + OFF_PORT into d; returns where it ends, or
 * PROTO_ERR_MALFORMED with *why. hlen bounds it. */
static ssize_t read_address(const uint8_t *h, size_t hlen, uint8_t cmd, addr_dest *d,
                            enum text *why)
{
	uint16_t port = bytes_get16(h + OFF_PORT);
	size_t end;
	*d = (addr_dest){0};
	switch (h[OFF_ATYP]) {
	case ATYP_IPV4:
		end = OFF_ADDR + 4;
		if (end > hlen)
			goto short_;
		d->kind = ADDR_IPV4;
		memcpy(d->u.v4, h + OFF_ADDR, 4);
		d->port = port;
		break;
	case ATYP_IPV6:
		end = OFF_ADDR + 16;
		if (end > hlen)
			goto short_;
		d->kind = ADDR_IPV6;
		memcpy(d->u.v6, h + OFF_ADDR, 16);
		d->port = port;
		break;
	case ATYP_DOMAIN:
		end = OFF_ADDR + 1 + (size_t)h[OFF_ADDR];
		if (end > hlen)
			goto short_;
		if (addr_dest_set_domain(d, (const char *)h + OFF_ADDR + 1, h[OFF_ADDR], port)) {
			*d = (addr_dest){0};
			*why = T_DOMAIN;
			return PROTO_ERR_MALFORMED;
		}
		break;
	default:
		*why = T_ADDRESS_TYPE;
		return PROTO_ERR_MALFORMED;
	}
	d->network = cmd == VMESS_CMD_UDP ? ADDR_UDP : ADDR_TCP;
	return (ssize_t)end;
short_:
	*why = T_LENGTH;
	return PROTO_ERR_MALFORMED;
}

/* Checks the plaintext header h[0, hlen) and fills s->req and ev. 0, or
 * PROTO_ERR_MALFORMED with *why. */
static int read_header(vmess_server *s, const uint8_t *h, size_t hlen, proto_event *ev,
                       enum text *why)
{
	if (h[OFF_VER] != VMESS_VERSION) {
		*why = T_VERSION;
		return PROTO_ERR_MALFORMED;
	}
	vmess_request *q = &s->req;
	uint8_t sec = h[OFF_PSEC] & 0x0f, cmd = h[OFF_CMD];
	size_t plen = h[OFF_PSEC] >> 4;
	if (cmd != VMESS_CMD_TCP && cmd != VMESS_CMD_UDP && cmd != VMESS_CMD_MUX) {
		*why = T_COMMAND;
		return PROTO_ERR_MALFORMED;
	}
	ssize_t end = OFF_PORT;
	if (cmd == VMESS_CMD_MUX)
		mux_session_dest(&ev->dest);
	else
		end = read_address(h, hlen, cmd, &ev->dest, why);
	if (end < 0)
		return PROTO_ERR_MALFORMED;
	/* v2ray reads the padding, then the checksum over all before it; the
	 * header must end there */
	if ((size_t)end + plen + 4 != hlen) {
		*why = T_LENGTH;
		return PROTO_ERR_MALFORMED;
	}
	if (hash_fnv32(h, hlen - 4) != bytes_get32(h + hlen - 4)) {
		*why = T_CHECKSUM;
		return PROTO_ERR_MALFORMED;
	}
	uint8_t opt = h[OFF_OPT];
	switch (sec) {
	case VMESS_SEC_AES_128_GCM:
	case VMESS_SEC_CHACHA20_POLY1305:
		/* v2ray chunks an AEAD body whatever the option says */
		opt |= VMESS_OPT_CHUNK_STREAM;
		break;
	case VMESS_SEC_NONE:
		break;
	default: /* legacy AES-128-CFB, auto (never on the wire), unknown */
		*why = T_SECURITY;
		return PROTO_ERR_MALFORMED;
	}
	if (cmd == VMESS_CMD_UDP && !(opt & VMESS_OPT_CHUNK_STREAM)) {
		*why = T_UDP_RAW;
		return PROTO_ERR_MALFORMED;
	}
	memcpy(q->body_iv, h + OFF_IV, 16);
	memcpy(q->body_key, h + OFF_KEY, 16);
	q->v = h[OFF_V];
	q->opt = opt;
	q->sec = sec;
	q->cmd = cmd;
	ev->kind = PROTO_EV_OPEN;
	ev->cmd = cmd == VMESS_CMD_UDP ? PROTO_CMD_UDP_ASSOCIATE : PROTO_CMD_CONNECT;
	ev->user = s->user;
	return 0;
}

static ssize_t parse(vmess_server *s, const uint8_t *in, size_t len, int64_t now,
                     proto_event *ev, enum text *why)
{
	if (len < VMESS_AUTH_ID_LEN)
		return 0;
	if (s->user < 0 && authenticate(s, in, now, why))
		return REFUSE;
	if (len < HEAD_LEN)
		return 0;
	ssize_t hlen = open_length(s, in, why);
	if (hlen < 0)
		return hlen;
	size_t total = HEAD_LEN + (size_t)hlen + VMESS_TAG_LEN;
	if (len < total)
		return 0;
	const uint8_t *nonce = in + HEAD_LEN - VMESS_CONN_NONCE_LEN;
	uint8_t k[VMESS_KDF_LEN], n[VMESS_KDF_LEN], h[VMESS_HEADER_MAX];
	int bad = header_kdf(s, VMESS_KDF_REQ_KEY, nonce, k) ||
	          header_kdf(s, VMESS_KDF_REQ_IV, nonce, n) ||
	          vmess_gcm_open(k, n, s->auth_id, VMESS_AUTH_ID_LEN, in + HEAD_LEN,
	                         (size_t)hlen + VMESS_TAG_LEN, h);
	OPENSSL_cleanse(k, sizeof k);
	int r = bad ? PROTO_ERR_MALFORMED : read_header(s, h, (size_t)hlen, ev, why);
	OPENSSL_cleanse(h, sizeof h);
	if (bad)
		*why = T_HEADER;
	return r < 0 ? r : (ssize_t)total;
}

ssize_t vmess_server_feed(vmess_server *s, const uint8_t *in, size_t len, int64_t now,
                          proto_out *out, proto_event *ev)
{
	out->len = 0;
	*ev = (proto_event){.kind = PROTO_EV_NONE, .user = -1};
	if (s->state != VMESS_SV_REQUEST) {
		ev->kind = PROTO_EV_CLOSE;
		ev->reason = TEXTS[T_STATE];
		return PROTO_ERR_STATE;
	}
	enum text why = T_AUTH;
	ssize_t n = parse(s, in, len, now, ev, &why);
	if (n > 0) {
		s->state = VMESS_SV_DIAL;
		return n;
	}
	if (n == 0)
		return 0;
	*ev = (proto_event){.kind = PROTO_EV_CLOSE, .user = -1, .reason = TEXTS[why]};
	s->state = VMESS_SV_CLOSED;
	return n == REFUSE ? 0 : n;
}

int vmess_server_opened(vmess_server *s, proto_out *out)
{
	out->len = 0;
	if (s->state != VMESS_SV_DIAL)
		return PROTO_ERR_STATE;
	uint8_t rk[16], ri[16];
	vmess_response_keys(s->req.body_key, s->req.body_iv, rk, ri);
	ssize_t n = vmess_response_seal(rk, ri, s->req.v, 0, out->buf, sizeof out->buf);
	OPENSSL_cleanse(rk, sizeof rk);
	if (n < 0)
		return PROTO_ERR_STATE;
	out->len = (size_t)n;
	s->state = VMESS_SV_RELAY;
	return 0;
}

bool vmess_server_chunked(const vmess_server *s)
{
	return (s->req.opt & VMESS_OPT_CHUNK_STREAM) != 0;
}

int vmess_server_body_init(const vmess_server *s, vmess_body *rx, vmess_body *tx,
                           const uint8_t pad_seed[32])
{
	*rx = (vmess_body){0};
	*tx = (vmess_body){0};
	if ((s->state != VMESS_SV_DIAL && s->state != VMESS_SV_RELAY) || !vmess_server_chunked(s))
		return -1;
	uint8_t rk[16], ri[16];
	vmess_response_keys(s->req.body_key, s->req.body_iv, rk, ri);
	int bad = vmess_body_init(rx, s->req.sec, s->req.opt, s->req.body_key, s->req.body_iv,
	                          false, NULL) ||
	          vmess_body_init(tx, s->req.sec, s->req.opt, rk, ri, true, pad_seed);
	OPENSSL_cleanse(rk, sizeof rk);
	if (bad) {
		vmess_body_free(rx);
		vmess_body_free(tx);
		return -1;
	}
	return 0;
}
