/* spec_msg.h - the catalogue of spec check messages, and the helpers the checks share. */
#ifndef ETM_SUPERVISOR_SPEC_MSG_H
#define ETM_SUPERVISOR_SPEC_MSG_H

#include <stdbool.h>
#include <stddef.h>

typedef enum spec_msg_id {
	SPEC_DUPLICATE_OUTBOUND,
	SPEC_BALANCER_COLLIDES,
	SPEC_BALANCER_UNKNOWN_MEMBER,
	SPEC_BALANCER_UNPROBEABLE,
	SPEC_BALANCER_STRATEGY,
	SPEC_BALANCER_EMPTY,
	SPEC_BALANCER_RANGE,
	SPEC_BALANCER_TOO_MANY,
	SPEC_ROUTE_UNKNOWN_TAG,
	SPEC_NO_OUTBOUND,
	SPEC_DUPLICATE_INBOUND,
	SPEC_OUTBOUND_NEEDS_SERVER,
	SPEC_OUTBOUND_NEEDS_SETTING,
	SPEC_INBOUND_NEEDS_SETTING,
	SPEC_BAD_UUID,
	SPEC_BAD_LISTEN,
	SPEC_TLS_NEEDS_CERT,
	SPEC_RULE_NO_MATCHER,
	SPEC_RULE_BAD_CIDR,
	SPEC_USER_NEEDS,
	SPEC_RULE_BAD_REGEX,
	SPEC_BAD_WS_PATH,
	SPEC_BAD_DNS_SERVER,
	SPEC_UNAVAILABLE_INBOUND,
	SPEC_UNAVAILABLE_OUTBOUND,
	SPEC_UNAVAILABLE_FEATURE,
	SPEC_UNAVAILABLE_IN_FEATURE,
	SPEC_UNAVAILABLE_OUT_FEATURE,
	SPEC_DUPLICATE_CLUSTER,
	SPEC_CLUSTER_EMPTY,
	SPEC_CLUSTER_BACKEND,
	SPEC_CLUSTER_INVALID,
	SPEC_CLUSTER_RANGE,
	SPEC_CLUSTER_NO_CHECK,
	SPEC_UNKNOWN_CLUSTER,
	SPEC_LB_RANGE,
	SPEC_LB_TAKES_NO,
	SPEC_OUT_OF_MEMORY,
	SPEC_CLUSTER_TWO_PAYLOADS,
	SPEC_CLUSTER_BAD_HEX,
	SPEC_MSG_COUNT_,
} spec_msg_id;

/* printf formats, one per id; every argument is a string. */
extern const char *const spec_msg[SPEC_MSG_COUNT_];

/* Formats message id into msg (truncating to size) and returns -1, so a check
 * can `return spec_format(...)`. */
int spec_format(char *msg, size_t size, spec_msg_id id, ...);

/* An IPv4 or IPv6 address with an optional /prefix no longer than the family's. */
bool spec_cidr_valid(const char *s);

#endif
