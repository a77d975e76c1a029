"""Helpers for the DNS service's end-to-end tests (test_dns_service.py) and
its bench: a DNS message codec written from RFC 1035 (and the OPT record of
RFC 6891), upstream servers on loopback (UDP and TCP on one port, DNS over
TLS, DNS over HTTPS) that count the queries they get, and clients that ask
directly or through a SOCKS5 proxy (UDP ASSOCIATE, CONNECT).

Standard library only. Every server binds a 127.0.0.0/8 address.
`python3 dnskit.py` runs the kit's own checks (servers against clients, no
proxy involved).
"""
import base64
import hashlib
import ipaddress
import random
import socket
import ssl
import struct
import threading

from proxykit import (LOOPBACK, Association, recv_exact, socks5_connect)

# RFC 1035 section 3.2.2 and 3.2.4; AAAA is RFC 3596, OPT RFC 6891
TYPE_A, TYPE_NS, TYPE_CNAME, TYPE_AAAA, TYPE_OPT = 1, 2, 5, 28, 41
CLASS_IN = 1
# RFC 1035 section 4.1.1
NOERROR, FORMERR, SERVFAIL, NXDOMAIN, NOTIMP, REFUSED = 0, 1, 2, 3, 4, 5
QR, AA, TC, RD, RA = 0x8000, 0x0400, 0x0200, 0x0100, 0x0080

# The largest UDP answer for a query without EDNS (RFC 1035 section 4.2.1).
UDP_PLAIN_MAX = 512


# ---------------------------------------------------------------- the wire format

def encode_name(name):
    """A domain name as labels (no compression); "" and "." are the root."""
    out = bytearray()
    for label in name.rstrip(".").split(".") if name.strip(".") else []:
        raw = label.encode("ascii")
        assert 0 < len(raw) < 64, f"bad label {label!r}"
        out += bytes([len(raw)]) + raw
    out.append(0)
    assert len(out) <= 255, f"name too long: {name}"
    return bytes(out)


def decode_name(msg, off):
    """(name without the trailing dot, offset after the name where it
    started); follows compression pointers (section 4.1.4), refusing loops."""
    labels, end, jumps = [], None, 0
    while True:
        if off >= len(msg):
            raise ValueError("name runs past the message")
        n = msg[off]
        if n & 0xC0 == 0xC0:
            if off + 1 >= len(msg):
                raise ValueError("cut pointer")
            if end is None:
                end = off + 2
            jumps += 1
            if jumps > 64:
                raise ValueError("compression loop")
            off = (n & 0x3F) << 8 | msg[off + 1]
            continue
        if n & 0xC0:
            raise ValueError(f"bad label type {n:#x}")
        if n == 0:
            return ".".join(labels), (end if end is not None else off + 1)
        labels.append(msg[off + 1:off + 1 + n].decode("ascii", "replace"))
        off += 1 + n


class Record:
    """One resource record: name, type, class, ttl, rdata (raw bytes);
    value is the address text of an A or AAAA record, else None."""

    def __init__(self, name, rtype, rclass, ttl, rdata):
        self.name, self.type, self.rclass, self.ttl, self.rdata = name, rtype, rclass, ttl, rdata

    @property
    def value(self):
        if self.type == TYPE_A and len(self.rdata) == 4:
            return socket.inet_ntop(socket.AF_INET, self.rdata)
        if self.type == TYPE_AAAA and len(self.rdata) == 16:
            return socket.inet_ntop(socket.AF_INET6, self.rdata)
        return None

    def __repr__(self):
        return f"Record({self.name!r}, {self.type}, ttl={self.ttl}, {self.value or self.rdata!r})"


class Message:
    """A parsed message. flags is the 16-bit word after the id; questions
    are (name, type, class); answers, authority and additional are Records
    (the OPT record stays in additional and sets edns_size)."""

    def __init__(self, id_, flags, questions, answers, authority, additional):
        self.id, self.flags = id_, flags
        self.questions, self.answers = questions, answers
        self.authority, self.additional = authority, additional
        self.edns_size = next((r.rclass for r in additional if r.type == TYPE_OPT), None)

    qr = property(lambda self: bool(self.flags & QR))
    tc = property(lambda self: bool(self.flags & TC))
    rd = property(lambda self: bool(self.flags & RD))
    opcode = property(lambda self: self.flags >> 11 & 0xF)
    rcode = property(lambda self: self.flags & 0xF)

    def addresses(self, rtype=None):
        """The address texts of the A and AAAA answers (of rtype alone when
        given), in message order."""
        return [r.value for r in self.answers
                if r.type in (TYPE_A, TYPE_AAAA) and (rtype is None or r.type == rtype)]

    def __repr__(self):
        return (f"Message(id={self.id:#06x}, flags={self.flags:#06x}, rcode={self.rcode}, "
                f"tc={self.tc}, q={self.questions}, an={self.answers})")


def parse(msg):
    """A Message from bytes; ValueError when they are not a whole message."""
    if len(msg) < 12:
        raise ValueError(f"{len(msg)} bytes: shorter than a header")
    id_, flags, qd, an, ns, ar = struct.unpack(">HHHHHH", msg[:12])
    off, questions = 12, []
    for _ in range(qd):
        name, off = decode_name(msg, off)
        if off + 4 > len(msg):
            raise ValueError("cut question")
        questions.append((name,) + struct.unpack(">HH", msg[off:off + 4]))
        off += 4
    sections = []
    for count in (an, ns, ar):
        records = []
        for _ in range(count):
            name, off = decode_name(msg, off)
            if off + 10 > len(msg):
                raise ValueError("cut record")
            rtype, rclass, ttl, rdlen = struct.unpack(">HHIH", msg[off:off + 10])
            off += 10
            if off + rdlen > len(msg):
                raise ValueError("cut rdata")
            records.append(Record(name, rtype, rclass, ttl, msg[off:off + rdlen]))
            off += rdlen
        sections.append(records)
    if off != len(msg):
        raise ValueError(f"{len(msg) - off} bytes after the last record")
    return Message(id_, flags, questions, *sections)


def opt_record(size):
    """The OPT pseudo-record of RFC 6891 section 6.1.2: root name, the UDP
    payload size in the class field, no options."""
    return b"\x00" + struct.pack(">HHIH", TYPE_OPT, size, 0, 0)


def build_query(name, qtype=TYPE_A, id_=None, flags=RD, edns=None):
    """A query's bytes; id_ random when None; edns the UDP size to
    advertise (None: no OPT record)."""
    if id_ is None:
        id_ = random.randrange(0x10000)
    head = struct.pack(">HHHHHH", id_, flags, 1, 0, 0, 1 if edns else 0)
    body = encode_name(name) + struct.pack(">HH", qtype, CLASS_IN)
    return head + body + (opt_record(edns) if edns else b"")


def rr(name, rtype, ttl, rdata):
    return encode_name(name) + struct.pack(">HHIH", rtype, CLASS_IN, ttl, len(rdata)) + rdata


def address_record(name, address, ttl=300):
    ip = ipaddress.ip_address(address)
    return rr(name, TYPE_A if ip.version == 4 else TYPE_AAAA, ttl, ip.packed)


def build_response(query, rcode=NOERROR, answers=(), limit=None):
    """The answer to query (bytes, a whole message): its id, opcode and RD,
    with QR, RA and rcode; the question copied; answers are encoded
    records. With limit, an answer that would be longer is cut to the
    header and question with TC set (RFC 1035 section 4.1.1; RFC 2181
    section 9). An OPT record goes back when the query had one."""
    q = parse(query)
    question = b"".join(encode_name(n) + struct.pack(">HH", t, c) for n, t, c in q.questions)
    opt = opt_record(4096) if q.edns_size is not None else b""
    flags = QR | (q.flags & 0x7900) | RA | rcode  # opcode and RD kept
    whole = (struct.pack(">HHHHHH", q.id, flags, len(q.questions), len(answers), 0, 1 if opt else 0)
             + question + b"".join(answers) + opt)
    if limit is None or len(whole) <= limit:
        return whole
    return (struct.pack(">HHHHHH", q.id, flags | TC, len(q.questions), 0, 0, 1 if opt else 0)
            + question + opt)


def udp_limit(query):
    """What a UDP answer to this query may weigh (RFC 6891 section 6.2.5)."""
    size = parse(query).edns_size
    return UDP_PLAIN_MAX if size is None else max(UDP_PLAIN_MAX, size)


def framed(msg):
    """A message as sent over TCP and TLS: a 2-byte length first (RFC 1035
    section 4.2.2)."""
    return struct.pack(">H", len(msg)) + msg


def read_framed(sock):
    return recv_exact(sock, struct.unpack(">H", recv_exact(sock, 2))[0])


def random_name(suffix="rand.test", rng=random):
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(12)) \
        + "." + suffix


# ---------------------------------------------------------------- upstream servers

def big_addresses(n):
    """n distinct IPv4 addresses for a big answer (40 A records make 672
    bytes with a short name: over 512)."""
    return [f"10.53.{i // 256}.{i % 256}" for i in range(n)]


def wildcard_address(name):
    """The address a wildcard server gives a name it has no entry for."""
    h = hashlib.sha256(name.lower().encode()).digest()
    return f"198.18.{h[0]}.{h[1]}"


class DnsUpstream:
    """An upstream DNS server on host:port in daemon threads. Transports:
    "udp" and "tcp" (one port number for both), "tls" (DNS over TLS,
    RFC 7858) or "https" (DNS over HTTPS, RFC 8484: HTTP/1.1 POST or GET on
    path, keep-alive, pipelined requests answered in order); tls and https
    need tls_context.

    table maps a name (case-insensitive, no trailing dot) to its addresses:
    an A query gets the IPv4 ones, AAAA the IPv6 ones (none: NOERROR with no
    answer). Names not in table get NXDOMAIN, or with wildcard an A record
    of wildcard_address(name). UDP answers longer than the query allows are
    truncated (TC) unless truncate is False. silent: read queries, answer
    none (it can be switched while running). queries holds (name, type,
    transport) of each query received, in order; connections counts the
    accepted TCP connections; http_requests holds (method, path,
    content-type) of each DoH request."""

    def __init__(self, table=None, host=LOOPBACK, port=0, transports=("udp", "tcp"),
                 tls_context=None, path="/dns-query", wildcard=False, truncate=True, ttl=300):
        self.table = {k.lower().rstrip("."): list(v) for k, v in (table or {}).items()}
        self.host, self.transports, self.tls_context = host, tuple(transports), tls_context
        self.path, self.wildcard, self.truncate, self.ttl = path, wildcard, truncate, ttl
        self.silent = False
        self.queries, self.http_requests = [], []
        self.connections = 0
        self.udp_sources = []  # (host, port) each UDP query came from, in order
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._socks = []
        self.udp = self.tcp = None
        if ("tls" in self.transports or "https" in self.transports) and tls_context is None:
            raise ValueError("tls and https need a tls_context")
        self._bind(port)
        if self.udp is not None:
            threading.Thread(target=self._udp_loop, daemon=True).start()
        if self.tcp is not None:
            threading.Thread(target=self._accept_loop, daemon=True).start()

    def _bind(self, port):
        stream = [t for t in self.transports if t != "udp"]
        assert len(stream) <= 1, f"one stream transport per server, not {stream}"
        self.stream = stream[0] if stream else None
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        for _ in range(20 if port == 0 else 1):
            udp = tcp = None
            try:
                if "udp" in self.transports:
                    udp = socket.socket(family, socket.SOCK_DGRAM)
                    udp.bind((self.host, port))
                    port_now = udp.getsockname()[1]
                else:
                    port_now = port
                if self.stream:
                    tcp = socket.socket(family, socket.SOCK_STREAM)
                    tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    tcp.bind((self.host, port_now))
                    tcp.listen(128)
                    port_now = tcp.getsockname()[1]
            except OSError:
                for s in (udp, tcp):
                    if s is not None:
                        s.close()
                if port != 0:
                    raise
                continue
            self.udp, self.tcp, self.port = udp, tcp, port_now
            self._socks = [s for s in (udp, tcp) if s is not None]
            return
        raise OSError("no port free for both UDP and TCP")

    @property
    def address(self):
        """host:port as a [[dns.server]] address."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def count(self, name=None, transport=None):
        """Queries received, for name (case-insensitive) and over transport
        when given."""
        with self.lock:
            return sum(1 for n, _, t in self.queries
                       if (name is None or n.lower() == name.lower().rstrip("."))
                       and (transport is None or t == transport))

    def answer(self, query, transport):
        """The answer's bytes, or None to stay silent (also for bytes that
        are not a query at all)."""
        try:
            q = parse(query)
        except ValueError:
            return None
        if not q.questions:
            return build_response(query, FORMERR)
        name, qtype, _ = q.questions[0]
        with self.lock:
            self.queries.append((name, qtype, transport))
        if self.silent:
            return None
        key = name.lower().rstrip(".")
        if key in self.table:
            addrs = self.table[key]
        elif self.wildcard:
            addrs = [wildcard_address(key)]
        else:
            return build_response(query, NXDOMAIN)
        want = 4 if qtype == TYPE_A else 6 if qtype == TYPE_AAAA else None
        records = [address_record(name, a, self.ttl) for a in addrs
                   if ipaddress.ip_address(a).version == want]
        limit = udp_limit(query) if transport == "udp" and self.truncate else None
        return build_response(query, NOERROR, records, limit)

    def _udp_loop(self):
        self.udp.settimeout(0.1)
        while not self._stop.is_set():
            try:
                data, src = self.udp.recvfrom(65535)
            except socket.timeout:
                continue
            except OSError:
                return
            with self.lock:
                self.udp_sources.append(src)
            out = self.answer(data, "udp")
            if out is not None:
                try:
                    self.udp.sendto(out, src)
                except OSError:
                    pass

    def _accept_loop(self):
        while not self._stop.is_set():
            try:
                c, _ = self.tcp.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
            threading.Thread(target=self._serve_guarded, args=(c,), daemon=True).start()

    def _serve_guarded(self, c):
        try:
            if self.stream in ("tls", "https"):
                c.settimeout(10)
                c = self.tls_context.wrap_socket(c, server_side=True)
            c.settimeout(None)
            with c:
                if self.stream == "https":
                    self._serve_https(c)
                else:
                    self._serve_stream(c)
        except (OSError, EOFError, ValueError, ssl.SSLError):
            pass

    def _serve_stream(self, c):
        transport = self.stream
        while not self._stop.is_set():
            try:
                msg = read_framed(c)
            except EOFError:
                return
            out = self.answer(msg, transport)
            if out is not None:
                c.sendall(framed(out))

    def _serve_https(self, c):
        buf = b""

        def more():
            nonlocal buf
            chunk = c.recv(65536)
            if not chunk:
                raise EOFError
            buf += chunk

        while not self._stop.is_set():
            try:
                while b"\r\n\r\n" not in buf:
                    more()
            except EOFError:
                return
            end = buf.index(b"\r\n\r\n")
            head, buf = buf[:end].decode("latin-1"), buf[end + 4:]
            lines = head.split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            fields = {}
            for line in lines[1:]:
                k, _, v = line.partition(":")
                fields[k.strip().lower()] = v.strip()
            length = int(fields.get("content-length", "0"))
            while len(buf) < length:
                more()
            body, buf = buf[:length], buf[length:]
            path, _, qs = target.partition("?")
            with self.lock:
                self.http_requests.append((method, path, fields.get("content-type")))
            query = None
            if path == self.path and method == "POST" \
                    and fields.get("content-type") == "application/dns-message":
                query = body
            elif path == self.path and method == "GET" and qs.startswith("dns="):
                b64 = qs[4:].split("&")[0]
                query = base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4))
            if query is None:
                status, out = "415 Unsupported Media Type" if path == self.path \
                    else "404 Not Found", b""
            else:
                out = self.answer(query, "https")
                if out is None:  # silent: hold the connection, answer nothing
                    self._stop.wait()
                    return
                status = "200 OK"
            close = fields.get("connection", "").lower() == "close"
            c.sendall((f"HTTP/1.1 {status}\r\nContent-Type: application/dns-message\r\n"
                       f"Content-Length: {len(out)}\r\nCache-Control: max-age={self.ttl}\r\n"
                       + ("Connection: close\r\n" if close else "") + "\r\n").encode() + out)
            if close:
                return

    def close(self):
        self._stop.set()
        for s in self._socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


def make_ca_cert(directory, name="dns.test"):
    """A self-signed certificate (its own CA) for name and 127.0.0.1 in
    directory/name/: the paths (cert, key); the cert is what a [[dns.server]]
    `ca` points at."""
    from proxykit import make_cert
    d = directory / name
    d.mkdir(exist_ok=True)
    return make_cert(d, name, f"DNS:{name},IP:127.0.0.1")


def tls_server_context(cert, key):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(cert), str(key))
    ctx.set_alpn_protocols(["dot", "http/1.1"])
    return ctx


# ---------------------------------------------------------------- clients

def udp_query(host, port, msg, timeout=3.0):
    """One query straight to host:port over UDP; the answer's bytes."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        s.sendto(msg, (host, port))
        data, _ = s.recvfrom(65535)
        return data


def tcp_query(host, port, msg, timeout=3.0):
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(framed(msg))
        return read_framed(s)


def tls_client_context(cafile, check_hostname=True):
    ctx = ssl.create_default_context(cafile=str(cafile))
    ctx.check_hostname = check_hostname
    return ctx


def tls_query(host, port, msg, cafile, server_name, timeout=3.0):
    with socket.create_connection((host, port), timeout=timeout) as raw, \
            tls_client_context(cafile).wrap_socket(raw, server_hostname=server_name) as s:
        s.sendall(framed(msg))
        return read_framed(s)


def doh_request(msg, host="dns.test", path="/dns-query", close=False):
    return (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/dns-message\r\n"
            f"Accept: application/dns-message\r\nContent-Length: {len(msg)}\r\n"
            + ("Connection: close\r\n" if close else "") + "\r\n").encode() + msg


def https_queries(host, port, msgs, cafile, server_name, path="/dns-query", timeout=3.0):
    """msgs as DoH POSTs pipelined on one connection (all written before any
    answer is read); the (status, body) of each answer, in order."""
    from proxykit import HttpReader
    with socket.create_connection((host, port), timeout=timeout) as raw, \
            tls_client_context(cafile).wrap_socket(raw, server_hostname=server_name) as s:
        s.sendall(b"".join(doh_request(m, server_name, path) for m in msgs))
        reader = HttpReader(s, timeout)
        out = []
        for _ in msgs:
            head, body = reader.response()
            out.append((int(head.split(b" ", 2)[1]), body))
        return out


def socks_udp_query(proxy_port, host, port, msg, timeout=3.0):
    """One query through a new SOCKS5 UDP association of the proxy;
    (the source the answer claims, the answer's bytes)."""
    with Association(proxy_port) as assoc:
        assoc.send(host, port, msg)
        return assoc.recv(timeout)


def socks_tcp_query(proxy_port, host, port, msg, timeout=3.0):
    """One query over a SOCKS5 CONNECT to host:port (length-framed); the
    answer's bytes."""
    with socks5_connect(proxy_port, host, port, timeout=timeout) as s:
        s.sendall(framed(msg))
        return read_framed(s)


def ask(assoc, host, name, qtype=TYPE_A, edns=None, port=53, timeout=3.0):
    """A query for name over an open Association to host:port; (the query's
    id, the parsed answer). Asserts the answer comes from host:port."""
    q = build_query(name, qtype, edns=edns)
    assoc.send(host, port, q)
    src, data = assoc.recv(timeout)
    assert src == (host, port), src
    return struct.unpack(">H", q[:2])[0], parse(data)


# ---------------------------------------------------------------- self-check


def self_check():
    import tempfile
    from pathlib import Path

    # the codec
    q = build_query("Www.Example.test", TYPE_AAAA, id_=0xBEEF, edns=1232)
    m = parse(q)
    assert (m.id, m.rd, m.qr, m.edns_size) == (0xBEEF, True, False, 1232), m
    assert m.questions == [("Www.Example.test", TYPE_AAAA, CLASS_IN)], m
    # a compressed answer, as real servers write it
    comp = (struct.pack(">HHHHHH", 7, QR | RD | RA, 1, 1, 0, 0) + encode_name("a.test")
            + struct.pack(">HH", 1, 1) + b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 60, 4)
            + bytes([192, 0, 2, 1]))
    assert parse(comp).addresses() == ["192.0.2.1"]
    for bad in (b"", b"\x00" * 11, comp[:-1], comp + b"x",
                struct.pack(">HHHHHH", 1, 0, 1, 0, 0, 0) + b"\xc0\x0c\x00\x01\x00\x01"):
        try:
            parse(bad)
        except ValueError:
            continue
        raise AssertionError(f"parsed {bad!r}")

    up = DnsUpstream({"a.test": ["192.0.2.1", "2001:db8::1"], "big.test": big_addresses(40)})
    try:
        a = parse(udp_query(LOOPBACK, up.port, build_query("A.TEST", id_=1)))
        assert (a.id, a.rcode, a.addresses(), a.qr, a.rd) == (1, 0, ["192.0.2.1"], True, True), a
        a = parse(tcp_query(LOOPBACK, up.port, build_query("a.test", TYPE_AAAA, id_=2)))
        assert a.addresses() == ["2001:db8::1"], a
        a = parse(udp_query(LOOPBACK, up.port, build_query("nope.test")))
        assert a.rcode == NXDOMAIN and not a.answers, a
        raw = udp_query(LOOPBACK, up.port, build_query("big.test"))
        a = parse(raw)
        assert a.tc and not a.answers and a.questions[0][0] == "big.test", a
        a = parse(udp_query(LOOPBACK, up.port, build_query("big.test", edns=4096)))
        assert not a.tc and len(a.addresses()) == 40, a
        whole = tcp_query(LOOPBACK, up.port, build_query("big.test"))
        assert len(whole) > UDP_PLAIN_MAX and len(parse(whole).addresses()) == 40
        assert up.count("big.test") == 3 and up.count(transport="tcp") == 2, up.queries
        # pipelined over one TCP connection
        with socket.create_connection((LOOPBACK, up.port), timeout=3) as s:
            s.sendall(framed(build_query("a.test", id_=10)) + framed(build_query("x.test", id_=11)))
            assert [parse(read_framed(s)).id for _ in range(2)] == [10, 11]
        up.silent = True
        try:
            udp_query(LOOPBACK, up.port, build_query("a.test"), timeout=0.3)
            raise AssertionError("a silent server answered")
        except socket.timeout:
            pass
    finally:
        up.close()

    with tempfile.TemporaryDirectory() as d:
        cert, key = make_ca_cert(Path(d))
        ctx = tls_server_context(cert, key)
        dot = DnsUpstream({"a.test": ["192.0.2.7"]}, transports=("tls",), tls_context=ctx)
        doh = DnsUpstream({"a.test": ["192.0.2.8"]}, transports=("https",), tls_context=ctx)
        try:
            a = parse(tls_query(LOOPBACK, dot.port, build_query("a.test"), cert, "dns.test"))
            assert a.addresses() == ["192.0.2.7"] and dot.queries == [("a.test", 1, "tls")]
            answers = https_queries(LOOPBACK, doh.port,
                                    [build_query("a.test", id_=i) for i in range(3)]
                                    + [build_query("b.test", id_=3)], cert, "dns.test")
            assert [(st, parse(b).id, parse(b).rcode) for st, b in answers] == [
                (200, 0, 0), (200, 1, 0), (200, 2, 0), (200, 3, NXDOMAIN)], answers
            assert parse(answers[0][1]).addresses() == ["192.0.2.8"]
            assert doh.connections == 1 and doh.count(transport="https") == 4
            try:
                tls_query(LOOPBACK, dot.port, build_query("a.test"), cert, "other.test")
                raise AssertionError("a wrong name passed verification")
            except ssl.SSLCertVerificationError:
                pass
        finally:
            dot.close()
            doh.close()
    print("dnskit: self-check passed")


if __name__ == "__main__":
    self_check()
