/* dnstest.h - hand-made DNS messages for the codec's and the answer cache's tests: a byte writer with names, pointers and records. */
#ifndef ETM_TESTS_DNSTEST_H
#define ETM_TESTS_DNSTEST_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* A message being written; overflows are the test's bug, caught by abort. */
typedef struct wmsg {
	uint8_t b[8192];
	size_t n;
} wmsg;

static inline void w8(wmsg *w, uint8_t v)
{
	if (w->n >= sizeof w->b)
		abort();
	w->b[w->n++] = v;
}

static inline void w16(wmsg *w, uint16_t v)
{
	w8(w, (uint8_t)(v >> 8));
	w8(w, (uint8_t)v);
}

static inline void w32(wmsg *w, uint32_t v)
{
	w16(w, (uint16_t)(v >> 16));
	w16(w, (uint16_t)v);
}

static inline void wbytes(wmsg *w, const void *p, size_t len)
{
	for (size_t i = 0; i < len; i++)
		w8(w, ((const uint8_t *)p)[i]);
}

/* The header: id, flags, then the four counts. */
static inline void whdr(wmsg *w, uint16_t id, uint16_t flags, uint16_t qd, uint16_t an,
                        uint16_t ns, uint16_t ar)
{
	w16(w, id);
	w16(w, flags);
	w16(w, qd);
	w16(w, an);
	w16(w, ns);
	w16(w, ar);
}

/* Labels of a dotted text ("" writes nothing), without the root's zero, so
 * a pointer can follow. */
static inline void wlabels(wmsg *w, const char *text)
{
	while (*text) {
		const char *dot = strchr(text, '.');
		size_t len = dot ? (size_t)(dot - text) : strlen(text);
		w8(w, (uint8_t)len);
		wbytes(w, text, len);
		text += len + (dot ? 1 : 0);
	}
}

/* A whole uncompressed name. */
static inline void wname(wmsg *w, const char *text)
{
	wlabels(w, text);
	w8(w, 0);
}

static inline void wptr(wmsg *w, uint16_t to) { w16(w, (uint16_t)(0xc000 | to)); }

static inline void wquestion(wmsg *w, const char *name, uint16_t type, uint16_t class)
{
	wname(w, name);
	w16(w, type);
	w16(w, class);
}

/* A record's fixed part after its owner (written by the caller). */
static inline void wrr(wmsg *w, uint16_t type, uint16_t class, uint32_t ttl, uint16_t rdlen)
{
	w16(w, type);
	w16(w, class);
	w32(w, ttl);
	w16(w, rdlen);
}

/* An A record named by a pointer to the question. */
static inline void wa(wmsg *w, uint32_t ttl, uint8_t a, uint8_t b, uint8_t c, uint8_t d)
{
	wptr(w, 12);
	wrr(w, 1, 1, ttl, 4);
	w8(w, a);
	w8(w, b);
	w8(w, c);
	w8(w, d);
}

/* An SOA record named by a pointer to the question, uncompressed MNAME and
 * RNAME, the given TTL and MINIMUM. */
static inline void wsoa(wmsg *w, uint32_t ttl, uint32_t minimum)
{
	wptr(w, 12);
	size_t at = w->n;
	wrr(w, 6, 1, ttl, 0);
	size_t start = w->n;
	wname(w, "ns.test");
	wname(w, "admin.test");
	w32(w, 2026120201); /* SERIAL */
	w32(w, 7200);       /* REFRESH */
	w32(w, 900);        /* RETRY */
	w32(w, 1209600);    /* EXPIRE */
	w32(w, minimum);
	size_t rdlen = w->n - start;
	w->b[at + 8] = (uint8_t)(rdlen >> 8);
	w->b[at + 9] = (uint8_t)rdlen;
}

/* An OPT pseudo-record (RFC 6891 6.1.2): root owner, payload size in CLASS. */
static inline void wopt(wmsg *w, uint16_t payload)
{
	w8(w, 0);
	wrr(w, 41, payload, 0, 0);
}

#endif
