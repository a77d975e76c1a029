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
#include "supervisor/build_dns.h"
#include "runtime/mux_conn.h"

/* The failed-dial lines are bounded per worker: at most DIAL_LOG_BURST in
 * each DIAL_LOG_WINDOW_MS. Ten a second keeps a client retrying a dead
 * host, or a scan through the proxy, from flooding the log and the disk
 * while a single failure, the one a new user is looking for, always
 * shows; what a window drops is counted and written as one summary line
 * with the next failure logged (the guard's warnings count the same way). */
#define DIAL_LOG_BURST 10
#define DIAL_LOG_WINDOW_MS 1000
_Static_assert(DIAL_LOG_WINDOW_MS == 1000, "the summary line says \"a second\"");

#define TEXT_(x) #x
#define TEXT(x) TEXT_(x)

enum {
	MSG_DECISION,
	MSG_DEFAULT_ROUTE,
	MSG_RULE,
	MSG_NO_MEMORY,
	MSG_DRAINED,
	MSG_BLACKHOLE,
	MSG_DIAL_FAILED,
	MSG_DNS_GONE,
	MSG_FLOW_FAILED,
	MSG_VIA_MEMBER,
	MSG_UNLOGGED,
	MSG_UNKNOWN,
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
	/* seed 002 RoutedDialer, once nothing holds the plane */
	[MSG_DNS_GONE] = "dns: the supervisor this resolver dials through is gone",
	/* issue 32: a failed dial at info; the reason word is the dial-error
	 * metric's (etm_dial_error_name) */
	[MSG_FLOW_FAILED] = "flow %s -> %s from inbound %s via %s failed (%s): %s",
	[MSG_VIA_MEMBER] = "%s (member %s)",
	[MSG_UNLOGGED] = "%llu more dial failures not logged (at most " TEXT(DIAL_LOG_BURST)
	                 " a second per worker)",
	[MSG_UNKNOWN] = "?",
};

/* ---- failed dials at info (issue 32) ---- */

/* One worker's limiter: a zeroed one is a fresh start. Its thread only. */
typedef struct dial_log_limit {
	uint64_t window_start; /* ms, the worker loop's clock */
	uint32_t in_window;    /* lines written in this window */
	uint64_t dropped;      /* failures not logged since the last summary */
} dial_log_limit;

/* Whether a failure at now (ms, from the caller's clock) may be logged;
 * *summary gets how many were dropped before it when that count is to be
 * written now (0: none). */
static bool dial_log_admit(dial_log_limit *l, uint64_t now, uint64_t *summary)
{
	*summary = 0;
	if (l->in_window == 0 || now - l->window_start >= DIAL_LOG_WINDOW_MS) {
		l->window_start = now;
		l->in_window = 0;
	}
	if (l->in_window >= DIAL_LOG_BURST) {
		l->dropped++;
		return false;
	}
	l->in_window++;
	*summary = l->dropped;
	l->dropped = 0;
	return true;
}

/* Each worker is one thread, and only it dials its flows. */
static _Thread_local dial_log_limit dial_limit;

/* The line of a failed flow, from its tracker record f (which holds the
 * client, the destination and the tags, copied when the flow was routed). */
static void log_dial_failed(worker *w, const track_flow *f, const connect_result *r)
{
	if (log_get_level() < LOG_LEVEL_INFO)
		return;
	uint64_t dropped;
	if (!dial_log_admit(&dial_limit, uv_now(worker_loop(w)), &dropped))
		return;
	if (dropped)
		log_info("dial", msgs[MSG_UNLOGGED], (unsigned long long)dropped);
	char peer[ADDR_TEXT_MAX], dest[ADDR_TEXT_MAX], via[2 * TRACK_NAME_MAX + 16];
	if (f->source.kind != ADDR_NONE)
		addr_dest_format(&f->source, peer, sizeof peer);
	else
		snprintf(peer, sizeof peer, "%s", msgs[MSG_UNKNOWN]);
	addr_dest_format(&f->dest, dest, sizeof dest);
	if (r->member)
		snprintf(via, sizeof via, msgs[MSG_VIA_MEMBER], f->outbound, r->member);
	else
		snprintf(via, sizeof via, "%s", f->outbound);
	size_t k = (size_t)r->err < PROTO_DIAL_ERR_KINDS ? (size_t)r->err : PROTO_DIAL_GENERAL;
	log_info("dial", msgs[MSG_FLOW_FAILED], peer, dest, f->inbound[0] ? f->inbound : "-", via,
	         etm_dial_error_name(k), r->msg ? r->msg : msgs[MSG_DIAL_FAILED]);
}

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

/* The flow's principal: its account's on the inbound; NULL (anonymous)
 * for a flow without an account. */
static principal *principal_of(const flow *f, const flow_ctx *ctx)
{
	if (!ctx || !ctx->principals || f->user < 0 || (size_t)f->user >= ctx->n_users)
		return NULL;
	return ctx->principals[f->user];
}

/* Seed 002 Session::admit, before anything else: NULL, or the refusal. */
static const char *admit(const flow *f, const flow_ctx *ctx)
{
	return ctx ? session_admit(ctx->session, principal_of(f, ctx)) : NULL;
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

uint64_t sup_wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The tracker's record of a flow routed to t, not yet in the table, with
 * the access log's end line when there is one. NULL without memory. */
static track_flow *prepare_track(sup_route *rs, const flow *f, const flow_ctx *ctx,
                                 const target *t, int32_t rule, uint64_t assoc,
                                 access_log_flow *log)
{
	track_open o = {
		.udp = f->dest.network == ADDR_UDP,
		.assoc = assoc,
		.inbound = ctx ? ctx->inbound_tag : NULL,
		.user = user_name(f, ctx),
		.who = principal_of(f, ctx),
		.outbound = t->ob ? t->ob->tag : t->bal->tag,
		.peer = ctx ? &ctx->peer : NULL,
		.dest = &f->dest,
		.sniffed = &f->sniffed,
		.rule = rule,
		.version = (unsigned long long)(t->ob ? t->ob->version : t->bal->version),
		.epoch = rs->plane->epoch,
	};
	return tracker_prepare(rs->track, &o, log);
}

/* A connect whose flow the tracker registers once its outbound opened (a
 * failed dial never is, seed 002): the record goes to the upstream
 * endpoint, which counts into it and ends it when it closes, or is
 * discarded (writing its end line) when no stream comes of the connect; a
 * failed one is counted (sup_count_dial_error). */
typedef struct tracked_connect {
	connect_pending base; /* first: the handle callers hold */
	connect_pending *inner;
	worker *w;
	track_flow *tf; /* owned */
	connect_cb cb;
	void *data;
	bool *ran; /* while the inner connect call runs: set when tracked_done ran */
} tracked_connect;

static void tracked_done(const connect_result *r, void *data)
{
	tracked_connect *tc = data;
	if (tc->ran)
		*tc->ran = true;
	if (!r->ok) {
		sup_count_dial_error(tc->w, r->err);
		log_dial_failed(tc->w, tc->tf, r);
	}
	if (r->ok && r->ep) {
		track_register(tc->tf, r->member);
		endpoint_set_track(r->ep, tc->tf);
	} else {
		track_discard(tc->tf,
		              r->ok ? msgs[MSG_BLACKHOLE] : r->msg ? r->msg : msgs[MSG_DIAL_FAILED]);
	}
	connect_cb cb = tc->cb;
	void *cb_data = tc->data;
	free(tc);
	cb(r, cb_data);
}

static void tracked_cancel(connect_pending *p)
{
	tracked_connect *tc = (tracked_connect *)p;
	if (tc->inner)
		tc->inner->cancel(tc->inner);
	track_discard(tc->tf, NULL);
	free(tc);
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
	const char *refused = admit(f, ctx);
	if (refused) {
		cb(&(connect_result){.err = PROTO_DIAL_NOT_ALLOWED, .msg = refused}, data);
		return NULL;
	}
	/* a Mux.Cool session is not routed: each of its sub-flows is */
	if (mux_is_session(&f->dest))
		return mux_serve(w, &((etm_supervisor *)self)->conn, f, ctx, cb, data);
	sup_route *rs = worker_slot(w);
	int32_t rule;
	const target *t = plane_route(rs->plane, f, ctx, &rule);
	log_decision(f, ctx, t, rule);
	access_log_flow *log = log_access(f, ctx, t, rule, true);
	track_flow *tf = prepare_track(rs, f, ctx, t, rule, 0, log);
	tracked_connect *tc = tf ? malloc(sizeof *tc) : NULL;
	if (!tc) { /* the flow runs untracked and uncounted */
		track_discard(tf, msgs[MSG_NO_MEMORY]);
		return open_target(t, w, rs->dns, &f->dest, cb, data);
	}
	bool ran = false;
	*tc = (tracked_connect){.base.cancel = tracked_cancel, .w = w, .tf = tf, .cb = cb,
	                        .data = data, .ran = &ran};
	connect_pending *p = open_target(t, w, rs->dns, &f->dest, tracked_done, tc);
	if (ran)
		return NULL; /* done (and freed) inside */
	tc->ran = NULL;
	tc->inner = p;
	return &tc->base;
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
	uint64_t id; /* the tracker's id of the association */
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

/* A sub-link opening: its record enters the table when the link opens
 * and goes to the fan-out with it. */
typedef struct sub_open {
	connect_pending base; /* first: the handle the fan-out holds */
	connect_pending *inner;
	track_flow *tf; /* owned */
	fanout_opened_cb opened;
	void *oud;
	bool *ran; /* while the inner open runs: set when sub_opened ran */
} sub_open;

static void sub_opened(void *ud, dgram_link *link, const char *why)
{
	sub_open *so = ud;
	if (so->ran)
		*so->ran = true;
	track_flow *tf = so->tf;
	if (link) {
		track_register(tf, NULL);
	} else {
		track_discard(tf, why);
		tf = NULL;
	}
	fanout_opened_cb opened = so->opened;
	void *oud = so->oud;
	free(so);
	opened(oud, link, tf, why);
}

static void sub_open_cancel(connect_pending *p)
{
	sub_open *so = (sub_open *)p;
	if (so->inner)
		so->inner->cancel(so->inner);
	track_discard(so->tf, NULL);
	free(so);
}

static connect_pending *open_sub(const target *t, worker *w, dns_resolver *dns,
                                 const addr_dest *to, const dgram_handlers *h, void *rud,
                                 outbound_dgram_cb done, void *oud)
{
	if (t->bal)
		return balanced_connect_datagram(t->bal, w, dns, to, h, rud, done, oud);
	return outbound_connect_datagram(t->ob, w, dns, to, h, rud, done, oud);
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
	/* every sub-link is a flow of the session (a SOCKS association's
	 * datagrams never cross its stream) */
	const char *refused = admit(&f, &e->ctx);
	if (refused) {
		opened(oud, NULL, NULL, refused);
		return NULL;
	}
	/* no end line for a sub-link (docs/cli.md "Access log") */
	(void)log_access(&f, &e->ctx, t, e->rule, false);
	track_flow *tf = prepare_track(rs, &f, &e->ctx, t, e->rule, e->id, NULL);
	sub_open *so = tf ? malloc(sizeof *so) : NULL;
	if (!so) {
		track_discard(tf, NULL);
		opened(oud, NULL, NULL, msgs[MSG_NO_MEMORY]);
		return NULL;
	}
	bool ran = false;
	*so = (sub_open){.base.cancel = sub_open_cancel, .tf = tf, .opened = opened, .oud = oud,
	                 .ran = &ran};
	connect_pending *p = open_sub(t, e->w, rs->dns, to, h, rud, sub_opened, so);
	if (ran)
		return NULL;
	so->ran = NULL;
	so->inner = p;
	return &so->base;
}

static void assoc_release(void *env)
{
	assoc_env *e = env;
	sup_route *rs = worker_slot(e->w);
	list_remove(&rs->assocs, &e->node);
	session_release(e->ctx.session);
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
	const char *refused = admit(f, ctx);
	if (refused) {
		snprintf(err, err_size, "%s", refused);
		return NULL;
	}
	assoc_env *e = malloc(sizeof *e);
	dgram_link *l = e ? fanout_new(&assoc_ops, e, h, ud) : NULL;
	if (!l) {
		free(e);
		snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
		return NULL;
	}
	*e = (assoc_env){.link = l, .w = w, .f = *f, .ctx = *ctx,
	                 .id = tracker_next_id(((sup_route *)worker_slot(w))->track)};
	if (e->ctx.session)
		session_hold(e->ctx.session);
	list_push_back(&((sup_route *)worker_slot(w))->assocs, &e->node);
	return l;
}

size_t sup_drain(worker *w, uint64_t origin)
{
	sup_route *rs = worker_slot(w);
	size_t n = conn_drain(w, origin) + mux_drain(w, origin, msgs[MSG_DRAINED]);
	for (list_node *i = rs->assocs.head; i; i = i->next)
		n += fanout_drain(LIST_ENTRY(i, assoc_env, node)->link, origin, msgs[MSG_DRAINED]);
	if (rs->svc) /* its through_proxy connections are guarded like any flow */
		n += dns_svc_drain(rs->svc, origin);
	return n;
}

/* ---- the DNS service's own connections (seed 002 RoutedDialer) ---- */

dns_svc *sup_dns_svc_of(worker *w)
{
	sup_route *rs = worker_slot(w);
	return rs ? rs->svc : NULL;
}

/* An upstream connection of the service with through_proxy: a TCP flow
 * to the server routed by the route table, never intercepted (route_upstream),
 * with inbound tag "dns" and no user; not tracked, so no one's usage and
 * no kill reach it, but a close drain of its outbound does (its endpoint
 * carries the version's origin). */
static connect_pending *sup_dns_dial(void *self, worker *w, const addr_dest *server,
                                     connect_cb cb, void *data)
{
	dns_resolver *plain = self;
	sup_route *rs = worker_slot(w);
	if (!rs || !rs->plane) {
		cb(&(connect_result){.err = PROTO_DIAL_GENERAL, .msg = msgs[MSG_DNS_GONE]}, data);
		return NULL;
	}
	flow f = {.dest = *server, .user = -1};
	f.dest.network = ADDR_TCP;
	flow_ctx ctx = {.inbound_tag = DNS_FLOW_TAG};
	int32_t rule;
	const target *t = plane_route_upstream(rs->plane, &f, &ctx, &rule);
	log_decision(&f, &ctx, t, rule);
	/* the outbound's own names (a proxy server's) with the plain resolver:
	 * asking the service would wait on this very connection */
	return open_target(t, w, plain, &f.dest, cb, data);
}

static void plain_release(void *self) { dns_resolver_del(self); }

dns_svc *sup_dns_svc_new(worker *w, dns_svc_conf *conf, dns_resolver *r)
{
	if (!conf)
		return NULL;
	/* no cache: what it finds must not answer the service's own lookups */
	char err[64];
	dns_resolver *plain = dns_resolver_new(worker_loop(w), NULL, NULL, 0, 0, err, sizeof err);
	if (!plain)
		return NULL;
	dns_svc_dialer d = {.dial = sup_dns_dial, .release = plain_release, .self = plain};
	dns_svc *s = dns_svc_new(w, conf, &d, &((sup_route *)worker_slot(w))->dns_counts);
	if (!s) {
		dns_resolver_del(plain);
		return NULL;
	}
	dns_resolver_set_backend(r, dns_svc_backend(s));
	return s;
}

void sup_connector_init(connector *c, void *self)
{
	*c = (connector){.connect = sup_connect,
	                 .connect_direct = sup_connect_direct,
	                 .connect_datagram = sup_connect_datagram,
	                 .self = self};
}
