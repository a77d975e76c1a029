"""The binary upgrade (docs/install.md "Upgrade"): SIGUSR2 starts the new
binary with the listening sockets; the new process serves, the old one
stops accepting, drains its flows (up to [policy] upgrade_drain_after) and
exits 0; a new binary that fails to start, or does not serve within
[policy] upgrade_start_timeout (then it is killed), leaves the old one
serving.

The binary is copied to the test's directory and started from there, so a
test can replace the file as an install does (a new inode at the same
path). The new process is the old one's child, not the test's: its pid
comes from the log line that names it, and it is stopped by that pid (the
`spawned` fixture stops whatever is left at teardown).

Standard library only. Everything is on loopback.
"""
import os
import re
import shutil
import signal
import socket
import struct
import threading
import time

import pytest

from proxykit import LOOPBACK, Proxy, free_port, recv_exact, socks_open, stop_cleanly
from test_shadowsocks import PASSWORD, open_packet, seal_packet
from udplbkit import EchoBackend

SERVING = re.compile(r"^\S+ INFO  app: upgrade: new process (\d+) is serving; this process "
                     r"stops accepting and drains$", re.M)
CRR_THREADS = 3
CRR_PACE = 0.005       # seconds between two flows of a crr thread
CRR_MIN = 50           # crr flows before the upgrade, and after it, at the least
AFTER = 2.5            # seconds of crr load after the new process serves


def line(text):
    """A log line's pattern: any time stamp and level, the text exactly."""
    return re.compile(r"^\S+ [A-Z]+ +\S+: " + re.escape(text) + "$", re.M)


def starting(binary, n_sockets):
    """The starting line's pattern; its group is the new process's pid."""
    return re.compile(r"^\S+ INFO  app: " + re.escape(f"upgrade: SIGUSR2 received; starting "
                                                       f"{binary} (pid ")
                      + r"(\d+)" + re.escape(f") with {n_sockets} listening socket(s)") + "$",
                      re.M)


def wait_for(proxy, pattern, count=1, timeout=10.0):
    """The matches of pattern in proxy's log once there are count of them;
    fails at timeout."""
    deadline = time.monotonic() + timeout
    while True:
        found = pattern.findall(proxy.log())
        if len(found) >= count:
            return found
        assert time.monotonic() < deadline, f"{pattern.pattern} not logged; log:\n{proxy.log()}"
        time.sleep(0.02)


def assert_sanitizer_clean(proxy):
    """Neither process reported a leak or undefined behaviour (an ASan
    build; the new process's exit status is not the test's to read)."""
    log = proxy.log()
    assert "Sanitizer" not in log and "runtime error" not in log, log


def alive(pid):
    """True while pid runs (a zombie has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def zombies_of(pid):
    """The children of pid that have ended and were not reaped."""
    found = []
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] == "Z" and int(fields[1]) == pid:
            found.append(int(d))
    return found


def stop_pid(pid, timeout=5.0):
    """SIGTERM to pid, a process this test's proxy started; SIGKILL when it
    has not ended after timeout. Returns whether SIGTERM was enough."""
    if not alive(pid):
        return True
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    if alive(pid):
        os.kill(pid, signal.SIGKILL)
        return False
    return True


@pytest.fixture
def binary(app, tmp_path):
    """A copy of the binary under test in the test's directory: its path."""
    path = tmp_path / "etemenanki-app"
    shutil.copy2(app, path)
    return path


def install(path, source):
    """What an install does: the file at path replaced by a new one (a new
    inode; the running process keeps the old)."""
    tmp = path.with_name(path.name + ".new")
    shutil.copy2(source, tmp)
    os.replace(tmp, path)


def install_script(path, text):
    tmp = path.with_name(path.name + ".new")
    tmp.write_text(text)
    tmp.chmod(0o755)
    os.replace(tmp, path)


@pytest.fixture
def upgrading(binary, tmp_path):
    """Starts proxies from the copied binary (a start_proxy of its own);
    yields (start, spawned): spawned is the list of new processes' pids,
    each a test appends as it reads it, stopped at teardown."""
    started, spawned = [], []

    def _start(text, n_ports=1, **kw):
        p = Proxy(str(binary), tmp_path, text, n_ports, **kw)
        started.append(p)
        return p.start()

    yield _start, spawned
    for pid in spawned:
        stop_pid(pid)
    stop_cleanly(started, "proxy")


def socks_config(port="{port0}", *policy):
    text = '[log]\nlevel = "info"\n\n[runtime]\nworkers = 2\n\n'
    if policy:
        text += "[policy]\n" + "".join(p + "\n" for p in policy) + "\n"
    return text + (f'[[inbound]]\ntag = "in"\nprotocol = "socks"\nlisten = "127.0.0.1"\n'
                   f'port = {port}\n\n[[outbound]]\ntag = "direct"\nprotocol = "freedom"\n')


def echo_once(sock, payload):
    sock.sendall(payload)
    assert recv_exact(sock, len(payload)) == payload


def one_flow(proxy_port, echo_port):
    """A SOCKS5 flow that echoes a few bytes, then closes."""
    with socks_open(proxy_port, LOOPBACK, echo_port) as s:
        echo_once(s, b"one flow")


class Crr:
    """Threads that each open a SOCKS5 flow, echo a few bytes and close, in
    a loop; every flow's end time goes in done, every failure in refused
    (connection refused) or errors (anything else)."""

    def __init__(self, proxy_port, echo_port):
        self.proxy_port, self.echo_port = proxy_port, echo_port
        self.done, self.refused, self.errors = [], [], []
        self._stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True)
                        for i in range(CRR_THREADS)]
        for t in self.threads:
            t.start()

    def _run(self, i):
        k = 0
        while not self._stop.is_set():
            request = struct.pack(">II", i, k) * 16
            try:
                with socks_open(self.proxy_port, LOOPBACK, self.echo_port) as s:
                    echo_once(s, request)
                self.done.append(time.monotonic())
            except ConnectionRefusedError as e:
                self.refused.append(f"thread {i} flow {k}: {e!r}")
            except (OSError, EOFError, AssertionError) as e:
                self.errors.append(f"thread {i} flow {k}: {e!r}")
            k += 1
            time.sleep(CRR_PACE)

    def stop(self):
        self._stop.set()
        for t in self.threads:
            t.join(10)


def upgrade(proxy, spawned, n=1):
    """SIGUSR2, then the pid of the new process from the n-th serving line
    (appended to spawned)."""
    proxy.proc.send_signal(signal.SIGUSR2)
    pid = int(wait_for(proxy, SERVING, n)[n - 1])
    spawned.append(pid)
    assert pid != proxy.proc.pid and alive(pid)
    return pid


def test_upgrade_under_crr_load_refuses_nothing_and_keeps_a_long_flow(upgrading, binary, echo,
                                                                      app):
    start, spawned = upgrading
    proxy = start(socks_config())
    long_flow = socks_open(proxy.port, LOOPBACK, echo.port)
    echo_once(long_flow, b"before")
    install(binary, app)  # the file is a new one now; the process runs the old
    crr = Crr(proxy.port, echo.port)
    try:
        time.sleep(1.0)
        signalled = time.monotonic()
        new_pid = upgrade(proxy, spawned)
        serving = time.monotonic()
        echo_once(long_flow, b"after the new process serves")
        time.sleep(AFTER)
        echo_once(long_flow, b"still")
    finally:
        crr.stop()
    before = [t for t in crr.done if t < signalled]
    after = [t for t in crr.done if t > serving]
    print(f"\ncrr: {len(before)} flows before SIGUSR2, {len(after)} in the {AFTER} s after")
    assert crr.refused == [], crr.refused[:10]
    assert crr.errors == [], crr.errors[:10]
    assert len(before) >= CRR_MIN and len(after) >= CRR_MIN, (len(before), len(after))
    log = proxy.log()
    assert [int(pid) for pid in starting(binary, 2).findall(log)] == [new_pid], log
    assert line("upgrade: sockets passed by the old process: 2").search(log), log

    # the long flow holds the old process, and nothing else does
    time.sleep(0.5)
    assert proxy.proc.poll() is None, log
    echo_once(long_flow, b"the old process still relays it")
    long_flow.close()
    assert proxy.proc.wait(5) == 0, proxy.log()
    assert line("upgrade: no flow is open any more; this process exits").search(proxy.log())

    # the new process serves on alone, on the same port
    assert alive(new_pid)
    one_flow(proxy.port, echo.port)
    assert stop_pid(new_pid)
    log = proxy.log()
    assert len(line("SIGTERM received, stopping").findall(log)) == 1, log
    assert len(line("stopped").findall(log)) == 2, log
    assert not re.search(r"^\S+ (?:WARN|ERROR)\b", log, re.M), log
    assert_sanitizer_clean(proxy)


def test_the_grace_closes_a_long_flow_and_the_old_process_exits(upgrading, echo):
    start, spawned = upgrading
    proxy = start(socks_config("{port0}", "upgrade_drain_after = 1"))
    long_flow = socks_open(proxy.port, LOOPBACK, echo.port)
    echo_once(long_flow, b"before")
    new_pid = upgrade(proxy, spawned)
    handed_over = time.monotonic()
    # during the drain: no second upgrade, no reload
    proxy.proc.send_signal(signal.SIGUSR2)
    proxy.proc.send_signal(signal.SIGHUP)
    wait_for(proxy, line("upgrade: SIGUSR2 ignored: this process drains after an upgrade"))
    wait_for(proxy, line("SIGHUP ignored: this process drains after an upgrade; the new one "
                         "reloads"))
    long_flow.settimeout(5)
    try:
        ended = long_flow.recv(1) == b""
    except ConnectionResetError:
        ended = True
    closed_after = time.monotonic() - handed_over
    long_flow.close()
    assert ended and 0.7 < closed_after < 3.0, closed_after
    assert proxy.proc.wait(5) == 0, proxy.log()
    assert line("upgrade: 1 flow(s) still open after 1 s (upgrade_drain_after); closing them"
                ).search(proxy.log()), proxy.log()
    one_flow(proxy.port, echo.port)
    assert stop_pid(new_pid)
    assert_sanitizer_clean(proxy)


def test_a_failed_start_keeps_the_old_process_serving(upgrading, binary, app, echo):
    start, spawned = upgrading
    proxy = start(socks_config())
    failed = line("upgrade: the new process failed to start (exit status 1); this process "
                  "keeps serving")
    # a start that refuses its config file exits 78, EX_CONFIG (docs/cli.md)
    refused = line("upgrade: the new process failed to start (exit status 78); this process "
                   "keeps serving")

    # the file at the binary's path is a script that fails
    install_script(binary, "#!/bin/sh\nexit 1\n")
    proxy.proc.send_signal(signal.SIGUSR2)
    wait_for(proxy, failed, 1)
    one_flow(proxy.port, echo.port)

    # the binary is fine again, the config on disk is not
    install(binary, app)
    good = proxy.cfg_path.read_text()
    proxy.cfg_path.write_text(good.replace('protocol = "socks"', 'protocol = "sox"'))
    proxy.proc.send_signal(signal.SIGUSR2)
    wait_for(proxy, refused, 1)
    assert proxy.proc.poll() is None
    one_flow(proxy.port, echo.port)

    # both put right: the next SIGUSR2 upgrades
    proxy.cfg_path.write_text(good)
    time.sleep(0.5)  # the save's reload first (an unchanged config)
    new_pid = upgrade(proxy, spawned)
    assert proxy.proc.wait(5) == 0, proxy.log()
    one_flow(proxy.port, echo.port)
    assert stop_pid(new_pid)
    log = proxy.log()
    assert len(SERVING.findall(log)) == 1 and len(failed.findall(log)) == 1, log
    assert len(refused.findall(log)) == 1, log
    assert_sanitizer_clean(proxy)


def failed_line(why):
    return line(f"upgrade: the new process failed to start ({why}); this process keeps serving")


def test_failures_say_why_and_a_second_sigusr2_waits(upgrading, binary, echo):
    start, spawned = upgrading
    proxy = start(socks_config())
    # still starting: a second SIGUSR2 is ignored
    install_script(binary, "#!/bin/sh\nsleep 1\nexit 3\n")
    proxy.proc.send_signal(signal.SIGUSR2)
    wait_for(proxy, starting(binary, 2))
    proxy.proc.send_signal(signal.SIGUSR2)
    wait_for(proxy, line("upgrade: SIGUSR2 ignored: an upgrade is under way"))
    wait_for(proxy, failed_line("exit status 3"))
    # killed by a signal
    install_script(binary, "#!/bin/sh\nkill -9 $$\n")
    proxy.proc.send_signal(signal.SIGUSR2)
    wait_for(proxy, failed_line("killed by signal 9"))
    # no file at the path
    binary.unlink()
    proxy.proc.send_signal(signal.SIGUSR2)
    wait_for(proxy, failed_line(f"cannot run {binary}: no such file or directory"))
    one_flow(proxy.port, echo.port)
    assert proxy.proc.poll() is None
    assert zombies_of(proxy.proc.pid) == []
    assert SERVING.findall(proxy.log()) == []
    assert_sanitizer_clean(proxy)


def test_a_start_that_hangs_is_killed_after_the_timeout(upgrading, binary, app, echo):
    """A new process that never serves nor exits is killed (SIGKILL) after
    [policy] upgrade_start_timeout and reaped; the old one serves on, and a
    later SIGUSR2 upgrades."""
    start, spawned = upgrading
    proxy = start(socks_config("{port0}", "upgrade_start_timeout = 1"))
    timed_out = failed_line("not serving after 1 s, killed")
    install_script(binary, "#!/bin/sh\nexec sleep 1000\n")
    signalled = time.monotonic()
    proxy.proc.send_signal(signal.SIGUSR2)
    hung = int(wait_for(proxy, starting(binary, 2))[0])
    spawned.append(hung)  # stopped at teardown if this test fails first
    assert hung != proxy.proc.pid
    wait_for(proxy, timed_out, timeout=5)
    assert 0.9 < time.monotonic() - signalled < 4.0
    # killed and reaped by the old process: gone, and no zombie of it left
    assert not alive(hung) and zombies_of(proxy.proc.pid) == []
    assert proxy.proc.poll() is None
    one_flow(proxy.port, echo.port)

    # the real binary back, and a timeout the new process must not hit
    # once it serves (the save's reload sets it for the next start)
    install(binary, app)
    proxy.cfg_path.write_text(proxy.cfg_path.read_text().replace("upgrade_start_timeout = 1",
                                                                 "upgrade_start_timeout = 2"))
    time.sleep(0.5)
    long_flow = socks_open(proxy.port, LOOPBACK, echo.port)
    new_pid = upgrade(proxy, spawned)
    assert int(wait_for(proxy, starting(binary, 2), 2)[1]) == new_pid
    time.sleep(2.5)
    assert alive(new_pid)
    echo_once(long_flow, b"the old process drains on")
    long_flow.close()
    assert proxy.proc.wait(5) == 0, proxy.log()
    one_flow(proxy.port, echo.port)
    assert stop_pid(new_pid)
    log = proxy.log()
    assert len(timed_out.findall(log)) == 1 and len(SERVING.findall(log)) == 1, log
    assert_sanitizer_clean(proxy)


def test_a_start_that_closes_the_pipe_and_hangs_is_killed_too(upgrading, binary, echo):
    """The end of the pipe without the byte waits for the exit; a process
    that closed it and hangs is killed by the timeout all the same."""
    start, spawned = upgrading
    proxy = start(socks_config("{port0}", "upgrade_start_timeout = 1"))
    install_script(binary, '#!/bin/sh\neval "exec $ETM_UPGRADE_READY>&-"\nexec sleep 1000\n')
    proxy.proc.send_signal(signal.SIGUSR2)
    hung = int(wait_for(proxy, starting(binary, 2))[0])
    spawned.append(hung)
    wait_for(proxy, failed_line("not serving after 1 s, killed"), timeout=5)
    assert not alive(hung) and zombies_of(proxy.proc.pid) == []
    one_flow(proxy.port, echo.port)
    assert_sanitizer_clean(proxy)


def test_a_stop_during_a_hung_start_stops_both(upgrading, binary):
    """SIGTERM while the start timeout runs: the old process stops at once
    and cleanly (its timer closes with it, nothing leaks), the hung one gets
    SIGTERM."""
    start, spawned = upgrading
    proxy = start(socks_config("{port0}", "upgrade_start_timeout = 60"))
    install_script(binary, "#!/bin/sh\nexec sleep 1000\n")
    proxy.proc.send_signal(signal.SIGUSR2)
    hung = int(wait_for(proxy, starting(binary, 2))[0])
    spawned.append(hung)
    proxy.proc.send_signal(signal.SIGTERM)
    assert proxy.proc.wait(5) == 0, proxy.log()
    deadline = time.monotonic() + 5
    while alive(hung) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not alive(hung)
    assert "failed to start" not in proxy.log(), proxy.log()
    assert_sanitizer_clean(proxy)


def test_the_new_process_dying_during_the_drain_is_logged(upgrading, echo):
    start, spawned = upgrading
    proxy = start(socks_config())
    long_flow = socks_open(proxy.port, LOOPBACK, echo.port)
    new_pid = upgrade(proxy, spawned)
    os.kill(new_pid, signal.SIGKILL)
    wait_for(proxy, line(f"upgrade: new process {new_pid} exited (killed by signal 9)"))
    assert zombies_of(proxy.proc.pid) == []  # reaped by the old process
    echo_once(long_flow, b"the old process drains on")
    long_flow.close()
    assert proxy.proc.wait(5) == 0, proxy.log()
    assert_sanitizer_clean(proxy)


def test_bad_upgrade_variables_are_ignored(app, tmp_path, echo):
    """A start with the variables set but wrong serves as usual and says
    what it ignored; a readiness descriptor it cannot write to is logged."""
    # the app with descriptor 3 open read-only: no write gets through it
    wrapper = tmp_path / "with-fd3"
    install_script(wrapper, f'#!/bin/sh\nexec 3</dev/null\nexec "{app}" "$@"\n')
    started = []
    try:
        for fds, ready, logged in [
                ("3x", "3", ["upgrade: ETM_UPGRADE_FDS ignored: `3x` is not a list of open "
                             "descriptors above 2",
                             "upgrade: cannot tell the old process this one serves: Bad file "
                             "descriptor"]),
                ("", "1", ["upgrade: ETM_UPGRADE_READY ignored: `1` is not a list of open "
                           "descriptors above 2"])]:
            p = Proxy(str(wrapper), tmp_path, socks_config(),
                      env={"ETM_UPGRADE_FDS": fds, "ETM_UPGRADE_READY": ready})
            started.append(p)
            p.start()
            for text in logged:
                wait_for(p, line(text))
            assert line("upgrade: sockets passed by the old process: 0").search(p.log())
            one_flow(p.port, echo.port)
    finally:
        stop_cleanly(started, "proxy")


@pytest.mark.parametrize("before,after", [(2, 1), (1, 3)])
def test_every_passed_socket_is_served_when_the_workers_change(upgrading, echo, before, after):
    """More sockets passed than workers: one worker serves several (a
    socket nobody accepts on would keep its share of the port's
    connections); fewer: workers share them."""
    start, spawned = upgrading
    proxy = start(socks_config().replace(f"workers = 2", f"workers = {before}"))
    proxy.cfg_path.write_text(proxy.cfg_path.read_text().replace(f"workers = {before}",
                                                                 f"workers = {after}"))
    time.sleep(0.5)  # the save's reload: [runtime] applies at the next start
    new_pid = upgrade(proxy, spawned)
    assert line(f"upgrade: sockets passed by the old process: {before}").search(proxy.log())
    assert proxy.proc.wait(5) == 0, proxy.log()
    wait_for(proxy, line(f"listening on 127.0.0.1:{proxy.port} (in, {after} worker"
                         f"{'s' if after > 1 else ''})"), 1)
    for _ in range(60):  # the kernel spreads them over every socket of the port
        one_flow(proxy.port, echo.port)
    assert stop_pid(new_pid)
    assert_sanitizer_clean(proxy)


def test_udp_lb_answers_on_the_same_port_before_and_after(upgrading):
    start, spawned = upgrading
    backend = EchoBackend("b0")
    try:
        port = free_port(socket.SOCK_DGRAM)
        text = ('[log]\nlevel = "info"\n\n[runtime]\nworkers = 2\n\n'
                f'[[inbound]]\ntag = "lb"\nprotocol = "udp_lb"\nlisten = "127.0.0.1"\n'
                f'port = {port}\n[inbound.settings]\ncluster = "pool"\n\n'
                '[[outbound]]\ntag = "direct"\nprotocol = "freedom"\n\n'
                f'[[cluster]]\ntag = "pool"\nbackends = ["{backend.addr}"]\n')
        proxy = start(text, n_ports=0)
        wait_for(proxy, line(f"listening on 127.0.0.1:{port} (lb, 2 workers)"))
        client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        client.settimeout(2)

        def ask(payload):
            client.sendto(payload, (LOOPBACK, port))
            data, src = client.recvfrom(2048)
            assert src == (LOOPBACK, port)
            return data

        assert ask(b"before") == b"b0|before"
        new_pid = upgrade(proxy, spawned)
        assert line("upgrade: sockets passed by the old process: 2").search(proxy.log())
        assert proxy.proc.wait(5) == 0, proxy.log()
        assert ask(b"after") == b"b0|after"
        client.close()
        assert stop_pid(new_pid)
        assert_sanitizer_clean(proxy)
    finally:
        backend.close()


@pytest.mark.parametrize("value,out,err", [
    (0, "Configuration OK.\n", ""),
    (86400, "Configuration OK.\n", ""),
    (86401, "", "configuration invalid: policy.upgrade_drain_after must be 0 to 86400\n"),
])
def test_upgrade_drain_after_is_checked(run, tmp_path, value, out, err):
    cfg = tmp_path / "c.toml"
    cfg.write_text(socks_config("1080", f"upgrade_drain_after = {value}"))
    r = run("--test", "-c", str(cfg))
    assert (r.returncode, r.stdout, r.stderr) == (1 if err else 0, out, err)


@pytest.mark.parametrize("value,out,err", [
    (1, "Configuration OK.\n", ""),
    (3600, "Configuration OK.\n", ""),
    (0, "", "configuration invalid: policy.upgrade_start_timeout must be 1 to 3600\n"),
    (3601, "", "configuration invalid: policy.upgrade_start_timeout must be 1 to 3600\n"),
])
def test_upgrade_start_timeout_is_checked(run, tmp_path, value, out, err):
    cfg = tmp_path / "c.toml"
    cfg.write_text(socks_config("1080", f"upgrade_start_timeout = {value}"))
    r = run("--test", "-c", str(cfg))
    assert (r.returncode, r.stdout, r.stderr) == (1 if err else 0, out, err)


def test_shadowsocks_udp_answers_on_the_same_port_after(upgrading, udp_echo):
    """A shadowsocks inbound's UDP socket is handed over with its TCP
    listener: a packet sealed here reaches the echo through the old process,
    then through the new one, on the same port."""
    start, spawned = upgrading
    method = "chacha20-ietf-poly1305"
    proxy = start('[log]\nlevel = "info"\n\n[runtime]\nworkers = 2\n\n'
                  '[[inbound]]\ntag = "in"\nprotocol = "shadowsocks"\nlisten = "127.0.0.1"\n'
                  f'port = {{port0}}\n[inbound.settings]\nmethod = "{method}"\n'
                  f'password = "{PASSWORD}"\n\n'
                  '[[outbound]]\ntag = "direct"\nprotocol = "freedom"\n')
    target = b"\x01\x7f\x00\x00\x01" + udp_echo.port.to_bytes(2, "big")
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.settimeout(3)
    try:
        def ask(payload):
            u.sendto(seal_packet(method, PASSWORD, target + payload), (LOOPBACK, proxy.port))
            reply, src = u.recvfrom(65535)
            assert src == (LOOPBACK, proxy.port)
            return open_packet(method, PASSWORD, reply)

        assert ask(b"before") == target + b"before"
        new_pid = upgrade(proxy, spawned)
        # each worker's TCP listener and UDP socket
        assert line("upgrade: sockets passed by the old process: 4").search(proxy.log())
        assert proxy.proc.wait(5) == 0, proxy.log()
        assert ask(b"after") == target + b"after"
    finally:
        u.close()
    assert stop_pid(new_pid)
    assert_sanitizer_clean(proxy)
