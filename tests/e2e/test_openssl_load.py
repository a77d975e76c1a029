"""OpenSSL is opened on first use (src/crypto/ossl.h): a config without
TLS or ciphers never maps libssl or libcrypto; one with a TLS inbound maps
them and serves TLS through them."""
import ssl

from proxykit import connect, socks5_connect


def mapped(pid, name):
    with open(f"/proc/{pid}/maps") as f:
        return any(name in line for line in f)


def test_a_socks_to_freedom_process_maps_no_openssl(start_proxy, echo):
    p = start_proxy("""
[[inbound]]
tag = "in"
protocol = "socks"
listen = "127.0.0.1"
port = {port0}
[[outbound]]
tag = "direct"
protocol = "freedom"
""")
    s = socks5_connect(p.port, "127.0.0.1", echo.port)
    s.sendall(b"hello")
    assert s.recv(5) == b"hello"
    s.close()
    assert not mapped(p.proc.pid, "libcrypto.so")
    assert not mapped(p.proc.pid, "libssl.so")


def test_a_tls_inbound_opens_openssl_and_serves_through_it(start_proxy, echo, pki):
    cert, key = pki
    p = start_proxy(f"""
[[inbound]]
tag = "in"
protocol = "socks"
listen = "127.0.0.1"
port = {{port0}}
[inbound.stream]
network = "tcp"
security = "tls"
[inbound.stream.tls]
certificate = "{cert}"
key = "{key}"
[[outbound]]
tag = "direct"
protocol = "freedom"
""")
    assert mapped(p.proc.pid, "libssl.so")
    assert mapped(p.proc.pid, "libcrypto.so")
    ctx = ssl.create_default_context(cafile=str(cert))
    with ctx.wrap_socket(connect(p.port), server_hostname="proxy.test") as t:
        t.sendall(b"\x05\x01\x00")
        assert t.recv(2) == b"\x05\x00"
        t.sendall(b"\x05\x01\x00\x01\x7f\x00\x00\x01" + echo.port.to_bytes(2, "big"))
        assert t.recv(10)[:2] == b"\x05\x00"
        t.sendall(b"through TLS")
        assert t.recv(11) == b"through TLS"
