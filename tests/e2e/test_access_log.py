"""The access log end to end: `[log] access` ("off", "stderr" or a path),
one line per routed TCP flow and per UDP fan-out sub-link, the start that
fails when the file cannot be opened, and the reopen on reload that lets
logrotate rename the file and send SIGHUP.

Every test starts the real binary on 127.0.0.1 with a config written to
tmp_path and talks to echo servers run in threads on 127.0.0.1. Nothing
leaves the loopback interface.
"""
import re
import time

import pytest

from proxykit import (LOOPBACK, Association, EchoServer, Proxy, UdpEcho, assert_echoes,
                      socks_open, stop_cleanly)
from reloadkit import render, save, sighup, wait_lines

# docs/cli.md, "Access log"
LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) (\S+) accepted (tcp|udp):(\S+)"
                  r"(?: sniffed (\S+))? inbound (\S+) rule (#\d+|default) outbound (\S+)$", re.M)


def config(access=None, rules="", sniffing=False):
    text = "[log]\n"
    if access is not None:
        text += f'access = "{access}"\n'
    text += ('\n[[inbound]]\ntag = "in"\nprotocol = "socks"\nlisten = "127.0.0.1"\n'
             'port = {port0}\n' + ("sniffing = true\n" if sniffing else "") + '\n'
             '[[outbound]]\ntag = "direct"\nprotocol = "freedom"\n\n'
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


@pytest.fixture(scope="module")
def echo():
    s = EchoServer()
    yield s
    s.close()


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
