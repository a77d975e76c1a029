/* socks_client.h - SOCKS5 client layers (RFC 1928, RFC 1929): CONNECT through an upstream, and UDP ASSOCIATE's control stream. */
#ifndef ETM_PROTO_SOCKS_CLIENT_H
#define ETM_PROTO_SOCKS_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/addr.h"
#include "base/layer.h"

/* The exchange, one message at a time (the client waits for each reply):
 *
 *   greeting  VER=5 NMETHODS METHODS   method 0x00, or only 0x02 with
 *                                      credentials (RFC 1928 section 3)
 *   reply     VER=5 METHOD             anything but the offered method:
 *                                      "auth method not supported"
 *   auth      VER=1 ULEN UNAME PLEN PASSWD                (RFC 1929)
 *   reply     VER STATUS               STATUS != 0: "server rejects account"
 *                                      (VER is not checked: some servers
 *                                      answer 5 there, and curl accepts it)
 *   request   VER=5 CMD RSV=0 ATYP DST.ADDR DST.PORT      (section 4)
 *   reply     VER=5 REP RSV ATYP BND.ADDR BND.PORT        (section 6)
 *                                      REP != 0: "server rejects request: <REP
 *                                      in decimal>"; BND parsed and skipped
 *                                      for CONNECT (any ATYP)
 *
 * Replies are parsed in place: from_below consumes nothing until a whole
 * reply has arrived (the stack offers the bytes again with more
 * appended), nor before the message it answers is all out below, and
 * refuses as soon as a byte decides. Bytes after the final
 * reply are the upstream's first app bytes and go up in the same call.
 * from_above takes nothing before ready.
 *
 * Errors (the layer's error() gives the seed's texts word for word; seed
 * 000, "SocksOutbound: CONNECT and UDP ASSOCIATE"):
 *   LAYER_ERR_AUTH   "auth method not supported", "server rejects account",
 *                    "server rejects request: <status>"
 *   LAYER_ERR_PROTO  "socks: the relay address is a domain" (UDP variant),
 *                    "socks: malformed server reply" (a VER other than 5,
 *                    an unknown ATYP; RSV is not checked), "socks: username or
 *                    password longer than 255 bytes" (from start)
 *   LAYER_ERR_CLOSED "socks: server closed during the handshake", through
 *                    socks_client_eof (a layer does not see the socket's EOF)
 * The layer's name is "socks"; its texts name it, so stack_error shows them
 * as they are. */

/* RFC 1929: ULEN and PLEN are one octet. */
#define SOCKS_CLIENT_CREDENTIAL_MAX 255

/* A CONNECT client for dest. Credentials are used when username is
 * non-NULL and non-empty (password NULL means empty); both are copied.
 * Returns NULL when out of memory or dest is unset or an invalid domain. */
layer *socks_client_new(const addr_dest *dest, const char *username, const char *password);

/* A UDP ASSOCIATE client: the same exchange with CMD 0x03 and DST
 * 0.0.0.0:0 (RFC 1928 section 6: a client that does not know its source
 * sends zeros; seed 000 explains why we never name one). Ready once the
 * reply names the relay, readable with socks_client_relay; after that the
 * control stream carries nothing, and bytes from below still pass up (the
 * shell drains them). A relay of 0.0.0.0 or :: is returned as it is: many
 * servers mean "my own address", which only the shell knows. */
layer *socks_client_udp_new(const char *username, const char *password);

/* The relay's address (network UDP) once a UDP ASSOCIATE layer is ready;
 * NULL before, and for a CONNECT layer. */
const addr_dest *socks_client_relay(const layer *l);

/* Whether the handshake is still under way (not ready, not failed). l must
 * be a SOCKS client layer. */
bool socks_client_in_handshake(const layer *l);

/* The server closed its side. Returns 0 when the handshake was done (the
 * stream just ended) or had already failed, or LAYER_ERR_CLOSED with
 * error() "socks: server closed during the handshake" when it was under
 * way; the layer is failed from then on. */
__attribute__((warn_unused_result)) int socks_client_eof(layer *l);

#endif
