/* toml_lex.h - state shared by the TOML parser's files, and its scalar lexers; private to src/toml. */
#ifndef ETM_TOML_LEX_H
#define ETM_TOML_LEX_H

#include "toml/toml.h"

#define TOML_WUR __attribute__((warn_unused_result))

/* Ids of every user-facing message; the texts are in one table in toml.c. A
 * message with `%s` takes the key or table name the error is about. */
typedef enum toml_msg {
	TM_TOO_BIG,
	TM_DEPTH,
	TM_NOMEM,
	TM_UTF8,
	TM_BARE_CR,
	TM_CTRL_COMMENT,
	TM_CTRL_STRING,
	TM_EXPECT_KEY,
	TM_EXPECT_EQ,
	TM_EXPECT_VALUE,
	TM_INVALID_VALUE,
	TM_NL_AFTER_VALUE,
	TM_NL_AFTER_HEADER,
	TM_HEADER_CLOSE,
	TM_AOT_CLOSE,
	TM_ARRAY_SEP,
	TM_INLINE_SEP,
	TM_INLINE_NL,
	TM_INLINE_TRAILING,
	TM_DUP_KEY,
	TM_TABLE_TWICE,
	TM_NOT_TABLE,
	TM_NOT_AOT,
	TM_STATIC_ARRAY,
	TM_INLINE_SEALED,
	TM_DOTTED_TABLE,
	TM_DOTTED_EXTEND,
	TM_ESCAPE,
	TM_UNICODE_ESCAPE,
	TM_UNTERMINATED,
	TM_NL_IN_STRING,
	TM_MULTILINE_KEY,
	TM_QUOTES,
	TM_INVALID_NUMBER,
	TM_LEADING_ZERO,
	TM_UNDERSCORE,
	TM_INT_RANGE,
	TM_FLOAT_RANGE,
	TM_INVALID_DATETIME,
	TM_DATE_RANGE,
	TM_TIME_RANGE,
	TM_OFFSET_RANGE,
	TM_COUNT
} toml_msg;

typedef struct toml_arena_chunk toml_arena_chunk;

/* Bump allocator: everything a document holds lives in its chunks, freed at
 * once by toml_doc_free. */
typedef struct toml_arena {
	toml_arena_chunk *head; /* owned: the chunk list */
	size_t used;            /* bytes taken from head */
} toml_arena;

/* One component of a dotted key, decoded. */
typedef struct toml_keypart {
	const char *s; /* arena; NUL-terminated */
	size_t len;
	size_t start, end; /* byte span in the input, quotes included */
	toml_pos pos;      /* the same span, with line and column */
} toml_keypart;

typedef struct toml_parser {
	const unsigned char *s; /* borrowed: the input */
	size_t len;
	size_t i; /* next byte to read */
	toml_arena *arena; /* borrowed: the document's */
	toml_error *err;   /* borrowed: the caller's */
	char *buf;         /* owned: scratch for decoding strings and numbers */
	size_t blen, bcap;
	/* Line/column of byte pc_off: positions are asked for in increasing
	 * order, so each is found by scanning on from the last one. */
	size_t pc_off;
	uint32_t pc_line, pc_col;
	size_t base; /* first byte after the BOM, column 1 of line 1 */
	/* The key being parsed; reused by every key, nested ones included, as a
	 * key is resolved to its table before the value after it is parsed. A key
	 * of more parts than this would nest deeper than TOML_MAX_DEPTH anyway. */
	toml_keypart path[TOML_MAX_DEPTH + 1];
	size_t npath;
} toml_parser;

/* Longest key name quoted in a message, in bytes; the rest is elided. */
#define TOML_NAME_SHOWN_MAX 64

/* toml_parser.c. toml_error_set writes message m into e (name is the key it
 * is about, if m has `%s`), without a position. */
void toml_error_set(toml_error *e, toml_msg m, const char *name, size_t nlen);

/* toml_fail fills p->err with message m (naming name, nlen bytes, if
 * m has `%s`) at byte off, and returns rc. */
TOML_WUR int toml_fail(toml_parser *p, size_t off, int rc, toml_msg m, const char *name, size_t nlen);
toml_pos toml_pos_at(toml_parser *p, size_t start);
TOML_WUR int toml_scratch_put(toml_parser *p, const void *bytes, size_t n);

/* toml_tree.c. Both return NULL when out of memory. */
TOML_WUR void *toml_arena_alloc(toml_arena *a, size_t n);
TOML_WUR char *toml_arena_strdup(toml_arena *a, const char *s, size_t n);

/* toml_lex.c. Each lexer reads at p->i, advances it past what it consumed, and
 * returns 0 or a negative TOML_ERR_* with p->err filled. */
TOML_WUR int toml_lex_utf8_check(toml_parser *p);
TOML_WUR int toml_lex_string(toml_parser *p, bool is_key, const char **out, size_t *out_len);
TOML_WUR int toml_lex_scalar(toml_parser *p, toml_value *v);
bool toml_lex_is_bare(unsigned char c);

#endif
