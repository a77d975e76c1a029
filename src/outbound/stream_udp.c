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

/* ---- the stream part, shared by both kinds ---- */

typedef struct wreq {
	uv_write_t req;
	uint8_t data[];
} wreq;

/* A stream the link reads and writes: for framed datagrams, and as the
 * SOCKS association's control connection. */
typedef struct sstream {
	uv_tcp_t *tcp;
	stack *st;
	uint8_t rbuf[16384];
	size_t rlen;
	bool ended;
	void (*on_app)(struct sstream *s); /* app bytes are waiting in st */
	void (*on_end)(struct sstream *s, const char *why);
} sstream;

static void wdone(uv_write_t *req, int status)
{
	(void)status; /* a failed write shows up as the read side ending */
	free(req);
}

static int sstream_flush(sstream *s)
{
	const uint8_t *d;
	size_t n;
	while ((n = stack_wire_out(s->st, &d)) > 0) {
		wreq *w = malloc(sizeof *w + n);
		if (!w)
			return -1;
		memcpy(w->data, d, n);
		uv_buf_t b = uv_buf_init((char *)w->data, (unsigned)n);
		if (uv_write(&w->req, (uv_stream_t *)s->tcp, &b, 1, wdone)) {
			free(w);
			return -1;
		}
		if (stack_wire_done(s->st, n) < 0)
			return -1;
	}
	return 0;
}

static void sstream_end(sstream *s, const char *why)
{
	if (s->ended)
		return;
	s->ended = true;
	uv_read_stop((uv_stream_t *)s->tcp);
	s->on_end(s, why);
}

static void sstream_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	(void)suggested;
	sstream *s = h->data;
	buf->base = (char *)s->rbuf + s->rlen;
	buf->len = sizeof s->rbuf - s->rlen;
}

static void sstream_read(uv_stream_t *h, ssize_t n, const uv_buf_t *buf)
{
	(void)buf;
	sstream *s = h->data;
	if (n == 0 || s->ended)
		return;
	if (n < 0) {
		sstream_end(s, NULL);
		return;
	}
	s->rlen += (size_t)n;
	while (s->rlen && !s->ended) {
		ssize_t k = stack_from_wire(s->st, s->rbuf, s->rlen);
		if (k < 0) {
			sstream_end(s, stack_error(s->st));
			return;
		}
		memmove(s->rbuf, s->rbuf + k, s->rlen - (size_t)k);
		s->rlen -= (size_t)k;
		if (sstream_flush(s)) {
			sstream_end(s, msgs[MSG_NO_MEMORY]);
			return;
		}
		s->on_app(s);
		if (k == 0)
			break; /* the app side must drain first; it does in on_app */
	}
}

static void free_handle(uv_handle_t *h) { free(h); }

/* Closes the stream; on_closed(tcp handle) frees what owns it, later: a
 * link closed from inside its own callback stays valid until then. */
static void sstream_close(sstream *s, uv_close_cb on_closed)
{
	s->ended = true;
	uv_close((uv_handle_t *)s->tcp, on_closed);
	stack_free(s->st);
	s->st = NULL;
}

/* ---- framed datagrams: Trojan and VLESS ---- */

typedef struct sudp {
	dgram_link base;
	sstream s; /* its data points back here */
	stream_udp_framing framing;
	addr_dest target;
	const dgram_handlers *h;
	void *ud;
	bool closed;
	uint8_t out[DGRAM_HEADROOM + TROJAN_UDP_FRAME_MAX]; /* one datagram being delivered or sent */
} sudp;

static const char *kind_name(const sudp *u) { return u->framing == STREAM_UDP_VLESS ? "vless" : "trojan"; }

static void sudp_app(sstream *s)
{
	sudp *u = (sudp *)((char *)s - offsetof(sudp, s));
	const uint8_t *d;
	size_t n;
	while (!s->ended && (n = stack_app_in(s->st, &d)) > 0) {
		addr_dest from = u->target;
		size_t off, plen;
		ssize_t r;
		if (u->framing == STREAM_UDP_TROJAN) {
			r = trojan_udp_decode(d, n, &from, &off, &plen);
		} else {
			r = vless_udp_decode(d, n, &plen);
			off = VLESS_UDP_HEADER_LEN;
		}
		if (r == 0)
			return; /* the frame has not fully arrived */
		if (r < 0) {
			char why[64];
			snprintf(why, sizeof why, msgs[MSG_MALFORMED], kind_name(u));
			sstream_end(s, why);
			return;
		}
		if (plen <= TROJAN_UDP_PAYLOAD_MAX) {
			memcpy(u->out + DGRAM_HEADROOM, d + off, plen);
			from.network = ADDR_UDP;
			u->h->recv(&from, u->out + DGRAM_HEADROOM, plen, u->ud);
			if (u->closed)
				return;
		}
		if (stack_app_done(s->st, (size_t)r) < 0) {
			sstream_end(s, stack_error(s->st));
			return;
		}
	}
}

static void sudp_end(sstream *s, const char *why)
{
	sudp *u = (sudp *)((char *)s - offsetof(sudp, s));
	char text[96];
	if (!why) {
		snprintf(text, sizeof text, msgs[MSG_STREAM_ENDED], kind_name(u));
		why = text;
	}
	if (u->h->end)
		u->h->end(u->ud, why);
}

static int sudp_send(dgram_link *l, const addr_dest *to, const uint8_t *data, size_t len)
{
	sudp *u = (sudp *)l;
	sstream *s = &u->s;
	if (u->closed || s->ended || s->tcp->write_queue_size > STREAM_UDP_QUEUE_MAX)
		return -1;
	ssize_t h;
	if (u->framing == STREAM_UDP_TROJAN)
		h = trojan_udp_encode(to, len, u->out, sizeof u->out);
	else
		h = vless_udp_encode(len, u->out, sizeof u->out);
	if (h < 0 || (size_t)h + len > sizeof u->out || stack_app_room(s->st) < (size_t)h + len)
		return -1;
	memcpy(u->out + h, data, len);
	ssize_t k = stack_from_app(s->st, u->out, (size_t)h + len);
	if (k < 0 || sstream_flush(s)) {
		sstream_end(s, stack_error(s->st));
		return -1;
	}
	return 0;
}

static void sudp_closed(uv_handle_t *h)
{
	sstream *s = h->data;
	sudp *u = (sudp *)((char *)s - offsetof(sudp, s));
	free(h);
	free(u);
}

static void sudp_close(dgram_link *l)
{
	sudp *u = (sudp *)l;
	u->closed = true;
	sstream_close(&u->s, sudp_closed);
}

static const dgram_link_ops sudp_ops = {.send_to = sudp_send, .close = sudp_close};

dgram_link *stream_udp_open(worker *w, uv_tcp_t *tcp, stack *st, stream_udp_framing framing,
                            const addr_dest *target, const dgram_handlers *h, void *ud)
{
	(void)w;
	sudp *u = calloc(1, sizeof *u);
	if (!u) {
		uv_close((uv_handle_t *)tcp, free_handle);
		stack_free(st);
		return NULL;
	}
	u->base.ops = &sudp_ops;
	u->framing = framing;
	if (target)
		u->target = *target;
	u->h = h;
	u->ud = ud;
	u->s = (sstream){.tcp = tcp, .st = st, .on_app = sudp_app, .on_end = sudp_end};
	tcp->data = &u->s;
	uv_read_start((uv_stream_t *)tcp, sstream_alloc, sstream_read);
	sudp_app(&u->s); /* anything that came with the handshake */
	return &u->base;
}

/* ---- the SOCKS5 UDP association ---- */

typedef struct sassoc {
	dgram_link base;
	sstream control;
	uv_udp_t udp;
	struct sockaddr_storage relay;
	const dgram_handlers *h;
	void *ud;
	bool closed;
	int handles; /* open: the control socket, the UDP socket */
	uint8_t buf[DGRAM_HEADROOM + DGRAM_MAX];
} sassoc;

static void assoc_control_app(sstream *s)
{
	const uint8_t *d;
	size_t n = stack_app_in(s->st, &d);
	if (n && stack_app_done(s->st, n) < 0) /* the control stream carries nothing: drain */
		sstream_end(s, stack_error(s->st));
}

static void assoc_control_end(sstream *s, const char *why)
{
	sassoc *a = (sassoc *)((char *)s - offsetof(sassoc, control));
	if (a->h->end)
		a->h->end(a->ud, why ? why : msgs[MSG_CONTROL_CLOSED]);
}

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
	if (a->closed || a->control.ended)
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

static void assoc_release(sassoc *a)
{
	if (--a->handles == 0)
		free(a);
}

static void assoc_udp_closed(uv_handle_t *h) { assoc_release(h->data); }

static void assoc_tcp_closed(uv_handle_t *h)
{
	sstream *s = h->data;
	sassoc *a = (sassoc *)((char *)s - offsetof(sassoc, control));
	free(h);
	assoc_release(a);
}

static void assoc_close(dgram_link *l)
{
	sassoc *a = (sassoc *)l;
	a->closed = true;
	sstream_close(&a->control, assoc_tcp_closed);
	uv_close((uv_handle_t *)&a->udp, assoc_udp_closed);
}

static const dgram_link_ops assoc_ops = {.send_to = assoc_send, .close = assoc_close};

dgram_link *socks_udp_link_open(worker *w, uv_tcp_t *tcp, stack *st, const layer *control,
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
		int plen = sizeof peer;
		if (uv_tcp_getpeername(tcp, (struct sockaddr *)&peer, &plen) == 0) {
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
	a->handles = 2;
	a->h = h;
	a->ud = ud;
	a->relay = rs;
	a->control = (sstream){.tcp = tcp, .st = st, .on_app = assoc_control_app,
	                       .on_end = assoc_control_end};
	tcp->data = &a->control;
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
	uv_read_start((uv_stream_t *)tcp, sstream_alloc, sstream_read);
	return &a->base;
fail:
	uv_close((uv_handle_t *)tcp, free_handle);
	stack_free(st);
	return NULL;
}
