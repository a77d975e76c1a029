"""The outbounds' own lookups with a DNS service (issue 20): a destination
name a client hands the proxy (SOCKS5 CONNECT with a domain) is looked up
through the service, so its hosts entries, rules and upstreams decide where
freedom dials; a name it cannot find fails the connect as any unknown host.

The binary runs on 127.0.0.1; the echo target and the upstream are on
loopback.
"""
import pytest

from dnskit import TYPE_A, TYPE_AAAA, DnsUpstream
from proxykit import (Proxy, connect, socks5_connect, socks5_greet, socks5_request,
                      stop_cleanly)

BASE = ('[[inbound]]\ntag = "in"\nprotocol = "socks"\nlisten = "127.0.0.1"\nport = {port0}\n\n'
        '[[outbound]]\ntag = "direct"\nprotocol = "freedom"\n\n')


@pytest.fixture
def start_proxy(app, tmp_path):
    started = []

    def _start(text):
        p = Proxy(app, tmp_path, text, 1, log_level="debug")
        started.append(p)
        return p.start()

    yield _start
    stop_cleanly(started, "proxy")


@pytest.fixture
def upstream():
    s = DnsUpstream({"up.test": ["127.0.0.1"]})
    yield s
    s.close()


def service(upstream, *parts):
    return (BASE + "[dns]\ncache_size = 0\n\n"
            f'[[dns.server]]\ntag = "up"\naddress = "{upstream.address}"\n\n' + "".join(parts))


def echoes(proxy, name, echo):
    with socks5_connect(proxy.port, name, echo.port) as s:
        s.sendall(b"ping")
        got = b""
        while len(got) < 4:
            chunk = s.recv(4 - len(got))
            assert chunk, "closed before the echo"
            got += chunk
        return got == b"ping"


def test_a_destination_name_is_looked_up_through_the_service(start_proxy, upstream, echo):
    proxy = start_proxy(service(upstream))
    assert echoes(proxy, "up.test", echo)
    # one lookup asks A and AAAA, both of the service's upstream
    assert sorted(upstream.queries) == [("up.test", TYPE_A, "udp"), ("up.test", TYPE_AAAA, "udp")]


def test_a_hosts_entry_decides_a_dial_without_the_upstream(start_proxy, upstream, echo):
    proxy = start_proxy(service(upstream, '[[dns.host]]\nname = "echo.test"\n'
                                          'address = ["127.0.0.1"]\n\n'))
    assert echoes(proxy, "echo.test", echo)
    assert upstream.queries == []


def test_a_name_the_service_cannot_find_fails_the_connect(start_proxy, upstream):
    proxy = start_proxy(service(upstream))
    with connect(proxy.port) as s:
        assert socks5_greet(s) in (None, 0)
        rep, _ = socks5_request(s, "nothere.test", 80)
    assert rep == 0x04  # host unreachable: dns: no such host
    assert ("nothere.test", TYPE_A, "udp") in upstream.queries
