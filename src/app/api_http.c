/* api_http.c - the [api] listen server: accepts, bounds and times out connections, reads request heads with proto/http_parse and Content-Length bodies, answers through app/api, and runs its streams (WebSocket with wslay, or chunked HTTP). */
#include "app/api_http.h"
#include "app/api_engine.h"
#include "app/api_logtap.h"
#include "app/api_probe.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include "crypto/ossl.h"
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <wslay/wslay.h>

#include "base/log.h"
#include "proto/http_parse.h"

static const char *const msgs[API_HTTP_MSG_COUNT_] = {
	[API_HTTP_SERVING] = "api: serving http://%s",
	[API_HTTP_LISTEN] = "api: cannot listen on %s: %s",
	[API_HTTP_NOMEM] = "api: out of memory",
	[API_HTTP_FULL] = "api: %d connections open, closing the oldest idle one or the new one",
	[API_HTTP_REQUEST] = "api: %.*s %.*s: %d",
	[API_HTTP_KEEP_SECRET] = ("reload: [api] secret removed while the API listens on %s, "
	                          "which is not loopback; the old secret stays until the next start"),
	[API_HTTP_NOT_READING] = ("api: a WebSocket client sends pings and does not read the answers "
	                          "(%d pongs waiting); closing it"),
};

const char *api_http_message(api_http_msg m)
{
	return (unsigned)m < API_HTTP_MSG_COUNT_ ? msgs[m] : "";
}

/* A client's WebSocket message longer than this closes the connection
 * (1009, RFC 6455 7.4.1): the streams take no commands, so nothing a
 * dashboard sends comes near it, and wslay would buffer a whole one. */
#define API_WS_MSG_MAX 4096

/* A ping that arrives while this many pongs wait to be written (in wslay's
 * queue or in ours) closes the connection: a client that pings and does
 * not read would otherwise grow the write queue without bound (issue 32
 * D1). The same number as the data path's WS_CONTROL_QUEUE_MAX; a client
 * that pings and reads the pong before the next has at most one waiting,
 * and 16 in one read is no keep-alive. */
#define API_WS_PONGS_MAX 16

/* What a WebSocket connection may queue past API_SENDQ_MAX, where stream
 * messages stop: API_WS_PONGS_MAX pongs and a close frame (a header and at
 * most 125 bytes each, two writes with their bookkeeping), and the frame
 * header and bookkeeping of the last stream message. A write past it
 * closes the connection, so nothing a client does grows the queue. */
#define API_WS_CTL_ROOM (16u << 10)

/* RFC 6455 1.3: the GUID a Sec-WebSocket-Key is hashed with. */
static const char WS_GUID[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/* Sent with every answer: dashboards run in a browser on another origin
 * (Fetch standard, CORS protocol); Private-Network lets a page on a public
 * origin reach a loopback API in Chrome (Private Network Access). */
static const char CORS[] = "Access-Control-Allow-Origin: *\r\n"
			   "Access-Control-Allow-Methods: GET, POST, PUT, PATCH, DELETE\r\n"
			   "Access-Control-Allow-Headers: Authorization, Content-Type\r\n"
			   "Access-Control-Allow-Private-Network: true\r\n";

/* A request buffer starts this big and doubles up to a head and a body. */
#define IN_START 4096
#define IN_MAX (HTTP_HEAD_MAX + API_BODY_MAX)

/* After a last answer the write side is shut and what still arrives is
 * read and dropped for at most this long, so that closing with unread
 * bytes does not send an RST over the answer (RFC 9112 9.6). */
#define API_LINGER_MS 2000

typedef struct aconn aconn;

typedef enum { C_HTTP, C_WS, C_CHUNKED } conn_mode;

struct api_http {
	uv_tcp_t listener;
	uv_loop_t *loop;
	api_view view;
	api_provider prov;
	api_http_conf conf;
	char *listen; /* owned copy of conf.listen */
	uint64_t refused;
	int n_conns, n_probes;
	int open; /* the listener, the log handle, every connection: freed at 0 */
	aconn *conns;
	uv_async_t log_async;
};

struct aconn {
	uv_tcp_t tcp;
	uv_timer_t timer; /* idle, linger, or a stream's period */
	api_http *a;
	aconn *prev, *next;
	conn_mode mode;
	api_action stream;
	int log_level;
	uint32_t interval_ms;
	uint64_t last_up, last_down; /* /traffic: the totals a second ago */
	wslay_event_context_ptr ws;
	api_probe *probe; /* a delay test this connection waits for */
	bool closing, close_after, lingering, head_only;
	bool ws_done;  /* the close handshake is over: close once written */
	bool closed;   /* /connections: the ended flows */
	bool ws_over;  /* API_WS_PONGS_MAX passed: wslay reads no more */
	int pongs;     /* WebSocket: pings since no pong last waited */
	int writing;   /* writes in flight */
	size_t queued; /* their bytes and their wreq bookkeeping */
	int handles;
	uv_shutdown_t shut;
	uint8_t *in; /* owned */
	size_t len, cap, scan;
	size_t ws_off; /* WebSocket: bytes of in that wslay has taken */
};

typedef struct wreq {
	uv_write_t req;
	aconn *c;
	size_t len;
	char data[];
} wreq;

/* ---------------------------------------------------------------- lifetimes */

static void server_unref(api_http *a)
{
	if (--a->open > 0)
		return;
	api_view_free(&a->view);
	free(a->listen);
	free(a);
}

static void conn_freed(uv_handle_t *h)
{
	aconn *c = h->data;
	if (--c->handles > 0)
		return;
	api_http *a = c->a;
	if (c->ws)
		wslay_event_context_free(c->ws);
	free(c->in);
	free(c);
	server_unref(a);
}

static void conn_close(aconn *c)
{
	if (c->closing)
		return;
	c->closing = true;
	api_http *a = c->a;
	if (c->prev)
		c->prev->next = c->next;
	else
		a->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	a->n_conns--;
	if (c->stream == API_STREAM_LOGS && c->mode != C_HTTP)
		api_logtap_unsubscribe();
	if (c->probe) {
		api_probe_cancel(c->probe);
		c->probe = NULL;
		a->n_probes--;
	}
	c->handles = 2;
	uv_close((uv_handle_t *)&c->tcp, conn_freed);
	uv_close((uv_handle_t *)&c->timer, conn_freed);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);
static void process(aconn *c);

static void on_idle(uv_timer_t *t) { conn_close(t->data); }

static void on_shut(uv_shutdown_t *req, int status)
{
	(void)req;
	(void)status;
}

static void linger(aconn *c)
{
	c->lingering = true;
	c->len = 0;
	c->shut.data = c;
	if (uv_shutdown(&c->shut, (uv_stream_t *)&c->tcp, on_shut) ||
	    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read)) {
		conn_close(c);
		return;
	}
	uv_timer_start(&c->timer, on_idle, API_LINGER_MS, 0);
}

/* ---------------------------------------------------------------- writing */

static void on_written(uv_write_t *req, int status)
{
	wreq *w = req->data;
	aconn *c = w->c;
	c->writing--;
	c->queued -= sizeof *w + w->len;
	free(w);
	if (c->closing)
		return;
	if (status < 0 || (c->ws_done && !c->writing)) {
		conn_close(c);
		return;
	}
	if (c->mode != C_HTTP || c->writing)
		return;
	if (c->close_after) {
		linger(c);
		return;
	}
	if (c->probe)
		return;
	uv_timer_start(&c->timer, on_idle, API_IDLE_MS, 0);
	if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read))
		conn_close(c);
	else
		process(c); /* a request that came with the last one */
}

/* Queues pieces[0, n) as one write. 0, or -1 (the connection is closed). */
static int send_pieces(aconn *c, const uv_buf_t *pieces, size_t n)
{
	size_t len = 0;
	for (size_t i = 0; i < n; i++)
		len += pieces[i].len;
	wreq *w = malloc(sizeof *w + len);
	if (!w) {
		conn_close(c);
		return -1;
	}
	w->c = c;
	w->len = len;
	w->req.data = w;
	for (size_t i = 0, o = 0; i < n; o += pieces[i].len, i++)
		if (pieces[i].len) /* an empty body's base may be NULL */
			memcpy(w->data + o, pieces[i].base, pieces[i].len);
	uv_buf_t b = uv_buf_init(w->data, (unsigned)len);
	if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_written)) {
		free(w);
		conn_close(c);
		return -1;
	}
	c->writing++;
	c->queued += sizeof *w + len;
	return 0;
}

/* Writes one answer; with close_after the connection ends after it. */
static void answer(aconn *c, int status, const char *allow, bool text, bool close_after,
                   const char *body, size_t body_len)
{
	char h[1024];
	bool empty = status == 204 || status == 101;
	int n = snprintf(h, sizeof h, "HTTP/1.1 %d %s\r\n%s%s%s%s%s%s", status, api_reason(status),
	                 empty  ? ""
	                 : text ? "Content-Type: " METRICS_CONTENT_TYPE "\r\n"
	                        : "Content-Type: application/json\r\n",
	                 CORS, allow ? "Allow: " : "", allow ? allow : "", allow ? "\r\n" : "",
	                 close_after ? "Connection: close\r\n" : "");
	if (n < 0 || (size_t)n >= sizeof h - 64) {
		conn_close(c);
		return;
	}
	if (!empty)
		n += snprintf(h + n, sizeof h - (size_t)n, "Content-Length: %zu\r\n", body_len);
	n += snprintf(h + n, sizeof h - (size_t)n, "\r\n");
	c->close_after = close_after;
	uv_read_stop((uv_stream_t *)&c->tcp);
	uv_timer_stop(&c->timer);
	uv_buf_t p[2] = {uv_buf_init(h, (unsigned)n),
	                 uv_buf_init((char *)body, c->head_only || empty ? 0 : (unsigned)body_len)};
	(void)send_pieces(c, p, 2);
}

static void answer_msg(aconn *c, int status, api_msg m, bool close_after)
{
	api_buf b = {0};
	if (api_render_message(api_message(m), &b)) {
		metrics_buf_free(&b);
		conn_close(c);
		return;
	}
	answer(c, status, NULL, false, close_after, b.p, b.len);
	metrics_buf_free(&b);
}

/* One message of a stream: a WebSocket text frame or an HTTP chunk (a
 * JSON text and a newline, as Clash writes them). Dropped when the
 * connection has API_SENDQ_MAX queued. */
static void stream_send(aconn *c, const char *s, size_t n)
{
	if (c->closing || c->queued + n > API_SENDQ_MAX)
		return;
	if (c->mode == C_WS) {
		struct wslay_event_msg m = {
			.opcode = WSLAY_TEXT_FRAME, .msg = (const uint8_t *)s, .msg_length = n};
		if (wslay_event_queue_msg(c->ws, &m) || wslay_event_send(c->ws))
			conn_close(c);
		return;
	}
	char size[24];
	int k = snprintf(size, sizeof size, "%zx\r\n", n + 1);
	uv_buf_t p[3] = {uv_buf_init(size, (unsigned)k), uv_buf_init((char *)s, (unsigned)n),
	                 uv_buf_init("\n\r\n", 3)};
	(void)send_pieces(c, p, 3);
}

/* ---------------------------------------------------------------- the log tap */

static void on_log_lines(uv_async_t *h)
{
	api_http *a = h->data;
	int level;
	size_t len;
	char text[API_LOG_LINE_MAX];
	while (api_logtap_pop(&level, text, &len)) {
		api_buf b = {0};
		if (api_render_log(level, text, len, &b) == 0)
			for (aconn *c = a->conns, *next; c; c = next) {
				next = c->next;
				if (c->stream == API_STREAM_LOGS && c->mode != C_HTTP &&
				    level <= c->log_level)
					stream_send(c, b.p, b.len);
			}
		metrics_buf_free(&b);
	}
}

/* ---------------------------------------------------------------- streams */

static void on_tick(uv_timer_t *t)
{
	aconn *c = t->data;
	api_http *a = c->a;
	api_buf b = {0};
	int rc;
	if (c->stream == API_STREAM_TRAFFIC) {
		uint64_t up = 0, down = 0;
		a->prov.traffic(a->prov.ctx, &up, &down);
		rc = api_render_traffic(up - c->last_up, down - c->last_down, &b);
		c->last_up = up;
		c->last_down = down;
	} else if (c->stream == API_STREAM_MEMORY) {
		rc = api_render_memory(a->prov.memory(a->prov.ctx), &b);
	} else {
		rc = api_render_connections(&a->view, &a->prov, c->closed, &b);
	}
	if (rc == 0)
		stream_send(c, b.p, b.len);
	metrics_buf_free(&b);
}

static void stream_start(aconn *c, const api_response *r)
{
	api_http *a = c->a;
	c->stream = r->action;
	c->log_level = r->log_level;
	c->interval_ms = r->interval_ms;
	c->closed = r->closed;
	uv_timer_stop(&c->timer);
	if (r->action == API_STREAM_LOGS) {
		api_logtap_subscribe();
		return;
	}
	if (r->action == API_STREAM_TRAFFIC)
		a->prov.traffic(a->prov.ctx, &c->last_up, &c->last_down);
	/* the lists and the memory at once, as mihomo; traffic once there is
	 * a second to measure */
	uv_timer_start(&c->timer, on_tick, r->action == API_STREAM_TRAFFIC ? c->interval_ms : 0,
	               c->interval_ms);
}

static ssize_t ws_recv(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, int flags, void *user)
{
	(void)flags;
	aconn *c = user;
	size_t have = c->len - c->ws_off;
	if (c->ws_over) {
		wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
		return -1;
	}
	if (have == 0) {
		wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
		return -1;
	}
	if (len > have)
		len = have;
	memcpy(buf, c->in + c->ws_off, len);
	c->ws_off += len;
	return (ssize_t)len;
}

static ssize_t ws_send(wslay_event_context_ptr ctx, const uint8_t *data, size_t len, int flags,
                       void *user)
{
	(void)flags;
	aconn *c = user;
	uv_buf_t p = uv_buf_init((char *)data, (unsigned)len);
	if (c->closing || c->queued + sizeof(wreq) + len > API_SENDQ_MAX + API_WS_CTL_ROOM ||
	    send_pieces(c, &p, 1)) {
		wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
		return -1;
	}
	return (ssize_t)len;
}

/* Counts the pongs a ping makes wait. With nothing queued in wslay nor
 * in libuv (every earlier pong is in the kernel) none waits; otherwise
 * the count goes on, and past API_WS_PONGS_MAX wslay's next read fails,
 * before this ping's pong is queued. */
static void ws_frame_start(wslay_event_context_ptr ctx,
                           const struct wslay_event_on_frame_recv_start_arg *arg, void *user)
{
	aconn *c = user;
	if (arg->opcode != WSLAY_PING || c->ws_over)
		return;
	if (wslay_event_get_queued_msg_count(ctx) == 0 &&
	    uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) == 0)
		c->pongs = 0;
	if (c->pongs++ >= API_WS_PONGS_MAX) {
		c->ws_over = true;
		log_debug("app", msgs[API_HTTP_NOT_READING], API_WS_PONGS_MAX);
	}
}

/* A client's messages are not commands here: the close frame wslay
 * answers itself, the rest is ignored. */
static void ws_msg(wslay_event_context_ptr ctx, const struct wslay_event_on_msg_recv_arg *arg,
                   void *user)
{
	(void)ctx;
	(void)arg;
	(void)user;
}

static const struct wslay_event_callbacks WS_CALLBACKS = {
	.recv_callback = ws_recv,
	.send_callback = ws_send,
	.on_frame_recv_start_callback = ws_frame_start,
	.on_msg_recv_callback = ws_msg,
};

/* The bytes read on a WebSocket go through wslay. */
static void ws_feed(aconn *c)
{
	if (wslay_event_recv(c->ws) || c->ws_over || wslay_event_send(c->ws)) {
		conn_close(c);
		return;
	}
	c->len = c->ws_off = 0;
	/* after the close frames (RFC 6455 5.5.1) the connection goes once
	 * its last bytes are written */
	if (!wslay_event_want_read(c->ws) && !wslay_event_want_write(c->ws)) {
		c->ws_done = true;
		if (!c->writing)
			conn_close(c);
	}
}

/* Sec-WebSocket-Accept (RFC 6455 4.2.2 item 5.4). */
static void ws_accept(const uint8_t *key, size_t n, char out[32])
{
	uint8_t in[128 + sizeof WS_GUID], md[SHA_DIGEST_LENGTH];
	memcpy(in, key, n);
	memcpy(in + n, WS_GUID, sizeof WS_GUID - 1);
	SHA1(in, n + sizeof WS_GUID - 1, md);
	EVP_EncodeBlock((unsigned char *)out, md, sizeof md);
}

/* ---------------------------------------------------------------- delay probes */

static void on_probe_done(void *arg, int64_t result)
{
	aconn *c = arg;
	c->probe = NULL;
	c->a->n_probes--;
	int status;
	api_buf b = {0};
	if (api_render_delay(result, &status, &b))
		conn_close(c);
	else
		answer(c, status, NULL, false, c->close_after, b.p, b.len);
	metrics_buf_free(&b);
}

static void probe_start(aconn *c, const api_response *r)
{
	api_http *a = c->a;
	if (a->n_probes >= API_PROBES_MAX) {
		answer_msg(c, 503, API_M_BUSY, c->close_after);
		return;
	}
	c->probe = api_probe_start(a->loop, r->host, r->port, r->timeout_ms, on_probe_done, c);
	if (!c->probe) {
		answer_msg(c, 500, API_M_NOMEM, true);
		return;
	}
	a->n_probes++;
	uv_read_stop((uv_stream_t *)&c->tcp);
	uv_timer_stop(&c->timer);
}

/* ---------------------------------------------------------------- requests */

static const http_field *field(const uint8_t *in, const http_head *h, const char *lower)
{
	for (size_t i = 0; i < h->n_fields; i++)
		if (http_eq_nocase(in + h->fields[i].name.off, h->fields[i].name.len, lower))
			return &h->fields[i];
	return NULL;
}

/* Whether a comma list field holds token (case-insensitive). */
static bool lists(const uint8_t *in, const http_head *h, const char *name, const char *token)
{
	for (size_t i = 0; i < h->n_fields; i++) {
		const http_field *f = &h->fields[i];
		if (!http_eq_nocase(in + f->name.off, f->name.len, name))
			continue;
		size_t pos = 0, el;
		const uint8_t *e;
		while (http_list_next(in + f->value.off, f->value.len, &pos, &e, &el))
			if (http_eq_nocase(e, el, token))
				return true;
	}
	return false;
}

/* Answers the request at the start of c->in, once it and its body have
 * arrived. */
static void process(aconn *c)
{
	if (c->writing || c->closing || c->probe || c->mode != C_HTTP || c->len == 0)
		return;
	http_head h;
	ssize_t r = http_parse_request(c->in, c->len, &c->scan, &h);
	if (r == 0) {
		if (c->len >= HTTP_HEAD_MAX)
			answer_msg(c, 431, API_M_HEAD_TOO_LARGE, true);
		return;
	}
	if (r < 0) {
		answer_msg(c,
		           r == HTTP_PARSE_TOO_BIG || r == HTTP_PARSE_TOO_MANY ? 431
		           : r == HTTP_PARSE_VERSION                           ? 505
		                                                               : 400,
		           r == HTTP_PARSE_TOO_BIG || r == HTTP_PARSE_TOO_MANY
		                   ? API_M_HEAD_TOO_LARGE
		           : r == HTTP_PARSE_VERSION ? API_M_VERSION
		                                     : API_M_BAD_REQUEST,
		           true);
		return;
	}
	http_meta meta;
	http_meta_read(c->in, &h, &meta);
	if (meta.cl_bad || meta.has_te) {
		/* bodies are Content-Length only: a chunked one is not read, so
		 * the connection cannot go on */
		answer_msg(c, 400, API_M_BAD_REQUEST, true);
		return;
	}
	if (meta.has_cl && meta.cl > API_BODY_MAX) {
		answer_msg(c, 413, API_M_TOO_LARGE, true);
		return;
	}
	size_t body = meta.has_cl ? (size_t)meta.cl : 0;
	if (c->len - (size_t)r < body)
		return; /* the body is still coming */
	bool keep = h.minor >= 1 ? !meta.conn_close : meta.conn_keep && !meta.conn_close;
	const http_field *auth = field(c->in, &h, "authorization");
	const http_field *key = field(c->in, &h, "sec-websocket-key");
	const http_field *ver = field(c->in, &h, "sec-websocket-version");
	bool websocket = lists(c->in, &h, "upgrade", "websocket") &&
	                 lists(c->in, &h, "connection", "upgrade") && key && key->value.len > 0 &&
	                 key->value.len <= 128 && ver &&
	                 http_eq_nocase(c->in + ver->value.off, ver->value.len, "13");
	api_request rq = {
		.method = (const char *)c->in + h.method.off,
		.method_len = h.method.len,
		.target = (const char *)c->in + h.target.off,
		.target_len = h.target.len,
		.auth = auth ? (const char *)c->in + auth->value.off : NULL,
		.auth_len = auth ? auth->value.len : 0,
		.websocket = websocket,
		.body = (const char *)c->in + r,
		.body_len = body,
	};
	c->head_only = h.method.len == 4 && memcmp(c->in + h.method.off, "HEAD", 4) == 0;
	char accept[32] = "";
	if (websocket)
		ws_accept(c->in + key->value.off, key->value.len, accept);
	api_response resp;
	int rc = api_handle(&c->a->view, &c->a->prov, &rq, &resp);
	if (rc == 0 && log_get_level() >= LOG_LEVEL_DEBUG) {
		/* the path without the query, which may carry the token */
		const char *qm = memchr(rq.target, '?', rq.target_len);
		int pl = (int)(qm ? (size_t)(qm - rq.target) : rq.target_len);
		log_debug("app", msgs[API_HTTP_REQUEST], (int)rq.method_len, rq.method, pl,
		          rq.target, resp.status);
	}
	/* the spans are not used past this point: the next request's bytes
	 * move to the front */
	size_t used = (size_t)r + body;
	memmove(c->in, c->in + used, c->len - used);
	c->len -= used;
	c->scan = 0;
	if (rc) {
		answer_msg(c, 500, API_M_NOMEM, true);
		return;
	}
	if (resp.action == API_DELAY) {
		c->close_after = !keep;
		probe_start(c, &resp);
	} else if (resp.action != API_ANSWER && resp.websocket) {
		char hs[256];
		int n = snprintf(hs, sizeof hs,
		                 "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
		                 "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
		                 accept);
		if (wslay_event_context_server_init(&c->ws, &WS_CALLBACKS, c)) {
			conn_close(c);
		} else {
			wslay_event_config_set_max_recv_msg_length(c->ws, API_WS_MSG_MAX);
			uv_buf_t p = uv_buf_init(hs, (unsigned)n);
			c->mode = C_WS;
			if (send_pieces(c, &p, 1) == 0) {
				stream_start(c, &resp);
				ws_feed(c); /* frames that came with the handshake */
			}
		}
	} else if (resp.action != API_ANSWER) {
		char hs[512];
		int n = snprintf(hs, sizeof hs,
		                 "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n%s"
		                 "Transfer-Encoding: chunked\r\n\r\n",
		                 CORS);
		uv_buf_t p = uv_buf_init(hs, (unsigned)n);
		c->mode = C_CHUNKED;
		c->len = 0;
		if (send_pieces(c, &p, 1) == 0)
			stream_start(c, &resp);
	} else {
		answer(c, resp.status, resp.allow, resp.text, !keep, resp.body.p, resp.body.len);
	}
	api_response_free(&resp);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	(void)suggested;
	aconn *c = h->data;
	if (c->cap - c->len < IN_START / 2 && c->cap < IN_MAX) {
		size_t cap = c->cap ? c->cap * 2 : IN_START;
		if (cap > IN_MAX)
			cap = IN_MAX;
		uint8_t *p = realloc(c->in, cap);
		if (p) {
			c->in = p;
			c->cap = cap;
		}
	}
	buf->base = (char *)c->in + c->len;
	buf->len = c->cap - c->len;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	(void)buf;
	aconn *c = s->data;
	if (nread < 0 || (nread == 0 && c->cap == c->len)) {
		conn_close(c);
		return;
	}
	if (nread == 0 || c->lingering)
		return; /* lingering: dropped, the buffer is reused from its start */
	c->len += (size_t)nread;
	if (c->mode == C_WS) {
		ws_feed(c);
		return;
	}
	if (c->mode == C_CHUNKED) {
		c->len = 0; /* a chunked stream's client has nothing more to say */
		return;
	}
	uv_timer_start(&c->timer, on_idle, API_IDLE_MS, 0);
	process(c);
}

static void on_refused_closed(uv_handle_t *h) { free(h); }

static void on_connection(uv_stream_t *l, int status)
{
	api_http *a = l->data;
	if (status < 0)
		return;
	if (a->n_conns >= API_CONNS_MAX) {
		/* the oldest idle connection makes room, so that a flood of idle
		 * ones cannot lock a dashboard out; with none idle (all streams,
		 * answers or probes) the new one goes */
		aconn *idle = NULL;
		for (aconn *c = a->conns; c; c = c->next)
			if (c->mode == C_HTTP && !c->writing && !c->probe && !c->lingering)
				idle = c; /* the list is newest first: the last is the oldest */
		if (idle) {
			conn_close(idle);
			a->refused++;
			log_debug("app", msgs[API_HTTP_FULL], API_CONNS_MAX);
		}
	}
	if (a->n_conns >= API_CONNS_MAX) {
		uv_tcp_t *t = malloc(sizeof *t);
		if (!t || uv_tcp_init(l->loop, t)) {
			free(t);
			return;
		}
		(void)uv_accept(l, (uv_stream_t *)t);
		uv_close((uv_handle_t *)t, on_refused_closed);
		a->refused++;
		log_debug("app", msgs[API_HTTP_FULL], a->n_conns);
		return;
	}
	aconn *c = calloc(1, sizeof *c);
	if (!c)
		return;
	c->a = a;
	uv_tcp_init(l->loop, &c->tcp);
	uv_timer_init(l->loop, &c->timer);
	c->tcp.data = c->timer.data = c;
	a->open++;
	a->n_conns++;
	c->next = a->conns;
	if (a->conns)
		a->conns->prev = c;
	a->conns = c;
	if (uv_accept(l, (uv_stream_t *)&c->tcp) ||
	    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read)) {
		conn_close(c);
		return;
	}
	uv_timer_start(&c->timer, on_idle, API_IDLE_MS, 0);
}

/* ---------------------------------------------------------------- start, stop */

static void listener_closed(uv_handle_t *h) { server_unref(h->data); }

api_http *api_http_start(uv_loop_t *loop, const api_http_conf *conf, api_view *view, char *err,
                         size_t err_size)
{
	struct sockaddr_storage ss;
	if (etm_listen_addr_parse(conf->listen, &ss)) {
		snprintf(err, err_size, msgs[API_HTTP_LISTEN], conf->listen,
		         uv_strerror(UV_EINVAL));
		return NULL;
	}
	api_http *a = calloc(1, sizeof *a);
	char *listen = strdup(conf->listen);
	if (!a || !listen) {
		free(a);
		free(listen);
		snprintf(err, err_size, "%s", msgs[API_HTTP_NOMEM]);
		return NULL;
	}
	*a = (api_http){.loop = loop, .conf = *conf, .listen = listen, .view = *view, .open = 1};
	*view = (api_view){0};
	a->conf.listen = a->listen;
	api_engine_provider(&a->conf, &a->prov);
	/* SO_REUSEPORT: the new process of a binary upgrade binds the same
	 * address while this one still serves (as app/metrics_http.c) */
	int rc = uv_tcp_init_ex(loop, &a->listener, ss.ss_family);
	if (rc) {
		snprintf(err, err_size, msgs[API_HTTP_LISTEN], conf->listen, uv_strerror(rc));
		api_view_free(&a->view);
		free(a->listen);
		free(a);
		return NULL;
	}
	a->listener.data = a;
	uv_os_fd_t fd;
	int one = 1;
	rc = uv_fileno((uv_handle_t *)&a->listener, &fd);
	if (rc == 0 && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one))
		rc = uv_translate_sys_error(errno);
	if (rc == 0)
		rc = uv_tcp_bind(&a->listener, (const struct sockaddr *)&ss, 0);
	if (rc == 0)
		rc = uv_listen((uv_stream_t *)&a->listener, API_BACKLOG, on_connection);
	if (rc) {
		snprintf(err, err_size, msgs[API_HTTP_LISTEN], conf->listen, uv_strerror(rc));
		uv_close((uv_handle_t *)&a->listener, listener_closed);
		return NULL;
	}
	uv_async_init(loop, &a->log_async, on_log_lines);
	a->log_async.data = a;
	a->open++;
	api_logtap_attach(&a->log_async);
	struct sockaddr_storage bound;
	int blen = sizeof bound;
	char host[64] = "?", text[80];
	if (uv_tcp_getsockname(&a->listener, (struct sockaddr *)&bound, &blen) == 0) {
		if (bound.ss_family == AF_INET6) {
			struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&bound;
			uv_ip6_name(s6, host, sizeof host);
			snprintf(text, sizeof text, "[%s]:%u", host, ntohs(s6->sin6_port));
		} else {
			struct sockaddr_in *s4 = (struct sockaddr_in *)&bound;
			uv_ip4_name(s4, host, sizeof host);
			snprintf(text, sizeof text, "%s:%u", host, ntohs(s4->sin_port));
		}
	} else {
		snprintf(text, sizeof text, "%s", conf->listen);
	}
	log_info("app", msgs[API_HTTP_SERVING], text);
	return a;
}

/* 127.0.0.0/8, ::1 and 127/8 mapped into IPv6 (as etm_spec_check). */
static bool listen_is_loopback(const char *listen)
{
	struct sockaddr_storage ss;
	if (etm_listen_addr_parse(listen, &ss))
		return false;
	if (ss.ss_family == AF_INET)
		return (ntohl(((struct sockaddr_in *)&ss)->sin_addr.s_addr) >> 24) == 127;
	const struct in6_addr *a6 = &((struct sockaddr_in6 *)&ss)->sin6_addr;
	return IN6_IS_ADDR_LOOPBACK(a6) || (IN6_IS_ADDR_V4MAPPED(a6) && a6->s6_addr[12] == 127);
}

void api_http_set_view(api_http *a, api_view *view)
{
	/* a reload may drop the secret together with a move to loopback,
	 * which waits for the next start: until then this address keeps it */
	if (!(view->secret && *view->secret) && a->view.secret && *a->view.secret &&
	    !listen_is_loopback(a->listen)) {
		log_warn("app", msgs[API_HTTP_KEEP_SECRET], a->listen);
		free(view->secret);
		view->secret = a->view.secret;
		a->view.secret = NULL;
	}
	api_view_free(&a->view);
	a->view = *view;
	*view = (api_view){0};
}

static void async_closed(uv_handle_t *h) { server_unref(h->data); }

void api_http_stop(api_http *a)
{
	if (!a)
		return;
	api_logtap_detach();
	while (a->conns)
		conn_close(a->conns);
	uv_close((uv_handle_t *)&a->log_async, async_closed);
	uv_close((uv_handle_t *)&a->listener, listener_closed);
}
