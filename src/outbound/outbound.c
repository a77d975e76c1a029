/* outbound.c - the protocol table, building an outbound from its config, and connects dispatched through its row. */
#include "outbound/outbound.h"

#include <assert.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "crypto/ossl.h"

#include "outbound/freedom_udp.h"
#include "outbound/proxy.h"
#include "outbound/ss_udp.h"
#include "outbound/stream_udp.h"
#include "proto/http_client.h"
#include "proto/shadowsocks.h"
#include "proto/socks_client.h"
#include "proto/trojan.h"
#include "proto/vless.h"
#include "proto/vmess.h"
#include "runtime/dial.h"

enum {
	MSG_UNAVAILABLE,
	MSG_NO_MEMORY,
	MSG_BAD_UUID,
	MSG_BAD_PASSWORD,
	MSG_NO_DATAGRAMS,
	MSG_SS_METHOD,
	MSG_SS_KEY,
	MSG_SS_PSK,
	MSG_SS_IDENTITY_METHOD,
	MSG_SS_IDENTITY_MAX,
	MSG_DNS_GONE,
	MSG_COUNT_,
};
static const char *const msgs[MSG_COUNT_] = {
	[MSG_UNAVAILABLE] = "outbound %s: protocol %s is not available yet",
	[MSG_NO_MEMORY] = "out of memory",
	[MSG_DNS_GONE] = "dns: the service is not running on this worker",
	[MSG_BAD_UUID] = "outbound %s: settings.id is not a UUID",
	[MSG_BAD_PASSWORD] = "outbound %s: cannot hash the password",
	/* seed 000: "http carries no datagrams", and the same with the name */
	[MSG_NO_DATAGRAMS] = "%s carries no datagrams",
	[MSG_SS_METHOD] = "outbound %s: shadowsocks method %s is not available yet",
	[MSG_SS_KEY] = "outbound %s: cannot derive the key",
	[MSG_SS_PSK] = "outbound %s: shadowsocks 2022 key must be base64 of %zu bytes",
	/* SIP022-2: identity headers are AES blocks. Parenthesized: clang's
	 * -Wstring-concatenation takes a literal split in an array for a
	 * missing comma. */
	[MSG_SS_IDENTITY_METHOD] = ("outbound %s: identity PSKs (\"<iPSK>:<uPSK>\") need a "
	                            "shadowsocks 2022 AES method, not %s"),
	[MSG_SS_IDENTITY_MAX] = "outbound %s: at most %d identity PSKs before the user's PSK",
};

/* ---- freedom and blackhole ---- */

static connect_pending *freedom_stream(const outbound *o, worker *w, dns_resolver *dns,
                                       const addr_dest *dest, connect_cb cb, void *data)
{
	connect_pending *d = dial_tcp(w, dns, dest, o->af, true, o->id, cb, data);
	if (!d)
		cb(&(connect_result){.msg = msgs[MSG_NO_MEMORY]}, data);
	return d;
}

static connect_pending *freedom_datagram(const outbound *o, worker *w, dns_resolver *dns,
                                         const addr_dest *to, const dgram_handlers *h, void *ud,
                                         outbound_dgram_cb done, void *oud)
{
	(void)to;
	char err[256];
	dgram_link *l = freedom_udp_open(w, dns, o->af, h, ud, err, sizeof err);
	if (l)
		l->origin = o->id;
	done(oud, l, l ? NULL : err);
	return NULL;
}

static connect_pending *blackhole_stream(const outbound *o, worker *w, dns_resolver *dns,
                                         const addr_dest *dest, connect_cb cb, void *data)
{
	(void)o;
	(void)w;
	(void)dns;
	(void)dest;
	cb(&(connect_result){.ok = true, .blackhole = true}, data);
	return NULL;
}

static connect_pending *blackhole_datagram(const outbound *o, worker *w, dns_resolver *dns,
                                           const addr_dest *to, const dgram_handlers *h,
                                           void *ud, outbound_dgram_cb done, void *oud)
{
	(void)w;
	(void)dns;
	(void)to;
	(void)h;
	(void)ud;
	dgram_link *l = blackhole_udp_open();
	if (l)
		l->origin = o->id;
	done(oud, l, NULL);
	return NULL;
}

/* ---- socks and http: a user name and password, either optional ---- */

typedef struct userpass {
	char *username, *password; /* owned; NULL: not set */
} userpass;

static void userpass_free(void *state)
{
	userpass *u = state;
	free(u->username);
	free(u->password);
}

static int userpass_build(outbound *o, const outbound_config *cfg, char *err, size_t err_size)
{
	userpass *u = o->state;
	if ((cfg->username && !(u->username = strdup(cfg->username))) ||
	    (cfg->password && !(u->password = strdup(cfg->password)))) {
		snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
		return -1;
	}
	return 0;
}

static layer *socks_request(const outbound *o, const addr_dest *dest)
{
	const userpass *u = o->state;
	if (dest->network == ADDR_UDP)
		return socks_client_udp_new(u->username, u->password);
	return socks_client_new(dest, u->username, u->password);
}

static dgram_link *socks_dgram_over(const outbound *o, worker *w, endpoint *ep,
                                    const layer *request, const addr_dest *to,
                                    const dgram_handlers *h, void *ud, char *err,
                                    size_t err_size)
{
	(void)o;
	(void)to;
	return socks_udp_link_open(w, ep, request, h, ud, err, err_size);
}

static layer *http_request(const outbound *o, const addr_dest *dest)
{
	const userpass *u = o->state;
	return http_client_new(dest, u->username, u->password);
}

/* ---- trojan, vless and vmess: a stream that frames datagrams ---- */

/* The dgram_over of every row that frames datagrams in its stream, the
 * row's framing saying how. */
static dgram_link *framed_dgram_over(const outbound *o, worker *w, endpoint *ep,
                                     const layer *request, const addr_dest *to,
                                     const dgram_handlers *h, void *ud, char *err,
                                     size_t err_size)
{
	(void)w;
	(void)request;
	dgram_link *l = stream_udp_open(ep, (stream_udp_framing)o->proto->framing, to, h, ud);
	if (!l)
		snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
	return l;
}

typedef struct trojan_cred {
	uint8_t hash[TROJAN_HASH_LEN]; /* hex(SHA-224(password)) */
} trojan_cred;

static int trojan_build(outbound *o, const outbound_config *cfg, char *err, size_t err_size)
{
	trojan_cred *t = o->state;
	if (trojan_password_hash(cfg->password, (char *)t->hash)) {
		snprintf(err, err_size, msgs[MSG_BAD_PASSWORD], cfg->tag);
		return -1;
	}
	return 0;
}

static layer *trojan_request(const outbound *o, const addr_dest *dest)
{
	const trojan_cred *t = o->state;
	return trojan_client_new(t->hash, dest);
}

typedef struct vless_cred {
	uint8_t uuid[VLESS_UUID_LEN];
} vless_cred;

static int vless_build(outbound *o, const outbound_config *cfg, char *err, size_t err_size)
{
	vless_cred *v = o->state;
	if (vless_uuid_parse(cfg->id, v->uuid)) {
		snprintf(err, err_size, msgs[MSG_BAD_UUID], cfg->tag);
		return -1;
	}
	return 0;
}

static layer *vless_request(const outbound *o, const addr_dest *dest)
{
	const vless_cred *v = o->state;
	return vless_client_new(v->uuid, dest, dest->network == ADDR_UDP);
}

typedef struct vmess_cred {
	uint8_t cmd_key[VMESS_KEY_LEN];
	vmess_security security; /* auto resolved at build */
} vmess_cred;

static int vmess_build(outbound *o, const outbound_config *cfg, char *err, size_t err_size)
{
	vmess_cred *v = o->state;
	uint8_t uuid[VLESS_UUID_LEN];
	if (vless_uuid_parse(cfg->id, uuid)) {
		snprintf(err, err_size, msgs[MSG_BAD_UUID], cfg->tag);
		return -1;
	}
	vmess_cmd_key(uuid, v->cmd_key);
	v->security = cfg->vmess_security ? (vmess_security)cfg->vmess_security
	                                  : vmess_security_auto();
	return 0;
}

/* The shell's side of the sans-io layer: the clock and the random bytes. */
static layer *vmess_request(const outbound *o, const addr_dest *dest)
{
	const vmess_cred *v = o->state;
	vmess_client_random r;
	if (RAND_bytes((unsigned char *)&r, sizeof r) != 1)
		return NULL;
	layer *l = vmess_client_new(v->cmd_key, v->security, dest, dest->network == ADDR_UDP,
	                            (int64_t)time(NULL), &r);
	OPENSSL_cleanse(&r, sizeof r);
	return l;
}

/* ---- shadowsocks: a method and a master key ---- */

typedef struct ss_cred {
	ss_method method;
	uint8_t key[SS_KEY_MAX]; /* EVP_BytesToKey of the password; 2022: the (user's) PSK */
	ss_identity id;          /* 2022: the identity PSKs before it (SIP022-2) */
	addr_dest server;        /* where UDP packets go: the server's UDP port */
} ss_cred;

static int ss_build(outbound *o, const outbound_config *cfg, char *err, size_t err_size)
{
	ss_cred *s = o->state;
	/* the spec check refused a missing method or password already; a
	 * 2022 method parses but is not one of ours */
	if (ss_method_parse(cfg->method, &s->method)) {
		snprintf(err, err_size, msgs[MSG_SS_METHOD], cfg->tag,
		         cfg->method ? cfg->method : "?");
		return -1;
	}
	const char *pw = cfg->password ? cfg->password : "";
	int r = ss_client_keys(s->method, pw, strlen(pw), s->key, &s->id);
	if (r == SS_KEYS_ERR_METHOD)
		snprintf(err, err_size, msgs[MSG_SS_IDENTITY_METHOD], cfg->tag, cfg->method);
	else if (r == SS_KEYS_ERR_TOO_MANY)
		snprintf(err, err_size, msgs[MSG_SS_IDENTITY_MAX], cfg->tag, SS2022_IDENTITY_MAX);
	else if (r && ss_method_is_2022(s->method))
		snprintf(err, err_size, msgs[MSG_SS_PSK], cfg->tag, ss_key_len(s->method));
	else if (r)
		snprintf(err, err_size, msgs[MSG_SS_KEY], cfg->tag);
	if (r)
		return -1;
	s->server = cfg->server;
	return 0;
}

static void ss_free(void *state) { OPENSSL_cleanse(state, sizeof(ss_cred)); }

/* The shell's side of the sans-io layer: the salt's random bytes, and
 * for 2022 the clock and the padding's random length. */
static layer *ss_request(const outbound *o, const addr_dest *dest)
{
	const ss_cred *s = o->state;
	uint8_t salt[SS_KEY_MAX];
	uint16_t padding;
	if (RAND_bytes(salt, sizeof salt) != 1 ||
	    RAND_bytes((uint8_t *)&padding, sizeof padding) != 1)
		return NULL;
	return ss_client_new(s->method, s->key, &s->id, dest, salt, (int64_t)time(NULL), padding);
}

/* Shadowsocks UDP is packets of its own to the server's port, not a
 * stream: a link over direct UDP (ss_udp.h), open at once; for 2022 the
 * link is one client session (SIP022 3.2). */
static connect_pending *ss_datagram(const outbound *o, worker *w, dns_resolver *dns,
                                    const addr_dest *to, const dgram_handlers *h, void *ud,
                                    outbound_dgram_cb done, void *oud)
{
	(void)to;
	const ss_cred *s = o->state;
	char err[256];
	dgram_link *l = ss_udp_open(w, dns, o->af, s->method, s->key, &s->id, &s->server, h, ud,
	                            err, sizeof err);
	if (l)
		l->origin = o->id;
	done(oud, l, l ? NULL : err);
	return NULL;
}

/* ---- the DNS service's target (seed 002 Outbound::Dns) ---- */

/* Its state: how a worker's service is found. */
typedef struct dns_target {
	dns_svc *(*svc_of)(worker *w);
} dns_target;

static connect_pending *dns_stream(const outbound *o, worker *w, dns_resolver *dns,
                                   const addr_dest *dest, connect_cb cb, void *data)
{
	(void)dns;
	(void)dest;
	const dns_target *t = o->state;
	dns_svc *s = t->svc_of(w);
	connect_pending *p = s ? dns_svc_connect(s, cb, data) : NULL;
	if (!p)
		cb(&(connect_result){.err = PROTO_DIAL_GENERAL,
		                     .msg = s ? msgs[MSG_NO_MEMORY] : msgs[MSG_DNS_GONE]},
		   data);
	return p;
}

static connect_pending *dns_datagram(const outbound *o, worker *w, dns_resolver *dns,
                                     const addr_dest *to, const dgram_handlers *h, void *ud,
                                     outbound_dgram_cb done, void *oud)
{
	(void)dns;
	(void)to;
	const dns_target *t = o->state;
	dns_svc *s = t->svc_of(w);
	dgram_link *l = s ? dns_svc_link(s, h, ud) : NULL;
	done(oud, l, l ? NULL : msgs[MSG_DNS_GONE]);
	return NULL;
}

/* Not in the table: no spec can name it. */
static const outbound_proto dns_proto = {
	.name = "dns", .udp = true, .available = true, .state_size = sizeof(dns_target),
	.connect_stream = dns_stream, .connect_datagram = dns_datagram,
};

outbound *outbound_new_dns(dns_svc *(*svc_of)(worker *w), uint64_t version)
{
	outbound *o = calloc(1, sizeof *o);
	dns_target *t = calloc(1, sizeof *t);
	if (o)
		o->tag = strdup("");
	if (!o || !t || !o->tag) {
		if (o)
			free(o->tag);
		free(o);
		free(t);
		return NULL;
	}
	atomic_init(&o->refs, 1);
	o->id = outbound_next_id();
	o->version = version;
	o->proto = &dns_proto;
	t->svc_of = svc_of;
	o->state = t;
	return o;
}

/* ---- the table ---- */

/* Every protocol an outbound may name. hysteria2 and wireguard parse and
 * validate (the spec check reads proxy_client) but
 * this build cannot run them yet. */
static const outbound_proto protos[] = {
	{
		.name = "freedom", .udp = true, .available = true,
		.connect_stream = freedom_stream, .connect_datagram = freedom_datagram,
	},
	{
		.name = "blackhole", .udp = true, .available = true,
		.connect_stream = blackhole_stream, .connect_datagram = blackhole_datagram,
	},
	{
		.name = "socks", .proxy_client = true, .udp = true, .available = true,
		.state_size = sizeof(userpass), .build = userpass_build, .free_state = userpass_free,
		.connect_stream = proxy_connect_stream, .connect_datagram = proxy_connect_datagram,
		.request = socks_request, .dgram_over = socks_dgram_over,
	},
	{
		.name = "http", .proxy_client = true, .available = true,
		.state_size = sizeof(userpass), .build = userpass_build, .free_state = userpass_free,
		.connect_stream = proxy_connect_stream,
		.request = http_request,
	},
	{
		.name = "trojan", .proxy_client = true, .udp = true, .available = true,
		.state_size = sizeof(trojan_cred), .build = trojan_build,
		.connect_stream = proxy_connect_stream, .connect_datagram = proxy_connect_datagram,
		.request = trojan_request, .dgram_over = framed_dgram_over,
		.framing = STREAM_UDP_TROJAN,
	},
	{
		.name = "vless", .proxy_client = true, .udp = true, .udp_one_dest = true,
		.available = true,
		.state_size = sizeof(vless_cred), .build = vless_build,
		.connect_stream = proxy_connect_stream, .connect_datagram = proxy_connect_datagram,
		.request = vless_request, .dgram_over = framed_dgram_over,
		.framing = STREAM_UDP_VLESS,
	},
	{
		.name = "vmess", .proxy_client = true, .udp = true, .udp_one_dest = true,
		.available = true,
		.state_size = sizeof(vmess_cred), .build = vmess_build,
		.connect_stream = proxy_connect_stream, .connect_datagram = proxy_connect_datagram,
		.request = vmess_request, .dgram_over = framed_dgram_over,
		.framing = STREAM_UDP_VMESS,
	},
	{
		/* UDP: packets to the server's port, each naming its target */
		.name = "shadowsocks", .proxy_client = true, .udp = true, .available = true,
		.state_size = sizeof(ss_cred), .build = ss_build, .free_state = ss_free,
		.connect_stream = proxy_connect_stream, .connect_datagram = ss_datagram,
		.request = ss_request,
	},
	{.name = "hysteria2", .proxy_client = true, .udp = true},
	{.name = "wireguard", .udp = true},
};

const outbound_proto *outbound_proto_named(const char *name)
{
	/* a handful of rows, read while building and checking a spec */
	for (size_t i = 0; name && i < sizeof protos / sizeof protos[0]; i++)
		if (strcmp(protos[i].name, name) == 0)
			return &protos[i];
	return NULL;
}

/* ---- building ---- */

/* Source of outbound ids; a fan-out keys its sub-links by them. */
static atomic_uint_fast64_t next_id = 1;

uint64_t outbound_next_id(void) { return atomic_fetch_add(&next_id, 1); }

outbound *outbound_new(const outbound_config *cfg, char *err, size_t err_size)
{
	const outbound_proto *proto = outbound_proto_named(cfg->protocol);
	if (!proto || !proto->available) {
		snprintf(err, err_size, msgs[MSG_UNAVAILABLE], cfg->tag, cfg->protocol);
		return NULL;
	}
	/* an available row names what its flags promise */
	assert(proto->connect_stream && (!proto->udp || proto->connect_datagram));
	assert(!proto->proxy_client || proto->request);
	outbound *o = calloc(1, sizeof *o);
	if (o)
		o->tag = strdup(cfg->tag);
	if (!o || !o->tag) {
		free(o);
		snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
		return NULL;
	}
	atomic_init(&o->refs, 1);
	o->id = outbound_next_id();
	o->proto = proto;
	o->af = cfg->af;
	if (proto->proxy_client && !(o->proxy = proxy_transport_new(cfg, err, err_size)))
		goto fail;
	if (proto->state_size && !(o->state = calloc(1, proto->state_size))) {
		snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
		goto fail;
	}
	if (proto->build && proto->build(o, cfg, err, err_size))
		goto fail;
	return o;
fail:
	outbound_unref(o);
	return NULL;
}

/* The count is not part of the outbound's value: a const one is counted
 * too (the connects take const outbounds). */
outbound *outbound_ref(const outbound *o)
{
	outbound *m = (outbound *)o;
	atomic_fetch_add_explicit(&m->refs, 1, memory_order_relaxed);
	return m;
}

void outbound_unref(outbound *o)
{
	if (!o || atomic_fetch_sub_explicit(&o->refs, 1, memory_order_acq_rel) != 1)
		return;
	if (o->state && o->proto->free_state)
		o->proto->free_state(o->state);
	free(o->state);
	proxy_transport_del(o->proxy);
	free(o->tag);
	free(o);
}

/* ---- connecting ---- */

connect_pending *outbound_connect_stream(const outbound *o, worker *w, dns_resolver *dns,
                                         const addr_dest *dest, connect_cb cb, void *data)
{
	/* outbound_new refuses a protocol that is not available */
	return o->proto->connect_stream(o, w, dns, dest, cb, data);
}

connect_pending *outbound_connect_datagram(const outbound *o, worker *w, dns_resolver *dns,
                                           const addr_dest *to, const dgram_handlers *h,
                                           void *ud, outbound_dgram_cb done, void *oud)
{
	if (!o->proto->udp) {
		char err[256];
		snprintf(err, sizeof err, msgs[MSG_NO_DATAGRAMS], o->proto->name);
		done(oud, NULL, err);
		return NULL;
	}
	addr_dest udp_to = *to;
	udp_to.network = ADDR_UDP;
	return o->proto->connect_datagram(o, w, dns, &udp_to, h, ud, done, oud);
}

bool outbound_udp_one_dest(const outbound *o)
{
	return o->proto->udp_one_dest || (o->proxy && proxy_transport_mux(o->proxy));
}
