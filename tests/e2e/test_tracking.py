"""The flow tracker end to end (issue 19; seed 002 "Tracker" and its tests
in supervisor/tests/tracking.rs), read through the admin API: what a flow
is registered with, the bytes each flow and each user counted, mux
sub-flows and UDP sub-links as flows of their own, and a failed dial that
is never registered.

Every process runs on 127.0.0.1 with configs written to tmp_path; the
targets are echo servers in threads on 127.0.0.1.
"""
import socket
import time

import pytest

from apikit import API_TABLE, Api
from proxykit import (LOOPBACK, Association, EchoServer, Proxy, UdpEcho, free_port, recv_exact,
                      socks5_connect, socks5_greet, socks5_request, stop_cleanly)

UUID = "6c1b0e6a-6e3d-4c1e-9d8a-1a2b3c4d5e6f"


@pytest.fixture
def procs(app, tmp_path):
    started = []

    def _start(text, api=False):
        extra = {"api": free_port()} if api else None
        p = Proxy(app, tmp_path, text, 1, extra=extra, log_level="debug")
        started.append(p)
        p.start()
        return Api(p) if api else p

    yield _start
    stop_cleanly(started, "etemenanki-app")


@pytest.fixture
def udp_echo_b():
    e = UdpEcho()
    yield e
    e.close()


def echo_exactly(sock, n):
    """n bytes out and the same n back, in one go (n is small)."""
    data = bytes(i % 251 for i in range(n))
    sock.sendall(data)
    assert recv_exact(sock, n) == data


def wait_for(fetch, ok, timeout=3.0):
    deadline = time.monotonic() + timeout
    while True:
        got = fetch()
        if ok(got) or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def closed_flows(api, n):
    return wait_for(lambda: api.get("/connections?closed")["connections"],
                    lambda c: len(c) >= n)


def test_mux_sub_flows_and_their_session_count_exactly_what_moved(procs, echo):
    """Our mux client opens two sub-flows in one session to our VLESS
    server: the server registers each sub-flow as a flow of its own, with
    its inbound, user, route and outbound, and the bytes it moved; the
    user's usage is exactly their sum."""
    server = procs('[[inbound]]\ntag = "in"\nprotocol = "vless"\nlisten = "127.0.0.1"\n'
                   'port = {port0}\n[[inbound.settings.users]]\nname = "u"\n'
                   f'id = "{UUID}"\n\n[[outbound]]\ntag = "direct"\nprotocol = "freedom"\n'
                   + API_TABLE, api=True)
    # one worker: mux sessions are per worker, and both flows must share one
    client = procs('[runtime]\nworkers = 1\n\n[[inbound]]\ntag = "app"\nprotocol = "socks"\nlisten = "127.0.0.1"\n'
                   'port = {port0}\n\n[[outbound]]\ntag = "up"\nprotocol = "vless"\n'
                   f'server = "127.0.0.1"\nport = {server.socks_port}\n'
                   f'[outbound.settings]\nid = "{UUID}"\n'
                   '[outbound.mux]\nenabled = true\nconcurrency = 4\n')
    sizes = [1000, 23456]
    socks = []
    for n in sizes:  # one after the other: the second finds the first's session open
        socks.append(socks5_connect(client.port, LOOPBACK, echo.port))
        echo_exactly(socks[-1], n)
    live = wait_for(lambda: server.get("/connections")["connections"],
                    lambda c: len(c) == 2)
    assert len(live) == 2, live
    for s in socks:
        s.close()
    ended = closed_flows(server, 2)
    assert sorted(f["upload"] for f in ended) == sizes, ended
    assert sorted(f["download"] for f in ended) == sizes, ended
    for f in ended:
        m = f["metadata"]
        assert (m["type"], m["inboundUser"], m["network"]) == ("in", "u", "tcp"), f
        assert (m["destinationIP"], m["destinationPort"]) == (LOOPBACK, str(echo.port)), f
        assert f["chains"] == ["direct"] and f["rule"] == "Match", f
    # one session carried both: the sub-flows share the mux connection's source
    assert len({f["metadata"]["sourcePort"] for f in ended}) == 1, ended
    user = server.get("/users/u")
    assert (user["upload"], user["download"], user["total"], user["open"]) == \
        (sum(sizes), sum(sizes), 2, 0), user


def test_a_udp_association_counts_each_sub_link_and_charges_its_session(procs, udp_echo,
                                                                        udp_echo_b):
    """A SOCKS UDP association whose datagrams route to two outbounds is
    two sub-links (freedom's carries every destination, so one a target),
    each a flow with the payload it carried and the rule that chose it; the
    association's user is charged their payload (SOCKS datagrams never
    cross the session's stream)."""
    api = procs('[[inbound]]\ntag = "in"\nprotocol = "socks"\nlisten = "127.0.0.1"\n'
                'port = {port0}\n[[inbound.settings.users]]\nusername = "alice"\n'
                'password = "a"\n\n[[outbound]]\ntag = "direct"\nprotocol = "freedom"\n'
                '\n[[outbound]]\ntag = "also"\nprotocol = "freedom"\n'
                f'\n[[route.rule]]\noutbound = "also"\nport = [{udp_echo_b.port}]\n'
                + API_TABLE, api=True)
    with Association(api.socks_port, user="alice", password="a") as a:
        for size in (10, 200, 3000):
            a.echo(udp_echo, b"x" * size)
        for size in (7, 70):
            a.echo(udp_echo_b, b"y" * size)
        flows = wait_for(lambda: api.get("/connections")["connections"], lambda c: len(c) == 2)
        by_port = {f["metadata"]["destinationPort"]: f for f in flows}
        assert set(by_port) == {str(udp_echo.port), str(udp_echo_b.port)}, flows
        a_flow, b_flow = by_port[str(udp_echo.port)], by_port[str(udp_echo_b.port)]
        assert (a_flow["upload"], a_flow["download"]) == (3210, 3210), a_flow
        assert (b_flow["upload"], b_flow["download"]) == (77, 77), b_flow
        assert (a_flow["chains"], a_flow["rule"]) == (["direct"], "Match"), a_flow
        assert (b_flow["chains"], b_flow["rule"]) == (["also"], "DstPort"), b_flow
        for f in flows:
            assert f["metadata"]["network"] == "udp", f
            assert f["metadata"]["inboundUser"] == "alice", f
        user = api.get("/users/alice")
        assert (user["upload"], user["download"]) == (3287, 3287), user
        assert user["inbounds"][0]["sessions"] == 1, user
    # the association's end ends both sub-links
    ended = closed_flows(api, 2)
    assert {f["why"] for f in ended} == {"closed"}, ended


def test_a_failed_dial_is_never_registered(procs):
    api = procs('[[inbound]]\ntag = "in"\nprotocol = "socks"\nlisten = "127.0.0.1"\n'
                'port = {port0}\n\n[[outbound]]\ntag = "direct"\nprotocol = "freedom"\n'
                + API_TABLE, api=True)
    dead = free_port()
    s = socket.create_connection((LOOPBACK, api.socks_port), timeout=5)
    socks5_greet(s)
    rep, _ = socks5_request(s, LOOPBACK, dead)
    s.close()
    assert rep != 0
    time.sleep(0.2)
    assert api.get("/connections")["connections"] == []
    assert api.get("/connections?closed")["connections"] == []
    assert api.get("/users")["users"] == []


def test_kill_where_a_user_ends_only_that_users_flows(procs, echo):
    api = procs('[[inbound]]\ntag = "in"\nprotocol = "socks"\nlisten = "127.0.0.1"\n'
                'port = {port0}\n[[inbound.settings.users]]\nusername = "alice"\npassword = "a"\n'
                '[[inbound.settings.users]]\nusername = "bob"\npassword = "b"\n\n'
                '[[outbound]]\ntag = "direct"\nprotocol = "freedom"\n' + API_TABLE, api=True)
    alice = [socks5_connect(api.socks_port, LOOPBACK, echo.port, "alice", "a") for _ in range(2)]
    bob = socks5_connect(api.socks_port, LOOPBACK, echo.port, "bob", "b")
    for s in alice + [bob]:
        echo_exactly(s, 10)
    status, _, _ = api.call("DELETE", "/connections?user=alice")
    assert status == 204
    for s in alice:
        s.settimeout(3)
        try:
            assert s.recv(1) == b""
        except ConnectionResetError:
            pass
    echo_exactly(bob, 10)
    ended = closed_flows(api, 2)
    assert [(f["metadata"]["inboundUser"], f["why"]) for f in ended] == \
        [("alice", "the flow was killed")] * 2, ended
    for s in alice + [bob]:
        s.close()
