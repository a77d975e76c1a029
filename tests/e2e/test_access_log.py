"""The access log end to end: `[log] access` ("off", "stderr" or a path),
one line per routed TCP flow and per UDP fan-out sub-link, the start that
fails when the file cannot be opened, and the reopen on reload that lets
logrotate rename the file and send SIGHUP.

Every test starts the real binary on 127.0.0.1 with a config written to
tmp_path and talks to echo servers run in threads on 127.0.0.1. Nothing
leaves the loopback interface.
"""
import json
import re
import signal
import socket
import struct
import time

import pytest

from proxykit import (LOOPBACK, Association, EchoServer, Proxy, Spout, UdpEcho, assert_echoes,
                      free_port, recv_exact, socks5_connect, socks_open, stop_cleanly)
from reloadkit import render, save, sighup, wait_lines

# docs/cli.md, "Access log"
LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) (\S+) accepted (tcp|udp):(\S+)"
                  r"(?: sniffed (\S+))? inbound (\S+)(?: user \S+)? rule (#\d+|default) "
                  r"outbound (\S+)$", re.M)
# The end line of a TCP flow ([log] access_end = true).
END = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) (\S+) ended (tcp|udp):(\S+)"
                 r"(?: sniffed (\S+))? inbound (\S+)(?: user (\S+))? rule (#\d+|default) "
                 r"outbound (\S+)(?: member (\S+))? up (\d+) down (\d+) ms (\d+) why (.+)$", re.M)


def config(access=None, rules="", sniffing=False, end=False, fmt=None, users=(), splice=True):
    text = "[log]\n"
    if access is not None:
        text += f'access = "{access}"\n'
    if end:
        text += "access_end = true\n"
    if fmt:
        text += f'format = "{fmt}"\n'
    if not splice:
        text += "\n[runtime]\nsplice = false\n"
    text += ('\n[[inbound]]\ntag = "in"\nprotocol = "socks"\nlisten = "127.0.0.1"\n'
             'port = {port0}\n' + ("sniffing = true\n" if sniffing else "") + '\n')
    for user, password in users:
        text += f'[[inbound.settings.users]]\nusername = "{user}"\npassword = "{password}"\n\n'
    text += ('[[outbound]]\ntag = "direct"\nprotocol = "freedom"\n\n'
             '[[outbound]]\ntag = "also"\nprotocol = "freedom"\n\n')
    return text + rules


def lines_of(text):
    """(time, source, network, dest, sniffed, inbound, rule, outbound) per line."""
    return LINE.findall(text)


def wait_for(read, count, timeout=3.0):
    deadline = time.monotonic() + timeout
    while True:
        found = lines_of(read())
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


def read_file(path):
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


@pytest.fixture
def start_proxy(app, tmp_path):
    started = []

    def _start(text):
        p = Proxy(app, tmp_path, text)
        started.append(p)
        return p.start()

    yield _start
    stop_cleanly(started, "proxy")


def tcp_flow(proxy, echo):
    """One SOCKS CONNECT to the echo server; returns the client's ip:port."""
    s = socks_open(proxy.port, LOOPBACK, echo.port)
    try:
        assert_echoes(s)
        host, port = s.getsockname()
        return f"{host}:{port}"
    finally:
        s.close()


def test_off_is_the_default_and_writes_nothing(start_proxy, echo, tmp_path):
    proxy = start_proxy(config())
    tcp_flow(proxy, echo)
    time.sleep(0.2)
    assert lines_of(proxy.log()) == []
    assert " accepted " not in proxy.log()
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("proxy-")) == []


def test_stderr_a_direct_flow_and_one_through_a_rule(start_proxy, echo):
    other = EchoServer()
    try:
        proxy = start_proxy(config("stderr", f'[[route.rule]]\noutbound = "also"\n'
                                             f'port = [{other.port}]\n'))
        source = tcp_flow(proxy, echo)
        found = wait_for(proxy.log, 1)
        assert [l[1:] for l in found] == [
            (source, "tcp", f"127.0.0.1:{echo.port}", "", "in", "default", "direct@v1")]
        source = tcp_flow(proxy, other)  # the rule matches its port: rule #1, its outbound
        found = wait_for(proxy.log, 2)
        assert found[1][1:] == (source, "tcp", f"127.0.0.1:{other.port}", "", "in", "#1",
                                "also@v1")
        assert len(found) == 2
    finally:
        other.close()


def test_a_sniffed_name_is_in_the_line(start_proxy, echo, tmp_path):
    path = tmp_path / "access.log"
    proxy = start_proxy(config(str(path), sniffing=True))
    s = socks_open(proxy.port, LOOPBACK, echo.port)
    try:
        assert_echoes(s, b"GET / HTTP/1.1\r\nHost: sniffed.example\r\n\r\n")
        source = "%s:%d" % s.getsockname()
    finally:
        s.close()
    found = wait_for(lambda: read_file(path), 1)
    assert [l[1:] for l in found] == [(source, "tcp", f"127.0.0.1:{echo.port}",
                                       "sniffed.example", "in", "default", "direct@v1")]


def test_a_path_gets_one_line_per_flow(start_proxy, echo, tmp_path):
    path = tmp_path / "access.log"
    proxy = start_proxy(config(str(path)))
    assert path.exists() and (path.stat().st_mode & 0o777) & ~0o640 == 0
    sources = [tcp_flow(proxy, echo) for _ in range(3)]
    found = wait_for(lambda: read_file(path), 3)
    assert [l[1] for l in found] == sources
    assert all(l[2:] == ("tcp", f"127.0.0.1:{echo.port}", "", "in", "default", "direct@v1")
               for l in found)
    # and none of them on stderr
    assert lines_of(proxy.log()) == []


def test_udp_one_line_per_sub_link_not_per_datagram(start_proxy, tmp_path):
    """A sub-link is per outbound (seed 000's fan-out): its line names the
    destination that opened it; later datagrams, to that peer or to another
    one routed to the same outbound, add no line."""
    path = tmp_path / "access.log"
    a, b, c = UdpEcho(), UdpEcho(), UdpEcho()
    try:
        proxy = start_proxy(config(str(path), f'[[route.rule]]\noutbound = "also"\n'
                                              f'port = [{b.port}]\n'))
        with Association(proxy.port) as assoc:
            for i in range(3):
                assoc.echo(a, b"to A %d" % i)
            assoc.echo(b, b"to B")
            assoc.echo(c, b"to C, on A's sub-link")
            assoc.echo(a, b"to A again")
            source = "%s:%d" % assoc.ctl.getsockname()
        wait_for(lambda: read_file(path), 2)
        time.sleep(0.2)
        found = lines_of(read_file(path))
        assert [l[1:] for l in found] == [
            (source, "udp", f"127.0.0.1:{a.port}", "", "in", "default", "direct@v1"),
            (source, "udp", f"127.0.0.1:{b.port}", "", "in", "#1", "also@v1"),
        ]
    finally:
        for p in (a, b, c):
            p.close()


def test_rotation_rename_then_sighup_writes_a_new_file(start_proxy, echo, tmp_path):
    path = tmp_path / "access.log"
    rotated = tmp_path / "access.log.1"
    proxy = start_proxy(config(str(path)))
    before = tcp_flow(proxy, echo)
    assert [l[1] for l in wait_for(lambda: read_file(path), 1)] == [before]
    path.rename(rotated)  # what logrotate does, then `kill -HUP`
    sighup(proxy)
    assert path.exists()
    after = tcp_flow(proxy, echo)
    assert [l[1] for l in wait_for(lambda: read_file(path), 1)] == [after]
    assert [l[1] for l in lines_of(rotated.read_text())] == [before]


def test_a_reload_that_cannot_open_keeps_the_current_file(start_proxy, echo, tmp_path):
    path = tmp_path / "access.log"
    bad = tmp_path / "missing" / "access.log"
    proxy = start_proxy(config(str(path)))
    save(proxy, render(proxy, config(str(bad))))
    want = re.compile(r"^\S+ WARN  app: (reload: cannot open the access log .*)$", re.M)
    found = wait_lines(proxy, want, 1)
    assert found == [f"reload: cannot open the access log {bad}: No such file or directory; "
                     "keeping the current access log"]
    # the reload itself says what it changed: [log]
    changed = re.compile(r"^\S+ INFO  supervisor: (config reload: .*)$", re.M)
    assert wait_lines(proxy, changed, 1) == ["config reload: changed log"], proxy.log()
    source = tcp_flow(proxy, echo)
    assert [l[1] for l in wait_for(lambda: read_file(path), 1)] == [source]


def test_a_start_fails_when_the_file_cannot_be_opened(run, tmp_path):
    bad = tmp_path / "missing" / "access.log"
    cfg = tmp_path / "c.toml"
    cfg.write_text(config(str(bad)).replace("{port0}", "1"))
    r = run("-c", str(cfg))
    assert r.returncode == 1
    assert r.stderr.splitlines()[-1] == (
        f"failed to start: cannot open the access log {bad}: No such file or directory")
    # --test says the same, and creates no file where it could
    r = run("--test", "-c", str(cfg))
    assert r.returncode == 1
    assert r.stderr.strip() == (
        f"configuration invalid: cannot open the access log {bad}: No such file or directory")
    good = tmp_path / "access.log"
    cfg.write_text(config(str(good)).replace("{port0}", "1"))
    r = run("--test", "-c", str(cfg))
    assert r.returncode == 0, r.stderr
    assert not good.exists()


def test_bad_values_are_refused_word_for_word(run, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(config("").replace("{port0}", "1"))
    r = run("--test", "-c", str(cfg))
    assert r.returncode == 1
    assert r.stderr.strip() == ('configuration invalid: [log] access "" is not "off", '
                                '"stderr" or a file path')


# ---------------------------------------------------------------- end lines, users, members, json

def ends_of(text):
    """(time, source, network, dest, sniffed, inbound, user, rule, outbound,
    member, up, down, ms, why) per end line."""
    return END.findall(text)


def wait_ends(read, count, timeout=3.0):
    deadline = time.monotonic() + timeout
    while True:
        found = ends_of(read())
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


def spout_flow(proxy, spout, n, user=None):
    """Asks the spout for n bytes through the proxy: 4 bytes up, n down, then
    the spout's FIN and ours. Returns the client's ip:port."""
    s = socks5_connect(proxy.port, LOOPBACK, spout.port, user, user and "pw")
    try:
        s.sendall(struct.pack(">I", n))
        got = recv_exact(s, n) if n else b""
        assert len(got) == n
        s.settimeout(5)
        assert s.recv(1) == b""  # the spout's FIN came through
        return "%s:%d" % s.getsockname()
    finally:
        s.close()


@pytest.fixture(scope="module")
def spout():
    s = Spout()
    yield s
    s.close()


def test_end_lines_are_off_by_default(start_proxy, spout, tmp_path):
    path = tmp_path / "access.log"
    proxy = start_proxy(config(str(path)))
    spout_flow(proxy, spout, 10)
    assert len(wait_for(lambda: read_file(path), 1)) == 1
    time.sleep(0.2)
    assert ends_of(read_file(path)) == [] and " ended " not in read_file(path)


@pytest.mark.parametrize("n,splice", [(1000, True), (300000, True), (300000, False)],
                         ids=["short", "spliced", "buffered"])
def test_an_end_line_counts_the_bytes_each_way(start_proxy, spout, tmp_path, n, splice):
    """up is what the client sent (the spout's 4-byte request), down what
    came back; 300000 bytes pass RELAY_SPLICE_AFTER, so with splice the
    count spans the hand-off to splice(2)."""
    path = tmp_path / "access.log"
    proxy = start_proxy(config(str(path), end=True, splice=splice))
    source = spout_flow(proxy, spout, n)
    (end,) = wait_ends(lambda: read_file(path), 1)
    (_, src, net, dest, sniffed, inbound, user, rule, outbound, member, up, down, ms,
     why) = end
    assert (src, net, dest, sniffed, inbound, user, rule, outbound, member) == (
        source, "tcp", f"127.0.0.1:{spout.port}", "", "in", "", "default", "direct@v1", "")
    assert (int(up), int(down), why) == (4, n, "closed")
    assert 0 <= int(ms) < 5000
    # the open line came first, for the same flow
    text = read_file(path)
    assert [l[1] for l in lines_of(text)] == [source]
    assert text.index(" accepted ") < text.index(" ended ")


def test_a_failed_dial_ends_at_once_with_its_why(start_proxy, tmp_path):
    path = tmp_path / "access.log"
    proxy = start_proxy(config(str(path), end=True))
    dead = free_port()  # nothing listens there
    s = socket.create_connection((LOOPBACK, proxy.port), timeout=5)
    try:
        s.sendall(bytes([5, 1, 0]))
        recv_exact(s, 2)
        s.sendall(bytes([5, 1, 0, 1, 127, 0, 0, 1]) + struct.pack(">H", dead))
        recv_exact(s, 3)
    finally:
        s.close()
    (end,) = wait_ends(lambda: read_file(path), 1)
    assert (end[3], end[10], end[11]) == (f"127.0.0.1:{dead}", "0", "0")
    assert end[13] != "closed", end


def test_user_names_are_on_both_lines(start_proxy, spout, tmp_path):
    path = tmp_path / "access.log"
    proxy = start_proxy(config(str(path), end=True, users=[("alice", "pw"), ("bob", "pw")]))
    spout_flow(proxy, spout, 5, user="bob")
    (end,) = wait_ends(lambda: read_file(path), 1)
    assert end[6] == "bob"
    opens = [l for l in read_file(path).splitlines() if " accepted " in l]
    assert len(opens) == 1 and " inbound in user bob rule default " in opens[0], opens


def test_a_balancer_flow_names_its_member_on_the_end_line(app, tmp_path, spout):
    """The member is known once the dial answered: the first one tried may be
    the dead one, and the flow then goes through the live one."""
    started = []
    try:
        up = Proxy(app, tmp_path, '[[inbound]]\ntag = "in"\nprotocol = "socks"\n'
                   'listen = "127.0.0.1"\nport = {port0}\n\n'
                   '[[outbound]]\ntag = "direct"\nprotocol = "freedom"\n')
        started.append(up)
        up.start()
        path = tmp_path / "access.log"
        dead = free_port()
        text = (f'[log]\naccess = "{path}"\naccess_end = true\n\n'
                '[[inbound]]\ntag = "in"\nprotocol = "socks"\nlisten = "127.0.0.1"\n'
                'port = {port0}\n\n')
        for tag, port in (("dead", dead), ("live", up.port)):
            text += (f'[[outbound]]\ntag = "{tag}"\nprotocol = "socks"\n'
                     f'server = "127.0.0.1"\nport = {port}\n\n')
        text += ('[[balancer]]\ntag = "pool"\noutbounds = ["dead", "live"]\n\n'
                 '[route]\ndefault = "pool"\n')
        proxy = Proxy(app, tmp_path, text)
        started.append(proxy)
        proxy.start()
        for _ in range(3):
            spout_flow(proxy, spout, 100)
        ends = wait_ends(lambda: read_file(path), 3)
        assert [(e[8], e[9], e[10], e[11], e[13]) for e in ends] == [
            ("pool@v1", "live", "4", "100", "closed")] * 3, read_file(path)
        # the open line names the balancer: its member is not chosen yet
        assert [l[7] for l in lines_of(read_file(path))] == ["pool@v1"] * 3
    finally:
        stop_cleanly(started, "proxy")


JSON_KEYS = ["time", "event", "source", "dest", "sniffed", "inbound", "user", "rule", "outbound",
             "member", "up", "down", "ms", "why"]
TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def json_lines(text):
    return [json.loads(l) for l in text.splitlines() if l]


def test_json_lines_field_by_field(app, tmp_path, spout):
    path = tmp_path / "access.log"
    proxy = Proxy(app, tmp_path, config(str(path), end=True, fmt="json",
                                        users=[('al\\"ice', "pw")]),
                  wait_for_log=False)
    try:
        proxy.start()
        s = socks5_connect(proxy.port, LOOPBACK, spout.port, 'al"ice', "pw")
        try:
            s.sendall(struct.pack(">I", 7))
            assert recv_exact(s, 7) == bytes(7)
            assert s.recv(1) == b""
            source = "%s:%d" % s.getsockname()
        finally:
            s.close()
        deadline = time.monotonic() + 3
        while len(json_lines(read_file(path))) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        opened, ended = json_lines(read_file(path))
        for line in (opened, ended):
            assert list(line) == JSON_KEYS
            assert TIME.match(line["time"])
            assert (line["source"], line["dest"], line["sniffed"], line["inbound"], line["user"],
                    line["rule"], line["outbound"], line["member"]) == (
                source, f"tcp:127.0.0.1:{spout.port}", None, "in", 'al"ice', None, "direct@v1",
                None)
        assert (opened["event"], opened["up"], opened["down"], opened["ms"], opened["why"]) == (
            "open", None, None, None, None)
        assert (ended["event"], ended["up"], ended["down"], ended["why"]) == (
            "end", 4, 7, "closed")
        assert isinstance(ended["ms"], int) and 0 <= ended["ms"] < 5000
    finally:
        stop_cleanly([proxy], "proxy")
    # the main log too: every line one object with time, level, target, msg
    main = json_lines(proxy.log())
    assert main and all(list(l) == ["time", "level", "target", "msg"] for l in main)
    assert all(TIME.match(l["time"]) for l in main)
    assert any(l["target"] == "supervisor" and l["msg"].startswith("listening on ")
               for l in main), main


def test_a_reload_switches_the_format(start_proxy, spout, tmp_path):
    path = tmp_path / "access.log"
    proxy = start_proxy(config(str(path), end=True))
    spout_flow(proxy, spout, 3)
    assert len(wait_ends(lambda: read_file(path), 1)) == 1
    save(proxy, render(proxy, config(str(path), end=True, fmt="json")))
    changed = re.compile(r"^\S+ INFO  supervisor: (config reload: .*)$", re.M)
    assert wait_lines(proxy, changed, 1) == ["config reload: changed log"], proxy.log()
    source = spout_flow(proxy, spout, 3)
    deadline = time.monotonic() + 3
    while read_file(path).count("\n") < 4 and time.monotonic() < deadline:
        time.sleep(0.02)
    text = read_file(path).splitlines()
    assert len(text) == 4, text
    opened, ended = json.loads(text[2]), json.loads(text[3])
    assert (opened["event"], opened["source"], ended["event"], ended["down"]) == (
        "open", source, "end", 3)
    # and the main log's lines from here on: the next reload's say so
    proxy.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 3
    while not proxy.log().rstrip().endswith("}") and time.monotonic() < deadline:
        time.sleep(0.02)
    last = json.loads(proxy.log().splitlines()[-1])
    assert (list(last), last["level"]) == (["time", "level", "target", "msg"], "info"), last
