/* sock.c - socket details of the UDP load balancer's shell: v4-mapped addresses, IP_PKTINFO both ways, and the reuseport steering program. */
#include <linux/filter.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#include "udplb/shell_int.h"

/* a as a socket address for a socket of family fam: an IPv4 address
 * becomes v4-mapped for an IPv6 socket. */
socklen_t udplb_sockaddr_for(int fam, const udplb_addr *a, struct sockaddr_storage *ss)
{
	if (fam == AF_INET6 && a->family == UDPLB_AF_INET) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
		memset(ss, 0, sizeof *ss);
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(a->port);
		s6->sin6_addr.s6_addr[10] = 0xff;
		s6->sin6_addr.s6_addr[11] = 0xff;
		memcpy(&s6->sin6_addr.s6_addr[12], a->ip, 4);
		return sizeof *s6;
	}
	return udplb_addr_to_sockaddr(a, ss);
}

bool udplb_pktinfo_read(struct msghdr *mh, uint16_t port, udplb_addr *out)
{
	for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
		if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO) {
			struct in_pktinfo pi;
			memcpy(&pi, CMSG_DATA(c), sizeof pi);
			/* the local address a reply can leave from: the header's
			 * destination for unicast, the interface's for broadcast */
			udplb_addr_set4(out, (const uint8_t *)&pi.ipi_spec_dst, port);
			return true;
		}
		if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO) {
			struct in6_pktinfo pi;
			memcpy(&pi, CMSG_DATA(c), sizeof pi);
			/* a link-local address is the arriving interface's */
			struct sockaddr_in6 s6 = {.sin6_family = AF_INET6, .sin6_addr = pi.ipi6_addr,
			                          .sin6_port = htons(port),
			                          .sin6_scope_id = (uint32_t)pi.ipi6_ifindex};
			return udplb_addr_from_sockaddr(out, (struct sockaddr *)&s6) == 0;
		}
	}
	return false;
}

size_t udplb_pktinfo_write(int fam, const udplb_addr *local, uint8_t *ctl, size_t size)
{
	memset(ctl, 0, size);
	struct msghdr mh = {.msg_control = ctl, .msg_controllen = size};
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	if (fam == AF_INET) {
		struct in_pktinfo pi = {0};
		memcpy(&pi.ipi_spec_dst, local->ip, 4);
		c->cmsg_level = IPPROTO_IP;
		c->cmsg_type = IP_PKTINFO;
		c->cmsg_len = CMSG_LEN(sizeof pi);
		memcpy(CMSG_DATA(c), &pi, sizeof pi);
		return CMSG_SPACE(sizeof pi);
	}
	struct in6_pktinfo pi = {0};
	struct sockaddr_storage ss;
	udplb_sockaddr_for(AF_INET6, local, &ss);
	pi.ipi6_addr = ((struct sockaddr_in6 *)&ss)->sin6_addr;
	pi.ipi6_ifindex = local->scope; /* a link-local source leaves by its link */
	c->cmsg_level = IPPROTO_IPV6;
	c->cmsg_type = IPV6_PKTINFO;
	c->cmsg_len = CMSG_LEN(sizeof pi);
	memcpy(CMSG_DATA(c), &pi, sizeof pi);
	return CMSG_SPACE(sizeof pi);
}

/* The instruction that keeps the first `bits` (0..32) bits of a loaded
 * 32-bit word as a number: a right shift, or clearing it for 0 bits. */
static struct sock_filter keep_bits(unsigned bits)
{
	if (bits == 0)
		return (struct sock_filter){BPF_ALU | BPF_AND | BPF_K, 0, 0, 0};
	return (struct sock_filter){BPF_ALU | BPF_RSH | BPF_K, 0, 0, 32 - bits};
}

/* Steers each datagram to the worker socket chosen by its source address
 * (shell_int.h). IPv4's source is at byte 12 of its header, IPv6's at
 * byte 8; the program runs with the network header at SKF_NET_OFF. */
int udplb_steer_by_source(int fd, size_t n_workers, unsigned prefix_v4, unsigned prefix_v6)
{
	if (prefix_v4 > 32)
		prefix_v4 = 32;
	if (prefix_v6 > 128)
		prefix_v6 = 128;
	unsigned w6 = prefix_v6 ? (prefix_v6 - 1) / 32 : 0; /* the last word it reaches */
	struct sock_filter code[] = {
		{BPF_LD | BPF_B | BPF_ABS, 0, 0, (uint32_t)SKF_NET_OFF},
		{BPF_ALU | BPF_RSH | BPF_K, 0, 0, 4},
		{BPF_JMP | BPF_JEQ | BPF_K, 3, 0, 6},
		{BPF_LD | BPF_W | BPF_ABS, 0, 0, (uint32_t)(SKF_NET_OFF + 12)},
		keep_bits(prefix_v4),
		{BPF_JMP | BPF_JA, 0, 0, 2},
		{BPF_LD | BPF_W | BPF_ABS, 0, 0, (uint32_t)(SKF_NET_OFF + 8 + 4 * (int)w6)},
		keep_bits(prefix_v6 - 32 * w6),
		{BPF_ALU | BPF_MOD | BPF_K, 0, 0, (uint32_t)n_workers},
		{BPF_RET | BPF_A, 0, 0, 0},
	};
	struct sock_fprog prog = {.len = sizeof code / sizeof code[0], .filter = code};
	return setsockopt(fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &prog, sizeof prog);
}

