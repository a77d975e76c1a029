"""GET /metrics on [metrics] listen (docs/metrics.md): the whole answer
parsed by the Prometheus client library's own parser (Debian's
python3-prometheus-client), its values checked against traffic the test
sent (SOCKS5 connections held open, datagrams through a udp_lb inbound,
reloads that apply and one that fails), and the server's bounds: 404, 405,
413, 431, 400, 505, keep-alive, 64 idle connections and the 65th (then a
flood of 1,000 more) closed at once while the SOCKS data path goes on, the
idle timeout, and a binary upgrade handing the endpoint over. Every status
line, body and log line is asserted word for word.

Run alone:

    ETM_APP=build/src/etemenanki-app /usr/bin/python3 -m pytest -q tests/e2e/test_metrics.py
"""
import math
import re
import resource
import signal
import socket
import struct
import subprocess
import threading
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from proxykit import (EchoServer, LOOPBACK, Spout, UdpServer, connect, free_port, recv_exact,
                      socks5_connect, socks5_greet, socks5_request, stop_cleanly)
from udplbkit import Client, EchoBackend, LbApp, lb_config

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
SERVING = re.compile(r"INFO +app: metrics: serving http://127\.0\.0\.1:(\d+)/metrics$", re.M)


def config(backend, metrics_listen="127.0.0.1:0"):
    return (lb_config([backend], tag="lb")
            + '\n[[inbound]]\ntag = "socks"\nprotocol = "socks"\nlisten = "127.0.0.1"\nport = 0\n'
            + f'\n[metrics]\nlisten = "{metrics_listen}"\n')


class Served:
    """The process under test (an LbApp), with the ports it logged."""

    def __init__(self, lb):
        self.lb = lb
        m = SERVING.search(lb.wait_line("metrics: serving"))
        assert m, lb.log()
        self.port = int(m.group(1))
        line = lb.wait_line("(socks,")
        self.socks_port = int(re.search(r"listening on 127\.0\.0\.1:(\d+) \(socks,", line).group(1))


@pytest.fixture
def backend():
    b = EchoBackend("a")
    yield b
    b.close()


@pytest.fixture
def echo_tcp():
    s = EchoServer()
    yield s
    s.close()


@pytest.fixture
def served(app, tmp_path, backend):
    started = []

    def _start(text=None):
        p = LbApp(app, tmp_path, text or config(backend), 1, tag="lb")
        started.append(p)
        return Served(p.start())

    yield _start
    stop_cleanly(started, "etemenanki-app")


# ---------------------------------------------------------------- HTTP by hand

def request(port, raw, sock=None, timeout=5.0):
    """Sends raw bytes and reads one answer: (status line, headers dict with
    lowercase names, body bytes, the socket)."""
    s = sock or socket.create_connection((LOOPBACK, port), timeout=timeout)
    s.settimeout(timeout)
    if raw:
        s.sendall(raw)
    return read_answer(s) + (s,)


def read_answer(s, head_only=False):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        assert chunk, f"closed before an answer; got {data!r}"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    n = 0 if head_only else int(headers["content-length"])
    while len(rest) < n:
        chunk = s.recv(65536)
        assert chunk, "closed inside the body"
        rest += chunk
    assert len(rest) == n, f"more than Content-Length: {rest[n:]!r}"
    return lines[0], headers, rest


def closed_by_peer(s, timeout=3.0):
    s.settimeout(timeout)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def scrape(port):
    status, headers, body, s = request(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    s.close()
    assert status == "HTTP/1.1 200 OK"
    assert headers["content-type"] == CONTENT_TYPE
    return {f.name: f for f in text_string_to_metric_families(body.decode())}


def value(fams, family, sample, **labels):
    for s in fams[family].samples:
        if s.name == sample and s.labels == labels:
            return s.value
    raise AssertionError(f"no {sample}{labels} in {fams[family].samples}")


def wait_value(port, family, sample, want, timeout=5.0, **labels):
    deadline = time.monotonic() + timeout
    while True:
        got = value(scrape(port), family, sample, **labels)
        if got == want or time.monotonic() > deadline:
            assert got == want, f"{sample}{labels} = {got}, expected {want}"
            return
        time.sleep(0.05)


# ---------------------------------------------------------------- the values

def test_scrape_is_parsed_and_counts_traffic(served, backend, echo_tcp):
    p = served()
    fams = scrape(p.port)
    # every family the docs list, each with HELP and TYPE
    for name in ("etemenanki_build_info", "etemenanki_start_time_seconds",
                 "etemenanki_config_epoch", "etemenanki_flows_open", "etemenanki_flows",
                 "etemenanki_guard_refused", "etemenanki_accept_paused",
                 "etemenanki_reloads", "etemenanki_metrics_connections_refused",
                 "etemenanki_udp_active_flows", "etemenanki_udp_flows_created",
                 "etemenanki_udp_flows_evicted", "etemenanki_udp_flows_shed",
                 "etemenanki_udp_datagrams_to_backends", "etemenanki_udp_bytes_to_backends",
                 "etemenanki_udp_datagrams_to_clients", "etemenanki_udp_bytes_to_clients",
                 "etemenanki_udp_sockets_reused", "etemenanki_udp_flow_duration_seconds",
                 "etemenanki_udp_datagrams_dropped", "etemenanki_udp_datagrams_dropped_wq_full",
                 "etemenanki_udp_flows_closed", "etemenanki_udp_backend_up",
                 "etemenanki_udp_backend_flows_created",
                 "etemenanki_balancer_member_up", "etemenanki_balancer_member_probe_seconds",
                 "etemenanki_balancer_member_probe_timestamp_seconds",
                 "etemenanki_balancer_member_probes", "etemenanki_balancer_member_probes_failed",
                 "etemenanki_dial_errors", "etemenanki_dns_cache_hits",
                 "etemenanki_dns_cache_negative_hits", "etemenanki_dns_cache_misses",
                 "etemenanki_dns_cache_evictions", "etemenanki_dns_cache_entries",
                 "etemenanki_inbound_flows_open", "etemenanki_inbound_flows",
                 "etemenanki_inbound_bytes", "etemenanki_outbound_flows_open",
                 "etemenanki_outbound_flows", "etemenanki_outbound_bytes",
                 "etemenanki_user_flows_open", "etemenanki_user_flows", "etemenanki_user_bytes"):
        assert name in fams, name
        assert fams[name].documentation, name
    build = fams["etemenanki_build_info"].samples[0]
    assert build.value == 1 and set(build.labels) == {"version", "commit"}
    assert abs(value(fams, "etemenanki_start_time_seconds", "etemenanki_start_time_seconds")
               - time.time()) < 60
    assert value(fams, "etemenanki_config_epoch", "etemenanki_config_epoch") == 1
    assert value(fams, "etemenanki_flows_open", "etemenanki_flows_open") == 0
    assert value(fams, "etemenanki_flows", "etemenanki_flows_total") == 0
    assert fams["etemenanki_udp_datagrams_dropped"].type == "counter"
    assert fams["etemenanki_udp_active_flows"].type == "gauge"

    # three SOCKS5 connections held open, then closed
    held = [socks5_connect(p.socks_port, LOOPBACK, echo_tcp.port) for _ in range(3)]
    try:
        wait_value(p.port, "etemenanki_flows_open", "etemenanki_flows_open", 3)
    finally:
        for s in held:
            s.close()
    wait_value(p.port, "etemenanki_flows_open", "etemenanki_flows_open", 0)
    assert value(scrape(p.port), "etemenanki_flows", "etemenanki_flows_total") == 3

    # five datagrams of one flow through the udp_lb inbound, answered
    c = Client(p.lb.port)
    try:
        for i in range(5):
            assert c.ask(b"ping-%d" % i) == "a"
        sent = sum(len(b"ping-%d" % i) for i in range(5))
        lb = {"inbound": "lb"}
        wait_value(p.port, "etemenanki_udp_datagrams_to_clients",
                   "etemenanki_udp_datagrams_to_clients_total", 5, **lb)
        fams = scrape(p.port)
        assert value(fams, "etemenanki_udp_datagrams_to_backends",
                     "etemenanki_udp_datagrams_to_backends_total", **lb) == 5
        assert value(fams, "etemenanki_udp_bytes_to_backends",
                     "etemenanki_udp_bytes_to_backends_total", **lb) == sent
        assert value(fams, "etemenanki_udp_bytes_to_clients",
                     "etemenanki_udp_bytes_to_clients_total", **lb) == sent + 5 * len(b"a|")
        assert value(fams, "etemenanki_udp_flows_created",
                     "etemenanki_udp_flows_created_total", **lb) == 1
        assert value(fams, "etemenanki_udp_active_flows", "etemenanki_udp_active_flows",
                     **lb) == 1
        be = {"inbound": "lb", "backend": backend.addr}
        assert value(fams, "etemenanki_udp_backend_flows_created",
                     "etemenanki_udp_backend_flows_created_total", **be) == 1
        assert value(fams, "etemenanki_udp_backend_up", "etemenanki_udp_backend_up", **be) == 1
        reasons = {s.labels["reason"] for s in fams["etemenanki_udp_datagrams_dropped"].samples}
        assert {"truncated", "no_backend", "invalid", "queue_full", "send_error"} <= reasons
        assert all(s.value == 0 for s in fams["etemenanki_udp_datagrams_dropped"].samples)
        # an empty datagram is dropped as invalid (docs/udp-lb.md)
        c.send(b"")
        wait_value(p.port, "etemenanki_udp_datagrams_dropped",
                   "etemenanki_udp_datagrams_dropped_total", 1, inbound="lb", reason="invalid")
    finally:
        c.close()
    # SIGUSR1 keeps its text dump, with the same counts
    p.lb.proc.send_signal(signal.SIGUSR1)
    line = p.lb.wait_line("udp_lb lb: active_flows=")
    assert "datagrams_to_backends=5 " in line, line


def test_reloads_are_counted(served, backend):
    p = served()
    text = config(backend)
    assert p.lb.reload(text + "\n# saved again\n").endswith("config reload: no changes")
    wait_value(p.port, "etemenanki_reloads", "etemenanki_reloads_total", 1, result="ok")
    line = p.lb.reload(text + "\n[[inbound]\n")
    assert "reload: parse failed, keeping current config: " in line, line
    fams = scrape(p.port)
    assert value(fams, "etemenanki_reloads", "etemenanki_reloads_total", result="failed") == 1
    assert value(fams, "etemenanki_reloads", "etemenanki_reloads_total", result="ok") == 1
    # a changed [metrics] listen waits for a restart, and says so
    other = f"127.0.0.1:{free_port()}"
    p.lb.reload(config(backend, other))
    want = (f"reload: [metrics] listen changed from 127.0.0.1:0 to {other}; the endpoint stays "
            "on 127.0.0.1:0 until the next start")
    assert p.lb.wait_line(want).endswith("WARN  app: " + want), p.lb.log()
    wait_value(p.port, "etemenanki_reloads", "etemenanki_reloads_total", 2, result="ok")


def test_balancer_members(app, tmp_path, echo_tcp):
    dead = free_port()
    text = ('[[inbound]]\ntag = "socks"\nprotocol = "socks"\nlisten = "127.0.0.1"\nport = 0\n\n'
            '[[outbound]]\ntag = "direct"\nprotocol = "freedom"\n\n')
    for tag, port in (("dead", dead), ("live", echo_tcp.port)):
        text += (f'[[outbound]]\ntag = "{tag}"\nprotocol = "socks"\n'
                 f'server = "127.0.0.1"\nport = {port}\n\n')
    text += ('[[balancer]]\ntag = "pool"\noutbounds = ["dead", "live", "live"]\n\n'
             '[metrics]\nlisten = "127.0.0.1:0"\n')
    lb = LbApp(app, tmp_path, text, 0, tag="socks").start()
    try:
        p = Served(lb)
        wait_value(p.port, "etemenanki_balancer_member_up", "etemenanki_balancer_member_up", 0,
                   balancer="pool", member="dead")
        fams = scrape(p.port)
        assert value(fams, "etemenanki_balancer_member_up", "etemenanki_balancer_member_up",
                     balancer="pool", member="live") == 1
        # "live" listed twice is one series
        assert len(fams["etemenanki_balancer_member_up"].samples) == 2
        # the last probe: a delay for the live member, NaN for the dead one,
        # each with the time it ended
        when = "etemenanki_balancer_member_probe_timestamp_seconds"
        for member in ("dead", "live"):
            deadline = time.monotonic() + 5
            while value(scrape(p.port), when, when, balancer="pool", member=member) == 0:
                assert time.monotonic() < deadline, f"no probe of {member} ended"
                time.sleep(0.05)
        fams = scrape(p.port)
        delay = "etemenanki_balancer_member_probe_seconds"
        live = value(fams, delay, delay, balancer="pool", member="live")
        assert math.isfinite(live) and 0 <= live < 1, live
        assert math.isnan(value(fams, delay, delay, balancer="pool", member="dead"))
        for member in ("dead", "live"):
            assert abs(value(fams, when, when, balancer="pool", member=member) - time.time()) < 60
        assert len(fams[delay].samples) == 2 and len(fams[when].samples) == 2
        ended = "etemenanki_balancer_member_probes"
        failed = "etemenanki_balancer_member_probes_failed"
        live = {"balancer": "pool", "member": "live"}
        dead = {"balancer": "pool", "member": "dead"}
        assert value(fams, ended, ended + "_total", **live) >= 1
        assert value(fams, failed, failed + "_total", **live) == 0
        # every probe of the dead one failed (a scrape may fall between
        # the two counts of one probe)
        n_dead = value(fams, ended, ended + "_total", **dead)
        n_failed = value(fams, failed, failed + "_total", **dead)
        assert n_failed >= 1 and n_dead - n_failed in (0, 1), (n_dead, n_failed)
    finally:
        assert lb.stop() == 0, lb.log()


# ---------------------------------------------------------------- dial errors, DNS, usage

SOCKS_IN = '[[inbound]]\ntag = "socks"\nprotocol = "socks"\nlisten = "127.0.0.1"\nport = 0\n\n'
DIRECT = '[[outbound]]\ntag = "direct"\nprotocol = "freedom"\n\n'
METRICS = '[metrics]\nlisten = "127.0.0.1:0"\n\n'
DIAL_REASONS = ("general", "not_allowed", "net_unreachable", "host_unreachable", "refused",
                "timed_out")


@pytest.fixture
def socks_app(app, tmp_path):
    """Starts etemenanki-app on a config with a "socks" inbound and
    [metrics]; returns a Served. Every one is stopped at teardown."""
    started = []

    def _start(text):
        p = LbApp(app, tmp_path, text, 0, tag="socks")
        started.append(p)
        return Served(p.start())

    yield _start
    stop_cleanly(started, "etemenanki-app")


def dial_errors(fams):
    return {r: value(fams, "etemenanki_dial_errors", "etemenanki_dial_errors_total", reason=r)
            for r in DIAL_REASONS}


def socks_rep(port, host, dport):
    """A SOCKS5 CONNECT through the proxy; returns its REP."""
    with connect(port) as s:
        socks5_greet(s)
        rep, _ = socks5_request(s, host, dport)
        return rep


@pytest.mark.parametrize("access", ["off", "stderr"])
def test_dial_errors_by_reason(socks_app, access):
    # the access log on or off: the connector opens flows by two paths
    p = socks_app(SOCKS_IN + DIRECT + METRICS + f'[log]\naccess = "{access}"\n')
    fams = scrape(p.port)
    assert fams["etemenanki_dial_errors"].type == "counter"
    # every reason, always, and nothing else
    assert sorted(s.labels["reason"] for s in fams["etemenanki_dial_errors"].samples) == \
        sorted(DIAL_REASONS)
    assert dial_errors(fams) == dict.fromkeys(DIAL_REASONS, 0)
    assert socks_rep(p.socks_port, LOOPBACK, free_port()) == 5  # connection refused
    want = dict.fromkeys(DIAL_REASONS, 0)
    want["refused"] = 1
    deadline = time.monotonic() + 5
    while (got := dial_errors(scrape(p.port))) != want and time.monotonic() < deadline:
        time.sleep(0.05)
    assert got == want


class DnsNames(UdpServer):
    """A UDP DNS server on 127.0.0.1 that answers A queries for `name` with
    127.0.0.1 (TTL 60), AAAA queries for it with no record, and every other
    name with NXDOMAIN. queries counts the questions for each name."""

    def __init__(self, name):
        self.name = name
        self.queries = {}
        super().__init__()

    def handle(self, q, src):
        if len(q) < 12:
            return
        labels, i = [], 12
        while i < len(q) and q[i] != 0:
            labels.append(q[i + 1:i + 1 + q[i]].decode(errors="replace"))
            i += 1 + q[i]
        qtype = struct.unpack(">H", q[i + 1:i + 3])[0]
        question = q[12:i + 5]
        name = ".".join(labels).lower()
        self.queries[name] = self.queries.get(name, 0) + 1
        known = name == self.name
        rcode = 0 if known else 3
        # RFC 1035 4.1.1: QR, the query's opcode and RD, RA
        flags = 0x8000 | (q[2] << 8 & 0x7900) | 0x0080 | rcode
        answers = b""
        if known and qtype == 1:
            answers = struct.pack(">HHHIH", 0xC00C, 1, 1, 60, 4) + socket.inet_aton(LOOPBACK)
        head = q[:2] + struct.pack(">HHHHH", flags, 1, 1 if answers else 0, 0, 0)
        self.sock.sendto(head + question + answers, src)


def dns_counts(fams):
    return {k: value(fams, f"etemenanki_dns_cache_{k}", f"etemenanki_dns_cache_{k}_total")
            for k in ("hits", "negative_hits", "misses", "evictions")}


def test_dns_cache_hits_and_misses(socks_app, echo_tcp):
    dns = DnsNames("echo.metrics.test")
    try:
        p = socks_app(SOCKS_IN + DIRECT + METRICS
                      + f'[dns]\nservers = ["127.0.0.1:{dns.port}"]\n')
        fams = scrape(p.port)
        assert dns_counts(fams) == {"hits": 0, "negative_hits": 0, "misses": 0, "evictions": 0}
        assert value(fams, "etemenanki_dns_cache_entries", "etemenanki_dns_cache_entries") == 0
        # a name that resolves, twice: asked of the server once
        for _ in range(2):
            with socks5_connect(p.socks_port, "echo.metrics.test", echo_tcp.port) as s:
                s.sendall(b"resolved")
                assert recv_exact(s, 8) == b"resolved"
        fams = scrape(p.port)
        assert dns_counts(fams) == {"hits": 1, "negative_hits": 0, "misses": 1, "evictions": 0}
        assert value(fams, "etemenanki_dns_cache_entries", "etemenanki_dns_cache_entries") == 1
        # a name that does not, twice: the second answered from the cache
        for _ in range(2):
            assert socks_rep(p.socks_port, "nx.metrics.test", 80) == 4  # host unreachable
        fams = scrape(p.port)
        assert dns_counts(fams) == {"hits": 1, "negative_hits": 1, "misses": 2, "evictions": 0}
        assert value(fams, "etemenanki_dns_cache_entries", "etemenanki_dns_cache_entries") == 2
        assert dial_errors(fams)["host_unreachable"] == 2
        # an IP address never reaches the cache
        with socks5_connect(p.socks_port, LOOPBACK, echo_tcp.port):
            pass
        assert dns_counts(scrape(p.port))["misses"] == 2
        assert dns.queries.get("echo.metrics.test", 0) >= 1
    finally:
        dns.close()


def test_metrics_usage_per_inbound_outbound_user(app, tmp_path, echo_tcp):
    """Flows and bytes by inbound, outbound and user, against known byte
    counts: a Spout answers as many bytes as the 4-byte number it reads
    asks for, so what goes up and what comes down differ; an echo holds a
    flow open."""
    spout = Spout()
    text = ('[[inbound]]\ntag = "socks"\nprotocol = "socks"\nlisten = "127.0.0.1"\nport = 0\n'
            '[[inbound.settings.users]]\nusername = "alice"\npassword = "pw"\n\n'
            '[[inbound]]\ntag = "anon"\nprotocol = "socks"\nlisten = "127.0.0.1"\nport = 0\n\n'
            + DIRECT + METRICS)
    lb = LbApp(app, tmp_path, text, 0, tag="anon").start()
    try:
        p = Served(lb)
        anon_port = lb.port
        # alice: 100 bytes up (the 4-byte ask and 96 more), 5000 down
        with socks5_connect(p.socks_port, LOOPBACK, spout.port, "alice", "pw") as s:
            s.sendall(struct.pack(">I", 5000) + bytes(96))
            assert recv_exact(s, 5000) == bytes(5000)
            s.shutdown(socket.SHUT_WR)
            assert s.recv(1) == b""
        # no user: 300 bytes each way, held open for a scrape
        held = socks5_connect(anon_port, LOOPBACK, echo_tcp.port)
        try:
            held.sendall(b"x" * 300)
            assert recv_exact(held, 300) == b"x" * 300
            wait_value(p.port, "etemenanki_inbound_flows_open", "etemenanki_inbound_flows_open",
                       1, inbound="anon")
            fams = scrape(p.port)
            assert value(fams, "etemenanki_inbound_flows_open", "etemenanki_inbound_flows_open",
                         inbound="socks") == 0
            assert value(fams, "etemenanki_user_flows_open", "etemenanki_user_flows_open",
                         user="") == 1
            assert value(fams, "etemenanki_outbound_flows_open",
                         "etemenanki_outbound_flows_open", outbound="direct") == 1
        finally:
            held.close()
        wait_value(p.port, "etemenanki_inbound_flows_open", "etemenanki_inbound_flows_open", 0,
                   inbound="anon")
        # bytes are counted up to the end of each flow
        wait_value(p.port, "etemenanki_inbound_bytes", "etemenanki_inbound_bytes_total", 300,
                   inbound="anon", direction="down")
        fams = scrape(p.port)
        want = {
            ("inbound", "socks"): (100, 5000, 1),
            ("inbound", "anon"): (300, 300, 1),
            ("outbound", "direct"): (400, 5300, 2),
            ("user", "alice"): (100, 5000, 1),
            ("user", ""): (300, 300, 1),
        }
        for (by, name), (up, down, total) in want.items():
            fam, label = f"etemenanki_{by}", {by: name}
            assert value(fams, f"{fam}_bytes", f"{fam}_bytes_total", direction="up",
                         **label) == up, (by, name)
            assert value(fams, f"{fam}_bytes", f"{fam}_bytes_total", direction="down",
                         **label) == down, (by, name)
            assert value(fams, f"{fam}_flows", f"{fam}_flows_total", **label) == total, (by, name)
            assert value(fams, f"{fam}_flows_open", f"{fam}_flows_open", **label) == 0, (by, name)
        # one series per name: nothing else was carried
        assert len(fams["etemenanki_inbound_flows"].samples) == 2
        assert len(fams["etemenanki_outbound_flows"].samples) == 1
        assert len(fams["etemenanki_user_flows"].samples) == 2
    finally:
        assert lb.stop() == 0, lb.log()
        spout.close()


# ---------------------------------------------------------------- the server's bounds

ANSWERS = {
    404: ("HTTP/1.1 404 Not Found", b"not found: only /metrics is served here\n"),
    405: ("HTTP/1.1 405 Method Not Allowed", b"method not allowed: use GET or HEAD\n"),
    413: ("HTTP/1.1 413 Content Too Large", b"a request body is not accepted\n"),
    431: ("HTTP/1.1 431 Request Header Fields Too Large", b"request head over 8192 bytes\n"),
    400: ("HTTP/1.1 400 Bad Request", b"bad request\n"),
    505: ("HTTP/1.1 505 HTTP Version Not Supported", b"only HTTP/1.x is served\n"),
}


@pytest.mark.parametrize("raw, code, closes", [
    (b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", 404, False),
    (b"GET /metricsx HTTP/1.1\r\n\r\n", 404, False),
    (b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 405, False),
    (b"DELETE /metrics HTTP/1.1\r\n\r\n", 405, False),
    (b"GET /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", 413, True),
    (b"POST /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 413, True),
    (b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 9000 + b"\r\n\r\n", 431, True),
    (b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 200000 + b"\r\n\r\n", 431, True),
    (b"GARBAGE\r\n\r\n", 400, True),
    (b"GET /metrics HTTP/1.1\nHost: x\n\n", 400, True),
    (b"GET /metrics HTTP/2.0\r\n\r\n", 505, True),
], ids=["unknown-path", "path-prefix", "post", "delete", "body", "chunked-body", "head-9k",
        "head-200k", "garbage", "bare-lf", "http2"])
def test_bad_requests(served, raw, code, closes):
    p = served()
    status, headers, body, s = request(p.port, raw)
    try:
        assert (status, body) == ANSWERS[code]
        assert headers["content-type"] == "text/plain; charset=utf-8"
        if code == 405:
            assert headers["allow"] == "GET, HEAD"
        if closes:
            assert headers["connection"] == "close"
            assert closed_by_peer(s)
        else:
            # the connection goes on: a scrape on it works
            status, headers, body, _ = request(p.port, b"GET /metrics HTTP/1.1\r\n\r\n", s)
            assert status == "HTTP/1.1 200 OK"
    finally:
        s.close()
    scrape(p.port)  # the server is still there


def test_head_keep_alive_and_pipelining(served):
    p = served()
    _, get_headers, body, s = request(p.port, b"GET /metrics HTTP/1.1\r\n\r\n")
    try:
        s.sendall(b"HEAD /metrics HTTP/1.1\r\n\r\n")
        status, headers, rest = read_answer(s, head_only=True)
        assert status == "HTTP/1.1 200 OK" and rest == b""
        assert headers["content-type"] == CONTENT_TYPE
        assert abs(int(headers["content-length"]) - len(body)) < 64  # the counters move
        # two requests in one write: two answers, in order
        s.sendall(b"GET /nope HTTP/1.1\r\n\r\nGET /metrics?x=1 HTTP/1.1\r\n\r\n")
        assert read_answer(s)[0] == "HTTP/1.1 404 Not Found"
        assert read_answer(s)[0] == "HTTP/1.1 200 OK"
        # Connection: close is honoured
        s.sendall(b"GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n")
        status, headers, _ = read_answer(s)
        assert headers["connection"] == "close" and closed_by_peer(s)
    finally:
        s.close()
    # HTTP/1.0 closes unless it asks for keep-alive
    status, headers, _, s = request(p.port, b"GET /metrics HTTP/1.0\r\n\r\n")
    assert headers["connection"] == "close" and closed_by_peer(s)
    s.close()
    status, headers, _, s = request(p.port, b"GET /metrics HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
    assert headers["connection"] == "keep-alive"
    assert request(p.port, b"GET /metrics HTTP/1.0\r\n\r\n", s)[0] == "HTTP/1.1 200 OK"
    s.close()


def test_connection_limit_leaves_the_data_path_alone(served, echo_tcp):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4096 <= hard or (soft < 4096 and hard == resource.RLIM_INFINITY):
        resource.setrlimit(resource.RLIMIT_NOFILE, (4096, hard))
    p = served()
    idle = [socket.create_connection((LOOPBACK, p.port), timeout=5) for _ in range(64)]
    try:
        time.sleep(0.3)  # every one accepted
        extra = socket.create_connection((LOOPBACK, p.port), timeout=5)
        assert closed_by_peer(extra, 2.0), "the 65th connection stayed open"
        extra.close()
        # a flood of 1,000 more: each closed at once
        flood = [socket.create_connection((LOOPBACK, p.port), timeout=5) for _ in range(1000)]
        try:
            assert all(closed_by_peer(f, 2.0) for f in flood)
        finally:
            for f in flood:
                f.close()
        # the SOCKS data path meanwhile
        with socks5_connect(p.socks_port, LOOPBACK, echo_tcp.port) as s:
            s.sendall(b"still relayed")
            assert s.recv(100) == b"still relayed"
        # the first ones still work
        status, _, _, _ = request(p.port, b"GET /metrics HTTP/1.1\r\n\r\n", idle[0])
        assert status == "HTTP/1.1 200 OK"
    finally:
        for s in idle:
            s.close()
    time.sleep(0.3)
    fams = scrape(p.port)
    assert value(fams, "etemenanki_metrics_connections_refused",
                 "etemenanki_metrics_connections_refused_total") == 1001


def test_idle_connection_is_closed(served):
    p = served()
    s = socket.create_connection((LOOPBACK, p.port), timeout=15)
    start = time.monotonic()
    assert closed_by_peer(s, 15.0)
    took = time.monotonic() - start
    s.close()
    assert 9.0 <= took <= 13.0, took


# ---------------------------------------------------------------- config

def test_bad_listen_and_busy_port(app, run, tmp_path, backend):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(config(backend, "localhost:9100"))
    r = run("-c", str(cfg), "--test")
    assert r.returncode == 1
    assert r.stderr == ('configuration invalid: [metrics] listen "localhost:9100" is not an IP '
                        'address and port (like "127.0.0.1:9100")\n')
    busy = socket.socket()
    busy.bind((LOOPBACK, 0))
    busy.listen()
    try:
        addr = f"127.0.0.1:{busy.getsockname()[1]}"
        cfg.write_text(config(backend, addr))
        r = run("-c", str(cfg))
        assert r.returncode == 1
        assert r.stderr.endswith(f"failed to start: metrics: cannot listen on {addr}: "
                                 "address already in use\n"), r.stderr
    finally:
        busy.close()


# ---------------------------------------------------------------- binary upgrade

from test_upgrade import (assert_sanitizer_clean, binary, socks_config, stop_pid,  # noqa: E402,F401
                          upgrade, upgrading)


def test_binary_upgrade_hands_the_endpoint_over(upgrading):
    start, spawned = upgrading
    mport = free_port()
    proxy = start(socks_config() + f'\n[metrics]\nlisten = "127.0.0.1:{mport}"\n')
    old_start = value(scrape(mport), "etemenanki_start_time_seconds",
                      "etemenanki_start_time_seconds")
    time.sleep(1.1)  # the new process's start time is a later second
    new_pid = upgrade(proxy, spawned)
    assert proxy.proc.wait(5) == 0, proxy.log()  # no flow open: it drained at once
    fams = scrape(mport)
    assert value(fams, "etemenanki_start_time_seconds", "etemenanki_start_time_seconds") > old_start
    assert_sanitizer_clean(proxy)
    assert stop_pid(new_pid)


# ---------------------------------------------------------------- TLS handshakes

def test_tls_handshakes_by_side_and_resumption(start_proxy, pki, echo_tcp):
    """A trojan+tls chain: the client's first connection makes a full
    handshake, each later one resumes the session the server gave; both
    processes count them in etemenanki_tls_handshakes_total."""
    cert, key = pki
    server = start_proxy(f"""
[[inbound]]
tag = "trojan-in"
protocol = "trojan"
listen = "127.0.0.1"
port = {{port0}}
[[inbound.settings.users]]
name = "u"
password = "pw"
[inbound.stream]
security = "tls"
[inbound.stream.tls]
certificate = "{cert}"
key = "{key}"
[[outbound]]
tag = "direct"
protocol = "freedom"
[metrics]
listen = "127.0.0.1:{{port1}}"
""", n_ports=2, wait_for_log=False)
    client = start_proxy(f"""
[[inbound]]
tag = "socks-in"
protocol = "socks"
listen = "127.0.0.1"
port = {{port0}}
[[outbound]]
tag = "up"
protocol = "trojan"
server = "127.0.0.1"
port = {server.port}
[outbound.settings]
password = "pw"
[outbound.stream]
security = "tls"
[outbound.stream.tls]
server_name = "proxy.test"
ca = "{cert}"
[metrics]
listen = "127.0.0.1:{{port1}}"
""", n_ports=2, wait_for_log=False)
    for i in range(3):
        s = socks5_connect(client.port, "127.0.0.1", echo_tcp.port)
        s.sendall(b"round %d" % i)
        assert recv_exact(s, 7) == b"round %d" % i
        s.shutdown(socket.SHUT_WR)
        assert s.recv(1) == b""  # the whole chain ended: the session is kept
        s.close()
        wait_value(client.ports[1], "etemenanki_tls_handshakes", "etemenanki_tls_handshakes_total",
                   i + 1 if i == 0 else i, side="client", resumed="true" if i else "false")
    fams = scrape(client.ports[1])
    h = "etemenanki_tls_handshakes_total"
    fam = "etemenanki_tls_handshakes"
    assert value(fams, fam, h, side="client", resumed="false") == 1
    assert value(fams, fam, h, side="client", resumed="true") == 2
    assert value(fams, fam, h, side="server", resumed="false") == 0
    wait_value(server.ports[1], fam, h, 2, side="server", resumed="true")
    fams = scrape(server.ports[1])
    assert value(fams, fam, h, side="server", resumed="false") == 1
    assert value(fams, fam, h, side="client", resumed="false") == 0
