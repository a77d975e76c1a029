/* gun_conn.h - many gRPC ("gun") flows on one HTTP/2 connection: the connection's endpoint below, each flow an endpoint on a channel (one stream), client and server. */
#ifndef ETM_RUNTIME_GUN_CONN_H
#define ETM_RUNTIME_GUN_CONN_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/connector.h"
#include "runtime/dial.h"
#include "runtime/dns.h"
#include "runtime/endpoint.h"
#include "runtime/worker.h"

/* The call and its Hunk messages are transport/grpc.h's and gun.h's: this
 * shell runs them for many streams at once.
 *
 * Client. A flow opens a stream on a connection of this worker to the same
 * outbound version (its origin) that is up, has not been told to go away
 * (GOAWAY), and carries fewer than GUN_STREAMS_MAX flows (and fewer than
 * the server's SETTINGS_MAX_CONCURRENT_STREAMS); otherwise it dials a new
 * connection. A connection that dies ends only its streams; one with no
 * flow for GUN_IDLE_MS closes.
 *
 * Server. Every stream to /<service_name>/Tun becomes a flow of its own;
 * others are answered (grpc-status 12, :status 405 or 415) and logged at
 * debug as "grpc: refused a call from <peer>: <why>". At most
 * GUN_SERVER_STREAMS flows run at once on a connection
 * (SETTINGS_MAX_CONCURRENT_STREAMS); a connection with none closes after
 * its handshake bound at first, and after GUN_IDLE_MS later.
 *
 * Flow control. Each stream's window is GUN_STREAM_WINDOW, the
 * connection's GUN_CONN_WINDOW; a stream's window reopens only as its
 * flow's owner takes the bytes, so a slow reader stops its own stream, not
 * the others. */

#define GUN_STREAMS_MAX 64
#define GUN_SERVER_STREAMS 128
#define GUN_IDLE_MS 60000
#define GUN_STREAM_WINDOW (256 * 1024)
#define GUN_CONN_WINDOW (4 * 1024 * 1024)

typedef struct tls_client_ctx tls_client_ctx;

/* A client's transport, borrowed for the call (gun_open copies it). */
typedef struct gun_client_config {
	addr_dest server;
	dial_family af;
	uint64_t origin;      /* the outbound version: connections are shared within it */
	tls_client_ctx *tls;  /* NULL: h2c */
	const char *tls_name; /* with tls */
	const char *service;  /* service_name */
	const char *host;     /* :authority */
} gun_client_config;

/* Opens a flow whose endpoint carries st (the proxy protocol's layers,
 * taken in every case) on a stream, as dial_stream does on a socket: cb
 * gets the endpoint once its layers are ready and their first bytes are
 * taken. Failures read "grpc: ..." or the dial's text. Callback contract
 * as dial_tcp. */
connect_pending *gun_open(worker *w, dns_resolver *dns, const gun_client_config *cfg, stack *st,
                          connect_cb cb, void *data);

/* A server connection's owner. accept gets each flow's endpoint (its
 * events nowhere until set); release runs once, when the connection is
 * gone. */
typedef struct gun_server_config {
	const char *service; /* borrowed for the call */
	uint64_t handshake_ms; /* the first call must come within it; 0: GUN_IDLE_MS */
	void (*accept)(void *ud, endpoint *flow);
	void (*release)(void *ud);
	void *ud;
} gun_server_config;

/* Serves the HTTP/2 connection on below (an accepted endpoint, its TLS
 * layers on it), which it takes in every case. Returns 0, or -1 when
 * memory runs out (below is closed and release has run). */
int gun_serve(worker *w, endpoint *below, const gun_server_config *cfg);

/* Closes every connection of the worker's (a stop ends the flows). */
void gun_close_all(worker *w);

/* The worker's server connections open now (an upgrade's drain waits for
 * them). Worker thread only. */
size_t gun_server_count(worker *w);

#endif
