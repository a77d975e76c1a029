/* outbound.h - a built outbound and its connect_stream: freedom dials, blackhole swallows. */
#ifndef ETM_OUTBOUND_OUTBOUND_H
#define ETM_OUTBOUND_OUTBOUND_H

#include <stddef.h>

#include "etemenanki/spec.h"
#include "runtime/connector.h"
#include "runtime/dns.h"

typedef struct tls_client_ctx tls_client_ctx;

typedef struct outbound {
	uint64_t id; /* unique for the process's life: tag@vN, never reused */
	char *tag;   /* owned */
	etm_protocol protocol;
	etm_address_family af;

	/* The proxy clients (socks, http, trojan, vless): where the server is,
	 * the transport to it, and the credentials a stream's layers need. */
	addr_dest server;
	tls_client_ctx *tls; /* a reference; NULL: no TLS */
	char *tls_name;      /* owned: the name verified, NULL: the server's */
	bool ws;
	char *ws_path, *ws_host; /* owned */
	char *username, *password; /* owned: socks and http */
	uint8_t trojan_hash[56];
	uint8_t vless_uuid[16];
} outbound;

/* Builds the outbound of a checked spec entry. Returns NULL with the reason
 * in err (memory, or a protocol this build cannot run). */
outbound *outbound_new(const etm_outbound_spec *spec, char *err, size_t err_size);
void outbound_del(outbound *o);

/* A fresh id from the sequence outbounds use (balancer targets take theirs
 * from it too, so fan-out keys never collide). */
uint64_t outbound_next_id(void);

/* Opens a stream to dest through o on worker w (seed 000 "connect_stream").
 * freedom dials with the worker's resolver; blackhole answers at once with
 * blackhole = true. Callback contract as connector.h: it runs once unless
 * cancelled, possibly before this returns (then NULL is returned). */
connect_pending *outbound_connect_stream(const outbound *o, worker *w, dns_resolver *dns,
                                         const addr_dest *dest, connect_cb cb, void *data);

/* The end of outbound_connect_datagram: the link, or NULL with why (valid
 * during the call). */
typedef void (*outbound_dgram_cb)(void *oud, dgram_link *link, const char *why);

/* Opens a datagram link through o (seed 000 "connect_datagram"): freedom's
 * per-family sockets, blackhole's swallowing link, a Trojan or VLESS stream
 * carrying framed datagrams (VLESS: to `to` only), a SOCKS5 UDP association.
 * What it receives goes to h with ud. done runs exactly once unless the
 * returned handle is cancelled; it may run before this returns (then NULL is
 * returned). http fails with "http carries no datagrams". */
connect_pending *outbound_connect_datagram(const outbound *o, worker *w, dns_resolver *dns,
                                           const addr_dest *to, const dgram_handlers *h,
                                           void *ud, outbound_dgram_cb done, void *oud);

#endif
