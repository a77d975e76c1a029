/* build_dns.h - the spec's [dns] service keys turned into the DNS service's shared configuration (the prepare step, ARCHITECTURE §7). */
#ifndef ETM_SUPERVISOR_BUILD_DNS_H
#define ETM_SUPERVISOR_BUILD_DNS_H

#include <stddef.h>

#include "etemenanki/spec.h"
#include "runtime/dns_service.h"

/* The inbound tag of the service's own upstream connections (seed 002
 * DNS_FLOW_TAG): rules match the resolver's traffic by it. */
#define DNS_FLOW_TAG "dns"

/* Builds the service of a checked spec: *out is NULL when [dns] has no
 * [[dns.server]] (seed 002 DnsSpec::Single: no service, port 53 is
 * routed like any port). Returns 0, or -1 with the reason in err:
 *   "dns: server <tag>: tls: ..." (its CA file)
 *   "dns: building route failed: ..." (the rules: a geosite list)
 *   "dns: out of memory" */
__attribute__((warn_unused_result)) int build_dns(const etm_spec *spec, dns_svc_conf **out,
                                                  char *err, size_t err_size);

#endif
