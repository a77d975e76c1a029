/* plane.h - the immutable, refcounted routing snapshot every flow reads (ARCHITECTURE.md section 3). */
#ifndef ETM_SUPERVISOR_PLANE_H
#define ETM_SUPERVISOR_PLANE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "outbound/outbound.h"
#include "runtime/connector.h"

/* One route slot's target: the outbound it opens flows on. */
typedef struct target {
	outbound *ob; /* owned */
} target;

typedef struct plane {
	atomic_uint refs;
	uint64_t epoch;
	target *targets; /* owned, one per slot */
	size_t n_targets;
	size_t default_slot;
} plane;

/* Builds the plane of a checked spec: one target per outbound, the default
 * route's slot. Returns NULL with the reason in err. The new plane holds one
 * reference. */
plane *plane_new(const etm_spec *spec, uint64_t epoch, char *err, size_t err_size);

plane *plane_ref(plane *p);
/* Drops a reference; the last one frees the plane. Any thread. */
void plane_unref(plane *p);

/* The target of a flow: first-match rules come with the routing issue; today
 * every flow takes the default route. Never NULL. */
const target *plane_route(const plane *p, const flow *f, const flow_ctx *ctx);

#endif
