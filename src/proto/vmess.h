/* vmess.h - VMess AEAD (alterId 0): the request and response headers, the body chunk codec and the client layer. */
#ifndef ETM_PROTO_VMESS_H
#define ETM_PROTO_VMESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/addr.h"
#include "base/layer.h"
#include "proto/proto.h"
#include "proto/vmess_crypto.h"

/* Wire format (v2ray-core 4.34 proxy/vmess/aead and proxy/vmess/encoding;
 * v2fly docs/developer/protocols/vmess.md):
 *
 *   request:  AuthID(16) Seal(len)(2+16) Nonce(8) Seal(header)(len+16)
 *     AuthID   AES-128-ECB(KDF(cmd_key, "AES Auth ID Encryption")[:16],
 *              time(8, BE) rand(4) CRC32(time rand)(4, BE))
 *     Seal     AES-128-GCM, AAD = AuthID; the length's key and nonce are
 *              KDF(cmd_key, "VMess Header AEAD Key_Length" / "..._Nonce_Length",
 *              AuthID, Nonce), the header's KDF(cmd_key, "VMess Header AEAD
 *              Key" / "... Nonce", AuthID, Nonce); keys [:16], nonces [:12]
 *     header   Ver(1)=1 BodyIV(16) BodyKey(16) V(1) Opt(1) P<<4|Sec(1) 0(1)
 *              Cmd(1) Port(2, BE) AddrType(1) Addr Padding(P) FNV1a-32(4, BE)
 *   response: Seal(len)(2+16) Seal(V Opt Cmd CmdLen CmdData)(len+16), GCM
 *              without AAD, keyed by KDF(RespKey, "AEAD Resp Header Len
 *              Key" / "AEAD Resp Header Key") and KDF(RespIV, "AEAD Resp
 *              Header Len IV" / "AEAD Resp Header IV"), where RespKey and
 *              RespIV are SHA-256(BodyKey)[:16] and SHA-256(BodyIV)[:16].
 *   body:     chunks: Size(2, BE) Seal(payload) Padding; Size counts the
 *              sealed payload and the padding. Opt M masks Size with two
 *              bytes of SHAKE128(IV); Opt P takes two more before them,
 *              the padding length (% 64, random bytes sent in clear). The
 *              AEAD nonce is Count(2, BE) || IV[2:12]. An empty payload ends
 *              the stream. Security none seals nothing (no tag); zero sends
 *              no chunks at all (Opt 0, the body raw).
 *
 * Commands 0x01 TCP and 0x02 UDP (each datagram one chunk, all to the
 * request's one target); address types as VLESS: 1 IPv4, 2 domain, 3 IPv6. */

#define VMESS_VERSION 1
#define VMESS_CMD_TCP 0x01
#define VMESS_CMD_UDP 0x02
#define VMESS_CMD_MUX 0x03 /* a Mux.Cool session: no address in the header */

/* Request options (common/protocol/headers.go). */
enum {
	VMESS_OPT_CHUNK_STREAM = 0x01,
	VMESS_OPT_CHUNK_MASKING = 0x04,
	VMESS_OPT_GLOBAL_PADDING = 0x08,
};

#define VMESS_AUTH_ID_LEN 16
#define VMESS_CONN_NONCE_LEN 8

/* The plaintext request header at its longest: the fields, a 255-byte
 * domain, 15 bytes of padding, the checksum. */
#define VMESS_HEADER_MAX (1 + 16 + 16 + 1 + 1 + 1 + 1 + 1 + 2 + 1 + 1 + ADDR_DOMAIN_MAX + 15 + 4)
/* The sealed request at its longest. */
#define VMESS_REQUEST_MAX                                                                         \
	(VMESS_AUTH_ID_LEN + 2 + VMESS_TAG_LEN + VMESS_CONN_NONCE_LEN + VMESS_HEADER_MAX +         \
	 VMESS_TAG_LEN)

/* The response header we read: V Opt Cmd CmdLen and a command of at most
 * 255 bytes (v2ray's dynamic port command is shorter); longer is refused. */
#define VMESS_RESPONSE_PLAIN_MAX (4 + 255)
#define VMESS_RESPONSE_MAX (2 + VMESS_TAG_LEN + VMESS_RESPONSE_PLAIN_MAX + VMESS_TAG_LEN)

/* Chunk bounds: the size field is 16 bits. Our writer seals at most
 * VMESS_CHUNK_PAYLOAD_MAX bytes a chunk (v2ray seals about 2 KiB; every
 * reader takes any 16-bit size). */
#define VMESS_CHUNK_PAYLOAD_MAX 8192
#define VMESS_PADDING_MAX 63
#define VMESS_CHUNK_OVERHEAD_MAX (2 + VMESS_TAG_LEN + VMESS_PADDING_MAX)
#define VMESS_CHUNK_SIZE_MAX 0xffff

/* The random bytes a client layer needs, filled by its creator (the core
 * reads no random source). */
typedef struct vmess_client_random {
	uint8_t body_key[16], body_iv[16];
	uint8_t auth_v;      /* the response authentication byte V */
	uint8_t padding_len; /* % 16: the header's padding */
	uint8_t padding[15];
	uint8_t auth_rand[4];  /* the AuthID's random part */
	uint8_t nonce[VMESS_CONN_NONCE_LEN];
	uint8_t pad_seed[32]; /* keys the ChaCha20 stream the chunks' padding bytes come from */
} vmess_client_random;

/* ---- headers ---- */

/* Writes the sealed request for dest (cmd VMESS_CMD_TCP or _UDP, sec the
 * wire nibble, opt the options) into out[0, cap), cap >= VMESS_REQUEST_MAX.
 * Returns its length, or PROTO_ERR_MALFORMED (dest unset or a domain
 * addr_dest would refuse), PROTO_ERR_TOO_BIG (cap), PROTO_ERR_STATE
 * (OpenSSL failed). */
__attribute__((warn_unused_result)) ssize_t
vmess_request_seal(const uint8_t cmd_key[VMESS_KEY_LEN], int64_t now,
                   const vmess_client_random *r, uint8_t sec, uint8_t opt, uint8_t cmd,
                   const addr_dest *dest, uint8_t *out, size_t cap);

/* RespKey and RespIV of a request's body key and IV (SHA-256, first 16). */
void vmess_response_keys(const uint8_t body_key[16], const uint8_t body_iv[16],
                         uint8_t resp_key[16], uint8_t resp_iv[16]);

/* Writes the sealed response header V opt 0 0 into out[0, cap) (cap >=
 * 2 + 16 + 4 + 16 = 38). Returns its length or PROTO_ERR_TOO_BIG /
 * PROTO_ERR_STATE. (Our client does not send one; tests and the server
 * do.) */
__attribute__((warn_unused_result)) ssize_t vmess_response_seal(const uint8_t resp_key[16],
                                                                const uint8_t resp_iv[16],
                                                                uint8_t v, uint8_t opt,
                                                                uint8_t *out, size_t cap);

/* Reads the sealed response header at the start of in[0, len). Returns its
 * whole length (drop that many bytes), 0 when it has not all arrived, or
 * PROTO_ERR_MALFORMED: a tag that does not match (the wrong key, bytes
 * changed), a plaintext shorter than 4 or over VMESS_RESPONSE_PLAIN_MAX, a
 * command longer than the plaintext, or V other than v. */
__attribute__((warn_unused_result)) ssize_t vmess_response_open(const uint8_t resp_key[16],
                                                                const uint8_t resp_iv[16],
                                                                uint8_t v, const uint8_t *in,
                                                                size_t len);

/* ---- body ---- */

/* One direction of a body's chunk codec. Init with vmess_body_init; a
 * zeroed struct frees safely. */
typedef struct vmess_body {
	uint8_t sec; /* VMESS_SEC_AES_128_GCM, _CHACHA20_POLY1305 or _NONE */
	bool masking, padding, seal;
	bool has_shake;
	uint16_t count;
	uint8_t nonce[VMESS_NONCE_LEN];
	EVP_CIPHER_CTX *aead; /* owned; NULL for none */
	EVP_CIPHER_CTX *pad;  /* owned: the padding bytes' stream (sealing with P) */
	vmess_shake shake;
} vmess_body;

/* key and iv are the body's (the request's, or RespKey/RespIV for the
 * response). seal picks the direction; pad_seed (32 bytes) keys the
 * padding bytes when sealing with VMESS_OPT_GLOBAL_PADDING (may be NULL
 * otherwise). 0, or -1 (OpenSSL, or a security without chunks). */
__attribute__((warn_unused_result)) int vmess_body_init(vmess_body *b, uint8_t sec, uint8_t opt,
                                                        const uint8_t key[16],
                                                        const uint8_t iv[16], bool seal,
                                                        const uint8_t *pad_seed);
void vmess_body_free(vmess_body *b);

/* The most a chunk of len payload bytes takes on the wire. */
size_t vmess_body_chunk_max(const vmess_body *b, size_t len);

/* Seals in[0, len) (len <= VMESS_CHUNK_PAYLOAD_MAX; 0: the end chunk) as
 * one chunk into out[0, cap), cap >= vmess_body_chunk_max(b, len).
 * Returns its length, or PROTO_ERR_TOO_BIG (nothing used) or
 * PROTO_ERR_STATE (OpenSSL failed). */
__attribute__((warn_unused_result)) ssize_t vmess_body_seal(vmess_body *b, const uint8_t *in,
                                                            size_t len, uint8_t *out,
                                                            size_t cap);

/* Reads a chunk's 2-byte size field: *chunk_len gets the bytes after it
 * (sealed payload and padding), *pad_len the padding at its end. Returns
 * 1 for a data chunk, 0 for the end chunk (nothing more follows; its bytes
 * need not be read), PROTO_ERR_MALFORMED for a size shorter than its tag
 * and padding. */
__attribute__((warn_unused_result)) int vmess_body_open_size(vmess_body *b, const uint8_t in[2],
                                                             size_t *chunk_len,
                                                             size_t *pad_len);

/* Opens the chunk in buf[0, chunk_len) in place (as vmess_body_open_size
 * gave). Returns the payload's length (at buf), or PROTO_ERR_MALFORMED (a
 * tag that does not match). */
__attribute__((warn_unused_result)) ssize_t vmess_body_open(vmess_body *b, uint8_t *buf,
                                                            size_t chunk_len, size_t pad_len);

/* Reading one direction's chunks off a byte stream, for the client layer
 * (the server's response body) and the server's body layer (the client's
 * request body) alike: the size field, the chunk (however it is split),
 * its payload passed on. The receive buffer grows on the first chunk and
 * again, once, to the largest a 16-bit size allows. A zeroed struct is
 * empty; init body with vmess_body_init (seal false) before the first
 * feed. */
typedef struct vmess_reader {
	vmess_body body; /* owned: the opening codec */
	bool udp;        /* payloads go out as VLESS UDP frames (vless.h) */
	bool ended;      /* the end chunk has been read */
	uint8_t size2[2];
	size_t size_fill;
	bool have_size;
	size_t chunk_len, pad_len;
	uint8_t *buf; /* owned, cap bytes; the chunk at buf + 2 */
	size_t cap, fill;
	size_t out_off, out_len; /* buf[out_off, out_len) still goes out */
} vmess_reader;

/* Reads chunks from in[0, len) and passes their payload into out: raw, or
 * for udp one frame a chunk, whole or not at all (an empty datagram, or
 * one over VLESS_UDP_PAYLOAD_MAX, is dropped). What does not fit in out
 * waits inside; feed again (len 0 drains it). After the end chunk every
 * byte is consumed and ignored. Returns the bytes consumed, or (as the
 * layers that use it return them) LAYER_ERR_PROTO, a bad chunk (a tag that
 * does not match, a size shorter than its tag and padding; the reader is
 * then spent), or LAYER_ERR_NOMEM (no memory for the buffer). */
__attribute__((warn_unused_result)) ssize_t vmess_reader_feed(vmess_reader *r, const uint8_t *in,
                                                              size_t len, layer_buf *out);
void vmess_reader_free(vmess_reader *r);

/* The options v2ray 4.34's client sends for a security (its outbound.go):
 * chunk stream and masking, and global padding for the AEADs; none for
 * zero. */
uint8_t vmess_options_for(vmess_security sec);

/* ---- client layer ---- */

/* A client layer that opens dest (its one target for udp) through a VMess
 * server as the user of cmd_key, at now (unix seconds), with the random
 * bytes r (copied). sec is the body security (auto already chosen by the
 * caller). start() writes the request and the layer is ready at once.
 *
 * TCP: app bytes go down as chunks; from_below reads the response header
 * once, then opens chunks and passes their payload up. UDP: the app side
 * speaks the VLESS length framing (vless.h: Length(2, BE) payload): each
 * frame from above becomes one chunk, each chunk from below one frame. The
 * end chunk from below ends the body (later bytes are ignored); shutdown
 * writes ours.
 *
 * Returns NULL when out of memory, when dest is unset or a domain addr_dest
 * would refuse, or for udp over VMESS_SEC_ZERO (it has no chunks to keep
 * datagrams apart). Name "vmess"; errors LAYER_ERR_PROTO with error()
 * "vmess: bad response header" or "vmess: bad chunk" (a tag that does not
 * match, a size shorter than its tag). */
layer *vmess_client_new(const uint8_t cmd_key[VMESS_KEY_LEN], vmess_security sec,
                        const addr_dest *dest, bool udp, int64_t now,
                        const vmess_client_random *r);

#endif
