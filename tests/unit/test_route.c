/* test_route.c - the compiled route table: slots, first match, the default, every matcher without geodata, build errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/un.h>

#include <cmocka.h>

#include "route/route.h"

/* A route_strs / route_ports from literals. */
#define SL(...)                                                                     \
	((route_strs){(const char *[]){__VA_ARGS__},                                     \
	               sizeof((const char *[]){__VA_ARGS__}) / sizeof(char *)})
#define PL(...)                                                                     \
	((route_ports){(route_port_range[]){__VA_ARGS__},                           \
	                 sizeof((route_port_range[]){__VA_ARGS__}) / sizeof(route_port_range)})

static route_table *build(route_rule_config *rules, size_t n, const char *def)
{
	route_config spec = {.default_tag = def, .rules = rules, .nrules = n};
	route_table *t = NULL;
	char err[256] = "";
	int rc = route_table_build(&spec, &t, err, sizeof err);
	if (rc != 0)
		fail_msg("build failed: %s", err);
	assert_non_null(t);
	return t;
}

static addr_dest dom(const char *name, uint16_t port, addr_network net)
{
	addr_dest d;
	memset(&d, 0, sizeof d);
	assert_int_equal(addr_dest_set_domain(&d, name, strlen(name), port), 0);
	d.network = net;
	return d;
}

static addr_dest ip(const char *text, uint16_t port, addr_network net)
{
	addr_dest d;
	memset(&d, 0, sizeof d);
	if (strchr(text, ':')) {
		d.kind = ADDR_IPV6;
		assert_int_equal(inet_pton(AF_INET6, text, d.u.v6), 1);
	} else {
		d.kind = ADDR_IPV4;
		assert_int_equal(inet_pton(AF_INET, text, d.u.v4), 1);
	}
	d.port = port;
	d.network = net;
	return d;
}

static struct sockaddr_storage saddr(const char *text)
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

/* The rule that decides d (with no sniffed name, tag or source). */
static int32_t rule_of(const route_table *t, addr_dest d)
{
	route_target tg = {.dest = &d};
	return route_table_decide(t, &tg).rule;
}

/* Whether a one-rule table routes d by its rule. */
static bool hits(const route_table *t, addr_dest d) { return rule_of(t, d) == 0; }

static bool name_hits(const route_table *t, const char *name)
{
	return hits(t, dom(name, 443, ADDR_TCP));
}

static bool ip_hits(const route_table *t, const char *addr)
{
	return hits(t, ip(addr, 443, ADDR_TCP));
}

/* ---- slots, order, the default ---- */

/* Seed 002, every_rule_naming_a_tag_shares_that_tags_slot. */
static void test_seed_four_flows(void **state)
{
	(void)state;
	route_rule_config rules[3] = {
		{.target = "proxy", .port = PL({80, 80})},
		{.target = "direct", .networks = ROUTE_NET_UDP},
		{.target = "proxy", .port = PL({443, 443})},
	};
	route_table *t = build(rules, 3, "direct");
	assert_int_equal(route_table_slots(t), 2);
	assert_string_equal(route_table_slot_tag(t, 0), "proxy");
	assert_string_equal(route_table_slot_tag(t, 1), "direct");
	assert_null(route_table_slot_tag(t, 2));

	static const struct {
		addr_network net;
		uint16_t port;
		uint32_t slot;
		int32_t rule;
	} cases[] = {
		{ADDR_TCP, 80, 0, 0},
		{ADDR_TCP, 443, 0, 2},
		{ADDR_UDP, 443, 1, 1}, /* the first matching rule wins */
		{ADDR_TCP, 22, 1, -1}, /* the default route */
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		addr_dest d = ip("192.0.2.1", cases[i].port, cases[i].net);
		route_target tg = {.dest = &d};
		route_decision dec = route_table_decide(t, &tg);
		assert_int_equal(dec.slot, cases[i].slot);
		assert_int_equal(dec.rule, cases[i].rule);
	}
	route_table_free(t);
}

static void test_default_slot_comes_last_unless_named(void **state)
{
	(void)state;
	route_rule_config rules[3] = {
		{.target = "a", .port = PL({1, 1})},
		{.target = "b", .port = PL({2, 2})},
		{.target = "a", .port = PL({3, 3})},
	};
	route_table *t = build(rules, 3, "c");
	assert_int_equal(route_table_slots(t), 3);
	assert_string_equal(route_table_slot_tag(t, 2), "c");
	addr_dest d = ip("192.0.2.1", 9, ADDR_TCP);
	route_target tg = {.dest = &d};
	assert_int_equal(route_table_decide(t, &tg).slot, 2);
	route_table_free(t);

	t = build(rules, 3, "b");
	assert_int_equal(route_table_slots(t), 2);
	route_decision dec = route_table_decide(t, &tg);
	assert_int_equal(dec.slot, 1);
	assert_int_equal(dec.rule, -1);
	d.port = 3;
	dec = route_table_decide(t, &tg);
	assert_int_equal(dec.slot, 0);
	assert_int_equal(dec.rule, 2);
	route_table_free(t);
}

static void test_no_rules_is_one_slot(void **state)
{
	(void)state;
	route_table *t = build(NULL, 0, "direct");
	assert_int_equal(route_table_slots(t), 1);
	assert_string_equal(route_table_slot_tag(t, 0), "direct");
	addr_dest d = dom("example.com", 80, ADDR_UDP);
	route_target tg = {.dest = &d, .sniffed = "x.org", .inbound_tag = "in"};
	route_decision dec = route_table_decide(t, &tg);
	assert_int_equal(dec.slot, 0);
	assert_int_equal(dec.rule, -1);
	route_table_free(t);
}

static void test_any_matcher_of_a_rule_matches(void **state)
{
	(void)state;
	route_rule_config rules[2] = {
		{.target = "x", .domain = SL("example.com"), .port = PL({22, 22})},
		{.target = "y", .domain = SL("example.com")},
	};
	route_table *t = build(rules, 2, "z");
	assert_int_equal(rule_of(t, dom("example.com", 443, ADDR_TCP)), 0);
	assert_int_equal(rule_of(t, dom("other.org", 22, ADDR_TCP)), 0);
	assert_int_equal(rule_of(t, ip("192.0.2.1", 22, ADDR_UDP)), 0);
	assert_int_equal(rule_of(t, dom("other.org", 443, ADDR_TCP)), -1);
	route_table_free(t);
}

/* ---- domain matchers ---- */

static void test_domain_is_the_full_name_case_insensitive(void **state)
{
	(void)state;
	route_rule_config rules[1] = {{.target = "x", .domain = SL("Example.COM", "trailing.org.")}};
	route_table *t = build(rules, 1, "d");
	assert_true(name_hits(t, "example.com"));
	assert_true(name_hits(t, "EXAMPLE.com"));
	assert_true(name_hits(t, "example.com.")); /* one trailing dot is the root */
	assert_true(name_hits(t, "trailing.org"));
	assert_false(name_hits(t, "www.example.com"));
	assert_false(name_hits(t, "example.co"));
	assert_false(name_hits(t, "xexample.com"));
	assert_false(name_hits(t, "com"));
	route_table_free(t);
}

static void test_domain_suffix_on_label_boundaries(void **state)
{
	(void)state;
	route_rule_config rules[1] = {{.target = "x", .domain_suffix = SL("example.com", "CDN.Net")}};
	route_table *t = build(rules, 1, "d");
	static const struct {
		const char *name;
		bool hit;
	} cases[] = {
		{"example.com", true},       {"a.example.com", true},   {"a.b.c.example.com", true},
		{"A.EXAMPLE.COM", true},     {"x.example.com.", true},  {"cdn.net", true},
		{"img.cdn.net", true},       {"badexample.com", false}, {"example.com.evil", false},
		{"example.co", false},       {"com", false},            {"xcdn.net", false},
		{"a..example.com", true},    {"example-com", false},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		if (name_hits(t, cases[i].name) != cases[i].hit)
			fail_msg("%s: expected %s", cases[i].name, cases[i].hit ? "hit" : "miss");
	route_table_free(t);
}

/* A leading dot: only names under the suffix, not the suffix itself. */
static void test_domain_suffix_leading_dot_means_subdomains(void **state)
{
	(void)state;
	route_rule_config rules[1] = {{.target = "x", .domain_suffix = SL(".example.com")}};
	route_table *t = build(rules, 1, "d");
	assert_true(name_hits(t, "a.example.com"));
	assert_true(name_hits(t, "b.a.example.com"));
	assert_false(name_hits(t, "example.com"));
	assert_false(name_hits(t, "badexample.com"));
	route_table_free(t);

	/* Both forms together: the plain one still covers the name itself. */
	route_rule_config both[1] = {{.target = "x", .domain_suffix = SL(".example.com", "example.com")}};
	t = build(both, 1, "d");
	assert_true(name_hits(t, "example.com"));
	route_table_free(t);
}

static void test_domain_keyword_substring_case_insensitive(void **state)
{
	(void)state;
	/* Few keywords (tested one memmem each) and many (the two-byte index). */
	route_rule_config few[1] = {{.target = "x", .domain_keyword = SL("GooGle", "ads")}};
	route_rule_config many[1] = {{.target = "x",
	                          .domain_keyword = SL("GooGle", "ads", "tracker", "q", "zz9",
	                                               "beacon", "metrics.", "-cdn-")}};
	route_rule_config *sets[] = {few, many};
	for (size_t s = 0; s < 2; s++) {
		route_table *t = build(sets[s], 1, "d");
		assert_true(name_hits(t, "www.google.com"));
		assert_true(name_hits(t, "GOOGLEAPIS.COM"));
		assert_true(name_hits(t, "notgoogle"));
		assert_true(name_hits(t, "loads.example"));
		assert_false(name_hits(t, "goog.le"));
		assert_false(name_hits(t, "example.com"));
		assert_false(ip_hits(t, "192.0.2.1"));
		if (s == 1) {
			assert_true(name_hits(t, "a.tracker.io"));
			assert_true(name_hits(t, "aq"));
			assert_true(name_hits(t, "xzz9"));
			assert_true(name_hits(t, "metrics.x"));
			assert_false(name_hits(t, "metricsx"));
			assert_true(name_hits(t, "a-cdn-b"));
			assert_false(name_hits(t, "zz"));
		}
		route_table_free(t);
	}
}

static void test_domain_keyword_empty_matches_every_name(void **state)
{
	(void)state;
	route_rule_config rules[1] = {{.target = "x", .domain_keyword = SL("")}};
	route_table *t = build(rules, 1, "d");
	assert_true(name_hits(t, "anything.example"));
	assert_false(ip_hits(t, "192.0.2.1")); /* no name at all */
	route_table_free(t);
}

static void test_domain_regex(void **state)
{
	(void)state;
	route_rule_config rules[1] = {{.target = "x",
	                           .domain_regex = SL("^ad[0-9]+\\.", "\\.ads\\.[a-z]+$",
	                                              "(?i)^UPPER\\.", "^(a)\\1x$")}};
	route_table *t = build(rules, 1, "d");
	assert_true(name_hits(t, "ad12.example.com"));
	assert_true(name_hits(t, "AD7.example.com")); /* matched against the lowercased name */
	assert_false(name_hits(t, "xad12.example.com"));
	assert_true(name_hits(t, "x.ads.net"));
	assert_false(name_hits(t, "x.ads.net.org"));
	assert_true(name_hits(t, "upper.x"));
	assert_true(name_hits(t, "aax"));
	assert_false(name_hits(t, "abx"));
	assert_false(name_hits(t, "example.com"));
	assert_false(ip_hits(t, "192.0.2.1"));
	route_table_free(t);
}

/* Anchored patterns are joined into one alternation when that is exact; the
 * ones that cannot be (verbs, back-references, named groups, comments) must
 * still match exactly what they match alone. */
static void test_domain_regex_joined_patterns_stay_exact(void **state)
{
	(void)state;
	route_rule_config rules[1] = {{.target = "x",
	                           .domain_regex = SL("^x(*COMMIT)y", "^xz", "^(?<n>q)r$",
	                                              "^(?<n>s)t$", "^(b)\\1$", "^(c)(?1)$",
	                                              "^(?x) e f # comment", "^g|^h$",
	                                              "^\\Qi.j\\E$", "^(?i:K)l$")}};
	route_table *t = build(rules, 1, "d");
	static const struct {
		const char *name;
		bool hit;
	} cases[] = {
		{"xy", true},   {"xz", true},  {"xq", false},  {"qr", true},   {"st", true},
		{"bb", true},   {"bc", false}, {"cc", true},   {"ef", true},   {"e f", false},
		{"gx", true},   {"h", true},   {"hx", false},  {"i.j", true},  {"ixj", false},
		{"kl", true},   {"zz", false},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		if (name_hits(t, cases[i].name) != cases[i].hit)
			fail_msg("%s: expected %s", cases[i].name, cases[i].hit ? "hit" : "miss");
	route_table_free(t);
}

static void test_route_regex_check(void **state)
{
	(void)state;
	char err[256] = "";
	assert_int_equal(route_regex_check("^ad[0-9]+\\.", err, sizeof err), 0);
	static const struct {
		const char *pattern, *text;
	} bad[] = {
		{"(abc", "(abc: missing closing parenthesis at offset 4"},
		{"[a-", "[a-: missing terminating ] for character class at offset 3"},
		{"a{2,1}", "a{2,1}: numbers out of order in {} quantifier at offset 5"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		assert_int_equal(route_regex_check(bad[i].pattern, err, sizeof err), -1);
		assert_string_equal(err, bad[i].text);
	}
}

/* ---- the sniffed name ---- */

static void test_sniffed_name_is_an_extra_candidate(void **state)
{
	(void)state;
	route_rule_config rules[1] = {{.target = "x", .domain_suffix = SL("sniffed.example")}};
	route_table *t = build(rules, 1, "d");
	addr_dest byip = ip("127.0.0.1", 443, ADDR_TCP);
	addr_dest byname = dom("other.org", 443, ADDR_TCP);
	addr_dest good = dom("www.sniffed.example", 443, ADDR_TCP);
	static const struct {
		int dest; /* 0 byip, 1 byname, 2 good */
		const char *sniffed;
		int32_t rule;
	} cases[] = {
		{0, "www.sniffed.example", 0},  /* an IP-addressed flow, by its sniffed name */
		{0, "WWW.Sniffed.Example.", 0}, /* normalised like any candidate */
		{0, NULL, -1},                  /* no name at all: no domain matcher matches */
		{0, "", -1},
		{0, "other.org", -1},
		{1, "www.sniffed.example", 0},  /* the sniffed name wins where the requested fails */
		{2, "other.org", 0},            /* and the requested where the sniffed fails */
		{1, "nope.example", -1},
	};
	const addr_dest *dests[] = {&byip, &byname, &good};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		route_target tg = {.dest = dests[cases[i].dest], .sniffed = cases[i].sniffed};
		assert_int_equal(route_table_decide(t, &tg).rule, cases[i].rule);
	}
	/* A sniffed name longer than any DNS name is no candidate. */
	char lng[300];
	memset(lng, 'a', sizeof lng - 1);
	lng[sizeof lng - 1] = '\0';
	memcpy(lng + sizeof lng - 1 - strlen(".sniffed.example"), ".sniffed.example",
	       strlen(".sniffed.example"));
	route_target tg = {.dest = &byip, .sniffed = lng};
	assert_int_equal(route_table_decide(t, &tg).rule, -1);
	route_table_free(t);
}

/* ---- addresses ---- */

static void test_cidr_v4_and_v6(void **state)
{
	(void)state;
	route_rule_config rules[1] = {
		{.target = "x",
		 .cidr = SL("10.0.0.0/8", "192.168.1.7", "172.16.5.9/12", "2001:db8::/32",
		            "fe80::1/128")},
	};
	route_table *t = build(rules, 1, "d");
	static const struct {
		const char *addr;
		bool hit;
	} cases[] = {
		{"10.0.0.0", true},      {"10.255.255.255", true}, {"11.0.0.0", false},
		{"9.255.255.255", false}, {"192.168.1.7", true},   {"192.168.1.8", false},
		{"172.16.0.0", true},    {"172.31.255.255", true}, /* host bits in the rule are ignored */
		{"172.32.0.0", false},   {"2001:db8::1", true},   {"2001:db8:ffff::", true},
		{"2001:db9::", false},   {"fe80::1", true},        {"fe80::2", false},
		{"::ffff:10.1.2.3", true},                         /* IPv4-mapped meets IPv4 CIDRs */
		{"::ffff:11.1.2.3", false},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		if (ip_hits(t, cases[i].addr) != cases[i].hit)
			fail_msg("%s: expected %s", cases[i].addr, cases[i].hit ? "hit" : "miss");
	assert_false(name_hits(t, "10.0.0.1")); /* a domain destination has no address */
	route_table_free(t);
}

static void test_cidr_mapped_ranges_meet_ipv4(void **state)
{
	(void)state;
	route_rule_config rules[1] = {{.target = "x", .cidr = SL("::ffff:10.0.0.0/104")}};
	route_table *t = build(rules, 1, "d");
	assert_true(ip_hits(t, "10.1.2.3"));
	assert_true(ip_hits(t, "::ffff:10.1.2.3"));
	assert_false(ip_hits(t, "11.1.2.3"));
	route_table_free(t);

	/* ::/0 covers the mapped block, so every IPv4 address too. */
	route_rule_config all[1] = {{.target = "x", .cidr = SL("::/0")}};
	t = build(all, 1, "d");
	assert_true(ip_hits(t, "1.2.3.4"));
	assert_true(ip_hits(t, "2001:db8::1"));
	route_table_free(t);

	route_rule_config v4all[1] = {{.target = "x", .cidr = SL("0.0.0.0/0")}};
	t = build(v4all, 1, "d");
	assert_true(ip_hits(t, "255.255.255.255"));
	assert_false(ip_hits(t, "2001:db8::1"));
	route_table_free(t);
}

static void test_port_ranges(void **state)
{
	(void)state;
	route_rule_config rules[1] = {
		{.target = "x", .port = PL({1000, 2000}, {0, 0}, {1500, 2500}, {65535, 65535}, {443, 443})},
	};
	route_table *t = build(rules, 1, "d");
	static const struct {
		uint16_t port;
		bool hit;
	} cases[] = {
		{0, true},     {1, false},    {442, false},  {443, true},    {444, false},
		{999, false},  {1000, true},  {2000, true},  {2500, true},   {2501, false},
		{65534, false}, {65535, true},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		assert_int_equal(hits(t, ip("192.0.2.1", cases[i].port, ADDR_TCP)), cases[i].hit);
		assert_int_equal(hits(t, dom("example.com", cases[i].port, ADDR_UDP)), cases[i].hit);
	}
	route_table_free(t);
}

static void test_network(void **state)
{
	(void)state;
	route_rule_config rules[2] = {
		{.target = "tcp", .networks = ROUTE_NET_TCP},
		{.target = "udp", .networks = ROUTE_NET_UDP},
	};
	route_table *t = build(rules, 2, "d");
	assert_int_equal(rule_of(t, ip("192.0.2.1", 53, ADDR_TCP)), 0);
	assert_int_equal(rule_of(t, ip("192.0.2.1", 53, ADDR_UDP)), 1);
	route_table_free(t);

	route_rule_config both[1] = {{.target = "x", .networks = ROUTE_NET_TCP | ROUTE_NET_UDP}};
	t = build(both, 1, "d");
	assert_true(hits(t, dom("example.com", 1, ADDR_TCP)));
	assert_true(hits(t, dom("example.com", 1, ADDR_UDP)));
	route_table_free(t);
}

static void test_inbound_tag_exact(void **state)
{
	(void)state;
	route_rule_config rules[1] = {{.target = "x", .inbound_tag = SL("socks-in", "dns")}};
	route_table *t = build(rules, 1, "d");
	addr_dest d = ip("192.0.2.1", 80, ADDR_TCP);
	static const struct {
		const char *tag;
		int32_t rule;
	} cases[] = {
		{"socks-in", 0}, {"dns", 0}, {"SOCKS-IN", -1}, {"socks", -1}, {"socks-in2", -1},
		{"", -1},        {NULL, -1},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		route_target tg = {.dest = &d, .inbound_tag = cases[i].tag};
		assert_int_equal(route_table_decide(t, &tg).rule, cases[i].rule);
	}
	route_table_free(t);
}

static void test_source_cidr(void **state)
{
	(void)state;
	route_rule_config rules[1] = {{.target = "x", .source_cidr = SL("10.0.0.0/8", "2001:db8::/32")}};
	route_table *t = build(rules, 1, "d");
	addr_dest d = dom("example.com", 80, ADDR_TCP);
	static const struct {
		const char *src;
		int32_t rule;
	} cases[] = {
		{"10.1.2.3", 0}, {"11.1.2.3", -1}, {"2001:db8::5", 0}, {"2001:db9::5", -1},
		{"::ffff:10.9.9.9", 0},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct sockaddr_storage ss = saddr(cases[i].src);
		route_target tg = {.dest = &d, .source = (struct sockaddr *)&ss};
		assert_int_equal(route_table_decide(t, &tg).rule, cases[i].rule);
	}
	/* No source (a Unix socket inbound, the resolver's own flows): never. */
	route_target none = {.dest = &d};
	assert_int_equal(route_table_decide(t, &none).rule, -1);
	struct sockaddr_un un = {.sun_family = AF_UNIX};
	route_target unix_src = {.dest = &d, .source = (struct sockaddr *)&un};
	assert_int_equal(route_table_decide(t, &unix_src).rule, -1);
	/* The destination is not the source. */
	addr_dest to10 = ip("10.0.0.1", 80, ADDR_TCP);
	route_target dst_only = {.dest = &to10};
	assert_int_equal(route_table_decide(t, &dst_only).rule, -1);
	route_table_free(t);
}

/* ---- threads ---- */

typedef struct worker_arg {
	const route_table *t;
	int errors;
} worker_arg;

static void *worker(void *p)
{
	worker_arg *a = p;
	for (int i = 0; i < 20000; i++) {
		char name[64];
		snprintf(name, sizeof name, "%s%d.example.com", i % 2 ? "ad" : "www", i);
		addr_dest d = dom(name, 443, ADDR_TCP);
		route_target tg = {.dest = &d};
		if (route_table_decide(a->t, &tg).rule != (i % 2 ? 0 : 1))
			a->errors++;
	}
	return NULL;
}

/* Many threads deciding on one table at once (regexes use per-thread match
 * data; everything else is read-only). */
static void test_concurrent_decisions(void **state)
{
	(void)state;
	route_rule_config rules[2] = {
		{.target = "block", .domain_regex = SL("^ad[0-9]+\\.", "[0-9]x$")},
		{.target = "proxy", .domain_suffix = SL("example.com")},
	};
	route_table *t = build(rules, 2, "direct");
	pthread_t th[4];
	worker_arg args[4];
	for (int i = 0; i < 4; i++) {
		args[i] = (worker_arg){t, 0};
		assert_int_equal(pthread_create(&th[i], NULL, worker, &args[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		assert_int_equal(pthread_join(th[i], NULL), 0);
		assert_int_equal(args[i].errors, 0);
	}
	route_table_free(t);
}

/* ---- build errors (no geodata) ---- */

static void expect_error(route_rule_config *rules, size_t n, const char *def, int code,
                         const char *text)
{
	route_config spec = {.default_tag = def, .rules = rules, .nrules = n};
	route_table *t = (route_table *)&t; /* must be reset to NULL */
	char err[256] = "";
	assert_int_equal(route_table_build(&spec, &t, err, sizeof err), code);
	assert_null(t);
	assert_string_equal(err, text);
}

static void test_build_errors(void **state)
{
	(void)state;
	route_rule_config bad_regex[2] = {
		{.target = "x", .domain_regex = SL("^ok$")},
		{.target = "y", .domain_regex = SL("^fine", "(abc")},
	};
	expect_error(bad_regex, 2, "d", -ROUTE_ERR_REGEX,
	             "building route failed: (abc: missing closing parenthesis at offset 4");
	route_rule_config bad_cidr[1] = {{.target = "x", .cidr = SL("10.0.0.0/33")}};
	expect_error(bad_cidr, 1, "d", -ROUTE_ERR_BAD_CIDR,
	             "building route failed: invalid CIDR \"10.0.0.0/33\"");
	route_rule_config bad_src[1] = {{.target = "x", .source_cidr = SL("example.com")}};
	expect_error(bad_src, 1, "d", -ROUTE_ERR_BAD_CIDR,
	             "building route failed: invalid CIDR \"example.com\"");
	route_rule_config ok[1] = {{.target = "x", .port = PL({1, 1})}};
	expect_error(ok, 1, NULL, -ROUTE_ERR_NO_DEFAULT,
	             "building route failed: no default route tag");
	route_rule_config no_out[2] = {{.target = "x", .port = PL({1, 1})}, {.port = PL({2, 2})}};
	expect_error(no_out, 2, "d", -ROUTE_ERR_NO_OUTBOUND,
	             "building route failed: route rule #2 names no outbound");

	/* A short buffer gets the start of the text, terminated. */
	route_config spec = {.rules = ok, .nrules = 1}; /* no default_tag */
	route_table *t;
	char small[10];
	assert_int_equal(route_table_build(&spec, &t, small, sizeof small),
	                 -ROUTE_ERR_NO_DEFAULT);
	assert_string_equal(small, "building ");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_seed_four_flows),
		cmocka_unit_test(test_default_slot_comes_last_unless_named),
		cmocka_unit_test(test_no_rules_is_one_slot),
		cmocka_unit_test(test_any_matcher_of_a_rule_matches),
		cmocka_unit_test(test_domain_is_the_full_name_case_insensitive),
		cmocka_unit_test(test_domain_suffix_on_label_boundaries),
		cmocka_unit_test(test_domain_suffix_leading_dot_means_subdomains),
		cmocka_unit_test(test_domain_keyword_substring_case_insensitive),
		cmocka_unit_test(test_domain_keyword_empty_matches_every_name),
		cmocka_unit_test(test_domain_regex),
		cmocka_unit_test(test_domain_regex_joined_patterns_stay_exact),
		cmocka_unit_test(test_route_regex_check),
		cmocka_unit_test(test_sniffed_name_is_an_extra_candidate),
		cmocka_unit_test(test_cidr_v4_and_v6),
		cmocka_unit_test(test_cidr_mapped_ranges_meet_ipv4),
		cmocka_unit_test(test_port_ranges),
		cmocka_unit_test(test_network),
		cmocka_unit_test(test_inbound_tag_exact),
		cmocka_unit_test(test_source_cidr),
		cmocka_unit_test(test_concurrent_decisions),
		cmocka_unit_test(test_build_errors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
