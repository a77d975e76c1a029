/* api_probe.c - a delay test: uv_getaddrinfo, uv_tcp_connect and a timer, and the lifetimes of the three. */
#include "app/api_probe.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

struct api_probe {
	api_probe_cb cb; /* NULL once called or cancelled */
	void *arg;
	uv_loop_t *loop;
	uv_getaddrinfo_t gai;
	uv_tcp_t tcp;
	uv_connect_t conn;
	uv_timer_t timer;
	uint64_t start_ns;
	bool done, resolving, tcp_open;
	bool failed; /* the timer reports a failure that came inside the start */
	int handles; /* the timer, the socket once opened, the resolver until it answers */
};

/* The probe goes when its handles have closed and its resolver has
 * answered (a getaddrinfo request cannot be abandoned, only cancelled). */
static void release(api_probe *p)
{
	if (--p->handles == 0)
		free(p);
}

static void freed(uv_handle_t *h) { release(h->data); }

static void end(api_probe *p, int64_t result)
{
	if (p->done)
		return;
	p->done = true;
	api_probe_cb cb = p->cb;
	p->cb = NULL;
	uv_close((uv_handle_t *)&p->timer, freed);
	if (p->tcp_open)
		uv_close((uv_handle_t *)&p->tcp, freed);
	if (p->resolving)
		(void)uv_cancel((uv_req_t *)&p->gai);
	if (cb)
		cb(p->arg, result);
}

static void on_timer(uv_timer_t *t)
{
	api_probe *p = t->data;
	end(p, p->failed ? API_DELAY_FAILED : API_DELAY_TIMEOUT);
}

static void on_connected(uv_connect_t *req, int status)
{
	api_probe *p = req->data;
	if (status == UV_ECANCELED || p->done)
		return;
	int64_t ms = (int64_t)((uv_hrtime() - p->start_ns) / 1000000u);
	end(p, status < 0 ? API_DELAY_FAILED : ms > 0 ? ms : 1);
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
	api_probe *p = req->data;
	p->resolving = false;
	int rc = status;
	if (!p->done && rc == 0) {
		rc = uv_tcp_init(p->loop, &p->tcp);
		if (rc == 0) {
			p->tcp_open = true;
			p->handles++;
			p->tcp.data = p;
			p->conn.data = p;
			rc = uv_tcp_connect(&p->conn, &p->tcp, res->ai_addr, on_connected);
		}
	}
	uv_freeaddrinfo(res);
	if (rc)
		end(p, API_DELAY_FAILED);
	release(p); /* the resolver's share */
}

api_probe *api_probe_start(uv_loop_t *loop, const char *host, uint16_t port, uint32_t timeout_ms,
                           api_probe_cb cb, void *arg)
{
	api_probe *p = calloc(1, sizeof *p);
	if (!p)
		return NULL;
	*p = (api_probe){.cb = cb,
	                 .arg = arg,
	                 .loop = loop,
	                 .start_ns = uv_hrtime(),
	                 .resolving = true,
	                 .handles = 2};
	uv_timer_init(loop, &p->timer);
	p->timer.data = p->gai.data = p;
	char service[8];
	snprintf(service, sizeof service, "%u", port);
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_family = AF_UNSPEC};
	if (uv_getaddrinfo(loop, &p->gai, on_resolved, host, service, &hints)) {
		/* reported from the loop, not from inside this call */
		p->resolving = false;
		p->handles--;
		p->failed = true;
		timeout_ms = 0;
	}
	uv_timer_start(&p->timer, on_timer, timeout_ms, 0);
	return p;
}

void api_probe_cancel(api_probe *p)
{
	p->cb = NULL;
	end(p, API_DELAY_FAILED);
}
