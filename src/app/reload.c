/* reload.c - SIGHUP and the config file's saves become a parse, a check and an apply. */
#include "app/reload.h"

#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/config.h"
#include "app/notify.h"
#include "base/access_log.h"
#include "base/log.h"
#include "etemenanki/etemenanki.h"

enum { M_PARSE, M_BUILD, M_RELOADING, M_NO_WATCH, M_SAVED, M_ACCESS, M_NO_MEMORY, M_METRICS,
       M_OFF, M_API };
static const char *const msgs[] = {
	[M_PARSE] = "reload: parse failed, keeping current config: %s",
	[M_BUILD] = "reload: build failed, keeping current config: %s",
	[M_RELOADING] = "reloading %s (%s)",
	[M_NO_WATCH] = "reload: cannot watch %s for saves (%s); SIGHUP still reloads",
	[M_SAVED] = "saved",
	[M_ACCESS] = "reload: %s; keeping the current access log",
	[M_NO_MEMORY] = "out of memory",
	[M_METRICS] = "reload: [metrics] listen changed from %s to %s; the endpoint stays on %s "
		      "until the next start",
	[M_OFF] = "off",
	[M_API] = "reload: [api] listen changed from %s to %s; the API stays on %s until the next "
		  "start",
};

struct reloader {
	uv_loop_t *loop;
	const char *path;
	char *dir, *base; /* owned: where the watch looks, and for which name */
	etm_supervisor *sup;
	metrics_reloads *counts; /* borrowed */
	const char *metrics_listen; /* borrowed: the endpoint's address, or NULL */
	bool keep_level;
	reload_hook hook;
	uv_fs_event_t watch;
	uv_timer_t debounce;
	bool watching;
	int open_handles; /* the watch and the timer: freed when both closed */
};

/* The endpoint is bound once, at the start: a change is logged, not
 * applied (docs/metrics.md). */
static void check_listen(int m, const char *cur, const char *next)
{
	if ((cur == NULL) == (next == NULL) && (!cur || strcmp(cur, next) == 0))
		return;
	const char *c = cur ? cur : msgs[M_OFF];
	log_warn("app", msgs[m], c, next ? next : msgs[M_OFF], c);
}

/* The outcome is logged and its message left in msg. */
static int reload(reloader *r, char *msg)
{
	etm_spec spec;
	/* parsed, lowered and checked as --test does; what --test then builds
	 * is prepare's (etm_supervisor_apply), whose failure is a build one */
	if (config_load_file(r->path, &spec, msg, CONFIG_MSG_MAX)) {
		log_error("app", msgs[M_PARSE], msg);
		return -1;
	}
	if (etm_spec_check_available(&spec, msg, CONFIG_MSG_MAX)) {
		etm_spec_free(&spec);
		log_error("app", msgs[M_BUILD], msg);
		return -1;
	}
	int level = config_log_level(spec.log_level);
	int format = config_log_format(spec.log_format);
	bool access_end = spec.log_access_end;
	/* apply takes the spec; the access log is reopened once it succeeded */
	char *access = spec.log_access ? strdup(spec.log_access) : NULL;
	if (spec.log_access && !access) {
		etm_spec_free(&spec);
		snprintf(msg, CONFIG_MSG_MAX, "%s", msgs[M_NO_MEMORY]);
		log_error("app", msgs[M_BUILD], msg);
		return -1;
	}
	/* kept past the apply, which takes the spec */
	char *metrics = spec.metrics_listen ? strdup(spec.metrics_listen) : NULL;
	char *api = spec.api_listen ? strdup(spec.api_listen) : NULL;
	if ((spec.metrics_listen && !metrics) || (spec.api_listen && !api)) {
		free(access);
		free(metrics);
		free(api);
		etm_spec_free(&spec);
		snprintf(msg, CONFIG_MSG_MAX, "%s", msgs[M_NO_MEMORY]);
		log_error("app", msgs[M_BUILD], msg);
		return -1;
	}
	void *state = r->hook.before ? r->hook.before(r->hook.arg, &spec) : NULL;
	if (etm_supervisor_apply(r->sup, &spec, msg, CONFIG_MSG_MAX)) {
		if (r->hook.after)
			r->hook.after(r->hook.arg, state, false);
		free(access);
		free(metrics);
		free(api);
		log_error("app", msgs[M_BUILD], msg);
		return -1;
	}
	if (r->hook.after)
		r->hook.after(r->hook.arg, state, true);
	check_listen(M_METRICS, r->metrics_listen, metrics);
	check_listen(M_API, r->hook.api_listen, api);
	free(metrics);
	free(api);
	if (!r->keep_level)
		log_set_level(level);
	log_set_format(format);
	access_log_set_end(access_end);
	/* Reopened on every reload, so that logrotate's rename then kill -HUP
	 * moves the lines to a new file at the path. */
	char err[ACCESS_LOG_ERR_MAX];
	if (access_log_open(access, err, sizeof err))
		log_warn("app", msgs[M_ACCESS], err);
	free(access);
	return 0;
}

int reloader_run(reloader *r, const char *why, char *err, size_t err_size)
{
	char msg[CONFIG_MSG_MAX] = "";
	log_info("app", msgs[M_RELOADING], r->path, why);
	/* systemd waits for READY=1 after RELOADING=1 whatever the outcome: a
	 * reload that keeps the current config is over too */
	notify_reloading();
	int rc = reload(r, msg);
	if (rc)
		r->counts->failed++;
	else
		r->counts->ok++;
	notify_ready();
	if (rc)
		snprintf(err, err_size, "%s", msg);
	return rc;
}

void reloader_now(reloader *r, const char *why)
{
	char err[CONFIG_MSG_MAX];
	if (reloader_run(r, why, err, sizeof err))
		return; /* logged */
}

static void on_quiet(uv_timer_t *t) { reloader_now(t->data, msgs[M_SAVED]); }

static void on_change(uv_fs_event_t *h, const char *name, int events, int status)
{
	(void)events;
	reloader *r = h->data;
	/* a directory watch names the entry; an overflow names none: reload */
	if (status < 0 || (name && strcmp(name, r->base) != 0))
		return;
	uv_timer_start(&r->debounce, on_quiet, RELOAD_DEBOUNCE_MS, 0);
}

reloader *reloader_start(uv_loop_t *loop, const char *path, etm_supervisor *sup, bool keep_level,
                         metrics_reloads *counts, const char *metrics_listen,
                         const reload_hook *hook)
{
	reloader *r = calloc(1, sizeof *r);
	char *d = strdup(path), *b = strdup(path);
	if (!r || !d || !b) {
		free(r);
		free(d);
		free(b);
		return NULL;
	}
	*r = (reloader){.loop = loop,
	                .path = path,
	                .sup = sup,
	                .counts = counts,
	                .metrics_listen = metrics_listen,
	                .keep_level = keep_level};
	if (hook)
		r->hook = *hook;
	r->dir = strdup(dirname(d));
	r->base = strdup(basename(b));
	free(d);
	free(b);
	uv_timer_init(loop, &r->debounce);
	r->debounce.data = r;
	uv_fs_event_init(loop, &r->watch);
	r->watch.data = r;
	int rc = r->dir && r->base ? uv_fs_event_start(&r->watch, on_change, r->dir, 0) : UV_ENOMEM;
	if (rc)
		log_warn("app", msgs[M_NO_WATCH], r->dir ? r->dir : path, uv_strerror(rc));
	r->watching = rc == 0;
	return r;
}

/* libuv runs close callbacks in no order a caller may count on (the
 * last closed runs first): the reloader goes once both have run. */
static void free_closed(uv_handle_t *h)
{
	reloader *r = h->data;
	if (--r->open_handles > 0)
		return;
	free(r->dir);
	free(r->base);
	free(r);
}

void reloader_stop(reloader *r)
{
	if (!r)
		return;
	r->open_handles = 2;
	uv_close((uv_handle_t *)&r->watch, free_closed);
	uv_close((uv_handle_t *)&r->debounce, free_closed);
}
