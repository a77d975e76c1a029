/* test_udplb_addr.c - the core's endpoint type (src/udplb/addr.c) and its hashes (src/udplb/hash.c): socket address round trips, v4-mapped addresses, text, SipHash-2-4 vectors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cmocka.h>

#include "udplb/addr.h"
#include "udplb/hash.h"

static void sockaddr_round_trips(void **state)
{
	(void)state;
	struct sockaddr_in s4 = {.sin_family = AF_INET, .sin_port = htons(5353)};
	inet_pton(AF_INET, "192.0.2.1", &s4.sin_addr);
	udplb_addr a;
	assert_int_equal(udplb_addr_from_sockaddr(&a, (struct sockaddr *)&s4), 0);
	assert_int_equal(a.family, UDPLB_AF_INET);
	assert_int_equal(a.port, 5353);
	struct sockaddr_storage ss;
	assert_int_equal(udplb_addr_to_sockaddr(&a, &ss), sizeof(struct sockaddr_in));
	assert_memory_equal(&ss, &s4, sizeof s4);

	struct sockaddr_in6 s6 = {.sin6_family = AF_INET6, .sin6_port = htons(53)};
	inet_pton(AF_INET6, "2001:db8::1", &s6.sin6_addr);
	assert_int_equal(udplb_addr_from_sockaddr(&a, (struct sockaddr *)&s6), 0);
	assert_int_equal(a.family, UDPLB_AF_INET6);
	assert_int_equal(udplb_addr_to_sockaddr(&a, &ss), sizeof(struct sockaddr_in6));
	assert_memory_equal(&((struct sockaddr_in6 *)&ss)->sin6_addr, &s6.sin6_addr, 16);

	/* A dual-stack socket reports an IPv4 client as ::ffff:a.b.c.d; it is
	 * the same client as the IPv4 form. */
	inet_pton(AF_INET6, "::ffff:192.0.2.1", &s6.sin6_addr);
	s6.sin6_port = htons(5353);
	udplb_addr mapped, plain;
	assert_int_equal(udplb_addr_from_sockaddr(&mapped, (struct sockaddr *)&s6), 0);
	assert_int_equal(udplb_addr_from_sockaddr(&plain, (struct sockaddr *)&s4), 0);
	assert_true(udplb_addr_equal(&mapped, &plain));
	assert_memory_equal(&mapped, &plain, sizeof mapped);

	/* A link-local client is its link's: the scope comes in and goes back
	 * out with it, and tells it from the same address on another link. */
	struct sockaddr_in6 ll = {.sin6_family = AF_INET6, .sin6_port = htons(546),
	                          .sin6_scope_id = 3};
	inet_pton(AF_INET6, "fe80::1", &ll.sin6_addr);
	udplb_addr on3, on4;
	assert_int_equal(udplb_addr_from_sockaddr(&on3, (struct sockaddr *)&ll), 0);
	assert_true(udplb_addr_link_local(&on3));
	assert_int_equal(on3.scope, 3);
	assert_int_equal(udplb_addr_to_sockaddr(&on3, &ss), sizeof(struct sockaddr_in6));
	assert_memory_equal(&ss, &ll, sizeof ll);
	ll.sin6_scope_id = 4;
	assert_int_equal(udplb_addr_from_sockaddr(&on4, (struct sockaddr *)&ll), 0);
	assert_false(udplb_addr_same_ip(&on3, &on4));
	assert_false(udplb_addr_equal(&on3, &on4));
	/* any other address has no scope, whatever the socket address held */
	inet_pton(AF_INET6, "2001:db8::1", &ll.sin6_addr);
	assert_int_equal(udplb_addr_from_sockaddr(&a, (struct sockaddr *)&ll), 0);
	assert_false(udplb_addr_link_local(&a));
	assert_int_equal(a.scope, 0);
	inet_pton(AF_INET6, "febf::1", &ll.sin6_addr); /* the top of fe80::/10 */
	assert_int_equal(udplb_addr_from_sockaddr(&a, (struct sockaddr *)&ll), 0);
	assert_true(udplb_addr_link_local(&a));
	inet_pton(AF_INET6, "fec0::1", &ll.sin6_addr); /* past it */
	assert_int_equal(udplb_addr_from_sockaddr(&a, (struct sockaddr *)&ll), 0);
	assert_false(udplb_addr_link_local(&a));

	struct sockaddr other = {.sa_family = AF_UNIX};
	assert_int_equal(udplb_addr_from_sockaddr(&a, &other), -1);
	assert_int_equal(a.family, UDPLB_AF_NONE);
	assert_int_equal(udplb_addr_to_sockaddr(&a, &ss), 0);
}

static void comparisons_and_text(void **state)
{
	(void)state;
	udplb_addr a, b;
	udplb_addr_set4(&a, (const uint8_t[]){10, 0, 0, 1}, 80);
	udplb_addr_set4(&b, (const uint8_t[]){10, 0, 0, 1}, 81);
	assert_true(udplb_addr_same_ip(&a, &b));
	assert_false(udplb_addr_equal(&a, &b));
	char text[UDPLB_ADDR_TEXT_MAX];
	assert_int_equal(udplb_addr_format(&a, text, sizeof text), 11);
	assert_string_equal(text, "10.0.0.1:80");
	uint8_t ip6[16] = {0x20, 0x01, 0x0d, 0xb8, [15] = 1};
	udplb_addr_set6(&b, ip6, 65535);
	udplb_addr_format(&b, text, sizeof text);
	assert_string_equal(text, "[2001:db8::1]:65535");
	uint8_t full[16];
	memset(full, 0xff, sizeof full);
	udplb_addr_set6(&b, full, 65535);
	size_t n = udplb_addr_format(&b, text, sizeof text);
	assert_int_equal(n, strlen("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535"));
	assert_int_equal(udplb_addr_format(&a, text, 5), 4);
	assert_string_equal(text, "10.0");
	uint8_t ll[16] = {0xfe, 0x80, [15] = 1};
	udplb_addr_set6(&b, ll, 546);
	b.scope = 4294967295u;
	n = udplb_addr_format(&b, text, sizeof text);
	assert_string_equal(text, "[fe80::1%4294967295]:546");
	assert_int_equal(n, strlen(text));
	memset(full, 0xff, sizeof full);
	full[0] = 0xfe;
	full[1] = 0x80; /* the longest text there is fits */
	udplb_addr_set6(&b, full, 65535);
	b.scope = 4294967295u;
	n = udplb_addr_format(&b, text, sizeof text);
	assert_int_equal(n, strlen("[fe80:ffff:ffff:ffff:ffff:ffff:ffff:ffff%4294967295]:65535"));
	assert_true(n < UDPLB_ADDR_TEXT_MAX);
	udplb_addr none = {0};
	udplb_addr_format(&none, text, sizeof text);
	assert_string_equal(text, "-");
	assert_int_equal(udplb_addr_ip_len(&none), 0);
}

/* The SipHash-2-4 paper's appendix A vector (key 00..0f, message 00..0e)
 * and the reference implementation's vectors for lengths 0, 1 and 8. */
static void siphash_reference_vectors(void **state)
{
	(void)state;
	uint8_t k[16], msg[64];
	for (int i = 0; i < 16; i++)
		k[i] = (uint8_t)i;
	for (int i = 0; i < 64; i++)
		msg[i] = (uint8_t)i;
	udplb_seed key = {0, 0};
	for (int i = 7; i >= 0; i--) {
		key.k0 = key.k0 << 8 | k[i];
		key.k1 = key.k1 << 8 | k[8 + i];
	}
	assert_int_equal(udplb_siphash(&key, msg, 0), 0x726fdb47dd0e0e31ULL);
	assert_int_equal(udplb_siphash(&key, msg, 1), 0x74f839c593dc67fdULL);
	assert_int_equal(udplb_siphash(&key, msg, 8), 0x93f5f5799a932462ULL);
	assert_int_equal(udplb_siphash(&key, msg, 15), 0xa129ca6149be45e5ULL);
	assert_int_equal(udplb_siphash(&key, NULL, 0), 0x726fdb47dd0e0e31ULL);
	/* Another key, another hash. */
	udplb_seed other = {key.k0 ^ 1, key.k1};
	assert_true(udplb_siphash(&other, msg, 15) != 0xa129ca6149be45e5ULL);
}

static void mix64_is_a_bijection_on_samples(void **state)
{
	(void)state;
	assert_int_equal(udplb_mix64(0), 0);
	uint64_t seen[256];
	for (int i = 0; i < 256; i++) {
		seen[i] = udplb_mix64((uint64_t)i);
		for (int j = 0; j < i; j++)
			assert_true(seen[i] != seen[j]);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(sockaddr_round_trips),
		cmocka_unit_test(comparisons_and_text),
		cmocka_unit_test(siphash_reference_vectors),
		cmocka_unit_test(mix64_is_a_bijection_on_samples),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
