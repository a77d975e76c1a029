/* fuzz_inbound.c - libFuzzer target: client bytes over loopback TCP into the inbound dispatch and the connection shell (socks, http, mixed, trojan, vless, vmess, plain and over WebSocket) on a live worker. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "base/log.h"
#include "inbound/inbound.h"
#include "runtime/connector.h"
#include "runtime/listener.h"
#include "runtime/worker.h"
#include "supervisor/build_inbound.h"

/* The whole inbound path as the app runs it: a worker thread with its
 * loop, a listener per inbound built from a spec (build_inbound), and
 * inbound_accept with the conn shell behind it. The connector is this
 * file's: each dial fails at once, is refused by a closed loopback port,
 * is a blackhole, is refused by a rule or times out, or reaches a loopback
 * upstream that answers with the input's script and closes. The fuzzer's
 * bytes go in from a real client socket, whole or in pieces; then the
 * client half-closes and reads to the end, or resets.
 *
 * Input: config, how, L, L bytes of the upstream's script, the client's bytes.
 *   how bits 0-2: the dial outcome; bit 3: the client's bytes come after a
 *   valid credential prefix (Trojan: the password's hash and CRLF; VLESS:
 *   version, UUID, no addons); bit 4: on a WebSocket inbound, the bytes go
 *   after a valid upgrade, in masked binary frames; bits 5-6: piece size;
 *   bit 7: the client resets instead of half-closing.
 *
 * Checked (besides ASan, UBSan and LSan on the worker): once the client is
 * gone, every connection, dial, upstream socket and datagram link ends
 * within QUIET_MS (the handshake and idle timeouts are one second): none
 * is left behind. */

#define CHECK(x)                                                                                   \
	do {                                                                                       \
		if (!(x))                                                                          \
			abort();                                                                   \
	} while (0)

#define TIMEOUT_MS 1000
#define QUIET_MS (3 * TIMEOUT_MS)
#define READ_IDLE_MS 20   /* the client stops reading after this much silence... */
#define READ_TOTAL_MS 200 /* ...or this much in all */
#define SCRIPT_MAX 256
#define WRAP_MAX (16 * 1024)

enum outcome { D_SYNC_FAIL, D_REFUSED, D_BLACKHOLE, D_OK, D_NOT_ALLOWED, D_TIMED_OUT, D_OK2, D_OK3 };

static const size_t PIECES[4] = {0, 1, 7, 100}; /* 0: everything at once */

/* ---- the inbounds ---- */

static etm_user_spec SOCKS_USERS[] = {{.username = (char *)"u", .password = (char *)"p"}};
static etm_user_spec TROJAN_USERS[] = {{.password = (char *)"secret"}};
static etm_user_spec VLESS_USERS[] = {{.id = (char *)"b831381d-6324-4d53-ad4f-8cda48b30811"}};

#define SPEC(tag_, proto_, users_, n_users_, sniff_, net_, path_, fallback_)                      \
	{.tag = (char *)(tag_), .protocol = (proto_), .listen = (char *)"127.0.0.1",               \
	 .sniffing = (sniff_),                                                                      \
	 .settings = {.users = (users_), .users_len = (n_users_), .fallback = (char *)(fallback_)}, \
	 .stream = {.network = (net_), .ws = {.path = (char *)(path_)}}}

static etm_inbound_spec SPECS[] = {
	SPEC("socks", ETM_PROTO_SOCKS, NULL, 0, false, ETM_NET_TCP, NULL, NULL),
	SPEC("socks-auth", ETM_PROTO_SOCKS, SOCKS_USERS, 1, false, ETM_NET_TCP, NULL, NULL),
	SPEC("http", ETM_PROTO_HTTP, NULL, 0, false, ETM_NET_TCP, NULL, NULL),
	SPEC("http-auth", ETM_PROTO_HTTP, SOCKS_USERS, 1, false, ETM_NET_TCP, NULL, NULL),
	SPEC("mixed-sniff", ETM_PROTO_MIXED, NULL, 0, true, ETM_NET_TCP, NULL, NULL),
	SPEC("mixed-auth", ETM_PROTO_MIXED, SOCKS_USERS, 1, false, ETM_NET_TCP, NULL, NULL),
	SPEC("trojan-fb", ETM_PROTO_TROJAN, TROJAN_USERS, 1, false, ETM_NET_TCP, NULL,
	     "127.0.0.1:1"),
	SPEC("trojan", ETM_PROTO_TROJAN, TROJAN_USERS, 1, false, ETM_NET_TCP, NULL, NULL),
	SPEC("vless", ETM_PROTO_VLESS, VLESS_USERS, 1, false, ETM_NET_TCP, NULL, NULL),
	SPEC("vless-ws", ETM_PROTO_VLESS, VLESS_USERS, 1, false, ETM_NET_WS, "/ws", NULL),
	SPEC("trojan-ws", ETM_PROTO_TROJAN, TROJAN_USERS, 1, false, ETM_NET_WS, "/t", "127.0.0.1:1"),
	SPEC("socks-sniff", ETM_PROTO_SOCKS, NULL, 0, true, ETM_NET_TCP, NULL, NULL),
	SPEC("http-sniff", ETM_PROTO_HTTP, NULL, 0, true, ETM_NET_TCP, NULL, NULL),
	SPEC("vmess", ETM_PROTO_VMESS, VLESS_USERS, 1, false, ETM_NET_TCP, NULL, NULL),
};
#define N_SPECS (sizeof SPECS / sizeof SPECS[0])

static workers *g_ws;
static worker *g_w;
static connector g_conn;
static inbound_rt g_rt[N_SPECS];
static listener *g_listeners[N_SPECS];
static uint16_t g_ports[N_SPECS];
static uv_tcp_t g_script_srv;
static uint16_t g_script_port, g_closed_port;

/* Per input; written by worker_run before the client connects, read on the
 * worker thread only. */
static enum outcome g_outcome;
static uint8_t g_script[SCRIPT_MAX];
static size_t g_script_len;
static size_t g_live; /* this file's handles and links still open */

/* ---- the upstream: answers with the script, then closes ---- */

typedef struct upstream {
	uv_tcp_t tcp;
	uv_write_t wr;
	uv_shutdown_t sh;
	uint8_t buf[SCRIPT_MAX];
	uint8_t rbuf[4096];
} upstream;

static void upstream_closed(uv_handle_t *h)
{
	free(h->data);
	g_live--;
}

static void upstream_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
	(void)suggested;
	upstream *u = h->data;
	*b = uv_buf_init((char *)u->rbuf, sizeof u->rbuf);
}

static void upstream_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
	(void)b;
	if (n < 0 && !uv_is_closing((uv_handle_t *)s))
		uv_close((uv_handle_t *)s, upstream_closed);
}

static void upstream_shut(uv_shutdown_t *req, int status)
{
	(void)req;
	(void)status;
}

static void upstream_wrote(uv_write_t *req, int status)
{
	(void)req;
	(void)status;
}

static void on_upstream(uv_stream_t *srv, int status)
{
	if (status < 0)
		return;
	upstream *u = calloc(1, sizeof *u);
	CHECK(u);
	CHECK(uv_tcp_init(srv->loop, &u->tcp) == 0);
	u->tcp.data = u;
	g_live++;
	if (uv_accept(srv, (uv_stream_t *)&u->tcp)) {
		uv_close((uv_handle_t *)&u->tcp, upstream_closed);
		return;
	}
	memcpy(u->buf, g_script, g_script_len);
	uv_buf_t b = uv_buf_init((char *)u->buf, (unsigned)g_script_len);
	if ((g_script_len && uv_write(&u->wr, (uv_stream_t *)&u->tcp, &b, 1, upstream_wrote)) ||
	    uv_shutdown(&u->sh, (uv_stream_t *)&u->tcp, upstream_shut) ||
	    uv_read_start((uv_stream_t *)&u->tcp, upstream_alloc, upstream_read))
		uv_close((uv_handle_t *)&u->tcp, upstream_closed);
}

/* ---- the connector ---- */

typedef struct dial {
	connect_pending base;
	connect_cb cb;
	void *data;
	uv_tcp_t *tcp; /* malloc'd: handed over on success */
	uv_connect_t req;
	uv_timer_t timer;
	enum outcome kind;
	bool cancelled, done;
	int handles;
} dial;

static void dial_handle_closed(uv_handle_t *h)
{
	dial *d = h->data;
	if (h != (uv_handle_t *)&d->timer)
		free(h);
	if (--d->handles == 0) {
		free(d);
		g_live--;
	}
}

static void dial_end(dial *d)
{
	if (!uv_is_closing((uv_handle_t *)&d->timer))
		uv_close((uv_handle_t *)&d->timer, dial_handle_closed);
	if (d->tcp && !uv_is_closing((uv_handle_t *)d->tcp))
		uv_close((uv_handle_t *)d->tcp, dial_handle_closed);
}

static void dial_cancel(connect_pending *p)
{
	dial *d = (dial *)p;
	CHECK(!d->done && !d->cancelled); /* cancelled once, and never after its callback */
	d->cancelled = true;
	dial_end(d);
}

static void dial_report(dial *d, const connect_result *r)
{
	CHECK(!d->done);
	d->done = true;
	d->cb(r, d->data);
}

static void on_dial_timer(uv_timer_t *t)
{
	dial *d = t->data;
	switch (d->kind) {
	case D_BLACKHOLE:
		dial_report(d, &(connect_result){.ok = true, .blackhole = true});
		break;
	case D_NOT_ALLOWED:
		dial_report(d, &(connect_result){.err = PROTO_DIAL_NOT_ALLOWED, .msg = "blocked"});
		break;
	default:
		dial_report(d, &(connect_result){.err = PROTO_DIAL_TIMED_OUT, .msg = "timed out"});
		break;
	}
	dial_end(d);
}

static void on_dial_connect(uv_connect_t *req, int status)
{
	dial *d = req->data;
	if (d->cancelled)
		return; /* its handle is closing */
	if (status < 0) {
		dial_report(d, &(connect_result){.err = status == UV_ECONNREFUSED ? PROTO_DIAL_REFUSED
		                                                                   : PROTO_DIAL_GENERAL,
		                                 .msg = uv_strerror(status)});
		dial_end(d);
		return;
	}
	uv_tcp_t *up = d->tcp;
	d->tcp = NULL; /* the connection's now */
	d->handles--;
	endpoint *ep = endpoint_new(g_w, up, NULL, NULL, NULL);
	CHECK(ep);
	dial_report(d, &(connect_result){.ok = true, .ep = ep});
	dial_end(d);
}

static connect_pending *dial_start(worker *w, connect_cb cb, void *data)
{
	enum outcome kind = g_outcome;
	if (kind == D_SYNC_FAIL) {
		cb(&(connect_result){.err = PROTO_DIAL_HOST_UNREACHABLE, .msg = "no such host"}, data);
		return NULL;
	}
	dial *d = calloc(1, sizeof *d);
	CHECK(d);
	*d = (dial){.base.cancel = dial_cancel, .cb = cb, .data = data, .kind = kind, .handles = 1};
	uv_loop_t *loop = worker_loop(w);
	CHECK(uv_timer_init(loop, &d->timer) == 0);
	d->timer.data = d;
	g_live++;
	if (kind == D_BLACKHOLE || kind == D_NOT_ALLOWED || kind == D_TIMED_OUT) {
		CHECK(uv_timer_start(&d->timer, on_dial_timer, 0, 0) == 0);
		return &d->base;
	}
	struct sockaddr_in to;
	bool ok = kind == D_OK || kind == D_OK2 || kind == D_OK3;
	CHECK(uv_ip4_addr("127.0.0.1", ok ? g_script_port : g_closed_port, &to) == 0);
	d->tcp = malloc(sizeof *d->tcp);
	CHECK(d->tcp && uv_tcp_init(loop, d->tcp) == 0);
	d->tcp->data = d;
	d->handles++;
	d->req.data = d;
	CHECK(uv_tcp_connect(&d->req, d->tcp, (const struct sockaddr *)&to, on_dial_connect) == 0);
	return &d->base;
}

static connect_pending *fake_connect(void *self, worker *w, const flow *f, const flow_ctx *ctx,
                                     connect_cb cb, void *data)
{
	(void)self;
	CHECK(f->dest.kind != ADDR_NONE && ctx->inbound_tag != NULL);
	return dial_start(w, cb, data);
}

static connect_pending *fake_connect_direct(void *self, worker *w, const addr_dest *dest,
                                            connect_cb cb, void *data)
{
	(void)self;
	CHECK(dest->kind != ADDR_NONE);
	return dial_start(w, cb, data);
}

/* A datagram link that drops what it is given. */
typedef struct sink_link {
	dgram_link base;
	size_t sent;
} sink_link;

static int sink_send(dgram_link *l, const addr_dest *to, const uint8_t *data, size_t len)
{
	CHECK(to->network == ADDR_UDP && (len == 0 || data != NULL) && len <= DGRAM_MAX);
	((sink_link *)l)->sent += len;
	return 0;
}

static void sink_close(dgram_link *l)
{
	free(l);
	g_live--;
}

static const dgram_link_ops SINK_OPS = {.send_to = sink_send, .close = sink_close};

static dgram_link *fake_connect_datagram(void *self, worker *w, const flow *f, const flow_ctx *ctx,
                                         const dgram_handlers *h, void *ud, char *err,
                                         size_t err_size)
{
	(void)self, (void)w, (void)ctx, (void)ud;
	CHECK(f->dest.network == ADDR_UDP && h && h->recv);
	if (g_outcome != D_OK && g_outcome != D_OK2 && g_outcome != D_BLACKHOLE) {
		snprintf(err, err_size, "no route");
		return NULL;
	}
	sink_link *l = calloc(1, sizeof *l);
	CHECK(l);
	l->base.ops = &SINK_OPS;
	g_live++;
	return &l->base;
}

/* ---- set-up, on the worker ---- */

static void setup(worker *w, void *arg)
{
	(void)arg;
	char err[256];
	for (size_t i = 0; i < N_SPECS; i++) {
		g_listeners[i] = listener_open(w, "127.0.0.1", 0, inbound_accept, &g_rt[i], err,
		                               sizeof err);
		if (!g_listeners[i]) {
			fprintf(stderr, "fuzz_inbound: %s\n", err);
			abort();
		}
		g_ports[i] = listener_port(g_listeners[i]);
	}
	struct sockaddr_in a;
	struct sockaddr_storage ss;
	int len = sizeof ss;
	CHECK(uv_ip4_addr("127.0.0.1", 0, &a) == 0);
	CHECK(uv_tcp_init(worker_loop(w), &g_script_srv) == 0);
	CHECK(uv_tcp_bind(&g_script_srv, (const struct sockaddr *)&a, 0) == 0);
	CHECK(uv_listen((uv_stream_t *)&g_script_srv, 128, on_upstream) == 0);
	CHECK(uv_tcp_getsockname(&g_script_srv, (struct sockaddr *)&ss, &len) == 0);
	g_script_port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

/* A loopback port nobody listens on. */
static uint16_t closed_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(fd >= 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof a;
	CHECK(bind(fd, (struct sockaddr *)&a, sizeof a) == 0);
	CHECK(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
	CHECK(close(fd) == 0);
	return ntohs(a.sin_port);
}

static void init(void)
{
	char err[256];
	CHECK(signal(SIGPIPE, SIG_IGN) != SIG_ERR);
	FILE *null = fopen("/dev/null", "w");
	CHECK(null);
	log_set_stream(null);
	log_set_level(LOG_LEVEL_DEBUG); /* the debug lines' formatting runs too */
	g_conn = (connector){.connect = fake_connect, .connect_direct = fake_connect_direct,
	                     .connect_datagram = fake_connect_datagram};
	for (size_t i = 0; i < N_SPECS; i++) {
		conn_limits limits = {.handshake_ms = TIMEOUT_MS, .idle_ms = TIMEOUT_MS};
		if (build_inbound(&g_rt[i], &SPECS[i], &g_conn, &limits, err, sizeof err)) {
			fprintf(stderr, "fuzz_inbound: %s\n", err);
			abort();
		}
	}
	g_closed_port = closed_port();
	g_ws = workers_start(1, err, sizeof err);
	if (!g_ws) {
		fprintf(stderr, "fuzz_inbound: %s\n", err);
		abort();
	}
	g_w = workers_at(g_ws, 0);
	worker_run(g_w, setup, NULL);
}

typedef struct input_state {
	enum outcome outcome;
	const uint8_t *script;
	size_t script_len;
} input_state;

static void set_input(worker *w, void *arg)
{
	(void)w;
	const input_state *s = arg;
	/* g_live may be 1 already: a dial cancelled after the kernel connected
	 * it reaches the upstream's accept late (and closes at once) */
	g_outcome = s->outcome;
	g_script_len = s->script_len;
	memcpy(g_script, s->script, s->script_len);
}

static void is_quiet(worker *w, void *arg)
{
	*(bool *)arg = worker_conn_list(w)->n == 0 && g_live == 0;
}

/* ---- the client ---- */

static uint64_t now_ms(void)
{
	struct timespec t;
	CHECK(clock_gettime(CLOCK_MONOTONIC, &t) == 0);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

enum { S_DATA, S_IDLE, S_CLOSED };

/* Reads and drops what the proxy sent, waiting up to ms: S_DATA, S_IDLE
 * (nothing came), or S_CLOSED (EOF or an error: the proxy closed). */
static int drain_socket(int fd, int ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	int r = poll(&p, 1, ms);
	CHECK(r >= 0 || errno == EINTR);
	if (r <= 0)
		return S_IDLE;
	uint8_t buf[16384];
	ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
	if (n > 0)
		return S_DATA;
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return S_IDLE;
	return S_CLOSED;
}

static void client(uint16_t port, const uint8_t *p, size_t n, uint8_t how)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(fd >= 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
	                        .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	CHECK(connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
	int one = 1;
	CHECK(setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) == 0);
	size_t piece = PIECES[(how >> 5) & 3];
	bool open = true;
	uint64_t start = now_ms();
	for (size_t off = 0; off < n && open && now_ms() - start < READ_TOTAL_MS;) {
		size_t k = piece && piece < n - off ? piece : n - off;
		ssize_t w = send(fd, p + off, k, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w > 0)
			off += (size_t)w;
		else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			break; /* the proxy closed */
		open = drain_socket(fd, w > 0 ? 0 : 1) != S_CLOSED;
	}
	if (how & 0x80) {
		struct linger l = {.l_onoff = 1, .l_linger = 0}; /* close sends RST */
		CHECK(setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l) == 0);
	} else {
		(void)shutdown(fd, SHUT_WR); /* fails once the proxy reset us */
		uint64_t t0 = now_ms();
		while (open && now_ms() - t0 < READ_TOTAL_MS && drain_socket(fd, READ_IDLE_MS) == S_DATA)
			;
	}
	CHECK(close(fd) == 0);
}

/* The client's bytes as a WebSocket client sends them: the upgrade, then
 * masked binary frames of up to chunk bytes. */
static size_t ws_wrap(const char *path, const uint8_t *p, size_t n, size_t chunk, uint8_t *out,
                      size_t cap)
{
	int h = snprintf((char *)out, cap,
	                 "GET %s HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
	                 "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
	                 "Sec-WebSocket-Version: 13\r\n\r\n",
	                 path);
	CHECK(h > 0 && (size_t)h < cap);
	size_t o = (size_t)h;
	static const uint8_t key[4] = {0x37, 0xfa, 0x21, 0x3d};
	for (size_t off = 0; off < n;) {
		size_t k = n - off < chunk ? n - off : chunk;
		if (cap - o < k + 8)
			break;
		out[o++] = 0x82;
		if (k < 126) {
			out[o++] = (uint8_t)(0x80 | k);
		} else {
			out[o++] = 0x80 | 126;
			out[o++] = (uint8_t)(k >> 8);
			out[o++] = (uint8_t)k;
		}
		memcpy(out + o, key, 4);
		o += 4;
		for (size_t j = 0; j < k; j++)
			out[o + j] = p[off + j] ^ key[j & 3];
		o += k;
		off += k;
	}
	return o;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool ready;
	static uint8_t buf[WRAP_MAX], wrapped[WRAP_MAX + 4096];
	if (!ready) {
		init();
		ready = true;
	}
	if (size < 3)
		return 0;
	size_t cfg = data[0] % N_SPECS;
	uint8_t how = data[1];
	size_t script_len = data[2] < size - 3 ? data[2] : size - 3;
	input_state st = {.outcome = (enum outcome)(how & 7), .script = data + 3,
	                  .script_len = script_len};
	const uint8_t *body = data + 3 + script_len;
	size_t n = size - 3 - script_len;
	if (n > sizeof buf - 64)
		n = sizeof buf - 64;

	/* what a client that knows the credential sends first */
	size_t len = 0;
	const inbound_rt *rt = &g_rt[cfg];
	if ((how & 8) && rt->n_accounts && rt->protocol == INBOUND_PROTO_TROJAN) {
		memcpy(buf, rt->accounts, 56); /* the first account's hex(SHA-224) */
		memcpy(buf + 56, "\r\n", 2);
		len = 58;
	} else if ((how & 8) && rt->n_accounts && rt->protocol == INBOUND_PROTO_VLESS) {
		buf[0] = 0;
		memcpy(buf + 1, rt->accounts, 16); /* the first account's UUID */
		buf[17] = 0;
		len = 18;
	}
	memcpy(buf + len, body, n);
	len += n;
	const uint8_t *out = buf;
	if ((how & 0x10) && rt->ws_path) {
		len = ws_wrap(rt->ws_path, buf, len, 1 + (size_t)(how & 7) * 37, wrapped,
		              sizeof wrapped);
		out = wrapped;
	}

	worker_run(g_w, set_input, &st);
	client(g_ports[cfg], out, len, how);

	/* Every connection, dial and upstream ends once the client is gone. */
	bool quiet = false;
	uint64_t t0 = now_ms();
	for (;;) {
		worker_run(g_w, is_quiet, &quiet);
		if (quiet || now_ms() - t0 > QUIET_MS)
			break;
		CHECK(usleep(200) == 0 || errno == EINTR);
	}
	CHECK(quiet);
	return 0;
}
