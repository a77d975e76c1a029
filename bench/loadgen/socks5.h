/* socks5.h - the client side of a SOCKS5 handshake (RFC 1928, no authentication), blocking or not. */
#pragma once

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>

#include "loadgen.h"

#define LG_S5_CONNECT 1
#define LG_S5_UDP_ASSOCIATE 3

/* The longest reply: 4 header bytes, a 255-byte domain with its length, the port. */
#define LG_S5_REPLY_MAX (4 + 1 + 255 + 2)

enum lg_s5_state { LG_S5_GREETED, LG_S5_REQUESTED, LG_S5_REPLY_ADDR, LG_S5_DONE };

/* One handshake. Reads take exactly the bytes the reply still lacks, so
 * nothing after the reply is ever consumed here. */
struct lg_s5 {
	enum lg_s5_state state;
	uint8_t cmd;
	struct sockaddr_in dst;   /* what the request names */
	uint8_t buf[LG_S5_REPLY_MAX];
	size_t have, need;
	struct sockaddr_in bound; /* BND.ADDR:BND.PORT of the reply (IPv4 only; else zeroed) */
	const char *err;          /* static text, set when a call returns -1 */
};

/* Sends the greeting on a connected socket. 0, or -1 with s->err. */
int lg_s5_start(struct lg_s5 *s, int fd, uint8_t cmd, const struct sockaddr_in *dst) LG_WARN;

/* Reads what has come and sends the request after the method reply. 1 when
 * the reply to the request succeeded, 0 when the socket would block (call
 * again when readable), -1 with s->err. On a blocking socket it returns 1 or
 * -1. */
int lg_s5_step(struct lg_s5 *s, int fd) LG_WARN;

/* The 10-byte header of a UDP datagram to dst (RFC 1928 section 7). */
#define LG_S5_UDP_HEADER 10
void lg_s5_udp_header(uint8_t out[LG_S5_UDP_HEADER], const struct sockaddr_in *dst);
/* Bytes of header in front of a datagram's payload, or -1 when malformed or fragmented. */
int lg_s5_udp_header_len(const uint8_t *p, size_t n);
