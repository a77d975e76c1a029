/* ss_udp.h - the Shadowsocks datagram link (AEAD-2017 and 2022): every datagram sealed with its target into one UDP packet to the server, replies opened. */
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
 * key (copied).
 *
 * With a 2022 method (SIP022 3.2, 4.1) the link is one client session: a
 * random session ID, packet IDs from 0, each datagram one packet with its
 * target, the time and 0 to 32 bytes of padding, behind id's identity
 * headers (copied; NULL or n 0: none). A server packet is taken when it
 * opens under key, is of type 1 within 30 s of our clock, names our
 * session, and its packet ID passes its server session's replay window
 * (SS2022_UDP_WINDOW). Two server sessions are kept, the current and the
 * old one; a third is taken only once the old one has sent nothing for
 * 60 s (SIP022 3.2.4's "one old and one current"). Drops log at debug
 * "shadowsocks 2022: dropping a UDP packet: <reason>".
 *
 * Returns NULL with the reason in err. */
dgram_link *ss_udp_open(worker *w, dns_resolver *dns, dial_family af, ss_method m,
                        const uint8_t *key, const ss_identity *id, const addr_dest *server,
                        const dgram_handlers *h, void *ud, char *err, size_t err_size);

#endif
