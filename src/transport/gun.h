/* gun.h - the "gun" framing of a byte stream over gRPC: each piece one protobuf Hunk in one gRPC length-prefixed message; a streaming reader and the writer's header. */
#ifndef ETM_TRANSPORT_GUN_H
#define ETM_TRANSPORT_GUN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/layer.h"

/* Wire form (gRPC over HTTP/2, "Length-Prefixed-Message"; protobuf
 * encoding):
 *
 *   message   = flag(1: 0, not compressed) length(4, big-endian) body
 *   body      = { field }                      (a Hunk or a MultiHunk)
 *   field 1   = 0x0a varint(n) n data bytes    (bytes data = 1, repeated in
 *                                              a MultiHunk)
 *
 * The writer sends one field 1 per message. The reader passes the bytes of
 * every field 1 up in order, skips any other field by its wire type (0
 * varint, 1 fixed64, 2 length-delimited, 5 fixed32), and streams: nothing
 * of a message is buffered but a varint or the 5-byte prefix. */

/* Largest message the reader accepts: gRPC's default receive limit. */
#define GUN_MSG_MAX (4 * 1024 * 1024)

/* Largest header gun_header writes: the 5-byte prefix, the tag and a
 * varint of at most 4 bytes (a piece is below 2^28 bytes). */
#define GUN_HEADER_MAX 10

/* Errors gun_read returns; gun_error says what each means. */
enum {
	GUN_ERR_COMPRESSED = -1, /* flag 1: this side announced no compression */
	GUN_ERR_TOO_LARGE = -2,  /* a message over GUN_MSG_MAX */
	GUN_ERR_MALFORMED = -3,  /* a bad varint, wire type, or field past its message */
};

/* Text for a GUN_ERR_*: "grpc: ..." (asserted by tests/unit/test_gun.c). */
const char *gun_error(int err);

/* Writes the header of a message carrying len data bytes (len < 2^28) into
 * out; returns its length. The data follows it on the wire. */
size_t gun_header(uint8_t out[GUN_HEADER_MAX], size_t len);

typedef struct gun_reader {
	int state;
	uint8_t prefix[5];
	size_t have;       /* prefix bytes collected */
	uint64_t msg_left; /* body bytes of the current message not read */
	uint64_t field_left; /* bytes of the current field's payload not read */
	uint64_t varint;   /* a varint being read */
	unsigned shift;
	int wire_type;
	uint64_t field;
	int err;           /* the GUN_ERR_* a failed reader repeats */
} gun_reader;

/* A reader before the first message (a zeroed struct is one). */
void gun_reader_init(gun_reader *r);

/* Reads in[0, len): appends the data bytes it carries to out, as far as
 * out has room. Returns the bytes of in consumed (fewer than len when out
 * filled up), or a GUN_ERR_*; after an error the reader stays failed. */
ssize_t gun_read(gun_reader *r, const uint8_t *in, size_t len, layer_buf *out);

/* Whether the reader stands between two messages (a stream that ends
 * elsewhere was cut in the middle of one). */
int gun_reader_at_boundary(const gun_reader *r);

#endif
