/* reload.h - what starts a reload: SIGHUP, and saving the config file (watched through its directory, debounced). */
#ifndef ETM_APP_RELOAD_H
#define ETM_APP_RELOAD_H

#include <stdbool.h>
#include <uv.h>

#include "app/metrics_http.h"
#include "etemenanki/supervisor.h"

/* A burst of saves within this long is one reload (an editor writes, then
 * renames; a script writes in pieces). */
#define RELOAD_DEBOUNCE_MS 200

typedef struct reloader reloader;

/* What else follows a reload (the admin API's view of the config). */
typedef struct reload_hook {
	/* Called with a new spec that parsed and checked, before the apply
	 * takes it over; returns what after gets (NULL is fine). */
	void *(*before)(void *arg, const etm_spec *spec);
	/* Called once the apply is over: applied, or kept the config. */
	void (*after)(void *arg, void *state, bool applied);
	void *arg;
	/* The running [api] listen (NULL when off; borrowed for the life of
	 * the reloader): a change is logged as [metrics] listen's is. */
	const char *api_listen;
} reload_hook;

/* Watches path's directory on loop (inotify through libuv: an editor that
 * writes a temporary file and renames it over path is seen too) and
 * reloads sup from path when path changes, RELOAD_DEBOUNCE_MS after the
 * last change. With keep_level the log level is the command line's, else
 * the new file's [log] level applies. path is borrowed for the life of
 * the reloader. Returns NULL when memory runs out; a directory that cannot
 * be watched is logged, and reloader_now (SIGHUP) still works. Every
 * reload counts in *counts (borrowed for the life of the reloader): ok
 * when applied ("no changes" included), failed otherwise. metrics_listen
 * is the running [metrics] listen (NULL when off; borrowed likewise): a
 * reload whose file changes it logs "reload: [metrics] listen changed
 * from <old> to <new>; the endpoint stays on <old> until the next start"
 * and applies the rest; hook (NULL: none; copied) is told of every
 * apply. */
reloader *reloader_start(uv_loop_t *loop, const char *path, etm_supervisor *sup, bool keep_level,
                         metrics_reloads *counts, const char *metrics_listen,
                         const reload_hook *hook);

/* Reloads now (SIGHUP): parse and check as --test does, then apply.
 * Every outcome is logged: "reload: parse failed, keeping current config:
 * <message>" (the text --test prints after "configuration invalid: "),
 * "reload: build failed, keeping current config: <message>" (the text a
 * start prints after "failed to start: "), or the supervisor's lines. */
void reloader_now(reloader *r, const char *why);

/* reloader_now that also hands back the outcome (PUT /configs): 0, or -1
 * with the message it logged after "keeping current config: " in err. */
__attribute__((warn_unused_result)) int reloader_run(reloader *r, const char *why, char *err,
                                                     size_t err_size);
/* Around it the service manager is told RELOADING=1, then READY=1
 * whatever the outcome (app/notify.h). */

/* Stops watching; closes its handles on the loop (run the loop once more
 * to free them). */
void reloader_stop(reloader *r);

#endif
