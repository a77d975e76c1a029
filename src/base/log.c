/* log.c - stderr logging with a process-wide level. */
#include "base/log.h"

#include <stdatomic.h>
#include <string.h>
#include <time.h>

/* A line longer than this is cut; log lines are one event, not data dumps. */
#define LOG_LINE_MAX 2048

static _Atomic int level = ETM_LOG_INFO;
static FILE *_Atomic out;

static const char *const names[] = {
	[ETM_LOG_ERROR] = "error",
	[ETM_LOG_WARN] = "warn",
	[ETM_LOG_INFO] = "info",
	[ETM_LOG_DEBUG] = "debug",
	[ETM_LOG_TRACE] = "trace",
};

static const char *const labels[] = {
	[ETM_LOG_ERROR] = "ERROR", [ETM_LOG_WARN] = "WARN ", [ETM_LOG_INFO] = "INFO ",
	[ETM_LOG_DEBUG] = "DEBUG", [ETM_LOG_TRACE] = "TRACE",
};

void log_set_level(etm_log_level l) { atomic_store(&level, (int)l); }

etm_log_level log_get_level(void) { return (etm_log_level)atomic_load(&level); }

void log_set_stream(FILE *stream) { atomic_store(&out, stream); }

const char *log_level_name(etm_log_level l)
{
	if ((unsigned)l > ETM_LOG_TRACE)
		return "?";
	return names[l];
}

void log_write(etm_log_level l, const char *target, const char *fmt, ...)
{
	if ((int)l > atomic_load(&level) || (unsigned)l > ETM_LOG_TRACE)
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
