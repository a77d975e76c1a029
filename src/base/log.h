/* log.h - the process's log: one line per event on stderr with time, level, target and message. */
#ifndef ETM_BASE_LOG_H
#define ETM_BASE_LOG_H

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

/* Levels, most severe first: a line is written when its level is at or
 * below the process's. The functions take an int holding one of these, so
 * that code still comparing against the config's ETM_LOG_* (same order and
 * values, static-asserted where src/app maps one to the other) builds
 * without an enum-conversion warning. */
enum log_level {
	LOG_LEVEL_ERROR,
	LOG_LEVEL_WARN,
	LOG_LEVEL_INFO,
	LOG_LEVEL_DEBUG,
	LOG_LEVEL_TRACE,
};

/* The level is the one process-wide setting of this module (ARCHITECTURE.md
 * principle 3). Lines above it are dropped before formatting. Thread-safe:
 * the level is an atomic and each line is written with one fwrite. */
void log_set_level(int level);
int log_get_level(void);

/* How lines are written ([log] format): text, or one JSON object per line
 * (RFC 8259) with the keys time, level, target and msg. The access log
 * follows it too (access_log.h). Process-wide like the level; any thread. */
enum log_format {
	LOG_FORMAT_TEXT,
	LOG_FORMAT_JSON,
};
void log_set_format(int format);
int log_get_format(void);

/* Where lines go; stderr unless a test redirects them. Borrowed. */
void log_set_stream(FILE *stream);

/* "error", "warn", "info", "debug", "trace". */
const char *log_level_name(int level);

/* The one set of level words the command line (-l), the config ([log]
 * level) and the admin API (PATCH /configs log-level) accept: each names
 * the level after it; "warning" is "warn" under the name Clash, Xray and
 * sing-box write. X(word, LOG_LEVEL_*), in the order messages list them. */
#define LOG_LEVEL_WORDS(X)                                                                \
	X("error", LOG_LEVEL_ERROR)                                                       \
	X("warn", LOG_LEVEL_WARN)                                                         \
	X("warning", LOG_LEVEL_WARN)                                                      \
	X("info", LOG_LEVEL_INFO)                                                         \
	X("debug", LOG_LEVEL_DEBUG)                                                       \
	X("trace", LOG_LEVEL_TRACE)

/* The words of LOG_LEVEL_WORDS as a message lists them. */
#define LOG_LEVEL_WORDS_TEXT "error, warn, warning, info, debug or trace"

/* The level the n bytes at s name (one of LOG_LEVEL_WORDS, exactly, case
 * and all), or -1. */
int log_level_parse(const char *s, size_t n) __attribute__((warn_unused_result));

/* Room for "2026-11-30T10:20:36.123Z" and its NUL. */
#define LOG_TIME_MAX 32

/* Writes when (CLOCK_REALTIME) as "2026-11-30T10:20:36.123Z" (UTC,
 * milliseconds) into out, NUL-terminated. Returns its length. */
size_t log_format_time(const struct timespec *when, char *out, size_t size);

/* The line log_write writes, into out (newline included, NUL-terminated,
 * cut to size - 1 bytes with the newline kept; a json line is cut inside
 * its msg so that it stays one valid object). text:
 *   2026-11-30T10:20:36.123Z INFO  balancer: member a is now down
 * json:
 *   {"time":"2026-11-30T10:20:36.123Z","level":"info","target":"balancer","msg":"member a is now down"}
 * Returns the length without the NUL. size >= 64. */
size_t log_format_line(int format, const struct timespec *when, int level, const char *target,
                       const char *msg, char *out, size_t size);

/* Writes "2026-11-30T10:20:36.123Z INFO  target: message\n" (or its json
 * form). target names the module ("config", "balancer", ...). */
void log_write(int level, const char *target, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* A tap sees every line written (at or above the process's level) as
 * "target: message", without time, level or newline, from the thread
 * that logs: any thread. It must be quick and must not log. One tap per
 * process; NULL removes it. With none set a line costs one relaxed
 * atomic load more. The function must stay callable after it is
 * removed: a thread may have loaded it just before. */
typedef void (*log_tap_fn)(int level, const char *line, size_t len);
void log_set_tap(log_tap_fn tap);

#define log_error(target, ...) log_write(LOG_LEVEL_ERROR, target, __VA_ARGS__)
#define log_warn(target, ...) log_write(LOG_LEVEL_WARN, target, __VA_ARGS__)
#define log_info(target, ...) log_write(LOG_LEVEL_INFO, target, __VA_ARGS__)
#define log_debug(target, ...) log_write(LOG_LEVEL_DEBUG, target, __VA_ARGS__)

#endif
