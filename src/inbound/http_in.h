/* http_in.h - the HTTP proxy inbound: CONNECT tunnels and absolute-form requests filtered both ways. */
#ifndef ETM_INBOUND_HTTP_IN_H
#define ETM_INBOUND_HTTP_IN_H

#include "inbound/in_conn.h"

void http_in_init(in_conn *ic);
size_t http_in_data(in_conn *ic, const uint8_t *data, size_t len);
/* The client's EOF: true to close now. */
bool http_in_client_end(in_conn *ic);
/* A client write finished: resume upstream reads paused for backpressure. */
void http_in_written(in_conn *ic);
void http_in_free(in_conn *ic);

#endif
