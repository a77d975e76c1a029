/* upgrade.c - the binary upgrade on SIGUSR2: the sockets handed to the new process, its readiness, the old one's drain. */
#include "app/upgrade.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"

extern char **environ;

enum {
	M_STARTING,
	M_BUSY,
	M_DRAINING,
	M_SERVING,
	M_FAILED,
	M_EXIT_STATUS,
	M_SIGNAL,
	M_CANNOT_RUN,
	M_NO_SOCKETS,
	M_NO_MEMORY,
	M_DRAINED,
	M_GRACE,
	M_NEW_EXITED,
	M_PASSED,
	M_BAD_ENV,
	M_READY_FAILED,
	M_TIMED_OUT,
	M_COUNT_
};
static const char *const msgs[M_COUNT_] = {
	[M_STARTING] = "upgrade: SIGUSR2 received; starting %s (pid %d) with %d listening "
		       "socket(s)",
	[M_BUSY] = "upgrade: SIGUSR2 ignored: an upgrade is under way",
	[M_DRAINING] = "upgrade: SIGUSR2 ignored: this process drains after an upgrade",
	[M_SERVING] = "upgrade: new process %d is serving; this process stops accepting and drains",
	[M_FAILED] = "upgrade: the new process failed to start (%s); this process keeps serving",
	[M_EXIT_STATUS] = "exit status %lld",
	[M_SIGNAL] = "killed by signal %d",
	[M_CANNOT_RUN] = "cannot run %s: %s",
	[M_NO_SOCKETS] = "cannot copy the listening sockets: %s",
	[M_NO_MEMORY] = "out of memory",
	[M_DRAINED] = "upgrade: no flow is open any more; this process exits",
	[M_GRACE] = "upgrade: %zu flow(s) still open after %llu s (upgrade_drain_after); closing "
		    "them",
	[M_NEW_EXITED] = "upgrade: new process %d exited (%s)",
	[M_PASSED] = "upgrade: sockets passed by the old process: %zu",
	[M_BAD_ENV] = "upgrade: %s ignored: `%s` is not a list of open descriptors above 2",
	[M_READY_FAILED] = "upgrade: cannot tell the old process this one serves: %s",
	[M_TIMED_OUT] = "not serving after %llu s, killed",
};

/* ---- the new process ---- */

/* The readiness pipe's write end, -1 when no old process waits: set once
 * at the start by the control thread, which alone reads it. */
static int ready_fd = -1;

/* Parses "5,6,7" into fds (each checked open and made close-on-exec);
 * returns how many, or 0 with nothing taken when the text is not that.
 * The old process maps them above stderr: a 0, 1 or 2 is a mistake, and
 * one closed here would hand stdio's number to the next socket. */
static size_t parse_fds(const char *text, int *fds, size_t max)
{
	size_t n = 0;
	const char *p = text;
	while (*p && n < max) {
		char *end;
		errno = 0;
		long v = strtol(p, &end, 10);
		if (errno || end == p || v <= STDERR_FILENO || v > INT_MAX || (*end && *end != ',') ||
		    fcntl((int)v, F_SETFD, FD_CLOEXEC) < 0)
			return 0;
		fds[n++] = (int)v;
		p = *end ? end + 1 : end;
	}
	return n;
}

size_t upgrade_passed_fds(int *fds, size_t max)
{
	const char *list = getenv(UPGRADE_ENV_FDS), *ready = getenv(UPGRADE_ENV_READY);
	size_t n = 0;
	if (list && *list && (n = parse_fds(list, fds, max)) == 0)
		log_warn("app", msgs[M_BAD_ENV], UPGRADE_ENV_FDS, list);
	int r;
	if (ready && (parse_fds(ready, &r, 1) == 1))
		ready_fd = r;
	else if (ready)
		log_warn("app", msgs[M_BAD_ENV], UPGRADE_ENV_READY, ready);
	(void)unsetenv(UPGRADE_ENV_FDS);
	(void)unsetenv(UPGRADE_ENV_READY);
	if (list || ready)
		log_info("app", msgs[M_PASSED], n);
	return n;
}

bool upgrade_awaited(void) { return ready_fd >= 0; }

void upgrade_tell_ready(void)
{
	if (ready_fd < 0)
		return;
	ssize_t w;
	do
		w = write(ready_fd, "1", 1);
	while (w < 0 && errno == EINTR);
	if (w != 1)
		log_warn("app", msgs[M_READY_FAILED], strerror(errno));
	close(ready_fd);
	ready_fd = -1;
}

/* ---- the old process ---- */

enum { IDLE, STARTING, DRAINING };

/* One start of the new binary. */
typedef struct child {
	uv_process_t proc;
	uv_pipe_t ready;    /* the read end of its readiness pipe */
	struct upgrader *u; /* NULL once the upgrader is gone or done with it */
	int *fds;           /* owned: the copies passed, closed once the outcome is known */
	size_t n_fds;
	int open_handles;
	bool proc_init; /* uv_spawn ran: proc needs closing */
	bool served, eof, exited;
	bool timed_out;      /* killed by the start timeout: its exit says so */
	uint64_t timeout_s;  /* [policy] upgrade_start_timeout when it started */
	int64_t status;
	int signal;
	char buf[8];
} child;

struct upgrader {
	uv_loop_t *loop;
	etm_supervisor *sup;  /* borrowed */
	char *const *argv;    /* borrowed: main's */
	char exe[PATH_MAX];   /* this process's executable, as it was at the start */
	upgrade_serving_fn serving;
	void *data;
	int state;
	child *c; /* the start under way, or the new process serving */
	uv_timer_t start;  /* the start timeout: runs while STARTING, until the byte or a failure */
	uv_timer_t drain;
	uint64_t deadline; /* loop time the drain gives up at */
	int open_handles;  /* start and drain: freed when both have closed */
};

static void close_fds(child *c)
{
	for (size_t i = 0; i < c->n_fds; i++)
		close(c->fds[i]);
	free(c->fds);
	c->fds = NULL;
	c->n_fds = 0;
}

static void child_closed(uv_handle_t *h)
{
	child *c = h->data;
	if (--c->open_handles > 0)
		return;
	close_fds(c);
	free(c);
}

/* The upgrader lets go of c: its handles close, then it is freed. */
static void child_release(child *c)
{
	if (c->u && c->u->c == c)
		c->u->c = NULL;
	c->u = NULL;
	if (!uv_is_closing((uv_handle_t *)&c->ready))
		uv_close((uv_handle_t *)&c->ready, child_closed);
	if (c->proc_init && !uv_is_closing((uv_handle_t *)&c->proc))
		uv_close((uv_handle_t *)&c->proc, child_closed);
}

static void status_text(const child *c, char *out, size_t size)
{
	if (c->signal)
		snprintf(out, size, msgs[M_SIGNAL], c->signal);
	else
		snprintf(out, size, msgs[M_EXIT_STATUS], (long long)c->status);
}

static void start_failed(child *c, const char *why)
{
	upgrader *u = c->u;
	log_error("app", msgs[M_FAILED], why);
	uv_timer_stop(&u->start);
	u->state = IDLE;
	child_release(c);
}

static void on_drain_tick(uv_timer_t *t)
{
	upgrader *u = t->data;
	size_t open = etm_supervisor_open_flows(u->sup);
	if (open && uv_now(u->loop) < u->deadline)
		return;
	if (open)
		log_info("app", msgs[M_GRACE], open,
		         (unsigned long long)etm_supervisor_upgrade_drain_after(u->sup));
	else
		log_info("app", "%s", msgs[M_DRAINED]);
	uv_timer_stop(t);
	uv_stop(u->loop); /* the caller stops the engine, closing what is left */
}

static void served(child *c)
{
	upgrader *u = c->u;
	log_info("app", msgs[M_SERVING], c->proc.pid);
	uv_timer_stop(&u->start);
	close_fds(c); /* the new process has its own */
	u->state = DRAINING;
	etm_supervisor_stop_accepting(u->sup);
	u->serving(u->data);
	u->deadline = uv_now(u->loop) + etm_supervisor_upgrade_drain_after(u->sup) * 1000;
	uv_timer_start(&u->drain, on_drain_tick, 0, UPGRADE_DRAIN_POLL_MS);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
	(void)hint;
	child *c = h->data;
	*buf = uv_buf_init(c->buf, sizeof c->buf);
}

/* The byte says it serves; an end of file without it says it will not
 * (the exit, which closes the pipe, tells why). */
static void on_ready(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	(void)buf;
	child *c = s->data;
	if (nread == 0)
		return;
	uv_read_stop(s);
	uv_close((uv_handle_t *)s, child_closed);
	if (!c->u)
		return;
	if (nread > 0) {
		c->served = true;
		served(c);
		return;
	}
	c->eof = true;
	if (c->exited) {
		char why[64];
		status_text(c, why, sizeof why);
		start_failed(c, why);
	}
}

static void on_child_exit(uv_process_t *p, int64_t status, int signal)
{
	child *c = p->data;
	c->exited = true;
	c->status = status;
	c->signal = signal;
	char why[64];
	status_text(c, why, sizeof why);
	if (!c->u) {
		uv_close((uv_handle_t *)p, child_closed);
	} else if (c->served) {
		/* the service is its now; this process drains on regardless */
		log_warn("app", msgs[M_NEW_EXITED], p->pid, why);
		child_release(c);
	} else if (c->timed_out) {
		snprintf(why, sizeof why, msgs[M_TIMED_OUT], (unsigned long long)c->timeout_s);
		start_failed(c, why);
	} else if (c->eof) {
		start_failed(c, why);
	}
	/* else the pipe's end of file follows, and decides */
}

/* The byte may be waiting unread: the loop runs due timers before it polls,
 * so a process that became ready just now must not be killed for being
 * late. True when the byte was there (the pipe is non-blocking). */
static bool byte_waiting(child *c)
{
	uv_os_fd_t fd;
	if (uv_is_closing((uv_handle_t *)&c->ready) || uv_fileno((uv_handle_t *)&c->ready, &fd))
		return false;
	ssize_t n;
	do
		n = read(fd, c->buf, sizeof c->buf);
	while (n < 0 && errno == EINTR);
	return n > 0;
}

/* upgrade_start_timeout has passed without the byte: the new process is
 * hung, or too slow to be trusted with the service. SIGKILL, not SIGTERM:
 * a hung process may not run its handler. The failure is logged from the
 * exit callback, once the kill is reaped (proc stays open until then:
 * closed earlier, nothing would wait for the child, and it would stay a
 * zombie). */
static void on_start_timeout(uv_timer_t *t)
{
	upgrader *u = t->data;
	child *c = u->c;
	if (!c || u->state != STARTING)
		return;
	bool ready = byte_waiting(c);
	if (!uv_is_closing((uv_handle_t *)&c->ready)) {
		uv_read_stop((uv_stream_t *)&c->ready);
		uv_close((uv_handle_t *)&c->ready, child_closed);
	}
	if (ready) {
		c->served = true;
		served(c);
		return;
	}
	if (c->exited) { /* reaped, but the pipe stays open: something it started holds it */
		char why[64];
		status_text(c, why, sizeof why);
		start_failed(c, why);
		return;
	}
	c->timed_out = true;
	/* ESRCH only: it has exited and its exit callback is on its way */
	(void)uv_process_kill(&c->proc, SIGKILL);
}

/* The environment of the new process: this one's, with the two variables
 * set to fds_var and ready_var. NULL when memory runs out. */
static char **child_env(char *fds_var, char *ready_var)
{
	size_t n = 0;
	while (environ[n])
		n++;
	char **env = calloc(n + 3, sizeof *env);
	if (!env)
		return NULL;
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "ETM_UPGRADE_", 12) != 0)
			env[k++] = environ[i];
	env[k++] = fds_var;
	env[k++] = ready_var;
	return env;
}

/* Moves *fd to a descriptor at least low (close-on-exec still): the child
 * maps each one to a slot below low, and a source that is another's
 * target could be overwritten before it is mapped. Returns 0 or -errno. */
static int move_above(int *fd, int low)
{
	if (*fd >= low)
		return 0;
	int moved = fcntl(*fd, F_DUPFD_CLOEXEC, low);
	if (moved < 0)
		return -errno;
	close(*fd);
	*fd = moved;
	return 0;
}

/* Starts the new binary with c's sockets as descriptors 3.. and the pipe's
 * write end *wfd after them. Returns 0 or a libuv error. */
static int spawn(upgrader *u, child *c, int *wfd)
{
	size_t n = c->n_fds;
	int low = (int)n + 4, moved = move_above(wfd, low);
	for (size_t i = 0; i < n && moved == 0; i++)
		moved = move_above(&c->fds[i], low);
	if (moved)
		return moved;
	/* "ETM_UPGRADE_FDS=" and up to 11 characters a descriptor */
	size_t fds_size = sizeof UPGRADE_ENV_FDS + 1 + n * 12;
	char *fds_var = malloc(fds_size), ready_var[64];
	uv_stdio_container_t *io = calloc(n + 4, sizeof *io);
	char **env = NULL;
	int rc = UV_ENOMEM;
	if (!fds_var || !io)
		goto out;
	size_t len = (size_t)snprintf(fds_var, fds_size, "%s=", UPGRADE_ENV_FDS);
	io[0].flags = UV_IGNORE;
	for (int i = 1; i <= 2; i++) /* it logs where this process does */
		io[i] = (uv_stdio_container_t){.flags = UV_INHERIT_FD, .data.fd = i};
	for (size_t i = 0; i < n; i++) {
		io[3 + i] = (uv_stdio_container_t){.flags = UV_INHERIT_FD, .data.fd = c->fds[i]};
		len += (size_t)snprintf(fds_var + len, fds_size - len, i ? ",%zu" : "%zu", 3 + i);
	}
	io[3 + n] = (uv_stdio_container_t){.flags = UV_INHERIT_FD, .data.fd = *wfd};
	snprintf(ready_var, sizeof ready_var, "%s=%zu", UPGRADE_ENV_READY, 3 + n);
	env = child_env(fds_var, ready_var);
	if (!env)
		goto out;
	uv_process_options_t opts = {
		.exit_cb = on_child_exit,
		.file = u->exe,
		.args = (char **)u->argv,
		.env = env,
		.stdio_count = (int)(n + 4),
		.stdio = io,
	};
	c->proc.data = c;
	rc = uv_spawn(u->loop, &c->proc, &opts);
	c->open_handles++; /* initialised even when the spawn failed: closed either way */
	c->proc_init = true;
out:
	free(env);
	free(io);
	free(fds_var);
	return rc;
}

upgrader *upgrader_new(uv_loop_t *loop, etm_supervisor *sup, char *const *argv,
                       upgrade_serving_fn serving, void *data)
{
	upgrader *u = calloc(1, sizeof *u);
	if (!u)
		return NULL;
	*u = (upgrader){.loop = loop, .sup = sup, .argv = argv, .serving = serving, .data = data};
	ssize_t n = readlink("/proc/self/exe", u->exe, sizeof u->exe - 1);
	if (n > 0)
		u->exe[n] = '\0';
	else /* no /proc: the name it was started by, found on PATH as then */
		snprintf(u->exe, sizeof u->exe, "%s", argv[0]);
	uv_timer_init(loop, &u->start);
	u->start.data = u;
	uv_timer_init(loop, &u->drain);
	u->drain.data = u;
	u->open_handles = 2;
	return u;
}

/* A child for this attempt, with copies of every listening socket and
 * its pipe's read end open; NULL with the reason in why. */
static child *child_new(upgrader *u, int *wfd, char *why, size_t why_size)
{
	child *c = calloc(1, sizeof *c);
	int p[2];
	if (c)
		c->fds = calloc(ETM_INHERITED_MAX, sizeof *c->fds);
	if (!c || !c->fds) {
		snprintf(why, why_size, "%s", msgs[M_NO_MEMORY]);
		goto fail;
	}
	int n = etm_supervisor_listen_fds(u->sup, c->fds, ETM_INHERITED_MAX);
	if (n < 0) {
		snprintf(why, why_size, msgs[M_NO_SOCKETS], strerror(-n));
		goto fail;
	}
	c->n_fds = (size_t)n;
	int rc = uv_pipe(p, 0, 0); /* both close-on-exec: spawn maps the write end */
	if (rc) {
		snprintf(why, why_size, msgs[M_NO_SOCKETS], uv_strerror(rc));
		goto fail;
	}
	uv_pipe_init(u->loop, &c->ready, 0);
	c->ready.data = c;
	c->open_handles = 1;
	if ((rc = uv_pipe_open(&c->ready, p[0])) != 0) {
		close(p[0]);
		close(p[1]);
		snprintf(why, why_size, msgs[M_NO_SOCKETS], uv_strerror(rc));
		uv_close((uv_handle_t *)&c->ready, child_closed);
		return NULL;
	}
	c->u = u;
	*wfd = p[1];
	return c;
fail:
	if (c && c->fds)
		close_fds(c);
	free(c);
	return NULL;
}

void upgrader_start(upgrader *u)
{
	if (u->state != IDLE) {
		log_warn("app", "%s", msgs[u->state == STARTING ? M_BUSY : M_DRAINING]);
		return;
	}
	char why[PATH_MAX + 64];
	int wfd;
	child *c = child_new(u, &wfd, why, sizeof why);
	if (!c) {
		log_error("app", msgs[M_FAILED], why);
		return;
	}
	u->c = c;
	u->state = STARTING;
	int rc = spawn(u, c, &wfd);
	close(wfd); /* the new process's now: its exit closes the pipe */
	if (rc == 0)
		rc = uv_read_start((uv_stream_t *)&c->ready, on_alloc, on_ready);
	if (rc) {
		snprintf(why, sizeof why, msgs[M_CANNOT_RUN], u->exe, uv_strerror(rc));
		start_failed(c, why);
		return;
	}
	c->timeout_s = etm_supervisor_upgrade_start_timeout(u->sup);
	uv_timer_start(&u->start, on_start_timeout, c->timeout_s * 1000, 0);
	log_info("app", msgs[M_STARTING], u->exe, c->proc.pid, (int)c->n_fds);
}

bool upgrader_draining(const upgrader *u) { return u && u->state == DRAINING; }

static void upgrader_closed(uv_handle_t *h)
{
	upgrader *u = h->data;
	if (--u->open_handles == 0)
		free(u);
}

void upgrader_del(upgrader *u)
{
	if (!u)
		return;
	/* a stop while the new process starts stops that start too */
	if (u->c && u->state == STARTING && u->c->proc_init && !u->c->exited)
		(void)uv_process_kill(&u->c->proc, SIGTERM);
	if (u->c)
		child_release(u->c);
	uv_close((uv_handle_t *)&u->start, upgrader_closed);
	uv_close((uv_handle_t *)&u->drain, upgrader_closed);
}
