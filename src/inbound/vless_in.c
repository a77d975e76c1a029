/* vless_in.c - the VLESS inbound: account UUIDs, a response header once the flow is open, UDP framed in the stream. */
#include "inbound/vless_in.h"

#include "inbound/stream_udp_in.h"
#include "proto/vless.h"

enum { MSG_UUID };
static const char *const msgs[] = {
	[MSG_UUID] = "a settings.users id is not a UUID",
};

typedef struct vless_in {
	vless_server core;
	stream_udp_in udp; /* after a UDP request */
} vless_in;

/* An account is the user's UUID, 16 bytes. */
static const char *account(const inbound_user *u, uint8_t *out)
{
	return vless_uuid_parse(u->id, out) ? msgs[MSG_UUID] : NULL;
}

static int init(in_conn *ic)
{
	vless_in *v = ic->state;
	vless_server_init(&v->core, (const uint8_t(*)[VLESS_UUID_LEN])ic->in->accounts,
	                  ic->in->n_accounts);
	return 0;
}

static ssize_t feed(in_conn *ic, const uint8_t *in, size_t len, proto_event *ev)
{
	vless_in *v = ic->state;
	if (v->udp.link)
		return stream_udp_in_feed(&v->udp, in, len, ev);
	return vless_server_feed(&v->core, in, len, &ic->out, ev);
}

static int opened(in_conn *ic, const connect_result *r)
{
	(void)r;
	vless_in *v = ic->state;
	return vless_server_opened(&v->core, &ic->out);
}

static ssize_t udp_decode(const uint8_t *in, size_t len, addr_dest *to, size_t *off, size_t *plen)
{
	(void)to; /* every frame goes to the request's one target */
	*off = VLESS_UDP_HEADER_LEN;
	return vless_udp_decode(in, len, plen);
}

static ssize_t udp_encode(const addr_dest *from, size_t len, uint8_t *hdr, size_t cap)
{
	(void)from;
	return vless_udp_encode(len, hdr, cap);
}

static const stream_udp_codec codec = {.decode = udp_decode, .encode = udp_encode};

/* The response header follows once the link is open. */
static void udp_open(in_conn *ic, const proto_event *ev)
{
	vless_in *v = ic->state;
	if (stream_udp_in_start(&v->udp, ic, ev, &codec))
		return;
	if (opened(ic, NULL) || !in_conn_flush(ic))
		conn_close(ic->c);
}

static void free_state(in_conn *ic)
{
	vless_in *v = ic->state;
	stream_udp_in_stop(&v->udp);
}

/* The response header (version, no addons) needs nothing from the dial:
 * it is written first, and the flow waits for a sniff of its first bytes. */
static bool sniffs(in_conn *ic)
{
	(void)ic;
	return true;
}

const inbound_proto_ops vless_in_ops = {
	.size = sizeof(vless_in),
	.account_size = VLESS_UUID_LEN,
	.account = account,
	.init = init,
	.feed = feed,
	.udp_open = udp_open,
	.sniffs = sniffs,
	.opened = opened,
	.free = free_state,
};
