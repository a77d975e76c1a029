/* api_json.h - JSON for the admin API: appending values to an api_buf (base/json.c's escaping), and reading request bodies. */
#ifndef ETM_APP_API_JSON_H
#define ETM_APP_API_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "app/api.h"

/* Each appends to b and returns 0, or -1 when memory ran out (b->failed
 * is set, and every later call fails too: callers or the results
 * together and check once). */
int api_json_put(api_buf *b, const char *s, size_t n); /* raw bytes */
int api_json_puts(api_buf *b, const char *s);          /* raw text */
int api_json_u64(api_buf *b, uint64_t v);
int api_json_i64(api_buf *b, int64_t v);
int api_json_strn(api_buf *b, const char *s, size_t n); /* a quoted, escaped string */
int api_json_str(api_buf *b, const char *s);            /* likewise; NULL is "" */
/* "k": with a comma before it unless *first (then cleared) */
int api_json_key(api_buf *b, bool *first, const char *k);
/* a Unix time in ms as an RFC 3339 UTC string with ms, as Clash writes times */
int api_json_time(api_buf *b, uint64_t unix_ms);

/* Nesting a body may have; a dashboard's config payload is a few deep. */
#define JSON_DEPTH_MAX 32

/* Checks that s[0, n) is one JSON object (RFC 8259, nested at most
 * JSON_DEPTH_MAX deep) and finds the string value of its top-level key k
 * (raw: escapes kept) into *v and *vn; *v is NULL when k is absent or not
 * a string. Returns 0, or -1 when s is not one object. */
__attribute__((warn_unused_result)) int api_json_find(const char *s, size_t n, const char *k,
                                                      const char **v, size_t *vn);

/* Like api_json_find, but *v / *vn is k's raw value whatever its type (a
 * string with its quotes); *v is NULL when k is absent. */
__attribute__((warn_unused_result)) int api_json_find_raw(const char *s, size_t n, const char *k,
                                                          const char **v, size_t *vn);

/* k's value as a whole number in [0, max] into *out. Returns 1 when
 * found, 0 when k is absent, -1 when s is not one object or the value is
 * not such a number. */
__attribute__((warn_unused_result)) int api_json_find_u64(const char *s, size_t n, const char *k,
                                                          uint64_t max, uint64_t *out);

#endif
