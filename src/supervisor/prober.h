/* prober.h - the balancers' health probes: one loop per member on a thread of their own. */
#ifndef ETM_SUPERVISOR_PROBER_H
#define ETM_SUPERVISOR_PROBER_H

#include <stddef.h>

#include "runtime/dns_cache.h"
#include "runtime/dns_service.h"
#include "supervisor/plane.h"

/* How often the prober looks for early re-probe requests (a member's dial
 * failed, or every member was down at selection): the wake-up latency of
 * issue 6's passive failure counting. */
#define PROBER_TICK_MS 100

/* An every-member re-probe runs at most this often per balancer: a flood of
 * flows while all members are down must not become a flood of probes. */
#define PROBER_ALL_MIN_MS 1000

typedef struct prober prober;

/* Starts probing every member of every balancer of p (which it holds a
 * reference on) on a new thread: resolve the member's server through a
 * resolver with these servers and the shared cache, TCP-connect to each
 * address in turn, all bounded by probe_timeout; then wait probe_interval
 * (seed 000 "The probe task"). The first probes run at once. A state change
 * logs "balancer member <tag> is now up (balancer <b>)" / "... is now down
 * (balancer <b>: probe: <why>)" at info. Each
 * probe's delay and end time go to its balancer's last[] (balanced.h),
 * which etm_supervisor_member_probe reads.
 * Returns NULL with err when the thread or the resolver cannot start; a
 * plane without balancers gets a prober that does nothing. */
prober *prober_start(plane *p, dns_cache *cache, const char *const *dns_servers, size_t n_servers,
                     dns_svc_conf *svc_conf, char *err, size_t err_size);

/* Stops every probe (an in-flight one is cancelled, not waited for), joins
 * the thread and drops the plane reference. NULL is a no-op. */
void prober_stop(prober *pr);

#endif
