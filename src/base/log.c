/* log.c - stderr logging with a process-wide level and format. */
#include "base/log.h"

#include <stdatomic.h>
#include <string.h>

#include "base/json.h"

/* A line longer than this is cut; log lines are one event, not data dumps. */
#define LOG_LINE_MAX 2048

static _Atomic int level = LOG_LEVEL_INFO;
static _Atomic int format = LOG_FORMAT_TEXT;
static FILE *_Atomic out;
static _Atomic log_tap_fn tap;

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

void log_set_format(int f) { atomic_store(&format, f); }

int log_get_format(void) { return atomic_load(&format); }

void log_set_stream(FILE *stream) { atomic_store(&out, stream); }

void log_set_tap(log_tap_fn t) { atomic_store(&tap, t); }

const char *log_level_name(int l)
{
	if ((unsigned)l > LOG_LEVEL_TRACE)
		return "?";
	return names[l];
}

int log_level_parse(const char *s, size_t n)
{
#define LOG_LEVEL_WORD_(word, l)                                      \
	if (n == sizeof(word) - 1 && memcmp(s, word, sizeof(word) - 1) == 0) \
		return l;
	LOG_LEVEL_WORDS(LOG_LEVEL_WORD_)
#undef LOG_LEVEL_WORD_
	return -1;
}

size_t log_format_time(const struct timespec *when, char *buf, size_t size)
{
	struct tm tm;
	gmtime_r(&when->tv_sec, &tm);
	int n = snprintf(buf, size, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900,
	                 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
	                 when->tv_nsec / 1000000);
	if (n < 0)
		n = 0;
	return (size_t)n < size ? (size_t)n : size - 1;
}

/* The json line's closing: the msg's quote, the brace, the newline. */
#define JSON_TAIL "\"}\n"

size_t log_format_line(int fmt, const struct timespec *when, int l, const char *target,
                       const char *msg, char *line, size_t size)
{
	char t[LOG_TIME_MAX];
	log_format_time(when, t, sizeof t);
	const char *lv = (unsigned)l > LOG_LEVEL_TRACE ? "?" : names[l];
	size_t n;
	if (fmt == LOG_FORMAT_JSON) {
		char tg[256];
		json_escape(tg, sizeof tg, target, strlen(target));
		int m = snprintf(line, size, "{\"time\":\"%s\",\"level\":\"%s\",\"target\":\"%s\",\"msg\":\"",
		                 t, lv, tg);
		n = m < 0 ? 0 : (size_t)m;
		if (n > size - sizeof JSON_TAIL)
			n = size - sizeof JSON_TAIL; /* cannot happen for size >= 64 and short targets */
		n += json_escape(line + n, size - n - (sizeof JSON_TAIL - 1), msg, strlen(msg));
		memcpy(line + n, JSON_TAIL, sizeof JSON_TAIL);
		return n + sizeof JSON_TAIL - 1;
	}
	int m = snprintf(line, size, "%s %s %s: %s", t,
	                 (unsigned)l > LOG_LEVEL_TRACE ? "?    " : labels[l], target, msg);
	n = m < 0 ? 0 : (size_t)m;
	if (n > size - 2)
		n = size - 2; /* cut, keep room for the newline */
	line[n++] = '\n';
	line[n] = '\0';
	return n;
}

void log_write(int l, const char *target, const char *fmt, ...)
{
	if (l > atomic_load(&level) || (unsigned)l > LOG_LEVEL_TRACE)
		return;

	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	char msg[LOG_LINE_MAX];
	va_list ap;
	va_start(ap, fmt);
	int m = vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (m < 0)
		return;
	char line[LOG_LINE_MAX];
	size_t len = log_format_line(atomic_load(&format), &ts, l, target, msg, line, sizeof line);

	FILE *f = atomic_load(&out);
	if (!f)
		f = stderr;
	fwrite(line, 1, len, f);
	fflush(f);

	log_tap_fn t = atomic_load_explicit(&tap, memory_order_relaxed);
	if (t) {
		int n = snprintf(line, sizeof line, "%s: %s", target, msg);
		if (n >= 0)
			t(l, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
	}
}
