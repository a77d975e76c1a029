/* listener.c - SO_REUSEPORT listening sockets handed to libuv. */
#include "runtime/listener.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

struct listener {
	uv_tcp_t tcp;
	listener_fn fn;
	void *data;
	uint16_t port;
};

static const char FAILED[] = "failed to listen on %s:%u: %s";
static const char NOT_IP[] = "not an IP address";

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

static void on_connection(uv_stream_t *server, int status)
{
	listener *l = server->data;
	if (status < 0)
		return; /* EMFILE and friends: the next accept may work */
	l->fn(l, server, l->data);
}

listener *listener_open(worker *w, const char *ip, uint16_t port, listener_fn fn, void *data,
                        char *err, size_t err_size)
{
	struct sockaddr_storage ss;
	int rc;
	if (listener_addr(ip, port, &ss, err, err_size))
		return NULL;
	/* libuv 1.44 cannot set SO_REUSEPORT itself: make the socket here. */
	int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		snprintf(err, err_size, FAILED, ip, port, uv_strerror(-errno));
		return NULL;
	}
	int one = 1;
	socklen_t len = ss.ss_family == AF_INET ? sizeof(struct sockaddr_in)
	                                         : sizeof(struct sockaddr_in6);
	/* "::" takes IPv4 clients too (as v4-mapped addresses), what users
	 * of other proxies expect of it; a specific v6 address is v6 anyway. */
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
	    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) ||
	    bind(fd, (struct sockaddr *)&ss, len)) {
		rc = -errno;
		close(fd);
		snprintf(err, err_size, FAILED, ip, port, uv_strerror(rc));
		return NULL;
	}
	struct sockaddr_storage bound;
	socklen_t blen = sizeof bound;
	getsockname(fd, (struct sockaddr *)&bound, &blen);

	listener *l = calloc(1, sizeof *l);
	if (!l) {
		close(fd);
		snprintf(err, err_size, FAILED, ip, port, uv_strerror(UV_ENOMEM));
		return NULL;
	}
	l->fn = fn;
	l->data = data;
	l->port = ntohs(bound.ss_family == AF_INET ? ((struct sockaddr_in *)&bound)->sin_port
	                                           : ((struct sockaddr_in6 *)&bound)->sin6_port);
	uv_tcp_init(worker_loop(w), &l->tcp);
	l->tcp.data = l;
	rc = uv_tcp_open(&l->tcp, fd);
	if (rc == 0)
		rc = uv_listen((uv_stream_t *)&l->tcp, LISTENER_BACKLOG, on_connection);
	if (rc) {
		snprintf(err, err_size, FAILED, ip, port, uv_strerror(rc));
		listener_close(l);
		return NULL;
	}
	return l;
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

static void on_closed(uv_handle_t *h) { free(h->data); }

void listener_close(listener *l) { uv_close((uv_handle_t *)&l->tcp, on_closed); }
