/* fuzz_dns_msg.c - libFuzzer target: the DNS codec on any message (parsed as a query and as an answer, aged, truncated, its addresses read, a reply built) and a store and lookup round in a small answer cache. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <netinet/in.h>

#include "proto/dns_msg.h"
#include "runtime/dns_answers.h"

/* Input: a mode byte, then the message.
 *   mode bits 0-2: how many addresses dns_msg_addresses may return;
 *   bits 3-7: seconds the fake clock moves before this input, and the
 *   seconds aged. */

#define CHECK(x)                                                                                   \
	do {                                                                                       \
		if (!(x))                                                                          \
			abort();                                                                   \
	} while (0)

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* What parse_query promises of a question it accepts. */
static void check_question(const dns_question *q, size_t n)
{
	size_t len = strnlen(q->name, sizeof q->name);
	CHECK(len < sizeof q->name);
	for (size_t i = 0; i < len; i++) {
		char c = q->name[i];
		CHECK(c > 0x20 && c < 0x7f && !(c >= 'A' && c <= 'Z'));
		CHECK(c != '.' || (i > 0 && i + 1 < len && q->name[i - 1] != '.'));
	}
	CHECK(q->qend >= DNS_HEADER_LEN + 5 && q->qend <= n);
	CHECK(q->udp_size >= DNS_UDP_PLAIN_MAX);
	CHECK(q->edns || q->udp_size == DNS_UDP_PLAIN_MAX);

	/* its name builds a query again, which reads back the same */
	uint8_t b[DNS_HEADER_LEN + 255 + 4];
	int blen = dns_msg_build_query(q->name, q->qtype, q->id, b, sizeof b);
	CHECK(blen > 0 && (size_t)blen == q->qend);
	dns_question again;
	CHECK(dns_msg_parse_query(b, (size_t)blen, &again) == DNS_MSG_OK);
	CHECK(strcmp(again.name, q->name) == 0 && again.qtype == q->qtype);
}

static void check_info(const dns_answer_info *info, const uint8_t *m, size_t n)
{
	CHECK(info->n_ttl <= DNS_MSG_MAX_RRS);
	CHECK(info->n_ttl <= (size_t)info->an + info->ns + info->ar);
	for (size_t i = 0; i < info->n_ttl; i++)
		CHECK(info->ttl_off[i] >= DNS_HEADER_LEN && info->ttl_off[i] + 4u <= n);
	CHECK(info->id == (m[0] << 8 | m[1]));
	CHECK(info->negative == (info->rcode == DNS_RCODE_NXDOMAIN ||
	                         (info->rcode == DNS_RCODE_NOERROR && info->an == 0)));
	CHECK(info->min_ttl <= INT32_MAX);
	if (info->negative && !info->soa)
		CHECK(info->min_ttl == 0);
}

/* Aging lowers every TTL field by the elapsed seconds (floor 0) and
 * leaves every other byte alone. (The message need not scan the same
 * afterwards: a pointer may aim a name at bytes that are also a TTL.) */
static void check_age(const uint8_t *m, size_t n, const dns_answer_info *info, uint32_t secs)
{
	static uint8_t copy[DNS_MSG_MAX], is_ttl[DNS_MSG_MAX];
	memcpy(copy, m, n);
	memset(is_ttl, 0, n);
	dns_msg_age(copy, n, info, secs);
	for (size_t i = 0; i < info->n_ttl; i++) {
		uint32_t before = get32(m + info->ttl_off[i]), after = get32(copy + info->ttl_off[i]);
		CHECK(after == (before > secs ? before - secs : 0));
		memset(is_ttl + info->ttl_off[i], 1, 4);
	}
	for (size_t i = 0; i < n; i++)
		CHECK(is_ttl[i] || copy[i] == m[i]);
}

static void check_truncate(const uint8_t *m, size_t n, uint16_t qend)
{
	static uint8_t copy[DNS_MSG_MAX];
	memcpy(copy, m, n);
	size_t t = dns_msg_truncate(copy, n, qend, DNS_UDP_PLAIN_MAX);
	if (n <= DNS_UDP_PLAIN_MAX) {
		CHECK(t == n && memcmp(copy, m, n) == 0);
		return;
	}
	CHECK(t >= DNS_HEADER_LEN && t <= DNS_UDP_PLAIN_MAX && t <= n);
	CHECK(copy[2] & 0x02);
	CHECK(memcmp(copy + 6, "\0\0\0\0\0\0", 6) == 0);
}

/* The addresses, then a reply to q made of them, which scans as an answer
 * to q with exactly those. */
static void check_addresses(const uint8_t *m, size_t n, const dns_question *q, size_t max)
{
	struct sockaddr_storage out[8];
	uint32_t ttl;
	uint16_t qtype = q ? q->qtype : DNS_TYPE_A;
	int k = dns_msg_addresses(m, n, qtype, out, max, &ttl);
	if (k < 0) {
		CHECK(k >= DNS_MSG_EMISMATCH && ttl == 0);
		return;
	}
	CHECK((size_t)k <= max && (k > 0 || ttl == 0));
	for (int i = 0; i < k; i++)
		CHECK(out[i].ss_family == (qtype == DNS_TYPE_A ? AF_INET : AF_INET6));
	if (!q)
		return;

	static uint8_t reply[DNS_MSG_MAX];
	int len = dns_msg_build_reply(q, m, DNS_RCODE_NOERROR, out, (size_t)k, ttl, reply,
	                              sizeof reply);
	CHECK(len >= q->qend && (size_t)len <= sizeof reply);
	static dns_answer_info info;
	CHECK(dns_msg_scan_answer(reply, (size_t)len, q, &info) == DNS_MSG_OK);
	CHECK(info.an == k && info.negative == (k == 0));
	struct sockaddr_storage back[8];
	uint32_t ttl2;
	CHECK(dns_msg_addresses(reply, (size_t)len, qtype, back, 8, &ttl2) == k);
	CHECK(memcmp(back, out, (size_t)k * sizeof out[0]) == 0);
	CHECK(ttl2 == (k ? ttl : 0));
}

/* One store of the answer m to q, then a lookup at once: a hit when the
 * answer is one the cache keeps, equal to m but for the id (the cache
 * lives across inputs). */
static void check_cache(const uint8_t *m, size_t n, const dns_question *q,
                        const dns_answer_info *info, uint64_t now)
{
	static dns_answers *c;
	if (!c)
		c = dns_answers_new(4);
	CHECK(c);
	dns_answers_store(c, q, m, n, info, now);
	static uint8_t out[DNS_ANSWERS_ENTRY_MAX];
	size_t len;
	dns_answers_result res = dns_answers_lookup(c, q, now, out, sizeof out, &len);
	bool kept = !info->tc && n <= DNS_ANSWERS_ENTRY_MAX &&
	            (info->rcode == DNS_RCODE_NOERROR || info->rcode == DNS_RCODE_NXDOMAIN);
	if (!kept) { /* an answer kept from an earlier input may be found */
		CHECK(res == DNS_ANSWERS_MISS ? len == 0 : len >= DNS_HEADER_LEN && len <= sizeof out);
		return;
	}
	CHECK(res == DNS_ANSWERS_HIT && len == n);
	CHECK(out[0] == q->id >> 8 && out[1] == (q->id & 0xff));
	CHECK(memcmp(out + 2, m + 2, n - 2) == 0); /* stored and looked up at once: nothing aged */
	dns_answers_stats st;
	dns_answers_stats_get(c, &st);
	CHECK(st.entries >= 1 && st.entries <= 4);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint64_t now = 1000000;
	if (size < 1 || size - 1 > DNS_MSG_MAX)
		return 0;
	uint8_t mode = data[0];
	const uint8_t *m = data + 1;
	size_t n = size - 1;
	uint32_t secs = mode >> 3;
	now += (uint64_t)secs * 1000;

	dns_question q;
	int rc = dns_msg_parse_query(m, n, &q);
	CHECK(rc <= DNS_MSG_OK && rc >= DNS_MSG_EMISMATCH && rc != DNS_MSG_EMISMATCH);
	if (rc == DNS_MSG_OK)
		check_question(&q, n);
	check_addresses(m, n, rc == DNS_MSG_OK ? &q : NULL, mode & 7);

	static dns_answer_info info;
	rc = dns_msg_scan_answer(m, n, NULL, &info);
	CHECK(rc <= DNS_MSG_OK && rc >= DNS_MSG_EMISMATCH && rc != DNS_MSG_EMISMATCH);
	if (rc != DNS_MSG_OK) {
		check_truncate(m, n, DNS_HEADER_LEN);
		return 0;
	}
	check_info(&info, m, n);
	check_age(m, n, &info, secs);

	/* The question the answer carries, read as a query would be (QR and
	 * opcode cleared): the answer must then match it. */
	static uint8_t asq[DNS_MSG_MAX];
	memcpy(asq, m, n);
	asq[2] &= 0x07;
	dns_question aq;
	rc = dns_msg_parse_query(asq, n, &aq);
	check_truncate(m, n, rc == DNS_MSG_OK ? aq.qend : 0);
	if (rc != DNS_MSG_OK)
		return 0;
	static dns_answer_info qinfo;
	rc = dns_msg_scan_answer(m, n, &aq, &qinfo);
	if (!(m[2] & 0x80)) {
		CHECK(rc == DNS_MSG_EMISMATCH);
		return 0;
	}
	CHECK(rc == DNS_MSG_OK);
	CHECK(qinfo.id == info.id && qinfo.rcode == info.rcode && qinfo.tc == info.tc);
	CHECK(qinfo.negative == info.negative && qinfo.min_ttl == info.min_ttl &&
	      qinfo.soa == info.soa && qinfo.n_ttl == info.n_ttl);
	CHECK(memcmp(qinfo.ttl_off, info.ttl_off, info.n_ttl * sizeof info.ttl_off[0]) == 0);
	check_cache(m, n, &aq, &qinfo, now);
	return 0;
}
