#!/usr/bin/python3
"""Computes the VMess AEAD test vectors of tests/unit/test_vmess.c from the
protocol description alone (v2fly docs/developer/protocols/vmess.md and
v2ray-core 4.34's proxy/vmess/aead), with hashlib, hmac and
python3-cryptography, so they do not come from the C code they check.

    /usr/bin/python3 tools/vmess_vectors.py   # prints the C constants
"""

import hashlib
import hmac
import struct
import zlib

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305


class NestedHash:
    """The hash a level of the KDF sees: HMAC over the level below, which
    bottoms out in SHA-256 (Go's hmac.New(parent.Create, key))."""
    block_size = 64
    digest_size = 32

    def __init__(self, keys, data=b""):
        self.keys = keys  # outermost last
        if keys:
            self.h = hmac.new(keys[-1], digestmod=lambda d=b"": NestedHash(keys[:-1], d))
        else:
            self.h = hashlib.sha256()
        self.h.update(data)

    def update(self, data):
        self.h.update(data)

    def copy(self):
        c = NestedHash.__new__(NestedHash)
        c.keys, c.h = self.keys, self.h.copy()
        return c

    def digest(self):
        return self.h.digest()


def kdf(key, *path):
    return NestedHash([b"VMess AEAD KDF"] + list(path), key).digest()


def cmd_key(uuid):
    return hashlib.md5(uuid + b"c48619fe-8f02-49e0-b9e9-edf763e17e21").digest()


def auth_id(ck, now, rand4):
    p = struct.pack(">q", now) + rand4
    p += struct.pack(">I", zlib.crc32(p))
    k = kdf(ck, b"AES Auth ID Encryption")[:16]
    e = Cipher(algorithms.AES(k), modes.ECB()).encryptor()
    return e.update(p) + e.finalize()


def fnv1a32(b):
    h = 2166136261
    for x in b:
        h = ((h ^ x) * 16777619) & 0xffffffff
    return h


def shake(iv, n):
    return hashlib.shake_128(iv).digest(n)


def chacha_key(k):
    a = hashlib.md5(k).digest()
    return a + hashlib.md5(a).digest()


def c_array(name, b):
    out = f"static const uint8_t {name}[{len(b)}] = {{"
    for i, x in enumerate(b):
        out += ("\n\t" if i % 12 == 0 else " ") + f"0x{x:02x},"
    return out + "\n};"


# Fixed inputs (the C test builds the same vmess_client_random).
UUID = bytes.fromhex("6c1b0e6a6e3d4c1e9d8a1a2b3c4d5e6f")
NOW = 1700000000
BODY_KEY = bytes(range(0x10, 0x20))
BODY_IV = bytes(range(0x20, 0x30))
AUTH_V = 0x5a
PAD_LEN = 5
PADDING = bytes(range(0x40, 0x4f))
AUTH_RAND = bytes([1, 2, 3, 4])
NONCE = bytes(range(0x50, 0x58))
PAD_SEED = bytes(range(0x60, 0x80))


def request(sec, opt, cmd, port, atyp, addr):
    ck = cmd_key(UUID)
    h = bytes([1]) + BODY_IV + BODY_KEY + bytes([AUTH_V, opt, PAD_LEN << 4 | sec, 0, cmd])
    h += struct.pack(">H", port) + bytes([atyp]) + addr + PADDING[:PAD_LEN]
    h += struct.pack(">I", fnv1a32(h))
    aid = auth_id(ck, NOW, AUTH_RAND)
    lk = kdf(ck, b"VMess Header AEAD Key_Length", aid, NONCE)[:16]
    ln = kdf(ck, b"VMess Header AEAD Nonce_Length", aid, NONCE)[:12]
    hk = kdf(ck, b"VMess Header AEAD Key", aid, NONCE)[:16]
    hn = kdf(ck, b"VMess Header AEAD Nonce", aid, NONCE)[:12]
    return (aid + AESGCM(lk).encrypt(ln, struct.pack(">H", len(h)), aid) + NONCE +
            AESGCM(hk).encrypt(hn, h, aid))


def response(v, opt):
    rk = hashlib.sha256(BODY_KEY).digest()[:16]
    ri = hashlib.sha256(BODY_IV).digest()[:16]
    lk = kdf(rk, b"AEAD Resp Header Len Key")[:16]
    ln = kdf(ri, b"AEAD Resp Header Len IV")[:12]
    pk = kdf(rk, b"AEAD Resp Header Key")[:16]
    pn = kdf(ri, b"AEAD Resp Header IV")[:12]
    plain = bytes([v, opt, 0, 0])
    return (AESGCM(lk).encrypt(ln, struct.pack(">H", len(plain)), None) +
            AESGCM(pk).encrypt(pn, plain, None))


def chunks(sec, masking, padding, payloads, key=BODY_KEY, iv=BODY_IV):
    """The body a writer with key / iv (the request's BODY_KEY / BODY_IV, or
    the server's RespKey / RespIV) sends: each payload one chunk, the
    padding bytes from ChaCha20(PAD_SEED, zero IV)."""
    BODY_KEY, BODY_IV = key, iv
    stream = shake(BODY_IV, 4 * len(payloads))
    pos = 0
    pad_ks = Cipher(algorithms.ChaCha20(PAD_SEED, bytes(16)), None).encryptor()
    out = b""
    for count, p in enumerate(payloads):
        pad = 0
        if padding:
            pad = struct.unpack(">H", stream[pos:pos + 2])[0] % 64
            pos += 2
        nonce = struct.pack(">H", count) + BODY_IV[2:12]
        if sec == 3:
            sealed = AESGCM(BODY_KEY).encrypt(nonce, p, None)
        elif sec == 4:
            sealed = ChaCha20Poly1305(chacha_key(BODY_KEY)).encrypt(nonce, p, None)
        else:
            sealed = p
        size = len(sealed) + pad
        if masking:
            size ^= struct.unpack(">H", stream[pos:pos + 2])[0]
            pos += 2
        out += struct.pack(">H", size) + sealed + pad_ks.update(bytes(pad))
    return out


# v2ray-core's own KDF vector (proxy/vmess/aead/kdf_test.go, TestKDFValue)
V2RAY_KDF = "53e9d7e1bd7bd25022b71ead07d8a596efc8a845c7888652fd684b4903dc8892"


def main():
    assert kdf(b"Demo Key for KDF Value Test", b"Demo Path for KDF Value Test",
               b"Demo Path for KDF Value Test2",
               b"Demo Path for KDF Value Test3").hex() == V2RAY_KDF
    ck = cmd_key(UUID)
    print(c_array("CMD_KEY", ck))
    print(c_array("KDF_AUTH_ID_KEY", kdf(ck, b"AES Auth ID Encryption")))
    print(c_array("KDF_THREE", kdf(ck, b"VMess Header AEAD Key", AUTH_RAND * 4, NONCE)))
    print(c_array("AUTH_ID", auth_id(ck, NOW, AUTH_RAND)))
    print(c_array("SHAKE_IV", shake(BODY_IV, 400)))
    # TCP to 127.0.0.1:8080 with aes-128-gcm and options S|M|P
    print(c_array("REQUEST_AES_V4", request(3, 0x0d, 1, 8080, 1, bytes([127, 0, 0, 1]))))
    # UDP to example.com:53 with none and options S|M
    print(c_array("REQUEST_NONE_DOMAIN",
                  request(5, 0x05, 2, 53, 2, bytes([11]) + b"example.com")))
    print(c_array("RESPONSE", response(AUTH_V, 0)))
    body = [b"hello", bytes(range(256)) * 3, b""]  # two chunks, then the end one
    print(c_array("CHUNKS_AES", chunks(3, True, True, body)))
    print(c_array("CHUNKS_CHACHA", chunks(4, True, True, body)))
    print(c_array("CHUNKS_NONE", chunks(5, True, False, body)))
    # The server side (tests/unit/test_vmess_server.c reads the requests
    # and RESPONSE above too): TCP to [::1]:443 with chacha20-poly1305 and
    # S|M|P; the legacy AES-128-CFB security (1), which a server refuses;
    # and the body the server sends back, keyed by RespKey / RespIV.
    print(c_array("REQUEST_CHACHA_V6", request(4, 0x0d, 1, 443, 3, bytes(15) + b"\x01")))
    print(c_array("REQUEST_LEGACY_SEC", request(1, 0x0d, 1, 8080, 1, bytes([127, 0, 0, 1]))))
    rk = hashlib.sha256(BODY_KEY).digest()[:16]
    ri = hashlib.sha256(BODY_IV).digest()[:16]
    print(c_array("CHUNKS_RESP_AES", chunks(3, True, True, body, rk, ri)))


if __name__ == "__main__":
    main()
