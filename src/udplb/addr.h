/* addr.h - the UDP load balancer's compact endpoint (an IPv4 or IPv6 address and a port), plain data the core hashes and compares. */
#ifndef ETM_UDPLB_ADDR_H
#define ETM_UDPLB_ADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* Address families, numbered as PROXY v2 numbers them (proxy-protocol.txt
 * section 2.2: 0x1 AF_INET, 0x2 AF_INET6); 0 is "no address". */
#define UDPLB_AF_NONE 0
#define UDPLB_AF_INET 1
#define UDPLB_AF_INET6 2

/* Longest text udplb_addr_format writes, NUL included:
 * "[v6%4294967295]:65535". */
#define UDPLB_ADDR_TEXT_MAX 64

/* One UDP endpoint. Copied by value; a zeroed struct is "no address". An
 * IPv4 address sits in ip[0..3] and the rest of ip stays zero, so two equal
 * endpoints are equal byte for byte. An IPv6 link-local address is one
 * link's: its scope (the interface index, as sin6_scope_id) tells
 * fe80::1 on one link from fe80::1 on another, and takes a reply back out
 * of the right one; it is 0 for every other address. */
typedef struct udplb_addr {
	uint8_t family; /* UDPLB_AF_* */
	uint8_t pad;    /* always 0 */
	uint16_t port;  /* host order */
	uint8_t ip[16]; /* network order */
	uint32_t scope; /* IPv6 link-local: the interface index; else 0 */
} udplb_addr;

/* Sets a to an IPv4 endpoint; ip4 is 4 bytes in network order. */
void udplb_addr_set4(udplb_addr *a, const uint8_t ip4[4], uint16_t port);

/* Sets a to an IPv6 endpoint; ip6 is 16 bytes in network order. A
 * v4-mapped address (::ffff:a.b.c.d) is kept as IPv6: canonicalising is
 * udplb_addr_from_sockaddr's job. */
void udplb_addr_set6(udplb_addr *a, const uint8_t ip6[16], uint16_t port);

/* Sets a from a socket address. A v4-mapped IPv6 address becomes IPv4, so a
 * dual-stack listener keys a client the same way whatever socket saw it; an
 * IPv6 link-local address keeps sin6_scope_id as its scope (any other
 * address gets scope 0). Returns 0, or -1 for another family (a is then
 * zeroed). */
__attribute__((warn_unused_result)) int udplb_addr_from_sockaddr(udplb_addr *a,
                                                                 const struct sockaddr *sa);

/* Fills ss from a; returns the length to pass to a socket call, or 0 when a
 * holds no address. */
socklen_t udplb_addr_to_sockaddr(const udplb_addr *a, struct sockaddr_storage *ss);

/* Whether a and b are the same endpoint (family, address and port). */
bool udplb_addr_equal(const udplb_addr *a, const udplb_addr *b);

/* Whether a and b hold the same IP address (and scope), ports ignored. */
bool udplb_addr_same_ip(const udplb_addr *a, const udplb_addr *b);

/* Whether a is an IPv6 link-local unicast address (fe80::/10), the one kind
 * that carries a scope. */
bool udplb_addr_link_local(const udplb_addr *a);

/* The address length in bytes for a's family: 4, 16, or 0. */
size_t udplb_addr_ip_len(const udplb_addr *a);

/* Writes "1.2.3.4:80", "[::1]:80" or, with a scope, "[fe80::1%2]:80"
 * (NUL-terminated, cut to size); returns the length written. A zeroed
 * address prints as "-". */
size_t udplb_addr_format(const udplb_addr *a, char *out, size_t size);

#endif
