/* build_udplb.c - lowering a [[cluster]] and its udp_lb inbound into udplb's configs: the only udplb code that reads the spec. */
#include "supervisor/build_udplb.h"

#include <stdlib.h>
#include <string.h>

#include "udplb/msg.h"

enum { MSG_NOMEM, MSG_CLUSTER };
static const char *const msgs[] = {
	[MSG_NOMEM] = "out of memory",
	[MSG_CLUSTER] = "cluster %s: %s",
};

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

int build_udplb_conf(const etm_cluster_spec *c, udplb_conf *out, size_t *bad)
{
	memset(out, 0, sizeof *out);
	udplb_cluster *k = &out->cluster;
	udplb_cluster_defaults(k);
	k->selection = (unsigned)c->selection <= ETM_LB_MAGLEV ? SELECTIONS[c->selection]
	                                                        : (udplb_select)-1;
	k->affinity = c->affinity == ETM_LB_SOURCE_IP_PORT ? UDPLB_AFFINITY_SOURCE_IP_PORT
	                                                   : UDPLB_AFFINITY_SOURCE_IP;
	k->front_timeout_ms = clamp32(etm_cluster_front_timeout(c) * 1000);
	k->back_timeout_ms = clamp32(etm_cluster_back_timeout(c) * 1000);
	k->responses = clamp32(c->responses);
	k->requests = clamp32(c->requests);
	k->max_flows_per_ip = clamp32(c->max_flows_per_ip);
	k->max_flows_per_subnet = clamp32(c->max_flows_per_subnet);
	k->subnet_prefix_v4 = (uint8_t)(c->subnet_prefix_v4 > 255 ? 255 : c->subnet_prefix_v4);
	k->subnet_prefix_v6 = (uint8_t)(c->subnet_prefix_v6 > 255 ? 255 : c->subnet_prefix_v6);
	k->proxy_protocol = (unsigned)c->proxy_protocol <= ETM_LB_PPV2_EVERY
	                            ? PPV2_MODES[c->proxy_protocol]
	                            : (udplb_ppv2_mode)-1;
	out->maglev_size = clamp32(c->maglev_size);
	out->reuse_sockets = c->reuse_upstream_sockets;
	return udplb_conf_load(out, (const char *const *)c->backends.items, c->backends.len, bad);
}

/* The probes of [cluster.health]; the payload, when any, into storage of
 * its own (owned by cfg). Returns 0 or -1 (out of memory). */
static int build_health(const etm_cluster_spec *c, udplb_health_config *h)
{
	const etm_lb_health_spec *hs = &c->health;
	memset(h, 0, sizeof *h);
	h->enabled = c->has_health;
	h->tcp = !(hs->has_tcp_port && hs->tcp_port == 0);
	h->tcp_port = hs->has_tcp_port ? hs->tcp_port : 0;
	h->udp = hs->udp_payload || hs->udp_payload_hex;
	h->interval_ms = hs->interval * 1000;
	h->timeout_ms = hs->timeout * 1000;
	h->rise = (uint32_t)hs->rise;
	h->fall = (uint32_t)hs->fall;
	if (!h->udp)
		return 0;
	long len = hs->udp_payload ? (long)strlen(hs->udp_payload)
	                           : udplb_hex_decode(hs->udp_payload_hex, NULL, 0);
	if (len < 0) {
		/* etm_spec_check refuses this; a caller that skipped it gets
		 * no probes, as before */
		h->enabled = false;
		h->udp = false;
		return 0;
	}
	uint8_t *bytes = malloc(len > 0 ? (size_t)len : 1);
	if (!bytes)
		return -1;
	if (hs->udp_payload)
		memcpy(bytes, hs->udp_payload, (size_t)len);
	else if (udplb_hex_decode(hs->udp_payload_hex, bytes, (size_t)len) != len) {
		free(bytes);
		return -1;
	}
	h->payload = bytes;
	h->payload_len = (size_t)len;
	return 0;
}

int build_udplb(const etm_inbound_spec *in, const etm_cluster_spec *cl, udplb_group_config *out,
                char *err, size_t err_size)
{
	memset(out, 0, sizeof *out);
	out->tag = in->tag;
	out->cluster_tag = cl->tag;
	out->max_flows = in->settings.max_flows;
	out->max_rx = in->settings.max_rx_datagram_size;
	size_t bad;
	int rc = build_udplb_conf(cl, &out->conf, &bad);
	if (rc) {
		snprintf(err, err_size, msgs[MSG_CLUSTER], cl->tag, udplb_strerror(rc));
		return -1;
	}
	if (build_health(cl, &out->health)) {
		snprintf(err, err_size, "%s", msgs[MSG_NOMEM]);
		build_udplb_free(out);
		return -1;
	}
	return 0;
}

void build_udplb_free(udplb_group_config *cfg)
{
	udplb_conf_free(&cfg->conf);
	free((void *)cfg->health.payload);
	cfg->health.payload = NULL;
	cfg->health.payload_len = 0;
}
