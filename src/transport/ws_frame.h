/* ws_frame.h - a walk over RFC 6455 frame headers as the bytes pass: text frames handed on as binary ones, a data frame's announced length checked before its payload. */
#ifndef ETM_TRANSPORT_WS_FRAME_H
#define ETM_TRANSPORT_WS_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Where the walk is in the frame the next byte belongs to. A zeroed walk
 * is at the first byte of a frame. */
typedef struct ws_frame_walk {
	uint8_t state; /* private */
	uint8_t need;  /* length or mask bytes still to pass */
	uint8_t op;    /* the frame's opcode */
	bool masked;
	bool too_big;  /* a data frame announced more than the walk's max */
	uint64_t left; /* the frame's length, then its payload still to pass */
} ws_frame_walk;

/* Walks p[0, n), the next bytes of the stream, across calls: byte by byte
 * over the headers, in one step over each payload. The header of a text
 * frame is rewritten to the binary opcode in place (section 5.2: 0x1
 * becomes 0x2; a continuation takes its message's type). Sets too_big once
 * a data frame's header announces more than max payload bytes. */
void ws_frame_walk_bytes(ws_frame_walk *w, uint8_t *p, size_t n, uint64_t max);

#endif
