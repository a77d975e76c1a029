/* build_udplb.h - the spec's [[cluster]] and udp_lb inbounds turned into the UDP load balancer's own configs (the prepare step, ARCHITECTURE §7). */
#ifndef ETM_SUPERVISOR_BUILD_UDPLB_H
#define ETM_SUPERVISOR_BUILD_UDPLB_H

#include <stddef.h>

#include "etemenanki/spec.h"
#include "udplb/conf.h"
#include "udplb/shell.h"

/* Fills *out from cluster c: the contract, the Maglev size, socket reuse,
 * then udplb_conf_load on its backends. Returns 0, or a UDPLB_E_* code with
 * *bad set to the index of the backend at fault, or to c->backends.len when
 * the fault is not one backend's. The range checks of the spec
 * (etm_spec_check) come first; this assumes them. Keeps no pointer into c. */
__attribute__((warn_unused_result)) int build_udplb_conf(const etm_cluster_spec *c,
                                                         udplb_conf *out, size_t *bad);

/* Fills *out for inbound in balancing over cluster cl. Returns 0, or -1
 * with "cluster <tag>: <reason>" or "out of memory" in err (*out then holds
 * nothing to free). out's tags are borrowed from the spec; its backends and
 * probe payload are owned: free with build_udplb_free, once udplb_group_new
 * has copied them. */
__attribute__((warn_unused_result)) int build_udplb(const etm_inbound_spec *in,
                                                    const etm_cluster_spec *cl,
                                                    udplb_group_config *out, char *err,
                                                    size_t err_size);

void build_udplb_free(udplb_group_config *cfg);

#endif
