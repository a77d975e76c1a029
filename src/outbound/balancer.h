/* balancer.h - the sans-io balancer core: member health (rise/fall), lock-free selection (failover, round_robin), retry order and re-probe requests; no sockets, no clock, no threads. */
#ifndef ETM_OUTBOUND_BALANCER_H
#define ETM_OUTBOUND_BALANCER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What a balancer is (seed 000 "Balancing in depth", seed 003 "Failover
 * between upstreams", issue 6):
 *
 * - Members are numbered 0..n-1 in configured order; a tag listed twice is
 *   two members. Every member starts healthy (seed 000: starting down would
 *   drop all traffic for a whole interval after every start or reload).
 * - Health changes only through balancer_report, which the probe shell calls
 *   with each probe's result. A dial failure does not mark a member down: it
 *   asks for an early probe (balancer_dial_failed), whose result then counts
 *   like any other.
 * - Selection never fails: with every member down it returns member 0, the
 *   first configured one (seed 000: a balancer that refuses every flow after
 *   a bad probe cycle is a black hole), and asks for every member to be
 *   re-probed.
 *
 * Threads. Two roles share a balancer:
 * - the control thread (the probe shell) is the only one that calls
 *   balancer_report, balancer_take_reprobe and balancer_take_reprobe_all;
 * - any number of worker threads call balancer_select, balancer_next and
 *   balancer_dial_failed at once, and with the control thread. These never
 *   block, never allocate and take no lock.
 * balancer_size, balancer_strategy, balancer_retry and balancer_is_up may be
 * called from any thread. balancer_new and balancer_del run while no other
 * thread uses the balancer (the shell publishes it and retires it through
 * the plane's refcounts).
 *
 * Health is a bitmap of 64-member words that the control thread updates with
 * release read-modify-writes and selection reads with one acquire load per
 * word (not per member, as the seed's Vec of flags does: one load covers up
 * to 64 members). A pick therefore sees an exact snapshot of every member's
 * health when the balancer has at most 64 members; with more, each word is a
 * snapshot of its own, and a pick may combine words a moment apart (at
 * worst it sees every member down while one in another word is just coming
 * up, and falls back to member 0).
 *
 * Waking the control thread. A worker that raises a request (a member's
 * re-probe, the every-member re-probe) is told so through a bool "wake"
 * result that is true only when the request was not already pending; it then
 * wakes the control thread once (uv_async_send). While a request stays
 * pending, further failures neither write the flag nor ask for a wake, so a
 * storm of failed dials costs one atomic load each. This is also how the
 * shell rate-limits: it takes a request only when it is ready to act on it
 * (for instance not while a probe of that member is running, or within its
 * minimum gap between re-probes of every member), and leaves it pending
 * until then. */

/* Members per balancer. A client-side balancer lists a handful of upstreams
 * and each member runs its own probe loop on the control thread; 1024 leaves
 * room for generated configs while the health bitmap a pick reads stays at
 * 16 words (two cache lines), and member indices fit in 16 bits. */
#define BALANCER_MAX_MEMBERS 1024

/* Largest retry. Each retry can cost a whole dial timeout before the client
 * hears anything, so past a few the client's own timeout fires first; 8
 * keeps balancer_attempt at 20 bytes on the flow. */
#define BALANCER_MAX_RETRY 8

/* Members one flow may dial: the first pick and every retry. */
#define BALANCER_MAX_TRIES (1 + BALANCER_MAX_RETRY)

/* The user-facing texts balancer_new writes to err, word for word. The
 * first is the seed's (000 "What may be balanced"). */
#define BALANCER_ERR_EMPTY "a balancer needs at least one outbound"
#define BALANCER_ERR_TOO_MANY "a balancer has at most 1024 outbounds"
#define BALANCER_ERR_RETRY "balancer retry is at most 8"
#define BALANCER_ERR_NOMEM "out of memory building a balancer"

typedef struct balancer balancer;

/* How a pick chooses among the healthy members (seed 000 "Selection"). */
typedef enum balancer_strategy_kind {
	BALANCER_FAILOVER,    /* the first healthy member in configured order */
	BALANCER_ROUND_ROBIN, /* a shared rotation over the healthy members */
} balancer_strategy_kind;

/* A zeroed balancer_config is the seeds' balancer: failover, rise 1, fall 1,
 * no retry, every member its own upstream. */
typedef struct balancer_config {
	balancer_strategy_kind strategy; /* BALANCER_FAILOVER (0) or BALANCER_ROUND_ROBIN */
	/* Consecutive probe results needed to mark a down member up (rise) or
	 * an up member down (fall); 0 means 1. Only an unbroken run counts:
	 * a result that agrees with the member's current state resets it, so
	 * with fall > 1 one lost SYN does not flip a member (seed 003
	 * "Choosing the probe timings"). */
	uint32_t rise;
	uint32_t fall;
	/* Further members a flow may try when the dial to its member fails
	 * before any byte was relayed (balancer_next); 0..BALANCER_MAX_RETRY. */
	uint32_t retry;
	/* Optional, n_members entries, borrowed for the call (copied): members
	 * with equal values reach the same upstream (a tag listed twice, seed
	 * 003 "Weights are possible only by repetition"). When one of them
	 * fails for a flow, balancer_next skips the others too. NULL: every
	 * member is distinct. */
	const uint32_t *upstream;
} balancer_config;

/* One flow's dial attempts, for balancer_next. Owned by the flow (one
 * thread); zeroed means nothing tried yet. The fields are the core's. */
typedef struct balancer_attempt {
	uint16_t tried[BALANCER_MAX_TRIES]; /* members returned so far, in order */
	uint8_t n_tried;
	bool done; /* balancer_next returned SIZE_MAX */
} balancer_attempt;

/* What balancer_report did to the member's state: the shell logs
 * "balancer member <tag> is now up" / "... is now down" (seed 000 "The
 * probe task"), followed by the balancer's tag and, going down, the
 * probe's failure (issue 32), at info on the last two, and nothing on the
 * first. */
typedef enum balancer_probe_result {
	BALANCER_UNCHANGED = 0,
	BALANCER_NOW_UP,
	BALANCER_NOW_DOWN,
} balancer_probe_result;

/* A balancer over n_members members, all healthy. Returns NULL with one of
 * the BALANCER_ERR_ texts in err (truncated to err_size; err may be NULL
 * when err_size is 0) when n_members is 0 or above BALANCER_MAX_MEMBERS,
 * cfg->retry is above BALANCER_MAX_RETRY, or memory runs out. cfg is
 * borrowed for the call; NULL is the zeroed config. */
__attribute__((warn_unused_result)) balancer *balancer_new(const balancer_config *cfg,
                                                           size_t n_members, char *err,
                                                           size_t err_size);

/* Frees the balancer. No other thread may be using it. NULL is a no-op. */
void balancer_del(balancer *b);

/* The member a new flow goes to. Any thread, lock-free: one acquire load
 * per 64 members, plus one relaxed fetch_add of the shared rotation counter
 * under round_robin when some member is healthy.
 * - failover: the first healthy member in configured order;
 * - round_robin: counter mod h over the h members healthy at that moment,
 *   in configured order (with b down among a, b, c: a, c, a, c, ...); the
 *   counter keeps running, so the rotation shifts when the healthy set
 *   changes (seed 000 "Selection");
 * - every member down: member 0, and the every-member re-probe is requested.
 * Always returns a member index below balancer_size(b). wake may be NULL;
 * otherwise it is set to true when this call raised the every-member
 * re-probe request (the caller wakes the control thread), else false. */
__attribute__((warn_unused_result)) size_t balancer_select(balancer *b, bool *wake);

/* Retry order. With a zeroed *a, the same pick as balancer_select. Called
 * again with the same *a after the dial to the member it last returned
 * failed before any byte was relayed, it returns the next member to try:
 * - the candidates are the healthy members not yet tried for this flow
 *   (skipping the members that share an upstream with a tried one);
 * - failover: the first candidate in configured order;
 * - round_robin: a second shared counter, the retry rotation, counter mod
 *   c over the c candidates in configured order. Retries have a counter of
 *   their own so that the first picks keep their even rotation while a
 *   member fails, and the retries from a failing member spread evenly over
 *   the others instead of all going to the member after it;
 * - every member down (none healthy at all): the first untried member in
 *   configured order, the seed's fallback extended to the retry, and the
 *   every-member re-probe is requested;
 * - SIZE_MAX when cfg->retry retries were already returned, or when some
 *   members are healthy but all of them were tried (down members are not
 *   tried while a healthy one exists), or when every member was tried.
 * Once it has returned SIZE_MAX it keeps returning SIZE_MAX. Each member
 * returned is recorded in *a. Any thread, lock-free; *a belongs to the
 * calling flow. wake as for balancer_select. The caller reports the failed
 * dial with balancer_dial_failed as well; this function does not. */
__attribute__((warn_unused_result)) size_t balancer_next(balancer *b, balancer_attempt *a,
                                                         bool *wake);

/* A probe of member finished: up is whether it connected. Applies rise and
 * fall and returns the change, if any. Control thread only. A member index
 * out of range changes nothing. */
__attribute__((warn_unused_result)) balancer_probe_result
balancer_report(balancer *b, size_t member, bool up);

/* A dial to member failed (issue 6, passive failure): requests an early
 * re-probe of it. Returns true when the request was not already pending, so
 * the caller should wake the control thread; false otherwise (or for a
 * member out of range). Any thread, lock-free: a relaxed load, and one
 * atomic RMW only when the request was not pending. The member's health is
 * left to the probe. */
__attribute__((warn_unused_result)) bool balancer_dial_failed(balancer *b, size_t member);

/* Whether an early re-probe of member was requested; clears the request.
 * Control thread only; the shell calls it when it is ready to start that
 * probe (see "Waking the control thread" above). */
__attribute__((warn_unused_result)) bool balancer_take_reprobe(balancer *b, size_t member);

/* Whether selection fell back to member 0 because every member was down
 * since the last call; clears the request. Control thread only. The shell
 * then probes every member at once, at most as often as it allows itself
 * (the core holds no clock). */
__attribute__((warn_unused_result)) bool balancer_take_reprobe_all(balancer *b);

/* Members, strategy and retry as built. Any thread. */
size_t balancer_size(const balancer *b);
balancer_strategy_kind balancer_strategy(const balancer *b);
uint32_t balancer_retry(const balancer *b);

/* Whether member is healthy now (false out of range). Any thread; a relaxed
 * read, for the admin view and tests. */
bool balancer_is_up(const balancer *b, size_t member);

#endif
