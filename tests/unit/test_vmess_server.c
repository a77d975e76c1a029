/* test_vmess_server.c - the VMess AEAD server core and body layer: vectors from tools/vmess_vectors.py, round trips with the client core, the AuthID window and replay filter, truncated and corrupted headers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proto/vmess_server.h"
#include "vmess_vectors.h" /* the vectors both tests read */

/* ---- vectors: the output of /usr/bin/python3 tools/vmess_vectors.py ---- */

static const uint8_t REQUEST_CHACHA_V6[124] = {
	0xf8, 0x6f, 0x87, 0x98, 0xc0, 0x04, 0xfc, 0x1b, 0xba, 0xf2, 0xa9, 0xf2,
	0x2b, 0xbc, 0x78, 0x36, 0x88, 0xc5, 0x80, 0xf9, 0x0d, 0x2d, 0x24, 0x83,
	0xf8, 0x52, 0xc5, 0xb9, 0x8b, 0x5d, 0xc7, 0xe1, 0xa9, 0x7e, 0x50, 0x51,
	0x52, 0x53, 0x54, 0x55, 0x56, 0x57, 0x05, 0xcd, 0x11, 0xc6, 0x8c, 0xe9,
	0x90, 0xf1, 0x41, 0xad, 0x3f, 0x06, 0x9a, 0xf2, 0x3b, 0xe6, 0x6f, 0x87,
	0x5f, 0x41, 0x72, 0xc0, 0x48, 0x42, 0xa6, 0xe3, 0x86, 0xc1, 0x1f, 0x31,
	0x6e, 0xf7, 0x00, 0x2c, 0x17, 0xaf, 0x62, 0xeb, 0x48, 0x68, 0x25, 0xa4,
	0xfc, 0x73, 0x7d, 0xdc, 0x75, 0xe6, 0x76, 0xa3, 0x68, 0xd9, 0xfc, 0x87,
	0x6a, 0xdb, 0xdd, 0x93, 0x3a, 0x21, 0x6b, 0x77, 0x4c, 0x6d, 0x9b, 0x6e,
	0x7b, 0xe0, 0xc9, 0x08, 0x09, 0x08, 0xba, 0x4d, 0x79, 0x43, 0xd4, 0xc7,
	0xc1, 0x9f, 0x2e, 0xbc,
};
static const uint8_t REQUEST_LEGACY_SEC[112] = {
	0xf8, 0x6f, 0x87, 0x98, 0xc0, 0x04, 0xfc, 0x1b, 0xba, 0xf2, 0xa9, 0xf2,
	0x2b, 0xbc, 0x78, 0x36, 0x88, 0xb1, 0x4c, 0x37, 0xf2, 0x17, 0xaa, 0x14,
	0x47, 0x7e, 0xe0, 0x7c, 0x9b, 0xc0, 0xa1, 0x86, 0xac, 0xaf, 0x50, 0x51,
	0x52, 0x53, 0x54, 0x55, 0x56, 0x57, 0x05, 0xcd, 0x11, 0xc6, 0x8c, 0xe9,
	0x90, 0xf1, 0x41, 0xad, 0x3f, 0x06, 0x9a, 0xf2, 0x3b, 0xe6, 0x6f, 0x87,
	0x5f, 0x41, 0x72, 0xc0, 0x48, 0x42, 0xa6, 0xe3, 0x86, 0xc1, 0x1f, 0x31,
	0x6e, 0xf7, 0x00, 0x2c, 0x17, 0xaa, 0x62, 0xeb, 0x56, 0x43, 0x27, 0xdb,
	0xfc, 0x73, 0x7c, 0x9c, 0x34, 0xa4, 0x35, 0xe7, 0xad, 0xa7, 0xf5, 0xaa,
	0x17, 0x62, 0xf7, 0x4a, 0xda, 0x69, 0x8d, 0xbb, 0x85, 0x56, 0x33, 0xfc,
	0x30, 0x95, 0xda, 0x22,
};
static const uint8_t CHUNKS_RESP_AES[928] = {
	0xa1, 0x3b, 0xdf, 0xa2, 0xb0, 0xc3, 0xec, 0xb8, 0x2c, 0xcb, 0x47, 0xf8,
	0xa3, 0x41, 0xa8, 0x94, 0xd0, 0x6a, 0x17, 0xfa, 0xef, 0x09, 0x8e, 0xc1,
	0x73, 0xcc, 0xfb, 0xb6, 0x65, 0xc8, 0x96, 0x36, 0xa0, 0x0c, 0x05, 0xb9,
	0x70, 0xe2, 0xa6, 0x5d, 0xfb, 0xe5, 0xff, 0xa7, 0xbb, 0x68, 0x08, 0xe0,
	0xb5, 0xf8, 0x31, 0x6e, 0xfa, 0x2a, 0x9d, 0x7b, 0xbd, 0x3a, 0x4c, 0x3d,
	0x39, 0xab, 0x7e, 0xbf, 0x31, 0x18, 0x2c, 0xc2, 0xb7, 0x86, 0xc7, 0xda,
	0x99, 0x41, 0x8f, 0x91, 0xdb, 0x33, 0xd1, 0x27, 0xca, 0x1e, 0xa5, 0x75,
	0xdb, 0x19, 0x38, 0xd0, 0x34, 0xd1, 0x70, 0x6e, 0xb1, 0x42, 0x0f, 0x49,
	0x71, 0xe3, 0x7a, 0x53, 0x96, 0x52, 0x8d, 0x7e, 0x34, 0x8b, 0x1e, 0xa3,
	0x97, 0xf5, 0x54, 0x0f, 0x82, 0xa4, 0xd6, 0xa4, 0xe9, 0xa0, 0xe6, 0x5c,
	0xdd, 0x6b, 0x85, 0x5c, 0x71, 0x78, 0xe1, 0xac, 0x63, 0x7f, 0xab, 0x65,
	0x90, 0x6f, 0xdc, 0xa3, 0x6a, 0xa8, 0xd7, 0x6c, 0xbf, 0x9c, 0xd9, 0x55,
	0xec, 0xe4, 0x67, 0x9c, 0xa6, 0x0d, 0x31, 0xbd, 0x71, 0x97, 0x47, 0x23,
	0xf6, 0x21, 0xc1, 0x3c, 0x18, 0x72, 0x9d, 0x45, 0xae, 0x1a, 0x22, 0xab,
	0x39, 0x26, 0x12, 0xe9, 0xfb, 0x51, 0x5d, 0xab, 0x1f, 0x73, 0xc5, 0xb8,
	0x88, 0x5e, 0x57, 0xa8, 0xed, 0x10, 0x7c, 0x1f, 0x0e, 0x2e, 0x09, 0x68,
	0x3f, 0x6b, 0xb1, 0x84, 0x5d, 0xb2, 0x45, 0xed, 0x0b, 0xf2, 0x1e, 0xa1,
	0x95, 0x63, 0x84, 0x46, 0x11, 0x6e, 0x84, 0x3f, 0x29, 0x5a, 0x09, 0x3d,
	0xde, 0xba, 0xe9, 0xa1, 0xb8, 0x4f, 0x09, 0x4e, 0x55, 0x81, 0x50, 0x6c,
	0x8b, 0xee, 0x7c, 0xbb, 0xaa, 0x00, 0xbd, 0x9e, 0x2e, 0x50, 0x60, 0xfe,
	0x31, 0x40, 0x47, 0x47, 0xbb, 0xf4, 0x7a, 0xde, 0x7c, 0x67, 0x4a, 0x1f,
	0x66, 0x14, 0x5f, 0xd5, 0x00, 0xbe, 0x96, 0x34, 0xcb, 0x01, 0x20, 0x0d,
	0x00, 0x55, 0x9d, 0x37, 0xb4, 0x14, 0xa3, 0xf0, 0x8b, 0x72, 0x7b, 0x98,
	0x99, 0x61, 0x4a, 0x74, 0xd2, 0x6f, 0x3e, 0x5d, 0x49, 0x67, 0xb3, 0xe7,
	0x64, 0x46, 0xd8, 0xcd, 0xb9, 0xf9, 0x6b, 0x24, 0x6e, 0x34, 0xfe, 0x15,
	0xc2, 0x75, 0x36, 0x91, 0xd7, 0xc1, 0xee, 0xc2, 0xdc, 0x43, 0x77, 0x3a,
	0x16, 0x01, 0x6b, 0xad, 0x0d, 0xee, 0xf8, 0xa4, 0x2d, 0xb0, 0xab, 0x62,
	0x8f, 0xb2, 0x5d, 0x86, 0x28, 0x70, 0x50, 0x18, 0x42, 0x1c, 0x2b, 0x21,
	0xca, 0x5e, 0x8e, 0xec, 0x6d, 0xb6, 0x95, 0x87, 0xbb, 0x79, 0x50, 0xb8,
	0xd4, 0xce, 0x52, 0x57, 0x2a, 0x2f, 0xda, 0x25, 0xd1, 0x3a, 0xff, 0xd9,
	0x97, 0x5f, 0x51, 0xba, 0xc9, 0x31, 0x0e, 0x87, 0xcf, 0x5a, 0x47, 0xfd,
	0x6d, 0x1f, 0xac, 0x1f, 0x47, 0xb4, 0xd2, 0xa7, 0xea, 0x6d, 0xc5, 0x80,
	0x43, 0xfe, 0x2e, 0x99, 0xe3, 0xfa, 0x9b, 0xaf, 0x90, 0x1f, 0xe2, 0xf6,
	0x41, 0x49, 0x99, 0x6a, 0x4b, 0x57, 0x01, 0x54, 0x15, 0xfa, 0xce, 0x40,
	0xb4, 0x8d, 0x73, 0x99, 0x7e, 0x5f, 0x5d, 0x68, 0x9a, 0x86, 0x8d, 0x99,
	0x45, 0x0c, 0x90, 0xef, 0xf6, 0x5b, 0x40, 0xe8, 0x4b, 0x99, 0xe4, 0x5d,
	0x7e, 0xd9, 0x78, 0x37, 0x40, 0x57, 0x18, 0xb0, 0x54, 0x7b, 0x4b, 0x2b,
	0x51, 0x01, 0xd9, 0x87, 0xdc, 0x73, 0x73, 0x3f, 0xdd, 0x90, 0xc4, 0x64,
	0xbc, 0xf0, 0x40, 0x01, 0x2e, 0x12, 0xf3, 0x0f, 0x08, 0x9c, 0x61, 0xc4,
	0x11, 0x42, 0x81, 0xe6, 0x31, 0xa1, 0x2f, 0x9b, 0x2b, 0x3c, 0x2e, 0xdf,
	0x02, 0xf2, 0xaf, 0x28, 0x49, 0x9c, 0x27, 0x56, 0x87, 0xc7, 0x23, 0xde,
	0x3d, 0x31, 0xcd, 0x9d, 0x8e, 0x17, 0x1b, 0x49, 0xe3, 0x44, 0xac, 0xbc,
	0x2f, 0x41, 0xc1, 0x51, 0xe1, 0xee, 0x51, 0x64, 0x3e, 0x1f, 0x36, 0x26,
	0x81, 0x60, 0xb8, 0xf9, 0x5f, 0xac, 0x27, 0x25, 0x31, 0x47, 0x8b, 0x89,
	0xd5, 0x88, 0x80, 0x03, 0xa3, 0x1a, 0x09, 0xb3, 0xbd, 0xa6, 0x67, 0xed,
	0x0b, 0xac, 0xc2, 0x62, 0xa7, 0x2e, 0xe1, 0x16, 0xe6, 0x4e, 0x32, 0x5c,
	0xfb, 0xa3, 0x72, 0x01, 0xa0, 0x2f, 0x1a, 0xd0, 0xe9, 0xa8, 0x5a, 0xcb,
	0x87, 0x99, 0x48, 0xc4, 0xf5, 0x54, 0xa0, 0x5b, 0xf6, 0x8a, 0x00, 0x3e,
	0x17, 0xed, 0xc6, 0x0b, 0xa9, 0xa9, 0xdb, 0xcd, 0x06, 0xbd, 0x13, 0x53,
	0x4a, 0x26, 0x60, 0xf0, 0x92, 0x82, 0x2c, 0x57, 0xb3, 0x56, 0xe9, 0x6e,
	0x9b, 0x51, 0x6c, 0x73, 0x28, 0xa6, 0x7b, 0x76, 0x9a, 0x45, 0x4b, 0x26,
	0xb4, 0x08, 0xd2, 0x9d, 0xef, 0xc0, 0x29, 0xd5, 0x3a, 0xf6, 0x0d, 0x53,
	0x60, 0x71, 0xf2, 0x62, 0xed, 0x2d, 0xba, 0xd0, 0xfc, 0x44, 0x7e, 0x53,
	0x78, 0x54, 0xf9, 0x5e, 0xcd, 0x9a, 0x4a, 0x25, 0x00, 0xf3, 0x2c, 0x97,
	0xfa, 0xe7, 0xf9, 0x84, 0xde, 0xe8, 0x8e, 0xe8, 0x61, 0x7e, 0xb3, 0xe8,
	0x1d, 0xad, 0x87, 0x8f, 0x9b, 0x4b, 0x22, 0x59, 0x4c, 0xf4, 0x8b, 0x56,
	0xff, 0x5e, 0xfe, 0x5c, 0x9d, 0x3b, 0x48, 0xe9, 0xfd, 0xbf, 0x5f, 0x0b,
	0xa1, 0x34, 0x01, 0xc2, 0xed, 0x6f, 0xa7, 0x2e, 0x6f, 0x6e, 0x33, 0xc1,
	0xb8, 0xd8, 0x29, 0x2c, 0x17, 0x68, 0x42, 0x75, 0xa1, 0x83, 0xf0, 0xc7,
	0x23, 0x17, 0xc4, 0x41, 0x11, 0x3e, 0xcc, 0xef, 0xf9, 0x86, 0xf2, 0xef,
	0xb4, 0x8a, 0x60, 0x3d, 0x88, 0xee, 0x61, 0x4b, 0xc9, 0x7a, 0x09, 0x05,
	0x88, 0xe8, 0x82, 0xd8, 0xd3, 0x70, 0x06, 0x68, 0xac, 0x2b, 0x35, 0x8b,
	0x76, 0xa6, 0xa7, 0xdf, 0x72, 0xe0, 0x48, 0x6e, 0xb5, 0x5b, 0x57, 0xa0,
	0xe7, 0xc1, 0x95, 0x27, 0x6c, 0xb2, 0xaa, 0x08, 0xc9, 0xe1, 0x9d, 0xe1,
	0xbb, 0x2c, 0x95, 0x52, 0xe0, 0xbc, 0x2a, 0x98, 0x83, 0x25, 0xc7, 0x42,
	0x85, 0x83, 0x98, 0x53, 0xf7, 0xfc, 0xd8, 0x6a, 0x80, 0x2d, 0x2c, 0x8b,
	0x58, 0x61, 0x0a, 0xe3, 0xc4, 0x00, 0x70, 0x17, 0x94, 0xe9, 0xf1, 0xd5,
	0x69, 0x5c, 0x98, 0x73, 0x08, 0x29, 0x3c, 0x20, 0x89, 0x39, 0xa1, 0x86,
	0xa7, 0x54, 0x53, 0xcf, 0x22, 0xba, 0x2f, 0x91, 0xba, 0x1c, 0x40, 0xd3,
	0x02, 0xba, 0x16, 0x03, 0xae, 0xdb, 0xf6, 0xc0, 0xdd, 0x6d, 0xa5, 0x44,
	0xcc, 0x84, 0x80, 0xf9, 0x12, 0x93, 0x8f, 0x02, 0x10, 0x32, 0x66, 0x33,
	0x05, 0x39, 0x32, 0x42, 0x21, 0x19, 0xf3, 0x0a, 0xa9, 0x68, 0x03, 0x33,
	0xd4, 0xc1, 0x03, 0x39, 0xff, 0xa2, 0x73, 0xc9, 0xac, 0xf6, 0x97, 0xc0,
	0x43, 0x13, 0xe2, 0xe4, 0x43, 0xc1, 0x8b, 0xf7, 0x2a, 0xb2, 0x57, 0x24,
	0x4b, 0xd0, 0x48, 0xfd, 0x46, 0xc7, 0x39, 0xd4, 0x11, 0x0e, 0x3b, 0x04,
	0x8b, 0xe2, 0x21, 0x63, 0x9f, 0xf0, 0x25, 0x7d, 0x70, 0x30, 0xaf, 0xfc,
	0x2b, 0x0d, 0xab, 0x17, 0x55, 0xe8, 0x7d, 0x02, 0x34, 0x05, 0xa4, 0x42,
	0x7b, 0x78, 0x98, 0xa0,
};

static const uint8_t OTHER[16] = {0xb8, 0x31, 0x38, 0x1d, 0x63, 0x24, 0x4d, 0x53,
                                  0xad, 0x4f, 0x8c, 0xda, 0x48, 0xb3, 0x08, 0x11};

static const char *const AUTH_FAILED =
	"vmess: authentication failed (no user's AuthID; legacy MD5 headers are refused)";


/* Two users; the vectors' one is the second. */
static vmess_account users[2];

static int setup(void **state)
{
	(void)state;
	if (vmess_account_init(&users[0], OTHER) || vmess_account_init(&users[1], UUID))
		return -1;
	return 0;
}

typedef struct outcome {
	ssize_t n;
	proto_event ev;
	proto_out out;
} outcome;

static int replay_add(void *ud, const uint8_t id[VMESS_AUTH_ID_LEN], int64_t expiry, int64_t now)
{
	return vmess_replay_add(ud, id, expiry, now);
}

/* Feeds in[0, len) as growing prefixes step bytes apart (the shell's input
 * model) until a decision or the whole of it. */
static outcome feed_split(vmess_server *s, const uint8_t *in, size_t len, size_t step,
                          int64_t now)
{
	outcome o = {0};
	for (size_t k = step < len ? step : len;; k = k + step < len ? k + step : len) {
		o.n = vmess_server_feed(s, in, k, now, &o.out, &o.ev);
		assert_int_equal(o.out.len, 0);
		if (o.ev.kind != PROTO_EV_NONE || k == len)
			return o;
		assert_int_equal(o.n, 0);
	}
}

static outcome feed_one(const uint8_t *in, size_t len, size_t step, int64_t now, vmess_server *s)
{
	vmess_server_init(s, users, 2, NULL, NULL);
	return feed_split(s, in, len, step, now);
}

static void assert_refused(const outcome *o, const char *why)
{
	assert_int_equal(o->ev.kind, PROTO_EV_CLOSE);
	assert_true(o->n <= 0);
	if (why)
		assert_string_equal(o->ev.reason, why);
}

/* ---- vectors ---- */

static void opens_request_vectors(void **state)
{
	(void)state;
	vmess_client_random r = fixed_random();
	const size_t steps[] = {1, 7, 1000};
	for (size_t i = 0; i < sizeof steps / sizeof *steps; i++) {
		vmess_server s;
		outcome o = feed_one(REQUEST_AES_V4, sizeof REQUEST_AES_V4, steps[i], NOW, &s);
		assert_int_equal(o.ev.kind, PROTO_EV_OPEN);
		assert_int_equal(o.n, sizeof REQUEST_AES_V4);
		assert_int_equal(o.ev.user, 1);
		assert_int_equal(o.ev.cmd, PROTO_CMD_CONNECT);
		assert_int_equal(o.ev.dest.kind, ADDR_IPV4);
		assert_int_equal(o.ev.dest.network, ADDR_TCP);
		assert_int_equal(o.ev.dest.port, 8080);
		assert_memory_equal(o.ev.dest.u.v4, ((uint8_t[]){127, 0, 0, 1}), 4);
		assert_int_equal(s.req.sec, VMESS_SEC_AES_128_GCM);
		assert_int_equal(s.req.opt, 0x0d);
		assert_int_equal(s.req.v, 0x5a);
		assert_memory_equal(s.req.body_key, r.body_key, 16);
		assert_memory_equal(s.req.body_iv, r.body_iv, 16);
		assert_true(vmess_server_chunked(&s));
		proto_out out;
		assert_int_equal(vmess_server_opened(&s, &out), 0);
		assert_int_equal(out.len, sizeof RESPONSE);
		assert_memory_equal(out.buf, RESPONSE, sizeof RESPONSE);
	}

	vmess_server s;
	outcome o = feed_one(REQUEST_NONE_DOMAIN, sizeof REQUEST_NONE_DOMAIN, 1, NOW, &s);
	assert_int_equal(o.ev.kind, PROTO_EV_OPEN);
	assert_int_equal(o.n, sizeof REQUEST_NONE_DOMAIN);
	assert_int_equal(o.ev.cmd, PROTO_CMD_UDP_ASSOCIATE);
	assert_int_equal(o.ev.dest.kind, ADDR_DOMAIN);
	assert_int_equal(o.ev.dest.network, ADDR_UDP);
	assert_int_equal(o.ev.dest.port, 53);
	assert_string_equal(o.ev.dest.u.domain.name, "example.com");
	assert_int_equal(s.req.sec, VMESS_SEC_NONE);
	assert_int_equal(s.req.opt, 0x05);

	o = feed_one(REQUEST_CHACHA_V6, sizeof REQUEST_CHACHA_V6, 3, NOW, &s);
	assert_int_equal(o.ev.kind, PROTO_EV_OPEN);
	assert_int_equal(o.ev.dest.kind, ADDR_IPV6);
	assert_int_equal(o.ev.dest.port, 443);
	assert_int_equal(o.ev.dest.u.v6[15], 1);
	assert_int_equal(s.req.sec, VMESS_SEC_CHACHA20_POLY1305);

	o = feed_one(REQUEST_LEGACY_SEC, sizeof REQUEST_LEGACY_SEC, 1, NOW, &s);
	assert_refused(&o, "vmess: body security not supported");
	assert_int_equal(o.n, PROTO_ERR_MALFORMED);
}

/* The server's body codec opens the client's chunks and seals the answer
 * the vectors have. */
static void body_codec_matches_vectors(void **state)
{
	(void)state;
	vmess_client_random r = fixed_random();
	vmess_server s;
	outcome o = feed_one(REQUEST_AES_V4, sizeof REQUEST_AES_V4, 1000, NOW, &s);
	assert_int_equal(o.ev.kind, PROTO_EV_OPEN);
	vmess_body rx, tx;
	assert_int_equal(vmess_server_body_init(&s, &rx, &tx, r.pad_seed), 0);

	uint8_t big[768];
	for (size_t i = 0; i < sizeof big; i++)
		big[i] = (uint8_t)i;
	const struct {
		const uint8_t *p;
		size_t len;
	} payloads[3] = {{(const uint8_t *)"hello", 5}, {big, sizeof big}, {NULL, 0}};

	uint8_t buf[2048];
	size_t off = 0;
	for (int i = 0; i < 3; i++) {
		size_t chunk, pad;
		int k = vmess_body_open_size(&rx, CHUNKS_AES + off, &chunk, &pad);
		assert_int_equal(k, i < 2 ? 1 : 0);
		if (k == 0)
			break;
		memcpy(buf, CHUNKS_AES + off + 2, chunk);
		ssize_t n = vmess_body_open(&rx, buf, chunk, pad);
		assert_int_equal(n, payloads[i].len);
		assert_memory_equal(buf, payloads[i].p, payloads[i].len);
		off += 2 + chunk;
	}

	uint8_t sealed[sizeof CHUNKS_RESP_AES];
	off = 0;
	for (int i = 0; i < 3; i++) {
		ssize_t n = vmess_body_seal(&tx, payloads[i].p, payloads[i].len, buf, sizeof buf);
		assert_true(n > 0);
		assert_true(off + (size_t)n <= sizeof sealed);
		memcpy(sealed + off, buf, (size_t)n);
		off += (size_t)n;
	}
	assert_int_equal(off, sizeof CHUNKS_RESP_AES);
	assert_memory_equal(sealed, CHUNKS_RESP_AES, off);
	vmess_body_free(&rx);
	vmess_body_free(&tx);
}

/* ---- authentication ---- */

static void auth_id_time_window(void **state)
{
	(void)state;
	const struct {
		int64_t now;
		bool ok;
	} cases[] = {
		{NOW, true},
		{NOW - VMESS_TIME_WINDOW, true},
		{NOW + VMESS_TIME_WINDOW, true},
		{NOW - VMESS_TIME_WINDOW - 1, false},
		{NOW + VMESS_TIME_WINDOW + 1, false},
		{0, false},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		vmess_server s;
		outcome o = feed_one(REQUEST_AES_V4, sizeof REQUEST_AES_V4, 1000, cases[i].now, &s);
		if (cases[i].ok) {
			assert_int_equal(o.ev.kind, PROTO_EV_OPEN);
		} else {
			assert_refused(&o, "vmess: AuthID outside the time window");
			assert_int_equal(o.n, 0);
		}
	}
}

static void unknown_user_and_legacy_headers_refused(void **state)
{
	(void)state;
	vmess_server s;
	vmess_server_init(&s, users, 1, NULL, NULL); /* without the vectors' user */
	outcome o = feed_split(&s, REQUEST_AES_V4, sizeof REQUEST_AES_V4, 1, NOW);
	assert_refused(&o, AUTH_FAILED);
	assert_int_equal(o.n, 0);
	/* decided on the first 16 bytes */
	vmess_server_init(&s, users, 1, NULL, NULL);
	o.n = vmess_server_feed(&s, REQUEST_AES_V4, VMESS_AUTH_ID_LEN, NOW, &o.out, &o.ev);
	assert_refused(&o, AUTH_FAILED);

	/* a legacy header opens with HMAC-MD5(uuid, time): noise to the AuthID check */
	uint8_t legacy[64];
	for (size_t i = 0; i < sizeof legacy; i++)
		legacy[i] = (uint8_t)(i * 37 + 11);
	o = feed_one(legacy, sizeof legacy, 1, NOW, &s);
	assert_refused(&o, AUTH_FAILED);

	vmess_server_init(&s, NULL, 0, NULL, NULL);
	o = feed_split(&s, REQUEST_AES_V4, sizeof REQUEST_AES_V4, 1, NOW);
	assert_refused(&o, AUTH_FAILED);
}

static void replayed_auth_id_refused(void **state)
{
	(void)state;
	vmess_replay *f = calloc(1, sizeof *f);
	assert_non_null(f);
	vmess_server s;
	vmess_server_init(&s, users, 2, replay_add, f);
	/* fed byte by byte: the filter is asked once */
	outcome o = feed_split(&s, REQUEST_AES_V4, sizeof REQUEST_AES_V4, 1, NOW);
	assert_int_equal(o.ev.kind, PROTO_EV_OPEN);
	vmess_server_init(&s, users, 2, replay_add, f);
	o = feed_split(&s, REQUEST_AES_V4, sizeof REQUEST_AES_V4, 1000, NOW + 5);
	assert_refused(&o, "vmess: replayed AuthID");
	assert_int_equal(o.n, 0);
	/* another request with the same AuthID (same time and random) too */
	vmess_server_init(&s, users, 2, replay_add, f);
	o = feed_split(&s, REQUEST_NONE_DOMAIN, sizeof REQUEST_NONE_DOMAIN, 1000, NOW);
	assert_refused(&o, "vmess: replayed AuthID");
	/* another AuthID of the same user passes */
	vmess_client_random r = fixed_random();
	r.auth_rand[0] ^= 1;
	uint8_t req[VMESS_REQUEST_MAX];
	addr_dest d = {.kind = ADDR_IPV4, .port = 1, .u.v4 = {10, 0, 0, 1}};
	ssize_t n = vmess_request_seal(users[1].cmd_key, NOW, &r, VMESS_SEC_AES_128_GCM, 0x0d,
	                               VMESS_CMD_TCP, &d, req, sizeof req);
	assert_true(n > 0);
	vmess_server_init(&s, users, 2, replay_add, f);
	o = feed_split(&s, req, (size_t)n, 1000, NOW);
	assert_int_equal(o.ev.kind, PROTO_EV_OPEN);
	free(f);
}

static void replay_filter_expires_and_bounds(void **state)
{
	(void)state;
	vmess_replay *f = calloc(1, sizeof *f);
	assert_non_null(f);
	uint8_t id[VMESS_AUTH_ID_LEN] = {1, 2, 3, 4};
	assert_int_equal(vmess_replay_add(f, id, 100, 0), VMESS_REPLAY_NEW);
	assert_int_equal(vmess_replay_add(f, id, 100, 50), VMESS_REPLAY_SEEN);
	assert_int_equal(vmess_replay_add(f, id, 100, 100), VMESS_REPLAY_SEEN);
	assert_int_equal(vmess_replay_add(f, id, 201, 101), VMESS_REPLAY_NEW); /* expired */
	/* ids in one slot's run (the same first four bytes): VMESS_REPLAY_PROBES fit */
	memset(f, 0, sizeof *f);
	for (int i = 0; i < VMESS_REPLAY_PROBES; i++) {
		id[15] = (uint8_t)i;
		assert_int_equal(vmess_replay_add(f, id, 100, 0), VMESS_REPLAY_NEW);
	}
	id[15] = 0xff;
	assert_int_equal(vmess_replay_add(f, id, 100, 0), VMESS_REPLAY_FULL);
	assert_int_equal(vmess_replay_add(f, id, 300, 101), VMESS_REPLAY_NEW);
	/* the run wraps at the table's end */
	uint8_t last[VMESS_AUTH_ID_LEN] = {0, 0, 0xff, 0xff};
	assert_int_equal(vmess_replay_add(f, last, 100, 0), VMESS_REPLAY_NEW);
	last[15] = 1;
	assert_int_equal(vmess_replay_add(f, last, 100, 0), VMESS_REPLAY_NEW);
	assert_int_equal(vmess_replay_add(f, last, 100, 0), VMESS_REPLAY_SEEN);
	free(f);
}

/* ---- truncated, corrupted, malformed ---- */

static const struct {
	const uint8_t *p;
	size_t len;
} VECTORS[] = {
	{REQUEST_AES_V4, sizeof REQUEST_AES_V4},
	{REQUEST_NONE_DOMAIN, sizeof REQUEST_NONE_DOMAIN},
	{REQUEST_CHACHA_V6, sizeof REQUEST_CHACHA_V6},
};

static void truncated_requests_wait(void **state)
{
	(void)state;
	for (size_t v = 0; v < sizeof VECTORS / sizeof *VECTORS; v++)
		for (size_t k = 0; k < VECTORS[v].len; k++) {
			vmess_server s;
			vmess_server_init(&s, users, 2, NULL, NULL);
			outcome o;
			o.n = vmess_server_feed(&s, VECTORS[v].p, k, NOW, &o.out, &o.ev);
			assert_int_equal(o.n, 0);
			assert_int_equal(o.ev.kind, PROTO_EV_NONE);
		}
}

/* Any one byte changed is refused: the AuthID by its CRC, the rest by the
 * GCM tags. */
static void corrupted_requests_refused(void **state)
{
	(void)state;
	uint8_t buf[VMESS_REQUEST_MAX];
	for (size_t v = 0; v < sizeof VECTORS / sizeof *VECTORS; v++)
		for (size_t i = 0; i < VECTORS[v].len; i++)
			for (int bit = 0; bit < 8; bit += 7) {
				memcpy(buf, VECTORS[v].p, VECTORS[v].len);
				buf[i] ^= (uint8_t)(1u << bit);
				vmess_server s;
				outcome o = feed_one(buf, VECTORS[v].len, 1000, NOW, &s);
				assert_refused(&o, NULL);
				if (i < VMESS_AUTH_ID_LEN)
					assert_string_equal(o.ev.reason, AUTH_FAILED);
				else
					assert_string_equal(o.ev.reason, "vmess: bad header seal");
			}
}

/* Seals plaintext header h[0, hlen) as the vectors' user at NOW. */
static size_t seal_raw(const uint8_t *h, size_t hlen, uint8_t *out)
{
	const uint8_t *ck = users[1].cmd_key;
	vmess_client_random r = fixed_random();
	uint8_t *auth = out, *nonce = out + 16 + 2 + VMESS_TAG_LEN;
	uint8_t k[VMESS_KDF_LEN], n[VMESS_KDF_LEN], len2[2] = {(uint8_t)(hlen >> 8), (uint8_t)hlen};
	memcpy(nonce, r.nonce, 8);
	assert_int_equal(vmess_auth_id(ck, NOW, r.auth_rand, auth), 0);
	const char *labels[4] = {VMESS_KDF_REQ_LEN_KEY, VMESS_KDF_REQ_LEN_IV, VMESS_KDF_REQ_KEY,
	                         VMESS_KDF_REQ_IV};
	for (int i = 0; i < 2; i++) {
		vmess_slice pk[3] = {{(const uint8_t *)labels[2 * i], strlen(labels[2 * i])},
		                     {auth, 16},
		                     {nonce, 8}};
		vmess_slice pn[3] = {{(const uint8_t *)labels[2 * i + 1], strlen(labels[2 * i + 1])},
		                     {auth, 16},
		                     {nonce, 8}};
		assert_int_equal(vmess_kdf(ck, 16, pk, 3, k), 0);
		assert_int_equal(vmess_kdf(ck, 16, pn, 3, n), 0);
		if (i == 0)
			assert_int_equal(vmess_gcm_seal(k, n, auth, 16, len2, 2, out + 16), 0);
		else
			assert_int_equal(vmess_gcm_seal(k, n, auth, 16, h, hlen, nonce + 8), 0);
	}
	return 16 + 2 + VMESS_TAG_LEN + 8 + hlen + VMESS_TAG_LEN;
}

static uint32_t fnv(const uint8_t *p, size_t n)
{
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 16777619u;
	return h;
}

/* A good header (TCP, aes-128-gcm, S|M|P, 10.0.0.1:80, no padding) into
 * h, with h[off] = val first (off >= 0), cut to cut bytes (cut > 0), then
 * the checksum (a wrong one with bad_sum); returns its length. */
static size_t header(uint8_t *h, int off, uint8_t val, int cut, bool bad_sum)
{
	size_t n = 0;
	h[n++] = 1;
	for (int i = 0; i < 32; i++)
		h[n++] = (uint8_t)i;
	h[n++] = 0x5a;
	h[n++] = 0x0d;
	h[n++] = VMESS_SEC_AES_128_GCM;
	h[n++] = 0;
	h[n++] = VMESS_CMD_TCP;
	h[n++] = 0;
	h[n++] = 80;
	h[n++] = 1;
	h[n++] = 10, h[n++] = 0, h[n++] = 0, h[n++] = 1;
	if (off >= 0)
		h[off] = val;
	if (cut > 0)
		n = (size_t)cut;
	uint32_t f = fnv(h, n) ^ (bad_sum ? 1u : 0u);
	h[n++] = (uint8_t)(f >> 24), h[n++] = (uint8_t)(f >> 16), h[n++] = (uint8_t)(f >> 8);
	h[n++] = (uint8_t)f;
	return n;
}

static void resum(uint8_t *h, size_t n)
{
	uint32_t f = fnv(h, n - 4);
	h[n - 4] = (uint8_t)(f >> 24), h[n - 3] = (uint8_t)(f >> 16), h[n - 2] = (uint8_t)(f >> 8);
	h[n - 1] = (uint8_t)f;
}

static void malformed_headers_refused(void **state)
{
	(void)state;
	const struct {
		int off;
		uint8_t val;
		int cut;
		bool bad_sum;
		const char *why;
	} cases[] = {
		{-1, 0, 0, false, NULL},
		{-1, 0, 0, true, "vmess: bad header checksum"},
		{0, 2, 0, false, "vmess: unsupported version"},
		{0, 0, 0, false, "vmess: unsupported version"},
		{35, 1, 0, false, "vmess: body security not supported"},  /* AES-128-CFB */
		{35, 0, 0, false, "vmess: body security not supported"},
		{35, 2, 0, false, "vmess: body security not supported"},  /* auto */
		{35, 6, 0, false, "vmess: body security not supported"},  /* zero is none on the wire */
		{35, 0x13, 0, false, "vmess: header length out of bounds"}, /* padding 1 not there */
		/* mux carries no address: one after it makes the header too long */
		{37, 3, 0, false, "vmess: header length out of bounds"},
		{37, 4, 0, false, "vmess: command not supported"},
		{37, 0, 0, false, "vmess: command not supported"},
		{40, 4, 0, false, "vmess: address type not supported"},
		{40, 3, 0, false, "vmess: header length out of bounds"},   /* v6 past the end */
		{40, 2, 0, false, "vmess: header length out of bounds"},   /* a 10-byte domain */
		{41, 0, 0, false, NULL},                                   /* 0.0.0.1: fine */
		{-1, 0, 44, false, "vmess: header length out of bounds"},  /* v4 cut short */
		{-1, 0, 20, false, "vmess: header length out of bounds"},  /* under the minimum */
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		uint8_t h[VMESS_HEADER_MAX], req[VMESS_REQUEST_MAX];
		size_t hl = header(h, cases[i].off, cases[i].val, cases[i].cut, cases[i].bad_sum);
		size_t n = seal_raw(h, hl, req);
		vmess_server s;
		outcome o = feed_one(req, n, 1, NOW, &s);
		if (!cases[i].why) {
			assert_int_equal(o.ev.kind, PROTO_EV_OPEN);
			assert_int_equal(o.n, n);
			continue;
		}
		assert_refused(&o, cases[i].why);
		assert_int_equal(o.n, PROTO_ERR_MALFORMED);
	}
	/* an empty domain and one with a NUL */
	uint8_t h[VMESS_HEADER_MAX], req[VMESS_REQUEST_MAX];
	const uint8_t doms[2][3] = {{0, 'a', 'b'}, {2, 'a', 0}};
	for (int i = 0; i < 2; i++) {
		size_t n = header(h, 40, 2, 0, false);
		memcpy(h + 41, doms[i], 3);
		n = 41 + 1 + doms[i][0];
		uint32_t f = fnv(h, n);
		h[n++] = (uint8_t)(f >> 24), h[n++] = (uint8_t)(f >> 16), h[n++] = (uint8_t)(f >> 8);
		h[n++] = (uint8_t)f;
		size_t rn = seal_raw(h, n, req);
		vmess_server s;
		outcome o = feed_one(req, rn, 1, NOW, &s);
		assert_refused(&o, NULL);
		assert_int_equal(o.n, PROTO_ERR_MALFORMED);
	}
	/* zero (none without the chunk stream): TCP is raw, UDP refused */
	for (int udp = 0; udp < 2; udp++) {
		size_t n = header(h, 37, udp ? VMESS_CMD_UDP : VMESS_CMD_TCP, 0, false);
		h[34] = 0;
		h[35] = VMESS_SEC_NONE;
		resum(h, n);
		size_t rn = seal_raw(h, n, req);
		vmess_server s;
		outcome o = feed_one(req, rn, 1, NOW, &s);
		if (udp) {
			assert_refused(&o, "vmess: UDP needs the chunk stream");
			continue;
		}
		assert_int_equal(o.ev.kind, PROTO_EV_OPEN);
		assert_false(vmess_server_chunked(&s));
		vmess_body rx, tx;
		assert_int_equal(vmess_server_body_init(&s, &rx, &tx, NULL), -1);
	}
}

static void calls_out_of_order(void **state)
{
	(void)state;
	vmess_server s;
	proto_out out;
	vmess_server_init(&s, users, 2, NULL, NULL);
	assert_int_equal(vmess_server_opened(&s, &out), PROTO_ERR_STATE);
	vmess_body rx, tx;
	assert_int_equal(vmess_server_body_init(&s, &rx, &tx, NULL), -1);
	outcome o = feed_split(&s, REQUEST_AES_V4, sizeof REQUEST_AES_V4, 1000, NOW);
	assert_int_equal(o.ev.kind, PROTO_EV_OPEN);
	o.n = vmess_server_feed(&s, REQUEST_AES_V4, sizeof REQUEST_AES_V4, NOW, &o.out, &o.ev);
	assert_int_equal(o.n, PROTO_ERR_STATE);
	assert_int_equal(o.ev.kind, PROTO_EV_CLOSE);
	assert_int_equal(vmess_server_opened(&s, &out), 0);
	assert_int_equal(vmess_server_opened(&s, &out), PROTO_ERR_STATE);
}

/* ---- the client core against the server core ---- */

typedef struct bufs {
	uint8_t a[65536], b[65536];
	layer_buf up, down;
} bufs;

static void reset(bufs *x)
{
	x->up = (layer_buf){x->a, 0, sizeof x->a};
	x->down = (layer_buf){x->b, 0, sizeof x->b};
}

/* Our client sends a request and "ping" (a datagram for udp); the server
 * opens both, answers with its response and "pong"; the client reads it. */
static void round_trip(vmess_security sec, const addr_dest *d, bool udp)
{
	static bufs x;
	vmess_client_random r = fixed_random();
	r.auth_rand[1] = (uint8_t)(sec * 2 + udp); /* a new AuthID each */
	layer *c = vmess_client_new(users[0].cmd_key, sec, d, udp, NOW, &r);
	assert_non_null(c);
	reset(&x);
	assert_int_equal(c->ops->start(c, &x.down), 0);
	const uint8_t ping[] = {0, 4, 'p', 'i', 'n', 'g'}; /* a VLESS frame for udp */
	const uint8_t *app = udp ? ping : ping + 2;
	size_t app_len = udp ? sizeof ping : 4;
	assert_int_equal(c->ops->from_above(c, app, app_len, &x.down), app_len);

	vmess_server s;
	vmess_replay *f = calloc(1, sizeof *f);
	assert_non_null(f);
	vmess_server_init(&s, users, 2, replay_add, f);
	outcome o = feed_split(&s, x.b, x.down.len, 5, NOW + 3);
	assert_int_equal(o.ev.kind, PROTO_EV_OPEN);
	assert_int_equal(o.ev.user, 0);
	assert_int_equal(o.ev.cmd, udp ? PROTO_CMD_UDP_ASSOCIATE : PROTO_CMD_CONNECT);
	assert_int_equal(o.ev.dest.kind, d->kind);
	assert_int_equal(o.ev.dest.port, d->port);
	assert_int_equal(o.ev.dest.network, udp ? ADDR_UDP : ADDR_TCP);
	size_t body = (size_t)o.n;

	proto_out out;
	assert_int_equal(vmess_server_opened(&s, &out), 0);
	uint8_t back[4096];
	memcpy(back, out.buf, out.len);
	size_t back_len = out.len;
	if (sec == VMESS_SEC_ZERO) {
		assert_false(vmess_server_chunked(&s));
		assert_int_equal(x.down.len - body, 4);
		assert_memory_equal(x.b + body, "ping", 4);
		memcpy(back + back_len, "pong", 4);
		back_len += 4;
	} else {
		vmess_body rx, tx;
		assert_int_equal(vmess_server_body_init(&s, &rx, &tx, r.pad_seed), 0);
		size_t chunk, pad;
		assert_int_equal(vmess_body_open_size(&rx, x.b + body, &chunk, &pad), 1);
		assert_int_equal(x.down.len - body, 2 + chunk);
		ssize_t n = vmess_body_open(&rx, x.b + body + 2, chunk, pad);
		assert_int_equal(n, 4);
		assert_memory_equal(x.b + body + 2, "ping", 4);
		n = vmess_body_seal(&tx, (const uint8_t *)"pong", 4, back + back_len,
		                    sizeof back - back_len);
		assert_true(n > 0);
		back_len += (size_t)n;
		vmess_body_free(&rx);
		vmess_body_free(&tx);
	}
	reset(&x);
	/* the client reads the response and the payload, one byte at a time */
	size_t used = 0;
	for (size_t k = 1; k <= back_len; k++) {
		ssize_t n = c->ops->from_below(c, back + used, k - used, &x.up, &x.down);
		assert_true(n >= 0);
		used += (size_t)n;
	}
	assert_int_equal(used, back_len);
	if (udp) {
		assert_int_equal(x.up.len, 6);
		assert_memory_equal(x.a, ((uint8_t[]){0, 4, 'p', 'o', 'n', 'g'}), 6);
	} else {
		assert_int_equal(x.up.len, 4);
		assert_memory_equal(x.a, "pong", 4);
	}
	c->ops->free(c);
	free(f);
}

static void client_core_round_trips(void **state)
{
	(void)state;
	addr_dest v4 = {.kind = ADDR_IPV4, .port = 7, .u.v4 = {127, 0, 0, 1}};
	addr_dest v6 = {.kind = ADDR_IPV6, .port = 53, .u.v6 = {[15] = 1}};
	addr_dest dom;
	assert_int_equal(addr_dest_set_domain(&dom, "example.org", 11, 443), 0);
	const vmess_security secs[] = {VMESS_SEC_AES_128_GCM, VMESS_SEC_CHACHA20_POLY1305,
	                               VMESS_SEC_NONE, VMESS_SEC_ZERO};
	for (size_t i = 0; i < 4; i++) {
		round_trip(secs[i], &v4, false);
		round_trip(secs[i], &dom, false);
		if (secs[i] != VMESS_SEC_ZERO)
			round_trip(secs[i], &v6, true);
	}
}

/* The body layer against the client layer, 16 KiB each way in 1000-byte
 * pieces (TCP), or two datagrams each way (UDP). */
static void body_layer_with(vmess_security sec, bool udp)
{
	static bufs x;
	vmess_client_random r = fixed_random();
	r.auth_rand[2] = (uint8_t)(sec * 2 + udp);
	addr_dest d = {.kind = ADDR_IPV4, .port = 7, .u.v4 = {127, 0, 0, 1}};
	layer *c = vmess_client_new(users[1].cmd_key, sec, &d, udp, NOW, &r);
	assert_non_null(c);
	reset(&x);
	assert_int_equal(c->ops->start(c, &x.down), 0);
	vmess_server s;
	vmess_server_init(&s, users, 2, NULL, NULL);
	outcome o = feed_split(&s, x.b, x.down.len, 1000, NOW);
	assert_int_equal(o.ev.kind, PROTO_EV_OPEN);
	proto_out resp;
	assert_int_equal(vmess_server_opened(&s, &resp), 0);
	layer *b = vmess_server_body_new(&s, r.pad_seed);
	assert_non_null(b);
	assert_true(b->ops->ready(b));

	static uint8_t data[16384], got[16384 + 64];
	for (size_t i = 0; i < sizeof data; i++)
		data[i] = (uint8_t)(i * 7 + 3);
	const uint8_t dg[2][7] = {{0, 5, 'h', 'e', 'l', 'l', 'o'}, {0, 3, 'b', 'y', 'e'}};

	/* client -> server */
	size_t total = udp ? 0 : sizeof data, got_len = 0;
	for (size_t off = 0, k = 0; udp ? k < 2 : off < total; k++) {
		reset(&x);
		const uint8_t *p = udp ? dg[k] : data + off;
		size_t n = udp ? 2 + (size_t)dg[k][1] : (total - off < 1000 ? total - off : 1000);
		assert_int_equal(c->ops->from_above(c, p, n, &x.down), n);
		off += n;
		layer_buf down = {got + got_len, 0, sizeof got - got_len};
		assert_int_equal(b->ops->from_above(b, x.b, x.down.len, &down), x.down.len);
		if (udp)
			assert_memory_equal(down.data, dg[k], n);
		got_len += down.len;
	}
	if (!udp) {
		assert_int_equal(got_len, sizeof data);
		assert_memory_equal(got, data, sizeof data);
	}

	/* server -> client, after the response header */
	reset(&x);
	assert_int_equal(c->ops->from_below(c, resp.buf, resp.len, &x.up, &x.down), resp.len);
	got_len = 0;
	for (size_t off = 0, k = 0; udp ? k < 2 : off < total; k++) {
		static uint8_t wire[32768];
		layer_buf up = {wire, 0, sizeof wire};
		const uint8_t *p = udp ? dg[k] : data + off;
		size_t n = udp ? 2 + (size_t)dg[k][1] : (total - off < 1000 ? total - off : 1000);
		assert_int_equal(b->ops->from_below(b, p, n, &up, NULL), n);
		off += n;
		reset(&x);
		assert_int_equal(c->ops->from_below(c, wire, up.len, &x.up, &x.down), up.len);
		if (udp)
			assert_memory_equal(x.a, dg[k], n);
		else
			memcpy(got + got_len, x.a, x.up.len);
		got_len += x.up.len;
	}
	if (!udp) {
		assert_int_equal(got_len, sizeof data);
		assert_memory_equal(got, data, sizeof data);
	}

	/* the client's end chunk ends its body: what follows is swallowed */
	if (sec != VMESS_SEC_ZERO) {
		reset(&x);
		assert_int_equal(c->ops->shutdown(c, &x.down), 0);
		memcpy(x.b + x.down.len, "junk", 4);
		layer_buf down = {got, 0, sizeof got};
		assert_int_equal(b->ops->from_above(b, x.b, x.down.len + 4, &down), x.down.len + 4);
		assert_int_equal(down.len, 0);
		/* a changed byte of a first chunk is refused (the same keys: the
		 * same random bytes) */
		layer *c2 = vmess_client_new(users[1].cmd_key, sec, &d, udp, NOW, &r);
		layer *b2 = vmess_server_body_new(&s, r.pad_seed);
		assert_non_null(c2);
		assert_non_null(b2);
		reset(&x);
		assert_int_equal(c2->ops->start(c2, &x.down), 0);
		size_t head = x.down.len;
		assert_int_equal(c2->ops->from_above(c2, dg[0], 7, &x.down), 7);
		x.b[head + 2] ^= 1;
		down.len = 0;
		ssize_t n = b2->ops->from_above(b2, x.b + head, x.down.len - head, &down);
		if (sec != VMESS_SEC_NONE) {
			assert_int_equal(n, LAYER_ERR_PROTO);
			assert_string_equal(b2->ops->error(b2), "vmess: bad chunk");
		} else {
			assert_int_equal(n, x.down.len - head); /* none: nothing to check */
		}
		c2->ops->free(c2);
		b2->ops->free(b2);
	}
	c->ops->free(c);
	b->ops->free(b);
}

static void body_layer_round_trips(void **state)
{
	(void)state;
	const vmess_security secs[] = {VMESS_SEC_AES_128_GCM, VMESS_SEC_CHACHA20_POLY1305,
	                               VMESS_SEC_NONE, VMESS_SEC_ZERO};
	for (size_t i = 0; i < 4; i++) {
		body_layer_with(secs[i], false);
		if (secs[i] != VMESS_SEC_ZERO)
			body_layer_with(secs[i], true);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(opens_request_vectors),
		cmocka_unit_test(body_codec_matches_vectors),
		cmocka_unit_test(auth_id_time_window),
		cmocka_unit_test(unknown_user_and_legacy_headers_refused),
		cmocka_unit_test(replayed_auth_id_refused),
		cmocka_unit_test(replay_filter_expires_and_bounds),
		cmocka_unit_test(truncated_requests_wait),
		cmocka_unit_test(corrupted_requests_refused),
		cmocka_unit_test(malformed_headers_refused),
		cmocka_unit_test(calls_out_of_order),
		cmocka_unit_test(client_core_round_trips),
		cmocka_unit_test(body_layer_round_trips),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}
