/* test_relay.c - endpoints and the relay over loopback TCP pairs on a worker's loop: bytes both ways, backpressure, half-close each way, EOF behind queued bytes, a layer failing mid-stream, the splice hand-off (a proxy client's framing dropped first; a user's flow paced), the idle end. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "proto/trojan.h"
#include "proto/vless.h"
#include "runtime/endpoint.h"
#include "runtime/principal.h"
#include "runtime/relay.h"
#include "runtime/worker.h"
#include "transport/stack.h"

/* ---- a layer that passes bytes; armed, it fails on one byte from below ---- */

#define POISON 0xEE

typedef struct poison_layer {
	layer base;
	bool armed;
} poison_layer;

static ssize_t poison_below(layer *l, const uint8_t *in, size_t len, layer_buf *up,
                            layer_buf *down)
{
	(void)down;
	size_t n = len < layer_buf_room(up) ? len : layer_buf_room(up);
	for (size_t i = 0; i < n && ((poison_layer *)l)->armed; i++)
		if (in[i] == POISON)
			return LAYER_ERR_PROTO;
	memcpy(up->data + up->len, in, n);
	up->len += n;
	return (ssize_t)n;
}

static ssize_t poison_above(layer *l, const uint8_t *in, size_t len, layer_buf *down)
{
	(void)l;
	return (ssize_t)layer_buf_put(down, in, len);
}

static bool always(const layer *l) { return (void)l, true; }
static const char *poison_error(const layer *l) { return (void)l, "poisoned"; }
static void plain_free(layer *l) { free(l); }

static const layer_ops poison_ops = {
	.name = "poison",
	.from_below = poison_below,
	.from_above = poison_above,
	.ready = always,
	.error = poison_error,
	.free = plain_free,
};

static stack *layered(bool armed)
{
	stack *s = stack_new();
	poison_layer *l = malloc(sizeof *l);
	assert_non_null(s);
	assert_non_null(l);
	*l = (poison_layer){.base.ops = &poison_ops, .armed = armed};
	assert_int_equal(stack_push(s, &l->base), 0);
	return s;
}

/* ---- a layer with a timer: "tick" toward the wire at each deadline ---- */

#define TICKS 3
#define TICK_MS 50

typedef struct ticker {
	layer base;
	uint64_t next; /* loop time of the next tick; 0 once TICKS are out */
	int ticks;
} ticker;

static ssize_t pass_below(layer *l, const uint8_t *in, size_t len, layer_buf *up,
                          layer_buf *down)
{
	(void)l, (void)down;
	return (ssize_t)layer_buf_put(up, in, len);
}

static uint64_t tick_deadline(const layer *l) { return ((const ticker *)l)->next; }

static int tick_on_time(layer *l, uint64_t now, layer_buf *down)
{
	ticker *t = (ticker *)l;
	if (layer_buf_put(down, (const uint8_t *)"tick", 4) != 4)
		return LAYER_ERR_STATE;
	t->next = ++t->ticks < TICKS ? now + TICK_MS : 0;
	return 0;
}

static const layer_ops ticker_ops = {
	.name = "ticker",
	.from_below = pass_below,
	.from_above = poison_above,
	.ready = always,
	.deadline = tick_deadline,
	.on_time = tick_on_time,
	.free = plain_free,
};

static stack *ticking(void)
{
	stack *s = stack_new();
	ticker *t = malloc(sizeof *t);
	assert_non_null(s);
	assert_non_null(t);
	*t = (ticker){.base.ops = &ticker_ops, .next = 1}; /* due at once */
	assert_int_equal(stack_push(s, &t->base), 0);
	return s;
}

/* ---- a layer with a handshake: "HELLO" out, ready once "OK" comes ---- */

typedef struct greeter {
	layer base;
	size_t ok; /* bytes of "OK" seen */
} greeter;

static int greet_start(layer *l, layer_buf *down)
{
	(void)l;
	return layer_buf_put(down, (const uint8_t *)"HELLO", 5) == 5 ? 0 : LAYER_ERR_STATE;
}

static ssize_t greet_below(layer *l, const uint8_t *in, size_t len, layer_buf *up,
                           layer_buf *down)
{
	(void)down;
	greeter *g = (greeter *)l;
	size_t i = 0;
	for (; i < len && g->ok < 2; i++, g->ok++)
		if (in[i] != "OK"[g->ok])
			return LAYER_ERR_PROTO;
	return (ssize_t)(i + layer_buf_put(up, in + i, len - i));
}

static bool greeted(const layer *l) { return ((const greeter *)l)->ok == 2; }

static const layer_ops greeter_ops = {
	.name = "greeter",
	.start = greet_start,
	.from_below = greet_below,
	.from_above = poison_above,
	.ready = greeted,
	.free = plain_free,
};

static stack *greeting(void)
{
	stack *s = stack_new();
	greeter *g = calloc(1, sizeof *g);
	assert_non_null(s);
	assert_non_null(g);
	g->base.ops = &greeter_ops;
	assert_int_equal(stack_push(s, &g->base), 0);
	return s;
}

/* ---- loopback pairs ---- */

static void small_buffers(int fd)
{
	int n = 16 * 1024;
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &n, sizeof n);
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &n, sizeof n);
}

/* *app: the test's blocking end; *srv: the end an endpoint takes. */
static void tcp_pair(int *app, int *srv, bool small)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof sa;
	int l = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(l >= 0);
	if (small)
		small_buffers(l);
	assert_int_equal(bind(l, (struct sockaddr *)&sa, sizeof sa), 0);
	assert_int_equal(listen(l, 1), 0);
	assert_int_equal(getsockname(l, (struct sockaddr *)&sa, &len), 0);
	*app = socket(AF_INET, SOCK_STREAM, 0);
	if (small)
		small_buffers(*app);
	assert_int_equal(connect(*app, (struct sockaddr *)&sa, sizeof sa), 0);
	*srv = accept(l, NULL, NULL);
	assert_true(*srv >= 0);
	close(l);
	struct timeval tv = {.tv_sec = 10};
	setsockopt(*app, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	setsockopt(*app, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

/* ---- the relay on a worker ---- */

typedef struct harness {
	workers *ws;
	worker *w;
	int app_a, app_b; /* the test's ends */
	int srv_a, srv_b;
	stack *st_a, *st_b;
	relay_config cfg;
	relay *r;
	atomic_int ended;
	atomic_int activity;
	char why[128];
	atomic_int spliced; /* filled by probe() */
	tracker *track;     /* with_track: b's flow record lives here */
	principal *who;     /* with track: the record's user; NULL: anonymous */
	layer *b_layer;     /* put on b with endpoint_start (a proxy client's framing) */
	endpoint *eb;       /* b, while the relay holds it */
	atomic_int b_plain; /* filled by probe_plain() */
} harness;

static void on_activity(void *ud) { atomic_fetch_add(&((harness *)ud)->activity, 1); }

static void on_end(void *ud, const char *why)
{
	harness *h = ud;
	snprintf(h->why, sizeof h->why, "%s", why ? why : "");
	h->r = NULL;
	atomic_store(&h->ended, 1);
}

static const relay_events events = {.on_activity = on_activity, .on_end = on_end};

static const endpoint_events unused = {0};

static endpoint *wrap(worker *w, int fd, stack *st)
{
	uv_tcp_t *t = malloc(sizeof *t);
	assert_non_null(t);
	uv_tcp_init(worker_loop(w), t);
	assert_int_equal(uv_tcp_open(t, fd), 0);
	endpoint *e = endpoint_new(w, t, st, &unused, NULL);
	assert_non_null(e);
	return e;
}

static void setup_on_worker(worker *w, void *arg)
{
	harness *h = arg;
	endpoint *a = wrap(w, h->srv_a, h->st_a), *b = wrap(w, h->srv_b, h->st_b);
	if (h->b_layer) { /* as dial_stream does: the layers' first bytes go out */
		stack *st = stack_new();
		assert_non_null(st);
		assert_int_equal(stack_push(st, h->b_layer), 0);
		assert_int_equal(endpoint_start(b, st), 0);
		assert_false(endpoint_plain(b));
	}
	h->eb = b;
	if (h->track) {
		addr_dest d = {.kind = ADDR_IPV4, .network = ADDR_TCP, .port = 80,
		               .u.v4 = {192, 0, 2, 1}};
		track_open o = {.inbound = "in", .outbound = "out", .dest = &d, .who = h->who};
		track_flow *tf = tracker_open(h->track, &o, NULL);
		assert_non_null(tf);
		endpoint_set_track(b, tf);
	}
	h->r = relay_start(w, a, b, &h->cfg, &events, h);
	assert_non_null(h->r);
}

static void start(harness *h, bool small, stack *st_a, stack *st_b, relay_config cfg)
{
	memset(h, 0, sizeof *h);
	char err[128];
	h->ws = workers_start(1, err, sizeof err);
	assert_non_null(h->ws);
	h->w = workers_at(h->ws, 0);
	tcp_pair(&h->app_a, &h->srv_a, small);
	tcp_pair(&h->app_b, &h->srv_b, small);
	h->st_a = st_a;
	h->st_b = st_b;
	h->cfg = cfg;
	worker_run(h->w, setup_on_worker, h);
}

static void stop_on_worker(worker *w, void *arg)
{
	(void)w;
	harness *h = arg;
	if (h->r)
		relay_stop(h->r);
	h->r = NULL;
}

static void finish(harness *h)
{
	worker_run(h->w, stop_on_worker, h);
	workers_stop(h->ws, NULL, NULL);
	tracker_free(h->track);
	close(h->app_a);
	close(h->app_b);
}

static void probe_on_worker(worker *w, void *arg)
{
	(void)w;
	harness *h = arg;
	atomic_store(&h->spliced, h->r && relay_spliced(h->r));
}

/* Whether b is plain; b is the relay's until a splice hand-off closes it. */
static void probe_plain_on_worker(worker *w, void *arg)
{
	(void)w;
	harness *h = arg;
	atomic_store(&h->b_plain, h->r && !relay_spliced(h->r) && endpoint_plain(h->eb));
}

static bool wait_ended(harness *h, int ms)
{
	for (int i = 0; i < ms / 10 && !atomic_load(&h->ended); i++)
		usleep(10000);
	return atomic_load(&h->ended);
}

static uint8_t pat(size_t i) { return (uint8_t)(i * 7 + (i >> 9)); }

static void send_pattern(int fd, size_t n)
{
	uint8_t buf[8192];
	for (size_t off = 0; off < n;) {
		size_t k = n - off < sizeof buf ? n - off : sizeof buf;
		for (size_t i = 0; i < k; i++)
			buf[i] = pat(off + i);
		ssize_t w = send(fd, buf, k, MSG_NOSIGNAL);
		assert_true(w > 0);
		off += (size_t)w;
	}
}

typedef struct sender {
	pthread_t t;
	int fd;
	size_t n;
} sender;

static void *send_main(void *arg)
{
	sender *s = arg;
	send_pattern(s->fd, s->n);
	return NULL;
}

/* send_pattern on a thread of its own, for a peer that reads meanwhile. */
static void send_async(sender *s, int fd, size_t n)
{
	s->fd = fd;
	s->n = n;
	assert_int_equal(pthread_create(&s->t, NULL, send_main, s), 0);
}

static void send_join(sender *s) { pthread_join(s->t, NULL); }

/* Reads n pattern bytes, checking each. */
static void expect_pattern(int fd, size_t n)
{
	uint8_t buf[8192];
	for (size_t off = 0; off < n;) {
		size_t want = n - off < sizeof buf ? n - off : sizeof buf;
		ssize_t k = recv(fd, buf, want, 0);
		assert_true(k > 0);
		for (ssize_t i = 0; i < k; i++)
			assert_int_equal(buf[i], pat(off + (size_t)i));
		off += (size_t)k;
	}
}

static void expect_eof(int fd)
{
	uint8_t c;
	assert_int_equal(recv(fd, &c, 1, 0), 0);
}

static void expect_text(int fd, const char *text)
{
	char buf[64] = {0};
	size_t n = strlen(text), got = 0;
	while (got < n) {
		ssize_t k = recv(fd, buf + got, n - got, 0);
		assert_true(k > 0);
		got += (size_t)k;
	}
	assert_string_equal(buf, text);
}

/* ---- tests ---- */

/* Bytes both ways; each side's FIN passes on once its bytes are through,
 * the other direction goes on meanwhile (half-close both ways); the
 * relay ends in order when both FINs are out. */
static void both_ways_and_half_close(bool layered_a)
{
	harness h;
	start(&h, false, layered_a ? layered(false) : NULL, NULL, (relay_config){0});
	sender s;
	send_async(&s, h.app_a, 300000);
	expect_pattern(h.app_b, 300000);
	send_join(&s);
	assert_int_equal(send(h.app_b, "pong", 4, 0), 4);
	expect_text(h.app_a, "pong");
	assert_int_equal(shutdown(h.app_a, SHUT_WR), 0);
	expect_eof(h.app_b);
	/* a half-closed flow still carries the other way */
	send_async(&s, h.app_b, 100000);
	expect_pattern(h.app_a, 100000);
	send_join(&s);
	assert_false(atomic_load(&h.ended));
	assert_int_equal(shutdown(h.app_b, SHUT_WR), 0);
	expect_eof(h.app_a);
	assert_true(wait_ended(&h, 3000));
	assert_string_equal(h.why, "");
	assert_true(atomic_load(&h.activity) > 0);
	finish(&h);
}

static void plain_both_ways(void **state) { (void)state, both_ways_and_half_close(false); }
static void layered_both_ways(void **state) { (void)state, both_ways_and_half_close(true); }

/* The B side does not read: the relay stops reading A once its writes are
 * in flight, so what A can send is bounded by the socket buffers plus
 * ENDPOINT_MAX_PENDING buffers, not by memory. */
static void backpressure(bool with_layer)
{
	harness h;
	start(&h, true, with_layer ? layered(false) : NULL, NULL, (relay_config){0});
	int fl = fcntl(h.app_a, F_GETFL);
	fcntl(h.app_a, F_SETFL, fl | O_NONBLOCK);
	size_t sent = 0;
	uint8_t buf[8192];
	for (int idle = 0; idle < 5;) {
		size_t k = sizeof buf;
		for (size_t i = 0; i < k; i++)
			buf[i] = pat(sent + i);
		ssize_t w = send(h.app_a, buf, k, MSG_NOSIGNAL);
		if (w > 0) {
			sent += (size_t)w;
			idle = 0;
			assert_true(sent < 4 * 1024 * 1024); /* unbounded: the relay reads all */
			continue;
		}
		if (errno != EAGAIN)
			fail_msg("send: %s after %zu bytes", strerror(errno), sent);
		idle++;
		usleep(50000);
	}
	fcntl(h.app_a, F_SETFL, fl);
	/* everything accepted arrives, in order */
	expect_pattern(h.app_b, sent);
	finish(&h);
}

static void plain_backpressure(void **state) { (void)state, backpressure(false); }
static void layered_backpressure(void **state) { (void)state, backpressure(true); }

/* A sends and closes at once while B reads slowly: the EOF waits behind
 * the queued bytes. */
static void eof_behind_queued_writes(void **state)
{
	(void)state;
	harness h;
	start(&h, true, NULL, NULL, (relay_config){0});
	sender s;
	send_async(&s, h.app_a, 200000);
	usleep(200000); /* B reads late: the bytes queue on the way */
	expect_pattern(h.app_b, 200000);
	send_join(&s);
	assert_int_equal(shutdown(h.app_a, SHUT_WR), 0);
	expect_eof(h.app_b);
	close(h.app_b);
	h.app_b = open("/dev/null", O_RDONLY);
	assert_true(wait_ended(&h, 3000));
	finish(&h);
}

/* A layer fails in the middle of the stream: the relay ends with the
 * layer's text and both sockets close. */
static void layer_error_mid_stream(void **state)
{
	(void)state;
	harness h;
	start(&h, false, layered(true), NULL, (relay_config){0});
	assert_int_equal(send(h.app_a, "fine", 4, 0), 4);
	expect_text(h.app_b, "fine");
	uint8_t bad[3] = {'x', POISON, 'y'};
	assert_int_equal(send(h.app_a, bad, 3, 0), 3);
	assert_true(wait_ended(&h, 3000));
	assert_string_equal(h.why, "poisoned"); /* the layer's own text */
	uint8_t c;
	assert_true(recv(h.app_b, &c, 1, 0) <= 0); /* closed (EOF or reset) */
	assert_true(recv(h.app_a, &c, 1, 0) <= 0);
	finish(&h);
}

/* Past RELAY_SPLICE_AFTER with nothing in flight, two plain ends move to
 * splice(2); the bytes stay whole and in order. */
static void splice_hand_off(void **state)
{
	(void)state;
	harness h;
	start(&h, false, NULL, NULL, (relay_config){.splice = true});
	/* request and answer, so nothing is in flight between them */
	for (int i = 0; i < 8; i++) {
		send_pattern(h.app_a, 32768);
		expect_pattern(h.app_b, 32768);
	}
	worker_run(h.w, probe_on_worker, &h);
	assert_true(atomic_load(&h.spliced));
	sender s;
	send_async(&s, h.app_b, 1 << 20);
	expect_pattern(h.app_a, 1 << 20);
	send_join(&s);
	assert_int_equal(shutdown(h.app_a, SHUT_WR), 0);
	expect_eof(h.app_b);
	assert_int_equal(shutdown(h.app_b, SHUT_WR), 0);
	expect_eof(h.app_a);
	assert_true(wait_ended(&h, 3000));
	assert_string_equal(h.why, "");
	finish(&h);
}

/* Without splice, the same flow stays buffered. */
static void no_splice_when_off(void **state)
{
	(void)state;
	harness h;
	start(&h, false, NULL, NULL, (relay_config){0});
	for (int i = 0; i < 8; i++) {
		send_pattern(h.app_a, 32768);
		expect_pattern(h.app_b, 32768);
	}
	worker_run(h.w, probe_on_worker, &h);
	assert_false(atomic_load(&h.spliced));
	finish(&h);
}

/* No byte either way for idle_ms: the relay ends with "idle" and both
 * clients see the close; traffic keeps it alive. */
static void idle_end(void **state)
{
	(void)state;
	harness h;
	start(&h, false, NULL, NULL, (relay_config){.idle_ms = 300});
	for (int i = 0; i < 5; i++) { /* 5 x 100 ms of traffic: past idle_ms in all */
		assert_int_equal(send(h.app_a, "k", 1, 0), 1);
		expect_text(h.app_b, "k");
		usleep(100000);
	}
	assert_false(atomic_load(&h.ended));
	assert_true(wait_ended(&h, 2000));
	assert_string_equal(h.why, RELAY_IDLE_TEXT);
	uint8_t c;
	assert_true(recv(h.app_b, &c, 1, 0) <= 0);
	finish(&h);
}

/* A layer with a timer of its own is told the time by its endpoint: its
 * ticks reach the peer with no other traffic, TICK_MS apart. */
static void layer_deadlines(void **state)
{
	(void)state;
	harness h;
	start(&h, false, ticking(), NULL, (relay_config){0});
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	char want[4 * TICKS + 1] = "";
	for (int i = 0; i < TICKS; i++)
		strcat(want, "tick");
	expect_text(h.app_a, want);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
	assert_true(ms >= (TICKS - 1) * TICK_MS - 5);
	/* and the flow still carries bytes both ways */
	assert_int_equal(send(h.app_b, "pong", 4, 0), 4);
	expect_text(h.app_a, "pong");
	finish(&h);
}

/* ---- a dialled endpoint: layers put on, their handshake, the hand-over ---- */

typedef struct dialled {
	harness h;
	endpoint *e;
	atomic_int readies; /* events that found the endpoint ready */
	atomic_int events;
} dialled;

static void dialled_event(void *ud)
{
	dialled *d = ud;
	atomic_fetch_add(&d->events, 1);
	if (endpoint_ready(d->e))
		atomic_fetch_add(&d->readies, 1);
}

static void dialled_error(void *ud, const char *why)
{
	(void)ud;
	fail_msg("unexpected endpoint error: %s", why);
}

static const endpoint_events dialled_events = {
	.on_readable = dialled_event,
	.on_writable = dialled_event,
	.on_error = dialled_error,
};

/* A worker and two loopback pairs, nothing on them yet. */
static void dialled_init(dialled *d)
{
	memset(d, 0, sizeof *d);
	char err[128];
	d->h.ws = workers_start(1, err, sizeof err);
	assert_non_null(d->h.ws);
	d->h.w = workers_at(d->h.ws, 0);
	tcp_pair(&d->h.app_a, &d->h.srv_a, false);
	tcp_pair(&d->h.app_b, &d->h.srv_b, false);
}

static void put_layers_on_worker(worker *w, void *arg)
{
	dialled *d = arg;
	d->e = wrap(w, d->h.srv_a, NULL); /* as a TCP dial hands it over: plain */
	endpoint_set_events(d->e, &dialled_events, d);
	assert_true(endpoint_ready(d->e)); /* no layers: nothing to wait for */
	assert_int_equal(endpoint_start(d->e, greeting()), 0);
	assert_false(endpoint_ready(d->e));
	assert_false(endpoint_plain(d->e));
	endpoint_want_read(d->e, true);
}

static void hand_over_on_worker(worker *w, void *arg)
{
	dialled *d = arg;
	assert_true(endpoint_ready(d->e));
	endpoint_want_read(d->e, false);
	d->h.r = relay_start(w, d->e, wrap(w, d->h.srv_b, NULL), &d->h.cfg, &events, &d->h);
	assert_non_null(d->h.r);
}

/* endpoint_start puts a stack on a plain endpoint and sends its first
 * bytes; the endpoint is ready only once the peer's answer came and every
 * write is out. App bytes the peer sent with its answer wait in the
 * endpoint and reach the relay that takes it over (a proxy dial's early
 * data). */
static void layers_put_on_a_dialled_endpoint(void **state)
{
	(void)state;
	dialled d;
	dialled_init(&d);
	worker_run(d.h.w, put_layers_on_worker, &d);
	expect_text(d.h.app_a, "HELLO");
	assert_int_equal(atomic_load(&d.readies), 0);
	assert_int_equal(send(d.h.app_a, "OKearly", 7, 0), 7);
	for (int i = 0; i < 300 && !atomic_load(&d.readies); i++)
		usleep(10000);
	assert_true(atomic_load(&d.readies) > 0);
	worker_run(d.h.w, hand_over_on_worker, &d);
	expect_text(d.h.app_b, "early");
	assert_int_equal(send(d.h.app_b, "back", 4, 0), 4);
	expect_text(d.h.app_a, "back");
	finish(&d.h);
}

/* A second stack on an endpoint that already carries one is refused, with
 * the endpoint's own text. */
static void second_start_on_worker(worker *w, void *arg)
{
	dialled *d = arg;
	d->e = wrap(w, d->h.srv_a, NULL);
	assert_int_equal(endpoint_start(d->e, greeting()), 0);
	assert_int_equal(endpoint_start(d->e, greeting()), -1);
	assert_string_equal(endpoint_error(d->e), "layers put on an endpoint already in use");
	endpoint_close(d->e, false);
}

static void a_second_stack_is_refused(void **state)
{
	(void)state;
	dialled d;
	dialled_init(&d);
	close(d.h.srv_b);
	worker_run(d.h.w, second_start_on_worker, &d);
	workers_stop(d.h.ws, NULL, NULL);
	close(d.h.app_a);
	close(d.h.app_b);
}

/* Issue 32: endpoint_send_all hands a stacked endpoint far more than its
 * layers hold (a reply body written by an inbound of its own). It takes it
 * all, holds what does not fit, lets nothing pass ahead of it, and the
 * layers' end and the FIN follow the last held byte. Before, it failed
 * ("a write does not fit the layers") and the connection closed. */
#define HOLD_FIRST (1u << 20)
#define HOLD_SECOND (64u * 1024)

static void send_all_on_worker(worker *w, void *arg)
{
	dialled *d = arg;
	d->e = wrap(w, d->h.srv_a, layered(false));
	endpoint_set_events(d->e, &dialled_events, d);
	uint8_t *buf = malloc(HOLD_FIRST + HOLD_SECOND);
	assert_non_null(buf);
	for (size_t i = 0; i < HOLD_FIRST + HOLD_SECOND; i++)
		buf[i] = pat(i);
	assert_int_equal(endpoint_send_all(d->e, buf, HOLD_FIRST), 0);
	assert_true(endpoint_held(d->e) > 0);
	assert_true(endpoint_queued(d->e) >= endpoint_held(d->e));
	assert_false(endpoint_can_send(d->e)); /* the held bytes go first */
	assert_int_equal(endpoint_send_room(d->e), 0);
	assert_false(endpoint_idle(d->e));
	assert_int_equal(endpoint_send_all(d->e, buf + HOLD_FIRST, HOLD_SECOND), 0);
	free(buf); /* copied */
	assert_int_equal(endpoint_shutdown(d->e), 0);
	assert_false(endpoint_shut_done(d->e));
}

static void close_on_worker(worker *w, void *arg)
{
	(void)w;
	dialled *d = arg;
	assert_int_equal(endpoint_held(d->e), 0);
	assert_true(endpoint_idle(d->e));
	endpoint_close(d->e, false);
}

static void send_all_holds_what_the_layers_cannot_take(void **state)
{
	(void)state;
	dialled d;
	dialled_init(&d);
	close(d.h.srv_b);
	small_buffers(d.h.app_a);
	worker_run(d.h.w, send_all_on_worker, &d);
	expect_pattern(d.h.app_a, HOLD_FIRST + HOLD_SECOND);
	expect_eof(d.h.app_a);
	worker_run(d.h.w, close_on_worker, &d);
	workers_stop(d.h.ws, NULL, NULL);
	close(d.h.app_a);
	close(d.h.app_b);
}

/* ---- the flow's record (tracker.h) ---- */

static uint64_t fixed_clock(void) { return 42; }

typedef struct track_probe {
	harness *h;
	uint64_t up, down;
	size_t open, closed;
	char why[TRACK_NAME_MAX];
} track_probe;

static void read_track_on_worker(worker *w, void *arg)
{
	(void)w;
	track_probe *p = arg;
	p->open = tracker_open_count(p->h->track);
	p->closed = tracker_closed_count(p->h->track);
	const track_flow *f = p->open ? LIST_ENTRY(tracker_open_list(p->h->track)->head, track_flow, node)
	                              : tracker_closed_at(p->h->track, 0);
	track_bytes(f, &p->up, &p->down);
	snprintf(p->why, sizeof p->why, "%s", f->why);
}

static bool any_flow(const track_flow *f, void *arg) { return (void)f, (void)arg, true; }

static void kill_on_worker(worker *w, void *arg)
{
	(void)w;
	harness *h = arg;
	assert_int_equal(tracker_kill(h->track, any_flow, NULL, "the flow was killed"), 1);
}

/* The upstream's record counts the app bytes each way, the splicer's too
 * after a hand-off, and a kill ends the relay with its why. */
static void tracked(bool splice)
{
	harness h;
	memset(&h, 0, sizeof h);
	char err[128];
	h.ws = workers_start(1, err, sizeof err);
	assert_non_null(h.ws);
	h.w = workers_at(h.ws, 0);
	h.track = tracker_new(0, fixed_clock);
	tcp_pair(&h.app_a, &h.srv_a, false);
	tcp_pair(&h.app_b, &h.srv_b, false);
	h.cfg = (relay_config){.splice = splice};
	worker_run(h.w, setup_on_worker, &h);
	size_t up = 0, down = 0;
	for (int i = 0; i < 8; i++) { /* past RELAY_SPLICE_AFTER, in steps */
		send_pattern(h.app_a, 32768);
		expect_pattern(h.app_b, 32768);
		up += 32768;
	}
	send_pattern(h.app_b, 5000);
	expect_pattern(h.app_a, 5000);
	down += 5000;
	worker_run(h.w, probe_on_worker, &h);
	assert_int_equal(atomic_load(&h.spliced), splice);
	send_pattern(h.app_a, 70000);
	expect_pattern(h.app_b, 70000);
	up += 70000;
	track_probe p = {.h = &h};
	worker_run(h.w, read_track_on_worker, &p);
	assert_int_equal(p.open, 1);
	assert_int_equal(p.up, up);
	assert_int_equal(p.down, down);
	worker_run(h.w, kill_on_worker, &h);
	assert_true(wait_ended(&h, 3000));
	assert_string_equal(h.why, "the flow was killed");
	worker_run(h.w, read_track_on_worker, &p);
	assert_int_equal(p.open, 0);
	assert_int_equal(p.closed, 1);
	assert_int_equal(p.up, up);
	assert_int_equal(p.down, down);
	assert_string_equal(p.why, "the flow was killed");
	finish(&h);
}

static void tracked_buffered(void **state) { (void)state, tracked(false); }
static void tracked_spliced(void **state) { (void)state, tracked(true); }

/* ---- a proxy client's framing on the upstream (issue 21) ---- */

static const uint8_t VLESS_ID[VLESS_UUID_LEN] = {0x6c, 0x1b, 0x0e, 0x6a, 0x6e, 0x3d, 0x4c, 0x1e,
                                                 0x9d, 0x8a, 0x1a, 0x2b, 0x3c, 0x4d, 0x5e, 0x6f};
static const addr_dest TARGET = {.kind = ADDR_IPV4, .network = ADDR_TCP, .port = 80,
                                 .u.v4 = {192, 0, 2, 1}};
/* Version, id, no addons, command, port, IPv4 and its address. */
#define VLESS_REQ_LEN (1 + VLESS_UUID_LEN + 1 + 1 + 2 + 1 + 4)
/* The password's hash, CRLF, command, IPv4 address and port, CRLF. */
#define TROJAN_REQ_LEN (TROJAN_HASH_LEN + 2 + 1 + 1 + 4 + 2 + 2)

static uint64_t wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void start_framed(harness *h, layer *l)
{
	memset(h, 0, sizeof *h);
	char err[128];
	h->ws = workers_start(1, err, sizeof err);
	assert_non_null(h->ws);
	h->w = workers_at(h->ws, 0);
	h->track = tracker_new(0, wall_ms);
	tcp_pair(&h->app_a, &h->srv_a, false);
	tcp_pair(&h->app_b, &h->srv_b, false);
	h->cfg = (relay_config){.splice = true};
	h->b_layer = l;
	worker_run(h->w, setup_on_worker, h);
}

static bool b_plain(harness *h)
{
	worker_run(h->w, probe_plain_on_worker, h);
	return atomic_load(&h->b_plain);
}

static bool spliced(harness *h)
{
	worker_run(h->w, probe_on_worker, h);
	return atomic_load(&h->spliced);
}

/* Reads the request a client layer sent the test's "server" (app_b). */
static void expect_request(int fd, size_t n)
{
	uint8_t buf[128];
	size_t got = 0;
	assert_true(n <= sizeof buf);
	while (got < n) {
		ssize_t k = recv(fd, buf + got, n - got, 0);
		assert_true(k > 0);
		got += (size_t)k;
	}
}

/* The upstream carries a proxy client's framing: the endpoint stays layered
 * until the framing is through (vless: the response header; trojan: the
 * request alone), then it is plain and the flow goes to splice(2) past
 * RELAY_SPLICE_AFTER, as socks -> freedom does. The bytes stay whole and
 * in order, and the record counts the app bytes each way, framing not
 * included, across the hand-off. */
static void framing_then_splice(bool vless)
{
	harness h;
	uint8_t hash[TROJAN_HASH_LEN];
	assert_int_equal(trojan_password_hash("pw", (char *)hash), 0);
	start_framed(&h, vless ? vless_client_new(VLESS_ID, &TARGET, false)
	                       : trojan_client_new(hash, &TARGET));
	expect_request(h.app_b, vless ? VLESS_REQ_LEN : TROJAN_REQ_LEN);
	assert_int_equal(send(h.app_a, "ping", 4, 0), 4);
	expect_text(h.app_b, "ping");
	size_t up = 4, down = 4;
	if (vless) {
		assert_false(b_plain(&h)); /* no response header yet */
		assert_int_equal(send(h.app_b, "\0\0pong", 6, 0), 6);
	} else {
		assert_true(b_plain(&h)); /* the request is out: Trojan answers nothing */
		assert_int_equal(send(h.app_b, "pong", 4, 0), 4);
	}
	expect_text(h.app_a, "pong");
	assert_true(b_plain(&h));
	assert_false(spliced(&h));
	for (int i = 0; i < 8; i++) { /* past RELAY_SPLICE_AFTER, nothing in flight after each */
		send_pattern(h.app_a, 32768);
		expect_pattern(h.app_b, 32768);
		up += 32768;
	}
	assert_true(spliced(&h));
	sender s;
	send_async(&s, h.app_b, 1 << 20);
	expect_pattern(h.app_a, 1 << 20);
	send_join(&s);
	down += 1 << 20;
	track_probe p = {.h = &h};
	worker_run(h.w, read_track_on_worker, &p);
	assert_int_equal(p.open, 1);
	assert_int_equal(p.up, up);
	assert_int_equal(p.down, down);
	assert_int_equal(shutdown(h.app_a, SHUT_WR), 0);
	expect_eof(h.app_b);
	assert_int_equal(shutdown(h.app_b, SHUT_WR), 0);
	expect_eof(h.app_a);
	assert_true(wait_ended(&h, 3000));
	assert_string_equal(h.why, "");
	worker_run(h.w, read_track_on_worker, &p);
	assert_int_equal(p.closed, 1);
	assert_int_equal(p.up, up);
	assert_int_equal(p.down, down);
	finish(&h);
}

static void vless_upstream_splices(void **state) { (void)state, framing_then_splice(true); }
static void trojan_upstream_splices(void **state) { (void)state, framing_then_splice(false); }

/* A layer that never says it passes bytes through (TLS, the toy poison
 * layer here) keeps the endpoint layered and the flow buffered. */
static void a_transforming_layer_stays(void **state)
{
	(void)state;
	harness h;
	poison_layer *l = malloc(sizeof *l);
	assert_non_null(l);
	*l = (poison_layer){.base.ops = &poison_ops};
	start_framed(&h, &l->base);
	for (int i = 0; i < 8; i++) {
		send_pattern(h.app_a, 32768);
		expect_pattern(h.app_b, 32768);
	}
	assert_false(b_plain(&h));
	assert_false(spliced(&h));
	finish(&h);
}

/* A user's flow is spliced too, and a rate set after the hand-off still
 * paces it: the transfer takes at least (bytes - burst) / rate. */
#define PACE_RATE 400000
#define PACE_BYTES 600000

static void a_users_spliced_flow_is_paced(void **state)
{
	(void)state;
	harness h;
	principal *who = principal_new("alice", 0, 0, 0);
	assert_non_null(who);
	memset(&h, 0, sizeof h);
	char err[128];
	h.ws = workers_start(1, err, sizeof err);
	assert_non_null(h.ws);
	h.w = workers_at(h.ws, 0);
	h.track = tracker_new(0, wall_ms);
	h.who = who;
	tcp_pair(&h.app_a, &h.srv_a, false);
	tcp_pair(&h.app_b, &h.srv_b, false);
	h.cfg = (relay_config){.splice = true};
	worker_run(h.w, setup_on_worker, &h);
	for (int i = 0; i < 8; i++) {
		send_pattern(h.app_a, 32768);
		expect_pattern(h.app_b, 32768);
	}
	assert_true(spliced(&h));
	principal_set_limits(who, 0, PACE_RATE, 0);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	sender s;
	send_async(&s, h.app_b, PACE_BYTES);
	expect_pattern(h.app_a, PACE_BYTES);
	send_join(&s);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	double burst = (double)PACE_RATE * PRINCIPAL_BURST_MS / 1000;
	assert_true(took >= (PACE_BYTES - burst) / PACE_RATE * 0.9);
	assert_true(spliced(&h));
	/* lifted: the next transfer is not held */
	principal_set_limits(who, 0, 0, 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	send_async(&s, h.app_b, PACE_BYTES);
	expect_pattern(h.app_a, PACE_BYTES);
	send_join(&s);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double fast = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	assert_true(fast < took);
	finish(&h);
	principal_release(who);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(plain_both_ways),
		cmocka_unit_test(layered_both_ways),
		cmocka_unit_test(plain_backpressure),
		cmocka_unit_test(layered_backpressure),
		cmocka_unit_test(eof_behind_queued_writes),
		cmocka_unit_test(layer_error_mid_stream),
		cmocka_unit_test(splice_hand_off),
		cmocka_unit_test(no_splice_when_off),
		cmocka_unit_test(idle_end),
		cmocka_unit_test(layer_deadlines),
		cmocka_unit_test(layers_put_on_a_dialled_endpoint),
		cmocka_unit_test(a_second_stack_is_refused),
		cmocka_unit_test(send_all_holds_what_the_layers_cannot_take),
		cmocka_unit_test(tracked_buffered),
		cmocka_unit_test(tracked_spliced),
		cmocka_unit_test(vless_upstream_splices),
		cmocka_unit_test(trojan_upstream_splices),
		cmocka_unit_test(a_transforming_layer_stays),
		cmocka_unit_test(a_users_spliced_flow_is_paced),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
