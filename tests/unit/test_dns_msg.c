/* test_dns_msg.c - the DNS wire codec on hand-made messages: names and compression, bounds, EDNS, TTLs, truncation, the builders, the texts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cmocka.h>

#include "proto/dns_msg.h"

#include "dnstest.h"

#define F_QUERY 0x0100    /* RD */
#define F_RESPONSE 0x8180 /* QR, RD, RA, NOERROR */

static struct sockaddr_storage ip(const char *text)
{
	struct sockaddr_storage ss;
	memset(&ss, 0, sizeof ss);
	if (strchr(text, ':')) {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
		in6->sin6_family = AF_INET6;
		assert_int_equal(inet_pton(AF_INET6, text, &in6->sin6_addr), 1);
	} else {
		struct sockaddr_in *in = (struct sockaddr_in *)&ss;
		in->sin_family = AF_INET;
		assert_int_equal(inet_pton(AF_INET, text, &in->sin_addr), 1);
	}
	return ss;
}

static void assert_ip(const struct sockaddr_storage *ss, const char *text)
{
	char buf[INET6_ADDRSTRLEN];
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
		assert_int_equal(in->sin_port, 0);
		assert_non_null(inet_ntop(AF_INET, &in->sin_addr, buf, sizeof buf));
	} else {
		assert_int_equal(ss->ss_family, AF_INET6);
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
		assert_int_equal(in6->sin6_port, 0);
		assert_non_null(inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof buf));
	}
	assert_string_equal(buf, text);
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int parse(const wmsg *w, dns_question *q) { return dns_msg_parse_query(w->b, w->n, q); }

static int scan(const wmsg *w, const dns_question *q, dns_answer_info *info)
{
	return dns_msg_scan_answer(w->b, w->n, q, info);
}

static void strerror_texts(void **state)
{
	(void)state;
	static const struct {
		int status;
		const char *text;
	} cases[] = {
		{DNS_MSG_OK, "dns: ok"},
		{DNS_MSG_ESHORT, "dns: truncated message"},
		{DNS_MSG_EBADNAME, "dns: bad name"},
		{DNS_MSG_ENOTQUERY, "dns: not a query"},
		{DNS_MSG_EQDCOUNT, "dns: not exactly one question"},
		{DNS_MSG_EBIG, "dns: too many records or no room"},
		{DNS_MSG_EMISMATCH, "dns: answer does not match the question"},
		{-7, "dns: unknown error"},
		{1, "dns: unknown error"},
		{-1000, "dns: unknown error"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		assert_string_equal(dns_msg_strerror(cases[i].status), cases[i].text);
}

static void query_round_trip(void **state)
{
	(void)state;
	uint8_t b[512];
	int len = dns_msg_build_query("WWW.Example.COM.", DNS_TYPE_AAAA, 0xbeef, b, sizeof b);
	assert_int_equal(len, 12 + 17 + 4);
	dns_question q;
	assert_int_equal(dns_msg_parse_query(b, (size_t)len, &q), DNS_MSG_OK);
	assert_int_equal(q.id, 0xbeef);
	assert_int_equal(q.flags, 0x0100);
	assert_string_equal(q.name, "www.example.com");
	assert_int_equal(q.qtype, DNS_TYPE_AAAA);
	assert_int_equal(q.qclass, DNS_CLASS_IN);
	assert_int_equal(q.qend, len);
	assert_false(q.edns);
	assert_int_equal(q.udp_size, 512);
	/* The case the caller gave is what goes on the wire (0x20 mixing is the caller's). */
	assert_memory_equal(b + 12, "\3WWW\7Example\3COM\0", 17);

	/* The root, with or without its dot. */
	len = dns_msg_build_query("", DNS_TYPE_NS, 1, b, sizeof b);
	assert_int_equal(len, 12 + 1 + 4);
	assert_int_equal(dns_msg_parse_query(b, (size_t)len, &q), DNS_MSG_OK);
	assert_string_equal(q.name, "");
	assert_int_equal(dns_msg_build_query(".", DNS_TYPE_NS, 1, b, sizeof b), 17);

	/* 253 characters (four labels of 63, 61) is the longest name. */
	char name[300];
	memset(name, 'a', sizeof name);
	name[63] = name[127] = name[191] = '.';
	name[253] = '\0';
	len = dns_msg_build_query(name, DNS_TYPE_A, 2, b, sizeof b);
	assert_int_equal(len, 12 + 255 + 4);
	assert_int_equal(dns_msg_parse_query(b, (size_t)len, &q), DNS_MSG_OK);
	assert_string_equal(q.name, name);
	name[253] = 'a';
	name[254] = '\0';
	assert_int_equal(dns_msg_build_query(name, DNS_TYPE_A, 2, b, sizeof b), DNS_MSG_EBADNAME);
}

static void query_builder_errors(void **state)
{
	(void)state;
	uint8_t b[512];
	char label64[80];
	memset(label64, 'x', 64);
	memcpy(label64 + 64, ".test", sizeof ".test");
	static const char *const bad[] = {"a..b", ".a", "a b", "a\tb", "caf\xc3\xa9.test", ".."};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		assert_int_equal(dns_msg_build_query(bad[i], DNS_TYPE_A, 1, b, sizeof b),
		                 DNS_MSG_EBADNAME);
	assert_int_equal(dns_msg_build_query(label64, DNS_TYPE_A, 1, b, sizeof b), DNS_MSG_EBADNAME);
	label64[63] = '.'; /* 63 is allowed: x{63}.ytest */
	label64[64] = 'y';
	assert_true(dns_msg_build_query(label64, DNS_TYPE_A, 1, b, sizeof b) > 0);
	/* "a.test": 12 + 8 + 4 = 24 bytes */
	assert_int_equal(dns_msg_build_query("a.test", DNS_TYPE_A, 1, b, 23), DNS_MSG_EBIG);
	assert_int_equal(dns_msg_build_query("a.test", DNS_TYPE_A, 1, b, 24), 24);
	/* a bad name is EBADNAME whatever the room */
	assert_int_equal(dns_msg_build_query("a..test", DNS_TYPE_A, 1, b, 3), DNS_MSG_EBADNAME);
}

static void query_header_checks(void **state)
{
	(void)state;
	dns_question q;
	wmsg w = {0};
	whdr(&w, 7, F_QUERY, 1, 0, 0, 0);
	wquestion(&w, "a.test", DNS_TYPE_A, DNS_CLASS_IN);
	assert_int_equal(parse(&w, &q), DNS_MSG_OK);

	/* every prefix is short, header and question alike */
	for (size_t n = 0; n < w.n; n++)
		assert_int_equal(dns_msg_parse_query(w.b, n, &q), DNS_MSG_ESHORT);

	static const struct {
		uint16_t flags, qd;
		int want;
	} cases[] = {
		{0x8100, 1, DNS_MSG_ENOTQUERY}, /* a response */
		{0x1100, 1, DNS_MSG_ENOTQUERY}, /* opcode 2 (STATUS) */
		{0x2800, 1, DNS_MSG_ENOTQUERY}, /* opcode 5 (UPDATE) */
		{0x0100, 0, DNS_MSG_EQDCOUNT},
		{0x0100, 2, DNS_MSG_EQDCOUNT},
		{0x0000, 1, DNS_MSG_OK},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		w.b[2] = (uint8_t)(cases[i].flags >> 8);
		w.b[3] = (uint8_t)cases[i].flags;
		w.b[5] = (uint8_t)cases[i].qd;
		assert_int_equal(parse(&w, &q), cases[i].want);
	}

	/* two real questions are refused too */
	wmsg two = {0};
	whdr(&two, 7, F_QUERY, 2, 0, 0, 0);
	wquestion(&two, "a.test", DNS_TYPE_A, DNS_CLASS_IN);
	wquestion(&two, "b.test", DNS_TYPE_A, DNS_CLASS_IN);
	assert_int_equal(parse(&two, &q), DNS_MSG_EQDCOUNT);
}

static void bad_names(void **state)
{
	(void)state;
	dns_question q;
	/* a label of 64: its length octet 0x40 is the reserved type 01 */
	wmsg w = {0};
	whdr(&w, 1, F_QUERY, 1, 0, 0, 0);
	w8(&w, 64);
	for (int i = 0; i < 64; i++)
		w8(&w, 'a');
	w8(&w, 0);
	w16(&w, 1);
	w16(&w, 1);
	assert_int_equal(parse(&w, &q), DNS_MSG_EBADNAME);
	w.b[12] = 0x80; /* the other reserved type */
	assert_int_equal(parse(&w, &q), DNS_MSG_EBADNAME);

	/* a name of 256 octets: three labels of 63, one of 62, the root */
	w = (wmsg){0};
	whdr(&w, 1, F_QUERY, 1, 0, 0, 0);
	for (int l = 0; l < 4; l++) {
		int len = l < 3 ? 63 : 62;
		w8(&w, (uint8_t)len);
		for (int i = 0; i < len; i++)
			w8(&w, 'b');
	}
	w8(&w, 0);
	w16(&w, 1);
	w16(&w, 1);
	assert_int_equal(parse(&w, &q), DNS_MSG_EBADNAME);
	w.b[12 + 64 * 3] = 61; /* one octet less: 255 is fine */
	memmove(w.b + 12 + 64 * 3 + 62, w.b + 12 + 64 * 3 + 63, w.n - (12 + 64 * 3 + 63));
	w.n--;
	assert_int_equal(parse(&w, &q), DNS_MSG_OK);
	assert_int_equal(strlen(q.name), 253);

	/* bytes without one text form: a dot inside a label, a NUL, a space */
	static const char *const labels[] = {"a.b", "a\0b", "a b"};
	for (size_t i = 0; i < 3; i++) {
		w = (wmsg){0};
		whdr(&w, 1, F_QUERY, 1, 0, 0, 0);
		w8(&w, 3);
		wbytes(&w, labels[i], 3);
		w8(&w, 0);
		w16(&w, 1);
		w16(&w, 1);
		assert_int_equal(parse(&w, &q), DNS_MSG_EBADNAME);
	}

	/* a question is at offset 12: any pointer there goes into the header or
	 * at or past itself */
	w = (wmsg){0};
	whdr(&w, 1, F_QUERY, 1, 0, 0, 0);
	wlabels(&w, "a");
	wptr(&w, 4);
	w16(&w, 1);
	w16(&w, 1);
	assert_int_equal(parse(&w, &q), DNS_MSG_EBADNAME);
	w.b[15] = 12;
	assert_int_equal(parse(&w, &q), DNS_MSG_EBADNAME);
}

/* A response to "www.test" A whose answers use the given owner bytes. */
static void response_head(wmsg *w, uint16_t an)
{
	whdr(w, 0x1234, F_RESPONSE, 1, an, 0, 0);
	wquestion(w, "www.test", DNS_TYPE_A, DNS_CLASS_IN);
}

static void compression_pointers(void **state)
{
	(void)state;
	dns_answer_info info;
	/* backward to the question, then chained: a CNAME whose target is
	 * "cdn" + pointer to the question, then an A named by a pointer to that
	 * target (two jumps) */
	wmsg w = {0};
	response_head(&w, 2);
	wptr(&w, 12);
	wrr(&w, DNS_TYPE_CNAME, DNS_CLASS_IN, 300, 6);
	size_t target = w.n;
	wlabels(&w, "cdn");
	wptr(&w, 12);
	size_t a_owner = w.n;
	wptr(&w, (uint16_t)target);
	wrr(&w, DNS_TYPE_A, DNS_CLASS_IN, 60, 4);
	wbytes(&w, "\xc0\x00\x02\x01", 4);
	assert_int_equal(scan(&w, NULL, &info), DNS_MSG_OK);
	assert_int_equal(info.n_ttl, 2);
	assert_int_equal(info.ttl_off[0], 12 + 14 + 2 + 4);
	assert_int_equal(info.ttl_off[1], a_owner + 2 + 4);
	assert_int_equal(info.min_ttl, 60);

	struct sockaddr_storage out[4];
	uint32_t ttl;
	assert_int_equal(dns_msg_addresses(w.b, w.n, DNS_TYPE_A, out, 4, &ttl), 1);
	assert_ip(&out[0], "192.0.2.1");
	assert_int_equal(ttl, 60);

	/* a self pointer */
	wmsg self = w;
	self.b[a_owner] = (uint8_t)(0xc0 | a_owner >> 8);
	self.b[a_owner + 1] = (uint8_t)a_owner;
	assert_int_equal(scan(&self, NULL, &info), DNS_MSG_EBADNAME);

	/* a forward pointer: the CNAME's owner at the A's */
	wmsg fwd = w;
	fwd.b[12 + 14] = (uint8_t)(0xc0 | a_owner >> 8);
	fwd.b[12 + 14 + 1] = (uint8_t)a_owner;
	assert_int_equal(scan(&fwd, NULL, &info), DNS_MSG_EBADNAME);

	/* two pointers at each other: the CNAME's target made a pointer to the
	 * A's owner, which points back at it */
	wmsg loop = w;
	loop.b[target] = (uint8_t)(0xc0 | a_owner >> 8);
	loop.b[target + 1] = (uint8_t)a_owner;
	assert_int_equal(scan(&loop, NULL, &info), DNS_MSG_EBADNAME);
	assert_int_equal(dns_msg_addresses(loop.b, loop.n, DNS_TYPE_A, out, 4, &ttl),
	                 DNS_MSG_EBADNAME);

	/* labels, then a pointer back into those labels */
	wmsg back = {0};
	response_head(&back, 1);
	size_t own = back.n;
	wlabels(&back, "x");
	wptr(&back, (uint16_t)own);
	wrr(&back, DNS_TYPE_A, DNS_CLASS_IN, 60, 4);
	wbytes(&back, "\xc0\x00\x02\x01", 4);
	assert_int_equal(scan(&back, NULL, &info), DNS_MSG_EBADNAME);
}

static void truncated_records(void **state)
{
	(void)state;
	dns_answer_info info;
	wmsg w = {0};
	whdr(&w, 1, 0x8183, 1, 1, 1, 0);
	wquestion(&w, "www.test", DNS_TYPE_A, DNS_CLASS_IN);
	wa(&w, 60, 192, 0, 2, 1);
	size_t soa = w.n;
	wsoa(&w, 3600, 300);
	assert_int_equal(scan(&w, NULL, &info), DNS_MSG_OK);
	/* header, question, owner, fixed part, rdata, an SOA's names and numbers:
	 * every prefix is short */
	for (size_t n = 0; n < w.n; n++)
		assert_int_equal(dns_msg_scan_answer(w.b, n, NULL, &info), DNS_MSG_ESHORT);
	/* an rdlength past the end */
	wmsg big = w;
	big.b[soa + 11]++;
	assert_int_equal(scan(&big, NULL, &info), DNS_MSG_ESHORT);
	/* an SOA whose RDLENGTH leaves out MINIMUM */
	wmsg soa_short = w;
	soa_short.b[soa + 11] -= 4;
	soa_short.n -= 4;
	assert_int_equal(scan(&soa_short, NULL, &info), DNS_MSG_ESHORT);
}

static void too_many_records(void **state)
{
	(void)state;
	dns_answer_info info;
	dns_question q;
	wmsg w = {0};
	whdr(&w, 1, F_RESPONSE, 1, DNS_MSG_MAX_RRS, 0, 0);
	wquestion(&w, "www.test", DNS_TYPE_A, DNS_CLASS_IN);
	for (int i = 0; i < DNS_MSG_MAX_RRS; i++)
		wa(&w, 60, 10, 0, (uint8_t)(i >> 8), (uint8_t)i);
	assert_int_equal(scan(&w, NULL, &info), DNS_MSG_OK);
	assert_int_equal(info.n_ttl, DNS_MSG_MAX_RRS);
	w.b[11] = 1; /* one more, in the additional section */
	assert_int_equal(scan(&w, NULL, &info), DNS_MSG_EBIG);

	wmsg qm = {0};
	whdr(&qm, 1, F_QUERY, 1, 0, 0, DNS_MSG_MAX_RRS + 1);
	wquestion(&qm, "www.test", DNS_TYPE_A, DNS_CLASS_IN);
	assert_int_equal(parse(&qm, &q), DNS_MSG_EBIG);
}

static void edns_payload_sizes(void **state)
{
	(void)state;
	static const struct {
		uint16_t payload, want;
	} cases[] = {{4096, 4096}, {1232, 1232}, {512, 512}, {100, 512}, {0, 512}, {65535, 65535}};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		wmsg w = {0};
		whdr(&w, 1, F_QUERY, 1, 0, 0, 1);
		wquestion(&w, "a.test", DNS_TYPE_A, DNS_CLASS_IN);
		wopt(&w, cases[i].payload);
		dns_question q;
		assert_int_equal(parse(&w, &q), DNS_MSG_OK);
		assert_true(q.edns);
		assert_int_equal(q.udp_size, cases[i].want);
		assert_int_equal(q.qend, 12 + 8 + 4);
		/* the OPT record cut short */
		assert_int_equal(dns_msg_parse_query(w.b, w.n - 1, &q), DNS_MSG_ESHORT);
	}
	/* an OPT outside the additional section is not EDNS */
	wmsg w = {0};
	whdr(&w, 1, F_QUERY, 1, 1, 0, 0);
	wquestion(&w, "a.test", DNS_TYPE_A, DNS_CLASS_IN);
	wopt(&w, 4096);
	dns_question q;
	assert_int_equal(parse(&w, &q), DNS_MSG_OK);
	assert_false(q.edns);
	assert_int_equal(q.udp_size, 512);
}

static void negative_ttls(void **state)
{
	(void)state;
	static const struct {
		uint16_t flags;
		bool soa;
		uint32_t ttl, minimum, want;
	} cases[] = {
		{0x8183, true, 3600, 300, 300}, /* NXDOMAIN: MINIMUM the lesser */
		{0x8180, true, 60, 900, 60},    /* NODATA: the SOA's own TTL the lesser */
		{0x8183, false, 0, 0, 0},       /* NXDOMAIN without SOA */
		{0x8180, false, 0, 0, 0},       /* NODATA without SOA */
		{0x8183, true, 0x80000000u, 300, 0}, /* a TTL with the top bit is 0 (RFC 2181 8) */
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		wmsg w = {0};
		whdr(&w, 9, cases[i].flags, 1, 0, cases[i].soa ? 1 : 0, 1);
		wquestion(&w, "nx.test", DNS_TYPE_A, DNS_CLASS_IN);
		if (cases[i].soa)
			wsoa(&w, cases[i].ttl, cases[i].minimum);
		wopt(&w, 1232);
		dns_answer_info info;
		assert_int_equal(scan(&w, NULL, &info), DNS_MSG_OK);
		assert_true(info.negative);
		assert_int_equal(info.soa, cases[i].soa);
		assert_int_equal(info.min_ttl, cases[i].want);
		assert_int_equal(info.rcode, cases[i].flags & 0xf);
		assert_int_equal(info.n_ttl, cases[i].soa ? 1 : 0); /* OPT has none */
		assert_int_equal(info.an, 0);
		assert_int_equal(info.ns, cases[i].soa ? 1 : 0);
		assert_int_equal(info.ar, 1);
		assert_int_equal(info.id, 9);
	}
}

/* answers 300, 200; authority NS 100; additional A 10 and an OPT */
static void positive_response(wmsg *w)
{
	whdr(w, 0x4242, F_RESPONSE, 1, 2, 1, 2);
	wquestion(w, "www.test", DNS_TYPE_A, DNS_CLASS_IN);
	wa(w, 300, 192, 0, 2, 1);
	wa(w, 200, 192, 0, 2, 2);
	wptr(w, 16); /* "test" inside the question */
	wrr(w, DNS_TYPE_NS, DNS_CLASS_IN, 100, 5);
	wlabels(w, "ns");
	wptr(w, 16);
	wname(w, "ns.test");
	wrr(w, DNS_TYPE_A, DNS_CLASS_IN, 10, 4);
	wbytes(w, "\xc0\x00\x02\x35", 4);
	wopt(w, 1232);
}

static void positive_min_ttl_and_aging(void **state)
{
	(void)state;
	wmsg w = {0};
	positive_response(&w);
	dns_answer_info info;
	assert_int_equal(scan(&w, NULL, &info), DNS_MSG_OK);
	assert_false(info.negative);
	assert_false(info.tc);
	assert_int_equal(info.rcode, 0);
	assert_int_equal(info.min_ttl, 100); /* the additional record's 10 does not count */
	assert_int_equal(info.n_ttl, 4);
	static const uint32_t before[] = {300, 200, 100, 10};
	for (int i = 0; i < 4; i++)
		assert_int_equal(get32(w.b + info.ttl_off[i]), before[i]);

	dns_msg_age(w.b, w.n, &info, 150);
	static const uint32_t after[] = {150, 50, 0, 0};
	for (int i = 0; i < 4; i++)
		assert_int_equal(get32(w.b + info.ttl_off[i]), after[i]);
	dns_answer_info again;
	assert_int_equal(scan(&w, NULL, &again), DNS_MSG_OK);
	assert_int_equal(again.min_ttl, 0);
	dns_msg_age(w.b, w.n, &info, UINT32_MAX);
	assert_int_equal(get32(w.b + info.ttl_off[0]), 0);

	dns_msg_set_id(w.b, 0xabcd);
	assert_int_equal(w.b[0], 0xab);
	assert_int_equal(w.b[1], 0xcd);
}

static void scan_against_the_question(void **state)
{
	(void)state;
	uint8_t qb[64];
	int qlen = dns_msg_build_query("WWW.test", DNS_TYPE_A, 0x4242, qb, sizeof qb);
	assert_true(qlen > 0);
	dns_question q;
	assert_int_equal(dns_msg_parse_query(qb, (size_t)qlen, &q), DNS_MSG_OK);

	wmsg w = {0};
	positive_response(&w);
	dns_answer_info info;
	assert_int_equal(scan(&w, &q, &info), DNS_MSG_OK);
	w.b[12 + 1] = 'W'; /* case does not matter */
	assert_int_equal(scan(&w, &q, &info), DNS_MSG_OK);

	wmsg other = w;
	other.b[12 + 3] = 'x'; /* wwx.test */
	assert_int_equal(scan(&other, &q, &info), DNS_MSG_EMISMATCH);
	assert_int_equal(scan(&other, NULL, &info), DNS_MSG_OK);
	other = w;
	other.b[12 + 10 + 1] = DNS_TYPE_AAAA;
	assert_int_equal(scan(&other, &q, &info), DNS_MSG_EMISMATCH);
	other = w;
	other.b[12 + 10 + 3] = 3; /* class CH */
	assert_int_equal(scan(&other, &q, &info), DNS_MSG_EMISMATCH);
	other = w;
	other.b[2] &= 0x7f; /* QR clear: a query */
	assert_int_equal(scan(&other, &q, &info), DNS_MSG_EMISMATCH);
	/* the client's own query is no answer */
	assert_int_equal(dns_msg_scan_answer(qb, (size_t)qlen, &q, &info), DNS_MSG_EMISMATCH);
}

static void truncation_keeps_the_question(void **state)
{
	(void)state;
	uint8_t qb[64];
	int qlen = dns_msg_build_query("many.test", DNS_TYPE_A, 77, qb, sizeof qb);
	assert_true(qlen > 0);
	dns_question q;
	assert_int_equal(dns_msg_parse_query(qb, (size_t)qlen, &q), DNS_MSG_OK);
	struct sockaddr_storage addrs[40];
	for (int i = 0; i < 40; i++) {
		char text[32];
		snprintf(text, sizeof text, "10.0.0.%d", i + 1);
		addrs[i] = ip(text);
	}
	uint8_t r[2048];
	int len = dns_msg_build_reply(&q, qb, DNS_RCODE_NOERROR, addrs, 40, 60, r, sizeof r);
	assert_int_equal(len, qlen + 40 * 16);
	assert_true(len > DNS_UDP_PLAIN_MAX);

	/* within the limit: untouched */
	assert_int_equal(dns_msg_truncate(r, (size_t)len, q.qend, (size_t)len), len);
	assert_int_equal(r[2] & 0x02, 0);

	size_t t = dns_msg_truncate(r, (size_t)len, q.qend, DNS_UDP_PLAIN_MAX);
	assert_int_equal(t, q.qend);
	assert_int_equal(r[2] & 0x02, 0x02); /* TC */
	assert_int_equal(r[2] & 0x80, 0x80); /* still a response */
	assert_memory_equal(r + 12, qb + 12, q.qend - 12);
	dns_answer_info info;
	assert_int_equal(dns_msg_scan_answer(r, t, &q, &info), DNS_MSG_OK);
	assert_true(info.tc);
	assert_int_equal(info.an + info.ns + info.ar, 0);
	assert_int_equal(info.id, 77);

	/* a qend that is not this message's keeps the header alone */
	len = dns_msg_build_reply(&q, qb, DNS_RCODE_NOERROR, addrs, 40, 60, r, sizeof r);
	assert_int_equal(dns_msg_truncate(r, (size_t)len, 5, 100), 12);
	assert_int_equal(r[4] | r[5], 0);
}

static void replies(void **state)
{
	(void)state;
	struct sockaddr_storage mixed[4] = {ip("192.0.2.1"), ip("2001:db8::1"), ip("192.0.2.2"),
	                                    ip("2001:db8::2")};
	static const struct {
		uint16_t qtype;
		uint8_t rcode;
		size_t n;
		int want;
		const char *first, *second;
	} cases[] = {
		{DNS_TYPE_A, DNS_RCODE_NOERROR, 1, 1, "192.0.2.1", NULL},
		{DNS_TYPE_A, DNS_RCODE_NOERROR, 4, 2, "192.0.2.1", "192.0.2.2"},
		{DNS_TYPE_AAAA, DNS_RCODE_NOERROR, 4, 2, "2001:db8::1", "2001:db8::2"},
		{DNS_TYPE_AAAA, DNS_RCODE_NOERROR, 1, 0, NULL, NULL},   /* NODATA */
		{DNS_TYPE_MX, DNS_RCODE_NOERROR, 4, 0, NULL, NULL},     /* NODATA */
		{DNS_TYPE_A, DNS_RCODE_SERVFAIL, 0, 0, NULL, NULL},
		{DNS_TYPE_A, DNS_RCODE_NXDOMAIN, 0, 0, NULL, NULL},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		uint8_t qb[64];
		int qlen = dns_msg_build_query("Host.test", cases[i].qtype, (uint16_t)(100 + i), qb,
		                               sizeof qb);
		assert_true(qlen > 0);
		dns_question q;
		assert_int_equal(dns_msg_parse_query(qb, (size_t)qlen, &q), DNS_MSG_OK);
		uint8_t r[512];
		int len = dns_msg_build_reply(&q, qb, cases[i].rcode, mixed, cases[i].n, 42, r,
		                              sizeof r);
		size_t rdlen = cases[i].qtype == DNS_TYPE_A ? 4 : 16;
		assert_int_equal(len, qlen + cases[i].want * (12 + rdlen));
		assert_int_equal(r[2], 0x81); /* QR, opcode 0, RD as the query's */
		assert_int_equal(r[3], 0x80 | cases[i].rcode);
		/* the question as the client wrote it, case and all */
		assert_memory_equal(r + 12, qb + 12, q.qend - 12);

		dns_answer_info info;
		assert_int_equal(dns_msg_scan_answer(r, (size_t)len, &q, &info), DNS_MSG_OK);
		assert_int_equal(info.id, 100 + i);
		assert_int_equal(info.rcode, cases[i].rcode);
		assert_int_equal(info.an, cases[i].want);
		assert_int_equal(info.negative, cases[i].rcode != DNS_RCODE_SERVFAIL && cases[i].want == 0);
		if (cases[i].want)
			assert_int_equal(info.min_ttl, 42);

		struct sockaddr_storage out[4];
		uint32_t ttl;
		assert_int_equal(dns_msg_addresses(r, (size_t)len, cases[i].qtype, out, 4, &ttl),
		                 cases[i].want);
		if (cases[i].first)
			assert_ip(&out[0], cases[i].first);
		if (cases[i].second)
			assert_ip(&out[1], cases[i].second);
		assert_int_equal(ttl, cases[i].want ? 42 : 0);

		/* one byte short of room */
		assert_int_equal(dns_msg_build_reply(&q, qb, cases[i].rcode, mixed, cases[i].n, 42, r,
		                                     (size_t)len - 1),
		                 DNS_MSG_EBIG);
	}

	/* RD clear in the query: clear in the reply */
	uint8_t qb[64];
	int qlen = dns_msg_build_query("host.test", DNS_TYPE_A, 1, qb, sizeof qb);
	assert_true(qlen > 0);
	qb[2] = 0;
	dns_question q;
	assert_int_equal(dns_msg_parse_query(qb, (size_t)qlen, &q), DNS_MSG_OK);
	uint8_t r[512];
	assert_true(dns_msg_build_reply(&q, qb, 0, mixed, 1, 1, r, sizeof r) > 0);
	assert_int_equal(r[2], 0x80);
}

static void addresses_behind_a_cname_chain(void **state)
{
	(void)state;
	wmsg w = {0};
	whdr(&w, 1, F_RESPONSE, 1, 5, 0, 0);
	wquestion(&w, "www.test", DNS_TYPE_A, DNS_CLASS_IN);
	wptr(&w, 12);
	wrr(&w, DNS_TYPE_CNAME, DNS_CLASS_IN, 600, 6);
	size_t cdn = w.n;
	wlabels(&w, "cdn");
	wptr(&w, 16);
	wptr(&w, (uint16_t)cdn);
	wrr(&w, DNS_TYPE_CNAME, DNS_CLASS_IN, 600, 10);
	size_t edge = w.n;
	wname(&w, "edge.net");
	wptr(&w, (uint16_t)edge);
	wrr(&w, DNS_TYPE_A, DNS_CLASS_IN, 30, 4);
	wbytes(&w, "\xcb\x00\x71\x01", 4);
	wptr(&w, (uint16_t)edge);
	wrr(&w, DNS_TYPE_A, 3, 5, 4); /* class CH: not an address */
	wbytes(&w, "\xcb\x00\x71\x09", 4);
	wptr(&w, (uint16_t)edge);
	wrr(&w, DNS_TYPE_A, DNS_CLASS_IN, 20, 4);
	wbytes(&w, "\xcb\x00\x71\x02", 4);

	struct sockaddr_storage out[4];
	uint32_t ttl = 99;
	assert_int_equal(dns_msg_addresses(w.b, w.n, DNS_TYPE_A, out, 4, &ttl), 2);
	assert_ip(&out[0], "203.0.113.1");
	assert_ip(&out[1], "203.0.113.2");
	assert_int_equal(ttl, 20);
	assert_int_equal(dns_msg_addresses(w.b, w.n, DNS_TYPE_A, out, 1, &ttl), 1);
	assert_int_equal(ttl, 30);
	assert_int_equal(dns_msg_addresses(w.b, w.n, DNS_TYPE_AAAA, out, 4, &ttl), 0);
	assert_int_equal(ttl, 0);
	assert_int_equal(dns_msg_addresses(w.b, w.n - 1, DNS_TYPE_A, out, 4, &ttl), DNS_MSG_ESHORT);
	assert_int_equal(dns_msg_addresses(w.b, 11, DNS_TYPE_A, out, 4, &ttl), DNS_MSG_ESHORT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(strerror_texts),
		cmocka_unit_test(query_round_trip),
		cmocka_unit_test(query_builder_errors),
		cmocka_unit_test(query_header_checks),
		cmocka_unit_test(bad_names),
		cmocka_unit_test(compression_pointers),
		cmocka_unit_test(truncated_records),
		cmocka_unit_test(too_many_records),
		cmocka_unit_test(edns_payload_sizes),
		cmocka_unit_test(negative_ttls),
		cmocka_unit_test(positive_min_ttl_and_aging),
		cmocka_unit_test(scan_against_the_question),
		cmocka_unit_test(truncation_keeps_the_question),
		cmocka_unit_test(replies),
		cmocka_unit_test(addresses_behind_a_cname_chain),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
