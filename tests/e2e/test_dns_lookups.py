"""The outbounds' own lookups with a DNS service (issue 20): a destination
name a client hands the proxy (SOCKS5 CONNECT with a domain) is looked up
through the service, so its hosts entries, rules and upstreams decide where
freedom dials; a name it cannot find fails the connect as any unknown host.
And the service's metrics (read with python3-prometheus-client's parser) and its
prefetch of popular answers.

The binary runs on 127.0.0.1; the echo target and the upstream are on
loopback.
"""
import re
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from dnskit import FORMERR, NOTIMP, TYPE_A, TYPE_AAAA, DnsUpstream, build_query, parse
from proxykit import (Association, Proxy, connect, socks5_connect, socks5_greet,
                      socks5_request, stop_cleanly)

BASE = ('[[inbound]]\ntag = "in"\nprotocol = "socks"\nlisten = "127.0.0.1"\nport = {port0}\n\n'
        '[[outbound]]\ntag = "direct"\nprotocol = "freedom"\n\n')
METRICS = '[metrics]\nlisten = "127.0.0.1:0"\n\n'


@pytest.fixture
def start_proxy(app, tmp_path):
    started = []

    def _start(text, n_ports=1):
        p = Proxy(app, tmp_path, text, n_ports, log_level="debug")
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


def scrape(proxy):
    """GET /metrics on the port the proxy's log names, as families."""
    m = re.search(r"metrics: serving http://127\.0\.0\.1:(\d+)/metrics", proxy.log())
    assert m, proxy.log()
    with connect(int(m.group(1))) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    return {f.name: f for f in text_string_to_metric_families(body.decode())}


def value(families, name):
    f = families[name]
    assert len(f.samples) == 1, f
    return f.samples[0].value


def test_the_services_metrics_count_each_way_a_query_was_answered(start_proxy, upstream):
    proxy = start_proxy(service(upstream, '[[dns.host]]\nname = "echo.test"\n'
                                          'address = ["127.0.0.1"]\n\n')
                        .replace("cache_size = 0", "cache_size = 64")
                        + METRICS)
    with Association(proxy.port) as assoc:
        for name in ("echo.test", "up.test", "up.test"):
            assoc.send("192.0.2.1", 53, build_query(name))
            parse(assoc.recv(3.0)[1])
        assoc.send("192.0.2.1", 53, b"\x12\x34" + b"\x00" * 10)  # no question: FORMERR
        assert parse(assoc.recv(3.0)[1]).rcode == FORMERR
    fam = scrape(proxy)
    assert value(fam, "etemenanki_dns_service_queries") == 4
    assert value(fam, "etemenanki_dns_service_hosts_answers") == 1
    assert value(fam, "etemenanki_dns_service_cache_answers") == 1
    assert value(fam, "etemenanki_dns_service_upstream_queries") == 1
    assert value(fam, "etemenanki_dns_service_formerr") == 1
    assert value(fam, "etemenanki_dns_service_servfail") == 0
    assert value(fam, "etemenanki_dns_service_cache_entries") == 1
    assert value(fam, "etemenanki_dns_service_cache_misses") == 1
    assert len(upstream.queries) == 1


def test_without_a_service_its_metrics_are_absent(start_proxy):
    proxy = start_proxy(BASE + METRICS)
    fam = scrape(proxy)
    assert not [n for n in fam if n.startswith("etemenanki_dns_service_")]
    assert "etemenanki_dns_cache_hits" in fam


def test_a_popular_answer_is_prefetched_before_it_expires(start_proxy):
    """TTL 10: hit twice, then asked in the last tenth of its life (second
    9.4), the answer comes from the cache (its TTL aged to 1) and is asked
    of the upstream again in the background; after the first answer's
    expiry the refreshed one still answers, without another query."""
    up = DnsUpstream({"hot.test": ["192.0.2.30"]}, ttl=10)
    try:
        proxy = start_proxy(service(up).replace("cache_size = 0", "cache_size = 64"))
        with Association(proxy.port) as assoc:
            def ask():
                assoc.send("192.0.2.1", 53, build_query("hot.test"))
                a = parse(assoc.recv(3.0)[1])
                assert a.addresses() == ["192.0.2.30"], a
                return a.answers[0].ttl
            start = time.monotonic()
            for _ in range(3):
                ask()
            assert len(up.queries) == 1
            time.sleep(max(0.0, start + 9.4 - time.monotonic()))
            ttl = ask()
            assert time.monotonic() - start < 10.0, "too late to tell a prefetch from a miss"
            assert ttl <= 1, ttl  # from the cache
            deadline = time.monotonic() + 2.0
            while len(up.queries) < 2 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert len(up.queries) == 2, up.queries
            time.sleep(max(0.0, start + 10.5 - time.monotonic()))
            assert ask() >= 8  # the refreshed answer, stored about a second ago
            assert len(up.queries) == 2, up.queries
    finally:
        up.close()


def test_another_opcode_gets_notimp_and_a_response_gets_nothing(start_proxy, upstream):
    proxy = start_proxy(service(upstream))
    with Association(proxy.port) as assoc:
        status = bytearray(build_query("up.test"))
        status[2] = (status[2] & 0x87) | (2 << 3)  # opcode 2, STATUS
        assoc.send("192.0.2.1", 53, bytes(status))
        a = parse(assoc.recv(3.0)[1])
        assert (a.id, a.rcode, a.qr) == (parse(bytes(status)).id, NOTIMP, True), a
        response = bytearray(build_query("up.test"))
        response[2] |= 0x80  # QR: an answer sent as if it were a query
        assoc.send("192.0.2.1", 53, bytes(response))
        assert assoc.silent(1.0), "a response was answered"
        assoc.send("192.0.2.1", 53, build_query("up.test"))
        assert parse(assoc.recv(3.0)[1]).addresses() == ["127.0.0.1"]
    assert upstream.queries == [("up.test", TYPE_A, "udp")]


def test_balancer_probes_look_member_names_up_through_the_service(start_proxy, upstream, echo):
    """A balancer member's server is a name only a [[dns.host]] entry knows:
    its probe finds it through the service and succeeds; a name the
    upstream does not know fails the probe with "dns: no such host"."""
    def config(name):
        return (service(upstream, '[[dns.host]]\nname = "member.test"\n'
                                   'address = ["127.0.0.1"]\n\n')
                + f'[[outbound]]\ntag = "m"\nprotocol = "socks"\nserver = "{name}"\n'
                f"port = {echo.port}\n\n"
                '[[balancer]]\ntag = "b"\noutbounds = ["m"]\nprobe_interval = 1\n\n')
    known = start_proxy(config("member.test"))
    unknown = start_proxy(config("nothere.test"))
    deadline = time.monotonic() + 5.0
    failed = "DEBUG balancer: balancer b: probe of m: dns: no such host"
    while failed not in unknown.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert failed in unknown.log(), unknown.log()
    assert ("nothere.test", TYPE_A, "udp") in upstream.queries
    time.sleep(1.5)  # a probe or two of the known name
    assert "probe of m" not in known.log(), known.log()
    assert echo.connections >= 1  # the probes connected
