/* stream_udp.h - datagram links over a proxy stream: Trojan and VLESS UDP frames, and a SOCKS5 UDP association. */
#ifndef ETM_OUTBOUND_STREAM_UDP_H
#define ETM_OUTBOUND_STREAM_UDP_H

#include "runtime/connector.h"
#include "transport/stack.h"

/* Bytes a framed link lets wait in its socket's write queue; datagrams
 * beyond it are dropped (UDP), never queued without bound. */
#define STREAM_UDP_QUEUE_MAX (256 * 1024)

typedef enum stream_udp_framing {
	STREAM_UDP_TROJAN, /* every packet names its destination (ATYP ADDR PORT LEN CRLF) */
	STREAM_UDP_VLESS,  /* 2-byte length; the stream's one target is every packet's */
	STREAM_UDP_VMESS,  /* VLESS's framing, which the vmess layer turns into one chunk a
	                      datagram (vmess_client_new) */
} stream_udp_framing;

/* A link that frames datagrams into the connected stream ep (taken over). target is the VLESS stream's one target (reported as every
 * reply's source); ignored for Trojan. The stream's end reaches h->end as
 * "<kind>: the stream ended" or the stack's error. */
dgram_link *stream_udp_open(endpoint *ep, stream_udp_framing framing, const addr_dest *target,
                            const dgram_handlers *h, void *ud);

/* A SOCKS5 UDP association (seed 000 "SocksOutbound"): the control stream
 * ep (taken over; its top layer is the ready UDP ASSOCIATE client
 * control, which names the relay) and a UDP socket bound after the reply in
 * the relay's family. Datagrams are accepted only from the relay (canonical
 * IP and port). The control stream's EOF ends the association with
 * "socks: the control connection closed". server is the SOCKS server, whose
 * address stands in for a relay of 0.0.0.0 or ::. NULL with err when the
 * relay is a domain ("socks: the relay address is a domain") or no socket
 * binds. */
dgram_link *socks_udp_link_open(worker *w, endpoint *ep, const layer *control,
                                const dgram_handlers *h, void *ud, char *err, size_t err_size);

#endif
