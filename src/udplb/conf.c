/* conf.c - lowering a [[cluster]] spec into the core's cluster contract and backend list. */
#include "udplb/conf.h"

#include <stdlib.h>
#include <string.h>

#include "base/bytes.h"

static const udplb_select SELECTIONS[] = {
	[ETM_LB_ROUND_ROBIN] = UDPLB_SELECT_ROUND_ROBIN,
	[ETM_LB_HRW] = UDPLB_SELECT_HRW,
	[ETM_LB_MAGLEV] = UDPLB_SELECT_MAGLEV,
};

static const udplb_ppv2_mode PPV2_MODES[] = {
	[ETM_LB_PPV2_NONE] = UDPLB_PPV2_NONE,
	[ETM_LB_PPV2_FIRST] = UDPLB_PPV2_FIRST,
	[ETM_LB_PPV2_EVERY] = UDPLB_PPV2_EVERY,
};

static uint32_t clamp32(uint64_t v) { return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v; }

int udplb_conf_from_spec(const etm_cluster_spec *c, udplb_conf *out, size_t *bad)
{
	memset(out, 0, sizeof *out);
	*bad = c->backends.len;
	udplb_cluster *k = &out->cluster;
	udplb_cluster_defaults(k);
	k->selection = (unsigned)c->selection <= ETM_LB_MAGLEV ? SELECTIONS[c->selection]
	                                                        : (udplb_select)-1;
	k->affinity = c->affinity == ETM_LB_SOURCE_IP_PORT ? UDPLB_AFFINITY_SOURCE_IP_PORT
	                                                   : UDPLB_AFFINITY_SOURCE_IP;
	uint64_t idle_ms = c->idle_timeout * 1000;
	k->front_timeout_ms = k->back_timeout_ms = clamp32(idle_ms);
	k->responses = clamp32(c->responses);
	k->requests = clamp32(c->requests);
	k->max_flows_per_ip = clamp32(c->max_flows_per_ip);
	k->max_flows_per_subnet = clamp32(c->max_flows_per_subnet);
	k->subnet_prefix_v4 = (uint8_t)(c->subnet_prefix_v4 > 255 ? 255 : c->subnet_prefix_v4);
	k->subnet_prefix_v6 = (uint8_t)(c->subnet_prefix_v6 > 255 ? 255 : c->subnet_prefix_v6);
	k->proxy_protocol = (unsigned)c->proxy_protocol <= ETM_LB_PPV2_EVERY
	                            ? PPV2_MODES[c->proxy_protocol]
	                            : (udplb_ppv2_mode)-1;
	int err = udplb_cluster_validate(k);
	if (err)
		return err;
	out->maglev_size = clamp32(c->maglev_size);
	out->reuse_sockets = c->reuse_upstream_sockets;
	if (c->backends.len > UDPLB_BACKENDS_MAX)
		return UDPLB_E_BACKENDS;
	out->backends = calloc(c->backends.len ? c->backends.len : 1, sizeof *out->backends);
	if (!out->backends)
		return UDPLB_E_NOMEM;
	out->n_backends = c->backends.len;
	for (size_t i = 0; i < c->backends.len; i++) {
		err = udplb_backend_parse(c->backends.items[i], &out->backends[i]);
		if (err) {
			*bad = i;
			udplb_conf_free(out);
			return err;
		}
	}
	/* The set as a whole: duplicates, and a Maglev size that fits it. */
	udplb_backends *view;
	err = udplb_backends_new(&view, out->maglev_size);
	if (!err) {
		err = udplb_backends_set(view, out->backends, out->n_backends);
		udplb_backends_del(view);
	}
	if (err) {
		udplb_conf_free(out);
		return err;
	}
	return 0;
}

long udplb_hex_decode(const char *text, uint8_t *out, size_t cap)
{
	long n = 0;
	for (const char *p = text; *p;) {
		if (*p == ' ' && p != text && p[1] != '\0' && p[1] != ' ') {
			p++; /* one space between two bytes */
			continue;
		}
		int hi = bytes_hex_digit(p[0]), lo = hi < 0 ? -1 : bytes_hex_digit(p[1]);
		if (lo < 0 || n >= UDPLB_DATAGRAM_MAX)
			return -1;
		if (out && (size_t)n < cap)
			out[n] = (uint8_t)(hi << 4 | lo);
		n++;
		p += 2;
	}
	return n;
}

void udplb_conf_free(udplb_conf *conf)
{
	free(conf->backends);
	conf->backends = NULL;
	conf->n_backends = 0;
}
