"""The DNS service across reloads (issue 20, seed 002): a [dns] change
builds a new service whose target's version is the epoch of the plane that
first holds it; new queries go to it while a client stream opened before
keeps being answered by the service it was opened on; removing every
[[dns.server]] hands port 53 back to the route table; a reload that leaves
[dns] alone keeps the target.

The binary runs on 127.0.0.1 at debug level; the upstreams are dnskit's
servers on loopback, whose query lists say which one answered.
"""
import re
import socket
import time

import pytest

from dnskit import (NOERROR, TYPE_A, DnsUpstream, build_query, framed, parse, read_framed)
from proxykit import Association, Proxy, assert_blackholed, socks_open, stop_cleanly
from reloadkit import reload

UDP_TARGET, TCP_TARGET = "192.0.2.1", "198.51.100.7"

BASE = ('[log]\nlevel = "debug"\n\n'
        '[[inbound]]\ntag = "in"\nprotocol = "socks"\nlisten = "127.0.0.1"\nport = {port0}\n\n'
        '[[outbound]]\ntag = "direct"\nprotocol = "freedom"\n\n'
        '[[outbound]]\ntag = "block"\nprotocol = "blackhole"\n\n')


def with_service(address, cache_size=0):
    return (BASE + f"[dns]\ncache_size = {cache_size}\n\n"
            f'[[dns.server]]\ntag = "up"\naddress = "{address}"\n\n')


ROUTE_LINE = re.compile(r"DEBUG route: (tcp|udp) flow to (\S+) from inbound \S+ takes (\S*)@v(\d+) ")


def targets(proxy, network, dest):
    """(tag, version) of every decision logged for dest, in order."""
    return [(t, int(v)) for n, d, t, v in ROUTE_LINE.findall(proxy.log())
            if (n, d) == (network, dest)]


@pytest.fixture
def start_proxy(app, tmp_path):
    started = []

    def _start(text, **kw):
        kw.setdefault("log_level", "debug")
        p = Proxy(app, tmp_path, text, 1, **kw)
        started.append(p)
        return p.start()

    yield _start
    stop_cleanly(started, "proxy")


@pytest.fixture
def upstreams():
    ups = [DnsUpstream({"www.example.test": ["192.0.2.10"]}),
           DnsUpstream({"www.example.test": ["192.0.2.20"]})]
    yield ups
    for u in ups:
        u.close()


def udp_ask(proxy, name, timeout=3.0):
    q = build_query(name)
    with Association(proxy.port) as assoc:
        assoc.send(UDP_TARGET, 53, q)
        _, data = assoc.recv(timeout)
    return parse(data)


def stream_ask(s, name):
    s.sendall(framed(build_query(name)))
    return parse(read_framed(s))


def test_a_dns_change_builds_a_new_service_and_an_open_stream_keeps_its_own(start_proxy,
                                                                             upstreams):
    first, second = upstreams
    proxy = start_proxy(with_service(first.address))
    assert udp_ask(proxy, "www.example.test").addresses() == ["192.0.2.10"]
    assert targets(proxy, "udp", f"{UDP_TARGET}:53") == [("", 1)]
    with socks_open(proxy.port, TCP_TARGET, 53) as s:
        s.settimeout(3.0)
        assert stream_ask(s, "www.example.test").addresses() == ["192.0.2.10"]
        outcome, applied = reload(proxy, with_service(second.address))
        assert outcome.startswith("config reload: changed "), outcome
        # the next query is the new service's, whose target is @v2
        assert udp_ask(proxy, "www.example.test").addresses() == ["192.0.2.20"]
        assert targets(proxy, "udp", f"{UDP_TARGET}:53")[-1] == ("", 2)
        # the stream opened before is not dropped: its service answers on
        assert stream_ask(s, "www.example.test").addresses() == ["192.0.2.10"]
    assert [q[0] for q in first.queries] == ["www.example.test"] * 3
    assert [q[0] for q in second.queries] == ["www.example.test"]


def test_removing_every_server_hands_port_53_back_to_the_routes(start_proxy, upstreams):
    proxy = start_proxy(with_service(upstreams[0].address))
    assert udp_ask(proxy, "www.example.test").addresses() == ["192.0.2.10"]
    no_service = BASE + '[route]\n\n[[route.rule]]\nport = 53\noutbound = "block"\n\n'
    outcome, _ = reload(proxy, no_service)
    assert outcome.startswith("config reload: changed "), outcome
    with Association(proxy.port) as assoc:
        assoc.send(UDP_TARGET, 53, build_query("www.example.test"))
        with pytest.raises(socket.timeout):
            assoc.recv(1.0)
    assert targets(proxy, "udp", f"{UDP_TARGET}:53")[-1] == ("block", 1)
    with socks_open(proxy.port, TCP_TARGET, 53) as s:
        assert_blackholed(s)
    assert len(upstreams[0].queries) == 1


def test_a_reload_that_leaves_dns_alone_keeps_the_target(start_proxy, upstreams):
    proxy = start_proxy(with_service(upstreams[0].address))
    assert udp_ask(proxy, "www.example.test").addresses() == ["192.0.2.10"]
    # a new outbound publishes a new plane (epoch 2); [dns] is unchanged
    changed = with_service(upstreams[0].address) + (
        '[[outbound]]\ntag = "more"\nprotocol = "freedom"\n\n')
    outcome, _ = reload(proxy, changed)
    assert outcome.startswith("config reload: changed "), outcome
    assert udp_ask(proxy, "www.example.test").addresses() == ["192.0.2.10"]
    assert targets(proxy, "udp", f"{UDP_TARGET}:53") == [("", 1), ("", 1)]


def test_a_close_drain_ends_the_services_connection_through_the_old_outbound(start_proxy):
    """through_proxy: the service's TCP connection to its upstream is a flow
    of the "via" outbound; a reload that replaces "via" (another hop) with
    drain = "close" ends that connection, and the next query opens a new
    one through the new version, to the new hop."""
    up = DnsUpstream({"www.example.test": ["192.0.2.40"]}, host="127.0.0.79",
                     transports=("tcp",))
    hop_base = ('[[inbound]]\ntag = "in"\nprotocol = "socks"\nlisten = "127.0.0.1"\n'
                'port = {port0}\n\n[[outbound]]\ntag = "direct"\nprotocol = "freedom"\n\n')
    try:
        hops = [start_proxy(hop_base), start_proxy(hop_base)]

        def cfg(hop):
            return (BASE + f'[[outbound]]\ntag = "via"\nprotocol = "socks"\n'
                    f'server = "127.0.0.1"\nport = {hop.port}\ndrain = "close"\n\n'
                    '[[route.rule]]\ninbound_tag = ["dns"]\noutbound = "via"\n\n'
                    '[dns]\ncache_size = 0\n\n'
                    f'[[dns.server]]\ntag = "up"\nprotocol = "tcp"\naddress = "{up.address}"\n'
                    'through_proxy = true\n\n')
        proxy = start_proxy(cfg(hops[0]))
        assert udp_ask(proxy, "www.example.test").addresses() == ["192.0.2.40"]
        assert up.connections == 1
        outcome, applied = reload(proxy, cfg(hops[1]))
        assert outcome.startswith("config reload: changed "), outcome
        deadline = time.monotonic() + 3.0  # the old connection ends
        while "the outbound this connection was opened on was drained" not in proxy.log() \
                and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "the outbound this connection was opened on was drained" in proxy.log(), \
            proxy.log()
        assert udp_ask(proxy, "www.example.test").addresses() == ["192.0.2.40"]
        assert up.connections == 2
        dest = f"{up.address}"
        assert [t for t, _ in targets(proxy, "tcp", dest)] == ["via", "via"]
        assert [v for _, v in targets(proxy, "tcp", dest)] == [1, 2]
        assert targets(hops[1], "tcp", dest) == [("direct", 1)]
    finally:
        up.close()
