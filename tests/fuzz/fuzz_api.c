/* fuzz_api.c - libFuzzer target: any request through the admin API's core (route, query and path decoding, the JSON body readers, every renderer) against a fixed config and a provider with a little of everything. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "app/api.h"
#include "app/api_json.h"
#include "app/config.h"

/* in: a SOCKS inbound with a user; out: direct, a blackhole, a balancer;
 * rules of several kinds; a secret (so authorization is exercised) */
static const char CONFIG[] =
	"[[inbound]]\ntag = \"s\"\nprotocol = \"socks\"\nport = 1080\n"
	"[[inbound.settings.users]]\nusername = \"alice\"\npassword = \"a\"\n"
	"[[outbound]]\ntag = \"direct\"\nprotocol = \"freedom\"\n"
	"[[outbound]]\ntag = \"block\"\nprotocol = \"blackhole\"\n"
	"[[outbound]]\ntag = \"up\"\nprotocol = \"socks\"\nserver = \"127.0.0.1\"\nport = 1\n"
	"[[outbound]]\ntag = \"up2\"\nprotocol = \"http\"\nserver = \"127.0.0.1\"\nport = 2\n"
	"[[balancer]]\ntag = \"fo\"\noutbounds = [\"up\", \"up2\"]\n"
	"[[route.rule]]\noutbound = \"block\"\ndomain_suffix = [\"ads.example\"]\nport = [25]\n"
	"[[route.rule]]\noutbound = \"fo\"\ncidr = [\"10.0.0.0/8\"]\n"
	"[api]\nlisten = \"127.0.0.1:9090\"\nsecret = \"s3cret\"\n";

static api_view V;
static bool ready;

static int f_flows(void *ctx, int closed, etm_flow_list *out)
{
	(void)ctx;
	out->v = calloc(2, sizeof *out->v);
	if (!out->v)
		return -1;
	out->n = 2;
	out->v[0] = (etm_flow){.id = 7, .start_ms = 1700000000123ull, .rule = 0, .src_port = 1,
	                       .dst_port = 443, .up = 1, .down = 2, .end_ms = closed ? 1 : 0};
	strcpy(out->v[0].dst_host, "www.ads.example");
	strcpy(out->v[0].outbound, "block");
	out->v[1] = (etm_flow){.id = 8, .udp = 1, .rule = 5, .member = "up"};
	strcpy(out->v[1].outbound, "fo");
	strcpy(out->v[1].dst_ip, "10.1.2.3");
	return 0;
}

static void f_traffic(void *ctx, uint64_t *up, uint64_t *down)
{
	(void)ctx;
	*up = 1;
	*down = 2;
}

static int f_kill(void *ctx, uint64_t id) { return (void)ctx, id == 7 ? 0 : -1; }
static size_t f_kill_where(void *ctx, const etm_flow_filter *f) { return (void)ctx, (void)f, 1; }

static int f_usage(void *ctx, etm_usage_list *out)
{
	(void)ctx;
	out->v = calloc(1, sizeof *out->v);
	if (!out->v)
		return -1;
	out->n = 1;
	strcpy(out->v[0].name, "alice");
	return 0;
}

static int f_users(void *ctx, etm_user_list *out)
{
	(void)ctx;
	out->v = calloc(1, sizeof *out->v);
	if (!out->v)
		return -1;
	out->n = 1;
	strcpy(out->v[0].inbound, "s");
	strcpy(out->v[0].name, "alice");
	return 0;
}

static long f_remove(void *ctx, const char *in, const char *name, char *err, size_t n)
{
	(void)ctx, (void)in;
	strncpy(err, "inbound s: refused", n - 1);
	err[n - 1] = '\0';
	return strcmp(name, "alice") == 0 ? 1 : strcmp(name, "x") == 0 ? -1 : 0;
}

static long f_upsert(void *ctx, const char *in, const etm_user_spec *u, char *err, size_t n)
{
	(void)ctx;
	strncpy(err, "inbound s: refused", n - 1);
	err[n - 1] = '\0';
	if (u->password && !*u->password)
		return -1;
	return in || strcmp(u->name, "alice") == 0;
}

static int f_member_up(void *ctx, size_t i, size_t j, int *up)
{
	(void)ctx;
	*up = 1;
	return i == 0 && j < 2 ? 0 : -1;
}

static int f_member_probe(void *ctx, size_t i, size_t j, int64_t *d, uint64_t *w)
{
	(void)ctx;
	*d = 12;
	*w = 1700000000000ull;
	return i == 0 && j < 2 ? 0 : -1;
}

static uint16_t f_port(void *ctx, const char *tag) { return (void)ctx, (void)tag, 1080; }
static int f_level(void *ctx) { return (void)ctx, 2; }
static void f_set_level(void *ctx, int l) { (void)ctx, (void)l; }

static int f_reload(void *ctx, char *err, size_t n)
{
	(void)ctx;
	strncpy(err, "reload: parse failed", n - 1);
	err[n - 1] = '\0';
	return -1;
}

static int f_metrics(void *ctx, api_buf *out) { return (void)ctx, api_json_puts(out, "m 1\n"); }

static int f_udplb(void *ctx, size_t i, const char **tag, etm_udplb_stats *st)
{
	(void)ctx;
	if (i > 0)
		return -2;
	*tag = "lb";
	*st = (etm_udplb_stats){.active_flows = 1};
	return 0;
}

static int f_backend(void *ctx, size_t i, size_t j, char *addr, size_t n, int *up, uint64_t *fl)
{
	(void)ctx, (void)i;
	if (j > 0)
		return -1;
	strncpy(addr, "127.0.0.1:9", n - 1);
	addr[n - 1] = '\0';
	*up = 1;
	*fl = 3;
	return 0;
}

static uint64_t f_memory(void *ctx) { return (void)ctx, 4096; }

static const api_provider P = {
	.flows = f_flows,
	.traffic = f_traffic,
	.kill = f_kill,
	.kill_where = f_kill_where,
	.usage_users = f_usage,
	.users = f_users,
	.remove_user = f_remove,
	.upsert_user = f_upsert,
	.member_up = f_member_up,
	.member_probe = f_member_probe,
	.inbound_port = f_port,
	.log_level = f_level,
	.set_log_level = f_set_level,
	.reload = f_reload,
	.metrics = f_metrics,
	.udplb = f_udplb,
	.udplb_backend = f_backend,
	.memory = f_memory,
};

static const char *const METHODS[] = {"GET", "PUT", "PATCH", "DELETE", "POST", "OPTIONS", "HEAD"};

/* The input: byte 0 picks the method and whether it is a WebSocket and
 * authorized; then the target up to '\n', then the body. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!ready) {
		etm_spec spec;
		char msg[CONFIG_MSG_MAX];
		if (config_load(CONFIG, sizeof CONFIG - 1, &spec, msg, sizeof msg) ||
		    api_view_init(&V, &spec))
			abort();
		etm_spec_free(&spec);
		ready = true;
	}
	if (size < 1)
		return 0;
	uint8_t sel = data[0];
	const char *t = (const char *)data + 1;
	size_t n = size - 1;
	const char *nl = memchr(t, '\n', n);
	size_t tn = nl ? (size_t)(nl - t) : n;
	const char *body = nl ? nl + 1 : "";
	size_t bn = nl ? n - tn - 1 : 0;
	const char *m = METHODS[sel % (sizeof METHODS / sizeof *METHODS)];
	static const char auth[] = "Bearer s3cret";
	api_request r = {.method = m, .method_len = strlen(m), .target = t, .target_len = tn,
	                 .auth = sel & 0x80 ? auth : NULL, .auth_len = sel & 0x80 ? sizeof auth - 1 : 0,
	                 .websocket = (sel & 0x40) != 0, .body = body, .body_len = bn};
	api_response out;
	if (api_handle(&V, &P, &r, &out) == 0) {
		if (out.action == API_STREAM_CONNECTIONS) {
			api_buf b = {0};
			(void)api_render_connections(&V, &P, out.closed, &b);
			metrics_buf_free(&b);
		}
		api_response_free(&out);
	}
	/* the body readers alone, on the same bytes */
	const char *v;
	size_t vn;
	uint64_t x;
	(void)api_json_find(body, bn, "log-level", &v, &vn);
	(void)api_json_find_u64(body, bn, "up_rate", UINT64_MAX, &x);
	api_buf b = {0};
	(void)api_render_log(sel & 7, body, bn, &b);
	metrics_buf_free(&b);
	return 0;
}
