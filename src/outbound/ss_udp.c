/* ss_udp.c - the Shadowsocks AEAD datagram link over a direct UDP link: seal each datagram with its target for the server, open each reply. */
#include "outbound/ss_udp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "base/log.h"
#include "outbound/freedom_udp.h"
#include "proto/socks_addr.h"

enum { MSG_NO_MEMORY, MSG_NOT_OPEN, MSG_BAD_ADDRESS, MSG_COUNT_ };
static const char *const msgs[MSG_COUNT_] = {
	[MSG_NO_MEMORY] = "out of memory",
	[MSG_NOT_OPEN] = "shadowsocks: dropping a UDP packet that does not open",
	[MSG_BAD_ADDRESS] = "shadowsocks: dropping a UDP packet with a bad address",
};

typedef struct ss_udp {
	dgram_link base;
	dgram_link *inner; /* owned: the direct link to the server */
	ss_method method;
	uint8_t key[SS_KEY_MAX];
	addr_dest server;
	const dgram_handlers *h; /* borrowed: the owner's */
	void *ud;
	dgram_handlers inner_h;
	uint8_t *plain; /* owned, DGRAM_HEADROOM + SS_ADDR_MAX + DGRAM_MAX: address and payload */
	uint8_t *wire;  /* owned, DGRAM_MAX: a sealed packet */
} ss_udp;

static int send_to(dgram_link *l, const addr_dest *to, const uint8_t *data, size_t len)
{
	ss_udp *s = (ss_udp *)l;
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
	ssize_t n = ss_packet_open(s->method, s->key, data, len, p, SS_ADDR_MAX + DGRAM_MAX);
	if (n < 0) {
		log_debug("outbound", "%s", msgs[MSG_NOT_OPEN]);
		return;
	}
	ssize_t span = ss_addr_span(p, (size_t)n);
	addr_dest src;
	if (span <= 0 || socks_addr_get(p, ADDR_UDP, &src) < 0) {
		log_debug("outbound", "%s", msgs[MSG_BAD_ADDRESS]);
		return;
	}
	/* DGRAM_HEADROOM bytes and the address lie before the payload */
	s->h->recv(&src, p + span, (size_t)n - (size_t)span, s->ud);
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
	OPENSSL_cleanse(s->key, sizeof s->key);
	free(s);
}

static const dgram_link_ops ops = {.send_to = send_to, .close = link_close};

dgram_link *ss_udp_open(worker *w, dns_resolver *dns, dial_family af, ss_method m,
                        const uint8_t *key, const addr_dest *server, const dgram_handlers *h,
                        void *ud, char *err, size_t err_size)
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
	s->plain = malloc(DGRAM_HEADROOM + SS_ADDR_MAX + DGRAM_MAX);
	s->wire = malloc(DGRAM_MAX);
	if (!s->plain || !s->wire) {
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
