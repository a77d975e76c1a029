/* http_in.h - the HTTP proxy inbound (CONNECT tunnels, absolute-form requests filtered both ways): one row of server_ops.h. */
#ifndef ETM_INBOUND_HTTP_IN_H
#define ETM_INBOUND_HTTP_IN_H

#include "inbound/server_ops.h"

extern const inbound_proto_ops http_in_ops;

#endif
