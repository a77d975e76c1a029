/* udp_batch.c - one sendmmsg(2) for the datagrams a uv_udp_t is given during a loop iteration. */
#include "runtime/udp_batch.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void on_kick(uv_idle_t *h)
{
	udp_batch_flush((udp_batch *)((char *)h - offsetof(udp_batch, kick)));
}

void udp_batch_init(udp_batch *b, uv_udp_t *sock)
{
	b->sock = sock;
	b->q = NULL;
	b->used = 0;
	b->n = 0;
	(void)uv_idle_init(sock->loop, &b->kick);
	b->kick.data = sock->data; /* what the owner's close callback looks for */
}

static socklen_t addr_len(const struct sockaddr *sa)
{
	return sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

static int send_now(uv_udp_t *sock, const uint8_t *data, size_t len, const struct sockaddr *to)
{
	uv_buf_t buf = uv_buf_init((char *)data, (unsigned)len);
	return uv_udp_try_send(sock, &buf, 1, to) == (int)len ? 0 : -1;
}

void udp_batch_flush(udp_batch *b)
{
	size_t n = b->n, done = 0;
	if (!n)
		return;
	uv_os_fd_t fd;
	if (uv_fileno((const uv_handle_t *)b->sock, &fd) == 0)
		while (done < n) {
			int r = sendmmsg(fd, b->q->msgs + done, (unsigned)(n - done), MSG_DONTWAIT);
			if (r > 0)
				done += (size_t)r;
			else if (r < 0 && errno == EINTR)
				continue;
			else if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS))
				break;
			else
				done++; /* msgs[done] was refused (as uv_udp_try_send would be): dropped */
		}
	/* What the socket would not take now goes one by one, the way it went
	 * before the batch: each still refused is dropped, each taken goes. */
	for (; done < n; done++)
		(void)send_now(b->sock, b->q->iov[done].iov_base, b->q->iov[done].iov_len,
		               (const struct sockaddr *)&b->q->to[done]);
	b->n = 0;
	b->used = 0;
	/* The queue is held only while datagrams wait: an association keeps
	 * none of it between its bursts. */
	free(b->q);
	b->q = NULL;
	(void)uv_idle_stop(&b->kick);
}

int udp_batch_send(udp_batch *b, const uint8_t *data, size_t len, const struct sockaddr *to)
{
	if (b->n == UDP_BATCH_MAX || b->used + len > UDP_BATCH_BYTES)
		udp_batch_flush(b);
	if (!b->q && len <= UDP_BATCH_BYTES)
		b->q = malloc(sizeof *b->q);
	if (!b->q || len > UDP_BATCH_BYTES) {
		/* alone, after what waits: without memory, or too long to queue */
		udp_batch_flush(b);
		return send_now(b->sock, data, len, to);
	}
	size_t i = b->n++;
	uint8_t *at = b->q->bytes + b->used;
	if (len)
		memcpy(at, data, len);
	b->used += len;
	socklen_t tl = addr_len(to);
	memcpy(&b->q->to[i], to, tl);
	b->q->iov[i] = (struct iovec){.iov_base = at, .iov_len = len};
	b->q->msgs[i] = (struct mmsghdr){.msg_hdr = {.msg_name = &b->q->to[i], .msg_namelen = tl,
	                                          .msg_iov = &b->q->iov[i], .msg_iovlen = 1}};
	if (i == 0)
		(void)uv_idle_start(&b->kick, on_kick);
	return 0;
}

void udp_batch_close(udp_batch *b, uv_close_cb cb)
{
	udp_batch_flush(b);
	uv_close((uv_handle_t *)&b->kick, cb);
}
