/* stream_udp.c - datagrams framed into a proxy stream, and the SOCKS5 UDP association. */
#include "outbound/stream_udp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "proto/socks.h"
#include "proto/socks_client.h"
#include "proto/trojan.h"
#include "proto/vless.h"

enum {
	MSG_STREAM_ENDED,
	MSG_MALFORMED,
	MSG_CONTROL_CLOSED,
	MSG_RELAY_DOMAIN,
	MSG_RELAY_BIND,
	MSG_NO_MEMORY,
	MSG_COUNT_,
};
static const char *const msgs[MSG_COUNT_] = {
	[MSG_STREAM_ENDED] = "%s: the stream ended",
	[MSG_MALFORMED] = "%s: a malformed UDP frame",
	[MSG_CONTROL_CLOSED] = "socks: the control connection closed",
	[MSG_RELAY_DOMAIN] = "socks: the relay address is a domain",
	[MSG_RELAY_BIND] = "socks: cannot bind a UDP socket for the relay: %s",
	[MSG_NO_MEMORY] = "out of memory",
};

/* ---- framed datagrams: Trojan, VLESS and VMess (VLESS framing above its layer) ---- */

typedef struct sudp {
	dgram_link base;
	endpoint *ep; /* owned; NULL once closed */
	stream_udp_framing framing;
	addr_dest target;
	const dgram_handlers *h;
	void *ud;
	bool ended;  /* the stream ended: the owner was told */
	bool closed; /* the owner closed the link */
	unsigned busy; /* inside a call to the owner: the free waits */
	uint8_t out[DGRAM_HEADROOM + TROJAN_UDP_FRAME_MAX]; /* one datagram being delivered or sent */
} sudp;

static const char *kind_name(const sudp *u)
{
	return u->framing == STREAM_UDP_VLESS   ? "vless"
	       : u->framing == STREAM_UDP_VMESS ? "vmess"
	                                        : "trojan";
}

/* The link is freed once it is closed and no call to its owner is under way
 * (the owner may close it from inside one). */
static void sudp_release(sudp *u)
{
	if (u->closed && u->busy == 0)
		free(u);
}

/* The stream ended (why NULL: in order); the owner hears it once. */
static void sudp_end(sudp *u, const char *why)
{
	if (u->ended || u->closed)
		return;
	u->ended = true;
	endpoint_want_read(u->ep, false);
	char text[96];
	if (!why) {
		snprintf(text, sizeof text, msgs[MSG_STREAM_ENDED], kind_name(u));
		why = text;
	}
	if (u->h->end)
		u->h->end(u->ud, why);
}

/* Delivers every whole frame waiting; true while the link is open. */
static bool sudp_deliver(sudp *u)
{
	const uint8_t *d;
	size_t n;
	while (!u->ended && !u->closed && (n = endpoint_app_in(u->ep, &d)) > 0) {
		addr_dest from = u->target;
		size_t off, plen;
		ssize_t r;
		if (u->framing == STREAM_UDP_TROJAN) {
			r = trojan_udp_decode(d, n, &from, &off, &plen);
		} else {
			r = vless_udp_decode(d, n, &plen); /* VLESS and VMess */
			off = VLESS_UDP_HEADER_LEN;
		}
		if (r == 0)
			break; /* the frame has not fully arrived */
		if (r < 0) {
			char why[64];
			snprintf(why, sizeof why, msgs[MSG_MALFORMED], kind_name(u));
			sudp_end(u, why);
			break;
		}
		if (plen <= TROJAN_UDP_PAYLOAD_MAX) {
			memcpy(u->out + DGRAM_HEADROOM, d + off, plen);
			from.network = ADDR_UDP;
			u->h->recv(&from, u->out + DGRAM_HEADROOM, plen, u->ud);
			if (u->closed)
				break;
		}
		if (endpoint_app_done(u->ep, (size_t)r) < 0)
			sudp_end(u, endpoint_error(u->ep));
	}
	return !u->closed;
}

static void sudp_readable(void *ud)
{
	sudp *u = ud;
	u->busy++;
	if (sudp_deliver(u) && endpoint_at_eof(u->ep))
		sudp_end(u, NULL);
	u->busy--;
	sudp_release(u);
}

static void sudp_writable(void *ud) { (void)ud; /* a datagram that found no room was dropped */ }

static void sudp_error(void *ud, const char *why)
{
	sudp *u = ud;
	u->busy++;
	sudp_end(u, why);
	u->busy--;
	sudp_release(u);
}

static const endpoint_events sudp_events = {
	.on_readable = sudp_readable,
	.on_writable = sudp_writable,
	.on_error = sudp_error,
};

static int sudp_send(dgram_link *l, const addr_dest *to, const uint8_t *data, size_t len)
{
	sudp *u = (sudp *)l;
	if (u->closed || u->ended || endpoint_queued(u->ep) > STREAM_UDP_QUEUE_MAX)
		return -1;
	ssize_t h;
	if (u->framing == STREAM_UDP_TROJAN)
		h = trojan_udp_encode(to, len, u->out, sizeof u->out);
	else
		h = vless_udp_encode(len, u->out, sizeof u->out);
	if (h < 0 || (size_t)h + len > sizeof u->out || endpoint_send_room(u->ep) < (size_t)h + len)
		return -1; /* no room now: dropped, as UDP is */
	memcpy(u->out + h, data, len);
	if (endpoint_send_all(u->ep, u->out, (size_t)h + len) < 0) {
		u->busy++;
		sudp_end(u, endpoint_error(u->ep));
		u->busy--;
		sudp_release(u);
		return -1;
	}
	return 0;
}

static void sudp_close(dgram_link *l)
{
	sudp *u = (sudp *)l;
	u->closed = true;
	endpoint_close(u->ep, false);
	u->ep = NULL;
	sudp_release(u);
}

static const dgram_link_ops sudp_ops = {.send_to = sudp_send, .close = sudp_close};

dgram_link *stream_udp_open(endpoint *ep, stream_udp_framing framing, const addr_dest *target,
                            const dgram_handlers *h, void *ud)
{
	sudp *u = calloc(1, sizeof *u);
	if (!u) {
		endpoint_close(ep, false);
		return NULL;
	}
	u->base.ops = &sudp_ops;
	u->ep = ep;
	u->framing = framing;
	if (target)
		u->target = *target;
	u->h = h;
	u->ud = ud;
	endpoint_set_events(ep, &sudp_events, u);
	endpoint_want_read(ep, true);
	sudp_readable(u); /* anything that came with the handshake */
	return &u->base;
}

/* ---- the SOCKS5 UDP association ---- */

typedef struct sassoc {
	dgram_link base;
	endpoint *control; /* owned; NULL once closed */
	uv_udp_t udp;      /* its close frees the association */
	struct sockaddr_storage relay;
	const dgram_handlers *h;
	void *ud;
	bool ended;
	bool closed;
	uint8_t buf[DGRAM_HEADROOM + DGRAM_MAX];
} sassoc;

static void assoc_end(sassoc *a, const char *why)
{
	if (a->ended || a->closed)
		return;
	a->ended = true;
	endpoint_want_read(a->control, false);
	if (a->h->end)
		a->h->end(a->ud, why);
}

/* The control stream carries nothing after the reply: what comes is
 * drained; its end ends the association. */
static void assoc_control_readable(void *ud)
{
	sassoc *a = ud;
	const uint8_t *d;
	size_t n = endpoint_app_in(a->control, &d);
	if (n && endpoint_app_done(a->control, n) < 0)
		assoc_end(a, endpoint_error(a->control));
	else if (endpoint_at_eof(a->control))
		assoc_end(a, msgs[MSG_CONTROL_CLOSED]);
}

static void assoc_control_writable(void *ud) { (void)ud; }

static void assoc_control_error(void *ud, const char *why) { assoc_end(ud, why); }

static const endpoint_events control_events = {
	.on_readable = assoc_control_readable,
	.on_writable = assoc_control_writable,
	.on_error = assoc_control_error,
};

static void assoc_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	(void)suggested;
	sassoc *a = h->data;
	buf->base = (char *)a->buf;
	buf->len = sizeof a->buf;
}

static void assoc_recv(uv_udp_t *h, ssize_t n, const uv_buf_t *buf, const struct sockaddr *from,
                       unsigned flags)
{
	sassoc *a = h->data;
	if (n <= 0 || !from || (flags & UV_UDP_PARTIAL) || a->closed)
		return;
	/* only the relay may answer (seed 000: canonical IP and port) */
	if (!addr_same_endpoint(from, (const struct sockaddr *)&a->relay))
		return;
	addr_dest peer = {.network = ADDR_UDP};
	ssize_t hl = socks_udp_decode((const uint8_t *)buf->base, (size_t)n, &peer);
	if (hl < 0)
		return;
	/* the payload keeps at least DGRAM_HEADROOM bytes before it only when the
	 * header is that long; move it up to make room */
	size_t plen = (size_t)n - (size_t)hl;
	uint8_t *payload = a->buf + DGRAM_HEADROOM;
	if (plen > DGRAM_MAX)
		return;
	memmove(payload, a->buf + hl, plen);
	a->h->recv(&peer, payload, plen, a->ud);
}

static int assoc_send(dgram_link *l, const addr_dest *to, const uint8_t *data, size_t len)
{
	sassoc *a = (sassoc *)l;
	if (a->closed || a->ended)
		return -1;
	uint8_t hdr[SOCKS_UDP_HEADER_MAX];
	ssize_t h = socks_udp_encode(to, hdr, sizeof hdr);
	if (h < 0)
		return -1;
	uv_buf_t b[2] = {uv_buf_init((char *)hdr, (unsigned)h),
	                 uv_buf_init((char *)data, (unsigned)len)};
	int rc = uv_udp_try_send(&a->udp, b, 2, (const struct sockaddr *)&a->relay);
	return rc == (int)((size_t)h + len) ? 0 : -1;
}

static void assoc_udp_closed(uv_handle_t *h) { free(h->data); }

static void assoc_close(dgram_link *l)
{
	sassoc *a = (sassoc *)l;
	a->closed = true;
	endpoint_close(a->control, false);
	a->control = NULL;
	uv_close((uv_handle_t *)&a->udp, assoc_udp_closed);
}

static const dgram_link_ops assoc_ops = {.send_to = assoc_send, .close = assoc_close};

dgram_link *socks_udp_link_open(worker *w, endpoint *ep, const layer *control,
                                const dgram_handlers *h, void *ud, char *err, size_t err_size)
{
	const addr_dest *relay = socks_client_relay(control);
	struct sockaddr_storage rs;
	if (!relay || relay->kind == ADDR_DOMAIN || !addr_dest_to_sockaddr(relay, &rs)) {
		snprintf(err, err_size, "%s", msgs[MSG_RELAY_DOMAIN]);
		goto fail;
	}
	/* A relay of 0.0.0.0 or :: means the server's own address. */
	static const uint8_t zero[16];
	if ((relay->kind == ADDR_IPV4 && memcmp(relay->u.v4, zero, 4) == 0) ||
	    (relay->kind == ADDR_IPV6 && memcmp(relay->u.v6, zero, 16) == 0)) {
		struct sockaddr_storage peer;
		if (endpoint_peername(ep, &peer) == 0) {
			uint16_t port = relay->port;
			rs = peer;
			if (rs.ss_family == AF_INET)
				((struct sockaddr_in *)&rs)->sin_port = htons(port);
			else
				((struct sockaddr_in6 *)&rs)->sin6_port = htons(port);
		}
	}
	sassoc *a = calloc(1, sizeof *a);
	if (!a) {
		snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
		goto fail;
	}
	a->base.ops = &assoc_ops;
	a->h = h;
	a->ud = ud;
	a->relay = rs;
	a->control = ep;
	endpoint_set_events(ep, &control_events, a);
	uv_udp_init(worker_loop(w), &a->udp);
	a->udp.data = a;
	/* bound only now, in the relay's family (seed 000) */
	struct sockaddr_storage any;
	if (rs.ss_family == AF_INET6)
		uv_ip6_addr("::", 0, (struct sockaddr_in6 *)&any);
	else
		uv_ip4_addr("0.0.0.0", 0, (struct sockaddr_in *)&any);
	int rc = uv_udp_bind(&a->udp, (struct sockaddr *)&any, 0);
	if (rc == 0)
		rc = uv_udp_recv_start(&a->udp, assoc_alloc, assoc_recv);
	if (rc) {
		snprintf(err, err_size, msgs[MSG_RELAY_BIND], uv_strerror(rc));
		assoc_close(&a->base);
		return NULL;
	}
	endpoint_want_read(ep, true);
	return &a->base;
fail:
	endpoint_close(ep, false);
	return NULL;
}
