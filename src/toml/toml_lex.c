/* toml_lex.c - TOML 1.0 scalar lexers: UTF-8 check, strings, numbers, booleans, date-times. */
#include "toml/toml_lex.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool is_digit(unsigned char c)
{
	return c >= '0' && c <= '9';
}

static bool is_hex(unsigned char c)
{
	return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static bool is_oct(unsigned char c)
{
	return c >= '0' && c <= '7';
}

static bool is_bin(unsigned char c)
{
	return c == '0' || c == '1';
}

static int hex_val(unsigned char c)
{
	if (is_digit(c))
		return c - '0';
	return (c | 0x20) - 'a' + 10;
}

bool toml_lex_is_bare(unsigned char c)
{
	return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '-';
}

/* Unicode 15, table 3-7: the well-formed byte sequences. Overlongs,
 * surrogates and code points past U+10FFFF are refused. */
int toml_lex_utf8_check(toml_parser *p)
{
	const unsigned char *s = p->s;
	size_t n = p->len;
	for (size_t i = 0; i < n;) {
		unsigned char b = s[i];
		if (b < 0x80) {
			i++;
			continue;
		}
		unsigned char lo = 0x80, hi = 0xBF;
		size_t more;
		if (b >= 0xC2 && b <= 0xDF) {
			more = 1;
		} else if (b >= 0xE0 && b <= 0xEF) {
			more = 2;
			if (b == 0xE0)
				lo = 0xA0;
			else if (b == 0xED)
				hi = 0x9F;
		} else if (b >= 0xF0 && b <= 0xF4) {
			more = 3;
			if (b == 0xF0)
				lo = 0x90;
			else if (b == 0xF4)
				hi = 0x8F;
		} else {
			return toml_fail(p, i, TOML_ERR_SYNTAX, TM_UTF8, NULL, 0);
		}
		if (n - i <= more || s[i + 1] < lo || s[i + 1] > hi)
			return toml_fail(p, i, TOML_ERR_SYNTAX, TM_UTF8, NULL, 0);
		for (size_t k = 2; k <= more; k++)
			if ((s[i + k] & 0xC0) != 0x80)
				return toml_fail(p, i, TOML_ERR_SYNTAX, TM_UTF8, NULL, 0);
		i += more + 1;
	}
	return 0;
}

static int put_byte(toml_parser *p, unsigned char c)
{
	return toml_scratch_put(p, &c, 1);
}

static int put_utf8(toml_parser *p, uint32_t cp)
{
	unsigned char b[4];
	size_t n;
	if (cp < 0x80) {
		b[0] = (unsigned char)cp;
		n = 1;
	} else if (cp < 0x800) {
		b[0] = (unsigned char)(0xC0 | (cp >> 6));
		b[1] = (unsigned char)(0x80 | (cp & 0x3F));
		n = 2;
	} else if (cp < 0x10000) {
		b[0] = (unsigned char)(0xE0 | (cp >> 12));
		b[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
		b[2] = (unsigned char)(0x80 | (cp & 0x3F));
		n = 3;
	} else {
		b[0] = (unsigned char)(0xF0 | (cp >> 18));
		b[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
		b[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
		b[3] = (unsigned char)(0x80 | (cp & 0x3F));
		n = 4;
	}
	return toml_scratch_put(p, b, n);
}

/* Spaces and tabs, then one newline: the "line ending backslash" of a
 * multi-line basic string. Returns the bytes that run covers, 0 if it is not
 * one. */
static size_t ws_to_newline(const toml_parser *p, size_t i)
{
	size_t j = i;
	while (j < p->len && (p->s[j] == ' ' || p->s[j] == '\t'))
		j++;
	if (j < p->len && p->s[j] == '\n')
		return j + 1 - i;
	if (j + 1 < p->len && p->s[j] == '\r' && p->s[j + 1] == '\n')
		return j + 2 - i;
	return 0;
}

/* An escape at p->i (the backslash), toml.io/en/v1.0.0#string. */
static TOML_WUR int escape(toml_parser *p, bool multi)
{
	size_t at = p->i;
	if (p->i + 1 >= p->len)
		return toml_fail(p, at, TOML_ERR_SYNTAX, TM_ESCAPE, NULL, 0);
	unsigned char e = p->s[p->i + 1];
	unsigned char plain = 0;
	switch (e) {
	case 'b': plain = '\b'; break;
	case 't': plain = '\t'; break;
	case 'n': plain = '\n'; break;
	case 'f': plain = '\f'; break;
	case 'r': plain = '\r'; break;
	case '"': plain = '"'; break;
	case '\\': plain = '\\'; break;
	default: break;
	}
	if (plain) {
		p->i += 2;
		return put_byte(p, plain);
	}
	if (e == 'u' || e == 'U') {
		size_t nd = e == 'u' ? 4 : 8;
		if (p->len - (p->i + 2) < nd)
			return toml_fail(p, at, TOML_ERR_SYNTAX, TM_UNICODE_ESCAPE, NULL, 0);
		uint32_t cp = 0;
		for (size_t k = 0; k < nd; k++) {
			unsigned char c = p->s[p->i + 2 + k];
			if (!is_hex(c))
				return toml_fail(p, at, TOML_ERR_SYNTAX, TM_UNICODE_ESCAPE, NULL, 0);
			if (cp > 0x10FFFF) /* keep shifting from overflowing */
				continue;
			cp = (cp << 4) | (uint32_t)hex_val(c);
		}
		if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
			return toml_fail(p, at, TOML_ERR_SYNTAX, TM_UNICODE_ESCAPE, NULL, 0);
		p->i += 2 + nd;
		return put_utf8(p, cp);
	}
	if (multi) {
		size_t run = ws_to_newline(p, p->i + 1);
		if (run) {
			p->i += 1 + run;
			for (;;) {
				unsigned char c = p->i < p->len ? p->s[p->i] : 0;
				if (c == ' ' || c == '\t' || c == '\n')
					p->i++;
				else if (c == '\r' && p->i + 1 < p->len && p->s[p->i + 1] == '\n')
					p->i += 2;
				else
					return 0;
			}
		}
	}
	return toml_fail(p, at, TOML_ERR_SYNTAX, TM_ESCAPE, NULL, 0);
}

/* A basic or literal string, single- or multi-line, starting at its quote;
 * decoded into the arena. Multi-line strings keep newlines as LF. */
int toml_lex_string(toml_parser *p, bool is_key, const char **out, size_t *out_len)
{
	size_t start = p->i;
	unsigned char q = p->s[p->i];
	bool multi = p->len - p->i >= 3 && p->s[p->i + 1] == q && p->s[p->i + 2] == q;
	if (multi && is_key)
		return toml_fail(p, start, TOML_ERR_SYNTAX, TM_MULTILINE_KEY, NULL, 0);
	p->blen = 0;
	if (multi) {
		p->i += 3;
		/* A newline right after the opening delimiter is trimmed. */
		if (p->i < p->len && p->s[p->i] == '\n')
			p->i++;
		else if (p->len - p->i >= 2 && p->s[p->i] == '\r' && p->s[p->i + 1] == '\n')
			p->i += 2;
	} else {
		p->i++;
	}
	int rc;
	for (;;) {
		if (p->i >= p->len)
			return toml_fail(p, start, TOML_ERR_SYNTAX, TM_UNTERMINATED, NULL, 0);
		unsigned char c = p->s[p->i];
		if (c == q) {
			if (!multi) {
				p->i++;
				break;
			}
			size_t n = 0;
			while (p->i + n < p->len && p->s[p->i + n] == q)
				n++;
			if (n >= 3) {
				/* Up to two quotes may sit right before the closing three. */
				if (n > 5)
					return toml_fail(p, p->i + 5, TOML_ERR_SYNTAX, TM_QUOTES, NULL, 0);
				for (size_t k = 0; k < n - 3; k++)
					if ((rc = put_byte(p, q)) < 0)
						return rc;
				p->i += n;
				break;
			}
			for (size_t k = 0; k < n; k++)
				if ((rc = put_byte(p, q)) < 0)
					return rc;
			p->i += n;
			continue;
		}
		if (c == '\\' && q == '"') {
			if ((rc = escape(p, multi)) < 0)
				return rc;
			continue;
		}
		if (c == '\n' || c == '\r') {
			if (!multi)
				return toml_fail(p, p->i, TOML_ERR_SYNTAX, TM_NL_IN_STRING, NULL, 0);
			if (c == '\r') {
				if (p->i + 1 >= p->len || p->s[p->i + 1] != '\n')
					return toml_fail(p, p->i, TOML_ERR_SYNTAX, TM_BARE_CR, NULL, 0);
				p->i++;
			}
			p->i++;
			if ((rc = put_byte(p, '\n')) < 0)
				return rc;
			continue;
		}
		if ((c < 0x20 && c != '\t') || c == 0x7F)
			return toml_fail(p, p->i, TOML_ERR_SYNTAX, TM_CTRL_STRING, NULL, 0);
		/* Copy the run of plain bytes at once; the input is valid UTF-8. */
		size_t j = p->i + 1;
		while (j < p->len) {
			unsigned char d = p->s[j];
			if (d == q || d == '\\' || d < 0x20 || d == 0x7F)
				break;
			j++;
		}
		if ((rc = toml_scratch_put(p, p->s + p->i, j - p->i)) < 0)
			return rc;
		p->i = j;
	}
	char *dup = toml_arena_strdup(p->arena, p->buf, p->blen);
	if (!dup)
		return toml_fail(p, 0, TOML_ERR_NOMEM, TM_NOMEM, NULL, 0);
	*out = dup;
	*out_len = p->blen;
	return 0;
}

/* Characters a number, boolean or date-time token may hold; the token is
 * taken whole and then parsed strictly, so "1x" or "2020-01-01Q" fail as one. */
static bool is_tok(unsigned char c)
{
	return toml_lex_is_bare(c) || c == '+' || c == '.' || c == ':';
}

/* digit *( [_] digit ) from t[k]; returns the index past it, or 0 with *bad
 * set when an underscore is not between two digits. */
static size_t digit_run(const unsigned char *t, size_t n, size_t k, bool (*isd)(unsigned char),
                        bool *bad_us)
{
	if (k >= n || !isd(t[k])) {
		*bad_us = k < n && t[k] == '_';
		return 0;
	}
	k++;
	while (k < n) {
		if (isd(t[k])) {
			k++;
		} else if (t[k] == '_') {
			if (k + 1 >= n || !isd(t[k + 1])) {
				*bad_us = true;
				return 0;
			}
			k++;
		} else {
			break;
		}
	}
	return k;
}

static TOML_WUR int number_fail(toml_parser *p, size_t at, bool bad_us)
{
	return toml_fail(p, at, TOML_ERR_SYNTAX, bad_us ? TM_UNDERSCORE : TM_INVALID_NUMBER, NULL, 0);
}

/* Integers and floats, toml.io/en/v1.0.0#integer and #float. */
static TOML_WUR int number(toml_parser *p, const unsigned char *t, size_t n, toml_value *v)
{
	size_t at = p->i;
	size_t k = 0;
	bool neg = false, bad = false;
	if (t[0] == '+' || t[0] == '-') {
		neg = t[0] == '-';
		k = 1;
	}
	if (n - k == 3 && (!memcmp(t + k, "inf", 3) || !memcmp(t + k, "nan", 3))) {
		v->type = TOML_FLOAT;
		if (t[k] == 'i')
			v->u.flt = neg ? -INFINITY : INFINITY;
		else
			v->u.flt = neg ? -NAN : NAN;
		return 0;
	}
	if (n - k >= 2 && t[k] == '0' && (t[k + 1] == 'x' || t[k + 1] == 'o' || t[k + 1] == 'b')) {
		if (k)
			return toml_fail(p, at, TOML_ERR_SYNTAX, TM_INVALID_NUMBER, NULL, 0);
		bool (*isd)(unsigned char) = t[1] == 'x' ? is_hex : t[1] == 'o' ? is_oct : is_bin;
		unsigned shift = t[1] == 'x' ? 4 : t[1] == 'o' ? 3 : 1;
		size_t end = digit_run(t, n, 2, isd, &bad);
		if (end != n)
			return number_fail(p, at, bad);
		uint64_t u = 0;
		for (size_t j = 2; j < n; j++) {
			if (t[j] == '_')
				continue;
			if (u > ((uint64_t)INT64_MAX >> shift))
				return toml_fail(p, at, TOML_ERR_SYNTAX, TM_INT_RANGE, NULL, 0);
			u = (u << shift) | (uint64_t)hex_val(t[j]);
		}
		v->type = TOML_INTEGER;
		v->u.integer = (int64_t)u;
		return 0;
	}
	size_t int_end = digit_run(t, n, k, is_digit, &bad);
	if (!int_end)
		return number_fail(p, at, bad);
	if (t[k] == '0' && int_end > k + 1)
		return toml_fail(p, at, TOML_ERR_SYNTAX, TM_LEADING_ZERO, NULL, 0);
	if (int_end == n) {
		uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
		uint64_t u = 0;
		for (size_t j = k; j < n; j++) {
			if (t[j] == '_')
				continue;
			unsigned d = t[j] - '0';
			if (u > (limit - d) / 10)
				return toml_fail(p, at, TOML_ERR_SYNTAX, TM_INT_RANGE, NULL, 0);
			u = u * 10 + d;
		}
		v->type = TOML_INTEGER;
		v->u.integer = neg ? (int64_t)(0 - u) : (int64_t)u;
		return 0;
	}
	size_t j = int_end;
	if (t[j] == '.') {
		j = digit_run(t, n, j + 1, is_digit, &bad);
		if (!j)
			return number_fail(p, at, bad);
	}
	if (j < n && (t[j] == 'e' || t[j] == 'E')) {
		j++;
		if (j < n && (t[j] == '+' || t[j] == '-'))
			j++;
		j = digit_run(t, n, j, is_digit, &bad);
		if (!j)
			return number_fail(p, at, bad);
	}
	if (j != n)
		return toml_fail(p, at, TOML_ERR_SYNTAX, TM_INVALID_NUMBER, NULL, 0);
	/* strtod reads the syntax checked above identically in the "C" locale,
	 * which this process never leaves. */
	p->blen = 0;
	int rc;
	for (size_t m = 0; m < n; m++)
		if (t[m] != '_' && (rc = toml_scratch_put(p, t + m, 1)) < 0)
			return rc;
	if ((rc = toml_scratch_put(p, "", 1)) < 0)
		return rc;
	errno = 0;
	double d = strtod(p->buf, NULL);
	if (errno == ERANGE && isinf(d))
		return toml_fail(p, at, TOML_ERR_SYNTAX, TM_FLOAT_RANGE, NULL, 0);
	v->type = TOML_FLOAT;
	v->u.flt = d;
	return 0;
}

/* n decimal digits at t, exactly; -1 if any is not a digit. */
static int fixed(const unsigned char *t, size_t n)
{
	int x = 0;
	for (size_t k = 0; k < n; k++) {
		if (!is_digit(t[k]))
			return -1;
		x = x * 10 + (t[k] - '0');
	}
	return x;
}

static int days_in(int year, int month)
{
	static const int dim[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
	return month == 2 && leap ? 29 : dim[month - 1];
}

/* RFC 3339 section 5.6 as TOML 1.0 narrows it: full-date, partial-time,
 * full-date T partial-time [offset], with T, t or a space between. */
static TOML_WUR int datetime(toml_parser *p, const unsigned char *t, size_t n, toml_value *v)
{
	size_t at = p->i;
	toml_datetime *dt = &v->u.dt;
	size_t k = 0;
	bool date = n >= 10 && t[4] == '-' && t[7] == '-';
	if (date) {
		dt->year = fixed(t, 4);
		dt->month = fixed(t + 5, 2);
		dt->day = fixed(t + 8, 2);
		if (dt->year < 0 || dt->month < 0 || dt->day < 0)
			return toml_fail(p, at, TOML_ERR_SYNTAX, TM_INVALID_DATETIME, NULL, 0);
		if (dt->month < 1 || dt->month > 12 || dt->day < 1 || dt->day > days_in(dt->year, dt->month))
			return toml_fail(p, at, TOML_ERR_SYNTAX, TM_DATE_RANGE, NULL, 0);
		k = 10;
		if (k == n) {
			v->type = TOML_DATE_LOCAL;
			return 0;
		}
		if (t[k] != 'T' && t[k] != 't' && t[k] != ' ')
			return toml_fail(p, at, TOML_ERR_SYNTAX, TM_INVALID_DATETIME, NULL, 0);
		k++;
	}
	if (n - k < 8 || t[k + 2] != ':' || t[k + 5] != ':')
		return toml_fail(p, at, TOML_ERR_SYNTAX, TM_INVALID_DATETIME, NULL, 0);
	dt->hour = fixed(t + k, 2);
	dt->minute = fixed(t + k + 3, 2);
	dt->second = fixed(t + k + 6, 2);
	if (dt->hour < 0 || dt->minute < 0 || dt->second < 0)
		return toml_fail(p, at, TOML_ERR_SYNTAX, TM_INVALID_DATETIME, NULL, 0);
	/* Second 60 is RFC 3339's leap second. */
	if (dt->hour > 23 || dt->minute > 59 || dt->second > 60)
		return toml_fail(p, at, TOML_ERR_SYNTAX, TM_TIME_RANGE, NULL, 0);
	k += 8;
	if (k < n && t[k] == '.') {
		k++;
		size_t d0 = k;
		uint32_t ns = 0;
		while (k < n && is_digit(t[k])) {
			if (k - d0 < 9)
				ns = ns * 10 + (uint32_t)(t[k] - '0');
			k++;
		}
		if (k == d0)
			return toml_fail(p, at, TOML_ERR_SYNTAX, TM_INVALID_DATETIME, NULL, 0);
		dt->frac_digits = k - d0 < 9 ? (int)(k - d0) : 9;
		for (int z = dt->frac_digits; z < 9; z++)
			ns *= 10;
		dt->nanos = ns;
	}
	if (!date) {
		if (k != n)
			return toml_fail(p, at, TOML_ERR_SYNTAX, TM_INVALID_DATETIME, NULL, 0);
		v->type = TOML_TIME_LOCAL;
		return 0;
	}
	if (k == n) {
		v->type = TOML_DATETIME_LOCAL;
		return 0;
	}
	if (t[k] == 'Z' || t[k] == 'z') {
		dt->offset_z = true;
		k++;
	} else if (t[k] == '+' || t[k] == '-') {
		if (n - k < 6 || t[k + 3] != ':')
			return toml_fail(p, at, TOML_ERR_SYNTAX, TM_INVALID_DATETIME, NULL, 0);
		int oh = fixed(t + k + 1, 2), om = fixed(t + k + 4, 2);
		if (oh < 0 || om < 0)
			return toml_fail(p, at, TOML_ERR_SYNTAX, TM_INVALID_DATETIME, NULL, 0);
		if (oh > 23 || om > 59)
			return toml_fail(p, at, TOML_ERR_SYNTAX, TM_OFFSET_RANGE, NULL, 0);
		dt->offset_minutes = (t[k] == '-' ? -1 : 1) * (oh * 60 + om);
		k += 6;
	}
	if (k != n)
		return toml_fail(p, at, TOML_ERR_SYNTAX, TM_INVALID_DATETIME, NULL, 0);
	v->type = TOML_DATETIME;
	return 0;
}

/* A boolean, number or date-time at p->i. */
int toml_lex_scalar(toml_parser *p, toml_value *v)
{
	const unsigned char *t = p->s + p->i;
	size_t left = p->len - p->i;
	size_t n = 0;
	while (n < left && is_tok(t[n]))
		n++;
	/* "1979-05-27 07:32:00": the one token a space may split. */
	if (n == 10 && left - n >= 4 && t[n] == ' ' && fixed(t, 4) >= 0 && t[4] == '-' &&
	    is_digit(t[n + 1]) && is_digit(t[n + 2]) && t[n + 3] == ':') {
		n++;
		while (n < left && is_tok(t[n]))
			n++;
	}
	if (n == 0)
		return toml_fail(p, p->i, TOML_ERR_SYNTAX, TM_EXPECT_VALUE, NULL, 0);
	int rc;
	if ((n == 4 && !memcmp(t, "true", 4)) || (n == 5 && !memcmp(t, "false", 5))) {
		v->type = TOML_BOOL;
		v->u.boolean = n == 4;
		rc = 0;
	} else if (n >= 10 && fixed(t, 4) >= 0 && t[4] == '-') {
		rc = datetime(p, t, n, v);
	} else if (n >= 3 && is_digit(t[0]) && is_digit(t[1]) && t[2] == ':') {
		rc = datetime(p, t, n, v);
	} else if (is_digit(t[0]) || t[0] == '+' || t[0] == '-' || (n == 3 && !memcmp(t, "inf", 3)) ||
	           (n == 3 && !memcmp(t, "nan", 3))) {
		rc = number(p, t, n, v);
	} else {
		rc = toml_fail(p, p->i, TOML_ERR_SYNTAX, TM_INVALID_VALUE, NULL, 0);
	}
	if (rc < 0)
		return rc;
	p->i += n;
	return 0;
}
