/* conn_layer.c - a connection with layers on either side: the stacked client's handshake and the layered relay. */
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "runtime/conn_int.h"

static const char *const msgs[] = {
	"layers of the connection failed: %s",
	"a reply of %zu bytes does not fit the client's layers",
};

static void service(conn *c);

static void on_side_written(uv_write_t *req, int status);

/* A layer failed. What it queued for its own peer first (a TLS alert, the
 * WebSocket server's 404 to a prober) still goes out: the client side is
 * closed once that is written; the upstream side at once. */
static void fail(conn *c, const stack *st)
{
	log_debug("conn", msgs[0], st && stack_error(st) ? stack_error(st) : "?");
	side *x = &c->sd[0];
	if (!st || st != c->cst || c->state == CLOSING) {
		conn_close(c);
		return;
	}
	const uint8_t *d;
	size_t n;
	while ((n = stack_wire_out(x->st, &d)) > 0) {
		wslot *slot = NULL;
		for (unsigned i = 0; i < RELAY_MAX_PENDING && !slot; i++)
			if (!x->slots[i].buf)
				slot = &x->slots[i];
		uint8_t *b = slot ? pool_get(worker_pool(c->w)) : NULL;
		if (!b)
			break;
		size_t m = n < POOL_BUF_SIZE ? n : POOL_BUF_SIZE;
		memcpy(b, d, m);
		int ignored = stack_wire_done(x->st, m); /* failed already: this only takes the bytes */
		(void)ignored;
		slot->buf = b;
		slot->req.data = slot;
		uv_buf_t ub = uv_buf_init((char *)b, (unsigned)m);
		if (uv_write(&slot->req, x->s, &ub, 1, on_side_written)) {
			slot->buf = NULL;
			pool_put(worker_pool(c->w), b);
			break;
		}
		x->pending++;
	}
	if (x->pending == 0) {
		conn_close(c);
		return;
	}
	/* the writes' completion closes it (on_side_written, close_after_write) */
	if (c->state == LAYERED)
		c->state = HANDSHAKE; /* no more relaying: only these writes */
	c->close_after_write = true;
	uv_read_stop(x->s);
	if (c->sd[1].s && c->sd[1].reading)
		uv_read_stop(c->sd[1].s);
}

/* Moves a stacked side's wire output into write slots. Returns 0, or -1 on
 * a stack error (the connection is closing then). */
static int flush(conn *c, side *x)
{
	const uint8_t *d;
	size_t n;
	while (x->st && (n = stack_wire_out(x->st, &d)) > 0) {
		wslot *slot = NULL;
		for (unsigned i = 0; i < RELAY_MAX_PENDING && !slot; i++)
			if (!x->slots[i].buf)
				slot = &x->slots[i];
		if (!slot)
			return 0; /* a write completion brings us back */
		uint8_t *b = pool_get(worker_pool(c->w));
		if (!b) {
			conn_close(c);
			return -1;
		}
		size_t m = n < POOL_BUF_SIZE ? n : POOL_BUF_SIZE;
		memcpy(b, d, m);
		if (stack_wire_done(x->st, m) < 0) {
			pool_put(worker_pool(c->w), b);
			fail(c, x->st);
			return -1;
		}
		slot->buf = b;
		slot->req.data = slot;
		uv_buf_t ub = uv_buf_init((char *)b, (unsigned)m);
		if (uv_write(&slot->req, x->s, &ub, 1, on_side_written)) {
			slot->buf = NULL;
			pool_put(worker_pool(c->w), b);
			conn_close(c);
			return -1;
		}
		x->pending++;
	}
	return 0;
}

static side *side_of(conn *c, uv_stream_t *s) { return s == c->sd[0].s ? &c->sd[0] : &c->sd[1]; }

/* Offers side x's stack the wire bytes read and not yet taken; sets
 * *moved when it took some. False when the stack failed (the connection
 * is failing then). */
static bool feed_wire(conn *c, side *x, bool *moved)
{
	if (!x->rlen)
		return true;
	ssize_t k = stack_from_wire(x->st, x->rbuf + x->roff, x->rlen);
	if (k < 0) {
		fail(c, x->st);
		return false;
	}
	x->roff += (size_t)k;
	x->rlen -= (size_t)k;
	*moved |= k > 0;
	return true;
}

/* ---- the stacked client's handshake ---- */

/* Feeds the client's leftover wire bytes to its stack and its app bytes to
 * the driver, as far as they go. */
static void hs_pump(conn *c)
{
	side *x = &c->sd[0];
	for (int round = 0; conn_fed(c) && round < 64; round++) {
		bool moved = false;
		if (!feed_wire(c, x, &moved))
			return;
		if (flush(c, x))
			return;
		const uint8_t *d;
		size_t n = stack_app_in(x->st, &d);
		size_t room = CONN_HANDSHAKE_MAX - c->hs_len;
		size_t m = n < room ? n : room;
		if (m && c->hs) {
			memcpy(c->hs + c->hs_len, d, m);
			c->hs_len += m;
			if (stack_app_done(x->st, m) < 0) {
				fail(c, x->st);
				return;
			}
			moved = true;
			conn_feed_driver(c);
		}
		if (!moved)
			break;
	}
	if (x->rlen == 0 && x->rbuf) {
		pool_put(worker_pool(c->w), x->rbuf);
		x->rbuf = NULL;
	}
	/* Stuck with a full handshake buffer the driver does not take: the
	 * handshake is larger than any this program accepts. */
	if (conn_fed(c) && x->rlen && c->hs_len == CONN_HANDSHAKE_MAX && !c->paused) {
		if (conn_hold_full(c))
			return;
		log_debug("conn", "%s", "a layered handshake does not fit");
		conn_close(c);
		return;
	}
	if (x->rlen && !c->paused) /* hold further reads until this is used */
		uv_read_stop(x->s);
}

void conn_layer_hs_read(conn *c, uint8_t *buf, size_t n)
{
	side *x = &c->sd[0];
	if (x->rbuf) { /* reads restarted with bytes left: keep order */
		size_t keep = x->rlen;
		if (keep + n > POOL_BUF_SIZE) {
			pool_put(worker_pool(c->w), buf);
			conn_close(c);
			return;
		}
		memmove(x->rbuf, x->rbuf + x->roff, keep);
		memcpy(x->rbuf + keep, buf, n);
		pool_put(worker_pool(c->w), buf);
		x->roff = 0;
		x->rlen = keep + n;
	} else {
		x->rbuf = buf;
		x->roff = 0;
		x->rlen = n;
	}
	if (c->state == DRIVEN)
		c->last_active = uv_now(worker_loop(c->w));
	hs_pump(c);
}

void conn_layer_hs_resume(conn *c) { hs_pump(c); }

int conn_layer_write(conn *c, const uint8_t *data, size_t len)
{
	side *x = &c->sd[0];
	ssize_t k = stack_from_app(x->st, data, len);
	if (k < 0) {
		fail(c, x->st);
		return -1;
	}
	if ((size_t)k < len) {
		log_debug("conn", msgs[1], len);
		return -1;
	}
	return flush(c, x);
}

/* ---- the layered relay ---- */

/* Hands app bytes to side y: into its stack, or into a write of its own.
 * Returns how many were taken. */
static size_t send_app(conn *c, side *y, const uint8_t *d, size_t n)
{
	if (y->st) {
		ssize_t k = stack_from_app(y->st, d, n);
		if (k < 0) {
			fail(c, y->st);
			return 0;
		}
		if (flush(c, y))
			return 0;
		return (size_t)k;
	}
	wslot *slot = NULL;
	for (unsigned i = 0; i < RELAY_MAX_PENDING && !slot; i++)
		if (!y->slots[i].buf)
			slot = &y->slots[i];
	if (!slot)
		return 0;
	uint8_t *b = pool_get(worker_pool(c->w));
	if (!b) {
		conn_close(c);
		return 0;
	}
	size_t m = n < POOL_BUF_SIZE ? n : POOL_BUF_SIZE;
	memcpy(b, d, m);
	slot->buf = b;
	slot->req.data = slot;
	uv_buf_t ub = uv_buf_init((char *)b, (unsigned)m);
	if (uv_write(&slot->req, y->s, &ub, 1, on_side_written)) {
		slot->buf = NULL;
		pool_put(worker_pool(c->w), b);
		conn_close(c);
		return 0;
	}
	y->pending++;
	return m;
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
	(void)status;
	side *y = req->data;
	conn *c = req->handle->data; /* alive during its callback, even a cancelled one */
	if (c->state != LAYERED)
		return;
	y->shut_done = true;
	service(c);
}

/* y's peer gets our end: the layers' orderly close, then the TCP FIN once
 * the wire output is all queued. */
static void shut(conn *c, side *y)
{
	if (!y->shut_sent) {
		y->shut_sent = true;
		if (y->st && (stack_shutdown(y->st) < 0 || flush(c, y))) {
			if (c->state == LAYERED)
				fail(c, y->st);
			return;
		}
	}
	const uint8_t *d;
	if (y->shut_issued || (y->st && stack_wire_out(y->st, &d) > 0))
		return; /* a write completion comes back here */
	y->shut_issued = true;
	y->shut.data = y;
	if (uv_shutdown(&y->shut, y->s, on_shutdown)) {
		y->shut_done = true;
	}
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	conn *c = s->data;
	side *x = side_of(c, s);
	if (n <= 0) {
		pool_put(worker_pool(c->w), (uint8_t *)buf->base);
		if (n == 0)
			return;
		if (n != UV_EOF) {
			conn_close(c);
			return;
		}
		x->eof = true;
		uv_read_stop(s);
		x->reading = false;
		service(c);
		return;
	}
	x->rbuf = (uint8_t *)buf->base;
	x->roff = 0;
	x->rlen = (size_t)n;
	c->last_active = uv_now(worker_loop(c->w));
	service(c);
}

static void on_side_written(uv_write_t *req, int status)
{
	wslot *slot = req->data;
	conn *c = req->handle->data;
	pool_put(worker_pool(c->w), slot->buf);
	slot->buf = NULL;
	if (c->state == CLOSING)
		return;
	side *x = side_of(c, (uv_stream_t *)req->handle);
	x->pending--;
	if (status < 0) {
		conn_close(c);
		return;
	}
	if (c->state == LAYERED) {
		service(c);
		return;
	}
	/* the stacked client's handshake, or the last writes after a failure */
	if (x != &c->sd[0])
		return;
	if (flush(c, x))
		return;
	const uint8_t *d;
	if (c->close_after_write && x->pending == 0 && stack_wire_out(x->st, &d) == 0) {
		conn_close(c);
		return;
	}
	if (c->driver->on_written)
		c->driver->on_written(c, c->drv);
}

bool conn_layer_written_all(const conn *c)
{
	const uint8_t *d;
	const side *x = &c->sd[0];
	return x->pending == 0 && (!x->st || stack_wire_out(x->st, &d) == 0);
}

/* Moves what can move, both ways, then decides what to read and what to end. */
static void service(conn *c)
{
	for (int round = 0; round < 16 && c->state == LAYERED; round++) {
		bool moved = false;
		for (int i = 0; i < 2 && c->state == LAYERED; i++) {
			side *x = &c->sd[i], *y = &c->sd[1 - i];
			if (x->st && !feed_wire(c, x, &moved))
				return;
			if (flush(c, x))
				return;
			const uint8_t *d;
			size_t n;
			if (x->st) {
				n = stack_app_in(x->st, &d);
			} else {
				d = x->rbuf ? x->rbuf + x->roff : NULL;
				n = x->rlen;
			}
			if (n) {
				size_t k = send_app(c, y, d, n);
				if (c->state != LAYERED)
					return;
				if (k) {
					moved = true;
					if (x->st) {
						if (stack_app_done(x->st, k) < 0) {
							fail(c, x->st);
							return;
						}
					} else {
						x->roff += k;
						x->rlen -= k;
					}
				}
			}
			if (x->rlen == 0 && x->rbuf) {
				pool_put(worker_pool(c->w), x->rbuf);
				x->rbuf = NULL;
			}
		}
		if (!moved)
			break;
	}
	if (c->state != LAYERED)
		return;
	for (int i = 0; i < 2; i++) {
		side *x = &c->sd[i], *y = &c->sd[1 - i];
		const uint8_t *d;
		bool drained = x->rlen == 0 && (!x->st || stack_app_in(x->st, &d) == 0);
		if (x->eof && drained && !y->shut_issued) {
			shut(c, y);
			if (c->state != LAYERED)
				return;
		}
		bool room = y->pending < RELAY_MAX_PENDING && (!y->st || stack_app_room(y->st) > 0);
		bool want = !x->eof && x->rlen == 0 && room;
		if (want && !x->reading) {
			x->reading = true;
			uv_read_start(x->s, conn_alloc_pool, on_read);
		} else if (!want && x->reading) {
			x->reading = false;
			uv_read_stop(x->s);
		}
	}
	if (c->sd[0].shut_done && c->sd[1].shut_done)
		conn_close(c);
}

void conn_layer_relay(conn *c)
{
	side *a = &c->sd[0], *b = &c->sd[1];
	if (!c->cst)
		*a = (side){.s = (uv_stream_t *)&c->client};
	*b = (side){.s = (uv_stream_t *)c->up, .st = c->ust};
	a->reading = false; /* the handshake's reads are stopped */
	c->state = LAYERED;
	if (c->hs_len) { /* the client's bytes after its request go first */
		size_t k = send_app(c, b, c->hs, c->hs_len);
		if (c->state != LAYERED)
			return;
		if (k != c->hs_len) {
			conn_close(c);
			return;
		}
		c->hs_len = 0;
	}
	if (c->client_eof)
		a->eof = true;
	service(c);
}

void conn_layer_free(conn *c)
{
	for (int i = 0; i < 2; i++) {
		pool_put(worker_pool(c->w), c->sd[i].rbuf);
		c->sd[i].rbuf = NULL;
	}
}
