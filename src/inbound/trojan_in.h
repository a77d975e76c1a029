/* trojan_in.h - the Trojan inbound (with its fallback and UDP in the stream): one row of server_ops.h. */
#ifndef ETM_INBOUND_TROJAN_IN_H
#define ETM_INBOUND_TROJAN_IN_H

#include "inbound/server_ops.h"

extern const inbound_proto_ops trojan_in_ops;

#endif
