/* socks5.c - SOCKS5 client handshake (RFC 1928 sections 3-7) for the load tool. */
#include "socks5.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* RFC 1928 section 6, REP values 1-8. */
static const char *const rep_text[] = {
	"succeeded",
	"SOCKS5 reply: general failure",
	"SOCKS5 reply: connection not allowed by ruleset",
	"SOCKS5 reply: network unreachable",
	"SOCKS5 reply: host unreachable",
	"SOCKS5 reply: connection refused",
	"SOCKS5 reply: TTL expired",
	"SOCKS5 reply: command not supported",
	"SOCKS5 reply: address type not supported",
};

static int send_all(struct lg_s5 *s, int fd, const uint8_t *p, size_t n)
{
	/* A handshake message is a few bytes on a fresh socket: the send
	 * buffer always takes it whole. */
	ssize_t w;
	do
		w = send(fd, p, n, MSG_NOSIGNAL);
	while (w < 0 && errno == EINTR);
	if (w != (ssize_t)n) {
		s->err = w < 0 ? strerror(errno) : "short write of a SOCKS5 message";
		return -1;
	}
	return 0;
}

int lg_s5_start(struct lg_s5 *s, int fd, uint8_t cmd, const struct sockaddr_in *dst)
{
	static const uint8_t greeting[] = {5, 1, 0}; /* version 5, one method: no authentication */
	*s = (struct lg_s5){.state = LG_S5_GREETED, .cmd = cmd, .dst = *dst, .need = 2};
	return send_all(s, fd, greeting, sizeof greeting);
}

static int send_request(struct lg_s5 *s, int fd)
{
	uint8_t req[10] = {5, s->cmd, 0, 1};
	memcpy(req + 4, &s->dst.sin_addr, 4);
	memcpy(req + 8, &s->dst.sin_port, 2);
	return send_all(s, fd, req, sizeof req);
}

int lg_s5_step(struct lg_s5 *s, int fd)
{
	for (;;) {
		while (s->have < s->need) {
			ssize_t n = read(fd, s->buf + s->have, s->need - s->have);
			if (n > 0) {
				s->have += (size_t)n;
				continue;
			}
			if (n == 0) {
				s->err = "the proxy closed the connection during the SOCKS5 handshake";
				return -1;
			}
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			s->err = strerror(errno);
			return -1;
		}
		switch (s->state) {
		case LG_S5_GREETED:
			if (s->buf[0] != 5 || s->buf[1] != 0) {
				s->err = "the proxy refused SOCKS5 without authentication";
				return -1;
			}
			if (send_request(s, fd) < 0)
				return -1;
			s->state = LG_S5_REQUESTED;
			s->have = 0;
			s->need = 5; /* VER REP RSV ATYP and the address's first byte */
			break;
		case LG_S5_REQUESTED:
			if (s->buf[0] != 5) {
				s->err = "the proxy's reply is not SOCKS5";
				return -1;
			}
			if (s->buf[1] != 0) {
				s->err = s->buf[1] < 9 ? rep_text[s->buf[1]] : "SOCKS5 reply: unknown failure";
				return -1;
			}
			switch (s->buf[3]) {
			case 1: s->need = 4 + 4 + 2; break;
			case 4: s->need = 4 + 16 + 2; break;
			case 3: s->need = 4 + 1 + (size_t)s->buf[4] + 2; break;
			default:
				s->err = "the proxy's reply has an unknown address type";
				return -1;
			}
			s->state = LG_S5_REPLY_ADDR;
			break;
		case LG_S5_REPLY_ADDR:
			memset(&s->bound, 0, sizeof s->bound);
			if (s->buf[3] == 1) {
				s->bound.sin_family = AF_INET;
				memcpy(&s->bound.sin_addr, s->buf + 4, 4);
				memcpy(&s->bound.sin_port, s->buf + 8, 2);
			}
			s->state = LG_S5_DONE;
			return 1;
		case LG_S5_DONE:
			return 1;
		}
	}
}

void lg_s5_udp_header(uint8_t out[LG_S5_UDP_HEADER], const struct sockaddr_in *dst)
{
	out[0] = out[1] = 0; /* RSV */
	out[2] = 0;          /* FRAG: whole datagrams only */
	out[3] = 1;          /* IPv4 */
	memcpy(out + 4, &dst->sin_addr, 4);
	memcpy(out + 8, &dst->sin_port, 2);
}

int lg_s5_udp_header_len(const uint8_t *p, size_t n)
{
	if (n < 4 || p[2] != 0)
		return -1;
	size_t h;
	switch (p[3]) {
	case 1: h = 4 + 4 + 2; break;
	case 4: h = 4 + 16 + 2; break;
	case 3:
		if (n < 5)
			return -1;
		h = 4 + 1 + (size_t)p[4] + 2;
		break;
	default: return -1;
	}
	return h <= n ? (int)h : -1;
}
