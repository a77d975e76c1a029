/* tracker.h - the flow tracker's table on one worker (seed 002 "Tracker"): every open flow with what the connector knew when it opened, its bytes, the way to end it, the recently ended ones, and usage per name. */
#ifndef ETM_RUNTIME_TRACKER_H
#define ETM_RUNTIME_TRACKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "base/access_log.h"
#include "base/addr.h"
#include "base/list.h"
#include "runtime/principal.h"

/* Ended flows a table keeps, oldest dropped first (the admin API's
 * closed list; etemenanki/supervisor.h ETM_FLOWS_CLOSED_MAX). */
#define TRACK_CLOSED_MAX 256

/* Names a usage table counts (per inbound, outbound, user); a name past
 * them is counted under TRACK_OTHER_NAME. Configs name a few hundred;
 * the bound keeps reload after reload of new tags from growing a table
 * for ever. */
#define TRACK_NAMES_MAX 4096
#define TRACK_OTHER_NAME "(other)"

/* A name a record copies is cut to this many bytes less one. */
#define TRACK_NAME_MAX ACCESS_LOG_NAME_MAX

/* Ids carry their worker's index above this bit, so a kill finds the
 * worker from the id alone. */
#define TRACK_ID_SHIFT 40

typedef struct tracker tracker;
typedef struct track_flow track_flow;

/* Ends a flow from outside its own callbacks (a kill): the owner closes
 * it with why, at once or on its next event; either way track_end runs. */
typedef void (*track_kill_fn)(void *ud, const char *why);

/* Bytes the owner counts somewhere the record does not see (a splicer's),
 * added to the record's when read. */
typedef void (*track_more_fn)(void *ud, uint64_t *up, uint64_t *down);

typedef enum track_usage_by { TRACK_BY_INBOUND, TRACK_BY_OUTBOUND, TRACK_BY_USER, TRACK_BY_N_ } track_usage_by;

/* One open or ended flow. Worker thread only; the fields are read by the
 * table's snapshots, written by the connector at the open and by the
 * flow's owner (bytes, kill). */
struct track_flow {
	list_node node; /* in the table's open list (or its kill list during a kill) */
	tracker *t;
	uint64_t id;
	uint64_t start_ms, end_ms; /* Unix time */
	bool udp;
	bool listed;    /* registered: in the table */
	bool ended;
	bool in_kill;   /* on the table's kill list */
	uint64_t assoc; /* UDP: the association's id */
	addr_dest source, dest, sniffed; /* kind ADDR_NONE when unknown / none */
	int32_t rule;
	unsigned long long version;
	uint64_t epoch;
	/* bytes[0] up (client to target), bytes[1] down; an endpoint counts
	 * into them directly (endpoint_set_track) */
	uint64_t bytes[2];
	track_more_fn more;
	void *more_ud;
	track_kill_fn kill;
	void *kill_ud;
	access_log_flow *log; /* owned: the end line, written by track_end */
	principal *who;       /* a reference while open: the user it belongs to; NULL: anonymous */
	char why[TRACK_NAME_MAX];
	char inbound[TRACK_NAME_MAX], user[TRACK_NAME_MAX], outbound[TRACK_NAME_MAX],
	    member[TRACK_NAME_MAX];
};

/* What the connector knows when a flow's outbound opened. Borrowed for the
 * call; NULL names are "". */
typedef struct track_open {
	bool udp;
	uint64_t assoc;
	const char *inbound, *user, *outbound, *member;
	principal *who; /* the flow's principal (held by the record); NULL: anonymous */
	const struct sockaddr_storage *peer; /* the client; NULL: unknown */
	const addr_dest *dest;
	const addr_dest *sniffed; /* NULL or ADDR_NONE: nothing */
	int32_t rule;
	unsigned long long version;
	uint64_t epoch;
} track_open;

/* A table for the worker with index `index`, reading the time (Unix ms)
 * from clock_ms, the shell's clock. NULL when memory runs out. */
tracker *tracker_new(size_t index, uint64_t (*clock_ms)(void));

/* The table's clock (Unix ms): the one the users' token buckets are
 * charged by too, so every worker's charges compare. */
uint64_t track_clock_ms(const track_flow *f);

/* Frees the table and the ended flows it keeps. Every open flow must have
 * ended first. */
void tracker_free(tracker *t);

/* A new id from the table's sequence (flows and associations share it). */
uint64_t tracker_next_id(tracker *t);

/* The worker index an id was made on. */
static inline size_t tracker_id_worker(uint64_t id) { return (size_t)(id >> TRACK_ID_SHIFT) - 1; }

/* A record of a flow whose outbound is opening: filled from o, not yet in
 * the table. Takes log over (NULL: no end line). Returns NULL when memory
 * runs out (log is ended then, "out of memory"): the flow then runs
 * untracked. */
track_flow *tracker_prepare(tracker *t, const track_open *o, access_log_flow *log);

/* The outbound opened: f enters the table, with the balancer member that
 * carries it (NULL: none), and starts its clock. */
void track_register(track_flow *f, const char *member);

/* The open failed or was cancelled: f's end line is written with why
 * (NULL: ACCESS_LOG_CLOSED) and f freed, never having been in the table.
 * NULL is a no-op. */
void track_discard(track_flow *f, const char *why);

/* tracker_prepare and track_register at once (member in o). */
track_flow *tracker_open(tracker *t, const track_open *o, access_log_flow *log);

static inline void track_set_kill(track_flow *f, track_kill_fn kill, void *ud)
{
	f->kill = kill;
	f->kill_ud = ud;
}

static inline void track_set_more(track_flow *f, track_more_fn more, void *ud)
{
	f->more = more;
	f->more_ud = ud;
}

/* The flow's bytes so far, the owner's extra ones included. */
void track_bytes(const track_flow *f, uint64_t *up, uint64_t *down);

/* The flow ended (why NULL: in order, ACCESS_LOG_CLOSED): writes its end
 * line, counts its bytes in the usage tables, and moves it to the ring of
 * ended flows. f is not to be used after. NULL is a no-op. */
void track_end(track_flow *f, const char *why);

/* Flows open now, oldest first. */
size_t tracker_open_count(const tracker *t);
const list *tracker_open_list(const tracker *t);

/* The ended flows kept, oldest first: i in [0, tracker_closed_count). */
size_t tracker_closed_count(const tracker *t);
const track_flow *tracker_closed_at(const tracker *t, size_t i);

/* Bytes of the flows that ended, summed (the open ones are read from
 * their records). */
void tracker_ended_bytes(const tracker *t, uint64_t *up, uint64_t *down);

/* Ends every open flow match(f, arg) says, through its kill hook with why;
 * a flow without a hook is not ended. Safe against kills that end other
 * flows on the way. Returns how many were asked to end. */
size_t tracker_kill(tracker *t, bool (*match)(const track_flow *f, void *arg), void *arg,
                    const char *why);

/* Usage by name: up, down of ended flows and the flows ever registered
 * (open counts and open bytes come from the open list). Calls fn for each
 * name the table has. */
typedef void (*track_usage_fn)(const char *name, uint64_t up, uint64_t down, uint64_t total,
                               void *arg);
void tracker_usage(const tracker *t, track_usage_by by, track_usage_fn fn, void *arg);

/* The name f counts under for by ("" for the anonymous user; the member
 * when a balancer chose one). */
const char *track_usage_name(const track_flow *f, track_usage_by by);

#endif
