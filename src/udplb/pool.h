/* pool.h - upstream sockets of finished flows kept per backend for later flows (reuse_upstream_sockets): the bookkeeping only, no system calls. */
#ifndef ETM_UDPLB_POOL_H
#define ETM_UDPLB_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* How long a socket must stay silent after its flow ended before a later
 * flow gets it: a backend's late or repeated answer lands in that time on
 * a socket no flow owns, and the shell then closes the socket instead. */
#define UDPLB_POOL_QUIET_MS 50
/* How long a socket may wait at most: one that waited this long is more
 * than the current rate of new flows needs (left from a burst), and is
 * closed rather than kept. */
#define UDPLB_POOL_MAX_AGE_MS 2000

/* Sockets per backend of one kind (its FIFO): the oldest is handed on
 * first, so each has had the longest quiet time. */
typedef struct udplb_pool udplb_pool;

/* A pool for n_backends backends holding at most per_backend sockets
 * each (at least 1); NULL without memory. */
udplb_pool *udplb_pool_new(size_t n_backends, uint32_t per_backend);

/* Frees the bookkeeping; the sockets are the caller's to close first
 * (udplb_pool_pop_any). */
void udplb_pool_free(udplb_pool *p);

/* Holds fd, connected to backend bi, whose flow ended at now. false when
 * backend bi's FIFO is full (or bi is out of range): close fd instead. */
bool udplb_pool_put(udplb_pool *p, size_t bi, int fd, bool gro, uint64_t now);

/* The oldest socket of backend bi that has been held since at most
 * now - UDPLB_POOL_QUIET_MS, taken out of the pool, with its gro flag; -1
 * when there is none (or bi is out of range). */
int udplb_pool_take(udplb_pool *p, size_t bi, uint64_t now, bool *gro);

/* Takes fd out wherever it is held (a datagram came for it), without a
 * search; false when the pool does not hold it. */
bool udplb_pool_forget(udplb_pool *p, int fd);

/* Takes out a socket held since before now - UDPLB_POOL_MAX_AGE_MS (the
 * oldest of some backend), or -1 when none has waited that long. */
int udplb_pool_take_expired(udplb_pool *p, uint64_t now);

/* Takes out any socket, or -1 when the pool is empty: for closing them
 * all (the listener ends, or the process ran out of descriptors). */
int udplb_pool_pop_any(udplb_pool *p);

/* Sockets held now. */
size_t udplb_pool_size(const udplb_pool *p);

#endif
