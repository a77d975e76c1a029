/* test_listener.c - sockets passed by an upgrade: which worker serves which TCP socket (i % m, and the surplus past the workers), the UDP ones by worker index, the probes that let a passed address through, the release that closes them. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "runtime/listener.h"
#include "runtime/worker.h"

#define MAX_PASSED 8

/* A SO_REUSEPORT socket of type on 127.0.0.1:port (0: any), listening when
 * it is a stream one; *port gets the bound port. */
static int reuseport_socket(int type, uint16_t *port)
{
	int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0);
	int one = 1;
	assert_true(fd >= 0);
	assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one), 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(*port),
	                        .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
	if (type == SOCK_STREAM)
		assert_int_equal(listen(fd, 16), 0);
	socklen_t len = sizeof a;
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	*port = ntohs(a.sin_port);
	return fd;
}

/* m sockets of type on one port: fds, returns the port. */
static uint16_t passed_group(int type, int *fds, size_t m)
{
	uint16_t port = 0;
	for (size_t i = 0; i < m; i++)
		fds[i] = reuseport_socket(type, &port);
	return port;
}

static ino_t inode(int fd)
{
	struct stat st;
	assert_int_equal(fstat(fd, &st), 0);
	return st.st_ino;
}

static bool is_open(int fd) { return fcntl(fd, F_GETFD) >= 0 || errno != EBADF; }

/* What each worker opened on the passed port. */
typedef struct opened {
	uint16_t port;
	listener *l[WORKERS_MAX];
	int fds[WORKERS_MAX][MAX_PASSED];
	size_t n[WORKERS_MAX];
} opened;

static void drop(listener *l, int fd, void *data)
{
	(void)l;
	(void)data;
	close(fd);
}

static void open_here(worker *w, void *arg)
{
	opened *o = arg;
	size_t i = worker_index(w);
	char err[256];
	o->l[i] = listener_open(w, "127.0.0.1", o->port, drop, NULL, err, sizeof err);
	assert_non_null(o->l[i]);
	o->n[i] = listener_fds(o->l[i], o->fds[i], MAX_PASSED);
}

static void close_here(worker *w, void *arg)
{
	opened *o = arg;
	listener_close(o->l[worker_index(w)]);
}

/* m passed TCP sockets, n workers: the inodes of the sockets each worker
 * serves into served[worker], how many into count[worker]. */
static void serve(size_t m, size_t n, ino_t served[][MAX_PASSED], size_t *count)
{
	int passed[MAX_PASSED];
	opened o = {.port = passed_group(SOCK_STREAM, passed, m)};
	char err[256];
	listener_inherit_owned(passed, m);
	assert_int_equal(listener_check_free("127.0.0.1", o.port, err, sizeof err), 0);
	workers *ws = workers_start(n, err, sizeof err);
	assert_non_null(ws);
	for (size_t i = 0; i < n; i++)
		worker_run(workers_at(ws, i), open_here, &o);
	listener_inherit_release();
	for (size_t i = 0; i < m; i++) /* the release closed them: the listeners hold copies */
		assert_false(is_open(passed[i]));
	for (size_t i = 0; i < n; i++) {
		count[i] = o.n[i];
		for (size_t k = 0; k < o.n[i]; k++)
			served[i][k] = inode(o.fds[i][k]);
		worker_run(workers_at(ws, i), close_here, &o);
	}
	workers_stop(ws, NULL, NULL);
}

static void more_passed_than_workers_all_served(void **state)
{
	(void)state;
	ino_t served[WORKERS_MAX][MAX_PASSED];
	size_t count[WORKERS_MAX];
	serve(3, 2, served, count);
	/* worker 0: sockets 0 and 2; worker 1: socket 1; three inodes */
	assert_int_equal(count[0], 2);
	assert_int_equal(count[1], 1);
	assert_true(served[0][0] != served[0][1] && served[0][0] != served[1][0] &&
	            served[0][1] != served[1][0]);
}

static void fewer_passed_than_workers_shared(void **state)
{
	(void)state;
	ino_t served[WORKERS_MAX][MAX_PASSED];
	size_t count[WORKERS_MAX];
	serve(2, 3, served, count);
	/* worker i serves socket i % 2: workers 0 and 2 share one */
	for (size_t i = 0; i < 3; i++)
		assert_int_equal(count[i], 1);
	assert_true(served[0][0] == served[2][0] && served[0][0] != served[1][0]);
}

static void udp_by_worker_index(void **state)
{
	(void)state;
	int passed[2];
	uint16_t port = passed_group(SOCK_DGRAM, passed, 2);
	ino_t want[2] = {inode(passed[0]), inode(passed[1])};
	listener_inherit_owned(passed, 2);
	char msg[256];
	assert_int_equal(listener_check_free_udp("127.0.0.1", port, msg, sizeof msg), 0);
	struct sockaddr_storage ss;
	assert_int_equal(listener_addr("127.0.0.1", port, &ss, msg, sizeof msg), 0);
	for (size_t i = 0; i < 3; i++) {
		int fd;
		assert_int_equal(listener_take_udp(&ss, i, &fd), 0);
		if (i == 2) {
			assert_int_equal(fd, -1); /* past them: the worker binds its own */
			continue;
		}
		assert_true(fd >= 0 && fd != passed[i]);
		assert_true(inode(fd) == want[i]);
		assert_true(fcntl(fd, F_GETFL) & O_NONBLOCK);
		close(fd);
	}
	/* a TCP probe on the port is not satisfied by UDP sockets: with the
	 * TCP port held (by this socket, or by whoever holds it already: the
	 * kernel chose the UDP port, not the TCP one) the probe still fails */
	int tcp = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(tcp >= 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
	                        .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	if (bind(tcp, (struct sockaddr *)&a, sizeof a) == 0)
		assert_int_equal(listen(tcp, 1), 0);
	assert_int_not_equal(listener_check_free("127.0.0.1", port, msg, sizeof msg), 0);
	close(tcp);
	listener_inherit_release();
	assert_false(is_open(passed[0]) || is_open(passed[1]));
	/* nothing is passed any more: the port binds anew */
	int fd;
	assert_int_equal(listener_take_udp(&ss, 0, &fd), 0);
	assert_int_equal(fd, -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(more_passed_than_workers_all_served),
		cmocka_unit_test(fewer_passed_than_workers_shared),
		cmocka_unit_test(udp_by_worker_index),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
