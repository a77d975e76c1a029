/* in_conn.c - what every inbound protocol does with its client connection: answer, open the flow, sniff, drain a refusal, log. */
#include "inbound/in_conn.h"

#include <string.h>

#include "crypto/ossl.h"

#include "base/log.h"
#include "proto/sniff.h"

enum { MSG_ENDED, MSG_REFUSED, MSG_UNKNOWN };
static const char *const msgs[] = {
	[MSG_ENDED] = "%s connection from %s to %s ended: %s",
	[MSG_REFUSED] = "%s connection from %s refused: %s",
	[MSG_UNKNOWN] = "?",
};

/* ---- logs ---- */

static void peer_text(const in_conn *ic, char *out, size_t size)
{
	addr_dest p = {0};
	if (addr_dest_from_sockaddr(&p, (const struct sockaddr *)conn_peer(ic->c)) == 0)
		addr_dest_format(&p, out, size);
	else
		snprintf(out, size, "%s", msgs[MSG_UNKNOWN]);
}

void in_conn_log_end(const in_conn *ic, const char *why)
{
	if (log_get_level() < LOG_LEVEL_DEBUG)
		return;
	char peer[ADDR_TEXT_MAX], dest[ADDR_TEXT_MAX];
	peer_text(ic, peer, sizeof peer);
	addr_dest_format(&ic->f.dest, dest, sizeof dest);
	log_debug("inbound", msgs[MSG_ENDED], ic->in->tag, peer, dest, why);
}

void in_conn_log_refused(const in_conn *ic, const char *why)
{
	if (log_get_level() < LOG_LEVEL_DEBUG)
		return;
	char peer[ADDR_TEXT_MAX];
	peer_text(ic, peer, sizeof peer);
	log_debug("inbound", msgs[MSG_REFUSED], ic->in->tag, peer,
	          why ? why : msgs[MSG_UNKNOWN]);
}

/* ---- the client ---- */

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

/* ms from now to the close time: uniform over the drain's range, from the
 * shell's random source (a zero draw when it fails: still in the range). */
static uint64_t close_time(void)
{
	uint16_t r = 0;
	if (RAND_bytes((uint8_t *)&r, sizeof r) != 1)
		r = 0;
	return INBOUND_DRAIN_MIN_MS + r % (INBOUND_DRAIN_SPAN_MS + 1);
}

void in_conn_close_time_start(in_conn *ic)
{
	ic->draining = true;
	conn_set_deadline(ic->c, close_time());
	conn_request_done(ic->c); /* the close time bounds the handshake now */
}

void in_conn_close_time_stop(in_conn *ic)
{
	if (!ic->draining)
		return;
	ic->draining = false;
	conn_set_deadline(ic->c, 0);
}

void in_conn_drain(in_conn *ic, const char *why)
{
	in_conn_log_refused(ic, why);
	if (!ic->draining) {
		ic->draining = true;
		conn_set_deadline(ic->c, close_time());
	}
	conn_hold(ic->c);
}

/* ---- opening the flow ---- */

void in_conn_set_flow(in_conn *ic, const addr_dest *dest, int user)
{
	addr_dest sniffed = ic->f.sniffed;
	ic->f = (flow){.dest = *dest, .user = user, .sniffed = sniffed};
	if (!ic->session)
		ic->session = session_new(); /* NULL without memory: admitted on the user alone */
	ic->ctx = (flow_ctx){.inbound_tag = ic->in->tag, .peer = *conn_peer(ic->c),
	                     .sniffing = ic->in->sniffing, .user_names = ic->in->user_names,
	                     .n_users = ic->in->n_user_names, .principals = ic->in->principals,
	                     .session = ic->session};
}

void in_conn_open(in_conn *ic, const addr_dest *dest, int user, connect_cb cb)
{
	in_conn_set_flow(ic, dest, user);
	conn_pause(ic->c);
	conn_request_done(ic->c);
	const connector *cn = ic->in->connect;
	ic->pending = cn->connect(cn->self, conn_worker(ic->c), &ic->f, &ic->ctx, cb, ic);
}

dgram_link *in_conn_open_datagram(in_conn *ic, const dgram_handlers *h, void *ud, char *why,
                                  size_t why_size)
{
	const connector *cn = ic->in->connect;
	return cn->connect_datagram(cn->self, conn_worker(ic->c), &ic->f, &ic->ctx, h, ud, why,
	                            why_size);
}

void in_conn_open_fallback(in_conn *ic)
{
	/* the fallback is dialled directly, whatever the routes say; the bytes
	 * are all still unconsumed in the handshake buffer, so the relay sends
	 * them first, untouched */
	in_conn_set_flow(ic, &ic->in->fallback, -1);
	conn_pause(ic->c);
	conn_request_done(ic->c);
	const connector *cn = ic->in->connect;
	ic->pending = cn->connect_direct(cn->self, conn_worker(ic->c), &ic->f.dest,
	                                 in_conn_relay_connected, ic);
}

void in_conn_relay_connected(const connect_result *r, void *data)
{
	in_conn *ic = data;
	ic->pending = NULL;
	if (!r->ok) {
		in_conn_log_end(ic, r->msg);
		conn_close(ic->c);
		return;
	}
	conn_relay(ic->c, r->ep); /* NULL: the blackhole */
}

int in_conn_start_upstream(endpoint *ep, layer *l)
{
	stack *st = stack_new();
	if (!st) {
		l->ops->free(l);
		return -1;
	}
	if (stack_push(st, l)) { /* l is freed; a new stack is never full */
		stack_free(st);
		return -1;
	}
	return endpoint_start(ep, st); /* takes st over, started or not */
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

size_t in_conn_sniff_feed(in_conn *ic, const uint8_t *data, size_t len)
{
	char name[ADDR_DOMAIN_MAX + 1];
	sniff_proto proto;
	sniff_result r = sniff_name(data, len, name, sizeof name, &proto);
	if (r == SNIFF_NEED_MORE && len < SNIFF_MAX_BYTES && len < CONN_HANDSHAKE_MAX)
		return 0;
	finish_sniff(ic, r == SNIFF_FOUND ? name : NULL);
	return 0;
}

void in_conn_sniff_give_up(in_conn *ic) { finish_sniff(ic, NULL); }
