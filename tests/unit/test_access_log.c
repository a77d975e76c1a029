/* test_access_log.c - the access log's line, its targets and the swap a reload does. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/access_log.h"
#include "base/log.h"

static addr_dest ip4(uint8_t a, uint8_t b, uint8_t c, uint8_t d, uint16_t port, addr_network n)
{
	addr_dest x = {.kind = ADDR_IPV4, .network = n, .port = port};
	x.u.v4[0] = a;
	x.u.v4[1] = b;
	x.u.v4[2] = c;
	x.u.v4[3] = d;
	return x;
}

static addr_dest name(const char *s, uint16_t port)
{
	addr_dest x = {0};
	assert_int_equal(addr_dest_set_domain(&x, s, strlen(s), port), 0);
	return x;
}

/* 2026-12-01T17:30:00.123Z: a fixed time, so the whole line is compared. */
static const struct timespec WHEN = {.tv_sec = 1796146200, .tv_nsec = 123456789};

static void line_format(void **state)
{
	(void)state;
	addr_dest src = ip4(127, 0, 0, 1, 50000, ADDR_TCP);
	addr_dest dst = name("example.com", 80);
	addr_dest sniffed = name("www.example.org", 443);
	addr_dest udp = ip4(10, 0, 0, 2, 53, ADDR_UDP);
	char line[ACCESS_LOG_LINE_MAX];
	struct {
		access_log_entry e;
		const char *want;
	} cases[] = {
		{{WHEN, &src, &dst, NULL, "in", -1, "direct", 1, .user = NULL},
		 "2026-12-01T17:30:00.123Z 127.0.0.1:50000 accepted tcp:example.com:80 inbound in "
		 "rule default outbound direct@v1\n"},
		{{WHEN, &src, &dst, &sniffed, "in", 1, "proxy", 3, .user = NULL},
		 "2026-12-01T17:30:00.123Z 127.0.0.1:50000 accepted tcp:example.com:80 sniffed "
		 "www.example.org inbound in rule #2 outbound proxy@v3\n"},
		{{WHEN, NULL, &udp, NULL, NULL, 0, "b", 7, .user = NULL},
		 "2026-12-01T17:30:00.123Z - accepted udp:10.0.0.2:53 inbound - rule #1 outbound b@v7\n"},
		{{WHEN, &src, &dst, NULL, "in", 0, "pool", 2, .user = "alice", .member = "m2"},
		 "2026-12-01T17:30:00.123Z 127.0.0.1:50000 accepted tcp:example.com:80 inbound in "
		 "user alice rule #1 outbound pool@v2 member m2\n"},
		{{WHEN, &src, &dst, &sniffed, "in", 0, "pool", 2, .user = "alice", .member = "m2",
		  .event = ACCESS_LOG_END, .up = 12, .down = 3400, .ms = 250},
		 "2026-12-01T17:30:00.123Z 127.0.0.1:50000 ended tcp:example.com:80 sniffed "
		 "www.example.org inbound in user alice rule #1 outbound pool@v2 member m2 up 12 "
		 "down 3400 ms 250 why closed\n"},
		{{WHEN, &src, &dst, NULL, "in", -1, "direct", 1, .event = ACCESS_LOG_END,
		  .why = "connection reset by peer"},
		 "2026-12-01T17:30:00.123Z 127.0.0.1:50000 ended tcp:example.com:80 inbound in "
		 "rule default outbound direct@v1 up 0 down 0 ms 0 why connection reset by peer\n"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		size_t n = access_log_format(&cases[i].e, LOG_FORMAT_TEXT, line, sizeof line);
		assert_string_equal(line, cases[i].want);
		assert_int_equal(n, strlen(cases[i].want));
	}
	/* cut to the buffer, the newline kept */
	size_t n = access_log_format(&cases[1].e, LOG_FORMAT_TEXT, line, 40);
	assert_int_equal(n, 39);
	assert_int_equal(line[38], '\n');
	assert_int_equal(strlen(line), 39);
}

/* Every key on every line, null where the line has no value; strings
 * escaped (RFC 8259 section 7). */
static void json_lines(void **state)
{
	(void)state;
	addr_dest src = ip4(127, 0, 0, 1, 50000, ADDR_TCP);
	addr_dest dst = name("example.com", 80);
	addr_dest sniffed = name("www.example.org", 443);
	char line[ACCESS_LOG_LINE_MAX];
	struct {
		access_log_entry e;
		const char *want;
	} cases[] = {
		{{WHEN, &src, &dst, NULL, "in", -1, "direct", 1, .user = NULL},
		 "{\"time\":\"2026-12-01T17:30:00.123Z\",\"event\":\"open\",\"source\":\"127.0.0.1:50000\","
		 "\"dest\":\"tcp:example.com:80\",\"sniffed\":null,\"inbound\":\"in\",\"user\":null,"
		 "\"rule\":null,\"outbound\":\"direct@v1\",\"member\":null,\"up\":null,\"down\":null,"
		 "\"ms\":null,\"why\":null}\n"},
		{{WHEN, NULL, &dst, &sniffed, NULL, 2, "pool", 4, .user = "a\"b\\c\n", .member = "m",
		  .event = ACCESS_LOG_END, .up = 5, .down = 6, .ms = 7, .why = "reset"},
		 "{\"time\":\"2026-12-01T17:30:00.123Z\",\"event\":\"end\",\"source\":null,"
		 "\"dest\":\"tcp:example.com:80\",\"sniffed\":\"www.example.org\",\"inbound\":null,"
		 "\"user\":\"a\\\"b\\\\c\\u000a\",\"rule\":3,\"outbound\":\"pool@v4\",\"member\":\"m\","
		 "\"up\":5,\"down\":6,\"ms\":7,\"why\":\"reset\"}\n"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		size_t n = access_log_format(&cases[i].e, LOG_FORMAT_JSON, line, sizeof line);
		assert_string_equal(line, cases[i].want);
		assert_int_equal(n, strlen(cases[i].want));
	}
	/* a name too long for the line is cut inside its string: still one object */
	char big[3000];
	memset(big, 'x', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	access_log_entry e = cases[1].e;
	e.user = big;
	size_t n = access_log_format(&e, LOG_FORMAT_JSON, line, sizeof line);
	assert_true(n < sizeof line);
	assert_int_equal(line[n - 1], '\n');
	assert_int_equal(line[n - 2], '}');
	assert_non_null(strstr(line, "\"why\":\"reset\"}"));
}

static size_t lines_in(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	size_t n = 0;
	int c;
	while ((c = fgetc(f)) != EOF)
		n += c == '\n';
	fclose(f);
	return n;
}

/* off writes nothing; a path is appended to; a reopen after a rename
 * writes to a new file at the path; a path that cannot be opened keeps
 * the current target. */
static void targets_and_reopen(void **state)
{
	(void)state;
	char dir[] = "/tmp/etm-access-XXXXXX";
	assert_non_null(mkdtemp(dir));
	char path[128], rotated[128], err[ACCESS_LOG_ERR_MAX];
	snprintf(path, sizeof path, "%s/access.log", dir);
	snprintf(rotated, sizeof rotated, "%s/access.log.1", dir);
	addr_dest src = ip4(127, 0, 0, 1, 1, ADDR_TCP), dst = ip4(127, 0, 0, 1, 2, ADDR_TCP);
	access_log_entry e = {.when = WHEN, .source = &src, .dest = &dst, .inbound = "in",
	                      .rule = -1, .outbound = "direct", .version = 1};

	assert_int_equal(access_log_open("off", err, sizeof err), 0);
	assert_false(access_log_enabled());
	access_log_write(&e);

	assert_int_equal(access_log_open(path, err, sizeof err), 0);
	assert_true(access_log_enabled());
	access_log_write(&e);
	access_log_write(&e);
	assert_int_equal(lines_in(path), 2);

	assert_int_equal(rename(path, rotated), 0);
	assert_int_equal(access_log_open(path, err, sizeof err), 0);
	access_log_write(&e);
	assert_int_equal(lines_in(rotated), 2);
	assert_int_equal(lines_in(path), 1);

	char bad[160];
	snprintf(bad, sizeof bad, "%s/missing/access.log", dir);
	assert_int_equal(access_log_open(bad, err, sizeof err), -1);
	char want[256];
	snprintf(want, sizeof want, "cannot open the access log %s: No such file or directory", bad);
	assert_string_equal(err, want);
	assert_int_equal(access_log_check(bad, err, sizeof err), -1);
	assert_string_equal(err, want);
	assert_int_equal(access_log_check(path, err, sizeof err), 0);
	assert_int_equal(access_log_check(rotated, err, sizeof err), 0);
	char fresh[160];
	snprintf(fresh, sizeof fresh, "%s/fresh.log", dir);
	assert_int_equal(access_log_check(fresh, err, sizeof err), 0);
	assert_int_equal(access(fresh, F_OK), -1); /* a check creates nothing */
	access_log_write(&e); /* still the file at path */
	assert_int_equal(lines_in(path), 2);

	/* end lines: only with access_end, one per record, the record freed */
	access_log_set_end(false);
	assert_false(access_log_end_enabled());
	assert_null(access_log_flow_new(&e));
	access_log_flow_end(NULL, 1, 2, NULL); /* nothing */
	access_log_set_end(true);
	assert_true(access_log_end_enabled());
	access_log_flow *fl = access_log_flow_new(&e);
	assert_non_null(fl);
	access_log_flow_set_member(fl, "m1");
	access_log_flow_end(fl, 12, 34, NULL);
	assert_int_equal(lines_in(path), 3);
	FILE *f = fopen(path, "r");
	char got[ACCESS_LOG_LINE_MAX] = "";
	while (fgets(got, sizeof got, f))
		;
	fclose(f);
	/* the time is the end's: compare what follows it */
	assert_string_equal(got + 25, "127.0.0.1:1 ended tcp:127.0.0.1:2 inbound in rule default "
	                              "outbound direct@v1 member m1 up 12 down 34 ms 0 why closed\n");
	access_log_set_end(false);

	access_log_close();
	assert_false(access_log_enabled());
	assert_false(access_log_end_enabled());
	access_log_write(&e);
	assert_int_equal(lines_in(path), 3);
	unlink(path);
	unlink(rotated);
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(line_format),
		cmocka_unit_test(json_lines),
		cmocka_unit_test(targets_and_reopen),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
