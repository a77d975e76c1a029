"""The UDP load balancer end to end (seed 001; docs/udp-lb.md): flows spread
under each selection mode, a flow sticks to its backend, health checks steer
new flows, responses = 1 closes a flow after its answer, the PROXY v2 header a
backend sees, the max_flows and per-source limits, idle flows reaped
(front_timeout and back_timeout counted apart), and reloads that change the
cluster or add and remove udp_lb inbounds.

Three echo backends run in this process (udplbkit.EchoBackend): each answers
a datagram with its name, "|" and the payload, after removing a PROXY v2
header, and listens on TCP on the same port number for the health check.
Clients are UDP sockets bound to 127.0.0.x, so a test can be several client
IPs at once on Linux loopback. The balancer's counters are read by sending
SIGUSR1 and parsing the lines it prints.

Run alone:

    ETM_APP=build/src/etemenanki-app /usr/bin/python3 -m pytest -q tests/e2e/test_udplb.py
"""
import collections
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from proxykit import stop_cleanly
from udplbkit import PPV2_SIGNATURE, Client, EchoBackend, LbApp, ScriptedBackend, lb_config

# Slack on waits for the health checker: its probes are timed by the
# process, but this host runs other test suites at the same time.
SLACK = 2.0


# ---------------------------------------------------------------- fixtures

@pytest.fixture
def backends():
    """Three echo backends, "a", "b" and "c"; closed at teardown."""
    made = [EchoBackend(name) for name in ("a", "b", "c")]
    yield made
    for b in made:
        b.close()


@pytest.fixture
def clients():
    """clients(lb_port, src_ip="127.0.0.1") -> Client; all closed at teardown."""
    made = []

    def _make(port, src_ip="127.0.0.1", dst_ip="127.0.0.1"):
        c = Client(port, src_ip, dst_ip)
        made.append(c)
        return c

    yield _make
    for c in made:
        c.close()


@pytest.fixture
def lb(app, tmp_path):
    """lb(backends, **lb_config keys) starts a balancer over backends and
    returns its LbApp. Every one still running at teardown must stop cleanly
    on SIGTERM (exit 0)."""
    started = []

    def _start(members, nofile=None, **kw):
        p = LbApp(app, tmp_path, lb_config(members, **kw), len(members), nofile=nofile)
        started.append(p)
        return p.start()

    yield _start
    stop_cleanly(started, "etemenanki-app")


def tally(names):
    return collections.Counter(names)


# ---------------------------------------------------------------- spreading

def test_round_robin_spreads_flows_evenly(lb, backends, clients):
    proxy = lb(backends, workers=1, cluster={"selection": "round_robin"})
    names = [clients(proxy.port).ask(b"hello %d" % i) for i in range(30)]
    assert tally(names) == {"a": 10, "b": 10, "c": 10}, names
    m = proxy.metrics()
    assert m["flows_created"] == 30 and m["active_flows"] == 30, m
    assert m["backends"] == {b.addr: ("up", 10) for b in backends}, m


@pytest.mark.parametrize("selection", ["hrw", "maglev"])
def test_hashed_selection_reaches_every_backend_by_source_port(selection, lb, backends, clients):
    """affinity = source_ip_port: the sockets of one IP spread too."""
    proxy = lb(backends, workers=2, cluster={"selection": selection, "affinity": "source_ip_port"})
    # 60 sockets miss a given backend with probability (2/3)^60, about 3e-11
    names = [clients(proxy.port).ask(b"port %d" % i) for i in range(60)]
    assert set(names) == {"a", "b", "c"}, tally(names)
    m = proxy.metrics()
    assert m["flows_created"] == 60, m
    assert sum(n for _, n in m["backends"].values()) == 60, m
    assert {addr: n for addr, (_, n) in m["backends"].items()} == \
        {b.addr: tally(names)[b.name] for b in backends}, m


@pytest.mark.parametrize("selection", ["hrw", "maglev"])
def test_hashed_selection_reaches_every_backend_by_source_ip(selection, lb, backends, clients):
    """affinity = source_ip (the default): different client IPs spread."""
    proxy = lb(backends, workers=2, cluster={"selection": selection})
    # 40 IPs miss a given backend with probability (2/3)^40, about 1e-7
    names = [clients(proxy.port, f"127.0.0.{10 + i}").ask(b"ip %d" % i) for i in range(40)]
    assert set(names) == {"a", "b", "c"}, tally(names)


# ---------------------------------------------------------------- stickiness

@pytest.mark.parametrize("selection", ["round_robin", "hrw", "maglev"])
def test_a_flow_sticks_to_its_backend(selection, lb, backends, clients):
    proxy = lb(backends, workers=2, cluster={"selection": selection, "affinity": "source_ip_port"})
    flows = [clients(proxy.port) for _ in range(6)]
    first = [c.ask(b"first") for c in flows]
    for round_ in range(10):
        for c, name in zip(flows, first):
            assert c.ask(b"again %d" % round_) == name
    # one flow is one upstream socket: each backend saw one sender per flow it got
    for b in backends:
        assert len(b.senders()) == first.count(b.name), (b.name, first)
    m = proxy.metrics()
    assert m["flows_created"] == 6 and m["active_flows"] == 6, m
    assert m["datagrams_to_backends"] == 66 and m["datagrams_to_clients"] == 66, m


@pytest.mark.parametrize("selection", ["hrw", "maglev"])
def test_source_ip_affinity_keeps_an_ip_on_one_backend(selection, lb, backends, clients):
    proxy = lb(backends, workers=2, cluster={"selection": selection, "affinity": "source_ip"})
    per_ip = {}
    for i in range(8):
        ip = f"127.0.0.{100 + i}"
        names = {clients(proxy.port, ip).ask(b"from %s #%d" % (ip.encode(), k)) for k in range(5)}
        assert len(names) == 1, (ip, names)
        per_ip[ip] = names.pop()
    m = proxy.metrics()
    assert m["flows_created"] == 40 and m["active_flows"] == 40, m
    # and again later, from new sockets: the same backend per IP
    for ip, name in per_ip.items():
        assert clients(proxy.port, ip).ask(b"later") == name, ip


# ---------------------------------------------------------------- health

def test_health_steers_new_flows(lb, backends, clients):
    a, b, c = backends
    proxy = lb(backends, workers=1, cluster={"selection": "round_robin"},
               health={"interval": 1, "timeout": 1, "rise": 2, "fall": 2})
    old = {}
    for _ in range(3):
        client = clients(proxy.port)
        old[client.ask(b"old")] = client
    assert set(old) == {"a", "b", "c"}

    b.close_health()
    proxy.wait_line(f"udp_lb cluster pool: backend {b.addr} is now down", timeout=2 + SLACK)
    m = proxy.metrics()
    assert m["backends"][b.addr][0] == "down", m
    assert m["backends"][a.addr][0] == "up" and m["backends"][c.addr][0] == "up", m
    names = [clients(proxy.port).ask(b"while b is down") for _ in range(12)]
    assert tally(names) == {"a": 6, "c": 6}, names
    # health steers only new flows: the flow already on b stays there
    assert old["b"].ask(b"still on b") == "b"

    b.open_health()
    proxy.wait_line(f"udp_lb cluster pool: backend {b.addr} is now up", timeout=2 + SLACK)
    assert proxy.metrics()["backends"][b.addr][0] == "up"
    names = [clients(proxy.port).ask(b"b is back") for _ in range(12)]
    assert tally(names) == {"a": 4, "b": 4, "c": 4}, names
    for other in (a, c):
        assert not proxy.lines_with(f"backend {other.addr} is now"), proxy.log()
    assert len(proxy.lines_with(f"backend {b.addr} is now down")) == 1, proxy.log()


# ---------------------------------------------------------------- caps

def test_responses_one_closes_the_flow_after_the_answer(lb, backends, clients):
    proxy = lb(backends, workers=1, cluster={"responses": 1})
    client = clients(proxy.port)
    first = client.ask(b"query 1")
    m = proxy.wait_metrics(lambda m: m["active_flows"] == 0)
    assert m["flows_created"] == 1 and m["flows_evicted"] == 1, m
    assert m["evicted"]["responses"] == 1 and m["evicted"]["idle"] == 0, m
    # the same socket again: a new flow (the default affinity keeps its backend)
    assert client.ask(b"query 2") == first
    m = proxy.wait_metrics(lambda m: m["active_flows"] == 0)
    assert m["flows_created"] == 2 and m["evicted"]["responses"] == 2, m
    assert m["datagrams_to_backends"] == 2 and m["datagrams_to_clients"] == 2, m


# ---------------------------------------------------------------- PROXY v2

def check_ppv2(header, raw, client, proxy):
    """The fixed 16 bytes by hand, then the IPv4 address block."""
    assert raw[:12] == PPV2_SIGNATURE, raw
    assert raw[12] == 0x21, raw  # version 2, PROXY
    assert raw[13] == 0x12, raw  # AF_INET, DGRAM
    assert int.from_bytes(raw[14:16], "big") == 12, raw
    assert header["src"] == client.addr, header
    assert header["dst"] == ("127.0.0.1", proxy.port), header


@pytest.mark.parametrize("mode", ["first", "every"])
def test_backend_sees_a_proxy_v2_header(mode, lb, backends, clients):
    a = backends[0]
    proxy = lb([a], workers=1, cluster={"proxy_protocol": mode})
    # two flows from client IPs that are not the listener's
    flows = [clients(proxy.port, "127.0.0.7"), clients(proxy.port, "127.0.0.8")]
    for c in flows:
        for payload in (b"one", b"two", b"three"):
            assert c.ask(payload) == "a"  # the echo carries no header back
    got = a.datagrams()
    assert len(got) == 6, got
    # each flow is one upstream socket; its first datagram names its client
    by_sender = collections.defaultdict(list)
    for sender, raw, header in got:
        by_sender[sender].append((raw, header))
    assert len(by_sender) == 2, by_sender
    by_client = {seen[0][1]["src"]: seen for seen in by_sender.values() if seen[0][1]}
    assert set(by_client) == {c.addr for c in flows}, by_sender
    for c in flows:
        for k, (raw, header) in enumerate(by_client[c.addr]):
            payload = (b"one", b"two", b"three")[k]
            if mode == "every" or k == 0:
                assert header is not None, (k, raw)
                check_ppv2(header, raw, c, proxy)
                assert raw == header["raw"] + payload and len(header["raw"]) == 28, raw
            else:
                assert header is None and raw == payload, (k, raw)
    m = proxy.metrics()
    # byte counters leave the PROXY header out
    assert m["bytes_to_backends"] == 2 * len(b"onetwothree"), m


# ---------------------------------------------------------------- limits

def test_max_flows_sheds_new_sources_and_keeps_existing_flows(lb, backends, clients):
    proxy = lb(backends, workers=1, inbound={"max_flows": 4}, cluster={"selection": "round_robin"})
    kept = [clients(proxy.port) for _ in range(4)]
    names = [c.ask(b"in") for c in kept]
    for _ in range(2):
        clients(proxy.port).silent(b"over the cap")
    m = proxy.wait_metrics(lambda m: m["drops"]["shed_max_flows"] >= 2)
    assert m["drops"]["shed_max_flows"] == 2 and m["flows_shed"] == 2, m
    assert m["active_flows"] == 4 and m["flows_created"] == 4, m
    for c, name in zip(kept, names):
        assert c.ask(b"still in") == name
    m = proxy.metrics()
    assert m["active_flows"] == 4 and m["drops"]["shed_max_flows"] == 2, m


def test_per_ip_and_per_subnet_limits_shed_new_sources(lb, backends, clients):
    proxy = lb(backends, workers=1,
               cluster={"max_flows_per_ip": 2, "max_flows_per_subnet": 3, "subnet_prefix_v4": 24})
    kept = [clients(proxy.port, "127.0.0.2"), clients(proxy.port, "127.0.0.2")]
    names = [c.ask(b"in") for c in kept]
    clients(proxy.port, "127.0.0.2").silent(b"third from one IP")
    m = proxy.wait_metrics(lambda m: m["drops"]["shed_per_ip"] >= 1)
    assert m["drops"]["shed_per_ip"] == 1 and m["drops"]["shed_per_subnet"] == 0, m

    # another IP of the same /24 gets the subnet's third flow, not a fourth
    kept.append(clients(proxy.port, "127.0.0.3"))
    names.append(kept[-1].ask(b"in"))
    clients(proxy.port, "127.0.0.3").silent(b"fourth from one /24")
    clients(proxy.port, "127.0.0.4").silent(b"fifth from one /24")
    m = proxy.wait_metrics(lambda m: m["drops"]["shed_per_subnet"] >= 2)
    assert m["drops"]["shed_per_subnet"] == 2 and m["drops"]["shed_per_ip"] == 1, m

    # another /24 is not limited by this one
    kept.append(clients(proxy.port, "127.0.1.2"))
    names.append(kept[-1].ask(b"in"))
    for c, name in zip(kept, names):
        assert c.ask(b"still in") == name
    m = proxy.metrics()
    assert m["active_flows"] == 4 and m["flows_created"] == 4, m
    assert m["flows_shed"] == 3 and m["drops"]["shed_max_flows"] == 0, m


# ---------------------------------------------------------------- idle

def test_idle_flows_are_reaped(lb, backends, clients):
    proxy = lb(backends, workers=1, cluster={"idle_timeout": 1})
    flows = [clients(proxy.port) for _ in range(5)]
    names = [c.ask(b"once") for c in flows]
    m = proxy.metrics()
    assert m["flows_created"] == 5, m
    m = proxy.wait_metrics(lambda m: m["active_flows"] == 0, timeout=4.0)
    assert m["evicted"]["idle"] == 5 and m["flows_evicted"] == 5, m
    # each flow lived at least its idle timeout after its last datagram
    assert m["flow_duration_ms"] >= 5 * 1000, m
    # a reaped flow's socket speaks again: a new flow
    assert flows[0].ask(b"back") == names[0]
    m = proxy.metrics()
    assert m["flows_created"] == 6 and m["active_flows"] == 1, m


class SilentBackend(ScriptedBackend):
    """Hears every datagram and answers none, as a backend whose service
    stopped while its port stayed bound."""

    def answer(self, data, src):
        pass


class PushBackend(ScriptedBackend):
    """Answers a flow's first datagram with `count` datagrams `every`
    seconds apart, as a server pushing state to a quiet client; `pushed`
    holds the time.monotonic() of each send."""

    def __init__(self, count, every):
        self.count, self.every, self.pushed = count, every, []
        super().__init__()

    def answer(self, data, src):
        for i in range(self.count):
            if i:
                time.sleep(self.every)
            self.sock.sendto(b"push|%d" % i, src)
            self.pushed.append(time.monotonic())


def test_front_timeout_alone_holds_a_flow_whose_backend_never_answers(lb, clients):
    """front_timeout = 1, back_timeout = 30: a client that keeps sending to
    a backend that never answers keeps its one flow (each datagram counts
    front_timeout again); once it stops, the flow ends front_timeout after
    its last datagram. back_timeout counts only from a backend datagram, so
    its 30 s never hold this flow (seed 001 section 7: each datagram pushes
    the flow's one idle deadline by its direction's timeout)."""
    backend = SilentBackend()
    try:
        proxy = lb([backend.addr], workers=1, cluster={"front_timeout": 1, "back_timeout": 30})
        c = clients(proxy.port)
        sent = []
        while not sent or sent[-1] - sent[0] < 2.0:  # twice front_timeout
            sent.append(time.monotonic())
            c.silent(b"anyone?", wait=0.25)
        m = proxy.metrics()
        assert m["flows_created"] == 1 and m["active_flows"] == 1, m
        m = proxy.wait_metrics(lambda m: m["active_flows"] == 0, timeout=1 + SLACK)
        assert m["evicted"]["idle"] == 1 and m["datagrams_to_clients"] == 0, m
        lived = (sent[-1] - sent[0]) * 1000 + 1000  # the traffic, then front_timeout
        assert lived - 100 <= m["flow_duration_ms"] < lived + SLACK * 1000, (lived, m)
    finally:
        backend.close()


def test_back_timeout_holds_a_flow_while_its_backend_pushes(lb, clients):
    """front_timeout = 1, back_timeout = 2: one client datagram, then the
    backend pushes six datagrams 0.3 s apart to the quiet client. The flow
    lives on the backend's datagrams and ends back_timeout after the last
    push, long after front_timeout ran out."""
    backend = PushBackend(count=6, every=0.3)
    try:
        proxy = lb([backend.addr], workers=1, cluster={"front_timeout": 1, "back_timeout": 2})
        c = clients(proxy.port)
        c.send(b"subscribe")
        assert [c.recv() for _ in range(6)] == [("push", b"%d" % i) for i in range(6)]
        m = proxy.wait_metrics(lambda m: m["active_flows"] == 0, timeout=2 + SLACK)
        assert m["flows_created"] == 1 and m["evicted"]["idle"] == 1, m
        lived = (backend.pushed[-1] - backend.pushed[0]) * 1000 + 2000  # pushes, back_timeout
        assert lived - 100 <= m["flow_duration_ms"] < lived + SLACK * 1000, (lived, m)
    finally:
        backend.close()


def test_per_ip_limit_is_exact_across_workers(lb, backends, clients):
    """Two workers: the kernel hands each client IP to one worker (the
    listener's BPF steering), so max_flows_per_ip counts all of an IP's
    flows, whichever source ports they use."""
    proxy = lb(backends, workers=2, cluster={"max_flows_per_ip": 2})
    kept = []
    for ip in ("127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"):
        for _ in range(2):
            kept.append(clients(proxy.port, ip))
            kept[-1].ask(b"in")
        for _ in range(2):
            clients(proxy.port, ip).silent(b"over the per-IP limit", wait=0.05)
    m = proxy.wait_metrics(lambda m: m["drops"]["shed_per_ip"] >= 8)
    assert m["drops"]["shed_per_ip"] == 8 and m["active_flows"] == 8, m


def test_per_subnet_limit_is_exact_across_workers(lb, backends, clients):
    """Two workers and a per-subnet limit: the listener steers by the
    client's /24, so one worker holds all of a subnet's flows and the limit
    counts them all (steered by IP, 127.0.0.2 and .3 would land on
    different workers and the subnet would get 2 flows on each)."""
    proxy = lb(backends, workers=2,
               cluster={"max_flows_per_subnet": 2, "subnet_prefix_v4": 24})
    kept = []
    for net in ("127.0.0", "127.0.1"):
        for host in (2, 3):
            kept.append(clients(proxy.port, "%s.%d" % (net, host)))
            kept[-1].ask(b"in")
        for host in (4, 5, 6, 7):
            clients(proxy.port, "%s.%d" % (net, host)).silent(b"over", wait=0.05)
    m = proxy.wait_metrics(lambda m: m["drops"]["shed_per_subnet"] >= 8)
    assert m["drops"]["shed_per_subnet"] == 8 and m["active_flows"] == 4, m
    for c in kept:  # the admitted flows keep working
        assert c.ask(b"still") in {"a", "b", "c"}


def test_out_of_file_descriptors_aborts_the_flow_not_the_process(lb, backends, clients):
    """EMFILE when a flow's socket opens: the flow is aborted and its slot
    freed (open_failed, evicted aborted), the datagram is lost, the process
    and the flows it holds go on, and new flows work again once descriptors
    are back."""
    # max_flows set above the descriptors (the automatic one, 70 % of them,
    # would shed these flows before a socket could fail)
    proxy = lb(backends, nofile=48, workers=1, inbound={"max_flows": 200},
               cluster={"idle_timeout": 1})
    kept = clients(proxy.port)
    name = kept.ask(b"first")
    extra = []
    for i in range(60):  # more flows than the descriptors left
        c = clients(proxy.port, "127.0.2.%d" % (i + 2))
        c.send(b"fill %d" % i)
        extra.append(c)
    m = proxy.wait_metrics(lambda m: m["flows_created"] >= 61)
    assert m["drops"]["open_failed"] > 0, m
    assert m["evicted"]["aborted"] == m["drops"]["open_failed"], m
    assert kept.ask(b"still here") == name
    # the idle flows go, their descriptors with them; then new flows open
    proxy.wait_metrics(lambda m: m["active_flows"] == 0, timeout=6.0)
    assert clients(proxy.port, "127.0.3.2").ask(b"after") in {"a", "b", "c"}
    assert proxy.proc.poll() is None


def test_a_datagram_over_max_rx_is_dropped_as_truncated(lb, backends, clients):
    proxy = lb(backends, workers=1, inbound={"max_rx_datagram_size": 100})
    c = clients(proxy.port)
    assert c.ask(b"x" * 90) in {"a", "b", "c"}  # the 92-byte reply fits too
    c.silent(b"y" * 101)
    m = proxy.wait_metrics(lambda m: m["drops"]["truncated"] >= 1)
    assert m["drops"]["truncated"] == 1 and m["datagrams_to_backends"] == 1, m


def test_automatic_max_flows_is_70_percent_of_the_open_files_limit(lb, backends, clients):
    proxy = lb(backends, nofile=100, workers=1)  # max_flows = 0: automatic, 70 flows
    for i in range(80):
        clients(proxy.port, "127.0.4.%d" % (i + 2)).send(b"flow %d" % i)
    m = proxy.wait_metrics(lambda m: m["flows_created"] + m["flows_shed"] >= 80)
    assert m["flows_created"] == 70 and m["drops"]["shed_max_flows"] == 10, m
    assert m["drops"]["open_failed"] == 0, m


def test_a_burst_keeps_its_order_and_headers_per_flow(lb, backends, clients):
    """Datagrams that arrive together leave together (one sendmmsg per flow
    per receive batch): each flow's order is kept, every datagram carries
    its PROXY v2 header under "every", and every reply comes back."""
    proxy = lb(backends[:1], workers=1, cluster={"proxy_protocol": "every"})
    socks = [clients(proxy.port, "127.0.0.%d" % (i + 2)) for i in range(3)]
    for k in range(40):  # interleaved bursts from three flows
        for i, c in enumerate(socks):
            c.send(b"%d:%03d" % (i, k))
    for c in socks:
        got = [c.recv() for _ in range(40)]
        assert None not in got, got
    seen = {}
    for src, data, header in backends[0].datagrams():
        assert header and not header.get("bad"), data
        seen.setdefault(header["src"], []).append(data[-5:])
    assert len(seen) == 3, seen.keys()
    for i, (client, payloads) in enumerate(sorted(seen.items())):
        assert payloads == [b"%d:%03d" % (i, k) for k in range(40)], (client, payloads)
    m = proxy.metrics()
    assert m["datagrams_to_backends"] == 120 and m["datagrams_to_clients"] == 120, m


def test_a_wildcard_listener_answers_from_the_address_sent_to(lb, backends, clients):
    """listen = "0.0.0.0": IP_PKTINFO tells which local address a datagram
    reached; the reply leaves from it (Client checks the reply's source)
    and the PROXY v2 destination names it. Loopback addresses only."""
    proxy = lb(backends[:1], workers=2, listen="0.0.0.0", cluster={"proxy_protocol": "every"})
    for dst in ("127.0.0.1", "127.0.0.2", "127.0.0.3"):
        c = clients(proxy.port, "127.0.0.9", dst)
        assert c.ask(b"to " + dst.encode()) == "a"
        src, data, header = backends[0].datagrams()[-1]
        assert header["dst"] == (dst, proxy.port), header
        assert header["src"] == c.addr, header


def test_link_local_clients_on_two_links_are_two_clients(app, tmp_path):
    """fe80::10 on one link and fe80::10 on another are two hosts: a
    wildcard [::] listener keys them apart by their scope (the interface
    index), counts them as two IPs for max_flows_per_ip = 1, and answers
    each on its own link from the address it sent to. Needs two links, so
    udplb_linklocal.py runs in a network namespace of its own (unshare -n,
    as root) with a veth pair."""
    script = Path(__file__).with_name("udplb_linklocal.py")
    r = subprocess.run(["unshare", "-n", sys.executable, str(script), app, str(tmp_path)],
                       capture_output=True, text=True, timeout=60,
                       cwd=script.parent, env={**os.environ, "PYTHONPATH": str(script.parent)})
    assert r.returncode == 0 and "link-local ok" in r.stdout, r.stdout + r.stderr


def test_the_udp_probe_alone_marks_a_silent_backend_down(lb, backends, clients):
    """tcp_port = 0 and udp_payload_hex: the probe is a datagram (any bytes,
    NUL included) that needs any reply. The echo answers it; a port nobody listens on does not (ICMP
    port unreachable), so that backend goes down and gets no new flows."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    probe.bind(("127.0.0.1", 0))
    dead = "127.0.0.1:%d" % probe.getsockname()[1]
    probe.close()
    proxy = lb([backends[0], dead], workers=1, cluster={"selection": "round_robin"},
               health={"tcp_port": 0, "udp_payload_hex": "12 34 00 00 ff", "interval": 1,
                       "timeout": 1, "rise": 1, "fall": 1})
    proxy.wait_line(f"udp_lb cluster pool: backend {dead} is now down", timeout=5.0)
    assert not proxy.lines_with(f"backend {backends[0].addr} is now down")
    names = [clients(proxy.port).ask(b"after %d" % i) for i in range(6)]
    assert names == ["a"] * 6, names
    assert any(data == b"\x12\x34\x00\x00\xff" for _, data, _ in backends[0].datagrams())


def test_an_icmp_refusal_from_a_backend_counts_as_send_error(lb, clients):
    """A backend port with nothing on it answers with ICMP port unreachable;
    the flow's socket reports it, and it is counted (send_error), so a dead
    backend shows in the metrics even without health checks."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    probe.bind(("127.0.0.1", 0))
    dead = "127.0.0.1:%d" % probe.getsockname()[1]
    probe.close()
    proxy = lb([dead], workers=1)
    c = clients(proxy.port)
    for i in range(3):
        c.silent(b"anyone? %d" % i, wait=0.05)
    m = proxy.wait_metrics(lambda m: m["drops"]["send_error"] >= 1)
    assert m["datagrams_to_clients"] == 0 and m["flows_created"] == 1, m


# ---------------------------------------------------------------- GSO trains from a backend

UDP_SEGMENT = 103  # linux/udp.h: the segment size of a GSO send


class TrainBackend(ScriptedBackend):
    """A backend that answers b"train <burst> N" with one GSO send
    (UDP_SEGMENT) of N datagrams: N - 1 of 100 bytes and a shorter last one
    of 40, each starting with its number, as a QUIC server sends a burst. A
    socket that takes coalesced trains (UDP_GRO) gets the burst as one
    message and must cut it back into the N datagrams."""

    @staticmethod
    def datagram(burst, i, n):
        head = b"%d.%d|" % (burst, i)
        return head + b"x" * ((40 if i == n - 1 else 100) - len(head))

    def answer(self, data, src):
        burst, n = (int(x) for x in data.split()[1:3])
        train = b"".join(self.datagram(burst, i, n) for i in range(n))
        self.sock.sendmsg([train], [(socket.SOL_UDP, UDP_SEGMENT, struct.pack("=H", 100))], 0,
                          src)


@pytest.fixture
def train_backend():
    b = TrainBackend()
    yield b
    b.close()


def read_burst(client, count):
    client.sock.settimeout(2.0)
    got = []
    for _ in range(count):
        data, src = client.sock.recvfrom(65536)
        assert src == client.lb, src
        got.append(data)
    return got


def test_a_burst_sent_as_one_gso_train_reaches_the_client_datagram_by_datagram(
        lb, train_backend, clients):
    """The first burst arrives cut into datagrams (the flow's socket takes
    no trains yet) and shows the backend bursts; from then on the flow's
    socket takes trains, and the balancer cuts each back into its datagrams,
    the short last one included, in order."""
    proxy = lb([train_backend.addr], workers=1)
    c = clients(proxy.port)
    total = 0
    for burst, n in enumerate((4, 7, 7, 1, 12)):
        c.send(b"train %d %d" % (burst, n))
        got = read_burst(c, n)
        assert got == [TrainBackend.datagram(burst, i, n) for i in range(n)], (burst, got)
        total += n
    c.sock.settimeout(0.2)
    with pytest.raises(socket.timeout):
        c.sock.recvfrom(65536)
    m = proxy.wait_metrics(lambda m: m["datagrams_to_clients"] == total)
    assert m["bytes_to_clients"] == sum(100 * (n - 1) + 40 for n in (4, 7, 7, 1, 12)), m
    assert m["flows_created"] == 1 and m["datagrams_to_backends"] == 5, m
    assert all(v == 0 for v in m["drops"].values()), m


def test_a_responses_cap_ends_the_flow_inside_a_train(lb, train_backend, clients):
    """responses = 6: a burst of 4 (which turns on trains for the flow),
    then a train of 5 of which only 2 may pass; the flow ends there and the
    rest of the train is dropped, never sent."""
    proxy = lb([train_backend.addr], workers=1, cluster={"responses": 6})
    c = clients(proxy.port)
    c.send(b"train 0 4")
    assert read_burst(c, 4) == [TrainBackend.datagram(0, i, 4) for i in range(4)]
    c.send(b"train 1 5")
    assert read_burst(c, 2) == [TrainBackend.datagram(1, i, 5) for i in range(2)]
    c.sock.settimeout(0.3)
    with pytest.raises(socket.timeout):
        c.sock.recvfrom(65536)
    m = proxy.wait_metrics(lambda m: m["active_flows"] == 0)
    assert m["evicted"]["responses"] == 1 and m["datagrams_to_clients"] == 6, m
    assert m["drops"]["unknown_flow"] <= 3, m


def send_train(client, payloads, seg):
    """Sends payloads (each seg bytes, the last maybe shorter) as one GSO
    send: a client that takes trains (UDP_GRO on the listener) gets them as
    one message and must cut it back into the datagrams."""
    client.sock.sendmsg([b"".join(payloads)], [(socket.SOL_UDP, UDP_SEGMENT,
                                                struct.pack("=H", seg))], 0, client.lb)


def test_a_client_burst_sent_as_one_gso_train_is_forwarded_datagram_by_datagram(
        lb, backends, clients):
    """Every datagram of the train reaches the backend on its own, in
    order, each with its PROXY v2 header, and each is answered."""
    proxy = lb(backends[:1], workers=1, cluster={"proxy_protocol": "every"})
    c = clients(proxy.port)
    payloads = [b"%02d" % i + b"q" * 58 for i in range(9)] + [b"09-short"]
    send_train(c, payloads, 60)
    got = [c.recv() for _ in payloads]
    assert got == [("a", p) for p in payloads], got
    seen = backends[0].datagrams()
    assert [h["src"] for _, _, h in seen] == [c.addr] * len(payloads), seen
    assert [d[-len(p):] for (_, d, _), p in zip(seen, payloads)] == payloads, seen
    m = proxy.wait_metrics(lambda m: m["datagrams_to_clients"] == len(payloads))
    assert m["flows_created"] == 1 and m["datagrams_to_backends"] == len(payloads), m
    assert m["bytes_to_backends"] == sum(map(len, payloads)), m


def test_max_rx_applies_to_each_datagram_of_a_client_train(lb, backends, clients):
    """max_rx_datagram_size = 50: a train of 60-byte datagrams is dropped
    datagram by datagram as truncated (the train's length is not what is
    measured), and a train of 40-byte ones passes."""
    proxy = lb(backends[:1], workers=1, inbound={"max_rx_datagram_size": 50})
    c = clients(proxy.port)
    send_train(c, [b"L" * 60] * 4, 60)
    m = proxy.wait_metrics(lambda m: m["drops"]["truncated"] == 4)
    assert m["datagrams_to_backends"] == 0, m
    small = [b"%d" % i + b"s" * 39 for i in range(5)]
    send_train(c, small, 40)
    assert [c.recv() for _ in small] == [("a", p) for p in small]
    m = proxy.wait_metrics(lambda m: m["datagrams_to_clients"] == 5)
    assert m["drops"]["truncated"] == 4 and m["datagrams_to_backends"] == 5, m


# ---------------------------------------------------------------- reused upstream sockets

def test_reused_upstream_sockets_carry_later_flows_to_the_same_backend(lb, backends, clients):
    """reuse_upstream_sockets with responses = 1: a flow that got its answer
    leaves its socket for the next flow to that backend once it has been
    quiet for 50 ms, so the backend sees one source port for the clients in
    turn, and each client gets its own answer."""
    proxy = lb(backends[:1], workers=1,
               cluster={"responses": 1, "reuse_upstream_sockets": True})
    for i in range(4):
        c = clients(proxy.port, "127.0.0.%d" % (i + 2))
        assert c.ask(b"query %d" % i) == "a"
        proxy.wait_metrics(lambda m: m["active_flows"] == 0)
        time.sleep(0.12)  # past the quiet time
    assert len(backends[0].senders()) == 1, backends[0].senders()
    m = proxy.metrics()
    assert m["sockets_reused"] == 3 and m["flows_created"] == 4, m
    assert m["evicted"]["responses"] == 4 and m["drops"]["unknown_flow"] == 0, m


def reusing_balancer_after_one_flow(lb, clients, backend, name):
    """A balancer over one ScriptedBackend with responses = 1 and
    reuse_upstream_sockets, after one flow from 127.0.0.2 asked b"q1" and
    got its answer from `name`: (the LbApp, that client)."""
    proxy = lb([backend.addr], workers=1,
               cluster={"responses": 1, "reuse_upstream_sockets": True})
    first = clients(proxy.port, "127.0.0.2")
    first.send(b"q1")
    assert first.recv() == (name, b"q1")
    return proxy, first


class TwiceBackend(ScriptedBackend):
    """Answers each datagram twice: at once, and again `later` seconds on,
    as a server that got a query twice (or repeats its answer) would."""

    def __init__(self, later):
        self.later = later
        super().__init__()

    def answer(self, data, src):
        self.sock.sendto(b"twice|" + data, src)
        time.sleep(self.later)
        self.sock.sendto(b"twice|again " + data, src)


@pytest.mark.parametrize("later", [0.0, 0.01])
def test_a_socket_that_hears_from_its_backend_after_its_flow_is_closed_not_reused(
        later, lb, clients):
    """The backend's second answer comes after the flow ended with the first
    (responses = 1), at once (both may come in one read) or 10 ms later: no
    client gets it, it counts as unknown_flow, and the socket is closed
    instead of handed to the next flow."""
    b = TwiceBackend(later)
    try:
        proxy, first = reusing_balancer_after_one_flow(lb, clients, b, "twice")
        proxy.wait_metrics(lambda m: m["drops"]["unknown_flow"] == 1)
        time.sleep(0.12)
        second = clients(proxy.port, "127.0.0.3")
        second.send(b"q2")
        assert second.recv() == ("twice", b"q2")
        assert first.recv(0.2) is None and second.recv(0.2) is None
        assert len(b.senders) == 2, b.senders
        m = proxy.metrics()
        assert m["sockets_reused"] == 0 and m["flows_created"] == 2, m
        assert m["drops"]["unknown_flow"] == 2, m
    finally:
        b.close()


class NamedBackend(ScriptedBackend):
    """Answers each datagram once, at once, with b"b|" in front."""

    def answer(self, data, src):
        self.sock.sendto(b"b|" + data, src)


def wait_stopped(pid, timeout=5.0):
    """Waits until every thread of process pid is stopped (SIGSTOP takes
    effect when each thread is next scheduled, not when kill returns)."""
    deadline = time.monotonic() + timeout
    while True:
        states = []
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                states.append((task / "stat").read_text().rsplit(")", 1)[1].split()[0])
            except OSError:
                pass  # a thread that just ended
        if states and all(st in ("T", "t") for st in states):
            return
        assert time.monotonic() < deadline, f"process {pid} not stopped: {states}"
        time.sleep(0.005)


def test_a_stray_that_comes_with_the_flow_that_would_take_its_socket_retires_it(lb, clients):
    """A waiting socket's backend sends it a stray in the same turn of the
    loop as a new client's datagram that would take that socket: the
    balancer is stopped (SIGSTOP) while the client's datagram and then the
    stray arrive, so one epoll_wait reports the listener first. The new
    flow must not take the socket (its first reply would be the stray): the
    stray counts as unknown_flow and the client gets its own answer."""
    b = NamedBackend()
    try:
        proxy, first = reusing_balancer_after_one_flow(lb, clients, b, "b")
        proxy.wait_metrics(lambda m: m["active_flows"] == 0)
        time.sleep(0.12)  # past the quiet time: the socket may be taken
        (waiting,) = b.senders
        second = clients(proxy.port, "127.0.0.3")
        os.kill(proxy.proc.pid, signal.SIGSTOP)
        try:
            wait_stopped(proxy.proc.pid)
            second.send(b"q2")
            time.sleep(0.02)
            b.sock.sendto(b"b|stray", waiting)
            time.sleep(0.02)
        finally:
            os.kill(proxy.proc.pid, signal.SIGCONT)
        assert second.recv() == ("b", b"q2")
        assert second.recv(0.2) is None and first.recv(0.1) is None
        m = proxy.wait_metrics(lambda m: m["drops"]["unknown_flow"] == 1)
        assert m["sockets_reused"] == 0 and m["flows_created"] == 2, m
        assert len(b.senders) == 2, b.senders
    finally:
        b.close()


class DelayBackend(ScriptedBackend):
    """Answers b"<secs> <text>" with b"delay|" + the datagram, secs later
    (each answer on its own timer, so a slow one does not hold up the
    rest)."""

    def __init__(self):
        self.timers = []
        super().__init__()

    def _send(self, data, src):
        try:
            self.sock.sendto(b"delay|" + data, src)
        except OSError:
            pass

    def answer(self, data, src):
        t = threading.Timer(float(data.split()[0]), self._send, (data, src))
        self.timers.append(t)
        t.start()

    def close(self):
        for t in self.timers:
            t.cancel()
        super().close()


def test_a_flow_with_an_answer_still_owed_does_not_hand_its_socket_on(lb, clients):
    """Two queries in one flow (one GSO train, so one read) and responses =
    1: the first answer ends the flow while the second is still owed, so
    the socket is closed rather than kept. The owed answer comes 0.4 s
    later, while a later client's flow is open: it must not reach that
    client, as it would if the socket had gone to that flow."""
    b = DelayBackend()
    try:
        proxy = lb([b.addr], workers=1,
                   cluster={"responses": 1, "reuse_upstream_sockets": True})
        first = clients(proxy.port, "127.0.0.2")
        send_train(first, [b"0.0 query-a", b"0.4 query-b"], 11)
        assert first.recv() == ("delay", b"0.0 query-a")
        m = proxy.wait_metrics(lambda m: m["active_flows"] == 0)
        assert m["flows_created"] == 1 and m["datagrams_to_backends"] == 2, m
        time.sleep(0.12)  # past the quiet time
        second = clients(proxy.port, "127.0.0.3")
        second.send(b"0.6 query-c")
        assert second.recv(3.0) == ("delay", b"0.6 query-c")
        assert second.recv(0.2) is None and first.recv(0.1) is None
        assert len(b.senders) == 2, b.senders
        m = proxy.metrics()
        assert m["sockets_reused"] == 0 and m["datagrams_to_clients"] == 2, m
    finally:
        b.close()


# ---------------------------------------------------------------- reloads (issue 16)

RELOAD_CLUSTER = "config reload: changed inbounds, clusters"


class Asker:
    """Keeps asking through every client, one after the other, in a thread,
    until stop(): records which backend answered each client each time and
    every question left without an answer."""

    def __init__(self, flows):
        self.flows = flows
        self.seen = collections.defaultdict(set)
        self.asked = 0
        self.unanswered = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        n = 0
        while not self._stop.is_set():
            for i, c in enumerate(self.flows):
                payload = b"q%d" % n
                n += 1
                c.send(payload)
                got = c.recv(2.0)
                if got is None or got[1] != payload:
                    self.unanswered.append((i, payload, got))
                    continue
                self.seen[i].add(got[0])
                self.asked += 1

    def stop(self):
        self._stop.set()
        self._thread.join(10)


def test_a_udp_lb_listener_keeps_every_flow_through_20_reloads_that_change_its_cluster(
        lb, backends, clients):
    """Issue 16: twenty saves of the config, each changing the cluster (a
    third backend added and removed again, b's weight, the health checks'
    rise), while twelve flows from four client IPs, so on both workers, keep
    talking: every datagram is answered, by the backend the flow started
    on, and no flow ends or is opened again."""
    a, b, c = backends
    health = {"interval": 1, "timeout": 1, "rise": 2, "fall": 2}

    def text(i):
        members = [a, f"{b.addr} weight={1 + i % 3}"] + ([c] if i % 2 else [])
        return lb_config(members, workers=2, cluster={"selection": "hrw"},
                         health=dict(health, rise=2 + i % 2)), len(members)

    proxy = lb([a, b], workers=2, cluster={"selection": "hrw"}, health=health)
    flows = [clients(proxy.port, "127.0.0.%d" % (2 + i % 4)) for i in range(12)]
    started_on = [f.ask(b"hello") for f in flows]
    assert set(started_on) <= {"a", "b"}, started_on
    asker = Asker(flows)
    try:
        for i in range(1, 21):
            body, n = text(i)
            assert proxy.reload(body, n_backends=n) == RELOAD_CLUSTER, proxy.log()
            time.sleep(0.05)  # a few questions between two saves
    finally:
        asker.stop()
    assert not asker.unanswered, asker.unanswered[:5]
    assert asker.asked >= 12 * 20, asker.asked
    for i, names in asker.seen.items():
        assert names == {started_on[i]}, (i, names, started_on[i])
    m = proxy.metrics()
    assert m["flows_created"] == 12 and m["active_flows"] == 12, m
    assert sum(m["evicted"].values()) == 0, m
    assert sum(m["drops"].values()) == 0, m
    assert set(m["backends"]) == {a.addr, b.addr}, m  # the last save has no c
    assert not proxy.lines_with("is now down"), proxy.log()


def test_a_removed_backends_flows_end_and_new_flows_go_to_the_others(lb, backends, clients):
    """A reload that removes c ends c's flow at once (evicted removed): its
    client's next datagram opens a new flow on a or b and c hears nothing
    more; the flows on a and b keep their backend; new flows spread over
    the backends that stay."""
    a, b, c = backends
    proxy = lb(backends, workers=1, cluster={"selection": "round_robin"})
    flows = [clients(proxy.port) for _ in range(3)]
    on = {f.ask(b"first"): f for f in flows}
    assert set(on) == {"a", "b", "c"}
    heard_by_c = len(c.datagrams())

    line = proxy.reload(lb_config([a, b], workers=1, cluster={"selection": "round_robin"}),
                        n_backends=2)
    assert line == RELOAD_CLUSTER, proxy.log()
    m = proxy.metrics()
    assert m["evicted"]["removed"] == 1 and m["active_flows"] == 2, m
    assert set(m["backends"]) == {a.addr, b.addr}, m
    assert m["backends"][a.addr][1] == 1 and m["backends"][b.addr][1] == 1, m  # counts kept

    assert on["a"].ask(b"still") == "a"
    assert on["b"].ask(b"still") == "b"
    assert on["c"].ask(b"moved") in {"a", "b"}
    names = [clients(proxy.port).ask(b"new") for _ in range(6)]
    assert tally(names) == {"a": 3, "b": 3}, names
    assert len(c.datagrams()) == heard_by_c
    m = proxy.metrics()
    assert m["flows_created"] == 3 + 1 + 6 and m["active_flows"] == 9, m


def test_a_udp_lb_inbound_added_by_a_reload_serves_traffic(lb, backends, clients):
    """A reload adds a second udp_lb inbound with a cluster of its own: it
    listens and serves at once while the first keeps its flow; a later
    reload removes it again: it stops answering and the first goes on."""
    a, b, _ = backends
    proxy = lb([a], workers=2)
    old = clients(proxy.port)
    assert old.ask(b"before") == "a"
    second = ('\n[[inbound]]\ntag = "lb2"\nprotocol = "udp_lb"\nlisten = "127.0.0.1"\n'
              'port = 0\n[inbound.settings]\ncluster = "pool2"\n'
              f'\n[[cluster]]\ntag = "pool2"\nbackends = ["{b.addr}"]\n')
    base = lb_config([a], workers=2)
    assert proxy.reload(base + second) == "config reload: changed inbounds, clusters"
    found = re.search(r"listening on 127\.0\.0\.1:(\d+) \(lb2, 2 workers\)",
                      proxy.wait_line("(lb2, 2 workers)"))
    port2 = int(found.group(1))
    new = clients(port2)
    assert new.ask(b"through lb2") == "b"
    assert old.ask(b"after") == "a"
    assert proxy.metrics()["flows_created"] == 1  # the first inbound's flow went on

    assert proxy.reload(base) == "config reload: changed inbounds, clusters"
    proxy.wait_line(f"stopped listening on 127.0.0.1:{port2} (lb2)")
    new.silent(b"lb2 is gone", wait=0.5)
    assert old.ask(b"still") == "a"
    assert proxy.metrics()["flows_created"] == 1


def test_a_reload_that_turns_on_a_per_subnet_limit_steers_by_subnet(lb, backends, clients):
    """Two workers steered by client IP; a reload adds max_flows_per_subnet:
    the listener steers by /24 from then on (and says so), so the limit is
    exact across the workers, as it is from a start."""
    proxy = lb(backends, workers=2)
    assert clients(proxy.port, "127.0.0.2").ask(b"before") in {"a", "b", "c"}
    line = proxy.reload(lb_config(backends, workers=2,
                                  cluster={"max_flows_per_subnet": 2, "subnet_prefix_v4": 24}))
    assert line == RELOAD_CLUSTER, proxy.log()
    proxy.wait_line("udp_lb lb: clients are spread over the workers by subnet now; a client "
                    "that lands on another worker opens a new flow there")
    kept = []
    for net in ("127.0.1", "127.0.2"):
        for host in (2, 3):
            kept.append(clients(proxy.port, "%s.%d" % (net, host)))
            kept[-1].ask(b"in")
        for host in (4, 5, 6, 7):
            clients(proxy.port, "%s.%d" % (net, host)).silent(b"over", wait=0.05)
    m = proxy.wait_metrics(lambda m: m["drops"]["shed_per_subnet"] >= 8)
    assert m["drops"]["shed_per_subnet"] == 8, m
    for c in kept:
        assert c.ask(b"still") in {"a", "b", "c"}
