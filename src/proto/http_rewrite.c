/* http_rewrite.c - a head written again for the next hop: hop-by-hop fields dropped, one Content-Length. */
#include "proto/http_rewrite.h"

#include <stdio.h>
#include <string.h>

#include "base/bytes.h"

void http_wbuf_put(http_wbuf *w, const void *d, size_t n)
{
	if (w->over || n > HTTP_OUT_HEAD_MAX - w->len) {
		w->over = true;
		return;
	}
	memcpy(w->p + w->len, d, n);
	w->len += n;
}

void http_wbuf_put_str(http_wbuf *w, const char *str) { http_wbuf_put(w, str, strlen(str)); }

/* Fields that never cross this proxy (RFC 9110 7.6.1), both directions. */
static const char *const HOP_FIELDS[] = {"connection", "proxy-connection", "keep-alive", "te",
                                         "upgrade"};

static bool is_hop(const uint8_t *name, size_t n, const http_meta *m)
{
	for (size_t i = 0; i < sizeof HOP_FIELDS / sizeof HOP_FIELDS[0]; i++)
		if (http_eq_nocase(name, n, HOP_FIELDS[i]))
			return true;
	/* Bodies pass through unchanged, so their framing fields stay even
	 * when Connection names them: dropping one would change where the
	 * message ends for the next hop. */
	if (http_eq_nocase(name, n, "content-length") || http_eq_nocase(name, n, "transfer-encoding"))
		return false;
	for (size_t i = 0; i < m->n_options; i++)
		if (bytes_ascii_ieq(name, n, m->option[i], m->option_len[i]))
			return true;
	return false;
}

void http_put_fields(http_wbuf *w, const uint8_t *in, const http_head *h,
                     const http_meta *m, bool request)
{
	bool cl_done = false;
	for (size_t i = 0; i < h->n_fields; i++) {
		const http_field *f = &h->fields[i];
		const uint8_t *name = in + f->name.off;
		size_t n = f->name.len;
		if (is_hop(name, n, m))
			continue;
		if (request && (http_eq_nocase(name, n, "proxy-authorization") ||
		                http_eq_nocase(name, n, "host")))
			continue;
		/* RFC 9112 6.3 item 3: Transfer-Encoding overrides, and the
		 * received Content-Length must go before forwarding. */
		bool cl = http_eq_nocase(name, n, "content-length");
		if (!request && m->has_te && cl)
			continue;
		if (cl) {
			/* A valid list of equal values (RFC 9112 6.3 item 5) goes on
			 * as one value, so the next hop cannot read it another way. */
			if (!cl_done) {
				char num[24];
				int k = snprintf(num, sizeof num, "%llu", (unsigned long long)m->cl);
				http_wbuf_put(w, name, n);
				http_wbuf_put(w, ": ", 2);
				http_wbuf_put(w, num, k > 0 ? (size_t)k : 0);
				http_wbuf_put(w, "\r\n", 2);
			}
			cl_done = true;
			continue;
		}
		http_wbuf_put(w, name, n);
		http_wbuf_put(w, ": ", 2);
		http_wbuf_put(w, in + f->value.off, f->value.len);
		http_wbuf_put(w, "\r\n", 2);
	}
}
