/* route_msg.h - every text the route module shows a user: build errors, warnings, decoder reasons. */
#ifndef ETM_ROUTE_ROUTE_MSG_H
#define ETM_ROUTE_ROUTE_MSG_H

#include <stddef.h>

/* Build errors come first: route_table_build returns the negated id, so a
 * caller (and a test) can tell them apart without parsing text. The texts are
 * the seed's (seed 002, "编译路由表" error table) word for word; each is
 * printed after ROUTE_BUILD_PREFIX. */
typedef enum route_msg_id {
	ROUTE_ERR_NONE_ = 0, /* not a message: keeps every error id nonzero */
	ROUTE_ERR_NO_GEOSITE_FILE,
	ROUTE_ERR_NO_GEOIP_FILE,
	ROUTE_ERR_GEOSITE_NOT_FOUND,
	ROUTE_ERR_GEOIP_NOT_FOUND,
	ROUTE_ERR_GEOSITE_DECODE,
	ROUTE_ERR_GEOIP_DECODE,
	ROUTE_ERR_OS,
	ROUTE_ERR_FILE_TOO_LARGE,
	ROUTE_ERR_GEOSITE_REGEX,
	ROUTE_ERR_GEOIP_IP_LEN,
	ROUTE_ERR_GEOIP_PREFIX_LARGE,
	ROUTE_ERR_GEOIP_PREFIX,
	ROUTE_ERR_REGEX,
	ROUTE_ERR_BAD_CIDR,
	ROUTE_ERR_NO_DEFAULT,
	ROUTE_ERR_NO_OUTBOUND,
	ROUTE_ERR_TOO_MANY_RULES,
	ROUTE_ERR_NOMEM,
	ROUTE_ERR_COUNT_, /* errors end here */

	/* Warnings (log target "route"): the entry is skipped, the build goes on. */
	ROUTE_WARN_GEOSITE_TYPE,
	ROUTE_WARN_GEOSITE_REGEX,

	/* The <decoder error> part of ROUTE_ERR_GEOSITE_DECODE / _GEOIP_DECODE. */
	ROUTE_DEC_VARINT,
	ROUTE_DEC_FIELD_NUMBER,
	ROUTE_DEC_WIRE_TYPE,
	ROUTE_DEC_TRUNCATED,
	ROUTE_DEC_FIELD_TYPE,
	ROUTE_DEC_ENTRY,

	/* The <error> part of ROUTE_ERR_GEOSITE_REGEX. */
	ROUTE_REGEX_TOO_MANY,
	/* Why a pattern does not compile: ROUTE_ERR_REGEX, route_regex_check
	 * and ROUTE_WARN_GEOSITE_REGEX carry it. */
	ROUTE_REGEX_REASON,
	ROUTE_MSG_COUNT_,
} route_msg_id;

/* Printed before every build error. */
#define ROUTE_BUILD_PREFIX "building route failed: "

/* The log target of the module's warnings. */
#define ROUTE_LOG_TARGET "route"

/* printf formats, one per id (ROUTE_ERR_NONE_ and the _COUNT_ markers are NULL). */
extern const char *const route_msg[ROUTE_MSG_COUNT_];

/* Writes ROUTE_BUILD_PREFIX and message id into err (truncated to err_size;
 * err may be NULL when err_size is 0) and returns -(int)id, so a build step
 * can `return route_fail(...)`. */
int route_fail(char *err, size_t err_size, route_msg_id id, ...);

/* Formats message id alone, without the prefix, into buf. */
void route_msg_format(char *buf, size_t size, route_msg_id id, ...);

/* Logs a ROUTE_WARN_* message at warn level under ROUTE_LOG_TARGET. */
void route_warn(route_msg_id id, ...);

#endif
