"""Running under systemd (docs/install.md): sd_notify states on a datagram
socket the test binds as NOTIFY_SOCKET, socket activation with a listening
socket passed as fd 3 with LISTEN_FDS and LISTEN_PID, and the unit file
through `systemd-analyze verify`."""
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import time

import pytest

from proxykit import LOOPBACK, Proxy, free_port, stop_process

ROOT = pathlib.Path(__file__).resolve().parents[2]

CONFIG = """
[log]
level = "info"

[runtime]
workers = 2

[[inbound]]
tag = "a"
protocol = "mixed"
listen = "127.0.0.1"
port = {port0}

[[inbound]]
tag = "b"
protocol = "socks"
listen = "127.0.0.1"
port = {port1}

[[outbound]]
tag = "direct"
protocol = "freedom"
"""


@pytest.fixture
def with_libsystemd(run):
    if "no libsystemd" in run("--version").stdout:
        pytest.skip("built without libsystemd: sd_notify and socket activation are no-ops")


@pytest.fixture
def notify_socket(tmp_path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(str(tmp_path / "notify"))
    s.settimeout(10)
    yield s
    s.close()


def states(sock):
    """The next message as {field: value}."""
    text = sock.recv(4096).decode()
    return dict(line.split("=", 1) for line in text.splitlines() if line)


def accepts(port):
    try:
        with socket.create_connection((LOOPBACK, port), timeout=1) as c:
            c.sendall(b"\x05\x01\x00")
            return c.recv(2) == b"\x05\x00"
    except OSError:
        return False


def test_notify_ready_reloading_stopping(app, tmp_path, notify_socket, with_libsystemd):
    ports = [free_port(), free_port()]
    cfg = tmp_path / "service.toml"
    cfg.write_text(CONFIG.format(port0=ports[0], port1=ports[1]))
    log = open(tmp_path / "service.log", "wb")
    env = dict(os.environ, NOTIFY_SOCKET=str(tmp_path / "notify"))
    proc = subprocess.Popen([app, "-c", str(cfg)], stdin=subprocess.DEVNULL, stdout=log,
                            stderr=subprocess.STDOUT, env=env)
    owner = type("Owner", (), {"proc": proc, "_log": log})()
    try:
        # READY=1 comes once every inbound listens on every worker: both
        # ports serve the moment it arrives, without a retry
        assert states(notify_socket) == {"READY": "1"}
        assert all(accepts(p) for p in ports)

        before = time.monotonic_ns() // 1000
        proc.send_signal(signal.SIGHUP)
        msg = states(notify_socket)
        after = time.monotonic_ns() // 1000
        assert set(msg) == {"RELOADING", "MONOTONIC_USEC"} and msg["RELOADING"] == "1"
        assert before <= int(msg["MONOTONIC_USEC"]) <= after  # CLOCK_MONOTONIC in µs
        assert states(notify_socket) == {"READY": "1"}

        # a reload that fails is over too: READY=1 follows, the old config runs on
        cfg.write_text("[[inbound]\n")
        msg = states(notify_socket)
        assert msg["RELOADING"] == "1"
        assert states(notify_socket) == {"READY": "1"}
        assert "reload: parse failed, keeping current config: " in (tmp_path / "service.log").read_text()
        assert all(accepts(p) for p in ports)

        proc.send_signal(signal.SIGTERM)
        assert states(notify_socket) == {"STOPPING": "1"}
        assert proc.wait(5) == 0
    finally:
        stop_process(owner)


def test_notify_socket_missing_is_logged(start_proxy, tmp_path, with_libsystemd):
    p = start_proxy(CONFIG, n_ports=2, env={"NOTIFY_SOCKET": str(tmp_path / "absent")})
    assert ("WARN  app: systemd notify: READY=1 not sent: No such file or directory"
            in p.log())
    assert accepts(p.ports[0])


def maps_libsystemd(pid):
    return "libsystemd.so" in pathlib.Path(f"/proc/{pid}/maps").read_text()


def test_libsystemd_loaded_only_under_a_manager(start_proxy, tmp_path, notify_socket,
                                                with_libsystemd):
    # an ordinary start does not map it (nor libgcrypt, liblz4, ... behind it)
    plain = start_proxy(CONFIG, n_ports=2)
    assert not maps_libsystemd(plain.proc.pid)
    managed = start_proxy(CONFIG, n_ports=2, env={"NOTIFY_SOCKET": str(tmp_path / "notify")})
    assert states(notify_socket) == {"READY": "1"}
    assert maps_libsystemd(managed.proc.pid)


def test_libsystemd_that_cannot_load_is_logged(start_proxy, tmp_path, with_libsystemd):
    # an empty file found first on LD_LIBRARY_PATH: dlopen fails, the
    # process serves on without the manager's messages
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "libsystemd.so.0").write_bytes(b"")
    p = start_proxy(CONFIG, n_ports=2, env={"NOTIFY_SOCKET": str(tmp_path / "absent"),
                                            "LD_LIBRARY_PATH": str(lib)})
    assert (f"WARN  app: systemd: cannot load libsystemd.so.0: {lib}/libsystemd.so.0: "
            "file too short" in p.log())
    # tried once, not once a message: a reload sends two more
    p.proc.send_signal(signal.SIGHUP)
    wait_log(p.log_path, "config reload: no changes", p.proc)
    assert p.log().count("cannot load") == 1, p.log()
    assert accepts(p.ports[0])


# sh sets LISTEN_PID to its own pid, which exec hands to the app, as
# systemd does; the socket is already fd 3 (preexec_fn).
ACTIVATE = 'LISTEN_PID=$$ LISTEN_FDS=1 exec "$0" "$@"'


def start_activated(app, tmp_path, config, sock, listen_pid=None, env=None):
    script = ACTIVATE if listen_pid is None else f"LISTEN_PID={listen_pid} LISTEN_FDS=1 exec \"$0\" \"$@\""
    cfg = tmp_path / "activated.toml"
    cfg.write_text(config)
    log = open(tmp_path / "activated.log", "wb")
    def to_fd3():
        os.dup2(sock.fileno(), 3)
        os.set_inheritable(3, True)  # also when the socket was fd 3 already
    # not pass_fds=(3,): that needs a descriptor 3 in this process; the
    # test's own descriptors are not inheritable (PEP 446), so none leaks
    proc = subprocess.Popen(["/bin/sh", "-c", script, app, "-c", str(cfg)],
                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            close_fds=False, preexec_fn=to_fd3, env=env)
    return type("Owner", (), {"proc": proc, "_log": log})()


def wait_log(path, text, proc, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        log = path.read_text(errors="replace")
        if text in log or proc.poll() is not None:
            return log
        time.sleep(0.02)
    return path.read_text(errors="replace")


def test_socket_activation(app, tmp_path, with_libsystemd):
    # The passed socket has no SO_REUSEPORT: a bind of the app's own on its
    # address would fail with "address already in use", so a start that
    # serves there serves on the passed socket.
    passed = socket.socket()
    passed.bind((LOOPBACK, 0))
    passed.listen(16)
    port, other = passed.getsockname()[1], free_port()
    owner = start_activated(app, tmp_path, CONFIG.format(port0=port, port1=other), passed)
    try:
        log = wait_log(tmp_path / "activated.log", f"listening on 127.0.0.1:{other} (b", owner.proc)
        assert "INFO  app: socket activation: sockets passed: 1" in log, log
        assert f"listening on 127.0.0.1:{port} (a, 2 workers)" in log, log
        assert accepts(port) and accepts(other)
        # a reload keeps it: SIGHUP with the file unchanged
        owner.proc.send_signal(signal.SIGHUP)
        wait_log(tmp_path / "activated.log", "config reload: no changes", owner.proc)
        assert accepts(port)
        owner.proc.send_signal(signal.SIGTERM)
        assert owner.proc.wait(5) == 0
    finally:
        stop_process(owner)
        passed.close()


def test_socket_activation_for_another_pid_is_ignored(app, tmp_path, with_libsystemd):
    passed = socket.socket()
    passed.bind((LOOPBACK, 0))
    passed.listen(16)
    port = passed.getsockname()[1]
    owner = start_activated(app, tmp_path, CONFIG.format(port0=port, port1=free_port()), passed,
                            listen_pid=1)
    try:
        assert owner.proc.wait(10) == 1
        log = (tmp_path / "activated.log").read_text()
        assert f"failed to start: failed to listen on 127.0.0.1:{port}: address already in use" in log
        assert "socket activation" not in log
    finally:
        stop_process(owner)
        passed.close()


def verify_unit(tmp_path, source, name):
    """`systemd-analyze verify` of dist/<source> as installed (ExecStart's
    path substituted) under the unit name name; skipped only where the
    tool is absent. Returns the unit's text."""
    tool = shutil.which("systemd-analyze")
    if not tool:
        pytest.skip("systemd-analyze is not installed (Debian: the systemd package)")
    app = tmp_path / "bin" / "etemenanki-app"
    if not app.exists():
        app.parent.mkdir()
        shutil.copy(os.environ["ETM_APP"], app)
    unit = (ROOT / "dist" / source).read_text()
    unit = unit.replace("@bindir@", str(app.parent)).replace("@sysconfdir@", "/etc")
    (tmp_path / source.removesuffix(".in")).write_text(unit)
    # verify runs `man` on Documentation=: the page, as installed
    man = tmp_path / "man" / "man1"
    man.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "docs" / "man" / "etemenanki-app.1", man)
    env = dict(os.environ, MANPATH=str(man.parent))
    r = subprocess.run([tool, "verify", str(tmp_path / name)], capture_output=True, text=True,
                       timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stderr == "", r.stderr
    return unit


def test_unit_verifies(tmp_path):
    """The unit as installed (ExecStart's path substituted) passes
    `systemd-analyze verify`; skipped only where the tool is absent."""
    verify_unit(tmp_path, "etemenanki.service.in", "etemenanki.service")


def test_i32_template_unit_verifies_and_runs_its_instances_file(tmp_path):
    """Issue 32 item 4: etemenanki@NAME.service (dist/etemenanki@.service.in)
    verifies as an instance and runs /etc/etemenanki/NAME.toml, with its own
    log folder; otherwise it is etemenanki.service."""
    unit = verify_unit(tmp_path, "etemenanki@.service.in", "etemenanki@edge.service")
    assert re.search(r"^ExecStart=\S+/etemenanki-app -c /etc/etemenanki/%i\.toml$", unit, re.M)
    assert re.search(r"^LogsDirectory=etemenanki/%i$", unit, re.M)
    plain = (ROOT / "dist" / "etemenanki.service.in").read_text()
    keys = lambda text: [line for line in text.splitlines()
                         if "=" in line and not line.startswith(("#", "ExecStart=",
                                                                 "LogsDirectory=",
                                                                 "Description="))]
    assert keys(unit) == keys(plain.replace("@bindir@", str(tmp_path / "bin"))
                              .replace("@sysconfdir@", "/etc"))


BROKEN = '[[inbound]]\ntag = "a"\nprotocol = "socks"\nlisten = "127.0.0.1"\nport = "x"\n'


@pytest.mark.parametrize("source", ["etemenanki.service.in", "etemenanki@.service.in"])
def test_i32_a_broken_config_is_not_restarted_in_a_loop(run, tmp_path, source):
    """Issue 32 item 4: both units restart on failure but not on the status
    a start that refuses its config file exits with (78, EX_CONFIG): a
    broken file, one that cannot be read, one asking for what the build
    cannot run. A start failing on something else (a port in use) still
    exits 1, which is restarted."""
    unit = (ROOT / "dist" / source).read_text()
    assert re.search(r"^Restart=on-failure$", unit, re.M)
    prevent = re.findall(r"^RestartPreventExitStatus=(.*)$", unit, re.M)
    assert len(prevent) == 1, prevent
    statuses = [int(x) for x in prevent[0].split()]
    bad = tmp_path / "bad.toml"
    bad.write_text(BROKEN)
    unbuilt = tmp_path / "unbuilt.toml"
    unbuilt.write_text('[[inbound]]\ntag = "hy"\nprotocol = "hysteria2"\nport = 8443\n'
                       '[[inbound.settings.users]]\npassword = "p"\n\n'
                       '[[outbound]]\ntag = "direct"\nprotocol = "freedom"\n')
    for path in (bad, tmp_path / "absent.toml", unbuilt):
        r = run("-c", str(path), timeout=10)
        assert r.returncode in statuses, (path.name, r.returncode, r.stderr)
        assert "failed to start: " in r.stderr, r.stderr
    taken = socket.socket()
    taken.bind((LOOPBACK, 0))
    taken.listen(1)
    try:
        busy = tmp_path / "busy.toml"
        busy.write_text(CONFIG.format(port0=taken.getsockname()[1], port1=free_port()))
        r = run("-c", str(busy), timeout=10)
        assert r.returncode == 1, r.stderr
        assert r.returncode not in statuses
    finally:
        taken.close()


def build_dir():
    """The build folder of the binary under test (build/ or build-asan/)."""
    return pathlib.Path(os.environ["ETM_APP"]).resolve().parents[1]


def test_i32_install_puts_the_docs_where_the_page_and_the_sample_point(tmp_path):
    """Issue 32 item 3: `meson install` (DESTDIR) installs docs/*.md, and
    the man page and the sample config name that installed folder, every
    page they name being there."""
    dest = tmp_path / "dest"
    r = subprocess.run(["meson", "install", "-C", str(build_dir()), "--no-rebuild", "--quiet",
                        "--destdir", str(dest)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    pages = list(dest.rglob("man1/etemenanki-app.1"))
    samples = list(dest.rglob("etemenanki/config.toml"))
    assert len(pages) == 1 and len(samples) == 1, (pages, samples)
    named = re.compile(r"(/[\w./-]*/share/doc/etemenanki)/([\w-]+\.md)")
    for installed in (pages[0], samples[0]):
        text = installed.read_text()
        refs = named.findall(text)
        assert ("config.md" in [page for _, page in refs]), (installed, refs)
        for folder, page in refs:
            assert (dest / folder.lstrip("/") / page).is_file(), (installed, folder, page)
        # no path into the source tree, which an installed system does not have
        assert not re.search(r"(?<![\w/])docs/\w", text.split("\n", 1)[1]), installed
    folder = dest / refs[0][0].lstrip("/")
    for src in (ROOT / "docs").glob("*.md"):
        assert (folder / src.name).read_text() == src.read_text(), src.name
    units = {p.name for p in dest.rglob("*.service")}
    assert units == {"etemenanki.service", "etemenanki@.service"}, units


def test_man_page_names_every_option(run):
    """docs/man/etemenanki-app.1 is written by hand from docs/cli.md: every
    option --help and docs/cli.md list has its entry in it."""
    page = (ROOT / "docs" / "man" / "etemenanki-app.1").read_text()
    cli = (ROOT / "docs" / "cli.md").read_text()
    help_opts = re.findall(r"^  (-\w), (--[\w-]+)", run("--help").stdout, re.M)
    assert len(help_opts) == 5
    for short, long in help_opts:
        assert f"`{short}`, `{long}" in cli
        roff = lambda opt: opt.replace("-", "\\-")
        assert f'.BR {roff(short)} ", " {roff(long)}' in page, long


def test_upgrade_under_socket_activation(app, tmp_path, notify_socket, with_libsystemd):
    """SIGUSR2 (docs/install.md "Upgrade") under systemd: the new process
    serves on the activated socket too, tells the manager it is the main
    process (MAINPID=, which NotifyAccess=all lets through) before READY=1,
    and the old one exits 0 without a STOPPING=1: the service goes on."""
    passed = socket.socket()
    passed.bind((LOOPBACK, 0))
    passed.listen(16)
    port, other = passed.getsockname()[1], free_port()
    env = dict(os.environ, NOTIFY_SOCKET=str(tmp_path / "notify"))
    owner = start_activated(app, tmp_path, CONFIG.format(port0=port, port1=other), passed,
                            env=env)
    new_pid = None
    try:
        assert states(notify_socket) == {"READY": "1"}
        owner.proc.send_signal(signal.SIGUSR2)
        first, second = states(notify_socket), states(notify_socket)
        new_pid = int(first["MAINPID"])
        assert first == {"MAINPID": str(new_pid)} and second == {"READY": "1"}
        log = wait_log(tmp_path / "activated.log", "this process exits", owner.proc)
        assert (f"INFO  app: upgrade: new process {new_pid} is serving; this process stops "
                "accepting and drains") in log, log
        # each worker's socket: two copies of the activated one, two of b's
        assert "INFO  app: upgrade: sockets passed by the old process: 4" in log, log
        assert owner.proc.wait(5) == 0
        assert accepts(port) and accepts(other)
        notify_socket.settimeout(0.3)
        with pytest.raises(socket.timeout):
            notify_socket.recv(4096)  # no STOPPING=1 from the old process
        notify_socket.settimeout(10)
        os.kill(new_pid, signal.SIGTERM)
        assert states(notify_socket) == {"STOPPING": "1"}
    finally:
        if new_pid is not None:
            stop_spawned(new_pid)
        stop_process(owner)
        passed.close()


def running(pid):
    """True while pid runs (a zombie has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def stop_spawned(pid):
    """The process an upgrade started (pid, from its notification): SIGTERM
    when it still runs, SIGKILL when that has not stopped it within 5 s."""
    if running(pid):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    if running(pid):
        os.kill(pid, signal.SIGKILL)
