/* plan.h - the hot-reload planner: compares the running spec with a new one and says, object by object, what to build, reuse, swap, stop and drain, and whether to publish the plane. */
#ifndef ETM_SUPERVISOR_PLAN_H
#define ETM_SUPERVISOR_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "etemenanki/spec.h"

/* The plan step of ARCHITECTURE.md section 7 and seed 002 ("规划与应用变更"):
 * spec -> plan -> prepare -> commit. The planner is sans-io: it reads two
 * specs and a version registry and writes a plan; it opens no socket, reads
 * no clock and no file, and builds nothing. prepare builds what the BUILD
 * steps name; commit walks the remaining steps in order. */

typedef enum plan_kind {
	PLAN_INBOUND, /* a listener; a udp_lb one runs the cluster it names */
	PLAN_OUTBOUND,
	PLAN_BALANCER,
	PLAN_CLUSTER, /* a [[cluster]]: applied through the udp_lb inbounds that name it */
	PLAN_ROUTE,
	PLAN_DNS,
	PLAN_LOG,
	PLAN_KIND_COUNT_,
} plan_kind;

typedef enum plan_action {
	PLAN_REUSED,  /* unchanged: the running object carries on as the same object */
	PLAN_BUILT,   /* new, or changed so that a new object replaces the running one */
	PLAN_SWAPPED, /* changed in place: the running object (its socket, its version)
	               * takes the new config */
	PLAN_REMOVED, /* in the running spec only */
} plan_action;

typedef enum plan_drain_kind {
	PLAN_DRAIN_KEEP,        /* the old version's flows run until they end */
	PLAN_DRAIN_CLOSE,       /* they close right after the publish */
	PLAN_DRAIN_CLOSE_AFTER, /* they close after_s seconds after the publish */
} plan_drain_kind;

typedef struct plan_drain {
	plan_drain_kind kind;
	uint64_t after_s; /* PLAN_DRAIN_CLOSE_AFTER only; at least 1 */
} plan_drain;

/* Bits of plan_entry.flags. */
enum {
	/* inbound BUILT over a running one of the same tag on another address
	 * or socket type: the new listener starts, then the old one stops */
	PLAN_F_REBIND = 1u << 0,
	/* names files that are read again on every reload (TLS certificate,
	 * key and CA; geoip and geosite): see "Files" in plan.c */
	PLAN_F_FILES = 1u << 1,
	/* balancer BUILT although its own spec is unchanged: a member was */
	PLAN_F_MEMBER = 1u << 2,
	/* udp_lb inbound SWAPPED (also) because its cluster changed */
	PLAN_F_CLUSTER = 1u << 3,
	/* inbound SWAPPED (also) because [policy]'s connection limits changed */
	PLAN_F_POLICY = 1u << 4,
	/* outbound SWAPPED: only its drain policy changed; nothing is rebuilt */
	PLAN_F_DRAIN = 1u << 5,
	/* inbound SWAPPED onto the socket of a removed inbound of another tag
	 * on the same address (a rename): prev is that inbound */
	PLAN_F_RENAMED = 1u << 6,
};

/* An absent index. */
#define PLAN_NONE SIZE_MAX

typedef struct plan_entry {
	plan_kind kind;
	plan_action action;
	unsigned flags; /* PLAN_F_* */
	/* Borrowed from next (from prev when REMOVED); NULL for the route, dns
	 * and log. */
	const char *tag;
	size_t prev; /* index in prev's array of this kind, or PLAN_NONE */
	size_t next; /* index in next's array of this kind, or PLAN_NONE */
	/* Outbounds and balancers (seed 002: every target is a version tag@vN): */
	uint64_t version;     /* the version next runs: a new one when BUILT; 0 when REMOVED */
	uint64_t old_version; /* the version that leaves: the one a BUILT replaces or a
	                       * REMOVED ends; 0 when none leaves */
	/* Outbounds only: */
	plan_drain drain;     /* version's policy under next, for a later reload */
	plan_drain old_drain; /* the policy old_version ran under: what its DRAIN applies */
} plan_entry;

typedef enum plan_step_kind {
	/* prepare: build the entry's object (an outbound version, a balancer,
	 * the route with its geodata, the resolver, the log level, an inbound
	 * with its new socket bound); nothing running changes */
	PLAN_STEP_BUILD,
	/* commit: epoch += 1, the new plane to every worker, acknowledged */
	PLAN_STEP_PUBLISH,
	/* commit: the running object takes the entry's new config */
	PLAN_STEP_SWAP,
	/* commit: a new inbound's listener starts accepting */
	PLAN_STEP_START,
	/* commit: a removed or replaced inbound's listener closes; a removed or
	 * replaced balancer's probes end (balancers never drain) */
	PLAN_STEP_STOP,
	/* commit, last: the entry's old_version gets old_drain; it is the end of
	 * an outbound version, which is freed once no plane or flow holds it */
	PLAN_STEP_DRAIN,
} plan_step_kind;

typedef struct plan_step {
	plan_step_kind kind;
	size_t entry; /* index into plan.entries; PLAN_NONE for PUBLISH */
} plan_step;

typedef struct plan_counts {
	size_t built, reused, swapped, removed;
	size_t drained; /* DRAIN steps */
} plan_counts;

/* A zeroed plan is empty and may be freed. */
typedef struct plan {
	/* Owned: outbounds, balancers, clusters, inbounds (each kind in next's
	 * order, then the removed ones in prev's), then route, dns and log. */
	plan_entry *entries;
	size_t n_entries;
	/* Owned, in the order they run: every BUILD (outbounds, balancers,
	 * route, dns, log, inbounds), PUBLISH, every SWAP, START, STOP, and
	 * every DRAIN last (seed 002: an old version drains only once new
	 * flows go to its successor). */
	plan_step *steps;
	size_t n_steps;
	bool publish;        /* a PUBLISH step is among the steps */
	bool restart_needed; /* [runtime] changed: it is read at start only */
	unsigned changed;    /* bit (1u << kind) for each kind with an entry not REUSED */
	plan_counts counts;
} plan;

/* The registry of versions: for every tag ever built (outbounds and
 * balancers share one namespace) the last version number it took, kept
 * after the tag is removed, so a rebuild takes the next number and a tag
 * added back takes one it never had (seed 002 next_version). A zeroed
 * registry is empty. Control thread only, like the plan. */
typedef struct plan_version {
	char *tag; /* owned */
	uint64_t last;
} plan_version;

typedef struct plan_versions {
	plan_version *items; /* owned, sorted by tag */
	size_t len;
} plan_versions;

/* Error codes. */
enum {
	PLAN_E_NOMEM = -1,
	/* a tag of prev has no version: the registry was not committed after
	 * the plan that made prev */
	PLAN_E_UNVERSIONED = -2,
};

/* Plans the change from prev (the running spec; NULL before the first
 * plan) to next (a spec that passed etm_spec_check). Fills *out, which
 * borrows tags from both specs: free it before either. Reads versions
 * without changing it. Returns 0, PLAN_E_NOMEM or PLAN_E_UNVERSIONED; on
 * error *out is zeroed. */
__attribute__((warn_unused_result)) int plan_compute(plan *out, const etm_spec *prev,
                                                     const etm_spec *next,
                                                     const plan_versions *versions);

/* Whether the files running object i of prev (kind PLAN_INBOUND,
 * PLAN_OUTBOUND or PLAN_ROUTE) names were written since it was built. The
 * planner asks only for an object whose spec is unchanged and that names
 * files (PLAN_F_FILES); the shell answers (it reads the file system, the
 * planner does not). */
typedef bool (*plan_files_changed_fn)(void *ud, plan_kind kind, size_t i);

/* plan_compute, where an object whose files changed counts as changed: an
 * inbound is SWAPPED (a renewed certificate reaches new handshakes on the
 * same socket), an outbound BUILT as a new version, the route BUILT. */
__attribute__((warn_unused_result)) int plan_compute_files(plan *out, const etm_spec *prev,
                                                           const etm_spec *next,
                                                           const plan_versions *versions,
                                                           plan_files_changed_fn changed,
                                                           void *ud);

void plan_free(plan *p);

/* The last version tag took; 0 when it was never built. */
uint64_t plan_versions_last(const plan_versions *v, const char *tag);

/* Records the versions p built. Call once p is committed: a plan whose
 * prepare failed leaves no trace, and its numbers are taken again. Returns
 * 0, or PLAN_E_NOMEM with v unchanged. */
__attribute__((warn_unused_result)) int plan_versions_commit(plan_versions *v, const plan *p);

void plan_versions_free(plan_versions *v);

/* The policy old versions of outbound o of spec s get: o's own drain keys
 * when it sets either, else [policy]'s; keep when neither sets any. */
plan_drain plan_drain_of(const etm_spec *s, const etm_outbound_spec *o);

/* "inbounds", "outbounds", "balancers", "clusters", "route", "dns", "log". */
const char *plan_kind_name(plan_kind k);
/* "reused", "built", "swapped", "removed". */
const char *plan_action_name(plan_action a);

/* The debug line commit ends with (seed 002):
 * "applied: <n> built, <n> reused, <n> swapped, <n> drained". Returns 0,
 * or -1 when size cut it short. */
__attribute__((warn_unused_result)) int plan_applied_text(const plan *p, char *buf, size_t size);

/* The info line of a reload: "config reload: no changes" (seed 003), or
 * "config reload: changed inbounds, route" naming every kind in
 * plan.changed, then "runtime (at the next start)" when restart_needed.
 * Returns 0, or -1 when size cut it short. */
__attribute__((warn_unused_result)) int plan_summary_text(const plan *p, char *buf, size_t size);

#endif
