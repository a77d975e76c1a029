/* toml-decode.c - toml-test decoder: TOML on stdin, tagged JSON on stdout, exit 1 on a parse error. */
#include "toml/toml.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void put_json_string(FILE *out, const char *s, size_t n)
{
	fputc('"', out);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"' || c == '\\')
			fprintf(out, "\\%c", c);
		else if (c < 0x20 || c == 0x7F)
			fprintf(out, "\\u%04x", c);
		else
			fputc(c, out);
	}
	fputc('"', out);
}

/* The shortest of %.15g, %.16g, %.17g that reads back as the same double:
 * "0.1" rather than "0.10000000000000001". */
static void format_float(char *buf, size_t cap, double d)
{
	if (isnan(d)) {
		snprintf(buf, cap, "nan");
		return;
	}
	if (isinf(d)) {
		snprintf(buf, cap, "%s", d < 0 ? "-inf" : "inf");
		return;
	}
	for (int prec = 15; prec <= 17; prec++) {
		snprintf(buf, cap, "%.*g", prec, d);
		if (strtod(buf, NULL) == d)
			return;
	}
}

static void format_datetime(char *buf, size_t cap, const toml_value *v)
{
	const toml_datetime *dt = &v->u.dt;
	size_t o = 0;
	int w = 0;
	if (v->type != TOML_TIME_LOCAL) {
		w = snprintf(buf, cap, "%04d-%02d-%02d", dt->year, dt->month, dt->day);
		o += w > 0 ? (size_t)w : 0;
		if (v->type == TOML_DATE_LOCAL)
			return;
		if (o < cap)
			buf[o++] = 'T';
	}
	w = snprintf(buf + o, cap - o, "%02d:%02d:%02d", dt->hour, dt->minute, dt->second);
	o += w > 0 ? (size_t)w : 0;
	if (dt->frac_digits > 0) {
		uint32_t frac = dt->nanos;
		for (int z = dt->frac_digits; z < 9; z++)
			frac /= 10;
		w = snprintf(buf + o, cap - o, ".%0*" PRIu32, dt->frac_digits, frac);
		o += w > 0 ? (size_t)w : 0;
	}
	if (v->type == TOML_DATETIME) {
		if (dt->offset_z) {
			snprintf(buf + o, cap - o, "Z");
		} else {
			int off = dt->offset_minutes;
			snprintf(buf + o, cap - o, "%c%02d:%02d", off < 0 ? '-' : '+', abs(off) / 60,
			         abs(off) % 60);
		}
	}
}

/* Recursion is bounded by TOML_MAX_DEPTH: the parser refuses deeper documents. */
static void put_value(FILE *out, const toml_value *v)
{
	char buf[64];
	switch (v->type) {
	case TOML_TABLE:
		fputc('{', out);
		for (size_t i = 0; i < v->u.tab.len; i++) {
			const toml_kv *kv = &v->u.tab.items[i];
			if (i)
				fputc(',', out);
			put_json_string(out, kv->key, kv->key_len);
			fputc(':', out);
			put_value(out, kv->value);
		}
		fputc('}', out);
		return;
	case TOML_ARRAY:
		fputc('[', out);
		for (size_t i = 0; i < v->u.arr.len; i++) {
			if (i)
				fputc(',', out);
			put_value(out, v->u.arr.items[i]);
		}
		fputc(']', out);
		return;
	case TOML_STRING:
		fputs("{\"type\":\"string\",\"value\":", out);
		put_json_string(out, v->u.str.ptr, v->u.str.len);
		fputc('}', out);
		return;
	case TOML_INTEGER:
		snprintf(buf, sizeof(buf), "%" PRId64, v->u.integer);
		break;
	case TOML_FLOAT:
		format_float(buf, sizeof(buf), v->u.flt);
		break;
	case TOML_BOOL:
		snprintf(buf, sizeof(buf), "%s", v->u.boolean ? "true" : "false");
		break;
	case TOML_DATETIME:
	case TOML_DATETIME_LOCAL:
	case TOML_DATE_LOCAL:
	case TOML_TIME_LOCAL:
		format_datetime(buf, sizeof(buf), v);
		break;
	}
	fprintf(out, "{\"type\":\"%s\",\"value\":\"%s\"}", toml_type_name(v->type), buf);
}

int main(void)
{
	/* Read one byte past the limit so toml_parse can refuse an oversized input. */
	size_t cap = TOML_MAX_INPUT + 1;
	char *text = malloc(cap);
	if (!text) {
		fprintf(stderr, "toml-decode: out of memory\n");
		return 2;
	}
	size_t len = 0, n;
	while (len < cap && (n = fread(text + len, 1, cap - len, stdin)) > 0)
		len += n;
	if (ferror(stdin)) {
		fprintf(stderr, "toml-decode: cannot read standard input\n");
		free(text);
		return 2;
	}
	toml_doc *doc;
	toml_error err;
	int rc = toml_parse(text, len, &doc, &err);
	free(text);
	if (rc != TOML_OK) {
		if (err.line)
			fprintf(stderr, "toml-decode: line %" PRIu32 ", column %" PRIu32 ": %s\n", err.line,
			        err.col, err.msg);
		else
			fprintf(stderr, "toml-decode: %s\n", err.msg);
		return 1;
	}
	put_value(stdout, toml_doc_root(doc));
	fputc('\n', stdout);
	toml_doc_free(doc);
	return fflush(stdout) == 0 ? 0 : 2;
}
