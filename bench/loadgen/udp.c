/* udp.c - the udp and dns modes: K datagrams (dns: DNS queries) to the UDP echo (dns: a DNS
 * server or port 53 behind a proxy's DNS service), W in flight, directly or through SOCKS5 UDP
 * ASSOCIATE. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "loadgen.h"
#include "socks5.h"
#include "stats.h"

/* Datagrams read per recvmmsg(2), and sent per sendmmsg(2). */
#define BATCH 32
#define SEND_BATCH 32
/* The largest datagram handled: a payload and a SOCKS5 header with a domain. */
#define DGRAM_MAX 2048
/* Every payload starts with this tag and the datagram's sequence number. */
#define TAG 0x6c67u /* "lg" */
#define STAMP 8
/* dns mode: a query (RFC 1035 section 4.1) for A of one name, or of a name of its own per
 * query (DNS_HEX hex digits of the sequence number, then the suffix). The answer is matched
 * by its id, the low 16 bits of the sequence number, and with --dns-random by the name the
 * question repeats (RFC 1035 section 7.3: answers carry the question). */
#define DNS_HEADER 12
#define DNS_HEX 8
#define DNS_RD 0x01     /* high byte of the flags: recursion desired */
#define DNS_QR 0x80     /* high byte of the flags: a response */
#define DNS_TC 0x02     /* high byte of the flags: truncated */

enum dstate { UNSENT, IN_FLIGHT, ANSWERED, LOST };

struct udp_run {
	const struct lg_opts *o;
	int fd;
	size_t head;          /* SOCKS5 header bytes in front of each payload, 0 when direct */
	size_t plen;          /* payload bytes: --size, or the query's length in dns mode */
	bool dns, dns_random;
	uint8_t *state;       /* enum dstate per datagram */
	uint64_t *sent_ns;    /* when each was sent */
	uint32_t *ring;       /* the window, oldest first */
	size_t ring_head, ring_len;
	size_t answered, lost, late, strays;
	size_t bad;           /* dns: answers with an rcode other than NOERROR, or truncated */
	struct lg_samples lat;
};

/* Sends datagrams from next on while the window has room, SEND_BATCH per
 * sendmmsg(2). -1 with errno on a socket error. */
static int udp_fill(struct udp_run *u, uint32_t *next, uint8_t (*out)[DGRAM_MAX])
{
	struct mmsghdr m[SEND_BATCH];
	struct iovec iov[SEND_BATCH];
	uint32_t first = *next;
	int k = 0;
	while (k < SEND_BATCH && *next < (uint32_t)u->o->count &&
	       u->ring_len + (size_t)k < (size_t)u->o->window) {
		uint32_t seq = (*next)++;
		uint8_t *p = out[k] + u->head;
		if (u->dns) {
			p[0] = (uint8_t)(seq >> 8);
			p[1] = (uint8_t)seq;
			if (u->dns_random)
				for (int i = 0; i < DNS_HEX; i++)
					p[DNS_HEADER + 1 + i] = "0123456789abcdef"[seq >> (28 - 4 * i) & 0xF];
		} else {
			for (int i = 0; i < 4; i++)
				p[4 + i] = (uint8_t)(seq >> (24 - 8 * i));
		}
		iov[k] = (struct iovec){.iov_base = out[k], .iov_len = u->head + u->plen};
		m[k] = (struct mmsghdr){.msg_hdr = {.msg_iov = &iov[k], .msg_iovlen = 1}};
		k++;
	}
	if (k == 0)
		return 0;
	int n;
	do
		n = sendmmsg(u->fd, m, (unsigned)k, 0);
	while (n < 0 && errno == EINTR);
	if (n < 0 && errno != EAGAIN && errno != ENOBUFS && errno != ECONNREFUSED)
		return -1;
	/* A datagram the kernel would not take is simply lost, as on a wire. */
	uint64_t now = lg_now_ns();
	for (int i = 0; i < k; i++) {
		uint32_t seq = first + (uint32_t)i;
		u->state[seq] = IN_FLIGHT;
		u->sent_ns[seq] = now;
		u->ring[(u->ring_head + u->ring_len) % (size_t)u->o->window] = seq;
		u->ring_len++;
	}
	return 0;
}

/* The sequence number a DNS answer belongs to, or -1 when it cannot be one of ours. */
static int64_t dns_seq(const struct udp_run *u, const uint8_t *p, size_t n)
{
	if (n < DNS_HEADER || !(p[2] & DNS_QR))
		return -1;
	uint32_t id = (uint32_t)p[0] << 8 | p[1];
	if (u->dns_random) {
		if (n < DNS_HEADER + 1 + DNS_HEX || p[DNS_HEADER] != DNS_HEX)
			return -1;
		uint32_t seq = 0;
		for (int i = 0; i < DNS_HEX; i++) {
			uint8_t c = p[DNS_HEADER + 1 + i];
			int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
			if (v < 0)
				return -1;
			seq = seq << 4 | (uint32_t)v;
		}
		return (seq & 0xFFFF) == id ? (int64_t)seq : -1;
	}
	/* One name for all: the window (at most 65536) holds one sequence number per id. */
	if (u->ring_len == 0)
		return -1;
	uint32_t base = u->ring[u->ring_head];
	return (int64_t)base + (int64_t)((id - base) & 0xFFFF);
}

static void udp_answer(struct udp_run *u, const uint8_t *p, size_t n, uint64_t now)
{
	if (u->head) {
		int h = lg_s5_udp_header_len(p, n);
		if (h < 0) {
			u->strays++;
			return;
		}
		p += h;
		n -= (size_t)h;
	}
	uint32_t seq;
	if (u->dns) {
		int64_t s = dns_seq(u, p, n);
		if (s < 0 || s >= u->o->count) {
			u->strays++;
			return;
		}
		seq = (uint32_t)s;
	} else {
		if (n != u->plen || p[0] != (uint8_t)(TAG >> 8) || p[1] != (uint8_t)TAG) {
			u->strays++;
			return;
		}
		seq = (uint32_t)p[4] << 24 | (uint32_t)p[5] << 16 | (uint32_t)p[6] << 8 | p[7];
	}
	if (seq >= (uint32_t)u->o->count || u->state[seq] == UNSENT || u->state[seq] == ANSWERED) {
		u->strays++; /* duplicated or invented */
		return;
	}
	if (u->state[seq] == LOST) {
		u->late++; /* came after it was given up: stays counted as lost */
		return;
	}
	u->state[seq] = ANSWERED;
	u->answered++;
	if (u->dns && ((p[3] & 0x0F) != 0 || (p[2] & DNS_TC)))
		u->bad++;
	if (lg_samples_add(&u->lat, now - u->sent_ns[seq]) < 0)
		u->strays++;
}

/* Drops answered and expired datagrams from the front of the window. */
static void udp_retire(struct udp_run *u, uint64_t now, uint64_t loss_ns)
{
	while (u->ring_len > 0) {
		uint32_t seq = u->ring[u->ring_head];
		if (u->state[seq] == IN_FLIGHT) {
			if (now - u->sent_ns[seq] < loss_ns)
				return;
			u->state[seq] = LOST;
			u->lost++;
		}
		u->ring_head = (u->ring_head + 1) % (size_t)u->o->window;
		u->ring_len--;
	}
}

/* Writes the query for A of name (random: DNS_HEX digits, then name as the suffix) with id 0
 * into out; its length, or -1 when the name does not fit or has an empty or long label. */
static int dns_query(uint8_t *out, size_t size, const char *name, bool random)
{
	size_t len = strlen(name);
	if (len > 200 || size < DNS_HEADER + len + DNS_HEX + 7)
		return -1;
	static const uint8_t head[DNS_HEADER] = {0, 0, DNS_RD, 0, 0, 1, 0, 0, 0, 0, 0, 0};
	memcpy(out, head, DNS_HEADER);
	size_t o = DNS_HEADER;
	if (random) {
		out[o++] = DNS_HEX;
		memset(out + o, '0', DNS_HEX);
		o += DNS_HEX;
	}
	const char *p = name;
	while (*p) {
		const char *dot = strchr(p, '.');
		size_t n = dot ? (size_t)(dot - p) : strlen(p);
		if (n == 0 || n > 63)
			return -1;
		out[o++] = (uint8_t)n;
		memcpy(out + o, p, n);
		o += n;
		p += n + (dot ? 1 : 0);
	}
	out[o++] = 0;
	static const uint8_t tail[4] = {0, 1, 0, 1}; /* QTYPE A, QCLASS IN */
	memcpy(out + o, tail, 4);
	return (int)(o + 4);
}

/* The UDP ASSOCIATE on a blocking control connection; fills *relay. */
static int associate(const struct lg_opts *o, int udp_fd, int *ctl, struct sockaddr_in *relay,
                     const char **err)
{
	struct sockaddr_in me;
	socklen_t len = sizeof me;
	if (getsockname(udp_fd, (struct sockaddr *)&me, &len) != 0)
		goto sys;
	*ctl = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (*ctl < 0)
		goto sys;
	struct timeval tv = {.tv_sec = (time_t)o->timeout};
	(void)setsockopt(*ctl, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	if (connect(*ctl, (const struct sockaddr *)&o->socks, sizeof o->socks) != 0)
		goto sys;
	/* The request names the address the datagrams will come from (RFC 1928
	 * section 7), which every server accepts; 0.0.0.0:0 is not. */
	struct lg_s5 s5;
	if (lg_s5_start(&s5, *ctl, LG_S5_UDP_ASSOCIATE, &me) < 0 || lg_s5_step(&s5, *ctl) != 1) {
		*err = s5.err ? s5.err : "no reply to UDP ASSOCIATE";
		return -1;
	}
	*relay = s5.bound;
	if (relay->sin_family != AF_INET) {
		*err = "the UDP relay's address is not IPv4";
		return -1;
	}
	if (relay->sin_addr.s_addr == htonl(INADDR_ANY))
		relay->sin_addr = o->socks.sin_addr; /* "the same host as the control connection" */
	return 0;
sys:
	*err = strerror(errno);
	return -1;
}

int lg_udp_run(const struct lg_opts *o)
{
	struct udp_run u = {.o = o, .fd = -1};
	int ctl = -1, status = 1;
	const char *err = NULL;
	uint8_t(*out)[DGRAM_MAX] = NULL;
	struct mmsghdr msgs[BATCH];
	struct iovec iov[BATCH];
	static uint8_t in[BATCH][DGRAM_MAX];
	u.dns = strcmp(o->mode, "dns") == 0;
	u.dns_random = u.dns && o->dns_random;
	u.plen = (size_t)o->size;
	uint8_t query[DNS_HEADER + 256 + 4];
	if (u.dns) {
		int q = dns_query(query, sizeof query, o->dns_name, u.dns_random);
		if (q < 0) {
			err = "--dns-name: a name of at most 200 bytes, labels of 1 to 63";
			goto out;
		}
		u.plen = (size_t)q;
	} else if (o->size < STAMP || o->size > DGRAM_MAX - 300) {
		err = "--size must be 8 to 1748 bytes";
		goto out;
	}
	u.state = calloc((size_t)o->count, 1);
	u.sent_ns = calloc((size_t)o->count, sizeof *u.sent_ns);
	u.ring = calloc((size_t)o->window, sizeof *u.ring);
	out = calloc(SEND_BATCH, DGRAM_MAX);
	u.fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (!u.state || !u.sent_ns || !u.ring || !out || u.fd < 0) {
		err = "out of resources";
		goto out;
	}
	struct sockaddr_in me = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	if (bind(u.fd, (struct sockaddr *)&me, sizeof me) != 0) {
		err = strerror(errno);
		goto out;
	}
	struct sockaddr_in to = o->target;
	if (o->via_socks) {
		if (associate(o, u.fd, &ctl, &to, &err) < 0)
			goto out;
		u.head = LG_S5_UDP_HEADER;
	}
	/* Connected: only the echo (or the relay) is heard, and send needs no address. */
	if (connect(u.fd, (struct sockaddr *)&to, sizeof to) != 0) {
		err = strerror(errno);
		goto out;
	}
	for (int i = 0; i < SEND_BATCH; i++) {
		if (u.head)
			lg_s5_udp_header(out[i], &o->target);
		uint8_t *p = out[i] + u.head;
		if (u.dns) {
			memcpy(p, query, u.plen);
			continue;
		}
		memset(p, 'u', (size_t)o->size);
		p[0] = (uint8_t)(TAG >> 8);
		p[1] = (uint8_t)TAG;
		p[2] = p[3] = 0;
	}
	for (int i = 0; i < BATCH; i++) {
		iov[i] = (struct iovec){.iov_base = in[i], .iov_len = DGRAM_MAX};
		msgs[i] = (struct mmsghdr){.msg_hdr = {.msg_iov = &iov[i], .msg_iovlen = 1}};
	}
	uint64_t loss_ns = (uint64_t)(o->loss_ms * 1e6);
	double cpu0 = lg_cpu_s();
	uint64_t t0 = lg_now_ns(), deadline = t0 + (uint64_t)(o->timeout * 1e9);
	uint32_t next = 0;
	bool incomplete = false;
	for (;;) {
		uint64_t now = lg_now_ns();
		udp_retire(&u, now, loss_ns);
		if (udp_fill(&u, &next, out) < 0) {
			err = strerror(errno);
			goto out;
		}
		if (u.ring_len == 0 && next == (uint32_t)o->count)
			break;
		if (now >= deadline) {
			/* Whatever has not come back by now is lost; the line says so. */
			for (int i = 0; i < o->count; i++)
				if (u.state[i] == UNSENT || u.state[i] == IN_FLIGHT) {
					u.state[i] = LOST;
					u.lost++;
				}
			incomplete = true;
			break;
		}
		/* Answers already queued are taken without a poll(2). */
		int k = recvmmsg(u.fd, msgs, BATCH, MSG_DONTWAIT, NULL);
		if (k > 0) {
			now = lg_now_ns();
			for (int i = 0; i < k; i++)
				udp_answer(&u, in[i], msgs[i].msg_len, now);
			continue;
		}
		if (u.ring_len == 0)
			continue;
		/* Wait at most until the oldest datagram in flight expires. */
		uint64_t oldest = u.sent_ns[u.ring[u.ring_head]];
		int wait_ms = (int)((oldest + loss_ns > now ? oldest + loss_ns - now : 0) / 1000000u) + 1;
		struct pollfd pfd = {.fd = u.fd, .events = POLLIN};
		(void)poll(&pfd, 1, wait_ms);
	}
	double secs = (double)(lg_now_ns() - t0) / 1e9;
	double p50 = lg_samples_pct_us(&u.lat, 50), p99 = lg_samples_pct_us(&u.lat, 99);
	char extra[64] = "";
	if (u.dns && snprintf(extra, sizeof extra, " bad=%zu names=%s", u.bad,
	                      u.dns_random ? "random" : "one") < 0)
		extra[0] = '\0';
	lg_print(o, "count=%d size=%zu window=%d secs=%.3f answered=%zu lost=%zu loss_pct=%.2f "
	            "pkt_s=%.1f p50_us=%.1f p99_us=%.1f late=%zu strays=%zu cpu_s=%.2f%s%s",
	         o->count, u.plen, o->window, secs, u.answered, u.lost,
	         100.0 * (double)u.lost / (double)o->count, (double)u.answered / secs, p50, p99,
	         u.late, u.strays, lg_cpu_s() - cpu0, extra, incomplete ? " incomplete=timeout" : "");
	status = 0;
out:
	if (status != 0)
		status = lg_fail(o, "%s", err ? err : "failed");
	if (u.fd >= 0)
		close(u.fd);
	if (ctl >= 0)
		close(ctl);
	free(u.state);
	free(u.sent_ns);
	free(u.ring);
	free(out);
	lg_samples_free(&u.lat);
	return status;
}

int lg_gro_segment(struct msghdr *mh)
{
	for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c))
		if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO &&
		    c->cmsg_len >= CMSG_LEN(sizeof(int))) {
			int size;
			memcpy(&size, CMSG_DATA(c), sizeof size);
			return size > 0 ? size : 0;
		}
	return 0;
}

void lg_put_segment(struct msghdr *mh, uint8_t *ctl, size_t ctl_size, int seg)
{
	memset(ctl, 0, ctl_size);
	mh->msg_control = ctl;
	mh->msg_controllen = CMSG_SPACE(sizeof(uint16_t));
	struct cmsghdr *c = CMSG_FIRSTHDR(mh);
	c->cmsg_level = SOL_UDP;
	c->cmsg_type = UDP_SEGMENT;
	c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
	uint16_t size = (uint16_t)seg;
	memcpy(CMSG_DATA(c), &size, sizeof size);
}
