"""Helpers for the balancer end-to-end tests: member servers the tests can
stop, silence and restart on the same port, an etemenanki-app process pinned
to fixed ports, and reading the balancer's log lines with their timestamps.

Standard library only. Everything binds 127.0.0.1.

How a test tells which member carried a flow: every member of the balancer
under test is a socks outbound whose server is a MemberServer (a SOCKS5
server written here) or a second etemenanki-app. A MemberServer appends the
destination of each CONNECT to its `connects` list *before* it answers the
request, so when the client's SOCKS reply arrives the member that carried
the flow has already counted it; a second etemenanki-app, run at debug
level, writes its "tcp flow to ... takes direct@v1" line (flushed) before it
dials, so the same holds for its log. Health probes never show up in
either: a probe connects and closes without sending a byte.
"""
import calendar
import random
import re
import select
import socket
import struct
import subprocess
import threading
import time

from proxykit import (LOOPBACK, Proxy, connect, ephemeral_range, recv_exact, socks5_greet,
                      socks5_request)


# ---------------------------------------------------------------- ports

def pinned_port():
    """A free TCP port on 127.0.0.1 outside the kernel's ephemeral range.

    The tests stop a member and start it again on the same port. A port from
    the ephemeral range can meanwhile become the local port of some other
    outgoing connection (other test suites run on this host at the same
    time), and then the restart fails with "address already in use"; a port
    below the range is only ever taken by an explicit bind."""
    lo, hi = ephemeral_range()
    candidates = [p for p in range(20000, 65000) if not lo <= p <= hi] or list(range(20000, 32000))
    for _ in range(200):
        port = random.choice(candidates)
        with socket.socket() as s:
            try:
                s.bind((LOOPBACK, port))
            except OSError:
                continue
            return port
    raise AssertionError("no free port outside the ephemeral range")


# ---------------------------------------------------------------- member servers

class MemberServer:
    """A SOCKS5 server (no authentication, CONNECT only) on a fixed port.

    mode "relay": records the CONNECT's destination in `connects`, dials it,
    answers REP 0 and relays both ways. mode "refuse": records it and answers
    REP 5 (connection refused) without dialing: the TCP probe still sees a
    healthy member, but every flow through it fails.

    State changes, each atomic from the prober's point of view:
    - stop(): connects are refused (RST). The port stays bound by a
      non-listening socket, so nobody else can take it meanwhile.
    - silence(): the listener stays open but stops accepting and its accept
      queue is full, so new SYNs are dropped and a connect hangs until its
      own timeout (a host whose packets vanish, without iptables).
    - start(): listening and serving again on the same port, from either.
    Each returns the wall-clock time (time.time()) at which the new state
    took effect, for the tests that time the prober."""

    def __init__(self, name, mode="relay", port=None):
        self.name = name
        self.mode = mode
        self.port = port or pinned_port()
        self.connects = []
        self.state = "stopped"
        self._sock = None  # the listener, or the bound placeholder when stopped
        self._fillers = []
        self._accepting = None  # the accept thread's stop flag
        self._thread = None
        self._bind_placeholder()
        self.start()

    # -- sockets

    def _new_socket(self):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((LOOPBACK, self.port))
        return s

    def _bind_placeholder(self):
        old, self._sock = self._sock, None
        if old is not None:
            old.close()
        self._sock = self._new_socket()  # bound, not listening: connects get RST

    def _stop_accepting(self):
        if self._accepting is not None:
            self._accepting.set()
            self._thread.join(5)
            self._accepting = self._thread = None

    def _drop_fillers(self):
        for f in self._fillers:
            f.close()
        self._fillers = []

    def start(self):
        """Listen and serve on the port again (from any state)."""
        self._stop_accepting()
        self._drop_fillers()
        if self.state == "silent":
            self._sock.listen(128)  # the same listener, a normal queue again
        else:
            self._sock.close()
            self._sock = self._new_socket()
            self._sock.listen(128)
        at = time.time()  # connects complete from here on (the kernel queues them)
        self._accepting = threading.Event()
        self._thread = threading.Thread(target=self._accept_loop,
                                        args=(self._sock, self._accepting), daemon=True)
        self._thread.start()
        self.state = "up"
        return at

    def stop(self):
        """Refuse connections (RST), keeping the port."""
        self._stop_accepting()
        self._drop_fillers()
        at = time.time()
        self._bind_placeholder()  # closes the listener: refused from here on
        self.state = "stopped"
        return at

    def silence(self):
        """Accept nothing and drop every new SYN: connects hang."""
        assert self.state == "up", self.state
        self._stop_accepting()
        # backlog 0: Linux keeps at most one connection in the accept queue;
        # once it is there, further SYNs to this listener are dropped (with
        # the default tcp_abort_on_overflow = 0), so their connects hang.
        self._sock.listen(0)
        for _ in range(3):
            f = socket.socket()
            f.setblocking(False)
            f.connect_ex((LOOPBACK, self.port))
            self._fillers.append(f)
        at = time.time()  # the queue is full: SYNs are dropped from here on
        # make sure: a fresh connect must now hang
        probe = socket.socket()
        probe.settimeout(0.3)
        try:
            probe.connect((LOOPBACK, self.port))
            raise AssertionError(f"{self.name}: a connect to the silenced listener succeeded")
        except socket.timeout:
            pass
        finally:
            probe.close()
        self.state = "silent"
        return at

    def close(self):
        self._stop_accepting()
        self._drop_fillers()
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self.state = "closed"

    # -- serving

    def _accept_loop(self, lsock, stop):
        while not stop.is_set():
            try:
                ready, _, _ = select.select([lsock], [], [], 0.02)
            except (OSError, ValueError):
                return
            if not ready or stop.is_set():
                continue
            try:
                c, _ = lsock.accept()
            except OSError:
                continue
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        up = None
        try:
            c.settimeout(10)
            ver, n = recv_exact(c, 2)
            recv_exact(c, n)
            c.sendall(b"\x05\x00")
            ver, cmd, _rsv, atyp = recv_exact(c, 4)
            if atyp == 1:
                host = socket.inet_ntop(socket.AF_INET, recv_exact(c, 4))
            elif atyp == 4:
                host = socket.inet_ntop(socket.AF_INET6, recv_exact(c, 16))
            else:
                host = recv_exact(c, recv_exact(c, 1)[0]).decode()
            port = struct.unpack(">H", recv_exact(c, 2))[0]
            self.connects.append((host, port))
            if self.mode == "refuse" or cmd != 1:
                c.sendall(b"\x05\x05\x00\x01" + bytes(6))
                return
            try:
                up = socket.create_connection((host, port), timeout=5)
            except OSError:
                c.sendall(b"\x05\x05\x00\x01" + bytes(6))
                return
            bound = up.getsockname()
            c.sendall(b"\x05\x00\x00\x01" + socket.inet_aton(bound[0]) + struct.pack(">H", bound[1]))
            self._relay(c, up)
        except (OSError, EOFError, ValueError):
            pass
        finally:
            c.close()
            if up is not None:
                up.close()

    @staticmethod
    def _relay(a, b):
        a.settimeout(None)
        b.settimeout(None)
        peers = {a: b, b: a}
        open_ = {a, b}
        while open_:
            ready, _, _ = select.select(list(open_), [], [], 30)
            if not ready:
                return
            for s in ready:
                data = s.recv(65536)
                if data:
                    peers[s].sendall(data)
                else:
                    open_.discard(s)
                    try:
                        peers[s].shutdown(socket.SHUT_WR)
                    except OSError:
                        pass


# ---------------------------------------------------------------- etemenanki-app on fixed ports

class PinnedProxy(Proxy):
    """An etemenanki-app whose config's {port0}, {port1}, ... are the given
    ports, not fresh ones, so that a stopped instance can be started again
    where its clients expect it."""

    def __init__(self, app, workdir, config, ports, **kw):
        super().__init__(app, workdir, config, n_ports=len(ports), **kw)
        self.pinned = list(ports)

    def start(self, attempts=1):
        self.ports = list(self.pinned)
        fill = {f"port{i}": p for i, p in enumerate(self.ports)}
        fill.update(self.extra)
        n = len(list(self.workdir.glob("proxy-*.toml")))
        self.cfg_path = self.workdir / f"proxy-{n}.toml"
        self.cfg_path.write_text(self.template.format(**fill))
        self.log_path = self.workdir / f"proxy-{n}.log"
        self._log = open(self.log_path, "wb")
        args = [self.app, "-c", str(self.cfg_path)]
        if self.log_level:
            args += ["-l", self.log_level]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT)
        if self._wait_ready(10.0):
            return self
        rc = self.proc.poll()
        log = self.log()
        self.stop()
        raise AssertionError(f"pinned proxy did not start (rc={rc}); log:\n{log}")


# ---------------------------------------------------------------- the client side

def socks_flow(proxy_port, host, port, message=b"ping", timeout=5.0):
    """One SOCKS5 CONNECT through the proxy. Returns the REP code; on REP 0
    it also checks that message comes back from the (echo) destination."""
    s = connect(proxy_port, timeout)
    try:
        socks5_greet(s)
        rep, _ = socks5_request(s, host, port)
        if rep == 0:
            s.sendall(message)
            assert recv_exact(s, len(message)) == message
        return rep
    finally:
        s.close()


# ---------------------------------------------------------------- log lines

_STAMP = re.compile(r"^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)\.(\d{3})Z ")


def stamp(line):
    """The wall-clock time (seconds since the epoch) a log line was written."""
    m = _STAMP.match(line)
    assert m, line
    y, mo, d, h, mi, s, ms = (int(x) for x in m.groups())
    return calendar.timegm((y, mo, d, h, mi, s)) + ms / 1000.0


def lines_with(proxy, text):
    return [line for line in proxy.log().splitlines() if text in line]


def state_lines(proxy, tag, state):
    """The "balancer member <tag> is now <state>" lines, in order."""
    return lines_with(proxy, f"balancer: balancer member {tag} is now {state}")


def wait_line(proxy, text, count=1, timeout=5.0):
    """Waits until the log holds at least count lines containing text; returns
    the count-th one. Fails with the log when it does not come in time."""
    deadline = time.monotonic() + timeout
    while True:
        found = lines_with(proxy, text)
        if len(found) >= count:
            return found[count - 1]
        if time.monotonic() > deadline:
            raise AssertionError(f"no line #{count} with {text!r} within {timeout} s; log:\n"
                                 + proxy.log())
        time.sleep(0.01)


def wait_state(proxy, tag, state, count=1, timeout=5.0):
    """Waits for the count-th "balancer member <tag> is now <state>" line;
    returns its timestamp."""
    return stamp(wait_line(proxy, f"balancer: balancer member {tag} is now {state}", count,
                           timeout))
