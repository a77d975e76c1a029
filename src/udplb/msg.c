/* msg.c - every user-facing text of the UDP load balancer core, in one place so tests can assert them word for word. */
#include "udplb/msg.h"

#define STR_(x) #x
#define UDPLB_STR(x) STR_(x)

static const char *const ERRORS[UDPLB_ERR_COUNT] = {
	[0] = "success",
	[-UDPLB_E_BUSY] = "outputs not drained: poll until empty before the next input",
	[-UDPLB_E_INVAL] = "malformed input",
	[-UDPLB_E_NOMEM] = "out of memory",
	[-UDPLB_E_TIMEOUT] = "idle timeout must be between 1 and " UDPLB_STR(
		UDPLB_TIMEOUT_MAX_MS) " ms",
	[-UDPLB_E_MAX_FLOWS] = "max_flows must be between 1 and " UDPLB_STR(UDPLB_MAX_FLOWS_LIMIT),
	[-UDPLB_E_MAX_RX] = "max_rx_datagram_size must be between 1 and " UDPLB_STR(
		UDPLB_DATAGRAM_MAX),
	[-UDPLB_E_PREFIX] = "subnet prefix length must be at most 32 for IPv4 and 128 for IPv6",
	[-UDPLB_E_SELECTION] = "selection must be round_robin, hrw or maglev",
	[-UDPLB_E_AFFINITY] = "affinity must be source_ip or source_ip_port",
	[-UDPLB_E_PPV2] = "proxy_protocol must be none, first or every",
	[-UDPLB_E_BACKENDS] = "a cluster holds at most " UDPLB_STR(UDPLB_BACKENDS_MAX) " backends",
	[-UDPLB_E_WEIGHT] = "backend weight must be between 1 and " UDPLB_STR(UDPLB_WEIGHT_MAX),
	[-UDPLB_E_BACKEND] = "backend address must be an IPv4 or IPv6 address with a non-zero port",
	[-UDPLB_E_DUPLICATE] = "backend address listed twice",
	[-UDPLB_E_MAGLEV] = "maglev table size must be a prime, at least the backend count, at "
			    "most " UDPLB_STR(UDPLB_MAGLEV_SIZE_MAX),
	[-UDPLB_E_RANGE] = "backend index out of range",
	[-UDPLB_E_INVARIANT] = "udplb core invariant broken",
	[-UDPLB_E_LINK_LOCAL] = "a link-local backend address would need a zone, which backend "
				"addresses do not take: give a routable address",
};

static const struct {
	const char *name, *text;
} DROPS[UDPLB_DROP_COUNT] = {
	[UDPLB_DROP_TRUNCATED] = {"truncated", "datagram longer than max_rx_datagram_size"},
	[UDPLB_DROP_NO_BACKEND] = {"no_backend", "no cluster or no backend to send to"},
	[UDPLB_DROP_INVALID] = {"invalid", "empty datagram or a source that cannot be a flow"},
	[UDPLB_DROP_SHED_DRAINING] = {"shed_draining", "new flow refused: the listener is draining"},
	[UDPLB_DROP_SHED_PER_IP] = {"shed_per_ip", "new flow refused: max_flows_per_ip reached"},
	[UDPLB_DROP_SHED_PER_SUBNET] = {"shed_per_subnet",
					"new flow refused: max_flows_per_subnet reached"},
	[UDPLB_DROP_SHED_MAX_FLOWS] = {"shed_max_flows", "new flow refused: max_flows reached"},
	[UDPLB_DROP_NO_MEMORY] = {"no_memory", "new flow refused: out of memory"},
	[UDPLB_DROP_UNKNOWN_FLOW] = {"unknown_flow", "backend datagram for a closed flow"},
};

static const struct {
	const char *name, *text;
} CLOSES[UDPLB_CLOSE_COUNT] = {
	[UDPLB_CLOSE_IDLE] = {"idle", "idle timeout"},
	[UDPLB_CLOSE_RESPONSES] = {"responses", "responses cap reached"},
	[UDPLB_CLOSE_REQUESTS] = {"requests", "requests cap reached"},
	[UDPLB_CLOSE_ALL] = {"closed", "listener removed or stopped"},
	[UDPLB_CLOSE_ABORT] = {"aborted", "flow aborted"},
	[UDPLB_CLOSE_REMOVED] = {"removed", "its backend was removed from the cluster"},
};

const char *udplb_strerror(int err)
{
	if (err > 0 || err <= -UDPLB_ERR_COUNT)
		return "unknown error";
	return ERRORS[-err];
}

const char *udplb_drop_text(udplb_drop_reason r)
{
	return (unsigned)r < UDPLB_DROP_COUNT ? DROPS[r].text : "unknown drop reason";
}

const char *udplb_drop_name(udplb_drop_reason r)
{
	return (unsigned)r < UDPLB_DROP_COUNT ? DROPS[r].name : "unknown";
}

const char *udplb_close_text(udplb_close_reason r)
{
	return (unsigned)r < UDPLB_CLOSE_COUNT ? CLOSES[r].text : "unknown close reason";
}

const char *udplb_close_name(udplb_close_reason r)
{
	return (unsigned)r < UDPLB_CLOSE_COUNT ? CLOSES[r].name : "unknown";
}
