"""Helpers for the proxy end-to-end tests: the process under test, loopback
target servers run in threads, and a small SOCKS client on raw sockets.

Standard library only. Everything binds 127.0.0.1.
"""
import asyncio
import hashlib
import http.server
import ipaddress
import os
import resource
import signal
import socket
import socketserver
import ssl
import struct
import subprocess
import threading
import time

import pytest

LOOPBACK = "127.0.0.1"


# ---------------------------------------------------------------- sockets

def free_port(kind=socket.SOCK_STREAM, host=LOOPBACK):
    """A port the kernel just handed out on host (released again)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, kind) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def recv_exact(sock, n):
    """Exactly n bytes; raises EOFError with what came when the peer closes first."""
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError(f"EOF after {len(buf)} of {n} bytes: {bytes(buf)!r}")
        buf += chunk
    return bytes(buf)


def recv_all(sock, timeout=3.0):
    """Everything until EOF (or until timeout, then raises socket.timeout)."""
    sock.settimeout(timeout)
    buf = bytearray()
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return bytes(buf)
        buf += chunk


def recv_until_closed(sock, timeout=3.0):
    """Everything until EOF or a reset (what came before a reset is kept)."""
    sock.settimeout(timeout)
    buf = bytearray()
    while True:
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            return bytes(buf)
        if not chunk:
            return bytes(buf)
        buf += chunk


def wait_closed(sock, timeout):
    """Seconds until the peer closed (recv returned b"" or the connection was
    reset), discarding any bytes; None when still open after timeout."""
    start = time.monotonic()
    deadline = start + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        sock.settimeout(left)
        try:
            if not sock.recv(65536):
                return time.monotonic() - start
        except socket.timeout:
            return None
        except (ConnectionResetError, BrokenPipeError):
            return time.monotonic() - start


def connect(port, timeout=5.0, host=LOOPBACK):
    s = socket.create_connection((host, port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


# ---------------------------------------------------------------- the process under test

def ephemeral_range():
    """The kernel's ephemeral port range (where connect() picks ports)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split())
            return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


def stop_process(owner):
    """Stops owner.proc, a process a test started: SIGTERM, then SIGKILL
    after 3 s; only that process. Closes owner._log. Returns the exit status
    (negative: the signal that ended it; "killed" when SIGTERM did not stop
    it in time; None when it never started)."""
    status = None
    if owner.proc is not None:
        if owner.proc.poll() is None:
            owner.proc.send_signal(signal.SIGTERM)
            try:
                status = owner.proc.wait(3)
            except subprocess.TimeoutExpired:
                owner.proc.kill()
                owner.proc.wait(5)
                status = "killed"
        else:
            status = owner.proc.returncode
    if owner._log is not None:
        owner._log.close()
        owner._log = None
    return status


def log_text(path):
    """The text of a process's log file; "" before there is one (path None
    or not written yet)."""
    try:
        return path.read_text(errors="replace")
    except (OSError, AttributeError):
        return ""


def stop_cleanly(started, what="proxy"):
    """Fixture teardown: stops every process in started (objects with
    .proc, .stop(), .cfg_path and .log()) and fails the test when one still
    running did not exit 0 on SIGTERM. One that exited already, e.g. after
    a test's own SIGTERM, is that test's business."""
    unclean = []
    for p in started:
        running = p.proc is not None and p.proc.poll() is None
        status = p.stop()
        if running and status != 0:
            unclean.append(f"{p.cfg_path.name}: exit status {status}\n{p.log()}")
    if unclean:
        pytest.fail(f"{what} did not stop cleanly:\n" + "\n".join(unclean), pytrace=False)


class Proxy:
    """One etemenanki-app process. The config is a format string whose
    {port0}, {port1}, ... are filled with free ports; listen_ports names which
    of them must accept before the proxy counts as started."""

    def __init__(self, app, workdir, config, n_ports=1, extra=None, log_level=None,
                 host=LOOPBACK, wait_for_log=True, cpus=None, nofile=None, env=None):
        self.app = app
        self.env = env  # extra environment variables (None: the test's own environment)
        self.cpus = cpus  # the CPU affinity to start it with (None: the test's own)
        self.nofile = nofile  # its RLIMIT_NOFILE, soft and hard (None: the test's own)
        self.workdir = workdir
        self.template = config
        self.n_ports = n_ports
        self.extra = extra or {}
        self.log_level = log_level
        self.host = host
        self.wait_for_log = wait_for_log
        self.proc = None
        self.ports = []
        self.cfg_path = None
        self.log_path = None
        self._log = None

    @property
    def port(self):
        return self.ports[0]

    def start(self, attempts=4):
        for attempt in range(attempts):
            self.ports = [free_port(host=self.host) for _ in range(self.n_ports)]
            fill = {f"port{i}": p for i, p in enumerate(self.ports)}
            fill.update(self.extra)
            text = self.template.format(**fill)
            n = len(list(self.workdir.glob("proxy-*.toml")))
            self.cfg_path = self.workdir / f"proxy-{n}.toml"
            self.cfg_path.write_text(text)
            self.log_path = self.workdir / f"proxy-{n}.log"
            self._log = open(self.log_path, "wb")
            args = [self.app, "-c", str(self.cfg_path)]
            if self.log_level:
                args += ["-l", self.log_level]
            env = dict(os.environ, **self.env) if self.env else None
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, preexec_fn=self._preexec,
                                         stdout=self._log, stderr=subprocess.STDOUT, env=env)
            if self._wait_ready(10.0):
                return self
            rc = self.proc.poll()
            log = self.log()
            self.stop()
            if rc is not None and "already in use" in log and attempt + 1 < attempts:
                continue  # a port raced with another process: pick new ones
            raise AssertionError(f"proxy did not start (rc={rc}); log:\n{log}")
        raise AssertionError("unreachable")

    def _preexec(self):
        if self.cpus:
            os.sched_setaffinity(0, self.cpus)
        if self.nofile:
            resource.setrlimit(resource.RLIMIT_NOFILE, (self.nofile, self.nofile))

    def _wait_ready(self, timeout):
        """Every port accepts and, with wait_for_log, the log has announced
        every listener. The ports accept before the program has installed its
        SIGTERM handler (see test_sigterm_right_after_start); the log lines
        come just before it does, so a test that stops the proxy soon after
        starting it does not run into that window."""
        deadline = time.monotonic() + timeout
        pending = list(self.ports)
        while pending and time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with socket.create_connection((self.host, pending[0]), timeout=0.5):
                    pass
                pending.pop(0)
            except OSError:
                time.sleep(0.02)
        if pending:
            return False
        while self.wait_for_log and time.monotonic() < deadline:
            lines = [l for l in self.log().splitlines() if "supervisor: listening on " in l]
            if all(any(f":{p} (" in l for l in lines) for p in self.ports):
                time.sleep(0.01)
                return True
            if self.proc.poll() is not None:
                return False
            time.sleep(0.01)
        return not self.wait_for_log

    def log(self):
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def terminate(self, timeout=2.0):
        """SIGTERM; returns (exit code, seconds) or (None, seconds) when it
        did not exit in time."""
        start = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            rc = None
        return rc, time.monotonic() - start

    def stop(self):
        return stop_process(self)


# ---------------------------------------------------------------- target servers

class _ThreadedServer:
    """Runs a socketserver-style server in a daemon thread."""

    def __init__(self, server):
        self.server = server
        self.port = server.server_address[1]
        self.thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class HttpTarget(_ThreadedServer):
    """An HTTP/1.1 origin server. Every response is exactly

        HTTP/1.1 200 OK\\r\\nContent-Type: text/plain\\r\\nContent-Length: N\\r\\n\\r\\n<body>

    with body = self.body(path, request body); each request is recorded as
    (method, path, Host field, client port, header fields as (name, value)).
    GET /big/N answers N bytes of big_body(N) instead."""

    def __init__(self, name="origin", tls_context=None):
        target = self
        self.name = name
        self.requests = []
        self.lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _answer(self):
                with target.lock:
                    target.requests.append((self.command, self.path, self.headers.get("Host"),
                                            self.client_address[1], list(self.headers.items())))
                if self.path.startswith("/big/"):
                    n = int(self.path[5:])
                    self.send_response_only(200)
                    self.send_header("Content-Length", str(n))
                    self.end_headers()
                    for chunk in big_chunks(n):
                        self.wfile.write(chunk)
                    return
                length = int(self.headers.get("Content-Length") or 0)
                sent = self.rfile.read(length) if length else b""
                body = target.body(self.path, sent)
                self.send_response_only(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_POST = do_HEAD = _answer

        server = http.server.ThreadingHTTPServer((LOOPBACK, 0), Handler)
        server.daemon_threads = True
        server.block_on_close = False
        if tls_context is not None:
            server.socket = tls_context.wrap_socket(server.socket, server_side=True)
        super().__init__(server)

    def body(self, path, sent=b""):
        return f"{self.name} says hello to {path}\n".encode() + sent

    @staticmethod
    def response(body):
        return (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                b"Content-Length: %d\r\n\r\n" % len(body)) + body


_BIG_BLOCK = hashlib.sha512(b"etemenanki").digest() * (1 << 14)  # 1 MiB, fixed


def big_chunks(n):
    """The n bytes of a big body, in chunks of at most 1 MiB."""
    while n > 0:
        k = min(n, len(_BIG_BLOCK))
        yield _BIG_BLOCK[:k]
        n -= k


def big_sha256(n):
    h = hashlib.sha256()
    for chunk in big_chunks(n):
        h.update(chunk)
    return h.hexdigest()


def echoed_sha256(proxy_port, echo, n, timeout):
    """n bytes of big_chunks through a SOCKS5 proxy to echo (an EchoServer)
    and back, read while they are written (so it needs no half-close on the
    way); the hex sha256 of what came back, to compare with big_sha256(n).
    timeout bounds each read and the writer's end."""
    with socks5_connect(proxy_port, LOOPBACK, echo.port) as s:
        sender = threading.Thread(target=lambda: [s.sendall(c) for c in big_chunks(n)])
        sender.start()
        h, got = hashlib.sha256(), 0
        s.settimeout(timeout)
        while got < n:
            chunk = s.recv(1 << 20)
            assert chunk, f"EOF after {got} bytes"
            h.update(chunk)
            got += len(chunk)
        sender.join(timeout)
        return h.hexdigest()


class RawOrigin(_ThreadedServer):
    """An HTTP/1.1 origin whose answers are written byte for byte: ANSWERS maps
    a path to the exact response. It reads request bodies framed by
    Content-Length or chunked, keeps each request as (method, path, decoded
    body, raw head), and serves requests on one connection until the answer's
    framing needs a close. /echo answers the decoded body with a length."""

    ANSWERS = {
        "/chunked": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n"),
        "/no-content": b"HTTP/1.1 204 No Content\r\nX-Why: nothing\r\n\r\n",
        "/continue": (b"HTTP/1.1 100 Continue\r\n\r\n"
                      b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"),
        "/hop": (b"HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Secret\r\nKeep-Alive: timeout=5\r\n"
                 b"X-Secret: hidden\r\nX-Public: shown\r\nContent-Length: 3\r\n\r\nhop"),
        "/until-close": b"HTTP/1.1 200 OK\r\nX-Framing: close\r\n\r\nthe body ends with the connection",
        # these two close the connection after the answer, with and without notice
        "/last": b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 4\r\n\r\nlast",
        "/then-close": b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ngone",
    }
    CLOSING = ("/until-close", "/last", "/then-close")
    HEAD_ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n"

    def __init__(self):
        origin = self
        self.requests = []

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                while origin._one(self.rfile, self.wfile, self.client_address[1]):
                    pass

        server = socketserver.ThreadingTCPServer((LOOPBACK, 0), Handler)
        server.daemon_threads = True
        server.block_on_close = False
        super().__init__(server)

    def _one(self, rfile, wfile, client_port):
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            line = rfile.readline(65536)
            if not line:
                return False
            head += line
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ")
        fields = {}
        for line in lines[1:]:
            if line:
                k, _, v = line.partition(":")
                fields[k.strip().lower()] = v.strip()
        body = b""
        if fields.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size = int(rfile.readline().split(b";")[0], 16)
                if size == 0:
                    while rfile.readline() not in (b"\r\n", b""):
                        pass
                    break
                body += rfile.read(size)
                rfile.readline()
        elif "content-length" in fields:
            body = rfile.read(int(fields["content-length"]))
        self.requests.append((method, path, body, head, client_port))
        if method == "HEAD":
            answer = self.HEAD_ANSWER
        elif path.split("?")[0] == "/echo":
            answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body
        else:
            answer = self.ANSWERS[path.split("?")[0]]
        wfile.write(answer)
        wfile.flush()
        return path not in self.CLOSING


class Acceptor:
    """A TCP server on 127.0.0.1 that subclasses give a serve(c): one thread
    accepts, and each connection is served on a thread of its own, closed
    when serve returns; an OSError in serve ends that connection quietly.
    connections counts the accepted ones."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind((LOOPBACK, 0))
        self.sock.listen(512)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve_guarded, args=(c,), daemon=True).start()

    def _serve_guarded(self, c):
        with c:
            try:
                self.serve(c)
            except OSError:
                pass

    def serve(self, c):
        raise NotImplementedError

    def close(self):
        try:  # on Linux a shutdown wakes the thread blocked in accept; a close does not
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


class Spout(Acceptor):
    """Answers each connection with as many bytes as the 4-byte big-endian
    number it first receives asks for, then its FIN; closes when the peer
    does."""

    def serve(self, c):
        try:
            n = struct.unpack(">I", recv_exact(c, 4))[0]
        except EOFError:
            return
        c.sendall(bytes(n))
        c.shutdown(socket.SHUT_WR)
        c.settimeout(30)
        while c.recv(65536):
            pass


class Sha256Sink(_ThreadedServer):
    """Reads until the client's FIN, then answers the hex sha256 of what came
    (64 bytes) and closes."""

    def __init__(self):
        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                sock = self.request
                h = hashlib.sha256()
                buf = bytearray(1 << 20)
                view = memoryview(buf)
                while True:
                    n = sock.recv_into(buf)
                    if n == 0:
                        break
                    h.update(view[:n])
                sock.sendall(h.hexdigest().encode())

        server = socketserver.ThreadingTCPServer((LOOPBACK, 0), Handler)
        server.daemon_threads = True
        server.block_on_close = False
        super().__init__(server)


class EchoServer:
    """A TCP echo server on an asyncio loop in its own thread (it holds
    thousands of connections without a thread each)."""

    def __init__(self, host=LOOPBACK):
        self.loop = asyncio.new_event_loop()
        self.connections = 0
        ready = threading.Event()

        async def handle(reader, writer):
            self.connections += 1
            try:
                while True:
                    data = await reader.read(65536)
                    if not data:
                        break
                    writer.write(data)
                    await writer.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                writer.close()

        async def main():
            self.server = await asyncio.start_server(handle, host, 0, backlog=4096)
            self.port = self.server.sockets[0].getsockname()[1]
            ready.set()

        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(main(), self.loop)
        assert ready.wait(5)

    def close(self):
        async def stop():
            self.server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:  # connections still open: end them while the loop runs
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


class UdpServer:
    """A UDP socket on 127.0.0.1 served by a daemon thread: each datagram
    goes to handle(data, src). Subclasses set their state before calling
    __init__, which starts the thread."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((LOOPBACK, 0))
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self._stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self._stop:
            try:
                data, src = self.sock.recvfrom(65535)
            except socket.timeout:
                continue
            except OSError:
                return
            self.handle(data, src)

    def handle(self, data, src):
        raise NotImplementedError

    def close(self):
        self._stop = True
        self.thread.join(2)
        self.sock.close()


class UdpEcho(UdpServer):
    """Echoes every datagram to its sender; keeps (source, payload) of each."""

    def __init__(self):
        self.received = []
        super().__init__()

    def handle(self, data, src):
        self.received.append((src, data))
        self.sock.sendto(data, src)


class DnsServer(UdpServer):
    """A UDP DNS server on 127.0.0.1. mode "nxdomain" answers every query
    with RCODE 3 (no such name); mode "silent" reads and never answers."""

    def __init__(self, mode):
        self.mode = mode
        self.queries = 0
        super().__init__()

    def handle(self, q, src):
        self.queries += 1
        if self.mode != "nxdomain" or len(q) < 12:
            return
        # the question: QNAME labels, then QTYPE and QCLASS
        i = 12
        while i < len(q) and q[i] != 0:
            i += 1 + q[i]
        question = q[12:i + 5]
        flags = 0x8000 | (q[2] << 8 & 0x7900) | 0x0080 | 3  # QR, opcode+RD, RA, NXDOMAIN
        self.sock.sendto(q[:2] + struct.pack(">HHHHH", flags, 1, 0, 0, 0) + question, src)


def make_cert(directory, name="localhost", san="DNS:localhost,IP:127.0.0.1", days=1):
    """A self-signed P-256 certificate for CN=name with subjectAltName san,
    via the openssl CLI; returns the paths (cert.pem, key.pem) in directory."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", str(days),
                    "-subj", f"/CN={name}", "-addext", f"subjectAltName={san}",
                    "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=30)
    return cert, key


def tls_server_context(cert, key):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(cert), str(key))
    return ctx


# ---------------------------------------------------------------- SOCKS client

def socks_addr(host, port):
    """ATYP ADDR PORT for an IP literal or a domain name (RFC 1928 section 5)."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        name = host.encode()
        return bytes([3, len(name)]) + name + struct.pack(">H", port)
    atyp = 1 if ip.version == 4 else 4
    return bytes([atyp]) + ip.packed + struct.pack(">H", port)


def read_socks_addr(sock):
    """Reads ATYP ADDR PORT; returns (host text, port)."""
    atyp = recv_exact(sock, 1)[0]
    if atyp == 1:
        host = socket.inet_ntop(socket.AF_INET, recv_exact(sock, 4))
    elif atyp == 4:
        host = socket.inet_ntop(socket.AF_INET6, recv_exact(sock, 16))
    elif atyp == 3:
        host = recv_exact(sock, recv_exact(sock, 1)[0]).decode()
    else:
        raise AssertionError(f"bad ATYP {atyp}")
    return host, struct.unpack(">H", recv_exact(sock, 2))[0]


def parse_udp_header(pkt):
    """RSV(2) FRAG ATYP ADDR PORT DATA -> ((host, port), data)."""
    assert pkt[:3] == b"\0\0\0", pkt[:3]
    atyp = pkt[3]
    if atyp == 1:
        host, rest = socket.inet_ntop(socket.AF_INET, pkt[4:8]), pkt[8:]
    elif atyp == 4:
        host, rest = socket.inet_ntop(socket.AF_INET6, pkt[4:20]), pkt[20:]
    elif atyp == 3:
        n = pkt[4]
        host, rest = pkt[5:5 + n].decode(), pkt[5 + n:]
    else:
        raise AssertionError(f"bad ATYP {atyp}")
    return (host, struct.unpack(">H", rest[:2])[0]), rest[2:]


def socks5_greet(sock, user=None, password=None):
    """Method negotiation and, with a user, RFC 1929 authentication.
    Returns the auth STATUS byte (0 = accepted) or None without a user."""
    method = 2 if user is not None else 0
    sock.sendall(bytes([5, 1, method]))
    assert recv_exact(sock, 2) == bytes([5, method])
    if user is None:
        return None
    u, p = user.encode(), password.encode()
    sock.sendall(bytes([1, len(u)]) + u + bytes([len(p)]) + p)
    ver, status = recv_exact(sock, 2)
    assert ver == 1
    return status


def socks5_request(sock, host, port, cmd=1):
    """Sends the request; returns (REP, (bound host, bound port))."""
    sock.sendall(bytes([5, cmd, 0]) + socks_addr(host, port))
    ver, rep, rsv = recv_exact(sock, 3)
    assert (ver, rsv) == (5, 0), (ver, rsv)
    return rep, read_socks_addr(sock)


def socks5_connect(proxy_port, host, port, user=None, password=None, timeout=5.0):
    """A relayed socket to host:port through the proxy; asserts success."""
    s = connect(proxy_port, timeout)
    try:
        status = socks5_greet(s, user, password)
        assert status in (None, 0), f"auth status {status}"
        rep, _ = socks5_request(s, host, port)
        assert rep == 0, f"REP {rep:#x}"
    except BaseException:
        s.close()
        raise
    return s


async def socks5_echo_async(proxy_port, host, port, message, timeout=20.0):
    """asyncio: CONNECT through the proxy, send message, read it back."""
    async def run():
        reader, writer = await asyncio.open_connection(LOOPBACK, proxy_port)
        try:
            writer.write(bytes([5, 1, 0]))
            assert await reader.readexactly(2) == b"\x05\x00"
            writer.write(bytes([5, 1, 0]) + socks_addr(host, port))
            head = await reader.readexactly(4)
            assert head[:2] == b"\x05\x00", head
            assert head[3] == 1, head
            await reader.readexactly(6)
            writer.write(message)
            await writer.drain()
            return await reader.readexactly(len(message))
        finally:
            writer.close()
    return await asyncio.wait_for(run(), timeout)


# The SOCKS5 REP of success (RFC 1928 section 6).
REP_OK = 0


def socks_open(proxy_port, host, port, source=None):
    """A SOCKS5 CONNECT; asserts the success reply (a blackholed flow gets it
    too) and returns the socket. source binds the client side first."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        if source is not None:
            s.bind((source, 0))
        s.connect((LOOPBACK, proxy_port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        socks5_greet(s)
        rep, _ = socks5_request(s, host, port)
        assert rep == REP_OK, f"REP {rep:#x}"
    except BaseException:
        s.close()
        raise
    return s


def closed_without_bytes(sock, timeout=2.0):
    """"eof" when the peer closes (or resets) with no byte sent, the bytes
    when some came, "open" when it is still open after timeout."""
    sock.settimeout(timeout)
    got = b""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return got or "open"
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            return got or "open"
        except (ConnectionResetError, BrokenPipeError):
            return got or "eof"
        if not chunk:
            return got or "eof"
        got += chunk


def assert_blackholed(sock, payload=b"into the void"):
    """The flow was blackholed: whatever the client sends, EOF and no byte."""
    try:
        sock.sendall(payload)
    except (ConnectionResetError, BrokenPipeError):
        return
    assert closed_without_bytes(sock) == "eof"


def assert_echoes(sock, payload=b"echo me"):
    sock.sendall(payload)
    assert recv_exact(sock, len(payload)) == payload


def udp_packet(host, port, data):
    return b"\0\0\0" + socks_addr(host, port) + data


def udp_echoed(proxy_port, udp_echo, logs, sizes, first=0):
    """One datagram of each size through one SOCKS5 UDP association on
    proxy_port to udp_echo (a UdpEcho), each filled with byte first + its
    index, comes back from the echo's address unchanged; logs() is said
    when one does not."""
    with socket.create_connection((LOOPBACK, proxy_port), timeout=5) as ctl, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as a:
        socks5_greet(ctl)
        rep, relay = socks5_request(ctl, "0.0.0.0", 0, cmd=3)
        assert rep == 0, logs()
        relay = (LOOPBACK if relay[0] in ("0.0.0.0", "::") else relay[0], relay[1])
        a.settimeout(5)
        for i, n in enumerate(sizes):
            msg = bytes([first + i]) * n
            a.sendto(b"\0\0\0" + socks_addr(LOOPBACK, udp_echo.port) + msg, relay)
            try:
                pkt, _ = a.recvfrom(65535)
            except socket.timeout:
                raise AssertionError(f"no answer to datagram {i}\n{logs()}")
            assert parse_udp_header(pkt) == ((LOOPBACK, udp_echo.port), msg)


class Association:
    """A SOCKS5 UDP ASSOCIATE: the control connection and a client UDP socket
    bound on the control connection's IP."""

    def __init__(self, proxy_port, source=LOOPBACK, user=None, password=None):
        self.ctl = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.ctl.settimeout(5)
        self.ctl.bind((source, 0))
        self.ctl.connect((LOOPBACK, proxy_port))
        assert socks5_greet(self.ctl, user, password) in (None, 0)
        rep, self.relay = socks5_request(self.ctl, "0.0.0.0", 0, cmd=3)
        assert rep == REP_OK, f"REP {rep:#x}"
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind((source, 0))

    def send(self, host, port, data):
        self.udp.sendto(udp_packet(host, port, data), self.relay)

    def recv(self, timeout=3.0):
        """((peer host, peer port), payload) of the next reply."""
        self.udp.settimeout(timeout)
        pkt, src = self.udp.recvfrom(65535)
        assert src == self.relay, src
        return parse_udp_header(pkt)

    def silent(self, wait=0.5):
        """True when no reply comes within wait."""
        self.udp.settimeout(wait)
        try:
            self.udp.recvfrom(65535)
        except (socket.timeout, ConnectionRefusedError):
            return True
        return False

    def echo(self, peer, data):
        self.send(LOOPBACK, peer.port, data)
        assert self.recv() == ((LOOPBACK, peer.port), data)

    def close(self):
        self.udp.close()
        self.ctl.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class HttpReader:
    """Reads HTTP/1.1 responses off a socket, keeping bytes that belong to
    the next one (pipelining)."""

    def __init__(self, sock, timeout=5.0):
        self.sock = sock
        self.sock.settimeout(timeout)
        self.buf = b""

    def _more(self, what):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise EOFError(f"EOF inside {what}: {self.buf!r}")
        self.buf += chunk

    def response(self):
        """One response framed by Content-Length (or by the close when it has
        none): (head up to and including the blank line, body)."""
        while b"\r\n\r\n" not in self.buf:
            self._more("a response head")
        end = self.buf.index(b"\r\n\r\n") + 4
        head, self.buf = self.buf[:end], self.buf[end:]
        length = None
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        if length is None:
            body, self.buf = self.buf + recv_all(self.sock), b""
            return head, body
        while len(self.buf) < length:
            self._more("a body")
        body, self.buf = self.buf[:length], self.buf[length:]
        return head, body

    def raw_response(self):
        """The response's exact bytes, head and body."""
        head, body = self.response()
        return head + body

    def at_eof(self, timeout=2.0):
        """True when the peer closes with no further bytes within timeout."""
        if self.buf:
            return False
        self.sock.settimeout(timeout)
        try:
            extra = self.sock.recv(65536)
        except socket.timeout:
            return False
        except ConnectionResetError:
            return True
        self.buf += extra
        return extra == b""


def header_lines(head):
    """The field lines of a response head, without the status line."""
    return head.split(b"\r\n")[1:-2]
