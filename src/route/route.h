/* route.h - the compiled route table: rules lowered from the spec, matched first-match against a flow, deciding a slot. */
#ifndef ETM_ROUTE_ROUTE_H
#define ETM_ROUTE_ROUTE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "base/addr.h"
#include "etemenanki/spec.h"
#include "route/route_msg.h"

/* What the table matches a flow on (seed 002, route_target). Every field is
 * borrowed for the length of one route_table_decide call. */
typedef struct route_target {
	const addr_dest *dest;         /* remote (domain or IP), port, network; always set */
	const char *sniffed;           /* sniffed domain, NULL when none: an extra candidate for
	                                  every domain matcher and geosite */
	const char *inbound_tag;       /* NULL when none */
	const struct sockaddr *source; /* the flow's own source, else the listener's peer;
	                                  NULL when none */
} route_target;

typedef struct route_decision {
	uint32_t slot; /* index into the table's slots (route_table_slot_tag) */
	int32_t rule;  /* index of the matching rule in etm_route_spec.rules; -1 = the default route */
} route_decision;

typedef struct route_table route_table;

/* Compiles spec into a table (seed 002, CompiledRoutes::new and
 * compile_routes). Slots: one per distinct tag, numbered in the order the
 * rules first name them, the default's last when no rule names it. The
 * geosite file is read only when a rule has a geosite matcher, the geoip file
 * only when one has a geoip matcher, geosite first; each distinct code
 * string is loaded once. default_tag is the tag of the default route (the
 * caller passes etm_spec_default_tag); the spec is only read, nothing of it
 * is kept.
 *
 * Returns 0 with *out (free with route_table_free), or a negative
 * route_msg_id with "building route failed: <reason>" in err (truncated to
 * err_size): every ROUTE_ERR_* of route_msg.h; docs/routing.md lists them. */
__attribute__((warn_unused_result)) int route_table_build(const etm_route_spec *spec,
                                                          const char *default_tag,
                                                          route_table **out, char *err,
                                                          size_t err_size);

/* Number of slots (at least one: the default's). */
size_t route_table_slots(const route_table *t);

/* The tag slot names; NULL for a slot out of range. Owned by the table. */
const char *route_table_slot_tag(const route_table *t, size_t slot);

/* The first rule any of whose matchers matches target, else the default.
 * Thread-safe: any number of threads may decide on one table at once; it
 * allocates nothing except each thread's regex match data on its first
 * regex (see domset.h). */
route_decision route_table_decide(const route_table *t, const route_target *target);

void route_table_free(route_table *t);

/* Config-time check of one domain_regex pattern: 0, or -1 with
 * "<pattern>: <PCRE2 reason> at offset N" in err (no build prefix). */
__attribute__((warn_unused_result)) int route_regex_check(const char *pattern, char *err,
                                                          size_t err_size);

#endif
