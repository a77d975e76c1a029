/* vmess_server.h - the VMess AEAD server core: users' keys, the AuthID replay filter, the request header and the response. */
#ifndef ETM_PROTO_VMESS_SERVER_H
#define ETM_PROTO_VMESS_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "proto/proto.h"
#include "proto/vmess.h"

/* How far a client's clock may be from ours, either way, in seconds
 * (v2ray-core 4.34 proxy/vmess/aead/authid.go: 120). */
#define VMESS_TIME_WINDOW 120

/* ---- accounts ---- */

/* One user as the core reads it: both keys precomputed once, on the
 * control thread (the AuthID check tries every user's key on each
 * connection, so no KDF runs per connection and user). */
typedef struct vmess_account {
	uint8_t cmd_key[VMESS_KEY_LEN];
	uint8_t auth_key[VMESS_KEY_LEN]; /* KDF(cmd_key, "AES Auth ID Encryption")[:16] */
} vmess_account;

/* Fills a from the user's UUID (16 bytes). 0, or -1 (OpenSSL failed). */
__attribute__((warn_unused_result)) int vmess_account_init(vmess_account *a,
                                                           const uint8_t uuid[16]);

/* ---- the AuthID replay filter ---- */

/* Slots of the filter: every AuthID accepted within the last
 * 2 x VMESS_TIME_WINDOW seconds (an AuthID stays acceptable until its own
 * time + VMESS_TIME_WINDOW) takes one until it expires. 65536 slots of
 * 24 bytes (1.5 MiB an inbound) hold about 270 new connections a second
 * for 240 s at half load, where linear probing stays short. */
#define VMESS_REPLAY_SLOTS 65536
/* Slots one lookup probes: past this many live ones the filter counts as
 * full. AuthIDs are AES outputs, so their hashes are uniform and a run
 * this long at half load is rarer than 1 in 10^9. */
#define VMESS_REPLAY_PROBES 32

typedef struct vmess_replay_slot {
	uint8_t id[VMESS_AUTH_ID_LEN];
	int64_t expiry; /* unix seconds; 0: empty */
} vmess_replay_slot;

/* A zeroed filter is empty and valid; it holds no pointers (embed or
 * calloc it: it is large). Not thread-safe: a shell that shares one
 * between threads locks around vmess_replay_add. */
typedef struct vmess_replay {
	vmess_replay_slot slot[VMESS_REPLAY_SLOTS];
} vmess_replay;

enum {
	VMESS_REPLAY_NEW = 0,   /* not seen: added */
	VMESS_REPLAY_SEEN = -1, /* seen and not expired: a replay */
	VMESS_REPLAY_FULL = -2, /* no room within the probe bound: refuse (a
	                         * replay is never let through) */
};

/* Adds AuthID id, remembered until expiry (unix seconds), at now (expired
 * slots on the way are reused). Returns a VMESS_REPLAY_*. */
__attribute__((warn_unused_result)) int vmess_replay_add(vmess_replay *r,
                                                         const uint8_t id[VMESS_AUTH_ID_LEN],
                                                         int64_t expiry, int64_t now);

/* How the core asks the shell's filter: as vmess_replay_add (the shell
 * adds its lock). */
typedef int (*vmess_replay_fn)(void *ud, const uint8_t id[VMESS_AUTH_ID_LEN], int64_t expiry,
                               int64_t now);

/* ---- server core ---- */

typedef enum vmess_server_state {
	VMESS_SV_REQUEST, /* waiting for a complete request */
	VMESS_SV_DIAL,    /* PROTO_EV_OPEN given: waiting for opened */
	VMESS_SV_RELAY,   /* response written: the body codec is the shell's */
	VMESS_SV_CLOSED,  /* refused */
} vmess_server_state;

/* What a decided request asks for, after PROTO_EV_OPEN. */
typedef struct vmess_request {
	uint8_t body_key[16], body_iv[16];
	uint8_t v;   /* the response authentication byte */
	uint8_t opt; /* VMESS_OPT_* */
	uint8_t sec; /* VMESS_SEC_AES_128_GCM, _CHACHA20_POLY1305 or _NONE */
	uint8_t cmd; /* VMESS_CMD_TCP or _UDP */
} vmess_request;

/* One core serves one client connection; embed it, read it through the
 * functions below (and req after the open). */
typedef struct vmess_server {
	const vmess_account *users; /* borrowed for the core's life */
	size_t n_users;
	vmess_replay_fn replay; /* NULL: no replay filter (tests only) */
	void *replay_ud;
	vmess_server_state state;
	int user; /* -1 until an AuthID matched */
	uint8_t auth_id[VMESS_AUTH_ID_LEN];
	vmess_request req;
} vmess_server;

/* Input model (as vless_server_feed): nothing is consumed until the request
 * is complete; the shell feeds all the client's bytes again, new ones
 * appended, after each read; VMESS_REQUEST_MAX bytes always reach a
 * decision. now is unix seconds (the shell's time(NULL)).
 *
 *   0, PROTO_EV_NONE   read more, feed again.
 *   n, PROTO_EV_OPEN   drop n bytes (the rest is the body); dial ev.dest
 *                      (network TCP for PROTO_CMD_CONNECT; UDP, the one
 *                      target of every datagram, for
 *                      PROTO_CMD_UDP_ASSOCIATE); ev.user is the account's
 *                      index; s->req says the body. On success call
 *                      vmess_server_opened and send out, then run the body
 *                      (vmess_server_body_init).
 *   0 or < 0, CLOSE    refused, with ev.reason: send nothing. A VMess
 *                      server answers no refusal: the shell drains the
 *                      connection for a while before it closes (so a
 *                      prober cannot tell a refusal from a slow server).
 *
 * Refusals: no user's AuthID key gives a valid CRC ("vmess: authentication
 * failed", which is also what a legacy MD5 header gets: its first 16
 * bytes are an HMAC no AuthID check can tell from noise), an AuthID
 * outside VMESS_TIME_WINDOW, a replayed one, a full filter, a sealed length
 * or header whose tag does not match (PROTO_ERR_MALFORMED), a header
 * length out of bounds, a bad checksum, a version other than 1, a security
 * other than aes-128-gcm, chacha20-poly1305 or none, a command other than
 * TCP or UDP, an unknown address type or a bad domain. */

/* Resets s. users[0, n) are the accounts (borrowed); replay (may be NULL)
 * is asked once per matched AuthID. */
void vmess_server_init(vmess_server *s, const vmess_account *users, size_t n,
                       vmess_replay_fn replay, void *replay_ud);

/* Decides on in[0, len) at now, as above. out->len is set to 0 and *ev set
 * on every call. PROTO_ERR_STATE (ev CLOSE) once decided. Works for any
 * split of the input. */
__attribute__((warn_unused_result)) ssize_t vmess_server_feed(vmess_server *s, const uint8_t *in,
                                                              size_t len, int64_t now,
                                                              proto_out *out, proto_event *ev);

/* After PROTO_EV_OPEN: writes the sealed response header (V, no options,
 * no command) into out. Returns 0, or PROTO_ERR_STATE (another state, or
 * OpenSSL failed). */
__attribute__((warn_unused_result)) int vmess_server_opened(vmess_server *s, proto_out *out);

/* Whether the body is chunked (every AEAD and none with the chunk stream);
 * false: "zero", the body raw both ways (TCP only: a UDP request without
 * chunks is refused). */
bool vmess_server_chunked(const vmess_server *s);

/* The body codec of an opened request: rx opens the client's chunks, tx
 * seals ours (RespKey/RespIV, the client's options; pad_seed, 32 bytes,
 * keys our padding bytes when the client asked for global padding).
 * 0, or -1 (not opened, not chunked, or OpenSSL failed; both freed). */
__attribute__((warn_unused_result)) int vmess_server_body_init(const vmess_server *s,
                                                               vmess_body *rx, vmess_body *tx,
                                                               const uint8_t pad_seed[32]);

/* ---- the body as a layer ---- */

/* The body of an opened request as a layer for the top of the
 * upstream's stack (the shell pushes it on the dialled endpoint, so the
 * relay moves bytes as for any stacked upstream): the other way up from a
 * client layer. from_above takes the client's bytes (chunks, or raw for
 * zero) and passes their payload down to the upstream; from_below takes the
 * upstream's bytes and passes them up sealed as chunks (at most
 * VMESS_CHUNK_PAYLOAD_MAX a chunk). The client's end chunk ends its body:
 * bytes after it are swallowed. Ready at once; no start, no shutdown (the
 * relay's FIN ends either side). pad_seed (32 bytes) keys the padding
 * bytes.
 *
 * For a UDP request the shell speaks the VLESS length framing (vless.h)
 * above, as vmess_client_new's udp does: each chunk from the client comes
 * out of from_above as one frame, each frame into from_below goes up as
 * one chunk (a datagram over VMESS_CHUNK_PAYLOAD_MAX is dropped).
 *
 * Returns NULL when out of memory or s is not opened. Name
 * "vmess"; error LAYER_ERR_PROTO, error() "vmess: bad chunk". */
layer *vmess_server_body_new(const vmess_server *s, const uint8_t pad_seed[32]);

#endif
