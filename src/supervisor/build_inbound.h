/* build_inbound.h - turns a config inbound into the inbound_rt the workers run: the one place below src/app that reads an etm_inbound_spec for an inbound. */
#ifndef ETM_SUPERVISOR_BUILD_INBOUND_H
#define ETM_SUPERVISOR_BUILD_INBOUND_H

#include <stddef.h>

#include "etemenanki/spec.h"
#include "inbound/inbound.h"

/* Fills *in from sp (a checked spec), copying every string it keeps, so sp
 * may be freed once this returns; connect is borrowed, limits copied. Loads
 * the TLS certificate and makes the protocol's credentials. On the control
 * thread, before the listeners open. Returns 0, or -1 with "inbound <tag>:
 * <reason>" in err; either way inbound_rt_free releases *in. */
__attribute__((warn_unused_result)) int build_inbound(inbound_rt *in, const etm_inbound_spec *sp,
                                                      const connector *connect,
                                                      const conn_limits *limits, char *err,
                                                      size_t err_size);

#endif
