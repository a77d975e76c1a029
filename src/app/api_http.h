/* api_http.h - the [api] listen server (docs/api.md): HTTP/1.1 and WebSocket on the control thread's loop around the app/api core, with the log tap, the stream timers and the delay probes. */
#ifndef ETM_APP_API_HTTP_H
#define ETM_APP_API_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "app/api.h"
#include "app/metrics_http.h"
#include "etemenanki/supervisor.h"

/* Connections open at once. Past it a new one closes the oldest idle
 * HTTP connection (no request being answered, no stream, no probe), or
 * is closed itself when none is idle. A dashboard holds four or five (REST calls plus the
 * connections, traffic, logs and memory streams), a few tabs a few
 * times that; the bound keeps a flood of idle ones from costing the
 * control thread more than 64 small buffers. */
#define API_CONNS_MAX 64

/* The listen backlog, far above API_CONNS_MAX: a flood is accepted and
 * its surplus closed at once, not left in SYN_RECV behind a full accept
 * queue (metrics_http.h METRICS_BACKLOG). */
#define API_BACKLOG 1024

/* An HTTP connection with no byte read and no answer being written is
 * closed after this long (a stream is never idle: it writes). */
#define API_IDLE_MS 30000

/* Bytes a connection may have queued for writing; a stream message that
 * would pass it is dropped (a slow reader loses messages, the process
 * keeps its memory). 1 MiB is a few hundred connection lists. */
#define API_SENDQ_MAX (1u << 20)

/* Delay probes running at once; the next one is answered 503. A
 * dashboard's "test all" fires one per proxy, queued by the browser six
 * at a time per origin. */
#define API_PROBES_MAX 16

typedef struct api_http api_http;

typedef struct api_http_conf {
	const char *listen;             /* "ip:port", checked by etm_spec_check */
	etm_supervisor *sup;            /* borrowed until api_http_stop */
	const metrics_reloads *reloads; /* borrowed likewise: for GET /metrics */
	uint64_t start_time;
	metrics_http *const *metrics; /* the app's [metrics] server (NULL inside: off) */
	/* PUT /configs: reloads the config file now (reloader_run) */
	int (*reload)(void *arg, char *err, size_t err_size);
	void *reload_arg;
} api_http_conf;

/* Listens on conf->listen and serves the API of view (taken over: it is
 * zeroed). The socket has SO_REUSEPORT, as the metrics endpoint's. Logs
 * "api: serving http://<bound address>". Returns the server, or NULL with
 * the reason in err: "api: cannot listen on <addr>: <libuv's text>" or
 * "api: out of memory". */
api_http *api_http_start(uv_loop_t *loop, const api_http_conf *conf, api_view *view, char *err,
                         size_t err_size);

/* A reload applied: the API shows view from now on (taken over). A
 * view without a secret keeps the running one while the API listens on
 * a non-loopback address (logged: "reload: [api] secret removed while
 * the API listens on <addr>, which is not loopback; the old secret stays
 * until the next start"). */
void api_http_set_view(api_http *a, api_view *view);

/* Closes the listener, every connection and probe (run the loop once
 * more to free them). NULL is a no-op. */
void api_http_stop(api_http *a);

/* Every line the server itself logs, for the tests. */
typedef enum api_http_msg {
	API_HTTP_SERVING,
	API_HTTP_LISTEN,
	API_HTTP_NOMEM,
	API_HTTP_FULL,
	API_HTTP_REQUEST,
	API_HTTP_KEEP_SECRET,
	API_HTTP_NOT_READING,
	API_HTTP_MSG_COUNT_,
} api_http_msg;
const char *api_http_message(api_http_msg m);

#endif
