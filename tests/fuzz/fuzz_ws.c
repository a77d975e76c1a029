/* fuzz_ws.c - libFuzzer target: arbitrary wire bytes into a WebSocket layer, before and after the upgrade, through tight buffers. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/ws.h"

/* Input: flags, chunk, then the peer's bytes.
 *   flags bit 0: upgrade first (a valid request, or a valid 101 for a client);
 *   bit 1: a client layer instead of a server one;
 *   bits 2-4: the room the app side gives (up); bits 5-6: the wire side's (down);
 *   bit 7: the app also sends bytes now and then.
 *   chunk: bytes per read from the wire, 1..256. */

#define CHECK(x)                                                                                   \
	do {                                                                                       \
		if (!(x))                                                                          \
			abort();                                                                   \
	} while (0)

/* The stack's queue below the layer: what the layer has not taken yet. */
#define QUEUE_CAP (17 * 1024)

static const size_t UP_CAPS[8] = {1, 2, 7, 64, 1000, 4096, 4097, 17 * 1024};
static const size_t DOWN_CAPS[4] = {1, 13, 512, 17 * 1024};

static const char REQUEST[] = "GET /p HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n"
                              "Connection: Upgrade\r\n"
                              "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                              "Sec-WebSocket-Version: 13\r\n\r\n";

typedef struct rig {
	layer *l;
	uint8_t *q; /* the wire's bytes the layer has not consumed */
	size_t q_len;
	layer_buf up, down;
	size_t app_total, wire_in_total;
	bool failed;
} rig;

static bool known_error(ssize_t r)
{
	return r == LAYER_ERR_PROTO || r == LAYER_ERR_AUTH || r == LAYER_ERR_CLOSED ||
	       r == LAYER_ERR_NOMEM;
}

/* One from_below call on what the queue holds; the app and the socket
 * then take everything (the buffers are empty at each call's start, so
 * their caps are the room each call has). */
/* Returns whether the call moved anything. */
static bool below(rig *g)
{
	size_t up0 = g->up.len, down0 = g->down.len, q0 = g->q_len;
	ssize_t r = g->l->ops->from_below(g->l, g->q, g->q_len, &g->up, &g->down);
	CHECK(g->up.len <= g->up.cap && g->down.len <= g->down.cap);
	if (r < 0) {
		CHECK(known_error(r));
		const char *e = g->l->ops->error(g->l);
		CHECK(e && strncmp(e, "ws: ", 4) == 0);
		g->failed = true;
		return false;
	}
	CHECK((size_t)r <= g->q_len);
	memmove(g->q, g->q + r, g->q_len - (size_t)r);
	g->q_len -= (size_t)r;
	g->app_total += g->up.len - up0;
	/* A full queue with room on both sides must move something, or the
	 * layer would stall the connection for good. */
	if (q0 == QUEUE_CAP && up0 == 0 && down0 == 0)
		CHECK(r > 0 || g->up.len > 0 || g->down.len > 0);
	bool moved = r > 0 || g->up.len > 0 || g->down.len > 0;
	g->up.len = 0;
	g->down.len = 0;
	return moved;
}

static void above(rig *g, const uint8_t *in, size_t len)
{
	ssize_t r = g->l->ops->from_above(g->l, in, len, &g->down);
	CHECK(g->down.len <= g->down.cap);
	if (r < 0) {
		CHECK(known_error(r) || r == LAYER_ERR_STATE);
		g->failed = true;
		return;
	}
	CHECK((size_t)r <= len);
	g->down.len = 0;
}

/* Queues bytes as the stack would, as far as the queue has room; returns
 * how many it took. */
static size_t offer(rig *g, const uint8_t *in, size_t len)
{
	size_t n = QUEUE_CAP - g->q_len;
	if (n > len)
		n = len;
	memcpy(g->q + g->q_len, in, n);
	g->q_len += n;
	g->wire_in_total += n;
	return n;
}

/* A client's start wrote its request into down: answer it with the right
 * 101, so that what follows is framed input. */
static void answer_client(rig *g, const uint8_t *req, size_t len)
{
	static const char name[] = "Sec-WebSocket-Key: ";
	char acc[29], resp[256];
	const uint8_t *k = memmem(req, len, name, sizeof name - 1);
	CHECK(k);
	k += sizeof name - 1;
	CHECK(ws_accept_key((const char *)k, 24, acc) == 0);
	size_t n = (size_t)snprintf(resp, sizeof resp,
	                            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
	                            "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
	                            acc);
	offer(g, (const uint8_t *)resp, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	uint8_t flags = data[0];
	size_t chunk = (size_t)data[1] + 1;
	data += 2, size -= 2;
	bool upgrade = flags & 1, client = flags & 2, talk = flags & 0x80;

	static uint8_t q[QUEUE_CAP];
	rig g = {.q = q};
	char err[128];
	if (client) {
		ws_client_config cfg = {.path = "/p", .host = "h"};
		memset(cfg.seed, flags, sizeof cfg.seed);
		g.l = ws_client_new(&cfg, err, sizeof err);
	} else {
		g.l = ws_server_new("/p", err, sizeof err);
	}
	CHECK(g.l);
	g.up.cap = UP_CAPS[(flags >> 2) & 7];
	g.down.cap = DOWN_CAPS[(flags >> 5) & 3];
	g.up.data = malloc(g.up.cap);
	g.down.data = malloc(g.down.cap);
	/* Room for the whole request, however tight down is. */
	uint8_t *req = malloc(4096);
	size_t req_len = 0;

	if (client) {
		layer_buf all = {.data = req, .cap = 4096};
		CHECK(g.l->ops->start(g.l, &all) == 0);
		req_len = all.len;
		CHECK(req_len > 0 && memcmp(req, "GET /p HTTP/1.1\r\n", 17) == 0);
	}
	if (upgrade) {
		if (client)
			answer_client(&g, req, req_len);
		else
			offer(&g, (const uint8_t *)REQUEST, sizeof REQUEST - 1);
		size_t guard = 0;
		while (!g.failed && !g.l->ops->ready(g.l) && guard++ < 8)
			below(&g);
		CHECK(g.failed || g.l->ops->ready(g.l));
		/* Drain the 101 however small down is. */
		for (guard = 0; !g.failed && guard < 1024; guard++)
			above(&g, NULL, 0);
	}

	size_t off = 0, rounds = 0;
	while (!g.failed && (off < size || g.q_len > 0)) {
		size_t n = size - off < chunk ? size - off : chunk;
		off += offer(&g, data + off, n);
		bool moved = below(&g);
		if (talk && !g.failed && (rounds++ & 3) == 0)
			above(&g, data, size < 100 ? size : 100);
		/* With the input all offered, what the layer leaves is a
		 * partial head or frame: nothing more will move. */
		if (off == size && !moved)
			break;
	}
	/* Payload comes out of the wire's bytes: never more of it. */
	CHECK(g.app_total <= g.wire_in_total);
	if (!g.failed) {
		below(&g);
		if (!g.failed && g.l->ops->shutdown(g.l, &g.down) == 0)
			g.down.len = 0;
		if (!g.failed)
			above(&g, (const uint8_t *)"x", 1);
	}
	g.l->ops->free(g.l);
	free(g.up.data);
	free(g.down.data);
	free(req);
	return 0;
}
