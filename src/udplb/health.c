/* health.c - the UDP load balancer's health checks: a TCP connect to each backend's companion port and an optional UDP probe, with rise/fall. */
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "udplb/shell_int.h"

static const char *const msgs[] = {
	"udp_lb cluster %s: backend %s is now %s",
};

typedef struct probe {
	udplb_health *h;
	size_t i;
	struct sockaddr_storage tcp_to, udp_to;
	uv_timer_t tick;     /* every interval */
	uv_timer_t deadline; /* the probe in flight's timeout */
	uv_tcp_t tcp;
	uv_connect_t creq;
	uv_udp_t udp;
	uv_udp_send_t sreq;
	int parts;   /* handles of the probe in flight not closed yet */
	bool tcp_ok, udp_ok, timed_out;
	uint32_t oks, fails; /* consecutive results */
	bool up;
	char addr[UDPLB_ADDR_TEXT_MAX];
} probe;

struct udplb_health {
	udplb_state *st; /* whose flags it writes: not touched once stopping */
	uv_loop_t *loop;
	bool tcp, udp;
	uint64_t interval_ms, timeout_ms;
	uint32_t rise, fall;
	uv_buf_t payload;
	uint8_t *payload_bytes; /* owned: the UDP probe's bytes */
	size_t n;
	size_t open_handles; /* every handle still open: freed when the last closes after a stop */
	bool stopping;
	probe probes[];
};

static void publish(probe *p)
{
	udplb_state *st = p->h->st;
	atomic_store(&st->up[p->i], p->up ? 1 : 0);
	atomic_fetch_add_explicit(&st->health_gen, 1, memory_order_release);
	log_info("udplb", msgs[0], st->cluster_tag, p->addr, p->up ? "up" : "down");
}

/* Rise/fall hysteresis (seed 001 section 10): a backend flips after rise
 * good or fall bad probes in a row. */
static void judge(probe *p, bool ok)
{
	udplb_health *h = p->h;
	if (ok) {
		p->fails = 0;
		if (p->oks < h->rise)
			p->oks++;
		if (!p->up && p->oks >= h->rise) {
			p->up = true;
			publish(p);
		}
	} else {
		p->oks = 0;
		if (p->fails < h->fall)
			p->fails++;
		if (p->up && p->fails >= h->fall) {
			p->up = false;
			publish(p);
		}
	}
}

static void health_free(udplb_health *h)
{
	free(h->payload_bytes);
	free(h);
}

static void part_closed(uv_handle_t *hd)
{
	probe *p = hd->data;
	udplb_health *h = p->h;
	p->parts--;
	if (--h->open_handles == 0 && h->stopping) {
		health_free(h);
		return;
	}
	if (p->parts > 0 || h->stopping)
		return;
	uv_timer_stop(&p->deadline);
	bool ok = (!p->h->tcp || p->tcp_ok) && (!p->h->udp || p->udp_ok);
	judge(p, ok && !p->timed_out);
}

static void close_part(uv_handle_t *hd)
{
	if (!uv_is_closing(hd))
		uv_close(hd, part_closed);
}

static void on_connect(uv_connect_t *req, int status)
{
	probe *p = req->data;
	p->tcp_ok = status == 0;
	close_part((uv_handle_t *)&p->tcp);
}

static void on_alloc(uv_handle_t *hd, size_t size, uv_buf_t *buf)
{
	(void)size;
	static char scratch[2048]; /* the reply is not read, only noticed */
	(void)hd;
	*buf = uv_buf_init(scratch, sizeof scratch);
}

static void on_udp_recv(uv_udp_t *u, ssize_t nread, const uv_buf_t *buf,
                        const struct sockaddr *from, unsigned flags)
{
	(void)buf;
	(void)flags;
	probe *p = u->data;
	if (nread == 0 && !from)
		return; /* nothing more to read now */
	p->udp_ok = nread >= 0; /* any reply, even empty; an error (refused) is a failure */
	close_part((uv_handle_t *)u);
}

static void on_udp_sent(uv_udp_send_t *req, int status)
{
	probe *p = req->data;
	if (status < 0)
		close_part((uv_handle_t *)&p->udp);
}

static void on_deadline(uv_timer_t *t)
{
	probe *p = t->data;
	p->timed_out = true;
	if (p->h->tcp)
		close_part((uv_handle_t *)&p->tcp);
	if (p->h->udp)
		close_part((uv_handle_t *)&p->udp);
}

static void start_tcp(probe *p)
{
	uv_tcp_init(p->h->loop, &p->tcp);
	p->tcp.data = p;
	p->creq.data = p;
	p->parts++;
	p->h->open_handles++;
	if (uv_tcp_connect(&p->creq, &p->tcp, (struct sockaddr *)&p->tcp_to, on_connect))
		close_part((uv_handle_t *)&p->tcp);
}

static void start_udp(probe *p)
{
	uv_udp_init(p->h->loop, &p->udp);
	p->udp.data = p;
	p->sreq.data = p;
	p->parts++;
	p->h->open_handles++;
	if (uv_udp_connect(&p->udp, (struct sockaddr *)&p->udp_to) ||
	    uv_udp_recv_start(&p->udp, on_alloc, on_udp_recv) ||
	    uv_udp_send(&p->sreq, &p->udp, &p->h->payload, 1, NULL, on_udp_sent))
		close_part((uv_handle_t *)&p->udp);
}

static void on_tick(uv_timer_t *t)
{
	probe *p = t->data;
	if (p->parts > 0 || p->h->stopping)
		return; /* the last probe is still out: it has its own deadline */
	p->tcp_ok = p->udp_ok = p->timed_out = false;
	uv_timer_start(&p->deadline, on_deadline, p->h->timeout_ms, 0);
	if (p->h->tcp)
		start_tcp(p);
	if (p->h->udp)
		start_udp(p);
}

/* The checks of st, every backend up, nothing started yet; NULL when st
 * has no [cluster.health] or memory ran out. */
static udplb_health *health_new(udplb_state *st, uv_loop_t *loop)
{
	const udplb_health_config *hc = &st->health;
	if (!hc->enabled || st->conf.n_backends == 0)
		return NULL;
	size_t n = st->conf.n_backends;
	udplb_health *h = calloc(1, sizeof *h + n * sizeof(probe));
	if (!h)
		return NULL;
	h->st = st;
	h->loop = loop;
	h->tcp = hc->tcp;
	h->udp = hc->udp;
	h->interval_ms = hc->interval_ms;
	h->timeout_ms = hc->timeout_ms;
	h->rise = hc->rise;
	h->fall = hc->fall;
	if (hc->udp) {
		/* a copy of its own: h outlives a stop, which may outlive the state */
		h->payload_bytes = malloc(hc->payload_len ? hc->payload_len : 1);
		if (!h->payload_bytes) {
			free(h);
			return NULL;
		}
		if (hc->payload_len)
			memcpy(h->payload_bytes, hc->payload, hc->payload_len);
		h->payload = uv_buf_init((char *)h->payload_bytes, (unsigned)hc->payload_len);
	}
	h->n = n;
	for (size_t i = 0; i < n; i++) {
		probe *p = &h->probes[i];
		const udplb_addr *a = &st->conf.backends[i].addr;
		p->h = h;
		p->i = i;
		p->up = true; /* backends start up: a fresh start serves at once */
		udplb_addr_format(a, p->addr, sizeof p->addr);
		udplb_addr tcp = *a;
		if (hc->tcp_port)
			tcp.port = hc->tcp_port;
		(void)udplb_addr_to_sockaddr(&tcp, &p->tcp_to);
		(void)udplb_addr_to_sockaddr(a, &p->udp_to);
	}
	return h;
}

/* Starts every probe's timer: the first probe at once. */
static void health_run(udplb_health *h)
{
	for (size_t i = 0; i < h->n; i++) {
		probe *p = &h->probes[i];
		uv_timer_init(h->loop, &p->tick);
		uv_timer_init(h->loop, &p->deadline);
		p->tick.data = p->deadline.data = p;
		h->open_handles += 2;
		uv_timer_start(&p->tick, on_tick, 0, h->interval_ms);
	}
}

udplb_health *udplb_health_start(udplb_group *g, uv_loop_t *loop)
{
	udplb_health *h = health_new(g->st, loop);
	if (h)
		health_run(h);
	return h;
}

static uint32_t at_most(uint32_t v, uint32_t cap) { return v < cap ? v : cap; }

udplb_health *udplb_health_switch(udplb_health *h, udplb_group *g, uv_loop_t *loop)
{
	udplb_state *cur = g->st, *nx = g->next;
	if (!nx)
		return h;
	/* The flags as the running checks leave them: they write them on
	 * this loop, so nothing moves between this copy and their stop.
	 * Without checks from here on every backend counts as up. */
	for (size_t i = 0; i < nx->n_from; i++)
		if (nx->from[i] >= 0)
			atomic_store(&nx->up[nx->from[i]],
			             nx->health.enabled ? atomic_load(&cur->up[i]) : 1);
	atomic_fetch_add_explicit(&nx->health_gen, 1, memory_order_release);
	udplb_health *nh = health_new(nx, loop);
	for (size_t i = 0; nh && h && i < h->n && i < nx->n_from; i++) {
		if (nx->from[i] < 0)
			continue;
		const probe *was = &h->probes[i];
		probe *p = &nh->probes[nx->from[i]];
		p->up = was->up;
		p->oks = at_most(was->oks, nh->rise);
		p->fails = at_most(was->fails, nh->fall);
	}
	udplb_health_stop(h);
	if (nh)
		health_run(nh);
	return nh;
}

static void timer_closed(uv_handle_t *hd)
{
	probe *p = hd->data;
	udplb_health *h = p->h;
	if (--h->open_handles == 0)
		health_free(h); /* timers close only in a stop */
}

void udplb_health_stop(udplb_health *h)
{
	if (!h)
		return;
	h->stopping = true;
	for (size_t i = 0; i < h->n; i++) {
		probe *p = &h->probes[i];
		if (p->parts > 0) {
			/* a probe in flight: its handles close too; h goes with
			 * whichever close callback comes last */
			if (h->tcp)
				close_part((uv_handle_t *)&p->tcp);
			if (h->udp)
				close_part((uv_handle_t *)&p->udp);
		}
		uv_close((uv_handle_t *)&p->tick, timer_closed);
		uv_close((uv_handle_t *)&p->deadline, timer_closed);
	}
}
