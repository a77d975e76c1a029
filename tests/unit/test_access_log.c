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
		{{WHEN, &src, &dst, NULL, "in", -1, "direct", 1},
		 "2026-12-01T17:30:00.123Z 127.0.0.1:50000 accepted tcp:example.com:80 inbound in "
		 "rule default outbound direct@v1\n"},
		{{WHEN, &src, &dst, &sniffed, "in", 1, "proxy", 3},
		 "2026-12-01T17:30:00.123Z 127.0.0.1:50000 accepted tcp:example.com:80 sniffed "
		 "www.example.org inbound in rule #2 outbound proxy@v3\n"},
		{{WHEN, NULL, &udp, NULL, NULL, 0, "b", 7},
		 "2026-12-01T17:30:00.123Z - accepted udp:10.0.0.2:53 inbound - rule #1 outbound b@v7\n"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		size_t n = access_log_format(&cases[i].e, line, sizeof line);
		assert_string_equal(line, cases[i].want);
		assert_int_equal(n, strlen(cases[i].want));
	}
	/* cut to the buffer, the newline kept */
	size_t n = access_log_format(&cases[1].e, line, 40);
	assert_int_equal(n, 39);
	assert_int_equal(line[38], '\n');
	assert_int_equal(strlen(line), 39);
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
	access_log_entry e = {WHEN, &src, &dst, NULL, "in", -1, "direct", 1};

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

	access_log_close();
	assert_false(access_log_enabled());
	access_log_write(&e);
	assert_int_equal(lines_in(path), 2);
	unlink(path);
	unlink(rotated);
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(line_format),
		cmocka_unit_test(targets_and_reopen),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
