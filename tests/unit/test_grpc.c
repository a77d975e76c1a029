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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(service_names),
		cmocka_unit_test(a_request_is_taken_or_refused_with_its_answer),
		cmocka_unit_test(a_response_is_judged_by_its_status_and_grpc_status),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
