/* freedom_udp.h - the direct datagram link (seed 000 ResolvingUdp): one socket per family, names resolved per link. */
#ifndef ETM_OUTBOUND_FREEDOM_UDP_H
#define ETM_OUTBOUND_FREEDOM_UDP_H

#include <stddef.h>

#include "runtime/connector.h"
#include "runtime/dial.h"
#include "runtime/dns.h"

/* Names a link remembers (resolved, or being resolved with one datagram
 * held); beyond this the oldest entry is forgotten. */
#define FREEDOM_UDP_MAX_NAMES 64

/* Opens the link on w's loop: binds a UDP socket in each family af allows
 * ([V4] for ipv4_only, [V6] for ipv6_only, both otherwise); a family whose
 * bind fails is left out. Returns NULL with "udp: no usable local socket in
 * any requested family" in err when none binds. */
dgram_link *freedom_udp_open(worker *w, dns_resolver *dns, dial_family af,
                             const dgram_handlers *h, void *ud, char *err, size_t err_size);

/* A link that swallows every datagram and never receives (BlackholeLink). */
dgram_link *blackhole_udp_open(void);

#endif
