/* dns.c - the resolver shell: one c-ares channel per loop (made by its first lookup), its sockets on uv_poll_t, its timeouts and ours on one uv_timer_t, early answers from a uv_idle_t. */
#include "runtime/dns.h"

#include <ares.h>
#include <arpa/inet.h>
#include <assert.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bytes.h"
#include "base/list.h"

/* c-ares's own retry schedule sits inside our deadline: each try waits
 * timeout/TRY_DIVISOR, TRIES rounds, and c-ares doubles the wait each round,
 * so with one server it gives up after 1/4 + 2/4 = 3/4 of the timeout. That
 * matters when a server answers A but drops AAAA: c-ares then returns the
 * family it got before our deadline turns the lookup into DNS_ETIMEOUT. */
#define TRY_DIVISOR 4
#define TRIES 2

/* A macro's value as a string literal. */
#define TEXT_(x) #x
#define TEXT(x) TEXT_(x)

/* Longest server text: "[" v6 "]:" port, plus the NUL. */
#define SERVER_TEXT_MAX (INET6_ADDRSTRLEN + 9)

static const char *const messages[] = {
	[-DNS_OK] = "dns: ok",
	[-DNS_ENOTFOUND] = "dns: no such host",
	[-DNS_ETIMEOUT] = "dns: lookup timed out",
	[-DNS_ESERVFAIL] = "dns: server failure",
	[-DNS_ECANCELLED] = "dns: cancelled",
	[-DNS_EBADNAME] = "dns: bad host name",
	[-DNS_EBADSERVER] = "dns: bad server address",
	[-DNS_ENOMEM] = "dns: out of memory",
	[-DNS_EBUSY] = "dns: too many lookups in flight",
	[-DNS_ESETUP] = "dns: resolver setup failed",
	[-DNS_ETOOMANYSERVERS] = "dns: too many servers",
};

const char *dns_strerror(int status)
{
	if (status > 0 || (size_t)-status >= sizeof messages / sizeof messages[0])
		return "dns: unknown error";
	return messages[-status];
}

typedef struct lookup lookup;

typedef enum qstate {
	Q_WAITING,    /* on a lookup's waiter list and the deadline list */
	Q_READY,      /* answered; on the ready list until the idle delivers it */
	Q_DELIVERING, /* inside its callback; freed when it returns */
} qstate;

struct dns_query {
	dns_resolver *r;
	lookup *lk;               /* Q_WAITING: the lookup waited on */
	list_node link;           /* in lk->waiters (Q_WAITING) or r->ready (Q_READY) */
	list_node dlink;          /* in r->deadlines (Q_WAITING) */
	uint64_t deadline;        /* Q_WAITING: loop time (uv_now) of DNS_ETIMEOUT */
	uint64_t tick;            /* Q_READY: the idle round it was queued in */
	dns_cb cb;
	void *data; /* borrowed until the callback or cancel */
	qstate state;
	int status; /* Q_READY: the answer */
	size_t n;
	struct sockaddr_storage addrs[]; /* Q_READY: n addresses */
};

/* One name in c-ares (or about to be), shared by every query for it. Once
 * started, c-ares holds a pointer to it until on_addrinfo, which frees it. */
struct lookup {
	dns_resolver *r;
	list_node join;     /* in r->joinable, while new queries may join */
	lookup *start_next; /* r->to_start, until the idle starts it */
	list waiters;       /* dns_query.link */
	bool joinable;
	void *bh;           /* the backend's handle, while it looks the name up */
	list_node running;  /* in r->running, with bh */
	char name[DNS_NAME_MAX + 1];
};

/* One c-ares socket watched by the loop. */
typedef struct watcher {
	uv_poll_t poll; /* poll.data = the watcher */
	dns_resolver *r;
	ares_socket_t fd;
	struct watcher *next;
} watcher;

struct dns_resolver {
	uv_loop_t *loop; /* borrowed; this resolver is for its thread only */
	dns_cache *cache; /* borrowed, shared process-wide; may be NULL */
	/* NULL until the first lookup starts: a channel holds about 74 KiB
	 * (c-ares 1.18's query tables), touched when made, on every worker,
	 * though a proxy whose clients send addresses never looks a name up
	 * (docs/performance.md, Idle memory). */
	ares_channel channel;
	struct ares_addr_port_node *servers; /* owned: set on the channel; NULL: resolv.conf's */
	uv_timer_t timer; /* c-ares timeouts and query deadlines */
	uv_idle_t idle;   /* runs while something is ready or to start */
	uint64_t timeout_ms;
	uint64_t tick; /* idle rounds run */
	list ready;     /* dns_query.link, answered and not yet delivered */
	list deadlines; /* dns_query.dlink, the waiting ones, earliest first */
	list joinable;  /* lookup.join */
	lookup *to_start, *to_start_tail;
	size_t n_lookups; /* alive: to start, in c-ares, bounded by DNS_MAX_LOOKUPS */
	watcher *watchers;
	int open_handles;   /* closed through on_handle_closed; freed at 0 */
	int in_callback;    /* depth of user callbacks running (del asserts 0) */
	bool closing;
	dns_backend backend; /* start NULL: c-ares */
	list running;        /* lookup.running: those at the backend */
};

/* --- lists --- */

static dns_query *query_of(list_node *n) { return n ? LIST_ENTRY(n, dns_query, link) : NULL; }

/* Every waiting query gets the same timeout from a non-decreasing uv_now, so
 * appending keeps the deadline list sorted. */
static dns_query *first_deadline(dns_resolver *r)
{
	return r->deadlines.head ? LIST_ENTRY(r->deadlines.head, dns_query, dlink) : NULL;
}

/* Takes a waiting query off its lookup and the deadline list. */
static void unwait(dns_query *q)
{
	list_remove(&q->lk->waiters, &q->link);
	list_remove(&q->r->deadlines, &q->dlink);
	q->lk = NULL;
}

static void unjoin(lookup *lk)
{
	dns_resolver *r = lk->r;
	if (!lk->joinable)
		return;
	list_remove(&r->joinable, &lk->join);
	lk->joinable = false;
}

static void lookup_free(lookup *lk)
{
	unjoin(lk);
	lk->r->n_lookups--;
	free(lk);
}

/* --- delivery --- */

static void deliver(dns_query *q, int status, const struct sockaddr_storage *addrs, size_t n)
{
	dns_resolver *r = q->r;
	q->state = Q_DELIVERING;
	r->in_callback++;
	q->cb(status, n ? addrs : NULL, n, q->data);
	r->in_callback--;
	free(q);
}

static void kick(dns_resolver *r);

/* A query answered without a lookup: delivered by the next idle round. */
static dns_query *answer_later(dns_resolver *r, dns_cb cb, void *data, int status,
                               const struct sockaddr_storage *addrs, size_t n)
{
	dns_query *q = malloc(sizeof *q + n * sizeof q->addrs[0]);
	if (!q)
		return NULL;
	*q = (dns_query){.r = r, .cb = cb, .data = data, .state = Q_READY, .status = status,
	                 .n = n, .tick = r->tick};
	if (n)
		memcpy(q->addrs, addrs, n * sizeof q->addrs[0]);
	list_push_back(&r->ready, &q->link);
	kick(r);
	return q;
}

/* --- the timer --- */

static void on_timer(uv_timer_t *t);

/* Sets the timer to the nearer of c-ares's next timeout and the first query
 * deadline. Called after anything that may move either. */
static void rearm(dns_resolver *r)
{
	if (r->closing)
		return;
	uint64_t now = uv_now(r->loop);
	uint64_t wait = UINT64_MAX;
	struct timeval tv;
	if (r->channel && ares_timeout(r->channel, NULL, &tv))
		wait = (uint64_t)tv.tv_sec * 1000 + ((uint64_t)tv.tv_usec + 999) / 1000;
	dns_query *first = first_deadline(r);
	if (first) {
		uint64_t d = first->deadline > now ? first->deadline - now : 0;
		if (d < wait)
			wait = d;
	}
	/* uv_timer_start/stop only fail on a closing handle or a NULL callback,
	 * neither possible before closing. */
	if (wait == UINT64_MAX)
		(void)uv_timer_stop(&r->timer);
	else
		(void)uv_timer_start(&r->timer, on_timer, wait, 0);
}

static void expire(dns_resolver *r)
{
	uint64_t now = uv_now(r->loop);
	dns_query *q;
	while ((q = first_deadline(r)) && q->deadline <= now) {
		/* The lookup goes on: its answer still fills the cache. */
		unwait(q);
		deliver(q, DNS_ETIMEOUT, NULL, 0);
	}
}

static void on_timer(uv_timer_t *t)
{
	dns_resolver *r = t->data;
	if (r->channel)
		ares_process_fd(r->channel, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
	expire(r);
	rearm(r);
}

/* --- sockets --- */

static void on_handle_closed(uv_handle_t *h);

static void on_poll(uv_poll_t *p, int status, int events)
{
	watcher *w = p->data;
	dns_resolver *r = w->r;
	ares_socket_t rfd = ARES_SOCKET_BAD, wfd = ARES_SOCKET_BAD;
	if (status < 0) {
		/* Let c-ares read and write to find the error itself. */
		rfd = wfd = w->fd;
	} else {
		if (events & UV_READABLE)
			rfd = w->fd;
		if (events & UV_WRITABLE)
			wfd = w->fd;
	}
	/* May close w (through on_sock_state); w is not used after. */
	ares_process_fd(r->channel, rfd, wfd);
	rearm(r);
}

static void watcher_close(watcher *w)
{
	(void)uv_poll_stop(&w->poll);
	uv_close((uv_handle_t *)&w->poll, on_handle_closed);
}

/* ARES_OPT_SOCK_STATE_CB: c-ares says which of its sockets to watch for
 * what; (0, 0) comes before it closes one. */
static void on_sock_state(void *data, ares_socket_t fd, int readable, int writable)
{
	dns_resolver *r = data;
	watcher **link = &r->watchers;
	while (*link && (*link)->fd != fd)
		link = &(*link)->next;
	watcher *w = *link;

	if (!readable && !writable) {
		if (w) {
			*link = w->next;
			watcher_close(w);
		}
		return;
	}
	if (!w) {
		w = calloc(1, sizeof *w);
		if (!w)
			return; /* unwatched: the queries on it time out */
		if (uv_poll_init_socket(r->loop, &w->poll, fd) != 0) {
			free(w);
			return;
		}
		w->r = r;
		w->fd = fd;
		w->poll.data = w;
		w->next = r->watchers;
		r->watchers = w;
		r->open_handles++;
	}
	int events = (readable ? UV_READABLE : 0) | (writable ? UV_WRITABLE : 0);
	/* On failure the socket goes unwatched and its queries time out. */
	(void)uv_poll_start(&w->poll, events, on_poll);
}

/* --- lookups --- */

static int map_status(int ares_status)
{
	switch (ares_status) {
	case ARES_SUCCESS:
		return DNS_OK;
	case ARES_ENOTFOUND:
	case ARES_ENODATA:
	case ARES_ENONAME:
		return DNS_ENOTFOUND;
	case ARES_ETIMEOUT:
		return DNS_ETIMEOUT;
	case ARES_ECANCELLED:
	case ARES_EDESTRUCTION:
		return DNS_ECANCELLED;
	case ARES_EBADNAME:
		return DNS_EBADNAME;
	case ARES_ENOMEM:
		return DNS_ENOMEM;
	default: /* SERVFAIL, REFUSED, FORMERR, NOTIMP, bad response, refused socket */
		return DNS_ESERVFAIL;
	}
}

/* Copies up to DNS_MAX_ADDRS addresses in c-ares's order, port 0, and the
 * smallest TTL among them and the CNAMEs that led to them. */
static size_t take_addrs(const struct ares_addrinfo *ai, struct sockaddr_storage *out,
                         uint32_t *ttl)
{
	size_t n = 0;
	int min_ttl = INT32_MAX;
	for (const struct ares_addrinfo_node *a = ai->nodes; a && n < DNS_MAX_ADDRS; a = a->ai_next) {
		struct sockaddr_storage *ss = &out[n];
		memset(ss, 0, sizeof *ss);
		if (a->ai_family == AF_INET && a->ai_addrlen >= sizeof(struct sockaddr_in)) {
			struct sockaddr_in *in = (struct sockaddr_in *)ss;
			in->sin_family = AF_INET;
			in->sin_addr = ((const struct sockaddr_in *)a->ai_addr)->sin_addr;
		} else if (a->ai_family == AF_INET6 &&
		           a->ai_addrlen >= sizeof(struct sockaddr_in6)) {
			struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
			in6->sin6_family = AF_INET6;
			in6->sin6_addr = ((const struct sockaddr_in6 *)a->ai_addr)->sin6_addr;
		} else {
			continue;
		}
		if (a->ai_ttl < min_ttl)
			min_ttl = a->ai_ttl;
		n++;
	}
	for (const struct ares_addrinfo_cname *c = ai->cnames; c; c = c->next)
		if (c->ttl < min_ttl)
			min_ttl = c->ttl;
	*ttl = min_ttl < 0 ? 0 : (uint32_t)min_ttl;
	return n;
}

/* Every waiter of lk hears status (addrs: n of them on DNS_OK), then lk is
 * freed. */
static void finish(lookup *lk, int status, const struct sockaddr_storage *addrs, size_t n)
{
	/* A query made by one of the callbacks below starts a fresh lookup
	 * (or hits the cache) instead of joining this finished one. */
	unjoin(lk);
	dns_query *q;
	while ((q = query_of(lk->waiters.head))) {
		unwait(q);
		deliver(q, status, addrs, n);
	}
	lookup_free(lk);
}

static void answered(lookup *lk, int status, const struct sockaddr_storage *addrs, size_t n,
                     uint32_t ttl);

/* ares_getaddrinfo's callback: once per lookup, from ares_process_fd,
 * ares_getaddrinfo itself (hosts file, bad name) or ares_destroy. */
static void on_addrinfo(void *arg, int ares_status, int timeouts, struct ares_addrinfo *ai)
{
	(void)timeouts;
	lookup *lk = arg;
	struct sockaddr_storage addrs[DNS_MAX_ADDRS];
	size_t n = 0;
	uint32_t ttl = 0;
	if (ares_status == ARES_SUCCESS && ai)
		n = take_addrs(ai, addrs, &ttl);
	if (ai)
		ares_freeaddrinfo(ai);
	int status = map_status(ares_status);
	if (status == DNS_OK && n == 0)
		status = DNS_ENOTFOUND;
	answered(lk, status, addrs, n, ttl);
}

/* A lookup's answer, from c-ares or the backend: cached, then heard. */
static void answered(lookup *lk, int status, const struct sockaddr_storage *addrs, size_t n,
                     uint32_t ttl)
{
	dns_resolver *r = lk->r;
	if (r->cache && !r->closing) {
		if (status == DNS_OK)
			dns_cache_store(r->cache, lk->name, addrs, n, ttl, uv_now(r->loop));
		else if (status == DNS_ENOTFOUND)
			dns_cache_store(r->cache, lk->name, NULL, 0, DNS_NEGATIVE_TTL_S, uv_now(r->loop));
	}
	finish(lk, status, addrs, n);
}

static int channel_open(dns_resolver *r);

static void backend_done(void *token, int status, const struct sockaddr_storage *addrs,
                         size_t n, uint32_t ttl)
{
	lookup *lk = token;
	list_remove(&lk->r->running, &lk->running);
	lk->bh = NULL;
	if (status == DNS_OK && n == 0)
		status = DNS_ENOTFOUND;
	answered(lk, status, addrs, n > DNS_MAX_ADDRS ? DNS_MAX_ADDRS : n, ttl);
}

void dns_resolver_set_backend(dns_resolver *r, const dns_backend *b)
{
	r->backend = b ? *b : (dns_backend){0};
}

static void start(lookup *lk)
{
	if (!lk->waiters.head) {
		lookup_free(lk); /* everyone cancelled before it began */
		return;
	}
	dns_resolver *r = lk->r;
	if (r->backend.start) {
		lk->bh = r->backend.start(r->backend.self, lk->name, backend_done, lk);
		if (!lk->bh)
			finish(lk, DNS_ENOMEM, NULL, 0);
		else
			list_push_back(&r->running, &lk->running);
		return;
	}
	if (!lk->r->channel && channel_open(lk->r) != ARES_SUCCESS) {
		finish(lk, DNS_ESETUP, NULL, 0); /* the next lookup tries again */
		return;
	}
	/* NOSORT: keep the answers' order and skip the RFC 6724 sort, which
	 * costs a connect() per address; family preference is the caller's. */
	struct ares_addrinfo_hints hints = {.ai_flags = ARES_AI_NOSORT, .ai_family = AF_UNSPEC};
	ares_getaddrinfo(lk->r->channel, lk->name, NULL, &hints, on_addrinfo, lk);
}

static void on_idle(uv_idle_t *h)
{
	dns_resolver *r = h->data;
	uint64_t tick = ++r->tick;

	lookup *lk = r->to_start;
	r->to_start = r->to_start_tail = NULL;
	while (lk) {
		lookup *next = lk->start_next;
		start(lk);
		lk = next;
	}

	/* Only what was queued before this round: an answer queued by a
	 * callback below waits for the next round, so a callback that keeps
	 * resolving literals cannot starve the loop. */
	dns_query *q;
	while ((q = query_of(r->ready.head)) && q->tick < tick) {
		list_remove(&r->ready, &q->link);
		deliver(q, q->status, q->addrs, q->n);
	}

	if (!r->ready.head && !r->to_start)
		(void)uv_idle_stop(&r->idle);
	rearm(r);
}

static void kick(dns_resolver *r)
{
	(void)uv_idle_start(&r->idle, on_idle);
}

static bool same_name(const char *a, const char *b)
{
	for (;; a++, b++) {
		uint8_t x = bytes_ascii_lower((uint8_t)*a), y = bytes_ascii_lower((uint8_t)*b);
		if (x != y)
			return false;
		if (!x)
			return true;
	}
}

/* The lookup for name: a joinable one, else a new one queued to start.
 * NULL with *status set when none can be had. */
static lookup *lookup_for(dns_resolver *r, const char *name, size_t len, int *status)
{
	for (list_node *n = r->joinable.head; n; n = n->next)
		if (same_name(LIST_ENTRY(n, lookup, join)->name, name))
			return LIST_ENTRY(n, lookup, join);
	if (r->n_lookups >= DNS_MAX_LOOKUPS) {
		*status = DNS_EBUSY;
		return NULL;
	}
	lookup *lk = calloc(1, sizeof *lk);
	if (!lk) {
		*status = DNS_ENOMEM;
		return NULL;
	}
	lk->r = r;
	memcpy(lk->name, name, len + 1); /* len <= DNS_NAME_MAX, checked by the caller */
	lk->joinable = true;
	list_push_front(&r->joinable, &lk->join);
	if (r->to_start_tail)
		r->to_start_tail->start_next = lk;
	else
		r->to_start = lk;
	r->to_start_tail = lk;
	r->n_lookups++;
	kick(r);
	return lk;
}

/* An IP literal as one address, port 0. */
static bool literal(const char *name, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof *ss);
	struct sockaddr_in *in = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
	if (inet_pton(AF_INET, name, &in->sin_addr) == 1) {
		in->sin_family = AF_INET;
		return true;
	}
	memset(ss, 0, sizeof *ss);
	if (inet_pton(AF_INET6, name, &in6->sin6_addr) == 1) {
		in6->sin6_family = AF_INET6;
		return true;
	}
	return false;
}

dns_query *dns_resolve(dns_resolver *r, const char *name, dns_cb cb, void *data)
{
	assert(cb);
	if (r->closing)
		return NULL;

	/* One trailing root dot is the same name (RFC 1034 3.1). */
	char key[DNS_NAME_MAX + 2];
	size_t len = strnlen(name, DNS_NAME_MAX + 2);
	if (len > 0 && len <= DNS_NAME_MAX + 1 && name[len - 1] == '.')
		len--;
	if (len == 0 || len > DNS_NAME_MAX)
		return answer_later(r, cb, data, DNS_EBADNAME, NULL, 0);
	memcpy(key, name, len);
	key[len] = '\0';

	struct sockaddr_storage addrs[DNS_MAX_ADDRS];
	if (literal(key, &addrs[0]))
		return answer_later(r, cb, data, DNS_OK, addrs, 1);

	if (r->cache) {
		size_t n;
		switch (dns_cache_lookup(r->cache, key, uv_now(r->loop), addrs, DNS_MAX_ADDRS, &n)) {
		case DNS_CACHE_HIT:
			return answer_later(r, cb, data, DNS_OK, addrs, n);
		case DNS_CACHE_NEGATIVE:
			return answer_later(r, cb, data, DNS_ENOTFOUND, NULL, 0);
		case DNS_CACHE_MISS:
			break;
		}
	}

	int status = DNS_OK;
	lookup *lk = lookup_for(r, key, len, &status);
	if (!lk)
		return answer_later(r, cb, data, status, NULL, 0);
	dns_query *q = malloc(sizeof *q);
	if (!q)
		return NULL; /* a lookup made for it is freed by start(): nobody waits */
	*q = (dns_query){.r = r, .lk = lk, .cb = cb, .data = data, .state = Q_WAITING,
	                 .deadline = uv_now(r->loop) + r->timeout_ms};
	list_push_back(&lk->waiters, &q->link);
	bool first = list_empty(&r->deadlines);
	list_push_back(&r->deadlines, &q->dlink);
	if (first)
		rearm(r);
	return q;
}

void dns_query_cancel(dns_query *q)
{
	if (!q || q->state == Q_DELIVERING)
		return;
	if (q->state == Q_READY)
		list_remove(&q->r->ready, &q->link);
	else
		unwait(q); /* an unstarted lookup left empty is freed by start() */
	free(q);
}

/* --- set-up and teardown --- */

static void set_err(char *err, size_t err_size, int status, const char *detail)
{
	if (!err || err_size == 0)
		return;
	int w;
	if (status == DNS_EBADSERVER)
		w = snprintf(err, err_size, "%s \"%s\"", dns_strerror(status), detail);
	else if (detail)
		w = snprintf(err, err_size, "%s: %s", dns_strerror(status), detail);
	else
		w = snprintf(err, err_size, "%s", dns_strerror(status));
	if (w < 0)
		err[0] = '\0'; /* cannot happen with these formats; never leave garbage */
}

/* Parses "ip", "ip:port", "[v6]", "[v6]:port" or a bare v6 address. Returns
 * 0 or -1. */
static int parse_server(const char *text, struct ares_addr_port_node *node)
{
	char host[INET6_ADDRSTRLEN];
	const char *port = NULL;
	size_t len = strnlen(text, SERVER_TEXT_MAX);
	if (len == 0 || len >= SERVER_TEXT_MAX)
		return -1;

	const char *colon = strchr(text, ':');
	size_t hlen;
	bool v6;
	if (text[0] == '[') {
		const char *close = strchr(text, ']');
		if (!close)
			return -1;
		hlen = (size_t)(close - text - 1);
		if (close[1] == ':')
			port = close + 2;
		else if (close[1] != '\0')
			return -1;
		text++;
		v6 = true;
	} else if (colon && strchr(colon + 1, ':')) {
		hlen = len; /* two colons or more: a bare v6 address, no port */
		v6 = true;
	} else {
		hlen = colon ? (size_t)(colon - text) : len;
		if (colon)
			port = colon + 1;
		v6 = false;
	}
	if (hlen == 0 || hlen >= sizeof host)
		return -1;
	memcpy(host, text, hlen);
	host[hlen] = '\0';

	memset(node, 0, sizeof *node);
	if (v6) {
		node->family = AF_INET6;
		if (inet_pton(AF_INET6, host, &node->addr.addr6) != 1)
			return -1;
	} else {
		node->family = AF_INET;
		if (inet_pton(AF_INET, host, &node->addr.addr4) != 1)
			return -1;
	}

	unsigned long p = 53;
	if (port) {
		if (*port < '0' || *port > '9')
			return -1;
		char *end;
		p = strtoul(port, &end, 10);
		if (*end != '\0' || p == 0 || p > 65535)
			return -1;
	}
	node->udp_port = node->tcp_port = (int)p;
	return 0;
}

static pthread_once_t library_once = PTHREAD_ONCE_INIT;
static int library_status = ARES_ENOTINITIALIZED;

/* c-ares's process-wide init, once (it is not thread-safe itself); never
 * cleaned up, as the channels live until exit. */
static void library_init(void)
{
	library_status = ares_library_init(ARES_LIB_INIT_ALL);
}

/* Makes r's channel: an ARES_* status. */
static int channel_open(dns_resolver *r)
{
	uint64_t try_ms = r->timeout_ms / TRY_DIVISOR;
	struct ares_options opts = {
		.timeout = (int)(try_ms ? try_ms : 1), /* ARES_OPT_TIMEOUTMS: ms */
		.tries = TRIES,
		.sock_state_cb = on_sock_state,
		.sock_state_cb_data = r,
		/* No search domains: resolv.conf's "search" would turn a
		 * client's "intranet" into queries it never asked for. */
		.domains = NULL,
		.ndomains = 0,
	};
	int mask = ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES | ARES_OPT_SOCK_STATE_CB | ARES_OPT_DOMAINS;
	int rc = ares_init_options(&r->channel, &opts, mask);
	if (rc != ARES_SUCCESS) {
		r->channel = NULL;
		return rc;
	}
	if (r->servers) {
		rc = ares_set_servers_ports(r->channel, r->servers);
		if (rc != ARES_SUCCESS) {
			ares_destroy(r->channel);
			r->channel = NULL;
		}
	}
	return rc;
}

static void resolver_free(dns_resolver *r)
{
	free(r->servers);
	free(r);
}

static void on_handle_closed(uv_handle_t *h)
{
	dns_resolver *r;
	if (h->type == UV_POLL) {
		watcher *w = h->data;
		r = w->r;
		free(w);
	} else {
		r = h->data;
	}
	if (--r->open_handles == 0 && r->closing)
		resolver_free(r);
}

dns_resolver *dns_resolver_new(uv_loop_t *loop, dns_cache *cache, const char *const *servers,
                               size_t n_servers, uint64_t timeout_ms, char *err, size_t err_size)
{
	struct ares_addr_port_node *nodes = NULL;
	dns_resolver *r = NULL;

	if (n_servers > DNS_MAX_SERVERS) {
		set_err(err, err_size, DNS_ETOOMANYSERVERS, "at most " TEXT(DNS_MAX_SERVERS));
		goto fail;
	}
	if (n_servers) {
		nodes = calloc(n_servers, sizeof *nodes);
		if (!nodes) {
			set_err(err, err_size, DNS_ENOMEM, NULL);
			goto fail;
		}
	}
	for (size_t i = 0; i < n_servers; i++) {
		if (parse_server(servers[i], &nodes[i]) != 0) {
			set_err(err, err_size, DNS_EBADSERVER, servers[i]);
			goto fail;
		}
		nodes[i].next = i + 1 < n_servers ? &nodes[i + 1] : NULL;
	}

	pthread_once(&library_once, library_init);
	if (library_status != ARES_SUCCESS) {
		set_err(err, err_size, DNS_ESETUP, ares_strerror(library_status));
		goto fail;
	}

	r = calloc(1, sizeof *r);
	if (!r) {
		set_err(err, err_size, DNS_ENOMEM, NULL);
		goto fail;
	}
	r->loop = loop;
	r->cache = cache;
	if (timeout_ms == 0)
		timeout_ms = DNS_TIMEOUT_DEFAULT_MS;
	if (timeout_ms > DNS_TIMEOUT_MAX_MS)
		timeout_ms = DNS_TIMEOUT_MAX_MS;
	r->timeout_ms = timeout_ms;
	r->servers = nodes; /* the channel is made by the first lookup's start() */

	/* Cannot fail on an open loop. */
	(void)uv_timer_init(loop, &r->timer);
	(void)uv_idle_init(loop, &r->idle);
	r->timer.data = r;
	r->idle.data = r;
	r->open_handles = 2;
	return r;

fail:
	free(r);
	free(nodes);
	return NULL;
}

void dns_resolver_del(dns_resolver *r)
{
	if (!r)
		return;
	assert(r->in_callback == 0 && !r->closing);
	r->closing = true;

	/* Every unanswered query hears "cancelled" once. Taken from the heads:
	 * a callback may cancel other queries while this runs. */
	dns_query *q;
	while ((q = query_of(r->ready.head))) {
		list_remove(&r->ready, &q->link);
		deliver(q, DNS_ECANCELLED, NULL, 0);
	}
	while ((q = first_deadline(r))) {
		unwait(q);
		deliver(q, DNS_ECANCELLED, NULL, 0);
	}

	lookup *lk = r->to_start;
	r->to_start = r->to_start_tail = NULL;
	while (lk) {
		lookup *next = lk->start_next;
		lookup_free(lk);
		lk = next;
	}
	while (r->running.head) {
		lk = LIST_ENTRY(r->running.head, lookup, running);
		list_remove(&r->running, &lk->running);
		r->backend.cancel(r->backend.self, lk->bh);
		lookup_free(lk);
	}
	/* Ends the lookups still in c-ares (on_addrinfo with
	 * ARES_EDESTRUCTION frees each; no waiters are left) and reports its
	 * sockets closed, which closes their watchers. */
	if (r->channel)
		ares_destroy(r->channel);
	while (r->watchers) {
		watcher *w = r->watchers;
		r->watchers = w->next;
		watcher_close(w);
	}
	uv_close((uv_handle_t *)&r->timer, on_handle_closed);
	uv_close((uv_handle_t *)&r->idle, on_handle_closed);
}
