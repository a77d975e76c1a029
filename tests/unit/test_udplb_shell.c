/* test_udplb_shell.c - the UDP load balancer through the library API: a started engine forwards a datagram to an echo backend and back, and its counters read back through etm_supervisor_udplb_stats and etm_supervisor_write_metrics; a reload changes a cluster under live flows, adds and removes udp_lb inbounds, keeps health. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "app/config.h"
#include "etemenanki/supervisor.h"

/* A UDP socket on 127.0.0.1 with a receive timeout, so no test can hang. */
static int udp_socket(uint16_t *port)
{
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	assert_true(fd >= 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
	socklen_t len = sizeof a;
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	*port = ntohs(a.sin_port);
	struct timeval tv = {.tv_sec = 3};
	assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
	return fd;
}

/* Echoes datagrams, "echo:" first, until one says "quit". */
static void *echo(void *arg)
{
	int fd = *(int *)arg;
	char buf[2048];
	for (;;) {
		struct sockaddr_storage from;
		socklen_t flen = sizeof from;
		ssize_t n = recvfrom(fd, buf + 5, sizeof buf - 5, 0, (struct sockaddr *)&from, &flen);
		if (n < 0 || (n == 4 && memcmp(buf + 5, "quit", 4) == 0))
			return NULL;
		memcpy(buf, "echo:", 5);
		(void)sendto(fd, buf, (size_t)n + 5, 0, (struct sockaddr *)&from, flen);
	}
}

static void round_trip_and_counters(void **state)
{
	(void)state;
	uint16_t bport, cport;
	int backend = udp_socket(&bport);
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, echo, &backend), 0);

	char toml[1024];
	snprintf(toml, sizeof toml,
	         "[runtime]\nworkers = 1\n"
	         "[[inbound]]\ntag = \"socks\"\nprotocol = \"socks\"\nport = 0\n"
	         "[[inbound]]\ntag = \"lb\"\nprotocol = \"udp_lb\"\nport = 0\n"
	         "[inbound.settings]\ncluster = \"c\"\n"
	         "[[outbound]]\ntag = \"direct\"\nprotocol = \"direct\"\n"
	         "[[cluster]]\ntag = \"c\"\nbackends = [\"127.0.0.1:%u\"]\nresponses = 1\n",
	         bport);
	etm_spec spec;
	char msg[CONFIG_MSG_MAX];
	assert_int_equal(config_load(toml, strlen(toml), &spec, msg, sizeof msg), 0);
	etm_supervisor *s;
	assert_int_equal(etm_supervisor_start(&spec, &s, msg, sizeof msg), 0);

	int client = udp_socket(&cport);
	struct sockaddr_in lb = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
	                         .sin_port = htons(etm_supervisor_inbound_port(s, 1))};
	assert_int_equal(sendto(client, "hello", 5, 0, (struct sockaddr *)&lb, sizeof lb), 5);
	char buf[64];
	struct sockaddr_in from;
	socklen_t flen = sizeof from;
	ssize_t n = recvfrom(client, buf, sizeof buf, 0, (struct sockaddr *)&from, &flen);
	assert_int_equal(n, 10);
	assert_memory_equal(buf, "echo:hello", 10);
	assert_int_equal(from.sin_port, lb.sin_port); /* from the listener, not the backend */

	/* the flow ended with its one response; the reply is counted once
	 * the kernel took it, a moment after it may have arrived here */
	etm_udplb_stats st;
	for (int i = 0; i < 200; i++) {
		assert_int_equal(etm_supervisor_udplb_stats(s, 1, &st), 0);
		if (st.datagrams_to_clients == 1)
			break;
		usleep(10000);
	}
	assert_int_equal(st.flows_created, 1);
	assert_int_equal(st.flows_evicted, 1);
	assert_int_equal(st.active_flows, 0);
	assert_int_equal(st.datagrams_to_backends, 1);
	assert_int_equal(st.bytes_to_backends, 5);
	assert_int_equal(st.datagrams_to_clients, 1);
	assert_int_equal(st.bytes_to_clients, 10);
	assert_int_equal(st.evicted[1], 1); /* responses */
	assert_string_equal(etm_udplb_close_name(1), "responses");
	assert_int_equal(etm_supervisor_udplb_stats(s, 0, &st), -1); /* socks */
	assert_int_equal(etm_supervisor_udplb_stats(s, 2, &st), -1);

	char *text = NULL;
	size_t len = 0;
	FILE *mem = open_memstream(&text, &len);
	assert_non_null(mem);
	etm_supervisor_write_metrics(s, mem);
	fclose(mem);
	/* the guard's line first (nothing refused here), then the inbound's */
	const char *guard = "guard: refused_source=0 refused_loop=0 accept_paused=0 "
	                    "refused_fanout=0 refused_open_rate=0\n";
	assert_true(strncmp(text, guard, strlen(guard)) == 0);
	const char *block = text + strlen(guard);
	/* the duration is the flow's, in ms: anything */
	const char *want = "udp_lb lb: active_flows=0 flows_created=1 flows_evicted=1 flows_shed=0 "
	                   "datagrams_to_backends=1 bytes_to_backends=5 datagrams_to_clients=1 "
	                   "bytes_to_clients=10 flow_duration_ms=";
	assert_true(strncmp(block, want, strlen(want)) == 0);
	const char *rest = block + strlen(want);
	rest += strspn(rest, "0123456789");
	assert_true(strncmp(rest, " sockets_reused=0\n", 18) == 0);
	assert_non_null(strstr(text, "\nudp_lb lb: drops truncated=0 no_backend=0 invalid=0 "
	                             "shed_draining=0 shed_per_ip=0 shed_per_subnet=0 "
	                             "shed_max_flows=0 no_memory=0 unknown_flow=0 queue_full=0 "
	                             "open_failed=0 send_error=0\n"
	                             "udp_lb lb: evicted idle=0 responses=1 requests=0 closed=0 "
	                             "aborted=0 removed=0\n"));
	char backend_line[128];
	snprintf(backend_line, sizeof backend_line,
	         "\nudp_lb lb: backend 127.0.0.1:%u up flows_created=1\n", bport);
	assert_non_null(strstr(text, backend_line));
	free(text);

	etm_supervisor_stop(s);
	struct sockaddr_in b = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
	                        .sin_port = htons(bport)};
	assert_int_equal(sendto(client, "quit", 4, 0, (struct sockaddr *)&b, sizeof b), 4);
	pthread_join(th, NULL);
	close(client);
	close(backend);
}

/* ---- out of descriptors with sockets waiting for reuse ---- */

/* Descriptors open in this process now. */
static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return -1;
	int n = 0;
	while (readdir(d))
		n++;
	closedir(d);
	return n - 3; /* ".", ".." and the directory's own */
}

/* Sends "q" to the listener from 127.0.9.<host> (IP_PKTINFO on a socket
 * bound to 0.0.0.0: one client socket is many flows). */
static bool send_from(int fd, uint16_t lb_port, unsigned host)
{
	struct sockaddr_in lb = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
	                         .sin_port = htons(lb_port)};
	uint8_t ctl[CMSG_SPACE(sizeof(struct in_pktinfo))] = {0};
	struct iovec iov = {"q", 1};
	struct msghdr mh = {.msg_name = &lb, .msg_namelen = sizeof lb, .msg_iov = &iov,
	                    .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof ctl};
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = IPPROTO_IP;
	c->cmsg_type = IP_PKTINFO;
	c->cmsg_len = CMSG_LEN(sizeof(struct in_pktinfo));
	struct in_pktinfo pi = {.ipi_spec_dst.s_addr = htonl(0x7f000900u | host)};
	memcpy(CMSG_DATA(c), &pi, sizeof pi);
	return sendmsg(fd, &mh, 0) == 1;
}

/* Waits for n replies on fd; false when one does not come. */
static bool replies(int fd, int n)
{
	char buf[64];
	for (int i = 0; i < n; i++)
		if (recv(fd, buf, sizeof buf, 0) <= 0)
			return false;
	return true;
}

/* The child of waiting_sockets_give_way_when_descriptors_run_out: 0 when
 * every check held, else the number of the one that failed. */
static int out_of_descriptors_child(void)
{
	uint16_t aport, bport;
	int a = udp_socket(&aport), b = udp_socket(&bport); /* b is bound and never answers */
	(void)b;
	pthread_t th;
	if (pthread_create(&th, NULL, echo, &a))
		return 1;
	char toml[1024];
	snprintf(toml, sizeof toml,
	         "[runtime]\nworkers = 1\n"
	         "[[inbound]]\ntag = \"lb\"\nprotocol = \"udp_lb\"\nport = 0\n"
	         "[inbound.settings]\ncluster = \"c\"\nmax_flows = 200\n"
	         "[[cluster]]\ntag = \"c\"\nbackends = [\"127.0.0.1:%u\", \"127.0.0.1:%u\"]\n"
	         "selection = \"round_robin\"\nresponses = 1\nreuse_upstream_sockets = true\n"
	         "idle_timeout = 60\n",
	         aport, bport);
	etm_spec spec;
	char msg[CONFIG_MSG_MAX];
	etm_supervisor *s;
	if (config_load(toml, strlen(toml), &spec, msg, sizeof msg) ||
	    etm_supervisor_start(&spec, &s, msg, sizeof msg))
		return 2;
	uint16_t lb = etm_supervisor_inbound_port(s, 0);
	int client = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in any = {.sin_family = AF_INET};
	struct timeval tv = {.tv_sec = 3};
	if (client < 0 || bind(client, (struct sockaddr *)&any, sizeof any) ||
	    setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv))
		return 3;
	/* 10 flows to a, answered: their sockets wait; 10 to b stay open
	 * (round robin takes them in the order they arrive) */
	for (unsigned i = 0; i < 20; i++)
		if (!send_from(client, lb, 2 + i))
			return 4;
	if (!replies(client, 10))
		return 5;
	etm_udplb_stats st;
	for (int i = 0; i < 200; i++) {
		if (etm_supervisor_udplb_stats(s, 0, &st))
			return 6;
		if (st.flows_created == 20 && st.active_flows == 10)
			break;
		usleep(5000);
	}
	if (st.flows_created != 20 || st.active_flows != 10 || st.drops[10] != 0)
		return 7;
	/* Room for two descriptors more; 10 new flows, 5 of them to b, need
	 * more: a socket() that finds none closes the waiting ones. */
	struct rlimit rl;
	int used = open_fds();
	if (used < 0 || getrlimit(RLIMIT_NOFILE, &rl))
		return 8;
	rl.rlim_cur = (rlim_t)used + 2;
	if (setrlimit(RLIMIT_NOFILE, &rl))
		return 8;
	for (unsigned i = 0; i < 10; i++)
		if (!send_from(client, lb, 40 + i))
			return 9;
	if (!replies(client, 5))
		return 10; /* the five to a are answered */
	for (int i = 0; i < 200; i++) {
		if (etm_supervisor_udplb_stats(s, 0, &st))
			return 6;
		if (st.flows_created == 30)
			break;
		usleep(5000);
	}
	/* drops[10] is open_failed (etm_udplb_drop_name) */
	if (st.flows_created != 30 || st.drops[10] != 0 || st.evicted[4] != 0)
		return 11;
	etm_supervisor_stop(s);
	return 0;
}

static void waiting_sockets_give_way_when_descriptors_run_out(void **state)
{
	(void)state;
	assert_string_equal(etm_udplb_drop_name(10), "open_failed");
	assert_string_equal(etm_udplb_close_name(4), "aborted");
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(out_of_descriptors_child());
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0); /* else the number of the check that failed */
}

/* ---- which sockets take coalesced trains ---- */

/* UDP_GRO on the socket of this process whose local (peer false) or peer
 * (peer true) port is port: 0 or 1, or -1 when there is no such socket. */
static int gro_of(uint16_t port, bool peer)
{
	for (int fd = 3; fd < 4096; fd++) {
		struct sockaddr_in a;
		socklen_t len = sizeof a;
		int r = peer ? getpeername(fd, (struct sockaddr *)&a, &len)
		             : getsockname(fd, (struct sockaddr *)&a, &len);
		if (r || a.sin_family != AF_INET || ntohs(a.sin_port) != port)
			continue;
		int on = 0;
		socklen_t olen = sizeof on;
		if (getsockopt(fd, SOL_UDP, UDP_GRO, &on, &olen))
			return -1;
		return on != 0;
	}
	return -1;
}

/* Answers each datagram with a burst of 3 copies in one GSO send, so all
 * three are queued on the balancer's socket at once. */
static void *burst_echo(void *arg)
{
	int fd = *(int *)arg;
	char buf[3 * 512];
	for (;;) {
		struct sockaddr_storage from;
		socklen_t flen = sizeof from;
		ssize_t n = recvfrom(fd, buf, 512, 0, (struct sockaddr *)&from, &flen);
		if (n <= 0 || (n == 4 && memcmp(buf, "quit", 4) == 0))
			return NULL;
		memcpy(buf + n, buf, (size_t)n);
		memcpy(buf + 2 * n, buf, (size_t)n);
		uint8_t ctl[CMSG_SPACE(sizeof(uint16_t))] = {0};
		struct iovec iov = {buf, 3 * (size_t)n};
		struct msghdr mh = {.msg_name = &from, .msg_namelen = flen, .msg_iov = &iov,
		                    .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof ctl};
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_UDP;
		c->cmsg_type = UDP_SEGMENT;
		c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
		uint16_t seg = (uint16_t)n;
		memcpy(CMSG_DATA(c), &seg, sizeof seg);
		(void)sendmsg(fd, &mh, 0);
	}
}

/* The listener takes trains from the start; a flow's socket only once its
 * backend has sent more than one reply to one read, so a flow that gets
 * one answer never pays for the option. */
static void trains_are_taken_where_bursts_come(void **state)
{
	(void)state;
	uint16_t one_port, burst_port, cport;
	int one = udp_socket(&one_port), burst = udp_socket(&burst_port);
	pthread_t t1, t2;
	assert_int_equal(pthread_create(&t1, NULL, echo, &one), 0);
	assert_int_equal(pthread_create(&t2, NULL, burst_echo, &burst), 0);
	char toml[1024];
	snprintf(toml, sizeof toml,
	         "[runtime]\nworkers = 1\n"
	         "[[inbound]]\ntag = \"one\"\nprotocol = \"udp_lb\"\nport = 0\n"
	         "[inbound.settings]\ncluster = \"one\"\n"
	         "[[inbound]]\ntag = \"burst\"\nprotocol = \"udp_lb\"\nport = 0\n"
	         "[inbound.settings]\ncluster = \"burst\"\n"
	         "[[cluster]]\ntag = \"one\"\nbackends = [\"127.0.0.1:%u\"]\n"
	         "[[cluster]]\ntag = \"burst\"\nbackends = [\"127.0.0.1:%u\"]\n",
	         one_port, burst_port);
	etm_spec spec;
	char msg[CONFIG_MSG_MAX];
	assert_int_equal(config_load(toml, strlen(toml), &spec, msg, sizeof msg), 0);
	etm_supervisor *s;
	assert_int_equal(etm_supervisor_start(&spec, &s, msg, sizeof msg), 0);
	uint16_t lb_one = etm_supervisor_inbound_port(s, 0), lb_burst = etm_supervisor_inbound_port(s, 1);
	assert_int_equal(gro_of(lb_one, false), 1);
	assert_int_equal(gro_of(lb_burst, false), 1);

	int client = udp_socket(&cport);
	char buf[2048];
	for (int round = 0; round < 10; round++) {
		struct sockaddr_in to = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
		                         .sin_port = htons(lb_one)};
		assert_int_equal(sendto(client, "ping", 4, 0, (struct sockaddr *)&to, sizeof to), 4);
		assert_int_equal(recv(client, buf, sizeof buf, 0), 9); /* "echo:ping" */
		to.sin_port = htons(lb_burst);
		assert_int_equal(sendto(client, "ping", 4, 0, (struct sockaddr *)&to, sizeof to), 4);
		for (int i = 0; i < 3; i++)
			assert_int_equal(recv(client, buf, sizeof buf, 0), 4);
	}
	/* the flows' own sockets, found by their backend's port */
	assert_int_equal(gro_of(one_port, true), 0);
	assert_int_equal(gro_of(burst_port, true), 1);

	etm_supervisor_stop(s);
	struct sockaddr_in q = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	q.sin_port = htons(one_port);
	assert_int_equal(sendto(client, "quit", 4, 0, (struct sockaddr *)&q, sizeof q), 4);
	q.sin_port = htons(burst_port);
	assert_int_equal(sendto(client, "quit", 4, 0, (struct sockaddr *)&q, sizeof q), 4);
	pthread_join(t1, NULL);
	pthread_join(t2, NULL);
	close(client);
	close(one);
	close(burst);
}

/* ---- reloads (issue 16) ---- */

/* A backend: a UDP socket on 127.0.0.1 answering "<name>|<payload>", and,
 * with health, a TCP listener on the same port number for the checks
 * (the kernel completes their handshakes; nothing accepts). */
typedef struct named {
	int fd, tcp;
	uint16_t port;
	char name;
	pthread_t th;
} named;

static void *named_echo(void *arg)
{
	named *b = arg;
	char buf[2048];
	for (;;) {
		struct sockaddr_storage from;
		socklen_t flen = sizeof from;
		ssize_t n = recvfrom(b->fd, buf + 2, sizeof buf - 2, 0, (struct sockaddr *)&from, &flen);
		if (n < 0 || (n == 4 && memcmp(buf + 2, "quit", 4) == 0))
			return NULL;
		buf[0] = b->name;
		buf[1] = '|';
		(void)sendto(b->fd, buf, (size_t)n + 2, 0, (struct sockaddr *)&from, flen);
	}
}

/* With health the TCP port is taken first and the UDP socket binds the
 * same number (retried: that UDP port may be someone's). */
static void named_start(named *b, char name, bool health)
{
	b->name = name;
	b->tcp = -1;
	b->fd = -1;
	for (int tries = 0; health && b->fd < 0 && tries < 20; tries++) {
		if (b->tcp >= 0)
			close(b->tcp);
		b->tcp = socket(AF_INET, SOCK_STREAM, 0);
		struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		socklen_t len = sizeof a;
		assert_int_equal(bind(b->tcp, (struct sockaddr *)&a, sizeof a), 0);
		assert_int_equal(listen(b->tcp, 128), 0);
		assert_int_equal(getsockname(b->tcp, (struct sockaddr *)&a, &len), 0);
		b->fd = socket(AF_INET, SOCK_DGRAM, 0);
		if (bind(b->fd, (struct sockaddr *)&a, sizeof a)) {
			close(b->fd);
			b->fd = -1;
			continue;
		}
		b->port = ntohs(a.sin_port);
	}
	if (!health)
		b->fd = udp_socket(&b->port);
	assert_true(b->fd >= 0);
	struct timeval tv = {.tv_sec = 30}; /* idle between tests' phases */
	assert_int_equal(setsockopt(b->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
	assert_int_equal(pthread_create(&b->th, NULL, named_echo, b), 0);
}

static void named_stop(named *b)
{
	int q = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
	                        .sin_port = htons(b->port)};
	assert_int_equal(sendto(q, "quit", 4, 0, (struct sockaddr *)&a, sizeof a), 4);
	pthread_join(b->th, NULL);
	close(q);
	close(b->fd);
	if (b->tcp >= 0)
		close(b->tcp);
}

/* A client socket bound to 127.0.0.<host>, with a short receive timeout. */
static int client_at(unsigned host)
{
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	assert_true(fd >= 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000000u | host)};
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
	struct timeval tv = {.tv_usec = 700000};
	assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
	return fd;
}

/* Sends "q<i>" to the listener on port; the name of the backend that
 * answered, or 0 when nothing came. */
static char ask(int fd, uint16_t port, int i)
{
	char msg[16], buf[64];
	int n = snprintf(msg, sizeof msg, "q%d", i);
	struct sockaddr_in lb = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
	                         .sin_port = htons(port)};
	assert_int_equal(sendto(fd, msg, (size_t)n, 0, (struct sockaddr *)&lb, sizeof lb), n);
	ssize_t got = recv(fd, buf, sizeof buf, 0);
	if (got <= 0)
		return 0;
	assert_int_equal(got, n + 2);
	assert_memory_equal(buf + 2, msg, (size_t)n);
	return buf[0];
}

static etm_supervisor *start_text(const char *toml)
{
	etm_spec spec;
	char msg[CONFIG_MSG_MAX];
	int rc = config_load(toml, strlen(toml), &spec, msg, sizeof msg);
	if (rc)
		fail_msg("config: %s", msg);
	etm_supervisor *s;
	if (etm_supervisor_start(&spec, &s, msg, sizeof msg))
		fail_msg("start: %s", msg);
	return s;
}

static void apply_text(etm_supervisor *s, const char *toml)
{
	etm_spec spec;
	char msg[CONFIG_MSG_MAX];
	if (config_load(toml, strlen(toml), &spec, msg, sizeof msg))
		fail_msg("config: %s", msg);
	if (etm_supervisor_apply(s, &spec, msg, sizeof msg))
		fail_msg("apply: %s", msg);
}

/* The metric lines, in a string to free. */
static char *metrics(etm_supervisor *s)
{
	char *text = NULL;
	size_t len = 0;
	FILE *mem = open_memstream(&text, &len);
	assert_non_null(mem);
	etm_supervisor_write_metrics(s, mem);
	fclose(mem);
	return text;
}

static bool has_backend_line(etm_supervisor *s, const named *b, const char *state)
{
	char want[128];
	snprintf(want, sizeof want, "backend 127.0.0.1:%u %s ", b->port, state);
	char *text = metrics(s);
	bool found = strstr(text, want) != NULL;
	free(text);
	return found;
}

/* One udp_lb inbound "lb" on port (0: any) over the cluster's backends. */
static void lb_toml(char *out, size_t size, unsigned workers, uint16_t port, const char *backends,
                    const char *extra)
{
	int n = snprintf(out, size,
	                 "[runtime]\nworkers = %u\n"
	                 "[[inbound]]\ntag = \"lb\"\nprotocol = \"udp_lb\"\nport = %u\n"
	                 "[inbound.settings]\ncluster = \"c\"\n"
	                 "[[cluster]]\ntag = \"c\"\nbackends = [%s]\n"
	                 "selection = \"round_robin\"\nidle_timeout = 60\n%s",
	                 workers, port, backends, extra);
	assert_true(n > 0 && (size_t)n < size);
}

#define CLIENTS 12

/* A reload that changes a cluster keeps every flow whose backend stays, on
 * that backend, on every worker; a removed backend's flows end (evicted,
 * removed) and their clients' next datagrams go to the backends that stay;
 * a backend added takes new flows; twenty reloads in a row drop nothing. */
static void a_reload_keeps_the_flows_of_the_backends_that_stay(void **state)
{
	(void)state;
	named a, b, c, d;
	named_start(&a, 'a', false);
	named_start(&b, 'b', false);
	named_start(&c, 'c', false);
	named_start(&d, 'd', false);
	char toml[2048], list[256];
	snprintf(list, sizeof list, "\"127.0.0.1:%u\", \"127.0.0.1:%u\", \"127.0.0.1:%u\"", a.port,
	         b.port, c.port);
	lb_toml(toml, sizeof toml, 2, 0, list, "");
	etm_supervisor *s = start_text(toml);
	uint16_t port = etm_supervisor_inbound_port(s, 0);

	/* four client IPs: both workers hold flows */
	int cl[CLIENTS];
	char on[CLIENTS];
	int on_c = 0;
	for (int i = 0; i < CLIENTS; i++) {
		cl[i] = client_at(1 + (unsigned)i % 4);
		on[i] = ask(cl[i], port, i);
		assert_true(on[i] >= 'a' && on[i] <= 'c');
		on_c += on[i] == 'c';
	}
	assert_true(on_c > 0);

	/* c leaves, b weighs more, the flow cap moves */
	snprintf(list, sizeof list, "\"127.0.0.1:%u\", \"127.0.0.1:%u weight=2\"", a.port, b.port);
	lb_toml(toml, sizeof toml, 2, 0, list, "");
	apply_text(s, toml);
	assert_int_equal(etm_supervisor_inbound_port(s, 0), port);
	etm_udplb_stats st;
	assert_int_equal(etm_supervisor_udplb_stats(s, 0, &st), 0);
	assert_string_equal(etm_udplb_close_name(5), "removed");
	assert_int_equal(st.evicted[5], on_c);
	assert_int_equal(st.active_flows, CLIENTS - on_c);
	for (int i = 0; i < CLIENTS; i++) {
		char now = ask(cl[i], port, i);
		if (on[i] == 'c')
			assert_true(now == 'a' || now == 'b');
		else
			assert_int_equal(now, on[i]);
		on[i] = now;
	}
	assert_int_equal(etm_supervisor_udplb_stats(s, 0, &st), 0);
	assert_int_equal(st.flows_created, CLIENTS + on_c);
	assert_int_equal(st.active_flows, CLIENTS);
	/* the metric lines follow the cluster; counts carry over */
	assert_true(has_backend_line(s, &a, "up"));
	assert_false(has_backend_line(s, &c, "up"));

	/* twenty reloads that change the cluster: no flow moves or ends */
	for (int r = 0; r < 20; r++) {
		snprintf(list, sizeof list, "\"127.0.0.1:%u\", \"127.0.0.1:%u weight=%d\"", a.port,
		         b.port, 1 + r % 3);
		lb_toml(toml, sizeof toml, 2, 0, list, r % 2 ? "max_flows_per_ip = 50\n" : "");
		apply_text(s, toml);
		for (int i = 0; i < CLIENTS; i++)
			assert_int_equal(ask(cl[i], port, i), on[i]);
	}
	assert_int_equal(etm_supervisor_udplb_stats(s, 0, &st), 0);
	assert_int_equal(st.flows_created, CLIENTS + on_c);
	assert_int_equal(st.evicted[5], on_c);

	/* d joins: new flows reach it, old ones stay */
	snprintf(list, sizeof list, "\"127.0.0.1:%u\", \"127.0.0.1:%u\", \"127.0.0.1:%u\"", a.port,
	         b.port, d.port);
	lb_toml(toml, sizeof toml, 2, 0, list, "");
	apply_text(s, toml);
	int fresh[CLIENTS], on_d = 0;
	for (int i = 0; i < CLIENTS; i++) {
		fresh[i] = client_at(1 + (unsigned)i % 4);
		on_d += ask(fresh[i], port, i) == 'd';
		assert_int_equal(ask(cl[i], port, i), on[i]);
	}
	assert_true(on_d > 0);

	etm_supervisor_stop(s);
	for (int i = 0; i < CLIENTS; i++) {
		close(cl[i]);
		close(fresh[i]);
	}
	named_stop(&a);
	named_stop(&b);
	named_stop(&c);
	named_stop(&d);
}

/* A udp_lb inbound a reload adds serves at once; one it removes stops
 * answering and lets its port go, while the other keeps its flows. */
static void a_reload_adds_and_removes_udp_lb_inbounds(void **state)
{
	(void)state;
	named a, b;
	named_start(&a, 'a', false);
	named_start(&b, 'b', false);
	char one[2048], two[2048], second_only[2048];
	const char *in = "[[inbound]]\ntag = \"%s\"\nprotocol = \"udp_lb\"\nport = %u\n"
	                 "[inbound.settings]\ncluster = \"%s\"\n";
	char lb1[256], lb2[256], clusters[512];
	snprintf(lb1, sizeof lb1, in, "one", 0u, "p");
	snprintf(lb2, sizeof lb2, in, "two", 0u, "q");
	snprintf(clusters, sizeof clusters,
	         "[[cluster]]\ntag = \"p\"\nbackends = [\"127.0.0.1:%u\"]\n"
	         "[[cluster]]\ntag = \"q\"\nbackends = [\"127.0.0.1:%u\"]\n",
	         a.port, b.port);
	snprintf(one, sizeof one, "[runtime]\nworkers = 2\n%s%s", lb1, clusters);
	etm_supervisor *s = start_text(one);
	uint16_t p1 = etm_supervisor_inbound_port(s, 0);
	int c1 = client_at(1), c2 = client_at(2);
	assert_int_equal(ask(c1, p1, 1), 'a');

	snprintf(two, sizeof two, "[runtime]\nworkers = 2\n%s%s%s", lb1, lb2, clusters);
	apply_text(s, two);
	uint16_t p2 = etm_supervisor_inbound_port(s, 1);
	assert_int_not_equal(p2, 0);
	assert_int_equal(ask(c2, p2, 2), 'b');
	assert_int_equal(ask(c1, p1, 3), 'a');
	etm_udplb_stats st;
	assert_int_equal(etm_supervisor_udplb_stats(s, 0, &st), 0);
	assert_int_equal(st.flows_created, 1); /* its flow went on */

	/* "one" goes; "two" keeps its socket, now the first inbound */
	snprintf(second_only, sizeof second_only, "[runtime]\nworkers = 2\n%s%s", lb2, clusters);
	apply_text(s, second_only);
	assert_int_equal(etm_supervisor_inbound_port(s, 0), p2);
	assert_int_equal(ask(c2, p2, 4), 'b');
	assert_int_equal(etm_supervisor_udplb_stats(s, 0, &st), 0);
	assert_int_equal(st.flows_created, 1);
	assert_int_equal(ask(c1, p1, 5), 0);
	/* the removed listener's port is free again, once its worker closed it */
	int probe = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in at = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
	                         .sin_port = htons(p1)};
	int bound = -1;
	for (int i = 0; i < 100 && bound; i++) {
		bound = bind(probe, (struct sockaddr *)&at, sizeof at);
		if (bound)
			usleep(10000);
	}
	assert_int_equal(bound, 0);
	close(probe);

	etm_supervisor_stop(s);
	close(c1);
	close(c2);
	named_stop(&a);
	named_stop(&b);
}

/* A reload keeps the health of the backends that stay: a backend the
 * checks marked down stays down (fall = 2 would take two more failed probes
 * to mark it again had it been reset to up). */
static void a_reload_keeps_the_health_of_the_backends_that_stay(void **state)
{
	(void)state;
	named up, down;
	named_start(&up, 'u', true);
	named_start(&down, 'd', false); /* nothing listens on its TCP port */
	char toml[1024], list[128];
	const char *health = "[cluster.health]\ninterval = 1\ntimeout = 1\nfall = 2\nrise = 2\n";
	snprintf(list, sizeof list, "\"127.0.0.1:%u\", \"127.0.0.1:%u\"", up.port, down.port);
	lb_toml(toml, sizeof toml, 2, 0, list, health);
	etm_supervisor *s = start_text(toml);
	bool marked = false;
	for (int i = 0; i < 400 && !marked; i++) {
		marked = has_backend_line(s, &down, "down");
		if (!marked)
			usleep(10000);
	}
	assert_true(marked);
	assert_true(has_backend_line(s, &up, "up"));

	snprintf(list, sizeof list, "\"127.0.0.1:%u weight=3\", \"127.0.0.1:%u\"", down.port, up.port);
	lb_toml(toml, sizeof toml, 2, 0, list, health);
	apply_text(s, toml);
	assert_true(has_backend_line(s, &down, "down"));
	assert_true(has_backend_line(s, &up, "up"));
	/* and a new flow avoids it */
	int c = client_at(1);
	assert_int_equal(ask(c, etm_supervisor_inbound_port(s, 0), 1), 'u');

	etm_supervisor_stop(s);
	close(c);
	named_stop(&up);
	named_stop(&down);
}

static void names(void **state)
{
	(void)state;
	assert_string_equal(etm_udplb_drop_name(0), "truncated");
	assert_string_equal(etm_udplb_drop_name(9), "queue_full");
	assert_string_equal(etm_udplb_drop_name(10), "open_failed");
	assert_string_equal(etm_udplb_drop_name(11), "send_error");
	assert_string_equal(etm_udplb_drop_name(ETM_UDPLB_DROP_KINDS), "unknown");
	assert_string_equal(etm_udplb_close_name(0), "idle");
	assert_string_equal(etm_udplb_close_name(4), "aborted");
	assert_string_equal(etm_udplb_close_name(5), "removed");
	assert_string_equal(etm_udplb_close_name(ETM_UDPLB_CLOSE_KINDS), "unknown");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(round_trip_and_counters),
		cmocka_unit_test(names),
		cmocka_unit_test(trains_are_taken_where_bursts_come),
		cmocka_unit_test(waiting_sockets_give_way_when_descriptors_run_out),
		cmocka_unit_test(a_reload_keeps_the_flows_of_the_backends_that_stay),
		cmocka_unit_test(a_reload_adds_and_removes_udp_lb_inbounds),
		cmocka_unit_test(a_reload_keeps_the_health_of_the_backends_that_stay),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
