/* lb.c - the lb mode: datagrams straight to a UDP load balancer (or an echo) from F client
 * sockets at once, each socket one flow; a flow's socket is closed and a new one opened after
 * --per-flow datagrams (1 = DNS-like short flows, 0 = long flows that stream until the end),
 * or, with --reuse, kept for the next flow (for a balancer that closes a flow after its
 * answer, the next datagram from that port is a new flow). With --new-addrs, one socket sends
 * every flow (one datagram each) from a source address of its own, 127.1.0.0 + the flow's
 * number, chosen per datagram with IP_PKTINFO: a new client per flow, as a busy DNS service
 * sees them, without the load tool paying for a socket per flow. */
#include <errno.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "loadgen.h"
#include "stats.h"

/* Datagrams read per recvmmsg(2), and sent per sendmmsg(2). */
#define BATCH 32
#define DGRAM_MAX 2048
/* A receive buffer with --gro: a coalesced train holds up to 64 KiB. */
#define TRAIN_MAX 65536
/* Every payload starts with this tag and the datagram's sequence number. */
#define TAG 0x6c62u /* "lb" */
#define STAMP 8
#define MAX_EVENTS 256
/* --new-addrs: flow f comes from ADDR_BASE + f, all inside 127.0.0.0/8. */
#define ADDR_BASE 0x7f010000u
#define ADDR_FLOWS 0x00fe0000u

enum dstate { UNSENT, IN_FLIGHT, ANSWERED, LOST };

/* One client socket: one flow as the balancer sees it (its source IP:port). */
struct slot {
	int fd;
	int sent;     /* datagrams sent on this socket */
	int inflight; /* of those, neither answered nor given up */
};

struct lb_run {
	const struct lg_opts *o;
	int ep;
	struct slot *slots;
	int slot_window;      /* datagrams in flight per socket */
	uint8_t *state;       /* enum dstate per datagram */
	uint64_t *sent_ns;
	uint32_t *slot_of;    /* which socket (--new-addrs: which source address) each
	                       * datagram went out on */
	bool by_addr;         /* --new-addrs: one socket, slot 0, counts the whole window */
	uint32_t *ring;       /* datagrams sent and not yet retired, oldest first */
	size_t ring_cap, ring_head, ring_len;
	size_t answered, lost, late, strays, flows, open_errors;
	struct lg_samples lat;
};

/* Opens slot i's socket: from 127.0.0.<1 + flow % src_ips>, connected to
 * the target, in the epoll set. 0, or -1 with errno. */
static int slot_open(struct lb_run *u, int i)
{
	struct slot *s = &u->slots[i];
	s->fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (s->fd < 0)
		return -1;
	if (u->o->src_ips > 1) {
		struct sockaddr_in me = {
			.sin_family = AF_INET,
			.sin_addr.s_addr = htonl(INADDR_LOOPBACK + (uint32_t)(u->flows % (size_t)u->o->src_ips)),
		};
		if (bind(s->fd, (struct sockaddr *)&me, sizeof me) != 0)
			goto fail;
	}
	int one = 1;
	if (u->o->gro && setsockopt(s->fd, SOL_UDP, UDP_GRO, &one, sizeof one) != 0)
		goto fail;
	if (connect(s->fd, (const struct sockaddr *)&u->o->target, sizeof u->o->target) != 0)
		goto fail;
	struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
	if (epoll_ctl(u->ep, EPOLL_CTL_ADD, s->fd, &ev) != 0)
		goto fail;
	s->sent = s->inflight = 0;
	u->flows++;
	return 0;
fail:;
	int e = errno;
	close(s->fd);
	s->fd = -1;
	errno = e;
	return -1;
}

/* Records datagram seq as sent at now, on slot (or to client) who: in
 * flight and at the back of the window. */
static void lb_sent(struct lb_run *u, uint32_t seq, uint32_t who, uint64_t now)
{
	u->state[seq] = IN_FLIGHT;
	u->sent_ns[seq] = now;
	u->slot_of[seq] = who;
	u->ring[(u->ring_head + u->ring_len) % u->ring_cap] = seq;
	u->ring_len++;
}

/* The run's time is up: whatever is unsent or unanswered is lost. */
static void lb_give_up(struct lb_run *u)
{
	for (int i = 0; i < u->o->count; i++)
		if (u->state[i] == UNSENT || u->state[i] == IN_FLIGHT) {
			u->state[i] = LOST;
			u->lost++;
		}
}

/* How long to wait for answers: until the oldest datagram in flight turns
 * lost (at least 1 ms, 1 ms when none is in flight). */
static int lb_wait_ms(const struct lb_run *u, uint64_t now, uint64_t loss_ns)
{
	if (u->ring_len == 0)
		return 1;
	uint64_t oldest = u->sent_ns[u->ring[u->ring_head]];
	return (int)((oldest + loss_ns > now ? oldest + loss_ns - now : 0) / 1000000u) + 1;
}

/* Sends on slot i while its window, its flow and the run have room. */
static void slot_fill(struct lb_run *u, int i, uint32_t *next, uint8_t (*out)[DGRAM_MAX])
{
	struct slot *s = &u->slots[i];
	const struct lg_opts *o = u->o;
	struct mmsghdr m[BATCH];
	struct iovec iov[BATCH];
	uint32_t first = *next;
	int k = 0;
	while (k < BATCH && *next < (uint32_t)o->count && s->inflight + k < u->slot_window &&
	       (o->per_flow == 0 || s->sent + k < o->per_flow)) {
		uint32_t seq = (*next)++;
		uint8_t *p = out[k];
		for (int b = 0; b < 4; b++)
			p[4 + b] = (uint8_t)(seq >> (24 - 8 * b));
		iov[k] = (struct iovec){.iov_base = out[k], .iov_len = (size_t)o->size};
		m[k] = (struct mmsghdr){.msg_hdr = {.msg_iov = &iov[k], .msg_iovlen = 1}};
		k++;
	}
	if (k == 0)
		return;
	if (k == 1) {
		(void)send(s->fd, out[0], (size_t)o->size, 0);
	} else if (o->gso) {
		/* the burst as one train cut into its datagrams below us */
		_Alignas(struct cmsghdr) uint8_t ctl[CMSG_SPACE(sizeof(uint16_t))];
		struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)k};
		lg_put_segment(&mh, ctl, sizeof ctl, o->size);
		(void)sendmsg(s->fd, &mh, 0);
	} else {
		(void)sendmmsg(s->fd, m, (unsigned)k, 0);
	}
	/* A datagram the kernel would not take (or refused with ECONNREFUSED)
	 * is simply lost, as on a wire. */
	uint64_t now = lg_now_ns();
	for (int j = 0; j < k; j++)
		lb_sent(u, first + (uint32_t)j, (uint32_t)i, now);
	s->sent += k;
	s->inflight += k;
}

/* An answer that came back on slot i to client who (the slot itself, or
 * with --new-addrs the source address's number). */
static void lb_answer(struct lb_run *u, int i, uint32_t who, const uint8_t *p, size_t n,
                      uint64_t now)
{
	if (n != (size_t)u->o->size || p[0] != (uint8_t)(TAG >> 8) || p[1] != (uint8_t)TAG) {
		u->strays++;
		return;
	}
	uint32_t seq = (uint32_t)p[4] << 24 | (uint32_t)p[5] << 16 | (uint32_t)p[6] << 8 | p[7];
	if (seq >= (uint32_t)u->o->count || u->state[seq] == UNSENT ||
	    u->state[seq] == ANSWERED || u->slot_of[seq] != who) {
		u->strays++; /* duplicated, invented or crossed over to another flow */
		return;
	}
	if (u->state[seq] == LOST) {
		u->late++;
		return;
	}
	u->state[seq] = ANSWERED;
	u->answered++;
	u->slots[i].inflight--;
	if (lg_samples_add(&u->lat, now - u->sent_ns[seq]) < 0)
		u->strays++;
}

/* Drops answered and expired datagrams from the front of the window. */
static void lb_retire(struct lb_run *u, uint64_t now, uint64_t loss_ns)
{
	while (u->ring_len > 0) {
		uint32_t seq = u->ring[u->ring_head];
		if (u->state[seq] == IN_FLIGHT) {
			if (now - u->sent_ns[seq] < loss_ns)
				return;
			u->state[seq] = LOST;
			u->lost++;
			u->slots[u->by_addr ? 0 : u->slot_of[seq]].inflight--;
		}
		u->ring_head = (u->ring_head + 1) % u->ring_cap;
		u->ring_len--;
	}
}

/* The header destination of a datagram read with IP_PKTINFO on, in host
 * order, or 0 when the control message is missing. */
static uint32_t pktinfo_dst(struct msghdr *mh)
{
	for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c))
		if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO) {
			struct in_pktinfo pi;
			memcpy(&pi, CMSG_DATA(c), sizeof pi);
			return ntohl(pi.ipi_addr.s_addr);
		}
	return 0;
}

/* --new-addrs: one unconnected socket; flow seq is one datagram sent from
 * ADDR_BASE + seq (IP_PKTINFO picks the source per datagram, up to BATCH
 * per sendmmsg), and its answer must come back to that address. The window
 * counts on slot 0. 0, or -1 with errno when the socket cannot be set up. */
static int addrs_run(struct lb_run *u, uint8_t (*out)[DGRAM_MAX], uint64_t loss_ns,
                     uint64_t deadline, bool *incomplete)
{
	const struct lg_opts *o = u->o;
	struct slot *s = &u->slots[0];
	s->fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (s->fd < 0)
		return -1;
	int one = 1;
	struct sockaddr_in any = {.sin_family = AF_INET};
	struct epoll_event ev = {.events = EPOLLIN};
	if (setsockopt(s->fd, IPPROTO_IP, IP_PKTINFO, &one, sizeof one) != 0 ||
	    bind(s->fd, (struct sockaddr *)&any, sizeof any) != 0 ||
	    epoll_ctl(u->ep, EPOLL_CTL_ADD, s->fd, &ev) != 0)
		return -1; /* the caller closes slot 0 */
	struct mmsghdr m[BATCH];
	struct iovec iov[BATCH];
	static uint8_t in[BATCH][DGRAM_MAX];
	static _Alignas(struct cmsghdr) uint8_t ctl[BATCH][CMSG_SPACE(sizeof(struct in_pktinfo))];
	uint32_t next = 0, count = (uint32_t)o->count;
	for (;;) {
		uint64_t now = lg_now_ns();
		lb_retire(u, now, loss_ns);
		while (next < count && s->inflight < o->window) {
			int k = 0;
			while (k < BATCH && next + (uint32_t)k < count && s->inflight + k < o->window) {
				uint32_t seq = next + (uint32_t)k;
				uint8_t *p = out[k];
				for (int b = 0; b < 4; b++)
					p[4 + b] = (uint8_t)(seq >> (24 - 8 * b));
				iov[k] = (struct iovec){.iov_base = p, .iov_len = (size_t)o->size};
				memset(ctl[k], 0, sizeof ctl[k]);
				m[k] = (struct mmsghdr){.msg_hdr = {
					.msg_name = (void *)&o->target, .msg_namelen = sizeof o->target,
					.msg_iov = &iov[k], .msg_iovlen = 1,
					.msg_control = ctl[k], .msg_controllen = sizeof ctl[k]}};
				struct cmsghdr *c = CMSG_FIRSTHDR(&m[k].msg_hdr);
				c->cmsg_level = IPPROTO_IP;
				c->cmsg_type = IP_PKTINFO;
				c->cmsg_len = CMSG_LEN(sizeof(struct in_pktinfo));
				struct in_pktinfo pi = {.ipi_spec_dst.s_addr = htonl(ADDR_BASE + seq)};
				memcpy(CMSG_DATA(c), &pi, sizeof pi);
				k++;
			}
			/* what the kernel would not take is lost, as on a wire;
			 * but a first send refused outright (no such local
			 * address, say) is a run that cannot work */
			if (sendmmsg(s->fd, m, (unsigned)k, 0) < 0 && next == 0 && errno != EAGAIN &&
			    errno != EWOULDBLOCK && errno != ENOBUFS)
				return -1;
			for (int j = 0; j < k; j++, next++)
				lb_sent(u, next, next, now);
			s->inflight += k;
			u->flows += (size_t)k;
		}
		if (u->ring_len == 0 && next == count)
			return 0;
		if (now >= deadline) {
			lb_give_up(u);
			*incomplete = true;
			return 0;
		}
		struct epoll_event got;
		if (epoll_wait(u->ep, &got, 1, lb_wait_ms(u, now, loss_ns)) <= 0)
			continue;
		for (int j = 0; j < BATCH; j++) {
			iov[j] = (struct iovec){.iov_base = in[j], .iov_len = DGRAM_MAX};
			m[j] = (struct mmsghdr){.msg_hdr = {.msg_iov = &iov[j], .msg_iovlen = 1,
			                                    .msg_control = ctl[j],
			                                    .msg_controllen = sizeof ctl[j]}};
		}
		int n = recvmmsg(s->fd, m, BATCH, MSG_DONTWAIT, NULL);
		now = lg_now_ns();
		for (int j = 0; j < n; j++)
			lb_answer(u, 0, pktinfo_dst(&m[j].msg_hdr) - ADDR_BASE, in[j], m[j].msg_len, now);
	}
}

int lg_lb_run(const struct lg_opts *o)
{
	struct lb_run u = {.o = o, .ep = -1};
	int status = 1;
	const char *err = NULL;
	uint8_t(*out)[DGRAM_MAX] = NULL;
	struct mmsghdr msgs[BATCH];
	struct iovec iov[BATCH];
	static uint8_t in[BATCH][TRAIN_MAX];
	static _Alignas(struct cmsghdr) uint8_t ctl[BATCH][CMSG_SPACE(sizeof(int))];
	if (o->size < STAMP || o->size > DGRAM_MAX) {
		err = "--size must be 8 to 2048 bytes";
		goto out;
	}
	if (o->new_addrs && (o->per_flow != 1 || o->reuse || o->gso || o->gro ||
	                     o->count > (int)ADDR_FLOWS)) {
		err = "--new-addrs sends one datagram per flow (--per-flow 1, no --reuse, --gro or "
		      "--gso) and at most 16646144 flows";
		goto out;
	}
	u.by_addr = o->new_addrs;
	int flows = o->flows;
	u.slot_window = o->window / flows > 0 ? o->window / flows : 1;
	if (o->per_flow > 0 && u.slot_window > o->per_flow)
		u.slot_window = o->per_flow;
	/* Room for every datagram: the windows are per socket, so answered
	 * datagrams may wait behind a slow one at the head for a long time. */
	u.ring_cap = (size_t)o->count;
	u.state = calloc((size_t)o->count, 1);
	u.sent_ns = calloc((size_t)o->count, sizeof *u.sent_ns);
	u.slot_of = calloc((size_t)o->count, sizeof *u.slot_of);
	u.ring = calloc(u.ring_cap, sizeof *u.ring);
	u.slots = calloc((size_t)flows, sizeof *u.slots);
	out = calloc(BATCH, DGRAM_MAX);
	u.ep = epoll_create1(EPOLL_CLOEXEC);
	if (!u.state || !u.sent_ns || !u.slot_of || !u.ring || !u.slots || !out || u.ep < 0) {
		err = "out of resources";
		goto out;
	}
	for (int i = 0; i < flows; i++)
		u.slots[i].fd = -1;
	for (int i = 0; i < BATCH; i++) {
		memset(out[i], 'b', (size_t)o->size);
		out[i][0] = (uint8_t)(TAG >> 8);
		out[i][1] = (uint8_t)TAG;
		out[i][2] = out[i][3] = 0;
		iov[i] = (struct iovec){.iov_base = in[i], .iov_len = o->gro ? TRAIN_MAX : DGRAM_MAX};
	}
	uint64_t loss_ns = (uint64_t)(o->loss_ms * 1e6);
	double cpu0 = lg_cpu_s();
	uint64_t t0 = lg_now_ns(), deadline = t0 + (uint64_t)(o->timeout * 1e9);
	uint32_t next = 0;
	bool incomplete = false;
	struct epoll_event evs[MAX_EVENTS];
	if (o->new_addrs) {
		if (addrs_run(&u, out, loss_ns, deadline, &incomplete) != 0) {
			err = strerror(errno);
			goto out;
		}
	} else for (;;) {
		uint64_t now = lg_now_ns();
		lb_retire(&u, now, loss_ns);
		for (int i = 0; i < flows; i++) {
			struct slot *s = &u.slots[i];
			if (next >= (uint32_t)o->count && (s->fd < 0 || s->inflight == 0))
				continue; /* nothing left to send: finished flows stay as they are */
			if (s->fd >= 0 && o->per_flow > 0 && s->sent >= o->per_flow && s->inflight == 0) {
				if (o->reuse) {
					/* The balancer closed the flow after its answer
					 * (responses = 1): the same port opens a new one. */
					s->sent = 0;
					u.flows++;
				} else {
					close(s->fd); /* the next flow is a new socket */
					s->fd = -1;
				}
				if (o->gap_ms > 0) {
					/* a pause between flows, for counting calls, not speed */
					struct timespec ts = {o->gap_ms / 1000, (o->gap_ms % 1000) * 1000000L};
					nanosleep(&ts, NULL);
				}
			}
			if (s->fd < 0 && next < (uint32_t)o->count && slot_open(&u, i) < 0) {
				if (errno != EMFILE && errno != ENFILE && errno != EADDRINUSE &&
				    errno != EAGAIN) {
					err = strerror(errno);
					goto out;
				}
				u.open_errors++; /* tried again on the next turn */
				continue;
			}
			if (s->fd >= 0)
				slot_fill(&u, i, &next, out);
		}
		if (u.ring_len == 0 && next == (uint32_t)o->count)
			break;
		if (now >= deadline) {
			lb_give_up(&u);
			incomplete = true;
			break;
		}
		int k = epoll_wait(u.ep, evs, MAX_EVENTS, lb_wait_ms(&u, now, loss_ns));
		if (k <= 0)
			continue;
		now = lg_now_ns();
		for (int e = 0; e < k; e++) {
			int i = (int)evs[e].data.u32;
			if (u.slots[i].fd < 0)
				continue;
			/* Level-triggered: what one read leaves is reported again. */
			for (int j = 0; j < BATCH; j++)
				msgs[j] = (struct mmsghdr){.msg_hdr = {
					.msg_iov = &iov[j], .msg_iovlen = 1,
					.msg_control = o->gro ? ctl[j] : NULL,
					.msg_controllen = o->gro ? sizeof ctl[j] : 0}};
			int n = recvmmsg(u.slots[i].fd, msgs, BATCH, MSG_DONTWAIT, NULL);
			for (int j = 0; j < n; j++) {
				/* a train (--gro) is cut back into its datagrams */
				size_t len = msgs[j].msg_len, seg = (size_t)lg_gro_segment(&msgs[j].msg_hdr);
				if (seg == 0 || seg > len)
					seg = len;
				size_t off = 0;
				do {
					size_t dl = len - off < seg ? len - off : seg;
					lb_answer(&u, i, (uint32_t)i, in[j] + off, dl, now);
					off += dl;
				} while (off < len);
			}
		}
	}
	double secs = (double)(lg_now_ns() - t0) / 1e9;
	double p50 = lg_samples_pct_us(&u.lat, 50), p99 = lg_samples_pct_us(&u.lat, 99);
	lg_print(o, "count=%d size=%d flows=%d per_flow=%d reuse=%d new_addrs=%d gro=%d gso=%d window=%d src_ips=%d "
	            "secs=%.3f "
	            "answered=%zu lost=%zu loss_pct=%.2f pkt_s=%.1f new_flows=%zu flows_s=%.1f "
	            "p50_us=%.1f p99_us=%.1f late=%zu strays=%zu open_errors=%zu cpu_s=%.2f%s",
	         o->count, o->size, o->new_addrs ? o->window : flows, o->per_flow, o->reuse,
	         o->new_addrs, o->gro, o->gso,
	         o->new_addrs ? o->window : u.slot_window * flows,
	         o->src_ips,
	         secs,
	         u.answered, u.lost, 100.0 * (double)u.lost / (double)o->count,
	         (double)u.answered / secs, u.flows, (double)u.flows / secs, p50, p99, u.late,
	         u.strays, u.open_errors, lg_cpu_s() - cpu0, incomplete ? " incomplete=timeout" : "");
	status = 0;
out:
	if (status != 0)
		status = lg_fail(o, "%s", err ? err : "failed");
	if (u.slots)
		for (int i = 0; i < o->flows; i++)
			if (u.slots[i].fd >= 0)
				close(u.slots[i].fd);
	if (u.ep >= 0)
		close(u.ep);
	free(u.state);
	free(u.sent_ns);
	free(u.slot_of);
	free(u.ring);
	free(u.slots);
	free(out);
	lg_samples_free(&u.lat);
	return status;
}
