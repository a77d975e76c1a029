/* test_metrics.c - the exposition writer on hand-made snapshots, byte for byte; label escaping; the [metrics] listen parser; the HTTP answers' texts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <cmocka.h>

#include "app/metrics.h"
#include "app/metrics_http.h"
#include "etemenanki/spec.h"

static const char GLOBAL[] =
	"# HELP etemenanki_build_info Always 1; the labels name the running build.\n"
	"# TYPE etemenanki_build_info gauge\n"
	"etemenanki_build_info{version=\"0.1.0\",commit=\"abc\"} 1\n"
	"# HELP etemenanki_start_time_seconds When the process started, in seconds since the "
	"Unix epoch.\n"
	"# TYPE etemenanki_start_time_seconds gauge\n"
	"etemenanki_start_time_seconds 1700000000\n"
	"# HELP etemenanki_config_epoch The running config's epoch: 1 at the start, one more per "
	"applied reload.\n"
	"# TYPE etemenanki_config_epoch gauge\n"
	"etemenanki_config_epoch 3\n"
	"# HELP etemenanki_flows_open Client connections open on every worker (flows and mux "
	"carriers).\n"
	"# TYPE etemenanki_flows_open gauge\n"
	"etemenanki_flows_open 7\n"
	"# HELP etemenanki_flows_total Client connections opened (TCP accepted, gRPC streams "
	"served).\n"
	"# TYPE etemenanki_flows_total counter\n"
	"etemenanki_flows_total 9\n"
	"# HELP etemenanki_guard_refused_total Connections, sub-flows, calls and dials the "
	"admission guard refused, by reason.\n"
	"# TYPE etemenanki_guard_refused_total counter\n"
	"etemenanki_guard_refused_total{reason=\"source\"} 1\n"
	"etemenanki_guard_refused_total{reason=\"loop\"} 2\n"
	"etemenanki_guard_refused_total{reason=\"fanout\"} 10\n"
	"etemenanki_guard_refused_total{reason=\"open_rate\"} 11\n"
	"# HELP etemenanki_accept_paused_total Listener pauses for lack of file descriptors.\n"
	"# TYPE etemenanki_accept_paused_total counter\n"
	"etemenanki_accept_paused_total 3\n"
	"# HELP etemenanki_reloads_total Config reloads, by result.\n"
	"# TYPE etemenanki_reloads_total counter\n"
	"etemenanki_reloads_total{result=\"ok\"} 4\n"
	"etemenanki_reloads_total{result=\"failed\"} 5\n"
	"# HELP etemenanki_balancer_member_up Whether a balancer member passes its health probes "
	"(1) or not (0).\n"
	"# TYPE etemenanki_balancer_member_up gauge\n"
	"etemenanki_balancer_member_up{balancer=\"fo\",member=\"a\"} 1\n"
	"etemenanki_balancer_member_up{balancer=\"fo\",member=\"b\"} 0\n"
	"etemenanki_balancer_member_up{balancer=\"fo\",member=\"c\"} 0\n"
	"# HELP etemenanki_balancer_member_probe_seconds The last health probe's time to connect; "
	"NaN when it failed or none has ended.\n"
	"# TYPE etemenanki_balancer_member_probe_seconds gauge\n"
	"etemenanki_balancer_member_probe_seconds{balancer=\"fo\",member=\"a\"} 0.012\n"
	"etemenanki_balancer_member_probe_seconds{balancer=\"fo\",member=\"b\"} NaN\n"
	"etemenanki_balancer_member_probe_seconds{balancer=\"fo\",member=\"c\"} NaN\n"
	"# HELP etemenanki_balancer_member_probe_timestamp_seconds When the last health probe "
	"ended, in seconds since the Unix epoch; 0 before the first.\n"
	"# TYPE etemenanki_balancer_member_probe_timestamp_seconds gauge\n"
	"etemenanki_balancer_member_probe_timestamp_seconds{balancer=\"fo\",member=\"a\"} "
	"1700000001.005\n"
	"etemenanki_balancer_member_probe_timestamp_seconds{balancer=\"fo\",member=\"b\"} "
	"1700000002.345\n"
	"etemenanki_balancer_member_probe_timestamp_seconds{balancer=\"fo\",member=\"c\"} "
	"0.000\n"
	"# HELP etemenanki_balancer_member_probes_total Health probes ended, since the balancer "
	"was built.\n"
	"# TYPE etemenanki_balancer_member_probes_total counter\n"
	"etemenanki_balancer_member_probes_total{balancer=\"fo\",member=\"a\"} 30\n"
	"etemenanki_balancer_member_probes_total{balancer=\"fo\",member=\"b\"} 31\n"
	"etemenanki_balancer_member_probes_total{balancer=\"fo\",member=\"c\"} 0\n"
	"# HELP etemenanki_balancer_member_probes_failed_total Health probes that failed, since "
	"the balancer was built.\n"
	"# TYPE etemenanki_balancer_member_probes_failed_total counter\n"
	"etemenanki_balancer_member_probes_failed_total{balancer=\"fo\",member=\"a\"} 1\n"
	"etemenanki_balancer_member_probes_failed_total{balancer=\"fo\",member=\"b\"} 31\n"
	"etemenanki_balancer_member_probes_failed_total{balancer=\"fo\",member=\"c\"} 0\n"
	"# HELP etemenanki_metrics_connections_refused_total Connections to this endpoint closed "
	"at once: too many were open.\n"
	"# TYPE etemenanki_metrics_connections_refused_total counter\n"
	"etemenanki_metrics_connections_refused_total 6\n"
	"# HELP etemenanki_dial_errors_total Failed opens of a flow's upstream, by reason.\n"
	"# TYPE etemenanki_dial_errors_total counter\n"
	"etemenanki_dial_errors_total{reason=\"general\"} 10\n"
	"etemenanki_dial_errors_total{reason=\"not_allowed\"} 0\n"
	"etemenanki_dial_errors_total{reason=\"net_unreachable\"} 12\n"
	"etemenanki_dial_errors_total{reason=\"host_unreachable\"} 13\n"
	"etemenanki_dial_errors_total{reason=\"refused\"} 14\n"
	"etemenanki_dial_errors_total{reason=\"timed_out\"} 15\n"
	"# HELP etemenanki_tls_handshakes_total TLS handshakes completed, by side and whether a "
	"session resumed.\n"
	"# TYPE etemenanki_tls_handshakes_total counter\n"
	"etemenanki_tls_handshakes_total{side=\"client\",resumed=\"false\"} 30\n"
	"etemenanki_tls_handshakes_total{side=\"client\",resumed=\"true\"} 31\n"
	"etemenanki_tls_handshakes_total{side=\"server\",resumed=\"false\"} 32\n"
	"etemenanki_tls_handshakes_total{side=\"server\",resumed=\"true\"} 33\n"
	"# HELP etemenanki_dns_cache_hits_total DNS lookups answered from the cache with "
	"addresses.\n"
	"# TYPE etemenanki_dns_cache_hits_total counter\n"
	"etemenanki_dns_cache_hits_total 20\n"
	"# HELP etemenanki_dns_cache_negative_hits_total DNS lookups answered from the cache with "
	"a name that has no address.\n"
	"# TYPE etemenanki_dns_cache_negative_hits_total counter\n"
	"etemenanki_dns_cache_negative_hits_total 21\n"
	"# HELP etemenanki_dns_cache_misses_total DNS lookups the cache could not answer, sent to "
	"a server.\n"
	"# TYPE etemenanki_dns_cache_misses_total counter\n"
	"etemenanki_dns_cache_misses_total 22\n"
	"# HELP etemenanki_dns_cache_evictions_total DNS cache entries dropped to make room for "
	"another.\n"
	"# TYPE etemenanki_dns_cache_evictions_total counter\n"
	"etemenanki_dns_cache_evictions_total 23\n"
	"# HELP etemenanki_dns_cache_entries Names the DNS cache holds now.\n"
	"# TYPE etemenanki_dns_cache_entries gauge\n"
	"etemenanki_dns_cache_entries 24\n";

/* The usage families' HELP and TYPE lines, with empty tables (the flow
 * tracker not counting yet, or nothing carried). */
static const char USAGE_EMPTY[] =
	"# HELP etemenanki_inbound_flows_open Flows open now, by the inbound that accepted them.\n"
	"# TYPE etemenanki_inbound_flows_open gauge\n"
	"# HELP etemenanki_inbound_flows_total Flows opened since the start, by inbound.\n"
	"# TYPE etemenanki_inbound_flows_total counter\n"
	"# HELP etemenanki_inbound_bytes_total App bytes of the flows, by inbound and direction "
	"(up: from the client).\n"
	"# TYPE etemenanki_inbound_bytes_total counter\n"
	"# HELP etemenanki_outbound_flows_open Flows open now, by the outbound that carries them "
	"(a balancer's member).\n"
	"# TYPE etemenanki_outbound_flows_open gauge\n"
	"# HELP etemenanki_outbound_flows_total Flows opened since the start, by outbound.\n"
	"# TYPE etemenanki_outbound_flows_total counter\n"
	"# HELP etemenanki_outbound_bytes_total App bytes of the flows, by outbound and direction "
	"(up: from the client).\n"
	"# TYPE etemenanki_outbound_bytes_total counter\n"
	"# HELP etemenanki_user_flows_open Flows open now, by user (user=\"\": flows without "
	"one).\n"
	"# TYPE etemenanki_user_flows_open gauge\n"
	"# HELP etemenanki_user_flows_total Flows opened since the start, by user.\n"
	"# TYPE etemenanki_user_flows_total counter\n"
	"# HELP etemenanki_user_bytes_total App bytes of the flows, by user and direction (up: "
	"from the client).\n"
	"# TYPE etemenanki_user_bytes_total counter\n";

/* The UDP families' HELP and TYPE lines, with no udp_lb inbound. */
static const char UDP_EMPTY[] =
	"# HELP etemenanki_udp_active_flows UDP load-balancer flows open now.\n"
	"# TYPE etemenanki_udp_active_flows gauge\n"
	"# HELP etemenanki_udp_flows_created_total UDP load-balancer flows opened.\n"
	"# TYPE etemenanki_udp_flows_created_total counter\n"
	"# HELP etemenanki_udp_flows_evicted_total UDP load-balancer flows closed, for any "
	"reason.\n"
	"# TYPE etemenanki_udp_flows_evicted_total counter\n"
	"# HELP etemenanki_udp_flows_shed_total New UDP flows refused by a limit (the sum of the "
	"shed_* drops).\n"
	"# TYPE etemenanki_udp_flows_shed_total counter\n"
	"# HELP etemenanki_udp_datagrams_to_backends_total Client datagrams sent toward a "
	"backend.\n"
	"# TYPE etemenanki_udp_datagrams_to_backends_total counter\n"
	"# HELP etemenanki_udp_bytes_to_backends_total Payload bytes of the client datagrams sent "
	"toward a backend.\n"
	"# TYPE etemenanki_udp_bytes_to_backends_total counter\n"
	"# HELP etemenanki_udp_datagrams_to_clients_total Backend datagrams relayed back to "
	"clients.\n"
	"# TYPE etemenanki_udp_datagrams_to_clients_total counter\n"
	"# HELP etemenanki_udp_bytes_to_clients_total Payload bytes of the backend datagrams "
	"relayed back to clients.\n"
	"# TYPE etemenanki_udp_bytes_to_clients_total counter\n"
	"# HELP etemenanki_udp_sockets_reused_total New UDP flows that took a waiting upstream "
	"socket instead of opening one.\n"
	"# TYPE etemenanki_udp_sockets_reused_total counter\n"
	"# HELP etemenanki_udp_flow_duration_seconds_total The summed lifetime of every closed "
	"UDP flow.\n"
	"# TYPE etemenanki_udp_flow_duration_seconds_total counter\n"
	"# HELP etemenanki_udp_datagrams_dropped_total UDP datagrams dropped, by reason (seed 001 "
	"udp.datagrams.dropped).\n"
	"# TYPE etemenanki_udp_datagrams_dropped_total counter\n"
	"# HELP etemenanki_udp_datagrams_dropped_wq_full_total UDP datagrams dropped because a "
	"flow's write queue was full (seed 001 udp.datagrams.dropped.wq_full; also "
	"reason=\"queue_full\" above).\n"
	"# TYPE etemenanki_udp_datagrams_dropped_wq_full_total counter\n"
	"# HELP etemenanki_udp_flows_closed_total UDP flows closed, by reason.\n"
	"# TYPE etemenanki_udp_flows_closed_total counter\n"
	"# HELP etemenanki_udp_backend_up Whether a UDP backend passes its health checks (1) or "
	"not (0).\n"
	"# TYPE etemenanki_udp_backend_up gauge\n"
	"# HELP etemenanki_udp_backend_flows_created_total UDP flows given to a backend.\n"
	"# TYPE etemenanki_udp_backend_flows_created_total counter\n";

/* a: probed in 12 ms; b: its last probe failed; c: none has ended yet */
static const metrics_member MEMBERS[] = {
	{.balancer = "fo", .member = "a", .up = 1, .probe_ms = 12, .probe_when_ms = 1700000001005,
	 .probes = 30, .probes_failed = 1},
	{.balancer = "fo", .member = "b", .up = 0, .probe_ms = -1, .probe_when_ms = 1700000002345,
	 .probes = 31, .probes_failed = 31},
	{.balancer = "fo", .member = "c", .up = 0, .probe_ms = -1, .probe_when_ms = 0},
};

static metrics_snapshot base(void)
{
	return (metrics_snapshot){
		.version = "0.1.0",
		.commit = "abc",
		.start_time = 1700000000,
		.flows_open = 7,
		.flows_total = 9,
		.epoch = 3,
		.guard = {.refused_source = 1, .refused_loop = 2, .accept_paused = 3,
		          .refused_fanout = 10, .refused_open_rate = 11},
		.reloads_ok = 4,
		.reloads_failed = 5,
		.scrape_connections_refused = 6,
		.n_members = 3,
		.members = MEMBERS,
		.dial_errors = {10, 0, 12, 13, 14, 15},
		.tls = {.client_full = 30, .client_resumed = 31, .server_full = 32, .server_resumed = 33},
		.dns = {.hits = 20, .negative = 21, .misses = 22, .evictions = 23, .entries = 24},
	};
}

static void test_no_udplb(void **state)
{
	(void)state;
	metrics_snapshot s = base();
	metrics_buf b = {0};
	assert_int_equal(metrics_write(&s, &b), 0);
	char want[sizeof GLOBAL + sizeof USAGE_EMPTY + sizeof UDP_EMPTY];
	snprintf(want, sizeof want, "%s%s%s", GLOBAL, USAGE_EMPTY, UDP_EMPTY);
	assert_string_equal(b.p, want);
	assert_int_equal(b.len, strlen(want));
	metrics_buf_free(&b);
}

/* Returns whether line (with its line feed) is one of text's lines. */
static int has_line(const char *text, const char *line)
{
	size_t n = strlen(line);
	for (const char *p = text; (p = strstr(p, line)) != NULL; p++)
		if ((p == text || p[-1] == '\n') && p[n] == '\n')
			return 1;
	return 0;
}

static void test_udplb(void **state)
{
	(void)state;
	metrics_backend be[2] = {
		{.addr = "10.0.0.1:53", .up = 1, .flows_created = 11},
		{.addr = "[::1]:53", .up = 0, .flows_created = 0},
	};
	metrics_udplb lb = {.tag = "dns", .n_backends = 2, .backends = be};
	lb.st.active_flows = 2;
	lb.st.flows_created = 12;
	lb.st.datagrams_to_backends = 40;
	lb.st.bytes_to_backends = 400;
	lb.st.flow_duration_ms = 12345;
	for (size_t k = 0; k < ETM_UDPLB_DROP_KINDS; k++)
		lb.st.drops[k] = 100 + k;
	for (size_t k = 0; k < ETM_UDPLB_CLOSE_KINDS; k++)
		lb.st.evicted[k] = 200 + k;
	metrics_snapshot s = base();
	s.n_udplb = 1;
	s.udplb = &lb;
	metrics_buf b = {0};
	assert_int_equal(metrics_write(&s, &b), 0);
	assert_true(strncmp(b.p, GLOBAL, strlen(GLOBAL)) == 0);
	static const char *const lines[] = {
		"etemenanki_udp_active_flows{inbound=\"dns\"} 2",
		"etemenanki_udp_flows_created_total{inbound=\"dns\"} 12",
		"etemenanki_udp_flows_evicted_total{inbound=\"dns\"} 0",
		"etemenanki_udp_datagrams_to_backends_total{inbound=\"dns\"} 40",
		"etemenanki_udp_bytes_to_backends_total{inbound=\"dns\"} 400",
		"etemenanki_udp_flow_duration_seconds_total{inbound=\"dns\"} 12.345",
		"etemenanki_udp_datagrams_dropped_total{inbound=\"dns\",reason=\"truncated\"} 100",
		"etemenanki_udp_datagrams_dropped_total{inbound=\"dns\",reason=\"queue_full\"} 109",
		"etemenanki_udp_datagrams_dropped_total{inbound=\"dns\",reason=\"send_error\"} 111",
		"etemenanki_udp_datagrams_dropped_wq_full_total{inbound=\"dns\"} 109",
		"etemenanki_udp_flows_closed_total{inbound=\"dns\",reason=\"idle\"} 200",
		"etemenanki_udp_flows_closed_total{inbound=\"dns\",reason=\"removed\"} 205",
		"etemenanki_udp_backend_up{inbound=\"dns\",backend=\"10.0.0.1:53\"} 1",
		"etemenanki_udp_backend_up{inbound=\"dns\",backend=\"[::1]:53\"} 0",
		"etemenanki_udp_backend_flows_created_total{inbound=\"dns\",backend=\"10.0.0.1:53\"} 11",
	};
	for (size_t i = 0; i < sizeof lines / sizeof *lines; i++) {
		if (!has_line(b.p, lines[i]))
			fail_msg("missing line: %s", lines[i]);
	}
	/* each family's samples follow its TYPE line, before the next HELP */
	const char *t = strstr(b.p, "# TYPE etemenanki_udp_backend_up gauge\n");
	assert_non_null(t);
	assert_true(strstr(t, "etemenanki_udp_backend_up{") < strstr(t, "# HELP"));
	metrics_buf_free(&b);
}

/* Usage tables with rows: every family's samples in the tables' order,
 * up before down, the anonymous user as user="", names escaped. */
static void test_usage(void **state)
{
	(void)state;
	etm_usage in[] = {
		{.name = "socks", .up = 100, .down = 2000, .open = 1, .total = 3},
		{.name = "tro\"jan", .up = 5, .down = 6, .open = 0, .total = 1},
	};
	etm_usage out[] = {{.name = "direct", .up = 105, .down = 2006, .open = 1, .total = 4}};
	etm_usage users[] = {
		{.name = "", .up = 5, .down = 6, .open = 0, .total = 1},
		{.name = "alice", .up = 100, .down = 2000, .open = 1, .total = 3},
	};
	metrics_snapshot s = base();
	s.usage[ETM_USAGE_INBOUND] = (etm_usage_list){.v = in, .n = 2};
	s.usage[ETM_USAGE_OUTBOUND] = (etm_usage_list){.v = out, .n = 1};
	s.usage[ETM_USAGE_USER] = (etm_usage_list){.v = users, .n = 2};
	static const char want[] =
		"# HELP etemenanki_inbound_flows_open Flows open now, by the inbound that accepted "
		"them.\n"
		"# TYPE etemenanki_inbound_flows_open gauge\n"
		"etemenanki_inbound_flows_open{inbound=\"socks\"} 1\n"
		"etemenanki_inbound_flows_open{inbound=\"tro\\\"jan\"} 0\n"
		"# HELP etemenanki_inbound_flows_total Flows opened since the start, by inbound.\n"
		"# TYPE etemenanki_inbound_flows_total counter\n"
		"etemenanki_inbound_flows_total{inbound=\"socks\"} 3\n"
		"etemenanki_inbound_flows_total{inbound=\"tro\\\"jan\"} 1\n"
		"# HELP etemenanki_inbound_bytes_total App bytes of the flows, by inbound and direction "
		"(up: from the client).\n"
		"# TYPE etemenanki_inbound_bytes_total counter\n"
		"etemenanki_inbound_bytes_total{inbound=\"socks\",direction=\"up\"} 100\n"
		"etemenanki_inbound_bytes_total{inbound=\"socks\",direction=\"down\"} 2000\n"
		"etemenanki_inbound_bytes_total{inbound=\"tro\\\"jan\",direction=\"up\"} 5\n"
		"etemenanki_inbound_bytes_total{inbound=\"tro\\\"jan\",direction=\"down\"} 6\n"
		"# HELP etemenanki_outbound_flows_open Flows open now, by the outbound that carries "
		"them (a balancer's member).\n"
		"# TYPE etemenanki_outbound_flows_open gauge\n"
		"etemenanki_outbound_flows_open{outbound=\"direct\"} 1\n"
		"# HELP etemenanki_outbound_flows_total Flows opened since the start, by outbound.\n"
		"# TYPE etemenanki_outbound_flows_total counter\n"
		"etemenanki_outbound_flows_total{outbound=\"direct\"} 4\n"
		"# HELP etemenanki_outbound_bytes_total App bytes of the flows, by outbound and "
		"direction (up: from the client).\n"
		"# TYPE etemenanki_outbound_bytes_total counter\n"
		"etemenanki_outbound_bytes_total{outbound=\"direct\",direction=\"up\"} 105\n"
		"etemenanki_outbound_bytes_total{outbound=\"direct\",direction=\"down\"} 2006\n"
		"# HELP etemenanki_user_flows_open Flows open now, by user (user=\"\": flows without "
		"one).\n"
		"# TYPE etemenanki_user_flows_open gauge\n"
		"etemenanki_user_flows_open{user=\"\"} 0\n"
		"etemenanki_user_flows_open{user=\"alice\"} 1\n"
		"# HELP etemenanki_user_flows_total Flows opened since the start, by user.\n"
		"# TYPE etemenanki_user_flows_total counter\n"
		"etemenanki_user_flows_total{user=\"\"} 1\n"
		"etemenanki_user_flows_total{user=\"alice\"} 3\n"
		"# HELP etemenanki_user_bytes_total App bytes of the flows, by user and direction (up: "
		"from the client).\n"
		"# TYPE etemenanki_user_bytes_total counter\n"
		"etemenanki_user_bytes_total{user=\"\",direction=\"up\"} 5\n"
		"etemenanki_user_bytes_total{user=\"\",direction=\"down\"} 6\n"
		"etemenanki_user_bytes_total{user=\"alice\",direction=\"up\"} 100\n"
		"etemenanki_user_bytes_total{user=\"alice\",direction=\"down\"} 2000\n";
	metrics_buf b = {0};
	assert_int_equal(metrics_write(&s, &b), 0);
	char full[sizeof GLOBAL + sizeof want + sizeof UDP_EMPTY];
	snprintf(full, sizeof full, "%s%s%s", GLOBAL, want, UDP_EMPTY);
	assert_string_equal(b.p, full);
	metrics_buf_free(&b);
}

static void test_escape(void **state)
{
	(void)state;
	static const struct {
		const char *in, *out;
	} cases[] = {
		{"plain", "plain"},
		{"", ""},
		{"a\\b", "a\\\\b"},
		{"say \"hi\"", "say \\\"hi\\\""},
		{"two\nlines", "two\\nlines"},
		{"\\\"\n", "\\\\\\\"\\n"},
		{"tab\tand ümlaut", "tab\tand ümlaut"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		metrics_buf b = {0};
		assert_int_equal(metrics_escape(&b, cases[i].in), 0);
		assert_string_equal(b.p ? b.p : "", cases[i].out);
		metrics_buf_free(&b);
	}
	/* in a sample: the tag of an inbound and the build's labels */
	metrics_udplb lb = {.tag = "a\"b\\c\nd"};
	metrics_snapshot s = base();
	s.version = "1\"2";
	s.n_udplb = 1;
	s.udplb = &lb;
	metrics_buf b = {0};
	assert_int_equal(metrics_write(&s, &b), 0);
	assert_true(has_line(b.p, "etemenanki_build_info{version=\"1\\\"2\",commit=\"abc\"} 1"));
	assert_true(has_line(b.p, "etemenanki_udp_active_flows{inbound=\"a\\\"b\\\\c\\nd\"} 0"));
	metrics_buf_free(&b);
}

static void test_listen_parse(void **state)
{
	(void)state;
	struct sockaddr_storage ss;
	assert_int_equal(etm_listen_addr_parse("127.0.0.1:9100", &ss), 0);
	assert_int_equal(ss.ss_family, AF_INET);
	assert_int_equal(ntohs(((struct sockaddr_in *)&ss)->sin_port), 9100);
	assert_int_equal(etm_listen_addr_parse("[::1]:0", &ss), 0);
	assert_int_equal(ss.ss_family, AF_INET6);
	assert_int_equal(etm_listen_addr_parse("0.0.0.0:65535", &ss), 0);
	static const char *const bad[] = {
		"", "127.0.0.1", "127.0.0.1:", ":9100", "localhost:9100", "127.0.0.1:65536",
		"127.0.0.1:91a0", "::1:9100", "[::1]", "[::1:9100", "127.0.0.1:0009100",
		"[127.0.0.1]:80",
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
		if (etm_listen_addr_parse(bad[i], &ss) == 0)
			fail_msg("accepted: %s", bad[i]);
}

static void test_answer_texts(void **state)
{
	(void)state;
	static const struct {
		int status;
		const char *reason, *body;
	} want[] = {
		{200, "OK", ""},
		{400, "Bad Request", "bad request\n"},
		{404, "Not Found", "not found: only /metrics is served here\n"},
		{405, "Method Not Allowed", "method not allowed: use GET or HEAD\n"},
		{413, "Content Too Large", "a request body is not accepted\n"},
		{431, "Request Header Fields Too Large", "request head over 8192 bytes\n"},
		{500, "Internal Server Error", "out of memory\n"},
		{505, "HTTP Version Not Supported", "only HTTP/1.x is served\n"},
		{999, "", ""},
	};
	for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
		assert_string_equal(metrics_http_reason(want[i].status), want[i].reason);
		assert_string_equal(metrics_http_body(want[i].status), want[i].body);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_no_udplb),   cmocka_unit_test(test_udplb),
		cmocka_unit_test(test_usage),
		cmocka_unit_test(test_escape),     cmocka_unit_test(test_listen_parse),
		cmocka_unit_test(test_answer_texts),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
