/* principal.h - who a flow belongs to (seed 002 "Principal" and "Session"): one inbound's user with its revocation, its session count and its rate limits; a session is one accepted connection (one HTTP/2 stream, one Shadowsocks UDP client), bound to the principal of its first flow. No clock, no I/O: callers pass the time. */
#ifndef ETM_RUNTIME_PRINCIPAL_H
#define ETM_RUNTIME_PRINCIPAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What a removal does to the user's open flows (seed 002
 * UserRemovalPolicy; [policy] user_removal). */
typedef enum principal_revoked {
	PRINCIPAL_LIVE = 0,
	PRINCIPAL_REVOKED_KEEP,  /* open flows run on; new sessions are refused */
	PRINCIPAL_REVOKED_CLOSE, /* open flows end at once; its sessions are closed */
} principal_revoked;

/* The admission refusals, word for word (seed 002's failure-path table;
 * the last is ours). */
#define PRINCIPAL_REMOVED_TEXT "the user was removed before the session opened a flow"
#define PRINCIPAL_SESSION_CLOSED_TEXT "the session was closed"
#define PRINCIPAL_TOO_MANY_SESSIONS_TEXT "the user has reached its max_sessions"

/* How far a limited direction may run ahead of its rate: the bucket holds
 * this many milliseconds of the rate (at least one pool buffer), so short
 * bursts pass and a long transfer settles at the rate. */
#define PRINCIPAL_BURST_MS 250

/* A rate above this (1 TiB a second) is taken as this: no link is that
 * fast, and the bucket's arithmetic stays inside 64 bits. */
#define PRINCIPAL_RATE_MAX (1ull << 40)

/* One direction's token bucket, shared by every worker: a balance in
 * bytes that refills at rate bytes a second up to the burst, and that a
 * transfer may overdraw; the overdraft is how long the direction pauses.
 * rate 0: unlimited. Lock-free: a CAS on the refill time, atomic adds on
 * the balance. */
typedef struct principal_bucket {
	_Atomic uint64_t rate;     /* bytes a second; 0: no limit */
	_Atomic int64_t balance;   /* bytes; negative: in debt */
	_Atomic uint64_t refill_ms; /* when the balance was last refilled */
} principal_bucket;

typedef struct principal {
	atomic_uint refs;
	char *name;             /* owned; NULL: the user has no name */
	_Atomic int revoked;    /* principal_revoked */
	_Atomic uint32_t sessions;     /* sessions bound to it, on every worker */
	_Atomic uint32_t max_sessions; /* 0: no limit */
	principal_bucket up, down;     /* client to target, target to client */
} principal;

/* A new principal with one reference; NULL without memory. */
principal *principal_new(const char *name, uint64_t up_rate, uint64_t down_rate,
                         uint32_t max_sessions);
void principal_hold(principal *p);
/* NULL is a no-op. */
void principal_release(principal *p);

/* Changes the limits (a reload or the API): flows see them on their next
 * read or write. Any thread. */
void principal_set_limits(principal *p, uint64_t up_rate, uint64_t down_rate,
                          uint32_t max_sessions);

/* The first call wins; later ones change nothing. Any thread. */
void principal_revoke(principal *p, principal_revoked how);

static inline principal_revoked principal_state(const principal *p)
{
	return (principal_revoked)atomic_load_explicit(&((principal *)p)->revoked,
	                                               memory_order_acquire);
}

/* Charges n bytes to b at now_ms. Returns 0 when the direction may go on,
 * else how many milliseconds it should pause before the next read (the
 * debt at the rate). NULL or an unlimited bucket: 0. */
uint64_t principal_charge(principal_bucket *b, uint64_t n, uint64_t now_ms);

/* Takes n bytes from b at now_ms only when the balance covers them (a
 * datagram: over the rate it is dropped and costs nothing). True when
 * taken, or when b is NULL or unlimited. */
bool principal_try(principal_bucket *b, uint64_t n, uint64_t now_ms);

/* Whether b limits anything. */
static inline bool principal_limited(const principal_bucket *b)
{
	return b && atomic_load_explicit(&((principal_bucket *)b)->rate, memory_order_relaxed) != 0;
}

/* A session: one accepted connection's flows. Worker thread only;
 * counted, because a Mux.Cool session's sub-flows outlive the call that
 * opened them. */
typedef struct session {
	unsigned refs;
	principal *bound; /* a reference: the principal of its first flow; NULL before */
	bool closed;
	uint64_t flows; /* admitted so far */
} session;

/* NULL without memory. */
session *session_new(void);
void session_hold(session *s);
/* The last release unbinds it (its principal's session count drops).
 * NULL is a no-op. */
void session_release(session *s);

/* The session closed: its later flows are refused. */
void session_close(session *s);

/* Admits a flow of session s (NULL: a flow without one) presented by p
 * (NULL: the anonymous principal), as the connector does before routing
 * (seed 002 Session::admit). Returns NULL, or the refusal's text:
 * PRINCIPAL_SESSION_CLOSED_TEXT when s was closed or its principal was
 * revoked with close; PRINCIPAL_REMOVED_TEXT when p is revoked and this is
 * s's first flow (s is closed too); PRINCIPAL_TOO_MANY_SESSIONS_TEXT when
 * binding s would pass p's max_sessions. */
const char *session_admit(session *s, principal *p);

#endif
