/* linger.c - lingering close: our side shut down, the client's last bytes read and dropped, then the close. */
#include "runtime/linger.h"

#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct lingering {
	uv_tcp_t tcp;
	uv_timer_t timer;
	uv_shutdown_t shut;
	worker *w;
	list_node node; /* in the worker's list */
	size_t dropped;
	int handles; /* open handles still to close before the free */
	bool ending;
} lingering;

static void on_closed(uv_handle_t *h)
{
	lingering *g = h->data;
	if (--g->handles > 0)
		return;
	worker_conns *all = worker_conn_list(g->w);
	list_remove(&all->lingering, &g->node);
	all->n_lingering--;
	free(g);
}

static void end(lingering *g)
{
	if (g->ending)
		return;
	g->ending = true;
	uv_close((uv_handle_t *)&g->tcp, on_closed);
	uv_close((uv_handle_t *)&g->timer, on_closed);
}

static void on_timer(uv_timer_t *t) { end(t->data); }

static void alloc_buf(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	(void)suggested;
	lingering *g = h->data;
	uint8_t *b = pool_get(worker_pool(g->w));
	buf->base = (char *)b;
	buf->len = b ? POOL_BUF_SIZE : 0;
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	lingering *g = s->data;
	if (buf->base)
		pool_put(worker_pool(g->w), (uint8_t *)buf->base);
	if (n == 0)
		return;
	if (n < 0 || (g->dropped += (size_t)n) >= LINGER_BYTES)
		end(g);
}

static void on_shut(uv_shutdown_t *req, int status)
{
	(void)req;
	(void)status; /* a failed shutdown: the reads see the error too */
}

void linger_start(worker *w, uv_tcp_t *client)
{
	worker_conns *all = worker_conn_list(w);
	uv_os_fd_t fd;
	if (all->n_lingering >= LINGER_MAX || uv_fileno((uv_handle_t *)client, &fd))
		return;
	lingering *g = calloc(1, sizeof *g);
	int copy = g ? dup(fd) : -1;
	if (copy < 0) {
		free(g);
		return;
	}
	g->w = w;
	uv_loop_t *loop = worker_loop(w);
	uv_tcp_init(loop, &g->tcp);
	uv_timer_init(loop, &g->timer);
	g->tcp.data = g->timer.data = g->shut.data = g;
	g->handles = 2;
	list_push_front(&all->lingering, &g->node);
	all->n_lingering++;
	if (uv_tcp_open(&g->tcp, copy)) {
		close(copy);
		end(g);
		return;
	}
	uv_timer_start(&g->timer, on_timer, LINGER_MS, 0);
	if (uv_shutdown(&g->shut, (uv_stream_t *)&g->tcp, on_shut) ||
	    uv_read_start((uv_stream_t *)&g->tcp, alloc_buf, on_read))
		end(g);
}

void linger_close_all(worker *w)
{
	for (list_node *n = worker_conn_list(w)->lingering.head; n; n = n->next)
		end(LIST_ENTRY(n, lingering, node));
}
