/* api_logtap.c - the log tap of the /logs streams: base/log.h's hook fills a ring under a mutex, the control loop empties it. */
#include "app/api_logtap.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "base/log.h"

/* Process-wide because the log is: the ring and the async pointer are the
 * mutex's (any thread), the subscriber count the control thread's. */
static struct {
	pthread_mutex_t mu;
	uv_async_t *async; /* NULL while no server runs */
	size_t head, n;
	struct {
		int level;
		uint16_t len;
		char text[API_LOG_LINE_MAX];
	} ring[API_LOG_RING];
} taps = {.mu = PTHREAD_MUTEX_INITIALIZER};
static int subscribers;

/* Any thread; never logs. */
static void tap(int level, const char *line, size_t len)
{
	pthread_mutex_lock(&taps.mu);
	if (taps.async && taps.n < API_LOG_RING) {
		size_t i = (taps.head + taps.n++) % API_LOG_RING;
		if (len >= API_LOG_LINE_MAX)
			len = API_LOG_LINE_MAX - 1;
		taps.ring[i].level = level;
		taps.ring[i].len = (uint16_t)len;
		memcpy(taps.ring[i].text, line, len);
		uv_async_send(taps.async);
	}
	pthread_mutex_unlock(&taps.mu);
}

void api_logtap_attach(uv_async_t *async)
{
	pthread_mutex_lock(&taps.mu);
	taps.async = async;
	taps.head = taps.n = 0;
	pthread_mutex_unlock(&taps.mu);
}

void api_logtap_detach(void) { api_logtap_attach(NULL); }

void api_logtap_subscribe(void)
{
	if (subscribers++ == 0)
		log_set_tap(tap);
}

void api_logtap_unsubscribe(void)
{
	if (--subscribers == 0)
		log_set_tap(NULL);
}

bool api_logtap_pop(int *level, char *text, size_t *len)
{
	pthread_mutex_lock(&taps.mu);
	bool any = taps.n > 0;
	if (any) {
		*level = taps.ring[taps.head].level;
		*len = taps.ring[taps.head].len;
		memcpy(text, taps.ring[taps.head].text, *len);
		taps.head = (taps.head + 1) % API_LOG_RING;
		taps.n--;
	}
	pthread_mutex_unlock(&taps.mu);
	return any;
}
