/* vless_in.h - the VLESS inbound (with UDP in the stream): one row of server_ops.h. */
#ifndef ETM_INBOUND_VLESS_IN_H
#define ETM_INBOUND_VLESS_IN_H

#include "inbound/server_ops.h"

extern const inbound_proto_ops vless_in_ops;

#endif
