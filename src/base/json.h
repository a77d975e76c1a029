/* json.h - JSON string escaping (RFC 8259 section 7) for the log's json lines. */
#ifndef ETM_BASE_JSON_H
#define ETM_BASE_JSON_H

#include <stddef.h>

/* The most bytes one input byte becomes: a control byte as \u00XX. */
#define JSON_ESCAPE_MAX 6

/* Writes s[0, len) escaped as the inside of a JSON string (no quotes) into
 * out, NUL-terminated: '"' and '\' get a backslash, bytes below 0x20 become
 * \u00XX, valid UTF-8 passes through, and a byte that is not part of valid
 * UTF-8 (RFC 3629 section 4) becomes \ufffd so the line stays valid UTF-8.
 * Writes only whole characters: when out is too small the string is cut at
 * a character boundary, never inside an escape or a UTF-8 sequence.
 * Returns the bytes written, without the NUL; 0 when size is 0. Cannot
 * fail. */
size_t json_escape(char *out, size_t size, const char *s, size_t len);

#endif
