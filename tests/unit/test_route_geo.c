/* test_route_geo.c - geosite and geoip matchers over .dat files the tests encode, lazy loading, every geodata error and warning word for word. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/log.h"
#include "route/geodata.h"
#include "route/geodata.pb-c.h"
#include "route/route.h"

#define SL(...)                                                                     \
	((route_strs){(const char *[]){__VA_ARGS__},                                     \
	               sizeof((const char *[]){__VA_ARGS__}) / sizeof(char *)})
#define PL(...)                                                                     \
	((route_ports){(route_port_range[]){__VA_ARGS__},                           \
	                 sizeof((route_port_range[]){__VA_ARGS__}) / sizeof(route_port_range)})

enum { PLAIN = 0, REGEX = 1, ROOT = 2, FULL = 3 };

/* Each test's files live in one temporary directory. */
typedef struct fixture {
	char dir[64];
	char site[96], ip[96];
} fixture;

static fixture fx;

static int setup(void **state)
{
	(void)state;
	snprintf(fx.dir, sizeof fx.dir, "/tmp/test_route_geo.XXXXXX");
	if (!mkdtemp(fx.dir))
		return -1;
	snprintf(fx.site, sizeof fx.site, "%s/geosite.dat", fx.dir);
	snprintf(fx.ip, sizeof fx.ip, "%s/geoip.dat", fx.dir);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	unlink(fx.site);
	unlink(fx.ip);
	char sub[128];
	snprintf(sub, sizeof sub, "%s/sub", fx.dir);
	rmdir(sub);
	rmdir(fx.dir);
	log_set_stream(NULL);
	return 0;
}

static void write_bytes(const char *path, const void *buf, size_t n)
{
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(buf, 1, n, f), n);
	assert_int_equal(fclose(f), 0);
}

static void write_msg(const char *path, const ProtobufCMessage *m)
{
	size_t n = protobuf_c_message_get_packed_size(m);
	uint8_t *buf = malloc(n + 1);
	assert_non_null(buf);
	assert_int_equal(protobuf_c_message_pack(m, buf), n);
	write_bytes(path, buf, n);
	free(buf);
}

/* ---- writing geosite.dat ---- */

typedef struct dom_spec {
	int type;
	const char *value;
	const char *attrs[3]; /* keys, NULL-terminated */
} dom_spec;

typedef struct site_spec {
	const char *code;
	const dom_spec *doms;
	size_t n;
} site_spec;

#define SITE(code, ...)                                                              \
	{code, (const dom_spec[]){__VA_ARGS__},                                      \
	 sizeof((const dom_spec[]){__VA_ARGS__}) / sizeof(dom_spec)}

static void write_sites(const site_spec *sites, size_t n)
{
	Geodata__GeoSite *gs = calloc(n, sizeof *gs);
	Geodata__GeoSite **gp = calloc(n, sizeof *gp);
	size_t total = 0;
	for (size_t i = 0; i < n; i++)
		total += sites[i].n;
	Geodata__Domain *ds = calloc(total + 1, sizeof *ds);
	Geodata__Domain **dp = calloc(total + 1, sizeof *dp);
	Geodata__Domain__Attribute *as = calloc(3 * total + 1, sizeof *as);
	Geodata__Domain__Attribute **ap = calloc(3 * total + 1, sizeof *ap);
	assert_true(gs && gp && ds && dp && as && ap);
	size_t d = 0, a = 0;
	for (size_t i = 0; i < n; i++) {
		geodata__geo_site__init(&gs[i]);
		gp[i] = &gs[i];
		gs[i].country_code = (char *)sites[i].code;
		gs[i].domain = &dp[d];
		gs[i].n_domain = sites[i].n;
		for (size_t j = 0; j < sites[i].n; j++, d++) {
			const dom_spec *s = &sites[i].doms[j];
			geodata__domain__init(&ds[d]);
			dp[d] = &ds[d];
			ds[d].type = (Geodata__Domain__Type)s->type;
			ds[d].value = (char *)s->value;
			ds[d].attribute = &ap[a];
			for (size_t k = 0; k < 3 && s->attrs[k]; k++, a++) {
				geodata__domain__attribute__init(&as[a]);
				ap[a] = &as[a];
				as[a].key = (char *)s->attrs[k];
				as[a].typed_value_case =
					GEODATA__DOMAIN__ATTRIBUTE__TYPED_VALUE_BOOL_VALUE;
				as[a].bool_value = 1;
				ds[d].n_attribute++;
			}
		}
	}
	Geodata__GeoSiteList list = GEODATA__GEO_SITE_LIST__INIT;
	list.entry = gp;
	list.n_entry = n;
	write_msg(fx.site, &list.base);
	free(gs);
	free(gp);
	free(ds);
	free(dp);
	free(as);
	free(ap);
}

/* ---- writing geoip.dat ---- */

typedef struct ip_spec {
	const char *code;
	const char *const *cidrs; /* "addr/len" */
	size_t n;
	bool inverse;
} ip_spec;

#define IPS(code, inv, ...)                                                          \
	{code, (const char *const[]){__VA_ARGS__},                                   \
	 sizeof((const char *const[]){__VA_ARGS__}) / sizeof(char *), inv}

/* A raw CIDR message, for the malformed ones text cannot say. */
typedef struct raw_cidr {
	size_t ip_len;
	uint32_t prefix;
} raw_cidr;

static void write_ips_raw(const ip_spec *ips, size_t n, const raw_cidr *raw, size_t nraw)
{
	Geodata__GeoIP *g = calloc(n + 1, sizeof *g);
	Geodata__GeoIP **gp = calloc(n + 1, sizeof *gp);
	size_t total = nraw;
	for (size_t i = 0; i < n; i++)
		total += ips[i].n;
	Geodata__CIDR *c = calloc(total + 1, sizeof *c);
	Geodata__CIDR **cp = calloc(total + 1, sizeof *cp);
	uint8_t(*bytes)[32] = calloc(total + 1, sizeof *bytes);
	assert_true(g && gp && c && cp && bytes);
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		geodata__geo_ip__init(&g[i]);
		gp[i] = &g[i];
		g[i].country_code = (char *)ips[i].code;
		g[i].inverse_match = ips[i].inverse;
		g[i].cidr = &cp[k];
		g[i].n_cidr = ips[i].n;
		for (size_t j = 0; j < ips[i].n; j++, k++) {
			char text[64];
			snprintf(text, sizeof text, "%s", ips[i].cidrs[j]);
			char *slash = strchr(text, '/');
			assert_non_null(slash);
			*slash = '\0';
			geodata__cidr__init(&c[k]);
			cp[k] = &c[k];
			bool v6 = strchr(text, ':') != NULL;
			assert_int_equal(inet_pton(v6 ? AF_INET6 : AF_INET, text, bytes[k]), 1);
			c[k].ip = (ProtobufCBinaryData){v6 ? 16 : 4, bytes[k]};
			c[k].prefix = (uint32_t)atoi(slash + 1);
		}
	}
	if (nraw) { /* appended to the last entry */
		assert_true(n > 0);
		Geodata__GeoIP *last = &g[n - 1];
		last->cidr = &cp[k - last->n_cidr];
		for (size_t j = 0; j < nraw; j++, k++) {
			geodata__cidr__init(&c[k]);
			cp[k] = &c[k];
			c[k].ip = (ProtobufCBinaryData){raw[j].ip_len, bytes[k]};
			c[k].prefix = raw[j].prefix;
			last->n_cidr++;
		}
	}
	Geodata__GeoIPList list = GEODATA__GEO_IPLIST__INIT;
	list.entry = gp;
	list.n_entry = n;
	write_msg(fx.ip, &list.base);
	free(g);
	free(gp);
	free(c);
	free(cp);
	free(bytes);
}

static void write_ips(const ip_spec *ips, size_t n) { write_ips_raw(ips, n, NULL, 0); }

/* ---- building and deciding ---- */

static int try_build(route_rule_config *rules, size_t n, const char *site, const char *ip,
                     route_table **t, char *err, size_t err_size)
{
	route_config spec = {.default_tag = "default", .rules = rules, .nrules = n,
	                     .geosite = site, .geoip = ip};
	return route_table_build(&spec, t, err, err_size);
}

static route_table *build(route_rule_config *rules, size_t n)
{
	route_table *t = NULL;
	char err[512] = "";
	if (try_build(rules, n, fx.site, fx.ip, &t, err, sizeof err) != 0)
		fail_msg("build failed: %s", err);
	return t;
}

static void expect_error(route_rule_config *rules, size_t n, const char *site, const char *ip,
                         int code, const char *text)
{
	route_table *t = NULL;
	char err[512] = "";
	assert_int_equal(try_build(rules, n, site, ip, &t, err, sizeof err), code);
	assert_null(t);
	assert_string_equal(err, text);
}

static int32_t decide(const route_table *t, const char *dest, const char *sniffed)
{
	addr_dest d;
	memset(&d, 0, sizeof d);
	d.port = 443;
	if (inet_pton(AF_INET, dest, d.u.v4) == 1)
		d.kind = ADDR_IPV4;
	else if (inet_pton(AF_INET6, dest, d.u.v6) == 1)
		d.kind = ADDR_IPV6;
	else
		assert_int_equal(addr_dest_set_domain(&d, dest, strlen(dest), 443), 0);
	route_target tg = {.dest = &d, .sniffed = sniffed};
	return route_table_decide(t, &tg).rule;
}

/* Captures warn lines; returns the stream to read back with captured(). */
static FILE *capture(void)
{
	FILE *f = tmpfile();
	assert_non_null(f);
	log_set_stream(f);
	return f;
}

static char *captured(FILE *f)
{
	log_set_stream(NULL);
	long n = ftell(f);
	assert_true(n >= 0);
	char *text = calloc(1, (size_t)n + 1);
	assert_non_null(text);
	rewind(f);
	assert_int_equal(fread(text, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	return text;
}

static size_t count(const char *hay, const char *needle)
{
	size_t c = 0;
	for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
		c++;
	return c;
}

/* ---- geosite ---- */

static void test_geosite_domain_types(void **state)
{
	(void)state;
	const site_spec sites[] = {
		SITE("OTHER", {FULL, "other.example", {0}}),
		SITE("Test", {FULL, "Full.Example", {0}}, {ROOT, "root.example", {0}},
		     {PLAIN, "KeyWord", {0}}, {REGEX, "^re[0-9]+\\.", {0}}),
	};
	write_sites(sites, 2);
	route_rule_config rules[1] = {{.target = "x", .geosite = SL("test")}}; /* code case ignored */
	route_table *t = build(rules, 1);
	static const struct {
		const char *name;
		int32_t rule;
	} cases[] = {
		{"full.example", 0},  {"www.full.example", -1}, {"root.example", 0},
		{"a.root.example", 0}, {"notroot.example", -1}, {"xkeywordx.org", 0},
		{"re12.net", 0},      {"xre12.net", -1},        {"other.example", -1},
		{"FULL.EXAMPLE.", 0},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		if (decide(t, cases[i].name, NULL) != cases[i].rule)
			fail_msg("%s: expected rule %d", cases[i].name, cases[i].rule);
	/* An IP-addressed flow matches by its sniffed name only. */
	assert_int_equal(decide(t, "192.0.2.1", NULL), -1);
	assert_int_equal(decide(t, "192.0.2.1", "a.root.example"), 0);
	assert_int_equal(decide(t, "elsewhere.org", "a.root.example"), 0);
	route_table_free(t);
}

static void test_geosite_attributes(void **state)
{
	(void)state;
	const site_spec sites[] = {
		SITE("g", {ROOT, "ads.example", {"ads"}}, {ROOT, "both.example", {"ads", "CN"}},
		     {ROOT, "plain.example", {0}}, {FULL, "cn.example", {"cn"}},
		     {PLAIN, "adword", {"Ads"}}),
	};
	write_sites(sites, 1);
	route_rule_config rules[5] = {
		{.target = "a", .geosite = SL("g@ads")},
		{.target = "b", .geosite = SL("G@cn@ADS")},
		{.target = "c", .geosite = SL("g@cn")},
		{.target = "d", .geosite = SL("g@")},
		{.target = "e", .geosite = SL("g")},
	};
	static const struct {
		size_t rule;
		const char *name;
		bool hit;
	} cases[] = {
		{0, "x.ads.example", true},  {0, "both.example", true}, {0, "xadwordx", true},
		{0, "plain.example", false}, {0, "cn.example", false},
		{1, "both.example", true},   {1, "ads.example", false}, {1, "cn.example", false},
		{2, "cn.example", true},     {2, "both.example", true}, {2, "ads.example", false},
		{3, "ads.example", false},   {3, "plain.example", false},
		{4, "plain.example", true},  {4, "cn.example", true},   {4, "ads.example", true},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		route_table *t = build(&rules[cases[i].rule], 1);
		if ((decide(t, cases[i].name, NULL) == 0) != cases[i].hit)
			fail_msg("%s on %s: expected %s", rules[cases[i].rule].geosite.items[0],
			         cases[i].name, cases[i].hit ? "hit" : "miss");
		route_table_free(t);
	}
}

/* Entries are skipped with a warning, not refused; each distinct code string
 * is loaded once, however many rules name it. */
static void test_geosite_warnings_and_loading_once(void **state)
{
	(void)state;
	const site_spec sites[] = {
		SITE("w", {7, "seven.example", {0}}, {REGEX, "(x", {0}}, {ROOT, "good.example", {0}}),
	};
	write_sites(sites, 1);
	FILE *f = capture();
	route_rule_config rules[3] = {
		{.target = "a", .geosite = SL("w", "w")},
		{.target = "b", .geosite = SL("w")},
		{.target = "c", .geosite = SL("W")}, /* another string: loaded again */
	};
	route_table *t = build(rules, 3);
	char *log = captured(f);
	assert_int_equal(count(log, "WARN  route: skipping unknown geosite domain type 7\n"), 2);
	assert_int_equal(
		count(log, "WARN  route: skipping invalid geosite regex \"(x\": missing closing "
		           "parenthesis at offset 2\n"),
		2);
	free(log);
	assert_int_equal(decide(t, "a.good.example", NULL), 0);
	assert_int_equal(decide(t, "seven.example", NULL), -1);
	route_table_free(t);
}

/* The first entry of a code is the one used; only wanted entries are
 * unpacked, so a broken entry nobody names does not fail the build. */
static void test_geosite_first_entry_and_unwanted_entries(void **state)
{
	(void)state;
	Geodata__Domain d1 = GEODATA__DOMAIN__INIT, d2 = GEODATA__DOMAIN__INIT;
	d1.type = GEODATA__DOMAIN__TYPE__Full;
	d1.value = "first.example";
	d2.type = GEODATA__DOMAIN__TYPE__Full;
	d2.value = "second.example";
	Geodata__Domain *p1[] = {&d1}, *p2[] = {&d2};
	Geodata__GeoSite s1 = GEODATA__GEO_SITE__INIT, s2 = GEODATA__GEO_SITE__INIT;
	s1.country_code = "dup";
	s1.domain = p1;
	s1.n_domain = 1;
	s2.country_code = "DUP";
	s2.domain = p2;
	s2.n_domain = 1;
	Geodata__GeoSite *ps[] = {&s1, &s2};
	Geodata__GeoSiteList list = GEODATA__GEO_SITE_LIST__INIT;
	list.entry = ps;
	list.n_entry = 2;
	uint8_t buf[256];
	size_t n = protobuf_c_message_pack(&list.base, buf);
	/* An entry "bad" whose field 2 (domain, a message) is a varint: fine for
	 * the wire walk, refused by protobuf-c. */
	static const uint8_t bad[] = {0x0a, 0x07, 0x0a, 0x03, 'b', 'a', 'd', 0x10, 0x01};
	memcpy(buf + n, bad, sizeof bad);
	write_bytes(fx.site, buf, n + sizeof bad);

	route_rule_config rules[1] = {{.target = "a", .geosite = SL("dup")}};
	route_table *t = build(rules, 1);
	assert_int_equal(decide(t, "first.example", NULL), 0);
	assert_int_equal(decide(t, "second.example", NULL), -1);
	route_table_free(t);

	route_rule_config bad_rule[1] = {{.target = "a", .geosite = SL("BAD")}};
	char at[128];
	snprintf(at, sizeof at,
	         "building route failed: geosite decode: entry \"BAD\" at byte %zu is not a valid "
	         "GeoSite message",
	         n);
	expect_error(bad_rule, 1, fx.site, NULL, -ROUTE_ERR_GEOSITE_DECODE, at);
}

/* ---- geoip ---- */

static void test_geoip_and_inversion(void **state)
{
	(void)state;
	const ip_spec ips[] = {
		IPS("CN", false, "10.0.0.0/8", "2001:db8::/32", "192.0.2.128/25"),
		IPS("inv", true, "172.16.0.0/12"),
	};
	write_ips(ips, 2);
	route_rule_config rules[1] = {{.target = "a", .geoip = SL("cn")}};
	route_table *t = build(rules, 1);
	static const struct {
		const char *dest;
		int32_t rule;
	} in[] = {
		{"10.1.2.3", 0},  {"11.1.2.3", -1}, {"2001:db8::1", 0},     {"2001:db9::1", -1},
		{"::ffff:10.9.9.9", 0},             {"192.0.2.200", 0},     {"192.0.2.1", -1},
		{"cn.example", -1},
	};
	for (size_t i = 0; i < sizeof in / sizeof in[0]; i++)
		if (decide(t, in[i].dest, NULL) != in[i].rule)
			fail_msg("cn: %s: expected rule %d", in[i].dest, in[i].rule);
	route_table_free(t);

	route_rule_config not_cn[1] = {{.target = "a", .geoip = SL("!cn")}};
	t = build(not_cn, 1);
	static const struct {
		const char *dest, *sniffed;
		int32_t rule;
	} out[] = {
		{"10.1.2.3", NULL, -1}, {"11.1.2.3", NULL, 0}, {"2001:db8::1", NULL, -1},
		{"2001:db9::1", NULL, 0},
		/* A domain destination has no address: never, inverted or not. */
		{"example.com", NULL, -1}, {"example.com", "x.org", -1},
	};
	for (size_t i = 0; i < sizeof out / sizeof out[0]; i++)
		if (decide(t, out[i].dest, out[i].sniffed) != out[i].rule)
			fail_msg("!cn: %s: expected rule %d", out[i].dest, out[i].rule);
	route_table_free(t);

	/* inverse_match set in the file flips the sense, and "!" flips it back. */
	route_rule_config inv[2] = {
		{.target = "a", .geoip = SL("inv")},
		{.target = "b", .geoip = SL("!inv")},
	};
	t = build(inv, 2);
	assert_int_equal(decide(t, "8.8.8.8", NULL), 0);
	assert_int_equal(decide(t, "172.16.1.1", NULL), 1);
	route_table_free(t);
}

/* ---- loading only what is used, in order ---- */

static void test_files_read_only_when_used(void **state)
{
	(void)state;
	route_rule_config rules[1] = {{.target = "a", .port = PL({80, 80})}};
	route_table *t = NULL;
	char err[256] = "";
	assert_int_equal(try_build(rules, 1, "/nonexistent/geosite.dat", "/nonexistent/geoip.dat",
	                           &t, err, sizeof err),
	                 0);
	route_table_free(t);

	/* A geoip rule alone never opens the geosite file, and the reverse. */
	const ip_spec ips[] = {IPS("cn", false, "10.0.0.0/8")};
	write_ips(ips, 1);
	route_rule_config geoip_only[1] = {{.target = "a", .geoip = SL("cn")}};
	assert_int_equal(try_build(geoip_only, 1, "/nonexistent/geosite.dat", fx.ip, &t, err,
	                           sizeof err),
	                 0);
	route_table_free(t);
	const site_spec sites[] = {SITE("s", {FULL, "s.example", {0}})};
	write_sites(sites, 1);
	route_rule_config site_only[1] = {{.target = "a", .geosite = SL("s")}};
	assert_int_equal(
		try_build(site_only, 1, fx.site, "/nonexistent/geoip.dat", &t, err, sizeof err), 0);
	route_table_free(t);
}

static void test_geosite_is_checked_before_geoip(void **state)
{
	(void)state;
	route_rule_config rules[2] = {
		{.target = "a", .geoip = SL("cn")},     /* the geoip rule comes first... */
		{.target = "b", .geosite = SL("cn")},
	};
	expect_error(rules, 2, NULL, NULL, -ROUTE_ERR_NO_GEOSITE_FILE,
	             "building route failed: a geosite matcher is used but no geosite file is "
	             "configured");
	expect_error(rules, 2, "/nonexistent/geosite.dat", NULL, -ROUTE_ERR_OS,
	             "building route failed: No such file or directory (os error 2)");
	const site_spec sites[] = {SITE("cn", {FULL, "cn.example", {0}})};
	write_sites(sites, 1);
	expect_error(rules, 2, fx.site, NULL, -ROUTE_ERR_NO_GEOIP_FILE,
	             "building route failed: a geoip matcher is used but no geoip file is "
	             "configured");
}

/* ---- every geodata error, word for word ---- */

static void test_code_not_found(void **state)
{
	(void)state;
	const site_spec sites[] = {SITE("cn", {FULL, "cn.example", {0}})};
	write_sites(sites, 1);
	const ip_spec ips[] = {IPS("cn", false, "10.0.0.0/8")};
	write_ips(ips, 1);
	route_rule_config s1[1] = {{.target = "a", .geosite = SL("cn", "nosuchcode@ads", "zz")}};
	expect_error(s1, 1, fx.site, fx.ip, -ROUTE_ERR_GEOSITE_NOT_FOUND,
	             "building route failed: geosite code not found: nosuchcode");
	route_rule_config s2[1] = {{.target = "a", .geoip = SL("cn", "!nosuchcode")}};
	expect_error(s2, 1, fx.site, fx.ip, -ROUTE_ERR_GEOIP_NOT_FOUND,
	             "building route failed: geoip code not found: nosuchcode");
	/* An empty file is an empty list. */
	write_bytes(fx.ip, "", 0);
	route_rule_config s3[1] = {{.target = "a", .geoip = SL("cn")}};
	expect_error(s3, 1, fx.site, fx.ip, -ROUTE_ERR_GEOIP_NOT_FOUND,
	             "building route failed: geoip code not found: cn");
}

static void test_decode_errors(void **state)
{
	(void)state;
	static const struct {
		uint8_t bytes[8];
		size_t len;
		const char *reason;
	} cases[] = {
		{{0x0f}, 1, "unsupported wire type 7 at byte 0"},
		{{0x0b}, 1, "unsupported wire type 3 at byte 0"},
		{{0x0a, 0x05, 'a'}, 3, "field at byte 0 runs past the end of the data"},
		{{0x0a, 0x80}, 2, "malformed varint at byte 0"},
		{{0x80}, 1, "malformed varint at byte 0"},
		{{0x00, 0x00}, 2, "invalid field number at byte 0"},
		{{0x0a, 0x00, 0xf8, 0xff, 0xff, 0xff, 0x1f}, 7, "invalid field number at byte 2"},
		{{0x08, 0x01}, 2, "field 1 at byte 0 has wire type 0, expected 2 (length-delimited)"},
		{{0x10, 0x01, 0x0a, 0x02, 0x08, 0x01}, 6,
		 "field 1 at byte 4 has wire type 0, expected 2 (length-delimited)"},
		{{0x0a, 0x02, 0x0a, 0x05}, 4, "field at byte 2 runs past the end of the data"},
		{{0x15, 1, 2, 3}, 4, "field at byte 0 runs past the end of the data"},
	};
	route_rule_config site_rule[1] = {{.target = "a", .geosite = SL("cn")}};
	route_rule_config ip_rule[1] = {{.target = "a", .geoip = SL("cn")}};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char want[256];
		write_bytes(fx.site, cases[i].bytes, cases[i].len);
		snprintf(want, sizeof want, "building route failed: geosite decode: %s",
		         cases[i].reason);
		expect_error(site_rule, 1, fx.site, NULL, -ROUTE_ERR_GEOSITE_DECODE, want);
		write_bytes(fx.ip, cases[i].bytes, cases[i].len);
		snprintf(want, sizeof want, "building route failed: geoip decode: %s",
		         cases[i].reason);
		expect_error(ip_rule, 1, NULL, fx.ip, -ROUTE_ERR_GEOIP_DECODE, want);
	}
	/* Unknown fields and wire types 1 and 5 are skipped, as protobuf says. */
	static const uint8_t skipped[] = {0x11, 1, 2, 3, 4, 5, 6, 7, 8, 0x1d, 1, 2, 3, 4, 0x18, 0x05};
	write_bytes(fx.ip, skipped, sizeof skipped);
	expect_error(ip_rule, 1, NULL, fx.ip, -ROUTE_ERR_GEOIP_NOT_FOUND,
	             "building route failed: geoip code not found: cn");
}

static void test_file_errors(void **state)
{
	(void)state;
	route_rule_config rule[1] = {{.target = "a", .geosite = SL("cn")}};
	expect_error(rule, 1, "/nonexistent/geosite.dat", NULL, -ROUTE_ERR_OS,
	             "building route failed: No such file or directory (os error 2)");
	char sub[128];
	snprintf(sub, sizeof sub, "%s/sub", fx.dir);
	assert_int_equal(mkdir(sub, 0700), 0);
	expect_error(rule, 1, sub, NULL, -ROUTE_ERR_OS,
	             "building route failed: Is a directory (os error 21)");

	/* A sparse file past the limit is refused before it is read. */
	int fd = open(fx.ip, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)GEODATA_FILE_MAX + 1), 0);
	close(fd);
	route_rule_config ip_rule[1] = {{.target = "a", .geoip = SL("cn")}};
	expect_error(ip_rule, 1, NULL, fx.ip, -ROUTE_ERR_FILE_TOO_LARGE,
	             "building route failed: geoip file is larger than 256 MiB");
}

static void test_too_many_regex_entries(void **state)
{
	(void)state;
	size_t n = GEODATA_REGEX_MAX + 1;
	dom_spec *doms = calloc(n + 1, sizeof *doms);
	char(*texts)[32] = calloc(n, sizeof *texts);
	assert_true(doms && texts);
	for (size_t i = 0; i < n; i++) {
		snprintf(texts[i], sizeof texts[i], "^r%zu\\.", i);
		doms[i] = (dom_spec){REGEX, texts[i], {0}};
	}
	doms[n] = (dom_spec){REGEX, "(bad", {0}}; /* skipped: does not count */
	site_spec site = {"many", doms, n};
	write_sites(&site, 1);
	route_rule_config rule[1] = {{.target = "a", .geosite = SL("Many@")}};
	route_table *t = NULL;
	char err[256];
	/* "Many@" keeps no entry (an empty attribute), so it builds. */
	assert_int_equal(try_build(rule, 1, fx.site, NULL, &t, err, sizeof err), 0);
	route_table_free(t);
	route_rule_config many[1] = {{.target = "a", .geosite = SL("Many")}};
	expect_error(many, 1, fx.site, NULL, -ROUTE_ERR_GEOSITE_REGEX,
	             "building route failed: geosite Many: regex entries: more than 4096 patterns");

	/* Exactly the limit, with an invalid one skipped, builds. */
	site.doms = doms + 1;
	write_sites(&site, 1);
	FILE *f = capture();
	assert_int_equal(try_build(many, 1, fx.site, NULL, &t, err, sizeof err), 0);
	free(captured(f));
	assert_int_equal(decide(t, "r4096.x", NULL), 0);
	assert_int_equal(decide(t, "r0.x", NULL), -1);
	route_table_free(t);
	free(doms);
	free(texts);
}

static void test_geoip_cidr_errors(void **state)
{
	(void)state;
	static const struct {
		raw_cidr raw;
		int code;
		const char *text;
	} cases[] = {
		{{5, 8}, -ROUTE_ERR_GEOIP_IP_LEN,
		 "building route failed: geoip cidr: ip must be 4 or 16 bytes, got 5"},
		{{0, 0}, -ROUTE_ERR_GEOIP_IP_LEN,
		 "building route failed: geoip cidr: ip must be 4 or 16 bytes, got 0"},
		{{4, 256}, -ROUTE_ERR_GEOIP_PREFIX_LARGE,
		 "building route failed: geoip cidr: prefix too large"},
		{{16, 4000000000u}, -ROUTE_ERR_GEOIP_PREFIX_LARGE,
		 "building route failed: geoip cidr: prefix too large"},
		{{4, 33}, -ROUTE_ERR_GEOIP_PREFIX,
		 "building route failed: geoip cidr: prefix length 33 is longer than the 32 bits "
		 "of an IPv4 address"},
		{{16, 129}, -ROUTE_ERR_GEOIP_PREFIX,
		 "building route failed: geoip cidr: prefix length 129 is longer than the 128 "
		 "bits of an IPv6 address"},
	};
	route_rule_config rule[1] = {{.target = "a", .geoip = SL("ok", "bad")}};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const ip_spec ips[] = {IPS("ok", false, "10.0.0.0/8"),
		                       IPS("bad", false, "11.0.0.0/8")};
		write_ips_raw(ips, 2, &cases[i].raw, 1);
		expect_error(rule, 1, NULL, fx.ip, cases[i].code, cases[i].text);
	}
	/* The boundary values are fine. */
	static const raw_cidr fine[] = {{4, 32}, {16, 128}, {4, 0}};
	const ip_spec ips[] = {IPS("ok", false, "10.0.0.0/8"), IPS("bad", false, "11.0.0.0/8")};
	write_ips_raw(ips, 2, fine, 3);
	route_table *t = build(rule, 1);
	route_table_free(t);
}

/* The decoders themselves, on bytes (what the fuzz target drives). */
static void test_decoders_on_bytes(void **state)
{
	(void)state;
	const char *codes[] = {"a", "a@x", "!a", "b"};
	domset *sets[4];
	ipset *ips[4];
	bool inv[4];
	char err[256];
	static const uint8_t empty[1];
	assert_int_equal(geodata_sites(empty, 0, codes, 1, sets, err, sizeof err),
	                 -ROUTE_ERR_GEOSITE_NOT_FOUND);
	assert_null(sets[0]);
	assert_int_equal(geodata_ips(empty, 0, codes + 2, 2, ips, inv, err, sizeof err),
	                 -ROUTE_ERR_GEOIP_NOT_FOUND);
	assert_string_equal(err, "building route failed: geoip code not found: a");
	assert_null(ips[0]);
	assert_null(ips[1]);
	assert_false(inv[0]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_geosite_domain_types, setup, teardown),
		cmocka_unit_test_setup_teardown(test_geosite_attributes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_geosite_warnings_and_loading_once, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_geosite_first_entry_and_unwanted_entries, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_geoip_and_inversion, setup, teardown),
		cmocka_unit_test_setup_teardown(test_files_read_only_when_used, setup, teardown),
		cmocka_unit_test_setup_teardown(test_geosite_is_checked_before_geoip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_code_not_found, setup, teardown),
		cmocka_unit_test_setup_teardown(test_decode_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_file_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_too_many_regex_entries, setup, teardown),
		cmocka_unit_test_setup_teardown(test_geoip_cidr_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_decoders_on_bytes, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
