/* fuzz_proxy_clients.c - libFuzzer target: the SOCKS5 and HTTP CONNECT client layers fed arbitrary server bytes, whole, byte by byte and cut in two. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/http_client.h"
#include "proto/socks_client.h"

/* Input: selector, two bytes of cut point, then the server's bytes.
 *   selector % 6: 0 socks CONNECT, 1 socks CONNECT with an account,
 *   2 socks UDP ASSOCIATE, 3 socks UDP ASSOCIATE with an account,
 *   4 http CONNECT, 5 http CONNECT with an account;
 *   (selector / 6) % 3: the destination: IPv4, IPv6, a domain;
 *   (selector / 18) % 2: the buffer below takes 1 + (selector / 36) % 7
 *   bytes at a time in two of the three runs, instead of all. */

#define CHECK(x)                                                                                   \
	do {                                                                                       \
		if (!(x))                                                                          \
			abort();                                                                   \
	} while (0)

/* Bytes a run may hand up or down; the SOCKS handshake sends under 600,
 * the HTTP request under 1300. */
#define SENT_MAX 2048
#define UP_MAX 1024

typedef struct outcome {
	int err;
	bool has_text;
	char text[160]; /* a copy: the layer is freed after the run */
	bool ready;
	bool handshake;
	bool relay;
	char relay_text[ADDR_TEXT_MAX];
	size_t sent_len, up_len;
	uint8_t sent[SENT_MAX];
	uint8_t up[UP_MAX];
} outcome;

static layer *make(uint8_t sel)
{
	addr_dest d = {0};
	switch ((sel / 6) % 3) {
	case 0:
		d = (addr_dest){.kind = ADDR_IPV4, .port = 80, .u.v4 = {10, 1, 2, 3}};
		break;
	case 1:
		d = (addr_dest){.kind = ADDR_IPV6, .port = 443, .u.v6 = {0x20, 0x01, [15] = 5}};
		break;
	default:
		CHECK(addr_dest_set_domain(&d, "example.com", 11, 8080) == 0);
		break;
	}
	bool creds = sel % 2;
	const char *u = creds ? "alice" : NULL, *p = creds ? "secret" : NULL;
	switch (sel % 6) {
	case 0:
	case 1:
		return socks_client_new(&d, u, p);
	case 2:
	case 3:
		return socks_client_udp_new(u, p);
	default:
		return http_client_new(&d, u, p);
	}
}

static bool is_socks(uint8_t sel)
{
	return sel % 6 < 4;
}

/* Drives l as the stack would: the server's bytes arrive in pieces of step
 * (0: at once; cut first when cut > 0), what is not consumed is offered
 * again with the next piece appended, and the layer is called until
 * nothing moves; the buffer below has room for window bytes at a time and
 * is emptied into o->sent after each call. */
static void drive(uint8_t sel, const uint8_t *srv, size_t len, size_t step, size_t cut,
                  size_t window, outcome *o)
{
	static uint8_t held[64 * 1024];
	uint8_t wbuf[SENT_MAX];
	layer *l = make(sel);
	CHECK(l != NULL);
	memset(o, 0, offsetof(outcome, sent));
	layer_buf down = {.data = wbuf, .cap = window};
	layer_buf up = {.data = o->up, .cap = UP_MAX};
	CHECK(!l->ops->ready(l));
	int rc = l->ops->start(l, &down);
	size_t held_len = 0, arrived = 0;
	bool more = true; /* another round is due: bytes arrived or moved */
	while (rc == 0 && more) {
		CHECK(o->sent_len + down.len <= SENT_MAX);
		memcpy(o->sent + o->sent_len, down.data, down.len);
		o->sent_len += down.len;
		down.len = 0;
		if (arrived < len) {
			size_t n = step ? step : len;
			if (cut && arrived == 0)
				n = cut;
			if (n > len - arrived)
				n = len - arrived;
			memcpy(held + held_len, srv + arrived, n);
			held_len += n;
			arrived += n;
		}
		ssize_t r = l->ops->from_below(l, held, held_len, &up, &down);
		if (r < 0) {
			rc = (int)r;
			break;
		}
		CHECK((size_t)r <= held_len);
		memmove(held, held + r, held_len - (size_t)r);
		held_len -= (size_t)r;
		/* Before ready nothing goes up; the head bounds what is held. */
		if (!l->ops->ready(l))
			CHECK(up.len == 0 && held_len <= HTTP_CLIENT_HEAD_MAX);
		more = arrived < len || r > 0 || down.len > 0;
	}
	CHECK(o->sent_len + down.len <= SENT_MAX);
	memcpy(o->sent + o->sent_len, down.data, down.len);
	o->sent_len += down.len;
	o->err = rc;
	const char *text = l->ops->error(l);
	o->has_text = text != NULL;
	if (text) {
		CHECK(strlen(text) < sizeof o->text);
		memcpy(o->text, text, strlen(text) + 1);
	}
	o->ready = l->ops->ready(l);
	o->up_len = up.len;
	CHECK(rc == 0 || rc == LAYER_ERR_AUTH || rc == LAYER_ERR_PROTO);
	CHECK((rc != 0) == o->has_text);
	CHECK(!(o->ready && rc));
	if (is_socks(sel)) {
		o->handshake = socks_client_in_handshake(l);
		const addr_dest *relay = socks_client_relay(l);
		o->relay = relay != NULL;
		CHECK(o->relay == (o->ready && sel % 6 >= 2));
		if (relay) {
			CHECK(relay->network == ADDR_UDP && relay->kind != ADDR_DOMAIN);
			addr_dest_format(relay, o->relay_text, sizeof o->relay_text);
		}
	} else {
		o->handshake = http_client_in_handshake(l);
	}
	CHECK(o->handshake == (!o->ready && !rc));
	/* Once failed, a layer stays failed. */
	if (rc) {
		CHECK(l->ops->from_below(l, held, 0, &up, &down) == rc);
		CHECK(l->ops->from_above(l, held, 1, &down) == rc);
	}
	/* An EOF fails the handshake, and only the handshake. */
	bool was = o->handshake;
	int e = is_socks(sel) ? socks_client_eof(l) : http_client_eof(l);
	CHECK(e == (was ? LAYER_ERR_CLOSED : 0));
	if (was)
		CHECK(l->ops->error(l) != NULL);
	l->ops->free(l);
}

static void same(const outcome *a, const outcome *b)
{
	CHECK(a->err == b->err && a->ready == b->ready && a->handshake == b->handshake);
	CHECK(a->relay == b->relay && strcmp(a->relay_text, b->relay_text) == 0);
	CHECK(a->has_text == b->has_text && strcmp(a->text, b->text) == 0);
	CHECK(a->sent_len == b->sent_len && memcmp(a->sent, b->sent, a->sent_len) == 0);
	CHECK(a->up_len == b->up_len && memcmp(a->up, b->up, a->up_len) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 3)
		return 0;
	uint8_t sel = data[0];
	const uint8_t *srv = data + 3;
	size_t len = size - 3;
	if (len > 16 * 1024)
		len = 16 * 1024;
	size_t cut = ((size_t)data[1] << 8 | data[2]) % (len + 1);
	static outcome whole, other;
	/* The buffer below: roomy, or a few bytes at a time. */
	size_t window = (sel / 18) % 2 ? 1 + (sel / 36) % 7 : SENT_MAX;
	drive(sel, srv, len, 0, 0, SENT_MAX, &whole);
	drive(sel, srv, len, 0, cut, window, &other);
	same(&whole, &other);
	/* Byte by byte is slow on long inputs; the first 2 KiB say enough. */
	if (len <= 2048) {
		drive(sel, srv, len, 1, 0, window, &other);
		same(&whole, &other);
	}
	return 0;
}
