/* build_outbound.h - the prepare step for outbounds and balancers: the only place that turns their spec entries into the configs src/outbound builds from. */
#ifndef ETM_SUPERVISOR_BUILD_OUTBOUND_H
#define ETM_SUPERVISOR_BUILD_OUTBOUND_H

#include <stddef.h>

#include "etemenanki/spec.h"
#include "outbound/balanced.h"
#include "outbound/outbound.h"

/* The outbound row of protocol p; NULL for one no outbound speaks (mixed,
 * udp_lb). For the spec checks. */
const outbound_proto *build_outbound_proto(etm_protocol p);

/* Builds the outbound of a checked spec entry. Nothing it returns points
 * into spec. Returns NULL with the reason in err ("outbound <tag>: <why>"
 * for a server or TLS setting, "out of memory", or outbound_new's). */
outbound *build_outbound(const etm_outbound_spec *spec, char *err, size_t err_size);

/* Builds the balancer bs of a checked spec over members taken from obs
 * (the built outbounds, parallel to spec's: a member is that outbound
 * itself, a reference on it). Nothing it returns points into spec. Returns
 * NULL with the reason in err ("out of memory", "balancer <tag>: ...").
 * The new object holds one reference. */
balanced *build_balanced(const etm_spec *spec, const etm_balancer_spec *bs,
                         outbound *const *obs, char *err, size_t err_size);

#endif
