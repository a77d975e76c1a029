"""Hot reload under load (issue 16, "Under load"): `make bench`-style
traffic through a socks inbound while the config is saved 50 times.

Two kinds of traffic run at once, both to a loopback echo server:
- thru: a few long flows, each streaming several MB through every reload.
  Each 64 KiB chunk carries its flow's number and its own index, so a chunk
  lost, doubled or moved is seen where it comes back.
- crr: threads that connect, send a request, read its answer and close, over
  and over (a few hundred flows a second).

The saves alternate the route's default between two freedom outbounds, a
and a2, so each one is a real change (`config reload: changed route`): the
flows that open after it take the other outbound, the flows already open
keep theirs. The log is at info level, so that thousands of flows do not
write debug lines the test would read again at every poll.

Asserted: every save is one reload that changed the route; not one crr flow
failed in any way (refused, reset, short, wrong bytes), and the echo server
accepted exactly the flows the clients opened; every long flow got back
exactly what it sent, in order, and was open from before the first save to
after the last; the log has no warning or error.
"""
import re
import socket
import struct
import threading
import time

from proxykit import LOOPBACK, recv_exact, socks_open
from reloadkit import OUTCOME, config, lines, outbound, render, save, socks_in, wait_lines

RELOADS = 50
THRU_FLOWS = 3
CHUNK = 64 << 10       # one chunk of a long flow: its flow number and index, repeated
THRU_PACE = 0.03       # seconds between two chunks of a long flow: about 2 MB/s each
THRU_MIN = 4 << 20     # bytes each long flow must have carried through the reloads
CRR_THREADS = 3
CRR_REQUEST = 512      # bytes of one crr request (and of its answer)
# seconds a crr thread waits between two flows: each flow leaves two sockets
# in TIME_WAIT for a minute (the client's, and the proxy's to the echo
# server), and other test suites on this host need ports too; unpaced, three
# threads open about 2,000 flows a second here
CRR_PACE = 0.01
CRR_MIN = 200          # crr flows the test must have run at the least

WARNINGS = re.compile(r"^\S+ (?:WARN|ERROR)\b.*$", re.M)


def chunk(flow, k):
    return struct.pack(">QQ", flow, k) * (CHUNK // 16)


class LongFlow:
    """One SOCKS5 CONNECT to the echo server that streams chunks (paced)
    until stop(), then half-closes and reads the rest of the echo until
    EOF. A writer and a reader thread; the reader checks every chunk as it
    comes back. errors holds what went wrong, in words."""

    def __init__(self, n, proxy_port, echo_port):
        self.n = n
        self.sock = socks_open(proxy_port, LOOPBACK, echo_port)
        self.sock.settimeout(10)
        self.sent = 0      # chunks
        self.received = 0  # chunks, each checked
        self.errors = []
        self.opened = time.monotonic()
        self.closed = None  # when the reader saw EOF
        self._stop = threading.Event()
        self.threads = [threading.Thread(target=self._write, daemon=True),
                        threading.Thread(target=self._read, daemon=True)]
        for t in self.threads:
            t.start()

    def _write(self):
        try:
            while not self._stop.is_set():
                self.sock.sendall(chunk(self.n, self.sent))
                self.sent += 1
                time.sleep(THRU_PACE)
            self.sock.shutdown(socket.SHUT_WR)
        except OSError as e:
            self.errors.append(f"send of chunk {self.sent}: {e!r}")

    def _read(self):
        buf = bytearray()
        try:
            while data := self.sock.recv(CHUNK):
                buf += data
                while len(buf) >= CHUNK:
                    if buf[:CHUNK] != chunk(self.n, self.received):
                        self.errors.append(f"chunk {self.received} came back as "
                                           f"{bytes(buf[:16]).hex()}...")
                        return
                    del buf[:CHUNK]
                    self.received += 1
        except OSError as e:
            self.errors.append(f"receive of chunk {self.received}: {e!r}")
            return
        if buf:
            self.errors.append(f"EOF inside chunk {self.received}, after {len(buf)} bytes")
            return
        self.closed = time.monotonic()

    def stop(self, timeout=10.0):
        self._stop.set()
        for t in self.threads:
            t.join(timeout)
        self.sock.close()


class Crr:
    """Threads that each open a SOCKS5 CONNECT to the echo server, send a
    request naming the thread and its flow, read the answer and close, until
    stop(). Every exception or wrong answer is kept in errors."""

    def __init__(self, proxy_port, echo_port, threads=CRR_THREADS):
        self.proxy_port, self.echo_port = proxy_port, echo_port
        self.done = [0] * threads
        self.errors = []
        self._stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True)
                        for i in range(threads)]
        for t in self.threads:
            t.start()

    def _run(self, i):
        while not self._stop.is_set():
            request = struct.pack(">II", i, self.done[i]) * (CRR_REQUEST // 8)
            try:
                with socks_open(self.proxy_port, LOOPBACK, self.echo_port) as s:
                    s.sendall(request)
                    answer = recv_exact(s, len(request))
                if answer != request:
                    self.errors.append(f"thread {i} flow {self.done[i]}: a wrong answer")
            except (OSError, EOFError, AssertionError) as e:
                self.errors.append(f"thread {i} flow {self.done[i]}: {e!r}")
            self.done[i] += 1
            time.sleep(CRR_PACE)

    def stop(self):
        self._stop.set()
        for t in self.threads:
            t.join(10)


def test_thru_and_crr_through_50_saves_lose_nothing(start_proxy, echo):
    template = config(socks_in("in", "{port0}"), outbound("a", "freedom"),
                      outbound("a2", "freedom"), default="{route}", level="info")
    proxy = start_proxy(template, extra={"route": "a"})
    accepted = echo.connections

    thru = [LongFlow(n, proxy.port, echo.port) for n in range(THRU_FLOWS)]
    crr = Crr(proxy.port, echo.port)
    try:
        first_save = time.monotonic()
        for i in range(RELOADS):
            proxy.extra["route"] = "a2" if i % 2 == 0 else "a"
            save(proxy, render(proxy, template))
            # the next save only after this one's reload: else the debounce
            # makes two saves one reload
            found = wait_lines(proxy, OUTCOME, i + 1)
            assert len(found) == i + 1, (f"save {i + 1}: no reload line (exit status "
                                         f"{proxy.proc.poll()}); log:\n{proxy.log()}")
        last_reload = time.monotonic()
        time.sleep(0.2)  # traffic after the last reload too
    finally:
        crr.stop()
        for f in thru:
            f.stop()
    print(f"\n{RELOADS} reloads in {last_reload - first_save:.1f} s; crr: {sum(crr.done)} flows; "
          f"thru: {', '.join(f'{f.received * CHUNK / 1e6:.1f} MB' for f in thru)}")

    assert lines(proxy, OUTCOME) == ["config reload: changed route"] * RELOADS, proxy.log()
    assert crr.errors == [], crr.errors[:10]
    assert sum(crr.done) >= CRR_MIN, crr.done
    for f in thru:
        assert f.errors == [], (f.n, f.errors)
        assert f.received == f.sent, (f.n, f.received, f.sent)
        assert f.received * CHUNK >= THRU_MIN, (f.n, f.received)
        assert f.opened < first_save and f.closed > last_reload, (f.n, f.opened, f.closed)
    assert echo.connections - accepted == sum(crr.done) + THRU_FLOWS
    assert WARNINGS.findall(proxy.log()) == []
    assert proxy.proc.poll() is None
