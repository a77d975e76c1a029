/* conf.h - a [[cluster]] of the spec turned into what the core takes: the cluster contract and the backend list. */
#ifndef ETM_UDPLB_CONF_H
#define ETM_UDPLB_CONF_H

#include <stddef.h>
#include <stdint.h>

#include "etemenanki/spec.h"
#include "udplb/backends.h"
#include "udplb/manager.h"

typedef struct udplb_conf {
	udplb_cluster cluster;
	udplb_backend *backends; /* owned, in the config's order */
	size_t n_backends;
	uint32_t maglev_size;
	bool reuse_sockets; /* reuse_upstream_sockets: the shell's, not the core's */
} udplb_conf;

/* Fills *out from c, checking what the core checks: each backend's text,
 * the whole set (duplicates, count, Maglev size) and the cluster. Returns 0,
 * or a UDPLB_E_* code with *bad set to the index of the backend at fault, or
 * to c->backends.len when the fault is not one backend's. The range checks
 * of the spec (etm_spec_check) come first; this assumes them. */
__attribute__((warn_unused_result)) int udplb_conf_from_spec(const etm_cluster_spec *c,
                                                             udplb_conf *out, size_t *bad);

void udplb_conf_free(udplb_conf *conf);

/* Decodes hexadecimal bytes ("0a1B", "0a 1b": spaces between bytes only)
 * into out[0..cap); with out NULL only checks and counts. Returns the byte
 * count, or -1 for anything else, or more than UDPLB_DATAGRAM_MAX bytes. */
__attribute__((warn_unused_result)) long udplb_hex_decode(const char *text, uint8_t *out,
                                                          size_t cap);

#endif
