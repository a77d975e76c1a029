/* dial.h - dialing a TCP destination: resolve, order by address family, try each address in turn. */
#ifndef ETM_RUNTIME_DIAL_H
#define ETM_RUNTIME_DIAL_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "base/addr.h"
#include "proto/proto.h"
#include "runtime/connector.h"
#include "runtime/dns.h"
#include "runtime/worker.h"

/* One connect attempt may take this long before the next address is tried
 * (seed 000 "Limits", DEFAULT_CONNECT_TIMEOUT). */
#define DIAL_ATTEMPT_MS 10000

/* Addresses of one name tried at most. */
#define DIAL_MAX_CANDIDATES 16

/* Longest failure text kept: one "addr: error" per candidate. */
#define DIAL_ERR_MAX 1024

/* Which address families a dial uses and in which order. The config's
 * address_family is converted to this where an outbound is built. */
typedef enum dial_family {
	DIAL_FAMILY_AUTO, /* both families, in the resolver's order */
	DIAL_FAMILY_PREFER_IPV4,
	DIAL_FAMILY_PREFER_IPV6,
	DIAL_FAMILY_IPV4_ONLY,
	DIAL_FAMILY_IPV6_ONLY,
} dial_family;


/* Starts dialing dest on w's loop. A domain is resolved with dns. The
 * callback (connector.h) runs exactly once, later (never inside this call),
 * unless dial_cancel comes first. On failure msg reads e.g. "failed to
 * connect to any address (1.2.3.4:80: connection refused; ...)". With
 * refuse_own, an address that is one of our own listeners (the worker's
 * guard, guard.h) is not connected to but fails as refused, "1.2.3.4:80:
 * one of our own listening addresses": a client-chosen destination must not
 * chain the proxy to itself. The endpoint it hands over carries origin (the
 * outbound version that dials, endpoint_origin; 0 for none). Returns NULL when memory runs out. */
connect_pending *dial_tcp(worker *w, dns_resolver *dns, const addr_dest *dest,
                          dial_family af, bool refuse_own, uint64_t origin, connect_cb cb,
                          void *data);

/* Orders resolved addresses by the strategy in place and drops the ones it
 * excludes; returns the count kept. Pure: exposed for tests. */
size_t dial_order(struct sockaddr_storage *addrs, size_t n, dial_family af);

#endif
