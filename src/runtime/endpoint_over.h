/* endpoint_over.h - an endpoint carried by another endpoint's app bytes: new layers (a TLS of our own) on a stream whose stack already started, such as one opened through a proxy outbound. */
#ifndef ETM_RUNTIME_ENDPOINT_OVER_H
#define ETM_RUNTIME_ENDPOINT_OVER_H

#include "runtime/endpoint.h"
#include "runtime/worker.h"

/* A plain endpoint (endpoint_start can put layers on it) whose wire bytes
 * are inner's app bytes: what the outer endpoint sends goes out through
 * inner, what inner reads comes up to it, inner's end and failure are its
 * own. Takes inner in every case (it is closed with the outer one, or at
 * once when memory runs out) and becomes the owner of its events. Events
 * go nowhere until endpoint_set_events. NULL without memory. Worker
 * thread only. */
endpoint *endpoint_over(worker *w, endpoint *inner);

#endif
