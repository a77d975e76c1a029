/* socks_udp.h - a SOCKS5 UDP association: the relay socket and the datagram link behind it. */
#ifndef ETM_INBOUND_SOCKS_UDP_H
#define ETM_INBOUND_SOCKS_UDP_H

#include "inbound/in_conn.h"

/* Answers a UDP ASSOCIATE (ev from the SOCKS core): binds the relay in the
 * control connection's family on the address the client reached, opens the
 * datagram link, replies with the relay's address and holds the control
 * connection; the association ends when it closes. On failure the client
 * gets the SOCKS failure reply. */
void socks_udp_start(in_conn *ic, const proto_event *ev);

/* Ends the association (the control connection closed). */
void socks_udp_stop(in_conn *ic);

#endif
