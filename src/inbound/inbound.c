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

void in_conn_open(in_conn *ic, const addr_dest *dest, int user, connect_cb cb)
{
	addr_dest sniffed = ic->f.sniffed;
	ic->f = (flow){.dest = *dest, .user = user, .sniffed = sniffed};
	ic->ctx = (flow_ctx){.inbound_tag = ic->in->spec->tag, .peer = *conn_peer(ic->c)};
	conn_pause(ic->c);
	conn_request_done(ic->c);
	const connector *cn = ic->in->connect;
	ic->pending = cn->connect(cn->self, conn_worker(ic->c), &ic->f, &ic->ctx, cb, ic);
}

/* ---- sniffing ---- */

static void finish_sniff(in_conn *ic, const char *name)
{
	ic->sniffing = false;
	conn_set_deadline(ic->c, 0);
	if (name && addr_dest_set_domain(&ic->f.sniffed, name, strlen(name), ic->sniff_dest.port))
		ic->f.sniffed = (addr_dest){0};
	in_conn_open(ic, &ic->sniff_dest, ic->sniff_user, ic->sniff_cb);
}

void in_conn_sniff_then_open(in_conn *ic, const addr_dest *dest, int user, connect_cb cb)
{
	ic->sniffing = true;
	ic->sniff_dest = *dest;
	ic->sniff_user = user;
	ic->sniff_cb = cb;
	conn_set_deadline(ic->c, INBOUND_SNIFF_WAIT_MS);
}

/* The first bytes so far: wait for more, or decide. Consumes nothing. */
static size_t sniff_step(in_conn *ic, const uint8_t *data, size_t len)
{
	char name[ADDR_DOMAIN_MAX + 1];
	sniff_proto proto;
	sniff_result r = sniff_name(data, len, name, sizeof name, &proto);
	if (r == SNIFF_NEED_MORE && len < SNIFF_MAX_BYTES && len < CONN_HANDSHAKE_MAX)
		return 0;
	finish_sniff(ic, r == SNIFF_FOUND ? name : NULL);
	return 0;
}

/* After the client was answered: relay, or close when the dial failed. */
static void sniffed_connected(const connect_result *r, void *data)
{
	in_conn *ic = data;
	ic->pending = NULL;
	if (!r->ok) {
		in_conn_log_end(ic, r->msg);
		conn_close(ic->c);
		return;
	}
	conn_relay(ic->c, r->up, r->st); /* up == NULL: the blackhole */
}

const connect_cb in_conn_sniffed_connected = sniffed_connected;

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
		if (ev.cmd == PROTO_CMD_UDP_ASSOCIATE) {
			socks_udp_start(ic, &ev);
		} else if (ic->in->spec->sniffing) {
			/* Answer first, as the client sends nothing before the
			 * reply; the flow's own failure then ends in a close. */
			if (socks_server_opened(&ic->core.socks, NULL, &ic->out) || !in_conn_flush(ic)) {
				conn_close(ic->c);
				return 0;
			}
			in_conn_sniff_then_open(ic, &ev.dest, ev.user, sniffed_connected);
		} else {
			in_conn_open(ic, &ev.dest, ev.user, socks_connected);
		}
	}
	return (size_t)n;
}

/* ---- the driver ---- */

static size_t on_data(conn *c, void *drv, const uint8_t *data, size_t len)
{
	in_conn *ic = drv;
	ic->c = c;
	if (ic->sniffing)
		return sniff_step(ic, data, len);
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
	if (ic->sniffing) {
		/* A FIN ends the sniff with what came: the flow opens and the FIN
		 * follows its bytes. */
		finish_sniff(ic, NULL);
		return false;
	}
	return ic->kind == IN_HTTP && ic->core.http ? http_in_client_end(ic) : true;
}

static void on_deadline(conn *c, void *drv)
{
	(void)c;
	in_conn *ic = drv;
	if (ic->sniffing)
		finish_sniff(ic, NULL); /* the client sent nothing sniffable in time */
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
	.on_deadline = on_deadline,
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
	if (!conn_accept(w, server, &driver, ic, &in->limits, NULL))
		free(ic);
}
