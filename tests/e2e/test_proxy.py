"""The running proxy, end to end: socks, http and mixed inbounds, freedom and
blackhole outbounds, timeouts, accounts, UDP ASSOCIATE and signals.

Every test starts the real binary on 127.0.0.1 with a config written to
tmp_path and talks to target servers this module runs in threads on
127.0.0.1 (proxykit). Nothing leaves the loopback interface.
"""
import asyncio
import base64
import hashlib
import os
import resource
import signal
import socket
import ssl
import struct
import subprocess
import threading
import time

import pytest

from proxykit import (LOOPBACK, DnsServer, EchoServer, HttpReader, HttpTarget,
                      RawOrigin, Sha256Sink, Spout, big_chunks, big_sha256, connect,
                      free_port, header_lines, make_cert, parse_udp_header, read_socks_addr,
                      recv_all, recv_exact, recv_until_closed, socks5_connect, socks5_echo_async,
                      socks5_greet, socks5_request, socks_addr, tls_server_context,
                      wait_closed)

CURL = "/usr/bin/curl"

# SOCKS5 REP codes (RFC 1928 section 6) and SOCKS4 CD codes.
REP_OK, REP_GENERAL, REP_HOST_UNREACHABLE, REP_REFUSED, REP_TTL_EXPIRED, REP_CMD = 0, 1, 4, 5, 6, 7
S4_GRANTED, S4_REJECTED = 0x5A, 0x5B
# Every SOCKS5 refusal carries BND 0.0.0.0:0.
NO_BOUND = b"\x01" + bytes(6)


# ---------------------------------------------------------------- configs

def inbound(tag, protocol, port_key="port0", users=()):
    text = (f'[[inbound]]\ntag = "{tag}"\nprotocol = "{protocol}"\n'
            f'listen = "127.0.0.1"\nport = {{{port_key}}}\n')
    for user, password in users:
        text += f'[[inbound.settings.users]]\nusername = "{user}"\npassword = "{password}"\n'
    return text + "\n"


DIRECT = '[[outbound]]\ntag = "direct"\nprotocol = "freedom"\n\n'
BLOCK = '[[outbound]]\ntag = "sink"\nprotocol = "blackhole"\n\n'


def config(*parts, policy=None, dns=None, default=None):
    text = ""
    if policy:
        text += "[policy]\n" + "".join(f"{k} = {v}\n" for k, v in policy.items()) + "\n"
    text += "".join(parts)
    if default:
        text += f'[route]\ndefault = "{default}"\n\n'
    if dns is not None:
        text += "[dns]\nservers = [" + ", ".join(f'"{s}"' for s in dns) + "]\n"
    return text


# ---------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def origin():
    s = HttpTarget("origin")
    yield s
    s.close()


@pytest.fixture(scope="module")
def origin2():
    s = HttpTarget("second")
    yield s
    s.close()


@pytest.fixture(scope="module")
def raw_origin():
    s = RawOrigin()
    yield s
    s.close()


@pytest.fixture(scope="module")
def sink():
    s = Sha256Sink()
    yield s
    s.close()


@pytest.fixture(scope="module")
def tls_origin(tmp_path_factory):
    cert, key = make_cert(tmp_path_factory.mktemp("tls"))
    s = HttpTarget("tls-origin", tls_context=tls_server_context(cert, key))
    s.cert = cert
    yield s
    s.close()


def curl(*args):
    r = subprocess.run([CURL, "-sS", "--max-time", "10", "-w", "%{http_code}", *args],
                       capture_output=True, timeout=20)
    return r


def closed_port():
    """A TCP port on 127.0.0.1 that nothing listens on (just released)."""
    return free_port()


def echo_roundtrip(sock, message):
    sock.sendall(message)
    return recv_exact(sock, len(message))


# ---------------------------------------------------------------- 1. curl through every client protocol

# (curl option, host in the URL: a name lets the proxy resolve it)
SOCKS_MODES = [
    ("--socks5-hostname", "localhost"),
    ("--socks5", "127.0.0.1"),
    ("--socks4a", "localhost"),
    ("--socks4", "127.0.0.1"),
]
HTTP_MODES = [("-x", "127.0.0.1"), ("-x", "localhost")]
CURL_CASES = ([("socks",) + m for m in SOCKS_MODES] + [("http",) + m for m in HTTP_MODES] +
              [("mixed",) + m for m in SOCKS_MODES + HTTP_MODES])


@pytest.mark.parametrize("protocol,option,host", CURL_CASES,
                         ids=[f"{p}-{o.lstrip('-')}-{h}" for p, o, h in CURL_CASES])
def test_curl_get_through_the_proxy(start_proxy, origin, protocol, option, host):
    proxy = start_proxy(config(inbound("in", protocol), DIRECT))
    via = f"http://127.0.0.1:{proxy.port}" if option == "-x" else f"127.0.0.1:{proxy.port}"
    path = f"/via/{protocol}/{option.lstrip('-')}/{host}?q=1"
    r = curl(option, via, f"http://{host}:{origin.port}{path}")
    assert r.returncode == 0, (r.stderr, proxy.log())
    assert r.stdout == origin.body(path) + b"200"
    # the origin got origin-form, the Host curl wrote (the http proxy rebuilds
    # it from the absolute URI, which is the same)
    assert ("GET", path, f"{host}:{origin.port}") in [q[:3] for q in origin.requests]


# ---------------------------------------------------------------- SOCKS details

def test_socks5_bound_address_is_the_upstream_socket(start_proxy, echo):
    proxy = start_proxy(config(inbound("in", "socks"), DIRECT))
    with connect(proxy.port) as s:
        socks5_greet(s)
        rep, bound = socks5_request(s, LOOPBACK, echo.port)
        assert rep == REP_OK
        assert bound[0] == LOOPBACK and bound[1] not in (0, echo.port, proxy.port), bound
        assert echo_roundtrip(s, b"bound") == b"bound"


def test_socks_handshakes_split_byte_by_byte(start_proxy, echo):
    proxy = start_proxy(config(inbound("in", "socks"), DIRECT))
    hello = bytes([5, 2, 0, 2])  # two methods offered
    request = bytes([5, 1, 0]) + socks_addr("localhost", echo.port)
    with connect(proxy.port) as s:
        for b in hello:
            s.send(bytes([b]))
            time.sleep(0.005)
        assert recv_exact(s, 2) == b"\x05\x00"
        for b in request:
            s.send(bytes([b]))
            time.sleep(0.005)
        assert recv_exact(s, 3) == b"\x05\x00\x00"
        read_socks_addr(s)
        assert echo_roundtrip(s, b"split") == b"split"
    # SOCKS4a with a user id, one byte at a time
    s4a = b"\x04\x01" + struct.pack(">H", echo.port) + b"\x00\x00\x00\x01" + b"someone\0localhost\0"
    with connect(proxy.port) as s:
        for b in s4a:
            s.send(bytes([b]))
            time.sleep(0.002)
        reply = recv_exact(s, 8)
        assert reply[:2] == bytes([0, S4_GRANTED]), reply
        assert echo_roundtrip(s, b"four-a") == b"four-a"


def test_socks_data_sent_with_the_request_is_relayed(start_proxy, echo):
    """A client that does not wait for the replies: greeting, request and its
    first bytes in one segment."""
    proxy = start_proxy(config(inbound("in", "mixed"), DIRECT))
    with connect(proxy.port) as s:
        s.sendall(bytes([5, 1, 0]) + bytes([5, 1, 0]) + socks_addr(LOOPBACK, echo.port) +
                  b"early bytes")
        assert recv_exact(s, 2) == b"\x05\x00"
        assert recv_exact(s, 3) == b"\x05\x00\x00"
        read_socks_addr(s)
        assert recv_exact(s, 11) == b"early bytes"
    with connect(proxy.port) as s:
        s.sendall(b"\x04\x01" + struct.pack(">H", echo.port) + socket.inet_aton(LOOPBACK) +
                  b"\0early four")
        assert recv_exact(s, 8)[:2] == bytes([0, S4_GRANTED])
        assert recv_exact(s, 10) == b"early four"
    # and CONNECT over HTTP with the tunnel's first bytes right behind it
    with connect(proxy.port) as s:
        s.sendall(f"CONNECT 127.0.0.1:{echo.port} HTTP/1.1\r\n\r\n".encode() + b"early http")
        established = b"HTTP/1.1 200 Connection established\r\n\r\n"
        assert recv_exact(s, len(established) + 10) == established + b"early http"


def test_full_duplex_relay_under_backpressure(start_proxy, echo):
    """32 MiB to the echo server while its echo is read back concurrently."""
    proxy = start_proxy(config(inbound("in", "socks"), DIRECT))
    data = os.urandom(1 << 20) * 32
    with socks5_connect(proxy.port, LOOPBACK, echo.port, timeout=30) as s:
        sender = threading.Thread(target=s.sendall, args=(data,))
        sender.start()
        h, got = hashlib.sha256(), 0
        while got < len(data):
            chunk = s.recv(1 << 20)
            assert chunk, f"EOF after {got} bytes"
            h.update(chunk)
            got += len(chunk)
        sender.join(30)
        assert got == len(data)
        assert h.hexdigest() == hashlib.sha256(data).hexdigest()


def test_ipv6_listen_and_destination(start_proxy, app, tmp_path):
    echo6 = EchoServer(host="::1")
    try:
        proxy = start_proxy(config(inbound("in", "mixed").replace('"127.0.0.1"', '"::1"'), DIRECT),
                            host="::1")
        with connect(proxy.port, host="::1") as s:
            socks5_greet(s)
            rep, bound = socks5_request(s, "::1", echo6.port)
            assert rep == REP_OK
            assert bound[0] == "::1", bound
            assert echo_roundtrip(s, b"six") == b"six"
        with connect(proxy.port, host="::1") as s:
            s.sendall(f"CONNECT [::1]:{echo6.port} HTTP/1.1\r\n\r\n".encode())
            established = b"HTTP/1.1 200 Connection established\r\n\r\n"
            assert recv_exact(s, len(established)) == established
            assert echo_roundtrip(s, b"six over http") == b"six over http"
    finally:
        echo6.close()


# A regression guard: the buffered relay ([runtime] splice = false, and with
# splice on the flows the splicer cannot take) closed the upstream handle
# before the client's, and its shutdown callback toward the client read the
# freed upstream handle (a SIGSEGV). That needs the upstream's FIN read while
# 1-3 writes wait for the client: a download whose end sits just beyond what
# the kernel buffers hold. Its size depends on the socket buffers, so the test
# walks the size in 16 KiB steps (the window is 48 KiB wide), most likely
# sizes first.
RESET_SIZES = ([n for n in range(2560 << 10, 4 << 20, 16 << 10)] +
               [n for n in range(256 << 10, 2560 << 10, 16 << 10)] +
               [n for n in range(4 << 20, 8 << 20, 16 << 10)])


@pytest.mark.parametrize("splice", [
    pytest.param("true", id="spliced"),
    pytest.param("false", id="buffered"),
])
def test_relay_survives_a_reset_after_a_finished_download(start_proxy, splice):
    spout = Spout()
    proxy = start_proxy(config(f"[runtime]\nsplice = {splice}\n\n", inbound("in", "socks"),
                               DIRECT))
    batch = 16  # downloads at once, each on its own connection and buffers
    likely = RESET_SIZES[:96]
    # the spliced relay is the control: the likely sizes only; the buffered one
    # walks them a second time, should load have made the proxy miss the window
    walk = likely if splice == "true" else RESET_SIZES + likely
    try:
        for i in range(0, len(walk), batch):
            sizes = walk[i:i + batch]
            clients = []
            for n in sizes:
                s = socket.socket()
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # never reads
                s.settimeout(5)
                s.connect((LOOPBACK, proxy.port))
                socks5_greet(s)
                rep, _ = socks5_request(s, LOOPBACK, spout.port)
                assert rep == REP_OK, proxy.log()
                s.sendall(struct.pack(">I", n))
                clients.append(s)
            time.sleep(0.05)  # the proxy reads what it can, and the FIN
            for s in clients:  # RSTs: the users gave up on their downloads
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.close()
            time.sleep(0.01)
            status = proxy.proc.poll()
            assert status is None, (f"the proxy died ({status}) after downloads of "
                                    f"{sizes[0]}-{sizes[-1]} bytes")
        # the proxy still serves (while the spout still listens)
        with socks5_connect(proxy.port, LOOPBACK, spout.port) as s:
            s.sendall(struct.pack(">I", 5))
            assert recv_all(s) == bytes(5)
    finally:
        spout.close()


# ---------------------------------------------------------------- 2. HTTPS through CONNECT

@pytest.mark.parametrize("protocol", ["http", "mixed"])
def test_https_through_connect_with_curl(start_proxy, tls_origin, protocol):
    proxy = start_proxy(config(inbound("in", protocol), DIRECT))
    r = curl("-k", "-p", "-x", f"http://127.0.0.1:{proxy.port}",
             f"https://127.0.0.1:{tls_origin.port}/secure")
    assert r.returncode == 0, (r.stderr, proxy.log())
    assert r.stdout == tls_origin.body("/secure") + b"200"
    # verified against the certificate, by name, through socks5h on the same port
    if protocol == "mixed":
        r = curl("--cacert", str(tls_origin.cert), "--socks5-hostname", f"127.0.0.1:{proxy.port}",
                 f"https://localhost:{tls_origin.port}/verified")
        assert r.returncode == 0, (r.stderr, proxy.log())
        assert r.stdout == tls_origin.body("/verified") + b"200"


def test_raw_connect_then_tls(start_proxy, tls_origin):
    proxy = start_proxy(config(inbound("in", "http"), DIRECT))
    s = connect(proxy.port)
    with s:
        target = f"127.0.0.1:{tls_origin.port}"
        s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        established = b"HTTP/1.1 200 Connection established\r\n\r\n"
        assert recv_exact(s, len(established)) == established
        ctx = ssl.create_default_context(cafile=str(tls_origin.cert))
        with ctx.wrap_socket(s, server_hostname="localhost") as t:
            t.sendall(b"GET /tunnel HTTP/1.1\r\nHost: localhost\r\n\r\n")
            assert HttpReader(t).raw_response() == HttpTarget.response(tls_origin.body("/tunnel"))
            t.sendall(b"GET /again HTTP/1.1\r\nHost: localhost\r\n\r\n")
            assert HttpReader(t).raw_response() == HttpTarget.response(tls_origin.body("/again"))


# ---------------------------------------------------------------- 3. keep-alive on the http inbound

def get(host_port, path, extra=""):
    return f"GET http://{host_port}{path} HTTP/1.1\r\nHost: {host_port}\r\n{extra}\r\n".encode()


def test_keep_alive_several_requests_on_one_connection(start_proxy, origin, origin2):
    proxy = start_proxy(config(inbound("in", "http"), DIRECT))
    a, b = f"127.0.0.1:{origin.port}", f"127.0.0.1:{origin2.port}"
    with connect(proxy.port) as s:
        r = HttpReader(s)
        s.sendall(get(a, "/one"))
        assert r.raw_response() == HttpTarget.response(origin.body("/one"))
        s.sendall(get(a, "/two"))
        assert r.raw_response() == HttpTarget.response(origin.body("/two"))
        # a different host:port on the same client connection
        s.sendall(get(b, "/three"))
        assert r.raw_response() == HttpTarget.response(origin2.body("/three"))
        # and back, with a request body this time
        s.sendall(f"POST http://{a}/four HTTP/1.1\r\nHost: {a}\r\nContent-Length: 5\r\n\r\n"
                  "hello".encode())
        assert r.raw_response() == HttpTarget.response(origin.body("/four", b"hello"))
        # Connection: close ends it after the response, which says so
        s.sendall(get(a, "/five", "Connection: close\r\n"))
        head, body = r.response()
        assert head == (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                        b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body))
        assert body == origin.body("/five")
        assert r.at_eof()
    seen = {q[1]: q for q in origin.requests}
    # origin-form with the Host of the URI; /one and /two shared one upstream connection
    assert seen["/one"][:3] == ("GET", "/one", a)
    assert seen["/one"][3] == seen["/two"][3]
    assert ("GET", "/three", b) in [q[:3] for q in origin2.requests]


def test_keep_alive_pipelined_requests_answered_in_order(start_proxy, origin, origin2):
    proxy = start_proxy(config(inbound("in", "http"), DIRECT))
    a, b = f"127.0.0.1:{origin.port}", f"127.0.0.1:{origin2.port}"
    with connect(proxy.port) as s:
        s.sendall(get(a, "/p1") + get(a, "/p2") + get(b, "/p3") + get(a, "/p4"))
        r = HttpReader(s)
        assert r.raw_response() == HttpTarget.response(origin.body("/p1"))
        assert r.raw_response() == HttpTarget.response(origin.body("/p2"))
        assert r.raw_response() == HttpTarget.response(origin2.body("/p3"))
        assert r.raw_response() == HttpTarget.response(origin.body("/p4"))


def test_http10_client_without_keep_alive_is_closed_after_the_response(start_proxy, origin):
    proxy = start_proxy(config(inbound("in", "http"), DIRECT))
    a = f"127.0.0.1:{origin.port}"
    with connect(proxy.port) as s:
        s.sendall(f"GET http://{a}/old HTTP/1.0\r\n\r\n".encode())
        r = HttpReader(s)
        head, body = r.response()
        assert head.startswith(b"HTTP/1.1 200 OK\r\n")
        assert b"Connection: close" in header_lines(head)
        assert body == origin.body("/old")
        assert r.at_eof()


def test_http_framing_through_the_absolute_form_path(start_proxy, raw_origin):
    """Chunked, 1xx, 204, HEAD and hop-by-hop fields, one keep-alive connection;
    then a close-delimited body, which ends it."""
    proxy = start_proxy(config(inbound("in", "http"), DIRECT))
    o = f"127.0.0.1:{raw_origin.port}"
    ans = RawOrigin.ANSWERS
    with connect(proxy.port) as s:
        def exchange(request, expected):
            s.sendall(request)
            got = b""
            s.settimeout(5)
            while len(got) < len(expected):
                chunk = s.recv(65536)
                assert chunk, f"EOF after {got!r}"
                got += chunk
            assert got == expected

        exchange(get(o, "/chunked"), ans["/chunked"])
        exchange(get(o, "/no-content"), ans["/no-content"])
        exchange(get(o, "/continue"), ans["/continue"])
        exchange(f"HEAD http://{o}/anything HTTP/1.1\r\nHost: {o}\r\n\r\n".encode(),
                 RawOrigin.HEAD_ANSWER)
        # fields the Connection header names, and the hop-by-hop ones, are dropped
        exchange(get(o, "/hop"),
                 b"HTTP/1.1 200 OK\r\nX-Public: shown\r\nContent-Length: 3\r\n\r\nhop")
        # a chunked request body arrives whole
        exchange(f"POST http://{o}/echo HTTP/1.1\r\nHost: {o}\r\nTransfer-Encoding: chunked\r\n"
                 "\r\n4\r\nabcd\r\n3\r\nefg\r\n0\r\n\r\n".encode(),
                 b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nabcdefg")
        # the request head the origin gets: origin-form, Host from the URI
        # first, no hop-by-hop or proxy fields
        exchange(f"GET http://{o}/echo?x=1 HTTP/1.1\r\nHost: wrong.example\r\n"
                 "Proxy-Connection: keep-alive\r\nProxy-Authorization: Basic eDp5\r\n"
                 "Connection: X-Drop\r\nX-Drop: 1\r\nX-Keep: 2\r\nUser-Agent: t\r\n\r\n".encode(),
                 b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        assert raw_origin.requests[-1][3] == (f"GET /echo?x=1 HTTP/1.1\r\nHost: {o}\r\n"
                                              "X-Keep: 2\r\nUser-Agent: t\r\n\r\n").encode()
        # every request so far went over one upstream connection
        ports = {q[4] for q in raw_origin.requests[-7:]}
        assert len(ports) == 1, ports
        # a body that ends with the connection: the client is told, then closed
        s.sendall(get(o, "/until-close"))
        assert recv_all(s, 5) == (b"HTTP/1.1 200 OK\r\nX-Framing: close\r\nConnection: close\r\n"
                                  b"\r\nthe body ends with the connection")


def test_keep_alive_after_the_origin_closes(start_proxy, raw_origin):
    """The origin ends its connection after a response, with Connection: close
    or silently: the client's connection stays and the next request to the
    same origin is dialled anew."""
    proxy = start_proxy(config(inbound("in", "http"), DIRECT))
    o = f"127.0.0.1:{raw_origin.port}"
    empty = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
    with connect(proxy.port) as s:
        r = HttpReader(s)
        s.sendall(get(o, "/last"))
        assert r.raw_response() == b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nlast"
        s.sendall(get(o, "/echo"))
        assert r.raw_response() == empty
        s.sendall(get(o, "/then-close"))
        assert r.raw_response() == b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ngone"
        time.sleep(0.3)  # the origin's FIN has reached the proxy
        s.sendall(get(o, "/echo"))
        assert r.raw_response() == empty
    ports = [q[4] for q in raw_origin.requests[-4:]]
    assert ports[0] != ports[1] and ports[2] != ports[3] and ports[1] == ports[2], ports


def test_http_large_bodies_both_ways(start_proxy, origin):
    """64 MiB down and 16 MiB up through the absolute-form path, then one
    more request on the same connection."""
    proxy = start_proxy(config(inbound("in", "http"), DIRECT))
    a = f"127.0.0.1:{origin.port}"
    n = 64 << 20
    with connect(proxy.port, timeout=30) as s:
        s.sendall(get(a, f"/big/{n}"))
        r = HttpReader(s, timeout=30)
        while b"\r\n\r\n" not in r.buf:
            r._more("a head")
        end = r.buf.index(b"\r\n\r\n") + 4
        assert r.buf[:end] == b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % n
        h, got = hashlib.sha256(r.buf[end:]), len(r.buf) - end
        r.buf = b""
        while got < n:
            chunk = s.recv(min(1 << 20, n - got))
            assert chunk, f"EOF after {got} of {n} bytes"
            h.update(chunk)
            got += len(chunk)
        assert h.hexdigest() == big_sha256(n)

        up = b"".join(big_chunks(16 << 20))
        s.sendall(f"POST http://{a}/up HTTP/1.1\r\nHost: {a}\r\nContent-Length: {len(up)}\r\n"
                  "\r\n".encode() + up)
        head, body = r.response()
        assert body == origin.body("/up", up)

        s.sendall(get(a, "/after-big"))
        assert r.raw_response() == HttpTarget.response(origin.body("/after-big"))


# ---------------------------------------------------------------- 4. SOCKS5 UDP ASSOCIATE

def udp_packet(host, port, data, frag=0):
    return b"\0\0" + bytes([frag]) + socks_addr(host, port) + data


def udp_no_reply(sock, wait=0.5):
    """True when nothing comes back within wait (an ICMP refusal counts as nothing)."""
    sock.settimeout(wait)
    try:
        sock.recvfrom(65535)
    except (socket.timeout, ConnectionRefusedError):
        return True
    return False


def udp_associate(proxy_port, user=None, password=None):
    ctl = connect(proxy_port)
    socks5_greet(ctl, user, password)
    rep, bound = socks5_request(ctl, "0.0.0.0", 0, cmd=3)
    assert rep == REP_OK
    return ctl, bound


def test_socks5_udp_associate_echo(start_proxy, udp_echo):
    proxy = start_proxy(config(inbound("in", "socks"), DIRECT))
    ctl, relay = udp_associate(proxy.port)
    assert relay[0] == LOOPBACK and relay[1] != 0, relay
    a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    a.bind((LOOPBACK, 0))
    b.bind((LOOPBACK, 0))
    with ctl, a, b:
        a.settimeout(3)
        a.sendto(udp_packet(LOOPBACK, udp_echo.port, b"ping-1"), relay)
        pkt, src = a.recvfrom(65535)
        assert src == relay
        assert parse_udp_header(pkt) == ((LOOPBACK, udp_echo.port), b"ping-1")
        assert pkt == udp_packet(LOOPBACK, udp_echo.port, b"ping-1")

        # another source port after the first datagram: ignored
        b.sendto(udp_packet(LOOPBACK, udp_echo.port, b"stray"), relay)
        assert udp_no_reply(b)
        # a fragment (FRAG != 0) is dropped (RFC 1928 section 7)
        a.sendto(udp_packet(LOOPBACK, udp_echo.port, b"fragment", frag=1), relay)
        assert udp_no_reply(a)
        # the association still works
        a.sendto(udp_packet(LOOPBACK, udp_echo.port, b"ping-2"), relay)
        pkt, _ = a.recvfrom(65535)
        assert pkt == udp_packet(LOOPBACK, udp_echo.port, b"ping-2")
        payloads = [d for _, d in udp_echo.received]
        assert b"stray" not in payloads and b"fragment" not in payloads

        # closing the control connection ends the association
        ctl.close()
        time.sleep(0.3)
        a.sendto(udp_packet(LOOPBACK, udp_echo.port, b"after-close"), relay)
        assert udp_no_reply(a)
        assert b"after-close" not in [d for _, d in udp_echo.received]


def test_socks5_udp_associate_other_ip_and_domain_destination(start_proxy, udp_echo):
    proxy = start_proxy(config(inbound("in", "socks"), DIRECT))
    ctl, relay = udp_associate(proxy.port)
    a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    other = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    a.bind((LOOPBACK, 0))
    other.bind(("127.0.0.2", 0))  # loopback too, but not the control connection's IP
    with ctl, a, other:
        # only the control connection's IP may use the relay, even first
        other.sendto(udp_packet(LOOPBACK, udp_echo.port, b"from another ip"), relay)
        assert udp_no_reply(other)
        assert b"from another ip" not in [d for _, d in udp_echo.received]
        # a destination by name: resolved; the reply names the address that answered
        a.settimeout(3)
        a.sendto(udp_packet("localhost", udp_echo.port, b"by name"), relay)
        pkt, _ = a.recvfrom(65535)
        assert pkt == udp_packet(LOOPBACK, udp_echo.port, b"by name")


def test_socks5_udp_associate_large_datagram(start_proxy, udp_echo):
    proxy = start_proxy(config(inbound("in", "socks"), DIRECT))
    ctl, relay = udp_associate(proxy.port)
    with ctl, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as a:
        a.bind((LOOPBACK, 0))
        a.settimeout(3)
        data = os.urandom(8000)
        a.sendto(udp_packet(LOOPBACK, udp_echo.port, data), relay)
        pkt, _ = a.recvfrom(65535)
        assert pkt == udp_packet(LOOPBACK, udp_echo.port, data)


def test_socks5_udp_associate_burst_in_order(start_proxy, udp_echo):
    # 64 datagrams sent at once: the relay and freedom's socket each send
    # what one loop iteration gathered together (sendmmsg), more than one
    # batch holds; every one is answered, in order, byte for byte
    proxy = start_proxy(config(inbound("in", "socks"), DIRECT))
    ctl, relay = udp_associate(proxy.port)
    with ctl, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as a:
        a.bind((LOOPBACK, 0))
        a.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        a.settimeout(5)
        for round_ in range(3):
            sent = [bytes([round_, i]) + os.urandom(16 + (i * 37) % 1200) for i in range(64)]
            for data in sent:
                a.sendto(udp_packet(LOOPBACK, udp_echo.port, data), relay)
            got = []
            while len(got) < len(sent):
                try:
                    pkt, _ = a.recvfrom(65535)
                except socket.timeout:
                    break
                got.append(pkt)
            assert [parse_udp_header(p)[1][:2] for p in got] == [d[:2] for d in sent]
            assert got == [udp_packet(LOOPBACK, udp_echo.port, d) for d in sent]


# ---------------------------------------------------------------- 5. accounts

USERS = [("alice", "wonderland"), ("bob", "the builder"), ("carol", "p:ss:word")]


@pytest.mark.parametrize("protocol", ["socks", "mixed"])
def test_socks5_accounts(start_proxy, echo, origin, protocol):
    proxy = start_proxy(config(inbound("in", protocol, users=USERS), DIRECT))
    # accepted, for each account, and the relay works
    for user, password in USERS:
        with connect(proxy.port) as s:
            assert socks5_greet(s, user, password) == 0
            rep, _ = socks5_request(s, LOOPBACK, echo.port)
            assert rep == REP_OK
            assert echo_roundtrip(s, f"hi {user}".encode()) == f"hi {user}".encode()
    # refused: STATUS 1 (RFC 1929), then the server closes
    for user, password in [("alice", "wonderlan"), ("alice", "the builder"), ("carol", "x"),
                           ("Alice", "wonderland"), ("alice", "wonderland!")]:
        with connect(proxy.port) as s:
            assert socks5_greet(s, user, password) == 1, (user, password)
            assert wait_closed(s, 2) is not None
    # a client offering only "no authentication" gets 0xFF
    with connect(proxy.port) as s:
        s.sendall(b"\x05\x01\x00")
        assert recv_exact(s, 2) == b"\x05\xff"
        assert wait_closed(s, 2) is not None
    # SOCKS4 cannot authenticate: rejected
    with connect(proxy.port) as s:
        s.sendall(b"\x04\x01" + struct.pack(">H", echo.port) + socket.inet_aton(LOOPBACK) + b"\0")
        assert recv_exact(s, 8)[:2] == bytes([0, S4_REJECTED])
        assert wait_closed(s, 2) is not None
    # curl with the account, and without
    url = f"http://localhost:{origin.port}/account"
    r = curl("--socks5-hostname", f"127.0.0.1:{proxy.port}", "-U", "bob:the builder", url)
    assert r.returncode == 0, r.stderr
    assert r.stdout == origin.body("/account") + b"200"
    r = curl("--socks5-hostname", f"127.0.0.1:{proxy.port}", url)
    assert r.returncode != 0


def basic(user, password):
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return f"Proxy-Authorization: Basic {token}\r\n"


AUTH_407 = b"HTTP/1.1 407 Proxy Authentication Required\r\n"
AUTH_CHALLENGE = b'Proxy-Authenticate: Basic realm="etemenanki"'


def assert_407(s):
    r = HttpReader(s)
    head, body = r.response()
    assert head.startswith(AUTH_407), head
    assert AUTH_CHALLENGE in header_lines(head), head
    assert b"Connection: close" in header_lines(head), head
    assert r.at_eof()


@pytest.mark.parametrize("protocol", ["http", "mixed"])
def test_http_accounts(start_proxy, origin, tls_origin, protocol):
    proxy = start_proxy(config(inbound("in", protocol, users=USERS), DIRECT))
    a = f"127.0.0.1:{origin.port}"
    with connect(proxy.port) as s:
        s.sendall(get(a, "/no-credentials"))
        assert_407(s)
    with connect(proxy.port) as s:  # bob's password for alice
        s.sendall(get(a, "/wrong", basic("alice", "the builder")))
        assert_407(s)
    with connect(proxy.port) as s:
        s.sendall(f"CONNECT {a} HTTP/1.1\r\nHost: {a}\r\n\r\n".encode())
        assert_407(s)
    assert "/no-credentials" not in [q[1] for q in origin.requests]
    # alice:wonderland, by hand; the credentials do not reach the origin
    with connect(proxy.port) as s:
        s.sendall(get(a, "/by-hand", basic("alice", "wonderland")))
        assert HttpReader(s).raw_response() == HttpTarget.response(origin.body("/by-hand"))
    fields = [q[4] for q in origin.requests if q[1] == "/by-hand"][-1]
    assert "proxy-authorization" not in [k.lower() for k, _ in fields]
    # curl -U
    r = curl("-U", "alice:wonderland", "-x", f"http://127.0.0.1:{proxy.port}",
             f"http://{a}/curl-account")
    assert r.returncode == 0, r.stderr
    assert r.stdout == origin.body("/curl-account") + b"200"
    r = curl("-U", "bob:the builder", "-k", "-p", "-x", f"http://127.0.0.1:{proxy.port}",
             f"https://127.0.0.1:{tls_origin.port}/curl-tunnel")
    assert r.returncode == 0, r.stderr
    assert r.stdout == tls_origin.body("/curl-tunnel") + b"200"
    # a password may hold colons (RFC 7617: the user-id ends at the first)
    r = curl("-U", "carol:p:ss:word", "-x", f"http://127.0.0.1:{proxy.port}", f"http://{a}/carol")
    assert r.returncode == 0, r.stderr
    assert r.stdout == origin.body("/carol") + b"200"
    r = curl("-U", "alice:wrong", "-x", f"http://127.0.0.1:{proxy.port}", f"http://{a}/x")
    assert r.stdout.endswith(b"407"), r.stdout
    r = curl("-x", f"http://127.0.0.1:{proxy.port}", f"http://{a}/x")
    assert r.stdout.endswith(b"407"), r.stdout


# ---------------------------------------------------------------- 6. 1 GiB, byte for byte, with a half-close

def test_one_gib_through_socks5_arrives_intact(start_proxy, sink):
    proxy = start_proxy(config(inbound("in", "socks"), DIRECT))
    block = os.urandom(1 << 20)
    expected = hashlib.sha256()
    hasher = threading.Thread(target=lambda: [expected.update(block) for _ in range(1024)])
    hasher.start()
    start = time.monotonic()
    with socks5_connect(proxy.port, LOOPBACK, sink.port, timeout=60) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        for _ in range(1024):
            s.sendall(block)
        s.shutdown(socket.SHUT_WR)  # the sink answers only after this FIN
        digest = recv_all(s, timeout=60)
    elapsed = time.monotonic() - start
    hasher.join()
    print(f"1 GiB through SOCKS5 in {elapsed:.1f} s ({1024 / elapsed:.0f} MiB/s)")
    assert digest == expected.hexdigest().encode()
    assert elapsed < 30, f"1 GiB took {elapsed:.1f} s"


def test_half_close_both_ways_over_http_connect(start_proxy, sink):
    """CONNECT's tunnel carries the client's FIN too: the answer comes after it."""
    proxy = start_proxy(config(inbound("in", "http"), DIRECT))
    data = os.urandom(3 << 20)
    with connect(proxy.port) as s:
        target = f"127.0.0.1:{sink.port}"
        s.sendall(f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())
        established = b"HTTP/1.1 200 Connection established\r\n\r\n"
        assert recv_exact(s, len(established)) == established
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        assert recv_all(s, 10) == hashlib.sha256(data).hexdigest().encode()


# ---------------------------------------------------------------- 7. 1000 concurrent connections

def test_a_thousand_concurrent_socks5_connections(start_proxy, echo):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4096:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
    proxy = start_proxy(config(inbound("in", "socks"), DIRECT))
    n = 1000

    async def main():
        msgs = [f"connection {i:04d} ".encode() * 8 + os.urandom(16) for i in range(n)]
        got = await asyncio.gather(*(socks5_echo_async(proxy.port, LOOPBACK, echo.port, m)
                                     for m in msgs), return_exceptions=True)
        return msgs, got

    start = time.monotonic()
    msgs, got = asyncio.run(main())
    elapsed = time.monotonic() - start
    failures = [(i, g) for i, (m, g) in enumerate(zip(msgs, got)) if g != m]
    print(f"{n} concurrent SOCKS5 echoes in {elapsed:.1f} s")
    assert not failures, f"{len(failures)} of {n} failed, first: {failures[:3]}"


# ---------------------------------------------------------------- 8. blackhole

def test_blackhole_default_route(start_proxy, echo, udp_echo):
    proxy = start_proxy(config(inbound("in", "mixed"), DIRECT, BLOCK, default="sink"))
    before = echo.connections
    with connect(proxy.port) as s:
        socks5_greet(s)
        rep, _ = socks5_request(s, LOOPBACK, echo.port)
        assert rep == REP_OK
        s.sendall(b"into the void")
        took = wait_closed(s, 1.0)
        assert took is not None, "a blackholed stream must get EOF at once"
    time.sleep(0.1)
    assert echo.connections == before  # nothing was dialled
    # over HTTP the route's refusal is a 403
    with connect(proxy.port) as s:
        s.sendall(get(f"127.0.0.1:{echo.port}", "/blocked"))
        head, body = HttpReader(s).response()
        assert head.startswith(b"HTTP/1.1 403 Forbidden\r\n"), head
        assert body.startswith(b"destination not allowed")
    # datagrams are swallowed
    ctl, relay = udp_associate(proxy.port)
    with ctl, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as a:
        a.bind((LOOPBACK, 0))
        before = len(udp_echo.received)
        a.sendto(udp_packet(LOOPBACK, udp_echo.port, b"swallowed"), relay)
        assert udp_no_reply(a)
        assert len(udp_echo.received) == before


def test_blackhole_as_first_outbound_closes_at_once(start_proxy, echo):
    proxy = start_proxy(config(inbound("in", "socks"), BLOCK, DIRECT))
    before = echo.connections
    with connect(proxy.port) as s:
        socks5_greet(s)
        s.sendall(bytes([5, 1, 0]) + socks_addr(LOOPBACK, echo.port))
        reply = recv_exact(s, 10)
        assert reply[:3] == b"\x05\x00\x00", reply
        s.settimeout(1.0)
        start = time.monotonic()
        assert s.recv(100) == b""
        assert time.monotonic() - start < 1.0
    time.sleep(0.1)
    assert echo.connections == before


# ---------------------------------------------------------------- 9. failure replies

def test_socks5_connect_to_a_closed_port_is_refused(start_proxy):
    proxy = start_proxy(config(inbound("in", "socks"), DIRECT))
    port = closed_port()
    with connect(proxy.port) as s:
        socks5_greet(s)
        s.sendall(bytes([5, 1, 0]) + socks_addr(LOOPBACK, port))
        assert recv_all(s, 5) == b"\x05" + bytes([REP_REFUSED]) + b"\x00" + NO_BOUND
    with connect(proxy.port) as s:  # SOCKS4: the one refusal it has
        s.sendall(b"\x04\x01" + struct.pack(">H", port) + socket.inet_aton(LOOPBACK) + b"\0")
        assert recv_all(s, 5) == bytes([0, S4_REJECTED]) + bytes(6)


def test_http_to_a_closed_port_is_502_naming_the_failure(start_proxy):
    proxy = start_proxy(config(inbound("in", "http"), DIRECT))
    target = f"127.0.0.1:{closed_port()}"
    for request in (get(target, "/"), f"CONNECT {target} HTTP/1.1\r\n\r\n".encode()):
        with connect(proxy.port) as s:
            s.sendall(request)
            r = HttpReader(s)
            head, body = r.response()
            assert head.startswith(b"HTTP/1.1 502 Bad Gateway\r\n"), head
            assert b"Content-Type: text/plain" in header_lines(head)
            assert body.startswith(b"connection refused"), body
            assert target.encode() in body, body
            assert r.at_eof()


def test_unresolvable_names_get_an_error_not_a_hang(start_proxy):
    """NXDOMAIN is host unreachable at once; a resolver that never answers is
    a timeout after the resolver's deadline (5 s), both ways at once."""
    nx, silent = DnsServer("nxdomain"), DnsServer("silent")
    try:
        fast = start_proxy(config(inbound("in", "mixed"), DIRECT, dns=[f"127.0.0.1:{nx.port}"]))
        slow = start_proxy(config(inbound("in", "mixed"), DIRECT,
                                  dns=[f"127.0.0.1:{silent.port}"]))
        results = {}

        def socks_case(key, port):
            with connect(port, timeout=15) as s:
                socks5_greet(s)
                s.sendall(bytes([5, 1, 0]) + socks_addr("nonexistent.invalid", 80))
                start = time.monotonic()
                results[key] = (recv_all(s, 15), time.monotonic() - start)

        def http_case(key, port):
            with connect(port, timeout=15) as s:
                s.sendall(get("nonexistent.invalid", "/"))
                start = time.monotonic()
                r = HttpReader(s, timeout=15)
                results[key] = (r.response(), time.monotonic() - start)

        threads = [threading.Thread(target=f, args=(k, p)) for f, k, p in [
            (socks_case, "socks-nx", fast.port), (http_case, "http-nx", fast.port),
            (socks_case, "socks-silent", slow.port), (http_case, "http-silent", slow.port)]]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
        assert nx.queries > 0 and silent.queries > 0

        reply, took = results["socks-nx"]
        assert reply == b"\x05" + bytes([REP_HOST_UNREACHABLE]) + b"\x00" + NO_BOUND
        assert took < 2
        (head, body), took = results["http-nx"]
        assert head.startswith(b"HTTP/1.1 502 Bad Gateway\r\n"), head
        assert body.startswith(b"host unreachable"), body
        assert took < 2

        reply, took = results["socks-silent"]
        assert reply == b"\x05" + bytes([REP_TTL_EXPIRED]) + b"\x00" + NO_BOUND
        assert took < 8
        (head, body), took = results["http-silent"]
        assert head.startswith(b"HTTP/1.1 504 Gateway Timeout\r\n"), head
        assert body.startswith(b"connection timed out"), body
        assert took < 8
    finally:
        nx.close()
        silent.close()


def test_socks5_unsupported_command_and_address_type(start_proxy, echo):
    proxy = start_proxy(config(inbound("in", "socks"), DIRECT))
    with connect(proxy.port) as s:  # BIND
        socks5_greet(s)
        s.sendall(bytes([5, 2, 0]) + socks_addr(LOOPBACK, echo.port))
        assert recv_all(s, 3) == b"\x05" + bytes([REP_CMD]) + b"\x00" + NO_BOUND
    with connect(proxy.port) as s:  # ATYP 2 does not exist
        socks5_greet(s)
        s.sendall(bytes([5, 1, 0, 2]))
        assert recv_all(s, 3) == b"\x05\x08\x00" + NO_BOUND
    with connect(proxy.port) as s:  # an empty domain name
        socks5_greet(s)
        s.sendall(bytes([5, 1, 0, 3, 0]) + struct.pack(">H", echo.port))
        assert recv_all(s, 3) == b"\x05" + bytes([REP_GENERAL]) + b"\x00" + NO_BOUND


# ---------------------------------------------------------------- 10. timeouts

def test_handshake_and_idle_timeouts(start_proxy, echo, origin):
    proxy = start_proxy(config(inbound("in", "mixed"), DIRECT,
                               policy={"handshake_timeout": 1, "idle_timeout": 1}))
    silent = connect(proxy.port)
    partial = connect(proxy.port)
    partial.sendall(b"\x05\x01")  # a greeting cut short
    half_http = connect(proxy.port)
    half_http.sendall(b"GET http://127.0.0.1/ HTTP/1.1\r\n")
    idle = socks5_connect(proxy.port, LOOPBACK, echo.port)
    busy = socks5_connect(proxy.port, LOOPBACK, echo.port)
    assert echo_roundtrip(idle, b"last words") == b"last words"
    http_idle = connect(proxy.port)  # keep-alive, idle after its one response
    http_idle.sendall(get(f"127.0.0.1:{origin.port}", "/then-idle"))
    HttpReader(http_idle).response()
    udp_idle, _ = udp_associate(proxy.port)  # an association no datagram uses
    results = {}

    def watch(name, sock):
        results[name] = wait_closed(sock, 3.0)

    def keep_busy():
        for i in range(5):  # a byte every 0.4 s for 2 s
            assert echo_roundtrip(busy, b"%d" % i) == b"%d" % i
            time.sleep(0.4)

    threads = [threading.Thread(target=watch, args=a) for a in
               [("silent", silent), ("partial", partial), ("half_http", half_http),
                ("idle", idle), ("http_idle", http_idle), ("udp_idle", udp_idle)]]
    threads.append(threading.Thread(target=keep_busy))
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    for name, took in results.items():
        assert took is not None, f"{name} still open after 3 s"
        assert 0.7 <= took <= 2.5, f"{name} closed after {took:.2f} s"
    # a flow that carries a byte now and then outlives the idle timeout
    assert echo_roundtrip(busy, b"still here") == b"still here"
    for s in (silent, partial, half_http, idle, busy, http_idle, udp_idle):
        s.close()


# ---------------------------------------------------------------- 11. SIGTERM with open connections

def test_sigterm_with_open_connections_exits_0_quickly(start_proxy, echo, origin):
    silent = DnsServer("silent")
    try:
        _sigterm_with_open_connections(start_proxy, echo, origin, silent)
    finally:
        silent.close()


def _sigterm_with_open_connections(start_proxy, echo, origin, silent):
    proxy = start_proxy(config(inbound("in", "mixed"), DIRECT,
                               dns=[f"127.0.0.1:{silent.port}"]))
    relays = [socks5_connect(proxy.port, LOOPBACK, echo.port) for _ in range(20)]
    resolving = connect(proxy.port)  # a lookup that will never be answered
    socks5_greet(resolving)
    resolving.sendall(bytes([5, 1, 0]) + socks_addr("nonexistent.invalid", 80))
    deadline = time.monotonic() + 2
    while silent.queries == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert silent.queries > 0
    for i, s in enumerate(relays):
        assert echo_roundtrip(s, b"r%d" % i) == b"r%d" % i
    handshaking = connect(proxy.port)
    handshaking.sendall(b"\x05")
    keepalive = connect(proxy.port)
    keepalive.sendall(get(f"127.0.0.1:{origin.port}", "/before-sigterm"))
    HttpReader(keepalive).response()
    ctl, _ = udp_associate(proxy.port)
    rc, took = proxy.terminate(timeout=5)
    assert rc == 0, proxy.log()
    assert took < 2, f"took {took:.2f} s"
    # every client sees its connection end
    for s in relays + [handshaking, keepalive, ctl, resolving]:
        assert wait_closed(s, 1) is not None
        s.close()
    assert proxy.log().rstrip().endswith("app: stopped")


def test_sigterm_right_after_start(start_proxy):
    """A supervisor that stops the proxy as soon as its port accepts. (Commit
    d56351b accepted before installing its SIGTERM handler, so this SIGTERM
    killed it: exit status 143; 128 workers widen that window.)"""
    statuses = []
    for _ in range(5):
        proxy = start_proxy(config("[runtime]\nworkers = 128\n\n", inbound("in", "socks"), DIRECT),
                            wait_for_log=False)
        rc, took = proxy.terminate(timeout=5)
        statuses.append(rc)
    assert statuses == [0] * 5, f"exit statuses {statuses}"


@pytest.mark.parametrize("pinned", [False, True], ids=["own-affinity", "one-cpu"])
def test_default_workers_follow_cpu_affinity(start_proxy, pinned):
    """workers = 0 starts one worker per CPU the process may run on, as
    taskset or a container's cpuset leaves it, not per CPU of the machine."""
    mine = sorted(os.sched_getaffinity(0))
    cpus = {mine[0]} if pinned else None
    proxy = start_proxy(config(inbound("in", "socks"), DIRECT), cpus=cpus)
    want = 1 if pinned else min(len(mine), 256)  # WORKERS_MAX
    assert f"(in, {want} worker{'' if want == 1 else 's'})" in proxy.log()


def test_sigint_exits_0(start_proxy, echo):
    proxy = start_proxy(config(inbound("in", "socks"), DIRECT))
    s = socks5_connect(proxy.port, LOOPBACK, echo.port)
    start = time.monotonic()
    proxy.proc.send_signal(signal.SIGINT)
    assert proxy.proc.wait(5) == 0
    assert time.monotonic() - start < 2
    s.close()


# ---------------------------------------------------------------- 12. garbage

@pytest.mark.parametrize("first", [b"G", b"\x16\x03\x01\x00\x05hello", b"\x00", b"\xff" * 10,
                                   b"\x03\x01\x00"], ids=["G", "tls", "nul", "ff", "three"])
def test_socks_inbound_closes_on_a_bad_first_byte(start_proxy, first):
    proxy = start_proxy(config(inbound("in", "socks"), DIRECT))
    with connect(proxy.port) as s:
        s.sendall(first)
        assert recv_all(s, 2) == b""


BAD_REQUESTS = [
    (b"FOO\r\n\r\n", b"malformed request line"),
    (b"GET https://127.0.0.1:1/ HTTP/1.1\r\n\r\n", b"https:// URIs go through CONNECT"),
    (b"POST http://127.0.0.1:1/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
     b"both Transfer-Encoding and Content-Length"),
    (b"POST http://127.0.0.1:1/ HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
     b"invalid Content-Length"),
    (b"GET http://user@127.0.0.1:1/ HTTP/1.1\r\n\r\n", b"userinfo in the request target"),
    (b"GET http://127.0.0.1:1/ HTTP/1.1\nHost: x\n\n", b"lines must end in CRLF"),
    (b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", b"a proxy request needs an absolute http:// URI"),
    (b"GET http://127.0.0.1:1/ HTTP/1.1\r\nNo colon here\r\n\r\n", b"malformed header field"),
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", b"malformed request line"),
]


TOO_LARGE = [
    (b"GET http://127.0.0.1:1/ HTTP/1.1\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n",
     b"request head too large"),
    (b"GET http://127.0.0.1:1/ HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(150)) +
     b"\r\n", b"too many header fields"),
]


@pytest.mark.parametrize("request_bytes,reason", TOO_LARGE, ids=["20k-head", "150-fields"])
def test_oversized_http_head_gets_431(start_proxy, request_bytes, reason):
    proxy = start_proxy(config(inbound("in", "http"), DIRECT))
    with connect(proxy.port) as s:
        s.sendall(request_bytes)
        # the proxy closes with the rest of the head unread, which may reset
        answer = recv_until_closed(s)
    assert answer.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"), answer[:100]
    assert answer.endswith(b"\r\n\r\n" + reason + b"\n"), answer


@pytest.mark.parametrize("protocol", ["http", "mixed"])
@pytest.mark.parametrize("request_bytes,reason", BAD_REQUESTS,
                         ids=["start-line", "https", "te-and-cl", "two-lengths", "userinfo",
                              "bare-lf", "origin-form", "field", "tls-hello"])
def test_malformed_http_gets_400(start_proxy, protocol, request_bytes, reason):
    proxy = start_proxy(config(inbound("in", protocol), DIRECT))
    with connect(proxy.port) as s:
        s.sendall(request_bytes)
        r = HttpReader(s)
        head, body = r.response()
        assert head.startswith(b"HTTP/1.1 400 Bad Request\r\n"), head
        assert b"Connection: close" in header_lines(head)
        assert body == reason + b"\n"
        assert r.at_eof()
