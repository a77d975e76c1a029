/* shell_tx.c - the UDP load balancer's sends: gathered toward backends, batched and GSO-folded toward clients, queued when a socket is full. */
#include <errno.h>
#include <netinet/udp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "udplb/shell_int.h"

/* The most datagrams one UDP GSO send may carry (the kernel's
 * UDP_MAX_SEGMENTS), and the longest one it folds: a segment must fit the
 * path MTU, and 1400 bytes fit any Ethernet path with IPv6 headers, so a
 * refusal means no GSO here rather than a long datagram. */
#define UDPLB_GSO_SEGMENTS_MAX 64
#define UDPLB_GSO_SEGMENT_MAX 1400

typedef struct udplb_qitem {
	struct udplb_qitem *next;
	struct sockaddr_storage to; /* listener queue: the client */
	socklen_t to_len;
	size_t ctl_len;
	uint8_t ctl[CMSG_SPACE(sizeof(struct in6_pktinfo))];
	size_t payload_len; /* what the byte counters count: the PROXY prefix left out */
	size_t len;
	uint8_t data[];
} qitem;

static qitem *qitem_new(size_t len)
{
	qitem *it = malloc(sizeof *it + len);
	if (it) {
		it->next = NULL;
		it->len = len;
		it->to_len = 0;
		it->ctl_len = 0;
		it->payload_len = len;
	}
	return it;
}

static void q_push(udplb_queue *q, qitem *it)
{
	if (q->tail)
		q->tail->next = it;
	else
		q->head = it;
	q->tail = it;
	q->n++;
}

static void q_pop(udplb_queue *q)
{
	qitem *it = q->head;
	q->head = it->next;
	if (!q->head)
		q->tail = NULL;
	q->n--;
	free(it);
}

/* Counters of what the kernel took. */

static void count_to_backend(udplb_listener *l, size_t n, size_t bytes)
{
	udplb_bump(&l->ctr->datagrams_to_backends, n);
	udplb_bump(&l->ctr->bytes_to_backends, bytes);
}

static void count_to_client(udplb_listener *l, size_t n, size_t bytes)
{
	udplb_bump(&l->ctr->datagrams_to_clients, n);
	udplb_bump(&l->ctr->bytes_to_clients, bytes);
}

void udplb_tx_discard(udplb_listener *l, udplb_queue *q)
{
	while (q->head) {
		udplb_shell_drop(l, UDPLB_SHELL_DROP_QUEUE_FULL);
		q_pop(q);
	}
}

static void set_interest(udplb_listener *l, int fd, uint64_t tag, bool out)
{
	struct epoll_event ev = {.events = EPOLLIN | (out ? EPOLLOUT : 0), .data.u64 = tag};
	(void)epoll_ctl(l->epfd, EPOLL_CTL_MOD, fd, &ev);
}

static bool would_block(void)
{
	return errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS;
}

/* Whether a GSO send failed for being GSO (no kernel or device support, a
 * segment over the path MTU), not for the destination (ECONNREFUSED from
 * an ICMP error, EHOSTUNREACH, EPERM, ...). */
static bool gso_refused(void)
{
	return errno == EINVAL || errno == EIO || errno == ENOPROTOOPT || errno == EMSGSIZE ||
	       errno == EOPNOTSUPP;
}

/* Keeps a datagram the flow's socket would not take now. */
static void flow_enqueue(udplb_listener *l, udplb_upstream *f, const uint8_t *pre, size_t plen,
                         const uint8_t *payload, size_t len)
{
	if (f->q.n >= UDPLB_FLOW_QUEUE_MAX) {
		udplb_shell_drop(l, UDPLB_SHELL_DROP_QUEUE_FULL);
		return;
	}
	qitem *it = qitem_new(plen + len);
	if (!it) {
		udplb_shell_drop(l, UDPLB_SHELL_DROP_QUEUE_FULL);
		return;
	}
	memcpy(it->data, pre, plen);
	if (len)
		memcpy(it->data + plen, payload, len);
	it->payload_len = len;
	q_push(&f->q, it);
	if (!f->want_out) {
		f->want_out = true;
		set_interest(l, f->fd, (uint64_t)f->fd, true);
	}
}

void udplb_tx_send_to_backend(udplb_listener *l, const udplb_output *o)
{
	udplb_tx *tx = &l->tx;
	udplb_upstream *f = udplb_flows_find(l, o->flow);
	if (!f || f->fd < 0)
		return; /* its open failed: counted as open_failed */
	const uint8_t *pre = o->u.to_backend.prefix, *payload = o->u.to_backend.payload;
	size_t plen = o->u.to_backend.prefix_len, len = o->u.to_backend.len;
	if (tx->gathering && tx->ps_n == UDPLB_GATHER)
		udplb_tx_flush_backend_sends(l); /* the payloads stay where they are; this may queue */
	if (f->q.n) {
		flow_enqueue(l, f, pre, plen, payload, len); /* behind what waits */
		return;
	}
	if (tx->gathering) {
		udplb_pending_send *p = &tx->ps[tx->ps_n++];
		p->flow = o->flow;
		p->done = false;
		p->prefix_len = plen;
		memcpy(p->prefix, pre, plen);
		p->payload = payload;
		p->len = len;
		return;
	}
	struct iovec iov[2] = {{(void *)pre, plen}, {(void *)payload, len}};
	struct msghdr mh = {.msg_iov = plen ? iov : iov + 1, .msg_iovlen = plen ? 2 : 1};
	if (sendmsg(f->fd, &mh, MSG_DONTWAIT) >= 0) {
		count_to_backend(l, 1, len);
		return;
	}
	if (would_block())
		flow_enqueue(l, f, pre, plen, payload, len);
	else
		udplb_shell_drop(l, UDPLB_SHELL_DROP_SEND_ERROR);
}

/* Writes at `at` (zeroed, aligned for a cmsghdr) the UDP_SEGMENT control
 * message of a GSO send cut into datagrams of seg bytes; returns its space. */
static size_t put_segment(uint8_t *at, size_t seg)
{
	struct cmsghdr *c = (struct cmsghdr *)at;
	c->cmsg_level = SOL_UDP;
	c->cmsg_type = UDP_SEGMENT;
	c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
	uint16_t size = (uint16_t)seg;
	memcpy(CMSG_DATA(c), &size, sizeof size);
	return CMSG_SPACE(sizeof(uint16_t));
}

/* Sends a flow's m gathered datagrams (ps_msgs / ps_iov) as one UDP GSO
 * send when they are alike in length: the iovecs of prefix and payload
 * pairs follow each other in ps_iov, so the run is one stream of equal
 * segments. Returns whether it went (or may not be retried). */
static bool send_backend_run(udplb_listener *l, udplb_upstream *f, size_t m)
{
	udplb_tx *tx = &l->tx;
	if (tx->no_gso || m < 2 || m > UDPLB_GSO_SEGMENTS_MAX)
		return false;
	size_t seg = tx->ps_iov[0][0].iov_len + tx->ps_iov[0][1].iov_len;
	for (size_t i = 1; i < m; i++)
		if (tx->ps_iov[i][0].iov_len + tx->ps_iov[i][1].iov_len != seg)
			return false;
	if (seg == 0 || seg > UDPLB_GSO_SEGMENT_MAX || seg * m > UDPLB_DATAGRAM_MAX)
		return false;
	_Alignas(struct cmsghdr) uint8_t ctl[CMSG_SPACE(sizeof(uint16_t))] = {0};
	struct msghdr mh = {.msg_iov = &tx->ps_iov[0][0], .msg_iovlen = 2 * m,
	                    .msg_control = ctl, .msg_controllen = put_segment(ctl, seg)};
	if (sendmsg(f->fd, &mh, MSG_DONTWAIT) >= 0) {
		size_t bytes = 0;
		for (size_t i = 0; i < m; i++)
			bytes += tx->ps_iov[i][1].iov_len;
		count_to_backend(l, m, bytes);
		return true;
	}
	if (gso_refused())
		tx->no_gso = true; /* this listener sends datagram by datagram from now */
	return false; /* the run goes out by sendmmsg, which meets any other error */
}

void udplb_tx_flush_backend_sends(udplb_listener *l)
{
	udplb_tx *tx = &l->tx;
	size_t idx[UDPLB_GATHER];
	for (size_t i = 0; i < tx->ps_n; i++) {
		if (tx->ps[i].done)
			continue;
		udplb_flow_id id = tx->ps[i].flow;
		size_t m = 0;
		for (size_t j = i; j < tx->ps_n; j++) {
			udplb_pending_send *p = &tx->ps[j];
			if (p->done || p->flow != id)
				continue;
			p->done = true;
			struct iovec *iov = tx->ps_iov[m];
			iov[0] = (struct iovec){p->prefix, p->prefix_len};
			iov[1] = (struct iovec){(void *)p->payload, p->len};
			tx->ps_msgs[m].msg_hdr = (struct msghdr){.msg_iov = p->prefix_len ? iov : iov + 1,
			                                         .msg_iovlen = p->prefix_len ? 2 : 1};
			idx[m++] = j;
		}
		udplb_upstream *f = udplb_flows_find(l, id);
		if (!f || f->fd < 0)
			continue;
		if (send_backend_run(l, f, m))
			continue;
		size_t done = 0;
		while (done < m) {
			int r = sendmmsg(f->fd, tx->ps_msgs + done, (unsigned)(m - done), MSG_DONTWAIT);
			if (r > 0) {
				for (int k = 0; k < r; k++)
					count_to_backend(l, 1, tx->ps[idx[done + (size_t)k]].len);
				done += (size_t)r;
				continue;
			}
			if (r < 0 && would_block())
				break;
			udplb_shell_drop(l, UDPLB_SHELL_DROP_SEND_ERROR); /* this one failed; go on past it */
			done++;
		}
		for (; done < m; done++) {
			udplb_pending_send *p = &tx->ps[idx[done]];
			flow_enqueue(l, f, p->prefix, p->prefix_len, p->payload, p->len);
		}
	}
	tx->ps_n = 0;
}

void udplb_tx_gather_start(udplb_listener *l) { l->tx.gathering = true; }

void udplb_tx_gather_stop(udplb_listener *l)
{
	l->tx.gathering = false;
	udplb_tx_flush_backend_sends(l);
}

/* Takes a datagram toward a client back out of the counters (the batch
 * counts before it sends), and counts it dropped for reason. */
static void not_taken(udplb_listener *l, const struct msghdr *mh, unsigned reason)
{
	count_to_client(l, (size_t)-1, -(size_t)mh->msg_iov[0].iov_len); /* wraps: a subtraction */
	udplb_shell_drop(l, reason);
}

/* Keeps a datagram the listener's socket would not take now; it is counted
 * again when udplb_tx_write_clients sends it. */
static void lq_add(udplb_listener *l, const struct msghdr *mh)
{
	udplb_tx *tx = &l->tx;
	if (tx->lq.n >= UDPLB_LISTENER_QUEUE_MAX) {
		not_taken(l, mh, UDPLB_SHELL_DROP_QUEUE_FULL);
		return;
	}
	qitem *it = qitem_new(mh->msg_iov[0].iov_len);
	if (!it) {
		not_taken(l, mh, UDPLB_SHELL_DROP_QUEUE_FULL);
		return;
	}
	count_to_client(l, (size_t)-1, -(size_t)it->len);
	memcpy(it->data, mh->msg_iov[0].iov_base, it->len);
	memcpy(&it->to, mh->msg_name, mh->msg_namelen);
	it->to_len = mh->msg_namelen;
	it->ctl_len = mh->msg_controllen;
	if (it->ctl_len)
		memcpy(it->ctl, mh->msg_control, it->ctl_len);
	q_push(&tx->lq, it);
	if (!tx->want_out) {
		tx->want_out = true;
		udplb_listener_interest(l, true);
	}
}

/* Whether batch datagrams a and b can share one GSO send: one client, one
 * source address, one length. */
static bool same_run(const udplb_tx *tx, size_t a, size_t b)
{
	const struct msghdr *x = &tx->msgs[a].msg_hdr, *y = &tx->msgs[b].msg_hdr;
	return x->msg_iov[0].iov_len == y->msg_iov[0].iov_len && x->msg_namelen == y->msg_namelen &&
	       memcmp(x->msg_name, y->msg_name, x->msg_namelen) == 0 &&
	       x->msg_controllen == y->msg_controllen &&
	       (!x->msg_controllen || memcmp(x->msg_control, y->msg_control, x->msg_controllen) == 0);
}

/* Folds runs of datagrams for one client into single UDP GSO sends
 * (UDP_SEGMENT): the run goes down the stack once and is cut into its
 * datagrams below, which a burst of replies to one client makes common.
 * Fills tx->go_* and returns the number of messages. */
static size_t fold_runs(udplb_tx *tx)
{
	size_t k = 0;
	for (size_t i = 0; i < tx->n; k++) {
		size_t j = i + 1, len = tx->iov[i].iov_len;
		if (!tx->no_gso && len > 0 && len <= UDPLB_GSO_SEGMENT_MAX)
			while (j < tx->n && j - i < UDPLB_GSO_SEGMENTS_MAX &&
			       (j - i + 1) * len <= UDPLB_DATAGRAM_MAX && same_run(tx, i, j))
				j++;
		struct msghdr *mh = &tx->go_msgs[k].msg_hdr;
		*mh = tx->msgs[i].msg_hdr;
		tx->go_first[k] = i;
		tx->go_count[k] = j - i;
		if (j - i > 1) {
			mh->msg_iov = &tx->iov[i];
			mh->msg_iovlen = j - i;
			uint8_t *ctl = tx->go_ctl[k];
			memset(ctl, 0, sizeof tx->go_ctl[k]);
			if (mh->msg_controllen)
				memcpy(ctl, mh->msg_control, mh->msg_controllen);
			mh->msg_controllen += put_segment(ctl + mh->msg_controllen, len);
			mh->msg_control = ctl;
		}
		i = j;
	}
	return k;
}

/* Sends the batch toward clients with sendmmsg; what the socket will not
 * take now waits in the listener queue. A kernel that refuses GSO (or a
 * segment over the path MTU) turns it off for this listener, and the run
 * goes out datagram by datagram. */
void udplb_tx_flush_clients(udplb_listener *l)
{
	udplb_tx *tx = &l->tx;
	if (!tx->n)
		return;
	/* Counted before the send: a client that has its reply may ask for
	 * the counters at once, and must find it there. What the kernel does
	 * not take is taken back out (queued: counted when it leaves). */
	size_t bytes = 0;
	for (size_t i = 0; i < tx->n; i++)
		bytes += tx->iov[i].iov_len;
	count_to_client(l, tx->n, bytes);
	size_t n = fold_runs(tx), done = 0;
	while (done < n && !tx->lq.n) {
		int r = sendmmsg(l->fd, tx->go_msgs + done, (unsigned)(n - done), MSG_DONTWAIT);
		if (r > 0) {
			done += (size_t)r;
			continue;
		}
		if (r < 0 && would_block())
			break;
		if (tx->go_count[done] > 1) {
			/* the run one by one, in order: once one waits, the rest wait */
			if (gso_refused())
				tx->no_gso = true;
			for (size_t i = 0; i < tx->go_count[done]; i++) {
				struct msghdr *mh = &tx->msgs[tx->go_first[done] + i].msg_hdr;
				if (!tx->lq.n && sendmsg(l->fd, mh, MSG_DONTWAIT) >= 0)
					continue;
				if (tx->lq.n || would_block())
					lq_add(l, mh);
				else
					not_taken(l, mh, UDPLB_SHELL_DROP_SEND_ERROR);
			}
		} else {
			/* this one failed; go on past it */
			not_taken(l, &tx->msgs[tx->go_first[done]].msg_hdr, UDPLB_SHELL_DROP_SEND_ERROR);
		}
		done++;
	}
	for (; done < n; done++)
		for (size_t i = 0; i < tx->go_count[done]; i++)
			lq_add(l, &tx->msgs[tx->go_first[done] + i].msg_hdr);
	tx->n = 0;
}

void udplb_tx_send_to_client(udplb_listener *l, const udplb_output *o)
{
	udplb_tx *tx = &l->tx;
	if (tx->n == UDPLB_BATCH)
		udplb_tx_flush_clients(l);
	size_t i = tx->n;
	uint8_t *buf = tx->buf + i * UDPLB_BATCH_SLOT;
	size_t len = o->u.to_client.len;
	if (o->u.to_client.payload != buf && len)
		memcpy(buf, o->u.to_client.payload, len);
	tx->iov[i] = (struct iovec){buf, len};
	struct msghdr *mh = &tx->msgs[i].msg_hdr;
	*mh = (struct msghdr){
		.msg_name = &tx->to[i],
		.msg_namelen = udplb_sockaddr_for(l->family, &o->u.to_client.client, &tx->to[i]),
		.msg_iov = &tx->iov[i],
		.msg_iovlen = 1,
	};
	size_t cl = l->wildcard ? udplb_pktinfo_write(l->family, &o->u.to_client.local, tx->ctl[i],
	                                              sizeof tx->ctl[i])
	                        : 0;
	mh->msg_control = cl ? tx->ctl[i] : NULL;
	mh->msg_controllen = cl;
	tx->n++;
}

void udplb_tx_write_backend(udplb_listener *l, udplb_flow_id id)
{
	udplb_upstream *f = udplb_flows_find(l, id);
	if (!f || f->fd < 0)
		return;
	while (f->q.head) {
		qitem *it = f->q.head;
		if (send(f->fd, it->data, it->len, MSG_DONTWAIT) >= 0) {
			count_to_backend(l, 1, it->payload_len);
		} else {
			if (would_block())
				return;
			udplb_shell_drop(l, UDPLB_SHELL_DROP_SEND_ERROR);
		}
		q_pop(&f->q);
	}
	f->want_out = false;
	set_interest(l, f->fd, (uint64_t)f->fd, false);
}

void udplb_tx_write_clients(udplb_listener *l)
{
	udplb_tx *tx = &l->tx;
	while (tx->lq.head) {
		qitem *it = tx->lq.head;
		struct iovec iov = {it->data, it->len};
		struct msghdr mh = {.msg_name = &it->to, .msg_namelen = it->to_len, .msg_iov = &iov,
		                    .msg_iovlen = 1, .msg_control = it->ctl_len ? it->ctl : NULL,
		                    .msg_controllen = it->ctl_len};
		if (sendmsg(l->fd, &mh, MSG_DONTWAIT) >= 0) {
			count_to_client(l, 1, it->len);
		} else {
			if (would_block())
				return;
			udplb_shell_drop(l, UDPLB_SHELL_DROP_SEND_ERROR);
		}
		q_pop(&tx->lq);
	}
	tx->want_out = false;
	udplb_listener_interest(l, false);
}

bool udplb_tx_init(udplb_listener *l)
{
	l->tx.buf = malloc((size_t)UDPLB_BATCH_SLOT * UDPLB_BATCH);
	return l->tx.buf != NULL;
}

void udplb_tx_free(udplb_listener *l)
{
	udplb_tx_discard(l, &l->tx.lq);
	free(l->tx.buf);
}
