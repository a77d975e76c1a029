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
import re
import resource
import signal
import socket
import subprocess
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from proxykit import EchoServer, LOOPBACK, free_port, socks5_connect, stop_cleanly
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
                 "etemenanki_udp_backend_flows_created"):
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
    finally:
        assert lb.stop() == 0, lb.log()


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
