/* relay.h - two endpoints relayed both ways: backpressure, half-close, and the splice(2) hand-off for plain sockets. */
#ifndef ETM_RUNTIME_RELAY_H
#define ETM_RUNTIME_RELAY_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/endpoint.h"
#include "runtime/worker.h"

/* A plain flow moves to splice(2) after this many bytes: the two pipes and
 * duplicated descriptors cost about twenty syscalls, which a short exchange
 * never wins back (bench: 59 syscalls for a 64-byte request and answer). */
#define RELAY_SPLICE_AFTER (64 * 1024)

/* Rounds of moving bytes one event may run before it yields the loop. */
#define RELAY_ROUNDS 16

typedef struct relay relay;

/* What ends a relay besides its sockets. */
typedef struct relay_config {
	bool splice;      /* plain to plain moves to splice(2) after RELAY_SPLICE_AFTER */
	uint64_t idle_ms; /* no byte either way for this long ends it; 0 = never */
} relay_config;

/* The why of an idle end. */
#define RELAY_IDLE_TEXT "idle"

typedef struct relay_events {
	/* Bytes moved (for an idle timeout). May be NULL. */
	void (*on_activity)(void *ud);
	/* The relay is over: both directions ended in order (why NULL), one
	 * side failed (why says what), or cfg.idle_ms passed without a byte
	 * (why RELAY_IDLE_TEXT). Called once, from a libuv callback; the
	 * relay is stopped after it returns and must not be used again. */
	void (*on_end)(void *ud, const char *why);
} relay_events;

/* Relays between a and b, which it takes over in every case (their events
 * now go to the relay). Bytes already waiting in either go at once, and
 * an end that already read its peer's EOF passes it on. An endpoint whose
 * layers have all become pass-throughs (a proxy client's framing past its
 * handshake: endpoint_unstack) is plain from then on. With cfg->splice,
 * two plain endpoints move to splice(2) once RELAY_SPLICE_AFTER bytes have
 * passed and nothing is in flight. A flow with a user (its record's
 * principal) is paced at the user's rates, which a reload or the API may
 * set at any time, spliced or not. b is the flow's upstream: the end line
 * record it carries (endpoint_set_track) gets the relay's why, and the
 * splicer's bytes after a hand-off. ev is borrowed; ud is passed back.
 * Returns NULL when memory runs out or a first write fails (a and b are
 * closed then; no event runs). */
relay *relay_start(worker *w, endpoint *a, endpoint *b, const relay_config *cfg,
                   const relay_events *ev, void *ud);

/* Stops at once: closes both endpoints (or the splicer); no event runs
 * after. */
void relay_stop(relay *r);

/* Bytes relayed so far, both ways (before a splice hand-off). */
uint64_t relay_bytes(const relay *r);

/* The relay runs on splice(2) now. */
bool relay_spliced(const relay *r);

#endif
