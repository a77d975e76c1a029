/* test_build_outbound.c - outbounds and balancers built from spec entries: what they copy (they outlive the spec) and the messages of a failed build, word for word. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "supervisor/build_outbound.h"

static char *sdup(const char *s) { return s ? strdup(s) : NULL; }

static etm_strlist slist(size_t n, const char *const *items)
{
	etm_strlist l = {.items = calloc(n ? n : 1, sizeof(char *)), .len = n};
	for (size_t i = 0; i < n; i++)
		l.items[i] = sdup(items[i]);
	return l;
}
#define LIST(...)                                                                     \
	slist(sizeof((const char *[]){__VA_ARGS__}) / sizeof(const char *),            \
	     (const char *[]){__VA_ARGS__})

static etm_outbound_spec *add_outbound(etm_spec *s, const char *tag, etm_protocol p,
                                       const char *server, uint16_t port)
{
	s->outbounds = realloc(s->outbounds, (s->outbounds_len + 1) * sizeof *s->outbounds);
	etm_outbound_spec *o = &s->outbounds[s->outbounds_len++];
	*o = (etm_outbound_spec){.tag = sdup(tag), .protocol = p, .server = sdup(server),
	                         .port = port, .has_port = server != NULL};
	return o;
}

static etm_balancer_spec *add_balancer(etm_spec *s, const char *tag, etm_strlist members)
{
	s->balancers = realloc(s->balancers, (s->balancers_len + 1) * sizeof *s->balancers);
	etm_balancer_spec *b = &s->balancers[s->balancers_len++];
	*b = (etm_balancer_spec){.tag = sdup(tag), .outbounds = members, .probe_interval = 30,
	                         .probe_timeout = 5, .rise = 1, .fall = 1};
	return b;
}

static etm_spec two_proxies(void)
{
	etm_spec s = {0};
	etm_outbound_spec *t = add_outbound(&s, "t", ETM_PROTO_TROJAN, "proxy.example.com", 443);
	t->settings.password = sdup("secret");
	t->stream.network = ETM_NET_WS;
	t->stream.security = ETM_SEC_TLS;
	t->stream.tls.server_name = sdup("sni.example.com");
	t->stream.tls.allow_insecure = true;
	t->stream.ws.path = sdup("/ws");
	etm_outbound_spec *k = add_outbound(&s, "s", ETM_PROTO_SOCKS, "2001:db8::1", 1080);
	k->settings.username = sdup("u");
	k->settings.password = sdup("p");
	k->address_family = ETM_AF_IPV6_ONLY;
	etm_balancer_spec *b = add_balancer(&s, "up", LIST("t", "s", "t"));
	b->strategy = sdup("round_robin");
	b->strategy_kind = ETM_STRATEGY_ROUND_ROBIN;
	b->retry = 1;
	return s;
}

/* Built, then the spec freed: everything the objects hold is their own (an
 * ASan build reads freed memory otherwise). */
static void objects_outlive_their_spec(void **state)
{
	(void)state;
	etm_spec s = two_proxies();
	char err[256] = "";
	outbound *t = build_outbound(&s.outbounds[0], err, sizeof err);
	outbound *k = build_outbound(&s.outbounds[1], err, sizeof err);
	outbound *obs[] = {t, k};
	balanced *b = build_balanced(&s, &s.balancers[0], obs, err, sizeof err);
	assert_non_null(t);
	assert_non_null(k);
	assert_non_null(b);
	etm_spec_free(&s);

	assert_string_equal(t->tag, "t");
	assert_string_equal(t->proto->name, "trojan");
	assert_non_null(t->proxy);
	assert_string_equal(k->tag, "s");
	assert_int_equal(k->af, ETM_AF_IPV6_ONLY);

	assert_string_equal(b->tag, "up");
	assert_int_equal(b->n, 3);
	assert_string_equal(b->members[0]->tag, "t");
	assert_string_equal(b->members[1]->tag, "s");
	assert_string_equal(b->members[2]->tag, "t");
	/* a member is the outbound of its tag itself (it drains with it); a
	 * tag listed twice is two members on that one outbound */
	assert_ptr_equal(b->members[0], t);
	assert_ptr_equal(b->members[2], t);
	assert_ptr_equal(b->members[1], k);
	assert_int_equal(b->probe[0].kind, ADDR_DOMAIN);
	assert_string_equal(b->probe[0].u.domain.name, "proxy.example.com");
	assert_int_equal(b->probe[0].port, 443);
	assert_int_equal(b->probe[1].kind, ADDR_IPV6); /* an IP needs no lookup */
	assert_int_equal(b->probe[1].port, 1080);
	assert_int_equal(b->probe_interval_ms, 30000);
	assert_int_equal(b->probe_timeout_ms, 5000);
	assert_int_equal(balancer_strategy(b->core), BALANCER_ROUND_ROBIN);
	assert_int_equal(balancer_retry(b->core), 1);
	assert_int_equal(balancer_size(b->core), 3);
	assert_false(b->udp_one_dest); /* trojan and socks datagrams carry their address */

	outbound_unref(t);
	outbound_unref(k);
	balanced_unref(b);
}

static void failed_builds_say_why(void **state)
{
	(void)state;
	etm_spec s = {0};
	add_outbound(&s, "direct", ETM_PROTO_FREEDOM, NULL, 0);
	etm_outbound_spec *v = add_outbound(&s, "v", ETM_PROTO_VLESS, "10.0.0.1", 443);
	v->settings.id = sdup("not-a-uuid");
	etm_outbound_spec *m = add_outbound(&s, "m", ETM_PROTO_VMESS, "10.0.0.2", 443);
	m->settings.id = sdup("11111111-2222-3333-4444-55555555555"); /* a digit short */
	etm_outbound_spec *h = add_outbound(&s, "h", ETM_PROTO_HYSTERIA2, "10.0.0.3", 443);
	h->settings.password = sdup("secret");
	add_balancer(&s, "b", LIST("direct"));
	add_balancer(&s, "c", LIST("v"));
	char err[256] = "";

	assert_null(build_outbound(&s.outbounds[1], err, sizeof err));
	assert_string_equal(err, "outbound v: settings.id is not a UUID");
	assert_null(build_outbound(&s.outbounds[2], err, sizeof err));
	assert_string_equal(err, "outbound m: settings.id is not a UUID");
	assert_null(build_outbound(&s.outbounds[3], err, sizeof err));
	assert_string_equal(err, "outbound h: protocol hysteria2 is not available yet");
	outbound *direct = build_outbound(&s.outbounds[0], err, sizeof err);
	assert_non_null(direct);
	outbound *obs[] = {direct, NULL, NULL, NULL};
	assert_null(build_balanced(&s, &s.balancers[0], obs, err, sizeof err));
	assert_string_equal(err, "balancer b: member direct has no server");
	outbound_unref(direct);
	etm_spec_free(&s);
}

static void rows_match_the_spec_catalogue(void **state)
{
	(void)state;
	assert_null(build_outbound_proto(ETM_PROTO_MIXED));
	assert_null(build_outbound_proto(ETM_PROTO_UDP_LB));
	assert_null(build_outbound_proto(ETM_PROTO_COUNT_));
	for (int p = 0; p < ETM_PROTO_COUNT_; p++) {
		const outbound_proto *op = build_outbound_proto((etm_protocol)p);
		if (op)
			assert_string_equal(op->name, etm_protocol_name((etm_protocol)p));
	}
	assert_true(build_outbound_proto(ETM_PROTO_SOCKS)->proxy_client);
	assert_false(build_outbound_proto(ETM_PROTO_FREEDOM)->proxy_client);
	/* only a link whose request names its one destination is kept per
	 * destination by a fan-out (issue 17) */
	for (int p = 0; p < ETM_PROTO_COUNT_; p++) {
		const outbound_proto *op = build_outbound_proto((etm_protocol)p);
		if (op)
			assert_int_equal(op->udp_one_dest, p == ETM_PROTO_VLESS || p == ETM_PROTO_VMESS);
	}
}

/* One VLESS member makes the balancer's UDP sub-links per destination: the
 * member a sub-link gets is known only when it opens. */
static void a_balancer_with_a_one_destination_member_says_so(void **state)
{
	(void)state;
	etm_spec s = {0};
	add_outbound(&s, "t", ETM_PROTO_TROJAN, "proxy.example.com", 443)->settings.password =
		sdup("secret");
	add_outbound(&s, "v", ETM_PROTO_VLESS, "proxy.example.com", 443)->settings.id =
		sdup("6c1b0e6a-6e3d-4c1e-9d8a-1a2b3c4d5e6f");
	add_balancer(&s, "up", LIST("t", "v"));
	char err[256] = "";
	outbound *t = build_outbound(&s.outbounds[0], err, sizeof err);
	outbound *v = build_outbound(&s.outbounds[1], err, sizeof err);
	assert_non_null(t);
	assert_non_null(v);
	outbound *obs[] = {t, v};
	balanced *b = build_balanced(&s, &s.balancers[0], obs, err, sizeof err);
	assert_non_null(b);
	assert_true(b->udp_one_dest);
	etm_spec_free(&s);
	outbound_unref(t);
	outbound_unref(v);
	balanced_unref(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(objects_outlive_their_spec),
		cmocka_unit_test(failed_builds_say_why),
		cmocka_unit_test(rows_match_the_spec_catalogue),
		cmocka_unit_test(a_balancer_with_a_one_destination_member_says_so),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
