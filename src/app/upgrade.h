/* upgrade.h - the binary upgrade (SIGUSR2): the old process starts the new binary with its listening sockets, waits for it to serve, then drains; the new one takes the sockets and says when it serves. */
#ifndef ETM_APP_UPGRADE_H
#define ETM_APP_UPGRADE_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

#include "etemenanki/supervisor.h"

/* The environment the old process hands the new one: its sockets'
 * descriptors ("5,6,7") and the write end of the pipe that says "serving"
 * (one byte). */
#define UPGRADE_ENV_FDS "ETM_UPGRADE_FDS"
#define UPGRADE_ENV_READY "ETM_UPGRADE_READY"

/* How often a draining process counts its open flows. */
#define UPGRADE_DRAIN_POLL_MS 100

/* ---- the new process ---- */

/* Reads UPGRADE_ENV_FDS and UPGRADE_ENV_READY and unsets both (this
 * process's own upgrade must not see them): fills fds with up to max of
 * the passed sockets, each close-on-exec from now on, and returns how many;
 * 0 when this process was not started by an upgrade. Logs "upgrade:
 * sockets passed by the old process: <n>". Call once, at the start. */
size_t upgrade_passed_fds(int *fds, size_t max);

/* True when an old process waits for this one (upgrade_passed_fds found a
 * readiness pipe). */
bool upgrade_awaited(void);

/* Writes the byte that tells the old process this one serves, and closes
 * the pipe. Every inbound listens on every worker by then, and the service
 * manager has been told this process is its main one. A no-op when not
 * awaited; a failed write is logged (the old one then sees a closed pipe
 * and keeps serving). */
void upgrade_tell_ready(void);

/* ---- the old process ---- */

typedef struct upgrader upgrader;

/* Called once, when the new process serves and this one has stopped
 * accepting: the caller stops reloading (the new process owns reloads). */
typedef void (*upgrade_serving_fn)(void *data);

/* An upgrader on loop for the engine sup (borrowed for its life), which
 * will start the executable this process runs (saved now: an install
 * that replaces the file leaves /proc/self/exe reading "(deleted)") with
 * argv (borrowed: main's). Returns NULL when memory runs out. */
upgrader *upgrader_new(uv_loop_t *loop, etm_supervisor *sup, char *const *argv,
                       upgrade_serving_fn serving, void *data);

/* SIGUSR2: starts the new process with every listening socket, unless an
 * upgrade or a drain is under way (logged and ignored). Its outcome is
 * logged: "upgrade: new process <pid> is serving; this process stops
 * accepting and drains", then the drain ends the loop (uv_stop) when no
 * flow is open or [policy] upgrade_drain_after has passed; or "upgrade:
 * the new process failed to start (<why>); this process keeps serving",
 * when it exits first or has not served after [policy]
 * upgrade_start_timeout (then it gets SIGKILL, and the line follows its
 * exit). */
void upgrader_start(upgrader *u);

/* True from the new process's readiness on: this process is no longer the
 * service's main one. */
bool upgrader_draining(const upgrader *u);

/* Closes the upgrader's handles, its timers and those of the new process
 * (run the loop once more to free it). A new
 * process that serves stays running; one still starting gets SIGTERM (a
 * stop during an upgrade stops both). NULL does nothing. */
void upgrader_del(upgrader *u);

#endif
