/* test_addr.c - destinations: parsing, formatting, socket addresses, endpoint comparison. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <arpa/inet.h>
#include <cmocka.h>

#include "base/addr.h"

static void parse_and_format(void **state)
{
	(void)state;
	static const struct {
		const char *in;
		int rc;
		addr_kind kind;
		const char *out;
	} cases[] = {
		{"1.2.3.4:80", 0, ADDR_IPV4, "1.2.3.4:80"},
		{"[::1]:53", 0, ADDR_IPV6, "[::1]:53"},
		{"[2001:db8::1]:65535", 0, ADDR_IPV6, "[2001:db8::1]:65535"},
		{"example.com:443", 0, ADDR_DOMAIN, "example.com:443"},
		{"example.com:0", 0, ADDR_DOMAIN, "example.com:0"},
		{"::1:53", -1, ADDR_NONE, NULL},       /* a bare v6 needs brackets */
		{"example.com", -1, ADDR_NONE, NULL},  /* no port */
		{"example.com:", -1, ADDR_NONE, NULL},
		{"example.com:65536", -1, ADDR_NONE, NULL},
		{"example.com:-1", -1, ADDR_NONE, NULL},
		{":80", -1, ADDR_NONE, NULL},
		{"[zz]:80", -1, ADDR_NONE, NULL},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		addr_dest d = {0};
		int rc = addr_dest_parse(&d, cases[i].in);
		assert_int_equal(rc, cases[i].rc);
		if (rc)
			continue;
		assert_int_equal(d.kind, cases[i].kind);
		char out[ADDR_TEXT_MAX];
		addr_dest_format(&d, out, sizeof out);
		assert_string_equal(out, cases[i].out);
	}
	addr_dest none = {0};
	char out[16];
	addr_dest_format(&none, out, sizeof out);
	assert_string_equal(out, "(none)");
}

static void domains_are_bounded(void **state)
{
	(void)state;
	char name[300];
	memset(name, 'a', sizeof name);
	addr_dest d = {0};
	assert_int_equal(addr_dest_set_domain(&d, name, 255, 1), 0);
	assert_int_equal(d.u.domain.len, 255);
	assert_int_equal(addr_dest_set_domain(&d, name, 256, 1), -1);
	assert_int_equal(addr_dest_set_domain(&d, name, 0, 1), -1);
	assert_int_equal(addr_dest_set_domain(&d, "a\0b", 3, 1), -1);
	/* the network survives a re-set */
	d = (addr_dest){.network = ADDR_UDP};
	assert_int_equal(addr_dest_set_domain(&d, "x", 1, 9), 0);
	assert_int_equal(d.network, ADDR_UDP);
}

static void sockaddr_round_trip(void **state)
{
	(void)state;
	struct sockaddr_storage ss;
	addr_dest d = {0}, back = {0};
	assert_int_equal(addr_dest_parse(&d, "[2001:db8::7]:8443"), 0);
	assert_int_equal(addr_dest_to_sockaddr(&d, &ss), sizeof(struct sockaddr_in6));
	assert_int_equal(addr_dest_from_sockaddr(&back, (struct sockaddr *)&ss), 0);
	assert_memory_equal(back.u.v6, d.u.v6, 16);
	assert_int_equal(back.port, 8443);

	/* a v4-mapped v6 address becomes v4 */
	struct sockaddr_in6 m = {.sin6_family = AF_INET6, .sin6_port = htons(7)};
	inet_pton(AF_INET6, "::ffff:10.1.2.3", &m.sin6_addr);
	assert_int_equal(addr_dest_from_sockaddr(&back, (struct sockaddr *)&m), 0);
	assert_int_equal(back.kind, ADDR_IPV4);
	char out[ADDR_TEXT_MAX];
	addr_dest_format(&back, out, sizeof out);
	assert_string_equal(out, "10.1.2.3:7");

	addr_dest_set_domain(&d, "x.example", 9, 1) == 0 ? (void)0 : fail();
	assert_int_equal(addr_dest_to_sockaddr(&d, &ss), 0);
	struct sockaddr un = {.sa_family = AF_UNIX};
	assert_int_equal(addr_dest_from_sockaddr(&back, &un), -1);
}

static void endpoints_compare_canonically(void **state)
{
	(void)state;
	struct sockaddr_in v4 = {.sin_family = AF_INET, .sin_port = htons(5000)};
	inet_pton(AF_INET, "127.0.0.1", &v4.sin_addr);
	struct sockaddr_in6 mapped = {.sin6_family = AF_INET6, .sin6_port = htons(5000),
	                              .sin6_flowinfo = 9, .sin6_scope_id = 3};
	inet_pton(AF_INET6, "::ffff:127.0.0.1", &mapped.sin6_addr);
	assert_true(addr_same_endpoint((struct sockaddr *)&v4, (struct sockaddr *)&mapped));
	assert_true(addr_same_ip((struct sockaddr *)&v4, (struct sockaddr *)&mapped));
	mapped.sin6_port = htons(5001);
	assert_false(addr_same_endpoint((struct sockaddr *)&v4, (struct sockaddr *)&mapped));
	assert_true(addr_same_ip((struct sockaddr *)&v4, (struct sockaddr *)&mapped));
	struct sockaddr_in6 other = {.sin6_family = AF_INET6, .sin6_port = htons(5000)};
	inet_pton(AF_INET6, "::1", &other.sin6_addr);
	assert_false(addr_same_ip((struct sockaddr *)&v4, (struct sockaddr *)&other));
}

static void destinations_compare_by_place(void **state)
{
	(void)state;
	static const char *const same[][2] = {
		{"192.0.2.1:53", "192.0.2.1:53"},
		{"[2001:db8::1]:443", "[2001:db8::1]:443"},
		{"dns.example:53", "DNS.Example:53"},
	};
	static const char *const differ[][2] = {
		{"192.0.2.1:53", "192.0.2.1:54"},
		{"192.0.2.1:53", "192.0.2.2:53"},
		{"[2001:db8::1]:443", "[2001:db8::2]:443"},
		{"dns.example:53", "dns.example.:53"},
		{"127.0.0.1:53", "localhost:53"},
		{"[::ffff:127.0.0.1]:53", "127.0.0.1:53"},
	};
	for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
		addr_dest a = {0}, b = {.network = ADDR_UDP};
		assert_int_equal(addr_dest_parse(&a, same[i][0]), 0);
		assert_int_equal(addr_dest_parse(&b, same[i][1]), 0);
		assert_true(addr_dest_same(&a, &b)); /* the network is not compared */
	}
	for (size_t i = 0; i < sizeof differ / sizeof differ[0]; i++) {
		addr_dest a = {0}, b = {0};
		assert_int_equal(addr_dest_parse(&a, differ[i][0]), 0);
		assert_int_equal(addr_dest_parse(&b, differ[i][1]), 0);
		assert_false(addr_dest_same(&a, &b));
	}
	addr_dest none = {0};
	assert_false(addr_dest_same(&none, &none));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(parse_and_format),
		cmocka_unit_test(domains_are_bounded),
		cmocka_unit_test(sockaddr_round_trip),
		cmocka_unit_test(endpoints_compare_canonically),
		cmocka_unit_test(destinations_compare_by_place),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
