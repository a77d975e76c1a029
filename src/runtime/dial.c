/* dial.c - TCP dialing through the resolver, one address after another, each attempt bounded. */
#include "runtime/dial.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "runtime/guard.h"

static const char *const msgs[] = {
	"failed to connect to any address (%s)",
	"connect to %s timed out",
	"no address of %s is in the allowed family (%s)",
	"one of our own listening addresses",
};

typedef struct dial {
	connect_pending base; /* first: the handle callers hold */
	worker *w;
	dns_resolver *dns;
	dns_query *q;
	addr_dest dest;
	dial_family af;
	bool refuse_own; /* our own listening addresses fail as refused */
	uint64_t origin; /* what the endpoint carries (endpoint_origin) */
	connect_cb cb;
	void *data;

	struct sockaddr_storage cand[DIAL_MAX_CANDIDATES];
	size_t n, next;

	uv_tcp_t *tcp; /* the attempt in flight, NULL between attempts */
	uv_connect_t req;
	uv_timer_t timer;
	int handles;   /* open handles (timer + attempts) still to close */
	bool finished; /* the callback ran, or the dial was cancelled */

	proto_dial_error kind;
	char err[DIAL_ERR_MAX];
	size_t err_len;
} dial;

static void sockaddr_text(const struct sockaddr_storage *ss, char *out, size_t size)
{
	addr_dest d = {0};
	if (addr_dest_from_sockaddr(&d, (const struct sockaddr *)ss))
		snprintf(out, size, "?");
	else
		addr_dest_format(&d, out, size);
}

static void collect(dial *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void collect(dial *d, const char *fmt, ...)
{
	if (d->err_len >= sizeof d->err - 1)
		return;
	if (d->err_len) {
		int n = snprintf(d->err + d->err_len, sizeof d->err - d->err_len, "; ");
		d->err_len += n > 0 ? (size_t)n : 0;
		if (d->err_len >= sizeof d->err)
			d->err_len = sizeof d->err - 1;
	}
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(d->err + d->err_len, sizeof d->err - d->err_len, fmt, ap);
	va_end(ap);
	d->err_len += n > 0 ? (size_t)n : 0;
	if (d->err_len >= sizeof d->err)
		d->err_len = sizeof d->err - 1;
}

static proto_dial_error kind_of(int uv_err)
{
	switch (uv_err) {
	case UV_ECONNREFUSED:
		return PROTO_DIAL_REFUSED;
	case UV_ENETUNREACH:
		return PROTO_DIAL_NET_UNREACHABLE;
	case UV_EHOSTUNREACH:
	case UV_EHOSTDOWN:
		return PROTO_DIAL_HOST_UNREACHABLE;
	case UV_ETIMEDOUT:
		return PROTO_DIAL_TIMED_OUT;
	default:
		return PROTO_DIAL_GENERAL;
	}
}

static void on_handle_closed(uv_handle_t *h)
{
	dial *d = h->data;
	if (h != (uv_handle_t *)&d->timer)
		free(h);
	if (--d->handles == 0)
		free(d);
}

static void release(dial *d)
{
	d->finished = true;
	if (d->q) {
		dns_query_cancel(d->q);
		d->q = NULL;
	}
	if (d->tcp) {
		uv_close((uv_handle_t *)d->tcp, on_handle_closed);
		d->tcp = NULL;
	}
	uv_close((uv_handle_t *)&d->timer, on_handle_closed);
}

static void fail(dial *d, proto_dial_error kind, const char *msg)
{
	if (!d->finished) {
		d->finished = true;
		connect_result r = {.err = kind, .msg = msg};
		d->cb(&r, d->data);
	}
	release(d);
}

static void on_connect(uv_connect_t *req, int status);
static void on_attempt_timeout(uv_timer_t *t);

static void next_attempt(dial *d)
{
	if (d->next >= d->n) {
		char msg[DIAL_ERR_MAX + 64];
		snprintf(msg, sizeof msg, msgs[0], d->err);
		fail(d, d->kind, msg);
		return;
	}
	if (d->refuse_own &&
	    guard_is_own(worker_guard(d->w), (const struct sockaddr *)&d->cand[d->next])) {
		/* reported like a refused connect, on the next loop turn */
		char addr[ADDR_TEXT_MAX];
		sockaddr_text(&d->cand[d->next], addr, sizeof addr);
		collect(d, "%s: %s", addr, msgs[3]);
		d->kind = PROTO_DIAL_REFUSED;
		d->next++;
		uv_timer_start(&d->timer, on_attempt_timeout, 0, 0);
		return;
	}
	uv_tcp_t *tcp = malloc(sizeof *tcp);
	if (!tcp) {
		fail(d, PROTO_DIAL_GENERAL, uv_strerror(UV_ENOMEM));
		return;
	}
	uv_tcp_init(worker_loop(d->w), tcp);
	tcp->data = d;
	d->handles++;
	d->tcp = tcp;
	d->req.data = d;
	int rc = uv_tcp_connect(&d->req, tcp, (const struct sockaddr *)&d->cand[d->next], on_connect);
	if (rc) {
		/* reported like a failed connect, on the next loop turn */
		char addr[ADDR_TEXT_MAX];
		sockaddr_text(&d->cand[d->next], addr, sizeof addr);
		collect(d, "%s: %s", addr, uv_strerror(rc));
		d->kind = kind_of(rc);
		uv_close((uv_handle_t *)tcp, on_handle_closed);
		d->tcp = NULL;
		d->next++;
		uv_timer_start(&d->timer, on_attempt_timeout, 0, 0);
		return;
	}
	uv_timer_start(&d->timer, on_attempt_timeout, DIAL_ATTEMPT_MS, 0);
}

static void on_attempt_timeout(uv_timer_t *t)
{
	dial *d = t->data;
	if (d->finished)
		return;
	if (d->tcp) { /* the attempt in flight timed out */
		char addr[ADDR_TEXT_MAX];
		sockaddr_text(&d->cand[d->next], addr, sizeof addr);
		collect(d, msgs[1], addr);
		d->kind = PROTO_DIAL_TIMED_OUT;
		uv_close((uv_handle_t *)d->tcp, on_handle_closed); /* on_connect sees ECANCELED */
		d->tcp = NULL;
		d->next++;
	}
	next_attempt(d);
}

static void on_connect(uv_connect_t *req, int status)
{
	dial *d = req->data;
	if (d->finished || (uv_tcp_t *)req->handle != d->tcp)
		return; /* a timed-out or cancelled attempt */
	uv_timer_stop(&d->timer);
	if (status == 0) {
		uv_tcp_t *up = d->tcp;
		d->tcp = NULL;
		d->handles--; /* handed over: no longer ours to close */
		uv_tcp_nodelay(up, 1);
		endpoint *ep = endpoint_new(d->w, up, NULL, NULL, NULL);
		if (!ep) {
			fail(d, PROTO_DIAL_GENERAL, uv_strerror(UV_ENOMEM));
			return;
		}
		endpoint_set_origin(ep, d->origin);
		d->finished = true;
		connect_result r = {.ok = true, .ep = ep};
		d->cb(&r, d->data);
		release(d);
		return;
	}
	char addr[ADDR_TEXT_MAX];
	sockaddr_text(&d->cand[d->next], addr, sizeof addr);
	collect(d, "%s: %s", addr, uv_strerror(status));
	d->kind = kind_of(status);
	uv_close((uv_handle_t *)d->tcp, on_handle_closed);
	d->tcp = NULL;
	d->next++;
	next_attempt(d);
}

static const char *af_name(dial_family af)
{
	static const char *const names[] = {"auto", "prefer_ipv4", "prefer_ipv6", "ipv4_only",
	                                    "ipv6_only"};
	return (unsigned)af < 5 ? names[af] : "?";
}

static void start_candidates(dial *d)
{
	d->n = dial_order(d->cand, d->n, d->af);
	if (d->n == 0) {
		char dest[ADDR_TEXT_MAX], msg[ADDR_TEXT_MAX + 96];
		addr_dest_format(&d->dest, dest, sizeof dest);
		snprintf(msg, sizeof msg, msgs[2], dest, af_name(d->af));
		fail(d, PROTO_DIAL_HOST_UNREACHABLE, msg);
		return;
	}
	next_attempt(d);
}

static void on_resolved(int status, const struct sockaddr_storage *addrs, size_t n,
                        void *data)
{
	dial *d = data;
	d->q = NULL;
	if (d->finished)
		return;
	if (status != DNS_OK) {
		fail(d, status == DNS_ETIMEOUT ? PROTO_DIAL_TIMED_OUT : PROTO_DIAL_HOST_UNREACHABLE,
		     dns_strerror(status));
		return;
	}
	d->n = n < DIAL_MAX_CANDIDATES ? n : DIAL_MAX_CANDIDATES;
	for (size_t i = 0; i < d->n; i++) {
		d->cand[i] = addrs[i];
		if (d->cand[i].ss_family == AF_INET)
			((struct sockaddr_in *)&d->cand[i])->sin_port = htons(d->dest.port);
		else
			((struct sockaddr_in6 *)&d->cand[i])->sin6_port = htons(d->dest.port);
	}
	start_candidates(d);
}

static void on_start(uv_timer_t *t)
{
	dial *d = t->data;
	if (!d->finished)
		start_candidates(d);
}

static void dial_cancel(connect_pending *p)
{
	dial *d = (dial *)p;
	if (!d->finished)
		release(d);
}

connect_pending *dial_tcp(worker *w, dns_resolver *dns, const addr_dest *dest,
                          dial_family af, bool refuse_own, uint64_t origin, connect_cb cb,
                          void *data)
{
	dial *d = calloc(1, sizeof *d);
	if (!d)
		return NULL;
	*d = (dial){.base.cancel = dial_cancel, .w = w, .dns = dns, .dest = *dest, .af = af,
	            .refuse_own = refuse_own, .origin = origin, .cb = cb, .data = data};
	uv_timer_init(worker_loop(w), &d->timer);
	d->timer.data = d;
	d->handles = 1;
	if (dest->kind == ADDR_DOMAIN) {
		d->q = dns_resolve(dns, dest->u.domain.name, on_resolved, d);
		if (!d->q) {
			release(d);
			return NULL;
		}
		return &d->base;
	}
	d->n = addr_dest_to_sockaddr(dest, &d->cand[0]) ? 1 : 0;
	uv_timer_start(&d->timer, on_start, 0, 0); /* the callback never runs inside dial_tcp */
	return &d->base;
}

size_t dial_order(struct sockaddr_storage *addrs, size_t n, dial_family af)
{
	if (af == DIAL_FAMILY_AUTO)
		return n;
	int first = af == DIAL_FAMILY_PREFER_IPV4 || af == DIAL_FAMILY_IPV4_ONLY ? AF_INET : AF_INET6;
	bool only = af == DIAL_FAMILY_IPV4_ONLY || af == DIAL_FAMILY_IPV6_ONLY;
	struct sockaddr_storage tmp[DIAL_MAX_CANDIDATES];
	size_t k = 0;
	if (n > DIAL_MAX_CANDIDATES)
		n = DIAL_MAX_CANDIDATES;
	for (size_t i = 0; i < n; i++) /* stable: the resolver's order within a family */
		if (addrs[i].ss_family == first)
			tmp[k++] = addrs[i];
	for (size_t i = 0; i < n && !only; i++)
		if (addrs[i].ss_family != first)
			tmp[k++] = addrs[i];
	memcpy(addrs, tmp, k * sizeof *tmp);
	return k;
}
