/* actor.h - the supervisor's own state, shared by its files: supervisor.c (start, stop, the workers), prepare.c and commit.c (a spec applied). Nothing outside src/supervisor includes it. */
#ifndef ETM_SUPERVISOR_ACTOR_H
#define ETM_SUPERVISOR_ACTOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/list.h"
#include "etemenanki/supervisor.h"
#include "inbound/inbound.h"
#include "inbound/ss_udp_in.h"
#include "runtime/dns_cache.h"
#include "runtime/guard.h"
#include "runtime/listener.h"
#include "runtime/worker.h"
#include "supervisor/connector.h"
#include "supervisor/plan.h"
#include "supervisor/plane.h"
#include "supervisor/prober.h"
#include "udplb/shell.h"

/* Longest error text a worker reports back while starting. */
#define SUP_ERR_MAX 256

/* A resolver a [dns] change replaced stays this long, for the lookups
 * still running on it, before it is deleted. */
#define SUP_DNS_RETIRE_MS 60000

/* What one spec inbound runs as. */
typedef struct sup_inbound {
	inbound_rt *rt;       /* malloc'd, one reference (its connections hold theirs) */
	uint16_t port;        /* the port it is bound to */
	udplb_group *lb;      /* its UDP load-balancer group, or NULL */
	udplb_health *health; /* its checks, on worker 0's loop */
	uint64_t files;       /* files_sig of its TLS files when rt was built */
} sup_inbound;

struct etm_supervisor {
	etm_spec spec; /* owned: the running one */
	workers *ws;
	dns_cache *cache;
	connector conn;
	guard *guard; /* connections per source, our own addresses; every worker's */
	/* What spec was built into, parallel to its arrays (seed 002: the
	 * targets a plane's slots hold; a reload reuses the unchanged ones). */
	outbound **obs;  /* references */
	uint64_t *ob_files; /* files_sig of each outbound's CA when it was built */
	balanced **bals; /* references */
	sup_inbound *ins;
	uint64_t route_files; /* files_sig of the geodata the published route read */
	plane *plane;   /* the actor's reference to the published plane */
	uint64_t epoch; /* the published plane's */
	dns_svc_conf *dns_conf; /* a reference: the DNS service's; NULL: none */
	outbound *dns_ob;       /* a reference: its target; NULL: none */
	plan_versions versions;
	prober *probes; /* the balancers' health probes */
};

/* Principals revoked with policy close, each held, whose flows are to end. */
typedef struct sup_revoked {
	principal **v;
	size_t n, cap;
} sup_revoked;

/* Revokes p (a user a reload or the API removed) under policy; with
 * close, adds it to closing. */
void sup_revoke(principal *p, etm_user_removal policy, sup_revoked *closing);

/* Ends every open flow of closing's principals on every worker, with "the
 * session was closed", and empties closing. */
void sup_end_revoked(etm_supervisor *s, sup_revoked *closing);

/* The supervisor's state on one worker (worker_slot). Worker thread only. */
typedef struct sup_worker {
	sup_route route; /* first: what the connector reads */
	size_t n;        /* inbounds, the length of both arrays */
	listener **listeners; /* one per inbound; NULL where not open */
	udplb_listener **lb_listeners; /* one per inbound; NULL where not a udp_lb one */
	ss_udp_in **ss_udp; /* one per inbound; NULL where not a shadowsocks one with UDP */
	list graces;   /* worker 0: the close-after drains waiting */
	list old_dns;  /* resolvers a [dns] change replaced, until SUP_DNS_RETIRE_MS */
} sup_worker;


/* What a reload (or the start) built, until commit installs it. */
typedef struct prepared {
	plan p;
	etm_spec *next;
	outbound **obs;   /* next's, references */
	uint64_t *ob_files;
	uint64_t route_files;
	balanced **bals;  /* next's, references */
	sup_inbound *ins; /* next's; rt NULL where the running one carries over; lb
	                   * set (owned) for a new udp_lb inbound only */
	plane *plane;     /* NULL when nothing is published */
	dns_svc_conf *dns_conf; /* next's DNS service (a reference), NULL: none */
	outbound *dns_ob;       /* its target (a reference) */
	bool dns_changed;       /* [dns] differs from the running one: new resolvers */
	/* The udp_lb inbounds SWAPPED, each a running group that holds the
	 * prepared state (udplb_group_prepare) */
	struct lb_swap *lb_swaps;
	size_t n_lb_swaps;
} prepared;

/* A SWAPPED udp_lb inbound: its index in next, and its running group,
 * which commit moves to that index. */
typedef struct lb_swap {
	size_t next;
	udplb_group *g;
} lb_swap;


/* prepare.c: plan and prepare (ARCHITECTURE.md section 7) the spec next,
 * against the running one when running: nothing running changes. Returns
 * 0, or -1 with the reason in err; either way sup_prepared_free releases
 * pp (whatever commit took is gone from it). */
__attribute__((warn_unused_result)) int sup_prepare(etm_supervisor *s, etm_spec *next,
                                                    bool running, prepared *pp, char *err,
                                                    size_t err_size);
void sup_prepared_free(prepared *pp);

/* Drops a reference on each of obs[0, n_obs) and bals[0, n_bals), then
 * the arrays. */
void sup_targets_free(outbound **obs, size_t n_obs, balanced **bals, size_t n_bals);

/* commit.c: seed 002 Actor::commit: publish, then listeners, then drains;
 * the running spec and targets become pp's. Cannot fail: what can failed
 * in prepare. */
void sup_commit(etm_supervisor *s, prepared *pp);

/* The [[cluster]] called tag; NULL when there is none. */
const etm_cluster_spec *sup_cluster_of(const etm_spec *spec, const char *tag);

/* The address an inbound listens on ("127.0.0.1" when it names none). */
const char *sup_listen_ip(const etm_inbound_spec *in);

/* Logs "listening on ..." (start) for inbound in on port. */
void sup_log_listening(const etm_supervisor *s, const etm_inbound_spec *in, uint16_t port);

/* Opens inbound i (spec entry in, running state si) on worker w into
 * sw's arrays; on worker 0 it checks the address first and starts a
 * udp_lb group's checks. Returns 0, or -1 with the reason in err. */
__attribute__((warn_unused_result)) int sup_open_inbound(etm_supervisor *s, worker *w,
                                                         sup_worker *sw,
                                                         const etm_inbound_spec *in,
                                                         sup_inbound *si, size_t i, char *err,
                                                         size_t err_size);

/* Makes shadowsocks inbound i's UDP socket on w follow its TCP listener
 * (opened where the inbound serves UDP and has none, closed where it no
 * longer does); the port is si->port, the TCP listener's. Returns 0, or -1
 * with the reason in err. */
__attribute__((warn_unused_result)) int sup_follow_udp(worker *w, sup_worker *sw,
                                                       const etm_inbound_spec *in,
                                                       const sup_inbound *si, size_t i,
                                                       char *err, size_t err_size);

/* A worker's state for n inbounds, nothing open; NULL when memory runs out. */
sup_worker *sup_worker_new(size_t n);

/* On the worker, at a stop: pending close-after drains end unrun (the
 * stop ends their flows anyway); retired resolvers' timers stop. */
void sup_worker_quiesce_timers(sup_worker *sw);
/* On the worker, at its teardown: retired resolvers are deleted. */
void sup_worker_free_old_dns(sup_worker *sw);

#endif
