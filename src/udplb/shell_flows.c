/* shell_flows.c - the UDP load balancer's flows: a connected socket per flow, the owner table by descriptor, and the reuse pool's glue. */
#include <errno.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/vec.h"
#include "udplb/fdtab.h"
#include "udplb/shell_int.h"

/* An upstream socket is tagged in the flows' epoll set with its
 * descriptor, and the owner table says which flow holds it (none while it
 * waits in the reuse pool), so handing a socket to another flow costs no
 * epoll_ctl. */

/* Makes room for slot s (below max_flows), doubling. */
static udplb_upstream *slot_make(udplb_listener *l, udplb_flow_id id)
{
	udplb_flows *fl = &l->flows;
	uint32_t s = udplb_flow_slot(id);
	size_t was = fl->n_slots;
	if (vec_reserve(&fl->slots, &fl->n_slots, s, 1) < 0)
		return NULL;
	for (size_t i = was; i < fl->n_slots; i++)
		fl->slots[i] = (udplb_upstream){.fd = -1};
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
		udplb_bump(&l->st->backend_flows[l->worker][f->bi], 1);
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

udplb_pool *udplb_flows_pool_new(const udplb_state *st)
{
	/* half the worker's flows, at most 8192: descriptors held beyond
	 * max_flows, given back when a socket() finds none */
	size_t nb = st->conf.n_backends ? st->conf.n_backends : 1;
	size_t total = st->max_flows / 2 < 8192 ? st->max_flows / 2 : 8192;
	return udplb_pool_new(nb, (uint32_t)(total / nb));
}

bool udplb_flows_init(udplb_listener *l)
{
	if (!l->st->conf.reuse_sockets)
		return true;
	l->flows.pool = udplb_flows_pool_new(l->st);
	return l->flows.pool != NULL;
}

/* Closes the pooled sockets that waited too long, every second while a
 * pool is kept. */
static void pool_timer_follow(udplb_listener *l)
{
	if (l->flows.pool)
		uv_timer_start(&l->flows.pool_timer, on_pool_timer, 1000, 1000);
	else
		uv_timer_stop(&l->flows.pool_timer);
}

void udplb_flows_start(udplb_listener *l)
{
	uv_timer_init(l->loop, &l->flows.pool_timer);
	l->flows.pool_timer.data = l;
	pool_timer_follow(l);
}

void udplb_flows_swap_pool(udplb_listener *l, udplb_pool *pool)
{
	/* A pooled socket is a backend index's, and the indexes move with
	 * the list: closing them costs the next flows a socket() each. */
	reuse_flush(l);
	udplb_pool_free(l->flows.pool);
	l->flows.pool = pool;
	l->flows.pool_seen = false;
	pool_timer_follow(l);
}

void udplb_flows_stop(udplb_listener *l, uv_close_cb cb)
{
	uv_timer_stop(&l->flows.pool_timer);
	uv_close((uv_handle_t *)&l->flows.pool_timer, cb);
}

void udplb_flows_free(udplb_listener *l)
{
	udplb_flows *fl = &l->flows;
	for (size_t i = 0; i < fl->n_slots; i++)
		fl->slots[i].answered = false; /* nothing is pooled from here on */
	for (size_t i = 0; i < fl->n_slots; i++)
		if (fl->slots[i].id)
			udplb_flows_close(l, fl->slots[i].id);
	reuse_flush(l);
	udplb_pool_free(fl->pool);
	free(fl->slots);
	free(fl->owner);
}
