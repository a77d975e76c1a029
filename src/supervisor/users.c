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

/* ---- edits: a copy of the running config, changed and applied ---- */

enum { M_NO_MEMORY };
static const char *const msgs[] = {
	[M_NO_MEMORY] = "out of memory",
};

/* The name a user of a spec goes by: its name, or its username. */
static const char *spec_user_name(const etm_user_spec *u)
{
	return u->name ? u->name : u->username;
}

/* Changes a copy of the running spec with edit (which returns how many
 * users it changed), checks it and applies it as a reload does: the
 * users it keeps keep their principals and take their new limits, the
 * ones it drops are revoked under [policy] user_removal. Returns how many
 * users changed (0: none, nothing applied), or -1 with the reason in
 * err. */
static long apply_edit(etm_supervisor *s, size_t (*edit)(etm_spec *sp, void *arg), void *arg,
                       char *err, size_t err_size)
{
	etm_spec copy;
	if (etm_spec_copy(&copy, &s->spec)) {
		snprintf(err, err_size, "%s", msgs[M_NO_MEMORY]);
		return -1;
	}
	size_t n = edit(&copy, arg);
	if (n == 0) {
		etm_spec_free(&copy);
		return 0;
	}
	if (etm_spec_check(&copy, err, err_size) || etm_spec_check_available(&copy, err, err_size)) {
		etm_spec_free(&copy);
		return -1;
	}
	if (etm_supervisor_apply(s, &copy, err, err_size)) /* takes copy over */
		return -1;
	return (long)n;
}

static bool inbound_is(const etm_inbound_spec *in, const char *tag)
{
	return !tag || (in->tag && strcmp(in->tag, tag) == 0);
}

typedef struct remove_edit {
	const char *inbound, *name;
} remove_edit;

static size_t remove_users(etm_spec *sp, void *arg)
{
	const remove_edit *e = arg;
	size_t n = 0;
	for (size_t i = 0; i < sp->inbounds_len; i++) {
		etm_settings_spec *st = &sp->inbounds[i].settings;
		if (!inbound_is(&sp->inbounds[i], e->inbound))
			continue;
		for (size_t j = 0; j < st->users_len;) {
			etm_user_spec *u = &st->users[j];
			const char *un = spec_user_name(u);
			if (!un || strcmp(un, e->name) != 0) {
				j++;
				continue;
			}
			free(u->name);
			free(u->username);
			free(u->password);
			free(u->id);
			memmove(u, u + 1, (st->users_len - j - 1) * sizeof *u);
			st->users_len--;
			n++;
		}
	}
	return n;
}

long etm_supervisor_remove_user(etm_supervisor *s, const char *inbound, const char *name,
                                char *err, size_t err_size)
{
	if (!name)
		return 0;
	remove_edit e = {.inbound = inbound, .name = name};
	return apply_edit(s, remove_users, &e, err, err_size);
}

typedef struct upsert_edit {
	const char *inbound;
	const etm_user_spec *u;
	bool failed; /* memory */
} upsert_edit;

/* Sets *dst to a copy of src when src is given (the credential key the
 * request carried). */
static void take(char **dst, const char *src, bool *failed)
{
	if (!src)
		return;
	char *d = strdup(src);
	if (!d) {
		*failed = true;
		return;
	}
	free(*dst);
	*dst = d;
}

static void set_user(etm_user_spec *dst, const etm_user_spec *src, bool *failed)
{
	take(&dst->username, src->username, failed);
	take(&dst->password, src->password, failed);
	take(&dst->id, src->id, failed);
	dst->up_rate = src->up_rate;
	dst->down_rate = src->down_rate;
	dst->max_sessions = src->max_sessions;
}

static size_t upsert_users(etm_spec *sp, void *arg)
{
	upsert_edit *e = arg;
	size_t n = 0;
	bool found_tag = false;
	for (size_t i = 0; i < sp->inbounds_len; i++) {
		etm_inbound_spec *in = &sp->inbounds[i];
		if (!inbound_is(in, e->inbound))
			continue;
		found_tag = true;
		for (size_t j = 0; j < in->settings.users_len; j++) {
			const char *un = spec_user_name(&in->settings.users[j]);
			if (un && strcmp(un, e->u->name) == 0) {
				set_user(&in->settings.users[j], e->u, &e->failed);
				n++;
			}
		}
	}
	if (n || !e->inbound || !found_tag)
		return e->failed ? 0 : n;
	/* a new user of that one inbound */
	for (size_t i = 0; i < sp->inbounds_len; i++) {
		etm_settings_spec *st = &sp->inbounds[i].settings;
		if (!inbound_is(&sp->inbounds[i], e->inbound))
			continue;
		etm_user_spec *v = realloc(st->users, (st->users_len + 1) * sizeof *v);
		if (!v) {
			e->failed = true;
			return 0;
		}
		st->users = v;
		etm_user_spec *u = &v[st->users_len++];
		*u = (etm_user_spec){0};
		bool socks = sp->inbounds[i].protocol == ETM_PROTO_SOCKS ||
		             sp->inbounds[i].protocol == ETM_PROTO_HTTP ||
		             sp->inbounds[i].protocol == ETM_PROTO_MIXED;
		/* SOCKS and HTTP users go by their username; the others by name */
		if (socks)
			take(&u->username, e->u->username ? e->u->username : e->u->name, &e->failed);
		else
			take(&u->name, e->u->name, &e->failed);
		set_user(u, &(etm_user_spec){.password = e->u->password, .id = e->u->id,
		                             .up_rate = e->u->up_rate,
		                             .down_rate = e->u->down_rate,
		                             .max_sessions = e->u->max_sessions},
		         &e->failed);
		n++;
	}
	return e->failed ? 0 : n;
}

long etm_supervisor_upsert_user(etm_supervisor *s, const char *inbound, const etm_user_spec *u,
                                char *err, size_t err_size)
{
	if (!u->name)
		return 0;
	upsert_edit e = {.inbound = inbound, .u = u};
	long n = apply_edit(s, upsert_users, &e, err, err_size);
	if (e.failed) {
		snprintf(err, err_size, "%s", msgs[M_NO_MEMORY]);
		return -1;
	}
	return n;
}
