/* route.h - the compiled route table: rules compiled from a route_config, matched first-match against a flow, deciding a slot. */
#ifndef ETM_ROUTE_ROUTE_H
#define ETM_ROUTE_ROUTE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "base/addr.h"
#include "route/route_msg.h"

/* ---- what a table is built from (supervisor/build_route.c fills it from
 * the spec). Every pointer is borrowed for one route_table_build call: the
 * table copies what it keeps. ---- */

/* Networks a rule matches (route_rule_config.networks). */
enum {
	ROUTE_NET_TCP = 1u << 0,
	ROUTE_NET_UDP = 1u << 1,
};

typedef struct route_strs {
	const char *const *items;
	size_t len;
} route_strs;

typedef struct route_port_range {
	uint16_t first, last; /* inclusive */
} route_port_range;

typedef struct route_ports {
	const route_port_range *items;
	size_t len;
} route_ports;

/* One rule (seed 002, RouteRuleSpec): it matches when any matcher it has
 * matches; an empty list is no matcher. */
typedef struct route_rule_config {
	const char *target; /* the tag flows go to: an outbound or a balancer */
	route_strs domain, domain_suffix, domain_keyword, domain_regex;
	route_strs geosite; /* code strings ("cn", "geolocation-!cn", "cn@ads") */
	route_strs cidr;
	route_strs geoip;
	route_ports port;
	unsigned networks; /* ROUTE_NET_* bits; 0 = no network matcher */
	route_strs inbound_tag;
	route_strs source_cidr;
} route_rule_config;

typedef struct route_config {
	const char *default_tag; /* the default route's tag; NULL = none (an error) */
	const char *geoip;       /* path of geoip.dat; NULL = none */
	const char *geosite;     /* path of geosite.dat; NULL = none */
	const route_rule_config *rules; /* in order */
	size_t nrules;
} route_config;

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
	int32_t rule;  /* index of the matching rule in route_config.rules; -1 = the default route */
} route_decision;

typedef struct route_table route_table;

/* Compiles cfg into a table (seed 002, CompiledRoutes::new and
 * compile_routes). Slots: one per distinct tag, numbered in the order the
 * rules first name them, the default's last when no rule names it. The
 * geosite file is read only when a rule has a geosite matcher, the geoip file
 * only when one has a geoip matcher, geosite first; each distinct code
 * string is loaded once. cfg is only read, nothing of it is kept.
 *
 * Returns 0 with *out (free with route_table_free), or a negative
 * route_msg_id with "building route failed: <reason>" in err (truncated to
 * err_size): every ROUTE_ERR_* of route_msg.h; docs/routing.md lists them. */
__attribute__((warn_unused_result)) int route_table_build(const route_config *cfg,
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
