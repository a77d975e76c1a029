/* test_udp_batch.c - a batch keeps every datagram, byte for byte and in order, across its count and byte limits, a datagram the kernel refuses, and its close. */
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "runtime/udp_batch.h"

typedef struct rig {
	uv_loop_t loop;
	uv_udp_t sock;
	udp_batch b;
	int rx;                  /* a plain socket the datagrams go to */
	struct sockaddr_in to;   /* rx's address */
	int closed;              /* close callbacks seen */
} rig;

static void on_closed(uv_handle_t *h)
{
	rig *r = h->data;
	r->closed++;
}

static void rig_open(rig *r)
{
	memset(r, 0, sizeof *r);
	assert_int_equal(uv_loop_init(&r->loop), 0);
	r->rx = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
	assert_true(r->rx >= 0);
	int big = 4 << 20; /* room for every datagram a test sends before it reads */
	(void)setsockopt(r->rx, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big);
	r->to = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	assert_int_equal(bind(r->rx, (struct sockaddr *)&r->to, sizeof r->to), 0);
	socklen_t len = sizeof r->to;
	assert_int_equal(getsockname(r->rx, (struct sockaddr *)&r->to, &len), 0);
	assert_int_equal(uv_udp_init(&r->loop, &r->sock), 0);
	r->sock.data = r;
	struct sockaddr_in any = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	assert_int_equal(uv_udp_bind(&r->sock, (struct sockaddr *)&any, 0), 0);
	udp_batch_init(&r->b, &r->sock);
}

static void rig_close(rig *r)
{
	udp_batch_close(&r->b, on_closed);
	uv_close((uv_handle_t *)&r->sock, on_closed);
	assert_int_equal(uv_run(&r->loop, UV_RUN_DEFAULT), 0);
	assert_int_equal(r->closed, 2);
	assert_int_equal(uv_loop_close(&r->loop), 0);
}

/* Datagram i: its length, and bytes that name it. */
static void fill(uint8_t *p, size_t len, size_t i)
{
	for (size_t k = 0; k < len; k++)
		p[k] = (uint8_t)(i * 31 + k * 7);
}

static void send_one(rig *r, size_t i, size_t len)
{
	uint8_t *p = malloc(len ? len : 1);
	assert_non_null(p);
	fill(p, len, i);
	assert_int_equal(udp_batch_send(&r->b, p, len, (struct sockaddr *)&r->to), 0);
	memset(p, 0xee, len); /* the batch copied it */
	free(p);
}

/* The next datagram on rx is datagram i of len bytes. */
static void expect(rig *r, size_t i, size_t len)
{
	static uint8_t got[65536], want[65536];
	ssize_t n = recv(r->rx, got, sizeof got, 0);
	assert_int_equal(n, (ssize_t)len);
	fill(want, len, i);
	assert_memory_equal(got, want, len);
}

static void expect_none(rig *r)
{
	uint8_t b[1];
	assert_int_equal(recv(r->rx, b, sizeof b, 0), -1);
	assert_true(errno == EAGAIN || errno == EWOULDBLOCK);
}

static size_t burst_len(size_t i) { return (i * 97) % 700; } /* 0 included */

/* A datagram waits for the end of the loop iteration; a burst longer than
 * UDP_BATCH_MAX goes out whole, in order. */
static void test_burst_in_order(void **state)
{
	(void)state;
	rig r;
	rig_open(&r);
	send_one(&r, 0, 5);
	expect_none(&r);
	assert_int_equal(uv_run(&r.loop, UV_RUN_NOWAIT), 0);
	expect(&r, 0, 5);
	expect_none(&r);

	const size_t n = 3 * UDP_BATCH_MAX + 5;
	for (size_t i = 0; i < n; i++)
		send_one(&r, i, burst_len(i));
	(void)uv_run(&r.loop, UV_RUN_NOWAIT);
	for (size_t i = 0; i < n; i++)
		expect(&r, i, burst_len(i));
	expect_none(&r);
	rig_close(&r);
	close(r.rx);
}

/* Datagrams that pass UDP_BATCH_BYTES together, and the largest one. */
static void test_byte_limit(void **state)
{
	(void)state;
	rig r;
	rig_open(&r);
	static const size_t lens[] = {20000, 20000, 20000, 20000, 65507, 1, 65507, 3};
	const size_t n = sizeof lens / sizeof lens[0];
	for (size_t i = 0; i < n; i++)
		send_one(&r, i, lens[i]);
	(void)uv_run(&r.loop, UV_RUN_NOWAIT);
	for (size_t i = 0; i < n; i++)
		expect(&r, i, lens[i]);
	expect_none(&r);
	rig_close(&r);
	close(r.rx);
}

/* A datagram the kernel refuses (port 0: EINVAL) is dropped alone; those
 * after it still go, in order. */
static void test_refused_one_dropped(void **state)
{
	(void)state;
	rig r;
	rig_open(&r);
	struct sockaddr_in bad = r.to;
	bad.sin_port = 0;
	uint8_t x[4] = {9, 9, 9, 9};
	send_one(&r, 0, 10);
	send_one(&r, 1, 11);
	assert_int_equal(udp_batch_send(&r.b, x, sizeof x, (struct sockaddr *)&bad), 0);
	send_one(&r, 2, 12);
	(void)uv_run(&r.loop, UV_RUN_NOWAIT);
	expect(&r, 0, 10);
	expect(&r, 1, 11);
	expect(&r, 2, 12);
	expect_none(&r);
	rig_close(&r);
	close(r.rx);
}

static void on_timer(uv_timer_t *t)
{
	rig *r = t->data;
	send_one(r, 7, 70);
}

/* A datagram given in a timer callback (as a DNS answer gives freedom's
 * held one) goes out without waiting for another event: the loop does not
 * block in its poll while something waits. */
static void test_from_a_timer(void **state)
{
	(void)state;
	rig r;
	rig_open(&r);
	uv_timer_t t, guard; /* guard: a poll that waited would wait for it */
	assert_int_equal(uv_timer_init(&r.loop, &t), 0);
	assert_int_equal(uv_timer_init(&r.loop, &guard), 0);
	t.data = &r;
	assert_int_equal(uv_timer_start(&t, on_timer, 1, 0), 0);
	assert_int_equal(uv_timer_start(&guard, on_timer, 5000, 0), 0);
	uint64_t start = uv_now(&r.loop);
	uint8_t b[128];
	ssize_t n = -1;
	for (int i = 0; i < 100 && n < 0; i++) {
		(void)uv_run(&r.loop, UV_RUN_ONCE);
		n = recv(r.rx, b, sizeof b, MSG_PEEK);
	}
	assert_true(uv_now(&r.loop) - start < 1000);
	expect(&r, 7, 70);
	uv_close((uv_handle_t *)&t, NULL);
	uv_close((uv_handle_t *)&guard, NULL);
	rig_close(&r);
	close(r.rx);
}

/* Closing sends what waits. */
static void test_close_sends(void **state)
{
	(void)state;
	rig r;
	rig_open(&r);
	for (size_t i = 0; i < 3; i++)
		send_one(&r, i, 100 + i);
	expect_none(&r);
	rig_close(&r);
	for (size_t i = 0; i < 3; i++)
		expect(&r, i, 100 + i);
	expect_none(&r);
	close(r.rx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_burst_in_order),
		cmocka_unit_test(test_byte_limit),
		cmocka_unit_test(test_refused_one_dropped),
		cmocka_unit_test(test_from_a_timer),
		cmocka_unit_test(test_close_sends),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
