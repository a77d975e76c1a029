/* users.c - the running inbounds' users: listed, removed (revoked) and limited without a reload. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/actor.h"

void etm_user_list_free(etm_user_list *l)
{
	free(l->v);
	*l = (etm_user_list){0};
}

/* Calls fn for each live-or-removed principal of the running inbounds
 * whose inbound tag is `inbound` (NULL: any) and name is `name` (NULL:
 * any). */
static void each_user(etm_supervisor *s, const char *inbound, const char *name,
                      void (*fn)(const char *tag, principal *p, void *arg), void *arg)
{
	for (size_t i = 0; i < s->spec.inbounds_len; i++) {
		const inbound_rt *rt = s->ins[i].rt;
		const char *tag = s->spec.inbounds[i].tag;
		if (!rt || !rt->principals || (inbound && (!tag || strcmp(tag, inbound) != 0)))
			continue;
		for (size_t j = 0; j < rt->n_user_names; j++) {
			principal *p = rt->principals[j];
			if (p && (!name || (p->name && strcmp(p->name, name) == 0)))
				fn(tag, p, arg);
		}
	}
}

typedef struct list_job {
	etm_user_list *out;
	size_t cap;
	int failed;
} list_job;

static void list_one(const char *tag, principal *p, void *arg)
{
	list_job *j = arg;
	if (j->failed)
		return;
	if (j->out->n == j->cap) {
		size_t cap = j->cap ? j->cap * 2 : 16;
		etm_user_info *v = realloc(j->out->v, cap * sizeof *v);
		if (!v) {
			j->failed = 1;
			return;
		}
		j->out->v = v;
		j->cap = cap;
	}
	etm_user_info *u = &j->out->v[j->out->n++];
	*u = (etm_user_info){
		.up_rate = atomic_load_explicit(&p->up.rate, memory_order_relaxed),
		.down_rate = atomic_load_explicit(&p->down.rate, memory_order_relaxed),
		.max_sessions = atomic_load_explicit(&p->max_sessions, memory_order_relaxed),
		.sessions = atomic_load_explicit(&p->sessions, memory_order_relaxed),
		.removed = (int)principal_state(p),
	};
	snprintf(u->inbound, sizeof u->inbound, "%s", tag ? tag : "");
	snprintf(u->name, sizeof u->name, "%s", p->name ? p->name : "");
}

int etm_supervisor_users(etm_supervisor *s, etm_user_list *out)
{
	*out = (etm_user_list){0};
	list_job j = {.out = out};
	each_user(s, NULL, NULL, list_one, &j);
	if (j.failed) {
		etm_user_list_free(out);
		return -1;
	}
	return 0;
}

typedef struct remove_job {
	etm_user_removal policy;
	sup_revoked closing;
	size_t removed;
} remove_job;

static void remove_one(const char *tag, principal *p, void *arg)
{
	(void)tag;
	remove_job *j = arg;
	if (principal_state(p) != PRINCIPAL_LIVE)
		return;
	sup_revoke(p, j->policy, &j->closing);
	j->removed++;
}

size_t etm_supervisor_remove_user(etm_supervisor *s, const char *inbound, const char *name)
{
	if (!name)
		return 0;
	remove_job j = {.policy = s->spec.policy.user_removal};
	each_user(s, inbound, name, remove_one, &j);
	sup_end_revoked(s, &j.closing);
	return j.removed;
}

typedef struct limit_job {
	uint64_t up, down, max;
	size_t n;
} limit_job;

static void limit_one(const char *tag, principal *p, void *arg)
{
	(void)tag;
	limit_job *j = arg;
	if (principal_state(p) != PRINCIPAL_LIVE)
		return;
	principal_set_limits(p, j->up, j->down, j->max > UINT32_MAX ? UINT32_MAX : (uint32_t)j->max);
	j->n++;
}

size_t etm_supervisor_set_user_limits(etm_supervisor *s, const char *inbound, const char *name,
                                      uint64_t up_rate, uint64_t down_rate,
                                      uint64_t max_sessions)
{
	if (!name)
		return 0;
	limit_job j = {.up = up_rate, .down = down_rate, .max = max_sessions};
	each_user(s, inbound, name, limit_one, &j);
	return j.n;
}
