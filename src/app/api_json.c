/* api_json.c - JSON for the admin API: a growing buffer written with base/json.c's escaping, and a checker of request bodies (RFC 8259) that finds a top-level key. */
#include "app/api_json.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/bytes.h"
#include "base/json.h"
#include "base/log.h"

/* ---- writing ---- */

int api_json_put(api_buf *b, const char *s, size_t n) { return metrics_buf_put(b, s, n); }

int api_json_puts(api_buf *b, const char *s) { return api_json_put(b, s, strlen(s)); }

int api_json_u64(api_buf *b, uint64_t v)
{
	char t[24];
	int n = snprintf(t, sizeof t, "%" PRIu64, v);
	return api_json_put(b, t, (size_t)n);
}

int api_json_i64(api_buf *b, int64_t v)
{
	char t[24];
	int n = snprintf(t, sizeof t, "%" PRId64, v);
	return api_json_put(b, t, (size_t)n);
}

/* A JSON string: base/json.c's escaping, a piece at a time. */
int api_json_strn(api_buf *b, const char *s, size_t n)
{
	char t[JSON_ESCAPE_MAX * 64 + 1];
	if (api_json_put(b, "\"", 1))
		return -1;
	while (n) {
		size_t take = n < 64 ? n : 64;
		/* cut before a UTF-8 continuation, so no character is split */
		while (take < n && take > 1 && ((unsigned char)s[take] & 0xC0) == 0x80)
			take--;
		size_t w = json_escape(t, sizeof t, s, take);
		if (api_json_put(b, t, w))
			return -1;
		s += take;
		n -= take;
	}
	return api_json_put(b, "\"", 1);
}

int api_json_str(api_buf *b, const char *s)
{
	return api_json_strn(b, s ? s : "", s ? strlen(s) : 0);
}

/* "key": with the comma before it unless first */
int api_json_key(api_buf *b, bool *first, const char *k)
{
	int rc = *first ? 0 : api_json_put(b, ",", 1);
	*first = false;
	return rc | api_json_str(b, k) | api_json_put(b, ":", 1);
}

int api_json_time(api_buf *b, uint64_t unix_ms)
{
	struct timespec ts = {.tv_sec = (time_t)(unix_ms / 1000),
	                      .tv_nsec = (long)(unix_ms % 1000) * 1000000L};
	char t[LOG_TIME_MAX];
	size_t n = log_format_time(&ts, t, sizeof t);
	return api_json_put(b, "\"", 1) | api_json_put(b, t, n) | api_json_put(b, "\"", 1);
}

/* ---- reading: PATCH and PUT /configs bodies ---- */

static void ws(const char *s, size_t n, size_t *i)
{
	while (*i < n && (s[*i] == ' ' || s[*i] == '\t' || s[*i] == '\n' || s[*i] == '\r'))
		(*i)++;
}

/* Skips one JSON value (RFC 8259), checking its syntax. 0 or -1. */
static int skip_value(const char *s, size_t n, size_t *i, int depth);

static int skip_string(const char *s, size_t n, size_t *i)
{
	if (*i >= n || s[*i] != '"')
		return -1;
	for ((*i)++; *i < n; (*i)++) {
		unsigned char c = (unsigned char)s[*i];
		if (c == '"') {
			(*i)++;
			return 0;
		}
		if (c < 0x20)
			return -1;
		if (c == '\\') {
			if (++*i >= n)
				return -1;
			if (s[*i] == 'u') {
				for (int k = 0; k < 4; k++)
					if (++*i >= n || bytes_hex_digit(s[*i]) < 0)
						return -1;
			} else if (!strchr("\"\\/bfnrt", s[*i])) {
				return -1;
			}
		}
	}
	return -1;
}

static int skip_value(const char *s, size_t n, size_t *i, int depth)
{
	ws(s, n, i);
	if (*i >= n || depth > JSON_DEPTH_MAX)
		return -1;
	char c = s[*i];
	if (c == '"')
		return skip_string(s, n, i);
	if (c == '{' || c == '[') {
		char close = c == '{' ? '}' : ']';
		(*i)++;
		ws(s, n, i);
		if (*i < n && s[*i] == close) {
			(*i)++;
			return 0;
		}
		for (;;) {
			if (c == '{') {
				ws(s, n, i);
				if (skip_string(s, n, i))
					return -1;
				ws(s, n, i);
				if (*i >= n || s[(*i)++] != ':')
					return -1;
			}
			if (skip_value(s, n, i, depth + 1))
				return -1;
			ws(s, n, i);
			if (*i >= n)
				return -1;
			if (s[*i] == ',') {
				(*i)++;
				continue;
			}
			if (s[(*i)++] != close)
				return -1;
			return 0;
		}
	}
	static const char *const words[] = {"true", "false", "null"};
	for (size_t w = 0; w < 3; w++) {
		size_t l = strlen(words[w]);
		if (n - *i >= l && memcmp(s + *i, words[w], l) == 0) {
			*i += l;
			return 0;
		}
	}
	/* a number: -? int frac? exp? */
	size_t st = *i;
	if (s[*i] == '-')
		(*i)++;
	size_t d = *i;
	while (*i < n && s[*i] >= '0' && s[*i] <= '9')
		(*i)++;
	if (*i == d)
		return -1;
	if (*i < n && s[*i] == '.') {
		d = ++*i;
		while (*i < n && s[*i] >= '0' && s[*i] <= '9')
			(*i)++;
		if (*i == d)
			return -1;
	}
	if (*i < n && (s[*i] == 'e' || s[*i] == 'E')) {
		(*i)++;
		if (*i < n && (s[*i] == '+' || s[*i] == '-'))
			(*i)++;
		d = *i;
		while (*i < n && s[*i] >= '0' && s[*i] <= '9')
			(*i)++;
		if (*i == d)
			return -1;
	}
	return *i > st ? 0 : -1;
}

int api_json_find(const char *s, size_t n, const char *k, const char **v, size_t *vn)
{
	if (api_json_find_raw(s, n, k, v, vn))
		return -1;
	if (*v && **v == '"') { /* the string's inside */
		(*v)++;
		*vn -= 2;
	} else {
		*v = NULL;
		*vn = 0;
	}
	return 0;
}

int api_json_find_u64(const char *s, size_t n, const char *k, uint64_t max, uint64_t *out)
{
	const char *v;
	size_t vn;
	if (api_json_find_raw(s, n, k, &v, &vn))
		return -1;
	if (!v)
		return 0;
	uint64_t x = 0;
	for (size_t i = 0; i < vn; i++) {
		if (v[i] < '0' || v[i] > '9' || x > (max - (uint64_t)(v[i] - '0')) / 10)
			return -1; /* not a whole number, or past max */
		x = x * 10 + (uint64_t)(v[i] - '0');
	}
	*out = x;
	return 1;
}

/* Checks that s[0, n) is one JSON object and finds the raw value of its
 * top-level key k. */
int api_json_find_raw(const char *s, size_t n, const char *k, const char **v, size_t *vn)
{
	size_t i = 0, kl = strlen(k);
	*v = NULL;
	*vn = 0;
	ws(s, n, &i);
	if (i >= n || s[i] != '{')
		return -1;
	size_t end = i;
	if (skip_value(s, n, &end, 0))
		return -1;
	size_t rest = end;
	ws(s, n, &rest);
	if (rest != n)
		return -1;
	i++;
	for (;;) {
		ws(s, n, &i);
		if (s[i] == '}')
			return 0;
		size_t ks = i;
		if (skip_string(s, n, &i))
			return -1;
		bool match = i - ks - 2 == kl && memcmp(s + ks + 1, k, kl) == 0;
		ws(s, n, &i);
		i++; /* ':' (checked above) */
		ws(s, n, &i);
		size_t vs = i;
		if (skip_value(s, n, &i, 1))
			return -1;
		if (match) {
			*v = s + vs;
			*vn = i - vs;
		}
		ws(s, n, &i);
		if (s[i] == ',')
			i++;
	}
}
