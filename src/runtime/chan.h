/* chan.h - a byte stream carried inside another connection (an HTTP/2 stream, a mux sub-flow): what an endpoint runs on in place of a socket. */
#ifndef ETM_RUNTIME_CHAN_H
#define ETM_RUNTIME_CHAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct endpoint;

/* The carrier's side of a channel. The endpoint calls these from its own
 * calls; the carrier never calls the endpoint back from inside one: what it
 * reports (endpoint_chan_* in endpoint.h) waits for the carrier's next
 * libuv callback, as a socket's events wait for the loop. */
typedef struct chan chan;

typedef struct chan_ops {
	/* Queues d[0, n) toward the peer. The bytes stay the endpoint's, and
	 * in place, until endpoint_chan_written(ep, req, status) says the
	 * carrier is done with them (as a uv_write's buffer). Returns 0, or
	 * -1 when the channel can carry nothing more (then no report follows
	 * for req). */
	int (*write)(chan *c, const uint8_t *d, size_t n, void *req);
	/* While on, the carrier hands what arrives to endpoint_chan_input. */
	void (*read)(chan *c, bool on);
	/* The endpoint's sending side ended, after the writes queued: the
	 * carrier ends the stream's direction toward the peer, then reports
	 * endpoint_chan_shut. Returns 0 or -1. */
	int (*shutdown)(chan *c);
	/* The endpoint closes: the carrier drops the stream (resetting it
	 * unless both directions ended), reports nothing more, and forgets
	 * the buffers of unreported writes. */
	void (*close)(chan *c);
	/* Bytes queued and not yet taken by the carrier. */
	size_t (*queued)(const chan *c);
	/* The addresses of the connection that carries the channel: 0, or -1
	 * when it has none. */
	int (*peername)(const chan *c, struct sockaddr_storage *ss);
	int (*sockname)(const chan *c, struct sockaddr_storage *ss);
} chan_ops;

struct chan {
	const chan_ops *ops;
	struct endpoint *ep; /* set by endpoint_new_chan */
};

#endif
