/* worker.c - threads with their own loops, fed by a mutex-guarded queue and a uv_async. */
#include "runtime/worker.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct job {
	struct job *next;
	worker_fn fn;
	void *arg;
} job;

struct worker {
	uv_loop_t loop;
	uv_async_t wake;
	pthread_t thread;
	size_t index;
	size_t n_set; /* workers in its set */
	pool pool;
	void *slot;
	struct guard *guard; /* borrowed, shared by every worker */
	worker_conns conns;

	pthread_mutex_t lock; /* guards the queue and stopping */
	job *head, *tail;
	bool stopping;
};

struct workers {
	size_t n;
	worker *w; /* n of them */
};

static void run_jobs(uv_async_t *a)
{
	worker *w = a->data;
	pthread_mutex_lock(&w->lock);
	job *j = w->head;
	w->head = w->tail = NULL;
	bool stop = w->stopping;
	pthread_mutex_unlock(&w->lock);
	while (j) {
		job *next = j->next;
		j->fn(w, j->arg);
		free(j);
		j = next;
	}
	if (stop)
		uv_close((uv_handle_t *)&w->wake, NULL);
}

static void *thread_main(void *arg)
{
	worker *w = arg;
	uv_run(&w->loop, UV_RUN_DEFAULT);
	return NULL;
}

int worker_post(worker *w, worker_fn fn, void *arg)
{
	job *j = malloc(sizeof *j);
	if (!j)
		return -1;
	*j = (job){.fn = fn, .arg = arg};
	pthread_mutex_lock(&w->lock);
	if (w->stopping) {
		pthread_mutex_unlock(&w->lock);
		free(j);
		return -1;
	}
	if (w->tail)
		w->tail->next = j;
	else
		w->head = j;
	w->tail = j;
	pthread_mutex_unlock(&w->lock);
	uv_async_send(&w->wake);
	return 0;
}

typedef struct sync_call {
	worker_fn fn;
	void *arg;
	pthread_mutex_t lock;
	pthread_cond_t done_cv;
	bool done;
} sync_call;

static void run_sync(worker *w, void *arg)
{
	sync_call *c = arg;
	c->fn(w, c->arg);
	pthread_mutex_lock(&c->lock);
	c->done = true;
	pthread_cond_signal(&c->done_cv);
	pthread_mutex_unlock(&c->lock);
}

void worker_run(worker *w, worker_fn fn, void *arg)
{
	sync_call c = {.fn = fn, .arg = arg};
	pthread_mutex_init(&c.lock, NULL);
	pthread_cond_init(&c.done_cv, NULL);
	if (worker_post(w, run_sync, &c) == 0) {
		pthread_mutex_lock(&c.lock);
		while (!c.done)
			pthread_cond_wait(&c.done_cv, &c.lock);
		pthread_mutex_unlock(&c.lock);
	}
	pthread_cond_destroy(&c.done_cv);
	pthread_mutex_destroy(&c.lock);
}

workers *workers_start(size_t n, char *err, size_t err_size)
{
	if (n == 0) /* one per core this process may run on (its CPU affinity) */
		n = uv_available_parallelism();
	if (n > WORKERS_MAX)
		n = WORKERS_MAX;
	workers *ws = calloc(1, sizeof *ws);
	if (ws)
		ws->w = calloc(n, sizeof *ws->w);
	if (!ws || !ws->w) {
		free(ws);
		snprintf(err, err_size, "out of memory starting %zu workers", n);
		return NULL;
	}
	for (size_t i = 0; i < n; i++) {
		worker *w = &ws->w[i];
		w->index = i;
		w->n_set = n;
		pthread_mutex_init(&w->lock, NULL);
		int rc = uv_loop_init(&w->loop);
		w->loop.data = w; /* a handle finds its worker through its loop */
		if (rc == 0)
			rc = uv_async_init(&w->loop, &w->wake, run_jobs);
		w->wake.data = w;
		if (rc == 0)
			rc = -pthread_create(&w->thread, NULL, thread_main, w);
		if (rc) {
			snprintf(err, err_size, "cannot start worker %zu: %s", i, uv_strerror(rc));
			ws->n = i; /* stop the ones that run */
			workers_stop(ws, NULL, NULL);
			return NULL;
		}
		ws->n = i + 1;
	}
	return ws;
}

static void close_any(uv_handle_t *h, void *arg)
{
	(void)arg;
	if (!uv_is_closing(h))
		uv_close(h, NULL);
}

void workers_stop(workers *ws, worker_fn fn, void *arg)
{
	for (size_t i = 0; i < ws->n; i++) {
		worker *w = &ws->w[i];
		if (fn)
			worker_run(w, fn, arg);
		pthread_mutex_lock(&w->lock);
		w->stopping = true;
		pthread_mutex_unlock(&w->lock);
		uv_async_send(&w->wake);
	}
	for (size_t i = 0; i < ws->n; i++) {
		worker *w = &ws->w[i];
		pthread_join(w->thread, NULL);
		/* Whatever a layer above left open is closed here, on this
		 * thread, now that the worker's thread has ended. */
		uv_walk(&w->loop, close_any, NULL);
		uv_run(&w->loop, UV_RUN_DEFAULT);
		(void)uv_loop_close(&w->loop);
		pool_drain(&w->pool);
		pthread_mutex_destroy(&w->lock);
	}
	free(ws->w);
	free(ws);
}

size_t workers_count(const workers *ws) { return ws->n; }
worker *workers_at(workers *ws, size_t i) { return &ws->w[i]; }
uv_loop_t *worker_loop(worker *w) { return &w->loop; }
pool *worker_pool(worker *w) { return &w->pool; }
size_t worker_index(const worker *w) { return w->index; }
size_t worker_set_size(const worker *w) { return w->n_set; }
void *worker_slot(const worker *w) { return w->slot; }
void worker_set_slot(worker *w, void *slot) { w->slot = slot; }
worker_conns *worker_conn_list(worker *w) { return &w->conns; }

struct guard *worker_guard(const worker *w) { return w->guard; }
void worker_set_guard(worker *w, struct guard *g) { w->guard = g; }
