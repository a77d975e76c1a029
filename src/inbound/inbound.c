/* inbound.c - per-connection driver: picks the protocol core, opens the flow, answers, relays. */
#include "inbound/inbound.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "inbound/in_conn.h"
#include "inbound/socks_udp.h"

static const char *const msgs[] = {
	[0] = "%s connection from %s to %s ended: %s",
	[1] = "%s connection from %s refused: %s",
	[2] = "%s connection from %s: malformed handshake",
};

void in_conn_peer_text(const in_conn *ic, char *out, size_t size)
{
	addr_dest p = {0};
	if (addr_dest_from_sockaddr(&p, (const struct sockaddr *)conn_peer(ic->c)) == 0)
		addr_dest_format(&p, out, size);
	else
		snprintf(out, size, "?");
}

void in_conn_log_end(const in_conn *ic, const char *why)
{
	if (log_get_level() < ETM_LOG_DEBUG)
		return;
	char peer[ADDR_TEXT_MAX], dest[ADDR_TEXT_MAX];
	in_conn_peer_text(ic, peer, sizeof peer);
	addr_dest_format(&ic->f.dest, dest, sizeof dest);
	log_debug("inbound", msgs[0], ic->in->spec->tag, peer, dest, why);
}

static void log_refused(const in_conn *ic, const char *why)
{
	if (log_get_level() < ETM_LOG_DEBUG)
		return;
	char peer[ADDR_TEXT_MAX];
	in_conn_peer_text(ic, peer, sizeof peer);
	log_debug("inbound", msgs[1], ic->in->spec->tag, peer, why ? why : "?");
}

/* Sends what the core wrote; false when the connection is gone. */
bool in_conn_flush(in_conn *ic)
{
	if (ic->out.len == 0)
		return true;
	int rc = conn_write(ic->c, ic->out.buf, ic->out.len);
	ic->out.len = 0;
	if (rc) {
		conn_close(ic->c);
		return false;
	}
	return true;
}

/* ---- SOCKS ---- */

static void socks_connected(uv_tcp_t *up, bool blackhole, bool ok, proto_dial_error err,
                            const char *msg, void *data)
{
	in_conn *ic = data;
	ic->pending = NULL;
	if (!ok) {
		in_conn_log_end(ic, msg);
		if (socks_server_failed(&ic->core.socks, err, &ic->out) == 0 && in_conn_flush(ic))
			conn_close_after_write(ic->c);
		return;
	}
	addr_dest bound = {0};
	if (up) {
		struct sockaddr_storage ss;
		int len = sizeof ss;
		if (uv_tcp_getsockname(up, (struct sockaddr *)&ss, &len) == 0)
			if (addr_dest_from_sockaddr(&bound, (struct sockaddr *)&ss))
				bound = (addr_dest){0};
	}
	if (socks_server_opened(&ic->core.socks, &bound, &ic->out) || !in_conn_flush(ic)) {
		if (up)
			conn_relay(ic->c, up); /* hands up over so it is closed with the conn */
		conn_close(ic->c);
		return;
	}
	(void)blackhole; /* up == NULL is the blackhole: conn_relay swallows */
	conn_relay(ic->c, up);
}

void in_conn_open(in_conn *ic, const addr_dest *dest, int user, connect_cb cb)
{
	ic->f = (flow){.dest = *dest, .user = user};
	ic->ctx = (flow_ctx){.inbound_tag = ic->in->spec->tag, .peer = *conn_peer(ic->c)};
	conn_pause(ic->c);
	const connector *cn = ic->in->connect;
	ic->pending = cn->connect(cn->self, conn_worker(ic->c), &ic->f, &ic->ctx, cb, ic);
}

static size_t socks_data(in_conn *ic, const uint8_t *data, size_t len)
{
	proto_event ev;
	ssize_t n = socks_server_feed(&ic->core.socks, data, len, &ic->out, &ev);
	if (!in_conn_flush(ic))
		return 0;
	if (n < 0 || ev.kind == PROTO_EV_CLOSE) {
		log_refused(ic, ev.reason);
		conn_close_after_write(ic->c);
		return 0;
	}
	if (ev.kind == PROTO_EV_OPEN) {
		if (ev.cmd == PROTO_CMD_UDP_ASSOCIATE)
			socks_udp_start(ic, &ev);
		else
			in_conn_open(ic, &ev.dest, ev.user, socks_connected);
	}
	return (size_t)n;
}

/* ---- the driver ---- */

static size_t on_data(conn *c, void *drv, const uint8_t *data, size_t len)
{
	in_conn *ic = drv;
	ic->c = c;
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
	if (ic->kind == IN_HTTP)
		http_in_free(ic);
	free(ic);
}

static bool on_client_end(conn *c, void *drv)
{
	(void)c;
	in_conn *ic = drv;
	return ic->kind == IN_HTTP && ic->core.http ? http_in_client_end(ic) : true;
}

static void on_written(conn *c, void *drv)
{
	(void)c;
	in_conn *ic = drv;
	if (ic->kind == IN_HTTP && ic->core.http)
		http_in_written(ic);
}

static const conn_driver driver = {
	.on_data = on_data,
	.on_client_end = on_client_end,
	.on_written = on_written,
	.on_close = on_close,
};

void inbound_accept(listener *l, uv_stream_t *server, void *data)
{
	(void)l;
	const inbound_rt *in = data;
	in_conn *ic = calloc(1, sizeof *ic);
	if (!ic)
		return;
	ic->in = in;
	/* a worker is reached through its loop's data: set by the supervisor */
	worker *w = server->loop->data;
	if (!conn_accept(w, server, &driver, ic, &in->limits))
		free(ic);
}
