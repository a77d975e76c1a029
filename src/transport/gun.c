/* gun.c - the gun framing: a streaming reader of Hunk messages and the writer's header. */
#include "transport/gun.h"

static const char *const msgs[] = {
	[-GUN_ERR_COMPRESSED] = "grpc: a compressed message (none was announced)",
	[-GUN_ERR_TOO_LARGE] = "grpc: a message over 4194304 bytes",
	[-GUN_ERR_MALFORMED] = "grpc: a malformed Hunk message",
};

const char *gun_error(int err)
{
	if (err >= 0 || -err >= (int)(sizeof msgs / sizeof msgs[0]) || !msgs[-err])
		return "grpc: error";
	return msgs[-err];
}

static size_t put_varint(uint8_t *out, uint64_t v)
{
	size_t n = 0;
	while (v >= 0x80) {
		out[n++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	out[n++] = (uint8_t)v;
	return n;
}

size_t gun_header(uint8_t out[GUN_HEADER_MAX], size_t len)
{
	uint8_t field[5];
	field[0] = 0x0a; /* field 1, wire type 2 */
	size_t f = 1 + put_varint(field + 1, len);
	uint64_t body = f + len;
	out[0] = 0;
	out[1] = (uint8_t)(body >> 24);
	out[2] = (uint8_t)(body >> 16);
	out[3] = (uint8_t)(body >> 8);
	out[4] = (uint8_t)body;
	for (size_t i = 0; i < f; i++)
		out[5 + i] = field[i];
	return 5 + f;
}

/* Where the reader stands. */
enum {
	S_PREFIX,   /* collecting the 5-byte prefix */
	S_KEY,      /* a field's key (a varint) */
	S_LENGTH,   /* a length-delimited field's length */
	S_VARINT,   /* skipping a varint field's value */
	S_PAYLOAD,  /* a field's payload: passed up (field 1) or skipped */
	S_FAILED,
};

void gun_reader_init(gun_reader *r) { *r = (gun_reader){.state = S_PREFIX}; }

int gun_reader_at_boundary(const gun_reader *r) { return r->state == S_PREFIX && r->have == 0; }

static ssize_t failed(gun_reader *r, int err)
{
	r->state = S_FAILED;
	r->err = err;
	return err;
}

/* One byte of a varint. Returns 1 when it is complete, 0 when more
 * follow, -1 when it runs past 10 bytes. */
static int varint_byte(gun_reader *r, uint8_t b)
{
	if (r->shift >= 64)
		return -1;
	r->varint |= (uint64_t)(b & 0x7f) << r->shift;
	r->shift += 7;
	return (b & 0x80) ? 0 : 1;
}

/* The message or the field is over: what comes next. */
static void next(gun_reader *r)
{
	r->varint = 0;
	r->shift = 0;
	r->state = r->msg_left ? S_KEY : S_PREFIX;
}

/* After a field's key: its value by wire type. */
static int start_value(gun_reader *r)
{
	r->field = r->varint >> 3;
	r->wire_type = (int)(r->varint & 7);
	r->varint = 0;
	r->shift = 0;
	switch (r->wire_type) {
	case 0:
		r->state = S_VARINT;
		return 0;
	case 1:
	case 5:
		r->field_left = r->wire_type == 1 ? 8 : 4;
		r->field = 0; /* skipped */
		break;
	case 2:
		r->state = S_LENGTH;
		return 0;
	default:
		return -1;
	}
	if (r->field_left > r->msg_left)
		return -1;
	r->state = S_PAYLOAD;
	return 0;
}

ssize_t gun_read(gun_reader *r, const uint8_t *in, size_t len, layer_buf *out)
{
	if (r->state == S_FAILED)
		return r->err;
	size_t i = 0;
	while (i < len) {
		switch (r->state) {
		case S_PREFIX:
			r->prefix[r->have++] = in[i++];
			if (r->have < 5)
				break;
			r->have = 0;
			if (r->prefix[0] != 0)
				return failed(r, GUN_ERR_COMPRESSED);
			r->msg_left = (uint64_t)r->prefix[1] << 24 | (uint64_t)r->prefix[2] << 16 |
			              (uint64_t)r->prefix[3] << 8 | r->prefix[4];
			if (r->msg_left > GUN_MSG_MAX)
				return failed(r, GUN_ERR_TOO_LARGE);
			next(r);
			break;
		case S_KEY:
		case S_LENGTH:
		case S_VARINT: {
			r->msg_left--;
			int v = varint_byte(r, in[i++]);
			if (v < 0 || (v == 0 && r->msg_left == 0))
				return failed(r, GUN_ERR_MALFORMED);
			if (v == 0)
				break;
			if (r->state == S_VARINT) {
				next(r);
			} else if (r->state == S_KEY) {
				if (start_value(r) < 0 ||
				    ((r->state == S_LENGTH || r->state == S_VARINT) && r->msg_left == 0))
					return failed(r, GUN_ERR_MALFORMED);
				if (r->state == S_PAYLOAD && r->field_left == 0)
					next(r);
			} else {
				if (r->varint > r->msg_left)
					return failed(r, GUN_ERR_MALFORMED);
				r->field_left = r->varint;
				r->state = S_PAYLOAD;
				if (r->field_left == 0)
					next(r);
			}
			break;
		}
		case S_PAYLOAD: {
			size_t n = len - i;
			if (n > r->field_left)
				n = (size_t)r->field_left;
			if (r->field == 1 && r->wire_type == 2) {
				n = layer_buf_put(out, in + i, n);
				if (n == 0)
					return (ssize_t)i; /* out is full */
			}
			i += n;
			r->field_left -= n;
			r->msg_left -= n;
			if (r->field_left == 0)
				next(r);
			break;
		}
		}
	}
	return (ssize_t)i;
}
