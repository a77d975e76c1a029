/* api_users.c - the admin API's users (GET, PUT and DELETE /users and /users/<name>, docs/users.md) and the filtered DELETE /connections. */
#include <stdlib.h>
#include <string.h>

#include "app/api_json.h"
#include "app/api_route.h"

/* A user name as the API shows it: the usage of every flow under that
 * name (over all inbounds) and the inbounds that have a user of it. */
typedef struct user_row {
	const char *name;
	const etm_usage *usage;            /* NULL: no flow yet */
	const etm_user_info *first;        /* its first inbound in u (NULL: none) */
} user_row;

static int render_user(const user_row *row, const etm_user_list *u, api_buf *b)
{
	bool f = true;
	const etm_usage *us = row->usage;
	int rc = api_json_puts(b, "{") | api_json_key(b, &f, "name") | api_json_str(b, row->name) |
	         api_json_key(b, &f, "upload") | api_json_u64(b, us ? us->up : 0) |
	         api_json_key(b, &f, "download") | api_json_u64(b, us ? us->down : 0) |
	         api_json_key(b, &f, "open") | api_json_u64(b, us ? us->open : 0) |
	         api_json_key(b, &f, "total") | api_json_u64(b, us ? us->total : 0) |
	         api_json_key(b, &f, "inbounds") | api_json_puts(b, "[");
	bool any = false;
	for (size_t i = 0; i < u->n; i++) {
		const etm_user_info *x = &u->v[i];
		if (strcmp(x->name, row->name) != 0)
			continue;
		bool g = true;
		rc |= (any ? api_json_puts(b, ",") : 0) | api_json_puts(b, "{") |
		      api_json_key(b, &g, "inbound") | api_json_str(b, x->inbound) |
		      api_json_key(b, &g, "up_rate") | api_json_u64(b, x->up_rate) |
		      api_json_key(b, &g, "down_rate") | api_json_u64(b, x->down_rate) |
		      api_json_key(b, &g, "max_sessions") | api_json_u64(b, x->max_sessions) |
		      api_json_key(b, &g, "sessions") | api_json_u64(b, x->sessions) |
		      api_json_puts(b, "}");
		any = true;
	}
	return rc | api_json_puts(b, "]}");
}

static const etm_usage *usage_of(const etm_usage_list *l, const char *name)
{
	for (size_t i = 0; i < l->n; i++)
		if (strcmp(l->v[i].name, name) == 0)
			return &l->v[i];
	return NULL;
}

static const etm_user_info *user_of(const etm_user_list *l, const char *name)
{
	for (size_t i = 0; i < l->n; i++)
		if (strcmp(l->v[i].name, name) == 0)
			return &l->v[i];
	return NULL;
}

/* GET /users (one == NULL) or GET /users/<one>. */
static int get_users(const api_provider *p, const char *one, api_response *r)
{
	etm_usage_list us = {0};
	etm_user_list u = {0};
	if (p->usage_users(p->ctx, &us))
		return -1;
	if (p->users(p->ctx, &u)) {
		etm_usage_list_free(&us);
		return -1;
	}
	int rc = 0;
	if (one) {
		user_row row = {.name = one, .usage = usage_of(&us, one), .first = user_of(&u, one)};
		if (!row.usage && !row.first)
			rc = api_answer_message(r, 404, API_M_NOT_FOUND);
		else
			rc = render_user(&row, &u, &r->body);
	} else {
		/* every configured user in config order, then names that have
		 * flows but no running user (removed ones, the anonymous "") */
		rc = api_json_puts(&r->body, "{\"users\":[");
		bool any = false;
		for (size_t i = 0; i < u.n; i++) {
			if (user_of(&u, u.v[i].name) != &u.v[i])
				continue; /* listed with its first inbound */
			user_row row = {.name = u.v[i].name, .usage = usage_of(&us, u.v[i].name),
			                .first = &u.v[i]};
			rc |= (any ? api_json_puts(&r->body, ",") : 0) | render_user(&row, &u, &r->body);
			any = true;
		}
		for (size_t i = 0; i < us.n; i++) {
			if (user_of(&u, us.v[i].name))
				continue;
			user_row row = {.name = us.v[i].name, .usage = &us.v[i]};
			rc |= (any ? api_json_puts(&r->body, ",") : 0) | render_user(&row, &u, &r->body);
			any = true;
		}
		rc |= api_json_puts(&r->body, "]}");
	}
	etm_usage_list_free(&us);
	etm_user_list_free(&u);
	return rc;
}

/* A credential key of the body: absent (*out NULL), a string without
 * escapes copied into buf, or -1. */
static int credential(const char *body, size_t n, const char *k, char *buf, size_t size,
                      const char **out)
{
	const char *v;
	size_t vn;
	*out = NULL;
	if (api_json_find_raw(body, n, k, &v, &vn))
		return -1;
	if (!v)
		return 0;
	if (vn < 2 || v[0] != '"' || memchr(v, '\\', vn) || vn - 2 >= size)
		return -1;
	memcpy(buf, v + 1, vn - 2);
	buf[vn - 2] = '\0';
	*out = buf;
	return 0;
}

/* PUT /users/<name>[?inbound=<tag>] {"password":..,"up_rate":..,...}: the
 * user's credential keys given and its limits (replaced: a limit left out
 * is none); a new user when inbound names one that has none of that
 * name. */
static int put_user(const api_provider *p, const api_request *rq, const char *name,
                    const char *inbound, api_response *r)
{
	const char *body = rq->body_len ? rq->body : "{}";
	size_t n = rq->body_len ? rq->body_len : 2;
	etm_user_spec u = {.name = (char *)name};
	uint64_t max = 0;
	if (api_json_find_u64(body, n, "up_rate", UINT64_MAX, &u.up_rate) < 0 ||
	    api_json_find_u64(body, n, "down_rate", UINT64_MAX, &u.down_rate) < 0 ||
	    api_json_find_u64(body, n, "max_sessions", UINT32_MAX, &max) < 0)
		return api_answer_message(r, 400, API_M_BODY_INVALID);
	u.max_sessions = max;
	char user[256], pass[1024], id[64];
	const char *cu, *cp, *ci;
	if (credential(body, n, "username", user, sizeof user, &cu) ||
	    credential(body, n, "password", pass, sizeof pass, &cp) ||
	    credential(body, n, "id", id, sizeof id, &ci))
		return api_answer_message(r, 400, API_M_CREDENTIAL);
	u.username = (char *)cu;
	u.password = (char *)cp;
	u.id = (char *)ci;
	char err[512];
	long k = p->upsert_user(p->ctx, inbound, &u, err, sizeof err);
	if (k < 0) {
		r->status = 400;
		return api_render_message(err, &r->body);
	}
	if (k == 0)
		return api_answer_message(r, 404, API_M_USER_UNKNOWN);
	r->status = 204;
	return 0;
}

int api_route_users(const api_provider *p, const api_request *rq, const char *path,
                    const char *q, size_t qn, api_response *r)
{
	bool get = api_method_is(rq, "GET") || api_method_is(rq, "HEAD");
	if (strcmp(path, "/users") == 0)
		return get ? get_users(p, NULL, r) : api_not_allowed(r, "GET");
	char name[ETM_FLOW_NAME_MAX], inbound[ETM_FLOW_NAME_MAX];
	const char *n = path + 7;
	if (!*n || strchr(n, '/') || api_decode(n, strlen(n), false, name, sizeof name) <= 0)
		return api_answer_message(r, 404, API_M_NOT_FOUND);
	ssize_t in = api_query_get(q, qn, "inbound", inbound, sizeof inbound);
	if (in == -2 || in == 0)
		return api_answer_message(r, 400, API_M_QUERY_INVALID);
	const char *tag = in > 0 ? inbound : NULL;
	if (get)
		return get_users(p, name, r);
	if (api_method_is(rq, "PUT"))
		return put_user(p, rq, name, tag, r);
	if (api_method_is(rq, "DELETE")) {
		char err[512];
		long k = p->remove_user(p->ctx, tag, name, err, sizeof err);
		if (k < 0) {
			r->status = 400;
			return api_render_message(err, &r->body);
		}
		if (k == 0)
			return api_answer_message(r, 404, API_M_USER_UNKNOWN);
		r->status = 204;
		return 0;
	}
	return api_not_allowed(r, "GET, PUT, DELETE");
}

int api_kill_where(const api_provider *p, const char *q, size_t qn, api_response *r)
{
	char user[ETM_FLOW_NAME_MAX], in[ETM_FLOW_NAME_MAX], out[ETM_FLOW_NAME_MAX], rule[16],
		epoch[24];
	etm_flow_filter f = ETM_FLOW_FILTER_ALL;
	ssize_t k;
	if ((k = api_query_get(q, qn, "user", user, sizeof user)) == -2)
		goto bad;
	f.user = k >= 0 ? user : NULL;
	if ((k = api_query_get(q, qn, "inbound", in, sizeof in)) == -2)
		goto bad;
	f.inbound = k >= 0 ? in : NULL;
	if ((k = api_query_get(q, qn, "outbound", out, sizeof out)) == -2)
		goto bad;
	f.outbound = k >= 0 ? out : NULL;
	/* rule=<n> as the access log numbers rules (#1 is the first), or
	 * rule=default */
	if ((k = api_query_get(q, qn, "rule", rule, sizeof rule)) == -2 || k == 0)
		goto bad;
	if (k > 0) {
		char *end;
		long v = strtol(rule, &end, 10);
		if (strcmp(rule, "default") == 0)
			f.rule = -1;
		else if (*end || v < 1 || v > INT32_MAX || rule[0] < '0' || rule[0] > '9')
			goto bad;
		else
			f.rule = (int32_t)(v - 1);
	}
	if ((k = api_query_get(q, qn, "epoch_below", epoch, sizeof epoch)) == -2 || k == 0)
		goto bad;
	if (k > 0) {
		char *end;
		unsigned long long v = strtoull(epoch, &end, 10);
		if (*end || epoch[0] < '0' || epoch[0] > '9' || v == 0)
			goto bad;
		f.epoch_below = v;
	}
	(void)p->kill_where(p->ctx, &f);
	r->status = 204;
	return 0;
bad:
	return api_answer_message(r, 400, API_M_QUERY_INVALID);
}
