/* dns_msg.c - the DNS wire codec: one name walker with loop protection, one record walker, and the builders on top. */
#include "proto/dns_msg.h"

#include <netinet/in.h>
#include <string.h>

#include "base/bytes.h"

enum {
	MSG_OK,
	MSG_SHORT,
	MSG_BADNAME,
	MSG_NOTQUERY,
	MSG_QDCOUNT,
	MSG_BIG,
	MSG_MISMATCH,
	MSG_UNKNOWN,
	MSG_COUNT_
};
static const char *const msgs[MSG_COUNT_] = {
	[MSG_OK] = "dns: ok",
	[MSG_SHORT] = "dns: truncated message",
	[MSG_BADNAME] = "dns: bad name",
	[MSG_NOTQUERY] = "dns: not a query",
	[MSG_QDCOUNT] = "dns: not exactly one question",
	[MSG_BIG] = "dns: too many records or no room",
	[MSG_MISMATCH] = "dns: answer does not match the question",
	[MSG_UNKNOWN] = "dns: unknown error",
};

const char *dns_msg_strerror(int status)
{
	/* dns_msg_status counts down from 0 in the table's order */
	if (status > 0 || status < -(MSG_COUNT_ - 2))
		return msgs[MSG_UNKNOWN];
	return msgs[-status];
}

/* Header fields (RFC 1035 4.1.1). */
#define FLAG_QR 0x8000
#define FLAG_TC 0x0200
#define FLAG_RD 0x0100
#define FLAG_RA 0x0080
#define OPCODE(flags) (((flags) >> 11) & 0xf)
#define RCODE(flags) ((flags) & 0xf)
#define OFF_FLAGS 2
#define OFF_QD 4
#define OFF_AN 6
#define OFF_NS 8
#define OFF_AR 10

/* RFC 1035 2.3.4: 63-octet labels, 255-octet names (length octets and the
 * root's zero included). */
#define LABEL_MAX 63
#define NAME_WIRE_MAX 255

/* TYPE, CLASS, TTL, RDLENGTH after a record's owner (RFC 1035 4.1.3). */
#define RR_FIXED 10
/* QTYPE, QCLASS after the question's name (RFC 1035 4.1.2). */
#define Q_FIXED 4
/* An SOA's RDATA ends with SERIAL, REFRESH, RETRY, EXPIRE, MINIMUM (RFC 1035 3.3.13). */
#define SOA_FIXED 20

/* A question's name becomes the cache key and a log's text, so its labels
 * must read back the same: a '.' inside a label would make "a.b" one label
 * and two at once, a NUL would end the text early. Printable ASCII but the
 * dot is what hostnames and service labels (_sip._tcp) use. */
static bool text_byte(uint8_t c) { return c > 0x20 && c < 0x7f && c != '.'; }

/* Walks the name at *off in m[0, n), sets *off just past it (past the first
 * pointer when it is compressed) and, when text is not NULL, writes its
 * lower-cased text there (DNS_MSG_NAME_TEXT bytes).
 * Loop protection (RFC 1035 4.1.4 allows pointers only to prior
 * occurrences): every pointer must go strictly before the start of the run
 * of labels it ends. The start therefore decreases at each jump, so the walk
 * ends after at most one jump per byte of the message, and a pointer at
 * itself, past itself or into the labels leading to it (the loop of two
 * pointers at each other among them) is refused. A pointer into the header
 * is refused too: no name can start there, and build_reply copies a
 * question under a different header. */
static int walk_name(const uint8_t *m, size_t n, size_t *off, char *text)
{
	size_t p = *off, run = *off, end = 0, wire = 0, t = 0;
	for (;;) {
		if (p >= n)
			return DNS_MSG_ESHORT;
		uint8_t len = m[p];
		if ((len & 0xc0) == 0xc0) {
			if (p + 1 >= n)
				return DNS_MSG_ESHORT;
			size_t to = (size_t)(len & 0x3f) << 8 | m[p + 1];
			if (to >= run || to < DNS_HEADER_LEN)
				return DNS_MSG_EBADNAME;
			if (end == 0)
				end = p + 2;
			p = run = to;
			continue;
		}
		if (len & 0xc0) /* 01 and 10: extended label types, none in use (RFC 6891 5) */
			return DNS_MSG_EBADNAME;
		wire += 1 + (size_t)len;
		if (wire > NAME_WIRE_MAX)
			return DNS_MSG_EBADNAME;
		if (len == 0)
			break;
		if (p + 1 + len > n)
			return DNS_MSG_ESHORT;
		if (text) {
			if (t > 0)
				text[t++] = '.';
			for (size_t i = 0; i < len; i++) {
				uint8_t c = m[p + 1 + i];
				if (!text_byte(c))
					return DNS_MSG_EBADNAME;
				text[t++] = (char)bytes_ascii_lower(c);
			}
		}
		p += 1 + (size_t)len;
	}
	if (text)
		text[t] = '\0'; /* t <= wire - 2 <= 253 */
	*off = end ? end : p + 1;
	return DNS_MSG_OK;
}

/* One resource record's fixed part, found by walk_rr. */
typedef struct rr {
	uint16_t type, class;
	uint32_t ttl;
	size_t ttl_off;
	size_t rdata, rdlen; /* RDATA is m[rdata, rdata + rdlen) */
} rr;

/* Walks the record at *off (owner, fixed part, RDATA bounds) and sets *off
 * past it. */
static int walk_rr(const uint8_t *m, size_t n, size_t *off, rr *r)
{
	int rc = walk_name(m, n, off, NULL);
	if (rc != DNS_MSG_OK)
		return rc;
	size_t p = *off;
	if (n - p < RR_FIXED)
		return DNS_MSG_ESHORT;
	r->type = bytes_get16(m + p);
	r->class = bytes_get16(m + p + 2);
	r->ttl_off = p + 4;
	r->ttl = bytes_get32(m + p + 4);
	r->rdlen = bytes_get16(m + p + 8);
	r->rdata = p + RR_FIXED;
	if (n - r->rdata < r->rdlen)
		return DNS_MSG_ESHORT;
	*off = r->rdata + r->rdlen;
	return DNS_MSG_OK;
}

/* Walks count questions from *off, the first one's name into text when
 * text is not NULL, its type and class into *type and *class. */
static int walk_questions(const uint8_t *m, size_t n, size_t *off, size_t count, char *text,
                          uint16_t *type, uint16_t *class)
{
	for (size_t i = 0; i < count; i++) {
		int rc = walk_name(m, n, off, i == 0 ? text : NULL);
		if (rc != DNS_MSG_OK)
			return rc;
		if (n - *off < Q_FIXED)
			return DNS_MSG_ESHORT;
		if (i == 0 && type) {
			*type = bytes_get16(m + *off);
			*class = bytes_get16(m + *off + 2);
		}
		*off += Q_FIXED;
	}
	return DNS_MSG_OK;
}

/* The records after the questions: AN + NS + AR, bounded. */
static int record_count(const uint8_t *m, size_t *total)
{
	*total = (size_t)bytes_get16(m + OFF_AN) + bytes_get16(m + OFF_NS) + bytes_get16(m + OFF_AR);
	return *total > DNS_MSG_MAX_RRS ? DNS_MSG_EBIG : DNS_MSG_OK;
}

int dns_msg_parse_query(const uint8_t *m, size_t n, dns_question *q)
{
	if (n < DNS_HEADER_LEN)
		return DNS_MSG_ESHORT;
	uint16_t flags = bytes_get16(m + OFF_FLAGS);
	if ((flags & FLAG_QR) || OPCODE(flags) != 0)
		return DNS_MSG_ENOTQUERY;
	if (bytes_get16(m + OFF_QD) != 1)
		return DNS_MSG_EQDCOUNT;
	size_t total;
	int rc = record_count(m, &total);
	if (rc != DNS_MSG_OK)
		return rc;

	size_t off = DNS_HEADER_LEN;
	rc = walk_questions(m, n, &off, 1, q->name, &q->qtype, &q->qclass);
	if (rc != DNS_MSG_OK)
		return rc;
	q->id = bytes_get16(m);
	q->flags = flags;
	q->qend = (uint16_t)off; /* a name of at most 255 octets after a 12-byte header */
	q->edns = false;
	q->udp_size = DNS_UDP_PLAIN_MAX;

	size_t first_ar = total - bytes_get16(m + OFF_AR);
	for (size_t i = 0; i < total; i++) {
		rr r;
		rc = walk_rr(m, n, &off, &r);
		if (rc != DNS_MSG_OK)
			return rc;
		/* RFC 6891 6.1.1: OPT's CLASS is the requestor's UDP payload size;
		 * values under 512 are treated as 512 (6.2.3). */
		if (i >= first_ar && r.type == DNS_TYPE_OPT && !q->edns) {
			q->edns = true;
			q->udp_size = r.class > DNS_UDP_PLAIN_MAX ? r.class : DNS_UDP_PLAIN_MAX;
		}
	}
	return DNS_MSG_OK;
}

/* RFC 2181 8: a TTL with its most significant bit set is taken as 0. */
static uint32_t ttl_value(uint32_t ttl) { return ttl > INT32_MAX ? 0 : ttl; }

/* An SOA's TTL combined with its MINIMUM (RFC 2308 5), or an error when its
 * RDATA does not hold two names and the five numbers. */
static int soa_ttl(const uint8_t *m, const rr *r, uint32_t *ttl)
{
	size_t end = r->rdata + r->rdlen, off = r->rdata;
	for (int i = 0; i < 2; i++) { /* MNAME, RNAME */
		int rc = walk_name(m, end, &off, NULL);
		if (rc != DNS_MSG_OK)
			return rc;
	}
	if (end - off < SOA_FIXED)
		return DNS_MSG_ESHORT;
	uint32_t minimum = ttl_value(bytes_get32(m + off + 16));
	uint32_t own = ttl_value(r->ttl);
	*ttl = own < minimum ? own : minimum;
	return DNS_MSG_OK;
}

int dns_msg_scan_answer(const uint8_t *m, size_t n, const dns_question *q, dns_answer_info *out)
{
	if (n < DNS_HEADER_LEN)
		return DNS_MSG_ESHORT;
	if (n > DNS_MSG_MAX) /* ttl_off holds 16-bit offsets */
		return DNS_MSG_EBIG;
	uint16_t flags = bytes_get16(m + OFF_FLAGS);
	size_t qd = bytes_get16(m + OFF_QD);
	if (q && (!(flags & FLAG_QR) || qd != 1))
		return DNS_MSG_EMISMATCH;
	size_t total;
	int rc = record_count(m, &total);
	if (rc != DNS_MSG_OK)
		return rc;

	size_t off = DNS_HEADER_LEN;
	char name[DNS_MSG_NAME_TEXT];
	uint16_t type = 0, class = 0;
	rc = walk_questions(m, n, &off, qd, q ? name : NULL, &type, &class);
	if (rc != DNS_MSG_OK)
		return rc;
	if (q && (type != q->qtype || class != q->qclass ||
	          !bytes_ascii_ieq(name, strlen(name), q->name, strnlen(q->name, sizeof q->name))))
		return DNS_MSG_EMISMATCH;

	out->id = bytes_get16(m);
	out->rcode = RCODE(flags);
	out->tc = (flags & FLAG_TC) != 0;
	out->an = bytes_get16(m + OFF_AN);
	out->ns = bytes_get16(m + OFF_NS);
	out->ar = bytes_get16(m + OFF_AR);
	out->negative = out->rcode == DNS_RCODE_NXDOMAIN ||
	                (out->rcode == DNS_RCODE_NOERROR && out->an == 0);
	out->soa = false;
	out->n_ttl = 0;

	uint32_t least = UINT32_MAX, soa = 0;
	bool any = false;
	for (size_t i = 0; i < total; i++) {
		rr r;
		rc = walk_rr(m, n, &off, &r);
		if (rc != DNS_MSG_OK)
			return rc;
		if (r.type == DNS_TYPE_OPT) /* its "TTL" is the extended RCODE and flags */
			continue;
		out->ttl_off[out->n_ttl++] = (uint16_t)r.ttl_off;
		bool authority = i >= out->an && i < (size_t)out->an + out->ns;
		if (i < (size_t)out->an + out->ns) {
			uint32_t v = ttl_value(r.ttl);
			least = v < least ? v : least;
			any = true;
		}
		if (authority && r.type == DNS_TYPE_SOA && !out->soa) {
			rc = soa_ttl(m, &r, &soa);
			if (rc != DNS_MSG_OK)
				return rc;
			out->soa = true;
		}
	}
	if (out->negative)
		out->min_ttl = out->soa ? soa : 0;
	else
		out->min_ttl = any ? least : 0;
	return DNS_MSG_OK;
}

static void put32(uint8_t *p, uint32_t v)
{
	bytes_put16(p, (uint16_t)(v >> 16));
	bytes_put16(p + 2, (uint16_t)v);
}

void dns_msg_age(uint8_t *m, size_t n, const dns_answer_info *info, uint32_t elapsed_s)
{
	for (size_t i = 0; i < info->n_ttl && i < DNS_MSG_MAX_RRS; i++) {
		size_t off = info->ttl_off[i];
		if (off > n || n - off < 4)
			continue;
		uint32_t ttl = bytes_get32(m + off);
		put32(m + off, ttl > elapsed_s ? ttl - elapsed_s : 0);
	}
}

void dns_msg_set_id(uint8_t *m, uint16_t id) { bytes_put16(m, id); }

size_t dns_msg_truncate(uint8_t *m, size_t n, uint16_t qend, size_t limit)
{
	if (n <= limit || n < DNS_HEADER_LEN)
		return n;
	size_t keep = qend;
	if (keep < DNS_HEADER_LEN || keep > n) {
		keep = DNS_HEADER_LEN;
		bytes_put16(m + OFF_QD, 0);
	}
	bytes_put16(m + OFF_FLAGS, bytes_get16(m + OFF_FLAGS) | FLAG_TC);
	bytes_put16(m + OFF_AN, 0);
	bytes_put16(m + OFF_NS, 0);
	bytes_put16(m + OFF_AR, 0);
	return keep;
}

/* The smallest question: the root name's one octet and QTYPE, QCLASS. */
#define QUESTION_MIN (1 + Q_FIXED)
/* A pointer to the question's name (offset 12, RFC 1035 4.1.4). */
#define PTR_TO_QUESTION 0xc00c

int dns_msg_build_reply(const dns_question *q, const uint8_t *query, uint8_t rcode,
                        const struct sockaddr_storage *addrs, size_t n, uint32_t ttl,
                        uint8_t *out, size_t cap)
{
	if (q->qend < DNS_HEADER_LEN + QUESTION_MIN)
		return DNS_MSG_ESHORT;
	int family = q->qtype == DNS_TYPE_A ? AF_INET : q->qtype == DNS_TYPE_AAAA ? AF_INET6 : -1;
	size_t rdlen = family == AF_INET ? 4 : 16;
	size_t count = 0;
	for (size_t i = 0; i < n; i++)
		count += addrs[i].ss_family == family;
	size_t len = q->qend + count * (2 + RR_FIXED + rdlen);
	if (len > cap || len > DNS_MSG_MAX)
		return DNS_MSG_EBIG;

	bytes_put16(out, q->id);
	bytes_put16(out + OFF_FLAGS,
	            (uint16_t)(FLAG_QR | (q->flags & FLAG_RD) | FLAG_RA | (rcode & 0xf)));
	bytes_put16(out + OFF_QD, 1);
	bytes_put16(out + OFF_AN, (uint16_t)count);
	bytes_put16(out + OFF_NS, 0);
	bytes_put16(out + OFF_AR, 0);
	memcpy(out + DNS_HEADER_LEN, query + DNS_HEADER_LEN, q->qend - DNS_HEADER_LEN);

	uint8_t *p = out + q->qend;
	for (size_t i = 0; i < n; i++) {
		if (addrs[i].ss_family != family)
			continue;
		bytes_put16(p, PTR_TO_QUESTION);
		bytes_put16(p + 2, q->qtype);
		bytes_put16(p + 4, DNS_CLASS_IN);
		put32(p + 6, ttl);
		bytes_put16(p + 10, (uint16_t)rdlen);
		if (family == AF_INET)
			memcpy(p + 12, &((const struct sockaddr_in *)&addrs[i])->sin_addr, 4);
		else
			memcpy(p + 12, &((const struct sockaddr_in6 *)&addrs[i])->sin6_addr, 16);
		p += 2 + RR_FIXED + rdlen;
	}
	return (int)len;
}

/* name[0, len) (no trailing dot) is labels of 1 to 63 bytes parse_query
 * would read back as they are. */
static bool text_name_ok(const char *name, size_t len)
{
	size_t start = 0;
	for (size_t i = 0; len > 0 && i <= len; i++) {
		if (i < len && name[i] != '.') {
			if (!text_byte((uint8_t)name[i]))
				return false;
			continue;
		}
		if (i == start || i - start > LABEL_MAX)
			return false;
		start = i + 1;
	}
	return true;
}

int dns_msg_build_query(const char *name, uint16_t qtype, uint16_t id, uint8_t *out, size_t cap)
{
	size_t len = strlen(name);
	if (len > 0 && name[len - 1] == '.')
		len--;
	/* Each dot becomes a length octet, plus one for the first label and
	 * the root's zero: len + 2 octets, or 1 for the root alone. */
	size_t wire = len == 0 ? 1 : len + 2;
	if (wire > NAME_WIRE_MAX || !text_name_ok(name, len))
		return DNS_MSG_EBADNAME;
	size_t total = DNS_HEADER_LEN + wire + Q_FIXED;
	if (total > cap)
		return DNS_MSG_EBIG;

	bytes_put16(out, id);
	bytes_put16(out + OFF_FLAGS, FLAG_RD);
	bytes_put16(out + OFF_QD, 1);
	bytes_put16(out + OFF_AN, 0);
	bytes_put16(out + OFF_NS, 0);
	bytes_put16(out + OFF_AR, 0);
	uint8_t *p = out + DNS_HEADER_LEN;
	for (size_t start = 0, i = 0; len > 0 && i <= len; i++) {
		if (i < len && name[i] != '.')
			continue;
		*p++ = (uint8_t)(i - start);
		memcpy(p, name + start, i - start);
		p += i - start;
		start = i + 1;
	}
	*p++ = 0;
	bytes_put16(p, qtype);
	bytes_put16(p + 2, DNS_CLASS_IN);
	return (int)total;
}

int dns_msg_addresses(const uint8_t *m, size_t n, uint16_t qtype, struct sockaddr_storage *out,
                      size_t max, uint32_t *ttl)
{
	*ttl = 0;
	if (n < DNS_HEADER_LEN)
		return DNS_MSG_ESHORT;
	size_t an = bytes_get16(m + OFF_AN);
	if (an > DNS_MSG_MAX_RRS)
		return DNS_MSG_EBIG;
	size_t off = DNS_HEADER_LEN;
	int rc = walk_questions(m, n, &off, bytes_get16(m + OFF_QD), NULL, NULL, NULL);
	if (rc != DNS_MSG_OK)
		return rc;
	size_t want = qtype == DNS_TYPE_A ? 4 : qtype == DNS_TYPE_AAAA ? 16 : 0;
	size_t k = 0;
	uint32_t least = UINT32_MAX;
	for (size_t i = 0; i < an; i++) {
		rr r;
		rc = walk_rr(m, n, &off, &r);
		if (rc != DNS_MSG_OK)
			return rc;
		if (want == 0 || k >= max || r.type != qtype || r.class != DNS_CLASS_IN ||
		    r.rdlen != want)
			continue;
		struct sockaddr_storage *ss = &out[k++];
		memset(ss, 0, sizeof *ss);
		if (want == 4) {
			struct sockaddr_in *in = (struct sockaddr_in *)ss;
			in->sin_family = AF_INET;
			memcpy(&in->sin_addr, m + r.rdata, 4);
		} else {
			struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
			in6->sin6_family = AF_INET6;
			memcpy(&in6->sin6_addr, m + r.rdata, 16);
		}
		uint32_t v = ttl_value(r.ttl);
		least = v < least ? v : least;
	}
	*ttl = k ? least : 0;
	return (int)k;
}
