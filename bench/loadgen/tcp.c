/* tcp.c - the TCP modes: thru (bulk to the sink), crr (connect-request-response-close) and rr (1-byte ping-pong). */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "loadgen.h"
#include "socks5.h"
#include "stats.h"

/* One send(2) at most this big: large enough that a syscall moves a lot,
 * small enough to stay in cache. */
#define SEND_CHUNK (256 * 1024)
/* crr messages are at most this big (the issue asks for 64). */
#define MSG_MAX 4096
/* rr: round trips before the clock starts (connection and caches warm). */
#define RR_WARMUP 1000
/* crr gives up when this many attempts failed and more failed than succeeded. */
#define CRR_MAX_ERRORS 1000
/* A worker whose socket or connect failed at once tries again after this long. */
#define CRR_RETRY_MS 10

enum phase { CONNECTING, HANDSHAKE, RUNNING, FINISHED };

static int tcp_socket(bool nonblock)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0), 0);
	if (fd < 0)
		return -1;
	int one = 1;
	/* Latency modes must not wait for Nagle; bulk sends are large anyway. */
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	return fd;
}

/* Where the socket connects: the SOCKS5 server or the target itself. */
static const struct sockaddr_in *first_hop(const struct lg_opts *o)
{
	return o->via_socks ? &o->socks : &o->target;
}

static int epoll_set(int ep, int op, int fd, uint32_t events, void *ptr)
{
	struct epoll_event ev = {.events = events, .data.ptr = ptr};
	return epoll_ctl(ep, op, fd, &ev);
}

/* Starts a non-blocking connect. 0, or -1 with errno. */
static int connect_start(int fd, const struct sockaddr_in *to)
{
	if (connect(fd, (const struct sockaddr *)to, sizeof *to) == 0 || errno == EINPROGRESS)
		return 0;
	return -1;
}

static int connect_result(int fd)
{
	int err = 0;
	socklen_t len = sizeof err;
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
		return errno;
	return err;
}

/* ------------------------------------------------------------------ thru */

struct thru_conn {
	int fd;
	enum phase phase;
	struct lg_s5 s5;
	uint8_t header[LG_THRU_HEADER];
	uint64_t total; /* payload bytes this connection carries */
	uint64_t sent;  /* header and payload bytes sent */
	uint8_t ack[LG_THRU_HEADER];
	size_t ack_have;
};

static uint8_t payload[SEND_CHUNK];

static void payload_fill(void)
{
	/* Incompressible bytes, in case a peer ever compresses. */
	uint64_t x = 0x2545f4914f6cdd1dull;
	for (size_t i = 0; i < sizeof payload; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		payload[i] = (uint8_t)x;
	}
}

/* Sends until the socket is full or everything went. -1 with errno on error. */
static int thru_send(struct thru_conn *c)
{
	uint64_t all = LG_THRU_HEADER + c->total;
	while (c->sent < all) {
		ssize_t w;
		if (c->sent < LG_THRU_HEADER)
			w = send(c->fd, c->header + c->sent, LG_THRU_HEADER - c->sent, MSG_NOSIGNAL);
		else {
			uint64_t left = all - c->sent;
			w = send(c->fd, payload, left < SEND_CHUNK ? (size_t)left : SEND_CHUNK,
			         MSG_NOSIGNAL);
		}
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
		}
		c->sent += (uint64_t)w;
	}
	return 0;
}

/* 1 when the sink's acknowledgement is complete, 0 for more later, -1 on error. */
static int thru_read_ack(struct thru_conn *c, const char **err)
{
	while (c->ack_have < LG_THRU_HEADER) {
		ssize_t n = read(c->fd, c->ack + c->ack_have, LG_THRU_HEADER - c->ack_have);
		if (n > 0) {
			c->ack_have += (size_t)n;
			continue;
		}
		if (n == 0) {
			*err = "the connection closed before the sink acknowledged every byte";
			return -1;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return 0;
		*err = strerror(errno);
		return -1;
	}
	if (memcmp(c->ack, c->header, LG_THRU_HEADER) != 0) {
		*err = "the sink counted a different number of bytes";
		return -1;
	}
	return 1;
}

/* Advances one connection after an event. 1 when it is finished, 0 when
 * not yet, -1 with *err. */
static int thru_event(const struct lg_opts *o, int ep, struct thru_conn *c, uint32_t events,
                      const char **err)
{
	if (c->phase == CONNECTING) {
		int e = connect_result(c->fd);
		if (e != 0) {
			*err = strerror(e);
			return -1;
		}
		if (o->via_socks) {
			if (lg_s5_start(&c->s5, c->fd, LG_S5_CONNECT, &o->target) < 0) {
				*err = c->s5.err;
				return -1;
			}
			c->phase = HANDSHAKE;
			if (epoll_set(ep, EPOLL_CTL_MOD, c->fd, EPOLLIN, c) < 0)
				goto sys;
			return 0;
		}
		c->phase = RUNNING;
		events = EPOLLOUT;
		if (epoll_set(ep, EPOLL_CTL_MOD, c->fd, EPOLLIN | EPOLLOUT, c) < 0)
			goto sys;
	}
	if (c->phase == HANDSHAKE) {
		int r = lg_s5_step(&c->s5, c->fd);
		if (r <= 0) {
			*err = c->s5.err;
			return r;
		}
		c->phase = RUNNING;
		events = EPOLLOUT;
		if (epoll_set(ep, EPOLL_CTL_MOD, c->fd, EPOLLIN | EPOLLOUT, c) < 0)
			goto sys;
	}
	if (c->sent < LG_THRU_HEADER + c->total && (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
		if (thru_send(c) < 0)
			goto sys;
		if (c->sent == LG_THRU_HEADER + c->total &&
		    epoll_set(ep, EPOLL_CTL_MOD, c->fd, EPOLLIN, c) < 0)
			goto sys;
	}
	if (events & (EPOLLIN | EPOLLERR | EPOLLHUP))
		return thru_read_ack(c, err);
	return 0;
sys:
	*err = strerror(errno);
	return -1;
}

int lg_thru_run(const struct lg_opts *o)
{
	payload_fill();
	int n = o->conns;
	struct thru_conn *conns = calloc((size_t)n, sizeof *conns);
	int ep = epoll_create1(EPOLL_CLOEXEC);
	const char *err = NULL;
	int status = 1;
	if (!conns || ep < 0) {
		err = "out of resources";
		goto out;
	}
	for (int i = 0; i < n; i++)
		conns[i].fd = -1;
	double cpu0 = lg_cpu_s();
	uint64_t t0 = lg_now_ns();
	uint64_t deadline = t0 + (uint64_t)(o->timeout * 1e9);
	for (int i = 0; i < n; i++) {
		struct thru_conn *c = &conns[i];
		/* Spread the bytes; the first connections take the remainder. */
		c->total = o->bytes / (uint64_t)n + ((uint64_t)i < o->bytes % (uint64_t)n);
		for (int b = 0; b < LG_THRU_HEADER; b++)
			c->header[b] = (uint8_t)(c->total >> (8 * (LG_THRU_HEADER - 1 - b)));
		c->fd = tcp_socket(true);
		if (c->fd < 0 || connect_start(c->fd, first_hop(o)) < 0 ||
		    epoll_set(ep, EPOLL_CTL_ADD, c->fd, EPOLLOUT, c) < 0) {
			err = strerror(errno);
			goto out;
		}
	}
	int left = n;
	struct epoll_event evs[64];
	while (left > 0) {
		uint64_t now = lg_now_ns();
		if (now >= deadline) {
			err = "timed out";
			goto out;
		}
		int k = epoll_wait(ep, evs, 64, (int)((deadline - now) / 1000000u) + 1);
		if (k < 0 && errno != EINTR) {
			err = strerror(errno);
			goto out;
		}
		for (int i = 0; i < k; i++) {
			struct thru_conn *c = evs[i].data.ptr;
			if (c->phase == FINISHED)
				continue;
			int r = thru_event(o, ep, c, evs[i].events, &err);
			if (r < 0)
				goto out;
			if (r == 1) {
				c->phase = FINISHED;
				(void)epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
				left--;
			}
		}
	}
	double secs = (double)(lg_now_ns() - t0) / 1e9;
	lg_print(o, "conns=%d bytes=%llu secs=%.3f mib_s=%.1f cpu_s=%.2f", n,
	         (unsigned long long)o->bytes, secs, (double)o->bytes / 1048576.0 / secs,
	         lg_cpu_s() - cpu0);
	status = 0;
out:
	if (status != 0)
		status = lg_fail(o, "%s", err ? err : "failed");
	if (conns)
		for (int i = 0; i < n; i++)
			if (conns[i].fd >= 0)
				close(conns[i].fd);
	if (ep >= 0)
		close(ep);
	free(conns);
	return status;
}

/* ------------------------------------------------------------------- crr */

struct crr_worker {
	int fd;
	enum phase phase;
	struct lg_s5 s5;
	uint64_t t0;
	size_t got;
	uint8_t buf[MSG_MAX];
};

struct crr {
	const struct lg_opts *o;
	int ep;
	uint64_t done, errors;
	const char *first_error;
	struct lg_samples lat;
	uint8_t request[MSG_MAX];
};

static void crr_close(struct crr *r, struct crr_worker *w)
{
	(void)r;
	if (w->fd >= 0)
		close(w->fd); /* closing removes it from the epoll set */
	w->fd = -1;
	w->phase = FINISHED;
}

static void crr_error(struct crr *r, struct crr_worker *w, const char *what)
{
	r->errors++;
	if (!r->first_error)
		r->first_error = what;
	crr_close(r, w);
}

static void crr_begin(struct crr *r, struct crr_worker *w)
{
	w->t0 = lg_now_ns();
	w->got = 0;
	w->fd = tcp_socket(true);
	if (w->fd < 0 || connect_start(w->fd, first_hop(r->o)) < 0 ||
	    epoll_set(r->ep, EPOLL_CTL_ADD, w->fd, EPOLLOUT, w) < 0) {
		crr_error(r, w, strerror(errno));
		return;
	}
	w->phase = CONNECTING;
}

static void crr_send_request(struct crr *r, struct crr_worker *w)
{
	size_t m = (size_t)r->o->msg;
	ssize_t n = send(w->fd, r->request, m, MSG_NOSIGNAL);
	if (n != (ssize_t)m) {
		crr_error(r, w, n < 0 ? strerror(errno) : "short write of the request");
		return;
	}
	w->phase = RUNNING;
	if (epoll_set(r->ep, EPOLL_CTL_MOD, w->fd, EPOLLIN, w) < 0)
		crr_error(r, w, strerror(errno));
}

static void crr_event(struct crr *r, struct crr_worker *w)
{
	if (w->phase == CONNECTING) {
		int e = connect_result(w->fd);
		if (e != 0) {
			crr_error(r, w, strerror(e));
			return;
		}
		if (!r->o->via_socks) {
			crr_send_request(r, w);
			return;
		}
		if (lg_s5_start(&w->s5, w->fd, LG_S5_CONNECT, &r->o->target) < 0 ||
		    epoll_set(r->ep, EPOLL_CTL_MOD, w->fd, EPOLLIN, w) < 0) {
			crr_error(r, w, w->s5.err ? w->s5.err : strerror(errno));
			return;
		}
		w->phase = HANDSHAKE;
		return;
	}
	if (w->phase == HANDSHAKE) {
		int s = lg_s5_step(&w->s5, w->fd);
		if (s < 0)
			crr_error(r, w, w->s5.err);
		else if (s == 1)
			crr_send_request(r, w);
		return;
	}
	size_t m = (size_t)r->o->msg;
	for (;;) {
		ssize_t n = read(w->fd, w->buf + w->got, m - w->got);
		if (n > 0) {
			w->got += (size_t)n;
			if (w->got < m)
				continue;
			if (lg_samples_add(&r->lat, lg_now_ns() - w->t0) < 0) {
				crr_error(r, w, "out of memory");
				return;
			}
			r->done++;
			crr_close(r, w);
			return;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		crr_error(r, w, n == 0 ? "the connection closed before the answer" : strerror(errno));
		return;
	}
}

int lg_crr_run(const struct lg_opts *o)
{
	struct crr r = {.o = o, .ep = epoll_create1(EPOLL_CLOEXEC)};
	struct crr_worker *ws = calloc((size_t)o->workers, sizeof *ws);
	int status = 1;
	if (!ws || r.ep < 0) {
		status = lg_fail(o, "out of resources");
		goto out;
	}
	memset(r.request, 'q', sizeof r.request);
	double cpu0 = lg_cpu_s();
	uint64_t t0 = lg_now_ns();
	uint64_t end = t0 + (uint64_t)(o->secs * 1e9);
	for (int i = 0; i < o->workers; i++) {
		ws[i].fd = -1;
		crr_begin(&r, &ws[i]);
	}
	struct epoll_event evs[64];
	bool retry = false;
	for (int i = 0; i < o->workers; i++)
		retry |= ws[i].phase == FINISHED;
	for (;;) {
		uint64_t now = lg_now_ns();
		if (now >= end)
			break;
		if (r.errors >= CRR_MAX_ERRORS && r.errors > r.done) {
			status = lg_fail(o, "%llu of %llu connections failed, first: %s",
			                 (unsigned long long)r.errors,
			                 (unsigned long long)(r.errors + r.done), r.first_error);
			goto out;
		}
		int wait_ms = (int)((end - now) / 1000000u) + 1;
		if (retry && wait_ms > CRR_RETRY_MS)
			wait_ms = CRR_RETRY_MS;
		int k = epoll_wait(r.ep, evs, 64, wait_ms);
		for (int i = 0; i < k; i++)
			crr_event(&r, evs[i].data.ptr);
		/* A worker whose exchange ended (or failed) starts the next one;
		 * one that could not even start is retried after a short wait. */
		retry = false;
		if (lg_now_ns() < end)
			for (int i = 0; i < o->workers; i++)
				if (ws[i].phase == FINISHED) {
					crr_begin(&r, &ws[i]);
					retry |= ws[i].phase == FINISHED;
				}
	}
	double secs = (double)(lg_now_ns() - t0) / 1e9;
	double p50 = lg_samples_pct_us(&r.lat, 50), p99 = lg_samples_pct_us(&r.lat, 99);
	lg_print(o, "workers=%d msg=%d secs=%.2f conns=%llu errors=%llu conn_s=%.1f p50_us=%.1f "
	            "p99_us=%.1f cpu_s=%.2f%s%s%s",
	         o->workers, o->msg, secs, (unsigned long long)r.done, (unsigned long long)r.errors,
	         (double)r.done / secs, p50, p99, lg_cpu_s() - cpu0,
	         r.first_error ? " first_error=\"" : "", r.first_error ? r.first_error : "",
	         r.first_error ? "\"" : "");
	status = 0;
out:
	if (ws)
		for (int i = 0; i < o->workers; i++)
			if (ws[i].fd >= 0)
				close(ws[i].fd);
	if (r.ep >= 0)
		close(r.ep);
	free(ws);
	lg_samples_free(&r.lat);
	return status;
}

/* -------------------------------------------------------------------- rr */

/* One blocking round trip of one byte. 0, or -1 with *err. */
static int rr_once(int fd, const char **err)
{
	uint8_t b = 'p';
	ssize_t n;
	do
		n = send(fd, &b, 1, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n != 1) {
		*err = n < 0 ? strerror(errno) : "short write";
		return -1;
	}
	do
		n = read(fd, &b, 1);
	while (n < 0 && errno == EINTR);
	if (n != 1) {
		*err = n == 0 ? "the connection closed" : strerror(errno);
		return -1;
	}
	return 0;
}

int lg_rr_run(const struct lg_opts *o)
{
	struct lg_samples lat = {0};
	const char *err = NULL;
	int status = 1;
	int fd = tcp_socket(false);
	if (fd < 0) {
		err = strerror(errno);
		goto out;
	}
	/* A blocking socket: a stalled peer ends the run instead of hanging it. */
	struct timeval tv = {.tv_sec = (time_t)o->timeout};
	(void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	(void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	if (connect(fd, (const struct sockaddr *)first_hop(o), sizeof o->target) != 0) {
		err = strerror(errno);
		goto out;
	}
	if (o->via_socks) {
		struct lg_s5 s5;
		if (lg_s5_start(&s5, fd, LG_S5_CONNECT, &o->target) < 0 || lg_s5_step(&s5, fd) != 1) {
			err = s5.err;
			goto out;
		}
	}
	for (int i = 0; i < RR_WARMUP; i++)
		if (rr_once(fd, &err) < 0)
			goto out;
	double cpu0 = lg_cpu_s();
	uint64_t t0 = lg_now_ns(), end = t0 + (uint64_t)(o->secs * 1e9), now = t0;
	while (now < end) {
		uint64_t a = now;
		if (rr_once(fd, &err) < 0)
			goto out;
		now = lg_now_ns();
		if (lg_samples_add(&lat, now - a) < 0) {
			err = "out of memory";
			goto out;
		}
	}
	double secs = (double)(now - t0) / 1e9;
	size_t rtts = lat.n;
	double p50 = lg_samples_pct_us(&lat, 50), p99 = lg_samples_pct_us(&lat, 99);
	lg_print(o, "secs=%.2f rtts=%zu rtt_s=%.1f p50_us=%.1f p99_us=%.1f cpu_s=%.2f", secs, rtts,
	         (double)rtts / secs, p50, p99, lg_cpu_s() - cpu0);
	status = 0;
out:
	if (status != 0)
		status = lg_fail(o, "%s", err ? err : "failed");
	if (fd >= 0)
		close(fd);
	lg_samples_free(&lat);
	return status;
}
