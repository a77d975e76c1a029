/* outbound.c - dispatch of connect_stream by protocol. */
#include "outbound/outbound.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <arpa/inet.h>

#include "outbound/freedom_udp.h"
#include "outbound/stream_udp.h"
#include "proto/http_client.h"
#include "proto/socks_client.h"
#include "proto/trojan.h"
#include "proto/vless.h"
#include "runtime/dial.h"
#include "runtime/dial_stream.h"
#include "transport/tls.h"
#include "transport/ws.h"

static const char *const msgs[] = {
	"outbound %s: protocol %s is not available yet",
	"out of memory",
	"outbound %s: %s",
	"outbound %s: settings.id is not a UUID",
	"outbound %s: cannot hash the password",
	"cannot build the layers of %s",
};

static bool is_proxy(etm_protocol p)
{
	return p == ETM_PROTO_SOCKS || p == ETM_PROTO_HTTP || p == ETM_PROTO_TROJAN ||
	       p == ETM_PROTO_VLESS;
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

/* The transport and credentials of a proxy client, built once per
 * outbound on the control thread. Returns 0 or -1 with err. */
static int build_proxy(outbound *o, const etm_outbound_spec *spec, char *err, size_t err_size)
{
	unsigned char ip[16];
	if (inet_pton(AF_INET, spec->server, ip) == 1) {
		o->server = (addr_dest){.kind = ADDR_IPV4, .port = spec->port};
		memcpy(o->server.u.v4, ip, 4);
	} else if (inet_pton(AF_INET6, spec->server, ip) == 1) {
		o->server = (addr_dest){.kind = ADDR_IPV6, .port = spec->port};
		memcpy(o->server.u.v6, ip, 16);
	} else if (addr_dest_set_domain(&o->server, spec->server, strlen(spec->server),
	                                spec->port)) {
		snprintf(err, err_size, msgs[2], spec->tag, "server is not a host name");
		return -1;
	}
	const etm_stream_spec *st = &spec->stream;
	if (st->network == ETM_NET_TLS || st->security == ETM_SEC_TLS) {
		const etm_tls_spec *t = &st->tls;
		tls_client_config cfg = {
			.server_name = t->server_name,
			.alpn = t->alpn.len ? (const char *const *)t->alpn.items : NULL,
			.allow_insecure = t->allow_insecure,
			.ca_file = t->ca,
		};
		/* the ALPN list must end with NULL: copy it */
		const char *alpn[17] = {0};
		for (size_t i = 0; i < t->alpn.len && i < 16; i++)
			alpn[i] = t->alpn.items[i];
		cfg.alpn = t->alpn.len ? alpn : NULL;
		char why[256];
		o->tls = tls_client_ctx_new(&cfg, why, sizeof why);
		if (!o->tls) {
			snprintf(err, err_size, msgs[2], spec->tag, why);
			return -1;
		}
		o->tls_name = dup_or_null(t->server_name ? t->server_name : spec->server);
	}
	if (st->network == ETM_NET_WS) {
		o->ws = true;
		o->ws_path = strdup(st->ws.path ? st->ws.path : "/");
		o->ws_host = strdup(st->ws.host ? st->ws.host
		                                : st->tls.server_name ? st->tls.server_name
		                                                      : spec->server);
	}
	const etm_settings_spec *set = &spec->settings;
	o->username = dup_or_null(set->username);
	o->password = dup_or_null(set->password);
	if (spec->protocol == ETM_PROTO_TROJAN &&
	    trojan_password_hash(set->password, (char *)o->trojan_hash)) {
		snprintf(err, err_size, msgs[4], spec->tag);
		return -1;
	}
	if (spec->protocol == ETM_PROTO_VLESS && vless_uuid_parse(set->id, o->vless_uuid)) {
		snprintf(err, err_size, msgs[3], spec->tag);
		return -1;
	}
	return 0;
}

/* Source of outbound ids; a fan-out keys its sub-links by them. */
static atomic_uint_fast64_t next_id = 1;

uint64_t outbound_next_id(void) { return atomic_fetch_add(&next_id, 1); }

outbound *outbound_new(const etm_outbound_spec *spec, char *err, size_t err_size)
{
	if (!etm_protocol_available(spec->protocol, false)) {
		snprintf(err, err_size, msgs[0], spec->tag, etm_protocol_name(spec->protocol));
		return NULL;
	}
	outbound *o = calloc(1, sizeof *o);
	if (o)
		o->tag = strdup(spec->tag);
	if (!o || !o->tag) {
		free(o);
		snprintf(err, err_size, "%s", msgs[1]);
		return NULL;
	}
	o->id = atomic_fetch_add(&next_id, 1);
	o->protocol = spec->protocol;
	o->af = spec->address_family;
	if (is_proxy(o->protocol) && build_proxy(o, spec, err, err_size)) {
		outbound_del(o);
		return NULL;
	}
	return o;
}

void outbound_del(outbound *o)
{
	if (!o)
		return;
	tls_client_ctx_unref(o->tls);
	free(o->tls_name);
	free(o->ws_path);
	free(o->ws_host);
	free(o->username);
	free(o->password);
	free(o->tag);
	free(o);
}

/* One stream's layers, bottom up: TLS, WebSocket, the proxy request. For a
 * datagram link (dest->network UDP) the request is the protocol's UDP one;
 * *top gets the request layer (the SOCKS association reads its relay). */
static stack *build_stack(const outbound *o, const addr_dest *dest, layer **top, char *err,
                          size_t err_size)
{
	stack *st = stack_new();
	if (!st) {
		snprintf(err, err_size, "%s", msgs[1]);
		return NULL;
	}
	layer *l;
	if (o->tls) {
		l = tls_client_new(o->tls, o->tls_name, err, err_size);
		if (!l || stack_push(st, l))
			goto fail;
	}
	if (o->ws) {
		ws_client_config cfg = {.path = o->ws_path, .host = o->ws_host};
		if (getentropy(cfg.seed, sizeof cfg.seed)) {
			snprintf(err, err_size, "%s", msgs[1]);
			goto fail;
		}
		l = ws_client_new(&cfg, err, err_size);
		if (!l || stack_push(st, l))
			goto fail;
	}
	bool udp = dest->network == ADDR_UDP;
	switch (o->protocol) {
	case ETM_PROTO_SOCKS:
		l = udp ? socks_client_udp_new(o->username, o->password)
		        : socks_client_new(dest, o->username, o->password);
		break;
	case ETM_PROTO_HTTP:
		l = http_client_new(dest, o->username, o->password);
		break;
	case ETM_PROTO_TROJAN:
		l = trojan_client_new(o->trojan_hash, dest);
		break;
	case ETM_PROTO_VLESS:
		l = vless_client_new(o->vless_uuid, dest, dest->network == ADDR_UDP);
		break;
	default:
		l = NULL;
		break;
	}
	if (!l) {
		snprintf(err, err_size, msgs[5], etm_protocol_name(o->protocol));
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

connect_pending *outbound_connect_stream(const outbound *o, worker *w, dns_resolver *dns,
                                         const addr_dest *dest, connect_cb cb, void *data)
{
	switch (o->protocol) {
	case ETM_PROTO_FREEDOM: {
		connect_pending *d = dial_tcp(w, dns, dest, o->af, true, cb, data);
		if (!d)
			cb(&(connect_result){.msg = msgs[1]}, data);
		return d;
	}
	case ETM_PROTO_BLACKHOLE:
		cb(&(connect_result){.ok = true, .blackhole = true}, data);
		return NULL;
	case ETM_PROTO_SOCKS:
	case ETM_PROTO_HTTP:
	case ETM_PROTO_TROJAN:
	case ETM_PROTO_VLESS: {
		char err[256];
		stack *st = build_stack(o, dest, NULL, err, sizeof err);
		if (!st) {
			cb(&(connect_result){.msg = err}, data);
			return NULL;
		}
		connect_pending *p = dial_stream(w, dns, &o->server, o->af, st, cb, data);
		if (!p)
			cb(&(connect_result){.msg = msgs[1]}, data);
		return p;
	}
	default:
		/* outbound_new refuses what is not built */
		cb(&(connect_result){.msg = "protocol not available"}, data);
		return NULL;
	}
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
	layer *control; /* the request layer: the SOCKS association's relay */
} dgram_open;

static void dgram_cancel(connect_pending *p)
{
	dgram_open *d = (dgram_open *)p;
	d->dial->cancel(d->dial);
	free(d);
}

static void on_dgram_stream(const connect_result *r, void *data)
{
	dgram_open *d = data;
	char err[256];
	dgram_link *l = NULL;
	if (!r->ok) {
		snprintf(err, sizeof err, "%s", r->msg ? r->msg : "?");
	} else if (d->o->protocol == ETM_PROTO_SOCKS) {
		l = socks_udp_link_open(d->w, r->up, r->st, d->control, d->h, d->ud, err, sizeof err);
	} else {
		l = stream_udp_open(d->w, r->up, r->st,
		                    d->o->protocol == ETM_PROTO_VLESS ? STREAM_UDP_VLESS
		                                                       : STREAM_UDP_TROJAN,
		                    &d->to, d->h, d->ud);
		if (!l)
			snprintf(err, sizeof err, "%s", msgs[1]);
	}
	d->done(d->oud, l, l ? NULL : err);
	free(d);
}

connect_pending *outbound_connect_datagram(const outbound *o, worker *w, dns_resolver *dns,
                                           const addr_dest *to, const dgram_handlers *h,
                                           void *ud, outbound_dgram_cb done, void *oud)
{
	char err[256];
	dgram_link *l = NULL;
	switch (o->protocol) {
	case ETM_PROTO_FREEDOM:
		l = freedom_udp_open(w, dns, o->af, h, ud, err, sizeof err);
		done(oud, l, l ? NULL : err);
		return NULL;
	case ETM_PROTO_BLACKHOLE:
		done(oud, blackhole_udp_open(), NULL);
		return NULL;
	case ETM_PROTO_SOCKS:
	case ETM_PROTO_TROJAN:
	case ETM_PROTO_VLESS: {
		dgram_open *d = calloc(1, sizeof *d);
		if (!d) {
			done(oud, NULL, msgs[1]);
			return NULL;
		}
		*d = (dgram_open){.base.cancel = dgram_cancel, .o = o, .w = w, .to = *to, .h = h,
		                  .ud = ud, .done = done, .oud = oud};
		d->to.network = ADDR_UDP;
		stack *st = build_stack(o, &d->to, &d->control, err, sizeof err);
		if (!st) {
			free(d);
			done(oud, NULL, err);
			return NULL;
		}
		d->dial = dial_stream(w, dns, &o->server, o->af, st, on_dgram_stream, d);
		if (!d->dial) {
			free(d);
			done(oud, NULL, msgs[1]);
			return NULL;
		}
		return &d->base;
	}
	default:
		/* seed 000: "http carries no datagrams", and the same with the name */
		snprintf(err, sizeof err, "%s carries no datagrams", etm_protocol_name(o->protocol));
		done(oud, NULL, err);
		return NULL;
	}
}
