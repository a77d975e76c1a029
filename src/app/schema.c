/* schema.c - the config schema tables and the Markdown reference written from them. */
#include "app/schema.h"

#include <stddef.h>
#include <string.h>

#include "base/log.h"
#include "udplb/manager.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

#define STR(T, m, key, dd, d) \
	{.name = key, .kind = SK_STRING, .offset = offsetof(T, m), .default_doc = dd, .doc = d}
#define REQ_STR(T, m, key, d) \
	{.name = key, .kind = SK_STRING, .offset = offsetof(T, m), .required = true, .doc = d}
#define LIST(T, m, key, d) \
	{.name = key, .kind = SK_STRLIST, .offset = offsetof(T, m), .default_doc = "[]", .doc = d}
#define BOOL(T, m, key, dflt, d)                                                      \
	{.name = key, .kind = SK_BOOL, .offset = offsetof(T, m), .def = dflt,         \
	 .default_doc = (dflt) ? "true" : "false", .doc = d}
#define ENUM(T, m, key, vars, dflt, dd, d)                                             \
	{.name = key, .kind = SK_ENUM, .offset = offsetof(T, m), .variants = vars,     \
	 .def = dflt, .default_doc = dd, .doc = d}
#define TABLE(T, m, key, subt, d) \
	{.name = key, .kind = SK_TABLE, .offset = offsetof(T, m), .sub = &subt, .doc = d}
#define TABLE_ARRAY(T, m, n, key, subt, ET, d)                                          \
	{.name = key, .kind = SK_TABLE_ARRAY, .offset = offsetof(T, m),                 \
	 .aux_offset = offsetof(T, n), .sub = &subt, .elem_size = sizeof(ET), .doc = d}
#define TABLE_OF(title_, doc_, fields_) \
	{.title = title_, .doc = doc_, .fields = fields_, .len = N(fields_)}

/* ---- enumerations ---- */

/* log.h's words, the CLI's and the API's too (ETM_LOG_* has the values of
 * LOG_LEVEL_*: static-asserted in cli.c) */
#define LOG_LEVEL_VARIANT_(word, l) {word, (int)l},
static const schema_variant log_levels[] = {LOG_LEVEL_WORDS(LOG_LEVEL_VARIANT_){NULL, 0}};
#undef LOG_LEVEL_VARIANT_

static const schema_variant log_formats[] = {
	{"text", ETM_LOG_FORMAT_TEXT},
	{"json", ETM_LOG_FORMAT_JSON},
	{NULL, 0},
};

static const schema_variant inbound_protocols[] = {
	{"socks", ETM_PROTO_SOCKS},
	{"http", ETM_PROTO_HTTP},
	{"mixed", ETM_PROTO_MIXED},
	{"trojan", ETM_PROTO_TROJAN},
	{"vless", ETM_PROTO_VLESS},
	{"vmess", ETM_PROTO_VMESS},
	{"shadowsocks", ETM_PROTO_SHADOWSOCKS},
	{"hysteria2", ETM_PROTO_HYSTERIA2},
	{"hysteria", ETM_PROTO_HYSTERIA2},
	{"hy2", ETM_PROTO_HYSTERIA2},
	{"udp_lb", ETM_PROTO_UDP_LB},
	{NULL, 0},
};

static const schema_variant outbound_protocols[] = {
	{"freedom", ETM_PROTO_FREEDOM},
	{"direct", ETM_PROTO_FREEDOM},
	{"blackhole", ETM_PROTO_BLACKHOLE},
	{"block", ETM_PROTO_BLACKHOLE},
	{"socks", ETM_PROTO_SOCKS},
	{"http", ETM_PROTO_HTTP},
	{"trojan", ETM_PROTO_TROJAN},
	{"vless", ETM_PROTO_VLESS},
	{"vmess", ETM_PROTO_VMESS},
	{"shadowsocks", ETM_PROTO_SHADOWSOCKS},
	{"hysteria2", ETM_PROTO_HYSTERIA2},
	{"hysteria", ETM_PROTO_HYSTERIA2},
	{"hy2", ETM_PROTO_HYSTERIA2},
	{"wireguard", ETM_PROTO_WIREGUARD},
	{NULL, 0},
};

static const schema_variant address_families[] = {
	{"auto", ETM_AF_AUTO},
	{"prefer_ipv4", ETM_AF_PREFER_IPV4},
	{"prefer_ipv6", ETM_AF_PREFER_IPV6},
	{"ipv4_only", ETM_AF_IPV4_ONLY},
	{"ipv6_only", ETM_AF_IPV6_ONLY},
	{NULL, 0},
};

static const schema_variant networks[] = {
	{"tcp", ETM_NET_TCP}, {"tls", ETM_NET_TLS}, {"ws", ETM_NET_WS}, {"grpc", ETM_NET_GRPC},
	{NULL, 0},
};

static const schema_variant securities[] = {
	{"none", ETM_SEC_NONE},
	{"tls", ETM_SEC_TLS},
	{NULL, 0},
};

static const schema_variant vmess_securities[] = {
	{"auto", ETM_VMESS_AUTO},
	{"aes-128-gcm", ETM_VMESS_AES_128_GCM},
	{"chacha20-poly1305", ETM_VMESS_CHACHA20_POLY1305},
	{"none", ETM_VMESS_NONE},
	{"zero", ETM_VMESS_ZERO},
	{NULL, 0},
};

static const schema_variant ss_methods[] = {
	{"aes-128-gcm", ETM_SS_AES_128_GCM},
	{"aes-256-gcm", ETM_SS_AES_256_GCM},
	{"chacha20-ietf-poly1305", ETM_SS_CHACHA20_IETF_POLY1305},
	{"2022-blake3-aes-128-gcm", ETM_SS_2022_BLAKE3_AES_128_GCM},
	{"2022-blake3-aes-256-gcm", ETM_SS_2022_BLAKE3_AES_256_GCM},
	{"2022-blake3-chacha20-poly1305", ETM_SS_2022_BLAKE3_CHACHA20_POLY1305},
	{NULL, 0},
};

/* ETM_DRAIN_UNSET is the default and no variant: it cannot be written. */
static const schema_variant drain_modes[] = {
	{"keep", ETM_DRAIN_KEEP},
	{"close", ETM_DRAIN_CLOSE},
	{NULL, 0},
};

/* ---- stream ---- */

#define TLS_CLIENT_FIELDS                                                                   \
	STR(etm_tls_spec, server_name, "server_name", "the server name",                    \
	    "SNI sent, and the name the certificate must carry."),                          \
	LIST(etm_tls_spec, alpn, "alpn", "ALPN protocols offered, in order."),              \
	BOOL(etm_tls_spec, allow_insecure, "allow_insecure", 0,                             \
	     "Skip certificate verification. Only for testing."),                           \
	STR(etm_tls_spec, ca, "ca", "the system store", "PEM file of the CAs to trust.")

static const schema_field tls_client_fields[] = {TLS_CLIENT_FIELDS};
static const schema_table tls_client =
	TABLE_OF("[outbound.stream.tls]", "TLS client settings.", tls_client_fields);

static const schema_field tls_server_fields[] = {
	TLS_CLIENT_FIELDS,
	STR(etm_tls_spec, certificate, "certificate", NULL,
	    "PEM file of the certificate chain. Required for a TLS inbound."),
	STR(etm_tls_spec, key, "key", NULL,
	    "PEM file of the private key. Required for a TLS inbound."),
};
static const schema_table tls_server = TABLE_OF(
	"[inbound.stream.tls]",
	"TLS server settings: certificate and key, and alpn (the protocols offered, the "
	"server's order winning). server_name, allow_insecure and ca are accepted for symmetry "
	"with outbounds and not used by a server.",
	tls_server_fields);

static const schema_field ws_fields[] = {
	STR(etm_ws_spec, path, "path", "\"/\"", "Request path of the WebSocket upgrade."),
	STR(etm_ws_spec, host, "host", "the server name", "Host header of the upgrade request."),
};
static const schema_table ws_table =
	TABLE_OF("[outbound.stream.ws] and [inbound.stream.ws]", "WebSocket settings.", ws_fields);

static const schema_field grpc_fields[] = {
	STR(etm_grpc_spec, service_name, "service_name", "\"GunService\"",
	    "gRPC service name; the path is /<service_name>/Tun."),
};
static const schema_table grpc_table = TABLE_OF("[outbound.stream.grpc] and [inbound.stream.grpc]",
                                                "gRPC transport settings.", grpc_fields);

#define STREAM_FIELDS(tls_table)                                                              \
	ENUM(etm_stream_spec, network, "network", networks, ETM_NET_TCP, "\"tcp\"",           \
	     "Transport: tcp, tls (tcp with security = \"tls\"), ws or grpc."),               \
	ENUM(etm_stream_spec, security, "security", securities, ETM_SEC_NONE, "\"none\"",     \
	     "none, or tls to run the transport inside TLS."),                                \
	TABLE(etm_stream_spec, tls, "tls", tls_table, "TLS settings."),                       \
	TABLE(etm_stream_spec, ws, "ws", ws_table, "WebSocket settings."),                    \
	TABLE(etm_stream_spec, grpc, "grpc", grpc_table, "gRPC settings.")

static const schema_field out_stream_fields[] = {STREAM_FIELDS(tls_client)};
static const schema_table out_stream =
	TABLE_OF("[outbound.stream]", "How the outbound reaches its server.", out_stream_fields);

static const schema_field in_stream_fields[] = {STREAM_FIELDS(tls_server)};
static const schema_table in_stream =
	TABLE_OF("[inbound.stream]", "How clients reach the inbound.", in_stream_fields);

/* ---- settings, per protocol ---- */

static const schema_field no_fields[1];
static const schema_table no_settings = {
	.title = "[outbound.settings] for freedom and blackhole",
	.doc = "These protocols take no settings; an empty table is accepted.",
	.fields = no_fields,
	.len = 0,
};

static const schema_field out_account_fields[] = {
	STR(etm_settings_spec, username, "username", "none", "Username sent to the server."),
	STR(etm_settings_spec, password, "password", "none", "Password sent to the server."),
};
static const schema_table out_account = TABLE_OF(
	"[outbound.settings] for socks and http",
	"Credentials for the upstream proxy (RFC 1929 for socks, Basic for http).",
	out_account_fields);

static const schema_field out_password_fields[] = {
	STR(etm_settings_spec, password, "password", NULL, "The server's password. Required."),
};
static const schema_table out_password = TABLE_OF("[outbound.settings] for trojan and hysteria2",
                                                  "", out_password_fields);

static const schema_field out_vless_fields[] = {
	STR(etm_settings_spec, id, "id", NULL, "The user's UUID. Required."),
};
static const schema_table out_vless = TABLE_OF("[outbound.settings] for vless", "", out_vless_fields);

static const schema_field out_vmess_fields[] = {
	STR(etm_settings_spec, id, "id", NULL, "The user's UUID. Required."),
	ENUM(etm_settings_spec, security, "security", vmess_securities, ETM_VMESS_AUTO, "\"auto\"",
	     "Body cipher: auto, aes-128-gcm, chacha20-poly1305, none or zero."),
};
static const schema_table out_vmess = TABLE_OF("[outbound.settings] for vmess", "", out_vmess_fields);

static const schema_field ss_fields[] = {
	ENUM(etm_settings_spec, method, "method", ss_methods, ETM_SS_UNSET, NULL,
	     "Cipher: aes-128-gcm, aes-256-gcm, chacha20-ietf-poly1305, or a 2022-blake3- method. "
	     "Required."),
	STR(etm_settings_spec, password, "password", NULL,
	    "Password; for 2022 methods the base64 key, or <iPSK>:<uPSK> (base64 each) for a "
	    "user behind an identity key. Required."),
};
static const schema_table out_ss = TABLE_OF("[outbound.settings] for shadowsocks", "", ss_fields);

/* Every inbound user's limits (docs/users.md). */
#define LIMITS                                                                              \
	{.name = "up_rate", .kind = SK_U64, .offset = offsetof(etm_user_spec, up_rate),     \
	 .def = 0, .default_doc = "0",                                                      \
	 .doc = "Bytes a second the user may send, over all its flows on this inbound; 0 = "\
	        "no limit."},                                                               \
	{.name = "down_rate", .kind = SK_U64, .offset = offsetof(etm_user_spec, down_rate), \
	 .def = 0, .default_doc = "0",                                                      \
	 .doc = "Bytes a second the user may receive, over all its flows on this inbound; " \
	        "0 = no limit."},                                                           \
	{.name = "max_sessions", .kind = SK_U64,                                            \
	 .offset = offsetof(etm_user_spec, max_sessions), .def = 0, .default_doc = "0",     \
	 .doc = "Sessions (client connections that opened a flow) the user may have open "  \
	        "at once on this inbound; 0 = no limit."}

static const schema_field user_ss_fields[] = {
	STR(etm_user_spec, name, "name", "none", "A label for the user (kept, not logged yet)."),
	REQ_STR(etm_user_spec, password, "password",
	        "The user's password, on the inbound's method (2022: the user's base64 key)."),
	LIMITS,
};
static const schema_table user_ss =
	TABLE_OF("[[inbound.settings.users]] for shadowsocks", "", user_ss_fields);

static const schema_field in_ss_fields[] = {
	ENUM(etm_settings_spec, method, "method", ss_methods, ETM_SS_UNSET, NULL,
	     "Cipher: aes-128-gcm, aes-256-gcm, chacha20-ietf-poly1305, or a 2022-blake3- method. "
	     "Required."),
	STR(etm_settings_spec, password, "password", NULL,
	    "Password; for 2022 methods the base64 key. Required unless users are listed; with "
	    "users on a 2022 method, the identity key (iPSK) they are behind."),
	TABLE_ARRAY(etm_settings_spec, users, users_len, "users", user_ss, etm_user_spec,
	            "Several users, each with its own password, all on the method above. AEAD: the "
	            "client is found by trial decryption and password is not read. 2022 (AES "
	            "methods): each password is the user's key, found by its identity header "
	            "under password."),
};
static const schema_table in_ss = TABLE_OF("[inbound.settings] for shadowsocks", "", in_ss_fields);

static const schema_field wg_fields[] = {
	STR(etm_settings_spec, secret_key, "secret_key", NULL,
	    "This interface's private key, base64. Required."),
	STR(etm_settings_spec, peer_public_key, "peer_public_key", NULL,
	    "The peer's public key, base64. Required."),
	STR(etm_settings_spec, pre_shared_key, "pre_shared_key", "none",
	    "Optional pre-shared key, base64."),
	STR(etm_settings_spec, endpoint, "endpoint", NULL, "The peer's host:port (UDP). Required."),
	LIST(etm_settings_spec, address, "address",
	     "This interface's addresses inside the tunnel, as CIDRs."),
	{.name = "mtu", .kind = SK_U64, .offset = offsetof(etm_settings_spec, mtu), .def = 1420,
	 .default_doc = "1420", .doc = "Tunnel MTU."},
};
static const schema_table out_wg = TABLE_OF("[outbound.settings] for wireguard", "", wg_fields);

/* Inbound users: one table per credential shape. */
static const schema_field user_account_fields[] = {
	REQ_STR(etm_user_spec, username, "username", "Username."),
	REQ_STR(etm_user_spec, password, "password", "Password."),
	LIMITS,
};
static const schema_table user_account = TABLE_OF(
	"[[inbound.settings.users]] for socks, http and mixed", "", user_account_fields);

static const schema_field user_password_fields[] = {
	STR(etm_user_spec, name, "name", "none", "The user's name in access-log lines."),
	REQ_STR(etm_user_spec, password, "password", "The user's password."),
	LIMITS,
};
static const schema_table user_password = TABLE_OF(
	"[[inbound.settings.users]] for trojan and hysteria2", "", user_password_fields);

static const schema_field user_id_fields[] = {
	STR(etm_user_spec, name, "name", "none", "The user's name in access-log lines."),
	REQ_STR(etm_user_spec, id, "id", "The user's UUID."),
	LIMITS,
};
static const schema_table user_id =
	TABLE_OF("[[inbound.settings.users]] for vless and vmess", "", user_id_fields);

#define USERS(subt, d)                                                                 \
	TABLE_ARRAY(etm_settings_spec, users, users_len, "users", subt, etm_user_spec, d)

static const schema_field in_account_fields[] = {
	USERS(user_account, "Accounts; with none, no authentication is asked."),
};
static const schema_table in_account =
	TABLE_OF("[inbound.settings] for socks, http and mixed", "", in_account_fields);

static const schema_field in_trojan_fields[] = {
	USERS(user_password, "The users; at least one."),
	STR(etm_settings_spec, fallback, "fallback", "none",
	    "host:port that receives, untouched, every connection that is not valid Trojan."),
};
static const schema_table in_trojan = TABLE_OF("[inbound.settings] for trojan", "", in_trojan_fields);

static const schema_field in_hy2_fields[] = {
	USERS(user_password, "The users; at least one."),
};
static const schema_table in_hy2 = TABLE_OF("[inbound.settings] for hysteria2", "", in_hy2_fields);

static const schema_field in_uuid_fields[] = {
	USERS(user_id, "The users; at least one."),
};
static const schema_table in_uuid =
	TABLE_OF("[inbound.settings] for vless and vmess", "", in_uuid_fields);

static const schema_field in_lb_fields[] = {
	STR(etm_settings_spec, cluster, "cluster", NULL,
	    "Tag of the [[cluster]] this listener balances over. Required."),
	{.name = "max_flows", .kind = SK_U64, .offset = offsetof(etm_settings_spec, max_flows),
	 .def = 0, .default_doc = "0",
	 .doc = "Most flows open at once (0-16777216); 0 = about 70 % of the soft open-files limit "
		"(1024 when it cannot be read). Shared out evenly between the workers."},
	{.name = "max_rx_datagram_size", .kind = SK_U64,
	 .offset = offsetof(etm_settings_spec, max_rx_datagram_size), .def = ETM_DEFAULT_LB_MAX_RX,
	 .default_doc = "8192",
	 .doc = "Longest datagram taken, in bytes, from a client or from a backend; longer ones "
		"are dropped (truncated). Clamped to 65535."},
};
static const schema_table in_lb =
	TABLE_OF("[inbound.settings] for udp_lb", "See docs/udp-lb.md.", in_lb_fields);

const schema_table *schema_settings(etm_protocol p, bool inbound)
{
	switch (p) {
	case ETM_PROTO_FREEDOM:
	case ETM_PROTO_BLACKHOLE:
		return inbound ? NULL : &no_settings;
	case ETM_PROTO_SOCKS:
	case ETM_PROTO_HTTP:
		return inbound ? &in_account : &out_account;
	case ETM_PROTO_MIXED:
		return inbound ? &in_account : NULL;
	case ETM_PROTO_TROJAN:
		return inbound ? &in_trojan : &out_password;
	case ETM_PROTO_HYSTERIA2:
		return inbound ? &in_hy2 : &out_password;
	case ETM_PROTO_VLESS:
		return inbound ? &in_uuid : &out_vless;
	case ETM_PROTO_VMESS:
		return inbound ? &in_uuid : &out_vmess;
	case ETM_PROTO_SHADOWSOCKS:
		return inbound ? &in_ss : &out_ss;
	case ETM_PROTO_WIREGUARD:
		return inbound ? NULL : &out_wg;
	case ETM_PROTO_UDP_LB:
		return inbound ? &in_lb : NULL;
	default:
		return NULL;
	}
}

/* ---- sections ---- */

static const schema_field log_fields[] = {
	ENUM(etm_spec, log_level, "level", log_levels, ETM_LOG_INFO, "\"info\"",
	     LOG_LEVEL_WORDS_TEXT " (warning is warn). The -l option overrides it."),
	STR(etm_spec, log_access, "access", "\"off\"",
	    "The access log, one line per flow: \"off\", \"stderr\" or the path of a file, "
	    "opened for append and reopened on every reload (docs/cli.md, \"Access log\")."),
	BOOL(etm_spec, log_access_end, "access_end", 0,
	     "Also a line when a TCP flow ends: bytes up and down, duration and why it ended "
	     "(docs/cli.md, \"Access log\")."),
	ENUM(etm_spec, log_format, "format", log_formats, ETM_LOG_FORMAT_TEXT, "\"text\"",
	     "text, or json: every line of the log and the access log one JSON object "
	     "(docs/cli.md, \"Log format\"). A reload applies it."),
};
static const schema_table log_table =
	TABLE_OF("[log]", "Logging. Event lines go to stderr.", log_fields);

static const schema_field metrics_fields[] = {
	STR(etm_spec, metrics_listen, "listen", "none",
	    "\"ip:port\" of the Prometheus endpoint, GET /metrics (docs/metrics.md); absent = "
	    "off. An IPv6 address goes in brackets. Any address is allowed (the metrics carry no "
	    "secrets, but they do show traffic: prefer loopback or a firewalled one). Read at "
	    "start: a reload that changes it is logged and waits for a restart."),
};
static const schema_table metrics_table =
	TABLE_OF("[metrics]", "The Prometheus metrics endpoint. Off when the table is absent.",
	         metrics_fields);

static const schema_field api_fields[] = {
	STR(etm_spec, api_listen, "listen", "none",
	    "\"ip:port\" of the admin API (docs/api.md): the Clash API that dashboards such as "
	    "yacd, metacubexd and zashboard speak, plus /users, /udp-lb and /metrics; absent = "
	    "off. Without a secret only a loopback address is allowed. Read at start: a reload "
	    "that changes it is logged and waits for a restart."),
	STR(etm_spec, api_secret, "secret", "none",
	    "The Bearer token every request must carry (Authorization: Bearer <secret>, or "
	    "?token=<secret> on a WebSocket). A reload applies a new one at once."),
};
static const schema_table api_table =
	TABLE_OF("[api]", "The admin API. Off when the table is absent.", api_fields);

static const schema_field inbound_fields[] = {
	REQ_STR(etm_inbound_spec, tag, "tag", "Name of the inbound; rules match it with inbound_tag."),
	{.name = "protocol", .kind = SK_ENUM, .offset = offsetof(etm_inbound_spec, protocol),
	 .variants = inbound_protocols, .required = true,
	 .doc = "socks, http, mixed (SOCKS4/5 and HTTP on one port), trojan, vless, vmess, "
		"shadowsocks, hysteria2 (aliases hysteria, hy2), udp_lb (a UDP load balancer)."},
	STR(etm_inbound_spec, listen, "listen", "\"127.0.0.1\"",
	    "IP address to bind; \"0.0.0.0\" for every IPv4 address, \"::\" for every IPv4 and "
	    "IPv6 address."),
	{.name = "port", .kind = SK_PORT, .offset = offsetof(etm_inbound_spec, port),
	 .required = true,
	 .doc = "Port to bind; 0 lets the system pick one, which the `listening on` line names."},
	BOOL(etm_inbound_spec, sniffing, "sniffing", 0,
	     "Read the client's first bytes for a TLS SNI or HTTP Host, for domain rules."),
	{.name = "settings", .kind = SK_SETTINGS, .offset = offsetof(etm_inbound_spec, settings),
	 .aux_offset = offsetof(etm_inbound_spec, protocol), .def = 1,
	 .doc = "Protocol settings; see below per protocol."},
	TABLE(etm_inbound_spec, stream, "stream", in_stream, "Transport; plain TCP when absent."),
};
static const schema_table inbound_table = TABLE_OF(
	"[[inbound]]", "Where clients connect. Repeat the section for each listener.", inbound_fields);

static const schema_field mux_fields[] = {
	BOOL(etm_mux_spec, enabled, "enabled", false,
	     "Send this outbound's TCP flows as Mux.Cool sub-flows of shared connections "
	     "(trojan, vless and vmess; v2ray's mux)."),
	{.name = "concurrency", .kind = SK_U64, .offset = offsetof(etm_mux_spec, concurrency),
	 .def = ETM_DEFAULT_MUX_CONCURRENCY, .default_doc = "8",
	 .doc = "Sub-flows open on one connection at most (1-128); a connection takes 128 in all, "
		"then new flows open another."},
};
static const schema_table mux_table = TABLE_OF("[outbound.mux]",
                                               "Mux.Cool: many flows over one proxy connection.",
                                               mux_fields);

static const schema_field outbound_fields[] = {
	REQ_STR(etm_outbound_spec, tag, "tag", "Name that rules, the default route and balancers use."),
	{.name = "protocol", .kind = SK_ENUM, .offset = offsetof(etm_outbound_spec, protocol),
	 .variants = outbound_protocols, .required = true,
	 .doc = "freedom (alias direct), blackhole (alias block), socks, http, trojan, vless, vmess, "
		"shadowsocks, hysteria2 (aliases hysteria, hy2), wireguard."},
	STR(etm_outbound_spec, server, "server", "none",
	    "Upstream server name or IP. Required by the proxy protocols."),
	{.name = "port", .kind = SK_PORT, .offset = offsetof(etm_outbound_spec, port),
	 .aux_offset = offsetof(etm_outbound_spec, has_port), .default_doc = "none",
	 .doc = "Upstream server port. Required by the proxy protocols."},
	ENUM(etm_outbound_spec, address_family, "address_family", address_families, ETM_AF_AUTO,
	     "\"auto\"",
	     "Which addresses of a name to dial: auto, prefer_ipv4, prefer_ipv6, ipv4_only, "
	     "ipv6_only."),
	{.name = "settings", .kind = SK_SETTINGS, .offset = offsetof(etm_outbound_spec, settings),
	 .aux_offset = offsetof(etm_outbound_spec, protocol), .def = 0,
	 .doc = "Protocol settings; see below per protocol."},
	TABLE(etm_outbound_spec, stream, "stream", out_stream, "Transport; plain TCP when absent."),
	TABLE(etm_outbound_spec, mux, "mux", mux_table, "Mux.Cool; off when absent."),
	ENUM(etm_outbound_spec, drain.mode, "drain", drain_modes, ETM_DRAIN_UNSET, "[policy] drain",
	     "What a reload that changes or removes this outbound does to the flows still open on "
	     "the old version: keep (they run until they end) or close (at once, or after "
	     "drain_after). Setting drain or drain_after here ignores both of [policy]."),
	{.name = "drain_after", .kind = SK_U64, .offset = offsetof(etm_outbound_spec, drain.after),
	 .aux_offset = offsetof(etm_outbound_spec, drain.has_after), .def = 0,
	 .default_doc = "[policy] drain_after",
	 .doc = "Close the old version's flows this many seconds after the reload (0-86400; 0 = at "
		"once); implies drain = \"close\" and is refused with drain = \"keep\"."},
};
static const schema_table outbound_table = TABLE_OF(
	"[[outbound]]", "Where flows leave. The first one is the default route unless [route] "
			"names another.",
	outbound_fields);

/* The seed's five keys first, in its order (its unknown-field message lists
 * them so), then the three of issue 6. */
static const schema_field balancer_fields[] = {
	REQ_STR(etm_balancer_spec, tag, "tag",
	        "Name of the balancer; rules and [route].default name it like an outbound."),
	{.name = "outbounds", .kind = SK_STRLIST, .offset = offsetof(etm_balancer_spec, outbounds),
	 .required = true,
	 .doc = "Member outbound tags, at least one; under failover the order is the priority."},
	STR(etm_balancer_spec, strategy, "strategy", "\"failover\"",
	    "failover (the first healthy member) or round_robin (each healthy member in turn)."),
	{.name = "probe_interval", .kind = SK_U64,
	 .offset = offsetof(etm_balancer_spec, probe_interval), .def = ETM_DEFAULT_PROBE_INTERVAL,
	 .default_doc = "30", .doc = "Seconds between the end of one probe and the next."},
	{.name = "probe_timeout", .kind = SK_U64, .offset = offsetof(etm_balancer_spec, probe_timeout),
	 .def = ETM_DEFAULT_PROBE_TIMEOUT, .default_doc = "5",
	 .doc = "Seconds one probe may take, name resolution included."},
	{.name = "rise", .kind = SK_U64, .offset = offsetof(etm_balancer_spec, rise), .def = 1,
	 .default_doc = "1",
	 .doc = "Consecutive successful probes that mark a down member up (1-100)."},
	{.name = "fall", .kind = SK_U64, .offset = offsetof(etm_balancer_spec, fall), .def = 1,
	 .default_doc = "1",
	 .doc = "Consecutive failed probes that mark an up member down (1-100)."},
	{.name = "retry", .kind = SK_U64, .offset = offsetof(etm_balancer_spec, retry), .def = 0,
	 .default_doc = "0",
	 .doc = "Further members a flow tries when the dial to its member fails before any byte "
		"(0-8)."},
};
static const schema_table balancer_table = TABLE_OF(
	"[[balancer]]", "A group of outbounds chosen by TCP health probes.", balancer_fields);

static const schema_variant lb_selections[] = {
	{"round_robin", ETM_LB_ROUND_ROBIN}, {"hrw", ETM_LB_HRW}, {"maglev", ETM_LB_MAGLEV},
	{NULL, 0},
};

static const schema_variant lb_affinities[] = {
	{"source_ip", ETM_LB_SOURCE_IP}, {"source_ip_port", ETM_LB_SOURCE_IP_PORT}, {NULL, 0},
};

static const schema_variant lb_ppv2_modes[] = {
	{"none", ETM_LB_PPV2_NONE}, {"first", ETM_LB_PPV2_FIRST}, {"every", ETM_LB_PPV2_EVERY},
	{NULL, 0},
};

#define U64(T, m, key, dflt, dd, d) \
	{.name = key, .kind = SK_U64, .offset = offsetof(T, m), .def = dflt, .default_doc = dd, .doc = d}

static const schema_field lb_health_fields[] = {
	{.name = "tcp_port", .kind = SK_PORT, .offset = offsetof(etm_lb_health_spec, tcp_port),
	 .aux_offset = offsetof(etm_lb_health_spec, has_tcp_port),
	 .default_doc = "the backend's port",
	 .doc = "Port of the companion TCP check: a connect that completes means up. 0 turns the "
		"TCP check off (then udp_payload is needed)."},
	U64(etm_lb_health_spec, interval, "interval", ETM_DEFAULT_LB_HEALTH_INTERVAL, "5",
	    "Seconds between the starts of two probes of a backend (1-86400)."),
	U64(etm_lb_health_spec, timeout, "timeout", ETM_DEFAULT_LB_HEALTH_TIMEOUT, "2",
	    "Seconds a probe may take (1-86400)."),
	U64(etm_lb_health_spec, rise, "rise", ETM_DEFAULT_LB_HEALTH_RISE, "2",
	    "Consecutive good probes that mark a down backend up (1-100)."),
	U64(etm_lb_health_spec, fall, "fall", ETM_DEFAULT_LB_HEALTH_FALL, "3",
	    "Consecutive failed probes that mark an up backend down (1-100)."),
	STR(etm_lb_health_spec, udp_payload, "udp_payload", "none",
	    "Also send this datagram to the backend's data port; a probe then needs any reply "
	    "within timeout."),
	STR(etm_lb_health_spec, udp_payload_hex, "udp_payload_hex", "none",
	    "The same probe datagram written in hexadecimal, for payloads with any byte (a DNS "
	    "query, say): \"12340100 0001\"; not with udp_payload."),
};
static const schema_table lb_health_table = TABLE_OF(
	"[cluster.health]",
	"Health checks. Without this table every backend counts as up. Results steer new flows "
	"only; when every backend is down, new flows go to all of them (fail-open).",
	lb_health_fields);

static const schema_field cluster_fields[] = {
	REQ_STR(etm_cluster_spec, tag, "tag", "Name of the cluster; udp_lb inbounds name it."),
	{.name = "backends", .kind = SK_STRLIST, .offset = offsetof(etm_cluster_spec, backends),
	 .required = true,
	 .doc = "Backends as \"ip:port\" or \"[ipv6]:port\", each optionally followed by "
		"\" weight=N\" (1-65535, default 1); at most 1024."},
	ENUM(etm_cluster_spec, selection, "selection", lb_selections, ETM_LB_HRW, "\"hrw\"",
	     "How a new flow picks its backend: round_robin, hrw (rendezvous hashing) or maglev."),
	ENUM(etm_cluster_spec, affinity, "affinity", lb_affinities, ETM_LB_SOURCE_IP,
	     "\"source_ip\"",
	     "What hrw and maglev hash: source_ip (every socket of a client alike) or "
	     "source_ip_port."),
	U64(etm_cluster_spec, idle_timeout, "idle_timeout", ETM_DEFAULT_LB_IDLE_TIMEOUT, "30",
	    "Shorthand for front_timeout and back_timeout together (1-86400); a specific key "
	    "given beside it wins."),
	{.name = "front_timeout", .kind = SK_U64, .offset = offsetof(etm_cluster_spec, front_timeout),
	 .aux_offset = offsetof(etm_cluster_spec, has_front_timeout), .default_doc = "idle_timeout",
	 .doc = "Seconds a flow lives after the client's last datagram (1-86400); the flow ends "
	        "when this and back_timeout have both run out."},
	{.name = "back_timeout", .kind = SK_U64, .offset = offsetof(etm_cluster_spec, back_timeout),
	 .aux_offset = offsetof(etm_cluster_spec, has_back_timeout), .default_doc = "idle_timeout",
	 .doc = "Seconds a flow lives after the backend's last datagram (1-86400); a backend that "
	        "never answered leaves front_timeout alone to count."},
	U64(etm_cluster_spec, responses, "responses", 0, "0",
	    "Close a flow after this many backend datagrams; 0 = no cap (DNS: 1)."),
	U64(etm_cluster_spec, requests, "requests", 0, "0",
	    "Close a flow after this many client datagrams; 0 = no cap."),
	U64(etm_cluster_spec, max_flows_per_ip, "max_flows_per_ip", 0, "0",
	    "Most flows one client IP may hold; 0 = no limit."),
	U64(etm_cluster_spec, max_flows_per_subnet, "max_flows_per_subnet", 0, "0",
	    "Most flows one client subnet may hold; 0 = no limit."),
	U64(etm_cluster_spec, subnet_prefix_v4, "subnet_prefix_v4", UDPLB_SUBNET_PREFIX_V4_DEFAULT, "24",
	    "Prefix length of an IPv4 client subnet (0-32)."),
	U64(etm_cluster_spec, subnet_prefix_v6, "subnet_prefix_v6", UDPLB_SUBNET_PREFIX_V6_DEFAULT, "64",
	    "Prefix length of an IPv6 client subnet (0-128)."),
	ENUM(etm_cluster_spec, proxy_protocol, "proxy_protocol", lb_ppv2_modes, ETM_LB_PPV2_NONE,
	     "\"none\"",
	     "PROXY protocol v2 header before the datagrams to a backend: none, first (a flow's "
	     "first datagram) or every."),
	U64(etm_cluster_spec, maglev_size, "maglev_size", UDPLB_MAGLEV_SIZE_DEFAULT, "65537",
	    "Entries of the maglev table: a prime, at least the backend count, at most 655373."),
	BOOL(etm_cluster_spec, reuse_upstream_sockets, "reuse_upstream_sockets", 0,
	     "A flow that ended with its responses cap hands its upstream socket, after a quiet "
	     "50 ms, to a later flow to the same backend: for stateless request/response backends "
	     "(DNS). Needs responses; not with proxy_protocol = \"first\"."),
	{.name = "health", .kind = SK_TABLE, .offset = offsetof(etm_cluster_spec, health),
	 .aux_offset = offsetof(etm_cluster_spec, has_health), .sub = &lb_health_table,
	 .doc = "Health checks; none when absent."},
};
static const schema_table cluster_table = TABLE_OF(
	"[[cluster]]", "Backends of a UDP load balancer (protocol = \"udp_lb\"). See docs/udp-lb.md.",
	cluster_fields);

static const schema_field rule_fields[] = {
	REQ_STR(etm_rule_spec, outbound, "outbound", "Target tag: an outbound or a balancer."),
	LIST(etm_rule_spec, domain, "domain", "Full domain names (ASCII case-insensitive)."),
	LIST(etm_rule_spec, domain_suffix, "domain_suffix",
	     "Domain suffixes, matched on label boundaries."),
	LIST(etm_rule_spec, domain_keyword, "domain_keyword", "Substrings of the domain."),
	LIST(etm_rule_spec, domain_regex, "domain_regex", "PCRE2 patterns on the domain."),
	LIST(etm_rule_spec, geosite, "geosite", "geosite.dat codes, as code or code@attribute."),
	LIST(etm_rule_spec, cidr, "cidr", "Destination IP ranges (IPv4 or IPv6)."),
	LIST(etm_rule_spec, geoip, "geoip", "geoip.dat codes; !code inverts."),
	{.name = "port", .kind = SK_PORTS, .offset = offsetof(etm_rule_spec, port),
	 .default_doc = "[]", .doc = "Destination ports: 443, \"1000-2000\", or an array of those."},
	{.name = "network", .kind = SK_NETWORKS, .offset = offsetof(etm_rule_spec, networks),
	 .default_doc = "both", .doc = "\"tcp\", \"udp\", or an array of them."},
	LIST(etm_rule_spec, inbound_tag, "inbound_tag", "Tags of the inbounds the flow came in on."),
	LIST(etm_rule_spec, source_cidr, "source_cidr", "Client IP ranges."),
};
static const schema_table rule_table = TABLE_OF(
	"[[route.rule]]",
	"One rule; the first rule with any matching matcher decides. A rule needs a matcher.",
	rule_fields);

static const schema_field route_fields[] = {
	STR(etm_route_spec, default_tag, "default", "the first [[outbound]]",
	    "Target of flows no rule matches: an outbound or a balancer tag."),
	STR(etm_route_spec, geoip, "geoip", "none", "Path of a v2ray geoip.dat file."),
	STR(etm_route_spec, geosite, "geosite", "none", "Path of a v2ray geosite.dat file."),
	TABLE_ARRAY(etm_route_spec, rules, rules_len, "rule", rule_table, etm_rule_spec,
	            "Rules, checked in order."),
};
static const schema_table route_table = TABLE_OF("[route]", "Routing.", route_fields);

static const schema_variant dns_protocols[] = {
	{"udp", ETM_DNS_UDP}, {"tcp", ETM_DNS_TCP}, {"tls", ETM_DNS_TLS}, {"https", ETM_DNS_HTTPS},
	{NULL, 0},
};

static const schema_field dns_server_fields[] = {
	REQ_STR(etm_dns_server_spec, tag, "tag", "Name that [[dns.rule]] server and final use."),
	ENUM(etm_dns_server_spec, protocol, "protocol", dns_protocols, ETM_DNS_UDP, "udp",
	     "udp, tcp, tls (DNS over TLS) or https (DNS over HTTPS, HTTP/1.1 POST)."),
	REQ_STR(etm_dns_server_spec, address, "address",
	        "\"ip\", \"ip:port\" or \"[v6]:port\"; port 53 by default, 853 for tls, 443 for "
	        "https."),
	BOOL(etm_dns_server_spec, through_proxy, "through_proxy", 0,
	     "Its connections are flows routed by [route] with inbound tag \"dns\" (tcp, tls and "
	     "https only); otherwise they are dialled directly."),
	STR(etm_dns_server_spec, server_name, "server_name", "the address",
	    "tls and https: the name sent (SNI) and checked in the certificate."),
	STR(etm_dns_server_spec, ca, "ca", "the system store",
	    "tls and https: PEM file of the CAs to trust."),
	BOOL(etm_dns_server_spec, allow_insecure, "allow_insecure", 0,
	     "tls and https: skip certificate verification."),
	STR(etm_dns_server_spec, path, "path", "\"/dns-query\"", "https: the request path."),
};
static const schema_table dns_server_table = TABLE_OF(
	"[[dns.server]]",
	"An upstream of the DNS service. With at least one, the service answers every TCP flow "
	"and UDP datagram to port 53, and every lookup of the outbounds.",
	dns_server_fields);

static const schema_field dns_rule_fields[] = {
	REQ_STR(etm_dns_rule_spec, server, "server", "The [[dns.server]] tag names it matches go to."),
	LIST(etm_dns_rule_spec, domain, "domain", "Exact names."),
	LIST(etm_dns_rule_spec, domain_suffix, "domain_suffix",
	     "The name or any name under it: \"example.com\" matches a.example.com."),
	LIST(etm_dns_rule_spec, domain_keyword, "domain_keyword", "Substrings of the name."),
	LIST(etm_dns_rule_spec, domain_regex, "domain_regex", "PCRE2 patterns matched against the name."),
	LIST(etm_dns_rule_spec, geosite, "geosite",
	     "Lists of [route] geosite's file: \"cn\", \"google@ads\"."),
};
static const schema_table dns_rule_table = TABLE_OF(
	"[[dns.rule]]", "Picks the upstream of the names it matches; the first match decides.",
	dns_rule_fields);

static const schema_field dns_host_fields[] = {
	REQ_STR(etm_dns_host_spec, name, "name", "The name answered."),
	LIST(etm_dns_host_spec, address, "address", "Its IPv4 and IPv6 addresses."),
};
static const schema_table dns_host_table = TABLE_OF(
	"[[dns.host]]", "A name the DNS service answers itself, without asking an upstream.",
	dns_host_fields);

static const schema_field dns_fields[] = {
	LIST(etm_dns_spec, servers, "servers",
	     "Resolver addresses: \"ip\", \"ip:port\", \"[v6]\" or \"[v6]:port\"; the system's "
	     "(/etc/resolv.conf) when empty. Not with [[dns.server]]."),
	TABLE_ARRAY(etm_dns_spec, server, server_len, "server", dns_server_table,
	            etm_dns_server_spec, "The DNS service's upstreams."),
	TABLE_ARRAY(etm_dns_spec, rules, rules_len, "rule", dns_rule_table, etm_dns_rule_spec,
	            "Rules choosing an upstream by name, checked in order."),
	TABLE_ARRAY(etm_dns_spec, hosts, hosts_len, "host", dns_host_table, etm_dns_host_spec,
	            "Names answered from the config."),
	STR(etm_dns_spec, final, "final", "the first [[dns.server]]",
	    "The upstream of names no rule matches."),
	U64(etm_dns_spec, cache_size, "cache_size", ETM_DEFAULT_DNS_CACHE_SIZE, "4096",
	    "Answers the service keeps, shared by all workers; 0: none."),
	BOOL(etm_dns_spec, prefetch, "prefetch", 1,
	     "Ask again for an answer hit at least twice in the last tenth of its TTL, before it "
	     "expires."),
	U64(etm_dns_spec, timeout, "timeout", ETM_DEFAULT_DNS_TIMEOUT, "5",
	    "Seconds an upstream has to answer (1 to 60); the client gets SERVFAIL then."),
};
static const schema_table dns_table = TABLE_OF("[dns]", "Name resolution and the DNS service.", dns_fields);

static const schema_field runtime_fields[] = {
	{.name = "workers", .kind = SK_U64, .offset = offsetof(etm_runtime_spec, workers), .def = 0,
	 .default_doc = "0",
	 .doc = "Worker threads, each with its own event loop; 0 = one per core the process may run "
	        "on (its CPU affinity, as taskset or a cpuset sets it)."},
	BOOL(etm_runtime_spec, splice, "splice", 1,
	     "Relay plain TCP to plain TCP with splice(2), without copying through user space, once a "
	     "flow has moved 64 KiB."),
};
static const schema_table runtime_table =
	TABLE_OF("[runtime]", "Threads and the relay. Read at start.",
	         runtime_fields);

static const schema_variant user_removals[] = {
	{"close", ETM_USER_REMOVAL_CLOSE},
	{"keep", ETM_USER_REMOVAL_KEEP},
	{NULL, 0},
};

static const schema_field policy_fields[] = {
	{.name = "handshake_timeout", .kind = SK_U64,
	 .offset = offsetof(etm_policy_spec, handshake_timeout), .def = ETM_DEFAULT_HANDSHAKE_TIMEOUT,
	 .default_doc = "10",
	 .doc = "Seconds a client has to finish its protocol handshake before it is closed."},
	{.name = "idle_timeout", .kind = SK_U64, .offset = offsetof(etm_policy_spec, idle_timeout),
	 .def = ETM_DEFAULT_IDLE_TIMEOUT, .default_doc = "300",
	 .doc = "Seconds a flow may carry no byte in either direction before it is closed."},
	{.name = "max_connections_per_source", .kind = SK_U64,
	 .offset = offsetof(etm_policy_spec, max_connections_per_source), .def = 0,
	 .default_doc = "0",
	 .doc = "Client connections one IP address may have open at once, over every TCP inbound, "
	        "with what they carry (each Mux.Cool TCP sub-flow and gRPC call 1, each Mux.Cool UDP "
	        "sub-flow, Shadowsocks UDP NAT entry and SOCKS5 UDP association 2); more are refused as they arrive. 0 = an eighth of the process's descriptor limit "
	        "(RLIMIT_NOFILE), at least 64: one client cannot take every descriptor."},
	ENUM(etm_policy_spec, drain.mode, "drain", drain_modes, ETM_DRAIN_UNSET, "\"keep\"",
	     "The drain of every [[outbound]] that sets neither drain nor drain_after: keep or "
	     "close."),
	{.name = "drain_after", .kind = SK_U64, .offset = offsetof(etm_policy_spec, drain.after),
	 .aux_offset = offsetof(etm_policy_spec, drain.has_after), .def = 0, .default_doc = "none",
	 .doc = "The drain_after of every [[outbound]] that sets neither drain nor drain_after "
		"(0-86400); implies drain = \"close\"."},
	{.name = "upgrade_drain_after", .kind = SK_U64,
	 .offset = offsetof(etm_policy_spec, upgrade_drain_after),
	 .def = ETM_DEFAULT_UPGRADE_DRAIN_AFTER, .default_doc = "600",
	 .doc = "Seconds (0-86400) the old process of a binary upgrade (SIGUSR2, docs/install.md) "
	        "lets its open flows run after the new one serves; then it closes them and exits."},
	{.name = "upgrade_start_timeout", .kind = SK_U64,
	 .offset = offsetof(etm_policy_spec, upgrade_start_timeout),
	 .def = ETM_DEFAULT_UPGRADE_START_TIMEOUT, .default_doc = "60",
	 .doc = "Seconds (1-3600) the new process of a binary upgrade (SIGUSR2, docs/install.md) "
	        "has to serve; past them the old one kills it (SIGKILL) and keeps serving."},
	ENUM(etm_policy_spec, user_removal, "user_removal", user_removals, ETM_USER_REMOVAL_CLOSE,
	     "\"close\"",
	     "What removing a user from an inbound (a reload, or DELETE /users/<name>) does to its "
	     "open flows: close ends them and closes its sessions at once; keep lets them run, "
	     "and its sessions open no new flow."),
};
static const schema_table policy_table =
	TABLE_OF("[policy]",
	         "Timeouts and limits of every connection, and what a reload does to the flows "
	         "of an outbound it replaces (see \"Drain policies\").",
	         policy_fields);

static const schema_field root_fields[] = {
	{.name = "log", .kind = SK_TABLE, .offset = 0, .sub = &log_table, .doc = "Logging."},
	{.name = "metrics", .kind = SK_TABLE, .offset = 0, .sub = &metrics_table,
	 .doc = "Metrics."},
	{.name = "api", .kind = SK_TABLE, .offset = 0, .sub = &api_table, .doc = "Admin API."},
	TABLE(etm_spec, runtime, "runtime", runtime_table, "Threads."),
	TABLE(etm_spec, policy, "policy", policy_table, "Timeouts and limits."),
	TABLE_ARRAY(etm_spec, inbounds, inbounds_len, "inbound", inbound_table, etm_inbound_spec,
	            "Listeners."),
	TABLE_ARRAY(etm_spec, outbounds, outbounds_len, "outbound", outbound_table,
	            etm_outbound_spec, "Outbounds."),
	TABLE_ARRAY(etm_spec, balancers, balancers_len, "balancer", balancer_table,
	            etm_balancer_spec, "Balancers."),
	TABLE_ARRAY(etm_spec, clusters, clusters_len, "cluster", cluster_table, etm_cluster_spec,
	            "UDP load-balancer clusters."),
	TABLE(etm_spec, route, "route", route_table, "Routing."),
	TABLE(etm_spec, dns, "dns", dns_table, "DNS."),
};
const schema_table schema_root = TABLE_OF("(top level)", "", root_fields);

/* ---- the reference ---- */

const char *schema_type_doc(const schema_field *f)
{
	switch (f->kind) {
	case SK_STRING:
		return "string";
	case SK_BOOL:
		return "boolean";
	case SK_U64:
		return "integer (u64)";
	case SK_PORT:
		return "integer (u16)";
	case SK_STRLIST:
		return "array of strings";
	case SK_ENUM:
		return "string (enum)";
	case SK_PORTS:
		return "integer, string or array";
	case SK_NETWORKS:
		return "string or array of strings";
	case SK_TABLE:
		return "table";
	case SK_TABLE_ARRAY:
		return "array of tables";
	case SK_SETTINGS:
		return "table";
	}
	return "?";
}

static int write_table(FILE *out, const schema_table *t)
{
	if (fprintf(out, "### `%s`\n\n", t->title) < 0)
		return -1;
	if (t->doc && t->doc[0] && fprintf(out, "%s\n\n", t->doc) < 0)
		return -1;
	if (t->len == 0)
		return fprintf(out, "No keys.\n\n") < 0 ? -1 : 0;
	if (fprintf(out, "| key | type | default | meaning |\n|---|---|---|---|\n") < 0)
		return -1;
	for (size_t i = 0; i < t->len; i++) {
		const schema_field *f = &t->fields[i];
		const char *def = f->required ? "required" : f->default_doc ? f->default_doc : "none";
		if (fprintf(out, "| `%s` | %s | %s | %s |\n", f->name, schema_type_doc(f), def,
		            f->doc) < 0)
			return -1;
	}
	return fputc('\n', out) == EOF ? -1 : 0;
}

/* Depth-first, each table once (ws and grpc are shared by both streams). */
static int walk(FILE *out, const schema_table *t, const schema_table **seen, size_t *nseen,
                size_t cap)
{
	for (size_t i = 0; i < *nseen; i++)
		if (seen[i] == t)
			return 0;
	if (*nseen == cap)
		return -1;
	seen[(*nseen)++] = t;
	if (t != &schema_root && write_table(out, t))
		return -1;
	for (size_t i = 0; i < t->len; i++) {
		const schema_field *f = &t->fields[i];
		if (f->sub && walk(out, f->sub, seen, nseen, cap))
			return -1;
		if (f->kind != SK_SETTINGS)
			continue;
		for (int p = 0; p < ETM_PROTO_COUNT_; p++) {
			const schema_table *st = schema_settings((etm_protocol)p, f->def != 0);
			if (st && walk(out, st, seen, nseen, cap))
				return -1;
		}
	}
	return 0;
}

/* Bounds the tables the walk remembers; there are about thirty. */
#define SCHEMA_MAX_TABLES 64

int schema_write_reference(FILE *out)
{
	const schema_table *seen[SCHEMA_MAX_TABLES];
	size_t nseen = 0;
	return walk(out, &schema_root, seen, &nseen, SCHEMA_MAX_TABLES);
}
