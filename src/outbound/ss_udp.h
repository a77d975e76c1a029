/* ss_udp.h - the Shadowsocks AEAD datagram link: every datagram sealed with its target into one UDP packet to the server, replies opened. */
#ifndef ETM_OUTBOUND_SS_UDP_H
#define ETM_OUTBOUND_SS_UDP_H

#include <stddef.h>
#include <stdint.h>

#include "proto/shadowsocks.h"
#include "runtime/connector.h"
#include "runtime/dial.h"
#include "runtime/dns.h"

/* Opens the link on w's loop over a direct UDP link of its own
 * (freedom_udp_open: one socket per family af allows, the server's name
 * resolved by it). send_to(dest, data) sends salt || Seal(ATYP ADDR PORT of
 * dest || data) to server, with a fresh random salt each; a packet from the
 * server that opens with key goes to h as coming from the address inside
 * it. A packet that does not open, or holds no valid address, is dropped
 * (debug line "shadowsocks: dropping a UDP packet that does not open" or
 * "... with a bad address"). A datagram too big for one packet with its
 * salt, address and tag is dropped (send_to returns -1). key is the master
 * key (copied). Returns NULL with the reason in err. */
dgram_link *ss_udp_open(worker *w, dns_resolver *dns, dial_family af, ss_method m,
                        const uint8_t *key, const addr_dest *server, const dgram_handlers *h,
                        void *ud, char *err, size_t err_size);

#endif
