/* test_build_route.c - lowering the spec's [route] into a route_config: every matcher carried over, the default tag, and a table that outlives its spec. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "specload.h"

#include "supervisor/build_route.h"

#define OUTS                                                                                       \
	"[[outbound]]\ntag = \"a\"\nprotocol = \"freedom\"\n"                                      \
	"[[outbound]]\ntag = \"b\"\nprotocol = \"freedom\"\n"

static void carries_every_matcher(void **state)
{
	(void)state;
	etm_spec s;
	load_spec(OUTS "[route]\ndefault = \"b\"\ngeoip = \"geoip.dat\"\ngeosite = \"geosite.dat\"\n"
	               "[[route.rule]]\noutbound = \"a\"\nport = [80, \"1000-2000\"]\nnetwork = \"udp\"\n"
	               "domain = [\"x.example\"]\ndomain_suffix = [\"y.example\"]\n"
	               "domain_keyword = [\"kw\"]\ndomain_regex = [\"^r$\"]\ngeosite = [\"cn\"]\n"
	               "cidr = [\"10.0.0.0/8\"]\ngeoip = [\"!cn\"]\ninbound_tag = [\"in\"]\n"
	               "source_cidr = [\"192.0.2.0/24\"]\n",
	          &s);
	route_config cfg;
	char err[256];
	assert_int_equal(build_route(&s, &cfg, err, sizeof err), 0);
	assert_string_equal(cfg.default_tag, "b");
	assert_string_equal(cfg.geoip, "geoip.dat");
	assert_string_equal(cfg.geosite, "geosite.dat");
	assert_int_equal(cfg.nrules, 1);
	const route_rule_config *r = &cfg.rules[0];
	assert_string_equal(r->target, "a");
	assert_int_equal(r->networks, ROUTE_NET_UDP);
	assert_int_equal(r->port.len, 2);
	assert_int_equal(r->port.items[0].first, 80);
	assert_int_equal(r->port.items[0].last, 80);
	assert_int_equal(r->port.items[1].first, 1000);
	assert_int_equal(r->port.items[1].last, 2000);
	const struct {
		const route_strs *l;
		const char *want;
	} lists[] = {
		{&r->domain, "x.example"}, {&r->domain_suffix, "y.example"},
		{&r->domain_keyword, "kw"}, {&r->domain_regex, "^r$"},
		{&r->geosite, "cn"},        {&r->cidr, "10.0.0.0/8"},
		{&r->geoip, "!cn"},         {&r->inbound_tag, "in"},
		{&r->source_cidr, "192.0.2.0/24"},
	};
	for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++) {
		assert_int_equal(lists[i].l->len, 1);
		assert_string_equal(lists[i].l->items[0], lists[i].want);
	}
	build_route_free(&cfg);
	etm_spec_free(&s);
}

/* Without [route].default the first outbound is the default. */
static void default_is_the_first_outbound(void **state)
{
	(void)state;
	etm_spec s;
	load_spec(OUTS, &s);
	route_config cfg;
	char err[256];
	assert_int_equal(build_route(&s, &cfg, err, sizeof err), 0);
	assert_string_equal(cfg.default_tag, "a");
	assert_int_equal(cfg.nrules, 0);
	build_route_free(&cfg);
	etm_spec_free(&s);
}

/* The table copies: with the spec gone, it still decides and names slots. */
static void table_outlives_its_spec(void **state)
{
	(void)state;
	etm_spec s;
	load_spec(OUTS "[route]\ndefault = \"a\"\n[[route.rule]]\noutbound = \"b\"\nport = 53\n"
	               "inbound_tag = [\"in\"]\n",
	          &s);
	route_table *t;
	char err[256];
	assert_int_equal(build_route_table(&s, &t, err, sizeof err), 0);
	etm_spec_free(&s);
	assert_int_equal(route_table_slots(t), 2);
	assert_string_equal(route_table_slot_tag(t, 0), "b");
	assert_string_equal(route_table_slot_tag(t, 1), "a");
	addr_dest d;
	memset(&d, 0, sizeof d);
	assert_int_equal(addr_dest_set_domain(&d, "x.example", 9, 443), 0);
	route_target tg = {.dest = &d, .inbound_tag = "in"};
	route_decision dec = route_table_decide(t, &tg);
	assert_int_equal(dec.rule, 0);
	tg.inbound_tag = "other";
	dec = route_table_decide(t, &tg);
	assert_int_equal(dec.rule, -1);
	assert_int_equal(dec.slot, 1);
	route_table_free(t);
}

/* route_table_build's refusals come through word for word. */
static void refusal_comes_through(void **state)
{
	(void)state;
	etm_spec s;
	load_spec(OUTS "[[route.rule]]\noutbound = \"b\"\ncidr = [\"10.0.0.0/8\"]\n", &s);
	free(s.route.rules[0].cidr.items[0]);
	s.route.rules[0].cidr.items[0] = strdup("10.0.0.0/33");
	route_table *t = (route_table *)&t;
	char err[256];
	assert_int_equal(build_route_table(&s, &t, err, sizeof err), -1);
	assert_null(t);
	assert_string_equal(err, "building route failed: invalid CIDR \"10.0.0.0/33\"");
	etm_spec_free(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(carries_every_matcher),
		cmocka_unit_test(default_is_the_first_outbound),
		cmocka_unit_test(table_outlives_its_spec),
		cmocka_unit_test(refusal_comes_through),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
