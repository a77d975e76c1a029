/* pool.c - per-backend FIFOs of idle upstream sockets, with tombstones for sockets taken out of the middle. */
#include "udplb/pool.h"
#include "udplb/fdtab.h"

#include <stdlib.h>
#include <string.h>

typedef struct held {
	int fd; /* -1: taken out by udplb_pool_forget, skipped when reached */
	bool gro;
	uint64_t since;
} held;

typedef struct fifo {
	uint32_t head, n; /* n counts tombstones too */
} fifo;

struct udplb_pool {
	size_t n_backends;
	uint32_t cap; /* per backend */
	size_t live;  /* sockets held, tombstones not counted */
	fifo *q;
	held *items; /* n_backends * cap, backend bi's ring at bi * cap */
	/* by descriptor: 1 + the index in items of the socket held, 0 when
	 * none, so taking one out of the middle costs no search */
	uint32_t *where;
	size_t n_where;
};

udplb_pool *udplb_pool_new(size_t n_backends, uint32_t per_backend)
{
	if (per_backend == 0)
		per_backend = 1;
	udplb_pool *p = calloc(1, sizeof *p);
	if (!p)
		return NULL;
	p->n_backends = n_backends;
	p->cap = per_backend;
	p->q = calloc(n_backends ? n_backends : 1, sizeof *p->q);
	p->items = calloc((n_backends ? n_backends : 1) * (size_t)per_backend, sizeof *p->items);
	if (!p->q || !p->items) {
		udplb_pool_free(p);
		return NULL;
	}
	return p;
}

void udplb_pool_free(udplb_pool *p)
{
	if (!p)
		return;
	free(p->q);
	free(p->items);
	free(p->where);
	free(p);
}

static size_t index_of(const udplb_pool *p, size_t bi, uint32_t k)
{
	return bi * p->cap + (p->q[bi].head + k) % p->cap;
}

static held *at(udplb_pool *p, size_t bi, uint32_t k) { return &p->items[index_of(p, bi, k)]; }

/* Makes room in `where` for descriptor fd; false without memory. */
static bool where_room(udplb_pool *p, int fd)
{
	uint32_t *w = udplb_fdtab_fit(p->where, &p->n_where, sizeof *w, fd);
	if (!w)
		return false;
	p->where = w;
	return true;
}

/* Drops the tombstones at the head of backend bi's ring. */
static void skip_dead(udplb_pool *p, size_t bi)
{
	fifo *f = &p->q[bi];
	while (f->n && at(p, bi, 0)->fd < 0) {
		f->head = (f->head + 1) % p->cap;
		f->n--;
	}
}

bool udplb_pool_put(udplb_pool *p, size_t bi, int fd, bool gro, uint64_t now)
{
	if (bi >= p->n_backends || fd < 0)
		return false;
	skip_dead(p, bi);
	fifo *f = &p->q[bi];
	if (f->n == p->cap || !where_room(p, fd))
		return false;
	size_t i = index_of(p, bi, f->n);
	p->items[i] = (held){.fd = fd, .gro = gro, .since = now};
	p->where[fd] = (uint32_t)i + 1;
	f->n++;
	p->live++;
	return true;
}

/* Takes out the head of backend bi's ring, a live socket (skip_dead ran). */
static int pop_head(udplb_pool *p, size_t bi, bool *gro)
{
	fifo *f = &p->q[bi];
	held *h = at(p, bi, 0);
	if (gro)
		*gro = h->gro;
	f->head = (f->head + 1) % p->cap;
	f->n--;
	p->live--;
	p->where[h->fd] = 0;
	return h->fd;
}

/* Whether backend bi's oldest socket has been held at least ms by now. */
static bool head_held(udplb_pool *p, size_t bi, uint64_t now, uint64_t ms)
{
	skip_dead(p, bi);
	if (!p->q[bi].n)
		return false;
	uint64_t since = at(p, bi, 0)->since;
	return now >= since && now - since >= ms;
}

int udplb_pool_take(udplb_pool *p, size_t bi, uint64_t now, bool *gro)
{
	if (bi >= p->n_backends || !head_held(p, bi, now, UDPLB_POOL_QUIET_MS))
		return -1; /* the oldest is not quiet long enough, so none is */
	return pop_head(p, bi, gro);
}

bool udplb_pool_forget(udplb_pool *p, int fd)
{
	if (fd < 0 || (size_t)fd >= p->n_where || !p->where[fd])
		return false;
	size_t i = p->where[fd] - 1;
	p->where[fd] = 0;
	p->items[i].fd = -1; /* a tombstone, dropped when it reaches the head */
	p->live--;
	skip_dead(p, i / p->cap);
	return true;
}

int udplb_pool_take_expired(udplb_pool *p, uint64_t now)
{
	for (size_t bi = 0; bi < p->n_backends; bi++)
		if (head_held(p, bi, now, UDPLB_POOL_MAX_AGE_MS))
			return pop_head(p, bi, NULL);
	return -1;
}

int udplb_pool_pop_any(udplb_pool *p)
{
	for (size_t bi = 0; bi < p->n_backends; bi++) {
		skip_dead(p, bi);
		if (p->q[bi].n)
			return pop_head(p, bi, NULL);
	}
	return -1;
}

size_t udplb_pool_size(const udplb_pool *p) { return p->live; }
