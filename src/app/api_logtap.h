/* api_logtap.h - log lines from any thread handed to the control loop for the admin API's /logs streams: a bounded ring behind a mutex, woken with a uv_async_t. */
#ifndef ETM_APP_API_LOGTAP_H
#define ETM_APP_API_LOGTAP_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

/* Lines waiting for the control thread: a burst of a worker's debug
 * lines past this is dropped for the streams (never for stderr). */
#define API_LOG_RING 256
/* A line longer than this is cut for the streams. */
#define API_LOG_LINE_MAX 1024

/* Lines go to the ring, and async is sent, from now on (while a
 * subscriber is in). async is borrowed until api_logtap_detach. Empties
 * the ring. The control thread. */
void api_logtap_attach(uv_async_t *async);
void api_logtap_detach(void);

/* A /logs stream starts or ends: the tap (base/log.h) is installed while
 * at least one listens, so a process without one pays one relaxed load
 * a line. The control thread. */
void api_logtap_subscribe(void);
void api_logtap_unsubscribe(void);

/* Takes the oldest line: its LOG_LEVEL_* and text (without newline, up
 * to API_LOG_LINE_MAX - 1 bytes) into text. false when the ring is
 * empty. The control thread. */
bool api_logtap_pop(int *level, char *text, size_t *len);

#endif
