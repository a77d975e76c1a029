/* dns_service.c - one worker's DNS service: queries from client streams, datagram links and the resolver, answered from hosts, the shared cache or an upstream over UDP, TCP, TLS or HTTPS. */
#include "runtime/dns_service.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "base/list.h"
#include "base/log.h"
#include "proto/dns_frame.h"
#include "proto/dns_msg.h"
#include "runtime/chan.h"
#include "runtime/dial.h"
#include "runtime/endpoint.h"
#include "runtime/endpoint_over.h"
#include "transport/stack.h"

enum {
	MSG_ZERO_LENGTH,
	MSG_SHORT,
	MSG_UPSTREAM_FAILED,
	MSG_BLACKHOLED,
	MSG_NO_MEMORY,
	MSG_NO_DIALER,
	MSG_DRAINED,
	MSG_CLOSED,
	MSG_SILENT,
	MSG_UNREAD,
	MSG_COUNT_
};
static const char *const msgs[MSG_COUNT_] = {
	[MSG_ZERO_LENGTH] = "dns: a zero-length message",
	[MSG_SHORT] = "dns: a message shorter than its header",
	[MSG_UPSTREAM_FAILED] = "dns server %s: %s",
	[MSG_BLACKHOLED] = "the route blackholes it",
	[MSG_NO_MEMORY] = "out of memory",
	[MSG_DRAINED] = "the outbound this connection was opened on was drained",
	[MSG_CLOSED] = "the server closed the connection",
	[MSG_UNREAD] = "dns: the client leaves its answers unread",
	[MSG_SILENT] = "no answer within the timeout: the connection is replaced",
	[MSG_NO_DIALER] = "dns: this thread routes no flow, so it cannot reach a through_proxy server",
};

/* The queries at the upstreams by the id they went with: open addressing,
 * at most half full. The ids are random (RFC 5452 4.3), drawn from
 * getrandom(2) a buffer at a time. */
#define ID_SLOTS (2 * DNS_SVC_MAX_INFLIGHT)
#define RANDOM_BUF 256

/* The most a UDP answer carries whatever EDNS size the client offers; a
 * longer one goes with TC, the header and the question, and the client
 * asks again over TCP. 1,232 bytes fit the IPv6 minimum MTU with its
 * headers (DNS flag day 2020), and cap what a spoofed query can reflect
 * at about 30 times its size (issue 32 N7: 126 times at EDNS 4,600). */
#define DNS_SVC_UDP_MAX 1232

typedef struct svc_req svc_req;
/* The answer to a query: msg has DGRAM_HEADROOM writable bytes before it;
 * len 0: none (a query that could not even be answered FORMERR). */
typedef void (*req_cb)(void *ud, svc_req *r, uint8_t *msg, size_t len);

typedef enum req_state { R_NEW, R_READY, R_WAITING, R_UPSTREAM } req_state;

typedef struct upconn upconn;
typedef struct usock usock;

struct svc_req {
	dns_svc *s;
	req_state state;
	list_node link;   /* R_READY: s->ready; R_UPSTREAM: s->deadlines; R_WAITING: uc->waiting */
	list_node owner;  /* in *owner_list, while the client has it */
	list *owner_list;
	size_t *owner_count;
	req_cb cb; /* NULL: a prefetch, whose answer only fills the cache */
	void *ud;
	bool udp;
	uint8_t retries;
	size_t up;       /* the upstream asked */
	upconn *uc;      /* the stream it was sent on, R_UPSTREAM */
	usock *us;       /* the UDP socket it was sent from, R_UPSTREAM */
	uint16_t up_id;  /* the id it went with */
	uint64_t deadline;
	uint64_t tick;   /* R_READY: the idle round it was queued in */
	addr_dest to;    /* a link's: where the query was sent */
	uint8_t *ans;    /* R_READY: DGRAM_HEADROOM + ans_len bytes */
	size_t ans_len;
	dns_question q;
	size_t qlen;
	uint8_t query[]; /* the client's bytes */
};

typedef enum uc_state { UC_IDLE, UC_DIALING, UC_HANDSHAKE, UC_READY } uc_state;

/* One upstream stream connection (tcp, tls, https). */
struct upconn {
	dns_svc *s;
	size_t up;
	uc_state st;
	connect_pending *dialing;
	bool *dial_ran;
	endpoint *ep;
	uint64_t origin; /* the outbound version its stream came through */
	list waiting; /* svc_req.link, to send once ready */
	uint8_t *out;
	size_t out_len, out_cap;
	dns_tcp_reader *tr; /* tcp, tls */
	doh_reader *hr;     /* https */
	bool no_more;       /* the server said Connection: close */
	size_t inflight;
	uv_timer_t idle;
};

struct dns_svc {
	worker *w;
	uv_loop_t *loop;
	dns_svc_conf *conf;
	dns_svc_dialer dialer;
	dns_backend backend;
	size_t refs;
	bool dead;
	svc_req *ids[ID_SLOTS]; /* by up_id, linear probing */
	size_t n_ids;
	uint8_t random[RANDOM_BUF];
	size_t random_left;
	uint64_t tick; /* idle rounds run */
	list ready;     /* answers to deliver from the idle */
	list deadlines; /* R_UPSTREAM, earliest first (one timeout for all) */
	list kicks;     /* streams with work for the idle */
	list opens;     /* svc_open.link: streams to hand over from the idle */
	uv_idle_t idle;
	uv_timer_t timer;
	usock **udp; /* per upstream: the socket queries go from now; NULL until used */
	upconn **conns; /* per upstream, NULL until used */
	int open_handles;
	dns_svc_stats own;
	dns_svc_stats *stats; /* the worker's, or own */
	uint8_t rbuf[DNS_FRAME_MAX];
};

static void kick_idle(dns_svc *s);
static void rearm(dns_svc *s);
static void send_up(dns_svc *s, svc_req *r);
static void conn_end(upconn *uc, const char *why, bool failed_open);
static void svc_unref(dns_svc *s);
static int id_take(dns_svc *s, svc_req *r);
static svc_req *id_find(const dns_svc *s, uint16_t id);
static void id_drop(dns_svc *s, svc_req *r);
static void send_stream(dns_svc *s, svc_req *r);
static void usock_done(usock *us);

/* ---- requests ---- */

static void req_free(svc_req *r)
{
	if (r->owner_list) {
		list_remove(r->owner_list, &r->owner);
		(*r->owner_count)--;
	}
	free(r->ans);
	free(r);
}

/* Takes r out of whatever list holds it and its slot. */
static void req_detach(svc_req *r)
{
	dns_svc *s = r->s;
	switch (r->state) {
	case R_READY:
		list_remove(&s->ready, &r->link);
		break;
	case R_WAITING:
		list_remove(&s->conns[r->up]->waiting, &r->link);
		id_drop(s, r);
		break;
	case R_UPSTREAM:
		list_remove(&s->deadlines, &r->link);
		id_drop(s, r);
		if (r->uc && r->uc->inflight)
			r->uc->inflight--;
		if (r->us)
			usock_done(r->us);
		break;
	case R_NEW:
		break;
	}
	r->state = R_NEW;
	r->uc = NULL;
	r->us = NULL;
}

/* Into the deadline list, kept earliest first: a query that waited for a
 * connection or came back for TCP goes in before later ones (a walk from
 * the tail, where it almost always belongs). */
static void deadline_insert(dns_svc *s, svc_req *r)
{
	list_node *at = s->deadlines.tail;
	while (at && LIST_ENTRY(at, svc_req, link)->deadline > r->deadline)
		at = at->prev;
	if (!at) {
		list_push_front(&s->deadlines, &r->link);
		return;
	}
	r->link.prev = at;
	r->link.next = at->next;
	if (at->next)
		at->next->prev = &r->link;
	else
		s->deadlines.tail = &r->link;
	at->next = &r->link;
}

static void req_cancel(svc_req *r)
{
	req_detach(r);
	req_free(r);
}

static void ready_reply(svc_req *r, uint8_t rcode, const struct sockaddr_storage *addrs,
                        size_t n);

/* r cannot be answered: its client gets SERVFAIL; a prefetch just ends. */
static void fail_req(svc_req *r)
{
	if (r->cb)
		ready_reply(r, DNS_RCODE_SERVFAIL, NULL, 0);
	else
		req_cancel(r);
}

/* r's answer is msg[0, n) (copied, id set to the client's, cut to the
 * client's UDP size): delivered from the idle. */
static void ready(svc_req *r, const uint8_t *msg, size_t n)
{
	dns_svc *s = r->s;
	req_detach(r);
	free(r->ans);
	r->ans = malloc(DGRAM_HEADROOM + (n ? n : 1));
	r->ans_len = 0;
	if (r->ans && n) {
		uint8_t *m = r->ans + DGRAM_HEADROOM;
		memcpy(m, msg, n);
		if (n >= 2)
			dns_msg_set_id(m, r->q.id);
		size_t cap = r->q.udp_size < DNS_SVC_UDP_MAX ? r->q.udp_size : DNS_SVC_UDP_MAX;
		r->ans_len = r->udp ? dns_msg_truncate(m, n, r->q.qend, cap) : n;
	}
	r->state = R_READY;
	r->tick = s->tick;
	list_push_back(&s->ready, &r->link);
	kick_idle(s);
}

/* An answer built here (hosts, errors). */
static void ready_reply(svc_req *r, uint8_t rcode, const struct sockaddr_storage *addrs, size_t n)
{
	uint8_t buf[DNS_UDP_PLAIN_MAX * 2];
	int len = dns_msg_build_reply(&r->q, r->query, rcode, addrs, n, DNS_SVC_HOST_TTL, buf,
	                              sizeof buf);
	if (rcode == DNS_RCODE_SERVFAIL)
		r->s->stats->servfail++;
	ready(r, buf, len > 0 ? (size_t)len : 0);
}

/* FORMERR for a query whose question could not be read, NOTIMP for an
 * opcode other than QUERY: its header only (RFC 1035 4.1.1), or nothing
 * when not even that came. */
static void ready_formerr(svc_req *r, uint8_t rcode)
{
	r->s->stats->formerr++;
	if (r->qlen < DNS_HEADER_LEN) {
		ready(r, NULL, 0);
		return;
	}
	uint8_t h[DNS_HEADER_LEN] = {0};
	h[0] = r->query[0];
	h[1] = r->query[1];
	h[2] = (uint8_t)(0x80 | (r->query[2] & 0x79)); /* QR, the opcode and RD kept */
	h[3] = rcode;
	r->q.id = (uint16_t)(h[0] << 8 | h[1]);
	r->udp = false; /* nothing to cut */
	ready(r, h, sizeof h);
}

static const dns_host *host_of(const dns_svc_conf *c, const char *name)
{
	for (size_t i = 0; i < c->n_hosts; i++)
		if (strcmp(c->hosts[i].name, name) == 0)
			return &c->hosts[i];
	return NULL;
}

/* Takes a client's query (copied): answered later through cb, never
 * inside this call. NULL without memory. */
static svc_req *ask(dns_svc *s, const uint8_t *m, size_t n, bool udp, req_cb cb, void *ud)
{
	svc_req *r = calloc(1, sizeof *r + n);
	if (!r)
		return NULL;
	r->s = s;
	r->cb = cb;
	r->ud = ud;
	r->udp = udp;
	r->qlen = n;
	memcpy(r->query, m, n);
	s->stats->queries++;
	int rc = dns_msg_parse_query(r->query, n, &r->q);
	if (rc == DNS_MSG_ENOTQUERY && (r->query[2] & 0x80)) {
		ready(r, NULL, 0); /* a response: never answered, so two services cannot loop */
		return r;
	}
	if (rc != DNS_MSG_OK) {
		ready_formerr(r, rc == DNS_MSG_ENOTQUERY ? DNS_RCODE_NOTIMP : DNS_RCODE_FORMERR);
		return r;
	}
	if (s->dead) {
		ready_reply(r, DNS_RCODE_SERVFAIL, NULL, 0);
		return r;
	}
	const dns_host *h = r->q.qclass == DNS_CLASS_IN ? host_of(s->conf, r->q.name) : NULL;
	if (h) {
		s->stats->hosts++;
		ready_reply(r, DNS_RCODE_NOERROR, h->addrs, h->n);
		return r;
	}
	if (s->conf->cache) {
		uint8_t buf[DNS_ANSWERS_ENTRY_MAX];
		size_t len;
		dns_answers_result c =
			dns_answers_lookup(s->conf->cache, &r->q, uv_now(s->loop), buf, sizeof buf, &len);
		if (c != DNS_ANSWERS_MISS) {
			if (c == DNS_ANSWERS_HIT_PREFETCH && s->conf->prefetch) {
				svc_req *p = calloc(1, sizeof *p + n);
				if (p) {
					*p = (svc_req){.s = s, .qlen = n, .q = r->q};
					memcpy(p->query, m, n);
					send_up(s, p);
				}
			}
			s->stats->cached++;
			ready(r, buf, len);
			return r;
		}
	}
	send_up(s, r);
	return r;
}

/* ---- upstream answers ---- */

static void answered(dns_svc *s, size_t up, upconn *uc, usock *us, const uint8_t *m, size_t n)
{
	if (n < DNS_HEADER_LEN)
		return;
	uint16_t id = (uint16_t)(m[0] << 8 | m[1]);
	svc_req *r = id_find(s, id);
	/* only the transport it went on answers it: a late UDP answer cannot
	 * take a query that moved to TCP */
	if (!r || r->state != R_UPSTREAM || r->up != up || r->uc != uc || r->us != us)
		return;
	dns_answer_info info;
	if (dns_msg_scan_answer(m, n, &r->q, &info) != DNS_MSG_OK)
		return; /* not an answer to it (or forged): the real one or the timeout decides */
	if (!uc && info.tc && s->dead) {
		fail_req(r);
		return;
	}
	if (!uc && info.tc) {
		/* cut to fit UDP: ask again over TCP (RFC 7766 5), the
		 * whole answer the client's own limit then cuts or not */
		req_detach(r);
		if (id_take(s, r)) {
			fail_req(r);
			return;
		}
		r->deadline = uv_now(s->loop) + s->conf->timeout_ms; /* the lists stay in order */
		s->stats->upstream++;
		send_stream(s, r);
		return;
	}
	if (s->conf->cache)
		dns_answers_store(s->conf->cache, &r->q, m, n, &info, uv_now(s->loop));
	if (!r->cb) { /* a prefetch */
		req_cancel(r);
		return;
	}
	ready(r, m, n);
}

/* ---- upstreams over UDP ---- */

static void handle_gone(dns_svc *s)
{
	if (--s->open_handles == 0) {
		dns_svc_conf_unref(s->conf);
		free(s->udp);
		free(s->conns);
		free(s);
	}
}

static void on_handle_closed(uv_handle_t *h) { handle_gone(h->data); }

static void on_uc_closed(uv_handle_t *h)
{
	upconn *uc = h->data;
	dns_svc *s = uc->s;
	free(uc->out);
	free(uc);
	handle_gone(s);
}

/* A UDP socket of one upstream. Each sends DNS_SVC_UDP_ROTATE queries at
 * most, then the next query opens another: the source port changes as
 * often as that (RFC 5452 4.5), and a retired socket closes once the
 * answers it waits for came or timed out. */
struct usock {
	uv_udp_t h; /* first */
	dns_svc *s;
	size_t up;
	size_t inflight;
	uint32_t sent;
	bool retired;
};

static void on_usock_closed(uv_handle_t *h)
{
	usock *us = (usock *)h;
	dns_svc *s = us->s;
	free(us);
	handle_gone(s);
}

static void usock_close(usock *us) { uv_close((uv_handle_t *)&us->h, on_usock_closed); }

static void usock_done(usock *us)
{
	if (--us->inflight == 0 && us->retired)
		usock_close(us);
}

static void udp_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	(void)suggested;
	dns_svc *s = ((usock *)h)->s;
	*buf = uv_buf_init((char *)s->rbuf, sizeof s->rbuf);
}

static void udp_recv(uv_udp_t *u, ssize_t nread, const uv_buf_t *buf, const struct sockaddr *from,
                     unsigned flags)
{
	(void)from;
	(void)flags;
	usock *us = (usock *)u;
	if (nread > 0)
		answered(us->s, us->up, NULL, us, (const uint8_t *)buf->base, (size_t)nread);
}

/* The socket up's next query goes from: the current one, or a new one
 * (on a new port) once it sent its share. NULL when none can be made. */
static usock *udp_of(dns_svc *s, size_t up)
{
	usock *cur = s->udp[up];
	if (cur && cur->sent < DNS_SVC_UDP_ROTATE)
		return cur;
	if (cur) {
		cur->retired = true;
		s->udp[up] = NULL;
		if (cur->inflight == 0)
			usock_close(cur);
	}
	usock *us = calloc(1, sizeof *us);
	if (!us || uv_udp_init(s->loop, &us->h)) {
		free(us);
		return NULL;
	}
	us->s = s;
	us->up = up;
	s->open_handles++;
	struct sockaddr_storage ss;
	addr_dest_to_sockaddr(&s->conf->ups[up].server, &ss);
	if (uv_udp_connect(&us->h, (const struct sockaddr *)&ss) ||
	    uv_udp_recv_start(&us->h, udp_alloc, udp_recv)) {
		usock_close(us);
		return NULL;
	}
	s->udp[up] = us;
	return us;
}

/* ---- upstreams over streams ---- */

static const endpoint_events uc_events;

static void conn_flush(upconn *uc)
{
	while (uc->out_len && uc->ep) {
		ssize_t k = endpoint_send(uc->ep, uc->out, uc->out_len);
		if (k < 0) {
			conn_end(uc, endpoint_error(uc->ep), uc->st != UC_READY);
			return;
		}
		if (k == 0)
			return;
		memmove(uc->out, uc->out + k, uc->out_len - (size_t)k);
		uc->out_len -= (size_t)k;
	}
}

/* Frames r's query (with its upstream id) into uc's output. */
static int conn_put(upconn *uc, svc_req *r)
{
	const dns_upstream_conf *u = &uc->s->conf->ups[uc->up];
	size_t need = r->qlen + 2;
	if (u->proto == DNS_UP_HTTPS) /* the request head around it */
		need += 256 + strlen(u->host) + strlen(u->path);
	if (uc->out_cap - uc->out_len < need) {
		size_t cap = uc->out_cap ? uc->out_cap : 4096;
		while (cap - uc->out_len < need)
			cap *= 2;
		uint8_t *o = realloc(uc->out, cap);
		if (!o)
			return -1;
		uc->out = o;
		uc->out_cap = cap;
	}
	uint8_t *msg = r->query;
	uint8_t saved[2] = {msg[0], msg[1]};
	dns_msg_set_id(msg, r->up_id);
	int rc = 0;
	if (u->proto == DNS_UP_HTTPS) {
		int k = doh_request(u->host, u->server.port, u->path, msg, r->qlen,
		                    uc->out + uc->out_len, uc->out_cap - uc->out_len);
		if (k < 0)
			rc = -1;
		else
			uc->out_len += (size_t)k;
	} else {
		dns_tcp_prefix(uc->out + uc->out_len, r->qlen);
		memcpy(uc->out + uc->out_len + 2, msg, r->qlen);
		uc->out_len += 2 + r->qlen;
	}
	msg[0] = saved[0];
	msg[1] = saved[1];
	return rc;
}

static void conn_send(upconn *uc, svc_req *r)
{
	if (conn_put(uc, r)) {
		fail_req(r);
		return;
	}
	r->uc = uc;
	uc->inflight++;
	uv_timer_stop(&uc->idle);
}

static void on_idle_conn(uv_timer_t *t);

static void conn_ready(upconn *uc)
{
	uc->st = UC_READY;
	while (uc->waiting.head) {
		svc_req *r = LIST_ENTRY(uc->waiting.head, svc_req, link);
		list_remove(&uc->waiting, &r->link);
		r->state = R_UPSTREAM;
		deadline_insert(uc->s, r);
		conn_send(uc, r);
	}
	conn_flush(uc);
	if (uc->ep && uc->inflight == 0) /* all it waited for expired meanwhile */
		uv_timer_start(&uc->idle, on_idle_conn, DNS_SVC_IDLE_MS, 0);
}

static void on_idle_conn(uv_timer_t *t)
{
	upconn *uc = t->data;
	if (uc->inflight == 0 && !uc->waiting.head)
		conn_end(uc, NULL, false);
}

static void conn_read(upconn *uc)
{
	dns_svc *s = uc->s;
	for (;;) {
		const uint8_t *d;
		size_t n = endpoint_app_in(uc->ep, &d);
		if (n == 0)
			break;
		size_t off = 0;
		int rc = 0;
		const char *err = NULL;
		while (off < n) {
			const uint8_t *msg;
			size_t used = 0, len;
			rc = uc->hr ? doh_feed(uc->hr, d + off, n - off, &used, &msg, &len, &err)
			            : dns_tcp_feed(uc->tr, d + off, n - off, &used, &msg, &len);
			off += used;
			if (rc < 0)
				break;
			if (rc == 1) {
				if (uc->hr && doh_reader_closing(uc->hr))
					uc->no_more = true;
				answered(s, uc->up, uc, NULL, msg, len);
			} else if (used == 0) {
				break;
			}
		}
		if (endpoint_app_done(uc->ep, off)) {
			conn_end(uc, endpoint_error(uc->ep), false);
			return;
		}
		if (rc < 0) {
			conn_end(uc, err ? err : msgs[MSG_ZERO_LENGTH], false);
			return;
		}
	}
	if (endpoint_at_eof(uc->ep)) {
		/* before the handshake ended nothing can come of reconnecting
		 * at once: what waits is answered SERVFAIL */
		bool open = uc->st == UC_READY;
		const char *why = uc->hr ? doh_reader_eof(uc->hr, uc->inflight > 0) : NULL;
		if (!why && (!open || uc->inflight))
			why = msgs[MSG_CLOSED];
		conn_end(uc, why, !open);
		return;
	}
	if (uc->no_more && uc->inflight == 0) {
		conn_end(uc, NULL, false); /* the server closes it: the waiting go on a new one */
		return;
	}
	if (uc->inflight == 0 && uc->st == UC_READY)
		uv_timer_start(&uc->idle, on_idle_conn, DNS_SVC_IDLE_MS, 0);
}

static void uc_on_readable(void *ud)
{
	upconn *uc = ud;
	if (uc->st == UC_HANDSHAKE && endpoint_ready(uc->ep))
		conn_ready(uc);
	if (uc->ep)
		conn_read(uc);
}

static void uc_on_writable(void *ud)
{
	upconn *uc = ud;
	if (uc->st == UC_HANDSHAKE && endpoint_ready(uc->ep))
		conn_ready(uc);
	else
		conn_flush(uc);
}

static void uc_on_error(void *ud, const char *why)
{
	upconn *uc = ud;
	conn_end(uc, why, uc->st != UC_READY);
}

static const endpoint_events uc_events = {
	.on_readable = uc_on_readable,
	.on_writable = uc_on_writable,
	.on_error = uc_on_error,
};

static void on_dialed(const connect_result *res, void *data)
{
	upconn *uc = data;
	if (uc->dial_ran) {
		*uc->dial_ran = true;
		uc->dial_ran = NULL;
	}
	uc->dialing = NULL;
	const dns_upstream_conf *u = &uc->s->conf->ups[uc->up];
	if (!res->ok || !res->ep) {
		conn_end(uc, res->ok ? msgs[MSG_BLACKHOLED] : res->msg, true);
		return;
	}
	uc->ep = res->ep;
	uc->origin = endpoint_origin(res->ep);
	bool tls = u->proto == DNS_UP_TLS || u->proto == DNS_UP_HTTPS;
	/* through a proxy outbound the stream has layers of its own already:
	 * the TLS goes on an endpoint carried by its app bytes */
	if (tls && !endpoint_plain(uc->ep) && !(uc->ep = endpoint_over(uc->s->w, uc->ep))) {
		conn_end(uc, msgs[MSG_NO_MEMORY], true);
		return;
	}
	endpoint_set_events(uc->ep, &uc_events, uc);
	uc->tr = u->proto == DNS_UP_HTTPS ? NULL : malloc(sizeof *uc->tr);
	uc->hr = u->proto == DNS_UP_HTTPS ? malloc(sizeof *uc->hr) : NULL;
	if (!uc->tr && !uc->hr) {
		conn_end(uc, msgs[MSG_NO_MEMORY], true);
		return;
	}
	if (uc->tr)
		dns_tcp_reader_init(uc->tr);
	else
		doh_reader_init(uc->hr);
	if (tls) {
		char err[128];
		stack *st = stack_new();
		layer *l = st ? tls_client_new(u->tls, u->server_name, err, sizeof err) : NULL;
		if (!l || stack_push(st, l)) {
			stack_free(st);
			conn_end(uc, l ? msgs[MSG_NO_MEMORY] : err, true);
			return;
		}
		if (endpoint_start(uc->ep, st)) {
			conn_end(uc, endpoint_error(uc->ep), true);
			return;
		}
		uc->st = UC_HANDSHAKE;
		endpoint_want_read(uc->ep, true);
		if (endpoint_ready(uc->ep))
			conn_ready(uc);
		return;
	}
	endpoint_want_read(uc->ep, true);
	conn_ready(uc);
}

static void conn_dial(upconn *uc)
{
	dns_svc *s = uc->s;
	const dns_upstream_conf *u = &s->conf->ups[uc->up];
	if (u->through_proxy && !s->dialer.dial) { /* never around the proxy */
		conn_end(uc, msgs[MSG_NO_DIALER], true);
		return;
	}
	uc->st = UC_DIALING;
	bool ran = false;
	uc->dial_ran = &ran;
	connect_pending *p;
	if (u->through_proxy)
		p = s->dialer.dial(s->dialer.self, s->w, &u->server, on_dialed, uc);
	else
		p = dial_tcp(s->w, NULL, &u->server, DIAL_FAMILY_AUTO, false, 0, on_dialed, uc);
	if (ran)
		return; /* answered inside: uc may be gone */
	uc->dial_ran = NULL;
	uc->dialing = p;
	if (!p)
		conn_end(uc, msgs[MSG_NO_MEMORY], true);
}

/* Ends uc's connection (why NULL: quietly, as an idle close). What was
 * sent on it and not answered is sent once more on a new connection, else
 * answered SERVFAIL. What waits for it goes on a new connection, unless
 * the connection failed to open (failed_open: the dial, the route or the
 * TLS handshake), when no answer is coming: it is answered SERVFAIL. */
static void conn_end(upconn *uc, const char *why, bool failed_open)
{
	dns_svc *s = uc->s;
	if (why)
		log_debug("dns", msgs[MSG_UPSTREAM_FAILED], s->conf->ups[uc->up].tag, why);
	if (uc->dialing) {
		uc->dialing->cancel(uc->dialing);
		uc->dialing = NULL;
	}
	if (uc->ep) {
		endpoint_close(uc->ep, false);
		uc->ep = NULL;
	}
	free(uc->tr);
	free(uc->hr);
	uc->tr = NULL;
	uc->hr = NULL;
	uc->out_len = 0;
	uc->no_more = false;
	uc->st = UC_IDLE;
	uv_timer_stop(&uc->idle);
	/* taken out first: detaching and refiling move the table's entries */
	svc_req *sent[DNS_SVC_MAX_INFLIGHT];
	size_t n = 0;
	for (size_t i = 0; i < ID_SLOTS; i++)
		if (s->ids[i] && s->ids[i]->state == R_UPSTREAM && s->ids[i]->uc == uc)
			sent[n++] = s->ids[i];
	for (size_t k = 0; k < n; k++) {
		svc_req *r = sent[k];
		req_detach(r);
		if (r->retries++ == 0 && !s->dead && id_take(s, r) == 0) {
			r->deadline = uv_now(s->loop) + s->conf->timeout_ms;
			r->state = R_WAITING;
			list_push_back(&uc->waiting, &r->link);
		} else {
			fail_req(r);
		}
	}
	uc->inflight = 0;
	if (failed_open || s->dead) {
		while (uc->waiting.head) {
			svc_req *r = LIST_ENTRY(uc->waiting.head, svc_req, link);
			req_detach(r);
			fail_req(r);
		}
		return;
	}
	if (uc->waiting.head)
		conn_dial(uc);
}

size_t dns_svc_drain(dns_svc *s, uint64_t origin)
{
	size_t n = 0;
	for (size_t i = 0; origin && i < s->conf->n_ups; i++) {
		upconn *uc = s->conns[i];
		if (uc && uc->ep && uc->origin == origin) {
			conn_end(uc, msgs[MSG_DRAINED], false);
			n++;
		}
	}
	return n;
}

static upconn *conn_of(dns_svc *s, size_t up)
{
	if (s->conns[up])
		return s->conns[up];
	upconn *uc = calloc(1, sizeof *uc);
	if (!uc)
		return NULL;
	uc->s = s;
	uc->up = up;
	uv_timer_init(s->loop, &uc->idle);
	uc->idle.data = uc;
	s->open_handles++;
	s->conns[up] = uc;
	return uc;
}

/* ---- sending up ---- */

static uint16_t random16(dns_svc *s)
{
	if (s->random_left < 2) {
		ssize_t k = getrandom(s->random, sizeof s->random, GRND_NONBLOCK);
		s->random_left = k > 0 ? (size_t)k : 0;
		if (s->random_left < 2) { /* no entropy yet: vary what is left */
			for (size_t i = 0; i < sizeof s->random; i++)
				s->random[i] = (uint8_t)(s->random[i] * 131 + i + uv_hrtime());
			s->random_left = sizeof s->random;
		}
	}
	s->random_left -= 2;
	return (uint16_t)(s->random[s->random_left] << 8 | s->random[s->random_left + 1]);
}

static svc_req *id_find(const dns_svc *s, uint16_t id)
{
	for (size_t i = id % ID_SLOTS;; i = (i + 1) % ID_SLOTS) {
		svc_req *r = s->ids[i];
		if (!r || r->up_id == id)
			return r;
	}
}

/* Gives r a random id no query out has and files it under it; -1 when
 * DNS_SVC_MAX_INFLIGHT are out. */
static int id_take(dns_svc *s, svc_req *r)
{
	if (s->n_ids >= DNS_SVC_MAX_INFLIGHT)
		return -1;
	uint16_t id;
	do
		id = random16(s);
	while (id_find(s, id));
	size_t i = id % ID_SLOTS;
	while (s->ids[i])
		i = (i + 1) % ID_SLOTS;
	r->up_id = id;
	s->ids[i] = r;
	s->n_ids++;
	return 0;
}

/* Takes r out of the table, moving back the entries after it that its slot
 * held up (deletion from linear probing without tombstones). */
static void id_drop(dns_svc *s, svc_req *r)
{
	size_t i = r->up_id % ID_SLOTS;
	while (s->ids[i] != r)
		i = (i + 1) % ID_SLOTS;
	s->ids[i] = NULL;
	s->n_ids--;
	for (size_t j = (i + 1) % ID_SLOTS; s->ids[j]; j = (j + 1) % ID_SLOTS) {
		size_t home = s->ids[j]->up_id % ID_SLOTS;
		/* j's entry may move to the hole unless its home lies in (i, j] */
		bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
		if (!stays) {
			s->ids[i] = s->ids[j];
			s->ids[j] = NULL;
			i = j;
		}
	}
}

static void send_up(dns_svc *s, svc_req *r)
{
	r->up = s->conf->pick(s->conf->rules, r->q.name);
	if (id_take(s, r)) {
		fail_req(r);
		return;
	}
	s->stats->upstream++;
	r->deadline = uv_now(s->loop) + s->conf->timeout_ms;
	const dns_upstream_conf *u = &s->conf->ups[r->up];
	if (u->proto == DNS_UP_UDP) {
		r->state = R_UPSTREAM;
		deadline_insert(s, r);
		rearm(s);
		usock *us = udp_of(s, r->up);
		uint8_t saved[2] = {r->query[0], r->query[1]};
		dns_msg_set_id(r->query, r->up_id);
		uv_buf_t b = uv_buf_init((char *)r->query, (unsigned)r->qlen);
		int rc = us ? uv_udp_try_send(&us->h, &b, 1, NULL) : -1;
		r->query[0] = saved[0];
		r->query[1] = saved[1];
		if (rc < 0) {
			fail_req(r);
			return;
		}
		r->us = us;
		us->inflight++;
		us->sent++;
		return;
	}
	send_stream(s, r);
}

/* r (its slot taken) goes over its upstream's stream connection: a TCP
 * one for a UDP upstream whose answer came truncated. */
static void send_stream(dns_svc *s, svc_req *r)
{
	upconn *uc = conn_of(s, r->up);
	if (!uc) {
		fail_req(r);
		return;
	}
	/* the slot is held from here; the deadline runs while it waits too */
	if (uc->st == UC_READY && !uc->no_more) {
		r->state = R_UPSTREAM;
		deadline_insert(s, r);
		rearm(s);
		conn_send(uc, r);
		conn_flush(uc);
		return;
	}
	r->state = R_WAITING; /* its slot held: the id it will go with */
	list_push_back(&uc->waiting, &r->link);
	rearm(s);
	if (uc->st == UC_IDLE)
		conn_dial(uc);
}

/* ---- time ---- */

/* The queries of l (earliest first) whose deadline passed get SERVFAIL. A
 * stream connection that left one unanswered is replaced: an upstream
 * that stopped answering (lost NAT state, a hung middlebox) would
 * otherwise take every later query into the same silence. */
static void expire(list *l, uint64_t now)
{
	while (l->head) {
		svc_req *r = LIST_ENTRY(l->head, svc_req, link);
		if (r->deadline > now)
			break;
		upconn *uc = r->state == R_UPSTREAM ? r->uc : NULL;
		fail_req(r);
		if (uc && uc->ep)
			conn_end(uc, msgs[MSG_SILENT], false);
	}
}

static void on_timer(uv_timer_t *t)
{
	dns_svc *s = t->data;
	uint64_t now = uv_now(s->loop);
	expire(&s->deadlines, now);
	for (size_t i = 0; i < s->conf->n_ups; i++) /* waiting for a connection, too */
		if (s->conns[i])
			expire(&s->conns[i]->waiting, now);
	rearm(s);
}

static void rearm(dns_svc *s)
{
	uint64_t next = UINT64_MAX;
	if (s->deadlines.head)
		next = LIST_ENTRY(s->deadlines.head, svc_req, link)->deadline;
	for (size_t i = 0; i < s->conf->n_ups; i++) {
		upconn *uc = s->conns[i];
		if (uc && uc->waiting.head) {
			uint64_t d = LIST_ENTRY(uc->waiting.head, svc_req, link)->deadline;
			if (d < next)
				next = d;
		}
	}
	if (next == UINT64_MAX) {
		uv_timer_stop(&s->timer);
		return;
	}
	uint64_t now = uv_now(s->loop);
	uv_timer_start(&s->timer, on_timer, next > now ? next - now : 0, 0);
}

/* ---- client streams (seed 002 DnsTcpStream) ---- */

typedef struct held_write {
	list_node link;
	const uint8_t *d;
	size_t n, off;
	void *req;
} held_write;

typedef struct svc_stream {
	chan ch; /* first */
	dns_svc *s;
	list reqs; /* svc_req.owner */
	size_t n_reqs;
	list held;  /* held_write: taken, not yet reported written */
	list_node kick;
	bool kicked, reading, shut_asked, shut_told, eof_told, failed, fail_told;
	const char *fail_why;
	bool *gone; /* set while a call that may close the stream runs */
	uint8_t *out;
	size_t out_len, out_cap;
	dns_tcp_reader rd;
} svc_stream;

static void stream_kick(svc_stream *st)
{
	if (st->kicked)
		return;
	st->kicked = true;
	list_push_back(&st->s->kicks, &st->kick);
	kick_idle(st->s);
}

static void stream_answer(void *ud, svc_req *r, uint8_t *msg, size_t len)
{
	(void)r;
	svc_stream *st = ud;
	if (len == 0 || st->failed) {
		stream_kick(st);
		return;
	}
	if (st->out_len + len + 2 > DNS_SVC_STREAM_OUT_MAX) {
		/* Holding its writes back would stall a close that flushes
		 * them, and buffering on grows without end: the stream ends. */
		st->failed = true;
		st->fail_why = msgs[MSG_UNREAD];
		stream_kick(st);
		return;
	}
	if (st->out_cap - st->out_len < len + 2) {
		size_t cap = st->out_cap ? st->out_cap : 1024;
		while (cap - st->out_len < len + 2)
			cap *= 2;
		uint8_t *o = realloc(st->out, cap);
		if (!o) {
			st->failed = true;
			st->fail_why = msgs[MSG_NO_MEMORY];
			stream_kick(st);
			return;
		}
		st->out = o;
		st->out_cap = cap;
	}
	dns_tcp_prefix(st->out + st->out_len, len);
	memcpy(st->out + st->out_len + 2, msg, len);
	st->out_len += len + 2;
	stream_kick(st);
}

/* Reads the queries of the held writes while the stream has room for
 * more unanswered ones. */
static void stream_parse(svc_stream *st)
{
	for (list_node *i = st->held.head; i && !st->failed; i = i->next) {
		held_write *hw = LIST_ENTRY(i, held_write, link);
		while (hw->off < hw->n && st->n_reqs < DNS_SVC_CLIENT_MAX) {
			size_t used;
			const uint8_t *msg;
			size_t len;
			int rc = dns_tcp_feed(&st->rd, hw->d + hw->off, hw->n - hw->off, &used, &msg,
			                      &len);
			hw->off += used;
			if (rc < 0 || (rc == 1 && len < DNS_HEADER_LEN)) {
				st->failed = true;
				st->fail_why = msgs[rc < 0 ? MSG_ZERO_LENGTH : MSG_SHORT];
				break;
			}
			if (rc == 1) {
				svc_req *r = ask(st->s, msg, len, false, stream_answer, st);
				if (!r) {
					st->failed = true;
					st->fail_why = msgs[MSG_NO_MEMORY];
					break;
				}
				r->owner_list = &st->reqs;
				r->owner_count = &st->n_reqs;
				list_push_back(&st->reqs, &r->owner);
				st->n_reqs++;
			}
		}
		if (hw->off < hw->n)
			break;
	}
}

/* From the idle: what the endpoint is to hear. The owner may close the
 * endpoint, and so st, inside any endpoint_chan_* call (its events run
 * from there): gone says when. */
static void stream_service(svc_stream *st)
{
	endpoint *ep = st->ch.ep;
	bool gone = false;
	st->gone = &gone;
	stream_parse(st);
	if (st->failed) {
		if (!st->fail_told) {
			st->fail_told = true;
			endpoint_chan_fail(ep, st->fail_why);
			/* the writes held are done with (nothing more is read),
			 * so a close that flushes does not wait for them */
			while (!gone && st->held.head) {
				held_write *hw = LIST_ENTRY(st->held.head, held_write, link);
				list_remove(&st->held, &hw->link);
				void *req = hw->req;
				free(hw);
				endpoint_chan_written(ep, req, UV_ECANCELED);
			}
		}
		goto out;
	}
	while (st->held.head) { /* parsed whole: the bytes are done with */
		held_write *hw = LIST_ENTRY(st->held.head, held_write, link);
		if (hw->off < hw->n)
			break;
		list_remove(&st->held, &hw->link);
		void *req = hw->req;
		free(hw);
		endpoint_chan_written(ep, req, 0);
		if (gone)
			return;
	}
	if (st->reading && st->out_len) {
		size_t k = endpoint_chan_input(ep, st->out, st->out_len);
		if (gone)
			return;
		memmove(st->out, st->out + k, st->out_len - k);
		st->out_len -= k;
	}
	if (st->shut_asked && !st->shut_told && !st->held.head) {
		st->shut_told = true;
		endpoint_chan_shut(ep);
		if (gone)
			return;
	}
	if (st->shut_told && !st->eof_told && st->n_reqs == 0 && st->out_len == 0) {
		st->eof_told = true;
		endpoint_chan_eof(ep);
	}
out:
	if (!gone)
		st->gone = NULL;
}

static int stream_write(chan *c, const uint8_t *d, size_t n, void *req)
{
	svc_stream *st = (svc_stream *)c;
	if (st->failed || st->shut_asked)
		return -1;
	held_write *hw = malloc(sizeof *hw);
	if (!hw)
		return -1;
	*hw = (held_write){.d = d, .n = n, .req = req};
	list_push_back(&st->held, &hw->link);
	stream_kick(st);
	return 0;
}

static void stream_read(chan *c, bool on)
{
	svc_stream *st = (svc_stream *)c;
	st->reading = on;
	if (on && st->out_len)
		stream_kick(st);
}

static int stream_shutdown(chan *c)
{
	svc_stream *st = (svc_stream *)c;
	st->shut_asked = true;
	stream_kick(st);
	return 0;
}

static void stream_close(chan *c)
{
	svc_stream *st = (svc_stream *)c;
	dns_svc *s = st->s;
	if (st->gone)
		*st->gone = true;
	while (st->reqs.head)
		req_cancel(LIST_ENTRY(st->reqs.head, svc_req, owner));
	while (st->held.head) {
		held_write *hw = LIST_ENTRY(st->held.head, held_write, link);
		list_remove(&st->held, &hw->link);
		free(hw);
	}
	if (st->kicked)
		list_remove(&s->kicks, &st->kick);
	free(st->out);
	free(st);
	svc_unref(s);
}

/* Bytes written to the stream and not yet read as queries. */
static size_t stream_queued(const chan *c)
{
	const svc_stream *st = (const svc_stream *)c;
	size_t n = 0;
	for (const list_node *i = st->held.head; i; i = i->next) {
		const held_write *hw = LIST_ENTRY(i, held_write, link);
		n += hw->n - hw->off;
	}
	return n;
}

static int stream_noname(const chan *c, struct sockaddr_storage *ss)
{
	(void)c;
	(void)ss;
	return -1;
}

static const chan_ops stream_ops = {
	.write = stream_write,
	.read = stream_read,
	.shutdown = stream_shutdown,
	.close = stream_close,
	.queued = stream_queued,
	.peername = stream_noname,
	.sockname = stream_noname,
};

/* A stream on its way to its owner: handed over from the idle, as a
 * dial's endpoint comes from the loop. */
typedef struct svc_open {
	connect_pending base; /* first: the handle */
	list_node link;       /* in s->opens */
	dns_svc *s;
	endpoint *ep;
	connect_cb cb;
	void *data;
} svc_open;

static void open_cancel(connect_pending *p)
{
	svc_open *o = (svc_open *)p;
	list_remove(&o->s->opens, &o->link);
	endpoint_close(o->ep, false);
	free(o);
}

connect_pending *dns_svc_connect(dns_svc *s, connect_cb cb, void *data)
{
	svc_open *o = calloc(1, sizeof *o);
	svc_stream *st = o ? calloc(1, sizeof *st) : NULL;
	if (!st) {
		free(o);
		return NULL;
	}
	st->ch.ops = &stream_ops;
	st->s = s;
	dns_tcp_reader_init(&st->rd);
	s->refs++;
	o->ep = endpoint_new_chan(s->w, &st->ch, NULL, NULL, NULL); /* closes st without memory */
	if (!o->ep) {
		free(o);
		return NULL;
	}
	*o = (svc_open){.base.cancel = open_cancel, .s = s, .ep = o->ep, .cb = cb, .data = data};
	list_push_back(&s->opens, &o->link);
	kick_idle(s);
	return &o->base;
}

/* ---- datagram links (seed 002 DnsUdpLink) ---- */

typedef struct svc_link {
	dgram_link base; /* first */
	dns_svc *s;
	dgram_handlers h;
	void *ud;
	list reqs;
	size_t n_reqs;
} svc_link;

static void link_answer(void *ud, svc_req *r, uint8_t *msg, size_t len)
{
	svc_link *l = ud;
	if (len)
		l->h.recv(&r->to, msg, len, l->ud);
}

static int link_send_to(dgram_link *dl, const addr_dest *to, const uint8_t *data, size_t len)
{
	svc_link *l = (svc_link *)dl;
	if (l->n_reqs >= DNS_SVC_CLIENT_MAX)
		return -1;
	svc_req *r = ask(l->s, data, len, true, link_answer, l);
	if (!r)
		return -1;
	r->to = *to;
	r->owner_list = &l->reqs;
	r->owner_count = &l->n_reqs;
	list_push_back(&l->reqs, &r->owner);
	l->n_reqs++;
	return 0;
}

static void link_close(dgram_link *dl)
{
	svc_link *l = (svc_link *)dl;
	dns_svc *s = l->s;
	while (l->reqs.head)
		req_cancel(LIST_ENTRY(l->reqs.head, svc_req, owner));
	free(l);
	svc_unref(s);
}

static const dgram_link_ops link_ops = {.send_to = link_send_to, .close = link_close};

dgram_link *dns_svc_link(dns_svc *s, const dgram_handlers *h, void *ud)
{
	svc_link *l = calloc(1, sizeof *l);
	if (!l)
		return NULL;
	l->base.ops = &link_ops;
	l->s = s;
	l->h = *h;
	l->ud = ud;
	s->refs++;
	return &l->base;
}

/* ---- the resolver's backend: A and AAAA through the service ---- */

typedef struct svc_lookup {
	dns_svc *s;
	dns_backend_cb done;
	void *token;
	list reqs;
	size_t n_reqs;
	int status[2];
	struct sockaddr_storage addrs[DNS_MAX_ADDRS];
	size_t n;
	uint32_t ttl;
} svc_lookup;

static int status_of(const uint8_t *m, size_t len)
{
	if (len < DNS_HEADER_LEN)
		return DNS_ESERVFAIL;
	switch (m[3] & 0x0F) {
	case DNS_RCODE_NOERROR:
		return DNS_OK;
	case DNS_RCODE_NXDOMAIN:
		return DNS_ENOTFOUND;
	default:
		return DNS_ESERVFAIL;
	}
}

static void lookup_answer(void *ud, svc_req *r, uint8_t *msg, size_t len)
{
	svc_lookup *lk = ud;
	bool aaaa = r->q.qtype == DNS_TYPE_AAAA;
	int st = status_of(msg, len);
	if (st == DNS_OK) {
		uint32_t ttl = 0;
		int k = dns_msg_addresses(msg, len, r->q.qtype, lk->addrs + lk->n,
		                          DNS_MAX_ADDRS - lk->n, &ttl);
		if (k > 0) {
			if (lk->n == 0 || ttl < lk->ttl)
				lk->ttl = ttl;
			lk->n += (size_t)k;
		}
	}
	lk->status[aaaa] = st;
	if (lk->n_reqs > 0)
		return; /* the other is still out */
	int status = lk->n ? DNS_OK
	             : (lk->status[0] == DNS_ESERVFAIL || lk->status[1] == DNS_ESERVFAIL)
	                 ? DNS_ESERVFAIL
	                 : DNS_ENOTFOUND;
	dns_backend_cb done = lk->done;
	void *token = lk->token;
	struct sockaddr_storage addrs[DNS_MAX_ADDRS];
	size_t n = lk->n;
	memcpy(addrs, lk->addrs, n * sizeof *addrs);
	uint32_t ttl = lk->ttl;
	free(lk);
	done(token, status, addrs, n, ttl);
}

static void *lookup_start(void *self, const char *name, dns_backend_cb done, void *token)
{
	dns_svc *s = self;
	svc_lookup *lk = calloc(1, sizeof *lk);
	if (!lk)
		return NULL;
	*lk = (svc_lookup){.s = s, .done = done, .token = token};
	static const uint16_t types[2] = {DNS_TYPE_A, DNS_TYPE_AAAA};
	for (size_t i = 0; i < 2; i++) {
		uint8_t q[DNS_UDP_PLAIN_MAX];
		int len = dns_msg_build_query(name, types[i], 0, q, sizeof q);
		svc_req *r = len > 0 ? ask(s, q, (size_t)len, false, lookup_answer, lk) : NULL;
		if (!r) {
			while (lk->reqs.head)
				req_cancel(LIST_ENTRY(lk->reqs.head, svc_req, owner));
			free(lk);
			return NULL;
		}
		r->owner_list = &lk->reqs;
		r->owner_count = &lk->n_reqs;
		list_push_back(&lk->reqs, &r->owner);
		lk->n_reqs++;
	}
	return lk;
}

static void lookup_cancel(void *self, void *handle)
{
	(void)self;
	svc_lookup *lk = handle;
	while (lk->reqs.head)
		req_cancel(LIST_ENTRY(lk->reqs.head, svc_req, owner));
	free(lk);
}

const dns_backend *dns_svc_backend(dns_svc *s) { return &s->backend; }

/* ---- the idle: answers and streams ---- */

static void on_idle(uv_idle_t *h)
{
	dns_svc *s = h->data;
	uint64_t tick = ++s->tick;
	s->refs++; /* a callback below may close the last client */
	/* Only what was queued before this round: an answer a callback
	 * queues waits for the next one. Taken from the head each time, as a
	 * callback may cancel others (a client closing). */
	svc_req *r;
	while (s->ready.head && (r = LIST_ENTRY(s->ready.head, svc_req, link))->tick < tick) {
		list_remove(&s->ready, &r->link);
		r->state = R_NEW;
		/* off its client first: the callback may close the client,
		 * which cancels what it still has */
		if (r->owner_list) {
			list_remove(r->owner_list, &r->owner);
			(*r->owner_count)--;
			r->owner_list = NULL;
		}
		if (r->cb)
			r->cb(r->ud, r, r->ans ? r->ans + DGRAM_HEADROOM : NULL, r->ans ? r->ans_len : 0);
		req_free(r);
	}
	while (s->kicks.head) {
		svc_stream *st = LIST_ENTRY(s->kicks.head, svc_stream, kick);
		list_remove(&s->kicks, &st->kick);
		st->kicked = false;
		stream_service(st);
	}
	while (s->opens.head) {
		svc_open *o = LIST_ENTRY(s->opens.head, svc_open, link);
		list_remove(&s->opens, &o->link);
		connect_cb cb = o->cb;
		void *data = o->data;
		endpoint *ep = o->ep;
		free(o);
		cb(&(connect_result){.ok = true, .ep = ep}, data);
	}
	if (!s->ready.head && !s->kicks.head && !s->opens.head)
		uv_idle_stop(&s->idle);
	svc_unref(s);
}

static void kick_idle(dns_svc *s)
{
	uv_idle_start(&s->idle, on_idle);
}

/* ---- life ---- */

dns_svc_conf *dns_svc_conf_new(void)
{
	dns_svc_conf *c = calloc(1, sizeof *c);
	if (c)
		atomic_init(&c->refs, 1);
	return c;
}

dns_svc_conf *dns_svc_conf_ref(dns_svc_conf *c)
{
	atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
	return c;
}

void dns_svc_conf_unref(dns_svc_conf *c)
{
	if (!c || atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) != 1)
		return;
	for (size_t i = 0; i < c->n_ups; i++) {
		dns_upstream_conf *u = &c->ups[i];
		free(u->tag);
		tls_client_ctx_unref(u->tls);
		free(u->server_name);
		free(u->host);
		free(u->path);
	}
	free(c->ups);
	if (c->rules_free)
		c->rules_free(c->rules);
	for (size_t i = 0; i < c->n_hosts; i++)
		free(c->hosts[i].name);
	free(c->hosts);
	dns_answers_del(c->cache);
	free(c);
}

dns_svc *dns_svc_new(worker *w, dns_svc_conf *conf, const dns_svc_dialer *dialer,
                     dns_svc_stats *stats)
{
	dns_svc *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	s->udp = calloc(conf->n_ups, sizeof *s->udp);
	s->conns = calloc(conf->n_ups, sizeof *s->conns);
	if (!s->udp || !s->conns) {
		free(s->udp);
		free(s->conns);
		free(s);
		return NULL;
	}
	s->w = w;
	s->loop = worker_loop(w);
	s->conf = dns_svc_conf_ref(conf);
	if (dialer)
		s->dialer = *dialer;
	s->backend = (dns_backend){.start = lookup_start, .cancel = lookup_cancel, .self = s};
	s->refs = 1;
	s->stats = stats ? stats : &s->own;
	uv_idle_init(s->loop, &s->idle);
	uv_timer_init(s->loop, &s->timer);
	s->idle.data = s;
	s->timer.data = s;
	s->open_handles = 2;
	return s;
}

/* Ends every query out: cancelled (dropped), or answered SERVFAIL. Taken
 * out of the table first, as ending one moves the others. */
static void fail_all(dns_svc *s, bool cancel)
{
	svc_req *out[DNS_SVC_MAX_INFLIGHT];
	size_t n = 0;
	for (size_t i = 0; i < ID_SLOTS; i++)
		if (s->ids[i])
			out[n++] = s->ids[i];
	for (size_t k = 0; k < n; k++) {
		if (cancel)
			req_cancel(out[k]);
		else
			fail_req(out[k]);
	}
}

/* The last reference: everything still running ends, the handles close,
 * and the memory goes with the last of them. */
static void svc_unref(dns_svc *s)
{
	if (--s->refs)
		return;
	s->dead = true;
	fail_all(s, true); /* prefetches: no client holds them */
	for (size_t i = 0; i < s->conf->n_ups; i++) {
		upconn *uc = s->conns[i];
		if (uc) {
			while (uc->waiting.head)
				req_cancel(LIST_ENTRY(uc->waiting.head, svc_req, link));
			conn_end(uc, NULL, false);
			uv_close((uv_handle_t *)&uc->idle, on_uc_closed);
		}
		if (s->udp[i]) /* its queries ended above */
			usock_close(s->udp[i]);
	}
	while (s->ready.head)
		req_cancel(LIST_ENTRY(s->ready.head, svc_req, link));
	if (s->dialer.release) /* its dials were cancelled with the connections */
		s->dialer.release(s->dialer.self);
	uv_close((uv_handle_t *)&s->idle, on_handle_closed);
	uv_close((uv_handle_t *)&s->timer, on_handle_closed);
}

void dns_svc_release(dns_svc *s)
{
	if (s)
		svc_unref(s);
}

void dns_svc_shutdown(dns_svc *s)
{
	if (!s)
		return;
	s->dead = true;
	fail_all(s, false); /* the UDP ones: the streams' go with their connections */
	for (size_t i = 0; i < s->conf->n_ups; i++)
		if (s->conns[i])
			conn_end(s->conns[i], NULL, false);
	svc_unref(s);
}

