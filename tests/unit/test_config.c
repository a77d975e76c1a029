/* test_config.c - the TOML lowering: defaults, aliases, and every schema error word for word. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "app/config.h"
#include "supervisor/build_udplb.h"
#include "udplb/conf.h"
#include "app/schema.h"
#include "toml/toml.h"

static const char MINIMAL[] = "[[outbound]]\ntag = \"direct\"\nprotocol = \"freedom\"\n";

static etm_spec load_ok(const char *toml)
{
	etm_spec s;
	char msg[CONFIG_MSG_MAX];
	if (config_load(toml, strlen(toml), &s, msg, sizeof msg))
		fail_msg("unexpected error:\n%s", msg);
	return s;
}

/* The last line of the report: the detail without the excerpt. */
static const char *detail(const char *msg)
{
	const char *nl = strrchr(msg, '\n');
	return nl ? nl + 1 : msg;
}

static void expect_detail(const char *toml, const char *want)
{
	etm_spec s;
	char msg[CONFIG_MSG_MAX];
	assert_int_equal(config_load(toml, strlen(toml), &s, msg, sizeof msg), -1);
	assert_string_equal(detail(msg), want);
	assert_true(strncmp(msg, "TOML parse error at line ", 25) == 0);
	assert_null(s.outbounds); /* freed on failure */
}

static void expect_message(const char *toml, const char *want)
{
	etm_spec s;
	char msg[CONFIG_MSG_MAX];
	assert_int_equal(config_load(toml, strlen(toml), &s, msg, sizeof msg), -1);
	assert_string_equal(msg, want);
}

static void defaults(void **state)
{
	(void)state;
	etm_spec s = load_ok("[[inbound]]\ntag = \"in\"\nprotocol = \"socks\"\nport = 1080\n"
	                     "[[outbound]]\ntag = \"direct\"\nprotocol = \"direct\"\n"
	                     "[[outbound]]\ntag = \"p\"\nprotocol = \"trojan\"\nserver = \"h\"\n"
	                     "port = 443\nsettings = { password = \"pw\" }\n"
	                     "[[outbound]]\ntag = \"wg\"\nprotocol = \"wireguard\"\n"
	                     "[outbound.settings]\nsecret_key = \"a\"\npeer_public_key = \"b\"\n"
	                     "endpoint = \"h:51820\"\n"
	                     "[[balancer]]\ntag = \"b\"\noutbounds = [\"p\"]\n");
	assert_int_equal(s.log_level, ETM_LOG_INFO);
	assert_null(s.log_access); /* "off" */
	assert_int_equal(s.runtime.workers, 0);
	assert_true(s.runtime.splice);
	assert_int_equal(s.policy.handshake_timeout, 10);
	assert_int_equal(s.policy.idle_timeout, 300);
	assert_int_equal(s.policy.upgrade_drain_after, 600);
	assert_int_equal(s.policy.upgrade_start_timeout, 60);
	assert_int_equal(s.inbounds_len, 1);
	assert_null(s.inbounds[0].listen);
	assert_false(s.inbounds[0].sniffing);
	assert_int_equal(s.inbounds[0].stream.network, ETM_NET_TCP);
	assert_int_equal(s.inbounds[0].stream.security, ETM_SEC_NONE);
	assert_int_equal(s.outbounds[0].protocol, ETM_PROTO_FREEDOM);
	assert_false(s.outbounds[0].has_port);
	assert_int_equal(s.outbounds[1].address_family, ETM_AF_AUTO);
	assert_string_equal(s.outbounds[1].settings.password, "pw");
	assert_int_equal(s.outbounds[2].settings.mtu, 1420);
	assert_int_equal(s.balancers[0].probe_interval, 30);
	assert_int_equal(s.balancers[0].probe_timeout, 5);
	assert_null(s.balancers[0].strategy);
	assert_int_equal(s.balancers[0].strategy_kind, ETM_STRATEGY_FAILOVER);
	assert_string_equal(etm_spec_default_tag(&s), "direct");
	etm_spec_free(&s);
}

static void aliases_fold(void **state)
{
	(void)state;
	static const struct {
		const char *name;
		etm_protocol p;
	} cases[] = {
		{"direct", ETM_PROTO_FREEDOM},      {"freedom", ETM_PROTO_FREEDOM},
		{"block", ETM_PROTO_BLACKHOLE},     {"blackhole", ETM_PROTO_BLACKHOLE},
		{"hysteria", ETM_PROTO_HYSTERIA2},  {"hy2", ETM_PROTO_HYSTERIA2},
		{"hysteria2", ETM_PROTO_HYSTERIA2},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char toml[256];
		snprintf(toml, sizeof toml,
		         "[[outbound]]\ntag = \"o\"\nprotocol = \"%s\"\nserver = \"h\"\nport = 1\n"
		         "settings.password = \"x\"\n",
		         cases[i].name);
		if (cases[i].p != ETM_PROTO_HYSTERIA2) /* freedom and blackhole take no settings */
			*strstr(toml, "settings.") = '\0';
		etm_spec s = load_ok(toml);
		assert_int_equal(s.outbounds[0].protocol, cases[i].p);
		etm_spec_free(&s);
	}
}

static void everything_lowers(void **state)
{
	(void)state;
	etm_spec s = load_ok(
		"[log]\nlevel = \"debug\"\naccess = \"/var/log/etemenanki/access.log\"\n"
		"[runtime]\nworkers = 3\nsplice = false\n[policy]\nhandshake_timeout = 4\nidle_timeout = 60\n"
		"[dns]\nservers = [\"1.1.1.1\", \"9.9.9.9:53\"]\n"
		"[[inbound]]\ntag = \"tr\"\nprotocol = \"trojan\"\nlisten = \"::\"\nport = 443\n"
		"sniffing = true\n"
		"[inbound.settings]\nfallback = \"127.0.0.1:80\"\n"
		"[[inbound.settings.users]]\npassword = \"a\"\nname = \"alice\"\n"
		"[[inbound.settings.users]]\npassword = \"b\"\n"
		"[inbound.stream]\nnetwork = \"ws\"\nsecurity = \"tls\"\n"
		"[inbound.stream.tls]\ncertificate = \"c.pem\"\nkey = \"k.pem\"\nalpn = [\"h2\"]\n"
		"[inbound.stream.ws]\npath = \"/t\"\n"
		"[[outbound]]\ntag = \"vm\"\nprotocol = \"vmess\"\nserver = \"h\"\nport = 443\n"
		"address_family = \"ipv4_only\"\n"
		"[outbound.settings]\nid = \"11111111-2222-3333-4444-555555555555\"\n"
		"security = \"chacha20-poly1305\"\n"
		"[outbound.stream]\nnetwork = \"grpc\"\nsecurity = \"tls\"\n"
		"[outbound.stream.grpc]\nservice_name = \"tunnel\"\n"
		"[outbound.stream.tls]\nserver_name = \"h\"\nallow_insecure = true\nca = \"ca.pem\"\n"
		"[[outbound]]\ntag = \"ss\"\nprotocol = \"shadowsocks\"\nserver = \"h\"\nport = 8388\n"
		"settings = { method = \"2022-blake3-aes-128-gcm\", password = \"k\" }\n"
		"[route]\ndefault = \"ss\"\ngeoip = \"geoip.dat\"\ngeosite = \"geosite.dat\"\n"
		"[[route.rule]]\noutbound = \"vm\"\nport = [80, \"1000-2000\"]\nnetwork = \"udp\"\n"
		"domain = [\"a.example\"]\ndomain_suffix = [\"b.example\"]\n"
		"domain_keyword = [\"c\"]\ndomain_regex = [\"^d\"]\ngeosite = [\"cn@ads\"]\n"
		"geoip = [\"!cn\"]\ncidr = [\"10.0.0.0/8\"]\ninbound_tag = [\"tr\"]\n"
		"source_cidr = [\"::1/128\"]\n"
		"[[route.rule]]\noutbound = \"ss\"\nport = 53\nnetwork = [\"tcp\", \"udp\"]\n");
	assert_int_equal(s.log_level, ETM_LOG_DEBUG);
	assert_string_equal(s.log_access, "/var/log/etemenanki/access.log");
	assert_int_equal(s.runtime.workers, 3);
	assert_false(s.runtime.splice);
	assert_int_equal(s.policy.handshake_timeout, 4);
	assert_int_equal(s.policy.idle_timeout, 60);
	assert_int_equal(s.dns.servers.len, 2);
	assert_string_equal(s.dns.servers.items[1], "9.9.9.9:53");
	etm_inbound_spec *in = &s.inbounds[0];
	assert_string_equal(in->listen, "::");
	assert_true(in->sniffing);
	assert_int_equal(in->settings.users_len, 2);
	assert_string_equal(in->settings.users[0].name, "alice");
	assert_string_equal(in->settings.users[1].password, "b");
	assert_string_equal(in->settings.fallback, "127.0.0.1:80");
	assert_int_equal(in->stream.network, ETM_NET_WS);
	assert_int_equal(in->stream.security, ETM_SEC_TLS);
	assert_string_equal(in->stream.tls.alpn.items[0], "h2");
	assert_string_equal(in->stream.ws.path, "/t");
	etm_outbound_spec *vm = &s.outbounds[0];
	assert_int_equal(vm->address_family, ETM_AF_IPV4_ONLY);
	assert_int_equal(vm->settings.security, ETM_VMESS_CHACHA20_POLY1305);
	assert_string_equal(vm->stream.grpc.service_name, "tunnel");
	assert_true(vm->stream.tls.allow_insecure);
	assert_int_equal(s.outbounds[1].settings.method, ETM_SS_2022_BLAKE3_AES_128_GCM);
	assert_string_equal(etm_spec_default_tag(&s), "ss");
	etm_rule_spec *r = &s.route.rules[0];
	assert_int_equal(r->port.len, 2);
	assert_int_equal(r->port.items[0].first, 80);
	assert_int_equal(r->port.items[0].last, 80);
	assert_int_equal(r->port.items[1].first, 1000);
	assert_int_equal(r->port.items[1].last, 2000);
	assert_int_equal(r->networks, ETM_RULE_NET_UDP);
	assert_string_equal(r->geoip.items[0], "!cn");
	assert_int_equal(s.route.rules[1].networks, ETM_RULE_NET_TCP | ETM_RULE_NET_UDP);
	assert_int_equal(s.route.rules[1].port.items[0].first, 53);
	etm_spec_free(&s);
}

/* The whole report for the seed's example, gutter and carets included. */
static void report_shape(void **state)
{
	(void)state;
	expect_message(
		"[[outbound]]\ntag = \"p\"\nprotocol = \"socks\"\nserver = \"h\"\nport = 1080\n"
		"[[balancer]]\ntag = \"b\"\noutbounds = [\"p\"]\nprobe_intervall = 15\n",
		"TOML parse error at line 9, column 1\n"
		"  |\n"
		"9 | probe_intervall = 15\n"
		"  | ^^^^^^^^^^^^^^^\n"
		"unknown field `probe_intervall`, expected one of `tag`, `outbounds`, `strategy`, "
		"`probe_interval`, `probe_timeout`, `rise`, `fall`, `retry`");
	expect_message("[[balancer]]\ntag = \"b\"\noutbounds = [\"p\"]\nprobe_timeout = \"5s\"\n",
	               "TOML parse error at line 4, column 17\n"
	               "  |\n"
	               "4 | probe_timeout = \"5s\"\n"
	               "  |                 ^^^^\n"
	               "invalid type: string \"5s\", expected u64");
}

static void unknown_fields(void **state)
{
	(void)state;
	expect_detail("[dns]\nservers = [\"1.1.1.1\"]\nsrvers = []\n",
	              "unknown field `srvers`, expected one of `servers`, `server`, `rule`, `host`, "
	              "`final`, `cache_size`, `prefetch`, `timeout`");
	/* a single server written as the table array's key */
	expect_detail("[dns]\nserver = [\"1.1.1.1\"]\n",
	              "invalid type: string \"1.1.1.1\", expected a table");
	expect_detail("[[outbound]]\ntag = \"o\"\nprotocol = \"vless\"\n[outbound.stream.ws]\nhost = "
	              "\"h\"\nPath = \"/\"\n",
	              "unknown field `Path`, expected `path` or `host`");
	expect_detail("[lgo]\nlevel = \"info\"\n",
	              "unknown field `lgo`, expected one of `log`, `metrics`, `api`, `runtime`, `policy`, `inbound`, `outbound`, "
	              "`balancer`, `cluster`, `route`, `dns`");
	expect_detail("[[outbound]]\ntag = \"d\"\nprotocol = \"direct\"\nsettings = { a = 1 }\n",
	              "unknown field `a`, there are no fields");
	/* settings are per protocol */
	expect_detail("[[outbound]]\ntag = \"t\"\nprotocol = \"trojan\"\n[outbound.settings]\nid = "
	              "\"x\"\n",
	              "unknown field `id`, expected `password`");
	expect_detail("[[outbound]]\ntag = \"s\"\nprotocol = \"socks\"\n[outbound.stream.tls]\n"
	              "certificate = \"c.pem\"\n",
	              "unknown field `certificate`, expected one of `server_name`, `alpn`, "
	              "`allow_insecure`, `ca`");
	expect_detail("[[route.rule]]\noutbound = \"d\"\ndomains = [\"x\"]\n",
	              "unknown field `domains`, expected one of `outbound`, `domain`, "
	              "`domain_suffix`, `domain_keyword`, `domain_regex`, `geosite`, `cidr`, "
	              "`geoip`, `port`, `network`, `inbound_tag`, `source_cidr`");
}

static void wrong_types(void **state)
{
	(void)state;
	expect_detail("[[balancer]]\ntag = \"b\"\noutbounds = [\"p\"]\nprobe_interval = \"30s\"\n",
	              "invalid type: string \"30s\", expected u64");
	expect_detail("[[balancer]]\ntag = \"b\"\noutbounds = [\"p\"]\nprobe_interval = -1\n",
	              "invalid value: integer `-1`, expected u64");
	expect_detail("[[balancer]]\ntag = \"b\"\noutbounds = [\"p\"]\nprobe_interval = 1.5\n",
	              "invalid type: floating point `1.5`, expected u64");
	expect_detail("[[balancer]]\ntag = 7\noutbounds = [\"p\"]\n",
	              "invalid type: integer `7`, expected a string");
	expect_detail("[[balancer]]\ntag = \"b\"\noutbounds = \"p\"\n",
	              "invalid type: string \"p\", expected a sequence");
	expect_detail("[[balancer]]\ntag = \"b\"\noutbounds = [\"p\", 2]\n",
	              "invalid type: integer `2`, expected a string");
	expect_detail("[balancer]\ntag = \"b\"\n", "invalid type: map, expected a sequence");
	expect_detail("[[inbound]]\ntag = \"i\"\nprotocol = \"socks\"\nport = 1080\nsniffing = "
	              "\"yes\"\n",
	              "invalid type: string \"yes\", expected a boolean");
	expect_detail("[[inbound]]\ntag = \"i\"\nprotocol = \"socks\"\nport = 70000\n",
	              "invalid value: integer `70000`, expected u16");
	expect_detail("[[inbound]]\ntag = \"i\"\nprotocol = \"socks\"\nport = \"1080\"\n",
	              "invalid type: string \"1080\", expected u16");
	expect_detail("log = [1]\n", "invalid type: sequence, expected a table");
	expect_detail("[[outbound]]\ntag = 1979-05-27\n", "invalid type: datetime, expected a string");
	expect_detail("[[outbound]]\ntag = true\n", "invalid type: boolean `true`, expected a string");
	expect_detail("[[outbound]]\ntag = \"a\\u0000b\"\n",
	              "invalid value: string \"a\\u{0}b\", expected a string without NUL characters");
	expect_detail("[[outbound]]\ntag = \"q\\\"\\n\"\nprotocol = 1\n",
	              "invalid type: integer `1`, expected a string");
	expect_detail("[[outbound]]\ntag = [\"q\\\"\\n\"]\n",
	              "invalid type: sequence, expected a string");
}

/* [log] access: "off", "stderr" or a path; what cannot be a file is refused. */
static void access_log_key(void **state)
{
	(void)state;
	const char *ok[] = {"off", "stderr", "access.log", "/tmp/a b/access.log"};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		char toml[256];
		snprintf(toml, sizeof toml, "[log]\naccess = \"%s\"\n[[outbound]]\ntag = \"d\"\n"
		         "protocol = \"direct\"\n", ok[i]);
		etm_spec s = load_ok(toml);
		assert_string_equal(s.log_access, ok[i]);
		etm_spec_free(&s);
	}
	expect_message("[log]\naccess = \"\"\n[[outbound]]\ntag = \"d\"\nprotocol = \"direct\"\n",
	               "[log] access \"\" is not \"off\", \"stderr\" or a file path");
	expect_message("[log]\naccess = \"logs/\"\n[[outbound]]\ntag = \"d\"\nprotocol = \"direct\"\n",
	               "[log] access \"logs/\" is not \"off\", \"stderr\" or a file path");
	expect_detail("[log]\naccess = true\n", "invalid type: boolean `true`, expected a string");
	expect_detail("[log]\naccess = 1\n", "invalid type: integer `1`, expected a string");
}

/* [metrics] listen: absent is off; an IP literal and port, else refused. */
static void metrics_listen_key(void **state)
{
	(void)state;
	etm_spec s = load_ok("[[outbound]]\ntag = \"d\"\nprotocol = \"direct\"\n");
	assert_null(s.metrics_listen);
	etm_spec_free(&s);
	s = load_ok("[metrics]\nlisten = \"[::1]:9100\"\n[[outbound]]\ntag = \"d\"\n"
	            "protocol = \"direct\"\n");
	assert_string_equal(s.metrics_listen, "[::1]:9100");
	etm_spec_free(&s);
	expect_message("[metrics]\nlisten = \"localhost:9100\"\n[[outbound]]\ntag = \"d\"\n"
	               "protocol = \"direct\"\n",
	               "[metrics] listen \"localhost:9100\" is not an IP address and port (like "
	               "\"127.0.0.1:9100\")");
	expect_message("[metrics]\nlisten = \"127.0.0.1\"\n[[outbound]]\ntag = \"d\"\n"
	               "protocol = \"direct\"\n",
	               "[metrics] listen \"127.0.0.1\" is not an IP address and port (like "
	               "\"127.0.0.1:9100\")");
	expect_detail("[metrics]\nlisten = 9100\n", "invalid type: integer `9100`, expected a string");
	expect_detail("[metrics]\nport = 9100\n", "unknown field `port`, expected `listen`");
}

static void api_keys(void **state)
{
	(void)state;
	etm_spec s = load_ok("[[outbound]]\ntag = \"d\"\nprotocol = \"direct\"\n");
	assert_null(s.api_listen);
	assert_null(s.api_secret);
	etm_spec_free(&s);
	s = load_ok("[api]\nlisten = \"[::1]:9090\"\n[[outbound]]\ntag = \"d\"\n"
	            "protocol = \"direct\"\n");
	assert_string_equal(s.api_listen, "[::1]:9090");
	assert_null(s.api_secret);
	etm_spec_free(&s);
	s = load_ok("[api]\nlisten = \"0.0.0.0:9090\"\nsecret = \"k\"\n[[outbound]]\ntag = "
	            "\"d\"\nprotocol = \"direct\"\n");
	assert_string_equal(s.api_listen, "0.0.0.0:9090");
	assert_string_equal(s.api_secret, "k");
	etm_spec_free(&s);
	/* without a secret, only loopback */
	expect_message("[api]\nlisten = \"0.0.0.0:9090\"\n[[outbound]]\ntag = \"d\"\n"
	               "protocol = \"direct\"\n",
	               "api: listen address 0.0.0.0:9090 is not loopback: set [api] secret");
	expect_message("[api]\nlisten = \"[::]:9090\"\nsecret = \"\"\n[[outbound]]\ntag = "
	               "\"d\"\nprotocol = \"direct\"\n",
	               "api: listen address [::]:9090 is not loopback: set [api] secret");
	expect_message("[api]\nlisten = \"localhost:9090\"\n[[outbound]]\ntag = \"d\"\n"
	               "protocol = \"direct\"\n",
	               "[api] listen \"localhost:9090\" is not an IP address and port (like "
	               "\"127.0.0.1:9090\")");
	expect_detail("[api]\nport = 9090\n", "unknown field `port`, expected `listen` or `secret`");
	expect_detail("[api]\nsecret = 1\n", "invalid type: integer `1`, expected a string");
}

static void variants(void **state)
{
	(void)state;
	expect_detail("[log]\nlevel = \"verbose\"\n",
	              "unknown variant `verbose`, expected one of `error`, `warn`, `warning`, `info`, `debug`, "
	              "`trace`");
	expect_detail("[[inbound]]\ntag = \"i\"\nprotocol = \"freedom\"\nport = 1\n",
	              "unknown variant `freedom`, expected one of `socks`, `http`, `mixed`, `trojan`, "
	              "`vless`, `vmess`, `shadowsocks`, `hysteria2`, `hysteria`, `hy2`, `udp_lb`");
	expect_detail("[[outbound]]\ntag = \"o\"\nprotocol = \"Trojan\"\n",
	              "unknown variant `Trojan`, expected one of `freedom`, `direct`, `blackhole`, "
	              "`block`, `socks`, `http`, `trojan`, `vless`, `vmess`, `shadowsocks`, "
	              "`hysteria2`, `hysteria`, `hy2`, `wireguard`");
	expect_detail("[[outbound]]\ntag = \"o\"\nprotocol = \"socks\"\n[outbound.stream]\nsecurity = "
	              "\"reality\"\n",
	              "unknown variant `reality`, expected `none` or `tls`");
	expect_detail("[[outbound]]\ntag = \"o\"\nprotocol = \"vmess\"\nserver = \"h\"\nport = 1\n"
	              "[outbound.settings]\nid = \"5783a3e7-e373-51cd-8642-c83782b807c5\"\n"
	              "security = \"aes-256-gcm\"\n",
	              "unknown variant `aes-256-gcm`, expected one of `auto`, `aes-128-gcm`, "
	              "`chacha20-poly1305`, `none`, `zero`");
	expect_detail("[[route.rule]]\noutbound = \"d\"\nnetwork = \"icmp\"\n",
	              "unknown variant `icmp`, expected `tcp` or `udp`");
}

static void missing_fields(void **state)
{
	(void)state;
	expect_message("[[outbound]]\nprotocol = \"freedom\"\n",
	               "TOML parse error at line 1, column 1\n"
	               "  |\n"
	               "1 | [[outbound]]\n"
	               "  | ^^^^^^^^^^^^\n"
	               "missing field `tag`");
	expect_detail("[[balancer]]\ntag = \"b\"\n", "missing field `outbounds`");
	expect_detail("[[inbound]]\ntag = \"i\"\nprotocol = \"http\"\n", "missing field `port`");
	expect_detail("[[route.rule]]\ncidr = [\"10.0.0.0/8\"]\n", "missing field `outbound`");
	expect_detail("[[inbound]]\ntag = \"i\"\nprotocol = \"http\"\nport = 1\n"
	              "[[inbound.settings.users]]\nusername = \"u\"\n",
	              "missing field `password`");
}

static void ports(void **state)
{
	(void)state;
	const char *bad[] = {"\"80-\"", "\"-80\"", "\"2000-1000\"", "\"65536\"", "\"1-2-3\"",
	                     "\"http\"", "-1", "70000", "true"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char toml[128];
		snprintf(toml, sizeof toml, "[[route.rule]]\noutbound = \"d\"\nport = %s\n", bad[i]);
		etm_spec s;
		char msg[CONFIG_MSG_MAX];
		assert_int_equal(config_load(toml, strlen(toml), &s, msg, sizeof msg), -1);
		const char *d = detail(msg);
		const char *tail = ", expected a port like 443 or a range like \"1000-2000\"";
		size_t dl = strlen(d), tl = strlen(tail);
		assert_true(dl > tl);
		assert_string_equal(d + dl - tl, tail);
	}
	expect_detail("[[route.rule]]\noutbound = \"d\"\nport = \"2000-1000\"\n",
	              "invalid value: string \"2000-1000\", expected a port like 443 or a range "
	              "like \"1000-2000\"");
	expect_detail("[[route.rule]]\noutbound = \"d\"\nport = true\n",
	              "invalid type: boolean `true`, expected a port like 443 or a range like "
	              "\"1000-2000\"");
}

/* Semantic errors come through unchanged, without the TOML report. */
static void semantic_errors_pass_through(void **state)
{
	(void)state;
	expect_message("[[outbound]]\ntag = \"d\"\nprotocol = \"direct\"\n"
	               "[[balancer]]\ntag = \"b\"\noutbounds = [\"d\"]\n",
	               "balancer b: outbound d has no upstream a TCP health probe can reach, so it "
	               "cannot be balanced");
	expect_message("", "no outbound is configured: add at least one [[outbound]]");
}

#define LB_IN "[[inbound]]\ntag = \"lb\"\nprotocol = \"udp_lb\"\nport = 5353\n"
#define LB_IN_C LB_IN "[inbound.settings]\ncluster = \"c\"\n"
#define LB_CL "[[cluster]]\ntag = \"c\"\n"

/* Every refusal of a udp_lb inbound or a [[cluster]], word for word. */
static void udp_lb_errors(void **state)
{
	(void)state;
	expect_message(LB_IN, "inbound lb: protocol udp_lb needs settings.cluster");
	expect_message(LB_IN_C, "inbound lb references unknown cluster tag: c");
	expect_message(LB_IN_C LB_CL "backends = []\n", "cluster c needs at least one backend");
	expect_message(LB_IN_C LB_CL "backends = [\"1.2.3.4\"]\n",
	               "cluster c: backend \"1.2.3.4\": backend address must be an IPv4 or IPv6 "
	               "address with a non-zero port");
	expect_message(LB_IN_C LB_CL "backends = [\"db.example:53\"]\n",
	               "cluster c: backend \"db.example:53\": backend address must be an IPv4 or "
	               "IPv6 address with a non-zero port");
	expect_message(LB_IN_C LB_CL "backends = [\"[fe80::1]:53\"]\n",
	               "cluster c: backend \"[fe80::1]:53\": a link-local backend address would "
	               "need a zone, which backend addresses do not take: give a routable address");
	expect_message(LB_IN_C LB_CL "backends = [\"1.2.3.4:53 weight=0\"]\n",
	               "cluster c: backend \"1.2.3.4:53 weight=0\": backend weight must be between 1 "
	               "and 65535");
	expect_message(LB_IN_C LB_CL "backends = [\"1.2.3.4:53\", \"1.2.3.4:53 weight=2\"]\n",
	               "cluster c: backend address listed twice");
	expect_message(LB_IN_C LB_CL "backends = [\"1.2.3.4:53\"]\nmaglev_size = 65536\n",
	               "cluster c: maglev table size must be a prime, at least the backend count, "
	               "at most 655373");
	expect_message(LB_IN_C LB_CL "backends = [\"1.2.3.4:53\"]\nidle_timeout = 0\n",
	               "cluster c: idle_timeout must be 1 to 86400");
	expect_message(LB_IN_C LB_CL "backends = [\"1.2.3.4:53\"]\nfront_timeout = 0\n",
	               "cluster c: front_timeout must be 1 to 86400");
	expect_message(LB_IN_C LB_CL "backends = [\"1.2.3.4:53\"]\nback_timeout = 86401\n",
	               "cluster c: back_timeout must be 1 to 86400");
	/* The shorthand is checked even when both specific keys override it:
	 * a value out of range is a mistake wherever it is written. */
	expect_message(LB_IN_C LB_CL "backends = [\"1.2.3.4:53\"]\nidle_timeout = 0\n"
	               "front_timeout = 5\nback_timeout = 5\n",
	               "cluster c: idle_timeout must be 1 to 86400");
	expect_detail(LB_IN_C LB_CL "backends = [\"1.2.3.4:53\"]\nback_timeout = -1\n",
	              "invalid value: integer `-1`, expected u64");
	expect_message(LB_IN_C LB_CL "backends = [\"1.2.3.4:53\"]\nsubnet_prefix_v4 = 33\n",
	               "cluster c: subnet_prefix_v4 must be 0 to 32");
	expect_message(LB_IN_C LB_CL "backends = [\"1.2.3.4:53\"]\n[cluster.health]\nrise = 0\n",
	               "cluster c: health.rise must be 1 to 100");
	expect_message(LB_IN_C LB_CL "backends = [\"1.2.3.4:53\"]\n[cluster.health]\ntcp_port = 0\n",
	               "cluster c: health.tcp_port = 0 turns the TCP check off, so "
	               "health.udp_payload or health.udp_payload_hex is needed");
	expect_message(LB_IN_C LB_CL "backends = [\"1.2.3.4:53\"]\n[cluster.health]\n"
	               "udp_payload = \"x\"\nudp_payload_hex = \"78\"\n",
	               "cluster c: health.udp_payload and health.udp_payload_hex exclude each other");
	expect_message(LB_IN_C LB_CL "backends = [\"1.2.3.4:53\"]\nreuse_upstream_sockets = true\n",
	               "cluster c: reuse_upstream_sockets needs a responses cap: only a flow that "
	               "got all its answers hands its socket on");
	expect_message(LB_IN_C LB_CL "backends = [\"1.2.3.4:53\"]\nreuse_upstream_sockets = true\n"
	               "responses = 1\nproxy_protocol = \"first\"\n",
	               "cluster c: reuse_upstream_sockets cannot go with proxy_protocol = \"first\": "
	               "a backend would take the next client for the one the header named");
	static const char *const bad_hex[] = {"7", "7g", " 78", "78 ", "78  79", "0x78"};
	for (size_t i = 0; i < sizeof bad_hex / sizeof bad_hex[0]; i++) {
		char toml[512];
		snprintf(toml, sizeof toml,
		         LB_IN_C LB_CL "backends = [\"1.2.3.4:53\"]\n[cluster.health]\n"
		                       "udp_payload_hex = \"%s\"\n",
		         bad_hex[i]);
		expect_message(toml, "cluster c: health.udp_payload_hex is not pairs of hexadecimal "
		                     "digits (spaces between bytes are allowed)");
	}
	expect_message(LB_IN_C LB_CL "backends = [\"1.2.3.4:53\"]\n" LB_CL
	               "backends = [\"1.2.3.4:54\"]\n",
	               "duplicate cluster tag: c");
	expect_message(LB_IN "[inbound.settings]\ncluster = \"c\"\nmax_flows = 16777217\n" LB_CL
	               "backends = [\"1.2.3.4:53\"]\n",
	               "inbound lb: settings.max_flows must be 0 (automatic) to 16777216");
	expect_message(LB_IN "sniffing = true\n[inbound.settings]\ncluster = \"c\"\n" LB_CL
	               "backends = [\"1.2.3.4:53\"]\n",
	               "inbound lb: protocol udp_lb takes no sniffing");
	expect_message(LB_IN "[inbound.stream]\nnetwork = \"tls\"\n[inbound.settings]\ncluster = "
	               "\"c\"\n" LB_CL "backends = [\"1.2.3.4:53\"]\n",
	               "inbound lb: protocol udp_lb takes no stream settings");
	expect_detail(LB_IN_C LB_CL "backends = [\"1.2.3.4:53\"]\nselection = \"random\"\n",
	              "unknown variant `random`, expected one of `round_robin`, `hrw`, `maglev`");
}

/* idle_timeout is the shorthand for front_timeout and back_timeout; a
 * specific key beside it wins, whichever comes first in the file. */
static void udp_lb_timeouts(void **state)
{
	(void)state;
	static const struct {
		const char *keys;
		uint64_t front, back;
	} cases[] = {
		{"", 30, 30},
		{"idle_timeout = 7\n", 7, 7},
		{"front_timeout = 4\n", 4, 30},
		{"back_timeout = 9\n", 30, 9},
		{"front_timeout = 4\nback_timeout = 9\n", 4, 9},
		{"idle_timeout = 7\nback_timeout = 2\n", 7, 2},
		{"back_timeout = 2\nidle_timeout = 7\n", 7, 2},
		{"front_timeout = 3\nidle_timeout = 7\n", 3, 7},
		{"idle_timeout = 7\nfront_timeout = 3\nback_timeout = 86400\n", 3, 86400},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char toml[512], msg[CONFIG_MSG_MAX];
		etm_spec s;
		snprintf(toml, sizeof toml, LB_IN_C LB_CL "backends = [\"1.2.3.4:53\"]\n%s",
		         cases[i].keys);
		assert_int_equal(config_load(toml, strlen(toml), &s, msg, sizeof msg), 0);
		assert_int_equal(etm_cluster_front_timeout(&s.clusters[0]), cases[i].front);
		assert_int_equal(etm_cluster_back_timeout(&s.clusters[0]), cases[i].back);
		etm_spec_free(&s);
	}
}

/* A file of udp_lb listeners only needs no [[outbound]]; the defaults are
 * the documented ones; weights and IPv6 backends parse. */
static void udp_lb_lowers(void **state)
{
	(void)state;
	etm_spec s;
	char msg[CONFIG_MSG_MAX];
	const char *toml = LB_IN_C LB_CL "backends = [\"127.0.0.1:5301\", \"[::1]:53  weight=7\"]\n"
	                   "[cluster.health]\ninterval = 1\n";
	assert_int_equal(config_load(toml, strlen(toml), &s, msg, sizeof msg), 0);
	assert_int_equal(s.outbounds_len, 1);
	assert_string_equal(s.outbounds[0].tag, "direct");
	assert_int_equal(s.inbounds[0].settings.max_rx_datagram_size, 8192);
	assert_int_equal(s.inbounds[0].settings.max_flows, 0);
	const etm_cluster_spec *c = &s.clusters[0];
	assert_int_equal(c->selection, ETM_LB_HRW);
	assert_int_equal(c->affinity, ETM_LB_SOURCE_IP);
	assert_int_equal(c->idle_timeout, 30);
	assert_false(c->has_front_timeout);
	assert_false(c->has_back_timeout);
	assert_int_equal(etm_cluster_front_timeout(c), 30);
	assert_int_equal(etm_cluster_back_timeout(c), 30);
	assert_int_equal(c->subnet_prefix_v4, 24);
	assert_int_equal(c->subnet_prefix_v6, 64);
	assert_int_equal(c->maglev_size, 65537);
	assert_false(c->reuse_upstream_sockets);
	assert_true(c->has_health);
	assert_false(c->health.has_tcp_port);
	assert_int_equal(c->health.interval, 1);
	assert_int_equal(c->health.timeout, 2);
	assert_int_equal(c->health.rise, 2);
	assert_int_equal(c->health.fall, 3);
	etm_spec_free(&s);

	toml = LB_IN_C LB_CL "backends = [\"127.0.0.1:5301\"]\n[cluster.health]\ntcp_port = 0\n"
	                     "udp_payload_hex = \"12 34 0100 0001\"\n";
	assert_int_equal(config_load(toml, strlen(toml), &s, msg, sizeof msg), 0);
	uint8_t bytes[8];
	assert_int_equal(udplb_hex_decode(s.clusters[0].health.udp_payload_hex, bytes, sizeof bytes),
	                 6);
	assert_memory_equal(bytes, "\x12\x34\x01\x00\x00\x01", 6);
	etm_spec_free(&s);

	toml = LB_IN_C LB_CL "backends = [\"127.0.0.1:5301\"]\n";
	assert_int_equal(config_load(toml, strlen(toml), &s, msg, sizeof msg), 0);
	assert_false(s.clusters[0].has_health);
	etm_spec_free(&s);

	/* reuse_upstream_sockets with a responses cap and "every" headers */
	toml = LB_IN_C LB_CL "backends = [\"127.0.0.1:5301\"]\nresponses = 2\n"
	                     "proxy_protocol = \"every\"\nreuse_upstream_sockets = true\n";
	assert_int_equal(config_load(toml, strlen(toml), &s, msg, sizeof msg), 0);
	assert_true(s.clusters[0].reuse_upstream_sockets);
	udplb_conf conf;
	size_t bad;
	assert_int_equal(build_udplb_conf(&s.clusters[0], &conf, &bad), 0);
	assert_true(conf.reuse_sockets);
	udplb_conf_free(&conf);
	etm_spec_free(&s);
}

static void syntax_errors_are_reported_with_a_line(void **state)
{
	(void)state;
	etm_spec s;
	char msg[CONFIG_MSG_MAX];
	const char *toml = "[[outbound]]\ntag = \"d\"\ntag = \"e\"\n";
	assert_int_equal(config_load(toml, strlen(toml), &s, msg, sizeof msg), -1);
	assert_true(strncmp(msg, "TOML parse error at line 3, column ", 35) == 0);
	assert_non_null(strstr(msg, "\n3 | tag = \"e\"\n"));
}

static void a_long_line_is_cut_in_the_excerpt(void **state)
{
	(void)state;
	char toml[600];
	int n = snprintf(toml, sizeof toml, "[dns]\nservers = [\"");
	memset(toml + n, 'x', 400);
	snprintf(toml + n + 400, sizeof toml - (size_t)n - 400, "\"]\nbogus = 1\n");
	etm_spec s;
	char msg[CONFIG_MSG_MAX];
	assert_int_equal(config_load(toml, strlen(toml), &s, msg, sizeof msg), -1);
	assert_string_equal(detail(msg), "unknown field `bogus`, expected one of `servers`, `server`, "
	                                 "`rule`, `host`, `final`, `cache_size`, `prefetch`, "
	                                 "`timeout`");

	/* a bad value on a very long line: the excerpt stays bounded */
	n = snprintf(toml, sizeof toml, "[dns]\nservers = [");
	for (int i = 0; i < 100; i++)
		n += snprintf(toml + n, sizeof toml - (size_t)n, "\"a\",");
	snprintf(toml + n, sizeof toml - (size_t)n, "1]\n");
	assert_int_equal(config_load(toml, strlen(toml), &s, msg, sizeof msg), -1);
	assert_string_equal(detail(msg), "invalid type: integer `1`, expected a string");
	assert_true(strlen(msg) < 2 * CONFIG_EXCERPT_MAX + 200);
}

static void file_errors(void **state)
{
	(void)state;
	etm_spec s;
	char msg[CONFIG_MSG_MAX];
	assert_int_equal(config_load_file("/nonexistent/etm.toml", &s, msg, sizeof msg), -1);
	assert_string_equal(msg, "failed to read /nonexistent/etm.toml: No such file or directory");

	char path[] = "/tmp/etm-test-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	FILE *f = fdopen(fd, "wb");
	fputs(MINIMAL, f);
	fclose(f);
	assert_int_equal(config_load_file(path, &s, msg, sizeof msg), 0);
	assert_string_equal(s.outbounds[0].tag, "direct");
	etm_spec_free(&s);

	/* one byte over the parser's limit is refused before parsing */
	f = fopen(path, "wb");
	for (size_t i = 0; i <= TOML_MAX_INPUT; i++)
		fputc('#', f);
	fclose(f);
	assert_int_equal(config_load_file(path, &s, msg, sizeof msg), -1);
	char want[128];
	snprintf(want, sizeof want, "failed to read %s: larger than 4194304 bytes", path);
	assert_string_equal(msg, want);
	remove(path);
}

static void the_reference_covers_every_section(void **state)
{
	(void)state;
	char *text = NULL;
	size_t len = 0;
	FILE *mem = open_memstream(&text, &len);
	assert_int_equal(schema_write_reference(mem), 0);
	fclose(mem);
	const char *titles[] = {"### `[log]`", "### `[[inbound]]`", "### `[[outbound]]`",
	                        "### `[[balancer]]`", "### `[route]`", "### `[[route.rule]]`",
	                        "### `[dns]`", "### `[outbound.settings] for wireguard`",
	                        "### `[inbound.stream.tls]`",
	                        "| `probe_interval` | integer (u64) | 30 |"};
	for (size_t i = 0; i < sizeof titles / sizeof titles[0]; i++)
		if (!strstr(text, titles[i]))
			fail_msg("reference lacks %s", titles[i]);
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(defaults),
		cmocka_unit_test(aliases_fold),
		cmocka_unit_test(everything_lowers),
		cmocka_unit_test(report_shape),
		cmocka_unit_test(unknown_fields),
		cmocka_unit_test(wrong_types),
		cmocka_unit_test(variants),
		cmocka_unit_test(access_log_key),
		cmocka_unit_test(metrics_listen_key),
		cmocka_unit_test(api_keys),
		cmocka_unit_test(missing_fields),
		cmocka_unit_test(ports),
		cmocka_unit_test(semantic_errors_pass_through),
		cmocka_unit_test(udp_lb_errors),
		cmocka_unit_test(udp_lb_timeouts),
		cmocka_unit_test(udp_lb_lowers),
		cmocka_unit_test(syntax_errors_are_reported_with_a_line),
		cmocka_unit_test(a_long_line_is_cut_in_the_excerpt),
		cmocka_unit_test(file_errors),
		cmocka_unit_test(the_reference_covers_every_section),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
