"""Routing end to end: [[route.rule]] matchers, first match wins, the default
route, the per-datagram routing of a SOCKS5 UDP association (the fan-out),
sniffing (TLS SNI and HTTP Host as an extra name for the domain matchers)
and the `--test` messages of the route table.

Every test starts the real binary on 127.0.0.1 (at debug level, so each
routing decision is logged) with a config written to tmp_path, and talks to
target servers run in threads on 127.0.0.1. Behaviour is asserted first (a
blackholed TCP flow gets the SOCKS success reply, then EOF with no byte; a
swallowed datagram gets no answer; a direct flow reaches the server); the
`route:` log line is a secondary check. Nothing leaves the loopback
interface.
"""
import asyncio
import hashlib
import re
import socket
import socketserver
import ssl
import struct
import threading
import time

import pytest

from proxykit import (LOOPBACK, Association, HttpReader, HttpTarget, Proxy, UdpEcho,
                      assert_blackholed, assert_echoes, closed_without_bytes, connect, make_cert,
                      read_socks_addr, recv_all, recv_exact, socks_open, socks_addr, stop_cleanly,
                      tls_server_context)

ESTABLISHED = b"HTTP/1.1 200 Connection established\r\n\r\n"

# ---------------------------------------------------------------- configs


def inbound(tag="in", port_key="port0", protocol="socks", sniffing=None):
    text = (f'[[inbound]]\ntag = "{tag}"\nprotocol = "{protocol}"\n'
            f'listen = "127.0.0.1"\nport = {{{port_key}}}\n')
    if sniffing is not None:
        text += f"sniffing = {'true' if sniffing else 'false'}\n"
    return text + "\n"


DIRECT = '[[outbound]]\ntag = "direct"\nprotocol = "freedom"\n\n'
BLOCK = '[[outbound]]\ntag = "block"\nprotocol = "blackhole"\n\n'


def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return "[" + ", ".join(toml_value(x) for x in v) + "]"


def rule(outbound, **matchers):
    text = f'[[route.rule]]\noutbound = "{outbound}"\n'
    for key, value in matchers.items():
        text += f"{key} = {toml_value(value)}\n"
    return text + "\n"


def config(*parts, default=None, geoip=None, geosite=None):
    """Inbounds and outbounds first, then [route] and its rules (a
    [[route.rule]] must follow [route] when both are written)."""
    head = "".join(p for p in parts if not p.startswith("[[route.rule]]"))
    rules = "".join(p for p in parts if p.startswith("[[route.rule]]"))
    route = ""
    if default is not None:
        route += f'default = "{default}"\n'
    if geoip is not None:
        route += f"geoip = {toml_value(geoip)}\n"
    if geosite is not None:
        route += f"geosite = {toml_value(geosite)}\n"
    if route:
        head += "[route]\n" + route + "\n"
    # Proxy fills {portN} with str.format: no other braces may appear
    return head + rules


# ---------------------------------------------------------------- fixtures


@pytest.fixture
def start_proxy(app, tmp_path):
    """Starts etemenanki-app processes at debug level; every one is stopped
    at teardown (SIGTERM, then SIGKILL), and only those, and must exit 0."""
    started = []

    def _start(text, n_ports=1, **kw):
        kw.setdefault("log_level", "debug")
        p = Proxy(app, tmp_path, text, n_ports, **kw)
        started.append(p)
        return p.start()

    yield _start
    stop_cleanly(started, "proxy")


@pytest.fixture(scope="module")
def origin():
    s = HttpTarget("origin")
    yield s
    s.close()


@pytest.fixture(scope="module")
def udp_peers():
    """Three UDP echo servers on 127.0.0.1: A, B, C."""
    peers = [UdpEcho() for _ in range(3)]
    yield peers
    for p in peers:
        p.close()


@pytest.fixture(scope="module")
def tls_origin(tmp_path_factory):
    cert, key = make_cert(tmp_path_factory.mktemp("route-tls"))
    s = HttpTarget("tls-origin", tls_context=tls_server_context(cert, key))
    s.cert = cert
    yield s
    s.close()


class TcpEchoAt:
    """A threaded TCP echo server bound to a given port on 127.0.0.1; counts
    the connections it accepted. With banner, it sends it on accept."""

    def __init__(self, port=0, banner=None):
        owner = self
        self.connections = 0

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                owner.connections += 1
                sock = self.request
                try:
                    if banner is not None:
                        sock.sendall(banner)
                    while True:
                        data = sock.recv(65536)
                        if not data:
                            return
                        sock.sendall(data)
                except OSError:
                    pass

        self.server = socketserver.ThreadingTCPServer((LOOPBACK, port), Handler)
        self.server.daemon_threads = True
        self.server.block_on_close = False
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class UdpEchoOn(UdpEcho):
    """proxykit's UdpEcho on another loopback address."""

    def __init__(self, host):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((host, 0))
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.received = []
        self._stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()


@pytest.fixture(scope="module")
def twin_echo():
    """A UDP echo server and a TCP echo server on the same port number."""
    for _ in range(20):
        udp = UdpEcho()
        try:
            tcp = TcpEchoAt(udp.port)
        except OSError:
            udp.close()
            continue
        break
    else:
        pytest.fail("no port free for both TCP and UDP")
    yield udp, tcp
    tcp.close()
    udp.close()


@pytest.fixture(scope="module")
def banner_server():
    s = TcpEchoAt(banner=b"220 server speaks first\r\n")
    yield s
    s.close()


# ---------------------------------------------------------------- client helpers


def http_connect_open(proxy_port, host, port):
    s = connect(proxy_port)
    s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    assert recv_exact(s, len(ESTABLISHED)) == ESTABLISHED
    return s


def tunnel_open(protocol, proxy_port, host, port, source=None):
    if protocol == "http":
        assert source is None
        return http_connect_open(proxy_port, host, port)
    return socks_open(proxy_port, host, port, source)


# The target is tag@vN (seed 002): these configs are never reloaded, so
# every target is its first version.
ROUTE_LINE = re.compile(r"DEBUG route: (tcp|udp) flow to (\S+) from inbound (\S+) takes (\S+)@v1 "
                        r"\((default route|rule #\d+)\)")


def route_lines(proxy, count=1, timeout=2.0):
    """The (network, dest, inbound, outbound, why) of every route line, once
    at least count are logged."""
    deadline = time.monotonic() + timeout
    while True:
        found = ROUTE_LINE.findall(proxy.log())
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


def decision(proxy, network, dest, timeout=2.0):
    """(inbound, outbound, why) of the last logged decision for dest."""
    deadline = time.monotonic() + timeout
    while True:
        found = [l[2:] for l in ROUTE_LINE.findall(proxy.log()) if l[:2] == (network, dest)]
        if found or time.monotonic() > deadline:
            return found[-1] if found else None
        time.sleep(0.02)


def http_get_for(host):
    return f"GET /sniff HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()


# ---------------------------------------------------------------- 1. UDP: each datagram routed on its own


def test_one_association_routes_each_peer_separately(start_proxy, udp_peers):
    """Three peers over one association, a rule on B's port: A and C answer,
    B's datagrams are swallowed, and A keeps answering after them."""
    a, b, c = udp_peers
    proxy = start_proxy(config(inbound(), DIRECT, BLOCK, rule("block", port=[b.port])))
    with Association(proxy.port) as assoc:
        assoc.echo(a, b"to A, first")
        seen_by_b = len(b.received)
        assoc.send(LOOPBACK, b.port, b"to B, swallowed")
        assert assoc.silent(0.5), "a datagram to the blocked peer came back"
        assert len(b.received) == seen_by_b, "the blocked peer got the datagram"
        # the association is not hurt by it: A still answers, C too
        assoc.echo(a, b"to A, after B")
        assoc.echo(c, b"to C")
        # and B stays blocked while the others pass, datagram after datagram
        assoc.send(LOOPBACK, b.port, b"to B again")
        assoc.echo(a, b"to A, third")
        assert assoc.silent(0.3)
        assert len(b.received) == seen_by_b
    assert decision(proxy, "udp", f"127.0.0.1:{b.port}") == ("in", "block", "rule #1")
    assert decision(proxy, "udp", f"127.0.0.1:{a.port}") == ("in", "direct", "default route")


def test_a_burst_that_opens_with_a_blocked_peer(start_proxy, udp_peers):
    """The association's first datagram goes to the blocked peer and the next
    ones follow without waiting for anything: only the blocked peer's are
    swallowed."""
    a, b, c = udp_peers
    proxy = start_proxy(config(inbound(), DIRECT, BLOCK, rule("block", port=[b.port])))
    with Association(proxy.port) as assoc:
        sent = []
        for i in range(4):
            for peer in (b, a, c):
                data = b"burst-%d-%d" % (peer.port, i)
                assoc.send(LOOPBACK, peer.port, data)
                if peer is not b:
                    sent.append(((LOOPBACK, peer.port), data))
        got = [assoc.recv() for _ in sent]
        assert sorted(got) == sorted(sent)
        assert assoc.silent(0.3), "a datagram to the blocked peer came back"
    assert not [d for _, d in b.received if d.startswith(b"burst-")]


def test_one_association_routes_by_name_and_cidr_per_datagram(start_proxy, udp_peers):
    """Domain matchers see the name a datagram is addressed to, cidr the
    address: A passes by address and is swallowed by name; a peer on
    127.0.0.3 is swallowed by cidr while C on 127.0.0.1 passes."""
    a, b, c = udp_peers
    third = UdpEchoOn("127.0.0.3")
    try:
        # the control: without rules the peer on 127.0.0.3 answers
        plain = start_proxy(config(inbound(), DIRECT))
        with Association(plain.port) as assoc:
            assoc.send("127.0.0.3", third.port, b"reachable")
            assert assoc.recv() == (("127.0.0.3", third.port), b"reachable")

        proxy = start_proxy(config(inbound(), DIRECT, BLOCK,
                                   rule("block", domain=["localhost"]),
                                   rule("block", cidr=["127.0.0.3/32"])))
        with Association(proxy.port) as assoc:
            seen_by_a = len(a.received)
            assoc.send("localhost", a.port, b"by name")
            assert assoc.silent(0.5), "the datagram to localhost was not blocked by domain"
            assert len(a.received) == seen_by_a
            assoc.echo(a, b"by address")
            assoc.send("127.0.0.3", third.port, b"to the blocked range")
            assert assoc.silent(0.3)
            assert [d for _, d in third.received] == [b"reachable"]
            assoc.echo(c, b"C by address")
        assert decision(proxy, "udp", f"localhost:{a.port}") == ("in", "block", "rule #1")
        assert decision(proxy, "udp", f"127.0.0.3:{third.port}") == ("in", "block", "rule #2")
    finally:
        third.close()


def test_replies_of_several_peers_are_attributed_to_their_sender(start_proxy, udp_peers):
    a, b, c = udp_peers
    proxy = start_proxy(config(inbound(), DIRECT))
    with Association(proxy.port) as assoc:
        sent = []
        for i in range(10):
            for peer, name in ((a, "A"), (c, "C")):
                data = f"{name}-{i}".encode()
                assoc.send(LOOPBACK, peer.port, data)
                sent.append(((LOOPBACK, peer.port), data))
        got = [assoc.recv() for _ in sent]
        # loopback UDP does not lose datagrams; order between peers may vary
        assert sorted(got) == sorted(sent)
        for (host, port), data in got:
            assert port == (a.port if data.startswith(b"A-") else c.port), (port, data)
        # per peer, the replies keep their order
        for peer in (a, c):
            mine = [d for (h, p), d in got if p == peer.port]
            assert mine == [d for (h, p), d in sent if p == peer.port]
        assert assoc.silent(0.2), "a reply came twice"


# ---------------------------------------------------------------- 3. network


def test_network_udp_rule_blocks_udp_and_leaves_tcp(start_proxy, twin_echo):
    udp, tcp = twin_echo
    assert udp.port == tcp.port
    proxy = start_proxy(config(inbound(), DIRECT, BLOCK, rule("block", network="udp")))
    with socks_open(proxy.port, LOOPBACK, tcp.port) as s:
        assert_echoes(s, b"tcp passes")
    with Association(proxy.port) as assoc:
        before = len(udp.received)
        assoc.send(LOOPBACK, udp.port, b"udp is blocked")
        assert assoc.silent(0.5)
        assert len(udp.received) == before
    dest = f"127.0.0.1:{udp.port}"
    assert decision(proxy, "tcp", dest) == ("in", "direct", "default route")
    assert decision(proxy, "udp", dest) == ("in", "block", "rule #1")


def test_network_tcp_rule_blocks_tcp_and_leaves_udp(start_proxy, twin_echo):
    udp, tcp = twin_echo
    proxy = start_proxy(config(inbound(), DIRECT, BLOCK, rule("block", network=["tcp"])))
    before = tcp.connections
    with socks_open(proxy.port, LOOPBACK, tcp.port) as s:
        assert_blackholed(s)
    assert tcp.connections == before
    with Association(proxy.port) as assoc:
        assoc.echo(udp, b"udp passes")


def test_a_rule_matches_when_any_of_its_matchers_does(start_proxy, udp_peers, echo):
    """A rule's matchers are alternatives, not conditions: with network =
    "udp" and port = [P] in one rule every datagram matches (by network,
    whatever its port), a TCP flow to P matches too (by port), and a TCP
    flow to another port matches neither. (So "UDP to port B only" is a
    rule with port = [B] alone, as the test above writes it.)"""
    a, b, c = udp_peers
    proxy = start_proxy(config(inbound(), DIRECT, BLOCK,
                               rule("block", network="udp", port=[echo.port])))
    with Association(proxy.port) as assoc:
        assoc.send(LOOPBACK, a.port, b"udp to A")
        assert assoc.silent(0.5)
    with socks_open(proxy.port, LOOPBACK, echo.port) as s:
        assert_blackholed(s)
    other = TcpEchoAt()
    try:
        with socks_open(proxy.port, LOOPBACK, other.port) as s:
            assert_echoes(s)
    finally:
        other.close()


# ---------------------------------------------------------------- 4. inbound_tag and source_cidr


def test_inbound_tag_selects_the_route(start_proxy, echo, udp_peers):
    a = udp_peers[0]
    proxy = start_proxy(config(inbound("open", "port0"), inbound("closed", "port1"),
                               DIRECT, BLOCK, rule("block", inbound_tag=["closed"])),
                        n_ports=2)
    open_port, closed_port = proxy.ports
    before = echo.connections
    with socks_open(closed_port, LOOPBACK, echo.port) as s:
        assert_blackholed(s)
    assert echo.connections == before
    with socks_open(open_port, LOOPBACK, echo.port) as s:
        assert_echoes(s)
    # the datagrams of an association carry its inbound's tag
    seen_by_a = len(a.received)
    with Association(closed_port) as assoc:
        assoc.send(LOOPBACK, a.port, b"from the closed inbound")
        assert assoc.silent(0.5)
    assert len(a.received) == seen_by_a
    with Association(open_port) as assoc:
        assoc.echo(a, b"from the open inbound")
    dest = f"127.0.0.1:{echo.port}"
    lines = [l for l in route_lines(proxy, 2) if l[:2] == ("tcp", dest)]
    assert ("tcp", dest, "closed", "block", "rule #1") in lines
    assert ("tcp", dest, "open", "direct", "default route") in lines


def test_source_cidr_selects_the_route(start_proxy, echo, udp_peers):
    a = udp_peers[0]
    proxy = start_proxy(config(inbound(), DIRECT, BLOCK,
                               rule("block", source_cidr=["127.0.0.2/32"])))
    before = echo.connections
    with socks_open(proxy.port, LOOPBACK, echo.port, source="127.0.0.2") as s:
        assert_blackholed(s)
    assert echo.connections == before
    with socks_open(proxy.port, LOOPBACK, echo.port, source="127.0.0.1") as s:
        assert_echoes(s)
    with socks_open(proxy.port, LOOPBACK, echo.port, source="127.0.0.4") as s:
        assert_echoes(s)
    # the datagrams of an association take the control connection's source
    seen_by_a = len(a.received)
    with Association(proxy.port, source="127.0.0.2") as assoc:
        assoc.send(LOOPBACK, a.port, b"from 127.0.0.2")
        assert assoc.silent(0.5)
    assert len(a.received) == seen_by_a
    assert ("udp", f"127.0.0.1:{a.port}", "in", "block", "rule #1") in route_lines(proxy)
    with Association(proxy.port, source="127.0.0.1") as assoc:
        assoc.echo(a, b"from 127.0.0.1")


# ---------------------------------------------------------------- 5-8. sniffing


@pytest.mark.parametrize("protocol", ["socks", "http", "mixed"])
def test_sniffed_http_host_routes_an_ip_flow(start_proxy, origin, protocol):
    proto = "http" if protocol == "http" else "socks"
    blocking = start_proxy(config(inbound(protocol=protocol, sniffing=True), DIRECT, BLOCK,
                                  rule("block", domain=["sniffed.example"])))
    before = len(origin.requests)
    with tunnel_open(proto, blocking.port, LOOPBACK, origin.port) as s:
        assert_blackholed(s, http_get_for("sniffed.example"))
    time.sleep(0.1)
    assert len(origin.requests) == before, "the blocked request reached the server"
    assert (decision(blocking, "tcp", f"127.0.0.1:{origin.port}") ==
            ("in", "block", "rule #1"))

    # the rule on another name: the same flow is dialled to the IP it asked
    # for (sniffed.example does not resolve) and the server answers
    passing = start_proxy(config(inbound(protocol=protocol, sniffing=True), DIRECT, BLOCK,
                                 rule("block", domain=["other.example"])))
    with tunnel_open(proto, passing.port, LOOPBACK, origin.port) as s:
        s.sendall(http_get_for("sniffed.example"))
        assert HttpReader(s).raw_response() == HttpTarget.response(origin.body("/sniff"))
    assert origin.requests[-1][:3] == ("GET", "/sniff", "sniffed.example")


def test_sniffed_host_with_a_port_and_other_case(start_proxy, origin):
    """The Host field's port is not part of the name; domain matching is
    ASCII case-insensitive, and domain_suffix matches on label boundaries."""
    proxy = start_proxy(config(inbound(sniffing=True), DIRECT, BLOCK,
                               rule("block", domain_suffix=["sniffed.example"])))
    with socks_open(proxy.port, LOOPBACK, origin.port) as s:
        assert_blackholed(s, http_get_for("WWW.Sniffed.Example:8080"))
    with socks_open(proxy.port, LOOPBACK, origin.port) as s:
        s.sendall(http_get_for("notsniffed.example"))
        assert HttpReader(s).raw_response() == HttpTarget.response(origin.body("/sniff"))


@pytest.mark.parametrize("protocol", ["socks", "http"])
def test_tls_sni_routes_an_ip_flow(start_proxy, tls_origin, protocol):
    ctx = ssl.create_default_context(cafile=str(tls_origin.cert))
    ctx.check_hostname = False  # the certificate names localhost, the SNI does not

    blocking = start_proxy(config(inbound(protocol=protocol, sniffing=True), DIRECT, BLOCK,
                                  rule("block", domain_suffix=["sni.example"])))
    with tunnel_open(protocol, blocking.port, LOOPBACK, tls_origin.port) as s:
        with pytest.raises(OSError) as info:
            ctx.wrap_socket(s, server_hostname="www.sni.example").close()
        assert not isinstance(info.value, socket.timeout), "the handshake hung"
    assert (decision(blocking, "tcp", f"127.0.0.1:{tls_origin.port}") ==
            ("in", "block", "rule #1"))

    passing = start_proxy(config(inbound(protocol=protocol, sniffing=True), DIRECT, BLOCK,
                                 rule("block", domain_suffix=["other.example"])))
    with tunnel_open(protocol, passing.port, LOOPBACK, tls_origin.port) as s:
        with ctx.wrap_socket(s, server_hostname="www.sni.example") as t:
            t.sendall(b"GET /over-tls HTTP/1.1\r\nHost: www.sni.example\r\n\r\n")
            assert (HttpReader(t).raw_response() ==
                    HttpTarget.response(tls_origin.body("/over-tls")))
    assert (decision(passing, "tcp", f"127.0.0.1:{tls_origin.port}") ==
            ("in", "direct", "default route"))


def test_unsniffable_bytes_take_the_default_route(start_proxy, echo, origin):
    # domain_regex "." matches every name: only a flow without one escapes it
    proxy = start_proxy(config(inbound(sniffing=True), DIRECT, BLOCK,
                               rule("block", domain_regex=["."])))
    with socks_open(proxy.port, LOOPBACK, origin.port) as s:  # the rule does block names
        assert_blackholed(s, http_get_for("any.example"))
    with socks_open(proxy.port, LOOPBACK, echo.port) as s:
        assert_echoes(s, bytes(range(64)) * 4)
        assert_echoes(s, b"and the flow goes on")
    assert (decision(proxy, "tcp", f"127.0.0.1:{echo.port}") ==
            ("in", "direct", "default route"))


@pytest.mark.parametrize("protocol", ["socks", "http"])
def test_server_speaks_first_under_sniffing(start_proxy, banner_server, protocol):
    """A client that sends nothing: the sniff gives up (after ~300 ms) and the
    flow is dialled; the server's banner arrives."""
    proxy = start_proxy(config(inbound(protocol=protocol, sniffing=True), DIRECT, BLOCK,
                               rule("block", domain_regex=["."])))
    banner = b"220 server speaks first\r\n"
    with tunnel_open(protocol, proxy.port, LOOPBACK, banner_server.port) as s:
        start = time.monotonic()
        got = recv_exact(s, len(banner))
        took = time.monotonic() - start
        assert got == banner
        assert 0.2 <= took < 2.0, f"the banner came after {took:.2f} s"
        assert_echoes(s, b"then the client talks")


def test_sniffing_off_does_not_match_the_domain_rule(start_proxy, origin):
    for sniffing in (False, None):  # explicitly off, and off by default
        proxy = start_proxy(config(inbound(sniffing=sniffing), DIRECT, BLOCK,
                                   rule("block", domain=["sniffed.example"])))
        with socks_open(proxy.port, LOOPBACK, origin.port) as s:
            s.sendall(http_get_for("sniffed.example"))
            assert HttpReader(s).raw_response() == HttpTarget.response(origin.body("/sniff"))
        assert (decision(proxy, "tcp", f"127.0.0.1:{origin.port}") ==
                ("in", "direct", "default route"))


def test_sniffing_reassembles_split_first_bytes(start_proxy, origin, tls_origin):
    """A Host line and a ClientHello that come in several segments are still
    read whole before the route is decided."""
    proxy = start_proxy(config(inbound(sniffing=True), DIRECT, BLOCK,
                               rule("block", domain=["sniffed.example", "sni.example"])))
    request = http_get_for("sniffed.example")
    with socks_open(proxy.port, LOOPBACK, origin.port) as s:
        for cut in (b"GET /sn", b"iff HTTP/1.1\r\nHo", b"st: sniffed.exa"):
            s.sendall(cut)
            request = request[len(cut):]
            time.sleep(0.03)
        assert_blackholed(s, request)

    ctx = ssl.create_default_context(cafile=str(tls_origin.cert))
    ctx.check_hostname = False
    for name, blocked in (("sni.example", True), ("other.example", False)):
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = ctx.wrap_bio(incoming, outgoing, server_hostname=name)
        with pytest.raises(ssl.SSLWantReadError):
            tls.do_handshake()
        hello = outgoing.read()
        assert hello[0] == 0x16 and len(hello) > 150
        with socks_open(proxy.port, LOOPBACK, tls_origin.port) as s:
            for i in range(0, len(hello), 60):
                s.sendall(hello[i:i + 60])
                time.sleep(0.01)
            answer = closed_without_bytes(s, 2.0 if blocked else 1.0)
            if blocked:
                assert answer == "eof"
            else:  # the ServerHello of the local server
                assert isinstance(answer, bytes) and answer[:1] == b"\x16", answer


def test_sniffing_sees_bytes_sent_with_the_socks_request(start_proxy, origin):
    """A client that does not wait for the replies: greeting, request and
    the HTTP request in one segment."""
    proxy = start_proxy(config(inbound(sniffing=True), DIRECT, BLOCK,
                               rule("block", domain=["sniffed.example"])))
    for host, blocked in (("sniffed.example", True), ("fine.example", False)):
        with connect(proxy.port) as s:
            s.sendall(bytes([5, 1, 0]) + bytes([5, 1, 0]) + socks_addr(LOOPBACK, origin.port) +
                      http_get_for(host))
            assert recv_exact(s, 2) == b"\x05\x00"
            assert recv_exact(s, 3) == b"\x05\x00\x00"
            read_socks_addr(s)
            if blocked:
                assert closed_without_bytes(s) == "eof"
            else:
                assert (HttpReader(s).raw_response() ==
                        HttpTarget.response(origin.body("/sniff")))


def test_sniffed_name_is_an_extra_candidate(start_proxy, origin):
    """A flow requested by name keeps that name for the domain matchers; the
    sniffed one is matched as well."""
    for name in ("localhost", "sniffed.example"):
        proxy = start_proxy(config(inbound(sniffing=True), DIRECT, BLOCK,
                                   rule("block", domain=[name])))
        with socks_open(proxy.port, "localhost", origin.port) as s:
            assert_blackholed(s, http_get_for("sniffed.example"))
    proxy = start_proxy(config(inbound(sniffing=True), DIRECT, BLOCK,
                               rule("block", domain=["neither.example"])))
    with socks_open(proxy.port, "localhost", origin.port) as s:
        s.sendall(http_get_for("sniffed.example"))
        assert HttpReader(s).raw_response() == HttpTarget.response(origin.body("/sniff"))


def test_http_connect_blocked_by_a_rule(start_proxy, echo):
    """Without sniffing the http inbound decides before it answers: 403.
    With sniffing it answers 200 first, then the blackhole closes."""
    for sniffing, answer in ((False, "403"), (True, "200")):
        proxy = start_proxy(config(inbound(protocol="http", sniffing=sniffing), DIRECT, BLOCK,
                                   rule("block", cidr=["127.0.0.1/32"], port=[1])))
        with connect(proxy.port) as s:
            s.sendall(f"CONNECT 127.0.0.1:{echo.port} HTTP/1.1\r\n\r\n".encode())
            got = closed_without_bytes(s)
            if answer == "403":
                assert isinstance(got, bytes) and got.startswith(b"HTTP/1.1 403 Forbidden\r\n"), got
                assert got.endswith(b"\r\n\r\ndestination not allowed: blocked by a route\n"), got
            else:
                assert got == ESTABLISHED


def test_http_proxy_requests_are_routed_each_on_its_own(start_proxy, origin, echo):
    """Absolute-form requests on one keep-alive connection: one the rules
    pass is answered by the origin, one they block gets the 403 (and the
    close it announces)."""
    proxy = start_proxy(config(inbound(protocol="http", sniffing=True), DIRECT, BLOCK,
                               rule("block", port=[echo.port])))
    passing, blocked = f"127.0.0.1:{origin.port}", f"127.0.0.1:{echo.port}"
    with connect(proxy.port) as s:
        r = HttpReader(s)
        s.sendall(f"GET http://{passing}/one HTTP/1.1\r\nHost: {passing}\r\n\r\n".encode())
        assert r.raw_response() == HttpTarget.response(origin.body("/one"))
        s.sendall(f"GET http://{blocked}/two HTTP/1.1\r\nHost: {blocked}\r\n\r\n".encode())
        head, body = r.response()
        assert head.startswith(b"HTTP/1.1 403 Forbidden\r\n"), head
        assert body == b"destination not allowed: blocked by a route\n"
        assert r.at_eof()


def test_udp_associate_on_a_sniffing_inbound(start_proxy, udp_peers):
    """Sniffing is for streams: an association on a sniffing inbound relays
    at once, each datagram routed by its own destination."""
    a, b, _ = udp_peers
    proxy = start_proxy(config(inbound(sniffing=True), DIRECT, BLOCK,
                               rule("block", port=[b.port])))
    with Association(proxy.port) as assoc:
        assoc.echo(a, b"no sniffing here")
        assoc.send(LOOPBACK, b.port, b"blocked")
        assert assoc.silent(0.3)


def test_many_concurrent_sniffed_flows(start_proxy, echo):
    """200 flows at once, every other one with a blocked Host: each is
    decided on its own bytes."""
    proxy = start_proxy(config(inbound(sniffing=True), DIRECT, BLOCK,
                               rule("block", domain_suffix=["blocked.example"])))

    async def one(i):
        reader, writer = await asyncio.open_connection(LOOPBACK, proxy.port)
        try:
            writer.write(bytes([5, 1, 0]) + bytes([5, 1, 0]) + socks_addr(LOOPBACK, echo.port))
            assert await reader.readexactly(2) == b"\x05\x00"
            assert (await reader.readexactly(10))[:3] == b"\x05\x00\x00"
            request = http_get_for(f"h{i}.blocked.example" if i % 2 else f"h{i}.fine.example")
            writer.write(request)
            if i % 2:
                return await reader.read() == b""
            return await reader.readexactly(len(request)) == request
        finally:
            writer.close()

    async def main():
        return await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(200))), 20)

    results = asyncio.run(main())
    assert [i for i, ok in enumerate(results) if not ok] == []


def test_sniffing_client_that_sends_a_whole_message_then_half_closes(start_proxy, echo):
    """Bytes that cannot start a request or a ClientHello end the sniff at
    once; the half-close that follows is relayed like the bytes."""
    proxy = start_proxy(config(inbound(sniffing=True), DIRECT, BLOCK,
                               rule("block", domain_regex=["."])))
    with socks_open(proxy.port, LOOPBACK, echo.port) as s:
        s.sendall(b"hello")
        s.shutdown(socket.SHUT_WR)
        assert recv_all(s, 3) == b"hello"


# A client's FIN while the sniff waits ends the sniff with no name: the flow
# opens, the bytes so far go first and the FIN follows them.


@pytest.mark.parametrize("protocol", ["socks", "http"])
@pytest.mark.parametrize("first", [b"GET /partial", b"\x16\x03\x01\x00"], ids=["http", "tls"])
def test_sniffing_keeps_a_sniffable_prefix_sent_before_a_half_close(start_proxy, echo, protocol,
                                                                    first):
    proxy = start_proxy(config(inbound(protocol=protocol, sniffing=True), DIRECT, BLOCK,
                               rule("block", domain=["sniffed.example"])))
    with tunnel_open(protocol, proxy.port, LOOPBACK, echo.port) as s:
        s.sendall(first)
        s.shutdown(socket.SHUT_WR)
        assert recv_all(s, 3) == first


@pytest.mark.parametrize("protocol", ["socks", "http"])
def test_sniffing_client_that_only_half_closes_gets_the_banner(start_proxy, banner_server,
                                                              protocol):
    proxy = start_proxy(config(inbound(protocol=protocol, sniffing=True), DIRECT, BLOCK,
                               rule("block", domain=["sniffed.example"])))
    with tunnel_open(protocol, proxy.port, LOOPBACK, banner_server.port) as s:
        s.shutdown(socket.SHUT_WR)
        assert recv_all(s, 3) == b"220 server speaks first\r\n"


@pytest.mark.parametrize("protocol", ["socks", "http"])
def test_without_sniffing_half_closes_pass(start_proxy, echo, banner_server, protocol):
    """The control for the two above: the same clients without sniffing."""
    proxy = start_proxy(config(inbound(protocol=protocol), DIRECT))
    with tunnel_open(protocol, proxy.port, LOOPBACK, echo.port) as s:
        s.sendall(b"GET /partial")
        s.shutdown(socket.SHUT_WR)
        assert recv_all(s, 3) == b"GET /partial"
    with tunnel_open(protocol, proxy.port, LOOPBACK, banner_server.port) as s:
        s.shutdown(socket.SHUT_WR)
        assert recv_all(s, 3) == b"220 server speaks first\r\n"


# ---------------------------------------------------------------- 9. order, default


def test_first_matching_rule_wins(start_proxy, echo):
    both = [rule("direct", port=[echo.port]), rule("block", cidr=["127.0.0.0/8"])]
    proxy = start_proxy(config(inbound(), DIRECT, BLOCK, *both, default="block"))
    with socks_open(proxy.port, LOOPBACK, echo.port) as s:
        assert_echoes(s)
    assert decision(proxy, "tcp", f"127.0.0.1:{echo.port}") == ("in", "direct", "rule #1")

    proxy = start_proxy(config(inbound(), DIRECT, BLOCK, *reversed(both)))
    before = echo.connections
    with socks_open(proxy.port, LOOPBACK, echo.port) as s:
        assert_blackholed(s)
    assert echo.connections == before
    assert decision(proxy, "tcp", f"127.0.0.1:{echo.port}") == ("in", "block", "rule #1")


def test_no_match_takes_the_default_route(start_proxy, echo):
    unrelated = rule("direct", domain=["nothing.example"], cidr=["10.0.0.0/8"], port=[1])
    # [route].default
    proxy = start_proxy(config(inbound(), DIRECT, BLOCK, unrelated, default="block"))
    with socks_open(proxy.port, LOOPBACK, echo.port) as s:
        assert_blackholed(s)
    assert decision(proxy, "tcp", f"127.0.0.1:{echo.port}") == ("in", "block", "default route")
    # without it, the first [[outbound]]
    proxy = start_proxy(config(inbound(), BLOCK, DIRECT, unrelated))
    with socks_open(proxy.port, LOOPBACK, echo.port) as s:
        assert_blackholed(s)
    proxy = start_proxy(config(inbound(), DIRECT, BLOCK, unrelated))
    with socks_open(proxy.port, LOOPBACK, echo.port) as s:
        assert_echoes(s)


@pytest.mark.parametrize("matcher,blocked", [
    ({"domain": ["LocalHost"]}, True),
    ({"domain": ["host"]}, False),
    ({"domain_suffix": ["localhost"]}, True),
    ({"domain_suffix": ["calhost"]}, False),  # label boundaries
    ({"domain_keyword": ["calho"]}, True),
    ({"domain_keyword": ["remote"]}, False),
    ({"domain_regex": ["^local.*t$"]}, True),
    ({"domain_regex": ["^remote"]}, False),
    ({"port": "1-65535"}, True),
    ({"cidr": ["127.0.0.1/32"]}, False),  # a name is not an address
], ids=lambda v: "-".join(f"{k}={v[k]}" for k in v) if isinstance(v, dict) else str(v))
def test_domain_matchers_on_a_socks_name(start_proxy, echo, matcher, blocked):
    proxy = start_proxy(config(inbound(), DIRECT, BLOCK, rule("block", **matcher)))
    with socks_open(proxy.port, "localhost", echo.port) as s:
        if blocked:
            assert_blackholed(s)
        else:
            assert_echoes(s)
    want = ("in", "block", "rule #1") if blocked else ("in", "direct", "default route")
    assert decision(proxy, "tcp", f"localhost:{echo.port}") == want


# ---------------------------------------------------------------- geoip.dat and geosite.dat


def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(num, payload):
    """A length-delimited protobuf field (wire type 2)."""
    if isinstance(payload, str):
        payload = payload.encode()
    return _varint(num << 3 | 2) + _varint(len(payload)) + payload


def _int_field(num, value):
    return _varint(num << 3) + _varint(value)


def geoip_dat(entries):
    """GeoIPList from {code: ["a.b.c.d/len", ...]} (v2ray's geodata format)."""
    out = b""
    for code, cidrs in entries.items():
        entry = _field(1, code)
        for c in cidrs:
            addr, plen = c.split("/")
            entry += _field(2, _field(1, socket.inet_aton(addr)) + _int_field(2, int(plen)))
        out += _field(1, entry)
    return out


# Domain.Type: Plain (keyword) 0, Regex 1, RootDomain (suffix) 2, Full 3
def geosite_dat(entries):
    """GeoSiteList from {code: [(type, value, [attribute keys]), ...]}."""
    out = b""
    for code, domains in entries.items():
        site = _field(1, code)
        for kind, value, attrs in domains:
            d = _int_field(1, kind) + _field(2, value)
            for key in attrs:
                d += _field(3, _field(1, key) + _int_field(2, 1))
            site += _field(2, d)
        out += _field(1, site)
    return out


@pytest.fixture
def geodata(tmp_path):
    ip, site = tmp_path / "geoip.dat", tmp_path / "geosite.dat"
    ip.write_bytes(geoip_dat({"LOOP": ["127.0.0.0/8"], "TEN": ["10.0.0.0/8"]}))
    site.write_bytes(geosite_dat({"TEST": [(3, "localhost", ["ads"]),
                                           (2, "sniffed.example", []),
                                           (0, "keyword-only", [])]}))
    return str(ip), str(site)


@pytest.mark.parametrize("matcher,by_ip,by_name", [
    ({"geoip": ["loop"]}, True, False),      # codes are case-insensitive; a name has no IP
    ({"geoip": ["!ten"]}, True, False),      # inverted; a name matches neither way
    ({"geoip": ["ten"]}, False, False),
    ({"geosite": ["test"]}, False, True),
    ({"geosite": ["test@ads"]}, False, True),
    ({"geosite": ["test@cn"]}, False, False),  # no domain carries the attribute
], ids=lambda v: "-".join(f"{k}={v[k][0]}" for k in v) if isinstance(v, dict) else str(v))
def test_geodata_matchers(start_proxy, echo, geodata, matcher, by_ip, by_name):
    geoip, geosite = geodata
    proxy = start_proxy(config(inbound(), DIRECT, BLOCK, rule("block", **matcher),
                               geoip=geoip, geosite=geosite))
    for host, blocked in ((LOOPBACK, by_ip), ("localhost", by_name)):
        with socks_open(proxy.port, host, echo.port) as s:
            if blocked:
                assert_blackholed(s)
            else:
                assert_echoes(s)


def test_geosite_matches_a_sniffed_name(start_proxy, origin, geodata):
    geoip, geosite = geodata
    proxy = start_proxy(config(inbound(sniffing=True), DIRECT, BLOCK,
                               rule("block", geosite=["test"]), geosite=geosite))
    with socks_open(proxy.port, LOOPBACK, origin.port) as s:
        assert_blackholed(s, http_get_for("www.sniffed.example"))
    with socks_open(proxy.port, LOOPBACK, origin.port) as s:
        s.sendall(http_get_for("sniffed.example.org"))
        assert HttpReader(s).raw_response() == HttpTarget.response(origin.body("/sniff"))


def test_check_names_a_missing_geodata_code(run, tmp_path, geodata):
    geoip, geosite = geodata
    cfg = tmp_path / "route.toml"
    cfg.write_text(config(BASE, rule("block", geosite=["test", "nope"]), geosite=geosite))
    r = run("--test", "-c", str(cfg))
    assert (r.returncode, r.stderr.strip()) == (
        1, "configuration invalid: building route failed: geosite code not found: nope")
    cfg.write_text(config(BASE, rule("block", geoip=["!absent"]), geoip=geoip))
    r = run("--test", "-c", str(cfg))
    assert (r.returncode, r.stderr.strip()) == (
        1, "configuration invalid: building route failed: geoip code not found: absent")


# ---------------------------------------------------------------- 10. --test


BASE = config(inbound("in", "port0").replace("{port0}", "1080"), DIRECT, BLOCK)


@pytest.mark.parametrize("route,message", [
    ('[[route.rule]]\noutbound = "block"\ngeosite = ["cn"]\n',
     "configuration invalid: building route failed: a geosite matcher is used but no geosite "
     "file is configured"),
    ('[[route.rule]]\noutbound = "block"\ngeoip = ["cn"]\n',
     "configuration invalid: building route failed: a geoip matcher is used but no geoip "
     "file is configured"),
    ('[[route.rule]]\noutbound = "block"\n',
     "configuration invalid: route rule #1 (outbound block) has no matcher, so it can never "
     "match"),
    ('[[route.rule]]\noutbound = "block"\ndomain = ["a.example"]\n'
     '[[route.rule]]\noutbound = "direct"\n',
     "configuration invalid: route rule #2 (outbound direct) has no matcher, so it can never "
     "match"),
], ids=["geosite-without-file", "geoip-without-file", "no-matcher", "no-matcher-second"])
def test_check_refuses_route(run, tmp_path, route, message):
    cfg = tmp_path / "route.toml"
    cfg.write_text(BASE + route)
    r = run("--test", "-c", str(cfg))
    assert (r.returncode, r.stdout, r.stderr.strip()) == (1, "", message)


@pytest.mark.parametrize("pattern", ["(unclosed", "a[b"])
def test_check_refuses_a_bad_domain_regex(run, tmp_path, pattern):
    cfg = tmp_path / "route.toml"
    cfg.write_text(BASE + rule("block", domain_regex=["^fine$", pattern]))
    r = run("--test", "-c", str(cfg))
    assert r.returncode == 1 and r.stdout == ""
    prefix = "configuration invalid: route rule #1: bad domain_regex "
    assert r.stderr.startswith(prefix), r.stderr
    assert pattern in r.stderr[len(prefix) - 1:], r.stderr
    assert r.stderr.count("\n") == 1, r.stderr


def test_check_reads_geodata_only_when_a_matcher_uses_it(run, tmp_path):
    cfg = tmp_path / "route.toml"
    missing = tmp_path / "nowhere"
    cfg.write_text(config(BASE, rule("block", domain=["a.example"]),
                          geoip=str(missing / "geoip.dat"), geosite=str(missing / "geosite.dat")))
    r = run("--test", "-c", str(cfg))
    assert (r.returncode, r.stdout.strip(), r.stderr) == (0, "Configuration OK.", "")


# ---------------------------------------------------------------- sniffing on trojan and vless

SNIFF_PASSWORD = "sniff-pass"
SNIFF_UUID = "0b5c0e8a-6f2c-4c55-9a1b-3f0f5f3c7d21"


def carried_inbound(protocol, sniffing):
    """A plain trojan or vless inbound with one user (issue 22: sniffing on
    every inbound that carries flows)."""
    user = (f'password = "{SNIFF_PASSWORD}"' if protocol == "trojan"
            else f'id = "{SNIFF_UUID}"')
    return (f'[[inbound]]\ntag = "in"\nprotocol = "{protocol}"\nlisten = "127.0.0.1"\n'
            f'port = {{port0}}\nsniffing = {"true" if sniffing else "false"}\n'
            f'[[inbound.settings.users]]\n{user}\n\n')


def carried_request(protocol, port, payload):
    """The protocol's request for 127.0.0.1:port, the payload in the same
    segment, as clients send it."""
    addr = socket.inet_aton(LOOPBACK)
    if protocol == "trojan":
        pw = hashlib.sha224(SNIFF_PASSWORD.encode()).hexdigest().encode()
        return pw + b"\r\n\x01\x01" + addr + struct.pack(">H", port) + b"\r\n" + payload
    uuid = bytes.fromhex(SNIFF_UUID.replace("-", ""))
    return b"\x00" + uuid + b"\x00\x01" + struct.pack(">H", port) + b"\x01" + addr + payload


@pytest.mark.parametrize("protocol", ["trojan", "vless"])
def test_a_trojan_or_vless_inbound_sniffs_its_flows(start_proxy, origin, protocol):
    """sniffing = true on a trojan or vless inbound is read, not ignored:
    the HTTP Host of an IP-addressed flow meets a domain rule; with
    sniffing off the same flow passes the rule by."""
    get = http_get_for("sniffed.example")
    on = start_proxy(config(carried_inbound(protocol, True), DIRECT, BLOCK,
                            rule("block", domain=["sniffed.example"])))
    before = len(origin.requests)
    with socket.create_connection((LOOPBACK, on.port), timeout=3) as s:
        s.sendall(carried_request(protocol, origin.port, get))
        s.settimeout(2)
        got = b""
        try:
            while chunk := s.recv(4096):
                got += chunk
        except socket.timeout:
            pass
    assert b"HTTP/1.1" not in got, got
    assert len(origin.requests) == before, "the blocked request reached the server"
    assert decision(on, "tcp", f"127.0.0.1:{origin.port}") == ("in", "block", "rule #1")

    off = start_proxy(config(carried_inbound(protocol, False), DIRECT, BLOCK,
                             rule("block", domain=["sniffed.example"])))
    with socket.create_connection((LOOPBACK, off.port), timeout=3) as s:
        s.sendall(carried_request(protocol, origin.port, get))
        s.settimeout(3)
        got = b""
        while b"\r\n\r\n" not in got:
            chunk = s.recv(4096)
            assert chunk, got
            got += chunk
    assert b" 200 " in got.split(b"\r\n", 1)[0] or b" 200 " in got, got[:80]
    assert origin.requests[-1][:3] == ("GET", "/sniff", "sniffed.example")
