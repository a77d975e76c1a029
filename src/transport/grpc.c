/* grpc.c - the gun layer: an nghttp2 session in memory (mem_recv / mem_send), one stream, Hunk messages both ways. */
#include "transport/grpc.h"

#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
	M_NOMEM,
	M_BAD_SERVICE,
	M_BAD_HOST,
	M_HTTP_STATUS,
	M_GRPC_STATUS,
	M_GRPC_STATUS_MSG,
	M_WRONG_PATH,
	M_BAD_METHOD,
	M_BAD_TYPE,
	M_RESET,
	M_CUT,
	M_HTTP2,
	M_AFTER_SHUTDOWN,
};

static const char *const msgs[] = {
	[M_NOMEM] = "grpc: out of memory",
	[M_BAD_SERVICE] = "grpc: bad service name \"%s\"",
	[M_BAD_HOST] = "grpc: bad host \"%s\"",
	[M_HTTP_STATUS] = "grpc: refused: HTTP status %s",
	[M_GRPC_STATUS] = "grpc: refused: grpc-status %s",
	[M_GRPC_STATUS_MSG] = "grpc: refused: grpc-status %s: %s",
	[M_WRONG_PATH] = "grpc: wrong path \"%s\" (expected \"%s\")",
	[M_BAD_METHOD] = "grpc: bad request: method %s",
	[M_BAD_TYPE] = "grpc: bad request: content-type \"%s\"",
	[M_RESET] = "grpc: the peer reset the stream: %s",
	[M_CUT] = "grpc: the stream ended in the middle of a message",
	[M_HTTP2] = "grpc: http2: %s",
	[M_AFTER_SHUTDOWN] = "grpc: send after shutdown",
};

/* Bytes of framed app data waiting for nghttp2, and of Hunk data waiting
 * for the layer above: each one stack queue's worth. */
#define TX_CAP (32 * 1024)
#define RX_CAP (16 * 1024)

/* Header values kept from a request or a response. */
#define VALUE_MAX 128

typedef struct grpc_layer {
	layer base;
	nghttp2_session *h2;
	bool server;
	char *path;      /* "/<service_name>/Tun" */
	char *authority; /* client */
	bool tls;
	int32_t stream;  /* the flow's stream; 0 before it exists */
	bool is_ready;
	bool peer_ended; /* the peer's END_STREAM came */
	bool app_ended;  /* shutdown ran */
	bool deferred;   /* the data source waits for bytes */
	int fail_next;   /* an error to return from the next call (after the answer) */
	int refused;     /* a refusal answered: fails once the peer closed the stream */
	int err;
	char err_text[200];

	/* Headers of the stream's request (server) or response (client). */
	char h_path[VALUE_MAX], h_method[16], h_type[VALUE_MAX], h_status[8];
	char h_grpc_status[8], h_grpc_message[VALUE_MAX];

	gun_reader rd;
	uint8_t rx[RX_CAP];
	size_t rx_len;
	uint8_t tx[TX_CAP];
	size_t tx_off, tx_len;
	const uint8_t *wire; /* nghttp2's output not yet put down */
	size_t wire_len;
} grpc_layer;

static int set_error(grpc_layer *g, int code, int msg, const char *a, const char *b)
{
	if (!g->err) {
		g->err = code;
		snprintf(g->err_text, sizeof g->err_text, msgs[msg], a ? a : "?", b ? b : "?");
	}
	return code;
}

/* An error whose answer goes out first: returned by the next call. */
static void fail_later(grpc_layer *g, int code, int msg, const char *a, const char *b)
{
	if (g->err || g->fail_next)
		return;
	g->fail_next = code;
	snprintf(g->err_text, sizeof g->err_text, msgs[msg], a ? a : "?", b ? b : "?");
}

static void copy_value(char *to, size_t size, const uint8_t *v, size_t n)
{
	if (n >= size)
		n = size - 1;
	memcpy(to, v, n);
	to[n] = 0;
}

static bool name_is(const uint8_t *name, size_t n, const char *want)
{
	return n == strlen(want) && memcmp(name, want, n) == 0;
}

/* nghttp2 callbacks: they record, the calls below act. */

static ssize_t read_source(nghttp2_session *s, int32_t id, uint8_t *buf, size_t length,
                           uint32_t *flags, nghttp2_data_source *src, void *ud)
{
	(void)src;
	grpc_layer *g = ud;
	size_t n = g->tx_len < length ? g->tx_len : length;
	memcpy(buf, g->tx + g->tx_off, n);
	g->tx_off += n;
	g->tx_len -= n;
	if (g->tx_len == 0)
		g->tx_off = 0;
	if (n)
		return (ssize_t)n;
	if (!g->app_ended) {
		g->deferred = true;
		return NGHTTP2_ERR_DEFERRED;
	}
	*flags |= NGHTTP2_DATA_FLAG_EOF;
	if (g->server) {
		/* the stream ends with the trailers, grpc-status 0 */
		*flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
		const nghttp2_nv trailer[] = {{(uint8_t *)"grpc-status", (uint8_t *)"0", 11, 1,
		                               NGHTTP2_NV_FLAG_NONE}};
		if (nghttp2_submit_trailer(s, id, trailer, 1))
			return NGHTTP2_ERR_CALLBACK_FAILURE;
	}
	return 0;
}

static int on_begin_headers(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
	grpc_layer *g = ud;
	if (!g->server || f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	if (g->stream) /* the layer carries one flow */
		return nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, f->hd.stream_id,
		                                 NGHTTP2_REFUSED_STREAM)
		               ? NGHTTP2_ERR_CALLBACK_FAILURE
		               : 0;
	g->stream = f->hd.stream_id;
	return 0;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *ud)
{
	(void)s;
	(void)flags;
	grpc_layer *g = ud;
	if (f->hd.stream_id != g->stream)
		return 0;
	if (name_is(name, namelen, ":path"))
		copy_value(g->h_path, sizeof g->h_path, value, valuelen);
	else if (name_is(name, namelen, ":method"))
		copy_value(g->h_method, sizeof g->h_method, value, valuelen);
	else if (name_is(name, namelen, "content-type"))
		copy_value(g->h_type, sizeof g->h_type, value, valuelen);
	else if (name_is(name, namelen, ":status"))
		copy_value(g->h_status, sizeof g->h_status, value, valuelen);
	else if (name_is(name, namelen, "grpc-status"))
		copy_value(g->h_grpc_status, sizeof g->h_grpc_status, value, valuelen);
	else if (name_is(name, namelen, "grpc-message"))
		copy_value(g->h_grpc_message, sizeof g->h_grpc_message, value, valuelen);
	return 0;
}

#define NV(n, v)                                                                        \
	{                                                                                \
		(uint8_t *)(n), (uint8_t *)(v), strlen(n), strlen(v), NGHTTP2_NV_FLAG_NONE \
	}

/* A request refused with an answer: the error waits until the peer has
 * closed the stream, so the answer is read before the connection closes
 * (a close with the peer's bytes unread would reset it). */
static void refuse(grpc_layer *g, int code, int msg, const char *a, const char *b)
{
	if (g->refused)
		return;
	g->refused = code;
	snprintf(g->err_text, sizeof g->err_text, msgs[msg], a ? a : "?", b ? b : "?");
}

/* The server's verdict on the request headers. */
static int answer_request(nghttp2_session *s, grpc_layer *g)
{
	if (strcmp(g->h_method, "POST") != 0) {
		const nghttp2_nv nv[] = {NV(":status", "405")};
		refuse(g, LAYER_ERR_PROTO, M_BAD_METHOD, g->h_method, NULL);
		return nghttp2_submit_response(s, g->stream, nv, 1, NULL);
	}
	if (strncmp(g->h_type, "application/grpc", 16) != 0) {
		const nghttp2_nv nv[] = {NV(":status", "415")};
		refuse(g, LAYER_ERR_PROTO, M_BAD_TYPE, g->h_type, NULL);
		return nghttp2_submit_response(s, g->stream, nv, 1, NULL);
	}
	if (strcmp(g->h_path, g->path) != 0) {
		const nghttp2_nv nv[] = {NV(":status", "200"), NV("content-type", "application/grpc"),
		                         NV("grpc-status", "12")};
		refuse(g, LAYER_ERR_AUTH, M_WRONG_PATH, g->h_path, g->path);
		return nghttp2_submit_response(s, g->stream, nv, 3, NULL);
	}
	const nghttp2_nv nv[] = {NV(":status", "200"), NV("content-type", "application/grpc")};
	nghttp2_data_provider src = {.read_callback = read_source};
	g->is_ready = true;
	return nghttp2_submit_response(s, g->stream, nv, 2, &src);
}

/* The client's verdict on response headers or trailers. */
static void check_response(grpc_layer *g)
{
	if (g->h_status[0] && strcmp(g->h_status, "200") != 0)
		fail_later(g, LAYER_ERR_AUTH, M_HTTP_STATUS, g->h_status, NULL);
	else if (g->h_grpc_status[0] && strcmp(g->h_grpc_status, "0") != 0)
		fail_later(g, LAYER_ERR_AUTH, g->h_grpc_message[0] ? M_GRPC_STATUS_MSG : M_GRPC_STATUS,
		           g->h_grpc_status, g->h_grpc_message);
}

static int on_frame_recv(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
	grpc_layer *g = ud;
	if (f->hd.type == NGHTTP2_SETTINGS && !(f->hd.flags & NGHTTP2_FLAG_ACK) && !g->server)
		g->is_ready = true;
	if (f->hd.stream_id == 0 || f->hd.stream_id != g->stream)
		return 0;
	if (f->hd.type == NGHTTP2_HEADERS) {
		if (g->server && f->headers.cat == NGHTTP2_HCAT_REQUEST) {
			if (answer_request(s, g))
				return NGHTTP2_ERR_CALLBACK_FAILURE;
		} else if (!g->server) {
			check_response(g);
		}
	}
	if ((f->hd.type == NGHTTP2_HEADERS || f->hd.type == NGHTTP2_DATA) &&
	    (f->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
		g->peer_ended = true;
		if (!gun_reader_at_boundary(&g->rd))
			fail_later(g, LAYER_ERR_CLOSED, M_CUT, NULL, NULL);
	}
	return 0;
}

static int on_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
                   void *ud)
{
	(void)s;
	(void)flags;
	grpc_layer *g = ud;
	if (id != g->stream || g->fail_next || g->err || g->refused)
		return 0; /* a refused stream's data is dropped */
	layer_buf out = {.data = g->rx, .len = g->rx_len, .cap = RX_CAP};
	ssize_t n = gun_read(&g->rd, data, len, &out);
	if (n < 0) {
		g->err = LAYER_ERR_PROTO;
		snprintf(g->err_text, sizeof g->err_text, "%s", gun_error((int)n));
		return 0;
	}
	/* the wire bytes fed never exceed the room (from_below), and data
	 * is never longer than the wire bytes that carried it */
	g->rx_len = out.len;
	return 0;
}

static int on_stream_close(nghttp2_session *s, int32_t id, uint32_t code, void *ud)
{
	(void)s;
	grpc_layer *g = ud;
	if (id != g->stream)
		return 0;
	if (g->refused && !g->fail_next && !g->err) {
		g->fail_next = g->refused;
		return 0;
	}
	if (code == NGHTTP2_NO_ERROR)
		return 0;
	if (!g->peer_ended || !g->app_ended)
		fail_later(g, LAYER_ERR_CLOSED, M_RESET, nghttp2_http2_strerror(code), NULL);
	return 0;
}

/* Moving bytes. */

static int h2_failed(grpc_layer *g, int rv)
{
	return set_error(g, rv == NGHTTP2_ERR_NOMEM ? LAYER_ERR_NOMEM : LAYER_ERR_PROTO, M_HTTP2,
	                 nghttp2_strerror(rv), NULL);
}

/* nghttp2's output into down, as far as it has room. */
static int pump_out(grpc_layer *g, layer_buf *down)
{
	for (;;) {
		if (g->wire_len) {
			size_t n = layer_buf_put(down, g->wire, g->wire_len);
			g->wire += n;
			g->wire_len -= n;
			if (g->wire_len)
				return 0;
		}
		ssize_t n = nghttp2_session_mem_send(g->h2, &g->wire);
		if (n < 0)
			return h2_failed(g, (int)n);
		if (n == 0)
			return 0;
		g->wire_len = (size_t)n;
	}
}

static size_t rx_up(grpc_layer *g, layer_buf *up)
{
	size_t n = layer_buf_put(up, g->rx, g->rx_len);
	memmove(g->rx, g->rx + n, g->rx_len - n);
	g->rx_len -= n;
	return n;
}

static int pending_error(grpc_layer *g)
{
	if (g->err)
		return g->err;
	if (g->fail_next) {
		g->err = g->fail_next;
		return g->err;
	}
	return 0;
}

static ssize_t from_below(layer *l, const uint8_t *in, size_t len, layer_buf *up, layer_buf *down)
{
	grpc_layer *g = (grpc_layer *)l;
	int e = pending_error(g);
	if (e)
		return e;
	rx_up(g, up);
	size_t n = RX_CAP - g->rx_len;
	if (n > len)
		n = len;
	if (n) {
		ssize_t r = nghttp2_session_mem_recv(g->h2, in, n);
		if (r < 0)
			return h2_failed(g, (int)r);
		if (g->err)
			return g->err;
		rx_up(g, up);
	}
	if (pump_out(g, down))
		return g->err;
	return (ssize_t)n;
}

static ssize_t from_above(layer *l, const uint8_t *in, size_t len, layer_buf *down)
{
	grpc_layer *g = (grpc_layer *)l;
	int e = pending_error(g);
	if (e)
		return e;
	size_t taken = 0;
	if (len && g->app_ended)
		return set_error(g, LAYER_ERR_STATE, M_AFTER_SHUTDOWN, NULL, NULL);
	if (len && g->stream && (!g->server || g->is_ready)) {
		if (g->tx_off && g->tx_off + g->tx_len + GUN_HEADER_MAX + 1 > TX_CAP) {
			memmove(g->tx, g->tx + g->tx_off, g->tx_len);
			g->tx_off = 0;
		}
		size_t room = TX_CAP - g->tx_off - g->tx_len;
		if (room > GUN_HEADER_MAX) {
			taken = room - GUN_HEADER_MAX;
			if (taken > len)
				taken = len;
			if (taken > GRPC_PIECE_MAX)
				taken = GRPC_PIECE_MAX;
			uint8_t *at = g->tx + g->tx_off + g->tx_len;
			size_t h = gun_header(at, taken);
			memcpy(at + h, in, taken);
			g->tx_len += h + taken;
			if (g->deferred) {
				g->deferred = false;
				int rv = nghttp2_session_resume_data(g->h2, g->stream);
				if (rv)
					return h2_failed(g, rv);
			}
		}
	}
	if (pump_out(g, down))
		return g->err;
	return (ssize_t)taken;
}

static bool ready(const layer *l) { return ((const grpc_layer *)l)->is_ready; }

static int shutdown_(layer *l, layer_buf *down)
{
	grpc_layer *g = (grpc_layer *)l;
	if (g->err)
		return g->err;
	if (!g->app_ended) {
		g->app_ended = true;
		if (g->deferred && g->stream) {
			g->deferred = false;
			int rv = nghttp2_session_resume_data(g->h2, g->stream);
			if (rv)
				return h2_failed(g, rv);
		}
	}
	return pump_out(g, down) ? g->err : 0;
}

static bool peer_ended(const layer *l)
{
	const grpc_layer *g = (const grpc_layer *)l;
	return g->peer_ended && g->rx_len == 0;
}

static const char *error(const layer *l)
{
	const grpc_layer *g = (const grpc_layer *)l;
	return g->err_text[0] ? g->err_text : NULL;
}

static void free_(layer *l)
{
	grpc_layer *g = (grpc_layer *)l;
	nghttp2_session_del(g->h2);
	free(g->path);
	free(g->authority);
	free(g);
}

static int start(layer *l, layer_buf *down);

static const layer_ops client_ops = {
	.name = "grpc",
	.start = start,
	.from_below = from_below,
	.from_above = from_above,
	.ready = ready,
	.shutdown = shutdown_,
	.shutdown_in_band = true,
	.peer_ended = peer_ended,
	.error = error,
	.free = free_,
};

static const layer_ops server_ops = {
	.name = "grpc",
	.from_below = from_below,
	.from_above = from_above,
	.ready = ready,
	.shutdown = shutdown_,
	.shutdown_in_band = true,
	.peer_ended = peer_ended,
	.error = error,
	.free = free_,
};

static int start(layer *l, layer_buf *down)
{
	grpc_layer *g = (grpc_layer *)l;
	const nghttp2_nv nv[] = {
		NV(":method", "POST"),
		NV(":scheme", g->tls ? "https" : "http"),
		NV(":path", g->path),
		NV(":authority", g->authority),
		NV("content-type", "application/grpc"),
		NV("te", "trailers"),
	};
	nghttp2_data_provider src = {.read_callback = read_source};
	int32_t id = nghttp2_submit_request(g->h2, NULL, nv, sizeof nv / sizeof nv[0], &src, NULL);
	if (id < 0)
		return h2_failed(g, id);
	g->stream = id;
	return pump_out(g, down) ? g->err : 0;
}

static void say(char *err, size_t size, int msg, const char *arg)
{
	snprintf(err, size, msgs[msg], arg ? arg : "");
}

bool grpc_service_name_ok(const char *name, char *err, size_t err_size)
{
	size_t n = name ? strlen(name) : 0;
	bool ok = n > 0 && n <= GRPC_SERVICE_MAX;
	for (size_t i = 0; ok && i < n; i++)
		ok = (unsigned char)name[i] > ' ' && name[i] != 0x7f && name[i] != '?' && name[i] != '#';
	if (!ok && err)
		say(err, err_size, M_BAD_SERVICE, name);
	return ok;
}

static bool host_ok(const char *host)
{
	size_t n = host ? strlen(host) : 0;
	if (n == 0 || n > GRPC_HOST_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)host[i] <= ' ' || host[i] == 0x7f)
			return false;
	return true;
}

/* A layer with its session, SETTINGS queued. */
static grpc_layer *make(bool server, const char *service_name, char *err, size_t err_size)
{
	if (!grpc_service_name_ok(service_name, err, err_size))
		return NULL;
	grpc_layer *g = calloc(1, sizeof *g);
	nghttp2_session_callbacks *cb = NULL;
	if (!g || nghttp2_session_callbacks_new(&cb))
		goto nomem;
	g->server = server;
	gun_reader_init(&g->rd);
	g->base.ops = server ? &server_ops : &client_ops;
	size_t n = strlen(service_name) + 6;
	if (!(g->path = malloc(n)))
		goto nomem;
	snprintf(g->path, n, "/%s/Tun", service_name);
	nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
	nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
	nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
	int rv = server ? nghttp2_session_server_new(&g->h2, cb, g)
	                : nghttp2_session_client_new(&g->h2, cb, g);
	nghttp2_session_callbacks_del(cb);
	cb = NULL;
	if (rv)
		goto nomem;
	nghttp2_settings_entry iv[] = {
		{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, GRPC_WINDOW},
		{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, server ? 1 : 100},
	};
	if (nghttp2_submit_settings(g->h2, NGHTTP2_FLAG_NONE, iv, 2) ||
	    nghttp2_session_set_local_window_size(g->h2, NGHTTP2_FLAG_NONE, 0, GRPC_WINDOW))
		goto nomem;
	return g;
nomem:
	nghttp2_session_callbacks_del(cb);
	if (g)
		free_(&g->base);
	say(err, err_size, M_NOMEM, NULL);
	return NULL;
}

layer *grpc_client_new(const grpc_client_config *cfg, char *err, size_t err_size)
{
	if (!host_ok(cfg->host)) {
		say(err, err_size, M_BAD_HOST, cfg->host);
		return NULL;
	}
	grpc_layer *g = make(false, cfg->service_name, err, err_size);
	if (!g)
		return NULL;
	g->tls = cfg->tls;
	if (!(g->authority = strdup(cfg->host))) {
		free_(&g->base);
		say(err, err_size, M_NOMEM, NULL);
		return NULL;
	}
	return &g->base;
}

layer *grpc_server_new(const char *service_name, char *err, size_t err_size)
{
	grpc_layer *g = make(true, service_name, err, err_size);
	return g ? &g->base : NULL;
}
