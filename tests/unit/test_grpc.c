/* test_grpc.c - the gRPC call's rules: service names, the server's verdict on a request, the client's on a response, each text word for word. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "transport/grpc.h"

static void add(grpc_head *h, const char *name, const char *value)
{
	grpc_head_add(h, (const uint8_t *)name, strlen(name), (const uint8_t *)value, strlen(value));
}

static grpc_head request(const char *method, const char *path, const char *type)
{
	grpc_head h = {0};
	add(&h, ":method", method);
	add(&h, ":scheme", "https");
	add(&h, ":path", path);
	add(&h, ":authority", "proxy.test");
	add(&h, "content-type", type);
	add(&h, "te", "trailers");
	return h;
}

static void service_names(void **state)
{
	(void)state;
	char err[400];
	assert_true(grpc_service_name_ok("tunnel", err, sizeof err));
	assert_true(grpc_service_name_ok("a/b.c_d-e", err, sizeof err));
	assert_false(grpc_service_name_ok("", err, sizeof err));
	assert_string_equal(err, "grpc: bad service name \"\"");
	assert_false(grpc_service_name_ok("a b", err, sizeof err));
	assert_string_equal(err, "grpc: bad service name \"a b\"");
	assert_false(grpc_service_name_ok("a?b", err, sizeof err));
	assert_false(grpc_service_name_ok("a#b", err, sizeof err));
	assert_false(grpc_service_name_ok("a\x01", err, sizeof err));
	char long_name[GRPC_SERVICE_MAX + 2];
	memset(long_name, 'x', sizeof long_name - 1);
	long_name[GRPC_SERVICE_MAX + 1] = 0;
	assert_false(grpc_service_name_ok(long_name, NULL, 0));
	long_name[GRPC_SERVICE_MAX] = 0;
	assert_true(grpc_service_name_ok(long_name, NULL, 0));
	assert_false(grpc_service_name_ok(NULL, NULL, 0));
}

static void a_request_is_taken_or_refused_with_its_answer(void **state)
{
	(void)state;
	const char *status = NULL, *grpc_status = "x";
	char why[300];
	grpc_head h = request("POST", "/tunnel/Tun", "application/grpc");
	assert_int_equal(grpc_check_request(&h, "/tunnel/Tun", &status, &grpc_status, why, sizeof why),
	                 0);
	h = request("POST", "/tunnel/Tun", "application/grpc+proto");
	assert_int_equal(grpc_check_request(&h, "/tunnel/Tun", &status, &grpc_status, why, sizeof why),
	                 0);

	h = request("POST", "/other/Tun", "application/grpc");
	assert_int_equal(grpc_check_request(&h, "/tunnel/Tun", &status, &grpc_status, why, sizeof why),
	                 -1);
	assert_string_equal(status, "200");
	assert_string_equal(grpc_status, "12");
	assert_string_equal(why, "grpc: wrong path \"/other/Tun\" (expected \"/tunnel/Tun\")");

	h = request("GET", "/tunnel/Tun", "application/grpc");
	assert_int_equal(grpc_check_request(&h, "/tunnel/Tun", &status, &grpc_status, why, sizeof why),
	                 -1);
	assert_string_equal(status, "405");
	assert_null(grpc_status);
	assert_string_equal(why, "grpc: bad request: method GET");

	h = request("POST", "/tunnel/Tun", "text/html");
	assert_int_equal(grpc_check_request(&h, "/tunnel/Tun", &status, &grpc_status, why, sizeof why),
	                 -1);
	assert_string_equal(status, "415");
	assert_string_equal(why, "grpc: bad request: content-type \"text/html\"");
	h = request("POST", "/tunnel/Tun", "application/grpcx");
	assert_int_equal(grpc_check_request(&h, "/tunnel/Tun", &status, &grpc_status, why, sizeof why),
	                 -1);
	assert_string_equal(why, "grpc: bad request: content-type \"application/grpcx\"");

	/* a path longer than a kept value is cut, and then does not match */
	char path[GRPC_VALUE_MAX + 20];
	memset(path, 'p', sizeof path - 1);
	path[0] = '/';
	path[sizeof path - 1] = 0;
	h = request("POST", path, "application/grpc");
	assert_int_equal(grpc_check_request(&h, path, &status, &grpc_status, why, sizeof why), -1);
}

static void a_response_is_judged_by_its_status_and_grpc_status(void **state)
{
	(void)state;
	char why[300];
	grpc_head h = {0};
	add(&h, ":status", "200");
	add(&h, "content-type", "application/grpc");
	assert_int_equal(grpc_check_response(&h, why, sizeof why), 0);
	add(&h, "grpc-status", "0");
	assert_int_equal(grpc_check_response(&h, why, sizeof why), 0);

	grpc_head bad = {0};
	add(&bad, ":status", "404");
	assert_int_equal(grpc_check_response(&bad, why, sizeof why), -1);
	assert_string_equal(why, "grpc: refused: HTTP status 404");

	grpc_head refused = {0};
	add(&refused, ":status", "200");
	add(&refused, "grpc-status", "12");
	assert_int_equal(grpc_check_response(&refused, why, sizeof why), -1);
	assert_string_equal(why, "grpc: refused: grpc-status 12");
	add(&refused, "grpc-message", "unknown service tunnel");
	assert_int_equal(grpc_check_response(&refused, why, sizeof why), -1);
	assert_string_equal(why, "grpc: refused: grpc-status 12: unknown service tunnel");
}

/* Issue 32 N6: frames that carry no payload (PRIORITY, WINDOW_UPDATE,
 * PING, SETTINGS, empty DATA, unknown types) pass up to GRPC_CALM_BURST at
 * once and GRPC_CALM_RATE a second; the next ends the connection, and the
 * text says why word for word. */
static void frames_without_payload_are_bounded(void **state)
{
	(void)state;
	static const struct {
		uint8_t type, flags;
		size_t len;
		bool counted;
	} kinds[] = {
	    {0x0, 0x0, 0, true},       /* empty DATA */
	    {0x0, 0x1, 0, false},      /* empty DATA with END_STREAM ends a call */
	    {0x0, 0x0, 100, false},    /* DATA with payload */
	    {0x1, 0x4, 20, false},     /* HEADERS */
	    {0x2, 0x0, 5, true},       /* PRIORITY */
	    {0x3, 0x0, 4, false},      /* RST_STREAM: nghttp2 bounds resets */
	    {0x4, 0x0, 0, true},       /* SETTINGS */
	    {0x6, 0x0, 8, true},       /* PING */
	    {0x7, 0x0, 8, false},      /* GOAWAY */
	    {0x8, 0x0, 4, true},       /* WINDOW_UPDATE */
	    {0x9, 0x0, 0, false},      /* CONTINUATION: nghttp2 bounds them */
	    {0xa, 0x0, 10, true},      /* ALTSVC: not used here */
	    {0xff, 0x0, 10, true},     /* unknown */
	};
	for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
		grpc_calm b = {0};
		uint64_t now = 5000;
		for (uint32_t i = 0; i < GRPC_CALM_BURST; i++)
			assert_int_equal(grpc_calm_frame(&b, kinds[k].type, kinds[k].len, kinds[k].flags, now), 0);
		assert_int_equal(grpc_calm_frame(&b, kinds[k].type, kinds[k].len, kinds[k].flags, now),
		                 kinds[k].counted ? -1 : 0);
	}

	/* ordinary traffic: a WINDOW_UPDATE and a PING every millisecond for
	 * a minute never comes near it */
	grpc_calm b = {0};
	for (uint64_t now = 0; now < 60000; now++) {
		assert_int_equal(grpc_calm_frame(&b, 0x8, 4, 0, now), 0);
		assert_int_equal(grpc_calm_frame(&b, 0x6, 8, 0, now), 0);
	}

	/* a flood at twice the rate is ended within a few seconds, and the
	 * budget refills with time, not with frames */
	grpc_calm f = {0};
	int ended = 0;
	uint64_t t = 1000;
	for (uint32_t i = 0; i < 10 * GRPC_CALM_RATE && !ended; i++) {
		if (i % (2 * GRPC_CALM_RATE / 1000) == 0)
			t++; /* 2 * GRPC_CALM_RATE frames a second */
		ended = grpc_calm_frame(&f, 0x2, 5, 0, t) == -1;
	}
	assert_true(ended);
	assert_true(t - 1000 <= 2000 * GRPC_CALM_BURST / GRPC_CALM_RATE + 10);
	/* once over, it stays over */
	assert_int_equal(grpc_calm_frame(&f, 0x2, 5, 0, t + 100000), -1);
	assert_string_equal(grpc_calm_message(),
	                    "grpc: more than 100000 frames without payload in a second "
	                    "(PRIORITY, WINDOW_UPDATE, PING, SETTINGS, empty DATA, unknown types): "
	                    "GOAWAY ENHANCE_YOUR_CALM");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(service_names),
		cmocka_unit_test(a_request_is_taken_or_refused_with_its_answer),
		cmocka_unit_test(a_response_is_judged_by_its_status_and_grpc_status),
		cmocka_unit_test(frames_without_payload_are_bounded),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
