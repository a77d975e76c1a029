/* splice.c - socket -> pipe -> socket with splice(2), driven by level-triggered uv_poll. */
#include "runtime/splice.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

/* Chunks one direction moves per wake-up before yielding to other flows:
 * 16 x 64 KiB = 1 MiB, so one fast flow cannot starve a worker's loop. The
 * poll is level-triggered, so what is left is picked up at once. */
#define SPLICE_BURST 16

typedef struct sdir {
	int src, dst;
	int pr, pw;     /* the pipe: read end, write end */
	size_t in_pipe; /* bytes spliced in and not yet out */
	uint64_t out;   /* bytes spliced out to dst */
	bool src_eof;
	bool blocked;   /* dst said EAGAIN with bytes in the pipe */
	bool held;      /* splicer_hold: src is not read */
	size_t chunk;   /* the most one splice reads from src (splicer_set_chunk) */
	bool shut;      /* dst's write side shut down after src's EOF */
} sdir;

struct splicer {
	int fd[2];
	uv_poll_t poll[2];
	int events[2]; /* what each poll watches now */
	sdir d[2];     /* [0] fd[0] -> fd[1], [1] fd[1] -> fd[0] */
	const splicer_events *ev;
	void *ud;
	int open_polls;
	bool stopped;
};

static void on_poll_closed(uv_handle_t *h)
{
	splicer *s = h->data;
	if (--s->open_polls > 0)
		return;
	for (int i = 0; i < 2; i++) {
		close(s->fd[i]);
		close(s->d[i].pr);
		close(s->d[i].pw);
	}
	free(s);
}

void splicer_stop(splicer *s)
{
	if (s->stopped)
		return;
	s->stopped = true;
	for (int i = 0; i < 2; i++)
		uv_close((uv_handle_t *)&s->poll[i], on_poll_closed);
}

void splicer_bytes(const splicer *s, uint64_t *ab, uint64_t *ba)
{
	*ab = s->d[0].out;
	*ba = s->d[1].out;
}

static void end(splicer *s, int err)
{
	if (s->stopped)
		return;
	const splicer_events *ev = s->ev;
	void *ud = s->ud;
	splicer_stop(s);
	ev->on_end(ud, err);
}

/* Moves what it can in one direction. Returns 0, or a negative errno. */
static int pump(splicer *s, sdir *d)
{
	bool moved = false;
	int rc = 0;
	for (int burst = 0;;) {
		if (d->in_pipe > 0) {
			ssize_t m = splice(d->pr, NULL, d->dst, NULL, d->in_pipe,
			                   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
			if (m > 0) {
				d->in_pipe -= (size_t)m;
				d->out += (uint64_t)m;
				moved = true;
				continue;
			}
			if (m < 0 && errno == EINTR)
				continue;
			if (m < 0 && errno == EAGAIN) {
				d->blocked = true;
				break;
			}
			rc = m < 0 ? -errno : -EPIPE;
			break;
		}
		d->blocked = false;
		if (d->src_eof) {
			if (!d->shut) {
				d->shut = true;
				shutdown(d->dst, SHUT_WR);
			}
			break;
		}
		/* Yield with the pipe empty: src stays readable (level-triggered)
		 * and brings this direction back on the next loop turn. */
		if (burst == SPLICE_BURST || d->held)
			break;
		/* the pipe is empty here, so EAGAIN can only mean "src has no data" */
		ssize_t n = splice(d->src, NULL, d->pw, NULL, d->chunk,
		                   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		if (n > 0) {
			d->in_pipe += (size_t)n;
			moved = true;
			burst++;
			if (s->ev->on_read) /* may hold d: the next round stops */
				s->ev->on_read(s->ud, (int)(d - s->d), (uint64_t)n);
			continue;
		}
		if (n == 0) {
			d->src_eof = true;
			continue;
		}
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			rc = -errno;
		break;
	}
	if (moved && s->ev->on_activity)
		s->ev->on_activity(s->ud);
	return rc;
}

static void on_poll(uv_poll_t *h, int status, int events);

/* Watches what each socket is needed for: readable while its direction can
 * take more (pipe empty, no EOF yet), writable while the other direction is
 * blocked on it. */
static void rearm(splicer *s)
{
	for (int i = 0; i < 2; i++) {
		int want = 0;
		if (!s->d[i].src_eof && s->d[i].in_pipe == 0 && !s->d[i].held)
			want |= UV_READABLE;
		if (s->d[1 - i].blocked)
			want |= UV_WRITABLE;
		if (want == s->events[i])
			continue;
		s->events[i] = want;
		if (want)
			uv_poll_start(&s->poll[i], want, on_poll);
		else
			uv_poll_stop(&s->poll[i]);
	}
}

static void on_poll(uv_poll_t *h, int status, int events)
{
	(void)events;
	splicer *s = h->data;
	if (status < 0) {
		end(s, status);
		return;
	}
	for (int i = 0; i < 2; i++) {
		int rc = pump(s, &s->d[i]);
		if (rc) {
			end(s, uv_translate_sys_error(-rc));
			return;
		}
	}
	if (s->d[0].shut && s->d[1].shut) {
		end(s, 0);
		return;
	}
	rearm(s);
}

void splicer_hold(splicer *s, int dir, bool on)
{
	if (s->stopped || s->d[dir].held == on)
		return;
	s->d[dir].held = on;
	rearm(s);
}

void splicer_set_chunk(splicer *s, int dir, size_t max)
{
	s->d[dir].chunk = max && max < SPLICE_CHUNK ? max : SPLICE_CHUNK;
}

splicer *splicer_start(uv_loop_t *loop, int a, int b, const splicer_events *ev, void *ud)
{
	splicer *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	int p0[2], p1[2];
	if (pipe2(p0, O_NONBLOCK | O_CLOEXEC)) {
		free(s);
		return NULL;
	}
	if (pipe2(p1, O_NONBLOCK | O_CLOEXEC)) {
		close(p0[0]);
		close(p0[1]);
		free(s);
		return NULL;
	}
	s->fd[0] = a;
	s->fd[1] = b;
	s->d[0] = (sdir){.src = a, .dst = b, .pr = p0[0], .pw = p0[1], .chunk = SPLICE_CHUNK};
	s->d[1] = (sdir){.src = b, .dst = a, .pr = p1[0], .pw = p1[1], .chunk = SPLICE_CHUNK};
	s->ev = ev;
	s->ud = ud;
	for (int i = 0; i < 2; i++) {
		uv_poll_init(loop, &s->poll[i], s->fd[i]);
		s->poll[i].data = s;
		s->open_polls++;
	}
	rearm(s);
	return s;
}
