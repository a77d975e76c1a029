/* ss_udp.c - the Shadowsocks datagram link over a direct UDP link: seal each datagram with its target for the server, open each reply; for 2022 one client session (SIP022 3.2) and the server's sessions it answers from. */
#include "outbound/ss_udp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "crypto/ossl.h"

#include "base/log.h"
#include "outbound/freedom_udp.h"
#include "proto/shadowsocks2022_udp.h"
#include "proto/socks_addr.h"

enum { MSG_NO_MEMORY, MSG_NOT_OPEN, MSG_BAD_ADDRESS, MSG_2022_DROP, MSG_COUNT_ };
static const char *const msgs[MSG_COUNT_] = {
	[MSG_NO_MEMORY] = "out of memory",
	[MSG_NOT_OPEN] = "shadowsocks: dropping a UDP packet that does not open",
	[MSG_BAD_ADDRESS] = "shadowsocks: dropping a UDP packet with a bad address",
	/* the codec's reason after it (ss2022_udp_strerror) */
	[MSG_2022_DROP] = "shadowsocks 2022: dropping a UDP packet: %s",
};

/* Padding we add to a packet: 0 to this many random bytes' worth. SIP022
 * allows up to 900; UDP has no first-packet length to hide, so a little. */
#define PADDING_MAX 32

typedef struct ss_udp {
	dgram_link base;
	dgram_link *inner; /* owned: the direct link to the server */
	ss_method method;
	uint8_t key[SS_KEY_MAX];
	ss_identity id; /* 2022: the identity PSKs before the key */
	addr_dest server;
	const dgram_handlers *h; /* borrowed: the owner's */
	void *ud;
	dgram_handlers inner_h;
	uint8_t *plain; /* owned, DGRAM_HEADROOM + SS_ADDR_MAX + DGRAM_MAX: address and payload */
	uint8_t *wire;  /* owned, DGRAM_MAX: a sealed packet */
	/* 2022: our session (SIP022 3.2.2: a random ID, packets counted from
	 * 0) and the server's */
	uint8_t session[SS2022_SESSION_ID_LEN];
	uint64_t packet;
	ss2022_udp_cipher tx;
	ss2022_server_sessions srv; /* the server's sessions we take packets from */
	int64_t now;                /* the clock read for the packet being opened */
} ss_udp;

/* ---- Shadowsocks 2022 ---- */

static int send_2022(ss_udp *s, const addr_dest *to, const uint8_t *data, size_t len)
{
	size_t alen = socks_addr_wire_len(to), fixed = ss2022_udp_overhead(s->method, s->id.n, false);
	uint8_t rnd[1 + SS2022_XNONCE_LEN], addr[SS_ADDR_MAX];
	if (!alen || len > DGRAM_MAX - fixed - alen || RAND_bytes(rnd, sizeof rnd) != 1)
		return -1;
	size_t room = DGRAM_MAX - fixed - alen - len, pad = rnd[0] % (PADDING_MAX + 1);
	socks_addr_put(to, addr);
	ss2022_udp_msg msg = {.session = s->session, .packet = s->packet,
	                      .now = (int64_t)time(NULL), .padding = pad < room ? pad : room,
	                      .addr = addr, .alen = alen, .payload = data, .plen = len,
	                      .nonce = rnd + 1};
	ssize_t n = ss2022_udp_seal(s->method, s->key, &s->id, &s->tx, &msg, s->wire, DGRAM_MAX);
	if (n < 0)
		return -1;
	s->packet++;
	return s->inner->ops->send_to(s->inner, &s->server, s->wire, (size_t)n);
}

/* The codec's lookup: SIP022 3.2.4's current and old server sessions. */
static ss2022_udp_rx *lookup(void *ud, int user, const uint8_t *id)
{
	(void)user;
	ss_udp *s = ud;
	return ss2022_server_sessions_lookup(&s->srv, id, s->now);
}

/* Opens a server packet into p; returns the payload's length with
 * *addr_off and *off, or -1 (dropped). */
static ssize_t open_2022(ss_udp *s, const uint8_t *data, size_t len, uint8_t *p, size_t *addr_off,
                         size_t *off)
{
	s->now = (int64_t)time(NULL);
	ss2022_udp_packet pk;
	ssize_t n = ss2022_udp_open_response(s->method, s->key, s->session, s->now, lookup, s, data,
	                                     len, p, SS_ADDR_MAX + DGRAM_MAX, &pk);
	if (n < 0) {
		log_debug("outbound", msgs[MSG_2022_DROP], ss2022_udp_strerror((int)n));
		return -1;
	}
	ss2022_server_sessions_seen(&s->srv, pk.session, s->now);
	*addr_off = pk.addr_off;
	*off = pk.payload_off;
	return n;
}

/* ---- the link ---- */

static int send_to(dgram_link *l, const addr_dest *to, const uint8_t *data, size_t len)
{
	ss_udp *s = (ss_udp *)l;
	if (ss_method_is_2022(s->method))
		return send_2022(s, to, data, len);
	size_t alen = socks_addr_wire_len(to), slen = ss_key_len(s->method);
	if (!alen || len > DGRAM_MAX - slen - SS_TAG_LEN - alen)
		return -1;
	uint8_t salt[SS_KEY_MAX];
	if (RAND_bytes(salt, (int)slen) != 1)
		return -1;
	uint8_t *p = s->plain + DGRAM_HEADROOM;
	socks_addr_put(to, p);
	memcpy(p + alen, data, len);
	ssize_t n = ss_packet_seal(s->method, s->key, salt, p, alen + len, s->wire, DGRAM_MAX);
	if (n < 0)
		return -1;
	return s->inner->ops->send_to(s->inner, &s->server, s->wire, (size_t)n);
}

/* A packet from the server (the tag authenticates it; its source is not
 * checked beyond that). */
static void on_packet(const addr_dest *from, uint8_t *data, size_t len, void *ud)
{
	(void)from;
	ss_udp *s = ud;
	uint8_t *p = s->plain + DGRAM_HEADROOM;
	size_t addr_off = 0, off;
	ssize_t n;
	if (ss_method_is_2022(s->method)) {
		n = open_2022(s, data, len, p, &addr_off, &off);
		if (n < 0)
			return;
	} else {
		n = ss_packet_open(s->method, s->key, data, len, p, SS_ADDR_MAX + DGRAM_MAX);
		if (n < 0) {
			log_debug("outbound", "%s", msgs[MSG_NOT_OPEN]);
			return;
		}
		ssize_t span = ss_addr_span(p, (size_t)n);
		if (span <= 0) {
			log_debug("outbound", "%s", msgs[MSG_BAD_ADDRESS]);
			return;
		}
		off = (size_t)span;
		n -= span;
	}
	addr_dest src;
	if (socks_addr_get(p + addr_off, ADDR_UDP, &src) < 0) {
		log_debug("outbound", "%s", msgs[MSG_BAD_ADDRESS]);
		return;
	}
	/* DGRAM_HEADROOM bytes and the address lie before the payload */
	s->h->recv(&src, p + off, (size_t)n, s->ud);
}

static void on_end(void *ud, const char *why)
{
	ss_udp *s = ud;
	if (s->h->end)
		s->h->end(s->ud, why);
}

static void link_close(dgram_link *l)
{
	ss_udp *s = (ss_udp *)l;
	if (s->inner)
		s->inner->ops->close(s->inner);
	free(s->plain);
	free(s->wire);
	ss2022_udp_cipher_free(&s->tx);
	ss2022_server_sessions_free(&s->srv);
	OPENSSL_cleanse(s, sizeof *s);
	free(s);
}

static const dgram_link_ops ops = {.send_to = send_to, .close = link_close};

dgram_link *ss_udp_open(worker *w, dns_resolver *dns, dial_family af, ss_method m,
                        const uint8_t *key, const ss_identity *id, const addr_dest *server,
                        const dgram_handlers *h, void *ud, char *err, size_t err_size)
{
	ss_udp *s = calloc(1, sizeof *s);
	if (!s) {
		snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
		return NULL;
	}
	*s = (ss_udp){.base.ops = &ops, .method = m, .server = *server, .h = h, .ud = ud,
	              .inner_h = {.recv = on_packet, .end = on_end}};
	s->server.network = ADDR_UDP;
	memcpy(s->key, key, ss_key_len(m));
	if (id)
		s->id = *id;
	s->plain = malloc(DGRAM_HEADROOM + SS_ADDR_MAX + DGRAM_MAX);
	s->wire = malloc(DGRAM_MAX);
	if (!s->plain || !s->wire || RAND_bytes(s->session, sizeof s->session) != 1) {
		snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
		link_close(&s->base);
		return NULL;
	}
	s->inner = freedom_udp_open(w, dns, af, &s->inner_h, s, err, err_size);
	if (!s->inner) {
		link_close(&s->base);
		return NULL;
	}
	return &s->base;
}
