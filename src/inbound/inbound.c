/* inbound.c - the driver of every inbound connection: runs its protocol's row (server_ops.h) and acts on what the core decides. */
#include "inbound/inbound.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/gun_conn.h"
#include "runtime/guard.h"
#include "transport/tls.h"
#include "transport/ws.h"
#include "inbound/http_in.h"
#include "inbound/server_ops.h"
#include "inbound/socks_in.h"
#include "inbound/ss_in.h"
#include "inbound/trojan_in.h"
#include "inbound/vless_in.h"
#include "inbound/vmess_in.h"

/* The rows, by the inbound's protocol. A new protocol is a module
 * <name>_in.{c,h}: the .c defines a `const inbound_proto_ops` with its
 * per-connection state's size, init and feed, and whichever optional steps
 * it needs (server_ops.h says what each must do and what NULL means;
 * stream_udp_in.h carries UDP framed in the stream); the .h declares it.
 * Then one #include, one inbound_protocol (inbound.h) and one row here;
 * etm_protocol_available (supervisor/spec.c) must also admit it as an
 * inbound, and supervisor/build_inbound.c map it. Mixed has no row of its
 * own: it is SOCKS or HTTP by the first byte (row_of), and neither keeps
 * accounts or a fallback. */
static const inbound_proto_ops *const rows[INBOUND_PROTO_COUNT_] = {
	[INBOUND_PROTO_SOCKS] = &socks_in_ops,
	[INBOUND_PROTO_HTTP] = &http_in_ops,
	[INBOUND_PROTO_TROJAN] = &trojan_in_ops,
	[INBOUND_PROTO_VLESS] = &vless_in_ops,
	[INBOUND_PROTO_VMESS] = &vmess_in_ops,
	[INBOUND_PROTO_SHADOWSOCKS] = &ss_in_ops,
};

enum { MSG_NOT_OPENED };
static const char *const msgs[] = {
	[MSG_NOT_OPENED] = "the client's sealed bytes after the request do not open",
};

/* The protocol's own row; NULL for mixed and for a protocol with none. */
static const inbound_proto_ops *row(inbound_protocol p)
{
	return (unsigned)p < INBOUND_PROTO_COUNT_ ? rows[p] : NULL;
}

/* The row serving a connection whose first byte is `first`. */
static const inbound_proto_ops *row_of(inbound_protocol p, uint8_t first)
{
	if (p == INBOUND_PROTO_MIXED) /* SOCKS4 and SOCKS5 open with their version */
		return first == 4 || first == 5 ? &socks_in_ops : &http_in_ops;
	return row(p);
}

/* The client's first byte: its row, the row's state and core. Returns 0,
 * or -1 with the connection closing. */
static int start(in_conn *ic, uint8_t first)
{
	const inbound_proto_ops *p = row_of(ic->in->protocol, first);
	void *state = p ? calloc(1, p->size) : NULL;
	if (!state) {
		conn_close(ic->c);
		return -1;
	}
	ic->ops = p;
	ic->state = state;
	if (p->init(ic)) {
		ic->ops = NULL;
		ic->state = NULL;
		free(state);
		conn_close(ic->c);
		return -1;
	}
	return 0;
}

/* ---- what the core decided ---- */

/* The dial is done and the client not yet answered: answer with the row's
 * failed or opened, then relay. */
static void connected(const connect_result *r, void *data)
{
	in_conn *ic = data;
	const inbound_proto_ops *p = ic->ops;
	ic->pending = NULL;
	if (!r->ok) {
		in_conn_log_end(ic, r->msg);
		if (!p->failed)
			conn_close(ic->c);
		else if (p->failed(ic, r->err, r->msg) == 0 && in_conn_flush(ic))
			conn_close_after_write(ic->c);
		return;
	}
	if (p->opened && (p->opened(ic, r) || !in_conn_flush(ic))) {
		/* hand the endpoint over so it is closed with the conn */
		conn_relay(ic->c, r->ep);
		conn_close(ic->c);
		return;
	}
	conn_relay(ic->c, r->ep); /* NULL is the blackhole: conn_relay swallows */
}

/* While a row with peek sniffs: the client's sealed bytes in[0, len)
 * opened, the plaintext so far sniffed. Returns the bytes consumed. */
static size_t peek(in_conn *ic, const uint8_t *in, size_t len)
{
	const uint8_t *plain = NULL;
	size_t plain_len = 0;
	ssize_t n = ic->ops->peek(ic, in, len, &plain, &plain_len);
	if (n < 0) {
		/* closed as the body would close it: no flow was dialled yet */
		in_conn_log_refused(ic, msgs[MSG_NOT_OPENED]);
		conn_close(ic->c);
		return 0;
	}
	if (plain_len > 0)
		in_conn_sniff_feed(ic, plain, plain_len);
	return (size_t)n;
}

/* The request is complete: a UDP association, or a stream opened now or
 * after a sniff of its first bytes. */
static void open_flow(in_conn *ic, const proto_event *ev)
{
	const inbound_proto_ops *p = ic->ops;
	if (ev->cmd == PROTO_CMD_UDP_ASSOCIATE && p->udp_open) {
		p->udp_open(ic, ev);
		return;
	}
	connect_cb cb = p->connected ? p->connected : connected;
	if (ic->in->sniffing && p->sniffs && p->sniffs(ic) && p->peek) {
		/* sealed bytes: opened as they come, answered after the dial */
		in_conn_sniff_then_open(ic, &ev->dest, ev->user, cb);
		peek(ic, NULL, 0); /* what came with the request may name the host */
		return;
	}
	if (ic->in->sniffing && p->sniffs && p->sniffs(ic)) {
		/* answered first; the flow's own failure then ends in a close */
		if (p->opened(ic, NULL) || !in_conn_flush(ic)) {
			conn_close(ic->c);
			return;
		}
		in_conn_sniff_then_open(ic, &ev->dest, ev->user, in_conn_relay_connected);
		return;
	}
	in_conn_open(ic, &ev->dest, ev->user, cb);
}

/* The core refused the client: its bytes go to the fallback if the row
 * wants that and the inbound has one; otherwise the row's refused ends it,
 * or, without one, a close. */
static void refuse(in_conn *ic, const char *why)
{
	const inbound_proto_ops *p = ic->ops;
	bool fallback = ic->in->has_fallback && p->wants_fallback && p->wants_fallback(ic);
	if (!fallback && p->refused) {
		p->refused(ic, why);
		return;
	}
	in_conn_log_refused(ic, why);
	if (fallback)
		in_conn_open_fallback(ic);
	else
		conn_close(ic->c);
}

/* ---- the driver ---- */

static void on_open(conn *c, void *drv)
{
	in_conn *ic = drv;
	ic->c = c;
}

static size_t on_data(conn *c, void *drv, const uint8_t *data, size_t len)
{
	(void)c;
	in_conn *ic = drv;
	if (ic->sniffing)
		return ic->ops->peek ? peek(ic, data, len) : in_conn_sniff_feed(ic, data, len);
	if (!ic->ops && start(ic, data[0]))
		return 0;
	size_t off = 0;
	while (off < len) {
		proto_event ev = {0};
		ssize_t n = ic->ops->feed(ic, data + off, len - off, &ev);
		if (n == INBOUND_FEED_GONE || !in_conn_flush(ic))
			return 0;
		if (n < 0 || ev.kind == PROTO_EV_CLOSE) {
			refuse(ic, ev.reason);
			return 0;
		}
		off += (size_t)n;
		if (ev.kind == PROTO_EV_OPEN) {
			open_flow(ic, &ev);
			return off;
		}
		if (n == 0)
			break;
	}
	return off;
}

static void on_close(conn *c, void *drv)
{
	(void)c;
	in_conn *ic = drv;
	if (ic->pending)
		ic->pending->cancel(ic->pending);
	if (ic->ops && ic->ops->free)
		ic->ops->free(ic);
	free(ic->state);
	if (ic->session) {
		session_close(ic->session);
		session_release(ic->session);
	}
	inbound_rt_release(ic->in);
	free(ic);
}

static bool on_client_end(conn *c, void *drv)
{
	(void)c;
	in_conn *ic = drv;
	if (ic->sniffing) {
		/* A FIN ends the sniff with what came: the flow opens and the FIN
		 * follows its bytes. */
		in_conn_sniff_give_up(ic);
		return false;
	}
	return ic->ops && ic->ops->client_end ? ic->ops->client_end(ic) : true;
}

static bool on_handshake_timeout(conn *c, void *drv)
{
	(void)c;
	in_conn *ic = drv;
	proto_event ev = {0};
	if (!ic->ops || !ic->ops->timeout || ic->pending || !ic->in->has_fallback ||
	    ic->ops->timeout(ic, &ev))
		return false;
	refuse(ic, ev.reason);
	return true;
}

static void on_deadline(conn *c, void *drv)
{
	(void)c;
	in_conn *ic = drv;
	if (ic->sniffing)
		in_conn_sniff_give_up(ic); /* the client sent nothing sniffable in time */
	else if (ic->draining)
		conn_close(ic->c); /* the drain of a refused client ends (in_conn_drain) */
}

static void on_written(conn *c, void *drv)
{
	(void)c;
	in_conn *ic = drv;
	if (ic->ops && ic->ops->written)
		ic->ops->written(ic);
}

static const conn_driver driver = {
	.on_open = on_open,
	.on_data = on_data,
	.on_client_end = on_client_end,
	.on_written = on_written,
	.on_deadline = on_deadline,
	.on_handshake_timeout = on_handshake_timeout,
	.on_close = on_close,
};

/* ---- gRPC: a connection whose every call is a flow ---- */

typedef struct gun_in {
	const inbound_rt *in; /* held */
	worker *w;
	struct sockaddr_storage peer;
	bool counted; /* peer holds one of the guard's counts */
} gun_in;

/* A call's endpoint becomes a client connection of the inbound. */
static void gun_accept(void *ud, endpoint *flow)
{
	gun_in *g = ud;
	in_conn *ic = calloc(1, sizeof *ic);
	if (!ic) {
		endpoint_close(flow, false);
		return;
	}
	ic->in = g->in;
	inbound_rt_hold(g->in);
	if (!conn_adopt(g->w, flow, &driver, ic, &g->in->limits)) {
		inbound_rt_release(g->in);
		free(ic);
	}
}

static void gun_release(void *ud)
{
	gun_in *g = ud;
	if (g->counted)
		guard_source_put(worker_guard(g->w), (struct sockaddr *)&g->peer);
	inbound_rt_release(g->in);
	free(g);
}

static void free_handle(uv_handle_t *h) { free(h); }

/* Serves fd's HTTP/2 connection (cst: its TLS, or NULL), counted against
 * its source as a connection is. */
static void serve_gun(worker *w, int fd, const inbound_rt *in, stack *cst)
{
	gun_in *g = calloc(1, sizeof *g);
	uv_tcp_t *tcp = malloc(sizeof *tcp);
	if (!g || !tcp) {
		free(g);
		free(tcp);
		stack_free(cst);
		close(fd);
		return;
	}
	g->w = w;
	socklen_t plen = sizeof g->peer;
	g->counted = getpeername(fd, (struct sockaddr *)&g->peer, &plen) == 0 && worker_guard(w);
	if (g->counted && !guard_source_take(worker_guard(w), (struct sockaddr *)&g->peer)) {
		free(g);
		free(tcp);
		stack_free(cst);
		close(fd);
		return;
	}
	g->in = in;
	inbound_rt_hold(in);
	uv_tcp_init(worker_loop(w), tcp);
	if (uv_tcp_open(tcp, fd)) {
		close(fd);
		uv_close((uv_handle_t *)tcp, free_handle);
		stack_free(cst);
		gun_release(g);
		return;
	}
	uv_tcp_nodelay(tcp, 1);
	endpoint *below = endpoint_new(w, tcp, cst, NULL, NULL); /* takes tcp and cst */
	if (!below || (cst && stack_start(cst) < 0)) {
		if (below)
			endpoint_close(below, true);
		gun_release(g);
		return;
	}
	gun_server_config cfg = {.service = in->grpc_service,
	                         .handshake_ms = in->limits.handshake_ms,
	                         .accept = gun_accept,
	                         .release = gun_release,
	                         .ud = g};
	(void)gun_serve(w, below, &cfg); /* -1: released already */
}

bool inbound_client_speaks_first(const inbound_rt *in)
{
	return in->protocol == INBOUND_PROTO_SOCKS || in->protocol == INBOUND_PROTO_HTTP ||
	       in->protocol == INBOUND_PROTO_MIXED;
}

void inbound_accept(listener *l, int fd, void *data)
{
	const inbound_rt *in = data;
	worker *w = listener_worker(l);
	if (in->grpc_service) {
		stack *cst = NULL;
		char err[200];
		layer *ly = NULL;
		if (in->tls && (!(cst = stack_new()) || !(ly = tls_server_new(in->tls, err, sizeof err)) ||
		                stack_push(cst, ly))) {
			stack_free(cst);
			close(fd);
			return;
		}
		serve_gun(w, fd, in, cst);
		return;
	}
	in_conn *ic = calloc(1, sizeof *ic);
	if (!ic) {
		close(fd);
		return;
	}
	ic->in = in;
	inbound_rt_hold(in);
	stack *cst = NULL;
	if (in->tls || in->ws_path) {
		char err[200];
		layer *ly;
		cst = stack_new();
		if (!cst)
			goto fail;
		if (in->tls) {
			ly = tls_server_new(in->tls, err, sizeof err);
			if (!ly || stack_push(cst, ly))
				goto fail;
		}
		if (in->ws_path) {
			ly = ws_server_new(in->ws_path, err, sizeof err);
			if (!ly || stack_push(cst, ly))
				goto fail;
		}

	}
	if (!conn_accept(w, fd, listener_peer(l), listener_nodelay(l), &driver, ic, &in->limits,
	                 cst)) {
		inbound_rt_release(in);
		free(ic);
	}
	return;
fail:
	stack_free(cst);
	inbound_rt_release(in);
	free(ic);
	close(fd);
}

/* ---- building an inbound ---- */

inbound_locked *inbound_locked_new(size_t size)
{
	inbound_locked *s = calloc(1, sizeof *s + size);
	if (s && pthread_mutex_init(&s->lock, NULL)) {
		free(s);
		return NULL;
	}
	return s;
}

void inbound_locked_free(void *p)
{
	inbound_locked *s = p;
	pthread_mutex_destroy(&s->lock);
	free(s);
}

enum { BUILD_REASON, BUILD_NO_MEMORY, BUILD_FALLBACK };
static const char *const build_msgs[] = {
	[BUILD_REASON] = "inbound %s: %s",
	[BUILD_NO_MEMORY] = "inbound %s: out of memory",
	[BUILD_FALLBACK] = "inbound %s: settings.fallback \"%s\" is not host:port",
};

/* in->logins: users' usernames and passwords, copied into one block
 * after the array. */
static int build_logins(inbound_rt *in, const inbound_user *users, size_t n)
{
	size_t text = 0;
	for (size_t i = 0; i < n; i++)
		text += (users[i].username ? strlen(users[i].username) + 1 : 0) +
		        (users[i].password ? strlen(users[i].password) + 1 : 0);
	proto_account *a = malloc(n * sizeof *a + text);
	if (!a)
		return -1;
	char *p = (char *)(a + n);
	for (size_t i = 0; i < n; i++) {
		a[i] = (proto_account){0};
		if (users[i].username) {
			a[i].user_len = strlen(users[i].username);
			a[i].user = memcpy(p, users[i].username, a[i].user_len + 1);
			p += a[i].user_len + 1;
		}
		if (users[i].password) {
			a[i].pass_len = strlen(users[i].password);
			a[i].pass = memcpy(p, users[i].password, a[i].pass_len + 1);
			p += a[i].pass_len + 1;
		}
	}
	in->logins = a;
	in->n_logins = n;
	return 0;
}

/* in->user_names: each user's name (a SOCKS/HTTP user's is its username),
 * NULL for one without; one block, pointers then text. */
static int build_names(inbound_rt *in, const inbound_user *users, size_t n)
{
	size_t text = 0;
	for (size_t i = 0; i < n; i++)
		text += users[i].name ? strlen(users[i].name) + 1 : 0;
	char **names = malloc(n * sizeof *names + text);
	if (!names)
		return -1;
	char *p = (char *)(names + n);
	for (size_t i = 0; i < n; i++) {
		names[i] = NULL;
		if (users[i].name) {
			size_t len = strlen(users[i].name);
			names[i] = memcpy(p, users[i].name, len + 1);
			p += len + 1;
		}
	}
	in->user_names = names;
	in->n_user_names = n;
	return 0;
}

/* in->principals: a new one per user, with its limits. */
static int build_principals(inbound_rt *in, const inbound_user *users, size_t n)
{
	in->principals = calloc(n, sizeof *in->principals);
	if (!in->principals)
		return -1;
	for (size_t i = 0; i < n; i++) {
		uint64_t max = users[i].max_sessions;
		in->principals[i] = principal_new(users[i].name, users[i].up_rate, users[i].down_rate,
		                                  max > UINT32_MAX ? UINT32_MAX : (uint32_t)max);
		if (!in->principals[i])
			return -1;
	}
	return 0;
}

/* in->accounts: one credential per user, made by the row. */
static int build_accounts(inbound_rt *in, const inbound_proto_ops *p, const inbound_user *users,
                          size_t n, char *err, size_t err_size)
{
	uint8_t *a = calloc(n ? n : 1, p->account_size);
	if (!a) {
		snprintf(err, err_size, build_msgs[BUILD_NO_MEMORY], in->tag);
		return -1;
	}
	in->accounts = a;
	in->n_accounts = n;
	for (size_t i = 0; i < n; i++) {
		const char *why = p->account(&users[i], a + i * p->account_size);
		if (why) {
			snprintf(err, err_size, build_msgs[BUILD_REASON], in->tag, why);
			return -1;
		}
	}
	return 0;
}

/* The count is not part of the config's value: a const one is counted. */
void inbound_rt_hold(const inbound_rt *in)
{
	atomic_fetch_add_explicit(&((inbound_rt *)in)->refs, 1, memory_order_relaxed);
}

void inbound_rt_release(const inbound_rt *in)
{
	inbound_rt *m = (inbound_rt *)in;
	if (atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) == 1) {
		inbound_rt_free(m);
		free(m);
	}
}

int inbound_rt_build(inbound_rt *in, const inbound_user *users, size_t n_users,
                     const char *fallback, char *err, size_t err_size)
{
	atomic_init(&in->refs, 1);
	if (n_users && (build_logins(in, users, n_users) || build_names(in, users, n_users) ||
	                build_principals(in, users, n_users))) {
		snprintf(err, err_size, build_msgs[BUILD_NO_MEMORY], in->tag);
		return -1;
	}
	const inbound_proto_ops *p = row(in->protocol);
	if (!p)
		return 0;
	if (p->account_size && build_accounts(in, p, users, n_users, err, err_size))
		return -1;
	if (p->shared_new && !(in->shared = p->shared_new())) {
		snprintf(err, err_size, build_msgs[BUILD_NO_MEMORY], in->tag);
		return -1;
	}
	if (p->wants_fallback && fallback) {
		if (addr_dest_parse(&in->fallback, fallback)) {
			snprintf(err, err_size, build_msgs[BUILD_FALLBACK], in->tag, fallback);
			return -1;
		}
		in->has_fallback = true;
	}
	return 0;
}

void inbound_rt_free(inbound_rt *in)
{
	tls_server_ctx_unref(in->tls);
	free(in->tag);
	free(in->ws_path);
	free(in->grpc_service);
	free(in->logins);
	for (size_t i = 0; in->principals && i < in->n_user_names; i++)
		principal_release(in->principals[i]);
	free(in->principals);
	free(in->user_names);
	free(in->accounts);
	const inbound_proto_ops *p = row(in->protocol);
	if (in->shared && p && p->shared_free)
		p->shared_free(in->shared);
	*in = (inbound_rt){0};
}
