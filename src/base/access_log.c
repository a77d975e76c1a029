/* access_log.c - the access log's target, swapped on reload, and its one line per flow. */
#include "base/access_log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define OFF (-1)

/* The fd lines go to, OFF when the log is off. Read by any thread, written
 * by the main thread only. */
static _Atomic int cur = OFF;
/* Files this module opened (not fd 2): the current one, and the one it
 * replaced, kept open for one more reload as the grace period. Main thread
 * only. */
static int owned = OFF, retired = OFF;

static void close_owned(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = OFF;
}

int access_log_open(const char *target, char *err, size_t err_size)
{
	int fd = OFF;
	bool own = false;
	if (target && strcmp(target, "stderr") == 0) {
		fd = STDERR_FILENO;
	} else if (target && strcmp(target, "off") != 0) {
		fd = open(target, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
		if (fd < 0) {
			snprintf(err, err_size, "cannot open the access log %s: %s", target,
			         strerror(errno));
			return -1;
		}
		own = true;
	}
	atomic_store(&cur, fd);
	close_owned(&retired);
	retired = owned;
	owned = own ? fd : OFF;
	return 0;
}

int access_log_check(const char *target, char *err, size_t err_size)
{
	if (!target || strcmp(target, "stderr") == 0 || strcmp(target, "off") == 0)
		return 0;
	int fd = open(target, O_WRONLY | O_APPEND | O_CLOEXEC);
	if (fd >= 0) {
		close(fd);
		return 0;
	}
	int e = errno;
	if (e == ENOENT) {
		char dir[PATH_MAX];
		const char *slash = strrchr(target, '/');
		if (!slash)
			snprintf(dir, sizeof dir, ".");
		else if (slash == target)
			snprintf(dir, sizeof dir, "/");
		else
			snprintf(dir, sizeof dir, "%.*s", (int)(slash - target), target);
		e = access(dir, W_OK | X_OK) == 0 ? 0 : errno;
	}
	if (e == 0)
		return 0;
	snprintf(err, err_size, "cannot open the access log %s: %s", target, strerror(e));
	return -1;
}

void access_log_close(void)
{
	atomic_store(&cur, OFF);
	close_owned(&retired);
	close_owned(&owned);
}

bool access_log_enabled(void) { return atomic_load(&cur) != OFF; }

static size_t put_addr(char *out, size_t size, size_t n, const addr_dest *d, bool port)
{
	if (n >= size)
		return n;
	if (!d || d->kind == ADDR_NONE) {
		int m = snprintf(out + n, size - n, "-");
		return m < 0 ? n : n + (size_t)m;
	}
	if (!port && d->kind == ADDR_DOMAIN) {
		int m = snprintf(out + n, size - n, "%.*s", (int)d->u.domain.len, d->u.domain.name);
		return m < 0 ? n : n + (size_t)m;
	}
	return n + addr_dest_format(d, out + n, size - n);
}

static size_t put(char *out, size_t size, size_t n, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static size_t put(char *out, size_t size, size_t n, const char *fmt, ...)
{
	if (n >= size)
		return n;
	va_list ap;
	va_start(ap, fmt);
	int m = vsnprintf(out + n, size - n, fmt, ap);
	va_end(ap);
	return m < 0 ? n : n + (size_t)m;
}

size_t access_log_format(const access_log_entry *e, char *out, size_t size)
{
	struct tm tm;
	gmtime_r(&e->when.tv_sec, &tm);
	size_t n = put(out, size, 0, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ ", tm.tm_year + 1900,
	               tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
	               e->when.tv_nsec / 1000000);
	n = put_addr(out, size, n, e->source, true);
	n = put(out, size, n, " accepted %s:", e->dest->network == ADDR_UDP ? "udp" : "tcp");
	n = put_addr(out, size, n, e->dest, true);
	if (e->sniffed && e->sniffed->kind != ADDR_NONE) {
		n = put(out, size, n, " sniffed ");
		n = put_addr(out, size, n, e->sniffed, false);
	}
	n = put(out, size, n, " inbound %s rule ", e->inbound ? e->inbound : "-");
	if (e->rule < 0)
		n = put(out, size, n, "default");
	else
		n = put(out, size, n, "#%d", (int)e->rule + 1);
	n = put(out, size, n, " outbound %s@v%llu", e->outbound, e->version);
	if (n > size - 2)
		n = size - 2; /* cut, keep room for the newline */
	out[n++] = '\n';
	out[n] = '\0';
	return n;
}

void access_log_write(const access_log_entry *e)
{
	int fd = atomic_load(&cur);
	if (fd == OFF)
		return;
	char line[ACCESS_LOG_LINE_MAX];
	size_t len = access_log_format(e, line, sizeof line);
	/* One write(2) per line and no lock: on an O_APPEND file the kernel
	 * moves to the end and writes under the inode lock, so lines from
	 * workers never interleave; a line is far shorter than PIPE_BUF, so
	 * the same holds when stderr is a pipe. A short or failed write loses
	 * the line: the access log must never stall a flow. */
	ssize_t w = write(fd, line, len);
	(void)w;
}
