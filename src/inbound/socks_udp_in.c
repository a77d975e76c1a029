/* socks_udp_in.c - SOCKS5 UDP ASSOCIATE (RFC 1928 section 7) over a datagram link. */
#include "inbound/socks_udp_in.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "proto/socks.h"
#include "runtime/guard.h"
#include "runtime/udp_batch.h"

enum { MSG_BIND, MSG_LINK, MSG_NOT_CLIENT, MSG_MALFORMED, MSG_NO_MEMORY, MSG_OVER };
static const char *const msgs[] = {
	[MSG_BIND] = "socks udp: cannot bind the relay: %s",
	[MSG_LINK] = "socks udp: cannot open the datagram link: %s",
	[MSG_NOT_CLIENT] = "socks udp: dropped a datagram from %s (not the client)",
	[MSG_MALFORMED] = "socks udp: dropped a malformed or fragmented datagram",
	[MSG_NO_MEMORY] = "out of memory",
	[MSG_OVER] = "socks udp: the client's source is at its bound (max_connections_per_source)",
};

/* What an association counts against its client's source (guard.h) beyond
 * its control connection: the descriptors its link holds (freedom's IPv4
 * and IPv6 sockets); the relay socket is the control connection's second
 * descriptor, as a plain flow's upstream is. */
#define ASSOC_HOLDS 2

/* Room for the reason a datagram link could not open. */
#define LINK_WHY_MAX 200

/* Datagrams one wake-up may take from the client with recvmmsg(2) (libuv's
 * UV_UDP_RECVMMSG: a chunk of 64 KiB each). The kernel writes only what
 * arrives, so small datagrams keep a page a chunk resident. */
#define RELAY_MMSG 8
#define RELAY_CHUNK (64 * 1024)

struct socks_udp_in {
	in_conn *ic;
	uv_udp_t relay;
	udp_batch to_client; /* the answers of one loop iteration, sent together */
	int open_handles;    /* relay and to_client's: u is freed when both closed */
	dgram_link *link;
	struct sockaddr_storage client; /* the client's endpoint, once its first datagram came */
	bool client_known;
	uint8_t *buf; /* RELAY_MMSG chunks for datagrams from the client */
	worker *w;
	struct sockaddr_storage peer; /* the control connection's, where ASSOC_HOLDS count */
	bool held;
};

static void on_relay_closed(uv_handle_t *h)
{
	socks_udp_in *u = h->data;
	if (--u->open_handles)
		return;
	free(u->buf);
	free(u);
}

void socks_udp_in_stop(socks_udp_in *u)
{
	if (u->held)
		guard_source_unhold(worker_guard(u->w), (struct sockaddr *)&u->peer, ASSOC_HOLDS);
	u->held = false;
	if (u->link)
		u->link->ops->close(u->link);
	u->link = NULL;
	udp_batch_close(&u->to_client, on_relay_closed); /* what waits goes first */
	uv_close((uv_handle_t *)&u->relay, on_relay_closed);
}

/* A reply from `from` on the link: prepend the header in the headroom. */
static void on_link_recv(const addr_dest *from, uint8_t *data, size_t len, void *ud)
{
	socks_udp_in *u = ud;
	if (!u->client_known)
		return;
	uint8_t hdr[SOCKS_UDP_HEADER_MAX];
	ssize_t h = socks_udp_encode(from, hdr, sizeof hdr);
	if (h < 0 || (size_t)h > DGRAM_HEADROOM)
		return;
	uint8_t *start = data - h;
	memcpy(start, hdr, (size_t)h);
	(void)udp_batch_send(&u->to_client, start, len + (size_t)h,
	                     (const struct sockaddr *)&u->client);
	conn_touch(u->ic->c);
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	(void)suggested;
	socks_udp_in *u = h->data;
	buf->base = (char *)u->buf;
	buf->len = RELAY_MMSG * RELAY_CHUNK;
}

static void on_client_datagram(uv_udp_t *h, ssize_t n, const uv_buf_t *buf,
                               const struct sockaddr *from, unsigned flags)
{
	socks_udp_in *u = h->data;
	if (n <= 0 || !from || (flags & UV_UDP_PARTIAL) || !u->link)
		return;
	/* Only the control connection's IP may use the relay; after its first
	 * datagram, only that source port too. */
	const struct sockaddr *peer = (const struct sockaddr *)conn_peer(u->ic->c);
	bool ok = u->client_known ? addr_same_endpoint(from, (const struct sockaddr *)&u->client)
	                          : addr_same_ip(from, peer);
	if (!ok) {
		if (log_get_level() >= LOG_LEVEL_DEBUG) {
			addr_dest d = {0};
			char text[ADDR_TEXT_MAX] = "?";
			if (addr_dest_from_sockaddr(&d, from) == 0)
				addr_dest_format(&d, text, sizeof text);
			log_debug("inbound", msgs[MSG_NOT_CLIENT], text);
		}
		return;
	}
	addr_dest dest = {.network = ADDR_UDP};
	ssize_t hl = socks_udp_decode((const uint8_t *)buf->base, (size_t)n, &dest);
	if (hl < 0) {
		log_debug("inbound", "%s", msgs[MSG_MALFORMED]);
		return;
	}
	if (!u->client_known) {
		memcpy(&u->client, from,
		       from->sa_family == AF_INET ? sizeof(struct sockaddr_in)
		                                  : sizeof(struct sockaddr_in6));
		u->client_known = true;
	}
	conn_touch(u->ic->c);
	(void)u->link->ops->send_to(u->link, &dest, (const uint8_t *)buf->base + hl,
	                            (size_t)n - (size_t)hl);
}

socks_udp_in *socks_udp_in_start(in_conn *ic, const proto_event *ev, addr_dest *bound,
                                 char *why, size_t why_size)
{
	addr_dest to = ev->dest;
	to.network = ADDR_UDP;
	in_conn_set_flow(ic, &to, ev->user);

	socks_udp_in *u = calloc(1, sizeof *u);
	uint8_t *buf = malloc(RELAY_MMSG * RELAY_CHUNK);
	if (!u || !buf) {
		free(u);
		free(buf);
		snprintf(why, why_size, "%s", msgs[MSG_NO_MEMORY]);
		return NULL;
	}
	u->ic = ic;
	u->buf = buf;
	u->w = conn_worker(ic->c);
	u->peer = *conn_peer(ic->c);
	if (!guard_source_hold(worker_guard(u->w), (struct sockaddr *)&u->peer, ASSOC_HOLDS)) {
		free(u);
		free(buf);
		snprintf(why, why_size, "%s", msgs[MSG_OVER]);
		return NULL;
	}
	u->held = true;
	/* one recvmmsg(2) takes up to RELAY_MMSG datagrams; each comes to
	 * on_client_datagram on its own (UV_UDP_MMSG_CHUNK) */
	uv_udp_init_ex(worker_loop(conn_worker(ic->c)), &u->relay, AF_UNSPEC | UV_UDP_RECVMMSG);
	u->relay.data = u;
	udp_batch_init(&u->to_client, &u->relay);
	u->open_handles = 2;

	/* The relay binds the address the client reached, port 0: the control
	 * connection's family (an IPv4 client gets an IPv4 relay). */
	struct sockaddr_storage local = *conn_local(ic->c);
	if (local.ss_family == AF_INET)
		((struct sockaddr_in *)&local)->sin_port = 0;
	else
		((struct sockaddr_in6 *)&local)->sin6_port = 0;
	int rc = uv_udp_bind(&u->relay, (struct sockaddr *)&local, 0);
	if (rc) {
		snprintf(why, why_size, msgs[MSG_BIND], uv_strerror(rc));
		socks_udp_in_stop(u);
		return NULL;
	}
	char err[LINK_WHY_MAX];
	static const dgram_handlers handlers = {.recv = on_link_recv};
	u->link = in_conn_open_datagram(ic, &handlers, u, err, sizeof err);
	if (!u->link) {
		snprintf(why, why_size, msgs[MSG_LINK], err);
		socks_udp_in_stop(u);
		return NULL;
	}
	struct sockaddr_storage ss;
	int len = sizeof ss;
	*bound = (addr_dest){0};
	if (uv_udp_getsockname(&u->relay, (struct sockaddr *)&ss, &len) == 0)
		if (addr_dest_from_sockaddr(bound, (struct sockaddr *)&ss))
			*bound = (addr_dest){0};
	uv_udp_recv_start(&u->relay, alloc_cb, on_client_datagram);
	return u;
}
