"""Issue 32, "a dial that fails is invisible at the default info level": a
flow whose outbound dial fails (refused, no such host, timed out) logs one
info line naming the inbound, the client, the destination, the outbound
(and the member, through a balancer) and the reason, the reason word being
the one the dial-error metric counts it under. The lines are rate-limited
per worker (DIAL_LOG_BURST lines a DIAL_LOG_WINDOW_MS window, connector.c);
what a window drops is counted in one summary line, written with the next
failure after the window.

Every proxy here runs at the default level (no -l, no [log]) and needs no
network: destinations are closed loopback ports, and names go to a DNS
server on loopback that answers NXDOMAIN or nothing at all.
"""
import re
import socket
import struct
import threading
import time

import pytest

from proxykit import LOOPBACK, DnsServer, Proxy, connect, free_port, recv_all, socks5_greet, stop_cleanly

# connector.c's bound, word for word in its summary line
DIAL_LOG_BURST = 10
DIAL_LOG_WINDOW_S = 1.0

PREFIX = "INFO  dial: "


def socks_addr(host, port):
    try:
        return b"\x01" + socket.inet_aton(host) + struct.pack(">H", port)
    except OSError:
        name = host.encode()
        return b"\x03" + bytes([len(name)]) + name + struct.pack(">H", port)


def config(*, dns=None, workers=None, balancer_to=None):
    text = ""
    if workers:
        text += f"[runtime]\nworkers = {workers}\n\n"
    text += ('[[inbound]]\ntag = "in"\nprotocol = "socks"\nlisten = "127.0.0.1"\nport = {port0}\n\n'
             '[[outbound]]\ntag = "direct"\nprotocol = "freedom"\n\n')
    if balancer_to is not None:
        text += (f'[[outbound]]\ntag = "hop-a"\nprotocol = "socks"\nserver = "127.0.0.1"\n'
                 f'port = {balancer_to}\n\n'
                 '[[balancer]]\ntag = "edge"\noutbounds = ["hop-a"]\nprobe_interval = 30\n\n'
                 '[route]\ndefault = "edge"\n\n')
    if dns is not None:
        text += f'[dns]\nservers = ["127.0.0.1:{dns.port}"]\n'
    return text


@pytest.fixture
def proxies(app, tmp_path):
    started = []

    def _start(text):
        p = Proxy(app, tmp_path, text)  # the default log level: info
        started.append(p)
        return p.start()

    yield _start
    stop_cleanly(started, "proxy")


def socks_connect(proxy_port, host, port, timeout=15):
    """One SOCKS5 CONNECT; returns (REP, the client's own address text)."""
    with connect(proxy_port, timeout=timeout) as s:
        me = "%s:%d" % s.getsockname()[:2]
        socks5_greet(s)
        s.sendall(b"\x05\x01\x00" + socks_addr(host, port))
        reply = recv_all(s, timeout)
        assert len(reply) >= 2, reply
        return reply[1], me


def dial_lines(proxy):
    return [l for l in proxy.log().splitlines() if PREFIX in l]


def wait_lines(proxy, text, count=1, timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        found = [l for l in dial_lines(proxy) if text in l]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


def test_a_refused_dial_logs_one_info_line_naming_the_flow(proxies):
    """Issue 32: a refused dial was invisible at info; now one line per flow."""
    p = proxies(config())
    port = free_port()
    rep, me = socks_connect(p.port, LOOPBACK, port)
    assert rep == 5  # connection refused
    want = (f"{PREFIX}flow {me} -> 127.0.0.1:{port} from inbound in via direct failed (refused): "
            f"failed to connect to any address (127.0.0.1:{port}: connection refused)")
    wait_lines(p, f"flow {me} ")
    assert [l.split(" ", 1)[1] for l in dial_lines(p)] == [want], p.log()


def test_a_name_that_does_not_resolve_logs_host_unreachable(proxies):
    """Issue 32: "no such host" at the default level, from a loopback DNS
    server answering NXDOMAIN (no real network)."""
    nx = DnsServer("nxdomain")
    try:
        p = proxies(config(dns=nx))
        rep, me = socks_connect(p.port, "nothing-here.invalid", 443)
        assert rep == 4  # host unreachable
        want = (f"{PREFIX}flow {me} -> nothing-here.invalid:443 from inbound in via direct failed "
                f"(host_unreachable): dns: no such host")
        wait_lines(p, f"flow {me} ")
        assert [l.split(" ", 1)[1] for l in dial_lines(p)] == [want], p.log()
        assert nx.queries > 0
    finally:
        nx.close()


def test_a_dial_that_times_out_logs_timed_out(proxies):
    """Issue 32: a timed-out dial at the default level. The lookup times out
    (a loopback DNS server that never answers: the resolver gives up after
    5 s), the one timeout a test can reach without waiting a whole 10 s
    connect attempt."""
    silent = DnsServer("silent")
    try:
        p = proxies(config(dns=silent))
        rep, me = socks_connect(p.port, "slow.invalid", 80, timeout=20)
        assert rep == 6  # TTL expired: the SOCKS word for a timeout
        want = (f"{PREFIX}flow {me} -> slow.invalid:80 from inbound in via direct failed "
                f"(timed_out): dns: lookup timed out")
        wait_lines(p, f"flow {me} ")
        assert [l.split(" ", 1)[1] for l in dial_lines(p)] == [want], p.log()
    finally:
        silent.close()


def test_a_failed_dial_through_a_balancer_names_the_member(proxies):
    """Issue 32: through a balancer the line names the balancer and the
    member that failed. hop-a's server accepts nothing but the probe's
    connect would be refused too, so the first flow (before or after the
    first probe: with every member down it still goes to hop-a) fails at
    hop-a's dial."""
    dead = free_port()
    p = proxies(config(balancer_to=dead))
    rep, me = socks_connect(p.port, LOOPBACK, 9)
    assert rep != 0
    want = (f"{PREFIX}flow {me} -> 127.0.0.1:9 from inbound in via edge (member hop-a) failed "
            f"(refused): failed to connect to any address (127.0.0.1:{dead}: connection refused)")
    wait_lines(p, f"flow {me} ")
    assert [l.split(" ", 1)[1] for l in dial_lines(p) if f"flow {me} " in l] == [want], p.log()


SUMMARY = re.compile(r"INFO  dial: (\d+) more dial failures not logged "
                     r"\(at most 10 a second per worker\)$")


def test_a_burst_of_failures_is_bounded_and_counted(proxies):
    """Issue 32's rate limit: 200 failed flows at once on one worker write
    at most DIAL_LOG_BURST lines per window, and every failure not logged is
    counted in a summary line, which the next failure after the window
    writes: logged + summarised = every failure."""
    p = proxies(config(workers=1))
    port = free_port()
    n = 200
    reps = []
    lock = threading.Lock()

    def one():
        try:
            rep, _ = socks_connect(p.port, LOOPBACK, port)
        except (OSError, AssertionError):
            rep = None
        with lock:
            reps.append(rep)

    t0 = time.monotonic()
    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    took = time.monotonic() - t0
    assert reps.count(5) == n, reps
    windows = int(took / DIAL_LOG_WINDOW_S) + 2  # the burst may straddle window edges
    failed = [l for l in dial_lines(p) if "failed (refused)" in l]
    assert 1 <= len(failed) <= DIAL_LOG_BURST * windows, (took, len(failed))
    if took < DIAL_LOG_WINDOW_S:  # the usual case: the whole burst in one or two windows
        assert len(failed) <= 2 * DIAL_LOG_BURST, len(failed)

    time.sleep(DIAL_LOG_WINDOW_S + 0.2)
    rep, me = socks_connect(p.port, LOOPBACK, port)  # the next failure, in a new window
    assert rep == 5
    wait_lines(p, f"flow {me} ")
    lines = dial_lines(p)
    failed = [l for l in lines if "failed (refused)" in l]
    summaries = [int(m.group(1)) for m in (SUMMARY.search(l) for l in lines) if m]
    assert summaries, p.log()
    assert len(summaries) <= windows
    assert len(failed) + sum(summaries) == n + 1, (len(failed), summaries)
    # the summary comes just before the line of the failure that wrote it
    i = next(k for k, l in enumerate(lines) if f"flow {me} " in l)
    assert SUMMARY.search(lines[i - 1]), lines[i - 1]
    assert not [l for l in p.log().splitlines() if " DEBUG " in l]  # the default level really


def test_an_http_proxy_502_has_its_line_too(app, tmp_path):
    """Issue 32: the HTTP inbound's 502 for a refused CONNECT has the same
    line (every inbound opens its flows through the one connector)."""
    text = ('[[inbound]]\ntag = "web-in"\nprotocol = "http"\nlisten = "127.0.0.1"\nport = {port0}\n\n'
            '[[outbound]]\ntag = "direct"\nprotocol = "freedom"\n\n')
    p = Proxy(app, tmp_path, text).start()
    try:
        port = free_port()
        with connect(p.port, timeout=10) as s:
            me = "%s:%d" % s.getsockname()[:2]
            s.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
            assert recv_all(s, 10).startswith(b"HTTP/1.1 502 ")
        want = (f"{PREFIX}flow {me} -> 127.0.0.1:{port} from inbound web-in via direct failed "
                f"(refused): failed to connect to any address (127.0.0.1:{port}: connection refused)")
        wait_lines(p, f"flow {me} ")
        assert [l.split(" ", 1)[1] for l in dial_lines(p)] == [want], p.log()
    finally:
        stop_cleanly([p], "proxy")
