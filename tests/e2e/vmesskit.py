"""A VMess AEAD client for the end-to-end tests: sealed requests (with
every field settable, so tests can build the requests the inbound must
refuse) and a reader of the server's response and chunks.

Wire format as docs/inbound-vmess.md and src/proto/vmess.h (v2ray-core 4.34
proxy/vmess/aead). The AES blocks come from the libcrypto the proxy links,
through ctypes: the standard library has no AES, and the proxy's own
OpenSSL is on every machine that runs it. The rest is the standard library.
"""
import ctypes
import ctypes.util
import dataclasses
import hashlib
import os
import struct
import time
import zlib

CMD_KEY_SALT = b"c48619fe-8f02-49e0-b9e9-edf763e17e21"
KDF_ROOT = b"VMess AEAD KDF"
SEC_AES_128_GCM, SEC_CHACHA20_POLY1305, SEC_NONE, SEC_ZERO = 3, 4, 5, 6
OPT_CHUNK_STREAM, OPT_CHUNK_MASKING, OPT_GLOBAL_PADDING = 0x01, 0x04, 0x08
TAG_LEN = 16
AUTH_ID_LEN = 16
RESPONSE_LEN = 2 + TAG_LEN + 4 + TAG_LEN  # our server's: V 0 0 0, sealed

# ---------------------------------------------------------------- libcrypto

_lib = ctypes.CDLL(ctypes.util.find_library("crypto") or "libcrypto.so.3")
_lib.EVP_CIPHER_CTX_new.restype = ctypes.c_void_p
_lib.EVP_CIPHER_CTX_free.argtypes = [ctypes.c_void_p]
_lib.EVP_get_cipherbyname.restype = ctypes.c_void_p
_lib.EVP_get_cipherbyname.argtypes = [ctypes.c_char_p]
for _f in ("EVP_EncryptInit_ex", "EVP_DecryptInit_ex"):
    getattr(_lib, _f).argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                  ctypes.c_char_p, ctypes.c_char_p]
for _f in ("EVP_EncryptUpdate", "EVP_DecryptUpdate"):
    getattr(_lib, _f).argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int),
                                  ctypes.c_char_p, ctypes.c_int]
for _f in ("EVP_EncryptFinal_ex", "EVP_DecryptFinal_ex"):
    getattr(_lib, _f).argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
_lib.EVP_CIPHER_CTX_ctrl.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
_lib.EVP_CIPHER_CTX_set_padding.argtypes = [ctypes.c_void_p, ctypes.c_int]
EVP_CTRL_AEAD_GET_TAG, EVP_CTRL_AEAD_SET_TAG = 0x10, 0x11


def _cipher(name, key, iv, data, encrypt, aad=b"", tag=None):
    """One EVP run; for GCM the tag is returned after the output (encrypt)
    or checked (tag given): None when it does not match."""
    ctx = _lib.EVP_CIPHER_CTX_new()
    try:
        init = _lib.EVP_EncryptInit_ex if encrypt else _lib.EVP_DecryptInit_ex
        update = _lib.EVP_EncryptUpdate if encrypt else _lib.EVP_DecryptUpdate
        final = _lib.EVP_EncryptFinal_ex if encrypt else _lib.EVP_DecryptFinal_ex
        if not init(ctx, _lib.EVP_get_cipherbyname(name), None, key, iv):
            raise RuntimeError(f"libcrypto: {name.decode()} init failed")
        _lib.EVP_CIPHER_CTX_set_padding(ctx, 0)
        n = ctypes.c_int(0)
        if aad:
            update(ctx, None, ctypes.byref(n), aad, len(aad))
        out = ctypes.create_string_buffer(len(data) + 32)
        update(ctx, ctypes.addressof(out), ctypes.byref(n), data, len(data))
        total = n.value
        if tag is not None:
            tbuf = ctypes.create_string_buffer(tag, len(tag))
            _lib.EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, len(tag), tbuf)
        if final(ctx, ctypes.addressof(out) + total, ctypes.byref(n)) <= 0:
            if tag is not None:
                return None
            raise RuntimeError(f"libcrypto: {name.decode()} final failed")
        total += n.value
        result = out.raw[:total]
        if encrypt and name.endswith(b"gcm"):
            tbuf = ctypes.create_string_buffer(TAG_LEN)
            _lib.EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, TAG_LEN, tbuf)
            result += tbuf.raw
        return result
    finally:
        _lib.EVP_CIPHER_CTX_free(ctx)


def gcm_seal(key, nonce, data, aad=b""):
    return _cipher(b"aes-128-gcm", key, nonce, data, True, aad)


def gcm_open(key, nonce, sealed, aad=b""):
    """The plaintext, or None when the tag does not match."""
    if len(sealed) < TAG_LEN:
        return None
    return _cipher(b"aes-128-gcm", key, nonce, sealed[:-TAG_LEN], False, aad, sealed[-TAG_LEN:])


def ecb_encrypt(key, block):
    return _cipher(b"aes-128-ecb", key, None, block, True)


def ecb_decrypt(key, block):
    return _cipher(b"aes-128-ecb", key, None, block, False)


# ---------------------------------------------------------------- keys

class _Hmac:
    """HMAC over any hash factory (block 64): VMess's KDF nests HMACs, each
    one the hash of the next."""

    def __init__(self, factory, key):
        key = key.ljust(64, b"\0")
        self.factory, self.outer_key = factory, bytes(k ^ 0x5c for k in key)
        self.inner = factory()
        self.inner.update(bytes(k ^ 0x36 for k in key))

    def update(self, data):
        self.inner.update(data)

    def digest(self):
        outer = self.factory()
        outer.update(self.outer_key)
        outer.update(self.inner.digest())
        return outer.digest()


def kdf(key, *path):
    """VMess AEAD KDF (proxy/vmess/aead/kdf.go): 32 bytes."""
    factory = lambda: _Hmac(hashlib.sha256, KDF_ROOT)  # noqa: E731
    for label in path:
        factory = (lambda inner, label: lambda: _Hmac(inner, label))(factory, label)
    h = factory()
    h.update(key)
    return h.digest()


def cmd_key(uuid):
    return hashlib.md5(uuid + CMD_KEY_SALT).digest()


def auth_id(key, now, rand4):
    plain = struct.pack(">q", now) + rand4
    plain += struct.pack(">I", zlib.crc32(plain) & 0xffffffff)
    return ecb_encrypt(kdf(key, b"AES Auth ID Encryption")[:16], plain)


def auth_id_valid(uuid, data):
    """Whether the first 16 bytes of data are an AuthID of uuid (any time)."""
    if len(data) < AUTH_ID_LEN:
        return False
    plain = ecb_decrypt(kdf(cmd_key(uuid), b"AES Auth ID Encryption")[:16], data[:AUTH_ID_LEN])
    return struct.unpack(">I", plain[12:])[0] == zlib.crc32(plain[:12]) & 0xffffffff


def fnv1a32(data):
    h = 0x811c9dc5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xffffffff
    return h


def _shake_masks(iv):
    """The body's SHAKE128 stream, two bytes at a time."""
    stream, i = hashlib.shake_128(iv).digest(2 * 4096), 0
    while True:
        yield struct.unpack(">H", stream[i:i + 2])[0]
        i += 2


# ---------------------------------------------------------------- requests

@dataclasses.dataclass
class Request:
    """One request's fields (defaults: a valid TCP request over
    aes-128-gcm with chunk masking, no global padding) and its random
    parts, drawn from rng."""
    uuid: bytes
    port: int
    rng: object = None
    now: int = None
    version: int = 1
    sec: int = SEC_AES_128_GCM
    opt: int = OPT_CHUNK_STREAM | OPT_CHUNK_MASKING
    cmd: int = 1
    atyp: int = 1
    addr: bytes = b"\x7f\x00\x00\x01"
    padding: int = 0
    checksum: int = None  # None: the right one
    extra: bytes = b""    # bytes in the header after the checksum

    def __post_init__(self):
        r = self.rng or __import__("random").Random(os.urandom(8))
        self.now = int(time.time()) if self.now is None else self.now
        self.body_key, self.body_iv = r.randbytes(16), r.randbytes(16)
        self.v, self.rand4, self.nonce = r.randrange(256), r.randbytes(4), r.randbytes(8)
        self.pad_bytes = r.randbytes(self.padding)

    def header(self):
        h = (bytes([self.version]) + self.body_iv + self.body_key +
             bytes([self.v, self.opt, self.padding << 4 | self.sec, 0, self.cmd]) +
             struct.pack(">H", self.port) + bytes([self.atyp]) + self.addr + self.pad_bytes)
        return h + struct.pack(">I", fnv1a32(h) if self.checksum is None else self.checksum) + self.extra

    def seal(self):
        """AuthID, the sealed length, the nonce, the sealed header."""
        k = cmd_key(self.uuid)
        aid = auth_id(k, self.now, self.rand4)
        h = self.header()

        def key_iv(kl, il):
            return kdf(k, kl, aid, self.nonce)[:16], kdf(k, il, aid, self.nonce)[:12]
        lk, ln = key_iv(b"VMess Header AEAD Key_Length", b"VMess Header AEAD Nonce_Length")
        hk, hn = key_iv(b"VMess Header AEAD Key", b"VMess Header AEAD Nonce")
        return (aid + gcm_seal(lk, ln, struct.pack(">H", len(h)), aid) + self.nonce +
                gcm_seal(hk, hn, h, aid))

    def chunks(self, *payloads):
        """The body: each payload one chunk (b"": the end chunk)."""
        masks, out = _shake_masks(self.body_iv), b""
        for count, p in enumerate(payloads):
            nonce = struct.pack(">H", count) + self.body_iv[2:12]
            out += struct.pack(">H", (len(p) + TAG_LEN) ^ next(masks))
            out += gcm_seal(self.body_key, nonce, p)
        return out

    def response_keys(self):
        return hashlib.sha256(self.body_key).digest()[:16], hashlib.sha256(self.body_iv).digest()[:16]

    def response(self):
        """The response header our server sends (V, no options, no command):
        deterministic, so it is compared byte for byte."""
        rk, ri = self.response_keys()
        return (gcm_seal(kdf(rk, b"AEAD Resp Header Len Key")[:16],
                         kdf(ri, b"AEAD Resp Header Len IV")[:12], struct.pack(">H", 4)) +
                gcm_seal(kdf(rk, b"AEAD Resp Header Key")[:16],
                         kdf(ri, b"AEAD Resp Header IV")[:12], bytes([self.v, 0, 0, 0])))


def read_response(req, got):
    """What the server sent on req so far: (payload, None), the payloads of
    the whole chunks after its response header (a prefix of the header,
    or a cut chunk, reads as no more), or (payload, what is wrong)."""
    head = req.response()
    if len(got) < len(head):
        return b"", None if head.startswith(got) else "not the response header"
    if got[:len(head)] != head:
        return b"", "not the response header"
    rk, ri = req.response_keys()
    masks, rest, data, count = _shake_masks(ri), got[len(head):], b"", 0
    while len(rest) >= 2:
        size = struct.unpack(">H", rest[:2])[0] ^ next(masks)
        if size < TAG_LEN:
            return data, f"chunk {count}: size {size} shorter than its tag"
        if size == TAG_LEN and len(rest) == 2:
            break  # the end chunk's size; its tag need not follow
        if len(rest) < 2 + size:
            break  # not all here, or cut short by the close
        plain = gcm_open(rk, struct.pack(">H", count) + ri[2:12], rest[2:2 + size])
        if plain is None:
            return data, f"chunk {count} does not open"
        data, rest, count = data + plain, rest[2 + size:], count + 1
        if not plain:
            if rest:
                return data, "bytes after the end chunk"
            break
    return data, None


def response_problem(req, got, payload):
    """None when got is what the server may send on a TCP request before
    it closes: nothing, a prefix of its response header, or the header and
    chunks whose payloads join up to a prefix of payload (an end chunk
    last at most); else what is wrong."""
    data, why = read_response(req, got)
    if why:
        return why
    if not payload.startswith(data):
        return f"the payload came back as {data!r}, not a prefix of {payload!r}"
    return None
