/* test_vec.c - vec_reserve: room for what is asked, doubling from VEC_MIN_CAP, and the array untouched when it cannot grow. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* vec.h is header-only: its realloc is this one, which counts the calls
 * and fails on demand, so a failure is tested without asking the real
 * allocator for more than it has (ASan aborts on that by default). */
static size_t reallocs;
static bool fail_realloc;

static void *counted_realloc(void *p, size_t n)
{
	reallocs++;
	return fail_realloc ? NULL : realloc(p, n);
}

#define realloc counted_realloc
#include "base/vec.h"
#undef realloc

typedef struct item {
	uint64_t a, b;
} item;

static int setup(void **state)
{
	(void)state;
	reallocs = 0;
	fail_realloc = false;
	return 0;
}

static void zeroed_array_grows_on_first_add(void **state)
{
	(void)state;
	item *v = NULL;
	size_t cap = 0;
	assert_int_equal(vec_reserve(&v, &cap, 0, 0), 0); /* nothing asked, nothing done */
	assert_null(v);
	assert_int_equal(reallocs, 0);
	assert_int_equal(vec_reserve(&v, &cap, 0, 1), 0);
	assert_non_null(v);
	assert_int_equal(cap, VEC_MIN_CAP);
	free(v);
}

/* Every add finds room, what was added stays, and n adds cost O(log n)
 * reallocs, each at most doubling past what was needed. */
static void adds_keep_contents_and_double(void **state)
{
	(void)state;
	enum { N = 5000 };
	item *v = NULL;
	size_t cap = 0, n = 0;
	for (size_t i = 0; i < N; i++) {
		size_t before = cap;
		assert_int_equal(vec_reserve(&v, &cap, n, 1), 0);
		assert_true(cap > n);
		if (cap != before)
			assert_true(cap == VEC_MIN_CAP || cap == 2 * before);
		v[n++] = (item){i, ~i};
	}
	for (size_t i = 0; i < N; i++) {
		assert_int_equal(v[i].a, i);
		assert_int_equal(v[i].b, ~i);
	}
	size_t doublings = 0;
	for (size_t c = VEC_MIN_CAP; c < N; c *= 2)
		doublings++;
	assert_int_equal(reallocs, 1 + doublings);
	free(v);
}

static void many_at_once_double_until_they_fit(void **state)
{
	(void)state;
	char *buf = NULL;
	size_t cap = 0;
	assert_int_equal(vec_reserve(&buf, &cap, 0, 100), 0);
	assert_int_equal(cap, 128);
	memset(buf, 'x', 100);
	assert_int_equal(vec_reserve(&buf, &cap, 100, 28), 0); /* fits exactly */
	assert_int_equal(cap, 128);
	assert_int_equal(reallocs, 1);
	assert_int_equal(vec_reserve(&buf, &cap, 100, 1000), 0);
	assert_int_equal(cap, 2048);
	for (size_t i = 0; i < 100; i++)
		assert_int_equal(buf[i], 'x');
	free(buf);
}

/* A capacity set by someone else (not a power of two) doubles from there. */
static void grows_from_any_capacity(void **state)
{
	(void)state;
	size_t cap = 20;
	int *v = malloc(cap * sizeof *v);
	assert_non_null(v);
	assert_int_equal(vec_reserve(&v, &cap, 20, 1), 0);
	assert_int_equal(cap, 40);
	free(v);
}

/* Each refusal leaves the pointer and the capacity as they were, and the
 * contents readable. */
static void refusals_leave_the_array_unchanged(void **state)
{
	(void)state;
	item *v = NULL;
	size_t cap = 0;
	assert_int_equal(vec_reserve(&v, &cap, 0, 3), 0);
	v[0] = (item){7, 8};
	item *was = v;
	const struct {
		size_t len, more;
		bool fail;
	} cases[] = {
		{SIZE_MAX, 1, false},                      /* len + more overflows */
		{1, SIZE_MAX - 1, false},                  /* doubling would overflow */
		{1, SIZE_MAX / sizeof(item), false},       /* the byte size would overflow */
		{1, 1000, true},                           /* realloc fails */
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		fail_realloc = cases[i].fail;
		size_t calls = reallocs;
		assert_int_equal(vec_reserve(&v, &cap, cases[i].len, cases[i].more), -1);
		assert_int_equal(reallocs, calls + cases[i].fail);
		assert_ptr_equal(v, was);
		assert_int_equal(cap, VEC_MIN_CAP);
		assert_int_equal(v[0].a, 7);
		assert_int_equal(v[0].b, 8);
	}
	fail_realloc = false;
	assert_int_equal(vec_reserve(&v, &cap, 1, 1000), 0);
	assert_int_equal(v[0].a, 7);
	free(v);
}

/* The element size comes from the array's type. */
static void element_size_from_the_type(void **state)
{
	(void)state;
	uint8_t *bytes = NULL;
	item *items = NULL;
	size_t bcap = 0, icap = 0;
	assert_int_equal(vec_reserve(&bytes, &bcap, 0, 1000), 0);
	assert_int_equal(vec_reserve(&items, &icap, 0, 1000), 0);
	assert_int_equal(bcap, icap);
	memset(bytes, 1, bcap);
	memset(items, 1, icap * sizeof *items); /* the whole capacity is there (ASan checks) */
	free(bytes);
	free(items);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(zeroed_array_grows_on_first_add, setup),
		cmocka_unit_test_setup(adds_keep_contents_and_double, setup),
		cmocka_unit_test_setup(many_at_once_double_until_they_fit, setup),
		cmocka_unit_test_setup(grows_from_any_capacity, setup),
		cmocka_unit_test_setup(refusals_leave_the_array_unchanged, setup),
		cmocka_unit_test_setup(element_size_from_the_type, setup),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
