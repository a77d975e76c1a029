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

/* The row's state (ic->state). */
typedef struct http_in {
	in_conn *ic;
	http_server core;
	endpoint *up;   /* the current upstream, owned; NULL when none */
	uint8_t *buf;   /* upstream bytes not yet consumed (a pool buffer) */
	size_t len;
	bool up_paused; /* reads stopped for the client's write queue */
	bool eof;       /* the client's EOF came */
	bool eof_told;  /* ... and the core heard it */
} http_in;

static http_in *get(in_conn *ic) { return ic->state; }

/* The endpoint's writes go with it: no event of it runs after this. */
static void drop_upstream(http_in *h)
{
	if (!h->up)
		return;
	endpoint_close(h->up, false);
	h->up = NULL;
	h->len = 0;
	h->up_paused = false;
}

static void close_all(http_in *h)
{
	drop_upstream(h);
	conn_close_after_write(h->ic->c);
}

static int write_up(http_in *h, const uint8_t *data, size_t len)
{
	if (!h->up || endpoint_send_all(h->up, data, len))
		return -1;
	if (endpoint_queued(h->up) >= HTTP_IN_QUEUE_MAX)
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

/* The core may take held client bytes again (a response ended). */
static void kick(in_conn *ic);

/* Runs the core over the upstream bytes held. Returns false when the
 * upstream or the connection was closed meanwhile. */
static bool process_upstream(http_in *h)
{
	in_conn *ic = h->ic;
	for (;;) {
		proto_event ev;
		ssize_t n = http_server_feed_upstream(&h->core, h->buf, h->len, &ic->out, &ev);
		if (!in_conn_flush(ic))
			return false;
		if (!drain_client(h)) {
			conn_close(ic->c);
			return false;
		}
		if (n < 0 || ev.kind == PROTO_EV_CLOSE) {
			close_all(h);
			return false;
		}
		memmove(h->buf, h->buf + n, h->len - (size_t)n);
		h->len -= (size_t)n;
		if (n == 0 || h->len == 0)
			break;
	}
	if (h->len == POOL_BUF_SIZE) { /* a head that cannot fit */
		in_conn_log_end(ic, msgs[MSG_HEAD_TOO_LARGE]);
		close_all(h);
		return false;
	}
	if (conn_write_queue(ic->c) >= HTTP_IN_QUEUE_MAX && h->up && !h->up_paused) {
		endpoint_want_read(h->up, false);
		h->up_paused = true;
	}
	/* a finished response lets the held next request through */
	conn_resume(ic->c);
	kick(ic);
	return h->up != NULL;
}

/* The upstream ended (its EOF, or a failure): the core decides whether the
 * client's connection goes on (keep-alive) or ends with it. */
static void up_ended(http_in *h)
{
	proto_event ev = {0};
	int rc = http_server_upstream_eof(&h->core, &h->ic->out, &ev);
	drop_upstream(h);
	if (!in_conn_flush(h->ic))
		return;
	if (rc < 0 || ev.kind == PROTO_EV_CLOSE)
		conn_close_after_write(h->ic->c);
	else
		kick(h->ic);
}

static void up_readable(void *ud)
{
	http_in *h = ud;
	const uint8_t *d;
	size_t n;
	while (!h->up_paused && (n = endpoint_app_in(h->up, &d)) > 0) {
		size_t m = POOL_BUF_SIZE - h->len < n ? POOL_BUF_SIZE - h->len : n;
		memcpy(h->buf + h->len, d, m);
		h->len += m;
		if (endpoint_app_done(h->up, m)) {
			up_ended(h);
			return;
		}
		conn_touch(h->ic->c);
		if (!process_upstream(h))
			return;
	}
	if (!h->up_paused && endpoint_at_eof(h->up))
		up_ended(h);
}

static void up_writable(void *ud)
{
	http_in *h = ud;
	if (endpoint_queued(h->up) < HTTP_IN_QUEUE_MAX)
		conn_resume(h->ic->c);
}

static void up_error(void *ud, const char *why)
{
	(void)why; /* the core answers the client as for the upstream's end */
	up_ended(ud);
}

static const endpoint_events up_events = {
	.on_readable = up_readable,
	.on_writable = up_writable,
	.on_error = up_error,
};

/* ---- client side ---- */

static void connected(const connect_result *r, void *data)
{
	in_conn *ic = data;
	http_in *h = get(ic);
	endpoint *up = r->ep;
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
	if (!endpoint_plain(up) && !http_server_dialing_connect(&h->core)) {
		/* Plain http:// requests through a layered upstream (a proxy
		 * outbound) are not carried yet. CONNECT through the same outbound
		 * works. Answered while the core still waits for its dial, so the
		 * 502 can be written. */
		endpoint_close(up, false);
		in_conn_log_end(ic, msgs[MSG_PLAIN_VIA_LAYERS]);
		if (http_server_failed(&h->core, PROTO_DIAL_GENERAL, msgs[MSG_PLAIN_VIA_LAYERS], &ic->out) == 0 &&
		    in_conn_flush(ic))
			conn_close_after_write(ic->c);
		else
			conn_close(ic->c);
		return;
	}
	if (http_server_opened(&h->core, &ic->out) || !in_conn_flush(ic)) {
		endpoint_close(up, false);
		conn_close(ic->c);
		return;
	}
	if (http_server_is_tunnel(&h->core)) {
		conn_relay(ic->c, up);
		return;
	}
	h->up = up;
	conn_set_origin(ic->c, endpoint_origin(up));
	endpoint_set_events(up, &up_events, h);
	if (!drain_up(h)) {
		close_all(h);
		return;
	}
	endpoint_want_read(up, true);
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
		endpoint_want_read(h->up, true);
		up_readable(h); /* what waited in the endpoint goes first */
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
