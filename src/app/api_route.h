/* api_route.h - what the admin API core's route files share: the answer helpers and the decoding of paths and queries (app/api.c), and the routes that live in files of their own. */
#ifndef ETM_APP_API_ROUTE_H
#define ETM_APP_API_ROUTE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "app/api.h"

/* r becomes a status with {"message": the text of m}. Returns 0 or -1
 * (memory). */
int api_answer_message(api_response *r, int status, api_msg m);

/* r becomes 405 with Allow: allow (static text). */
int api_not_allowed(api_response *r, const char *allow);

bool api_method_is(const api_request *r, const char *m);

/* Percent-decodes s[0, n) into out (with query, '+' is a space too).
 * Returns the length, or -1 when it does not decode or fit. */
ssize_t api_decode(const char *s, size_t n, bool query, char *out, size_t size);

/* The value of query parameter k decoded into out: its length, -1 when
 * absent, -2 when it does not decode or fit. */
ssize_t api_query_get(const char *q, size_t n, const char *k, char *out, size_t size);

/* /users and /users/<name> (app/api_users.c). */
int api_route_users(const api_provider *p, const api_request *rq, const char *path,
                    const char *q, size_t qn, api_response *r);

/* DELETE /connections with a filter in the query (user, inbound,
 * outbound, rule, epoch_below; app/api_users.c): 204, or 400 on a bad
 * parameter. */
int api_kill_where(const api_provider *p, const char *q, size_t qn, api_response *r);

#endif
