/* shell_int.h - what the shell's files share: the group and its counters (group.c, health.c), the socket helpers (sock.c), and the listener, one part per file (shell.c, shell_rx.c, shell_tx.c, shell_flows.c). */
#ifndef ETM_UDPLB_SHELL_INT_H
#define ETM_UDPLB_SHELL_INT_H

#include <netinet/in.h>
#include <sys/socket.h>

#include "udplb/pool.h"
#include "udplb/shell.h"

/* One worker's counters. Each has one writer, its worker, and any thread
 * may read them (relaxed loads): a metrics read never stops the datapath.
 * They count from the start of the process, across reloads. */
typedef struct udplb_counters {
	_Atomic uint64_t active_flows;
	_Atomic uint64_t flows_created, flows_evicted, flows_shed;
	_Atomic uint64_t datagrams_to_backends, bytes_to_backends;
	_Atomic uint64_t datagrams_to_clients, bytes_to_clients;
	_Atomic uint64_t flow_duration_ms;
	_Atomic uint64_t sockets_reused;
	_Atomic uint64_t drops[UDPLB_SHELL_DROP_COUNT];
	_Atomic uint64_t evicted[UDPLB_CLOSE_COUNT];
} udplb_counters;

/* What a reload can change of a group: the names, the cluster with its
 * backends and their health, the limits, the health checks' settings, and
 * the per-backend counters, whose indexes are the backends'. The group's
 * current state is what new listeners open with and what metrics read
 * (control thread). A running listener reads the state it was last given
 * (udplb_listener.st), so during a commit each worker moves from one state
 * to the next on its own thread while the others still read the old one;
 * the old one goes once every listener has moved (udplb_group_commit). */
typedef struct udplb_state {
	char *tag;                  /* owned: the inbound's */
	char *cluster_tag;          /* owned: the cluster's */
	udplb_conf conf;            /* owned */
	udplb_health_config health; /* payload owned */
	uint32_t max_flows;         /* per worker */
	uint32_t max_rx;
	/* Health, written by the checks' loop, read by every worker: a
	 * worker copies the flags into its view when the generation moved. */
	_Atomic unsigned char *up;
	_Atomic uint64_t health_gen;
	/* Per worker, per backend: the flows given to it; one writer each,
	 * the worker (a reload's carry-over included). */
	_Atomic uint64_t **backend_flows;
	/* A prepared state only (udplb_group_prepare), what commit hands on: */
	int *from;     /* per backend of the state it replaces: its index here, or -1 */
	size_t n_from;
	udplb_backends **views; /* per worker: its view, taken by its listener */
	udplb_pool **pools;     /* per worker: its reuse pool or NULL, taken likewise */
} udplb_state;

struct udplb_group {
	_Atomic size_t refs; /* the owner's, and one per listener until its memory goes */
	udplb_seed seed;
	size_t n_workers;
	udplb_state *st;   /* current; control thread */
	udplb_state *next; /* prepared, until commit or abort; control thread */
	void *ctr; /* n_workers cache-line-aligned udplb_counters */
};

/* Another reference: a listener's, given back as its memory goes. */
udplb_group *udplb_group_ref(udplb_group *g);

udplb_counters *udplb_group_counters(const udplb_group *g, size_t worker);

/* ---- sock.c ---- */

/* a as a socket address for a socket of family fam: an IPv4 address
 * becomes v4-mapped for an IPv6 socket. Returns the length. */
socklen_t udplb_sockaddr_for(int fam, const udplb_addr *a, struct sockaddr_storage *ss);

/* The address a datagram was sent to, from the IP_PKTINFO or IPV6_PKTINFO
 * of a received message, with port; false when it carries neither. */
bool udplb_pktinfo_read(struct msghdr *mh, uint16_t port, udplb_addr *out);

/* Fills ctl with the pktinfo that makes a datagram sent on a socket of
 * family fam leave from local; returns the control length. */
size_t udplb_pktinfo_write(int fam, const udplb_addr *local, uint8_t *ctl, size_t size);

/* Attaches to a SO_REUSEPORT socket the classic BPF program that sends each
 * datagram to the group's socket number (source IP mod n_workers): IPv4,
 * the whole address; IPv6, its fourth 32-bit word; so a client IP has one
 * worker and per-IP limits count all its flows. With prefix_v4 / prefix_v6
 * below 32 / 128 it steers by the source's subnet of that length instead
 * (the last 32-bit word the prefix reaches, its host bits shifted out), so
 * a subnet has one worker and per-subnet limits count all its flows. The
 * program reads the network header at SKF_NET_OFF. Returns setsockopt's
 * result. */
int udplb_steer_by_source(int fd, size_t n_workers, unsigned prefix_v4, unsigned prefix_v6);

/* ---- the listener ---- */

/* A slot of the send batch toward clients and of the two receive batches
 * (clients, backend replies): the largest UDP payload, which is also the
 * most a coalesced train (UDP_GRO) can hold. */
#define UDPLB_BATCH_SLOT (UDPLB_DATAGRAM_MAX + 1)

/* Datagrams waiting for a socket that would not take them (shell_tx.c). */
typedef struct udplb_queue {
	struct udplb_qitem *head, *tail;
	uint32_t n;
} udplb_queue;

/* The shell's side of one flow: its upstream socket and what waits for it. */
typedef struct udplb_upstream {
	int fd;        /* -1: no socket (free, or its open failed) */
	bool want_out; /* datagrams wait in q: its socket is watched for writable */
	bool gro;      /* its socket takes coalesced trains (UDP_GRO) */
	bool answered; /* ended by its responses cap: the socket may be handed on */
	int bi;        /* its backend's index in the view, -1 when not found */
	udplb_flow_id id;
	udplb_queue q;
} udplb_upstream;

/* A datagram toward a backend held until the end of a receive round, so
 * the round's datagrams of one flow leave in one sendmmsg. The payload
 * stays in the receive buffer, which the round does not reuse. */
typedef struct udplb_pending_send {
	udplb_flow_id flow;
	bool done;
	size_t prefix_len;
	uint8_t prefix[UDPLB_PPV2_MAX];
	const uint8_t *payload;
	size_t len;
} udplb_pending_send;

/* shell_rx.c's state: the receive batches. */
typedef struct udplb_rx {
	/* client datagrams */
	bool gro; /* the listener takes coalesced trains (UDP_GRO) */
	uint8_t *buf;
	struct mmsghdr msgs[UDPLB_BATCH];
	struct iovec iov[UDPLB_BATCH];
	struct sockaddr_storage from[UDPLB_BATCH];
	uint8_t ctl[UDPLB_BATCH][CMSG_SPACE(sizeof(struct in6_pktinfo)) +
	                         CMSG_SPACE(sizeof(struct in_pktinfo)) + CMSG_SPACE(sizeof(int))];
	/* replies read from one flow socket, each a datagram or a coalesced
	 * train of them (UDP_GRO) */
	bool no_gro;
	uint8_t *bk_buf;
	struct mmsghdr bk_msgs[UDPLB_BATCH];
	struct iovec bk_iov[UDPLB_BATCH];
	uint8_t bk_ctl[UDPLB_BATCH][CMSG_SPACE(sizeof(int))];
} udplb_rx;

/* shell_tx.c's state: the sends toward backends gathered over one receive
 * round (ps_), the batch toward clients and its runs folded for GSO (go_),
 * and the listener's queue. */
typedef struct udplb_tx {
	bool no_gso;
	bool want_out; /* datagrams wait in lq: the listener is watched for writable */
	udplb_queue lq; /* toward clients, when the socket is full */
	bool gathering;
	size_t ps_n;
	udplb_pending_send ps[UDPLB_GATHER];
	struct mmsghdr ps_msgs[UDPLB_GATHER];
	struct iovec ps_iov[UDPLB_GATHER][2];
	struct mmsghdr go_msgs[UDPLB_BATCH];
	size_t go_first[UDPLB_BATCH], go_count[UDPLB_BATCH];
	uint8_t go_ctl[UDPLB_BATCH][CMSG_SPACE(sizeof(struct in6_pktinfo)) +
	                            CMSG_SPACE(sizeof(uint16_t))];
	uint8_t *buf;
	size_t n;
	struct mmsghdr msgs[UDPLB_BATCH];
	struct iovec iov[UDPLB_BATCH];
	struct sockaddr_storage to[UDPLB_BATCH];
	uint8_t ctl[UDPLB_BATCH][CMSG_SPACE(sizeof(struct in6_pktinfo))];
} udplb_tx;

/* shell_flows.c's state: the flows' sockets, the owner table, the reuse pool. */
typedef struct udplb_flows {
	udplb_upstream *slots; /* by udplb_flow_slot() */
	size_t n_slots;
	udplb_flow_id *owner; /* by descriptor: the flow holding it, or NONE */
	size_t n_owner;
	udplb_pool *pool; /* reuse_upstream_sockets: idle sockets per backend */
	uv_timer_t pool_timer; /* closes sockets waiting too long */
	/* the flows' epoll set was read to the end after this receive
	 * round's datagrams came in, so no pooled socket has anything waiting
	 * that was not seen (reuse_take then needs no look of its own) */
	bool pool_seen;
	udplb_flow_id aborts[4]; /* flows whose socket would not open */
	size_t n_aborts;
} udplb_flows;

struct udplb_listener {
	udplb_group *g;   /* a reference */
	udplb_state *st;  /* the state it runs: its group's, or the one before during a commit */
	size_t worker;    /* its worker's index */
	udplb_counters *ctr;
	uv_loop_t *loop;
	udplb_manager *m;
	udplb_backends *view;
	uint64_t health_gen;
	int fd, epfd, family;
	bool wildcard;
	udplb_addr local; /* the bound address, for a specific-IP listener */
	uint16_t port;
	uv_poll_t poll;  /* the flows' epoll set */
	uv_poll_t lpoll; /* the listener socket */
	uv_timer_t timer;
	int open_handles;
	udplb_rx rx;
	udplb_tx tx;
	udplb_flows flows;
};

static inline void udplb_bump(_Atomic uint64_t *c, uint64_t v)
{
	/* one writer per counter (its worker): no locked add needed */
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + v,
	                      memory_order_relaxed);
}

/* Counts a drop, reason a UDPLB_DROP_* or UDPLB_SHELL_DROP_* index. */
static inline void udplb_shell_drop(udplb_listener *l, unsigned reason)
{
	udplb_bump(&l->ctr->drops[reason], 1);
	if (reason < UDPLB_DROP_COUNT && udplb_drop_is_shed((udplb_drop_reason)reason))
		udplb_bump(&l->ctr->flows_shed, 1);
}

/* shell.c: the core's inputs and the readiness callbacks. */

/* Feeds one input and acts on everything it produced, including the
 * aborts of flows whose socket would not open. */
void udplb_listener_feed(udplb_listener *l, const udplb_input *in);
/* Reads the flows' epoll set without waiting and serves what it reports:
 * replies for live flows, and anything for a pooled socket, which retires
 * it. True when that was everything the set had. */
bool udplb_listener_serve_flows(udplb_listener *l);
/* What libuv watches the listener socket for: readable, and writable when
 * out (datagrams toward clients wait in its queue). */
void udplb_listener_interest(udplb_listener *l, bool out);

/* shell_rx.c: reading, and cutting coalesced trains into datagrams. */

bool udplb_rx_init(udplb_listener *l); /* false without memory; udplb_rx_free then */
void udplb_rx_free(udplb_listener *l);
/* Reads client datagrams in rounds and feeds each to the core; the round's
 * sends toward backends leave gathered when it ends. */
void udplb_rx_read_clients(udplb_listener *l);
/* Reads flow id's replies and feeds each to the core. */
void udplb_rx_read_backend(udplb_listener *l, udplb_flow_id id);

/* shell_tx.c: sending, batched and folded, and the queues. */

bool udplb_tx_init(udplb_listener *l); /* false without memory; udplb_tx_free then */
/* Frees what waits toward clients (queue_full drops) and the batch. */
void udplb_tx_free(udplb_listener *l);
/* The core's SEND_TO_BACKEND: sent now, or held until the round ends
 * while a gather is open. */
void udplb_tx_send_to_backend(udplb_listener *l, const udplb_output *o);
/* The core's SEND_TO_CLIENT: copied into the batch toward clients. */
void udplb_tx_send_to_client(udplb_listener *l, const udplb_output *o);
/* Opens a gather: sends toward backends wait for udplb_tx_gather_stop. */
void udplb_tx_gather_start(udplb_listener *l);
/* Closes the gather and sends what it holds. */
void udplb_tx_gather_stop(udplb_listener *l);
/* Sends the gathered datagrams, one sendmmsg (or one GSO send) per flow,
 * in order within each flow. */
void udplb_tx_flush_backend_sends(udplb_listener *l);
/* Sends the batch toward clients, if any. */
void udplb_tx_flush_clients(udplb_listener *l);
/* A flow's socket, or the listener's, is writable: sends what waits. */
void udplb_tx_write_backend(udplb_listener *l, udplb_flow_id id);
void udplb_tx_write_clients(udplb_listener *l);
/* Frees what still waits in q, each a queue_full drop: a flow or the
 * listener closed before the kernel took it. */
void udplb_tx_discard(udplb_listener *l, udplb_queue *q);

/* shell_flows.c: the flows' sockets and their reuse. */

/* Flow id's state, or NULL when the id is stale or unknown. */
static inline udplb_upstream *udplb_flows_find(udplb_listener *l, udplb_flow_id id)
{
	uint32_t s = udplb_flow_slot(id);
	if (s >= l->flows.n_slots || l->flows.slots[s].id != id)
		return NULL;
	return &l->flows.slots[s];
}

/* The flow holding descriptor fd, or UDPLB_FLOW_NONE (a pooled socket). */
static inline udplb_flow_id udplb_flows_owner(const udplb_listener *l, int fd)
{
	return fd >= 0 && (size_t)fd < l->flows.n_owner ? l->flows.owner[fd] : UDPLB_FLOW_NONE;
}

/* A reuse pool sized for one worker of st; NULL without memory. */
udplb_pool *udplb_flows_pool_new(const udplb_state *st);
/* The reuse pool, when the state asks for one; false without memory. */
bool udplb_flows_init(udplb_listener *l);
/* A reload: the pooled sockets close and pool (NULL: none) takes the
 * old pool's place; live flows' sockets are left alone. */
void udplb_flows_swap_pool(udplb_listener *l, udplb_pool *pool);
/* Starts and stops the pool's expiry timer (a handle closed with cb). */
void udplb_flows_start(udplb_listener *l);
void udplb_flows_stop(udplb_listener *l, uv_close_cb cb);
/* Closes every flow's socket and the pooled ones, and frees the tables. */
void udplb_flows_free(udplb_listener *l);
/* The core's OPEN_UPSTREAM: a pooled socket or a new one. A flow whose
 * socket will not open waits for udplb_flows_take_abort. */
void udplb_flows_open(udplb_listener *l, const udplb_output *o);
/* The core's CLOSE_FLOW: the socket closes, or waits in the pool. */
void udplb_flows_close(udplb_listener *l, udplb_flow_id id);
/* The next flow to abort (ABORT_FLOW); false when none is left. */
bool udplb_flows_take_abort(udplb_listener *l, udplb_flow_id *id);
/* Something came for descriptor fd, which no flow holds: when it waits in
 * the pool, what came is counted and the socket closed. */
void udplb_flows_stray(udplb_listener *l, int fd);
/* A receive round starts: with sockets pooled, the flows' set is read
 * first, so that whatever came for a pooled socket before the round's
 * datagrams retires it before a new flow among them could take it. */
void udplb_flows_round_start(udplb_listener *l);
void udplb_flows_round_end(udplb_listener *l);

#endif
