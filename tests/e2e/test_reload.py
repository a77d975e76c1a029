"""Hot reload end to end (issue 16; seed 002 "hot_swap", seed 003
"Reloading"): SIGHUP and saving the file reload the running process; a TCP
flow keeps the target it opened on while each UDP datagram takes the route
current when it is sent; changed outbounds drain by the policy their old
version ran under; a refused config changes nothing; inbounds that keep
their address keep their socket, and a renewed certificate reaches new
handshakes only; a balancer the reload keeps keeps its members' health.

Every test starts the real binary on 127.0.0.1 with `[log] level = "debug"`
in its config (in the file, not `-l`, so a reload reads the same level and
the log counts as unchanged), then rewrites that file and reads the log.
Behaviour on the sockets is asserted first; the log lines (word for word
from the issue and src/supervisor/plan.c) second. The `applied:` counts
follow the planner (plan.c): every outbound, inbound and balancer is one
entry, and the route, dns and log one each; a removed object counts in none
of the four numbers; every old outbound version takes a drain step, under
keep too. The configs, the save and SIGHUP and the reload's log lines come
from reloadkit.py; the reloads under load are in test_reload_load.py.
"""
import contextlib
import os
import re
import socket
import ssl
import threading
import time

import pytest

from balancerkit import (MemberServer, lines_with, socks_flow, state_lines, wait_line,
                         wait_state)
from proxykit import (LOOPBACK, REP_OK, Association, assert_blackholed,
                      assert_echoes, free_port, make_cert, socks5_greet, socks5_request,
                      socks_open, wait_closed)
from reloadkit import (OUTCOME, config, lines, outbound, reload, render, sighup, socks_in,
                       wait_lines)

# ---------------------------------------------------------------- configs

DIRECT_A = outbound("a", "freedom")
BLOCK_B = outbound("b", "blackhole")


# ---------------------------------------------------------------- fixtures


@pytest.fixture
def aux(tmp_path):
    """A directory for files that are not the running config: a
    subdirectory, whose contents a watch of the config's directory does not
    see."""
    d = tmp_path / "aux"
    d.mkdir()
    return d


# ---------------------------------------------------------------- reloading and its log lines

DRAINED = "the outbound this flow was opened on was drained"


def drained_logged(proxy, sock, timeout=2.0):
    """Whether the flow of client socket sock ended as drained, in the form
    flow ends are logged at debug level: in_conn's `<tag> connection from
    <peer> to <dest> ended: <why>` or conn's `relay from <peer> ended: <why>`."""
    port = sock.getsockname()[1]
    pattern = re.compile(rf"^\S+ DEBUG \S+: .*\bfrom 127\.0\.0\.1:{port} (?:to \S+ )?"
                         rf"ended: {re.escape(DRAINED)}$", re.M)
    return bool(wait_lines(proxy, pattern, 1, timeout))


def refused(port, timeout=2.0):
    """Whether connecting to port is refused, polled until timeout (each
    worker may close its copy of a listener just after the reload line)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((LOOPBACK, port), timeout=1.0):
                pass
        except ConnectionRefusedError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def flow(proxy, echo, port=None):
    """A SOCKS5 CONNECT to the echo server that echoes once."""
    s = socks_open(port or proxy.port, LOOPBACK, echo.port)
    try:
        assert_echoes(s, b"first bytes")
    except BaseException:
        s.close()
        raise
    return s


# Flows a version: with a worker per core, some likely land on each worker.
FLOWS = 4


def open_flows(stack, proxy, echo, n=FLOWS):
    """n flows (see flow), closed with stack."""
    return [stack.enter_context(flow(proxy, echo)) for _ in range(n)]


def assert_start_fails(run, path):
    """What `etemenanki-app -c path` prints after `failed to start: `."""
    r = run("-c", str(path), timeout=5)
    assert r.returncode == 1, r.stderr
    last = r.stderr.splitlines()[-1]
    assert last.startswith("failed to start: "), r.stderr
    return last[len("failed to start: "):]


class ConnectHammer:
    """Connects to a port over and over in a thread, closing each connection
    at once, and counts the attempts and the refusals."""

    def __init__(self, port):
        self.port = port
        self.attempts = 0
        self.refusals = 0
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                with socket.create_connection((LOOPBACK, self.port), timeout=2.0):
                    pass
            except ConnectionRefusedError:
                self.refusals += 1
            self.attempts += 1
            time.sleep(0.002)

    def stop(self):
        self._stop.set()
        self.thread.join(5)


# ---------------------------------------------------------------- triggers


def test_sighup_with_an_unchanged_config_changes_nothing(start_proxy, echo):
    proxy = start_proxy(config(socks_in("in", "{port0}"), DIRECT_A))
    with flow(proxy, echo) as before:
        assert sighup(proxy) == ("config reload: no changes", None)
        assert proxy.proc.poll() is None
        assert_echoes(before, b"after the reload")
        with flow(proxy, echo) as after:
            assert_echoes(after)
        # the handler stays: a second SIGHUP is a second reload
        assert sighup(proxy) == ("config reload: no changes", None)
        assert_echoes(before, b"after the second reload")
    assert proxy.proc.poll() is None


def test_sighup_reloads_the_file_it_was_started_with(start_proxy, echo, tmp_path):
    """A change the file watcher cannot see (written through a hard link in
    another directory: inotify reports a write to the directory of the path
    it was made through) is applied by SIGHUP alone."""
    proxy = start_proxy(config(socks_in("in", "{port0}"), DIRECT_A, BLOCK_B, default="a"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    alias = elsewhere / "same-inode.toml"
    os.link(proxy.cfg_path, alias)
    with flow(proxy, echo) as before:
        alias.write_text(render(proxy, config(socks_in("in", "{port0}"), DIRECT_A, BLOCK_B,
                                              default="b")))
        outcome, _ = sighup(proxy)
        assert outcome == "config reload: changed route"
        with socks_open(proxy.port, LOOPBACK, echo.port) as s:
            assert_blackholed(s)
        assert_echoes(before, b"routed before the reload")
    # a watcher of the file itself may reload too, and then finds nothing new
    time.sleep(0.5)
    assert lines(proxy, OUTCOME)[1:] in ([], ["config reload: no changes"]), proxy.log()


def test_reload_by_saving_with_an_editor_style_rename(start_proxy, echo):
    """No signal: a temporary file renamed over the config reloads it, and
    the watch survives the rename (the next save is seen too)."""
    template = config(socks_in("in", "{port0}"), DIRECT_A, BLOCK_B, default="{route}")
    proxy = start_proxy(template, extra={"route": "a"})
    with flow(proxy, echo):
        pass

    proxy.extra["route"] = "b"
    outcome, _ = reload(proxy, template)
    assert outcome == "config reload: changed route"
    with socks_open(proxy.port, LOOPBACK, echo.port) as s:
        assert_blackholed(s)

    proxy.extra["route"] = "a"
    outcome, _ = reload(proxy, template)
    assert outcome == "config reload: changed route"
    with flow(proxy, echo):
        pass
    assert lines(proxy, OUTCOME) == ["config reload: changed route"] * 2


def test_a_burst_of_writes_is_one_reload(start_proxy, echo):
    """Five writes in place within about 100 ms, alternating the route and
    ending on b: one reload, of the last content."""
    template = config(socks_in("in", "{port0}"), DIRECT_A, BLOCK_B, default="{route}")
    proxy = start_proxy(template, extra={"route": "a"})
    for route in ("b", "a", "b", "a", "b"):
        proxy.extra["route"] = route
        proxy.cfg_path.write_text(render(proxy, template))
        time.sleep(0.02)
    last_write = time.monotonic()
    assert wait_lines(proxy, OUTCOME, 1), f"no reload; log:\n{proxy.log()}"
    time.sleep(max(0.0, last_write + 1.0 - time.monotonic()))
    assert lines(proxy, OUTCOME) == ["config reload: changed route"], proxy.log()
    with socks_open(proxy.port, LOOPBACK, echo.port) as s:
        assert_blackholed(s)


# ---------------------------------------------------------------- routing across a reload


def test_a_route_change_reaches_the_next_udp_packet_but_not_an_established_tcp_flow(
        start_proxy, echo, udp_echo):
    template = config(socks_in("in", "{port0}"), DIRECT_A, BLOCK_B, default="{route}")
    proxy = start_proxy(template, extra={"route": "a"})
    with flow(proxy, echo) as tcp, Association(proxy.port) as udp:
        udp.echo(udp_echo, b"before the reload")
        accepted = echo.connections

        proxy.extra["route"] = "b"
        # a, b and the inbound reused, the route built, dns and log reused
        assert reload(proxy, template) == (
            "config reload: changed route", "applied: 1 built, 5 reused, 0 swapped, 0 drained")

        assert_echoes(tcp, b"routed once, when it opened")
        seen = len(udp_echo.received)
        udp.send(LOOPBACK, udp_echo.port, b"after the reload")
        assert udp.silent(0.5), "the datagram after the route change was answered"
        assert len(udp_echo.received) == seen, "the datagram reached the peer"
        with socks_open(proxy.port, LOOPBACK, echo.port) as s:
            assert_blackholed(s)
        assert echo.connections == accepted, "a CONNECT after the reload reached the server"

        # and back: the same association's next datagram takes a again
        proxy.extra["route"] = "a"
        assert reload(proxy, template)[0] == "config reload: changed route"
        udp.echo(udp_echo, b"routed on the current config")
        assert_echoes(tcp, b"still on a")


# ---------------------------------------------------------------- drain policies


def test_a_changed_outbound_keeps_its_old_flows_unless_drained_with_close(start_proxy, echo):
    """Seed 002: a@v1 runs under the default keep; v2 is configured with
    close; changing a again closes the flows on v2, leaves v1's alone, and
    new flows take v3."""
    def spec(*keys):
        return config(socks_in("in", "{port0}"), outbound("a", "freedom", *keys))

    proxy = start_proxy(spec())
    with contextlib.ExitStack() as stack:
        v1 = open_flows(stack, proxy, echo)
        # the old version drains by the policy it ran under (keep), not by
        # the new config's close
        assert reload(proxy, spec('address_family = "ipv4_only"', 'drain = "close"')) == (
            "config reload: changed outbounds", "applied: 1 built, 4 reused, 0 swapped, 1 drained")
        for s in v1:
            assert_echoes(s, b"v1 after the first change")
        assert wait_closed(v1[0], 0.3) is None, "a flow under keep was closed"

        v2 = open_flows(stack, proxy, echo)
        assert reload(proxy, spec('address_family = "prefer_ipv4"', 'drain = "close"')) == (
            "config reload: changed outbounds", "applied: 1 built, 4 reused, 0 swapped, 1 drained")
        for s in v2:
            assert wait_closed(s, 2.0) is not None, "a flow on v2 was not closed"
            assert drained_logged(proxy, s), proxy.log()

        for s in v1:
            assert_echoes(s, b"v1 after the second change")
            assert not drained_logged(proxy, s, timeout=0)
        for s in open_flows(stack, proxy, echo):
            assert_echoes(s, b"a new flow on v3")


def test_a_drain_only_change_sets_the_policy_of_the_running_version(start_proxy, echo):
    """docs/config.md "Drain policies": a save that changes only the drain
    keys rebuilds nothing and closes nothing, and the next change of the
    outbound drains the running version by the policy it was given."""
    def spec(*keys):
        return config(socks_in("in", "{port0}"), outbound("a", "freedom", *keys))

    proxy = start_proxy(spec())
    with contextlib.ExitStack() as stack:
        v1 = open_flows(stack, proxy, echo)
        assert reload(proxy, spec('drain = "close"')) == (
            "config reload: changed outbounds", "applied: 0 built, 4 reused, 1 swapped, 0 drained")
        for s in v1:
            assert_echoes(s, b"a swap closes nothing")
        assert reload(proxy, spec('drain = "close"', 'address_family = "ipv4_only"'))[0] == (
            "config reload: changed outbounds")
        for s in v1:
            assert wait_closed(s, 2.0) is not None, "a flow on v1 was not closed"
            assert drained_logged(proxy, s), proxy.log()
        for s in open_flows(stack, proxy, echo):
            assert_echoes(s, b"on v2")


def test_a_removed_outbound_drains_by_its_policy(start_proxy, echo):
    """Removing an outbound ends its last version under the policy the
    config before the reload gave it; the flows of the others go on."""
    proxy = start_proxy(config(socks_in("in", "{port0}"), DIRECT_A,
                               outbound("c", "freedom", 'drain = "close"'), default="c"))
    with contextlib.ExitStack() as stack:
        on_c = open_flows(stack, proxy, echo)
        # a and the inbound, dns and log reused, the route built, c removed
        assert reload(proxy, config(socks_in("in", "{port0}"), DIRECT_A, default="a")) == (
            "config reload: changed outbounds, route",
            "applied: 1 built, 4 reused, 0 swapped, 1 drained")
        for s in on_c:
            assert wait_closed(s, 2.0) is not None, "a flow on the removed outbound was not closed"
            assert drained_logged(proxy, s), proxy.log()
        for s in open_flows(stack, proxy, echo):
            assert_echoes(s, b"on a")


def test_close_after_ends_the_flows_after_the_grace(start_proxy, echo):
    def spec(family):
        return config(socks_in("in", "{port0}"),
                      outbound("a", "freedom", f'address_family = "{family}"', "drain_after = 1"))

    proxy = start_proxy(spec("auto"))
    with contextlib.ExitStack() as stack:
        old = open_flows(stack, proxy, echo)
        outcome, _ = reload(proxy, spec("ipv4_only"))
        reloaded = time.monotonic()
        assert outcome == "config reload: changed outbounds"
        for s in old:
            assert_echoes(s, b"inside the grace")
        new = open_flows(stack, proxy, echo)
        for s in old:
            left = reloaded + 3.0 - time.monotonic()
            assert wait_closed(s, max(left, 0.01)) is not None, "an old flow outlived its grace"
            since = time.monotonic() - reloaded
            assert since >= 0.5, f"closed {since:.2f} s after the reload"
            assert drained_logged(proxy, s), proxy.log()
        for s in new:
            assert_echoes(s, b"the new version is not drained")


def test_shutdown_ends_pending_grace_timers(start_proxy, echo):
    def spec(family):
        return config(socks_in("in", "{port0}"),
                      outbound("a", "freedom", f'address_family = "{family}"',
                               "drain_after = 3600"))

    proxy = start_proxy(spec("auto"))
    with flow(proxy, echo) as old:
        assert reload(proxy, spec("ipv4_only"))[0] == "config reload: changed outbounds"
        assert_echoes(old, b"an hour of grace left")
        rc, seconds = proxy.terminate(timeout=2.0)
        assert rc == 0, f"exit status {rc} after {seconds:.2f} s; log:\n{proxy.log()}"
        assert seconds < 2.0


# ---------------------------------------------------------------- a refused config


def _refused_changes_nothing(proxy, echo, bad, want_outcome, fresh_port):
    """Reloads the bad template, expects want_outcome, checks that nothing
    changed, then that a good config (the start's with default b) applies
    as a change of the route alone."""
    good = config(socks_in("in", "{port0}"), DIRECT_A, BLOCK_B, default="b")
    with flow(proxy, echo) as before:
        assert reload(proxy, bad) == (want_outcome, None)
        assert proxy.proc.poll() is None
        assert_echoes(before, b"after the refused reload")
        with flow(proxy, echo):  # the route is still a
            pass
        assert refused(fresh_port, timeout=0.2), "an inbound of the refused config listens"

        # compared with the running config, not the refused one: route only
        assert reload(proxy, good)[0] == "config reload: changed route"
        with socks_open(proxy.port, LOOPBACK, echo.port) as s:
            assert_blackholed(s)
        assert_echoes(before, b"after the good reload")


def test_a_refused_spec_changes_nothing_parse_error(start_proxy, run, echo, aux):
    proxy = start_proxy(config(socks_in("in", "{port0}"), DIRECT_A, BLOCK_B, default="a"))
    fresh = free_port()
    bad = config(socks_in("in", "{port0}"), socks_in("fresh", fresh), DIRECT_A, BLOCK_B,
                 default="nowhere")
    # the message is what --test prints after `configuration invalid: `
    checked = aux / "bad.toml"
    checked.write_text(render(proxy, bad))
    r = run("--test", "-c", str(checked))
    message = "route references unknown outbound tag: nowhere"
    assert (r.returncode, r.stderr) == (1, f"configuration invalid: {message}\n")
    _refused_changes_nothing(
        proxy, echo, bad, f"reload: parse failed, keeping current config: {message}", fresh)


@pytest.mark.parametrize("cause", ["port-in-use", "missing-certificate"])
def test_a_refused_spec_changes_nothing_build_error(start_proxy, run, echo, aux, cause):
    proxy = start_proxy(config(socks_in("in", "{port0}"), DIRECT_A, BLOCK_B, default="a"))
    blocker = socket.socket()
    try:
        if cause == "port-in-use":
            # another process's listener, played by this one
            blocker.bind((LOOPBACK, 0))
            blocker.listen(1)
            failing = socks_in("taken", blocker.getsockname()[1])
        else:
            missing = aux / "absent"
            failing = socks_in("secure", free_port(), '[inbound.stream]', 'network = "tls"',
                               '[inbound.stream.tls]', f'certificate = "{missing / "cert.pem"}"',
                               f'key = "{missing / "key.pem"}"')
        # the message is what a start with the failing inbound prints after
        # `failed to start: `
        alone = aux / "alone.toml"
        alone.write_text(render(proxy, config(failing, DIRECT_A)))
        message = assert_start_fails(run, alone)
        assert ("address already in use" if cause == "port-in-use"
                else "cannot read certificate") in message, message

        # fresh comes first, so a prepare that binds in order has bound it
        # when the failing inbound fails: it must be closed again
        fresh = free_port()
        bad = config(socks_in("in", "{port0}"), socks_in("fresh", fresh), failing, DIRECT_A,
                     BLOCK_B, default="b")
        _refused_changes_nothing(
            proxy, echo, bad, f"reload: build failed, keeping current config: {message}", fresh)
    finally:
        blocker.close()


# ---------------------------------------------------------------- inbounds


def test_an_established_connection_survives_an_apply_that_keeps_its_inbound(start_proxy, echo):
    """in keeps its address and changes (sniffing on: a swap on the same
    socket); gone is removed; added is new. No connection attempt to in is
    refused while the reload runs."""
    proxy = start_proxy(config(socks_in("in", "{port0}"), socks_in("gone", "{port1}"), DIRECT_A),
                        n_ports=2)
    added = free_port()
    after = config(socks_in("in", "{port0}", "sniffing = true"), socks_in("added", added),
                   DIRECT_A)
    with flow(proxy, echo) as kept:
        hammer = ConnectHammer(proxy.port)
        try:
            time.sleep(0.1)
            outcome, applied = reload(proxy, after)
            time.sleep(0.2)
        finally:
            hammer.stop()
        assert outcome == "config reload: changed inbounds"
        # a and the route, dns and log reused; in swapped; added built
        assert applied == "applied: 1 built, 4 reused, 1 swapped, 0 drained"
        assert (hammer.refusals, hammer.attempts > 20) == (0, True), vars(hammer)

        assert_echoes(kept, b"through the kept socket")
        with flow(proxy, echo):
            pass
        with flow(proxy, echo, port=added):
            pass
        assert refused(proxy.ports[1]), "the removed inbound still accepts"
        assert_echoes(kept, b"still there")



def tls_socks_open(port, echo):
    """A SOCKS5 CONNECT to the echo server inside TLS, checking no
    certificate (the test compares it itself); returns the TLS socket."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    t = ctx.wrap_socket(socket.create_connection((LOOPBACK, port), timeout=5),
                        server_hostname="localhost")
    try:
        socks5_greet(t)
        rep, _ = socks5_request(t, LOOPBACK, echo.port)
        assert rep == REP_OK, f"REP {rep:#x}"
        assert_echoes(t, b"first bytes")
    except BaseException:
        t.close()
        raise
    return t


def der(cert):
    return ssl.PEM_cert_to_DER_cert(cert.read_text())


@pytest.mark.parametrize("how", ["in-place", "rename"])
def test_a_changed_certificate_reaches_new_handshakes_only(start_proxy, echo, aux, how):
    """docs/reload.md "Files": the config names the same files, whose
    contents change from certificate A to B; SIGHUP swaps the inbound's
    config on the same socket. A new handshake presents B; a connection
    made on A goes on. in-place: both files rewritten (same inodes, new
    size and time); rename: new files renamed over them (new inodes)."""
    for d in ("a", "b", "live"):
        (aux / d).mkdir()
    cert_a, key_a = make_cert(aux / "a")
    cert_b, key_b = make_cert(aux / "b")
    assert der(cert_a) != der(cert_b)
    live = aux / "live"
    cert, key = live / "cert.pem", live / "key.pem"
    cert.write_bytes(cert_a.read_bytes())
    key.write_bytes(key_a.read_bytes())
    proxy = start_proxy(config(
        socks_in("in", "{port0}", "[inbound.stream]", 'network = "tls"', "[inbound.stream.tls]",
                 f'certificate = "{cert}"', f'key = "{key}"'),
        DIRECT_A))

    with tls_socks_open(proxy.port, echo) as old:
        assert old.getpeercert(binary_form=True) == der(cert_a)
        for new, source in ((cert, cert_b), (key, key_b)):
            if how == "in-place":
                inode = new.stat().st_ino
                new.write_bytes(source.read_bytes())
                assert new.stat().st_ino == inode
            else:
                tmp = new.with_name(new.name + ".new")
                tmp.write_bytes(source.read_bytes())
                os.replace(tmp, new)
        assert_echoes(old, b"the files changed, nothing reloaded yet")

        # the config text is the same: only the files changed
        assert sighup(proxy) == ("config reload: changed inbounds",
                                 "applied: 0 built, 4 reused, 1 swapped, 0 drained")
        with tls_socks_open(proxy.port, echo) as after:
            assert after.getpeercert(binary_form=True) == der(cert_b)
            assert_echoes(old, b"the old handshake's connection goes on")
            assert_echoes(after, b"and the new one")
        assert old.getpeercert(binary_form=True) == der(cert_a)

        # what the swap read is the new record: the same files again are no change
        assert sighup(proxy) == ("config reload: no changes", None)
        assert_echoes(old, b"still there")


# ---------------------------------------------------------------- balancers


@pytest.fixture
def members():
    """members(name) -> a balancerkit.MemberServer; all closed at teardown."""
    made = []

    def _make(name):
        made.append(MemberServer(name))
        return made[-1]

    yield _make
    for m in made:
        m.close()


def socks_member(tag, port):
    return outbound(tag, "socks", 'server = "127.0.0.1"', f"port = {port}")


def carriers(proxy, echo, servers, n=3):
    """n flows through proxy to the echo server, one after another; each must
    succeed. Returns the name of the MemberServer that carried each."""
    out = []
    for _ in range(n):
        before = [len(m.connects) for m in servers]
        rep = socks_flow(proxy.port, LOOPBACK, echo.port)
        assert rep == REP_OK, f"REP {rep:#x}; log:\n{proxy.log()}"
        out += [m.name for m, k in zip(servers, before) if len(m.connects) != k]
    return out


# prober.c's debug line for a probe of member dead of balancer up that timed out
PROBE_TIMED_OUT = "DEBUG balancer: balancer up: probe of dead: timed out"


def test_a_reload_leaves_every_balancers_health_as_it_was(start_proxy, echo, members):
    """A failover balancer over dead (silenced: a probe hangs until its
    1 s timeout) and live. Once dead is marked down, a reload that changes
    nothing, then one that changes the route alone, keep the balancer with
    its health: dead is never announced up or down again and no flow
    reaches it. A reload that changes the balancer itself starts it anew,
    members up, so its first probe announces dead down a second time: the
    line the first two reloads must not cause (issue 16, plan)."""
    dead, live = members("dead"), members("live")
    dead.silence()
    template = config(
        socks_in("in", "{port0}"), socks_member("dead", dead.port),
        socks_member("live", live.port), BLOCK_B,
        '[[balancer]]\ntag = "up"\noutbounds = ["dead", "live"]\nstrategy = "failover"\n'
        "probe_interval = {interval}\nprobe_timeout = 1\n\n",
        default="up") + "{rule}"
    proxy = start_proxy(template, extra={"interval": 1, "rule": ""})
    wait_state(proxy, "dead", "down", timeout=4)
    assert carriers(proxy, echo, [dead, live]) == ["live"] * 3

    assert sighup(proxy) == ("config reload: no changes", None)
    assert carriers(proxy, echo, [dead, live]) == ["live"] * 3

    # a rule for a port nothing here uses: the route is rebuilt, the rest kept
    proxy.extra["rule"] = '[[route.rule]]\noutbound = "b"\nport = 9\n'
    assert reload(proxy, template) == ("config reload: changed route",
                                       "applied: 1 built, 7 reused, 0 swapped, 0 drained")
    # the publish restarted the prober before the applied: line; its first
    # probe of dead, at once, times out after a second and finds it down
    probed = len(lines_with(proxy, PROBE_TIMED_OUT))
    assert carriers(proxy, echo, [dead, live]) == ["live"] * 3
    wait_line(proxy, PROBE_TIMED_OUT, count=probed + 1, timeout=3)
    assert carriers(proxy, echo, [dead, live]) == ["live"] * 3
    assert (state_lines(proxy, "dead", "up"), len(state_lines(proxy, "dead", "down"))) == ([], 1)
    assert state_lines(proxy, "live", "down") == []
    assert dead.connects == []

    proxy.extra["interval"] = 2
    assert reload(proxy, template)[0] == "config reload: changed balancers"
    wait_state(proxy, "dead", "down", count=2, timeout=3)
    assert carriers(proxy, echo, [dead, live]) == ["live"] * 3
    assert state_lines(proxy, "dead", "up") == []


def test_route_reloads_faster_than_the_probe_timeout_still_let_a_member_go_down(
        start_proxy, echo, members):
    """Issue 16: an unchanged balancer is reused with its probers. flaky
    stops answering (silenced: a probe of it times out after 2 s) while
    the route changes every 0.75 s or so; the probe under way when it went
    silent, or the next one a second later, still ends and marks it down
    within about 3 s, as it does with no reload at all."""
    flaky, live = members("flaky"), members("live")
    template = config(
        socks_in("in", "{port0}"), socks_member("flaky", flaky.port),
        socks_member("live", live.port), BLOCK_B,
        '[[balancer]]\ntag = "up"\noutbounds = ["flaky", "live"]\nstrategy = "failover"\n'
        "probe_interval = 1\nprobe_timeout = 2\n\n",
        default="up") + "{rule}"
    proxy = start_proxy(template, extra={"rule": ""})
    assert carriers(proxy, echo, [flaky, live]) == ["flaky"] * 3
    flaky.silence()
    silenced = time.monotonic()
    port = 9
    while time.monotonic() - silenced < 5 and not state_lines(proxy, "flaky", "down"):
        port = 19 - port  # 9, 10, 9, ...: each reload changes the route alone
        proxy.extra["rule"] = f'[[route.rule]]\noutbound = "b"\nport = {port}\n'
        assert reload(proxy, template)[0] == "config reload: changed route"
        time.sleep(0.5)
    assert state_lines(proxy, "flaky", "down"), (
        f"flaky not marked down {time.monotonic() - silenced:.1f} s after it went silent; "
        f"log:\n{proxy.log()}")


# ---------------------------------------------------------------- balancers and drains


def test_a_balanced_stream_is_closed_by_its_members_drain_not_the_balancers(start_proxy, echo):
    """Seed 002: a flow through a balancer belongs to the member outbound
    that carries it. Rebuilding the balancer leaves it open; a new version
    of the member, under drain = "close", closes it."""
    upstream = start_proxy(config(socks_in("up", "{port0}"), DIRECT_A))
    member = ('[[outbound]]\ntag = "m"\nprotocol = "socks"\nserver = "127.0.0.1"\n'
              f'port = {upstream.port}\n' + '{member_keys}\n\n')
    template = config(socks_in("in", "{port0}"), member,
                      '[[balancer]]\ntag = "pool"\noutbounds = ["m"]\n'
                      'probe_interval = {interval}\n\n', default="pool")
    proxy = start_proxy(template, extra={"member_keys": 'drain = "close"', "interval": 30})
    with flow(proxy, echo) as carried:
        proxy.extra["interval"] = 20
        outcome, _ = reload(proxy, template)
        assert outcome == "config reload: changed balancers"
        assert_echoes(carried, b"the balancer was rebuilt, its member was not")
        assert not drained_logged(proxy, carried, timeout=0.3)

        # the member itself changes: its old version ran under close
        proxy.extra["member_keys"] = 'drain = "close"\naddress_family = "ipv4_only"'
        outcome, _ = reload(proxy, template)
        assert outcome == "config reload: changed outbounds, balancers"
        assert wait_closed(carried, 2.0) is not None, "the member's drain did not close the flow"
        assert drained_logged(proxy, carried)
        with flow(proxy, echo):  # the new version of the member carries new flows
            pass


def test_a_drained_udp_sub_link_leaves_its_association_which_lives_on(start_proxy, udp_echo):
    """Seed 002: a close drain drops the sub-links opened on the old version
    from their association; the association goes on, and its next datagram
    opens a sub-link on the new version (a new socket toward the peer)."""
    template = config(socks_in("in", "{port0}"),
                      outbound("a", "freedom", 'drain = "close"', 'address_family = "{af}"'),
                      default="a")
    proxy = start_proxy(template, extra={"af": "auto"})
    with Association(proxy.port) as udp:
        udp.echo(udp_echo, b"on a@v1")
        first_source = udp_echo.received[-1][0]

        proxy.extra["af"] = "ipv4_only"
        outcome, applied = reload(proxy, template)
        assert outcome == "config reload: changed outbounds"
        assert applied == "applied: 1 built, 4 reused, 0 swapped, 1 drained"
        assert wait_lines(proxy, re.compile(
            r"^\S+ DEBUG \S+: udp fan-out: a sub-link ended: "
            r"the outbound this flow was opened on was drained$", re.M), 1), proxy.log()
        assert wait_lines(proxy, re.compile(r"outbound a@v1 drained: 1 flow\(s\) closed"), 1)

        udp.echo(udp_echo, b"on a@v2")  # the same association, a new sub-link
        assert udp_echo.received[-1][0] != first_source
