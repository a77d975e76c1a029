/* test_plane.c - the plane's routing of port 53 (seed 002 "DNS interception", its two unit tests by name) and the DNS service's configuration as the build step makes it: rules, final, hosts, addresses. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#include <cmocka.h>

#include "specload.h"
#include "supervisor/build_dns.h"
#include "supervisor/build_outbound.h"
#include "supervisor/plane.h"

/* The service itself is never reached: routing only picks targets. */
static dns_svc *no_svc(worker *w)
{
	(void)w;
	return NULL;
}

typedef struct built {
	etm_spec spec;
	outbound **obs;
	outbound *dns;
	plane *p;
} built;

static void build(built *b, const char *toml, uint64_t epoch)
{
	memset(b, 0, sizeof *b);
	load_spec(toml, &b->spec);
	char err[256];
	b->obs = calloc(b->spec.outbounds_len, sizeof *b->obs);
	assert_non_null(b->obs);
	for (size_t i = 0; i < b->spec.outbounds_len; i++) {
		b->obs[i] = build_outbound(&b->spec.outbounds[i], err, sizeof err);
		assert_non_null(b->obs[i]);
	}
	dns_svc_conf *conf;
	assert_int_equal(build_dns(&b->spec, &conf, err, sizeof err), 0);
	if (conf) {
		b->dns = outbound_new_dns(no_svc, epoch);
		assert_non_null(b->dns);
		dns_svc_conf_unref(conf);
	}
	b->p = plane_new(&b->spec, epoch, b->obs, NULL, b->dns, err, sizeof err);
	assert_non_null(b->p);
}

static void unbuild(built *b)
{
	plane_unref(b->p);
	outbound_unref(b->dns);
	for (size_t i = 0; i < b->spec.outbounds_len; i++)
		outbound_unref(b->obs[i]);
	free(b->obs);
	etm_spec_free(&b->spec);
}

static flow flow_to(const char *ip, uint16_t port, addr_network net)
{
	flow f = {.user = -1};
	struct sockaddr_storage ss = {0};
	struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
	if (inet_pton(AF_INET, ip, &v4->sin_addr) == 1) {
		v4->sin_family = AF_INET;
	} else {
		assert_int_equal(inet_pton(AF_INET6, ip, &v6->sin6_addr), 1);
		v6->sin6_family = AF_INET6;
	}
	assert_int_equal(addr_dest_from_sockaddr(&f.dest, (struct sockaddr *)&ss), 0);
	f.dest.port = port;
	f.dest.network = net;
	return f;
}

static const char *tag_of(const target *t) { return t->ob ? t->ob->tag : t->bal->tag; }

#define BASE                                                                             \
	"[[inbound]]\ntag = \"in\"\nprotocol = \"socks\"\nport = 1080\n"                 \
	"[[outbound]]\ntag = \"direct\"\nprotocol = \"freedom\"\n"                      \
	"[[outbound]]\ntag = \"proxy\"\nprotocol = \"socks\"\nserver = \"127.0.0.1\"\n" \
	"port = 1081\n"                                                                  \
	"[[outbound]]\ntag = \"block\"\nprotocol = \"blackhole\"\n"

/* Seed 002: with a service, every flow to port 53 (TCP or UDP, any
 * address) is the service's, rule none; the service's own upstream
 * connections are routed by route_upstream, which never intercepts. */
static void port_53_is_intercepted_except_for_the_services_own_queries(void **state)
{
	(void)state;
	built b;
	build(&b,
	      BASE "[[route.rule]]\ninbound_tag = [\"dns\"]\noutbound = \"proxy\"\n"
	           "[[dns.server]]\ntag = \"up\"\nprotocol = \"tcp\"\naddress = \"127.0.0.1\"\n"
	           "through_proxy = true\n",
	      7);
	flow_ctx in = {.inbound_tag = "in"};
	const char *ips[] = {"192.0.2.1", "198.51.100.7", "127.0.0.1", "2001:db8::1"};
	for (size_t i = 0; i < 4; i++)
		for (int net = ADDR_TCP; net <= ADDR_UDP; net++) {
			flow f = flow_to(ips[i], 53, (addr_network)net);
			int32_t rule = 99;
			const target *t = plane_route(b.p, &f, &in, &rule);
			assert_ptr_equal(t, &b.p->dns);
			assert_ptr_equal(t->ob, b.dns);
			assert_int_equal(rule, -1);
			assert_string_equal(tag_of(t), "");
			assert_int_equal(t->ob->version, 7);
		}
	/* a name on port 53 too: the port decides, not the address */
	flow named = {.user = -1};
	assert_int_equal(addr_dest_set_domain(&named.dest, "example.com", 11, 53), 0);
	assert_ptr_equal(plane_route(b.p, &named, &in, NULL), &b.p->dns);
	/* other ports follow the route table */
	flow f = flow_to("192.0.2.1", 5353, ADDR_UDP);
	int32_t rule;
	assert_string_equal(tag_of(plane_route(b.p, &f, &in, &rule)), "direct");
	assert_int_equal(rule, -1);
	/* the service's own query to 127.0.0.1:53, inbound tag dns: the
	 * route's proxy by rule #1, not the service */
	flow own = flow_to("127.0.0.1", 53, ADDR_TCP);
	flow_ctx dns = {.inbound_tag = DNS_FLOW_TAG};
	const target *t = plane_route_upstream(b.p, &own, &dns, &rule);
	assert_string_equal(tag_of(t), "proxy");
	assert_int_equal(rule, 0);
	assert_ptr_not_equal(t, &b.p->dns);
	unbuild(&b);
}

/* Seed 002 DnsSpec::Single: no service, so port 53 is a port like any
 * other (here a rule sends it to block; port 54 takes the default). */
static void without_a_dns_service_port_53_follows_the_route_table(void **state)
{
	(void)state;
	built b;
	build(&b,
	      BASE "[[route.rule]]\nport = 53\noutbound = \"block\"\n"
	           "[dns]\nservers = [\"127.0.0.1\"]\n",
	      3);
	assert_null(b.dns);
	assert_null(b.p->dns.ob);
	flow_ctx in = {.inbound_tag = "in"};
	int32_t rule;
	flow u = flow_to("192.0.2.1", 53, ADDR_UDP);
	assert_string_equal(tag_of(plane_route(b.p, &u, &in, &rule)), "block");
	assert_int_equal(rule, 0);
	flow t = flow_to("192.0.2.1", 53, ADDR_TCP);
	assert_string_equal(tag_of(plane_route(b.p, &t, &in, &rule)), "block");
	assert_int_equal(rule, 0);
	flow other = flow_to("192.0.2.1", 54, ADDR_TCP);
	assert_string_equal(tag_of(plane_route(b.p, &other, &in, &rule)), "direct");
	assert_int_equal(rule, -1);
	/* route and route_upstream agree without a service */
	assert_ptr_equal(plane_route(b.p, &u, &in, NULL), plane_route_upstream(b.p, &u, &in, NULL));
	unbuild(&b);
}

#define SERVERS                                                                              \
	"[[dns.server]]\ntag = \"a\"\naddress = \"127.0.0.1:5353\"\n"                           \
	"[[dns.server]]\ntag = \"b\"\nprotocol = \"tcp\"\naddress = \"[::1]\"\n"                \
	"[[dns.server]]\ntag = \"c\"\nprotocol = \"https\"\naddress = \"192.0.2.9\"\n"          \
	"allow_insecure = true\n"                                                               \
	"[[dns.server]]\ntag = \"d\"\nprotocol = \"tls\"\naddress = \"2001:db8::53\"\n"         \
	"server_name = \"dns.example\"\nallow_insecure = true\n"

static void the_rules_pick_an_upstream_by_name_and_final_takes_the_rest(void **state)
{
	(void)state;
	etm_spec s;
	load_spec(BASE SERVERS "[dns]\nfinal = \"b\"\n"
	               "[[dns.rule]]\nserver = \"c\"\ndomain = [\"exact.test\"]\n"
	               "[[dns.rule]]\nserver = \"a\"\ndomain_suffix = [\"corp.test\"]\n"
	               "[[dns.rule]]\nserver = \"d\"\ndomain_keyword = [\"tracker\"]\n"
	               "[[dns.rule]]\nserver = \"a\"\ndomain_regex = [\"^v[0-9]+\\\\.cdn\\\\.\"]\n",
	          &s);
	dns_svc_conf *c;
	char err[256];
	assert_int_equal(build_dns(&s, &c, err, sizeof err), 0);
	assert_non_null(c);
	assert_int_equal(c->n_ups, 4);
	static const struct {
		const char *name;
		size_t up;
	} cases[] = {
		{"exact.test", 2},       {"sub.exact.test", 1}, {"corp.test", 0},
		{"a.b.corp.test", 0},    {"notcorp.test", 1},   {"ads.tracker.example", 3},
		{"v12.cdn.example", 0},  {"cdn.example", 1},    {"", 1},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		assert_int_equal(c->pick(c->rules, cases[i].name), cases[i].up);
	/* the addresses, with each protocol's default port */
	assert_int_equal(c->ups[0].proto, DNS_UP_UDP);
	assert_int_equal(c->ups[0].server.port, 5353);
	assert_int_equal(c->ups[1].server.kind, ADDR_IPV6);
	assert_int_equal(c->ups[1].server.port, 53);
	assert_int_equal(c->ups[2].server.port, 443);
	assert_int_equal(c->ups[3].server.port, 853);
	/* https: Host and path; tls: the configured name */
	assert_string_equal(c->ups[2].host, "192.0.2.9");
	assert_string_equal(c->ups[2].path, "/dns-query");
	assert_non_null(c->ups[2].tls);
	assert_string_equal(c->ups[3].server_name, "dns.example");
	assert_null(c->ups[0].tls);
	assert_int_equal(c->timeout_ms, 5000);
	assert_true(c->prefetch);
	assert_non_null(c->cache);
	dns_svc_conf_unref(c);
	etm_spec_free(&s);
}

static void final_defaults_to_the_first_server_and_hosts_are_kept_lower_case(void **state)
{
	(void)state;
	etm_spec s;
	load_spec(BASE SERVERS "[dns]\ncache_size = 0\ntimeout = 2\nprefetch = false\n"
	               "[[dns.host]]\nname = \"Router.LAN.\"\naddress = [\"192.0.2.53\", "
	               "\"2001:db8::53\"]\n",
	          &s);
	dns_svc_conf *c;
	char err[256];
	assert_int_equal(build_dns(&s, &c, err, sizeof err), 0);
	assert_int_equal(c->pick(c->rules, "anything.test"), 0);
	assert_int_equal(c->n_hosts, 1);
	assert_string_equal(c->hosts[0].name, "router.lan");
	assert_int_equal(c->hosts[0].n, 2);
	assert_int_equal(c->hosts[0].addrs[0].ss_family, AF_INET);
	assert_int_equal(c->hosts[0].addrs[1].ss_family, AF_INET6);
	assert_null(c->cache);
	assert_false(c->prefetch);
	assert_int_equal(c->timeout_ms, 2000);
	dns_svc_conf_unref(c);
	etm_spec_free(&s);
}

static void a_ca_file_that_cannot_be_read_names_the_server(void **state)
{
	(void)state;
	etm_spec s;
	load_spec(BASE "[[dns.server]]\ntag = \"dot\"\nprotocol = \"tls\"\naddress = "
	               "\"127.0.0.1\"\nca = \"/nonexistent/ca.pem\"\n",
	          &s);
	dns_svc_conf *c;
	char err[256];
	assert_int_equal(build_dns(&s, &c, err, sizeof err), -1);
	assert_null(c);
	const char *want = "dns: server dot: tls: cannot read CA file /nonexistent/ca.pem: ";
	assert_memory_equal(err, want, strlen(want));
	etm_spec_free(&s);
}

static void no_server_no_service(void **state)
{
	(void)state;
	etm_spec s;
	load_spec(BASE, &s);
	dns_svc_conf *c = (dns_svc_conf *)&s;
	char err[64];
	assert_int_equal(build_dns(&s, &c, err, sizeof err), 0);
	assert_null(c);
	etm_spec_free(&s);
}

/* config_load's refusal of toml, word for word. */
static void expect_refused(const char *toml, const char *want)
{
	etm_spec s;
	char msg[CONFIG_MSG_MAX];
	assert_int_equal(config_load(toml, strlen(toml), &s, msg, sizeof msg), -1);
	assert_string_equal(msg, want);
}

#define ONE "[[dns.server]]\ntag = \"a\"\naddress = \"127.0.0.1\"\n"

static void every_dns_check_has_its_text(void **state)
{
	(void)state;
	expect_refused(BASE "[dns]\nservers = [\"1.1.1.1\"]\n" ONE,
	               "dns: servers and [[dns.server]] cannot both be set: with [[dns.server]] "
	               "the DNS service answers every lookup");
	expect_refused(BASE "[[dns.rule]]\nserver = \"a\"\ndomain = [\"x\"]\n",
	               "dns: [[dns.rule]] needs at least one [[dns.server]]");
	expect_refused(BASE "[[dns.host]]\nname = \"x\"\naddress = [\"192.0.2.1\"]\n",
	               "dns: [[dns.host]] needs at least one [[dns.server]]");
	expect_refused(BASE "[dns]\nfinal = \"a\"\n", "dns: final needs at least one [[dns.server]]");
	expect_refused(BASE ONE ONE, "dns: duplicate server tag: a");
	expect_refused(BASE "[[dns.server]]\ntag = \"h\"\nprotocol = \"https\"\naddress = "
	                    "\"127.0.0.1\"\npath = \"dns-query\"\n",
	               "dns: server h: path \"dns-query\" must start with /");
	expect_refused(BASE ONE "[[dns.rule]]\nserver = \"a\"\n",
	               "dns rule #1 (server a) has no matcher, so it can never match");
	expect_refused(BASE ONE "[[dns.rule]]\nserver = \"a\"\ndomain_regex = [\"(\"]\n",
	               "dns rule #1: bad domain_regex (: missing closing parenthesis at offset 1");
	expect_refused(BASE ONE "[[dns.host]]\nname = \"x\"\n", "dns: host x needs at least one address");
	expect_refused(BASE ONE "[[dns.host]]\nname = \"x\"\naddress = [\"router\"]\n",
	               "dns: host x: \"router\" is not an IP address");
	expect_refused(BASE ONE "[dns]\ntimeout = 0\n", "dns: timeout must be 1 to 60 seconds");
	expect_refused(BASE ONE "[dns]\ntimeout = 61\n", "dns: timeout must be 1 to 60 seconds");
	expect_refused(BASE ONE "[dns]\ncache_size = 1048577\n",
	               "dns: cache_size must be at most 1048576");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(port_53_is_intercepted_except_for_the_services_own_queries),
		cmocka_unit_test(without_a_dns_service_port_53_follows_the_route_table),
		cmocka_unit_test(the_rules_pick_an_upstream_by_name_and_final_takes_the_rest),
		cmocka_unit_test(final_defaults_to_the_first_server_and_hosts_are_kept_lower_case),
		cmocka_unit_test(a_ca_file_that_cannot_be_read_names_the_server),
		cmocka_unit_test(no_server_no_service),
		cmocka_unit_test(every_dns_check_has_its_text),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
