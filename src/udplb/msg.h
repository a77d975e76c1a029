/* msg.h - the UDP load balancer core's error codes, drop and close reasons, and the one table of their texts. */
#ifndef ETM_UDPLB_MSG_H
#define ETM_UDPLB_MSG_H

/* Bounds the texts below quote. Kept here, as plain numbers, so the
 * catalogue can spell them with UDPLB_STR. */
#define UDPLB_TIMEOUT_MAX_MS 86400000 /* one day: longer is a leak, not a timeout */
#define UDPLB_MAX_FLOWS_LIMIT 16777216 /* 2^24: slot numbers and hash indexes stay in 32 bits */
#define UDPLB_DATAGRAM_MAX 65535       /* the largest UDP payload any IP version carries */
#define UDPLB_BACKENDS_MAX 1024        /* Maglev's 16-bit entries and O(N) HRW stay cheap */
#define UDPLB_WEIGHT_MAX 65535         /* weight x log term stays far inside 64 bits */
#define UDPLB_MAGLEV_SIZE_MAX 655373   /* the Maglev paper's larger table size */

/* Errors the core's functions return (always negative; 0 is success). */
typedef enum udplb_err {
	UDPLB_OK = 0,
	UDPLB_E_BUSY = -1,        /* outputs left undrained: poll until empty first */
	UDPLB_E_INVAL = -2,       /* a malformed input or argument */
	UDPLB_E_NOMEM = -3,       /* an allocation failed; nothing changed */
	UDPLB_E_TIMEOUT = -4,     /* an idle timeout out of range */
	UDPLB_E_MAX_FLOWS = -5,   /* max_flows out of range */
	UDPLB_E_MAX_RX = -6,      /* max_rx_datagram_size out of range */
	UDPLB_E_PREFIX = -7,      /* a subnet prefix length too long */
	UDPLB_E_SELECTION = -8,   /* an unknown selection mode */
	UDPLB_E_AFFINITY = -9,    /* an unknown affinity */
	UDPLB_E_PPV2 = -10,       /* an unknown proxy_protocol mode */
	UDPLB_E_BACKENDS = -11,   /* too many backends */
	UDPLB_E_WEIGHT = -12,     /* a backend weight out of range */
	UDPLB_E_BACKEND = -13,    /* a backend address that is not IP:port */
	UDPLB_E_DUPLICATE = -14,  /* one backend address listed twice */
	UDPLB_E_MAGLEV = -15,     /* a Maglev table size that is not a usable prime */
	UDPLB_E_RANGE = -16,      /* a backend index past the view */
	UDPLB_E_INVARIANT = -17,  /* udplb_manager_check found a broken invariant */
	UDPLB_E_LINK_LOCAL = -18, /* a link-local backend: it would need a zone */
} udplb_err;
#define UDPLB_ERR_COUNT 19

/* Why a datagram was dropped (Output DROP). Every admission refusal comes
 * before any allocation (seed 001 section 12, rule 1). */
typedef enum udplb_drop_reason {
	UDPLB_DROP_TRUNCATED,         /* longer than max_rx_datagram_size */
	UDPLB_DROP_NO_BACKEND,        /* no cluster configured, or no backend to pick */
	UDPLB_DROP_INVALID,           /* empty payload, or a source that cannot be a flow */
	UDPLB_DROP_SHED_DRAINING,     /* new flow while the listener drains */
	UDPLB_DROP_SHED_PER_IP,       /* new flow over max_flows_per_ip */
	UDPLB_DROP_SHED_PER_SUBNET,   /* new flow over max_flows_per_subnet */
	UDPLB_DROP_SHED_MAX_FLOWS,    /* new flow with the table at max_flows */
	UDPLB_DROP_NO_MEMORY,         /* the table could not grow to take the flow */
	UDPLB_DROP_UNKNOWN_FLOW,      /* backend datagram for a flow that is gone */
} udplb_drop_reason;
#define UDPLB_DROP_COUNT 9

/* Why a flow closed (Output METRIC FLOW_EVICTED). */
typedef enum udplb_close_reason {
	UDPLB_CLOSE_IDLE,      /* its idle deadline passed */
	UDPLB_CLOSE_RESPONSES, /* the responses cap was reached */
	UDPLB_CLOSE_REQUESTS,  /* the requests cap was reached */
	UDPLB_CLOSE_ALL,       /* the listener was removed or stopped (CLOSE_ALL) */
	UDPLB_CLOSE_ABORT,     /* the shell aborted it (ABORT_FLOW: no socket, say) */
	UDPLB_CLOSE_REMOVED,   /* its backend left the cluster (CLOSE_BACKEND) */
} udplb_close_reason;
#define UDPLB_CLOSE_COUNT 6

/* The text of an error code; "unknown error" for a code not listed. */
const char *udplb_strerror(int err);

/* The text of a drop reason, as operators see it in metrics and logs. */
const char *udplb_drop_text(udplb_drop_reason r);

/* A short metric label for a drop reason ("truncated", "shed_per_ip", ...). */
const char *udplb_drop_name(udplb_drop_reason r);

/* The text of a close reason. */
const char *udplb_close_text(udplb_close_reason r);

/* A short metric label for a close reason ("idle", "responses", ...). */
const char *udplb_close_name(udplb_close_reason r);

/* Whether a drop is a shed: a well-formed new flow refused by policy. */
static inline int udplb_drop_is_shed(udplb_drop_reason r)
{
	return r >= UDPLB_DROP_SHED_DRAINING && r <= UDPLB_DROP_SHED_MAX_FLOWS;
}

#endif
