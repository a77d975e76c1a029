/* test_toml.c - unit tests for src/toml: positions, limits, messages, lookups. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "toml/toml.h"

static toml_doc *parse_ok(const char *text)
{
	toml_doc *doc = NULL;
	toml_error err;
	int rc = toml_parse(text, strlen(text), &doc, &err);
	if (rc != TOML_OK)
		print_error("unexpected error: line %u, column %u: %s\n", err.line, err.col, err.msg);
	assert_int_equal(rc, TOML_OK);
	assert_non_null(doc);
	return doc;
}

static const toml_value *get(const toml_value *t, const char *key)
{
	const toml_kv *kv = toml_table_find(t, key);
	assert_non_null(kv);
	return kv->value;
}

static void assert_pos(toml_pos p, uint32_t line, uint32_t col, uint32_t start, uint32_t end)
{
	assert_int_equal(p.line, line);
	assert_int_equal(p.col, col);
	assert_int_equal(p.start, start);
	assert_int_equal(p.end, end);
}

static void test_positions(void **state)
{
	(void)state;
	/* Cyrillic letters are two bytes each and one column each. */
	const char *text = "a = 1\n"
	                   "  \"ключ\" = \"знач\"\n"
	                   "[t]\n"
	                   "x.y = [1, {\"é\" = 2, b = 3}]\n";
	toml_doc *doc = parse_ok(text);
	const toml_value *root = toml_doc_root(doc);
	assert_int_equal(root->u.tab.len, 3);

	const toml_kv *a = toml_table_find(root, "a");
	assert_non_null(a);
	assert_pos(a->key_pos, 1, 1, 0, 1);
	assert_pos(a->value->pos, 1, 5, 4, 5);

	const toml_kv *k = toml_table_find(root, "ключ");
	assert_non_null(k);
	assert_pos(k->key_pos, 2, 3, 8, 18);
	assert_pos(k->value->pos, 2, 12, 21, 31);
	assert_string_equal(k->value->u.str.ptr, "знач");

	const toml_kv *t = toml_table_find(root, "t");
	assert_non_null(t);
	assert_pos(t->key_pos, 3, 2, 33, 34);
	assert_pos(t->value->pos, 3, 1, 32, 35); /* the whole [t] header */

	const toml_kv *x = toml_table_find(t->value, "x");
	assert_non_null(x);
	assert_pos(x->key_pos, 4, 1, 36, 37);
	const toml_kv *y = toml_table_find(x->value, "y");
	assert_non_null(y);
	assert_pos(y->key_pos, 4, 3, 38, 39);
	assert_pos(y->value->pos, 4, 7, 42, 64);
	const toml_value *inl = y->value->u.arr.items[1];
	assert_pos(inl->pos, 4, 11, 46, 63);
	const toml_kv *e = toml_table_find(inl, "é");
	assert_non_null(e);
	assert_pos(e->key_pos, 4, 12, 47, 51);
	assert_pos(e->value->pos, 4, 18, 54, 55);
	const toml_kv *b = toml_table_find(inl, "b");
	assert_non_null(b);
	assert_pos(b->key_pos, 4, 21, 57, 58);
	toml_doc_free(doc);
}

static void test_positions_crlf_and_bom(void **state)
{
	(void)state;
	toml_doc *doc = parse_ok("\xEF\xBB\xBF"
	                         "a = 1\r\n"
	                         "bb = 'x'\r\n");
	const toml_value *root = toml_doc_root(doc);
	const toml_kv *a = toml_table_find(root, "a");
	assert_pos(a->key_pos, 1, 1, 3, 4);
	const toml_kv *bb = toml_table_find(root, "bb");
	assert_pos(bb->key_pos, 2, 1, 10, 12);
	assert_pos(bb->value->pos, 2, 6, 15, 18);
	toml_doc_free(doc);
}

/* "a = " + n '[' + n ']' */
static char *nested_arrays(int n)
{
	char *s = malloc((size_t)n * 2 + 8);
	assert_non_null(s);
	size_t o = 0;
	memcpy(s, "a = ", 4);
	o = 4;
	for (int i = 0; i < n; i++)
		s[o++] = '[';
	for (int i = 0; i < n; i++)
		s[o++] = ']';
	s[o] = '\0';
	return s;
}

/* "a = " + n '{b = ' ... '1' ... '}' */
static char *nested_tables(int n)
{
	char *s = malloc((size_t)n * 6 + 8);
	assert_non_null(s);
	size_t o = 0;
	memcpy(s, "a = ", 4);
	o = 4;
	for (int i = 0; i < n; i++) {
		memcpy(s + o, "{b = ", 5);
		o += 5;
	}
	s[o++] = '1';
	for (int i = 0; i < n; i++)
		s[o++] = '}';
	s[o] = '\0';
	return s;
}

/* "[k.k.k...]" (header) or "k.k.k... = 1" with n parts */
static char *long_key(int n, bool header)
{
	char *s = malloc((size_t)n * 2 + 8);
	assert_non_null(s);
	size_t o = 0;
	if (header)
		s[o++] = '[';
	for (int i = 0; i < n; i++) {
		if (i)
			s[o++] = '.';
		s[o++] = 'k';
	}
	if (header) {
		s[o++] = ']';
	} else {
		memcpy(s + o, "=1", 2);
		o += 2;
	}
	s[o] = '\0';
	return s;
}

static void expect_depth_error(char *text)
{
	toml_doc *doc = (toml_doc *)1;
	toml_error err;
	assert_int_equal(toml_parse(text, strlen(text), &doc, &err), TOML_ERR_DEPTH);
	assert_null(doc);
	assert_string_equal(err.msg, "nesting deeper than 64 levels");
	assert_int_equal(err.line, 1);
	free(text);
}

static void expect_ok(char *text)
{
	toml_doc_free(parse_ok(text));
	free(text);
}

static void test_depth_limit(void **state)
{
	(void)state;
	expect_ok(nested_arrays(TOML_MAX_DEPTH));
	expect_depth_error(nested_arrays(TOML_MAX_DEPTH + 1));
	expect_ok(nested_tables(TOML_MAX_DEPTH));
	expect_depth_error(nested_tables(TOML_MAX_DEPTH + 1));
	/* A header of n parts makes n nested tables; a dotted key of n parts
	 * makes n - 1, its last part holding the value. */
	expect_ok(long_key(TOML_MAX_DEPTH, true));
	expect_depth_error(long_key(TOML_MAX_DEPTH + 1, true));
	expect_ok(long_key(TOML_MAX_DEPTH + 1, false));
	expect_depth_error(long_key(TOML_MAX_DEPTH + 2, false));
	/* Far deeper than the bound: refused, not a stack overflow. */
	expect_depth_error(nested_arrays(100000));

	/* The column of the error is the bracket that went too deep. */
	char *text = nested_arrays(TOML_MAX_DEPTH + 1);
	toml_doc *doc;
	toml_error err;
	assert_int_equal(toml_parse(text, strlen(text), &doc, &err), TOML_ERR_DEPTH);
	assert_int_equal(err.col, 5 + TOML_MAX_DEPTH);
	free(text);
}

static void test_size_limit(void **state)
{
	(void)state;
	char *text = malloc(TOML_MAX_INPUT + 1);
	assert_non_null(text);
	memset(text, '#', TOML_MAX_INPUT + 1);
	toml_doc *doc = (toml_doc *)1;
	toml_error err;
	assert_int_equal(toml_parse(text, TOML_MAX_INPUT + 1, &doc, &err), TOML_ERR_TOO_BIG);
	assert_null(doc);
	assert_int_equal(err.line, 0);
	assert_string_equal(err.msg, "input is larger than 4194304 bytes");
	/* Exactly the limit is accepted: one long comment. */
	assert_int_equal(toml_parse(text, TOML_MAX_INPUT, &doc, &err), TOML_OK);
	assert_int_equal(toml_doc_root(doc)->u.tab.len, 0);
	toml_doc_free(doc);
	free(text);
}

typedef struct err_case {
	const char *text;
	uint32_t line, col;
	const char *msg;
} err_case;

static const err_case err_cases[] = {
	{"a", 1, 2, "expected `=` after a key"},
	{"a = 1\nb 2", 2, 3, "expected `=` after a key"},
	{"a = 1\na = 2", 2, 1, "duplicate key `a`"},
	{"[a]\nb = 1\n[a]", 3, 2, "table `a` defined twice"},
	{"[a.b]\n[a.b]", 2, 4, "table `a.b` defined twice"},
	{"[x]\na.b = 1\n[x.a]", 3, 4, "table `x.a` already defined by dotted keys"},
	{"[a.b.c]\n[a]\nb.c.d = 1", 3, 3, "cannot extend table `b.c` with dotted keys"},
	{"[a.b.c]\n[a]\nb.d = 1\n[a.b]", 4, 4, "table `a.b` already defined by dotted keys"},
	{"a = {}\n[a.b]", 2, 2, "cannot extend inline table `a`"},
	{"a = {b = 1}\na.c = 2", 2, 1, "cannot extend inline table `a`"},
	{"a = []\n[[a]]", 2, 3, "cannot append to static array `a`"},
	{"[a]\n[[a]]", 2, 3, "key `a` is not an array of tables"},
	{"a = 1\na.b = 2", 2, 1, "key `a` is not a table"},
	{"s = \"\\q\"", 1, 6, "invalid escape sequence"},
	{"s = \"\\uD800\"", 1, 6, "invalid unicode escape"},
	{"s = \"abc", 1, 5, "unterminated string"},
	{"s = \"a\nb\"", 1, 7, "newline in a single-line string"},
	{"\"\"\"k\"\"\" = 1", 1, 1, "multi-line strings cannot be keys"},
	{"i = 9223372036854775808", 1, 5, "integer out of range"},
	{"i = 0x8000000000000000", 1, 5, "integer out of range"},
	{"i = 012", 1, 5, "leading zeros are not allowed"},
	{"i = 1__2", 1, 5, "underscores must sit between digits"},
	{"i = 1.", 1, 5, "invalid number"},
	{"f = 1e400", 1, 5, "float out of range"},
	{"d = 2023-02-29", 1, 5, "date out of range"},
	{"d = 24:00:00", 1, 5, "time out of range"},
	{"d = 2023-01-01T00:00:00+24:00", 1, 5, "time offset out of range"},
	{"d = 2023-01-01T00:00", 1, 5, "invalid date or time"},
	{"b = True", 1, 5, "invalid value"},
	{"b = ", 1, 5, "expected a value"},
	{"a = 1 b = 2", 1, 7, "expected a newline after a value"},
	{"[a] b = 1", 1, 5, "expected a newline after a table header"},
	{"[a", 1, 3, "expected `]` after a table name"},
	{"[[a]", 1, 4, "expected `]]` after an array of tables name"},
	{"a = [1 2]", 1, 8, "expected `,` or `]` in an array"},
	{"a = {b = 1 c = 2}", 1, 12, "expected `,` or `}` in an inline table"},
	{"a = {b = 1,\n}", 1, 12, "newline in an inline table"},
	{"a = {b = 1,}", 1, 12, "trailing comma in an inline table"},
	{"= 1", 1, 1, "expected a key"},
	{"a = 1 # \x01", 1, 9, "control character in a comment"},
	{"a = \"\x7F\"", 1, 6, "control character in a string"},
	{"a = 1\rb = 2", 1, 6, "carriage return not followed by a line feed"},
	{"a = \"\xC3\x28\"", 1, 6, "invalid UTF-8"},
	{"a = \"\xED\xA0\x80\"", 1, 6, "invalid UTF-8"},
	{"a = '''x''''''", 1, 14, "too many quotes at the end of a multi-line string"},
};

static void test_error_messages(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(err_cases) / sizeof(err_cases[0]); i++) {
		const err_case *c = &err_cases[i];
		toml_doc *doc = (toml_doc *)1;
		toml_error err;
		int rc = toml_parse(c->text, strlen(c->text), &doc, &err);
		if (rc != TOML_ERR_SYNTAX || err.line != c->line || err.col != c->col ||
		    strcmp(err.msg, c->msg) != 0)
			print_error("case %zu (%s): rc %d, line %u, column %u: %s\n", i, c->text, rc,
			            err.line, err.col, err.msg);
		assert_int_equal(rc, TOML_ERR_SYNTAX);
		assert_null(doc);
		assert_string_equal(err.msg, c->msg);
		assert_int_equal(err.line, c->line);
		assert_int_equal(err.col, c->col);
	}
}

static void test_long_key_in_message(void **state)
{
	(void)state;
	char text[500];
	char key[201];
	memset(key, 'k', 200);
	key[200] = '\0';
	int n = snprintf(text, sizeof(text), "%s = 1\n%s = 2\n", key, key);
	assert_true(n > 0 && (size_t)n < sizeof(text));
	toml_doc *doc;
	toml_error err;
	assert_int_equal(toml_parse(text, (size_t)n, &doc, &err), TOML_ERR_SYNTAX);
	char want[100];
	n = snprintf(want, sizeof(want), "duplicate key `%.64s...`", key);
	assert_true(n > 0 && (size_t)n < sizeof(want));
	assert_string_equal(err.msg, want);
}

static void test_integer_edges(void **state)
{
	(void)state;
	toml_doc *doc = parse_ok("max = 9223372036854775807\n"
	                         "min = -9223372036854775808\n"
	                         "hex = 0x7FFF_FFFF_FFFF_FFFF\n"
	                         "oct = 0o777\n"
	                         "bin = 0b1010\n"
	                         "neg0 = -0\n");
	const toml_value *root = toml_doc_root(doc);
	assert_true(get(root, "max")->u.integer == INT64_MAX);
	assert_true(get(root, "min")->u.integer == INT64_MIN);
	assert_true(get(root, "hex")->u.integer == INT64_MAX);
	assert_int_equal(get(root, "oct")->u.integer, 0777);
	assert_int_equal(get(root, "bin")->u.integer, 10);
	assert_int_equal(get(root, "neg0")->u.integer, 0);
	toml_doc_free(doc);

	static const char *const refused[] = {
		"i = 9223372036854775808", "i = -9223372036854775809", "i = 99999999999999999999999",
		"i = 0x8000000000000000",
	};
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		toml_error err;
		assert_int_equal(toml_parse(refused[i], strlen(refused[i]), &doc, &err), TOML_ERR_SYNTAX);
		assert_string_equal(err.msg, "integer out of range");
	}
}

static void test_scalars(void **state)
{
	(void)state;
	toml_doc *doc = parse_ok("s = \"a\\u0000b\\U0001F600\\t\"\n"
	                         "ml = \"\"\"\nx \\\n   y\"\"\"\"\n"
	                         "f = -1_000.5e-1\n"
	                         "dt = 1979-05-27 07:32:00.999999999999-07:30\n"
	                         "ld = 2000-02-29\n"
	                         "lt = 07:32:00.5\n"
	                         "b = false\n");
	const toml_value *root = toml_doc_root(doc);
	const toml_value *s = get(root, "s");
	assert_int_equal(s->type, TOML_STRING);
	assert_int_equal(s->u.str.len, 8);
	assert_memory_equal(s->u.str.ptr, "a\0b\xF0\x9F\x98\x80\t", 9);
	assert_string_equal(get(root, "ml")->u.str.ptr, "x y\"");
	assert_true(get(root, "f")->u.flt == -100.05);
	const toml_value *dt = get(root, "dt");
	assert_int_equal(dt->type, TOML_DATETIME);
	assert_int_equal(dt->u.dt.year, 1979);
	assert_int_equal(dt->u.dt.second, 0);
	assert_int_equal(dt->u.dt.nanos, 999999999);
	assert_int_equal(dt->u.dt.frac_digits, 9);
	assert_int_equal(dt->u.dt.offset_minutes, -450);
	assert_false(dt->u.dt.offset_z);
	assert_int_equal(get(root, "ld")->type, TOML_DATE_LOCAL);
	const toml_value *lt = get(root, "lt");
	assert_int_equal(lt->type, TOML_TIME_LOCAL);
	assert_int_equal(lt->u.dt.nanos, 500000000);
	assert_int_equal(lt->u.dt.frac_digits, 1);
	assert_int_equal(get(root, "b")->type, TOML_BOOL);
	assert_false(get(root, "b")->u.boolean);
	toml_doc_free(doc);
}

static void test_order_preserved(void **state)
{
	(void)state;
	toml_doc *doc = parse_ok("z = 1\na = 2\nm = 3\n[q]\n[b]\n[[c]]\n[q.inner]\n");
	const toml_value *root = toml_doc_root(doc);
	static const char *const want[] = {"z", "a", "m", "q", "b", "c"};
	assert_int_equal(root->u.tab.len, 6);
	for (size_t i = 0; i < 6; i++)
		assert_string_equal(root->u.tab.items[i].key, want[i]);
	toml_doc_free(doc);
}

static void test_table_find(void **state)
{
	(void)state;
	/* Enough keys for the parser's hash index; lookups and the duplicate
	 * check must agree with it. */
	char *text = malloc(20000);
	assert_non_null(text);
	size_t o = 0;
	for (int i = 0; i < 1000; i++) {
		int n = snprintf(text + o, 20000 - o, "k%d = %d\n", i, i);
		assert_true(n > 0 && (size_t)n < 20000 - o);
		o += (size_t)n;
	}
	toml_doc *doc;
	toml_error err;
	assert_int_equal(toml_parse(text, o, &doc, &err), TOML_OK);
	const toml_value *root = toml_doc_root(doc);
	assert_int_equal(root->u.tab.len, 1000);
	for (int i = 0; i < 1000; i++) {
		char key[16];
		int n = snprintf(key, sizeof(key), "k%d", i);
		assert_true(n > 0 && (size_t)n < sizeof(key));
		const toml_kv *kv = toml_table_find(root, key);
		assert_non_null(kv);
		assert_int_equal(kv->value->u.integer, i);
	}
	assert_null(toml_table_find(root, "k1000"));
	assert_null(toml_table_find(root, ""));
	assert_null(toml_table_find(get(root, "k1"), "k1")); /* not a table */
	assert_null(toml_table_find(NULL, "k1"));
	toml_doc_free(doc);

	int n = snprintf(text + o, 20000 - o, "k500 = 1\n");
	assert_true(n > 0);
	assert_int_equal(toml_parse(text, o + (size_t)n, &doc, &err), TOML_ERR_SYNTAX);
	assert_string_equal(err.msg, "duplicate key `k500`");
	assert_int_equal(err.line, 1001);
	free(text);

	/* A key holding NUL is not found by its prefix. */
	doc = parse_ok("\"a\\u0000b\" = 1\n");
	assert_null(toml_table_find(toml_doc_root(doc), "a"));
	assert_int_equal(toml_doc_root(doc)->u.tab.items[0].key_len, 3);
	toml_doc_free(doc);
}

static void test_tables_and_arrays(void **state)
{
	(void)state;
	toml_doc *doc = parse_ok("[[fruit]]\nname = 'apple'\n[fruit.physical]\ncolor = 'red'\n"
	                         "[[fruit.variety]]\nname = 'red delicious'\n"
	                         "[[fruit]]\nname = 'banana'\n"
	                         "[a.b.c]\n[a]\nx = 1\n"
	                         "[d]\ne.f = 1\ne.g = 2\n[d.e.h]\n"
	                         "[p.q.r]\n[p]\nq.s = 1\n");
	const toml_value *root = toml_doc_root(doc);
	const toml_value *fruit = get(root, "fruit");
	assert_int_equal(fruit->type, TOML_ARRAY);
	assert_int_equal(fruit->u.arr.len, 2);
	assert_string_equal(get(fruit->u.arr.items[0], "name")->u.str.ptr, "apple");
	assert_string_equal(get(get(fruit->u.arr.items[0], "physical"), "color")->u.str.ptr, "red");
	assert_int_equal(get(fruit->u.arr.items[0], "variety")->u.arr.len, 1);
	assert_string_equal(get(fruit->u.arr.items[1], "name")->u.str.ptr, "banana");
	assert_int_equal(get(get(root, "a"), "x")->u.integer, 1);
	assert_non_null(toml_table_find(get(get(root, "a"), "b"), "c"));
	const toml_value *e = get(get(root, "d"), "e");
	assert_int_equal(e->u.tab.len, 3);
	assert_int_equal(get(e, "h")->type, TOML_TABLE);
	/* q was only named by [p.q.r]: dotted keys in [p] may add to it. */
	const toml_value *q = get(get(root, "p"), "q");
	assert_int_equal(q->u.tab.len, 2);
	assert_int_equal(get(q, "s")->u.integer, 1);
	toml_doc_free(doc);
}

static void test_type_names(void **state)
{
	(void)state;
	assert_string_equal(toml_type_name(TOML_TABLE), "table");
	assert_string_equal(toml_type_name(TOML_ARRAY), "array");
	assert_string_equal(toml_type_name(TOML_STRING), "string");
	assert_string_equal(toml_type_name(TOML_INTEGER), "integer");
	assert_string_equal(toml_type_name(TOML_FLOAT), "float");
	assert_string_equal(toml_type_name(TOML_BOOL), "bool");
	assert_string_equal(toml_type_name(TOML_DATETIME), "datetime");
	assert_string_equal(toml_type_name(TOML_DATETIME_LOCAL), "datetime-local");
	assert_string_equal(toml_type_name(TOML_DATE_LOCAL), "date-local");
	assert_string_equal(toml_type_name(TOML_TIME_LOCAL), "time-local");
}

static void test_empty_input(void **state)
{
	(void)state;
	toml_doc *doc;
	toml_error err;
	assert_int_equal(toml_parse(NULL, 0, &doc, &err), TOML_OK);
	assert_int_equal(toml_doc_root(doc)->type, TOML_TABLE);
	assert_int_equal(toml_doc_root(doc)->u.tab.len, 0);
	toml_doc_free(doc);
	toml_doc_free(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_positions),
		cmocka_unit_test(test_positions_crlf_and_bom),
		cmocka_unit_test(test_depth_limit),
		cmocka_unit_test(test_size_limit),
		cmocka_unit_test(test_error_messages),
		cmocka_unit_test(test_long_key_in_message),
		cmocka_unit_test(test_integer_edges),
		cmocka_unit_test(test_scalars),
		cmocka_unit_test(test_order_preserved),
		cmocka_unit_test(test_table_find),
		cmocka_unit_test(test_tables_and_arrays),
		cmocka_unit_test(test_type_names),
		cmocka_unit_test(test_empty_input),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
