/* listener.c - SO_REUSEPORT listening sockets handed to libuv. */
#include "runtime/listener.h"

#include "runtime/guard.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct listener {
	uv_poll_t poll;    /* readable: connections wait */
	uv_timer_t backoff; /* accepts paused for lack of descriptors */
	worker *w;
	int fd;
	int open_handles; /* the timer, and the poll when poll_open */
	bool poll_open;
	bool nodelay; /* accepted sockets inherit TCP_NODELAY from this one */
	struct sockaddr_storage peer; /* the connection being handed to fn */
	listener_fn fn;
	void *data;
	uint16_t port;
	char where[64]; /* "<ip>:<port>" for the log */
	listener *next;  /* owned: more passed sockets this worker serves (open_surplus) */
};

static const char FAILED[] = "failed to listen on %s:%u: %s";
static const char NOT_IP[] = "not an IP address";

/* The sockets passed in: by the service manager (socket activation,
 * borrowed for the life of the process) or by the process an upgrade
 * replaces (owned until listener_inherit_release). Written by the control
 * thread before any worker starts and at the release, which follows the
 * start's worker jobs (worker_run waits): the workers read it without a
 * lock. */
typedef struct passed {
	int fd;
	bool owned;
} passed;
static passed inherited[LISTENER_INHERITED_MAX];
static size_t n_inherited;

static void add_inherited(const int *fds, size_t n, bool owned)
{
	for (size_t i = 0; i < n; i++) {
		if (n_inherited < LISTENER_INHERITED_MAX)
			inherited[n_inherited++] = (passed){.fd = fds[i], .owned = owned};
		else if (owned)
			close(fds[i]); /* nobody would serve it, nor close it */
	}
}

void listener_inherit(const int *fds, size_t n) { add_inherited(fds, n, false); }

void listener_inherit_owned(const int *fds, size_t n) { add_inherited(fds, n, true); }

void listener_inherit_release(void)
{
	size_t k = 0;
	for (size_t i = 0; i < n_inherited; i++) {
		if (inherited[i].owned)
			close(inherited[i].fd);
		else
			inherited[k++] = inherited[i];
	}
	n_inherited = k;
}

static bool same_address(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
	if (a->ss_family != b->ss_family)
		return false;
	if (a->ss_family == AF_INET) {
		const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;
		return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
	}
	const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;
	return x->sin6_port == y->sin6_port &&
	       memcmp(&x->sin6_addr, &y->sin6_addr, sizeof x->sin6_addr) == 0;
}

static bool bound_to(int fd, int type, const struct sockaddr_storage *ss)
{
	struct sockaddr_storage bound;
	socklen_t blen = sizeof bound;
	int t = 0;
	socklen_t tlen = sizeof t;
	return getsockopt(fd, SOL_SOCKET, SO_TYPE, &t, &tlen) == 0 && t == type &&
	       getsockname(fd, (struct sockaddr *)&bound, &blen) == 0 && same_address(&bound, ss);
}

/* How many passed sockets of type are bound to exactly ss. Port 0 asks for
 * any port, which no passed socket is. */
static size_t passed_count(const struct sockaddr_storage *ss, int type)
{
	size_t m = 0;
	for (size_t i = 0; i < n_inherited; i++)
		m += bound_to(inherited[i].fd, type, ss);
	return m;
}

/* The k-th of them, in the order passed (an upgrade passes them in its
 * workers' order), or -1. */
static int passed_nth(const struct sockaddr_storage *ss, int type, size_t k)
{
	for (size_t i = 0; i < n_inherited; i++)
		if (bound_to(inherited[i].fd, type, ss) && k-- == 0)
			return inherited[i].fd;
	return -1;
}

/* A non-blocking, close-on-exec descriptor of the caller's own for the
 * passed socket fd (each worker closes its own), or a negative errno. */
static int dup_passed(int fd)
{
	int dup = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (dup < 0)
		return -errno;
	int flags = fcntl(dup, F_GETFL);
	if (flags < 0 || fcntl(dup, F_SETFL, flags | O_NONBLOCK) < 0) {
		int rc = -errno;
		close(dup);
		return rc;
	}
	return dup;
}

/* dup_passed, and listening. */
static int take_inherited(int fd)
{
	int dup = dup_passed(fd);
	if (dup < 0)
		return dup;
	int listening = 0;
	socklen_t len = sizeof listening;
	/* systemd listens already (ListenStream=); another manager may not */
	if (getsockopt(dup, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) < 0 ||
	    (!listening && listen(dup, LISTENER_BACKLOG) < 0)) {
		int rc = -errno;
		close(dup);
		return rc;
	}
	return dup;
}

int listener_take_udp(const struct sockaddr_storage *ss, size_t index, int *fd)
{
	int p = passed_nth(ss, SOCK_DGRAM, index);
	*fd = p < 0 ? -1 : dup_passed(p);
	return *fd < -1 ? *fd : 0;
}

int listener_addr(const char *ip, uint16_t port, struct sockaddr_storage *ss, char *err,
                  size_t err_size)
{
	if (uv_ip4_addr(ip, port, (struct sockaddr_in *)ss) == 0 ||
	    uv_ip6_addr(ip, port, (struct sockaddr_in6 *)ss) == 0)
		return 0;
	listener_failed(err, err_size, ip, port, NOT_IP);
	return -1;
}

void listener_failed(char *err, size_t err_size, const char *ip, uint16_t port, const char *why)
{
	snprintf(err, err_size, FAILED, ip, port, why);
}

static void on_readable(uv_poll_t *p, int status, int events);

static void on_backoff(uv_timer_t *t)
{
	listener *l = t->data;
	uv_poll_start(&l->poll, UV_READABLE, on_readable);
}

/* Accepts what waits, up to LISTENER_ACCEPT_BATCH a wake-up so one busy
 * listener does not hold the loop. Out of descriptors (EMFILE, ENFILE) or
 * kernel memory, the listener stops watching for LISTENER_BACKOFF_MS: the
 * clients wait in the backlog until connections close, instead of a loop
 * that spins on a socket it cannot accept from (as nginx and HAProxy do). */
static void on_readable(uv_poll_t *p, int status, int events)
{
	(void)events;
	listener *l = p->data;
	if (status < 0)
		return;
	for (int i = 0; i < LISTENER_ACCEPT_BATCH; i++) {
		/* the peer's address comes with the accept: no getpeername */
		socklen_t plen = sizeof l->peer;
		int fd = accept4(l->fd, (struct sockaddr *)&l->peer, &plen,
		                 SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd >= 0) {
			l->fn(l, fd, l->data);
			continue;
		}
		if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return;
		int err = errno;
		uv_poll_stop(&l->poll);
		uv_timer_start(&l->backoff, on_backoff, LISTENER_BACKOFF_MS, 0);
		guard_accept_paused(worker_guard(l->w), l->where, uv_strerror(-err),
		                    LISTENER_BACKOFF_MS);
		return;
	}
}

/* A listening socket for ss on worker w: a passed one bound there, else a
 * new one. With m passed for ss, worker i serves number i % m: every
 * worker serves one, every socket is served when m <= the workers.
 * Returns it (non-blocking, close-on-exec), or a negative errno. */
static int open_socket(const struct sockaddr_storage *ss, uint16_t port, const worker *w)
{
	size_t m = port ? passed_count(ss, SOCK_STREAM) : 0;
	if (m)
		return take_inherited(passed_nth(ss, SOCK_STREAM, worker_index(w) % m));
	/* libuv 1.44 cannot set SO_REUSEPORT itself: make the socket here. */
	int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int one = 1;
	socklen_t len = ss->ss_family == AF_INET ? sizeof(struct sockaddr_in)
	                                          : sizeof(struct sockaddr_in6);
	/* "::" takes IPv4 clients too (as v4-mapped addresses), what users
	 * of other proxies expect of it; a specific v6 address is v6 anyway. */
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
	    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) ||
	    bind(fd, (const struct sockaddr *)ss, len) || listen(fd, LISTENER_BACKLOG)) {
		int rc = -errno;
		close(fd);
		return rc;
	}
	return fd;
}

/* A listener on fd (taken in every case), or NULL with the reason in err. */
static listener *listener_new(worker *w, int fd, const char *ip, uint16_t port, listener_fn fn,
                              void *data, char *err, size_t err_size)
{
	struct sockaddr_storage bound;
	socklen_t blen = sizeof bound;
	getsockname(fd, (struct sockaddr *)&bound, &blen);

	listener *l = calloc(1, sizeof *l);
	if (!l) {
		close(fd);
		snprintf(err, err_size, FAILED, ip, port, uv_strerror(UV_ENOMEM));
		return NULL;
	}
	l->w = w;
	l->fd = fd;
	/* Linux copies TCP_NODELAY to the sockets accepted from this one:
	 * set once here, not once a connection */
	int one = 1;
	l->nodelay = setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) == 0;
	l->fn = fn;
	l->data = data;
	l->port = ntohs(bound.ss_family == AF_INET ? ((struct sockaddr_in *)&bound)->sin_port
	                                           : ((struct sockaddr_in6 *)&bound)->sin6_port);
	snprintf(l->where, sizeof l->where, strchr(ip, ':') ? "[%s]:%u" : "%s:%u", ip, l->port);
	uv_timer_init(worker_loop(w), &l->backoff);
	l->backoff.data = l;
	l->open_handles = 1;
	int rc = uv_poll_init_socket(worker_loop(w), &l->poll, fd);
	if (rc == 0) {
		l->open_handles++;
		l->poll_open = true;
		l->poll.data = l;
		rc = uv_poll_start(&l->poll, UV_READABLE, on_readable);
	}
	if (rc) {
		snprintf(err, err_size, FAILED, ip, port, uv_strerror(rc));
		listener_close(l);
		return NULL;
	}
	return l;
}

/* More passed sockets for ss than workers (an upgrade from a process that
 * ran more of them): worker i serves number j too for every j = i mod n
 * past the first n, since a socket nobody accepts on would still get its
 * share of the port's connections from the kernel. Returns 0, or -1. */
static int open_surplus(listener *l, const struct sockaddr_storage *ss, const char *ip,
                        char *err, size_t err_size)
{
	size_t m = passed_count(ss, SOCK_STREAM), n = worker_set_size(l->w);
	listener **tail = &l->next;
	for (size_t j = worker_index(l->w) + n; n && j < m; j += n) {
		int fd = take_inherited(passed_nth(ss, SOCK_STREAM, j));
		if (fd < 0) {
			snprintf(err, err_size, FAILED, ip, l->port, uv_strerror(fd));
			return -1;
		}
		*tail = listener_new(l->w, fd, ip, l->port, l->fn, l->data, err, err_size);
		if (!*tail)
			return -1;
		tail = &(*tail)->next;
	}
	return 0;
}

listener *listener_open(worker *w, const char *ip, uint16_t port, listener_fn fn, void *data,
                        char *err, size_t err_size)
{
	struct sockaddr_storage ss;
	if (listener_addr(ip, port, &ss, err, err_size))
		return NULL;
	int fd = open_socket(&ss, port, w);
	if (fd < 0) {
		snprintf(err, err_size, FAILED, ip, port, uv_strerror(fd));
		return NULL;
	}
	listener *l = listener_new(w, fd, ip, port, fn, data, err, err_size);
	if (l && port && open_surplus(l, &ss, ip, err, err_size)) {
		listener_close(l);
		return NULL;
	}
	return l;
}

size_t listener_fds(const listener *l, int *fds, size_t max)
{
	size_t k = 0;
	for (; l && k < max; l = l->next)
		fds[k++] = l->fd;
	return k;
}

/* A probe bind without SO_REUSEPORT: it fails where any socket of the type
 * holds the address, where a SO_REUSEPORT bind would quietly share it. */
static int check_free(int type, const char *ip, uint16_t port, char *err, size_t err_size)
{
	struct sockaddr_storage ss;
	if (port == 0)
		return 0;
	if (listener_addr(ip, port, &ss, err, err_size))
		return -1;
	if (passed_count(&ss, type))
		return 0; /* ours: the open takes it */
	int fd = socket(ss.ss_family, type | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return 0; /* the real bind will report it */
	int one = 1;
	socklen_t len = ss.ss_family == AF_INET ? sizeof(struct sockaddr_in)
	                                         : sizeof(struct sockaddr_in6);
	int rc = 0;
	if (type == SOCK_STREAM) /* TIME_WAIT leftovers do not hold a port */
		(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(fd, (struct sockaddr *)&ss, len) && errno == EADDRINUSE) {
		snprintf(err, err_size, FAILED, ip, port, uv_strerror(UV_EADDRINUSE));
		rc = -1;
	}
	close(fd);
	return rc;
}

int listener_check_free(const char *ip, uint16_t port, char *err, size_t err_size)
{
	return check_free(SOCK_STREAM, ip, port, err, err_size);
}

int listener_check_free_udp(const char *ip, uint16_t port, char *err, size_t err_size)
{
	return check_free(SOCK_DGRAM, ip, port, err, err_size);
}

uint16_t listener_port(const listener *l) { return l->port; }

const struct sockaddr_storage *listener_peer(const listener *l) { return &l->peer; }

bool listener_nodelay(const listener *l) { return l->nodelay; }

worker *listener_worker(const listener *l) { return l->w; }

static void on_closed(uv_handle_t *h)
{
	listener *l = h->data;
	if (--l->open_handles > 0)
		return;
	close(l->fd);
	free(l);
}

void listener_defer_accept(listener *l, int secs)
{
	for (; l; l = l->next)
		(void)setsockopt(l->fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &secs, sizeof secs);
}

void listener_set_data(listener *l, void *data)
{
	for (; l; l = l->next)
		l->data = data;
}

void listener_close(listener *l)
{
	while (l) {
		listener *next = l->next;
		if (l->poll_open)
			uv_close((uv_handle_t *)&l->poll, on_closed);
		uv_close((uv_handle_t *)&l->backoff, on_closed);
		l = next;
	}
}
