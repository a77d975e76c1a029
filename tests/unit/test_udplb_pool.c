/* test_udplb_pool.c - the pool of idle upstream sockets (src/udplb/pool.c): FIFO per backend, the quiet time, the cap, sockets taken out of the middle. The "fds" are plain numbers: the pool makes no system call. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "udplb/pool.h"

#define Q UDPLB_POOL_QUIET_MS

static void a_socket_waits_out_its_quiet_time(void **state)
{
	(void)state;
	udplb_pool *p = udplb_pool_new(2, 4);
	assert_non_null(p);
	bool gro = false;
	assert_int_equal(udplb_pool_take(p, 0, 1000, &gro), -1); /* empty */
	assert_true(udplb_pool_put(p, 0, 7, true, 1000));
	assert_int_equal(udplb_pool_size(p), 1);
	assert_int_equal(udplb_pool_take(p, 0, 1000 + Q - 1, &gro), -1); /* not quiet yet */
	assert_int_equal(udplb_pool_take(p, 1, 1000 + Q, &gro), -1);     /* another backend's */
	assert_int_equal(udplb_pool_take(p, 0, 1000 + Q, &gro), 7);
	assert_true(gro);
	assert_int_equal(udplb_pool_size(p), 0);
	assert_int_equal(udplb_pool_take(p, 0, 1000 + Q, &gro), -1);
	/* a clock that went back never hands a socket on early */
	assert_true(udplb_pool_put(p, 1, 8, false, 5000));
	assert_int_equal(udplb_pool_take(p, 1, 4000, &gro), -1);
	assert_int_equal(udplb_pool_take(p, 1, 5000 + Q, &gro), 8);
	assert_false(gro);
	udplb_pool_free(p);
}

static void the_oldest_goes_first_and_the_cap_holds(void **state)
{
	(void)state;
	udplb_pool *p = udplb_pool_new(1, 3);
	bool gro;
	assert_true(udplb_pool_put(p, 0, 10, false, 100));
	assert_true(udplb_pool_put(p, 0, 11, false, 110));
	assert_true(udplb_pool_put(p, 0, 12, false, 120));
	assert_false(udplb_pool_put(p, 0, 13, false, 130)); /* full: the caller closes 13 */
	assert_false(udplb_pool_put(p, 1, 14, false, 130)); /* no backend 1 */
	assert_false(udplb_pool_put(p, 0, -1, false, 130));
	/* at 100 + Q only the first is quiet enough */
	assert_int_equal(udplb_pool_take(p, 0, 100 + Q, &gro), 10);
	assert_int_equal(udplb_pool_take(p, 0, 100 + Q, &gro), -1);
	assert_true(udplb_pool_put(p, 0, 13, false, 130)); /* room again; the ring wraps */
	assert_int_equal(udplb_pool_take(p, 0, 1000, &gro), 11);
	assert_int_equal(udplb_pool_take(p, 0, 1000, &gro), 12);
	assert_int_equal(udplb_pool_take(p, 0, 1000, &gro), 13);
	assert_int_equal(udplb_pool_take(p, 0, 1000, &gro), -1);
	assert_int_equal(udplb_pool_take(p, 5, 1000, &gro), -1);
	udplb_pool_free(p);
}

static void a_socket_taken_out_of_the_middle_is_skipped(void **state)
{
	(void)state;
	udplb_pool *p = udplb_pool_new(2, 4);
	bool gro;
	for (int fd = 20; fd < 24; fd++)
		assert_true(udplb_pool_put(p, 1, fd, false, (uint64_t)fd));
	assert_true(udplb_pool_forget(p, 21));
	assert_false(udplb_pool_forget(p, 21)); /* once */
	assert_false(udplb_pool_forget(p, 99));
	assert_true(udplb_pool_forget(p, 20)); /* the head: the next becomes it */
	assert_int_equal(udplb_pool_size(p), 2);
	assert_int_equal(udplb_pool_take(p, 1, 1000, &gro), 22);
	assert_int_equal(udplb_pool_take(p, 1, 1000, &gro), 23);
	assert_int_equal(udplb_pool_take(p, 1, 1000, &gro), -1);
	assert_false(udplb_pool_forget(p, 22)); /* taken: no longer held */
	/* descriptors far apart, and one taken out, put back and forgotten */
	assert_true(udplb_pool_put(p, 0, 5000, false, 0));
	assert_true(udplb_pool_put(p, 0, 3, false, 0));
	assert_false(udplb_pool_forget(p, 70000));
	assert_true(udplb_pool_forget(p, 5000));
	assert_true(udplb_pool_put(p, 0, 5000, false, 1));
	assert_int_equal(udplb_pool_take(p, 0, 1000, &gro), 3);
	assert_true(udplb_pool_forget(p, 5000));
	assert_int_equal(udplb_pool_size(p), 0);
	assert_int_equal(udplb_pool_take(p, 0, 1000, &gro), -1);
	udplb_pool_free(p);
}

static void pop_any_empties_every_backend(void **state)
{
	(void)state;
	udplb_pool *p = udplb_pool_new(3, 2);
	assert_true(udplb_pool_put(p, 0, 30, false, 0));
	assert_true(udplb_pool_put(p, 2, 31, false, 0));
	assert_true(udplb_pool_put(p, 2, 32, false, 0));
	assert_true(udplb_pool_forget(p, 31));
	int seen = 0;
	for (int fd; (fd = udplb_pool_pop_any(p)) >= 0;)
		seen += fd;
	assert_int_equal(seen, 30 + 32);
	assert_int_equal(udplb_pool_size(p), 0);
	assert_int_equal(udplb_pool_pop_any(p), -1);
	udplb_pool_free(p);
	/* a cap of 0 is taken as 1 */
	p = udplb_pool_new(1, 0);
	assert_true(udplb_pool_put(p, 0, 40, false, 0));
	assert_false(udplb_pool_put(p, 0, 41, false, 0));
	udplb_pool_free(p);
	udplb_pool_free(NULL);
}

static void sockets_that_waited_too_long_expire(void **state)
{
	(void)state;
	udplb_pool *p = udplb_pool_new(2, 4);
	bool gro;
	assert_true(udplb_pool_put(p, 0, 50, false, 1000));
	assert_true(udplb_pool_put(p, 1, 51, false, 1500));
	assert_true(udplb_pool_put(p, 0, 52, false, 2000));
	assert_int_equal(udplb_pool_take_expired(p, 1000 + UDPLB_POOL_MAX_AGE_MS - 1), -1);
	assert_int_equal(udplb_pool_take_expired(p, 1000 + UDPLB_POOL_MAX_AGE_MS), 50);
	assert_int_equal(udplb_pool_take_expired(p, 1000 + UDPLB_POOL_MAX_AGE_MS), -1);
	/* both left have waited long enough by then, whichever comes first */
	int a = udplb_pool_take_expired(p, 2000 + UDPLB_POOL_MAX_AGE_MS);
	int b = udplb_pool_take_expired(p, 2000 + UDPLB_POOL_MAX_AGE_MS);
	assert_int_equal(a + b, 51 + 52);
	assert_true(a == 51 || a == 52);
	assert_int_equal(udplb_pool_take_expired(p, 2000 + UDPLB_POOL_MAX_AGE_MS), -1);
	assert_int_equal(udplb_pool_size(p), 0);
	/* one that is not expired is still handed on */
	assert_true(udplb_pool_put(p, 1, 53, true, 5000));
	assert_int_equal(udplb_pool_take_expired(p, 5000 + UDPLB_POOL_MAX_AGE_MS - 1), -1);
	assert_int_equal(udplb_pool_take(p, 1, 5000 + UDPLB_POOL_QUIET_MS, &gro), 53);
	assert_true(gro);
	udplb_pool_free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(a_socket_waits_out_its_quiet_time),
		cmocka_unit_test(the_oldest_goes_first_and_the_cap_holds),
		cmocka_unit_test(a_socket_taken_out_of_the_middle_is_skipped),
		cmocka_unit_test(pop_any_empties_every_backend),
		cmocka_unit_test(sockets_that_waited_too_long_expire),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
