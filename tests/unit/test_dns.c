/* test_dns.c - the resolver on a real libuv loop against a fake DNS server on 127.0.0.1 (loopback only). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <uv.h>

#include <cmocka.h>

#include "runtime/dns.h"

/* --- the fake server ------------------------------------------------------
 * Answers A / AAAA questions from a fixed table (RFC 1035 4.1 message
 * format). Unknown names get NXDOMAIN; some names behave badly on purpose. */

enum { TYPE_A = 1, TYPE_CNAME = 5, TYPE_AAAA = 28, CLASS_IN = 1 };
enum { RCODE_OK = 0, RCODE_SERVFAIL = 2, RCODE_NXDOMAIN = 3 };

typedef struct record {
	const char *name;
	uint16_t type;
	const char *addr;
} record;

#define TTL 300

static const record RECORDS[] = {
	{"both.test", TYPE_A, "192.0.2.1"},
	{"both.test", TYPE_AAAA, "2001:db8::1"},
	{"both.test", TYPE_A, "192.0.2.2"},
	{"v4only.test", TYPE_A, "198.51.100.7"},
	{"half.test", TYPE_A, "198.51.100.8"},
};

/* Names that exist without any address (NOERROR, empty answer). */
static const char *const NODATA[] = {"nodata.test", "v4only.test"};

#define MANY_NAME "many.test" /* answers 20 A records */
#define MANY 20
#define SLOW_NAME "slow.test" /* never answered */
#define HALF_NAME "half.test" /* A answered, AAAA never */
#define FAIL_NAME "fail.test" /* SERVFAIL */
#define ALIAS_NAME "alias.test" /* CNAME both.test, TTL ALIAS_TTL, then both.test's records */
#define ALIAS_TTL 30

typedef struct fake_dns {
	uv_udp_t udp;
	int port;
	int queries; /* every question received */
	struct {
		char name[256];
		int n;
	} per_name[64];
} fake_dns;

static int fake_count(const fake_dns *f, const char *name)
{
	for (size_t i = 0; i < sizeof f->per_name / sizeof f->per_name[0]; i++)
		if (strcmp(f->per_name[i].name, name) == 0)
			return f->per_name[i].n;
	return 0;
}

static void fake_note(fake_dns *f, const char *name)
{
	f->queries++;
	for (size_t i = 0; i < sizeof f->per_name / sizeof f->per_name[0]; i++) {
		if (f->per_name[i].name[0] == '\0')
			snprintf(f->per_name[i].name, sizeof f->per_name[i].name, "%s", name);
		if (strcmp(f->per_name[i].name, name) == 0) {
			f->per_name[i].n++;
			return;
		}
	}
}

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

/* Appends one record's owner (a pointer to the name at offset owner),
 * type, class, TTL and rdata length. */
static size_t put_rr_head(uint8_t *out, size_t owner, uint16_t type, uint32_t ttl, size_t rdlen)
{
	put16(out, (uint16_t)(0xc000 | owner));
	put16(out + 2, type);
	put16(out + 4, CLASS_IN);
	put16(out + 6, (uint16_t)(ttl >> 16));
	put16(out + 8, (uint16_t)ttl);
	put16(out + 10, (uint16_t)rdlen);
	return 12;
}

static size_t put_answer(uint8_t *out, size_t owner, uint16_t type, const char *addr)
{
	size_t len = type == TYPE_A ? 4 : 16;
	size_t o = put_rr_head(out, owner, type, TTL, len);
	assert_int_equal(inet_pton(type == TYPE_A ? AF_INET : AF_INET6, addr, out + o), 1);
	return o + len;
}

/* Builds the reply to query (len bytes) in out; 0 = stay silent. */
static size_t fake_answer(fake_dns *f, const uint8_t *query, size_t len, uint8_t *out)
{
	if (len < 12 || get16(query + 4) != 1)
		return 0;
	/* The question's name, lower-cased, dotted. */
	char name[256] = "";
	size_t pos = 12, nlen = 0;
	while (pos < len && query[pos] != 0) {
		size_t l = query[pos];
		if (l > 63 || pos + 1 + l >= len || nlen + l + 1 >= sizeof name)
			return 0;
		if (nlen)
			name[nlen++] = '.';
		for (size_t i = 0; i < l; i++) {
			char ch = (char)query[pos + 1 + i];
			name[nlen++] = ch >= 'A' && ch <= 'Z' ? (char)(ch + 32) : ch;
		}
		name[nlen] = '\0';
		pos += 1 + l;
	}
	if (pos + 5 > len)
		return 0;
	size_t qend = pos + 5; /* the 0 label, QTYPE, QCLASS */
	uint16_t qtype = get16(query + pos + 1);
	fake_note(f, name);

	if (strcmp(name, SLOW_NAME) == 0 || (strcmp(name, HALF_NAME) == 0 && qtype == TYPE_AAAA))
		return 0;

	int rcode = RCODE_NXDOMAIN;
	uint16_t ancount = 0;
	size_t o = qend;
	size_t owner = 12; /* the question's name */
	memcpy(out, query, qend); /* ID, flags (rewritten below), counts, question */
	if (strcmp(name, ALIAS_NAME) == 0) {
		static const uint8_t target[] = "\x04" "both" "\x04" "test";
		o += put_rr_head(out + o, owner, TYPE_CNAME, ALIAS_TTL, sizeof target);
		owner = o;
		memcpy(out + o, target, sizeof target);
		o += sizeof target;
		ancount++;
		snprintf(name, sizeof name, "both.test");
	}
	if (strcmp(name, FAIL_NAME) == 0) {
		rcode = RCODE_SERVFAIL;
	} else if (strcmp(name, MANY_NAME) == 0) {
		rcode = RCODE_OK;
		for (int i = 0; qtype == TYPE_A && i < MANY; i++) {
			char addr[32];
			snprintf(addr, sizeof addr, "10.0.0.%d", i + 1);
			o += put_answer(out + o, owner, TYPE_A, addr);
			ancount++;
		}
	} else {
		for (size_t i = 0; i < sizeof RECORDS / sizeof RECORDS[0]; i++) {
			if (strcmp(RECORDS[i].name, name) != 0)
				continue;
			rcode = RCODE_OK;
			if (RECORDS[i].type == qtype) {
				o += put_answer(out + o, owner, qtype, RECORDS[i].addr);
				ancount++;
			}
		}
		for (size_t i = 0; i < sizeof NODATA / sizeof NODATA[0]; i++)
			if (strcmp(NODATA[i], name) == 0)
				rcode = RCODE_OK;
	}
	/* QR, the query's opcode and RD, AA, RA, the rcode. */
	uint16_t flags = (uint16_t)(0x8000 | (get16(query + 2) & 0x7900) | 0x0400 | 0x0080 | rcode);
	put16(out + 2, flags);
	put16(out + 6, ancount);
	put16(out + 8, 0);
	put16(out + 10, 0);
	return o;
}

static void fake_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	(void)h;
	(void)suggested;
	static char space[2048];
	*buf = uv_buf_init(space, sizeof space);
}

static void fake_recv(uv_udp_t *udp, ssize_t nread, const uv_buf_t *buf,
                      const struct sockaddr *from, unsigned flags)
{
	(void)flags;
	if (nread <= 0 || !from)
		return;
	fake_dns *f = udp->data;
	uint8_t reply[2048];
	size_t len = fake_answer(f, (const uint8_t *)buf->base, (size_t)nread, reply);
	if (len == 0)
		return;
	uv_buf_t out = uv_buf_init((char *)reply, (unsigned)len);
	assert_int_equal(uv_udp_try_send(udp, &out, 1, from), (int)len);
}

static void fake_start(uv_loop_t *loop, fake_dns *f)
{
	memset(f, 0, sizeof *f);
	assert_int_equal(uv_udp_init(loop, &f->udp), 0);
	f->udp.data = f;
	struct sockaddr_in sin;
	assert_int_equal(uv_ip4_addr("127.0.0.1", 0, &sin), 0);
	assert_int_equal(uv_udp_bind(&f->udp, (const struct sockaddr *)&sin, 0), 0);
	struct sockaddr_storage ss;
	int sl = sizeof ss;
	assert_int_equal(uv_udp_getsockname(&f->udp, (struct sockaddr *)&ss, &sl), 0);
	f->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
	assert_int_equal(uv_udp_recv_start(&f->udp, fake_alloc, fake_recv), 0);
}

/* --- the fixture ----------------------------------------------------------- */

#define TIMEOUT_MS 400 /* the resolver's lookup timeout in these tests */
#define WAIT_MS 3000   /* a test gives up waiting after this */

typedef struct fixture {
	uv_loop_t loop;
	uv_timer_t guard;
	bool guard_fired;
	fake_dns fake;
	dns_cache *cache;
	dns_resolver *r;
	char server[64];
} fixture;

typedef struct result {
	int calls;
	int status;
	size_t n;
	struct sockaddr_storage addrs[DNS_MAX_ADDRS];
	uint64_t at; /* uv_now when called */
	uv_loop_t *loop;
} result;

static void on_result(int status, const struct sockaddr_storage *addrs, size_t n, void *data)
{
	result *res = data;
	res->calls++;
	res->status = status;
	res->n = n;
	if (n)
		memcpy(res->addrs, addrs, n * sizeof addrs[0]);
	if (res->loop)
		res->at = uv_now(res->loop);
}

static dns_resolver *resolver_for(fixture *fx, size_t n_servers, uint64_t timeout_ms)
{
	const char *servers[2] = {fx->server, fx->server};
	char err[256] = "";
	dns_resolver *r = dns_resolver_new(&fx->loop, fx->cache, servers, n_servers, timeout_ms, err,
	                                   sizeof err);
	if (!r)
		fail_msg("%s", err);
	return r;
}

static int setup(void **state)
{
	fixture *fx = calloc(1, sizeof *fx);
	assert_non_null(fx);
	assert_int_equal(uv_loop_init(&fx->loop), 0);
	assert_int_equal(uv_timer_init(&fx->loop, &fx->guard), 0);
	fx->guard.data = fx;
	fake_start(&fx->loop, &fx->fake);
	snprintf(fx->server, sizeof fx->server, "127.0.0.1:%d", fx->fake.port);
	fx->cache = dns_cache_new(DNS_CACHE_MAX);
	assert_non_null(fx->cache);
	fx->r = resolver_for(fx, 1, TIMEOUT_MS);
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	fixture *fx = *state;
	dns_resolver_del(fx->r);
	uv_close((uv_handle_t *)&fx->fake.udp, NULL);
	uv_close((uv_handle_t *)&fx->guard, NULL);
	assert_int_equal(uv_run(&fx->loop, UV_RUN_DEFAULT), 0);
	assert_int_equal(uv_loop_close(&fx->loop), 0);
	dns_cache_del(fx->cache);
	free(fx);
	return 0;
}

static void on_guard(uv_timer_t *t)
{
	fixture *fx = t->data;
	fx->guard_fired = true;
}

/* Runs the loop until *calls reaches want, or for ms when want < 0 (to show
 * that nothing more arrives). Fails after WAIT_MS. */
static void run_until(fixture *fx, const int *calls, int want, uint64_t ms)
{
	fx->guard_fired = false;
	assert_int_equal(uv_timer_start(&fx->guard, on_guard, want < 0 ? ms : WAIT_MS, 0), 0);
	while (!fx->guard_fired && (want < 0 || *calls < want))
		uv_run(&fx->loop, UV_RUN_ONCE);
	assert_int_equal(uv_timer_stop(&fx->guard), 0);
	if (want >= 0 && *calls < want)
		fail_msg("gave up waiting for a callback");
}

static void wait_for(fixture *fx, result *res)
{
	run_until(fx, &res->calls, 1, 0);
}

static char *text(const struct sockaddr_storage *ss, char *buf, size_t size)
{
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
		assert_int_equal(in->sin_port, 0);
		assert_non_null(inet_ntop(AF_INET, &in->sin_addr, buf, (socklen_t)size));
	} else {
		assert_int_equal(ss->ss_family, AF_INET6);
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
		assert_int_equal(in6->sin6_port, 0);
		assert_non_null(inet_ntop(AF_INET6, &in6->sin6_addr, buf, (socklen_t)size));
	}
	return buf;
}

static bool has(const result *res, const char *addr)
{
	char buf[INET6_ADDRSTRLEN];
	for (size_t i = 0; i < res->n; i++)
		if (strcmp(text(&res->addrs[i], buf, sizeof buf), addr) == 0)
			return true;
	return false;
}

/* --- tests ------------------------------------------------------------------ */

static void resolves_both_families(void **state)
{
	fixture *fx = *state;
	result res = {0};
	assert_non_null(dns_resolve(fx->r, "both.test", on_result, &res));
	wait_for(fx, &res);
	assert_int_equal(res.calls, 1);
	assert_int_equal(res.status, DNS_OK);
	assert_int_equal(res.n, 3);
	assert_true(has(&res, "192.0.2.1"));
	assert_true(has(&res, "192.0.2.2"));
	assert_true(has(&res, "2001:db8::1"));
	/* One A and one AAAA question. */
	assert_int_equal(fake_count(&fx->fake, "both.test"), 2);
	/* Nothing more arrives later. */
	run_until(fx, &res.calls, -1, 50);
	assert_int_equal(res.calls, 1);
}

static void one_family_is_enough(void **state)
{
	fixture *fx = *state;
	result res = {0};
	assert_non_null(dns_resolve(fx->r, "v4only.test", on_result, &res));
	wait_for(fx, &res);
	assert_int_equal(res.status, DNS_OK);
	assert_int_equal(res.n, 1);
	assert_true(has(&res, "198.51.100.7"));
}

static void cache_hit_does_not_reach_the_server(void **state)
{
	fixture *fx = *state;
	result first = {0}, again = {0}, other_case = {0};
	assert_non_null(dns_resolve(fx->r, "both.test", on_result, &first));
	wait_for(fx, &first);
	assert_int_equal(first.status, DNS_OK);
	int asked = fx->fake.queries;
	assert_int_equal(asked, 2);

	assert_non_null(dns_resolve(fx->r, "both.test", on_result, &again));
	assert_int_equal(again.calls, 0); /* answered from the loop, not inside the call */
	wait_for(fx, &again);
	assert_int_equal(again.status, DNS_OK);
	assert_int_equal(again.n, first.n);
	assert_memory_equal(again.addrs, first.addrs, first.n * sizeof first.addrs[0]);

	/* Another spelling of the same name, and another resolver (another
	 * worker's) sharing the cache: still no query. */
	dns_resolver *r2 = resolver_for(fx, 1, TIMEOUT_MS);
	assert_non_null(dns_resolve(r2, "BOTH.Test.", on_result, &other_case));
	wait_for(fx, &other_case);
	assert_int_equal(other_case.status, DNS_OK);
	assert_int_equal(other_case.n, 3);
	assert_int_equal(fx->fake.queries, asked);
	dns_resolver_del(r2);
}

static void answer_ttls_reach_the_cache(void **state)
{
	fixture *fx = *state;
	result plain = {.loop = &fx->loop}, alias = {.loop = &fx->loop};
	assert_non_null(dns_resolve(fx->r, "both.test", on_result, &plain));
	assert_non_null(dns_resolve(fx->r, ALIAS_NAME, on_result, &alias));
	wait_for(fx, &plain);
	wait_for(fx, &alias);
	assert_int_equal(alias.status, DNS_OK);
	assert_int_equal(alias.n, 3);
	assert_true(has(&alias, "2001:db8::1"));

	struct sockaddr_storage out[DNS_MAX_ADDRS];
	size_t n;
	/* The records' TTL; through a CNAME, the smaller CNAME TTL. */
	assert_int_equal(dns_cache_lookup(fx->cache, "both.test", plain.at + TTL * 1000 - 1000, out,
	                                  DNS_MAX_ADDRS, &n),
	                 DNS_CACHE_HIT);
	assert_int_equal(dns_cache_lookup(fx->cache, "both.test", plain.at + TTL * 1000 + 1000, out,
	                                  DNS_MAX_ADDRS, &n),
	                 DNS_CACHE_MISS);
	assert_int_equal(dns_cache_lookup(fx->cache, ALIAS_NAME, alias.at + ALIAS_TTL * 1000 - 1000,
	                                  out, DNS_MAX_ADDRS, &n),
	                 DNS_CACHE_HIT);
	assert_int_equal(n, 3);
	assert_int_equal(dns_cache_lookup(fx->cache, ALIAS_NAME, alias.at + ALIAS_TTL * 1000 + 1000,
	                                  out, DNS_MAX_ADDRS, &n),
	                 DNS_CACHE_MISS);
}

static void concurrent_queries_share_one_lookup(void **state)
{
	fixture *fx = *state;
	result a = {0}, b = {0}, c = {0};
	assert_non_null(dns_resolve(fx->r, "both.test", on_result, &a));
	assert_non_null(dns_resolve(fx->r, "Both.Test", on_result, &b));
	assert_non_null(dns_resolve(fx->r, "both.test", on_result, &c));
	run_until(fx, &c.calls, 1, 0);
	wait_for(fx, &a);
	wait_for(fx, &b);
	assert_int_equal(a.status, DNS_OK);
	assert_int_equal(b.status, DNS_OK);
	assert_int_equal(c.status, DNS_OK);
	assert_int_equal(b.n, 3);
	assert_int_equal(fake_count(&fx->fake, "both.test"), 2);
}

static void nxdomain_is_no_such_host_and_cached_briefly(void **state)
{
	fixture *fx = *state;
	result res = {0}, again = {0}, nodata = {0};
	assert_non_null(dns_resolve(fx->r, "unknown.test", on_result, &res));
	wait_for(fx, &res);
	assert_int_equal(res.status, DNS_ENOTFOUND);
	assert_int_equal(res.n, 0);
	assert_string_equal(dns_strerror(res.status), "dns: no such host");
	int asked = fake_count(&fx->fake, "unknown.test");
	assert_true(asked >= 1);

	/* Negative answers are remembered for DNS_NEGATIVE_TTL_S. */
	assert_non_null(dns_resolve(fx->r, "unknown.test", on_result, &again));
	wait_for(fx, &again);
	assert_int_equal(again.status, DNS_ENOTFOUND);
	assert_int_equal(fake_count(&fx->fake, "unknown.test"), asked);

	/* A name with neither A nor AAAA is "no such host" too. */
	assert_non_null(dns_resolve(fx->r, "nodata.test", on_result, &nodata));
	wait_for(fx, &nodata);
	assert_int_equal(nodata.status, DNS_ENOTFOUND);
}

static void server_failure_is_reported_and_not_cached(void **state)
{
	fixture *fx = *state;
	result res = {0}, again = {0};
	assert_non_null(dns_resolve(fx->r, FAIL_NAME, on_result, &res));
	wait_for(fx, &res);
	assert_int_equal(res.status, DNS_ESERVFAIL);
	assert_string_equal(dns_strerror(res.status), "dns: server failure");
	int asked = fake_count(&fx->fake, FAIL_NAME);
	assert_non_null(dns_resolve(fx->r, FAIL_NAME, on_result, &again));
	wait_for(fx, &again);
	assert_int_equal(again.status, DNS_ESERVFAIL);
	assert_true(fake_count(&fx->fake, FAIL_NAME) > asked);
}

static void silent_server_times_out(void **state)
{
	fixture *fx = *state;
	/* Two servers (the same fake twice): c-ares alone would retry for 1.5 x
	 * the timeout, so the resolver's own deadline is what answers. */
	dns_resolver *r2 = resolver_for(fx, 2, TIMEOUT_MS);
	result res = {.loop = &fx->loop}, single = {.loop = &fx->loop};
	uv_update_time(&fx->loop);
	uint64_t start = uv_now(&fx->loop);
	assert_non_null(dns_resolve(r2, SLOW_NAME, on_result, &res));
	assert_non_null(dns_resolve(fx->r, SLOW_NAME, on_result, &single));
	wait_for(fx, &res);
	wait_for(fx, &single);
	assert_int_equal(res.status, DNS_ETIMEOUT);
	assert_string_equal(dns_strerror(res.status), "dns: lookup timed out");
	assert_true(res.at - start >= TIMEOUT_MS);
	assert_true(res.at - start < TIMEOUT_MS + 1000);
	/* One server: c-ares gives up on its own (at 3/4 of the timeout), which
	 * is reported the same way. */
	assert_int_equal(single.status, DNS_ETIMEOUT);
	assert_true(fake_count(&fx->fake, SLOW_NAME) >= 2);
	/* Deleting with lookups still in c-ares frees them (ASan checks). */
	dns_resolver_del(r2);
	run_until(fx, &res.calls, -1, 20);
	assert_int_equal(res.calls, 1);
}

static void half_answered_lookup_returns_what_came(void **state)
{
	fixture *fx = *state;
	/* A answered, AAAA dropped: c-ares's retries end inside the timeout
	 * (and are processed before our deadlines if the loop was late), so
	 * the A record comes back rather than a timeout. */
	result res = {0};
	assert_non_null(dns_resolve(fx->r, HALF_NAME, on_result, &res));
	wait_for(fx, &res);
	assert_int_equal(res.status, DNS_OK);
	assert_int_equal(res.n, 1);
	assert_true(has(&res, "198.51.100.8"));
	assert_int_equal(fake_count(&fx->fake, HALF_NAME), 1 + 2); /* A once, AAAA twice */
}

static void cancelled_queries_never_call_back(void **state)
{
	fixture *fx = *state;
	result slow = {0}, lit = {0}, cached = {0}, shared = {0}, kept = {0};
	dns_query *q = dns_resolve(fx->r, SLOW_NAME, on_result, &slow);
	assert_non_null(q);
	dns_query_cancel(q);
	q = dns_resolve(fx->r, "192.0.2.1", on_result, &lit);
	assert_non_null(q);
	dns_query_cancel(q);
	/* Of two queries sharing a lookup, cancelling one leaves the other. */
	q = dns_resolve(fx->r, "both.test", on_result, &shared);
	assert_non_null(q);
	assert_non_null(dns_resolve(fx->r, "both.test", on_result, &kept));
	dns_query_cancel(q);
	wait_for(fx, &kept);
	assert_int_equal(kept.status, DNS_OK);
	/* A cache hit cancelled before the loop runs. */
	q = dns_resolve(fx->r, "both.test", on_result, &cached);
	assert_non_null(q);
	dns_query_cancel(q);
	dns_query_cancel(NULL);
	run_until(fx, &slow.calls, -1, TIMEOUT_MS + 200);
	assert_int_equal(slow.calls, 0);
	assert_int_equal(lit.calls, 0);
	assert_int_equal(shared.calls, 0);
	assert_int_equal(cached.calls, 0);
	assert_int_equal(kept.calls, 1);
}

static void delete_cancels_pending_queries_once(void **state)
{
	fixture *fx = *state;
	result slow = {0}, lit = {0};
	assert_non_null(dns_resolve(fx->r, SLOW_NAME, on_result, &slow));
	assert_non_null(dns_resolve(fx->r, "2001:db8::9", on_result, &lit));
	run_until(fx, &slow.calls, -1, 50); /* the lookup is in c-ares now */
	assert_int_equal(slow.calls, 0);
	assert_int_equal(lit.calls, 1);

	result fresh = {0};
	assert_non_null(dns_resolve(fx->r, "192.0.2.3", on_result, &fresh));
	dns_resolver_del(fx->r);
	fx->r = NULL;
	assert_int_equal(slow.calls, 1);
	assert_int_equal(slow.status, DNS_ECANCELLED);
	assert_string_equal(dns_strerror(slow.status), "dns: cancelled");
	assert_int_equal(fresh.calls, 1); /* even one that was already answered */
	assert_int_equal(fresh.status, DNS_ECANCELLED);
	run_until(fx, &slow.calls, -1, TIMEOUT_MS + 100);
	assert_int_equal(slow.calls, 1);
	assert_int_equal(fresh.calls, 1);
}

static void ip_literals_answer_without_a_query(void **state)
{
	fixture *fx = *state;
	result v4 = {0}, v6 = {0};
	assert_non_null(dns_resolve(fx->r, "192.0.2.55", on_result, &v4));
	assert_non_null(dns_resolve(fx->r, "2001:db8::5", on_result, &v6));
	assert_int_equal(v4.calls, 0); /* asynchronous: never inside dns_resolve */
	assert_int_equal(v6.calls, 0);
	wait_for(fx, &v4);
	wait_for(fx, &v6);
	assert_int_equal(v4.status, DNS_OK);
	assert_int_equal(v4.n, 1);
	assert_true(has(&v4, "192.0.2.55"));
	assert_int_equal(v6.status, DNS_OK);
	assert_int_equal(v6.n, 1);
	assert_true(has(&v6, "2001:db8::5"));
	assert_int_equal(fx->fake.queries, 0);
}

static void name_bounds(void **state)
{
	fixture *fx = *state;
	/* 63 + 1 + 63 + 1 + 63 + 1 + 61 = 253 characters: the longest name. */
	char name[DNS_NAME_MAX + 3];
	memset(name, 'a', sizeof name);
	name[63] = name[127] = name[191] = '.';
	name[DNS_NAME_MAX] = '\0';
	result longest = {0}, dotted = {0}, too_long = {0}, empty = {0}, dot = {0};
	assert_non_null(dns_resolve(fx->r, name, on_result, &longest));
	name[DNS_NAME_MAX] = '.';
	name[DNS_NAME_MAX + 1] = '\0'; /* 253 plus the root dot: the same name */
	assert_non_null(dns_resolve(fx->r, name, on_result, &dotted));
	name[DNS_NAME_MAX] = 'a';      /* 254 characters */
	assert_non_null(dns_resolve(fx->r, name, on_result, &too_long));
	assert_non_null(dns_resolve(fx->r, "", on_result, &empty));
	assert_non_null(dns_resolve(fx->r, ".", on_result, &dot));
	assert_int_equal(too_long.calls, 0);
	wait_for(fx, &too_long);
	wait_for(fx, &empty);
	wait_for(fx, &dot);
	assert_int_equal(too_long.status, DNS_EBADNAME);
	assert_string_equal(dns_strerror(too_long.status), "dns: bad host name");
	assert_int_equal(empty.status, DNS_EBADNAME);
	assert_int_equal(dot.status, DNS_EBADNAME);
	wait_for(fx, &longest);
	wait_for(fx, &dotted);
	assert_int_equal(longest.status, DNS_ENOTFOUND); /* asked, and unknown */
	assert_int_equal(dotted.status, DNS_ENOTFOUND);
}

static void at_most_max_addrs(void **state)
{
	fixture *fx = *state;
	result res = {0};
	assert_non_null(dns_resolve(fx->r, MANY_NAME, on_result, &res));
	wait_for(fx, &res);
	assert_int_equal(res.status, DNS_OK);
	assert_int_equal(res.n, DNS_MAX_ADDRS);
	assert_true(has(&res, "10.0.0.1"));
}

/* Inside a callback: cancelling itself is a no-op, resolving again works. */
static result chained;
static dns_query *self;

static void resolve_again(int status, const struct sockaddr_storage *addrs, size_t n, void *data)
{
	fixture *fx = data;
	(void)addrs;
	(void)n;
	assert_int_equal(status, DNS_OK);
	dns_query_cancel(self);
	assert_non_null(dns_resolve(fx->r, "v4only.test", on_result, &chained));
}

static void callbacks_may_resolve_and_cancel_themselves(void **state)
{
	fixture *fx = *state;
	memset(&chained, 0, sizeof chained);
	self = dns_resolve(fx->r, "both.test", resolve_again, fx);
	assert_non_null(self);
	wait_for(fx, &chained);
	assert_int_equal(chained.status, DNS_OK);
	assert_true(has(&chained, "198.51.100.7"));
}

static void system_servers_when_none_configured(void **state)
{
	fixture *fx = *state;
	char err[128] = "untouched";
	dns_resolver *r = dns_resolver_new(&fx->loop, NULL, NULL, 0, 0, err, sizeof err);
	assert_non_null(r);
	assert_string_equal(err, "untouched");
	result res = {0};
	assert_non_null(dns_resolve(r, "::1", on_result, &res));
	wait_for(fx, &res);
	assert_int_equal(res.status, DNS_OK);
	dns_resolver_del(r);
}

static void bad_server_strings(void **state)
{
	fixture *fx = *state;
	static const struct {
		const char *server;
		const char *err;
	} bad[] = {
		{"127.0.0.1:99999", "dns: bad server address \"127.0.0.1:99999\""},
		{"127.0.0.1:0", "dns: bad server address \"127.0.0.1:0\""},
		{"127.0.0.1:", "dns: bad server address \"127.0.0.1:\""},
		{"127.0.0.1:+53", "dns: bad server address \"127.0.0.1:+53\""},
		{"127.0.0.1:53x", "dns: bad server address \"127.0.0.1:53x\""},
		{"1.2.3", "dns: bad server address \"1.2.3\""},
		{"dns.example", "dns: bad server address \"dns.example\""},
		{"[::1", "dns: bad server address \"[::1\""},
		{"[::1]53", "dns: bad server address \"[::1]53\""},
		{"[1.2.3.4]:53", "dns: bad server address \"[1.2.3.4]:53\""},
		{"::1]:53", "dns: bad server address \"::1]:53\""},
		{"", "dns: bad server address \"\""},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		const char *servers[2] = {"127.0.0.1", bad[i].server};
		char err[128] = "";
		dns_resolver *r = dns_resolver_new(&fx->loop, NULL, servers, 2, 0, err, sizeof err);
		assert_null(r);
		assert_string_equal(err, bad[i].err);
	}
	const char *one_bad = "127.0.0.1:99999";
	assert_null(dns_resolver_new(&fx->loop, NULL, &one_bad, 1, 0, NULL, 0)); /* err optional */
	static const char *const good[] = {"127.0.0.1", "127.0.0.1:53", "[::1]:5353",
	                                   "::1", "[::1]", "2001:db8::53"};
	for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
		char err[128] = "";
		dns_resolver *r = dns_resolver_new(&fx->loop, NULL, &good[i], 1, 0, err, sizeof err);
		if (!r)
			fail_msg("%s: %s", good[i], err);
		dns_resolver_del(r);
	}
	/* More servers than DNS_MAX_SERVERS. */
	const char *many[DNS_MAX_SERVERS + 1];
	for (size_t i = 0; i < DNS_MAX_SERVERS; i++)
		many[i] = "127.0.0.1";
	many[DNS_MAX_SERVERS] = "127.0.0.2";
	char err[128] = "";
	assert_null(dns_resolver_new(&fx->loop, NULL, many, DNS_MAX_SERVERS + 1, 0, err, sizeof err));
	assert_string_equal(err, "dns: too many servers: at most 16");
}

static void messages_word_for_word(void **state)
{
	(void)state;
	static const struct {
		int status;
		const char *text;
	} table[] = {
		{DNS_OK, "dns: ok"},
		{DNS_ENOTFOUND, "dns: no such host"},
		{DNS_ETIMEOUT, "dns: lookup timed out"},
		{DNS_ESERVFAIL, "dns: server failure"},
		{DNS_ECANCELLED, "dns: cancelled"},
		{DNS_EBADNAME, "dns: bad host name"},
		{DNS_EBADSERVER, "dns: bad server address"},
		{DNS_ENOMEM, "dns: out of memory"},
		{DNS_EBUSY, "dns: too many lookups in flight"},
		{DNS_ESETUP, "dns: resolver setup failed"},
		{DNS_ETOOMANYSERVERS, "dns: too many servers"},
		{-100, "dns: unknown error"},
		{1, "dns: unknown error"},
	};
	for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
		assert_string_equal(dns_strerror(table[i].status), table[i].text);
}

#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(resolves_both_families),
		T(one_family_is_enough),
		T(cache_hit_does_not_reach_the_server),
		T(answer_ttls_reach_the_cache),
		T(concurrent_queries_share_one_lookup),
		T(nxdomain_is_no_such_host_and_cached_briefly),
		T(server_failure_is_reported_and_not_cached),
		T(silent_server_times_out),
		T(half_answered_lookup_returns_what_came),
		T(cancelled_queries_never_call_back),
		T(delete_cancels_pending_queries_once),
		T(ip_literals_answer_without_a_query),
		T(name_bounds),
		T(at_most_max_addrs),
		T(callbacks_may_resolve_and_cancel_themselves),
		T(system_servers_when_none_configured),
		T(bad_server_strings),
		cmocka_unit_test(messages_word_for_word),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
