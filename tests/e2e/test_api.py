"""The admin API on [api] listen (docs/api.md), driven as a Clash dashboard
(yacd, metacubexd, zashboard) drives it: REST with urllib, the streams over
WebSocket with python3-websockets, the secret as a Bearer header and as
?token= on a WebSocket, CORS, the config's reload through PUT /configs, the
log level through PATCH /configs seen on the /logs stream, balancers and
delay tests, the error answers, and a flood of idle connections that stops
neither a proxied flow nor a dashboard's next call.

Run alone:

    ETM_APP=build/src/etemenanki-app /usr/bin/python3 -m pytest -q tests/e2e/test_api.py
"""
import asyncio
import json
import os
import re
import socket
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone

import pytest
import websockets
from prometheus_client.parser import text_string_to_metric_families

from apikit import SERVING, Api
from proxykit import EchoServer, LOOPBACK, Proxy, free_port, recv_exact, socks5_connect, \
    stop_cleanly

CORS = {
    "access-control-allow-origin": "*",
    "access-control-allow-methods": "GET, POST, PUT, PATCH, DELETE",
    "access-control-allow-headers": "Authorization, Content-Type",
}


def config(echo_port=1, secret=None, rules="", api_listen="127.0.0.1:{api}"):
    """A SOCKS inbound ({port0}), a direct outbound (the default route), a
    blackhole, two SOCKS outbounds in a failover balancer (the first to a
    port that accepts, the second to one that refuses) and the API."""
    dead = free_port()
    text = (
        '[[inbound]]\ntag = "socks"\nprotocol = "socks"\nlisten = "127.0.0.1"\nport = {port0}\n'
        '\n[[outbound]]\ntag = "direct"\nprotocol = "freedom"\n'
        '\n[[outbound]]\ntag = "block"\nprotocol = "blackhole"\n'
        f'\n[[outbound]]\ntag = "up"\nprotocol = "socks"\nserver = "127.0.0.1"\nport = {echo_port}\n'
        f'\n[[outbound]]\ntag = "down"\nprotocol = "socks"\nserver = "127.0.0.1"\nport = {dead}\n'
        '\n[[balancer]]\ntag = "fo"\noutbounds = ["up", "down"]\nprobe_interval = 1\n'
        '\n[route]\ndefault = "direct"\n'
        + rules
        + f'\n[api]\nlisten = "{api_listen}"\n'
    )
    if secret is not None:
        text += f'secret = "{secret}"\n'
    return text


@pytest.fixture
def echo():
    s = EchoServer()
    yield s
    s.close()


@pytest.fixture
def api(app, tmp_path):
    started = []

    def _start(text, secret=None, **kw):
        p = Proxy(app, tmp_path, text, 1, extra={"api": free_port()}, **kw)
        started.append(p)
        return Api(p.start(), secret)

    yield _start
    stop_cleanly(started, "etemenanki-app")


def arun(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


# ---------------------------------------------------------------- the secret

def test_no_secret_on_loopback_and_cors(api, echo):
    a = api(config(echo.port))
    status, headers, body = a.call("GET", "/version", token=None)
    assert status == 200
    assert body == {"version": body["version"], "meta": False}
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", body["version"])
    for k, v in CORS.items():
        assert headers[k] == v
    assert a.get("/", token=None) == {"hello": "etemenanki"}
    # a browser's preflight: no credentials, every CORS header
    status, headers, body = a.call(
        "OPTIONS", "/connections", token=None,
        headers={"Origin": "http://yacd.example", "Access-Control-Request-Method": "DELETE",
                 "Access-Control-Request-Headers": "authorization"})
    assert status == 204 and body is None
    for k, v in CORS.items():
        assert headers[k] == v


def test_not_loopback_without_secret_is_refused(run, tmp_path):
    port = free_port()
    cfg = tmp_path / "c.toml"
    cfg.write_text(config(api_listen=f"0.0.0.0:{port}").replace("{port0}", str(free_port())))
    want = f"api: listen address 0.0.0.0:{port} is not loopback: set [api] secret\n"
    r = run("-c", str(cfg), "--test")
    assert r.returncode == 1
    assert r.stderr == "configuration invalid: " + want
    r = run("-c", str(cfg))
    assert r.returncode == 78  # EX_CONFIG: a start refuses the file (docs/cli.md)
    assert r.stderr.endswith("failed to start: " + want), r.stderr
    # with a secret it is allowed
    cfg.write_text(config(api_listen=f"0.0.0.0:{port}", secret="k")
                   .replace("{port0}", str(free_port())))
    r = run("-c", str(cfg), "--test")
    assert r.returncode == 0 and r.stdout == "Configuration OK.\n", r.stderr


def test_an_address_in_use_fails_the_start(run, tmp_path):
    taken = socket.socket()
    taken.bind((LOOPBACK, 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        cfg = tmp_path / "c.toml"
        cfg.write_text(config(api_listen=f"127.0.0.1:{port}").replace("{port0}", str(free_port())))
        r = run("-c", str(cfg))
        assert r.returncode == 1
        assert r.stderr.endswith(f"failed to start: api: cannot listen on 127.0.0.1:{port}: "
                                 "address already in use\n"), r.stderr
    finally:
        taken.close()


def test_secret(api, echo):
    a = api(config(echo.port, secret="s3cret"), secret="s3cret")
    unauthorized = {"message": "Unauthorized"}
    for token in (None, "wrong", "s3cre", "s3cret2"):
        status, headers, body = a.call("GET", "/version", token=token)
        assert (status, body) == (401, unauthorized), token
        assert headers["access-control-allow-origin"] == "*"
    assert a.call("GET", "/version?token=s3cret", token=None)[0] == 401
    assert a.get("/version")["meta"] is False

    async def streams():
        # the token in the query, as a browser's WebSocket sends it
        async with a.ws("/traffic") as w:
            assert set(json.loads(await w.recv())) == {"up", "down"}
        for path in ("/traffic", "/traffic?token=wrong"):
            with pytest.raises(websockets.exceptions.InvalidStatusCode) as e:
                async with websockets.connect(f"ws://{LOOPBACK}:{a.port}{path}",
                                              open_timeout=5):
                    pass
            assert e.value.status_code == 401
    arun(streams())


def test_a_reload_rotates_the_secret_and_keeps_the_listen(api, echo):
    a = api(config(echo.port, secret="one", api_listen="0.0.0.0:{api}"), secret="one")
    cfg = a.proxy.cfg_path
    text = cfg.read_text()
    cfg.write_text(text.replace('secret = "one"', 'secret = "two"'))
    assert a.call("PUT", "/configs?force=true", {"path": "", "payload": ""})[0] == 204
    assert a.call("GET", "/version", token="one")[0] == 401
    assert a.call("GET", "/version", token="two")[0] == 200
    # dropping the secret with a move to loopback: the move waits for the
    # next start, and the secret stays on the address still served
    cfg.write_text(text.replace('secret = "one"\n', "")
                   .replace(f'listen = "0.0.0.0:{a.port}"', f'listen = "127.0.0.1:{a.port}"'))
    assert a.call("PUT", "/configs?force=true", token="two")[0] == 204
    log = a.proxy.log()
    assert (f"WARN  app: reload: [api] listen changed from 0.0.0.0:{a.port} to "
            f"127.0.0.1:{a.port}; the API stays on 0.0.0.0:{a.port} until the next start") in log
    assert (f"WARN  app: reload: [api] secret removed while the API listens on 0.0.0.0:{a.port}, "
            "which is not loopback; the old secret stays until the next start") in log
    assert a.call("GET", "/version", token=None)[0] == 401
    assert a.call("GET", "/version", token="two")[0] == 200


# ---------------------------------------------------------------- /configs

def test_configs_and_the_log_level(api, echo):
    a = api(config(echo.port))
    c = a.get("/configs")
    assert c == {"port": 0, "socks-port": a.socks_port, "mixed-port": 0, "redir-port": 0,
                 "tproxy-port": 0, "allow-lan": False, "mode": "rule", "log-level": "info",
                 "ipv6": True}

    async def logs():
        async with a.ws("/logs?level=debug") as w:
            status, _, _ = await asyncio.to_thread(a.call, "PATCH", "/configs",
                                                   {"log-level": "debug"})
            assert status == 204
            # the next request is logged at debug, and streamed
            assert (await asyncio.to_thread(a.get, "/configs"))["log-level"] == "debug"
            deadline = time.monotonic() + 5
            while True:
                m = json.loads(await asyncio.wait_for(w.recv(), 5))
                assert set(m) == {"type", "payload"}
                if m == {"type": "debug", "payload": "app: api: GET /configs: 200"}:
                    return
                assert time.monotonic() < deadline, m
    arun(logs())

    # a subscriber at info does not see debug lines
    async def info_only():
        async with a.ws("/logs") as w:
            await asyncio.to_thread(a.get, "/version")
            end = time.monotonic() + 1
            while time.monotonic() < end:
                try:
                    m = json.loads(await asyncio.wait_for(w.recv(), end - time.monotonic()))
                except asyncio.TimeoutError:
                    break
                assert m["type"] != "debug", m
    arun(info_only())
    status, _, body = a.call("PATCH", "/configs", {"log-level": "loud"})
    assert (status, body) == (400, {"message":
                                    "log-level must be silent, error, warn, warning, info, debug or trace"})
    assert a.call("PATCH", "/configs", {"log-level": "warning", "mode": "global"})[0] == 204
    assert a.get("/configs")["log-level"] == "warning"


def test_put_configs_reloads(api, echo):
    a = api(config(echo.port))
    assert a.get("/rules") == {"rules": [{"type": "Match", "payload": "", "proxy": "direct"}]}
    cfg = a.proxy.cfg_path
    text = cfg.read_text()
    cfg.write_text(text.replace('[route]\ndefault = "direct"\n',
                                '[route]\ndefault = "direct"\n\n[[route.rule]]\n'
                                'domain_suffix = ["example.com"]\noutbound = "block"\n'))
    status, _, body = a.call("PUT", "/configs?force=true", {"path": "", "payload": ""})
    assert (status, body) == (204, None)
    assert a.get("/rules") == {"rules": [
        {"type": "DomainSuffix", "payload": "example.com", "proxy": "block"},
        {"type": "Match", "payload": "", "proxy": "direct"}]}
    # a config that does not load: 400 with the reloader's message, and
    # the running one stays
    cfg.write_text(text + '\n[metrics]\nlisten = "localhost:9100"\n')
    status, _, body = a.call("PUT", "/configs?force=true", {"path": "", "payload": ""})
    assert status == 400
    assert body == {"message": '[metrics] listen "localhost:9100" is not an IP address and '
                               'port (like "127.0.0.1:9100")'}
    assert len(a.get("/rules")["rules"]) == 2


# ---------------------------------------------------------------- /proxies

def test_proxies_with_a_balancer(api, echo):
    a = api(config(echo.port))
    # the probes mark "down" down within a few seconds (probe_interval 1)
    deadline = time.monotonic() + 10
    while True:
        p = a.get("/proxies")["proxies"]
        if p["fo"]["now"] == "up" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert set(p) == {"direct", "block", "up", "down", "fo"}
    assert p["direct"] == {"name": "direct", "type": "Direct", "history": [], "udp": True}
    assert p["block"]["type"] == "Reject"
    assert p["up"]["type"] == "Socks5" and p["up"]["name"] == "up"
    for h in p["up"]["history"]:  # empty until the tracker reports probes
        assert set(h) == {"time", "delay"}
    fo = p["fo"]
    assert fo["type"] == "Fallback" and fo["all"] == ["up", "down"] and fo["now"] == "up"
    assert a.get("/proxies/fo") == fo
    assert a.get("/proxies/up")["name"] == "up"

    delay = a.get("/proxies/up/delay?url=http%3A%2F%2Fwww.gstatic.com%2Fgenerate_204"
                  "&timeout=2000")
    assert set(delay) == {"delay"} and 1 <= delay["delay"] < 2000
    assert set(a.get("/proxies/fo/delay?timeout=2000")) == {"delay"}
    status, _, body = a.call("GET", "/proxies/down/delay?timeout=2000")
    assert (status, body) == (503, {"message": "An error occurred in the delay test"})
    status, _, body = a.call("GET", f"/proxies/direct/delay?url=http://127.0.0.1:{echo.port}/"
                                    "&timeout=2000")
    assert status == 200 and body["delay"] >= 1
    status, _, body = a.call("GET", "/proxies/block/delay?timeout=100")
    assert (status, body) == (503, {"message": "An error occurred in the delay test"})
    for path in ("/proxies/nope", "/proxies/nope/delay?timeout=100"):
        assert a.call("GET", path)[::2] == (404, {"message": "resource not found"})


def test_delay_timeout_and_a_client_gone_mid_test(api, echo):
    # a listener whose accept queue is full: the kernel drops further SYNs,
    # so a connect to it hangs
    full = socket.socket()
    full.bind((LOOPBACK, 0))
    full.listen(0)
    port = full.getsockname()[1]
    fillers = []
    try:
        for _ in range(4):
            f = socket.socket()
            f.setblocking(False)
            f.connect_ex((LOOPBACK, port))
            fillers.append(f)
        time.sleep(0.2)
        a = api(config(port))
        t0 = time.monotonic()
        status, _, body = a.call("GET", "/proxies/up/delay?timeout=500")
        assert (status, body) == (504, {"message": "Timeout"})
        assert 0.4 < time.monotonic() - t0 < 3
        # sixteen tests at once, and the seventeenth is refused
        waiting = []
        for _ in range(16):
            w = socket.create_connection((LOOPBACK, a.port), timeout=5)
            w.sendall(b"GET /proxies/up/delay?timeout=1500 HTTP/1.1\r\nHost: x\r\n\r\n")
            waiting.append(w)
        time.sleep(0.3)
        status, _, body = a.call("GET", "/proxies/up/delay?timeout=1500")
        assert (status, body) == (503, {"message": "too many delay tests at once"})
        for w in waiting:
            assert w.recv(4096).startswith(b"HTTP/1.1 504 Gateway Timeout\r\n")
            w.close()
        # a client that leaves while its test runs: the test is dropped,
        # the server goes on
        for _ in range(20):
            s = socket.create_connection((LOOPBACK, a.port), timeout=5)
            s.sendall(b"GET /proxies/up/delay?timeout=2000 HTTP/1.1\r\nHost: x\r\n\r\n")
            s.close()
        assert a.get("/version")["meta"] is False
        time.sleep(2.5)  # the dropped tests' timers have run out
        assert a.get("/version")["meta"] is False
    finally:
        for f in fillers:
            f.close()
        full.close()


# ---------------------------------------------------------------- errors

def test_errors(api, echo):
    a = api(config(echo.port))
    assert a.call("GET", "/nope")[::2] == (404, {"message": "resource not found"})
    status, headers, body = a.call("POST", "/rules", {})
    assert (status, body) == (405, {"message": "method not allowed"})
    assert headers["allow"] == "GET"
    status, _, body = a.call("PATCH", "/configs", raw=b'{"log-level": ')
    assert (status, body) == (400, {"message": "Body invalid"})
    # a body over 64 KiB is refused from its Content-Length, unread
    s = socket.create_connection((LOOPBACK, a.port), timeout=5)
    s.sendall(b"PATCH /configs HTTP/1.1\r\nHost: x\r\nContent-Length: 65537\r\n\r\n")
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = s.recv(4096)
        assert chunk, answer
        answer += chunk
    head, _, rest = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413 Content Too Large\r\n")
    assert b"Connection: close" in head
    n = int(re.search(rb"Content-Length: (\d+)", head).group(1))
    while len(rest) < n:
        rest += s.recv(4096)
    assert json.loads(rest) == {"message": "request body over 65536 bytes"}
    s.close()
    # exactly 64 KiB is read
    status, _, body = a.call("PATCH", "/configs",
                             raw=b'{"x":"' + b"a" * (65536 - 8) + b'"}')
    assert status == 204, body


# ---------------------------------------------------------------- bounds

def test_idle_connections_stop_neither_flows_nor_calls(api, echo):
    a = api(config(echo.port))
    idle = []
    try:
        for _ in range(200):
            idle.append(socket.create_connection((LOOPBACK, a.port), timeout=5))
        # a proxied flow and a dashboard's call go on
        s = socks5_connect(a.socks_port, LOOPBACK, echo.port)
        s.sendall(b"ping")
        assert recv_exact(s, 4) == b"ping"
        assert a.get("/version")["meta"] is False
        # and then a thousand more
        for _ in range(1000):
            try:
                idle.append(socket.create_connection((LOOPBACK, a.port), timeout=5))
            except OSError:
                pass
        s.sendall(b"pong")
        assert recv_exact(s, 4) == b"pong"
        s.close()
        assert a.get("/rules")["rules"][-1]["type"] == "Match"
        # the surplus was closed by the server
        closed = 0
        for c in idle:
            c.settimeout(0.01)
            try:
                closed += c.recv(1) == b""
            except (socket.timeout, BlockingIOError):
                pass
            except ConnectionResetError:
                closed += 1
        assert closed >= len(idle) - 64
    finally:
        for c in idle:
            c.close()


def test_an_idle_connection_is_closed(api, echo):
    a = api(config(echo.port))
    s = socket.create_connection((LOOPBACK, a.port), timeout=5)
    s.sendall(b"GET /version HTTP/1.1\r\nHost: x\r\n\r\n")
    assert s.recv(4096).startswith(b"HTTP/1.1 200 OK\r\n")
    t0 = time.monotonic()
    s.settimeout(40)
    assert s.recv(1) == b""
    assert 29 <= time.monotonic() - t0 < 35  # API_IDLE_MS
    s.close()


# ---------------------------------------------------------------- streams and data

def test_streams_and_our_endpoints(api, echo):
    a = api(config(echo.port))

    async def streams():
        async with a.ws("/traffic") as w:
            for _ in range(2):
                m = json.loads(await w.recv())
                assert set(m) == {"up", "down"}
                assert m["up"] >= 0 and m["down"] >= 0
        async with a.ws("/connections?interval=200") as w:
            t0 = time.monotonic()
            for _ in range(3):
                m = json.loads(await w.recv())
                assert set(m) == {"downloadTotal", "uploadTotal", "connections", "memory"}
            assert time.monotonic() - t0 < 2
        async with a.ws("/memory") as w:
            m = json.loads(await w.recv())
            assert set(m) == {"inuse", "oslimit"} and m["inuse"] > 1 << 20
    arun(streams())

    # /traffic as chunked HTTP, one JSON text a line
    s = socket.create_connection((LOOPBACK, a.port), timeout=5)
    s.sendall(b"GET /traffic HTTP/1.1\r\nHost: x\r\n\r\n")
    data = b""
    while b"}\n" not in data.partition(b"\r\n\r\n")[2]:
        chunk = s.recv(4096)
        assert chunk
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b"Transfer-Encoding: chunked" in head
    size, _, rest = body.partition(b"\r\n")
    assert set(json.loads(rest[:int(size, 16)])) == {"up", "down"}
    s.close()

    c = a.get("/connections")
    assert set(c) == {"downloadTotal", "uploadTotal", "connections", "memory"}
    assert c["memory"] > 1 << 20
    assert a.get("/users") == {"users": a.get("/users")["users"]}
    assert a.get("/udp-lb") == {"udp_lb": []}
    assert a.get("/providers/proxies") == {"providers": {}}
    text = a.get("/metrics")
    fams = {f.name for f in text_string_to_metric_families(text)}
    assert "etemenanki_build_info" in fams and "etemenanki_flows_open" in fams


def test_websocket_close_ping_and_a_message_too_long(api, echo):
    a = api(config(echo.port))

    async def go():
        async with a.ws("/traffic") as w:
            pong = await w.ping()
            await asyncio.wait_for(pong, 5)
            await w.close()
            assert w.close_code == 1000
        async with a.ws("/traffic") as w:
            await w.send("x" * 5000)
            with pytest.raises(websockets.exceptions.ConnectionClosed) as e:
                for _ in range(5):
                    await asyncio.wait_for(w.recv(), 5)
            assert e.value.rcvd.code == 1009
        assert (await asyncio.to_thread(a.get, "/version"))["meta"] is False
    arun(go())


def test_udp_lb_and_chunked_logs(api):
    from udplbkit import Client, EchoBackend, lb_config
    backend = EchoBackend("a")
    try:
        text = (lb_config([backend], tag="lb").replace("{", "{{").replace("}", "}}")
                + '\n[[inbound]]\ntag = "socks"\nprotocol = "socks"\nlisten = "127.0.0.1"\n'
                'port = {port0}\n\n[api]\nlisten = "127.0.0.1:{api}"\n')
        a = api(text)
        port = int(re.search(r"listening on 127\.0\.0\.1:(\d+) \(lb,", a.proxy.log()).group(1))
        c = Client(port)
        try:
            for i in range(3):
                assert c.ask(b"ping-%d" % i) == "a"
        finally:
            c.close()
        deadline = time.monotonic() + 5
        while True:
            lbs = a.get("/udp-lb")["udp_lb"]
            if lbs[0]["datagrams_to_clients"] == 3 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert [x["inbound"] for x in lbs] == ["lb"]
        lb = lbs[0]
        assert lb["datagrams_to_backends"] == 3 and lb["datagrams_to_clients"] == 3
        assert lb["flows_created"] == 1 and lb["active_flows"] == 1
        assert set(lb["dropped"]) >= {"truncated"} and set(lb["closed"]) >= {"idle"}
        assert [(b["address"], b["flows_created"]) for b in lb["backends"]] == [(backend.addr, 1)]

        # /logs as chunked HTTP: a reload's info line
        s = socket.create_connection((LOOPBACK, a.port), timeout=5)
        s.sendall(b"GET /logs HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while b"\r\n\r\n" not in data:
            data += s.recv(4096)
        assert data.startswith(b"HTTP/1.1 200 OK\r\n") and b"Transfer-Encoding: chunked" in data
        assert a.call("PUT", "/configs?force=true")[0] == 204
        want = (b'{"type":"info","payload":"app: reloading ' + str(a.proxy.cfg_path).encode()
                + b' (api)"}\n')
        while want not in data:
            chunk = s.recv(4096)
            assert chunk, data
            data += chunk
        s.close()
    finally:
        backend.close()


def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+) kB", f.read()).group(1)) * 1024


def test_a_slow_stream_reader_loses_messages_not_memory(api, echo):
    # under AddressSanitizer freed blocks wait in its quarantine (256 MiB
    # by default), which would count as growth here
    asan = os.environ.get("ASAN_OPTIONS", "")
    a = api(config(echo.port), env={"ASAN_OPTIONS": asan + ":quarantine_size_mb=0"})
    assert a.call("PATCH", "/configs", {"log-level": "debug"})[0] == 204
    n, path = 30000, "/" + "x" * 1000  # each request logs a 1 KiB debug line

    async def go():
        # a reader that takes nothing: the library stops reading after one
        # message, then the kernel's buffers fill
        async with websockets.connect(f"ws://{LOOPBACK}:{a.port}/logs?level=debug",
                                      max_queue=1, read_limit=1024) as w:
            before = rss(a.proxy.proc.pid)

            def flood():
                s = socket.create_connection((LOOPBACK, a.port), timeout=30)
                req = f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
                answers = [0]

                def drain():
                    mark, buf = b"HTTP/1.1 404", b""
                    while answers[0] < n:
                        chunk = s.recv(1 << 16)
                        if not chunk:
                            return
                        buf += chunk
                        answers[0] += buf.count(mark)
                        at = buf.rfind(mark)
                        buf = buf[at + len(mark):] if at >= 0 else buf[-len(mark):]
                import threading
                t = threading.Thread(target=drain)
                t.start()
                for i in range(0, n, 100):
                    s.sendall(req * 100)
                t.join(60)
                s.close()
                return answers[0]
            assert await asyncio.to_thread(flood) == n
            grown = rss(a.proxy.proc.pid) - before
            assert grown < 12 << 20, f"RSS grew {grown} bytes for {n} KiB of messages"
            # the reader gets what fitted, not every line (the balancer's
            # probes log at debug too: read for a while, not until quiet)
            got, end = 0, time.monotonic() + 5
            try:
                while time.monotonic() < end:
                    m = json.loads(await asyncio.wait_for(w.recv(), end - time.monotonic()))
                    got += m["payload"].startswith("app: api: GET /xxx")
            except asyncio.TimeoutError:
                pass
            assert 0 < got < n
        assert (await asyncio.to_thread(a.get, "/version"))["meta"] is False
    asyncio.run(asyncio.wait_for(go(), 120))


def rfc3339_ms(s):
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", s), s
    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)


def live(a, n, timeout=5.0):
    """The connections once there are n of them."""
    deadline = time.monotonic() + timeout
    while True:
        c = a.get("/connections")
        if len(c["connections"]) == n or time.monotonic() > deadline:
            assert len(c["connections"]) == n, c
            return c
        time.sleep(0.05)


def test_connections_lists_a_live_flow(api, echo):
    """Needs the flow tracker: fails against its empty stubs."""
    a = api(config(echo.port))
    s = socks5_connect(a.socks_port, LOOPBACK, echo.port)
    try:
        s.sendall(b"x" * 1000)
        assert recv_exact(s, 1000) == b"x" * 1000
        c = live(a, 1)
        assert c["uploadTotal"] >= 1000 and c["downloadTotal"] >= 1000
        f = c["connections"][0]
        assert set(f) == {"id", "metadata", "upload", "download", "start", "chains", "rule",
                          "rulePayload"}
        assert re.fullmatch(r"[1-9]\d*", f["id"])
        assert f["metadata"] == {
            "network": "tcp", "type": "socks",
            "sourceIP": "127.0.0.1", "sourcePort": str(s.getsockname()[1]),
            "destinationIP": "127.0.0.1", "destinationPort": str(echo.port),
            "host": "", "dnsMode": "normal", "processPath": "", "specialProxy": "",
            "inboundUser": ""}
        assert f["upload"] >= 1000 and f["download"] >= 1000
        assert abs((datetime.now(timezone.utc) - rfc3339_ms(f["start"])).total_seconds()) < 30
        assert f["chains"] == ["direct"]
        assert (f["rule"], f["rulePayload"]) == ("Match", "")

        async def stream():
            async with a.ws("/connections") as w:
                m = json.loads(await w.recv())
                assert [x["id"] for x in m["connections"]] == [f["id"]]
        arun(stream())
    finally:
        s.close()
    live(a, 0)


def test_kill_one_connection(api, echo):
    """Needs the flow tracker: fails against its empty stubs."""
    a = api(config(echo.port))
    s1 = socks5_connect(a.socks_port, LOOPBACK, echo.port)
    s2 = socks5_connect(a.socks_port, LOOPBACK, echo.port)
    try:
        c = live(a, 2)
        by_port = {int(f["metadata"]["sourcePort"]): f["id"] for f in c["connections"]}
        id1 = by_port[s1.getsockname()[1]]
        status, _, body = a.call("DELETE", f"/connections/{id1}")
        assert (status, body) == (204, None)
        s1.settimeout(5)
        try:
            assert s1.recv(1) == b""
        except ConnectionResetError:
            pass
        s2.sendall(b"still")
        assert recv_exact(s2, 5) == b"still"
        assert [f["id"] for f in live(a, 1)["connections"]] == [by_port[s2.getsockname()[1]]]
        assert a.call("DELETE", f"/connections/{id1}")[::2] == (
            404, {"message": "resource not found"})
        # the killed one is among the ended ones, with its why
        ended = {f["id"]: f for f in a.get("/connections?closed")["connections"]}
        assert ended[id1]["why"] == "the flow was killed"
        assert rfc3339_ms(ended[id1]["end"]) >= rfc3339_ms(ended[id1]["start"])
        assert a.call("DELETE", "/connections")[0] == 204
        s2.settimeout(5)
        try:
            assert s2.recv(1) == b""
        except ConnectionResetError:
            pass
        live(a, 0)
    finally:
        s1.close()
        s2.close()


def test_d1_a_websocket_pinger_that_never_reads_is_closed(api, echo):
    """Issue 32 D1: a client on an API WebSocket stream sending pings as
    fast as it can and never reading the pongs. The server answered every
    ping into an unbounded write queue (gigabytes in seconds); now it closes
    the connection once API_WS_PONGS_MAX pongs wait, its memory stays flat
    and the API answers the next call."""
    asan = os.environ.get("ASAN_OPTIONS", "")
    a = api(config(echo.port), env={"ASAN_OPTIONS": asan + ":quarantine_size_mb=0"})
    assert a.call("PATCH", "/configs", {"log-level": "debug"})[0] == 204
    pid = a.proxy.proc.pid
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the pongs fill it soon
    s.settimeout(5)
    s.connect((LOOPBACK, a.port))
    s.sendall(b"GET /traffic HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
              b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
              b"Sec-WebSocket-Version: 13\r\n\r\n")
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(1)
        assert chunk, head
        head += chunk
    assert head.startswith(b"HTTP/1.1 101 "), head
    before = rss(pid)
    # masked pings with 64 bytes of payload (RFC 6455 5.5.2): each pong
    # the server owes is 66 bytes
    payload = b"p" * 64
    ping = b"\x89" + bytes([0x80 | len(payload)]) + b"\0\0\0\0" + payload
    burst = ping * 1000
    closed, grown, end = False, 0, time.monotonic() + 15
    try:
        while time.monotonic() < end:
            s.sendall(burst)
            grown = rss(pid) - before
            if grown > 256 << 20:
                break  # unbounded: stop before the machine suffers
    except (ConnectionResetError, BrokenPipeError):
        closed = True
    except socket.timeout:
        pass  # the server stopped reading but kept the connection
    finally:
        s.close()
    grown = max(grown, rss(pid) - before)
    assert grown < 32 << 20, f"RSS grew {grown} bytes"
    assert closed, "the connection stayed open"
    assert ("app: api: a WebSocket client sends pings and does not read the answers "
            "(16 pongs waiting); closing it") \
        in a.proxy.log()
    assert a.get("/version")["meta"] is False
