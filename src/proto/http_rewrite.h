/* http_rewrite.h - writing a message head for the next hop (the HTTP proxy core's output side). */
#ifndef ETM_PROTO_HTTP_REWRITE_H
#define ETM_PROTO_HTTP_REWRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/http_parse.h"
#include "proto/http_proxy.h"

/* An append-only window on a head buffer of HTTP_OUT_HEAD_MAX bytes; once
 * over, it stays over (and the head is refused as too big). */
typedef struct http_wbuf {
	uint8_t *p;
	size_t len;
	bool over;
} http_wbuf;

void http_wbuf_put(http_wbuf *w, const void *d, size_t n);
void http_wbuf_put_str(http_wbuf *w, const char *str);

/* The field lines of h (read from in) for the next hop: without the
 * hop-by-hop fields (RFC 9110 7.6.1) and those the Connection header names,
 * Content-Length as one value (dropped from a response that has
 * Transfer-Encoding), and for a request without Proxy-Authorization and
 * Host (the caller writes Host from the target). */
void http_put_fields(http_wbuf *w, const uint8_t *in, const http_head *h, const http_meta *m,
                     bool request);

#endif
