/* connector.c - the connector inbounds call: route a flow on the worker's plane, open it through its target; the UDP fan-out's environment. */
#include "supervisor/connector.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "base/access_log.h"
#include "base/log.h"
#include "outbound/fanout.h"
#include "runtime/conn.h"
#include "runtime/dial.h"
#include "supervisor/actor.h"
#include "runtime/mux_conn.h"

enum {
	MSG_DECISION,
	MSG_DEFAULT_ROUTE,
	MSG_RULE,
	MSG_NO_MEMORY,
	MSG_DRAINED,
	MSG_BLACKHOLE,
	MSG_DIAL_FAILED,
	MSG_COUNT_
};
static const char *const msgs[MSG_COUNT_] = {
	[MSG_DECISION] = "%s flow to %s from inbound %s takes %s@v%llu (%s)",
	[MSG_DEFAULT_ROUTE] = "default route",
	[MSG_RULE] = "rule #%d",
	[MSG_NO_MEMORY] = "out of memory",
	[MSG_DRAINED] = "the outbound this flow was opened on was drained",
	/* the whys of end lines for flows that never reached a relay */
	[MSG_BLACKHOLE] = "blackhole",
	[MSG_DIAL_FAILED] = "dial failed",
};

static void log_decision(const flow *f, const flow_ctx *ctx, const target *t, int32_t rule)
{
	if (log_get_level() < LOG_LEVEL_DEBUG)
		return;
	char dest[ADDR_TEXT_MAX], why[32];
	addr_dest_format(&f->dest, dest, sizeof dest);
	if (rule < 0)
		snprintf(why, sizeof why, "%s", msgs[MSG_DEFAULT_ROUTE]);
	else
		snprintf(why, sizeof why, msgs[MSG_RULE], (int)rule + 1);
	log_debug("route", msgs[MSG_DECISION], f->dest.network == ADDR_UDP ? "udp" : "tcp", dest,
	          ctx && ctx->inbound_tag ? ctx->inbound_tag : "-", t->ob ? t->ob->tag : t->bal->tag,
	          (unsigned long long)(t->ob ? t->ob->version : t->bal->version), why);
}

/* The flow's user name, NULL when it has none or the name is unknown. */
static const char *user_name(const flow *f, const flow_ctx *ctx)
{
	if (!ctx || f->user < 0 || (size_t)f->user >= ctx->n_users)
		return NULL;
	return ctx->user_names[f->user];
}

/* The access log's line for a flow routed to t (docs/cli.md "Access log").
 * With end lines on and want_end, returns the record of the end line to
 * come (NULL otherwise, or without memory). */
static access_log_flow *log_access(const flow *f, const flow_ctx *ctx, const target *t,
                                   int32_t rule, bool want_end)
{
	if (!access_log_enabled())
		return NULL;
	addr_dest src = {0};
	if (ctx && addr_dest_from_sockaddr(&src, (const struct sockaddr *)&ctx->peer))
		src = (addr_dest){0};
	access_log_entry e = {
		.source = &src,
		.dest = &f->dest,
		.sniffed = &f->sniffed,
		.inbound = ctx ? ctx->inbound_tag : NULL,
		.rule = rule,
		.outbound = t->ob ? t->ob->tag : t->bal->tag,
		.version = (unsigned long long)(t->ob ? t->ob->version : t->bal->version),
		.user = user_name(f, ctx),
	};
	clock_gettime(CLOCK_REALTIME, &e.when);
	access_log_write(&e);
	return want_end ? access_log_flow_new(&e) : NULL;
}

/* A connect seen to its end: a failed one is counted (sup_count_dial_error),
 * and when the flow has an end line to write, the record goes to the
 * upstream endpoint (which writes it when it closes, or hands it to its
 * relay), or is written at once when no stream comes of the connect. */
typedef struct logged_connect {
	connect_pending base; /* first: the handle callers hold */
	connect_pending *inner;
	worker *w;
	access_log_flow *log; /* owned; NULL without an end line */
	connect_cb cb;
	void *data;
	bool *ran; /* while the inner connect call runs: set when logged_done ran */
} logged_connect;

static void logged_done(const connect_result *r, void *data)
{
	logged_connect *lc = data;
	if (lc->ran)
		*lc->ran = true;
	if (!r->ok)
		sup_count_dial_error(lc->w, r->err);
	access_log_flow_set_member(lc->log, r->member);
	if (r->ok && r->ep && lc->log)
		endpoint_set_flow_log(r->ep, lc->log);
	else
		access_log_flow_end(lc->log, 0, 0,
		                    r->ok ? msgs[MSG_BLACKHOLE] : r->msg ? r->msg : msgs[MSG_DIAL_FAILED]);
	connect_cb cb = lc->cb;
	void *cb_data = lc->data;
	free(lc);
	cb(r, cb_data);
}

static void logged_cancel(connect_pending *p)
{
	logged_connect *lc = (logged_connect *)p;
	if (lc->inner)
		lc->inner->cancel(lc->inner);
	access_log_flow_end(lc->log, 0, 0, NULL);
	free(lc);
}

static connect_pending *open_target(const target *t, worker *w, dns_resolver *dns,
                                    const addr_dest *dest, connect_cb cb, void *data)
{
	if (t->bal)
		return balanced_connect_stream(t->bal, w, dns, dest, cb, data);
	return outbound_connect_stream(t->ob, w, dns, dest, cb, data);
}

static connect_pending *sup_connect(void *self, worker *w, const flow *f, const flow_ctx *ctx,
                                    connect_cb cb, void *data)
{
	/* a Mux.Cool session is not routed: each of its sub-flows is */
	if (mux_is_session(&f->dest))
		return mux_serve(w, &((etm_supervisor *)self)->conn, f, ctx, cb, data);
	sup_route *rs = worker_slot(w);
	int32_t rule;
	const target *t = plane_route(rs->plane, f, ctx, &rule);
	log_decision(f, ctx, t, rule);
	access_log_flow *log = log_access(f, ctx, t, rule, true);
	logged_connect *lc = malloc(sizeof *lc);
	if (!lc) { /* opened all the same, unlogged and uncounted */
		access_log_flow_end(log, 0, 0, msgs[MSG_NO_MEMORY]); /* NULL: nothing */
		return open_target(t, w, rs->dns, &f->dest, cb, data);
	}
	bool ran = false;
	*lc = (logged_connect){.base.cancel = logged_cancel, .w = w, .log = log, .cb = cb,
	                       .data = data, .ran = &ran};
	connect_pending *p = open_target(t, w, rs->dns, &f->dest, logged_done, lc);
	if (ran)
		return NULL; /* done (and freed) inside */
	lc->ran = NULL;
	lc->inner = p;
	return &lc->base;
}

static connect_pending *sup_connect_direct(void *self, worker *w, const addr_dest *dest,
                                           connect_cb cb, void *data)
{
	(void)self;
	sup_route *rs = worker_slot(w);
	connect_pending *p = dial_tcp(w, rs->dns, dest, DIAL_FAMILY_AUTO, false, 0, cb, data);
	if (!p)
		cb(&(connect_result){.msg = msgs[MSG_NO_MEMORY]}, data);
	return p;
}

/* One UDP association's view of the plane: every datagram is routed as a
 * flow of its own (seed 000 "UDP fan-out"), against the worker's current
 * plane at the time it is sent. */
typedef struct assoc_env {
	list_node node; /* in the worker's sup_route.assocs */
	dgram_link *link; /* the fan-out it is the environment of */
	worker *w;
	flow f; /* the association's flow; dest is replaced per datagram */
	flow_ctx ctx;
	int32_t rule; /* of the last datagram routed: the one a sub-link opens for */
} assoc_env;

static uint64_t assoc_route(void *env, const addr_dest *to, const void **out, bool *one_dest)
{
	assoc_env *e = env;
	sup_route *rs = worker_slot(e->w);
	flow f = e->f;
	f.dest = *to;
	f.dest.network = ADDR_UDP;
	int32_t rule;
	const target *t = plane_route(rs->plane, &f, &e->ctx, &rule);
	log_decision(&f, &e->ctx, t, rule);
	e->rule = rule;
	*out = t;
	*one_dest = t->ob ? outbound_udp_one_dest(t->ob) : t->bal->udp_one_dest;
	/* A balancer's sub-link is keyed by the balancer: its member is
	 * selected once, when the sub-link opens (seed 000). */
	return t->ob ? t->ob->id : t->bal->id;
}

static connect_pending *assoc_open(void *env, const void *tgt, const addr_dest *to,
                                   const dgram_handlers *h, void *rud, fanout_opened_cb opened,
                                   void *oud)
{
	assoc_env *e = env;
	sup_route *rs = worker_slot(e->w);
	const target *t = tgt;
	/* One access-log line per sub-link, not per datagram: fanout calls open
	 * right after route for the datagram that needs the new sub-link. */
	flow f = e->f;
	f.dest = *to;
	f.dest.network = ADDR_UDP;
	/* no end line for a sub-link (docs/cli.md "Access log") */
	(void)log_access(&f, &e->ctx, t, e->rule, false);
	if (t->bal)
		return balanced_connect_datagram(t->bal, e->w, rs->dns, to, h, rud, opened, oud);
	return outbound_connect_datagram(t->ob, e->w, rs->dns, to, h, rud, opened, oud);
}

static void assoc_release(void *env)
{
	assoc_env *e = env;
	sup_route *rs = worker_slot(e->w);
	list_remove(&rs->assocs, &e->node);
	free(e);
}

static const fanout_env_ops assoc_ops = {
	.route = assoc_route,
	.open = assoc_open,
	.release = assoc_release,
};

static dgram_link *sup_connect_datagram(void *self, worker *w, const flow *f, const flow_ctx *ctx,
                                        const dgram_handlers *h, void *ud, char *err,
                                        size_t err_size)
{
	(void)self;
	assoc_env *e = malloc(sizeof *e);
	dgram_link *l = e ? fanout_new(&assoc_ops, e, h, ud) : NULL;
	if (!l) {
		free(e);
		snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
		return NULL;
	}
	*e = (assoc_env){.link = l, .w = w, .f = *f, .ctx = *ctx};
	list_push_back(&((sup_route *)worker_slot(w))->assocs, &e->node);
	return l;
}

size_t sup_drain(worker *w, uint64_t origin)
{
	sup_route *rs = worker_slot(w);
	size_t n = conn_drain(w, origin) + mux_drain(w, origin, msgs[MSG_DRAINED]);
	for (list_node *i = rs->assocs.head; i; i = i->next)
		n += fanout_drain(LIST_ENTRY(i, assoc_env, node)->link, origin, msgs[MSG_DRAINED]);
	return n;
}

void sup_connector_init(connector *c, void *self)
{
	*c = (connector){.connect = sup_connect,
	                 .connect_direct = sup_connect_direct,
	                 .connect_datagram = sup_connect_datagram,
	                 .self = self};
}
