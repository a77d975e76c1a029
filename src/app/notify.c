/* notify.c - sd_notify(3) and sd_listen_fds(3) through libsystemd, loaded only when a service manager passed something. */
#include "app/notify.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"

#ifdef ETM_HAVE_LIBSYSTEMD
#include <dlfcn.h>
#include <stdlib.h>
#include <systemd/sd-daemon.h>
#endif

enum { M_NOT_SENT, M_LISTEN_FDS, M_NO_LIBRARY, M_COUNT_ };
static const char *const msgs[M_COUNT_] = {
	[M_NOT_SENT] = "systemd notify: %s not sent: %s",
	[M_LISTEN_FDS] = "socket activation: cannot take the passed sockets: %s",
	[M_NO_LIBRARY] = "systemd: cannot load %s: %s",
};

bool notify_built_in(void)
{
#ifdef ETM_HAVE_LIBSYSTEMD
	return true;
#else
	return false;
#endif
}

#ifdef ETM_HAVE_LIBSYSTEMD
/* libsystemd is opened at run time, not linked: linked, it maps itself and
 * what it needs (libgcrypt, liblz4, libzstd, liblzma, libcap, ...) into
 * every process, about 1.2 MiB of RSS, though only a start under a service
 * manager (NOTIFY_SOCKET, LISTEN_FDS) uses it. The build still needs its
 * headers: the prototypes below are checked against them, and --version
 * names the version built against. The SONAME is the one Debian's
 * libsystemd0 has carried since systemd 209. */
#define SD_SONAME "libsystemd.so.0"

/* Resolved once, on the control thread (the only caller of this module);
 * the library stays open for the life of the process. */
static struct {
	bool tried;
	__typeof__(sd_notify) *notify;
	__typeof__(sd_listen_fds) *listen_fds;
} sd;

/* True when libsystemd is loaded; a failure is logged once. */
static bool sd_load(void)
{
	if (sd.tried)
		return sd.notify != NULL;
	sd.tried = true;
	void *h = dlopen(SD_SONAME, RTLD_NOW | RTLD_LOCAL);
	if (h) {
		sd.notify = (__typeof__(sd_notify) *)dlsym(h, "sd_notify");
		sd.listen_fds = (__typeof__(sd_listen_fds) *)dlsym(h, "sd_listen_fds");
	}
	if (!sd.notify || !sd.listen_fds) {
		const char *why = dlerror(); /* dlopen's or dlsym's */
		log_warn("app", msgs[M_NO_LIBRARY], SD_SONAME, why ? why : "?");
		sd.notify = NULL;
		sd.listen_fds = NULL;
		if (h)
			(void)dlclose(h); /* nothing of it was taken */
		return false;
	}
	return true;
}

/* Every message to the manager goes through here. state names the message
 * in the log, text is what is sent. Without NOTIFY_SOCKET sd_notify() is a
 * no-op that returns 0: skipping it then is what keeps the library out. */
static void send_state(const char *state, const char *text)
{
	if (!getenv("NOTIFY_SOCKET") || !sd_load())
		return;
	/* unset_environment 0: every later state goes to the same socket */
	int rc = sd.notify(0, text);
	if (rc < 0)
		log_warn("app", msgs[M_NOT_SENT], state, strerror(-rc));
}
#endif

void notify_ready(void)
{
#ifdef ETM_HAVE_LIBSYSTEMD
	send_state("READY=1", "READY=1");
#endif
}

void notify_mainpid(void)
{
#ifdef ETM_HAVE_LIBSYSTEMD
	char text[32];
	int n = snprintf(text, sizeof text, "MAINPID=%ld", (long)getpid());
	if (n > 0 && (size_t)n < sizeof text)
		send_state("MAINPID", text);
#endif
}

void notify_reloading(void)
{
#ifdef ETM_HAVE_LIBSYSTEMD
	struct timespec ts;
	char text[64];
	(void)clock_gettime(CLOCK_MONOTONIC, &ts); /* cannot fail: the clock exists, ts is valid */
	int n = snprintf(text, sizeof text, "RELOADING=1\nMONOTONIC_USEC=%llu",
	                 (unsigned long long)ts.tv_sec * 1000000ULL +
	                     (unsigned long long)ts.tv_nsec / 1000ULL);
	if (n > 0 && (size_t)n < sizeof text)
		send_state("RELOADING=1", text);
#endif
}

void notify_stopping(void)
{
#ifdef ETM_HAVE_LIBSYSTEMD
	send_state("STOPPING=1", "STOPPING=1");
#endif
}

size_t notify_listen_fds(int *fds, size_t max)
{
#ifdef ETM_HAVE_LIBSYSTEMD
	/* sd_listen_fds() returns 0 without LISTEN_PID and LISTEN_FDS; either
	 * one set is a start by a manager, whose variables it must unset */
	if ((!getenv("LISTEN_FDS") && !getenv("LISTEN_PID")) || !sd_load())
		return 0;
	int n = sd.listen_fds(1);
	if (n < 0) {
		log_warn("app", msgs[M_LISTEN_FDS], strerror(-n));
		return 0;
	}
	size_t k = 0;
	for (int i = 0; i < n && k < max; i++)
		fds[k++] = SD_LISTEN_FDS_START + i;
	return k;
#else
	(void)fds;
	(void)max;
	return 0;
#endif
}
