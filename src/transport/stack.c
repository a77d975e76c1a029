/* stack.c - moving bytes through a stack of layers until nothing moves. */
#include "transport/stack.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A bounded FIFO of bytes; the buffer is allocated on first use. */
typedef struct queue {
	uint8_t *data;
	size_t len;
} queue;

/* up[i] feeds layer i's from_below (up[0] is the wire's input, up[n] the
 * app's); down[i + 1] feeds layer i's from_above (down[n] is the app's
 * output, down[0] the wire's). */
struct stack {
	layer *layers[STACK_MAX_LAYERS];
	size_t n;
	queue up[STACK_MAX_LAYERS + 1];
	queue down[STACK_MAX_LAYERS + 1];
	/* stack_shutdown ran and layers[shut_next - 1] is the next whose
	 * orderly end is due (0: none left): it waits until the queue above
	 * that layer is empty, so the bytes sent before the end go first. */
	bool shutting;
	size_t shut_next;
	int err;
	char err_text[160];
};

static const char *const msgs[] = {
	"%s: error",
	"stack: out of memory",
	"stack: too many layers",
};

stack *stack_new(void) { return calloc(1, sizeof(stack)); }

void stack_free(stack *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++)
		s->layers[i]->ops->free(s->layers[i]);
	for (size_t i = 0; i <= STACK_MAX_LAYERS; i++) {
		free(s->up[i].data);
		free(s->down[i].data);
	}
	free(s);
}

size_t stack_depth(const stack *s) { return s->n; }

int stack_push(stack *s, layer *l)
{
	if (s->n == STACK_MAX_LAYERS) {
		l->ops->free(l);
		s->err = LAYER_ERR_STATE;
		snprintf(s->err_text, sizeof s->err_text, "%s", msgs[2]);
		return -1;
	}
	/* What waited for the app now waits for the new top layer: nothing,
	 * as layers are pushed before any byte moves. */
	s->layers[s->n++] = l;
	return 0;
}

static int fail(stack *s, int err, const layer *l)
{
	if (!s->err) {
		s->err = err;
		if (l) {
			/* A layer's text names it already ("tls: ...", layer.h). */
			const char *why = l->ops->error ? l->ops->error(l) : NULL;
			if (why)
				snprintf(s->err_text, sizeof s->err_text, "%s", why);
			else
				snprintf(s->err_text, sizeof s->err_text, msgs[0], l->ops->name);
		} else {
			snprintf(s->err_text, sizeof s->err_text, "%s", msgs[1]);
		}
	}
	return err;
}

static bool ensure(queue *q)
{
	if (!q->data)
		q->data = malloc(STACK_QUEUE_CAP);
	return q->data != NULL;
}

/* A layer_buf over the free end of q. */
static layer_buf tail(queue *q)
{
	return (layer_buf){.data = q->data + q->len, .len = 0, .cap = STACK_QUEUE_CAP - q->len};
}

static void eat(queue *q, size_t n)
{
	if (n == 0) /* q->data may still be NULL: memmove must not see it */
		return;
	if (n > q->len) /* a caller's mistake: never move memory past the queue */
		n = q->len;
	memmove(q->data, q->data + n, q->len - n);
	q->len -= n;
}

/* Moves bytes through every layer both ways until nothing moves. */
static int move(stack *s)
{
	for (size_t i = 0; i <= s->n; i++)
		if (!ensure(&s->up[i]) || !ensure(&s->down[i]))
			return fail(s, LAYER_ERR_NOMEM, NULL);
	bool moved = true;
	/* Each round moves at least one byte or ends; queues are bounded, so
	 * the rounds are too. */
	while (moved) {
		moved = false;
		for (size_t i = 0; i < s->n; i++) {
			layer *l = s->layers[i];
			layer_buf up = tail(&s->up[i + 1]), down = tail(&s->down[i]);
			ssize_t r = l->ops->from_below(l, s->up[i].data, s->up[i].len, &up, &down);
			if (r < 0)
				return fail(s, (int)r, l);
			if (r > 0)
				eat(&s->up[i], (size_t)r);
			s->up[i + 1].len += up.len;
			s->down[i].len += down.len;
			moved |= r > 0 || up.len > 0 || down.len > 0;
		}
		for (size_t k = s->n; k-- > 0;) {
			layer *l = s->layers[k];
			layer_buf down = tail(&s->down[k]);
			ssize_t r = l->ops->from_above(l, s->down[k + 1].data, s->down[k + 1].len, &down);
			if (r < 0)
				return fail(s, (int)r, l);
			if (r > 0)
				eat(&s->down[k + 1], (size_t)r);
			s->down[k].len += down.len;
			moved |= r > 0 || down.len > 0;
		}
	}
	return 0;
}

/* Whether a layer's orderly end is due: every byte above it went in. */
static bool shut_due(const stack *s)
{
	return s->shutting && s->shut_next > 0 && s->down[s->shut_next].len == 0;
}

/* The next layer's orderly end, top to bottom. */
static int shut_one(stack *s)
{
	layer *l = s->layers[s->shut_next - 1];
	queue *q = &s->down[s->shut_next - 1];
	s->shut_next--;
	if (!l->ops->shutdown)
		return 0;
	layer_buf down = tail(q);
	int rc = l->ops->shutdown(l, &down);
	if (rc < 0)
		return fail(s, rc, l);
	q->len += down.len;
	return 0;
}

/* Moves bytes until nothing moves, running the orderly ends as they fall
 * due. */
static int pump(stack *s)
{
	if (s->err)
		return s->err;
	for (;;) {
		int rc = move(s);
		if (rc || !shut_due(s))
			return rc;
		rc = shut_one(s);
		if (rc)
			return rc;
	}
}

int stack_start(stack *s)
{
	if (s->n == 0)
		return 0;
	for (size_t i = 0; i <= s->n; i++)
		if (!ensure(&s->up[i]) || !ensure(&s->down[i]))
			return fail(s, LAYER_ERR_NOMEM, NULL);
	for (size_t i = 0; i < s->n; i++) {
		layer *l = s->layers[i];
		if (!l->ops->start)
			continue;
		layer_buf down = tail(&s->down[i]);
		int rc = l->ops->start(l, &down);
		if (rc < 0)
			return fail(s, rc, l);
		s->down[i].len += down.len;
	}
	return pump(s);
}

/* Bytes for an empty queue go to the layer that reads that queue straight
 * from the caller's buffer (the TLS layer hands them to OpenSSL from
 * there: socket, then OpenSSL's record buffer, no queue in between); only
 * what that layer leaves is copied into the queue. A call through the
 * queue would see the same bytes, so the layers cannot tell. Returns the
 * bytes the layer took, or an error (its output dropped, as move does). */
static ssize_t offer(stack *s, queue *q, const uint8_t *in, size_t len)
{
	if (q == &s->up[0]) {
		layer *l = s->layers[0];
		layer_buf up = tail(&s->up[1]), down = tail(&s->down[0]);
		ssize_t r = l->ops->from_below(l, in, len, &up, &down);
		if (r < 0)
			return fail(s, (int)r, l);
		s->up[1].len += up.len;
		s->down[0].len += down.len;
		return r;
	}
	layer *l = s->layers[s->n - 1];
	layer_buf down = tail(&s->down[s->n - 1]);
	ssize_t r = l->ops->from_above(l, in, len, &down);
	if (r < 0)
		return fail(s, (int)r, l);
	s->down[s->n - 1].len += down.len;
	return r;
}

static ssize_t feed(stack *s, queue *q, const uint8_t *in, size_t len)
{
	if (s->err)
		return s->err;
	for (size_t i = 0; i <= s->n; i++)
		if (!ensure(&s->up[i]) || !ensure(&s->down[i]))
			return fail(s, LAYER_ERR_NOMEM, NULL);
	size_t took = 0;
	if (s->n && q->len == 0 && len > 0) {
		ssize_t r = offer(s, q, in, len);
		if (r < 0)
			return r;
		took = (size_t)r > len ? len : (size_t)r;
	}
	size_t n = STACK_QUEUE_CAP - q->len;
	if (n > len - took)
		n = len - took;
	memcpy(q->data + q->len, in + took, n);
	q->len += n;
	int rc = s->n ? pump(s) : 0;
	return rc < 0 ? rc : (ssize_t)(took + n);
}

/* An empty stack passes bytes straight across: wire in is app in, app out
 * is wire out (up[0] doubles as up[n], down[n] as down[0]). */
ssize_t stack_from_wire(stack *s, const uint8_t *in, size_t len)
{
	return feed(s, &s->up[0], in, len);
}

ssize_t stack_from_app(stack *s, const uint8_t *in, size_t len)
{
	return feed(s, &s->down[s->n], in, len);
}

size_t stack_wire_out(const stack *s, const uint8_t **data)
{
	*data = s->down[0].data;
	return s->down[0].len;
}

int stack_wire_done(stack *s, size_t n)
{
	eat(&s->down[0], n);
	return s->n ? pump(s) : 0;
}

size_t stack_app_in(const stack *s, const uint8_t **data)
{
	*data = s->up[s->n].data;
	return s->up[s->n].len;
}

int stack_app_done(stack *s, size_t n)
{
	eat(&s->up[s->n], n);
	return s->n ? pump(s) : 0;
}

bool stack_ready(const stack *s)
{
	for (size_t i = 0; i < s->n; i++)
		if (!s->layers[i]->ops->ready(s->layers[i]))
			return false;
	return true;
}

bool stack_passthrough(const stack *s)
{
	if (s->err || s->shutting)
		return false;
	for (size_t i = 0; i < s->n; i++) {
		const layer *l = s->layers[i];
		if (!l->ops->passthrough || !l->ops->passthrough(l))
			return false;
	}
	for (size_t i = 0; i <= s->n; i++)
		if (s->up[i].len || s->down[i].len)
			return false;
	return true;
}

size_t stack_app_room(const stack *s) { return STACK_QUEUE_CAP - s->down[s->n].len; }

int stack_shutdown(stack *s)
{
	if (s->err)
		return s->err;
	if (s->shutting)
		return 0;
	s->shutting = true;
	s->shut_next = s->n;
	return pump(s); /* what the app sent first goes first */
}

bool stack_shut_pending(const stack *s) { return s->shutting && s->shut_next > 0; }

bool stack_peer_ended(const stack *s)
{
	for (size_t i = s->n; i-- > 0;) {
		const layer *l = s->layers[i];
		if (s->up[i + 1].len)
			return false; /* bytes still on their way to the app */
		if (l->ops->peer_ended && l->ops->peer_ended(l))
			return true;
	}
	return false;
}

const char *stack_waiting_layer(const stack *s)
{
	for (size_t i = 0; i < s->n; i++)
		if (!s->layers[i]->ops->ready(s->layers[i]))
			return s->layers[i]->ops->name;
	return NULL;
}

uint64_t stack_deadline(const stack *s)
{
	uint64_t first = 0;
	for (size_t i = 0; i < s->n; i++) {
		const layer *l = s->layers[i];
		uint64_t d = l->ops->deadline ? l->ops->deadline(l) : 0;
		if (d && (!first || d < first))
			first = d;
	}
	return first;
}

int stack_on_time(stack *s, uint64_t now)
{
	if (s->err)
		return s->err;
	for (size_t i = 0; i < s->n; i++) {
		layer *l = s->layers[i];
		uint64_t d = l->ops->deadline ? l->ops->deadline(l) : 0;
		if (!d || d > now || !l->ops->on_time)
			continue;
		if (!ensure(&s->down[i]))
			return fail(s, LAYER_ERR_NOMEM, NULL);
		layer_buf down = tail(&s->down[i]);
		int r = l->ops->on_time(l, now, &down);
		s->down[i].len += down.len;
		if (r < 0)
			return fail(s, r, l);
	}
	return pump(s);
}

const char *stack_error(const stack *s) { return s->err ? s->err_text : NULL; }
