/* trojan.h - Trojan: the client layer, the sans-io server core with its fallback, and the UDP packet codec. */
#ifndef ETM_PROTO_TROJAN_H
#define ETM_PROTO_TROJAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/addr.h"
#include "proto/proto.h"
#include "base/layer.h"

/* Wire format (trojan-gfw, docs/protocol.md "The Trojan Protocol"):
 *
 *   hex(SHA224(password)) CRLF CMD ATYP DST.ADDR DST.PORT CRLF payload...
 *
 * CMD is 0x01 CONNECT or 0x03 UDP ASSOCIATE; ATYP DST.ADDR DST.PORT is a
 * SOCKS5 address (RFC 1928 section 5: 0x01 IPv4, 0x03 domain, 0x04 IPv6).
 * The server never answers: after the request the stream is the payload,
 * both ways. Over UDP ASSOCIATE the payload is a stream of packets, each
 *
 *   ATYP DST.ADDR DST.PORT Length(2, big endian) CRLF payload(Length)
 *
 * (the format trojan-go and Xray implement). */

/* hex(SHA-224(password)): 28 bytes as 56 lowercase hex digits, no NUL. */
#define TROJAN_HASH_LEN 56

/* The longest request: HASH CRLF CMD ATYP LEN DOMAIN(255) PORT CRLF. The
 * format bounds it, so the server core decides within this many bytes. */
#define TROJAN_REQUEST_MAX (TROJAN_HASH_LEN + 2 + 1 + 1 + 1 + ADDR_DOMAIN_MAX + 2 + 2)

/* The longest UDP packet header: ATYP LEN DOMAIN(255) PORT LENGTH CRLF. */
#define TROJAN_UDP_HEADER_MAX (1 + 1 + ADDR_DOMAIN_MAX + 2 + 2 + 2)

/* Largest UDP payload in one packet. Xray's and v2ray's Trojan readers
 * refuse a Length over 8192 (their maxLength) and trojan-go reads 8 KiB
 * packets, so a larger packet would not get through those peers; bounding
 * it here also bounds the shell's buffer to TROJAN_UDP_FRAME_MAX. */
#define TROJAN_UDP_PAYLOAD_MAX 8192
#define TROJAN_UDP_FRAME_MAX (TROJAN_UDP_HEADER_MAX + TROJAN_UDP_PAYLOAD_MAX)

/* trojan_udp_decode's "the packet has not fully arrived". */
#define TROJAN_UDP_NEED_MORE 0

/* ---- password hash ---- */

/* Writes hex(SHA-224(password)) (lowercase, not NUL-terminated) into out,
 * with OpenSSL EVP. Returns 0, or -1 when OpenSSL fails (no memory, or no
 * provider offers SHA-224); out is then left unchanged. */
__attribute__((warn_unused_result)) int trojan_password_hash(const char *password,
                                                             char out[TROJAN_HASH_LEN]);

/* ---- client layer ---- */

/* A client layer that opens dest through a Trojan server: start() writes
 * the request (CMD CONNECT for a TCP dest, UDP ASSOCIATE for a UDP one, with
 * dest as the address) and the layer is ready at once; after that bytes
 * pass through unchanged both ways (over UDP ASSOCIATE, the app frames each
 * datagram with trojan_udp_encode and reads them with trojan_udp_decode).
 * hash_hex is copied. Returns NULL when out of memory, or when dest is
 * unset or a domain that addr_dest would refuse (empty, holding a NUL). The
 * layer's name is "trojan"; it has no shutdown and never fails. */
layer *trojan_client_new(const uint8_t hash_hex[TROJAN_HASH_LEN], const addr_dest *dest);

/* ---- server core ---- */

/* Private: the core's position. A zeroed struct is TROJAN_ST_REQUEST. */
typedef enum trojan_state {
	TROJAN_ST_REQUEST,  /* waiting for a complete request */
	TROJAN_ST_OPEN,     /* PROTO_EV_OPEN given: the core is done */
	TROJAN_ST_FALLBACK, /* not Trojan: the core is done, the bytes go to the fallback */
} trojan_state;

/* One core serves one client connection (after TLS). Visible so the shell
 * can embed it; read it through the functions below. */
typedef struct trojan_server {
	const uint8_t (*hashes)[TROJAN_HASH_LEN]; /* borrowed for the core's life */
	size_t n_users;
	trojan_state state;
} trojan_server;

/* The fallback contract. A Trojan server must look like the web server
 * behind it to anything that is not Trojan (docs/protocol.md, "Other
 * Protocols"): every byte such a peer sent goes, untouched and in order, to
 * the fallback address. So the core consumes nothing until it accepts:
 *
 *   The shell keeps every byte the client sent in its own buffer and calls
 *   trojan_server_feed(s, buf, len, ...) with all of them, from the first
 *   byte of the connection, after each read (the same bytes again, with
 *   the new ones appended). TROJAN_REQUEST_MAX bytes are always enough for
 *   a decision, so the buffer needs no more than that before one.
 *
 *   0, PROTO_EV_NONE       not decided yet: read more, feed again.
 *   n, PROTO_EV_OPEN       a Trojan request of n bytes: drop those n bytes;
 *                          what follows them in buf is the client's first
 *                          payload. Dial ev.dest (ev.cmd CONNECT or
 *                          UDP_ASSOCIATE, ev.dest.network TCP or UDP,
 *                          ev.user = the index of the matching hash).
 *                          There is no reply: on a failed dial, close.
 *   0, PROTO_EV_CLOSE      not Trojan (ev.reason says why, for a debug
 *                          log) and trojan_server_wants_fallback(s) is now
 *                          true: connect to the fallback, write buf[0, len)
 *                          to it, then relay both ways untouched. With no
 *                          fallback configured, close.
 *
 * The core rejects as soon as a byte proves the bytes are not Trojan (a
 * non-hex first byte, as in "GET /" or a TLS record, falls back at once)
 * but never on a partial hash, which would let a prober learn the hash one
 * digit at a time: the hash is compared, in constant time, only once all
 * 56 digits are in. A peer that stops before that is waiting on the shell's
 * handshake deadline: trojan_server_timeout then sends it to the fallback.
 * The core writes nothing to the client, ever: out->len is always 0. */

/* Resets s to the start state. hashes[0, n_users) are the accounts'
 * hex(SHA-224(password)) values, as trojan_password_hash writes them;
 * borrowed for the core's life. With no accounts every request falls back. */
void trojan_server_init(trojan_server *s, const uint8_t (*hashes)[TROJAN_HASH_LEN],
                        size_t n_users);

/* Decides on in[0, len), every byte the client has sent so far (see the
 * contract above). out->len is set to 0 and *ev is set on every call.
 * Returns the request's length with PROTO_EV_OPEN, 0 with PROTO_EV_NONE or
 * (the fallback) PROTO_EV_CLOSE, or PROTO_ERR_STATE when called after a
 * decision (ev CLOSE, s unchanged). Works for any split of the input. */
__attribute__((warn_unused_result)) ssize_t trojan_server_feed(trojan_server *s,
                                                               const uint8_t *in, size_t len,
                                                               proto_out *out, proto_event *ev);

/* The shell's handshake deadline passed before a decision: the core gives
 * up and wants the fallback, like a rejection (ev CLOSE with a reason).
 * Returns 0, or PROTO_ERR_STATE after a decision (s unchanged). */
__attribute__((warn_unused_result)) int trojan_server_timeout(trojan_server *s, proto_event *ev);

/* Whether the core rejected the bytes as not Trojan: the shell forwards
 * every byte it holds to the fallback. False before a decision and after
 * an OPEN. */
bool trojan_server_wants_fallback(const trojan_server *s);

/* ---- UDP packet codec ---- */

/* Writes the header of a packet to dest carrying payload_len bytes
 * (ATYP DST.ADDR DST.PORT Length CRLF) into hdr[0, cap); the payload
 * follows it. Returns the header's length, PROTO_ERR_TOO_BIG when cap is
 * too small or payload_len is over TROJAN_UDP_PAYLOAD_MAX (drop the
 * datagram), or PROTO_ERR_MALFORMED for an unset dest or an invalid domain. */
__attribute__((warn_unused_result)) ssize_t trojan_udp_encode(const addr_dest *dest,
                                                              size_t payload_len, uint8_t *hdr,
                                                              size_t cap);

/* Reads the packet at the start of in[0, len), a stream. Returns the whole
 * packet's length (header and payload: drop that many bytes after using the
 * payload) with *dest (network UDP), *payload_off and *payload_len set;
 * TROJAN_UDP_NEED_MORE (0) when the packet has not fully arrived and what
 * has is valid; PROTO_ERR_MALFORMED for an unknown ATYP, an empty or
 * NUL-holding domain or a missing CRLF; PROTO_ERR_TOO_BIG for a Length over
 * TROJAN_UDP_PAYLOAD_MAX. Errors are found as early as the bytes allow; the
 * stream cannot be resynchronised after one, so the shell ends it. The
 * outputs are written only when a packet is returned. */
__attribute__((warn_unused_result)) ssize_t trojan_udp_decode(const uint8_t *in, size_t len,
                                                              addr_dest *dest,
                                                              size_t *payload_off,
                                                              size_t *payload_len);

#endif
