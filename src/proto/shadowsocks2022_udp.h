/* shadowsocks2022_udp.h - Shadowsocks 2022's UDP (SIP022 3.2 and 4.1, SIP022-2's UDP identity headers): the packet codec both ways, the sliding replay window, XChaCha20-Poly1305. Sans-io: keys, random bytes and now come from the caller. */
#ifndef ETM_PROTO_SHADOWSOCKS2022_UDP_H
#define ETM_PROTO_SHADOWSOCKS2022_UDP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "crypto/ossl.h"

#include "proto/shadowsocks.h"
#include "proto/shadowsocks_server.h"

/* Wire format (SIP022 3.2, 4.1; SIP022-2 for identity headers):
 *
 *   AES methods   AES-ECB(sep_key, separate header) || identity headers ||
 *                 AES-GCM(session subkey, nonce separate header[4, 16],
 *                         main header || payload) || tag
 *     separate header  session ID (8) || packet ID (u64be)
 *     sep_key          the first iPSK when identities are sent, else the PSK
 *     session subkey   BLAKE3 derive_key("shadowsocks 2022 session subkey",
 *                      PSK || session ID), the key's length
 *     identity header  AES-ECB(iPSK_i, BLAKE3 hash(next PSK)[0, 16] XOR
 *                      separate header): one per iPSK, none going back
 *   chacha20      nonce (24, random) || XChaCha20-Poly1305(PSK, nonce,
 *                 session ID || packet ID || main header || payload) || tag
 *   main header   client: type 0 | u64be timestamp | u16be padding length |
 *                 padding | ATYP ADDR PORT
 *                 server: type 1 | timestamp | client session ID (8) |
 *                 padding length | padding | ATYP ADDR PORT
 */

#define SS2022_SESSION_ID_LEN 8
/* The separate header: session ID and packet ID, one AES block. */
#define SS2022_UDP_SEP_LEN 16
/* XChaCha20's nonce (draft-irtf-cfrg-xchacha-03 2.3). */
#define SS2022_XNONCE_LEN 24
#define SS2022_XKEY_LEN 32
/* Packet IDs the replay window remembers behind the highest seen: one in
 * 1024 may come late by up to 1023 packets and still be taken (RFC 6479
 * sizes IPsec's windows alike; 128 bytes a session). Older is refused. */
#define SS2022_UDP_WINDOW 1024

/* What the UDP codec returns besides a length. */
enum {
	SS2022_UDP_ERR_TAG = SS2022_ERR_TAG,   /* the body does not open: another key, bytes changed */
	SS2022_UDP_ERR_TYPE = SS2022_ERR_TYPE, /* a server's packet sent to the server, or back */
	SS2022_UDP_ERR_TIME = SS2022_ERR_TIME, /* over SS2022_TIME_WINDOW off now */
	SS2022_UDP_ERR_TOO_BIG = PROTO_ERR_TOO_BIG, /* does not fit cap */
	SS2022_UDP_ERR_STATE = PROTO_ERR_STATE,     /* OpenSSL failed, or lookup gave nothing */
	SS2022_UDP_ERR_SHORT = -30,    /* shorter than its headers and a tag */
	SS2022_UDP_ERR_IDENTITY = -31, /* no user's PSK hash matches the identity header */
	SS2022_UDP_ERR_REPLAY = -32,   /* a packet ID seen, or older than the window */
	SS2022_UDP_ERR_SESSION = -33,  /* a server's packet for another client session */
	SS2022_UDP_ERR_PADDING = -34,  /* a padding over 900 or past the packet */
	SS2022_UDP_ERR_ADDRESS = -35,  /* no ATYP ADDR PORT we read */
};

/* The text of an SS2022_UDP_ERR_* ("?" for another value). */
const char *ss2022_udp_strerror(int err);

/* ---- the replay window (SIP022 3.2.4: "a sliding window filter") ---- */

/* The packet IDs of one sender's session seen so far, as a bitmap ring
 * over the last SS2022_UDP_WINDOW IDs. A zeroed window has seen none. */
typedef struct ss2022_window {
	uint64_t top; /* the highest ID seen, when any */
	bool any;
	uint64_t bits[SS2022_UDP_WINDOW / 64]; /* bit id % SS2022_UDP_WINDOW */
} ss2022_window;

/* Whether id may be taken: 0, or SS2022_UDP_ERR_REPLAY (seen, or
 * SS2022_UDP_WINDOW or more behind the highest). Changes nothing: the
 * caller adds the ID once its packet authenticated. */
__attribute__((warn_unused_result)) int ss2022_window_check(const ss2022_window *w, uint64_t id);
/* Marks id seen (ss2022_window_check passed), sliding forward past it. */
void ss2022_window_add(ss2022_window *w, uint64_t id);

/* ---- XChaCha20-Poly1305 (draft-irtf-cfrg-xchacha-03) ---- */

/* HChaCha20 of key and nonce[0, 16] into out (2.2). Cannot fail. */
void ss2022_hchacha20(const uint8_t key[SS2022_XKEY_LEN], const uint8_t nonce[16],
                      uint8_t out[SS2022_XKEY_LEN]);
/* AEAD_XChaCha20_Poly1305 (2.3.1): seals in[0, len) with aad into out
 * (len + SS_TAG_LEN bytes; out may be in). 0, or -1 (OpenSSL). */
__attribute__((warn_unused_result)) int ss2022_xchacha_seal(const uint8_t key[SS2022_XKEY_LEN],
                                                            const uint8_t nonce[SS2022_XNONCE_LEN],
                                                            const uint8_t *aad, size_t alen,
                                                            const uint8_t *in, size_t len,
                                                            uint8_t *out);
/* Opens in[0, len) (ending in the tag) into out (len - SS_TAG_LEN bytes;
 * out may be in). 0, or -1 (a tag that does not match, OpenSSL). */
__attribute__((warn_unused_result)) int ss2022_xchacha_open(const uint8_t key[SS2022_XKEY_LEN],
                                                            const uint8_t nonce[SS2022_XNONCE_LEN],
                                                            const uint8_t *aad, size_t alen,
                                                            const uint8_t *in, size_t len,
                                                            uint8_t *out);

/* ---- sessions ---- */

/* A session's body cipher, cached (SIP022 3.2.4: "cache the session
 * ciphers"): AES-GCM keyed with the subkey of one PSK and session ID,
 * rekeyed when asked for another session ID. One per (PSK, direction):
 * the PSK is not compared. Unused by chacha20 (the PSK is the key). A
 * zeroed one is unkeyed; ss2022_udp_cipher_free releases it. */
typedef struct ss2022_udp_cipher {
	EVP_CIPHER_CTX *ctx; /* owned; NULL: not keyed */
	uint8_t session[SS2022_SESSION_ID_LEN];
} ss2022_udp_cipher;

void ss2022_udp_cipher_free(ss2022_udp_cipher *c);

/* What a receiver keeps per sender session: its cipher and its window. */
typedef struct ss2022_udp_rx {
	ss2022_udp_cipher cipher;
	ss2022_window window;
} ss2022_udp_rx;

void ss2022_udp_rx_free(ss2022_udp_rx *rx);

/* ---- the client's view of the server's sessions (SIP022 3.2.4) ---- */

/* A client "MAY keep one old and one current server session and reject a
 * new server session while the last packet from the old one is under 1
 * minute old": a server that restarted, or moved to a new session, is
 * taken once its old session has been quiet this long. */
#define SS2022_SERVER_SESSION_HOLD 60

typedef struct ss2022_server_slot {
	bool used;
	uint8_t id[SS2022_SESSION_ID_LEN];
	int64_t last; /* unix seconds of its last packet that opened */
	ss2022_udp_rx rx;
} ss2022_server_slot;

/* The current and old server sessions, and a candidate new one that is
 * kept only once a packet of it opened. A zeroed struct has none;
 * ss2022_server_sessions_free releases it. */
typedef struct ss2022_server_sessions {
	ss2022_server_slot cur, old, cand;
} ss2022_server_sessions;

/* What ss2022_udp_open_response's lookup returns for server session id
 * at now: the current or old session's state; else the candidate, reset,
 * when a new session may be taken (no old one, or the old one quiet for
 * SS2022_SERVER_SESSION_HOLD seconds); else NULL (refused). Moves nothing. */
ss2022_udp_rx *ss2022_server_sessions_lookup(ss2022_server_sessions *s,
                                             const uint8_t id[SS2022_SESSION_ID_LEN], int64_t now);
/* A packet of session id opened at now: a candidate becomes the current
 * session, the current one the old one (the old one before is dropped). */
void ss2022_server_sessions_seen(ss2022_server_sessions *s,
                                 const uint8_t id[SS2022_SESSION_ID_LEN], int64_t now);
void ss2022_server_sessions_free(ss2022_server_sessions *s);

/* One packet to seal. */
typedef struct ss2022_udp_msg {
	const uint8_t *session;        /* the sender's session ID, 8 bytes */
	uint64_t packet;               /* the sender's packet ID */
	const uint8_t *client_session; /* a server's packet: the client session it answers;
	                                * NULL: a client's packet */
	int64_t now;                   /* unix seconds */
	size_t padding;                /* zero bytes, 0 to SS2022_PADDING_MAX */
	const uint8_t *addr;           /* ATYP ADDR PORT: the target, or a reply's source */
	size_t alen;
	const uint8_t *payload; /* may not overlap out */
	size_t plen;
	const uint8_t *nonce; /* chacha20: SS2022_XNONCE_LEN random bytes; AES: unused */
} ss2022_udp_msg;

/* The bytes a packet takes besides its address, padding and payload
 * under m with nid identity headers. */
size_t ss2022_udp_overhead(ss_method m, size_t nid, bool server);

/* Seals msg under m into out[0, cap): the PSK key (behind identities the
 * user's uPSK) keys the body; id (NULL or n 0: none; a client's packet
 * with an AES method only) adds its identity headers, the separate header
 * then under id->ipsk[0]. c caches the body cipher (AES). Returns the
 * packet's length, or SS2022_UDP_ERR_TOO_BIG (cap, the address, the
 * padding) or SS2022_UDP_ERR_STATE (OpenSSL, identities m cannot carry). */
__attribute__((warn_unused_result)) ssize_t ss2022_udp_seal(ss_method m, const uint8_t *key,
                                                            const ss_identity *id,
                                                            ss2022_udp_cipher *c,
                                                            const ss2022_udp_msg *msg,
                                                            uint8_t *out, size_t cap);

/* An opened packet: where its parts lie in the caller's out. */
typedef struct ss2022_udp_packet {
	int user; /* the account it opened with (0 on the client side) */
	uint8_t session[SS2022_SESSION_ID_LEN]; /* the sender's */
	uint64_t packet;
	uint8_t client_session[SS2022_SESSION_ID_LEN]; /* a server's packet: the one it names */
	size_t addr_off;     /* out[addr_off, payload_off): ATYP ADDR PORT */
	size_t payload_off;  /* out[payload_off, payload_off + return value): the payload */
} ss2022_udp_packet;

/* Where the receiver's state for a sender session is: asked once the
 * session ID is known (and, behind identities, the user), before the
 * packet authenticated. Return the kept one, or a scratch one the caller
 * keeps only if the packet opens (a forged packet must not move state);
 * NULL refuses the session (SS2022_UDP_ERR_SESSION). */
typedef ss2022_udp_rx *(*ss2022_udp_lookup_fn)(void *ud, int user,
                                                const uint8_t session[SS2022_SESSION_ID_LEN]);

/* The server's side: opens a client's packet in[0, len) for users[0, n)
 * (one PSK, or users behind the identity PSK of users[0], SIP022-2: the
 * identity header names the user, no trial) at now, the body into
 * out[0, cap) (cap >= len). Checks the type (0), the timestamp, the
 * padding and the address, then the session's window (lookup's rx), and
 * marks the ID seen. Returns the payload's length with *p set, or an
 * SS2022_UDP_ERR_*: _SHORT, _IDENTITY, _TAG, _TYPE, _TIME, _PADDING,
 * _ADDRESS, _REPLAY, _TOO_BIG, _STATE. */
__attribute__((warn_unused_result)) ssize_t
ss2022_udp_open_request(const ss_account *users, size_t n, int64_t now,
                        ss2022_udp_lookup_fn lookup, void *ud, const uint8_t *in, size_t len,
                        uint8_t *out, size_t cap, ss2022_udp_packet *p);

/* The client's side: opens a server's packet in[0, len) under key (the
 * uPSK behind identities) at now into out[0, cap); it must be of type 1
 * and name client_session. lookup is asked with user 0 and the server's
 * session ID. As ss2022_udp_open_request otherwise; also
 * SS2022_UDP_ERR_SESSION (another client session, or lookup refused). */
__attribute__((warn_unused_result)) ssize_t
ss2022_udp_open_response(ss_method m, const uint8_t *key,
                         const uint8_t client_session[SS2022_SESSION_ID_LEN], int64_t now,
                         ss2022_udp_lookup_fn lookup, void *ud, const uint8_t *in, size_t len,
                         uint8_t *out, size_t cap, ss2022_udp_packet *p);

#endif
