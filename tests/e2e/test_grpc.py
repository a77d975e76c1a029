"""The gRPC transport ("gun") against an independent HTTP/2 and gRPC stack:
Debian's python3-grpcio, as a Gun server and as a Gun client.

Each peer is a bridge between a Gun stream and a TCP connection, so a VLESS
flow of ours crosses it unchanged:

  our client  socks -> vless over grpc  -> [grpcio Gun server -> TCP] -> our vless inbound (tcp)
  our server  socks -> vless over tcp   -> [TCP -> grpcio Gun client] -> our vless inbound over grpc

The Hunk message (bytes data = 1) is written and read here from the
protobuf encoding rules, not by our code. A test skips only when grpcio is
missing (scripts/deps.sh installs it)."""
import socket
import threading
import time
from concurrent import futures

import pytest

from proxykit import (EchoServer, UdpEcho, big_sha256, echoed_sha256, recv_exact,
                      socks5_connect, udp_echoed)

try:
    import grpc
except ImportError:  # only when the peer is really absent
    grpc = None

needs_grpcio = pytest.mark.skipif(grpc is None,
                                  reason="python3-grpcio is not installed (scripts/deps.sh)")

UUID = "5aa8b1e4-1f0c-4a8e-9d3f-2b6c7e8f9a01"
SERVICE = "tunnel"
SIXTEEN_MIB = 16 << 20


def varint(n):
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def hunk_encode(data):
    return b"\x0a" + varint(len(data)) + data


def read_varint(msg, i):
    """The varint at msg[i]: (its value, the index after it)."""
    n, shift = 0, 0
    while True:
        b = msg[i]
        i += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return n, i


def hunk_decode(msg):
    """The bytes of every field 1 in the message (a Hunk or a MultiHunk)."""
    out, i = bytearray(), 0
    while i < len(msg):
        key, i = read_varint(msg, i)
        assert key == 0x0A, f"unexpected field key {key:#x}"
        n, i = read_varint(msg, i)
        out += msg[i:i + n]
        i += n
    return bytes(out)


def pipe_to_stream(sock):
    """A request iterator: what the socket reads, then the end (END_STREAM)."""
    while True:
        d = sock.recv(16384)
        if not d:
            return
        yield d


class GunServer:
    """A grpcio server for /<SERVICE>/Tun: each stream becomes a TCP
    connection to target_port, both ways, half-close passed on."""

    def __init__(self, target_port, creds=None):
        def tun(requests, context):
            s = socket.create_connection(("127.0.0.1", target_port))

            def up():
                try:
                    for d in requests:
                        s.sendall(d)
                    s.shutdown(socket.SHUT_WR)
                except (grpc.RpcError, OSError):
                    pass  # the call was cancelled: the reader below ends too

            t = threading.Thread(target=up, daemon=True)
            t.start()
            try:
                while True:
                    d = s.recv(65536)
                    if not d:
                        break
                    yield d
            finally:
                t.join(10)
                s.close()

        handler = grpc.method_handlers_generic_handler(SERVICE, {
            "Tun": grpc.stream_stream_rpc_method_handler(
                tun, request_deserializer=hunk_decode, response_serializer=hunk_encode)})
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        self.server.add_generic_rpc_handlers((handler,))
        addr = "127.0.0.1:0"
        self.port = (self.server.add_secure_port(addr, creds) if creds
                     else self.server.add_insecure_port(addr))
        self.server.start()

    def close(self):
        self.server.stop(0)


class GunClient:
    """A TCP listener whose every connection becomes a grpcio Gun stream to
    127.0.0.1:server_port (a channel each)."""

    def __init__(self, server_port, creds=None, name=None):
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(16)
        self.port = self.lsock.getsockname()[1]
        self.target = f"127.0.0.1:{server_port}"
        self.creds = creds
        self.options = [("grpc.ssl_target_name_override", name)] if name else []
        self.channels = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        ch = (grpc.secure_channel(self.target, self.creds, self.options) if self.creds
              else grpc.insecure_channel(self.target))
        self.channels.append(ch)
        tun = ch.stream_stream(f"/{SERVICE}/Tun", request_serializer=hunk_encode,
                               response_deserializer=hunk_decode)
        try:
            for d in tun(pipe_to_stream(c)):
                c.sendall(d)
            c.shutdown(socket.SHUT_WR)
        except (grpc.RpcError, OSError):
            pass
        finally:
            c.close()

    def close(self):
        self.lsock.close()
        for ch in self.channels:
            ch.close()


def vless_inbound(stream=""):
    return f"""
[[inbound]]
tag = "vless-in"
protocol = "vless"
port = {{port0}}
{stream}
[[inbound.settings.users]]
id = "{UUID}"

[[outbound]]
tag = "direct"
protocol = "freedom"
"""


def socks_to_vless(port, stream=""):
    return f"""
[[inbound]]
tag = "socks-in"
protocol = "socks"
port = {{port0}}

[[outbound]]
tag = "out"
protocol = "vless"
server = "127.0.0.1"
port = {port}
{stream}
[outbound.settings]
id = "{UUID}"
"""


def grpc_stream(tls, side, cert=None, key=None):
    text = f'[{side}.stream]\nnetwork = "grpc"\n'
    if tls:
        text += 'security = "tls"\n'
    text += f'[{side}.stream.grpc]\nservice_name = "{SERVICE}"\n'
    if tls and side == "outbound":
        text += f'[outbound.stream.tls]\nserver_name = "proxy.test"\nca = "{cert}"\n'
    if tls and side == "inbound":
        text += f'[inbound.stream.tls]\ncertificate = "{cert}"\nkey = "{key}"\n'
    return text


def half_close_answered(proxy_port, echo):
    """The client's FIN crosses the Gun stream (END_STREAM) and the answer
    still comes back after it: the stream half-closes, it does not end."""
    with socks5_connect(proxy_port, "127.0.0.1", echo.port) as s:
        s.sendall(b"before the end")
        s.shutdown(socket.SHUT_WR)
        s.settimeout(10)
        got = b""
        while True:
            d = s.recv(4096)
            if not d:
                break
            got += d
        return got


def carries_tcp_and_udp(front, server, gun):
    """Through front, with gun (a grpcio peer) between it and server: 16 MiB
    echoed, a half-close answered, datagrams of every size echoed. Closes
    gun."""
    echo, udp = EchoServer(), UdpEcho()
    try:
        assert echoed_sha256(front.port, echo, SIXTEEN_MIB, 30) == big_sha256(SIXTEEN_MIB)
        assert half_close_answered(front.port, echo) == b"before the end"
        # VLESS carries at most 8192 bytes a datagram (VLESS_UDP_PAYLOAD_MAX)
        udp_echoed(front.port, udp, lambda: front.log() + server.log(), [1, 512, 1400, 8000],
                   first=1)
    finally:
        echo.close()
        udp.close()
        gun.close()


@needs_grpcio
@pytest.mark.parametrize("tls", [True, False], ids=["tls", "h2c"])
def test_our_gun_client_through_a_grpcio_server(procs, pki, tls):
    cert, key = pki
    server = procs(vless_inbound(), log_level="debug")
    creds = (grpc.ssl_server_credentials([(key.read_bytes(), cert.read_bytes())])
             if tls else None)
    gun = GunServer(server.port, creds)
    front = procs(socks_to_vless(gun.port, grpc_stream(tls, "outbound", cert)),
                  log_level="debug")
    carries_tcp_and_udp(front, server, gun)


@needs_grpcio
@pytest.mark.parametrize("tls", [True, False], ids=["tls", "h2c"])
def test_a_grpcio_client_through_our_gun_server(procs, pki, tls):
    cert, key = pki
    server = procs(vless_inbound(grpc_stream(tls, "inbound", cert, key)), log_level="debug")
    creds = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes()) if tls else None
    gun = GunClient(server.port, creds, "proxy.test" if tls else None)
    front = procs(socks_to_vless(gun.port), log_level="debug")
    carries_tcp_and_udp(front, server, gun)


@needs_grpcio
def test_a_grpcio_call_to_another_path_is_answered_unimplemented(procs, pki):
    """A Gun client naming another service gets grpc-status 12 from our
    server, which logs the refusal with the exact text."""
    server = procs(vless_inbound(grpc_stream(False, "inbound")), log_level="debug")
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        tun = ch.stream_stream("/other/Tun", request_serializer=hunk_encode,
                               response_deserializer=hunk_decode)
        with pytest.raises(grpc.RpcError) as e:
            list(tun(iter([b"x"]), timeout=5))
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert 'grpc: wrong path "/other/Tun" (expected "/tunnel/Tun")' in server.log()


def test_many_flows_share_one_connection_up_to_the_stream_limit(procs, pki, tmp_path):
    """One HTTP/2 connection carries up to GUN_STREAMS_MAX (64) flows of one
    outbound: 70 flows open at once from one client use two connections
    (the server's access log names the source of each, and every flow of a
    connection has its source), and every flow carries its own bytes."""
    cert, key = pki
    access = tmp_path / "access.log"
    server = procs(f'[log]\naccess = "{access}"\n' +
                   vless_inbound(grpc_stream(True, "inbound", cert, key)), log_level="debug")
    front = procs(socks_to_vless(server.port, grpc_stream(True, "outbound", cert)),
                  log_level="debug")
    echo = EchoServer()
    socks = []
    try:
        for i in range(70):
            socks.append(socks5_connect(front.port, "127.0.0.1", echo.port))
        for i, s in enumerate(socks):
            s.sendall(b"flow %03d" % i)
        for i, s in enumerate(socks):
            assert recv_exact(s, 8) == b"flow %03d" % i
        lines = access.read_text().splitlines()
        assert len(lines) == 70, lines
        sources = {line.split()[1] for line in lines}
        assert len(sources) == 2, sources
    finally:
        for s in socks:
            s.close()
        echo.close()


def test_a_reset_flow_leaves_the_others_on_its_connection(procs, pki):
    """Closing one flow resets its stream only: the flows beside it on the
    same connection go on."""
    cert, key = pki
    server = procs(vless_inbound(grpc_stream(False, "inbound")), log_level="debug")
    front = procs(socks_to_vless(server.port, grpc_stream(False, "outbound")), log_level="debug")
    echo = EchoServer()
    try:
        a = socks5_connect(front.port, "127.0.0.1", echo.port)
        b = socks5_connect(front.port, "127.0.0.1", echo.port)
        a.sendall(b"a1")
        b.sendall(b"b1")
        assert recv_exact(a, 2) == b"a1" and recv_exact(b, 2) == b"b1"
        a.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
        a.close()  # a reset: the flow ends at once
        for i in range(20):
            b.sendall(b"b%02d" % i)
            assert recv_exact(b, 3) == b"b%02d" % i
        b.close()
    finally:
        echo.close()


def h2_frame(ftype, flags, stream, payload=b""):
    return (len(payload).to_bytes(3, "big") + bytes([ftype, flags])
            + stream.to_bytes(4, "big") + payload)


@pytest.mark.parametrize("ftype,payload", [(0x2, b"\0\0\0\0\x10"), (0x8, b"\0\0\0\1"),
                                           (0xee, b"xyz")],
                         ids=["priority", "window_update", "unknown"])
def test_n6_a_flood_of_frames_without_payload_gets_goaway_enhance_your_calm(procs, ftype,
                                                                           payload):
    """Issue 32 N6: PRIORITY, WINDOW_UPDATE +1 and unknown-type frames were
    read without bound (110 MB/s kept a worker busy); past GRPC_CALM_BURST
    at once the connection ends with GOAWAY ENHANCE_YOUR_CALM (0xb)."""
    server = procs(vless_inbound(grpc_stream(False, "inbound")), log_level="debug")
    s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    port = s.getsockname()[1]
    s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + h2_frame(0x4, 0, 0))
    # WINDOW_UPDATE +1 on the connection, PRIORITY and unknown on stream 1
    one = h2_frame(ftype, 0, 0 if ftype == 0x8 else 1, payload)
    burst = one * 5000
    got, goaway = b"", None

    def reader():
        nonlocal got, goaway
        try:
            while goaway is None:
                chunk = s.recv(65536)
                if not chunk:
                    return
                got += chunk
                i = 0
                while i + 9 <= len(got):
                    n = int.from_bytes(got[i:i + 3], "big")
                    if i + 9 + n > len(got):
                        break
                    if got[i + 3] == 0x7:
                        goaway = int.from_bytes(got[i + 13:i + 17], "big")
                    i += 9 + n
                got = got[i:]
        except OSError:
            return
    t = threading.Thread(target=reader)
    t.start()
    try:
        for _ in range(200):  # up to 1 M frames: ten times the burst
            s.sendall(burst)
            if goaway is not None:
                break
    except OSError:
        pass
    t.join(10)
    s.close()
    assert goaway == 0xb
    want = ("grpc: ended the connection of 127.0.0.1:%d: grpc: more than 100000 frames without payload in a second (PRIORITY, "
            "WINDOW_UPDATE, PING, SETTINGS, empty DATA, unknown types): GOAWAY ENHANCE_YOUR_CALM") % port
    deadline = time.monotonic() + 5
    while want not in server.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert want in server.log()
