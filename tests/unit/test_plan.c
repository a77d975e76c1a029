/* test_plan.c - the hot-reload planner: what each change builds, reuses, swaps, drains and publishes, the versions, and the drain keys it reads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "app/config.h"
#include "supervisor/plan.h"
#include "supervisor/plan_equal.h"

/* Specs come from TOML text through config_load, the path --test takes. */
static void load(const char *toml, etm_spec *s)
{
	char msg[CONFIG_MSG_MAX];
	int rc = config_load(toml, strlen(toml), s, msg, sizeof msg);
	if (rc)
		fail_msg("unexpected error:\n%s", msg);
}

/* The last line of a report: the detail without the excerpt. */
static const char *detail(const char *msg)
{
	const char *nl = strrchr(msg, '\n');
	return nl ? nl + 1 : msg;
}

static void refused(const char *toml, const char *want, bool parse_error)
{
	etm_spec s;
	char msg[CONFIG_MSG_MAX];
	assert_int_equal(config_load(toml, strlen(toml), &s, msg, sizeof msg), -1);
	if (parse_error) {
		assert_true(strncmp(msg, "TOML parse error at line ", 25) == 0);
		assert_string_equal(detail(msg), want);
	} else {
		assert_string_equal(msg, want);
	}
}

#define DIRECT "[[outbound]]\ntag = \"direct\"\nprotocol = \"freedom\"\n"

/* ---- the drain keys ---- */

static void the_drain_keys_parse_with_unset_defaults(void **state)
{
	(void)state;
	etm_spec s;
	load(DIRECT "[[outbound]]\ntag = \"a\"\nprotocol = \"freedom\"\ndrain = \"close\"\n"
	            "[[outbound]]\ntag = \"b\"\nprotocol = \"freedom\"\ndrain_after = 30\n"
	            "[[outbound]]\ntag = \"c\"\nprotocol = \"freedom\"\ndrain = \"close\"\n"
	            "drain_after = 0\n"
	            "[[outbound]]\ntag = \"d\"\nprotocol = \"freedom\"\ndrain = \"keep\"\n"
	            "[policy]\ndrain = \"close\"\ndrain_after = 86400\n",
	     &s);
	assert_int_equal(s.outbounds[0].drain.mode, ETM_DRAIN_UNSET);
	assert_false(s.outbounds[0].drain.has_after);
	assert_int_equal(s.outbounds[1].drain.mode, ETM_DRAIN_CLOSE);
	assert_false(s.outbounds[1].drain.has_after);
	assert_int_equal(s.outbounds[2].drain.mode, ETM_DRAIN_UNSET);
	assert_true(s.outbounds[2].drain.has_after);
	assert_int_equal(s.outbounds[2].drain.after, 30);
	assert_int_equal(s.outbounds[3].drain.mode, ETM_DRAIN_CLOSE);
	assert_true(s.outbounds[3].drain.has_after);
	assert_int_equal(s.outbounds[3].drain.after, 0);
	assert_int_equal(s.outbounds[4].drain.mode, ETM_DRAIN_KEEP);
	assert_int_equal(s.policy.drain.mode, ETM_DRAIN_CLOSE);
	assert_true(s.policy.drain.has_after);
	assert_int_equal(s.policy.drain.after, 86400);
	etm_spec_free(&s);

	load(DIRECT, &s);
	assert_int_equal(s.policy.drain.mode, ETM_DRAIN_UNSET);
	assert_false(s.policy.drain.has_after);
	etm_spec_free(&s);
}

static void bad_drain_values_are_refused_word_for_word(void **state)
{
	(void)state;
	refused(DIRECT "drain = \"later\"\n", "unknown variant `later`, expected `keep` or `close`",
	        true);
	refused(DIRECT "drain = \"Close\"\n", "unknown variant `Close`, expected `keep` or `close`",
	        true);
	refused(DIRECT "drain_after = \"30s\"\n", "invalid type: string \"30s\", expected u64", true);
	refused(DIRECT "drain_after = -1\n", "invalid value: integer `-1`, expected u64", true);
	refused(DIRECT "[policy]\ndrain = true\n", "invalid type: boolean `true`, expected a string",
	        true);
	refused(DIRECT "drain_after = 86401\n", "outbound direct: drain_after must be 0 to 86400",
	        false);
	refused(DIRECT "drain = \"keep\"\ndrain_after = 5\n",
	        "outbound direct: drain_after closes the flows of old versions, so it cannot go with "
	        "drain = \"keep\"",
	        false);
	refused(DIRECT "[policy]\ndrain_after = 100000\n", "policy.drain_after must be 0 to 86400",
	        false);
	refused(DIRECT "[policy]\nupgrade_drain_after = 86401\n",
	        "policy.upgrade_drain_after must be 0 to 86400", false);
	refused(DIRECT "[policy]\nupgrade_start_timeout = 0\n",
	        "policy.upgrade_start_timeout must be 1 to 3600", false);
	refused(DIRECT "[policy]\nupgrade_start_timeout = 3601\n",
	        "policy.upgrade_start_timeout must be 1 to 3600", false);
	refused(DIRECT "[policy]\ndrain = \"keep\"\ndrain_after = 5\n",
	        "policy.drain_after closes the flows of old versions, so it cannot go with "
	        "policy.drain = \"keep\"",
	        false);
	/* An outbound's own keys are checked whatever [policy] says, and the
	 * other way round: "keep" in one place and drain_after in the other is
	 * two separate, valid settings. */
	etm_spec s;
	load(DIRECT "drain = \"keep\"\n[policy]\ndrain_after = 5\n", &s);
	etm_spec_free(&s);
}

static void upgrade_start_timeout_takes_its_bounds(void **state)
{
	(void)state;
	etm_spec s;
	load(DIRECT "[policy]\nupgrade_start_timeout = 1\n", &s);
	assert_int_equal(s.policy.upgrade_start_timeout, 1);
	etm_spec_free(&s);
	load(DIRECT "[policy]\nupgrade_start_timeout = 3600\n", &s);
	assert_int_equal(s.policy.upgrade_start_timeout, 3600);
	etm_spec_free(&s);
	refused(DIRECT "[policy]\nupgrade_start_timeout = -1\n",
	        "invalid value: integer `-1`, expected u64", true);
}

/* ---- a running config, reloaded ---- */

/* The running spec and the registry as a supervisor keeps them. */
typedef struct world {
	plan_versions versions;
	etm_spec cur; /* the running spec, once running */
	bool running;
	etm_spec nxt; /* the spec being planned */
	plan p;
} world;

/* Plans the change from the running spec (none before the first commit)
 * to toml. */
static const plan *reload(world *w, const char *toml)
{
	load(toml, &w->nxt);
	assert_int_equal(plan_compute(&w->p, w->running ? &w->cur : NULL, &w->nxt, &w->versions),
	                 0);
	return &w->p;
}

/* The plan is applied: its versions recorded, its spec now the running one. */
static void commit(world *w)
{
	assert_int_equal(plan_versions_commit(&w->versions, &w->p), 0);
	plan_free(&w->p);
	if (w->running)
		etm_spec_free(&w->cur);
	w->cur = w->nxt;
	w->nxt = (etm_spec){0};
	w->running = true;
}

/* The plan is dropped (its prepare failed): nothing of it stays. */
static void drop(world *w)
{
	plan_free(&w->p);
	etm_spec_free(&w->nxt);
}

static void world_free(world *w)
{
	drop(w);
	if (w->running)
		etm_spec_free(&w->cur);
	plan_versions_free(&w->versions);
}

/* Runs toml as the first config. */
static void start(world *w, const char *toml)
{
	*w = (world){0};
	(void)reload(w, toml);
	commit(w);
}

static bool same_tag(const char *a, const char *b)
{
	return a == b || (a && b && strcmp(a, b) == 0);
}

/* The entry of kind k and tag (NULL for the route, dns and log). */
static const plan_entry *entry(const plan *p, plan_kind k, const char *tag)
{
	for (size_t i = 0; i < p->n_entries; i++)
		if (p->entries[i].kind == k && same_tag(p->entries[i].tag, tag))
			return &p->entries[i];
	fail_msg("no %s entry %s", plan_kind_name(k), tag ? tag : "");
	return NULL;
}

/* Where the step of kind k for entry e is (e NULL for the publish), or
 * SIZE_MAX when there is none. */
static size_t step_at(const plan *p, plan_step_kind k, const plan_entry *e)
{
	size_t want = e ? (size_t)(e - p->entries) : PLAN_NONE;
	for (size_t i = 0; i < p->n_steps; i++)
		if (p->steps[i].kind == k && p->steps[i].entry == want)
			return i;
	return SIZE_MAX;
}

static size_t steps_of(const plan *p, plan_step_kind k)
{
	size_t n = 0;
	for (size_t i = 0; i < p->n_steps; i++)
		n += p->steps[i].kind == k;
	return n;
}

static void texts(const plan *p, const char *applied, const char *summary)
{
	char buf[256];
	assert_int_equal(plan_applied_text(p, buf, sizeof buf), 0);
	assert_string_equal(buf, applied);
	assert_int_equal(plan_summary_text(p, buf, sizeof buf), 0);
	assert_string_equal(buf, summary);
}

#define IN_SOCKS "[[inbound]]\ntag = \"in\"\nprotocol = \"socks\"\nport = 1080\n"
#define IN_LB                                                                                      \
	"[[inbound]]\ntag = \"lb\"\nprotocol = \"udp_lb\"\nport = 5353\n"                          \
	"[inbound.settings]\ncluster = \"c\"\n"
#define CLUSTER(backends) "[[cluster]]\ntag = \"c\"\nbackends = [" backends "]\n"
/* outbound p with extra keys of its own */
#define OUT_P_AT(server, extra)                                                                    \
	"[[outbound]]\ntag = \"p\"\nprotocol = \"socks\"\nserver = \"" server "\"\nport = 1080\n"  \
	extra
#define OUT_P OUT_P_AT("192.0.2.1", "")
#define BAL_B "[[balancer]]\ntag = \"b\"\noutbounds = [\"p\"]\n"
#define RULE_B "[[route.rule]]\noutbound = \"b\"\nport = 443\n"

/* Every kind of object once. */
#define EVERYTHING                                                                                 \
	IN_SOCKS IN_LB DIRECT OUT_P BAL_B CLUSTER("\"127.0.0.1:5301\"") RULE_B                     \
		"[dns]\nservers = [\"192.0.2.53\"]\n"

static void the_first_plan_binds_and_builds_everything_then_publishes(void **state)
{
	(void)state;
	world w = {0};
	const plan *p = reload(&w, EVERYTHING);
	for (size_t i = 0; i < p->n_entries; i++)
		assert_int_equal(p->entries[i].action, PLAN_BUILT);
	assert_int_equal(p->n_entries, 9);
	assert_true(p->publish);
	assert_false(p->restart_needed);
	assert_int_equal(entry(p, PLAN_OUTBOUND, "direct")->version, 1);
	assert_int_equal(entry(p, PLAN_OUTBOUND, "p")->version, 1);
	assert_int_equal(entry(p, PLAN_BALANCER, "b")->version, 1);
	assert_int_equal(entry(p, PLAN_OUTBOUND, "p")->old_version, 0);

	/* Everything is built (a cluster by the listener that runs it), the
	 * plane published, then the listeners start; nothing drains. */
	size_t publish = step_at(p, PLAN_STEP_PUBLISH, NULL);
	assert_int_equal(publish, 8);
	assert_int_equal(steps_of(p, PLAN_STEP_BUILD), 8);
	for (size_t i = 0; i < publish; i++)
		assert_int_equal(p->steps[i].kind, PLAN_STEP_BUILD);
	assert_int_equal(p->n_steps, 11);
	assert_true(step_at(p, PLAN_STEP_START, entry(p, PLAN_INBOUND, "in")) > publish);
	assert_true(step_at(p, PLAN_STEP_START, entry(p, PLAN_INBOUND, "lb")) > publish);
	assert_int_equal(steps_of(p, PLAN_STEP_START), 2);
	/* Members before their balancer, targets before the route, inbounds last. */
	size_t out_p = step_at(p, PLAN_STEP_BUILD, entry(p, PLAN_OUTBOUND, "p"));
	size_t bal = step_at(p, PLAN_STEP_BUILD, entry(p, PLAN_BALANCER, "b"));
	size_t route = step_at(p, PLAN_STEP_BUILD, entry(p, PLAN_ROUTE, NULL));
	size_t in = step_at(p, PLAN_STEP_BUILD, entry(p, PLAN_INBOUND, "in"));
	assert_true(out_p < bal && bal < route && route < in && in < publish);
	assert_int_equal(step_at(p, PLAN_STEP_BUILD, entry(p, PLAN_CLUSTER, "c")), SIZE_MAX);
	texts(p, "applied: 9 built, 0 reused, 0 swapped, 0 drained",
	      "config reload: changed inbounds, outbounds, balancers, clusters, route, dns, log");
	commit(&w);
	assert_int_equal(plan_versions_last(&w.versions, "p"), 1);
	assert_int_equal(plan_versions_last(&w.versions, "b"), 1);
	assert_int_equal(plan_versions_last(&w.versions, "in"), 0); /* only targets are versioned */
	world_free(&w);
}

static void an_unchanged_spec_reuses_everything_and_publishes_nothing(void **state)
{
	(void)state;
	world w;
	start(&w, EVERYTHING);
	const plan *p = reload(&w, EVERYTHING);
	for (size_t i = 0; i < p->n_entries; i++)
		assert_int_equal(p->entries[i].action, PLAN_REUSED);
	assert_false(p->publish);
	assert_int_equal(p->n_steps, 0);
	assert_int_equal(p->changed, 0);
	assert_int_equal(entry(p, PLAN_OUTBOUND, "p")->version, 1);
	assert_int_equal(entry(p, PLAN_BALANCER, "b")->version, 1);
	texts(p, "applied: 0 built, 9 reused, 0 swapped, 0 drained", "config reload: no changes");
	commit(&w);
	assert_int_equal(plan_versions_last(&w.versions, "p"), 1);

	/* Defaults written out, and the same sections in another order, are
	 * the same config. */
	p = reload(&w, "[dns]\nservers = [\"192.0.2.53\"]\n" RULE_B CLUSTER("\"127.0.0.1:5301\"")
	               "[[balancer]]\ntag = \"b\"\noutbounds = [\"p\"]\nstrategy = \"failover\"\n"
	               "probe_interval = 30\n"
	               "[[inbound]]\ntag = \"in\"\nprotocol = \"socks\"\nport = 1080\n"
	               "listen = \"127.0.0.1\"\n" IN_LB DIRECT OUT_P "[log]\nlevel = \"info\"\n"
	               "[policy]\nidle_timeout = 300\ndrain = \"keep\"\n");
	assert_int_equal(p->counts.reused, 9);
	assert_int_equal(p->n_steps, 0);
	world_free(&w);
}

static void removing_a_balancer_alone_republishes_the_plane(void **state)
{
	(void)state;
	world w;
	start(&w, IN_SOCKS DIRECT OUT_P BAL_B);
	const plan *p = reload(&w, IN_SOCKS DIRECT OUT_P);
	const plan_entry *b = entry(p, PLAN_BALANCER, "b");
	assert_int_equal(b->action, PLAN_REMOVED);
	assert_int_equal(b->old_version, 1);
	assert_int_equal(b->version, 0);
	assert_true(p->publish);
	/* Its probes stop after the publish; a balancer never drains, its
	 * flows belong to its members. */
	assert_int_equal(p->n_steps, 2);
	assert_int_equal(p->steps[0].kind, PLAN_STEP_PUBLISH);
	assert_int_equal(step_at(p, PLAN_STEP_STOP, b), 1);
	assert_int_equal(entry(p, PLAN_OUTBOUND, "p")->action, PLAN_REUSED);
	texts(p, "applied: 0 built, 6 reused, 0 swapped, 0 drained",
	      "config reload: changed balancers");
	commit(&w);
	world_free(&w);
}

static void a_changed_outbound_is_a_new_version_and_the_old_one_drains_after_the_publish(
	void **state)
{
	(void)state;
	world w;
	start(&w, IN_SOCKS DIRECT OUT_P BAL_B RULE_B);
	const plan *p = reload(&w, IN_SOCKS DIRECT OUT_P_AT("192.0.2.2", "") BAL_B RULE_B);
	const plan_entry *o = entry(p, PLAN_OUTBOUND, "p");
	assert_int_equal(o->action, PLAN_BUILT);
	assert_int_equal(o->version, 2);
	assert_int_equal(o->old_version, 1);
	assert_int_equal(o->old_drain.kind, PLAN_DRAIN_KEEP);
	/* Its balancer holds the member's target, so it is rebuilt too. */
	const plan_entry *b = entry(p, PLAN_BALANCER, "b");
	assert_int_equal(b->action, PLAN_BUILT);
	assert_true(b->flags & PLAN_F_MEMBER);
	assert_int_equal(b->version, 2);
	assert_int_equal(b->old_version, 1);
	assert_int_equal(entry(p, PLAN_OUTBOUND, "direct")->action, PLAN_REUSED);
	assert_int_equal(entry(p, PLAN_ROUTE, NULL)->action, PLAN_REUSED);

	size_t build = step_at(p, PLAN_STEP_BUILD, o);
	size_t publish = step_at(p, PLAN_STEP_PUBLISH, NULL);
	size_t drain = step_at(p, PLAN_STEP_DRAIN, o);
	assert_true(build < publish);
	assert_true(publish < drain);
	assert_true(step_at(p, PLAN_STEP_STOP, b) > publish);
	assert_int_equal(drain, p->n_steps - 1); /* drains are last */
	assert_int_equal(steps_of(p, PLAN_STEP_DRAIN), 1); /* only outbound versions drain */
	texts(p, "applied: 2 built, 5 reused, 0 swapped, 1 drained",
	      "config reload: changed outbounds, balancers");
	commit(&w);
	world_free(&w);
}

static void each_rebuild_of_a_tag_takes_the_next_version(void **state)
{
	(void)state;
	world w;
	start(&w, DIRECT OUT_P);
	static const char *const servers[] = {DIRECT OUT_P_AT("192.0.2.2", ""),
	                                      DIRECT OUT_P_AT("192.0.2.3", ""),
	                                      DIRECT OUT_P_AT("192.0.2.4", "")};
	for (uint64_t i = 0; i < 3; i++) {
		const plan_entry *o = entry(reload(&w, servers[i]), PLAN_OUTBOUND, "p");
		assert_int_equal(o->version, i + 2);
		assert_int_equal(o->old_version, i + 1);
		assert_int_equal(entry(&w.p, PLAN_OUTBOUND, "direct")->version, 1);
		commit(&w);
		assert_int_equal(plan_versions_last(&w.versions, "p"), i + 2);
	}
	/* A change of the drain keys alone rebuilds nothing: no new version. */
	const plan *p = reload(&w, DIRECT OUT_P_AT("192.0.2.4", "drain = \"close\"\n"));
	assert_int_equal(entry(p, PLAN_OUTBOUND, "p")->version, 4);
	commit(&w);
	/* A plan dropped before its commit leaves no number behind. */
	assert_int_equal(entry(reload(&w, DIRECT OUT_P), PLAN_OUTBOUND, "p")->version, 5);
	drop(&w);
	assert_int_equal(entry(reload(&w, DIRECT OUT_P), PLAN_OUTBOUND, "p")->version, 5);
	commit(&w);
	assert_int_equal(plan_versions_last(&w.versions, "p"), 5);
	world_free(&w);
}

static void a_tag_added_back_takes_a_version_it_never_had(void **state)
{
	(void)state;
	world w;
	start(&w, DIRECT OUT_P);
	(void)reload(&w, DIRECT OUT_P_AT("192.0.2.2", ""));
	commit(&w); /* p@v2 */
	const plan *p = reload(&w, DIRECT);
	const plan_entry *o = entry(p, PLAN_OUTBOUND, "p");
	assert_int_equal(o->action, PLAN_REMOVED);
	assert_int_equal(o->old_version, 2);
	assert_true(p->publish);
	assert_true(step_at(p, PLAN_STEP_DRAIN, o) > step_at(p, PLAN_STEP_PUBLISH, NULL));
	commit(&w);
	assert_int_equal(plan_versions_last(&w.versions, "p"), 2); /* kept once removed */

	o = entry(reload(&w, DIRECT OUT_P), PLAN_OUTBOUND, "p");
	assert_int_equal(o->action, PLAN_BUILT);
	assert_int_equal(o->version, 3);
	assert_int_equal(o->old_version, 0); /* nothing of it was running */
	commit(&w);

	/* Outbounds and balancers share the namespace: the tag as a balancer
	 * takes the next number too, while the outbound's last version drains. */
	p = reload(&w, DIRECT "[[outbound]]\ntag = \"q\"\nprotocol = \"socks\"\nserver = "
	                      "\"192.0.2.1\"\nport = 1080\n"
	                      "[[balancer]]\ntag = \"p\"\noutbounds = [\"q\"]\n");
	assert_int_equal(entry(p, PLAN_OUTBOUND, "p")->action, PLAN_REMOVED);
	assert_int_equal(entry(p, PLAN_OUTBOUND, "p")->old_version, 3);
	assert_int_equal(entry(p, PLAN_BALANCER, "p")->version, 4);
	assert_int_equal(entry(p, PLAN_OUTBOUND, "q")->version, 1);
	commit(&w);
	assert_int_equal(plan_versions_last(&w.versions, "p"), 4);
	world_free(&w);
}

/* ---- drains ---- */

static void the_old_version_drains_by_the_policy_it_ran_under(void **state)
{
	(void)state;
	world w;
	start(&w, DIRECT OUT_P_AT("192.0.2.1", "drain_after = 60\n"));
	/* The new config's "close" is for the version after: v1 ran under 60 s. */
	const plan *p = reload(&w, DIRECT OUT_P_AT("192.0.2.2", "drain = \"close\"\n"));
	const plan_entry *o = entry(p, PLAN_OUTBOUND, "p");
	assert_int_equal(o->old_drain.kind, PLAN_DRAIN_CLOSE_AFTER);
	assert_int_equal(o->old_drain.after_s, 60);
	assert_int_equal(o->drain.kind, PLAN_DRAIN_CLOSE);
	commit(&w);
	/* Removed, v2 drains as it ran: close. */
	p = reload(&w, DIRECT);
	assert_int_equal(entry(p, PLAN_OUTBOUND, "p")->old_drain.kind, PLAN_DRAIN_CLOSE);
	drop(&w);

	/* [policy] is the default of an outbound that sets neither key; one
	 * that sets either takes nothing from it. */
	etm_spec s;
	load("[policy]\ndrain = \"close\"\ndrain_after = 30\n" DIRECT
	     OUT_P_AT("192.0.2.1", "drain = \"keep\"\n")
	     "[[outbound]]\ntag = \"q\"\nprotocol = \"freedom\"\ndrain = \"close\"\n"
	     "[[outbound]]\ntag = \"r\"\nprotocol = \"freedom\"\ndrain_after = 0\n",
	     &s);
	plan_drain d = plan_drain_of(&s, &s.outbounds[0]);
	assert_int_equal(d.kind, PLAN_DRAIN_CLOSE_AFTER);
	assert_int_equal(d.after_s, 30);
	assert_int_equal(plan_drain_of(&s, &s.outbounds[1]).kind, PLAN_DRAIN_KEEP);
	assert_int_equal(plan_drain_of(&s, &s.outbounds[2]).kind, PLAN_DRAIN_CLOSE);
	assert_int_equal(plan_drain_of(&s, &s.outbounds[3]).kind, PLAN_DRAIN_CLOSE);
	etm_spec_free(&s);
	load(DIRECT, &s);
	assert_int_equal(plan_drain_of(&s, &s.outbounds[0]).kind, PLAN_DRAIN_KEEP);
	etm_spec_free(&s);
	world_free(&w);
}

static void a_drain_only_change_swaps_without_a_rebuild_or_a_publish(void **state)
{
	(void)state;
	world w;
	start(&w, DIRECT OUT_P BAL_B RULE_B);
	const plan *p = reload(&w, DIRECT OUT_P_AT("192.0.2.1", "drain = \"close\"\n") BAL_B RULE_B);
	const plan_entry *o = entry(p, PLAN_OUTBOUND, "p");
	assert_int_equal(o->action, PLAN_SWAPPED);
	assert_true(o->flags & PLAN_F_DRAIN);
	assert_int_equal(o->version, 1);
	assert_int_equal(o->old_version, 0);
	assert_int_equal(o->drain.kind, PLAN_DRAIN_CLOSE);
	assert_int_equal(entry(p, PLAN_BALANCER, "b")->action, PLAN_REUSED);
	assert_false(p->publish);
	assert_int_equal(p->n_steps, 1);
	assert_int_equal(step_at(p, PLAN_STEP_SWAP, o), 0);
	texts(p, "applied: 0 built, 5 reused, 1 swapped, 0 drained",
	      "config reload: changed outbounds");
	commit(&w);
	/* [policy]'s default reaches every outbound that sets no key. */
	p = reload(&w, "[policy]\ndrain_after = 10\n" DIRECT
	               OUT_P_AT("192.0.2.1", "drain = \"close\"\n") BAL_B RULE_B);
	assert_int_equal(entry(p, PLAN_OUTBOUND, "direct")->action, PLAN_SWAPPED);
	assert_int_equal(entry(p, PLAN_OUTBOUND, "p")->action, PLAN_REUSED);
	assert_false(p->publish);
	commit(&w);
	world_free(&w);
}

/* ---- inbounds, users and clusters never publish ---- */

static void an_inbound_only_change_does_not_republish(void **state)
{
	(void)state;
	world w;
	start(&w, IN_SOCKS DIRECT);
	/* Same address: the socket stays, the config is swapped. */
	const plan *p = reload(&w, "[[inbound]]\ntag = \"in\"\nprotocol = \"http\"\nport = 1080\n"
	                           "sniffing = true\n" DIRECT);
	const plan_entry *in = entry(p, PLAN_INBOUND, "in");
	assert_int_equal(in->action, PLAN_SWAPPED);
	assert_int_equal(in->prev, 0);
	assert_false(p->publish);
	assert_int_equal(p->n_steps, 1);
	assert_int_equal(step_at(p, PLAN_STEP_SWAP, in), 0);
	texts(p, "applied: 0 built, 4 reused, 1 swapped, 0 drained",
	      "config reload: changed inbounds");
	commit(&w);

	/* Another port: a new socket starts, then the old one stops. */
	p = reload(&w, "[[inbound]]\ntag = \"in\"\nprotocol = \"http\"\nport = 1081\n"
	               "sniffing = true\n" DIRECT);
	in = entry(p, PLAN_INBOUND, "in");
	assert_int_equal(in->action, PLAN_BUILT);
	assert_true(in->flags & PLAN_F_REBIND);
	assert_false(p->publish);
	assert_int_equal(p->n_steps, 3);
	assert_int_equal(step_at(p, PLAN_STEP_BUILD, in), 0);
	assert_int_equal(step_at(p, PLAN_STEP_START, in), 1);
	assert_int_equal(step_at(p, PLAN_STEP_STOP, in), 2);
	commit(&w);

	/* A new inbound and a removed one: still no publish. */
	p = reload(&w, IN_SOCKS DIRECT);
	assert_int_equal(entry(p, PLAN_INBOUND, "in")->action, PLAN_BUILT);
	assert_false(p->publish);
	drop(&w);
	p = reload(&w, DIRECT);
	assert_int_equal(entry(p, PLAN_INBOUND, "in")->action, PLAN_REMOVED);
	assert_false(p->publish);
	assert_int_equal(p->n_steps, 1);
	assert_int_equal(p->steps[0].kind, PLAN_STEP_STOP);
	drop(&w);

	/* [policy]'s connection limits are the inbounds' too. */
	p = reload(&w, "[[inbound]]\ntag = \"in\"\nprotocol = \"http\"\nport = 1081\n"
	               "sniffing = true\n" DIRECT "[policy]\nidle_timeout = 60\n");
	in = entry(p, PLAN_INBOUND, "in");
	assert_int_equal(in->action, PLAN_SWAPPED);
	assert_true(in->flags & PLAN_F_POLICY);
	assert_false(p->publish);
	commit(&w);
	world_free(&w);
}

static void a_users_only_change_does_not_republish(void **state)
{
	(void)state;
	world w;
	start(&w, IN_SOCKS "[[inbound.settings.users]]\nusername = \"u\"\npassword = \"a\"\n" DIRECT
	          RULE_B OUT_P BAL_B);
	const plan *p = reload(&w, IN_SOCKS "[[inbound.settings.users]]\nusername = \"u\"\n"
	                                    "password = \"b\"\n"
	                                    "[[inbound.settings.users]]\nusername = \"v\"\n"
	                                    "password = \"c\"\n" DIRECT RULE_B OUT_P BAL_B);
	assert_int_equal(entry(p, PLAN_INBOUND, "in")->action, PLAN_SWAPPED);
	assert_false(p->publish);
	assert_int_equal(p->n_steps, 1);
	assert_int_equal(p->steps[0].kind, PLAN_STEP_SWAP);
	assert_int_equal(p->changed, 1u << PLAN_INBOUND);
	texts(p, "applied: 0 built, 6 reused, 1 swapped, 0 drained",
	      "config reload: changed inbounds");
	commit(&w);
	world_free(&w);
}

static void a_renamed_inbound_keeps_its_socket(void **state)
{
	(void)state;
	world w;
	start(&w, IN_SOCKS DIRECT);
	const plan *p = reload(&w, "[[inbound]]\ntag = \"in2\"\nprotocol = \"socks\"\nport = 1080\n"
	                           DIRECT);
	const plan_entry *in = entry(p, PLAN_INBOUND, "in2");
	assert_int_equal(in->action, PLAN_SWAPPED);
	assert_true(in->flags & PLAN_F_RENAMED);
	assert_int_equal(in->prev, 0);
	assert_int_equal(p->counts.removed, 0);
	assert_false(p->publish);
	drop(&w);
	/* A UDP listener cannot take over a TCP socket on the same port. */
	p = reload(&w, "[[inbound]]\ntag = \"lb\"\nprotocol = \"udp_lb\"\nport = 1080\n"
	               "[inbound.settings]\ncluster = \"c\"\n" CLUSTER("\"127.0.0.1:53\"") DIRECT);
	assert_int_equal(entry(p, PLAN_INBOUND, "lb")->action, PLAN_BUILT);
	assert_int_equal(entry(p, PLAN_INBOUND, "in")->action, PLAN_REMOVED);
	world_free(&w);
}

static void a_changed_cluster_swaps_its_listener_in_place(void **state)
{
	(void)state;
	world w;
	start(&w, IN_LB CLUSTER("\"127.0.0.1:5301\""));
	const plan *p = reload(&w, IN_LB CLUSTER("\"127.0.0.1:5301\", \"127.0.0.1:5302 weight=3\""));
	assert_int_equal(entry(p, PLAN_CLUSTER, "c")->action, PLAN_SWAPPED);
	const plan_entry *lb = entry(p, PLAN_INBOUND, "lb");
	assert_int_equal(lb->action, PLAN_SWAPPED);
	assert_true(lb->flags & PLAN_F_CLUSTER);
	assert_false(p->publish);
	/* The listener applies it; the cluster has no step of its own. */
	assert_int_equal(p->n_steps, 1);
	assert_int_equal(step_at(p, PLAN_STEP_SWAP, lb), 0);
	texts(p, "applied: 0 built, 4 reused, 2 swapped, 0 drained",
	      "config reload: changed inbounds, clusters");
	commit(&w);
	world_free(&w);
}

/* A cluster is compared by the timeouts in force, not by how they were
 * written: idle_timeout = 5 and front_timeout = back_timeout = 5 are the
 * same cluster; a changed back_timeout alone is a change. */
static void cluster_timeouts_compare_as_in_force(void **state)
{
	(void)state;
	world w;
	start(&w, IN_LB CLUSTER("\"127.0.0.1:5301\"") "idle_timeout = 5\n");
	const plan *p = reload(&w, IN_LB CLUSTER("\"127.0.0.1:5301\"") "front_timeout = 5\n"
	                                                              "back_timeout = 5\n");
	assert_int_equal(entry(p, PLAN_CLUSTER, "c")->action, PLAN_REUSED);
	commit(&w);
	p = reload(&w, IN_LB CLUSTER("\"127.0.0.1:5301\"") "front_timeout = 5\nback_timeout = 6\n");
	assert_int_equal(entry(p, PLAN_CLUSTER, "c")->action, PLAN_SWAPPED);
	commit(&w);
	world_free(&w);
}

/* ---- the route, dns, log and [runtime] ---- */

static void the_route_dns_log_and_runtime(void **state)
{
	(void)state;
	world w;
	start(&w, DIRECT OUT_P BAL_B RULE_B);
	/* A rule changes: the route is compiled again and published; no
	 * target is rebuilt. */
	const plan *p = reload(&w, DIRECT OUT_P BAL_B "[[route.rule]]\noutbound = \"b\"\nport = 80\n");
	assert_int_equal(entry(p, PLAN_ROUTE, NULL)->action, PLAN_BUILT);
	assert_true(p->publish);
	assert_int_equal(p->counts.built, 1);
	assert_int_equal(steps_of(p, PLAN_STEP_DRAIN), 0);
	texts(p, "applied: 1 built, 5 reused, 0 swapped, 0 drained", "config reload: changed route");
	drop(&w);
	/* Without [route].default the first outbound is the default. */
	p = reload(&w, OUT_P DIRECT BAL_B RULE_B);
	assert_int_equal(entry(p, PLAN_ROUTE, NULL)->action, PLAN_BUILT);
	drop(&w);
	p = reload(&w, DIRECT OUT_P BAL_B RULE_B "[dns]\nservers = [\"192.0.2.53\"]\n");
	assert_int_equal(entry(p, PLAN_DNS, NULL)->action, PLAN_BUILT);
	assert_true(p->publish);
	drop(&w);
	p = reload(&w, DIRECT OUT_P BAL_B RULE_B "[log]\nlevel = \"debug\"\n");
	assert_int_equal(entry(p, PLAN_LOG, NULL)->action, PLAN_SWAPPED);
	assert_false(p->publish);
	texts(p, "applied: 0 built, 5 reused, 1 swapped, 0 drained", "config reload: changed log");
	drop(&w);
	/* [runtime] is read at start: the plan says so and changes nothing. */
	p = reload(&w, DIRECT OUT_P BAL_B RULE_B "[runtime]\nworkers = 3\n");
	assert_true(p->restart_needed);
	assert_int_equal(p->n_steps, 0);
	texts(p, "applied: 0 built, 6 reused, 0 swapped, 0 drained",
	      "config reload: changed runtime (at the next start)");
	drop(&w);
	p = reload(&w, DIRECT OUT_P BAL_B RULE_B "[runtime]\nsplice = false\n[log]\nlevel = \"warn\"\n");
	texts(p, "applied: 0 built, 5 reused, 1 swapped, 0 drained",
	      "config reload: changed log, runtime (at the next start)");
	world_free(&w);
}

/* Files are re-read on every reload, but only a changed spec (a changed
 * path) changes the plan; an object that names files says so. */
static void files_are_flagged_and_only_a_changed_path_counts(void **state)
{
	(void)state;
	world w;
#define TLS_IN(cert)                                                                               \
	"[[inbound]]\ntag = \"t\"\nprotocol = \"socks\"\nport = 1443\n"                            \
	"[inbound.stream]\nnetwork = \"tls\"\n"                                                     \
	"[inbound.stream.tls]\ncertificate = \"" cert "\"\nkey = \"k.pem\"\n"
#define TLS_OUT(ca)                                                                                \
	OUT_P_AT("192.0.2.1", "[outbound.stream]\nsecurity = \"tls\"\n"                             \
	                      "[outbound.stream.tls]\nca = \"" ca "\"\n")
#define GEO "[route]\ngeoip = \"geoip.dat\"\n"
	start(&w, TLS_IN("c.pem") DIRECT TLS_OUT("ca.pem") GEO);
	const plan *p = reload(&w, TLS_IN("c.pem") DIRECT TLS_OUT("ca.pem") GEO);
	assert_int_equal(p->counts.reused, p->n_entries);
	assert_true(entry(p, PLAN_INBOUND, "t")->flags & PLAN_F_FILES);
	assert_true(entry(p, PLAN_OUTBOUND, "p")->flags & PLAN_F_FILES);
	assert_true(entry(p, PLAN_ROUTE, NULL)->flags & PLAN_F_FILES);
	assert_false(entry(p, PLAN_OUTBOUND, "direct")->flags & PLAN_F_FILES);
	drop(&w);
	p = reload(&w, TLS_IN("c2.pem") DIRECT TLS_OUT("ca2.pem") "[route]\ngeoip = \"g2.dat\"\n");
	assert_int_equal(entry(p, PLAN_INBOUND, "t")->action, PLAN_SWAPPED);
	assert_int_equal(entry(p, PLAN_OUTBOUND, "p")->action, PLAN_BUILT);
	assert_int_equal(entry(p, PLAN_ROUTE, NULL)->action, PLAN_BUILT);
	world_free(&w);
}

/* ---- equality, registry and errors ---- */

/* etm_spec_copy: every part the planner compares is equal in the copy,
 * which owns all of it (the source freed first; ASan sees any sharing). */
static void a_copy_equals_its_source_and_shares_nothing(void **state)
{
	(void)state;
	static const char toml[] =
		"[log]\naccess = \"off\"\n[metrics]\nlisten = \"127.0.0.1:9100\"\n"
		"[api]\nlisten = \"127.0.0.1:9090\"\nsecret = \"s\"\n"
		"[dns]\nservers = [\"127.0.0.1:53\"]\n"
		"[[inbound]]\ntag = \"in\"\nprotocol = \"vless\"\nport = 1\n"
		"[[inbound.settings.users]]\nname = \"u\"\nid = \"6c1b0e6a-6e3d-4c1e-9d8a-1a2b3c4d5e6f\"\n"
		"up_rate = 5\n[inbound.stream]\nnetwork = \"ws\"\n[inbound.stream.ws]\npath = \"/w\"\n"
		"[[inbound]]\ntag = \"lb\"\nprotocol = \"udp_lb\"\nport = 2\n"
		"[inbound.settings]\ncluster = \"c\"\n"
		"[[cluster]]\ntag = \"c\"\nbackends = [\"127.0.0.1:9\"]\n"
		"[cluster.health]\nudp_payload = \"ping\"\n"
		"[[outbound]]\ntag = \"direct\"\nprotocol = \"freedom\"\n"
		"[[outbound]]\ntag = \"p\"\nprotocol = \"socks\"\nserver = \"192.0.2.1\"\nport = 1080\n"
		"settings = { username = \"a\", password = \"b\" }\n"
		"[outbound.stream]\nsecurity = \"tls\"\n[outbound.stream.tls]\nalpn = [\"h2\"]\n"
		"[[outbound]]\ntag = \"q\"\nprotocol = \"http\"\nserver = \"192.0.2.2\"\nport = 8080\n"
		"[[balancer]]\ntag = \"b\"\noutbounds = [\"p\", \"q\"]\n"
		"[route]\ndefault = \"b\"\n"
		"[[route.rule]]\noutbound = \"direct\"\ndomain_suffix = [\"lan\"]\ncidr = [\"10.0.0.0/8\"]\n"
		"port = [443, \"6881-6889\"]\ninbound_tag = [\"in\"]\nsource_cidr = [\"127.0.0.0/8\"]\n";
	etm_spec *a = malloc(sizeof *a), b;
	load(toml, a);
	assert_int_equal(etm_spec_copy(&b, a), 0);
	etm_spec c;
	load(toml, &c); /* a twin to compare with once the source is gone */
	etm_spec_free(a);
	free(a);
	assert_int_equal(b.inbounds_len, 2);
	for (size_t i = 0; i < b.inbounds_len; i++)
		assert_true(plan_inbound_equal(&b.inbounds[i], &c.inbounds[i]));
	assert_int_equal(b.outbounds_len, 3);
	for (size_t i = 0; i < b.outbounds_len; i++)
		assert_true(plan_outbound_equal(&b.outbounds[i], &c.outbounds[i]));
	assert_true(plan_balancer_equal(&b.balancers[0], &c.balancers[0]));
	assert_true(plan_cluster_equal(&b.clusters[0], &c.clusters[0]));
	assert_true(plan_route_equal(&b, &c));
	assert_true(plan_dns_equal(&b.dns, &c.dns));
	assert_true(plan_log_equal(&b, &c));
	assert_string_equal(b.metrics_listen, "127.0.0.1:9100");
	assert_string_equal(b.api_secret, "s");
	assert_int_equal(b.inbounds[0].settings.users[0].up_rate, 5);
	etm_spec_free(&b);
	etm_spec_free(&c);
}

static void every_field_counts_but_an_outbounds_drain_keys(void **state)
{
	(void)state;
	etm_spec a, b;
	load(DIRECT OUT_P_AT("192.0.2.1", "drain = \"close\"\n"), &a);
	load(DIRECT OUT_P_AT("192.0.2.1", "drain_after = 9\n"), &b);
	assert_true(plan_outbound_equal(&a.outbounds[1], &b.outbounds[1]));
	etm_spec_free(&b);
	static const char *const changes[] = {
		"address_family = \"ipv4_only\"\n",
		"settings = { username = \"u\" }\n",
		"[outbound.stream]\nnetwork = \"ws\"\n",
		"[outbound.stream]\nnetwork = \"ws\"\n[outbound.stream.ws]\npath = \"/x\"\n",
		"[outbound.stream]\nsecurity = \"tls\"\n[outbound.stream.tls]\nalpn = [\"h2\"]\n",
	};
	for (size_t i = 0; i < sizeof changes / sizeof changes[0]; i++) {
		char toml[512];
		snprintf(toml, sizeof toml, "%s[[outbound]]\ntag = \"p\"\nprotocol = \"socks\"\n"
		                            "server = \"192.0.2.1\"\nport = 1080\n%s",
		         DIRECT, changes[i]);
		load(toml, &b);
		if (plan_outbound_equal(&a.outbounds[1], &b.outbounds[1]))
			fail_msg("not seen: %s", changes[i]);
		etm_spec_free(&b);
	}
	etm_spec_free(&a);

	load(DIRECT OUT_P "[[balancer]]\ntag = \"b\"\noutbounds = [\"p\"]\nstrategy = \"round_robin\"\n",
	     &a);
	load(DIRECT OUT_P BAL_B, &b);
	assert_false(plan_balancer_equal(&a.balancers[0], &b.balancers[0]));
	etm_spec_free(&a);
	load(DIRECT OUT_P "[[balancer]]\ntag = \"b\"\noutbounds = [\"p\"]\nrise = 2\n", &a);
	assert_false(plan_balancer_equal(&a.balancers[0], &b.balancers[0]));
	etm_spec_free(&a);
	etm_spec_free(&b);
}

static void a_registry_that_missed_a_commit_is_refused(void **state)
{
	(void)state;
	etm_spec a, b;
	load(DIRECT OUT_P, &a);
	load(DIRECT OUT_P_AT("192.0.2.2", ""), &b);
	plan_versions v = {0};
	plan p;
	assert_int_equal(plan_compute(&p, &a, &b, &v), PLAN_E_UNVERSIONED);
	assert_null(p.entries);
	plan_free(&p);
	etm_spec_free(&a);
	etm_spec_free(&b);
}

static void a_short_buffer_is_reported(void **state)
{
	(void)state;
	world w = {0};
	const plan *p = reload(&w, EVERYTHING);
	char buf[24];
	assert_int_equal(plan_summary_text(p, buf, sizeof buf), -1);
	assert_string_equal(buf, "config reload: changed ");
	assert_int_equal(plan_applied_text(p, buf, sizeof buf), -1);
	assert_int_equal(plan_summary_text(p, buf, 0), -1);
	world_free(&w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(the_first_plan_binds_and_builds_everything_then_publishes),
		cmocka_unit_test(an_unchanged_spec_reuses_everything_and_publishes_nothing),
		cmocka_unit_test(removing_a_balancer_alone_republishes_the_plane),
		cmocka_unit_test(
			a_changed_outbound_is_a_new_version_and_the_old_one_drains_after_the_publish),
		cmocka_unit_test(each_rebuild_of_a_tag_takes_the_next_version),
		cmocka_unit_test(a_tag_added_back_takes_a_version_it_never_had),
		cmocka_unit_test(the_old_version_drains_by_the_policy_it_ran_under),
		cmocka_unit_test(a_drain_only_change_swaps_without_a_rebuild_or_a_publish),
		cmocka_unit_test(an_inbound_only_change_does_not_republish),
		cmocka_unit_test(a_users_only_change_does_not_republish),
		cmocka_unit_test(a_renamed_inbound_keeps_its_socket),
		cmocka_unit_test(a_changed_cluster_swaps_its_listener_in_place),
		cmocka_unit_test(cluster_timeouts_compare_as_in_force),
		cmocka_unit_test(the_route_dns_log_and_runtime),
		cmocka_unit_test(files_are_flagged_and_only_a_changed_path_counts),
		cmocka_unit_test(every_field_counts_but_an_outbounds_drain_keys),
		cmocka_unit_test(a_copy_equals_its_source_and_shares_nothing),
		cmocka_unit_test(a_registry_that_missed_a_commit_is_refused),
		cmocka_unit_test(a_short_buffer_is_reported),
		cmocka_unit_test(the_drain_keys_parse_with_unset_defaults),
		cmocka_unit_test(bad_drain_values_are_refused_word_for_word),
		cmocka_unit_test(upgrade_start_timeout_takes_its_bounds),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
