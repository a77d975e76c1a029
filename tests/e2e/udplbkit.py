"""Helpers for the UDP load-balancer end-to-end tests: echo backends with a
TCP health port a test can close and reopen, UDP clients bound to chosen
loopback addresses, an etemenanki-app process running a udp_lb inbound, and
its SIGUSR1 metrics read back as numbers.

Standard library only. Everything is on loopback (127.0.0.0/8).

How a test tells which backend answered: every backend replies to each
datagram with its name, a "|" and the payload it received (after removing a
PROXY v2 header, which it records). A backend also records every datagram
as it arrived, so the PROXY tests can read the raw bytes.
"""
import os
import random
import re
import resource
import select
import signal
import socket
import struct
import subprocess
import threading
import time

from proxykit import ephemeral_range, stop_process

LOOPBACK = "127.0.0.1"

# PROXY protocol v2 (proxy-protocol.txt section 2.2).
PPV2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
PPV2_FIXED = 16  # signature, version/command, family/transport, length


# ---------------------------------------------------------------- ports

def _bind_pair(port, host=LOOPBACK):
    """A UDP and a TCP socket bound to host:port (TCP with SO_REUSEADDR), or
    None when either is taken."""
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        u.bind((host, port))
        t.bind((host, port))
        return u, t
    except OSError:
        u.close()
        t.close()
        return None


def bound_pair(host=LOOPBACK):
    """A UDP and a TCP socket bound to one port number, outside the kernel's
    ephemeral range (the TCP port is closed and reopened by the tests, and a
    port in that range could meanwhile become some outgoing connection's
    local port)."""
    lo, hi = ephemeral_range()
    candidates = [p for p in range(20000, 65000) if not lo <= p <= hi] or list(range(20000, 32000))
    for _ in range(500):
        pair = _bind_pair(random.choice(candidates), host)
        if pair is not None:
            return pair
    raise AssertionError("no port free for both UDP and TCP outside the ephemeral range")


# ---------------------------------------------------------------- PROXY v2

def parse_ppv2(data):
    """Splits a datagram into (header, payload). header is None when data does
    not start with the PROXY v2 signature; otherwise a dict with the raw
    fixed fields (ver_cmd, fam, length) and, for AF_INET (fam 0x1_), the
    addresses src and dst as (ip, port). Raises ValueError on a header that
    is cut short."""
    if not data.startswith(PPV2_SIGNATURE):
        return None, data
    if len(data) < PPV2_FIXED:
        raise ValueError(f"PROXY v2 header cut short: {data!r}")
    ver_cmd, fam, length = struct.unpack(">BBH", data[12:16])
    if len(data) < PPV2_FIXED + length:
        raise ValueError(f"PROXY v2 address block cut short: {data!r}")
    block = data[PPV2_FIXED:PPV2_FIXED + length]
    header = {"ver_cmd": ver_cmd, "fam": fam, "length": length, "raw": data[:PPV2_FIXED + length]}
    if fam >> 4 == 1 and length >= 12:
        src_ip, dst_ip, src_port, dst_port = struct.unpack(">4s4sHH", block[:12])
        header["src"] = (socket.inet_ntoa(src_ip), src_port)
        header["dst"] = (socket.inet_ntoa(dst_ip), dst_port)
    return header, data[PPV2_FIXED + length:]


# ---------------------------------------------------------------- backends

class EchoBackend:
    """A UDP echo server named `name` on 127.0.0.1:port, with a TCP
    listener on the same port number for the health check (the default
    [cluster.health] tcp_port is the backend's own port).

    Each datagram is answered, to its sender, with name + b"|" + payload,
    where payload is the datagram minus a leading PROXY v2 header. `received`
    keeps (sender, raw datagram, header or None) for every datagram.

    close_health(): the TCP port refuses connections (RST); the port stays
    bound by a non-listening socket, so nobody else can take it meanwhile.
    open_health(): listening (and accepting, then closing) again."""

    def __init__(self, name):
        self.name = name
        self.udp, self._tcp = bound_pair()
        self.port = self.udp.getsockname()[1]
        self.addr = f"{LOOPBACK}:{self.port}"
        self.received = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._tcp_listening = False
        self.udp.setblocking(False)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        self.open_health()

    # -- what arrived

    def datagrams(self):
        with self._lock:
            return list(self.received)

    def senders(self):
        """The distinct (ip, port) this backend received datagrams from: the
        balancer's upstream sockets, one per flow."""
        return {src for src, _, _ in self.datagrams()}

    # -- health port

    def open_health(self):
        with self._lock:
            if not self._tcp_listening:
                self._tcp.listen(64)
                self._tcp_listening = True

    def close_health(self):
        with self._lock:
            if not self._tcp_listening:
                return
            self._tcp.close()
            self._tcp = self._placeholder()
            self._tcp_listening = False
        # make sure: a connect must now be refused
        probe = socket.socket()
        probe.settimeout(1.0)
        try:
            probe.connect((LOOPBACK, self.port))
            raise AssertionError(f"{self.name}: a connect to the closed health port succeeded")
        except ConnectionRefusedError:
            pass
        finally:
            probe.close()

    def _placeholder(self):
        """A TCP socket bound to the port, not listening: connects get RST.
        The listener just closed may live on for a moment, while the serving
        thread's select() still holds it, so the bind is retried briefly."""
        deadline = time.monotonic() + 2.0
        while True:
            t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                t.bind((LOOPBACK, self.port))
                return t
            except OSError:
                t.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.005)

    # -- serving

    def _serve(self):
        while not self._stop.is_set():
            with self._lock:
                tcp = self._tcp if self._tcp_listening else None
            watch = [self.udp] + ([tcp] if tcp is not None else [])
            try:
                ready, _, _ = select.select(watch, [], [], 0.02)
            except (OSError, ValueError):
                continue  # the TCP socket was swapped under us
            if self.udp in ready:
                self._echo()
            if tcp is not None and tcp in ready:
                try:
                    c, _ = tcp.accept()
                    c.close()  # a probe: it only needs the handshake
                except OSError:
                    pass

    def _echo(self):
        while True:
            try:
                data, src = self.udp.recvfrom(65536)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            try:
                header, payload = parse_ppv2(data)
            except ValueError:
                header, payload = {"bad": True}, b""
            with self._lock:
                self.received.append((src, data, header))
            try:
                self.udp.sendto(self.name.encode() + b"|" + payload, src)
            except OSError:
                pass

    def close(self):
        self._stop.set()
        self._thread.join(2)
        self.udp.close()
        self._tcp.close()


class ScriptedBackend:
    """A UDP backend on 127.0.0.1 with no health port, for the cases an
    echo cannot play: answer(data, src), which a subclass writes, decides
    what goes back. `senders` holds the (ip, port) it heard from."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((LOOPBACK, 0))
        self.addr = f"{LOOPBACK}:{self.sock.getsockname()[1]}"
        self.sock.settimeout(0.05)
        self.senders = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def answer(self, data, src):
        raise NotImplementedError

    def _serve(self):
        while not self._stop.is_set():
            try:
                data, src = self.sock.recvfrom(65536)
            except (socket.timeout, OSError):
                continue
            self.senders.add(src)
            self.answer(data, src)

    def close(self):
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


# ---------------------------------------------------------------- clients

class Client:
    """One UDP client socket bound to (src_ip, an ephemeral port), talking
    to the balancer at (LOOPBACK, lb_port). Each of its flows is its own
    4-tuple, so a new Client is a new flow."""

    def __init__(self, lb_port, src_ip=LOOPBACK, dst_ip=LOOPBACK):
        self.lb = (dst_ip, lb_port)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((src_ip, 0))
        self.addr = self.sock.getsockname()

    def send(self, payload):
        self.sock.sendto(payload, self.lb)

    def recv(self, timeout=2.0):
        """(backend name, echoed payload) of the next reply, or None when
        nothing came within timeout. Fails when a reply comes from anywhere
        but the balancer's listener or lacks the backend's name."""
        self.sock.settimeout(timeout)
        try:
            data, src = self.sock.recvfrom(65536)
        except socket.timeout:
            return None
        assert src == self.lb, f"reply from {src}, expected the listener {self.lb}"
        name, sep, payload = data.partition(b"|")
        assert sep, f"reply without a backend name: {data!r}"
        return name.decode(), payload

    def ask(self, payload=b"ping", timeout=2.0):
        """Sends payload and returns the name of the backend that answered;
        fails when no answer comes or the echo differs."""
        self.send(payload)
        got = self.recv(timeout)
        assert got is not None, f"no answer to {payload!r} from {self.addr} within {timeout} s"
        name, echoed = got
        assert echoed == payload, f"{name} echoed {echoed!r}, sent {payload!r}"
        return name

    def silent(self, payload=b"ping", wait=0.3):
        """Sends payload and checks that no answer comes within wait."""
        self.send(payload)
        got = self.recv(wait)
        assert got is None, f"{self.addr} got an answer from {got[0]}, expected none"

    def close(self):
        self.sock.close()


# ---------------------------------------------------------------- configs

def _value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return str(v)


def lb_config(backends, inbound=None, cluster=None, health=None, workers=None,
              tag="lb", cluster_tag="pool", listen=LOOPBACK):
    """The TOML of one udp_lb inbound `tag` on 127.0.0.1, port 0, sending
    to cluster `cluster_tag` over backends (EchoBackend objects or strings
    "ip:port[ weight=N]"). inbound, cluster and health are dicts of extra
    keys for [inbound.settings], [[cluster]] and [cluster.health] (health
    None: no health section)."""
    text = ""
    if workers is not None:
        text += f"[runtime]\nworkers = {workers}\n\n"
    text += (f'[[inbound]]\ntag = "{tag}"\nprotocol = "udp_lb"\n'
             f'listen = "{listen}"\nport = 0\n[inbound.settings]\ncluster = "{cluster_tag}"\n')
    for k, v in (inbound or {}).items():
        text += f"{k} = {_value(v)}\n"
    text += '\n[[outbound]]\ntag = "direct"\nprotocol = "freedom"\n\n'
    addrs = [b.addr if isinstance(b, EchoBackend) else b for b in backends]
    text += f'[[cluster]]\ntag = "{cluster_tag}"\nbackends = {_value(addrs)}\n'
    for k, v in (cluster or {}).items():
        text += f"{k} = {_value(v)}\n"
    if health is not None:
        text += "\n[cluster.health]\n"
        for k, v in health.items():
            text += f"{k} = {_value(v)}\n"
    return text


# ---------------------------------------------------------------- the process under test

_METRIC_PAIR = re.compile(r"(\w+)=(\d+)")
# What one reload ends with: applied, nothing to apply, or refused.
_RELOAD_LINE = re.compile(r"^\S+ [A-Z]+ +\S+: (config reload: .*"
                          r"|reload: (?:parse|build) failed, keeping current config: .*)$", re.M)


class LbApp:
    """One etemenanki-app running the config text, its stdout and stderr
    both in a log file. start() waits for the "listening on" line of inbound
    `tag` and reads the port the system picked from it."""

    def __init__(self, app, workdir, text, n_backends, tag="lb", nofile=None):
        self.app = app
        self.nofile = nofile  # RLIMIT_NOFILE (soft and hard) for the process, or None
        self.n_backends = n_backends
        self.workdir = workdir
        self.text = text
        self.tag = tag
        self.proc = None
        self.port = None
        self._log = None
        n = len(list(workdir.glob("udplb-*.toml")))
        self.cfg_path = workdir / f"udplb-{n}.toml"
        self.log_path = workdir / f"udplb-{n}.log"

    def start(self, timeout=10.0):
        self.cfg_path.write_text(self.text)
        self._log = open(self.log_path, "wb")
        limit = None
        if self.nofile is not None:
            def limit():
                resource.setrlimit(resource.RLIMIT_NOFILE, (self.nofile, self.nofile))
        self.proc = subprocess.Popen([self.app, "-c", str(self.cfg_path)], stdin=subprocess.DEVNULL,
                                     stdout=self._log, stderr=subprocess.STDOUT, preexec_fn=limit)
        pattern = re.compile(r"listening on (?:[0-9.]+|\[[0-9a-f:.]+\]):(\d+) \((?:inbound )?"
                             + re.escape(self.tag)
                             + r"[,)]")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = pattern.search(self.log())
            if m:
                self.port = int(m.group(1))
                assert self.port != 0, self.log()
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.01)
        rc = self.proc.poll()
        log = self.log()
        self.stop()
        raise AssertionError(f"udp_lb did not start (rc={rc}); config:\n{self.text}\nlog:\n{log}")

    def log(self):
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def lines_with(self, text):
        return [line for line in self.log().splitlines() if text in line]

    def wait_line(self, text, count=1, timeout=5.0):
        """Waits until the log holds at least count lines containing text;
        returns the count-th. Fails with the log when it does not come."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.lines_with(text)
            if len(found) >= count:
                return found[count - 1]
            if time.monotonic() > deadline:
                raise AssertionError(f"no line #{count} with {text!r} within {timeout} s; log:\n"
                                     + self.log())
            if self.proc.poll() is not None:
                raise AssertionError(f"etemenanki-app exited ({self.proc.returncode}) waiting for "
                                     f"{text!r}; log:\n" + self.log())
            time.sleep(0.02)

    # -- SIGUSR1

    def _blocks(self):
        """The SIGUSR1 blocks of this inbound printed so far, each a dict
        of its lines: "head", "drops", "evicted" (the text after the
        prefix) and "backends" ({addr: (state, rest)}), in order."""
        prefix = f"udp_lb {self.tag}: "
        blocks = []
        for line in self.log().splitlines():
            i = line.find(prefix)
            if i < 0:
                continue
            rest = line[i + len(prefix):]
            if rest.startswith("active_flows="):
                blocks.append({"head": rest, "drops": None, "evicted": None, "backends": {}})
            elif not blocks:
                continue
            elif rest.startswith("drops "):
                blocks[-1]["drops"] = rest
            elif rest.startswith("evicted "):
                blocks[-1]["evicted"] = rest
            elif rest.startswith("backend "):
                _, addr, state, *more = rest.split()
                blocks[-1]["backends"][addr] = (state, " ".join(more))
        return blocks

    def metrics(self, timeout=3.0):
        """Sends SIGUSR1 and returns the block it printed for this inbound:
        a dict of the first line's counters, plus "drops" and "evicted"
        (dicts of their counters) and "backends" ({addr: (state,
        flows_created)}), one line per backend of the cluster: n_backends
        of them (set it when a reload changes the cluster)."""
        want = len(self._blocks()) + 1
        self.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + timeout
        while True:
            blocks = self._blocks()
            if len(blocks) >= want:
                b = blocks[want - 1]
                if b["drops"] and b["evicted"] and len(b["backends"]) >= self.n_backends:
                    break
            if time.monotonic() > deadline:
                raise AssertionError(f"no complete SIGUSR1 block #{want} for {self.tag} within "
                                     f"{timeout} s; log:\n" + self.log())
            if self.proc.poll() is not None:
                raise AssertionError(f"etemenanki-app exited ({self.proc.returncode}) on SIGUSR1; "
                                     "log:\n" + self.log())
            time.sleep(0.02)
        out = {k: int(v) for k, v in _METRIC_PAIR.findall(b["head"])}
        out["drops"] = {k: int(v) for k, v in _METRIC_PAIR.findall(b["drops"])}
        out["evicted"] = {k: int(v) for k, v in _METRIC_PAIR.findall(b["evicted"])}
        out["backends"] = {}
        for addr, (state, more) in b["backends"].items():
            counts = {k: int(v) for k, v in _METRIC_PAIR.findall(more)}
            out["backends"][addr] = (state, counts.get("flows_created"))
        return out

    def wait_metrics(self, cond, timeout=5.0, every=0.1):
        """Reads the metrics until cond(metrics) holds; returns them. Fails
        with the last metrics and the log when it does not within timeout."""
        deadline = time.monotonic() + timeout
        while True:
            m = self.metrics()
            if cond(m):
                return m
            if time.monotonic() > deadline:
                raise AssertionError(f"metrics never matched within {timeout} s; last: {m}\nlog:\n"
                                     + self.log())
            time.sleep(every)

    # -- reloading

    def reload(self, text, n_backends=None, timeout=5.0):
        """Saves text as the config the way an editor does (a temporary
        file renamed over it: the process's watch reloads it) and returns
        the line that ends the reload: "config reload: ..." or "reload:
        ... failed, keeping current config: ...". n_backends: the new
        cluster's backend count, for metrics()."""
        before = len(self._reload_lines())
        self.text = text
        tmp = self.cfg_path.with_name(f".{self.cfg_path.name}.swp")
        tmp.write_text(text)
        os.replace(tmp, self.cfg_path)
        deadline = time.monotonic() + timeout
        while True:
            found = self._reload_lines()
            if len(found) > before:
                if n_backends is not None:
                    self.n_backends = n_backends
                return found[before]
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise AssertionError(f"no reload line within {timeout} s (exit status "
                                     f"{self.proc.poll()}); log:\n" + self.log())
            time.sleep(0.02)

    def _reload_lines(self):
        return _RELOAD_LINE.findall(self.log())

    # -- stopping

    def stop(self):
        return stop_process(self)
