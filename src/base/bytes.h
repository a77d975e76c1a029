/* bytes.h - big-endian integers in wire buffers (network byte order), and hexadecimal digits. */
#ifndef ETM_BASE_BYTES_H
#define ETM_BASE_BYTES_H

#include <stdint.h>

static inline uint16_t bytes_get16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }

static inline void bytes_put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
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

#endif
