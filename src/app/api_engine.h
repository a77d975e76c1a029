/* api_engine.h - the admin API's provider (app/api.h) backed by the running engine, the log, the reloader and the metrics writer. */
#ifndef ETM_APP_API_ENGINE_H
#define ETM_APP_API_ENGINE_H

#include "app/api.h"
#include "app/api_http.h"

/* Fills *out with functions that answer from conf's engine (conf is the
 * context, borrowed for as long as *out is used). The thread that started
 * the engine calls them. Can't fail. */
void api_engine_provider(const api_http_conf *conf, api_provider *out);

#endif
