/* bench_route.c - times route_table_decide against a generated geosite of 10,000+ names and geoip of 10,000+ prefixes; prints one line. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "route/geodata.pb-c.h"
#include "route/route.h"

/* Usage: bench_route [decisions per kind [kind]]. Four kinds of target are
 * timed apart (domain hit, domain miss, IP hit, IP miss), each over POOL
 * distinct targets cycled, so caches see a working set, not one name; the
 * optional kind runs that one alone (for a profiler). Output: one line of
 * key=value pairs; *_ns are CPU nanoseconds per decision, the fastest of
 * ROUNDS rounds; mean_ns averages every round of every kind. */
#define SITE_SUFFIXES 9000 /* RootDomain entries */
#define SITE_FULLS 1000    /* Full entries */
#define SITE_KEYWORDS 20   /* Plain entries */
#define SITE_REGEXES 5     /* Regex entries */
#define IP4_PREFIXES 10000
#define IP6_PREFIXES 2000
#define POOL 4096
#define ROUNDS 40

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* Decisions are timed in this thread's CPU time, so other work on a shared
 * machine does not count against them; the wall clock is printed beside it. */
static double clock_ns(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static double now_ns(void) { return clock_ns(CLOCK_MONOTONIC); }

static double cpu_ns(void) { return clock_ns(CLOCK_THREAD_CPUTIME_ID); }

static void die(const char *what)
{
	fprintf(stderr, "bench_route: %s\n", what);
	exit(1);
}

static void write_file(const char *path, const ProtobufCMessage *m)
{
	size_t n = protobuf_c_message_get_packed_size(m);
	uint8_t *buf = malloc(n ? n : 1);
	if (!buf)
		die("out of memory");
	protobuf_c_message_pack(m, buf);
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(buf, 1, n, f) != n || fclose(f) != 0)
		die("cannot write the geodata file");
	free(buf);
}

static char *xstrdup(const char *s)
{
	char *p = strdup(s);
	if (!p)
		die("out of memory");
	return p;
}

/* Site i's name: spread over 97 second-level domains so suffix walks see
 * shared parents, as real lists do. */
static void site_name(char *out, size_t size, unsigned i)
{
	snprintf(out, size, "s%u-host.zone%u.example", i, i % 97);
}

static const char *const keywords[SITE_KEYWORDS] = {
	"adservice", "doubleclick", "tracker", "telemetry", "analytics", "pixel-",  "beacon",
	"metrics.",  "adsystem",    "banner",  "popunder",  "clickid",   "affil",   "sponsor",
	"promoted",  "spyware",     "malvert", "coinhive",  "cryptojack", "adnxs",
};

static const char *const regexes[SITE_REGEXES] = {
	"^ad[0-9]+\\.", "^track(ing)?-[a-z]+\\.", "\\.ads\\.[a-z]+$", "^pagead[0-9]*\\.",
	"^[a-z]+-ad-[0-9]+\\.",
};

static void make_geosite(const char *path)
{
	size_t n = SITE_SUFFIXES + SITE_FULLS + SITE_KEYWORDS + SITE_REGEXES;
	Geodata__Domain *doms = calloc(n, sizeof *doms);
	Geodata__Domain **ptrs = calloc(n, sizeof *ptrs);
	if (!doms || !ptrs)
		die("out of memory");
	char name[128];
	for (size_t i = 0; i < n; i++) {
		geodata__domain__init(&doms[i]);
		ptrs[i] = &doms[i];
		if (i < SITE_SUFFIXES + SITE_FULLS) {
			site_name(name, sizeof name, (unsigned)i);
			doms[i].type = i < SITE_SUFFIXES ? GEODATA__DOMAIN__TYPE__RootDomain
			                                 : GEODATA__DOMAIN__TYPE__Full;
			doms[i].value = xstrdup(name);
		} else if (i < SITE_SUFFIXES + SITE_FULLS + SITE_KEYWORDS) {
			doms[i].type = GEODATA__DOMAIN__TYPE__Plain;
			doms[i].value = xstrdup(keywords[i - SITE_SUFFIXES - SITE_FULLS]);
		} else {
			doms[i].type = GEODATA__DOMAIN__TYPE__Regex;
			doms[i].value =
				xstrdup(regexes[i - SITE_SUFFIXES - SITE_FULLS - SITE_KEYWORDS]);
		}
	}
	Geodata__GeoSite site = GEODATA__GEO_SITE__INIT;
	site.country_code = "BENCH";
	site.n_domain = n;
	site.domain = ptrs;
	Geodata__GeoSite *sites[] = {&site};
	Geodata__GeoSiteList list = GEODATA__GEO_SITE_LIST__INIT;
	list.n_entry = 1;
	list.entry = sites;
	write_file(path, &list.base);
	for (size_t i = 0; i < n; i++)
		free(doms[i].value);
	free(doms);
	free(ptrs);
}

/* Prefix i of the geoip list: IPv4 /16 to /24 in 11.0.0.0-100.255.255.255,
 * IPv6 /32 to /48 under 2001::/16. Recorded so hits can be drawn from them. */
static uint32_t ip4_net[IP4_PREFIXES];
static unsigned ip4_len[IP4_PREFIXES];
static uint8_t ip6_net[IP6_PREFIXES][16];

static void make_geoip(const char *path)
{
	size_t n = IP4_PREFIXES + IP6_PREFIXES;
	Geodata__CIDR *cidrs = calloc(n, sizeof *cidrs);
	Geodata__CIDR **ptrs = calloc(n, sizeof *ptrs);
	uint8_t *bytes = calloc(n, 16);
	if (!cidrs || !ptrs || !bytes)
		die("out of memory");
	for (size_t i = 0; i < n; i++) {
		geodata__cidr__init(&cidrs[i]);
		ptrs[i] = &cidrs[i];
		uint8_t *b = bytes + i * 16;
		if (i < IP4_PREFIXES) {
			unsigned len = 16 + (unsigned)(next_rand() % 9);
			uint32_t a = (uint32_t)(11u << 24) + (uint32_t)(next_rand() % (90u << 24));
			a &= ~0u << (32 - len);
			ip4_net[i] = a;
			ip4_len[i] = len;
			uint32_t be = htonl(a);
			memcpy(b, &be, 4);
			cidrs[i].ip = (ProtobufCBinaryData){4, b};
			cidrs[i].prefix = len;
		} else {
			b[0] = 0x20;
			b[1] = 0x01;
			for (int k = 2; k < 6; k++)
				b[k] = (uint8_t)next_rand();
			memcpy(ip6_net[i - IP4_PREFIXES], b, 16);
			cidrs[i].ip = (ProtobufCBinaryData){16, b};
			cidrs[i].prefix = 48;
		}
	}
	Geodata__GeoIP ip = GEODATA__GEO_IP__INIT;
	ip.country_code = "BENCH";
	ip.n_cidr = n;
	ip.cidr = ptrs;
	Geodata__GeoIP *ips[] = {&ip};
	Geodata__GeoIPList list = GEODATA__GEO_IPLIST__INIT;
	list.n_entry = 1;
	list.entry = ips;
	write_file(path, &list.base);
	free(cidrs);
	free(ptrs);
	free(bytes);
}

enum { HIT_DOMAIN, MISS_DOMAIN, HIT_IP, MISS_IP, KINDS };
static const char *const kind_names[KINDS] = {"domain_hit", "domain_miss", "ip_hit", "ip_miss"};

static addr_dest pool[KINDS][POOL];

static void make_targets(void)
{
	char name[200];
	for (unsigned i = 0; i < POOL; i++) {
		unsigned s = (unsigned)(next_rand() % (SITE_SUFFIXES + SITE_FULLS));
		char site[128];
		site_name(site, sizeof site, s);
		/* A suffix entry is hit through a subdomain, a full one as is. */
		if (s < SITE_SUFFIXES)
			snprintf(name, sizeof name, "www.cdn%u.%s", i, site);
		else
			snprintf(name, sizeof name, "%s", site);
		if (addr_dest_set_domain(&pool[HIT_DOMAIN][i], name, strlen(name), 443) < 0)
			die("bad name");
		snprintf(name, sizeof name, "api%u.service%u.other-example.org", i, i % 113);
		if (addr_dest_set_domain(&pool[MISS_DOMAIN][i], name, strlen(name), 443) < 0)
			die("bad name");

		addr_dest *d = &pool[HIT_IP][i];
		memset(d, 0, sizeof *d);
		d->port = 443;
		if (i % 4 == 3) {
			d->kind = ADDR_IPV6;
			memcpy(d->u.v6, ip6_net[next_rand() % IP6_PREFIXES], 16);
			d->u.v6[15] = (uint8_t)i;
		} else {
			unsigned k = (unsigned)(next_rand() % IP4_PREFIXES);
			uint32_t a = ip4_net[k] | (uint32_t)(next_rand() & ~(~0u << (32 - ip4_len[k])));
			uint32_t be = htonl(a);
			d->kind = ADDR_IPV4;
			memcpy(d->u.v4, &be, 4);
		}
		d = &pool[MISS_IP][i];
		memset(d, 0, sizeof *d);
		d->port = 443;
		if (i % 4 == 3) {
			d->kind = ADDR_IPV6;
			d->u.v6[0] = 0x2a;
			d->u.v6[15] = (uint8_t)i;
		} else {
			uint32_t be = htonl((uint32_t)(200u << 24) | (uint32_t)(next_rand() & 0xffffff));
			d->kind = ADDR_IPV4;
			memcpy(d->u.v4, &be, 4);
		}
	}
}

int main(int argc, char **argv)
{
	long per_kind = argc > 1 ? atol(argv[1]) : 2000000;
	const char *only = argc > 2 ? argv[2] : NULL;
	if (per_kind <= 0)
		die("usage: bench_route [decisions per kind [domain_hit|domain_miss|ip_hit|ip_miss]]");

	char dir[] = "/tmp/bench_route.XXXXXX";
	if (!mkdtemp(dir))
		die("mkdtemp failed");
	char site_path[64], ip_path[64];
	snprintf(site_path, sizeof site_path, "%s/geosite.dat", dir);
	snprintf(ip_path, sizeof ip_path, "%s/geoip.dat", dir);
	make_geosite(site_path);
	make_geoip(ip_path);
	make_targets();

	/* The rules a typical config has: a geosite code to the proxy, a geoip
	 * code direct, a small inline rule; the default is the proxy. Every
	 * miss walks all three rules. */
	const char *site_codes[] = {"bench"};
	const char *ip_codes[] = {"bench"};
	const char *suffixes[] = {"corp.internal"};
	route_port_range ports[] = {{22, 22}};
	route_rule_config rules[3];
	memset(rules, 0, sizeof rules);
	rules[0].target = "proxy";
	rules[0].geosite = (route_strs){site_codes, 1};
	rules[1].target = "direct";
	rules[1].geoip = (route_strs){ip_codes, 1};
	rules[2].target = "block";
	rules[2].domain_suffix = (route_strs){suffixes, 1};
	rules[2].port = (route_ports){ports, 1};
	route_config spec = {.default_tag = "proxy", .geoip = ip_path, .geosite = site_path,
	                     .rules = rules, .nrules = 3};

	route_table *t;
	char err[512];
	double b0 = now_ns();
	if (route_table_build(&spec, &t, err, sizeof err) < 0)
		die(err);
	double build_ms = (now_ns() - b0) / 1e6;
	unlink(site_path);
	unlink(ip_path);
	rmdir(dir);

	/* Each kind runs ROUNDS rounds and keeps its fastest: on a shared
	 * machine a round can lose its core or its caches to another process,
	 * and the minimum is the figure that measures this code. */
	static const int32_t want[KINDS] = {0, -1, 1, -1};
	double ns[KINDS];
	double total_ns = 0, wall_ns = 0;
	uint64_t sink = 0;
	long per_round = per_kind / ROUNDS > 0 ? per_kind / ROUNDS : 1;
	for (int k = 0; k < KINDS; k++) {
		if (only && strcmp(only, kind_names[k]) != 0) {
			ns[k] = 0;
			continue;
		}
		for (unsigned i = 0; i < POOL; i++) {
			route_target tg = {.dest = &pool[k][i]};
			if (route_table_decide(t, &tg).rule != want[k])
				die("a target was not routed as generated");
		}
		ns[k] = 1e18;
		for (int round = 0; round < ROUNDS; round++) {
			double w0 = now_ns(), t0 = cpu_ns();
			for (long i = 0; i < per_round; i++) {
				route_target tg = {.dest = &pool[k][(size_t)i % POOL]};
				sink += (uint64_t)route_table_decide(t, &tg).rule;
			}
			double el = cpu_ns() - t0;
			wall_ns += now_ns() - w0;
			total_ns += el;
			if (el / (double)per_round < ns[k])
				ns[k] = el / (double)per_round;
		}
	}
	long done = per_round * ROUNDS * (only ? 1 : KINDS);
	route_table_free(t);
	printf("bench_route geosite_names=%d geoip_prefixes=%d decisions=%ld mean_ns=%.1f",
	       SITE_SUFFIXES + SITE_FULLS + SITE_KEYWORDS + SITE_REGEXES,
	       IP4_PREFIXES + IP6_PREFIXES, done, total_ns / (double)done);
	for (int k = 0; k < KINDS; k++)
		printf(" %s_ns=%.1f", kind_names[k], ns[k]);
	printf(" wall_mean_ns=%.1f build_ms=%.1f sink=%llu\n", wall_ns / (double)done,
	       build_ms, (unsigned long long)(sink & 1));
	return 0;
}
