/* notify.h - tells the service manager where the process is (sd_notify(3)): ready, reloading, stopping; no-ops in a build without libsystemd or when NOTIFY_SOCKET is unset (libsystemd is then not even loaded). */
#ifndef ETM_APP_NOTIFY_H
#define ETM_APP_NOTIFY_H

#include <stdbool.h>
#include <stddef.h>

/* True when this build has libsystemd's support (meson found its headers;
 * the library itself is opened at run time, under a service manager). */
bool notify_built_in(void);

/* "READY=1": every listener is bound (after etm_supervisor_start), or a
 * reload is over, whatever its outcome. */
void notify_ready(void);

/* "MAINPID=<this process's pid>": an upgrade's new process becomes the
 * service's main one, before the old one exits (the unit needs
 * NotifyAccess=all: the manager takes it from a process not yet its main
 * one only then). A notify_ready() follows. */
void notify_mainpid(void);

/* "RELOADING=1" with "MONOTONIC_USEC=<CLOCK_MONOTONIC in µs>": systemd
 * 253 and later match a reload to the RELOADING=1 sent after it began by
 * that timestamp (sd_notify(3), MONOTONIC_USEC=); older ones ignore it. A
 * notify_ready() must follow. */
void notify_reloading(void);

/* "STOPPING=1": a SIGINT or SIGTERM came, the listeners close next. */
void notify_stopping(void);

/* None of the three can fail for the caller: a message the manager does
 * not get is logged at warn ("systemd notify: <state> not sent: <reason>"),
 * and the manager's own timeout is what follows from it. */

/* The sockets passed by socket activation (sd_listen_fds(3): LISTEN_FDS,
 * LISTEN_PID), each close-on-exec from now on: fills fds with up to max of
 * them and returns how many, 0 when none were passed (or in a build
 * without libsystemd, or when libsystemd.so.0 cannot be opened: logged).
 * Unsets the variables, so nothing started later takes them for its own. */
size_t notify_listen_fds(int *fds, size_t max);

#endif
