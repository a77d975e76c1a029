/* server_ops.h - an inbound protocol as one row of steps, which the connection driver (inbound.c) runs the same way for every protocol. */
#ifndef ETM_INBOUND_SERVER_OPS_H
#define ETM_INBOUND_SERVER_OPS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "inbound/in_conn.h"

/* What feed returns when the row ended the connection itself (a write
 * failed, a framed datagram was malformed): the driver touches nothing
 * more. Below every PROTO_ERR_*, so it is never taken for a refusal. */
#define INBOUND_FEED_GONE (-100)

/* State an inbound's connections share across workers behind one lock
 * (VMess's and Shadowsocks's replay filters): a row's shared_new makes it
 * with inbound_locked_new(the state's size) and its shared_free is
 * inbound_locked_free. Hold lock around every use of data. */
typedef struct inbound_locked {
	pthread_mutex_t lock;
	_Alignas(max_align_t) unsigned char data[]; /* size bytes, zeroed */
} inbound_locked;

/* Returns the lock and size zeroed bytes, or NULL on no memory. */
inbound_locked *inbound_locked_new(size_t size);
/* Frees what inbound_locked_new made (p is one, as shared_free gets it). */
void inbound_locked_free(void *p);

/* The steps of one server protocol on one client connection, all on the
 * connection's worker thread but account. How inbound.c runs them:
 *
 *   first byte   ic->state = size zeroed bytes; init
 *   each read    feed, send ic->out, then by the event:
 *                  CLOSE, error  the fallback if wants_fallback, else refused
 *                  OPEN, UDP     udp_open
 *                  OPEN, sniffs  opened(ic, NULL); sniff; dial; relay
 *                                (with peek: sniff the plaintext peek gives;
 *                                dial; as OPEN below)
 *                  OPEN          dial; connected, or the shared callback:
 *                                failed, or opened and relay
 *   client EOF   client_end
 *   write done   written
 *   stall        timeout, then as CLOSE
 *   deadline     the close time of a refused or incomplete request: close
 *                (in_conn_close_time_start, in_conn_drain)
 *   close        free
 *
 * Only size, init and feed are required. */
typedef struct inbound_proto_ops {
	/* Bytes of per-connection state: ic->state, zeroed before init, freed
	 * by the driver after free. */
	size_t size;
	/* Bytes of one user's credential: inbound_rt_build makes in->accounts,
	 * one per user in order, with account. 0: none (the core reads
	 * in->logins instead). */
	size_t account_size;
	/* On the control thread, before the listeners open: writes user u's
	 * credential into out[0, account_size). Returns NULL, or why it cannot
	 * (static text, reported as "inbound <tag>: <why>"). */
	const char *(*account)(const inbound_user *u, uint8_t *out);
	/* On the control thread, by inbound_rt_build: state the inbound's
	 * connections share across workers (VMess's replay filter), kept as
	 * in->shared until inbound_rt_free calls shared_free. NULL on no
	 * memory (the build fails). Both NULL: none. */
	void *(*shared_new)(void);
	void (*shared_free)(void *shared);
	/* The client's first byte came: starts the core in ic->state. Returns
	 * 0, or -1 when it cannot (the connection closes; free is not called). */
	int (*init)(in_conn *ic);
	/* Runs the core on the client's unconsumed bytes in[0, len), as its
	 * X_server_feed does: returns the bytes consumed, or a negative
	 * PROTO_ERR_*, with *ev set and any answer in ic->out; or
	 * INBOUND_FEED_GONE. Called for as long as the connection is fed:
	 * after an OPEN too when the row keeps the stream (conn_drive). */
	ssize_t (*feed)(in_conn *ic, const uint8_t *in, size_t len, proto_event *ev);
	/* The core refused the client (ev CLOSE, or an error; why is the
	 * reason, may be NULL) and no fallback takes the bytes: log it and
	 * end the connection, after the answer the core wrote if it has one.
	 * NULL: the protocol has no refusal answer (Trojan, VLESS): the
	 * refusal is logged and the connection closes at once. in_conn_drain
	 * fits here as it is (VMess, Shadowsocks). */
	void (*refused)(in_conn *ic, const char *why);
	/* Whether the bytes the core refused go, untouched, to the inbound's
	 * fallback (settings.fallback, which inbound_rt_build reads only for a
	 * row that has this step). NULL: never. */
	bool (*wants_fallback)(in_conn *ic);
	/* The handshake timeout passed, nothing is dialling and the inbound
	 * has a fallback: the core's verdict, as X_server_timeout. Returns 0
	 * with ev CLOSE (treated as a refusal), or negative (close). NULL: the
	 * connection closes. */
	int (*timeout)(in_conn *ic, proto_event *ev);
	/* Whether this OPEN may wait for a sniff of the client's first bytes
	 * (when the inbound sniffs): only where the core can answer before the
	 * dial, with opened(ic, NULL), or the row has peek. NULL: never. */
	bool (*sniffs)(in_conn *ic);
	/* For a row whose client bytes after the request are sealed
	 * (Shadowsocks; VMess could): while the sniff waits, opens the client's
	 * bytes in[0, len) into plaintext the row holds and hands it all so far
	 * in *plain, *plain_len (the sniff reads that, not in). Returns the
	 * bytes of in consumed (the row delivers their plaintext first once it
	 * relays), or negative (the connection closes). in is NULL with len 0
	 * right after the OPEN: the plaintext that came with the request. Such
	 * a row is not answered before the sniff: the dial's callback is the
	 * shared one, with opened(ic, r). NULL: the sniff reads the client's
	 * bytes as they are, unconsumed. */
	ssize_t (*peek)(in_conn *ic, const uint8_t *in, size_t len, const uint8_t **plain,
	                size_t *plain_len);
	/* An OPEN for PROTO_CMD_UDP_ASSOCIATE: opens the association and
	 * answers the client. NULL: the core never asks for UDP. */
	void (*udp_open)(in_conn *ic, const proto_event *ev);
	/* The dial's callback (data is ic), for a row that handles the
	 * upstream itself. NULL: the shared one, which answers with failed or
	 * opened and relays. */
	connect_cb connected;
	/* Writes the success answer into ic->out. r is the dial's result, NULL
	 * when the client is answered before the dial (a sniff). Returns 0, or
	 * negative (the connection closes). NULL: the protocol has no answer. */
	int (*opened)(in_conn *ic, const connect_result *r);
	/* Writes the answer for a failed dial into ic->out (why is the reason).
	 * Returns 0 (the connection closes once it is sent), or negative.
	 * NULL: no answer, the connection closes at once. */
	int (*failed)(in_conn *ic, proto_dial_error e, const char *why);
	/* The client's EOF before the relay: true to close now, false when an
	 * answer is still to be delivered (as conn_driver.on_client_end).
	 * NULL: close. */
	bool (*client_end)(in_conn *ic);
	/* A client write finished (as conn_driver.on_written). May be NULL. */
	void (*written)(in_conn *ic);
	/* The connection closed: release what ic->state holds, not the state
	 * itself. May be NULL. */
	void (*free)(in_conn *ic);
} inbound_proto_ops;

#endif
