/* tracker.c - one worker's flow table: registration, the end of a flow, the ring of ended ones, usage per name, and kills. */
#include "runtime/tracker.h"

#include <stdlib.h>
#include <string.h>

#include "base/hash.h"

enum { M_NO_MEMORY };
static const char *const msgs[] = {
	[M_NO_MEMORY] = "out of memory",
};

/* One name's usage. */
typedef struct usage {
	char *name; /* owned; NULL: an empty slot */
	uint64_t up, down, total;
} usage;

/* An open-addressing table, grown at three quarters full. */
typedef struct usage_map {
	usage *v;
	size_t cap, n; /* cap a power of two, or 0 */
} usage_map;

struct tracker {
	size_t index;
	uint64_t (*clock_ms)(void);
	uint64_t seq;
	list open; /* oldest first */
	size_t n_open;
	list killing; /* during tracker_kill: flows still to be asked */
	track_flow *closed[TRACK_CLOSED_MAX]; /* a ring */
	size_t closed_head, n_closed;
	uint64_t ended_up, ended_down;
	usage_map by[TRACK_BY_N_];
};

static void copy_name(char *dst, const char *src)
{
	size_t n = src ? strnlen(src, TRACK_NAME_MAX - 1) : 0;
	if (n)
		memcpy(dst, src, n);
	dst[n] = '\0';
}

/* ---- usage by name ---- */

static usage *map_find(usage_map *m, const char *name)
{
	if (!m->cap)
		return NULL;
	size_t len = strlen(name);
	size_t mask = m->cap - 1;
	for (size_t i = hash_fnv32(name, len) & mask;; i = (i + 1) & mask) {
		if (!m->v[i].name || strcmp(m->v[i].name, name) == 0)
			return &m->v[i];
	}
}

static int map_grow(usage_map *m)
{
	size_t cap = m->cap ? m->cap * 2 : 16;
	usage *v = calloc(cap, sizeof *v);
	if (!v)
		return -1;
	usage_map n = {.v = v, .cap = cap, .n = m->n};
	for (size_t i = 0; i < m->cap; i++)
		if (m->v[i].name)
			*map_find(&n, m->v[i].name) = m->v[i];
	free(m->v);
	*m = n;
	return 0;
}

/* name's entry, made when new; past TRACK_NAMES_MAX names, or without
 * memory, the TRACK_OTHER_NAME one (NULL when even that cannot be made). */
static usage *map_get(usage_map *m, const char *name)
{
	usage *u = map_find(m, name);
	if (u && u->name)
		return u;
	if (m->n >= TRACK_NAMES_MAX && strcmp(name, TRACK_OTHER_NAME) != 0)
		return map_get(m, TRACK_OTHER_NAME);
	if ((m->n + 1) * 4 > m->cap * 3) {
		if (map_grow(m))
			return NULL;
		u = map_find(m, name);
	}
	u->name = strdup(name);
	if (!u->name)
		return NULL;
	m->n++;
	return u;
}

static void map_free(usage_map *m)
{
	for (size_t i = 0; i < m->cap; i++)
		free(m->v[i].name);
	free(m->v);
	*m = (usage_map){0};
}

const char *track_usage_name(const track_flow *f, track_usage_by by)
{
	switch (by) {
	case TRACK_BY_INBOUND: return f->inbound;
	case TRACK_BY_OUTBOUND: return f->member[0] ? f->member : f->outbound;
	default: return f->user;
	}
}

/* ---- the table ---- */

tracker *tracker_new(size_t index, uint64_t (*clock_ms)(void))
{
	tracker *t = calloc(1, sizeof *t);
	if (t) {
		t->index = index;
		t->clock_ms = clock_ms;
	}
	return t;
}

uint64_t track_clock_ms(const track_flow *f) { return f->t->clock_ms(); }

void tracker_free(tracker *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->n_closed; i++)
		free(t->closed[(t->closed_head + i) % TRACK_CLOSED_MAX]);
	for (int b = 0; b < TRACK_BY_N_; b++)
		map_free(&t->by[b]);
	free(t);
}

uint64_t tracker_next_id(tracker *t)
{
	return ((uint64_t)(t->index + 1) << TRACK_ID_SHIFT) | ++t->seq;
}

track_flow *tracker_prepare(tracker *t, const track_open *o, access_log_flow *log)
{
	track_flow *f = malloc(sizeof *f);
	if (!f) {
		access_log_flow_end(log, 0, 0, msgs[M_NO_MEMORY]);
		return NULL;
	}
	/* the fields one by one: the name arrays are written below, not zeroed */
	f->t = t;
	f->id = 0;
	f->start_ms = f->end_ms = 0;
	f->udp = o->udp;
	f->listed = f->ended = f->in_kill = false;
	f->assoc = o->assoc;
	f->source.kind = ADDR_NONE;
	if (o->peer && addr_dest_from_sockaddr(&f->source, (const struct sockaddr *)o->peer))
		f->source.kind = ADDR_NONE;
	f->dest = *o->dest;
	if (o->sniffed)
		f->sniffed = *o->sniffed;
	else
		f->sniffed.kind = ADDR_NONE;
	f->rule = o->rule;
	f->version = o->version;
	f->epoch = o->epoch;
	f->bytes[0] = f->bytes[1] = 0;
	f->more = NULL;
	f->kill = NULL;
	f->log = log;
	f->who = o->who;
	if (f->who)
		principal_hold(f->who);
	f->why[0] = '\0';
	copy_name(f->inbound, o->inbound);
	copy_name(f->user, o->user);
	copy_name(f->outbound, o->outbound);
	copy_name(f->member, o->member);
	return f;
}

void track_register(track_flow *f, const char *member)
{
	tracker *t = f->t;
	if (member) {
		copy_name(f->member, member);
		access_log_flow_set_member(f->log, member);
	}
	f->id = tracker_next_id(t);
	f->start_ms = t->clock_ms();
	f->listed = true;
	list_push_back(&t->open, &f->node);
	t->n_open++;
	for (int b = 0; b < TRACK_BY_N_; b++) {
		usage *u = map_get(&t->by[b], track_usage_name(f, (track_usage_by)b));
		if (u)
			u->total++;
	}
}

void track_discard(track_flow *f, const char *why)
{
	if (!f)
		return;
	access_log_flow_end(f->log, 0, 0, why);
	principal_release(f->who);
	free(f);
}

track_flow *tracker_open(tracker *t, const track_open *o, access_log_flow *log)
{
	track_flow *f = tracker_prepare(t, o, log);
	if (f)
		track_register(f, NULL);
	return f;
}

void track_bytes(const track_flow *f, uint64_t *up, uint64_t *down)
{
	uint64_t a = 0, b = 0;
	if (f->more && !f->ended)
		f->more(f->more_ud, &a, &b);
	*up = f->bytes[0] + a;
	*down = f->bytes[1] + b;
}

void track_end(track_flow *f, const char *why)
{
	if (!f || f->ended)
		return;
	if (!f->listed) { /* ended before its open was reported */
		track_discard(f, why);
		return;
	}
	tracker *t = f->t;
	uint64_t up, down;
	track_bytes(f, &up, &down);
	f->bytes[0] = up;
	f->bytes[1] = down;
	f->ended = true;
	f->end_ms = t->clock_ms();
	copy_name(f->why, why ? why : ACCESS_LOG_CLOSED);
	access_log_flow_end(f->log, up, down, why);
	f->log = NULL;
	principal_release(f->who); /* an ended flow keeps only its name */
	f->who = NULL;
	list_remove(f->in_kill ? &t->killing : &t->open, &f->node);
	t->n_open--;
	t->ended_up += up;
	t->ended_down += down;
	for (int b = 0; b < TRACK_BY_N_; b++) {
		usage *u = map_get(&t->by[b], track_usage_name(f, (track_usage_by)b));
		if (u) {
			u->up += up;
			u->down += down;
		}
	}
	/* the ring keeps the last ones: the oldest goes */
	if (t->n_closed == TRACK_CLOSED_MAX) {
		free(t->closed[t->closed_head]);
		t->closed_head = (t->closed_head + 1) % TRACK_CLOSED_MAX;
		t->n_closed--;
	}
	t->closed[(t->closed_head + t->n_closed) % TRACK_CLOSED_MAX] = f;
	t->n_closed++;
}

size_t tracker_open_count(const tracker *t) { return t->n_open; }
const list *tracker_open_list(const tracker *t) { return &t->open; }
size_t tracker_closed_count(const tracker *t) { return t->n_closed; }

const track_flow *tracker_closed_at(const tracker *t, size_t i)
{
	return i < t->n_closed ? t->closed[(t->closed_head + i) % TRACK_CLOSED_MAX] : NULL;
}

void tracker_ended_bytes(const tracker *t, uint64_t *up, uint64_t *down)
{
	*up = t->ended_up;
	*down = t->ended_down;
}

size_t tracker_kill(tracker *t, bool (*match)(const track_flow *f, void *arg), void *arg,
                    const char *why)
{
	/* The matches move to their own list first: a kill may end other
	 * flows (track_end takes them off whichever list they are on), and
	 * a flow asked to end stays open until its owner closes it. */
	for (list_node *i = t->open.head, *next; i; i = next) {
		next = i->next;
		track_flow *f = LIST_ENTRY(i, track_flow, node);
		if (f->kill && match(f, arg)) {
			list_remove(&t->open, &f->node);
			list_push_back(&t->killing, &f->node);
			f->in_kill = true;
		}
	}
	size_t n = 0;
	while (t->killing.head) {
		track_flow *f = LIST_ENTRY(t->killing.head, track_flow, node);
		list_remove(&t->killing, &f->node);
		list_push_back(&t->open, &f->node);
		f->in_kill = false;
		n++;
		f->kill(f->kill_ud, why);
	}
	return n;
}

void tracker_usage(const tracker *t, track_usage_by by, track_usage_fn fn, void *arg)
{
	const usage_map *m = &t->by[by];
	for (size_t i = 0; i < m->cap; i++)
		if (m->v[i].name)
			fn(m->v[i].name, m->v[i].up, m->v[i].down, m->v[i].total, arg);
}
