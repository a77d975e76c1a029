/* in_conn.h - one client connection of an inbound: its state and the steps every protocol shares. */
#ifndef ETM_INBOUND_IN_CONN_H
#define ETM_INBOUND_IN_CONN_H

#include <stdbool.h>
#include <stddef.h>

#include "inbound/inbound.h"
#include "proto/proto.h"

/* How long a sniff waits for the client's first bytes: a protocol where the
 * server speaks first (SMTP, SSH banners) must not stall for long. */
#define INBOUND_SNIFF_WAIT_MS 300

struct inbound_proto_ops;

typedef struct in_conn {
	const inbound_rt *in; /* borrowed: the inbound outlives its connections */
	conn *c;              /* set by on_open, before any other hook */
	const struct inbound_proto_ops *ops; /* the protocol's row; NULL before the first byte */
	void *state;          /* owned: the row's ops->size bytes (server_ops.h) */
	proto_out out;        /* what the core writes for the client */
	connect_pending *pending; /* a connect in flight */
	bool sniffing;            /* reading the first bytes before the dial */
	addr_dest sniff_dest;     /* the open waiting for the sniff */
	int sniff_user;
	connect_cb sniff_cb;
	bool draining; /* the close time is set (in_conn_close_time_start, in_conn_drain):
	                * the deadline closes it */
	session *session; /* a reference, made with the first flow; NULL before */
	flow f;
	flow_ctx ctx;
} in_conn;

/* Sends ic->out to the client and empties it. Returns true, or false with
 * the connection closing (the write failed). */
__attribute__((warn_unused_result)) bool in_conn_flush(in_conn *ic);

/* Sets the flow to dest for account user (keeping a sniffed name) and its
 * context: this inbound, the client's address. */
void in_conn_set_flow(in_conn *ic, const addr_dest *dest, int user);

/* Sets the flow, pauses the client and asks the connector; cb gets ic, and
 * ic->pending holds the connect until it runs. */
void in_conn_open(in_conn *ic, const addr_dest *dest, int user, connect_cb cb);

/* Opens the datagram link of the flow in_conn_set_flow set (a dest of
 * network UDP); what comes back goes to h with ud. Returns the link (the
 * caller's to close), or NULL with the reason in why. */
dgram_link *in_conn_open_datagram(in_conn *ic, const dgram_handlers *h, void *ud, char *why,
                                  size_t why_size);

/* Dials the inbound's fallback (in->fallback, past the routes) and relays
 * every byte the client sent to it, the unconsumed handshake first. */
void in_conn_open_fallback(in_conn *ic);

/* A connect_cb for a client that wants no answer, or had it already: relay
 * on success; otherwise log the end and close. */
void in_conn_relay_connected(const connect_result *r, void *data);

/* The client was told its flow is open; read its first bytes for a name
 * (bounded by SNIFF_MAX_BYTES and INBOUND_SNIFF_WAIT_MS), then open with
 * the name as f.sniffed. The bytes stay unconsumed: they go to the target. */
void in_conn_sniff_then_open(in_conn *ic, const addr_dest *dest, int user, connect_cb cb);

/* While ic->sniffing: the client's bytes so far. Waits for more or opens
 * the flow; consumes nothing (returns 0). */
size_t in_conn_sniff_feed(in_conn *ic, const uint8_t *data, size_t len);

/* Ends the sniff without a name (the client's FIN, or the wait ran out):
 * the flow opens. */
void in_conn_sniff_give_up(in_conn *ic);

/* A refused client is neither answered nor closed at once: it is read and
 * discarded (conn_hold) until its close time, so a prober cannot tell a
 * refusal (a wrong key, a replay) from a slow server by what comes back
 * (v2ray drains a refused VMess connection too). The close time is drawn
 * once a connection, at its first byte (in_conn_close_time_start), from
 * DRAIN_MIN_MS to DRAIN_MIN_MS + DRAIN_SPAN_MS after it, and every failure
 * of the handshake ends there: too few bytes to decide (fewer than the
 * AuthID or the salt), a bad AuthID, a failed authentication. So the close
 * time does not tell how many bytes the server needed (issue 32, N2),
 * and it is no constant either. The bound: at most 6 s a connection after
 * its first byte, less when the inbound's idle timeout is shorter or the
 * client closes first; a connection that sends nothing still ends at the
 * handshake timeout. */
#define INBOUND_DRAIN_MIN_MS 2000
#define INBOUND_DRAIN_SPAN_MS 4000

/* The client's first byte came (a row's init): draws the close time as
 * above and lets it, not the handshake timeout, end the handshake (the
 * driver closes at the deadline while ic->draining). For a protocol with
 * no refusal answer that a prober must not see (VMess, Shadowsocks). */
void in_conn_close_time_start(in_conn *ic);

/* The request is complete (the row's feed saw the OPEN): the close time
 * no longer applies; the flow's own bounds do. */
void in_conn_close_time_stop(in_conn *ic);

/* Logs the refusal (in_conn_log_refused) and drains the client until its
 * close time (drawn now if in_conn_close_time_start did not run); the
 * driver closes it at the deadline (ic->draining). A row's refused step
 * for the protocols in_conn_close_time_start names. */
void in_conn_drain(in_conn *ic, const char *why);

/* Starts ep, an upstream with no stack yet, with a new stack of l, the
 * layer a row puts on top (a body codec). l is owned from now on: freed
 * on failure too. Returns 0, or -1. */
__attribute__((warn_unused_result)) int in_conn_start_upstream(endpoint *ep, layer *l);

/* Debug line "<tag> connection from <peer> to <dest> ended: <why>". */
void in_conn_log_end(const in_conn *ic, const char *why);

/* Debug line "<tag> connection from <peer> refused: <why>" (why may be NULL). */
void in_conn_log_refused(const in_conn *ic, const char *why);

#endif
