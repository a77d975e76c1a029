/* notify.c - sd_notify(3) and sd_listen_fds(3) through libsystemd when the build has it. */
#include "app/notify.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"

#ifdef ETM_HAVE_LIBSYSTEMD
#include <systemd/sd-daemon.h>
#endif

enum { M_NOT_SENT, M_LISTEN_FDS, M_COUNT_ };
static const char *const msgs[M_COUNT_] = {
	[M_NOT_SENT] = "systemd notify: %s not sent: %s",
	[M_LISTEN_FDS] = "socket activation: cannot take the passed sockets: %s",
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
/* state names the message in the log, text is what is sent. */
static void send_state(const char *state, const char *text)
{
	/* unset_environment 0: every later state goes to the same socket */
	int rc = sd_notify(0, text);
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
	int n = sd_listen_fds(1);
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
