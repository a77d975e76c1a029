/* plane.h - the immutable, refcounted routing snapshot every flow reads (ARCHITECTURE.md section 3). */
#ifndef ETM_SUPERVISOR_PLANE_H
#define ETM_SUPERVISOR_PLANE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "etemenanki/spec.h"
#include "outbound/balanced.h"
#include "outbound/outbound.h"
#include "route/route.h"
#include "runtime/connector.h"

/* One route slot's target: an outbound or a balancer. */
typedef struct target {
	outbound *ob;    /* a reference; NULL for a balancer slot */
	balanced *bal;   /* a reference; NULL for an outbound slot */
} target;

typedef struct plane {
	atomic_uint refs;
	uint64_t epoch;
	route_table *routes; /* owned: slots and rules */
	target *targets;     /* owned, one per slot of routes */
	size_t n_targets;
	/* Balancers no route names: built and probed all the same (seed 003:
	 * the prober runs whether or not anything is routed to the balancer). */
	balanced **unrouted; /* references */
	size_t n_unrouted, unrouted_cap;
	/* The DNS service's target (seed 002 Plane.dns): its ob a reference
	 * to outbound_new_dns's, NULL without a service. */
	target dns;
} plane;

/* Builds the plane of a checked spec: the compiled route table and one
 * target per slot, taken from obs and bals (built already, parallel to
 * spec's outbounds and balancers; the plane takes a reference on each it
 * names, so a reload shares an unchanged target between planes). Returns
 * NULL with the reason in err ("building route failed: ..."). The new
 * plane holds one reference. */
plane *plane_new(const etm_spec *spec, uint64_t epoch, outbound *const *obs,
                 balanced *const *bals, outbound *dns, char *err, size_t err_size);

plane *plane_ref(plane *p);
/* Drops a reference; the last one frees the plane. Any thread. */
void plane_unref(plane *p);

/* The target of a flow (seed 002 Plane::route): with a DNS service, the
 * service's for any flow to port DNS_PORT (TCP or UDP, any address; rule
 * -1), so a client's retry over TCP after a truncated UDP answer reaches
 * the same service; else plane_route_upstream's. Never NULL. rule, when
 * not NULL, gets the rule index or -1. Any thread. */
const target *plane_route(const plane *p, const flow *f, const flow_ctx *ctx, int32_t *rule);

/* The route table's target (seed 002 Plane::route_upstream), never the
 * DNS service: the first rule that matches, else the default route (the
 * flow's own source before the listener's peer; the sniffed name as an
 * extra candidate for domain matchers). The service's own upstream
 * connections are routed with it, so they are never intercepted. */
const target *plane_route_upstream(const plane *p, const flow *f, const flow_ctx *ctx,
                                   int32_t *rule);

#endif
