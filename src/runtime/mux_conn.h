/* mux_conn.h - Mux.Cool sessions: a flow to v1.mux.cool:9527 carries many sub-flows, each opened through the connector on its own (server), and many flows of an outbound share one proxy stream (client). */
#ifndef ETM_RUNTIME_MUX_CONN_H
#define ETM_RUNTIME_MUX_CONN_H

#include <stdbool.h>

#include "runtime/connector.h"
#include "runtime/worker.h"

/* The frames and the session rules are proto/mux.h's; this is their shell.
 *
 * Server. A flow whose destination is v1.mux.cool:9527 is a session, not a
 * connect: mux_serve hands the inbound an endpoint (the session's face:
 * the inbound relays its client with it as with any upstream) and every
 * sub-flow the client opens goes through the connector as a flow of its
 * own, with the session's inbound and source: routed on the plane current
 * when it opens, logged, drained with its outbound. A TCP sub-flow is
 * relayed with its upstream; a UDP sub-flow's datagrams go through a
 * datagram link to the destination its New named (v2ray 4.34 puts no
 * address in later frames). Mux.Cool has no flow control of its own: a
 * sub-flow holds at most MUX_SUB_BUFFER bytes its upstream has not taken,
 * and past that the session stops reading its client (as v2ray's does),
 * so memory stays bounded. The client's end, or the face's close, ends
 * every sub-flow. */

#define MUX_SUB_BUFFER (64 * 1024)

/* Whether dest is the session address v1.mux.cool (any port, as v2ray's
 * server checks the name only). */
bool mux_is_session(const addr_dest *dest);

/* Starts a session for f (to v1.mux.cool) of an inbound; conn opens its
 * sub-flows with ctx (copied). cb gets the face endpoint, before this
 * returns (which then returns NULL), or the failure. */
connect_pending *mux_serve(worker *w, const connector *conn, const flow *f, const flow_ctx *ctx,
                           connect_cb cb, void *data);

/* A drain (seed 002): ends every sub-flow of the worker's sessions whose
 * upstream was opened on origin, each logged at debug as "mux: sub-flow
 * <id> to <dest> ended: <why>" (the client gets its End; the session goes
 * on), and drops the UDP sub-links opened on it. Returns how many. */
size_t mux_drain(worker *w, uint64_t origin, const char *why);

/* Client. An outbound with mux on sends each TCP flow as a sub-flow of a
 * session: one of this worker's sessions for the same outbound version
 * with room (at most concurrency sub-flows open, 128 opened in all, as
 * v2ray's client), or a new one, whose own stream (a proxy stream to
 * v1.mux.cool: VLESS and VMess say so with command 0x03) dial opens. A
 * session with no sub-flow for MUX_IDLE_MS closes. Mux.Cool has no
 * half-close: a flow's end ends its sub-flow, both ways, as in v2ray. */
#define MUX_IDLE_MS 16000

/* Opens the session's own stream; the callback contract of dial_tcp. */
typedef connect_pending *(*mux_dial_fn)(void *ctx, worker *w, connect_cb cb, void *data);

/* Opens a TCP flow to dest as a sub-flow: cb gets its endpoint (events
 * nowhere, origin set) once its New is queued, or the session's failure.
 * Callback contract as dial_tcp: later, never inside this call; NULL when
 * memory runs out. */
connect_pending *mux_open(worker *w, uint64_t origin, unsigned concurrency, mux_dial_fn dial,
                          void *ctx, const addr_dest *dest, connect_cb cb, void *data);

/* A datagram link's open finished: link, or NULL with why. */
typedef void (*mux_dgram_cb)(void *oud, dgram_link *link, const char *why);

/* Opens a UDP sub-flow to dest (its one destination, v2ray 4.34's form) as
 * a datagram link whose receptions go to h with ud; done reports it.
 * Callback contract as mux_open. */
connect_pending *mux_open_datagram(worker *w, uint64_t origin, unsigned concurrency,
                                   mux_dial_fn dial, void *ctx, const addr_dest *dest,
                                   const dgram_handlers *h, void *ud, mux_dgram_cb done,
                                   void *oud);

/* Ends every session of the worker's (a stop). */
void mux_close_all(worker *w);

/* The worker's server sessions open now (an upgrade's drain waits for
 * them). Worker thread only. */
size_t mux_session_count(worker *w);

#endif
