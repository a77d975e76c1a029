/* build_outbound.c - outbound and balancer configs filled from their spec entries, and the objects built from them. */
#include "supervisor/build_outbound.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>

#include "proto/vmess_crypto.h"
#include "transport/grpc.h"
#include "transport/tls.h"

enum { MSG_BAD_SETTING, MSG_NO_MEMORY, MSG_NOT_A_HOST, MSG_NO_SERVER, MSG_COUNT_ };
/* The config's address_family as dial.h's. */
static dial_family dial_family_of(etm_address_family af)
{
	switch (af) {
	case ETM_AF_AUTO:
		return DIAL_FAMILY_AUTO;
	case ETM_AF_PREFER_IPV4:
		return DIAL_FAMILY_PREFER_IPV4;
	case ETM_AF_PREFER_IPV6:
		return DIAL_FAMILY_PREFER_IPV6;
	case ETM_AF_IPV4_ONLY:
		return DIAL_FAMILY_IPV4_ONLY;
	case ETM_AF_IPV6_ONLY:
		return DIAL_FAMILY_IPV6_ONLY;
	}
	return DIAL_FAMILY_AUTO;
}

static const char *const msgs[MSG_COUNT_] = {
	[MSG_BAD_SETTING] = "outbound %s: %s",
	[MSG_NO_MEMORY] = "out of memory",
	[MSG_NOT_A_HOST] = "server is not a host name",
	[MSG_NO_SERVER] = "balancer %s: member %s has no server",
};

/* ALPN protocols an outbound offers at most; the list handed to the TLS
 * context ends with NULL after them. */
#define BUILD_ALPN_MAX 16

const outbound_proto *build_outbound_proto(etm_protocol p)
{
	if ((unsigned)p >= ETM_PROTO_COUNT_)
		return NULL;
	const outbound_proto *op = outbound_proto_named(etm_protocol_name(p));
	/* one name per protocol: the spec's catalogue is the public one */
	assert(!op || strcmp(op->name, etm_protocol_name(p)) == 0);
	return op;
}

/* ---- outbounds ---- */

static int set_server(outbound_config *c, const etm_outbound_spec *spec, char *err,
                      size_t err_size)
{
	unsigned char ip[16];
	if (inet_pton(AF_INET, spec->server, ip) == 1) {
		c->server = (addr_dest){.kind = ADDR_IPV4, .port = spec->port};
		memcpy(c->server.u.v4, ip, 4);
	} else if (inet_pton(AF_INET6, spec->server, ip) == 1) {
		c->server = (addr_dest){.kind = ADDR_IPV6, .port = spec->port};
		memcpy(c->server.u.v6, ip, 16);
	} else if (addr_dest_set_domain(&c->server, spec->server, strlen(spec->server),
	                                spec->port)) {
		snprintf(err, err_size, msgs[MSG_BAD_SETTING], spec->tag, msgs[MSG_NOT_A_HOST]);
		return -1;
	}
	return 0;
}

static int set_tls(outbound_config *c, const etm_outbound_spec *spec, char *err, size_t err_size)
{
	const etm_tls_spec *ts = &spec->stream.tls;
	/* the ALPN list must end with NULL: copy it */
	const char *alpn[BUILD_ALPN_MAX + 1] = {0};
	for (size_t i = 0; i < ts->alpn.len && i < BUILD_ALPN_MAX; i++)
		alpn[i] = ts->alpn.items[i];
	/* gRPC needs HTTP/2: "h2" unless the config names its own list */
	static const char *const h2[] = {"h2", NULL};
	const char *const *offer = ts->alpn.len                     ? alpn
	                           : spec->stream.network == ETM_NET_GRPC ? h2
	                                                                  : NULL;
	tls_client_config cfg = {
		.server_name = ts->server_name,
		.alpn = offer,
		.allow_insecure = ts->allow_insecure,
		.ca_file = ts->ca,
	};
	char why[256];
	c->tls = tls_client_ctx_new(&cfg, why, sizeof why);
	if (!c->tls) {
		snprintf(err, err_size, msgs[MSG_BAD_SETTING], spec->tag, why);
		return -1;
	}
	c->tls_name = ts->server_name ? ts->server_name : spec->server;
	return 0;
}

static void set_ws(outbound_config *c, const etm_outbound_spec *spec)
{
	const etm_stream_spec *st = &spec->stream;
	c->ws = true;
	c->ws_path = st->ws.path ? st->ws.path : "/";
	c->ws_host = st->ws.host          ? st->ws.host
	             : st->tls.server_name ? st->tls.server_name
	                                   : spec->server;
}

static void set_grpc(outbound_config *c, const etm_outbound_spec *spec)
{
	const etm_stream_spec *st = &spec->stream;
	c->grpc = true;
	c->grpc_service = st->grpc.service_name ? st->grpc.service_name : GRPC_DEFAULT_SERVICE;
	c->grpc_host = st->tls.server_name ? st->tls.server_name : spec->server;
}

/* The config's VMess security as the wire value outbound_config takes. */
static uint8_t vmess_wire_security(etm_vmess_security s)
{
	switch (s) {
	case ETM_VMESS_AES_128_GCM:
		return VMESS_SEC_AES_128_GCM;
	case ETM_VMESS_CHACHA20_POLY1305:
		return VMESS_SEC_CHACHA20_POLY1305;
	case ETM_VMESS_NONE:
		return VMESS_SEC_NONE;
	case ETM_VMESS_ZERO:
		return VMESS_SEC_ZERO;
	case ETM_VMESS_AUTO:
		break;
	}
	return 0;
}

/* Fills c from spec; c borrows spec's strings and holds a TLS context
 * reference that config_release drops. 0, or -1 with the reason in err. */
static int config_fill(outbound_config *c, const etm_outbound_spec *spec, char *err,
                       size_t err_size)
{
	const etm_settings_spec *set = &spec->settings;
	*c = (outbound_config){
		.tag = spec->tag,
		.protocol = etm_protocol_name(spec->protocol),
		.af = dial_family_of(spec->address_family),
		.username = set->username,
		.password = set->password,
		.id = set->id,
		.vmess_security = vmess_wire_security(set->security),
		.method = set->method ? etm_ss_method_name(set->method) : NULL,
	};
	/* only a runnable proxy client has a server and transport: any other
	 * protocol fails in outbound_new with its own reason */
	const outbound_proto *op = build_outbound_proto(spec->protocol);
	if (!op || !op->available || !op->proxy_client)
		return 0;
	const etm_stream_spec *st = &spec->stream;
	if (set_server(c, spec, err, err_size))
		return -1;
	if ((st->network == ETM_NET_TLS || st->security == ETM_SEC_TLS) &&
	    set_tls(c, spec, err, err_size))
		return -1;
	if (st->network == ETM_NET_WS)
		set_ws(c, spec);
	if (st->network == ETM_NET_GRPC)
		set_grpc(c, spec);
	if (spec->mux.enabled)
		c->mux_concurrency = (unsigned)spec->mux.concurrency;
	return 0;
}

static void config_release(outbound_config *c)
{
	tls_client_ctx_unref(c->tls);
	c->tls = NULL;
}

outbound *build_outbound(const etm_outbound_spec *spec, char *err, size_t err_size)
{
	outbound_config c;
	outbound *o = NULL;
	if (config_fill(&c, spec, err, err_size) == 0)
		o = outbound_new(&c, err, err_size);
	config_release(&c);
	return o;
}

/* ---- balancers ---- */

/* Where member o's probe connects: its server and port (TCP); an IP needs
 * no lookup. 0, or -1 when it has none. */
static int probe_dest(addr_dest *probe, const etm_outbound_spec *o)
{
	if (!o || !o->server || addr_dest_set_domain(probe, o->server, strlen(o->server), o->port))
		return -1;
	addr_dest ip = {0};
	char text[ADDR_TEXT_MAX];
	snprintf(text, sizeof text, "%s%s%s:%u", strchr(o->server, ':') ? "[" : "", o->server,
	         strchr(o->server, ':') ? "]" : "", o->port);
	if (addr_dest_parse(&ip, text) == 0)
		*probe = ip;
	return 0;
}

balanced *build_balanced(const etm_spec *spec, const etm_balancer_spec *bs,
                         outbound *const *obs, char *err, size_t err_size)
{
	size_t n = bs->outbounds.len;
	outbound **members = calloc(n ? n : 1, sizeof *members);
	addr_dest *probe = calloc(n ? n : 1, sizeof *probe);
	balanced *b = NULL;
	size_t built = 0;
	if (!members || !probe) {
		snprintf(err, err_size, "%s", msgs[MSG_NO_MEMORY]);
		goto out;
	}
	for (; built < n; built++) {
		const char *tag = bs->outbounds.items[built];
		size_t k = 0;
		while (k < spec->outbounds_len && strcmp(spec->outbounds[k].tag, tag) != 0)
			k++;
		/* etm_spec_check made sure of both */
		if (k == spec->outbounds_len || probe_dest(&probe[built], &spec->outbounds[k])) {
			snprintf(err, err_size, msgs[MSG_NO_SERVER], bs->tag, tag);
			goto out;
		}
		/* the member is the outbound of that tag itself: a flow it carries
		 * drains with that outbound's version (seed 002) */
		members[built] = outbound_ref(obs[k]);
	}
	balanced_config cfg = {
		.tag = bs->tag,
		.core = {.strategy = bs->strategy_kind == ETM_STRATEGY_ROUND_ROBIN
		                         ? BALANCER_ROUND_ROBIN
		                         : BALANCER_FAILOVER,
		         .rise = (uint32_t)bs->rise,
		         .fall = (uint32_t)bs->fall,
		         .retry = (uint32_t)bs->retry},
		.probe_interval_ms = bs->probe_interval * 1000,
		.probe_timeout_ms = bs->probe_timeout * 1000,
		.n = n,
		.members = members,
		.probe = probe,
	};
	built = 0; /* balanced_new takes the members over, even on failure */
	b = balanced_new(&cfg, err, err_size);
out:
	for (size_t m = 0; m < built; m++)
		outbound_unref(members[m]);
	free(members);
	free(probe);
	return b;
}
