/* inbound.c - per-connection driver: picks the protocol core, opens the flow, answers, relays. */
#include "inbound/inbound.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "transport/tls.h"
#include "transport/ws.h"
#include "inbound/http_in.h"
#include "inbound/in_conn.h"
#include "inbound/socks_udp.h"

enum { MSG_BAD_UDP_FRAME };
static const char *const msgs[] = {
	[MSG_BAD_UDP_FRAME] = "a malformed UDP frame",
};

/* ---- SOCKS ---- */

static void socks_connected(const connect_result *r, void *data)
{
	in_conn *ic = data;
	ic->pending = NULL;
	if (!r->ok) {
		in_conn_log_end(ic, r->msg);
		if (socks_server_failed(&ic->core.socks, r->err, &ic->out) == 0 && in_conn_flush(ic))
			conn_close_after_write(ic->c);
		return;
	}
	addr_dest bound = {0};
	if (r->up) {
		struct sockaddr_storage ss;
		int len = sizeof ss;
		if (uv_tcp_getsockname(r->up, (struct sockaddr *)&ss, &len) == 0)
			if (addr_dest_from_sockaddr(&bound, (struct sockaddr *)&ss))
				bound = (addr_dest){0};
	}
	if (socks_server_opened(&ic->core.socks, &bound, &ic->out) || !in_conn_flush(ic)) {
		/* hand up over so it is closed with the conn */
		conn_relay(ic->c, r->up, r->st);
		conn_close(ic->c);
		return;
	}
	conn_relay(ic->c, r->up, r->st); /* up == NULL is the blackhole: conn_relay swallows */
}

/* A dial whose failure the client is told of by a close: true when it
 * succeeded; otherwise the end is logged and the connection closes. */
static bool dialled(in_conn *ic, const connect_result *r)
{
	ic->pending = NULL;
	if (r->ok)
		return true;
	in_conn_log_end(ic, r->msg);
	conn_close(ic->c);
	return false;
}

static size_t socks_data(in_conn *ic, const uint8_t *data, size_t len)
{
	proto_event ev;
	ssize_t n = socks_server_feed(&ic->core.socks, data, len, &ic->out, &ev);
	if (!in_conn_flush(ic))
		return 0;
	if (n < 0 || ev.kind == PROTO_EV_CLOSE) {
		in_conn_log_refused(ic, ev.reason);
		conn_close_after_write(ic->c);
		return 0;
	}
	if (ev.kind == PROTO_EV_OPEN) {
		if (ev.cmd == PROTO_CMD_UDP_ASSOCIATE) {
			socks_udp_start(ic, &ev);
		} else if (ic->in->spec->sniffing) {
			/* Answer first, as the client sends nothing before the
			 * reply; the flow's own failure then ends in a close. */
			if (socks_server_opened(&ic->core.socks, NULL, &ic->out) || !in_conn_flush(ic)) {
				conn_close(ic->c);
				return 0;
			}
			in_conn_sniff_then_open(ic, &ev.dest, ev.user, in_conn_relay_connected);
		} else {
			in_conn_open(ic, &ev.dest, ev.user, socks_connected);
		}
	}
	return (size_t)n;
}

/* ---- Trojan and VLESS ---- */

static void vless_connected(const connect_result *r, void *data)
{
	in_conn *ic = data;
	if (!dialled(ic, r))
		return;
	if (vless_server_opened(&ic->core.vless, &ic->out) || !in_conn_flush(ic)) {
		conn_relay(ic->c, r->up, r->st);
		conn_close(ic->c);
		return;
	}
	conn_relay(ic->c, r->up, r->st);
}

/* ---- Trojan and VLESS UDP: datagrams framed in the client's stream ---- */

/* Replies queued to the client beyond this are dropped (UDP). */
#define INBOUND_UDP_QUEUE_MAX (256 * 1024)

static void stream_udp_reply(const addr_dest *from, uint8_t *data, size_t len, void *ud)
{
	in_conn *ic = ud;
	if (conn_write_queue(ic->c) > INBOUND_UDP_QUEUE_MAX)
		return;
	uint8_t hdr[TROJAN_UDP_HEADER_MAX];
	ssize_t h = ic->kind == IN_TROJAN ? trojan_udp_encode(from, len, hdr, sizeof hdr)
	                                  : vless_udp_encode(len, hdr, sizeof hdr);
	if (h < 0 || (size_t)h > DGRAM_HEADROOM)
		return;
	/* the link leaves DGRAM_HEADROOM writable bytes before data */
	memcpy(data - h, hdr, (size_t)h);
	if (conn_write(ic->c, data - h, (size_t)h + len))
		conn_close(ic->c);
	conn_touch(ic->c);
}

static const dgram_handlers stream_udp_handlers = {.recv = stream_udp_reply};

/* Frames from the client: every Trojan packet names its destination; every
 * VLESS packet goes to the request's one target. */
static size_t stream_udp_data(in_conn *ic, const uint8_t *data, size_t len)
{
	size_t used = 0;
	while (used < len) {
		addr_dest to = ic->f.dest;
		size_t off, plen;
		ssize_t r;
		if (ic->kind == IN_TROJAN) {
			r = trojan_udp_decode(data + used, len - used, &to, &off, &plen);
		} else {
			r = vless_udp_decode(data + used, len - used, &plen);
			off = VLESS_UDP_HEADER_LEN;
		}
		if (r == 0)
			break;
		if (r < 0) {
			in_conn_log_end(ic, msgs[MSG_BAD_UDP_FRAME]);
			conn_close(ic->c);
			return 0;
		}
		to.network = ADDR_UDP;
		(void)ic->dlink->ops->send_to(ic->dlink, &to, data + used + off, plen);
		conn_touch(ic->c);
		used += (size_t)r;
	}
	return used;
}

/* The request was UDP: open the association's link (every datagram routed
 * on its own) and keep reading the client's frames. */
static void stream_udp_start(in_conn *ic, const proto_event *ev)
{
	addr_dest to = ev->dest;
	to.network = ADDR_UDP;
	in_conn_set_flow(ic, &to, ev->user);
	char why[200];
	ic->dlink = in_conn_open_datagram(ic, &stream_udp_handlers, ic, why, sizeof why);
	if (!ic->dlink) {
		in_conn_log_end(ic, why);
		conn_close(ic->c);
		return;
	}
	if (ic->kind == IN_VLESS) {
		if (vless_server_opened(&ic->core.vless, &ic->out) || !in_conn_flush(ic)) {
			conn_close(ic->c);
			return;
		}
	}
	conn_request_done(ic->c);
	conn_drive(ic->c);
}

/* Sends what is not Trojan to the fallback, or closes without one. */
static void trojan_reject(in_conn *ic, const char *why)
{
	in_conn_log_refused(ic, why);
	if (!trojan_server_wants_fallback(&ic->core.trojan) || !ic->in->has_fallback) {
		conn_close(ic->c);
		return;
	}
	in_conn_open_fallback(ic);
}

static size_t trojan_data(in_conn *ic, const uint8_t *data, size_t len)
{
	proto_event ev;
	ssize_t n = trojan_server_feed(&ic->core.trojan, data, len, &ic->out, &ev);
	if (n < 0 || ev.kind == PROTO_EV_CLOSE) {
		trojan_reject(ic, ev.reason);
		return 0;
	}
	if (ev.kind == PROTO_EV_OPEN) {
		if (ev.cmd == PROTO_CMD_UDP_ASSOCIATE)
			stream_udp_start(ic, &ev);
		else
			in_conn_open(ic, &ev.dest, ev.user, in_conn_relay_connected); /* Trojan has no reply */
	}
	return (size_t)n;
}

static size_t vless_data(in_conn *ic, const uint8_t *data, size_t len)
{
	proto_event ev;
	ssize_t n = vless_server_feed(&ic->core.vless, data, len, &ic->out, &ev);
	if (n < 0 || ev.kind == PROTO_EV_CLOSE) {
		in_conn_log_refused(ic, ev.reason);
		conn_close(ic->c);
		return 0;
	}
	if (ev.kind == PROTO_EV_OPEN) {
		if (ev.cmd == PROTO_CMD_UDP_ASSOCIATE)
			stream_udp_start(ic, &ev);
		else
			in_conn_open(ic, &ev.dest, ev.user, vless_connected);
	}
	return (size_t)n;
}

/* ---- the driver ---- */

static void on_open(conn *c, void *drv)
{
	in_conn *ic = drv;
	ic->c = c;
}

static size_t on_data(conn *c, void *drv, const uint8_t *data, size_t len)
{
	(void)c;
	in_conn *ic = drv;
	if (ic->sniffing)
		return in_conn_sniff_feed(ic, data, len);
	if (ic->kind == IN_UNDECIDED && ic->in->spec->protocol == ETM_PROTO_TROJAN) {
		ic->kind = IN_TROJAN;
		trojan_server_init(&ic->core.trojan, (const uint8_t(*)[56])ic->in->trojan_hashes,
		                   ic->in->spec->settings.users_len);
	} else if (ic->kind == IN_UNDECIDED && ic->in->spec->protocol == ETM_PROTO_VLESS) {
		ic->kind = IN_VLESS;
		vless_server_init(&ic->core.vless, (const uint8_t(*)[16])ic->in->vless_uuids,
		                  ic->in->spec->settings.users_len);
	}
	if (ic->dlink)
		return stream_udp_data(ic, data, len);
	if (ic->kind == IN_TROJAN)
		return trojan_data(ic, data, len);
	if (ic->kind == IN_VLESS)
		return vless_data(ic, data, len);
	if (ic->kind == IN_UNDECIDED) {
		etm_protocol p = ic->in->spec->protocol;
		bool socks = p == ETM_PROTO_SOCKS || (p == ETM_PROTO_MIXED && (data[0] == 4 || data[0] == 5));
		const etm_settings_spec *st = &ic->in->spec->settings;
		if (socks) {
			ic->kind = IN_SOCKS;
			socks_server_init(&ic->core.socks, st->users, st->users_len, true);
		} else {
			ic->kind = IN_HTTP;
			http_in_init(ic);
			if (!ic->core.http)
				return 0;
		}
	}
	if (ic->kind == IN_SOCKS)
		return socks_data(ic, data, len);
	return http_in_data(ic, data, len);
}

static void on_close(conn *c, void *drv)
{
	(void)c;
	in_conn *ic = drv;
	if (ic->pending)
		ic->pending->cancel(ic->pending);
	if (ic->udp)
		socks_udp_stop(ic);
	if (ic->dlink)
		ic->dlink->ops->close(ic->dlink);
	if (ic->kind == IN_HTTP)
		http_in_free(ic);
	free(ic);
}

static bool on_client_end(conn *c, void *drv)
{
	(void)c;
	in_conn *ic = drv;
	if (ic->sniffing) {
		/* A FIN ends the sniff with what came: the flow opens and the FIN
		 * follows its bytes. */
		in_conn_sniff_give_up(ic);
		return false;
	}
	return ic->kind == IN_HTTP && ic->core.http ? http_in_client_end(ic) : true;
}

/* A Trojan peer that stalls before a decision is a prober too: it goes to
 * the fallback, like any other bytes that are not Trojan. */
static bool on_handshake_timeout(conn *c, void *drv)
{
	(void)c;
	in_conn *ic = drv;
	proto_event ev;
	if (ic->kind != IN_TROJAN || ic->pending || !ic->in->has_fallback ||
	    trojan_server_timeout(&ic->core.trojan, &ev))
		return false;
	trojan_reject(ic, ev.reason);
	return true;
}

static void on_deadline(conn *c, void *drv)
{
	(void)c;
	in_conn *ic = drv;
	if (ic->sniffing)
		in_conn_sniff_give_up(ic); /* the client sent nothing sniffable in time */
}

static void on_written(conn *c, void *drv)
{
	(void)c;
	in_conn *ic = drv;
	if (ic->kind == IN_HTTP && ic->core.http)
		http_in_written(ic);
}

static const conn_driver driver = {
	.on_open = on_open,
	.on_data = on_data,
	.on_client_end = on_client_end,
	.on_written = on_written,
	.on_deadline = on_deadline,
	.on_handshake_timeout = on_handshake_timeout,
	.on_close = on_close,
};

void inbound_accept(listener *l, int fd, void *data)
{
	const inbound_rt *in = data;
	worker *w = listener_worker(l);
	in_conn *ic = calloc(1, sizeof *ic);
	if (!ic) {
		close(fd);
		return;
	}
	ic->in = in;
	stack *cst = NULL;
	if (in->tls || in->ws) {
		char err[200];
		layer *ly;
		cst = stack_new();
		if (!cst)
			goto fail;
		if (in->tls) {
			ly = tls_server_new(in->tls, err, sizeof err);
			if (!ly || stack_push(cst, ly))
				goto fail;
		}
		if (in->ws) {
			const char *path = in->spec->stream.ws.path ? in->spec->stream.ws.path : "/";
			ly = ws_server_new(path, err, sizeof err);
			if (!ly || stack_push(cst, ly))
				goto fail;
		}
	}
	if (!conn_accept(w, fd, &driver, ic, &in->limits, cst))
		free(ic);
	return;
fail:
	stack_free(cst);
	free(ic);
	close(fd);
}

/* ---- building an inbound ---- */

enum { BUILD_TLS, BUILD_FALLBACK, BUILD_NO_MEMORY, BUILD_PASSWORD, BUILD_UUID };
static const char *const build_msgs[] = {
	[BUILD_TLS] = "inbound %s: %s",
	[BUILD_FALLBACK] = "inbound %s: settings.fallback \"%s\" is not host:port",
	[BUILD_NO_MEMORY] = "inbound %s: out of memory",
	[BUILD_PASSWORD] = "inbound %s: cannot hash a password",
	[BUILD_UUID] = "inbound %s: a settings.users id is not a UUID",
};

int inbound_rt_build(inbound_rt *in, char *err, size_t err_size)
{
	const etm_inbound_spec *sp = in->spec;
	const etm_stream_spec *st = &sp->stream;
	if (st->network == ETM_NET_TLS || st->security == ETM_SEC_TLS) {
		const char *alpn[17] = {0};
		for (size_t i = 0; i < st->tls.alpn.len && i < 16; i++)
			alpn[i] = st->tls.alpn.items[i];
		char why[256];
		in->tls = tls_server_ctx_new(st->tls.certificate, st->tls.key,
		                             st->tls.alpn.len ? alpn : NULL, why, sizeof why);
		if (!in->tls) {
			snprintf(err, err_size, build_msgs[BUILD_TLS], sp->tag, why);
			return -1;
		}
	}
	in->ws = st->network == ETM_NET_WS;
	const etm_settings_spec *set = &sp->settings;
	size_t n = set->users_len ? set->users_len : 1;
	if (sp->protocol == ETM_PROTO_TROJAN) {
		in->trojan_hashes = calloc(n, sizeof *in->trojan_hashes);
		if (!in->trojan_hashes) {
			snprintf(err, err_size, build_msgs[BUILD_NO_MEMORY], sp->tag);
			return -1;
		}
		for (size_t i = 0; i < set->users_len; i++)
			if (trojan_password_hash(set->users[i].password, (char *)in->trojan_hashes[i])) {
				snprintf(err, err_size, build_msgs[BUILD_PASSWORD], sp->tag);
				return -1;
			}
		if (set->fallback) {
			if (addr_dest_parse(&in->fallback, set->fallback)) {
				snprintf(err, err_size, build_msgs[BUILD_FALLBACK], sp->tag, set->fallback);
				return -1;
			}
			in->has_fallback = true;
		}
	}
	if (sp->protocol == ETM_PROTO_VLESS) {
		in->vless_uuids = calloc(n, sizeof *in->vless_uuids);
		if (!in->vless_uuids) {
			snprintf(err, err_size, build_msgs[BUILD_NO_MEMORY], sp->tag);
			return -1;
		}
		for (size_t i = 0; i < set->users_len; i++)
			if (vless_uuid_parse(set->users[i].id, in->vless_uuids[i])) {
				snprintf(err, err_size, build_msgs[BUILD_UUID], sp->tag);
				return -1;
			}
	}
	return 0;
}

void inbound_rt_free(inbound_rt *in)
{
	tls_server_ctx_unref(in->tls);
	in->tls = NULL;
	free(in->trojan_hashes);
	in->trojan_hashes = NULL;
	free(in->vless_uuids);
	in->vless_uuids = NULL;
}
