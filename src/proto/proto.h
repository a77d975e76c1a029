/* proto.h - the vocabulary every sans-io server core shares with the connection shell. */
#ifndef ETM_PROTO_PROTO_H
#define ETM_PROTO_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/addr.h"

/* A server core is fed the client's bytes and answers with bytes for the
 * client (written into a proto_out the shell owns) and at most one event per
 * call. It never touches a socket, a clock or a random source.
 *
 *   n = X_server_feed(core, in, len, &out, &ev);
 *     n >= 0: n bytes of in were consumed; send out.buf[0, out.len) to the
 *             client; then act on ev.
 *     n < 0:  PROTO_ERR_* (the shell closes; out may still hold a reply to
 *             send first, e.g. a SOCKS refusal).
 *
 * After PROTO_EV_OPEN the shell dials ev.dest and reports the result with
 * X_server_opened() or X_server_failed(), which write the protocol's reply
 * into out. Bytes left unconsumed after the open are the client's first
 * payload bytes. */

/* Largest reply a core writes in one call: a SOCKS5 reply is at most 262
 * bytes, an HTTP error answer with its reason well under 1 KiB. */
#define PROTO_OUT_MAX 2048

typedef struct proto_out {
	uint8_t buf[PROTO_OUT_MAX];
	size_t len;
} proto_out;

typedef enum proto_cmd {
	PROTO_CMD_CONNECT,
	PROTO_CMD_UDP_ASSOCIATE,
} proto_cmd;

typedef enum proto_event_kind {
	PROTO_EV_NONE,  /* nothing yet: feed more bytes */
	PROTO_EV_OPEN,  /* the request is complete: dial ev.dest for ev.cmd */
	PROTO_EV_CLOSE, /* send out, then close: a refusal the protocol answers */
} proto_event_kind;

typedef struct proto_event {
	proto_event_kind kind;
	proto_cmd cmd;
	addr_dest dest;
	int user;           /* index of the authenticated account, -1 for none */
	const char *reason; /* PROTO_EV_CLOSE: why, for a debug log line (static text) */
} proto_event;

/* Why a dial failed; each core maps it to its own reply (SOCKS5 REP codes,
 * HTTP 502 / 504). */
typedef enum proto_dial_error {
	PROTO_DIAL_GENERAL,          /* anything else */
	PROTO_DIAL_NOT_ALLOWED,      /* blocked by a rule */
	PROTO_DIAL_NET_UNREACHABLE,
	PROTO_DIAL_HOST_UNREACHABLE, /* includes a name that does not resolve */
	PROTO_DIAL_REFUSED,
	PROTO_DIAL_TIMED_OUT,
} proto_dial_error;

/* How many kinds there are (a counter per kind: supervisor/counters.c);
 * a kind added after PROTO_DIAL_TIMED_OUT moves this. */
#define PROTO_DIAL_ERR_KINDS (PROTO_DIAL_TIMED_OUT + 1)

/* One account a core checks credentials against (SOCKS5 RFC 1929, HTTP
 * Basic). The strings are not NUL-terminated for the core: it reads
 * user[0, user_len) and pass[0, pass_len). A NULL user never matches; a NULL
 * pass never matches in SOCKS and is the empty password in HTTP. The core
 * borrows the array and its strings; whoever builds the inbound owns them
 * (supervisor/build_inbound.c copies them out of the config). */
typedef struct proto_account {
	const char *user;
	const char *pass;
	size_t user_len;
	size_t pass_len;
} proto_account;

/* Errors the cores return. */
enum {
	PROTO_ERR_MALFORMED = -1, /* bytes that are not this protocol */
	PROTO_ERR_TOO_BIG = -2,   /* a handshake larger than the core's bound */
	PROTO_ERR_STATE = -3,     /* a call that does not fit the core's state */
};

#endif
