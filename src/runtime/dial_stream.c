/* dial_stream.c - a TCP dial followed by a layer stack's handshake. */
#include "runtime/dial_stream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const msgs[] = {
	"%s: server closed during the handshake",
	"%s: handshake timed out",
	"%s",
	"handshake: %s",
};

typedef struct write_req {
	uv_write_t req;
	struct dstream *ds;
	uint8_t data[];
} write_req;

typedef struct dstream {
	connect_pending base; /* first: the handle callers hold */
	worker *w;
	stack *st;
	connect_cb cb;
	void *data;
	connect_pending *tcp_dial; /* the TCP dial in flight */
	uv_tcp_t *tcp;             /* connected, during the handshake */
	uv_timer_t timer;
	uint8_t rbuf[DIAL_HANDSHAKE_READ];
	size_t rlen;
	unsigned writes; /* handshake writes in flight */
	int handles;     /* open handles: the timer, the socket */
	bool finished;
} dstream;

static void on_closed(uv_handle_t *h)
{
	dstream *ds = h->data;
	if (h != (uv_handle_t *)&ds->timer)
		free(h);
	if (--ds->handles == 0) {
		stack_free(ds->st);
		free(ds);
	}
}

/* Ends the dial: the callback (unless cancelled) and the cleanup. */
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
		/* the socket and the stack go to the caller */
		uv_read_stop((uv_stream_t *)ds->tcp);
		ds->tcp->data = NULL;
		uv_tcp_t *tcp = ds->tcp;
		stack *st = ds->st;
		ds->tcp = NULL;
		ds->st = NULL;
		ds->handles--;
		connect_result ok = {.ok = true, .up = tcp, .st = st};
		ds->cb(&ok, ds->data);
	} else if (r) {
		ds->cb(r, ds->data);
	}
	if (ds->tcp) {
		uv_close((uv_handle_t *)ds->tcp, on_closed);
		ds->tcp = NULL;
	}
	uv_close((uv_handle_t *)&ds->timer, on_closed);
}

static void fail(dstream *ds, proto_dial_error kind, const char *fmt, const char *arg)
{
	char msg[256];
	snprintf(msg, sizeof msg, fmt, arg ? arg : "?");
	connect_result r = {.err = kind, .msg = msg};
	finish(ds, &r);
}

static void cancel(connect_pending *p)
{
	dstream *ds = (dstream *)p;
	finish(ds, NULL);
}

static void check_ready(dstream *ds);

static void on_written(uv_write_t *req, int status)
{
	write_req *w = (write_req *)req;
	dstream *ds = w->ds;
	free(w);
	if (ds->finished)
		return;
	ds->writes--;
	if (status < 0) {
		fail(ds, PROTO_DIAL_GENERAL, msgs[3], uv_strerror(status));
		return;
	}
	check_ready(ds);
}

/* Writes what the stack has for the wire (a handshake is a few KiB: each
 * write carries its own copy). */
static int flush(dstream *ds)
{
	const uint8_t *d;
	size_t n;
	while ((n = stack_wire_out(ds->st, &d)) > 0) {
		write_req *w = malloc(sizeof *w + n);
		if (!w)
			return -1;
		memcpy(w->data, d, n);
		w->ds = ds;
		uv_buf_t b = uv_buf_init((char *)w->data, (unsigned)n);
		if (uv_write(&w->req, (uv_stream_t *)ds->tcp, &b, 1, on_written)) {
			free(w);
			return -1;
		}
		ds->writes++;
		if (stack_wire_done(ds->st, n) < 0)
			return -2;
	}
	return 0;
}

static void check_ready(dstream *ds)
{
	const uint8_t *d;
	if (!ds->finished && stack_ready(ds->st) && ds->writes == 0 &&
	    stack_wire_out(ds->st, &d) == 0 && ds->rlen == 0)
		finish(ds, &(connect_result){.ok = true});
}

static void pump(dstream *ds)
{
	while (ds->rlen) {
		ssize_t k = stack_from_wire(ds->st, ds->rbuf, ds->rlen);
		if (k < 0) {
			fail(ds, PROTO_DIAL_GENERAL, msgs[2], stack_error(ds->st));
			return;
		}
		memmove(ds->rbuf, ds->rbuf + k, ds->rlen - (size_t)k);
		ds->rlen -= (size_t)k;
		if (k == 0)
			break;
	}
	int rc = flush(ds);
	if (rc) {
		fail(ds, PROTO_DIAL_GENERAL, msgs[2],
		     rc == -2 ? stack_error(ds->st) : uv_strerror(UV_ENOMEM));
		return;
	}
	check_ready(ds);
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	(void)suggested;
	dstream *ds = h->data;
	buf->base = (char *)ds->rbuf + ds->rlen;
	buf->len = sizeof ds->rbuf - ds->rlen;
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	(void)buf;
	dstream *ds = s->data;
	if (n == 0 || ds->finished)
		return;
	if (n < 0) {
		const char *who = stack_waiting_layer(ds->st);
		fail(ds, PROTO_DIAL_GENERAL, n == UV_EOF ? msgs[0] : msgs[2],
		     n == UV_EOF ? (who ? who : "peer") : uv_strerror((int)n));
		return;
	}
	ds->rlen += (size_t)n;
	pump(ds);
	if (!ds->finished && ds->rlen == sizeof ds->rbuf)
		fail(ds, PROTO_DIAL_GENERAL, msgs[2], "handshake: the peer sent more than expected");
}

static void on_timeout(uv_timer_t *t)
{
	dstream *ds = t->data;
	const char *who = stack_waiting_layer(ds->st);
	fail(ds, PROTO_DIAL_TIMED_OUT, msgs[1], who ? who : "peer");
}

static void on_tcp(const connect_result *r, void *data)
{
	dstream *ds = data;
	ds->tcp_dial = NULL;
	if (!r->ok) {
		finish(ds, r);
		return;
	}
	ds->tcp = r->up;
	ds->tcp->data = ds;
	ds->handles++;
	uv_tcp_nodelay(ds->tcp, 1);
	uv_timer_start(&ds->timer, on_timeout, DIAL_HANDSHAKE_MS, 0);
	if (stack_start(ds->st) < 0) {
		fail(ds, PROTO_DIAL_GENERAL, msgs[2], stack_error(ds->st));
		return;
	}
	uv_read_start((uv_stream_t *)ds->tcp, alloc_cb, on_read);
	pump(ds);
}

connect_pending *dial_stream(worker *w, dns_resolver *dns, const addr_dest *server,
                             dial_family af, stack *st, connect_cb cb, void *data)
{
	dstream *ds = calloc(1, sizeof *ds);
	if (!ds) {
		stack_free(st);
		return NULL;
	}
	ds->base.cancel = cancel;
	ds->w = w;
	ds->st = st;
	ds->cb = cb;
	ds->data = data;
	uv_timer_init(worker_loop(w), &ds->timer);
	ds->timer.data = ds;
	ds->handles = 1;
	ds->tcp_dial = dial_tcp(w, dns, server, af, false, on_tcp, ds);
	if (!ds->tcp_dial) {
		ds->finished = true;
		uv_close((uv_handle_t *)&ds->timer, on_closed);
		return NULL;
	}
	return &ds->base;
}
