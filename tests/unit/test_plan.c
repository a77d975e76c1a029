/* test_plan.c - the hot-reload planner: what each change builds, reuses, swaps, drains and publishes, the versions, and the drain keys it reads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "app/config.h"

/* Specs come from TOML text through config_load, the path --test takes. */
static void load(const char *toml, etm_spec *s)
{
	char msg[CONFIG_MSG_MAX];
	int rc = config_load(toml, strlen(toml), s, msg, sizeof msg);
	if (rc)
		fail_msg("unexpected error:\n%s", msg);
}

/* The last line of a report: the detail without the excerpt. */
static const char *detail(const char *msg)
{
	const char *nl = strrchr(msg, '\n');
	return nl ? nl + 1 : msg;
}

static void refused(const char *toml, const char *want, bool parse_error)
{
	etm_spec s;
	char msg[CONFIG_MSG_MAX];
	assert_int_equal(config_load(toml, strlen(toml), &s, msg, sizeof msg), -1);
	if (parse_error) {
		assert_true(strncmp(msg, "TOML parse error at line ", 25) == 0);
		assert_string_equal(detail(msg), want);
	} else {
		assert_string_equal(msg, want);
	}
}

#define DIRECT "[[outbound]]\ntag = \"direct\"\nprotocol = \"freedom\"\n"

/* ---- the drain keys ---- */

static void the_drain_keys_parse_with_unset_defaults(void **state)
{
	(void)state;
	etm_spec s;
	load(DIRECT "[[outbound]]\ntag = \"a\"\nprotocol = \"freedom\"\ndrain = \"close\"\n"
	            "[[outbound]]\ntag = \"b\"\nprotocol = \"freedom\"\ndrain_after = 30\n"
	            "[[outbound]]\ntag = \"c\"\nprotocol = \"freedom\"\ndrain = \"close\"\n"
	            "drain_after = 0\n"
	            "[[outbound]]\ntag = \"d\"\nprotocol = \"freedom\"\ndrain = \"keep\"\n"
	            "[policy]\ndrain = \"close\"\ndrain_after = 86400\n",
	     &s);
	assert_int_equal(s.outbounds[0].drain.mode, ETM_DRAIN_UNSET);
	assert_false(s.outbounds[0].drain.has_after);
	assert_int_equal(s.outbounds[1].drain.mode, ETM_DRAIN_CLOSE);
	assert_false(s.outbounds[1].drain.has_after);
	assert_int_equal(s.outbounds[2].drain.mode, ETM_DRAIN_UNSET);
	assert_true(s.outbounds[2].drain.has_after);
	assert_int_equal(s.outbounds[2].drain.after, 30);
	assert_int_equal(s.outbounds[3].drain.mode, ETM_DRAIN_CLOSE);
	assert_true(s.outbounds[3].drain.has_after);
	assert_int_equal(s.outbounds[3].drain.after, 0);
	assert_int_equal(s.outbounds[4].drain.mode, ETM_DRAIN_KEEP);
	assert_int_equal(s.policy.drain.mode, ETM_DRAIN_CLOSE);
	assert_true(s.policy.drain.has_after);
	assert_int_equal(s.policy.drain.after, 86400);
	etm_spec_free(&s);

	load(DIRECT, &s);
	assert_int_equal(s.policy.drain.mode, ETM_DRAIN_UNSET);
	assert_false(s.policy.drain.has_after);
	etm_spec_free(&s);
}

static void bad_drain_values_are_refused_word_for_word(void **state)
{
	(void)state;
	refused(DIRECT "drain = \"later\"\n", "unknown variant `later`, expected `keep` or `close`",
	        true);
	refused(DIRECT "drain = \"Close\"\n", "unknown variant `Close`, expected `keep` or `close`",
	        true);
	refused(DIRECT "drain_after = \"30s\"\n", "invalid type: string \"30s\", expected u64", true);
	refused(DIRECT "drain_after = -1\n", "invalid value: integer `-1`, expected u64", true);
	refused(DIRECT "[policy]\ndrain = true\n", "invalid type: boolean `true`, expected a string",
	        true);
	refused(DIRECT "drain_after = 86401\n", "outbound direct: drain_after must be 0 to 86400",
	        false);
	refused(DIRECT "drain = \"keep\"\ndrain_after = 5\n",
	        "outbound direct: drain_after closes the flows of old versions, so it cannot go with "
	        "drain = \"keep\"",
	        false);
	refused(DIRECT "[policy]\ndrain_after = 100000\n", "policy.drain_after must be 0 to 86400",
	        false);
	refused(DIRECT "[policy]\ndrain = \"keep\"\ndrain_after = 5\n",
	        "policy.drain_after closes the flows of old versions, so it cannot go with "
	        "policy.drain = \"keep\"",
	        false);
	/* An outbound's own keys are checked whatever [policy] says, and the
	 * other way round: "keep" in one place and drain_after in the other is
	 * two separate, valid settings. */
	etm_spec s;
	load(DIRECT "drain = \"keep\"\n[policy]\ndrain_after = 5\n", &s);
	etm_spec_free(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(the_drain_keys_parse_with_unset_defaults),
		cmocka_unit_test(bad_drain_values_are_refused_word_for_word),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
