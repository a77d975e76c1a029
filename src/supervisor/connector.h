/* connector.h - the supervisor's connector (seed 000 "AppConnector"): a flow routed on its worker's plane and opened through the target its route names. */
#ifndef ETM_SUPERVISOR_CONNECTOR_H
#define ETM_SUPERVISOR_CONNECTOR_H

#include <stdint.h>

#include "base/list.h"
#include "proto/proto.h"
#include "runtime/connector.h"
#include "runtime/dns.h"
#include "runtime/tracker.h"
#include "supervisor/plane.h"

/* What the connector reads on a worker: the first member of the
 * supervisor's worker slot (worker_slot). Worker thread only. */
typedef struct sup_route {
	plane *plane;      /* a reference: flows read it, a publish swaps it */
	dns_resolver *dns; /* owned */
	/* owned: the DNS service on this worker (dns's backend), NULL when the
	 * config has none */
	dns_svc *svc;
	/* what this worker's services did, across reloads (metrics) */
	dns_svc_stats dns_counts;
	list assocs;       /* the worker's UDP associations (their fan-outs) */
	tracker *track;    /* owned: the worker's flow table */
	/* Failed stream opens by proto_dial_error kind, since the start: plain
	 * counts, written and read on this worker's loop only (supervisor/counters.c). */
	uint64_t dial_errors[PROTO_DIAL_ERR_KINDS];
} sup_route;

/* Counts one failed open of a flow's stream on w (kind out of range counts
 * as PROTO_DIAL_GENERAL). Worker thread only; this function can't fail. */
void sup_count_dial_error(worker *w, proto_dial_error kind);

/* Fills c with the supervisor's connector: connect routes the flow and
 * opens a stream through the outbound or balancer it names;
 * connect_direct dials past the routes; connect_datagram opens a fan-out
 * that routes every datagram on its own. Every worker it runs on must have
 * a slot that starts with a sup_route. self is handed back untouched. */
void sup_connector_init(connector *c, void *self);

/* The worker's DNS service, NULL when it runs none (outbound_new_dns's
 * svc_of). */
dns_svc *sup_dns_svc_of(worker *w);

/* w's DNS service over conf (NULL: none), made r's backend, so the
 * outbounds' lookups through r go to it: its through-proxy connections
 * routed by the worker's plane (seed 002 RoutedDialer), the names their
 * outbounds look up (a proxy's server) asked of a plain resolver of its
 * own (the system's servers, no cache) and not of the service, which
 * would wait on the very connection being opened. NULL without a conf or
 * memory (r unchanged). Worker thread only. */
dns_svc *sup_dns_svc_new(worker *w, dns_svc_conf *conf, dns_resolver *r);

/* A drain on worker w (seed 002): every TCP flow whose upstream was opened
 * on the outbound version origin closes, and every UDP sub-link opened on
 * it leaves its association ("the outbound this flow was opened on was
 * drained"). Worker thread only. Returns the flows and sub-links ended. */
size_t sup_drain(worker *w, uint64_t origin);

/* The wall clock the trackers read (Unix ms). */
uint64_t sup_wall_ms(void);

#endif
