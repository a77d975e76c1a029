/* balanced.c - building a balancer's members, and the dial that retries the next one. */
#include "outbound/balanced.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"

enum { MSG_NO_MEMORY, MSG_CORE, MSG_RETRY, MSG_COUNT_ };
static const char *const msgs[MSG_COUNT_] = {
	[MSG_NO_MEMORY] = "out of memory",
	[MSG_CORE] = "balancer %s: %s",
	[MSG_RETRY] = "balancer %s: member %s failed (%s); trying %s",
};

/* ---- building ---- */

static void balanced_free(balanced *b)
{
	for (size_t i = 0; b->members && i < b->n; i++)
		outbound_unref(b->members[i]);
	free(b->members);
	free(b->probe);
	free(b->last);
	balancer_del(b->core);
	free(b->tag);
	free(b);
}

balanced *balanced_ref(balanced *b)
{
	atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
	return b;
}

void balanced_unref(balanced *b)
{
	if (b && atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) == 1)
		balanced_free(b);
}

/* The core: a tag listed twice is two members on one upstream, so a retry
 * after one copy failed skips the other. */
static int build_core(balanced *b, const balanced_config *cfg, char *err, size_t err_size)
{
	size_t n = b->n;
	uint32_t *upstream = calloc(n ? n : 1, sizeof *upstream);
	if (!upstream) {
		snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
		return -1;
	}
	for (size_t m = 0; m < n; m++) {
		upstream[m] = (uint32_t)m;
		for (size_t k = 0; k < m; k++)
			if (strcmp(cfg->members[k]->tag, cfg->members[m]->tag) == 0) {
				upstream[m] = upstream[k];
				break;
			}
	}
	balancer_config core = cfg->core;
	core.upstream = upstream;
	char why[128];
	b->core = balancer_new(&core, n, why, sizeof why);
	free(upstream);
	if (!b->core) {
		snprintf(err, err_size, msgs[MSG_CORE], cfg->tag, why);
		return -1;
	}
	return 0;
}

balanced *balanced_new(const balanced_config *cfg, char *err, size_t err_size)
{
	balanced *b = calloc(1, sizeof *b);
	size_t n = cfg->n;
	if (b && (b->members = calloc(n ? n : 1, sizeof *b->members))) {
		/* taken over from here on: balanced_free frees them */
		b->n = n;
		memcpy(b->members, cfg->members, n * sizeof *b->members);
	} else {
		for (size_t m = 0; m < n; m++)
			outbound_unref(cfg->members[m]);
	}
	if (!b || !b->members || !(b->tag = strdup(cfg->tag)) ||
	    !(b->probe = calloc(n ? n : 1, sizeof *b->probe)) ||
	    !(b->last = calloc(n ? n : 1, sizeof *b->last))) {
		snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
		goto fail;
	}
	memcpy(b->probe, cfg->probe, n * sizeof *b->probe);
	for (size_t m = 0; m < n; m++) {
		atomic_init(&b->last[m].delay_ms, -1);
		atomic_init(&b->last[m].when_ms, 0);
		atomic_init(&b->last[m].ended, 0);
		atomic_init(&b->last[m].failed, 0);
	}
	for (size_t m = 0; m < n; m++)
		b->udp_one_dest |= outbound_udp_one_dest(b->members[m]);
	atomic_init(&b->refs, 1);
	b->id = outbound_next_id();
	b->probe_interval_ms = cfg->probe_interval_ms;
	b->probe_timeout_ms = cfg->probe_timeout_ms;
	if (build_core(b, cfg, err, err_size))
		goto fail;
	return b;
fail:
	if (b)
		balanced_free(b);
	return NULL;
}

/* ---- the dial and its retries ---- */

typedef struct bal_dial {
	connect_pending base; /* first: the handle callers hold */
	connect_pending *inner;
	balanced *bal; /* a reference: the members live in it */
	worker *w;
	dns_resolver *dns;
	addr_dest dest;
	balancer_attempt att;
	size_t member;
	connect_cb cb;
	void *data;
	/* A member may answer inside outbound_connect_stream (a stack that
	 * cannot be built, no memory), and a failure there retries the next
	 * member inside the same call. While such a chain of calls runs, this
	 * points at its outermost bal_try's flag, which bal_done sets when the
	 * dial ends and is freed; NULL otherwise. */
	bool *ended;
} bal_dial;

static void bal_dial_free(bal_dial *d)
{
	balanced_unref(d->bal);
	free(d);
}

static bool bal_try(bal_dial *d);

static void bal_done(const connect_result *r, void *data)
{
	bal_dial *d = data;
	d->inner = NULL;
	if (!r->ok) {
		/* the prober polls for the request every PROBER_TICK_MS, so
		 * whether this raised it needs no wake-up here */
		bool raised = balancer_dial_failed(d->bal->core, d->member);
		(void)raised;
		size_t next = balancer_next(d->bal->core, &d->att, NULL);
		if (next != SIZE_MAX) {
			log_debug("balancer", msgs[MSG_RETRY], d->bal->tag,
			          d->bal->members[d->member]->tag, r->msg ? r->msg : "?",
			          d->bal->members[next]->tag);
			d->member = next;
			(void)bal_try(d); /* d may be gone: nothing more here */
			return;
		}
	}
	if (d->ended)
		*d->ended = true;
	connect_cb cb = d->cb;
	void *cb_data = d->data;
	/* the member's tag lives in the balancer: held until the call returns */
	balanced *b = balanced_ref(d->bal);
	connect_result named = *r;
	named.member = b->members[d->member]->tag;
	bal_dial_free(d);
	cb(&named, cb_data);
	balanced_unref(b);
}

/* Connects through the current member. Returns true when the dial ended
 * inside the call: d is freed then. */
static bool bal_try(bal_dial *d)
{
	bool own = false;
	bool outermost = d->ended == NULL;
	bool *ended = outermost ? &own : d->ended; /* read after d may be freed */
	if (outermost)
		d->ended = ended;
	connect_pending *p = outbound_connect_stream(d->bal->members[d->member], d->w, d->dns,
	                                             &d->dest, bal_done, d);
	if (*ended)
		return true;
	if (outermost)
		d->ended = NULL;
	/* NULL: the member answered inside, and a retry it started (if any)
	 * has set inner already */
	if (p)
		d->inner = p;
	return false;
}

static void bal_cancel(connect_pending *p)
{
	bal_dial *d = (bal_dial *)p;
	if (d->inner)
		d->inner->cancel(d->inner);
	bal_dial_free(d);
}

connect_pending *balanced_connect_stream(balanced *b, worker *w, dns_resolver *dns,
                                         const addr_dest *dest, connect_cb cb, void *data)
{
	bal_dial *d = calloc(1, sizeof *d);
	if (!d) {
		cb(&(connect_result){.msg = msgs[MSG_NO_MEMORY]}, data);
		return NULL;
	}
	*d = (bal_dial){.base.cancel = bal_cancel, .bal = balanced_ref(b), .w = w, .dns = dns,
	                .dest = *dest, .cb = cb, .data = data};
	/* selection once per TCP flow, never at route time (seed 000) */
	d->member = balancer_next(b->core, &d->att, NULL);
	if (bal_try(d))
		return NULL; /* finished (and freed) inside */
	return &d->base;
}

connect_pending *balanced_connect_datagram(balanced *b, worker *w, dns_resolver *dns,
                                           const addr_dest *to, const dgram_handlers *h,
                                           void *ud, outbound_dgram_cb done, void *oud)
{
	size_t m = balancer_select(b->core, NULL);
	return outbound_connect_datagram(b->members[m], w, dns, to, h, ud, done, oud);
}
