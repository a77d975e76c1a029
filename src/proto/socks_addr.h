/* socks_addr.h - the SOCKS5 address block, ATYP ADDR PORT (RFC 1928 section 5), which Trojan reuses. */
#ifndef ETM_PROTO_SOCKS_ADDR_H
#define ETM_PROTO_SOCKS_ADDR_H

#include <stddef.h>
#include <stdint.h>

#include "base/addr.h"

enum {
	SOCKS_ATYP_IPV4 = 0x01,
	SOCKS_ATYP_DOMAIN = 0x03,
	SOCKS_ATYP_IPV6 = 0x04,
};

/* socks_addr_get's refusals. */
enum {
	SOCKS_ADDR_BAD_ATYP = -1,   /* an ATYP other than 1, 3, 4 */
	SOCKS_ADDR_BAD_DOMAIN = -2, /* empty, or holding a NUL (addr_dest needs a C string) */
};

/* Wire length of d as ATYP ADDR PORT, or 0 when d is unset or not a valid
 * domain (empty, holding a NUL). */
size_t socks_addr_wire_len(const addr_dest *d);

/* Writes d (socks_addr_wire_len(d) > 0) at p; returns the bytes written. */
size_t socks_addr_put(const addr_dest *d, uint8_t *p);

/* Reads a complete block at p (the caller made sure its bytes are all there)
 * into *d with network net. Returns its span, or SOCKS_ADDR_BAD_*. */
int socks_addr_get(const uint8_t *p, addr_network net, addr_dest *d);

#endif
