/* conn.c - a client connection: handshake reads for its driver, then the two-way relay. */
#include "runtime/conn.h"
#include "runtime/conn_int.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "runtime/guard.h"
#include "runtime/linger.h"
#include "runtime/splice.h"

static const char *const msgs[] = {
	"handshake from %s did not finish in time",
	"handshake from %s is larger than %d bytes",
	"connection from %s idle for %llu s",
	"accept failed: %s",
	"relay from %s ended: %s",
};

worker *conn_worker(const conn *c) { return c->w; }
const struct sockaddr_storage *conn_peer(const conn *c) { return &c->peer; }
const struct sockaddr_storage *conn_local(const conn *c) { return &c->local; }

static void peer_text(const conn *c, char *out, size_t size)
{
	char ip[INET6_ADDRSTRLEN] = "?";
	if (c->peer.ss_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)&c->peer;
		uv_ip4_name(in, ip, sizeof ip);
		snprintf(out, size, "%s:%u", ip, ntohs(in->sin_port));
	} else {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&c->peer;
		uv_ip6_name(in6, ip, sizeof ip);
		snprintf(out, size, "[%s]:%u", ip, ntohs(in6->sin6_port));
	}
}

/* ---- closing ---- */

static void on_handle_closed(uv_handle_t *h)
{
	conn *c = h->data;
	if (h == (uv_handle_t *)c->up) {
		free(c->up);
		c->up = NULL;
	}
	if (--c->open_handles > 0)
		return;
	worker_conns *list = worker_conn_list(c->w);
	if (c->prev)
		c->prev->next = c->next;
	else
		list->head = c->next;
	if (c->next)
		c->next->prev = c->prev;
	list->n--;
	c->driver->on_close(c, c->drv);
	if (c->source_counted)
		guard_source_put(worker_guard(c->w), (struct sockaddr *)&c->peer);
	pool_put(worker_pool(c->w), c->hs);
	conn_layer_free(c);
	stack_free(c->cst);
	stack_free(c->ust);
	free(c);
}

void conn_close(conn *c)
{
	if (c->state == CLOSING)
		return;
	c->state = CLOSING;
	if (c->sp) {
		splicer_stop(c->sp);
		c->sp = NULL;
	}
	/* after a splice hand-over the sockets' handles are closing already */
	if (!uv_is_closing((uv_handle_t *)&c->client))
		uv_close((uv_handle_t *)&c->client, on_handle_closed);
	uv_close((uv_handle_t *)&c->timer, on_handle_closed);
	uv_close((uv_handle_t *)&c->deadline, on_handle_closed);
	if (c->up && !uv_is_closing((uv_handle_t *)c->up)) {
		c->up->data = c;
		uv_close((uv_handle_t *)c->up, on_handle_closed);
	}
}

void conn_close_all(worker *w)
{
	for (conn *c = worker_conn_list(w)->head; c; c = c->next)
		conn_close(c);
	linger_close_all(w);
}

/* The close after our own answer: the client's socket lingers (linger.h),
 * unless its bytes have all been read already (EOF) or layers own it. */
static void close_answered(conn *c)
{
	if (c->state != CLOSING && !c->cst && !c->client_eof)
		linger_start(c->w, &c->client);
	conn_close(c);
}

/* ---- timers ---- */

void conn_on_timer(uv_timer_t *t)
{
	conn *c = t->data;
	char who[64];
	if (c->state == HANDSHAKE) { /* the handshake deadline */
		peer_text(c, who, sizeof who);
		log_debug("conn", msgs[0], who);
		if (!c->driver->on_handshake_timeout || !c->driver->on_handshake_timeout(c, c->drv))
			conn_close(c);
		return;
	}
	uint64_t now = uv_now(t->loop);
	uint64_t idle = now - c->last_active;
	if (idle >= c->limits.idle_ms) {
		peer_text(c, who, sizeof who);
		log_debug("conn", msgs[2], who, (unsigned long long)(c->limits.idle_ms / 1000));
		conn_close(c);
		return;
	}
	uv_timer_start(t, conn_on_timer, c->limits.idle_ms - idle, 0);
}

/* ---- handshake ---- */

static void alloc_hs(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	(void)suggested;
	conn *c = h->data;
	buf->base = (char *)c->hs + c->hs_len;
	buf->len = CONN_HANDSHAKE_MAX - c->hs_len;
}

bool conn_fed(const conn *c) { return c->state == HANDSHAKE || c->state == DRIVEN; }

bool conn_hold_full(conn *c)
{
	if (c->state != DRIVEN)
		return false;
	c->paused = true;
	uv_read_stop((uv_stream_t *)&c->client);
	return true;
}

void conn_feed_driver(conn *c)
{
	while (conn_fed(c) && c->hs && c->hs_len > 0 && !c->paused) {
		size_t used = c->driver->on_data(c, c->drv, c->hs, c->hs_len);
		if (!conn_fed(c) || used == 0)
			return;
		if (used > c->hs_len)
			used = c->hs_len;
		memmove(c->hs, c->hs + used, c->hs_len - used);
		c->hs_len -= used;
	}
}

static void on_hs_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	(void)buf;
	conn *c = s->data;
	if (n == 0)
		return;
	if (n < 0) {
		uv_read_stop(s);
		c->paused = true; /* no more client bytes will come */
		c->client_eof = true;
		if (n != UV_EOF || !c->driver->on_client_end ||
		    c->driver->on_client_end(c, c->drv))
			conn_close(c);
		return;
	}
	c->hs_len += (size_t)n;
	if (c->state == DRIVEN)
		c->last_active = uv_now(worker_loop(c->w));
	size_t before = c->hs_len;
	conn_feed_driver(c);
	if (conn_fed(c) && !c->paused && c->hs_len == CONN_HANDSHAKE_MAX && before == c->hs_len) {
		if (conn_hold_full(c))
			return;
		char who[64];
		peer_text(c, who, sizeof who);
		log_debug("conn", msgs[1], who, CONN_HANDSHAKE_MAX);
		conn_close(c);
	}
}

void conn_alloc_pool(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	(void)suggested;
	conn *c = h->data;
	uint8_t *b = pool_get(worker_pool(c->w));
	buf->base = (char *)b;
	buf->len = b ? POOL_BUF_SIZE : 0;
}

/* A stacked client's handshake reads: wire bytes go through its layers. */
static void on_hs_layer_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	conn *c = s->data;
	if (n <= 0) {
		pool_put(worker_pool(c->w), (uint8_t *)buf->base);
		if (n == 0)
			return;
		uv_read_stop(s);
		c->paused = true;
		c->client_eof = true;
		if (n != UV_EOF || !c->driver->on_client_end ||
		    c->driver->on_client_end(c, c->drv))
			conn_close(c);
		return;
	}
	conn_layer_hs_read(c, (uint8_t *)buf->base, (size_t)n);
}

void conn_start_reading(conn *c)
{
	if (c->cst)
		uv_read_start((uv_stream_t *)&c->client, conn_alloc_pool, on_hs_layer_read);
	else
		uv_read_start((uv_stream_t *)&c->client, alloc_hs, on_hs_read);
}

conn *conn_accept(worker *w, int fd, const conn_driver *driver, void *drv,
                  const conn_limits *limits, stack *cst)
{
	/* the source's count first, before anything is allocated for it */
	struct sockaddr_storage peer = {0};
	socklen_t plen = sizeof peer;
	bool counted = getpeername(fd, (struct sockaddr *)&peer, &plen) == 0 && worker_guard(w);
	if (counted && !guard_source_take(worker_guard(w), (struct sockaddr *)&peer)) {
		close(fd);
		stack_free(cst);
		return NULL;
	}
	conn *c = calloc(1, sizeof *c);
	uint8_t *hs = pool_get(worker_pool(w));
	if (!c || !hs) {
		if (counted)
			guard_source_put(worker_guard(w), (struct sockaddr *)&peer);
		free(c);
		pool_put(worker_pool(w), hs);
		stack_free(cst);
		close(fd);
		return NULL;
	}
	uv_loop_t *loop = worker_loop(w);
	*c = (conn){.w = w, .driver = driver, .drv = drv, .limits = *limits, .hs = hs, .cst = cst,
	            .peer = peer, .source_counted = counted};
	if (cst)
		c->sd[0] = (side){.s = (uv_stream_t *)&c->client, .st = cst};
	uv_tcp_init(loop, &c->client);
	uv_timer_init(loop, &c->timer);
	uv_timer_init(loop, &c->deadline);
	c->client.data = c;
	c->timer.data = c;
	c->deadline.data = c;
	c->open_handles = 3;

	worker_conns *list = worker_conn_list(w);
	c->next = list->head;
	if (c->next)
		c->next->prev = c;
	list->head = c;
	list->n++;
	if (driver->on_open)
		driver->on_open(c, drv);

	int rc = uv_tcp_open(&c->client, fd);
	if (rc) {
		close(fd);
		log_debug("conn", msgs[3], uv_strerror(rc));
		conn_close(c);
		return c;
	}
	int len = sizeof c->peer;
	uv_tcp_getpeername(&c->client, (struct sockaddr *)&c->peer, &len);
	len = sizeof c->local;
	uv_tcp_getsockname(&c->client, (struct sockaddr *)&c->local, &len);
	uv_tcp_nodelay(&c->client, 1);
	if (c->limits.handshake_ms)
		uv_timer_start(&c->timer, conn_on_timer, c->limits.handshake_ms, 0);
	if (cst && stack_start(cst) < 0) {
		conn_close(c);
		return c;
	}
	conn_start_reading(c);
	return c;
}

void conn_pause(conn *c)
{
	if (!conn_fed(c) || c->paused)
		return;
	c->paused = true;
	uv_read_stop((uv_stream_t *)&c->client);
}

void conn_resume(conn *c)
{
	if (!conn_fed(c) || !c->paused || c->client_eof)
		return;
	c->paused = false;
	conn_start_reading(c);
	if (c->cst)
		conn_layer_hs_resume(c);
	conn_feed_driver(c);
	/* still held and full: a read now would find no room */
	if (!c->cst && c->hs_len == CONN_HANDSHAKE_MAX && !c->paused)
		(void)conn_hold_full(c);
}

size_t conn_write_queue(const conn *c) { return c->client.write_queue_size; }

void conn_feed(conn *c) { conn_feed_driver(c); }

static void on_deadline(uv_timer_t *t)
{
	conn *c = t->data;
	if (c->state != CLOSING && c->driver->on_deadline)
		c->driver->on_deadline(c, c->drv);
}

void conn_set_deadline(conn *c, uint64_t ms)
{
	if (c->state == CLOSING)
		return;
	if (ms)
		uv_timer_start(&c->deadline, on_deadline, ms, 0);
	else
		uv_timer_stop(&c->deadline);
}

static void on_reply_written(uv_write_t *req, int status)
{
	conn *c = req->data;
	free(req);
	c->replies--;
	if (c->state == CLOSING)
		return;
	if (status < 0) {
		conn_close(c);
		return;
	}
	if (c->close_after_write && c->replies == 0) {
		close_answered(c);
		return;
	}
	if (c->driver->on_written)
		c->driver->on_written(c, c->drv);
}

int conn_write(conn *c, const uint8_t *data, size_t len)
{
	if (c->state == CLOSING)
		return -1;
	if (c->cst)
		return conn_layer_write(c, data, len);
	reply_req *r = malloc(sizeof *r + len);
	if (!r)
		return -1;
	memcpy(r->data, data, len);
	r->len = len;
	r->req.data = c;
	uv_buf_t b = uv_buf_init((char *)r->data, (unsigned)len);
	if (uv_write(&r->req, (uv_stream_t *)&c->client, &b, 1, on_reply_written)) {
		free(r);
		return -1;
	}
	c->replies++;
	return 0;
}

void conn_close_after_write(conn *c)
{
	if (c->state == CLOSING)
		return;
	uv_read_stop((uv_stream_t *)&c->client);
	c->close_after_write = true;
	if (c->cst ? conn_layer_written_all(c) : c->replies == 0)
		close_answered(c);
}

/* ---- relay ---- */

static dir *dir_of_source(conn *c, uv_stream_t *s) { return s == c->d[0].from ? &c->d[0] : &c->d[1]; }

static void alloc_relay(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	(void)suggested;
	conn *c = h->data;
	uint8_t *b = pool_get(worker_pool(c->w));
	buf->base = (char *)b;
	buf->len = b ? POOL_BUF_SIZE : 0; /* 0 makes libuv report UV_ENOBUFS */
}

static void on_relay_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);
static void maybe_splice(conn *c);

static void maybe_finish(conn *c)
{
	if (c->d[0].done && c->d[1].done)
		conn_close(c);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
	(void)status; /* a peer that already went away has nothing left to tell */
	dir *d = req->data;
	/* The stream shut is alive during its callback, even a cancelled one;
	 * d->from may be a handle already closed and freed. */
	conn *c = req->handle->data;
	if (c->state == CLOSING)
		return;
	d->done = true;
	maybe_finish(c);
}

static void dir_eof(conn *c, dir *d)
{
	d->eof = true;
	if (d->reading) {
		uv_read_stop(d->from);
		d->reading = false;
	}
	if (!d->shut_sent) {
		d->shut_sent = true;
		d->shut.data = d;
		/* libuv runs the shutdown after the writes already queued */
		if (uv_shutdown(&d->shut, d->to, on_shutdown)) {
			d->done = true;
			maybe_finish(c);
		}
	}
}

static void on_relay_written(uv_write_t *req, int status)
{
	wslot *slot = req->data;
	conn *c = req->handle->data;
	pool_put(worker_pool(c->w), slot->buf);
	slot->buf = NULL;
	if (c->state == CLOSING)
		return;
	dir *d = (uv_stream_t *)req->handle == c->d[0].to ? &c->d[0] : &c->d[1];
	d->pending--;
	if (status < 0) {
		conn_close(c);
		return;
	}
	if (!d->reading && !d->eof && d->pending < RELAY_MAX_PENDING) {
		d->reading = true;
		uv_read_start(d->from, alloc_relay, on_relay_read);
	}
	maybe_splice(c);
}

/* Sends buf[off, off + len) (a pool buffer, handed over) on d. */
static int dir_send(conn *c, dir *d, uint8_t *buf, size_t off, size_t len)
{
	uv_buf_t b = uv_buf_init((char *)buf + off, (unsigned)len);
	int n = uv_try_write(d->to, &b, 1);
	if (n == (int)len) {
		pool_put(worker_pool(c->w), buf);
		return 0;
	}
	if (n < 0 && n != UV_EAGAIN) {
		pool_put(worker_pool(c->w), buf);
		return -1;
	}
	if (n > 0)
		b = uv_buf_init((char *)buf + off + n, (unsigned)(len - (size_t)n));
	wslot *slot = NULL;
	for (unsigned i = 0; i < RELAY_MAX_PENDING; i++)
		if (!d->slots[i].buf) {
			slot = &d->slots[i];
			break;
		}
	if (!slot) { /* cannot happen: reading stops when the slots are full */
		pool_put(worker_pool(c->w), buf);
		return -1;
	}
	slot->buf = buf;
	slot->req.data = slot;
	if (uv_write(&slot->req, d->to, &b, 1, on_relay_written)) {
		slot->buf = NULL;
		pool_put(worker_pool(c->w), buf);
		return -1;
	}
	if (++d->pending >= RELAY_MAX_PENDING && d->reading) {
		uv_read_stop(d->from);
		d->reading = false;
	}
	return 0;
}

static bool try_splice(conn *c);

/* A flow that has moved SPLICE_AFTER bytes and has nothing in flight moves
 * to the splicer; short flows never pay its set-up. */
static void maybe_splice(conn *c)
{
	if (c->state != RELAY || !c->limits.splice || c->relayed < SPLICE_AFTER)
		return;
	for (int i = 0; i < 2; i++)
		if (c->d[i].pending || c->d[i].eof || c->d[i].shut_sent)
			return;
	for (int i = 0; i < 2; i++)
		if (c->d[i].reading) {
			uv_read_stop(c->d[i].from);
			c->d[i].reading = false;
		}
	if (try_splice(c))
		return;
	c->relayed = 0; /* not now: try again after as many bytes */
	for (int i = 0; i < 2; i++) {
		c->d[i].reading = true;
		uv_read_start(c->d[i].from, alloc_relay, on_relay_read);
	}
}

static void on_relay_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	conn *c = s->data;
	dir *d = dir_of_source(c, s);
	if (n <= 0) {
		pool_put(worker_pool(c->w), (uint8_t *)buf->base);
		if (n == UV_EOF)
			dir_eof(c, d);
		else if (n < 0)
			conn_close(c);
		return;
	}
	c->last_active = uv_now(worker_loop(c->w));
	c->relayed += (uint64_t)n;
	if (dir_send(c, d, (uint8_t *)buf->base, 0, (size_t)n)) {
		conn_close(c);
		return;
	}
	maybe_splice(c);
}

static void on_blackhole_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	conn *c = s->data;
	pool_put(worker_pool(c->w), (uint8_t *)buf->base);
	if (n < 0)
		conn_close(c); /* the client's EOF or error ends the flow */
}

static void on_blackhole_shutdown(uv_shutdown_t *req, int status)
{
	(void)status;
	free(req);
}

static void free_handle(uv_handle_t *h) { free(h); }

static void on_splice_activity(void *ud)
{
	conn *c = ud;
	c->last_active = uv_now(worker_loop(c->w));
}

static void on_splice_end(void *ud, int err)
{
	conn *c = ud;
	c->sp = NULL; /* it stops itself */
	if (err) {
		char who[64];
		peer_text(c, who, sizeof who);
		log_debug("conn", msgs[4], who, uv_strerror(err));
	}
	conn_close(c);
}

static const splicer_events splice_events = {
	.on_activity = on_splice_activity,
	.on_end = on_splice_end,
};

/* Hands both sockets to a splicer. The handshake's leftover bytes go first
 * with one non-blocking write; when that cannot finish, or the client has
 * already sent its FIN, the buffered relay is used instead. Returns true
 * when the splicer runs. */
static bool try_splice(conn *c)
{
	if (c->client_eof)
		return false;
	if (c->hs_len) {
		uv_buf_t b = uv_buf_init((char *)c->hs, (unsigned)c->hs_len);
		if (uv_try_write((uv_stream_t *)c->up, &b, 1) != (int)c->hs_len)
			return false; /* nothing or part written: the buffered path copes */
		c->hs_len = 0;
	}
	uv_os_fd_t fa, fb;
	if (uv_fileno((uv_handle_t *)&c->client, &fa) || uv_fileno((uv_handle_t *)c->up, &fb))
		return false;
	int a = dup(fa), b = dup(fb);
	splicer *sp = a >= 0 && b >= 0 ? splicer_start(worker_loop(c->w), a, b, &splice_events, c)
	                               : NULL;
	if (!sp) {
		if (a >= 0)
			close(a);
		if (b >= 0)
			close(b);
		return false;
	}
	c->sp = sp;
	c->state = SPLICE;
	/* the splicer owns the sockets now through its duplicates */
	uv_close((uv_handle_t *)&c->client, on_handle_closed);
	uv_close((uv_handle_t *)c->up, on_handle_closed);
	return true;
}

void conn_touch(conn *c) { c->last_active = uv_now(worker_loop(c->w)); }

void conn_request_done(conn *c)
{
	if (c->state == HANDSHAKE)
		uv_timer_stop(&c->timer);
}

void conn_drive(conn *c)
{
	if (c->state != HANDSHAKE)
		return;
	c->state = DRIVEN;
	uv_timer_stop(&c->timer);
	c->last_active = uv_now(worker_loop(c->w));
	if (c->limits.idle_ms)
		uv_timer_start(&c->timer, conn_on_timer, c->limits.idle_ms, 0);
}

/* Leaves the handshake: stops its reads and timer, starts the idle timer. */
void conn_leave_handshake(conn *c)
{
	uv_read_stop((uv_stream_t *)&c->client);
	c->paused = false;
	uv_timer_stop(&c->timer);
	c->last_active = uv_now(worker_loop(c->w));
	if (c->limits.idle_ms)
		uv_timer_start(&c->timer, conn_on_timer, c->limits.idle_ms, 0);
}

void conn_hold(conn *c)
{
	if (!conn_fed(c))
		return;
	if (c->client_eof) {
		conn_close(c);
		return;
	}
	conn_leave_handshake(c);
	c->state = BLACKHOLE;
	uv_read_start((uv_stream_t *)&c->client, alloc_relay, on_blackhole_read);
}

void conn_relay(conn *c, uv_tcp_t *up, stack *ust)
{
	if (!conn_fed(c)) {
		if (up)
			uv_close((uv_handle_t *)up, free_handle);
		stack_free(ust);
		return;
	}
	c->ust = ust;
	conn_leave_handshake(c);

	if (!up && c->client_eof) {
		conn_close(c);
		return;
	}
	if (!up) {
		c->state = BLACKHOLE;
		uv_shutdown_t *req = malloc(sizeof *req);
		if (!req || uv_shutdown(req, (uv_stream_t *)&c->client, on_blackhole_shutdown)) {
			free(req);
			conn_close(c);
			return;
		}
		uv_read_start((uv_stream_t *)&c->client, alloc_relay, on_blackhole_read);
		return;
	}

	c->up = up;
	c->up->data = c;
	c->open_handles++;
	uv_tcp_nodelay(up, 1);
	if (c->cst || c->ust) {
		conn_layer_relay(c);
		return;
	}
	c->state = RELAY; /* splice comes after SPLICE_AFTER bytes (maybe_splice) */
	c->d[0] = (dir){.from = (uv_stream_t *)&c->client, .to = (uv_stream_t *)up};
	c->d[1] = (dir){.from = (uv_stream_t *)up, .to = (uv_stream_t *)&c->client};

	if (c->hs_len) {
		/* the handshake buffer itself becomes the first write */
		uint8_t *b = c->hs;
		size_t len = c->hs_len;
		c->hs = NULL;
		c->hs_len = 0;
		if (dir_send(c, &c->d[0], b, 0, len)) {
			conn_close(c);
			return;
		}
	}
	if (c->client_eof) /* the client already sent its FIN: pass it on */
		dir_eof(c, &c->d[0]);
	for (int i = 0; i < 2; i++) {
		if (!c->d[i].eof && c->d[i].pending < RELAY_MAX_PENDING) {
			c->d[i].reading = true;
			uv_read_start(c->d[i].from, alloc_relay, on_relay_read);
		}
	}
}
