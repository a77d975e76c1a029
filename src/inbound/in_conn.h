/* in_conn.h - the state an inbound keeps per client connection, shared by its protocol drivers. */
#ifndef ETM_INBOUND_IN_CONN_H
#define ETM_INBOUND_IN_CONN_H

#include <stdbool.h>
#include <stddef.h>

#include "inbound/inbound.h"
#include "proto/http_proxy.h"
#include "proto/sniff.h"
#include "proto/trojan.h"
#include "proto/vless.h"
#include "proto/socks.h"

/* How long a sniff waits for the client's first bytes: a protocol where the
 * server speaks first (SMTP, SSH banners) must not stall for long. */
#define INBOUND_SNIFF_WAIT_MS 300

typedef enum in_kind {
	IN_UNDECIDED, /* mixed before its first byte */
	IN_SOCKS,
	IN_HTTP,
	IN_TROJAN,
	IN_VLESS,
} in_kind;

typedef struct socks_udp socks_udp;
typedef struct http_in http_in;

typedef struct in_conn {
	const inbound_rt *in;
	conn *c; /* set by on_open, before any other hook */
	in_kind kind;
	union {
		socks_server socks;
		http_in *http; /* owned; see http_in.c */
		trojan_server trojan;
		vless_server vless;
	} core;
	proto_out out; /* what the core writes for the client */
	connect_pending *pending; /* a connect in flight */
	bool sniffing;            /* reading the first bytes before the dial */
	addr_dest sniff_dest;     /* the open waiting for the sniff */
	int sniff_user;
	connect_cb sniff_cb;
	socks_udp *udp; /* a SOCKS5 UDP association, owned */
	dgram_link *dlink; /* Trojan / VLESS UDP over the client's stream, owned */
	flow f;
	flow_ctx ctx;
} in_conn;

/* Sends ic->out to the client; false (and the connection closing) on failure. */
bool in_conn_flush(in_conn *ic);

/* Fills ic->f (keeping a sniffed name) and ic->ctx, pauses the client and
 * asks the connector; cb gets ic. */
void in_conn_open(in_conn *ic, const addr_dest *dest, int user, connect_cb cb);

/* The client was told its flow is open; read its first bytes for a name
 * (bounded by SNIFF_MAX_BYTES and INBOUND_SNIFF_WAIT_MS), then open with
 * the name as f.sniffed. The bytes stay unconsumed: they go to the target. */
void in_conn_sniff_then_open(in_conn *ic, const addr_dest *dest, int user, connect_cb cb);

/* The connect callback for a flow whose client was already answered:
 * relay on success, close on failure. */
extern const connect_cb in_conn_sniffed_connected;

/* Debug line "<tag> connection from <peer> to <dest> ended: <why>". */
void in_conn_log_end(const in_conn *ic, const char *why);

void in_conn_peer_text(const in_conn *ic, char *out, size_t size);

/* The HTTP proxy driver (http_in.c): the conn_driver hooks for IN_HTTP. */
void http_in_init(in_conn *ic);
size_t http_in_data(in_conn *ic, const uint8_t *data, size_t len);
/* The client's EOF: true to close now. */
bool http_in_client_end(in_conn *ic);
/* A client write finished: resume upstream reads paused for backpressure. */
void http_in_written(in_conn *ic);
/* The core may take held client bytes again (a response ended). */
void http_in_kick(in_conn *ic);
void http_in_free(in_conn *ic);

#endif
