/* shadowsocks_server.h - the Shadowsocks server core (AEAD-2017 and 2022's TCP): accounts, the salt replay filter, the first chunk (trial decryption, the target) and the relayed body as a layer. */
#ifndef ETM_PROTO_SHADOWSOCKS_SERVER_H
#define ETM_PROTO_SHADOWSOCKS_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/addr.h"
#include "proto/proto.h"
#include "proto/shadowsocks.h"
#include "proto/sniff.h"

/* ---- accounts ---- */

/* One user as the core reads it: the method and the master key, derived
 * once on the control thread; behind an identity PSK (SIP022-2, several
 * users on one 2022 port) also that iPSK and the hash its clients' identity
 * header carries. */
typedef struct ss_account {
	ss_method method;
	uint8_t key[SS_KEY_MAX];
	bool identity;                       /* ipsk set: the client sends an identity header */
	uint8_t ipsk[SS_KEY_MAX];            /* the server's iPSK, the same for every user */
	uint8_t hash[SS2022_IDENTITY_LEN];   /* ss2022_psk_hash of key */
} ss_account;

/* Fills a for method m and password[0, len) (for 2022 the PSK's base64,
 * ss_master_key). 0, or -1 (OpenSSL failed, or not a 2022 key). */
__attribute__((warn_unused_result)) int ss_account_init(ss_account *a, ss_method m,
                                                        const char *password, size_t len);

/* Puts a (ss_account_init'ed) behind the identity PSK ipsk[0, len)
 * (base64, as a 2022 key). The core reads the identity of users[0] for all:
 * every user of a core has the same iPSK, or none has one. 0, or
 * SS_KEYS_ERR_METHOD (not a 2022 AES method: SIP022-2's headers are AES
 * blocks) or SS_KEYS_ERR_PSK (not base64 of the key's length). */
__attribute__((warn_unused_result)) int ss_account_set_identity(ss_account *a, const char *ipsk,
                                                                size_t len);

/* ---- the salt replay filter ---- */

/* How long a salt is remembered, in seconds: a connection that repeats a
 * salt seen this recently is refused as a replay (a prober replaying a
 * captured first packet learns nothing). AEAD-2017 has no timestamp to
 * bound a replay by, so a replay older than this is not caught; 60 s
 * covers the probes seen in the wild, which follow the real connection
 * within seconds. For 2022 it is the rule: "Servers MUST store all
 * incoming salts for 60 seconds" (SIP022 3.1.4), and a request more than
 * SS2022_TIME_WINDOW off is refused before the filter is asked. */
#define SS_REPLAY_WINDOW 60
/* Slots: every salt accepted in the last SS_REPLAY_WINDOW seconds takes
 * one. 65536 slots of 40 bytes (2.5 MiB an inbound) hold about 540 new
 * connections a second at half load, where linear probing stays short. */
#define SS_REPLAY_SLOTS 65536
/* Slots one lookup probes; past this many live ones the filter counts as
 * full (salts are random, so their hashes are uniform). */
#define SS_REPLAY_PROBES 32

typedef struct ss_replay_slot {
	uint8_t salt[SS_KEY_MAX]; /* zero-padded past a 16-byte salt */
	int64_t expiry;           /* unix seconds; 0: empty */
} ss_replay_slot;

/* A zeroed filter is empty and valid; it holds no pointers (calloc it: it
 * is large). Not thread-safe: the shell locks around ss_replay_add. */
typedef struct ss_replay {
	ss_replay_slot slot[SS_REPLAY_SLOTS];
} ss_replay;

enum {
	SS_REPLAY_NEW = 0,   /* not seen: added */
	SS_REPLAY_SEEN = -1, /* seen within the window: a replay */
	SS_REPLAY_FULL = -2, /* no room within the probe bound: refused */
};

/* Adds salt[0, len) (len <= SS_KEY_MAX) at now, remembered until now +
 * SS_REPLAY_WINDOW. Returns an SS_REPLAY_*. */
__attribute__((warn_unused_result)) int ss_replay_add(ss_replay *r, const uint8_t *salt,
                                                      size_t len, int64_t now);

/* How the core asks the shell's filter (the shell adds its lock). */
typedef int (*ss_replay_fn)(void *ud, const uint8_t *salt, size_t len, int64_t now);

/* ---- server core ---- */

typedef enum ss_server_state {
	SS_SV_SALT,   /* waiting for the salt and the first sealed length */
	SS_SV_FIRST,  /* a user matched: reading the first chunk's payload */
	SS_SV_OPEN,   /* PROTO_EV_OPEN given: the body is ss_server_body_new's */
	SS_SV_CLOSED, /* refused */
} ss_server_state;

/* One core serves one client connection; embed it (ss_server_free
 * releases what it holds). */
typedef struct ss_server {
	const ss_account *users; /* borrowed for the core's life */
	size_t n_users;
	ss_replay_fn replay; /* NULL: no replay filter (tests only) */
	void *replay_ud;
	ss_server_state state;
	int user;                  /* -1 until a user's subkey opened the first length */
	ss_aead rx;                /* the client's direction, keyed by the matched user */
	uint8_t salt[SS_KEY_MAX];  /* the client's salt (2022's response names it) */
	size_t first_len;          /* the first chunk's payload length */
	uint8_t *first;            /* owned, first_cap bytes: the first chunk, sealed, then opened */
	size_t first_cap;
	size_t first_fill;
	size_t rest_off;           /* first[rest_off, first_len): payload after the address
	                            * (2022: and after the padding) */
	ss_reader rd;              /* from the OPEN: the next chunks (rd.rbuf is first) */
	uint8_t *plain;            /* owned, SS_PEEK_MAX bytes once ss_server_peek ran */
	size_t plain_len;
} ss_server;

/* Input model (as nghttp2's mem_recv): feed consumes what it can and keeps
 * what it needs itself (the first chunk, up to SS_CHUNK_PAYLOAD_MAX bytes,
 * is copied in); the shell feeds the unconsumed rest again with more.
 * now is unix seconds (the replay filter's clock, and 2022's timestamps').
 *
 *   n >= 0, PROTO_EV_NONE   n bytes consumed; read more, feed again.
 *   n > 0, PROTO_EV_OPEN    n bytes consumed (the rest are the client's
 *                           next chunks); dial ev.dest (TCP) for ev.user,
 *                           then run the body (ss_server_body_new).
 *   0 or < 0, CLOSE         refused, with ev.reason: send nothing. A
 *                           Shadowsocks server answers no refusal: the
 *                           shell drains the connection for a while
 *                           before it closes, so a prober learns nothing.
 *
 * Authentication is trial decryption: for each user in turn the core
 * derives the subkey of the client's salt (one HKDF-SHA1, or BLAKE3 for
 * 2022) and tries to open the first sealed length (one 2-byte AEAD open;
 * 2022: the 11-byte fixed header); the first that opens is the user. The
 * cost grows with the number of users: n HKDFs and opens for a client no
 * user's key opens.
 *
 * Refusals: no user's key opens the first length ("shadowsocks:
 * authentication failed"), a salt seen within SS_REPLAY_WINDOW, a full
 * filter, a first length of 0 or over SS_CHUNK_PAYLOAD_MAX, a first payload
 * whose tag does not match, an unknown address type, an empty domain, and
 * an address that does not fit the first chunk (every client we know of
 * sends it whole there). For 2022 also: a fixed header of another type
 * ("shadowsocks: not a request header (type is not 0)"), a timestamp over
 * SS2022_TIME_WINDOW off now ("shadowsocks: request timestamp out of the
 * window"), a padding over SS2022_PADDING_MAX or past the header ("...
 * the padding runs past the header"), and a header with neither payload
 * nor padding (SIP022 3.1.3). Behind an identity PSK (SIP022-2) there is
 * no trial: the identity header after the salt names the user by its
 * PSK's hash, and a hash no user has is refused ("shadowsocks: unknown
 * identity (no user's key hash matches the identity header)"); then the
 * user's key opens the fixed header or the request is refused as
 * "authentication failed". A 2022 request's salt and fixed header that
 * come over several reads are waited for (SIP022 3.1.3 asks for one read:
 * not built; a refusal is drained either way). */

/* Resets s. users[0, n) are the accounts (borrowed); replay (may be NULL)
 * is asked once per matched salt. */
void ss_server_init(ss_server *s, const ss_account *users, size_t n, ss_replay_fn replay,
                    void *replay_ud);
void ss_server_free(ss_server *s);

/* Runs on in[0, len) at now, as above. out->len is set to 0 (the core
 * never answers) and *ev set on every call. PROTO_ERR_STATE (ev CLOSE)
 * once decided. Works for any split of the input. */
__attribute__((warn_unused_result)) ssize_t ss_server_feed(ss_server *s, const uint8_t *in,
                                                           size_t len, int64_t now,
                                                           proto_out *out, proto_event *ev);

/* How much plaintext ss_server_peek holds for the shell to sniff: the
 * sniffer's own bound (sniff.h), past which it never looks. */
#define SS_PEEK_MAX SNIFF_MAX_BYTES

/* After PROTO_EV_OPEN and before ss_server_body_new, for a shell that
 * sniffs the client's first bytes (the chunks after the address are
 * sealed): opens the client's next chunks in[0, len) with the reader and
 * nonce the body would use, keeping their plaintext, the first chunk's
 * rest first, up to SS_PEEK_MAX bytes. Sets *plain to everything opened so
 * far (valid until the next call, ss_server_body_new or ss_server_free)
 * and *plain_len to its length. Returns the bytes of in consumed (none
 * once SS_PEEK_MAX bytes are held: a chunk that does not fit waits in the
 * reader), or PROTO_ERR_MALFORMED (a tag that does not match),
 * PROTO_ERR_TOO_BIG (a chunk length out of bounds) or PROTO_ERR_STATE (not
 * opened, or no memory). len 0 opens nothing and gives the rest. The body
 * made after it sends the plaintext held first, then goes on from where
 * the peek stopped. */
__attribute__((warn_unused_result)) ssize_t ss_server_peek(ss_server *s, const uint8_t *in,
                                                           size_t len, const uint8_t **plain,
                                                           size_t *plain_len);

/* ---- UDP packets (AEAD-2017) ---- */

/* Opens a client's UDP packet in[0, len) (salt, Seal(ATYP ADDR PORT
 * payload), tag: shadowsocks.h) by trial decryption across users[0, n):
 * users[hint] first when 0 <= hint < n (the user the client's address
 * matched last time: one open instead of up to n), then every other
 * AEAD-2017 user in order; 2022 users are skipped (their UDP is
 * ss2022_udp_open_request's, shadowsocks2022_udp.h). The plaintext goes
 * to out[0, cap) (cap >= len). Returns the payload's length with *user,
 * *dest (network UDP) and *off (where the payload starts in out) set, or
 * PROTO_ERR_MALFORMED (no user's key opens it, or shorter than a salt and
 * a tag), PROTO_ERR_TOO_BIG (cap) or
 * SS_PACKET_ERR_ADDRESS (it opened, but its target is not an ATYP ADDR
 * PORT this build reads: *user is set). Reads no clock: AEAD-2017 UDP
 * carries none, and no salt filter is asked (ss-libev keeps none for UDP
 * either). */
enum { SS_PACKET_ERR_ADDRESS = -20 };
__attribute__((warn_unused_result)) ssize_t ss_server_packet_open(const ss_account *users, size_t n,
                                                                  int hint, const uint8_t *in,
                                                                  size_t len, uint8_t *out,
                                                                  size_t cap, int *user,
                                                                  addr_dest *dest, size_t *off);

/* ---- the body as a layer ---- */

/* The body of an opened request as a layer for the top of the upstream's
 * stack (as vmess_server_body_new): from_above takes the client's bytes
 * after the first chunk (or after the chunks ss_server_peek opened),
 * passing down first what followed the address in the first chunk (or the
 * plaintext the peek held), then each chunk's payload; from_below seals the
 * upstream's bytes up to the client as chunks, our salt (ss_key_len bytes,
 * the shell's random ones) before the first. For 2022 the first chunk
 * going up is the response header (type 1, now, the client's salt, the
 * length) and the payload: its timestamp is now, the time the layer is
 * made (the layer reads no clock), so an upstream that first speaks over
 * SS2022_TIME_WINDOW later gets a response a strict client refuses. The
 * layer takes s's client
 * direction over (s keeps nothing to free). Ready at once; no shutdown
 * (the relay's FIN ends either side). start() writes what followed the
 * address in the first chunk down (the client may wait for an answer to
 * it, so it must not wait for the client's next bytes): stack_start runs
 * it on a new stack; on a stack that already started the shell runs it
 * itself and sends what it wrote before pushing the layer.
 *
 * Returns NULL when out of memory, OpenSSL fails or s is not opened. Name
 * "shadowsocks"; errors LAYER_ERR_PROTO with error() "shadowsocks: bad
 * chunk" or "shadowsocks: chunk length out of bounds". */
layer *ss_server_body_new(ss_server *s, const uint8_t *salt, int64_t now);

#endif
