/* test_json.c - the JSON string escaper (RFC 8259 section 7), table-driven, and its cut. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/json.h"

static void escapes(void **state)
{
	(void)state;
	static const struct {
		const char *in;
		size_t len; /* 0: strlen(in) */
		const char *want;
	} cases[] = {
		{"plain text", 0, "plain text"},
		{"", 0, ""},
		{"say \"hi\"", 0, "say \\\"hi\\\""},
		{"C:\\dir\\", 0, "C:\\\\dir\\\\"},
		{"a\nb\tc\rd", 0, "a\\u000ab\\u0009c\\u000dd"},
		{"\x01\x1f\x7f", 0, "\\u0001\\u001f\x7f"}, /* DEL needs no escape */
		{"nul\0after", 9, "nul\\u0000after"},
		{"/slash", 0, "/slash"},
		/* UTF-8 passes through: 2, 3 and 4 bytes */
		{"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 0, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"},
		/* not UTF-8: a lone continuation, a cut sequence, an overlong
		 * form, a surrogate, beyond U+10FFFF, 0xff */
		{"a\x80z", 0, "a\\ufffdz"},
		{"\xe2\x82", 0, "\\ufffd\\ufffd"},
		{"\xc0\xaf", 0, "\\ufffd\\ufffd"},
		{"\xed\xa0\x80", 0, "\\ufffd\\ufffd\\ufffd"},
		{"\xf4\x90\x80\x80", 0, "\\ufffd\\ufffd\\ufffd\\ufffd"},
		{"\xff", 0, "\\ufffd"},
	};
	char out[128];
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		size_t len = cases[i].len ? cases[i].len : strlen(cases[i].in);
		size_t n = json_escape(out, sizeof out, cases[i].in, len);
		assert_string_equal(out, cases[i].want);
		assert_int_equal(n, strlen(cases[i].want));
	}
}

/* Only whole characters: never half an escape or half a UTF-8 sequence. */
static void cut_at_boundaries(void **state)
{
	(void)state;
	char out[8];
	assert_int_equal(json_escape(out, 0, "x", 1), 0);
	assert_int_equal(json_escape(out, 1, "x", 1), 0);
	assert_string_equal(out, "");
	assert_int_equal(json_escape(out, 4, "abcdef", 6), 3);
	assert_string_equal(out, "abc");
	/* "a" + \u000a needs 7 + NUL */
	assert_int_equal(json_escape(out, 7, "a\nb", 3), 1);
	assert_string_equal(out, "a");
	assert_int_equal(json_escape(out, 8, "a\nb", 3), 7);
	assert_string_equal(out, "a\\u000a");
	/* the euro sign's three bytes do not fit after "ab" in 5 */
	assert_int_equal(json_escape(out, 5, "ab\xe2\x82\xac", 5), 2);
	assert_string_equal(out, "ab");
	assert_int_equal(json_escape(out, 3, "\"q", 2), 2);
	assert_string_equal(out, "\\\"");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(escapes),
		cmocka_unit_test(cut_at_boundaries),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
