/* test_log.c - the log line's shape and the level filter. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/log.h"

static void line_shape_and_filter(void **state)
{
	(void)state;
	char *buf = NULL;
	size_t len = 0;
	FILE *mem = open_memstream(&buf, &len);
	log_set_stream(mem);
	log_set_level(LOG_LEVEL_INFO);
	log_info("balancer", "balancer member %s is now %s", "primary", "down");
	log_debug("balancer", "hidden");
	log_set_level(LOG_LEVEL_TRACE);
	log_write(LOG_LEVEL_TRACE, "x", "shown");
	log_set_stream(NULL);
	fclose(mem);

	/* 2026-11-30T10:20:36.123Z INFO  balancer: balancer member primary is now down */
	assert_true(len > 25);
	assert_int_equal(buf[4], '-');
	assert_int_equal(buf[10], 'T');
	assert_int_equal(buf[23], 'Z');
	const char *first_end = strchr(buf, '\n');
	assert_non_null(first_end);
	assert_true(strncmp(buf + 24, " INFO  balancer: balancer member primary is now down\n",
	                    (size_t)(first_end - buf - 23)) == 0);
	assert_null(strstr(buf, "hidden"));
	assert_non_null(strstr(first_end + 1, " TRACE x: shown\n"));
	free(buf);
}

static void long_lines_are_cut_not_overflowed(void **state)
{
	(void)state;
	char *buf = NULL;
	size_t len = 0;
	FILE *mem = open_memstream(&buf, &len);
	log_set_stream(mem);
	log_set_level(LOG_LEVEL_INFO);
	char big[5000];
	memset(big, 'a', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	log_warn("t", "%s", big);
	log_set_stream(NULL);
	fclose(mem);
	assert_int_equal(len, 2047);
	assert_int_equal(buf[len - 1], '\n');
	free(buf);
}

/* Both formats word for word, at a fixed time. */
static void line_formats(void **state)
{
	(void)state;
	/* 2026-11-30T10:20:36.123Z */
	const struct timespec when = {.tv_sec = 1796034036, .tv_nsec = 123456789};
	char line[256];
	size_t n = log_format_line(LOG_FORMAT_TEXT, &when, LOG_LEVEL_WARN, "balancer",
	                           "member a is now down", line, sizeof line);
	assert_string_equal(line, "2026-11-30T10:20:36.123Z WARN  balancer: member a is now down\n");
	assert_int_equal(n, strlen(line));
	n = log_format_line(LOG_FORMAT_JSON, &when, LOG_LEVEL_WARN, "balancer",
	                    "member \"a\" is\tnow down", line, sizeof line);
	assert_string_equal(line, "{\"time\":\"2026-11-30T10:20:36.123Z\",\"level\":\"warn\","
	                          "\"target\":\"balancer\",\"msg\":\"member \\\"a\\\" "
	                          "is\\u0009now down\"}\n");
	assert_int_equal(n, strlen(line));
	/* a json line cut in its msg stays one object */
	n = log_format_line(LOG_FORMAT_JSON, &when, LOG_LEVEL_INFO, "t", "\n\n\n\n\n\n\n\n\n\n\n\n",
	                    line, 100);
	assert_true(n < 100);
	assert_string_equal(line + n - 3, "\"}\n");
	assert_int_equal((n - 3 - strlen("{\"time\":\"2026-11-30T10:20:36.123Z\",\"level\":\"info\","
	                                  "\"target\":\"t\",\"msg\":\"")) % 6, 0);
	log_set_format(LOG_FORMAT_JSON);
	assert_int_equal(log_get_format(), LOG_FORMAT_JSON);
	log_set_format(LOG_FORMAT_TEXT);
}

static int tapped_level = -1, taps_seen;
static char tapped[256];

static void record(int level, const char *line, size_t len)
{
	tapped_level = level;
	taps_seen++;
	snprintf(tapped, sizeof tapped, "%.*s", (int)len, line);
}

static void tap_sees_written_lines(void **state)
{
	(void)state;
	char *buf = NULL;
	size_t size = 0;
	FILE *mem = open_memstream(&buf, &size);
	log_set_stream(mem);
	log_set_level(LOG_LEVEL_INFO);
	log_set_tap(record);
	log_warn("balancer", "member %s is down", "a");
	assert_int_equal(taps_seen, 1);
	assert_int_equal(tapped_level, LOG_LEVEL_WARN);
	assert_string_equal(tapped, "balancer: member a is down");
	log_debug("app", "dropped before formatting");
	assert_int_equal(taps_seen, 1);
	log_set_tap(NULL);
	log_info("app", "not tapped");
	assert_int_equal(taps_seen, 1);
	log_set_stream(NULL);
	fclose(mem);
	free(buf);
}

static void level_names(void **state)
{
	(void)state;
	const char *want[] = {"error", "warn", "info", "debug", "trace"};
	for (int l = LOG_LEVEL_ERROR; l <= LOG_LEVEL_TRACE; l++)
		assert_string_equal(log_level_name(l), want[l]);
	log_set_level(LOG_LEVEL_WARN);
	assert_int_equal(log_get_level(), LOG_LEVEL_WARN);
}

/* Issue 32 item 2: the one set of level words the CLI, the config and the
 * API share; every level's own name parses back to it. */
static void level_words(void **state)
{
	(void)state;
	static const struct {
		const char *word;
		int level;
	} ok[] = {{"error", LOG_LEVEL_ERROR}, {"warn", LOG_LEVEL_WARN},
	          {"warning", LOG_LEVEL_WARN}, {"info", LOG_LEVEL_INFO},
	          {"debug", LOG_LEVEL_DEBUG},  {"trace", LOG_LEVEL_TRACE}};
	for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
		assert_int_equal(log_level_parse(ok[i].word, strlen(ok[i].word)), ok[i].level);
	for (int l = LOG_LEVEL_ERROR; l <= LOG_LEVEL_TRACE; l++)
		assert_int_equal(log_level_parse(log_level_name(l), strlen(log_level_name(l))), l);
	assert_int_equal(log_level_parse("warnings", 8), -1);
	assert_int_equal(log_level_parse("warning", 4), LOG_LEVEL_WARN); /* n bytes only */
	assert_int_equal(log_level_parse("WARN", 4), -1);
	assert_int_equal(log_level_parse("silent", 6), -1); /* the API's alone */
	assert_int_equal(log_level_parse("", 0), -1);
	assert_string_equal(LOG_LEVEL_WORDS_TEXT, "error, warn, warning, info, debug or trace");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(line_shape_and_filter),
		cmocka_unit_test(long_lines_are_cut_not_overflowed),
		cmocka_unit_test(line_formats),
		cmocka_unit_test(level_names),
		cmocka_unit_test(level_words),
		cmocka_unit_test(tap_sees_written_lines),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
