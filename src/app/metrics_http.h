/* metrics_http.h - the [metrics] listen endpoint: a small HTTP/1.1 server on the control thread's loop that answers GET /metrics. */
#ifndef ETM_APP_METRICS_HTTP_H
#define ETM_APP_METRICS_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "app/metrics.h"
#include "etemenanki/supervisor.h"

/* A request head longer than this is answered 431 and the connection
 * closed: a scraper sends a few hundred bytes; 8 KiB is nginx's default
 * large header buffer. */
#define METRICS_HEAD_MAX 8192

/* Connections open at once; the next one is closed as soon as it is
 * accepted. A scraper holds one or two; the bound keeps a flood of idle
 * ones from costing the control thread more than 64 small buffers. */
#define METRICS_CONNS_MAX 64

/* The listen backlog: far more than the connections served, so that a
 * flood is accepted (and the surplus closed) at once, instead of waiting
 * in SYN_RECV for the kernel to retransmit its SYN-ACK (1 s, 3 s, ...)
 * once a short accept queue is full. nginx's default is 511. */
#define METRICS_BACKLOG 1024

/* An idle connection (no byte read, no answer being written) is closed
 * after this long; Prometheus scrapes every 15 s to 1 min by default and
 * reconnects as it needs. */
#define METRICS_IDLE_MS 10000

/* Reload outcomes, counted by the reloader (app/reload.h) for
 * etemenanki_reloads_total. */
typedef struct metrics_reloads {
	uint64_t ok, failed;
} metrics_reloads;

typedef struct metrics_http metrics_http;

/* Listens on addr ("ip:port", checked by etm_listen_addr_parse) on loop
 * and serves the counters of sup (borrowed until metrics_http_stop),
 * the reload counts in *reloads (borrowed likewise) and start_time.
 * The socket has SO_REUSEPORT, so that the new process of a binary
 * upgrade can bind the address while this one serves.
 * Logs "metrics: serving http://<bound address>/metrics". Returns the
 * server, or NULL with the reason in err: "metrics: cannot listen on
 * <addr>: <libuv's text>" or "metrics: out of memory". */
metrics_http *metrics_http_start(uv_loop_t *loop, const char *addr, etm_supervisor *sup,
                                 const metrics_reloads *reloads, uint64_t start_time, char *err,
                                 size_t err_size);

/* The Prometheus text of one scrape of sup into body (app/metrics.h):
 * what GET /metrics answers here and on the admin API. refused is the
 * etemenanki_metrics_connections_refused value. Returns 0, or -1 when
 * memory ran out. The thread that started the engine. */
__attribute__((warn_unused_result)) int metrics_http_collect(etm_supervisor *sup,
                                                             const metrics_reloads *reloads,
                                                             uint64_t start_time,
                                                             uint64_t refused,
                                                             metrics_buf *body);

/* Connections the endpoint closed at once for METRICS_CONNS_MAX; 0 for
 * NULL. */
uint64_t metrics_http_refused(const metrics_http *m);

/* Closes the listener and every connection (run the loop once more to
 * free them). NULL is a no-op. */
void metrics_http_stop(metrics_http *m);

/* The status line reason, and the body, of each answer: exported so the
 * tests can assert them word for word. "" past the table. */
const char *metrics_http_reason(int status);
const char *metrics_http_body(int status);

#endif
