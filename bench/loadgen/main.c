/* main.c - loadgen's command line: which mode, against what, how much; one result line per run. */
#include <arpa/inet.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loadgen.h"

static const char usage[] =
	"usage: loadgen MODE [options]\n"
	"  MODE: thru | crr | rr | udp | dns | lb | serve\n"
	"  --target IP:PORT   the sink (thru), echo (crr, rr), UDP echo (udp) or UDP\n"
	"                     load balancer (lb: always direct, no SOCKS)\n"
	"  --socks IP:PORT    go through this SOCKS5 server (UDP ASSOCIATE for udp);\n"
	"                     without it, straight to the target\n"
	"  --label NAME       echoed as label=NAME on the result line\n"
	"  --conns N          thru: parallel connections (4)\n"
	"  --bytes N[K|M|G]   thru: bytes over all connections (1G)\n"
	"  --workers N        crr: connections in flight (16)\n"
	"  --secs S           crr, rr: duration (5)\n"
	"  --msg N            crr: request and answer bytes (64)\n"
	"  --count N          udp, dns, lb: datagrams (dns: queries) (20000)\n"
	"  --size N           udp, lb: payload bytes (64)\n"
	"  --window N         udp, dns, lb: datagrams in flight, over all flows (16)\n"
	"  --loss-ms MS       udp, dns, lb: unanswered this long = lost (200)\n"
	"  --dns-name NAME    dns: the name every query asks for (A) (bench.test)\n"
	"  --dns-random       dns: each query asks for a name of its own,\n"
	"                     <8 hex digits>.NAME (a cache never answers it)\n"
	"  --flows N          lb: client sockets (flows) at once (16)\n"
	"  --per-flow N       lb: datagrams per flow, then a new socket; 0 = never (1)\n"
	"  --reuse            lb: keep a finished flow's socket for the next flow\n"
	"  --src-ips N        lb: sources 127.0.0.1 .. 127.0.0.N, round robin (1)\n"
	"  --gro              lb: client sockets take coalesced trains (UDP_GRO);\n"
	"                     serve: so do the UDP echoes, and they answer a train\n"
	"                     with one GSO send (UDP_SEGMENT), as a QUIC stack does\n"
	"  --gso              lb: a client socket's burst goes as one GSO send\n"
	"  --gap-ms MS        lb: pause after each finished flow (for counting, not speed)\n"
	"  --new-addrs        lb: one socket sends every flow (one datagram) from a new\n"
	"                     source address, 127.1.0.0 + the flow's number (IP_PKTINFO)\n"
	"  --udp-echoes N     serve: UDP echo sockets, the first on --udp-port (1)\n"
	"  --timeout S        give up after S seconds (60)\n"
	"  --sink-port P --echo-port P --udp-port P   serve: ports (0 = any; printed)\n";

static struct lg_opts opts;

static void vline(const struct lg_opts *o, const char *fmt, va_list ap)
{
	printf("loadgen mode=%s via=%s label=%s ", o->mode, o->via_socks ? "socks5" : "direct",
	       o->label);
	vprintf(fmt, ap);
	putchar('\n');
	fflush(stdout);
}

void lg_print(const struct lg_opts *o, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vline(o, fmt, ap);
	va_end(ap);
}

int lg_fail(const struct lg_opts *o, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (n < 0)
		msg[0] = '\0';
	for (char *p = msg; *p; p++)
		if (*p == '"')
			*p = '\'';
	lg_print(o, "error=\"%s\"", msg);
	return 1;
}

__attribute__((noreturn)) static void die(const char *what, const char *arg)
{
	fprintf(stderr, "loadgen: %s: %s\n%s", what, arg, usage);
	exit(2);
}

static void parse_addr(const char *s, struct sockaddr_in *a)
{
	char host[64];
	const char *colon = strrchr(s, ':');
	if (!colon || (size_t)(colon - s) >= sizeof host)
		die("not IP:PORT", s);
	memcpy(host, s, (size_t)(colon - s));
	host[colon - s] = '\0';
	char *end;
	long port = strtol(colon + 1, &end, 10);
	*a = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	if (*end || port <= 0 || port > 65535 || inet_pton(AF_INET, host, &a->sin_addr) != 1)
		die("not IPv4:PORT", s);
}

static long long parse_num(const char *s, long long lo, long long hi)
{
	char *end;
	long long v = strtoll(s, &end, 10);
	switch (*end) {
	case 'K': case 'k': v <<= 10; end++; break;
	case 'M': case 'm': v <<= 20; end++; break;
	case 'G': case 'g': v <<= 30; end++; break;
	default: break;
	}
	if (*end || v < lo || v > hi)
		die("number out of range", s);
	return v;
}

static double parse_secs(const char *s)
{
	char *end;
	double v = strtod(s, &end);
	if (*end || !(v > 0 && v < 3600))
		die("not a duration in seconds", s);
	return v;
}

int main(int argc, char **argv)
{
	static const struct option longs[] = {
		{"target", required_argument, 0, 't'}, {"socks", required_argument, 0, 's'},
		{"label", required_argument, 0, 'l'},  {"conns", required_argument, 0, 'c'},
		{"bytes", required_argument, 0, 'b'},  {"workers", required_argument, 0, 'w'},
		{"secs", required_argument, 0, 'd'},   {"msg", required_argument, 0, 'm'},
		{"count", required_argument, 0, 'k'},  {"size", required_argument, 0, 'z'},
		{"window", required_argument, 0, 'W'}, {"loss-ms", required_argument, 0, 'L'},
		{"timeout", required_argument, 0, 'T'}, {"sink-port", required_argument, 0, 1},
		{"echo-port", required_argument, 0, 2}, {"udp-port", required_argument, 0, 3},
		{"flows", required_argument, 0, 4},    {"per-flow", required_argument, 0, 5},
		{"src-ips", required_argument, 0, 6},  {"udp-echoes", required_argument, 0, 7},
		{"reuse", no_argument, 0, 8},          {"gro", no_argument, 0, 9},
		{"gso", no_argument, 0, 10},           {"gap-ms", required_argument, 0, 11},
		{"new-addrs", no_argument, 0, 12},    {"dns-name", required_argument, 0, 13},
		{"dns-random", no_argument, 0, 14},
		{"help", no_argument, 0, 'h'},          {0, 0, 0, 0},
	};
	if (argc < 2)
		die("no mode", "thru, crr, rr, udp, dns, lb or serve");
	opts = (struct lg_opts){.mode = argv[1], .label = "-", .conns = 4, .bytes = 1ull << 30,
	                        .workers = 16, .secs = 5, .msg = 64, .count = 20000, .size = 64,
	                        .window = 16, .loss_ms = 200, .timeout = 60,
	                        .flows = 16, .per_flow = 1, .src_ips = 1, .udp_echoes = 1,
	                        .dns_name = "bench.test"};
	bool have_target = false;
	optind = 2;
	int c;
	while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
		switch (c) {
		case 't': parse_addr(optarg, &opts.target); have_target = true; break;
		case 's': parse_addr(optarg, &opts.socks); opts.via_socks = true; break;
		case 'l': opts.label = optarg; break;
		case 'c': opts.conns = (int)parse_num(optarg, 1, 1024); break;
		case 'b': opts.bytes = (uint64_t)parse_num(optarg, 0, 1ll << 40); break;
		case 'w': opts.workers = (int)parse_num(optarg, 1, 4096); break;
		case 'd': opts.secs = parse_secs(optarg); break;
		case 'm': opts.msg = (int)parse_num(optarg, 1, 4096); break;
		case 'k': opts.count = (int)parse_num(optarg, 1, 100000000); break;
		case 'z': opts.size = (int)parse_num(optarg, 8, 1748); break;
		case 'W': opts.window = (int)parse_num(optarg, 1, 65536); break;
		case 'L': opts.loss_ms = parse_secs(optarg); break;
		case 'T': opts.timeout = parse_secs(optarg); break;
		case 1: opts.sink_port = (uint16_t)parse_num(optarg, 0, 65535); break;
		case 2: opts.echo_port = (uint16_t)parse_num(optarg, 0, 65535); break;
		case 3: opts.udp_port = (uint16_t)parse_num(optarg, 0, 65535); break;
		case 4: opts.flows = (int)parse_num(optarg, 1, 65536); break;
		case 5: opts.per_flow = (int)parse_num(optarg, 0, 100000000); break;
		case 6: opts.src_ips = (int)parse_num(optarg, 1, 254); break;
		case 8: opts.reuse = true; break;
		case 9: opts.gro = true; break;
		case 10: opts.gso = true; break;
		case 12: opts.new_addrs = true; break;
		case 13: opts.dns_name = optarg; break;
		case 14: opts.dns_random = true; break;
		case 11: opts.gap_ms = (int)parse_num(optarg, 0, 10000); break;
		case 7: opts.udp_echoes = (int)parse_num(optarg, 1, 16); break;
		case 'h': fputs(usage, stdout); return 0;
		default: die("bad option", argv[optind - 1]);
		}
	}
	if (optind != argc)
		die("unexpected argument", argv[optind]);
	static const struct {
		const char *name;
		int (*run)(const struct lg_opts *);
	} modes[] = {
		{"thru", lg_thru_run}, {"crr", lg_crr_run}, {"rr", lg_rr_run},
		{"udp", lg_udp_run},   {"dns", lg_udp_run},   {"lb", lg_lb_run},
		{"serve", lg_serve_run},
	};
	for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
		if (strcmp(opts.mode, modes[i].name) != 0)
			continue;
		if (modes[i].run != lg_serve_run && !have_target)
			die("missing option", "--target");
		return modes[i].run(&opts);
	}
	die("unknown mode", opts.mode);
}
