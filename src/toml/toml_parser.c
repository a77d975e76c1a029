/* toml_parser.c - what the parser's parts share: the message table, errors
 * with their position, and the scratch buffer. It calls none of them. */
#include "toml/toml.h"
#include "toml/toml_lex.h"

#include <stdio.h>
#include <string.h>

#include "base/vec.h"

/* Every user-facing text of the module, indexed by toml_msg. */
static const char *const messages[TM_COUNT] = {
	[TM_TOO_BIG] = "input is larger than %u bytes",
	[TM_DEPTH] = "nesting deeper than %u levels",
	[TM_NOMEM] = "out of memory",
	[TM_UTF8] = "invalid UTF-8",
	[TM_BARE_CR] = "carriage return not followed by a line feed",
	[TM_CTRL_COMMENT] = "control character in a comment",
	[TM_CTRL_STRING] = "control character in a string",
	[TM_EXPECT_KEY] = "expected a key",
	[TM_EXPECT_EQ] = "expected `=` after a key",
	[TM_EXPECT_VALUE] = "expected a value",
	[TM_INVALID_VALUE] = "invalid value",
	[TM_NL_AFTER_VALUE] = "expected a newline after a value",
	[TM_NL_AFTER_HEADER] = "expected a newline after a table header",
	[TM_HEADER_CLOSE] = "expected `]` after a table name",
	[TM_AOT_CLOSE] = "expected `]]` after an array of tables name",
	[TM_ARRAY_SEP] = "expected `,` or `]` in an array",
	[TM_INLINE_SEP] = "expected `,` or `}` in an inline table",
	[TM_INLINE_NL] = "newline in an inline table",
	[TM_INLINE_TRAILING] = "trailing comma in an inline table",
	[TM_DUP_KEY] = "duplicate key `%s`",
	[TM_TABLE_TWICE] = "table `%s` defined twice",
	[TM_NOT_TABLE] = "key `%s` is not a table",
	[TM_NOT_AOT] = "key `%s` is not an array of tables",
	[TM_STATIC_ARRAY] = "cannot append to static array `%s`",
	[TM_INLINE_SEALED] = "cannot extend inline table `%s`",
	[TM_DOTTED_TABLE] = "table `%s` already defined by dotted keys",
	[TM_DOTTED_EXTEND] = "cannot extend table `%s` with dotted keys",
	[TM_ESCAPE] = "invalid escape sequence",
	[TM_UNICODE_ESCAPE] = "invalid unicode escape",
	[TM_UNTERMINATED] = "unterminated string",
	[TM_NL_IN_STRING] = "newline in a single-line string",
	[TM_MULTILINE_KEY] = "multi-line strings cannot be keys",
	[TM_QUOTES] = "too many quotes at the end of a multi-line string",
	[TM_INVALID_NUMBER] = "invalid number",
	[TM_LEADING_ZERO] = "leading zeros are not allowed",
	[TM_UNDERSCORE] = "underscores must sit between digits",
	[TM_INT_RANGE] = "integer out of range",
	[TM_FLOAT_RANGE] = "float out of range",
	[TM_INVALID_DATETIME] = "invalid date or time",
	[TM_DATE_RANGE] = "date out of range",
	[TM_TIME_RANGE] = "time out of range",
	[TM_OFFSET_RANGE] = "time offset out of range",
};

int toml_scratch_put(toml_parser *p, const void *bytes, size_t n)
{
	if (vec_reserve(&p->buf, &p->bcap, p->blen, n) < 0)
		return toml_fail(p, 0, TOML_ERR_NOMEM, TM_NOMEM, NULL, 0);
	memcpy(p->buf + p->blen, bytes, n);
	p->blen += n;
	return 0;
}

toml_pos toml_pos_at(toml_parser *p, size_t start)
{
	if (start < p->pc_off) {
		p->pc_off = p->base;
		p->pc_line = 1;
		p->pc_col = 1;
	}
	for (size_t i = p->pc_off; i < start && i < p->len; i++) {
		unsigned char c = p->s[i];
		if (c == '\n') {
			p->pc_line++;
			p->pc_col = 1;
		} else if ((c & 0xC0) != 0x80) {
			p->pc_col++;
		}
	}
	p->pc_off = start;
	return (toml_pos){p->pc_line, p->pc_col, (uint32_t)start, (uint32_t)start};
}

/* Writes name into out (size cap) for a message: bounded, control bytes shown
 * as '?', cut on a code point boundary. */
static void show_name(char *out, size_t cap, const char *name, size_t n)
{
	size_t o = 0;
	size_t lim = n < TOML_NAME_SHOWN_MAX ? n : TOML_NAME_SHOWN_MAX;
	while (lim < n && lim > 0 && ((unsigned char)name[lim] & 0xC0) == 0x80)
		lim--;
	for (size_t i = 0; i < lim && o + 1 < cap; i++) {
		unsigned char c = (unsigned char)name[i];
		out[o++] = (c < 0x20 || c == 0x7F) ? '?' : (char)c;
	}
	if (lim < n && o + 4 < cap) {
		memcpy(out + o, "...", 3);
		o += 3;
	}
	out[o] = '\0';
}

/* Writes message m into e->msg; name is the key it is about, if m has `%s`. */
void toml_error_set(toml_error *e, toml_msg m, const char *name, size_t nlen)
{
	char shown[TOML_NAME_SHOWN_MAX + 8];
	int w;
	if (m == TM_TOO_BIG)
		w = snprintf(e->msg, sizeof(e->msg), messages[m], TOML_MAX_INPUT);
	else if (m == TM_DEPTH)
		w = snprintf(e->msg, sizeof(e->msg), messages[m], (unsigned)TOML_MAX_DEPTH);
	else if (name) {
		show_name(shown, sizeof(shown), name, nlen);
		w = snprintf(e->msg, sizeof(e->msg), messages[m], shown);
	} else
		w = snprintf(e->msg, sizeof(e->msg), "%s", messages[m]);
	if (w < 0)
		e->msg[0] = '\0';
	/* w >= sizeof(e->msg) cannot happen: texts and names are bounded well
	 * below it, and a cut message would still be NUL-terminated. */
}

int toml_fail(toml_parser *p, size_t off, int rc, toml_msg m, const char *name, size_t nlen)
{
	toml_error *e = p->err;
	if (rc == TOML_ERR_NOMEM) {
		e->line = e->col = e->offset = 0;
	} else {
		toml_pos at = toml_pos_at(p, off);
		e->line = at.line;
		e->col = at.col;
		e->offset = (uint32_t)off;
	}
	toml_error_set(e, m, name, nlen);
	return rc;
}
