/* addr.h - destinations (an IP or a domain name, a port, a network) and their text forms. */
#ifndef ETM_BASE_ADDR_H
#define ETM_BASE_ADDR_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* RFC 1035: a name is at most 255 octets on the wire; SOCKS5 carries a
 * one-byte length, so 255 is the bound everywhere. */
#define ADDR_DOMAIN_MAX 255

/* Longest text addr_dest_format writes: "[v6]:port" or "domain:port". */
#define ADDR_TEXT_MAX (ADDR_DOMAIN_MAX + 8)

typedef enum addr_kind {
	ADDR_NONE = 0, /* a zeroed destination: not set */
	ADDR_IPV4,
	ADDR_IPV6,
	ADDR_DOMAIN,
} addr_kind;

typedef enum addr_network {
	ADDR_TCP = 0,
	ADDR_UDP,
} addr_network;

/* Where a flow or a datagram goes. Plain data, copied by value; a zeroed
 * struct is "no destination". */
typedef struct addr_dest {
	addr_kind kind;
	addr_network network;
	uint16_t port; /* host order */
	union {
		uint8_t v4[4];
		uint8_t v6[16];
		struct {
			uint8_t len; /* 1..255, no NUL inside */
			char name[ADDR_DOMAIN_MAX + 1]; /* NUL-terminated */
		} domain;
	} u;
} addr_dest;

/* Sets d to an IP destination from a socket address (v4, v6; a v4-mapped v6
 * address becomes v4). Returns 0, or -1 for another family. */
__attribute__((warn_unused_result)) int addr_dest_from_sockaddr(addr_dest *d,
                                                                const struct sockaddr *sa);

/* Sets d to a domain destination; -1 when len is 0, over ADDR_DOMAIN_MAX or
 * the name holds a NUL. */
__attribute__((warn_unused_result)) int addr_dest_set_domain(addr_dest *d, const char *name,
                                                             size_t len, uint16_t port);

/* Fills ss from an IP destination; returns its length, or 0 for a domain. */
socklen_t addr_dest_to_sockaddr(const addr_dest *d, struct sockaddr_storage *ss);

/* Writes "1.2.3.4:80", "[::1]:80" or "example.com:80" (NUL-terminated,
 * truncated to size); returns the text length. */
size_t addr_dest_format(const addr_dest *d, char *out, size_t size);

/* Parses "ip:port", "[v6]:port" or "name:port" (the form config values use).
 * Returns 0 or -1. */
__attribute__((warn_unused_result)) int addr_dest_parse(addr_dest *d, const char *text);

/* Whether a and b name the same place: kind, port and address equal, a
 * domain's name without regard to ASCII case (RFC 4343); the network is not
 * compared. Two unset destinations are not the same. */
bool addr_dest_same(const addr_dest *a, const addr_dest *b);

/* Whether two socket addresses are the same endpoint: canonical IP (a
 * v4-mapped v6 address equals its v4) and port; flow info and scope are left
 * out (seed 000, SocksUdpLink). */
bool addr_same_endpoint(const struct sockaddr *a, const struct sockaddr *b);

/* Same canonical IP, ports ignored. */
bool addr_same_ip(const struct sockaddr *a, const struct sockaddr *b);

#endif
