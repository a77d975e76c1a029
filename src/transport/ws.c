/* ws.c - the WebSocket layer: the upgrade handshake by hand, frames by ws_frame straight between the stack's buffers. */
#include "transport/ws.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crypto/ossl.h"

#include "proto/http_parse.h"
#include "transport/ws_frame.h"

#define WS_FIN 0x80

/* Control frames queued at once: the pongs' bound and one close. */
#define WS_CTL_SLOTS (WS_CONTROL_QUEUE_MAX + 1)

/* The handshake bytes the layer writes: a request line with a path of
 * WS_PATH_MAX, a Host of WS_HOST_MAX and fixed fields (about 150 bytes),
 * or one of the fixed responses. */
#define WS_HS_MAX 1024

/* Longest bit of peer text (a path, a status line) quoted in an error. */
#define WS_QUOTE_MAX 64

#define WS_ERR_MAX 256

/* RFC 6455 section 1.3. */
static const char GUID[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

enum {
	M_REFUSED,
	M_BAD_RESPONSE,
	M_BAD_ACCEPT,
	M_RESPONSE_TOO_BIG,
	M_WRONG_PATH,
	M_BAD_REQUEST,
	M_VERSION,
	M_REQUEST_TOO_BIG,
	M_TOO_LARGE,
	M_BAD_FRAME,
	M_CLOSED_MID,
	M_SEND_SHUT,
	M_NOMEM,
	M_BAD_PATH,
	M_BAD_HOST,
	M_NOT_READING,
	M_EARLY_PINGS,
	M_CLOSED_EARLY,
};

/* Every text this module shows a user; tests assert them word for word. */
static const char *const msgs[] = {
	[M_REFUSED] = "ws: upgrade refused: %s",
	[M_BAD_RESPONSE] = "ws: bad upgrade response: %s",
	[M_BAD_ACCEPT] = "ws: bad Sec-WebSocket-Accept",
	[M_RESPONSE_TOO_BIG] = "ws: upgrade response head too large",
	[M_WRONG_PATH] = "ws: wrong path \"%s\" (expected \"%s\")",
	[M_BAD_REQUEST] = "ws: bad upgrade request: %s",
	[M_VERSION] = "ws: unsupported Sec-WebSocket-Version",
	[M_REQUEST_TOO_BIG] = "ws: upgrade request head too large",
	[M_TOO_LARGE] = "ws: frame too large",
	[M_BAD_FRAME] = "ws: bad frame",
	[M_CLOSED_MID] = "ws: peer closed in the middle of a message",
	[M_SEND_SHUT] = "ws: send after shutdown",
	[M_NOMEM] = "ws: out of memory",
	[M_BAD_PATH] = "ws: bad path \"%s\"",
	[M_BAD_HOST] = "ws: bad host \"%s\"",
	[M_NOT_READING] = "ws: the peer sends pings and does not read the answers",
	[M_EARLY_PINGS] = "ws: more than %d pings before any data",
	[M_CLOSED_EARLY] = "ws: peer closed before any data",
};

/* The server's answers. Errors close the connection (RFC 9112 9.6). */
static const char RESP_101[] = "HTTP/1.1 101 Switching Protocols\r\n"
                               "Upgrade: websocket\r\n"
                               "Connection: Upgrade\r\n"
                               "Sec-WebSocket-Accept: %s\r\n"
                               "\r\n";
static const char RESP_ERROR[] = "HTTP/1.1 %s\r\n"
                                 "%s"
                                 "Content-Length: 0\r\n"
                                 "Connection: close\r\n"
                                 "\r\n";

/* A control frame waiting for room below. */
typedef struct ws_ctl {
	uint8_t len;
	uint8_t b[WS_FRAME_HEAD_MAX - 8 + WS_CONTROL_MAX]; /* 2 + key + payload */
} ws_ctl;

typedef struct ws_layer {
	layer base;
	bool client;
	bool open;         /* upgrade done: frames flow (ready) */
	bool peer_closed;  /* a close frame arrived */
	bool shut;         /* shutdown() queued our close frame */
	bool close_queued; /* our close frame (shut, a reply, a refusal) is queued */
	bool data_seen;    /* a data frame has begun since the upgrade */
	unsigned early_pings; /* pings before data_seen */
	int fail;          /* LAYER_ERR_* found, returned once its answer is out */

	size_t scan;       /* http_parse's resume point in the head */
	char *path;        /* owned: the client's request target, the server's path */
	char accept[29];   /* client: the Sec-WebSocket-Accept to expect */
	size_t out_len, out_off;
	uint8_t out[WS_HS_MAX]; /* handshake bytes still to write */

	/* Frames in. The layer carries bytes, text frames as binary ones
	 * (ws.h), as Xray and v2ray do: no UTF-8 check, no 1007. */
	ws_frame_dec dec;
	uint8_t cin[WS_CONTROL_MAX]; /* the control frame being read */

	/* Control frames out, a ring: ctl_n from ctl_head, ctl_off bytes of
	 * the first written. Data frames never wait here: one is written
	 * only whole and only into room below. */
	size_t ctl_head, ctl_n, ctl_off;
	ws_ctl ctl[WS_CTL_SLOTS];

	EVP_CIPHER_CTX *mask; /* client: ChaCha20 keyed by the seed */
	size_t ks_off;
	uint8_t ks[64];       /* keystream block; ks_off bytes of it are used */
	char err[WS_ERR_MAX];
} ws_layer;

/* Fails the layer with code and the text msgs[id] filled from ap. */
static int set_err_v(ws_layer *w, int code, int id, va_list ap)
{
	if (vsnprintf(w->err, sizeof w->err, msgs[id], ap) < 0)
		w->err[0] = '\0';
	w->fail = code;
	return code;
}

static int set_err(ws_layer *w, int code, int id, ...)
{
	va_list ap;
	va_start(ap, id);
	set_err_v(w, code, id, ap);
	va_end(ap);
	return code;
}

static void say(char *err, size_t size, int id, const char *arg)
{
	if (err && size > 0 && snprintf(err, size, msgs[id], arg) < 0)
		err[0] = '\0';
}

/* Copies peer bytes for an error text: printable ASCII only, cut at
 * WS_QUOTE_MAX, so a log line stays one line. */
static const char *quote(const uint8_t *p, size_t n, char out[WS_QUOTE_MAX + 1])
{
	if (n > WS_QUOTE_MAX)
		n = WS_QUOTE_MAX;
	for (size_t i = 0; i < n; i++)
		out[i] = p[i] >= 0x20 && p[i] < 0x7f ? (char)p[i] : '?';
	out[n] = '\0';
	return out;
}

int ws_accept_key(const char *key, size_t key_len, char out[29])
{
	uint8_t buf[64 + sizeof GUID], md[EVP_MAX_MD_SIZE];
	unsigned int md_len = 0;
	out[0] = '\0';
	if (key_len > 64)
		return -1;
	memcpy(buf, key, key_len);
	memcpy(buf + key_len, GUID, sizeof GUID - 1);
	if (EVP_Digest(buf, key_len + sizeof GUID - 1, md, &md_len, EVP_sha1(), NULL) != 1 ||
	    md_len != 20)
		return -1;
	EVP_EncodeBlock((unsigned char *)out, md, 20); /* 28 characters and a NUL */
	return 0;
}

/* ---- moving bytes ---- */

static int keystream(ws_layer *w, uint8_t *out, size_t n)
{
	static const uint8_t zero[sizeof w->ks];
	while (n > 0) {
		if (w->ks_off == sizeof w->ks) {
			int got = 0;
			if (EVP_EncryptUpdate(w->mask, w->ks, &got, zero, (int)sizeof zero) != 1 ||
			    got != (int)sizeof zero)
				return -1;
			w->ks_off = 0;
		}
		size_t k = sizeof w->ks - w->ks_off;
		if (k > n)
			k = n;
		memcpy(out, w->ks + w->ks_off, k);
		w->ks_off += k;
		out += k;
		n -= k;
	}
	return 0;
}

/* Writes a frame's header into out, a client's with a fresh mask key in
 * key (RFC 6455 section 5.3: unpredictable, one per frame). Returns the
 * header's length, or -1 when the key could not be drawn. */
static ssize_t head(ws_layer *w, uint8_t *out, uint8_t op, size_t n, uint8_t key[4])
{
	if (w->client && keystream(w, key, 4) < 0)
		return -1;
	return (ssize_t)ws_frame_head(out, WS_FIN | op, n, w->client ? key : NULL);
}

/* Queues a control frame (a pong, a close) behind the ones queued. */
static int queue_control(ws_layer *w, uint8_t op, const uint8_t *p, size_t n)
{
	if (w->ctl_n == WS_CTL_SLOTS)
		return 0; /* cannot happen: pongs stop at WS_CONTROL_QUEUE_MAX, one close */
	ws_ctl *c = &w->ctl[(w->ctl_head + w->ctl_n) % WS_CTL_SLOTS];
	uint8_t key[4];
	ssize_t h = head(w, c->b, op, n, key);
	if (h < 0)
		return set_err(w, LAYER_ERR_NOMEM, M_NOMEM);
	if (w->client)
		ws_frame_mask(c->b + h, p, n, key, 0);
	else if (n)
		memcpy(c->b + h, p, n);
	c->len = (uint8_t)((size_t)h + n);
	w->ctl_n++;
	return 0;
}

/* Our one close frame: code, or no body for 0. */
static int queue_close(ws_layer *w, unsigned code)
{
	if (w->close_queued)
		return 0;
	w->close_queued = true;
	uint8_t b[2] = {(uint8_t)(code >> 8), (uint8_t)code};
	return queue_control(w, WS_OP_CLOSE, b, code ? 2 : 0);
}

/* Handshake bytes, then queued control frames, into down as far as they
 * fit. */
static int flush(ws_layer *w, layer_buf *down)
{
	w->out_off += layer_buf_put(down, w->out + w->out_off, w->out_len - w->out_off);
	if (w->out_off < w->out_len || !w->open)
		return 0;
	while (w->ctl_n > 0) {
		ws_ctl *c = &w->ctl[w->ctl_head];
		w->ctl_off += layer_buf_put(down, c->b + w->ctl_off, c->len - w->ctl_off);
		if (w->ctl_off < c->len)
			break;
		w->ctl_off = 0;
		w->ctl_head = (w->ctl_head + 1) % WS_CTL_SLOTS;
		w->ctl_n--;
	}
	return 0;
}

/* ---- frames in ---- */

/* RFC 6455 section 7.4.1: 1009, a message too big to process; 1002, a
 * protocol error. Reading stops at either. */
static void fail_frames(ws_layer *w, ssize_t why)
{
	bool big = why == WS_FRAME_TOO_BIG;
	set_err(w, LAYER_ERR_PROTO, big ? M_TOO_LARGE : M_BAD_FRAME);
	if (queue_close(w, big ? 1009 : 1002) < 0)
		return; /* the NOMEM replaced the error */
}

/* Section 7.4: the codes a close frame may carry. */
static bool close_code_ok(unsigned c)
{
	return (c >= 1000 && c <= 1011 && (c < 1004 || c > 1006)) || (c >= 3000 && c <= 4999);
}

/* A frame's header is read. */
static void frame_start(ws_layer *w)
{
	const ws_frame_dec *d = &w->dec;
	if (d->op == WS_OP_PING) {
		/* Every ping is answered with a pong in ctl, which only a reading
		 * peer empties: bounded here, as data is by the shell's write
		 * slots. */
		if (!w->data_seen && ++w->early_pings > WS_EARLY_PINGS_MAX)
			set_err(w, LAYER_ERR_PROTO, M_EARLY_PINGS, WS_EARLY_PINGS_MAX);
		else if (w->ctl_n >= WS_CONTROL_QUEUE_MAX)
			set_err(w, LAYER_ERR_PROTO, M_NOT_READING);
	} else if (d->op <= WS_OP_BINARY) {
		w->data_seen = true;
	}
}

/* A frame's payload has all passed: control frames act now. */
static void frame_end(ws_layer *w)
{
	const ws_frame_dec *d = &w->dec;
	size_t n = (size_t)d->len;
	if (d->op == WS_OP_PING && !w->close_queued) {
		(void)queue_control(w, WS_OP_PONG, w->cin, n);
		return;
	}
	if (d->op != WS_OP_CLOSE)
		return; /* pongs are dropped; data went up as it came */
	unsigned code = n >= 2 ? (unsigned)w->cin[0] << 8 | w->cin[1] : 0;
	if (n == 1 || (n >= 2 && !close_code_ok(code))) {
		fail_frames(w, WS_FRAME_BAD);
		return;
	}
	w->peer_closed = true;
	/* Section 5.5.1: the reply echoes the code. */
	if (queue_close(w, code) < 0)
		return;
	if (d->in_msg)
		set_err(w, LAYER_ERR_CLOSED, M_CLOSED_MID);
	/* A server whose client closes before sending anything has nothing to
	 * wait for (RFC 6455 section 7.1.1: the server closes the TCP
	 * connection): the error ends it once the close reply is out,
	 * instead of at the handshake timeout. */
	else if (!w->client && !w->data_seen)
		set_err(w, LAYER_ERR_CLOSED, M_CLOSED_EARLY);
}

/* Frames from in[0, len): data payloads unmasked straight into up as far
 * as it has room, control payloads into cin. Returns the bytes taken; the
 * rest is offered again (layer.h). Stops at a failure or the peer's
 * close. */
static size_t read_frames(ws_layer *w, const uint8_t *in, size_t len, layer_buf *up)
{
	ws_frame_dec *d = &w->dec;
	size_t off = 0;
	while (!w->fail && !w->peer_closed) {
		if (!d->in_payload) {
			if (off == len)
				break;
			ssize_t r = ws_frame_dec_head(d, in + off, len - off);
			if (r < 0) {
				fail_frames(w, r);
				break;
			}
			off += (size_t)r;
			if (!d->in_payload)
				break;
			frame_start(w);
			if (w->fail)
				break;
		}
		if (d->op <= WS_OP_BINARY) {
			size_t k = len - off, room = layer_buf_room(up);
			if (k > room)
				k = room;
			if (k > 0) {
				k = ws_frame_dec_payload(d, up->data + up->len, in + off, k);
				up->len += k;
				off += k;
			}
		} else {
			uint8_t *to = w->cin + d->done; /* len <= WS_CONTROL_MAX: checked */
			off += ws_frame_dec_payload(d, to, in + off, len - off);
		}
		if (!ws_frame_dec_done(d))
			break;
		frame_end(w);
		ws_frame_dec_next(d);
	}
	return off;
}

/* ---- the upgrade ---- */

static bool span_is(const uint8_t *in, http_span s, const char *lower)
{
	return http_eq_nocase(in + s.off, s.len, lower);
}

/* Whether a comma-separated field value lists token (any case). */
static bool lists(const uint8_t *in, http_span v, const char *token)
{
	size_t pos = 0, n;
	const uint8_t *e;
	while (http_list_next(in + v.off, v.len, &pos, &e, &n))
		if (http_eq_nocase(e, n, token))
			return true;
	return false;
}

/* The value of the first field called name, or NULL. */
static const http_span *field(const uint8_t *in, const http_head *h, const char *name)
{
	for (size_t i = 0; i < h->n_fields; i++)
		if (span_is(in, h->fields[i].name, name))
			return &h->fields[i].value;
	return NULL;
}

/* Queues an HTTP answer for the handshake. */
static void answer(ws_layer *w, const char *fmt, const char *a, const char *b)
{
	int n = snprintf((char *)w->out, sizeof w->out, fmt, a, b);
	w->out_len = n > 0 && (size_t)n < sizeof w->out ? (size_t)n : 0;
	w->out_off = 0;
}

static int refuse(ws_layer *w, const char *status, const char *extra, int code, int id, ...)
{
	answer(w, RESP_ERROR, status, extra);
	va_list ap;
	va_start(ap, id);
	set_err_v(w, code, id, ap);
	va_end(ap);
	return code;
}

/* RFC 6455 section 4.1: a base64 nonce of 16 bytes is 22 characters of the
 * alphabet and "==". */
static bool key_ok(const uint8_t *k, size_t n)
{
	static const char alphabet[] =
	        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	if (n != 24 || k[22] != '=' || k[23] != '=')
		return false;
	for (size_t i = 0; i < 22; i++)
		if (!memchr(alphabet, k[i], sizeof alphabet - 1))
			return false;
	return true;
}

/* The server's side of section 4.2. Returns the head's length once it has
 * answered 101, 0 for more bytes, or an error with its answer queued. */
static ssize_t server_head(ws_layer *w, const uint8_t *in, size_t len)
{
	http_head h;
	char q[WS_QUOTE_MAX + 1], acc[29];
	size_t lim = len < WS_HEAD_MAX ? len : WS_HEAD_MAX;
	ssize_t r = http_parse_request(in, lim, &w->scan, &h);
	if (r == 0 && len >= WS_HEAD_MAX)
		return refuse(w, "431 Request Header Fields Too Large", "", LAYER_ERR_PROTO,
		              M_REQUEST_TOO_BIG);
	if (r == 0)
		return 0;
	if (r < 0)
		return refuse(w, "400 Bad Request", "", LAYER_ERR_PROTO, M_BAD_REQUEST,
		              "malformed head");

	/* The path first: a prober at another path sees a plain 404, as
	 * from any web server. */
	const uint8_t *t = in + h.target.off;
	size_t tn = h.target.len;
	const uint8_t *qm = memchr(t, '?', tn);
	size_t pn = qm ? (size_t)(qm - t) : tn;
	if (pn != strlen(w->path) || memcmp(t, w->path, pn) != 0)
		return refuse(w, "404 Not Found", "", LAYER_ERR_AUTH, M_WRONG_PATH, quote(t, pn, q),
		              w->path);

	const char *what = NULL;
	const http_span *v;
	if (h.method.len != 3 || memcmp(in + h.method.off, "GET", 3) != 0)
		what = "not GET";
	else if (h.minor < 1)
		what = "not HTTP/1.1";
	else if (!field(in, &h, "host"))
		what = "no Host";
	else if (!(v = field(in, &h, "upgrade")) || !lists(in, *v, "websocket"))
		what = "no Upgrade: websocket";
	else if (!(v = field(in, &h, "connection")) || !lists(in, *v, "upgrade"))
		what = "no Connection: Upgrade";
	if (what)
		return refuse(w, "400 Bad Request", "", LAYER_ERR_PROTO, M_BAD_REQUEST, what);
	/* Section 4.4: a version we do not speak is answered 426 with ours. */
	if (!(v = field(in, &h, "sec-websocket-version")) || v->len != 2 ||
	    memcmp(in + v->off, "13", 2) != 0)
		return refuse(w, "426 Upgrade Required", "Sec-WebSocket-Version: 13\r\n",
		              LAYER_ERR_PROTO, M_VERSION);
	if (!(v = field(in, &h, "sec-websocket-key")) || !key_ok(in + v->off, v->len))
		return refuse(w, "400 Bad Request", "", LAYER_ERR_PROTO, M_BAD_REQUEST,
		              "bad Sec-WebSocket-Key");
	if (ws_accept_key((const char *)in + v->off, v->len, acc) < 0)
		return set_err(w, LAYER_ERR_NOMEM, M_NOMEM);
	answer(w, RESP_101, acc, NULL);
	w->open = true;
	return r;
}

/* The client's side of section 4.1, steps 1 to 6 of the response checks. */
static ssize_t client_head(ws_layer *w, const uint8_t *in, size_t len)
{
	http_head h;
	char q[WS_QUOTE_MAX + 1];
	size_t lim = len < WS_HEAD_MAX ? len : WS_HEAD_MAX;
	ssize_t r = http_parse_response(in, lim, &w->scan, &h);
	if (r == 0 && len >= WS_HEAD_MAX)
		return set_err(w, LAYER_ERR_PROTO, M_RESPONSE_TOO_BIG);
	if (r == 0)
		return 0;
	if (r < 0)
		return set_err(w, LAYER_ERR_PROTO, M_BAD_RESPONSE, "malformed head");
	if (h.status != 101) {
		/* "HTTP/1.1 " is 9 bytes; what follows is "403 Forbidden". */
		const uint8_t *s = in + h.start.off + 9;
		size_t n = h.start.len > 9 ? h.start.len - 9 : 0;
		return set_err(w, LAYER_ERR_AUTH, M_REFUSED, quote(s, n, q));
	}
	const http_span *v;
	const char *what = NULL;
	if (!(v = field(in, &h, "upgrade")) || !lists(in, *v, "websocket"))
		what = "no Upgrade: websocket";
	else if (!(v = field(in, &h, "connection")) || !lists(in, *v, "upgrade"))
		what = "no Connection: Upgrade";
	else if (field(in, &h, "sec-websocket-extensions"))
		what = "an extension we did not ask for";
	else if (field(in, &h, "sec-websocket-protocol"))
		what = "a subprotocol we did not ask for";
	if (what)
		return set_err(w, LAYER_ERR_PROTO, M_BAD_RESPONSE, what);
	if (!(v = field(in, &h, "sec-websocket-accept")) || v->len != 28 ||
	    memcmp(in + v->off, w->accept, 28) != 0)
		return set_err(w, LAYER_ERR_PROTO, M_BAD_ACCEPT);
	w->open = true;
	return r;
}

/* ---- layer ops ---- */

/* A failure is returned only once its answer (an HTTP status, a close
 * frame) has been handed to down: the stack drops a failing call's
 * output. While some is still moving, or this call consumed input, the
 * call succeeds and a later one fails. */
static ssize_t failing(ws_layer *w, layer_buf *down, size_t consumed)
{
	size_t before = down->len;
	int rc = flush(w, down);
	if (rc < 0)
		return rc;
	if (consumed > 0 || down->len > before)
		return (ssize_t)consumed;
	return w->fail;
}

static ssize_t ws_from_below(layer *l, const uint8_t *in, size_t len, layer_buf *up,
                             layer_buf *down)
{
	ws_layer *w = (ws_layer *)l;
	if (w->fail)
		return failing(w, down, 0);
	size_t used = 0;
	if (!w->open) {
		ssize_t r = w->client ? client_head(w, in, len) : server_head(w, in, len);
		if (r < 0)
			return failing(w, down, 0);
		used = (size_t)r;
	}
	if (w->open) {
		if (!w->peer_closed)
			used += read_frames(w, in + used, len - used, up);
		if (w->peer_closed) /* nothing may follow a close frame: drop it */
			used = len;
	}
	if (w->fail)
		return failing(w, down, used);
	int rc = flush(w, down);
	return rc < 0 ? rc : (ssize_t)used;
}

/* Writes app bytes as binary frames of at most WS_MSG_OUT_MAX, each
 * whole into down's room (so control frames can always go between two),
 * masked on the way in by a client. Nothing is copied twice. */
static ssize_t ws_from_above(layer *l, const uint8_t *in, size_t len, layer_buf *down)
{
	ws_layer *w = (ws_layer *)l;
	if (w->fail) { /* from_below returns it, once lower layers took the answer */
		ssize_t r = failing(w, down, 0);
		return r < 0 ? 0 : r;
	}
	int rc = flush(w, down);
	if (rc < 0 || !w->open)
		return rc;
	if (w->shut)
		return len ? set_err(w, LAYER_ERR_STATE, M_SEND_SHUT) : 0;
	if (w->peer_closed)
		return (ssize_t)len; /* see ws.h: nobody reads them any more */
	size_t used = 0;
	/* Behind the handshake's last bytes and queued control frames only. */
	while (used < len && w->out_off == w->out_len && w->ctl_n == 0) {
		size_t room = layer_buf_room(down);
		size_t n = len - used < WS_MSG_OUT_MAX ? len - used : WS_MSG_OUT_MAX;
		if (ws_frame_head_len(n, w->client) + n > room) {
			/* A shorter frame fills the room: the header for room
			 * bytes is at least as long as the one for fewer. */
			size_t h = ws_frame_head_len(room, w->client);
			if (room <= h)
				break;
			n = room - h;
		}
		uint8_t key[4], *o = down->data + down->len;
		ssize_t h = head(w, o, WS_OP_BINARY, n, key);
		if (h < 0)
			return set_err(w, LAYER_ERR_NOMEM, M_NOMEM);
		if (w->client)
			ws_frame_mask(o + h, in + used, n, key, 0);
		else
			memcpy(o + h, in + used, n);
		down->len += (size_t)h + n;
		used += n;
	}
	return (ssize_t)used;
}

static int ws_start(layer *l, layer_buf *down)
{
	ws_layer *w = (ws_layer *)l;
	return flush(w, down);
}

static bool ws_ready(const layer *l) { return ((const ws_layer *)l)->open; }

static int ws_shutdown(layer *l, layer_buf *down)
{
	ws_layer *w = (ws_layer *)l;
	if (w->fail)
		return w->fail;
	if (!w->open || w->shut)
		return 0;
	w->shut = true;
	if (!w->peer_closed && queue_close(w, 1000) < 0) /* section 7.4.1: normal closure */
		return w->fail;
	return flush(w, down);
}

static const char *ws_error(const layer *l)
{
	const ws_layer *w = (const ws_layer *)l;
	return w->err[0] ? w->err : NULL;
}

static void ws_free(layer *l)
{
	ws_layer *w = (ws_layer *)l;
	EVP_CIPHER_CTX_free(w->mask);
	free(w->path);
	free(w);
}

static const layer_ops client_ops = {
	.name = "ws",
	.start = ws_start,
	.from_below = ws_from_below,
	.from_above = ws_from_above,
	.ready = ws_ready,
	.shutdown = ws_shutdown,
	.error = ws_error,
	.free = ws_free,
};

static const layer_ops server_ops = {
	.name = "ws",
	.start = NULL,
	.from_below = ws_from_below,
	.from_above = ws_from_above,
	.ready = ws_ready,
	.shutdown = ws_shutdown,
	.error = ws_error,
	.free = ws_free,
};

/* Whether s can go on a request line or header line as it is. */
static bool visible(const char *s, size_t max)
{
	size_t n = strlen(s);
	if (n == 0 || n > max)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f)
			return false;
	return true;
}

static ws_layer *layer_new(bool client, const char *path)
{
	ws_layer *w = calloc(1, sizeof *w);
	if (!w)
		return NULL;
	w->base.ops = client ? &client_ops : &server_ops;
	w->client = client;
	w->ks_off = sizeof w->ks;
	/* Section 5.1: a server reads masked frames only, a client unmasked
	 * ones. */
	w->dec.masked = !client;
	w->dec.max = WS_FRAME_MAX;
	if (!(w->path = strdup(path))) {
		ws_free(&w->base);
		return NULL;
	}
	return w;
}

layer *ws_client_new(const ws_client_config *cfg, char *err, size_t err_size)
{
	static const uint8_t iv[16];
	uint8_t nonce[16];
	char key[25];
	if (!cfg->path || cfg->path[0] != '/' || !visible(cfg->path, WS_PATH_MAX)) {
		say(err, err_size, M_BAD_PATH, cfg->path ? cfg->path : "");
		return NULL;
	}
	if (!cfg->host || !visible(cfg->host, WS_HOST_MAX)) {
		say(err, err_size, M_BAD_HOST, cfg->host ? cfg->host : "");
		return NULL;
	}
	ws_layer *w = layer_new(true, cfg->path);
	if (!w)
		goto nomem;
	if (!(w->mask = EVP_CIPHER_CTX_new()) ||
	    EVP_EncryptInit_ex(w->mask, EVP_chacha20(), NULL, cfg->seed, iv) != 1 ||
	    keystream(w, nonce, sizeof nonce) < 0)
		goto nomem;
	EVP_EncodeBlock((unsigned char *)key, nonce, sizeof nonce);
	if (ws_accept_key(key, 24, w->accept) < 0)
		goto nomem;
	int n = snprintf((char *)w->out, sizeof w->out,
	                 "GET %s HTTP/1.1\r\n"
	                 "Host: %s\r\n"
	                 "Upgrade: websocket\r\n"
	                 "Connection: Upgrade\r\n"
	                 "Sec-WebSocket-Key: %s\r\n"
	                 "Sec-WebSocket-Version: 13\r\n"
	                 "\r\n",
	                 cfg->path, cfg->host, key);
	if (n < 0 || (size_t)n >= sizeof w->out)
		goto nomem; /* cannot happen within WS_PATH_MAX and WS_HOST_MAX */
	w->out_len = (size_t)n;
	return &w->base;
nomem:
	if (w)
		ws_free(&w->base);
	say(err, err_size, M_NOMEM, NULL);
	return NULL;
}

layer *ws_server_new(const char *path, char *err, size_t err_size)
{
	if (!path || path[0] != '/' || !visible(path, WS_PATH_MAX)) {
		say(err, err_size, M_BAD_PATH, path ? path : "");
		return NULL;
	}
	ws_layer *w = layer_new(false, path);
	if (!w) {
		say(err, err_size, M_NOMEM, NULL);
		return NULL;
	}
	return &w->base;
}

bool ws_peer_closed(const layer *l)
{
	return l && (l->ops == &client_ops || l->ops == &server_ops) &&
	       ((const ws_layer *)l)->peer_closed;
}
