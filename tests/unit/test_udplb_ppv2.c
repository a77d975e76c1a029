/* test_udplb_ppv2.c - the PROXY v2 DGRAM header (src/udplb/ppv2.c), byte for byte against haproxy's proxy-protocol.txt section 2.2. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "udplb/ppv2.h"

#define SIG 0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A

static udplb_addr v4(uint8_t a, uint8_t b, uint8_t c, uint8_t d, uint16_t port)
{
	udplb_addr r;
	udplb_addr_set4(&r, (const uint8_t[]){a, b, c, d}, port);
	return r;
}

/* 2001:db8::<last> */
static udplb_addr v6(uint8_t last, uint16_t port)
{
	uint8_t ip[16] = {0x20, 0x01, 0x0d, 0xb8};
	ip[15] = last;
	udplb_addr r;
	udplb_addr_set6(&r, ip, port);
	return r;
}

typedef struct ppv2_case {
	const char *name;
	udplb_addr src, dst;
	const uint8_t *want;
	size_t len;
} ppv2_case;

static void headers_byte_for_byte(void **state)
{
	(void)state;
	/* UDP over IPv4 (\x12): 12 address bytes, source then destination
	 * address, source then destination port. */
	static const uint8_t udp4[] = {SIG,  0x21, 0x12, 0x00, 0x0C, 192,  0x00, 0x02,
	                               0x01, 198,  51,   100,  7,    0x14, 0xE9, 0x00, 0x35};
	/* UDP over IPv6 (\x22): 36 address bytes. */
	static const uint8_t udp6[] = {
		SIG,  0x21, 0x22, 0x00, 0x24,
		0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01,
		0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x53,
		0x9C, 0x40, 0x00, 0x35,
	};
	/* AF_UNSPEC (\x00) with an empty address block, PROXY command kept:
	 * "the receiver is free to accept the connection anyway and use the
	 * real connection endpoints". */
	static const uint8_t unspec[] = {SIG, 0x21, 0x00, 0x00, 0x00};
	const ppv2_case cases[] = {
		{"v4", v4(192, 0, 2, 1, 5353), v4(198, 51, 100, 7, 53), udp4, sizeof udp4},
		{"v6", v6(1, 40000), v6(0x53, 53), udp6, sizeof udp6},
		{"v4 to v6", v4(192, 0, 2, 1, 5353), v6(0x53, 53), unspec, sizeof unspec},
		{"v6 to v4", v6(1, 40000), v4(198, 51, 100, 7, 53), unspec, sizeof unspec},
		{"no source", {0}, v4(198, 51, 100, 7, 53), unspec, sizeof unspec},
		{"neither", {0}, {0}, unspec, sizeof unspec},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		uint8_t out[UDPLB_PPV2_MAX];
		memset(out, 0xAA, sizeof out);
		size_t n = udplb_ppv2_build(out, &cases[i].src, &cases[i].dst);
		if (n != cases[i].len)
			fail_msg("%s: length %zu, want %zu", cases[i].name, n, cases[i].len);
		assert_memory_equal(out, cases[i].want, n);
		/* The header's length field says how many bytes follow the 16. */
		assert_int_equal(16 + (out[14] << 8 | out[15]), n);
		/* Nothing written past the header. */
		for (size_t j = n; j < sizeof out; j++)
			assert_int_equal(out[j], 0xAA);
	}
	assert_int_equal(sizeof udp6, UDPLB_PPV2_MAX);
}

/* The version 2 detection rule of section 2.2: 16 bytes or more, and the
 * first 13 bytes are the signature then \x2?. */
static void a_receiver_recognises_version_2(void **state)
{
	(void)state;
	uint8_t out[UDPLB_PPV2_MAX];
	udplb_addr a = v4(10, 0, 0, 1, 1), b = v4(10, 0, 0, 2, 2);
	size_t n = udplb_ppv2_build(out, &a, &b);
	assert_true(n >= 16);
	assert_memory_equal(out, UDPLB_PPV2_SIGNATURE, 12);
	assert_int_equal(out[12] & 0xF0, 0x20);
	assert_int_equal(out[12] & 0x0F, 0x1); /* PROXY */
	assert_int_equal(out[13] & 0x0F, 0x2); /* DGRAM */
	assert_int_equal(out[4], 0x00);        /* the NUL at the 5th position */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(headers_byte_for_byte),
		cmocka_unit_test(a_receiver_recognises_version_2),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
