/* test_dial.c - the address-family ordering of dial candidates (the pure part of the dialer). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <arpa/inet.h>
#include <cmocka.h>

#include "runtime/dial.h"

/* "4" and "6" entries, tagged by their last byte so order is visible. */
static size_t make(struct sockaddr_storage *out, const char *pattern)
{
	size_t n = 0;
	for (const char *p = pattern; *p; p++, n++) {
		memset(&out[n], 0, sizeof out[n]);
		if (*p == '4') {
			struct sockaddr_in *in = (struct sockaddr_in *)&out[n];
			in->sin_family = AF_INET;
			in->sin_addr.s_addr = htonl((uint32_t)n);
		} else {
			struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&out[n];
			in6->sin6_family = AF_INET6;
			in6->sin6_addr.s6_addr[15] = (uint8_t)n;
		}
	}
	return n;
}

/* "4:0 6:1 ..." */
static void describe(const struct sockaddr_storage *a, size_t n, char *out, size_t size)
{
	out[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		unsigned tag = a[i].ss_family == AF_INET
		                       ? ntohl(((const struct sockaddr_in *)&a[i])->sin_addr.s_addr)
		                       : ((const struct sockaddr_in6 *)&a[i])->sin6_addr.s6_addr[15];
		size_t at = strlen(out);
		snprintf(out + at, size - at, "%s%c:%u", i ? " " : "",
		         a[i].ss_family == AF_INET ? '4' : '6', tag);
	}
}

static void orders_by_strategy(void **state)
{
	(void)state;
	static const struct {
		dial_family af;
		const char *want;
	} cases[] = {
		{DIAL_FAMILY_AUTO, "6:0 4:1 6:2 4:3"},
		{DIAL_FAMILY_PREFER_IPV4, "4:1 4:3 6:0 6:2"},
		{DIAL_FAMILY_PREFER_IPV6, "6:0 6:2 4:1 4:3"},
		{DIAL_FAMILY_IPV4_ONLY, "4:1 4:3"},
		{DIAL_FAMILY_IPV6_ONLY, "6:0 6:2"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct sockaddr_storage a[DIAL_MAX_CANDIDATES];
		size_t n = make(a, "6464");
		n = dial_order(a, n, cases[i].af);
		char got[128];
		describe(a, n, got, sizeof got);
		assert_string_equal(got, cases[i].want);
	}
}

static void only_can_leave_nothing(void **state)
{
	(void)state;
	struct sockaddr_storage a[DIAL_MAX_CANDIDATES];
	size_t n = make(a, "44");
	assert_int_equal(dial_order(a, n, DIAL_FAMILY_IPV6_ONLY), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(orders_by_strategy),
		cmocka_unit_test(only_can_leave_nothing),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
