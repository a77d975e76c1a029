"""The DNS service end to end (issue 20): with a [[dns.server]] configured,
every TCP flow and UDP datagram to port 53, from any inbound and to any
address, is answered in process by the service (hosts entries, the cache,
then the upstream the [[dns.rule]]s or `final` pick); its upstreams are
udp, tcp, DNS over TLS or DNS over HTTPS, dialled directly or, with
through_proxy, as flows routed with inbound tag "dns". Without a
[[dns.server]], port 53 is routed like any other port.

Every test starts the real binary on 127.0.0.1 at debug level with a
config written to tmp_path and asks through its SOCKS5 inbound (UDP
ASSOCIATE, CONNECT). The upstreams are dnskit's servers on 127.0.0.0/8;
their query counts say which upstream answered and whether the cache did.
The addresses the client asks (192.0.2.1, 198.51.100.7, 2001:db8::1) are
documentation addresses no packet is sent to: the service answers for
them. Tests that need a real server on port 53 bind 127.0.0.7x:53 and are
skipped when this user may not. Nothing leaves the loopback interface.
"""
import os
import random
import re
import socket
import struct
import time

import pytest

import dnskit
from dnskit import (FORMERR, NOERROR, NXDOMAIN, SERVFAIL, TYPE_A, TYPE_AAAA, UDP_PLAIN_MAX,
                    DnsUpstream, ask, big_addresses, build_query, framed, make_ca_cert, parse,
                    random_name, read_framed, tls_server_context, wildcard_address)
from proxykit import (Association, Proxy, assert_blackholed, closed_without_bytes,
                      connect, recv_exact, socks_open, stop_cleanly)

# The exact `--test` messages (src/supervisor/spec.c's catalogue; a bad
# protocol is the TOML schema's own enum error).
EXPECTED_ERRORS = {
    "rule-unknown-server":
        "configuration invalid: dns: rule #1 references unknown server tag: nope",
    "final-unknown-server":
        "configuration invalid: dns: final references unknown server tag: nope",
    "udp-through-proxy":
        "configuration invalid: dns: server local: through_proxy needs protocol tcp, tls or https",
    "address-name": 'configuration invalid: dns: server local: address "dns.example:53" is not '
                    "an IP address with an optional port",
    "address-port": 'configuration invalid: dns: server local: address "127.0.0.1:70000" is '
                    "not an IP address with an optional port",
    "address-empty": 'configuration invalid: dns: server local: address "" is not an IP address '
                     "with an optional port",
    "protocol": "configuration invalid: TOML parse error at line 16, column 12\n   |\n"
                '16 | protocol = "quic"\n   |            ^^^^^^\n'
                "unknown variant `quic`, expected one of `udp`, `tcp`, `tls`, `https`",
}

# Addresses the client asks; the service answers for them (no packet goes there).
UDP_TARGET, TCP_TARGET, V6_TARGET = "192.0.2.1", "198.51.100.7", "2001:db8::1"

TABLE = {
    "www.example.test": ["192.0.2.10", "2001:db8::10"],
    "v4only.example.test": ["192.0.2.11"],
    "big.example.test": big_addresses(40),
    "mid.example.test": big_addresses(30),  # 1,005 bytes with OPT: over 512, under 1,232
    "huge.example.test": big_addresses(100),  # 3,346 bytes (no compression): over 1,232
}


# ---------------------------------------------------------------- configs

def toml(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return "[" + ", ".join(toml(x) for x in v) + "]"


def table(header, **keys):
    return f"[{header}]\n" + "".join(f"{k} = {toml(v)}\n" for k, v in keys.items()) + "\n"


def server(tag, address, **keys):
    """A [[dns.server]]; keys as in the contract (protocol, through_proxy,
    server_name, ca, allow_insecure, path)."""
    return table("[dns.server]", tag=tag, address=address, **keys)


def dns_rule(server_tag, **matchers):
    return table("[dns.rule]", server=server_tag, **matchers)


def host(name, *addresses):
    return table("[dns.host]", name=name, address=list(addresses))


INBOUND = ('[[inbound]]\ntag = "in"\nprotocol = "socks"\nlisten = "127.0.0.1"\n'
           'port = {port0}\n\n')
HTTP_INBOUND = ('[[inbound]]\ntag = "web"\nprotocol = "http"\nlisten = "127.0.0.1"\n'
                'port = {port1}\n\n')
DIRECT = '[[outbound]]\ntag = "direct"\nprotocol = "freedom"\n\n'
BLOCK = '[[outbound]]\ntag = "block"\nprotocol = "blackhole"\n\n'


def via_socks(port):
    return (f'[[outbound]]\ntag = "via"\nprotocol = "socks"\nserver = "127.0.0.1"\n'
            f"port = {port}\n\n")


def config(*dns_parts, inbounds=INBOUND, outbounds=DIRECT, routes=(), default=None, **dns_keys):
    """Inbounds, outbounds, [route] and its rules, then [dns] (dns_keys:
    final, cache_size, prefetch, timeout) and the dns_parts (servers, rules,
    hosts). Proxy fills {portN}: no other braces."""
    text = inbounds + outbounds
    if default is not None or routes:
        text += "[route]\n" + (f'default = "{default}"\n' if default else "") + "\n"
        for outbound, matchers in routes:
            text += table("[route.rule]", outbound=outbound, **matchers)
    if dns_parts or dns_keys:
        text += table("dns", **dns_keys)
    return text + "".join(dns_parts)


# ---------------------------------------------------------------- fixtures and helpers

@pytest.fixture
def start_proxy(app, tmp_path):
    """Starts etemenanki-app processes at debug level; every one is stopped
    at teardown and must exit 0."""
    started = []

    def _start(text, n_ports=1, **kw):
        kw.setdefault("log_level", "debug")
        p = Proxy(app, tmp_path, text, n_ports, **kw)
        started.append(p)
        return p.start()

    yield _start
    stop_cleanly(started, "proxy")


@pytest.fixture
def upstream():
    s = DnsUpstream(TABLE)
    yield s
    s.close()


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A self-signed certificate for dns.test (and IP 127.0.0.1): (cert, key);
    the cert is its own CA."""
    return make_ca_cert(tmp_path_factory.mktemp("dns-pki"), "dns.test")


def on_low_port(host, port=53, **kw):
    """A DnsUpstream on host:port (a privileged one), or the test is
    skipped when this user may not bind it."""
    try:
        return DnsUpstream(port=port, host=host, **kw)
    except PermissionError:
        pytest.skip(f"binding port {port} needs root (or CAP_NET_BIND_SERVICE)")
    except OSError as e:
        pytest.skip(f"{host}:{port} is not free: {e}")


# The routing decision (src/supervisor/connector.c MSG_DECISION); the DNS
# service's internal target has an empty tag: "takes @v1 (default route)".
ROUTE_LINE = re.compile(r"DEBUG route: (tcp|udp) flow to (\S+) from inbound (\S+) takes (\S*)@v\d+ "
                        r"\((default route|rule #\d+)\)")


def decisions(proxy, network, dest, timeout=2.0):
    """(inbound, target tag, why) of every decision logged for dest, once
    there is one (or at timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        found = [l[2:] for l in ROUTE_LINE.findall(proxy.log()) if l[:2] == (network, dest)]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


def assert_answer(msg, q, rcode=NOERROR, addresses=None):
    """msg answers q: same id, QR set, RD kept, the question copied; rcode,
    and the addresses in any order when given."""
    sent = parse(q)
    assert (msg.id, msg.qr, msg.rd, msg.opcode) == (sent.id, True, sent.rd, 0), msg
    assert [(n.lower(), t, c) for n, t, c in msg.questions] == \
        [(n.lower(), t, c) for n, t, c in sent.questions], msg
    assert msg.rcode == rcode, msg
    if addresses is not None:
        assert sorted(msg.addresses()) == sorted(addresses), msg


def udp_ask(proxy, name, qtype=TYPE_A, target=UDP_TARGET, edns=None, timeout=3.0):
    """One query through a new association to target:53; (query bytes,
    parsed answer). Asserts the answer claims to come from target:53."""
    q = build_query(name, qtype, edns=edns)
    with Association(proxy.port) as assoc:
        assoc.send(target, 53, q)
        try:
            src, data = assoc.recv(timeout)
        except socket.timeout:
            raise AssertionError(f"no answer for {name} within {timeout} s; log:\n{proxy.log()}")
    assert src == (target, 53), src
    return q, parse(data)


def tcp_ask(proxy, name, qtype=TYPE_A, target=TCP_TARGET, timeout=3.0):
    q = build_query(name, qtype)
    with socks_open(proxy.port, target, 53) as s:
        s.settimeout(timeout)
        s.sendall(framed(q))
        try:
            return q, parse(read_framed(s))
        except (socket.timeout, EOFError) as e:
            raise AssertionError(f"no TCP answer for {name} ({e}); log:\n{proxy.log()}")


def flood(proxy, names, target=UDP_TARGET, window=32):
    """An A query for each name through one association, window of them in
    flight; asserts each gets the wildcard upstream's address."""
    pending, answered, i = {}, 0, 0
    with Association(proxy.port) as assoc:
        while answered < len(names):
            while i < len(names) and len(pending) < window:
                pending[i & 0xFFFF] = names[i]
                assoc.send(target, 53, build_query(names[i], id_=i & 0xFFFF))
                i += 1
            try:
                _, data = assoc.recv(3.0)
            except socket.timeout:
                raise AssertionError(f"{len(pending)} queries unanswered after {answered}; "
                                     f"log:\n{proxy.log()[-3000:]}")
            a = parse(data)
            name = pending.pop(a.id)
            assert a.addresses() == [wildcard_address(name)], a
            answered += 1


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+) kB", f.read()).group(1))


# ---------------------------------------------------------------- the kit


def test_the_kits_servers_answer_its_own_clients():
    """dnskit's codec, upstreams (UDP, TCP, truncation, silence, DoT, DoH
    with pipelining) and clients against each other, no proxy involved: a
    failure here is the kit's, not the service's."""
    dnskit.self_check()


# ---------------------------------------------------------------- answered in process


@pytest.mark.parametrize("target", [UDP_TARGET, V6_TARGET])
def test_a_udp_query_through_udp_associate_is_answered_by_the_service(start_proxy, upstream,
                                                                      target):
    proxy = start_proxy(config(server("local", upstream.address)))
    q, a = udp_ask(proxy, "www.example.test", target=target)
    assert_answer(a, q, NOERROR, ["192.0.2.10"])
    q, a = udp_ask(proxy, "www.example.test", TYPE_AAAA, target=target)
    assert_answer(a, q, NOERROR, ["2001:db8::10"])
    assert upstream.count("www.example.test") == 2, upstream.queries
    # the flow took the service's internal target, whose tag is empty
    dest = f"[{target}]:53" if ":" in target else f"{target}:53"
    assert ("in", "", "default route") in decisions(proxy, "udp", dest), proxy.log()


@pytest.mark.parametrize("inbound", ["socks", "http"])
def test_a_tcp_query_through_connect_is_answered_by_the_service(start_proxy, upstream, inbound):
    proxy = start_proxy(config(server("local", upstream.address), inbounds=INBOUND + HTTP_INBOUND),
                        n_ports=2)
    q = build_query("www.example.test")
    if inbound == "socks":
        s = socks_open(proxy.port, TCP_TARGET, 53)
    else:
        s = connect(proxy.ports[1])
        s.sendall(f"CONNECT {TCP_TARGET}:53 HTTP/1.1\r\nHost: {TCP_TARGET}:53\r\n\r\n".encode())
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            head += recv_exact(s, 1)
        assert head.startswith(b"HTTP/1.1 200"), head
    with s:
        s.sendall(framed(q))
        assert_answer(parse(read_framed(s)), q, NOERROR, ["192.0.2.10"])
    assert upstream.count("www.example.test") == 1
    tag = "in" if inbound == "socks" else "web"
    assert (tag, "", "default route") in decisions(proxy, "tcp", f"{TCP_TARGET}:53"), proxy.log()


def test_several_queries_on_one_tcp_stream(start_proxy, upstream):
    """RFC 7766: a client may send queries back to back on one connection;
    each is answered (matched by id, in whatever order)."""
    proxy = start_proxy(config(server("local", upstream.address)))
    qs = [build_query(n, t, id_=i) for i, (n, t) in enumerate(
        [("www.example.test", TYPE_A), ("v4only.example.test", TYPE_A),
         ("www.example.test", TYPE_AAAA), ("missing.example.test", TYPE_A)])]
    with socks_open(proxy.port, TCP_TARGET, 53) as s:
        s.sendall(b"".join(framed(q) for q in qs))
        got = {m.id: m for m in (parse(read_framed(s)) for _ in qs)}
    assert_answer(got[0], qs[0], NOERROR, ["192.0.2.10"])
    assert_answer(got[1], qs[1], NOERROR, ["192.0.2.11"])
    assert_answer(got[2], qs[2], NOERROR, ["2001:db8::10"])
    assert_answer(got[3], qs[3], NXDOMAIN, [])


def test_the_upstreams_own_answer_codes_pass(start_proxy, upstream):
    """NXDOMAIN, and NOERROR with no answer (a name with no AAAA), reach the
    client as the upstream gave them."""
    proxy = start_proxy(config(server("local", upstream.address)))
    q, a = udp_ask(proxy, "missing.example.test")
    assert_answer(a, q, NXDOMAIN, [])
    q, a = udp_ask(proxy, "v4only.example.test", TYPE_AAAA)
    assert_answer(a, q, NOERROR, [])


def test_a_reachable_server_on_port_53_is_answered_by_the_service_all_the_same(start_proxy,
                                                                              upstream):
    """Interception is by port, not by address: a real server on
    127.0.0.79:53 gets nothing, the service answers from its upstream."""
    decoy = on_low_port("127.0.0.79", table={"www.example.test": ["203.0.113.9"]})
    try:
        proxy = start_proxy(config(server("local", upstream.address)))
        q, a = udp_ask(proxy, "www.example.test", target="127.0.0.79")
        assert_answer(a, q, NOERROR, ["192.0.2.10"])
        q, a = tcp_ask(proxy, "www.example.test", target="127.0.0.79")
        assert_answer(a, q, NOERROR, ["192.0.2.10"])
        assert decoy.queries == [] and decoy.connections == 0
    finally:
        decoy.close()


# ---------------------------------------------------------------- choosing the upstream


def test_rules_pick_the_server_and_final_the_rest(start_proxy):
    local = DnsUpstream({"www.example.test": ["192.0.2.10"], "a.corp.test": ["192.0.2.99"]})
    corp = DnsUpstream({"a.corp.test": ["10.1.0.1"]}, host="127.0.0.76")
    other = DnsUpstream({"www.example.test": ["192.0.2.66"]}, host="127.0.0.75")
    try:
        parts = [server("other", other.address), server("local", local.address),
                 server("corp", corp.address), dns_rule("corp", domain_suffix=["corp.test"])]
        proxy = start_proxy(config(*parts, final="local"))
        q, a = udp_ask(proxy, "a.corp.test")
        assert_answer(a, q, NOERROR, ["10.1.0.1"])
        q, a = udp_ask(proxy, "www.example.test")
        assert_answer(a, q, NOERROR, ["192.0.2.10"])
        assert (corp.count(), local.count(), other.count()) == (1, 1, 0)
        # without final: the first server
        proxy = start_proxy(config(*parts))
        q, a = udp_ask(proxy, "www.example.test")
        assert_answer(a, q, NOERROR, ["192.0.2.66"])
        q, a = udp_ask(proxy, "a.corp.test")
        assert_answer(a, q, NOERROR, ["10.1.0.1"])
        assert (corp.count(), local.count(), other.count()) == (2, 1, 1)
    finally:
        for s in (local, corp, other):
            s.close()


def test_a_rule_sends_a_name_to_an_upstream_through_a_proxy(start_proxy, upstream):
    """through_proxy = true: the service's TCP connection to 127.0.0.77 is a
    flow of inbound "dns", which a route rule sends to a SOCKS outbound
    (a second etemenanki-app, socks -> freedom); both logs show it."""
    remote = DnsUpstream({"db.corp.test": ["10.77.0.1"]}, host="127.0.0.77",
                         transports=("tcp",))
    try:
        hop = start_proxy(INBOUND + DIRECT)
        proxy = start_proxy(config(
            server("local", upstream.address),
            server("remote", remote.address, protocol="tcp", through_proxy=True),
            dns_rule("remote", domain_suffix=["corp.test"]),
            outbounds=DIRECT + via_socks(hop.port), routes=[("via", {"inbound_tag": ["dns"]})],
            final="local"))
        q, a = udp_ask(proxy, "db.corp.test")
        assert_answer(a, q, NOERROR, ["10.77.0.1"])
        q, a = udp_ask(proxy, "www.example.test")
        assert_answer(a, q, NOERROR, ["192.0.2.10"])
        assert remote.queries == [("db.corp.test", TYPE_A, "tcp")]
        assert upstream.count() == 1
        dest = f"127.0.0.77:{remote.port}"
        assert set(decisions(proxy, "tcp", dest)) == {("dns", "via", "rule #1")}, proxy.log()
        assert set(decisions(hop, "tcp", dest)) == {("in", "direct", "default route")}, hop.log()
    finally:
        remote.close()


def test_the_services_own_connection_to_port_53_is_not_intercepted(start_proxy, upstream):
    """A through-proxy upstream on 127.0.0.78:53 (TCP): its flow goes to
    port 53 but reaches the real server, not the service itself (which
    would loop, or answer from another upstream)."""
    real = on_low_port("127.0.0.78", table={"loop.corp.test": ["10.78.0.1"]},
                      transports=("tcp",))
    try:
        proxy = start_proxy(config(
            server("local", upstream.address),
            server("remote", real.address, protocol="tcp", through_proxy=True),
            dns_rule("remote", domain_suffix=["corp.test"]),
            routes=[("direct", {"inbound_tag": ["dns"]})], final="local", timeout=2))
        for qtype in (TYPE_A, TYPE_AAAA):  # two upstream queries, the cache off the path
            q, a = udp_ask(proxy, "loop.corp.test", qtype)
            assert_answer(a, q, NOERROR, ["10.78.0.1"] if qtype == TYPE_A else [])
        assert real.count("loop.corp.test") == 2 and real.connections >= 1, real.queries
        assert upstream.count() == 0, upstream.queries
        assert ("dns", "direct", "rule #1") in decisions(proxy, "tcp", "127.0.0.78:53"), \
            proxy.log()
    finally:
        real.close()


def test_direct_servers_are_dialled_past_the_routes(start_proxy, upstream):
    """Every route goes to a blackhole: a direct (through_proxy = false)
    server still answers; a through_proxy one is blackholed, so its names
    get SERVFAIL after the timeout."""
    tcp_up = DnsUpstream({"t.corp.test": ["10.2.0.1"]}, host="127.0.0.74", transports=("tcp",))
    try:
        proxy = start_proxy(config(
            server("local", upstream.address),
            server("tcp-direct", tcp_up.address, protocol="tcp"),
            server("tcp-proxied", tcp_up.address, protocol="tcp", through_proxy=True),
            dns_rule("tcp-direct", domain=["t.corp.test"]),
            dns_rule("tcp-proxied", domain=["p.corp.test"]),
            outbounds=BLOCK, final="local", timeout=1))
        q, a = udp_ask(proxy, "www.example.test")
        assert_answer(a, q, NOERROR, ["192.0.2.10"])
        q, a = udp_ask(proxy, "t.corp.test")
        assert_answer(a, q, NOERROR, ["10.2.0.1"])
        q, a = udp_ask(proxy, "p.corp.test", timeout=5)
        assert_answer(a, q, SERVFAIL)
        assert tcp_up.count("p.corp.test") == 0
        assert set(decisions(proxy, "tcp", tcp_up.address)) == {("dns", "block", "default route")}
        assert "DEBUG dns: dns server tcp-proxied: the route blackholes it" in proxy.log()
    finally:
        tcp_up.close()


# ---------------------------------------------------------------- without a [[dns.server]]


def test_without_a_dns_server_port_53_follows_the_routes(start_proxy):
    real = on_low_port("127.0.0.79", table={"www.example.test": ["10.79.0.1"]})
    try:
        # freedom: the datagram and the TCP flow reach the real server
        proxy = start_proxy(config())
        q, a = udp_ask(proxy, "www.example.test", target="127.0.0.79")
        assert_answer(a, q, NOERROR, ["10.79.0.1"])
        q, a = tcp_ask(proxy, "www.example.test", target="127.0.0.79")
        assert_answer(a, q, NOERROR, ["10.79.0.1"])
        assert real.count("www.example.test", "udp") == 1
        assert real.count("www.example.test", "tcp") == 1
        assert decisions(proxy, "udp", "127.0.0.79:53") == [("in", "direct", "default route")]
        # a rule on port 53 to a blackhole: both die there
        proxy = start_proxy(config(outbounds=DIRECT + BLOCK, routes=[("block", {"port": [53]})]))
        before = len(real.queries)
        with Association(proxy.port) as assoc:
            assoc.send("127.0.0.79", 53, build_query("www.example.test"))
            assert assoc.silent(1.0), "a blackholed query was answered"
        with socks_open(proxy.port, "127.0.0.79", 53) as s:
            assert_blackholed(s, framed(build_query("www.example.test")))
        assert len(real.queries) == before
        assert decisions(proxy, "udp", "127.0.0.79:53") == [("in", "block", "rule #1")]
        assert decisions(proxy, "tcp", "127.0.0.79:53") == [("in", "block", "rule #1")]
    finally:
        real.close()


def test_without_a_dns_server_the_route_decision_names_the_outbound(start_proxy):
    """The same without root: the decision for a port-53 flow is the
    route's, not the service's."""
    proxy = start_proxy(config(outbounds=DIRECT + BLOCK, routes=[("block", {"port": [53]})]))
    with Association(proxy.port) as assoc:
        assoc.send(UDP_TARGET, 53, build_query("www.example.test"))
        assert assoc.silent(0.5)
    assert decisions(proxy, "udp", f"{UDP_TARGET}:53") == [("in", "block", "rule #1")]


# ---------------------------------------------------------------- truncation


@pytest.mark.parametrize("protocol", ["udp", "tcp"])
def test_a_big_answer_is_truncated_over_udp_and_whole_over_tcp(start_proxy, upstream, protocol):
    """40 A records (672 bytes): over UDP without EDNS the client gets TC,
    the question and no record; it retries over TCP to the same address
    and gets all 40. With EDNS 4096 UDP carries 30 records (1,005 bytes)
    whole; 40 pass the 1,232-byte cap of the N7 test below. (With a udp
    upstream, which truncates too, the service has to ask it over EDNS or
    TCP itself.)"""
    proxy = start_proxy(config(server("local", upstream.address, protocol=protocol)))
    q = build_query("big.example.test")
    with Association(proxy.port) as assoc:
        assoc.send(UDP_TARGET, 53, q)
        src, data = assoc.recv()
    a = parse(data)
    assert len(data) <= UDP_PLAIN_MAX
    assert a.tc and a.answers == [], a
    assert_answer(a, q, NOERROR)
    with socks_open(proxy.port, UDP_TARGET, 53) as s:
        s.sendall(framed(q))
        a = parse(read_framed(s))
    assert not a.tc
    assert_answer(a, q, NOERROR, big_addresses(40))
    q, a = udp_ask(proxy, "mid.example.test", edns=4096)
    assert not a.tc
    assert_answer(a, q, NOERROR, big_addresses(30))
    # a small EDNS size is honoured too
    q, a = udp_ask(proxy, "big.example.test", edns=600)
    assert a.tc and a.answers == [], a


@pytest.mark.parametrize("protocol", ["udp", "tcp"])
def test_n7_a_udp_answer_is_capped_at_1232_bytes_whatever_the_clients_edns(start_proxy, upstream,
                                                                          protocol):
    """Issue 32 N7: the service answered up to the client's EDNS size over
    UDP (126x a 36-byte query); now a UDP answer over DNS_SVC_UDP_MAX
    (1,232 bytes, the DNS flag day 2020) comes with TC, the question and no
    record, even with EDNS 4096 or 65535; TCP still carries it whole, and
    an answer under the cap is untouched."""
    proxy = start_proxy(config(server("local", upstream.address, protocol=protocol)))
    for size in (4096, 65535):
        q = build_query("huge.example.test", edns=size)
        with Association(proxy.port) as assoc:
            assoc.send(UDP_TARGET, 53, q)
            src, data = assoc.recv()
        a = parse(data)
        assert len(data) <= 1232, len(data)
        assert a.tc and a.answers == [], a
        assert_answer(a, q, NOERROR)
    q, a = tcp_ask(proxy, "huge.example.test")
    assert not a.tc
    assert_answer(a, q, NOERROR, big_addresses(100))
    q, a = udp_ask(proxy, "mid.example.test", edns=4096)
    assert not a.tc
    assert_answer(a, q, NOERROR, big_addresses(30))


# ---------------------------------------------------------------- upstream addresses


def test_an_ipv6_upstream(start_proxy):
    try:
        up = DnsUpstream({"www.example.test": ["192.0.2.6"]}, host="::1")
    except OSError as e:
        pytest.skip(f"no IPv6 loopback: {e}")
    try:
        assert up.address == f"[::1]:{up.port}"
        proxy = start_proxy(config(server("v6", up.address)))
        q, a = udp_ask(proxy, "www.example.test")
        assert_answer(a, q, NOERROR, ["192.0.2.6"])
        assert up.count() == 1
    finally:
        up.close()


@pytest.mark.parametrize("protocol,port", [("udp", 53), ("tcp", 53), ("tls", 853),
                                           ("https", 443)])
def test_an_address_without_a_port_takes_the_protocols_default(start_proxy, pki, protocol,
                                                               port):
    cert, key = pki
    transports = ("udp", "tcp") if port == 53 else (protocol,)
    ctx = None if port == 53 else tls_server_context(cert, key)
    up = on_low_port("127.0.0.73", port, table={"www.example.test": ["192.0.2.73"]},
                    transports=transports, tls_context=ctx)
    try:
        keys = {"protocol": protocol}
        if ctx is not None:
            keys.update(server_name="dns.test", ca=str(cert))
        proxy = start_proxy(config(server("bare", "127.0.0.73", **keys)))
        q, a = udp_ask(proxy, "www.example.test")
        assert_answer(a, q, NOERROR, ["192.0.2.73"])
        assert up.count(transport=protocol) == 1, up.queries
    finally:
        up.close()


# ---------------------------------------------------------------- DoT and DoH


@pytest.mark.parametrize("protocol", ["tls", "https"])
def test_dot_and_doh_upstreams(start_proxy, pki, protocol):
    cert, key = pki
    up = DnsUpstream({"www.example.test": ["192.0.2.20", "2001:db8::20"]},
                     transports=(protocol,), tls_context=tls_server_context(cert, key))
    try:
        keys = {"protocol": protocol, "server_name": "dns.test", "ca": str(cert)}
        if protocol == "https":
            keys["path"] = "/dns-query"
        proxy = start_proxy(config(server("secure", up.address, **keys), cache_size=0))
        for qtype, want in ((TYPE_A, ["192.0.2.20"]), (TYPE_AAAA, ["2001:db8::20"])):
            q, a = udp_ask(proxy, "www.example.test", qtype)
            assert_answer(a, q, NOERROR, want)
        q, a = tcp_ask(proxy, "nothere.example.test")
        assert_answer(a, q, NXDOMAIN, [])
        assert up.count(transport=protocol) == 3, up.queries
        if protocol == "https":
            assert {r[:3] for r in up.http_requests} == {
                ("POST", "/dns-query", "application/dns-message")}, up.http_requests
    finally:
        up.close()


@pytest.mark.parametrize("protocol", ["tls", "https"])
def test_dot_and_doh_upstreams_through_a_proxy(start_proxy, pki, protocol):
    """through_proxy with TLS: the service's connection is a flow of inbound
    "dns" sent to a SOCKS outbound (a second etemenanki-app), and the TLS
    of DoT or DoH runs inside the proxied stream."""
    cert, key = pki
    up = DnsUpstream({"www.example.test": ["192.0.2.21"]}, host="127.0.0.78",
                     transports=(protocol,), tls_context=tls_server_context(cert, key))
    try:
        hop = start_proxy(INBOUND + DIRECT)
        keys = {"protocol": protocol, "server_name": "dns.test", "ca": str(cert),
                "through_proxy": True}
        proxy = start_proxy(config(
            server("secure", up.address, **keys),
            outbounds=DIRECT + via_socks(hop.port), routes=[("via", {"inbound_tag": ["dns"]})],
            cache_size=0))
        for name in ("www.example.test", "www.example.test"):
            q, a = udp_ask(proxy, name)
            assert_answer(a, q, NOERROR, ["192.0.2.21"])
        q, a = tcp_ask(proxy, "nothere.example.test")
        assert_answer(a, q, NXDOMAIN, [])
        assert up.count(transport=protocol) == 3, up.queries
        dest = f"127.0.0.78:{up.port}"
        assert set(decisions(proxy, "tcp", dest)) == {("dns", "via", "rule #1")}, proxy.log()
        assert set(decisions(hop, "tcp", dest)) == {("in", "direct", "default route")}, hop.log()
    finally:
        up.close()


@pytest.mark.parametrize("protocol", ["tls", "https"])
def test_a_tls_upstream_with_the_wrong_name_is_refused_unless_insecure(start_proxy, pki,
                                                                       protocol):
    """server_name is checked against the certificate: "other.test" fails
    verification, so the client gets SERVFAIL; allow_insecure skips it."""
    cert, key = pki
    up = DnsUpstream({"www.example.test": ["192.0.2.21"]}, transports=(protocol,),
                     tls_context=tls_server_context(cert, key))
    try:
        keys = {"protocol": protocol, "server_name": "other.test", "ca": str(cert)}
        proxy = start_proxy(config(server("secure", up.address, **keys), timeout=1))
        q, a = udp_ask(proxy, "www.example.test", timeout=5)
        assert_answer(a, q, SERVFAIL, [])
        assert up.count() == 0
        assert "DEBUG dns: dns server secure: tls: " in proxy.log(), proxy.log()
        proxy = start_proxy(config(server("secure", up.address, allow_insecure=True, **keys)))
        q, a = udp_ask(proxy, "www.example.test", timeout=5)
        assert_answer(a, q, NOERROR, ["192.0.2.21"])
    finally:
        up.close()


# ---------------------------------------------------------------- cache


def test_the_cache_answers_a_repeated_query(start_proxy, upstream):
    proxy = start_proxy(config(server("local", upstream.address)))
    for _ in range(3):
        q, a = udp_ask(proxy, "www.example.test")
        assert_answer(a, q, NOERROR, ["192.0.2.10"])
    q, a = tcp_ask(proxy, "www.example.test")
    assert_answer(a, q, NOERROR, ["192.0.2.10"])
    assert upstream.count("www.example.test") == 1, upstream.queries
    # another type is another entry
    q, a = udp_ask(proxy, "www.example.test", TYPE_AAAA)
    assert_answer(a, q, NOERROR, ["2001:db8::10"])
    assert upstream.count("www.example.test") == 2


def test_nxdomain_is_cached(start_proxy, upstream):
    proxy = start_proxy(config(server("local", upstream.address)))
    for _ in range(3):
        q, a = udp_ask(proxy, "gone.example.test")
        assert_answer(a, q, NXDOMAIN, [])
    assert upstream.count("gone.example.test") == 1, upstream.queries


def test_cache_size_0_disables_the_cache(start_proxy, upstream):
    proxy = start_proxy(config(server("local", upstream.address), cache_size=0))
    for _ in range(3):
        q, a = udp_ask(proxy, "www.example.test")
        assert_answer(a, q, NOERROR, ["192.0.2.10"])
    assert upstream.count("www.example.test") == 3


# ---------------------------------------------------------------- hosts


def test_hosts_entries_are_answered_without_the_upstream(start_proxy, upstream):
    proxy = start_proxy(config(server("local", upstream.address),
                               host("router.test", "192.0.2.53", "2001:db8::53")))
    q, a = udp_ask(proxy, "router.test")
    assert_answer(a, q, NOERROR, ["192.0.2.53"])
    q, a = udp_ask(proxy, "router.test", TYPE_AAAA)
    assert_answer(a, q, NOERROR, ["2001:db8::53"])
    q, a = tcp_ask(proxy, "router.test")
    assert_answer(a, q, NOERROR, ["192.0.2.53"])
    # names are case-insensitive (RFC 4343)
    q, a = udp_ask(proxy, "Router.TEST")
    assert_answer(a, q, NOERROR, ["192.0.2.53"])
    assert upstream.queries == []


# ---------------------------------------------------------------- bad input and limits


def test_a_malformed_udp_query_then_a_good_one(start_proxy, upstream):
    proxy = start_proxy(config(server("local", upstream.address)))
    bad = [b"", b"\x12", b"\x12\x34" + b"\xff" * 10,
           struct.pack(">HHHHHH", 0x4242, 0x0100, 1, 0, 0, 0) + b"\x3fcut",
           struct.pack(">HHHHHH", 0x4343, 0x0100, 1, 0, 0, 0) + b"\xc0\x0c\x00\x01\x00\x01",
           bytes(random.Random(7).randrange(256) for _ in range(1400))]
    with Association(proxy.port) as assoc:
        for b in bad:
            assoc.send(UDP_TARGET, 53, b)
        # dropped, or FORMERR (nothing else)
        assoc.udp.settimeout(0.5)
        while True:
            try:
                _, data = assoc.recv(0.5)
            except socket.timeout:
                break
            if len(data) >= 12:
                assert data[3] & 0xF == FORMERR and data[2] & 0x80, data
        _, a = ask(assoc, UDP_TARGET, "www.example.test")
        assert a.addresses() == ["192.0.2.10"], a
    assert proxy.proc.poll() is None


def test_a_tcp_stream_of_64_kib_garbage_then_a_good_query(start_proxy, upstream):
    proxy = start_proxy(config(server("local", upstream.address)))
    garbage = bytes(random.Random(9).randrange(256) for _ in range(0xFFFF))
    with socks_open(proxy.port, TCP_TARGET, 53) as s:
        s.sendall(framed(garbage))
        got = closed_without_bytes(s, 3.0)
        if isinstance(got, bytes):  # answered rather than closed: FORMERR only
            assert len(got) >= 14 and got[5] & 0xF == FORMERR, got[:16]
    q, a = tcp_ask(proxy, "www.example.test")
    assert_answer(a, q, NOERROR, ["192.0.2.10"])
    assert proxy.proc.poll() is None


@pytest.mark.parametrize("length", [0, 5], ids=["zero", "shorter-than-a-header"])
def test_a_bad_tcp_length_closes_the_stream(start_proxy, upstream, length):
    proxy = start_proxy(config(server("local", upstream.address)))
    with socks_open(proxy.port, TCP_TARGET, 53) as s:
        s.sendall(struct.pack(">H", length) + b"x" * length)
        assert closed_without_bytes(s, 3.0) == "eof"
    why = "dns: a zero-length message" if length == 0 else "dns: a message shorter than its header"
    line = r"DEBUG conn: relay from \S+ ended: " + why
    deadline = time.monotonic() + 3.0  # the line comes after the client saw the end
    while not re.search(line, proxy.log()) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert re.search(line, proxy.log()), proxy.log()
    q, a = tcp_ask(proxy, "www.example.test")
    assert_answer(a, q, NOERROR, ["192.0.2.10"])


def test_an_upstream_that_never_answers_gives_servfail_after_the_timeout(start_proxy, upstream):
    upstream.silent = True
    proxy = start_proxy(config(server("local", upstream.address), timeout=1))
    q = build_query("www.example.test")
    with Association(proxy.port) as assoc:
        start = time.monotonic()
        assoc.send(UDP_TARGET, 53, q)
        _, data = assoc.recv(6.0)
        took = time.monotonic() - start
    assert_answer(parse(data), q, SERVFAIL, [])
    assert 0.8 <= took <= 3.5, took
    assert upstream.count("www.example.test") >= 1
    # over TCP too, for another name (RFC 9520 lets a resolver remember the
    # failure of the first for a while)
    start = time.monotonic()
    q, a = tcp_ask(proxy, "v4only.example.test", timeout=6.0)
    assert_answer(a, q, SERVFAIL, [])
    assert 0.8 <= time.monotonic() - start <= 3.5


def test_many_random_names_keep_the_memory_bounded(start_proxy):
    """2,000 distinct names with cache_size = 100: each reaches the upstream
    (no hit is possible) and the RSS stays within a few MiB of what it was
    once the cache was full."""
    up = DnsUpstream(wildcard=True)
    asan = os.environ.get("ASAN_OPTIONS", "")
    try:
        proxy = start_proxy(config(server("local", up.address), cache_size=100),
                            env={"ASAN_OPTIONS": asan + ":quarantine_size_mb=0"})
        rng = random.Random(20)
        flood(proxy, [random_name(rng=rng) for _ in range(300)])
        before = rss_kib(proxy.proc.pid)
        flood(proxy, [random_name(rng=rng) for _ in range(2000)])
        grew = rss_kib(proxy.proc.pid) - before
        assert up.count() >= 2300, up.count()  # no name can hit the cache
        assert grew < 4 * 1024, f"RSS grew by {grew} KiB over 2,000 names with cache_size = 100"
    finally:
        up.close()


# ---------------------------------------------------------------- --test


def check(run, tmp_path, text):
    cfg = tmp_path / "dns.toml"
    cfg.write_text(text.replace("{port0}", "1080"))
    return run("--test", "-c", str(cfg))


def test_check_accepts_the_whole_dns_section(run, tmp_path, pki):
    cert, _ = pki
    text = config(server("local", "127.0.0.1:5353"),
                  server("tcp", "127.0.0.1", protocol="tcp"),
                  server("v6", "[::1]:5353", protocol="udp"),
                  server("remote", "127.0.0.77:853", protocol="tls", through_proxy=True,
                         server_name="dns.test", ca=str(cert)),
                  server("doh", "127.0.0.1:8443", protocol="https", server_name="dns.test",
                         ca=str(cert), allow_insecure=False, path="/dns-query"),
                  dns_rule("remote", domain_suffix=["corp.test"]),
                  dns_rule("doh", domain=["a.test"], domain_keyword=["kw"],
                           domain_regex=["^x\\.test$"]),
                  host("router.test", "192.0.2.53", "2001:db8::53"),
                  final="local", cache_size=4096, prefetch=True, timeout=5,
                  routes=[("direct", {"inbound_tag": ["dns"]})])
    r = check(run, tmp_path, text)
    assert (r.returncode, r.stdout.strip(), r.stderr) == (0, "Configuration OK.", ""), \
        f"{r.stderr}\n{text}"


LOCAL = server("local", "127.0.0.1:5353")


@pytest.mark.parametrize("case,parts,keys", [pytest.param(*c, id=c[0]) for c in [
    ("rule-unknown-server", [LOCAL, dns_rule("nope", domain=["a.test"])], {}),
    ("final-unknown-server", [LOCAL], {"final": "nope"}),
    ("udp-through-proxy", [server("local", "127.0.0.1:5353", through_proxy=True)], {}),
    ("address-name", [server("local", "dns.example:53")], {}),
    ("address-port", [server("local", "127.0.0.1:70000")], {}),
    ("address-empty", [server("local", "")], {}),
    ("protocol", [server("local", "127.0.0.1:5353", protocol="quic")], {}),
]])
def test_check_refuses(run, tmp_path, case, parts, keys):
    # the control: the same section without the fault is accepted (else the
    # refusal below could be for keys not known at all)
    r = check(run, tmp_path, config(LOCAL, dns_rule("local", domain=["a.test"]), final="local"))
    assert (r.returncode, r.stderr) == (0, ""), f"the control config is refused: {r.stderr}"
    r = check(run, tmp_path, config(*parts, **keys))
    print(f"{case}: rc={r.returncode} stderr={r.stderr!r}")
    assert r.returncode == 1 and r.stdout == "", (r.returncode, r.stdout, r.stderr)
    assert r.stderr.strip() == EXPECTED_ERRORS[case]
