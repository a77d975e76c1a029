/* dial_stream.c - a TCP dial, then an endpoint that carries the layer stack's handshake until it is ready. */
#include "runtime/dial_stream.h"

#include <stdio.h>
#include <stdlib.h>

enum { M_CLOSED, M_TIMED_OUT, M_FAILED };

static const char *const msgs[] = {
	[M_CLOSED] = "%s: server closed during the handshake",
	[M_TIMED_OUT] = "%s: handshake timed out",
	[M_FAILED] = "%s",
};

typedef struct dstream {
	connect_pending base; /* first: the handle callers hold */
	stack *st;            /* until it is put on the endpoint */
	connect_cb cb;
	void *data;
	connect_pending *tcp_dial; /* the TCP dial in flight */
	endpoint *ep;              /* connected, during the handshake */
	uv_timer_t timer;
	bool finished;
} dstream;

static void free_dstream(uv_handle_t *h) { free(h->data); }

/* Ends the dial: the callback (unless cancelled), then the cleanup. On
 * success the endpoint goes to the caller, its events pointed nowhere. */
static void finish(dstream *ds, const connect_result *r)
{
	if (ds->finished)
		return;
	ds->finished = true;
	uv_timer_stop(&ds->timer);
	if (ds->tcp_dial) {
		ds->tcp_dial->cancel(ds->tcp_dial);
		ds->tcp_dial = NULL;
	}
	if (r && r->ok) {
		endpoint *ep = ds->ep;
		ds->ep = NULL;
		endpoint_want_read(ep, false);
		endpoint_set_events(ep, NULL, NULL);
		ds->cb(&(connect_result){.ok = true, .ep = ep}, ds->data);
	} else if (r) {
		ds->cb(r, ds->data);
	}
	if (ds->ep)
		endpoint_close(ds->ep, false);
	stack_free(ds->st);
	uv_close((uv_handle_t *)&ds->timer, free_dstream);
}

static void fail(dstream *ds, proto_dial_error kind, int msg, const char *arg)
{
	char text[256];
	snprintf(text, sizeof text, msgs[msg], arg ? arg : "?");
	finish(ds, &(connect_result){.err = kind, .msg = text});
}

/* The layer the handshake waits on names a failure that has no text. */
static const char *waiting(dstream *ds)
{
	const char *who = stack_waiting_layer(endpoint_stack(ds->ep));
	return who ? who : "peer";
}

static void check(dstream *ds)
{
	if (endpoint_ready(ds->ep))
		finish(ds, &(connect_result){.ok = true});
	else if (endpoint_at_eof(ds->ep))
		fail(ds, PROTO_DIAL_GENERAL, M_CLOSED, waiting(ds));
}

static void on_progress(void *ud) { check(ud); }

static void on_error(void *ud, const char *why) { fail(ud, PROTO_DIAL_GENERAL, M_FAILED, why); }

/* App bytes the peer sends right after its handshake stay in the stack's
 * queues (the reads stop when they are full) for the caller to take. */
static const endpoint_events handshake_events = {
	.on_readable = on_progress,
	.on_writable = on_progress,
	.on_error = on_error,
};

static void cancel(connect_pending *p) { finish((dstream *)p, NULL); }

static void on_timeout(uv_timer_t *t)
{
	dstream *ds = t->data;
	fail(ds, PROTO_DIAL_TIMED_OUT, M_TIMED_OUT, waiting(ds));
}

static void on_tcp(const connect_result *r, void *data)
{
	dstream *ds = data;
	ds->tcp_dial = NULL;
	if (!r->ok) {
		finish(ds, r);
		return;
	}
	ds->ep = r->ep;
	endpoint_set_events(ds->ep, &handshake_events, ds);
	uv_timer_start(&ds->timer, on_timeout, DIAL_HANDSHAKE_MS, 0);
	stack *st = ds->st;
	ds->st = NULL;
	if (endpoint_start(ds->ep, st) < 0) {
		fail(ds, PROTO_DIAL_GENERAL, M_FAILED, endpoint_error(ds->ep));
		return;
	}
	endpoint_want_read(ds->ep, true);
	check(ds);
}

connect_pending *dial_stream(worker *w, dns_resolver *dns, const addr_dest *server,
                             dial_family af, uint64_t origin, stack *st, connect_cb cb,
                             void *data)
{
	dstream *ds = calloc(1, sizeof *ds);
	if (!ds) {
		stack_free(st);
		return NULL;
	}
	ds->base.cancel = cancel;
	ds->st = st;
	ds->cb = cb;
	ds->data = data;
	uv_timer_init(worker_loop(w), &ds->timer);
	ds->timer.data = ds;
	ds->tcp_dial = dial_tcp(w, dns, server, af, false, origin, on_tcp, ds);
	if (!ds->tcp_dial) {
		finish(ds, NULL);
		return NULL;
	}
	return &ds->base;
}
