/* serve.c - the targets: a TCP sink that counts bytes, a TCP echo and one or more UDP echoes, on one epoll loop. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <netinet/udp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "loadgen.h"

/* Bytes read per recv(2) by the sink and the echo. */
#define READ_CHUNK (256 * 1024)
/* The echo holds at most this much not yet written back; reading pauses meanwhile. */
#define ECHO_BUF (64 * 1024)
/* Datagrams moved per recvmmsg(2)/sendmmsg(2). */
#define UDP_BATCH 64
#define UDP_MAX 65536
/* Accept queue: crr with 16 workers never has more than 16 waiting, but a proxy may pool. */
#define BACKLOG 4096
/* serve --udp-echoes: at most this many UDP echo sockets (the UDP LB's backends). */
#define MAX_UDP_ECHOES 16

enum role { SINK_LISTENER, ECHO_LISTENER, UDP_ECHO, SIGNALS, SINK, ECHO };

struct conn {
	enum role role;
	int fd;
	/* SINK */
	uint8_t header[LG_THRU_HEADER];
	size_t header_have;
	uint64_t expect, counted;
	bool acked;
	/* ECHO */
	uint8_t *buf;
	size_t pending, written;
};

static uint8_t scratch[READ_CHUNK];

static int listen_on(int type, uint16_t port, uint16_t *bound)
{
	int fd = socket(AF_INET, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	int one = 1;
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
	                        .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof a;
	if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
	    (type == SOCK_STREAM && listen(fd, BACKLOG) != 0) ||
	    getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
		close(fd);
		return -1;
	}
	*bound = ntohs(a.sin_port);
	return fd;
}

static struct conn *conn_new(enum role role, int fd)
{
	struct conn *c = calloc(1, sizeof *c);
	if (c) {
		c->role = role;
		c->fd = fd;
	}
	return c;
}

static void conn_del(struct conn *c)
{
	close(c->fd); /* leaves the epoll set with it */
	free(c->buf);
	free(c);
}

static void accept_all(int ep, struct conn *l)
{
	for (;;) {
		int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return; /* EAGAIN, or a client that left before we took it */
		int one = 1;
		(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		struct conn *c = conn_new(l->role == SINK_LISTENER ? SINK : ECHO, fd);
		if (c && c->role == ECHO && !(c->buf = malloc(ECHO_BUF))) {
			free(c);
			c = NULL;
		}
		struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
		if (!c || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
			if (c)
				conn_del(c);
			else
				close(fd);
		}
	}
}

/* Reads what has come; answers once the announced count is in. false = close it. */
static bool sink_read(struct conn *c)
{
	for (;;) {
		ssize_t n = recv(c->fd, scratch, sizeof scratch, 0);
		if (n == 0)
			return false;
		if (n < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
		size_t at = 0;
		while (c->header_have < LG_THRU_HEADER && at < (size_t)n)
			c->header[c->header_have++] = scratch[at++];
		if (c->header_have < LG_THRU_HEADER)
			continue;
		if (at > 0)
			for (int i = 0; i < LG_THRU_HEADER; i++)
				c->expect = c->expect << 8 | c->header[i];
		c->counted += (uint64_t)n - at;
		if (!c->acked && c->counted >= c->expect) {
			c->acked = true;
			/* 8 bytes on a socket that never sent: always taken whole. */
			if (send(c->fd, c->header, LG_THRU_HEADER, MSG_NOSIGNAL) != LG_THRU_HEADER)
				return false;
		}
	}
}

/* Writes back what is pending; false = close it. */
static bool echo_flush(int ep, struct conn *c)
{
	while (c->written < c->pending) {
		ssize_t w = send(c->fd, c->buf + c->written, c->pending - c->written, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				return false;
			struct epoll_event ev = {.events = EPOLLOUT, .data.ptr = c};
			return epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev) == 0;
		}
		c->written += (size_t)w;
	}
	c->pending = c->written = 0;
	return true;
}

static bool echo_event(int ep, struct conn *c, uint32_t events)
{
	(void)events;
	if (c->pending) {
		/* Writing back was blocked: only EPOLLOUT was asked for. */
		if (!echo_flush(ep, c))
			return false;
		if (c->pending)
			return true;
		struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
		if (epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev) != 0)
			return false;
	}
	for (;;) {
		ssize_t n = recv(c->fd, c->buf, ECHO_BUF, 0);
		if (n == 0)
			return false;
		if (n < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
		c->pending = (size_t)n;
		c->written = 0;
		if (!echo_flush(ep, c))
			return false;
		if (c->pending)
			return true; /* reads again once EPOLLOUT drained it */
	}
}

/* Echoes what one socket has. With --gro the socket takes coalesced
 * trains (UDP_GRO) and answers a train with one send cut into the same
 * datagrams (UDP_SEGMENT), as a QUIC server does: a sender that batches
 * its datagrams to us costs the echo one system call and one delivery per
 * train, so the echo stays cheap next to what is measured. */
static void udp_echo(int fd)
{
	static uint8_t bufs[UDP_BATCH][UDP_MAX];
	static _Alignas(struct cmsghdr) uint8_t ctl[UDP_BATCH][CMSG_SPACE(sizeof(int))];
	struct sockaddr_in from[UDP_BATCH];
	struct iovec iov[UDP_BATCH];
	struct mmsghdr m[UDP_BATCH];
	for (;;) {
		for (int i = 0; i < UDP_BATCH; i++) {
			iov[i] = (struct iovec){.iov_base = bufs[i], .iov_len = UDP_MAX};
			m[i] = (struct mmsghdr){.msg_hdr = {.msg_name = &from[i],
			                                    .msg_namelen = sizeof from[i],
			                                    .msg_iov = &iov[i], .msg_iovlen = 1,
			                                    .msg_control = ctl[i],
			                                    .msg_controllen = sizeof ctl[i]}};
		}
		int k = recvmmsg(fd, m, UDP_BATCH, MSG_DONTWAIT, NULL);
		if (k <= 0)
			return;
		for (int i = 0; i < k; i++) {
			struct msghdr *mh = &m[i].msg_hdr;
			int seg = lg_gro_segment(mh);
			iov[i].iov_len = m[i].msg_len;
			mh->msg_control = NULL;
			mh->msg_controllen = 0;
			if (seg > 0 && m[i].msg_len > (unsigned)seg) /* the buffer UDP_GRO came in */
				lg_put_segment(mh, ctl[i], sizeof ctl[i], seg);
		}
		/* A reply the kernel will not take is dropped, as a busy server would. */
		(void)sendmmsg(fd, m, (unsigned)k, MSG_DONTWAIT);
		if (k < UDP_BATCH)
			return;
	}
}

int lg_serve_run(const struct lg_opts *o)
{
	/* The driver that started us may die without stopping us. */
	(void)prctl(PR_SET_PDEATHSIG, SIGTERM);
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	if (sigprocmask(SIG_BLOCK, &set, NULL) != 0)
		return lg_fail(o, "%s", strerror(errno));
	int ep = epoll_create1(EPOLL_CLOEXEC);
	uint16_t sink_port = 0, echo_port = 0, udp_ports[MAX_UDP_ECHOES] = {0};
	int echoes = o->udp_echoes < MAX_UDP_ECHOES ? o->udp_echoes : MAX_UDP_ECHOES;
	struct conn fixed[3 + MAX_UDP_ECHOES] = {
		{.role = SINK_LISTENER, .fd = listen_on(SOCK_STREAM, o->sink_port, &sink_port)},
		{.role = ECHO_LISTENER, .fd = listen_on(SOCK_STREAM, o->echo_port, &echo_port)},
		{.role = SIGNALS, .fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC)},
	};
	/* The first UDP echo on --udp-port, the others wherever the kernel says. */
	for (int i = 0; i < echoes; i++)
		fixed[3 + i] = (struct conn){
			.role = UDP_ECHO,
			.fd = listen_on(SOCK_DGRAM, i == 0 ? o->udp_port : 0, &udp_ports[i])};
	for (int i = 0, one = 1; o->gro && i < echoes; i++)
		if (fixed[3 + i].fd >= 0)
			(void)setsockopt(fixed[3 + i].fd, SOL_UDP, UDP_GRO, &one, sizeof one);
	for (int i = 0; i < 3 + echoes; i++) {
		struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &fixed[i]};
		if (ep < 0 || fixed[i].fd < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fixed[i].fd, &ev) != 0)
			return lg_fail(o, "cannot open the targets: %s", strerror(errno));
	}
	char list[MAX_UDP_ECHOES * 6 + 1] = "";
	for (int i = 0, at = 0; i < echoes; i++)
		at += snprintf(list + at, sizeof list - (size_t)at, "%s%u", i ? "," : "", udp_ports[i]);
	lg_print(o, "sink=%u echo=%u udp=%u udp_echoes=%s pid=%ld", sink_port, echo_port,
	         udp_ports[0], list, (long)getpid());
	struct epoll_event evs[128];
	for (;;) {
		int k = epoll_wait(ep, evs, 128, -1);
		for (int i = 0; i < k; i++) {
			struct conn *c = evs[i].data.ptr;
			bool keep = true;
			switch (c->role) {
			case SINK_LISTENER:
			case ECHO_LISTENER: accept_all(ep, c); break;
			case UDP_ECHO: udp_echo(c->fd); break;
			case SIGNALS: return 0; /* the process exits: the kernel closes the rest */
			case SINK: keep = sink_read(c); break;
			case ECHO: keep = echo_event(ep, c, evs[i].events); break;
			}
			if (!keep)
				conn_del(c);
		}
	}
}
