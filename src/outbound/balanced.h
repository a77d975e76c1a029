/* balanced.h - a balancer as the runtime runs it: the selection core, its members as outbounds, and the dial that moves to the next member when one fails. */
#ifndef ETM_OUTBOUND_BALANCED_H
#define ETM_OUTBOUND_BALANCED_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "outbound/balancer.h"
#include "outbound/outbound.h"

/* Seed 000 "Balancing in depth": the core (balancer.c) picks, this shell
 * dials; the prober (supervisor/prober.c) is the core's other shell. */
typedef struct balanced {
	atomic_uint refs;
	uint64_t id;  /* unique for the process's life, like an outbound's: the
	                 fan-out's sub-link key, so selection runs once per open */
	char *tag;    /* owned */
	uint64_t version; /* the N of tag@vN (seed 002), set by whoever builds it */
	balancer *core; /* owned */
	/* Some member's datagram link reaches only the destination it was
	 * opened for (outbound_proto.udp_one_dest): which member a sub-link
	 * gets is known only when it opens, so a fan-out opens the
	 * balancer's sub-links per destination. */
	bool udp_one_dest;
	size_t n;
	outbound **members; /* owned, n: a tag listed twice is two members */
	addr_dest *probe;   /* owned, n: each member's server and port (TCP) */
	uint64_t probe_interval_ms, probe_timeout_ms;
	/* owned, n: each member's last probe, kept with the balancer so that
	 * a reload that reuses it keeps them too */
	struct balanced_probe_last *last;
} balanced;

/* The last health probe of one member. Written by the prober's thread,
 * read by the control thread (etm_supervisor_member_probe), both relaxed:
 * the two may come from two probes one after the other, which a scrape can
 * live with. */
typedef struct balanced_probe_last {
	_Atomic int64_t delay_ms; /* its time to connect; -1: it failed, or none finished yet */
	_Atomic uint64_t when_ms; /* Unix time in ms it finished; 0: none yet */
	_Atomic uint64_t ended, failed; /* probes ended since the balancer was built, and failed */
} balanced_probe_last;

/* What balanced_new builds from, filled by supervisor/build_outbound.c from
 * a checked spec. Borrowed for the call, but for the members it takes
 * over: nothing in it points into the spec. */
typedef struct balanced_config {
	const char *tag;
	/* strategy, rise, fall and retry for the core; upstream is ignored
	 * (balanced_new derives it: members with equal tags share one) */
	balancer_config core;
	uint64_t probe_interval_ms, probe_timeout_ms;
	size_t n;
	/* n, in priority order, each taken over (freed on failure too); a tag
	 * listed twice is two members. */
	outbound **members;
	const addr_dest *probe; /* n: where each member's probe connects */
} balanced_config;

/* Builds a balancer over cfg's members. Returns NULL with the reason in err
 * ("out of memory", "balancer <tag>: ..."). The new object holds one
 * reference. */
balanced *balanced_new(const balanced_config *cfg, char *err, size_t err_size);

balanced *balanced_ref(balanced *b);
/* Drops a reference; the last one frees b and its members. Any thread;
 * NULL is a no-op. */
void balanced_unref(balanced *b);

/* Opens a stream to dest through the member the strategy picks, once per
 * flow (seed 000: never at route time); when that dial fails before any
 * byte moved, through up to `retry` more (issue 6), each failure reported
 * to the core (passive failure counting). The client sees only the last
 * failure. Holds a reference on b while it dials. Callback contract as
 * outbound_connect_stream. */
connect_pending *balanced_connect_stream(balanced *b, worker *w, dns_resolver *dns,
                                         const addr_dest *dest, connect_cb cb, void *data);

/* Opens a datagram link through the member the strategy picks now (a
 * fan-out sub-link selects once, when it opens). Contract as
 * outbound_connect_datagram. */
connect_pending *balanced_connect_datagram(balanced *b, worker *w, dns_resolver *dns,
                                           const addr_dest *to, const dgram_handlers *h,
                                           void *ud, outbound_dgram_cb done, void *oud);

#endif
