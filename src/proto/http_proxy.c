/* http_proxy.c - the HTTP forward proxy core: requests checked and rewritten, bodies framed, answers from one table. */
#include "proto/http_proxy.h"

#include <stdio.h>
#include <string.h>

#include "base/bytes.h"
#include "proto/http_rewrite.h"

enum state {
	ST_HEAD = 0, /* waiting for a request head */
	ST_DIAL,     /* OPEN given, waiting for opened / failed */
	ST_EXCHANGE, /* request forwarded: its body and / or the response under way */
	ST_TUNNEL,   /* CONNECT established: the shell relays */
	ST_CLOSED,
};

enum resp_phase {
	RESP_HEAD = 0, /* waiting for a (final) response head */
	RESP_BODY,
	RESP_DONE,     /* response over, the request body still coming */
};

enum head_to {
	TO_NONE = 0,
	TO_UPSTREAM,
	TO_CLIENT,
};

/* Every status line, field and text the core writes, in one place (STYLE
 * 5). A row with a status is an answer (its reason is the text/plain body
 * and ev->reason); a row with only a reason names why a connection closed
 * without one; a row with only fields is a line the rewrite adds. */
enum text {
	T_ESTABLISHED,
	T_BAD_START,
	T_BAD_FIELD,
	T_OBS_FOLD,
	T_LINE_END,
	T_NOT_ABSOLUTE,
	T_HTTPS,
	T_SCHEME,
	T_BAD_TARGET,
	T_USERINFO,
	T_BAD_HOST,
	T_CONNECT_TARGET,
	T_CONNECT_BODY,
	T_BAD_LENGTH,
	T_TE_AND_CL,
	T_TE_NOT_CHUNKED,
	T_TE_HTTP10,
	T_TOO_MANY_OPTIONS,
	T_AUTH,
	T_HEAD_TOO_BIG,
	T_TOO_MANY_FIELDS,
	T_TE_UNSUPPORTED,
	T_VERSION,
	T_DIAL_GENERAL,
	T_DIAL_NOT_ALLOWED,
	T_DIAL_NET,
	T_DIAL_HOST,
	T_DIAL_REFUSED,
	T_DIAL_TIMEOUT,
	T_UP_BAD,
	T_UP_TOO_BIG,
	T_UP_LENGTH,
	T_UP_UPGRADE,
	T_UP_CLOSED,
	T_BAD_CHUNK,
	T_UP_BAD_CHUNK,
	T_UP_TRUNCATED,
	T_UP_GONE,
	T_UP_UNSOLICITED,
	T_DONE,
	T_CLIENT_DONE,
	T_CLIENT_CUT,
	T_FIELD_HOST,
	T_FIELD_CLOSE,
	T_FIELD_KEEP,
};

static const struct text_row {
	const char *status;
	const char *fields;
	const char *reason;
} TEXTS[] = {
	[T_ESTABLISHED] = {"200 Connection established", "", NULL},
	[T_BAD_START] = {"400 Bad Request", "", "malformed request line"},
	[T_BAD_FIELD] = {"400 Bad Request", "", "malformed header field"},
	[T_OBS_FOLD] = {"400 Bad Request", "", "obsolete line folding is not accepted"},
	[T_LINE_END] = {"400 Bad Request", "", "lines must end in CRLF"},
	[T_NOT_ABSOLUTE] = {"400 Bad Request", "", "a proxy request needs an absolute http:// URI"},
	[T_HTTPS] = {"400 Bad Request", "", "https:// URIs go through CONNECT"},
	[T_SCHEME] = {"400 Bad Request", "", "unsupported URI scheme"},
	[T_BAD_TARGET] = {"400 Bad Request", "", "malformed request target"},
	[T_USERINFO] = {"400 Bad Request", "", "userinfo in the request target"},
	[T_BAD_HOST] = {"400 Bad Request", "", "bad host or port in the request target"},
	[T_CONNECT_TARGET] = {"400 Bad Request", "", "CONNECT needs host:port"},
	[T_CONNECT_BODY] = {"400 Bad Request", "", "CONNECT with a body"},
	[T_BAD_LENGTH] = {"400 Bad Request", "", "invalid Content-Length"},
	[T_TE_AND_CL] = {"400 Bad Request", "", "both Transfer-Encoding and Content-Length"},
	[T_TE_NOT_CHUNKED] = {"400 Bad Request", "", "chunked is not the final transfer coding"},
	[T_TE_HTTP10] = {"400 Bad Request", "", "Transfer-Encoding in an HTTP/1.0 request"},
	[T_TOO_MANY_OPTIONS] = {"400 Bad Request", "", "too many Connection options"},
	[T_AUTH] = {"407 Proxy Authentication Required",
	            "Proxy-Authenticate: Basic realm=\"etemenanki\"\r\n",
	            "proxy authentication required"},
	[T_HEAD_TOO_BIG] = {"431 Request Header Fields Too Large", "", "request head too large"},
	[T_TOO_MANY_FIELDS] = {"431 Request Header Fields Too Large", "", "too many header fields"},
	[T_TE_UNSUPPORTED] = {"501 Not Implemented", "", "unsupported transfer coding"},
	[T_VERSION] = {"505 HTTP Version Not Supported", "", "HTTP version not supported"},
	[T_DIAL_GENERAL] = {"502 Bad Gateway", "", "cannot connect to the destination"},
	[T_DIAL_NOT_ALLOWED] = {"403 Forbidden", "", "destination not allowed"},
	[T_DIAL_NET] = {"502 Bad Gateway", "", "network unreachable"},
	[T_DIAL_HOST] = {"502 Bad Gateway", "", "host unreachable"},
	[T_DIAL_REFUSED] = {"502 Bad Gateway", "", "connection refused"},
	[T_DIAL_TIMEOUT] = {"504 Gateway Timeout", "", "connection timed out"},
	[T_UP_BAD] = {"502 Bad Gateway", "", "malformed response from the destination"},
	[T_UP_TOO_BIG] = {"502 Bad Gateway", "", "response head from the destination too large"},
	[T_UP_LENGTH] = {"502 Bad Gateway", "", "invalid Content-Length in the response"},
	[T_UP_UPGRADE] = {"502 Bad Gateway", "", "unexpected 101 Switching Protocols"},
	[T_UP_CLOSED] = {"502 Bad Gateway", "", "the destination closed the connection without a response"},
	[T_BAD_CHUNK] = {NULL, NULL, "malformed chunked request body"},
	[T_UP_BAD_CHUNK] = {NULL, NULL, "malformed chunked response body"},
	[T_UP_TRUNCATED] = {NULL, NULL, "the destination closed the connection mid-response"},
	[T_UP_GONE] = {NULL, NULL, "the destination closed the connection before the request was sent"},
	[T_UP_UNSOLICITED] = {NULL, NULL, "response bytes without a request"},
	[T_DONE] = {NULL, NULL, "response complete; the connection is not persistent"},
	[T_CLIENT_DONE] = {NULL, NULL, "the client closed the connection"},
	[T_CLIENT_CUT] = {NULL, NULL, "the client closed the connection mid-request"},
	[T_FIELD_HOST] = {NULL, "Host: ", NULL},
	[T_FIELD_CLOSE] = {NULL, "Connection: close\r\n", NULL},
	[T_FIELD_KEEP] = {NULL, "Connection: keep-alive\r\n", NULL},
};

/* The frame of every answer: status, extra fields, length, body. */
static const char ANSWER_FORMAT[] = "HTTP/1.1 %s\r\n%sContent-Type: text/plain\r\n"
                                    "Content-Length: %zu\r\nConnection: close\r\n\r\n%s";
static const char BARE_FORMAT[] = "HTTP/1.1 %s\r\n%s\r\n";

/* Writes the answer for t into out; detail (the shell's dial reason, may be
 * NULL) is appended to the body, sanitised and cut. */
static void write_answer(proto_out *out, enum text t, const char *detail)
{
	const struct text_row *x = &TEXTS[t];
	int n;
	if (!x->reason) {
		n = snprintf((char *)out->buf, sizeof out->buf, BARE_FORMAT, x->status, x->fields);
	} else {
		char body[256 + HTTP_REASON_MAX];
		size_t len = strlen(x->reason);
		memcpy(body, x->reason, len);
		if (detail && *detail) {
			body[len++] = ':';
			body[len++] = ' ';
			for (size_t i = 0; detail[i] && i < HTTP_REASON_MAX; i++) {
				char c = detail[i];
				body[len++] = c >= 0x20 && c < 0x7f ? c : '?';
			}
		}
		body[len++] = '\n';
		body[len] = '\0';
		n = snprintf((char *)out->buf, sizeof out->buf, ANSWER_FORMAT, x->status, x->fields,
		             len, body);
	}
	/* The table and HTTP_REASON_MAX keep every answer far below PROTO_OUT_MAX. */
	out->len = n > 0 && (size_t)n < sizeof out->buf ? (size_t)n : 0;
}

static void close_quiet(http_server *s, proto_event *ev, enum text t)
{
	s->state = ST_CLOSED;
	ev->kind = PROTO_EV_CLOSE;
	ev->reason = TEXTS[t].reason;
}

/* Answers t and closes. A head over its bounds is PROTO_ERR_TOO_BIG. */
static ssize_t refuse(http_server *s, proto_out *out, proto_event *ev, enum text t)
{
	write_answer(out, t, NULL);
	close_quiet(s, ev, t);
	return t == T_HEAD_TOO_BIG || t == T_TOO_MANY_FIELDS ? PROTO_ERR_TOO_BIG : 0;
}

/* Compares without an early exit, so the time does not tell how much of a
 * guess was right. */
static bool same_secret(const char *want, size_t wn, const uint8_t *got, size_t n)
{
	uint8_t diff = wn != n;
	for (size_t i = 0; i < n; i++)
		diff |= (uint8_t)(got[i] ^ (uint8_t)(wn ? want[i < wn ? i : 0] : 0));
	return diff == 0;
}

/* Checks the Proxy-Authorization value v against the accounts: returns the
 * index of the first that matches, or -1. */
static int check_basic(const http_server *s, const uint8_t *v, size_t n)
{
	uint8_t cred[HTTP_CREDENTIALS_MAX];
	size_t un;
	ssize_t cn = http_parse_basic(v, n, cred, sizeof cred, &un);
	if (cn < 0)
		return -1;
	int found = -1;
	for (size_t k = 0; k < s->n_users; k++) {
		const proto_account *u = &s->users[k];
		if (!u->user)
			continue;
		bool ok = same_secret(u->user, u->user_len, cred, un);
		ok &= same_secret(u->pass, u->pass ? u->pass_len : 0, cred + un + 1, (size_t)cn - un - 1);
		if (ok && found < 0)
			found = (int)k;
	}
	return found;
}

static enum text request_parse_text(ssize_t r)
{
	switch (r) {
	case HTTP_PARSE_FIELD:
		return T_BAD_FIELD;
	case HTTP_PARSE_OBS_FOLD:
		return T_OBS_FOLD;
	case HTTP_PARSE_LINE_END:
		return T_LINE_END;
	case HTTP_PARSE_VERSION:
		return T_VERSION;
	case HTTP_PARSE_TOO_BIG:
		return T_HEAD_TOO_BIG;
	case HTTP_PARSE_TOO_MANY:
		return T_TOO_MANY_FIELDS;
	default:
		return T_BAD_START;
	}
}

/* Whether t starts like "scheme://" (RFC 3986 3.1). */
static bool has_scheme(const uint8_t *t, size_t n)
{
	size_t i = 0;
	while (i < n && ((t[i] >= 'a' && t[i] <= 'z') || (t[i] >= 'A' && t[i] <= 'Z') ||
	                 (i > 0 && ((t[i] >= '0' && t[i] <= '9') || t[i] == '+' || t[i] == '-' ||
	                            t[i] == '.'))))
		i++;
	return i > 0 && n - i >= 3 && memcmp(t + i, "://", 3) == 0;
}

/* Where an absolute-form target's parts are (RFC 9112 3.2.2). */
struct target {
	const uint8_t *authority, *rest; /* rest: path and query, may be empty */
	size_t authority_len, rest_len;
};

static int split_target(const uint8_t *t, size_t n, struct target *x, enum text *why)
{
	if (memchr(t, '#', n)) { /* a fragment is never part of a request-target */
		*why = T_BAD_TARGET;
		return -1;
	}
	if (n < 7 || !http_eq_nocase(t, 7, "http://")) {
		if (n >= 8 && http_eq_nocase(t, 8, "https://"))
			*why = T_HTTPS;
		else if (t[0] != '/' && t[0] != '*' && has_scheme(t, n))
			*why = T_SCHEME;
		else
			*why = T_NOT_ABSOLUTE;
		return -1;
	}
	size_t i = 7;
	while (i < n && t[i] != '/' && t[i] != '?')
		i++;
	x->authority = t + 7;
	x->authority_len = i - 7;
	x->rest = t + i;
	x->rest_len = n - i;
	if (memchr(x->authority, '@', x->authority_len)) { /* RFC 9110 4.2.4 */
		*why = T_USERINFO;
		return -1;
	}
	return 0;
}

/* Writes the origin-form request head (RFC 9112 3.2.1, 3.2.2, 3.2.4). */
static bool write_request(http_server *s, const uint8_t *in, const http_head *h,
                          const http_meta *m, const struct target *x)
{
	http_wbuf w = {.p = s->head};
	const uint8_t *method = in + h->method.off;
	http_wbuf_put(&w, method, h->method.len);
	http_wbuf_put(&w, " ", 1);
	if (x->rest_len == 0 && h->method.len == 7 && memcmp(method, "OPTIONS", 7) == 0)
		http_wbuf_put(&w, "*", 1);
	else if (x->rest_len == 0 || x->rest[0] == '?')
		http_wbuf_put(&w, "/", 1);
	http_wbuf_put(&w, x->rest, x->rest_len);
	http_wbuf_put(&w, " ", 1);
	http_wbuf_put(&w, in + h->start.off + h->start.len - 8, 8); /* "HTTP/1.x" */
	http_wbuf_put(&w, "\r\n", 2);
	/* RFC 9112 3.2.2: the Host comes from the target, not the client's
	 * field; RFC 9112 3.2 wants it first. */
	http_wbuf_put_str(&w, TEXTS[T_FIELD_HOST].fields);
	http_wbuf_put(&w, x->authority, x->authority_len);
	http_wbuf_put(&w, "\r\n", 2);
	http_put_fields(&w, in, h, m, true);
	if (s->client_close)
		http_wbuf_put_str(&w, TEXTS[T_FIELD_CLOSE].fields);
	else if (s->client_10)
		http_wbuf_put_str(&w, TEXTS[T_FIELD_KEEP].fields);
	http_wbuf_put(&w, "\r\n", 2);
	s->head_len = w.len;
	return !w.over;
}

/* A complete request head: refuse it, open a tunnel or forward it. */
static ssize_t on_request(http_server *s, const uint8_t *in, const http_head *h, proto_out *out,
                          proto_event *ev)
{
	http_meta m;
	http_meta_read(in, h, &m);
	if (m.has_te && h->minor == 0) /* RFC 9112 6.1: faulty framing */
		return refuse(s, out, ev, T_TE_HTTP10);
	if (m.has_te && m.has_cl) /* RFC 9112 6.1: a server MAY reject */
		return refuse(s, out, ev, T_TE_AND_CL);
	if (m.has_te && !m.te_chunked_last) /* RFC 9112 6.3 item 4: MUST 400 */
		return refuse(s, out, ev, T_TE_NOT_CHUNKED);
	if (m.has_te && m.te_codings > 1) /* RFC 9112 6.1: SHOULD 501 */
		return refuse(s, out, ev, T_TE_UNSUPPORTED);
	if (m.cl_bad) /* RFC 9112 6.3 item 5 */
		return refuse(s, out, ev, T_BAD_LENGTH);
	if (m.options_over)
		return refuse(s, out, ev, T_TOO_MANY_OPTIONS);

	int user = -1;
	if (s->n_users > 0) {
		if (m.auth >= 0) {
			const http_field *f = &h->fields[m.auth];
			user = check_basic(s, in + f->value.off, f->value.len);
		}
		if (user < 0)
			return refuse(s, out, ev, T_AUTH);
	}

	const uint8_t *method = in + h->method.off;
	const uint8_t *t = in + h->target.off;
	addr_dest dest;
	if (h->method.len == 7 && memcmp(method, "CONNECT", 7) == 0) {
		if (http_parse_authority(t, h->target.len, 0, &dest) < 0)
			return refuse(s, out, ev, T_CONNECT_TARGET);
		if (m.has_te || (m.has_cl && m.cl > 0)) /* RFC 9110 9.3.6: no content */
			return refuse(s, out, ev, T_CONNECT_BODY);
		s->connect = true;
		s->dest = dest;
		s->user = user;
		s->up_open = false;
		s->state = ST_DIAL;
		*ev = (proto_event){.kind = PROTO_EV_OPEN, .cmd = PROTO_CMD_CONNECT, .dest = dest,
		                    .user = user};
		return (ssize_t)h->len;
	}

	struct target x;
	enum text why;
	if (split_target(t, h->target.len, &x, &why) < 0)
		return refuse(s, out, ev, why);
	if (http_parse_authority(x.authority, x.authority_len, 80, &dest) < 0)
		return refuse(s, out, ev, T_BAD_HOST);

	/* RFC 9112 9.3: 1.1 persists unless "close"; 1.0 only with keep-alive. */
	s->connect = false;
	s->client_10 = h->minor == 0;
	s->client_close = m.conn_close || (s->client_10 && !m.conn_keep);
	s->head_method = h->method.len == 4 && memcmp(method, "HEAD", 4) == 0;
	if (!write_request(s, in, h, &m, &x))
		return refuse(s, out, ev, T_HEAD_TOO_BIG);
	http_body_start(&s->req_body,
	                m.has_te ? HTTP_BODY_CHUNKED : m.has_cl ? HTTP_BODY_LENGTH : HTTP_BODY_NONE,
	                m.cl);
	s->resp_phase = RESP_HEAD;
	s->scan = 0;
	bool reuse = s->up_open && s->up_reusable && s->up_user == user && addr_dest_same(&s->up_dest, &dest);
	s->dest = dest;
	s->user = user;
	if (!reuse) {
		s->up_open = false;
		s->state = ST_DIAL;
		*ev = (proto_event){.kind = PROTO_EV_OPEN, .cmd = PROTO_CMD_CONNECT, .dest = dest,
		                    .user = user};
	} else {
		s->state = ST_EXCHANGE;
		s->head_to = TO_UPSTREAM;
	}
	return (ssize_t)h->len;
}

/* Called when either half of an exchange ends: the next request may come
 * once both have, unless the connection was to close after the response. */
static void finish(http_server *s, proto_event *ev)
{
	if (s->resp_phase != RESP_DONE)
		return;
	if (s->client_close) {
		close_quiet(s, ev, T_DONE);
		return;
	}
	if (!s->req_body.done)
		return;
	s->state = ST_HEAD;
	s->scan = 0;
}

void http_server_init(http_server *s, const proto_account *users, size_t n_users)
{
	memset(s, 0, sizeof *s);
	s->users = users;
	s->n_users = users ? n_users : 0;
	s->user = s->up_user = -1;
}

static void reset_call(proto_out *out, proto_event *ev)
{
	out->len = 0;
	*ev = (proto_event){.kind = PROTO_EV_NONE, .user = -1};
}

ssize_t http_server_feed(http_server *s, const uint8_t *in, size_t len, proto_out *out,
                         proto_event *ev)
{
	reset_call(out, ev);
	s->up_body_len = 0;
	s->head_to = TO_NONE;
	size_t off = 0;
	if (s->state == ST_HEAD) {
		/* RFC 9112 2.2: ignore empty lines before a request line. */
		while (len - off >= 2 && in[off] == '\r' && in[off + 1] == '\n')
			off += 2;
		if (off) {
			s->scan = 0;
			return (ssize_t)off;
		}
		http_head h;
		ssize_t r = http_parse_request(in, len, &s->scan, &h);
		if (r == 0)
			return 0;
		if (r < 0)
			return refuse(s, out, ev, request_parse_text(r));
		ssize_t rc = on_request(s, in, &h, out, ev);
		if (rc < 0 || ev->kind != PROTO_EV_NONE)
			return rc;
		off = (size_t)r; /* a reused upstream: the body may follow at once */
	} else if (s->state != ST_EXCHANGE) {
		return PROTO_ERR_STATE;
	}
	if (s->req_body.done)
		return (ssize_t)off; /* the next request waits for the response */
	ssize_t n = http_body_step(&s->req_body, in + off, len - off);
	if (n < 0) {
		close_quiet(s, ev, T_BAD_CHUNK);
		return 0;
	}
	s->up_body = in + off;
	s->up_body_len = (size_t)n;
	off += (size_t)n;
	if (s->req_body.done)
		finish(s, ev);
	return (ssize_t)off;
}

int http_server_opened(http_server *s, proto_out *out)
{
	out->len = 0;
	if (s->state != ST_DIAL)
		return PROTO_ERR_STATE;
	s->up_open = true;
	s->up_reusable = true;
	s->up_dest = s->dest;
	s->up_user = s->user;
	if (s->connect) {
		write_answer(out, T_ESTABLISHED, NULL);
		s->state = ST_TUNNEL;
		return 0;
	}
	s->state = ST_EXCHANGE;
	s->head_to = TO_UPSTREAM;
	return 0;
}

int http_server_failed(http_server *s, proto_dial_error e, const char *reason, proto_out *out)
{
	out->len = 0;
	if (s->state != ST_DIAL)
		return PROTO_ERR_STATE;
	enum text t;
	switch (e) {
	case PROTO_DIAL_NOT_ALLOWED:
		t = T_DIAL_NOT_ALLOWED;
		break;
	case PROTO_DIAL_NET_UNREACHABLE:
		t = T_DIAL_NET;
		break;
	case PROTO_DIAL_HOST_UNREACHABLE:
		t = T_DIAL_HOST;
		break;
	case PROTO_DIAL_REFUSED:
		t = T_DIAL_REFUSED;
		break;
	case PROTO_DIAL_TIMED_OUT:
		t = T_DIAL_TIMEOUT;
		break;
	default:
		t = T_DIAL_GENERAL;
		break;
	}
	write_answer(out, t, reason);
	s->state = ST_CLOSED;
	return 0;
}

bool http_server_between_requests(const http_server *s) { return s->state == ST_HEAD; }

bool http_server_is_tunnel(const http_server *s)
{
	return s->state == ST_TUNNEL;
}

bool http_server_dialing_connect(const http_server *s)
{
	return s->state == ST_DIAL && s->connect;
}

bool http_server_take_upstream(http_server *s, const uint8_t **data, size_t *len)
{
	if (s->head_to == TO_UPSTREAM && s->head_len) {
		s->head_to = TO_NONE;
		*data = s->head;
		*len = s->head_len;
		return true;
	}
	if (s->up_body_len) {
		*data = s->up_body;
		*len = s->up_body_len;
		s->up_body_len = 0;
		return true;
	}
	return false;
}

bool http_server_take_client(http_server *s, const uint8_t **data, size_t *len)
{
	if (s->head_to == TO_CLIENT && s->head_len) {
		s->head_to = TO_NONE;
		*data = s->head;
		*len = s->head_len;
		return true;
	}
	if (s->cl_body_len) {
		*data = s->cl_body;
		*len = s->cl_body_len;
		s->cl_body_len = 0;
		return true;
	}
	return false;
}

/* A complete response head: check its framing, rewrite it for the client. */
static ssize_t on_response(http_server *s, const uint8_t *in, const http_head *h, proto_out *out,
                           proto_event *ev)
{
	/* The request never carries Upgrade, so a 101 is a broken answer. */
	if (h->status == 101)
		return refuse(s, out, ev, T_UP_UPGRADE);
	http_meta m;
	http_meta_read(in, h, &m);
	if (m.options_over)
		return refuse(s, out, ev, T_UP_BAD);
	bool info = h->status < 200;
	http_body_mode mode;
	/* RFC 9112 6.3, in its order. */
	if (info || s->head_method || h->status == 204 || h->status == 304)
		mode = HTTP_BODY_NONE;
	else if (m.has_te) /* item 3; 6.1: TE on 1.0 means faulty framing */
		mode = m.te_chunked_last && h->minor > 0 ? HTTP_BODY_CHUNKED : HTTP_BODY_CLOSE;
	else if (m.cl_bad) /* item 5: close, discard, 502 */
		return refuse(s, out, ev, T_UP_LENGTH);
	else if (m.has_cl)
		mode = HTTP_BODY_LENGTH;
	else
		mode = HTTP_BODY_CLOSE;
	if (info && s->client_10) /* RFC 9110 15.2: no 1xx to a 1.0 client */
		return (ssize_t)h->len;
	if (!info) {
		s->up_reusable = !m.conn_close && (h->minor > 0 || m.conn_keep) && mode != HTTP_BODY_CLOSE;
		if (mode == HTTP_BODY_CLOSE || (s->client_10 && mode == HTTP_BODY_CHUNKED))
			s->client_close = true;
	}
	http_wbuf w = {.p = s->head};
	http_wbuf_put(&w, in + h->start.off, h->start.len);
	http_wbuf_put(&w, "\r\n", 2);
	http_put_fields(&w, in, h, &m, false);
	if (!info && s->client_close)
		http_wbuf_put_str(&w, TEXTS[T_FIELD_CLOSE].fields);
	else if (!info && s->client_10)
		http_wbuf_put_str(&w, TEXTS[T_FIELD_KEEP].fields);
	http_wbuf_put(&w, "\r\n", 2);
	if (w.over)
		return refuse(s, out, ev, T_UP_TOO_BIG);
	s->head_len = w.len;
	s->head_to = TO_CLIENT;
	if (!info) {
		http_body_start(&s->resp_body, mode, m.cl);
		s->resp_phase = RESP_BODY;
	}
	return (ssize_t)h->len;
}

ssize_t http_server_feed_upstream(http_server *s, const uint8_t *in, size_t len, proto_out *out,
                                  proto_event *ev)
{
	reset_call(out, ev);
	s->cl_body_len = 0;
	s->head_to = TO_NONE;
	if (s->state == ST_HEAD && len > 0) {
		close_quiet(s, ev, T_UP_UNSOLICITED);
		return 0;
	}
	if (s->state == ST_HEAD)
		return 0;
	if (s->state != ST_EXCHANGE)
		return PROTO_ERR_STATE;
	size_t off = 0;
	if (s->resp_phase == RESP_HEAD) {
		http_head h;
		ssize_t r = http_parse_response(in, len, &s->scan, &h);
		if (r == 0)
			return 0;
		if (r < 0)
			return refuse(s, out, ev,
			              r == HTTP_PARSE_TOO_BIG || r == HTTP_PARSE_TOO_MANY ? T_UP_TOO_BIG
			                                                                 : T_UP_BAD);
		ssize_t rc = on_response(s, in, &h, out, ev);
		if (rc < 0 || ev->kind != PROTO_EV_NONE)
			return rc;
		off = (size_t)r;
		if (s->resp_phase == RESP_HEAD)
			return (ssize_t)off; /* a 1xx: one head per call */
	}
	if (s->resp_phase == RESP_DONE) {
		if (len > 0)
			close_quiet(s, ev, T_UP_UNSOLICITED);
		return 0;
	}
	ssize_t n = http_body_step(&s->resp_body, in + off, len - off);
	if (n < 0) {
		close_quiet(s, ev, T_UP_BAD_CHUNK);
		return (ssize_t)off;
	}
	s->cl_body = in + off;
	s->cl_body_len = (size_t)n;
	off += (size_t)n;
	if (s->resp_body.done) {
		s->resp_phase = RESP_DONE;
		finish(s, ev);
	}
	return (ssize_t)off;
}

int http_server_upstream_eof(http_server *s, proto_out *out, proto_event *ev)
{
	reset_call(out, ev);
	if (s->state == ST_HEAD) {
		s->up_open = false;
		return 0;
	}
	if (s->state != ST_EXCHANGE)
		return PROTO_ERR_STATE;
	s->up_open = false;
	if (s->resp_phase == RESP_HEAD) {
		(void)refuse(s, out, ev, T_UP_CLOSED);
	} else if (s->resp_phase == RESP_BODY && s->resp_body.mode == HTTP_BODY_CLOSE) {
		/* RFC 9112 6.3 item 8: the close is the end of this body. */
		s->resp_body.done = true;
		s->resp_phase = RESP_DONE;
		finish(s, ev);
		if (ev->kind == PROTO_EV_NONE) /* never: CLOSE bodies set client_close */
			close_quiet(s, ev, T_DONE);
	} else {
		close_quiet(s, ev, s->resp_phase == RESP_BODY ? T_UP_TRUNCATED : T_UP_GONE);
	}
	return 0;
}

int http_server_client_eof(http_server *s, proto_event *ev)
{
	*ev = (proto_event){.kind = PROTO_EV_NONE, .user = -1};
	switch (s->state) {
	case ST_HEAD:
		close_quiet(s, ev, T_CLIENT_DONE);
		return 0;
	case ST_DIAL:
	case ST_EXCHANGE:
		if (!s->connect && !s->req_body.done) {
			close_quiet(s, ev, T_CLIENT_CUT);
			return 0;
		}
		s->client_close = true;
		return 0;
	default:
		return PROTO_ERR_STATE;
	}
}
