/* log.c - stderr logging with a process-wide level. */
#include "base/log.h"

#include <stdatomic.h>
#include <string.h>
#include <time.h>

/* A line longer than this is cut; log lines are one event, not data dumps. */
#define LOG_LINE_MAX 2048

static _Atomic int level = LOG_LEVEL_INFO;
static FILE *_Atomic out;

static const char *const names[] = {
	[LOG_LEVEL_ERROR] = "error",
	[LOG_LEVEL_WARN] = "warn",
	[LOG_LEVEL_INFO] = "info",
	[LOG_LEVEL_DEBUG] = "debug",
	[LOG_LEVEL_TRACE] = "trace",
};

static const char *const labels[] = {
	[LOG_LEVEL_ERROR] = "ERROR", [LOG_LEVEL_WARN] = "WARN ", [LOG_LEVEL_INFO] = "INFO ",
	[LOG_LEVEL_DEBUG] = "DEBUG", [LOG_LEVEL_TRACE] = "TRACE",
};

void log_set_level(int l) { atomic_store(&level, l); }

int log_get_level(void) { return atomic_load(&level); }

void log_set_stream(FILE *stream) { atomic_store(&out, stream); }

const char *log_level_name(int l)
{
	if ((unsigned)l > LOG_LEVEL_TRACE)
		return "?";
	return names[l];
}

void log_write(int l, const char *target, const char *fmt, ...)
{
	if (l > atomic_load(&level) || (unsigned)l > LOG_LEVEL_TRACE)
		return;

	char line[LOG_LINE_MAX];
	struct timespec ts;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s %s: ",
	                 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
	                 tm.tm_sec, ts.tv_nsec / 1000000, labels[l], target);
	if (n < 0 || (size_t)n >= sizeof line)
		return;

	va_list ap;
	va_start(ap, fmt);
	int m = vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
	va_end(ap);
	if (m < 0)
		return;
	size_t len = (size_t)n + (size_t)m;
	if (len > sizeof line - 2)
		len = sizeof line - 2; /* cut, keep room for the newline */
	line[len++] = '\n';

	FILE *f = atomic_load(&out);
	if (!f)
		f = stderr;
	fwrite(line, 1, len, f);
	fflush(f);
}
