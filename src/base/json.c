/* json.c - JSON string escaping: quotes, backslash, control bytes, and UTF-8 checked. */
#include "base/json.h"

#include <stdint.h>
#include <string.h>

/* The length of the valid UTF-8 sequence at s (RFC 3629 section 4: no
 * overlong forms, no surrogates, nothing above U+10FFFF), 0 when it is not
 * one. s[0] >= 0x80. */
static size_t utf8_len(const uint8_t *s, size_t len)
{
	uint8_t c = s[0];
	size_t n;
	uint8_t lo = 0x80, hi = 0xBF; /* the range of the second byte */
	if (c >= 0xC2 && c <= 0xDF) {
		n = 2;
	} else if (c >= 0xE0 && c <= 0xEF) {
		n = 3;
		if (c == 0xE0)
			lo = 0xA0;
		else if (c == 0xED)
			hi = 0x9F;
	} else if (c >= 0xF0 && c <= 0xF4) {
		n = 4;
		if (c == 0xF0)
			lo = 0x90;
		else if (c == 0xF4)
			hi = 0x8F;
	} else {
		return 0;
	}
	if (len < n || s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++)
		if ((s[i] & 0xC0) != 0x80)
			return 0;
	return n;
}

size_t json_escape(char *out, size_t size, const char *s, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	if (size == 0)
		return 0;
	const uint8_t *p = (const uint8_t *)s;
	size_t n = 0;
	for (size_t i = 0; i < len;) {
		char esc[JSON_ESCAPE_MAX];
		const char *piece = esc;
		size_t k, used = 1;
		uint8_t c = p[i];
		if (c == '"' || c == '\\') {
			esc[0] = '\\';
			esc[1] = (char)c;
			k = 2;
		} else if (c < 0x20) {
			memcpy(esc, "\\u00", 4);
			esc[4] = hex[c >> 4];
			esc[5] = hex[c & 15];
			k = 6;
		} else if (c < 0x80) {
			esc[0] = (char)c;
			k = 1;
		} else if ((k = utf8_len(p + i, len - i)) > 0) {
			piece = s + i;
			used = k;
		} else {
			piece = "\\ufffd";
			k = 6;
		}
		if (k > size - 1 - n)
			break; /* only whole characters */
		memcpy(out + n, piece, k);
		n += k;
		i += used;
	}
	out[n] = '\0';
	return n;
}
