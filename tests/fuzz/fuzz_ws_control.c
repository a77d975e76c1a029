/* fuzz_ws_control.c - libFuzzer target: WebSocket control frames (ping, pong, close, fragments, oversized) into a server or client layer whose wire side stops reading; what it queues stays bounded. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/stack.h"
#include "transport/ws.h"

/* fuzz_ws throws raw bytes at the layer; this one speaks the protocol
 * frame by frame, so that it reaches the control paths: pings and pongs
 * before and after the upgrade and between fragments, close frames of
 * every shape, oversized and fragmented control frames, frames declaring
 * more than WS_FRAME_MAX, wrong masking. And it plays a peer that does not
 * read: the wire side below the layer takes nothing (room 0) for as long
 * as the fuzzer says, while floods of pings keep coming.
 *
 * Input: flags, then ops (a kind byte and its arguments).
 *   flags bit 0: a client layer (the peer is a server) instead of a server;
 *   bit 1: the upgrade waits for its op (frames before it are offered to
 *   the HTTP parser); bits 2-4: the wire room; bits 5-7: the app room.
 *
 * Checked:
 * - the backlog: whenever the wire starts reading again after a stall
 *   (and at the end), what the layer then writes without any new input is
 *   what it had queued; it stays under BACKLOG_MAX. The layer must stop
 *   taking input or fail, never queue without bound;
 * - after the layer returned an error, no call hands the app a byte;
 * - the app gets a prefix of the data payloads of the well-formed frames,
 *   in order, none after a close frame or a broken frame; all of them once
 *   everything was read, unless the layer failed;
 * - what the layer writes is well framed (RFC 6455 section 5): masked iff
 *   a client, control frames whole and at most 125 bytes, data frames
 *   binary, carrying a prefix of what the app handed over, each pong the
 *   payload of the next ping not yet answered, nothing after a close;
 * - calls stay in their buffers and consume no more than they were given. */

#define CHECK(x)                                                                                   \
	do {                                                                                       \
		if (!(x))                                                                          \
			abort();                                                                   \
	} while (0)

/* What a layer may hold for the wire. ws.h bounds the control replies by
 * WS_CONTROL_QUEUE_MAX; data waits for one message in flight and one
 * queued (ws.c queues a message only when none is); the handshake answer
 * is under 1 KiB. Without that constant: 1 MiB. */
#define FRAME_HEAD_MAX 14
#ifdef WS_CONTROL_QUEUE_MAX
#define BACKLOG_MAX                                                                                \
	(2 * (WS_MSG_OUT_MAX + FRAME_HEAD_MAX) + (WS_CONTROL_QUEUE_MAX + 2) * (125 + FRAME_HEAD_MAX) + \
	 1024)
#else
#define BACKLOG_MAX (1024 * 1024)
#endif

#define QUEUE_CAP STACK_QUEUE_CAP /* the stack's queue below the layer */
#define LOG_MAX (2 * 1024 * 1024)
#define PINGS_MAX 40000
/* Flood pings per input: enough for 1 MiB of 125-byte pongs and more. */
#define FLOOD_BUDGET 12000

static const size_t WIRE_ROOMS[8] = {0, 0, 1, 7, 64, 4096, 65536, 0};
static const size_t APP_ROOMS[8] = {1, 16, 4096, QUEUE_CAP, QUEUE_CAP, QUEUE_CAP, 0, 3};
#define ROOM_BIG 65536

static const char REQUEST[] = "GET /p HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n"
                              "Connection: Upgrade\r\n"
                              "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                              "Sec-WebSocket-Version: 13\r\n\r\n";

typedef struct bytes_log {
	uint8_t *d;
	size_t len;
	bool over;
} bytes_log;

static void log_put(bytes_log *l, const uint8_t *p, size_t n)
{
	if (l->over || n > LOG_MAX - l->len) {
		l->over = true;
		return;
	}
	memcpy(l->d + l->len, p, n);
	l->len += n;
}

typedef struct rig {
	layer *l;
	bool client;
	uint8_t q[QUEUE_CAP]; /* the wire's bytes the layer has not consumed */
	size_t q_len;
	size_t wire_room, app_room; /* what each side takes per call; 0: not reading */
	bool failed;                /* a call returned an error */
	bool stuck;                 /* the layer took no more: the peer's stream is cut */
	bool upgraded;              /* the upgrade was offered */
	bytes_log app;  /* what the layer handed up */
	bytes_log exp;  /* the data payloads of the well-formed frames offered */
	bool frozen;    /* a close or a broken frame was offered: exp ends there */
	bool unknown;   /* bytes of no known framing were offered */
	bool in_msg;    /* a fragmented data message is open on the peer's side */
	bytes_log wire; /* what the layer wrote */
	bytes_log sent; /* what the app handed the layer and it took */
	uint64_t pings[PINGS_MAX]; /* the pings offered, hashed, in order */
	size_t n_pings;
	bool pings_over;
	size_t flood_left; /* of FLOOD_BUDGET */
	uint8_t key[4];
	char req[1024]; /* a client's upgrade request */
	size_t req_len;
} rig;

static uint64_t hash(const uint8_t *p, size_t n)
{
	uint64_t h = 1469598103934665603ull ^ n;
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 1099511628211ull;
	return h;
}

/* What the layer wrote, as the stack sends it: nothing of a failing call,
 * nothing after it. */
static void wire_put(rig *g, const uint8_t *p, size_t n)
{
	if (!g->failed)
		log_put(&g->wire, p, n);
}

static bool known_error(ssize_t r)
{
	return r == LAYER_ERR_PROTO || r == LAYER_ERR_AUTH || r == LAYER_ERR_CLOSED ||
	       r == LAYER_ERR_NOMEM || r == LAYER_ERR_STATE;
}

static void failed(rig *g, ssize_t r)
{
	CHECK(known_error(r));
	const char *e = g->l->ops->error(g->l);
	CHECK(e && strncmp(e, "ws: ", 4) == 0);
	g->failed = true;
}

/* The app got bytes: a prefix of the payloads. */
static void got_app(rig *g, const uint8_t *p, size_t n)
{
	if (n == 0)
		return;
	if (!g->unknown && !g->exp.over && !g->app.over) {
		CHECK(g->app.len + n <= g->exp.len);
		CHECK(memcmp(g->exp.d + g->app.len, p, n) == 0);
	}
	log_put(&g->app, p, n);
}

/* One from_below on what the queue holds. Returns whether anything moved.
 * A failing call's output is dropped, as the stack drops it. */
static bool below(rig *g)
{
	static uint8_t upb[QUEUE_CAP], downb[ROOM_BIG];
	layer_buf up = {.data = g->app_room ? upb : NULL, .cap = g->app_room};
	layer_buf down = {.data = g->wire_room ? downb : NULL, .cap = g->wire_room};
	size_t q0 = g->q_len;
	ssize_t r = g->l->ops->from_below(g->l, g->q, g->q_len, &up, &down);
	CHECK(up.len <= up.cap && down.len <= down.cap);
	if (g->failed)
		CHECK(up.len == 0); /* nothing for the app after an error */
	if (r < 0) {
		failed(g, r);
		return false;
	}
	got_app(g, upb, up.len);
	wire_put(g, downb, down.len);
	CHECK((size_t)r <= q0);
	memmove(g->q, g->q + r, g->q_len - (size_t)r);
	g->q_len -= (size_t)r;
	return r > 0 || up.len > 0 || down.len > 0;
}

static void above(rig *g, const uint8_t *in, size_t len)
{
	static uint8_t downb[ROOM_BIG];
	layer_buf down = {.data = g->wire_room ? downb : NULL, .cap = g->wire_room};
	ssize_t r = g->l->ops->from_above(g->l, in, len, &down);
	CHECK(down.len <= down.cap);
	if (r < 0) {
		failed(g, r);
		return;
	}
	wire_put(g, downb, down.len);
	CHECK((size_t)r <= len);
	log_put(&g->sent, in, (size_t)r);
}

/* The wire reads again: everything the layer writes now, with no input, is
 * what it held. (Once a call has failed the stack calls the layer no more,
 * and frees it with what it held.) */
static void drain_backlog(rig *g)
{
	static uint8_t downb[ROOM_BIG];
	size_t backlog = 0;
	for (int i = 0; i < 4096 && !g->failed; i++) {
		layer_buf down = {.data = downb, .cap = sizeof downb};
		ssize_t r = g->l->ops->from_above(g->l, NULL, 0, &down);
		CHECK(down.len <= down.cap && r <= 0);
		if (r < 0) {
			failed(g, r);
			break;
		}
		wire_put(g, downb, down.len);
		backlog += down.len;
		CHECK(backlog <= BACKLOG_MAX);
		if (down.len == 0)
			break;
	}
}

/* Puts bytes in the queue, letting the layer read when it is full. False
 * when the layer takes no more (the rest is lost: the stream is cut). */
static bool offer(rig *g, const uint8_t *p, size_t n)
{
	if (g->stuck)
		return false;
	int idle = 0;
	while (n > 0) {
		size_t k = QUEUE_CAP - g->q_len;
		if (k > n)
			k = n;
		memcpy(g->q + g->q_len, p, k);
		g->q_len += k;
		p += k;
		n -= k;
		if (n == 0)
			break;
		if (below(g))
			idle = 0;
		else if (++idle >= 3 || g->failed)
			break;
	}
	if (n > 0) {
		g->stuck = true;
		g->unknown = true;
		return false;
	}
	return true;
}

/* A frame as the peer writes it: masked toward a server. declared may be
 * more than the plen payload bytes that follow. */
static size_t build(rig *g, uint8_t *out, uint8_t b0, uint64_t declared, const uint8_t *payload,
                    size_t plen, bool flip_mask)
{
	bool mask = !g->client != flip_mask;
	size_t i = 0;
	out[i++] = b0;
	uint8_t m = mask ? 0x80 : 0;
	if (declared < 126) {
		out[i++] = (uint8_t)(m | declared);
	} else if (declared < 65536) {
		out[i++] = m | 126;
		out[i++] = (uint8_t)(declared >> 8);
		out[i++] = (uint8_t)declared;
	} else {
		out[i++] = m | 127;
		for (int s = 56; s >= 0; s -= 8)
			out[i++] = (uint8_t)(declared >> s);
	}
	if (mask) {
		memcpy(out + i, g->key, 4);
		i += 4;
	}
	for (size_t j = 0; j < plen; j++)
		out[i + j] = mask ? payload[j] ^ g->key[j & 3] : payload[j];
	return i + plen;
}

typedef struct cursor {
	const uint8_t *p;
	size_t n, i;
} cursor;

static uint8_t take(cursor *c) { return c->i < c->n ? c->p[c->i++] : 0; }

/* len bytes of payload from the input (a pattern once it runs dry). */
static void payload(cursor *c, uint8_t *out, size_t len)
{
	for (size_t j = 0; j < len; j++)
		out[j] = c->i < c->n ? take(c) : (uint8_t)(j * 7);
}

/* Offers a well-formed frame, and records what it means. */
static void send_frame(rig *g, uint8_t b0, const uint8_t *p, size_t plen)
{
	static uint8_t f[FRAME_HEAD_MAX + 65536];
	uint8_t op = b0 & 0x0f;
	bool fin = b0 & 0x80;
	bool data = op <= 2;
	bool ok = !g->frozen && g->upgraded;
	if (data && ((op == 0) != g->in_msg))
		ok = false; /* a continuation outside a message, or a new one inside: broken */
	if (ok && data) {
		log_put(&g->exp, p, plen);
		g->in_msg = !fin;
	}
	if (ok && op == 9) {
		if (g->n_pings < PINGS_MAX)
			g->pings[g->n_pings++] = hash(p, plen);
		else
			g->pings_over = true;
	}
	if (!ok || op == 8)
		g->frozen = true;
	size_t n = build(g, f, b0, plen, p, plen, false);
	(void)offer(g, f, n);
}

/* Offers a frame the layer must refuse: nothing counts after it. */
static void send_broken(rig *g, uint8_t b0, uint64_t declared, const uint8_t *p, size_t plen,
                        bool flip_mask)
{
	static uint8_t f[FRAME_HEAD_MAX + 256];
	g->frozen = true;
	size_t n = build(g, f, b0, declared, p, plen, flip_mask);
	(void)offer(g, f, n);
}

static void upgrade(rig *g)
{
	if (g->upgraded)
		return;
	g->upgraded = true;
	if (!g->client) {
		(void)offer(g, (const uint8_t *)REQUEST, sizeof REQUEST - 1);
		return;
	}
	static const char name[] = "Sec-WebSocket-Key: ";
	char acc[29], resp[256];
	const char *k = memmem(g->req, g->req_len, name, sizeof name - 1);
	CHECK(k);
	k += sizeof name - 1;
	CHECK(ws_accept_key(k, 24, acc) == 0);
	int n = snprintf(resp, sizeof resp,
	                 "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
	                 "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
	                 acc);
	CHECK(n > 0 && (size_t)n < sizeof resp);
	(void)offer(g, (const uint8_t *)resp, (size_t)n);
}

/* A wire that starts reading (or reading more) first takes the backlog. */
static void set_wire_room(rig *g, size_t room)
{
	if (room > 0)
		drain_backlog(g);
	g->wire_room = room;
}

/* Pings with the wire not reading: each answer waits in the layer. */
static void flood(rig *g, cursor *c, uint8_t op)
{
	static uint8_t batch[QUEUE_CAP];
	size_t count = ((size_t)take(c) + 1) * 64;
	if (count > g->flood_left)
		count = g->flood_left;
	g->flood_left -= count;
	size_t plen = take(c) % 126;
	uint8_t fill = take(c);
	uint8_t p[125];
	memset(p, fill, plen);
	set_wire_room(g, (op & 0x10) ? 1 : 0);
	uint8_t f[FRAME_HEAD_MAX + 125];
	size_t flen = build(g, f, 0x89, plen, p, plen, false);
	uint64_t h = hash(p, plen);
	int idle = 0;
	for (size_t sent = 0; sent < count && !g->failed && !g->stuck && idle < 4;) {
		size_t k = 0;
		while (sent < count && k + flen <= sizeof batch - g->q_len) {
			memcpy(batch + k, f, flen);
			k += flen;
			sent++;
			if (!g->frozen && g->upgraded) {
				if (g->n_pings < PINGS_MAX)
					g->pings[g->n_pings++] = h;
				else
					g->pings_over = true;
			}
		}
		if (k > 0 && !offer(g, batch, k))
			break;
		if (below(g))
			idle = 0;
		else
			idle++;
	}
}

static void close_frame(rig *g, cursor *c, uint8_t variant)
{
	uint8_t p[125];
	size_t n = 0;
	switch (variant & 7) {
	case 0:
		break;
	case 1:
		p[0] = 0x03, p[1] = 0xe8; /* 1000 */
		n = 2;
		break;
	case 2:
		p[0] = 0x03, p[1] = 0xe9; /* 1001, a reason */
		memcpy(p + 2, "bye", 3);
		n = 5;
		break;
	case 3:
		p[0] = 0x03; /* one byte: no status code fits */
		n = 1;
		break;
	case 4:
		p[0] = 0x03, p[1] = 0xe7; /* 999: not a code */
		n = 2;
		break;
	case 5:
		p[0] = take(c), p[1] = take(c);
		n = 2;
		break;
	case 6:
		p[0] = 0x03, p[1] = 0xe8, p[2] = 0xff; /* a reason that is no UTF-8 */
		n = 3;
		break;
	default:
		n = take(c) % 126;
		payload(c, p, n);
		break;
	}
	send_frame(g, 0x88, p, n);
}

static void step(rig *g, cursor *c)
{
	static uint8_t p[65536];
	uint8_t op = take(c);
	switch (op & 15) {
	case 0: case 1: { /* a data frame: binary or text, final or not */
		size_t len = take(c);
		if (op & 0x40)
			len = len * 64 + take(c);
		payload(c, p, len);
		uint8_t opcode = g->in_msg ? 0 : (op & 0x10) ? 1 : 2;
		if (op & 1)
			opcode = 0; /* a continuation, whatever the state */
		send_frame(g, (uint8_t)((op & 0x20 ? 0 : 0x80) | opcode), p, len);
		break;
	}
	case 2: { /* a ping */
		size_t len = take(c) % 126;
		payload(c, p, len);
		send_frame(g, 0x89, p, len);
		break;
	}
	case 3: { /* an unsolicited pong */
		size_t len = take(c) % 126;
		payload(c, p, len);
		send_frame(g, 0x8a, p, len);
		break;
	}
	case 4:
		close_frame(g, c, op >> 4);
		break;
	case 5: { /* control frames the layer must refuse */
		size_t len = take(c);
		payload(c, p, 126);
		switch ((op >> 4) & 7) {
		case 0: send_broken(g, 0x89, 126, p, 126, false); break; /* a ping of 126 bytes */
		case 1: send_broken(g, 0x09, len % 126, p, len % 126, false); break; /* fragmented */
		case 2: send_broken(g, 0x83, 0, p, 0, false); break;        /* opcode 3 */
		case 3: send_broken(g, 0xc2, len % 126, p, len % 126, false); break; /* RSV1 */
		case 4: send_broken(g, 0x89, len % 126, p, len % 126, true); break;  /* masking */
		case 5: send_broken(g, 0x8b, 0, p, 0, false); break;        /* opcode 0xb */
		case 6: send_broken(g, 0x88, 126, p, 126, false); break;    /* a close of 126 */
		default: send_broken(g, 0x8a, 127, p, 126, false); break;   /* a pong of 127 */
		}
		break;
	}
	case 6: { /* a data frame declaring more than WS_FRAME_MAX */
		uint64_t declared = (uint64_t)WS_FRAME_MAX + 1 + take(c);
		if (op & 0x10)
			declared = (uint64_t)1 << 62;
		payload(c, p, 16);
		send_broken(g, 0x82, declared, p, 16, false);
		break;
	}
	case 7:
		flood(g, c, op);
		break;
	case 8:
		set_wire_room(g, WIRE_ROOMS[take(c) & 7]);
		break;
	case 9:
		g->app_room = APP_ROOMS[take(c) & 7];
		break;
	case 10: { /* the app sends */
		size_t len = (size_t)take(c) * 64 + 1;
		payload(c, p, len);
		above(g, p, len);
		break;
	}
	case 11: { /* bytes of no framing */
		size_t len = take(c) % 64;
		payload(c, p, len);
		g->unknown = true;
		(void)offer(g, p, len);
		break;
	}
	case 12:
		upgrade(g);
		break;
	case 13: {
		static uint8_t downb[ROOM_BIG];
		layer_buf down = {.data = g->wire_room ? downb : NULL, .cap = g->wire_room};
		int r = g->l->ops->shutdown(g->l, &down);
		CHECK(down.len <= down.cap);
		if (r < 0)
			failed(g, r);
		else
			wire_put(g, downb, down.len);
		break;
	}
	case 14: { /* a ping between the fragments of a message */
		size_t len = take(c) % 126;
		payload(c, p, len);
		if (!g->in_msg)
			send_frame(g, 0x02, p, 1);
		send_frame(g, 0x89, p, len);
		send_frame(g, 0x80, p, len);
		break;
	}
	default:
		for (int i = 0; i < 4 && below(g); i++)
			;
		break;
	}
	(void)below(g);
}

/* What the layer wrote: its handshake, then well-formed frames. Once a
 * call failed the stack sends no more: the end may be cut anywhere. */
static void check_wire(const rig *g)
{
	const uint8_t *w = g->wire.d;
	size_t n = g->wire.len, i = 0;
	bool cut = g->failed;
	if (g->wire.over)
		return;
	const uint8_t *end = memmem(w, n, "\r\n\r\n", 4);
	if (!end) {
		CHECK(cut || n == (g->client ? g->req_len : 0)); /* no half answer */
		return;
	}
	i = (size_t)(end - w) + 4;
	if (g->client) {
		CHECK(i == g->req_len && memcmp(w, g->req, i) == 0);
	} else if (memcmp(w, "HTTP/1.1 101 ", 13) != 0) {
		CHECK(i == n); /* an HTTP refusal ends the connection */
		return;
	}
	size_t pongs = 0, data = 0;
	bool closed = false;
	static uint8_t pl[65536 + 16];
	while (i < n) {
		CHECK(!closed);
		if (n - i < 2)
			break;
		uint8_t b0 = w[i], b1 = w[i + 1];
		uint8_t op = b0 & 0x0f;
		bool fin = b0 & 0x80, masked = b1 & 0x80;
		uint64_t len = b1 & 0x7f;
		CHECK((b0 & 0x70) == 0 && masked == g->client);
		size_t ext = len == 126 ? 2 : len == 127 ? 8 : 0;
		size_t head = 2 + ext + (masked ? 4 : 0);
		if (n - i < head)
			break;
		if (ext) {
			len = 0;
			for (size_t k = 0; k < ext; k++)
				len = len << 8 | w[i + 2 + k];
		}
		uint8_t key[4] = {0};
		if (masked)
			memcpy(key, w + i + 2 + ext, 4);
		CHECK(len <= sizeof pl);
		if (n - i - head < len)
			break;
		i += head;
		for (size_t k = 0; k < len; k++)
			pl[k] = w[i + k] ^ key[k & 3];
		i += (size_t)len;
		if (op >= 8)
			CHECK(fin && len <= 125);
		switch (op) {
		case 0: case 2: /* data: what the app handed over, in order */
			if (!g->sent.over) {
				CHECK(data + len <= g->sent.len);
				CHECK(memcmp(pl, g->sent.d + data, (size_t)len) == 0);
			}
			data += (size_t)len;
			break;
		case 8:
			CHECK(len == 0 || len >= 2);
			closed = true;
			break;
		case 10: /* each ping answered in turn; after bytes of no known
			  * framing the layer's frames are not the recorded ones
			  * (issue 32: a ping parsed from a frame's payload) */
			if (!g->pings_over && !g->unknown)
				CHECK(pongs < g->n_pings && g->pings[pongs] == hash(pl, (size_t)len));
			pongs++;
			break;
		default:
			CHECK(false); /* the layer sends neither text nor pings */
		}
	}
	CHECK(i == n || cut); /* a frame cut short only where the stack stopped */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static rig g;
	static uint8_t app[LOG_MAX], exp[LOG_MAX], wire[LOG_MAX], sent[LOG_MAX];
	if (size < 1)
		return 0;
	uint8_t flags = data[0];
	cursor c = {.p = data + 1, .n = size - 1};
	memset(&g, 0, sizeof g);
	g.app.d = app;
	g.exp.d = exp;
	g.wire.d = wire;
	g.sent.d = sent;
	g.client = flags & 1;
	g.flood_left = FLOOD_BUDGET;
	g.wire_room = WIRE_ROOMS[(flags >> 2) & 7];
	g.app_room = APP_ROOMS[(flags >> 5) & 7];
	memcpy(g.key, (const uint8_t[4]){0x12, 0x34, flags, 0x9a}, 4);
	char err[128];
	if (g.client) {
		ws_client_config cfg = {.path = "/p", .host = "h"};
		memset(cfg.seed, flags, sizeof cfg.seed);
		g.l = ws_client_new(&cfg, err, sizeof err);
		CHECK(g.l);
		layer_buf all = {.data = (uint8_t *)g.req, .cap = sizeof g.req};
		CHECK(g.l->ops->start(g.l, &all) == 0);
		g.req_len = all.len;
		CHECK(g.req_len > 0 && memcmp(g.req, "GET /p HTTP/1.1\r\n", 17) == 0);
		log_put(&g.wire, (const uint8_t *)g.req, g.req_len);
	} else {
		g.l = ws_server_new("/p", err, sizeof err);
		CHECK(g.l);
	}
	if (!(flags & 2))
		upgrade(&g);

	for (int ops = 0; c.i < c.n && ops < 4096; ops++)
		step(&g, &c);

	/* Both sides read everything: what is left moves. */
	drain_backlog(&g);
	set_wire_room(&g, ROOM_BIG);
	g.app_room = QUEUE_CAP;
	for (int i = 0; i < 64 && below(&g); i++)
		;
	drain_backlog(&g);
	if (!g.failed && !g.unknown && !g.app.over && !g.exp.over && g.q_len == 0)
		CHECK(g.app.len == g.exp.len); /* every payload arrived */
	check_wire(&g);
	g.l->ops->free(g.l);
	return 0;
}
