/* build_route.h - the spec's [route] turned into the route module's own config (the prepare step, ARCHITECTURE §7). */
#ifndef ETM_SUPERVISOR_BUILD_ROUTE_H
#define ETM_SUPERVISOR_BUILD_ROUTE_H

#include <stddef.h>

#include "etemenanki/spec.h"
#include "route/route.h"

/* Fills *out from spec's [route] and its default tag (etm_spec_default_tag).
 * Returns 0, or -1 with "building route failed: out of memory" in err (*out then holds nothing to
 * free). Strings are borrowed from spec; the rule and port arrays are owned:
 * free with build_route_free once route_table_build has returned. */
__attribute__((warn_unused_result)) int build_route(const etm_spec *spec, route_config *out,
                                                    char *err, size_t err_size);

void build_route_free(route_config *cfg);

/* build_route, route_table_build and build_route_free in one: 0 with *out,
 * or -1 with the reason in err (route_table_build's texts). */
__attribute__((warn_unused_result)) int build_route_table(const etm_spec *spec, route_table **out,
                                                          char *err, size_t err_size);

#endif
