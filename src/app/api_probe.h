/* api_probe.h - a delay test of the admin API on the control loop: resolve a host, TCP-connect to it, time it. */
#ifndef ETM_APP_API_PROBE_H
#define ETM_APP_API_PROBE_H

#include <stdint.h>
#include <uv.h>

#include "app/api.h"

typedef struct api_probe api_probe;

/* result: the delay in ms (at least 1: dashboards read 0 as "no result"),
 * or API_DELAY_TIMEOUT or API_DELAY_FAILED. */
typedef void (*api_probe_cb)(void *arg, int64_t result);

/* Resolves host (uv_getaddrinfo), connects to its first address and port,
 * and calls cb(arg, result) once, never from inside this call, unless
 * api_probe_cancel comes first. The time runs from the start of the
 * resolution; past timeout_ms the result is API_DELAY_TIMEOUT. Returns the
 * probe, or NULL when memory ran out (cb is then never called). */
api_probe *api_probe_start(uv_loop_t *loop, const char *host, uint16_t port, uint32_t timeout_ms,
                           api_probe_cb cb, void *arg);

/* The result is no longer wanted: cb is not called, the probe's handles
 * close now and it frees itself (once a resolution that cannot be
 * cancelled has answered). Not after cb ran. */
void api_probe_cancel(api_probe *p);

#endif
