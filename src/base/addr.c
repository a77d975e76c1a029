/* addr.c - destinations and socket addresses. */
#include "base/addr.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bytes.h"

static const uint8_t V4_MAPPED[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

int addr_dest_from_sockaddr(addr_dest *d, const struct sockaddr *sa)
{
	addr_network net = d->network;
	*d = (addr_dest){.network = net};
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		d->kind = ADDR_IPV4;
		memcpy(d->u.v4, &in->sin_addr, 4);
		d->port = ntohs(in->sin_port);
		return 0;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
		const uint8_t *b = in6->sin6_addr.s6_addr;
		d->port = ntohs(in6->sin6_port);
		if (memcmp(b, V4_MAPPED, 12) == 0) {
			d->kind = ADDR_IPV4;
			memcpy(d->u.v4, b + 12, 4);
		} else {
			d->kind = ADDR_IPV6;
			memcpy(d->u.v6, b, 16);
		}
		return 0;
	}
	return -1;
}

int addr_dest_set_domain(addr_dest *d, const char *name, size_t len, uint16_t port)
{
	if (len == 0 || len > ADDR_DOMAIN_MAX || memchr(name, '\0', len))
		return -1;
	addr_network net = d->network;
	*d = (addr_dest){.kind = ADDR_DOMAIN, .network = net, .port = port};
	d->u.domain.len = (uint8_t)len;
	memcpy(d->u.domain.name, name, len);
	d->u.domain.name[len] = '\0';
	return 0;
}

socklen_t addr_dest_to_sockaddr(const addr_dest *d, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof *ss);
	if (d->kind == ADDR_IPV4) {
		struct sockaddr_in *in = (struct sockaddr_in *)ss;
		in->sin_family = AF_INET;
		in->sin_port = htons(d->port);
		memcpy(&in->sin_addr, d->u.v4, 4);
		return sizeof *in;
	}
	if (d->kind == ADDR_IPV6) {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons(d->port);
		memcpy(&in6->sin6_addr, d->u.v6, 16);
		return sizeof *in6;
	}
	return 0;
}

bool addr_dest_same(const addr_dest *a, const addr_dest *b)
{
	if (a->kind != b->kind || a->port != b->port)
		return false;
	switch (a->kind) {
	case ADDR_IPV4:
		return memcmp(a->u.v4, b->u.v4, 4) == 0;
	case ADDR_IPV6:
		return memcmp(a->u.v6, b->u.v6, 16) == 0;
	case ADDR_DOMAIN:
		return bytes_ascii_ieq(a->u.domain.name, a->u.domain.len, b->u.domain.name,
		                       b->u.domain.len);
	default:
		return false;
	}
}

size_t addr_dest_format(const addr_dest *d, char *out, size_t size)
{
	char ip[INET6_ADDRSTRLEN];
	int n;
	switch (d->kind) {
	case ADDR_IPV4:
		inet_ntop(AF_INET, d->u.v4, ip, sizeof ip);
		n = snprintf(out, size, "%s:%u", ip, d->port);
		break;
	case ADDR_IPV6:
		inet_ntop(AF_INET6, d->u.v6, ip, sizeof ip);
		n = snprintf(out, size, "[%s]:%u", ip, d->port);
		break;
	case ADDR_DOMAIN:
		n = snprintf(out, size, "%s:%u", d->u.domain.name, d->port);
		break;
	default:
		n = snprintf(out, size, "(none)");
		break;
	}
	if (n < 0)
		return 0;
	return (size_t)n < size ? (size_t)n : (size ? size - 1 : 0);
}

int addr_dest_parse(addr_dest *d, const char *text)
{
	const char *colon = strrchr(text, ':');
	if (!colon || colon[1] == '\0' || strlen(colon + 1) > 5)
		return -1;
	char *endp;
	unsigned long port = strtoul(colon + 1, &endp, 10);
	if (*endp || port > 65535 || colon[1] < '0' || colon[1] > '9')
		return -1;
	size_t hlen = (size_t)(colon - text);
	char host[ADDR_DOMAIN_MAX + 1];
	if (hlen >= 2 && text[0] == '[' && text[hlen - 1] == ']') {
		if (hlen - 2 >= sizeof host)
			return -1;
		memcpy(host, text + 1, hlen - 2);
		host[hlen - 2] = '\0';
		addr_network net = d->network;
		*d = (addr_dest){.kind = ADDR_IPV6, .network = net, .port = (uint16_t)port};
		return inet_pton(AF_INET6, host, d->u.v6) == 1 ? 0 : -1;
	}
	if (hlen == 0 || hlen >= sizeof host || memchr(text, ':', hlen))
		return -1; /* a bare v6 address needs brackets */
	memcpy(host, text, hlen);
	host[hlen] = '\0';
	addr_network net = d->network;
	*d = (addr_dest){.kind = ADDR_IPV4, .network = net, .port = (uint16_t)port};
	if (inet_pton(AF_INET, host, d->u.v4) == 1)
		return 0;
	return addr_dest_set_domain(d, host, hlen, (uint16_t)port);
}

/* The canonical IP bytes of a socket address: 4 for v4 (and v4-mapped v6), 16 for v6. */
static size_t canonical_ip(const struct sockaddr *sa, const uint8_t **ip, uint16_t *port)
{
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		*ip = (const uint8_t *)&in->sin_addr;
		*port = in->sin_port;
		return 4;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
		*port = in6->sin6_port;
		if (memcmp(in6->sin6_addr.s6_addr, V4_MAPPED, 12) == 0) {
			*ip = in6->sin6_addr.s6_addr + 12;
			return 4;
		}
		*ip = in6->sin6_addr.s6_addr;
		return 16;
	}
	return 0;
}

bool addr_same_ip(const struct sockaddr *a, const struct sockaddr *b)
{
	const uint8_t *ia = NULL, *ib = NULL;
	uint16_t pa = 0, pb = 0;
	size_t la = canonical_ip(a, &ia, &pa), lb = canonical_ip(b, &ib, &pb);
	return la && la == lb && memcmp(ia, ib, la) == 0;
}

bool addr_same_endpoint(const struct sockaddr *a, const struct sockaddr *b)
{
	const uint8_t *ia = NULL, *ib = NULL;
	uint16_t pa = 0, pb = 0;
	size_t la = canonical_ip(a, &ia, &pa), lb = canonical_ip(b, &ib, &pb);
	return la && la == lb && pa == pb && memcmp(ia, ib, la) == 0;
}
