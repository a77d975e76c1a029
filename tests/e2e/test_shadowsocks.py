"""Shadowsocks AEAD (SIP004) end to end: interop with shadowsocks-libev's
ss-server and ss-local, and ours to ours, for aes-128-gcm, aes-256-gcm and
chacha20-ietf-poly1305.

Each cell runs the chain

    app (this test) --SOCKS5--> client proxy -> server proxy -> echo (this test)

where "ours_to_libev" is our socks inbound and shadowsocks outbound against
ss-server, "libev_to_ours" is ss-local (its SOCKS5 port) against our
shadowsocks inbound, and "ours_to_ours" both ends ours. The app carries
16 MiB of random bytes full duplex, compared byte for byte, half-closes and
expects the end, then opens 16 connections at once to the echo by name
(localhost), as test_interop does.

UDP: our outbound's packets through `ss-server -u` to UDP echoes. v2ray
4.34's shadowsocks server and client (aes-128-gcm, chacha20-ietf-poly1305),
TCP, both ways.

Shadowsocks 2022 (SIP022, TCP): no packaged peer exists, so ours to ours
for 2022-blake3-aes-128-gcm, -aes-256-gcm and -chacha20-poly1305 (16 MiB,
half-close, burst), a wrong key drained and not answered, a replayed first
flight refused, and the exact texts for a key of the wrong length. Two
users behind an identity PSK (SIP022-2), ours to ours, and an unknown
identity drained. 2022 UDP (SIP022 3.2, 4.1), ours to ours for the three
methods, two users behind an identity PSK (a stranger's uPSK gets nothing),
and a packet replayed by a relay between client and server not answered
twice.

Sniffing (`sniffing = true` on the inbound, a rule on a domain): a client
that dials the echo by IP and sends a TLS ClientHello or an HTTP request
for the domain is routed by the rule, for an AEAD-2017 and a 2022 method,
its bytes in the chunks after the address (our client), in the address's
chunk or spread over both (a client sealed here, python3-cryptography);
16 MiB still go through byte for byte.

Also: a wrong password is not answered and not closed at once (the drain),
a replayed first packet is refused and logged. Only 127.0.0.1 is used; every
process started here is stopped by its own pid.
"""
import base64
import os
import shutil
import socket
import subprocess
import time

import pytest

import adversarialkit
import test_interop as interop
import test_route as route
from proxykit import (LOOPBACK, Association, UdpServer, connect, free_port, log_text, recv_exact,
                      socks5_connect, stop_cleanly, stop_process)

SS_SERVER = shutil.which("ss-server")
SS_LOCAL = shutil.which("ss-local")
needs_libev = pytest.mark.skipif(SS_SERVER is None or SS_LOCAL is None,
                                 reason="shadowsocks-libev is not installed (scripts/deps.sh)")

PASSWORD = "correct horse battery staple"
WRONG_PASSWORD = "wrong horse battery staple"
METHODS = ["aes-128-gcm", "aes-256-gcm", "chacha20-ietf-poly1305"]
# SIP022 2.1: the key is base64 of the method's key length
METHODS_2022 = {"2022-blake3-aes-128-gcm": 16, "2022-blake3-aes-256-gcm": 32,
                "2022-blake3-chacha20-poly1305": 32}


def psk(n):
    return base64.b64encode(os.urandom(n)).decode()


class Libev:
    """One ss-server or ss-local process on a free port of its own."""

    def __init__(self, workdir, argv_of):
        self.workdir = workdir
        self.argv_of = argv_of
        self.proc = None
        self.port = None
        self.log_path = None
        self._log = None

    def start(self, attempts=4):
        for _ in range(attempts):
            self.port = free_port()
            n = len(list(self.workdir.glob("libev-*.log")))
            self.log_path = self.workdir / f"libev-{n}.log"
            self._log = open(self.log_path, "wb")
            self.proc = subprocess.Popen(self.argv_of(self.port), stdin=subprocess.DEVNULL,
                                         stdout=self._log, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    with socket.create_connection((LOOPBACK, self.port), timeout=0.5):
                        return self
                except OSError:
                    time.sleep(0.02)
            self.stop()
        raise AssertionError(f"shadowsocks-libev did not start:\n{self.log()}")

    def log(self):
        return log_text(self.log_path)

    def stop(self):
        stop_process(self)


class SsChain(interop.Chain):
    def __init__(self, app, workdir):
        super().__init__(app, workdir)
        self.libev = []

    def ss_server(self, method, password=PASSWORD, udp=False):
        p = Libev(self.workdir, lambda port: [SS_SERVER, "-s", LOOPBACK, "-p", str(port),
                                              "-k", password, "-m", method, "-v"] +
                  (["-u"] if udp else []))
        self.libev.append(p)
        return p.start()

    def ss_local(self, method, server_port, password=PASSWORD, udp=False):
        p = Libev(self.workdir, lambda port: [SS_LOCAL, "-s", LOOPBACK, "-p", str(server_port),
                                              "-b", LOOPBACK, "-l", str(port),
                                              "-k", password, "-m", method, "-v"] +
                  (["-u"] if udp else []))
        self.libev.append(p)
        return p.start()

    def logs(self):
        out = [super().logs()]
        for p in self.libev:
            out.append(f"--- shadowsocks-libev {p.log_path.name}:\n{p.log()[-4000:]}")
        return "\n".join(out)


@pytest.fixture
def chain(app, tmp_path):
    c = SsChain(app, tmp_path)
    yield c
    for p in c.libev + c.peers:
        p.stop()
    stop_cleanly(c.ours, "proxy")


def our_client(method, server_port, password=PASSWORD):
    """socks inbound -> shadowsocks outbound to 127.0.0.1:server_port."""
    return (interop.our_socks_inbound() +
            f'[[outbound]]\ntag = "up"\nprotocol = "shadowsocks"\nserver = "127.0.0.1"\n'
            f'port = {server_port}\n[outbound.settings]\nmethod = "{method}"\n'
            f'password = "{password}"\n')


def our_server(method, password=PASSWORD, upstream=None):
    """shadowsocks inbound on {port0} -> freedom (or upstream's outbound)."""
    text = ('[[inbound]]\ntag = "in"\nprotocol = "shadowsocks"\nlisten = "127.0.0.1"\n'
            'port = {port0}\n'
            f'[inbound.settings]\nmethod = "{method}"\npassword = "{password}"\n\n')
    return text + (upstream or interop.FREEDOM)


def saw_ours(chain, target_port, timeout=2.0):
    """Every one of our proxies logged the flow to the echo."""
    want = f"tcp flow to 127.0.0.1:{target_port} from inbound"
    deadline = time.monotonic() + timeout
    while any(want not in p.log() for p in chain.ours):
        if time.monotonic() > deadline:
            raise AssertionError(f"no {want!r} in a log\n{chain.logs()}")
        time.sleep(0.05)


# ---------------------------------------------------------------- interop

@needs_libev
@pytest.mark.parametrize("method", METHODS)
def test_ours_to_libev(chain, echo, method):
    """Our shadowsocks outbound against ss-server: 16 MiB, half-close, burst."""
    server = chain.ss_server(method)
    client = chain.proxy(our_client(method, server.port))
    interop.echo_check(client.port, echo.port, chain.logs)
    saw_ours(chain, echo.port)


@needs_libev
@pytest.mark.parametrize("method", METHODS)
def test_libev_to_ours(chain, echo, method):
    """ss-local against our shadowsocks inbound: 16 MiB, half-close, burst."""
    server = chain.proxy(our_server(method))
    client = chain.ss_local(method, server.port)
    interop.echo_check(client.port, echo.port, chain.logs)
    saw_ours(chain, echo.port)


@pytest.mark.parametrize("method", METHODS)
def test_ours_to_ours(chain, echo, method):
    server = chain.proxy(our_server(method))
    client = chain.proxy(our_client(method, server.port))
    interop.echo_check(client.port, echo.port, chain.logs)
    saw_ours(chain, echo.port)


def test_inbound_to_a_proxied_upstream(chain, echo):
    """Our shadowsocks inbound whose upstream is itself stacked (our
    shadowsocks outbound to a second inbound of ours): the first chunk's
    payload after the address goes through the upstream's started stack."""
    last = chain.proxy(our_server("aes-256-gcm", password="hop two"))
    hop = ('[[outbound]]\ntag = "hop"\nprotocol = "shadowsocks"\nserver = "127.0.0.1"\n'
           f'port = {last.port}\n[outbound.settings]\nmethod = "aes-256-gcm"\n'
           'password = "hop two"\n\n')
    first = chain.proxy(our_server("chacha20-ietf-poly1305", upstream=hop))
    client = chain.proxy(our_client("chacha20-ietf-poly1305", first.port))
    interop.echo_check(client.port, echo.port, chain.logs, size=1 << 20)


@needs_libev
def test_libev_first_bytes_with_the_address(chain, echo):
    """A request whose first bytes the client sends at once (ss-local puts
    them in the address's chunk) and then waits for the answer: the server
    must pass them on without more bytes from the client."""
    server = chain.proxy(our_server("aes-128-gcm"))
    client = chain.ss_local("aes-128-gcm", server.port)
    with socks5_connect(client.port, LOOPBACK, echo.port, timeout=5) as s:
        s.settimeout(5)
        s.sendall(b"ping")
        assert s.recv(16) == b"ping"


# ---------------------------------------------------------------- refusals

def assert_drained(chain, client, echo, server, why):
    """A CONNECT through client to echo that sends "hello": nothing comes
    back, the connection is held for the drain (2 s at least) and server
    logged why."""
    start = time.monotonic()
    with socks5_connect(client.port, LOOPBACK, echo.port, timeout=5) as s:
        s.settimeout(10)
        s.sendall(b"hello")
        try:
            got = s.recv(16)
        except OSError:
            got = b""
    took = time.monotonic() - start
    assert got == b"", chain.logs()
    assert took >= 1.9, f"closed after {took:.2f} s\n{chain.logs()}"
    interop.assert_logged(server, why, chain.logs)


def first_flight(chain, method, password, echo, size=None):
    """What our client (method, password) sends first for a CONNECT to echo
    that sends b"first", caught by a listener of ours in its server's place:
    size bytes (5 s for them), or with size None all that comes before 0.5 s
    of quiet."""
    sink = socket.socket()
    sink.bind((LOOPBACK, 0))
    sink.listen(1)
    spy = chain.proxy(our_client(method, sink.getsockname()[1], password=password))
    with socks5_connect(spy.port, LOOPBACK, echo.port, timeout=5) as s:
        s.sendall(b"first")
        conn, _ = sink.accept()
        conn.settimeout(0.5 if size is None else 5)
        first = b""
        while size is None or len(first) < size:
            try:
                more = conn.recv(4096)
            except socket.timeout:
                if size is not None:
                    raise
                break
            if not more:
                break
            first += more
        conn.close()
    sink.close()
    return first


def reply_to(port, first):
    """Sends first to port on a new connection; what comes back within 1 s,
    or None when nothing has (the connection still open)."""
    with connect(port) as r:
        r.sendall(first)
        r.settimeout(1.0)
        try:
            return r.recv(64)
        except socket.timeout:
            return None


@needs_libev
def test_wrong_password_is_drained_not_answered(chain, echo):
    """ss-local with the wrong password: our inbound sends nothing back and
    keeps the connection open for the drain (2 s at least), and logs why."""
    server = chain.proxy(our_server("aes-256-gcm"))
    client = chain.ss_local("aes-256-gcm", server.port, password=WRONG_PASSWORD)
    assert_drained(chain, client, echo, server, "refused: shadowsocks: authentication failed "
                   "(no user's key opens the first chunk)")


def test_replayed_salt_is_refused(chain, echo):
    """The first bytes of a real connection sent again: the second is
    refused as a replay (logged), and nothing comes back."""
    server = chain.proxy(our_server("aes-128-gcm"))
    client = chain.proxy(our_client("aes-128-gcm", server.port))
    first = first_flight(chain, "aes-128-gcm", PASSWORD, echo,
                         size=16 + 18 + 7 + 16 + 18 + 5 + 16)
    replies = [reply_to(server.port, first) for _ in range(2)]
    interop.assert_logged(server, "refused: shadowsocks: replayed salt", chain.logs)
    assert replies[1] is None, chain.logs()
    del client


# ---------------------------------------------------------------- 2022

@pytest.mark.parametrize("method", list(METHODS_2022))
def test_2022_ours_to_ours(chain, echo, method):
    key = psk(METHODS_2022[method])
    server = chain.proxy(our_server(method, password=key))
    client = chain.proxy(our_client(method, server.port, password=key))
    interop.echo_check(client.port, echo.port, chain.logs)
    saw_ours(chain, echo.port)


def test_2022_wrong_key_is_drained_not_answered(chain, echo):
    """Our 2022 client with another key: our inbound sends nothing back,
    keeps the connection for the drain (2 s at least) and logs why."""
    method = "2022-blake3-aes-256-gcm"
    server = chain.proxy(our_server(method, password=psk(32)))
    client = chain.proxy(our_client(method, server.port, password=psk(32)))
    assert_drained(chain, client, echo, server, "refused: shadowsocks: authentication failed "
                   "(no user's key opens the first chunk)")


def test_2022_replayed_request_is_refused(chain, echo):
    """A 2022 client's first flight sent again within the time window: the
    second is refused as a replay (logged) and not answered."""
    method, key = "2022-blake3-aes-128-gcm", psk(16)
    server = chain.proxy(our_server(method, password=key))
    # the headers (random padding) and the first chunk
    first = first_flight(chain, method, key, echo)
    replies = [reply_to(server.port, first) for _ in range(2)]
    interop.assert_logged(server, "refused: shadowsocks: replayed salt", chain.logs)
    assert replies[1] is None, chain.logs()


def our_server_eih(method, ipsk, upsks):
    """A 2022 inbound on {port0} with users behind the identity PSK ipsk
    (SIP022-2) -> freedom."""
    text = ('[log]\naccess = "stderr"\n\n'
            '[[inbound]]\ntag = "in"\nprotocol = "shadowsocks"\nlisten = "127.0.0.1"\n'
            f'port = {{port0}}\n[inbound.settings]\nmethod = "{method}"\npassword = "{ipsk}"\n')
    for i, pw in enumerate(upsks):
        text += f'[[inbound.settings.users]]\nname = "u{i}"\npassword = "{pw}"\n'
    return text + "\n" + interop.FREEDOM


@pytest.mark.parametrize("method", ["2022-blake3-aes-128-gcm", "2022-blake3-aes-256-gcm"])
def test_2022_two_users_ours_to_ours(chain, echo, method):
    """Two users behind one identity PSK: each client ("iPSK:uPSK") gets
    through (the first with 16 MiB, half-close and burst), and the server
    names the user the identity header named."""
    n = METHODS_2022[method]
    ipsk, users = psk(n), [psk(n), psk(n)]
    server = chain.proxy(our_server_eih(method, ipsk, users))
    first = chain.proxy(our_client(method, server.port, password=f"{ipsk}:{users[0]}"))
    interop.echo_check(first.port, echo.port, chain.logs)
    second = chain.proxy(our_client(method, server.port, password=f"{ipsk}:{users[1]}"))
    with socks5_connect(second.port, LOOPBACK, echo.port, timeout=5) as s:
        s.settimeout(5)
        s.sendall(b"second user")
        assert s.recv(64) == b"second user", chain.logs()
    saw_ours(chain, echo.port)
    interop.assert_logged(server, "inbound in user u0 rule", chain.logs)
    interop.assert_logged(server, "inbound in user u1 rule", chain.logs)


def test_2022_unknown_identity_is_drained_not_answered(chain, echo):
    """A client behind the right identity PSK with a user PSK the server
    does not list: nothing comes back, the connection is held for the drain
    and the refusal is logged."""
    method = "2022-blake3-aes-128-gcm"
    ipsk = psk(16)
    server = chain.proxy(our_server_eih(method, ipsk, [psk(16), psk(16)]))
    client = chain.proxy(our_client(method, server.port, password=f"{ipsk}:{psk(16)}"))
    assert_drained(chain, client, echo, server, "refused: shadowsocks: unknown identity "
                   "(no user's key hash matches the identity header)")


# ---------------------------------------------------------------- 2022 UDP

def saw_udp_echoes(chain, server, a, udp_echo, udp_echo_b):
    """Datagrams of 1 to 2701 bytes, a 16 KiB one and both echoes through one
    association, each answer from its own peer."""
    for i in range(10):
        a.echo(udp_echo, os.urandom(1 + i * 300))
    a.echo(udp_echo, os.urandom(16384))
    a.echo(udp_echo_b, b"to b")
    saw_udp(server, udp_echo.port, chain.logs)


@pytest.mark.parametrize("method", list(METHODS_2022))
def test_2022_udp_ours_to_ours(chain, udp_echo, udp_echo_b, method):
    """Our socks inbound -> our 2022 outbound's UDP (one client session) ->
    our 2022 inbound's UDP (a NAT entry for the session) -> echoes."""
    key = psk(METHODS_2022[method])
    server = chain.proxy(our_server(method, password=key))
    client = chain.proxy(our_client(method, server.port, password=key))
    with Association(client.port) as a:
        saw_udp_echoes(chain, server, a, udp_echo, udp_echo_b)
    assert "ERROR" not in server.log(), server.log()


@pytest.mark.parametrize("method", ["2022-blake3-aes-128-gcm", "2022-blake3-aes-256-gcm"])
def test_2022_udp_two_users(chain, udp_echo, udp_echo_b, method):
    """Two users behind one identity PSK: each client ("iPSK:uPSK") gets its
    UDP echoes (the identity header names the user); a client whose uPSK
    the server does not list gets nothing back, and the drop is counted."""
    n = METHODS_2022[method]
    ipsk, users = psk(n), [psk(n), psk(n)]
    server = chain.proxy(our_server_eih(method, ipsk, users))
    for i, upsk in enumerate(users):
        client = chain.proxy(our_client(method, server.port, password=f"{ipsk}:{upsk}"))
        with Association(client.port) as a:
            saw_udp_echoes(chain, server, a, udp_echo, udp_echo_b)
            a.echo(udp_echo, f"user {i}".encode())
    interop.assert_logged(server, "inbound in user u0 rule", chain.logs)
    interop.assert_logged(server, "inbound in user u1 rule", chain.logs)
    stranger = chain.proxy(our_client(method, server.port, password=f"{ipsk}:{psk(n)}"))
    with Association(stranger.port) as a:
        a.send(LOOPBACK, udp_echo.port, b"stranger")
        assert a.silent(1.0), chain.logs()
    interop.assert_logged(server, "that no user's key opens (1 so far)", chain.logs)


class UdpRelay(UdpServer):
    """Forwards a client's datagrams to a server and the server's back to the
    client's last address, keeping every datagram the client sent."""

    def __init__(self, server_port):
        self.server = (LOOPBACK, server_port)
        self.client = None
        self.sent = []
        self.answers = 0
        super().__init__()

    def handle(self, data, src):
        if src == self.server:
            self.answers += 1
            if self.client:
                self.sock.sendto(data, self.client)
        else:
            self.client = src
            self.sent.append(data)
            self.sock.sendto(data, self.server)

    def replay(self, pkt):
        self.sock.sendto(pkt, self.server)


def test_2022_udp_replayed_packet_is_not_answered_twice(chain, udp_echo):
    """A relay between our 2022 client and server records the client's
    packet and sends it again: the server drops it (its session's window
    saw that packet ID), counts it, and neither the echo nor the relay sees
    a second one."""
    method, key = "2022-blake3-aes-256-gcm", psk(32)
    server = chain.proxy(our_server(method, password=key))
    relay = UdpRelay(server.port)
    try:
        client = chain.proxy(our_client(method, relay.port, password=key))
        with Association(client.port) as a:
            a.echo(udp_echo, b"once only")
            assert len(relay.sent) == 1 and relay.answers == 1, chain.logs()
            before = len(udp_echo.received)
            relay.replay(relay.sent[0])
            assert a.silent(1.0), chain.logs()
            interop.assert_logged(server, "inbound: in: dropped a replayed UDP packet from "
                                  f"127.0.0.1:{relay.port} (1 so far)", chain.logs)
            assert relay.answers == 1 and len(udp_echo.received) == before, chain.logs()
            # the session still works after the replay
            a.echo(udp_echo, b"next")
    finally:
        relay.close()


def check_fails(run, tmp_path, text, want):
    path = tmp_path / "c.toml"
    path.write_text(text)
    r = run("--test", "-c", str(path))
    assert r.returncode != 0
    assert want in r.stdout + r.stderr, r.stdout + r.stderr


def test_spec_refusals(run, tmp_path):
    base = ('[[inbound]]\ntag = "ss"\nprotocol = "shadowsocks"\nlisten = "127.0.0.1"\n'
            'port = 1\n')
    # 2022: a key that is not base64 of exactly the method's length
    for method, n, pw in [("2022-blake3-aes-128-gcm", 16, psk(32)),
                          ("2022-blake3-aes-128-gcm", 16, "correct horse battery staple"),
                          ("2022-blake3-aes-256-gcm", 32, psk(16)),
                          ("2022-blake3-chacha20-poly1305", 32, psk(32)[:-1])]:
        check_fails(run, tmp_path, base + f'[inbound.settings]\nmethod = "{method}"\n'
                    f'password = "{pw}"\n\n' + interop.FREEDOM,
                    f"configuration invalid: inbound ss: shadowsocks 2022 key must be base64 "
                    f"of {n} bytes")
    check_fails(run, tmp_path, base + '[inbound.settings]\nmethod = "aes-128-gcm"\n\n' +
                interop.FREEDOM, "inbound ss: protocol shadowsocks needs settings.password")
    out = ('[[outbound]]\ntag = "o"\nprotocol = "shadowsocks"\nserver = "127.0.0.1"\n'
           'port = 1\n[outbound.settings]\n')
    check_fails(run, tmp_path, out + 'method = "2022-blake3-chacha20-poly1305"\npassword = "x"\n',
                "configuration invalid: outbound o: shadowsocks 2022 key must be base64 of 32 "
                "bytes")
    check_fails(run, tmp_path, out + f'method = "2022-blake3-aes-128-gcm"\npassword = "{psk(32)}"\n',
                "configuration invalid: outbound o: shadowsocks 2022 key must be base64 of 16 "
                "bytes")
    check_fails(run, tmp_path, out + 'password = "x"\n',
                "outbound o: protocol shadowsocks needs settings.method")
    check_fails(run, tmp_path, out + 'method = "rc4-md5"\npassword = "x"\n',
                "unknown variant `rc4-md5`, expected one of `aes-128-gcm`, `aes-256-gcm`, "
                "`chacha20-ietf-poly1305`, `2022-blake3-aes-128-gcm`, `2022-blake3-aes-256-gcm`, "
                "`2022-blake3-chacha20-poly1305`")
    check_fails(run, tmp_path, out + 'method = "aes-128-gcm"\n',
                "outbound o: protocol shadowsocks needs settings.password")


@needs_libev
@pytest.mark.parametrize("method", METHODS)
def test_udp_ours_to_libev(chain, udp_echo, udp_echo_b, method):
    """app --SOCKS5 UDP--> our socks inbound -> our shadowsocks outbound (a
    packet a datagram, each with its target) -> ss-server -u -> UDP echoes:
    20 datagrams of 1 to 1900 bytes to one echo, then both echoes through one
    association, each answering its own."""
    server = chain.ss_server(method, udp=True)
    client = chain.proxy(our_client(method, server.port))
    with Association(client.port) as a:
        for i in range(20):
            data = os.urandom(1 + i * 100)
            a.echo(udp_echo, data)
        a.echo(udp_echo_b, b"to b")
        a.echo(udp_echo, b"to a")


def saw_udp(server, target_port, logs, timeout=2.0):
    """Our server routed a UDP flow to the echo from its shadowsocks inbound."""
    interop.assert_logged(server, f"udp flow to 127.0.0.1:{target_port} from inbound in",
                          logs, timeout)


@needs_libev
@pytest.mark.parametrize("method", METHODS)
def test_udp_libev_to_ours(chain, udp_echo, udp_echo_b, method):
    """app --SOCKS5 UDP--> ss-local -u -> our shadowsocks inbound's UDP (a
    NAT entry for ss-local's socket) -> UDP echoes: 20 datagrams of 1 to
    1900 bytes, then both echoes through one association, each answer
    sealed back with its own source."""
    server = chain.proxy(our_server(method))
    client = chain.ss_local(method, server.port, udp=True)
    with Association(client.port) as a:
        for i in range(20):
            a.echo(udp_echo, os.urandom(1 + i * 100))
        a.echo(udp_echo_b, b"to b")
        a.echo(udp_echo, b"to a")
    saw_udp(server, udp_echo.port, chain.logs)
    saw_udp(server, udp_echo_b.port, chain.logs)


@pytest.mark.parametrize("method", METHODS)
def test_udp_ours_to_ours(chain, udp_echo, udp_echo_b, method):
    """Our socks inbound -> our shadowsocks outbound's UDP -> our inbound's
    UDP -> echoes; a big datagram (16 KiB) too."""
    server = chain.proxy(our_server(method))
    client = chain.proxy(our_client(method, server.port))
    with Association(client.port) as a:
        for i in range(10):
            a.echo(udp_echo, os.urandom(1 + i * 300))
        a.echo(udp_echo, os.urandom(16384))
        a.echo(udp_echo_b, b"to b")
    saw_udp(server, udp_echo.port, chain.logs)


def seal_packet(method, password, plain):
    """An AEAD-2017 UDP packet computed here (python3-cryptography): salt,
    Seal(plain) with nonce zero (SIP004)."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF
    import hashlib
    n = 16 if method == "aes-128-gcm" else 32
    key, prev = b"", b""
    while len(key) < n:  # EVP_BytesToKey(MD5, no salt, one round)
        prev = hashlib.md5(prev + password.encode()).digest()
        key += prev
    salt = os.urandom(n)
    sub = HKDF(hashes.SHA1(), n, salt, b"ss-subkey").derive(key[:n])
    cls = ChaCha20Poly1305 if method.startswith("chacha") else AESGCM
    return salt + cls(sub).encrypt(b"\0" * 12, plain, None)


def open_packet(method, password, pkt):
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF
    import hashlib
    n = 16 if method == "aes-128-gcm" else 32
    key, prev = b"", b""
    while len(key) < n:
        prev = hashlib.md5(prev + password.encode()).digest()
        key += prev
    sub = HKDF(hashes.SHA1(), n, pkt[:n], b"ss-subkey").derive(key[:n])
    cls = ChaCha20Poly1305 if method.startswith("chacha") else AESGCM
    return cls(sub).decrypt(b"\0" * 12, pkt[n:], None)


def test_udp_packets_computed_apart(chain, udp_echo):
    """A packet sealed here reaches the echo; the reply opens here with a
    salt of its own and names the echo as its source. Packets under
    another password, garbage and a short one get no reply and are counted
    in the debug line."""
    method = "chacha20-ietf-poly1305"
    server = chain.proxy(our_server(method))
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind((LOOPBACK, 0))
    u.settimeout(3)
    try:
        target = b"\x01\x7f\x00\x00\x01" + udp_echo.port.to_bytes(2, "big")
        sent = seal_packet(method, PASSWORD, target + b"sealed apart")
        u.sendto(sent, (LOOPBACK, server.port))
        reply, src = u.recvfrom(65535)
        assert src == (LOOPBACK, server.port)
        assert reply[:32] != sent[:32], "a fresh salt each packet"
        assert open_packet(method, PASSWORD, reply) == target + b"sealed apart"
        bad = [seal_packet(method, WRONG_PASSWORD, target + b"wrong"), os.urandom(200), b"x"]
        for pkt in bad:
            u.sendto(pkt, (LOOPBACK, server.port))
        u.settimeout(1.0)
        with pytest.raises(socket.timeout):
            u.recvfrom(65535)
        me = f"127.0.0.1:{u.getsockname()[1]}"
        for k in range(1, 4):
            interop.assert_logged(server, f"inbound: in: dropped a UDP packet from {me} that "
                                  f"no user's key opens ({k} so far)", chain.logs)
        # the entry still works after the drops
        u.settimeout(3)
        u.sendto(seal_packet(method, PASSWORD, target + b"again"), (LOOPBACK, server.port))
        assert open_packet(method, PASSWORD, u.recvfrom(65535)[0]) == target + b"again"
    finally:
        u.close()


def udp_round_trip(port, method, password, echo_port, data, timeout=2.0):
    """One packet sealed here to our inbound's UDP port; the opened reply,
    or None when nothing comes back within timeout."""
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind((LOOPBACK, 0))
    u.settimeout(timeout)
    try:
        target = b"\x01\x7f\x00\x00\x01" + echo_port.to_bytes(2, "big")
        u.sendto(seal_packet(method, password, target + data), (LOOPBACK, port))
        try:
            reply = u.recvfrom(65535)[0]
        except (socket.timeout, ConnectionRefusedError):
            return None
        return open_packet(method, password, reply)[len(target):]
    finally:
        u.close()


def test_udp_follows_the_inbound_on_reload(chain, udp_echo):
    """The UDP socket follows the inbound like its TCP listener: a new
    password reaches UDP on the same port (the old one is dropped), a
    switch to a 2022 method serves 2022 UDP there (an AEAD-2017 packet is
    dropped), a switch back serves AEAD-2017 again."""
    import reloadkit
    method = "aes-128-gcm"
    server = chain.proxy(our_server(method, password="first"))
    assert udp_round_trip(server.port, method, "first", udp_echo.port, b"one") == b"one"
    outcome, _ = reloadkit.reload(server, our_server(method, password="second"))
    assert outcome == "config reload: changed inbounds", outcome
    assert udp_round_trip(server.port, method, "first", udp_echo.port, b"x", 0.5) is None
    assert udp_round_trip(server.port, method, "second", udp_echo.port, b"two") == b"two"
    key = psk(16)
    reloadkit.reload(server, our_server("2022-blake3-aes-128-gcm", password=key))
    assert udp_round_trip(server.port, method, "second", udp_echo.port, b"x", 0.5) is None
    reloadkit.reload(server, our_server("aes-256-gcm", password="third"))
    assert udp_round_trip(server.port, "aes-256-gcm", "third", udp_echo.port,
                          b"three") == b"three"
    assert "ERROR" not in server.log(), server.log()


def our_server_users(method, passwords):
    """shadowsocks inbound on {port0} with one [[inbound.settings.users]] a
    password -> freedom."""
    text = ('[[inbound]]\ntag = "in"\nprotocol = "shadowsocks"\nlisten = "127.0.0.1"\n'
            f'port = {{port0}}\n[inbound.settings]\nmethod = "{method}"\n')
    for i, pw in enumerate(passwords):
        text += f'[[inbound.settings.users]]\nname = "u{i}"\npassword = "{pw}"\n'
    return text + "\n" + interop.FREEDOM


@needs_libev
@pytest.mark.parametrize("method", METHODS)
def test_two_users(chain, echo, udp_echo, method):
    """Two users on one inbound: ss-local with either password gets TCP and
    UDP through (trial decryption across users), a third password is
    drained and its UDP dropped."""
    users = ["alice's password", "bob's password"]
    server = chain.proxy(our_server_users(method, users))
    for pw in users:
        client = chain.ss_local(method, server.port, password=pw, udp=True)
        with socks5_connect(client.port, LOOPBACK, echo.port, timeout=5) as s:
            s.settimeout(5)
            s.sendall(pw.encode())
            assert s.recv(64) == pw.encode(), chain.logs()
        with Association(client.port) as a:
            a.echo(udp_echo, pw.encode())
    assert udp_round_trip(server.port, method, users[1], udp_echo.port, b"direct") == b"direct"
    assert udp_round_trip(server.port, method, "nobody's", udp_echo.port, b"x", 0.5) is None
    interop.assert_logged(server, "that no user's key opens (1 so far)", chain.logs)
    stranger = chain.ss_local(method, server.port, password="nobody's")
    with socks5_connect(stranger.port, LOOPBACK, echo.port, timeout=5) as s:
        s.settimeout(1.0)
        s.sendall(b"hello")
        with pytest.raises(socket.timeout):
            s.recv(16)
    interop.assert_logged(server, "refused: shadowsocks: authentication failed "
                          "(no user's key opens the first chunk)", chain.logs)


def test_users_spec(run, tmp_path):
    base = ('[[inbound]]\ntag = "ss"\nprotocol = "shadowsocks"\nlisten = "127.0.0.1"\n'
            'port = 1\n')
    check_fails(run, tmp_path, base + '[inbound.settings]\nmethod = "aes-128-gcm"\n'
                '[[inbound.settings.users]]\nname = "a"\n\n' + interop.FREEDOM,
                "missing field `password`")
    # SIP022-2: several 2022 users are behind settings.password, an AES
    # identity PSK
    users = f'[[inbound.settings.users]]\npassword = "{psk(32)}"\n\n' + interop.FREEDOM
    check_fails(run, tmp_path, base + '[inbound.settings]\nmethod = '
                f'"2022-blake3-chacha20-poly1305"\npassword = "{psk(32)}"\n' + users,
                "inbound ss: several users on a shadowsocks 2022 inbound need an AES method "
                "(identity headers are AES blocks), not 2022-blake3-chacha20-poly1305")
    check_fails(run, tmp_path, base + '[inbound.settings]\nmethod = "2022-blake3-aes-256-gcm"\n'
                + users,
                "inbound ss: several users on a shadowsocks 2022 inbound need settings.password, "
                "the identity PSK they are behind")
    check_fails(run, tmp_path, base + '[inbound.settings]\nmethod = "2022-blake3-aes-256-gcm"\n'
                f'password = "{psk(16)}"\n' + users,
                "configuration invalid: inbound ss: shadowsocks 2022 identity key "
                "(settings.password) must be base64 of 32 bytes")
    check_fails(run, tmp_path, base + '[inbound.settings]\nmethod = "2022-blake3-aes-256-gcm"\n'
                f'password = "{psk(32)}"\n[[inbound.settings.users]]\npassword = "{psk(16)}"\n\n'
                + interop.FREEDOM,
                "configuration invalid: inbound ss: shadowsocks 2022 key must be base64 of 32 "
                "bytes")
    out = ('[[outbound]]\ntag = "o"\nprotocol = "shadowsocks"\nserver = "127.0.0.1"\n'
           'port = 1\n[outbound.settings]\n')
    check_fails(run, tmp_path, out + 'method = "2022-blake3-chacha20-poly1305"\n'
                f'password = "{psk(32)}:{psk(32)}"\n',
                'configuration invalid: outbound o: identity PSKs ("<iPSK>:<uPSK>") need a '
                "shadowsocks 2022 AES method, not 2022-blake3-chacha20-poly1305")
    check_fails(run, tmp_path, out + 'method = "2022-blake3-aes-128-gcm"\n'
                f'password = "{":".join(psk(16) for _ in range(6))}"\n',
                "configuration invalid: outbound o: at most 4 identity PSKs before the user's PSK")
    check_fails(run, tmp_path, out + 'method = "2022-blake3-aes-128-gcm"\n'
                f'password = "{psk(16)}:{psk(32)}"\n',
                "configuration invalid: outbound o: shadowsocks 2022 key must be base64 of 16 "
                "bytes")
    path = tmp_path / "ok.toml"
    path.write_text(base + '[inbound.settings]\nmethod = "aes-128-gcm"\n'
                    '[[inbound.settings.users]]\npassword = "a"\n'
                    '[[inbound.settings.users]]\npassword = "b"\n\n' + interop.FREEDOM)
    r = run("--test", "-c", str(path))
    assert r.returncode == 0, r.stdout + r.stderr


# ---------------------------------------------------------------- v2ray 4.34

V2_METHODS = ["aes-128-gcm", "chacha20-ietf-poly1305"]


def v2_ss_server(method):
    def make(port):
        return interop.v2_config({"tag": "in", "listen": "127.0.0.1", "port": port,
                                  "protocol": "shadowsocks",
                                  "settings": {"method": method, "password": PASSWORD,
                                               "network": "tcp"}}, interop.V2_FREEDOM)
    return make


def v2_ss_client(method, server_port):
    def make(port):
        return interop.v2_config(interop.v2_socks_inbound(port), {
            "tag": "up", "protocol": "shadowsocks",
            "settings": {"servers": [{"address": "127.0.0.1", "port": server_port,
                                      "method": method, "password": PASSWORD}]}})
    return make


@interop.needs_v2ray
@pytest.mark.parametrize("method", V2_METHODS)
def test_ours_to_v2ray(chain, echo, method):
    server = chain.v2ray(v2_ss_server(method))
    client = chain.proxy(our_client(method, server.port))
    interop.echo_check(client.port, echo.port, chain.logs)


@interop.needs_v2ray
@pytest.mark.parametrize("method", V2_METHODS)
def test_v2ray_to_ours(chain, echo, method):
    server = chain.proxy(our_server(method))
    client = chain.v2ray(v2_ss_client(method, server.port))
    interop.echo_check(client.port, echo.port, chain.logs)


# ---------------------------------------------------------------- sniffing

SNIFFED = "sniffed.example"


def sniffing_server(method, password, blocked):
    """A sniffing shadowsocks inbound: flows to the name blocked go to the
    blackhole, the rest direct."""
    text = our_server(method, password, upstream=route.DIRECT + route.BLOCK +
                      route.rule("block", domain=[blocked]))
    return text.replace("port = {port0}\n", "port = {port0}\nsniffing = true\n", 1)


def key_of(method):
    return psk(METHODS_2022[method]) if method in METHODS_2022 else PASSWORD


def first_bytes(kind):
    if kind == "tls":
        return adversarialkit.client_hello(SNIFFED)
    return route.http_get_for(SNIFFED)


def assert_routed(server, echo, want, logs):
    got = route.decision(server, "tcp", f"127.0.0.1:{echo.port}")
    assert got == want, f"{got} is not {want}\n{logs()}"


def nothing_back(s, timeout=1.0):
    """The flow was swallowed: EOF or silence, never a byte."""
    s.settimeout(timeout)
    try:
        return s.recv(64) == b""
    except socket.timeout:
        return True


@pytest.mark.parametrize("kind", ["tls", "http"])
@pytest.mark.parametrize("method", ["aes-128-gcm", "2022-blake3-aes-256-gcm"])
def test_sniffing_routes_by_the_name_in_later_chunks(chain, echo, method, kind):
    """Our client sends the address alone, the app's bytes in later chunks:
    the name in them picks the rule; with the rule on another name the same
    bytes reach the echo untouched."""
    key = key_of(method)
    data = first_bytes(kind)
    blocking = chain.proxy(sniffing_server(method, key, SNIFFED))
    client = chain.proxy(our_client(method, blocking.port, password=key))
    with socks5_connect(client.port, LOOPBACK, echo.port, timeout=5) as s:
        s.sendall(data)
        assert nothing_back(s), chain.logs()
    assert_routed(blocking, echo, ("in", "block", "rule #1"), chain.logs)

    passing = chain.proxy(sniffing_server(method, key, "other.example"))
    client = chain.proxy(our_client(method, passing.port, password=key))
    with socks5_connect(client.port, LOOPBACK, echo.port, timeout=5) as s:
        s.settimeout(5)
        s.sendall(data)
        assert recv_exact(s, len(data)) == data
    assert_routed(passing, echo, ("in", "direct", "default route"), chain.logs)


def master_key(method, password):
    import hashlib
    n = 16 if method == "aes-128-gcm" else 32
    key, prev = b"", b""
    while len(key) < n:  # EVP_BytesToKey(MD5, no salt, one round)
        prev = hashlib.md5(prev + password.encode()).digest()
        key += prev
    return key[:n]


class SealedStream:
    """One direction of an AEAD-2017 stream (SIP004), computed here with
    python3-cryptography: HKDF-SHA1 subkey of the salt, nonce counting from
    zero, little-endian."""

    def __init__(self, method, password, salt):
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305
        from cryptography.hazmat.primitives.kdf.hkdf import HKDF
        key = master_key(method, password)
        sub = HKDF(hashes.SHA1(), len(key), salt, b"ss-subkey").derive(key)
        self.aead = (ChaCha20Poly1305 if method.startswith("chacha") else AESGCM)(sub)
        self.nonce = 0

    def _next(self):
        n = self.nonce.to_bytes(12, "little")
        self.nonce += 1
        return n

    def seal(self, payload):
        return (self.aead.encrypt(self._next(), len(payload).to_bytes(2, "big"), None) +
                self.aead.encrypt(self._next(), payload, None))

    def open_from(self, sock):
        n = int.from_bytes(self.aead.decrypt(self._next(), recv_exact(sock, 18), None), "big")
        return self.aead.decrypt(self._next(), recv_exact(sock, n + 16), None)


def sealed_exchange(port, method, target_port, first, later):
    """Connects to our inbound at port as an AEAD-2017 client: the address
    of 127.0.0.1:target_port and first in one chunk, then later in a chunk
    of its own (if any). Returns the socket."""
    n = len(master_key(method, PASSWORD))
    salt = os.urandom(n)
    up = SealedStream(method, PASSWORD, salt)
    addr = b"\x01" + socket.inet_aton(LOOPBACK) + target_port.to_bytes(2, "big")
    s = connect(port)
    s.sendall(salt + up.seal(addr + first))
    if later:
        time.sleep(0.05)  # the sniff has the first chunk alone
        s.sendall(up.seal(later))
    return s


def read_sealed(s, method, want):
    """The server's answer, opened: salt, then chunks until want bytes."""
    n = len(master_key(method, PASSWORD))
    s.settimeout(5)
    down = SealedStream(method, PASSWORD, recv_exact(s, n))
    got = b""
    while len(got) < want:
        got += down.open_from(s)
    return got


@pytest.mark.parametrize("split", [False, True])
def test_sniffing_reads_the_address_chunk(chain, echo, split):
    """A client that puts its first bytes in the address's chunk (ss-libev,
    v2ray may), whole or with the rest in the next chunk: the name picks the
    rule without more bytes from the client, and a passing flow delivers
    every byte once, in order."""
    pytest.importorskip("cryptography")
    method = "chacha20-ietf-poly1305"
    data = first_bytes("tls")
    cut = len(data) if not split else len(data) // 2
    blocking = chain.proxy(sniffing_server(method, PASSWORD, SNIFFED))
    with sealed_exchange(blocking.port, method, echo.port, data[:cut], data[cut:]) as s:
        assert nothing_back(s), chain.logs()
    assert_routed(blocking, echo, ("in", "block", "rule #1"), chain.logs)

    passing = chain.proxy(sniffing_server(method, PASSWORD, "other.example"))
    with sealed_exchange(passing.port, method, echo.port, data[:cut], data[cut:]) as s:
        assert read_sealed(s, method, len(data)) == data
    assert_routed(passing, echo, ("in", "direct", "default route"), chain.logs)


def test_sniffing_closes_on_a_bad_chunk(chain, echo):
    """A chunk after the address whose tag does not match, while the sniff
    waits: the connection closes with nothing dialled, as the body would
    close it, and the exact text is logged."""
    pytest.importorskip("cryptography")
    method = "aes-128-gcm"
    server = chain.proxy(sniffing_server(method, PASSWORD, SNIFFED))
    bad = bytearray(SealedStream(method, PASSWORD, os.urandom(16)).seal(b"GET / HTTP/1.1\r\n"))
    with sealed_exchange(server.port, method, echo.port, b"", b"") as s:
        s.sendall(bytes(bad))
        s.settimeout(5)
        assert s.recv(64) == b"", chain.logs()
    interop.assert_logged(server, "refused: the client's sealed bytes after the request do "
                          "not open", chain.logs)
    assert route.decision(server, "tcp", f"127.0.0.1:{echo.port}", timeout=0.2) is None


def test_sniffed_bytes_go_through_a_proxied_upstream(chain, echo):
    """The plaintext the sniff held goes through an upstream whose stack
    started already (our shadowsocks outbound to a second inbound of ours)."""
    pytest.importorskip("cryptography")
    method = "aes-128-gcm"
    last = chain.proxy(our_server("aes-256-gcm", password="hop two"))
    hop = ('[[outbound]]\ntag = "hop"\nprotocol = "shadowsocks"\nserver = "127.0.0.1"\n'
           f'port = {last.port}\n[outbound.settings]\nmethod = "aes-256-gcm"\n'
           'password = "hop two"\n\n')
    first = chain.proxy(our_server(method, upstream=hop).replace(
        "port = {port0}\n", "port = {port0}\nsniffing = true\n", 1))
    data = first_bytes("http")
    with sealed_exchange(first.port, method, echo.port, data[:10], data[10:]) as s:
        assert read_sealed(s, method, len(data)) == data


@pytest.mark.parametrize("method", ["aes-256-gcm", "2022-blake3-chacha20-poly1305"])
def test_sniffing_inbound_carries_16_mib(chain, echo, method):
    """Random bytes are not sniffable: the flow opens at once and 16 MiB go
    through byte for byte, half-close and burst as without sniffing."""
    key = key_of(method)
    server = chain.proxy(sniffing_server(method, key, SNIFFED))
    client = chain.proxy(our_client(method, server.port, password=key))
    interop.echo_check(client.port, echo.port, chain.logs)
    saw_ours(chain, echo.port)
