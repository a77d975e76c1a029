/* api.h - the admin API's core ([api] listen, docs/api.md): routes one parsed request against the running config and a provider of live data and renders the Clash-convention JSON answer; no socket, no clock. */
#ifndef ETM_APP_API_H
#define ETM_APP_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "app/metrics.h"
#include "etemenanki/spec.h"
#include "etemenanki/supervisor.h"

/* A request body longer than this is answered 413: the bodies the API
 * takes are a few keys of JSON ({"log-level":"debug"}); 64 KiB leaves
 * room for a dashboard's whole config payload, which PUT /configs gets. */
#define API_BODY_MAX 65536

/* The default and the bounds of a stream's ?interval= (ms): ten times a
 * second at most, so a dashboard cannot make the control thread render
 * flow lists back to back; an hour at least once. */
#define API_INTERVAL_DEFAULT 1000
#define API_INTERVAL_MIN 100
#define API_INTERVAL_MAX 3600000

/* A delay probe's ?timeout= (ms) when absent, and its bounds: Clash's
 * dashboards send 5000; past 30 s the answer is of no use to a person. */
#define API_DELAY_TIMEOUT_DEFAULT 5000
#define API_DELAY_TIMEOUT_MAX 30000

/* A host name to probe (RFC 1035 2.3.4) and its NUL. */
#define API_HOST_MAX 256

/* The growing buffer answers are rendered into (app/metrics.h's). */
typedef metrics_buf api_buf;

/* ---- the running config, as the API shows it ---- */

typedef struct api_outbound {
	char *tag;    /* owned */
	char *server; /* owned; NULL when the protocol has none */
	uint16_t port;
	etm_protocol protocol;
} api_outbound;

typedef struct api_balancer {
	char *tag; /* owned */
	etm_strategy strategy;
	char **members; /* owned, each owned: the outbounds list in order */
	size_t n_members;
} api_balancer;

/* A route rule as Clash shows one (GET /rules, a flow's rule). */
typedef struct api_rule {
	char *type;    /* owned: "DomainSuffix", "IPCIDR", ..., "AND" for several kinds */
	char *payload; /* owned */
	char *proxy;   /* owned: the target tag */
} api_rule;

typedef struct api_inbound {
	char *tag; /* owned */
	etm_protocol protocol;
	bool loopback; /* it listens on a loopback address only */
} api_inbound;

/* What the API needs of a spec, copied from it before the engine takes
 * it over (etm_supervisor_start and _apply zero the spec). A zeroed view
 * is an empty config. */
typedef struct api_view {
	api_outbound *outbounds;
	size_t n_outbounds;
	api_balancer *balancers;
	size_t n_balancers;
	api_rule *rules; /* the spec's rules in order (not the final Match) */
	size_t n_rules;
	char *default_tag; /* owned; NULL when there is no outbound */
	api_inbound *inbounds;
	size_t n_inbounds;
	char *secret; /* owned: [api] secret, NULL when none */
} api_view;

/* Copies what the API shows of spec into *v. Returns 0, or -1 when memory
 * ran out (*v is then empty). */
__attribute__((warn_unused_result)) int api_view_init(api_view *v, const etm_spec *spec);
void api_view_free(api_view *v);

/* ---- live data: what the core asks the engine (a fake in the tests) ---- */

typedef struct api_provider {
	void *ctx;
	/* etm_supervisor_flows, _traffic, _kill, _kill_where */
	int (*flows)(void *ctx, int closed, etm_flow_list *out);
	void (*traffic)(void *ctx, uint64_t *up, uint64_t *down);
	int (*kill)(void *ctx, uint64_t id);
	size_t (*kill_where)(void *ctx, const etm_flow_filter *f);
	/* etm_supervisor_usage(ETM_USAGE_USER) */
	int (*usage_users)(void *ctx, etm_usage_list *out);
	/* etm_supervisor_users, _remove_user, _upsert_user */
	int (*users)(void *ctx, etm_user_list *out);
	long (*remove_user)(void *ctx, const char *inbound, const char *name, char *err,
	                    size_t err_size);
	long (*upsert_user)(void *ctx, const char *inbound, const etm_user_spec *u, char *err,
	                    size_t err_size);
	/* member j of balancer i: whether it is up; -1 past the end */
	int (*member_up)(void *ctx, size_t i, size_t j, int *up);
	/* etm_supervisor_member_probe */
	int (*member_probe)(void *ctx, size_t i, size_t j, int64_t *delay_ms, uint64_t *when_ms);
	/* the port inbound tag listens on; 0 when no such inbound */
	uint16_t (*inbound_port)(void *ctx, const char *tag);
	/* the process's log level (a LOG_LEVEL_*) and its change */
	int (*log_level)(void *ctx);
	void (*set_log_level)(void *ctx, int level);
	/* reloads the config file now, as SIGHUP does: 0, or -1 with the
	 * reloader's message in err */
	int (*reload)(void *ctx, char *err, size_t err_size);
	/* the Prometheus text GET /metrics serves: 0 or -1 (memory) */
	int (*metrics)(void *ctx, api_buf *out);
	/* inbound i if it is a udp_lb one: 0 with its tag and counters; -1
	 * when it is not one; -2 past the last inbound */
	int (*udplb)(void *ctx, size_t i, const char **tag, etm_udplb_stats *st);
	int (*udplb_backend)(void *ctx, size_t i, size_t j, char *addr, size_t addr_size, int *up,
	                     uint64_t *flows_created);
	/* the process's resident memory in bytes */
	uint64_t (*memory)(void *ctx);
} api_provider;

/* ---- one request ---- */

typedef struct api_request {
	const char *method; /* not NUL-terminated */
	size_t method_len;
	const char *target; /* path and query, not NUL-terminated */
	size_t target_len;
	const char *auth; /* the Authorization field's value; NULL when absent */
	size_t auth_len;
	bool websocket; /* a WebSocket handshake (RFC 6455 4.2.1) the shell checked */
	const char *body;
	size_t body_len;
} api_request;

/* What the shell does after api_handle. */
typedef enum api_action {
	API_ANSWER,             /* write status and body */
	API_STREAM_CONNECTIONS, /* api_render_connections every interval_ms */
	API_STREAM_TRAFFIC,     /* api_render_traffic every second */
	API_STREAM_LOGS,        /* api_render_log for each line at or above log_level */
	API_STREAM_MEMORY,      /* api_render_memory every second */
	API_DELAY,              /* TCP-connect to host:port, then api_render_delay */
} api_action;

typedef struct api_response {
	int status;
	api_action action;
	api_buf body;      /* owned: api_response_free */
	bool text;         /* the body is Prometheus text, not JSON */
	const char *allow; /* 405: the methods the path takes (static) */
	bool websocket;    /* a stream: over the WebSocket (else chunked HTTP) */
	bool closed;       /* /connections: the recently ended flows */
	uint32_t interval_ms;
	int log_level; /* LOG_LEVEL_* */
	char host[API_HOST_MAX];
	uint16_t port;
	uint32_t timeout_ms;
} api_response;

void api_response_free(api_response *r);

/* Answers r for view v with live data from p into *out (zeroed first).
 * OPTIONS (a CORS preflight) is answered 204 without the secret; every
 * other request needs "Authorization: Bearer <secret>", or for a
 * WebSocket ?token=<secret>, when v has a secret. Returns 0, or -1 when
 * memory ran out (*out freed; answer 500). */
__attribute__((warn_unused_result)) int api_handle(const api_view *v, const api_provider *p,
                                                   const api_request *r, api_response *out);

/* The stream renderers, each one whole JSON text into b (appended). */
/* closed: the recently ended flows instead of the open ones */
__attribute__((warn_unused_result)) int api_render_connections(const api_view *v,
                                                               const api_provider *p, bool closed,
                                                               api_buf *b);
__attribute__((warn_unused_result)) int api_render_traffic(uint64_t up, uint64_t down, api_buf *b);
/* {"inuse":bytes,"oslimit":0}: mihomo's /memory */
__attribute__((warn_unused_result)) int api_render_memory(uint64_t inuse, api_buf *b);
/* {"type":"info","payload":line}: level a LOG_LEVEL_*, line without its
 * newline */
__attribute__((warn_unused_result)) int api_render_log(int level, const char *line, size_t len,
                                                       api_buf *b);

/* A delay probe's outcome: delay_ms >= 0, or API_DELAY_TIMEOUT or
 * API_DELAY_FAILED. Fills status (200, 504, 503) and the body. */
enum { API_DELAY_TIMEOUT = -1, API_DELAY_FAILED = -2 };
__attribute__((warn_unused_result)) int api_render_delay(int64_t delay_ms, int *status, api_buf *b);

/* Clash's name of a LOG_LEVEL_* ("error", "warning", "info", "debug";
 * trace is "debug"), and the level a name means (silent is error: the
 * errors are never muted); -1 for an unknown name. */
const char *api_level_name(int level);
int api_level_of(const char *name, size_t len);

/* Every message an answer carries ({"message": ...}), exported so the
 * tests can assert them word for word. */
typedef enum api_msg {
	API_M_UNAUTHORIZED,   /* 401 */
	API_M_NOT_FOUND,      /* 404 */
	API_M_METHOD,         /* 405 */
	API_M_BODY_INVALID,   /* 400: the body is not a JSON object */
	API_M_QUERY_INVALID,  /* 400: a query parameter out of its range */
	API_M_LEVEL_INVALID,  /* 400: PATCH /configs with an unknown log-level */
	API_M_TOO_LARGE,      /* 413 */
	API_M_HEAD_TOO_LARGE, /* 431 */
	API_M_BAD_REQUEST,    /* 400: not an HTTP/1.x request */
	API_M_VERSION,        /* 505 */
	API_M_NOMEM,          /* 500 */
	API_M_TIMEOUT,        /* 504: a delay probe timed out */
	API_M_DELAY_FAILED,   /* 503: a delay probe failed */
	API_M_BUSY,           /* 503: too many delay probes at once */
	API_M_USER_UNKNOWN,   /* 404: PUT or DELETE /users/<name> of no running user */
	API_M_CREDENTIAL,     /* 400: a credential in PUT /users/<name> with a JSON escape */
	API_M_COUNT_,
} api_msg;
const char *api_message(api_msg m);

/* The status line's reason of each status the API answers; "" past the
 * table. */
const char *api_reason(int status);

/* Renders {"message":<text>} into b. */
__attribute__((warn_unused_result)) int api_render_message(const char *text, api_buf *b);

#endif
