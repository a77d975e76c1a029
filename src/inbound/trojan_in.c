/* trojan_in.c - the Trojan inbound: password hashes, the fallback for what is not Trojan, UDP framed in the stream. */
#include "inbound/trojan_in.h"

#include "inbound/stream_udp_in.h"
#include "proto/trojan.h"

enum { MSG_PASSWORD };
static const char *const msgs[] = {
	[MSG_PASSWORD] = "cannot hash a password",
};

typedef struct trojan_in {
	trojan_server core;
	stream_udp_in udp; /* after a UDP request */
} trojan_in;

/* An account is hex(SHA-224(password)), as the core compares it. */
static const char *account(const inbound_user *u, uint8_t *out)
{
	return trojan_password_hash(u->password, (char *)out) ? msgs[MSG_PASSWORD] : NULL;
}

static int init(in_conn *ic)
{
	trojan_in *t = ic->state;
	trojan_server_init(&t->core, (const uint8_t(*)[TROJAN_HASH_LEN])ic->in->accounts,
	                   ic->in->n_accounts);
	return 0;
}

static ssize_t feed(in_conn *ic, const uint8_t *in, size_t len, proto_event *ev)
{
	trojan_in *t = ic->state;
	if (t->udp.link)
		return stream_udp_in_feed(&t->udp, in, len, ev);
	return trojan_server_feed(&t->core, in, len, &ic->out, ev);
}

/* What is not Trojan goes to the fallback, to look like the web server
 * behind it (trojan.h, "The fallback contract"). */
static bool wants_fallback(in_conn *ic)
{
	trojan_in *t = ic->state;
	return trojan_server_wants_fallback(&t->core);
}

/* A peer that stalls before a decision is a prober too: it goes to the
 * fallback, like any other bytes that are not Trojan. */
static int timeout(in_conn *ic, proto_event *ev)
{
	trojan_in *t = ic->state;
	return trojan_server_timeout(&t->core, ev);
}

/* Trojan answers nothing: a flow may wait for a sniff of its first bytes
 * (often in the same segment as the request) before it is dialled. */
static bool sniffs(in_conn *ic)
{
	(void)ic;
	return true;
}

static int opened(in_conn *ic, const connect_result *r)
{
	(void)ic;
	(void)r;
	return 0;
}

static const stream_udp_codec codec = {.decode = trojan_udp_decode, .encode = trojan_udp_encode};

static void udp_open(in_conn *ic, const proto_event *ev)
{
	trojan_in *t = ic->state;
	if (stream_udp_in_start(&t->udp, ic, ev, &codec))
		return; /* the end is logged, the connection closing */
}

static void free_state(in_conn *ic)
{
	trojan_in *t = ic->state;
	stream_udp_in_stop(&t->udp);
}

const inbound_proto_ops trojan_in_ops = {
	.size = sizeof(trojan_in),
	.account_size = TROJAN_HASH_LEN,
	.account = account,
	.init = init,
	.feed = feed,
	.wants_fallback = wants_fallback,
	.timeout = timeout,
	.sniffs = sniffs,
	.opened = opened,
	.udp_open = udp_open,
	.free = free_state,
};
