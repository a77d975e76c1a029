/* udp_batch.h - datagrams for one uv_udp_t gathered over a loop iteration and sent with one sendmmsg(2). */
#ifndef ETM_RUNTIME_UDP_BATCH_H
#define ETM_RUNTIME_UDP_BATCH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

/* The most datagrams one flush sends: libuv reads up to 32 datagrams a
 * socket a wake-up (uv__udp_recvmsg), so the answers to one wake-up fit. */
#define UDP_BATCH_MAX 32

/* Bytes the queued datagrams may hold together: the largest UDP datagram
 * fits, and 32 datagrams of an Ethernet MTU do too. */
#define UDP_BATCH_BYTES (64 * 1024)

/* libuv 1.44 has no batched send (uv_udp_try_send2 came later), so the
 * datagrams a socket is given during one loop iteration are copied here and
 * leave together on the socket's fd with sendmmsg(2) and MSG_DONTWAIT, from
 * a uv_idle_t: those given during the I/O phase go at the next iteration's
 * idle phase, before the loop polls again; those given in a timer or idle
 * callback go without blocking in between (an active idle handle makes the
 * poll return at once; a uv_check_t would wait for the next event). What
 * the kernel will not take at once goes datagram by datagram through
 * uv_udp_try_send, as without the batch, so order is kept and nothing is
 * dropped that would not have been. A zeroed struct is not valid:
 * udp_batch_init first. Worker thread only. */
/* The waiting datagrams: their copies and sendmmsg's arrays, one block,
 * held only while datagrams wait, so an association between bursts keeps
 * nothing of it (about 71 KiB per socket while it waits). */
typedef struct udp_batch_queue {
	struct mmsghdr msgs[UDP_BATCH_MAX];
	struct iovec iov[UDP_BATCH_MAX];
	struct sockaddr_storage to[UDP_BATCH_MAX];
	uint8_t bytes[UDP_BATCH_BYTES];
} udp_batch_queue;

typedef struct udp_batch {
	uv_udp_t *sock;     /* borrowed: the owner closes it after udp_batch_close */
	uv_idle_t kick;     /* runs while datagrams wait */
	udp_batch_queue *q; /* owned while datagrams wait (freed by a flush) */
	size_t used;        /* bytes of q->bytes the waiting datagrams take */
	size_t n;           /* datagrams waiting */
} udp_batch;

/* Sets b up for sock, on sock's loop. Cannot fail. */
void udp_batch_init(udp_batch *b, uv_udp_t *sock);

/* Sends len bytes of data to `to` through the batch: data is copied, so it
 * need live only during the call. Datagrams queued before go first. Returns
 * 0 when the datagram was queued or sent, -1 when it was dropped now (a
 * datagram longer than UDP_BATCH_BYTES the socket refused). A queued one
 * the kernel later refuses is dropped then, like a refused uv_udp_try_send. */
int udp_batch_send(udp_batch *b, const uint8_t *data, size_t len, const struct sockaddr *to);

/* Sends what waits now. */
void udp_batch_flush(udp_batch *b);

/* Sends what waits, then closes the batch's handle: cb runs with the
 * uv_idle_t's handle once it closed (its data is what udp_batch_init left
 * there: the socket's data). The socket itself is the owner's to close. */
void udp_batch_close(udp_batch *b, uv_close_cb cb);

#endif
