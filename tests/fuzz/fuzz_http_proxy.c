/* fuzz_http_proxy.c - libFuzzer target: the HTTP proxy core driven from both sides by a fake shell. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/http_proxy.h"

/* The shell's read buffer per direction: must hold a whole head. */
#define BUF (2 * HTTP_HEAD_MAX)

/* Canned messages that take the fuzzer past the first head quickly. */
static const char *const REQUESTS[] = {
	"GET http://a.test/ HTTP/1.1\r\nProxy-Authorization: Basic YWxpY2U6c2VjcmV0\r\n\r\n",
	"POST http://a.test/p HTTP/1.1\r\nProxy-Authorization: Basic YWxpY2U6c2VjcmV0\r\n"
	"Transfer-Encoding: chunked\r\n\r\n",
	"POST http://b.test:81/p HTTP/1.1\r\nProxy-Authorization: Basic Ym9iOnB3\r\n"
	"Content-Length: 7\r\nConnection: x-a\r\nX-A: 1\r\n\r\n",
	"HEAD http://a.test/ HTTP/1.0\r\nProxy-Authorization: Basic YWxpY2U6c2VjcmV0\r\n"
	"Connection: keep-alive\r\n\r\n",
	"CONNECT a.test:443 HTTP/1.1\r\nProxy-Authorization: Basic YWxpY2U6c2VjcmV0\r\n\r\n",
	"GET http://a.test/ HTTP/1.1\r\nProxy-Authorization: Basic YWxpY2U6c2VjcmV0\r\n"
	"Connection: close\r\n\r\n",
};
static const char *const RESPONSES[] = {
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
	"HTTP/1.1 100 Continue\r\n\r\n",
	"HTTP/1.0 200 OK\r\n\r\n",
	"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n",
	"HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n",
};

static const proto_account USERS[] = {
	{.user = "alice", .pass = "secret", .user_len = 5, .pass_len = 6},
	{.user = "bob", .pass = "pw", .user_len = 3, .pass_len = 2},
};

struct shell {
	http_server s;
	uint8_t cbuf[BUF], ubuf[BUF];
	size_t clen, ulen;
	bool dialing, tunnel, closed;
	size_t n_users;
};

static void check(bool ok)
{
	if (!ok)
		abort();
}

static bool has_field(const uint8_t *head, size_t n, const char *lower)
{
	size_t k = strlen(lower);
	for (size_t i = 0; i + k + 1 <= n; i++) {
		if (head[i] != '\n')
			continue;
		size_t j = 0;
		while (j < k && (head[i + 1 + j] | 0x20) == (uint8_t)lower[j])
			j++;
		if (j == k)
			return true;
	}
	return false;
}

/* Every handed-out slice is a head in the core or a piece of in. */
static void drain(struct shell *sh, bool upstream, const uint8_t *in, size_t in_len)
{
	const uint8_t *d;
	size_t n;
	int rounds = 0;
	while (upstream ? http_server_take_upstream(&sh->s, &d, &n)
	                : http_server_take_client(&sh->s, &d, &n)) {
		check(++rounds <= 2 && n > 0);
		if (d >= sh->s.head && d < sh->s.head + sizeof sh->s.head) {
			check(d == sh->s.head && n <= HTTP_OUT_HEAD_MAX && n >= 4);
			check(memcmp(d + n - 4, "\r\n\r\n", 4) == 0);
			if (upstream) {
				check(!has_field(d, n, "proxy-authorization:"));
				check(!has_field(d, n, "upgrade:"));
				check(!has_field(d, n, "te:"));
				check(!has_field(d, n, "keep-alive:"));
				check(!has_field(d, n, "proxy-connection:"));
			}
		} else {
			check(in && d >= in && n <= in_len && d + n <= in + in_len);
		}
		volatile uint8_t sink = d[0] ^ d[n - 1];
		(void)sink;
	}
}

static void on_close(struct shell *sh, const proto_event *ev, ssize_t n)
{
	if (n < 0 || ev->kind == PROTO_EV_CLOSE)
		sh->closed = true;
	if (ev->kind == PROTO_EV_CLOSE)
		check(ev->reason != NULL);
}

static void pump_client(struct shell *sh)
{
	for (int guard = 0; guard < 64 && !sh->closed && !sh->dialing && !sh->tunnel; guard++) {
		proto_out out;
		proto_event ev;
		ssize_t n = http_server_feed(&sh->s, sh->cbuf, sh->clen, &out, &ev);
		check(out.len <= PROTO_OUT_MAX);
		drain(sh, true, sh->cbuf, sh->clen);
		on_close(sh, &ev, n);
		if (n < 0)
			return;
		check((size_t)n <= sh->clen);
		memmove(sh->cbuf, sh->cbuf + n, sh->clen - (size_t)n);
		sh->clen -= (size_t)n;
		if (ev.kind == PROTO_EV_OPEN) {
			check(ev.user >= -1 && ev.user < (int)sh->n_users);
			check(sh->n_users == 0 || ev.user >= 0);
			check(ev.dest.kind != ADDR_NONE && ev.dest.port != 0);
			sh->dialing = true;
			sh->ulen = 0; /* the old upstream is closed with what it sent */
		}
		if (n == 0 || ev.kind != PROTO_EV_NONE)
			return;
	}
}

static void pump_upstream(struct shell *sh)
{
	for (int guard = 0; guard < 64 && !sh->closed && !sh->tunnel && !sh->dialing; guard++) {
		proto_out out;
		proto_event ev;
		ssize_t n = http_server_feed_upstream(&sh->s, sh->ubuf, sh->ulen, &out, &ev);
		check(out.len <= PROTO_OUT_MAX);
		drain(sh, false, sh->ubuf, sh->ulen);
		on_close(sh, &ev, n);
		if (n < 0)
			break;
		check((size_t)n <= sh->ulen);
		memmove(sh->ubuf, sh->ubuf + n, sh->ulen - (size_t)n);
		sh->ulen -= (size_t)n;
		check(ev.kind != PROTO_EV_OPEN);
		if (n == 0 || ev.kind != PROTO_EV_NONE)
			break;
	}
	pump_client(sh);
}

static void add(uint8_t *buf, size_t *len, const uint8_t *d, size_t n)
{
	if (n > BUF - *len) /* a full read buffer: the shell stops reading */
		n = BUF - *len;
	memcpy(buf + *len, d, n);
	*len += n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct shell sh;
	if (size == 0)
		return 0;
	memset(&sh, 0, sizeof sh);
	sh.n_users = data[0] & 1 ? 2 : 0;
	http_server_init(&sh.s, sh.n_users ? USERS : NULL, sh.n_users);
	size_t i = 1;
	while (i < size && !sh.closed) {
		uint8_t op = data[i++];
		size_t n = i < size ? (size_t)data[i++] + 1 : 0;
		if (n > size - i)
			n = size - i;
		proto_out out;
		proto_event ev;
		switch (op & 15) {
		case 0: case 1: case 2: case 3:
			add(sh.cbuf, &sh.clen, data + i, n);
			i += n;
			pump_client(&sh);
			break;
		case 4: case 5: case 6:
			add(sh.ubuf, &sh.ulen, data + i, n);
			i += n;
			pump_upstream(&sh);
			break;
		case 7: {
			const char *r = REQUESTS[n % (sizeof REQUESTS / sizeof REQUESTS[0])];
			add(sh.cbuf, &sh.clen, (const uint8_t *)r, strlen(r));
			pump_client(&sh);
			break;
		}
		case 8: {
			const char *r = RESPONSES[n % (sizeof RESPONSES / sizeof RESPONSES[0])];
			add(sh.ubuf, &sh.ulen, (const uint8_t *)r, strlen(r));
			pump_upstream(&sh);
			break;
		}
		case 9: { /* a long run of one byte, for the size bounds */
			static uint8_t run[BUF];
			memset(run, i < size ? data[i] : 'a', sizeof run);
			if (op & 16)
				add(sh.cbuf, &sh.clen, run, n * 128);
			else
				add(sh.ubuf, &sh.ulen, run, n * 128);
			if (op & 16)
				pump_client(&sh);
			else
				pump_upstream(&sh);
			break;
		}
		case 10:
			if (sh.dialing) {
				check(http_server_opened(&sh.s, &out) == 0);
				check(out.len <= PROTO_OUT_MAX);
				drain(&sh, true, NULL, 0);
				sh.dialing = false;
				sh.tunnel = http_server_is_tunnel(&sh.s);
				check(!sh.tunnel || out.len > 0);
				pump_client(&sh);
			} else {
				check(http_server_opened(&sh.s, &out) == PROTO_ERR_STATE);
			}
			break;
		case 11: {
			char reason[64];
			size_t rn = n < sizeof reason ? n : sizeof reason - 1;
			memcpy(reason, data + i, rn);
			reason[rn] = '\0';
			i += n;
			int rc = http_server_failed(&sh.s, (proto_dial_error)(op >> 4) % 6, reason, &out);
			check(rc == (sh.dialing ? 0 : PROTO_ERR_STATE));
			check(out.len <= PROTO_OUT_MAX && (rc < 0 || out.len > 0));
			if (rc == 0)
				sh.closed = true;
			break;
		}
		case 12:
			if (http_server_client_eof(&sh.s, &ev) == 0 && ev.kind == PROTO_EV_CLOSE)
				sh.closed = true;
			break;
		case 13:
			if (sh.dialing || sh.tunnel) {
				check(http_server_upstream_eof(&sh.s, &out, &ev) == PROTO_ERR_STATE);
			} else if (http_server_upstream_eof(&sh.s, &out, &ev) == 0) {
				check(out.len <= PROTO_OUT_MAX);
				sh.ulen = 0;
				if (ev.kind == PROTO_EV_CLOSE)
					sh.closed = true;
			}
			break;
		default:
			if (sh.tunnel) {
				check(http_server_feed(&sh.s, sh.cbuf, sh.clen, &out, &ev) == PROTO_ERR_STATE);
				check(http_server_feed_upstream(&sh.s, sh.ubuf, sh.ulen, &out, &ev) ==
				      PROTO_ERR_STATE);
			}
			break;
		}
	}
	return 0;
}
