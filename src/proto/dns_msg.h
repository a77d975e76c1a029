/* dns_msg.h - the DNS wire codec (RFC 1035): reads queries and responses bounds-checked, ages and truncates responses in place, builds replies and queries. */
#ifndef ETM_PROTO_DNS_MSG_H
#define ETM_PROTO_DNS_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define DNS_HEADER_LEN 12
#define DNS_UDP_PLAIN_MAX 512 /* a UDP answer's limit without EDNS (RFC 1035 4.2.1) */
#define DNS_MSG_MAX 65535     /* a TCP message's limit (the 2-byte length, RFC 7766 8) */
/* Records one scan walks at most; more = DNS_MSG_EBIG. Real answers carry a
 * few dozen; the bound keeps a scan's work and dns_answer_info's offsets
 * table fixed whatever a peer sends. */
#define DNS_MSG_MAX_RRS 256

enum {
	DNS_TYPE_A = 1,
	DNS_TYPE_NS = 2,
	DNS_TYPE_CNAME = 5,
	DNS_TYPE_SOA = 6,
	DNS_TYPE_PTR = 12,
	DNS_TYPE_MX = 15,
	DNS_TYPE_TXT = 16,
	DNS_TYPE_AAAA = 28,
	DNS_TYPE_OPT = 41,
	DNS_CLASS_IN = 1
};
enum {
	DNS_RCODE_NOERROR = 0,
	DNS_RCODE_FORMERR = 1,
	DNS_RCODE_SERVFAIL = 2,
	DNS_RCODE_NXDOMAIN = 3,
	DNS_RCODE_NOTIMP = 4,
	DNS_RCODE_REFUSED = 5
};

typedef enum dns_msg_status {
	DNS_MSG_OK = 0,
	DNS_MSG_ESHORT = -1,    /* the message ends inside a field */
	DNS_MSG_EBADNAME = -2,  /* a label over 63, a name over 255 octets, a compression pointer
	                           loop or one pointing at or past itself, a reserved label type;
	                           also (see walk_name in dns_msg.c) a pointer into the header and,
	                           in a question, a label byte that has no unambiguous text form */
	DNS_MSG_ENOTQUERY = -3, /* parse_query: QR set, or an opcode other than QUERY */
	DNS_MSG_EQDCOUNT = -4,  /* not exactly one question */
	DNS_MSG_EBIG = -5,      /* more than DNS_MSG_MAX_RRS records, or output does not fit */
	DNS_MSG_EMISMATCH = -6, /* scan_answer: not a response, or its question is not the one asked */
} dns_msg_status;

/* A fixed text for status, e.g. "dns: truncated message"; any int is
 * accepted (an unknown one has a text of its own). Never NULL. */
const char *dns_msg_strerror(int status);

/* A name's text: 255 octets on the wire are at most 253 characters without
 * the root dot (RFC 1035 2.3.4), so 254 bytes with the NUL. */
#define DNS_MSG_NAME_TEXT 254

typedef struct dns_question {
	uint16_t id;
	uint16_t flags;               /* header bytes 2-3 as sent */
	char name[DNS_MSG_NAME_TEXT]; /* lower-cased ASCII text, no trailing dot; "" for the root */
	uint16_t qtype, qclass;
	uint16_t qend;   /* offset just past the question (header + question) */
	bool edns;       /* an OPT record is in the additional section */
	uint16_t udp_size; /* max(512, the OPT's payload size) with EDNS, else 512 */
} dns_question;

/* Every function below is pure: no allocation, no clock, no state between
 * calls; any thread. Offsets and lengths are in bytes of the message m[0, n). */

/* A query: header, exactly one question, then the other sections walked
 * (bounds-checked) to find an OPT (the first one counts). Fills *q on
 * DNS_MSG_OK; *q is unspecified otherwise.
 * Errors: ESHORT, EBADNAME, ENOTQUERY, EQDCOUNT, EBIG. */
__attribute__((warn_unused_result)) int dns_msg_parse_query(const uint8_t *m, size_t n,
                                                            dns_question *q);

typedef struct dns_answer_info {
	uint16_t id;
	uint8_t rcode;       /* the header's 4 bits */
	bool tc;             /* TC set */
	uint16_t an, ns, ar; /* section counts */
	bool negative;       /* NXDOMAIN, or NOERROR with no answer record (NODATA) */
	/* positive: least TTL of answer+authority records (OPT excluded), 0 when
	 * there are none; negative: min(SOA's TTL, SOA MINIMUM) of the authority
	 * SOA (RFC 2308 5), or 0 when there is none. A TTL with its top bit set
	 * counts as 0 (RFC 2181 8). */
	uint32_t min_ttl;
	bool soa; /* an SOA record is in the authority section (tells a negative
	             answer's min_ttl 0 from "no SOA", RFC 2308 5) */
	uint16_t n_ttl;                    /* TTL fields found (all records but OPT) */
	uint16_t ttl_off[DNS_MSG_MAX_RRS]; /* their offsets in the message */
} dns_answer_info;

/* Walks a response completely (every record bounds-checked, names
 * decompressed with loop protection, an SOA's RDATA read). When q is not
 * NULL, the response must have QR set, one question equal (name
 * case-insensitively, type, class) to q's, else DNS_MSG_EMISMATCH.
 * Errors: ESHORT, EBADNAME, EBIG (also for n > DNS_MSG_MAX), EMISMATCH;
 * *out is unspecified then. */
__attribute__((warn_unused_result)) int dns_msg_scan_answer(const uint8_t *m, size_t n,
                                                            const dns_question *q,
                                                            dns_answer_info *out);

/* Subtracts elapsed_s from every TTL field info found (floor 0), in place.
 * info must come from a scan of these bytes; offsets past n are skipped. */
void dns_msg_age(uint8_t *m, size_t n, const dns_answer_info *info, uint32_t elapsed_s);

void dns_msg_set_id(uint8_t *m, uint16_t id); /* n >= 2 is the caller's */

/* When n > limit: keeps the header and the question only (m[0, qend)), sets
 * TC, zeroes the AN/NS/AR counts; returns the new length. Otherwise (or
 * for n < DNS_HEADER_LEN) returns n unchanged. A qend outside
 * [DNS_HEADER_LEN, n] keeps the header alone, with QDCOUNT zeroed too. */
__attribute__((warn_unused_result)) size_t dns_msg_truncate(uint8_t *m, size_t n, uint16_t qend,
                                                            size_t limit);

/* A reply to query q (query = the client's bytes q was parsed from, whose
 * question query[12, q->qend) is copied verbatim): id from q, QR=1, opcode
 * 0, RD copied from q->flags, RA=1, the rcode; then one A or AAAA record
 * per address in addrs[0, n) whose family matches q->qtype (A: AF_INET,
 * AAAA: AF_INET6; others skipped), each named by a compression pointer to
 * offset 12, class IN, TTL ttl. With no matching address and rcode NOERROR
 * it is NODATA. Returns the length, or DNS_MSG_EBIG when cap (or
 * DNS_MSG_MAX) is too small, DNS_MSG_ESHORT for a q->qend too small to
 * hold a question. */
__attribute__((warn_unused_result)) int
dns_msg_build_reply(const dns_question *q, const uint8_t *query, uint8_t rcode,
                    const struct sockaddr_storage *addrs, size_t n, uint32_t ttl, uint8_t *out,
                    size_t cap);

/* A recursive query (RD=1) for name (text, an optional trailing dot; "" or
 * "." is the root), qtype, class IN, with id. No escapes: every byte but
 * the dots is taken as it is, and only those parse_query accepts are
 * allowed. Returns the length or a negative dns_msg_status (EBADNAME for
 * an empty label, a label over 63 or a name over 255 octets; EBIG when cap
 * is too small). */
__attribute__((warn_unused_result)) int dns_msg_build_query(const char *name, uint16_t qtype,
                                                            uint16_t id, uint8_t *out,
                                                            size_t cap);

/* The A (qtype A) or AAAA (qtype AAAA) addresses of the answer section, of
 * class IN and the right RDATA length, port 0, at most max, in order,
 * whatever their owner names (a CNAME chain in front is passed over); *ttl
 * the least TTL among those returned (0 when none). Any other qtype gives
 * 0. Returns how many, or a negative dns_msg_status (ESHORT, EBADNAME,
 * EBIG for an answer count over DNS_MSG_MAX_RRS). */
__attribute__((warn_unused_result)) int dns_msg_addresses(const uint8_t *m, size_t n,
                                                          uint16_t qtype,
                                                          struct sockaddr_storage *out,
                                                          size_t max, uint32_t *ttl);

#endif
