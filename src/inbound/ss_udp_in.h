/* ss_udp_in.h - the Shadowsocks inbound's UDP side (AEAD-2017 and 2022): one SO_REUSEPORT socket per worker on the inbound's port, a NAT entry per client address (2022: per client session), each a datagram link from the connector. */
#ifndef ETM_INBOUND_SS_UDP_IN_H
#define ETM_INBOUND_SS_UDP_IN_H

#include <stdbool.h>
#include <stdint.h>

#include "inbound/inbound.h"
#include "runtime/worker.h"

/* A NAT entry with no packet either way for this long closes (its link
 * and the sockets under it with it). 300 s is shadowsocks-libev's default
 * UDP timeout (`-t`, "timeout" in its config) and v2ray's; the schema has
 * no per-inbound key for it, so it is this constant (docs/inbound-
 * shadowsocks.md "UDP"). */
#define SS_UDP_TIMEOUT_MS (300 * 1000)
/* How often idle entries are looked for: an entry lives at most this much
 * past its timeout. */
#define SS_UDP_SWEEP_MS (10 * 1000)
/* NAT entries one worker's socket holds at most. Each is a datagram link
 * with sockets of its own under it (a direct one per outbound it reached),
 * so this bounds the descriptors one inbound's clients can make a worker
 * open. Past it the entry used least recently closes to make room, as
 * shadowsocks-libev's LRU cache of associations does: a flood of new
 * source addresses evicts, it is not refused. */
#define SS_UDP_NAT_MAX 1024

typedef struct ss_udp_in ss_udp_in;

/* Whether in (a built shadowsocks inbound) serves UDP: every method does.
 *
 * 2022 (SIP022 3.2.4): a NAT entry is one client session, found by its
 * session ID and user (behind identity headers the header names the user),
 * holding the session's cipher and replay window (SS2022_UDP_WINDOW) and a
 * random server session ID of ours; replies go to the address the
 * session's last valid packet came from. Timestamps over 30 s off, replayed
 * packet IDs, and packets that do not open are dropped (debug, counted);
 * the bound, the LRU eviction and the idle timeout are the constants
 * above, for sessions as for addresses. */
bool ss_udp_in_wanted(const inbound_rt *in);

/* Binds UDP ip:port with SO_REUSEPORT on w's loop (worker thread only) and
 * serves in's clients there; takes a reference on in (inbound_rt_hold).
 * Returns the socket, or NULL with "failed to listen on <ip>:<port>:
 * <reason>" in err. */
ss_udp_in *ss_udp_in_open(worker *w, const char *ip, uint16_t port, const inbound_rt *in,
                          char *err, size_t err_size);

/* A reload hands the socket a new build of its inbound (other users, other
 * method): the socket carries over, every NAT entry closes (their keys and
 * user indexes are the old build's; a client's next packet opens a new
 * one), and the reference moves to in. Nothing happens when in is the
 * build it serves already. Worker thread only. */
void ss_udp_in_set_inbound(ss_udp_in *u, const inbound_rt *in);

/* The socket clients send to (an upgrade passes it on), or -1; it stays
 * u's. Worker thread only. */
int ss_udp_in_fd(const ss_udp_in *u);

/* Closes every NAT entry and the socket; frees u once its handles close.
 * NULL does nothing. Worker thread only. */
void ss_udp_in_close(ss_udp_in *u);

#endif
