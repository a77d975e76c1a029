#!/usr/bin/python3
"""reload_cost.py - what a hot reload costs: the time from the trigger to
the moment the new route is in force, with 0 and with 1,000 open flows
(issue 16, docs/reload.md "The cost of a reload"). Not part of `make test`
or `make bench`; run it by hand:

    BUILD=build python3 bench/reload_cost.py

etemenanki-app runs with a socks inbound and two outbounds, `a` (freedom)
and `b` (blackhole). The open flows are SOCKS5 CONNECTs through it to an
echo server in this process, each echoed once and then left idle (they are
routed to `a`, which no reload changes, so they stay open throughout). Each
reload flips the route's default between `a` and `b`, and is timed two
ways:

- seen: from the trigger until a new connection is routed by the new
  route. After the trigger this script opens one SOCKS5 CONNECT after the
  other, sends a byte and reads: an echo means `a`, EOF without a byte
  means `b`. The time counts up to the end of the first connection that
  saw the new route, so it includes one probe connection (`probe` below:
  the median time of one such connection while nothing changes).
- log: from the `reloading ... (SIGHUP)` line to the `applied:` debug line
  the reload ends with, by the process's own clock; the log's timestamps
  have millisecond resolution.

The trigger is SIGHUP; the new config is written beforehand through a hard
link in another directory, so the program's watch of the config's
directory does not see it and SIGHUP alone reloads. Saving the file (a
rename over it) starts the same reload 200 ms after the save (the debounce
of docs/reload.md), which `BENCH_RELOAD_SAVE=1` measures as well.

Environment (all optional):
  BUILD=build                 the meson build folder
  BENCH_RELOAD_FLOWS=1000     open flows in the second run (the first has 0)
  BENCH_RELOAD_COUNT=20       reloads per run
  BENCH_RELOAD_SAVE=0         1: also time saves (rename over the config)

Standard library only. Only the process this script started is signalled,
by pid; the temp dir is removed at the end, whatever happens.
"""
import asyncio
import os
import re
import resource
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = (ROOT / os.environ.get("BUILD", "build")).resolve()
APP = BUILD / "src" / "etemenanki-app"
FLOWS = int(os.environ.get("BENCH_RELOAD_FLOWS", "1000"))
COUNT = int(os.environ.get("BENCH_RELOAD_COUNT", "20"))
SAVE = os.environ.get("BENCH_RELOAD_SAVE", "0") == "1"
LOOPBACK = "127.0.0.1"
START_TIMEOUT = 10.0
SEEN_TIMEOUT = 5.0   # seconds a reload may take to be seen before the run fails
PAUSE = 0.1          # seconds between two reloads (the next one starts on a quiet process)
PROBES = 50          # probe connections timed while nothing changes
SETTLE = 0.2         # seconds after the listening line: its signal handlers come just after

CONFIG = """[log]
level = "debug"

[[inbound]]
tag = "in"
protocol = "socks"
listen = "127.0.0.1"
port = {port}

[[outbound]]
tag = "a"
protocol = "freedom"

[[outbound]]
tag = "b"
protocol = "blackhole"

[route]
default = "{default}"
"""

STAMP = re.compile(r"^\d{4}-\d\d-\d\dT(\d\d):(\d\d):(\d\d)\.(\d{3})Z ")


# ---------------------------------------------------------------- the echo server

class Echo:
    """An asyncio echo server on 127.0.0.1 in a thread of its own: holds
    thousands of connections without a thread each."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        async def handle(reader, writer):
            try:
                while data := await reader.read(65536):
                    writer.write(data)
                    await writer.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                writer.close()

        async def main():
            self.server = await asyncio.start_server(handle, LOOPBACK, 0, backlog=4096)
            self.port = self.server.sockets[0].getsockname()[1]
            ready.set()

        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(main(), self.loop)
        if not ready.wait(5):
            raise RuntimeError("the echo server did not start")

    def close(self):
        self.loop.call_soon_threadsafe(self.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


# ---------------------------------------------------------------- SOCKS5

def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise EOFError(f"EOF after {len(buf)} of {n} bytes")
        buf += chunk
    return buf


def socks_connect(proxy_port, port):
    """A SOCKS5 CONNECT to 127.0.0.1:port (RFC 1928); the reply must be
    success (a blackholed flow gets it too)."""
    s = socket.create_connection((LOOPBACK, proxy_port), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        s.sendall(b"\x05\x01\x00")
        if recv_exact(s, 2) != b"\x05\x00":
            raise RuntimeError("SOCKS5: no-auth refused")
        s.sendall(b"\x05\x01\x00\x01" + socket.inet_aton(LOOPBACK) + struct.pack(">H", port))
        head = recv_exact(s, 4)
        if head[1] != 0:
            raise RuntimeError(f"SOCKS5: REP {head[1]:#x}")
        recv_exact(s, {1: 4, 4: 16}[head[3]] + 2)
    except BaseException:
        s.close()
        raise
    return s


def routed_to_a(proxy_port, echo_port):
    """Opens one flow and tells where it went: True for a (the byte comes
    back), False for b (EOF or a reset without a byte)."""
    with socks_connect(proxy_port, echo_port) as s:
        try:
            s.sendall(b"x")
            return s.recv(1) == b"x"
        except (ConnectionResetError, BrokenPipeError):
            return False


# ---------------------------------------------------------------- the process

class App:
    def __init__(self, tmp):
        self.tmp = Path(tmp)
        self.port = free_port()
        self.cfg = self.tmp / "conf" / "reload.toml"
        self.cfg.parent.mkdir()
        # written through this link, the config changes unseen by the watch
        # of its directory (inotify reports to the directory of the path used)
        self.alias = self.tmp / "alias.toml"
        self.log_path = self.tmp / "app.log"
        self.default = "a"
        self.cfg.write_text(self.text())
        os.link(self.cfg, self.alias)
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([str(APP), "-c", str(self.cfg)], stdin=subprocess.DEVNULL,
                                     stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT
        while "supervisor: listening on" not in self.log():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"etemenanki-app did not start; log:\n{self.log()}")
            time.sleep(0.02)
        time.sleep(SETTLE)

    def text(self):
        return CONFIG.format(port=self.port, default=self.default)

    def log(self):
        return self.log_path.read_text(errors="replace")

    def flip(self, save):
        """Flips the default route in the file and triggers the reload; returns
        the monotonic time of the trigger."""
        self.default = "b" if self.default == "a" else "a"
        if save:
            tmp = self.cfg.with_name(".reload.toml.swp")
            tmp.write_text(self.text())
            t = time.monotonic()
            os.replace(tmp, self.cfg)
            return t
        self.alias.write_text(self.text())
        t = time.monotonic()
        self.proc.send_signal(signal.SIGHUP)
        return t

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()


def free_port():
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def stamp(line):
    h, m, s, ms = (int(x) for x in STAMP.match(line).groups())
    return ((h * 60 + m) * 60 + s) * 1000 + ms


def log_times(log):
    """Milliseconds from each `reloading` line to the `applied:` line after it."""
    out, start = [], None
    for line in log.splitlines():
        if " app: reloading " in line:
            start = stamp(line)
        elif " supervisor: applied: " in line and start is not None:
            out.append(stamp(line) - start)
            start = None
    return out


# ---------------------------------------------------------------- one run

def run(echo, n_flows, save):
    tmp = tempfile.mkdtemp(prefix="etm-reload-cost-")
    app, flows = None, []
    try:
        app = App(tmp)
        for _ in range(n_flows):
            s = socks_connect(app.port, echo.port)
            s.sendall(b"open")
            recv_exact(s, 4)
            flows.append(s)
        probe = []
        for _ in range(PROBES):
            t = time.monotonic()
            if not routed_to_a(app.port, echo.port):
                raise RuntimeError("a probe before any reload was not routed to a")
            probe.append(time.monotonic() - t)
        seen = []
        for i in range(COUNT):
            want_a = app.default == "b"
            t0 = app.flip(save)
            while routed_to_a(app.port, echo.port) != want_a:
                if time.monotonic() - t0 > SEEN_TIMEOUT:
                    raise RuntimeError(f"reload {i + 1} not seen in {SEEN_TIMEOUT} s; "
                                       f"log:\n{app.log()[-3000:]}")
            seen.append(time.monotonic() - t0)
            time.sleep(PAUSE)
        for s in flows:  # every idle flow lived through the reloads
            s.sendall(b"done")
            if recv_exact(s, 4) != b"done":
                raise RuntimeError("an open flow lost its bytes")
        log = app.log()
        changed = log.count("config reload: changed route")
        if changed != COUNT:
            raise RuntimeError(f"{changed} route changes logged for {COUNT} reloads")
        return probe, seen, log_times(log)
    finally:
        for s in flows:
            s.close()
        if app:
            app.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def ms(xs):
    return f"{statistics.median(xs) * 1000:7.2f} {max(xs) * 1000:7.2f}"


def main():
    if not APP.exists():
        sys.exit(f"reload_cost: {APP} is missing: build first (make build)")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 4 * FLOWS + 256  # this process holds both ends of each flow; so does the app
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))
    echo = Echo()
    try:
        triggers = ["SIGHUP"] + (["save"] if SAVE else [])
        print(f"{APP}, {COUNT} reloads per run, {os.cpu_count()} cores, "
              f"load {' '.join(open('/proc/loadavg').read().split()[:3])}")
        print(f"{'trigger':8} {'open flows':>10}  {'seen median/max ms':>19}  "
              f"{'log median/max ms':>17}  {'probe ms':>8}")
        for trigger in triggers:
            for n in (0, FLOWS):
                probe, seen, logged = run(echo, n, trigger == "save")
                logged_s = [x / 1000 for x in logged]
                print(f"{trigger:8} {n:10}  {ms(seen):>19}  {ms(logged_s):>17}  "
                      f"{statistics.median(probe) * 1000:8.2f}", flush=True)
    finally:
        echo.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
