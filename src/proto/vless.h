/* vless.h - VLESS (version 0, no addons): the client layer, the sans-io server core and the UDP length framing. */
#ifndef ETM_PROTO_VLESS_H
#define ETM_PROTO_VLESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/addr.h"
#include "proto/proto.h"
#include "base/layer.h"

/* Wire format (Xray docs, development/protocols/vless.md; Xray-core
 * proxy/vless/encoding):
 *
 *   request:  Version(1)=0 UUID(16) M(1) addons(M) Command(1) Port(2, BE)
 *             AddrType(1) Address
 *   response: Version(1)=request's M(1) addons(M)
 *
 * Command 0x01 TCP, 0x02 UDP (0x03 Mux is not supported). AddrType differs
 * from SOCKS: 0x01 IPv4 (4 bytes), 0x02 domain (length byte + name), 0x03
 * IPv6 (16 bytes); the port comes before the address. After the headers a
 * TCP flow is the raw stream; a UDP flow carries datagrams, each as
 * Length(2, BE) payload, all to the request's one target. */

#define VLESS_VERSION 0
#define VLESS_UUID_LEN 16

/* Canonical text form: 8-4-4-4-12 hex digits. */
#define VLESS_UUID_TEXT_LEN 36

/* The longest request we accept: addons are refused (they carry a flow
 * such as xtls-rprx-vision or a seed, neither supported), so
 * Version UUID M=0 Command Port AddrType LEN DOMAIN(255). */
#define VLESS_REQUEST_MAX (1 + VLESS_UUID_LEN + 1 + 1 + 2 + 1 + 1 + ADDR_DOMAIN_MAX)

/* The response header the client skips: Version M addons(M <= 255). */
#define VLESS_RESPONSE_MAX (1 + 1 + 255)

/* UDP framing: a 2-byte length, then the payload. Xray's writer never sends
 * more than 8190 bytes (buf.Size - 2) in one frame; 8192 bounds ours and
 * the shell's buffer (VLESS_UDP_FRAME_MAX). */
#define VLESS_UDP_HEADER_LEN 2
#define VLESS_UDP_PAYLOAD_MAX 8192
#define VLESS_UDP_FRAME_MAX (VLESS_UDP_HEADER_LEN + VLESS_UDP_PAYLOAD_MAX)

/* vless_udp_decode's "the frame has not fully arrived". */
#define VLESS_UDP_NEED_MORE 0

/* Parses a UUID: 8-4-4-4-12 hex digits, or the same 32 digits without the
 * hyphens, either case. Returns 0 with out set, or -1 (out unchanged). */
__attribute__((warn_unused_result)) int vless_uuid_parse(const char *text,
                                                         uint8_t out[VLESS_UUID_LEN]);

/* ---- client layer ---- */

/* A client layer that opens dest (its one target for udp) through a VLESS
 * server as the account uuid: start() writes the request and the layer is
 * ready at once (the app's first bytes follow the request in the same
 * write). from_below skips the response header once (consuming nothing
 * until all of it has arrived, and the whole request is out; the stack
 * offers the bytes again with more appended), then passes bytes up
 * unchanged; from_above passes bytes down
 * unchanged. For udp the app frames each datagram with vless_udp_encode
 * and reads them with vless_udp_decode. uuid is copied. Returns NULL when
 * out of memory, or when dest is unset or a domain addr_dest would refuse.
 * The layer's name is "vless"; its only error is LAYER_ERR_PROTO for a
 * response whose version is not 0 (error(): "vless: unexpected response
 * version"). */
layer *vless_client_new(const uint8_t uuid[VLESS_UUID_LEN], const addr_dest *dest, bool udp);

/* ---- server core ---- */

/* Private: the core's position. A zeroed struct is VLESS_ST_REQUEST. */
typedef enum vless_state {
	VLESS_ST_REQUEST, /* waiting for a complete request */
	VLESS_ST_DIAL,    /* PROTO_EV_OPEN given: waiting for opened */
	VLESS_ST_RELAY,   /* response header written: the core is done */
	VLESS_ST_CLOSED,  /* refused: the core is done */
} vless_state;

/* One core serves one client connection. Visible so the shell can embed
 * it; read it through the functions below. */
typedef struct vless_server {
	const uint8_t (*uuids)[VLESS_UUID_LEN]; /* borrowed for the core's life */
	size_t n_users;
	vless_state state;
} vless_server;

/* Input model (picohttpparser's, as the HTTP core): the core consumes
 * nothing until the request is complete. The shell keeps the client's
 * bytes and feeds all of them again, with new ones appended, after each
 * read; VLESS_REQUEST_MAX bytes always reach a decision.
 *
 *   n = vless_server_feed(&s, buf, len, &out, &ev);
 *     0, PROTO_EV_NONE    read more, feed again.
 *     n, PROTO_EV_OPEN    drop n bytes (the rest is the client's first
 *                         payload: raw for TCP, length-framed datagrams for
 *                         UDP); dial ev.dest (network TCP for
 *                         PROTO_CMD_CONNECT; network UDP, the one target
 *                         of every datagram, for PROTO_CMD_UDP_ASSOCIATE);
 *                         ev.user is the account's index. On success call
 *                         vless_server_opened and send out; on failure
 *                         close (VLESS has no failure reply).
 *     0, PROTO_EV_CLOSE   "vless: unknown user": close.
 *     < 0                 PROTO_ERR_MALFORMED (version other than 0,
 *                         command other than TCP or UDP, unknown address
 *                         type, empty or NUL-holding domain) or
 *                         PROTO_ERR_TOO_BIG (the request carries addons);
 *                         ev is CLOSE with a reason: close.
 *
 * The UUID is checked, in constant time, before anything after it, so an
 * unauthenticated peer learns nothing about the rest of the parser. */

/* Resets s. uuids[0, n) are the accounts (borrowed for the core's life). */
void vless_server_init(vless_server *s, const uint8_t (*uuids)[VLESS_UUID_LEN], size_t n);

/* Decides on in[0, len) as above. out->len is set to 0 and *ev is set on
 * every call. PROTO_ERR_STATE (ev CLOSE, s unchanged) when called after the
 * request was decided. Works for any split of the input. */
__attribute__((warn_unused_result)) ssize_t vless_server_feed(vless_server *s, const uint8_t *in,
                                                              size_t len, proto_out *out,
                                                              proto_event *ev);

/* After PROTO_EV_OPEN and a successful dial: writes the response header
 * (version 0, no addons) into out; the core is then done. Returns 0, or
 * PROTO_ERR_STATE (out empty, s unchanged) in any other state. */
__attribute__((warn_unused_result)) int vless_server_opened(vless_server *s, proto_out *out);

/* ---- UDP framing ---- */

/* Writes the 2-byte length of a payload_len-byte datagram into hdr[0, cap);
 * the payload follows it. Returns VLESS_UDP_HEADER_LEN, or
 * PROTO_ERR_TOO_BIG when cap < 2 or payload_len > VLESS_UDP_PAYLOAD_MAX
 * (drop the datagram). */
__attribute__((warn_unused_result)) ssize_t vless_udp_encode(size_t payload_len, uint8_t *hdr,
                                                             size_t cap);

/* Reads the frame at the start of in[0, len), a stream. Returns the whole
 * frame's length (drop that many bytes after using the payload, which is
 * at in + VLESS_UDP_HEADER_LEN) with *payload_len set;
 * VLESS_UDP_NEED_MORE (0) when it has not fully arrived; PROTO_ERR_TOO_BIG
 * for a length over VLESS_UDP_PAYLOAD_MAX (the stream cannot be
 * resynchronised: the shell ends it). */
__attribute__((warn_unused_result)) ssize_t vless_udp_decode(const uint8_t *in, size_t len,
                                                             size_t *payload_len);

#endif
