/* addr.c - the UDP load balancer's compact endpoint: setters, socket address conversion, comparison, text. */
#include "udplb/addr.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

void udplb_addr_set4(udplb_addr *a, const uint8_t ip4[4], uint16_t port)
{
	memset(a, 0, sizeof *a);
	a->family = UDPLB_AF_INET;
	a->port = port;
	memcpy(a->ip, ip4, 4);
}

void udplb_addr_set6(udplb_addr *a, const uint8_t ip6[16], uint16_t port)
{
	memset(a, 0, sizeof *a);
	a->family = UDPLB_AF_INET6;
	a->port = port;
	memcpy(a->ip, ip6, 16);
}

static const uint8_t V4_MAPPED[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

int udplb_addr_from_sockaddr(udplb_addr *a, const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
		udplb_addr_set4(a, (const uint8_t *)&s4->sin_addr, ntohs(s4->sin_port));
		return 0;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
		const uint8_t *ip = s6->sin6_addr.s6_addr;
		if (memcmp(ip, V4_MAPPED, sizeof V4_MAPPED) == 0) {
			udplb_addr_set4(a, ip + 12, ntohs(s6->sin6_port));
		} else {
			udplb_addr_set6(a, ip, ntohs(s6->sin6_port));
			if (udplb_addr_link_local(a))
				a->scope = s6->sin6_scope_id;
		}
		return 0;
	}
	memset(a, 0, sizeof *a);
	return -1;
}

socklen_t udplb_addr_to_sockaddr(const udplb_addr *a, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof *ss);
	if (a->family == UDPLB_AF_INET) {
		struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
		s4->sin_family = AF_INET;
		s4->sin_port = htons(a->port);
		memcpy(&s4->sin_addr, a->ip, 4);
		return sizeof *s4;
	}
	if (a->family == UDPLB_AF_INET6) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(a->port);
		memcpy(&s6->sin6_addr, a->ip, 16);
		s6->sin6_scope_id = a->scope;
		return sizeof *s6;
	}
	return 0;
}

bool udplb_addr_link_local(const udplb_addr *a)
{
	return a->family == UDPLB_AF_INET6 && a->ip[0] == 0xfe && (a->ip[1] & 0xc0) == 0x80;
}

size_t udplb_addr_ip_len(const udplb_addr *a)
{
	return a->family == UDPLB_AF_INET ? 4 : a->family == UDPLB_AF_INET6 ? 16 : 0;
}

bool udplb_addr_same_ip(const udplb_addr *a, const udplb_addr *b)
{
	return a->family == b->family && memcmp(a->ip, b->ip, sizeof a->ip) == 0 &&
	       a->scope == b->scope;
}

bool udplb_addr_equal(const udplb_addr *a, const udplb_addr *b)
{
	return udplb_addr_same_ip(a, b) && a->port == b->port;
}

size_t udplb_addr_format(const udplb_addr *a, char *out, size_t size)
{
	char ip[INET6_ADDRSTRLEN];
	int n;

	if (size == 0)
		return 0;
	if (a->family == UDPLB_AF_INET && inet_ntop(AF_INET, a->ip, ip, sizeof ip))
		n = snprintf(out, size, "%s:%u", ip, (unsigned)a->port);
	else if (a->family == UDPLB_AF_INET6 && inet_ntop(AF_INET6, a->ip, ip, sizeof ip) &&
	         a->scope)
		n = snprintf(out, size, "[%s%%%u]:%u", ip, (unsigned)a->scope, (unsigned)a->port);
	else if (a->family == UDPLB_AF_INET6 && inet_ntop(AF_INET6, a->ip, ip, sizeof ip))
		n = snprintf(out, size, "[%s]:%u", ip, (unsigned)a->port);
	else
		n = snprintf(out, size, "-");
	if (n < 0) {
		out[0] = '\0';
		return 0;
	}
	return (size_t)n < size ? (size_t)n : size - 1;
}
