/* config.c - lowers a TOML document into an etm_spec by walking the schema tables. */
#include "app/config.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/schema.h"
#include "base/log.h"
#include "toml/toml.h"

/* The catalogue. The forms are those of serde and the toml crate that the
 * seeds quote ("unknown field `probe_intervall`, expected one of ...",
 * "invalid type: string \"30s\", expected u64", "TOML parse error at line L,
 * column C"), so an operator's searches for them keep working. */
typedef enum cfg_msg_id {
	CFG_PARSE_ERROR_AT,
	CFG_UNKNOWN_FIELD,
	CFG_UNKNOWN_FIELD_NONE,
	CFG_UNKNOWN_VARIANT,
	CFG_INVALID_TYPE,
	CFG_INVALID_VALUE,
	CFG_MISSING_FIELD,
	CFG_READ_FAILED,
	CFG_TOO_BIG,
	CFG_MSG_COUNT_,
} cfg_msg_id;

static const char *const msgs[CFG_MSG_COUNT_] = {
	[CFG_PARSE_ERROR_AT] = "TOML parse error at line %" PRIu32 ", column %" PRIu32,
	[CFG_UNKNOWN_FIELD] = "unknown field `%s`, expected %s",
	[CFG_UNKNOWN_FIELD_NONE] = "unknown field `%s`, there are no fields",
	[CFG_UNKNOWN_VARIANT] = "unknown variant `%s`, expected %s",
	[CFG_INVALID_TYPE] = "invalid type: %s, expected %s",
	[CFG_INVALID_VALUE] = "invalid value: %s, expected %s",
	[CFG_MISSING_FIELD] = "missing field `%s`",
	[CFG_READ_FAILED] = "failed to read %s: %s",
	[CFG_TOO_BIG] = "failed to read %s: larger than %u bytes",
};

/* What a value was expected to be, as serde names it. */
static const char EXPECT_STRING[] = "a string";
static const char EXPECT_BOOL[] = "a boolean";
static const char EXPECT_U64[] = "u64";
static const char EXPECT_U16[] = "u16";
static const char EXPECT_SEQ[] = "a sequence";
static const char EXPECT_TABLE[] = "a table";
static const char EXPECT_PORT[] = "a port like 443 or a range like \"1000-2000\"";
static const char EXPECT_NO_NUL[] = "a string without NUL characters";

/* Bounds the "expected one of" lists and the rendering of a bad value. */
#define LIST_TEXT_MAX 512
#define VALUE_TEXT_MAX 96

typedef struct lower {
	const char *text; /* borrowed source, for the excerpt */
	size_t len;
	char *msg;
	size_t size;
} lower;

static void vformat(char *out, size_t size, cfg_msg_id id, va_list ap)
{
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
	int n = vsnprintf(out, size, msgs[id], ap);
#pragma GCC diagnostic pop
	(void)n; /* truncation keeps the message's start, which is what matters */
}

/* Appends to buf at *at, never past size; keeps the string terminated. */
static void append(char *buf, size_t size, size_t *at, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void append(char *buf, size_t size, size_t *at, const char *fmt, ...)
{
	if (*at >= size)
		return;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf + *at, size - *at, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	*at += (size_t)n;
	if (*at >= size)
		*at = size - 1;
}

static size_t utf8_chars(const char *s, size_t n)
{
	size_t c = 0;
	for (size_t i = 0; i < n; i++)
		if (((unsigned char)s[i] & 0xC0) != 0x80)
			c++;
	return c;
}

/* Writes the toml crate's report: header, gutter, the source line, carets
 * under [start, end) clipped to that line, then the detail. */
static int report(lower *L, uint32_t line, uint32_t col, uint32_t start, uint32_t end,
                  const char *detail)
{
	size_t at = 0;
	char head[64];
	snprintf(head, sizeof head, msgs[CFG_PARSE_ERROR_AT], line, col);
	append(L->msg, L->size, &at, "%s\n", head);
	if (line == 0 || start > L->len) {
		append(L->msg, L->size, &at, "%s", detail);
		return -1;
	}
	size_t ls = start; /* the line around start */
	while (ls > 0 && L->text[ls - 1] != '\n')
		ls--;
	size_t le = start;
	while (le < L->len && L->text[le] != '\n' && L->text[le] != '\r')
		le++;
	/* On a long line show a window that keeps the error in view. */
	bool cut_front = start - ls > CONFIG_EXCERPT_MAX / 2;
	size_t ws = cut_front ? start - CONFIG_EXCERPT_MAX / 2 : ls;
	while (ws < start && ((unsigned char)L->text[ws] & 0xC0) == 0x80)
		ws++;
	size_t shown = le - ws > CONFIG_EXCERPT_MAX ? CONFIG_EXCERPT_MAX : le - ws;
	while (shown > 0 && ws + shown < le && ((unsigned char)L->text[ws + shown] & 0xC0) == 0x80)
		shown--;
	size_t s_end = end > ws + shown ? ws + shown : end;
	size_t indent = utf8_chars(L->text + ws, start - ws) + (cut_front ? 3 : 0);
	size_t carets = s_end > start ? utf8_chars(L->text + start, s_end - start) : 1;

	char num[16];
	int w = snprintf(num, sizeof num, "%" PRIu32, line);
	append(L->msg, L->size, &at, "%*s |\n%s | %s%.*s\n%*s | ", w, "", num,
	       cut_front ? "..." : "", (int)shown, L->text + ws, w, "");
	for (size_t i = 0; i < indent && at + 1 < L->size; i++)
		L->msg[at++] = ' ';
	for (size_t i = 0; i < carets && at + 1 < L->size; i++)
		L->msg[at++] = '^';
	L->msg[at] = '\0';
	append(L->msg, L->size, &at, "\n%s", detail);
	return -1;
}

static int fail_at(lower *L, const toml_pos *pos, cfg_msg_id id, ...)
{
	char detail[CONFIG_MSG_MAX];
	va_list ap;
	va_start(ap, id);
	vformat(detail, sizeof detail, id, ap);
	va_end(ap);
	return report(L, pos->line, pos->col, pos->start, pos->end, detail);
}

/* serde's list: "`a`", "`a` or `b`", "one of `a`, `b`, `c`". */
static void one_of(char *out, size_t size, const char *const *names, size_t n)
{
	size_t at = 0;
	out[0] = '\0';
	if (n > 2)
		append(out, size, &at, "one of ");
	for (size_t i = 0; i < n; i++)
		append(out, size, &at, "%s`%s`", i == 0 ? "" : n == 2 ? " or " : ", ", names[i]);
}

/* The value as serde's Unexpected shows it: string "x", integer `5`, ... */
static void describe(char *out, size_t size, const toml_value *v)
{
	size_t at = 0;
	out[0] = '\0';
	switch (v->type) {
	case TOML_STRING:
		append(out, size, &at, "string \"");
		for (size_t i = 0; i < v->u.str.len && at + 8 < size; i++) {
			unsigned char c = (unsigned char)v->u.str.ptr[i];
			if (c == '"' || c == '\\')
				append(out, size, &at, "\\%c", c);
			else if (c == '\n')
				append(out, size, &at, "\\n");
			else if (c == '\t')
				append(out, size, &at, "\\t");
			else if (c == '\r')
				append(out, size, &at, "\\r");
			else if (c < 0x20 || c == 0x7f)
				append(out, size, &at, "\\u{%x}", c);
			else
				out[at++] = (char)c, out[at] = '\0';
		}
		append(out, size, &at, "\"");
		break;
	case TOML_INTEGER:
		append(out, size, &at, "integer `%" PRId64 "`", v->u.integer);
		break;
	case TOML_FLOAT: {
		double d = v->u.flt;
		if (isnan(d))
			append(out, size, &at, "floating point `NaN`");
		else if (isinf(d))
			append(out, size, &at, "floating point `%sinf`", d < 0 ? "-" : "");
		else {
			/* the shortest text that reads back as the same double */
			char buf[40];
			for (int prec = 1; prec <= 17; prec++) {
				snprintf(buf, sizeof buf, "%.*g", prec, d);
				if (strtod(buf, NULL) == d)
					break;
			}
			append(out, size, &at, "floating point `%s`", buf);
		}
		break;
	}
	case TOML_BOOL:
		append(out, size, &at, "boolean `%s`", v->u.boolean ? "true" : "false");
		break;
	case TOML_ARRAY:
		append(out, size, &at, "sequence");
		break;
	case TOML_TABLE:
		append(out, size, &at, "map");
		break;
	default:
		append(out, size, &at, "datetime");
		break;
	}
}

static int invalid_type(lower *L, const toml_value *v, const char *expected)
{
	char got[VALUE_TEXT_MAX];
	describe(got, sizeof got, v);
	return fail_at(L, &v->pos, CFG_INVALID_TYPE, got, expected);
}

static int invalid_value(lower *L, const toml_value *v, const char *expected)
{
	char got[VALUE_TEXT_MAX];
	describe(got, sizeof got, v);
	return fail_at(L, &v->pos, CFG_INVALID_VALUE, got, expected);
}

/* A string without NUL bytes, copied; NULL with the error reported. */
static char *dup_string(lower *L, const toml_value *v)
{
	if (v->type != TOML_STRING) {
		(void)invalid_type(L, v, EXPECT_STRING);
		return NULL;
	}
	if (memchr(v->u.str.ptr, '\0', v->u.str.len)) {
		(void)invalid_value(L, v, EXPECT_NO_NUL);
		return NULL;
	}
	char *s = strdup(v->u.str.ptr);
	if (!s)
		(void)fail_at(L, &v->pos, CFG_READ_FAILED, "the configuration", strerror(ENOMEM));
	return s;
}

static int lower_enum(lower *L, const toml_value *v, const schema_variant *vars, int *out)
{
	if (v->type != TOML_STRING)
		return invalid_type(L, v, EXPECT_STRING);
	const char *names[32];
	size_t n = 0;
	for (const schema_variant *x = vars; x->name; x++) {
		if (strlen(x->name) == v->u.str.len && memcmp(x->name, v->u.str.ptr, v->u.str.len) == 0) {
			*out = x->value;
			return 0;
		}
		if (n < sizeof names / sizeof names[0])
			names[n++] = x->name;
	}
	char list[LIST_TEXT_MAX];
	one_of(list, sizeof list, names, n);
	char shown[VALUE_TEXT_MAX];
	snprintf(shown, sizeof shown, "%.*s", (int)(v->u.str.len < 64 ? v->u.str.len : 64),
	         v->u.str.ptr);
	return fail_at(L, &v->pos, CFG_UNKNOWN_VARIANT, shown, list);
}

static int lower_strlist(lower *L, const toml_value *v, etm_strlist *out)
{
	if (v->type != TOML_ARRAY)
		return invalid_type(L, v, EXPECT_SEQ);
	size_t n = v->u.arr.len;
	if (n) {
		out->items = calloc(n, sizeof *out->items);
		if (!out->items)
			return fail_at(L, &v->pos, CFG_READ_FAILED, "the configuration",
			               strerror(ENOMEM));
		out->len = n; /* zeroed slots are freed safely if an item fails */
	}
	for (size_t i = 0; i < n; i++)
		if (!(out->items[i] = dup_string(L, v->u.arr.items[i])))
			return -1;
	return 0;
}

/* One port or "a-b" range. */
static int lower_port_range(lower *L, const toml_value *v, etm_port_range *out)
{
	if (v->type == TOML_INTEGER) {
		if (v->u.integer < 0 || v->u.integer > 65535)
			return invalid_value(L, v, EXPECT_PORT);
		out->first = out->last = (uint16_t)v->u.integer;
		return 0;
	}
	if (v->type != TOML_STRING)
		return invalid_type(L, v, EXPECT_PORT);
	unsigned long a, b;
	int used = 0;
	const char *s = v->u.str.ptr;
	if (v->u.str.len > 11 || strspn(s, "0123456789-") != v->u.str.len)
		return invalid_value(L, v, EXPECT_PORT);
	if (sscanf(s, "%5lu-%5lu%n", &a, &b, &used) == 2 && (size_t)used == v->u.str.len) {
		/* a range */
	} else if (sscanf(s, "%5lu%n", &a, &used) == 1 && (size_t)used == v->u.str.len) {
		b = a;
	} else {
		return invalid_value(L, v, EXPECT_PORT);
	}
	if (a > 65535 || b > 65535 || a > b)
		return invalid_value(L, v, EXPECT_PORT);
	out->first = (uint16_t)a;
	out->last = (uint16_t)b;
	return 0;
}

static int lower_ports(lower *L, const toml_value *v, etm_port_list *out)
{
	const toml_value *const *items = &v;
	size_t n = 1;
	if (v->type == TOML_ARRAY) {
		items = v->u.arr.items;
		n = v->u.arr.len;
	}
	if (n == 0)
		return 0;
	out->items = calloc(n, sizeof *out->items);
	if (!out->items)
		return fail_at(L, &v->pos, CFG_READ_FAILED, "the configuration", strerror(ENOMEM));
	out->len = n;
	for (size_t i = 0; i < n; i++)
		if (lower_port_range(L, items[i], &out->items[i]))
			return -1;
	return 0;
}

static const schema_variant net_names[] = {
	{"tcp", ETM_RULE_NET_TCP},
	{"udp", ETM_RULE_NET_UDP},
	{NULL, 0},
};

static int lower_networks(lower *L, const toml_value *v, unsigned *out)
{
	const toml_value *const *items = &v;
	size_t n = 1;
	if (v->type == TOML_ARRAY) {
		items = v->u.arr.items;
		n = v->u.arr.len;
	}
	for (size_t i = 0; i < n; i++) {
		int bit;
		if (lower_enum(L, items[i], net_names, &bit))
			return -1;
		*out |= (unsigned)bit;
	}
	return 0;
}

static int lower_table(lower *L, const toml_value *t, const schema_table *s, char *base);

static void apply_defaults(const schema_table *s, char *base)
{
	for (size_t i = 0; i < s->len; i++) {
		const schema_field *f = &s->fields[i];
		char *at = base + f->offset;
		switch (f->kind) {
		case SK_BOOL:
			*(bool *)at = f->def != 0;
			break;
		case SK_U64:
			*(uint64_t *)at = (uint64_t)f->def;
			break;
		case SK_ENUM:
			*(int *)at = (int)f->def;
			break;
		case SK_TABLE:
			apply_defaults(f->sub, at);
			break;
		default:
			break;
		}
	}
}

static int lower_table_array(lower *L, const schema_field *f, const toml_value *v, char *base)
{
	if (v->type != TOML_ARRAY)
		return invalid_type(L, v, EXPECT_SEQ);
	size_t n = v->u.arr.len;
	char *items = NULL;
	if (n) {
		items = calloc(n, f->elem_size);
		if (!items)
			return fail_at(L, &v->pos, CFG_READ_FAILED, "the configuration",
			               strerror(ENOMEM));
	}
	*(void **)(base + f->offset) = items;
	*(size_t *)(base + f->aux_offset) = n; /* zeroed elements free safely */
	for (size_t i = 0; i < n; i++) {
		const toml_value *e = v->u.arr.items[i];
		if (e->type != TOML_TABLE)
			return invalid_type(L, e, EXPECT_TABLE);
		if (lower_table(L, e, f->sub, items + i * f->elem_size))
			return -1;
	}
	return 0;
}

static int lower_field(lower *L, const schema_field *f, const toml_value *v, char *base)
{
	char *at = base + f->offset;
	switch (f->kind) {
	case SK_STRING:
		return (*(char **)at = dup_string(L, v)) ? 0 : -1;
	case SK_BOOL:
		if (v->type != TOML_BOOL)
			return invalid_type(L, v, EXPECT_BOOL);
		*(bool *)at = v->u.boolean;
		return 0;
	case SK_U64:
		if (v->type != TOML_INTEGER)
			return invalid_type(L, v, EXPECT_U64);
		if (v->u.integer < 0)
			return invalid_value(L, v, EXPECT_U64);
		*(uint64_t *)at = (uint64_t)v->u.integer;
		if (f->aux_offset)
			*(bool *)(base + f->aux_offset) = true;
		return 0;
	case SK_PORT:
		if (v->type != TOML_INTEGER)
			return invalid_type(L, v, EXPECT_U16);
		if (v->u.integer < 0 || v->u.integer > 65535)
			return invalid_value(L, v, EXPECT_U16);
		*(uint16_t *)at = (uint16_t)v->u.integer;
		if (f->aux_offset)
			*(bool *)(base + f->aux_offset) = true;
		return 0;
	case SK_STRLIST:
		return lower_strlist(L, v, (etm_strlist *)at);
	case SK_ENUM:
		return lower_enum(L, v, f->variants, (int *)at);
	case SK_PORTS:
		return lower_ports(L, v, (etm_port_list *)at);
	case SK_NETWORKS:
		return lower_networks(L, v, (unsigned *)at);
	case SK_TABLE:
		if (v->type != TOML_TABLE)
			return invalid_type(L, v, EXPECT_TABLE);
		if (f->aux_offset)
			*(bool *)(base + f->aux_offset) = true;
		return lower_table(L, v, f->sub, at);
	case SK_TABLE_ARRAY:
		return lower_table_array(L, f, v, base);
	case SK_SETTINGS:
		break; /* lowered by lower_table once the protocol is known */
	}
	return 0;
}

static int unknown_field(lower *L, const toml_kv *kv, const schema_table *s)
{
	char key[VALUE_TEXT_MAX];
	snprintf(key, sizeof key, "%.*s", (int)(kv->key_len < 64 ? kv->key_len : 64), kv->key);
	if (s->len == 0)
		return fail_at(L, &kv->key_pos, CFG_UNKNOWN_FIELD_NONE, key);
	const char *names[32];
	size_t n = 0;
	for (size_t i = 0; i < s->len && n < sizeof names / sizeof names[0]; i++)
		names[n++] = s->fields[i].name;
	char list[LIST_TEXT_MAX];
	one_of(list, sizeof list, names, n);
	return fail_at(L, &kv->key_pos, CFG_UNKNOWN_FIELD, key, list);
}

/* The fields of a table are lowered in document order, as serde does, so the
 * first mistake in the file is the one reported; missing fields come after. */
static int lower_table(lower *L, const toml_value *t, const schema_table *s, char *base)
{
	uint64_t seen = 0; /* bit i: field i was present; tables have < 64 fields */
	const toml_kv *settings = NULL;
	const schema_field *settings_field = NULL;

	apply_defaults(s, base);
	for (size_t k = 0; k < t->u.tab.len; k++) {
		const toml_kv *kv = &t->u.tab.items[k];
		size_t i = 0;
		while (i < s->len && !(strlen(s->fields[i].name) == kv->key_len &&
		                       memcmp(s->fields[i].name, kv->key, kv->key_len) == 0))
			i++;
		if (i == s->len)
			return unknown_field(L, kv, s);
		seen |= 1ull << i;
		if (s->fields[i].kind == SK_SETTINGS) {
			settings = kv;
			settings_field = &s->fields[i];
			continue;
		}
		if (lower_field(L, &s->fields[i], kv->value, base))
			return -1;
	}
	for (size_t i = 0; i < s->len; i++)
		if (s->fields[i].required && !(seen & (1ull << i)))
			return fail_at(L, &t->pos, CFG_MISSING_FIELD, s->fields[i].name);

	for (size_t i = 0; i < s->len; i++) {
		const schema_field *f = &s->fields[i];
		if (f->kind != SK_SETTINGS)
			continue;
		etm_protocol p = *(etm_protocol *)(base + f->aux_offset);
		const schema_table *st = schema_settings(p, f->def != 0);
		if (st)
			apply_defaults(st, base + f->offset);
		if (settings_field != f)
			continue;
		if (settings->value->type != TOML_TABLE)
			return invalid_type(L, settings->value, EXPECT_TABLE);
		static const schema_table none = {.title = "", .fields = NULL, .len = 0};
		if (lower_table(L, settings->value, st ? st : &none, base + f->offset))
			return -1;
	}
	return 0;
}

int config_load(const char *text, size_t len, etm_spec *spec, char *msg, size_t msg_size)
{
	lower L = {.text = text, .len = len, .msg = msg, .size = msg_size};
	toml_doc *doc = NULL;
	toml_error terr;
	*spec = (etm_spec){0};
	if (msg_size)
		msg[0] = '\0';

	int rc = toml_parse(text, len, &doc, &terr);
	if (rc != TOML_OK) {
		uint32_t start = terr.offset;
		return report(&L, terr.line, terr.col, start, start + 1, terr.msg);
	}
	rc = lower_table(&L, toml_doc_root(doc), &schema_root, (char *)spec);
	toml_doc_free(doc);
	if (rc == 0)
		rc = etm_spec_check(spec, msg, msg_size);
	if (rc)
		etm_spec_free(spec);
	return rc;
}

int config_load_file(const char *path, etm_spec *spec, char *msg, size_t msg_size)
{
	*spec = (etm_spec){0};
	FILE *f = fopen(path, "rb");
	if (!f) {
		snprintf(msg, msg_size, msgs[CFG_READ_FAILED], path, strerror(errno));
		return -1;
	}
	/* One byte past the limit tells "too big" from "exactly the limit". */
	size_t cap = TOML_MAX_INPUT + 1;
	char *buf = malloc(cap);
	if (!buf) {
		fclose(f);
		snprintf(msg, msg_size, msgs[CFG_READ_FAILED], path, strerror(ENOMEM));
		return -1;
	}
	size_t n = fread(buf, 1, cap, f);
	int err = ferror(f) ? errno : 0;
	fclose(f);
	int rc;
	if (err) {
		snprintf(msg, msg_size, msgs[CFG_READ_FAILED], path, strerror(err));
		rc = -1;
	} else if (n == cap) {
		snprintf(msg, msg_size, msgs[CFG_TOO_BIG], path, TOML_MAX_INPUT);
		rc = -1;
	} else {
		rc = config_load(buf, n, spec, msg, msg_size);
	}
	free(buf);
	return rc;
}

/* Files below src/app not yet moved off the config's levels still compare
 * log_get_level() with ETM_LOG_*: keep the two in step until they are. */
_Static_assert((int)ETM_LOG_ERROR == LOG_LEVEL_ERROR && (int)ETM_LOG_WARN == LOG_LEVEL_WARN &&
                   (int)ETM_LOG_INFO == LOG_LEVEL_INFO && (int)ETM_LOG_DEBUG == LOG_LEVEL_DEBUG &&
                   (int)ETM_LOG_TRACE == LOG_LEVEL_TRACE,
               "log.h levels follow etm_log_level");

int config_log_format(etm_log_format f)
{
	return f == ETM_LOG_FORMAT_JSON ? LOG_FORMAT_JSON : LOG_FORMAT_TEXT;
}

int config_log_level(etm_log_level l)
{
	switch (l) {
	case ETM_LOG_ERROR:
		return LOG_LEVEL_ERROR;
	case ETM_LOG_WARN:
		return LOG_LEVEL_WARN;
	case ETM_LOG_INFO:
		return LOG_LEVEL_INFO;
	case ETM_LOG_DEBUG:
		return LOG_LEVEL_DEBUG;
	case ETM_LOG_TRACE:
		return LOG_LEVEL_TRACE;
	}
	return LOG_LEVEL_INFO;
}
