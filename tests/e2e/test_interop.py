"""Interoperability with real peers: v2ray 4.34 and trojan-gfw 1.16.

Every cell of the matrix runs both ways, each through the chain

    app (this test) -> client proxy -> server proxy -> target (this test)

where one proxy is etemenanki-app and the other a real peer, started with a
config written to tmp_path; "ours_to_X" means our outbound talks to X's
inbound, "X_to_ours" means X's outbound talks to our inbound. The app reaches
the client proxy over SOCKS5 (a socks inbound on either side, the SOCKS5 port
of trojan-gfw's client) and carries 16 MiB of random bytes full duplex to an
echo server, compared byte for byte, then half-closes and expects the end,
then opens 16 connections at once to the echo by name (localhost). Each
process of the chain must have logged the flow.

UDP cells send 20 datagrams (1 to 1900 bytes) to a UDP echo: through a
SOCKS5 UDP ASSOCIATE when our side is the client, through a v2ray
dokodemo-door when v2ray is. Also: our trojan inbound's fallback answering a
plain HTTPS client, and wrong credentials both ways (the CONNECT fails, never
hangs).

Transport ids: tcp (plain), tls (ours: network = "tls"), tls-sec (ours:
network = "tcp" with security = "tls"), ws+tls (network = "ws" with security
= "tls"); v2ray's side is always network tcp/ws with security tls.

TLS uses one self-signed certificate per session for proxy.test (openssl
CLI). Every client verifies it by name: ours with stream.tls.ca and
server_name proxy.test, v2ray with a certificate of usage "verify" and
disableSystemRoot, trojan-gfw with ssl.cert and ssl.sni; no side uses
allow_insecure. Only 127.0.0.1 is used.

A test skips only when its peer binary is missing (scripts/deps.sh installs
both).
"""
import json
import os
import shutil
import socket
import ssl
import subprocess
import threading
import time

import pytest

from proxykit import (LOOPBACK, HttpReader, HttpTarget, Proxy, connect, free_port, log_text,
                      make_cert, parse_udp_header, read_socks_addr, recv_exact,
                      recv_until_closed, socks5_connect, socks5_greet, socks5_request, socks_addr,
                      stop_cleanly, stop_process, wait_closed)

from reloadkit import reload

V2RAY = shutil.which("v2ray")
TROJAN = shutil.which("trojan")
CURL = shutil.which("curl") or "/usr/bin/curl"

SNI = "proxy.test"
UUID = "6c1b0e6a-6e3d-4c1e-9d8a-1a2b3c4d5e6f"
WRONG_UUID = "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"
PASSWORD = "correct horse battery staple"
WRONG_PASSWORD = "wrong horse battery staple"
SOCKS_USER, SOCKS_PASS = "alice", "s3cret"
PAYLOAD = 16 << 20  # bytes echoed per cell, full duplex

needs_v2ray = pytest.mark.skipif(V2RAY is None, reason="v2ray is not installed (scripts/deps.sh)")
needs_trojan = pytest.mark.skipif(TROJAN is None,
                                  reason="trojan is not installed (scripts/deps.sh)")


# ---------------------------------------------------------------- peers

class Peer:
    """One v2ray or trojan-gfw process. make_config(*ports) returns the JSON
    config (a dict) for n_ports free ports, on which the peer listens over
    TCP but for the indices in udp (UDP ports). start() waits until every TCP
    port accepts and, for v2ray, its log says it started every inbound."""

    def __init__(self, kind, workdir, make_config, n_ports=1, udp=()):
        self.kind = kind
        self.workdir = workdir
        self.make_config = make_config
        self.n_ports = n_ports
        self.udp = set(udp)  # indices of the ports that are UDP only (not probed)
        self.proc = None
        self.ports = []
        self.log_path = None
        self._log = None

    @property
    def port(self):
        return self.ports[0]

    def argv(self, path):
        if self.kind == "v2ray":
            return [V2RAY, "-config", str(path)]
        return [TROJAN, "-c", str(path)]

    def start(self, attempts=4):
        for attempt in range(attempts):
            self.ports = [free_port(socket.SOCK_DGRAM if i in self.udp else socket.SOCK_STREAM)
                          for i in range(self.n_ports)]
            n = len(list(self.workdir.glob(f"{self.kind}-*.json")))
            path = self.workdir / f"{self.kind}-{n}.json"
            path.write_text(json.dumps(self.make_config(*self.ports), indent=1))
            self.log_path = self.workdir / f"{self.kind}-{n}.log"
            self._log = open(self.log_path, "wb")
            # v2ray's VMess inbound takes only AEAD headers with this set
            # (issue 17: our client must never need the legacy form)
            env = dict(os.environ, V2RAY_VMESS_AEAD_FORCED="true")
            self.proc = subprocess.Popen(self.argv(path), stdin=subprocess.DEVNULL,
                                         stdout=self._log, stderr=subprocess.STDOUT,
                                         cwd=str(self.workdir), env=env)
            if self._wait_ready(10.0):
                return self
            rc = self.proc.poll()
            log = self.log()
            self.stop()
            if rc is not None and "in use" in log and attempt + 1 < attempts:
                continue  # a port raced with another process: pick new ones
            raise AssertionError(f"{self.kind} did not start (rc={rc}); config:\n"
                                 f"{path.read_text()}\nlog:\n{log}")
        raise AssertionError("unreachable")

    def _wait_ready(self, timeout):
        deadline = time.monotonic() + timeout
        pending = [p for i, p in enumerate(self.ports) if i not in self.udp]
        while pending and time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with socket.create_connection((LOOPBACK, pending[0]), timeout=0.5):
                    pass
                pending.pop(0)
            except OSError:
                time.sleep(0.02)
        if pending:
            return False
        while self.kind == "v2ray" and time.monotonic() < deadline:
            if " started" in self.log():  # "[Warning] v2ray.com/core: V2Ray 4.34.0 started"
                return True
            if self.proc.poll() is not None:
                return False
            time.sleep(0.01)
        return self.kind != "v2ray"

    def log(self):
        return log_text(self.log_path)

    def stop(self):
        """SIGTERM, then SIGKILL after 3 s; only this process."""
        stop_process(self)


class Chain:
    """Everything one test started, for teardown and for failure messages."""

    def __init__(self, app, workdir):
        self.app = app
        self.workdir = workdir
        self.ours = []
        self.peers = []

    def proxy(self, text, n_ports=1):
        p = Proxy(self.app, self.workdir, text, n_ports, log_level="debug")
        self.ours.append(p)
        return p.start()

    def v2ray(self, make_config, n_ports=1, udp=()):
        p = Peer("v2ray", self.workdir, make_config, n_ports, udp)
        self.peers.append(p)
        return p.start()

    def trojan(self, make_config, n_ports=1):
        p = Peer("trojan", self.workdir, make_config, n_ports)
        self.peers.append(p)
        return p.start()

    def saw(self, target_port, timeout=2.0):
        """Asserts that every process of the chain logged the flow to
        127.0.0.1:target_port, so the bytes crossed each of them (the logs
        are written asynchronously: wait a little)."""
        marks = {"v2ray": f"accepted tcp:127.0.0.1:{target_port}",
                 "trojan": f"requested connection to 127.0.0.1:{target_port}"}
        want = [(p, f"tcp flow to 127.0.0.1:{target_port} from inbound") for p in self.ours]
        want += [(p, marks[p.kind]) for p in self.peers]
        deadline = time.monotonic() + timeout
        while True:
            missing = [(p, m) for p, m in want if m not in p.log()]
            if not missing:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"no {missing[0][1]!r} in a log\n{self.logs()}")
            time.sleep(0.05)

    def logs(self):
        out = []
        for p in self.ours:
            out.append(f"--- etemenanki {p.cfg_path.name}:\n{p.cfg_path.read_text()}\n"
                       f"--- its log:\n{p.log()[-6000:]}")
        for p in self.peers:
            out.append(f"--- {p.kind} log:\n{p.log()[-6000:]}")
        return "\n".join(out)


@pytest.fixture
def chain(app, tmp_path):
    """Starts our proxies and the peers; stops every one at teardown (by its
    own pid). Our proxies must stop cleanly: SIGTERM -> exit 0."""
    c = Chain(app, tmp_path)
    yield c
    for p in c.peers:
        p.stop()
    stop_cleanly(c.ours, "proxy")


@pytest.fixture(scope="session")
def pki(tmp_path_factory):
    """A self-signed certificate for proxy.test (SAN DNS:proxy.test only, so a
    client that checked 127.0.0.1 instead of the name would fail)."""
    cert, key = make_cert(tmp_path_factory.mktemp("pki"), SNI, f"DNS:{SNI}", days=2)
    return {"cert": str(cert), "key": str(key)}


@pytest.fixture(scope="module")
def origin():
    s = HttpTarget("fallback-origin")
    yield s
    s.close()


def assert_logged(proc, text, logs, timeout=2.0):
    """proc's log (ours or a peer's) has text; v2ray writes its log
    asynchronously, so wait a little."""
    deadline = time.monotonic() + timeout
    while text not in proc.log():
        if time.monotonic() > deadline:
            raise AssertionError(f"no {text!r} in a log\n{logs()}")
        time.sleep(0.05)


def logged_lines(read, keep, count, logs, timeout=5.0):
    """The lines of read() that keep picks, once there are count of them: a
    log written asynchronously (v2ray's, a worker's access log) may trail
    the traffic that made it. Fails with the logs if they do not come."""
    deadline = time.monotonic() + timeout
    while True:
        lines = [line for line in read().splitlines() if keep(line)]
        if len(lines) >= count:
            return lines
        if time.monotonic() > deadline:
            raise AssertionError(f"{len(lines)} of {count} lines logged\n{logs()}")
        time.sleep(0.05)


# ---------------------------------------------------------------- the payload

def echo_check(socks_port, echo_port, logs, size=PAYLOAD, user=None, password=None):
    """Through the SOCKS5 proxy at socks_port: size random bytes to the echo
    server while reading the echo concurrently; the echo must be the same
    bytes. Then a half-close: the end must come back within 5 s."""
    data = os.urandom(size)
    start = time.monotonic()
    s = socks5_connect(socks_port, LOOPBACK, echo_port, user=user, password=password,
                       timeout=20)
    with s:
        s.settimeout(20)
        sender = threading.Thread(target=s.sendall, args=(data,), daemon=True)
        sender.start()
        got = bytearray()
        try:
            while len(got) < size:
                chunk = s.recv(1 << 20)
                if not chunk:
                    break
                got += chunk
        except OSError as e:
            raise AssertionError(f"{e!r} after {len(got)} of {size} bytes\n{logs()}")
        sender.join(20)
        assert len(got) == size, f"EOF after {len(got)} of {size} bytes\n{logs()}"
        if got != data:
            first = next(i for i in range(size) if got[i] != data[i])
            raise AssertionError(f"the echo differs from byte {first} on\n{logs()}")
        elapsed = time.monotonic() - start
        s.shutdown(socket.SHUT_WR)
        took = wait_closed(s, 5.0)
        assert took is not None, f"no end within 5 s of the half-close\n{logs()}"
    print(f"{size >> 20} MiB echoed in {elapsed:.2f} s, end {took:.2f} s after the FIN")
    burst_check(socks_port, echo_port, logs, user=user, password=password)


def burst_check(socks_port, echo_port, logs, n=16, user=None, password=None):
    """n connections at once to localhost:echo_port (a domain name for the
    protocols to carry, resolved by the server side), 64 KiB each."""
    errors = []

    def one(i):
        msg = os.urandom(64 << 10)
        try:
            with socks5_connect(socks_port, "localhost", echo_port, user=user,
                                password=password, timeout=10) as s:
                s.sendall(msg)
                if recv_exact(s, len(msg)) != msg:
                    errors.append(f"connection {i}: the echo differs")
        except (OSError, EOFError, AssertionError) as e:
            errors.append(f"connection {i}: {e!r}")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)
    assert not errors, f"{len(errors)} of {n} failed, first: {errors[:3]}\n{logs()}"


# Datagram sizes: v2ray reads UDP into 2048-byte buffers, so the largest is
# kept under that; 20 datagrams, each answered before the next is sent.
UDP_SIZES = [1, 7, 100, 512, 1000, 1400, 1900] + [64] * 13


def udp_message(i, n):
    return (b"%04d:" % i + os.urandom(n))[:max(n, 5)]


def udp_direct_check(port, udp_echo, logs):
    """Datagrams sent straight to port (a dokodemo-door forwarding to the UDP
    echo) come back unchanged from port."""
    before = len(udp_echo.received)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as a:
        a.bind((LOOPBACK, 0))
        a.settimeout(3)
        for i, n in enumerate(UDP_SIZES):
            msg = udp_message(i, n)
            a.sendto(msg, (LOOPBACK, port))
            try:
                data, src = a.recvfrom(65535)
            except socket.timeout:
                raise AssertionError(f"no answer to datagram {i} ({len(msg)} bytes)\n{logs()}")
            assert src == (LOOPBACK, port), src
            assert data == msg, f"datagram {i}: {len(data)} bytes back for {len(msg)}\n{logs()}"
    assert len(udp_echo.received) - before == len(UDP_SIZES)


UDP_BURST = 32


def udp_socks_check(socks_port, udp_echo, logs):
    """A SOCKS5 UDP ASSOCIATE on socks_port; datagrams to the UDP echo come
    back unchanged, naming the echo as their source."""
    before = len(udp_echo.received)
    with connect(socks_port) as ctl, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as a:
        socks5_greet(ctl)
        rep, relay = socks5_request(ctl, "0.0.0.0", 0, cmd=3)
        assert rep == 0, f"UDP ASSOCIATE: REP {rep}\n{logs()}"
        relay = (LOOPBACK if relay[0] in ("0.0.0.0", "::") else relay[0], relay[1])
        a.bind((LOOPBACK, 0))
        a.settimeout(3)
        for i, n in enumerate(UDP_SIZES):
            msg = udp_message(i, n)
            a.sendto(b"\0\0\0" + socks_addr(LOOPBACK, udp_echo.port) + msg, relay)
            try:
                pkt, src = a.recvfrom(65535)
            except socket.timeout:
                raise AssertionError(f"no answer to datagram {i} ({len(msg)} bytes)\n{logs()}")
            source, data = parse_udp_header(pkt)
            assert source == (LOOPBACK, udp_echo.port), source
            assert data == msg, f"datagram {i}: {len(data)} bytes back for {len(msg)}\n{logs()}"
        # A burst sent without waiting (as `make bench` does, 16 at a time):
        # a link over a stream must queue it in its layers, not drop what
        # finds its write slots busy (it answered 2 % of a burst once).
        burst = [udp_message(100 + i, 64) for i in range(UDP_BURST)]
        for msg in burst:
            a.sendto(b"\0\0\0" + socks_addr(LOOPBACK, udp_echo.port) + msg, relay)
        got = []
        try:
            while len(got) < len(burst):
                got.append(parse_udp_header(a.recvfrom(65535)[0])[1])
        except socket.timeout:
            pass
        assert sorted(got) == sorted(burst), \
            f"{len(got)} of a burst of {len(burst)} answered\n{logs()}"
    assert len(udp_echo.received) - before == len(UDP_SIZES) + UDP_BURST


UDP_PEER_ROUNDS = 5


def udp_two_peers_check(socks_port, echoes, logs):
    """One SOCKS5 UDP ASSOCIATE on socks_port, datagrams to two UDP echoes
    in turn, all routed to the same outbound: each echo answers its own
    datagrams only, and each answer names the echo it came from (issue 17:
    a VLESS or VMess sub-link reaches one destination, so an association
    opens one per destination; Trojan and SOCKS carry the address in every
    datagram)."""
    before = [len(e.received) for e in echoes]
    sent = [[] for _ in echoes]
    with connect(socks_port) as ctl, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as a:
        socks5_greet(ctl)
        rep, relay = socks5_request(ctl, "0.0.0.0", 0, cmd=3)
        assert rep == 0, f"UDP ASSOCIATE: REP {rep}\n{logs()}"
        relay = (LOOPBACK if relay[0] in ("0.0.0.0", "::") else relay[0], relay[1])
        a.bind((LOOPBACK, 0))
        a.settimeout(3)
        for r in range(UDP_PEER_ROUNDS):
            for k, e in enumerate(echoes):
                msg = b"peer %d round %d:" % (k, r) + os.urandom(32)
                sent[k].append(msg)
                a.sendto(b"\0\0\0" + socks_addr(LOOPBACK, e.port) + msg, relay)
                try:
                    pkt = a.recvfrom(65535)[0]
                except socket.timeout:
                    raise AssertionError(f"no answer to peer {k}, round {r}\n{logs()}")
                source, data = parse_udp_header(pkt)
                assert (source, data) == ((LOOPBACK, e.port), msg), \
                    f"peer {k}, round {r}: {data[:16]!r} from {source}\n{logs()}"
    for k, e in enumerate(echoes):
        got = [data for _, data in e.received[before[k]:]]
        assert got == sent[k], f"echo {k} received {[g[:16] for g in got]}\n{logs()}"


# ---------------------------------------------------------------- our configs (TOML)

def our_tls(side, pki):
    if side == "inbound":
        return (f'[inbound.stream.tls]\ncertificate = "{pki["cert"]}"\n'
                f'key = "{pki["key"]}"\n')
    return f'[outbound.stream.tls]\nserver_name = "{SNI}"\nca = "{pki["cert"]}"\n'


def our_stream(side, transport, pki, path="/"):
    """tcp: no stream section; tls: network = "tls"; tls-sec: network tcp
    with security = "tls" (the two spellings of the same thing); ws+tls."""
    if transport == "tcp":
        return ""
    head = f"[{side}.stream]\n"
    if transport == "tls":
        return head + 'network = "tls"\n' + our_tls(side, pki)
    if transport == "tls-sec":
        return head + 'network = "tcp"\nsecurity = "tls"\n' + our_tls(side, pki)
    assert transport == "ws+tls"
    return (head + 'network = "ws"\nsecurity = "tls"\n' + our_tls(side, pki) +
            f'[{side}.stream.ws]\npath = "{path}"\n')


def our_socks_inbound(users=()):
    text = '[[inbound]]\ntag = "app"\nprotocol = "socks"\nlisten = "127.0.0.1"\nport = {port0}\n'
    for u, p in users:
        text += f'[[inbound.settings.users]]\nusername = "{u}"\npassword = "{p}"\n'
    return text + "\n"


FREEDOM = '[[outbound]]\ntag = "direct"\nprotocol = "freedom"\n\n'


def our_client(protocol, server_port, transport, pki, path="/", credential=None,
               security=None):
    """socks inbound -> protocol outbound to 127.0.0.1:server_port; security
    is vmess's settings.security."""
    key = {"vless": "id", "vmess": "id", "trojan": "password"}.get(protocol)
    text = (our_socks_inbound() + f'[[outbound]]\ntag = "up"\nprotocol = "{protocol}"\n'
            f'server = "127.0.0.1"\nport = {server_port}\n')
    if key:
        text += f'[outbound.settings]\n{key} = "{credential}"\n'
        if security:
            text += f'security = "{security}"\n'
    elif credential:
        text += (f'[outbound.settings]\nusername = "{credential[0]}"\n'
                 f'password = "{credential[1]}"\n')
    return text + our_stream("outbound", transport, pki, path) + "\n"


def our_server(protocol, transport, pki, path="/", credential=None, fallback=None):
    """protocol inbound on {port0} -> freedom."""
    text = (f'[[inbound]]\ntag = "in"\nprotocol = "{protocol}"\nlisten = "127.0.0.1"\n'
            'port = {port0}\n')
    if fallback:
        text += f'[inbound.settings]\nfallback = "{fallback}"\n'
    if protocol in ("vless", "vmess"):
        text += f'[[inbound.settings.users]]\nname = "u"\nid = "{credential}"\n'
    elif protocol == "trojan":
        text += f'[[inbound.settings.users]]\nname = "u"\npassword = "{credential}"\n'
    elif credential:
        text += (f'[[inbound.settings.users]]\nusername = "{credential[0]}"\n'
                 f'password = "{credential[1]}"\n')
    return text + our_stream("inbound", transport, pki, path) + "\n" + FREEDOM


# ---------------------------------------------------------------- v2ray configs (JSON, v4)

def v2_stream(transport, server, pki, path="/"):
    if transport == "tcp":
        return {"network": "tcp", "security": "none"}
    if server:
        tls = {"certificates": [{"certificateFile": pki["cert"], "keyFile": pki["key"]}]}
    else:
        # verify by name against our certificate as the only root
        tls = {"serverName": SNI, "allowInsecure": False, "disableSystemRoot": True,
               "certificates": [{"usage": "verify", "certificateFile": pki["cert"]}]}
    s = {"network": "tcp", "security": "tls", "tlsSettings": tls}
    if transport == "ws+tls":
        s["network"] = "ws"
        s["wsSettings"] = {"path": path}
    return s


def v2_config(inbound, outbound):
    return {"log": {"loglevel": "warning"}, "inbounds": [inbound], "outbounds": [outbound]}


def v2_socks_inbound(port, users=()):
    settings = {"auth": "noauth", "udp": True, "ip": "127.0.0.1"}
    if users:
        settings.update(auth="password", accounts=[{"user": u, "pass": p} for u, p in users])
    return {"tag": "app", "listen": "127.0.0.1", "port": port, "protocol": "socks",
            "settings": settings}


V2_FREEDOM = {"tag": "direct", "protocol": "freedom", "settings": {}}


def v2_server(protocol, transport, pki, path="/", credential=None):
    """protocol inbound on the first port -> freedom."""
    def make(port):
        if protocol == "vless":
            settings = {"clients": [{"id": credential}], "decryption": "none"}
        elif protocol == "trojan":
            settings = {"clients": [{"password": credential}]}
        elif protocol == "vmess":
            settings = {"clients": [{"id": credential, "alterId": 0}]}
        else:
            return v2_config(v2_socks_inbound(port, [credential] if credential else ()),
                             V2_FREEDOM)
        return v2_config({"tag": "in", "listen": "127.0.0.1", "port": port,
                          "protocol": protocol, "settings": settings,
                          "streamSettings": v2_stream(transport, True, pki, path)}, V2_FREEDOM)
    return make


def v2_outbound(protocol, server_port, transport, pki, path="/", credential=None,
                security=None):
    if protocol == "vmess":
        settings = {"vnext": [{"address": "127.0.0.1", "port": server_port,
                               "users": [{"id": credential, "alterId": 0,
                                          "security": security or "aes-128-gcm"}]}]}
    elif protocol == "vless":
        settings = {"vnext": [{"address": "127.0.0.1", "port": server_port,
                               "users": [{"id": credential, "encryption": "none"}]}]}
    elif protocol == "trojan":
        settings = {"servers": [{"address": "127.0.0.1", "port": server_port,
                                 "password": credential}]}
    else:
        server = {"address": "127.0.0.1", "port": server_port}
        if credential:
            server["users"] = [{"user": credential[0], "pass": credential[1]}]
        settings = {"servers": [server]}
    return {"tag": "up", "protocol": protocol, "settings": settings,
            "streamSettings": v2_stream(transport, False, pki, path)}


def v2_client(protocol, server_port, transport, pki, path="/", credential=None, security=None):
    """socks inbound on the first port -> protocol outbound."""
    def make(port):
        return v2_config(v2_socks_inbound(port),
                         v2_outbound(protocol, server_port, transport, pki, path, credential,
                                     security))
    return make


def v2_udp_client(target_port, protocol, server_port, transport, pki, path="/", credential=None,
                  security=None):
    """dokodemo-door (UDP only) on the first port, forwarding to
    127.0.0.1:target_port -> protocol outbound."""
    def make(port):
        door = {"tag": "app", "listen": "127.0.0.1", "port": port, "protocol": "dokodemo-door",
                "settings": {"address": "127.0.0.1", "port": target_port, "network": "udp"}}
        return v2_config(door, v2_outbound(protocol, server_port, transport, pki, path,
                                           credential, security))
    return make


# ---------------------------------------------------------------- trojan-gfw configs

def gfw_server(pki, fallback_port):
    def make(port):
        return {"run_type": "server", "local_addr": "127.0.0.1", "local_port": port,
                "remote_addr": "127.0.0.1", "remote_port": fallback_port,
                "password": [PASSWORD], "log_level": 1,
                "ssl": {"cert": pki["cert"], "key": pki["key"], "alpn": ["http/1.1"]}}
    return make


def gfw_client(pki, server_port):
    def make(port):
        return {"run_type": "client", "local_addr": "127.0.0.1", "local_port": port,
                "remote_addr": "127.0.0.1", "remote_port": server_port,
                "password": [PASSWORD], "log_level": 1,
                "ssl": {"verify": True, "verify_hostname": True, "cert": pki["cert"],
                        "sni": SNI, "alpn": ["http/1.1"]}}
    return make


# ---------------------------------------------------------------- VLESS

VLESS_TRANSPORTS = ["tcp", "tls-sec", "ws+tls"]


@needs_v2ray
@pytest.mark.parametrize("transport", VLESS_TRANSPORTS)
def test_vless_ours_to_v2ray(chain, pki, echo, transport):
    server = chain.v2ray(v2_server("vless", transport, pki, "/vl", UUID))
    client = chain.proxy(our_client("vless", server.port, transport, pki, "/vl", UUID))
    echo_check(client.port, echo.port, chain.logs)
    chain.saw(echo.port)


@needs_v2ray
@pytest.mark.parametrize("transport", VLESS_TRANSPORTS)
def test_vless_v2ray_to_ours(chain, pki, echo, transport):
    server = chain.proxy(our_server("vless", transport, pki, "/vl", UUID))
    client = chain.v2ray(v2_client("vless", server.port, transport, pki, "/vl", UUID))
    echo_check(client.port, echo.port, chain.logs)
    chain.saw(echo.port)


# ---------------------------------------------------------------- VMess (AEAD)

VMESS_TRANSPORTS = ["tcp", "tls", "ws+tls"]
VMESS_CELLS = ([pytest.param(t, "aes-128-gcm", id=f"{t}-aes-128-gcm") for t in VMESS_TRANSPORTS] +
               [pytest.param("tcp", sec, id=f"tcp-{sec}")
                for sec in ("chacha20-poly1305", "none", "zero", "auto")] +
               [pytest.param("ws+tls", "chacha20-poly1305", id="ws+tls-chacha20-poly1305")])


@needs_v2ray
@pytest.mark.parametrize("transport,security", VMESS_CELLS)
def test_vmess_ours_to_v2ray(chain, pki, echo, transport, security):
    """Our vmess client against v2ray 4.34's vmess server (alterId 0, AEAD
    forced): 16 MiB echoed byte for byte, then a burst of connections."""
    server = chain.v2ray(v2_server("vmess", transport, pki, "/vm", UUID))
    client = chain.proxy(our_client("vmess", server.port, transport, pki, "/vm", UUID,
                                    security=security))
    echo_check(client.port, echo.port, chain.logs)
    chain.saw(echo.port)


VMESS_UDP_CELLS = ([pytest.param(t, "aes-128-gcm", id=f"{t}-aes-128-gcm")
                    for t in VMESS_TRANSPORTS] +
                   [pytest.param("tcp", sec, id=f"tcp-{sec}")
                    for sec in ("chacha20-poly1305", "none")])


@needs_v2ray
@pytest.mark.parametrize("transport,security", VMESS_UDP_CELLS)
def test_vmess_udp_ours_to_v2ray(chain, pki, udp_echo, udp_echo_b, transport, security):
    """app --SOCKS5 UDP--> our socks inbound -> our vmess outbound (command
    UDP, a chunk a datagram) -> v2ray's vmess inbound -> freedom -> UDP echo;
    then two echoes through one association, each reached on its own."""
    server = chain.v2ray(v2_server("vmess", transport, pki, "/vu", UUID))
    client = chain.proxy(our_client("vmess", server.port, transport, pki, "/vu", UUID,
                                    security=security))
    udp_socks_check(client.port, udp_echo, chain.logs)
    assert_logged(server, f"accepted udp:127.0.0.1:{udp_echo.port}", chain.logs)
    udp_two_peers_check(client.port, [udp_echo, udp_echo_b], chain.logs)
    assert_logged(server, f"accepted udp:127.0.0.1:{udp_echo_b.port}", chain.logs)


VMESS_IN_CELLS = ([pytest.param(t, "aes-128-gcm", id=f"{t}-aes-128-gcm")
                   for t in VMESS_TRANSPORTS] +
                  [pytest.param("tcp", sec, id=f"tcp-{sec}")
                   for sec in ("chacha20-poly1305", "none", "zero")])


@needs_v2ray
@pytest.mark.parametrize("transport,security", VMESS_IN_CELLS)
def test_vmess_v2ray_to_ours(chain, pki, echo, transport, security):
    """v2ray 4.34's vmess client (AEAD) against our vmess inbound: 16 MiB
    echoed byte for byte, then a burst of connections."""
    server = chain.proxy(our_server("vmess", transport, pki, "/vm", UUID))
    client = chain.v2ray(v2_client("vmess", server.port, transport, pki, "/vm", UUID, security))
    echo_check(client.port, echo.port, chain.logs)
    chain.saw(echo.port)


@needs_v2ray
@pytest.mark.parametrize("transport,security", VMESS_UDP_CELLS)
def test_vmess_udp_v2ray_to_ours(chain, pki, udp_echo, transport, security):
    """app --UDP--> v2ray dokodemo-door -> v2ray's vmess outbound (command
    UDP) -> our vmess inbound -> freedom -> UDP echo."""
    server = chain.proxy(our_server("vmess", transport, pki, "/vu", UUID))
    door = chain.v2ray(v2_udp_client(udp_echo.port, "vmess", server.port, transport, pki, "/vu",
                                     UUID, security), udp=[0])
    udp_direct_check(door.port, udp_echo, chain.logs)
    assert_logged(server, f"udp flow to 127.0.0.1:{udp_echo.port} from inbound in", chain.logs)


@pytest.mark.parametrize("transport,security",
                         [pytest.param("tcp", s, id=f"tcp-{s}")
                          for s in ("aes-128-gcm", "chacha20-poly1305", "none", "zero")] +
                         [pytest.param("ws+tls", "aes-128-gcm", id="ws+tls-aes-128-gcm")])
def test_vmess_ours_to_ours(chain, pki, echo, udp_echo, udp_echo_b, transport, security):
    """Our vmess client against our vmess inbound: TCP echo, and UDP where
    the security has chunks to carry datagrams, to one echo and to two
    through one association."""
    server = chain.proxy(our_server("vmess", transport, pki, "/vm", UUID))
    client = chain.proxy(our_client("vmess", server.port, transport, pki, "/vm", UUID,
                                    security=security))
    echo_check(client.port, echo.port, chain.logs)
    chain.saw(echo.port)
    if security != "zero":
        udp_socks_check(client.port, udp_echo, chain.logs)
        udp_two_peers_check(client.port, [udp_echo, udp_echo_b], chain.logs)


@needs_v2ray
def test_vmess_inbound_to_a_proxied_upstream(chain, pki, echo, udp_echo):
    """v2ray's vmess client -> our vmess inbound -> our vless outbound (ws+tls)
    -> our vless inbound -> freedom: the vmess body goes on top of an
    upstream that has layers of its own (TLS, WebSocket, VLESS)."""
    far = chain.proxy(our_server("vless", "ws+tls", pki, "/vl", UUID))
    inbound = our_server("vmess", "tcp", pki, credential=UUID)[:-len(FREEDOM)]
    outbound = our_client("vless", far.port, "ws+tls", pki, "/vl", UUID)[len(our_socks_inbound()):]
    mid = chain.proxy(inbound + outbound)
    client = chain.v2ray(v2_client("vmess", mid.port, "tcp", pki, credential=UUID))
    echo_check(client.port, echo.port, chain.logs)
    chain.saw(echo.port)


def test_vmess_refusal_is_drained_not_answered(chain, pki, echo):
    """A prober's bytes that are no VMess request (a wrong AuthID, as a
    legacy MD5 header's) get no answer and no prompt close: the connection
    is read and discarded for 2 to 6 s, then closed; the refusal is logged."""
    server = chain.proxy(our_server("vmess", "tcp", pki, credential=UUID))
    before = echo.connections
    start = time.monotonic()
    with connect(server.port, timeout=10) as s:
        s.sendall(os.urandom(100))
        time.sleep(1.0)
        s.sendall(os.urandom(100))  # still open, still reading
        rest = recv_until_closed(s, timeout=10)
    took = time.monotonic() - start
    assert rest == b"", f"bytes came back: {rest!r}\n{chain.logs()}"
    assert 1.9 < took < 7.5, f"closed after {took:.1f} s\n{chain.logs()}"
    assert_logged(server, "refused: vmess: authentication failed", chain.logs)
    assert echo.connections == before


# ---------------------------------------------------------------- Trojan

TROJAN_TRANSPORTS = ["tls", "ws+tls"]


@needs_v2ray
@pytest.mark.parametrize("transport", TROJAN_TRANSPORTS)
def test_trojan_ours_to_v2ray(chain, pki, echo, transport):
    server = chain.v2ray(v2_server("trojan", transport, pki, "/tj", PASSWORD))
    client = chain.proxy(our_client("trojan", server.port, transport, pki, "/tj", PASSWORD))
    echo_check(client.port, echo.port, chain.logs)
    chain.saw(echo.port)


@needs_v2ray
@pytest.mark.parametrize("transport", TROJAN_TRANSPORTS)
def test_trojan_v2ray_to_ours(chain, pki, echo, transport):
    server = chain.proxy(our_server("trojan", transport, pki, "/tj", PASSWORD))
    client = chain.v2ray(v2_client("trojan", server.port, transport, pki, "/tj", PASSWORD))
    echo_check(client.port, echo.port, chain.logs)
    chain.saw(echo.port)


@needs_trojan
def test_trojan_ours_to_trojan_gfw(chain, pki, echo, origin):
    server = chain.trojan(gfw_server(pki, origin.port))
    client = chain.proxy(our_client("trojan", server.port, "tls", pki, credential=PASSWORD))
    echo_check(client.port, echo.port, chain.logs)
    chain.saw(echo.port)


@needs_trojan
def test_trojan_gfw_to_ours(chain, pki, echo):
    server = chain.proxy(our_server("trojan", "tls", pki, credential=PASSWORD))
    client = chain.trojan(gfw_client(pki, server.port))
    echo_check(client.port, echo.port, chain.logs)
    chain.saw(echo.port)


# ---------------------------------------------------------------- SOCKS5

SOCKS_AUTH = [pytest.param(None, id="noauth"),
              pytest.param((SOCKS_USER, SOCKS_PASS), id="userpass")]


@needs_v2ray
@pytest.mark.parametrize("account", SOCKS_AUTH)
def test_socks_ours_to_v2ray(chain, pki, echo, account):
    server = chain.v2ray(v2_server("socks", "tcp", pki, credential=account))
    client = chain.proxy(our_client("socks", server.port, "tcp", pki, credential=account))
    echo_check(client.port, echo.port, chain.logs)
    chain.saw(echo.port)


@needs_v2ray
@pytest.mark.parametrize("account", SOCKS_AUTH)
def test_socks_v2ray_to_ours(chain, pki, echo, account):
    server = chain.proxy(our_server("socks", "tcp", pki, credential=account))
    client = chain.v2ray(v2_client("socks", server.port, "tcp", pki, credential=account))
    echo_check(client.port, echo.port, chain.logs)
    chain.saw(echo.port)


@needs_v2ray
def test_socks_udp_v2ray_to_ours(chain, pki, udp_echo):
    """app --UDP--> v2ray dokodemo-door (to the UDP echo) -> v2ray socks
    outbound (UDP ASSOCIATE) -> our socks inbound -> freedom -> UDP echo. v2ray
    has no other outbound, so an answer proves the datagrams crossed ours."""
    server = chain.proxy(our_server("socks", "tcp", pki))
    door = chain.v2ray(v2_udp_client(udp_echo.port, "socks", server.port, "tcp", pki), udp=[0])
    udp_direct_check(door.port, udp_echo, chain.logs)
    assert_logged(server, f"udp flow to 127.0.0.1:{udp_echo.port} from inbound in", chain.logs)


@needs_v2ray
def test_socks_udp_ours_to_v2ray(chain, pki, udp_echo):
    """app --SOCKS5 UDP--> our socks inbound -> our socks outbound (UDP
    ASSOCIATE) -> v2ray socks inbound (udp: true) -> freedom -> UDP echo."""
    server = chain.v2ray(v2_server("socks", "tcp", pki))
    client = chain.proxy(our_client("socks", server.port, "tcp", pki))
    udp_socks_check(client.port, udp_echo, chain.logs)
    assert_logged(server, f"accepted udp:127.0.0.1:{udp_echo.port}", chain.logs)


# ---------------------------------------------------------------- UDP over Trojan and VLESS

UDP_CELLS = [pytest.param("trojan", "tls", PASSWORD, id="trojan-tls"),
             pytest.param("trojan", "ws+tls", PASSWORD, id="trojan-ws+tls"),
             pytest.param("vless", "tcp", UUID, id="vless-tcp"),
             pytest.param("vless", "ws+tls", UUID, id="vless-ws+tls")]


@needs_v2ray
@pytest.mark.parametrize("protocol,transport,credential", UDP_CELLS)
def test_udp_ours_to_v2ray(chain, pki, udp_echo, udp_echo_b, protocol, transport, credential):
    """app --SOCKS5 UDP--> our socks inbound -> our outbound -> v2ray inbound
    -> freedom -> UDP echo; then two echoes through one association, each
    reached on its own."""
    server = chain.v2ray(v2_server(protocol, transport, pki, "/u", credential))
    client = chain.proxy(our_client(protocol, server.port, transport, pki, "/u", credential))
    udp_socks_check(client.port, udp_echo, chain.logs)
    assert_logged(server, f"accepted udp:127.0.0.1:{udp_echo.port}", chain.logs)
    if (protocol, transport) == ("trojan", "ws+tls"):
        # v2ray 4.34's trojan server answers each destination of one UDP
        # stream from a goroutine of its own, and over WebSocket two of
        # them may write at once: it panics ("concurrent write to
        # websocket connection"). Two peers on one trojan stream are checked
        # over trojan+tls.
        return
    udp_two_peers_check(client.port, [udp_echo, udp_echo_b], chain.logs)
    assert_logged(server, f"accepted udp:127.0.0.1:{udp_echo_b.port}", chain.logs)


@needs_v2ray
@pytest.mark.parametrize("protocol,transport,credential", UDP_CELLS)
def test_udp_v2ray_to_ours(chain, pki, udp_echo, protocol, transport, credential):
    """app --UDP--> v2ray dokodemo-door -> v2ray outbound -> our inbound ->
    freedom -> UDP echo."""
    server = chain.proxy(our_server(protocol, transport, pki, "/u", credential))
    door = chain.v2ray(v2_udp_client(udp_echo.port, protocol, server.port, transport, pki, "/u",
                                     credential), udp=[0])
    udp_direct_check(door.port, udp_echo, chain.logs)
    assert_logged(server, f"udp flow to 127.0.0.1:{udp_echo.port} from inbound in", chain.logs)


@needs_trojan
def test_udp_ours_to_trojan_gfw(chain, pki, udp_echo, origin):
    server = chain.trojan(gfw_server(pki, origin.port))
    client = chain.proxy(our_client("trojan", server.port, "tls", pki, credential=PASSWORD))
    udp_socks_check(client.port, udp_echo, chain.logs)
    assert_logged(server, f"requested UDP associate to 127.0.0.1:{udp_echo.port}", chain.logs)


@needs_trojan
def test_udp_trojan_gfw_to_ours(chain, pki, udp_echo):
    """trojan-gfw's client takes the SOCKS5 UDP ASSOCIATE."""
    server = chain.proxy(our_server("trojan", "tls", pki, credential=PASSWORD))
    client = chain.trojan(gfw_client(pki, server.port))
    udp_socks_check(client.port, udp_echo, chain.logs)
    assert_logged(server, f"udp flow to 127.0.0.1:{udp_echo.port} from inbound in", chain.logs)


# ---------------------------------------------------------------- Trojan fallback

def test_trojan_fallback_serves_plain_https(chain, pki, origin):
    """What is not Trojan goes to settings.fallback: an HTTPS client (python's
    ssl, verifying proxy.test against our certificate, then curl) gets the HTTP
    origin's answer through our trojan inbound."""
    server = chain.proxy(our_server("trojan", "tls", pki, credential=PASSWORD,
                                    fallback=f"127.0.0.1:{origin.port}"))
    ctx = ssl.create_default_context(cafile=pki["cert"])
    with ctx.wrap_socket(connect(server.port), server_hostname=SNI) as t:
        t.sendall(b"GET /through/fallback HTTP/1.1\r\nHost: proxy.test\r\n\r\n")
        r = HttpReader(t)
        assert r.raw_response() == HttpTarget.response(origin.body("/through/fallback")), \
            chain.logs()
        # the same connection keeps going to the origin: keep-alive works
        t.sendall(b"POST /again HTTP/1.1\r\nHost: proxy.test\r\nContent-Length: 4\r\n\r\nbody")
        assert r.raw_response() == HttpTarget.response(origin.body("/again", b"body"))
    assert ("GET", "/through/fallback", "proxy.test") in [q[:3] for q in origin.requests]
    r = subprocess.run([CURL, "-sS", "--max-time", "10", "--cacert", pki["cert"],
                        "--resolve", f"{SNI}:{server.port}:127.0.0.1",
                        f"https://{SNI}:{server.port}/curl"], capture_output=True, timeout=20)
    assert r.returncode == 0, (r.stderr, chain.logs())
    assert r.stdout == origin.body("/curl")


# ---------------------------------------------------------------- wrong credentials

WRONG = [pytest.param("trojan", "tls", PASSWORD, WRONG_PASSWORD, id="trojan-password"),
         pytest.param("vless", "tcp", UUID, WRONG_UUID, id="vless-uuid-tcp"),
         pytest.param("vless", "tls-sec", UUID, WRONG_UUID, id="vless-uuid-tls")]


def assert_connect_fails(socks_port, echo, logs):
    """The app's CONNECT fails: a REP other than 0, or the connection ends
    right after REP 0 (Trojan and VLESS servers answer nothing before the
    payload, so a client cannot know earlier), within 5 s and with no byte
    back; nothing reaches the target."""
    before = echo.connections
    start = time.monotonic()
    with connect(socks_port, timeout=8) as s:
        socks5_greet(s)
        s.sendall(bytes([5, 1, 0]) + socks_addr(LOOPBACK, echo.port))
        try:
            head = recv_exact(s, 3)
        except (EOFError, ConnectionResetError):
            head = None  # closed without a reply: a failure too
        if head is not None and head[1] == 0:
            read_socks_addr(s)
            try:
                s.sendall(b"is anybody there?")
            except (BrokenPipeError, ConnectionResetError):
                pass
            rest = recv_until_closed(s, timeout=8)
            assert rest == b"", f"bytes came back: {rest!r}\n{logs()}"
    took = time.monotonic() - start
    print(f"REP {head[1] if head else None}, closed after {took:.2f} s")
    assert took < 5, f"the failure took {took:.1f} s\n{logs()}"
    time.sleep(0.1)
    assert echo.connections == before, "the refused account reached the target"


@needs_v2ray
@pytest.mark.parametrize("protocol,transport,right,wrong", WRONG)
def test_wrong_credentials_ours_to_v2ray(chain, pki, echo, protocol, transport, right, wrong):
    """Our outbound with a wrong password / UUID: v2ray refuses it and the
    app's CONNECT fails, not hangs."""
    server = chain.v2ray(v2_server(protocol, transport, pki, credential=right))
    client = chain.proxy(our_client(protocol, server.port, transport, pki, credential=wrong))
    assert_connect_fails(client.port, echo, chain.logs)
    assert_logged(server, "rejected", chain.logs)
    # the right account on the same server works, so the refusal was the account
    good = chain.proxy(our_client(protocol, server.port, transport, pki, credential=right))
    with socks5_connect(good.port, LOOPBACK, echo.port) as s:
        s.sendall(b"ping")
        assert recv_exact(s, 4) == b"ping"


@needs_v2ray
@pytest.mark.parametrize("protocol,transport,right,wrong", WRONG)
def test_wrong_credentials_v2ray_to_ours(chain, pki, echo, protocol, transport, right, wrong):
    """v2ray's outbound with a wrong password / UUID: our inbound refuses it
    (no fallback configured) and the app's CONNECT through v2ray fails."""
    server = chain.proxy(our_server(protocol, transport, pki, credential=right))
    client = chain.v2ray(v2_client(protocol, server.port, transport, pki, credential=wrong))
    assert_connect_fails(client.port, echo, chain.logs)
    # the right account on the same server works
    good = chain.v2ray(v2_client(protocol, server.port, transport, pki, credential=right))
    with socks5_connect(good.port, LOOPBACK, echo.port) as s:
        s.sendall(b"ping")
        assert recv_exact(s, 4) == b"ping"


# ---------------------------------------------------------------- certificate checks

@needs_v2ray
@pytest.mark.parametrize("transport", ["tls", "ws+tls"])
def test_tls_name_is_verified_both_ways(chain, pki, echo, transport):
    """The verification the matrix relies on is real: a client expecting
    another name than proxy.test fails, ours against v2ray and v2ray against
    ours."""
    server = chain.v2ray(v2_server("trojan", transport, pki, "/tj", PASSWORD))
    text = our_client("trojan", server.port, transport, pki, "/tj", PASSWORD)
    client = chain.proxy(text.replace(f'server_name = "{SNI}"', 'server_name = "other.test"'))
    assert_connect_fails(client.port, echo, chain.logs)
    assert_logged(client, "certificate verify failed: hostname mismatch", chain.logs)

    ours = chain.proxy(our_server("trojan", transport, pki, "/tj", PASSWORD))

    def make(port):
        c = v2_client("trojan", ours.port, transport, pki, "/tj", PASSWORD)(port)
        c["outbounds"][0]["streamSettings"]["tlsSettings"]["serverName"] = "other.test"
        return c
    theirs = chain.v2ray(make)
    assert_connect_fails(theirs.port, echo, chain.logs)


# ---------------------------------------------------------------- Mux.Cool

def v2_mux_client(protocol, server_port, transport, pki, path="/", credential=None,
                  udp_target=None):
    """v2ray's client with mux on: socks inbound (and, with udp_target, a
    UDP dokodemo-door to it on the second port) -> protocol outbound with
    "mux": {"enabled": true, "concurrency": 8}."""
    def make(port, udp_port=None):
        out = v2_outbound(protocol, server_port, transport, pki, path, credential)
        out["mux"] = {"enabled": True, "concurrency": 8}
        inbounds = [v2_socks_inbound(port)]
        if udp_target:
            inbounds.append({"tag": "door", "listen": "127.0.0.1", "port": udp_port,
                             "protocol": "dokodemo-door",
                             "settings": {"address": "127.0.0.1", "port": udp_target,
                                          "network": "udp"}})
        cfg = v2_config(inbounds[0], out)
        cfg["inbounds"] = inbounds
        return cfg
    return make


@needs_v2ray
@pytest.mark.parametrize("protocol,transport", [("vless", "tcp"), ("vmess", "tcp"),
                                                ("vmess", "ws+tls"), ("trojan", "tls")])
def test_mux_v2ray_to_ours(chain, pki, echo, udp_echo, protocol, transport):
    """v2ray 4.34's mux client against our inbound: every flow of v2ray's
    client goes as a sub-flow of a Mux.Cool session to v1.mux.cool, which
    our inbound demultiplexes; each sub-flow is routed and logged on its
    own. 16 MiB echoed byte for byte, a burst of 16 flows (several at once
    on one session), and UDP through a UDP sub-flow."""
    credential = PASSWORD if protocol == "trojan" else UUID
    server = chain.proxy(our_server(protocol, transport, pki, "/mx", credential))
    client = chain.v2ray(v2_mux_client(protocol, server.port, transport, pki, "/mx", credential,
                                       udp_target=udp_echo.port), n_ports=2, udp=[1])
    echo_check(client.port, echo.port, chain.logs)
    burst_check(client.port, echo.port, chain.logs)
    udp_direct_check(client.ports[1], udp_echo, chain.logs)
    log = server.log()
    # the session itself is not routed; its sub-flows are
    assert "v1.mux.cool" not in log, chain.logs()
    assert f"tcp flow to 127.0.0.1:{echo.port} from inbound in" in log
    assert f"udp flow to 127.0.0.1:{udp_echo.port} from inbound in" in log
    assert log.count(f":{echo.port} from inbound in takes") >= 17, chain.logs()


@needs_v2ray
def test_a_route_change_reaches_the_next_mux_sub_flow_of_a_live_session(chain, pki, echo):
    """Seed 002: a sub-flow is routed when it opens, on the plane current
    then. With a session open (its first sub-flow held), a reload that sends
    the default route to a blackhole reaches the session's next sub-flow,
    while the first goes on, on the outbound it opened on."""
    def server(default):
        return (f'[log]\nlevel = "debug"\n\n'
                f'[[inbound]]\ntag = "in"\nprotocol = "vless"\nlisten = "127.0.0.1"\n'
                f'port = {{port0}}\n[[inbound.settings.users]]\nname = "u"\nid = "{UUID}"\n\n'
                f'[[outbound]]\ntag = "a"\nprotocol = "freedom"\n\n'
                f'[[outbound]]\ntag = "b"\nprotocol = "blackhole"\n\n'
                f'[route]\ndefault = "{default}"\n')

    ours = chain.proxy(server("a"))
    client = chain.v2ray(v2_mux_client("vless", ours.port, "tcp", pki, credential=UUID))
    first = socks5_connect(client.port, "127.0.0.1", echo.port)
    try:
        first.sendall(b"first sub-flow")
        assert recv_exact(first, 14) == b"first sub-flow"
        text = server("b").replace("{port0}", str(ours.port))
        assert reload(ours, text)[0] == "config reload: changed route"
        with socks5_connect(client.port, "127.0.0.1", echo.port) as second:
            second.sendall(b"second sub-flow")
            second.settimeout(5)
            assert second.recv(100) == b"", "the sub-flow after the reload was not blackholed"
        assert f"tcp flow to 127.0.0.1:{echo.port} from inbound in takes b@v1" in ours.log()
        first.sendall(b"still on a")
        assert recv_exact(first, 10) == b"still on a"
        # the first sub-flow was routed once, when it opened
        assert ours.log().count(f"tcp flow to 127.0.0.1:{echo.port} from inbound in takes a@v1") \
            == 1, chain.logs()
    finally:
        first.close()


MUX_CLIENT = "[outbound.mux]\nenabled = true\nconcurrency = 4\n"


@needs_v2ray
@pytest.mark.parametrize("protocol,transport", [("vmess", "tcp"), ("vless", "tcp"),
                                                ("trojan", "tls"), ("vmess", "ws+tls")])
def test_mux_ours_to_v2ray(chain, pki, echo, udp_echo, udp_echo_b, protocol, transport):
    """Our mux client against v2ray 4.34's server: every flow is a sub-flow
    of a session to v1.mux.cool (VLESS and VMess: command 0x03), 16 MiB
    echoed, then 16 flows at once over sessions of 4; UDP as UDP sub-flows,
    one a destination."""
    credential = PASSWORD if protocol == "trojan" else UUID
    server = chain.v2ray(v2_server(protocol, transport, pki, "/mx", credential))
    client = chain.proxy(our_client(protocol, server.port, transport, pki, "/mx", credential) +
                         MUX_CLIENT)
    echo_check(client.port, echo.port, chain.logs)  # 1 flow, then a burst of 16
    burst_check(client.port, echo.port, chain.logs)
    # v2ray logs each sub-flow with its session's source: sessions carried
    # several flows each
    flows = [line.split()[2] for line in
             logged_lines(server.log,
                          lambda line: " accepted tcp:" in line and f":{echo.port} " in line,
                          33, chain.logs)]
    assert len(flows) == 33, chain.logs()
    assert len(set(flows)) <= len(flows) // 2, chain.logs()
    udp_socks_check(client.port, udp_echo, chain.logs)
    udp_two_peers_check(client.port, [udp_echo, udp_echo_b], chain.logs)
    assert_logged(server, f"accepted udp:127.0.0.1:{udp_echo_b.port}", chain.logs)


@pytest.mark.parametrize("protocol,transport", [("vless", "tcp"), ("vmess", "ws+tls")])
def test_mux_ours_to_ours(chain, pki, echo, tmp_path, protocol, transport):
    """Our mux client against our inbound: the server's access log names the
    source of each sub-flow, its session's; flows share sessions."""
    access = tmp_path / "access.log"
    server = chain.proxy(f'[log]\naccess = "{access}"\n\n' +
                         our_server(protocol, transport, pki, "/mx", UUID))
    client = chain.proxy(our_client(protocol, server.port, transport, pki, "/mx", UUID) +
                         MUX_CLIENT)
    echo_check(client.port, echo.port, chain.logs)
    burst_check(client.port, echo.port, chain.logs)
    sources = [line.split()[1] for line in
               logged_lines(access.read_text, lambda line: f":{echo.port} " in line, 33,
                            access.read_text)]
    assert len(sources) == 33, access.read_text()
    assert len(set(sources)) <= len(sources) // 2, access.read_text()


@needs_v2ray
def test_mux_sub_flows_are_sniffed_on_their_first_frame(chain, pki, echo):
    """On a sniffing inbound each sub-flow of a v2ray mux session is sniffed
    on the data its New frame carries: an HTTP request's Host reaches the
    domain rules although the sub-flow names an IP."""
    server = chain.proxy(
        '[[inbound]]\ntag = "in"\nprotocol = "vless"\nlisten = "127.0.0.1"\nport = {port0}\n'
        f'sniffing = true\n[[inbound.settings.users]]\nname = "u"\nid = "{UUID}"\n\n'
        '[[outbound]]\ntag = "direct"\nprotocol = "freedom"\n\n'
        '[[outbound]]\ntag = "blocked"\nprotocol = "blackhole"\n\n'
        '[[route.rule]]\noutbound = "blocked"\ndomain = ["sniffed.test"]\n')
    client = chain.v2ray(v2_mux_client("vless", server.port, "tcp", pki, credential=UUID))

    def request(host):
        return f"GET / HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()

    with socks5_connect(client.port, "127.0.0.1", echo.port) as s:
        s.sendall(request("other.test"))
        assert recv_exact(s, len(request("other.test"))) == request("other.test")
    with socks5_connect(client.port, "127.0.0.1", echo.port) as s:
        s.sendall(request("sniffed.test"))
        s.settimeout(5)
        assert s.recv(100) == b"", "the sniffed sub-flow was not blackholed"
    log = server.log()
    assert f"tcp flow to 127.0.0.1:{echo.port} from inbound in takes direct@v1" in log
    assert f"tcp flow to 127.0.0.1:{echo.port} from inbound in takes blocked@v1 (rule #1)" in log
