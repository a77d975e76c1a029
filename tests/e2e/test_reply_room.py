"""Issue 32, data loss: a reply our own code writes to a client over layers
(TLS, WebSocket) must wait for the layers' room, never end the connection.

Before the fix, an absolute-form GET through the http inbound over TLS got its
200 and then the connection closed after about 32 KiB ("conn: a reply of
16384 bytes does not fit the client's layers"): the inbound wrote the body
with endpoint_send_all, which failed on a stacked endpoint whose layers had
no room, and paused the upstream only at 64 KiB of socket write queue. The
same held for every reply a driver writes itself: Trojan/VLESS (and VMess)
UDP replies over TLS closed the association when the client read slower than
they came. Each test here moves more than the layers hold at once (8 MiB, or
a burst of datagrams into a client that is not reading) and checks every byte.
"""
import hashlib
import random
import socket
import struct
import subprocess
import threading
import time

import pytest

from adversarialkit import (RawPipe, TlsPipe, WsPipe, client_context, trojan_hash, trojan_request,
                            uuid_bytes, vless_request)
from proxykit import LOOPBACK, HttpTarget, big_sha256, make_cert

BLOB = 8 << 20  # 8 MiB: hundreds of times what the layers hold
WS_PATH = "/proxy"
TROJAN_PASSWORD = "reply room"
VLESS_UUID = "5783a3e7-e373-51cd-8642-c83782b807c5"
UDP_RCVBUF = 4096  # the slow UDP reader's receive buffer


def udp_burst():
    """Datagrams of 1 KiB in the burst: twice what the proxy's socket may
    buffer toward the client (tcp_wmem's maximum), so the rest waits in the
    proxy, past its layers' room and its 256 KiB queue for UDP replies."""
    try:
        wmem = int(open("/proc/sys/net/ipv4/tcp_wmem").read().split()[2])
    except (OSError, ValueError, IndexError):
        wmem = 4 << 20
    return 2 * min(wmem, 16 << 20) // 1024 + 1024


@pytest.fixture(scope="module")
def origin():
    s = HttpTarget("reply-room")
    yield s
    s.close()


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    return make_cert(tmp_path_factory.mktemp("reply-room-pki"))


def inbound(protocol, stream, cert, extra=""):
    """One inbound on {port0} with the stream's layers, a freedom default."""
    text = (f'[[inbound]]\ntag = "in"\nprotocol = "{protocol}"\nlisten = "127.0.0.1"\n'
            'port = {port0}\n' + extra)
    if stream == "tls":
        text += '[inbound.stream]\nnetwork = "tls"\n'
    elif stream == "ws":
        text += f'[inbound.stream]\nnetwork = "ws"\n[inbound.stream.ws]\npath = "{WS_PATH}"\n'
    elif stream == "ws-tls":
        text += ('[inbound.stream]\nnetwork = "ws"\nsecurity = "tls"\n'
                 f'[inbound.stream.ws]\npath = "{WS_PATH}"\n')
    if "tls" in stream:
        text += f'[inbound.stream.tls]\ncertificate = "{cert[0]}"\nkey = "{cert[1]}"\n'
    return text + '\n[[outbound]]\ntag = "direct"\nprotocol = "freedom"\n'


def fit_log(proxy):
    return [l for l in proxy.log().splitlines() if "does not fit" in l]


@pytest.mark.parametrize("protocol", ["http", "mixed"])
def test_issue32_https_proxy_absolute_get_8mib_with_curl(start_proxy, origin, cert, protocol):
    """Issue 32 (data loss): `curl -x https://proxy` fetching an 8 MiB blob by
    absolute-form GET gets every byte (it stopped at 32,563 bytes)."""
    proxy = start_proxy(inbound(protocol, "tls", cert), log_level="debug")
    url = f"http://127.0.0.1:{origin.port}/big/{BLOB}"
    r = subprocess.run(["curl", "-sS", "--max-time", "60", "--proxy-insecure",
                        "-x", f"https://127.0.0.1:{proxy.port}", "-o", "-", url],
                       capture_output=True, timeout=90)
    assert r.returncode == 0, (r.stderr.decode(errors="replace"), len(r.stdout), fit_log(proxy))
    assert len(r.stdout) == BLOB
    assert hashlib.sha256(r.stdout).hexdigest() == big_sha256(BLOB)
    assert fit_log(proxy) == []


def open_pipe(port, stream, deadline, rcvbuf=None):
    """A client connection through the stream's layers; rcvbuf shrinks its
    socket's receive buffer (set before the connect, so the window is small
    from the start)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(10)
    sock.connect((LOOPBACK, port))
    pipe = TlsPipe(sock, client_context(), "localhost", deadline) if "tls" in stream \
        else RawPipe(sock)
    if "ws" in stream:
        pipe = WsPipe(pipe, random.Random(32))
        pipe.upgrade(WS_PATH.encode(), deadline)
    return sock, pipe


def chunk_of(pipe, deadline):
    """The next app bytes the pipe has (b"" after a WebSocket control
    frame); EOFError at the peer's end, TimeoutError at the deadline."""
    if isinstance(pipe, WsPipe):
        if pipe.pending:
            data, pipe.pending = pipe.pending, b""
            return data
        if pipe.frames.problem or pipe.frames.closed is not None:
            raise EOFError(pipe.frames.problem or "WebSocket close")
        data = pipe.pipe.recv_some(deadline)
        if not data:
            raise EOFError("EOF")
        return pipe.frames.feed(data)
    data = pipe.recv_some(deadline)
    if not data:
        raise EOFError("EOF")
    return data


def read_response(pipe, deadline, pause=0.3):
    """(head, body length, body sha256) of one response with a
    Content-Length; pauses before reading the body, so the proxy meets full
    layers first."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += chunk_of(pipe, deadline)
    head, _, rest = buf.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 "), head
    fields = dict(l.split(b": ", 1) for l in head.split(b"\r\n")[1:])
    n = int(fields[b"Content-Length"])
    time.sleep(pause)
    h, got = hashlib.sha256(rest), len(rest)
    try:
        while got < n:
            data = chunk_of(pipe, deadline)
            h.update(data)
            got += len(data)
    except (EOFError, TimeoutError) as e:
        raise AssertionError(f"{type(e).__name__} after {got} of {n} body bytes") from None
    assert got == n, f"{got - n} bytes beyond the body"
    return head, n, h.hexdigest()


@pytest.mark.parametrize("stream", ["ws", "ws-tls", "tls"])
def test_issue32_absolute_get_8mib_over_each_layer(start_proxy, origin, cert, stream):
    """Issue 32 (data loss): the same GET through the http inbound over
    WebSocket, WebSocket over TLS and TLS, read by a client that takes its
    time, twice on one kept-alive connection: 8 MiB byte-exact each time."""
    proxy = start_proxy(inbound("http", stream, cert), log_level="debug")
    deadline = time.monotonic() + 60
    sock, pipe = open_pipe(proxy.port, stream, deadline)
    with sock:
        for _ in range(2):
            pipe.send(f"GET http://127.0.0.1:{origin.port}/big/{BLOB} HTTP/1.1\r\n"
                      f"Host: 127.0.0.1:{origin.port}\r\n\r\n".encode())
            _, n, digest = read_response(pipe, deadline)
            assert (n, digest) == (BLOB, big_sha256(BLOB))
    assert fit_log(proxy) == []


def test_issue32_trojan_fallback_8mib_over_tls(start_proxy, origin, cert):
    """Issue 32: a Trojan inbound over TLS hands a non-Trojan client to its
    fallback (an HTTP origin); an 8 MiB answer reaches the client whole.
    The relay moves it by the layers' room, so this held before the fix
    too: it pins that the fallback's path stays so."""
    extra = (f'[inbound.settings]\nfallback = "127.0.0.1:{origin.port}"\n'
             f'[[inbound.settings.users]]\nname = "u"\npassword = "{TROJAN_PASSWORD}"\n')
    proxy = start_proxy(inbound("trojan", "tls", cert, extra), log_level="debug")
    deadline = time.monotonic() + 60
    sock, pipe = open_pipe(proxy.port, "tls", deadline)
    with sock:
        # not hex: refused at the first byte, the fallback gets it all
        pipe.send(f"GET /big/{BLOB} HTTP/1.1\r\nHost: fallback\r\n\r\n".encode())
        _, n, digest = read_response(pipe, deadline)
        assert (n, digest) == (BLOB, big_sha256(BLOB))


class Burst:
    """A UDP server: each datagram b"burst N" is answered with N datagrams
    of DGRAM bytes, each seq(4) + filler derived from seq; anything else is
    echoed."""

    DGRAM = 1024

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((LOOPBACK, 0))
        self.port = self.sock.getsockname()[1]
        self.stopped = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    @classmethod
    def payload(cls, seq):
        head = struct.pack(">I", seq)
        fill = hashlib.sha256(head).digest() * (cls.DGRAM // 32)
        return head + fill[:cls.DGRAM - 4]

    def _run(self):
        self.sock.settimeout(0.1)
        seq = 0
        while not self.stopped:
            try:
                data, src = self.sock.recvfrom(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            if data.startswith(b"burst "):
                for _ in range(int(data[6:])):
                    self.sock.sendto(self.payload(seq), src)
                    seq += 1
                    if seq % 32 == 0:
                        time.sleep(0.002)  # paced: the proxy's UDP socket drops nothing
            else:
                self.sock.sendto(data, src)

    def close(self):
        self.stopped = True
        self.thread.join(2)
        self.sock.close()


class TrojanUdp:
    """Trojan's UDP ASSOCIATE: ATYP ADDR PORT Length(2) CRLF payload."""
    users = f'[[inbound.settings.users]]\nname = "u"\npassword = "{TROJAN_PASSWORD}"\n'

    @staticmethod
    def request(port):
        return trojan_request(trojan_hash(TROJAN_PASSWORD), port, cmd=3)

    @staticmethod
    def frame(port, payload):
        return (b"\x01" + socket.inet_aton(LOOPBACK) + struct.pack(">HH", port, len(payload))
                + b"\r\n" + payload)

    @staticmethod
    def frames(buf):
        """(payloads, rest) of the frames in buf (IPv4 sources)."""
        out = []
        while len(buf) >= 11:
            assert buf[0] == 1, buf[:16]
            n = struct.unpack(">H", buf[7:9])[0]
            if len(buf) < 11 + n:
                break
            assert buf[9:11] == b"\r\n"
            out.append(buf[11:11 + n])
            buf = buf[11 + n:]
        return out, buf


class VlessUdp:
    """VLESS command 0x02: the answer 00 00, then Length(2) payload."""
    users = f'[[inbound.settings.users]]\nname = "u"\nid = "{VLESS_UUID}"\n'

    def __init__(self):
        self.answered = False

    @staticmethod
    def request(port):
        return vless_request(uuid_bytes(VLESS_UUID), port, cmd=2)

    @staticmethod
    def frame(port, payload):
        return struct.pack(">H", len(payload)) + payload

    def frames(self, buf):
        if not self.answered:
            if len(buf) < 2:
                return [], buf
            assert buf[:2] == b"\x00\x00", buf[:2]
            buf, self.answered = buf[2:], True
        out = []
        while len(buf) >= 2:
            n = struct.unpack(">H", buf[:2])[0]
            if len(buf) < 2 + n:
                break
            out.append(buf[2:2 + n])
            buf = buf[2 + n:]
        return out, buf


@pytest.mark.parametrize("protocol,stream", [("trojan", "tls"), ("vless", "ws-tls")])
def test_issue32_udp_replies_over_layers_to_a_slow_reader(start_proxy, cert, protocol, stream):
    """Issue 32: UDP replies through a Trojan inbound over TLS (and VLESS
    over WebSocket and TLS) while the client does not read: the
    association stays open (it closed once the layers were full), what
    arrives is whole datagrams in order, replies beyond the 256 KiB queue
    are dropped as UDP is, and a datagram sent afterwards still comes back."""
    codec = TrojanUdp() if protocol == "trojan" else VlessUdp()
    proxy = start_proxy(inbound(protocol, stream, cert, codec.users), log_level="debug")
    burst = Burst()
    try:
        deadline = time.monotonic() + 60
        sock, pipe = open_pipe(proxy.port, stream, deadline, rcvbuf=UDP_RCVBUF)
        with sock:
            pipe.send(codec.request(burst.port) + codec.frame(burst.port, b"burst %d" % udp_burst()))
            time.sleep(3.0)  # the replies come while nothing is read
            # a reply is dropped while 256 KiB wait (UDP): asked again until one comes
            buf, seqs, asked = b"", [], 0.0
            while b"still there?" not in seqs:
                if time.monotonic() - asked > 0.5:
                    pipe.send(codec.frame(burst.port, b"still there?"))
                    asked = time.monotonic()
                try:
                    chunk = chunk_of(pipe, min(deadline, time.monotonic() + 0.5))
                except TimeoutError:
                    assert time.monotonic() < deadline, f"no answer; {len(seqs)} replies"
                    continue
                except EOFError:
                    raise AssertionError(f"association closed after {len(seqs)} replies; "
                                         f"{fit_log(proxy)}") from None
                frames, buf = codec.frames(buf + chunk)
                for f in frames:
                    if f == b"still there?":
                        seqs.append(f)
                        continue
                    seq = struct.unpack(">I", f[:4])[0]
                    assert f == Burst.payload(seq), f"datagram {seq} damaged"
                    seqs.append(seq)
            numbers = [s for s in seqs if isinstance(s, int)]
            assert numbers == sorted(numbers)
            # more than the layers hold came through before any drop
            assert len(numbers) * Burst.DGRAM > 64 * 1024, len(numbers)
    finally:
        burst.close()
    assert fit_log(proxy) == []
