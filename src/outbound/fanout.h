/* fanout.h - the per-packet UDP fan-out (seed 000 FanOutLink): one association, a sub-link per routed target (per target and destination where the target's link carries one destination). */
#ifndef ETM_OUTBOUND_FANOUT_H
#define ETM_OUTBOUND_FANOUT_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/connector.h"
#include "runtime/tracker.h"

/* Open sub-links per association, whatever their key; the least recently
 * sent-to (or opened) one is closed first (seed 000 "Limits", MAX_SUBS).
 * Sub-links kept per destination count against the same cap, so one
 * association never holds more than 64 upstream sockets or proxy
 * connections. */
#define FANOUT_MAX_SUBS 64

/* Datagrams held while a sub-link opens (one open runs at a time; packets
 * for other new targets wait behind it). Beyond this, new ones are dropped:
 * UDP is lossy, memory is not unbounded. */
#define FANOUT_MAX_WAITING 16

/* The open of a sub-link finished: link, with its record in the tracker
 * (NULL: untracked), which the fan-out takes over; or NULL with why
 * (valid during the call) when it failed. */
typedef void (*fanout_opened_cb)(void *oud, dgram_link *link, track_flow *tf, const char *why);

/* What the fan-out asks of its environment (the supervisor's plane; stubs
 * in tests). */
typedef struct fanout_env_ops {
	/* Routes one datagram against the current plane. Returns the
	 * identity of the target it goes to, unique for the process's life
	 * (never a reusable pointer value), and sets *target to what open
	 * needs. Sets *one_dest when that target's datagram link reaches only
	 * the destination it is opened for (outbound_proto.udp_one_dest:
	 * VLESS, VMess); the fan-out then keys its sub-links by (target,
	 * destination) instead of by target, so every peer reaches its own
	 * destination. */
	uint64_t (*route)(void *env, const addr_dest *to, const void **target, bool *one_dest);
	/* Opens a sub-link on target for a datagram to `to` (the one
	 * destination of a VLESS or VMess sub-link); what it receives goes to
	 * h with rud.
	 * Calls opened(oud, ...) exactly once unless the returned handle is
	 * cancelled; it may call it before returning, and then returns NULL. */
	connect_pending *(*open)(void *env, const void *target, const addr_dest *to,
	                         const dgram_handlers *h, void *rud, fanout_opened_cb opened,
	                         void *oud);
	/* The fan-out closed: release env. May be NULL. */
	void (*release)(void *env);
} fanout_env_ops;

/* A sub-link's tracker record (tracker.h) counts the payload bytes sent on
 * it (up) and received (down); a kill drops that sub-link only, and the
 * record ends when the sub-link leaves the association: with the why of
 * a drain or a failed receive, FANOUT_EVICTED_TEXT for the least recently
 * used one, or "closed" with the association. */
#define FANOUT_EVICTED_TEXT "evicted: the association has too many sub-links"

/* A fan-out link. Datagrams received on any sub-link go to h->recv with
 * the source the sub-link reports, so replies stay attributed to the peer
 * that sent them; on a sub-link kept per destination, with the destination
 * it was opened for. The link itself never reports an error: a sub-link that
 * ends is dropped, and the association goes on. Returns NULL when memory
 * runs out. */
dgram_link *fanout_new(const fanout_env_ops *ops, void *env, const dgram_handlers *h, void *ud);

/* A drain (seed 002): drops every sub-link opened on the outbound version
 * origin (dgram_link.origin), each logged at debug as "udp fan-out: a
 * sub-link ended: <why>"; the association lives on, and its next datagram
 * to such a peer opens a sub-link on the current plane. Returns how many. */
size_t fanout_drain(dgram_link *l, uint64_t origin, const char *why);

/* Open sub-links, for tests and the admin view. */
size_t fanout_sub_count(const dgram_link *l);

#endif
