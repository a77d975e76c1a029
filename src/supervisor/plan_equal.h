/* plan_equal.h - the equality of each spec kind the hot-reload planner compares: what makes an object reused rather than swapped or built. */
#ifndef ETM_SUPERVISOR_PLAN_EQUAL_H
#define ETM_SUPERVISOR_PLAN_EQUAL_H

#include <stdbool.h>

#include "etemenanki/spec.h"

/* Each compares every field that changes what the object does, file paths
 * included (not the files' contents; see "Files" in plan.c), with the
 * schema's defaults folded where absent and written are one (an inbound's
 * listen, a balancer's strategy, the default route). The tag is compared
 * too. An outbound's drain keys are not: they say what becomes of the
 * version once replaced, not what it does (plan.h PLAN_F_DRAIN). */
bool plan_outbound_equal(const etm_outbound_spec *a, const etm_outbound_spec *b);
bool plan_balancer_equal(const etm_balancer_spec *a, const etm_balancer_spec *b);
bool plan_inbound_equal(const etm_inbound_spec *a, const etm_inbound_spec *b);
bool plan_cluster_equal(const etm_cluster_spec *a, const etm_cluster_spec *b);
/* Rules, the default tag as etm_spec_default_tag gives it, geodata paths. */
bool plan_route_equal(const etm_spec *a, const etm_spec *b);
bool plan_dns_equal(const etm_dns_spec *a, const etm_dns_spec *b);
bool plan_log_equal(const etm_spec *a, const etm_spec *b);

/* The [policy] keys inbounds copy when they are built (handshake and idle
 * timeouts, connections per source); not the drain keys, which are the
 * outbounds'. */
bool plan_policy_limits_equal(const etm_policy_spec *a, const etm_policy_spec *b);

/* Whether inbound b can keep a's listening socket: the same socket type
 * (UDP for udp_lb and hysteria2, TCP otherwise), address and port. */
bool plan_inbound_same_socket(const etm_inbound_spec *a, const etm_inbound_spec *b);

#endif
