/* inbound.h - the server drivers of socks, http and mixed inbounds over the connection shell. */
#ifndef ETM_INBOUND_INBOUND_H
#define ETM_INBOUND_INBOUND_H

#include <uv.h>

#include "etemenanki/spec.h"
#include "runtime/conn.h"
#include "runtime/connector.h"
#include "runtime/listener.h"

/* One inbound as the workers run it. Immutable once the listeners are
 * open; shared by every worker. */
typedef struct inbound_rt {
	const etm_inbound_spec *spec; /* borrowed for the inbound's life */
	const connector *connect;     /* borrowed */
	conn_limits limits;
} inbound_rt;

/* A listener_fn: accepts the waiting connection and drives its handshake
 * with the inbound's protocol. data is the inbound_rt. */
void inbound_accept(listener *l, uv_stream_t *server, void *data);

#endif
