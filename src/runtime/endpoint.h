/* endpoint.h - one stream socket and its layer stack (an empty one: plain TCP): reads, bounded writes, EOF and the orderly end, reported through an events table. */
#ifndef ETM_RUNTIME_ENDPOINT_H
#define ETM_RUNTIME_ENDPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "runtime/tracker.h"
#include "runtime/chan.h"
#include "runtime/worker.h"
#include "transport/stack.h"

/* Writes an endpoint has in flight at most: 4 x POOL_BUF_SIZE = 64 KiB, the
 * relay's backpressure bound per direction (enough to keep loopback busy,
 * small enough for 10k flows a worker). */
#define ENDPOINT_MAX_PENDING 4

/* A closing endpoint waits this long for a peer to take its last bytes
 * (a TLS alert, an answer) before it closes anyway. */
#define ENDPOINT_FLUSH_MS 5000

/* The owner's side of an endpoint: the endpoint never calls its owner but
 * through these, and only from libuv callbacks (never inside a call the
 * owner made). The owner may call endpoint_close inside any of them. */
typedef struct endpoint_events {
	/* App bytes arrived (endpoint_app_in has some), or the peer's end was
	 * reached (endpoint_at_eof). */
	void (*on_readable)(void *ud);
	/* A write or the shutdown finished: endpoint_can_send may be true
	 * again, endpoint_idle and endpoint_shut_done may have changed. */
	void (*on_writable)(void *ud);
	/* The socket or a layer failed (why: "connection reset by peer",
	 * "tls: ..."). What the layers queued for their peer first (a TLS
	 * alert, a WebSocket close) is written before the socket closes when
	 * the owner closes with flush. */
	void (*on_error)(void *ud, const char *why);
} endpoint_events;

typedef struct endpoint endpoint;

/* Takes tcp (a connected handle, malloc'd, on w's loop) and st (may be
 * NULL: plain) in every case. ev is borrowed for the endpoint's life; NULL
 * sends the events nowhere until endpoint_set_events (a dialled endpoint
 * on its way to its owner).
 * Nothing is read until endpoint_want_read. Returns NULL when memory runs
 * out (tcp and st are closed and freed then). Worker thread only, as every
 * call below. */
endpoint *endpoint_new(worker *w, uv_tcp_t *tcp, stack *st, const endpoint_events *ev, void *ud);

/* An endpoint on a carrier's channel (chan.h: an HTTP/2 stream, a mux
 * sub-flow) in place of a socket; otherwise as endpoint_new. It takes ch
 * (closing it when memory runs out) and st. */
endpoint *endpoint_new_chan(worker *w, chan *ch, stack *st, const endpoint_events *ev,
                            void *ud);

/* What a carrier reports to a channel's endpoint, from its own libuv
 * callbacks only (chan.h), never after chan_ops.close:
 *   input    bytes arrived while reading is on: returns how many it took
 *            (0 while it holds bytes not yet taken by the owner; offer
 *            them again after the next read(on))
 *   eof      the peer ended its direction, after every byte before it
 *   fail     the channel broke (why: static text, or the carrier's until
 *            close)
 *   written  a write is done with (status < 0: it was not sent)
 *   shut     the direction toward the peer ended (after a shutdown) */
size_t endpoint_chan_input(endpoint *e, const uint8_t *d, size_t n);
void endpoint_chan_eof(endpoint *e);
void endpoint_chan_fail(endpoint *e, const char *why);
void endpoint_chan_written(endpoint *e, void *req, int status);
void endpoint_chan_shut(endpoint *e);

/* Puts st (which it takes over in every case) on a plain endpoint that has
 * read and sent nothing yet, and starts the layers' handshake: their first
 * bytes go out. Returns 0, or -1 when a layer failed (endpoint_error says
 * why). endpoint_ready tells when the handshake is over. */
__attribute__((warn_unused_result)) int endpoint_start(endpoint *e, stack *st);

/* Every layer finished its handshake and what they had for the peer is
 * written (a plain endpoint: always). */
bool endpoint_ready(const endpoint *e);

/* Points the events at another owner (the relay taking the endpoint over). */
void endpoint_set_events(endpoint *e, const endpoint_events *ev, void *ud);

/* Whether the owner wants app bytes now; reads run while it does, the
 * bytes read before are taken, and the stack has room. */
void endpoint_want_read(endpoint *e, bool on);

/* The app bytes waiting: *d is valid until the next call on e. */
size_t endpoint_app_in(endpoint *e, const uint8_t **d);
/* n of them were used. Returns 0, or -1 when a layer failed
 * (endpoint_error says why; no on_error follows for it). */
__attribute__((warn_unused_result)) int endpoint_app_done(endpoint *e, size_t n);

/* The peer's end was read and every app byte before it taken: the
 * socket's EOF, or an end inside a layer (stack_peer_ended). */
bool endpoint_at_eof(const endpoint *e);

/* A plain endpoint's waiting bytes, handed over without a copy: the pool
 * buffer *buf (the caller's now) holds them at [*off, *off + *len).
 * False (nothing moves) for a stacked endpoint or when none wait. */
bool endpoint_take_buf(endpoint *e, uint8_t **buf, size_t *off, size_t *len);

/* Room for one more send (none while bytes are held: they go first). */
bool endpoint_can_send(const endpoint *e);

/* How many app bytes the layers take now: 0 once the endpoint failed,
 * closes or shut its sending side, or holds bytes of an earlier
 * endpoint_send_all; the layers' room on a stacked endpoint (their output
 * waits there for a free write slot); SIZE_MAX on a plain one (the owner
 * bounds endpoint_queued). Unlike endpoint_can_send it does not wait for a
 * slot: a datagram link sends bursts, and drops only what finds no room. */
size_t endpoint_send_room(const endpoint *e);

/* Copies what fits of d[0, n) toward the peer (through the layers);
 * returns the bytes taken (0 when there is no room), or -1 when a layer
 * failed (endpoint_error says why; no on_error follows for it). */
__attribute__((warn_unused_result)) ssize_t endpoint_send(endpoint *e, const uint8_t *d,
                                                          size_t n);

/* Sends all of d[0, n) or fails: a plain endpoint writes what the socket
 * takes at once (no on_writable follows for that part) and copies the rest
 * into a write of its own beyond ENDPOINT_MAX_PENDING; a stacked one hands
 * the layers what they have room for and holds a copy of the rest, which
 * enters them, in order and before any later send, as writes make room
 * (endpoint_held). Either way the owner bounds what waits, as a handshake
 * reply, an HTTP response or a UDP reply does, with endpoint_queued and
 * its on_writable. Returns 0, or -1 (the layers failed, or memory ran
 * out: endpoint_error says why). */
__attribute__((warn_unused_result)) int endpoint_send_all(endpoint *e, const uint8_t *d, size_t n);

/* Bytes written to the socket and not yet taken by the kernel, and the
 * bytes held for the layers (endpoint_held). */
size_t endpoint_queued(const endpoint *e);

/* App bytes endpoint_send_all took that the layers have no room for yet
 * (0 on a plain endpoint). A layer pushed on the stack (stack_push) while
 * some are held would see them pass through it: push only when none are. */
size_t endpoint_held(const endpoint *e);

/* Plain endpoints: sends buf[off, off + len), a pool buffer the endpoint
 * takes over in every case. endpoint_can_send must be true. Returns 0, or
 * -1 when the write failed (endpoint_error says why). */
__attribute__((warn_unused_result)) int endpoint_send_buf(endpoint *e, uint8_t *buf, size_t off,
                                                          size_t len);

/* No layers: the app bytes are the wire bytes. */
bool endpoint_plain(const endpoint *e);

/* Frees the stack once it has become the identity (stack_passthrough: a
 * proxy client's framing past its handshake, nothing queued in it): the
 * endpoint is plain from then on, as if dialled without layers, and the
 * wire bytes read and not yet offered to the stack are app bytes. What is
 * in flight, the byte counts and the flow's record stay as they were.
 * Only for an owner that reads the endpoint through the calls above (the
 * relay): it must not hold the stack or a layer of it. Returns whether
 * the endpoint is plain now (it was, or became so); false while it is
 * failed, closing or shutting down. */
bool endpoint_unstack(endpoint *e);

/* Nothing is waiting to be written (no write in flight, no wire output,
 * no held app bytes). */
bool endpoint_idle(const endpoint *e);

/* The app sends nothing more: the layers' orderly end (TLS close_notify,
 * a WebSocket close) after the held app bytes, then the TCP FIN once
 * everything queued is written
 * (on a channel: its carrier's end of the stream's direction).
 * endpoint_shut_done tells when the FIN is out. */
__attribute__((warn_unused_result)) int endpoint_shutdown(endpoint *e);
bool endpoint_shut_done(const endpoint *e);

/* The text of the failure a call returned or on_error reported. */
const char *endpoint_error(const endpoint *e);

/* The id of the outbound version that dialled it (0: none, or an accepted
 * socket): a drain of that version finds the flow by it. */
void endpoint_set_origin(endpoint *e, uint64_t origin);
uint64_t endpoint_origin(const endpoint *e);

/* The flow's record in the tracker (tracker.h), owned from here: the
 * endpoint counts its app bytes into it (sent up, taken down), a kill
 * fails the endpoint with the kill's why (its owner hears on_error), and
 * it ends (track_end) when the endpoint closes, with the why
 * endpoint_set_end_why gave, else the endpoint's failure, else "closed".
 * Set on a flow's upstream by the connector. A record already there ends
 * first (tf NULL: only that). */
void endpoint_set_track(endpoint *e, track_flow *tf);

/* Takes the record back (NULL when there is none), with its bytes so far
 * and no kill hook: the new holder sets its own. */
track_flow *endpoint_take_track(endpoint *e);

/* The record, still the endpoint's; NULL when there is none. */
track_flow *endpoint_track(const endpoint *e);

/* What the end line says ended the flow, when the endpoint closes; borrowed
 * until then (static or longer-lived text). */
void endpoint_set_end_why(endpoint *e, const char *why);

/* The socket's descriptor (a splice takes a duplicate of it); -1 when it
 * has none. */
int endpoint_fd(const endpoint *e);

/* The addresses of the connection under the endpoint (a channel's: its
 * carrier's). 0, or -1 when there is none. */
int endpoint_peername(const endpoint *e, struct sockaddr_storage *ss);
int endpoint_sockname(const endpoint *e, struct sockaddr_storage *ss);

/* The socket; NULL on a channel. */
uv_tcp_t *endpoint_tcp(endpoint *e);
stack *endpoint_stack(endpoint *e);

/* Closes the endpoint: no event runs after this call. With flush, what is
 * queued (and what the layers queued for their peer, after an error) is
 * written first, for at most ENDPOINT_FLUSH_MS, reads stopped meanwhile;
 * without, at once. The memory is freed once libuv has closed the handles. */
void endpoint_close(endpoint *e, bool flush);

#endif
