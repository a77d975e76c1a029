/* guard.h - the process's admission guard: connections per client source, and our own listening addresses as destinations that would loop. */
#ifndef ETM_RUNTIME_GUARD_H
#define ETM_RUNTIME_GUARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* The automatic per-source bound (max_connections_per_source = 0): this
 * share of the soft RLIMIT_NOFILE, in connections. A proxied flow holds two
 * descriptors, so one source may take at most a quarter of them and the
 * rest of the clients keep three quarters. */
#define GUARD_AUTO_SOURCE_DIVISOR 8
/* ... and never fewer than this: a browser behind one address opens a few
 * dozen connections at once. */
#define GUARD_AUTO_SOURCE_MIN 64

/* Listening addresses kept (every TCP inbound on every worker counts once). */
#define GUARD_LISTENS_MAX 256

/* A warning of one kind is written at most this often; the next one says
 * how many events it stood for. */
#define GUARD_WARN_INTERVAL_MS 10000

/* Buckets of the per-source table: sources spread by a hash of the address. */
#define GUARD_BUCKETS 4096

/* Sub-flow and call opens (Mux.Cool New frames, gRPC calls), token
 * buckets: a session (one carrier connection) may open GUARD_OPEN_RATE_SESSION
 * a second after a burst of GUARD_OPEN_BURST_SESSION. v2ray's client never
 * uses more than 128 ids in a session (MUX_CLIENT_SUBS_TOTAL): a whole
 * session of a real client fits the burst, and 64 a second after it is more
 * than a browser opens through one carrier. One session opening and ending
 * sub-flows in a loop made the server complete 12,445 upstream connections
 * a second (issue 32, D3); now at most 64. */
#define GUARD_OPEN_RATE_SESSION 64
#define GUARD_OPEN_BURST_SESSION 128
/* ... and every carrier of one client address together: four sessions'
 * worth, so a client with a few carriers is not throttled by its session
 * rate times its sessions (the per-source connection bound stays the bound
 * on what is open at once). */
#define GUARD_OPEN_RATE_SOURCE 256
#define GUARD_OPEN_BURST_SOURCE 512

/* A token bucket for opens: level in thousandths of a token. The caller
 * owns it (a session's, on its worker), or the guard does (a source's,
 * under its lock); time is passed in. */
typedef struct guard_bucket {
	uint64_t level_milli;
	uint64_t last_ms;
	bool started;
} guard_bucket;

/* Takes one token from b at now_ms (filling rate a second up to burst; a
 * new bucket starts full). False when none is left: nothing taken. */
bool guard_bucket_take(guard_bucket *b, uint64_t now_ms, uint32_t rate, uint32_t burst);

typedef struct guard guard;

/* What the guard has refused since it started. */
typedef struct guard_stats {
	uint64_t refused_source; /* connections over max_connections_per_source */
	uint64_t refused_loop;   /* dials to one of our own listening addresses */
	uint64_t accept_paused;  /* times a listener paused for lack of descriptors */
	uint64_t refused_fanout; /* sub-flows, calls, UDP entries over the same per-source bound */
	uint64_t refused_open_rate; /* sub-flow and call opens over GUARD_OPEN_RATE_* */
} guard_stats;

/* A guard allowing max_per_source connections per client address (0: the
 * automatic bound above, from the current RLIMIT_NOFILE). Returns NULL when
 * memory runs out. Thread-safe after creation: every worker shares it. */
guard *guard_new(uint64_t max_per_source);
void guard_del(guard *g);

/* The bound in force (after the automatic one was computed). */
uint64_t guard_source_limit(const guard *g);

/* Counts one more connection from peer's address. False (nothing counted,
 * the refusal counted and logged at most every GUARD_WARN_INTERVAL_MS) when
 * the address has its limit open already. g may be NULL: always true. */
__attribute__((warn_unused_result)) bool guard_source_take(guard *g,
                                                           const struct sockaddr *peer);

/* Releases a connection guard_source_take counted. */
void guard_source_put(guard *g, const struct sockaddr *peer);

/* What a connection carries counts against its source's bound too: each
 * Mux.Cool sub-flow and gRPC call one (its upstream descriptor), a UDP
 * NAT entry or association the descriptors its link holds (n). False
 * (nothing counted; counted in refused_fanout and logged at most every
 * GUARD_WARN_INTERVAL_MS) when the source's connections and holds would
 * pass the bound. g may be NULL: always true. */
__attribute__((warn_unused_result)) bool guard_source_hold(guard *g, const struct sockaddr *peer,
                                                           unsigned n);

/* Releases n that guard_source_hold counted. */
void guard_source_unhold(guard *g, const struct sockaddr *peer, unsigned n);

/* Whether a carrier of peer may open one more sub-flow or call at now_ms:
 * a token from session (the carrier's own bucket, GUARD_OPEN_*_SESSION),
 * then from the source's (GUARD_OPEN_*_SOURCE; only while the source has
 * something counted). False: counted in refused_open_rate, logged at most
 * every GUARD_WARN_INTERVAL_MS with what (e.g. "mux sub-flow"). g NULL: only
 * the session's bucket. */
__attribute__((warn_unused_result)) bool guard_open_allowed(guard *g, const struct sockaddr *peer,
                                                            guard_bucket *session,
                                                            uint64_t now_ms, const char *what);

/* Adds ip:port (an IP literal, "0.0.0.0" or "::" for every address) to
 * our own listening addresses. One thread adds (the control thread: at the
 * start, or a reload) while workers read. Returns 0, or -1
 * when the table is full or ip is not an address. */
__attribute__((warn_unused_result)) int guard_listen_add(guard *g, const char *ip, uint16_t port);

/* True when dest (a resolved address with its port) reaches one of our own
 * listeners: the same address and port, or the port of a wildcard listener
 * on any address of this host (checked by binding a probe socket to it).
 * A true result is counted and logged (rate-limited). g may be NULL. */
__attribute__((warn_unused_result)) bool guard_is_own(guard *g, const struct sockaddr *dest);

/* A listener found no descriptor left: counted and logged (rate-limited)
 * with what it does about it, "<ip>:<port>" and the pause in ms. */
void guard_accept_paused(guard *g, const char *where, const char *why, unsigned pause_ms);

void guard_stats_get(const guard *g, guard_stats *out);

#endif
