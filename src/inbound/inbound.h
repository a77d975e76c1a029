/* inbound.h - an inbound's listener side: its run-time parts and the driver of every connection it accepts. */
#ifndef ETM_INBOUND_INBOUND_H
#define ETM_INBOUND_INBOUND_H

#include <uv.h>

#include "etemenanki/spec.h"
#include "proto/proto.h"
#include "runtime/conn.h"
#include "runtime/connector.h"
#include "runtime/listener.h"

/* One inbound as the workers run it. Immutable once the listeners are
 * open; shared by every worker. */
typedef struct tls_server_ctx tls_server_ctx;

typedef struct inbound_rt {
	const etm_inbound_spec *spec; /* borrowed for the inbound's life */
	const connector *connect;     /* borrowed */
	conn_limits limits;

	/* Built by inbound_rt_build from the spec, released by inbound_rt_free. */
	tls_server_ctx *tls;  /* a reference; NULL: no TLS */
	bool ws;              /* a WebSocket transport on spec->stream.ws.path */
	uint8_t *accounts;    /* owned: one credential per user, made by the
	                       * protocol's row (Trojan password hashes, VLESS
	                       * UUIDs); NULL: none */
	proto_account *logins; /* owned array: SOCKS/HTTP accounts, n_logins of them */
	size_t n_logins;
	bool has_fallback;
	addr_dest fallback;   /* where what the protocol refuses goes (Trojan) */
} inbound_rt;

/* Builds the run-time parts of an inbound (TLS context, credentials). On
 * the control thread, before the listeners open. Returns 0 or -1 with
 * "inbound <tag>: <reason>" in err. */
__attribute__((warn_unused_result)) int inbound_rt_build(inbound_rt *in, char *err,
                                                         size_t err_size);
void inbound_rt_free(inbound_rt *in);

/* A listener_fn: accepts the waiting connection and drives its handshake
 * with the inbound's protocol. data is the inbound_rt. */
void inbound_accept(listener *l, int fd, void *data);

#endif
