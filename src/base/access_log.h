/* access_log.h - the access log: one line per routed flow, written to stderr or a file that a reload reopens. */
#ifndef ETM_BASE_ACCESS_LOG_H
#define ETM_BASE_ACCESS_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "base/addr.h"

/* A line longer than this is cut. The longest real line (two 255-byte names,
 * tags) stays well under it, and under PIPE_BUF (4096 on Linux), the size up
 * to which one write(2) is never split. */
#define ACCESS_LOG_LINE_MAX 1024

/* Room for "cannot open the access log <path>: <strerror>". */
#define ACCESS_LOG_ERR_MAX 512

/* What one line says about a flow. Everything is borrowed for the call. */
typedef struct access_log_entry {
	struct timespec when;          /* CLOCK_REALTIME */
	const addr_dest *source;       /* NULL or kind ADDR_NONE: written "-" */
	const addr_dest *dest;         /* dest->network gives tcp or udp */
	const addr_dest *sniffed;      /* NULL or kind ADDR_NONE: no "sniffed" field */
	const char *inbound;           /* NULL: "-" */
	int32_t rule;                  /* index of the rule that matched, -1 for the default */
	const char *outbound;          /* the outbound or balancer tag */
	unsigned long long version;    /* its version (the vN of tag@vN) */
} access_log_entry;

/* Writes the line for e into out, newline included, cut to size - 1 bytes
 * (the newline kept) and NUL-terminated:
 *   2026-12-01T17:30:00.123Z 127.0.0.1:50000 accepted tcp:example.com:80
 *     sniffed example.com inbound in rule #1 outbound direct@v1
 * (one line). Returns its length without the NUL. Cannot fail for
 * size >= 2. */
size_t access_log_format(const access_log_entry *e, char *out, size_t size);

/* Opens target: "off" (or NULL) turns the log off, "stderr" writes to fd
 * 2, anything else is a path opened O_WRONLY|O_APPEND|O_CREAT|O_CLOEXEC,
 * 0640. On success the new target replaces the current one and returns 0;
 * the file it replaces stays open until the next access_log_open or
 * access_log_close, the grace that lets a worker that loaded the old fd
 * just before the swap finish its write. On failure returns -1 with
 * "cannot open the access log <path>: <strerror>" in err, and the current
 * target is left unchanged. Main thread only. */
__attribute__((warn_unused_result)) int access_log_open(const char *target, char *err,
                                                        size_t err_size);

/* What --test does instead of access_log_open: the same verdict and message
 * without creating the file (an existing file is opened for append and
 * closed; for a new one, its directory must be writable). Returns 0 or -1
 * with the message in err. Changes nothing; any thread. */
__attribute__((warn_unused_result)) int access_log_check(const char *target, char *err,
                                                         size_t err_size);

/* Closes the files and turns the log off. Main thread only, once the workers
 * have stopped. */
void access_log_close(void);

/* Whether a line would be written now; callers skip formatting when not. */
bool access_log_enabled(void);

/* Formats e and writes it with one write(2). Any thread. */
void access_log_write(const access_log_entry *e);

#endif
