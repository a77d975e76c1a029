/* shell.c - the UDP load balancer's listener: recvmmsg into the core, a connected socket per flow, sendmmsg back to clients. */
#include "udplb/shell.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/log.h"
#include "runtime/listener.h"
#include "udplb/fdtab.h"
#include "udplb/shell_int.h"

enum { MSG_REFUSED, MSG_NO_STEER };
static const char *const msgs[] = {
	[MSG_REFUSED] = "udp_lb %s: the core refused an input: %s",
	[MSG_NO_STEER] = "udp_lb %s: cannot steer clients to workers by source IP (%s); the "
			 "kernel's 4-tuple hash spreads them instead, so per-IP and per-subnet "
			 "limits count per worker",
};

/* ---- the flows' sockets ---- */

/* An upstream socket is tagged in the flows' epoll set with its
 * descriptor, and the owner table says which flow holds it (none while it
 * waits in the reuse pool), so handing a socket to another flow costs no
 * epoll_ctl. */

/* Makes room for slot s (below max_flows), doubling. */
static udplb_upstream *slot_make(udplb_listener *l, udplb_flow_id id)
{
	udplb_flows *fl = &l->flows;
	uint32_t s = udplb_flow_slot(id);
	if (s >= fl->n_slots) {
		uint64_t n = fl->n_slots ? (uint64_t)fl->n_slots * 2 : 256;
		while (n <= s)
			n *= 2;
		udplb_upstream *ns = realloc(fl->slots, n * sizeof *ns);
		if (!ns)
			return NULL;
		for (uint64_t i = fl->n_slots; i < n; i++)
			ns[i] = (udplb_upstream){.fd = -1};
		fl->slots = ns;
		fl->n_slots = (uint32_t)n;
	}
	udplb_upstream *f = &fl->slots[s];
	*f = (udplb_upstream){.fd = -1, .id = id, .bi = -1};
	return f;
}

static void abort_later(udplb_listener *l, udplb_flow_id id)
{
	udplb_flows *fl = &l->flows;
	udplb_shell_drop(l, UDPLB_SHELL_DROP_OPEN_FAILED);
	if (fl->n_aborts < sizeof fl->aborts / sizeof fl->aborts[0])
		fl->aborts[fl->n_aborts++] = id;
}

bool udplb_flows_take_abort(udplb_listener *l, udplb_flow_id *id)
{
	if (!l->flows.n_aborts)
		return false;
	*id = l->flows.aborts[--l->flows.n_aborts];
	return true;
}

/* Reads and counts what came for a socket no flow owns (a datagram:
 * unknown_flow; an ICMP refusal of an earlier send: send_error), then
 * closes it: a backend that answers late or twice must not reach the next
 * flow's client, so the socket is not handed on. */
static void retire_pooled(udplb_listener *l, int fd)
{
	uint8_t b;
	for (int i = 0; i < 64; i++) {
		ssize_t r = recv(fd, &b, sizeof b, MSG_DONTWAIT | MSG_TRUNC);
		if (r >= 0)
			udplb_shell_drop(l, UDPLB_DROP_UNKNOWN_FLOW);
		else if (errno == ECONNREFUSED)
			udplb_shell_drop(l, UDPLB_SHELL_DROP_SEND_ERROR);
		else
			break;
	}
	close(fd);
}

/* Closes pooled sockets that have waited UDPLB_POOL_MAX_AGE_MS: more than
 * the current rate of new flows needs, left from a burst. */
static void reuse_expire(udplb_listener *l)
{
	uint64_t now = uv_now(l->loop);
	for (int fd; l->flows.pool && (fd = udplb_pool_take_expired(l->flows.pool, now)) >= 0;)
		close(fd);
}

static void on_pool_timer(uv_timer_t *t) { reuse_expire(t->data); }

/* Something came for a socket no flow holds, which waits in the pool: an
 * event on it, or more replies than the responses cap in the read that
 * ended its flow (those count as unknown_flow in the core). */
void udplb_flows_stray(udplb_listener *l, int fd)
{
	if (l->flows.pool && udplb_pool_forget(l->flows.pool, fd))
		retire_pooled(l, fd);
}

/* Records that flow id holds descriptor fd (UDPLB_FLOW_NONE: nobody);
 * false when the table cannot grow. */
static bool set_owner(udplb_listener *l, int fd, udplb_flow_id id)
{
	_Static_assert(UDPLB_FLOW_NONE == 0, "new owner entries are zeroed: nobody");
	udplb_flows *fl = &l->flows;
	udplb_flow_id *no = udplb_fdtab_fit(fl->owner, &fl->n_owner, sizeof *no, fd);
	if (!no)
		return false;
	fl->owner = no;
	fl->owner[fd] = id;
	return true;
}

/* Closes every pooled socket: the listener ends, or the process is out of
 * descriptors and a new flow needs one. Returns how many. */
static size_t reuse_flush(udplb_listener *l)
{
	size_t n = 0;
	for (int fd; l->flows.pool && (fd = udplb_pool_pop_any(l->flows.pool)) >= 0; n++)
		close(fd);
	return n;
}

/* Hands flow f a pooled socket of its backend: one that has been quiet
 * for UDPLB_POOL_QUIET_MS and had nothing queued when this round's client
 * datagrams were read. The flows' epoll set, read to the end right after
 * them, says so at no cost of its own; when that read did not reach the
 * end, one recv(MSG_PEEK) that finds nothing does, the only system call. */
static bool reuse_take(udplb_listener *l, udplb_upstream *f, udplb_flow_id id)
{
	udplb_flows *fl = &l->flows;
	if (!fl->pool || f->bi < 0)
		return false;
	uint64_t now = uv_now(l->loop);
	bool gro;
	for (int fd; (fd = udplb_pool_take(fl->pool, (size_t)f->bi, now, &gro)) >= 0;) {
		uint8_t b;
		if (!fl->pool_seen && (recv(fd, &b, sizeof b, MSG_DONTWAIT | MSG_PEEK) >= 0 ||
		                       (errno != EAGAIN && errno != EWOULDBLOCK))) {
			retire_pooled(l, fd);
			continue;
		}
		fl->owner[fd] = id; /* in the table since its first flow */
		f->fd = fd;
		f->gro = gro;
		udplb_bump(&l->ctr->sockets_reused, 1);
		return true;
	}
	return false;
}

/* Keeps the socket of flow f, which got all its answers, for a later flow
 * to the same backend; false when it is not to be kept. */
static bool reuse_keep(udplb_listener *l, udplb_upstream *f)
{
	if (!l->flows.pool || !f->answered || f->bi < 0 || f->q.n || f->want_out)
		return false;
	return udplb_pool_put(l->flows.pool, (size_t)f->bi, f->fd, f->gro, uv_now(l->loop));
}

/* A new socket for a flow: socket, connect, epoll_ctl, three system calls
 * (connect binds the ephemeral port itself). Out of descriptors, or of
 * ephemeral ports, with sockets pooled, the pool is closed and the call
 * tried once more. */
static int open_socket(udplb_listener *l, const udplb_addr *backend, udplb_flow_id id)
{
	struct sockaddr_storage ss;
	socklen_t len = udplb_addr_to_sockaddr(backend, &ss);
	int fd = socket(ss.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 && (errno == EMFILE || errno == ENFILE) && reuse_flush(l))
		fd = socket(ss.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = (uint64_t)fd};
	if (!set_owner(l, fd, id))
		goto fail;
	int rc = connect(fd, (struct sockaddr *)&ss, len);
	if (rc && (errno == EAGAIN || errno == EADDRNOTAVAIL) && reuse_flush(l))
		rc = connect(fd, (struct sockaddr *)&ss, len); /* the waiting sockets held the ports */
	if (rc)
		goto fail;
	if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev))
		goto fail;
	return fd;
fail:
	if ((size_t)fd < l->flows.n_owner)
		l->flows.owner[fd] = UDPLB_FLOW_NONE;
	close(fd);
	return -1;
}

void udplb_flows_open(udplb_listener *l, const udplb_output *o)
{
	udplb_upstream *f = slot_make(l, o->flow);
	if (!f) {
		abort_later(l, o->flow);
		return;
	}
	f->bi = udplb_backends_find(l->view, &o->u.open.backend);
	if (!reuse_take(l, f, o->flow)) {
		f->fd = open_socket(l, &o->u.open.backend, o->flow);
		if (f->fd < 0) {
			abort_later(l, o->flow); /* EMFILE / ENFILE: the flow goes, we stay */
			return;
		}
	}
	if (f->bi >= 0)
		udplb_bump(&l->ctr->backend_flows[f->bi], 1);
}

void udplb_flows_close(udplb_listener *l, udplb_flow_id id)
{
	udplb_upstream *f = udplb_flows_find(l, id);
	if (!f)
		return;
	udplb_tx_flush_backend_sends(l); /* what the flow said before its end goes first */
	if (f->fd >= 0) {
		l->flows.owner[f->fd] = UDPLB_FLOW_NONE;
		if (!reuse_keep(l, f))
			close(f->fd); /* the only reference: epoll forgets it without a call */
	}
	udplb_tx_discard(l, &f->q);
	*f = (udplb_upstream){.fd = -1};
}

void udplb_flows_round_start(udplb_listener *l)
{
	/* the replies this read finds are served now rather than at the next turn */
	l->flows.pool_seen = l->flows.pool && udplb_pool_size(l->flows.pool) > 0 &&
	                     udplb_listener_serve_flows(l);
}

void udplb_flows_round_end(udplb_listener *l) { l->flows.pool_seen = false; }

bool udplb_flows_init(udplb_listener *l)
{
	const udplb_group *g = l->g;
	if (!g->conf.reuse_sockets)
		return true;
	/* half the worker's flows, at most 8192: descriptors held beyond
	 * max_flows, given back when a socket() finds none */
	size_t nb = g->conf.n_backends ? g->conf.n_backends : 1;
	size_t total = g->max_flows / 2 < 8192 ? g->max_flows / 2 : 8192;
	l->flows.pool = udplb_pool_new(nb, (uint32_t)(total / nb));
	return l->flows.pool != NULL;
}

void udplb_flows_start(udplb_listener *l)
{
	uv_timer_init(l->loop, &l->flows.pool_timer);
	l->flows.pool_timer.data = l;
	if (l->flows.pool)
		uv_timer_start(&l->flows.pool_timer, on_pool_timer, 1000, 1000);
}

void udplb_flows_stop(udplb_listener *l, uv_close_cb cb)
{
	uv_timer_stop(&l->flows.pool_timer);
	uv_close((uv_handle_t *)&l->flows.pool_timer, cb);
}

void udplb_flows_free(udplb_listener *l)
{
	udplb_flows *fl = &l->flows;
	for (uint32_t i = 0; i < fl->n_slots; i++)
		fl->slots[i].answered = false; /* nothing is pooled from here on */
	for (uint32_t i = 0; i < fl->n_slots; i++)
		if (fl->slots[i].id)
			udplb_flows_close(l, fl->slots[i].id);
	reuse_flush(l);
	udplb_pool_free(fl->pool);
	free(fl->slots);
	free(fl->owner);
}

/* ---- sends ---- */

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

/* ---- reads ---- */

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
				seg = len = (size_t)l->g->max_rx + 1;
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

/* ---- acting on the core's outputs ---- */

static void on_timer(uv_timer_t *t);

static void count_metric(udplb_listener *l, const udplb_output *o)
{
	if (o->u.metric.kind == UDPLB_METRIC_FLOW_CREATED) {
		udplb_bump(&l->ctr->flows_created, 1);
		udplb_bump(&l->ctr->active_flows, 1);
		return;
	}
	udplb_bump(&l->ctr->flows_evicted, 1);
	udplb_bump(&l->ctr->active_flows, (uint64_t)-1);
	if ((unsigned)o->u.metric.reason < UDPLB_CLOSE_COUNT)
		udplb_bump(&l->ctr->evicted[o->u.metric.reason], 1);
	udplb_bump(&l->ctr->flow_duration_ms, o->u.metric.duration_ms);
	/* its close, which follows, may pool its socket: only when it ended
	 * by its cap with an answer for every request, so no answer the
	 * backend still owes can reach a later flow */
	udplb_upstream *f = udplb_flows_find(l, o->flow);
	if (f && o->u.metric.reason == UDPLB_CLOSE_RESPONSES &&
	    o->u.metric.requests <= o->u.metric.responses)
		f->answered = true;
}

static void act(udplb_listener *l, const udplb_output *o)
{
	switch (o->kind) {
	case UDPLB_OUT_OPEN_UPSTREAM:
		udplb_flows_open(l, o);
		break;
	case UDPLB_OUT_SEND_TO_BACKEND:
		udplb_tx_send_to_backend(l, o);
		break;
	case UDPLB_OUT_SEND_TO_CLIENT:
		udplb_tx_send_to_client(l, o);
		break;
	case UDPLB_OUT_ARM_TIMER: {
		uint64_t now = uv_now(l->loop), at = o->u.arm.deadline_ms;
		uv_timer_start(&l->timer, on_timer, at > now ? at - now : 0, 0);
		break;
	}
	case UDPLB_OUT_METRIC:
		count_metric(l, o);
		break;
	case UDPLB_OUT_CLOSE_FLOW:
		udplb_flows_close(l, o->flow);
		break;
	case UDPLB_OUT_DROP:
		udplb_shell_drop(l, o->u.drop.reason);
		break;
	}
}

static void drain(udplb_listener *l)
{
	udplb_output o;
	while (udplb_manager_poll(l->m, &o))
		act(l, &o);
}

void udplb_listener_feed(udplb_listener *l, const udplb_input *in)
{
	int rc = udplb_manager_input(l->m, in, uv_now(l->loop));
	if (rc) {
		log_warn("udplb", msgs[MSG_REFUSED], l->g->in->tag, udplb_strerror(rc));
		return;
	}
	drain(l);
	for (udplb_flow_id id; udplb_flows_take_abort(l, &id);) {
		udplb_input ab = {.kind = UDPLB_IN_CONFIG,
		                  .u.config = {.kind = UDPLB_CFG_ABORT_FLOW, .flow = id}};
		if (udplb_manager_input(l->m, &ab, uv_now(l->loop)) == 0)
			drain(l);
	}
}

static void on_timer(uv_timer_t *t)
{
	udplb_listener *l = t->data;
	udplb_input in = {.kind = UDPLB_IN_TIMEOUT};
	udplb_listener_feed(l, &in);
}

/* ---- readiness ---- */

static void sync_health(udplb_listener *l)
{
	uint64_t gen = atomic_load_explicit(&l->g->health_gen, memory_order_acquire);
	if (gen == l->health_gen)
		return;
	l->health_gen = gen;
	for (size_t i = 0; i < l->g->conf.n_backends; i++)
		if (udplb_backends_set_health(l->view, i, atomic_load(&l->g->up[i]) != 0))
			return; /* i is always in range: the view holds the group's list */
}

static void on_listener(uv_poll_t *p, int status, int events);

void udplb_listener_interest(udplb_listener *l, bool out)
{
	uv_poll_start(&l->lpoll, UV_READABLE | (out ? UV_WRITABLE : 0), on_listener);
}

/* The listener socket is ready: libuv watches it on its own, so client
 * datagrams cost the loop's epoll_wait and no second one. */
static void on_listener(uv_poll_t *p, int status, int events)
{
	udplb_listener *l = p->data;
	sync_health(l);
	if (events & UV_WRITABLE)
		udplb_tx_write_clients(l);
	if ((events & UV_READABLE) || status < 0)
		udplb_rx_read_clients(l);
	udplb_tx_flush_clients(l);
}

bool udplb_listener_serve_flows(udplb_listener *l)
{
	struct epoll_event evs[64];
	int n = epoll_wait(l->epfd, evs, 64, 0);
	for (int i = 0; i < n; i++) {
		uint64_t tag = evs[i].data.u64;
		udplb_flow_id id = udplb_flows_owner(l, (int)tag);
		if (id == UDPLB_FLOW_NONE) {
			udplb_flows_stray(l, (int)tag);
			continue;
		}
		if (evs[i].events & EPOLLOUT)
			udplb_tx_write_backend(l, id);
		if (evs[i].events & (EPOLLIN | EPOLLERR))
			udplb_rx_read_backend(l, id);
	}
	return n >= 0 && n < 64;
}

/* Some flow sockets are ready: their epoll set's descriptor is what libuv
 * watches. */
static void on_ready(uv_poll_t *p, int status, int events)
{
	(void)status;
	(void)events;
	udplb_listener *l = p->data;
	sync_health(l);
	udplb_listener_serve_flows(l);
	udplb_tx_flush_clients(l);
}

/* ---- open and close ---- */

static void listener_free(udplb_listener *l)
{
	if (l->fd >= 0)
		close(l->fd);
	if (l->epfd >= 0)
		close(l->epfd);
	udplb_flows_free(l);
	udplb_tx_free(l);
	udplb_rx_free(l);
	udplb_backends_del(l->view);
	udplb_manager_del(l->m);
	free(l);
}

static int setup_socket(udplb_listener *l, const struct sockaddr_storage *ss, size_t worker_index)
{
	int one = 1;
	socklen_t len = ss->ss_family == AF_INET ? sizeof(struct sockaddr_in)
	                                          : sizeof(struct sockaddr_in6);
	l->fd = socket(ss->ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (l->fd < 0)
		return -errno;
	l->family = ss->ss_family;
	if (setsockopt(l->fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one))
		return -errno;
	if (l->wildcard) {
		if (l->family == AF_INET6 &&
		    setsockopt(l->fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, &one, sizeof one))
			return -errno;
		/* v4 datagrams on a dual-stack socket report IP_PKTINFO */
		if (setsockopt(l->fd, IPPROTO_IP, IP_PKTINFO, &one, sizeof one))
			return -errno;
	}
	/* Bursts a client sends as one GSO send (QUIC stacks do), or a NIC's
	 * GRO coalesces, arrive as one train: one read, one delivery. */
	l->rx.gro = setsockopt(l->fd, SOL_UDP, UDP_GRO, &one, sizeof one) == 0;
	/* A deeper queue absorbs bursts; the kernel caps it at rmem_max. */
	int rcv = 4 << 20;
	(void)setsockopt(l->fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
	(void)setsockopt(l->fd, SOL_SOCKET, SO_SNDBUF, &rcv, sizeof rcv);
	if (bind(l->fd, (const struct sockaddr *)ss, len))
		return -errno;
	/* by subnet when a per-subnet limit needs a subnet on one worker */
	const udplb_cluster *c = &l->g->conf.cluster;
	bool by_subnet = c->max_flows_per_subnet > 0;
	if (l->g->n_workers > 1 && worker_index == 0 &&
	    udplb_steer_by_source(l->fd, l->g->n_workers, by_subnet ? c->subnet_prefix_v4 : 32,
	                          by_subnet ? c->subnet_prefix_v6 : 128))
		log_warn("udplb", msgs[MSG_NO_STEER], l->g->in->tag, strerror(errno));
	struct sockaddr_storage bound;
	socklen_t blen = sizeof bound;
	if (getsockname(l->fd, (struct sockaddr *)&bound, &blen) ||
	    udplb_addr_from_sockaddr(&l->local, (struct sockaddr *)&bound))
		return -errno;
	l->port = l->local.port;
	l->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (l->epfd < 0)
		return -errno;
	return 0;
}

static bool is_wildcard(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		return ((const struct sockaddr_in *)ss)->sin_addr.s_addr == htonl(INADDR_ANY);
	return memcmp(&((const struct sockaddr_in6 *)ss)->sin6_addr, &in6addr_any,
	              sizeof in6addr_any) == 0;
}

udplb_listener *udplb_listener_open(udplb_group *g, uv_loop_t *loop, size_t worker_index,
                                    const char *ip, uint16_t port, char *err, size_t err_size)
{
	struct sockaddr_storage ss;
	if (listener_addr(ip, port, &ss, err, err_size))
		return NULL;
	udplb_listener *l = calloc(1, sizeof *l);
	if (!l) {
		listener_failed(err, err_size, ip, port, uv_strerror(UV_ENOMEM));
		return NULL;
	}
	l->g = g;
	l->ctr = udplb_group_counters(g, worker_index);
	l->loop = loop;
	l->fd = l->epfd = -1;
	l->wildcard = is_wildcard(&ss);
	udplb_manager_config mc = {.max_flows = g->max_flows, .max_rx_datagram_size = g->max_rx,
	                           .seed = g->seed, .checks = UDPLB_CHECK_CHEAP};
	int rc = udplb_rx_init(l) && udplb_tx_init(l) && udplb_flows_init(l) ? 0 : UV_ENOMEM;
	if (!rc && (udplb_manager_new(&l->m, &mc) ||
	            udplb_backends_new(&l->view, g->conf.maglev_size) ||
	            udplb_backends_set(l->view, g->conf.backends, g->conf.n_backends)))
		rc = UV_ENOMEM;
	if (!rc) {
		udplb_input in = {.kind = UDPLB_IN_CONFIG,
		                  .u.config = {.kind = UDPLB_CFG_SET_CLUSTER, .cluster = g->conf.cluster}};
		if (udplb_manager_input(l->m, &in, uv_now(loop)))
			rc = UV_EINVAL;
		else
			drain(l);
	}
	l->health_gen = (uint64_t)-1;
	if (!rc)
		rc = setup_socket(l, &ss, worker_index);
	if (rc) {
		listener_failed(err, err_size, ip, port, uv_strerror(rc));
		listener_free(l);
		return NULL;
	}
	uv_timer_init(loop, &l->timer);
	l->timer.data = l;
	udplb_flows_start(l);
	uv_poll_init(loop, &l->lpoll, l->fd);
	l->lpoll.data = l;
	udplb_listener_interest(l, false);
	uv_poll_init(loop, &l->poll, l->epfd);
	l->poll.data = l;
	l->open_handles = 4;
	uv_poll_start(&l->poll, UV_READABLE, on_ready);
	return l;
}

uint16_t udplb_listener_port(const udplb_listener *l) { return l->port; }

static void on_closed(uv_handle_t *h)
{
	udplb_listener *l = h->data;
	if (--l->open_handles == 0)
		listener_free(l);
}

void udplb_listener_close(udplb_listener *l)
{
	if (!l)
		return;
	udplb_input in = {.kind = UDPLB_IN_CONFIG, .u.config = {.kind = UDPLB_CFG_CLOSE_ALL}};
	udplb_listener_feed(l, &in);
	udplb_tx_flush_clients(l);
	uv_timer_stop(&l->timer);
	uv_close((uv_handle_t *)&l->timer, on_closed);
	udplb_flows_stop(l, on_closed);
	uv_close((uv_handle_t *)&l->poll, on_closed);
	uv_close((uv_handle_t *)&l->lpoll, on_closed);
}
