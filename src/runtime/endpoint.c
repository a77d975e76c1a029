/* endpoint.c - a socket and its layers: one read buffer, ENDPOINT_MAX_PENDING pool-buffer writes, the orderly end, events to the owner. */
#include "runtime/endpoint.h"

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

enum { M_NOMEM, M_STATE };

static const char *const msgs[] = {
	[M_NOMEM] = "out of memory",
	[M_STATE] = "layers put on an endpoint already in use",
};

/* A write of its own, beyond the slots (endpoint_send_all). */
typedef struct big_write {
	uv_write_t req;
	struct big_write *next, **prev; /* on a channel: in the endpoint's list */
	uint8_t data[];
} big_write;

/* Pool buffers one write of the layers' output may gather: a TLS record
 * (16 KiB of payload, 16,406 bytes on the wire) spans two, and a burst of
 * records goes out in one writev instead of a write per buffer. */
#define WSLOT_BUFS 4

typedef struct wslot {
	uv_write_t req;
	uint8_t *buf;                  /* a pool buffer; NULL when the slot is free */
	uint8_t *more[WSLOT_BUFS - 1]; /* the rest of a gathered write, NULL-ended */
} wslot;

struct endpoint {
	worker *w;
	uv_tcp_t *tcp;   /* owned; its data points back here; NULL on a channel */
	chan *ch;        /* the carrier's channel in place of a socket (chan.h) */
	uv_timer_t timer; /* bounds a flushing close */
	stack *st;       /* owned; NULL: plain */
	const endpoint_events *ev;
	void *ud;

	wslot slots[ENDPOINT_MAX_PENDING];
	unsigned pending; /* pool buffers the writes in flight hold, at most ENDPOINT_MAX_PENDING */
	unsigned extra;   /* endpoint_send_all writes in flight */
	big_write *bigs;  /* on a channel: those writes (a closing channel forgets them) */

	/* A stacked endpoint's app bytes that endpoint_send_all took and the
	 * layers had no room for yet: hold[hold_off, hold_off + hold_len),
	 * owned (malloc'd, hold_cap bytes; NULL when empty). They enter the
	 * layers, in order and before any later send, as writes make room
	 * (flush), as a plain endpoint's own write takes what the socket
	 * does not. The owner bounds them with endpoint_queued. */
	uint8_t *hold;
	size_t hold_off, hold_len, hold_cap;
	bool stack_shut; /* stack_shutdown ran (it waits for the held bytes) */

	/* The last read's pool buffer while bytes of it remain: app bytes on a
	 * plain endpoint, wire bytes the layers have not taken on a stacked one. */
	uint8_t *rbuf;
	size_t roff, rlen;

	bool want;      /* the owner wants app bytes */
	bool reading;   /* uv_read_start is in effect */
	bool held;      /* bytes, the end or a failure came while the owner paused: told at the resume */
	bool eof;       /* the peer's FIN was read */
	bool failed;
	bool closing;   /* endpoint_close ran: no more events */
	bool flushing;  /* ... with flush, and the handles are not closed yet */
	bool shut_wanted, shut_issued, shut_done;
	int handles;    /* open libuv handles still to close before the free */
	uv_shutdown_t shut;
	const char *why; /* the failure's text: static, or the stack's */
	uint64_t origin; /* endpoint_origin */
	/* App bytes handed to send ([0]) and taken ([1]): into own, or into
	 * the flow's record once it has one (endpoint_set_track). */
	uint64_t *count;
	uint64_t own[2];
	track_flow *tf; /* owned: the flow's record, ended at the close */
	const char *end_why;       /* endpoint_set_end_why */
};

static pool *bufs(endpoint *e) { return worker_pool(e->w); }

static void on_closed(uv_handle_t *h)
{
	endpoint *e = h->data;
	if (h == (uv_handle_t *)e->tcp)
		free(e->tcp);
	if (--e->handles > 0)
		return;
	pool_put(bufs(e), e->rbuf);
	stack_free(e->st);
	free(e->hold);
	free(e);
}

static void slot_release(endpoint *e, wslot *slot);

static void close_now(endpoint *e)
{
	if (e->ch) {
		if (e->handles == 2) {
			e->ch->ops->close(e->ch); /* reports nothing after this */
			/* the writes it had are forgotten: their buffers come back */
			for (unsigned i = 0; i < ENDPOINT_MAX_PENDING; i++)
				if (e->slots[i].buf)
					slot_release(e, &e->slots[i]);
			e->pending = 0;
			while (e->bigs) {
				big_write *b = e->bigs;
				e->bigs = b->next;
				free(b);
			}
			e->extra = 0;
			e->handles = 1;
			uv_close((uv_handle_t *)&e->timer, on_closed);
		}
		return;
	}
	if (e->handles == 2 && !uv_is_closing((uv_handle_t *)e->tcp)) {
		uv_close((uv_handle_t *)e->tcp, on_closed);
		uv_close((uv_handle_t *)&e->timer, on_closed);
	}
}

static void on_flush_timeout(uv_timer_t *t) { close_now(t->data); }

static void on_written(uv_write_t *req, int status);

/* Gives a slot's buffers back to the pool: the slot is free again. */
static void slot_release(endpoint *e, wslot *slot)
{
	pool_put(bufs(e), slot->buf);
	slot->buf = NULL;
	for (unsigned i = 0; i < WSLOT_BUFS - 1 && slot->more[i]; i++) {
		pool_put(bufs(e), slot->more[i]);
		slot->more[i] = NULL;
	}
}

static wslot *free_slot(endpoint *e)
{
	for (unsigned i = 0; i < ENDPOINT_MAX_PENDING; i++)
		if (!e->slots[i].buf)
			return &e->slots[i];
	return NULL;
}

/* Writes buf[off, off + len) from slot; the slot owns buf from here. */
static int slot_write(endpoint *e, wslot *slot, uint8_t *buf, size_t off, size_t len)
{
	slot->buf = buf;
	slot->req.data = e;
	if (e->ch) {
		if (e->ch->ops->write(e->ch, buf + off, len, &slot->req)) {
			slot->buf = NULL;
			pool_put(bufs(e), buf);
			return -1;
		}
		e->pending++;
		return 0;
	}
	uv_buf_t b = uv_buf_init((char *)buf + off, (unsigned)len);
	if (uv_write(&slot->req, (uv_stream_t *)e->tcp, &b, 1, on_written)) {
		slot->buf = NULL;
		pool_put(bufs(e), buf);
		return -1;
	}
	e->pending++;
	return 0;
}

static void read_stop(endpoint *e)
{
	if (e->ch)
		e->ch->ops->read(e->ch, false);
	else
		uv_read_stop((uv_stream_t *)e->tcp);
	e->reading = false;
}

static int fail(endpoint *e, const char *why)
{
	if (!e->failed) {
		e->failed = true;
		e->why = why;
	}
	if (e->reading)
		read_stop(e);
	return -1;
}

static int fail_stack(endpoint *e) { return fail(e, stack_error(e->st)); }

static void on_deadline(uv_timer_t *t);

/* The timer follows the layers' next deadline (layer.h: a layer is told
 * the time, it reads no clock). A closing endpoint's timer bounds its
 * flush instead. */
static void arm(endpoint *e)
{
	if (!e->st || e->closing)
		return;
	uint64_t d = stack_deadline(e->st);
	if (!d) {
		uv_timer_stop(&e->timer);
		return;
	}
	uint64_t now = uv_now(worker_loop(e->w));
	uv_timer_start(&e->timer, on_deadline, d > now ? d - now : 0, 0);
}

/* The layers' wire output into write slots, as far as slots go; then the
 * FIN when it is wanted and everything before it is queued. */
/* Takes up to a pool buffer of the layers' output into a new buffer: its
 * length, 0 when there is none, -1 without memory. *rc is the stack's
 * word on the bytes taken: they are taken even when the layers fail on
 * (they then hold their answer to the peer: a TLS alert, a 101 before a
 * bad frame), so they are written in every case. */
static ssize_t take_out(endpoint *e, uint8_t **out, int *rc)
{
	const uint8_t *d;
	size_t n = stack_wire_out(e->st, &d);
	if (n == 0)
		return 0;
	uint8_t *b = pool_get(bufs(e));
	if (!b)
		return -1;
	size_t m = n < POOL_BUF_SIZE ? n : POOL_BUF_SIZE;
	memcpy(b, d, m);
	*rc = stack_wire_done(e->st, m);
	*out = b;
	return (ssize_t)m;
}

static int flush_wire(endpoint *e)
{
	const uint8_t *d;
	while (e->st && stack_wire_out(e->st, &d) > 0) {
		/* As many buffers in flight as before the writes were gathered:
		 * one writev takes what four writes took, not four times as much. */
		wslot *slot = e->pending < ENDPOINT_MAX_PENDING ? free_slot(e) : NULL;
		if (!slot)
			return 0; /* a write completion comes back here */
		uint8_t *b;
		int rc = 0;
		ssize_t m = take_out(e, &b, &rc);
		if (m < 0)
			return fail(e, msgs[M_NOMEM]);
		if (e->ch || rc < 0) {
			if (slot_write(e, slot, b, 0, (size_t)m))
				return fail(e, uv_strerror(UV_EPIPE));
			if (rc < 0 && !e->failed)
				return fail_stack(e);
			continue;
		}
		/* a socket: what else waits joins this write, one writev */
		uv_buf_t v[WSLOT_BUFS];
		unsigned nv = 0;
		slot->buf = b;
		v[nv++] = uv_buf_init((char *)b, (unsigned)m);
		while (nv < WSLOT_BUFS && e->pending + nv < ENDPOINT_MAX_PENDING && rc == 0 &&
		       (m = take_out(e, &b, &rc)) > 0) {
			slot->more[nv - 1] = b;
			v[nv++] = uv_buf_init((char *)b, (unsigned)m);
		}
		if (nv < WSLOT_BUFS)
			slot->more[nv - 1] = NULL;
		if (m < 0) {
			slot_release(e, slot);
			return fail(e, msgs[M_NOMEM]);
		}
		slot->req.data = e;
		if (uv_write(&slot->req, (uv_stream_t *)e->tcp, v, nv, on_written)) {
			slot_release(e, slot);
			return fail(e, uv_strerror(UV_EPIPE));
		}
		e->pending += nv;
		if (rc < 0 && !e->failed)
			return fail_stack(e);
	}
	arm(e);
	return 0;
}

/* Hands the layers what of the held bytes they take now; the shutdown
 * that waited behind them runs once they are all in. */
static int feed_hold(endpoint *e)
{
	ssize_t k = stack_from_app(e->st, e->hold + e->hold_off, e->hold_len);
	if (k < 0)
		return fail_stack(e);
	e->hold_off += (size_t)k;
	e->hold_len -= (size_t)k;
	if (e->hold_len == 0) {
		free(e->hold);
		e->hold = NULL;
		e->hold_off = e->hold_cap = 0;
		if (e->shut_wanted && !e->stack_shut) {
			e->stack_shut = true;
			if (stack_shutdown(e->st) < 0)
				return fail_stack(e);
		}
	}
	return 0;
}

/* The layers' wire output into write slots, and the held app bytes into
 * the layers as that makes room, until neither moves (the next write
 * completion comes back here). */
static int flush(endpoint *e)
{
	for (;;) {
		if (flush_wire(e))
			return -1;
		if (!e->hold || e->failed)
			return 0;
		size_t before = e->hold_len;
		if (feed_hold(e))
			return -1;
		if (e->hold && e->hold_len == before)
			return 0;
	}
}

/* Appends d[0, n) to the held bytes. */
static int hold_add(endpoint *e, const uint8_t *d, size_t n)
{
	if (e->hold_off && e->hold_off + e->hold_len + n > e->hold_cap) {
		memmove(e->hold, e->hold + e->hold_off, e->hold_len);
		e->hold_off = 0;
	}
	if (e->hold_len + n > e->hold_cap) {
		size_t cap = e->hold_cap ? e->hold_cap : POOL_BUF_SIZE;
		while (cap < e->hold_len + n)
			cap *= 2;
		uint8_t *b = realloc(e->hold, cap);
		if (!b)
			return -1;
		e->hold = b;
		e->hold_cap = cap;
	}
	memcpy(e->hold + e->hold_off + e->hold_len, d, n);
	e->hold_len += n;
	return 0;
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
	(void)status; /* a peer that went away has nothing left to tell */
	endpoint *e = req->data;
	e->shut_done = true;
	if (!e->closing)
		e->ev->on_writable(e->ud);
}

static void maybe_fin(endpoint *e)
{
	const uint8_t *d;
	if (!e->shut_wanted || e->shut_issued || e->failed || e->hold ||
	    (e->st && (stack_wire_out(e->st, &d) > 0 || stack_shut_pending(e->st))))
		return; /* the FIN follows the layers' ends */
	e->shut_issued = true;
	e->shut.data = e;
	if (e->ch) { /* the carrier ends the direction after the writes queued */
		if (e->ch->ops->shutdown(e->ch))
			e->shut_done = true;
		return;
	}
	/* Nothing left in libuv's queue (the usual case: the relay's writes
	 * go out at once): the FIN goes now, without libuv's shutdown, whose
	 * POLLOUT watch costs an epoll_ctl and a callback on the next turn. */
	uv_os_fd_t fd;
	if (e->tcp->write_queue_size == 0 && !e->tcp->connect_req &&
	    uv_fileno((uv_handle_t *)e->tcp, &fd) == 0) {
		(void)shutdown(fd, SHUT_WR); /* a peer that went away has nothing left to tell */
		e->shut_done = true;
		return;
	}
	/* libuv runs the shutdown after the writes already queued */
	if (uv_shutdown(&e->shut, (uv_stream_t *)e->tcp, on_shutdown))
		e->shut_done = true;
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);

static void alloc_buf(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	(void)suggested;
	endpoint *e = h->data;
	uint8_t *b = pool_get(bufs(e));
	buf->base = (char *)b;
	buf->len = b ? POOL_BUF_SIZE : 0; /* 0 makes libuv report UV_ENOBUFS */
}

/* A plain socket's reads stay registered while its owner pauses them
 * (a SOCKS request waiting for its upstream, a relay direction whose other
 * side is full) until something actually comes: libuv 1.44 takes the
 * descriptor's watch away on uv_read_stop and puts it back on
 * uv_read_start, two or three epoll_ctl calls for a pause that usually
 * sees nothing. What comes meanwhile is held (one read buffer at most, as
 * before) and the reads stop then. */
static bool paused_plain(const endpoint *e) { return !e->want && e->tcp && !e->st; }

static bool soft_pause(const endpoint *e)
{
	return paused_plain(e) && !e->eof && !e->failed && !e->closing && e->rlen == 0;
}

/* Reads run while the owner wants bytes and the last read's are all taken. */
static void update_reading(endpoint *e)
{
	bool want = e->want && !e->eof && !e->failed && !e->closing && e->rlen == 0;
	if (!want && e->reading && soft_pause(e))
		return;
	if (want && !e->reading) {
		if (e->ch) {
			e->reading = true;
			e->ch->ops->read(e->ch, true);
		} else if (uv_read_start((uv_stream_t *)e->tcp, alloc_buf, on_read) == 0) {
			e->reading = true;
		}
	} else if (!want && e->reading) {
		read_stop(e);
	}
}

/* Offers the layers the wire bytes they have not taken yet. */
static int feed(endpoint *e)
{
	if (e->rlen) {
		ssize_t k = stack_from_wire(e->st, e->rbuf + e->roff, e->rlen);
		if (k < 0)
			return fail_stack(e);
		e->roff += (size_t)k;
		e->rlen -= (size_t)k;
	}
	if (e->rlen == 0 && e->rbuf) {
		pool_put(bufs(e), e->rbuf);
		e->rbuf = NULL;
	}
	return flush(e);
}

static void report_error(endpoint *e)
{
	if (!e->closing)
		e->ev->on_error(e->ud, e->why);
}

/* What the layers have for the wire goes out, then the FIN if it is due.
 * False (the failure reported) when that failed. */
static bool push(endpoint *e)
{
	if (flush(e)) {
		report_error(e);
		return false;
	}
	maybe_fin(e);
	return true;
}

static void fail_report(endpoint *e, const char *why)
{
	fail(e, why);
	report_error(e);
}

static void on_deadline(uv_timer_t *t)
{
	endpoint *e = t->data;
	if (e->closing || e->failed)
		return;
	if (stack_on_time(e->st, uv_now(t->loop)) < 0)
		fail_report(e, stack_error(e->st));
	else
		(void)push(e);
}

static void at_eof(endpoint *e)
{
	e->eof = true;
	update_reading(e);
	if (paused_plain(e)) {
		e->held = true; /* a paused owner hears of it when it resumes */
		return;
	}
	if (!e->closing)
		e->ev->on_readable(e->ud);
}

static void got(endpoint *e, uint8_t *buf, size_t n);

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	endpoint *e = s->data;
	if (n <= 0) {
		pool_put(bufs(e), (uint8_t *)buf->base);
		if (n == 0)
			return;
		if (n == UV_EOF) {
			at_eof(e);
		} else if (paused_plain(e)) { /* a paused owner hears of it when it resumes */
			fail(e, uv_strerror((int)n));
			e->held = true;
		} else {
			fail_report(e, uv_strerror((int)n));
		}
		return;
	}
	got(e, (uint8_t *)buf->base, (size_t)n);
}

/* n bytes read into the pool buffer buf (the endpoint's now). */
static void got(endpoint *e, uint8_t *buf, size_t n)
{
	e->rbuf = buf;
	e->roff = 0;
	e->rlen = n;
	if (e->st && feed(e)) {
		report_error(e);
		return;
	}
	if (paused_plain(e)) { /* read during a soft pause: held until the resume */
		e->held = true;
		update_reading(e);
		return;
	}
	/* The owner takes the bytes first (a relay hands the buffer on at
	 * once); only bytes left over stop the reads. Stopping before it and
	 * starting again after cost two epoll_ctl calls a read. libuv reads
	 * again in this round only while the handle is still reading. */
	if (!e->closing)
		e->ev->on_readable(e->ud);
	if (!e->closing)
		update_reading(e);
}

/* A write finished (its request is freed already): what comes next. */
static void written(endpoint *e, int status)
{
	if (e->closing) {
		if (e->flushing && (status < 0 || flush(e) || endpoint_idle(e)))
			close_now(e);
		return;
	}
	if (status < 0)
		fail_report(e, uv_strerror(status));
	else if (push(e))
		e->ev->on_writable(e->ud);
}

static void slot_written(endpoint *e, wslot *slot, int status)
{
	unsigned n = 1;
	while (n < WSLOT_BUFS && slot->more[n - 1])
		n++;
	slot_release(e, slot);
	e->pending -= n;
	written(e, status);
}

static void on_written(uv_write_t *req, int status)
{
	slot_written(req->data, (wslot *)req, status);
}

static void free_handle(uv_handle_t *h) { free(h); }

static void on_big_written(uv_write_t *req, int status)
{
	endpoint *e = req->data;
	big_write *b = (big_write *)req;
	if (e->ch) {
		*b->prev = b->next;
		if (b->next)
			b->next->prev = b->prev;
	}
	free(b);
	e->extra--;
	written(e, status);
}

int endpoint_send_all(endpoint *e, const uint8_t *d, size_t n)
{
	if (e->failed || e->closing)
		return -1;
	if (e->st) {
		/* what the layers cannot take now waits in the hold (flush) */
		ssize_t k = e->hold ? 0 : stack_from_app(e->st, d, n);
		if (k < 0)
			return fail_stack(e);
		if ((size_t)k < n && hold_add(e, d + k, n - (size_t)k))
			return fail(e, msgs[M_NOMEM]);
		e->count[0] += n;
		return flush(e);
	}
	/* A handshake's answer (a SOCKS reply, a 200 to CONNECT) usually goes
	 * at once: no copy, no request, and no POLLOUT watch set and cleared,
	 * each an epoll_ctl in libuv. Nothing is queued then (libuv's try
	 * write refuses while its queue has writes), and no completion
	 * follows: the owner sees an endpoint that is idle already. A write
	 * queued here is all the owner waits on (endpoint_queued). */
	if (!e->ch && n) {
		uv_buf_t ub = uv_buf_init((char *)d, (unsigned)n);
		int k = uv_try_write((uv_stream_t *)e->tcp, &ub, 1);
		/* an error: the write below meets it and reports it as before */
		if (k > 0) {
			e->count[0] += (uint64_t)k;
			d += k;
			n -= (size_t)k;
			if (n == 0)
				return 0;
		}
	}
	big_write *b = malloc(sizeof *b + n);
	if (!b)
		return fail(e, msgs[M_NOMEM]);
	memcpy(b->data, d, n);
	b->req.data = e;
	uv_buf_t ub = uv_buf_init((char *)b->data, (unsigned)n);
	if (e->ch ? e->ch->ops->write(e->ch, b->data, n, &b->req)
	          : uv_write(&b->req, (uv_stream_t *)e->tcp, &ub, 1, on_big_written)) {
		free(b);
		return fail(e, uv_strerror(UV_EPIPE));
	}
	if (e->ch) {
		b->next = e->bigs;
		b->prev = &e->bigs;
		if (e->bigs)
			e->bigs->prev = &b->next;
		e->bigs = b;
	}
	e->extra++;
	e->count[0] += n;
	return 0;
}

size_t endpoint_queued(const endpoint *e)
{
	return (e->ch ? e->ch->ops->queued(e->ch) : e->tcp->write_queue_size) + e->hold_len;
}

size_t endpoint_held(const endpoint *e) { return e->hold_len; }

static void ignore(void *ud) { (void)ud; }
static void ignore_error(void *ud, const char *why)
{
	(void)ud;
	(void)why;
}

/* The events of an endpoint with no owner yet. */
static const endpoint_events nowhere = {
	.on_readable = ignore,
	.on_writable = ignore,
	.on_error = ignore_error,
};

endpoint *endpoint_new(worker *w, uv_tcp_t *tcp, stack *st, const endpoint_events *ev, void *ud)
{
	endpoint *e = calloc(1, sizeof *e);
	if (!e) {
		stack_free(st);
		uv_close((uv_handle_t *)tcp, free_handle);
		return NULL;
	}
	*e = (endpoint){.w = w, .tcp = tcp, .st = st, .ev = ev ? ev : &nowhere, .ud = ud,
	                .handles = 2};
	e->count = e->own;
	tcp->data = e;
	uv_timer_init(worker_loop(w), &e->timer);
	e->timer.data = e;
	arm(e);
	return e;
}

int endpoint_start(endpoint *e, stack *st)
{
	if (e->st || e->rbuf || e->pending || e->extra || e->failed) {
		stack_free(st);
		return fail(e, msgs[M_STATE]);
	}
	e->st = st;
	if (stack_start(st) < 0)
		return fail_stack(e);
	return flush(e);
}

bool endpoint_ready(const endpoint *e)
{
	return !e->failed && (!e->st || stack_ready(e->st)) && endpoint_idle(e);
}

void endpoint_set_events(endpoint *e, const endpoint_events *ev, void *ud)
{
	e->ev = ev ? ev : &nowhere;
	e->ud = ud;
}

/* What came during a soft pause, told on the loop's next turn: never
 * inside the owner's own call (endpoint_events). */
static void on_held(uv_timer_t *t)
{
	endpoint *e = t->data;
	if (e->closing || !e->held || !e->want)
		return;
	e->held = false;
	if (e->failed)
		report_error(e);
	else
		e->ev->on_readable(e->ud);
}

void endpoint_want_read(endpoint *e, bool on)
{
	e->want = on;
	update_reading(e);
	if (!on || !e->held)
		return;
	/* bytes the owner took already on its own need no word */
	if (e->rlen == 0 && !e->eof && !e->failed)
		e->held = false;
	/* a plain endpoint's timer has no other use before its close */
	else if (!e->closing && !e->st)
		uv_timer_start(&e->timer, on_held, 0, 0);
}

size_t endpoint_app_in(endpoint *e, const uint8_t **d)
{
	if (e->st)
		return stack_app_in(e->st, d);
	*d = e->rbuf ? e->rbuf + e->roff : NULL;
	return e->rlen;
}

int endpoint_app_done(endpoint *e, size_t n)
{
	if (e->failed)
		return -1;
	if (e->st) {
		e->count[1] += n;
		if (stack_app_done(e->st, n) < 0)
			return fail_stack(e);
		if (feed(e))
			return -1; /* room above: the layers take more wire bytes */
	} else {
		if (n > e->rlen)
			n = e->rlen;
		e->count[1] += n;
		e->roff += n;
		e->rlen -= n;
		if (e->rlen == 0 && e->rbuf) {
			pool_put(bufs(e), e->rbuf);
			e->rbuf = NULL;
		}
	}
	update_reading(e);
	return 0;
}

bool endpoint_at_eof(const endpoint *e)
{
	const uint8_t *d;
	if (e->st && stack_peer_ended(e->st))
		return true; /* the peer ended in band, its socket still open */
	return e->eof && e->rlen == 0 && (!e->st || stack_app_in(e->st, &d) == 0);
}

bool endpoint_take_buf(endpoint *e, uint8_t **buf, size_t *off, size_t *len)
{
	if (e->st || !e->rbuf || e->rlen == 0)
		return false;
	*buf = e->rbuf;
	*off = e->roff;
	*len = e->rlen;
	e->count[1] += e->rlen;
	e->rbuf = NULL;
	e->roff = e->rlen = 0;
	update_reading(e);
	return true;
}

bool endpoint_can_send(const endpoint *e)
{
	if (e->failed || e->closing || e->shut_wanted || e->pending >= ENDPOINT_MAX_PENDING ||
	    e->hold)
		return false;
	return !e->st || stack_app_room(e->st) > 0;
}

size_t endpoint_send_room(const endpoint *e)
{
	if (e->failed || e->closing || e->shut_wanted || e->hold)
		return 0;
	return e->st ? stack_app_room(e->st) : SIZE_MAX;
}

ssize_t endpoint_send(endpoint *e, const uint8_t *d, size_t n)
{
	if (e->failed)
		return -1;
	if (!endpoint_can_send(e) || n == 0)
		return 0;
	if (e->st) {
		ssize_t k = stack_from_app(e->st, d, n);
		if (k < 0)
			return fail_stack(e);
		e->count[0] += (uint64_t)k;
		return flush(e) ? -1 : k;
	}
	uint8_t *b = pool_get(bufs(e));
	if (!b)
		return fail(e, msgs[M_NOMEM]);
	size_t m = n < POOL_BUF_SIZE ? n : POOL_BUF_SIZE;
	memcpy(b, d, m);
	if (slot_write(e, free_slot(e), b, 0, m))
		return fail(e, uv_strerror(UV_EPIPE));
	e->count[0] += m;
	return (ssize_t)m;
}

int endpoint_send_buf(endpoint *e, uint8_t *buf, size_t off, size_t len)
{
	if (e->failed || e->st) {
		pool_put(bufs(e), buf);
		return -1;
	}
	e->count[0] += len; /* a failure below fails the endpoint: the count no longer matters */
	/* most writes finish at once: no request, no callback */
	uv_buf_t b = uv_buf_init((char *)buf + off, (unsigned)len);
	int k = e->ch ? UV_EAGAIN : uv_try_write((uv_stream_t *)e->tcp, &b, 1);
	if (k == (int)len) {
		pool_put(bufs(e), buf);
		return 0;
	}
	if (k < 0 && k != UV_EAGAIN) {
		pool_put(bufs(e), buf);
		return fail(e, uv_strerror(k));
	}
	if (k > 0) {
		off += (size_t)k;
		len -= (size_t)k;
	}
	wslot *slot = free_slot(e);
	if (!slot) { /* the caller checked endpoint_can_send */
		pool_put(bufs(e), buf);
		return fail(e, msgs[M_NOMEM]);
	}
	return slot_write(e, slot, buf, off, len) ? fail(e, uv_strerror(UV_EPIPE)) : 0;
}

bool endpoint_plain(const endpoint *e) { return !e->st; }

bool endpoint_unstack(endpoint *e)
{
	if (!e->st)
		return true;
	if (e->failed || e->closing || e->shut_wanted || e->hold || !stack_passthrough(e->st))
		return false;
	/* rbuf[roff, roff + rlen) would have crossed the layers unchanged:
	 * it is the app bytes of a plain endpoint as it stands */
	stack_free(e->st);
	e->st = NULL;
	uv_timer_stop(&e->timer); /* it followed the layers' deadlines */
	return true;
}

bool endpoint_idle(const endpoint *e)
{
	const uint8_t *d;
	return e->pending == 0 && e->extra == 0 && !e->hold &&
	       (!e->st || stack_wire_out(e->st, &d) == 0);
}

int endpoint_shutdown(endpoint *e)
{
	if (e->failed)
		return -1;
	if (e->shut_wanted)
		return 0;
	e->shut_wanted = true;
	if (e->st && !e->hold) { /* else the hold's last byte runs it (feed_hold) */
		e->stack_shut = true;
		if (stack_shutdown(e->st) < 0 ? fail_stack(e) : flush(e))
			return -1;
	}
	maybe_fin(e);
	return 0;
}

bool endpoint_shut_done(const endpoint *e) { return e->shut_done; }

const char *endpoint_error(const endpoint *e) { return e->why ? e->why : "?"; }

int endpoint_fd(const endpoint *e)
{
	uv_os_fd_t fd;
	return !e->tcp || uv_fileno((const uv_handle_t *)e->tcp, &fd) ? -1 : fd;
}

int endpoint_peername(const endpoint *e, struct sockaddr_storage *ss)
{
	if (e->ch)
		return e->ch->ops->peername(e->ch, ss);
	int len = sizeof *ss;
	return uv_tcp_getpeername(e->tcp, (struct sockaddr *)ss, &len) ? -1 : 0;
}

int endpoint_sockname(const endpoint *e, struct sockaddr_storage *ss)
{
	if (e->ch)
		return e->ch->ops->sockname(e->ch, ss);
	int len = sizeof *ss;
	return uv_tcp_getsockname(e->tcp, (struct sockaddr *)ss, &len) ? -1 : 0;
}

void endpoint_set_origin(endpoint *e, uint64_t origin) { e->origin = origin; }
uint64_t endpoint_origin(const endpoint *e) { return e->origin; }

uv_tcp_t *endpoint_tcp(endpoint *e) { return e->tcp; }
stack *endpoint_stack(endpoint *e) { return e->st; }

/* A kill: the owner hears of it as a failure. */
static void kill_ep(void *ud, const char *why)
{
	endpoint *e = ud;
	if (!e->closing && !e->failed)
		fail_report(e, why);
}

void endpoint_set_track(endpoint *e, track_flow *tf)
{
	track_end(e->tf, NULL);
	e->tf = tf;
	if (!tf) {
		e->count = e->own;
		return;
	}
	tf->bytes[0] += e->count[0];
	tf->bytes[1] += e->count[1];
	e->count = tf->bytes;
	track_set_kill(tf, kill_ep, e);
}

track_flow *endpoint_track(const endpoint *e) { return e->tf; }

track_flow *endpoint_take_track(endpoint *e)
{
	track_flow *tf = e->tf;
	e->tf = NULL;
	if (tf) {
		e->own[0] = tf->bytes[0];
		e->own[1] = tf->bytes[1];
		e->count = e->own;
		track_set_kill(tf, NULL, NULL);
	}
	return tf;
}

void endpoint_set_end_why(endpoint *e, const char *why) { e->end_why = why; }

void endpoint_close(endpoint *e, bool flush_first)
{
	if (e->closing)
		return;
	if (e->tf) {
		track_end(e->tf, e->end_why ? e->end_why : e->failed ? e->why : NULL);
		e->tf = NULL;
	}
	e->closing = true;
	e->want = false;
	update_reading(e);
	if (flush_first && (e->ch ? e->handles == 2 : !uv_is_closing((uv_handle_t *)e->tcp))) {
		flush(e);
		if (!endpoint_idle(e)) {
			e->flushing = true;
			uv_timer_start(&e->timer, on_flush_timeout, ENDPOINT_FLUSH_MS, 0);
			return;
		}
	}
	close_now(e);
}

endpoint *endpoint_new_chan(worker *w, chan *ch, stack *st, const endpoint_events *ev, void *ud)
{
	endpoint *e = calloc(1, sizeof *e);
	if (!e) {
		stack_free(st);
		ch->ops->close(ch);
		return NULL;
	}
	*e = (endpoint){.w = w, .ch = ch, .st = st, .ev = ev ? ev : &nowhere, .ud = ud,
	                .handles = 2};
	e->count = e->own;
	ch->ep = e;
	uv_timer_init(worker_loop(w), &e->timer);
	e->timer.data = e;
	arm(e);
	return e;
}

size_t endpoint_chan_input(endpoint *e, const uint8_t *d, size_t n)
{
	if (!e->reading || e->rlen || e->closing || n == 0)
		return 0;
	uint8_t *b = pool_get(bufs(e));
	if (!b) {
		fail_report(e, msgs[M_NOMEM]);
		return 0;
	}
	size_t m = n < POOL_BUF_SIZE ? n : POOL_BUF_SIZE;
	memcpy(b, d, m);
	got(e, b, m);
	return m;
}

void endpoint_chan_eof(endpoint *e)
{
	if (!e->closing && !e->eof)
		at_eof(e);
}

void endpoint_chan_fail(endpoint *e, const char *why)
{
	if (!e->closing && !e->failed)
		fail_report(e, why);
}

void endpoint_chan_written(endpoint *e, void *req, int status)
{
	uv_write_t *r = req;
	wslot *slot = (wslot *)r;
	if (slot >= e->slots && slot < e->slots + ENDPOINT_MAX_PENDING)
		slot_written(e, slot, status);
	else
		on_big_written(r, status);
}

void endpoint_chan_shut(endpoint *e) { on_shutdown(&e->shut, 0); }
