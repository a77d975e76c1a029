/* access_log.h - the access log: one line per routed flow, written to stderr or a file that a reload reopens. */
#ifndef ETM_BASE_ACCESS_LOG_H
#define ETM_BASE_ACCESS_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "base/addr.h"

/* A line longer than this is cut. It is PIPE_BUF (4096 on Linux), the size
 * up to which one write(2) is never split. A json line's strings are each
 * cut to ACCESS_LOG_JSON_FIELD_MAX bytes (escaped), ACCESS_LOG_JSON_ADDR_MAX
 * for the three addresses, so that the longest one still fits whole and
 * stays one valid object: 3 x 540 + 5 x 300 + the keys and numbers (~300)
 * < 4096. */
#define ACCESS_LOG_LINE_MAX 4096
#define ACCESS_LOG_JSON_ADDR_MAX 540
#define ACCESS_LOG_JSON_FIELD_MAX 300

/* A name an end line keeps from its open (tags, user names, the member) is
 * cut to this many bytes less one: it is copied for the flow's life. */
#define ACCESS_LOG_NAME_MAX 128

/* The why of an end line when the flow ended in order or was closed. */
#define ACCESS_LOG_CLOSED "closed"

/* Room for "cannot open the access log <path>: <strerror>". */
#define ACCESS_LOG_ERR_MAX 512

typedef enum access_log_event {
	ACCESS_LOG_OPEN, /* routed: "accepted" */
	ACCESS_LOG_END,  /* ended: "ended", with bytes, duration and why */
} access_log_event;

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
	const char *user;              /* the flow's user name; NULL: none */
	const char *member;            /* the balancer member that carried it; NULL: none */
	access_log_event event;
	uint64_t up, down;             /* END: bytes client -> target, target -> client */
	uint64_t ms;                   /* END: the flow's life */
	const char *why;               /* END: what ended it; NULL: ACCESS_LOG_CLOSED */
} access_log_entry;

/* Writes the line for e in format (LOG_FORMAT_TEXT or LOG_FORMAT_JSON, log.h)
 * into out, newline included, cut to size - 1 bytes (the newline kept) and
 * NUL-terminated. text (one line each):
 *   2026-12-01T17:30:00.123Z 127.0.0.1:50000 accepted tcp:example.com:80
 *     sniffed example.com inbound in user alice rule #1 outbound direct@v1
 *   2026-12-01T17:30:00.123Z 127.0.0.1:50000 ended tcp:example.com:80
 *     inbound in rule #1 outbound pool@v2 member a up 12 down 3400 ms 250
 *     why closed
 * (sniffed, user and member only when known). json: one object with every
 * key on every line, null where a line has no value: time, event ("open" or
 * "end"), source, dest, sniffed, inbound, user, rule (the rule's number,
 * null for the default route), outbound (tag@vN), member, up, down, ms,
 * why. Returns its length without the NUL. Cannot fail for size >=
 * ACCESS_LOG_LINE_MAX. */
size_t access_log_format(const access_log_entry *e, int format, char *out, size_t size);

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

/* [log] access_end: whether flows also get their end line. Set by the main
 * thread (start, reload); read by any. */
void access_log_set_end(bool on);

/* The log is on and writes end lines. */
bool access_log_end_enabled(void);

/* Formats e in the log's format (log_get_format) and writes it with one
 * write(2). Any thread. */
void access_log_write(const access_log_entry *e);

/* An open flow's record for its end line: a copy of its open line's fields
 * and the time it opened. Owned by whoever holds the flow's upstream (the
 * endpoint, then the relay), on one worker thread. */
typedef struct access_log_flow access_log_flow;

/* Copies open (event ACCESS_LOG_OPEN) for the end line to come. Returns
 * NULL when end lines are off or memory ran out: the flow then simply has
 * no end line. */
access_log_flow *access_log_flow_new(const access_log_entry *open);

/* Names the balancer member that carries the flow (known after the dial).
 * fl may be NULL. */
void access_log_flow_set_member(access_log_flow *fl, const char *member);

/* Writes fl's end line with the bytes each way and why (NULL:
 * ACCESS_LOG_CLOSED), if the log is still on, and frees fl. fl may be
 * NULL. */
void access_log_flow_end(access_log_flow *fl, uint64_t up, uint64_t down, const char *why);

#endif
