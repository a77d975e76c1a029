"""Users end to end (issue 19, seed 002 "Principal"): per-user rate limits
each way, max_sessions, and what a reload that removes a user or changes
its limits does to the flows it has open.

Every test starts the real binary on 127.0.0.1 with a config written to
tmp_path, and talks through its SOCKS inbound to echo servers run in
threads on 127.0.0.1. Nothing leaves the loopback interface.

The rate tests assert lower bounds only: a limit makes a transfer take at
least (bytes - burst) / rate; a slow machine can only make it longer.
"""
import re
import socket
import threading
import time

import pytest

from apikit import API_TABLE, Api
from proxykit import (LOOPBACK, Proxy, connect, free_port, recv_exact, socks5_connect,
                      socks5_greet, socks5_request, stop_cleanly)
from reloadkit import reload

# src/runtime/principal.h: a bucket holds 250 ms of its rate, at least 16 KiB
BURST_MS = 250
RATE = 200_000  # bytes a second

# The SOCKS5 REP of "connection not allowed by ruleset" (RFC 1928 section 6):
# what a flow the connector refuses (a removed user, max_sessions) gets.
REP_NOT_ALLOWED = 2


def config(users, policy=None):
    """One SOCKS inbound with users [(name, password, extra TOML lines)]."""
    text = '[log]\nlevel = "debug"\n\n'
    if policy:
        text += f'[policy]\nuser_removal = "{policy}"\n\n'
    text += ('[[inbound]]\ntag = "in"\nprotocol = "socks"\nlisten = "127.0.0.1"\n'
             'port = {port0}\n\n')
    for name, password, extra in users:
        text += (f'[[inbound.settings.users]]\nusername = "{name}"\npassword = "{password}"\n'
                 + "".join(line + "\n" for line in extra) + "\n")
    return text + '[[outbound]]\ntag = "direct"\nprotocol = "freedom"\n'


def burst(rate):
    return max(rate * BURST_MS // 1000, 16384)


def echo_through(sock, n, chunk=16384):
    """Sends n bytes and reads them back (a writer thread, so neither side
    waits on the other); returns the seconds it took."""
    payload = bytes(range(256)) * (chunk // 256)
    start = time.monotonic()
    errors = []

    def write():
        try:
            left = n
            while left:
                k = min(left, len(payload))
                sock.sendall(payload[:k])
                left -= k
        except OSError as e:
            errors.append(e)

    t = threading.Thread(target=write, daemon=True)
    t.start()
    got = 0
    while got < n:
        data = sock.recv(65536)
        assert data, f"closed after {got} of {n} bytes"
        got += len(data)
    t.join(10)
    assert not errors, errors
    return time.monotonic() - start


def still_echoes(sock, payload=b"ping"):
    sock.sendall(payload)
    return recv_exact(sock, len(payload)) == payload


def ended(sock, timeout=3.0):
    """The proxy closed the flow (EOF or reset) within timeout."""
    sock.settimeout(timeout)
    try:
        while True:
            data = sock.recv(4096)
            if not data:
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def refused(port, host, dport, user, password):
    """The REP a CONNECT gets after a successful authentication."""
    s = connect(port)
    try:
        assert socks5_greet(s, user, password) == 0
        rep, _ = socks5_request(s, host, dport)
        return rep
    finally:
        s.close()


def test_up_rate_paces_what_a_user_sends(start_proxy, echo):
    p = start_proxy(config([("alice", "a", [f"up_rate = {RATE}"]), ("bob", "b", [])]))
    n = 600_000
    with socks5_connect(p.port, LOOPBACK, echo.port, "alice", "a", timeout=30) as s:
        s.settimeout(30)
        took = echo_through(s, n)
    assert took >= (n - burst(RATE)) / RATE * 0.9, took
    # the limit is alice's: bob's flow on the same inbound is not paced
    with socks5_connect(p.port, LOOPBACK, echo.port, "bob", "b", timeout=30) as s:
        s.settimeout(30)
        assert echo_through(s, n) < took


def test_down_rate_paces_what_a_user_receives(start_proxy, echo):
    p = start_proxy(config([("alice", "a", [f"down_rate = {RATE}"])]))
    n = 500_000
    with socks5_connect(p.port, LOOPBACK, echo.port, "alice", "a", timeout=30) as s:
        s.settimeout(30)
        took = echo_through(s, n)
    assert took >= (n - burst(RATE)) / RATE * 0.9, took


def test_the_rate_is_shared_by_the_users_flows(start_proxy, echo):
    """Two flows of one user together move at the user's rate, not twice it."""
    p = start_proxy(config([("alice", "a", [f"down_rate = {RATE}"])]))
    n = 300_000
    socks = [socks5_connect(p.port, LOOPBACK, echo.port, "alice", "a", timeout=30)
             for _ in range(2)]
    took = [0, 0]

    def run(i):
        socks[i].settimeout(30)
        took[i] = echo_through(socks[i], n)

    start = time.monotonic()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    total = time.monotonic() - start
    for s in socks:
        s.close()
    assert all(took), took
    assert total >= (2 * n - burst(RATE)) / RATE * 0.9, total


def test_max_sessions_refuses_the_next_session_until_one_ends(start_proxy, echo):
    p = start_proxy(config([("alice", "a", ["max_sessions = 1"]), ("bob", "b", [])]))
    first = socks5_connect(p.port, LOOPBACK, echo.port, "alice", "a")
    assert still_echoes(first)
    assert refused(p.port, LOOPBACK, echo.port, "alice", "a") == REP_NOT_ALLOWED
    # another user is not counted against alice
    with socks5_connect(p.port, LOOPBACK, echo.port, "bob", "b") as other:
        assert still_echoes(other)
    first.close()
    deadline = time.monotonic() + 3
    while refused(p.port, LOOPBACK, echo.port, "alice", "a") != 0:
        assert time.monotonic() < deadline, "the session's place never came free"
        time.sleep(0.05)
    assert "the user has reached its max_sessions" in p.log()


@pytest.mark.parametrize("policy", [None, "close", "keep"])
def test_a_reload_that_removes_a_user(start_proxy, echo, policy):
    """close (the default) ends the removed user's open flows at once; keep
    lets them run. Either way the other users' flows go on and the removed
    credential no longer authenticates."""
    users = [("alice", "a", []), ("bob", "b", [])]
    p = start_proxy(config(users, policy))
    alice = socks5_connect(p.port, LOOPBACK, echo.port, "alice", "a")
    bob = socks5_connect(p.port, LOOPBACK, echo.port, "bob", "b")
    assert still_echoes(alice) and still_echoes(bob)
    outcome, _ = reload(p, config(users[:1], policy))
    assert outcome.startswith("config reload: changed"), outcome
    if policy == "keep":
        assert still_echoes(bob)
        assert not ended(bob, 0.5)
    else:
        assert ended(bob)
    assert still_echoes(alice)
    s = connect(p.port)
    try:
        assert socks5_greet(s, "bob", "b") != 0
    finally:
        s.close()
    alice.close()
    bob.close()


def test_a_limit_a_reload_sets_reaches_an_open_flow(start_proxy, echo):
    """The user keeps its principal across the reload, so the new limit
    applies to the flow it already has open, on its next read."""
    p = start_proxy(config([("alice", "a", [])]))
    s = socks5_connect(p.port, LOOPBACK, echo.port, "alice", "a", timeout=30)
    s.settimeout(30)
    fast = echo_through(s, 300_000)
    outcome, _ = reload(p, config([("alice", "a", [f"down_rate = {RATE}"])]))
    assert outcome.startswith("config reload: changed"), outcome
    n = 400_000
    took = echo_through(s, n)
    s.close()
    assert took >= (n - burst(RATE)) / RATE * 0.9, (fast, took)


def test_limits_in_the_config_are_checked(run, tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(config([("alice", "a", ['up_rate = "fast"'])]).replace("{port0}", "1080"))
    r = run("-t", "-c", str(path))
    assert r.returncode != 0
    assert "up_rate" in r.stderr
    path.write_text(config([("alice", "a", [])], policy="drop").replace("{port0}", "1080"))
    r = run("-t", "-c", str(path))
    assert r.returncode != 0
    assert "user_removal" in r.stderr


# ---------------------------------------------------------------- the same through the admin API

@pytest.fixture
def api(app, tmp_path):
    started = []

    def _start(text):
        p = Proxy(app, tmp_path, text + API_TABLE, 1, extra={"api": free_port()},
                  log_level="debug")
        started.append(p)
        return Api(p.start())

    yield _start
    stop_cleanly(started, "etemenanki-app")


@pytest.mark.parametrize("policy", ["close", "keep"])
def test_the_api_removes_a_user(api, echo, policy):
    """DELETE /users/<name> applies the running config without that user:
    under close its flows end at once, under keep they run on; its
    credential no longer authenticates; the other users' flows go on."""
    a = api(config([("alice", "a", []), ("bob", "b", [])], policy))
    alice = socks5_connect(a.socks_port, LOOPBACK, echo.port, "alice", "a")
    bob = socks5_connect(a.socks_port, LOOPBACK, echo.port, "bob", "b")
    assert still_echoes(alice) and still_echoes(bob)
    status, _, _ = a.call("DELETE", "/users/bob")
    assert status == 204
    if policy == "close":
        assert ended(bob)
    else:
        assert still_echoes(bob)
    assert still_echoes(alice)
    s = connect(a.socks_port)
    try:
        assert socks5_greet(s, "bob", "b") != 0
    finally:
        s.close()
    info = a.get("/users/bob")  # its counts stay; it is on no inbound now
    assert info["inbounds"] == [] and info["total"] == 1, info
    status, _, body = a.call("DELETE", "/users/bob")
    assert status == 404
    assert body == {"message": "no running user has that name (to add one, name its inbound: "
                               "?inbound=<tag>)"}
    alice.close()
    bob.close()


def test_the_api_adds_a_user_and_a_reload_of_the_file_drops_it(api, echo):
    a = api(config([("alice", "a", [])]))
    alice = socks5_connect(a.socks_port, LOOPBACK, echo.port, "alice", "a")
    status, _, body = a.call("PUT", "/users/carol?inbound=in",
                             body={"password": "c", "max_sessions": 2})
    assert status == 204, body
    with socks5_connect(a.socks_port, LOOPBACK, echo.port, "carol", "c") as carol:
        assert still_echoes(carol)
    row = a.get("/users/carol")["inbounds"]
    assert row == [{"inbound": "in", "up_rate": 0, "down_rate": 0, "max_sessions": 2,
                    "sessions": row[0]["sessions"]}], row
    # alice's open flow went through that apply untouched
    assert still_echoes(alice)
    # a credential the config check refuses: its message, nothing applied
    status, _, body = a.call("PUT", "/users/dave?inbound=in", body={})
    assert status == 400
    assert body == {"message": "inbound in: every settings.users entry of protocol socks "
                               "needs username and password"}, body
    status, _, body = a.call("PUT", "/users/dave?inbound=nowhere", body={"password": "d"})
    assert status == 404
    # the file decides again at the next reload: carol goes (under close)
    outcome, _ = reload(a.proxy, config([("alice", "a", [])]) + API_TABLE + "\n")
    assert outcome.startswith("config reload: changed"), outcome
    s = connect(a.socks_port)
    try:
        assert socks5_greet(s, "carol", "c") != 0
    finally:
        s.close()
    assert still_echoes(alice)
    alice.close()


def test_the_api_sets_a_limit_that_reaches_an_open_flow(api, echo):
    a = api(config([("alice", "a", [])]))
    s = socks5_connect(a.socks_port, LOOPBACK, echo.port, "alice", "a", timeout=30)
    s.settimeout(30)
    echo_through(s, 200_000)
    status, _, _ = a.call("PUT", "/users/alice", body={"down_rate": RATE, "max_sessions": 5})
    assert status == 204
    info = a.get("/users/alice")
    assert info["inbounds"][0]["down_rate"] == RATE and info["inbounds"][0]["max_sessions"] == 5
    assert info["inbounds"][0]["sessions"] == 1
    n = 400_000
    took = echo_through(s, n)
    assert took >= (n - burst(RATE)) / RATE * 0.9, took
    # and lifted again: the next transfer is not paced
    status, _, _ = a.call("PUT", "/users/alice", body={})
    assert status == 204
    assert echo_through(s, n) < took
    s.close()
    used = a.get("/users/alice")
    assert used["upload"] >= 1_000_000 and used["download"] >= 1_000_000, used


def two_inbounds(policy=None):
    """The same user alice on two SOCKS inbounds, "a" ({port0}) and "b"."""
    text = config([("alice", "a", [])], policy)
    return text.replace('[[outbound]]', '[[inbound]]\ntag = "b"\nprotocol = "socks"\n'
                        'listen = "127.0.0.1"\nport = {b}\n[[inbound.settings.users]]\n'
                        'username = "alice"\npassword = "a"\n\n[[outbound]]', 1)


def test_removing_a_user_on_one_inbound_leaves_its_sessions_elsewhere(app, tmp_path, echo):
    b_port = free_port()
    p = Proxy(app, tmp_path, two_inbounds() + API_TABLE, 1,
              extra={"api": free_port(), "b": b_port}, log_level="debug")
    try:
        a = Api(p.start())
        on_a = socks5_connect(a.socks_port, LOOPBACK, echo.port, "alice", "a")
        on_b = socks5_connect(b_port, LOOPBACK, echo.port, "alice", "a")
        assert still_echoes(on_a) and still_echoes(on_b)
        status, _, _ = a.call("DELETE", "/users/alice?inbound=in")
        assert status == 204
        assert ended(on_a)
        assert still_echoes(on_b)
        assert not ended(on_b, 0.3)
        rows = [i["inbound"] for i in a.get("/users/alice")["inbounds"]]
        assert rows == ["b"], rows
        with socks5_connect(b_port, LOOPBACK, echo.port, "alice", "a") as again:
            assert still_echoes(again)
        on_a.close()
        on_b.close()
    finally:
        stop_cleanly([p], "etemenanki-app")


def test_a_reload_that_edits_only_users_publishes_no_plane(api, echo):
    """Seed 002: the user set never triggers a publish (the plane's epoch
    stays); a route change does."""
    a = api(config([("alice", "a", [])]))

    def epoch():
        text = a.get("/metrics")
        return int(re.search(r"^etemenanki_config_epoch (\d+)$", text, re.M).group(1))

    first = epoch()
    outcome, _ = reload(a.proxy, config([("alice", "a", [f"up_rate = {RATE}"]),
                                         ("bob", "b", [])]) + API_TABLE)
    assert outcome.startswith("config reload: changed"), outcome
    assert epoch() == first
    outcome, _ = reload(a.proxy, config([("alice", "a", []), ("bob", "b", [])]) + API_TABLE +
                        '\n[[route.rule]]\noutbound = "direct"\nport = [1]\n')
    assert outcome.startswith("config reload: changed"), outcome
    assert epoch() == first + 1
