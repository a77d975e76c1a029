/* toml.h - TOML 1.0 parser: UTF-8 text in, an immutable document tree out (no I/O). */
#ifndef ETM_TOML_H
#define ETM_TOML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Inputs larger than this are refused before parsing starts: a config file is
 * kilobytes; a megabyte-sized one is a mistake, not a config. */
#define TOML_MAX_INPUT (4u * 1024u * 1024u)

/* Deepest nesting of arrays and inline tables (and of dotted/[table] keys)
 * accepted. Every recursive step of the parser is bounded by it, so hostile
 * input cannot exhaust the stack. */
#define TOML_MAX_DEPTH 64

typedef enum toml_type {
	TOML_TABLE,
	TOML_ARRAY,
	TOML_STRING,
	TOML_INTEGER,
	TOML_FLOAT,
	TOML_BOOL,
	TOML_DATETIME,       /* offset date-time, 1979-05-27T07:32:00Z */
	TOML_DATETIME_LOCAL, /* 1979-05-27T07:32:00 */
	TOML_DATE_LOCAL,     /* 1979-05-27 */
	TOML_TIME_LOCAL,     /* 07:32:00 */
} toml_type;

/* Where a key or value sits in the input. line and col are 1-based; col counts
 * Unicode code points, not bytes. start/end are byte offsets [start, end) of
 * the whole key or value text (for a table header key: the key inside the
 * brackets; for a [table] itself: the header). */
typedef struct toml_pos {
	uint32_t line;
	uint32_t col;
	uint32_t start;
	uint32_t end;
} toml_pos;

typedef struct toml_datetime {
	int year, month, day;     /* valid when the type has a date */
	int hour, minute, second; /* valid when the type has a time */
	uint32_t nanos;           /* fractional second, in nanoseconds */
	int frac_digits;          /* digits written after '.', 0 if none (max 9 kept) */
	int offset_minutes;       /* TOML_DATETIME only; 0 for Z */
	bool offset_z;            /* offset written as Z/z rather than +00:00 */
} toml_datetime;

typedef struct toml_value toml_value;

typedef struct toml_kv {
	const char *key; /* UTF-8, NUL-terminated; may contain NUL (key_len tells) */
	size_t key_len;
	toml_pos key_pos;
	const toml_value *value;
} toml_kv;

struct toml_value {
	toml_type type;
	toml_pos pos;
	union {
		struct {
			const char *ptr; /* NUL-terminated; may contain NUL bytes (len tells) */
			size_t len;
		} str;
		int64_t integer;
		double flt;
		bool boolean;
		toml_datetime dt;
		struct {
			const toml_value *const *items;
			size_t len;
		} arr;
		struct {
			const toml_kv *items; /* in document order */
			size_t len;
		} tab;
	} u;
};

typedef struct toml_doc toml_doc;

/* Error codes returned by toml_parse. */
enum {
	TOML_OK = 0,
	TOML_ERR_SYNTAX = -1,  /* malformed input; see toml_error */
	TOML_ERR_TOO_BIG = -2, /* input longer than TOML_MAX_INPUT */
	TOML_ERR_DEPTH = -3,   /* nesting beyond TOML_MAX_DEPTH */
	TOML_ERR_NOMEM = -4,
};

typedef struct toml_error {
	uint32_t line; /* 1-based; 0 when the error has no position (size, memory) */
	uint32_t col;  /* 1-based, in code points */
	uint32_t offset;
	char msg[200]; /* text from the module's message table, without position */
} toml_error;

/* Parses len bytes of text. On success returns TOML_OK and stores a document
 * the caller owns in *out (free with toml_doc_free). On failure returns one of
 * the negative codes above, fills *err, and leaves *out NULL. The text is
 * borrowed only for the duration of the call. */
__attribute__((warn_unused_result)) int toml_parse(const char *text, size_t len, toml_doc **out,
                                                   toml_error *err);
void toml_doc_free(toml_doc *doc);

/* The root table; valid until toml_doc_free. */
const toml_value *toml_doc_root(const toml_doc *doc);

/* Lookup of a key in a table (exact byte comparison); NULL if absent or t is not a table. */
const toml_kv *toml_table_find(const toml_value *t, const char *key);

/* Name of a type as the toml-test tagged JSON writes it: "string", "integer",
 * "float", "bool", "datetime", "datetime-local", "date-local", "time-local";
 * "table" and "array" for the containers. */
const char *toml_type_name(toml_type t);

#endif
