/* sniff.h - finds the name a client is going to in its first bytes: TLS SNI or HTTP/1.x Host. */
#ifndef ETM_PROTO_SNIFF_H
#define ETM_PROTO_SNIFF_H

#include <stddef.h>
#include <stdint.h>

/* How much of the stream the shell may hold back to sniff. A ClientHello
 * with a post-quantum key share (X25519MLKEM768 alone is 1216 bytes) and a
 * GREASE ECH extension is about 2 KiB and already spans two TCP segments; a
 * second hybrid share or a resumption ticket pushes it past 4 KiB. 8 KiB
 * leaves room for those, is the longest request line or header field
 * nginx takes by default (large_client_header_buffers 4 8k), and fits in one
 * 16 KiB pool buffer.
 * Bytes past this bound are never looked at, so the answer for a longer
 * prefix is the answer for its first SNIFF_MAX_BYTES. */
#define SNIFF_MAX_BYTES 8192

/* Longest name handed out: 253 characters is the text form of the 255
 * octets a DNS name may take on the wire (RFC 1035 2.3.4), without the
 * trailing dot. A name buffer of SNIFF_NAME_MAX + 1 bytes always suffices. */
#define SNIFF_NAME_MAX 253

typedef enum sniff_result {
	SNIFF_NEED_MORE, /* a prefix of something that could still yield a name */
	SNIFF_FOUND,     /* name and *proto written */
	SNIFF_NONE,      /* no name will come from this stream: stop sniffing */
} sniff_result;

typedef enum sniff_proto {
	SNIFF_PROTO_NONE,
	SNIFF_PROTO_TLS,  /* server_name of a ClientHello (RFC 6066 section 3) */
	SNIFF_PROTO_HTTP, /* authority of an HTTP/1.x request (RFC 9112 3.2) */
} sniff_proto;

/* Looks at data[0, len), everything the client has sent so far; the shell
 * offers the whole prefix again each time it grows. A pure function: no
 * state between calls, no allocation, nothing read at or past
 * min(len, SNIFF_MAX_BYTES). The first byte decides: 0x16 is a TLS
 * handshake record, an upper-case letter starts an HTTP method, anything
 * else is SNIFF_NONE at once.
 *
 * Returns
 *   SNIFF_FOUND: the complete ClientHello, or the complete request head up
 *     to its blank line, arrived and names a host. name[0, name_size) gets
 *     it NUL-terminated: lower-case ASCII, no trailing dot, no port, at most
 *     SNIFF_NAME_MAX bytes, labels of 1-63 letters, digits, '-' (not first
 *     or last) and '_'. *proto says where it came from.
 *   SNIFF_NONE: not TLS or HTTP/1.x, malformed, no name in it, a name that
 *     is not a host name (an IP literal included: RFC 6066 section 3 forbids
 *     them in SNI, and they tell a domain rule nothing), two names where one
 *     is allowed, a name that does not fit name_size, or no answer within
 *     SNIFF_MAX_BYTES.
 *   SNIFF_NEED_MORE: feed a longer prefix (len is below SNIFF_MAX_BYTES).
 * name and *proto are left unchanged unless SNIFF_FOUND. Once a prefix gets
 * SNIFF_FOUND or SNIFF_NONE, every longer prefix gets the same answer. */
__attribute__((warn_unused_result)) sniff_result sniff_name(const uint8_t *data, size_t len,
                                                            char *name, size_t name_size,
                                                            sniff_proto *proto);

#endif
