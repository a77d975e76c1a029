/* shell.c - the UDP load balancer's listener: open and close, the core's inputs and outputs, the readiness callbacks. */
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
#include "udplb/shell_int.h"

enum { MSG_REFUSED, MSG_NO_STEER, MSG_RESTEER };
static const char *const msgs[] = {
	[MSG_REFUSED] = "udp_lb %s: the core refused an input: %s",
	[MSG_NO_STEER] = ("udp_lb %s: cannot steer clients to workers by source IP (%s); the "
			  "kernel's 4-tuple hash spreads them instead, so per-IP and per-subnet "
			  "limits count per worker"),
	[MSG_RESTEER] = ("udp_lb %s: clients are spread over the workers by %s now; a client "
			 "that lands on another worker opens a new flow there"),
};

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
		log_warn("udplb", msgs[MSG_REFUSED], l->st->tag, udplb_strerror(rc));
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
	const udplb_state *st = l->st;
	uint64_t gen = atomic_load_explicit(&st->health_gen, memory_order_acquire);
	if (gen == l->health_gen)
		return;
	l->health_gen = gen;
	for (size_t i = 0; i < st->conf.n_backends; i++)
		if (udplb_backends_set_health(l->view, i, atomic_load(&st->up[i]) != 0))
			return; /* i is always in range: the view holds the state's list */
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
	udplb_group_unref(l->g); /* last: the frees above count drops in its counters */
	free(l);
}

/* Whether clients go to the same worker under a and b: by IP, or by
 * subnet of the same prefix lengths (a per-subnet limit needs a subnet on
 * one worker). */
static bool same_steering(const udplb_cluster *a, const udplb_cluster *b)
{
	bool sa = a->max_flows_per_subnet > 0, sb = b->max_flows_per_subnet > 0;
	return sa == sb && (!sa || (a->subnet_prefix_v4 == b->subnet_prefix_v4 &&
	                            a->subnet_prefix_v6 == b->subnet_prefix_v6));
}

/* Attaches the program that spreads clients over the workers' sockets: on
 * worker 0's, which sets it for every socket of the port. Returns whether
 * it was attached. */
static bool steer(udplb_listener *l)
{
	const udplb_cluster *c = &l->st->conf.cluster;
	bool by_subnet = c->max_flows_per_subnet > 0;
	if (l->g->n_workers < 2 || l->worker != 0)
		return false;
	if (udplb_steer_by_source(l->fd, l->g->n_workers, by_subnet ? c->subnet_prefix_v4 : 32,
	                          by_subnet ? c->subnet_prefix_v6 : 128)) {
		log_warn("udplb", msgs[MSG_NO_STEER], l->st->tag, strerror(errno));
		return false;
	}
	return true;
}

static int setup_socket(udplb_listener *l, const struct sockaddr_storage *ss)
{
	int one = 1;
	socklen_t len = ss->ss_family == AF_INET ? sizeof(struct sockaddr_in)
	                                          : sizeof(struct sockaddr_in6);
	/* an upgrade passes each worker's socket, bound already */
	int rc = listener_take_udp(ss, l->worker, &l->fd);
	bool passed = l->fd >= 0;
	if (rc)
		return rc;
	if (!passed)
		l->fd = socket(ss->ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (l->fd < 0)
		return -errno;
	l->family = ss->ss_family;
	if (!passed && setsockopt(l->fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one))
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
	if (!passed && bind(l->fd, (const struct sockaddr *)ss, len))
		return -errno;
	(void)steer(l);
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
	l->g = udplb_group_ref(g);
	l->st = g->st;
	l->worker = worker_index;
	l->ctr = udplb_group_counters(g, worker_index);
	l->loop = loop;
	l->fd = l->epfd = -1;
	l->wildcard = is_wildcard(&ss);
	const udplb_state *st = l->st;
	udplb_manager_config mc = {.max_flows = st->max_flows, .max_rx_datagram_size = st->max_rx,
	                           .seed = g->seed, .checks = UDPLB_CHECK_CHEAP};
	int rc = udplb_rx_init(l) && udplb_tx_init(l) && udplb_flows_init(l) ? 0 : UV_ENOMEM;
	if (!rc && (udplb_manager_new(&l->m, &mc) ||
	            udplb_backends_new(&l->view, st->conf.maglev_size) ||
	            udplb_backends_set(l->view, st->conf.backends, st->conf.n_backends)))
		rc = UV_ENOMEM;
	if (!rc) {
		udplb_input in = {.kind = UDPLB_IN_CONFIG,
		                  .u.config = {.kind = UDPLB_CFG_SET_CLUSTER, .cluster = st->conf.cluster}};
		if (udplb_manager_input(l->m, &in, uv_now(loop)))
			rc = UV_EINVAL;
		else
			drain(l);
	}
	l->health_gen = (uint64_t)-1;
	if (!rc)
		rc = setup_socket(l, &ss);
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

int udplb_listener_fd(const udplb_listener *l) { return l->fd; }

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

/* ---- a reload ---- */

/* Feeds a config input that cannot be refused: each was checked when the
 * state was prepared. */
static void configure(udplb_listener *l, udplb_input *in)
{
	in->kind = UDPLB_IN_CONFIG;
	udplb_listener_feed(l, in);
}

void udplb_listener_apply(udplb_listener *l)
{
	udplb_state *old = l->st, *nx = l->g->next;
	if (!nx || nx == old)
		return;
	size_t w = l->worker;
	/* A flow's backend index follows its backend into the new list (-1
	 * for one that left: its socket is not pooled when it closes), and
	 * each backend that stays keeps its count; this worker is the only
	 * writer of both. */
	for (size_t s = 0; s < l->flows.n_slots; s++) {
		udplb_upstream *f = &l->flows.slots[s];
		if (f->id && f->bi >= 0)
			f->bi = (size_t)f->bi < nx->n_from ? nx->from[f->bi] : -1;
	}
	for (size_t i = 0; i < nx->n_from; i++)
		if (nx->from[i] >= 0)
			atomic_store_explicit(&nx->backend_flows[w][nx->from[i]],
			                      atomic_load_explicit(&old->backend_flows[w][i],
			                                           memory_order_relaxed),
			                      memory_order_relaxed);
	udplb_flows_swap_pool(l, nx->pools[w]);
	nx->pools[w] = NULL;
	udplb_backends_del(l->view);
	l->view = nx->views[w];
	nx->views[w] = NULL;
	l->st = nx;
	l->health_gen = (uint64_t)-1;
	sync_health(l);

	udplb_input in = {.u.config = {.kind = UDPLB_CFG_SET_CLUSTER, .cluster = nx->conf.cluster}};
	configure(l, &in);
	in = (udplb_input){.u.config = {.kind = UDPLB_CFG_SET_MAX_FLOWS, .value = nx->max_flows}};
	configure(l, &in);
	in = (udplb_input){.u.config = {.kind = UDPLB_CFG_SET_MAX_RX, .value = nx->max_rx}};
	configure(l, &in);
	/* A removed backend's flows end now (issue 16: they follow its
	 * drain, and a cluster has no drain policy but at once); each
	 * client's next datagram opens a flow on a backend that stays. */
	for (size_t i = 0; i < nx->n_from; i++) {
		if (nx->from[i] >= 0)
			continue;
		in = (udplb_input){.u.config = {.kind = UDPLB_CFG_CLOSE_BACKEND,
		                                .backend = old->conf.backends[i].addr}};
		configure(l, &in);
	}
	udplb_tx_flush_clients(l);
	if (!same_steering(&old->conf.cluster, &nx->conf.cluster) && steer(l))
		log_info("udplb", msgs[MSG_RESTEER], nx->tag,
		         nx->conf.cluster.max_flows_per_subnet ? "subnet" : "source IP");
}
