/* conn.c - a client connection: its endpoint's handshake bytes for the driver, then a relay to the upstream. */
#include "runtime/conn.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "runtime/endpoint.h"
#include "runtime/guard.h"
#include "runtime/linger.h"
#include "runtime/relay.h"

enum {
	M_HS_TIMEOUT,
	M_HS_TOO_BIG,
	M_IDLE,
	M_ACCEPT,
	M_RELAY_ENDED,
	M_LAYERS_FAILED,
	M_DRAINED,
};

static const char *const msgs[] = {
	[M_HS_TIMEOUT] = "handshake from %s did not finish in time",
	[M_HS_TOO_BIG] = "handshake from %s is larger than %d bytes",
	[M_IDLE] = "connection from %s idle for %llu s",
	[M_ACCEPT] = "accept failed: %s",
	[M_RELAY_ENDED] = "relay from %s ended: %s",
	[M_LAYERS_FAILED] = "layers of the connection failed: %s",
	[M_DRAINED] = "the outbound this flow was opened on was drained",
};

/* HANDSHAKE and DRIVEN feed the driver the client's bytes; a RELAY's
 * endpoints belong to its relay; BLACKHOLE reads and drops. */
enum conn_state { HANDSHAKE, DRIVEN, RELAY, BLACKHOLE, CLOSING };

struct conn {
	worker *w;
	list_node node; /* in the worker's list */
	const conn_driver *driver;
	void *drv;
	conn_limits limits;
	enum conn_state state;

	endpoint *client; /* owned until the relay takes it; NULL then */
	relay *relay;     /* RELAY: owns both endpoints */
	uv_timer_t timer;    /* the handshake deadline, then the idle timeout (driven, held) */
	uv_timer_t deadline; /* the driver's own deadline */
	int open_handles;    /* timer closes still to come before the free */

	struct sockaddr_storage peer, local;
	bool source_counted; /* peer holds one of the guard's counts */

	uint8_t *hs; /* client bytes the driver has not consumed (a pool buffer) */
	size_t hs_len;
	bool paused;     /* the driver stopped the client's reads */
	bool client_eof; /* the client's EOF came during the handshake or driven */
	bool close_after_write;
	uint64_t last_active;
	uint64_t origin; /* the outbound version its upstream was opened on; 0: none yet */
};

worker *conn_worker(const conn *c) { return c->w; }
const struct sockaddr_storage *conn_peer(const conn *c) { return &c->peer; }
/* Asked of the socket the first time (few flows need it: a SOCKS UDP
 * association binds its relay there). */
const struct sockaddr_storage *conn_local(conn *c)
{
	if (c->local.ss_family == AF_UNSPEC && c->client)
		(void)endpoint_sockname(c->client, &c->local);
	return &c->local;
}

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

static bool fed(const conn *c) { return c->state == HANDSHAKE || c->state == DRIVEN; }

/* ---- closing ---- */

static void on_handle_closed(uv_handle_t *h)
{
	conn *c = h->data;
	if (--c->open_handles > 0)
		return;
	worker_conns *all = worker_conn_list(c->w);
	list_remove(&all->conns, &c->node);
	all->n--;
	c->driver->on_close(c, c->drv);
	if (c->source_counted)
		guard_source_put(worker_guard(c->w), (struct sockaddr *)&c->peer);
	pool_put(worker_pool(c->w), c->hs);
	free(c);
}

/* Closes, with flush writing what the client's layers queued for it
 * first (a TLS alert, the WebSocket server's 404). */
static void close_conn(conn *c, bool flush)
{
	if (c->state == CLOSING)
		return;
	c->state = CLOSING;
	if (c->relay) {
		relay_stop(c->relay);
		c->relay = NULL;
	}
	if (c->client) {
		endpoint_close(c->client, flush);
		c->client = NULL;
	}
	uv_close((uv_handle_t *)&c->timer, on_handle_closed);
	uv_close((uv_handle_t *)&c->deadline, on_handle_closed);
}

void conn_close(conn *c) { close_conn(c, false); }

void conn_set_origin(conn *c, uint64_t origin) { c->origin = origin; }

size_t conn_drain(worker *w, uint64_t origin)
{
	size_t n = 0;
	/* a closing connection stays on the list until its handles closed */
	for (list_node *i = worker_conn_list(w)->conns.head; i; i = i->next) {
		conn *c = LIST_ENTRY(i, conn, node);
		if (c->origin != origin || c->state == CLOSING)
			continue;
		char who[64];
		peer_text(c, who, sizeof who);
		log_debug("conn", msgs[M_RELAY_ENDED], who, msgs[M_DRAINED]);
		conn_close(c);
		n++;
	}
	return n;
}

void conn_close_all(worker *w)
{
	for (list_node *n = worker_conn_list(w)->conns.head; n; n = n->next)
		conn_close(LIST_ENTRY(n, conn, node));
	linger_close_all(w);
}

/* The close after our own answer: the client's socket lingers (linger.h),
 * unless its bytes have all been read already (EOF) or layers own it. */
static void close_answered(conn *c)
{
	if (c->state != CLOSING && c->client && endpoint_plain(c->client) && !c->client_eof &&
	    endpoint_tcp(c->client))
		linger_start(c->w, endpoint_tcp(c->client));
	conn_close(c);
}

/* ---- timers ---- */

static void on_timer(uv_timer_t *t)
{
	conn *c = t->data;
	char who[64];
	if (c->state == HANDSHAKE) { /* the handshake deadline */
		peer_text(c, who, sizeof who);
		log_debug("conn", msgs[M_HS_TIMEOUT], who);
		if (!c->driver->on_handshake_timeout || !c->driver->on_handshake_timeout(c, c->drv))
			conn_close(c);
		return;
	}
	uint64_t idle = uv_now(t->loop) - c->last_active;
	if (idle >= c->limits.idle_ms) {
		peer_text(c, who, sizeof who);
		log_debug("conn", msgs[M_IDLE], who, (unsigned long long)(c->limits.idle_ms / 1000));
		conn_close(c);
		return;
	}
	uv_timer_start(t, on_timer, c->limits.idle_ms - idle, 0);
}

/* Leaves the handshake: its timer becomes the idle timeout. */
static void start_idle(conn *c)
{
	uv_timer_stop(&c->timer);
	c->last_active = uv_now(worker_loop(c->w));
	if (c->limits.idle_ms)
		uv_timer_start(&c->timer, on_timer, c->limits.idle_ms, 0);
}

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

/* ---- the client's bytes for the driver ---- */

static void feed_driver(conn *c)
{
	while (fed(c) && c->hs && c->hs_len > 0 && !c->paused) {
		size_t used = c->driver->on_data(c, c->drv, c->hs, c->hs_len);
		if (!fed(c) || used == 0)
			return;
		if (used > c->hs_len)
			used = c->hs_len;
		memmove(c->hs, c->hs + used, c->hs_len - used);
		c->hs_len -= used;
	}
}

static void client_failed(conn *c)
{
	if (!endpoint_plain(c->client))
		log_debug("conn", msgs[M_LAYERS_FAILED], endpoint_error(c->client));
	close_conn(c, true);
}

/* The driver holds a full buffer (HTTP pipelining: the next requests wait
 * until the response in flight has ended): reads pause until the driver's
 * conn_resume; the bytes beyond wait in the socket. During the handshake a
 * full buffer is a request larger than any accepted: the close. */
static void full(conn *c)
{
	if (c->state == DRIVEN) {
		c->paused = true;
		endpoint_want_read(c->client, false);
		return;
	}
	char who[64];
	peer_text(c, who, sizeof who);
	log_debug("conn", msgs[M_HS_TOO_BIG], who, CONN_HANDSHAKE_MAX);
	conn_close(c);
}

/* Moves the client endpoint's app bytes into the handshake buffer and
 * offers them to the driver, as far as both go. */
static void take_client_bytes(conn *c)
{
	for (int round = 0; round < 64 && fed(c) && !c->paused; round++) {
		const uint8_t *d;
		size_t n = endpoint_app_in(c->client, &d);
		size_t room = CONN_HANDSHAKE_MAX - c->hs_len;
		size_t m = n < room ? n : room;
		if (m == 0)
			break;
		memcpy(c->hs + c->hs_len, d, m);
		c->hs_len += m;
		if (endpoint_app_done(c->client, m)) {
			client_failed(c);
			return;
		}
		size_t before = c->hs_len;
		feed_driver(c);
		if (fed(c) && !c->paused && c->hs_len == CONN_HANDSHAKE_MAX && before == c->hs_len) {
			full(c);
			return;
		}
	}
}

static void on_client_readable(void *ud)
{
	conn *c = ud;
	if (c->state == BLACKHOLE) {
		const uint8_t *d;
		size_t n;
		while ((n = endpoint_app_in(c->client, &d)) > 0)
			if (endpoint_app_done(c->client, n)) {
				client_failed(c);
				return;
			}
		if (endpoint_at_eof(c->client))
			conn_close(c); /* the client's EOF ends the flow */
		return;
	}
	if (c->state == DRIVEN)
		c->last_active = uv_now(worker_loop(c->w));
	take_client_bytes(c);
	if (!fed(c) || c->client_eof || !endpoint_at_eof(c->client))
		return;
	/* the bytes before the EOF stay the driver's to take (pipelined HTTP
	 * requests behind a response in flight) */
	c->client_eof = true;
	if (!c->driver->on_client_end || c->driver->on_client_end(c, c->drv))
		conn_close(c);
}

static void on_client_writable(void *ud)
{
	conn *c = ud;
	if (!fed(c))
		return;
	if (c->close_after_write) {
		if (endpoint_idle(c->client))
			close_answered(c);
		return;
	}
	if (c->driver->on_written)
		c->driver->on_written(c, c->drv);
}

static void on_client_error(void *ud, const char *why)
{
	(void)why;
	client_failed(ud);
}

static const endpoint_events client_events = {
	.on_readable = on_client_readable,
	.on_writable = on_client_writable,
	.on_error = on_client_error,
};

/* ---- accepting ---- */

static void opened(conn *c);
static conn *started(conn *c, stack *cst);

conn *conn_accept(worker *w, int fd, const struct sockaddr_storage *from, bool nodelay,
                  const conn_driver *driver, void *drv, const conn_limits *limits, stack *cst)
{
	/* the source's count first, before anything is allocated for it */
	struct sockaddr_storage peer = {0};
	socklen_t plen = sizeof peer;
	bool known = from ? (peer = *from, true)
	                  : getpeername(fd, (struct sockaddr *)&peer, &plen) == 0;
	bool counted = known && worker_guard(w);
	if (counted && !guard_source_take(worker_guard(w), (struct sockaddr *)&peer)) {
		close(fd);
		stack_free(cst);
		return NULL;
	}
	conn *c = calloc(1, sizeof *c);
	uint8_t *hs = pool_get(worker_pool(w));
	uv_tcp_t *tcp = malloc(sizeof *tcp);
	if (!c || !hs || !tcp) {
		if (counted)
			guard_source_put(worker_guard(w), (struct sockaddr *)&peer);
		free(c);
		free(tcp);
		pool_put(worker_pool(w), hs);
		stack_free(cst);
		close(fd);
		return NULL;
	}
	*c = (conn){.w = w, .driver = driver, .drv = drv, .limits = *limits, .hs = hs,
	            .peer = peer, .source_counted = counted};
	opened(c);

	uv_tcp_init(worker_loop(w), tcp);
	int rc = uv_tcp_open(tcp, fd);
	c->client = endpoint_new(w, tcp, cst, &client_events, c); /* takes tcp and cst */
	if (rc || !c->client) {
		if (rc) {
			close(fd);
			log_debug("conn", msgs[M_ACCEPT], uv_strerror(rc));
		}
		conn_close(c);
		return c;
	}
	if (!nodelay)
		uv_tcp_nodelay(tcp, 1);
	return started(c, cst);
}

conn *conn_adopt(worker *w, endpoint *client, const conn_driver *driver, void *drv,
                 const conn_limits *limits)
{
	conn *c = calloc(1, sizeof *c);
	uint8_t *hs = pool_get(worker_pool(w));
	if (!c || !hs) {
		free(c);
		pool_put(worker_pool(w), hs);
		endpoint_close(client, false);
		return NULL;
	}
	*c = (conn){.w = w, .driver = driver, .drv = drv, .limits = *limits, .hs = hs};
	(void)endpoint_peername(client, &c->peer);
	(void)endpoint_sockname(client, &c->local);
	opened(c);
	c->client = client;
	endpoint_set_events(client, &client_events, c);
	return started(c, endpoint_stack(client));
}

/* The connection's timers and its place in the worker's list; the
 * driver's on_open. */
static void opened(conn *c)
{
	uv_loop_t *loop = worker_loop(c->w);
	uv_timer_init(loop, &c->timer);
	uv_timer_init(loop, &c->deadline);
	c->timer.data = c;
	c->deadline.data = c;
	c->open_handles = 2;
	worker_conns *all = worker_conn_list(c->w);
	list_push_front(&all->conns, &c->node);
	all->n++;
	all->opened++;
	if (c->driver->on_open)
		c->driver->on_open(c, c->drv);
}

/* The client endpoint is in place: the handshake starts. */
static conn *started(conn *c, stack *cst)
{
	if (c->limits.handshake_ms)
		uv_timer_start(&c->timer, on_timer, c->limits.handshake_ms, 0);
	if (cst && stack_start(cst) < 0) {
		client_failed(c);
		return c;
	}
	endpoint_want_read(c->client, true);
	return c;
}

/* ---- the driver's calls ---- */

int conn_write(conn *c, const uint8_t *data, size_t len)
{
	if (!fed(c))
		return -1;
	/* bytes the client's layers have no room for wait in its endpoint:
	 * the driver bounds them with conn_write_queue and on_written */
	if (endpoint_send_all(c->client, data, len)) {
		if (!endpoint_plain(c->client))
			log_debug("conn", msgs[M_LAYERS_FAILED], endpoint_error(c->client));
		return -1;
	}
	return 0;
}

void conn_close_after_write(conn *c)
{
	if (!fed(c)) {
		conn_close(c);
		return;
	}
	endpoint_want_read(c->client, false);
	c->close_after_write = true;
	if (endpoint_idle(c->client))
		close_answered(c);
}

void conn_pause(conn *c)
{
	if (!fed(c) || c->paused)
		return;
	c->paused = true;
	endpoint_want_read(c->client, false);
}

void conn_resume(conn *c)
{
	if (!fed(c) || !c->paused)
		return;
	c->paused = false;
	endpoint_want_read(c->client, true);
	feed_driver(c);
	take_client_bytes(c);
	/* still held and full: reads wait for the next resume */
	if (fed(c) && !c->paused && c->hs_len == CONN_HANDSHAKE_MAX)
		full(c);
}

void conn_feed(conn *c) { feed_driver(c); }

size_t conn_buffered(const conn *c) { return c->hs_len; }

size_t conn_write_queue(const conn *c) { return c->client ? endpoint_queued(c->client) : 0; }

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
	start_idle(c);
}

/* Reads and drops the client's bytes until it closes (a blackhole, a held
 * UDP association's control connection), bounded by the idle timeout. */
static void discard(conn *c)
{
	c->state = BLACKHOLE;
	c->paused = false;
	start_idle(c);
	endpoint_want_read(c->client, true);
	on_client_readable(c); /* what was read already */
}

void conn_hold(conn *c)
{
	if (!fed(c))
		return;
	if (c->client_eof) {
		conn_close(c);
		return;
	}
	discard(c);
}

/* ---- the relay ---- */

static void on_relay_end(void *ud, const char *why)
{
	conn *c = ud;
	c->relay = NULL;
	char who[64];
	if (why) {
		peer_text(c, who, sizeof who);
		if (strcmp(why, RELAY_IDLE_TEXT) == 0)
			log_debug("conn", msgs[M_IDLE], who, (unsigned long long)(c->limits.idle_ms / 1000));
		else
			log_debug("conn", msgs[M_RELAY_ENDED], who, why);
	}
	conn_close(c);
}

static const relay_events relay_ev = {.on_end = on_relay_end};

void conn_relay(conn *c, endpoint *u)
{
	if (!fed(c)) {
		if (u)
			endpoint_close(u, false);
		return;
	}
	c->paused = false;
	if (!u) { /* a blackhole: the client reads EOF at once */
		if (c->client_eof || endpoint_shutdown(c->client)) {
			conn_close(c);
			return;
		}
		c->hs_len = 0;
		discard(c);
		return;
	}
	if (c->hs_len) { /* the client's bytes after its request go first */
		int rc;
		if (endpoint_plain(u)) { /* the handshake buffer itself becomes the write */
			rc = endpoint_send_buf(u, c->hs, 0, c->hs_len);
			c->hs = NULL;
		} else {
			rc = endpoint_send_all(u, c->hs, c->hs_len);
		}
		c->hs_len = 0;
		if (rc) {
			endpoint_close(u, false);
			conn_close(c);
			return;
		}
	}
	c->origin = endpoint_origin(u);
	uv_timer_stop(&c->timer); /* the relay has its own idle timeout */
	c->state = RELAY;
	relay_config cfg = {.splice = c->limits.splice, .idle_ms = c->limits.idle_ms};
	endpoint *client = c->client;
	c->client = NULL;
	c->relay = relay_start(c->w, client, u, &cfg, &relay_ev, c);
	if (!c->relay)
		conn_close(c);
}
