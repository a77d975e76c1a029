/* access_log.c - the access log's target, swapped on reload, and its one line per flow. */
#include "base/access_log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/json.h"
#include "base/log.h"

#define OFF (-1)

/* The fd lines go to, OFF when the log is off. Read by any thread, written
 * by the main thread only. */
static _Atomic int cur = OFF;
/* Files this module opened (not fd 2): the current one, and the one it
 * replaced, kept open for one more reload as the grace period. Main thread
 * only. */
static int owned = OFF, retired = OFF;
/* [log] access_end. */
static _Atomic bool end_lines;

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

/* A destination as the line shows it: "-" when unset; a sniffed name has
 * no port. */
static void addr_text(const addr_dest *d, bool port, char *out, size_t size)
{
	if (!d || d->kind == ADDR_NONE)
		snprintf(out, size, "-");
	else if (!port && d->kind == ADDR_DOMAIN)
		snprintf(out, size, "%.*s", (int)d->u.domain.len, d->u.domain.name);
	else
		addr_dest_format(d, out, size);
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

static const char *network(const access_log_entry *e)
{
	return e->dest->network == ADDR_UDP ? "udp" : "tcp";
}

static size_t format_text(const access_log_entry *e, char *out, size_t size, size_t n)
{
	char a[ADDR_TEXT_MAX];
	addr_text(e->source, true, a, sizeof a);
	n = put(out, size, n, "%s %s %s:", a, e->event == ACCESS_LOG_END ? "ended" : "accepted",
	        network(e));
	addr_text(e->dest, true, a, sizeof a);
	n = put(out, size, n, "%s", a);
	if (e->sniffed && e->sniffed->kind != ADDR_NONE) {
		addr_text(e->sniffed, false, a, sizeof a);
		n = put(out, size, n, " sniffed %s", a);
	}
	n = put(out, size, n, " inbound %s", e->inbound ? e->inbound : "-");
	if (e->user)
		n = put(out, size, n, " user %s", e->user);
	if (e->rule < 0)
		n = put(out, size, n, " rule default");
	else
		n = put(out, size, n, " rule #%d", (int)e->rule + 1);
	n = put(out, size, n, " outbound %s@v%llu", e->outbound, e->version);
	if (e->member)
		n = put(out, size, n, " member %s", e->member);
	if (e->event == ACCESS_LOG_END)
		n = put(out, size, n, " up %llu down %llu ms %llu why %s", (unsigned long long)e->up,
		        (unsigned long long)e->down, (unsigned long long)e->ms,
		        e->why ? e->why : ACCESS_LOG_CLOSED);
	return n;
}

/* ,"key":"s" escaped and cut to cap bytes, or ,"key":null for NULL. */
static size_t put_json(char *out, size_t size, size_t n, const char *key, const char *s,
                       size_t cap)
{
	if (!s)
		return put(out, size, n, ",\"%s\":null", key);
	n = put(out, size, n, ",\"%s\":\"", key);
	if (n < size)
		n += json_escape(out + n, size - n < cap + 1 ? size - n : cap + 1, s, strlen(s));
	return put(out, size, n, "\"");
}

#define ADDR_CAP ACCESS_LOG_JSON_ADDR_MAX
#define NAME_CAP ACCESS_LOG_JSON_FIELD_MAX

static size_t format_json(const access_log_entry *e, char *out, size_t size, size_t n)
{
	bool end = e->event == ACCESS_LOG_END;
	n = put(out, size, n, ",\"event\":\"%s\"", end ? "end" : "open");
	char a[ADDR_TEXT_MAX + 4];
	addr_text(e->source, true, a, sizeof a);
	n = put_json(out, size, n, "source", e->source && e->source->kind != ADDR_NONE ? a : NULL,
	             ADDR_CAP);
	int k = snprintf(a, sizeof a, "%s:", network(e));
	addr_text(e->dest, true, a + k, sizeof a - (size_t)k);
	n = put_json(out, size, n, "dest", a, ADDR_CAP);
	bool sniffed = e->sniffed && e->sniffed->kind != ADDR_NONE;
	if (sniffed)
		addr_text(e->sniffed, false, a, sizeof a);
	n = put_json(out, size, n, "sniffed", sniffed ? a : NULL, ADDR_CAP);
	n = put_json(out, size, n, "inbound", e->inbound, NAME_CAP);
	n = put_json(out, size, n, "user", e->user, NAME_CAP);
	if (e->rule < 0)
		n = put(out, size, n, ",\"rule\":null");
	else
		n = put(out, size, n, ",\"rule\":%d", (int)e->rule + 1);
	char ob[ACCESS_LOG_NAME_MAX + 24];
	snprintf(ob, sizeof ob, "%s@v%llu", e->outbound, e->version);
	n = put_json(out, size, n, "outbound", ob, NAME_CAP);
	n = put_json(out, size, n, "member", e->member, NAME_CAP);
	if (end)
		n = put(out, size, n, ",\"up\":%llu,\"down\":%llu,\"ms\":%llu", (unsigned long long)e->up,
		        (unsigned long long)e->down, (unsigned long long)e->ms);
	else
		n = put(out, size, n, ",\"up\":null,\"down\":null,\"ms\":null");
	n = put_json(out, size, n, "why", end ? (e->why ? e->why : ACCESS_LOG_CLOSED) : NULL,
	             NAME_CAP);
	return put(out, size, n, "}");
}

size_t access_log_format(const access_log_entry *e, int format, char *out, size_t size)
{
	char t[LOG_TIME_MAX];
	log_format_time(&e->when, t, sizeof t);
	size_t n;
	if (format == LOG_FORMAT_JSON)
		n = format_json(e, out, size, put(out, size, 0, "{\"time\":\"%s\"", t));
	else
		n = format_text(e, out, size, put(out, size, 0, "%s ", t));
	if (n > size - 2)
		n = size - 2; /* cut, keep room for the newline */
	out[n++] = '\n';
	out[n] = '\0';
	return n;
}

static void write_line(const access_log_entry *e)
{
	int fd = atomic_load(&cur);
	if (fd == OFF)
		return;
	char line[ACCESS_LOG_LINE_MAX];
	size_t len = access_log_format(e, log_get_format(), line, sizeof line);
	/* One write(2) per line and no lock: on an O_APPEND file the kernel
	 * moves to the end and writes under the inode lock, so lines from
	 * workers never interleave; a line is far shorter than PIPE_BUF, so
	 * the same holds when stderr is a pipe. A short or failed write loses
	 * the line: the access log must never stall a flow. */
	ssize_t w = write(fd, line, len);
	(void)w;
}

void access_log_write(const access_log_entry *e) { write_line(e); }

/* ---- the end line's record ---- */

struct access_log_flow {
	access_log_entry e; /* its pointers point into this record */
	struct timespec opened; /* CLOCK_MONOTONIC */
	addr_dest source, dest, sniffed;
	char inbound[ACCESS_LOG_NAME_MAX], user[ACCESS_LOG_NAME_MAX];
	char outbound[ACCESS_LOG_NAME_MAX], member[ACCESS_LOG_NAME_MAX];
};

/* A copy of s in buf (cut), or NULL for NULL. */
static const char *keep(char *buf, size_t size, const char *s)
{
	if (!s)
		return NULL;
	snprintf(buf, size, "%s", s);
	return buf;
}

void access_log_set_end(bool on) { atomic_store(&end_lines, on); }

bool access_log_end_enabled(void) { return atomic_load(&end_lines) && access_log_enabled(); }

access_log_flow *access_log_flow_new(const access_log_entry *open)
{
	if (!access_log_end_enabled())
		return NULL;
	access_log_flow *fl = calloc(1, sizeof *fl);
	if (!fl)
		return NULL;
	clock_gettime(CLOCK_MONOTONIC, &fl->opened);
	fl->e = *open;
	if (open->source) {
		fl->source = *open->source;
		fl->e.source = &fl->source;
	}
	fl->dest = *open->dest;
	fl->e.dest = &fl->dest;
	if (open->sniffed) {
		fl->sniffed = *open->sniffed;
		fl->e.sniffed = &fl->sniffed;
	}
	fl->e.inbound = keep(fl->inbound, sizeof fl->inbound, open->inbound);
	fl->e.user = keep(fl->user, sizeof fl->user, open->user);
	fl->e.outbound = keep(fl->outbound, sizeof fl->outbound, open->outbound);
	fl->e.member = keep(fl->member, sizeof fl->member, open->member);
	return fl;
}

void access_log_flow_set_member(access_log_flow *fl, const char *member)
{
	if (fl)
		fl->e.member = keep(fl->member, sizeof fl->member, member);
}

void access_log_flow_end(access_log_flow *fl, uint64_t up, uint64_t down, const char *why)
{
	if (!fl)
		return;
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	int64_t ms = (int64_t)(now.tv_sec - fl->opened.tv_sec) * 1000 +
	             (now.tv_nsec - fl->opened.tv_nsec) / 1000000;
	fl->e.event = ACCESS_LOG_END;
	fl->e.up = up;
	fl->e.down = down;
	fl->e.ms = ms < 0 ? 0 : (uint64_t)ms;
	fl->e.why = why;
	clock_gettime(CLOCK_REALTIME, &fl->e.when);
	write_line(&fl->e);
	free(fl);
}
