"""Balancers end to end: failover and round_robin over health-probed members,
rise/fall, retry, the early re-probes, the checks --test makes, and the
timing table of docs/balancer.md measured rather than computed.

Every balancer member here is a socks outbound. Its server is either a
second etemenanki-app (a socks inbound and a freedom outbound, run at debug
level) or a MemberServer, a SOCKS5 server of balancerkit that a test can
stop (connects refused), silence (SYNs dropped, connects hang) and start
again on the same port. How a test knows which member carried a flow is
explained at the top of balancerkit.py: each upstream counts the CONNECTs it
served, before it answers them, and probes never count.

The client under test logs "balancer member <tag> is now up|down" at info;
the tests read those lines and their millisecond timestamps to time the
prober. No test sends a flow while it times a probe, because a failed flow
asks for an early re-probe (tested on its own below).

Run alone, with the measured timings printed:

    ETM_APP=build/src/etemenanki-app /usr/bin/python3 -m pytest -s -q tests/e2e/test_balancer.py
"""
import collections
import pathlib
import random
import re
import time

import pytest

from balancerkit import (MemberServer, PinnedProxy, lines_with, pinned_port, socks_flow,
                         stamp, state_lines, wait_line, wait_state)
from proxykit import Proxy, stop_cleanly

ROOT = pathlib.Path(__file__).resolve().parents[2]

# Slack on every upper bound of a timing: the prober's timers are exact to a
# millisecond, but this host runs other test suites at the same time, and a
# log line can come a little late.
SLACK = 0.5


# ---------------------------------------------------------------- configs

def socks_member(tag, port):
    return (f'[[outbound]]\ntag = "{tag}"\nprotocol = "socks"\n'
            f'server = "127.0.0.1"\nport = {port}\n\n')


def balancer(tag, outbounds, **keys):
    text = f'[[balancer]]\ntag = "{tag}"\noutbounds = [' + ", ".join(f'"{o}"' for o in outbounds) + "]\n"
    for k, v in keys.items():
        text += f'{k} = "{v}"\n' if isinstance(v, str) else f"{k} = {v}\n"
    return text + "\n"


def client(members, *balancers, default="up", rules=()):
    """A client etemenanki-app: a socks inbound on {port0}, a socks outbound
    per (tag, port) member, the balancers, the default route, and for each
    (target, port) of rules a [[route.rule]] sending that port there."""
    text = ('[[inbound]]\ntag = "in"\nprotocol = "socks"\n'
            'listen = "127.0.0.1"\nport = {port0}\n\n')
    text += "".join(socks_member(tag, port) for tag, port in members)
    text += "".join(balancers)
    text += f'[route]\ndefault = "{default}"\n\n'
    for target, port in rules:
        text += f'[[route.rule]]\noutbound = "{target}"\nport = {port}\n\n'
    return text


# A second etemenanki-app: the upstream a member's socks outbound points at.
UPSTREAM = ('[[inbound]]\ntag = "in"\nprotocol = "socks"\nlisten = "127.0.0.1"\nport = {port0}\n\n'
            '[[outbound]]\ntag = "direct"\nprotocol = "freedom"\n')


# ---------------------------------------------------------------- fixtures

@pytest.fixture
def apps(app, tmp_path):
    """Starts etemenanki-app processes: apps.start(config) on fresh ports,
    apps.pinned(config, ports) on given ones. Every one still running at
    teardown must stop cleanly on SIGTERM (exit 0); only these are stopped."""
    class Apps:
        def __init__(self):
            self.started = []

        def start(self, text, n_ports=1, **kw):
            p = Proxy(app, tmp_path, text, n_ports, **kw)
            self.started.append(p)
            return p.start()

        def pinned(self, text, ports, **kw):
            p = PinnedProxy(app, tmp_path, text, ports, **kw)
            self.started.append(p)
            return p.start()

    a = Apps()
    yield a
    stop_cleanly(a.started, "etemenanki-app")


@pytest.fixture
def members():
    """members(name, ...) -> MemberServer; all closed at teardown."""
    made = []

    def _make(name, **kw):
        m = MemberServer(name, **kw)
        made.append(m)
        return m

    yield _make
    for m in made:
        m.close()


def carrier(proxy, echo, servers):
    """Sends one flow through proxy to the echo server; returns (REP, the
    name of the MemberServer that served it, or None)."""
    before = {m.name: len(m.connects) for m in servers}
    rep = socks_flow(proxy.port, "127.0.0.1", echo.port)
    moved = [m.name for m in servers if len(m.connects) != before[m.name]]
    assert len(moved) <= 1, moved
    return rep, (moved[0] if moved else None)


def carriers(proxy, echo, servers, n):
    """n flows, one after another; each must succeed. Returns who carried each."""
    out = []
    for _ in range(n):
        rep, who = carrier(proxy, echo, servers)
        assert rep == 0, f"REP {rep:#x}; log:\n{proxy.log()}"
        out.append(who)
    return out


# ---------------------------------------------------------------- 1, 2. failover between two etemenanki-app upstreams

def upstream_flows(upstream):
    """Flows an upstream etemenanki-app has routed (its debug route lines)."""
    return len(lines_with(upstream, "route: tcp flow to "))


def upstream_carrier(client_proxy, echo, ups):
    """One flow through client_proxy; returns the name (key of ups) of the
    upstream etemenanki-app that carried it. The flow must succeed."""
    before = {k: upstream_flows(u) for k, u in ups.items()}
    rep = socks_flow(client_proxy.port, "127.0.0.1", echo.port)
    assert rep == 0, f"REP {rep:#x}; log:\n{client_proxy.log()}"
    moved = [k for k, u in ups.items() if upstream_flows(u) != before[k]]
    assert len(moved) == 1, (moved, {k: u.log() for k, u in ups.items()})
    return moved[0]


def test_traffic_moves_off_a_member_that_stops_answering(apps, echo):
    port_a, port_b = pinned_port(), pinned_port()
    up_a = apps.pinned(UPSTREAM, [port_a], log_level="debug")
    up_b = apps.pinned(UPSTREAM, [port_b], log_level="debug")
    c = apps.start(client([("a", port_a), ("b", port_b)],
                          balancer("up", ["a", "b"], strategy="failover",
                                   probe_interval=1, probe_timeout=1)))
    ups = {"a": up_a, "b": up_b}
    assert [upstream_carrier(c, echo, ups) for _ in range(5)] == ["a"] * 5

    t0 = time.time()
    assert up_a.stop() == 0  # a's listener is gone: its port refuses
    delay = wait_state(c, "a", "down", timeout=4) - t0
    print(f"\nfailover 1/1: a stopped, marked down after {delay:.3f} s")
    assert delay <= 1 + SLACK, c.log()  # at the next probe: at most probe_interval

    assert [upstream_carrier(c, echo, ups) for _ in range(6)] == ["b"] * 6
    assert state_lines(c, "b", "down") == []


def test_traffic_comes_back_when_the_member_recovers(apps, echo):
    port_a, port_b = pinned_port(), pinned_port()
    up_b = apps.pinned(UPSTREAM, [port_b], log_level="debug")
    # a is not running yet: the first probe, at start, marks it down
    c = apps.start(client([("a", port_a), ("b", port_b)],
                          balancer("up", ["a", "b"], probe_interval=1, probe_timeout=1)))
    wait_state(c, "a", "down", timeout=3)
    ups = {"b": up_b}
    assert [upstream_carrier(c, echo, ups) for _ in range(3)] == ["b"] * 3

    up_a = apps.pinned(UPSTREAM, [port_a], log_level="debug")
    t0 = time.time()
    delay = wait_state(c, "a", "up", timeout=4) - t0
    print(f"\nfailover 1/1: a started, marked up after {delay:.3f} s")
    assert delay <= 1 + SLACK, c.log()

    ups["a"] = up_a
    assert [upstream_carrier(c, echo, ups) for _ in range(6)] == ["a"] * 6
    assert len(state_lines(c, "a", "up")) == 1


# ---------------------------------------------------------------- healthy until probed (issue 32)

def metric(text, name, member):
    for line in text.splitlines():
        if line.startswith(f'{name}{{balancer="up",member="{member}"}} '):
            return line.split(" ", 1)[1]
    raise AssertionError(f"no {name} for {member}:\n{text}")


def test_members_are_healthy_until_their_first_probe_ends(apps, members, echo):
    """Issue 32: "for about 2 s after a start, members count as down before
    any probe has run". Seeds 000 and 003: every member counts as healthy
    until its first probe ends, and the first probe runs at once. a's probe
    takes its whole probe_timeout (a silenced: SYNs dropped), b's ends at
    once (up). The first flow, sent right after the start while a's probe
    is still running, goes to a, not to b; the metrics and the API show a
    up and not yet probed. Once a's probe times out, a is down and flows
    go to b."""
    import urllib.request
    from proxykit import free_port
    a, b = members("a"), members("b")
    a.silence()
    api = free_port()
    c = apps.start(client([("a", a.port), ("b", b.port)],
                          balancer("up", ["a", "b"], probe_interval=30, probe_timeout=5))
                   + f'[api]\nlisten = "127.0.0.1:{api}"\n', log_level="debug")
    t0 = time.monotonic()

    def get(path):
        return urllib.request.urlopen(f"http://127.0.0.1:{api}{path}", timeout=5).read().decode()

    rep = None
    try:
        rep = socks_flow(c.port, "127.0.0.1", echo.port, timeout=1.0)
    except OSError:
        pass  # a's dial hangs like its probe: the client gives up first
    routed = wait_line(c, "route: tcp flow to ", timeout=3)
    m = get("/metrics")
    assert time.monotonic() - t0 < 5 - SLACK, "too slow to test before a's probe ended"
    # a's first probe has not ended, b's has (or is about to): the flow was
    # routed while a still counted as healthy
    assert metric(m, "etemenanki_balancer_member_probes_total", "a") == "0", m
    assert metric(m, "etemenanki_balancer_member_up", "a") == "1", m
    assert metric(m, "etemenanki_balancer_member_up", "b") == "1", m
    assert '"now":"a"' in get("/proxies/up")
    assert rep is None and b.connects == [], (rep, b.connects, c.log())
    assert state_lines(c, "a", "down") == [] and state_lines(c, "b", "down") == []
    assert "takes up@v1" in routed

    # a's first probe times out: a is down, and flows go to b
    wait_state(c, "a", "down", timeout=6 + SLACK)
    assert carriers(c, echo, [a, b], 2) == ["b", "b"]
    assert state_lines(c, "b", "down") == []


def test_a_member_a_reload_adds_is_healthy_until_probed(apps, members, echo):
    """Issue 32, the reload half: a reload that puts a new member first
    starts it healthy (seed 000 "Generations and reload": every member of a
    rebuilt balancer starts healthy and is probed at once), so the first
    flow after the reload goes to it even while its first probe runs."""
    import signal
    a, b = members("a"), members("b")
    template = client([("a", a.port), ("b", b.port)],
                      balancer("up", ["{first}"], probe_interval=30, probe_timeout=5))
    c = apps.start(template, extra={"first": "b"}, log_level="debug")
    assert carriers(c, echo, [a, b], 1) == ["b"]
    a.silence()
    text = c.cfg_path.read_text().replace('outbounds = ["b"]', 'outbounds = ["a", "b"]')
    assert text != c.cfg_path.read_text()
    c.cfg_path.write_text(text)
    c.proc.send_signal(signal.SIGHUP)  # the save reloads too: whichever comes first
    # "config reload: ..." is written before the new plane is committed;
    # the debug "applied: ..." line after it, and after the new probes started
    wait_line(c, "supervisor: applied: ", timeout=5)
    t0 = time.monotonic()
    before = len(b.connects)
    try:
        socks_flow(c.port, "127.0.0.1", echo.port, timeout=1.0)
        went = "somewhere"
    except OSError:
        went = None  # to a: its dial hangs
    assert time.monotonic() - t0 < 5 - SLACK
    assert went is None and len(b.connects) == before, c.log()
    assert state_lines(c, "a", "down") == []
    wait_state(c, "a", "down", timeout=6 + SLACK)
    assert carriers(c, echo, [a, b], 1) == ["b"]


# ---------------------------------------------------------------- early re-probes (issue 6, items 3 and 4)

def test_a_failed_dial_re_probes_its_member_at_once(apps, members, echo):
    a, b = members("a"), members("b")
    c = apps.start(client([("a", a.port), ("b", b.port)],
                          balancer("up", ["a", "b"], probe_interval=30, probe_timeout=1)))
    assert carriers(c, echo, [a, b], 2) == ["a", "a"]
    a.stop()
    # retry = 0: the flow that finds a dead fails, and asks for a re-probe of a
    rep, who = carrier(c, echo, [a, b])
    t_fail = time.time()
    assert rep != 0 and who is None
    delay = wait_state(c, "a", "down", timeout=3) - t_fail
    print(f"\na failed dial: a marked down {delay:.3f} s later (probe_interval is 30 s)")
    assert delay < 1.0
    assert carriers(c, echo, [a, b], 3) == ["b"] * 3


def test_every_member_down_goes_to_the_first_and_a_recovered_one_takes_over(apps, members, echo):
    a, b = members("a"), members("b")
    a.stop()
    b.stop()
    # probe_interval = 30: only the first probes (at start) and the early
    # re-probes run during this test
    c = apps.start(client([("a", a.port), ("b", b.port)],
                          balancer("up", ["a", "b"], probe_interval=30, probe_timeout=1)),
                   log_level="debug")
    wait_state(c, "a", "down", timeout=3)
    wait_state(c, "b", "down", timeout=3)

    # every member down: each flow is sent to the first member, a, and fails
    for i in range(3):
        rep, _ = carrier(c, echo, [a, b])
        assert rep != 0
    refused_a = f"ended: failed to connect to any address (127.0.0.1:{a.port}: connection refused)"
    refused_b = f"(127.0.0.1:{b.port}: connection refused)"
    assert len(lines_with(c, refused_a)) == 3, c.log()
    assert not [l for l in lines_with(c, refused_b) if "inbound:" in l], c.log()

    # b comes back. No probe of b is due for 30 s, but a flow that finds
    # every member down asks for every member to be re-probed (at most once
    # a second), so b is found well before that.
    t0 = b.start()
    deadline = t0 + 5
    while not state_lines(c, "b", "up"):
        assert time.time() < deadline, c.log()
        rep, _ = carrier(c, echo, [a, b])
        if rep != 0:
            time.sleep(0.1)
    delay = stamp(state_lines(c, "b", "up")[0]) - t0
    print(f"\nevery member down: b restarted, marked up after {delay:.3f} s (probe_interval 30 s)")
    assert delay < 2.5
    assert carriers(c, echo, [a, b], 4) == ["b"] * 4


# ---------------------------------------------------------------- a balancer nothing routes to

def test_a_balancer_nothing_routes_to_is_probed_too(apps, members):
    used, dead = members("used"), members("dead")
    dead.stop()
    c = apps.start(client([("used", used.port), ("dead", dead.port)],
                          balancer("up", ["used"], probe_interval=1, probe_timeout=1),
                          balancer("spare", ["dead"], probe_interval=1, probe_timeout=1)),
                   log_level="debug")
    # the first probe runs at start and is refused at once
    wait_state(c, "dead", "down", timeout=1.5)


# ---------------------------------------------------------------- 3. round_robin

def test_round_robin_spreads_flows_evenly_and_skips_a_member_that_is_down(apps, members, echo):
    a, b, cc = members("a"), members("b"), members("c")
    c = apps.start(client([("a", a.port), ("b", b.port), ("c", cc.port)],
                          balancer("up", ["a", "b", "c"], strategy="round_robin",
                                   probe_interval=1, probe_timeout=1)))
    got = carriers(c, echo, [a, b, cc], 30)
    assert collections.Counter(got) == {"a": 10, "b": 10, "c": 10}, got
    for i in range(0, 30, 3):  # one shared counter: every three flows see each member once
        assert sorted(got[i:i + 3]) == ["a", "b", "c"], got

    b.stop()
    wait_state(c, "b", "down", timeout=3)
    got = carriers(c, echo, [a, b, cc], 30)
    assert collections.Counter(got) == {"a": 15, "c": 15}, got
    assert all(x != y for x, y in zip(got, got[1:])), got  # a, c, a, c, ...


# ---------------------------------------------------------------- 4. what --test refuses

SEED_REFUSAL = ("configuration invalid: balancer upstream: outbound direct has no upstream a TCP "
                "health probe can reach, so it cannot be balanced\n")


def refused_config(member_block, member_tag, extra_keys=""):
    return ('[[inbound]]\ntag = "socks-in"\nprotocol = "socks"\nlisten = "127.0.0.1"\nport = 1080\n\n'
            + socks_member("primary", 1081) + member_block
            + f'[[balancer]]\ntag = "upstream"\noutbounds = ["primary", "{member_tag}"]\n'
            + extra_keys + '\n[route]\ndefault = "upstream"\n')


def test_a_freedom_member_is_refused_with_the_seeds_message(run, tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text(refused_config('[[outbound]]\ntag = "direct"\nprotocol = "freedom"\n\n', "direct"))
    r = run("--test", "-c", str(cfg))
    assert (r.returncode, r.stdout, r.stderr) == (1, "", SEED_REFUSAL)
    r = run("-c", str(cfg))
    assert r.returncode == 78  # EX_CONFIG: a start refuses the file (docs/cli.md)
    assert r.stderr.endswith("failed to start: " + SEED_REFUSAL[len("configuration invalid: "):])


@pytest.mark.parametrize("block,tag", [
    ('[[outbound]]\ntag = "direct"\nprotocol = "direct"\n\n', "direct"),
    ('[[outbound]]\ntag = "sink"\nprotocol = "blackhole"\n\n', "sink"),
    ('[[outbound]]\ntag = "sink"\nprotocol = "block"\n\n', "sink"),
    ('[[outbound]]\ntag = "hy"\nprotocol = "hysteria2"\nserver = "127.0.0.1"\nport = 443\n\n'
     '[outbound.settings]\npassword = "x"\n\n', "hy"),
    ('[[outbound]]\ntag = "hy"\nprotocol = "hy2"\nserver = "127.0.0.1"\nport = 443\n\n'
     '[outbound.settings]\npassword = "x"\n\n', "hy"),
], ids=["direct", "blackhole", "block", "hysteria2", "hy2"])
def test_other_unprobeable_members_are_refused(run, tmp_path, block, tag):
    cfg = tmp_path / "config.toml"
    cfg.write_text(refused_config(block, tag))
    r = run("--test", "-c", str(cfg))
    assert (r.returncode, r.stderr) == (1, f"configuration invalid: balancer upstream: outbound "
                                           f"{tag} has no upstream a TCP health probe can reach, "
                                           "so it cannot be balanced\n")


@pytest.mark.parametrize("keys,message", [
    ("rise = 0\n", "balancer upstream: rise must be 1 to 100"),
    ("rise = 101\n", "balancer upstream: rise must be 1 to 100"),
    ("fall = 0\n", "balancer upstream: fall must be 1 to 100"),
    ("fall = 101\n", "balancer upstream: fall must be 1 to 100"),
    ("retry = 9\n", "balancer upstream: retry must be 0 to 8"),
    ("rise = 100\nfall = 100\nretry = 8\n", None),
    ("rise = 1\nfall = 1\nretry = 0\nprobe_interval = 0\nprobe_timeout = 0\n", None),
], ids=["rise 0", "rise 101", "fall 0", "fall 101", "retry 9", "the maxima", "the minima"])
def test_rise_fall_and_retry_ranges(run, tmp_path, keys, message):
    cfg = tmp_path / "config.toml"
    cfg.write_text(refused_config(socks_member("second", 1082), "second", keys))
    r = run("--test", "-c", str(cfg))
    if message is None:
        assert (r.returncode, r.stdout, r.stderr) == (0, "Configuration OK.\n", "")
    else:
        assert (r.returncode, r.stderr) == (1, f"configuration invalid: {message}\n")


def test_test_refuses_a_balancer_a_start_refuses(run, tmp_path):
    cfg = tmp_path / "config.toml"
    text = refused_config(socks_member("second", 1082), "second")
    text = text.replace('outbounds = ["primary", "second"]',
                        "outbounds = [" + ", ".join(['"primary"'] * 1025) + "]")
    cfg.write_text(text)
    r = run("--test", "-c", str(cfg))
    assert (r.returncode, r.stderr) == (
        1, "configuration invalid: balancer upstream: a balancer has at most 1024 outbounds\n")


def doc_configs():
    """The complete configs in docs/balancer.md: indented blocks with both an
    [[inbound]] and a [[balancer]]."""
    text = (ROOT / "docs" / "balancer.md").read_text()
    blocks, cur = [], []
    for line in text.split("\n") + [""]:
        if line.startswith("    ") or (cur and line == ""):
            cur.append(line[4:])
            continue
        if cur:
            blocks.append("\n".join(cur).strip() + "\n")
            cur = []
    return [b for b in blocks if "[[inbound]]" in b and "[[balancer]]" in b]


def test_the_configs_in_the_balancer_page_pass_test(run, tmp_path):
    configs = doc_configs()
    assert len(configs) >= 2
    assert any('strategy = "failover"' in c for c in configs)
    assert any('strategy = "round_robin"' in c for c in configs)
    for i, text in enumerate(configs):
        cfg = tmp_path / f"doc-{i}.toml"
        cfg.write_text(text)
        r = run("--test", "-c", str(cfg))
        assert (r.returncode, r.stdout, r.stderr) == (0, "Configuration OK.\n", ""), text


# ---------------------------------------------------------------- 5. retry

@pytest.mark.parametrize("retry", [1, 0])
@pytest.mark.parametrize("first", ["closed port", "socks refusal"])
def test_retry_takes_the_next_member_when_the_first_refuses(apps, members, echo, first, retry):
    if first == "closed port":
        # nothing listens on a's port: the probe fails too, so fall = 100
        # keeps a "up" for the whole test, as a member that died since its
        # last probe is
        a = members("a")
        a.stop()
    else:
        # a SOCKS server that accepts TCP (probes pass) but answers every
        # CONNECT with REP 5
        a = members("a", mode="refuse")
    b = members("b")
    c = apps.start(client([("a", a.port), ("b", b.port)],
                          balancer("up", ["a", "b"], probe_interval=30, probe_timeout=1,
                                   fall=100, retry=retry)),
                   log_level="debug")
    reps = [socks_flow(c.port, "127.0.0.1", echo.port) for _ in range(4)]
    tried = lines_with(c, "balancer: balancer up: member a failed (")
    if retry:
        assert reps == [0] * 4, c.log()  # the client never sees a's failure
        assert len(b.connects) == 4
        assert len(tried) == 4 and all(l.endswith("; trying b") for l in tried), c.log()
    else:
        assert all(rep != 0 for rep in reps), reps
        assert b.connects == [] and tried == []
    if first == "socks refusal":
        assert len(a.connects) == 4  # every flow went to a first
    else:
        assert len(lines_with(c, f"(127.0.0.1:{a.port}: connection refused)")) >= 4
    assert state_lines(c, "a", "down") == []


def test_retry_skips_other_copies_of_the_member_that_failed(apps, members, echo):
    a, b = members("a", mode="refuse"), members("b")
    c = apps.start(client([("a", a.port), ("b", b.port)],
                          balancer("up", ["a", "a", "b"], probe_interval=30, retry=1)),
                   log_level="debug")
    reps = [socks_flow(c.port, "127.0.0.1", echo.port) for _ in range(3)]
    assert reps == [0] * 3, c.log()
    assert len(b.connects) == 3


# ---------------------------------------------------------------- 6. one line per change

def test_the_down_and_up_lines_come_once_per_change(apps, members, echo):
    a, b = members("a"), members("b")
    c = apps.start(client([("a", a.port), ("b", b.port)],
                          balancer("up", ["a", "b"], probe_interval=1, probe_timeout=1)),
                   log_level="debug")
    time.sleep(0.2)
    a.stop()
    wait_state(c, "a", "down", timeout=3)
    # a stays down for three more probes; each failed probe has a debug line
    failed = "balancer: balancer up: probe of a: failed to connect to any address"
    wait_line(c, failed, count=4, timeout=5 + SLACK)
    assert len(state_lines(c, "a", "down")) == 1, c.log()

    a.start()
    up = wait_state(c, "a", "up", timeout=3)
    time.sleep(2.3)  # two more (successful) probes
    assert len(state_lines(c, "a", "up")) == 1, c.log()
    assert len(state_lines(c, "a", "down")) == 1, c.log()
    assert [l for l in lines_with(c, "balancer member ") if "member a " not in l] == []
    assert all(stamp(l) < up for l in lines_with(c, failed))
    assert carriers(c, echo, [a, b], 2) == ["a", "a"]


def test_the_down_and_up_lines_name_the_balancer_and_the_reason(apps, members):
    """Issue 32: "balancer member hop-a is now down" said neither which
    balancer nor why. The line keeps seed 003's words as its start and
    adds both, at the default level; the up line names the balancer too."""
    hop = members("hop-a")
    c = apps.start(client([("hop-a", hop.port)],
                          balancer("edge", ["hop-a"], probe_interval=1, probe_timeout=1),
                          default="edge"))
    time.sleep(0.2)
    hop.stop()
    down = wait_line(c, "balancer member hop-a is now down", timeout=3 + SLACK)
    assert down.split(" ", 1)[1] == (
        "INFO  balancer: balancer member hop-a is now down (balancer edge: probe: failed to "
        f"connect to any address (127.0.0.1:{hop.port}: connection refused))"), c.log()
    hop.start()
    up = wait_line(c, "balancer member hop-a is now up", timeout=3 + SLACK)
    assert up.split(" ", 1)[1] == "INFO  balancer: balancer member hop-a is now up (balancer edge)"
    hop.silence()
    down = wait_line(c, "balancer member hop-a is now down", count=2, timeout=4 + SLACK)
    assert down.split(" ", 1)[1] == (
        "INFO  balancer: balancer member hop-a is now down (balancer edge: probe: timed out)")


# ---------------------------------------------------------------- 7. rise and fall

def test_fall_and_rise_need_consecutive_probes(apps, members):
    a, b = members("a"), members("b")
    c = apps.start(client([("a", a.port), ("b", b.port)],
                          balancer("up", ["a", "b"], probe_interval=1, probe_timeout=1,
                                   rise=2, fall=3)),
                   log_level="debug")
    failed = "balancer: balancer up: probe of a: "
    time.sleep(0.3)

    # one failed probe in between good ones flips nothing
    a.stop()
    wait_line(c, failed, count=1, timeout=2 + SLACK)
    a.start()
    time.sleep(2.2)
    assert state_lines(c, "a", "down") == [], c.log()

    # fall = 3: three failed probes in a row, one probe_interval apart
    t0 = a.stop()
    down = wait_state(c, "a", "down", timeout=4 + SLACK)
    fails = [stamp(l) for l in lines_with(c, failed) if t0 <= stamp(l) + 0.002]
    print(f"\nfall = 3, probe_interval = 1: a stopped, marked down after {down - t0:.3f} s "
          f"(failed probes at {', '.join(f'{f - t0:.3f}' for f in fails)} s)")
    assert len(fails) == 3 and fails[-1] <= down, c.log()
    assert 2 - 0.1 <= down - t0 <= 3 + SLACK

    # rise = 2: two good probes in a row
    t1 = a.start()
    up = wait_state(c, "a", "up", timeout=3 + SLACK)
    print(f"rise = 2, probe_interval = 1: a started, marked up after {up - t1:.3f} s")
    assert 1 - 0.1 <= up - t1 <= 2 + SLACK
    assert len(state_lines(c, "a", "down")) == 1 and len(state_lines(c, "a", "up")) == 1


# ---------------------------------------------------------------- 9. the timing table, measured

# (probe_interval, probe_timeout) profiles, each its own balancer with two
# single-purpose members: one whose server stops (its probes are refused)
# and one whose server goes silent (its probes time out). All of them change
# at once, so the rounds cost the slowest profile's time, not the sum.
PROFILES = [(1, 1), (2, 1), (1, 2)]
ROUNDS = 3


def test_the_timing_table_measured(apps, members):
    servers, bals = {}, []
    for interval, timeout in PROFILES:
        p = f"{interval}_{timeout}"
        for kind in ("refused", "silent"):
            servers[f"{kind}{p}"] = members(f"{kind}{p}")
        bals.append(balancer(f"p{p}", [f"refused{p}", f"silent{p}"],
                             probe_interval=interval, probe_timeout=timeout))
    # Only a balancer something routes to is probed (see
    # test_a_balancer_nothing_routes_to_is_probed_too): one rule each.
    tags = [f"p{i}_{t}" for i, t in PROFILES]
    c = apps.start(client([(tag, m.port) for tag, m in servers.items()], *bals,
                          default=tags[0], rules=[(t, 9 + k) for k, t in enumerate(tags)]))
    measured = collections.defaultdict(list)  # (tag, "down"|"up") -> seconds

    for rnd in range(1, ROUNDS + 1):
        time.sleep(random.uniform(0, 1))  # a different phase against the probe timers
        changed = {}
        for tag, m in servers.items():
            changed[tag] = m.stop() if tag.startswith("refused") else m.silence()
        for tag in servers:
            measured[tag, "down"].append(wait_state(c, tag, "down", count=rnd, timeout=5 + SLACK)
                                         - changed[tag])
        for tag, m in servers.items():
            changed[tag] = m.start()
        for tag in servers:
            measured[tag, "up"].append(wait_state(c, tag, "up", count=rnd, timeout=5 + SLACK)
                                       - changed[tag])

    print(f"\nmeasured on 127.0.0.1, {ROUNDS} rounds (seconds: min / max)")
    print("interval timeout | refused: down   up        | silent: down   up")
    for interval, timeout in PROFILES:
        p = f"{interval}_{timeout}"
        r, s = f"refused{p}", f"silent{p}"
        row = [f"{min(measured[t, k]):.2f}/{max(measured[t, k]):.2f}"
               for t, k in ((r, "down"), (r, "up"), (s, "down"), (s, "up"))]
        print(f"{interval:8} {timeout:7} | {row[0]:>12} {row[1]:>10} | {row[2]:>12} {row[3]:>10}")

    for interval, timeout in PROFILES:
        p = f"{interval}_{timeout}"
        # refused: noticed by the next probe, at most probe_interval later
        for d in measured[f"refused{p}", "down"]:
            assert -0.01 <= d <= interval + SLACK, (p, measured)
        for d in measured[f"refused{p}", "up"]:
            assert d <= interval + SLACK, (p, measured)
        # silent: the next probe, then its whole timeout
        for d in measured[f"silent{p}", "down"]:
            assert timeout - 0.1 <= d <= interval + timeout + SLACK, (p, measured)
        # back from silent: the probe in flight still times out, then the next one connects
        for d in measured[f"silent{p}", "up"]:
            assert d <= interval + timeout + SLACK, (p, measured)
    # nothing flapped: one down and one up line per member per round
    for tag in servers:
        assert len(state_lines(c, tag, "down")) == ROUNDS
        assert len(state_lines(c, tag, "up")) == ROUNDS


# ---------------------------------------------------------------- a member that fails inside its connect

def ws_member_with_a_bad_path(tag, port):
    """A trojan-over-WebSocket member whose path holds a space: --test and
    the TCP probe pass it, and every connect fails at once, inside the call
    (the WebSocket layer refuses the path)."""
    return (f'[[outbound]]\ntag = "{tag}"\nprotocol = "trojan"\nserver = "127.0.0.1"\n'
            f'port = {port}\n[outbound.settings]\npassword = "pw"\n'
            '[outbound.stream]\nnetwork = "ws"\n[outbound.stream.ws]\npath = "/a b"\n\n')


@pytest.mark.parametrize("with_good", [False, True], ids=["alone", "then-a-good-one"])
def test_a_member_failing_inside_its_connect(apps, members, echo, with_good):
    """Before the fix the balancer's dial was read after it was freed when
    the last member failed inside the call, and a pending retry's handle was
    lost, so a cancel at SIGTERM freed a dial still in use (both aborted
    under ASan). Now the flow fails cleanly, or retries onto the good
    member, and the process stops with exit 0."""
    bad = members("bad")
    good = members("good")
    text = ('[[inbound]]\ntag = "in"\nprotocol = "socks"\nlisten = "127.0.0.1"\nport = {port0}\n\n'
            + ws_member_with_a_bad_path("bad", bad.port))
    names = ["bad"]
    if with_good:
        text += socks_member("good", good.port)
        names.append("good")
    text += balancer("up", names, probe_interval=30, probe_timeout=1, retry=1)
    text += '[route]\ndefault = "up"\n\n'
    c = apps.start(text, log_level="debug")
    reps = [socks_flow(c.port, "127.0.0.1", echo.port) for _ in range(4)]
    if with_good:
        assert reps == [0] * 4, c.log()
        assert len(good.connects) == 4
    else:
        assert all(rep != 0 for rep in reps), reps
    assert c.proc.poll() is None, c.log()
    assert 'ws: bad path "/a b"' in c.log(), c.log()
