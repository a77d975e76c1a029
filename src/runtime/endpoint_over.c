/* endpoint_over.c - a channel whose carrier is an endpoint: the outer endpoint's writes become inner's sends, inner's app bytes the outer's input. */
#include "runtime/endpoint_over.h"

#include <stdlib.h>

#include "base/list.h"
#include "runtime/chan.h"

typedef struct over_write {
	list_node link;
	const uint8_t *d; /* the outer endpoint's, in place until reported */
	size_t n, off;
	void *req;
} over_write;

typedef struct over {
	chan ch; /* first */
	endpoint *inner;
	list writes; /* over_write, in order */
	bool reading, shut_asked, shut_sent, shut_told, eof_told, failed;
	bool *gone;    /* set while a call that may close the channel runs */
	uv_idle_t idle; /* what cannot be reported inside a channel op */
} over;

/* Moves what can move both ways and tells the outer endpoint. Only from
 * libuv callbacks: the outer's owner may close it (and so o) inside any
 * report, which gone catches. */
static void pump(over *o)
{
	endpoint *outer = o->ch.ep;
	if (o->failed)
		return;
	bool gone = false;
	o->gone = &gone;
	while (o->writes.head) {
		over_write *w = LIST_ENTRY(o->writes.head, over_write, link);
		if (w->off < w->n) {
			ssize_t k = endpoint_send(o->inner, w->d + w->off, w->n - w->off);
			if (k < 0)
				goto failed;
			w->off += (size_t)k;
			if (w->off < w->n)
				break;
		}
		list_remove(&o->writes, &w->link);
		void *req = w->req;
		free(w);
		endpoint_chan_written(outer, req, 0);
		if (gone)
			return;
	}
	if (o->shut_asked && !o->shut_sent && !o->writes.head) {
		o->shut_sent = true;
		if (endpoint_shutdown(o->inner))
			goto failed;
	}
	if (o->shut_sent && !o->shut_told && endpoint_shut_done(o->inner)) {
		o->shut_told = true;
		endpoint_chan_shut(outer);
		if (gone)
			return;
	}
	while (o->reading) {
		const uint8_t *d;
		size_t n = endpoint_app_in(o->inner, &d);
		if (n == 0)
			break;
		size_t k = endpoint_chan_input(outer, d, n);
		if (gone)
			return;
		if (k == 0)
			break; /* offered again after the next read(on) */
		if (endpoint_app_done(o->inner, k))
			goto failed;
	}
	if (!o->eof_told && endpoint_at_eof(o->inner)) {
		const uint8_t *d;
		if (endpoint_app_in(o->inner, &d) == 0) {
			o->eof_told = true;
			endpoint_chan_eof(outer);
			if (gone)
				return;
		}
	}
	endpoint_want_read(o->inner, o->reading);
	o->gone = NULL;
	return;
failed:
	o->failed = true;
	endpoint_chan_fail(outer, endpoint_error(o->inner));
	if (!gone)
		o->gone = NULL;
}

static void on_idle(uv_idle_t *h)
{
	over *o = h->data;
	uv_idle_stop(h);
	pump(o);
}

static void kick(over *o) { uv_idle_start(&o->idle, on_idle); }

static void inner_event(void *ud) { pump(ud); }

static void inner_error(void *ud, const char *why)
{
	over *o = ud;
	if (o->failed)
		return;
	o->failed = true;
	endpoint_chan_fail(o->ch.ep, why);
}

static const endpoint_events inner_events = {
	.on_readable = inner_event,
	.on_writable = inner_event,
	.on_error = inner_error,
};

static int over_write_op(chan *c, const uint8_t *d, size_t n, void *req)
{
	over *o = (over *)c;
	if (o->failed || o->shut_asked)
		return -1;
	over_write *w = malloc(sizeof *w);
	if (!w)
		return -1;
	*w = (over_write){.d = d, .n = n, .req = req};
	list_push_back(&o->writes, &w->link);
	kick(o);
	return 0;
}

static void over_read(chan *c, bool on)
{
	over *o = (over *)c;
	o->reading = on;
	if (on)
		kick(o); /* bytes inner holds already */
	else
		endpoint_want_read(o->inner, false);
}

static int over_shutdown(chan *c)
{
	over *o = (over *)c;
	o->shut_asked = true;
	kick(o);
	return 0;
}

static void on_idle_closed(uv_handle_t *h) { free(h->data); }

static void over_close(chan *c)
{
	over *o = (over *)c;
	if (o->gone)
		*o->gone = true;
	while (o->writes.head) {
		over_write *w = LIST_ENTRY(o->writes.head, over_write, link);
		list_remove(&o->writes, &w->link);
		free(w);
	}
	endpoint_close(o->inner, false);
	uv_close((uv_handle_t *)&o->idle, on_idle_closed);
}

static size_t over_queued(const chan *c)
{
	const over *o = (const over *)c;
	size_t n = endpoint_queued(o->inner);
	for (const list_node *i = o->writes.head; i; i = i->next) {
		const over_write *w = LIST_ENTRY(i, over_write, link);
		n += w->n - w->off;
	}
	return n;
}

static int over_peername(const chan *c, struct sockaddr_storage *ss)
{
	return endpoint_peername(((const over *)c)->inner, ss);
}

static int over_sockname(const chan *c, struct sockaddr_storage *ss)
{
	return endpoint_sockname(((const over *)c)->inner, ss);
}

static const chan_ops over_ops = {
	.write = over_write_op,
	.read = over_read,
	.shutdown = over_shutdown,
	.close = over_close,
	.queued = over_queued,
	.peername = over_peername,
	.sockname = over_sockname,
};

endpoint *endpoint_over(worker *w, endpoint *inner)
{
	over *o = calloc(1, sizeof *o);
	if (!o) {
		endpoint_close(inner, false);
		return NULL;
	}
	o->ch.ops = &over_ops;
	o->inner = inner;
	uv_idle_init(worker_loop(w), &o->idle);
	o->idle.data = o;
	endpoint_set_events(inner, &inner_events, o);
	return endpoint_new_chan(w, &o->ch, NULL, NULL, NULL); /* closes o without memory */
}
