/* socks.h - sans-io SOCKS server core (SOCKS5, RFC 1929, SOCKS4/4a) and SOCKS5 UDP headers. */
#ifndef ETM_PROTO_SOCKS_H
#define ETM_PROTO_SOCKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/addr.h"
#include "proto/proto.h"

/* One core serves one client connection and follows proto.h: the shell feeds
 * the client's bytes, sends what the core writes into out, and acts on the
 * event. The first byte picks the protocol: 0x05 SOCKS5, 0x04 SOCKS4/4a,
 * anything else is PROTO_ERR_MALFORMED.
 *
 *   socks_server s = {0};
 *   socks_server_init(&s, users, n_users, allow_udp);
 *   n = socks_server_feed(&s, in, len, &out, &ev);   until ev.kind != NONE
 *   PROTO_EV_OPEN  -> dial (or bind the UDP relay), then
 *                     socks_server_opened(&s, &bound, &out) or
 *                     socks_server_failed(&s, why, &out); send out.
 *   PROTO_EV_CLOSE -> send out, then close.
 *
 * For PROTO_CMD_UDP_ASSOCIATE, ev.dest is not a destination: it is the source
 * the client says it will send from (RFC 1928 section 6, often 0.0.0.0:0),
 * network ADDR_UDP; the shell binds a relay and passes its address to
 * socks_server_opened. */

/* The largest message the core holds at once: an RFC 1929 request,
 * VER ULEN UNAME(255) PLEN PASSWD(255). A SOCKS5 greeting (257), a SOCKS5
 * request (262) and a SOCKS4a header with its host name (8 + 255) are
 * smaller; a SOCKS4 user id is counted, never stored. */
#define SOCKS_MSG_MAX (3 + 255 + 255)

/* SOCKS4 leaves the user id and the 4a host name unbounded; 255 is what
 * SOCKS5 allows a user name and a domain (RFC 1928 section 5), so no client
 * that also speaks SOCKS5 needs more. Longer fields are PROTO_ERR_TOO_BIG. */
#define SOCKS4_USERID_MAX 255
#define SOCKS4_HOST_MAX ADDR_DOMAIN_MAX

/* Largest SOCKS5 UDP request header: RSV(2) FRAG ATYP LEN DOMAIN(255) PORT(2),
 * the 262 octets RFC 1928 section 7 tells a client to reserve. */
#define SOCKS_UDP_HEADER_MAX 262

/* Private: the parser's position. A zeroed struct is SOCKS_ST_HELLO. */
typedef enum socks_state {
	SOCKS_ST_HELLO,      /* waiting for the version byte */
	SOCKS_ST_GREETING,   /* SOCKS5 VER NMETHODS METHODS */
	SOCKS_ST_AUTH,       /* RFC 1929 VER ULEN UNAME PLEN PASSWD */
	SOCKS_ST_REQUEST,    /* SOCKS5 VER CMD RSV ATYP DST.ADDR DST.PORT */
	SOCKS_ST_S4_HEADER,  /* SOCKS4 VN CD DSTPORT DSTIP */
	SOCKS_ST_S4_USERID,  /* SOCKS4 USERID NUL */
	SOCKS_ST_S4_HOST,    /* SOCKS4a HOSTNAME NUL */
	SOCKS_ST_DIAL,       /* PROTO_EV_OPEN given: waiting for opened/failed */
	SOCKS_ST_RELAY,      /* success reply written: the core is done */
	SOCKS_ST_CLOSED,     /* refused or failed: the core is done */
} socks_state;

/* Visible so the shell can embed it; read it through the functions below. */
typedef struct socks_server {
	const proto_account *users; /* borrowed for the core's life */
	size_t n_users;             /* 0: no authentication (method 0x00) */
	bool allow_udp;
	socks_state state;
	uint8_t version; /* 0 until the first byte, then 4 or 5 */
	bool v4a;        /* SOCKS4 request that carried a host name */
	int user;        /* authenticated account index; meaningful when n_users > 0 */
	uint16_t have;   /* bytes of the current message in msg */
	uint16_t field;  /* SOCKS4: length so far of the NUL-terminated field */
	uint8_t msg[SOCKS_MSG_MAX];
} socks_server;

/* Resets s to the start state. users[0, n_users) are borrowed for the core's
 * life; with any account, only method 0x02 (RFC 1929) is offered and SOCKS4 is
 * refused, since it carries no password. Accounts whose user or pass is NULL
 * never match. UDP ASSOCIATE is refused with 0x07 unless allow_udp. */
void socks_server_init(socks_server *s, const proto_account *users, size_t n_users,
                       bool allow_udp);

/* Consumes client bytes per proto.h; never past the end of the request, so
 * bytes after it are the client's first payload. Works for any split of the
 * input. out is overwritten (out->len is set) and *ev is set on every call.
 * Returns the bytes consumed, or:
 *   PROTO_ERR_MALFORMED  not SOCKS: a first byte other than 4 or 5, a request
 *                        VER other than 5, an RFC 1929 VER other than 1 (out:
 *                        status 0x01), an empty or NUL-holding domain or 4a
 *                        host name (out: REP 0x01 or 0x5B);
 *   PROTO_ERR_TOO_BIG    a SOCKS4 user id or 4a host name over its bound (out:
 *                        0x5B);
 *   PROTO_ERR_STATE      called after PROTO_EV_OPEN or PROTO_EV_CLOSE or an
 *                        error; s is left unchanged.
 * On an error ev->kind is PROTO_EV_CLOSE with a reason, like a refusal. */
__attribute__((warn_unused_result)) ssize_t socks_server_feed(socks_server *s, const uint8_t *in,
                                                              size_t len, proto_out *out,
                                                              proto_event *ev);

/* After PROTO_EV_OPEN: writes the success reply into out (SOCKS5 REP 0x00
 * with BND.ADDR/BND.PORT from bound, the relay's address for UDP ASSOCIATE;
 * SOCKS4 0x5A with bound's port and IPv4 address, zeros for other kinds). A
 * NULL or unset bound is written as 0.0.0.0:0. The core is then in the relay
 * state. Returns 0, or PROTO_ERR_STATE (out empty, s unchanged) in any other
 * state. */
__attribute__((warn_unused_result)) int socks_server_opened(socks_server *s, const addr_dest *bound,
                                                            proto_out *out);

/* After PROTO_EV_OPEN: writes the failure reply for e into out (SOCKS5 REP
 * 0x01..0x06 with BND 0.0.0.0:0; SOCKS4 0x5B); the shell sends it and closes.
 * Returns 0, or PROTO_ERR_STATE (out empty, s unchanged) in any other state. */
__attribute__((warn_unused_result)) int socks_server_failed(socks_server *s, proto_dial_error e,
                                                            proto_out *out);

/* The protocol the client spoke: 5, 4 (4a included), or 0 before the first byte. */
int socks_server_version(const socks_server *s);

/* The same for logs: "socks5", "socks4", "socks4a" (once the SOCKS4 header
 * named 0.0.0.x), or "socks" before the first byte. Static text. */
const char *socks_server_version_name(const socks_server *s);

/* Decodes the RFC 1928 section 7 header at the start of a datagram into
 * *dest (network ADDR_UDP). Returns the header length (the payload follows
 * it), or PROTO_ERR_MALFORMED for a truncated header, RSV other than 0, FRAG
 * other than 0 (fragments are not supported: the shell drops the datagram,
 * as section 7 requires), an unknown ATYP, or an empty or NUL-holding domain.
 * *dest is written only on success. */
__attribute__((warn_unused_result)) ssize_t socks_udp_decode(const uint8_t *pkt, size_t len,
                                                             addr_dest *dest);

/* Writes the header for a datagram from peer (RSV 0, FRAG 0, peer's address
 * and port) into out. Returns its length, PROTO_ERR_TOO_BIG when cap is too
 * small, or PROTO_ERR_MALFORMED for an unset peer or an invalid domain. */
__attribute__((warn_unused_result)) ssize_t socks_udp_encode(const addr_dest *peer, uint8_t *out,
                                                             size_t cap);

#endif
