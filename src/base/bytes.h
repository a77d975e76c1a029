/* bytes.h - big-endian integers in wire buffers (network byte order), hexadecimal digits, and ASCII case. */
#ifndef ETM_BASE_BYTES_H
#define ETM_BASE_BYTES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

static inline uint16_t bytes_get16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }

static inline uint32_t bytes_get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline void bytes_put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static inline uint64_t bytes_get64(const uint8_t *p)
{
	return (uint64_t)bytes_get32(p) << 32 | bytes_get32(p + 4);
}

static inline void bytes_put64(uint8_t *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}

/* The value of hexadecimal digit c (either case), or -1. */
static inline int bytes_hex_digit(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* c lower-cased if it is an ASCII capital; any other byte as it is (whatever
 * the locale: protocol names compare this way, RFC 9110 5.1, RFC 4343). */
static inline uint8_t bytes_ascii_lower(uint8_t c) { return c >= 'A' && c <= 'Z' ? (uint8_t)(c + 32) : c; }

/* a[0, an) and b[0, bn) are equal but for ASCII case. */
static inline bool bytes_ascii_ieq(const void *a, size_t an, const void *b, size_t bn)
{
	if (an != bn)
		return false;
	for (size_t i = 0; i < an; i++)
		if (bytes_ascii_lower(((const uint8_t *)a)[i]) != bytes_ascii_lower(((const uint8_t *)b)[i]))
			return false;
	return true;
}

#endif
