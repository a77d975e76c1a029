/* vmess_in.c - the VMess AEAD inbound: users' keys, one replay filter per inbound, refused clients drained, the body as a layer on the upstream, UDP as one chunk a datagram. */
#include "inbound/vmess_in.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "crypto/ossl.h"

#include "proto/vless.h"
#include "proto/vmess_server.h"
#include "runtime/endpoint.h"

enum { MSG_UUID, MSG_KEYS, MSG_BODY, MSG_BAD_CHUNK };
static const char *const msgs[] = {
	[MSG_UUID] = "a settings.users id is not a UUID",
	[MSG_KEYS] = "cannot derive a user's keys",
	[MSG_BODY] = "vmess: cannot start the body",
	[MSG_BAD_CHUNK] = "vmess: bad chunk",
};

/* Replies queued to the client beyond this are dropped (UDP), as
 * stream_udp_in does. */
#define VMESS_UDP_QUEUE_MAX (256 * 1024)
/* One sealed chunk of a datagram; one opened datagram as a VLESS frame. */
#define UDP_TX_MAX (VMESS_CHUNK_PAYLOAD_MAX + VMESS_CHUNK_OVERHEAD_MAX)
#define UDP_RX_MAX (VLESS_UDP_HEADER_LEN + VMESS_CHUNK_SIZE_MAX)

/* The inbound's replay filter, one for all its workers: a replayed
 * request may come in on any worker (SO_REUSEPORT spreads connections by
 * their addresses, and a replay comes from another port), so per-worker
 * filters would miss it. The lock is held for one lookup (at most
 * VMESS_REPLAY_PROBES slots), next to the KDFs every connection runs. */
static void *shared_new(void) { return inbound_locked_new(sizeof(vmess_replay)); }

static int replay(void *ud, const uint8_t id[VMESS_AUTH_ID_LEN], int64_t expiry, int64_t now)
{
	inbound_locked *s = ud;
	pthread_mutex_lock(&s->lock);
	int r = vmess_replay_add((vmess_replay *)s->data, id, expiry, now);
	pthread_mutex_unlock(&s->lock);
	return r;
}

typedef struct vmess_in {
	vmess_server core;
	layer *udp_body;  /* owned: the body codec after a UDP request */
	dgram_link *link; /* owned: after a UDP request */
	addr_dest udp_dest;
	uint8_t *frames; /* owned, UDP_RX_MAX bytes: datagrams the codec opened */
} vmess_in;

/* An account is a vmess_account: the user's command and AuthID keys. */
static const char *account(const inbound_user *u, uint8_t *out)
{
	uint8_t uuid[VLESS_UUID_LEN];
	if (vless_uuid_parse(u->id, uuid))
		return msgs[MSG_UUID];
	vmess_account a;
	int r = vmess_account_init(&a, uuid);
	memcpy(out, &a, sizeof a);
	OPENSSL_cleanse(&a, sizeof a);
	return r ? msgs[MSG_KEYS] : NULL;
}

static int init(in_conn *ic)
{
	vmess_in *v = ic->state;
	vmess_server_init(&v->core, (const vmess_account *)ic->in->accounts, ic->in->n_accounts,
	                  ic->in->shared ? replay : NULL, ic->in->shared);
	in_conn_close_time_start(ic); /* a short request closes when a refused one does */
	return 0;
}

/* The client's chunks after a UDP request: each datagram goes to the
 * request's one target. */
static ssize_t udp_feed(in_conn *ic, const uint8_t *in, size_t len, proto_event *ev)
{
	vmess_in *v = ic->state;
	*ev = (proto_event){.kind = PROTO_EV_NONE};
	size_t used = 0;
	for (;;) {
		layer_buf down = {v->frames, 0, UDP_RX_MAX};
		ssize_t n = v->udp_body->ops->from_above(v->udp_body, in + used, len - used, &down);
		if (n < 0) {
			in_conn_log_end(ic, msgs[MSG_BAD_CHUNK]);
			conn_close(ic->c);
			return INBOUND_FEED_GONE;
		}
		used += (size_t)n;
		size_t off = 0, plen = 0;
		ssize_t f;
		while (off < down.len &&
		       (f = vless_udp_decode(v->frames + off, down.len - off, &plen)) > 0) {
			(void)v->link->ops->send_to(v->link, &v->udp_dest,
			                            v->frames + off + VLESS_UDP_HEADER_LEN, plen);
			off += (size_t)f;
		}
		if (down.len)
			conn_touch(ic->c);
		else if (n == 0)
			break;
	}
	return (ssize_t)used;
}

static ssize_t feed(in_conn *ic, const uint8_t *in, size_t len, proto_event *ev)
{
	vmess_in *v = ic->state;
	if (v->udp_body)
		return udp_feed(ic, in, len, ev);
	ssize_t n = vmess_server_feed(&v->core, in, len, (int64_t)time(NULL), &ic->out, ev);
	if (n >= 0 && ev->kind == PROTO_EV_OPEN)
		in_conn_close_time_stop(ic);
	return n;
}

static layer *body_new(vmess_in *v)
{
	uint8_t seed[32];
	if (RAND_bytes(seed, sizeof seed) != 1)
		return NULL;
	layer *l = vmess_server_body_new(&v->core, seed);
	OPENSSL_cleanse(seed, sizeof seed);
	return l;
}

/* The body codec goes on top of the upstream's stack (a new one on a plain
 * upstream), so the relay moves the client's chunks through it. */
static int push_body(vmess_in *v, endpoint *ep)
{
	layer *l = body_new(v);
	if (!l)
		return -1;
	stack *st = endpoint_stack(ep);
	if (st)
		return stack_push(st, l); /* nothing has moved on it: the dial just ended */
	return in_conn_start_upstream(ep, l);
}

static int opened(in_conn *ic, const connect_result *r)
{
	vmess_in *v = ic->state;
	if (r && r->ep && push_body(v, r->ep))
		return -1;
	return vmess_server_opened(&v->core, &ic->out);
}

static void udp_reply(const addr_dest *from, uint8_t *data, size_t len, void *ud)
{
	(void)from; /* every datagram is the request's one target's */
	in_conn *ic = ud;
	vmess_in *v = ic->state;
	conn *c = ic->c;
	if (conn_write_queue(c) > VMESS_UDP_QUEUE_MAX || len > VMESS_CHUNK_PAYLOAD_MAX)
		return;
	/* the link leaves DGRAM_HEADROOM writable bytes before data */
	uint8_t *frame = data - VLESS_UDP_HEADER_LEN;
	if (vless_udp_encode(len, frame, VLESS_UDP_HEADER_LEN) < 0)
		return;
	uint8_t out[UDP_TX_MAX];
	layer_buf up = {out, 0, sizeof out};
	ssize_t n = v->udp_body->ops->from_below(v->udp_body, frame, VLESS_UDP_HEADER_LEN + len,
	                                         &up, NULL);
	if (n < 0) {
		conn_close(c);
		return;
	}
	if (up.len && conn_write(c, out, up.len))
		conn_close(c);
	conn_touch(c);
}

static const dgram_handlers handlers = {.recv = udp_reply};

/* Room for the reason a datagram link could not open. */
#define WHY_MAX 200

/* The datagram link, then the response header; the client's stream stays
 * driven and its chunks go to udp_feed. */
static void udp_open(in_conn *ic, const proto_event *ev)
{
	vmess_in *v = ic->state;
	v->udp_body = body_new(v);
	v->frames = malloc(UDP_RX_MAX);
	if (!v->udp_body || !v->frames) {
		in_conn_log_end(ic, msgs[MSG_BODY]);
		conn_close(ic->c);
		return;
	}
	v->udp_dest = ev->dest;
	v->udp_dest.network = ADDR_UDP;
	in_conn_set_flow(ic, &v->udp_dest, ev->user);
	char why[WHY_MAX];
	v->link = in_conn_open_datagram(ic, &handlers, ic, why, sizeof why);
	if (!v->link) {
		in_conn_log_end(ic, why);
		conn_close(ic->c);
		return;
	}
	conn_request_done(ic->c);
	if (vmess_server_opened(&v->core, &ic->out) || !in_conn_flush(ic)) {
		conn_close(ic->c);
		return;
	}
	conn_drive(ic->c);
}

static void free_state(in_conn *ic)
{
	vmess_in *v = ic->state;
	if (v->link)
		v->link->ops->close(v->link);
	if (v->udp_body)
		v->udp_body->ops->free(v->udp_body);
	free(v->frames);
	OPENSSL_cleanse(&v->core, sizeof v->core);
}

const inbound_proto_ops vmess_in_ops = {
	.size = sizeof(vmess_in),
	.account_size = sizeof(vmess_account),
	.account = account,
	.shared_new = shared_new,
	.shared_free = inbound_locked_free,
	.init = init,
	.feed = feed,
	.refused = in_conn_drain,
	.udp_open = udp_open,
	.opened = opened,
	.free = free_state,
};
