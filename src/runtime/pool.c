/* pool.c - free list of fixed-size buffers. */
#include "runtime/pool.h"

#include <stdlib.h>

uint8_t *pool_get(pool *p)
{
	uint8_t *b = p->free;
	if (b) {
		p->free = *(void **)b;
		p->n_free--;
	} else {
		b = malloc(POOL_BUF_SIZE);
		if (!b)
			return NULL;
	}
	p->n_out++;
	return b;
}

void pool_put(pool *p, uint8_t *buf)
{
	if (!buf)
		return;
	p->n_out--;
	if (p->n_free >= POOL_KEEP_MAX) {
		free(buf);
		return;
	}
	*(void **)buf = p->free;
	p->free = buf;
	p->n_free++;
}

void pool_drain(pool *p)
{
	while (p->free) {
		void *next = *(void **)p->free;
		free(p->free);
		p->free = next;
	}
	p->n_free = 0;
}
