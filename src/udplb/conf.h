/* conf.h - a cluster as the core and the shell take it: the cluster contract, the backend list, the health checks. */
#ifndef ETM_UDPLB_CONF_H
#define ETM_UDPLB_CONF_H

#include <stddef.h>
#include <stdint.h>

#include "udplb/backends.h"
#include "udplb/manager.h"

typedef struct udplb_conf {
	udplb_cluster cluster;
	udplb_backend *backends; /* owned, in the config's order */
	size_t n_backends;
	uint32_t maglev_size;
	bool reuse_sockets; /* reuse_upstream_sockets: the shell's, not the core's */
} udplb_conf;

/* With conf->cluster, maglev_size and reuse_sockets set and no backends
 * yet, checks what the core checks: the cluster, then each of the n backend
 * texts ("ip:port" or "ip:port weight=N"), parsed into conf->backends, then
 * the whole set (duplicates, count, Maglev size). Returns 0, or a UDPLB_E_*
 * code with *bad set to the index of the backend at fault, or to n when the
 * fault is not one backend's; on error conf holds no backends. */
__attribute__((warn_unused_result)) int udplb_conf_load(udplb_conf *conf,
                                                        const char *const *backends, size_t n,
                                                        size_t *bad);

/* A deep copy of src into *dst. Returns 0 or UDPLB_E_NOMEM (then *dst is
 * empty). */
__attribute__((warn_unused_result)) int udplb_conf_copy(udplb_conf *dst, const udplb_conf *src);

void udplb_conf_free(udplb_conf *conf);

/* A cluster's health checks ([cluster.health], docs/udp-lb.md). */
typedef struct udplb_health_config {
	bool enabled;            /* probes run at all */
	bool tcp;                /* a TCP connect per probe */
	uint16_t tcp_port;       /* its port; 0: each backend's own */
	bool udp;                /* a UDP datagram per probe, of payload */
	const uint8_t *payload;  /* borrowed: whoever fills the struct says for how long */
	size_t payload_len;
	uint64_t interval_ms, timeout_ms;
	uint32_t rise, fall;
} udplb_health_config;

/* Decodes hexadecimal bytes ("0a1B", "0a 1b": spaces between bytes only)
 * into out[0..cap); with out NULL only checks and counts. Returns the byte
 * count, or -1 for anything else, or more than UDPLB_DATAGRAM_MAX bytes. */
__attribute__((warn_unused_result)) long udplb_hex_decode(const char *text, uint8_t *out,
                                                          size_t cap);

#endif
