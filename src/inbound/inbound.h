/* inbound.h - an inbound's listener side: its run-time parts and the driver of every connection it accepts. */
#ifndef ETM_INBOUND_INBOUND_H
#define ETM_INBOUND_INBOUND_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "base/addr.h"
#include "proto/proto.h"
#include "runtime/conn.h"
#include "runtime/connector.h"
#include "runtime/listener.h"
#include "runtime/principal.h"

/* The server protocol an inbound speaks. NONE: one without a connection
 * driver here (udp_lb has its own listener). */
typedef enum inbound_protocol {
	INBOUND_PROTO_NONE,
	INBOUND_PROTO_SOCKS,
	INBOUND_PROTO_HTTP,
	INBOUND_PROTO_MIXED, /* SOCKS or HTTP by the first byte */
	INBOUND_PROTO_TROJAN,
	INBOUND_PROTO_VLESS,
	INBOUND_PROTO_VMESS,
	INBOUND_PROTO_SHADOWSOCKS,
	INBOUND_PROTO_COUNT_,
} inbound_protocol;

/* One configured user as inbound_rt_build reads it: username/password for
 * SOCKS and HTTP, password for Trojan, id (a UUID) for VLESS and VMess,
 * method (its name) and password for Shadowsocks; unused fields NULL.
 * Borrowed for the call only. */
typedef struct inbound_user {
	const char *username;
	const char *password;
	const char *id;
	const char *method;
	const char *identity; /* shadowsocks 2022, several users: the server's iPSK (SIP022-2) */
	const char *name; /* what the access log calls the user; NULL: nothing */
	uint64_t up_rate, down_rate; /* bytes a second; 0: no limit */
	uint64_t max_sessions;       /* 0: no limit */
} inbound_user;

typedef struct tls_server_ctx tls_server_ctx;

/* One inbound as the workers run it. Immutable once the listeners are
 * open; shared by every worker. It owns everything it points to but
 * connect, so the config it came from may be freed while its connections
 * drain (supervisor/build_inbound.c fills it from the config). */
typedef struct inbound_rt {
	atomic_uint refs;           /* inbound_rt_hold: its owner's and its connections' */
	char *tag;                  /* owned; NULL: the inbound has none */
	inbound_protocol protocol;
	bool sniffing;              /* sniff the first bytes of a stream for its host */
	const connector *connect;   /* borrowed */
	conn_limits limits;
	tls_server_ctx *tls;        /* a reference; NULL: no TLS */
	char *ws_path;              /* owned; NULL: no WebSocket transport */
	char *grpc_service;         /* owned; NULL: no gRPC transport */

	/* Made by inbound_rt_build, released by inbound_rt_free. */
	proto_account *logins;      /* owned, strings too: SOCKS/HTTP accounts */
	size_t n_logins;
	char **user_names;          /* owned, strings too: by user index, NULL
	                             * entries for users without a name */
	size_t n_user_names;
	principal **principals;     /* references, by user index (n_user_names of
	                             * them): who each user's flows belong to */
	uint8_t *accounts;          /* owned: one credential per user, made by the
	                             * protocol's row (Trojan password hashes, VLESS
	                             * UUIDs, VMess keys); NULL: none */
	size_t n_accounts;
	void *shared;               /* owned: the row's shared_new state (VMess's
	                             * replay filter); NULL: none */
	bool has_fallback;
	addr_dest fallback;         /* where what the protocol refuses goes (Trojan) */
} inbound_rt;

/* The protocol's part of building an inbound whose tag and protocol are
 * set: copies users[0, n_users) as logins, makes the row's credentials,
 * and parses fallback (host:port; NULL for none) when the row has one. On
 * the control thread, before the listeners open. Returns 0 or -1 with
 * "inbound <tag>: <reason>" in err; inbound_rt_free undoes either. */
__attribute__((warn_unused_result)) int inbound_rt_build(inbound_rt *in, const inbound_user *users,
                                                         size_t n_users, const char *fallback,
                                                         char *err, size_t err_size);

/* Releases what in owns (a zeroed or half-built in too) and zeroes it. */
void inbound_rt_free(inbound_rt *in);

/* A built inbound is shared by its owner and the connections it accepted,
 * which read it for their whole life while a reload may replace it:
 * inbound_rt_build sets one reference, the owner's, and each connection
 * holds one more. The last release of a malloc'd in frees it
 * (inbound_rt_free, then free); an owner that never releases (a static
 * one) keeps it. Any thread. */
void inbound_rt_hold(const inbound_rt *in);
void inbound_rt_release(const inbound_rt *in);

/* The client speaks first and at once (SOCKS, HTTP, mixed): its listener
 * can wait for the first bytes before the accept (listener_defer_accept). */
bool inbound_client_speaks_first(const inbound_rt *in);

/* A listener_fn: accepts the waiting connection and drives its handshake
 * with the inbound's protocol. data is the inbound_rt. */
void inbound_accept(listener *l, int fd, void *data);

#endif
