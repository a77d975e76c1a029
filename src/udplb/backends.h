/* backends.h - the backend view a UDP load-balancer core selects from: addresses, weights, health, and the Maglev table built from them. */
#ifndef ETM_UDPLB_BACKENDS_H
#define ETM_UDPLB_BACKENDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "udplb/addr.h"
#include "udplb/msg.h"

/* How a new flow picks its backend (seed 001 section 9). */
typedef enum udplb_select {
	UDPLB_SELECT_ROUND_ROBIN, /* weighted turns; the manager keeps the turn counter */
	UDPLB_SELECT_HRW,         /* weighted rendezvous hashing: the default */
	UDPLB_SELECT_MAGLEV,      /* Maglev lookup table (Eisenbud et al., NSDI 2016) */
} udplb_select;
#define UDPLB_SELECT_COUNT 3

/* 65537 is prime and, at UDPLB_BACKENDS_MAX backends, still gives each one
 * some 64 entries; the paper sizes M well above the backend count so every
 * backend's share stays within a few percent of the mean (section 3.4). */
#define UDPLB_MAGLEV_SIZE_DEFAULT 65537

/* One backend as the shell describes it. */
typedef struct udplb_backend {
	udplb_addr addr; /* identity: two backends never share an address */
	uint32_t weight; /* 1..UDPLB_WEIGHT_MAX */
	bool healthy;    /* steers new selections only */
} udplb_backend;

/* A cluster's backends. The shell owns it, keeps it current (set, health),
 * and lends it to the core with each client datagram; the core reads it
 * during that call and keeps no pointer into it (seed 001 section 9). Not
 * thread-safe: one thread changes and reads it, or the shell copies it per
 * worker. */
typedef struct udplb_backends udplb_backends;

/* Creates an empty view whose Maglev table has maglev_size entries (0 means
 * UDPLB_MAGLEV_SIZE_DEFAULT). Errors: UDPLB_E_MAGLEV (not a prime from 3 to
 * UDPLB_MAGLEV_SIZE_MAX), UDPLB_E_NOMEM. *out is set only on success. */
__attribute__((warn_unused_result)) int udplb_backends_new(udplb_backends **out,
                                                           uint32_t maglev_size);

/* Frees the view (NULL is fine). */
void udplb_backends_del(udplb_backends *b);

/* Replaces the backends with list[0..n) (copied), health included. The
 * Maglev table is rebuilt only when the set of (address, weight) pairs
 * differs from the one it was built from: a reordered list or health flags
 * do not rebuild it, and nothing per datagram ever does (seed 001 section 9:
 * a per-packet rebuild was a DoS amplifier). Errors, with the view left
 * unchanged: UDPLB_E_BACKENDS (n over UDPLB_BACKENDS_MAX), UDPLB_E_BACKEND
 * (not IP:port, port 0), UDPLB_E_WEIGHT, UDPLB_E_DUPLICATE, UDPLB_E_MAGLEV
 * (more backends than table entries), UDPLB_E_NOMEM. */
__attribute__((warn_unused_result)) int udplb_backends_set(udplb_backends *b,
                                                           const udplb_backend *list, size_t n);

/* Sets backend i's health; the table is not touched. Errors: UDPLB_E_RANGE. */
__attribute__((warn_unused_result)) int udplb_backends_set_health(udplb_backends *b, size_t i,
                                                                  bool healthy);

size_t udplb_backends_count(const udplb_backends *b);
size_t udplb_backends_healthy_count(const udplb_backends *b);

/* Backend i (i < count), valid until the next udplb_backends_set. */
const udplb_backend *udplb_backends_at(const udplb_backends *b, size_t i);

/* The index of the backend with this address, or -1. */
__attribute__((warn_unused_result)) int udplb_backends_find(const udplb_backends *b,
                                                            const udplb_addr *addr);

/* Picks a backend for a new flow; returns its index, or -1 for an empty
 * view. key is the affinity hash (HRW, Maglev); turn is the round-robin
 * counter (ROUND_ROBIN). Health-aware and fail-open: only healthy backends
 * are candidates unless none is healthy, then all are (seed 001 section 9).
 * Reads the view only; O(backends) for ROUND_ROBIN and HRW, one table
 * lookup plus a forward probe past unhealthy entries for MAGLEV. */
__attribute__((warn_unused_result)) int udplb_backends_select(const udplb_backends *b,
                                                              udplb_select mode, uint64_t key,
                                                              uint64_t turn);

/* Reads one backend as a config writes it: "1.2.3.4:53" or "[::1]:53",
 * optionally followed by spaces and "weight=N"; the weight defaults to 1
 * and the backend starts healthy. Only IP literals: the core resolves no
 * names. Returns 0, UDPLB_E_BACKEND (not IP:port, port 0, trailing text)
 * or UDPLB_E_WEIGHT (not 1..UDPLB_WEIGHT_MAX). */
__attribute__((warn_unused_result)) int udplb_backend_parse(const char *text, udplb_backend *out);

/* Introspection for tests and the simulator. */
uint32_t udplb_backends_maglev_size(const udplb_backends *b);
/* The backend index table entry slot points at, or -1 for an empty view. */
int udplb_backends_maglev_entry(const udplb_backends *b, uint32_t slot);
/* How many times the Maglev table was built. */
uint64_t udplb_backends_maglev_builds(const udplb_backends *b);

#endif
