/* fuzz_mux.c - libFuzzer target: the Mux.Cool decoder (whole, cut in two, re-encoded) and the server and client sub-flow tables fed a frame stream. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/mux.h"

/* Input: flags, two bytes of cut point, then the peer's bytes.
 *   flags bit 0: the server table starts with MUX_SERVER_SUBS_MAX - 1 ids
 *                (1..127) open, so a New or two reach the cap;
 *   bit 1: the client table starts with ids 1..8 open. */

#define CHECK(x)                                                                                   \
	do {                                                                                       \
		if (!(x))                                                                          \
			abort();                                                                   \
	} while (0)

/* The stream is cut to this many bytes: a few frames of any size. */
#define IN_MAX (4 * MUX_FRAME_MAX)

/* What one feed gave, to compare two ways of feeding the same bytes. */
typedef struct step {
	ssize_t ret;
	mux_event_kind kind;
	uint16_t id;
	size_t data_len;
	size_t out_len;
	const char *reason;
} step;

#define STEPS_MAX 256

typedef struct trace {
	step s[STEPS_MAX];
	size_t n;
	bool failed; /* ended on an error */
} trace;

static void same_event(const mux_event *a, const mux_event *b)
{
	char ta[ADDR_TEXT_MAX], tb[ADDR_TEXT_MAX];
	CHECK(a->kind == b->kind && a->id == b->id && a->error == b->error);
	CHECK(a->has_data == b->has_data && a->data_len == b->data_len);
	CHECK(a->data_len == 0 || memcmp(a->data, b->data, a->data_len) == 0);
	CHECK(a->dest.kind == b->dest.kind);
	if (a->dest.kind != ADDR_NONE) {
		CHECK(a->dest.network == b->dest.network);
		addr_dest_format(&a->dest, ta, sizeof ta);
		addr_dest_format(&b->dest, tb, sizeof tb);
		CHECK(strcmp(ta, tb) == 0);
	}
}

/* A decoded frame encodes to a frame that decodes the same (where our
 * encoders write that kind of frame at all). */
static void re_encode(const mux_event *ev)
{
	static uint8_t out[MUX_FRAME_MAX];
	ssize_t n = -1;
	size_t used;
	switch (ev->kind) {
	case MUX_EV_OPEN:
		n = mux_encode_new(ev->id, &ev->dest, ev->has_data ? ev->data : NULL, ev->data_len, out,
		                   sizeof out);
		CHECK(n > 0 || (ev->dest.network == ADDR_UDP && ev->data_len > MUX_UDP_PAYLOAD_MAX));
		break;
	case MUX_EV_DATA:
		if (ev->dest.kind != ADDR_NONE) {
			n = mux_encode_datagram(ev->id, &ev->dest, ev->data, ev->data_len, out, sizeof out);
			CHECK(n > 0 || ev->data_len > MUX_UDP_PAYLOAD_MAX);
		} else if (ev->data_len > 0) {
			n = (ssize_t)mux_encode_stream(ev->id, ev->data, ev->data_len, out, sizeof out,
			                               &used);
			CHECK(used == ev->data_len);
		}
		break;
	case MUX_EV_END:
		n = mux_encode_end(ev->id, ev->error, out, sizeof out);
		break;
	default:
		break;
	}
	if (n <= 0)
		return;
	mux_event again;
	CHECK(mux_decode(out, (size_t)n, &again) == n);
	same_event(ev, &again);
}

static void decode(const uint8_t *in, size_t len, size_t cut)
{
	mux_event ev, part;
	ssize_t n = mux_decode(in, len, &ev);
	CHECK(n == MUX_NEED_MORE || n == PROTO_ERR_MALFORMED || n == PROTO_ERR_TOO_BIG || n > 0);
	CHECK((n < 0) == (ev.reason != NULL));
	if (n > 0) {
		CHECK((size_t)n <= len && (size_t)n <= MUX_FRAME_MAX);
		CHECK(!ev.has_data || (ev.data >= in && ev.data + ev.data_len <= in + n));
		CHECK(ev.data_len <= MUX_DATA_MAX);
		re_encode(&ev);
	}
	if (n == 0)
		CHECK(ev.kind == MUX_EV_NONE);

	/* A prefix waits or decides the same way. */
	ssize_t m = mux_decode(in, cut, &part);
	if (n > 0 && cut < (size_t)n)
		CHECK(m == MUX_NEED_MORE);
	else if (n > 0) {
		CHECK(m == n);
		same_event(&ev, &part);
	} else
		CHECK(m == MUX_NEED_MORE || (m == n && part.reason == ev.reason));
}

/* ---- sessions ---- */

static void record(trace *t, ssize_t n, const mux_event *ev, const proto_out *out)
{
	CHECK(t->n < STEPS_MAX);
	t->s[t->n++] = (step){.ret = n, .kind = ev->kind, .id = ev->id, .data_len = ev->data_len,
	                      .out_len = out->len, .reason = ev->reason};
}

static void server_start(mux_server *s, uint8_t flags)
{
	mux_server_init(s);
	if (!(flags & 1))
		return;
	uint8_t f[MUX_HEADER_MAX];
	addr_dest d;
	CHECK(addr_dest_parse(&d, "192.0.2.1:80") == 0);
	for (uint16_t id = 1; id < MUX_SERVER_SUBS_MAX; id++) {
		mux_event ev;
		proto_out out;
		ssize_t n = mux_encode_new(id, &d, NULL, 0, f, sizeof f);
		CHECK(n > 0 && mux_server_feed(s, f, (size_t)n, &ev, &out) == n);
		CHECK(ev.kind == MUX_EV_OPEN);
	}
}

/* Feeds in[0, len) frame by frame as a shell does; returns the bytes
 * consumed. Stops at the first error, or when the trace is full. */
static size_t server_drain(mux_server *s, const uint8_t *in, size_t len, trace *t)
{
	size_t off = 0;
	while (!t->failed && t->n < STEPS_MAX) {
		mux_event ev;
		proto_out out;
		size_t before = mux_server_count(s);
		bool was_open = false;
		ssize_t n = mux_server_feed(s, in + off, len - off, &ev, &out);
		if (n == 0) {
			CHECK(ev.kind == MUX_EV_NONE && out.len == 0);
			break;
		}
		record(t, n, &ev, &out);
		if (n < 0) {
			CHECK(ev.reason != NULL && out.len == 0 && mux_server_count(s) == before);
			t->failed = true;
			break;
		}
		CHECK((size_t)n <= len - off);
		CHECK(out.len == 0 || out.len == MUX_SHORT_FRAME_LEN);
		CHECK(mux_server_count(s) <= MUX_SERVER_SUBS_MAX);
		switch (ev.kind) {
		case MUX_EV_OPEN:
			CHECK(mux_server_is_open(s, ev.id, NULL) && mux_server_count(s) == before + 1);
			CHECK(ev.dest.kind != ADDR_NONE);
			break;
		case MUX_EV_REFUSED:
			CHECK(out.len == MUX_SHORT_FRAME_LEN && before == MUX_SERVER_SUBS_MAX);
			CHECK(!mux_server_is_open(s, ev.id, NULL));
			break;
		case MUX_EV_DATA:
			CHECK(mux_server_is_open(s, ev.id, NULL) && out.len == 0);
			break;
		case MUX_EV_END:
			CHECK(!mux_server_is_open(s, ev.id, NULL) && mux_server_count(s) == before - 1);
			break;
		default:
			CHECK(mux_server_count(s) == before);
			was_open = mux_server_is_open(s, ev.id, NULL);
			CHECK(out.len == 0 || !was_open); /* End answers only unknown ids */
			break;
		}
		off += (size_t)n;
	}
	return off;
}

static void same_trace(const trace *a, const trace *b)
{
	CHECK(a->n == b->n && a->failed == b->failed);
	for (size_t i = 0; i < a->n; i++) {
		const step *x = &a->s[i], *y = &b->s[i];
		CHECK(x->ret == y->ret && x->kind == y->kind && x->id == y->id);
		CHECK(x->data_len == y->data_len && x->out_len == y->out_len && x->reason == y->reason);
	}
}

static void server(const uint8_t *in, size_t len, size_t cut, uint8_t flags)
{
	static mux_server s;
	static trace whole, split;
	memset(&whole, 0, sizeof whole);
	memset(&split, 0, sizeof split);

	server_start(&s, flags);
	server_drain(&s, in, len, &whole);
	/* The upstream side ends every id still open; a second end is refused. */
	while (mux_server_count(&s) > 0) {
		proto_out out;
		uint16_t id = s.subs[0].id;
		CHECK(mux_server_end(&s, id, false, &out) == 0 && out.len == MUX_SHORT_FRAME_LEN);
		CHECK(mux_server_end(&s, id, false, &out) == PROTO_ERR_STATE && out.len == 0);
	}

	server_start(&s, flags);
	size_t off = server_drain(&s, in, cut, &split);
	if (!split.failed)
		server_drain(&s, in + off, len - off, &split);
	same_trace(&whole, &split);
}

static void client(const uint8_t *in, size_t len, uint8_t flags)
{
	mux_client c;
	mux_client_init(&c, 0);
	if (flags & 2) {
		uint8_t f[MUX_HEADER_MAX];
		addr_dest d;
		uint16_t id = 0;
		CHECK(addr_dest_parse(&d, "[2001:db8::1]:443") == 0);
		while (!mux_client_full(&c))
			CHECK(mux_client_open(&c, &d, NULL, 0, f, sizeof f, &id) > 0);
		CHECK(id == MUX_CONCURRENCY_DEFAULT);
	}
	size_t off = 0;
	for (unsigned steps = 0; steps < STEPS_MAX; steps++) {
		mux_event ev;
		proto_out out;
		ssize_t n = mux_client_feed(&c, in + off, len - off, &ev, &out);
		if (n <= 0) {
			CHECK(n == 0 || ev.reason != NULL);
			break;
		}
		CHECK(ev.kind != MUX_EV_OPEN && ev.kind != MUX_EV_REFUSED);
		if (ev.kind == MUX_EV_DATA)
			CHECK(mux_client_is_open(&c, ev.id));
		if (ev.kind == MUX_EV_END)
			CHECK(!mux_client_is_open(&c, ev.id));
		CHECK(out.len == 0 || out.len == MUX_SHORT_FRAME_LEN);
		off += (size_t)n;
	}
	CHECK(mux_client_idle(&c) == (c.n_open == 0));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 3)
		return 0;
	uint8_t flags = data[0];
	const uint8_t *in = data + 3;
	size_t len = size - 3 < IN_MAX ? size - 3 : IN_MAX;
	size_t cut = ((size_t)data[1] << 8 | data[2]) % (len + 1);

	decode(in, len, cut);
	server(in, len, cut, flags);
	client(in, len, flags);
	return 0;
}
