"""The failover recipe of seed 003 with the member types built today: a
Trojan-over-TLS member and a VLESS-over-WebSocket-and-TLS member, each an
etemenanki-app server instance, behind a failover balancer."""
import socket
import time
from pathlib import Path

from proxykit import (EchoServer, UdpEcho, big_chunks, big_sha256, echoed_sha256, recv_exact,
                      socks5_connect, udp_echoed, Sha256Sink)

UUID = "11111111-2222-3333-4444-555555555555"


def trojan_server(cert, key):
    return f"""
[[inbound]]
tag = "trojan-in"
protocol = "trojan"
port = {{port0}}
[inbound.stream]
network = "tls"
[inbound.stream.tls]
certificate = "{cert}"
key = "{key}"
[[inbound.settings.users]]
password = "correct horse"

[[outbound]]
tag = "direct"
protocol = "freedom"
"""


def vless_server(cert, key):
    return f"""
[[inbound]]
tag = "vless-in"
protocol = "vless"
port = {{port0}}
[inbound.stream]
network = "ws"
security = "tls"
[inbound.stream.ws]
path = "/vless"
[inbound.stream.tls]
certificate = "{cert}"
key = "{key}"
[[inbound.settings.users]]
id = "{UUID}"

[[outbound]]
tag = "direct"
protocol = "freedom"
"""


def client(cert, trojan_port, vless_port):
    """The recipe's shape: socks in, direct first, two members, failover."""
    return f"""
[log]
level = "info"

[[inbound]]
tag = "socks-in"
protocol = "socks"
port = {{port0}}

[[outbound]]
tag = "direct"
protocol = "freedom"

[[outbound]]
tag = "primary"
protocol = "trojan"
server = "127.0.0.1"
port = {trojan_port}
[outbound.stream]
network = "tls"
[outbound.stream.tls]
server_name = "proxy.test"
ca = "{cert}"
[outbound.settings]
password = "correct horse"

[[outbound]]
tag = "secondary"
protocol = "vless"
server = "127.0.0.1"
port = {vless_port}
[outbound.stream]
network = "ws"
security = "tls"
[outbound.stream.ws]
path = "/vless"
[outbound.stream.tls]
server_name = "proxy.test"
ca = "{cert}"
[outbound.settings]
id = "{UUID}"

[[balancer]]
tag = "upstream"
outbounds = ["primary", "secondary"]
strategy = "failover"
probe_interval = 1
probe_timeout = 1

[route]
default = "upstream"
"""


TEN_MIB = 10 << 20


def ten_mib_echoed(proxy_port, echo):
    """10 MiB to the echo server and back, read while it is written: a
    WebSocket hop carries no half-close (a FIN would end both ways), so
    the check cannot wait for the sink's answer after our FIN."""
    return echoed_sha256(proxy_port, echo, TEN_MIB, 20)


def ten_mib_through(proxy_port, sink):
    """10 MiB through the proxy to the sink; the sink's hex sha256 of them."""
    with socks5_connect(proxy_port, "127.0.0.1", sink.port) as s:
        for chunk in big_chunks(TEN_MIB):
            s.sendall(chunk)
        s.shutdown(socket.SHUT_WR)
        s.settimeout(20)
        return recv_exact(s, 64).decode()


def wait_for(predicate, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_the_recipe_fails_over_from_trojan_tls_to_vless_ws_tls(procs, pki):
    c, k = pki
    trojan = procs(trojan_server(c, k), log_level="debug")
    vless = procs(vless_server(c, k), log_level="debug")
    front = procs(client(c, trojan.port, vless.port), log_level="debug")
    sink = Sha256Sink()
    echo = EchoServer()
    try:
        # both members healthy: failover takes the primary (trojan over tls)
        assert ten_mib_through(front.port, sink) == big_sha256(TEN_MIB)
        # the primary stops answering: within a probe interval, flows move on
        trojan.stop()
        assert wait_for(lambda: "balancer member primary is now down" in front.log(), 5), \
            front.log()
        assert ten_mib_echoed(front.port, echo) == big_sha256(TEN_MIB)
        with socks5_connect(front.port, "127.0.0.1", echo.port) as s:
            s.sendall(b"over vless")
            assert recv_exact(s, 10) == b"over vless"
        assert front.log().count("balancer member primary is now down") == 1
    finally:
        sink.close()
        echo.close()


def test_a_failed_dial_moves_to_the_next_member_with_retry(procs, pki):
    c, k = pki
    vless = procs(vless_server(c, k), log_level="debug")
    s = socket.socket()  # a closed port stands for a dead primary
    s.bind(("127.0.0.1", 0))
    closed_port = s.getsockname()[1]
    s.close()
    text = client(c, closed_port, vless.port).replace(
        "probe_timeout = 1\n", "probe_timeout = 1\nretry = 1\nprobe_interval = 30\n", 1)
    text = text.replace("probe_interval = 1\n", "", 1)
    front = procs(text)
    echo = EchoServer()
    try:
        # the first flow may reach the primary before its first probe ends:
        # with retry = 1 the client never sees that refusal
        for i in range(3):
            with socks5_connect(front.port, "127.0.0.1", echo.port) as sock:
                sock.sendall(b"hello %d" % i)
                assert recv_exact(sock, 7) == b"hello %d" % i
    finally:
        echo.close()


# ------------------------------------------- examples/failover.toml as written

RECIPE = Path(__file__).resolve().parents[2] / "examples" / "failover.toml"
VMESS_UUID = "11111111-2222-3333-4444-666666666666"


def vmess_grpc_server(cert, key):
    return f"""
[[inbound]]
tag = "vmess-in"
protocol = "vmess"
port = {{port0}}
[inbound.stream]
network = "grpc"
security = "tls"
[inbound.stream.grpc]
service_name = "tunnel"
[inbound.stream.tls]
certificate = "{cert}"
key = "{key}"
[[inbound.settings.users]]
id = "{VMESS_UUID}"

[[outbound]]
tag = "direct"
protocol = "freedom"
"""


def recipe_for(cert, ports):
    """examples/failover.toml with only what a test must change: the
    servers are our three on loopback, whose certificate the client trusts
    (the CA line), the SOCKS port is free, and probes run every second."""
    text = RECIPE.read_text()
    for n, name in enumerate(["proxy1", "proxy2", "proxy3"]):
        text = text.replace(f'server = "{name}.example.com"\nport = 443',
                            f'server = "127.0.0.1"\nport = {ports[n]}')
        text = text.replace(f'server_name = "{name}.example.com"',
                            f'server_name = "proxy.test"\nca = "{cert}"')
    text = text.replace("port = 1080", "port = {port0}")
    text = text.replace('password = "replace-with-a-long-random-password"',
                        'password = "correct horse"')
    text = text.replace("probe_interval = 15", "probe_interval = 1")
    text = text.replace("probe_timeout = 5", "probe_timeout = 1")
    # the recipe sends private addresses direct: the echo servers are on
    # 127.0.0.1, so that rule is the one line taken out
    text = text.replace('"127.0.0.0/8", ', "")
    assert "example.com" not in text and "{port0}" in text
    return text


def echo_once(proxy_port, echo, payload):
    with socks5_connect(proxy_port, "127.0.0.1", echo.port) as s:
        s.sendall(payload)
        assert recv_exact(s, len(payload)) == payload


INBOUND_OF = ["trojan-in", "vless-in", "vmess-in"]


def flows_seen(server, n, before):
    """The tcp and udp flows server n routed since its log was `before`
    long: {"tcp", "udp"} when both came through it."""
    log = server.log()[before:]
    return {net for net in ("tcp", "udp")
            if f"route: {net} flow to " in log and f"from inbound {INBOUND_OF[n]} takes" in log}


def test_the_seed_recipe_runs_as_written_through_each_member_in_order(procs, pki):
    """Issue 17: examples/failover.toml starts and carries TCP and UDP
    through each member (trojan+tls, vless+ws+tls, vmess+grpc+tls, each one
    of our servers), in the failover order, as the members before it stop."""
    c, k = pki
    servers = [procs(trojan_server(c, k), log_level="debug"),
               procs(vless_server(c, k), log_level="debug"),
               procs(vmess_grpc_server(c, k), log_level="debug")]
    front = procs(recipe_for(c, [s.port for s in servers]), log_level="debug")
    echo = EchoServer()
    udp = UdpEcho()
    try:
        for n, name in enumerate(["primary", "secondary", "tertiary"]):
            marks = [len(s.log()) for s in servers]
            echo_once(front.port, echo, b"through %s" % name.encode())
            assert ten_mib_echoed(front.port, echo) == big_sha256(TEN_MIB)
            udp_echoed(front.port, udp, front.log, [1, 100, 1400, 8000])
            # this member's server carried both, the ones after it nothing
            for m, s in enumerate(servers[n:], start=n):
                assert flows_seen(s, m, marks[m]) == ({"tcp", "udp"} if m == n else set()), \
                    (name, m, s.log()[marks[m]:])
            if n < 2:
                servers[n].stop()
                assert wait_for(lambda: f"balancer member {name} is now down" in front.log(),
                                5), front.log()
    finally:
        echo.close()
        udp.close()
