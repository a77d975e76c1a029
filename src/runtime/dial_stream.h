/* dial_stream.h - dialing through layers: TCP connect, then the stack's handshake (TLS, WebSocket, a proxy request) until it is ready and flushed. */
#ifndef ETM_RUNTIME_DIAL_STREAM_H
#define ETM_RUNTIME_DIAL_STREAM_H

#include "runtime/connector.h"
#include "runtime/dial.h"
#include "transport/stack.h"

/* The whole layered handshake, after the TCP connect, may take this long. */
#define DIAL_HANDSHAKE_MS 10000

/* Connects to server like dial_tcp, then puts st (which it takes over in
 * every case) on the endpoint and moves its handshake until every layer is
 * ready and its output is written. Only then does cb report success, with
 * the endpoint (seed 000: a proxy dial completes after the transport handshake,
 * the protocol request and its flush, so a refused upstream fails the
 * connect). Failures read "<layer>: <reason>", "<layer>: server closed
 * during the handshake" or "<layer>: handshake timed out". Callback contract
 * as dial_tcp. */
connect_pending *dial_stream(worker *w, dns_resolver *dns, const addr_dest *server,
                             dial_family af, uint64_t origin, stack *st, connect_cb cb,
                             void *data);

#endif
