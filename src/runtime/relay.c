/* relay.c - both directions between two endpoints, one set of close and half-close rules, and the move to splice(2). */
#include "runtime/relay.h"

#include <stdlib.h>
#include <unistd.h>

#include "runtime/pool.h"
#include "runtime/splice.h"

struct relay {
	worker *w;
	endpoint *e[2]; /* owned until the splice hand-off or the end */
	splicer *sp;    /* after the hand-off */
	uv_timer_t idle; /* its data points back here; the relay is freed when it closes */
	uint64_t last_active;
	const relay_events *ev;
	void *ud;
	relay_config cfg;
	bool ended;
	uint64_t moved;     /* bytes relayed both ways */
	uint64_t since_try; /* ... since the last splice attempt */
	/* After the splice hand-off: the flow's record, taken from the
	 * upstream b with the bytes it had counted (up: to b, down: from b);
	 * the splicer's are added when it is read. */
	track_flow *tf;
	/* The user's limits (principal.h), when the flow has a user: a
	 * direction over its rate stops reading until held_until[i]. */
	principal *who; /* a reference */
	const track_flow *tf_clock; /* b's record (tf's after a hand-off): its clock charges */
	uint64_t held_until[2]; /* uv_now ms; 0: not held. [0] e[0] to e[1] (up) */
	uv_timer_t hold;        /* inited only with who */
	int handles;            /* open: idle, and hold with who */
};

static void free_relay(uv_handle_t *h)
{
	relay *r = h->data;
	if (--r->handles == 0) {
		principal_release(r->who);
		free(r);
	}
}

/* The flow's record ends with why: now when the relay holds it (after a
 * splice, with the splicer's bytes), else at the upstream's close. */
static void end_track(relay *r, const char *why)
{
	if (r->tf) {
		track_end(r->tf, why);
		r->tf = NULL;
	} else if (r->e[1]) {
		endpoint_set_end_why(r->e[1], why);
	}
}

/* Closes what is open; the memory goes with the timer's close. */
static void stop(relay *r, bool flush)
{
	r->ended = true;
	if (r->tf)
		end_track(r, NULL);
	if (r->sp) {
		splicer_stop(r->sp);
		r->sp = NULL;
	}
	for (int i = 0; i < 2; i++)
		if (r->e[i]) {
			endpoint_close(r->e[i], flush);
			r->e[i] = NULL;
		}
	if (r->who)
		uv_close((uv_handle_t *)&r->hold, free_relay);
	uv_close((uv_handle_t *)&r->idle, free_relay);
}

static void finish(relay *r, const char *why, bool flush)
{
	end_track(r, why);
	stop(r, flush);
	r->ev->on_end(r->ud, why);
}

static void touch(relay *r)
{
	r->last_active = uv_now(worker_loop(r->w));
	if (r->ev->on_activity)
		r->ev->on_activity(r->ud);
}

static void on_idle(uv_timer_t *t)
{
	relay *r = t->data;
	uint64_t quiet = uv_now(t->loop) - r->last_active;
	if (quiet >= r->cfg.idle_ms) {
		finish(r, RELAY_IDLE_TEXT, false);
		return;
	}
	uv_timer_start(t, on_idle, r->cfg.idle_ms - quiet, 0);
}

static bool held(const relay *r, int i) { return r->held_until[i] != 0; }

static void on_hold_over(uv_timer_t *t);

/* n bytes went from e[i]: charged to the user's bucket that way; over its
 * rate, e[i] stops being read until the debt is paid. After a splice
 * hand-off a limited direction reads a pool buffer's worth at a time, as
 * the buffered relay does: the last read's debt, which nothing waits for,
 * stays as small as there. */
static void charge(relay *r, int i, uint64_t n)
{
	if (!r->who || n == 0)
		return;
	principal_bucket *b = i == 0 ? &r->who->up : &r->who->down;
	bool limited = principal_limited(b); /* one relaxed load for a user without a limit */
	if (r->sp)
		splicer_set_chunk(r->sp, i, limited ? POOL_BUF_SIZE : 0);
	if (!limited)
		return;
	uint64_t ms = principal_charge(b, n, track_clock_ms(r->tf_clock));
	if (!ms)
		return;
	uint64_t now = uv_now(worker_loop(r->w));
	r->held_until[i] = now + ms;
	if (r->sp)
		splicer_hold(r->sp, i, true);
	uint64_t other = r->held_until[1 - i];
	uint64_t first = other && other < now + ms ? other : now + ms;
	uv_timer_start(&r->hold, on_hold_over, first > now ? first - now : 1, 0);
}

/* x's waiting bytes to y, as far as y takes them. Returns the endpoint
 * that failed, NULL when none did. */
static endpoint *move(relay *r, endpoint *x, endpoint *y, bool *moved)
{
	int dir = x == r->e[0] ? 0 : 1;
	if (held(r, dir))
		return NULL;
	if (endpoint_plain(x) && endpoint_plain(y)) {
		uint8_t *buf;
		size_t off, len;
		/* the read buffer itself is the write: no copy */
		while (endpoint_can_send(y) && endpoint_take_buf(x, &buf, &off, &len)) {
			if (endpoint_send_buf(y, buf, off, len))
				return y;
			r->moved += len;
			r->since_try += len;
			*moved = true;
			charge(r, dir, len);
			if (held(r, dir))
				break;
		}
		return NULL;
	}
	const uint8_t *d;
	size_t n;
	while (endpoint_can_send(y) && (n = endpoint_app_in(x, &d)) > 0) {
		ssize_t k = endpoint_send(y, d, n);
		if (k < 0)
			return y;
		if (k == 0)
			break;
		if (endpoint_app_done(x, (size_t)k))
			return x;
		r->moved += (uint64_t)k;
		*moved = true;
		charge(r, dir, (uint64_t)k);
		if (held(r, dir))
			break;
	}
	return NULL;
}

/* The ends pass on and reads follow the room on the other side. Returns
 * the endpoint that failed, NULL when none did. */
static endpoint *steer(relay *r)
{
	for (int i = 0; i < 2; i++) {
		endpoint *x = r->e[i], *y = r->e[1 - i];
		/* x's end passes on once its bytes are all through */
		if (endpoint_at_eof(x) && endpoint_shutdown(y))
			return y;
		endpoint_want_read(x, endpoint_can_send(y) && !held(r, i));
	}
	return NULL;
}

static bool try_splice(relay *r);

/* A proxy client's framing that has become a pass-through (its request and
 * the server's answer through, nothing queued) is dropped: the endpoint is
 * plain from then on, so the bytes move without a copy and the flow can
 * go to splice(2) as a plain socks -> freedom one does (issue 21). A stack
 * with a layer that changes bytes (TLS, ...) stops the check at it. */
static void unstack(relay *r)
{
	for (int i = 0; i < 2; i++)
		if (!endpoint_plain(r->e[i]))
			(void)endpoint_unstack(r->e[i]);
}

/* Moves what can move both ways, then sets what to read and what to end. */
static void service(relay *r)
{
	bool any = false;
	endpoint *bad = NULL;
	for (int round = 0; round < RELAY_ROUNDS && !bad; round++) {
		bool moved = false;
		for (int i = 0; i < 2 && !bad; i++)
			bad = move(r, r->e[i], r->e[1 - i], &moved);
		any |= moved;
		if (!moved)
			break;
	}
	if (any)
		touch(r);
	/* after the moves: a layer's queues are empty then, if ever */
	if (!bad)
		unstack(r);
	if (bad || (bad = steer(r))) {
		finish(r, endpoint_error(bad), true);
		return;
	}
	if (endpoint_shut_done(r->e[0]) && endpoint_shut_done(r->e[1])) {
		finish(r, NULL, false);
		return;
	}
	if (r->cfg.splice && r->since_try >= RELAY_SPLICE_AFTER)
		(void)try_splice(r);
}

/* A held direction's debt is paid: it reads again. */
static void on_hold_over(uv_timer_t *t)
{
	relay *r = t->data;
	uint64_t now = uv_now(t->loop), next = 0;
	for (int i = 0; i < 2; i++) {
		if (r->held_until[i] && r->held_until[i] <= now) {
			r->held_until[i] = 0;
			if (r->sp)
				splicer_hold(r->sp, i, false);
		}
		if (r->held_until[i] && (!next || r->held_until[i] < next))
			next = r->held_until[i];
	}
	if (next)
		uv_timer_start(t, on_hold_over, next - now, 0);
	if (!r->sp)
		service(r);
}

static void on_readable(void *ud) { service(ud); }
static void on_writable(void *ud) { service(ud); }
static void on_error(void *ud, const char *why) { finish(ud, why, true); }

static const endpoint_events events = {
	.on_readable = on_readable,
	.on_writable = on_writable,
	.on_error = on_error,
};

/* ---- splice ---- */

static void on_splice_activity(void *ud) { touch(ud); }

/* The splicer read n bytes from one side: charged as the buffered relay
 * charges them, so a user's rate holds the direction there too. */
static void on_splice_read(void *ud, int dir, uint64_t n) { charge(ud, dir, n); }

static void on_splice_end(void *ud, int err)
{
	relay *r = ud;
	const char *why = err ? uv_strerror(err) : NULL;
	end_track(r, why); /* the splicer's counts are still readable here */
	r->sp = NULL;    /* it stops itself after this */
	finish(r, why, false);
}

static const splicer_events splice_events = {
	.on_activity = on_splice_activity,
	.on_read = on_splice_read,
	.on_end = on_splice_end,
};

/* The record's bytes beyond the hand-off. */
static void splice_more(void *ud, uint64_t *up, uint64_t *down)
{
	relay *r = ud;
	if (r->sp)
		splicer_bytes(r->sp, up, down);
}

/* A kill after the hand-off. */
static void kill_spliced(void *ud, const char *why) { finish(ud, why, false); }

/* Both ends plain, nothing waiting or in flight, neither end reached: the
 * sockets go to a splicer through duplicates. False (and the buffered
 * relay goes on; another try after as many bytes) when it cannot. A
 * user's flow goes too: the splicer reports what it reads (on_splice_read)
 * and the relay holds a direction over the user's rate, so a limit set
 * later (a reload, the API) still reaches it on its next read. */
static bool try_splice(relay *r)
{
	r->since_try = 0;
	const uint8_t *d;
	for (int i = 0; i < 2; i++) {
		endpoint *x = r->e[i];
		if (!endpoint_plain(x) || !endpoint_idle(x) || endpoint_app_in(x, &d) ||
		    endpoint_at_eof(x) || endpoint_shut_done(x))
			return false;
	}
	int a = endpoint_fd(r->e[0]), b = endpoint_fd(r->e[1]);
	a = a >= 0 ? dup(a) : -1;
	b = b >= 0 ? dup(b) : -1;
	splicer *sp = a >= 0 && b >= 0 ? splicer_start(worker_loop(r->w), a, b, &splice_events, r)
	                               : NULL;
	if (!sp) {
		if (a >= 0)
			close(a);
		if (b >= 0)
			close(b);
		return false;
	}
	r->sp = sp;
	for (int i = 0; i < 2 && r->who; i++) {
		if (principal_limited(i == 0 ? &r->who->up : &r->who->down))
			splicer_set_chunk(sp, i, POOL_BUF_SIZE);
		if (held(r, i)) /* the hold timer runs on: it ends the hold */
			splicer_hold(sp, i, true);
	}
	r->tf = endpoint_take_track(r->e[1]);
	if (r->tf) {
		track_set_more(r->tf, splice_more, r);
		track_set_kill(r->tf, kill_spliced, r);
	}
	for (int i = 0; i < 2; i++) {
		endpoint_close(r->e[i], false);
		r->e[i] = NULL;
	}
	return true;
}

relay *relay_start(worker *w, endpoint *a, endpoint *b, const relay_config *cfg,
                   const relay_events *ev, void *ud)
{
	relay *r = calloc(1, sizeof *r);
	if (!r) {
		endpoint_close(a, false);
		endpoint_close(b, false);
		return NULL;
	}
	*r = (relay){.w = w, .e = {a, b}, .ev = ev, .ud = ud, .cfg = *cfg, .handles = 1};
	uv_timer_init(worker_loop(w), &r->idle);
	r->idle.data = r;
	track_flow *tf = endpoint_track(b);
	if (tf && tf->who) {
		r->who = tf->who;
		r->tf_clock = tf;
		principal_hold(r->who);
		uv_timer_init(worker_loop(w), &r->hold);
		r->hold.data = r;
		r->handles++;
	}
	r->last_active = uv_now(worker_loop(w));
	if (cfg->idle_ms)
		uv_timer_start(&r->idle, on_idle, cfg->idle_ms, 0);
	endpoint_set_events(a, &events, r);
	endpoint_set_events(b, &events, r);
	/* what waits already goes now; an end already read passes on */
	bool moved = false;
	endpoint *bad = move(r, a, b, &moved);
	if (!bad)
		bad = move(r, b, a, &moved);
	if (!bad)
		unstack(r);
	if (bad || steer(r)) {
		relay_stop(r);
		return NULL;
	}
	return r;
}

void relay_stop(relay *r)
{
	if (r && !r->ended)
		stop(r, false);
}

uint64_t relay_bytes(const relay *r) { return r->moved; }

bool relay_spliced(const relay *r) { return r->sp != NULL; }
