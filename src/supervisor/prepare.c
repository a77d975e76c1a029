/* prepare.c - plan and prepare: what a new spec needs built, off the workers, reusing what is unchanged; nothing running changes here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/hash.h"
#include "supervisor/actor.h"
#include "supervisor/build_dns.h"
#include "supervisor/build_inbound.h"
#include "supervisor/build_outbound.h"
#include "supervisor/build_udplb.h"
#include "supervisor/spec_msg.h"

enum { MSG_NO_MEMORY, MSG_UDPLB_RESTART, MSG_COUNT_ };
static const char *const msgs[MSG_COUNT_] = {
	[MSG_NO_MEMORY] = "out of memory",
	[MSG_UDPLB_RESTART] = "inbound %s: a listener turns into or from udp_lb on the same "
	                      "address only with a restart (not applied while running yet)",
};


/* A signature of files: device, inode, size, modification and change time
 * of each, so a save in place or by rename changes it (even one that sets
 * the modification time back), and a file gone too. */
static uint64_t files_sig(const char *const *paths, size_t n)
{
	uint64_t h = 0;
	for (size_t i = 0; i < n; i++) {
		if (!paths[i])
			continue;
		struct stat st;
		uint64_t v[7] = {(uint64_t)i + 1};
		if (stat(paths[i], &st) == 0) {
			v[1] = (uint64_t)st.st_dev ^ ((uint64_t)st.st_ino << 1);
			v[2] = (uint64_t)st.st_size;
			v[3] = (uint64_t)st.st_mtim.tv_sec;
			v[4] = (uint64_t)st.st_mtim.tv_nsec;
			v[5] = (uint64_t)st.st_ctim.tv_sec;
			v[6] = (uint64_t)st.st_ctim.tv_nsec;
		}
		for (size_t k = 0; k < 7; k++)
			h = hash_fmix64(h ^ v[k]);
	}
	return h;
}

static uint64_t stream_files(const etm_stream_spec *st)
{
	const char *paths[] = {st->tls.ca, st->tls.certificate, st->tls.key};
	return files_sig(paths, 3);
}

static uint64_t route_files(const etm_spec *spec)
{
	const char *paths[] = {spec->route.geoip, spec->route.geosite};
	return files_sig(paths, 2);
}

/* plan_files_changed_fn: the running object's files against its record. */
static bool running_files_changed(void *ud, plan_kind kind, size_t i)
{
	const etm_supervisor *s = ud;
	switch (kind) {
	case PLAN_INBOUND:
		return stream_files(&s->spec.inbounds[i].stream) != s->ins[i].files;
	case PLAN_OUTBOUND:
		return stream_files(&s->spec.outbounds[i].stream) != s->ob_files[i];
	case PLAN_ROUTE:
		return route_files(&s->spec) != s->route_files;
	default:
		return false;
	}
}

void sup_targets_free(outbound **obs, size_t n_obs, balanced **bals, size_t n_bals)
{
	for (size_t i = 0; obs && i < n_obs; i++)
		outbound_unref(obs[i]);
	for (size_t i = 0; bals && i < n_bals; i++)
		balanced_unref(bals[i]);
	free(obs);
	free(bals);
}

/* An inbound config prepare built and nothing shares yet. */
static void inbound_free(inbound_rt *rt)
{
	if (rt)
		inbound_rt_free(rt);
	free(rt);
}

static void abort_lb(prepared *pp);

void sup_prepared_free(prepared *pp)
{
	if (pp->next) {
		sup_targets_free(pp->obs, pp->next->outbounds_len, pp->bals, pp->next->balancers_len);
		for (size_t i = 0; pp->ins && i < pp->next->inbounds_len; i++) {
			inbound_free(pp->ins[i].rt); /* built here and not committed */
			udplb_group_unref(pp->ins[i].lb);
		}
	}
	abort_lb(pp);
	free(pp->ins);
	free(pp->ob_files);
	plane_unref(pp->plane);
	dns_svc_conf_unref(pp->dns_conf);
	outbound_unref(pp->dns_ob);
	plan_free(&pp->p);
	*pp = (prepared){.next = pp->next};
}

/* The plan entry of kind k for index i of next. */
static const plan_entry *entry_of(const plan *p, plan_kind k, size_t i)
{
	for (size_t e = 0; e < p->n_entries; e++)
		if (p->entries[e].kind == k && p->entries[e].next == i)
			return &p->entries[e];
	return NULL;
}

/* Builds the outbounds and balancers of pp->next, reusing the running
 * ones the plan keeps (the same objects: TLS context, balancer health). */
static int prepare_targets(const etm_supervisor *s, prepared *pp, char *err, size_t err_size)
{
	const etm_spec *next = pp->next;
	pp->obs = calloc(next->outbounds_len ? next->outbounds_len : 1, sizeof *pp->obs);
	pp->ob_files = calloc(next->outbounds_len ? next->outbounds_len : 1, sizeof *pp->ob_files);
	pp->bals = calloc(next->balancers_len ? next->balancers_len : 1, sizeof *pp->bals);
	if (!pp->obs || !pp->ob_files || !pp->bals) {
		snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
		return -1;
	}
	for (size_t i = 0; i < next->outbounds_len; i++) {
		const plan_entry *e = entry_of(&pp->p, PLAN_OUTBOUND, i);
		if (e->action != PLAN_BUILT) {
			pp->obs[i] = outbound_ref(s->obs[e->prev]);
			pp->ob_files[i] = s->ob_files[e->prev];
			continue;
		}
		pp->ob_files[i] = stream_files(&next->outbounds[i].stream); /* before the read */
		if (!(pp->obs[i] = build_outbound(&next->outbounds[i], err, err_size)))
			return -1;
		pp->obs[i]->version = e->version;
	}
	for (size_t i = 0; i < next->balancers_len; i++) {
		const plan_entry *e = entry_of(&pp->p, PLAN_BALANCER, i);
		if (e->action != PLAN_BUILT)
			pp->bals[i] = balanced_ref(s->bals[e->prev]);
		else if (!(pp->bals[i] = build_balanced(next, &next->balancers[i], pp->obs, err,
		                                        err_size)))
			return -1;
		else
			pp->bals[i]->version = e->version;
	}
	return 0;
}

/* Builds the inbound configs pp->next needs anew; a new socket's address
 * must be free (another process may hold it). */
static int prepare_inbounds(const etm_supervisor *s, prepared *pp, bool running, char *err,
                            size_t err_size)
{
	const etm_spec *next = pp->next;
	pp->ins = calloc(next->inbounds_len ? next->inbounds_len : 1, sizeof *pp->ins);
	if (!pp->ins) {
		snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
		return -1;
	}
	conn_limits limits = {.handshake_ms = next->policy.handshake_timeout * 1000,
	                      .idle_ms = next->policy.idle_timeout * 1000,
	                      .splice = running ? s->spec.runtime.splice : next->runtime.splice};
	for (size_t i = 0; i < next->inbounds_len; i++) {
		const plan_entry *e = entry_of(&pp->p, PLAN_INBOUND, i);
		const etm_inbound_spec *in = &next->inbounds[i];
		if (e->action != PLAN_BUILT)
			pp->ins[i].port = s->ins[e->prev].port; /* its socket carries over */
		if (e->action == PLAN_REUSED) {
			pp->ins[i].files = s->ins[e->prev].files;
			continue;
		}
		pp->ins[i].files = stream_files(&in->stream);
		if (!(pp->ins[i].rt = calloc(1, sizeof *pp->ins[i].rt))) {
			snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
			return -1;
		}
		if (build_inbound(pp->ins[i].rt, in, &s->conn, &limits, err, err_size))
			return -1;
		if (running && e->action == PLAN_BUILT && in->port && in->protocol != ETM_PROTO_UDP_LB &&
		    listener_check_free(sup_listen_ip(in), in->port, err, err_size))
			return -1;
	}
	return 0;
}

/* ---- udp_lb groups across a reload ---- */

const etm_cluster_spec *sup_cluster_of(const etm_spec *spec, const char *tag)
{
	for (size_t i = 0; tag && i < spec->clusters_len; i++)
		if (strcmp(spec->clusters[i].tag, tag) == 0)
			return &spec->clusters[i];
	return NULL;
}

/* The running groups of the SWAPPED udp_lb inbounds drop what prepare
 * readied for them: prepare failed after them, or nothing was committed. */
static void abort_lb(prepared *pp)
{
	for (size_t k = 0; k < pp->n_lb_swaps; k++)
		udplb_group_abort(pp->lb_swaps[k].g); /* after a commit: a no-op */
	free(pp->lb_swaps);
	pp->lb_swaps = NULL;
	pp->n_lb_swaps = 0;
}

/* The udp_lb inbounds of pp->next: a new one (or one on a new address)
 * gets a group of its own, opened by commit; a SWAPPED one's running group
 * prepares the new cluster and settings, which commit applies on every
 * worker (udplb_group_prepare). Either fails the reload with nothing
 * changed: a bad cluster, a busy UDP port, no memory. */
static int prepare_lb(const etm_supervisor *s, prepared *pp, char *err, size_t err_size)
{
	const etm_spec *next = pp->next;
	size_t n_in = next->inbounds_len, n_lb = 0;
	for (size_t i = 0; i < n_in; i++)
		n_lb += next->inbounds[i].protocol == ETM_PROTO_UDP_LB;
	pp->lb_swaps = calloc(n_lb ? n_lb : 1, sizeof *pp->lb_swaps);
	if (!pp->lb_swaps) {
		snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
		return -1;
	}
	uint32_t budget = udplb_auto_flows(n_lb);
	for (size_t i = 0; i < n_in; i++) {
		const plan_entry *e = entry_of(&pp->p, PLAN_INBOUND, i);
		const etm_inbound_spec *in = &next->inbounds[i];
		bool lb = in->protocol == ETM_PROTO_UDP_LB;
		if (e->action == PLAN_SWAPPED && lb != (s->ins[e->prev].lb != NULL)) {
			snprintf(err, err_size, msgs[MSG_UDPLB_RESTART], in->tag);
			return -1;
		}
		if (!lb || e->action == PLAN_REUSED)
			continue;
		const etm_cluster_spec *cl = sup_cluster_of(next, in->settings.cluster);
		if (!cl) /* etm_spec_check refuses this; a caller that skipped it */
			return spec_format(err, err_size, SPEC_UNKNOWN_CLUSTER, in->tag,
			                   in->settings.cluster ? in->settings.cluster : "");
		udplb_group_config cfg;
		if (build_udplb(in, cl, &cfg, err, err_size))
			return -1;
		int rc = 0;
		if (e->action == PLAN_SWAPPED) {
			/* pp->ins[i].lb stays NULL until commit moves the group in */
			udplb_group *g = s->ins[e->prev].lb;
			rc = udplb_group_prepare(g, &cfg, budget, err, err_size);
			if (!rc)
				pp->lb_swaps[pp->n_lb_swaps++] = (lb_swap){.next = i, .g = g};
		} else {
			pp->ins[i].lb = udplb_group_new(&cfg, workers_count(s->ws), budget, err, err_size);
			rc = pp->ins[i].lb ? 0 : -1;
			if (!rc && in->port &&
			    listener_check_free_udp(sup_listen_ip(in), in->port, err, err_size))
				rc = -1;
		}
		build_udplb_free(&cfg);
		if (rc)
			return -1;
	}
	return 0;
}

/* The DNS service of pp->next: the running one when [dns] is unchanged,
 * else a new conf and a new target whose version is the epoch of the
 * plane that will first hold it (seed 002). */
static int prepare_dns(const etm_supervisor *s, prepared *pp, char *err, size_t err_size)
{
	const plan_entry *e = entry_of(&pp->p, PLAN_DNS, 0);
	pp->dns_changed = !e || e->action != PLAN_REUSED;
	if (!pp->dns_changed) {
		pp->dns_conf = s->dns_conf ? dns_svc_conf_ref(s->dns_conf) : NULL;
		pp->dns_ob = s->dns_ob ? outbound_ref(s->dns_ob) : NULL;
		return 0;
	}
	if (build_dns(pp->next, &pp->dns_conf, err, err_size))
		return -1;
	if (pp->dns_conf && !(pp->dns_ob = outbound_new_dns(sup_dns_svc_of, s->epoch + 1))) {
		snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
		return -1;
	}
	return 0;
}

/* Plan and prepare (ARCHITECTURE.md section 7): nothing running changes.
 * Returns 0, or -1 with the reason in err. */
int sup_prepare(etm_supervisor *s, etm_spec *next, bool running, prepared *pp, char *err,
                size_t err_size)
{
	*pp = (prepared){.next = next};
	if (plan_compute_files(&pp->p, running ? &s->spec : NULL, next, &s->versions,
	                       running_files_changed, s)) {
		snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
		return -1;
	}
	if (prepare_targets(s, pp, err, err_size) || prepare_inbounds(s, pp, running, err, err_size) ||
	    (running && prepare_lb(s, pp, err, err_size)))
		return -1;
	if (prepare_dns(s, pp, err, err_size))
		return -1;
	pp->route_files = s->route_files;
	if (pp->p.publish) {
		pp->route_files = route_files(next);
		if (!(pp->plane = plane_new(next, s->epoch + 1, pp->obs, pp->bals, pp->dns_ob, err,
		                            err_size)))
			return -1;
	}
	return 0;
}

