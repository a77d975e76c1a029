/* ws_frame.c - the frame-header walk: RFC 6455 section 5.2's layout, followed a byte at a time. */
#include "transport/ws_frame.h"

enum { WALK_OPCODE, WALK_LEN, WALK_EXT, WALK_MASK, WALK_PAYLOAD };

enum { OP_CONTINUATION = 0x0, OP_TEXT = 0x1, OP_BINARY = 0x2 };

/* The header's length is complete: a data frame over max is flagged now,
 * before any of its payload arrives. */
static void length_known(ws_frame_walk *w, uint64_t max)
{
	w->need = w->masked ? 4 : 0;
	if (w->op <= OP_BINARY && w->left > max)
		w->too_big = true;
}

void ws_frame_walk_bytes(ws_frame_walk *w, uint8_t *p, size_t n, uint64_t max)
{
	size_t i = 0;
	while (i < n) {
		switch (w->state) {
		case WALK_OPCODE:
			w->op = p[i] & 0x0f;
			if (w->op == OP_TEXT)
				p[i] = (uint8_t)((p[i] & 0xf0) | OP_BINARY);
			i++;
			w->state = WALK_LEN;
			break;
		case WALK_LEN: {
			uint8_t len = p[i] & 0x7f;
			w->masked = p[i] & 0x80;
			i++;
			w->left = len < 126 ? len : 0;
			w->need = len == 126 ? 2 : len == 127 ? 8 : 0;
			w->state = w->need ? WALK_EXT : WALK_MASK;
			if (!w->need)
				length_known(w, max);
			break;
		}
		case WALK_EXT:
			w->left = w->left << 8 | p[i++];
			if (--w->need == 0) {
				w->state = WALK_MASK;
				length_known(w, max);
			}
			break;
		case WALK_MASK:
			if (w->need) {
				i++;
				w->need--;
			}
			if (w->need == 0)
				w->state = w->left ? WALK_PAYLOAD : WALK_OPCODE;
			break;
		case WALK_PAYLOAD: {
			uint64_t k = n - i < w->left ? n - i : w->left;
			i += (size_t)k;
			w->left -= k;
			if (w->left == 0)
				w->state = WALK_OPCODE;
			break;
		}
		}
	}
	/* a frame without payload ends right after its header */
	if (w->state == WALK_MASK && w->need == 0)
		w->state = w->left ? WALK_PAYLOAD : WALK_OPCODE;
}
