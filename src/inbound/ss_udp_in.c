/* ss_udp_in.c - the Shadowsocks inbound's UDP side: AEAD-2017 packets opened by trial decryption, a NAT entry (a datagram link) per client address, replies sealed with a fresh salt; 2022 packets (SIP022 3.2) a NAT entry per client session, replies in a server session of ours. */
#include "inbound/ss_udp_in.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "crypto/ossl.h"

#include "base/hash.h"
#include "base/list.h"
#include "base/log.h"
#include "proto/shadowsocks2022_udp.h"
#include "proto/shadowsocks_server.h"
#include "proto/socks_addr.h"
#include "runtime/guard.h"
#include "runtime/listener.h"

enum { MSG_NOT_OPEN, MSG_BAD_ADDRESS, MSG_REPLAY, MSG_DROPPED, MSG_LINK, MSG_EVICTED, MSG_UNKNOWN,
       MSG_COUNT_ };
static const char *const msgs[MSG_COUNT_] = {
	[MSG_NOT_OPEN] = "%s: dropped a UDP packet from %s that no user's key opens (%llu so far)",
	[MSG_BAD_ADDRESS] = "%s: dropped a UDP packet from %s with a bad target address",
	/* 2022: a packet ID its session's window refuses (SIP022 3.2.4) */
	[MSG_REPLAY] = "%s: dropped a replayed UDP packet from %s (%llu so far)",
	/* 2022: the codec's reason last (ss2022_udp_strerror) */
	[MSG_DROPPED] = "%s: dropped a UDP packet from %s: %s",
	[MSG_LINK] = "%s: UDP from %s: cannot open the datagram link: %s",
	[MSG_EVICTED] = "%s: UDP NAT full (%d entries): closed the least recently used, of %s",
	[MSG_UNKNOWN] = "?",
};

/* Hash buckets of the NAT table: a power of two, SS_UDP_NAT_MAX / 2 so a
 * full table's chains stay short. */
#define NAT_BUCKETS 512
/* What a NAT entry counts against its client's source (guard.h,
 * max_connections_per_source): the descriptors its link holds, freedom's
 * two sockets (IPv4 and IPv6). 1,024 entries a worker are 2,048
 * descriptors. */
#define NAT_HOLDS 2
/* Room for the reason a datagram link could not open. */
#define LINK_WHY_MAX 200

typedef struct nat nat;

struct ss_udp_in {
	uv_udp_t sock;
	uv_timer_t sweep;
	int open_handles; /* sock and sweep until both closed */
	worker *w;
	const inbound_rt *in; /* a reference (inbound_rt_hold) */
	list lru;             /* the entries, most recently used first */
	nat *bucket[NAT_BUCKETS];
	int n_nat;
	unsigned long long not_open; /* packets no user's key opened, since the socket opened */
	unsigned long long replays;  /* 2022 packets its session's window refused */
	ss2022_udp_rx scratch;       /* 2022: a new session's state until its packet opens */
	nat *hit;                    /* 2022: the entry the codec's lookup found, or NULL */
	/* Owned, each SS_PACKET_MAX (+ DGRAM_HEADROOM + SS_ADDR_MAX for the
	 * plaintexts): the client's packet, its plaintext, a reply's plaintext
	 * and the sealed reply. A link may deliver a reply while the client's
	 * plaintext is still being sent, so they do not share. */
	uint8_t *rx, *rx_plain, *tx_plain, *tx;
};

struct nat {
	list_node node; /* in u->lru */
	nat *next;      /* in its bucket */
	ss_udp_in *u;
	struct sockaddr_storage client;
	/* the address its NAT_HOLDS count against (a 2022 session's client
	 * address moves; the count stays where it was taken) */
	struct sockaddr_storage client_counted;
	dgram_link *link;        /* owned */
	const inbound_rt *in;    /* a reference: the link's flow_ctx borrows its tag */
	int user;                /* the account the client's last packet opened with */
	uint64_t last;           /* uv_now of the last packet either way */
	/* 2022 (SIP022 3.2.4): the entry is the client's session, keyed by its
	 * ID and user; client is the address its last valid packet came
	 * from, where replies go */
	bool s2022;
	uint8_t session[SS2022_SESSION_ID_LEN];
	ss2022_udp_rx rx;
	uint8_t server_session[SS2022_SESSION_ID_LEN]; /* ours, random, not the client's */
	uint64_t tx_packet;                            /* our next packet ID */
	ss2022_udp_cipher tx;
};

/* ---- the NAT table ---- */

/* FNV-1a (base/hash.h) over p[0, len), continued from h. */
static uint32_t fnv(uint32_t h, const uint8_t *p, size_t len)
{
	for (size_t i = 0; i < len; i++)
		h = hash_fnv32_step(h, p[i]);
	return h;
}

/* A 2022 session's bucket: the ID is the client's choice, bounded as
 * hash_addr's address is. */
static size_t hash_session(int user, const uint8_t *session)
{
	uint8_t u[4] = {(uint8_t)(user >> 24), (uint8_t)(user >> 16), (uint8_t)(user >> 8),
	                (uint8_t)user};
	return fnv(fnv(HASH_FNV32_INIT, u, sizeof u), session, SS2022_SESSION_ID_LEN) & (NAT_BUCKETS - 1);
}

static size_t hash_addr(const struct sockaddr_storage *a)
{
	/* FNV-1a over the address and port: the source is the client's
	 * choice, but a table of NAT_BUCKETS with LRU eviction bounds what a
	 * crafted collision costs to a scan of at most SS_UDP_NAT_MAX entries */
	const uint8_t *p;
	size_t len;
	uint16_t port;
	if (a->ss_family == AF_INET) {
		const struct sockaddr_in *s = (const struct sockaddr_in *)a;
		p = (const uint8_t *)&s->sin_addr;
		len = 4;
		port = s->sin_port;
	} else {
		const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)a;
		p = (const uint8_t *)&s->sin6_addr;
		len = 16;
		port = s->sin6_port;
	}
	uint32_t h = fnv(HASH_FNV32_INIT, p, len);
	h = hash_fnv32_step(h, (uint8_t)(port & 0xff));
	h = hash_fnv32_step(h, (uint8_t)(port >> 8));
	return h & (NAT_BUCKETS - 1);
}

static size_t nat_hash(const nat *e)
{
	return e->s2022 ? hash_session(e->user, e->session) : hash_addr(&e->client);
}

static nat *nat_find(ss_udp_in *u, const struct sockaddr *from)
{
	for (nat *e = u->bucket[hash_addr((const struct sockaddr_storage *)from)]; e; e = e->next)
		if (!e->s2022 && addr_same_endpoint((const struct sockaddr *)&e->client, from))
			return e;
	return NULL;
}

static nat *nat_find_session(ss_udp_in *u, int user, const uint8_t *session)
{
	for (nat *e = u->bucket[hash_session(user, session)]; e; e = e->next)
		if (e->s2022 && e->user == user &&
		    memcmp(e->session, session, SS2022_SESSION_ID_LEN) == 0)
			return e;
	return NULL;
}

static void nat_del(nat *e)
{
	ss_udp_in *u = e->u;
	nat **pp = &u->bucket[nat_hash(e)];
	while (*pp != e)
		pp = &(*pp)->next;
	*pp = e->next;
	list_remove(&u->lru, &e->node);
	u->n_nat--;
	if (e->link)
		e->link->ops->close(e->link);
	guard_source_unhold(worker_guard(u->w), (const struct sockaddr *)&e->client_counted,
	                    NAT_HOLDS);
	inbound_rt_release(e->in);
	ss2022_udp_rx_free(&e->rx);
	ss2022_udp_cipher_free(&e->tx);
	free(e);
}

static void nat_touch(nat *e)
{
	ss_udp_in *u = e->u;
	e->last = uv_now(worker_loop(u->w));
	list_remove(&u->lru, &e->node);
	list_push_front(&u->lru, &e->node);
}

static void client_text(const struct sockaddr_storage *a, char *out, size_t size)
{
	addr_dest d = {0};
	if (addr_dest_from_sockaddr(&d, (const struct sockaddr *)a) == 0)
		addr_dest_format(&d, out, size);
	else
		snprintf(out, size, "%s", msgs[MSG_UNKNOWN]);
}

static const char *tag_of(const ss_udp_in *u) { return u->in->tag ? u->in->tag : "-"; }

/* ---- replies ---- */

/* SIP022 3.2.3: a reply in our server session, for the client's session,
 * under the user's PSK; no identity header going back. */
static ssize_t seal_2022(nat *e, const ss_account *a, const addr_dest *from, const uint8_t *data,
                         size_t len)
{
	ss_udp_in *u = e->u;
	uint8_t addr[SS_ADDR_MAX], nonce[SS2022_XNONCE_LEN];
	size_t alen = socks_addr_wire_len(from);
	if (!alen || RAND_bytes(nonce, sizeof nonce) != 1)
		return -1;
	socks_addr_put(from, addr);
	ss2022_udp_msg msg = {.session = e->server_session, .packet = e->tx_packet,
	                      .client_session = e->session, .now = (int64_t)time(NULL),
	                      .addr = addr, .alen = alen, .payload = data, .plen = len,
	                      .nonce = nonce};
	ssize_t n = ss2022_udp_seal(a->method, a->key, NULL, &e->tx, &msg, u->tx, SS_PACKET_MAX);
	if (n >= 0)
		e->tx_packet++;
	return n;
}

/* A reply from `from` on e's link: sealed for e's user with a fresh salt,
 * the source as its address (SIP004's UDP relay answers ATYP ADDR PORT of
 * the peer, then its payload), sent to the client; a 2022
 * entry's in its own server session (seal_2022). */
static void on_link_recv(const addr_dest *from, uint8_t *data, size_t len, void *ud)
{
	nat *e = ud;
	ss_udp_in *u = e->u;
	const ss_account *a = &((const ss_account *)e->in->accounts)[e->user];
	if (e->s2022) {
		ssize_t n = seal_2022(e, a, from, data, len);
		if (n < 0)
			return;
		uv_buf_t b = uv_buf_init((char *)u->tx, (unsigned)n);
		(void)uv_udp_try_send(&u->sock, &b, 1, (const struct sockaddr *)&e->client);
		nat_touch(e);
		return;
	}
	size_t alen = socks_addr_wire_len(from), slen = ss_key_len(a->method);
	if (!alen || len > SS_PACKET_MAX - slen - SS_TAG_LEN - alen)
		return;
	uint8_t salt[SS_KEY_MAX];
	if (RAND_bytes(salt, (int)slen) != 1)
		return;
	socks_addr_put(from, u->tx_plain);
	memcpy(u->tx_plain + alen, data, len);
	ssize_t n = ss_packet_seal(a->method, a->key, salt, u->tx_plain, alen + len, u->tx,
	                           SS_PACKET_MAX);
	if (n < 0)
		return;
	uv_buf_t b = uv_buf_init((char *)u->tx, (unsigned)n);
	(void)uv_udp_try_send(&u->sock, &b, 1, (const struct sockaddr *)&e->client);
	nat_touch(e);
}

/* ---- the client's packets ---- */

/* A new entry for a client, the least recently used one closed first when
 * the table is full. NULL when memory runs out or the link cannot open. */
static nat *nat_new(ss_udp_in *u, const struct sockaddr *from, int user, const addr_dest *dest,
                    const uint8_t *session)
{
	char who[ADDR_TEXT_MAX];
	/* the entry's descriptors count against the client's source: over
	 * the bound the datagram is dropped (counted as refused_fanout) */
	if (!guard_source_hold(worker_guard(u->w), from, NAT_HOLDS))
		return NULL;
	if (u->n_nat >= SS_UDP_NAT_MAX && u->lru.tail) {
		nat *old = LIST_ENTRY(u->lru.tail, nat, node);
		if (log_get_level() >= LOG_LEVEL_DEBUG) {
			client_text(&old->client, who, sizeof who);
			log_debug("inbound", msgs[MSG_EVICTED], tag_of(u), SS_UDP_NAT_MAX, who);
		}
		nat_del(old);
	}
	nat *e = calloc(1, sizeof *e);
	if (!e) {
		guard_source_unhold(worker_guard(u->w), from, NAT_HOLDS);
		return NULL;
	}
	e->u = u;
	memcpy(&e->client, from,
	       from->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
	e->client_counted = e->client;
	e->user = user;
	if (session) {
		e->s2022 = true;
		memcpy(e->session, session, SS2022_SESSION_ID_LEN);
		/* SIP022 3.2.2: "Servers MUST not use client session IDs as
		 * server session IDs" */
		do {
			if (RAND_bytes(e->server_session, sizeof e->server_session) != 1) {
				guard_source_unhold(worker_guard(u->w), from, NAT_HOLDS);
				free(e);
				return NULL;
			}
		} while (memcmp(e->server_session, session, SS2022_SESSION_ID_LEN) == 0);
	}
	e->in = u->in;
	inbound_rt_hold(e->in);
	flow f = {.dest = *dest, .user = user};
	f.dest.network = ADDR_UDP;
	/* the user's name goes to the route and the access log, as TCP's */
	/* the NAT entry is the session: the link holds it for its life */
	struct session *sn = session_new(); /* "session" is the client's ID here */
	flow_ctx ctx = {.inbound_tag = e->in->tag, .peer = e->client,
	                .user_names = e->in->user_names, .n_users = e->in->n_user_names,
	                .principals = e->in->principals, .session = sn};
	static const dgram_handlers handlers = {.recv = on_link_recv};
	char why[LINK_WHY_MAX];
	const connector *cn = e->in->connect;
	e->link = cn->connect_datagram(cn->self, u->w, &f, &ctx, &handlers, e, why, sizeof why);
	session_release(sn);
	if (!e->link) {
		client_text(&e->client, who, sizeof who);
		log_debug("inbound", msgs[MSG_LINK], tag_of(u), who, why);
		guard_source_unhold(worker_guard(u->w), from, NAT_HOLDS);
		inbound_rt_release(e->in);
		free(e);
		return NULL;
	}
	size_t h = nat_hash(e);
	e->next = u->bucket[h];
	u->bucket[h] = e;
	list_push_front(&u->lru, &e->node);
	u->n_nat++;
	e->last = uv_now(worker_loop(u->w));
	return e;
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	(void)suggested;
	ss_udp_in *u = h->data;
	buf->base = (char *)u->rx;
	buf->len = SS_PACKET_MAX;
}

/* The codec's lookup: the client session's entry, or the scratch state
 * for a new one (kept only if the packet opens). */
static ss2022_udp_rx *lookup(void *ud, int user, const uint8_t *session)
{
	ss_udp_in *u = ud;
	u->hit = nat_find_session(u, user, session);
	if (u->hit)
		return &u->hit->rx;
	ss2022_udp_rx_free(&u->scratch);
	return &u->scratch;
}

/* A 2022 packet dropped: logged (debug) and counted as the AEAD-2017
 * path counts, replays apart. */
static void drop_2022(ss_udp_in *u, const struct sockaddr *from, ssize_t why)
{
	bool not_open = why == SS2022_UDP_ERR_TAG || why == SS2022_UDP_ERR_SHORT ||
	                why == SS2022_UDP_ERR_IDENTITY;
	u->not_open += not_open;
	u->replays += why == SS2022_UDP_ERR_REPLAY;
	if (log_get_level() < LOG_LEVEL_DEBUG)
		return;
	char who[ADDR_TEXT_MAX];
	client_text((const struct sockaddr_storage *)from, who, sizeof who);
	if (not_open)
		log_debug("inbound", msgs[MSG_NOT_OPEN], tag_of(u), who, u->not_open);
	else if (why == SS2022_UDP_ERR_REPLAY)
		log_debug("inbound", msgs[MSG_REPLAY], tag_of(u), who, u->replays);
	else if (why == SS2022_UDP_ERR_ADDRESS)
		log_debug("inbound", msgs[MSG_BAD_ADDRESS], tag_of(u), who);
	else
		log_debug("inbound", msgs[MSG_DROPPED], tag_of(u), who,
		          ss2022_udp_strerror((int)why));
}

/* SIP022 3.2.4: the entry is found by the client's session; a packet that
 * opens moves the entry's client address to where it came from. */
static void on_packet_2022(ss_udp_in *u, const uint8_t *in, size_t n, const struct sockaddr *from)
{
	ss2022_udp_packet pk;
	u->hit = NULL;
	ssize_t len = ss2022_udp_open_request((const ss_account *)u->in->accounts,
	                                      u->in->n_accounts, (int64_t)time(NULL), lookup, u, in,
	                                      n, u->rx_plain, SS_PACKET_MAX, &pk);
	if (len < 0) {
		drop_2022(u, from, len);
		return;
	}
	addr_dest dest = {0};
	if (socks_addr_get(u->rx_plain + pk.addr_off, ADDR_UDP, &dest) < 0) {
		drop_2022(u, from, SS2022_UDP_ERR_ADDRESS);
		return;
	}
	nat *e = u->hit;
	if (!e) {
		e = nat_new(u, from, pk.user, &dest, pk.session);
		if (!e)
			return;
		e->rx = u->scratch; /* the window has this packet's ID */
		u->scratch = (ss2022_udp_rx){0};
	}
	memcpy(&e->client, from,
	       from->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
	nat_touch(e);
	(void)e->link->ops->send_to(e->link, &dest, u->rx_plain + pk.payload_off, (size_t)len);
}

static bool serves_2022(const inbound_rt *in)
{
	return in->n_accounts && ss_method_is_2022(((const ss_account *)in->accounts)[0].method);
}

static void on_packet(uv_udp_t *h, ssize_t n, const uv_buf_t *buf, const struct sockaddr *from,
                      unsigned flags)
{
	ss_udp_in *u = h->data;
	if (n <= 0 || !from || (flags & UV_UDP_PARTIAL) ||
	    (from->sa_family != AF_INET && from->sa_family != AF_INET6))
		return;
	if (serves_2022(u->in)) {
		on_packet_2022(u, (const uint8_t *)buf->base, (size_t)n, from);
		return;
	}
	nat *e = nat_find(u, from);
	int user = -1;
	addr_dest dest = {0};
	size_t off = 0;
	ssize_t len = ss_server_packet_open((const ss_account *)u->in->accounts, u->in->n_accounts,
	                                    e ? e->user : -1, (const uint8_t *)buf->base, (size_t)n,
	                                    u->rx_plain, SS_PACKET_MAX, &user, &dest, &off);
	if (len < 0) {
		/* no answer either way: a prober learns nothing from a drop */
		u->not_open += len != SS_PACKET_ERR_ADDRESS;
		if (log_get_level() >= LOG_LEVEL_DEBUG) {
			char who[ADDR_TEXT_MAX];
			client_text((const struct sockaddr_storage *)from, who, sizeof who);
			if (len == SS_PACKET_ERR_ADDRESS)
				log_debug("inbound", msgs[MSG_BAD_ADDRESS], tag_of(u), who);
			else
				log_debug("inbound", msgs[MSG_NOT_OPEN], tag_of(u), who, u->not_open);
		}
		return;
	}
	if (!e)
		e = nat_new(u, from, user, &dest, NULL);
	if (!e)
		return;
	/* replies go sealed with the key this client used last */
	e->user = user;
	nat_touch(e);
	(void)e->link->ops->send_to(e->link, &dest, u->rx_plain + off, (size_t)len);
}

/* ---- the sweep ---- */

static void on_sweep(uv_timer_t *t)
{
	ss_udp_in *u = t->data;
	uint64_t now = uv_now(worker_loop(u->w));
	/* the least recently used last: stop at the first one still in use */
	while (u->lru.tail) {
		nat *e = LIST_ENTRY(u->lru.tail, nat, node);
		if (now - e->last < SS_UDP_TIMEOUT_MS)
			break;
		nat_del(e);
	}
}

/* ---- the socket ---- */

static void close_all(ss_udp_in *u)
{
	while (u->lru.head)
		nat_del(LIST_ENTRY(u->lru.head, nat, node));
}

bool ss_udp_in_wanted(const inbound_rt *in)
{
	return in->protocol == INBOUND_PROTO_SHADOWSOCKS && in->n_accounts > 0;
}

static void free_buffers(ss_udp_in *u)
{
	ss2022_udp_rx_free(&u->scratch);
	free(u->rx);
	free(u->rx_plain);
	free(u->tx_plain);
	free(u->tx);
}

static void on_closed(uv_handle_t *h)
{
	ss_udp_in *u = h->data;
	if (--u->open_handles > 0)
		return;
	free_buffers(u);
	free(u);
}

void ss_udp_in_close(ss_udp_in *u)
{
	if (!u)
		return;
	close_all(u);
	if (u->in)
		inbound_rt_release(u->in);
	u->in = NULL;
	uv_close((uv_handle_t *)&u->sweep, on_closed);
	uv_close((uv_handle_t *)&u->sock, on_closed);
}

int ss_udp_in_fd(const ss_udp_in *u)
{
	uv_os_fd_t fd = -1;
	return uv_fileno((const uv_handle_t *)&u->sock, &fd) ? -1 : fd;
}

void ss_udp_in_set_inbound(ss_udp_in *u, const inbound_rt *in)
{
	if (u->in == in)
		return;
	close_all(u);
	inbound_rt_hold(in);
	inbound_rt_release(u->in);
	u->in = in;
}

/* Makes the bound SO_REUSEPORT socket, or takes the one an upgrade passed
 * for worker index; returns it, or -errno. */
static int bind_socket(const struct sockaddr_storage *ss, size_t index)
{
	int fd;
	int rc = listener_take_udp(ss, index, &fd);
	if (rc || fd >= 0)
		return rc ? rc : fd;
	fd = socket(ss->ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int one = 1;
	socklen_t len = ss->ss_family == AF_INET ? sizeof(struct sockaddr_in)
	                                          : sizeof(struct sockaddr_in6);
	/* libuv 1.44 cannot set SO_REUSEPORT itself (listener.c); the kernel
	 * hashes a client's address and port to one worker's socket, so its
	 * NAT entry is found there every time */
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) ||
	    bind(fd, (const struct sockaddr *)ss, len)) {
		int rc = -errno;
		close(fd);
		return rc;
	}
	return fd;
}

ss_udp_in *ss_udp_in_open(worker *w, const char *ip, uint16_t port, const inbound_rt *in,
                          char *err, size_t err_size)
{
	struct sockaddr_storage ss;
	if (listener_addr(ip, port, &ss, err, err_size))
		return NULL;
	int rc = UV_ENOMEM, fd;
	ss_udp_in *u = calloc(1, sizeof *u);
	if (!u)
		goto fail;
	u->rx = malloc(SS_PACKET_MAX);
	u->rx_plain = malloc(SS_PACKET_MAX);
	u->tx_plain = malloc(SS_PACKET_MAX);
	u->tx = malloc(SS_PACKET_MAX);
	if (!u->rx || !u->rx_plain || !u->tx_plain || !u->tx)
		goto fail;
	fd = bind_socket(&ss, worker_index(w));
	if (fd < 0) {
		rc = fd;
		goto fail;
	}
	u->w = w;
	u->in = in;
	inbound_rt_hold(in);
	uv_udp_init(worker_loop(w), &u->sock);
	uv_timer_init(worker_loop(w), &u->sweep);
	u->sock.data = u;
	u->sweep.data = u;
	u->open_handles = 2;
	/* from here the handles own u: ss_udp_in_close frees it */
	rc = uv_udp_open(&u->sock, fd);
	if (rc)
		close(fd); /* not taken by the handle */
	else
		rc = uv_udp_recv_start(&u->sock, alloc_cb, on_packet);
	if (rc) {
		listener_failed(err, err_size, ip, port, uv_strerror(rc));
		ss_udp_in_close(u);
		return NULL;
	}
	uv_timer_start(&u->sweep, on_sweep, SS_UDP_SWEEP_MS, SS_UDP_SWEEP_MS);
	return u;
fail:
	if (u)
		free_buffers(u);
	free(u);
	listener_failed(err, err_size, ip, port, uv_strerror(rc));
	return NULL;
}
