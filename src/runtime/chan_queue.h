/* chan_queue.h - the writes an endpoint queued on a channel, in order, and the reports owed for them: what a carrier keeps for each channel. */
#ifndef ETM_RUNTIME_CHAN_QUEUE_H
#define ETM_RUNTIME_CHAN_QUEUE_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/endpoint.h"

/* Writes one channel may have queued: an endpoint's slots and a few
 * replies of its own (endpoint.h). */
#define CHAN_QUEUE_MAX 16

typedef struct chan_write {
	const uint8_t *d; /* the endpoint's bytes, in place until reported */
	size_t n, off;    /* off: taken by the carrier so far */
	void *req;
} chan_write;

typedef struct chan_queue {
	chan_write q[CHAN_QUEUE_MAX];
	unsigned head, n;
	struct {
		void *req;
		int status;
	} done[CHAN_QUEUE_MAX]; /* [0, n_done): owed to the endpoint */
	unsigned n_done;
	unsigned forgotten; /* counts chan_queue_forget: a report stops at one */
} chan_queue;

/* Queues a write (chan_ops.write). 0, or -1 when the queue is full. */
static inline int chan_queue_push(chan_queue *w, const uint8_t *d, size_t n, void *req)
{
	if (w->n == CHAN_QUEUE_MAX)
		return -1;
	w->q[(w->head + w->n++) % CHAN_QUEUE_MAX] = (chan_write){.d = d, .n = n, .req = req};
	return 0;
}

/* The oldest write not yet all taken; NULL when none. */
static inline chan_write *chan_queue_head(chan_queue *w) { return w->n ? &w->q[w->head] : NULL; }

/* The head write is done with (status < 0: not sent); reported later. */
static inline void chan_queue_pop(chan_queue *w, int status)
{
	w->done[w->n_done].req = w->q[w->head].req;
	w->done[w->n_done++].status = status;
	w->head = (w->head + 1) % CHAN_QUEUE_MAX;
	w->n--;
}

/* Every write still queued is done with, unsent (the carrier died). */
static inline void chan_queue_cancel_all(chan_queue *w, int status)
{
	while (w->n)
		chan_queue_pop(w, status);
}

/* The endpoint closed: its buffers and the reports owed are forgotten. */
static inline void chan_queue_forget(chan_queue *w)
{
	w->n = w->n_done = 0;
	w->forgotten++;
}

/* Bytes queued and not yet taken (chan_ops.queued). */
static inline size_t chan_queue_bytes(const chan_queue *w)
{
	size_t b = 0;
	for (unsigned i = 0; i < w->n; i++) {
		const chan_write *r = &w->q[(w->head + i) % CHAN_QUEUE_MAX];
		b += r->n - r->off;
	}
	return b;
}

/* Reports the writes done with to ep, which may close inside one: a
 * carrier calls this from its own loop callbacks only (chan.h). */
static inline void chan_queue_tell(chan_queue *w, endpoint *ep)
{
	unsigned n = w->n_done, gen = w->forgotten;
	w->n_done = 0;
	for (unsigned i = 0; i < n && w->forgotten == gen; i++)
		endpoint_chan_written(ep, w->done[i].req, w->done[i].status);
}

#endif
