/* gun_conn.c - an nghttp2 session over an endpoint, its streams as channels: calls, Hunk framing, per-stream windows, the client's connection sharing. */
#include "runtime/gun_conn.h"

#include <arpa/inet.h>
#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/list.h"
#include "base/log.h"
#include "runtime/chan_queue.h"
#include "runtime/dial_stream.h"
#include "runtime/guard.h"
#include "transport/grpc.h"
#include "transport/gun.h"
#include "transport/tls.h"

enum {
	M_NOMEM,
	M_CONN_CLOSED,
	M_HTTP2,
	M_RESET,
	M_CUT,
	M_REFUSED,
	M_NO_SETTINGS,
	M_OVER,
	M_ENDED,
};

static const char *const msgs[] = {
	[M_NOMEM] = "grpc: out of memory",
	[M_CONN_CLOSED] = "grpc: the connection closed",
	[M_HTTP2] = "grpc: http2: %s",
	[M_RESET] = "grpc: the peer reset the stream: %s",
	[M_CUT] = "grpc: the stream ended in the middle of a message",
	[M_REFUSED] = "refused a call from %s: %s",
	[M_NO_SETTINGS] = "grpc: handshake timed out",
	[M_OVER] = "over the client's bound of sub-flows and calls (max_connections_per_source) or its open rate",
	[M_ENDED] = "ended the connection of %s: %s",
};

#define WHY_MAX 192

typedef struct gun_conn gun_conn;

typedef struct gstream {
	chan ch; /* first: the endpoint's channel */
	gun_conn *c;
	int32_t id;
	list_node node;
	gun_reader rd;
	uint8_t *rx;   /* Hunk data not yet taken by the endpoint */
	size_t rx_len, rx_cap;
	size_t unconsumed; /* wire bytes received whose window is not given back */
	chan_queue wq;   /* the endpoint's writes */
	uint8_t hdr[GUN_HEADER_MAX]; /* the head write's message header */
	size_t hlen, hoff; /* hlen 0: not made yet */
	bool want;        /* the endpoint reads */
	bool peer_end;    /* END_STREAM came */
	bool eof_told, shut_wanted, shut_sent, shut_told, fail_told;
	bool deferred;    /* the data source waits for bytes */
	bool ep_closed;   /* chan close ran */
	bool h2_closed;   /* nghttp2 closed the stream */
	bool to_accept;   /* server: a valid call to hand over */
	bool refused;     /* server: answered a refusal */
	bool held;        /* server: counted against the client's source (guard) */
	bool failed;
	char why[WHY_MAX];
	grpc_head head; /* the request's (server) or the response's (client) */
} gstream;

/* A client flow waiting for its connection, then for its layers. */
typedef struct gopen {
	connect_pending base; /* first */
	gun_conn *c;
	list_node node;
	stack *st;
	endpoint *ep;
	connect_cb cb;
	void *data;
} gopen;

struct gun_conn {
	worker *w;
	bool server;
	nghttp2_session *h2;
	endpoint *below;
	connect_pending *dial;
	const uint8_t *wire;
	size_t wire_len;
	list streams;
	size_t n_streams;
	list opens; /* client: gopen waiting */
	size_t n_opens;
	uv_idle_t kick;
	uv_timer_t timer;
	int handles;
	bool kicking, ready, dead, goaway, servicing, freed;
	char why[WHY_MAX];
	list_node reg; /* client: in the worker's list */
	uint64_t origin;
	char *path, *host;
	bool tls;
	gun_server_config scfg;
	uint64_t idle_ms;
	struct sockaddr_storage peer; /* server: the client's address (family 0: unknown) */
	guard_bucket open_rate;       /* server: its call opens (guard) */
	grpc_calm calm; /* frames without payload (transport/grpc.h) */
};

static _Thread_local list clients; /* this worker's client connections */
static _Thread_local list servers;

static void service(gun_conn *c);

static void on_kick(uv_idle_t *h)
{
	gun_conn *c = h->data;
	uv_idle_stop(h);
	c->kicking = false;
	service(c);
}

static void kick(gun_conn *c)
{
	if (!c->kicking && !c->freed) {
		c->kicking = true;
		uv_idle_start(&c->kick, on_kick);
	}
}

static void stream_fail(gstream *s, int msg, const char *a, const char *b)
{
	if (s->failed)
		return;
	s->failed = true;
	snprintf(s->why, sizeof s->why, msgs[msg], a ? a : "?", b ? b : "?");
}

/* ---- the channel ---- */

static gstream *of(const chan *ch) { return (gstream *)(void *)ch; }

static int ch_write(chan *ch, const uint8_t *d, size_t n, void *req)
{
	gstream *s = of(ch);
	gun_conn *c = s->c;
	if (c->dead || s->failed || s->shut_wanted || s->h2_closed ||
	    chan_queue_push(&s->wq, d, n, req))
		return -1;
	if (s->deferred && s->id > 0) {
		s->deferred = false;
		nghttp2_session_resume_data(c->h2, s->id);
	}
	kick(c);
	return 0;
}

static void ch_read(chan *ch, bool on)
{
	gstream *s = of(ch);
	s->want = on;
	if (on)
		kick(s->c);
}

static int ch_shutdown(chan *ch)
{
	gstream *s = of(ch);
	s->shut_wanted = true;
	if (s->deferred && s->id > 0) {
		s->deferred = false;
		nghttp2_session_resume_data(s->c->h2, s->id);
	}
	kick(s->c);
	return 0;
}

static void give_back(gstream *s, size_t n)
{
	if (!n)
		return;
	if (n > s->unconsumed)
		n = s->unconsumed;
	s->unconsumed -= n;
	if (s->h2_closed || s->id <= 0)
		nghttp2_session_consume_connection(s->c->h2, n);
	else
		nghttp2_session_consume(s->c->h2, s->id, n);
}

static void ch_close(chan *ch)
{
	gstream *s = of(ch);
	gun_conn *c = s->c;
	s->ep_closed = true;
	s->ch.ep = NULL;
	chan_queue_forget(&s->wq); /* the buffers are the endpoint's */
	if (!c->dead && s->id > 0 && !s->h2_closed && !(s->peer_end && s->shut_sent))
		nghttp2_submit_rst_stream(c->h2, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_CANCEL);
	if (!c->dead)
		give_back(s, s->unconsumed);
	kick(c);
}

static size_t ch_queued(const chan *ch)
{
	return chan_queue_bytes(&of(ch)->wq);
}

static int ch_peername(const chan *ch, struct sockaddr_storage *ss)
{
	const gun_conn *c = of(ch)->c;
	return c->below ? endpoint_peername(c->below, ss) : -1;
}

static int ch_sockname(const chan *ch, struct sockaddr_storage *ss)
{
	const gun_conn *c = of(ch)->c;
	return c->below ? endpoint_sockname(c->below, ss) : -1;
}

static const chan_ops stream_chan = {
	.write = ch_write,
	.read = ch_read,
	.shutdown = ch_shutdown,
	.close = ch_close,
	.queued = ch_queued,
	.peername = ch_peername,
	.sockname = ch_sockname,
};

static gstream *stream_new(gun_conn *c)
{
	gstream *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	s->ch.ops = &stream_chan;
	s->c = c;
	gun_reader_init(&s->rd);
	list_push_back(&c->streams, &s->node);
	c->n_streams++;
	return s;
}

static void stream_free(gstream *s)
{
	gun_conn *c = s->c;
	if (s->held)
		guard_source_unhold(worker_guard(c->w), (struct sockaddr *)&c->peer, 1);
	if (s->id > 0 && !c->freed && c->h2)
		nghttp2_session_set_stream_user_data(c->h2, s->id, NULL);
	list_remove(&c->streams, &s->node);
	c->n_streams--;
	free(s->rx);
	free(s);
}

/* ---- nghttp2 callbacks ---- */

static ssize_t read_source(nghttp2_session *h2, int32_t id, uint8_t *buf, size_t length,
                           uint32_t *flags, nghttp2_data_source *src, void *ud)
{
	gun_conn *c = ud;
	gstream *s = src->ptr;
	size_t out = 0;
	chan_write *q;
	while (out < length && (q = chan_queue_head(&s->wq))) {
		if (!s->hlen) { /* each write goes as one message */
			s->hlen = gun_header(s->hdr, q->n);
			s->hoff = 0;
		}
		if (s->hoff < s->hlen) {
			size_t k = s->hlen - s->hoff;
			if (k > length - out)
				k = length - out;
			memcpy(buf + out, s->hdr + s->hoff, k);
			s->hoff += k;
			out += k;
			continue;
		}
		size_t k = q->n - q->off;
		if (k > length - out)
			k = length - out;
		memcpy(buf + out, q->d + q->off, k);
		q->off += k;
		out += k;
		if (q->off == q->n) {
			chan_queue_pop(&s->wq, 0);
			s->hlen = 0;
			kick(c);
		}
	}
	if (out)
		return (ssize_t)out;
	if (!s->shut_wanted) {
		s->deferred = true;
		return NGHTTP2_ERR_DEFERRED;
	}
	*flags |= NGHTTP2_DATA_FLAG_EOF;
	s->shut_sent = true;
	kick(c);
	if (c->server) {
		*flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
		const nghttp2_nv trailer[] = {{(uint8_t *)"grpc-status", (uint8_t *)"0", 11, 1,
		                               NGHTTP2_NV_FLAG_NONE}};
		if (nghttp2_submit_trailer(h2, id, trailer, 1))
			return NGHTTP2_ERR_CALLBACK_FAILURE;
	}
	return 0;
}

#define NV(n, v)                                                                        \
	{                                                                                \
		(uint8_t *)(n), (uint8_t *)(v), strlen(n), strlen(v), NGHTTP2_NV_FLAG_NONE \
	}

static int on_begin_headers(nghttp2_session *h2, const nghttp2_frame *f, void *ud)
{
	gun_conn *c = ud;
	if (!c->server || f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	gstream *s = stream_new(c);
	if (!s)
		return nghttp2_submit_rst_stream(h2, NGHTTP2_FLAG_NONE, f->hd.stream_id,
		                                 NGHTTP2_REFUSED_STREAM)
		               ? NGHTTP2_ERR_CALLBACK_FAILURE
		               : 0;
	s->id = f->hd.stream_id;
	s->ep_closed = true; /* until it is handed over: nothing to tell */
	nghttp2_session_set_stream_user_data(h2, s->id, s);
	return 0;
}

static int on_header(nghttp2_session *h2, const nghttp2_frame *f, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *ud)
{
	(void)flags;
	(void)ud;
	gstream *s = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
	if (s)
		grpc_head_add(&s->head, name, namelen, value, valuelen);
	return 0;
}

static void peer_text(gun_conn *c, char *out, size_t size);

/* The server's verdict: the call is taken (its flow is handed over in
 * service), or answered with a refusal, logged, and left to close. */
static int answer_request(gun_conn *c, gstream *s)
{
	const char *status, *grpc_status;
	char why[WHY_MAX], who[64];
	if (grpc_check_request(&s->head, c->path, &status, &grpc_status, why, sizeof why) == 0) {
		/* a call's upstream counts against the client's source as a
		 * connection does, and the connection's call opens are
		 * rate-bounded (docs/security.md): over either, RST_STREAM
		 * REFUSED_STREAM (RFC 9113 8.7: nothing was processed, the
		 * client may retry) */
		guard *g = worker_guard(c->w);
		const struct sockaddr *peer = (const struct sockaddr *)&c->peer;
		if (!guard_open_allowed(g, peer, &c->open_rate, uv_now(worker_loop(c->w)), "grpc call") ||
		    !(s->held = guard_source_hold(g, peer, 1))) {
			peer_text(c, who, sizeof who);
			log_debug("grpc", msgs[M_REFUSED], who, msgs[M_OVER]);
			s->refused = true;
			return nghttp2_submit_rst_stream(c->h2, NGHTTP2_FLAG_NONE, s->id,
			                                 NGHTTP2_REFUSED_STREAM);
		}
		const nghttp2_nv nv[] = {NV(":status", "200"), NV("content-type", "application/grpc")};
		nghttp2_data_provider src = {.source.ptr = s, .read_callback = read_source};
		s->to_accept = true;
		return nghttp2_submit_response(c->h2, s->id, nv, 2, &src);
	}
	peer_text(c, who, sizeof who);
	log_debug("grpc", msgs[M_REFUSED], who, why);
	s->refused = true;
	nghttp2_nv nv[3] = {NV(":status", status)};
	size_t n = 1;
	if (grpc_status) {
		nv[n++] = (nghttp2_nv)NV("content-type", "application/grpc");
		nv[n++] = (nghttp2_nv)NV("grpc-status", grpc_status);
	}
	return nghttp2_submit_response(c->h2, s->id, nv, n, NULL);
}

static int on_frame_recv(nghttp2_session *h2, const nghttp2_frame *f, void *ud)
{
	gun_conn *c = ud;
	if (f->hd.type == NGHTTP2_SETTINGS && !(f->hd.flags & NGHTTP2_FLAG_ACK)) {
		c->ready = true;
		kick(c);
	}
	if (f->hd.type == NGHTTP2_GOAWAY) {
		c->goaway = true;
		kick(c);
	}
	gstream *s = f->hd.stream_id ? nghttp2_session_get_stream_user_data(h2, f->hd.stream_id)
	                             : NULL;
	if (!s)
		return 0;
	if (f->hd.type == NGHTTP2_HEADERS) {
		if (c->server && f->headers.cat == NGHTTP2_HCAT_REQUEST) {
			if (answer_request(c, s))
				return NGHTTP2_ERR_CALLBACK_FAILURE;
		} else if (!c->server && !s->failed &&
		           grpc_check_response(&s->head, s->why, sizeof s->why)) {
			s->failed = true;
		}
	}
	if ((f->hd.type == NGHTTP2_HEADERS || f->hd.type == NGHTTP2_DATA) &&
	    (f->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
		s->peer_end = true;
		if (!gun_reader_at_boundary(&s->rd))
			stream_fail(s, M_CUT, NULL, NULL);
	}
	kick(c);
	return 0;
}

static int on_data(nghttp2_session *h2, uint8_t flags, int32_t id, const uint8_t *data,
                   size_t len, void *ud)
{
	(void)flags;
	gun_conn *c = ud;
	gstream *s = nghttp2_session_get_stream_user_data(h2, id);
	if (!s || s->refused || s->failed || (s->ep_closed && !s->to_accept)) {
		nghttp2_session_consume(h2, id, len);
		return 0;
	}
	s->unconsumed += len;
	if (s->rx_cap - s->rx_len < len) {
		/* at most the stream's window waits here */
		size_t cap = s->rx_cap ? s->rx_cap : 16384;
		while (cap - s->rx_len < len)
			cap *= 2;
		uint8_t *rx = realloc(s->rx, cap);
		if (!rx) {
			stream_fail(s, M_NOMEM, NULL, NULL);
			return 0;
		}
		s->rx = rx;
		s->rx_cap = cap;
	}
	layer_buf out = {.data = s->rx, .len = s->rx_len, .cap = s->rx_cap};
	ssize_t n = gun_read(&s->rd, data, len, &out);
	if (n < 0) {
		snprintf(s->why, sizeof s->why, "%s", gun_error((int)n));
		s->failed = true;
		nghttp2_submit_rst_stream(h2, NGHTTP2_FLAG_NONE, id, NGHTTP2_PROTOCOL_ERROR);
	}
	s->rx_len = out.len;
	kick(c);
	return 0;
}

/* Every frame's header, unknown types too (they are registered as
 * extensions for this): frames without payload are bounded (grpc.h
 * GRPC_CALM_RATE); past it a GOAWAY ENHANCE_YOUR_CALM ends the
 * connection and nghttp2 reads nothing more. */
static int on_begin_frame(nghttp2_session *h2, const nghttp2_frame_hd *hd, void *ud)
{
	gun_conn *c = ud;
	if (c->calm.over ||
	    grpc_calm_frame(&c->calm, hd->type, hd->length, hd->flags, uv_now(c->timer.loop)) == 0)
		return 0;
	char who[64];
	peer_text(c, who, sizeof who);
	log_debug("grpc", msgs[M_ENDED], who, grpc_calm_message());
	return nghttp2_session_terminate_session(h2, NGHTTP2_ENHANCE_YOUR_CALM);
}

/* The unknown types' payloads are dropped. */
static int unpack_extension(nghttp2_session *h2, void **payload, const nghttp2_frame_hd *hd,
                            void *ud)
{
	(void)h2;
	(void)payload;
	(void)hd;
	(void)ud;
	return NGHTTP2_ERR_CANCEL;
}

static int on_stream_close(nghttp2_session *h2, int32_t id, uint32_t code, void *ud)
{
	gun_conn *c = ud;
	gstream *s = nghttp2_session_get_stream_user_data(h2, id);
	if (!s)
		return 0;
	s->h2_closed = true;
	if (code != NGHTTP2_NO_ERROR && !(s->peer_end && s->shut_sent))
		stream_fail(s, M_RESET, nghttp2_http2_strerror(code), NULL);
	else if (!s->peer_end)
		stream_fail(s, M_CONN_CLOSED, NULL, NULL);
	if (s->unconsumed) {
		nghttp2_session_consume_connection(h2, s->unconsumed);
		s->unconsumed = 0;
	}
	nghttp2_session_set_stream_user_data(h2, id, NULL);
	s->id = -1;
	kick(c);
	return 0;
}

/* ---- the connection ---- */

static void peer_text(gun_conn *c, char *out, size_t size)
{
	struct sockaddr_storage ss;
	char ip[64] = "?";
	unsigned port = 0;
	if (c->below && endpoint_peername(c->below, &ss) == 0) {
		if (ss.ss_family == AF_INET) {
			const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
			inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
			port = ntohs(a->sin_port);
		} else if (ss.ss_family == AF_INET6) {
			const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
			inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof ip);
			port = ntohs(a->sin6_port);
		}
	}
	snprintf(out, size, ss.ss_family == AF_INET6 ? "[%s]:%u" : "%s:%u", ip, port);
}

static void die(gun_conn *c, const char *why)
{
	if (c->dead)
		return;
	c->dead = true;
	snprintf(c->why, sizeof c->why, "%s", why);
	for (list_node *n = c->streams.head; n; n = n->next) {
		gstream *s = LIST_ENTRY(n, gstream, node);
		if (!(s->peer_end && s->shut_sent) && !s->failed) {
			s->failed = true;
			snprintf(s->why, sizeof s->why, "%s", c->why);
		}
		chan_queue_cancel_all(&s->wq, UV_ECANCELED); /* unsent: reported as such */
	}
	kick(c);
}

static void send_out(gun_conn *c)
{
	while (c->below && !c->dead) {
		if (!c->wire_len) {
			ssize_t n = nghttp2_session_mem_send(c->h2, &c->wire);
			if (n < 0) {
				char t[WHY_MAX];
				snprintf(t, sizeof t, msgs[M_HTTP2], nghttp2_strerror((int)n));
				die(c, t);
				return;
			}
			if (n == 0)
				break;
			c->wire_len = (size_t)n;
		}
		if (!endpoint_can_send(c->below))
			return;
		ssize_t k = endpoint_send(c->below, c->wire, c->wire_len);
		if (k < 0) {
			die(c, endpoint_error(c->below));
			return;
		}
		if (k == 0)
			return;
		c->wire += k;
		c->wire_len -= (size_t)k;
	}
	if (!c->dead && !nghttp2_session_want_read(c->h2) && !nghttp2_session_want_write(c->h2))
		die(c, c->calm.over ? grpc_calm_message() : msgs[M_CONN_CLOSED]);
}

static void on_below_readable(void *ud)
{
	gun_conn *c = ud;
	const uint8_t *d;
	size_t n;
	while (!c->dead && (n = endpoint_app_in(c->below, &d)) > 0) {
		ssize_t r = nghttp2_session_mem_recv(c->h2, d, n);
		if (r < 0) {
			char t[WHY_MAX];
			snprintf(t, sizeof t, msgs[M_HTTP2], nghttp2_strerror((int)r));
			die(c, t);
			break;
		}
		if (endpoint_app_done(c->below, n)) {
			die(c, endpoint_error(c->below));
			break;
		}
	}
	if (!c->dead && endpoint_at_eof(c->below))
		die(c, msgs[M_CONN_CLOSED]);
	service(c);
}

static void on_below_writable(void *ud) { service(ud); }

static void on_below_error(void *ud, const char *why)
{
	gun_conn *c = ud;
	die(c, why);
	service(c);
}

static const endpoint_events below_events = {
	.on_readable = on_below_readable,
	.on_writable = on_below_writable,
	.on_error = on_below_error,
};

static void on_closed(uv_handle_t *h)
{
	gun_conn *c = h->data;
	if (--c->handles > 0)
		return;
	free(c->path);
	free(c->host);
	free(c);
}

/* The connection is dead and no stream is left: everything goes. */
static void conn_free(gun_conn *c)
{
	if (c->freed)
		return;
	c->freed = true;
	list_remove(c->server ? &servers : &clients, &c->reg);
	if (c->dial)
		c->dial->cancel(c->dial);
	if (c->below)
		endpoint_close(c->below, true);
	nghttp2_session_del(c->h2);
	c->h2 = NULL;
	if (c->server && c->scfg.release)
		c->scfg.release(c->scfg.ud);
	uv_close((uv_handle_t *)&c->kick, on_closed);
	uv_close((uv_handle_t *)&c->timer, on_closed);
}

static void on_timer(uv_timer_t *t)
{
	gun_conn *c = t->data;
	if (!c->ready && !c->server)
		die(c, msgs[M_NO_SETTINGS]);
	else if (c->n_streams == 0 && c->n_opens == 0)
		die(c, msgs[M_CONN_CLOSED]);
	service(c);
}

static void open_done(gopen *o, const connect_result *r);

/* What each stream has to tell its endpoint, then the opens, then output. */
static void tell(gstream *s)
{
	if (!s->ep_closed)
		chan_queue_tell(&s->wq, s->ch.ep);
	if (s->ep_closed)
		return;
	if (s->failed) {
		if (!s->fail_told) {
			s->fail_told = true;
			endpoint_chan_fail(s->ch.ep, s->why);
		}
		return;
	}
	size_t was = s->rx_len;
	while (s->want && s->rx_len && !s->ep_closed) {
		size_t k = endpoint_chan_input(s->ch.ep, s->rx, s->rx_len);
		if (k == 0)
			break;
		memmove(s->rx, s->rx + k, s->rx_len - k);
		s->rx_len -= k;
	}
	if (!s->c->dead && s->rx_len < was)
		give_back(s, s->rx_len ? was - s->rx_len : s->unconsumed);
	if (s->ep_closed)
		return;
	/* the end is a read's result, as a socket's EOF: only while reading */
	if (s->peer_end && s->rx_len == 0 && !s->eof_told && s->want) {
		s->eof_told = true;
		endpoint_chan_eof(s->ch.ep);
	}
	if (s->ep_closed)
		return;
	if (s->shut_sent && !s->shut_told) {
		s->shut_told = true;
		endpoint_chan_shut(s->ch.ep);
	}
}

static void start_opens(gun_conn *c);

static void service(gun_conn *c)
{
	if (c->freed || c->servicing)
		return;
	c->servicing = true;
	for (list_node *n = c->streams.head; n; n = n->next) {
		gstream *s = LIST_ENTRY(n, gstream, node);
		if (s->to_accept && !c->dead) {
			s->to_accept = false;
			s->ep_closed = false;
			endpoint *ep = endpoint_new_chan(c->w, &s->ch, NULL, NULL, NULL);
			if (ep)
				c->scfg.accept(c->scfg.ud, ep);
			/* NULL: ch_close ran, the stream is reset */
		}
		tell(s);
	}
	if (!c->server)
		start_opens(c);
	send_out(c);
	for (list_node *n = c->streams.head, *next; n; n = next) {
		next = n->next;
		gstream *s = LIST_ENTRY(n, gstream, node);
		if (s->ep_closed && !s->to_accept && (s->h2_closed || c->dead || s->refused))
			stream_free(s);
	}
	c->servicing = false;
	if (c->dead) {
		/* the waiting opens fail; the streams end as their owners close */
		while (c->opens.head)
			open_done(LIST_ENTRY(c->opens.head, gopen, node),
			          &(connect_result){.err = PROTO_DIAL_GENERAL, .msg = c->why});
		if (c->n_streams == 0)
			conn_free(c);
		return;
	}
	if (c->n_streams == 0 && c->n_opens == 0 && c->ready &&
	    !uv_is_active((uv_handle_t *)&c->timer))
		uv_timer_start(&c->timer, on_timer, c->idle_ms, 0);
	else if ((c->n_streams || c->n_opens) && c->ready)
		uv_timer_stop(&c->timer);
}

static gun_conn *conn_new(worker *w, bool server, const char *service_name)
{
	gun_conn *c = calloc(1, sizeof *c);
	nghttp2_session_callbacks *cb = NULL;
	nghttp2_option *opt = NULL;
	if (!c)
		return NULL;
	size_t n = strlen(service_name) + 6;
	c->w = w;
	c->server = server;
	c->idle_ms = GUN_IDLE_MS;
	if (!(c->path = malloc(n)) || nghttp2_session_callbacks_new(&cb) ||
	    nghttp2_option_new(&opt))
		goto fail;
	snprintf(c->path, n, "/%s/Tun", service_name);
	nghttp2_option_set_no_auto_window_update(opt, 1);
	for (unsigned t = 0xa; t <= 0xff; t++) /* RFC 9113 5.5: extensions, ignored */
		nghttp2_option_set_user_recv_extension_type(opt, (uint8_t)t);
	nghttp2_session_callbacks_set_on_begin_frame_callback(cb, on_begin_frame);
	nghttp2_session_callbacks_set_unpack_extension_callback(cb, unpack_extension);
	nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
	nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
	nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
	int rv = server ? nghttp2_session_server_new2(&c->h2, cb, c, opt)
	                : nghttp2_session_client_new2(&c->h2, cb, c, opt);
	nghttp2_session_callbacks_del(cb);
	nghttp2_option_del(opt);
	cb = NULL;
	opt = NULL;
	if (rv)
		goto fail;
	nghttp2_settings_entry iv[] = {
		{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, GUN_STREAM_WINDOW},
		{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, server ? GUN_SERVER_STREAMS : 100},
	};
	if (nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, iv, 2) ||
	    nghttp2_session_set_local_window_size(c->h2, NGHTTP2_FLAG_NONE, 0, GUN_CONN_WINDOW))
		goto fail;
	uv_idle_init(worker_loop(w), &c->kick);
	uv_timer_init(worker_loop(w), &c->timer);
	c->kick.data = c;
	c->timer.data = c;
	c->handles = 2;
	list_push_back(server ? &servers : &clients, &c->reg);
	return c;
fail:
	nghttp2_session_callbacks_del(cb);
	nghttp2_option_del(opt);
	nghttp2_session_del(c->h2);
	free(c->path);
	free(c);
	return NULL;
}

/* ---- server ---- */

int gun_serve(worker *w, endpoint *below, const gun_server_config *cfg)
{
	gun_conn *c = conn_new(w, true, cfg->service);
	if (!c) {
		endpoint_close(below, false);
		if (cfg->release)
			cfg->release(cfg->ud);
		return -1;
	}
	c->scfg = *cfg;
	c->scfg.service = NULL;
	c->below = below;
	if (endpoint_peername(below, &c->peer))
		c->peer.ss_family = 0; /* not counted: as the connection's guard */
	c->ready = true;
	endpoint_set_events(below, &below_events, c);
	endpoint_want_read(below, true);
	uv_timer_start(&c->timer, on_timer, cfg->handshake_ms ? cfg->handshake_ms : GUN_IDLE_MS, 0);
	kick(c); /* the SETTINGS go out */
	return 0;
}

/* ---- client ---- */

static void open_events_progress(void *ud);
static void open_events_error(void *ud, const char *why);

static const endpoint_events open_events = {
	.on_readable = open_events_progress,
	.on_writable = open_events_progress,
	.on_error = open_events_error,
};

static void open_done(gopen *o, const connect_result *r)
{
	gun_conn *c = o->c;
	if (o->node.prev || c->opens.head == &o->node) {
		list_remove(&c->opens, &o->node);
		c->n_opens--;
	}
	stack_free(o->st);
	endpoint *ep = o->ep;
	if (r && r->ok) {
		endpoint_set_events(ep, NULL, NULL);
		o->cb(&(connect_result){.ok = true, .ep = ep}, o->data);
	} else {
		if (ep)
			endpoint_close(ep, false);
		if (r)
			o->cb(r, o->data);
	}
	free(o);
	kick(c);
}

static void open_events_progress(void *ud)
{
	gopen *o = ud;
	if (endpoint_ready(o->ep))
		open_done(o, &(connect_result){.ok = true});
}

static void open_events_error(void *ud, const char *why)
{
	open_done(ud, &(connect_result){.err = PROTO_DIAL_GENERAL, .msg = why});
}

static void open_cancel(connect_pending *p) { open_done((gopen *)p, NULL); }

/* Streams for the opens waiting, once the server's SETTINGS came. */
static void start_opens(gun_conn *c)
{
	if (!c->ready || c->dead)
		return;
	for (list_node *n = c->opens.head, *next; n; n = next) {
		next = n->next;
		gopen *o = LIST_ENTRY(n, gopen, node);
		if (o->ep)
			continue;
		gstream *s = stream_new(c);
		const nghttp2_nv nv[] = {
			NV(":method", "POST"),
			NV(":scheme", c->tls ? "https" : "http"),
			NV(":path", c->path),
			NV(":authority", c->host),
			NV("content-type", "application/grpc"),
			NV("te", "trailers"),
		};
		nghttp2_data_provider src = {.source.ptr = s, .read_callback = read_source};
		int32_t id = s ? nghttp2_submit_request(c->h2, NULL, nv, sizeof nv / sizeof nv[0], &src,
		                                        s)
		               : NGHTTP2_ERR_NOMEM;
		if (id < 0) {
			if (s)
				stream_free(s);
			char t[WHY_MAX];
			snprintf(t, sizeof t, msgs[M_HTTP2], nghttp2_strerror(id));
			open_done(o, &(connect_result){.err = PROTO_DIAL_GENERAL, .msg = t});
			continue;
		}
		s->id = id;
		o->ep = endpoint_new_chan(c->w, &s->ch, NULL, &open_events, o);
		stack *st = o->st;
		o->st = NULL;
		if (!o->ep) {
			stack_free(st);
			open_done(o, &(connect_result){.err = PROTO_DIAL_GENERAL, .msg = msgs[M_NOMEM]});
			continue;
		}
		endpoint_set_origin(o->ep, c->origin);
		if (endpoint_start(o->ep, st) < 0) {
			open_done(o, &(connect_result){.err = PROTO_DIAL_GENERAL,
			                               .msg = endpoint_error(o->ep)});
			continue;
		}
		endpoint_want_read(o->ep, true);
	}
}

static void on_dialled(const connect_result *r, void *data)
{
	gun_conn *c = data;
	c->dial = NULL;
	if (!r->ok) {
		die(c, r->msg ? r->msg : msgs[M_CONN_CLOSED]);
		/* the opens take the dial's own text */
		while (c->opens.head)
			open_done(LIST_ENTRY(c->opens.head, gopen, node), r);
		service(c);
		return;
	}
	c->below = r->ep;
	endpoint_set_events(c->below, &below_events, c);
	endpoint_want_read(c->below, true);
	uv_timer_start(&c->timer, on_timer, DIAL_HANDSHAKE_MS, 0);
	service(c);
}

/* A client connection of this worker that takes one more flow. */
static gun_conn *find(uint64_t origin)
{
	for (list_node *n = clients.head; n; n = n->next) {
		gun_conn *c = LIST_ENTRY(n, gun_conn, reg);
		if (c->origin != origin || c->dead || c->goaway || c->freed)
			continue;
		size_t busy = c->n_streams + c->n_opens;
		uint32_t max = c->ready ? nghttp2_session_get_remote_settings(
		                              c->h2, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS)
		                        : GUN_STREAMS_MAX;
		if (busy < GUN_STREAMS_MAX && busy < max)
			return c;
	}
	return NULL;
}

static gun_conn *dial(worker *w, dns_resolver *dns, const gun_client_config *cfg)
{
	gun_conn *c = conn_new(w, false, cfg->service);
	if (!c || !(c->host = strdup(cfg->host)))
		goto fail;
	c->origin = cfg->origin;
	c->tls = cfg->tls != NULL;
	if (cfg->tls) {
		char err[256];
		stack *st = stack_new();
		layer *l = st ? tls_client_new(cfg->tls, cfg->tls_name, err, sizeof err) : NULL;
		if (!l || stack_push(st, l)) {
			stack_free(st);
			goto fail;
		}
		c->dial = dial_stream(w, dns, &cfg->server, cfg->af, cfg->origin, st, on_dialled, c);
	} else {
		c->dial = dial_tcp(w, dns, &cfg->server, cfg->af, false, cfg->origin, on_dialled, c);
	}
	if (!c->dial)
		goto fail;
	return c;
fail:
	if (c) {
		c->dead = true;
		conn_free(c);
	}
	return NULL;
}

connect_pending *gun_open(worker *w, dns_resolver *dns, const gun_client_config *cfg, stack *st,
                          connect_cb cb, void *data)
{
	gopen *o = calloc(1, sizeof *o);
	gun_conn *c = o ? find(cfg->origin) : NULL;
	if (o && !c)
		c = dial(w, dns, cfg);
	if (!c) {
		free(o);
		stack_free(st);
		return NULL;
	}
	*o = (gopen){.base.cancel = open_cancel, .c = c, .st = st, .cb = cb, .data = data};
	list_push_back(&c->opens, &o->node);
	c->n_opens++;
	kick(c);
	return &o->base;
}

void gun_close_all(worker *w)
{
	(void)w;
	list *all[] = {&clients, &servers};
	for (int i = 0; i < 2; i++)
		for (list_node *n = all[i]->head; n; n = n->next) {
			gun_conn *c = LIST_ENTRY(n, gun_conn, reg);
			die(c, msgs[M_CONN_CLOSED]);
		}
}

size_t gun_server_count(worker *w)
{
	(void)w;
	size_t n = 0;
	for (const list_node *i = servers.head; i; i = i->next)
		n++;
	return n;
}
