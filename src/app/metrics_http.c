/* metrics_http.c - the [metrics] listen server: accepts, bounds and times out connections, parses request heads with proto/http_parse and answers with app/metrics's text. */
#include "app/metrics_http.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "commit.h" /* generated from app/commit.h.in */
#include "app/metrics.h"
#include "base/log.h"
#include "base/vec.h"
#include "etemenanki/etemenanki.h"
#include "proto/http_parse.h"

enum { M_SERVING, M_LISTEN, M_NOMEM, M_FULL };
static const char *const msgs[] = {
	[M_SERVING] = "metrics: serving http://%s/metrics",
	[M_LISTEN] = "metrics: cannot listen on %s: %s",
	[M_NOMEM] = "metrics: out of memory",
	[M_FULL] = "metrics: %d connections open, closing a new one",
};

/* Every answer: the status line's reason and the body (RFC 9110 15). */
static const struct {
	int status;
	const char *reason, *body;
} ANSWERS[] = {
	{200, "OK", NULL},
	{400, "Bad Request", "bad request\n"},
	{404, "Not Found", "not found: only /metrics is served here\n"},
	{405, "Method Not Allowed", "method not allowed: use GET or HEAD\n"},
	{413, "Content Too Large", "a request body is not accepted\n"},
	{431, "Request Header Fields Too Large", "request head over 8192 bytes\n"},
	{500, "Internal Server Error", "out of memory\n"},
	{505, "HTTP Version Not Supported", "only HTTP/1.x is served\n"},
};
_Static_assert(METRICS_HEAD_MAX == 8192, "the 431 body names the bound");

const char *metrics_http_reason(int status)
{
	for (size_t i = 0; i < sizeof ANSWERS / sizeof *ANSWERS; i++)
		if (ANSWERS[i].status == status)
			return ANSWERS[i].reason;
	return "";
}

const char *metrics_http_body(int status)
{
	for (size_t i = 0; i < sizeof ANSWERS / sizeof *ANSWERS; i++)
		if (ANSWERS[i].status == status)
			return ANSWERS[i].body ? ANSWERS[i].body : "";
	return "";
}

typedef struct mconn mconn;

struct metrics_http {
	uv_tcp_t listener;
	etm_supervisor *sup;             /* borrowed */
	const metrics_reloads *reloads;  /* borrowed */
	uint64_t start_time;
	uint64_t refused;
	int n_conns;
	int open; /* the listener and every connection: freed at 0 */
	mconn *conns; /* a list, for the stop */
};

struct mconn {
	uv_tcp_t tcp;
	uv_timer_t idle;
	uv_write_t wr;
	metrics_http *m;
	mconn *prev, *next;
	metrics_buf out; /* the answer being written */
	bool writing, close_after, closing;
	bool lingering; /* answered and shut down: reading what is left, for the RST's sake */
	uv_shutdown_t shut;
	int handles; /* tcp and idle: the connection is freed when both closed */
	size_t len, scan;
	uint8_t head[METRICS_HEAD_MAX];
};

static void server_unref(metrics_http *m)
{
	if (--m->open == 0)
		free(m);
}

static void conn_freed(uv_handle_t *h)
{
	mconn *c = h->data;
	if (--c->handles > 0)
		return;
	metrics_http *m = c->m;
	metrics_buf_free(&c->out);
	free(c);
	server_unref(m);
}

static void conn_close(mconn *c)
{
	if (c->closing)
		return;
	c->closing = true;
	metrics_http *m = c->m;
	if (c->prev)
		c->prev->next = c->next;
	else
		m->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	m->n_conns--;
	c->handles = 2;
	uv_close((uv_handle_t *)&c->tcp, conn_freed);
	uv_close((uv_handle_t *)&c->idle, conn_freed);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static void on_idle(uv_timer_t *t) { conn_close(t->data); }

/* Closing a socket with unread bytes sends an RST, which can destroy the
 * answer before the client reads it (RFC 9112 9.6): after a last answer
 * the write side is shut and what still arrives is read and dropped, for
 * at most this long. */
#define METRICS_LINGER_MS 2000

static void on_shut(uv_shutdown_t *req, int status)
{
	(void)req;
	(void)status;
}

static void linger(mconn *c)
{
	c->lingering = true;
	c->len = 0;
	c->shut.data = c;
	if (uv_shutdown(&c->shut, (uv_stream_t *)&c->tcp, on_shut) ||
	    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read)) {
		conn_close(c);
		return;
	}
	uv_timer_start(&c->idle, on_idle, METRICS_LINGER_MS, 0);
}

/* The outbound side and the usage tables of one scrape into s (dial
 * errors, the DNS cache, flows and bytes by inbound, outbound and user).
 * Returns 0, or -1 when memory ran out; either way gather_usage_free
 * releases what it took. */
static int gather_usage(etm_supervisor *sup, metrics_snapshot *s)
{
	etm_supervisor_dial_errors(sup, s->dial_errors);
	etm_supervisor_dns_cache_stats(sup, &s->dns);
	etm_supervisor_dns_service_stats(sup, &s->dns_service);
	etm_tls_handshakes(&s->tls);
	static const etm_usage_by BY[METRICS_USAGE_KINDS] = {ETM_USAGE_INBOUND, ETM_USAGE_OUTBOUND,
	                                                     ETM_USAGE_USER};
	for (size_t k = 0; k < METRICS_USAGE_KINDS; k++)
		if (etm_supervisor_usage(sup, BY[k], &s->usage[BY[k]]))
			return -1;
	return 0;
}

static void gather_usage_free(metrics_snapshot *s)
{
	for (size_t k = 0; k < METRICS_USAGE_KINDS; k++)
		etm_usage_list_free(&s->usage[k]);
}

int metrics_http_collect(etm_supervisor *sup, const metrics_reloads *reloads, uint64_t start_time,
                         uint64_t refused, metrics_buf *body)
{
	size_t n_in = etm_supervisor_inbound_count(sup);
	metrics_udplb *lb = calloc(n_in ? n_in : 1, sizeof *lb);
	size_t n_lb = 0;
	metrics_member *mem = NULL;
	size_t n_mem = 0, mem_cap = 0;
	int rc = -1;
	if (!lb)
		return -1;
	for (size_t i = 0; i < n_in; i++) {
		metrics_udplb *u = &lb[n_lb];
		if (etm_supervisor_udplb_stats(sup, i, &u->st))
			continue;
		u->tag = etm_supervisor_inbound_tag(sup, i);
		n_lb++;
		size_t cap = 0;
		for (size_t j = 0;; j++) {
			metrics_backend be;
			if (etm_supervisor_udplb_backend(sup, i, j, be.addr, sizeof be.addr, &be.up,
			                                 &be.flows_created))
				break;
			if (vec_reserve(&u->backends, &cap, u->n_backends, 1))
				goto done;
			u->backends[u->n_backends++] = be;
		}
	}
	for (size_t i = 0;; i++) {
		metrics_member mm;
		size_t j = 0;
		for (; etm_supervisor_balancer_member(sup, i, j, &mm.balancer, &mm.member, &mm.up) == 0;
		     j++) {
			/* a tag listed twice is one outbound, one series */
			bool seen = false;
			for (size_t k = 0; k < n_mem && !seen; k++)
				seen = mem[k].balancer == mm.balancer && strcmp(mem[k].member, mm.member) == 0;
			if (seen)
				continue;
			if (etm_supervisor_member_probe(sup, i, j, &mm.probe_ms, &mm.probe_when_ms)) {
				mm.probe_ms = -1;
				mm.probe_when_ms = 0;
			}
			if (etm_supervisor_member_probe_counts(sup, i, j, &mm.probes, &mm.probes_failed))
				mm.probes = mm.probes_failed = 0;
			if (vec_reserve(&mem, &mem_cap, n_mem, 1))
				goto done;
			mem[n_mem++] = mm;
		}
		if (j == 0)
			break; /* past the last balancer (each has a member) */
	}
	etm_guard_stats g;
	etm_supervisor_guard_stats(sup, &g);
	uint64_t open, total;
	etm_supervisor_flow_counts(sup, &open, &total);
	metrics_snapshot s = {
		.version = etm_version(),
		.commit = ETM_COMMIT,
		.start_time = start_time,
		.flows_open = open,
		.flows_total = total,
		.epoch = etm_supervisor_epoch(sup),
		.guard = g,
		.reloads_ok = reloads->ok,
		.reloads_failed = reloads->failed,
		.scrape_connections_refused = refused,
		.n_members = n_mem,
		.members = mem,
		.n_udplb = n_lb,
		.udplb = lb,
	};
	if (gather_usage(sup, &s) == 0)
		rc = metrics_write(&s, body);
	gather_usage_free(&s);
done:
	free(mem);
	for (size_t i = 0; i < n_lb; i++)
		free(lb[i].backends);
	free(lb);
	return rc;
}

static void process(mconn *c);

static void on_written(uv_write_t *wr, int status)
{
	mconn *c = wr->data;
	c->writing = false;
	metrics_buf_free(&c->out);
	if (c->closing)
		return;
	if (status < 0) {
		conn_close(c);
		return;
	}
	if (c->close_after) {
		linger(c);
		return;
	}
	uv_timer_start(&c->idle, on_idle, METRICS_IDLE_MS, 0);
	if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read))
		conn_close(c);
	else
		process(c); /* a request that came with the last one */
}

/* Writes one answer; with close_after the connection ends after it. */
static void answer(mconn *c, int status, bool head_only, bool close_after, bool keep_alive_10,
                   const metrics_buf *body)
{
	metrics_buf *o = &c->out;
	const char *text = body ? body->p : metrics_http_body(status);
	size_t text_len = body ? body->len : strlen(text);
	char h[512];
	int n = snprintf(h, sizeof h,
	                 "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s%s\r\n",
	                 status, metrics_http_reason(status),
	                 status == 200 ? METRICS_CONTENT_TYPE : "text/plain; charset=utf-8",
	                 text_len, status == 405 ? "Allow: GET, HEAD\r\n" : "",
	                 close_after     ? "Connection: close\r\n"
	                 : keep_alive_10 ? "Connection: keep-alive\r\n"
	                                 : "");
	c->close_after = close_after;
	if (n < 0 || (size_t)n >= sizeof h) {
		conn_close(c);
		return;
	}
	metrics_buf_free(o);
	if (vec_reserve(&o->p, &o->cap, 0, (size_t)n + (head_only ? 0 : text_len))) {
		conn_close(c);
		return;
	}
	memcpy(o->p, h, (size_t)n);
	o->len = (size_t)n;
	if (!head_only && text_len) {
		memcpy(o->p + o->len, text, text_len);
		o->len += text_len;
	}
	uv_buf_t b = uv_buf_init(o->p, (unsigned)o->len);
	uv_read_stop((uv_stream_t *)&c->tcp);
	uv_timer_stop(&c->idle);
	c->wr.data = c;
	if (uv_write(&c->wr, (uv_stream_t *)&c->tcp, &b, 1, on_written)) {
		conn_close(c);
		return;
	}
	c->writing = true;
}

static bool target_is_metrics(const uint8_t *t, size_t n)
{
	static const char path[] = "/metrics";
	size_t pl = sizeof path - 1;
	return n >= pl && memcmp(t, path, pl) == 0 && (n == pl || t[pl] == '?');
}

/* Answers the request at the start of c->head, if it has all arrived. */
static void process(mconn *c)
{
	if (c->writing || c->closing || c->len == 0)
		return;
	http_head h;
	ssize_t r = http_parse_request(c->head, c->len, &c->scan, &h);
	if (r == 0) {
		if (c->len == sizeof c->head)
			answer(c, 431, false, true, false, NULL);
		return;
	}
	if (r < 0) {
		int st = r == HTTP_PARSE_TOO_BIG || r == HTTP_PARSE_TOO_MANY ? 431
		         : r == HTTP_PARSE_VERSION                           ? 505
		                                                             : 400;
		answer(c, st, false, true, false, NULL);
		return;
	}
	http_meta meta;
	http_meta_read(c->head, &h, &meta);
	const uint8_t *method = c->head + h.method.off;
	bool is_head = h.method.len == 4 && memcmp(method, "HEAD", 4) == 0;
	bool is_get = h.method.len == 3 && memcmp(method, "GET", 3) == 0;
	bool found = target_is_metrics(c->head + h.target.off, h.target.len);
	/* HTTP/1.1 persists unless "close"; HTTP/1.0 only with "keep-alive"
	 * (RFC 9112 9.3) */
	bool keep = h.minor >= 1 ? !meta.conn_close : meta.conn_keep && !meta.conn_close;
	bool ka10 = h.minor == 0 && keep;
	/* the bytes after the head are the next request's (the spans above
	 * are not used past this point) */
	memmove(c->head, c->head + r, c->len - (size_t)r);
	c->len -= (size_t)r;
	c->scan = 0;
	if (meta.cl_bad) {
		answer(c, 400, false, true, false, NULL);
	} else if (meta.has_te || (meta.has_cl && meta.cl > 0)) {
		/* the body is not read, so the connection cannot go on */
		answer(c, 413, is_head, true, false, NULL);
	} else if (!found) {
		answer(c, 404, is_head, !keep, ka10, NULL);
	} else if (!is_get && !is_head) {
		answer(c, 405, false, !keep, ka10, NULL);
	} else {
		metrics_buf body = {0};
		metrics_http *m = c->m;
		if (metrics_http_collect(m->sup, m->reloads, m->start_time, m->refused, &body))
			answer(c, 500, is_head, true, false, NULL);
		else
			answer(c, 200, is_head, !keep, ka10, &body);
		metrics_buf_free(&body);
	}
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	(void)suggested;
	mconn *c = h->data;
	buf->base = (char *)c->head + c->len;
	buf->len = sizeof c->head - c->len;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	(void)buf;
	mconn *c = s->data;
	if (nread < 0) {
		conn_close(c);
		return;
	}
	if (nread == 0)
		return;
	if (c->lingering)
		return; /* dropped: the buffer is reused from its start */
	c->len += (size_t)nread;
	uv_timer_start(&c->idle, on_idle, METRICS_IDLE_MS, 0);
	process(c);
}

static void on_refused_closed(uv_handle_t *h) { free(h); }

static void on_connection(uv_stream_t *l, int status)
{
	metrics_http *m = l->data;
	if (status < 0)
		return;
	if (m->n_conns >= METRICS_CONNS_MAX) {
		uv_tcp_t *t = malloc(sizeof *t);
		if (!t || uv_tcp_init(l->loop, t)) {
			free(t);
			return;
		}
		(void)uv_accept(l, (uv_stream_t *)t);
		uv_close((uv_handle_t *)t, on_refused_closed);
		m->refused++;
		log_debug("app", msgs[M_FULL], m->n_conns);
		return;
	}
	mconn *c = calloc(1, sizeof *c);
	if (!c)
		return;
	c->m = m;
	uv_tcp_init(l->loop, &c->tcp);
	uv_timer_init(l->loop, &c->idle);
	c->tcp.data = c->idle.data = c;
	m->open++;
	m->n_conns++;
	c->next = m->conns;
	if (m->conns)
		m->conns->prev = c;
	m->conns = c;
	if (uv_accept(l, (uv_stream_t *)&c->tcp) ||
	    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read)) {
		conn_close(c);
		return;
	}
	uv_timer_start(&c->idle, on_idle, METRICS_IDLE_MS, 0);
}

static void listener_closed(uv_handle_t *h) { server_unref(h->data); }

metrics_http *metrics_http_start(uv_loop_t *loop, const char *addr, etm_supervisor *sup,
                                 const metrics_reloads *reloads, uint64_t start_time, char *err,
                                 size_t err_size)
{
	struct sockaddr_storage ss;
	if (etm_listen_addr_parse(addr, &ss)) {
		snprintf(err, err_size, msgs[M_LISTEN], addr, uv_strerror(UV_EINVAL));
		return NULL;
	}
	metrics_http *m = calloc(1, sizeof *m);
	if (!m) {
		snprintf(err, err_size, "%s", msgs[M_NOMEM]);
		return NULL;
	}
	*m = (metrics_http){.sup = sup, .reloads = reloads, .start_time = start_time, .open = 1};
	/* SO_REUSEPORT, as the inbounds' listeners have it: the new process
	 * of a binary upgrade binds the same address while this one still
	 * serves, and this one stops when that one serves (cli.c) */
	int rc = uv_tcp_init_ex(loop, &m->listener, ss.ss_family);
	if (rc) {
		snprintf(err, err_size, msgs[M_LISTEN], addr, uv_strerror(rc));
		free(m);
		return NULL;
	}
	m->listener.data = m;
	uv_os_fd_t fd;
	int one = 1;
	rc = uv_fileno((uv_handle_t *)&m->listener, &fd);
	if (rc == 0 && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one))
		rc = uv_translate_sys_error(errno);
	if (rc == 0)
		rc = uv_tcp_bind(&m->listener, (const struct sockaddr *)&ss, 0);
	if (rc == 0)
		rc = uv_listen((uv_stream_t *)&m->listener, METRICS_BACKLOG, on_connection);
	if (rc) {
		snprintf(err, err_size, msgs[M_LISTEN], addr, uv_strerror(rc));
		uv_close((uv_handle_t *)&m->listener, listener_closed);
		return NULL;
	}
	/* the bound address: port 0 in the config becomes the kernel's pick */
	struct sockaddr_storage bound;
	int blen = sizeof bound;
	char host[64] = "?", text[80];
	if (uv_tcp_getsockname(&m->listener, (struct sockaddr *)&bound, &blen) == 0) {
		if (bound.ss_family == AF_INET6) {
			struct sockaddr_in6 *a = (struct sockaddr_in6 *)&bound;
			uv_ip6_name(a, host, sizeof host);
			snprintf(text, sizeof text, "[%s]:%u", host, ntohs(a->sin6_port));
		} else {
			struct sockaddr_in *a = (struct sockaddr_in *)&bound;
			uv_ip4_name(a, host, sizeof host);
			snprintf(text, sizeof text, "%s:%u", host, ntohs(a->sin_port));
		}
	} else {
		snprintf(text, sizeof text, "%s", addr);
	}
	log_info("app", msgs[M_SERVING], text);
	return m;
}

uint64_t metrics_http_refused(const metrics_http *m) { return m ? m->refused : 0; }

void metrics_http_stop(metrics_http *m)
{
	if (!m)
		return;
	while (m->conns)
		conn_close(m->conns);
	uv_close((uv_handle_t *)&m->listener, listener_closed);
}
