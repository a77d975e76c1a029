/* route_msg.c - the route module's one message table and the helpers that print from it. */
#include "route/route_msg.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"

const char *const route_msg[ROUTE_MSG_COUNT_] = {
	[ROUTE_ERR_NO_GEOSITE_FILE] = "a geosite matcher is used but no geosite file is configured",
	[ROUTE_ERR_NO_GEOIP_FILE] = "a geoip matcher is used but no geoip file is configured",
	[ROUTE_ERR_GEOSITE_NOT_FOUND] = "geosite code not found: %s",
	[ROUTE_ERR_GEOIP_NOT_FOUND] = "geoip code not found: %s",
	[ROUTE_ERR_GEOSITE_DECODE] = "geosite decode: %s",
	[ROUTE_ERR_GEOIP_DECODE] = "geoip decode: %s",
	/* The Rust original prints std::io::Error, e.g. "No such file or
	 * directory (os error 2)"; strerror gives the same words on glibc. */
	[ROUTE_ERR_OS] = "%s (os error %d)",
	[ROUTE_ERR_FILE_TOO_LARGE] = "%s file is larger than %u MiB",
	[ROUTE_ERR_GEOSITE_REGEX] = "geosite %s: regex entries: %s",
	[ROUTE_ERR_GEOIP_IP_LEN] = "geoip cidr: ip must be 4 or 16 bytes, got %zu",
	[ROUTE_ERR_GEOIP_PREFIX_LARGE] = "geoip cidr: prefix too large",
	[ROUTE_ERR_GEOIP_PREFIX] =
		"geoip cidr: prefix length %u is longer than the %u bits of an IPv%u address",
	[ROUTE_ERR_REGEX] = "%s: %s",
	/* Rule CIDRs are checked by etm_spec_check; this one means a caller
	 * skipped the checks. */
	[ROUTE_ERR_BAD_CIDR] = "invalid CIDR \"%s\"",
	/* These two are unreachable after etm_spec_check (internal errors). */
	[ROUTE_ERR_NO_DEFAULT] = "no default route tag",
	[ROUTE_ERR_NO_OUTBOUND] = "route rule #%zu names no outbound",
	[ROUTE_ERR_TOO_MANY_RULES] = "more than %ld rules",
	[ROUTE_ERR_NOMEM] = "out of memory",

	[ROUTE_WARN_GEOSITE_TYPE] = "skipping unknown geosite domain type %d",
	[ROUTE_WARN_GEOSITE_REGEX] = "skipping invalid geosite regex \"%s\": %s",

	[ROUTE_DEC_VARINT] = "malformed varint at byte %zu",
	[ROUTE_DEC_FIELD_NUMBER] = "invalid field number at byte %zu",
	[ROUTE_DEC_WIRE_TYPE] = "unsupported wire type %u at byte %zu",
	[ROUTE_DEC_TRUNCATED] = "field at byte %zu runs past the end of the data",
	[ROUTE_DEC_FIELD_TYPE] = "field %u at byte %zu has wire type %u, expected 2 (length-delimited)",
	[ROUTE_DEC_ENTRY] = "entry %s at byte %zu is not a valid %s message",

	[ROUTE_REGEX_TOO_MANY] = "more than %u patterns",
	[ROUTE_REGEX_REASON] = "%s at offset %zu",
};

static void vformat(char *buf, size_t size, route_msg_id id, va_list ap)
{
	if (!buf || size == 0)
		return;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
	int n = vsnprintf(buf, size, route_msg[id], ap);
#pragma GCC diagnostic pop
	(void)n; /* a truncated message is still the message's start */
}

int route_fail(char *err, size_t err_size, route_msg_id id, ...)
{
	size_t p = strlen(ROUTE_BUILD_PREFIX);
	if (err && err_size > 0) {
		snprintf(err, err_size, "%s", ROUTE_BUILD_PREFIX);
		if (p < err_size) {
			va_list ap;
			va_start(ap, id);
			vformat(err + p, err_size - p, id, ap);
			va_end(ap);
		}
	}
	return -(int)id;
}

void route_msg_format(char *buf, size_t size, route_msg_id id, ...)
{
	va_list ap;
	va_start(ap, id);
	vformat(buf, size, id, ap);
	va_end(ap);
}

void route_warn(route_msg_id id, ...)
{
	if (log_get_level() < LOG_LEVEL_WARN)
		return;
	char line[1024];
	va_list ap;
	va_start(ap, id);
	vformat(line, sizeof line, id, ap);
	va_end(ap);
	log_warn(ROUTE_LOG_TARGET, "%s", line);
}
