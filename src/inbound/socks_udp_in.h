/* socks_udp_in.h - a SOCKS5 UDP association: the relay socket and the datagram link behind it. */
#ifndef ETM_INBOUND_SOCKS_UDP_IN_H
#define ETM_INBOUND_SOCKS_UDP_IN_H

#include "inbound/in_conn.h"

/* Room for socks_udp_in_start's reason: its own words and the link's. */
#define SOCKS_UDP_IN_WHY_MAX 256

typedef struct socks_udp_in socks_udp_in;

/* Serves a UDP ASSOCIATE for ev (from the SOCKS core) on ic: sets the
 * flow, binds the relay in the control connection's family on the address
 * the client reached, opens the datagram link and starts reading the
 * relay. Returns the association (owned by the caller: end it with
 * socks_udp_in_stop), with the relay's address in *bound for the reply; or
 * NULL with the reason in why. Answers nothing: the caller replies, then
 * holds the control connection, as the association ends when it closes. */
socks_udp_in *socks_udp_in_start(in_conn *ic, const proto_event *ev, addr_dest *bound,
                                 char *why, size_t why_size);

/* Ends the association. */
void socks_udp_in_stop(socks_udp_in *u);

#endif
