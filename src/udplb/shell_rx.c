/* shell_rx.c - the UDP load balancer's reads: recvmmsg from clients and from each flow's backend, coalesced trains cut back into datagrams. */
#include <errno.h>
#include <netinet/udp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "udplb/shell_int.h"

/* The segment size of a coalesced train (the UDP_GRO control message of
 * a received message), or 0 when the message is one datagram. */
static size_t gro_segment(struct msghdr *mh)
{
	for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c))
		if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO &&
		    c->cmsg_len >= CMSG_LEN(sizeof(int))) {
			int seg;
			memcpy(&seg, CMSG_DATA(c), sizeof seg);
			return seg > 0 ? (size_t)seg : 0;
		}
	return 0;
}

/* Reads client datagrams in batches and feeds them to the core one at a
 * time, a coalesced train (UDP_GRO) cut back into its datagrams. A slot
 * holds the largest UDP payload, so nothing is cut short by the read; the
 * core drops what is over max_rx_datagram_size. */
void udplb_rx_read_clients(udplb_listener *l)
{
	udplb_rx *rx = &l->rx;
	bool ctl = l->wildcard || rx->gro;
	for (int round = 0; round < 4; round++) {
		for (size_t i = 0; i < UDPLB_BATCH; i++) {
			rx->iov[i] = (struct iovec){rx->buf + i * UDPLB_BATCH_SLOT, UDPLB_BATCH_SLOT};
			rx->msgs[i].msg_hdr = (struct msghdr){
				.msg_name = &rx->from[i],
				.msg_namelen = sizeof rx->from[i],
				.msg_iov = &rx->iov[i],
				.msg_iovlen = 1,
				.msg_control = ctl ? rx->ctl[i] : NULL,
				.msg_controllen = ctl ? sizeof rx->ctl[i] : 0,
			};
		}
		int n = recvmmsg(l->fd, rx->msgs, UDPLB_BATCH, MSG_DONTWAIT, NULL);
		if (n <= 0)
			return;
		udplb_flows_round_start(l); /* pooled sockets' strays first */
		udplb_tx_gather_start(l);
		for (int i = 0; i < n; i++) {
			struct msghdr *mh = &rx->msgs[i].msg_hdr;
			udplb_input in = {.kind = UDPLB_IN_CLIENT};
			if (udplb_addr_from_sockaddr(&in.u.client.src, (struct sockaddr *)mh->msg_name))
				continue;
			/* a wildcard socket learns the address sent to from IP_PKTINFO */
			if (!l->wildcard || !udplb_pktinfo_read(mh, l->port, &in.u.client.local))
				in.u.client.local = l->local;
			in.u.client.backends = l->view;
			const uint8_t *p = mh->msg_iov[0].iov_base;
			size_t len = rx->msgs[i].msg_len, seg = rx->gro ? gro_segment(mh) : 0;
			if (mh->msg_flags & MSG_TRUNC) {
				/* over the largest UDP payload: cannot happen, but if
				 * it did, one datagram the core drops as truncated */
				seg = len = (size_t)l->st->max_rx + 1;
			}
			if (seg == 0 || seg > len)
				seg = len;
			size_t off = 0;
			do { /* once for an empty datagram */
				in.u.client.payload = p + off;
				in.u.client.len = len - off < seg ? len - off : seg;
				udplb_listener_feed(l, &in);
				off += in.u.client.len;
			} while (off < len);
		}
		udplb_tx_gather_stop(l); /* before the next round reuses the buffers */
		udplb_flows_round_end(l);
		if (n < UDPLB_BATCH)
			return;
	}
}

/* Lets a flow's socket take its backend's replies as coalesced trains
 * (UDP_GRO) once the backend has shown it answers in bursts (one read
 * found more than one reply): a backend that sends a burst as one GSO send
 * (a QUIC server does) then costs one delivery and one read per burst
 * instead of per datagram. Asked only then, so a flow that never bursts
 * (DNS) still opens with three system calls. */
static void take_trains(udplb_listener *l, udplb_upstream *f)
{
	int one = 1;
	f->gro = true;
	if (!l->rx.no_gro && setsockopt(f->fd, SOL_UDP, UDP_GRO, &one, sizeof one))
		l->rx.no_gro = true; /* a kernel without it: replies come one by one */
}

/* Reads a flow's replies with recvmmsg and feeds them to the core one
 * datagram at a time, cutting a coalesced train back into the datagrams
 * it was made of (each of the segment size, the last maybe shorter). The
 * core's sends toward clients copy each datagram into the send batch, so
 * the receive buffers are free again when the next read comes. */
void udplb_rx_read_backend(udplb_listener *l, udplb_flow_id id)
{
	udplb_rx *rx = &l->rx;
	for (int total = 0; total < UDPLB_FLOW_READS_MAX;) {
		udplb_upstream *f = udplb_flows_find(l, id);
		if (!f || f->fd < 0)
			return; /* closed by the last reply (responses cap) */
		for (size_t i = 0; i < UDPLB_BATCH; i++) {
			rx->bk_iov[i] = (struct iovec){rx->bk_buf + i * UDPLB_BATCH_SLOT, UDPLB_BATCH_SLOT};
			rx->bk_msgs[i].msg_hdr = (struct msghdr){.msg_iov = &rx->bk_iov[i], .msg_iovlen = 1,
			                                         .msg_control = rx->bk_ctl[i],
			                                         .msg_controllen = sizeof rx->bk_ctl[i]};
		}
		int n = recvmmsg(f->fd, rx->bk_msgs, UDPLB_BATCH, MSG_DONTWAIT, NULL);
		if (n < 0 && errno == ECONNREFUSED) {
			/* ICMP port unreachable for an earlier send: the backend
			 * refused a datagram the kernel had taken */
			udplb_shell_drop(l, UDPLB_SHELL_DROP_SEND_ERROR);
			total++;
			continue;
		}
		if (n <= 0)
			return;
		if (n > 1 && !f->gro)
			take_trains(l, f);
		int fd = f->fd; /* f may be closed, and its slot reused, by a reply */
		bool closed = false;
		for (int i = 0; i < n; i++) {
			const uint8_t *p = rx->bk_iov[i].iov_base;
			size_t len = rx->bk_msgs[i].msg_len, seg = gro_segment(&rx->bk_msgs[i].msg_hdr);
			if (seg == 0 || seg > len)
				seg = len;
			size_t off = 0;
			do { /* once for an empty datagram */
				if (closed)
					udplb_flows_stray(l, fd); /* more than the flow's cap came */
				size_t dl = len - off < seg ? len - off : seg;
				udplb_input in = {.kind = UDPLB_IN_BACKEND,
				                  .u.backend = {.flow = id, .payload = p + off, .len = dl}};
				udplb_listener_feed(l, &in);
				off += dl;
				closed = closed || !udplb_flows_find(l, id);
			} while (off < len);
		}
		total += n;
		if (n < UDPLB_BATCH)
			return;
	}
}

bool udplb_rx_init(udplb_listener *l)
{
	l->rx.buf = malloc((size_t)UDPLB_BATCH_SLOT * UDPLB_BATCH);
	l->rx.bk_buf = malloc((size_t)UDPLB_BATCH_SLOT * UDPLB_BATCH);
	return l->rx.buf && l->rx.bk_buf;
}

void udplb_rx_free(udplb_listener *l)
{
	free(l->rx.buf);
	free(l->rx.bk_buf);
}
