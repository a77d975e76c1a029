"""Issue 32, data loss: a reply our own code writes to a client over layers
(TLS, WebSocket) must wait for the layers' room, never end the connection.

Before the fix, an absolute-form GET through the http inbound over TLS got its
200 and then the connection closed after about 32 KiB ("conn: a reply of
16384 bytes does not fit the client's layers"): the inbound wrote the body
with endpoint_send_all, which failed on a stacked endpoint whose layers had
no room, and paused the upstream only at 64 KiB of socket write queue. The
same held for every reply a driver writes itself: Trojan/VLESS and VMess UDP
replies over TLS closed the association when the client read slower than
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

from adversarialkit import RawPipe, TlsPipe, WsPipe, client_context, trojan_hash, trojan_request
from proxykit import LOOPBACK, HttpTarget, big_sha256, make_cert

BLOB = 8 << 20  # 8 MiB: hundreds of times what the layers hold
WS_PATH = "/proxy"
TROJAN_PASSWORD = "reply room"


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


def open_pipe(port, stream, deadline):
    sock = socket.create_connection((LOOPBACK, port), timeout=10)
    pipe = TlsPipe(sock, client_context(), "localhost", deadline) if "tls" in stream \
        else RawPipe(sock)
    if "ws" in stream:
        pipe = WsPipe(pipe, random.Random(32))
        pipe.upgrade(WS_PATH.encode(), deadline)
    return sock, pipe


def read_head(pipe, deadline):
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        head += pipe.read_exact(1, deadline)
    return head


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
            head = read_head(pipe, deadline)
            assert head.startswith(b"HTTP/1.1 200 "), head
            assert f"Content-Length: {BLOB}\r\n".encode() in head, head
            h, got = hashlib.sha256(), 0
            time.sleep(0.3)  # the proxy meets full layers before the first read
            while got < BLOB:
                chunk = pipe.read_exact(min(1 << 20, BLOB - got), deadline)
                h.update(chunk)
                got += len(chunk)
            assert h.hexdigest() == big_sha256(BLOB)
    assert fit_log(proxy) == []


def test_issue32_trojan_fallback_8mib_over_tls(start_proxy, origin, cert):
    """Issue 32: a Trojan inbound over TLS hands a non-Trojan client to its
    fallback (an HTTP origin); an 8 MiB answer reaches the client whole."""
    extra = (f'[inbound.settings]\nfallback = "127.0.0.1:{origin.port}"\n'
             f'[[inbound.settings.users]]\nname = "u"\npassword = "{TROJAN_PASSWORD}"\n')
    proxy = start_proxy(inbound("trojan", "tls", cert, extra))
    deadline = time.monotonic() + 60
    sock, pipe = open_pipe(proxy.port, "tls", deadline)
    with sock:
        pipe.send(f"GET /big/{BLOB} HTTP/1.1\r\nHost: fallback\r\n\r\n".encode()
                  + b"x" * 64)  # longer than a Trojan request: refused at once
        head = read_head(pipe, deadline)
        assert head.startswith(b"HTTP/1.1 200 "), head
        time.sleep(0.3)
        body = pipe.read_exact(BLOB, deadline)
        assert hashlib.sha256(body).hexdigest() == big_sha256(BLOB)


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


def trojan_udp_frame(port, payload):
    return (b"\x01" + socket.inet_aton(LOOPBACK) + struct.pack(">HH", port, len(payload))
            + b"\r\n" + payload)


def trojan_udp_frames(buf):
    """(payloads, rest) of the Trojan UDP frames in buf (IPv4 sources)."""
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


def test_issue32_trojan_udp_replies_over_tls_to_a_slow_reader(start_proxy, cert):
    """Issue 32: UDP replies through a Trojan inbound over TLS while the
    client does not read: the association stays open (it closed once the
    layers were full), what arrives is whole datagrams in order, and a
    datagram sent afterwards still comes back."""
    extra = f'[[inbound.settings.users]]\nname = "u"\npassword = "{TROJAN_PASSWORD}"\n'
    proxy = start_proxy(inbound("trojan", "tls", cert, extra), log_level="debug")
    burst = Burst()
    try:
        deadline = time.monotonic() + 60
        sock, pipe = open_pipe(proxy.port, "tls", deadline)
        with sock:
            req = trojan_request(trojan_hash(TROJAN_PASSWORD), burst.port, cmd=3)
            pipe.send(req + trojan_udp_frame(burst.port, b"burst 512"))
            time.sleep(2.0)  # 512 KiB of replies while nothing is read
            buf, seqs = b"", []
            pipe.send(trojan_udp_frame(burst.port, b"still there?"))
            while b"still there?" not in seqs:
                chunk = pipe.recv_some(deadline)
                assert chunk, f"association closed after {len(seqs)} replies; {fit_log(proxy)}"
                frames, buf = trojan_udp_frames(buf + chunk)
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
