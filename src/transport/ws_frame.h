/* ws_frame.h - a sans-io RFC 6455 frame codec: headers read as the bytes pass and written in one go, payloads masked and unmasked a word at a time. */
#ifndef ETM_TRANSPORT_WS_FRAME_H
#define ETM_TRANSPORT_WS_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Opcodes, RFC 6455 section 5.2. */
enum {
	WS_OP_CONTINUATION = 0x0,
	WS_OP_TEXT = 0x1,
	WS_OP_BINARY = 0x2,
	WS_OP_CLOSE = 0x8,
	WS_OP_PING = 0x9,
	WS_OP_PONG = 0xa,
};

/* A header is at most 2 bytes, an 8-byte length and a 4-byte mask key. */
#define WS_FRAME_HEAD_MAX 14

/* Section 5.5: control frames carry at most 125 bytes. */
#define WS_CONTROL_MAX 125

/* What ws_frame_dec_head returns besides a count. */
enum {
	WS_FRAME_BAD = -1,     /* section 5 broken: RSV bits, a reserved opcode, a fragmented
	                          or long control frame, wrong masking, a continuation of
	                          nothing or a new message inside one (close with 1002) */
	WS_FRAME_TOO_BIG = -2, /* a data frame announced more than max (close with 1009) */
};

/* The receiving side. Zeroed, then masked and max set, it is at the first
 * byte of a frame. */
typedef struct ws_frame_dec {
	bool masked;   /* config: frames must be masked (a server's), else must not be */
	uint64_t max;  /* config: largest data frame payload */

	bool in_payload; /* the header is read: len, op, fin and key are the frame's */
	bool in_msg;     /* a data message has begun and its final frame not */
	bool fin;
	uint8_t op;
	uint8_t have;    /* header bytes gathered in head */
	uint8_t head[WS_FRAME_HEAD_MAX];
	uint8_t key[4];
	uint64_t len;    /* the payload's length */
	uint64_t done;   /* payload bytes passed */
} ws_frame_dec;

/* Reads header bytes from p[0, n): returns how many it took (all of them
 * while the header is incomplete, no payload byte), or a WS_FRAME_* error.
 * Once the header is whole, in_payload is set; a frame without payload is
 * then already complete (ws_frame_dec_done). Text frames are read as
 * binary ones: the caller carries bytes (ws.h). */
__attribute__((warn_unused_result)) ssize_t ws_frame_dec_head(ws_frame_dec *d, const uint8_t *p,
                                                             size_t n);

/* Passes up to n payload bytes from src into dst unmasked (dst may be
 * src: in place), at most what the frame has left; returns the count. */
size_t ws_frame_dec_payload(ws_frame_dec *d, uint8_t *dst, const uint8_t *src, size_t n);

/* Whether the frame's payload has all passed. */
static inline bool ws_frame_dec_done(const ws_frame_dec *d)
{
	return d->in_payload && d->done == d->len;
}

/* After a complete frame: the next byte starts a new one. */
void ws_frame_dec_next(ws_frame_dec *d);

/* The header's length for a payload of n bytes, masked or not. */
size_t ws_frame_head_len(uint64_t n, bool masked);

/* Writes the header of a frame: b0 (FIN, opcode), the length n in its
 * shortest form, and key when it is not NULL. Returns its length. */
size_t ws_frame_head(uint8_t out[WS_FRAME_HEAD_MAX], uint8_t b0, uint64_t n, const uint8_t *key);

/* dst[i] = src[i] XOR key[(off + i) % 4] for i < n (section 5.3), eight
 * bytes at a time; dst may be src. off is where src starts in the
 * payload, so a payload can be masked in pieces. */
void ws_frame_mask(uint8_t *dst, const uint8_t *src, size_t n, const uint8_t key[4], uint64_t off);

#endif
