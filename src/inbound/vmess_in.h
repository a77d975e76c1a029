/* vmess_in.h - the VMess AEAD inbound (with UDP in the stream): one row of server_ops.h. */
#ifndef ETM_INBOUND_VMESS_IN_H
#define ETM_INBOUND_VMESS_IN_H

#include "inbound/server_ops.h"

extern const inbound_proto_ops vmess_in_ops;

#endif
