/* ipset.h - sets of IPv4 and IPv6 ranges built from CIDRs, with a binary-search membership test. */
#ifndef ETM_ROUTE_IPSET_H
#define ETM_ROUTE_IPSET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "base/addr.h"

__extension__ typedef unsigned __int128 ipset_u128;

/* One address in the form the sets compare: family 4 or 6, or 0 for "no
 * address". An IPv4-mapped IPv6 address (::ffff:a.b.c.d) is always carried
 * as IPv4, so it meets IPv4 CIDRs (docs/routing.md, "IPv4-mapped"). */
typedef struct ipset_addr {
	uint8_t family;
	uint32_t v4;    /* host order */
	ipset_u128 v6;  /* host order, most significant bit first */
} ipset_addr;

/* Fills a from 4 or 16 network-order bytes; any other length gives family 0. */
void ipset_addr_from_bytes(ipset_addr *a, const uint8_t *bytes, size_t len);

/* From an IP destination; a domain or an unset destination gives family 0. */
void ipset_addr_from_dest(ipset_addr *a, const addr_dest *d);

/* From an AF_INET / AF_INET6 socket address; NULL or another family gives 0. */
void ipset_addr_from_sockaddr(ipset_addr *a, const struct sockaddr *sa);

/* A set of ranges. Build it with ipset_add*, then ipset_seal once; after
 * that it is immutable and ipset_has may be called from any thread.
 * Memory: 8 bytes per IPv4 range and 32 per IPv6 range after merging. */
typedef struct ipset ipset;

/* NULL when memory runs out. */
__attribute__((warn_unused_result)) ipset *ipset_new(void);
void ipset_del(ipset *s);

/* Adds addr/prefix. addr is 4 or 16 network-order bytes and prefix at most
 * 32 or 128 (the caller checks both); host bits past the prefix are
 * ignored. An IPv6 range inside ::ffff:0:0/96 is stored as IPv4; one that
 * covers that block also covers every IPv4 address. Returns 0, or -1 when
 * memory runs out. */
__attribute__((warn_unused_result)) int ipset_add(ipset *s, const uint8_t *addr, size_t len,
                                                  unsigned prefix);

/* Parses "addr" or "addr/prefix" (IPv4 or IPv6, as etm_spec_check accepts)
 * and adds it. Returns 0, -1 when memory runs out, -2 when the text is not
 * a CIDR. */
__attribute__((warn_unused_result)) int ipset_add_text(ipset *s, const char *cidr);

/* Sorts and merges the ranges (overlapping and adjacent ones become one). */
void ipset_seal(ipset *s);

/* Whether a (family 4 or 6) lies in a range of the sealed set; family 0 never does. */
bool ipset_has(const ipset *s, const ipset_addr *a);

/* Ranges after sealing, per family (for tests and the benchmark). */
size_t ipset_count(const ipset *s, int family);

#endif
