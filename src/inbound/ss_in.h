/* ss_in.h - the Shadowsocks AEAD inbound (TCP): one row of server_ops.h. */
#ifndef ETM_INBOUND_SS_IN_H
#define ETM_INBOUND_SS_IN_H

#include "inbound/server_ops.h"

extern const inbound_proto_ops ss_in_ops;

#endif
