/* fuzz_http_filter.c - libFuzzer target: the HTTP proxy core's body framing both ways (chunked, Content-Length, until close, 1xx, 204/304) through tight buffers, against a reference chunked decoder. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/http_proxy.h"

/* fuzz_http_proxy drives the heads (auth, CONNECT, dial failures) with raw
 * bytes; this one builds whole exchanges from canned heads and fuzzer-made
 * bodies, so that it reaches deep into the body framing of both sides.
 *
 * Input: flags, S, the generator's bytes, then S * 2 bytes of schedule.
 *   flags bits 0-1: the shell's read buffer per side (512 .. 32 KiB);
 *   bits 2-3: the slack of each write queue beyond one feed's bound;
 *   bits 5-7: requests - 1.
 * The generator writes the client's stream (requests, each a canned head
 * and a body made of chunk ops: good chunks, "zz", "-1", sizes past 2^62,
 * a missing CRLF, extensions, trailers, raw bytes) and the upstream's
 * stream (per request a segment of 1xx heads, a canned final head and its
 * body). The schedule (two bytes per step) then interleaves: client bytes
 * in, upstream bytes in, each write queue drained a little, the dial
 * finishing, either side's EOF. When it runs out, everything is delivered.
 *
 * Checked, besides the core's documented bounds (a feed never consumes
 * more than it was given; out and the heads fit; what is handed on fits
 * the room the shell kept for it; after an error every entry point says
 * PROTO_ERR_STATE):
 * - every body slice handed on is the next run of the sender's stream right
 *   after the message head, and ends where the feed's consumption ends;
 * - for a chunked body, the core and the reference decoder agree at every
 *   feed: the core forwards exactly up to the end the reference finds,
 *   everything while the reference wants more, and closes with its
 *   "malformed" reason exactly when the reference finds a bad byte in what
 *   was offered; Content-Length bodies stop at their length, no-body
 *   responses (HEAD, 204, 304) forward nothing;
 * - a rewritten head keeps the framing of the body after it (chunked stays
 *   chunked without Content-Length, a length stays the same length);
 * - at the end, what was queued toward each peer, cut at the recorded
 *   heads, decodes with the reference to the data the generator encoded
 *   when it encoded a well-formed body. */

#define CHECK(x)                                                                                   \
	do {                                                                                       \
		if (!(x))                                                                          \
			abort();                                                                   \
	} while (0)

#define STREAM_MAX (64 * 1024)
#define REQS_MAX 8
#define HEADS_MAX (REQS_MAX * 4) /* per stream: 1xx heads included */
#define PIECES_MAX 24            /* chunk ops per body */
#define WIRE_MAX (STREAM_MAX + REQS_MAX * 4 * HTTP_OUT_HEAD_MAX)

static const size_t RCAPS[4] = {512, 2048, 8192, 2 * HTTP_HEAD_MAX};
static const size_t SLACKS[4] = {0, 1, 700, 64 * 1024};

static const char BAD_REQ_CHUNK[] = "malformed chunked request body";
static const char BAD_RESP_CHUNK[] = "malformed chunked response body";

/* ---- the reference chunked decoder (RFC 9112 7.1, with the core's bounds) ---- */

enum ref_result { REF_MORE, REF_DONE, REF_BAD };

static int hexval(uint8_t c)
{
	static const char digits[] = "0123456789abcdef";
	if (c >= 'A' && c <= 'F')
		c = (uint8_t)(c + ('a' - 'A'));
	const char *p = c ? strchr(digits, c) : NULL;
	return p ? (int)(p - digits) : -1;
}

/* field-vchar, obs-text, SP and HTAB (RFC 9110 5.5). */
static bool text_byte(uint8_t c)
{
	return c == '\t' || (c >= 0x20 && c != 0x7f);
}

static bool token_byte(uint8_t c)
{
	return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') ||
	       (c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

typedef struct decoded {
	uint8_t *d;
	size_t len, cap;
	bool over;
} decoded;

static void dec_put(decoded *o, const uint8_t *p, size_t n)
{
	if (!o)
		return;
	if (n > o->cap - o->len) {
		o->over = true;
		n = o->cap - o->len;
	}
	memcpy(o->d + o->len, p, n);
	o->len += n;
}

/* p[0, n) as the start of a chunked body: REF_DONE with *pos its length,
 * REF_BAD with *pos the first byte no valid body can have there, or
 * REF_MORE when all of it is a valid beginning. Data goes to out (may be
 * NULL). After the size only BWS then ";" or CR may come (RFC 9112 7.1.1);
 * an extension is any text up to CR (recipients ignore what they do not
 * know). The bounds are the core's: a size below 2^62, HTTP_CHUNK_LINE_MAX
 * per size line and HTTP_TRAILER_MAX for the trailer section. Exactly
 * where a line or section stops fitting is the core's to count, so near
 * the bound the answer is REF_UNSURE, with *pos the length it reached. */
enum { REF_UNSURE = REF_BAD + 1 };
#define REF_FUZZ 8

static int ref_chunked(const uint8_t *p, size_t n, size_t *pos, decoded *out)
{
	size_t i = 0;
	const uint64_t limit = (uint64_t)1 << 62;
	for (;;) {
		size_t line = i;
		uint64_t size = 0;
		int d;
		while (i < n && (d = hexval(p[i])) >= 0) {
			if (size > (limit - 1 - (uint64_t)d) / 16)
				goto bad;
			size = size * 16 + (uint64_t)d;
			if (++i - line >= HTTP_CHUNK_LINE_MAX - REF_FUZZ)
				goto unsure;
		}
		if (i == n)
			return REF_MORE;
		if (i == line)
			goto bad;
		while (i < n && (p[i] == ' ' || p[i] == '\t'))
			if (++i - line >= HTTP_CHUNK_LINE_MAX - REF_FUZZ)
				goto unsure;
		if (i < n && p[i] == ';') {
			for (i++; i < n && p[i] != '\r'; i++) {
				if (!text_byte(p[i]))
					goto bad;
				if (i - line >= HTTP_CHUNK_LINE_MAX - REF_FUZZ)
					goto unsure;
			}
		}
		if (i == n)
			return REF_MORE;
		if (p[i] != '\r')
			goto bad;
		if (++i == n)
			return REF_MORE;
		if (p[i] != '\n')
			goto bad;
		i++;
		if (size == 0)
			break;
		if (n - i <= size) {
			dec_put(out, p + i, n - i);
			return REF_MORE;
		}
		dec_put(out, p + i, (size_t)size);
		i += (size_t)size;
		if (p[i] != '\r')
			goto bad;
		if (++i == n)
			return REF_MORE;
		if (p[i] != '\n')
			goto bad;
		i++;
	}
	/* The trailer section: field lines, then an empty line. */
	size_t start = i;
	for (;;) {
		if (i == n)
			return REF_MORE;
		if (p[i] == '\r') {
			if (++i == n)
				return REF_MORE;
			if (p[i] != '\n')
				goto bad;
			*pos = i + 1;
			return REF_DONE;
		}
		if (!token_byte(p[i]))
			goto bad;
		for (i++; i < n && p[i] != '\r'; i++)
			if (!text_byte(p[i]))
				goto bad;
		if (i - start >= HTTP_TRAILER_MAX - REF_FUZZ) {
			*pos = i;
			return REF_UNSURE;
		}
		if (i == n)
			return REF_MORE;
		if (++i == n)
			return REF_MORE;
		if (p[i] != '\n')
			goto bad;
		i++;
	}
bad:
	*pos = i;
	return REF_BAD;
unsure:
	/* a size line near its bound: too long for certain only well past it */
	for (size_t line = i; i < n && p[i] != '\r'; i++)
		if (i - line >= 2 * REF_FUZZ)
			goto bad;
	*pos = i;
	return REF_UNSURE;
}

/* ---- the generator ---- */

enum mode { M_UNKNOWN, M_NONE, M_LENGTH, M_CHUNKED, M_CLOSE, M_INFO };

typedef struct gen {
	const uint8_t *p;
	size_t n, i;
} gen;

static uint8_t take(gen *g) { return g->i < g->n ? g->p[g->i++] : 0; }

/* One head the generator wrote, and the body after it. */
typedef struct msg {
	size_t off, len;  /* the head in its stream */
	enum mode mode;   /* as the template frames it */
	uint64_t cl;
	bool head_method; /* requests: HEAD */
	bool v10;         /* requests: HTTP/1.0 */
	int k;            /* requests: the index in the stream, else -1 */
	bool valid;       /* chunked: the generator wrote a well-formed body... */
	size_t exp_off, exp_len; /* ...of these bytes of exp[] */
	size_t body_len;  /* its encoded length */
} msg;

typedef struct stream {
	uint8_t d[STREAM_MAX];
	size_t len;
	bool over;
	msg heads[HEADS_MAX];
	size_t n_heads;
	size_t seg_start[REQS_MAX], seg_end[REQS_MAX]; /* upstream: the answer to request k */
	size_t req_head[REQS_MAX];                      /* client: heads[] index of request k */
	size_t n_reqs;
	uint8_t exp[STREAM_MAX];
	size_t exp_len;
} stream;

static void emit(stream *s, const void *p, size_t n)
{
	if (s->over || n > STREAM_MAX - s->len) {
		s->over = true;
		return;
	}
	memcpy(s->d + s->len, p, n);
	s->len += n;
}

static void emit_str(stream *s, const char *t) { emit(s, t, strlen(t)); }

static void expect(stream *s, msg *m, const uint8_t *p, size_t n)
{
	if (n > STREAM_MAX - s->exp_len) {
		m->valid = false;
		return;
	}
	memcpy(s->exp + s->exp_len, p, n);
	s->exp_len += n;
	m->exp_len += n;
}

/* count bytes from the generator (a fill byte once it runs dry). */
static void emit_data(gen *g, stream *s, msg *m, size_t count)
{
	uint8_t tmp[256];
	while (count > 0) {
		size_t k = count < sizeof tmp ? count : sizeof tmp;
		for (size_t j = 0; j < k; j++)
			tmp[j] = g->i < g->n ? take(g) : (uint8_t)('a' + j % 26);
		emit(s, tmp, k);
		if (m)
			expect(s, m, tmp, k);
		count -= k;
	}
}

static void emit_size(stream *s, uint64_t v, unsigned style)
{
	char t[64];
	int k;
	switch (style % 8) {
	case 0: k = snprintf(t, sizeof t, "%llx", (unsigned long long)v); break;
	case 1: k = snprintf(t, sizeof t, "%llX", (unsigned long long)v); break;
	case 2: k = snprintf(t, sizeof t, "000%llx", (unsigned long long)v); break;
	case 3: k = snprintf(t, sizeof t, "%llx;name=value", (unsigned long long)v); break;
	case 4: k = snprintf(t, sizeof t, "%llx ;q=\"a b\"", (unsigned long long)v); break;
	case 5: k = snprintf(t, sizeof t, "%016llx", (unsigned long long)v); break;
	case 6: k = snprintf(t, sizeof t, "%llx;a;b=c\t", (unsigned long long)v); break;
	default: k = snprintf(t, sizeof t, "%llx;", (unsigned long long)v); break;
	}
	CHECK(k > 0 && (size_t)k < sizeof t);
	emit(s, t, (size_t)k);
	emit_str(s, "\r\n");
}

/* A chunked body from the generator's ops; m->valid says whether every op
 * was well formed and it ended with a last chunk. */
static void gen_chunked(gen *g, stream *s, msg *m)
{
	size_t start = s->len;
	m->valid = true;
	m->exp_off = s->exp_len;
	bool ended = false;
	for (int k = 0; k < PIECES_MAX && !ended; k++) {
		uint8_t op = g->i < g->n ? take(g) : 12; /* dry: the last chunk */
		uint8_t arg = take(g);
		size_t size = (size_t)arg + 1;
		if (op & 0x10)
			size *= 16;
		switch (op & 15) {
		case 0: case 1: case 2: case 3: case 4: case 5:
			emit_size(s, size, op >> 5);
			emit_data(g, s, m, size);
			emit_str(s, "\r\n");
			break;
		case 6:
			emit_str(s, arg & 1 ? "zz\r\n" : "-1\r\n");
			m->valid = false;
			break;
		case 7: {
			static const char *const big[] = {"10000000000000000\r\n", "4000000000000000\r\n",
			                                  "3fffffffffffffff\r\n",
			                                  "00000000000000000000000000000001\r\n"};
			emit_str(s, big[arg & 3]);
			if ((arg & 3) != 3) {
				m->valid = false;
			} else {
				emit_data(g, s, m, 1);
				emit_str(s, "\r\n");
			}
			break;
		}
		case 8: /* the size line without its CRLF */
			emit_size(s, size, 0);
			if (!s->over)
				s->len -= 2;
			emit_str(s, arg & 1 ? "\n" : "\r");
			emit_data(g, s, NULL, size);
			m->valid = false;
			break;
		case 9: /* the data without its CRLF */
			emit_size(s, size, op >> 5);
			emit_data(g, s, NULL, size);
			emit_str(s, arg & 1 ? "\n" : "");
			m->valid = false;
			break;
		case 10: /* a control byte in an extension */
			emit_str(s, arg & 1 ? "1;\x01\r\nx\r\n" : "1;a=\n\r\nx\r\n");
			m->valid = false;
			break;
		case 11: /* a declared size that the data does not match */
			emit_size(s, size, 0);
			emit_data(g, s, NULL, arg & 1 ? size + 1 : size - 1);
			emit_str(s, "\r\n");
			m->valid = false;
			break;
		case 12: case 13: { /* the last chunk and a trailer section */
			static const char *const last[] = {"0\r\n", "000\r\n", "0;ext=1\r\n", "0 \r\n"};
			emit_str(s, last[arg & 3]);
			for (int t = 0; t < ((arg >> 2) & 3); t++)
				emit_str(s, t & 1 ? "X-Trailer: v\r\n" : "Checksum: abc=\r\n");
			if (arg & 0x40) { /* a trailer line of the generator's bytes */
				size_t n = take(g) & 31;
				emit_str(s, "T:");
				for (size_t j = 0; j < n; j++) {
					uint8_t c = take(g);
					emit(s, &c, 1);
					m->valid &= text_byte(c);
				}
				emit_str(s, "\r\n");
			}
			emit_str(s, arg & 0x80 ? "\n" : "\r\n");
			if (arg & 0x80)
				m->valid = false;
			ended = true;
			break;
		}
		case 14: /* raw bytes */
			emit_data(g, s, NULL, arg & 31);
			m->valid = false;
			break;
		default: /* an empty line where a size belongs */
			emit_str(s, "\r\n");
			m->valid = false;
			break;
		}
	}
	if (!ended) {
		emit_str(s, "0\r\n\r\n");
		ended = true;
	}
	m->body_len = s->len - start;
	if (s->over)
		m->valid = false;
	/* The generator's own check: a body it made well formed is one the
	 * reference reads back whole, to the same data. */
	if (m->valid) {
		static uint8_t buf[STREAM_MAX];
		decoded o = {.d = buf, .cap = sizeof buf};
		size_t pos = 0;
		CHECK(ref_chunked(s->d + start, m->body_len, &pos, &o) == REF_DONE);
		CHECK(pos == m->body_len && !o.over && o.len == m->exp_len);
		CHECK(memcmp(buf, s->exp + m->exp_off, o.len) == 0);
	}
}

static msg *add_head(stream *s, size_t off, enum mode mode)
{
	if (s->over || s->n_heads == HEADS_MAX)
		return NULL;
	msg *m = &s->heads[s->n_heads++];
	*m = (msg){.off = off, .len = s->len - off, .mode = mode, .k = -1};
	return m;
}

static const struct req_tpl {
	const char *line_fields; /* start line and fields, each with CRLF */
	enum mode mode;
	bool head_method, v10;
} REQS[] = {
	{"POST http://a.test/up HTTP/1.1\r\nTransfer-Encoding: chunked\r\n", M_CHUNKED, false, false},
	{"POST http://a.test/up HTTP/1.1\r\n", M_LENGTH, false, false},
	{"GET http://a.test/ HTTP/1.1\r\n", M_NONE, false, false},
	{"HEAD http://a.test/ HTTP/1.1\r\n", M_NONE, true, false},
	{"POST http://a.test/up HTTP/1.1\r\nTrailer: X-Trailer\r\nTransfer-Encoding: chunked\r\n"
	 "Connection: close\r\n",
	 M_CHUNKED, false, false},
	{"GET http://a.test/ HTTP/1.0\r\nConnection: keep-alive\r\n", M_NONE, false, true},
	{"POST http://b.test:81/up HTTP/1.1\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\n", M_CHUNKED,
	 false, false},
	{"PUT http://a.test/x HTTP/1.0\r\nConnection: keep-alive\r\n", M_LENGTH, false, true},
	{"POST http://a.test/up HTTP/1.1\r\nTransfer-Encoding: CHUNKED\r\nConnection: x-a\r\n",
	 M_CHUNKED, false, false},
};

static const struct resp_tpl {
	const char *line_fields;
	enum mode mode;
	int cl; /* -1: the generator picks a Content-Length; else none, or a fixed one listed */
} RESPS[] = {
	{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n", M_CHUNKED, 0},
	{"HTTP/1.1 200 OK\r\n", M_LENGTH, -1},
	{"HTTP/1.1 200 OK\r\nConnection: close\r\n", M_CLOSE, 0},
	{"HTTP/1.0 200 OK\r\n", M_CLOSE, 0},
	{"HTTP/1.1 204 No Content\r\n", M_NONE, 0},
	{"HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n", M_NONE, 0},
	{"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 3\r\n", M_CHUNKED, 0},
	{"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n", M_CLOSE, 0},
	{"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n", M_CLOSE, 0},
	{"HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n", M_NONE, 0},
	{"HTTP/1.1 200 OK\r\nContent-Length: 4, 4\r\nContent-Length: 4\r\n", M_LENGTH, 4},
	{"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n", M_LENGTH, -1},
	{"HTTP/1.1 200 OK\r\nTrailer: X-Trailer\r\nTransfer-Encoding: chunked\r\n", M_CHUNKED, 0},
};

static const char *const INFOS[] = {
	"HTTP/1.1 100 Continue\r\n\r\n",
	"HTTP/1.1 103 Early Hints\r\nLink: </s>; rel=preload\r\n\r\n",
};

static void gen_request(gen *g, stream *s)
{
	uint8_t a = take(g);
	const struct req_tpl *t = &REQS[a % (sizeof REQS / sizeof REQS[0])];
	if (a & 0x80)
		emit_str(s, "\r\n"); /* RFC 9112 2.2: an empty line before it is ignored */
	size_t off = s->len;
	uint64_t cl = 0;
	emit_str(s, t->line_fields);
	if (t->mode == M_LENGTH) {
		char f[48];
		cl = take(g);
		if (a & 0x40)
			cl *= 32;
		int k = snprintf(f, sizeof f, "Content-Length: %llu\r\n", (unsigned long long)cl);
		CHECK(k > 0 && (size_t)k < sizeof f);
		emit(s, f, (size_t)k);
	}
	emit_str(s, "\r\n");
	msg *m = add_head(s, off, t->mode);
	if (!m)
		return;
	m->cl = cl;
	m->head_method = t->head_method;
	m->v10 = t->v10;
	m->k = (int)s->n_reqs;
	s->req_head[s->n_reqs++] = (size_t)(m - s->heads);
	size_t body = s->len;
	if (t->mode == M_CHUNKED) {
		gen_chunked(g, s, m);
	} else if (t->mode == M_LENGTH) {
		m->exp_off = s->exp_len;
		emit_data(g, s, m, (size_t)cl);
		m->valid = !s->over;
		if (a & 0x20) /* the client sends a few bytes more than it declared */
			emit_data(g, s, NULL, (a & 7) + 1);
	}
	m->body_len = s->len - body;
}

static void gen_response(gen *g, stream *s, size_t k, bool no_body)
{
	uint8_t a = take(g);
	s->seg_start[k] = s->len;
	for (int i = 0; i < (a >> 6); i++) {
		size_t off = s->len;
		emit_str(s, INFOS[i & 1]);
		(void)add_head(s, off, M_INFO);
	}
	const struct resp_tpl *t = &RESPS[a % (sizeof RESPS / sizeof RESPS[0])];
	size_t off = s->len;
	uint64_t cl = t->cl > 0 ? (uint64_t)t->cl : 0;
	emit_str(s, t->line_fields);
	if (t->cl < 0) {
		char f[48];
		cl = take(g);
		int n = snprintf(f, sizeof f, "Content-Length: %llu\r\n", (unsigned long long)cl);
		CHECK(n > 0 && (size_t)n < sizeof f);
		emit(s, f, (size_t)n);
	}
	emit_str(s, "\r\n");
	msg *m = add_head(s, off, t->mode);
	size_t body = s->len;
	msg scratch = {0};
	if (!m)
		m = &scratch;
	m->cl = cl;
	if (no_body && !(a & 0x20)) {
		/* the answer to HEAD: a server sends the fields, not the body */
	} else if (t->mode == M_CHUNKED && !(a & 0x20)) {
		gen_chunked(g, s, m);
	} else if (t->mode == M_LENGTH) {
		m->exp_off = s->exp_len;
		emit_data(g, s, m, (size_t)cl);
		m->valid = !s->over;
	} else if (t->mode == M_CLOSE || (t->mode == M_CHUNKED && (a & 0x20))) {
		/* until close, or (for a request that is HEAD, or an
		 * HTTP/1.0 client) what a server should not send */
		emit_data(g, s, NULL, take(g));
	}
	m->body_len = s->len - body;
	s->seg_end[k] = s->len;
}

/* ---- the shell ---- */

typedef struct queue {
	uint8_t *d;
	size_t len, cap;
	uint8_t *wire; /* everything ever queued, for the final check */
	size_t wire_len;
	bool wire_over;
} queue;

static size_t room(const queue *q) { return q->cap - q->len; }

static void push(queue *q, const uint8_t *p, size_t n)
{
	CHECK(n <= room(q)); /* the shell kept room for the core's bound */
	memcpy(q->d + q->len, p, n);
	q->len += n;
	if (n > WIRE_MAX - q->wire_len) {
		q->wire_over = true;
		return;
	}
	memcpy(q->wire + q->wire_len, p, n);
	q->wire_len += n;
}

static void drain(queue *q, size_t n)
{
	if (n > q->len)
		n = q->len;
	volatile uint8_t sink = 0;
	for (size_t i = 0; i < n; i++)
		sink ^= q->d[i];
	(void)sink;
	memmove(q->d, q->d + n, q->len - n);
	q->len -= n;
}

/* One peer's bytes on their way into the core. */
typedef struct side {
	const stream *st;
	uint8_t *buf; /* st->d[base, base + len) */
	size_t base, len, cap;
	size_t limit; /* st->d[0, limit) may be sent now */
	bool eof, gone;
} side;

/* A message the core is handing on: where its body is in the sender's
 * stream, how much of it went, and where it went on the wire. */
typedef struct track {
	bool active;
	const msg *m;  /* NULL: a head the generator did not write */
	enum mode mode;
	uint64_t cl;
	size_t body_start, fwd;
	bool done;
	size_t wire_body; /* queue wire offset of its first body byte */
	bool wire_ok;     /* every body byte went there contiguously */
} track;

#define FWD_MAX (REQS_MAX * 4)

typedef struct shell {
	http_server s;
	stream *cs, *us;
	side c, u;
	queue uq, cq;
	bool dialing, closed;
	track req, resp;
	int req_k;         /* generator index of the request in flight, -1 */
	bool req_head_method, req_v10;
	track done_reqs[FWD_MAX], done_resps[FWD_MAX]; /* for the final wire check */
	size_t n_done_reqs, n_done_resps;
} shell;

static void archive(track *list, size_t *n, const track *t)
{
	if (t->active && *n < FWD_MAX)
		list[(*n)++] = *t;
}

static bool has_field(const uint8_t *h, size_t n, const char *lower)
{
	size_t k = strlen(lower);
	for (size_t i = 0; i + k + 1 <= n; i++) {
		if (h[i] != '\n')
			continue;
		size_t j = 0;
		while (j < k && (h[i + 1 + j] | 0x20) == (uint8_t)lower[j])
			j++;
		if (j == k)
			return true;
	}
	return false;
}

/* The decimal value of the first "content-length:" field, or -1. */
static long long field_length(const uint8_t *h, size_t n)
{
	static const char name[] = "\ncontent-length: ";
	for (size_t i = 0; i + sizeof name - 1 <= n; i++) {
		size_t j = 0;
		while (j < sizeof name - 1 && (h[i + j] | (j ? 0x20 : 0)) == (uint8_t)name[j])
			j++;
		if (j < sizeof name - 1)
			continue;
		long long v = 0;
		for (i += j; i < n && h[i] >= '0' && h[i] <= '9'; i++)
			v = v * 10 + (h[i] - '0');
		return v;
	}
	return -1;
}

/* A rewritten head keeps its body's framing (RFC 9112 6.3). */
static void check_framing(const uint8_t *h, size_t n, const track *t)
{
	CHECK(n >= 4 && n <= HTTP_OUT_HEAD_MAX && memcmp(h + n - 4, "\r\n\r\n", 4) == 0);
	switch (t->mode) {
	case M_CHUNKED:
		CHECK(has_field(h, n, "transfer-encoding:"));
		CHECK(!has_field(h, n, "content-length:"));
		break;
	case M_LENGTH:
		CHECK(!has_field(h, n, "transfer-encoding:"));
		CHECK(field_length(h, n) == (long long)t->cl);
		break;
	default:
		break;
	}
}

static const msg *find_head(const stream *s, size_t off)
{
	for (size_t i = 0; i < s->n_heads; i++)
		if (s->heads[i].off == off)
			return &s->heads[i];
	return NULL;
}

/* A slice the core handed on: where it is in the sender's stream. */
static size_t slice_pos(const side *sd, const uint8_t *d, size_t n)
{
	CHECK(d >= sd->buf && n <= sd->len && (size_t)(d - sd->buf) <= sd->len - n);
	return sd->base + (size_t)(d - sd->buf);
}

/* Checks the core's progress on a body against the reference, after a
 * feed that offered the sender's stream up to `end`. bad_closed: the core
 * closed with its "malformed chunked" reason. */
static void judge(const stream *st, track *t, size_t end, bool bad_closed)
{
	if (!t->active || t->mode == M_UNKNOWN)
		return;
	size_t offered = end - t->body_start;
	switch (t->mode) {
	case M_CHUNKED: {
		size_t pos = 0;
		int r = ref_chunked(st->d + t->body_start, offered, &pos, NULL);
		if (r == REF_UNSURE) {
			/* a line at its bound: the core may take it or refuse it */
			t->mode = M_UNKNOWN;
			break;
		}
		if (bad_closed) {
			/* the reference finds the bad byte too: in what was offered,
			 * and not in what was forwarded before */
			CHECK(r == REF_BAD && pos < offered && pos >= t->fwd);
		} else if (r == REF_DONE) {
			CHECK(t->fwd == pos); /* up to the end, not a byte past it */
			t->done = true;
		} else {
			CHECK(r == REF_MORE); /* a bad byte was let through */
			CHECK(t->fwd == offered);
		}
		break;
	}
	case M_LENGTH:
		CHECK(!bad_closed);
		CHECK(t->fwd == (offered < t->cl ? offered : t->cl));
		t->done = t->fwd == t->cl;
		break;
	case M_CLOSE:
		CHECK(!bad_closed && t->fwd == offered);
		break;
	default: /* no body */
		CHECK(!bad_closed && t->fwd == 0);
		t->done = true;
		break;
	}
}

static void start_track(track *t, const msg *m, enum mode mode, size_t body_start)
{
	*t = (track){.active = true, .m = m, .mode = mode, .cl = m ? m->cl : 0,
	             .body_start = body_start, .wire_ok = true};
	t->done = mode == M_NONE || (mode == M_LENGTH && t->cl == 0);
}

/* A body slice handed on: the next bytes of the body, ending where the
 * feed's consumption ends; queued right after the body's earlier bytes. */
static void body_slice(const side *sd, track *t, queue *q, const uint8_t *d, size_t n,
                       size_t consumed)
{
	size_t pos = slice_pos(sd, d, n);
	CHECK(t->active && !t->done);
	CHECK(pos == t->body_start + t->fwd);
	CHECK(pos + n == sd->base + consumed);
	if (q->wire_over || q->wire_len != t->wire_body + t->fwd)
		t->wire_ok = false;
	push(q, d, n);
	t->fwd += n;
}

/* Takes what the core has for one side: at most a head (held in the core),
 * then at most one body slice (not in the core). */
static void collect(shell *sh, bool upstream, const uint8_t **hd, size_t *hn, const uint8_t **bd,
                    size_t *bn)
{
	const uint8_t *d;
	size_t n;
	int rounds = 0;
	*hd = *bd = NULL;
	*hn = *bn = 0;
	while (upstream ? http_server_take_upstream(&sh->s, &d, &n)
	                : http_server_take_client(&sh->s, &d, &n)) {
		CHECK(++rounds <= 2 && n > 0);
		if (d >= sh->s.head && d < sh->s.head + sizeof sh->s.head) {
			CHECK(!*hd && !*bd && d == sh->s.head && n <= HTTP_OUT_HEAD_MAX);
			*hd = d;
			*hn = n;
		} else {
			CHECK(!*bd);
			*bd = d;
			*bn = n;
		}
	}
}

/* Every entry point of a closed core refuses. */
static void check_refuses(shell *sh)
{
	proto_out out;
	proto_event ev;
	const uint8_t *d;
	size_t n;
	CHECK(!http_server_take_upstream(&sh->s, &d, &n) && !http_server_take_client(&sh->s, &d, &n));
	CHECK(http_server_feed(&sh->s, (const uint8_t *)"GET", 3, &out, &ev) == PROTO_ERR_STATE);
	CHECK(out.len == 0 && ev.kind == PROTO_EV_NONE);
	CHECK(http_server_feed_upstream(&sh->s, (const uint8_t *)"HTTP", 4, &out, &ev) ==
	      PROTO_ERR_STATE);
	CHECK(out.len == 0 && ev.kind == PROTO_EV_NONE);
	CHECK(http_server_opened(&sh->s, &out) == PROTO_ERR_STATE && out.len == 0);
	CHECK(http_server_failed(&sh->s, PROTO_DIAL_REFUSED, "x", &out) == PROTO_ERR_STATE);
	CHECK(out.len == 0);
	CHECK(http_server_upstream_eof(&sh->s, &out, &ev) == PROTO_ERR_STATE);
	CHECK(http_server_client_eof(&sh->s, &ev) == PROTO_ERR_STATE);
	CHECK(!http_server_take_upstream(&sh->s, &d, &n) && !http_server_take_client(&sh->s, &d, &n));
}

static void set_closed(shell *sh)
{
	if (sh->closed)
		return;
	sh->closed = true;
	check_refuses(sh);
}

static void consume(side *sd, size_t n)
{
	memmove(sd->buf, sd->buf + n, sd->len - n);
	sd->len -= n;
	sd->base += n;
}

/* The core took a new request head at c.base. */
static void new_request(shell *sh, const msg *m, size_t head_len, bool first)
{
	/* the previous exchange ended, response included, before this one */
	if (!first && sh->req.active && sh->req.mode != M_UNKNOWN) {
		CHECK(sh->req.done);
		CHECK(sh->resp.active && (sh->resp.mode == M_UNKNOWN || sh->resp.done));
	}
	archive(sh->done_reqs, &sh->n_done_reqs, &sh->req);
	archive(sh->done_resps, &sh->n_done_resps, &sh->resp);
	sh->resp = (track){0};
	start_track(&sh->req, m, m ? m->mode : M_UNKNOWN, sh->c.base + head_len);
	sh->req_k = m ? m->k : -1;
	sh->req_head_method = m && m->head_method;
	sh->req_v10 = m && m->v10;
}

/* The upstream of the request in flight answers from its segment. */
static void upstream_for_request(shell *sh, bool fresh)
{
	side *u = &sh->u;
	if (fresh) {
		u->base = sh->req_k >= 0 ? sh->us->seg_start[sh->req_k] : sh->us->len;
		u->len = 0;
		u->gone = u->eof = false;
	}
	size_t sent = u->base + u->len;
	u->limit = sh->req_k >= 0 ? sh->us->seg_end[sh->req_k] : sent;
	if (u->limit < sent)
		u->limit = sent;
}

static void forward_head(shell *sh, const uint8_t *hd, size_t hn)
{
	check_framing(hd, hn, &sh->req);
	push(&sh->uq, hd, hn);
	sh->req.wire_body = sh->uq.wire_len;
}

static bool pump_client(shell *sh)
{
	side *c = &sh->c;
	if (sh->closed || sh->dialing || c->len == 0)
		return false;
	if (room(&sh->uq) < HTTP_OUT_HEAD_MAX + c->len || room(&sh->cq) < PROTO_OUT_MAX)
		return false; /* the shell waits for its writes before reading on */
	bool body = sh->req.active && !sh->req.done;
	bool first = !sh->req.active;
	proto_out out;
	proto_event ev;
	ssize_t n = http_server_feed(&sh->s, c->buf, c->len, &out, &ev);
	CHECK(out.len <= PROTO_OUT_MAX);
	push(&sh->cq, out.buf, out.len);
	const uint8_t *hd, *bd;
	size_t hn, bn;
	collect(sh, true, &hd, &hn, &bd, &bn);
	if (n < 0) {
		CHECK(n == PROTO_ERR_TOO_BIG && ev.kind == PROTO_EV_CLOSE && out.len > 0);
		CHECK(!hd && !bd);
		set_closed(sh);
		return true;
	}
	CHECK((size_t)n <= c->len);
	CHECK(ev.kind != PROTO_EV_CLOSE || ev.reason != NULL);
	bool bad = ev.kind == PROTO_EV_CLOSE && strcmp(ev.reason, BAD_REQ_CHUNK) == 0;
	bool judged = body;
	if (ev.kind == PROTO_EV_OPEN || hd) {
		/* a new request: the reference must agree the last body ended */
		CHECK(!body || sh->req.mode == M_UNKNOWN);
		const msg *m = find_head(sh->cs, c->base);
		size_t head_len = (size_t)n;
		if (bd)
			head_len = slice_pos(c, bd, bn) - c->base;
		else if (bad)
			head_len = m ? m->len : 0;
		CHECK(!m || bad || m->len == head_len);
		new_request(sh, m, head_len, first);
		if (ev.kind == PROTO_EV_OPEN) {
			CHECK(!hd && !bd && !bad);
			CHECK(ev.dest.kind != ADDR_NONE && ev.dest.port != 0);
			sh->dialing = true;
			sh->u.gone = true; /* the old upstream is closed */
			sh->u.len = 0;
			judged = false;
		} else {
			forward_head(sh, hd, hn); /* the upstream is kept */
			upstream_for_request(sh, false);
			judged = m != NULL || bad;
		}
	} else if (!body && n > 0) {
		/* RFC 9112 2.2: empty lines before a request line */
		CHECK(!bd && n % 2 == 0);
		for (ssize_t i = 0; i < n; i += 2)
			CHECK(c->buf[i] == '\r' && c->buf[i + 1] == '\n');
	}
	if (bd)
		body_slice(c, &sh->req, &sh->uq, bd, bn, (size_t)n);
	if (judged)
		judge(sh->cs, &sh->req, c->base + c->len, bad);
	else
		CHECK(!bad);
	if (bad)
		CHECK(n == 0 && !bd);
	consume(c, (size_t)n);
	if (ev.kind == PROTO_EV_CLOSE)
		set_closed(sh);
	return n > 0 || ev.kind != PROTO_EV_NONE || hd || bd;
}

static bool pump_upstream(shell *sh)
{
	side *u = &sh->u;
	if (sh->closed || sh->dialing || u->gone || u->len == 0)
		return false;
	if (room(&sh->cq) < PROTO_OUT_MAX + HTTP_OUT_HEAD_MAX + u->len)
		return false;
	bool body = sh->resp.active && !sh->resp.done;
	bool ended = sh->resp.active && sh->resp.done && sh->resp.mode != M_UNKNOWN;
	proto_out out;
	proto_event ev;
	ssize_t n = http_server_feed_upstream(&sh->s, u->buf, u->len, &out, &ev);
	CHECK(n >= 0 && (size_t)n <= u->len);
	CHECK(out.len <= PROTO_OUT_MAX);
	CHECK(ev.kind != PROTO_EV_OPEN);
	CHECK(ev.kind != PROTO_EV_CLOSE || ev.reason != NULL);
	push(&sh->cq, out.buf, out.len);
	const uint8_t *hd, *bd;
	size_t hn, bn;
	collect(sh, false, &hd, &hn, &bd, &bn);
	bool bad = ev.kind == PROTO_EV_CLOSE && strcmp(ev.reason, BAD_RESP_CHUNK) == 0;
	bool judged = body;
	const msg *m = find_head(sh->us, u->base);
	if (hd) {
		size_t head_len = bd ? slice_pos(u, bd, bn) - u->base : (size_t)n;
		CHECK(!m || m->len == head_len);
		CHECK(hn >= 4 && memcmp(hd + hn - 4, "\r\n\r\n", 4) == 0);
		enum mode mode = m ? m->mode : M_UNKNOWN;
		if (mode == M_INFO) {
			/* RFC 9110 15.2: no 1xx to an HTTP/1.0 client; one head per call */
			CHECK(!sh->req_v10 && !bd && memcmp(hd, "HTTP/1.1 1", 10) == 0);
			push(&sh->cq, hd, hn);
		} else {
			CHECK(!body || sh->resp.mode == M_UNKNOWN);
			if (mode != M_UNKNOWN && sh->req_head_method)
				mode = M_NONE; /* RFC 9112 6.3 item 1 */
			archive(sh->done_resps, &sh->n_done_resps, &sh->resp);
			start_track(&sh->resp, m, mode, u->base + head_len);
			check_framing(hd, hn, &sh->resp);
			if (mode == M_CLOSE)
				CHECK(has_field(hd, hn, "connection: close"));
			push(&sh->cq, hd, hn);
			sh->resp.wire_body = sh->cq.wire_len;
			judged = true;
		}
	} else if (!body && n > 0) {
		/* a head not handed on: only a 1xx to an HTTP/1.0 client */
		CHECK(!bd && (!m || (m->mode == M_INFO && m->len == (size_t)n)));
		CHECK(!sh->req.m || sh->req_v10);
	} else if (ended && n == 0) {
		/* bytes after the response: the core owes nobody them */
		CHECK(ev.kind == PROTO_EV_CLOSE && !bd);
	}
	if (bd)
		body_slice(u, &sh->resp, &sh->cq, bd, bn, (size_t)n);
	if (judged)
		judge(sh->us, &sh->resp, u->base + u->len, bad);
	else
		CHECK(!bad);
	consume(u, (size_t)n);
	if (ev.kind == PROTO_EV_CLOSE)
		set_closed(sh);
	return n > 0 || ev.kind != PROTO_EV_NONE || hd || bd;
}

static void pump(shell *sh)
{
	for (int i = 0; i < 512; i++) {
		bool a = pump_client(sh);
		bool b = pump_upstream(sh);
		if (!a && !b)
			break;
	}
}

/* Up to k more bytes of the peer's stream into the shell's read buffer. */
static size_t deliver(side *sd, size_t k)
{
	if (sd->gone || sd->eof)
		return 0;
	size_t sent = sd->base + sd->len;
	size_t avail = sd->limit > sent ? sd->limit - sent : 0;
	if (k > avail)
		k = avail;
	if (k > sd->cap - sd->len)
		k = sd->cap - sd->len;
	memcpy(sd->buf + sd->len, sd->st->d + sent, k);
	sd->len += k;
	return k;
}

static bool opened(shell *sh)
{
	if (sh->closed || !sh->dialing || room(&sh->uq) < HTTP_OUT_HEAD_MAX)
		return false;
	proto_out out;
	CHECK(http_server_opened(&sh->s, &out) == 0);
	CHECK(out.len <= PROTO_OUT_MAX);
	sh->dialing = false;
	if (http_server_is_tunnel(&sh->s)) {
		/* the generator's bytes made a CONNECT: a raw tunnel, not ours */
		CHECK(out.len > 0);
		sh->closed = true;
		return true;
	}
	CHECK(out.len == 0);
	const uint8_t *hd, *bd;
	size_t hn, bn;
	collect(sh, true, &hd, &hn, &bd, &bn);
	CHECK(hd && !bd);
	forward_head(sh, hd, hn);
	upstream_for_request(sh, true);
	return true;
}

static bool client_eof(shell *sh)
{
	if (sh->c.eof)
		return false;
	proto_event ev;
	int rc = http_server_client_eof(&sh->s, &ev);
	sh->c.eof = true;
	if (sh->closed) {
		CHECK(rc == PROTO_ERR_STATE);
		return true;
	}
	CHECK(rc == 0 && ev.kind != PROTO_EV_OPEN);
	if (ev.kind == PROTO_EV_CLOSE)
		set_closed(sh);
	return true;
}

static bool upstream_eof(shell *sh)
{
	side *u = &sh->u;
	if (u->gone || room(&sh->cq) < PROTO_OUT_MAX)
		return false;
	proto_out out;
	proto_event ev;
	int rc = http_server_upstream_eof(&sh->s, &out, &ev);
	u->gone = true;
	u->len = 0;
	if (sh->closed || sh->dialing) {
		CHECK(rc == PROTO_ERR_STATE);
		return true;
	}
	CHECK(rc == 0 && out.len <= PROTO_OUT_MAX && ev.kind != PROTO_EV_OPEN);
	push(&sh->cq, out.buf, out.len);
	if (sh->resp.active && sh->resp.mode == M_CLOSE && !sh->resp.done) {
		/* RFC 9112 6.3 item 8: the close ends the body, and the connection */
		CHECK(ev.kind == PROTO_EV_CLOSE && out.len == 0);
		sh->resp.done = true;
	}
	if (sh->resp.active && !sh->resp.done && sh->resp.mode != M_UNKNOWN)
		CHECK(ev.kind == PROTO_EV_CLOSE); /* a cut response ends the client too */
	if (ev.kind == PROTO_EV_CLOSE)
		set_closed(sh);
	return true;
}

/* What went to the peer, cut where the recorded heads ended, is the
 * sender's bytes; a body the generator encoded well decodes to its data. */
static void check_wire(const stream *st, const queue *q, const track *t)
{
	if (!t->active || !t->wire_ok || q->wire_over || t->fwd == 0)
		return;
	CHECK(t->wire_body + t->fwd <= q->wire_len);
	const uint8_t *w = q->wire + t->wire_body;
	CHECK(memcmp(w, st->d + t->body_start, t->fwd) == 0);
	const msg *m = t->m;
	if (!t->done || !m || !m->valid || t->mode != m->mode)
		return;
	if (t->mode == M_CHUNKED) {
		static uint8_t buf[STREAM_MAX];
		decoded o = {.d = buf, .cap = sizeof buf};
		size_t pos = 0;
		CHECK(ref_chunked(w, t->fwd, &pos, &o) == REF_DONE && pos == t->fwd);
		CHECK(!o.over && o.len == m->exp_len && memcmp(buf, st->exp + m->exp_off, o.len) == 0);
	} else if (t->mode == M_LENGTH) {
		CHECK(t->fwd == m->exp_len && memcmp(w, st->exp + m->exp_off, t->fwd) == 0);
	}
}

static void step(shell *sh, uint8_t op, uint8_t arg)
{
	switch (op & 7) {
	case 0:
		deliver(&sh->c, (size_t)arg + 1);
		break;
	case 1:
		deliver(&sh->u, (size_t)arg + 1);
		break;
	case 2:
		drain(&sh->uq, ((size_t)arg + 1) * ((op & 8) ? 256 : 1));
		break;
	case 3:
		drain(&sh->cq, ((size_t)arg + 1) * ((op & 8) ? 256 : 1));
		break;
	case 4:
		(void)opened(sh);
		break;
	case 5: /* the client's EOF: after all it had, or (arg odd) cut short */
		if ((arg & 1) || sh->c.base + sh->c.len == sh->cs->len)
			(void)client_eof(sh);
		break;
	case 6: /* the upstream's EOF: after its segment, or cut short */
		if ((arg & 1) || (sh->u.len == 0 && sh->u.base == sh->u.limit))
			(void)upstream_eof(sh);
		break;
	default:
		deliver(&sh->c, ((size_t)arg + 1) * 32);
		deliver(&sh->u, ((size_t)arg + 1) * 32);
		break;
	}
	pump(sh);
}

/* Everything delivered, every queue drained, till nothing moves. */
static void finish(shell *sh)
{
	for (int round = 0; round < 256 && !sh->closed; round++) {
		size_t moved = opened(sh) ? 1 : 0;
		drain(&sh->uq, sh->uq.len);
		drain(&sh->cq, sh->cq.len);
		moved += deliver(&sh->c, sh->c.cap);
		moved += deliver(&sh->u, sh->u.cap);
		pump(sh);
		if (!moved && !pump_client(sh) && !pump_upstream(sh)) {
			/* the upstream is done with its segment: a close-delimited
			 * body ends by the close */
			if (sh->resp.active && sh->resp.mode == M_CLOSE && !sh->resp.done &&
			    sh->u.base == sh->u.limit && upstream_eof(sh))
				continue;
			break;
		}
	}
	drain(&sh->uq, sh->uq.len);
	drain(&sh->cq, sh->cq.len);
	if (!sh->closed && sh->c.base == sh->cs->len)
		(void)client_eof(sh);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static stream cs, us;
	static shell sh;
	static uint8_t cbuf[2 * HTTP_HEAD_MAX], ubuf[2 * HTTP_HEAD_MAX];
	static uint8_t uqd[HTTP_OUT_HEAD_MAX + 2 * HTTP_HEAD_MAX + PROTO_OUT_MAX + 64 * 1024];
	static uint8_t cqd[sizeof uqd];
	static uint8_t uwire[WIRE_MAX], cwire[WIRE_MAX];
	if (size < 2)
		return 0;
	uint8_t flags = data[0];
	size_t sched = (size_t)data[1] * 2;
	if (sched > size - 2)
		sched = (size - 2) & ~(size_t)1;
	const uint8_t *ops = data + size - sched;
	gen g = {.p = data + 2, .n = size - 2 - sched};

	memset(&cs, 0, sizeof cs);
	memset(&us, 0, sizeof us);
	size_t n_reqs = (size_t)(flags >> 5) + 1;
	for (size_t k = 0; k < n_reqs; k++) {
		gen_request(&g, &cs);
		bool head = cs.n_reqs > 0 && cs.heads[cs.req_head[cs.n_reqs - 1]].head_method;
		gen_response(&g, &us, k, head);
	}
	if (cs.n_reqs == 0)
		return 0;

	memset(&sh, 0, sizeof sh);
	http_server_init(&sh.s, NULL, 0);
	sh.cs = &cs;
	sh.us = &us;
	sh.req_k = -1;
	size_t rcap = RCAPS[flags & 3], slack = SLACKS[(flags >> 2) & 3];
	sh.c = (side){.st = &cs, .buf = cbuf, .cap = rcap, .limit = cs.len};
	sh.u = (side){.st = &us, .buf = ubuf, .cap = rcap, .gone = true};
	sh.uq = (queue){.d = uqd, .cap = HTTP_OUT_HEAD_MAX + rcap + slack, .wire = uwire};
	sh.cq = (queue){.d = cqd, .cap = PROTO_OUT_MAX + HTTP_OUT_HEAD_MAX + rcap + slack,
	                .wire = cwire};
	CHECK(sh.uq.cap <= sizeof uqd && sh.cq.cap <= sizeof cqd);

	for (size_t i = 0; i + 1 < sched; i += 2)
		step(&sh, ops[i], ops[i + 1]);
	finish(&sh);

	archive(sh.done_reqs, &sh.n_done_reqs, &sh.req);
	archive(sh.done_resps, &sh.n_done_resps, &sh.resp);
	for (size_t i = 0; i < sh.n_done_reqs; i++)
		check_wire(&cs, &sh.uq, &sh.done_reqs[i]);
	for (size_t i = 0; i < sh.n_done_resps; i++)
		check_wire(&us, &sh.cq, &sh.done_resps[i]);
	return 0;
}
