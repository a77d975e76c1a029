/* test_api.c - the admin API's core with a fake provider: every route's status and JSON byte for byte (shapes from the Clash API documentation), the secret, CORS preflight, bodies, queries, and every message word for word. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "app/api.h"
#include "app/api_http.h"
#include "base/log.h"
#include "specload.h"

/* ---------------------------------------------------------------- the fake */

typedef struct fake {
	etm_flow flows[4];
	size_t n_flows;
	uint64_t up, down;
	uint64_t killed;  /* the last id given to kill */
	int asked_closed; /* what flows was last asked for */
	int kill_where_calls;
	etm_flow_filter last_filter; /* strings copied below */
	char filter_user[32], filter_inbound[32], filter_outbound[32];
	char removed[64];    /* "inbound/name" of the last remove_user */
	uint64_t limits[3];  /* the last upsert_user's */
	char upserted[160];  /* "inbound/name/username/password/id" of it ("-": NULL) */
	int level, reloads;
	const char *reload_error; /* NULL: the reload succeeds */
	int member_up[4][4];
	int64_t probe_delay;
	uint64_t probe_when;
} fake;

static int f_flows(void *ctx, int closed, etm_flow_list *out)
{
	fake *f = ctx;
	f->asked_closed = closed;
	out->v = calloc(f->n_flows + 1, sizeof *out->v);
	memcpy(out->v, f->flows, f->n_flows * sizeof *out->v);
	out->n = f->n_flows;
	return 0;
}

static void f_traffic(void *ctx, uint64_t *up, uint64_t *down)
{
	fake *f = ctx;
	*up = f->up;
	*down = f->down;
}

static int f_kill(void *ctx, uint64_t id)
{
	fake *f = ctx;
	f->killed = id;
	return id == 7 ? 0 : -1;
}

static size_t f_kill_where(void *ctx, const etm_flow_filter *w)
{
	fake *f = ctx;
	f->kill_where_calls++;
	f->last_filter = *w;
	snprintf(f->filter_user, sizeof f->filter_user, "%s", w->user ? w->user : "(any)");
	snprintf(f->filter_inbound, sizeof f->filter_inbound, "%s", w->inbound ? w->inbound : "(any)");
	snprintf(f->filter_outbound, sizeof f->filter_outbound, "%s",
	         w->outbound ? w->outbound : "(any)");
	return 2;
}

/* alice on inbounds s and h, bob on s */
static int f_users(void *ctx, etm_user_list *out)
{
	(void)ctx;
	out->v = calloc(3, sizeof *out->v);
	out->n = 3;
	out->v[0] = (etm_user_info){.inbound = "s", .name = "alice", .up_rate = 100,
	                            .max_sessions = 2, .sessions = 1};
	out->v[1] = (etm_user_info){.inbound = "s", .name = "bob"};
	out->v[2] = (etm_user_info){.inbound = "h", .name = "alice"};
	return 0;
}

/* "nobody" is no user; "last" is a trojan inbound's last user (the
 * config check refuses to remove it); "bad" has a malformed credential */
static long f_remove_user(void *ctx, const char *inbound, const char *name, char *err,
                          size_t err_size)
{
	fake *f = ctx;
	snprintf(f->removed, sizeof f->removed, "%s/%s", inbound ? inbound : "*", name);
	if (strcmp(name, "last") == 0) {
		snprintf(err, err_size, "inbound t: protocol trojan needs settings.users");
		return -1;
	}
	return strcmp(name, "nobody") != 0;
}

static long f_upsert_user(void *ctx, const char *inbound, const etm_user_spec *u, char *err,
                          size_t err_size)
{
	fake *f = ctx;
	snprintf(f->upserted, sizeof f->upserted, "%s/%s/%s/%s/%s", inbound ? inbound : "*",
	         u->name, u->username ? u->username : "-", u->password ? u->password : "-",
	         u->id ? u->id : "-");
	f->limits[0] = u->up_rate;
	f->limits[1] = u->down_rate;
	f->limits[2] = u->max_sessions;
	if (strcmp(u->name, "bad") == 0) {
		snprintf(err, err_size, "inbound v: user bad: id is not a UUID");
		return -1;
	}
	return strcmp(u->name, "nobody") != 0 || inbound != NULL;
}

static int f_usage(void *ctx, etm_usage_list *out)
{
	(void)ctx;
	out->v = calloc(2, sizeof *out->v);
	out->n = 2;
	out->v[0] = (etm_usage){.name = "", .up = 1, .down = 2, .open = 0, .total = 3};
	out->v[1] = (etm_usage){.name = "alice", .up = 10, .down = 20, .open = 1, .total = 4};
	return 0;
}

static int f_member_up(void *ctx, size_t i, size_t j, int *up)
{
	fake *f = ctx;
	if (i >= 4 || j >= 4)
		return -1;
	*up = f->member_up[i][j];
	return 0;
}

static int f_member_probe(void *ctx, size_t i, size_t j, int64_t *delay, uint64_t *when)
{
	fake *f = ctx;
	bool probed = i == 0 && j == 0; /* fo's "a b" only */
	*delay = probed ? f->probe_delay : -1;
	*when = probed ? f->probe_when : 0;
	return 0;
}

static uint16_t f_inbound_port(void *ctx, const char *tag)
{
	(void)ctx;
	return strcmp(tag, "s") == 0 ? 1080 : strcmp(tag, "h") == 0 ? 8080 : 7890;
}

static int f_log_level(void *ctx) { return ((fake *)ctx)->level; }

static void f_set_log_level(void *ctx, int level) { ((fake *)ctx)->level = level; }

static int f_reload(void *ctx, char *err, size_t size)
{
	fake *f = ctx;
	f->reloads++;
	if (!f->reload_error)
		return 0;
	snprintf(err, size, "%s", f->reload_error);
	return -1;
}

static int f_metrics(void *ctx, api_buf *out)
{
	(void)ctx;
	out->p = strdup("etemenanki_flows_open 0\n");
	out->len = out->cap = strlen(out->p);
	return 0;
}

static int f_udplb(void *ctx, size_t i, const char **tag, etm_udplb_stats *st)
{
	(void)ctx;
	if (i >= 2)
		return -2;
	if (i == 0)
		return -1;
	*tag = "lb";
	*st = (etm_udplb_stats){.active_flows = 1, .flows_created = 2};
	st->drops[0] = 5;
	st->evicted[0] = 6;
	return 0;
}

static int f_udplb_backend(void *ctx, size_t i, size_t j, char *addr, size_t size, int *up,
                           uint64_t *flows)
{
	(void)ctx;
	if (i != 1 || j >= 1)
		return -1;
	snprintf(addr, size, "10.0.0.1:53");
	*up = 1;
	*flows = 2;
	return 0;
}

static uint64_t f_memory(void *ctx)
{
	(void)ctx;
	return 4096;
}

static fake F;
static const api_provider P = {
	.ctx = &F,
	.flows = f_flows,
	.traffic = f_traffic,
	.kill = f_kill,
	.kill_where = f_kill_where,
	.usage_users = f_usage,
	.users = f_users,
	.remove_user = f_remove_user,
	.upsert_user = f_upsert_user,
	.member_up = f_member_up,
	.member_probe = f_member_probe,
	.inbound_port = f_inbound_port,
	.log_level = f_log_level,
	.set_log_level = f_set_log_level,
	.reload = f_reload,
	.metrics = f_metrics,
	.udplb = f_udplb,
	.udplb_backend = f_udplb_backend,
	.memory = f_memory,
};

static const char CONFIG[] =
	"[[inbound]]\ntag = \"s\"\nprotocol = \"socks\"\nlisten = \"127.0.0.1\"\nport = 1080\n"
	"[[inbound]]\ntag = \"h\"\nprotocol = \"http\"\nlisten = \"127.0.0.1\"\nport = 8080\n"
	"[[outbound]]\ntag = \"direct\"\nprotocol = \"freedom\"\n"
	"[[outbound]]\ntag = \"block\"\nprotocol = \"blackhole\"\n"
	"[[outbound]]\ntag = \"x/y\"\nprotocol = \"freedom\"\n"
	"[[outbound]]\ntag = \"a b\"\nprotocol = \"socks\"\nserver = \"192.0.2.1\"\nport = 1081\n"
	"[[outbound]]\ntag = \"t\"\nprotocol = \"trojan\"\nserver = \"proxy.example\"\nport = 443\n"
	"[outbound.settings]\npassword = \"x\"\n"
	"[[balancer]]\ntag = \"fo\"\noutbounds = [\"a b\", \"t\"]\n"
	"[[balancer]]\ntag = \"rr\"\noutbounds = [\"t\", \"a b\"]\nstrategy = \"round_robin\"\n"
	"[[route.rule]]\ndomain_suffix = [\"example.com\", \"b.org\"]\noutbound = \"block\"\n"
	"[[route.rule]]\ncidr = [\"10.0.0.0/8\"]\nnetwork = \"udp\"\nport = [\"53\", "
	"\"1000-2000\"]\noutbound = \"fo\"\n";

static api_view V;

static int setup(void **state)
{
	(void)state;
	etm_spec s;
	load_spec(CONFIG, &s);
	assert_int_equal(api_view_init(&V, &s), 0);
	etm_spec_free(&s);
	F = (fake){.level = LOG_LEVEL_INFO};
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	api_view_free(&V);
	return 0;
}

/* One request; the response is the caller's to free. */
static api_response call_body(const char *method, const char *target, const char *auth, bool ws,
                              const char *body)
{
	api_request r = {.method = method,
	                 .method_len = strlen(method),
	                 .target = target,
	                 .target_len = strlen(target),
	                 .auth = auth,
	                 .auth_len = auth ? strlen(auth) : 0,
	                 .websocket = ws,
	                 .body = body ? body : "",
	                 .body_len = body ? strlen(body) : 0};
	api_response out;
	assert_int_equal(api_handle(&V, &P, &r, &out), 0);
	return out;
}

static api_response call(const char *method, const char *target)
{
	return call_body(method, target, NULL, false, NULL);
}

static void expect(const char *method, const char *target, int status, const char *json)
{
	api_response r = call(method, target);
	assert_int_equal(r.status, status);
	assert_int_equal(r.action, API_ANSWER);
	assert_string_equal(r.body.p ? r.body.p : "", json);
	api_response_free(&r);
}

/* ---------------------------------------------------------------- texts */

static void test_messages(void **state)
{
	(void)state;
	const char *want[API_M_COUNT_] = {
		"Unauthorized",
		"resource not found",
		"method not allowed",
		"Body invalid",
		"query parameter invalid",
		"log-level must be silent, error, warn, warning, info, debug or trace",
		"request body over 65536 bytes",
		"request head over 16384 bytes",
		"bad request",
		"only HTTP/1.x is served",
		"out of memory",
		"Timeout",
		"An error occurred in the delay test",
		"too many delay tests at once",
		"no running user has that name (to add one, name its inbound: ?inbound=<tag>)",
		"username, password and id must be JSON strings without escapes",
	};
	for (int i = 0; i < API_M_COUNT_; i++)
		assert_string_equal(api_message((api_msg)i), want[i]);
	assert_string_equal(api_message(API_M_COUNT_), "");
	assert_string_equal(api_reason(401), "Unauthorized");
	assert_string_equal(api_reason(413), "Content Too Large");
	assert_string_equal(api_reason(504), "Gateway Timeout");
	assert_string_equal(api_reason(999), "");
}

static void test_server_messages(void **state)
{
	(void)state;
	const char *want[API_HTTP_MSG_COUNT_] = {
		"api: serving http://%s",
		"api: cannot listen on %s: %s",
		"api: out of memory",
		"api: %d connections open, closing the oldest idle one or the new one",
		"api: %.*s %.*s: %d",
		"reload: [api] secret removed while the API listens on %s, which is not loopback; "
		"the "
		"old secret stays until the next start",
		"api: a WebSocket client sends pings and does not read the answers (%d pongs waiting); "
		"closing it",
	};
	for (int i = 0; i < API_HTTP_MSG_COUNT_; i++)
		assert_string_equal(api_http_message((api_http_msg)i), want[i]);
	assert_string_equal(api_http_message(API_HTTP_MSG_COUNT_), "");
}

static void test_levels(void **state)
{
	(void)state;
	assert_string_equal(api_level_name(LOG_LEVEL_ERROR), "error");
	assert_string_equal(api_level_name(LOG_LEVEL_WARN), "warning");
	assert_string_equal(api_level_name(LOG_LEVEL_INFO), "info");
	assert_string_equal(api_level_name(LOG_LEVEL_DEBUG), "debug");
	assert_string_equal(api_level_name(LOG_LEVEL_TRACE), "debug");
	assert_int_equal(api_level_of("silent", 6), LOG_LEVEL_ERROR);
	assert_int_equal(api_level_of("warning", 7), LOG_LEVEL_WARN);
	assert_int_equal(api_level_of("debug", 5), LOG_LEVEL_DEBUG);
	/* issue 32 item 2: the CLI's and the config's words too (log.h) */
	assert_int_equal(api_level_of("warn", 4), LOG_LEVEL_WARN);
	assert_int_equal(api_level_of("trace", 5), LOG_LEVEL_TRACE);
	assert_int_equal(api_level_of("warnin", 6), -1);
	assert_int_equal(api_level_of("Warning", 7), -1);
	assert_int_equal(api_level_of("", 0), -1);
}

/* ---------------------------------------------------------------- routes */

static void test_hello_version(void **state)
{
	(void)state;
	expect("GET", "/", 200, "{\"hello\":\"etemenanki\"}");
	expect("GET", "/version", 200, "{\"version\":\"0.1.0\",\"meta\":false}");
	expect("GET", "/nope", 404, "{\"message\":\"resource not found\"}");
	expect("GET", "/proxies/", 404, "{\"message\":\"resource not found\"}");
	expect("GET", "/%zz", 404, "{\"message\":\"resource not found\"}");
	expect("GET", "/proxies/%zz", 404, "{\"message\":\"resource not found\"}");
	expect("GET", "/proxies/%00", 404, "{\"message\":\"resource not found\"}");
	api_response r = call("POST", "/version");
	assert_int_equal(r.status, 405);
	assert_string_equal(r.allow, "GET");
	assert_string_equal(r.body.p, "{\"message\":\"method not allowed\"}");
	api_response_free(&r);
	r = call("POST", "/configs");
	assert_int_equal(r.status, 405);
	assert_string_equal(r.allow, "GET, PUT, PATCH");
	api_response_free(&r);
}

static void test_secret(void **state)
{
	(void)state;
	V.secret = strdup("s3cret");
	static const char UNAUTH[] = "{\"message\":\"Unauthorized\"}";
	const struct {
		const char *auth, *target;
		bool ws;
		int status;
	} cases[] = {
		{NULL, "/version", false, 401},
		{"Bearer wrong", "/version", false, 401},
		{"Bearer s3cre", "/version", false, 401},
		{"Bearer s3cret!", "/version", false, 401},
		{"Basic s3cret", "/version", false, 401},
		{"Bearer s3cret", "/version", false, 200},
		{"bearer s3cret", "/version", false, 200},
		/* the query token is for WebSocket handshakes only */
		{NULL, "/version?token=s3cret", false, 401},
		{NULL, "/traffic?token=s3cret", true, 200},
		{NULL, "/traffic?token=s3cre%74", true, 200},
		{NULL, "/traffic?token=nope", true, 401},
		{NULL, "/traffic", true, 401},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		api_response r =
			call_body("GET", cases[i].target, cases[i].auth, cases[i].ws, NULL);
		assert_int_equal(r.status, cases[i].status);
		if (cases[i].status == 401) {
			assert_int_equal(r.action, API_ANSWER);
			assert_string_equal(r.body.p, UNAUTH);
		}
		api_response_free(&r);
	}
	/* a CORS preflight carries no credentials */
	api_response r = call("OPTIONS", "/connections");
	assert_int_equal(r.status, 204);
	assert_int_equal(r.body.len, 0);
	api_response_free(&r);
	free(V.secret);
	V.secret = NULL;
}

static void test_configs(void **state)
{
	(void)state;
	expect("GET", "/configs", 200,
	       "{\"port\":8080,\"socks-port\":1080,\"mixed-port\":0,\"redir-port\":0,"
	       "\"tproxy-port\":0,\"allow-lan\":false,\"mode\":\"rule\",\"log-level\":\"info\","
	       "\"ipv6\":true}");
	api_response r = call_body("PATCH", "/configs", NULL, false, "{\"log-level\":\"debug\"}");
	assert_int_equal(r.status, 204);
	assert_int_equal(F.level, LOG_LEVEL_DEBUG);
	api_response_free(&r);
	/* the keys this proxy has no use for are ignored */
	r = call_body("PATCH", "/configs", NULL, false,
	              " { \"mode\" : \"global\", \"allow-lan\": true, \"tun\": {\"enable\": false},"
	              " \"log-level\" : \"warning\" } ");
	assert_int_equal(r.status, 204);
	assert_int_equal(F.level, LOG_LEVEL_WARN);
	api_response_free(&r);
	const struct {
		const char *body, *json;
	} bad[] = {
		{"", "{\"message\":\"Body invalid\"}"},
		{"[]", "{\"message\":\"Body invalid\"}"},
		{"{\"log-level\":}", "{\"message\":\"Body invalid\"}"},
		{"{\"log-level\":\"debug\"", "{\"message\":\"Body invalid\"}"},
		{"{\"log-level\":\"debug\"} x", "{\"message\":\"Body invalid\"}"},
		{"{'log-level':'debug'}", "{\"message\":\"Body invalid\"}"},
		{"{\"a\":01x}", "{\"message\":\"Body invalid\"}"},
		{"{\"log-level\":\"verbose\"}",
	         "{\"message\":\"log-level must be silent, error, warn, warning, info, debug or trace\"}"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		r = call_body("PATCH", "/configs", NULL, false, bad[i].body);
		assert_int_equal(r.status, 400);
		assert_string_equal(r.body.p, bad[i].json);
		api_response_free(&r);
	}
	assert_int_equal(F.level, LOG_LEVEL_WARN);

	r = call_body("PUT", "/configs?force=true", NULL, false,
	              "{\"path\":\"\",\"payload\":\"\"}");
	assert_int_equal(r.status, 204);
	assert_int_equal(F.reloads, 1);
	api_response_free(&r);
	r = call("PUT", "/configs?force=true");
	assert_int_equal(r.status, 204);
	assert_int_equal(F.reloads, 2);
	api_response_free(&r);
	F.reload_error = "route rule #1: invalid CIDR \"x\"";
	r = call("PUT", "/configs?force=true");
	assert_int_equal(r.status, 400);
	assert_string_equal(r.body.p, "{\"message\":\"route rule #1: invalid CIDR \\\"x\\\"\"}");
	api_response_free(&r);
	r = call_body("PUT", "/configs", NULL, false, "nope");
	assert_int_equal(r.status, 400);
	assert_int_equal(F.reloads, 3);
	api_response_free(&r);
}

static void test_proxies(void **state)
{
	(void)state;
	F.member_up[0][1] = 1; /* fo: "a b" down, t up */
	F.probe_delay = 42;
	F.probe_when = 1700000000123ull;
	static const char AB[] = "{\"name\":\"a b\",\"type\":\"Socks5\",\"history\":[{\"time\":"
				 "\"2023-11-14T22:13:20.123Z\",\"delay\":42}],\"udp\":true}";
	static const char FO[] =
		"{\"name\":\"fo\",\"type\":\"Fallback\",\"now\":\"t\",\"all\":[\"a "
		"b\",\"t\"],\"history\":[],\"udp\":true}";
	char all[2048];
	snprintf(all, sizeof all,
	         "{\"proxies\":{\"direct\":{\"name\":\"direct\",\"type\":\"Direct\",\"history\":[],"
	         "\"udp\":true},\"block\":{\"name\":\"block\",\"type\":\"Reject\",\"history\":[],"
	         "\"udp\":true},\"x/y\":{\"name\":\"x/y\",\"type\":\"Direct\",\"history\":[],"
	         "\"udp\":true},\"a b\":%s,\"t\":{\"name\":\"t\",\"type\":\"Trojan\",\"history\":"
	         "[],\"udp\":true},\"fo\":%s,\"rr\":{\"name\":\"rr\",\"type\":\"LoadBalance\","
	         "\"all\":[\"t\",\"a b\"],\"history\":[],\"udp\":true}}}",
	         AB, FO);
	expect("GET", "/proxies", 200, all);
	expect("GET", "/proxies/a%20b", 200, AB);
	expect("GET", "/proxies/fo", 200, FO);
	/* a name is decoded by itself: %2F is part of it, not a path step */
	expect("GET", "/proxies/x%2Fy", 200,
	       "{\"name\":\"x/y\",\"type\":\"Direct\",\"history\":[],\"udp\":true}");
	expect("GET", "/proxies/x/y", 404, "{\"message\":\"resource not found\"}");
	api_response d = call("GET", "/proxies/x%2Fy/delay?url=http://h.test/");
	assert_int_equal(d.action, API_DELAY);
	assert_string_equal(d.host, "h.test");
	api_response_free(&d);
	expect("GET", "/proxies/none", 404, "{\"message\":\"resource not found\"}");
	expect("GET", "/proxies/fo/other", 404, "{\"message\":\"resource not found\"}");
	F.probe_when = 0; /* no probe finished yet: no history */
	expect("GET", "/proxies/a%20b", 200,
	       "{\"name\":\"a b\",\"type\":\"Socks5\",\"history\":[],\"udp\":true}");
}

static void test_delay(void **state)
{
	(void)state;
	api_response r = call("GET", "/proxies/a%20b/delay?url=http%3A%2F%2Fx.test%2F&timeout=800");
	assert_int_equal(r.action, API_DELAY);
	assert_string_equal(r.host, "192.0.2.1");
	assert_int_equal(r.port, 1081);
	assert_int_equal(r.timeout_ms, 800);
	api_response_free(&r);
	/* a direct outbound connects to the url's host */
	const struct {
		const char *target, *host;
		uint16_t port;
	} direct[] = {
		{"/proxies/direct/delay?url=http://www.gstatic.com/generate_204", "www.gstatic.com",
	         80},
		{"/proxies/direct/delay?url=https%3A%2F%2Fcp.cloudflare.com", "cp.cloudflare.com",
	         443},
		{"/proxies/direct/delay?url=http://127.0.0.1:8080/x", "127.0.0.1", 8080},
		{"/proxies/direct/delay?url=http://[::1]:81/", "::1", 81},
	};
	for (size_t i = 0; i < sizeof direct / sizeof *direct; i++) {
		r = call("GET", direct[i].target);
		assert_int_equal(r.action, API_DELAY);
		assert_string_equal(r.host, direct[i].host);
		assert_int_equal(r.port, direct[i].port);
		assert_int_equal(r.timeout_ms, API_DELAY_TIMEOUT_DEFAULT);
		api_response_free(&r);
	}
	/* a balancer's is its member in use: fo's first member up */
	F.member_up[0][0] = 0;
	F.member_up[0][1] = 1;
	r = call("GET", "/proxies/fo/delay?timeout=100");
	assert_int_equal(r.action, API_DELAY);
	assert_string_equal(r.host, "proxy.example");
	assert_int_equal(r.port, 443);
	api_response_free(&r);
	expect("GET", "/proxies/block/delay", 503,
	       "{\"message\":\"An error occurred in the delay test\"}");
	expect("GET", "/proxies/direct/delay", 400, "{\"message\":\"query parameter invalid\"}");
	expect("GET", "/proxies/direct/delay?url=ftp://x/", 400,
	       "{\"message\":\"query parameter invalid\"}");
	expect("GET", "/proxies/t/delay?timeout=0", 400,
	       "{\"message\":\"query parameter invalid\"}");
	expect("GET", "/proxies/t/delay?timeout=30001", 400,
	       "{\"message\":\"query parameter invalid\"}");
	expect("GET", "/proxies/nope/delay", 404, "{\"message\":\"resource not found\"}");

	int status;
	api_buf b = {0};
	assert_int_equal(api_render_delay(12, &status, &b), 0);
	assert_int_equal(status, 200);
	assert_string_equal(b.p, "{\"delay\":12}");
	metrics_buf_free(&b);
	assert_int_equal(api_render_delay(API_DELAY_TIMEOUT, &status, &b), 0);
	assert_int_equal(status, 504);
	assert_string_equal(b.p, "{\"message\":\"Timeout\"}");
	metrics_buf_free(&b);
	assert_int_equal(api_render_delay(API_DELAY_FAILED, &status, &b), 0);
	assert_int_equal(status, 503);
	assert_string_equal(b.p, "{\"message\":\"An error occurred in the delay test\"}");
	metrics_buf_free(&b);
}

static void test_rules(void **state)
{
	(void)state;
	expect("GET", "/rules", 200,
	       "{\"rules\":[{\"type\":\"DomainSuffix\",\"payload\":\"example.com,b.org\",\"proxy\":"
	       "\"block\"},{\"type\":\"AND\",\"payload\":\"((IPCIDR,10.0.0.0/8),(DstPort,53,1000-"
	       "2000),(Network,udp))\",\"proxy\":\"fo\"},{\"type\":\"Match\",\"payload\":\"\","
	       "\"proxy\":\"direct\"}]}");
}

/* Every matcher kind's name, one rule each, and one rule with them all. */
static void test_rule_kinds(void **state)
{
	(void)state;
	etm_spec s;
	load_spec(
		"[[inbound]]\ntag = \"in\"\nprotocol = \"socks\"\nlisten = \"0.0.0.0\"\nport = 1\n"
		"[[outbound]]\ntag = \"d\"\nprotocol = \"freedom\"\n"
		"[[route.rule]]\ndomain = [\"a.test\"]\noutbound = \"d\"\n"
		"[[route.rule]]\ndomain_keyword = [\"goo\", \"ads\"]\noutbound = \"d\"\n"
		"[[route.rule]]\ndomain_regex = [\"^x\\\\.y$\"]\noutbound = \"d\"\n"
		"[[route.rule]]\nsource_cidr = [\"192.168.0.0/16\"]\noutbound = \"d\"\n"
		"[[route.rule]]\ninbound_tag = [\"in\"]\noutbound = \"d\"\n"
		"[[route.rule]]\nnetwork = [\"tcp\", \"udp\"]\noutbound = \"d\"\n"
		"[[route.rule]]\ndomain = [\"b.test\"]\ndomain_suffix = [\"c.test\"]\n"
		"domain_keyword = [\"k\"]\ncidr = [\"10.0.0.0/8\"]\nport = [\"443\"]\n"
		"inbound_tag = [\"in\"]\nsource_cidr = [\"::1/128\"]\noutbound = \"d\"\n",
		&s);
	api_view v;
	assert_int_equal(api_view_init(&v, &s), 0);
	etm_spec_free(&s);
	const struct {
		const char *type, *payload;
	} want[] = {
		{"Domain", "a.test"},
		{"DomainKeyword", "goo,ads"},
		{"DomainRegex", "^x\\.y$"},
		{"SrcIPCIDR", "192.168.0.0/16"},
		{"InName", "in"},
		{"Network", "tcp,udp"},
		{"AND",
	         "((Domain,b.test),(DomainSuffix,c.test),(DomainKeyword,k),(IPCIDR,10.0.0.0/8),"
	         "(DstPort,443),(InName,in),(SrcIPCIDR,::1/128))"},
	};
	assert_int_equal(v.n_rules, sizeof want / sizeof *want);
	for (size_t i = 0; i < v.n_rules; i++) {
		assert_string_equal(v.rules[i].type, want[i].type);
		assert_string_equal(v.rules[i].payload, want[i].payload);
		assert_string_equal(v.rules[i].proxy, "d");
	}
	assert_true(!v.inbounds[0].loopback);
	api_view_free(&v);
}

static void test_connections(void **state)
{
	(void)state;
	F.up = 300;
	F.down = 4000;
	F.flows[0] = (etm_flow){.id = 7,
	                        .start_ms = 1700000000123ull,
	                        .inbound = "s",
	                        .user = "alice",
	                        .src_ip = "127.0.0.1",
	                        .src_port = 40000,
	                        .dst_host = "www.example.com",
	                        .dst_port = 443,
	                        .rule = 0,
	                        .outbound = "block",
	                        .up = 10,
	                        .down = 20};
	F.flows[1] = (etm_flow){.id = 8,
	                        .start_ms = 1700000001000ull,
	                        .udp = 1,
	                        .inbound = "h",
	                        .src_ip = "::1",
	                        .src_port = 5,
	                        .dst_ip = "10.1.2.3",
	                        .dst_port = 53,
	                        .sniffed = "dns.test",
	                        .rule = -1,
	                        .outbound = "fo",
	                        .member = "t",
	                        .up = 1,
	                        .down = 2};
	F.n_flows = 2;
	expect("GET", "/connections", 200,
	       "{\"downloadTotal\":4000,\"uploadTotal\":300,\"connections\":["
	       "{\"id\":\"7\",\"metadata\":{\"network\":\"tcp\",\"type\":\"s\",\"sourceIP\":"
	       "\"127.0.0.1\",\"destinationIP\":\"\",\"sourcePort\":\"40000\",\"destinationPort\":"
	       "\"443\",\"host\":\"www.example.com\",\"dnsMode\":\"normal\",\"processPath\":\"\","
	       "\"specialProxy\":\"\",\"inboundUser\":\"alice\"},\"upload\":10,\"download\":20,"
	       "\"start\":\"2023-11-14T22:13:20.123Z\",\"chains\":[\"block\"],\"rule\":"
	       "\"DomainSuffix\",\"rulePayload\":\"example.com,b.org\"},"
	       "{\"id\":\"8\",\"metadata\":{\"network\":\"udp\",\"type\":\"h\",\"sourceIP\":"
	       "\"::1\",\"destinationIP\":\"10.1.2.3\",\"sourcePort\":\"5\",\"destinationPort\":"
	       "\"53\",\"host\":\"dns.test\",\"dnsMode\":\"normal\",\"processPath\":\"\","
	       "\"specialProxy\":\"\",\"inboundUser\":\"\"},\"upload\":1,\"download\":2,"
	       "\"start\":\"2023-11-14T22:13:21.000Z\",\"chains\":[\"t\",\"fo\"],\"rule\":"
	       "\"Match\",\"rulePayload\":\"\"}],\"memory\":4096}");
	expect("DELETE", "/connections/7", 204, "");
	assert_int_equal(F.killed, 7);
	expect("DELETE", "/connections/9", 404, "{\"message\":\"resource not found\"}");
	assert_int_equal(F.killed, 9);
	expect("DELETE", "/connections/x", 404, "{\"message\":\"resource not found\"}");
	expect("DELETE", "/connections/-1", 404, "{\"message\":\"resource not found\"}");
	expect("DELETE", "/connections", 204, "");
	assert_int_equal(F.kill_where_calls, 1);
	assert_string_equal(F.filter_user, "(any)");
	assert_int_equal(F.last_filter.rule, -2);
	assert_int_equal(F.last_filter.epoch_below, 0);
	/* a predicate: every condition given must hold */
	expect("DELETE", "/connections?user=al%20ice&inbound=s&outbound=direct&rule=2&epoch_below=5",
	       204, "");
	assert_string_equal(F.filter_user, "al ice");
	assert_string_equal(F.filter_inbound, "s");
	assert_string_equal(F.filter_outbound, "direct");
	assert_int_equal(F.last_filter.rule, 1); /* rule 2 as the access log numbers them */
	assert_int_equal(F.last_filter.epoch_below, 5);
	expect("DELETE", "/connections?rule=default&user=", 204, "");
	assert_int_equal(F.last_filter.rule, -1);
	assert_string_equal(F.filter_user, ""); /* the anonymous ones */
	const char *bad[] = {"rule=0", "rule=x", "rule=", "rule=-1", "epoch_below=0",
	                     "epoch_below=q", "user=%zz"};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		char t[64];
		snprintf(t, sizeof t, "/connections?%s", bad[i]);
		expect("DELETE", t, 400, "{\"message\":\"query parameter invalid\"}");
	}
	assert_int_equal(F.kill_where_calls, 3);
	expect("GET", "/connections/7", 405, "{\"message\":\"method not allowed\"}");
	/* the ended ones: the same shape with when and why */
	F.flows[0].end_ms = 1700000002500ull;
	snprintf(F.flows[0].why, sizeof F.flows[0].why, "%s", ETM_FLOW_KILLED);
	F.n_flows = 1;
	expect("GET", "/connections?closed=true", 200,
	       "{\"downloadTotal\":4000,\"uploadTotal\":300,\"connections\":["
	       "{\"id\":\"7\",\"metadata\":{\"network\":\"tcp\",\"type\":\"s\",\"sourceIP\":"
	       "\"127.0.0.1\",\"destinationIP\":\"\",\"sourcePort\":\"40000\",\"destinationPort\":"
	       "\"443\",\"host\":\"www.example.com\",\"dnsMode\":\"normal\",\"processPath\":\"\","
	       "\"specialProxy\":\"\",\"inboundUser\":\"alice\"},\"upload\":10,\"download\":20,"
	       "\"start\":\"2023-11-14T22:13:20.123Z\",\"chains\":[\"block\"],\"rule\":"
	       "\"DomainSuffix\",\"rulePayload\":\"example.com,b.org\",\"end\":"
	       "\"2023-11-14T22:13:22.500Z\",\"why\":\"the flow was killed\"}],\"memory\":4096}");
	assert_int_equal(F.asked_closed, 1);
	const struct {
		const char *target;
		int closed;
	} which[] = {{"/connections", 0},          {"/connections?closed", 1},
	             {"/connections?closed=1", 1}, {"/connections?closed=false", 0},
	             {"/connections?closed=0", 0}, {"/connections?interval=5&closed", 1}};
	for (size_t i = 0; i < sizeof which / sizeof *which; i++) {
		api_response r = call("GET", which[i].target);
		assert_int_equal(r.status, 200);
		assert_int_equal(F.asked_closed, which[i].closed);
		api_response_free(&r);
	}
	F.n_flows = 0;
	expect("GET", "/connections", 200,
	       "{\"downloadTotal\":4000,\"uploadTotal\":300,\"connections\":[],\"memory\":4096}");
}

static void test_streams(void **state)
{
	(void)state;
	api_response r = call_body("GET", "/connections?interval=250", NULL, true, NULL);
	assert_int_equal(r.action, API_STREAM_CONNECTIONS);
	assert_true(r.websocket);
	assert_int_equal(r.interval_ms, 250);
	api_response_free(&r);
	r = call_body("GET", "/traffic", NULL, true, NULL);
	assert_int_equal(r.action, API_STREAM_TRAFFIC);
	assert_int_equal(r.interval_ms, 1000);
	api_response_free(&r);
	r = call("GET", "/traffic");
	assert_int_equal(r.action, API_STREAM_TRAFFIC);
	assert_false(r.websocket);
	api_response_free(&r);
	r = call_body("GET", "/logs?level=debug", NULL, true, NULL);
	assert_int_equal(r.action, API_STREAM_LOGS);
	assert_int_equal(r.log_level, LOG_LEVEL_DEBUG);
	api_response_free(&r);
	r = call("GET", "/logs");
	assert_int_equal(r.log_level, LOG_LEVEL_INFO);
	api_response_free(&r);
	expect("GET", "/logs?level=loud", 400, "{\"message\":\"query parameter invalid\"}");
	r = call_body("GET", "/connections?interval=5", NULL, true, NULL);
	assert_int_equal(r.status, 400);
	assert_int_equal(r.action, API_ANSWER);
	api_response_free(&r);

	r = call_body("GET", "/memory", NULL, true, NULL);
	assert_int_equal(r.action, API_STREAM_MEMORY);
	assert_int_equal(r.interval_ms, 1000);
	api_response_free(&r);
	expect("GET", "/providers/proxies", 200, "{\"providers\":{}}");
	expect("GET", "/providers/rules", 200, "{\"providers\":{}}");

	api_buf b = {0};
	assert_int_equal(api_render_memory(8192, &b), 0);
	assert_string_equal(b.p, "{\"inuse\":8192,\"oslimit\":0}");
	metrics_buf_free(&b);
	assert_int_equal(api_render_traffic(1, 2, &b), 0);
	assert_string_equal(b.p, "{\"up\":1,\"down\":2}");
	metrics_buf_free(&b);
	static const char line[] = "app: a \"quoted\"\tline \xff";
	assert_int_equal(api_render_log(LOG_LEVEL_WARN, line, sizeof line - 1, &b), 0);
	assert_string_equal(b.p, "{\"type\":\"warning\",\"payload\":\"app: a \\\"quoted\\\"\\u0009"
	                         "line \\ufffd\"}");
	metrics_buf_free(&b);
}

static void test_ours(void **state)
{
	(void)state;
	/* configured users first (one row a name, its inbounds inside), then
	 * names that only have flows (the anonymous "") */
	expect("GET", "/users", 200,
	       "{\"users\":[{\"name\":\"alice\",\"upload\":10,\"download\":20,\"open\":1,"
	       "\"total\":4,\"inbounds\":[{\"inbound\":\"s\",\"up_rate\":100,\"down_rate\":0,"
	       "\"max_sessions\":2,\"sessions\":1},{\"inbound\":\"h\","
	       "\"up_rate\":0,\"down_rate\":0,\"max_sessions\":0,\"sessions\":0"
	       "}]},{\"name\":\"bob\",\"upload\":0,\"download\":0,\"open\":0,"
	       "\"total\":0,\"inbounds\":[{\"inbound\":\"s\",\"up_rate\":0,\"down_rate\":0,"
	       "\"max_sessions\":0,\"sessions\":0}]},{\"name\":\"\","
	       "\"upload\":1,\"download\":2,\"open\":0,\"total\":3,\"inbounds\":[]}]}");
	expect("GET", "/users/bob", 200,
	       "{\"name\":\"bob\",\"upload\":0,\"download\":0,\"open\":0,\"total\":0,"
	       "\"inbounds\":[{\"inbound\":\"s\",\"up_rate\":0,\"down_rate\":0,"
	       "\"max_sessions\":0,\"sessions\":0}]}");
	expect("GET", "/users/nobody", 404, "{\"message\":\"resource not found\"}");
	const char *unknown = "{\"message\":\"no running user has that name (to add one, name its "
	                      "inbound: ?inbound=<tag>)\"}";
	/* PUT: limits replaced (a key left out is no limit), credential keys
	 * passed on when given */
	api_response r = call_body("PUT", "/users/alice?inbound=s", NULL, false,
	                           "{\"up_rate\": 5000, \"max_sessions\": 3}");
	assert_int_equal(r.status, 204);
	api_response_free(&r);
	assert_string_equal(F.upserted, "s/alice/-/-/-");
	assert_int_equal(F.limits[0], 5000);
	assert_int_equal(F.limits[1], 0);
	assert_int_equal(F.limits[2], 3);
	r = call_body("PUT", "/users/alice", NULL, false, "{\"down_rate\":7,\"password\":\"n w\"}");
	assert_int_equal(r.status, 204);
	api_response_free(&r);
	assert_string_equal(F.upserted, "*/alice/-/n w/-");
	assert_int_equal(F.limits[1], 7);
	/* a new user: its inbound named */
	r = call_body("PUT", "/users/nobody?inbound=v", NULL, false,
	              "{\"id\":\"6c1b0e6a-6e3d-4c1e-9d8a-1a2b3c4d5e6f\"}");
	assert_int_equal(r.status, 204);
	api_response_free(&r);
	assert_string_equal(F.upserted, "v/nobody/-/-/6c1b0e6a-6e3d-4c1e-9d8a-1a2b3c4d5e6f");
	const char *bodies[] = {"{\"up_rate\":-1}", "{\"up_rate\":1.5}", "{\"up_rate\":\"1\"}",
	                        "{\"max_sessions\":4294967296}", "[1]", "{"};
	for (size_t i = 0; i < sizeof bodies / sizeof *bodies; i++) {
		r = call_body("PUT", "/users/alice", NULL, false, bodies[i]);
		assert_int_equal(r.status, 400);
		assert_string_equal(r.body.p, "{\"message\":\"Body invalid\"}");
		api_response_free(&r);
	}
	const char *creds[] = {"{\"password\":1}", "{\"password\":\"a\\\"b\"}",
	                       "{\"id\":null}"};
	for (size_t i = 0; i < sizeof creds / sizeof *creds; i++) {
		r = call_body("PUT", "/users/alice", NULL, false, creds[i]);
		assert_int_equal(r.status, 400);
		assert_string_equal(r.body.p, "{\"message\":\"username, password and id must be JSON "
		                              "strings without escapes\"}");
		api_response_free(&r);
	}
	r = call_body("PUT", "/users/nobody", NULL, false, "{}");
	assert_int_equal(r.status, 404);
	assert_string_equal(r.body.p, unknown);
	api_response_free(&r);
	/* the engine's refusal is the answer's message */
	r = call_body("PUT", "/users/bad?inbound=v", NULL, false, "{\"id\":\"x\"}");
	assert_int_equal(r.status, 400);
	assert_string_equal(r.body.p, "{\"message\":\"inbound v: user bad: id is not a UUID\"}");
	api_response_free(&r);
	expect("DELETE", "/users/alice?inbound=h", 204, "");
	assert_string_equal(F.removed, "h/alice");
	expect("DELETE", "/users/b%6Fb", 204, "");
	assert_string_equal(F.removed, "*/bob");
	expect("DELETE", "/users/nobody", 404, unknown);
	expect("DELETE", "/users/last", 400,
	       "{\"message\":\"inbound t: protocol trojan needs settings.users\"}");
	expect("DELETE", "/users/alice?inbound=", 400, "{\"message\":\"query parameter invalid\"}");
	expect("POST", "/users/alice", 405, "{\"message\":\"method not allowed\"}");
	expect("DELETE", "/users", 405, "{\"message\":\"method not allowed\"}");
	expect("GET", "/users/a/b", 404, "{\"message\":\"resource not found\"}");
	r = call("GET", "/udp-lb");
	assert_int_equal(r.status, 200);
	char want[2048];
	int n = snprintf(
		want, sizeof want,
		"{\"udp_lb\":[{\"inbound\":\"lb\",\"active_flows\":1,\"flows_created\":2,"
		"\"flows_evicted\":0,\"flows_shed\":0,\"datagrams_to_backends\":0,"
		"\"bytes_to_backends\":0,\"datagrams_to_clients\":0,\"bytes_to_clients\":0,"
		"\"flow_duration_ms\":0,\"sockets_reused\":0,\"dropped\":{\"%s\":5",
		etm_udplb_drop_name(0));
	assert_memory_equal(r.body.p, want, (size_t)n);
	assert_non_null(strstr(r.body.p, "\"backends\":[{\"address\":\"10.0.0.1:53\",\"up\":true,"
	                                 "\"flows_created\":2}]}]}"));
	api_response_free(&r);
	r = call("GET", "/metrics");
	assert_int_equal(r.status, 200);
	assert_true(r.text);
	assert_string_equal(r.body.p, "etemenanki_flows_open 0\n");
	api_response_free(&r);
}

static void test_view_secret_and_default(void **state)
{
	(void)state;
	etm_spec s;
	load_spec("[api]\nlisten = \"0.0.0.0:9090\"\nsecret = \"k\"\n"
	          "[[outbound]]\ntag = \"x\"\nprotocol = \"freedom\"\n",
	          &s);
	api_view v;
	assert_int_equal(api_view_init(&v, &s), 0);
	assert_string_equal(v.secret, "k");
	assert_string_equal(v.default_tag, "x");
	assert_int_equal(v.n_rules, 0);
	api_view_free(&v);
	etm_spec_free(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_messages),
		cmocka_unit_test(test_levels),
		cmocka_unit_test(test_server_messages),
		cmocka_unit_test_setup_teardown(test_hello_version, setup, teardown),
		cmocka_unit_test_setup_teardown(test_secret, setup, teardown),
		cmocka_unit_test_setup_teardown(test_configs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_proxies, setup, teardown),
		cmocka_unit_test_setup_teardown(test_delay, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rules, setup, teardown),
		cmocka_unit_test_setup_teardown(test_connections, setup, teardown),
		cmocka_unit_test_setup_teardown(test_streams, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ours, setup, teardown),
		cmocka_unit_test(test_view_secret_and_default),
		cmocka_unit_test(test_rule_kinds),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
