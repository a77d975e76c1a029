/* freedom_udp.c - direct UDP with per-link name resolution, and the blackhole link. */
#include "outbound/freedom_udp.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/log.h"
#include "runtime/udp_batch.h"

/* Datagrams one wake-up may take with recvmmsg(2) (libuv's UV_UDP_RECVMMSG
 * splits the buffer into 64 KiB chunks). The kernel writes only what
 * arrives: small datagrams keep about a page a chunk resident. */
#define FREEDOM_UDP_MMSG 8
#define FREEDOM_UDP_CHUNK (64 * 1024)

enum { MSG_NO_SOCKET, MSG_NO_FAMILY, MSG_UNRESOLVABLE, MSG_NO_ADDRESS, MSG_COUNT_ };
static const char *const msgs[MSG_COUNT_] = {
	[MSG_NO_SOCKET] = "udp: no usable local socket in any requested family",
	[MSG_NO_FAMILY] = "udp: no local socket in the family of %s",
	[MSG_UNRESOLVABLE] = "freedom: dropping a datagram to an unresolvable %s: %s",
	[MSG_NO_ADDRESS] = "no address in a usable family",
};

typedef struct name_entry {
	char name[ADDR_DOMAIN_MAX + 1];
	bool resolved;
	struct sockaddr_storage addr; /* when resolved */
	dns_query *q;                 /* when resolving */
	uint8_t *held;                /* one datagram waiting for the answer */
	size_t held_len;
	uint16_t held_port;
	struct freedom_udp *link;
} name_entry;

typedef struct freedom_udp {
	dgram_link base;
	worker *w;
	dns_resolver *dns;
	dial_family af;
	dgram_recv_cb cb;
	void *ud;
	uv_udp_t sock[2]; /* [0] v4, [1] v6 */
	bool has[2];
	udp_batch out[2]; /* datagrams of one loop iteration for sock[i], when has[i] */
	int open_handles; /* sockets and batches not yet closed */
	bool closing;
	/* DGRAM_HEADROOM + FREEDOM_UDP_MMSG chunks of 64 KiB, shared by both
	 * sockets: one recvmmsg(2) fills a datagram a chunk. A receiver may
	 * write DGRAM_HEADROOM bytes before its datagram: for a chunk after
	 * the first that is the end of the previous chunk, whose datagram
	 * (libuv hands the chunks over in order) was delivered already. */
	uint8_t *buf;
	name_entry names[FREEDOM_UDP_MAX_NAMES];
	size_t next_name; /* round-robin slot to reuse when full */
} freedom_udp;

static int fam_index(int family) { return family == AF_INET6 ? 1 : 0; }

static int send_addr(freedom_udp *f, const struct sockaddr_storage *ss, const uint8_t *data,
                     size_t len)
{
	int i = fam_index(ss->ss_family);
	if (!f->has[i]) {
		if (log_get_level() >= LOG_LEVEL_DEBUG) {
			addr_dest d = {0};
			char text[ADDR_TEXT_MAX] = "?";
			if (addr_dest_from_sockaddr(&d, (const struct sockaddr *)ss) == 0)
				addr_dest_format(&d, text, sizeof text);
			log_debug("outbound", msgs[MSG_NO_FAMILY], text);
		}
		return -1;
	}
	return udp_batch_send(&f->out[i], data, len, (const struct sockaddr *)ss);
}

static void set_port(struct sockaddr_storage *ss, uint16_t port)
{
	if (ss->ss_family == AF_INET)
		((struct sockaddr_in *)ss)->sin_port = htons(port);
	else
		((struct sockaddr_in6 *)ss)->sin6_port = htons(port);
}

static void on_resolved(int st, const struct sockaddr_storage *addrs, size_t n, void *data)
{
	name_entry *e = data;
	freedom_udp *f = e->link;
	e->q = NULL;
	/* the first address in the link's preferred order that has a socket */
	struct sockaddr_storage c[16];
	size_t k = 0;
	for (size_t i = 0; st == DNS_OK && i < n && k < 16; i++)
		if (f->has[fam_index(addrs[i].ss_family)])
			c[k++] = addrs[i];
	if (k > 1 && (f->af == DIAL_FAMILY_PREFER_IPV6 || f->af == DIAL_FAMILY_PREFER_IPV4)) {
		int want = f->af == DIAL_FAMILY_PREFER_IPV6 ? AF_INET6 : AF_INET;
		for (size_t i = 0; i < k; i++)
			if (c[i].ss_family == want) {
				c[0] = c[i];
				break;
			}
	}
	if (k == 0) {
		log_debug("outbound", msgs[MSG_UNRESOLVABLE], e->name,
		          st == DNS_OK ? msgs[MSG_NO_ADDRESS] : dns_strerror(st));
		free(e->held);
		e->held = NULL;
		e->name[0] = '\0'; /* forget: a later datagram asks again */
		return;
	}
	e->resolved = true;
	e->addr = c[0];
	if (e->held) {
		struct sockaddr_storage to = e->addr;
		set_port(&to, e->held_port);
		(void)send_addr(f, &to, e->held, e->held_len);
		free(e->held);
		e->held = NULL;
	}
}

static void forget(name_entry *e)
{
	if (e->q)
		dns_query_cancel(e->q);
	free(e->held);
	memset(e, 0, sizeof *e);
}

static int send_name(freedom_udp *f, const addr_dest *to, const uint8_t *data, size_t len)
{
	name_entry *e = NULL;
	for (size_t i = 0; i < FREEDOM_UDP_MAX_NAMES; i++)
		if (f->names[i].name[0] && strcasecmp(f->names[i].name, to->u.domain.name) == 0) {
			e = &f->names[i];
			break;
		}
	if (e && e->resolved) {
		struct sockaddr_storage ss = e->addr;
		set_port(&ss, to->port);
		return send_addr(f, &ss, data, len);
	}
	if (e)
		return -1; /* still resolving, one datagram already held */
	for (size_t i = 0; i < FREEDOM_UDP_MAX_NAMES && !e; i++)
		if (!f->names[i].name[0])
			e = &f->names[i];
	if (!e) {
		e = &f->names[f->next_name];
		f->next_name = (f->next_name + 1) % FREEDOM_UDP_MAX_NAMES;
		forget(e);
	}
	memcpy(e->name, to->u.domain.name, (size_t)to->u.domain.len + 1);
	e->link = f;
	e->held = malloc(len ? len : 1);
	if (e->held) {
		memcpy(e->held, data, len);
		e->held_len = len;
		e->held_port = to->port;
	}
	e->q = dns_resolve(f->dns, e->name, on_resolved, e);
	if (!e->q) {
		forget(e);
		return -1;
	}
	return 0;
}

static int fu_send_to(dgram_link *l, const addr_dest *to, const uint8_t *data, size_t len)
{
	freedom_udp *f = (freedom_udp *)l;
	if (f->closing || len > DGRAM_MAX)
		return -1;
	if (to->kind == ADDR_DOMAIN)
		return send_name(f, to, data, len);
	struct sockaddr_storage ss;
	if (!addr_dest_to_sockaddr(to, &ss))
		return -1;
	return send_addr(f, &ss, data, len);
}

static void on_closed(uv_handle_t *h)
{
	freedom_udp *f = h->data;
	if (--f->open_handles == 0) {
		free(f->buf);
		free(f);
	}
}

static void fu_close(dgram_link *l)
{
	freedom_udp *f = (freedom_udp *)l;
	if (f->closing)
		return;
	f->closing = true;
	for (size_t i = 0; i < FREEDOM_UDP_MAX_NAMES; i++)
		forget(&f->names[i]);
	for (int i = 0; i < 2; i++)
		if (f->has[i]) {
			udp_batch_close(&f->out[i], on_closed); /* what waits goes first */
			uv_close((uv_handle_t *)&f->sock[i], on_closed);
		}
	if (f->open_handles == 0) {
		free(f->buf);
		free(f);
	}
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	(void)suggested;
	freedom_udp *f = h->data;
	buf->base = (char *)f->buf + DGRAM_HEADROOM;
	buf->len = FREEDOM_UDP_MMSG * FREEDOM_UDP_CHUNK;
}

static void recv_cb(uv_udp_t *h, ssize_t n, const uv_buf_t *buf, const struct sockaddr *from,
                    unsigned flags)
{
	freedom_udp *f = h->data;
	if (n <= 0 || !from || (flags & UV_UDP_PARTIAL) || f->closing)
		return;
	addr_dest src = {.network = ADDR_UDP};
	if (addr_dest_from_sockaddr(&src, from))
		return;
	f->cb(&src, (uint8_t *)buf->base, (size_t)n, f->ud);
}

static const dgram_link_ops freedom_ops = {.send_to = fu_send_to, .close = fu_close};

dgram_link *freedom_udp_open(worker *w, dns_resolver *dns, dial_family af,
                             const dgram_handlers *h, void *ud, char *err, size_t err_size)
{
	freedom_udp *f = calloc(1, sizeof *f);
	uint8_t *buf = malloc(DGRAM_HEADROOM + FREEDOM_UDP_MMSG * FREEDOM_UDP_CHUNK);
	if (!f || !buf) {
		free(f);
		free(buf);
		snprintf(err, err_size, "%s", msgs[MSG_NO_SOCKET]);
		return NULL;
	}
	*f = (freedom_udp){.base.ops = &freedom_ops, .w = w, .dns = dns, .af = af, .cb = h->recv,
	                   .ud = ud, .buf = buf};
	bool want[2] = {af != DIAL_FAMILY_IPV6_ONLY, af != DIAL_FAMILY_IPV4_ONLY};
	for (int i = 0; i < 2; i++) {
		if (!want[i])
			continue;
		struct sockaddr_storage any;
		if (i == 0)
			uv_ip4_addr("0.0.0.0", 0, (struct sockaddr_in *)&any);
		else
			uv_ip6_addr("::", 0, (struct sockaddr_in6 *)&any);
		uv_udp_init_ex(worker_loop(w), &f->sock[i], AF_UNSPEC | UV_UDP_RECVMMSG);
		f->sock[i].data = f;
		f->open_handles++;
		if (uv_udp_bind(&f->sock[i], (struct sockaddr *)&any, i ? UV_UDP_IPV6ONLY : 0) ||
		    uv_udp_recv_start(&f->sock[i], alloc_cb, recv_cb)) {
			uv_close((uv_handle_t *)&f->sock[i], on_closed);
			continue;
		}
		f->has[i] = true;
		udp_batch_init(&f->out[i], &f->sock[i]);
		f->open_handles++;
	}
	if (!f->has[0] && !f->has[1]) {
		snprintf(err, err_size, "%s", msgs[MSG_NO_SOCKET]);
		f->closing = true;
		if (f->open_handles == 0) {
			free(f->buf);
			free(f);
		}
		return NULL;
	}
	return &f->base;
}

/* ---- blackhole ---- */

static int bh_send_to(dgram_link *l, const addr_dest *to, const uint8_t *data, size_t len)
{
	(void)l;
	(void)to;
	(void)data;
	(void)len;
	return 0; /* reported as sent in full, like BlackholeLink */
}

static void bh_close(dgram_link *l) { (void)l; }

static const dgram_link_ops blackhole_ops = {.send_to = bh_send_to, .close = bh_close};
static dgram_link blackhole_link = {.ops = &blackhole_ops};

dgram_link *blackhole_udp_open(void) { return &blackhole_link; }
