/* stream_udp_in.c - Trojan and VLESS UDP: the client's frames go out on a datagram link, replies come back framed. */
#include "inbound/stream_udp_in.h"

#include <string.h>

enum { MSG_BAD_FRAME };
static const char *const msgs[] = {
	[MSG_BAD_FRAME] = "a malformed UDP frame",
};

/* Replies queued to the client beyond this are dropped (UDP). */
#define INBOUND_UDP_QUEUE_MAX (256 * 1024)

/* Room for the reason a datagram link could not open. */
#define STREAM_UDP_WHY_MAX 200

static void reply(const addr_dest *from, uint8_t *data, size_t len, void *ud)
{
	stream_udp_in *u = ud;
	conn *c = u->ic->c;
	if (conn_write_queue(c) > INBOUND_UDP_QUEUE_MAX)
		return;
	uint8_t hdr[DGRAM_HEADROOM];
	ssize_t h = u->codec->encode(from, len, hdr, sizeof hdr);
	if (h < 0 || (size_t)h > DGRAM_HEADROOM)
		return;
	/* the link leaves DGRAM_HEADROOM writable bytes before data */
	memcpy(data - h, hdr, (size_t)h);
	if (conn_write(c, data - h, (size_t)h + len))
		conn_close(c);
	conn_touch(c);
}

static const dgram_handlers handlers = {.recv = reply};

int stream_udp_in_start(stream_udp_in *u, in_conn *ic, const proto_event *ev,
                        const stream_udp_codec *codec)
{
	*u = (stream_udp_in){.ic = ic, .codec = codec};
	addr_dest to = ev->dest;
	to.network = ADDR_UDP;
	in_conn_set_flow(ic, &to, ev->user);
	char why[STREAM_UDP_WHY_MAX];
	u->link = in_conn_open_datagram(ic, &handlers, u, why, sizeof why);
	if (!u->link) {
		in_conn_log_end(ic, why);
		conn_close(ic->c);
		return -1;
	}
	conn_request_done(ic->c);
	conn_drive(ic->c);
	return 0;
}

/* Every Trojan frame names its destination; every VLESS frame goes to the
 * request's one target, ic->f.dest. */
ssize_t stream_udp_in_feed(stream_udp_in *u, const uint8_t *in, size_t len, proto_event *ev)
{
	in_conn *ic = u->ic;
	*ev = (proto_event){.kind = PROTO_EV_NONE};
	size_t used = 0;
	while (used < len) {
		addr_dest to = ic->f.dest;
		size_t off = 0, plen = 0;
		ssize_t r = u->codec->decode(in + used, len - used, &to, &off, &plen);
		if (r == 0)
			break;
		if (r < 0) {
			in_conn_log_end(ic, msgs[MSG_BAD_FRAME]);
			conn_close(ic->c);
			return INBOUND_FEED_GONE;
		}
		to.network = ADDR_UDP;
		(void)u->link->ops->send_to(u->link, &to, in + used + off, plen);
		conn_touch(ic->c);
		used += (size_t)r;
	}
	return (ssize_t)used;
}

void stream_udp_in_stop(stream_udp_in *u)
{
	if (u->link)
		u->link->ops->close(u->link);
	u->link = NULL;
}
