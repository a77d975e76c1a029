#!/usr/bin/python3
"""run.py - `make bench`: etemenanki-app and real peers, one at a time on
loopback, under the same four workloads of bench/loadgen; writes
bench/results/<date>.md and refreshes the generated part of
docs/performance.md.

Standard library only. Every subject is started from the config files in
bench/peers/, whose @NAME@ placeholders are filled in here (ports the kernel
just handed out, the run's throwaway certificate, the temp dir). Only
processes this script started are signalled, by pid; the temp dir is removed
at the end, whatever happens.

The UDP load-balancer group (subjects of kind "udplb": etemenanki's
udp_lb and nginx's stream UDP proxy over the load tool's three UDP echoes)
runs its own workloads instead (`loadgen lb`, straight to the balancer):
short flows (one datagram and its answer per flow: each from a new client
address, from client sockets kept for their next flow, and from a new
client socket each), and
long flows (a few client sockets streaming within a window), and the same with
each burst sent as one GSO train. It runs them twice: with the balancer,
the load tool and its echoes sharing every core (shared), and with the
balancer on one core and the load tool on the rest (split: each balancer's
own capacity, no longer charged for the tool's CPU; nginx's
worker_processes auto and etemenanki's workers = 0 both follow the CPU
affinity, so each then runs one worker).

The DNS group (subjects of kind "dns") measures the DNS service (issue 20)
with `loadgen dns`: A queries, a window of them in flight, through a SOCKS5
UDP association to 192.0.2.1:53, which the service answers in process;
warm (one name, answered by the cache) and cold (a name of its own per
query, each forwarded to the upstream). The upstream is dnsmasq answering
every name under bench.test from its own config (--address, no cache, TTL
300), started once for the group. dnsmasq's cache is the reference for the
warm rate, asked directly and through etemenanki's SOCKS5 relay (no DNS
service: the same client path as ours, to a cache that is not ours).

Environment (all optional):
  BENCH_ONLY=key,key   run only these subjects (see SUBJECTS; a group name
                       such as udp-lb selects the whole group; "direct" is
                       run whenever a proxy subject is); the results go to
                       <date>-partial.md (<date>-udplb.md when only the UDP
                       LB group runs) and docs/performance.md is left alone
  BENCH_BYTES=1G BENCH_CONNS=4 BENCH_WORKERS=16 BENCH_SECS=5 BENCH_RR_SECS=5
  BENCH_COUNT=20000 BENCH_SIZE=64 BENCH_WINDOW=16   workload sizes
  BENCH_LB_SHORT=30000 BENCH_LB_FLOWS=64 BENCH_LB_LONG=200000
  BENCH_LB_LONG_FLOWS=4 BENCH_LB_WINDOW=64 BENCH_LB_SRC_IPS=8   UDP LB sizes
  BENCH_LB_RUNS=5      runs per UDP LB scenario and subject (the median counts)
  BENCH_DNS_COUNT=100000 BENCH_DNS_WINDOW=32   DNS group: queries per run, in flight
  BENCH_DNS_RUNS=3     runs per DNS subject (the median counts)
  BENCH_LB_SPLIT=0     skip the split placement (it needs two cores)
  BENCH_LB_SYSCALLS=0  skip bench/udplb_syscalls.sh in the UDP LB group
  BENCH_LB_REUSE=0     etemenanki's short-flow cluster without
                       reuse_upstream_sockets (the product default)
  BENCH_LB_GRO=0       endpoints that move datagrams one by one: the echoes
                       and the long flows' client sockets without UDP_GRO
                       (and the echoes without GSO answers)
  BUILD=build          the meson build folder
"""
import datetime
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = (ROOT / os.environ.get("BUILD", "build")).resolve()
LOADGEN = BUILD / "bench" / "loadgen"
APP = BUILD / "src" / "etemenanki-app"
BENCH_ROUTE = BUILD / "src" / "bench_route"
PEERS = ROOT / "bench" / "peers"
RESULTS = ROOT / "bench" / "results"
DOC = ROOT / "docs" / "performance.md"
BEGIN = "<!-- BEGIN GENERATED (make bench) -->"
END = "<!-- END GENERATED (make bench) -->"

SIZES = {
    "bytes": os.environ.get("BENCH_BYTES", "1G"),
    "conns": os.environ.get("BENCH_CONNS", "4"),
    "workers": os.environ.get("BENCH_WORKERS", "16"),
    "secs": os.environ.get("BENCH_SECS", "5"),
    "rr_secs": os.environ.get("BENCH_RR_SECS", "5"),
    "count": os.environ.get("BENCH_COUNT", "20000"),
    "size": os.environ.get("BENCH_SIZE", "64"),
    "window": os.environ.get("BENCH_WINDOW", "16"),
    "lb_short": os.environ.get("BENCH_LB_SHORT", "30000"),
    "lb_flows": os.environ.get("BENCH_LB_FLOWS", "64"),
    "lb_long": os.environ.get("BENCH_LB_LONG", "200000"),
    "lb_long_flows": os.environ.get("BENCH_LB_LONG_FLOWS", "4"),
    "lb_window": os.environ.get("BENCH_LB_WINDOW", "64"),
    "lb_src_ips": os.environ.get("BENCH_LB_SRC_IPS", "8"),
    "lb_gro": os.environ.get("BENCH_LB_GRO", "1"),
    "lb_reuse": os.environ.get("BENCH_LB_REUSE", "1"),
    "dns_count": os.environ.get("BENCH_DNS_COUNT", "100000"),
    "dns_window": os.environ.get("BENCH_DNS_WINDOW", "32"),
}
LB_RUNS = int(os.environ.get("BENCH_LB_RUNS", "5"))  # runs per UDP LB scenario; the median counts
DNS_RUNS = int(os.environ.get("BENCH_DNS_RUNS", "3"))  # runs per DNS subject; the median counts
# The DNS group's names: every one under DNS_ZONE is answered by the upstream.
DNS_ZONE = "bench.test"
DNS_NAME = "www." + DNS_ZONE
LB_ECHOES = 3      # UDP echoes the load tool serves: the balancers' backends
SYSCALLS = ROOT / "bench" / "udplb_syscalls.sh"
SETTLE = 1.0       # seconds after start before the idle RSS is read
PAUSE = 0.3        # seconds between workloads
SAMPLE = 0.2       # seconds between RSS samples under crr
UDP_RUNS = 3       # udp runs per subject; the median counts
QUIET = 0.25       # cores busy with other work below which a subject may start
QUIET_WAIT = 5.0   # seconds a subject waits at most for that (the run stays under 10 min)
START_TIMEOUT = 10.0
CLK_TCK = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------- subjects

class Proc:
    """One process of a subject: argv and config with @NAME@ placeholders;
    listens names the TCP ports it must accept on before it counts as
    started; udp_listens the UDP ports that must answer a datagram (through
    to the load tool's UDP echo); ready is a text its log must show as well;
    env holds variables set for it on top of the driver's environment."""

    def __init__(self, exe, argv, config=None, listens=("SOCKS",), ready=None, udp_listens=(),
                 env=None):
        self.exe, self.argv, self.config = exe, argv, config
        self.listens, self.ready, self.udp_listens = listens, ready, udp_listens
        self.env = env or {}


def app(config, listens=("SOCKS",)):
    return Proc(str(APP), ["@EXE@", "-c", "@CFG@"], config, listens)


def v2ray(config, listens=("SOCKS",), env=None):
    return Proc("v2ray", ["@EXE@", "-config", "@CFG@"], config, listens, ready=" started",
                env=env)


# v2ray 4.34's VMess server refuses the legacy MD5 header only when told to:
# the AEAD header alone, as etemenanki's inbound serves it.
AEAD_FORCED = {"V2RAY_VMESS_AEAD_FORCED": "true"}


def trojan(config, listens):
    return Proc("trojan", ["@EXE@", "-c", "@CFG@"], config, listens)


def ss(exe, config, listens):
    return Proc(exe, ["@EXE@", "-c", "@CFG@"], config, listens)


class Subject:
    """via: socks (the load tool speaks SOCKS5 to @SOCKS@), relay (nginx:
    straight to its relay ports) or direct (no process). group: which
    subjects compare with each other; ours marks etemenanki-app. kind:
    proxy (the four workloads), udplb (the UDP LB scenarios, straight to
    @LB_SHORT@ and @LB_LONG@, or to the first echo when via is direct) or
    dns (`loadgen dns` to dns_target, a placeholder's port on 127.0.0.1 or
    an address:port, asking one name or, with dns_names "random", a name
    of its own per query)."""

    def __init__(self, key, title, group, procs, via="socks", udp=True, ours=False,
                 kind="proxy", dns_target=None, dns_names="one"):
        self.key, self.title, self.group, self.procs = key, title, group, procs
        self.via, self.udp, self.ours, self.kind = via, udp, ours, kind
        self.dns_target, self.dns_names = dns_target, dns_names


SUBJECTS = [
    Subject("direct", "direct loopback (no proxy)", "baseline", [], via="direct"),
    # SOCKS5 -> freedom, and nginx relaying without SOCKS
    Subject("etm-socks", "etemenanki socks→freedom", "socks",
            [app("etemenanki/socks-freedom.toml")], ours=True),
    Subject("nginx", "nginx stream relay (no SOCKS)", "socks",
            [Proc("nginx", ["@EXE@", "-p", "@TMP@/", "-c", "@CFG@", "-e", "stderr"],
                  "nginx/nginx.conf", ("RELAY_SINK", "RELAY_ECHO"))], via="relay"),
    Subject("v2ray-socks", "v2ray socks→freedom", "socks", [v2ray("v2ray/socks-freedom.json")]),
    Subject("dante", "dante (danted)", "socks",
            [Proc("danted", ["@EXE@", "-f", "@CFG@", "-p", "@TMP@/danted.pid"],
                  "dante/danted.conf")]),
    Subject("microsocks", "microsocks", "socks",
            [Proc("microsocks", ["@EXE@", "-i", "127.0.0.1", "-p", "@SOCKS@"])], udp=False),
    # client -> server chains, plain TCP: after the headers a chain is
    # plain bytes on both sides
    Subject("etm-vless", "etemenanki vless (no TLS)", "vless",
            [app("etemenanki/vless-server.toml", ("SERVER",)),
             app("etemenanki/vless-client.toml")], ours=True),
    Subject("v2ray-vless", "v2ray vless (no TLS)", "vless",
            [v2ray("v2ray/vless-server.json", ("SERVER",)),
             v2ray("v2ray/vless-client.json")]),
    Subject("etm-trojan", "etemenanki trojan (no TLS)", "trojan",
            [app("etemenanki/trojan-server.toml", ("SERVER",)),
             app("etemenanki/trojan-client.toml")], ours=True),
    Subject("v2ray-trojan", "v2ray trojan (no TLS)", "trojan",
            [v2ray("v2ray/trojan-server.json", ("SERVER",)),
             v2ray("v2ray/trojan-client.json")]),
    # client -> server chains over TLS
    Subject("etm-trojan-tls", "etemenanki trojan+tls", "trojan+tls",
            [app("etemenanki/trojan-tls-server.toml", ("SERVER",)),
             app("etemenanki/trojan-tls-client.toml")], ours=True),
    Subject("v2ray-trojan-tls", "v2ray trojan+tls", "trojan+tls",
            [v2ray("v2ray/trojan-tls-server.json", ("SERVER",)),
             v2ray("v2ray/trojan-tls-client.json")]),
    Subject("trojan-gfw", "trojan-gfw trojan+tls", "trojan+tls",
            [trojan("trojan-gfw/server.json", ("SERVER",)),
             trojan("trojan-gfw/client.json", ("SOCKS",))]),
    Subject("etm-vless-tls", "etemenanki vless+tls", "vless+tls",
            [app("etemenanki/vless-tls-server.toml", ("SERVER",)),
             app("etemenanki/vless-tls-client.toml")], ours=True),
    Subject("v2ray-vless-tls", "v2ray vless+tls", "vless+tls",
            [v2ray("v2ray/vless-tls-server.json", ("SERVER",)),
             v2ray("v2ray/vless-tls-client.json")]),
    # v2ray 4.34 has no gRPC transport: its nearest chain is vless+tls above
    Subject("etm-vless-grpc-tls", "etemenanki vless+grpc+tls", "vless+grpc+tls",
            [app("etemenanki/vless-grpc-tls-server.toml", ("SERVER",)),
             app("etemenanki/vless-grpc-tls-client.toml")], ours=True),
    Subject("etm-vless-ws-tls", "etemenanki vless+ws+tls", "vless+ws+tls",
            [app("etemenanki/vless-ws-tls-server.toml", ("SERVER",)),
             app("etemenanki/vless-ws-tls-client.toml")], ours=True),
    Subject("v2ray-vless-ws-tls", "v2ray vless+ws+tls", "vless+ws+tls",
            [v2ray("v2ray/vless-ws-tls-server.json", ("SERVER",)),
             v2ray("v2ray/vless-ws-tls-client.json")]),
    Subject("etm-vmess", "etemenanki vmess (aes-128-gcm, tcp)", "vmess",
            [app("etemenanki/vmess-server.toml", ("SERVER",)),
             app("etemenanki/vmess-client.toml")], ours=True),
    Subject("v2ray-vmess", "v2ray vmess (aes-128-gcm, tcp)", "vmess",
            [v2ray("v2ray/vmess-server.json", ("SERVER",), AEAD_FORCED),
             v2ray("v2ray/vmess-client.json")]),
    Subject("etm-vmess-tls", "etemenanki vmess+tls (aes-128-gcm)", "vmess+tls",
            [app("etemenanki/vmess-tls-server.toml", ("SERVER",)),
             app("etemenanki/vmess-tls-client.toml")], ours=True),
    Subject("v2ray-vmess-tls", "v2ray vmess+tls (aes-128-gcm)", "vmess+tls",
            [v2ray("v2ray/vmess-tls-server.json", ("SERVER",), AEAD_FORCED),
             v2ray("v2ray/vmess-tls-client.json")]),
    # v2ray 4.34 has no gRPC transport: its nearest chain is vmess+tls above
    Subject("etm-vmess-grpc-tls", "etemenanki vmess+grpc+tls (aes-128-gcm)", "vmess+grpc+tls",
            [app("etemenanki/vmess-grpc-tls-server.toml", ("SERVER",)),
             app("etemenanki/vmess-grpc-tls-client.toml")], ours=True),
    Subject("etm-ss-aes", "etemenanki shadowsocks aes-128-gcm", "shadowsocks",
            [app("etemenanki/ss-aes-128-gcm-server.toml", ("SERVER",)),
             app("etemenanki/ss-aes-128-gcm-client.toml")], ours=True),
    Subject("etm-ss-chacha", "etemenanki shadowsocks chacha20-ietf-poly1305", "shadowsocks",
            [app("etemenanki/ss-chacha20-server.toml", ("SERVER",)),
             app("etemenanki/ss-chacha20-client.toml")], ours=True),
    # no packaged peer speaks Shadowsocks 2022: its row stands beside the
    # AEAD-2017 ones of the same group
    Subject("etm-ss-2022", "etemenanki shadowsocks 2022-blake3-aes-128-gcm", "shadowsocks",
            [app("etemenanki/ss-2022-aes-128-gcm-server.toml", ("SERVER",)),
             app("etemenanki/ss-2022-aes-128-gcm-client.toml")], ours=True),
    Subject("v2ray-ss", "v2ray shadowsocks aes-128-gcm", "shadowsocks",
            [v2ray("v2ray/shadowsocks-server.json", ("SERVER",)),
             v2ray("v2ray/shadowsocks-client.json")]),
    Subject("ss-libev-aes", "shadowsocks-libev aes-128-gcm", "shadowsocks",
            [ss("ss-server", "shadowsocks-libev/aes-128-gcm-server.json", ("SERVER",)),
             ss("ss-local", "shadowsocks-libev/aes-128-gcm-local.json", ("SOCKS",))]),
    Subject("ss-libev-chacha", "shadowsocks-libev chacha20-ietf-poly1305", "shadowsocks",
            [ss("ss-server", "shadowsocks-libev/chacha20-server.json", ("SERVER",)),
             ss("ss-local", "shadowsocks-libev/chacha20-local.json", ("SOCKS",))]),
    Subject("direct-end", "direct loopback, again at the end", "baseline", [], via="direct"),
    # UDP load balancers over the load tool's three UDP echoes
    Subject("lb-direct", "direct to one UDP echo (no balancer)", "udp-lb", [], via="direct",
            kind="udplb"),
    Subject("etm-udplb", "etemenanki udp_lb (responses = 1"
            + (", reuse_upstream_sockets" if SIZES["lb_reuse"] != "0" else "")
            + " / unlimited)", "udp-lb",
            [Proc(str(APP), ["@EXE@", "-c", "@CFG@"], "etemenanki/udplb.toml", (),
                  udp_listens=("LB_SHORT", "LB_LONG"))], via="lb", ours=True, kind="udplb"),
    Subject("nginx-udplb", "nginx stream udp (proxy_responses 1 / session)", "udp-lb",
            [Proc("nginx", ["@EXE@", "-p", "@TMP@/", "-c", "@CFG@", "-e", "stderr"],
                  "nginx/udplb.conf", (), udp_listens=("LB_SHORT", "LB_LONG"))],
            via="lb", kind="udplb"),
]
# The DNS group. Its upstream, started once for the group (not a subject):
# dnsmasq answering every name under DNS_ZONE itself, uncached, TTL 300.
DNS_UPSTREAM = Proc("dnsmasq", ["@EXE@", "--no-daemon", "--port=@DNS_UPSTREAM@",
                                "--listen-address=127.0.0.1", "--bind-interfaces", "--no-resolv",
                                "--no-hosts", f"--address=/{DNS_ZONE}/198.18.0.1",
                                "--local-ttl=300", "--cache-size=0"], None, ("DNS_UPSTREAM",))
# dnsmasq as a caching forwarder to that upstream: the reference cache.
DNSMASQ_CACHE = Proc("dnsmasq", ["@EXE@", "--no-daemon", "--port=@DNS@",
                                 "--listen-address=127.0.0.1", "--bind-interfaces", "--no-resolv",
                                 "--no-hosts", "--server=127.0.0.1#@DNS_UPSTREAM@",
                                 "--cache-size=4096"], None, ("DNS",))
SUBJECTS += [
    Subject("dns-upstream", "the upstream alone (dnsmasq --address, direct, new names)", "dns",
            [], via="direct", kind="dns", dns_target="DNS_UPSTREAM", dns_names="random"),
    Subject("etm-dns-warm", "etemenanki DNS service, warm (one name, socks UDP)", "dns",
            [app("etemenanki/dns-service.toml")], ours=True, kind="dns",
            dns_target="192.0.2.1:53"),
    Subject("etm-dns-warm-1w", "etemenanki DNS service, warm, one worker", "dns",
            [app("etemenanki/dns-service-1w.toml")], ours=True, kind="dns",
            dns_target="192.0.2.1:53"),
    Subject("etm-dns-cold", "etemenanki DNS service, cold (new names, socks UDP)", "dns",
            [app("etemenanki/dns-service.toml")], ours=True, kind="dns",
            dns_target="192.0.2.1:53", dns_names="random"),
    Subject("dnsmasq-warm", "dnsmasq cache, warm (one name, direct)", "dns", [DNSMASQ_CACHE],
            via="direct", kind="dns", dns_target="DNS"),
    Subject("dnsmasq-warm-socks", "dnsmasq cache, warm, through etemenanki socks→freedom",
            "dns", [DNSMASQ_CACHE, app("etemenanki/socks-freedom.toml")], kind="dns",
            dns_target="DNS"),
]
# The UDP LB scenarios: (name, the balancer port, loadgen lb arguments).
LB_SCENARIOS = [
    ("short", "LB_SHORT", ["--count", SIZES["lb_short"], "--per-flow", "1",
                           "--window", SIZES["lb_flows"], "--new-addrs"]),
    ("short-reuse", "LB_SHORT", ["--count", SIZES["lb_short"], "--flows", SIZES["lb_flows"],
                                 "--per-flow", "1", "--window", SIZES["lb_flows"], "--reuse"]),
    ("short-sockets", "LB_SHORT", ["--count", SIZES["lb_short"], "--flows", SIZES["lb_flows"],
                                   "--per-flow", "1", "--window", SIZES["lb_flows"]]),
    ("long", "LB_LONG", ["--count", SIZES["lb_long"], "--flows", SIZES["lb_long_flows"],
                         "--per-flow", "0", "--window", SIZES["lb_window"]]
     + (["--gro"] if SIZES["lb_gro"] != "0" else [])),
    ("long-gso", "LB_LONG", ["--count", SIZES["lb_long"], "--flows", SIZES["lb_long_flows"],
                             "--per-flow", "0", "--window", SIZES["lb_window"], "--gso"]
     + (["--gro"] if SIZES["lb_gro"] != "0" else [])),
]


# ---------------------------------------------------------------- helpers

def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def free_port(kind=socket.SOCK_STREAM):
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fill(text, values):
    for k, v in values.items():
        text = text.replace(f"@{k}@", str(v))
    return text


def proc_stat(pid):
    """(ppid, ticks of user+system CPU incl. reaped children, start time) or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    # rest[0] is field 3 (state): ppid 4, utime 14, stime 15, cutime 16, cstime 17, starttime 22
    return int(rest[1]), sum(int(x) for x in rest[11:15]), int(rest[19])


def tree(roots):
    """The pids of roots and all their descendants now alive."""
    children = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = proc_stat(d)
            if st:
                children.setdefault(st[0], []).append(int(d))
    out, todo = [], list(roots)
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def rss_kib(pids):
    total = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def want(head):
    """An HTTP answer's whole length once its head is in, from its
    Content-Length."""
    top, _, _ = head.partition(b"\r\n\r\n")
    m = re.search(rb"(?im)^content-length: *(\d+)", top)
    return len(top) + 4 + (int(m.group(1)) if m else 0)


def tls_handshakes(port):
    """The chain client's TLS handshakes so far, (full, resumed), from its
    metrics endpoint (etemenanki_tls_handshakes_total); None when it does
    not answer."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as c:
            c.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            body = b""
            while b"\r\n\r\n" not in body or len(body) < want(body):
                chunk = c.recv(65536)
                if not chunk:
                    break
                body += chunk
    except OSError:
        return None
    got = {}
    for m in re.finditer(r'^etemenanki_tls_handshakes_total\{side="client",resumed="(\w+)"\} (\d+)',
                         body.decode(errors="replace"), re.M):
        got[m.group(1)] = int(m.group(2))
    return (got["false"], got["true"]) if len(got) == 2 else None


def cpu_s(pids):
    return sum((proc_stat(p) or (0, 0, 0))[1] for p in pids) / CLK_TCK


def others():
    """{(pid, start time): CPU ticks} of every process that is neither this
    script nor one of its descendants nor a kernel thread: the work of other
    sessions sharing this machine. A process's ticks include its reaped
    children's, so short-lived commands show up in their parent."""
    stats, kids = {}, {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = proc_stat(d)
            if st:
                stats[int(d)] = st
                kids.setdefault(st[0], []).append(int(d))
    mine = set(tree([os.getpid()]))
    kernel = set(tree([2]))
    return {(p, st[2]): st[1] for p, st in stats.items() if p not in mine and p not in kernel}


def other_cores(before, after, secs):
    return sum(t - before.get(k, 0) for k, t in after.items()) / CLK_TCK / secs


def wait_quiet():
    """Waits until other work on the machine uses less than QUIET cores (at
    most QUIET_WAIT s: other sessions share this machine). Returns the cores
    they used in the last half second."""
    deadline = time.monotonic() + QUIET_WAIT
    while True:
        b0 = others()
        time.sleep(0.5)
        other = other_cores(b0, others(), 0.5)
        if other < QUIET or time.monotonic() > deadline:
            return other


def parse_line(out):
    """The key=value pairs of the last `loadgen ...` line of out."""
    lines = [l for l in out.splitlines() if l.startswith("loadgen ")]
    if not lines:
        return None
    kv = {}
    for tok in shlex.split(lines[-1])[1:]:
        k, _, v = tok.partition("=")
        kv[k] = v
    return kv


def dpkg_version(pkg):
    try:
        return subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], capture_output=True,
                              text=True, timeout=10).stdout.strip() or "not installed"
    except (OSError, subprocess.SubprocessError):
        return "?"


# ---------------------------------------------------------------- running a subject

class Running:
    """The processes of one started subject."""

    def __init__(self):
        self.procs = []  # (Popen, log path, log file)
        self.known = {}  # pid -> start time, of every process seen in the trees

    def roots(self):
        return [p.pid for p, _, _ in self.procs]

    def pids(self):
        pids = tree(self.roots())
        for p in pids:
            st = proc_stat(p)
            if st:
                self.known.setdefault(p, st[2])
        return pids

    def log_tail(self, n=2000):
        out = []
        for p, path, _ in self.procs:
            try:
                out.append(f"--- {p.args[0]} (rc={p.poll()}):\n{path.read_text(errors='replace')[-n:]}")
            except OSError:
                pass
        return "\n".join(out)

    def stop(self):
        """SIGTERM to each process we started (clients first), SIGKILL after
        3 s; then SIGKILL to any of their descendants still alive (checked
        by start time, so a reused pid is never hit)."""
        self.pids()
        for p, _, _ in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p, _, f in reversed(self.procs):
            try:
                p.wait(3)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
            f.close()
        for pid, start in self.known.items():
            st = proc_stat(pid)
            if st and st[2] == start:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass


def pinned(cpus):
    """A preexec_fn that gives the child this CPU affinity (None: none)."""
    return (lambda: os.sched_setaffinity(0, cpus)) if cpus else None


def pin_tree(pid, cpus):
    """Sets the CPU affinity of every thread of a running process."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(tid), cpus)


def start(subject, values, tmp, cpus=None):
    run = Running()
    for i, proc in enumerate(subject.procs):
        exe = shutil.which(proc.exe)
        if not exe:
            run.stop()
            raise RuntimeError(f"{proc.exe} is not installed (scripts/deps.sh installs it)")
        vals = dict(values, EXE=exe, TMP=tmp)
        if proc.config:
            src = PEERS / proc.config
            cfg = Path(tmp) / f"{subject.key}-{i}{src.suffix}"
            cfg.write_text(fill(src.read_text(), vals))
            vals["CFG"] = cfg
        argv = [fill(a, vals) for a in proc.argv]
        path = Path(tmp) / f"{subject.key}-{i}.log"
        f = open(path, "wb")
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                             cwd=tmp, preexec_fn=pinned(cpus), env=dict(os.environ, **proc.env))
        run.procs.append((p, path, f))
        pending = [values[n] for n in proc.listens]
        udp_pending = [values[n] for n in proc.udp_listens]
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if p.poll() is not None:
                break
            if udp_pending:
                if udp_answers(udp_pending[0]):
                    udp_pending.pop(0)
                continue
            if pending:
                try:
                    with socket.create_connection(("127.0.0.1", pending[0]), timeout=0.5):
                        pass
                    pending.pop(0)
                except OSError:
                    time.sleep(0.02)
                continue
            if proc.ready and proc.ready not in path.read_text(errors="replace"):
                time.sleep(0.02)
                continue
            break
        if p.poll() is not None or pending or udp_pending or (proc.ready and
                                                 proc.ready not in path.read_text(errors="replace")):
            tail = run.log_tail()
            run.stop()
            raise RuntimeError(f"{proc.exe} did not start\n{tail}")
    return run


def udp_answers(port, wait=0.2):
    """True when a datagram to 127.0.0.1:port comes back (a balancer in
    front of an echo is up)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(wait)
        try:
            s.connect(("127.0.0.1", port))
            s.send(b"bench-ready")
            return s.recv(64) == b"bench-ready"
        except OSError:
            time.sleep(0.02)
            return False


def loadgen(mode, subject, values, args, timeout):
    """Runs one workload; returns the result's key=value pairs (with error=
    when it failed) and the tool's CPU seconds (client and targets)."""
    if subject.via == "relay":
        target = {"thru": "RELAY_SINK", "crr": "RELAY_ECHO", "rr": "RELAY_ECHO",
                  "udp": "RELAY_UDP"}[mode]
        via = []
    else:
        target = {"thru": "SINK", "crr": "ECHO", "rr": "ECHO", "udp": "UDP"}[mode]
        via = ["--socks", f"127.0.0.1:{values['SOCKS']}"] if subject.via == "socks" else []
    argv = [str(LOADGEN), mode, "--label", subject.key, "--target",
            f"127.0.0.1:{values[target]}"] + via + args
    return run_loadgen(argv, timeout)


def run_loadgen(argv, timeout, cpus=None):
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                           preexec_fn=pinned(cpus))
        kv = parse_line(r.stdout) or {"error": f"no result line; rc={r.returncode} "
                                               f"{r.stderr.strip()[:200]}"}
    except subprocess.TimeoutExpired:
        kv = {"error": f"loadgen did not finish in {timeout} s"}
    kv["cmd"] = " ".join(shlex.quote(a if not a.startswith(str(ROOT)) else
                                     os.path.relpath(a, ROOT)) for a in argv)
    return kv


class Sampler(threading.Thread):
    """Peak summed RSS of a subject's processes while a workload runs."""

    def __init__(self, run):
        super().__init__(daemon=True)
        self.run_, self.peak, self.stop_ = run, 0, threading.Event()

    def run(self):
        while not self.stop_.wait(SAMPLE):
            self.peak = max(self.peak, rss_kib(self.run_.pids()))


def measure(subject, values, tmp, serve_pid):
    """Starts the subject, runs the four workloads, stops it. A dict of results."""
    res = {"title": subject.title, "quiet_before": wait_quiet()}
    run = None
    try:
        run = start(subject, values, tmp) if subject.procs else Running()
        time.sleep(SETTLE if subject.procs else 0)
        pids = run.pids()
        # what other sessions ran meanwhile
        w0, b0 = time.monotonic(), others()
        res["procs"] = len(pids)
        res["rss_idle_kib"] = rss_kib(pids) if subject.procs else None
        # each started process's own, in the order of subject.procs (a
        # chain's server first): the TLS-inbound target reads the server's
        res["rss_idle_each_kib"] = [rss_kib(tree([r])) for r in run.roots()]
        # thru, with the CPU it cost the subject
        c0, s0 = cpu_s(run.pids()), cpu_s([serve_pid])
        res["thru"] = loadgen("thru", subject, values,
                              ["--conns", SIZES["conns"], "--bytes", SIZES["bytes"],
                               "--timeout", "60"], 90)
        c1, s1 = cpu_s(run.pids()), cpu_s([serve_pid])
        res["serve_cpu_thru"] = s1 - s0
        if subject.procs and "mib_s" in res["thru"]:
            gib = int(res["thru"]["bytes"]) / (1 << 30)
            res["cpu_s_per_gib"] = (c1 - c0) / gib
        time.sleep(PAUSE)
        # crr, with the peak RSS under it
        metered = subject.ours and any(p.config and "@METRICS@" in (PEERS / p.config).read_text()
                                       for p in subject.procs)
        h0 = tls_handshakes(values["METRICS"]) if metered else None
        sampler = Sampler(run)
        sampler.start()
        c0 = cpu_s(run.pids())
        res["crr"] = loadgen("crr", subject, values,
                             ["--workers", SIZES["workers"], "--secs", SIZES["secs"],
                              "--timeout", "60"], 60)
        c1 = cpu_s(run.pids())
        sampler.stop_.set()
        sampler.join()
        if subject.procs and "conns" in res["crr"] and int(res["crr"]["conns"]) > 0:
            res["cpu_us_per_conn"] = (c1 - c0) / int(res["crr"]["conns"]) * 1e6
        res["rss_crr_kib"] = sampler.peak if subject.procs else None
        if h0 and (h1 := tls_handshakes(values["METRICS"])):
            # the crr's handshakes alone: full and resumed
            res["crr_handshakes"] = (h1[0] - h0[0], h1[1] - h0[1])
        time.sleep(PAUSE)
        res["rr"] = loadgen("rr", subject, values,
                            ["--secs", SIZES["rr_secs"], "--timeout", "10"], 60)
        time.sleep(PAUSE)
        if subject.udp:
            # A udp run lasts a fraction of a second: the median of a few
            # runs, unless the first shows the subject losing most datagrams.
            runs = []
            for _ in range(UDP_RUNS):
                kv = loadgen("udp", subject, values,
                             ["--count", SIZES["count"], "--size", SIZES["size"],
                              "--window", SIZES["window"], "--timeout", "10"], 60)
                runs.append(kv)
                if "pkt_s" not in kv or kv.get("incomplete") or float(kv["loss_pct"]) > 50:
                    break
                time.sleep(PAUSE)
            ok = sorted((kv for kv in runs if "pkt_s" in kv), key=lambda kv: float(kv["pkt_s"]))
            res["udp"] = ok[len(ok) // 2] if ok else runs[-1]
            res["udp_runs"] = runs
        res["other_cores"] = other_cores(b0, others(), time.monotonic() - w0)
        if subject.procs:
            for p, _, _ in run.procs:
                if p.poll() is not None:
                    res["error"] = f"{p.args[0]} exited during the run (rc={p.returncode})"
    except RuntimeError as e:
        res["error"] = str(e).splitlines()[0]
        log(str(e))
    finally:
        if run is not None:
            if "error" in res or any("error" in res.get(m, {}) for m in ("thru", "crr", "rr",
                                                                          "udp")):
                log(f"{subject.key}: logs\n{run.log_tail(1500)}")
            run.stop()
    return res


def loadgen_lb(subject, values, port, args, timeout=60, cpus=None):
    """One UDP LB scenario run: straight to the balancer's port, or to the
    first echo for the direct subject; on cpus when given."""
    target = values["ECHO1"] if subject.via == "direct" else values[port]
    argv = [str(LOADGEN), "lb", "--label", subject.key, "--target", f"127.0.0.1:{target}",
            "--size", SIZES["size"], "--src-ips", SIZES["lb_src_ips"], "--timeout", "20"] + args
    return run_loadgen(argv, timeout, cpus)


def lb_metrics(run, wait=0.5):
    """etemenanki-app's udp_lb counters: SIGUSR1 makes it print them on
    stderr (our log file); the lines of the last report."""
    p, path, _ = run.procs[0]
    if p.poll() is not None:
        return []
    before = len(path.read_text(errors="replace").splitlines())
    p.send_signal(signal.SIGUSR1)
    time.sleep(wait)
    lines = path.read_text(errors="replace").splitlines()[before:]
    return [l[l.index("udp_lb "):] for l in lines if "udp_lb " in l]


def measure_lb(subjects, values_of, tmp, placement=None):
    """Starts every UDP LB subject of the run at once (each on its own
    ports), then runs each scenario LB_RUNS times round the subjects, the
    order turning each round, so that load from other sessions that comes
    and goes falls on all of them alike; stops them. The median run of each
    scenario counts. placement: None (every process on every core), or
    (balancer CPUs, load tool CPUs), the subjects started and the load tool
    run on those (the echoes' process is pinned by the caller).
    {key: results}."""
    lb_cpus, tool_cpus = placement or (None, None)
    out, runs = {}, {}
    quiet = wait_quiet()
    try:
        for s in subjects:
            out[s.key] = {"title": s.title, "kind": "udplb", "quiet_before": quiet,
                          "other_ticks": 0.0, "other_secs": 0.0}
            try:
                runs[s.key] = (start(s, values_of[s.key], tmp, lb_cpus) if s.procs
                               else Running())
            except RuntimeError as e:
                out[s.key]["error"] = str(e).splitlines()[0]
                log(str(e))
        live = [s for s in subjects if s.key in runs]
        time.sleep(SETTLE if any(s.procs for s in live) else 0)
        samplers = {}
        for s in live:
            pids = runs[s.key].pids()
            out[s.key]["procs"] = len(pids)
            out[s.key]["rss_idle_kib"] = rss_kib(pids) if s.procs else None
            if s.procs:
                samplers[s.key] = Sampler(runs[s.key])
                samplers[s.key].start()
        for name, port, args in LB_SCENARIOS:
            cpu = {s.key: 0.0 for s in live}
            for i in range(LB_RUNS):
                for s in live[i % len(live):] + live[:i % len(live)] if live else []:
                    r, res = runs[s.key], out[s.key]
                    done = res.get(f"{name}_runs", [])
                    if done and ("pkt_s" not in done[-1] or done[-1].get("incomplete") or
                                 float(done[-1]["loss_pct"]) > 50):
                        continue  # most datagrams lost: not worth more runs
                    c0, w0, b0 = cpu_s(r.pids()), time.monotonic(), others()
                    kv = loadgen_lb(s, values_of[s.key], port, args, cpus=tool_cpus)
                    cpu[s.key] += cpu_s(r.pids()) - c0
                    res["other_ticks"] += other_cores(b0, others(), 1.0)
                    res["other_secs"] += time.monotonic() - w0
                    res.setdefault(f"{name}_runs", []).append(kv)
                    time.sleep(PAUSE)
            for s in live:
                res = out[s.key]
                done = res.get(f"{name}_runs", [])
                answered = sum(int(kv.get("answered", 0)) for kv in done if "error" not in kv)
                if s.procs and answered:
                    res[f"{name}_cpu_us"] = cpu[s.key] / answered * 1e6
                ok = sorted((kv for kv in done if "pkt_s" in kv), key=lambda kv: float(kv["pkt_s"]))
                res[name] = ok[len(ok) // 2] if ok else (done[-1] if done else {"error": "not run"})
                res[f"{name}_max_loss"] = max((float(kv["loss_pct"]) for kv in ok), default=None)
        for s in live:
            res = out[s.key]
            if s.key in samplers:
                samplers[s.key].stop_.set()
                samplers[s.key].join()
                res["rss_peak_kib"] = samplers[s.key].peak
            else:
                res["rss_peak_kib"] = None
            if res["other_secs"]:
                res["other_cores"] = res["other_ticks"] / res["other_secs"]
            for p, _, _ in runs[s.key].procs:
                if p.poll() is not None:
                    res["error"] = f"{p.args[0]} exited during the run (rc={p.returncode})"
            if s.ours and "error" not in res:
                res["metrics"] = lb_metrics(runs[s.key])
    finally:
        for s in subjects:
            r, res = runs.get(s.key), out.get(s.key, {})
            if r is None:
                continue
            if "error" in res or any("error" in (res.get(n) or {}) for n, _, _ in LB_SCENARIOS):
                log(f"{s.key}: logs\n{r.log_tail(1500)}")
            r.stop()
    return out


def lb_syscalls():
    """bench/udplb_syscalls.sh: the system calls a new flow costs
    etemenanki-app, under strace. Its result lines, or an error."""
    if not shutil.which("strace"):
        return {"error": "strace is not installed (scripts/deps.sh installs it)"}
    try:
        r = subprocess.run(["bash", str(SYSCALLS)], capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, BUILD=str(BUILD)))
    except subprocess.TimeoutExpired:
        return {"error": "bench/udplb_syscalls.sh did not finish in 120 s"}
    lines = [l for l in r.stdout.splitlines() if l.startswith("udplb_syscalls ")]
    if r.returncode != 0 or not lines:
        return {"error": f"rc={r.returncode} {(r.stderr or r.stdout).strip()[-300:]}"}
    out = {"lines": lines, "text": r.stdout}
    for l in lines:
        kv = dict(tok.partition("=")[::2] for tok in l.split()[1:])
        out[kv.get("phase", "?")] = kv
    return out


def loadgen_dns(subject, values, run_no, timeout=60):
    """One `loadgen dns` run of a DNS subject. Random names take a suffix of
    their own per run, so no run finds a name an earlier one cached."""
    t = subject.dns_target
    target = t if ":" in t else f"127.0.0.1:{values[t]}"
    via = ["--socks", f"127.0.0.1:{values['SOCKS']}"] if subject.via == "socks" else []
    names = (["--dns-random", "--dns-name", f"r{run_no}.{DNS_ZONE}"]
             if subject.dns_names == "random" else ["--dns-name", DNS_NAME])
    argv = [str(LOADGEN), "dns", "--label", subject.key, "--target", target] + via + names + [
        "--count", SIZES["dns_count"], "--window", SIZES["dns_window"], "--timeout", "20"]
    return run_loadgen(argv, timeout)


def measure_dns(subjects, values_of, tmp):
    """Starts the group's upstream, then each DNS subject in turn: DNS_RUNS
    runs of `loadgen dns` (the median by rate counts), the subject's CPU per
    answered query and its RSS idle and at peak. {key: results}."""
    out = {}
    up_values = next(iter(values_of.values()))
    upstream = None
    try:
        try:
            upstream = start(Subject("dns-upstream-proc", "", "dns", [DNS_UPSTREAM]), up_values,
                             tmp)
        except RuntimeError as e:
            for s in subjects:
                out[s.key] = {"title": s.title, "kind": "dns", "error": str(e).splitlines()[0]}
            log(str(e))
            return out
        for s in subjects:
            values = dict(values_of[s.key], DNS_UPSTREAM=up_values["DNS_UPSTREAM"])
            res = out[s.key] = {"title": s.title, "kind": "dns", "quiet_before": wait_quiet()}
            run = None
            try:
                run = start(s, values, tmp) if s.procs else Running()
                time.sleep(SETTLE if s.procs else 0)
                pids = run.pids()
                res["procs"] = len(pids)
                res["rss_idle_kib"] = rss_kib(pids) if s.procs else None
                sampler = Sampler(run)
                sampler.start()
                w0, b0, c0 = time.monotonic(), others(), cpu_s(run.pids())
                runs = []
                for i in range(DNS_RUNS):
                    kv = loadgen_dns(s, values, i)
                    runs.append(kv)
                    if "pkt_s" not in kv or kv.get("incomplete") or float(kv["loss_pct"]) > 50:
                        break
                    time.sleep(PAUSE)
                cpu = cpu_s(run.pids()) - c0
                sampler.stop_.set()
                sampler.join()
                res["other_cores"] = other_cores(b0, others(), time.monotonic() - w0)
                res["rss_peak_kib"] = sampler.peak if s.procs else None
                res["dns_runs"] = runs
                ok = sorted((kv for kv in runs if "pkt_s" in kv), key=lambda kv: float(kv["pkt_s"]))
                res["dns"] = ok[len(ok) // 2] if ok else runs[-1]
                answered = sum(int(kv.get("answered", 0)) for kv in runs if "error" not in kv)
                if s.procs and answered:
                    res["cpu_us_per_query"] = cpu / answered * 1e6
                for p, _, _ in run.procs:
                    if p.poll() is not None:
                        res["error"] = f"{p.args[0]} exited during the run (rc={p.returncode})"
            except RuntimeError as e:
                res["error"] = str(e).splitlines()[0]
                log(str(e))
            finally:
                if run is not None:
                    if "error" in res or "error" in (res.get("dns") or {}):
                        log(f"{s.key}: logs\n{run.log_tail(1500)}")
                    run.stop()
            time.sleep(PAUSE)
    finally:
        if upstream is not None:
            upstream.stop()
    return out


# ---------------------------------------------------------------- the report

def num(kv, key, fmt="{:.0f}"):
    if not kv:
        return "–"
    if "error" in kv:
        return "error"
    try:
        return fmt.format(float(kv[key]))
    except (KeyError, ValueError):
        return "–"


def val(res, mode, key):
    kv = res.get(mode)
    if not kv or "error" in kv or key not in kv:
        return None
    try:
        return float(kv[key])
    except ValueError:
        return None


def mib(kib):
    return "–" if kib is None else f"{kib / 1024:.1f}"


def ratio(a, b, fmt="{:.2f}×"):
    return "–" if a is None or b is None or b == 0 else fmt.format(a / b)


def udp_rate(res):
    """pkt/s, or None when most datagrams were lost (a rate of the few that
    came back compares with nothing)."""
    loss = val(res, "udp", "loss_pct")
    return None if loss is None or loss > 50 else val(res, "udp", "pkt_s")


def table(results):
    rows = ["| subject | procs | thru MiB/s | crr conn/s | crr p50 / p99 µs | rr p50 / p99 µs "
            "| udp pkt/s | udp loss | RSS idle MiB | RSS crr MiB | CPU s/GiB | CPU µs/conn "
            "| other load |",
            "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for s in SUBJECTS:
        r = results.get(s.key)
        if r is None or s.kind != "proxy":
            continue
        if "error" in r and "thru" not in r:
            rows.append(f"| {r['title']} | | {r['error']} | | | | | | | | | | |")
            continue
        crr, rr, udp = r.get("crr"), r.get("rr"), r.get("udp")
        lat = lambda kv, f="{:.0f}": (f"{num(kv, 'p50_us', f)} / {num(kv, 'p99_us', f)}"
                                      if kv and "error" not in kv else num(kv, "p50_us"))
        cpu, per_conn, other = r.get("cpu_s_per_gib"), r.get("cpu_us_per_conn"), r.get("other_cores")
        loss = num(udp, "loss_pct", "{:.2f} %")
        if udp and udp.get("incomplete"):
            loss += " (timed out)"
        rows.append(
            f"| {r['title']} | {r.get('procs') if s.procs else '–'} | {num(r.get('thru'), 'mib_s')} "
            f"| {num(crr, 'conn_s')} | {lat(crr)} | {lat(rr, '{:.1f}')} "
            f"| {num(udp, 'pkt_s') if s.udp else 'no UDP'} "
            f"| {loss if s.udp else '–'} "
            f"| {mib(r.get('rss_idle_kib'))} | {mib(r.get('rss_crr_kib'))} "
            f"| {'–' if cpu is None else f'{cpu:.2f}'} "
            f"| {'–' if per_conn is None else f'{per_conn:.0f}'} "
            f"| {'–' if other is None else f'{other:.2f}'} |")
    return "\n".join(rows)


def vs_direct(results):
    d = results.get("direct", {})
    rows = ["| subject | thru | crr | rr p50 − direct | udp |", "|---|--:|--:|--:|--:|"]
    for s in SUBJECTS:
        r = results.get(s.key)
        if r is None or s.group == "baseline" or s.kind != "proxy" or "thru" not in r:
            continue
        p50, dp50 = val(r, "rr", "p50_us"), val(d, "rr", "p50_us")
        rows.append(f"| {r['title']} | {ratio(val(r, 'thru', 'mib_s'), val(d, 'thru', 'mib_s'))} "
                    f"| {ratio(val(r, 'crr', 'conn_s'), val(d, 'crr', 'conn_s'))} "
                    f"| {'–' if p50 is None or dp50 is None else f'{p50 - dp50:+.1f} µs'} "
                    f"| {ratio(udp_rate(r), udp_rate(d))} |")
    return "\n".join(rows)


def resumed_table(results):
    rows = ["| subject | full | resumed | resumed share |", "|---|--:|--:|--:|"]
    for s in SUBJECTS:
        h = results.get(s.key, {}).get("crr_handshakes")
        if h:
            share = f"{100 * h[1] / sum(h):.1f} %" if sum(h) else "–"
            rows.append(f"| {results[s.key]['title']} | {h[0]} | {h[1]} | {share} |")
    return "\n".join(rows)


def vs_peers(results):
    """Ours divided by each peer of the same group: above 1 is ours ahead,
    except for rr latency, RSS and CPU, where below 1 is ours ahead."""
    rows = ["| etemenanki | peer | thru | crr | rr p50 | udp | RSS crr | CPU/GiB | CPU/conn |",
            "|---|---|--:|--:|--:|--:|--:|--:|--:|"]
    for o in SUBJECTS:
        if not o.ours or o.kind != "proxy" or o.key not in results:
            continue
        a = results[o.key]
        for p in SUBJECTS:
            if p.ours or p.group != o.group or p.key not in results:
                continue
            b = results[p.key]
            rows.append(
                f"| {a['title']} | {b['title']} "
                f"| {ratio(val(a, 'thru', 'mib_s'), val(b, 'thru', 'mib_s'))} "
                f"| {ratio(val(a, 'crr', 'conn_s'), val(b, 'crr', 'conn_s'))} "
                f"| {ratio(val(a, 'rr', 'p50_us'), val(b, 'rr', 'p50_us'))} "
                f"| {ratio(udp_rate(a), udp_rate(b))} "
                f"| {ratio(a.get('rss_crr_kib'), b.get('rss_crr_kib'))} "
                f"| {ratio(a.get('cpu_s_per_gib'), b.get('cpu_s_per_gib'))} "
                f"| {ratio(a.get('cpu_us_per_conn'), b.get('cpu_us_per_conn'))} |")
    return "\n".join(rows)


# The chains over TLS, each held to 2 x v2ray's same chain (issue 21).
TLS_GROUPS = ("trojan+tls", "vless+tls", "vless+ws+tls", "vmess+tls")


def targets(results):
    """Issue 21's targets, each met or missed with the numbers."""
    out = []
    r, n, d = results.get("etm-socks", {}), results.get("nginx", {}), results.get("direct", {})

    def line(name, ok, detail):
        mark = "–" if ok is None else ("met" if ok else "**missed**")
        out.append(f"| {name} | {mark} | {detail} |")

    def cmp(name, ours, want, unit, fmt="{:.0f}", higher=True):
        if ours is None or want is None:
            line(name, None, "not measured")
            return
        ok = ours >= want if higher else ours <= want
        by = (ours / want - 1) * 100 if want else 0
        line(name, ok, f"{fmt.format(ours)} {unit} vs {fmt.format(want)} {unit} wanted "
                       f"({by:+.0f} %)")

    def times(k, x):
        return None if x is None else k * x

    out += ["| target | | measured |", "|---|---|---|"]
    # the chains over TLS: 2 x v2ray's same chain, and a CPU bound
    for o in SUBJECTS:
        if not o.ours or o.group not in TLS_GROUPS or o.key not in results:
            continue
        a = results[o.key]
        for p in SUBJECTS:
            if p.ours or p.group != o.group or not p.key.startswith("v2ray") \
                    or p.key not in results:
                continue
            b = results[p.key]
            for mode, key, unit in (("thru", "mib_s", "MiB/s"), ("crr", "conn_s", "conn/s")):
                cmp(f"{o.group} {mode} ≥ 2 × {p.title}", val(a, mode, key),
                    times(2, val(b, mode, key)), unit)
        cmp(f"{o.group} CPU s/GiB ≤ 1.6", a.get("cpu_s_per_gib"), 1.6, "s/GiB", "{:.2f}",
            higher=False)
    # the plain chains: near a single hop once both ends splice
    st = val(r, "thru", "mib_s")
    for key in ("etm-vless", "etm-trojan"):
        if key in results:
            a = results[key]
            cmp(f"{a['title']} thru ≥ 0.8 × socks→freedom", val(a, "thru", "mib_s"),
                times(0.8, st), "MiB/s")
    # socks→freedom against nginx's stream relay
    cmp("socks→freedom CPU per connection ≤ nginx's", r.get("cpu_us_per_conn"),
        n.get("cpu_us_per_conn"), "µs", higher=False)
    cmp("socks→freedom crr ≥ nginx", val(r, "crr", "conn_s"), val(n, "crr", "conn_s"), "conn/s")
    cmp("socks→freedom thru ≥ 1.8 × nginx", st, times(1.8, val(n, "thru", "mib_s")), "MiB/s")
    cmp("SOCKS UDP associate ≥ 1.5 × nginx UDP relay", udp_rate(r),
        times(1.5, udp_rate(n)), "pkt/s")
    # memory
    idle, busy = r.get("rss_idle_kib"), r.get("rss_crr_kib")
    cmp("idle RSS < 4 MiB (socks→freedom, no TLS)", idle and idle / 1024, 4, "MiB", "{:.1f}",
        higher=False)
    tls_server = (results.get("etm-trojan-tls", {}).get("rss_idle_each_kib") or [None])[0]
    cmp("idle RSS < 6 MiB with a TLS inbound (trojan+tls server)",
        tls_server and tls_server / 1024, 6, "MiB", "{:.1f}", higher=False)
    cmp("RSS under crr < 10 MiB (single hop)", busy and busy / 1024, 10, "MiB", "{:.1f}",
        higher=False)
    dp = val(d, "rr", "p50_us")
    cmp("socks→freedom rr p50 ≤ direct + 20 µs", val(r, "rr", "p50_us"), dp and dp + 20, "µs",
        "{:.1f}", higher=False)
    # every other chain: ahead of the peers of its shape
    for o in SUBJECTS:
        if not o.ours or o.group in ("socks",) + TLS_GROUPS or o.kind != "proxy" \
                or o.key not in results:
            continue
        a = results[o.key]
        for p in SUBJECTS:
            if p.ours or p.group != o.group or p.key not in results:
                continue
            b = results[p.key]
            for mode, key, unit in (("thru", "mib_s", "MiB/s"), ("crr", "conn_s", "conn/s")):
                cmp(f"{a['title']} {mode} ahead of {p.title}", val(a, mode, key),
                    val(b, mode, key), unit)
    for o in SUBJECTS:  # trojan-gfw beside the trojan+tls chain
        if o.ours and o.group in TLS_GROUPS and o.key in results:
            for p in SUBJECTS:
                if not p.ours and p.group == o.group and not p.key.startswith("v2ray") \
                        and p.key in results:
                    for mode, key, unit in (("thru", "mib_s", "MiB/s"),
                                            ("crr", "conn_s", "conn/s")):
                        cmp(f"{results[o.key]['title']} {mode} ahead of {p.title}",
                            val(results[o.key], mode, key), val(results[p.key], mode, key),
                            unit)
    return "\n".join(out)


def dns_table(results):
    rows = ["| subject | procs | query/s | loss | p50 / p99 µs | not NOERROR | CPU µs/query "
            "| RSS idle MiB | RSS peak MiB | other load |",
            "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for s in SUBJECTS:
        r = results.get(s.key)
        if r is None or s.kind != "dns":
            continue
        if "error" in r and "dns" not in r:
            rows.append(f"| {r['title']} | | {r['error']} | | | | | | | |")
            continue
        kv, cpu, other = r.get("dns"), r.get("cpu_us_per_query"), r.get("other_cores")
        loss = num(kv, "loss_pct", "{:.2f} %")
        if kv and kv.get("incomplete"):
            loss += " (timed out)"
        lat = (f"{num(kv, 'p50_us')} / {num(kv, 'p99_us')}" if kv and "error" not in kv
               else num(kv, "p50_us"))
        rows.append(f"| {r['title']} | {r.get('procs') if s.procs else '–'} "
                    f"| {num(kv, 'pkt_s')} | {loss} | {lat} | {num(kv, 'bad')} "
                    f"| {'–' if cpu is None else f'{cpu:.1f}'} "
                    f"| {mib(r.get('rss_idle_kib'))} | {mib(r.get('rss_peak_kib'))} "
                    f"| {'–' if other is None else f'{other:.2f}'} |")
    return "\n".join(rows)


def dns_rate(res):
    """query/s, or None when most queries were lost or answered with an error."""
    loss, bad, n = val(res, "dns", "loss_pct"), val(res, "dns", "bad"), val(res, "dns", "count")
    if loss is None or loss > 50 or bad is None or not n or bad > n / 2:
        return None
    return val(res, "dns", "pkt_s")


def dns_vs(results):
    rows = ["| ratio of query/s | value |", "|---|--:|"]
    for a, b, what in (("etm-dns-warm", "dnsmasq-warm", "etemenanki warm / dnsmasq warm (direct)"),
                       ("etm-dns-warm-1w", "dnsmasq-warm",
                        "etemenanki warm, one worker / dnsmasq warm (direct)"),
                       ("etm-dns-warm", "dnsmasq-warm-socks",
                        "etemenanki warm / dnsmasq warm through etemenanki socks"),
                       ("etm-dns-cold", "dns-upstream", "etemenanki cold / the upstream alone")):
        value = ratio(dns_rate(results.get(a, {})), dns_rate(results.get(b, {})))
        rows.append(f"| {what} | {value} |")
    return "\n".join(rows)


LB_TITLES = {"short": "short flows, a new client address each",
             "short-reuse": "short flows, ports reused",
             "short-sockets": "short flows, a new client socket each",
             "long": "long flows", "long-gso": "long flows, bursts sent as GSO trains"}


def lb_endpoints(s):
    """How the load tool's endpoints move datagrams (BENCH_LB_GRO)."""
    if s["lb_gro"] != "0":
        return """The endpoints batch as current QUIC stacks do (`--gro`): the echoes take
coalesced trains (UDP_GRO) and answer a train with one GSO send
(UDP_SEGMENT), and the long flows' client sockets take trains too; in the
other scenarios the clients send datagram by datagram (sendmmsg). Both
balancers face
the same endpoints; a balancer that forwards a burst as one GSO send has
it delivered as one train, one that sends datagram by datagram does not.
`BENCH_LB_GRO=0` runs the same with endpoints that move datagrams one by
one."""
    return """The endpoints move datagrams one by one (`BENCH_LB_GRO=0`): the echoes
and the client sockets take no coalesced trains (no UDP_GRO), so any GSO
send toward them is cut into datagrams on delivery."""


def lb_table(results):
    head = ["subject", "procs"]
    for name, _, _ in LB_SCENARIOS:
        unit = "µs/flow" if name.startswith("short") else "µs/dgram"
        head += [f"{name} dgram/s", f"{name} loss", f"{name} p50 / p99 µs", f"{name} CPU {unit}"]
    head += ["RSS idle MiB", "RSS peak MiB", "other load"]
    rows = ["| " + " | ".join(head) + " |", "|---|" + "--:|" * (len(head) - 1)]
    for s in SUBJECTS:
        r = results.get(s.key)
        if r is None or s.kind != "udplb":
            continue
        if "error" in r and not any(n in r for n, _, _ in LB_SCENARIOS):
            rows.append(f"| {r['title']} | | {r['error']} |" + " |" * (len(head) - 3))
            continue
        cells = [r["title"], str(r.get("procs")) if s.procs else "–"]
        for name, _, _ in LB_SCENARIOS:
            kv, cpu = r.get(name), r.get(f"{name}_cpu_us")
            loss = num(kv, "loss_pct", "{:.2f} %")
            worst = r.get(f"{name}_max_loss")
            if worst is not None and kv and "loss_pct" in kv and worst > float(kv["loss_pct"]):
                loss += f" (worst run {worst:.2f} %)"
            if kv and kv.get("incomplete"):
                loss += " (timed out)"
            cells += [num(kv, "pkt_s"), loss,
                      f"{num(kv, 'p50_us')} / {num(kv, 'p99_us')}" if kv and "error" not in kv
                      else num(kv, "p50_us"),
                      "–" if cpu is None else f"{cpu:.1f}"]
        other = r.get("other_cores")
        cells += [mib(r.get("rss_idle_kib")), mib(r.get("rss_peak_kib")),
                  "–" if other is None else f"{other:.2f}"]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def lb_rate(res, name):
    loss = val(res, name, "loss_pct")
    return None if loss is None or loss > 50 else val(res, name, "pkt_s")


def lb_vs(results):
    """Ours divided by each peer: dgram/s above 1 is ours ahead, CPU and RSS below 1."""
    head = ["etemenanki", "peer"] + [f"{n} dgram/s" for n, _, _ in LB_SCENARIOS] + \
        [f"{n} CPU" for n, _, _ in LB_SCENARIOS] + ["RSS peak"]
    rows = ["| " + " | ".join(head) + " |", "|---|---|" + "--:|" * (len(head) - 2)]
    for o in SUBJECTS:
        if not o.ours or o.kind != "udplb" or o.key not in results:
            continue
        a = results[o.key]
        for p in SUBJECTS:
            if p.ours or p.kind != "udplb" or not p.procs or p.key not in results:
                continue
            b = results[p.key]
            rows.append("| " + " | ".join(
                [a["title"], b["title"]]
                + [ratio(lb_rate(a, n), lb_rate(b, n)) for n, _, _ in LB_SCENARIOS]
                + [ratio(a.get(f"{n}_cpu_us"), b.get(f"{n}_cpu_us")) for n, _, _ in LB_SCENARIOS]
                + [ratio(a.get("rss_peak_kib"), b.get("rss_peak_kib"))]) + " |")
    return "\n".join(rows)


def lb_targets(results, syscalls, split=None):
    """The targets' lines, the rate and loss targets once per placement
    measured (shared cores; split cores when split holds results)."""
    out = ["| target | placement | | measured |", "|---|---|---|---|"]
    placements = [("shared cores", results)] + ([("split cores", split)] if split else [])

    def line(name, where, ok, detail):
        mark = "–" if ok is None else ("met" if ok else "**missed**")
        out.append(f"| {name} | {where} | {mark} | {detail} |")

    peer = {"short": "nginx proxy_responses 1", "short-reuse": "nginx proxy_responses 1",
            "short-sockets": "nginx proxy_responses 1",
            "long": "nginx session mode", "long-gso": "nginx session mode"}
    for name, _, _ in LB_SCENARIOS:
        label = f"{LB_TITLES[name]}: dgram/s ≥ 2 × {peer[name]}"
        for where, res in placements:
            ours = lb_rate(res.get("etm-udplb", {}), name)
            theirs = lb_rate(res.get("nginx-udplb", {}), name)
            alone = lb_rate(res.get("lb-direct", {}), name)
            if ours is None or theirs is None:
                line(label, where, None, "not measured")
                continue
            want = 2 * theirs
            detail = f"{ours:.0f} vs {want:.0f} wanted ({(ours / want - 1) * 100:+.0f} %)"
            if alone is not None and alone < want:
                # the load tool and its echoes cannot make the rate wanted
                # even with no balancer between them: the row measures the tool
                line(label, where, None, f"not measurable here: with no balancer the load tool "
                                         f"makes {alone:.0f}, under the {want:.0f} wanted; {detail}")
            else:
                line(label, where, ours >= want, detail)
    for name, _, args in LB_SCENARIOS:
        window = args[args.index("--window") + 1]
        label = f"{LB_TITLES[name]}: no loss at window {window}"
        for where, res in placements:
            a = res.get("etm-udplb", {})
            worst = a.get(f"{name}_max_loss")
            if worst is None:
                line(label, where, None, "not measured")
                continue
            runs = len([kv for kv in a.get(f"{name}_runs", []) if "loss_pct" in kv])
            lost = sum(int(kv.get("lost", 0)) for kv in a.get(f"{name}_runs", []) if "lost" in kv)
            line(label, where, worst == 0, f"{lost} lost over {runs} runs (worst {worst:.2f} %)")
    label = "a new flow costs ≤ 4 system calls (the seed's socket, bind, connect, epoll_ctl)"
    nf = (syscalls or {}).get("open")
    if not syscalls:
        line(label, "one worker", None, "not measured")
    elif "error" in syscalls or not nf:
        line(label, "one worker", None, f"not measured: {syscalls.get('error', 'no open phase')}")
    else:
        per = float(nf["open_calls_per_flow"])
        line(label, "one worker", per <= 4, f"{per:.2f} per flow: {nf.get('open_detail', '')}")
    return "\n".join(out)


def route_table(kv):
    if not kv:
        return "bench_route did not run."
    keys = ["mean_ns", "domain_hit_ns", "domain_miss_ns", "ip_hit_ns", "ip_miss_ns"]
    return ("| geosite names | geoip prefixes | " + " | ".join(keys) + " |\n"
            "|--:|--:|" + "--:|" * len(keys) + "\n"
            f"| {kv.get('geosite_names')} | {kv.get('geoip_prefixes')} | "
            + " | ".join(kv.get(k, "–") for k in keys) + " |")


def human(size):
    """'1G' -> '1 GiB'."""
    units = {"K": "KiB", "M": "MiB", "G": "GiB"}
    return f"{size[:-1]} {units[size[-1].upper()]}" if size[-1:].upper() in units else f"{size} B"


def report(results, meta, route, syscalls=None, split=None):
    s = SIZES
    head = f"""Run {meta['when']} by `{meta['command']}` on commit {meta['commit']}
({meta['machine']}); load average {meta['load_start']} at the start, {meta['load_end']} at
the end; {meta['secs']:.0f} s in all."""
    parts = [head]
    if any(k in results for k in (x.key for x in SUBJECTS if x.kind == "proxy")):
        parts.append(f"""Workloads: thru {human(s['bytes'])} over {s['conns']} connections; crr {s['workers']} workers
for {s['secs']} s with 64-byte request and answer; rr 1-byte ping-pong for {s['rr_secs']} s
on one connection; udp {s['count']} datagrams of {s['size']} bytes, window {s['window']}
(the median of {UDP_RUNS} runs).
RSS is VmRSS summed over the subject's processes (a chain's client and
server, nginx's master and workers, danted's processes); CPU s/GiB is their
user + system time over the thru run per GiB moved, CPU µs/conn the same
over the crr run per connection. "other load" is the cores that work other
than the subject, the load tool and the driver kept busy meanwhile (other
sessions share this machine): rows where it is high are less comparable (it
overstates when a long command of another session ends during the row: its
whole CPU time lands in its parent at once).

{table(results)}

Ratios to direct loopback (same run):

{vs_direct(results)}

etemenanki divided by each peer of the same shape (thru, crr, udp: above 1 is
ours ahead; rr p50, RSS, CPU: below 1 is ours ahead):

{vs_peers(results)}

TLS handshakes of etemenanki's chain clients during `crr`
(etemenanki_tls_handshakes_total{{side="client"}} read from the client's
metrics endpoint before and after): a resumed one carries no certificate.

{resumed_table(results)}

Targets of issue 21 (performance II):

{targets(results)}""")
    if any(k in results for k in (x.key for x in SUBJECTS if x.kind == "udplb")):
        parts.append(f"""## UDP load balancer

Backends: the load tool's {LB_ECHOES} UDP echoes (`loadgen serve --udp-echoes {LB_ECHOES}`,
one process). `loadgen lb` sends {s['size']}-byte datagrams straight to the
balancer from 127.0.0.1{'' if s['lb_src_ips'] == '1' else ' .. 127.0.0.' + s['lb_src_ips'] + ' (client sockets in turn; etemenanki steers by source IP, so one IP would keep it on one worker)'} and counts a datagram lost when its echo
has not come back within 200 ms. The subjects are started together (each
on its own ports) and take turns run by run, the order turning each round,
so that other sessions' load falls on them alike; each scenario is the
median of {LB_RUNS} runs:

- short flows, a new client address each: {s['lb_short']} flows of one datagram and
  its answer, {s['lb_flows']} flows at once, each from a source address of its own
  (127.1.0.0 + the flow's number; one load-tool socket picks the source
  per datagram with IP_PKTINFO), the way a DNS service sees many clients;
  etemenanki's listener has `responses = 1`, nginx's `proxy_responses 1`;
- short flows, ports reused: the same count and window from {s['lb_flows']} client
  sockets, each sending its next flow's datagram once the last was answered
  (the balancer has closed that flow after its answer, so the next datagram
  opens a new one);
- short flows, a new client socket each: the same, but the load tool
  closes a flow's socket after its answer and opens a new one (a new
  source port) for the next flow; the load tool's own socket churn then
  bounds the rate (see the direct row), so its target is marked not
  measurable when the tool alone cannot make twice nginx's rate;
- long flows: {s['lb_long']} datagrams over {s['lb_long_flows']} client sockets that
  stay open, {s['lb_window']} datagrams in flight in all; etemenanki's listener has no
  `responses` cap, nginx runs in session mode (no proxy_responses,
  proxy_timeout 10s);
- long flows, bursts sent as GSO trains: the same, but each client socket
  sends its burst (up to its share of the window) as one GSO send
  (UDP_SEGMENT), as a QUIC stack sends; loopback has no GRO engine, so this
  is also what a NIC's GRO would hand a listener that takes trains.

{lb_endpoints(s)}

dgram/s counts answered datagrams per second (one per flow in the short
scenarios). CPU is the balancer's user + system time over a scenario's runs
divided by the datagrams (short: flows) answered; RSS peak is sampled
every {SAMPLE} s over all scenarios; "other load" is the cores that other
work kept busy during the subject's own runs.

### Shared cores

The load tool, its echoes and the balancer share the machine's
{os.cpu_count()} cores, so dgram/s is bounded by the three together: a
balancer's rate is charged for the load tool's CPU as well as its own.
CPU per datagram is the balancer's own cost.

{lb_table(results)}

etemenanki divided by nginx (dgram/s: above 1 is ours ahead; CPU, RSS:
below 1 is ours ahead):

{lb_vs(results)}

### Split cores

{split_text(split)}

Targets of the UDP LB issue:

{lb_targets(results, syscalls, split if split and "error" not in split else None)}""")
        if syscalls and "text" in syscalls:
            parts.append("System calls per new flow (`bench/udplb_syscalls.sh`, etemenanki-app "
                         "under strace):\n\n```\n" + syscalls["text"].rstrip() + "\n```")
        elif syscalls:
            parts.append(f"bench/udplb_syscalls.sh: {syscalls.get('error')}")
    if any(k in results for k in (x.key for x in SUBJECTS if x.kind == "dns")):
        parts.append(f"""## DNS service

`loadgen dns`: {s['dns_count']} A queries per run, {s['dns_window']} in flight, a query
lost when unanswered after 200 ms; the median of {DNS_RUNS} runs. Warm rows ask
{DNS_NAME} every time (the first query fills the cache); cold rows ask
<8 hex digits>.r<run>.{DNS_ZONE}, a name of its own per query, which only the
upstream can answer. etemenanki's rows go through a SOCKS5 UDP association
to 192.0.2.1:53, answered in process by the DNS service
(`bench/peers/etemenanki/dns-service.toml`, product defaults:
cache_size 4096; the one-worker row `dns-service-1w.toml`, `[runtime]
workers = 1`). The upstream is dnsmasq answering every name under
{DNS_ZONE} from its config (`--address`, TTL 300, `--cache-size=0`), started
once for the group; the dnsmasq rows are dnsmasq as a caching forwarder to
it (`--cache-size=4096`), asked directly and through etemenanki's
socks→freedom relay (no DNS service: the same client path as ours, so the
relay's cost is in both). "not NOERROR" counts answers with another rcode or
TC (should be 0). CPU µs/query is the subject's user + system time over its
runs per answered query (the upstream's not included).

{dns_table(results)}

{dns_vs(results)}""")
    parts.append(f"""Route decision micro-benchmark (`build/src/bench_route`, CPU ns per
decision, the fastest of its rounds):

{route_table(route)}

Peers: {meta['versions']}.""")
    return "\n\n".join(parts)


def split_text(split):
    if not split:
        return "Not run (`BENCH_LB_SPLIT=0`)."
    if "error" in split:
        return f"Not run: {split['error']}."
    lb, tool = split["_cpus"]
    return f"""The same scenarios with the balancer's processes on CPU {lb} and the load
tool and its echoes on CPU {tool} (CPU affinity, set at start): each
balancer then runs one worker (nginx's `worker_processes auto` and
etemenanki's `workers = 0` count the CPUs they may run on) and dgram/s is
its capacity on one core, unless the load tool's own core is the bound,
which the direct row shows.

{lb_table(split)}

etemenanki divided by nginx:

{lb_vs(split)}"""


def fmt2(x):
    return "-" if x is None else f"{x:.2f}"


def raw_lines(results, route, split=None):
    out = []
    placed = [(s, results.get(s.key), "") for s in SUBJECTS]
    if split and "error" not in split:
        placed += [(s, split.get(s.key), " (split cores)") for s in SUBJECTS if s.kind == "udplb"]
    for s, r, where in placed:
        if not r:
            continue
        out.append(f"# {s.key}: procs={r.get('procs')} rss_idle_kib={r.get('rss_idle_kib')} "
                   f"rss_crr_kib={r.get('rss_crr_kib')} cpu_s_per_gib="
                   f"{fmt2(r.get('cpu_s_per_gib'))} cpu_us_per_conn={fmt2(r.get('cpu_us_per_conn'))}"
                   f" serve_cpu_s_thru={fmt2(r.get('serve_cpu_thru'))}"
                   f" other_cores={fmt2(r.get('other_cores'))}"
                   f" other_cores_before={fmt2(r.get('quiet_before'))}"
                   + (f" error={r['error']!r}" if "error" in r else ""))
        if r.get("kind") == "udplb":
            out[-1] = (f"# {s.key}{where}: procs={r.get('procs')} rss_idle_kib={r.get('rss_idle_kib')} "
                       f"rss_peak_kib={r.get('rss_peak_kib')} "
                       + " ".join(f"{n}_cpu_us={fmt2(r.get(f'{n}_cpu_us'))}"
                                  for n, _, _ in LB_SCENARIOS)
                       + f" other_cores={fmt2(r.get('other_cores'))}"
                       + (f" error={r['error']!r}" if "error" in r else ""))
        if r.get("kind") == "dns":
            out[-1] = (f"# {s.key}: procs={r.get('procs')} rss_idle_kib={r.get('rss_idle_kib')} "
                       f"rss_peak_kib={r.get('rss_peak_kib')} "
                       f"cpu_us_per_query={fmt2(r.get('cpu_us_per_query'))} "
                       f"other_cores={fmt2(r.get('other_cores'))}"
                       + (f" error={r['error']!r}" if "error" in r else ""))
        for m in ("thru", "crr", "rr", "udp_runs", "dns_runs") + tuple(
                f"{n}_runs" for n, _, _ in LB_SCENARIOS):
            for kv in (r.get(m) or []) if m.endswith("_runs") else [r.get(m)]:
                if kv:
                    out.append("$ " + kv["cmd"])
                    out.append("loadgen " + " ".join(f"{k}={shlex.quote(v)}"
                                                     for k, v in kv.items() if k != "cmd"))
        for line in r.get("metrics") or []:
            out.append(f"# {s.key}{where} SIGUSR1: {line}")
    if route:
        out.append("$ build/src/bench_route")
        out.append(route.get("_line", ""))
    return "\n".join(out)


def refresh_doc(body, results_name):
    text = DOC.read_text() if DOC.exists() else f"# Performance\n\n{BEGIN}\n{END}\n"
    if BEGIN not in text or END not in text:
        text += f"\n{BEGIN}\n{END}\n"
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    gen = (f"{BEGIN}\n<!-- Written by `make bench` (bench/run.py); edits here are lost. -->\n\n"
           f"From [bench/results/{results_name}](../bench/results/{results_name}).\n\n"
           f"{body}\n{END}")
    DOC.write_text(head + gen + tail)


# ---------------------------------------------------------------- main

def lb_summary(r):
    """One subject's UDP LB results on one line, for the progress log."""
    return (", ".join(f"{n} {num(r.get(n), 'pkt_s')}/s loss {num(r.get(n), 'loss_pct', '{:.2f}')} %"
                      for n, _, _ in LB_SCENARIOS)
            + f", RSS {mib(r.get('rss_idle_kib'))}/{mib(r.get('rss_peak_kib'))} MiB"
            + (f" ERROR {r['error']}" if "error" in r else ""))


def main():
    t_start = time.monotonic()
    only = [k for k in os.environ.get("BENCH_ONLY", "").split(",") if k]
    groups = {s.group for s in SUBJECTS}
    unknown = set(only) - {s.key for s in SUBJECTS} - groups - {"udplb"}
    if unknown:
        sys.exit(f"bench: unknown subject(s) {', '.join(sorted(unknown))}; "
                 f"known: {', '.join(s.key for s in SUBJECTS)}; groups: "
                 f"{', '.join(sorted(groups))}")
    for exe in (LOADGEN, APP, BENCH_ROUTE):
        if not exe.exists():
            sys.exit(f"bench: {exe} is missing: build first (make build)")
    only = [("udp-lb" if k == "udplb" else k) for k in only]
    subjects = [s for s in SUBJECTS if not only or s.key in only or s.group in only]
    if not only or any(s.kind == "proxy" for s in subjects):
        subjects = [s for s in SUBJECTS if s in subjects or s.key == "direct"]
    lb_only = bool(only) and all(s.kind == "udplb" for s in subjects)
    dns_values = {}
    load_start = open("/proc/loadavg").read().split()[:3]
    tmp = tempfile.mkdtemp(prefix="etm-bench-")
    serve = None
    results, route, syscalls, lb_values, split = {}, None, None, {}, None
    try:
        cert, key = Path(tmp) / "cert.pem", Path(tmp) / "key.pem"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
                        "-subj", "/CN=proxy.test", "-addext", "subjectAltName=DNS:proxy.test",
                        "-keyout", str(key), "-out", str(cert)],
                       check=True, capture_output=True, timeout=30)
        serve = subprocess.Popen([str(LOADGEN), "serve", "--udp-echoes", str(LB_ECHOES)]
                                 + (["--gro"] if SIZES["lb_gro"] != "0" else []),
                                 stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
        targets_kv = parse_line(serve.stdout.readline())
        if not targets_kv or "sink" not in targets_kv:
            raise RuntimeError(f"loadgen serve did not start: {targets_kv}")
        base = {"SINK": targets_kv["sink"], "ECHO": targets_kv["echo"], "UDP": targets_kv["udp"],
                "CERT": cert, "KEY": key}
        for i, port in enumerate(targets_kv.get("udp_echoes", "").split(",")[:LB_ECHOES]):
            base[f"ECHO{i + 1}"] = port
        base["LB_REUSE"] = "false" if SIZES["lb_reuse"] == "0" else "true"
        log(f"targets: sink {base['SINK']}, echo {base['ECHO']}, udp {base['UDP']}, "
            f"udp echoes {targets_kv.get('udp_echoes')}")
        r = subprocess.run([str(BENCH_ROUTE)], capture_output=True, text=True, timeout=120)
        line = next((l for l in r.stdout.splitlines() if l.startswith("bench_route ")), None)
        if line:
            route = dict(tok.partition("=")[::2] for tok in line.split()[1:])
            route["_line"] = line
        log(f"route: {line}")
        for s in subjects:
            t0 = time.monotonic()
            values = dict(base, SOCKS=free_port(), SERVER=free_port(), METRICS=free_port(),
                          RELAY_SINK=free_port(),
                          RELAY_ECHO=free_port(), RELAY_UDP=free_port(socket.SOCK_DGRAM),
                          LB_SHORT=free_port(socket.SOCK_DGRAM),
                          LB_LONG=free_port(socket.SOCK_DGRAM))
            values["DNS"] = free_port(socket.SOCK_DGRAM)
            values["DNS_UPSTREAM"] = free_port(socket.SOCK_DGRAM)
            if s.kind == "udplb":
                lb_values[s.key] = values
                continue
            if s.kind == "dns":
                dns_values[s.key] = values
                continue
            results[s.key] = measure(s, values, tmp, serve.pid)
            r = results[s.key]
            log(f"{s.key}: thru {num(r.get('thru'), 'mib_s')} MiB/s, crr "
                f"{num(r.get('crr'), 'conn_s')}/s, rr p50 {num(r.get('rr'), 'p50_us', '{:.1f}')} µs,"
                f" udp {num(r.get('udp'), 'pkt_s')}/s, RSS {mib(r.get('rss_idle_kib'))}/"
                f"{mib(r.get('rss_crr_kib'))} MiB ({time.monotonic() - t0:.0f} s)"
                + (f" ERROR {r['error']}" if "error" in r else ""))
        lb_subjects = [s for s in subjects if s.kind == "udplb"]
        if lb_subjects:
            t0 = time.monotonic()
            results.update(measure_lb(lb_subjects, lb_values, tmp))
            for s in lb_subjects:
                log(f"{s.key}: {lb_summary(results[s.key])}")
            log(f"udp-lb group: {time.monotonic() - t0:.0f} s")
            cpus = sorted(os.sched_getaffinity(0))
            if os.environ.get("BENCH_LB_SPLIT", "1") == "0":
                split = None
            elif len(cpus) < 2:
                split = {"error": f"this process may run on {len(cpus)} CPU, two are needed"}
            else:
                t0 = time.monotonic()
                lb_cpu, tool_cpus = {cpus[0]}, set(cpus[1:])
                try:
                    pin_tree(serve.pid, tool_cpus)
                    try:
                        split = measure_lb(lb_subjects, lb_values, tmp, (lb_cpu, tool_cpus))
                    finally:
                        pin_tree(serve.pid, set(cpus))
                except OSError as e:  # the echoes' process went away
                    split = {"error": f"cannot pin the load tool's echoes: {e}"}
                if "error" not in split:
                    split["_cpus"] = (cpus[0], ",".join(str(c) for c in cpus[1:]))
                    for s in lb_subjects:
                        log(f"{s.key} split: {lb_summary(split[s.key])}")
                log(f"udp-lb group, split cores: {time.monotonic() - t0:.0f} s")
        dns_subjects = [s for s in subjects if s.kind == "dns"]
        if dns_subjects:
            t0 = time.monotonic()
            results.update(measure_dns(dns_subjects, dns_values, tmp))
            for s in dns_subjects:
                r = results[s.key]
                log(f"{s.key}: {num(r.get('dns'), 'pkt_s')} query/s, loss "
                    f"{num(r.get('dns'), 'loss_pct', '{:.2f}')} %, not NOERROR "
                    f"{num(r.get('dns'), 'bad')}"
                    + (f" ERROR {r['error']}" if "error" in r else ""))
            log(f"dns group: {time.monotonic() - t0:.0f} s")
        if any(s.key == "etm-udplb" for s in subjects) and \
                os.environ.get("BENCH_LB_SYSCALLS", "1") != "0":
            t0 = time.monotonic()
            syscalls = lb_syscalls()
            log(f"udplb syscalls: {syscalls.get('lines') or syscalls.get('error')} "
                f"({time.monotonic() - t0:.0f} s)")
    finally:
        if serve is not None:
            serve.terminate()
            try:
                serve.wait(5)
            except subprocess.TimeoutExpired:
                serve.kill()
                serve.wait()
        shutil.rmtree(tmp, ignore_errors=True)

    when = datetime.datetime.now(datetime.timezone.utc)
    rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True).stdout.strip() or "?"
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain",
                            "--untracked-files=no", "--", "src"],
                           capture_output=True, text=True).stdout.strip()
    meta = {
        "when": when.strftime("%Y-%m-%d %H:%M UTC"),
        "command": "make bench" + (f" BENCH_ONLY={','.join(only)}" if only else ""),
        "commit": rev + (" with uncommitted changes under src/" if dirty else ""),
        "machine": f"{os.cpu_count()} cores, Linux {os.uname().release}",
        "load_start": " ".join(load_start),
        "load_end": " ".join(open("/proc/loadavg").read().split()[:3]),
        "secs": time.monotonic() - t_start,
        "versions": ", ".join(f"{p} {dpkg_version(p)}" for p in
                              ("v2ray", "trojan", "shadowsocks-libev", "dante-server",
                               "microsocks", "nginx", "libnginx-mod-stream", "dnsmasq-base")),
    }
    body = report(results, meta, route, syscalls, split)
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = when.strftime("%Y-%m-%d") + ("-udplb" if lb_only else "-partial" if only else "") + ".md"
    (RESULTS / name).write_text(
        f"# Benchmark run {meta['when']}\n\n{body}\n\n## Raw result lines\n\n```\n"
        f"{raw_lines(results, route, split)}\n```\n")
    log(f"wrote bench/results/{name}")
    if not only:
        refresh_doc(body, name)
        log(f"refreshed {DOC.relative_to(ROOT)}")
    if any(s.kind == "proxy" for s in subjects):
        print(table(results))
    if any(s.kind == "dns" for s in subjects):
        print(dns_table(results))
    if any(s.kind == "udplb" for s in subjects):
        print(lb_table(results))
        if split and "error" not in split:
            print(lb_table(split))
    log(f"done in {meta['secs']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
