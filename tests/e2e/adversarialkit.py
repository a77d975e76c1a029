"""Helpers for the adversarial end-to-end suite (test_adversarial.py): bad
input thrown at each inbound, and what the proxy must answer to it.

A case is bytes sent on one connection at one layer of the inbound's stack
(raw TCP, inside TLS, inside a WebSocket), then an ending (a half-close, a
close, a reset, or nothing at all until the handshake deadline) and an
expectation: the exact reply the docs promise, then a clean close (EOF or
reset) in time. Cases run concurrently in threads; each reports a failure
text or None.

The models in this module (socks_model, trojan_model, vless_model) compute
the documented reply of any byte string, so random and mutated handshakes
are checked as exactly as the hand-written ones. HTTP answers are checked
exactly where a case names its status, and otherwise for form: a
well-formed answer of a documented status, an origin response, or a clean
close; the origin (StrictOrigin) meanwhile records every request that
reaches it in a form the proxy must never forward.

Standard library only (vmesskit reaches the proxy's libcrypto through
ctypes for AES). Everything binds and dials 127.0.0.1.
"""
import base64
import concurrent.futures
import dataclasses
import hashlib
import ipaddress
import os
import random
import re
import socket
import ssl
import struct
import threading
import time
import zlib

import vmesskit
from proxykit import LOOPBACK, Acceptor

# ---------------------------------------------------------------- knobs

HANDSHAKE_TIMEOUT = 2   # [policy] handshake_timeout of every proxy the suite starts
IDLE_TIMEOUT = 8        # [policy] idle_timeout
SLACK = 3.0             # beyond a deadline, for a loaded 2-core host running ASan builds
CASE_DEADLINE = HANDSHAKE_TIMEOUT + SLACK
DEFAULT_CASES = 24      # random cases per random group and inbound (ETM_ADVERSARIAL_CASES)
QUICK_WORKERS = 8       # cases in flight at once
STALL_WORKERS = 200     # stalled cases in flight at once (they only wait)
# A refused VMess connection is read and discarded for a random 2 to 6 s,
# then closed (docs/inbound-vmess.md): such a case reads that long.
DRAIN_MIN, DRAIN_MAX = 2.0, 6.0
DRAIN_DEADLINE = DRAIN_MAX + SLACK

CLOSED = ("eof", "reset", "alert")  # ways a connection may end cleanly


def case_budget():
    """How many random cases each random group generates."""
    return max(1, int(os.environ.get("ETM_ADVERSARIAL_CASES", DEFAULT_CASES)))


def base_seed():
    return os.environ.get("ETM_ADVERSARIAL_SEED", "etemenanki-adversarial-1")


def only_filter():
    """ETM_ADVERSARIAL_ONLY: comma-separated case ids (or id prefixes) to run."""
    v = os.environ.get("ETM_ADVERSARIAL_ONLY", "").strip()
    return [x.strip() for x in v.split(",") if x.strip()]


def case_rng(inbound, group, i):
    """The random generator of case i of a group: seeded by its name, so a
    case is the same whatever the count and whatever ran before it."""
    return random.Random(f"{base_seed()}/{inbound}/{group}/{i}")


def show(b, limit=240):
    """A bytes value for a failure message, cut in the middle when long."""
    if len(b) <= limit:
        return repr(b)
    return f"{b[:limit // 2]!r} ... ({len(b) - limit} bytes) ... {b[-limit // 2:]!r}"


# ---------------------------------------------------------------- cases and expectations

@dataclasses.dataclass
class Case:
    id: str                  # inbound/group/index
    desc: str                # what the bytes are
    data: bytes              # sent at `layer`, after the prelude
    expect: object           # an Expect
    layer: str = "raw"       # "raw" (TCP), "tls" (inside TLS), "ws" (inside WebSocket),
    #                          "tls-raw" (TCP, after a completed TLS handshake)
    mode: str = "fin"        # fin | tcpfin | stall | close | rst
    prelude: tuple = ()      # (send, expected reply) pairs exchanged first, in order
    pieces: int = 1          # data is sent in this many writes
    seed: str = ""           # the seed string the case was drawn from (random cases)
    strict: bool = False     # ws + fin: hold the reply to the whole of it (see run_case)
    wait: float = CASE_DEADLINE  # seconds from connect the case reads for at most

    def describe(self):
        s = f"{self.id} [{self.mode}, {self.layer}] {self.desc}"
        if self.seed:
            s += f" (seed {self.seed!r})"
        for sent, want in self.prelude:
            s += f"\n    prelude: sent {show(sent)}, expected {show(want)}"
        return s + f"\n    sent ({len(self.data)} bytes): {show(self.data)}"


def _end_ok(end):
    return None if end in CLOSED else f"the connection did not close cleanly: {end}"


class Expect:
    """Checks what came back: got (bytes at the case's layer), end (how the
    read ended: eof, reset, alert, timeout, or an error text), elapsed
    (seconds since connect) and the case's mode."""

    def check(self, got, end, elapsed, mode):
        raise NotImplementedError


class Reply(Expect):
    """Exactly `data` (a regex for fullmatch when pattern=True), then a close.
    then: "close" (the server closes by itself), "wait" (it waits for more:
    closes on our EOF, or at the handshake deadline when stalled), "open" (a
    flow: it ends when we end it)."""

    def __init__(self, data=b"", then="close", pattern=False, note=""):
        self.data, self.then, self.pattern, self.note = data, then, pattern, note

    def __repr__(self):
        return f"Reply({show(self.data)}, then={self.then}{', ' + self.note if self.note else ''})"

    def check(self, got, end, elapsed, mode):
        ok = re.fullmatch(self.data, got, re.S) if self.pattern else got == self.data
        if not ok:
            return f"expected {'/' + show(self.data) + '/' if self.pattern else show(self.data)}, got {show(got)} ({end})"
        if end not in CLOSED:
            return f"got the expected reply, then the connection stayed open: {end} after {elapsed:.1f} s"
        if mode == "stall" and self.then == "wait" and elapsed < HANDSHAKE_TIMEOUT * 0.8:
            return f"closed after {elapsed:.2f} s, before the {HANDSHAKE_TIMEOUT} s handshake deadline"
        return None


class PrefixOf(Expect):
    """A prefix of what `reply` (a Reply without a pattern) expects, then a close."""

    def __init__(self, reply):
        self.reply = reply

    def __repr__(self):
        return f"PrefixOf({self.reply!r})"

    def check(self, got, end, elapsed, mode):
        if self.reply.pattern or not self.reply.data.startswith(got):
            return self.reply.check(got, end, elapsed, mode)
        return _end_ok(end)


class AnyClose(Expect):
    """Any bytes for which ok(got) holds (None: no bytes), then a clean close."""

    def __init__(self, ok=None, what="nothing"):
        self.ok, self.what = ok, what

    def __repr__(self):
        return f"AnyClose({self.what})"

    def check(self, got, end, elapsed, mode):
        if self.ok is None and got:
            return f"expected no reply, got {show(got)} ({end})"
        if self.ok is not None:
            why = self.ok(got)
            if why:
                return f"expected {self.what}: {why}; got {show(got)} ({end})"
        return _end_ok(end)


# ---------------------------------------------------------------- HTTP answers

ANSWER_STATUS = {400: "400 Bad Request", 403: "403 Forbidden",
                 407: "407 Proxy Authentication Required",
                 431: "431 Request Header Fields Too Large", 501: "501 Not Implemented",
                 502: "502 Bad Gateway", 504: "504 Gateway Timeout",
                 505: "505 HTTP Version Not Supported"}
AUTH_FIELD = b'Proxy-Authenticate: Basic realm="etemenanki"\r\n'
ESTABLISHED = b"HTTP/1.1 200 Connection established\r\n\r\n"


def parse_answer(buf):
    """One proxy answer at the start of buf, in the exact form of
    docs/inbound-http.md: (status, body, rest) or raises ValueError."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        raise ValueError("no complete answer head")
    lines = buf[:end].split(b"\r\n")
    m = re.fullmatch(rb"HTTP/1\.1 (\d{3}) ([A-Za-z ]+)", lines[0])
    if not m or int(m.group(1)) not in ANSWER_STATUS:
        raise ValueError(f"not a documented answer status line: {lines[0]!r}")
    status = int(m.group(1))
    if lines[0][9:].decode() != ANSWER_STATUS[status]:
        raise ValueError(f"wrong reason phrase: {lines[0]!r}")
    fields = lines[1:]
    if status == 407:
        if not fields or fields[0] + b"\r\n" != AUTH_FIELD:
            raise ValueError("407 without its Proxy-Authenticate field first")
        fields = fields[1:]
    if len(fields) != 3 or fields[0] != b"Content-Type: text/plain" or \
            not fields[1].startswith(b"Content-Length: ") or fields[2] != b"Connection: close":
        raise ValueError(f"answer fields not as documented: {fields!r}")
    n = int(fields[1][16:])
    body = buf[end + 4:end + 4 + n]
    if len(body) < n:
        raise ValueError("answer body cut short")
    if not body.endswith(b"\n") or b"\n" in body[:-1] or any(c < 0x20 or c > 0x7e for c in body[:-1]):
        raise ValueError(f"answer body is not one printable line: {body!r}")
    return status, body, buf[end + 4 + n:]


def parse_origin_response(buf):
    """One StrictOrigin response (as the proxy passes it on) at the start of
    buf: (body, rest) or raises ValueError."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        raise ValueError("no complete response head")
    lines = buf[:end].split(b"\r\n")
    if lines[0] not in (b"HTTP/1.1 200 OK", b"HTTP/1.0 200 OK"):
        raise ValueError(f"not the origin's status line: {lines[0]!r}")
    n = None
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.lower() == b"content-length":
            n = int(value.strip())
        elif name.lower() not in (b"connection", b"x-origin"):
            raise ValueError(f"a field the origin did not send: {line!r}")
    if n is None:
        raise ValueError("origin response without Content-Length")
    body = buf[end + 4:end + 4 + n]
    if len(body) < n:
        raise ValueError("origin response body cut short")
    return body, buf[end + 4 + n:]


class HttpAnswer(Expect):
    """The proxy's own answer with this status (and a body starting with
    `reason` when given), then a close."""

    def __init__(self, status, reason=None):
        self.status, self.reason = status, reason

    def __repr__(self):
        return f"HttpAnswer({self.status}{', ' + repr(self.reason) if self.reason else ''})"

    def check(self, got, end, elapsed, mode):
        try:
            status, body, rest = parse_answer(got)
        except ValueError as e:
            return f"expected a {self.status} answer: {e}; got {show(got)} ({end})"
        if status != self.status:
            return f"expected a {self.status} answer, got {status}: {show(got)}"
        if self.reason and not body.startswith(self.reason):
            return f"expected the {self.status} body to start with {self.reason!r}, got {body!r}"
        if rest:
            return f"bytes after the answer: {show(rest)}"
        return _end_ok(end)


class OriginReplies(Expect):
    """The origin's responses with these bodies, in order (a tunnel's
    established line counts as a response with body None, after which
    `tail` must follow), then a close."""

    def __init__(self, bodies, tail=b"", answer=None):
        self.bodies, self.tail, self.answer = list(bodies), tail, answer

    def __repr__(self):
        return f"OriginReplies({self.bodies!r}, tail={show(self.tail)}, answer={self.answer})"

    def check(self, got, end, elapsed, mode):
        rest = got
        for want in self.bodies:
            if want is None:
                if not rest.startswith(ESTABLISHED):
                    return f"expected {ESTABLISHED!r}, got {show(rest)}"
                rest = rest[len(ESTABLISHED):]
                continue
            try:
                body, rest = parse_origin_response(rest)
            except ValueError as e:
                return f"expected the origin's response {want!r}: {e}; got {show(got)} ({end})"
            if body != want:
                return f"expected the origin's body {want!r}, got {body!r}"
        if self.answer is not None:
            try:
                status, _, rest = parse_answer(rest)
            except ValueError as e:
                return f"expected a {self.answer} answer after the responses: {e}; got {show(got)}"
            if status != self.answer:
                return f"expected a {self.answer} answer after the responses, got {status}"
        if rest != self.tail:
            return f"expected {show(self.tail)} after the responses, got {show(rest)}"
        return _end_ok(end)


def http_form_problem(got):
    """None when got is a sequence the HTTP inbound may send: origin
    responses, then optionally one proxy answer, or a tunnel's established
    line followed by anything; else what is wrong."""
    rest = got
    while rest:
        if rest.startswith(ESTABLISHED):
            return None  # a tunnel: from here on the bytes are the destination's
        if rest.startswith(b"HTTP/1.1 200 OK") or rest.startswith(b"HTTP/1.0 200 OK"):
            try:
                _, rest = parse_origin_response(rest)
            except ValueError as e:
                return str(e)
            continue
        try:
            _, _, rest = parse_answer(rest)
        except ValueError as e:
            return str(e)
        if rest:
            return f"bytes after the proxy's answer: {show(rest)}"
    return None


class HttpForm(Expect):
    """For random input: well-formed replies (http_form_problem) and a clean close."""

    def __repr__(self):
        return "HttpForm()"

    def check(self, got, end, elapsed, mode):
        why = http_form_problem(got)
        if why:
            return f"not a documented HTTP reply: {why}; got {show(got)} ({end})"
        return _end_ok(end)


# ---------------------------------------------------------------- TLS helpers

def tls_records_problem(got):
    """None when got is empty or a run of TLS records (possibly cut short
    by the close); else what is wrong."""
    i = 0
    while i < len(got):
        if got[i] not in (20, 21, 22, 23) or (i + 1 < len(got) and got[i + 1] != 3):
            return f"not a TLS record at offset {i}"
        if i + 5 > len(got):
            return None
        i += 5 + struct.unpack(">H", got[i + 3:i + 5])[0]
    return None


def client_context(ca=None):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if ca:
        ctx.load_verify_locations(ca)
        ctx.check_hostname = True
    else:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def client_hello(server_name="localhost"):
    """The bytes of a fresh TLS ClientHello (one or more records)."""
    ctx = client_context()
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, out, server_hostname=server_name)
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return out.read()


# ---------------------------------------------------------------- pipes: one connection, one layer

class RawPipe:
    def __init__(self, sock):
        self.sock = sock

    def send(self, data):
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server closed already: what it sent is still read

    def half_close(self, tcp_only=False):
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def recv_some(self, deadline):
        """Bytes, or b"" at EOF; raises TimeoutError at the deadline and
        ConnectionResetError on a reset."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        self.sock.settimeout(left)
        try:
            return self.sock.recv(65536)
        except socket.timeout:
            raise TimeoutError from None

    def read_all(self, deadline):
        """(bytes, how it ended) reading until the peer ends or the deadline."""
        buf = bytearray()
        while True:
            try:
                chunk = self.recv_some(deadline)
            except TimeoutError:
                return bytes(buf), "timeout"
            except (ConnectionResetError, BrokenPipeError):
                return bytes(buf), "reset"
            if not chunk:
                return bytes(buf), "eof"
            buf += chunk

    def read_exact(self, n, deadline):
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self.recv_some(deadline)
            except TimeoutError:
                raise EOFError(f"timed out after {len(buf)} of {n} bytes: {show(bytes(buf))}") from None
            if not chunk:
                raise EOFError(f"EOF after {len(buf)} of {n} bytes: {show(bytes(buf))}")
            buf += chunk
        return bytes(buf)


class TlsPipe(RawPipe):
    """TLS over a socket through memory BIOs, so that a half-close (close_notify,
    then the TCP FIN) and reading after it are in the test's hands."""

    def __init__(self, sock, ctx, server_name, deadline):
        super().__init__(sock)
        self.inc, self.out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.obj = ctx.wrap_bio(self.inc, self.out, server_hostname=server_name)
        self.raw = RawPipe(sock)
        while True:
            try:
                self.obj.do_handshake()
                self._flush()
                return
            except ssl.SSLWantReadError:
                self._flush()
                self._fill(deadline)

    def _flush(self):
        data = self.out.read()
        if data:
            self.raw.send(data)

    def _fill(self, deadline):
        try:
            chunk = self.raw.recv_some(deadline)
        except (ConnectionResetError, BrokenPipeError):
            chunk = b""
        if chunk:
            self.inc.write(chunk)
        else:
            self.inc.write_eof()

    def send(self, data):
        view = memoryview(data)
        while view:
            n = self.obj.write(view[:16384])
            view = view[n:]
            self._flush()

    def half_close(self, tcp_only=False):
        if not tcp_only:
            try:
                self.obj.unwrap()
            except (ssl.SSLWantReadError, ssl.SSLError):
                pass
            self._flush()
        self.raw.half_close()

    def recv_some(self, deadline):
        while True:
            try:
                return self.obj.read(65536)
            except ssl.SSLWantReadError:
                self._fill(deadline)
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return b""
            except ssl.SSLError as e:
                if "ALERT" in str(e).upper():
                    raise TlsAlert(str(e)) from None
                raise

    def read_all(self, deadline):
        buf = bytearray()
        while True:
            try:
                chunk = self.recv_some(deadline)
            except TimeoutError:
                return bytes(buf), "timeout"
            except (ConnectionResetError, BrokenPipeError):
                return bytes(buf), "reset"
            except TlsAlert:
                return bytes(buf), "alert"
            except ssl.SSLError as e:
                return bytes(buf), f"TLS error on the server's bytes: {e}"
            if not chunk:
                return bytes(buf), "eof"
            buf += chunk


class TlsAlert(Exception):
    pass


WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def ws_accept(key):
    return base64.b64encode(hashlib.sha1(key + WS_GUID).digest())


def ws_upgrade_request(path, key=b"dGhlIHNhbXBsZSBub25jZQ==", host=b"proxy.test"):
    return (b"GET " + path + b" HTTP/1.1\r\nHost: " + host + b"\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Key: " + key +
            b"\r\nSec-WebSocket-Version: 13\r\n\r\n")


def ws_frame(opcode, payload, fin=True, rsv=0, mask=True, length=None, key=None):
    """One frame as a client would send it; length overrides the announced
    payload length (absurd lengths), rsv sets the three reserved bits."""
    n = len(payload) if length is None else length
    head = bytes([(0x80 if fin else 0) | (rsv & 7) << 4 | (opcode & 15)])
    m = 0x80 if mask else 0
    if n < 126:
        head += bytes([m | n])
    elif n < 65536:
        head += bytes([m | 126]) + struct.pack(">H", n)
    else:
        head += bytes([m | 127]) + struct.pack(">Q", n)
    if not mask:
        return head + payload
    key = key if key is not None else os.urandom(4)
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


def ws_response_problem(head, key):
    """None when head (up to the blank line) is a right 101 for key."""
    lines = head.split(b"\r\n")
    if lines[0] != b"HTTP/1.1 101 Switching Protocols":
        return f"status line {lines[0]!r}"
    fields = {}
    for line in lines[1:]:
        if line:
            k, _, v = line.partition(b":")
            fields[k.strip().lower()] = v.strip()
    if fields.get(b"upgrade", b"").lower() != b"websocket":
        return "no Upgrade: websocket"
    if fields.get(b"sec-websocket-accept") != ws_accept(key):
        return "wrong Sec-WebSocket-Accept"
    return None


class ServerFrames:
    """Parses the frames a server sends (unmasked, RFC 6455 5.1). feed()
    returns the data payload found; closed is set by a close frame;
    problem names the first frame a server must not send."""

    def __init__(self):
        self.buf = b""
        self.closed = None
        self.problem = None
        self.pongs = 0

    def feed(self, data):
        self.buf += data
        out = bytearray()
        while self.closed is None and self.problem is None:
            b = self.buf
            if len(b) < 2:
                break
            fin, rsv, op = b[0] >> 7, (b[0] >> 4) & 7, b[0] & 15
            masked, n, i = b[1] >> 7, b[1] & 127, 2
            if n == 126:
                if len(b) < 4:
                    break
                n, i = struct.unpack(">H", b[2:4])[0], 4
            elif n == 127:
                if len(b) < 10:
                    break
                n, i = struct.unpack(">Q", b[2:10])[0], 10
            if masked or rsv or op not in (0, 1, 2, 8, 9, 10) or (op >= 8 and (n > 125 or not fin)):
                self.problem = f"a frame no server may send: {b[:12]!r}"
                break
            if len(b) < i + n:
                break
            payload, self.buf = b[i:i + n], b[i + n:]
            if op in (0, 1, 2):
                out += payload
            elif op == 8:
                self.closed = payload
            elif op == 10:
                self.pongs += 1
        return bytes(out)


def ws_client_stream(data):
    """The bytes a WebSocket server takes out of the client frames in data
    (RFC 6455 5: masked, no reserved bits, known opcodes, control frames of
    at most 125 bytes and unfragmented, continuations only inside a message,
    at most 1 MiB a frame), up to the first frame it must refuse or the end
    of data (a frame cut short gives what came of it) or a close frame."""
    out, i, in_msg = bytearray(), 0, False
    while i + 2 <= len(data):
        b0, b1 = data[i], data[i + 1]
        fin, rsv, op, masked, n, j = b0 >> 7, (b0 >> 4) & 7, b0 & 15, b1 >> 7, b1 & 127, i + 2
        if n == 126:
            if j + 2 > len(data):
                break
            n, j = struct.unpack(">H", data[j:j + 2])[0], j + 2
        elif n == 127:
            if j + 8 > len(data):
                break
            n, j = struct.unpack(">Q", data[j:j + 8])[0], j + 8
        if not masked or rsv or op not in (0, 1, 2, 8, 9, 10) or n > 1 << 20:
            break
        if op >= 8 and (n > 125 or not fin):
            break
        if (op == 0 and not in_msg) or (op in (1, 2) and in_msg):
            break
        if j + 4 > len(data):
            break
        key, j = data[j:j + 4], j + 4
        payload = bytes(c ^ key[k % 4] for k, c in enumerate(data[j:j + n]))
        if op == 8:
            break
        if op < 8:
            out += payload
            in_msg = not fin
        if j + n > len(data):
            break
        i = j + n
    return bytes(out)


class WsPipe:
    """A WebSocket client over another pipe: data goes out as masked binary
    frames cut as rng decides (continuation fragments and empty frames
    included), data frames coming back are joined."""

    def __init__(self, pipe, rng):
        self.pipe, self.rng = pipe, rng
        self.frames = ServerFrames()
        self.pending = b""

    def upgrade(self, path, deadline):
        key = base64.b64encode(bytes(self.rng.getrandbits(8) for _ in range(16)))
        self.pipe.send(ws_upgrade_request(path, key))
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = self.pipe.recv_some(deadline)
            if not chunk:
                raise EOFError(f"closed during the WebSocket upgrade: {buf!r}")
            buf += chunk
        end = buf.index(b"\r\n\r\n")
        why = ws_response_problem(buf[:end], key)
        if why:
            raise AssertionError(f"bad upgrade response ({why}): {buf[:end]!r}")
        self.pending = self.frames.feed(buf[end + 4:])

    def send(self, data):
        rng = self.rng
        out, i, first = b"", 0, True
        while True:
            n = rng.choice([len(data) - i, rng.randint(0, max(0, len(data) - i))])
            piece = data[i:i + n]
            i += n
            last = i >= len(data) and rng.random() < 0.8
            out += ws_frame(2 if first else 0, piece, fin=last)
            first = False
            if last:
                break
        self.pipe.send(out)

    def half_close(self, tcp_only=False):
        if not tcp_only:
            self.pipe.send(ws_frame(8, struct.pack(">H", 1000)))
        self.pipe.half_close()

    def read_all(self, deadline):
        buf = bytearray(self.pending)
        self.pending = b""
        while True:
            if self.frames.problem:
                return bytes(buf), self.frames.problem
            if self.frames.closed is not None:
                return bytes(buf), "eof"
            try:
                chunk = self.pipe.recv_some(deadline)
            except TimeoutError:
                return bytes(buf), "timeout"
            except (ConnectionResetError, BrokenPipeError):
                return bytes(buf), "reset"
            except TlsAlert:
                return bytes(buf), "alert"
            except ssl.SSLError as e:
                return bytes(buf), f"TLS error on the server's bytes: {e}"
            if not chunk:
                return bytes(buf), "eof"
            buf += self.frames.feed(chunk)

    def read_exact(self, n, deadline):
        buf = bytearray(self.pending)
        self.pending = b""
        while len(buf) < n:
            if self.frames.problem or self.frames.closed is not None:
                raise EOFError(f"WebSocket ended after {len(buf)} of {n} bytes: {show(bytes(buf))}")
            try:
                chunk = self.pipe.recv_some(deadline)
            except TimeoutError:
                raise EOFError(f"timed out after {len(buf)} of {n} bytes: {show(bytes(buf))}") from None
            if not chunk:
                raise EOFError(f"EOF after {len(buf)} of {n} bytes: {show(bytes(buf))}")
            buf += self.frames.feed(chunk)
        self.pending = bytes(buf[n:])
        return bytes(buf[:n])


# ---------------------------------------------------------------- the target and the runner

@dataclasses.dataclass
class Target:
    """Where cases go: the inbound's port and what its stack is."""
    port: int
    tls: bool = False
    ws_path: bytes = None
    server_name: str = "localhost"

    def open(self, layer, deadline, rng):
        """A connected socket and the pipe at `layer` on it."""
        sock = socket.create_connection((LOOPBACK, self.port), timeout=CASE_DEADLINE)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            pipe = RawPipe(sock)
            if layer in ("tls", "ws", "tls-raw"):
                assert self.tls, "a TLS case for an inbound without TLS"
                pipe = TlsPipe(sock, client_context(), self.server_name, deadline)
            if layer == "tls-raw":  # the handshake done, bytes go on the TCP stream as they are
                pipe = RawPipe(sock)
            if layer == "ws":
                pipe = WsPipe(pipe, rng)
                pipe.upgrade(self.ws_path, deadline)
        except BaseException:
            sock.close()
            raise
        return sock, pipe


def run_case(target, case):
    """Runs one case; returns None when it passed, else the failure text."""
    t0 = time.monotonic()
    deadline = t0 + case.wait
    rng = random.Random(case.id)
    try:
        sock, pipe = target.open(case.layer, deadline, rng)
    except Exception as e:
        return f"could not set up the {case.layer} layer: {type(e).__name__}: {e}"
    try:
        for sent, want in case.prelude:
            pipe.send(sent)
            if want:
                got = pipe.read_exact(len(want), deadline)
                if got != want:
                    return f"prelude: expected {show(want)}, got {show(got)}"
        if case.pieces > 1 and len(case.data) > 1:
            cuts = sorted(rng.sample(range(1, len(case.data)), min(case.pieces - 1, len(case.data) - 1)))
            for a, b in zip([0] + cuts, cuts + [len(case.data)]):
                pipe.send(case.data[a:b])
                time.sleep(0.002)
        elif case.data:
            pipe.send(case.data)
        if case.mode in ("close", "rst"):
            if case.mode == "rst":
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
            return None
        if case.mode in ("fin", "tcpfin"):
            pipe.half_close(tcp_only=case.mode == "tcpfin")
        got, end = pipe.read_all(deadline)
        expect = case.expect
        if case.layer == "ws" and case.mode == "fin" and not case.strict and isinstance(expect, Reply):
            # A WebSocket close frame is no half-close: RFC 6455 lets the
            # server end without finishing its reply (one strict case per
            # suite holds the proxy to docs/transport-ws.md's "ends the
            # stream", like a FIN)
            expect = PrefixOf(expect)
        return expect.check(got, end, time.monotonic() - t0, case.mode)
    except EOFError as e:
        return f"{e}"
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    finally:
        sock.close()


def run_cases(target, cases):
    """Runs cases concurrently; returns [(case, failure text)] for those
    that failed, in case order."""
    if not cases:
        return []
    workers = STALL_WORKERS if all(c.mode == "stall" for c in cases) else QUICK_WORKERS
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(workers, len(cases))) as pool:
        results = list(pool.map(lambda c: run_case(target, c), cases))
    return [(c, r) for c, r in zip(cases, results) if r is not None]


def select(cases):
    """The cases ETM_ADVERSARIAL_ONLY names (all when it is unset)."""
    only = only_filter()
    if not only:
        return cases
    return [c for c in cases if any(c.id == o or c.id.startswith(o.rstrip("/") + "/") for o in only)]


# ---------------------------------------------------------------- mutations

def mutate(rng, data, n_ops=None):
    """data changed by 1-4 random edits: a byte flipped, set to 0x00, 0xff
    or anything, bytes inserted, deleted or repeated, a cut, garbage added."""
    b = bytearray(data)
    for _ in range(n_ops or rng.randint(1, 4)):
        op = rng.randrange(8)
        i = rng.randrange(len(b) + 1)
        if op == 0 and b:
            i = min(i, len(b) - 1)
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1 and b:
            i = min(i, len(b) - 1)
            b[i] = rng.choice([0, 0xff, 0x7f, 0x80, rng.randrange(256)])
        elif op == 2:
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif op == 3 and b:
            del b[i:i + rng.randint(1, 8)]
        elif op == 4 and b:
            j = rng.randrange(len(b))
            k = min(len(b), j + rng.randint(1, 16))
            b[i:i] = b[j:k] * rng.randint(1, 3)
        elif op == 5:
            del b[i:]
        elif op == 6:
            b += bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
        else:
            b[i:i] = rng.choice([b"\r\n", b"\n", b"\r", b"\x00", b" ", b"\t", b":", b",", b"\xff" * 4])
    return bytes(b)


def garbage(rng, max_len=512):
    """Random bytes of a random kind: uniform, printable, line-shaped."""
    n = rng.choice([0, 1, 2, 3, rng.randint(1, 16), rng.randint(1, max_len)])
    kind = rng.randrange(4)
    if kind == 0:
        return bytes(rng.randrange(256) for _ in range(n))
    if kind == 1:
        return bytes(rng.randrange(0x20, 0x7f) for _ in range(n))
    if kind == 2:
        alphabet = b"GETPOSTCONNECThttp:/ \r\n\t:0123456789abcdef,;HTTP/1.1Host"
        return bytes(rng.choice(alphabet) for _ in range(n))
    return bytes(rng.choice(b"\x00\x01\x02\x03\x04\x05\xff\r\n") for _ in range(n))


# ---------------------------------------------------------------- destinations (the route of the suite's proxies)

class Dests:
    """What a flow to a destination does under the suite's route: only
    127.0.0.0/8 at the echo or origin port is dialled (and only 127.0.0.1
    listens there); every other address, every name and every other port
    goes to the blackhole."""

    def __init__(self, echo_port, origin_port, udp_echo_port=0, slow_echo_port=0):
        self.echo, self.origin, self.udp_echo = echo_port, origin_port, udp_echo_port
        self.slow = slow_echo_port

    def tcp6(self, addr, port):
        """For an IPv6 destination (16 bytes): a v4-mapped address is routed
        as its IPv4 address; None where the reply would depend on how the
        dial writes the bound address (the mapped loopback at a listening
        port)."""
        if addr[:12] == bytes(10) + b"\xff\xff":
            where = self.tcp4(addr[12:], port)
            return None if where == "echo" or where is None else where
        return "blackhole"

    def tcp4(self, addr, port):
        """For an IPv4 destination (4 bytes): "echo", "refused", "blackhole",
        or None (the origin: no case goes there but HTTP requests, which are
        judged by what the HTTP inbound forwards)."""
        if addr[0] != 127 or port not in (self.echo, self.origin, self.slow):
            return "blackhole"
        if addr != bytes([127, 0, 0, 1]):
            return "refused"
        return "echo" if port in (self.echo, self.slow) else None


# ---------------------------------------------------------------- SOCKS

def addr4(ip, port):
    """ATYP 1 ADDR PORT for an IPv4 address in text."""
    return b"\x01" + socket.inet_aton(ip) + struct.pack(">H", port)


def addr_name(name, port, length=None):
    """ATYP 3 LEN NAME PORT; length overrides the length byte."""
    return b"\x03" + bytes([len(name) if length is None else length]) + name + struct.pack(">H", port)


def ip4(text):
    return socket.inet_aton(text)


def socks5_handshake(dest_port, users=(), payload=b"", user=None, host=None, cmd=1):
    """Greeting, RFC 1929 login with the first account (or `user`), request."""
    data = b"\x05\x01" + (b"\x02" if users else b"\x00")
    if users:
        u, p = user or users[0]
        u, p = u.encode() if isinstance(u, str) else u, p.encode() if isinstance(p, str) else p
        data += b"\x01" + bytes([len(u)]) + u + bytes([len(p)]) + p
    addr = b"\x01" + ip4("127.0.0.1") + struct.pack(">H", dest_port) if host is None else host
    return data + b"\x05" + bytes([cmd]) + b"\x00" + addr + payload


def socks4_handshake(dest_port, ip="127.0.0.1", userid=b"adversary", host=None, payload=b"", cmd=1):
    data = b"\x04" + bytes([cmd]) + struct.pack(">H", dest_port)
    if host is None:
        data += ip4(ip) + userid + b"\x00"
    else:
        data += b"\x00\x00\x00\x07" + userid + b"\x00" + host + b"\x00"
    return data + payload


S5_NONE = b"\x01" + bytes(6)        # BND 0.0.0.0:0
S5_LOOP = rb"\x01\x7f\x00\x00\x01.."  # BND 127.0.0.1:any


def socks_model(data, users, dests, allow_udp=True):
    """What the socks inbound answers to data (docs/inbound-socks.md):
    an Expect, or None when the flow would reach the origin server."""
    users = [(u.encode(), p.encode()) for u, p in users]
    out = b""

    def wait():
        return Reply(out, then="wait")

    def close(extra=b""):
        return Reply(out + extra, then="close")

    if not data:
        return Reply(b"", then="wait")
    if data[0] == 4:
        return socks4_model(data, bool(users), dests)
    if data[0] != 5:
        return close()
    if len(data) < 2 or len(data) < 2 + data[1]:
        return wait()
    method = 2 if users else 0
    if method not in data[2:2 + data[1]]:
        return close(b"\x05\xff")
    out += bytes([5, method])
    i = 2 + data[1]
    if users:
        if len(data) < i + 2:
            return wait()
        ulen = data[i + 1]
        if len(data) < i + 3 + ulen:
            return wait()
        plen = data[i + 2 + ulen]
        if len(data) < i + 3 + ulen + plen:
            return wait()
        if data[i] != 1:
            return close(b"\x01\x01")
        u, p = data[i + 2:i + 2 + ulen], data[i + 3 + ulen:i + 3 + ulen + plen]
        if (u, p) not in users:
            return close(b"\x01\x01")
        out += b"\x01\x00"
        i += 3 + ulen + plen
    if len(data) < i + 4:
        return wait()
    ver, cmd, atyp = data[i], data[i + 1], data[i + 3]
    span = {1: 7, 4: 19}.get(atyp, 1)
    if atyp == 3:
        if len(data) < i + 5:
            return wait()
        span = 2 + data[i + 4] + 2
    if len(data) < i + 3 + span:
        return wait()
    if ver != 5:
        return close()
    fail = lambda rep: close(bytes([5, rep, 0]) + S5_NONE)  # noqa: E731
    if cmd != 1 and not (cmd == 3 and allow_udp):
        return fail(7)
    if atyp not in (1, 3, 4):
        return fail(8)
    a = data[i + 4:i + 3 + span - 2]
    port = struct.unpack(">H", data[i + 3 + span - 2:i + 3 + span])[0]
    extra = data[i + 3 + span:]
    if atyp == 3:
        a = a[1:]
        if not a or b"\x00" in a:
            return fail(1)
    if cmd == 3:
        return Reply(re.escape(out) + rb"\x05\x00\x00" + S5_LOOP, then="open", pattern=True,
                     note="UDP ASSOCIATE")
    where = dests.tcp4(a, port) if atyp == 1 else dests.tcp6(a, port) if atyp == 4 else "blackhole"
    if where is None:
        return None
    if where == "blackhole":
        return Reply(out + b"\x05\x00\x00" + S5_NONE, then="open", note="blackhole")
    if where == "refused":
        return fail(5)
    return Reply(re.escape(out) + rb"\x05\x00\x00" + S5_LOOP + re.escape(extra), then="open",
                 pattern=True, note="echo")


def socks4_model(data, accounts, dests):
    no = b"\x00\x5b" + bytes(6)
    if len(data) < 8:
        return Reply(b"", then="wait")
    if accounts or data[1] != 1:
        return Reply(no, then="close")
    port = struct.unpack(">H", data[2:4])[0]
    ip = data[4:8]
    v4a = ip[:3] == b"\0\0\0" and ip[3] != 0
    nul = data.find(b"\x00", 8)
    if nul < 0:
        return Reply(no if len(data) - 8 > 255 else b"", then="close" if len(data) - 8 > 255 else "wait")
    if nul - 8 > 255:
        return Reply(no, then="close")
    i = nul + 1
    host = None
    if v4a:
        nul = data.find(b"\x00", i)
        if nul < 0:
            return Reply(no if len(data) - i > 255 else b"", then="close" if len(data) - i > 255 else "wait")
        if nul - i > 255:
            return Reply(no, then="close")
        host = data[i:nul]
        if not host:
            return Reply(no, then="close")
        i = nul + 1
    extra = data[i:]
    where = "blackhole" if v4a else dests.tcp4(ip, port)
    if where is None:
        return None
    if where == "blackhole":
        return Reply(b"\x00\x5a" + bytes(6), then="open", note="blackhole")
    if where == "refused":
        return Reply(no, then="close")
    return Reply(rb"\x00\x5a..\x7f\x00\x00\x01" + re.escape(extra), then="open", pattern=True,
                 note="echo")


# ---------------------------------------------------------------- Trojan

def trojan_hash(password):
    return hashlib.sha224(password.encode()).hexdigest().encode()


def trojan_request(hash_hex, dest_port, cmd=1, addr=None, payload=b""):
    addr = addr if addr is not None else b"\x01" + ip4("127.0.0.1") + struct.pack(">H", dest_port)
    return hash_hex + b"\r\n" + bytes([cmd]) + addr + b"\r\n" + payload


def fallback_answer(data):
    """What FallbackServer answers to the bytes it got."""
    body = b"fallback got " + data
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body


class TrojanReply(Expect):
    """What a trojan inbound with FallbackServer as its fallback sends back.
    kind: "fallback" (refused: the fallback answers every byte sent),
    "wait" (undecided: our EOF closes; a stall goes to the fallback at the
    deadline, an empty stall is closed), or a Reply for an opened flow."""

    def __init__(self, kind, data):
        self.kind, self.data = kind, data

    def __repr__(self):
        return f"TrojanReply({self.kind})"

    def check(self, got, end, elapsed, mode):
        if self.kind == "fallback" or (mode == "stall" and self.data):
            return Reply(fallback_answer(self.data), then="close").check(got, end, elapsed, "fin")
        return Reply(b"", then="wait").check(got, end, elapsed, mode)


def trojan_model(data, hashes, dests):
    """The trojan inbound's reply to data (docs/inbound-trojan.md)."""
    h = min(len(data), 56)
    if any(c not in b"0123456789abcdef" for c in data[:h]):
        return TrojanReply("fallback", data)
    if len(data) < 56:
        return TrojanReply("wait", data)
    if data[:56] not in hashes:
        return TrojanReply("fallback", data)

    def crlf_ok(p):
        return (len(data) <= p or data[p] == 13) and (len(data) <= p + 1 or data[p + 1] == 10)

    if not crlf_ok(56):
        return TrojanReply("fallback", data)
    p = 58
    if len(data) <= p:
        return TrojanReply("wait", data)
    cmd = data[p]
    if cmd not in (1, 3):
        return TrojanReply("fallback", data)
    p += 1
    if len(data) <= p:
        return TrojanReply("wait", data)
    atyp = data[p]
    if atyp == 1:
        span = 7
    elif atyp == 4:
        span = 19
    elif atyp == 3:
        if len(data) < p + 2:
            return TrojanReply("wait", data)
        if data[p + 1] == 0:
            return TrojanReply("fallback", data)
        span = 2 + data[p + 1] + 2
    else:
        return TrojanReply("fallback", data)
    if len(data) - p < span:
        return TrojanReply("wait", data)
    a = data[p + 1:p + span - 2]
    port = struct.unpack(">H", data[p + span - 2:p + span])[0]
    if atyp == 3 and b"\x00" in a[1:]:
        return TrojanReply("fallback", data)
    p += span
    if not crlf_ok(p):
        return TrojanReply("fallback", data)
    if len(data) - p < 2:
        return TrojanReply("wait", data)
    extra = data[p + 2:]
    if cmd == 3:
        return None if extra else Reply(b"", then="open", note="UDP association")
    where = dests.tcp4(a, port) if atyp == 1 else dests.tcp6(a, port) if atyp == 4 else "blackhole"
    if where is None:
        return None
    if where == "echo":
        return Reply(extra, then="open", note="echo")
    return Reply(b"", then="open" if where == "blackhole" else "close", note=where)


# ---------------------------------------------------------------- VLESS

def uuid_bytes(text):
    return bytes.fromhex(text.replace("-", ""))


def vless_request(uuid, dest_port, cmd=1, atyp=1, addr=None, payload=b"", addons=b"\x00"):
    addr = addr if addr is not None else ip4("127.0.0.1")
    return (b"\x00" + uuid + addons + bytes([cmd]) + struct.pack(">H", dest_port) +
            bytes([atyp]) + addr + payload)


def vless_model(data, uuids, dests):
    """The vless inbound's reply to data (docs/inbound-vless.md)."""
    if not data:
        return Reply(b"", then="wait")
    if data[0] != 0:
        return Reply(b"", then="close")
    if len(data) < 17:
        return Reply(b"", then="wait")
    if data[1:17] not in uuids:
        return Reply(b"", then="close")
    if len(data) <= 17:
        return Reply(b"", then="wait")
    if data[17] != 0:
        return Reply(b"", then="close")
    if len(data) <= 18:
        return Reply(b"", then="wait")
    cmd = data[18]
    if cmd == 3:  # a Mux.Cool session (docs/mux.md): no address; frames follow
        return None if data[19:] else Reply(b"\x00\x00", then="open", note="mux")
    if cmd not in (1, 2):
        return Reply(b"", then="close")
    if len(data) <= 21:
        return Reply(b"", then="wait")
    atyp = data[21]
    if atyp == 1:
        end = 22 + 4
    elif atyp == 3:
        end = 22 + 16
    elif atyp == 2:
        if len(data) <= 22:
            return Reply(b"", then="wait")
        if data[22] == 0:
            return Reply(b"", then="close")
        end = 23 + data[22]
    else:
        return Reply(b"", then="close")
    if len(data) < end:
        return Reply(b"", then="wait")
    port = struct.unpack(">H", data[19:21])[0]
    a = data[22:end] if atyp != 2 else data[23:end]
    if atyp == 2 and b"\x00" in a:
        return Reply(b"", then="close")
    extra = data[end:]
    if cmd == 2:
        return None if extra else Reply(b"\x00\x00", then="open", note="UDP")
    where = dests.tcp4(a, port) if atyp == 1 else dests.tcp6(a, port) if atyp == 3 else "blackhole"
    if where is None:
        return None
    if where == "echo":
        return Reply(b"\x00\x00" + extra, then="open", note="echo")
    if where == "blackhole":
        return Reply(b"\x00\x00", then="open", note="blackhole")
    return Reply(b"", then="close", note="refused")


# ---------------------------------------------------------------- VMess

class Drained(Expect):
    """A refused VMess request (docs/inbound-vmess.md): never answered,
    read and discarded until the client ends it or DRAIN_MIN to DRAIN_MAX
    seconds pass, then closed. Cases that expect it read for DRAIN_DEADLINE."""

    def __repr__(self):
        return "Drained()"

    def check(self, got, end, elapsed, mode):
        if got:
            return f"expected no reply (a refusal is drained, not answered), got {show(got)} ({end})"
        if end not in CLOSED:
            return f"not closed within the {DRAIN_MAX:.0f} s drain: {end} after {elapsed:.1f} s"
        if mode == "stall" and elapsed < DRAIN_MIN * 0.9:
            return f"closed after {elapsed:.2f} s, before the {DRAIN_MIN:.0f} s drain"
        return None


class VmessReply(AnyClose):
    """What the server may send on req (a vmesskit.Request) before a clean
    close: nothing, its response header, chunks carrying a prefix of
    payload (vmesskit.response_problem)."""

    def __init__(self, req, payload):
        self.req, self.payload = req, payload
        super().__init__(lambda got: vmesskit.response_problem(req, got, payload),
                         f"nothing or the response and a prefix of {payload!r}")



class SlowEcho(Acceptor):
    """Echoes each read 0.3 s late, until EOF: a destination whose answer
    comes after the client has ended its side."""

    def serve(self, c):
        c.settimeout(IDLE_TIMEOUT + SLACK)
        while True:
            chunk = c.recv(65536)
            if not chunk:
                return
            time.sleep(0.3)
            c.sendall(chunk)


class FallbackServer(Acceptor):
    """The Trojan fallback: collects what a connection sends until EOF or
    QUIET seconds of silence, then answers fallback_answer(bytes) and closes."""

    QUIET = 0.5

    def serve(self, c):
        c.settimeout(self.QUIET)
        data = b""
        while True:
            try:
                chunk = c.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            data += chunk
        c.sendall(fallback_answer(data))


TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
HOP_BY_HOP = {b"proxy-authorization", b"proxy-connection", b"keep-alive", b"te", b"upgrade"}


class StrictOrigin(Acceptor):
    """An HTTP/1.1 origin that reads every request strictly and keeps, in
    `violations`, each one that a proxy must never forward (RFC 9112 and
    docs/inbound-http.md): bare CR or LF, obs-fold, a malformed field,
    Host not first, a hop-by-hop field, Content-Length and
    Transfer-Encoding together, a list or invalid Content-Length, a coding
    other than chunked, a malformed chunked body. It answers each request

        HTTP/1.1 200 OK / Content-Length: n / <"origin METHOD TARGET len(body)">

    and serves the next one on the connection unless the request said close;
    a target starting /slow is answered 0.3 s late."""

    def __init__(self):
        self.violations = []
        self.requests = 0
        self.lock = threading.Lock()
        super().__init__()

    def violation(self, what, head, line=b""):
        """Records a violation: what, the request head, the offending line."""
        with self.lock:
            self.violations.append((f"{what}: {show(head, 400)}", line))

    def take_violations(self):
        with self.lock:
            v, self.violations = self.violations, []
        return v

    @staticmethod
    def body_for(method, target, body):
        return b"origin %s %s %d" % (method, target, len(body))

    def serve(self, c):
        c.settimeout(IDLE_TIMEOUT + SLACK)
        f = c.makefile("rb")
        while True:
            head = b""
            while not head.endswith(b"\r\n\r\n"):
                line = f.readline(70000)
                if not line:
                    return
                head += line
                if len(head) > 70000:
                    self.violation("a head over 70000 bytes", head)
                    return
            answer = self.one(f, head)
            if answer is None:
                return
            body, close, head_only = answer
            if b" /slow" in head[:head.find(b"\r\n")]:
                time.sleep(0.3)  # the client's next bytes (a FIN) arrive before the answer
            if head_only:  # HEAD: the length of no body, so the proxy frames it either way
                body = b""
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            if close:
                return

    def one(self, f, head):
        with self.lock:
            self.requests += 1
        text = head[:-4]
        if re.search(rb"\r(?!\n)|(?<!\r)\n", text):
            self.violation("a bare CR or LF", head)
            return None
        lines = text.split(b"\r\n")
        parts = lines[0].split(b" ")
        if len(parts) != 3 or not TOKEN.fullmatch(parts[0]) or \
                not re.fullmatch(rb"HTTP/1\.\d", parts[2]) or not parts[1] or \
                not (parts[1].startswith(b"/") or parts[1] == b"*"):
            self.violation("a malformed request line", head)
            return None
        method, target = parts[0], parts[1]
        fields = []
        for line in lines[1:]:
            if line[:1] in (b" ", b"\t"):
                self.violation("obs-fold", head)
                return None
            name, colon, value = line.partition(b":")
            if not colon or not TOKEN.fullmatch(name) or any(
                    (ch < 0x20 and ch != 9) or ch == 0x7f for ch in value):
                self.violation("a malformed field line", head)
                return None
            fields.append((name.lower(), value.strip(b" \t")))
        if not fields or fields[0][0] != b"host":
            self.violation("Host is not the first field", head)
        names = [n for n, _ in fields]
        if names.count(b"host") != 1:
            self.violation("not exactly one Host", head)
        for n, v in fields:
            if n in HOP_BY_HOP:
                self.violation(f"hop-by-hop field {n.decode()} forwarded", head)
            if n == b"connection" and v.lower() not in (b"close", b"keep-alive"):
                self.violation("a Connection option forwarded", head)
        cls = [v for n, v in fields if n == b"content-length"]
        tes = [v for n, v in fields if n == b"transfer-encoding"]
        if cls and tes:
            self.violation("both Content-Length and Transfer-Encoding", head)
            return None
        if len(cls) > 1 or (cls and not re.fullmatch(rb"\d{1,19}", cls[0])):
            self.violation("a Content-Length that is not one number", head)
            return None
        if len(tes) > 1 or (tes and tes[0].lower() != b"chunked"):
            self.violation("a Transfer-Encoding other than chunked", head)
            return None
        close = any(n == b"connection" and v.lower() == b"close" for n, v in fields)
        if parts[2] == b"HTTP/1.0" and not any(n == b"connection" and v.lower() == b"keep-alive"
                                               for n, v in fields):
            close = True
        if tes:
            body = self.chunked(f, head)
        elif cls:
            n = int(cls[0])
            if n > 1 << 24:
                return self.drain(f)
            body = f.read(n)
            if len(body) < n:
                body = None
        else:
            body = b""
        if body is None:
            return None
        return self.body_for(method, target, body), close, method == b"HEAD"

    @staticmethod
    def drain(f):
        """A body too big to hold: read it away until the proxy ends the
        connection (closing first would make the proxy answer 502)."""
        while f.read(65536):
            pass
        return None

    def chunked(self, f, head):
        body = b""
        while True:
            line = f.readline(2048)
            if not line.endswith(b"\r\n"):
                if line and (len(line) >= 2048 or b"\n" in line):
                    self.violation(f"a malformed chunk-size line {line[:80]!r}", head)
                return None
            m = re.fullmatch(rb"([0-9A-Fa-f]{1,16})([ \t]*;[^\r\n]*|[ \t]*)\r\n", line)
            if not m:
                self.violation(f"a malformed chunk-size line {line[:80]!r}", head, line.rstrip(b"\r\n"))
                return None
            n = int(m.group(1), 16)
            if n == 0:
                break
            if n > 1 << 24:
                return self.drain(f)
            data = f.read(n)
            if len(data) < n:
                return None
            body += data
            crlf = f.read(2)
            if len(crlf) < 2:
                return None
            if crlf != b"\r\n":
                self.violation(f"chunk data not followed by CRLF: {crlf!r}", head)
                return None
        while True:
            line = f.readline(20000)
            if not line.endswith(b"\r\n"):
                if line and b"\n" in line:
                    self.violation(f"a malformed trailer line {line[:80]!r}", head)
                return None
            if line == b"\r\n":
                return body
            name = line.partition(b":")[0]
            if line[:1] in (b" ", b"\t") or b":" not in line or not TOKEN.fullmatch(name):
                # recorded, and the request still answered, so that the
                # client sees whether the proxy closed as it should have
                self.violation(f"a malformed trailer line {line[:80]!r}", head, line.rstrip(b"\r\n"))


# ---------------------------------------------------------------- configs

def route_config(allowed_ports):
    """Outbounds and the suite's route: every name, every address outside
    127.0.0.0/8 and every IPv6 address that is not IPv4-mapped to the
    blackhole (an IPv6 range over the mapped block would cover every IPv4
    address, docs/routing.md); 127.0.0.0/8 at the allowed ports direct;
    anything else to the blackhole."""
    v4 = ipaddress.ip_network("0.0.0.0/0").address_exclude(ipaddress.ip_network("127.0.0.0/8"))
    v6 = ipaddress.ip_network("::/0").address_exclude(ipaddress.ip_network("::ffff:0:0/96"))
    outside = sorted(str(n) for n in v4) + sorted(str(n) for n in v6)
    return ('[[outbound]]\ntag = "direct"\nprotocol = "freedom"\n\n'
            '[[outbound]]\ntag = "block"\nprotocol = "blackhole"\n\n'
            '[route]\ndefault = "block"\n\n'
            '[[route.rule]]\noutbound = "block"\ndomain_keyword = [""]\n'
            f'cidr = [{", ".join(chr(34) + c + chr(34) for c in outside)}]\n\n'
            '[[route.rule]]\noutbound = "direct"\n'
            f'port = [{", ".join(str(p) for p in allowed_ports)}]\n\n')


def policy_config():
    return (f"[policy]\nhandshake_timeout = {HANDSHAKE_TIMEOUT}\n"
            f"idle_timeout = {IDLE_TIMEOUT}\n\n")


SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                   "SUMMARY: UndefinedBehaviorSanitizer", "AddressSanitizer:DEADLYSIGNAL")


def sanitizer_report(log):
    """The sanitizer report in a log (from its first line), or None."""
    for mark in SANITIZER_MARKS:
        i = log.find(mark)
        if i >= 0:
            start = log.rfind("\n", 0, max(0, i - 200)) + 1
            return log[start:start + 6000]
    return None


def crc(text):
    return zlib.crc32(text.encode()) & 0xffffffff


class Timer:
    """Seconds spent per group, for a summary line (pytest -s shows it)."""

    def __init__(self):
        self.t = {}

    def add(self, name, seconds):
        self.t[name] = self.t.get(name, 0) + seconds

    def __str__(self):
        return ", ".join(f"{k} {v:.1f}s" for k, v in self.t.items())
