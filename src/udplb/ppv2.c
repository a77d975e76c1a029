/* ppv2.c - the PROXY v2 DGRAM header builder (proxy-protocol.txt section 2.2). */
#include "udplb/ppv2.h"

#include <string.h>

const uint8_t UDPLB_PPV2_SIGNATURE[UDPLB_PPV2_SIG_LEN] = {0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D,
                                                          0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A};

#define VERSION_PROXY 0x21 /* version 2, command PROXY */
#define TRANSPORT_DGRAM 0x2
#define FAM_UNSPEC 0x00

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

size_t udplb_ppv2_build(uint8_t out[UDPLB_PPV2_MAX], const udplb_addr *src, const udplb_addr *dst)
{
	size_t alen = udplb_addr_ip_len(src);

	memcpy(out, UDPLB_PPV2_SIGNATURE, UDPLB_PPV2_SIG_LEN);
	out[12] = VERSION_PROXY;
	if (alen == 0 || src->family != dst->family) {
		out[13] = FAM_UNSPEC;
		put16(out + 14, 0);
		return UDPLB_PPV2_FIXED_LEN;
	}
	/* The family numbers of udplb_addr are the spec's (addr.h). */
	out[13] = (uint8_t)(src->family << 4 | TRANSPORT_DGRAM);
	put16(out + 14, (uint16_t)(2 * alen + 4));
	uint8_t *p = out + UDPLB_PPV2_FIXED_LEN;
	memcpy(p, src->ip, alen);
	memcpy(p + alen, dst->ip, alen);
	put16(p + 2 * alen, src->port);
	put16(p + 2 * alen + 2, dst->port);
	return UDPLB_PPV2_FIXED_LEN + 2 * alen + 4;
}
