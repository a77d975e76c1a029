/* spec.h - the engine's desired state: typed, config-format-neutral, validated by etm_spec_check. */
#ifndef ETEMENANKI_SPEC_H
#define ETEMENANKI_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* A front-end (the TOML lowering in etemenanki-app, a panel, a test) fills an
 * etm_spec; etm_spec_check runs the build-time checks the seeds list; the
 * supervisor applies a spec that passed. Every string is owned by the spec and
 * freed by etm_spec_free; a zeroed etm_spec is a valid empty spec. */

typedef enum etm_log_level {
	ETM_LOG_ERROR,
	ETM_LOG_WARN,
	ETM_LOG_INFO,
	ETM_LOG_DEBUG,
	ETM_LOG_TRACE,
} etm_log_level;

/* [log] format: how every log line is written (base/log.h enum log_format). */
typedef enum etm_log_format {
	ETM_LOG_FORMAT_TEXT,
	ETM_LOG_FORMAT_JSON,
} etm_log_format;

/* Every protocol any inbound or outbound may name, after aliases are folded
 * (direct = freedom, block = blackhole, hysteria and hy2 = hysteria2). */
typedef enum etm_protocol {
	ETM_PROTO_FREEDOM,
	ETM_PROTO_BLACKHOLE,
	ETM_PROTO_SOCKS,
	ETM_PROTO_HTTP,
	ETM_PROTO_MIXED,
	ETM_PROTO_TROJAN,
	ETM_PROTO_VLESS,
	ETM_PROTO_VMESS,
	ETM_PROTO_SHADOWSOCKS,
	ETM_PROTO_HYSTERIA2,
	ETM_PROTO_WIREGUARD,
	ETM_PROTO_UDP_LB, /* inbound only: a UDP load-balancer listener (seed 001) */
	ETM_PROTO_COUNT_,
} etm_protocol;

/* The canonical name of a protocol ("freedom", "hysteria2", ...). */
const char *etm_protocol_name(etm_protocol p);

typedef enum etm_address_family {
	ETM_AF_AUTO, /* both families, in the resolver's order */
	ETM_AF_PREFER_IPV4,
	ETM_AF_PREFER_IPV6,
	ETM_AF_IPV4_ONLY,
	ETM_AF_IPV6_ONLY,
} etm_address_family;

typedef enum etm_network {
	ETM_NET_TCP,
	ETM_NET_TLS, /* shorthand for tcp + security = tls */
	ETM_NET_WS,
	ETM_NET_GRPC,
} etm_network;

typedef enum etm_security {
	ETM_SEC_NONE,
	ETM_SEC_TLS,
} etm_security;

/* VMess body security. */
typedef enum etm_vmess_security {
	ETM_VMESS_AUTO, /* aes-128-gcm where AES is fast, else chacha20-poly1305 */
	ETM_VMESS_AES_128_GCM,
	ETM_VMESS_CHACHA20_POLY1305,
	ETM_VMESS_NONE,
	ETM_VMESS_ZERO,
} etm_vmess_security;

/* Shadowsocks AEAD methods; 2022 ones take a base64 key as password. */
typedef enum etm_ss_method {
	ETM_SS_UNSET,
	ETM_SS_AES_128_GCM,
	ETM_SS_AES_256_GCM,
	ETM_SS_CHACHA20_IETF_POLY1305,
	ETM_SS_2022_BLAKE3_AES_128_GCM,
	ETM_SS_2022_BLAKE3_AES_256_GCM,
	ETM_SS_2022_BLAKE3_CHACHA20_POLY1305,
} etm_ss_method;

/* The config's name of a Shadowsocks method ("aes-128-gcm", ...), "?" for
 * ETM_SS_UNSET. */
const char *etm_ss_method_name(etm_ss_method m);

typedef enum etm_strategy {
	ETM_STRATEGY_FAILOVER,
	ETM_STRATEGY_ROUND_ROBIN,
} etm_strategy;

/* Bits of etm_rule.networks. */
enum {
	ETM_RULE_NET_TCP = 1u << 0,
	ETM_RULE_NET_UDP = 1u << 1,
};

typedef struct etm_strlist {
	char **items; /* owned, each owned */
	size_t len;
} etm_strlist;

typedef struct etm_port_range {
	uint16_t first, last; /* inclusive */
} etm_port_range;

typedef struct etm_port_list {
	etm_port_range *items; /* owned */
	size_t len;
} etm_port_list;

typedef struct etm_tls_spec {
	char *server_name;   /* SNI and the name checked in the certificate */
	etm_strlist alpn;
	bool allow_insecure; /* skip certificate verification */
	char *ca;            /* PEM file of trusted CAs; NULL = the system store */
	char *certificate;   /* inbound only: PEM chain */
	char *key;           /* inbound only: PEM private key */
} etm_tls_spec;

typedef struct etm_ws_spec {
	char *path; /* request path; NULL = "/" */
	char *host; /* Host header; NULL = the server name */
} etm_ws_spec;

typedef struct etm_grpc_spec {
	char *service_name;
} etm_grpc_spec;

typedef struct etm_stream_spec {
	etm_network network;
	etm_security security; /* network = tls sets ETM_SEC_TLS as well */
	etm_tls_spec tls;
	etm_ws_spec ws;
	etm_grpc_spec grpc;
} etm_stream_spec;

/* An account of an inbound: username/password for socks and http, password
 * for trojan and hysteria2, id (UUID) for vless and vmess. Fields a protocol does not use stay NULL. */
typedef struct etm_user_spec {
	char *name; /* optional label for logs */
	char *username;
	char *password;
	char *id;
	/* Limits (docs/users.md): bytes a second each way, summed over the
	 * user's flows on this inbound (0: none), and its sessions open at
	 * once (0: no limit). */
	uint64_t up_rate, down_rate;
	uint64_t max_sessions;
} etm_user_spec;

/* Per-protocol settings, flattened: the lowering accepts for each protocol
 * only the keys that protocol uses. */
typedef struct etm_settings_spec {
	char *username;
	char *password;
	char *id; /* vless / vmess UUID */
	etm_vmess_security security;
	etm_ss_method method;
	/* wireguard */
	char *secret_key;
	char *peer_public_key;
	char *pre_shared_key;
	char *endpoint;
	etm_strlist address;
	uint64_t mtu;
	/* inbound: accounts, and where trojan sends what is not trojan */
	etm_user_spec *users; /* owned */
	size_t users_len;
	char *fallback;
	/* udp_lb inbound */
	char *cluster;                 /* a [[cluster]] tag */
	uint64_t max_flows;            /* 0 = automatic */
	uint64_t max_rx_datagram_size; /* longer datagrams drop; clamped to 65535 */
} etm_settings_spec;

typedef struct etm_inbound_spec {
	char *tag;
	etm_protocol protocol;
	char *listen; /* address to bind */
	uint16_t port;
	bool sniffing;
	etm_settings_spec settings;
	etm_stream_spec stream;
} etm_inbound_spec;

/* What becomes of the flows still open on an outbound's old version once a
 * reload has replaced or removed it (seed 002, "排空"). An [[outbound]] that
 * sets drain or drain_after takes nothing from [policy]; one that sets
 * neither takes [policy]'s; keep when that sets neither either. drain_after
 * alone means close after that many seconds; drain = "close" alone, at once;
 * drain = "keep" with drain_after is refused. */
typedef enum etm_drain_mode {
	ETM_DRAIN_UNSET, /* not written */
	ETM_DRAIN_KEEP,  /* old flows run until they end */
	ETM_DRAIN_CLOSE, /* old flows close: at once, or drain_after seconds after the publish */
} etm_drain_mode;

/* Longest grace drain_after may give: a day. Longer reads like milliseconds
 * typed as seconds, and a grace timer should not outlive many reloads. */
#define ETM_MAX_DRAIN_AFTER 86400

typedef struct etm_drain_spec {
	etm_drain_mode mode;
	uint64_t after; /* seconds; meaningful when has_after */
	bool has_after;
} etm_drain_spec;

/* Mux.Cool on a proxy outbound (issue 17): its flows as sub-flows of
 * shared connections. */
#define ETM_DEFAULT_MUX_CONCURRENCY 8
#define ETM_MUX_CONCURRENCY_MAX 128

typedef struct etm_mux_spec {
	bool enabled;
	uint64_t concurrency; /* sub-flows open on one connection at most */
} etm_mux_spec;

typedef struct etm_outbound_spec {
	char *tag;
	etm_protocol protocol;
	char *server; /* NULL when not set */
	uint16_t port;
	bool has_port;
	etm_address_family address_family;
	etm_settings_spec settings;
	etm_stream_spec stream;
	etm_drain_spec drain; /* its old versions' fate; see etm_drain_mode */
	etm_mux_spec mux;
} etm_outbound_spec;

#define ETM_DEFAULT_PROBE_INTERVAL 30 /* seconds; seed 000 "Limits" */
#define ETM_DEFAULT_PROBE_TIMEOUT 5   /* seconds; seed 000 "Limits" */

typedef struct etm_balancer_spec {
	char *tag;
	etm_strlist outbounds; /* member tags in priority order; repeats allowed */
	char *strategy;        /* as written; NULL = failover. Checked by etm_spec_check */
	etm_strategy strategy_kind;
	uint64_t probe_interval; /* seconds */
	uint64_t probe_timeout;  /* seconds */
	/* Beyond the seeds (issue 6), each off by default: */
	uint64_t rise;  /* consecutive good probes to mark a member up; default 1 */
	uint64_t fall;  /* consecutive failed probes to mark it down; default 1 */
	uint64_t retry; /* further members a failed dial may try; default 0 */
} etm_balancer_spec;

/* UDP load-balancer clusters (seed 001, issue 8). */
typedef enum etm_lb_selection {
	ETM_LB_ROUND_ROBIN,
	ETM_LB_HRW,
	ETM_LB_MAGLEV,
} etm_lb_selection;

typedef enum etm_lb_affinity {
	ETM_LB_SOURCE_IP,
	ETM_LB_SOURCE_IP_PORT,
} etm_lb_affinity;

typedef enum etm_lb_proxy_protocol {
	ETM_LB_PPV2_NONE,
	ETM_LB_PPV2_FIRST,
	ETM_LB_PPV2_EVERY,
} etm_lb_proxy_protocol;

#define ETM_DEFAULT_LB_MAX_RX 8192       /* bytes */
#define ETM_DEFAULT_LB_IDLE_TIMEOUT 30   /* seconds */
#define ETM_DEFAULT_LB_HEALTH_INTERVAL 5 /* seconds */
#define ETM_DEFAULT_LB_HEALTH_TIMEOUT 2  /* seconds */
#define ETM_DEFAULT_LB_HEALTH_RISE 2
#define ETM_DEFAULT_LB_HEALTH_FALL 3

typedef struct etm_lb_health_spec {
	uint16_t tcp_port; /* 0 with has_tcp_port: no TCP check */
	bool has_tcp_port; /* absent: each backend's own port */
	uint64_t interval; /* seconds */
	uint64_t timeout;  /* seconds */
	uint64_t rise, fall;
	char *udp_payload;     /* NULL: no UDP check */
	char *udp_payload_hex; /* the same in hexadecimal, for any byte; NULL: not set */
} etm_lb_health_spec;

typedef struct etm_cluster_spec {
	char *tag;
	etm_strlist backends; /* "ip:port" or "ip:port weight=N" */
	etm_lb_selection selection;
	etm_lb_affinity affinity;
	uint64_t idle_timeout; /* seconds: the shorthand for front and back */
	uint64_t front_timeout; /* seconds after the client's last datagram; read
	                           etm_cluster_front_timeout, which applies the shorthand */
	uint64_t back_timeout;  /* seconds after the backend's last datagram; likewise */
	bool has_front_timeout, has_back_timeout; /* the key was given */
	uint64_t responses;    /* 0 = no cap */
	uint64_t requests;     /* 0 = no cap */
	uint64_t max_flows_per_ip;
	uint64_t max_flows_per_subnet;
	uint64_t subnet_prefix_v4;
	uint64_t subnet_prefix_v6;
	etm_lb_proxy_protocol proxy_protocol;
	uint64_t maglev_size;
	bool reuse_upstream_sockets; /* a flow that got its responses hands its socket on */
	bool has_health; /* [cluster.health] present: probes run */
	etm_lb_health_spec health;
} etm_cluster_spec;

typedef struct etm_rule_spec {
	char *outbound; /* target tag: an outbound or a balancer */
	etm_strlist domain;
	etm_strlist domain_suffix;
	etm_strlist domain_keyword;
	etm_strlist domain_regex;
	etm_strlist geosite;
	etm_strlist cidr;
	etm_strlist geoip;
	etm_port_list port;
	unsigned networks; /* ETM_RULE_NET_* bits; 0 = no network matcher */
	etm_strlist inbound_tag;
	etm_strlist source_cidr;
} etm_rule_spec;

typedef struct etm_route_spec {
	char *default_tag; /* NULL = the first outbound */
	char *geoip;       /* path of geoip.dat */
	char *geosite;     /* path of geosite.dat */
	etm_rule_spec *rules; /* owned, in order */
	size_t rules_len;
} etm_route_spec;

/* [[dns.server]] protocol: how the DNS service reaches an upstream. */
typedef enum etm_dns_protocol {
	ETM_DNS_UDP,   /* plain DNS over UDP (RFC 1035) */
	ETM_DNS_TCP,   /* plain DNS over TCP, queries pipelined (RFC 7766) */
	ETM_DNS_TLS,   /* DNS over TLS (RFC 7858) */
	ETM_DNS_HTTPS, /* DNS over HTTPS, HTTP/1.1 POST (RFC 8484) */
} etm_dns_protocol;

/* One upstream of the DNS service. */
typedef struct etm_dns_server_spec {
	char *tag;
	etm_dns_protocol protocol;
	char *address;       /* "ip", "ip:port", "[v6]:port" */
	bool through_proxy;  /* its connections are flows routed with inbound tag "dns" */
	char *server_name;   /* tls/https: SNI and the name checked; NULL = the address */
	char *ca;            /* tls/https: PEM of trusted CAs; NULL = the system store */
	bool allow_insecure; /* tls/https: no certificate check */
	char *path;          /* https: the request path; NULL = "/dns-query" */
} etm_dns_server_spec;

/* [[dns.rule]]: names it matches are asked of server. */
typedef struct etm_dns_rule_spec {
	char *server; /* a [[dns.server]] tag */
	etm_strlist domain;
	etm_strlist domain_suffix;
	etm_strlist domain_keyword;
	etm_strlist domain_regex;
	etm_strlist geosite;
} etm_dns_rule_spec;

/* [[dns.host]]: a name the service answers itself. */
typedef struct etm_dns_host_spec {
	char *name;
	etm_strlist address; /* IPv4 and IPv6 literals */
} etm_dns_host_spec;

#define ETM_DEFAULT_DNS_CACHE_SIZE 4096 /* answers the DNS service keeps */
#define ETM_DEFAULT_DNS_TIMEOUT 5       /* seconds an upstream has to answer */

typedef struct etm_dns_spec {
	etm_strlist servers; /* "ip" or "ip:port"; empty = the system's */
	/* The DNS service (seed 002 DnsSpec::Split), present when
	 * server_len > 0: port 53 is intercepted and answered by it. */
	etm_dns_server_spec *server;
	size_t server_len;
	etm_dns_rule_spec *rules;
	size_t rules_len;
	etm_dns_host_spec *hosts;
	size_t hosts_len;
	char *final;         /* NULL = the first server */
	uint64_t cache_size; /* 0 = no cache */
	bool prefetch;
	uint64_t timeout;    /* seconds */
} etm_dns_spec;

#define ETM_DEFAULT_HANDSHAKE_TIMEOUT 10 /* seconds for a client to finish its handshake */
#define ETM_DEFAULT_IDLE_TIMEOUT 300     /* seconds a flow may pass no byte either way */
#define ETM_DEFAULT_UPGRADE_DRAIN_AFTER 600 /* seconds an upgrade's old process drains */
#define ETM_DEFAULT_UPGRADE_START_TIMEOUT 60 /* seconds an upgrade's new process has to serve */
/* Bounds of upgrade_start_timeout: at least a second (0 would kill every
 * new process before it read its config); at most an hour, past which a
 * start is hung, not slow, and every later SIGUSR2 waits on it. */
#define ETM_MIN_UPGRADE_START_TIMEOUT 1
#define ETM_MAX_UPGRADE_START_TIMEOUT 3600

typedef struct etm_runtime_spec {
	uint64_t workers; /* worker threads; 0 = one per core */
	bool splice;      /* relay plain TCP to plain TCP with splice(2) */
} etm_runtime_spec;

/* What removing a user from an inbound does to its open flows (seed 002
 * UserRemovalPolicy). */
typedef enum etm_user_removal {
	ETM_USER_REMOVAL_CLOSE, /* they end at once, and its sessions with them */
	ETM_USER_REMOVAL_KEEP,  /* they run on; its sessions open no new flow */
} etm_user_removal;

typedef struct etm_policy_spec {
	uint64_t handshake_timeout; /* seconds */
	uint64_t idle_timeout;      /* seconds */
	uint64_t max_connections_per_source; /* open client connections per address; 0 = auto */
	etm_drain_spec drain; /* the default of every [[outbound]] that sets no drain key */
	uint64_t upgrade_drain_after; /* seconds the old process of an upgrade lets flows run */
	uint64_t upgrade_start_timeout; /* seconds the new process of an upgrade has to serve */
	etm_user_removal user_removal;  /* a user a reload or the API removes */
} etm_policy_spec;

typedef struct etm_spec {
	etm_log_level log_level;
	char *log_access; /* [log] access: "off" (or NULL), "stderr" or a path */
	bool log_access_end; /* [log] access_end: a line when a TCP flow ends too */
	etm_log_format log_format;
	/* [metrics] listen: "ip:port" of the Prometheus endpoint
	 * (docs/metrics.md), or NULL when off. The front-end serves it; the
	 * engine only checks it (etm_listen_addr_parse). */
	char *metrics_listen;
	/* [api] listen: "ip:port" of the admin API (docs/api.md), or NULL
	 * when off; [api] secret: its Bearer token, NULL when none (then
	 * etm_spec_check refuses a listen address that is not loopback).
	 * The front-end serves it; the engine only checks them. */
	char *api_listen;
	char *api_secret;
	etm_runtime_spec runtime;
	etm_policy_spec policy;
	etm_inbound_spec *inbounds; /* owned */
	size_t inbounds_len;
	etm_outbound_spec *outbounds; /* owned */
	size_t outbounds_len;
	etm_balancer_spec *balancers; /* owned */
	size_t balancers_len;
	etm_cluster_spec *clusters; /* owned */
	size_t clusters_len;
	etm_route_spec route;
	etm_dns_spec dns;
} etm_spec;

/* Frees everything the spec owns and zeroes it. */
void etm_spec_free(etm_spec *spec);

/* A deep copy of src into *dst (an edit of the running config, such as a
 * user the admin API adds, is applied as a new spec). Returns 0, or -1
 * when memory ran out (*dst is then empty). */
__attribute__((warn_unused_result)) int etm_spec_copy(etm_spec *dst, const etm_spec *src);

/* Runs the build-time checks of the seeds (duplicate tags, balancer members
 * and strategy, route references, ...) on a lowered spec. Returns 0 when the
 * spec is valid; otherwise -1 with the exact message, NUL-terminated, in
 * msg (truncated to msg_size). Fills strategy_kind of every balancer, and
 * gives a spec with no outbound whose inbounds are all udp_lb the one
 * outbound "direct" (freedom) the router needs: spec is not const. */
__attribute__((warn_unused_result)) int etm_spec_check(etm_spec *spec, char *msg, size_t msg_size);

/* Parses "a.b.c.d:port" or "[v6]:port" (an IP literal, port 0-65535;
 * 0 = the kernel picks one) into *out. Returns 0, or -1 when s is not
 * that; *out is then unchanged. */
__attribute__((warn_unused_result)) int etm_listen_addr_parse(const char *s,
                                                              struct sockaddr_storage *out);

/* The tag flows go to when no rule matches: [route].default when set, else the
 * first outbound's tag; NULL when there is neither. Borrowed from the spec. */
const char *etm_spec_default_tag(const etm_spec *spec);

/* How long a flow of cluster c lives after its client's (front) or its
 * backend's (back) last datagram, in seconds: the specific key when given,
 * else idle_timeout, the shorthand for both. The specific key wins whatever
 * the order in the file, as a narrower setting overrides a general one.
 * Cannot fail. Inline, so that the sans-io planner (plan_equal.c) reads the
 * same rule without linking the spec checks. */
static inline uint64_t etm_cluster_front_timeout(const etm_cluster_spec *c)
{
	return c->has_front_timeout ? c->front_timeout : c->idle_timeout;
}

static inline uint64_t etm_cluster_back_timeout(const etm_cluster_spec *c)
{
	return c->has_back_timeout ? c->back_timeout : c->idle_timeout;
}

/* Whether this build can run the protocol (on an inbound when inbound is
 * true, else on an outbound). Protocols that are not built yet still parse
 * and validate; the start refuses them with one line that names them. */
bool etm_protocol_available(etm_protocol p, bool inbound);

/* Checks that everything the spec uses is available in this build: every
 * protocol, transport and feature. Returns 0, or -1 with the first thing that
 * is not: "inbound <tag>: protocol <p> is not available yet", "outbound
 * <tag>: a transport other than plain tcp is not available yet", "[[balancer]]
 * is not available yet", ... */
__attribute__((warn_unused_result)) int etm_spec_check_available(const etm_spec *spec, char *msg,
                                                                 size_t msg_size);

#endif
