"""Plain proxy chains at splice speed (issue 21): a VLESS or Trojan chain
without TLS, ours to ours,

    app (this test) -> socks inbound | vless/trojan outbound -> vless/trojan inbound | freedom -> echo

carries 16 MiB of random bytes full duplex, compared byte for byte. Past
the framing (the request, VLESS's response header) both hops are plain TCP,
so each process hands the flow to splice(2): while the flow is open each
holds the splicer's two pipes, four descriptors more than before it. Each
side's admin API then counts exactly what the app sent and got back,
across the hand-off; the server's flow has a user, which is spliced too.

Every process runs on 127.0.0.1 with configs written to tmp_path; the
echo server runs in a thread on 127.0.0.1.
"""
import os
import socket
import threading
import time

import pytest

from apikit import API_TABLE, Api
from proxykit import LOOPBACK, Proxy, free_port, socks5_connect, stop_cleanly, wait_closed

UUID = "6c1b0e6a-6e3d-4c1e-9d8a-1a2b3c4d5e6f"
PASSWORD = "correct horse battery staple"
PAYLOAD = 16 << 20
CREDENTIAL = {"vless": ("id", UUID), "trojan": ("password", PASSWORD)}


@pytest.fixture
def procs(app, tmp_path):
    started = []

    def _start(text):
        p = Proxy(app, tmp_path, text, 1, extra={"api": free_port()}, log_level="debug")
        started.append(p)
        p.start()
        return Api(p)

    yield _start
    stop_cleanly(started, "etemenanki-app")


def server_config(protocol):
    key, value = CREDENTIAL[protocol]
    return (f'[[inbound]]\ntag = "in"\nprotocol = "{protocol}"\nlisten = "127.0.0.1"\n'
            f'port = {{port0}}\n[[inbound.settings.users]]\nname = "u"\n{key} = "{value}"\n\n'
            '[[outbound]]\ntag = "direct"\nprotocol = "freedom"\n' + API_TABLE)


def client_config(protocol, server_port):
    key, value = CREDENTIAL[protocol]
    return ('[[inbound]]\ntag = "app"\nprotocol = "socks"\nlisten = "127.0.0.1"\n'
            f'port = {{port0}}\n\n[[outbound]]\ntag = "up"\nprotocol = "{protocol}"\n'
            f'server = "127.0.0.1"\nport = {server_port}\n[outbound.settings]\n'
            f'{key} = "{value}"\n' + API_TABLE)


def pipes(pid):
    """How many of the process's descriptors are pipes."""
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            n += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("pipe:")
        except OSError:
            pass  # closed meanwhile
    return n


def wait_for(fetch, ok, timeout=3.0):
    deadline = time.monotonic() + timeout
    while True:
        got = fetch()
        if ok(got) or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def logs(*apis):
    return "\n".join(f"--- {a.proxy.cfg_path.name}:\n{a.proxy.log()[-4000:]}" for a in apis)


@pytest.mark.parametrize("protocol", ["vless", "trojan"])
def test_a_plain_chain_splices_both_hops_and_counts_exactly(procs, echo, protocol):
    server = procs(server_config(protocol))
    client = procs(client_config(protocol, server.socks_port))
    pids = [client.proxy.proc.pid, server.proxy.proc.pid]
    before = [pipes(p) for p in pids]
    data = os.urandom(PAYLOAD)
    s = socks5_connect(client.socks_port, LOOPBACK, echo.port, timeout=20)
    with s:
        s.settimeout(20)
        sender = threading.Thread(target=s.sendall, args=(data,), daemon=True)
        sender.start()
        got = bytearray()
        while len(got) < PAYLOAD:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            got += chunk
        sender.join(20)
        assert len(got) == PAYLOAD, f"EOF after {len(got)} bytes\n{logs(client, server)}"
        if got != data:
            first = next(i for i in range(PAYLOAD) if got[i] != data[i])
            raise AssertionError(f"the echo differs from byte {first} on\n{logs(client, server)}")
        # the flow is open and past RELAY_SPLICE_AFTER on both hops: each
        # process holds its splicer's two pipes
        during = [pipes(p) for p in pids]
        assert [d - b for d, b in zip(during, before)] == [4, 4], \
            (before, during, logs(client, server))
        s.shutdown(socket.SHUT_WR)
        assert wait_closed(s, 5.0) is not None, logs(client, server)
    for api, chain, user in ((client, "up", ""), (server, "direct", "u")):
        ended = wait_for(lambda: api.get("/connections?closed")["connections"],
                         lambda c: len(c) >= 1)
        assert len(ended) == 1, ended
        (f,) = ended
        assert (f["upload"], f["download"]) == (PAYLOAD, PAYLOAD), f
        assert f["chains"] == [chain] and f["why"] == "closed", f
        assert f["metadata"]["inboundUser"] == user, f
        assert (f["metadata"]["destinationIP"], f["metadata"]["destinationPort"]) == \
            (LOOPBACK, str(echo.port)), f
    # the pipes went with the flow
    assert wait_for(lambda: [pipes(p) for p in pids], lambda n: n == before) == before
    assert server.get("/users/u")["upload"] == PAYLOAD
