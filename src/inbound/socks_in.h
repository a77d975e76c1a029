/* socks_in.h - the SOCKS4, 4a and 5 inbound (with UDP ASSOCIATE): one row of server_ops.h. */
#ifndef ETM_INBOUND_SOCKS_IN_H
#define ETM_INBOUND_SOCKS_IN_H

#include "inbound/server_ops.h"

extern const inbound_proto_ops socks_in_ops;

#endif
