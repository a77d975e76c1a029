/* socks_in.c - the SOCKS4, 4a and 5 inbound: the core answers every step, UDP ASSOCIATE opens a relay socket. */
#include "inbound/socks_in.h"

#include "inbound/socks_udp_in.h"
#include "proto/socks.h"

typedef struct socks_in {
	socks_server core;
	socks_udp_in *udp; /* the UDP association, owned; NULL: none */
} socks_in;

static int init(in_conn *ic)
{
	socks_in *s = ic->state;
	socks_server_init(&s->core, ic->in->logins, ic->in->n_logins, true);
	return 0;
}

static ssize_t feed(in_conn *ic, const uint8_t *in, size_t len, proto_event *ev)
{
	socks_in *s = ic->state;
	return socks_server_feed(&s->core, in, len, &ic->out, ev);
}

/* The core wrote its refusal: close once it is sent. */
static void refused(in_conn *ic, const char *why)
{
	in_conn_log_refused(ic, why);
	conn_close_after_write(ic->c);
}

/* The client sends nothing before the reply, so a flow is always answered
 * first when the inbound sniffs; its own failure then ends in a close. */
static bool sniffs(in_conn *ic)
{
	(void)ic;
	return true;
}

/* The reply names the address the upstream connection was bound to. */
static int opened(in_conn *ic, const connect_result *r)
{
	socks_in *s = ic->state;
	addr_dest bound = {0};
	if (r && r->ep) {
		struct sockaddr_storage ss;
		if (endpoint_sockname(r->ep, &ss) == 0)
			if (addr_dest_from_sockaddr(&bound, (struct sockaddr *)&ss))
				bound = (addr_dest){0};
	}
	return socks_server_opened(&s->core, &bound, &ic->out);
}

static int failed(in_conn *ic, proto_dial_error e, const char *why)
{
	(void)why; /* a SOCKS reply carries a code only */
	socks_in *s = ic->state;
	return socks_server_failed(&s->core, e, &ic->out);
}

/* UDP ASSOCIATE: the reply names the relay; the control connection is then
 * held open, and the association ends when it closes. */
static void udp_open(in_conn *ic, const proto_event *ev)
{
	socks_in *s = ic->state;
	char why[SOCKS_UDP_IN_WHY_MAX];
	addr_dest bound;
	s->udp = socks_udp_in_start(ic, ev, &bound, why, sizeof why);
	if (!s->udp) {
		in_conn_log_end(ic, why);
		if (failed(ic, PROTO_DIAL_GENERAL, why) == 0 && in_conn_flush(ic))
			conn_close_after_write(ic->c);
		return;
	}
	if (socks_server_opened(&s->core, &bound, &ic->out) || !in_conn_flush(ic)) {
		conn_close(ic->c);
		return;
	}
	conn_hold(ic->c);
}

static void free_state(in_conn *ic)
{
	socks_in *s = ic->state;
	if (s->udp)
		socks_udp_in_stop(s->udp);
	s->udp = NULL;
}

const inbound_proto_ops socks_in_ops = {
	.size = sizeof(socks_in),
	.init = init,
	.feed = feed,
	.refused = refused,
	.sniffs = sniffs,
	.udp_open = udp_open,
	.opened = opened,
	.failed = failed,
	.free = free_state,
};
