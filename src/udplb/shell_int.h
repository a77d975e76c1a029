/* shell_int.h - what the listener (shell.c) and the health checks (health.c) share: the group and its counters. */
#ifndef ETM_UDPLB_SHELL_INT_H
#define ETM_UDPLB_SHELL_INT_H

#include <sys/socket.h>

#include "udplb/shell.h"

/* One worker's counters. Each has one writer, its worker, and any thread
 * may read them (relaxed loads): a metrics read never stops the datapath. */
typedef struct udplb_counters {
	_Atomic uint64_t active_flows;
	_Atomic uint64_t flows_created, flows_evicted, flows_shed;
	_Atomic uint64_t datagrams_to_backends, bytes_to_backends;
	_Atomic uint64_t datagrams_to_clients, bytes_to_clients;
	_Atomic uint64_t flow_duration_ms;
	_Atomic uint64_t sockets_reused;
	_Atomic uint64_t drops[UDPLB_SHELL_DROP_COUNT];
	_Atomic uint64_t evicted[UDPLB_CLOSE_COUNT];
	_Atomic uint64_t *backend_flows; /* per backend: flows given to it */
} udplb_counters;

struct udplb_group {
	const etm_inbound_spec *in;
	const etm_cluster_spec *cl;
	udplb_conf conf;
	udplb_seed seed;
	size_t n_workers;
	uint32_t max_flows; /* per worker */
	uint32_t max_rx;
	/* Health, written by the checks' loop, read by every worker: a
	 * worker copies the flags into its view when the generation moved. */
	_Atomic unsigned char *up;
	_Atomic uint64_t health_gen;
	void *ctr; /* n_workers cache-line-aligned udplb_counters */
};

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

#endif
