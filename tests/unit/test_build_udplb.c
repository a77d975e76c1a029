/* test_build_udplb.c - lowering a udp_lb inbound and its [[cluster]] into udplb's configs: what is read, the refusals word for word, and a group that outlives its spec. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "specload.h"

#include "supervisor/build_udplb.h"

#define LB_IN                                                                                      \
	"[[outbound]]\ntag = \"d\"\nprotocol = \"freedom\"\n"                                      \
	"[[inbound]]\ntag = \"lb\"\nprotocol = \"udp_lb\"\nlisten = \"127.0.0.1\"\nport = 0\n"     \
	"[inbound.settings]\ncluster = \"c\"\n"
#define LB_CL "[[cluster]]\ntag = \"c\"\n"

static void reads_settings_and_health(void **state)
{
	(void)state;
	etm_spec s;
	load_spec(LB_IN "max_flows = 10\nmax_rx_datagram_size = 70000\n" LB_CL
	                "backends = [\"127.0.0.1:5301\", \"127.0.0.1:5302 weight=3\"]\n"
	                "[cluster.health]\ntcp_port = 7000\ninterval = 2\ntimeout = 1\n"
	                "udp_payload_hex = \"12 34\"\n",
	          &s);
	udplb_group_config cfg;
	char err[256];
	assert_int_equal(build_udplb(&s.inbounds[0], &s.clusters[0], &cfg, err, sizeof err), 0);
	assert_string_equal(cfg.tag, "lb");
	assert_string_equal(cfg.cluster_tag, "c");
	assert_int_equal(cfg.max_flows, 10);
	assert_int_equal(cfg.max_rx, 70000);
	assert_int_equal(cfg.conf.n_backends, 2);
	assert_int_equal(cfg.conf.backends[1].weight, 3);
	assert_true(cfg.health.enabled);
	assert_true(cfg.health.tcp);
	assert_int_equal(cfg.health.tcp_port, 7000);
	assert_true(cfg.health.udp);
	assert_int_equal(cfg.health.payload_len, 2);
	assert_memory_equal(cfg.health.payload, "\x12\x34", 2);
	assert_int_equal(cfg.health.interval_ms, 2000);
	assert_int_equal(cfg.health.timeout_ms, 1000);
	build_udplb_free(&cfg);
	etm_spec_free(&s);
}

/* The core gets the two timeouts apart, in milliseconds: the specific keys
 * when given, idle_timeout for the others. */
static void core_gets_front_and_back_timeouts(void **state)
{
	(void)state;
	static const struct {
		const char *keys;
		uint32_t front_ms, back_ms;
	} cases[] = {
		{"", 30000, 30000},
		{"idle_timeout = 5\n", 5000, 5000},
		{"front_timeout = 4\nback_timeout = 9\n", 4000, 9000},
		{"idle_timeout = 5\nback_timeout = 1\n", 5000, 1000},
		{"front_timeout = 86400\nidle_timeout = 2\n", 86400000, 2000},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char toml[512], err[256];
		etm_spec s;
		snprintf(toml, sizeof toml, LB_IN LB_CL "backends = [\"127.0.0.1:5301\"]\n%s",
		         cases[i].keys);
		load_spec(toml, &s);
		udplb_group_config cfg;
		assert_int_equal(build_udplb(&s.inbounds[0], &s.clusters[0], &cfg, err, sizeof err), 0);
		assert_int_equal(cfg.conf.cluster.front_timeout_ms, cases[i].front_ms);
		assert_int_equal(cfg.conf.cluster.back_timeout_ms, cases[i].back_ms);
		build_udplb_free(&cfg);
		etm_spec_free(&s);
	}
}

static void refusal_names_the_cluster(void **state)
{
	(void)state;
	etm_spec s;
	load_spec(LB_IN LB_CL "backends = [\"127.0.0.1:5301\"]\n", &s);
	free(s.clusters[0].backends.items[0]);
	s.clusters[0].backends.items[0] = strdup("not an address");
	udplb_group_config cfg;
	char err[256];
	assert_int_equal(build_udplb(&s.inbounds[0], &s.clusters[0], &cfg, err, sizeof err), -1);
	assert_int_equal(strncmp(err, "cluster c: ", 11), 0);
	etm_spec_free(&s);
}

/* The group copies: with the spec and the config gone, its metric lines
 * still name the inbound and the backends. */
static void group_outlives_its_spec(void **state)
{
	(void)state;
	etm_spec s;
	load_spec(LB_IN LB_CL "backends = [\"127.0.0.1:5301\"]\n[cluster.health]\n"
	                      "udp_payload = \"ping\"\n",
	          &s);
	udplb_group_config cfg;
	char err[256];
	assert_int_equal(build_udplb(&s.inbounds[0], &s.clusters[0], &cfg, err, sizeof err), 0);
	udplb_group *g = udplb_group_new(&cfg, 2, 100, err, sizeof err);
	assert_non_null(g);
	build_udplb_free(&cfg);
	etm_spec_free(&s);
	char *text = NULL;
	size_t len = 0;
	FILE *mem = open_memstream(&text, &len);
	assert_non_null(mem);
	udplb_group_write(g, mem);
	fclose(mem);
	assert_non_null(strstr(text, "udp_lb lb: active_flows=0 "));
	assert_non_null(strstr(text, "udp_lb lb: backend 127.0.0.1:5301 up flows_created=0\n"));
	free(text);
	udplb_group_unref(g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(reads_settings_and_health),
		cmocka_unit_test(core_gets_front_and_back_timeouts),
		cmocka_unit_test(refusal_names_the_cluster),
		cmocka_unit_test(group_outlives_its_spec),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
