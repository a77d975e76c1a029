/* fanout.c - route every datagram on its own; keep one sub-link per target (per target and destination for one-destination links), most recent last. */
#include "outbound/fanout.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"

enum { MSG_OPEN_FAILED, MSG_SUB_ENDED, MSG_TOO_MANY_WAITING, MSG_EVICTED, MSG_COUNT_ };
static const char *const msgs[MSG_COUNT_] = {
	[MSG_OPEN_FAILED] = "udp fan-out: opening an outbound failed: %s",
	[MSG_SUB_ENDED] = "udp fan-out: a sub-link ended: %s",
	[MSG_TOO_MANY_WAITING] = "udp fan-out: dropping a datagram: %d are waiting for an open",
	[MSG_EVICTED] = "udp fan-out: closing the least recently used sub-link: %d are open",
};

typedef struct fanout fanout;

/* A sub-link: what it forwards to the fan-out carries this as its ud. Its
 * key is id, and dest too when one_dest is set. */
typedef struct sub {
	fanout *fo;
	uint64_t id;
	bool one_dest; /* the link reaches only dest (env route's one_dest) */
	addr_dest dest; /* with one_dest: the destination it was opened for */
	dgram_link *link;
	track_flow *tf; /* owned: its record, NULL when untracked */
} sub;

typedef struct waiting {
	addr_dest to;
	size_t len;
	uint8_t *data; /* owned copy */
} waiting;

struct fanout {
	dgram_link base;
	const fanout_env_ops *ops;
	void *env;
	const dgram_handlers *h;
	void *ud;
	bool closed;

	/* subs[0] is the least recently sent-to or opened */
	sub *subs[FANOUT_MAX_SUBS + 1];
	size_t n_subs;

	/* the single open in flight */
	bool opening;
	uint64_t opening_id;
	sub *opening_sub;
	connect_pending *pending;
	waiting first; /* the datagram that started the open */
	waiting queue[FANOUT_MAX_WAITING];
	size_t n_queue;
	bool in_callback; /* open reported before returning */
};

static void sub_recv(const addr_dest *from, uint8_t *data, size_t len, void *ud);

/* The sub-link's user has no room for len more bytes that way (up: sent)
 * now: the datagram is dropped, as UDP policing does. */
static bool over_rate(const sub *s, bool up, size_t len)
{
	principal *p = s->tf ? s->tf->who : NULL;
	if (!p)
		return false;
	principal_bucket *b = up ? &p->up : &p->down;
	return principal_limited(b) && !principal_try(b, len, track_clock_ms(s->tf));
}
static void sub_end(void *ud, const char *why);
static const dgram_handlers sub_handlers = {.recv = sub_recv, .end = sub_end};

/* A one-destination link's replies carry no address of their own: they
 * come from the destination the sub-link was opened for. */
static void sub_recv(const addr_dest *from, uint8_t *data, size_t len, void *ud)
{
	sub *s = ud;
	if (s->fo->closed)
		return;
	if (s->tf) {
		if (over_rate(s, false, len))
			return; /* policed: UDP drops what is over the rate */
		s->tf->bytes[1] += len;
	}
	s->fo->h->recv(s->one_dest ? &s->dest : from, data, len, s->fo->ud);
}

/* Closes sub-link i; its record ends with why (NULL: closed). */
static void remove_at(fanout *fo, size_t i, const char *why)
{
	sub *s = fo->subs[i];
	memmove(&fo->subs[i], &fo->subs[i + 1], (fo->n_subs - i - 1) * sizeof fo->subs[0]);
	fo->n_subs--;
	if (s->link)
		s->link->ops->close(s->link);
	track_end(s->tf, why);
	free(s);
}

/* A kill of one sub-link's flow (tracker.h): that sub-link goes. */
static void sub_kill(void *ud, const char *why)
{
	sub *s = ud;
	fanout *fo = s->fo;
	log_debug("outbound", msgs[MSG_SUB_ENDED], why);
	for (size_t i = 0; i < fo->n_subs; i++)
		if (fo->subs[i] == s) {
			remove_at(fo, i, why);
			return;
		}
}

/* Sends on s, counting what went in its record. */
static int sub_send(sub *s, const addr_dest *to, const uint8_t *data, size_t len)
{
	if (over_rate(s, true, len))
		return -1; /* policed */
	int rc = s->link->ops->send_to(s->link, to, data, len);
	if (rc == 0 && s->tf)
		s->tf->bytes[0] += len;
	return rc;
}

/* A sub-link's receive failed: only that sub-link goes. */
static void sub_end(void *ud, const char *why)
{
	sub *s = ud;
	fanout *fo = s->fo;
	log_debug("outbound", msgs[MSG_SUB_ENDED], why ? why : "?");
	for (size_t i = 0; i < fo->n_subs; i++)
		if (fo->subs[i] == s) {
			remove_at(fo, i, why);
			return;
		}
}

/* The sub-link a datagram to `to` routed to target id takes: the target's
 * one, or with one_dest its one for that destination. A linear scan over
 * at most FANOUT_MAX_SUBS keys, as the LRU order needs the array anyway. */
static size_t find(const fanout *fo, uint64_t id, bool one_dest, const addr_dest *to)
{
	for (size_t i = 0; i < fo->n_subs; i++)
		if (fo->subs[i]->id == id && (!one_dest || addr_dest_same(&fo->subs[i]->dest, to)))
			return i;
	return SIZE_MAX;
}

/* Moves subs[i] to the back: the most recently sent-to. */
static void touch(fanout *fo, size_t i)
{
	sub *s = fo->subs[i];
	memmove(&fo->subs[i], &fo->subs[i + 1], (fo->n_subs - i - 1) * sizeof fo->subs[0]);
	fo->subs[fo->n_subs - 1] = s;
}

static void push(fanout *fo, sub *s)
{
	fo->subs[fo->n_subs++] = s;
	if (fo->n_subs > FANOUT_MAX_SUBS) {
		log_debug("outbound", msgs[MSG_EVICTED], FANOUT_MAX_SUBS);
		remove_at(fo, 0, FANOUT_EVICTED_TEXT); /* the least recently used */
	}
}

static int route_and_send(fanout *fo, const addr_dest *to, const uint8_t *data, size_t len);
static void drain_queue(fanout *fo);

static void free_waiting(waiting *w)
{
	free(w->data);
	w->data = NULL;
}

/* The open finished: deliver its datagram, then let the waiting ones through. */
static void on_opened(void *oud, dgram_link *link, track_flow *tf, const char *why)
{
	fanout *fo = oud;
	sub *s = fo->opening_sub;
	fo->opening = false;
	fo->opening_sub = NULL;
	fo->pending = NULL;
	waiting first = fo->first;
	fo->first = (waiting){0};
	if (fo->closed) {
		if (link)
			link->ops->close(link);
		track_end(tf, NULL);
		free(s);
		free_waiting(&first);
		return;
	}
	if (!link) {
		/* a failed open drops its own datagram only; the next one retries */
		log_debug("outbound", msgs[MSG_OPEN_FAILED], why ? why : "?");
		free(s);
	} else {
		s->link = link;
		s->tf = tf;
		if (tf)
			track_set_kill(tf, sub_kill, s);
		push(fo, s);
		(void)sub_send(s, &first.to, first.data, first.len);
	}
	free_waiting(&first);
	if (!fo->in_callback) /* else the sender drains after open returns */
		drain_queue(fo);
}

/* Datagrams that waited go in order; one of them may start the next open,
 * and the rest keep waiting behind it. */
static void drain_queue(fanout *fo)
{
	while (fo->n_queue && !fo->opening && !fo->closed) {
		waiting w = fo->queue[0];
		memmove(&fo->queue[0], &fo->queue[1], (fo->n_queue - 1) * sizeof fo->queue[0]);
		fo->n_queue--;
		(void)route_and_send(fo, &w.to, w.data, w.len);
		free_waiting(&w);
	}
}

static int hold(waiting *w, const addr_dest *to, const uint8_t *data, size_t len)
{
	w->data = malloc(len ? len : 1);
	if (!w->data)
		return -1;
	memcpy(w->data, data, len);
	w->len = len;
	w->to = *to;
	return 0;
}

static int route_and_send(fanout *fo, const addr_dest *to, const uint8_t *data, size_t len)
{
	const void *target = NULL;
	bool one_dest = false;
	uint64_t id = fo->ops->route(fo->env, to, &target, &one_dest);
	size_t i = find(fo, id, one_dest, to);
	if (i != SIZE_MAX) {
		touch(fo, i);
		return sub_send(fo->subs[fo->n_subs - 1], to, data, len);
	}
	if (fo->opening) {
		if (fo->n_queue == FANOUT_MAX_WAITING) {
			log_debug("outbound", msgs[MSG_TOO_MANY_WAITING], FANOUT_MAX_WAITING);
			return -1;
		}
		if (hold(&fo->queue[fo->n_queue], to, data, len))
			return -1;
		fo->n_queue++;
		return 0;
	}
	sub *s = calloc(1, sizeof *s);
	if (!s || hold(&fo->first, to, data, len)) {
		free(s);
		return -1;
	}
	s->fo = fo;
	s->id = id;
	s->one_dest = one_dest;
	if (one_dest) {
		s->dest = *to;
		s->dest.network = ADDR_UDP;
	}
	fo->opening = true;
	fo->opening_id = id;
	fo->opening_sub = s;
	fo->in_callback = true;
	connect_pending *p = fo->ops->open(fo->env, target, to, &sub_handlers, s, on_opened, fo);
	fo->in_callback = false;
	if (fo->opening)
		fo->pending = p;
	return 0;
}

static int fo_send_to(dgram_link *l, const addr_dest *to, const uint8_t *data, size_t len)
{
	fanout *fo = (fanout *)l;
	if (fo->closed)
		return -1;
	int rc = route_and_send(fo, to, data, len);
	drain_queue(fo); /* an open that finished inside the call */
	return rc;
}

static void fo_close(dgram_link *l)
{
	fanout *fo = (fanout *)l;
	fo->closed = true;
	while (fo->n_subs)
		remove_at(fo, fo->n_subs - 1, NULL);
	for (size_t i = 0; i < fo->n_queue; i++)
		free_waiting(&fo->queue[i]);
	fo->n_queue = 0;
	if (fo->opening) {
		fo->pending->cancel(fo->pending);
		free(fo->opening_sub);
		free_waiting(&fo->first);
	}
	if (fo->ops->release)
		fo->ops->release(fo->env);
	free(fo);
}

static const dgram_link_ops fanout_ops = {.send_to = fo_send_to, .close = fo_close};

dgram_link *fanout_new(const fanout_env_ops *ops, void *env, const dgram_handlers *h, void *ud)
{
	fanout *fo = calloc(1, sizeof *fo);
	if (!fo)
		return NULL;
	fo->base.ops = &fanout_ops;
	fo->ops = ops;
	fo->env = env;
	fo->h = h;
	fo->ud = ud;
	return &fo->base;
}

size_t fanout_drain(dgram_link *l, uint64_t origin, const char *why)
{
	fanout *fo = (fanout *)l;
	size_t n = 0;
	for (size_t i = fo->n_subs; i-- > 0;)
		if (fo->subs[i]->link && fo->subs[i]->link->origin == origin) {
			log_debug("outbound", msgs[MSG_SUB_ENDED], why);
			remove_at(fo, i, why);
			n++;
		}
	return n;
}

size_t fanout_sub_count(const dgram_link *l) { return ((const fanout *)l)->n_subs; }
