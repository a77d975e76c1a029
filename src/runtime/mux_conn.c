/* mux_conn.c - the Mux.Cool server session: frames from the inbound's relay, sub-flows through the connector, their bytes back as frames. */
#include "runtime/mux_conn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <arpa/inet.h>

#include "base/list.h"
#include "base/log.h"
#include "outbound/fanout.h"
#include "proto/mux.h"
#include "proto/sniff.h"
#include "runtime/chan_queue.h"
#include "runtime/guard.h"
#include "runtime/relay.h"

enum {
	M_NOMEM,
	M_SESSION_ENDED,
	M_SUB_ENDED,
	M_SUB_FAILED,
	M_BAD_FRAME,
	M_UDP_OPEN,
	M_SUB_ERROR,
	M_IDLE,
	M_UDP_ENDED,
};

static const char *const msgs[] = {
	[M_NOMEM] = "mux: out of memory",
	[M_SESSION_ENDED] = "mux: the session ended",
	[M_SUB_ENDED] = "sub-flow %u to %s ended: %s",
	[M_SUB_FAILED] = "sub-flow %u to %s failed: %s",
	[M_BAD_FRAME] = "session from %s ended: %s",
	[M_UDP_OPEN] = "mux: cannot open the datagram link: %s",
	[M_SUB_ERROR] = "mux: the server ended the sub-flow in error",
	[M_IDLE] = "mux: the session was idle",
	[M_UDP_ENDED] = "mux: the server ended the UDP sub-flow",
};

/* Frames toward the peer waiting for its relay: sub-flows stop adding
 * data frames beyond this (End frames still go). */
#define OUT_SOFT (64 * 1024)
/* Data and New frames go at most this far (data_room): what lies beyond,
 * up to OUT_CAP, is kept for the short control frames (End, KeepAlive),
 * which put_out could otherwise only drop. */
#define OUT_DATA_CAP (OUT_SOFT + MUX_FRAME_MAX)
#define OUT_CAP (OUT_DATA_CAP + 64 * MUX_SHORT_FRAME_LEN)

/* Client bytes all TCP sub-flows of one server session together hold that
 * their upstreams have not taken (each also at most MUX_SUB_BUFFER): past
 * it the session stops reading its client, as for one sub-flow. Eight
 * full sub-flow buffers, v2ray's default concurrency; without it 128
 * sub-flows whose dials hang pinned 4.3 MiB a session (issue 32, N1). */
#define SESSION_RX_MAX (8 * MUX_SUB_BUFFER)
/* A sub-flow's buffer beyond this is given back once it drains: what a
 * burst made it grow to is not kept for the sub-flow's life. */
#define RX_KEEP 16384
/* What a UDP sub-flow counts against its client's source (guard.h): its
 * datagram link's descriptors, freedom's two sockets. */
#define UDP_SUB_HOLDS 2

typedef struct mux_conn mux_conn;

typedef struct msub {
	chan ch; /* first: the sub-flow's endpoint runs on it (TCP) */
	mux_conn *m;
	list_node node;
	uint16_t id;
	bool udp;
	addr_dest dest;
	connect_pending *pending;
	relay *rl;
	dgram_link *link;
	bool has_ep;     /* the endpoint exists and has not closed */
	uint64_t origin; /* the outbound version its upstream was opened on */
	uint8_t *rx;     /* data from the client its endpoint has not taken */
	size_t rx_len, rx_cap;
	chan_queue wq;       /* the upstream's bytes toward the client */
	bool want, peer_end, eof_told, shut_wanted, shut_told, end_sent, failed, gone;
	bool fail_told;  /* client: the endpoint was told the sub-flow broke */
	unsigned held;   /* server: what it counts against the client's source (guard) */
	struct mux_dlink *dl; /* client, UDP: its link while open */
} msub;

struct mux_conn {
	chan face; /* first: the session's endpoint toward the inbound's relay */
	connect_pending base; /* until the face is handed over */
	connect_cb open_cb;   /* the inbound's, called from the loop (never inside
	                       * its connect: it has not consumed the request yet) */
	void *open_data;
	endpoint *face_ep;    /* until handed over */
	worker *w;
	const connector *conn;
	flow f;
	flow_ctx ctx;
	char *tag;
	char peer[64];
	mux_server core;
	list_node reg;
	list subs;
	chan_queue fq;    /* the client's bytes, from the relay */
	uint8_t *in;  /* [0, in_len): the client's bytes not yet decoded */
	size_t in_len;
	uint8_t *out; /* [0, out_len): frames toward the client */
	size_t out_len;
	size_t rx_total; /* server: the rx_len of every sub-flow (SESSION_RX_MAX) */
	uv_idle_t kick;
	bool kicking, servicing, face_want, face_open, client_ended, eof_told, dead, freed;
	uint64_t moved; /* bytes moved ever: a service that moved some runs again */
	int handles;    /* kick and idle, to close before the free */
	uv_timer_t idle; /* client: closes a session with no sub-flow */
	guard_bucket open_rate; /* server: the session's sub-flow opens (guard) */
	/* client */
	bool client;
	mux_client ccore;
	endpoint *below; /* the session's own proxy stream, once dialled */
	connect_pending *dial;
	uint64_t origin; /* the outbound version whose flows share it */
	list opens;      /* mopen, waiting for the stream */
	size_t n_opens;
	char why[160];   /* why the session died */
	uint8_t *dgram;  /* client: a datagram handed up, with its headroom */
};

/* A client flow waiting for its session's stream. */
typedef struct mopen {
	connect_pending base; /* first */
	mux_conn *m;
	list_node node;
	addr_dest dest; /* network UDP: a datagram link */
	connect_cb cb;
	void *data;
	const dgram_handlers *h; /* UDP */
	void *ud;
	mux_dgram_cb done;
	void *oud;
} mopen;

/* A client's datagram link on a UDP sub-flow: one destination, as v2ray
 * 4.34's sub-flows have. */
typedef struct mux_dlink {
	dgram_link base; /* first */
	msub *s;         /* NULL once the sub-flow is gone */
	const dgram_handlers *h;
	void *ud;
} mux_dlink;

static _Thread_local list sessions; /* server */
static _Thread_local list clients;

static void service(mux_conn *m);

static void on_kick(uv_idle_t *h)
{
	mux_conn *m = h->data;
	uv_idle_stop(h);
	m->kicking = false;
	service(m);
}

static void kick(mux_conn *m)
{
	if (!m->kicking && !m->freed) {
		m->kicking = true;
		uv_idle_start(&m->kick, on_kick);
	}
}

/* Room for data and New frames: never the control frames' share. */
static size_t data_room(const mux_conn *m)
{
	return m->out_len < OUT_DATA_CAP ? OUT_DATA_CAP - m->out_len : 0;
}

static void put_out(mux_conn *m, const uint8_t *d, size_t n)
{
	if (n <= OUT_CAP - m->out_len) {
		memcpy(m->out + m->out_len, d, n);
		m->out_len += n;
	}
}

/* The sub-flow's End toward the client, once. */
static void send_end(msub *s, bool error)
{
	if (s->end_sent)
		return;
	s->end_sent = true;
	proto_out po;
	mux_conn *m = s->m;
	if ((m->client ? mux_client_end(&m->ccore, s->id, error, &po)
	               : mux_server_end(&m->core, s->id, error, &po)) == 0)
		put_out(m, po.buf, po.len);
}

static void dest_text(const addr_dest *d, char *out, size_t size)
{
	(void)addr_dest_format(d, out, size);
}

/* ---- a sub-flow's channel ---- */

static msub *sub_of(const chan *ch) { return (msub *)(void *)ch; }

static int sub_write(chan *ch, const uint8_t *d, size_t n, void *req)
{
	msub *s = sub_of(ch);
	if (s->end_sent || s->m->dead || chan_queue_push(&s->wq, d, n, req))
		return -1;
	kick(s->m);
	return 0;
}

static void sub_read(chan *ch, bool on)
{
	msub *s = sub_of(ch);
	s->want = on;
	if (on)
		kick(s->m);
}

static int sub_shutdown(chan *ch)
{
	msub *s = sub_of(ch);
	s->shut_wanted = true;
	kick(s->m);
	return 0;
}

static void sub_close(chan *ch)
{
	msub *s = sub_of(ch);
	s->has_ep = false;
	chan_queue_forget(&s->wq); /* the endpoint's buffers */
	send_end(s, s->failed || !s->peer_end);
	kick(s->m);
}

static size_t sub_queued(const chan *ch) { return chan_queue_bytes(&sub_of(ch)->wq); }

static int no_name(const chan *ch, struct sockaddr_storage *ss)
{
	(void)ch;
	(void)ss;
	return -1;
}

static const chan_ops sub_chan = {
	.write = sub_write,
	.read = sub_read,
	.shutdown = sub_shutdown,
	.close = sub_close,
	.queued = sub_queued,
	.peername = no_name,
	.sockname = no_name,
};

static msub *find(mux_conn *m, uint16_t id)
{
	for (list_node *n = m->subs.head; n; n = n->next) {
		msub *s = LIST_ENTRY(n, msub, node);
		if (s->id == id && !s->gone)
			return s;
	}
	return NULL;
}

static void sub_free(msub *s)
{
	if (s->held)
		guard_source_unhold(worker_guard(s->m->w), (struct sockaddr *)&s->m->ctx.peer, s->held);
	if (s->dl)
		s->dl->s = NULL;
	s->m->rx_total -= s->rx_len;
	list_remove(&s->m->subs, &s->node);
	free(s->rx);
	free(s);
}

/* Ends a sub-flow from our side: what it holds closes (its End goes out
 * once, as the endpoint's close sends it). */
static void sub_stop(msub *s, bool error)
{
	s->gone = true;
	s->failed |= error;
	if (s->pending) {
		s->pending->cancel(s->pending);
		s->pending = NULL;
	}
	if (s->link) {
		s->link->ops->close(s->link);
		s->link = NULL;
	}
	if (s->rl) {
		relay *rl = s->rl;
		s->rl = NULL;
		relay_stop(rl); /* closes the endpoint: sub_close */
	}
	send_end(s, error);
}

static void on_sub_end(void *ud, const char *why)
{
	msub *s = ud;
	char d[300];
	dest_text(&s->dest, d, sizeof d);
	log_debug("mux", msgs[M_SUB_ENDED], s->id, d, why ? why : "closed");
	s->rl = NULL; /* it stops itself */
	s->failed |= why != NULL;
	s->gone = true;
	kick(s->m);
}

static const relay_events sub_relay_events = {.on_end = on_sub_end};

static void on_sub_connected(const connect_result *r, void *data)
{
	msub *s = data;
	s->pending = NULL;
	char d[300];
	if (!r->ok || r->blackhole) {
		dest_text(&s->dest, d, sizeof d);
		log_debug("mux", msgs[M_SUB_FAILED], s->id, d, r->ok ? "blackhole" : r->msg);
		sub_stop(s, true);
		kick(s->m);
		return;
	}
	endpoint *ep = endpoint_new_chan(s->m->w, &s->ch, NULL, NULL, NULL);
	if (!ep) {
		endpoint_close(r->ep, false);
		sub_stop(s, true);
		kick(s->m);
		return;
	}
	s->has_ep = true;
	s->origin = endpoint_origin(r->ep);
	relay_config cfg = {.splice = false, .idle_ms = 0};
	s->rl = relay_start(s->m->w, ep, r->ep, &cfg, &sub_relay_events, s);
	if (!s->rl) {
		s->has_ep = false;
		sub_stop(s, true);
	}
	kick(s->m);
}

/* A datagram for a UDP sub-flow, from its destination. */
static void on_sub_dgram(const addr_dest *from, uint8_t *data, size_t len, void *ud)
{
	(void)from;
	msub *s = ud;
	mux_conn *m = s->m;
	if (s->gone || len > MUX_UDP_PAYLOAD_MAX || data_room(m) < len + MUX_HEADER_MAX)
		return; /* dropped: UDP */
	ssize_t n = mux_encode_datagram(s->id, NULL, data, len, m->out + m->out_len,
	                                data_room(m));
	if (n > 0)
		m->out_len += (size_t)n;
	kick(m);
}

static void on_sub_dgram_end(void *ud, const char *why)
{
	msub *s = ud;
	char d[300];
	dest_text(&s->dest, d, sizeof d);
	log_debug("mux", msgs[M_SUB_ENDED], s->id, d, why ? why : "closed");
	s->gone = true;
	kick(s->m);
}

static const dgram_handlers sub_dgram = {.recv = on_sub_dgram, .end = on_sub_dgram_end};

/* ---- the client's frames ---- */

static bool open_sub(mux_conn *m, const mux_event *ev)
{
	msub *s = calloc(1, sizeof *s);
	if (!s)
		return false;
	s->ch.ops = &sub_chan;
	s->m = m;
	s->id = ev->id;
	s->dest = ev->dest;
	s->udp = ev->dest.network == ADDR_UDP;
	list_push_back(&m->subs, &s->node);
	/* the session's opens are rate-bounded, and each sub-flow's upstream
	 * counts against the client's source as a connection does
	 * (docs/security.md): a TCP one 1, a UDP one 2 (its direct link's
	 * IPv4 and IPv6 sockets). Over either, the New is answered End with
	 * the error bit, nothing dialled */
	guard *g = worker_guard(m->w);
	const struct sockaddr *peer = (const struct sockaddr *)&m->ctx.peer;
	unsigned holds = s->udp ? UDP_SUB_HOLDS : 1;
	if (!guard_open_allowed(g, peer, &m->open_rate, uv_now(worker_loop(m->w)), "mux sub-flow") ||
	    !guard_source_hold(g, peer, holds)) {
		sub_stop(s, true);
		return true;
	}
	s->held = holds;
	flow f = m->f;
	f.dest = ev->dest;
	f.sniffed = (addr_dest){0};
	/* a sub-flow is sniffed on the data of its New frame (v2ray sends the
	 * first bytes it has with it): what is not there is not waited for */
	char name[SNIFF_NAME_MAX + 1];
	sniff_proto proto;
	if (m->ctx.sniffing && !s->udp && ev->has_data &&
	    sniff_name(ev->data, ev->data_len, name, sizeof name, &proto) == SNIFF_FOUND &&
	    addr_dest_set_domain(&f.sniffed, name, strlen(name), ev->dest.port))
		f.sniffed = (addr_dest){0};
	if (s->udp) {
		char err[200];
		s->link = m->conn->connect_datagram(m->conn->self, m->w, &f, &m->ctx, &sub_dgram, s, err,
		                                    sizeof err);
		if (!s->link) {
			log_debug("mux", msgs[M_UDP_OPEN], err);
			sub_stop(s, true);
		}
	} else {
		s->pending = m->conn->connect(m->conn->self, m->w, &f, &m->ctx, on_sub_connected, s);
	}
	return true;
}

/* Room for the data of the frame at in: a TCP sub-flow takes at most
 * MUX_SUB_BUFFER bytes ahead of its upstream. */
static bool room_for(mux_conn *m, const mux_event *peek)
{
	if (peek->kind != MUX_EV_DATA && peek->kind != MUX_EV_OPEN)
		return true;
	msub *s = find(m, peek->id);
	return !s || s->udp ||
	       (s->rx_len + peek->data_len <= MUX_SUB_BUFFER &&
	        m->rx_total + peek->data_len <= SESSION_RX_MAX);
}

static bool rx_add(msub *s, const uint8_t *d, size_t n)
{
	if (!n || s->gone)
		return true;
	if (s->rx_cap - s->rx_len < n) {
		size_t cap = s->rx_cap ? s->rx_cap : 16384;
		while (cap - s->rx_len < n)
			cap *= 2;
		uint8_t *rx = realloc(s->rx, cap);
		if (!rx)
			return false;
		s->rx = rx;
		s->rx_cap = cap;
	}
	memcpy(s->rx + s->rx_len, d, n);
	s->rx_len += n;
	s->m->rx_total += n;
	return true;
}

static void die(mux_conn *m, const char *why)
{
	if (m->dead)
		return;
	m->dead = true;
	snprintf(m->why, sizeof m->why, "%s", why ? why : msgs[M_SESSION_ENDED]);
	if (why && !m->client)
		log_debug("mux", msgs[M_BAD_FRAME], m->peer, why);
	for (list_node *n = m->subs.head; n; n = n->next)
		sub_stop(LIST_ENTRY(n, msub, node), true);
	kick(m);
}

/* Decodes what the client sent, frame by frame, while sub-flows have room. */
static void read_frames(mux_conn *m)
{
	/* the session stream's bytes (client), or the relay's writes (server),
	 * into the input buffer */
	const uint8_t *d;
	size_t avail;
	while (m->client && m->below && m->in_len < 2 * MUX_FRAME_MAX &&
	       (avail = endpoint_app_in(m->below, &d)) > 0) {
		size_t k = avail < 2 * MUX_FRAME_MAX - m->in_len ? avail : 2 * MUX_FRAME_MAX - m->in_len;
		memcpy(m->in + m->in_len, d, k);
		m->in_len += k;
		if (endpoint_app_done(m->below, k)) {
			die(m, endpoint_error(m->below));
			return;
		}
	}
	chan_write *r;
	while (!m->client && (r = chan_queue_head(&m->fq))) {
		size_t k = r->n - r->off;
		if (k > 2 * MUX_FRAME_MAX - m->in_len)
			k = 2 * MUX_FRAME_MAX - m->in_len;
		memcpy(m->in + m->in_len, r->d + r->off, k);
		m->in_len += k;
		r->off += k;
		if (r->off < r->n)
			break;
		chan_queue_pop(&m->fq, 0);
	}
	/* Input is read whatever our output holds: a session that stopped
	 * reading while its output waited for the peer, whose output waited
	 * for it, would stall both (16 MiB echoed through ours to ours did).
	 * A sub-flow's own buffer is the bound (room_for); the control frames
	 * a frame may cause go only as far as OUT_CAP (put_out). */
	while (!m->dead && m->in_len) {
		mux_event peek, ev;
		ssize_t n = mux_decode(m->in, m->in_len, &peek);
		if (n == MUX_NEED_MORE)
			break;
		if (n > 0 && !room_for(m, &peek))
			break; /* resumes as the sub-flow's upstream takes its bytes */
		proto_out po;
		n = n < 0                ? n
		    : m->client ? mux_client_feed(&m->ccore, m->in, m->in_len, &ev, &po)
		                : mux_server_feed(&m->core, m->in, m->in_len, &ev, &po);
		if (n < 0) {
			die(m, ev.reason ? ev.reason : peek.reason);
			return;
		}
		put_out(m, po.buf, po.len);
		msub *s = ev.kind == MUX_EV_DATA || ev.kind == MUX_EV_END ? find(m, ev.id) : NULL;
		switch (ev.kind) {
		case MUX_EV_OPEN:
			if (!open_sub(m, &ev)) {
				die(m, msgs[M_NOMEM]);
				return;
			}
			s = find(m, ev.id);
			if (s && ev.has_data && ev.data_len) {
				if (s->udp && s->link)
					(void)s->link->ops->send_to(s->link, &s->dest, ev.data, ev.data_len);
				else if (!rx_add(s, ev.data, ev.data_len))
					sub_stop(s, true);
			}
			break;
		case MUX_EV_DATA:
			if (!s)
				break;
			if (m->client && s->udp) {
				if (s->dl && ev.data_len <= MUX_DATA_MAX) {
					uint8_t *b = m->dgram + DGRAM_HEADROOM;
					memcpy(b, ev.data, ev.data_len);
					s->dl->h->recv(&s->dest, b, ev.data_len, s->dl->ud);
				}
			} else if (s->udp) {
				if (s->link && ev.data_len)
					(void)s->link->ops->send_to(s->link, &s->dest, ev.data, ev.data_len);
			} else if (!rx_add(s, ev.data, ev.data_len)) {
				sub_stop(s, true);
			}
			break;
		case MUX_EV_END:
			if (!s)
				break;
			s->peer_end = true;
			s->end_sent = true; /* the id is closed on both sides now */
			if (m->client && s->udp && s->dl) {
				s->gone = true;
				if (s->dl->h->end)
					s->dl->h->end(s->dl->ud, msgs[M_UDP_ENDED]);
			} else if (m->client)
				s->failed |= ev.error; /* the flow's end, or its failure */
			else if (s->udp || !s->rl)
				sub_stop(s, ev.error);
			break;
		default:
			break;
		}
		memmove(m->in, m->in + n, m->in_len - (size_t)n);
		m->in_len -= (size_t)n;
		m->moved += (size_t)n;
	}
}

/* A sub-flow's news for its endpoint, and its upstream's bytes as frames. */
static void serve_sub(mux_conn *m, msub *s)
{
	if (m->client && s->dl && m->dead && !s->fail_told) {
		s->fail_told = true;
		if (s->dl->h->end)
			s->dl->h->end(s->dl->ud, m->why);
		return;
	}
	if (s->has_ep)
		chan_queue_tell(&s->wq, s->ch.ep);
	if (!s->has_ep)
		return;
	endpoint *ep = s->ch.ep;
	if (m->client && (s->failed || m->dead)) {
		if (!s->fail_told) {
			s->fail_told = true;
			endpoint_chan_fail(ep, m->dead ? m->why : msgs[M_SUB_ERROR]);
		}
		return;
	}
	while (s->want && s->rx_len && s->has_ep) {
		size_t k = endpoint_chan_input(ep, s->rx, s->rx_len);
		if (k == 0)
			break;
		memmove(s->rx, s->rx + k, s->rx_len - k);
		s->rx_len -= k;
		m->rx_total -= k;
		m->moved += k;
	}
	if (!s->rx_len && s->rx_cap > RX_KEEP) {
		free(s->rx);
		s->rx = NULL;
		s->rx_cap = 0;
	}
	if (s->has_ep && s->peer_end && !s->rx_len && s->want && !s->eof_told) {
		s->eof_told = true;
		endpoint_chan_eof(ep);
	}
	chan_write *r;
	while (s->has_ep && !s->end_sent && m->out_len < OUT_SOFT && (r = chan_queue_head(&s->wq))) {
		size_t used = 0;
		m->out_len += mux_encode_stream(s->id, r->d + r->off, r->n - r->off,
		                                m->out + m->out_len, data_room(m), &used);
		r->off += used;
		m->moved += used;
		if (r->off == r->n)
			chan_queue_pop(&s->wq, 0);
		else if (!used)
			break;
	}
	if (s->has_ep && s->shut_wanted && !s->wq.n && !s->shut_told) {
		/* Mux.Cool has no half-close: the upstream's end ends the sub-flow */
		s->shut_told = true;
		send_end(s, false);
		/* the End closes the id both ways: nothing more comes for it */
		s->peer_end = true;
		endpoint_chan_shut(ep);
	}
	if (s->has_ep && s->wq.n_done)
		chan_queue_tell(&s->wq, ep);
}

static void on_freed(uv_handle_t *h)
{
	mux_conn *m = h->data;
	if (--m->handles == 0)
		free(m);
}

static void session_free(mux_conn *m)
{
	m->freed = true;
	list_remove(m->client ? &clients : &sessions, &m->reg);
	if (m->dial)
		m->dial->cancel(m->dial);
	if (m->below)
		endpoint_close(m->below, true);
	free(m->in);
	free(m->out);
	free(m->tag);
	free(m->dgram);
	session_release(m->ctx.session);
	m->ctx.session = NULL;
	uv_close((uv_handle_t *)&m->kick, on_freed);
	uv_close((uv_handle_t *)&m->idle, on_freed);
}

static void client_service(mux_conn *m);

static void service(mux_conn *m)
{
	if (m->freed || m->servicing)
		return;
	if (m->open_cb) {
		connect_cb cb = m->open_cb;
		m->open_cb = NULL;
		endpoint *ep = m->face_ep;
		m->face_ep = NULL;
		cb(&(connect_result){.ok = true, .ep = ep}, m->open_data);
		if (m->freed)
			return;
	}
	if (m->client) {
		client_service(m);
		return;
	}
	m->servicing = true;
	uint64_t before = m->moved;
	if (m->face_open)
		chan_queue_tell(&m->fq, m->face.ep);
	if (m->face_open && !m->client_ended)
		read_frames(m);
	for (list_node *n = m->subs.head; n; n = n->next)
		serve_sub(m, LIST_ENTRY(n, msub, node));
	if (m->face_open && (m->fq.n_done))
		chan_queue_tell(&m->fq, m->face.ep);
	while (m->face_open && m->face_want && m->out_len) {
		size_t k = endpoint_chan_input(m->face.ep, m->out, m->out_len);
		if (k == 0)
			break;
		memmove(m->out, m->out + k, m->out_len - k);
		m->out_len -= k;
		m->moved += k;
	}
	for (list_node *n = m->subs.head, *next; n; n = next) {
		next = n->next;
		msub *s = LIST_ENTRY(n, msub, node);
		if (s->gone && !s->has_ep && !s->rl && !s->pending && !s->link)
			sub_free(s);
	}
	if (m->face_open && m->dead && !m->eof_told) {
		m->eof_told = true;
		endpoint_chan_fail(m->face.ep, msgs[M_SESSION_ENDED]);
	} else if (m->face_open && m->client_ended && !m->out_len && !m->eof_told &&
	           !m->subs.head && m->face_want) {
		m->eof_told = true;
		endpoint_chan_eof(m->face.ep);
	}
	m->servicing = false;
	if (!m->face_open && !m->subs.head) {
		session_free(m);
		return;
	}
	/* bytes moved: what waited for room (frames not yet read, writes not
	 * yet framed) gets another round */
	if (m->moved != before)
		kick(m);
}

/* ---- the face ---- */

static mux_conn *face_of(const chan *ch) { return (mux_conn *)(void *)ch; }

static int face_write(chan *ch, const uint8_t *d, size_t n, void *req)
{
	mux_conn *m = face_of(ch);
	if (m->client_ended || chan_queue_push(&m->fq, d, n, req))
		return -1;
	kick(m);
	return 0;
}

static void face_read(chan *ch, bool on)
{
	mux_conn *m = face_of(ch);
	m->face_want = on;
	if (on)
		kick(m);
}

/* The client's end ends the session: Mux.Cool sessions do not half-close. */
static int face_shutdown(chan *ch)
{
	mux_conn *m = face_of(ch);
	m->client_ended = true;
	for (list_node *n = m->subs.head; n; n = n->next)
		sub_stop(LIST_ENTRY(n, msub, node), false);
	kick(m);
	return 0;
}

static void face_close(chan *ch)
{
	mux_conn *m = face_of(ch);
	m->face_open = false;
	chan_queue_forget(&m->fq);
	die(m, NULL);
}

static size_t face_queued(const chan *ch) { return chan_queue_bytes(&face_of(ch)->fq); }

static const chan_ops face_chan = {
	.write = face_write,
	.read = face_read,
	.shutdown = face_shutdown,
	.close = face_close,
	.queued = face_queued,
	.peername = no_name,
	.sockname = no_name,
};

/* The inbound gave up before the face was handed over. */
static void serve_cancel(connect_pending *p)
{
	mux_conn *m = (mux_conn *)(void *)((char *)p - offsetof(mux_conn, base));
	m->open_cb = NULL;
	endpoint *ep = m->face_ep;
	m->face_ep = NULL;
	endpoint_close(ep, false); /* face_close: the session ends */
}

bool mux_is_session(const addr_dest *dest) { return mux_is_session_dest(dest); }

connect_pending *mux_serve(worker *w, const connector *conn, const flow *f, const flow_ctx *ctx,
                           connect_cb cb, void *data)
{
	mux_conn *m = calloc(1, sizeof *m);
	if (!m || !(m->in = malloc(2 * MUX_FRAME_MAX)) || !(m->out = malloc(OUT_CAP)) ||
	    (ctx->inbound_tag && !(m->tag = strdup(ctx->inbound_tag)))) {
		if (m) {
			free(m->in);
			free(m->out);
			free(m);
		}
		cb(&(connect_result){.err = PROTO_DIAL_GENERAL, .msg = msgs[M_NOMEM]}, data);
		return NULL;
	}
	m->face.ops = &face_chan;
	m->w = w;
	m->conn = conn;
	m->f = *f;
	m->ctx = *ctx;
	m->ctx.inbound_tag = m->tag;
	if (m->ctx.session) /* its sub-flows are the session's */
		session_hold(m->ctx.session);
	mux_server_init(&m->core);
	struct sockaddr_storage *p = &m->ctx.peer;
	char ip[64] = "?";
	if (p->ss_family == AF_INET)
		inet_ntop(AF_INET, &((struct sockaddr_in *)p)->sin_addr, ip, sizeof ip);
	else if (p->ss_family == AF_INET6)
		inet_ntop(AF_INET6, &((struct sockaddr_in6 *)p)->sin6_addr, ip, sizeof ip);
	snprintf(m->peer, sizeof m->peer, "%s", ip);
	uv_idle_init(worker_loop(w), &m->kick);
	uv_timer_init(worker_loop(w), &m->idle);
	m->kick.data = m;
	m->idle.data = m;
	m->handles = 2;
	list_push_back(&sessions, &m->reg);
	endpoint *ep = endpoint_new_chan(w, &m->face, NULL, NULL, NULL);
	if (!ep) { /* face_close ran: the session frees itself */
		cb(&(connect_result){.err = PROTO_DIAL_GENERAL, .msg = msgs[M_NOMEM]}, data);
		return NULL;
	}
	m->face_open = true;
	m->face_ep = ep;
	m->open_cb = cb;
	m->open_data = data;
	m->base.cancel = serve_cancel;
	kick(m);
	return &m->base;
}

size_t mux_drain(worker *w, uint64_t origin, const char *why)
{
	(void)w;
	size_t n = 0;
	for (list_node *i = sessions.head; i; i = i->next) {
		mux_conn *m = LIST_ENTRY(i, mux_conn, reg);
		for (list_node *j = m->subs.head; j; j = j->next) {
			msub *s = LIST_ENTRY(j, msub, node);
			if (s->gone)
				continue;
			if (s->link) {
				n += fanout_drain(s->link, origin, why);
			} else if (s->rl && s->origin == origin) {
				char d[300];
				dest_text(&s->dest, d, sizeof d);
				log_debug("mux", msgs[M_SUB_ENDED], s->id, d, why);
				sub_stop(s, true);
				n++;
			}
		}
		kick(m);
	}
	return n;
}

void mux_close_all(worker *w)
{
	(void)w;
	for (list_node *n = sessions.head; n; n = n->next)
		die(LIST_ENTRY(n, mux_conn, reg), NULL);
	for (list_node *n = clients.head; n; n = n->next)
		die(LIST_ENTRY(n, mux_conn, reg), NULL);
}

/* ---- client ---- */

static void open_done(mopen *o, const connect_result *r)
{
	mux_conn *m = o->m;
	list_remove(&m->opens, &o->node);
	m->n_opens--;
	if (r && o->done) /* a datagram link: r fails it (a link opens in start_opens) */
		o->done(o->oud, NULL, r->msg ? r->msg : msgs[M_SESSION_ENDED]);
	else if (r)
		o->cb(r, o->data);
	free(o);
}

static int dl_send_to(dgram_link *l, const addr_dest *to, const uint8_t *data, size_t len)
{
	(void)to; /* the sub-flow's one destination (the fan-out keys it so) */
	mux_dlink *dl = (mux_dlink *)l;
	msub *s = dl->s;
	if (!s || s->gone || s->end_sent || len > MUX_UDP_PAYLOAD_MAX)
		return -1;
	mux_conn *m = s->m;
	if (data_room(m) < len + MUX_HEADER_MAX)
		return -1; /* dropped: UDP */
	ssize_t n = mux_encode_datagram(s->id, NULL, data, len, m->out + m->out_len,
	                                data_room(m));
	if (n < 0)
		return -1;
	m->out_len += (size_t)n;
	kick(m);
	return 0;
}

static void dl_close(dgram_link *l)
{
	mux_dlink *dl = (mux_dlink *)l;
	msub *s = dl->s;
	if (s) {
		s->dl = NULL;
		send_end(s, false);
		s->gone = true;
		kick(s->m);
	}
	free(dl);
}

static const dgram_link_ops dlink_ops = {.send_to = dl_send_to, .close = dl_close};

static void open_cancel(connect_pending *p) { open_done((mopen *)p, NULL); }

/* The opens waiting get their sub-flows once the stream is up. */
static void start_opens(mux_conn *m)
{
	/* a New frame that did not fit would be lost while its sub-flow's
	 * data went out under an id the peer never opened (it answers End:
	 * the flow saw its end before any byte); it waits for room instead */
	while (m->below && !m->dead && m->opens.head && data_room(m) >= MUX_HEADER_MAX) {
		mopen *o = LIST_ENTRY(m->opens.head, mopen, node);
		uint8_t frame[MUX_HEADER_MAX];
		uint16_t id;
		msub *s = calloc(1, sizeof *s);
		ssize_t n = s ? mux_client_open(&m->ccore, &o->dest, NULL, 0, frame, sizeof frame, &id)
		              : PROTO_ERR_TOO_BIG;
		if (n < 0) {
			free(s);
			open_done(o, &(connect_result){.err = PROTO_DIAL_GENERAL, .msg = msgs[M_NOMEM]});
			continue;
		}
		put_out(m, frame, (size_t)n);
		s->ch.ops = &sub_chan;
		s->m = m;
		s->id = id;
		s->dest = o->dest;
		list_push_back(&m->subs, &s->node);
		if (o->done) {
			s->udp = true;
			mux_dlink *dl = calloc(1, sizeof *dl);
			if (!dl) {
				send_end(s, true);
				s->gone = true;
				open_done(o, &(connect_result){.err = PROTO_DIAL_GENERAL, .msg = msgs[M_NOMEM]});
				continue;
			}
			*dl = (mux_dlink){.base = {.ops = &dlink_ops, .origin = m->origin}, .s = s,
			                  .h = o->h, .ud = o->ud};
			s->dl = dl;
			mux_dgram_cb done = o->done;
			void *oud = o->oud;
			o->done = NULL;
			o->cb = NULL;
			open_done(o, NULL);
			done(oud, &dl->base, NULL);
			continue;
		}
		endpoint *ep = endpoint_new_chan(m->w, &s->ch, NULL, NULL, NULL);
		if (!ep) { /* sub_close ran: its End is queued */
			s->gone = true;
			open_done(o, &(connect_result){.err = PROTO_DIAL_GENERAL, .msg = msgs[M_NOMEM]});
			continue;
		}
		s->has_ep = true;
		endpoint_set_origin(ep, m->origin);
		open_done(o, &(connect_result){.ok = true, .ep = ep});
	}
}

static void on_idle(uv_timer_t *t)
{
	mux_conn *m = t->data;
	if (!m->subs.head && !m->opens.head)
		die(m, msgs[M_IDLE]);
	kick(m);
}

static void client_service(mux_conn *m)
{
	m->servicing = true;
	uint64_t before = m->moved;
	if (m->below && !m->dead)
		read_frames(m);
	start_opens(m);
	for (list_node *n = m->subs.head; n; n = n->next)
		serve_sub(m, LIST_ENTRY(n, msub, node));
	while (m->below && !m->dead && m->out_len && endpoint_can_send(m->below)) {
		ssize_t k = endpoint_send(m->below, m->out, m->out_len);
		if (k < 0) {
			die(m, endpoint_error(m->below));
			break;
		}
		if (k == 0)
			break;
		memmove(m->out, m->out + k, m->out_len - (size_t)k);
		m->out_len -= (size_t)k;
		m->moved += (size_t)k;
	}
	for (list_node *n = m->subs.head, *next; n; n = next) {
		next = n->next;
		msub *s = LIST_ENTRY(n, msub, node);
		if (!s->has_ep && (s->gone || s->end_sent) && !s->dl)
			sub_free(s);
	}
	m->servicing = false;
	if (m->dead) {
		while (m->opens.head)
			open_done(LIST_ENTRY(m->opens.head, mopen, node),
			          &(connect_result){.err = PROTO_DIAL_GENERAL, .msg = m->why});
		if (!m->subs.head)
			session_free(m);
		return;
	}
	if (!m->subs.head && !m->opens.head) {
		if (!uv_is_active((uv_handle_t *)&m->idle))
			uv_timer_start(&m->idle, on_idle, MUX_IDLE_MS, 0);
	} else {
		uv_timer_stop(&m->idle);
	}
	if (m->moved != before)
		kick(m);
}

static void on_below_event(void *ud)
{
	mux_conn *m = ud;
	if (!m->dead && endpoint_at_eof(m->below))
		die(m, msgs[M_SESSION_ENDED]);
	service(m);
}

static void on_below_error(void *ud, const char *why)
{
	mux_conn *m = ud;
	die(m, why);
	service(m);
}

static const endpoint_events below_events = {
	.on_readable = on_below_event,
	.on_writable = on_below_event,
	.on_error = on_below_error,
};

static void on_dialled(const connect_result *r, void *data)
{
	mux_conn *m = data;
	m->dial = NULL;
	if (!r->ok || r->blackhole) {
		if (r->ok) /* a blackhole is no session */
			die(m, msgs[M_SESSION_ENDED]);
		else
			die(m, r->msg ? r->msg : msgs[M_SESSION_ENDED]);
		service(m);
		return;
	}
	m->below = r->ep;
	endpoint_set_events(m->below, &below_events, m);
	endpoint_want_read(m->below, true);
	service(m);
}

/* A session of this worker for origin that takes one more sub-flow. */
static mux_conn *find_session(uint64_t origin)
{
	for (list_node *n = clients.head; n; n = n->next) {
		mux_conn *m = LIST_ENTRY(n, mux_conn, reg);
		if (m->origin != origin || m->dead || m->freed)
			continue;
		/* the ones waiting count as open */
		mux_client probe = m->ccore;
		bool full = mux_client_full(&probe);
		for (size_t i = 0; !full && i < m->n_opens; i++) {
			probe.n_open++;
			probe.last_id++;
			full = mux_client_full(&probe);
		}
		if (!full)
			return m;
	}
	return NULL;
}

static mux_conn *client_new(worker *w, uint64_t origin, unsigned concurrency)
{
	mux_conn *m = calloc(1, sizeof *m);
	if (!m || !(m->in = malloc(2 * MUX_FRAME_MAX)) || !(m->out = malloc(OUT_CAP))) {
		if (m) {
			free(m->in);
			free(m);
		}
		return NULL;
	}
	if (!(m->dgram = malloc(DGRAM_HEADROOM + MUX_DATA_MAX))) {
		free(m->in);
		free(m->out);
		free(m);
		return NULL;
	}
	m->client = true;
	m->w = w;
	m->origin = origin;
	mux_client_init(&m->ccore, concurrency);
	uv_idle_init(worker_loop(w), &m->kick);
	uv_timer_init(worker_loop(w), &m->idle);
	m->kick.data = m;
	m->idle.data = m;
	m->handles = 2;
	list_push_back(&clients, &m->reg);
	return m;
}

/* An open waiting on a session with room, dialled if none has. */
static connect_pending *queue_open(worker *w, uint64_t origin, unsigned concurrency,
                                   mux_dial_fn dial, void *ctx, mopen *o);

connect_pending *mux_open(worker *w, uint64_t origin, unsigned concurrency, mux_dial_fn dial,
                          void *ctx, const addr_dest *dest, connect_cb cb, void *data)
{
	mopen *o = calloc(1, sizeof *o);
	if (!o)
		return NULL;
	*o = (mopen){.dest = *dest, .cb = cb, .data = data};
	o->dest.network = ADDR_TCP;
	return queue_open(w, origin, concurrency, dial, ctx, o);
}

connect_pending *mux_open_datagram(worker *w, uint64_t origin, unsigned concurrency,
                                   mux_dial_fn dial, void *ctx, const addr_dest *dest,
                                   const dgram_handlers *h, void *ud, mux_dgram_cb done,
                                   void *oud)
{
	mopen *o = calloc(1, sizeof *o);
	if (!o)
		return NULL;
	*o = (mopen){.dest = *dest, .h = h, .ud = ud, .done = done, .oud = oud};
	o->dest.network = ADDR_UDP;
	return queue_open(w, origin, concurrency, dial, ctx, o);
}

static connect_pending *queue_open(worker *w, uint64_t origin, unsigned concurrency,
                                   mux_dial_fn dial, void *ctx, mopen *o)
{
	mux_conn *m = find_session(origin);
	if (!m) {
		m = client_new(w, origin, concurrency);
		if (!m) {
			free(o);
			return NULL;
		}
		m->dial = dial(ctx, w, on_dialled, m);
		if (!m->dial && !m->below && !m->dead) {
			m->dead = true;
			session_free(m);
			free(o);
			return NULL;
		}
	}
	o->base.cancel = open_cancel;
	o->m = m;
	list_push_back(&m->opens, &o->node);
	m->n_opens++;
	kick(m);
	return &o->base;
}

size_t mux_session_count(worker *w)
{
	(void)w;
	size_t n = 0;
	for (const list_node *i = sessions.head; i; i = i->next)
		n++;
	return n;
}
