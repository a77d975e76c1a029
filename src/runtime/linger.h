/* linger.h - lingering close: a client socket closed right after our own answer lives on, our side shut, until the client has stopped sending. */
#ifndef ETM_RUNTIME_LINGER_H
#define ETM_RUNTIME_LINGER_H

#include <uv.h>

#include "runtime/worker.h"

/* How long a lingering socket waits for the client's FIN (nginx's
 * lingering_timeout is 5 s; an answer the client is still uploading past
 * needs only its in-flight bytes drained). */
#define LINGER_MS 2000

/* Client bytes read and dropped before a lingering socket closes anyway:
 * a client that keeps uploading is not served for free. */
#define LINGER_BYTES (1024 * 1024)

/* Lingering sockets a worker holds at most; past it a close is immediate
 * (and may reset, as before). */
#define LINGER_MAX 256

/* The connection on client is about to close after the proxy's own answer
 * (a 400, a 502, a SOCKS refusal) was written. close(2) with client bytes
 * still unread makes the kernel send a reset, and a reset makes the
 * client's kernel drop the answer it has not read yet. So the socket gets a
 * descriptor of its own (dup) that shuts our side down (FIN after the
 * answer) and reads and drops what the client still sends until its FIN,
 * an error, LINGER_MS or LINGER_BYTES. The caller then closes client as
 * usual. Nothing happens when descriptors or memory are short, or the
 * worker already lingers LINGER_MAX sockets. Worker thread only. */
void linger_start(worker *w, uv_tcp_t *client);

/* Ends every lingering socket of w at once (the worker stops). */
void linger_close_all(worker *w);

#endif
