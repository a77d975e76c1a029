/* proxy.c - a proxy client's server and transport, and the streams and datagram links dialled through them. */
#include "outbound/proxy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/dial_stream.h"
#include "proto/mux.h"
#include "runtime/gun_conn.h"
#include "runtime/mux_conn.h"
#include "transport/grpc.h"
#include "transport/tls.h"
#include "transport/ws.h"

enum { MSG_NO_MEMORY, MSG_NO_LAYERS, MSG_COUNT_ };
static const char *const msgs[MSG_COUNT_] = {
	[MSG_NO_MEMORY] = "out of memory",
	[MSG_NO_LAYERS] = "cannot build the layers of %s",
};

struct proxy_transport {
	addr_dest server;
	tls_client_ctx *tls; /* a reference; NULL: no TLS */
	char *tls_name;      /* owned when tls: the name verified */
	bool ws;
	char *ws_path, *ws_host; /* owned when ws */
	char *grpc_service, *grpc_host; /* owned when grpc */
	unsigned mux; /* Mux.Cool sub-flows a session carries at once; 0: off */
};

void proxy_transport_del(proxy_transport *t)
{
	if (!t)
		return;
	tls_client_ctx_unref(t->tls);
	free(t->tls_name);
	free(t->ws_path);
	free(t->ws_host);
	free(t->grpc_service);
	free(t->grpc_host);
	free(t);
}

proxy_transport *proxy_transport_new(const outbound_config *cfg, char *err, size_t err_size)
{
	proxy_transport *t = calloc(1, sizeof *t);
	if (!t)
		goto nomem;
	t->server = cfg->server;
	t->mux = cfg->mux_concurrency;
	if (cfg->tls) {
		tls_client_ctx_ref(cfg->tls);
		t->tls = cfg->tls;
		if (!(t->tls_name = strdup(cfg->tls_name)))
			goto nomem;
	}
	if (cfg->ws) {
		t->ws = true;
		if (!(t->ws_path = strdup(cfg->ws_path)) || !(t->ws_host = strdup(cfg->ws_host)))
			goto nomem;
	}
	if (cfg->grpc) {
		if (!grpc_service_name_ok(cfg->grpc_service, err, err_size)) {
			proxy_transport_del(t);
			return NULL;
		}
		if (!(t->grpc_service = strdup(cfg->grpc_service)) ||
		    !(t->grpc_host = strdup(cfg->grpc_host)))
			goto nomem;
	}
	return t;
nomem:
	snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
	proxy_transport_del(t);
	return NULL;
}

/* One stream's layers, bottom up: TLS, WebSocket, the proxy request. For a
 * datagram link (dest->network UDP) the request is the protocol's UDP one;
 * *top gets the request layer (the SOCKS association reads its relay).
 * Over gRPC the stream is a call on a shared connection (gun_conn.h),
 * which has the TLS: the stack holds the request only. */
static stack *build_stack(const outbound *o, const addr_dest *dest, layer **top, char *err,
                          size_t err_size)
{
	const proxy_transport *t = o->proxy;
	stack *st = stack_new();
	if (!st) {
		snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
		return NULL;
	}
	layer *l;
	if (t->tls && !t->grpc_service) {
		l = tls_client_new(t->tls, t->tls_name, err, err_size);
		if (!l || stack_push(st, l))
			goto fail;
	}
	if (t->ws) {
		ws_client_config cfg = {.path = t->ws_path, .host = t->ws_host};
		if (getentropy(cfg.seed, sizeof cfg.seed)) {
			snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
			goto fail;
		}
		l = ws_client_new(&cfg, err, err_size);
		if (!l || stack_push(st, l))
			goto fail;
	}
	l = o->proto->request(o, dest);
	if (!l) {
		snprintf(err, err_size, msgs[MSG_NO_LAYERS], o->proto->name);
		goto fail;
	}
	if (top)
		*top = l;
	if (stack_push(st, l))
		goto fail;
	return st;
fail:
	stack_free(st);
	return NULL;
}

/* Dials st's stream: a socket of its own, or a call on a gRPC connection. */
static connect_pending *dial(const outbound *o, worker *w, dns_resolver *dns, stack *st,
                             connect_cb cb, void *data)
{
	const proxy_transport *t = o->proxy;
	if (!t->grpc_service)
		return dial_stream(w, dns, &t->server, o->af, o->id, st, cb, data);
	gun_client_config cfg = {.server = t->server, .af = o->af, .origin = o->id,
	                         .tls = t->tls, .tls_name = t->tls_name,
	                         .service = t->grpc_service, .host = t->grpc_host};
	return gun_open(w, dns, &cfg, st, cb, data);
}

/* A Mux.Cool session's own stream: the proxy request to v1.mux.cool. */
typedef struct session_dial {
	const outbound *o;
	dns_resolver *dns;
} session_dial;

static connect_pending *dial_session(void *ctx, worker *w, connect_cb cb, void *data)
{
	const session_dial *sd = ctx;
	char err[256];
	addr_dest to;
	mux_session_dest(&to);
	stack *st = build_stack(sd->o, &to, NULL, err, sizeof err);
	return st ? dial(sd->o, w, sd->dns, st, cb, data) : NULL;
}

connect_pending *proxy_connect_stream(const outbound *o, worker *w, dns_resolver *dns,
                                      const addr_dest *dest, connect_cb cb, void *data)
{
	char err[256];
	if (o->proxy->mux) {
		session_dial sd = {.o = o, .dns = dns};
		connect_pending *p = mux_open(w, o->id, o->proxy->mux, dial_session, &sd, dest, cb, data);
		if (!p)
			cb(&(connect_result){.msg = msgs[MSG_NO_MEMORY]}, data);
		return p;
	}
	stack *st = build_stack(o, dest, NULL, err, sizeof err);
	if (!st) {
		cb(&(connect_result){.msg = err}, data);
		return NULL;
	}
	connect_pending *p = dial(o, w, dns, st, cb, data);
	if (!p)
		cb(&(connect_result){.msg = msgs[MSG_NO_MEMORY]}, data);
	return p;
}

/* A datagram link over a proxy stream, while its stream dials. */
typedef struct dgram_open {
	connect_pending base; /* first: the handle callers hold */
	connect_pending *dial;
	const outbound *o;
	worker *w;
	addr_dest to;
	const dgram_handlers *h;
	void *ud;
	outbound_dgram_cb done;
	void *oud;
	layer *request; /* the stack's top: the SOCKS association reads its relay */
} dgram_open;

static void dgram_open_free(dgram_open *d)
{
	outbound_unref((outbound *)d->o);
	free(d);
}

static void dgram_cancel(connect_pending *p)
{
	dgram_open *d = (dgram_open *)p;
	d->dial->cancel(d->dial);
	dgram_open_free(d);
}

static void on_dgram_stream(const connect_result *r, void *data)
{
	dgram_open *d = data;
	char err[256];
	dgram_link *l = NULL;
	if (!r->ok)
		snprintf(err, sizeof err, "%s", r->msg ? r->msg : "?");
	else
		l = d->o->proto->dgram_over(d->o, d->w, r->ep, d->request, &d->to, d->h, d->ud,
		                            err, sizeof err);
	if (l)
		l->origin = d->o->id;
	d->done(d->oud, l, l ? NULL : err);
	dgram_open_free(d);
}

connect_pending *proxy_connect_datagram(const outbound *o, worker *w, dns_resolver *dns,
                                        const addr_dest *to, const dgram_handlers *h, void *ud,
                                        outbound_dgram_cb done, void *oud)
{
	char err[256];
	if (o->proxy->mux) {
		session_dial sd = {.o = o, .dns = dns};
		connect_pending *p = mux_open_datagram(w, o->id, o->proxy->mux, dial_session, &sd, to,
		                                       h, ud, done, oud);
		if (!p)
			done(oud, NULL, msgs[MSG_NO_MEMORY]);
		return p;
	}
	dgram_open *d = calloc(1, sizeof *d);
	if (!d) {
		done(oud, NULL, msgs[MSG_NO_MEMORY]);
		return NULL;
	}
	*d = (dgram_open){.base.cancel = dgram_cancel, .o = outbound_ref(o), .w = w, .to = *to,
	                  .h = h, .ud = ud, .done = done, .oud = oud};
	stack *st = build_stack(o, &d->to, &d->request, err, sizeof err);
	if (!st) {
		dgram_open_free(d);
		done(oud, NULL, err);
		return NULL;
	}
	d->dial = dial(o, w, dns, st, on_dgram_stream, d);
	if (!d->dial) {
		dgram_open_free(d);
		done(oud, NULL, msgs[MSG_NO_MEMORY]);
		return NULL;
	}
	return &d->base;
}

unsigned proxy_transport_mux(const proxy_transport *t) { return t ? t->mux : 0; }
