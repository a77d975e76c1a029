"""The DNS service's upstream connections when things go wrong (issue 20):
a client that sends queries and reads no answer has its stream ended
before the answers it leaves grow without end; a stream upstream that stops
answering is replaced after a timeout; one that closes every connection at
once is not redialled in a loop; a through_proxy upstream reached through a
proxy outbound whose server is a name gets that name from the system's
resolver, not from the service waiting on that very connection.

The binary runs on 127.0.0.1; the upstreams and the hop are on loopback.
"""
import os
import socket
import struct
import threading
import time

import pytest

from dnskit import NOERROR, SERVFAIL, DnsUpstream, build_query, framed, parse
from proxykit import Association, Proxy, socks_open, stop_cleanly

BASE = ('[[inbound]]\ntag = "in"\nprotocol = "socks"\nlisten = "127.0.0.1"\nport = {port0}\n\n'
        '[[outbound]]\ntag = "direct"\nprotocol = "freedom"\n\n')


@pytest.fixture
def start_proxy(app, tmp_path):
    started = []

    def _start(text, **kw):
        p = Proxy(app, tmp_path, text, 1, log_level="debug", **kw)
        started.append(p)
        return p.start()

    yield _start
    stop_cleanly(started, "proxy")


def service(*servers, timeout=5, extra=""):
    text = BASE + extra + f"[dns]\ncache_size = 0\ntimeout = {timeout}\n\n"
    for tag, address, keys in servers:
        text += f'[[dns.server]]\ntag = "{tag}"\naddress = "{address}"\n' + keys + "\n"
    return text


def udp_ask(proxy, name, timeout=5.0):
    with Association(proxy.port) as assoc:
        assoc.send("192.0.2.1", 53, build_query(name))
        return parse(assoc.recv(timeout)[1])


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_a_stream_whose_answers_are_not_read_is_ended(start_proxy):
    """Hosts answers (no upstream needed) for queries the client never
    reads: past 256 KiB of unread answers the stream ends, so the proxy's
    memory does not grow with what the client sends."""
    up = DnsUpstream({})
    try:
        # under AddressSanitizer freed blocks wait in its quarantine, which
        # would count as growth
        asan = os.environ.get("ASAN_OPTIONS", "")
        proxy = start_proxy(service(("up", up.address, "")) + '[[dns.host]]\nname = "h.test"\n'
                                                             'address = ["192.0.2.1"]\n\n',
                            env={"ASAN_OPTIONS": asan + ":quarantine_size_mb=0"})
        before = rss_kib(proxy.proc.pid)
        one = framed(build_query("h.test"))
        with socks_open(proxy.port, "198.51.100.7", 53) as s:
            # the proxy first tries for up to 5 s (ENDPOINT_FLUSH_MS) to
            # hand the client the answers queued for it, then resets
            s.settimeout(15.0)
            sent, ended = 0, False
            try:
                while sent < 64 * 1024 * 1024:
                    s.sendall(one * 512)
                    sent += len(one) * 512
            except (ConnectionResetError, BrokenPipeError):
                ended = True
            assert ended, f"still open after {sent} bytes"
        grown = rss_kib(proxy.proc.pid) - before
        assert grown < 8 * 1024, f"RSS grew {grown} KiB"
        assert "ended: dns: the client leaves its answers unread" in proxy.log(), proxy.log()
    finally:
        up.close()


def test_a_stream_upstream_that_goes_silent_is_replaced(start_proxy):
    up = DnsUpstream({"a.test": ["192.0.2.1"], "b.test": ["192.0.2.2"]}, transports=("tcp",))
    try:
        proxy = start_proxy(service(("up", up.address, 'protocol = "tcp"\n'), timeout=1))
        assert udp_ask(proxy, "a.test").addresses() == ["192.0.2.1"]
        assert up.connections == 1
        up.silent = True
        assert udp_ask(proxy, "b.test").rcode == SERVFAIL
        up.silent = False
        deadline = time.monotonic() + 3
        while "no answer within the timeout: the connection is replaced" not in proxy.log() \
                and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "dns server up: no answer within the timeout: the connection is replaced" \
            in proxy.log(), proxy.log()
        assert udp_ask(proxy, "a.test").addresses() == ["192.0.2.1"]
        # on a new connection (under a loaded run a slow first dial can
        # add one more; a reconnect loop would add many)
        assert 2 <= up.connections <= 3, (up.connections, proxy.log())
    finally:
        up.close()


class Slammer:
    """A TCP listener on loopback that closes every connection at once,
    counting them."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            c.close()

    def close(self):
        self.sock.close()


@pytest.mark.parametrize("protocol", ["tls", "https"])
def test_an_upstream_that_closes_at_once_is_not_redialled_in_a_loop(start_proxy, protocol):
    slam = Slammer()
    try:
        proxy = start_proxy(service(
            ("up", f"127.0.0.1:{slam.port}", f'protocol = "{protocol}"\nallow_insecure = true\n'),
            timeout=2))
        start = time.monotonic()
        assert udp_ask(proxy, "a.test").rcode == SERVFAIL
        assert time.monotonic() - start < 1.5  # the failure, not the timeout
        time.sleep(0.5)
        assert slam.accepted <= 2, slam.accepted
    finally:
        slam.close()


def test_a_proxy_outbound_named_by_host_name_is_looked_up_past_the_service(start_proxy):
    """The only server is through_proxy, routed to a socks outbound whose
    server is "localhost": the name comes from the system's resolver
    (/etc/hosts), not from the service, whose only upstream is the
    connection being opened."""
    up = DnsUpstream({"a.test": ["192.0.2.7"]}, host="127.0.0.81", transports=("tcp",))
    try:
        hop = start_proxy(BASE)
        proxy = start_proxy(service(
            ("up", up.address, 'protocol = "tcp"\nthrough_proxy = true\n'), timeout=3,
            extra=(f'[[outbound]]\ntag = "via"\nprotocol = "socks"\nserver = "localhost"\n'
                   f"port = {hop.port}\n\n"
                   '[[route.rule]]\ninbound_tag = ["dns"]\noutbound = "via"\n\n')))
        assert udp_ask(proxy, "a.test").addresses() == ["192.0.2.7"]
        assert up.connections == 1
    finally:
        up.close()


def test_udp_queries_leave_from_changing_ports(start_proxy):
    """RFC 5452: besides a random id, the source port changes: a socket
    sends 64 queries at most (DNS_SVC_UDP_ROTATE), then a new one takes
    over. 150 queries for names of their own come from at least 3 ports,
    none used for more than 64."""
    up = DnsUpstream(wildcard=True)
    try:
        proxy = start_proxy(service(("up", up.address, "")))
        with Association(proxy.port) as assoc:
            for i in range(150):
                assoc.send("192.0.2.1", 53, build_query(f"n{i}.rand.test"))
                assert parse(assoc.recv(5.0)[1]).rcode == NOERROR
        ports = {}
        for _, port in up.udp_sources:
            ports[port] = ports.get(port, 0) + 1
        assert len(up.udp_sources) == 150
        assert len(ports) >= 3 and max(ports.values()) <= 64, ports
    finally:
        up.close()
