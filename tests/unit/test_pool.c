/* test_pool.c - the buffer pool reuses, bounds what it keeps, and counts what is out. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/pool.h"

static void reuses_buffers(void **state)
{
	(void)state;
	pool p = {0};
	uint8_t *a = pool_get(&p);
	assert_non_null(a);
	memset(a, 0xab, POOL_BUF_SIZE); /* the whole size is usable */
	pool_put(&p, a);
	assert_int_equal(p.n_free, 1);
	assert_ptr_equal(pool_get(&p), a); /* no allocation the second time */
	assert_int_equal(p.n_out, 1);
	pool_put(&p, a);
	pool_put(&p, NULL);
	assert_int_equal(p.n_out, 0);
	pool_drain(&p);
	assert_int_equal(p.n_free, 0);
}

static void keeps_at_most_the_bound(void **state)
{
	(void)state;
	pool p = {0};
	static uint8_t *bufs[POOL_KEEP_MAX + 10];
	for (size_t i = 0; i < POOL_KEEP_MAX + 10; i++)
		bufs[i] = pool_get(&p);
	for (size_t i = 0; i < POOL_KEEP_MAX + 10; i++)
		pool_put(&p, bufs[i]);
	assert_int_equal(p.n_free, POOL_KEEP_MAX);
	assert_int_equal(p.n_out, 0);
	pool_drain(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(reuses_buffers),
		cmocka_unit_test(keeps_at_most_the_bound),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
