/* mux.h - Mux.Cool (v2ray's mux, "v1.mux.cool"): the sans-io frame codec and the client's and server's sub-flow tables. */
#ifndef ETM_PROTO_MUX_H
#define ETM_PROTO_MUX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/addr.h"
#include "proto/proto.h"

/* Wire format (v2fly docs, developer/protocols/muxcool.md; v2ray-core
 * v4.34.0 common/mux/frame.go, writer.go, reader.go, client.go, server.go).
 * A client opens one stream to "v1.mux.cool" port 9527 through any proxy
 * protocol; both directions of that stream are then a sequence of frames:
 *
 *   MetaLen(2, BE) Metadata(MetaLen) [DataLen(2, BE) Data(DataLen)]
 *   Metadata: ID(2, BE) Status(1) Option(1) [Network(1) Port(2, BE)
 *             AddrType(1) Address]
 *
 * Status 0x01 New (client only: opens sub-flow ID; the address block is
 * present, Network 0x01 TCP or 0x02 UDP), 0x02 Keep (data for ID), 0x03
 * End (closes ID, both ways: there is no half-close), 0x04 KeepAlive
 * (ID meaningless, data discarded). Option bit 0x01: DataLen and Data
 * follow the metadata; bit 0x02 (on End): the sub-flow ended in error.
 * AddrType as VLESS, not SOCKS: 0x01 IPv4 (4 bytes), 0x02 domain (length
 * byte + name), 0x03 IPv6 (16 bytes); the port comes before it.
 *
 * Receivers ignore metadata bytes after what their status needs (Xray
 * puts an XUDP GlobalID or the client's source address there; XUDP is not
 * implemented here). Xray's extension for UDP: a Keep frame whose fifth
 * metadata byte is 0x02 carries Network Port AddrType Address, the
 * datagram's own address; v2fly (4.34 and v5) never writes it and ignores
 * it on reading, so its UDP sub-flows have one destination each.
 *
 * A TCP sub-flow's frames carry a byte stream (v2ray splits it every
 * 8 KiB); a UDP sub-flow's frames carry one datagram each.
 *
 * Behaviour the session tables follow (v2ray's client.go and server.go):
 * data in a Keep frame for an ID the receiver does not have is answered
 * with End (no error bit) and dropped; Keep without data, End for an
 * unknown ID, data in End, New or KeepAlive frames are dropped; an
 * unknown status ends the whole connection. The client numbers its
 * sub-flows 1, 2, 3, ... and stops opening new ones on a connection
 * after 128 (MaxConnection), so IDs never wrap. */

/* The destination a client dials to speak Mux.Cool through a proxy. */
#define MUX_COOL_DOMAIN "v1.mux.cool"
#define MUX_COOL_PORT 9527

/* Sets d to the session address, v1.mux.cool:9527 over TCP: what a VLESS
 * or VMess request with command 0x03 (Mux, no address of its own) opens. */
void mux_session_dest(addr_dest *d);

/* Whether d names the session address (v1.mux.cool, any case, any port):
 * a VLESS or VMess client then sends command 0x03 and no address. */
bool mux_is_session_dest(const addr_dest *d);

/* v2ray refuses metadata over 512 bytes (frame.go, Unmarshal). */
#define MUX_META_MAX 512

/* Largest data part we accept in one frame. v2ray and Xray split a
 * stream every 8 KiB (writer.go) and a datagram is at most one buffer
 * (2 KiB in v2fly, 8 KiB in Xray), so no peer sends more; bounding it
 * bounds the shell's buffer to MUX_FRAME_MAX. */
#define MUX_DATA_MAX 8192

/* Largest datagram we send. v2fly's packet reader (reader.go) refuses a
 * UDP frame over its 2048-byte buffer and drops the whole connection, so
 * a larger datagram is dropped here instead. */
#define MUX_UDP_PAYLOAD_MAX 2048

/* Largest frame the decoder accepts: the shell's buffer must hold one. */
#define MUX_FRAME_MAX (2 + MUX_META_MAX + 2 + MUX_DATA_MAX)

/* Longest frame header an encoder writes before the data: MetaLen, the
 * metadata of a New (or an addressed Keep) to a 255-byte domain, DataLen. */
#define MUX_HEADER_MAX (2 + 2 + 1 + 1 + 1 + 2 + 1 + 1 + ADDR_DOMAIN_MAX + 2)

/* An End or KeepAlive frame without data. */
#define MUX_SHORT_FRAME_LEN 6

/* mux_decode's (and the feeds') "the frame has not fully arrived". */
#define MUX_NEED_MORE 0

/* Sub-flows a client opens on one connection, ever: v2ray's MaxConnection
 * (app/proxyman/outbound/handler.go). Then the connection is retired: it
 * takes no new sub-flow and is closed once idle. */
#define MUX_CLIENT_SUBS_TOTAL 128

/* Open sub-flows per client connection when the caller says 0: v2ray's
 * default "concurrency" (infra/conf MuxConfig). */
#define MUX_CONCURRENCY_DEFAULT 8

/* Open sub-flows a server takes on one connection. A v2ray or Xray client
 * never opens more than MUX_CLIENT_SUBS_TOTAL on one, so this refuses
 * nothing they send while bounding the table (and the upstream
 * connections one client connection can hold) to 128. */
#define MUX_SERVER_SUBS_MAX 128

typedef enum mux_event_kind {
	MUX_EV_NONE,      /* a frame with nothing for the shell: drop it (and send out) */
	MUX_EV_OPEN,      /* server: the client opened ev.id to ev.dest (network TCP or UDP);
	                   * ev.data is the first payload when ev.has_data */
	MUX_EV_DATA,      /* ev.data for ev.id; ev.dest, when set, is the datagram's address */
	MUX_EV_END,       /* the peer ended ev.id (ev.error: in error); the id is closed */
	MUX_EV_KEEPALIVE, /* the peer keeps the connection alive */
	MUX_EV_REFUSED,   /* server: a New over MUX_SERVER_SUBS_MAX; out holds the End
	                   * (error bit) to send, ev.reason says why */
} mux_event_kind;

/* What one frame means. mux_decode reports the frame itself (Keep with
 * data is DATA, Keep without is NONE, New is OPEN on both sides); the
 * feeds below apply the session's rules on top. */
typedef struct mux_event {
	mux_event_kind kind;
	uint16_t id;
	bool error;          /* END: the Option error bit */
	bool has_data;       /* OPEN, DATA: the frame carries a data part (maybe empty) */
	addr_dest dest;      /* OPEN: the sub-flow's destination; DATA: the datagram's
	                      * address (network UDP) if the frame has one, else unset */
	const uint8_t *data; /* borrowed: points into the fed input; valid while the shell
	                      * keeps the frame's bytes */
	size_t data_len;
	const char *reason;  /* errors and REFUSED: why, static text for a log line */
} mux_event;

/* ---- frame codec ---- */

/* Decodes the frame at the start of in[0, len), a stream. Returns the
 * frame's length (drop that many bytes once done with ev->data) with *ev
 * filled; MUX_NEED_MORE (0) when the frame has not fully arrived and what
 * has is valid; PROTO_ERR_TOO_BIG for metadata over MUX_META_MAX or data
 * over MUX_DATA_MAX; PROTO_ERR_MALFORMED for metadata under 4 bytes, an
 * unknown status, a New (or addressed Keep) shorter than 8 bytes, an
 * unknown network or address type, an empty or NUL-holding domain, or an
 * address running past the metadata. A length is judged as soon as its
 * two bytes are in, the metadata once all of it is (so every prefix of a
 * bad frame is NEED_MORE or the same error); the stream cannot be
 * resynchronised after one, so the shell ends it. *ev is set on every
 * call (kind NONE and reason set on an error). Consumes nothing or one
 * whole frame; the decoder keeps no state, so any split of the input
 * decodes the same. */
__attribute__((warn_unused_result)) ssize_t mux_decode(const uint8_t *in, size_t len,
                                                       mux_event *ev);

/* The encoders write whole frames into out[0, cap) and return their
 * length, or PROTO_ERR_TOO_BIG when cap is too small or the data is over
 * its bound, or PROTO_ERR_MALFORMED for an unset destination or an
 * invalid domain; out is unchanged on error. */

/* New for id to dest (dest->network says TCP or UDP). With data != NULL
 * the frame carries data[0, len) as the first payload: len at most
 * MUX_DATA_MAX for TCP, MUX_UDP_PAYLOAD_MAX for UDP. */
__attribute__((warn_unused_result)) ssize_t mux_encode_new(uint16_t id, const addr_dest *dest,
                                                           const uint8_t *data, size_t len,
                                                           uint8_t *out, size_t cap);

/* Keep frames carrying stream bytes data[0, len) for id: as many as fit
 * in cap, each with at most MUX_DATA_MAX bytes. Returns the bytes written
 * (0 when cap cannot hold a frame with one byte of data) with *used set to
 * the data bytes they carry; the caller sends the rest later. Never fails. */
size_t mux_encode_stream(uint16_t id, const uint8_t *data, size_t len, uint8_t *out, size_t cap,
                         size_t *used);

/* One Keep frame carrying the datagram data[0, len) (len at most
 * MUX_UDP_PAYLOAD_MAX) for id; with addr != NULL the frame names addr as
 * the datagram's address (Xray's form, which v2fly ignores). */
__attribute__((warn_unused_result)) ssize_t mux_encode_datagram(uint16_t id,
                                                                const addr_dest *addr,
                                                                const uint8_t *data, size_t len,
                                                                uint8_t *out, size_t cap);

/* End for id, with the error bit when error. MUX_SHORT_FRAME_LEN bytes. */
__attribute__((warn_unused_result)) ssize_t mux_encode_end(uint16_t id, bool error, uint8_t *out,
                                                           size_t cap);

/* KeepAlive (id 0, no data). MUX_SHORT_FRAME_LEN bytes. */
__attribute__((warn_unused_result)) ssize_t mux_encode_keepalive(uint8_t *out, size_t cap);

/* ---- client side ---- */

/* The sub-flows a client has open on one mux connection. Visible so the
 * shell can embed it; read it through the functions below. A zeroed
 * struct is a fresh connection with the default concurrency. */
typedef struct mux_client {
	uint32_t open[MUX_CLIENT_SUBS_TOTAL / 32]; /* bit id - 1: id is open */
	uint16_t last_id;                          /* ids 1..last_id were handed out */
	uint16_t n_open;
	uint16_t concurrency; /* open sub-flows at most; 0: MUX_CONCURRENCY_DEFAULT */
} mux_client;

/* Resets c for a new connection taking at most concurrency open
 * sub-flows (0: MUX_CONCURRENCY_DEFAULT; more than MUX_CLIENT_SUBS_TOTAL
 * is MUX_CLIENT_SUBS_TOTAL). */
void mux_client_init(mux_client *c, unsigned concurrency);

/* Opens a sub-flow to dest: takes the next id into *id and writes its New
 * frame (with the first payload data[0, len) when data != NULL, as
 * mux_encode_new) into out[0, cap). Returns the frame's length;
 * PROTO_ERR_STATE when the connection is full (open a new one); or
 * mux_encode_new's errors. On error no id is taken and c is unchanged. */
__attribute__((warn_unused_result)) ssize_t mux_client_open(mux_client *c, const addr_dest *dest,
                                                            const uint8_t *data, size_t len,
                                                            uint8_t *out, size_t cap,
                                                            uint16_t *id);

/* The client's side of id ended (error: in error): forgets id and writes
 * its End into out. Returns 0, or PROTO_ERR_STATE (out empty, c
 * unchanged) when id is not open. */
__attribute__((warn_unused_result)) int mux_client_end(mux_client *c, uint16_t id, bool error,
                                                       proto_out *out);

/* Reads one frame from the server, as mux_decode, and applies the
 * client's rules. out->len is set to 0 and *ev set on every call.
 *   DATA      for an open id (with its data, maybe empty);
 *   END       for an open id, which is then closed;
 *   KEEPALIVE;
 *   NONE      otherwise; for data on an id that is not open, out holds an
 *             End for it. A New from the server is dropped.
 * Returns the frame's length, MUX_NEED_MORE, or mux_decode's errors. */
__attribute__((warn_unused_result)) ssize_t mux_client_feed(mux_client *c, const uint8_t *in,
                                                            size_t len, mux_event *ev,
                                                            proto_out *out);

/* Whether id is open. */
bool mux_client_is_open(const mux_client *c, uint16_t id);

/* Whether mux_client_open would refuse: concurrency sub-flows are open,
 * or MUX_CLIENT_SUBS_TOTAL were opened on this connection. */
bool mux_client_full(const mux_client *c);

/* Whether no sub-flow is open. v2ray closes an idle connection on a 16 s
 * tick; the shell owns that timer. A retired connection (all ids used)
 * has nothing more to do once idle. */
bool mux_client_idle(const mux_client *c);

/* ---- server side ---- */

/* One open sub-flow. */
typedef struct mux_sub {
	uint16_t id;
	addr_network network;
} mux_sub;

/* The sub-flows a client opened on one mux connection. Visible so the
 * shell can embed it; read it through the functions below. A zeroed
 * struct is a fresh connection. */
typedef struct mux_server {
	mux_sub subs[MUX_SERVER_SUBS_MAX]; /* [0, n_open), in no order */
	uint16_t n_open;
} mux_server;

/* Resets s for a new connection. */
void mux_server_init(mux_server *s);

/* Reads one frame from the client, as mux_decode, and applies the
 * server's rules. out->len is set to 0 and *ev set on every call.
 *   OPEN      a New for an id not open: the id is now open; dial ev.dest
 *             and deliver the first payload (ev.has_data) to it;
 *   REFUSED   a New while MUX_SERVER_SUBS_MAX are open: send out (End
 *             with the error bit); the id stays closed;
 *   DATA      for an open id;
 *   END       for an open id, which is then closed: close its upstream;
 *   KEEPALIVE;
 *   NONE      otherwise; for data on an id that is not open, out holds an
 *             End for it (v2ray's answer).
 * Returns the frame's length; MUX_NEED_MORE; mux_decode's errors; or
 * PROTO_ERR_MALFORMED for a New on an id already open (v2ray's client
 * never reuses one). On an error ev->reason says why: close. */
__attribute__((warn_unused_result)) ssize_t mux_server_feed(mux_server *s, const uint8_t *in,
                                                            size_t len, mux_event *ev,
                                                            proto_out *out);

/* The upstream of id ended (error: in error): forgets id and writes its
 * End into out. Returns 0, or PROTO_ERR_STATE (out empty, s unchanged)
 * when id is not open. */
__attribute__((warn_unused_result)) int mux_server_end(mux_server *s, uint16_t id, bool error,
                                                       proto_out *out);

/* Whether id is open; with network != NULL, sets *network to its network. */
bool mux_server_is_open(const mux_server *s, uint16_t id, addr_network *network);

/* How many sub-flows are open. */
size_t mux_server_count(const mux_server *s);

#endif
