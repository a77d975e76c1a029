/* ppv2.h - the PROXY protocol version 2 header for one datagram (the DGRAM transport), built from two endpoints into a caller's buffer. */
#ifndef ETM_UDPLB_PPV2_H
#define ETM_UDPLB_PPV2_H

#include <stddef.h>
#include <stdint.h>

#include "udplb/addr.h"

/* haproxy's doc/proxy-protocol.txt, section 2.2:
 *
 *   0..11  signature 0D 0A 0D 0A 00 0D 0A 51 55 49 54 0A
 *   12     version (high nibble, 2) and command (low nibble, 1 = PROXY): 0x21
 *   13     family (high nibble) and transport (low nibble, 2 = DGRAM):
 *          0x12 UDP over IPv4, 0x22 UDP over IPv6, 0x00 UNSPEC
 *   14..15 address block length, big endian: 12 (v4), 36 (v6), 0 (UNSPEC)
 *   16..   source address, destination address, source port, destination
 *          port, all in network byte order
 *
 * No reference proxy sends PPv2 over UDP; the spec's DGRAM transport
 * nibble is what says "each datagram", and seed 001 section 8 chose it. */
#define UDPLB_PPV2_SIG_LEN 12
#define UDPLB_PPV2_FIXED_LEN 16
#define UDPLB_PPV2_MAX (UDPLB_PPV2_FIXED_LEN + 2 * 16 + 2 * 2) /* 52: the IPv6 form */

extern const uint8_t UDPLB_PPV2_SIGNATURE[UDPLB_PPV2_SIG_LEN];

/* Writes the header for a datagram from src (the real client) to dst (the
 * address the client sent to) into out and returns its length: 28 for two
 * IPv4 endpoints, 52 for two IPv6 ones. When the families differ or either
 * endpoint is unset, it writes the 16-byte AF_UNSPEC form with an empty
 * address block, which the spec tells a receiver to accept while ignoring
 * the addresses. This function can't fail. */
size_t udplb_ppv2_build(uint8_t out[UDPLB_PPV2_MAX], const udplb_addr *src,
                        const udplb_addr *dst);

#endif
