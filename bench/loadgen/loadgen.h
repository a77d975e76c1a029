/* loadgen.h - the load tool's options, its one-line output and the entry point of each mode. */
#pragma once

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>

#define LG_WARN __attribute__((warn_unused_result))

/* What one run was asked to do; filled by main.c from the command line. */
struct lg_opts {
	const char *mode;          /* thru, crr, rr, udp, dns, lb or serve */
	const char *label;         /* the subject's name, echoed on the result line */
	struct sockaddr_in target; /* the sink (thru), the echo (crr, rr), the UDP echo (udp),
	                            * the UDP load balancer (lb) */
	bool via_socks;
	struct sockaddr_in socks; /* the SOCKS5 server, when via_socks */
	int conns;                /* thru: parallel connections */
	uint64_t bytes;           /* thru: bytes over all connections together */
	int workers;              /* crr: connections in flight at once */
	double secs;              /* crr, rr: how long to run */
	int msg;                  /* crr: request and answer size */
	int count;                /* udp, lb: datagrams */
	int size;                 /* udp, lb: payload bytes per datagram */
	int window;               /* udp, lb: datagrams in flight at once (lb: over all flows) */
	double loss_ms;           /* udp, lb: an unanswered datagram counts as lost after this */
	int flows;                /* lb: client sockets (flows) open at once */
	int per_flow;             /* lb: datagrams per flow before its socket is replaced; 0 = never */
	bool reuse;               /* lb: a finished flow's socket stays for the next flow */
	int src_ips;              /* lb: client sockets bind to 127.0.0.1 .. 127.0.0.<src_ips> */
	bool gro;                 /* lb, serve: UDP sockets take coalesced trains (UDP_GRO) */
	bool gso;                 /* lb: a socket's burst goes as one GSO send (UDP_SEGMENT) */
	int gap_ms;               /* lb: pause this long after each finished flow */
	bool new_addrs;           /* lb: one socket, each flow from its own source address */
	const char *dns_name;     /* dns: the name asked (A), or with dns_random the suffix */
	bool dns_random;          /* dns: each query a name of its own: <8 hex digits>.dns_name */
	int udp_echoes;           /* serve: UDP echo sockets (the first on udp_port) */
	double timeout;           /* any mode: the whole run gives up after this many seconds */
	uint16_t sink_port, echo_port, udp_port; /* serve: 0 = the kernel picks */
};

/* Prints "loadgen mode=<m> via=<direct|socks5> label=<l> " then the
 * caller's key=value pairs and a newline, flushed at once. */
void lg_print(const struct lg_opts *o, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Prints the result line with error="<text>" and returns 1 (the exit status). */
int lg_fail(const struct lg_opts *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Each returns the process exit status: 0 after printing its result line, 1
 * after printing an error line. */
int lg_thru_run(const struct lg_opts *o) LG_WARN;
int lg_crr_run(const struct lg_opts *o) LG_WARN;
int lg_rr_run(const struct lg_opts *o) LG_WARN;
int lg_udp_run(const struct lg_opts *o) LG_WARN; /* also the dns mode */
int lg_lb_run(const struct lg_opts *o) LG_WARN;
/* Runs the sink, the echo and the UDP echo(es) until SIGTERM or SIGINT. */
int lg_serve_run(const struct lg_opts *o) LG_WARN;

struct msghdr;
/* The segment size of a coalesced train received on a UDP_GRO socket
 * (its UDP_GRO control message), or 0 when mh holds one datagram. */
int lg_gro_segment(struct msghdr *mh);

/* Makes mh a GSO send cut into datagrams of seg bytes (UDP_SEGMENT): its
 * control buffer becomes ctl, of ctl_size bytes, at least
 * CMSG_SPACE(sizeof(uint16_t)) and aligned for a cmsghdr. */
void lg_put_segment(struct msghdr *mh, uint8_t *ctl, size_t ctl_size, int seg);

/* The thru framing: the client sends an 8-byte big-endian length, then that
 * many bytes; the sink answers with the same 8 bytes once it has counted
 * them all. No half-close is needed, so proxies that close both directions
 * on the first FIN (microsocks, trojan-gfw) are measured the same way. */
#define LG_THRU_HEADER 8
