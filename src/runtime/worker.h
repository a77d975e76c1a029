/* worker.h - worker threads, each running its own libuv loop, and the way to run code on one. */
#ifndef ETM_RUNTIME_WORKER_H
#define ETM_RUNTIME_WORKER_H

#include <stddef.h>
#include <uv.h>

#include "base/list.h"
#include "runtime/pool.h"

/* More threads than this is a mistake on any machine this runs on. */
#define WORKERS_MAX 256

typedef struct worker worker;
typedef struct workers workers;

/* Runs on the worker's thread. */
typedef void (*worker_fn)(worker *w, void *arg);

/* Starts n worker threads (n = 0: one per core the process may run on, as
 * its CPU affinity says; capped at WORKERS_MAX). Each runs a loop that
 * stays alive until workers_stop. Returns NULL on failure with the reason
 * in err. */
workers *workers_start(size_t n, char *err, size_t err_size);

/* Runs fn(w, arg) on every worker, one after another in index order, waits
 * until each has returned, and stops the threads. Frees the set. */
void workers_stop(workers *ws, worker_fn fn, void *arg);

size_t workers_count(const workers *ws);
worker *workers_at(workers *ws, size_t i);

/* Queues fn(w, arg) to run on w's thread, after everything queued before.
 * Callable from any thread. Returns 0, or -1 when w is stopping (fn will not
 * run). */
__attribute__((warn_unused_result)) int worker_post(worker *w, worker_fn fn, void *arg);

/* Runs fn(w, arg) on w's thread and waits for it. Not from w's own thread. */
void worker_run(worker *w, worker_fn fn, void *arg);

/* Worker thread only. A worker's loop has the worker as its data. */
uv_loop_t *worker_loop(worker *w);
pool *worker_pool(worker *w);
size_t worker_index(const worker *w);
/* How many workers w's set has (workers_count of it); any thread. */
size_t worker_set_size(const worker *w);

/* The connections open on a worker, kept by conn.c so a stop can end them. */
typedef struct worker_conns {
	list conns; /* conn.c's connections */
	size_t n;
	uint64_t opened; /* connections ever put on conns: plain, read on this thread */
	list lingering; /* linger.c's closing sockets */
	size_t n_lingering;
} worker_conns;

/* Worker thread only. */
worker_conns *worker_conn_list(worker *w);

/* A pointer the layers above keep per worker (the supervisor's slot with the
 * current plane). Worker thread only, except before the first post. */
void *worker_slot(const worker *w);
void worker_set_slot(worker *w, void *slot);

/* The process's admission guard (guard.h), shared by every worker; NULL
 * when none is set. Set before the worker serves a connection. */
struct guard;
struct guard *worker_guard(const worker *w);
void worker_set_guard(worker *w, struct guard *g);

#endif
