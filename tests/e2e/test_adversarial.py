"""Bad input for every inbound: what a client that is broken, hostile or
cut off sends, and what the proxy must do with it.

One test per inbound (socks, http and mixed with and without accounts,
trojan over TLS with a fallback, vless over TLS and over WebSocket + TLS,
vmess over TCP, udp_lb) starts the real binary with a config it writes and runs groups of
cases against it:

- truncation: every byte-boundary prefix of valid handshakes, then a
  half-close, a close, a reset, or silence until the handshake deadline;
- lengths: length fields at 0 and at their maximum, announcing more bytes
  than come (SOCKS domain length 255, Trojan and VLESS addresses, HTTP
  Content-Length and chunk sizes);
- status / smuggling (HTTP): the documented 400/403/407/431/501/505
  answers, and the framing that two parsers could read two ways;
- credentials: wrong SOCKS accounts, Trojan password hashes, VLESS UUIDs;
- vmess: truncated and refused requests (a valid AuthID before a header
  the inbound refuses, a replayed request, a flood of unauthenticated
  connections), each refusal unanswered and drained 2 to 6 s;
- garbage and mutation: seeded random bytes and random edits of valid
  handshakes, judged by a model of the documented replies
  (adversarialkit.socks_model, trojan_model, vless_model) or, for HTTP, by
  the form of the replies and by what reaches the origin;
- tls, ws-upgrade, ws-frames: TLS and WebSocket garbage below the protocol;
- udp: broken datagrams and frames of the UDP associations.

test_udp_lb_bad_input throws truncated, random and over-long datagrams at
a udp_lb listener and checks what is relayed, what is dropped and the drop
counters. test_known_defect keeps, each on its own, cases for defects that
were being fixed when this suite was written (WebSocket ping floods,
text messages that are not UTF-8, HTTP pipelining over 16 KiB), so that
test_bad_input stays a signal for new ones.

Each case asserts its documented reply (a SOCKS REP byte, an HTTP status
line, the Trojan fallback's answer) or a clean close (EOF or reset) within
a few seconds (a refused VMess request: none, and a close within the
drain): never a hang past the handshake timeout configured here
(adversarialkit.HANDSHAKE_TIMEOUT). After each group a normal client must
still get a full flow through to an echo server, the process must be alive
and its log free of sanitizer reports; at teardown it must exit 0 on
SIGTERM. Failures are collected and reported together, each with its case
id, its bytes and its seed.

Knobs (environment):

    ETM_ADVERSARIAL_CASES  random cases per random group (default 24;
                           `make fuzz` passes more)
    ETM_ADVERSARIAL_SEED   the base seed (a string; cases are seeded by
                           base seed, inbound, group and index)
    ETM_ADVERSARIAL_ONLY   comma-separated case ids or prefixes to run,
                           e.g. socks/garbage/7 or http/smuggling

Run alone:

    ETM_APP=build-asan/src/etemenanki-app python3 -m pytest -q tests/e2e/test_adversarial.py
"""
import base64
import concurrent.futures
import hashlib
import random
import re
import socket
import ssl
import struct
import time
import types

import pytest

from adversarialkit import (AnyClose, Case, CASE_DEADLINE, Dests, DRAIN_DEADLINE, DRAIN_MIN,
                            Drained, ESTABLISHED, FallbackServer, SlowEcho, HttpAnswer, HttpForm, OriginReplies, RawPipe, Reply, ServerFrames,
                            StrictOrigin, Target, Timer, TlsAlert, addr4, addr_name, base_seed,
                            case_budget, case_rng, client_hello, fallback_answer, garbage, mutate,
                            only_filter, policy_config, route_config, run_cases, sanitizer_report,
                            select, show, socks4_handshake, socks5_handshake, socks_model,
                            tls_records_problem, trojan_hash, trojan_model, trojan_request,
                            uuid_bytes, vless_model, vless_request, ws_client_stream, ws_frame,
                            VmessReply, ws_response_problem, ws_upgrade_request)
import vmesskit
from proxykit import EchoServer, Proxy, UdpEcho, make_cert, stop_cleanly
from udplbkit import Client, LbApp, ScriptedBackend, lb_config

USERS = [("alice", "wonderland"), ("bob", "b" * 255)]  # bob: the longest RFC 1929 password
TROJAN_PASSWORD = "correct horse battery staple"
VLESS_UUID = "5783a3e7-e373-51cd-8642-c83782b807c5"
VMESS_UUID = "0e0bb8b4-6cf2-4a43-8a3f-3c2a8e3b4f21"
WS_PATH = b"/vless"

INBOUNDS = ["socks", "socks-auth", "http", "http-auth", "mixed", "mixed-auth",
            "trojan-tls", "vless-tls", "vless-ws-tls", "vmess"]


# ---------------------------------------------------------------- servers shared by the module

@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """The echo server, the strict HTTP origin, the Trojan fallback, a UDP
    echo and a certificate; all on 127.0.0.1."""
    s = types.SimpleNamespace()
    s.echo = EchoServer()
    s.slow_echo = SlowEcho()
    s.origin = StrictOrigin()
    s.fallback = FallbackServer()
    s.udp_echo = UdpEcho()
    s.cert, s.key = make_cert(tmp_path_factory.mktemp("adversarial-pki"))
    yield s
    s.echo.close()
    s.slow_echo.close()
    s.origin.close()
    s.fallback.close()
    s.udp_echo.close()


@pytest.fixture
def started():
    """Processes a test starts; each must exit 0 on SIGTERM at teardown."""
    procs = []
    yield procs
    stop_cleanly(procs, "etemenanki-app")


# ---------------------------------------------------------------- configs

def inbound_config(inbound, s):
    protocol = inbound.split("-")[0]
    text = policy_config()
    text += (f'[[inbound]]\ntag = "in"\nprotocol = "{protocol}"\nlisten = "127.0.0.1"\n'
             'port = {port0}\n')
    if inbound.endswith("-auth"):
        for u, p in USERS:
            text += f'[[inbound.settings.users]]\nusername = "{u}"\npassword = "{p}"\n'
    if protocol == "trojan":
        text += f'[inbound.settings]\nfallback = "127.0.0.1:{s.fallback.port}"\n'
        text += f'[[inbound.settings.users]]\nname = "u"\npassword = "{TROJAN_PASSWORD}"\n'
    if protocol == "vless":
        text += f'[[inbound.settings.users]]\nname = "u"\nid = "{VLESS_UUID}"\n'
    if protocol == "vmess":
        text += f'[[inbound.settings.users]]\nname = "u"\nid = "{VMESS_UUID}"\n'
    if inbound.endswith("-tls"):
        if "ws" in inbound:
            text += ('[inbound.stream]\nnetwork = "ws"\nsecurity = "tls"\n'
                     f'[inbound.stream.ws]\npath = "{WS_PATH.decode()}"\n')
        else:
            text += '[inbound.stream]\nnetwork = "tls"\n'
        text += f'[inbound.stream.tls]\ncertificate = "{s.cert}"\nkey = "{s.key}"\n'
        if protocol == "trojan":
            text += 'alpn = ["http/1.1"]\n'
    return text + "\n" + route_config([s.echo.port, s.origin.port, s.udp_echo.port,
                                        s.slow_echo.port])


class Env:
    """One inbound under test: its process, where cases go, the servers."""

    def __init__(self, inbound, s, proc, target):
        self.inbound, self.s, self.proc, self.target = inbound, s, proc, target
        self.users = USERS if inbound.endswith("-auth") else []
        self.dests = Dests(s.echo.port, s.origin.port, s.udp_echo.port, s.slow_echo.port)
        self.echo, self.origin = s.echo.port, s.origin.port
        auth = base64.b64encode(b"alice:wonderland")
        self.auth = b"Proxy-Authorization: Basic " + auth + b"\r\n" if self.users else b""

    def log(self):
        return self.proc.log()


# ---------------------------------------------------------------- groups and case building

class Group:
    def __init__(self, name, cases=(), custom=None):
        self.name, self.cases, self.custom = name, list(cases), custom


class Builder:
    """Numbers the cases of one group: ids inbound/group/i."""

    def __init__(self, inbound, group):
        self.inbound, self.name, self.cases = inbound, group, []

    def rng(self):
        return case_rng(self.inbound, self.name, len(self.cases))

    def seed(self):
        return f"{base_seed()}/{self.inbound}/{self.name}/{len(self.cases)}"

    def add(self, desc, data, expect, mode="fin", layer="raw", prelude=(), pieces=1, seeded=False,
            strict=False, wait=CASE_DEADLINE):
        if expect is None:
            return
        self.cases.append(Case(id=f"{self.inbound}/{self.name}/{len(self.cases)}", desc=desc,
                               data=data, expect=expect, layer=layer, mode=mode,
                               prelude=tuple(prelude), pieces=pieces,
                               seed=self.seed() if seeded else "", strict=strict, wait=wait))

    def group(self, custom=None):
        return Group(self.name, self.cases, custom)


def is_wait(expect):
    return getattr(expect, "then", None) == "wait" or getattr(expect, "kind", None) == "wait"


def truncations(b, desc, data, model, layer="raw", stall_every=3, max_stall_len=None):
    """Every prefix of data with a half-close, and for every prefix one more
    ending drawn from its seed: a close, a reset, or (every stall_every-th
    undecided prefix, up to max_stall_len) silence until the deadline."""
    for k in range(len(data) + 1):
        prefix = data[:k]
        expect = model(prefix)
        if expect is None:
            continue
        b.add(f"{desc} cut after {k} of {len(data)} bytes, then FIN", prefix, expect, layer=layer)
        if layer != "raw" and k % 2:
            b.add(f"{desc} cut after {k} of {len(data)} bytes, then a TCP FIN only", prefix,
                  expect, mode="tcpfin", layer=layer)
        rng = b.rng()
        if is_wait(expect) and k % stall_every == 0 and (max_stall_len is None or k <= max_stall_len):
            b.add(f"{desc} cut after {k} of {len(data)} bytes, then silence", prefix, expect,
                  mode="stall", layer=layer)
        else:
            mode = rng.choice(["close", "rst"])
            b.add(f"{desc} cut after {k} of {len(data)} bytes, then {mode}", prefix, expect,
                  mode=mode, layer=layer)


def random_mode(rng):
    return rng.choice(["fin", "fin", "fin", "close", "rst"])


def random_cases(b, make, n, layer="raw"):
    """n cases drawn by make(rng) -> (desc, data, expect) (None to redraw)."""
    for _ in range(n):
        rng = b.rng()
        for _attempt in range(20):
            made = make(rng)
            if made is not None and made[2] is not None:
                break
        else:
            continue
        desc, data, expect = made
        mode = random_mode(rng)
        b.add(desc, data, expect, mode=mode, layer=layer, pieces=rng.choice([1, 1, 2, 3]),
              seeded=True)


# ---------------------------------------------------------------- SOCKS

def socks_valid(env):
    """Valid handshakes: (name, bytes)."""
    echo = env.echo
    if env.users:
        return [("SOCKS5 login + CONNECT", socks5_handshake(echo, env.users, b"ping")),
                ("SOCKS5 login (255-byte password) + CONNECT",
                 socks5_handshake(echo, env.users, b"ping", user=USERS[1])),
                ("SOCKS4 CONNECT (refused with accounts)", socks4_handshake(echo, payload=b"p4"))]
    return [("SOCKS5 CONNECT", socks5_handshake(echo, payload=b"ping")),
            ("SOCKS5 CONNECT to a name", socks5_handshake(0, payload=b"x",
                                                          host=addr_name(b"name.invalid", 80))),
            ("SOCKS4 CONNECT", socks4_handshake(echo, payload=b"ping4")),
            ("SOCKS4a CONNECT", socks4_handshake(1, host=b"name.invalid"))]


def socks_groups(env, prefix=""):
    users, dests = env.users, env.dests
    if env.inbound.startswith("mixed"):
        model = lambda d: mixed_or_http(env, d) if d else socks_model(d, users, dests)  # noqa: E731
    else:
        model = lambda d: socks_model(d, users, dests)  # noqa: E731
    inb = env.inbound
    groups = []

    b = Builder(inb, prefix + "truncation")
    for name, data in socks_valid(env):
        truncations(b, name, data, model)
    groups.append(b.group())

    b = Builder(inb, prefix + "lengths")
    head = socks5_handshake(0, users)[:-10]  # greeting and login, no request
    req = lambda cmd, addr, extra=b"": head + bytes([5, cmd, 0]) + addr + extra  # noqa: E731
    name255 = b"n" * 255
    cases = [
        ("greeting offering no method (NMETHODS 0)", b"\x05\x00"),
        ("greeting announcing 255 methods, 10 sent", b"\x05\xff" + bytes(10)),
        ("greeting with 255 methods, all of them", b"\x05\xff" + bytes(range(255))),
        ("greeting with 255 methods, all 0xff", b"\x05\xff" + b"\xff" * 255),
        ("domain length 0", req(1, addr_name(b"", 80))),
        ("domain length 255, 20 bytes sent", req(1, b"\x03\xff" + b"a" * 20)),
        ("domain length 255, all sent", req(1, addr_name(name255, 80), b"after")),
        ("domain length 254", req(1, addr_name(b"d" * 254, 80))),
        ("domain length 1", req(1, addr_name(b"a", 80))),
        ("domain with a NUL", req(1, addr_name(b"a\x00b.invalid", 80))),
        ("domain all NUL", req(1, addr_name(bytes(16), 80))),
        ("domain of 0xff bytes", req(1, addr_name(b"\xff" * 32, 80))),
        ("domain that is an IP literal, at the echo port", req(1, addr_name(b"127.0.0.1", env.echo))),
        ("IPv6 ::1 at the echo port", req(1, b"\x04" + bytes(15) + b"\x01" + struct.pack(">H", env.echo))),
        ("IPv6 address cut after 8 bytes", req(1, b"\x04" + bytes(8))),
        ("ATYP 0", req(1, b"\x00" + bytes(6))),
        ("ATYP 2", req(1, b"\x02" + bytes(6))),
        ("ATYP 5", req(1, b"\x05" + bytes(6))),
        ("ATYP 0xff", req(1, b"\xff")),
        ("CMD 0", req(0, addr4("127.0.0.1", env.echo))),
        ("CMD 2 (BIND)", req(2, addr4("127.0.0.1", env.echo))),
        ("CMD 2 with a bad ATYP (the command is judged first)", req(2, b"\x09")),
        ("CMD 4", req(4, addr4("127.0.0.1", env.echo))),
        ("CMD 0xff", req(0xff, addr4("127.0.0.1", env.echo))),
        ("UDP ASSOCIATE from 0.0.0.0:0", req(3, addr4("0.0.0.0", 0))),
        ("UDP ASSOCIATE with a bad ATYP", req(3, b"\x07")),
        ("request version 4", head + b"\x04\x01\x00" + addr4("127.0.0.1", env.echo)),
        ("request version 0", head + b"\x00\x01\x00" + addr4("127.0.0.1", env.echo)),
        ("request version 0xff, ATYP 3, length 255, cut", head + b"\xff\x01\x00\x03\xff" + b"z" * 9),
        ("CONNECT to port 0", req(1, addr4("127.0.0.1", 0))),
        ("CONNECT to 0.0.0.0 at the echo port", req(1, addr4("0.0.0.0", env.echo))),
        ("CONNECT to 127.0.0.2 at the echo port (nothing listens)", req(1, addr4("127.0.0.2", env.echo))),
        ("CONNECT to 255.255.255.255:65535", req(1, addr4("255.255.255.255", 65535))),
        ("RSV 0xff in the request", head + b"\x05\x01\xff" + addr4("127.0.0.1", env.echo) + b"rsv"),
        ("SOCKS4 user id of 255 bytes", socks4_handshake(env.echo, userid=b"u" * 255, payload=b"q")),
        ("SOCKS4 user id of 256 bytes", socks4_handshake(env.echo, userid=b"u" * 256)),
        ("SOCKS4 user id of 4000 bytes, no NUL", socks4_handshake(env.echo, userid=b"u" * 4000)[:-1]),
        ("SOCKS4 user id of 200 bytes, no NUL yet", socks4_handshake(env.echo, userid=b"u" * 200)[:-1]),
        ("SOCKS4a host of 255 bytes", socks4_handshake(1, host=b"h" * 255)),
        ("SOCKS4a host of 256 bytes", socks4_handshake(1, host=b"h" * 256)),
        ("SOCKS4a empty host", socks4_handshake(1, host=b"")),
        ("SOCKS4a host of 3000 bytes, no NUL", socks4_handshake(1, host=b"h" * 3000)[:-1]),
        ("SOCKS4 CMD 2", socks4_handshake(env.echo, cmd=2)),
        ("SOCKS4 CMD 0", socks4_handshake(env.echo, cmd=0)),
        ("SOCKS4 to 0.0.0.0 (not 4a)", socks4_handshake(env.echo, ip="0.0.0.0")),
        ("SOCKS4 to port 0", socks4_handshake(0)),
        ("SOCKS4 header only", b"\x04\x01\x00\x50\x7f\x00\x00\x01"),
        ("version byte 0", b"\x00" + bytes(20)),
        ("version byte 6", b"\x06\x01\x00"),
        ("version byte 0xff", b"\xff" * 64),
        ("HTTP to a SOCKS port", b"GET / HTTP/1.1\r\n\r\n"),
        ("TLS ClientHello to a SOCKS port", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"),
        ("16 KiB after a greeting announcing 255 methods", b"\x05\xff" + b"\x00" * 16384),
        ("32 KiB of 0x05", b"\x05" * 32768),
    ]
    if users:
        g = b"\x05\x01\x02"
        cases += [
            ("login with ULEN 0 and PLEN 0", g + b"\x01\x00\x00"),
            ("login with ULEN 255, 10 bytes sent", g + b"\x01\xff" + b"u" * 10),
            ("login with ULEN 255 and PLEN 255, wrong", g + b"\x01\xff" + b"u" * 255 + b"\xff" + b"p" * 255),
            ("login with PLEN 255, 3 bytes sent", g + b"\x01\x05alice\xff" + b"abc"),
            ("login version 0", g + b"\x00\x05alice\x0awonderland"),
            ("login version 5", g + b"\x05\x05alice\x0awonderland"),
        ]
    for desc, data in cases:
        expect = model(data)
        b.add(desc, data, expect)
        if is_wait(expect) and data:
            b.add(desc + ", then silence", data, expect, mode="stall")
    groups.append(b.group())

    b = Builder(inb, prefix + "credentials")
    if users:
        login = lambda u, p: b"\x05\x01\x02\x01" + bytes([len(u)]) + u + bytes([len(p)]) + p  # noqa: E731
        creds = [(b"alice", b"Wonderland"), (b"Alice", b"wonderland"), (b"alice", b"wonderlan"),
                 (b"alice", b"wonderland!"), (b"", b""), (b"alice", b""), (b"", b"wonderland"),
                 (b"bob", b"b" * 254), (b"bob", b"wonderland"), (b"alice", b"b" * 255),
                 (b"alice\x00", b"wonderland"), (b"alice", b"wonderland\x00"),
                 (b"mallory", b"x"), (b"\xff" * 255, b"\xff" * 255)]
        for u, p in creds:
            data = login(u, p) + b"\x05\x01\x00" + addr4("127.0.0.1", env.echo)
            b.add(f"login as {u[:20]!r} with password {p[:20]!r}", data, model(data))
        for desc, data in [("offering only no-authentication", b"\x05\x01\x00"),
                           ("offering GSSAPI only", b"\x05\x01\x01"),
                           ("offering everything but 2", b"\x05\x05\x00\x01\x03\x04\x80"),
                           ("offering 2 among others", b"\x05\x03\x00\x01\x02" + b"\x01\x05alice\x0awonderland"),
                           ("SOCKS4 with accounts", socks4_handshake(env.echo)),
                           ("SOCKS4a with accounts", socks4_handshake(1, host=b"a.invalid"))]:
            b.add(desc, data, model(data))
    else:
        for desc, data in [("offering only username/password", b"\x05\x01\x02\x01\x05alice\x0awonderland"),
                           ("offering GSSAPI only", b"\x05\x01\x01"),
                           ("offering 0 after others", b"\x05\x04\x01\x02\x03\x00" + b"\x05\x01\x00" + addr4("127.0.0.1", env.echo) + b"late")]:
            b.add(desc, data, model(data))
    groups.append(b.group())

    b = Builder(inb, prefix + "garbage")

    def make_garbage(rng):
        data = garbage(rng)
        first = rng.choice([None, 5, 4])
        if first is not None:
            data = bytes([first]) + data
        return "random bytes", data, model(data)
    random_cases(b, make_garbage, case_budget())
    groups.append(b.group())

    b = Builder(inb, prefix + "mutation")
    valid = socks_valid(env)

    def make_mutation(rng):
        name, data = rng.choice(valid)
        m = mutate(rng, data)
        return f"{name}, mutated", m, model(m)
    random_cases(b, make_mutation, case_budget())
    groups.append(b.group())
    return groups


def socks_udp_group(env):
    """UDP ASSOCIATE, then broken datagrams to the relay: each is dropped,
    and a good one afterwards is still relayed to the UDP echo and back."""
    def run(env):
        failures = []
        udp_port = env.s.udp_echo.port
        rng = case_rng(env.inbound, "udp", 0)
        with socket.create_connection(("127.0.0.1", env.target.port), timeout=CASE_DEADLINE) as c:
            c.sendall(socks5_handshake(0, env.users, cmd=3, host=addr4("0.0.0.0", 0)))
            want = 2 + (2 if env.users else 0) + 10
            got = b""
            while len(got) < want:
                chunk = c.recv(want - len(got))
                if not chunk:
                    return [f"udp: UDP ASSOCIATE closed early: {got!r}"]
                got += chunk
            reply = got[-10:]
            if reply[:4] != b"\x05\x00\x00\x01":
                return [f"udp: UDP ASSOCIATE refused: {got!r}"]
            relay = (socket.inet_ntoa(reply[4:8]), struct.unpack(">H", reply[8:10])[0])
            u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            u.bind(("127.0.0.1", 0))
            u.settimeout(0.2)
            good = b"\x00\x00\x00" + addr4("127.0.0.1", udp_port)
            bad = [b"", b"\x00", b"\x00\x00", b"\x00\x00\x01" + addr4("127.0.0.1", udp_port) + b"frag",
                   b"\x00\x01\x00" + addr4("127.0.0.1", udp_port) + b"rsv",
                   b"\x00\x00\x00\x09" + b"bad atyp",
                   b"\x00\x00\x00\x03\xff" + b"short",
                   b"\x00\x00\x00\x03\x00\x00\x35",
                   b"\x00\x00\x00\x04" + bytes(10),
                   good[:5], good[:9],
                   b"\x00\x00\x00" + addr4("8.8.8.8", 53) + b"blackholed",
                   b"\x00\x00\x00" + addr_name(b"name.invalid", 53) + b"blackholed"]
            bad += [good[:k] for k in range(len(good))]
            bad += [bytes(rng.randrange(256) for _ in range(rng.randint(0, 300)))
                    for _ in range(case_budget())]
            for d in bad:
                try:
                    u.sendto(d, relay)
                except OSError:
                    pass
            for i in range(3):
                payload = b"udp after garbage %d" % i
                u.sendto(good + payload, relay)
                try:
                    data, src = u.recvfrom(65535)
                except socket.timeout:
                    continue
                if data != good + payload:
                    # a stale reply to a garbage datagram that reached the echo: none may
                    failures.append(f"udp: unexpected datagram back {show(data)}")
                break
            else:
                failures.append("udp: no reply to a good datagram after garbage datagrams")
            u.close()
        return failures
    return Group("udp", custom=run)


# ---------------------------------------------------------------- HTTP

def http_valid(env):
    """Valid requests: (name, bytes, head length, expect when complete)."""
    o, auth = env.origin, env.auth
    get = b"GET http://127.0.0.1:%d/get HTTP/1.1\r\nHost: x\r\n%s\r\n" % (o, auth)
    post = (b"POST http://127.0.0.1:%d/post HTTP/1.1\r\nHost: x\r\n%sContent-Length: 5\r\n\r\n"
            % (o, auth))
    chunked = (b"POST http://127.0.0.1:%d/chunked HTTP/1.1\r\nHost: x\r\n%sTransfer-Encoding: chunked"
               b"\r\n\r\n" % (o, auth))
    connect = b"CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n%s\r\n" % (env.echo, env.echo, auth)
    return [("GET", get, len(get), OriginReplies([b"origin GET /get 0"])),
            ("POST", post + b"hello", len(post), OriginReplies([b"origin POST /post 5"])),
            ("chunked POST", chunked + b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n",
             len(chunked), OriginReplies([b"origin POST /chunked 11"])),
            ("CONNECT", connect + b"ping", len(connect), OriginReplies([None], tail=b"ping"))]


def http_groups(env, prefix=""):
    inb, o, auth = env.inbound, env.origin, env.auth
    groups = []

    def req(line, fields=b"", body=b"", host=b"Host: x\r\n"):
        return line + b"\r\n" + host + auth + fields + b"\r\n" + body

    url = b"http://127.0.0.1:%d" % o
    get = lambda path=b"/", version=b"HTTP/1.1": b"GET " + url + path + b" " + version  # noqa: E731
    post = lambda path=b"/p": b"POST " + url + path + b" HTTP/1.1"  # noqa: E731
    ok = lambda *bodies: OriginReplies(list(bodies))  # noqa: E731

    b = Builder(inb, prefix + "truncation")
    for name, data, head_len, full in http_valid(env):
        def model(p, data=data, head_len=head_len, full=full, name=name):
            if p == data:
                return full
            if name == "CONNECT" and len(p) >= head_len:
                return OriginReplies([None], tail=p[head_len:])
            if len(p) >= head_len:
                return Reply(b"", then="close", note="a body cut short")
            return Reply(b"", then="wait")
        truncations(b, name + " request", data, model, stall_every=7)
    groups.append(b.group())

    b = Builder(inb, prefix + "status")
    big = b"X-Big: " + b"a" * 16400 + b"\r\n"
    cases = [
        ("origin-form request", req(b"GET / HTTP/1.1"), HttpAnswer(400, b"a proxy request needs an absolute http:// URI")),
        ("asterisk-form request", req(b"OPTIONS * HTTP/1.1"), HttpAnswer(400, b"a proxy request needs an absolute http:// URI")),
        ("https:// URI", req(b"GET https://127.0.0.1/ HTTP/1.1"), HttpAnswer(400, b"https:// URIs go through CONNECT")),
        ("ftp:// URI", req(b"GET ftp://127.0.0.1/ HTTP/1.1"), HttpAnswer(400, b"unsupported URI scheme")),
        ("userinfo in the URI", req(b"GET http://user:pw@127.0.0.1:%d/ HTTP/1.1" % o), HttpAnswer(400, b"userinfo in the request target")),
        ("a fragment in the URI", req(get(b"/#frag")), HttpAnswer(400, b"malformed request target")),
        ("port 99999", req(b"GET http://127.0.0.1:99999/ HTTP/1.1"), HttpAnswer(400, b"bad host or port")),
        ("port 0", req(b"GET http://127.0.0.1:0/ HTTP/1.1"), HttpAnswer(400, b"bad host or port")),
        ("port 65536", req(b"GET http://127.0.0.1:65536/ HTTP/1.1"), HttpAnswer(400, b"bad host or port")),
        ("port 000080 (six digits)", req(b"GET http://127.0.0.1:000080/ HTTP/1.1"), HttpAnswer(400, b"bad host or port")),
        ("port -1", req(b"GET http://127.0.0.1:-1/ HTTP/1.1"), HttpAnswer(400, b"bad host or port")),
        ("port abc", req(b"GET http://127.0.0.1:abc/ HTTP/1.1"), HttpAnswer(400, b"bad host or port")),
        ("empty host", req(b"GET http:///x HTTP/1.1"), HttpAnswer(400, b"bad host or port")),
        ("unclosed IPv6 bracket", req(b"GET http://[::1/ HTTP/1.1"), HttpAnswer(400, b"bad host or port")),
        ("a host of 300 bytes", req(b"GET http://" + b"h" * 300 + b"/ HTTP/1.1"), HttpAnswer(400, b"bad host or port")),
        ("a host with a percent sign", req(b"GET http://127.0.0.1%2f:80/ HTTP/1.1"), HttpAnswer(400, b"bad host or port")),
        ("a name: the blackhole route", req(b"GET http://name.invalid:%d/ HTTP/1.1" % o), HttpAnswer(403, b"destination not allowed")),
        ("IPv6 [::1]: the blackhole route", req(b"GET http://[::1]:%d/ HTTP/1.1" % o), HttpAnswer(403)),
        ("a port the route blocks", req(b"GET http://127.0.0.1:1/ HTTP/1.1"), HttpAnswer(403)),
        ("127.0.0.2 at the origin port (refused)", req(b"GET http://127.0.0.2:%d/ HTTP/1.1" % o), HttpAnswer(502, b"connection refused")),
        ("CONNECT without a port", req(b"CONNECT 127.0.0.1 HTTP/1.1"), HttpAnswer(400, b"CONNECT needs host:port")),
        ("CONNECT :80", req(b"CONNECT :80 HTTP/1.1"), HttpAnswer(400, b"CONNECT needs host:port")),
        ("CONNECT with an absolute URI", req(b"CONNECT http://127.0.0.1:%d/ HTTP/1.1" % env.echo), HttpAnswer(400, b"CONNECT needs host:port")),
        ("CONNECT port 0", req(b"CONNECT 127.0.0.1:0 HTTP/1.1"), HttpAnswer(400, b"CONNECT needs host:port")),
        ("CONNECT with Content-Length 5", req(b"CONNECT 127.0.0.1:%d HTTP/1.1" % env.echo, b"Content-Length: 5\r\n", b"hello"), HttpAnswer(400, b"CONNECT with a body")),
        ("CONNECT with Transfer-Encoding", req(b"CONNECT 127.0.0.1:%d HTTP/1.1" % env.echo, b"Transfer-Encoding: chunked\r\n"), HttpAnswer(400, b"CONNECT with a body")),
        ("CONNECT with Content-Length 0", req(b"CONNECT 127.0.0.1:%d HTTP/1.1" % env.echo, b"Content-Length: 0\r\n", b"tunnel"), OriginReplies([None], tail=b"tunnel")),
        ("CONNECT to a name (blackhole)", req(b"CONNECT name.invalid:443 HTTP/1.1"), HttpAnswer(403)),
        ("HTTP/2.0", req(get(version=b"HTTP/2.0")), HttpAnswer(505)),
        ("HTTP/0.9", req(get(version=b"HTTP/0.9")), HttpAnswer(505)),
        ("HTTP/9.9", req(get(version=b"HTTP/9.9")), HttpAnswer(505)),
        ("HTTP/1.2 (read as 1.1)", req(get(b"/v12", b"HTTP/1.2")), ok(b"origin GET /v12 0")),
        ("HTTP/12.0", req(get(version=b"HTTP/12.0")), HttpAnswer(400, b"malformed request line")),
        ("http/1.1 in lowercase", req(get(version=b"http/1.1")), HttpAnswer(400, b"malformed request line")),
        ("no version", req(b"GET " + url + b"/"), HttpAnswer(400, b"malformed request line")),
        ("a space after the version", req(get() + b" "), HttpAnswer(400, b"malformed request line")),
        ("two spaces after the method", req(b"GET  " + url + b"/ HTTP/1.1"), HttpAnswer(400, b"malformed request line")),
        ("tabs as separators", req(b"GET\t" + url + b"/\tHTTP/1.1"), HttpAnswer(400, b"malformed request line")),
        ("a method with a parenthesis", req(b"GE(T " + url + b"/ HTTP/1.1"), HttpAnswer(400, b"malformed request line")),
        ("no method", req(b" " + url + b"/ HTTP/1.1"), HttpAnswer(400, b"malformed request line")),
        ("a NUL in the target", req(b"GET " + url + b"/\x00 HTTP/1.1"), HttpAnswer(400, b"malformed request line")),
        ("a byte over 0x7f in the target", req(b"GET " + url + b"/\xff HTTP/1.1"), HttpAnswer(400, b"malformed request line")),
        ("a field without a colon", req(get(), b"NoColon\r\n"), HttpAnswer(400, b"malformed header field")),
        ("a space before the colon", req(get(), b"X-Space : v\r\n"), HttpAnswer(400, b"malformed header field")),
        ("an empty field name", req(get(), b": v\r\n"), HttpAnswer(400, b"malformed header field")),
        ("a NUL in a field value", req(get(), b"X-Nul: a\x00b\r\n"), HttpAnswer(400, b"malformed header field")),
        ("a DEL in a field value", req(get(), b"X-Del: a\x7fb\r\n"), HttpAnswer(400, b"malformed header field")),
        ("a field name with a slash", req(get(), b"X/Y: v\r\n"), HttpAnswer(400, b"malformed header field")),
        ("a head over 16 KiB", req(get(), big), HttpAnswer(431, b"request head too large")),
        ("a request line over 16 KiB", req(get(b"/" + b"l" * 16400)), HttpAnswer(431, b"request head too large")),
        ("16 KiB without a line end", b"GET " + b"a" * 20000, HttpAnswer(431, b"request head too large")),
        ("101 field lines", req(get(), b"".join(b"X-F%d: v\r\n" % i for i in range(100))), HttpAnswer(431, b"too many header fields")),
        ("1000 field lines", req(get(), b"X: v\r\n" * 1000), HttpAnswer(431)),
        ("17 Connection options", req(get(), b"Connection: " + b", ".join(b"o%d" % i for i in range(17)) + b"\r\n"), HttpAnswer(400, b"too many Connection options")),
        ("16 Connection options", req(get(b"/opts"), b"Connection: " + b", ".join(b"o%d" % i for i in range(16)) + b"\r\n"), ok(b"origin GET /opts 0")),
        ("an empty line first", b"\r\n" + req(get()), HttpForm()),
        ("only a blank line", b"\r\n\r\n", HttpForm()),
        ("a 204-byte method", req(b"M" * 204 + b" " + url + b"/m HTTP/1.1"), ok(b"origin " + b"M" * 204 + b" /m 0")),
        ("HEAD", req(b"HEAD " + url + b"/head HTTP/1.1"), OriginReplies([b""])),
        ("HTTP/1.0 without keep-alive", req(get(b"/ten", b"HTTP/1.0")), ok(b"origin GET /ten 0")),
        ("two pipelined GETs, then FIN", req(get(b"/one")) + req(get(b"/two")), ok(b"origin GET /one 0", b"origin GET /two 0")),
        ("two pipelined GETs, the first answered late, then FIN", req(get(b"/slow/one")) + req(get(b"/two")), ok(b"origin GET /slow/one 0", b"origin GET /two 0")),
        ("a GET, then garbage, then FIN", req(get(b"/first")) + b"\x16\x03\x01garbage\r\n\r\n", OriginReplies([b"origin GET /first 0"], answer=400)),
    ]
    nofin = [
        ("two pipelined GETs, the second with Connection: close", req(get(b"/one")) + req(get(b"/two"), b"Connection: close\r\n"), ok(b"origin GET /one 0", b"origin GET /two 0")),
        ("a GET, then garbage", req(get(b"/first")) + b"\x16\x03\x01garbage\r\n\r\n", OriginReplies([b"origin GET /first 0"], answer=400)),
        ("a chunked POST, then a GET with Connection: close", req(post(b"/te1"), b"Transfer-Encoding: chunked\r\n", b"0\r\n\r\n") + req(get(b"/after"), b"Connection: close\r\n"), ok(b"origin POST /te1 0", b"origin GET /after 0")),
        ("CL 0 with a request in its body, that one with Connection: close", req(post(b"/cl0b"), b"Content-Length: 0\r\n", req(get(b"/smuggled2"), b"Connection: close\r\n")), ok(b"origin POST /cl0b 0", b"origin GET /smuggled2 0")),
    ]
    if env.users:
        bad_auth = lambda v: b"GET " + url + b"/ HTTP/1.1\r\nHost: x\r\nProxy-Authorization: " + v + b"\r\n\r\n"  # noqa: E731
        cases += [
            ("no Proxy-Authorization", b"GET " + url + b"/ HTTP/1.1\r\nHost: x\r\n\r\n", HttpAnswer(407, b"proxy authentication required")),
            ("CONNECT without Proxy-Authorization", b"CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n" % env.echo, HttpAnswer(407)),
            ("a wrong password", bad_auth(b"Basic " + base64.b64encode(b"alice:Wonderland")), HttpAnswer(407)),
            ("an unknown user", bad_auth(b"Basic " + base64.b64encode(b"mallory:wonderland")), HttpAnswer(407)),
            ("no colon in the credentials", bad_auth(b"Basic " + base64.b64encode(b"alicewonderland")), HttpAnswer(407)),
            ("credentials that are not base64", bad_auth(b"Basic !!!!"), HttpAnswer(407)),
            ("base64 of one byte too few", bad_auth(b"Basic " + base64.b64encode(b"alice:wonderland")[:-1]), HttpAnswer(407)),
            ("the Bearer scheme", bad_auth(b"Bearer " + base64.b64encode(b"alice:wonderland")), HttpAnswer(407)),
            ("an empty value", bad_auth(b""), HttpAnswer(407)),
            ("Basic and nothing", bad_auth(b"Basic"), HttpAnswer(407)),
            ("credentials over 512 bytes", bad_auth(b"Basic " + base64.b64encode(b"alice:" + b"w" * 600)), HttpAnswer(407)),
            ("credentials of 12 KiB", bad_auth(b"Basic " + b"A" * 12000), HttpAnswer(407)),
            ("a NUL in the decoded credentials", bad_auth(b"Basic " + base64.b64encode(b"alice\x00:wonderland")), HttpAnswer(407)),
        ]
    for desc, data, expect in cases:
        b.add(desc, data, expect)
    for desc, data, expect in nofin:  # no FIN: the requests' own framing ends the exchange
        b.add(desc + ", no FIN", data, expect, mode="stall")
    groups.append(b.group())

    b = Builder(inb, prefix + "lengths")
    cl = lambda v, body=b"", path=b"/cl": req(post(path), b"Content-Length: " + v + b"\r\n", body)  # noqa: E731
    te_post = lambda body, path=b"/te": req(post(path), b"Transfer-Encoding: chunked\r\n", body)  # noqa: E731
    cases = [
        ("Content-Length -1", cl(b"-1"), HttpAnswer(400, b"invalid Content-Length")),
        ("Content-Length +5", cl(b"+5", b"hello"), HttpAnswer(400, b"invalid Content-Length")),
        ("Content-Length 0x10", cl(b"0x10"), HttpAnswer(400, b"invalid Content-Length")),
        ("Content-Length 1e3", cl(b"1e3"), HttpAnswer(400, b"invalid Content-Length")),
        ("Content-Length empty", cl(b""), HttpAnswer(400, b"invalid Content-Length")),
        ("Content-Length of 30 nines", cl(b"9" * 30), HttpAnswer(400, b"invalid Content-Length")),
        ("Content-Length 2^64", cl(b"18446744073709551616"), HttpAnswer(400, b"invalid Content-Length")),
        ("Content-Length 2^64 + 5, a body of 5 and a request", cl(b"18446744073709551621", b"hello" + req(get(b"/after-wrap"))), HttpAnswer(400, b"invalid Content-Length")),
        ("Content-Length 10^19 + 1 (20 digits)", cl(b"10000000000000000001", b"h"), HttpAnswer(400, b"invalid Content-Length")),
        ("Content-Length 2^62 + 1", cl(b"4611686018427387905"), HttpAnswer(400, b"invalid Content-Length")),
        ("Content-Length 2^62, 5 bytes sent", cl(b"4611686018427387904", b"hello"), Reply(b"", then="close", note="the body never ends")),
        ("Content-Length 1 2", cl(b"1 2"), HttpAnswer(400, b"invalid Content-Length")),
        ("Content-Length 5, 6", cl(b"5, 6", b"hello!"), HttpAnswer(400, b"invalid Content-Length")),
        ("Content-Length 5,,5", cl(b"5,,5", b"hello", b"/list"), ok(b"origin POST /list 5")),
        ("Content-Length 5, 5", cl(b"5, 5", b"hello", b"/same"), ok(b"origin POST /same 5")),
        ("Content-Length with OWS", cl(b" \t5\t ", b"hello", b"/ows"), ok(b"origin POST /ows 5")),
        ("Content-Length 005", cl(b"005", b"hello", b"/zeros"), ok(b"origin POST /zeros 5")),
        ("Content-Length 0", cl(b"0", b"", b"/zero"), ok(b"origin POST /zero 0")),
        ("two Content-Lengths, 5 and 6", req(post(), b"Content-Length: 5\r\nContent-Length: 6\r\n", b"hello!"), HttpAnswer(400, b"invalid Content-Length")),
        ("two Content-Lengths, 5 and 5", req(post(b"/twice"), b"Content-Length: 5\r\nContent-Length: 5\r\n", b"hello"), ok(b"origin POST /twice 5")),
        ("Content-Length 10, 5 bytes sent", cl(b"10", b"hello"), Reply(b"", then="close", note="the body cut short")),
        ("chunk size zz", te_post(b"zz\r\nhello\r\n0\r\n\r\n"), Reply(b"", then="close", note="a broken chunked body")),
        ("chunk size -1", te_post(b"-1\r\nhello\r\n0\r\n\r\n"), Reply(b"", then="close", note="a broken chunked body")),
        ("chunk size 0x5", te_post(b"0x5\r\nhello\r\n0\r\n\r\n"), Reply(b"", then="close", note="a broken chunked body")),
        ("chunk size of 20 hex digits", te_post(b"f" * 20 + b"\r\nhello\r\n0\r\n\r\n"), Reply(b"", then="close", note="a broken chunked body")),
        ("chunk size 2^62", te_post(b"4000000000000000\r\nhello"), Reply(b"", then="close", note="a broken chunked body")),
        ("chunk size 2^62 - 1, 5 bytes sent", te_post(b"3fffffffffffffff\r\nhello"), Reply(b"", then="close", note="the body never ends")),
        ("chunk size without CRLF", te_post(b"5hello\r\n0\r\n\r\n"), Reply(b"", then="close", note="a broken chunked body")),
        ("chunk size with a bare LF", te_post(b"5\nhello\r\n0\r\n\r\n"), Reply(b"", then="close", note="a broken chunked body")),
        ("chunk size with a bare CR", te_post(b"5\rhello\r\n0\r\n\r\n"), Reply(b"", then="close", note="a broken chunked body")),
        ("chunk data longer than its size", te_post(b"3\r\nhello\r\n0\r\n\r\n"), Reply(b"", then="close", note="a broken chunked body")),
        ("chunk data without its CRLF", te_post(b"5\r\nhello0\r\n\r\n"), Reply(b"", then="close", note="a broken chunked body")),
        ("chunk data with a bare LF after it", te_post(b"5\r\nhello\n0\r\n\r\n"), Reply(b"", then="close", note="a broken chunked body")),
        ("an empty chunk-size line", te_post(b"\r\n5\r\nhello\r\n0\r\n\r\n"), Reply(b"", then="close", note="a broken chunked body")),
        ("a chunk extension of 2000 bytes", te_post(b"5;" + b"e" * 2000 + b"\r\nhello\r\n0\r\n\r\n"), Reply(b"", then="close", note="a broken chunked body")),
        ("a chunk extension with a NUL", te_post(b"5;a\x00b\r\nhello\r\n0\r\n\r\n"), Reply(b"", then="close", note="a broken chunked body")),
        ("a trailer of 17 KiB", te_post(b"0\r\nX-T: " + b"t" * 17000 + b"\r\n\r\n"), Reply(b"", then="close", note="a broken chunked body")),
        ("an obs-fold trailer", te_post(b"0\r\n x\r\n\r\n"), Reply(b"", then="close", note="a broken chunked body")),
        ("a trailer line without a colon", te_post(b"0\r\nX-Trailer\r\n\r\n"), Reply(b"", then="close", note="a broken chunked body")),
        ("a trailer line that is a request line", te_post(b"0\r\nGET /smuggled HTTP/1.1\r\n\r\n"), Reply(b"", then="close", note="a broken chunked body")),
        ("a trailer field with a space before the colon", te_post(b"0\r\nX-T : v\r\n\r\n"), Reply(b"", then="close", note="a broken chunked body")),
        ("a trailer with a bare LF", te_post(b"0\r\nX: y\n\r\n"), Reply(b"", then="close", note="a broken chunked body")),
        ("the last chunk cut before its CRLF", te_post(b"5\r\nhello\r\n0\r\n"), Reply(b"", then="close", note="the body never ends")),
        ("chunk size with OWS and an extension", te_post(b"5 ;a=b\r\nhello\r\n0\r\n\r\n", b"/ext"), ok(b"origin POST /ext 5")),
        ("an upper-case chunk size", te_post(b"A\r\n0123456789\r\n0\r\n\r\n", b"/upper"), ok(b"origin POST /upper 10")),
        ("a zero-padded chunk size", te_post(b"00005\r\nhello\r\n0\r\n\r\n", b"/pad"), ok(b"origin POST /pad 5")),
        ("chunked, then a pipelined GET", te_post(b"0\r\n\r\n", b"/te0") + req(get(b"/next")), ok(b"origin POST /te0 0", b"origin GET /next 0")),
    ]
    for desc, data, expect in cases:
        b.add(desc, data, expect)
    groups.append(b.group())

    b = Builder(inb, prefix + "smuggling")
    te = b"Transfer-Encoding: chunked\r\n"
    chunk_body = b"5\r\nhello\r\n0\r\n\r\n"
    cases = [
        ("TE + CL", req(post(), te + b"Content-Length: 5\r\n", chunk_body), HttpAnswer(400, b"both Transfer-Encoding and Content-Length")),
        ("CL + TE", req(post(), b"Content-Length: 5\r\n" + te, chunk_body), HttpAnswer(400, b"both Transfer-Encoding and Content-Length")),
        ("TE + CL 0", req(post(), te + b"Content-Length: 0\r\n", chunk_body), HttpAnswer(400, b"both Transfer-Encoding and Content-Length")),
        ("TE: chunked, identity", req(post(), b"Transfer-Encoding: chunked, identity\r\n", chunk_body), HttpAnswer(400, b"chunked is not the final transfer coding")),
        ("TE: identity", req(post(), b"Transfer-Encoding: identity\r\n", chunk_body), HttpAnswer(400, b"chunked is not the final transfer coding")),
        ("TE: xchunked", req(post(), b"Transfer-Encoding: xchunked\r\n", chunk_body), HttpAnswer(400, b"chunked is not the final transfer coding")),
        ("TE: chunked;q=1", req(post(), b"Transfer-Encoding: chunked;q=1\r\n", chunk_body), HttpAnswer(400, b"chunked is not the final transfer coding")),
        ("TE: empty", req(post(), b"Transfer-Encoding: \r\n", chunk_body), HttpAnswer(400, b"chunked is not the final transfer coding")),
        ("TE: identity, chunked", req(post(), b"Transfer-Encoding: identity, chunked\r\n", chunk_body), HttpAnswer(501, b"unsupported transfer coding")),
        ("TE: gzip, chunked", req(post(), b"Transfer-Encoding: gzip, chunked\r\n", chunk_body), HttpAnswer(501, b"unsupported transfer coding")),
        ("two TE fields, both chunked", req(post(), te + te, chunk_body), HttpAnswer(501, b"unsupported transfer coding")),
        ("TE: chunked, chunked", req(post(), b"Transfer-Encoding: chunked, chunked\r\n", chunk_body), HttpAnswer(501, b"unsupported transfer coding")),
        ("TE in HTTP/1.0", req(b"POST " + url + b"/p HTTP/1.0", te, chunk_body), HttpAnswer(400, b"Transfer-Encoding in an HTTP/1.0 request")),
        ("TE with a space before the colon", req(post(), b"Transfer-Encoding : chunked\r\n", chunk_body), HttpAnswer(400, b"malformed header field")),
        ("TE folded onto the line before", req(post(), b"X-A: a\r\n Transfer-Encoding: chunked\r\n", chunk_body), HttpAnswer(400, b"obsolete line folding")),
        ("obs-fold of a TE value", req(post(), b"Transfer-Encoding: identity\r\n , chunked\r\n", chunk_body), HttpAnswer(400, b"obsolete line folding")),
        ("obs-fold with a tab", req(get(), b"X-A: a\r\n\tb\r\n"), HttpAnswer(400, b"obsolete line folding")),
        ("obs-fold of the first field", get() + b"\r\n Host: x\r\n" + auth + b"\r\n", HttpAnswer(400)),
        ("a bare LF in the head", get() + b"\nHost: x\n" + auth.replace(b"\r\n", b"\n") + b"\n", HttpAnswer(400, b"lines must end in CRLF")),
        ("a bare LF ending one field", req(get(), b"X-A: a\nX-B: b\r\n"), HttpAnswer(400, b"lines must end in CRLF")),
        ("a bare CR in a field", req(get(), b"X-A: a\rb\r\n"), HttpAnswer(400, b"lines must end in CRLF")),
        ("a bare CR ending the request line", get() + b"\rHost: x\r\n\r\n", HttpAnswer(400, b"lines must end in CRLF")),
        ("CR CR LF", get() + b"\r\r\nHost: x\r\n\r\n", HttpAnswer(400, b"lines must end in CRLF")),
        ("TE with a tab before the value", req(post(b"/tab"), b"Transfer-Encoding:\tchunked\r\n", chunk_body), ok(b"origin POST /tab 5")),
        ("TE in upper case", req(post(b"/upper"), b"TRANSFER-ENCODING: CHUNKED\r\n", chunk_body), ok(b"origin POST /upper 5")),
        ("Transfer_Encoding is not Transfer-Encoding", req(post(b"/underscore"), b"Transfer_Encoding: chunked\r\nContent-Length: 5\r\n", b"hello"), ok(b"origin POST /underscore 5")),
        ("Connection: close names Content-Length", req(post(b"/named"), b"Connection: Content-Length\r\nContent-Length: 5\r\n", b"hello"), ok(b"origin POST /named 5")),
        ("Connection names Transfer-Encoding", req(post(b"/named-te"), b"Connection: Transfer-Encoding\r\n" + te, chunk_body), ok(b"origin POST /named-te 5")),
        ("hop-by-hop fields to drop", req(get(b"/hop"), b"Connection: X-Secret, keep-alive\r\nX-Secret: s\r\nKeep-Alive: 5\r\nTE: trailers\r\nUpgrade: websocket\r\nProxy-Connection: keep-alive\r\n"), ok(b"origin GET /hop 0")),
        ("two Host fields", req(get(b"/hosts"), b"Host: y\r\n"), ok(b"origin GET /hosts 0")),
        ("no Host field", get(b"/nohost") + b"\r\n" + auth + b"\r\n", ok(b"origin GET /nohost 0")),
        ("CL 0 with a request in its body", req(post(b"/cl0"), b"Content-Length: 0\r\n", req(get(b"/smuggled"))), ok(b"origin POST /cl0 0", b"origin GET /smuggled 0")),
        ("CL 44 covering a request", req(post(b"/cover"), b"Content-Length: %d\r\n" % len(req(get(b"/hidden"))), req(get(b"/hidden"))),
         ok(b"origin POST /cover %d" % len(req(get(b"/hidden"))))),
        ("a chunked body holding a request", te_post(b"%x\r\n" % len(req(get(b"/in"))) + req(get(b"/in")) + b"\r\n0\r\n\r\n", b"/holds"),
         ok(b"origin POST /holds %d" % len(req(get(b"/in"))))),
        ("a head of exactly 16 KiB", None, None),
        ("a head of 16 KiB and one byte", None, None),
    ]
    for desc, data, expect in cases:
        if data is None:
            base = req(get(b"/exact"), b"X-Pad: \r\n")
            pad = 16384 - len(base) + (1 if "one byte" in desc else 0)
            data = req(get(b"/exact"), b"X-Pad: " + b"p" * pad + b"\r\n")
            expect = HttpAnswer(431) if "one byte" in desc else ok(b"origin GET /exact 0")
        b.add(desc, data, expect)
    groups.append(b.group())

    b = Builder(inb, prefix + "garbage")

    def make_garbage(rng):
        data = garbage(rng, 2048)
        return "random bytes", data, mixed_or_http(env, data)
    random_cases(b, make_garbage, case_budget())
    groups.append(b.group())

    b = Builder(inb, prefix + "mutation")
    valid = http_valid(env)

    def make(rng):
        if rng.random() < 0.5:
            name, data, _, _ = rng.choice(valid)
            m = mutate(rng, data)
            desc = f"{name} request, mutated"
        else:
            m = random_request(rng, env)
            desc = "a random request from nasty parts"
        if b"CONNECT" in m and str(env.origin).encode() in m:
            return None  # a tunnel to the origin would put any bytes there
        return desc, m, mixed_or_http(env, m)
    random_cases(b, make, case_budget())
    groups.append(b.group())
    return groups


def mixed_or_http(env, data):
    """The expectation for bytes on an http or mixed inbound."""
    if env.inbound.startswith("mixed") and data[:1] in (b"\x04", b"\x05"):
        return socks_model(data, env.users, env.dests)
    return HttpForm()


def random_request(rng, env):
    """A request assembled from parts that parsers disagree on."""
    o = env.origin
    methods = [b"GET", b"POST", b"HEAD", b"PUT", b"OPTIONS", b"CONNECT", b"G ET", b"", b"GET\x00",
               b"X" * rng.randint(1, 300)]
    targets = [b"http://127.0.0.1:%d/r" % o, b"http://127.0.0.1:%d" % o, b"/", b"*",
               b"http://127.0.0.1:%d/?q=%s" % (o, b"a" * rng.randint(0, 3000)),
               b"127.0.0.1:%d" % env.echo, b"name.invalid:443", b"http://name.invalid/",
               b"https://127.0.0.1/", b"http://u@127.0.0.1/", b"http://127.0.0.1:%d/#f" % o,
               b"http://[::1]:%d/" % o, b"http://127.0.0.1:99999/", b"HTTP://127.0.0.1:%d/up" % o]
    versions = [b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.1 ", b"http/1.1", b"HTTP/1.", b""]
    fields = [b"Host: x", b"Content-Length: 5", b"Content-Length: 0", b"Content-Length: -1",
              b"Content-Length: 5, 6", b"Content-Length: 99999999999999999999",
              b"Transfer-Encoding: chunked", b"Transfer-Encoding: chunked, identity",
              b"Transfer-Encoding: gzip, chunked", b"Transfer-Encoding : chunked",
              b"Transfer-Encoding:\tchunked", b" folded: x", b"\tfolded", b"X-Nul: \x00",
              b"Connection: close", b"Connection: keep-alive", b"Connection: X-A, X-B",
              b"Proxy-Connection: keep-alive", b"Upgrade: websocket", b"TE: trailers",
              b"Expect: 100-continue", b"X-Long: " + b"L" * rng.randint(0, 17000),
              b"Proxy-Authorization: Basic " + base64.b64encode(b"alice:wonderland"),
              b"Proxy-Authorization: Basic " + base64.b64encode(b"alice:nope"), b"NoColon",
              b"X: y\nZ: w", b"X: y\rZ: w", b""]
    bodies = [b"", b"hello", b"5\r\nhello\r\n0\r\n\r\n", b"zz\r\nhello\r\n0\r\n\r\n",
              b"-1\r\n\r\n", b"fffffffffffffffffff\r\n", b"5\r\nhello\r\n", b"0\r\n\r\n",
              b"GET http://127.0.0.1:%d/smuggled HTTP/1.1\r\nHost: x\r\n\r\n" % o]
    eol = rng.choice([b"\r\n"] * 6 + [b"\n", b"\r", b"\r\r\n"])
    line = rng.choice(methods) + b" " + rng.choice(targets) + b" " + rng.choice(versions)
    chosen = [rng.choice(fields) for _ in range(rng.randint(0, 6))]
    if env.auth and rng.random() < 0.7:
        chosen.append(env.auth[:-2])
    head = line + eol + b"".join(f + eol for f in chosen) + eol
    return head + rng.choice(bodies) * rng.choice([1, 1, 2])


# ---------------------------------------------------------------- TLS (below Trojan and VLESS)

def tls_group(env):
    """Garbage where TLS is expected, at the TCP level."""
    b = Builder(env.inbound, "tls")
    hello = client_hello()
    rng = random.Random(f"{base_seed()}/{env.inbound}/tls")
    n = len(hello)
    points = sorted(set(range(0, 12)) | {n - 1, n} |
                    set(rng.sample(range(12, n), min(n - 12, case_budget()))))
    for k in points:
        if k < n:
            b.add(f"ClientHello cut after {k} of {n} bytes, then FIN", hello[:k], AnyClose())
            if k in (0, 5, 9, n - 1):
                b.add(f"ClientHello cut after {k} of {n} bytes, then silence", hello[:k],
                      Reply(b"", then="wait"), mode="stall")
        else:
            b.add("a whole ClientHello, then FIN", hello,
                  AnyClose(tls_records_problem, "TLS records"))
    tls_ok = AnyClose(tls_records_problem, "TLS records")
    for i in range(case_budget()):
        r = case_rng(env.inbound, "tls", 1000 + i)
        k = r.randint(5, n)
        junk = bytes(r.randrange(256) for _ in range(r.randint(1, 600)))
        b.add(f"ClientHello cut after {k} bytes, then {len(junk)} random bytes", hello[:k] + junk,
              tls_ok, mode=random.Random(i).choice(["fin", "fin", "rst"]), seeded=True)
    bogus = [
        ("a handshake record of length 0", b"\x16\x03\x01\x00\x00"),
        ("a handshake record of length 0xffff", b"\x16\x03\x01\xff\xff" + bytes(100)),
        ("a handshake record over 2^14 + 2048", b"\x16\x03\x01\x48\x01" + bytes(18433)),
        ("application data before the handshake", b"\x17\x03\x03\x00\x10" + bytes(16)),
        ("an alert before the handshake", b"\x15\x03\x03\x00\x02\x02\x28"),
        ("a ChangeCipherSpec first", b"\x14\x03\x03\x00\x01\x01"),
        ("record type 0", bytes(5)),
        ("record type 0xff", b"\xff\x03\x03\x00\x05hello"),
        ("an SSLv2 ClientHello", b"\x80\x2e\x01\x03\x01\x00\x15\x00\x00\x00\x10" + bytes(37)),
        ("record version 2.0", b"\x16\x02\x00\x00\x04\x01\x00\x00\x00"),
        ("record version 3.5", b"\x16\x03\x05\x00\x04\x01\x00\x00\x00"),
        ("an empty ClientHello message", b"\x16\x03\x01\x00\x04\x01\x00\x00\x00"),
        ("a ClientHello message longer than its record", b"\x16\x03\x01\x00\x08\x01\xff\xff\xff" + bytes(4)),
        ("a ServerHello sent by the client", b"\x16\x03\x03\x00\x04\x02\x00\x00\x00"),
        ("a ClientHello record split into 1-byte records", b"".join(
            b"\x16\x03\x01\x00\x01" + hello[5 + i:6 + i] for i in range(min(60, n - 5)))),
        ("plain HTTP", b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"),
        ("a SOCKS5 greeting", b"\x05\x01\x00"),
        ("the ClientHello twice", hello + hello),
    ]
    for desc, data in bogus:
        b.add(desc, data, tls_ok)
    for i in range(max(4, case_budget() // 4)):
        r = case_rng(env.inbound, "tls", 2000 + i)
        junk = bytes(r.randrange(256) for _ in range(r.randint(1, 400)))
        if r.random() < 0.5:
            junk = bytes([23, 3, 3]) + struct.pack(">H", len(junk)) + junk
        b.add(f"after the handshake, {len(junk)} bytes that are no record of this session", junk,
              tls_ok, layer="tls-raw", seeded=True)
    return b.group()


# ---------------------------------------------------------------- Trojan

def trojan_groups(env):
    inb, echo = env.inbound, env.echo
    hashes = [trojan_hash(TROJAN_PASSWORD)]
    h = hashes[0]
    model = lambda d: trojan_model(d, hashes, env.dests)  # noqa: E731
    groups = [tls_group(env)]
    valid = [("Trojan CONNECT", trojan_request(h, echo, payload=b"ping")),
             ("Trojan CONNECT to a name", trojan_request(h, 0, addr=addr_name(b"name.invalid", 443)))]

    b = Builder(inb, "truncation")
    for name, data in valid[:1]:
        truncations(b, name, data, model, layer="tls", stall_every=6)
    groups.append(b.group())

    b = Builder(inb, "lengths")
    r = lambda cmd, addr, rest=b"\r\n": h + b"\r\n" + bytes([cmd]) + addr + rest  # noqa: E731
    cases = [
        ("domain length 0", r(1, addr_name(b"", 80))),
        ("domain length 255, 30 bytes sent", r(1, b"\x03\xff" + b"a" * 30, b"")),
        ("domain length 255, all sent", r(1, addr_name(b"n" * 255, 80), b"\r\nafter")),
        ("domain with a NUL", r(1, addr_name(b"a\x00b", 80))),
        ("domain that is an IP literal at the echo port", r(1, addr_name(b"127.0.0.1", echo))),
        ("IPv6 ::1 at the echo port", r(1, b"\x04" + bytes(15) + b"\x01" + struct.pack(">H", echo))),
        ("ATYP 0", r(1, b"\x00" + bytes(6))),
        ("ATYP 2", r(1, b"\x02" + bytes(6))),
        ("ATYP 5", r(1, b"\x05" + bytes(6))),
        ("ATYP 0xff", r(1, b"\xff")),
        ("CMD 0", r(0, addr4("127.0.0.1", echo))),
        ("CMD 2", r(2, addr4("127.0.0.1", echo))),
        ("CMD 4", r(4, addr4("127.0.0.1", echo))),
        ("CMD 0xff", r(0xff, addr4("127.0.0.1", echo))),
        ("no CRLF after the hash", h + b"\n\r\x01" + addr4("127.0.0.1", echo) + b"\r\n"),
        ("a bare LF after the hash", h + b"\n\x01"),
        ("no CRLF after the address", r(1, addr4("127.0.0.1", echo), b"\r\r")),
        ("LF CR after the address", r(1, addr4("127.0.0.1", echo), b"\n\r")),
        ("the request without its last CRLF", r(1, addr4("127.0.0.1", echo), b"")),
        ("127.0.0.2 at the echo port (refused)", r(1, addr4("127.0.0.2", echo))),
        ("a port the route blocks", r(1, addr4("127.0.0.1", 1))),
        ("8 KiB after a domain length of 255", r(1, b"\x03\xff" + b"x" * 8192, b"")),
    ]
    for desc, data in cases:
        expect = model(data)
        b.add(desc, data, expect, layer="tls")
        if is_wait(expect):
            b.add(desc + ", then silence", data, expect, mode="stall", layer="tls")
    groups.append(b.group())

    b = Builder(inb, "credentials")
    other = trojan_hash("wrong password")
    creds = [("the hash of another password", other), ("the hash in upper case", h.upper()),
             ("the hash of the empty password", trojan_hash("")),
             ("the hash with its last digit changed", h[:-1] + (b"0" if h[-1:] != b"0" else b"1")),
             ("55 hash digits and a g", h[:55] + b"g"), ("the hash of the password + newline", trojan_hash(TROJAN_PASSWORD + "\n")),
             ("56 zeros", b"0" * 56), ("the password itself", TROJAN_PASSWORD.encode().ljust(56, b" ")),
             ("the SHA-256 hash (64 digits)", hashlib.sha256(TROJAN_PASSWORD.encode()).hexdigest().encode())]
    for desc, hx in creds:
        data = hx + b"\r\n\x01" + addr4("127.0.0.1", echo) + b"\r\nping"
        b.add(desc, data, model(data), layer="tls")
    b.add("a wrong hash, then silence", other + b"\r\n", model(other + b"\r\n"), mode="stall", layer="tls")
    groups.append(b.group())

    b = Builder(inb, "garbage")

    def make_garbage(rng):
        data = garbage(rng, 2048)
        if rng.random() < 0.3:
            data = h[:rng.randint(0, 56)] + data
        return "random bytes", data, model(data)
    random_cases(b, make_garbage, case_budget(), layer="tls")
    groups.append(b.group())

    b = Builder(inb, "mutation")

    def make_mutation(rng):
        name, data = rng.choice(valid)
        m = mutate(rng, data)
        return f"{name}, mutated", m, model(m)
    random_cases(b, make_mutation, case_budget(), layer="tls")
    groups.append(b.group())

    b = Builder(inb, "udp")
    u = env.s.udp_echo.port
    where = addr4("127.0.0.1", u)
    assoc = trojan_request(h, u, cmd=3, addr=where)
    frame = lambda p, a=where, n=None, crlf=b"\r\n": a + struct.pack(">H", len(p) if n is None else n) + crlf + p  # noqa: E731
    hello_frame = frame(b"hello")
    pre = [(assoc + hello_frame, frame(b"hello"))]
    closes = [("a frame announcing 8193 bytes", frame(b"", n=8193)),
              ("a frame announcing 65535 bytes, 100 sent", frame(b"x" * 100, n=65535)),
              ("a frame with ATYP 9", b"\x09" + bytes(8)),
              ("a frame with ATYP 0", b"\x00" + bytes(8)),
              ("a frame with an empty name", frame(b"x", a=addr_name(b"", 53))),
              ("a frame without its CRLF", frame(b"x", crlf=b"\n\r")),
              ("a frame with a bare LF", frame(b"x", crlf=b"\nx"))]
    for desc, data in closes:
        b.add(f"UDP association, then {desc}", data, Reply(b"", then="close"), mode="stall",
              layer="tls", prelude=pre)
    for k in range(len(hello_frame)):
        b.add(f"UDP association, then a frame cut after {k} bytes, then FIN", hello_frame[:k],
              Reply(b"", then="wait"), layer="tls", prelude=pre)
    b.add("UDP association, a frame to a blackholed address, then one to the echo",
          frame(b"lost", a=addr4("8.8.8.8", 53)) + frame(b"lost", a=addr_name(b"name.invalid", 53)),
          Reply(b"", then="wait"), layer="tls",
          prelude=pre + [(frame(b"again"), frame(b"again"))])
    b.add("UDP association with a frame of 8192 bytes", b"", Reply(b"", then="wait"), layer="tls",
          prelude=[(assoc + frame(b"m" * 8192), frame(b"m" * 8192))])
    groups.append(b.group())
    return groups


# ---------------------------------------------------------------- VLESS

def vless_groups(env, layer):
    inb, echo = env.inbound, env.echo
    u = uuid_bytes(VLESS_UUID)
    model = lambda d: vless_model(d, [u], env.dests)  # noqa: E731
    groups = [tls_group(env)]
    if layer == "ws":
        groups += ws_groups(env)
    valid = [("VLESS TCP", vless_request(u, echo, payload=b"ping")),
             ("VLESS TCP to a name", vless_request(u, 443, atyp=2, addr=b"\x0cname.invalid"))]

    b = Builder(inb, "truncation")
    for name, data in valid[:1]:
        truncations(b, name, data, model, layer=layer, stall_every=4)
    # Over TLS the end of the stream is a FIN: the destination's answer (0.3 s
    # after the client ended its side) still comes back. Over WebSocket it is
    # a close frame, which the server answers and then closes the connection
    # (RFC 6455 section 7.1.1, docs/transport-ws.md): any prefix of the answer
    slow = vless_request(u, env.s.slow_echo.port, payload=b"ping")
    b.add("VLESS TCP and its payload to a slow echo, then the end of the stream", slow,
          model(slow), layer=layer, strict=layer != "ws")
    groups.append(b.group())

    b = Builder(inb, "lengths")
    r = lambda **kw: vless_request(u, kw.pop("port", echo), **kw)  # noqa: E731
    cases = [
        ("domain length 0", r(atyp=2, addr=b"\x00")),
        ("domain length 255, 30 bytes sent", r(atyp=2, addr=b"\xff" + b"a" * 30)),
        ("domain length 255, all sent", r(atyp=2, addr=b"\xff" + b"n" * 255, payload=b"after")),
        ("domain with a NUL", r(atyp=2, addr=b"\x03a\x00b")),
        ("domain that is an IP literal at the echo port", r(atyp=2, addr=b"\x09127.0.0.1")),
        ("IPv6 ::1 at the echo port", r(atyp=3, addr=bytes(15) + b"\x01")),
        ("IPv6 cut after 8 bytes", r(atyp=3, addr=bytes(8))),
        ("ATYP 0", r(atyp=0, addr=bytes(4))),
        ("ATYP 4", r(atyp=4, addr=bytes(4))),
        ("ATYP 0xff", r(atyp=0xff, addr=b"")),
        ("CMD 0", r(cmd=0)),
        ("CMD 3 (Mux)", r(cmd=3)),
        ("CMD 4", r(cmd=4)),
        ("CMD 0xff", r(cmd=0xff)),
        ("addons length 1", r(addons=b"\x01\x00")),
        ("addons length 255, nothing after", r(addons=b"\xff")[:18]),
        ("addons length 255", r(addons=b"\xff" + bytes(255))),
        ("version 1", b"\x01" + r()[1:]),
        ("version 0xff", b"\xff" + r()[1:]),
        ("port 0", r(port=0)),
        ("127.0.0.2 at the echo port (refused)", r(addr=bytes([127, 0, 0, 2]))),
        ("UDP to the UDP echo", r(cmd=2, port=env.s.udp_echo.port)),
        ("8 KiB after a domain length of 255", r(atyp=2, addr=b"\xff" + b"x" * 8192)),
    ]
    for desc, data in cases:
        expect = model(data)
        b.add(desc, data, expect, layer=layer)
        if is_wait(expect):
            b.add(desc + ", then silence", data, expect, mode="stall", layer=layer)
    groups.append(b.group())

    b = Builder(inb, "credentials")
    for desc, uu in [("an unknown UUID", uuid_bytes("0e0bb8b4-6cf2-4a43-8a3f-3c2a8e3b4f21")),
                     ("the UUID with one bit flipped", bytes([u[0] ^ 1]) + u[1:]),
                     ("the UUID with its last byte changed", u[:-1] + bytes([u[-1] ^ 0xff])),
                     ("the all-zero UUID", bytes(16)), ("the all-ones UUID", b"\xff" * 16),
                     ("the UUID reversed", u[::-1]),
                     ("the UUID as text", VLESS_UUID.encode()[:16])]:
        data = vless_request(uu, echo, payload=b"ping")
        b.add(desc, data, model(data), layer=layer)
    b.add("an unknown UUID, then silence", vless_request(bytes(16), echo)[:17],
          model(vless_request(bytes(16), echo)[:17]), mode="stall", layer=layer)
    groups.append(b.group())

    b = Builder(inb, "garbage")

    def make_garbage(rng):
        data = garbage(rng, 2048)
        if rng.random() < 0.4:
            data = b"\x00" + (u if rng.random() < 0.5 else b"") + data
        return "random bytes", data, model(data)
    random_cases(b, make_garbage, case_budget(), layer=layer)
    groups.append(b.group())

    b = Builder(inb, "mutation")

    def make_mutation(rng):
        name, data = rng.choice(valid)
        m = mutate(rng, data)
        return f"{name}, mutated", m, model(m)
    random_cases(b, make_mutation, case_budget(), layer=layer)
    groups.append(b.group())

    b = Builder(inb, "udp")
    up = env.s.udp_echo.port
    assoc = vless_request(u, up, cmd=2)
    frame = lambda p, n=None: struct.pack(">H", len(p) if n is None else n) + p  # noqa: E731
    pre = [(assoc + frame(b"hello"), b"\x00\x00" + frame(b"hello"))]
    for desc, data in [("a frame announcing 8193 bytes", frame(b"", n=8193)),
                       ("a frame announcing 65535 bytes, 100 sent", frame(b"x" * 100, n=65535))]:
        b.add(f"UDP association, then {desc}", data, Reply(b"", then="close"), mode="stall",
              layer=layer, prelude=pre)
    for k in (1, 2, 5):
        b.add(f"UDP association, then a frame cut after {k} bytes, then FIN", frame(b"hello")[:k],
              Reply(b"", then="wait"), layer=layer, prelude=pre)
    b.add("UDP association with a frame of 8192 bytes", b"", Reply(b"", then="wait"),
          layer=layer, prelude=[(assoc + frame(b"m" * 8192), b"\x00\x00" + frame(b"m" * 8192))])
    groups.append(b.group())
    return groups


# ---------------------------------------------------------------- VMess

VMESS_FLOOD = 300            # unauthenticated connections held at once by the flood group
VMESS_FLOOD_RSS_KIB = 64 * 1024  # what they may add to the process's RSS, all together


def vmess_groups(env):
    inb, echo = env.inbound, env.echo
    u = uuid_bytes(VMESS_UUID)
    groups = []

    def fresh(b, **kw):
        """A request for the builder's next case, drawn from its seed: an
        AuthID of its own, which the replay filter has never seen."""
        return vmesskit.Request(kw.pop("uuid", u), kw.pop("port", echo), b.rng(), **kw)

    b = Builder(inb, "truncation")
    sample = vmesskit.Request(u, echo)
    head_len, n = len(sample.seal()), len(sample.seal() + sample.chunks(b"ping"))
    for k in range(n + 1):
        for mode in ("fin", "stall" if k < head_len and k % 4 == 0 else ("close", "rst")[k % 2]):
            req = fresh(b)
            data = (req.seal() + req.chunks(b"ping"))[:k]
            # incomplete: closed on our end, or, stalled, at the close time
            # a refusal gets (issue 32, N2: the same 2-6 s whatever the length)
            expect, wait = Reply(b"", then="wait"), CASE_DEADLINE
            if k >= head_len:
                expect = VmessReply(req, b"ping")
            elif mode == "stall":
                expect, wait = Drained(), DRAIN_DEADLINE
            b.add(f"a request and its first chunk cut after {k} of {n} bytes, then {mode}", data,
                  expect, mode=mode, wait=wait)
    groups.append(b.group())

    b = Builder(inb, "header")
    now = int(time.time())
    auth, window = ("authentication failed (no user's AuthID; legacy MD5 headers are refused)",
                    "AuthID outside the time window")
    security, command, atyp = ("body security not supported", "command not supported",
                               "address type not supported")
    refused = [  # (what, the request's fields, the reason docs/inbound-vmess.md gives)
        ("a user the inbound does not have", dict(uuid=uuid_bytes(VLESS_UUID)), auth),
        ("the client's clock 200 s behind", dict(now=now - 200), window),
        ("the client's clock 200 s ahead", dict(now=now + 200), window),
        ("version 0", dict(version=0), "unsupported version"),
        ("version 2", dict(version=2), "unsupported version"),
        ("security 1 (legacy AES-128-CFB)", dict(sec=1), security),
        ("security 0", dict(sec=0), security), ("security 7", dict(sec=7), security),
        ("UDP with security zero", dict(sec=vmesskit.SEC_NONE, opt=0, cmd=2),
         "UDP needs the chunk stream"),
        ("command 0", dict(cmd=0), command), ("command 3 (Mux)", dict(cmd=3), command),
        ("command 0xff", dict(cmd=0xff), command),
        ("address type 0", dict(atyp=0), atyp), ("address type 4", dict(atyp=4), atyp),
        ("a domain with a NUL", dict(atyp=2, addr=b"\x03a\x00b"), "empty or malformed domain name"),
        ("a wrong checksum", dict(checksum=0), "bad header checksum"),
        ("4 bytes after the checksum", dict(extra=bytes(4)), "header length out of bounds"),
    ]
    reasons = {why for _, _, why in refused} | {"bad header seal"}
    for desc, kw, _ in refused:
        for mode in ("fin", "stall"):
            req = fresh(b, **kw)
            data = req.seal() + req.chunks(b"ping")
            b.add(f"a valid AuthID, then {desc}, then {mode}", data, Drained(), mode=mode,
                  wait=DRAIN_DEADLINE)
    for desc, at in [("the sealed length", vmesskit.AUTH_ID_LEN + 3),
                     ("the nonce", vmesskit.AUTH_ID_LEN + 18 + 2),
                     ("the sealed header", head_len - 5)]:
        for mode in ("fin", "stall"):
            data = bytearray(fresh(b).seal())
            data[at] ^= 0x40
            b.add(f"a valid AuthID, then a bit of {desc} flipped, then {mode}", bytes(data),
                  Drained(), mode=mode, wait=DRAIN_DEADLINE)
    b.add("16 random bytes (a legacy MD5 header's place) and 200 more, then silence",
          b.rng().randbytes(216), Drained(), mode="stall", wait=DRAIN_DEADLINE)
    groups.append(b.group(lambda env: vmess_refusals_logged(env, reasons)))

    groups.append(Group("replay", custom=vmess_replay))

    b = Builder(inb, "garbage")

    def make_garbage(rng):
        data = garbage(rng, 2048)
        r = rng.random()
        if r < 0.4:
            sealed = vmesskit.Request(u, echo, rng).seal()
            # its AuthID, or all before the sealed header
            data = sealed[:vmesskit.AUTH_ID_LEN if r < 0.2 else vmesskit.AUTH_ID_LEN + 18 + 8] + data
        return "random bytes", data, AnyClose()
    random_cases(b, make_garbage, case_budget())
    groups.append(b.group())

    b = Builder(inb, "mutation")

    def make_mutation(rng):
        req = vmesskit.Request(u, echo, rng)
        return "a request and its first chunk, mutated", \
            mutate(rng, req.seal() + req.chunks(b"ping")), VmessReply(req, b"ping")
    random_cases(b, make_mutation, case_budget())
    groups.append(b.group())

    groups.append(Group("flood", custom=vmess_flood))
    return groups


def vmess_refusals_logged(env, reasons):
    """Each refusal is logged at debug with its reason, word for word."""
    log = env.log()
    return [f"no log line ends in \"refused: vmess: {why}\"" for why in sorted(reasons)
            if f" refused: vmess: {why}\n" not in log]


def vmess_replay(env):
    """A request that flowed, sent again as it was: refused as a replay,
    so drained, never answered (with a FIN: closed; silent: held at least
    DRAIN_MIN s)."""
    rng = case_rng(env.inbound, "replay", 0)
    req = vmesskit.Request(uuid_bytes(VMESS_UUID), env.echo, rng)
    try:
        vmess_flow(env, b"once", rng, time.monotonic() + CASE_DEADLINE, req)
    except (AssertionError, OSError, EOFError, TimeoutError) as e:
        return [f"the request to replay did not flow: {type(e).__name__}: {e}"]
    data = req.seal() + req.chunks(b"once")
    cases = [Case(id=f"{env.inbound}/replay/{i}", desc=f"the request again{how}", data=data,
                  expect=Drained(), mode=mode, pieces=pieces, wait=DRAIN_DEADLINE)
             for i, (how, mode, pieces) in enumerate([(", then FIN", "fin", 1),
                                                      (", then silence", "stall", 1),
                                                      (" in 3 writes, then silence", "stall", 3)])]
    return ([f"{c.describe()}\n    expected {c.expect!r}: {why}" for c, why in run_cases(env.target, cases)]
            + vmess_refusals_logged(env, ["replayed AuthID"]))


def vmess_flood(env):
    """VMESS_FLOOD connections at once, each 64 random bytes and then
    silence: none is answered or closed before DRAIN_MIN s, every one is
    closed within DRAIN_MAX s, the RSS grows by less than
    VMESS_FLOOD_RSS_KIB meanwhile, and a normal client is served while
    they are held."""
    rng = case_rng(env.inbound, "flood", 0)
    pid, failures, conns = env.proc.proc.pid, [], []
    before = rss_kib(pid)
    t0 = time.monotonic()
    try:
        for _ in range(VMESS_FLOOD):
            c = socket.create_connection(("127.0.0.1", env.target.port), timeout=CASE_DEADLINE)
            c.sendall(rng.randbytes(64))
            conns.append(c)
        try:
            vmess_flow(env, b"during the flood", rng, time.monotonic() + CASE_DEADLINE)
        except (AssertionError, OSError, EOFError, TimeoutError) as e:
            failures.append(f"a normal client during the flood: {type(e).__name__}: {e}")
        grown = rss_kib(pid) - before
        print(f"vmess flood: {VMESS_FLOOD} connections in {time.monotonic() - t0:.2f} s, RSS {grown:+d} KiB")
        if grown > VMESS_FLOOD_RSS_KIB:
            failures.append(f"the RSS grew by {grown} KiB with {VMESS_FLOOD} refused connections held")
        early = time.monotonic() - t0 < DRAIN_MIN * 0.9
        ends = {}
        for i, c in enumerate(conns):
            c.setblocking(False)
            try:
                got = c.recv(1)
                ends[i] = "answered" if got else "closed"
            except BlockingIOError:
                pass
            except OSError:
                ends[i] = "closed"
        if early and ends:
            failures.append(f"{len(ends)} of the flood's connections answered or closed before "
                            f"the {DRAIN_MIN:.0f} s drain: {sorted(ends.items())[:8]}")
        deadline = t0 + DRAIN_DEADLINE
        open_ = []
        for i, c in enumerate(conns):
            pipe = RawPipe(c)
            got, end = pipe.read_all(deadline)
            if got:
                failures.append(f"flood connection {i} answered: {show(got)}")
            elif end not in ("eof", "reset"):
                open_.append(i)
        if open_:
            failures.append(f"{len(open_)} flood connections still open {DRAIN_DEADLINE:.0f} s "
                            "after they were refused")
    finally:
        for c in conns:
            c.close()
    return failures


# ---------------------------------------------------------------- WebSocket

class WsUpgraded(AnyClose):
    """The 101 for `key`, then only server frames without data (a close
    frame at most), then a close. data_prefix_of: data frames may carry a
    prefix of these bytes (a flow that opened before the bad frame)."""

    def __init__(self, key, data_prefix_of=b""):
        self.key, self.allowed = key, data_prefix_of
        super().__init__(self._ok, "a 101, then no data")

    def _ok(self, got):
        end = got.find(b"\r\n\r\n")
        if end < 0:
            return "no 101 response head"
        why = ws_response_problem(got[:end], self.key)
        if why:
            return why
        frames = ServerFrames()
        data = frames.feed(got[end + 4:])
        if frames.problem:
            return frames.problem
        if not self.allowed.startswith(data):
            return f"data frames carried {show(data)}"
        return None


def ws_reply_limit(env, stream):
    """What the VLESS inbound may send back for the byte stream the frames
    carried: its documented reply (only a part of it may come before the
    bad frame ends the connection)."""
    expect = vless_model(stream, [uuid_bytes(VLESS_UUID)], env.dests)
    return expect.data if isinstance(expect, Reply) and not expect.pattern else b""


def ws_request_key(data):
    """The Sec-WebSocket-Key an upgrade request carries, or b""."""
    m = re.search(rb"\r\nSec-WebSocket-Key:[ \t]*([^\r\n]*?)[ \t]*\r\n", data, re.I)
    return m.group(1) if m else b""


def ws_mutated_ok(env, data):
    """For a mutated upgrade request: a refusal, or a 101 for the key it
    carries followed by frames carrying at most the reply to what came."""
    key = ws_request_key(data)
    end = data.find(b"\r\n\r\n")
    allowed = ws_reply_limit(env, ws_client_stream(data[end + 4:])) if end >= 0 else b""
    accepted = WsUpgraded(key, allowed)

    def ok(got):
        if not ws_refused_problem(got):
            return None
        return accepted._ok(got)
    return AnyClose(ok, "a refusal, or a 101 and what the frames carried")


def ws_refused_problem(got):
    """No answer, or one of the answers docs/transport-ws.md says the code
    prepares (404, 400, 426, 431) with Connection: close."""
    if not got:
        return None
    if re.match(rb"HTTP/1\.1 (400|404|426|431) [^\r\n]*\r\n(?:[^\r\n]+\r\n)*\r\n\Z", got) and \
            b"Connection: close" in got:
        return None
    return "an answer other than a refusal"


def ws_groups(env):
    inb = env.inbound
    key = b"dGhlIHNhbXBsZSBub25jZQ=="
    good = ws_upgrade_request(WS_PATH, key)
    u = uuid_bytes(VLESS_UUID)
    vreq = vless_request(u, env.echo, payload=b"ping")
    refused = AnyClose(ws_refused_problem, "no answer or a 4xx refusal")
    upgraded = WsUpgraded(key)
    groups = []

    b = Builder(inb, "ws-upgrade")
    for k in range(len(good) + 1):
        if k == len(good):
            b.add("the whole upgrade request, then FIN", good, upgraded, layer="tls")
            continue
        b.add(f"upgrade request cut after {k} of {len(good)} bytes, then FIN", good[:k], refused,
              layer="tls")
        if k % 23 == 0:
            b.add(f"upgrade request cut after {k} of {len(good)} bytes, then silence", good[:k],
                  Reply(b"", then="wait"), mode="stall", layer="tls")

    def up(path=WS_PATH, method=b"GET", version=b"HTTP/1.1", fields=None, extra=b""):
        f = fields if fields is not None else [b"Host: proxy.test", b"Upgrade: websocket",
                                               b"Connection: Upgrade", b"Sec-WebSocket-Key: " + key,
                                               b"Sec-WebSocket-Version: 13"]
        return method + b" " + path + b" " + version + b"\r\n" + b"".join(x + b"\r\n" for x in f) + extra + b"\r\n"

    std = [b"Host: proxy.test", b"Upgrade: websocket", b"Connection: Upgrade",
           b"Sec-WebSocket-Key: " + key, b"Sec-WebSocket-Version: 13"]
    without = lambda prefix: [x for x in std if not x.startswith(prefix)]  # noqa: E731
    replace = lambda prefix, new: [new if x.startswith(prefix) else x for x in std]  # noqa: E731
    cases = [
        ("another path", up(path=b"/other"), refused),
        ("a longer path", up(path=WS_PATH + b"x"), refused),
        ("a shorter path", up(path=WS_PATH[:-1]), refused),
        ("the path in upper case", up(path=WS_PATH.upper()), refused),
        ("an absolute URI", up(path=b"http://proxy.test" + WS_PATH), refused),
        ("the path with a query (accepted)", up(path=WS_PATH + b"?ed=2048"), upgraded),
        ("POST", up(method=b"POST"), refused),
        ("get in lower case", up(method=b"get"), refused),
        ("HTTP/1.0", up(version=b"HTTP/1.0"), refused),
        ("HTTP/2.0", up(version=b"HTTP/2.0"), refused),
        ("no Host", up(fields=without(b"Host")), refused),
        ("no Upgrade", up(fields=without(b"Upgrade")), refused),
        ("Upgrade: h2c", up(fields=replace(b"Upgrade", b"Upgrade: h2c")), refused),
        ("no Connection", up(fields=without(b"Connection")), refused),
        ("Connection: keep-alive", up(fields=replace(b"Connection", b"Connection: keep-alive")), refused),
        ("Connection: keep-alive, Upgrade (accepted)", up(fields=replace(b"Connection", b"Connection: keep-alive, Upgrade")), upgraded),
        ("UPGRADE: WEBSOCKET in capitals (accepted)", up(fields=replace(b"Upgrade", b"UPGRADE: WEBSOCKET")), upgraded),
        ("version 12", up(fields=replace(b"Sec-WebSocket-Version", b"Sec-WebSocket-Version: 12")), refused),
        ("version 13000", up(fields=replace(b"Sec-WebSocket-Version", b"Sec-WebSocket-Version: 13000")), refused),
        ("no version", up(fields=without(b"Sec-WebSocket-Version")), refused),
        ("no key", up(fields=without(b"Sec-WebSocket-Key")), refused),
        ("a key that is not base64", up(fields=replace(b"Sec-WebSocket-Key", b"Sec-WebSocket-Key: !!!!!!!!!!!!!!!!!!!!!!==")), refused),
        ("a key of 15 bytes", up(fields=replace(b"Sec-WebSocket-Key", b"Sec-WebSocket-Key: " + base64.b64encode(bytes(15)))), refused),
        ("a key of 17 bytes", up(fields=replace(b"Sec-WebSocket-Key", b"Sec-WebSocket-Key: " + base64.b64encode(bytes(17)))), refused),
        ("an empty key", up(fields=replace(b"Sec-WebSocket-Key", b"Sec-WebSocket-Key:")), refused),
        ("a head over 8192 bytes", up(extra=b"X-Pad: " + b"p" * 8200 + b"\r\n"), refused),
        ("a head over 16 KiB", up(extra=b"X-Pad: " + b"p" * 17000 + b"\r\n"), refused),
        ("bare LF line ends", good.replace(b"\r\n", b"\n"), refused),
        ("an obs-fold field", up(extra=b"X-A: a\r\n b\r\n"), refused),
        ("a NUL in a field", up(extra=b"X-A: \x00\r\n"), refused),
        ("a field without a colon", up(extra=b"NoColon\r\n"), refused),
        ("a request line only", b"GET " + WS_PATH + b" HTTP/1.1\r\n\r\n", refused),
        ("a Trojan-looking request", b"a" * 56 + b"\r\n\x01", refused),
        ("a VLESS request without the upgrade", vreq, refused),
        ("the upgrade with 100 extra fields", up(extra=b"".join(b"X-%d: v\r\n" % i for i in range(100))), None),
    ]
    for desc, data, expect in cases:
        if expect is None:  # the docs set no field-count bound here: either is right
            expect = ws_mutated_ok(env, data)
        b.add(desc, data, expect, layer="tls")
    for i in range(case_budget()):
        rng = case_rng(inb, "ws-upgrade", 1000 + i)
        m = mutate(rng, good)
        b.add("the upgrade request, mutated", m, ws_mutated_ok(env, m),
              layer="tls", mode=random_mode(rng), seeded=True)
    groups.append(b.group())

    b = Builder(inb, "ws-frames")
    k4 = b"\x11\x22\x33\x44"
    echo_back = b"\x00\x00ping"
    frames = [
        ("a binary frame with RSV1", ws_frame(2, vreq, rsv=4)),
        ("a binary frame with RSV2", ws_frame(2, vreq, rsv=2)),
        ("a binary frame with RSV3", ws_frame(2, vreq, rsv=1)),
        ("an unmasked binary frame", ws_frame(2, vreq, mask=False)),
        ("a 64-bit length with the top bit set", ws_frame(2, b"", length=1 << 63) + vreq),
        ("a 64-bit length of 2^64 - 1", ws_frame(2, b"", length=(1 << 64) - 1) + vreq),
        ("a frame announcing 2 MiB", ws_frame(2, b"", length=2 << 20, key=k4) + bytes(1000)),
        ("a frame announcing 1 MiB + 1", ws_frame(2, b"", length=(1 << 20) + 1, key=k4) + bytes(100)),
        ("a 16-bit length of 1000, 10 bytes sent", ws_frame(2, b"", length=1000, key=k4) + bytes(10)),
        ("a ping of 126 bytes", ws_frame(9, b"p" * 126)),
        ("a ping of 65536 bytes", ws_frame(9, b"p" * 65536)),
        ("a fragmented ping", ws_frame(9, b"p", fin=False) + ws_frame(0, b"q")),
        ("a close of 126 bytes", ws_frame(8, b"\x03\xe8" + b"c" * 124)),
        ("a fragmented close", ws_frame(8, b"\x03\xe8", fin=False)),
        ("a pong of 200 bytes", ws_frame(10, b"p" * 200)),
        ("a continuation frame first", ws_frame(0, vreq)),
        ("a binary frame inside a fragmented text message", ws_frame(1, b"a", fin=False) + ws_frame(2, vreq)),
        ("a binary frame inside a fragmented binary message", ws_frame(2, b"", fin=False) + ws_frame(2, vreq)),
    ] + [(f"opcode {op}", ws_frame(op, vreq)) for op in (3, 4, 5, 6, 7, 11, 12, 13, 14, 15)]
    for desc, data in frames:
        # what arrived of a frame cut short may be relayed as it came (k4 unmasks zeros to itself)
        partial = k4 * 3 if "10 bytes sent" in desc else b""
        b.add(desc, good + data, WsUpgraded(key, partial), layer="tls")
        b.add(desc + ", after a VLESS request", good + ws_frame(2, vreq) + data,
              WsUpgraded(key, echo_back + partial), layer="tls")
    closes = [("a close with 1 byte of payload", ws_frame(8, b"\x03")),
              ("a close with code 1005", ws_frame(8, struct.pack(">H", 1005))),
              ("a close with code 999", ws_frame(8, struct.pack(">H", 999))),
              ("a close with code 5000", ws_frame(8, struct.pack(">H", 5000))),
              ("a close with a reason that is not UTF-8", ws_frame(8, b"\x03\xe8\xff\xfe")),
              ("an empty close", ws_frame(8, b""))]
    for desc, data in closes:
        b.add(desc, good + data, WsUpgraded(key), layer="tls")
    # what is valid must work: pings answered, empty and fragmented frames joined
    b.add("a ping of 125 bytes, then a VLESS request", good + ws_frame(9, b"p" * 125) + ws_frame(2, vreq),
          WsUpgraded(key, echo_back), layer="tls")
    b.add("a VLESS request in 1000 empty continuation frames and 1-byte frames",
          good + ws_frame(2, b"", fin=False) + ws_frame(0, b"", fin=False) * 1000 +
          b"".join(ws_frame(0, vreq[i:i + 1], fin=i == len(vreq) - 1) for i in range(len(vreq))),
          WsUpgraded(key, echo_back), layer="tls")
    for i in range(case_budget()):
        rng = case_rng(inb, "ws-frames", 1000 + i)
        junk = bytes(rng.randrange(256) for _ in range(rng.randint(1, 300)))
        if rng.random() < 0.5:
            junk = ws_frame(2, vreq) + junk
        b.add("random bytes after the upgrade", good + junk,
              WsUpgraded(key, ws_reply_limit(env, ws_client_stream(junk))),
              layer="tls", mode=random_mode(rng), seeded=True)
    groups.append(b.group())
    return groups


# ---------------------------------------------------------------- normal clients

def normal_client(env):
    """A full valid flow through the inbound to the echo server (and the
    origin or the fallback where the inbound has one); raises on failure."""
    rng = random.Random(time.monotonic())
    payload = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4000)))
    deadline = time.monotonic() + CASE_DEADLINE + 5
    inb = env.inbound
    flows = []
    if inb.startswith(("socks", "mixed")):
        flows.append(("SOCKS5", socks5_handshake(env.echo, env.users, payload),
                      2 + (2 if env.users else 0) + 10))
        if not env.users:
            flows.append(("SOCKS4", socks4_handshake(env.echo, payload=payload), 8))
    if inb.startswith(("http", "mixed")):
        head = b"CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: e\r\n%s\r\n" % (env.echo, env.auth)
        flows.append(("HTTP CONNECT", head + payload, len(ESTABLISHED)))
    for name, data, skip in flows:
        with socket.create_connection(("127.0.0.1", env.target.port), timeout=CASE_DEADLINE) as c:
            c.sendall(data)
            pipe = RawPipe(c)
            got = pipe.read_exact(skip + len(payload), deadline)
            assert got[skip:] == payload, f"{name}: the echo came back wrong: {show(got)}"
    if inb.startswith(("http", "mixed")):
        with socket.create_connection(("127.0.0.1", env.target.port), timeout=CASE_DEADLINE) as c:
            c.sendall(b"GET http://127.0.0.1:%d/alive HTTP/1.1\r\nHost: o\r\n%sConnection: close\r\n\r\n"
                      % (env.origin, env.auth))
            got, end = RawPipe(c).read_all(deadline)
            why = OriginReplies([b"origin GET /alive 0"]).check(got, end, 0, "fin")
            assert why is None, f"HTTP GET to the origin: {why}"
    if inb.startswith("trojan"):
        data = trojan_request(trojan_hash(TROJAN_PASSWORD), env.echo, payload=payload)
        sock, pipe = env.target.open("tls", deadline, rng)
        with sock:
            pipe.send(data)
            assert pipe.read_exact(len(payload), deadline) == payload, "trojan: the echo came back wrong"
    if inb.startswith("vless"):
        layer = "ws" if "ws" in inb else "tls"
        data = vless_request(uuid_bytes(VLESS_UUID), env.echo, payload=payload)
        sock, pipe = env.target.open(layer, deadline, rng)
        with sock:
            pipe.send(data)
            got = pipe.read_exact(2 + len(payload), deadline)
            assert got == b"\x00\x00" + payload, f"vless: the echo came back wrong: {show(got)}"
    if inb.startswith("vmess"):
        vmess_flow(env, payload, rng, deadline)


def vmess_flow(env, payload, rng, deadline, req=None):
    """One VMess request (req, or a new one) with payload to the echo;
    raises unless the response and the echo come back."""
    req = req or vmesskit.Request(uuid_bytes(VMESS_UUID), env.echo, rng)
    with socket.create_connection(("127.0.0.1", env.target.port), timeout=CASE_DEADLINE) as c:
        pipe = RawPipe(c)
        pipe.send(req.seal() + req.chunks(payload))
        got, data = b"", b""
        while data != payload:
            chunk = pipe.recv_some(deadline)
            assert chunk, f"vmess: EOF after {show(got)}"
            got += chunk
            data, why = vmesskit.read_response(req, got)
            assert why is None and payload.startswith(data), \
                f"vmess: the echo came back wrong: {why or show(data)}"


def fallback_client(env):
    """A prober's GET inside TLS reaches the fallback, bytes untouched."""
    deadline = time.monotonic() + CASE_DEADLINE + 5
    get = b"GET /probe HTTP/1.1\r\nHost: localhost\r\n\r\n"
    sock, pipe = env.target.open("tls", deadline, random.Random(0))
    with sock:
        pipe.send(get)
        got, end = pipe.read_all(deadline)
    assert got == fallback_answer(get), f"the fallback's answer to a GET: {show(got)} ({end})"


# ---------------------------------------------------------------- running an inbound's suite

def check_alive(env, after):
    """The process runs, its log has no sanitizer report, a normal client
    gets through. Returns a failure text, or raises when the process died."""
    report = sanitizer_report(env.log())
    if env.proc.proc.poll() is not None or report:
        pytest.fail(f"{env.inbound}: after group {after!r} the process "
                    f"{'exited with ' + str(env.proc.proc.returncode) if env.proc.proc.poll() is not None else 'logged a sanitizer report'}"
                    f"\n{report or env.log()[-6000:]}", pytrace=False)
    try:
        normal_client(env)
    except (AssertionError, OSError, EOFError, ssl.SSLError) as e:
        return f"after group {after!r} a normal client failed: {type(e).__name__}: {e}"
    return None


def start_env(inbound, s, app, tmp_path, started):
    proc = Proxy(app, tmp_path, inbound_config(inbound, s), log_level="debug")
    started.append(proc)
    proc.start()
    target = Target(proc.port, tls=inbound.endswith("-tls"),
                    ws_path=WS_PATH if "ws" in inbound else None)
    return Env(inbound, s, proc, target)


def suite(env):
    inb = env.inbound
    if inb.startswith("socks"):
        return socks_groups(env) + [socks_udp_group(env)]
    if inb.startswith("http"):
        return http_groups(env)
    if inb.startswith("mixed"):
        return socks_groups(env, "socks-") + http_groups(env, "http-")
    if inb.startswith("trojan"):
        return trojan_groups(env)
    if inb == "vless-tls":
        return vless_groups(env, "tls")
    if inb == "vless-ws-tls":
        return vless_groups(env, "ws")
    if inb == "vmess":
        return vmess_groups(env)
    raise AssertionError(inb)


def origin_violations(origin, when, cases):
    """What reached the origin that the proxy must not forward (seen after
    `when`), each with the cases whose bytes hold the offending line."""
    out = []
    for what, line in origin.take_violations():
        cands = [c.id for c in cases if line and line + b"\r\n" in c.data][:8]
        out.append(f"after {when}, the origin received what the proxy must not forward: {what}"
                   + (f"\n    from case(s) {', '.join(cands)}" if cands else ""))
    return out


def report(env, failures, n_cases):
    lines = [f"{env.inbound}: {len(failures)} failure(s) in {n_cases} cases "
             f"(ETM_ADVERSARIAL_SEED={base_seed()!r}, ETM_ADVERSARIAL_CASES={case_budget()}).",
             "Reproduce one case: ETM_ADVERSARIAL_ONLY=<case id> ETM_APP=... "
             f"python3 -m pytest -q tests/e2e/test_adversarial.py -k '{env.inbound}]'"]
    for f in failures[:60]:
        lines.append("- " + f)
    if len(failures) > 60:
        lines.append(f"... and {len(failures) - 60} more")
    lines.append(f"--- config:\n{env.proc.cfg_path.read_text()}")
    lines.append(f"--- log (tail):\n{env.log()[-5000:]}")
    return "\n".join(lines)


@pytest.mark.parametrize("inbound", INBOUNDS)
def test_bad_input(inbound, servers, app, tmp_path, started):
    env = start_env(inbound, servers, app, tmp_path, started)
    groups = suite(env)
    failures = []
    stalls = select([c for g in groups for c in g.cases if c.mode == "stall"])
    n_cases = sum(len(g.cases) for g in groups)
    all_cases = [c for g in groups for c in g.cases]
    timer = Timer()
    t_start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as bg:
        # the stalled cases wait out the handshake deadline all at once,
        # beside the other groups (which therefore also run while dozens
        # of connections sit idle in their handshakes)
        stalled = bg.submit(run_cases, env.target, stalls)
        for g in groups:
            quick = select([c for c in g.cases if c.mode != "stall"])
            t0 = time.monotonic()
            for case, why in run_cases(env.target, quick):
                failures.append(f"{case.describe()}\n    expected {case.expect!r}: {why}")
            if g.custom and not only_filter():
                failures += [f"{g.name}: {f}" for f in g.custom(env)]
            timer.add(f"{g.name}({len(quick)})", time.monotonic() - t0)
            if inbound.startswith(("http", "mixed")):
                time.sleep(0.05)  # the origin's threads finish reading
                failures += origin_violations(servers.origin, f"group {g.name}", all_cases)
            t0 = time.monotonic()
            bad = check_alive(env, g.name)
            timer.add("alive", time.monotonic() - t0)
            if bad:
                failures.append(bad)
        t0 = time.monotonic()
        stalled_results = stalled.result()
        timer.add(f"stall-wait({len(stalls)})", time.monotonic() - t0)
        for case, why in stalled_results:
            failures.append(f"{case.describe()}\n    expected {case.expect!r}: {why}")
    bad = check_alive(env, "stalled cases")
    if bad:
        failures.append(bad)
    if inbound.startswith("trojan"):
        try:
            fallback_client(env)
        except (AssertionError, OSError, EOFError) as e:
            failures.append(f"after every group the fallback failed: {e}")
    if inbound.startswith(("http", "mixed")):
        failures += origin_violations(servers.origin, "the stalled cases", all_cases)
    print(f"\n{inbound}: {n_cases} cases in {time.monotonic() - t_start:.1f}s: {timer}")
    if failures:
        pytest.fail(report(env, failures, n_cases), pytrace=False)


# ---------------------------------------------------------------- udp_lb

DNS_QUERY = (b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
             b"\x07example\x07invalid\x00\x00\x01\x00\x01")


class RawEcho(ScriptedBackend):
    """A UDP backend that answers name + "|" + exactly what came (udplbkit's
    EchoBackend strips a PROXY v2 header, which a client may well send)."""

    def __init__(self, name):
        self.name = name.encode()
        super().__init__()

    def answer(self, data, src):
        try:
            self.sock.sendto(self.name + b"|" + data, src)
        except OSError:
            pass


def udp_exchange(client, payloads, echoes):
    """Sends each payload from client; echoes(p) says whether a reply must
    come, and the next reply must then be exactly that echo (a reply owed
    to nothing shows up here, or in udp_drain). Returns failure texts."""
    failures = []
    for i, p in enumerate(payloads):
        try:
            client.send(p)
        except OSError as e:
            failures.append(f"could not send {len(p)} bytes: {e}")
            continue
        if not echoes(p):
            continue
        got = client.recv(CASE_DEADLINE)
        while got is not None and got[1] != p:
            failures.append(f"a reply that was not owed: {show(got[1])} (waiting for {show(p)})")
            got = client.recv(CASE_DEADLINE)
        if got is None:
            failures.append(f"datagram #{i} ({len(p)} bytes, {show(p, 60)}) got no reply")
    return failures


def udp_drain(clients, wait=0.3):
    """Replies still queued on any client after wait: none was owed."""
    time.sleep(wait)
    failures = []
    for c in clients:
        got = c.recv(0.001)
        if got is not None:
            failures.append(f"a reply that was not owed: {show(got[1])}")
    return failures


def test_udp_lb_bad_input(app, tmp_path, started):
    """A udp_lb listener (docs/udp-lb.md) takes anything UDP carries: every
    truncation of a DNS query, random datagrams, the PROXY v2 signature,
    every size around max_rx_datagram_size; it relays what fits, drops and
    counts the rest (invalid: empty; truncated: over 8192 bytes either way),
    and a normal client is answered after each group."""
    backends = [RawEcho("a"), RawEcho("b")]
    clients = []
    try:
        proc = LbApp(app, tmp_path, lb_config([b.addr for b in backends], cluster={"selection": "round_robin"}), 2)
        started.append(proc)
        proc.start()
        failures = []
        fits = lambda p: 1 <= len(p) and len(p) + 2 <= 8192  # noqa: E731  (the reply is "a|" + p)
        over_client = over_reply = empty = 0

        def client():
            c = Client(proc.port)
            clients.append(c)
            return c

        def alive(after):
            report = sanitizer_report(proc.log())
            if proc.proc.poll() is not None or report:
                pytest.fail(f"udp-lb: after group {after!r} the process died or logged a sanitizer "
                            f"report\n{report or proc.log()[-6000:]}", pytrace=False)
            try:
                client().ask(b"normal after " + after.encode(), timeout=CASE_DEADLINE)
            except AssertionError as e:
                failures.append(f"after group {after!r} a normal client failed: {e}")

        # truncation: every prefix of a DNS query, each its own datagram (and flow)
        prefixes = [DNS_QUERY[:k] for k in range(len(DNS_QUERY) + 1)]
        cs = []
        for p in prefixes:
            cs.append(client())
            failures += [f"truncation: {f}" for f in udp_exchange(cs[-1], [p], fits)]
        failures += [f"truncation: {f}" for f in udp_drain(cs)]
        empty += 1
        alive("truncation")

        # sizes around the limits, on one flow
        sizes = [0, 1, 2, 8189, 8190, 8191, 8192, 8193, 9000, 65507]
        payloads = [bytes([0x41 + i % 26]) * n for i, n in enumerate(sizes)]
        c = client()
        failures += [f"sizes: {f}" for f in udp_exchange(c, payloads, fits) + udp_drain([c])]
        empty += sum(1 for p in payloads if not p)
        over_client += sum(1 for p in payloads if len(p) > 8192)
        over_reply += sum(1 for p in payloads if 8192 - 2 < len(p) <= 8192)
        alive("sizes")

        # garbage: random datagrams, the PROXY v2 signature, DNS-shaped junk, on a few flows
        rng = case_rng("udp-lb", "garbage", 0)
        junk = []
        for i in range(case_budget() * 4):
            r = case_rng("udp-lb", "garbage", i)
            kind = r.randrange(4)
            n = r.choice([0, 1, r.randint(1, 64), r.randint(1, 1500), r.randint(1, 9000)])
            if kind == 0:
                junk.append(bytes(r.randrange(256) for _ in range(n)))
            elif kind == 1:
                junk.append(b"\r\n\r\n\x00\r\nQUIT\n" + bytes(r.randrange(256) for _ in range(n)))
            elif kind == 2:
                junk.append(mutate(r, DNS_QUERY))
            else:
                junk.append(bytes(n))
        cs = [client() for _ in range(4)]
        for i, p in enumerate(junk):
            failures += [f"garbage #{i}: {f}" for f in udp_exchange(rng.choice(cs), [p], fits)]
        failures += [f"garbage: {f}" for f in udp_drain(cs)]
        empty += sum(1 for p in junk if not p)
        over_client += sum(1 for p in junk if len(p) > 8192)
        over_reply += sum(1 for p in junk if 8192 - 2 < len(p) <= 8192)
        alive("garbage")

        # sources: many new flows at once
        many = [client() for _ in range(100)]
        for c in many:
            c.send(b"flow")
        answered = sum(1 for c in many if c.recv(CASE_DEADLINE) is not None)
        if answered != len(many):
            failures.append(f"sources: {answered} of {len(many)} new flows answered")
        alive("sources")

        m = proc.metrics()
        drops = m["drops"]
        if drops.get("invalid") != empty:
            failures.append(f"metrics: invalid={drops.get('invalid')}, sent {empty} empty datagrams")
        if drops.get("truncated") != over_client + over_reply:
            failures.append(f"metrics: truncated={drops.get('truncated')}, expected {over_client} "
                            f"client datagrams and {over_reply} replies over 8192 bytes")
        if failures:
            pytest.fail("udp-lb: " + "\n- ".join([f"{len(failures)} failure(s) "
                        f"(ETM_ADVERSARIAL_SEED={base_seed()!r}):"] + failures[:60]) +
                        f"\n--- log (tail):\n{proc.log()[-4000:]}", pytrace=False)
    finally:
        for c in clients:
            c.close()
        for b in backends:
            b.close()


# ---------------------------------------------------------------- known defects, each on its own

def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def defect_ws_ping_flood(env, after_data=False):
    """32 MiB of pings while the client reads nothing (before any data, or
    once a flow is open): the proxy must push back (stop reading) or close
    the connection, not queue the pongs without bound; if it keeps the
    connection, a flow must still work on it."""
    deadline = time.monotonic() + 60
    sock, pipe = env.target.open("tls", deadline, random.Random(1))
    key = b"dGhlIHNhbXBsZSBub25jZQ=="
    with sock:
        pipe.send(ws_upgrade_request(WS_PATH, key))
        head = b""
        while b"\r\n\r\n" not in head:
            head += pipe.recv_some(deadline)
        if after_data:
            pipe.send(ws_frame(2, vless_request(uuid_bytes(VLESS_UUID), env.echo, payload=b"open")))
            want = len(ws_frame(2, b"\x00\x00", mask=False)) + len(ws_frame(2, b"open", mask=False))
            while len(head) - head.index(b"\r\n\r\n") - 4 < want:
                head += pipe.recv_some(deadline)
        before = rss_kib(env.proc.proc.pid)
        burst = ws_frame(9, b"p" * 125, key=b"\x01\x02\x03\x04") * 8000  # about 1 MiB
        sent, ended = 0, None
        sock.settimeout(2.0)
        for _ in range(32):
            try:
                pipe.send(burst)
                sent += len(burst)
            except (socket.timeout, TimeoutError):
                ended = "backpressure"  # the proxy stopped reading; our write is cut mid-frame
                break
            except (OSError, ssl.SSLError):
                ended = "closed"
                break
        grown = rss_kib(env.proc.proc.pid) - before
        print(f"ping flood{' after data' if after_data else ''}: {sent} bytes sent, "
              f"{ended or 'all taken'}, RSS {grown:+d} KiB")
        assert grown < 64 * 1024, (f"RSS grew by {grown} KiB while {sent} bytes of pings went "
                                   "unanswered: pongs queued without bound")
        if ended:
            return
        frames = ServerFrames()
        frames.feed(head[head.index(b"\r\n\r\n") + 4:])
        data = b"after the flood"
        if not after_data:
            data = vless_request(uuid_bytes(VLESS_UUID), env.echo, payload=data)
        pipe.send(ws_frame(2, data))
        got = b""
        while b"after the flood" not in got:
            try:
                chunk = pipe.recv_some(deadline)
            except (ConnectionResetError, TlsAlert):
                chunk = b""
            if not chunk or frames.closed is not None:
                return  # the proxy closed the flooding connection: a fair defence
            got += frames.feed(chunk)
            assert not frames.problem, frames.problem
        assert got == (b"" if after_data else b"\x00\x00") + b"after the flood", show(got)


def defect_ws_text_invalid_utf8(env):
    """Text and binary messages are both taken as bytes (docs/transport-ws.md):
    a text message that is not UTF-8 carries the flow like a binary one."""
    deadline = time.monotonic() + CASE_DEADLINE
    sock, pipe = env.target.open("tls", deadline, random.Random(2))
    key = b"dGhlIHNhbXBsZSBub25jZQ=="
    data = vless_request(uuid_bytes(VLESS_UUID), env.echo, payload=b"\xff\xfe not UTF-8")
    with sock:
        pipe.send(ws_upgrade_request(WS_PATH, key) + ws_frame(1, data))
        pipe.half_close(tcp_only=True)
        got, end = pipe.read_all(deadline)
    why = WsUpgraded(key, b"\x00\x00\xff\xfe not UTF-8")._ok(got)
    frames = ServerFrames()
    payload = frames.feed(got[got.find(b"\r\n\r\n") + 4:]) if b"\r\n\r\n" in got else b""
    assert why is None and payload == b"\x00\x00\xff\xfe not UTF-8", \
        f"{why or 'the flow did not carry the text message'}: {show(got)} ({end}); close frame {frames.closed!r}"


def defect_http_pipelining_over_16k(env):
    """40 pipelined GETs, 24 KiB in all, in one write: each is answered in
    order (docs/inbound-http.md, Keep-alive and upstream reuse)."""
    deadline = time.monotonic() + CASE_DEADLINE * 2
    pad = b"X-Pad: " + b"p" * 560 + b"\r\n"
    reqs = [b"GET http://127.0.0.1:%d/pipe/%d HTTP/1.1\r\nHost: x\r\n%s%s\r\n"
            % (env.origin, i, pad, b"Connection: close\r\n" if i == 39 else b"") for i in range(40)]
    with socket.create_connection(("127.0.0.1", env.target.port), timeout=CASE_DEADLINE) as c:
        c.sendall(b"".join(reqs))
        got, end = RawPipe(c).read_all(deadline)
    why = OriginReplies([b"origin GET /pipe/%d 0" % i for i in range(40)]).check(got, end, 0, "stall")
    assert why is None, f"{sum(len(r) for r in reqs)} bytes of pipelined requests: {why}"


KNOWN_DEFECTS = {
    "ws-ping-flood": ("vless-ws-tls", defect_ws_ping_flood),
    "ws-ping-flood-after-data": ("vless-ws-tls", lambda env: defect_ws_ping_flood(env, True)),
    "ws-text-invalid-utf8": ("vless-ws-tls", defect_ws_text_invalid_utf8),
    "http-pipelining-over-16k": ("http", defect_http_pipelining_over_16k),
}


@pytest.mark.parametrize("defect", list(KNOWN_DEFECTS))
def test_known_defect(defect, servers, app, tmp_path, started):
    """Defects known and being fixed while this suite was written, each in a
    test of its own so that the per-inbound tests above stay a signal for
    new ones. (The fourth, a use-after-free on a chunked POST with a bad
    chunk size, is fixed; test_bad_input's lengths groups keep it covered.)"""
    inbound, check = KNOWN_DEFECTS[defect]
    env = start_env(inbound, servers, app, tmp_path, started)
    try:
        check(env)
    except (AssertionError, OSError, EOFError, ssl.SSLError) as e:
        pytest.fail(f"{defect}: {type(e).__name__}: {e}\n--- log (tail):\n{env.log()[-3000:]}",
                    pytrace=False)
    report_ = sanitizer_report(env.log())
    assert env.proc.proc.poll() is None and not report_, \
        f"{defect}: the process died or logged a sanitizer report\n{report_ or env.log()[-6000:]}"
    normal_client(env)
