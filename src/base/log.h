/* log.h - the process's log: one line per event on stderr with time, level, target and message. */
#ifndef ETM_BASE_LOG_H
#define ETM_BASE_LOG_H

#include <stdarg.h>
#include <stdio.h>

#include "etemenanki/spec.h"

/* The level is the one process-wide setting of this module (ARCHITECTURE.md
 * principle 3). Lines above it are dropped before formatting. Thread-safe:
 * the level is an atomic and each line is written with one fwrite. */
void log_set_level(etm_log_level level);
etm_log_level log_get_level(void);

/* Where lines go; stderr unless a test redirects them. Borrowed. */
void log_set_stream(FILE *stream);

/* "error", "warn", "info", "debug", "trace". */
const char *log_level_name(etm_log_level level);

/* Writes "2026-11-30T10:20:36.123Z INFO  target: message\n". target names the
 * module ("config", "balancer", ...). */
void log_write(etm_log_level level, const char *target, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#define log_error(target, ...) log_write(ETM_LOG_ERROR, target, __VA_ARGS__)
#define log_warn(target, ...) log_write(ETM_LOG_WARN, target, __VA_ARGS__)
#define log_info(target, ...) log_write(ETM_LOG_INFO, target, __VA_ARGS__)
#define log_debug(target, ...) log_write(ETM_LOG_DEBUG, target, __VA_ARGS__)

#endif
