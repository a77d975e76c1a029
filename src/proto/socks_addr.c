/* socks_addr.c - the ATYP ADDR PORT codec shared by SOCKS5 and Trojan. */
#include "proto/socks_addr.h"

#include <string.h>

#include "base/bytes.h"

size_t socks_addr_wire_len(const addr_dest *d)
{
	switch (d->kind) {
	case ADDR_IPV4:
		return 1 + 4 + 2;
	case ADDR_IPV6:
		return 1 + 16 + 2;
	case ADDR_DOMAIN:
		if (d->u.domain.len == 0 || memchr(d->u.domain.name, '\0', d->u.domain.len))
			return 0;
		return 1 + 1 + (size_t)d->u.domain.len + 2;
	default:
		return 0;
	}
}

size_t socks_addr_put(const addr_dest *d, uint8_t *p)
{
	size_t n;
	switch (d->kind) {
	case ADDR_IPV4:
		p[0] = SOCKS_ATYP_IPV4;
		memcpy(p + 1, d->u.v4, 4);
		n = 1 + 4;
		break;
	case ADDR_IPV6:
		p[0] = SOCKS_ATYP_IPV6;
		memcpy(p + 1, d->u.v6, 16);
		n = 1 + 16;
		break;
	default:
		p[0] = SOCKS_ATYP_DOMAIN;
		p[1] = d->u.domain.len;
		memcpy(p + 2, d->u.domain.name, d->u.domain.len);
		n = 2 + (size_t)d->u.domain.len;
		break;
	}
	bytes_put16(p + n, d->port);
	return n + 2;
}

int socks_addr_get(const uint8_t *p, addr_network net, addr_dest *d)
{
	*d = (addr_dest){.network = net};
	switch (p[0]) {
	case SOCKS_ATYP_IPV4:
		d->kind = ADDR_IPV4;
		memcpy(d->u.v4, p + 1, 4);
		d->port = bytes_get16(p + 5);
		return 1 + 4 + 2;
	case SOCKS_ATYP_IPV6:
		d->kind = ADDR_IPV6;
		memcpy(d->u.v6, p + 1, 16);
		d->port = bytes_get16(p + 17);
		return 1 + 16 + 2;
	case SOCKS_ATYP_DOMAIN: {
		size_t n = p[1];
		if (addr_dest_set_domain(d, (const char *)p + 2, n, bytes_get16(p + 2 + n)) != 0)
			return SOCKS_ADDR_BAD_DOMAIN;
		return (int)(1 + 1 + n + 2);
	}
	default:
		return SOCKS_ADDR_BAD_ATYP;
	}
}
