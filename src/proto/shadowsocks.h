/* shadowsocks.h - Shadowsocks AEAD (SIP004 with SIP007's subkeys) and Shadowsocks 2022 (SIP022, TCP; its UDP is shadowsocks2022_udp.h): methods, key derivation, the chunk and packet codecs and the client layer. */
#ifndef ETM_PROTO_SHADOWSOCKS_H
#define ETM_PROTO_SHADOWSOCKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "crypto/ossl.h"

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
 *
 * Shadowsocks 2022 (SIP022, Shadowsocks-NET/shadowsocks-specs
 * 2022-1-shadowsocks-2022-edition.md) changes, for TCP:
 *
 *   key         the PSK itself: settings.password is its base64, exactly
 *               the method's key length (2.1)
 *   subkey      BLAKE3 derive_key("shadowsocks 2022 session subkey",
 *               PSK || salt), key length (2.2)
 *   chunks      a payload of up to 0xFFFF bytes (3.1.2)
 *   request     salt, Seal(type 0, u64be timestamp, u16be length of the
 *               next chunk), Seal(ATYP ADDR PORT, u16be padding length,
 *               padding, initial payload), then chunks (3.1.3)
 *   response    salt, Seal(type 1, timestamp, the request's salt, u16be
 *               length), Seal(payload), then chunks
 *   timestamps  more than SS2022_TIME_WINDOW seconds off is a replay
 *
 * and its extensible identity headers (SIP022-2,
 * 2022-2-shadowsocks-2022-extensible-identity-headers.md, TCP), which put
 * several users behind one port: between the salt and the first chunk,
 * one 16-byte header per identity PSK (iPSK) the client was given,
 *
 *   identity_subkey  BLAKE3 derive_key("shadowsocks 2022 identity subkey",
 *                    iPSK || salt), key length
 *   header           AES-ECB(identity_subkey, BLAKE3 hash(next PSK)[0, 16])
 *
 * where the next PSK is the next iPSK, or the user's PSK (uPSK) for the
 * last; the session subkey is the uPSK's. The response carries none.
 */

typedef enum ss_method {
	SS_METHOD_AES_128_GCM,
	SS_METHOD_AES_256_GCM,
	SS_METHOD_CHACHA20_POLY1305, /* "chacha20-ietf-poly1305" */
	SS_METHOD_2022_AES_128_GCM,  /* "2022-blake3-aes-128-gcm" */
	SS_METHOD_2022_AES_256_GCM,  /* "2022-blake3-aes-256-gcm" */
	/* "2022-blake3-chacha20-poly1305": for TCP "AES-GCM is simply replaced
	 * by ChaCha-Poly1305" (SIP022 4); its UDP is XChaCha20-Poly1305 under
	 * the PSK (4.1, shadowsocks2022_udp.h) */
	SS_METHOD_2022_CHACHA20_POLY1305,
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

/* SIP022 3.1.2: "A payload chunk can have up to 0xFFFF (65535) bytes". */
#define SS2022_CHUNK_PAYLOAD_MAX 0xFFFF
/* The most a chunk's payload and tag take under any method. */
#define SS_CHUNK_BUF_MAX (SS2022_CHUNK_PAYLOAD_MAX + SS_TAG_LEN)
/* SIP022 3.1.3: "Messages with over 30 seconds of time difference MUST be
 * treated as replay." */
#define SS2022_TIME_WINDOW 30
/* SIP022 3.1.3: MaxPaddingLength in the request's variable header. */
#define SS2022_PADDING_MAX 900
/* The request's fixed header: type, timestamp, length; sealed with a tag. */
#define SS2022_REQ_FIXED_LEN (1 + 8 + 2)
#define SS2022_REQ_FIXED_SEALED (SS2022_REQ_FIXED_LEN + SS_TAG_LEN)
/* The response's fixed header: type, timestamp, the request's salt
 * (slen bytes), length; sealed with a tag. */
#define SS2022_RESP_FIXED_LEN(slen) (1 + 8 + (slen) + 2)
#define SS2022_RESP_FIXED_SEALED_MAX (SS2022_RESP_FIXED_LEN(SS_KEY_MAX) + SS_TAG_LEN)
/* The request's sealed headers at most: the fixed one, then the address,
 * the padding's length, the padding and a tag. */
#define SS2022_REQ_HEADERS_MAX                                                                  \
	(SS2022_REQ_FIXED_SEALED + SS_ADDR_MAX + 2 + SS2022_PADDING_MAX + SS_TAG_LEN)

/* SIP022-2: one identity header, one AES block. */
#define SS2022_IDENTITY_LEN 16
/* Identity PSKs a client sends headers for at most: one per relay layer
 * and the server's; four layers is more than any deployment we know. */
#define SS2022_IDENTITY_MAX 4

/* The identity PSKs a client's request goes through, in order (the
 * first is the outermost relay's, the last the server's). A zeroed struct
 * is none: a plain 2022 request. */
typedef struct ss_identity {
	size_t n;
	uint8_t ipsk[SS2022_IDENTITY_MAX][SS_KEY_MAX];
} ss_identity;

/* A UDP packet at most: what one IPv4/IPv6 datagram can carry. */
#define SS_PACKET_MAX 65507

/* The method called name ("aes-128-gcm", "aes-256-gcm",
 * "chacha20-ietf-poly1305", "2022-blake3-aes-128-gcm",
 * "2022-blake3-aes-256-gcm", "2022-blake3-chacha20-poly1305"): 0 with *m
 * set, or -1. */
__attribute__((warn_unused_result)) int ss_method_parse(const char *name, ss_method *m);
/* Its name, "?" for none. */
const char *ss_method_name(ss_method m);
/* Its key length, which is also its salt length: 16 or 32. */
size_t ss_key_len(ss_method m);
/* Whether m is a Shadowsocks 2022 method. */
bool ss_method_is_2022(ss_method m);
/* A chunk's payload at most under m: SS_CHUNK_PAYLOAD_MAX, or
 * SS2022_CHUNK_PAYLOAD_MAX for 2022; 0 for none. */
size_t ss_chunk_max(ss_method m);

/* The master key of password[0, len) for m, ss_key_len(m) bytes into out.
 * For a 2022 method the password is the PSK's base64 (padded, RFC 4648 4,
 * as `openssl rand -base64 16` prints it) and must decode to exactly
 * ss_key_len(m) bytes. 0, or -1 (OpenSSL failed; for 2022: not base64, or
 * another length). */
__attribute__((warn_unused_result)) int ss_master_key(ss_method m, const char *password,
                                                      size_t len, uint8_t out[SS_KEY_MAX]);

/* What ss_client_keys returns besides 0. */
enum {
	SS_KEYS_ERR_PSK = -1,      /* a part is not base64 of ss_key_len(m) bytes */
	SS_KEYS_ERR_METHOD = -2,   /* identity PSKs with a method that is not AES */
	SS_KEYS_ERR_TOO_MANY = -3, /* over SS2022_IDENTITY_MAX identity PSKs */
};

/* A client's password: for AEAD-2017 and a plain 2022 one as
 * ss_master_key; for 2022 also "iPSK:...:uPSK" (SIP022-2's form, each part
 * base64), the identity PSKs into *id and the user's PSK into key. SIP022-2
 * encrypts identity headers "using an AES block cipher": identities with
 * 2022-blake3-chacha20-poly1305 are refused. 0 (id->n 0 for no
 * identities), or an SS_KEYS_ERR_*. */
__attribute__((warn_unused_result)) int ss_client_keys(ss_method m, const char *password,
                                                       size_t len, uint8_t key[SS_KEY_MAX],
                                                       ss_identity *id);

/* Whether m can carry identity headers: the 2022 AES methods. */
bool ss_method_has_identity(ss_method m);

/* The session subkey of master key key and salt (both ss_key_len(m)
 * bytes), into out: HKDF-SHA1, or BLAKE3 derive_key for 2022. 0, or -1
 * (OpenSSL failed). */
__attribute__((warn_unused_result)) int ss_subkey(ss_method m, const uint8_t *key,
                                                  const uint8_t *salt, uint8_t out[SS_KEY_MAX]);

/* One direction's AEAD: its subkey and its nonce counter. A zeroed struct
 * frees safely. */
typedef struct ss_aead {
	EVP_CIPHER_CTX *ctx; /* owned: keyed once, the nonce set per operation */
	uint8_t nonce[SS_NONCE_LEN];
	bool seal;
	size_t chunk_max; /* ss_chunk_max of the method: chunks' bound */
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

/* Seals in[0, len) (1 <= len <= a->chunk_max) as one chunk into
 * out (SS_LEN_BLOCK + len + SS_TAG_LEN bytes). Returns its length, or
 * PROTO_ERR_TOO_BIG (len out of bounds) or PROTO_ERR_STATE (OpenSSL). */
__attribute__((warn_unused_result)) ssize_t ss_chunk_seal(ss_aead *a, const uint8_t *in,
                                                          size_t len, uint8_t *out);

/* Opens a chunk's sealed length in[0, SS_LEN_BLOCK). Returns the payload's
 * length (1 to a->chunk_max; the sealed payload and its tag,
 * len + SS_TAG_LEN bytes, follow), or PROTO_ERR_MALFORMED (a tag that does
 * not match) or PROTO_ERR_TOO_BIG (0, or over a->chunk_max: for AEAD-2017
 * the reserved bits set). */
__attribute__((warn_unused_result)) ssize_t ss_chunk_open_len(ss_aead *a, const uint8_t *in);

/* Opens the sealed payload buf[0, len + SS_TAG_LEN) in place: 0, or
 * PROTO_ERR_MALFORMED (a tag that does not match). */
__attribute__((warn_unused_result)) int ss_chunk_open_payload(ss_aead *a, uint8_t *buf,
                                                              size_t len);

/* One direction's chunks being opened, as far as the bytes have come. A
 * zeroed one with rbuf set starts at a length. */
typedef struct ss_reader {
	uint8_t len_block[SS_LEN_BLOCK];
	size_t len_fill;
	size_t chunk_len; /* 0: reading a length */
	uint8_t *rbuf;    /* borrowed, ss_chunk_max + SS_TAG_LEN bytes: the owner frees it */
	size_t rfill;
	size_t out_off, out_len; /* rbuf[out_off, out_len) still goes out */
} ss_reader;

/* Opens the chunks of in[0, len) with a and gives their payloads to out;
 * what does not fit waits in r->rbuf, and no more is read until it is out
 * (len 0 just gives it). Returns the bytes of in consumed, or
 * PROTO_ERR_TOO_BIG (a length out of bounds) or PROTO_ERR_MALFORMED (a
 * tag that does not match). */
__attribute__((warn_unused_result)) ssize_t ss_reader_feed(ss_reader *r, ss_aead *a,
                                                           const uint8_t *in, size_t len,
                                                           layer_buf *out);

/* ---- Shadowsocks 2022 headers (shadowsocks2022.c) ---- */

/* What the 2022 header codecs return besides a length. */
enum {
	SS2022_ERR_TAG = PROTO_ERR_MALFORMED, /* a tag that does not match */
	SS2022_ERR_LENGTH = PROTO_ERR_TOO_BIG, /* a length of 0 */
	SS2022_ERR_TYPE = -10,                 /* not the stream type expected */
	SS2022_ERR_TIME = -11,                 /* over SS2022_TIME_WINDOW off now */
	SS2022_ERR_SALT = -12,                 /* a response to another request */
};

/* Whether the timestamp ts (unix seconds) is within SS2022_TIME_WINDOW of
 * now, either way (TCP's headers and UDP's, SIP022 3.1.3 and 3.2.3). */
bool ss2022_time_ok(uint64_t ts, int64_t now);

/* Seals the request's two headers with a (nonce 0 and 1) into out
 * (SS2022_REQ_HEADERS_MAX bytes): type 0, now, then addr[0, alen), the
 * padding's length and padding zero bytes (0 to SS2022_PADDING_MAX: the
 * bytes are sealed, so what they hold is not seen), no initial payload.
 * Returns the bytes written, or PROTO_ERR_TOO_BIG (alen or padding out of
 * bounds, or alen + 2 + padding is 0) or PROTO_ERR_STATE (OpenSSL). */
__attribute__((warn_unused_result)) ssize_t ss2022_request_seal(ss_aead *a, int64_t now,
                                                                const uint8_t *addr, size_t alen,
                                                                size_t padding, uint8_t *out);

/* Opens the request's sealed fixed header in[0, SS2022_REQ_FIXED_SEALED)
 * and checks it at now. Returns the variable header's length (1 to
 * 0xFFFF; it follows sealed, with its tag), or SS2022_ERR_TAG, _TYPE,
 * _TIME or _LENGTH. */
__attribute__((warn_unused_result)) ssize_t ss2022_request_open_fixed(ss_aead *a,
                                                                      const uint8_t *in,
                                                                      int64_t now);

/* Seals the response's fixed header (type 1, now, req_salt[0, slen), len)
 * and in[0, len) (1 to SS2022_CHUNK_PAYLOAD_MAX) after it into out
 * (SS2022_RESP_FIXED_LEN(slen) + len + 2 * SS_TAG_LEN bytes). Returns the
 * bytes written, or PROTO_ERR_TOO_BIG (len) or PROTO_ERR_STATE. */
__attribute__((warn_unused_result)) ssize_t ss2022_response_seal(ss_aead *a, int64_t now,
                                                                 const uint8_t *req_salt,
                                                                 size_t slen, const uint8_t *in,
                                                                 size_t len, uint8_t *out);

/* Opens the response's sealed fixed header in[0,
 * SS2022_RESP_FIXED_LEN(slen) + SS_TAG_LEN) and checks it against our
 * request's salt req_salt[0, slen) and now. Returns the first payload's
 * length (its sealed bytes follow), or SS2022_ERR_TAG, _TYPE, _TIME, _SALT
 * or _LENGTH. */
__attribute__((warn_unused_result)) ssize_t ss2022_response_open(ss_aead *a, const uint8_t *in,
                                                                 const uint8_t *req_salt,
                                                                 size_t slen, int64_t now);

/* SIP022-2's identity header for the next PSK next_psk, under the
 * identity PSK ipsk, of the request with salt salt (all ss_key_len(m)
 * bytes), into out. 0, or -1 (not an AES 2022 method, OpenSSL failed). */
__attribute__((warn_unused_result)) int ss2022_identity_seal(ss_method m, const uint8_t *ipsk,
                                                             const uint8_t *salt,
                                                             const uint8_t *next_psk,
                                                             uint8_t out[SS2022_IDENTITY_LEN]);

/* Decrypts the identity header in under ipsk and salt into hash: the
 * first 16 bytes of the next PSK's BLAKE3 hash when the client is one of
 * ours (the caller looks it up; there is no tag). 0, or -1 (as above). */
__attribute__((warn_unused_result)) int ss2022_identity_open(ss_method m, const uint8_t *ipsk,
                                                             const uint8_t *salt,
                                                             const uint8_t in[SS2022_IDENTITY_LEN],
                                                             uint8_t hash[SS2022_IDENTITY_LEN]);

/* What a PSK's identity header carries: BLAKE3 hash(psk[0, len))[0, 16]. */
void ss2022_psk_hash(const uint8_t *psk, size_t len, uint8_t hash[SS2022_IDENTITY_LEN]);

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
 * key is key (ss_key_len(m) bytes; behind identity PSKs, the user's PSK),
 * with id's identity headers after the salt (id NULL or id->n 0: none;
 * 2022 AES methods only), sending salt (ss_key_len(m) random
 * bytes, from the caller: the core reads no random source). For a 2022
 * method the request's headers carry now (unix seconds) and 1 + padding %
 * SS2022_PADDING_MAX bytes of padding (padding random from the caller:
 * SIP022 3.1.3 wants padding when no payload goes with the header, and
 * ours never does); the server's response header must be of type 1, name
 * our salt and be within SS2022_TIME_WINDOW of now (the layer reads no
 * clock: a response whose first byte comes over 30 s after the request is
 * refused). AEAD-2017 ignores now and padding. start()
 * writes the salt and a first chunk holding the target's address (so a
 * server-first protocol works: the server learns the target before the
 * client speaks) and the layer is ready at once; app bytes go down as
 * chunks of at most SS_CHUNK_PAYLOAD_MAX. from_below reads the server's
 * salt, then opens chunks and passes their payload up. The stream has no
 * end of its own: shutdown is the socket's.
 *
 * Returns NULL when out of memory, OpenSSL fails, dest is unset or a
 * domain socks_addr_wire_len refuses, or id has identities m cannot
 * carry. Name "shadowsocks"; errors LAYER_ERR_PROTO with error() "shadowsocks: bad chunk" (a tag that does
 * not match: the wrong password, bytes changed), "shadowsocks: chunk
 * length out of bounds", and for 2022 "shadowsocks: bad response header"
 * (a response of another type or to another request) or "shadowsocks:
 * response timestamp out of the window". */
layer *ss_client_new(ss_method m, const uint8_t *key, const ss_identity *id, const addr_dest *dest,
                     const uint8_t *salt, int64_t now, uint16_t padding);

#endif
