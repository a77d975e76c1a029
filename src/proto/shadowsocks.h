/* shadowsocks.h - Shadowsocks AEAD (SIP004 with SIP007's subkeys): methods, key derivation, the chunk and packet codecs and the client layer. */
#ifndef ETM_PROTO_SHADOWSOCKS_H
#define ETM_PROTO_SHADOWSOCKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <openssl/evp.h>

#include "base/addr.h"
#include "base/layer.h"
#include "proto/proto.h"

/* Wire format (shadowsocks.org/doc/aead.html, SIP004 amended by SIP007):
 *
 *   master key  EVP_BytesToKey(MD5, no salt, one round) of the password, to
 *               the method's key length
 *   subkey      HKDF-SHA1(master key, salt, info "ss-subkey"), key length
 *   salt        random, as long as the key; each direction sends its own
 *   nonce       12 bytes, a little-endian counter from 0, incremented after
 *               every seal and every open
 *   TCP         salt, then chunks: Seal(length)(2, BE, at most 0x3FFF) and
 *               its tag, Seal(payload) and its tag. The client's payload
 *               stream starts with the target as ATYP ADDR PORT (SOCKS5,
 *               socks_addr.h).
 *   UDP         each packet: salt, Seal(ATYP ADDR PORT payload), tag; a
 *               fresh salt a packet, nonce zero.
 */

typedef enum ss_method {
	SS_METHOD_AES_128_GCM,
	SS_METHOD_AES_256_GCM,
	SS_METHOD_CHACHA20_POLY1305, /* "chacha20-ietf-poly1305" */
	SS_METHOD_COUNT_,
} ss_method;

#define SS_KEY_MAX 32  /* the longest key, and so the longest salt */
#define SS_TAG_LEN 16
#define SS_NONCE_LEN 12
#define SS_SUBKEY_INFO "ss-subkey"

/* A chunk's payload at most: the length's two high bits are reserved and
 * must be zero (SIP004). */
#define SS_CHUNK_PAYLOAD_MAX 0x3FFF
/* A sealed length: two bytes and their tag. */
#define SS_LEN_BLOCK (2 + SS_TAG_LEN)
/* The most one chunk takes on the wire. */
#define SS_CHUNK_MAX (SS_LEN_BLOCK + SS_CHUNK_PAYLOAD_MAX + SS_TAG_LEN)
/* The longest target address: ATYP, a 255-byte domain with its length, port. */
#define SS_ADDR_MAX (1 + 1 + 255 + 2)

/* A UDP packet at most: what one IPv4/IPv6 datagram can carry. */
#define SS_PACKET_MAX 65507

/* The method called name ("aes-128-gcm", "aes-256-gcm",
 * "chacha20-ietf-poly1305"): 0 with *m set, or -1. */
__attribute__((warn_unused_result)) int ss_method_parse(const char *name, ss_method *m);
/* Its name, "?" for none. */
const char *ss_method_name(ss_method m);
/* Its key length, which is also its salt length: 16 or 32. */
size_t ss_key_len(ss_method m);

/* The master key of password[0, len) for m, ss_key_len(m) bytes into out.
 * 0, or -1 (OpenSSL failed). */
__attribute__((warn_unused_result)) int ss_master_key(ss_method m, const char *password,
                                                      size_t len, uint8_t out[SS_KEY_MAX]);

/* The session subkey of master key key and salt (both ss_key_len(m)
 * bytes), into out. 0, or -1 (OpenSSL failed). */
__attribute__((warn_unused_result)) int ss_subkey(ss_method m, const uint8_t *key,
                                                  const uint8_t *salt, uint8_t out[SS_KEY_MAX]);

/* One direction's AEAD: its subkey and its nonce counter. A zeroed struct
 * frees safely. */
typedef struct ss_aead {
	EVP_CIPHER_CTX *ctx; /* owned: keyed once, the nonce set per operation */
	uint8_t nonce[SS_NONCE_LEN];
	bool seal;
} ss_aead;

/* Keys a with subkey (ss_key_len(m) bytes), nonce zero. 0, or -1. */
__attribute__((warn_unused_result)) int ss_aead_init(ss_aead *a, ss_method m,
                                                     const uint8_t *subkey, bool seal);
void ss_aead_free(ss_aead *a);

/* Seals in[0, len) into out (len + SS_TAG_LEN bytes; out may be in) and
 * steps the nonce. 0, or -1 (OpenSSL failed). */
__attribute__((warn_unused_result)) int ss_aead_seal(ss_aead *a, const uint8_t *in, size_t len,
                                                     uint8_t *out);
/* Opens in[0, len), which ends in the tag, into out (len - SS_TAG_LEN
 * bytes; out may be in) and steps the nonce. 0, or -1 (a tag that does
 * not match: the nonce stays). */
__attribute__((warn_unused_result)) int ss_aead_open(ss_aead *a, const uint8_t *in, size_t len,
                                                     uint8_t *out);

/* ---- TCP chunks ---- */

/* Seals in[0, len) (1 <= len <= SS_CHUNK_PAYLOAD_MAX) as one chunk into
 * out (SS_LEN_BLOCK + len + SS_TAG_LEN bytes). Returns its length, or
 * PROTO_ERR_TOO_BIG (len out of bounds) or PROTO_ERR_STATE (OpenSSL). */
__attribute__((warn_unused_result)) ssize_t ss_chunk_seal(ss_aead *a, const uint8_t *in,
                                                          size_t len, uint8_t *out);

/* Opens a chunk's sealed length in[0, SS_LEN_BLOCK). Returns the payload's
 * length (1 to SS_CHUNK_PAYLOAD_MAX; the sealed payload and its tag,
 * len + SS_TAG_LEN bytes, follow), or PROTO_ERR_MALFORMED (a tag that does
 * not match) or PROTO_ERR_TOO_BIG (0, or over SS_CHUNK_PAYLOAD_MAX: the
 * reserved bits set). */
__attribute__((warn_unused_result)) ssize_t ss_chunk_open_len(ss_aead *a, const uint8_t *in);

/* Opens the sealed payload buf[0, len + SS_TAG_LEN) in place: 0, or
 * PROTO_ERR_MALFORMED (a tag that does not match). */
__attribute__((warn_unused_result)) int ss_chunk_open_payload(ss_aead *a, uint8_t *buf,
                                                              size_t len);

/* ---- target addresses ---- */

/* The span of the ATYP ADDR PORT block at p[0, len): its length, 0 when
 * it has not all come, or PROTO_ERR_MALFORMED (an unknown ATYP, an empty
 * domain). socks_addr_get then reads it. */
__attribute__((warn_unused_result)) ssize_t ss_addr_span(const uint8_t *p, size_t len);

/* ---- UDP packets ---- */

/* Seals one packet: salt (ss_key_len(m) bytes, fresh for each packet) ||
 * Seal(in[0, len)) || tag, with master key key, into out[0, cap). in is
 * the target address and the payload. Returns the packet's length, or
 * PROTO_ERR_TOO_BIG (cap) or PROTO_ERR_STATE (OpenSSL). */
__attribute__((warn_unused_result)) ssize_t ss_packet_seal(ss_method m, const uint8_t *key,
                                                           const uint8_t *salt,
                                                           const uint8_t *in, size_t len,
                                                           uint8_t *out, size_t cap);

/* Opens packet in[0, len) with master key key into out[0, cap) (cap >=
 * len). Returns the plaintext's length (address and payload), or
 * PROTO_ERR_MALFORMED (shorter than a salt and a tag, or a tag that does
 * not match) or PROTO_ERR_TOO_BIG (cap). */
__attribute__((warn_unused_result)) ssize_t ss_packet_open(ss_method m, const uint8_t *key,
                                                           const uint8_t *in, size_t len,
                                                           uint8_t *out, size_t cap);

/* ---- client layer ---- */

/* A client layer that opens dest through a Shadowsocks server whose master
 * key is key (ss_key_len(m) bytes), sending salt (ss_key_len(m) random
 * bytes, from the caller: the core reads no random source). start()
 * writes the salt and a first chunk holding the target's address (so a
 * server-first protocol works: the server learns the target before the
 * client speaks) and the layer is ready at once; app bytes go down as
 * chunks of at most SS_CHUNK_PAYLOAD_MAX. from_below reads the server's
 * salt, then opens chunks and passes their payload up. The stream has no
 * end of its own: shutdown is the socket's.
 *
 * Returns NULL when out of memory, OpenSSL fails, or dest is unset or a
 * domain socks_addr_wire_len refuses. Name "shadowsocks"; errors
 * LAYER_ERR_PROTO with error() "shadowsocks: bad chunk" (a tag that does
 * not match: the wrong password, bytes changed) or "shadowsocks: chunk
 * length out of bounds". */
layer *ss_client_new(ss_method m, const uint8_t *key, const addr_dest *dest,
                     const uint8_t *salt);

#endif
