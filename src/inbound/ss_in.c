/* ss_in.c - the Shadowsocks inbound (TCP; AEAD-2017, 2022 with one user or several behind an identity PSK): users' master keys, one salt replay filter per inbound, refused clients drained, the body as a layer on the upstream. */
#include "inbound/ss_in.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "crypto/ossl.h"

#include "proto/shadowsocks_server.h"
#include "runtime/endpoint.h"

enum {
	MSG_METHOD,
	MSG_PASSWORD,
	MSG_KEYS,
	MSG_PSK_16,
	MSG_PSK_32,
	MSG_IPSK_16,
	MSG_IPSK_32,
	MSG_IDENTITY_METHOD,
};
static const char *const msgs[] = {
	[MSG_METHOD] = "settings.method is not an AEAD method this build runs",
	[MSG_PASSWORD] = "settings.password is missing",
	[MSG_KEYS] = "cannot derive the key",
	/* SIP022 2.1: the PSK is given as base64, exactly the key's length */
	[MSG_PSK_16] = "shadowsocks 2022 key must be base64 of 16 bytes",
	[MSG_PSK_32] = "shadowsocks 2022 key must be base64 of 32 bytes",
	/* SIP022-2: several users are behind the server's identity PSK */
	[MSG_IPSK_16] = "shadowsocks 2022 identity key (settings.password) must be base64 of 16 "
	                "bytes",
	[MSG_IPSK_32] = "shadowsocks 2022 identity key (settings.password) must be base64 of 32 "
	                "bytes",
	/* SIP022-2: identity headers are "encrypted ... using an AES block
	 * cipher"; the spec check refuses this first, this is the core's word */
	[MSG_IDENTITY_METHOD] = "several users on a shadowsocks 2022 inbound need an AES method "
	                        "(identity headers are AES blocks)",
};

/* The inbound's replay filter, one for all its workers (a replay comes
 * from another port, so SO_REUSEPORT may hand it to another worker). The
 * lock is held for one lookup of at most SS_REPLAY_PROBES slots. */
static void *shared_new(void) { return inbound_locked_new(sizeof(ss_replay)); }

static int replay(void *ud, const uint8_t *salt, size_t len, int64_t now)
{
	inbound_locked *s = ud;
	pthread_mutex_lock(&s->lock);
	int r = ss_replay_add((ss_replay *)s->data, salt, len, now);
	pthread_mutex_unlock(&s->lock);
	return r;
}

typedef struct ss_in {
	ss_server core;
} ss_in;

/* An account is an ss_account: the method and the master key (and the
 * identity PSK when the user is behind one). */
static const char *account(const inbound_user *u, uint8_t *out)
{
	ss_method m;
	if (ss_method_parse(u->method, &m))
		return msgs[MSG_METHOD];
	if (!u->password)
		return msgs[MSG_PASSWORD];
	ss_account a;
	const char *why = NULL;
	if (ss_account_init(&a, m, u->password, strlen(u->password)))
		why = !ss_method_is_2022(m)       ? msgs[MSG_KEYS]
		      : ss_key_len(m) == 16 ? msgs[MSG_PSK_16]
		                            : msgs[MSG_PSK_32];
	int r = why || !u->identity ? 0
	                            : ss_account_set_identity(&a, u->identity, strlen(u->identity));
	if (r == SS_KEYS_ERR_METHOD)
		why = msgs[MSG_IDENTITY_METHOD];
	else if (r)
		why = msgs[ss_key_len(m) == 16 ? MSG_IPSK_16 : MSG_IPSK_32];
	memcpy(out, &a, sizeof a);
	OPENSSL_cleanse(&a, sizeof a);
	return why;
}

static int init(in_conn *ic)
{
	ss_in *v = ic->state;
	ss_server_init(&v->core, (const ss_account *)ic->in->accounts, ic->in->n_accounts,
	               ic->in->shared ? replay : NULL, ic->in->shared);
	in_conn_close_time_start(ic); /* fewer bytes than the salt close as a refusal does */
	return 0;
}

static ssize_t feed(in_conn *ic, const uint8_t *in, size_t len, proto_event *ev)
{
	ss_in *v = ic->state;
	ssize_t n = ss_server_feed(&v->core, in, len, (int64_t)time(NULL), &ic->out, ev);
	if (n >= 0 && ev->kind == PROTO_EV_OPEN)
		in_conn_close_time_stop(ic);
	return n;
}

/* Room for what followed the address in the first chunk, after the
 * plaintext a sniff's peek held. */
#define REST_MAX (SS_PEEK_MAX + SS_CHUNK_PAYLOAD_MAX)

/* The body codec goes on top of the upstream's stack, so the relay moves
 * the client's chunks through it. On a plain upstream a new stack's start
 * sends the first chunk's rest; on a stacked one (a proxy outbound) the
 * stack started already, so the rest is sent through it before the push. */
static int push_body(ss_in *v, endpoint *ep)
{
	uint8_t salt[SS_KEY_MAX];
	if (RAND_bytes(salt, sizeof salt) != 1)
		return -1;
	layer *l = ss_server_body_new(&v->core, salt, (int64_t)time(NULL));
	if (!l)
		return -1;
	stack *st = endpoint_stack(ep);
	if (st) {
		uint8_t *rest = malloc(REST_MAX);
		layer_buf b = {rest, 0, rest ? REST_MAX : 0};
		/* the rest must be in the layers before the body layer goes on
		 * top (endpoint_held): a fresh stack has the room for it */
		int bad = !rest || l->ops->start(l, &b) ||
		          (b.len && endpoint_send_all(ep, rest, b.len)) || endpoint_held(ep);
		free(rest);
		if (bad) {
			l->ops->free(l);
			return -1;
		}
		return stack_push(st, l);
	}
	return in_conn_start_upstream(ep, l);
}

static int opened(in_conn *ic, const connect_result *r)
{
	ss_in *v = ic->state;
	if (r && r->ep && push_body(v, r->ep))
		return -1;
	ss_server_free(&v->core); /* a blackhole swallows the rest */
	return 0;
}

/* Shadowsocks answers nothing, so every OPEN may wait for a sniff; its
 * bytes are sealed, so the sniff reads what peek opens. */
static bool sniffs(in_conn *ic)
{
	(void)ic;
	return true;
}

static ssize_t peek(in_conn *ic, const uint8_t *in, size_t len, const uint8_t **plain,
                    size_t *plain_len)
{
	ss_in *v = ic->state;
	return ss_server_peek(&v->core, in, len, plain, plain_len);
}

static void free_state(in_conn *ic)
{
	ss_in *v = ic->state;
	ss_server_free(&v->core);
	OPENSSL_cleanse(&v->core, sizeof v->core);
}

const inbound_proto_ops ss_in_ops = {
	.size = sizeof(ss_in),
	.account_size = sizeof(ss_account),
	.account = account,
	.shared_new = shared_new,
	.shared_free = inbound_locked_free,
	.init = init,
	.feed = feed,
	.refused = in_conn_drain,
	.sniffs = sniffs,
	.peek = peek,
	.opened = opened,
	.free = free_state,
};
