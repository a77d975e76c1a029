/* test_link.c - share links: every scheme imported and printed word for word, the TOML loaded back by the config loader, bad links' exact lines, export round trips, base64 and percent-decoding. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "app/config.h"
#include "app/link.h"

#define UUID "b831381d-6324-4d53-ad4f-8cda48b30811"

/* 300 bytes: longer than a host name or an ALPN protocol may be */
#define A10 "aaaaaaaaaa"
#define A50 A10 A10 A10 A10 A10
#define A300 A50 A50 A50 A50 A50 A50
/* what of "vless-" A300 a message quotes: 63 bytes */
#define A57 A50 "aaaaaaa"

/* The block must load as the config file it is meant to be pasted into. */
static void loads(const char *toml)
{
	static const char head[] = "[[inbound]]\ntag = \"in\"\nprotocol = \"socks\"\nport = 1080\n\n";
	char text[LINK_TOML_MAX + sizeof head];
	(void)snprintf(text, sizeof text, "%s%s", head, toml);
	etm_spec s = {0};
	char msg[CONFIG_MSG_MAX];
	if (config_load(text, strlen(text), &s, msg, sizeof msg))
		fail_msg("the printed block does not load:\n%s\n%s", msg, toml);
	assert_int_equal(s.outbounds_len, 1);
	etm_spec_free(&s);
}

static void import_ok(const char *link, const char *want)
{
	etm_outbound_spec o = {0};
	link_error e;
	char line[LINK_LINE_MAX];
	int rc = link_import(link, strlen(link), &o, &e);
	if (rc)
		fail_msg("%s: %s", link, link_error_format(&e, line, sizeof line));
	char *toml = malloc(LINK_TOML_MAX);
	assert_non_null(toml);
	int n = link_toml_write(&o, toml, LINK_TOML_MAX);
	assert_true(n > 0);
	assert_int_equal((size_t)n, strlen(toml));
	if (strcmp(toml, want) != 0)
		fail_msg("%s printed\n%s\nwanted\n%s", link, toml, want);
	loads(toml);
	free(toml);
	link_outbound_free(&o);
}

/* Examples written from each format's description (docs/links.md cites
 * them), one or more per scheme. */
static void imports(void **state)
{
	(void)state;
	static const struct {
		const char *link, *toml;
	} cases[] = {
		/* VLESS share link proposal: ws inside TLS, alpn a comma list */
		{"vless://" UUID "@example.com:443?encryption=none&security=tls&sni=sni.example.com"
		 "&alpn=h2%2Chttp%2F1.1&type=ws&host=cdn.example.com&path=%2Fws%3Fed%3D2048#HK%201",
		 "[[outbound]]\ntag = \"HK 1\"\nprotocol = \"vless\"\nserver = \"example.com\"\n"
		 "port = 443\n\n[outbound.settings]\nid = \"" UUID "\"\n\n[outbound.stream]\n"
		 "network = \"ws\"\nsecurity = \"tls\"\n\n[outbound.stream.tls]\n"
		 "server_name = \"sni.example.com\"\nalpn = [\"h2\", \"http/1.1\"]\n\n"
		 "[outbound.stream.ws]\npath = \"/ws?ed=2048\"\nhost = \"cdn.example.com\"\n"},
		/* gRPC to an IPv6 address in brackets, no name: the tag is made */
		{"vless://" UUID "@[2001:db8::1]:8443?type=grpc&serviceName=svc&security=tls"
		 "&allowInsecure=1&fp=chrome",
		 "[[outbound]]\ntag = \"vless-2001:db8::1\"\nprotocol = \"vless\"\n"
		 "server = \"2001:db8::1\"\nport = 8443\n\n[outbound.settings]\nid = \"" UUID "\"\n\n"
		 "[outbound.stream]\nnetwork = \"grpc\"\nsecurity = \"tls\"\n\n"
		 "[outbound.stream.tls]\nallow_insecure = true\n\n"
		 "[outbound.stream.grpc]\nservice_name = \"svc\"\n"},
		/* plain tcp: no stream table at all; sni without tls is dropped */
		{"VLESS://" UUID "@10.0.0.1:80?type=tcp&headerType=none&sni=x#plain",
		 "[[outbound]]\ntag = \"plain\"\nprotocol = \"vless\"\nserver = \"10.0.0.1\"\n"
		 "port = 80\n\n[outbound.settings]\nid = \"" UUID "\"\n"},
		/* v2rayN's vmess: standard base64 with padding, a \u escape in ps */
		{"vmess://eyJ2IjoiMiIsInBzIjoiSlAgXHUwMGU5IDEiLCJhZGQiOiJ2bS5leGFtcGxlLmNvbSIsInBvcnQi"
		 "OiI0NDMiLCJpZCI6ImI4MzEzODFkLTYzMjQtNGQ1My1hZDRmLThjZGE0OGIzMDgxMSIsImFpZCI6IjAiLCJz"
		 "Y3kiOiJjaGFjaGEyMC1wb2x5MTMwNSIsIm5ldCI6ImdycGMiLCJ0eXBlIjoibm9uZSIsImhvc3QiOiIiLCJw"
		 "YXRoIjoiZ3VuIiwidGxzIjoidGxzIiwic25pIjoidm0uZXhhbXBsZS5jb20iLCJhbHBuIjoiaDIifQ==",
		 "[[outbound]]\ntag = \"JP \xc3\xa9 1\"\nprotocol = \"vmess\"\n"
		 "server = \"vm.example.com\"\nport = 443\n\n[outbound.settings]\nid = \"" UUID "\"\n"
		 "security = \"chacha20-poly1305\"\n\n[outbound.stream]\nnetwork = \"grpc\"\n"
		 "security = \"tls\"\n\n[outbound.stream.tls]\nserver_name = \"vm.example.com\"\n"
		 "alpn = [\"h2\"]\n\n[outbound.stream.grpc]\nservice_name = \"gun\"\n"},
		/* numbers where strings are usual, spaces, an upper-case id */
		{"vmess://eyJ2IjogMiwgInBzIjogIiIsICJhZGQiOiAiMTAuMC4wLjIiLCAicG9ydCI6IDEwMDg2LCAiaWQi"
		 "OiAiQjgzMTM4MUQtNjMyNC00RDUzLUFENEYtOENEQTQ4QjMwODExIiwgImFpZCI6IDAsICJuZXQiOiAid3Mi"
		 "LCAidHlwZSI6ICJub25lIiwgImhvc3QiOiAiaC5leGFtcGxlIiwgInBhdGgiOiAiL3YiLCAidGxzIjogIiJ9",
		 "[[outbound]]\ntag = \"vmess-10.0.0.2\"\nprotocol = \"vmess\"\nserver = \"10.0.0.2\"\n"
		 "port = 10086\n\n[outbound.settings]\nid = \"B831381D-6324-4D53-AD4F-8CDA48B30811\"\n"
		 "security = \"auto\"\n\n[outbound.stream]\nnetwork = \"ws\"\n\n"
		 "[outbound.stream.ws]\npath = \"/v\"\nhost = \"h.example\"\n"},
		/* trojan: 443 and TLS by default, a percent-encoded '@' and '"' */
		{"trojan://p%40ss%22w@t.example.com?sni=s.example.com&allowInsecure=1#my%20trojan",
		 "[[outbound]]\ntag = \"my trojan\"\nprotocol = \"trojan\"\nserver = \"t.example.com\"\n"
		 "port = 443\n\n[outbound.settings]\npassword = \"p@ss\\\"w\"\n\n[outbound.stream]\n"
		 "security = \"tls\"\n\n[outbound.stream.tls]\nserver_name = \"s.example.com\"\n"
		 "allow_insecure = true\n"},
		{"trojan://pw@1.2.3.4:8080?security=none&type=ws&path=%2Ft#t",
		 "[[outbound]]\ntag = \"t\"\nprotocol = \"trojan\"\nserver = \"1.2.3.4\"\nport = 8080\n\n"
		 "[outbound.settings]\npassword = \"pw\"\n\n[outbound.stream]\nnetwork = \"ws\"\n\n"
		 "[outbound.stream.ws]\npath = \"/t\"\n"},
		/* SIP002, base64url userinfo without padding */
		{"ss://YWVzLTEyOC1nY206dGVzdA@192.168.100.1:8888#Example1",
		 "[[outbound]]\ntag = \"Example1\"\nprotocol = \"shadowsocks\"\n"
		 "server = \"192.168.100.1\"\nport = 8888\n\n[outbound.settings]\n"
		 "method = \"aes-128-gcm\"\npassword = \"test\"\n"},
		/* padded, with the trailing '/', a password holding ':' */
		{"ss://Y2hhY2hhMjAtaWV0Zi1wb2x5MTMwNTpwYTpzcw==@ss.example:443/#a",
		 "[[outbound]]\ntag = \"a\"\nprotocol = \"shadowsocks\"\nserver = \"ss.example\"\n"
		 "port = 443\n\n[outbound.settings]\nmethod = \"chacha20-ietf-poly1305\"\n"
		 "password = \"pa:ss\"\n"},
		/* SIP002's plain userinfo, as 2022 methods need */
		{"ss://2022-blake3-aes-256-gcm:YctPZ6U7xPPcU%2Bgp3u%2B0tx%2FtRizJN9K8y%2BuKlW2qjlI%3D"
		 "@192.168.100.1:8888#Example3",
		 "[[outbound]]\ntag = \"Example3\"\nprotocol = \"shadowsocks\"\n"
		 "server = \"192.168.100.1\"\nport = 8888\n\n[outbound.settings]\n"
		 "method = \"2022-blake3-aes-256-gcm\"\n"
		 "password = \"YctPZ6U7xPPcU+gp3u+0tx/tRizJN9K8y+uKlW2qjlI=\"\n"},
		/* issue 32: v2rayN writes gRPC's mode in "type": "gun" is ours */
		{"vmess://eyJ2IjoiMiIsInBzIjoiZyIsImFkZCI6ImcuZXhhbXBsZS5jb20iLCJwb3J0IjoiNDQzIiwiaWQi"
		 "OiJiODMxMzgxZC02MzI0LTRkNTMtYWQ0Zi04Y2RhNDhiMzA4MTEiLCJhaWQiOiIwIiwibmV0IjoiZ3JwYyIs"
		 "InR5cGUiOiJndW4iLCJwYXRoIjoic3ZjIiwidGxzIjoidGxzIn0=",
		 "[[outbound]]\ntag = \"g\"\nprotocol = \"vmess\"\nserver = \"g.example.com\"\n"
		 "port = 443\n\n[outbound.settings]\nid = \"" UUID "\"\nsecurity = \"auto\"\n\n"
		 "[outbound.stream]\nnetwork = \"grpc\"\nsecurity = \"tls\"\n\n"
		 "[outbound.stream.grpc]\nservice_name = \"svc\"\n"},
		/* issue 32: a 2022 user behind an identity key, method:iPSK:uPSK
		 * (SIP022-2's client form), gives the outbound's "iPSK:uPSK" */
		{"ss://2022-blake3-aes-128-gcm:AAECAwQFBgcICQoLDA0ODw%3D%3D:EBESExQVFhcYGRobHB0eHw%3D%3D"
		 "@192.168.100.1:8389#multi",
		 "[[outbound]]\ntag = \"multi\"\nprotocol = \"shadowsocks\"\n"
		 "server = \"192.168.100.1\"\nport = 8389\n\n[outbound.settings]\n"
		 "method = \"2022-blake3-aes-128-gcm\"\n"
		 "password = \"AAECAwQFBgcICQoLDA0ODw==:EBESExQVFhcYGRobHB0eHw==\"\n"},
		/* the same with the keys' ':' percent-encoded, as our export writes */
		{"ss://2022-blake3-aes-128-gcm:AAECAwQFBgcICQoLDA0ODw%3D%3D%3AEBESExQVFhcYGRobHB0eHw%3D%3D"
		 "@192.168.100.1:8389#multi",
		 "[[outbound]]\ntag = \"multi\"\nprotocol = \"shadowsocks\"\n"
		 "server = \"192.168.100.1\"\nport = 8389\n\n[outbound.settings]\n"
		 "method = \"2022-blake3-aes-128-gcm\"\n"
		 "password = \"AAECAwQFBgcICQoLDA0ODw==:EBESExQVFhcYGRobHB0eHw==\"\n"},
		/* the legacy form: all of method:password@host:port in base64 */
		{"ss://YWVzLTI1Ni1nY206c2VjcmV0QFs6OjFdOjgzODg=#old",
		 "[[outbound]]\ntag = \"old\"\nprotocol = \"shadowsocks\"\nserver = \"::1\"\n"
		 "port = 8388\n\n[outbound.settings]\nmethod = \"aes-256-gcm\"\n"
		 "password = \"secret\"\n"},
		/* Hysteria 2's URI scheme: 443 by default, sni and insecure */
		{"hysteria2://letmein@h.example.com/?insecure=1&sni=real.example.com&pinSHA256=deadbeef",
		 "# hysteria2 is parsed and checked by the config, but this build cannot run it:\n"
		 "# a start refuses this outbound (docs/links.md).\n"
		 "[[outbound]]\ntag = \"hysteria2-h.example.com\"\nprotocol = \"hysteria2\"\n"
		 "server = \"h.example.com\"\nport = 443\n\n[outbound.settings]\n"
		 "password = \"letmein\"\n\n[outbound.stream.tls]\nserver_name = \"real.example.com\"\n"
		 "allow_insecure = true\n"},
		{"  hy2://user:pass@h.example.com:4443#h  \n",
		 "# hysteria2 is parsed and checked by the config, but this build cannot run it:\n"
		 "# a start refuses this outbound (docs/links.md).\n"
		 "[[outbound]]\ntag = \"h\"\nprotocol = \"hysteria2\"\nserver = \"h.example.com\"\n"
		 "port = 4443\n\n[outbound.settings]\npassword = \"user:pass\"\n"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		import_ok(cases[i].link, cases[i].toml);
}

/* Every bad link gives one exact line. */
typedef struct bad_link {
	const char *link, *line;
	link_err code;
} bad_link;

/* Each link refused with its code and its exact line, nothing left behind. */
static void expect_errors(const bad_link *cases, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		etm_outbound_spec o = {0};
		link_error e;
		char line[LINK_LINE_MAX];
		int rc = link_import(cases[i].link, strlen(cases[i].link), &o, &e);
		if (rc != (int)cases[i].code)
			fail_msg("%s: got %d, wanted %d (%s)", cases[i].link, rc, cases[i].code,
			         rc ? link_error_format(&e, line, sizeof line) : "ok");
		assert_string_equal(link_error_format(&e, line, sizeof line), cases[i].line);
		/* nothing is left behind on an error */
		assert_null(o.tag);
		assert_null(o.server);
		assert_null(o.settings.id);
		assert_null(o.settings.password);
	}
}


static void errors(void **state)
{
	(void)state;
	static const bad_link cases[] = {
		{"http://example.com", "unknown scheme `http` (expected vless, vmess, trojan, ss, "
		                       "hysteria2 or hy2)", LINK_E_SCHEME},
		{"just text", "unknown scheme `just text` (expected vless, vmess, trojan, ss, hysteria2 "
		              "or hy2)", LINK_E_SCHEME},
		{"vless://" UUID "@:443", "the link has no host", LINK_E_NO_HOST},
		{"vless://" UUID "@[::1:443", "the link has no host", LINK_E_NO_HOST},
		{"vless://" UUID "@example.com", "the link has no port", LINK_E_NO_PORT},
		{"vless://" UUID "@example.com:", "the link has no port", LINK_E_NO_PORT},
		{"vless://" UUID "@example.com:65536", "bad port `65536` (expected a number in 1-65535)",
		 LINK_E_BAD_PORT},
		{"vless://" UUID "@example.com:0", "bad port `0` (expected a number in 1-65535)",
		 LINK_E_BAD_PORT},
		{"hy2://pw@example.com:1000-2000", "bad port `1000-2000` (expected a number in "
		                                   "1-65535)", LINK_E_BAD_PORT},
		{"vless://not-a-uuid@example.com:443", "bad UUID `not-a-uuid` (expected 8-4-4-4-12 hex "
		                                      "digits)", LINK_E_BAD_UUID},
		{"vless://example.com:443", "the link has no id before the `@`", LINK_E_NO_USER},
		{"trojan://@example.com:443", "the link has no password before the `@`",
		 LINK_E_NO_USER},
		{"vmess://e30*", "bad base64 in the vmess link", LINK_E_BASE64},
		{"vmess://eyJhZGQiOiJhIiwicG9ydCI6IjEiLCJpZCI6ImI4MzEzODFkLTYzMjQtNGQ1My1hZDRmLThjZGE0"
		 "OGIzMDgxMSIsfQ==",
		 "bad JSON in the vmess link at byte 67 (expected one flat object)", LINK_E_JSON},
		{"vmess://W10=", "bad JSON in the vmess link at byte 1 (expected one flat object)",
		 LINK_E_JSON},
		{"vmess://eyJhZGQiOiJhIiwicG9ydCI6IjEiLCJpZCI6ImI4MzEzODFkLTYzMjQtNGQ1My1hZDRmLThjZGE0"
		 "OGIzMDgxMSIsIm5ldCI6ImtjcCJ9",
		 "unknown network `kcp` (expected tcp, ws or grpc)", LINK_E_NETWORK},
		{"vmess://eyJhZGQiOiJhIiwicG9ydCI6IjEiLCJpZCI6ImI4MzEzODFkLTYzMjQtNGQ1My1hZDRmLThjZGE0"
		 "OGIzMDgxMSIsImFpZCI6IjY0In0=",
		 "a vmess alterId other than 0 is not supported", LINK_E_UNSUPPORTED},
		{"ss://cmM0LW1kNTpwdw@example.com:1", "unknown method `rc4-md5`", LINK_E_METHOD},
		{"ss://!!!@example.com:1", "bad base64 in the method and password", LINK_E_BASE64},
		{"ss://YWVzLTEyOC1nY206dGVzdA@example.com:1/?plugin=obfs-local%3Bobfs%3Dhttp",
		 "a shadowsocks plugin is not supported", LINK_E_UNSUPPORTED},
		/* issue 32: what the config cannot carry is named (docs/links.md) */
		{"vless://" UUID "@example.com:443?type=xhttp",
		 "the xhttp transport is not supported", LINK_E_UNSUPPORTED},
		{"vless://" UUID "@example.com:443?type=splithttp&path=%2F",
		 "the splithttp transport (xhttp) is not supported", LINK_E_UNSUPPORTED},
		{"trojan://pw@example.com:443?type=httpupgrade&path=%2F",
		 "the httpupgrade transport is not supported", LINK_E_UNSUPPORTED},
		{"vmess://eyJhZGQiOiJnLmV4YW1wbGUuY29tIiwicG9ydCI6IjQ0MyIsImlkIjoiYjgzMTM4MWQtNjMyNC00"
		 "ZDUzLWFkNGYtOGNkYTQ4YjMwODExIiwibmV0IjoiaHR0cHVwZ3JhZGUifQ==",
		 "the httpupgrade transport is not supported", LINK_E_UNSUPPORTED},
		{"vless://" UUID "@example.com:443?security=reality&pbk=x",
		 "REALITY is not supported", LINK_E_UNSUPPORTED},
		{"vless://" UUID "@example.com:443?security=reality&pbk=x&flow=xtls-rprx-vision",
		 "REALITY is not supported", LINK_E_UNSUPPORTED},
		{"trojan://pw@example.com:443?security=reality", "REALITY is not supported",
		 LINK_E_UNSUPPORTED},
		{"vmess://eyJhZGQiOiJnLmV4YW1wbGUuY29tIiwicG9ydCI6IjQ0MyIsImlkIjoiYjgzMTM4MWQtNjMyNC00"
		 "ZDUzLWFkNGYtOGNkYTQ4YjMwODExIiwidGxzIjoicmVhbGl0eSJ9",
		 "REALITY is not supported", LINK_E_UNSUPPORTED},
		{"vless://" UUID "@example.com:443?flow=xtls-rprx-vision&security=tls",
		 "the XTLS Vision flow is not supported", LINK_E_UNSUPPORTED},
		{"vless://" UUID "@example.com:443?flow=xtls-rprx-vision-udp443&security=tls",
		 "the XTLS Vision flow is not supported", LINK_E_UNSUPPORTED},
		{"vless://" UUID "@example.com:443?flow=xtls-rprx-direct&security=tls",
		 "a vless flow is not supported", LINK_E_UNSUPPORTED},
		{"vless://" UUID "@example.com:443?type=grpc&mode=multi&serviceName=s",
		 "gRPC multi mode is not supported", LINK_E_UNSUPPORTED},
		{"vmess://eyJhZGQiOiJnLmV4YW1wbGUuY29tIiwicG9ydCI6IjQ0MyIsImlkIjoiYjgzMTM4MWQtNjMyNC00"
		 "ZDUzLWFkNGYtOGNkYTQ4YjMwODExIiwibmV0IjoiZ3JwYyIsInR5cGUiOiJtdWx0aSJ9",
		 "gRPC multi mode is not supported", LINK_E_UNSUPPORTED},
		{"ss://2022-blake3-aes-128-gcm:AAECAwQFBgcICQoLDA0ODw%3D%3D@example.com:1"
		 "/?plugin=v2ray-plugin%3Bserver",
		 "a shadowsocks plugin is not supported", LINK_E_UNSUPPORTED},
		{"hysteria2://pw@example.com?obfs=salamander&obfs-password=x",
		 "hysteria2 obfs is not supported", LINK_E_UNSUPPORTED},
		{"trojan://pw@example.com:443#bad%zz", "bad percent-encoding in the name",
		 LINK_E_PERCENT},
		{"trojan://p%00w@example.com:443", "bad percent-encoding in the password",
		 LINK_E_PERCENT},
		{"trojan://p%FFw@example.com:443", "the password is not UTF-8", LINK_E_UTF8},
		/* control bytes quoted in a message are made printable */
		{"x\x1b[31m://", "unknown scheme `x?[31m` (expected vless, vmess, trojan, ss, hysteria2 "
		                 "or hy2)", LINK_E_SCHEME},
	};
	expect_errors(cases, sizeof cases / sizeof cases[0]);
}

/* Issue 32 D4: a link whose block --test refuses is refused at import with
 * the words --test prints after "configuration invalid: " (the adversarial
 * review's five shapes, which main printed and exited 0 for). */
static void d4_import_runs_the_checks(void **state)
{
	(void)state;
	static const bad_link cases[] = {
		/* the tag is cut at 63 bytes in the message */
		{"vless://" UUID "@h:443?type=grpc&serviceName=a%20b",
		 "grpc: bad service name \"a b\"", LINK_E_CHECK},
		{"vless://" UUID "@h:443?type=grpc&serviceName=%3F", "grpc: bad service name \"?\"",
		 LINK_E_CHECK},
		{"vless://" UUID "@h:443?security=tls&alpn=" A300, "outbound vless-h: tls: bad ALPN list",
		 LINK_E_CHECK},
		{"vless://" UUID "@" A300 ":443",
		 "outbound vless-" A57 ": server is not a host name", LINK_E_CHECK},
		{"ss://2022-blake3-aes-128-gcm:c2hvcnQ%3D@h:1",
		 "outbound shadowsocks-h: shadowsocks 2022 key must be base64 of 16 bytes",
		 LINK_E_CHECK},
		/* a 2022 user behind an identity key: both keys are checked */
		{"ss://2022-blake3-aes-128-gcm:AAECAwQFBgcICQoLDA0ODw%3D%3D:c2hvcnQ%3D@h:1",
		 "outbound shadowsocks-h: shadowsocks 2022 key must be base64 of 16 bytes",
		 LINK_E_CHECK},
	};
	expect_errors(cases, sizeof cases / sizeof cases[0]);
}

static void too_long(void **state)
{
	(void)state;
	size_t n = LINK_MAX + 1;
	char *big = malloc(n);
	assert_non_null(big);
	memset(big, 'a', n);
	memcpy(big, "trojan://", 9);
	etm_outbound_spec o = {0};
	link_error e;
	char line[128];
	assert_int_equal(link_import(big, n, &o, &e), LINK_E_TOO_LONG);
	assert_string_equal(link_error_format(&e, line, sizeof line),
	                    "the link is longer than 8192 bytes");
	free(big);
}

static void base64(void **state)
{
	(void)state;
	static const struct {
		const char *in, *want; /* want NULL: refused */
	} cases[] = {
		{"", ""},
		{"Zg==", "f"},      {"Zg", "f"},         {"Zm8=", "fo"},  {"Zm8", "fo"},
		{"Zm9v", "foo"},    {"Zm9vYg==", "foob"}, {"Zm9vYmE", "fooba"},
		{"-___", "\xfb\xff\xff"}, {"+///", "\xfb\xff\xff"}, /* both alphabets */
		{"-_8=", "\xfb\xff"},     {"+/8", "\xfb\xff"},
		{"Z", NULL},        {"Zm9v!", NULL},     {"Zh==", NULL}, /* non-zero pad bits */
		{"Zm 9v", NULL},
	};
	unsigned char out[16];
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		long n = link_base64_decode(cases[i].in, strlen(cases[i].in), out, sizeof out);
		if (!cases[i].want) {
			assert_int_equal(n, -1);
			continue;
		}
		assert_int_equal(n, (long)strlen(cases[i].want));
		assert_memory_equal(out, cases[i].want, (size_t)n);
	}
	assert_int_equal(link_base64_decode("Zm9v", 4, out, 2), -1); /* no room */
}

static void percent(void **state)
{
	(void)state;
	static const struct {
		const char *in, *want;
	} cases[] = {
		{"a%20b", "a b"}, {"%2f%2F", "//"}, {"a+b", "a+b"}, {"%e2%82%AC", "\xe2\x82\xac"},
		{"%", NULL},      {"%2", NULL},      {"%zz", NULL}, {"%00", NULL},
	};
	char out[16];
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		long n = link_percent_decode(cases[i].in, strlen(cases[i].in), out, sizeof out);
		if (!cases[i].want) {
			assert_int_equal(n, -1);
			continue;
		}
		assert_int_equal(n, (long)strlen(cases[i].want));
		assert_memory_equal(out, cases[i].want, (size_t)n);
	}
}

/* A server's users exported and imported back give outbounds that reach
 * that server as those users. */
static const char server_toml[] =
	"[[inbound]]\ntag = \"tj\"\nprotocol = \"trojan\"\nlisten = \"0.0.0.0\"\nport = 443\n"
	"[[inbound.settings.users]]\nname = \"ann\"\npassword = \"p@ss word\"\n"
	"[[inbound.settings.users]]\npassword = \"second\"\n"
	"[inbound.stream]\nnetwork = \"ws\"\nsecurity = \"tls\"\n"
	"[inbound.stream.tls]\ncertificate = \"c.pem\"\nkey = \"k.pem\"\nserver_name = \"tls.example\"\n"
	"alpn = [\"h2\", \"http/1.1\"]\n"
	"[inbound.stream.ws]\npath = \"/t w\"\nhost = \"cdn.example\"\n\n"
	"[[inbound]]\ntag = \"vl\"\nprotocol = \"vless\"\nlisten = \"::1\"\nport = 8443\n"
	"[[inbound.settings.users]]\nid = \"" UUID "\"\n"
	"[inbound.stream]\nnetwork = \"grpc\"\n[inbound.stream.grpc]\nservice_name = \"svc\"\n\n"
	"[[inbound]]\ntag = \"vm\"\nprotocol = \"vmess\"\nport = 10086\n"
	"[[inbound.settings.users]]\nname = \"bob\"\nid = \"" UUID "\"\n"
	"[inbound.stream]\nnetwork = \"tls\"\n"
	"[inbound.stream.tls]\ncertificate = \"c.pem\"\nkey = \"k.pem\"\n\n"
	"[[inbound]]\ntag = \"ss\"\nprotocol = \"shadowsocks\"\nport = 8388\n"
	"[inbound.settings]\nmethod = \"aes-256-gcm\"\npassword = \"s:cr\xc3\xa9t\"\n\n"
	"[[inbound]]\ntag = \"ss22\"\nprotocol = \"shadowsocks\"\nport = 8389\n"
	"[inbound.settings]\nmethod = \"2022-blake3-aes-128-gcm\"\n"
	"password = \"AAECAwQFBgcICQoLDA0ODw==\"\n\n"
	"[[inbound]]\ntag = \"socks\"\nprotocol = \"socks\"\nport = 1080\n\n"
	/* issue 32: several 2022 users behind an identity key */
	"[[inbound]]\ntag = \"ssm\"\nprotocol = \"shadowsocks\"\nport = 8390\n"
	"[inbound.settings]\nmethod = \"2022-blake3-aes-128-gcm\"\n"
	"password = \"AAECAwQFBgcICQoLDA0ODw==\"\n"
	"[[inbound.settings.users]]\nname = \"alice\"\npassword = \"EBESExQVFhcYGRobHB0eHw==\"\n"
	"[[inbound.settings.users]]\nname = \"bob\"\npassword = \"ICEiIyQlJicoKSorLC0uLw==\"\n\n"
	"[[outbound]]\ntag = \"direct\"\nprotocol = \"freedom\"\n";

static const char *exported[] = {
	"trojan://p%40ss%20word@proxy.example:443?type=ws&path=%2Ft%20w&host=cdn.example"
	"&security=tls&sni=tls.example&alpn=h2%2Chttp%2F1.1#tj-ann\n"
	"trojan://second@proxy.example:443?type=ws&path=%2Ft%20w&host=cdn.example"
	"&security=tls&sni=tls.example&alpn=h2%2Chttp%2F1.1#tj-2\n",
	"vless://" UUID "@proxy.example:8443?encryption=none&type=grpc&serviceName=svc"
	"&security=none#vl\n",
	NULL, /* vmess: checked through the import, its JSON order is ours */
	"ss://YWVzLTI1Ni1nY206czpjcsOpdA@proxy.example:8388#ss\n",
	"ss://2022-blake3-aes-128-gcm:AAECAwQFBgcICQoLDA0ODw%3D%3D@proxy.example:8389#ss22\n",
	NULL, /* socks */
	/* each user's link carries iPSK:uPSK, as SIP022-2's client needs */
	"ss://2022-blake3-aes-128-gcm:AAECAwQFBgcICQoLDA0ODw%3D%3D%3AEBESExQVFhcYGRobHB0eHw%3D%3D"
	"@proxy.example:8390#ssm-alice\n"
	"ss://2022-blake3-aes-128-gcm:AAECAwQFBgcICQoLDA0ODw%3D%3D%3AICEiIyQlJicoKSorLC0uLw%3D%3D"
	"@proxy.example:8390#ssm-bob\n",
};

static void round_trip(void **state)
{
	(void)state;
	etm_spec s = {0};
	char msg[CONFIG_MSG_MAX];
	if (config_load(server_toml, strlen(server_toml), &s, msg, sizeof msg))
		fail_msg("%s", msg);
	char out[8192];
	link_error e;
	size_t links = 0;
	for (size_t i = 0; i < s.inbounds_len; i++) {
		const etm_inbound_spec *in = &s.inbounds[i];
		int n = link_export_inbound(in, "proxy.example", out, sizeof out, &e);
		assert_true(n >= 0);
		if (!link_exportable(in->protocol)) {
			assert_int_equal(n, 0);
			continue;
		}
		if (i < sizeof exported / sizeof exported[0] && exported[i])
			assert_string_equal(out, exported[i]);
		/* each line back through the import */
		size_t u = 0;
		for (char *line = out, *nl; (nl = strchr(line, '\n')); line = nl + 1, u++) {
			etm_outbound_spec o = {0};
			assert_int_equal(link_import(line, (size_t)(nl - line), &o, &e), 0);
			assert_int_equal(o.protocol, in->protocol);
			assert_string_equal(o.server, "proxy.example");
			assert_int_equal(o.port, in->port);
			const etm_settings_spec *st = &in->settings;
			const char *secret = st->users_len ? (st->users[u].id ? st->users[u].id
			                                                       : st->users[u].password)
			                                   : st->password;
			char both[256];
			if (in->protocol == ETM_PROTO_SHADOWSOCKS && st->users_len && st->password) {
				(void)snprintf(both, sizeof both, "%s:%s", st->password, secret);
				secret = both;
			}
			assert_string_equal(o.settings.id ? o.settings.id : o.settings.password, secret);
			if (in->protocol == ETM_PROTO_SHADOWSOCKS)
				assert_int_equal(o.settings.method, st->method);
			bool in_tls = in->stream.security == ETM_SEC_TLS || in->stream.network == ETM_NET_TLS;
			assert_int_equal(o.stream.security == ETM_SEC_TLS, in_tls);
			assert_int_equal(o.stream.network,
			                 in->stream.network == ETM_NET_TLS ? ETM_NET_TCP : in->stream.network);
			if (in->stream.ws.path)
				assert_string_equal(o.stream.ws.path, in->stream.ws.path);
			if (in->stream.ws.host)
				assert_string_equal(o.stream.ws.host, in->stream.ws.host);
			if (in->stream.grpc.service_name)
				assert_string_equal(o.stream.grpc.service_name, in->stream.grpc.service_name);
			if (in_tls && in->stream.tls.server_name)
				assert_string_equal(o.stream.tls.server_name, in->stream.tls.server_name);
			assert_int_equal(o.stream.tls.alpn.len, in_tls ? in->stream.tls.alpn.len : 0);
			if (in->protocol == ETM_PROTO_VMESS)
				assert_string_equal(o.tag, "vm-bob");
			char *toml = malloc(LINK_TOML_MAX);
			assert_non_null(toml);
			assert_true(link_toml_write(&o, toml, LINK_TOML_MAX) > 0);
			loads(toml);
			free(toml);
			link_outbound_free(&o);
			links++;
		}
		assert_int_equal(u, in->settings.users_len ? in->settings.users_len : 1);
	}
	assert_int_equal(links, 8);

	/* listening on every address: a host must be given */
	assert_int_equal(link_export_inbound(&s.inbounds[0], NULL, out, sizeof out, &e),
	                 LINK_E_LISTEN_ANY);
	assert_string_equal(link_error_format(&e, msg, sizeof msg),
	                    "inbound tj listens on every address: give --host NAME");
	/* else the listen address, IPv6 in brackets, or 127.0.0.1 */
	assert_true(link_export_inbound(&s.inbounds[1], NULL, out, sizeof out, &e) > 0);
	assert_non_null(strstr(out, "@[::1]:8443?"));
	assert_true(link_export_inbound(&s.inbounds[3], NULL, out, sizeof out, &e) > 0);
	assert_non_null(strstr(out, "@127.0.0.1:8388#"));
	/* too small a buffer says so */
	assert_int_equal(link_export_inbound(&s.inbounds[0], "h", out, 20, &e), LINK_E_SPACE);
	etm_spec_free(&s);
}

static void toml_too_small(void **state)
{
	(void)state;
	etm_outbound_spec o = {0};
	link_error e;
	const char *l = "trojan://pw@example.com:443";
	assert_int_equal(link_import(l, strlen(l), &o, &e), 0);
	char out[32];
	assert_int_equal(link_toml_write(&o, out, sizeof out), LINK_E_SPACE);
	link_outbound_free(&o);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(imports),    cmocka_unit_test(errors),
		cmocka_unit_test(too_long),   cmocka_unit_test(base64),
		cmocka_unit_test(percent),    cmocka_unit_test(round_trip),
		cmocka_unit_test(toml_too_small), cmocka_unit_test(d4_import_runs_the_checks),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
