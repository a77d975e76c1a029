/* pool.h - a worker's pool of fixed-size I/O buffers, so the relay allocates nothing per read. */
#ifndef ETM_RUNTIME_POOL_H
#define ETM_RUNTIME_POOL_H

#include <stddef.h>
#include <stdint.h>

/* One read's worth: the 16 KiB the seeds use for client buffers (seed 000
 * "Limits"), a multiple of the common TLS record size. */
#define POOL_BUF_SIZE (16 * 1024)

/* Free buffers a pool keeps; beyond this a returned buffer is freed, so a
 * burst does not pin its peak memory forever. 256 x 16 KiB = 4 MiB a worker. */
#define POOL_KEEP_MAX 256

/* Worker thread only: no locking. A zeroed pool is a valid empty pool. */
typedef struct pool {
	void *free;    /* singly linked through each buffer's first bytes */
	size_t n_free;
	size_t n_out;  /* handed out and not yet returned */
} pool;

/* A POOL_BUF_SIZE buffer, or NULL when memory is exhausted. */
uint8_t *pool_get(pool *p);

/* Returns a buffer from pool_get of the same pool. NULL is ignored. */
void pool_put(pool *p, uint8_t *buf);

/* Frees the kept buffers; buffers still out must not be returned after. */
void pool_drain(pool *p);

#endif
