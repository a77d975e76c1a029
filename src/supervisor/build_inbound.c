/* build_inbound.c - spec to inbound_rt: copies what an inbound keeps of its config, loads its TLS context and hands its users to the protocol's row. */
#include "supervisor/build_inbound.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/grpc.h"
#include "transport/tls.h"

/* ALPN names passed to the TLS context; more are ignored (as before the
 * move: no client offers more than a handful). */
#define BUILD_ALPN_MAX 16

enum { BUILD_REASON, BUILD_NO_MEMORY };
static const char *const msgs[] = {
	[BUILD_REASON] = "inbound %s: %s",
	[BUILD_NO_MEMORY] = "inbound %s: out of memory",
};

static inbound_protocol protocol_of(etm_protocol p)
{
	switch (p) {
	case ETM_PROTO_SOCKS:
		return INBOUND_PROTO_SOCKS;
	case ETM_PROTO_HTTP:
		return INBOUND_PROTO_HTTP;
	case ETM_PROTO_MIXED:
		return INBOUND_PROTO_MIXED;
	case ETM_PROTO_TROJAN:
		return INBOUND_PROTO_TROJAN;
	case ETM_PROTO_VLESS:
		return INBOUND_PROTO_VLESS;
	case ETM_PROTO_VMESS:
		return INBOUND_PROTO_VMESS;
	case ETM_PROTO_SHADOWSOCKS:
		return INBOUND_PROTO_SHADOWSOCKS;
	default:
		return INBOUND_PROTO_NONE;
	}
}

/* A copy of s, or NULL for NULL; *failed is set when memory ran out. */
static char *copy(const char *s, bool *failed)
{
	if (!s)
		return NULL;
	char *c = strdup(s);
	*failed |= !c;
	return c;
}

static int build_tls(inbound_rt *in, const etm_stream_spec *st, char *err, size_t err_size)
{
	const char *alpn[BUILD_ALPN_MAX + 1] = {0};
	for (size_t i = 0; i < st->tls.alpn.len && i < BUILD_ALPN_MAX; i++)
		alpn[i] = st->tls.alpn.items[i];
	/* a gRPC inbound needs HTTP/2: "h2" unless the config names its list */
	static const char *const h2[] = {"h2", NULL};
	const char *const *accept = st->tls.alpn.len            ? alpn
	                            : st->network == ETM_NET_GRPC ? h2
	                                                          : NULL;
	char why[256];
	in->tls = tls_server_ctx_new(st->tls.certificate, st->tls.key, accept, why, sizeof why);
	if (!in->tls) {
		snprintf(err, err_size, msgs[BUILD_REASON], in->tag, why);
		return -1;
	}
	return 0;
}

int build_inbound(inbound_rt *in, const etm_inbound_spec *sp, const connector *connect,
                  const conn_limits *limits, char *err, size_t err_size)
{
	const etm_stream_spec *st = &sp->stream;
	const etm_settings_spec *set = &sp->settings;
	bool failed = false;
	*in = (inbound_rt){
		.tag = copy(sp->tag, &failed),
		.protocol = protocol_of(sp->protocol),
		.sniffing = sp->sniffing,
		.connect = connect,
		.limits = *limits,
	};
	if (st->network == ETM_NET_WS)
		in->ws_path = copy(st->ws.path ? st->ws.path : "/", &failed);
	if (st->network == ETM_NET_GRPC)
		in->grpc_service = copy(st->grpc.service_name ? st->grpc.service_name
		                                              : GRPC_DEFAULT_SERVICE,
		                        &failed);
	/* The users as the row reads them, borrowed from sp for the call:
	 * inbound_rt_build copies what it keeps. */
	inbound_user *users = calloc(set->users_len ? set->users_len : 1, sizeof *users);
	size_t n_users = set->users_len;
	if (failed || !users) {
		snprintf(err, err_size, msgs[BUILD_NO_MEMORY], sp->tag);
		free(users);
		return -1;
	}
	for (size_t i = 0; i < set->users_len; i++)
		users[i] = (inbound_user){.username = set->users[i].username,
		                          .password = set->users[i].password,
		                          .id = set->users[i].id,
		                          .name = set->users[i].name ? set->users[i].name
		                                                     : set->users[i].username,
		                          .up_rate = set->users[i].up_rate,
		                          .down_rate = set->users[i].down_rate,
		                          .max_sessions = set->users[i].max_sessions};
	/* Shadowsocks: settings.method for every user; settings.password is
	 * the one user when settings.users lists none, and with a 2022 method
	 * and users the identity PSK they are behind (SIP022-2) */
	if (sp->protocol == ETM_PROTO_SHADOWSOCKS) {
		bool eih = set->method >= ETM_SS_2022_BLAKE3_AES_128_GCM;
		for (size_t i = 0; i < set->users_len; i++) {
			users[i].method = etm_ss_method_name(set->method);
			users[i].identity = eih ? set->password : NULL;
		}
		if (set->users_len == 0) {
			users[0] = (inbound_user){.password = set->password,
			                          .method = etm_ss_method_name(set->method)};
			n_users = 1;
		}
	}
	int rc = 0;
	char why[GRPC_SERVICE_MAX + 64];
	if (in->grpc_service && !grpc_service_name_ok(in->grpc_service, why, sizeof why)) {
		snprintf(err, err_size, msgs[BUILD_REASON], in->tag, why);
		rc = -1;
	}
	if (rc == 0 && (st->network == ETM_NET_TLS || st->security == ETM_SEC_TLS))
		rc = build_tls(in, st, err, err_size);
	if (rc == 0)
		rc = inbound_rt_build(in, users, n_users, set->fallback, err, err_size);
	free(users);
	return rc;
}
