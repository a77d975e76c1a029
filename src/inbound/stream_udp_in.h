/* stream_udp_in.h - UDP framed in the client's stream (Trojan, VLESS), carried on by a datagram link. */
#ifndef ETM_INBOUND_STREAM_UDP_IN_H
#define ETM_INBOUND_STREAM_UDP_IN_H

#include "inbound/server_ops.h"

/* How one protocol frames a datagram in the stream. */
typedef struct stream_udp_codec {
	/* Reads the frame at the start of in[0, len): returns its whole length
	 * with the payload at in + *off, *plen bytes, and *to set where frames
	 * name their destination (left as is where they do not); 0 when the
	 * frame is not all there yet; negative for a malformed frame (the
	 * stream cannot be resynchronised: it ends). */
	ssize_t (*decode)(const uint8_t *in, size_t len, addr_dest *to, size_t *off, size_t *plen);
	/* Writes the header of a len-byte datagram from `from` into
	 * hdr[0, cap): returns its length, or negative (the datagram is
	 * dropped). */
	ssize_t (*encode)(const addr_dest *from, size_t len, uint8_t *hdr, size_t cap);
} stream_udp_codec;

/* One association, inside its row's state; a zeroed one is not opened. */
typedef struct stream_udp_in {
	in_conn *ic;                   /* borrowed: the connection it lives in */
	const stream_udp_codec *codec; /* borrowed, static */
	dgram_link *link;              /* owned; NULL: not opened */
} stream_udp_in;

/* Opens u for the UDP request ev on ic: the datagram link (every datagram
 * routed on its own), then the client's stream stays driven and its bytes
 * go to stream_udp_in_feed. Returns 0, or -1 with the end logged and the
 * connection closing. */
__attribute__((warn_unused_result)) int stream_udp_in_start(stream_udp_in *u, in_conn *ic,
                                                            const proto_event *ev,
                                                            const stream_udp_codec *codec);

/* The client's frames in in[0, len), as a row's feed: sends every whole
 * one and returns the bytes they took (ev NONE), or INBOUND_FEED_GONE
 * after a malformed frame (logged, the connection closing). */
__attribute__((warn_unused_result)) ssize_t stream_udp_in_feed(stream_udp_in *u,
                                                               const uint8_t *in, size_t len,
                                                               proto_event *ev);

/* Closes the link, if open. */
void stream_udp_in_stop(stream_udp_in *u);

#endif
