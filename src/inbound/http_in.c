/* http_in.c - the HTTP proxy inbound: CONNECT becomes a raw relay; absolute-form requests run through the core both ways. */
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "inbound/http_in.h"
#include "proto/http_proxy.h"

/* Bytes queued toward either side before the other side's reads pause:
 * the backpressure bound of the filtered (absolute-form) path. */
#define HTTP_IN_QUEUE_MAX (64 * 1024)

enum { MSG_BLOCKED, MSG_PLAIN_VIA_LAYERS, MSG_HEAD_TOO_LARGE, MSG_MALFORMED };
static const char *const msgs[] = {
	[MSG_BLOCKED] = "blocked by a route",
	[MSG_PLAIN_VIA_LAYERS] =
		"plain http:// requests through a proxy outbound are not supported yet; use CONNECT",
	[MSG_HEAD_TOO_LARGE] = "upstream response head too large",
	[MSG_MALFORMED] = "malformed request",
};

typedef struct up_write up_write;

/* The row's state (ic->state). */
typedef struct http_in {
	in_conn *ic;
	up_write *writes; /* upstream writes in flight, newest first; each
	                   * points back here until detach_writes */
	http_server core;
	uv_tcp_t *up;   /* the current upstream, owned; NULL when none */
	uint8_t *buf;   /* upstream bytes not yet consumed (a pool buffer) */
	size_t len;
	bool up_paused; /* reads stopped for the client's write queue */
	bool eof;       /* the client's EOF came */
	bool eof_told;  /* ... and the core heard it */
} http_in;

/* One upstream write. libuv runs its callback after the socket is closed
 * (with the write's own status when it had completed, UV_ECANCELED when
 * not), which may be after free_state: so the request is on its owner's
 * list and drop_upstream clears req.data for every one still there. */
struct up_write {
	uv_write_t req; /* req.data: the owning http_in, NULL once it is gone */
	up_write *prev, *next;
	uint8_t data[];
};

static http_in *get(in_conn *ic) { return ic->state; }

static void free_handle(uv_handle_t *h) { free(h); }

static void unlink_write(http_in *h, up_write *w)
{
	if (w->prev)
		w->prev->next = w->next;
	else
		h->writes = w->next;
	if (w->next)
		w->next->prev = w->prev;
}

/* The upstream is closed (and the state may be freed) before its writes'
 * callbacks run: they find no owner. */
static void detach_writes(http_in *h)
{
	for (up_write *w = h->writes; w; w = w->next)
		w->req.data = NULL;
	h->writes = NULL;
}

static void drop_upstream(http_in *h)
{
	if (!h->up)
		return;
	detach_writes(h); /* they belong to this upstream, not the next */
	uv_close((uv_handle_t *)h->up, free_handle);
	h->up = NULL;
	h->len = 0;
	h->up_paused = false;
}

static void close_all(http_in *h)
{
	drop_upstream(h);
	conn_close_after_write(h->ic->c);
}

static void on_up_written(uv_write_t *req, int status)
{
	up_write *w = (up_write *)req;
	http_in *h = req->data;
	if (h)
		unlink_write(h, w);
	free(w);
	if (!h || status == UV_ECANCELED)
		return;
	if (status < 0) {
		close_all(h);
		return;
	}
	if (h->up && h->up->write_queue_size < HTTP_IN_QUEUE_MAX)
		conn_resume(h->ic->c);
}

static int write_up(http_in *h, const uint8_t *data, size_t len)
{
	if (!h->up)
		return -1;
	up_write *w = malloc(sizeof *w + len);
	if (!w)
		return -1;
	memcpy(w->data, data, len);
	w->req.data = h;
	uv_buf_t b = uv_buf_init((char *)w->data, (unsigned)len);
	if (uv_write(&w->req, (uv_stream_t *)h->up, &b, 1, on_up_written)) {
		free(w);
		return -1;
	}
	w->prev = NULL;
	w->next = h->writes;
	if (w->next)
		w->next->prev = w;
	h->writes = w;
	if (h->up->write_queue_size >= HTTP_IN_QUEUE_MAX)
		conn_pause(h->ic->c);
	return 0;
}

/* Sends everything the core has for the upstream. */
static bool drain_up(http_in *h)
{
	const uint8_t *d;
	size_t n;
	while (http_server_take_upstream(&h->core, &d, &n))
		if (write_up(h, d, n))
			return false;
	return true;
}

static bool drain_client(http_in *h)
{
	const uint8_t *d;
	size_t n;
	while (http_server_take_client(&h->core, &d, &n))
		if (conn_write(h->ic->c, d, n))
			return false;
	return true;
}

/* ---- upstream side ---- */

static void on_up_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);

static void alloc_up(uv_handle_t *hd, size_t suggested, uv_buf_t *buf)
{
	(void)suggested;
	http_in *h = hd->data;
	buf->base = (char *)h->buf + h->len;
	buf->len = POOL_BUF_SIZE - h->len;
}

/* The core may take held client bytes again (a response ended). */
static void kick(in_conn *ic);

static void process_upstream(http_in *h)
{
	in_conn *ic = h->ic;
	for (;;) {
		proto_event ev;
		ssize_t n = http_server_feed_upstream(&h->core, h->buf, h->len, &ic->out, &ev);
		if (!in_conn_flush(ic))
			return;
		if (!drain_client(h)) {
			conn_close(ic->c);
			return;
		}
		if (n < 0 || ev.kind == PROTO_EV_CLOSE) {
			close_all(h);
			return;
		}
		memmove(h->buf, h->buf + n, h->len - (size_t)n);
		h->len -= (size_t)n;
		if (n == 0 || h->len == 0)
			break;
	}
	if (h->len == POOL_BUF_SIZE) { /* a head that cannot fit */
		in_conn_log_end(ic, msgs[MSG_HEAD_TOO_LARGE]);
		close_all(h);
		return;
	}
	if (conn_write_queue(ic->c) >= HTTP_IN_QUEUE_MAX && h->up && !h->up_paused) {
		uv_read_stop((uv_stream_t *)h->up);
		h->up_paused = true;
	}
	/* a finished response lets the held next request through */
	conn_resume(ic->c);
	kick(ic);
}

static void on_up_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	(void)buf;
	http_in *h = s->data;
	if (n == 0)
		return;
	if (n < 0) {
		proto_event ev = {0};
		int rc = http_server_upstream_eof(&h->core, &h->ic->out, &ev);
		drop_upstream(h);
		if (!in_conn_flush(h->ic))
			return;
		if (rc < 0 || ev.kind == PROTO_EV_CLOSE)
			conn_close_after_write(h->ic->c);
		else
			kick(h->ic);
		return;
	}
	conn_touch(h->ic->c);
	h->len += (size_t)n;
	process_upstream(h);
}

/* ---- client side ---- */

static void connected(const connect_result *r, void *data)
{
	in_conn *ic = data;
	http_in *h = get(ic);
	uv_tcp_t *up = r->up;
	ic->pending = NULL;
	if (!r->ok || r->blackhole) {
		const char *why = r->ok ? msgs[MSG_BLOCKED] : r->msg;
		in_conn_log_end(ic, why);
		if (http_server_failed(&h->core, r->ok ? PROTO_DIAL_NOT_ALLOWED : r->err, why,
		                       &ic->out) == 0 &&
		    in_conn_flush(ic))
			conn_close_after_write(ic->c);
		return;
	}
	if (r->st && !http_server_dialing_connect(&h->core)) {
		/* Plain http:// requests through a layered upstream (a proxy
		 * outbound) are not carried yet: the request filter drives a plain
		 * socket. CONNECT through the same outbound works. Answered while
		 * the core still waits for its dial, so the 502 can be written. */
		stack_free(r->st);
		uv_close((uv_handle_t *)up, free_handle);
		in_conn_log_end(ic, msgs[MSG_PLAIN_VIA_LAYERS]);
		if (http_server_failed(&h->core, PROTO_DIAL_GENERAL, msgs[MSG_PLAIN_VIA_LAYERS], &ic->out) == 0 &&
		    in_conn_flush(ic))
			conn_close_after_write(ic->c);
		else
			conn_close(ic->c);
		return;
	}
	if (http_server_opened(&h->core, &ic->out) || !in_conn_flush(ic)) {
		uv_close((uv_handle_t *)up, free_handle);
		stack_free(r->st);
		conn_close(ic->c);
		return;
	}
	if (http_server_is_tunnel(&h->core)) {
		conn_relay(ic->c, up, r->st);
		return;
	}
	h->up = up;
	up->data = h;
	uv_tcp_nodelay(up, 1);
	if (!drain_up(h)) {
		close_all(h);
		return;
	}
	uv_read_start((uv_stream_t *)up, alloc_up, on_up_read);
	conn_drive(ic->c);
	conn_resume(ic->c);
}

/* Each call runs the core once; the upstream gets what it has for it. */
static ssize_t feed(in_conn *ic, const uint8_t *in, size_t len, proto_event *ev)
{
	http_in *h = get(ic);
	ssize_t n = http_server_feed(&h->core, in, len, &ic->out, ev);
	if (!in_conn_flush(ic))
		return INBOUND_FEED_GONE;
	if (n >= 0 && !drain_up(h)) {
		close_all(h);
		return INBOUND_FEED_GONE;
	}
	if (n >= 0 && ev->kind == PROTO_EV_OPEN)
		drop_upstream(h); /* a new target: the core asked for a new dial */
	return n;
}

/* The client's EOF reaches the core once the requests before it have been
 * taken: pipelined requests behind a response in flight are answered
 * first. Bytes left while no request is under way are a head cut short.
 * Returns true when the connection should close now. */
static bool tell_eof(http_in *h)
{
	if (!h->eof || h->eof_told)
		return false;
	if (conn_buffered(h->ic->c) && !http_server_between_requests(&h->core))
		return false;
	h->eof_told = true;
	proto_event ev = {0};
	return http_server_client_eof(&h->core, &ev) < 0 || ev.kind == PROTO_EV_CLOSE;
}

/* The core may take held client bytes again (a response ended); an EOF
 * that waited behind them is told now. */
static void kick(in_conn *ic)
{
	conn_feed(ic->c);
	http_in *h = get(ic);
	if (tell_eof(h))
		close_all(h);
}

/* The core wrote its error answer, if any: close once it is sent. */
static void refused(in_conn *ic, const char *why)
{
	in_conn_log_end(ic, why ? why : msgs[MSG_MALFORMED]);
	close_all(get(ic));
}

/* A CONNECT is answered 200 first: the tunnel's first bytes carry the name. */
static bool sniffs(in_conn *ic) { return http_server_dialing_connect(&get(ic)->core); }

static int opened(in_conn *ic, const connect_result *r)
{
	(void)r;
	return http_server_opened(&get(ic)->core, &ic->out);
}

static bool client_end(in_conn *ic)
{
	http_in *h = get(ic);
	h->eof = true;
	return tell_eof(h); /* false: a response in flight is delivered, its end closes */
}

static void written(in_conn *ic)
{
	http_in *h = get(ic);
	if (h->up && h->up_paused && conn_write_queue(ic->c) < HTTP_IN_QUEUE_MAX) {
		h->up_paused = false;
		uv_read_start((uv_stream_t *)h->up, alloc_up, on_up_read);
	}
}

static int init(in_conn *ic)
{
	http_in *h = get(ic);
	h->buf = pool_get(worker_pool(conn_worker(ic->c)));
	if (!h->buf)
		return -1;
	h->ic = ic;
	http_server_init(&h->core, ic->in->logins, ic->in->n_logins);
	return 0;
}

static void free_state(in_conn *ic)
{
	http_in *h = get(ic);
	drop_upstream(h);
	pool_put(worker_pool(conn_worker(ic->c)), h->buf);
	h->buf = NULL;
}

const inbound_proto_ops http_in_ops = {
	.size = sizeof(http_in),
	.init = init,
	.feed = feed,
	.refused = refused,
	.sniffs = sniffs,
	.connected = connected,
	.opened = opened,
	.client_end = client_end,
	.written = written,
	.free = free_state,
};
