"""Shared fixtures: the binary under test and the example configs."""
import os
import pathlib
import subprocess

import pytest

from proxykit import EchoServer, Proxy, UdpEcho, make_cert, stop_cleanly

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def app():
    path = os.environ.get("ETM_APP")
    assert path, "ETM_APP must name the etemenanki-app binary (meson test sets it)"
    assert os.access(path, os.X_OK), f"{path} is not an executable"
    return path


@pytest.fixture
def run(app):
    """Runs etemenanki-app with arguments; returns the CompletedProcess."""
    def _run(*args, timeout=20):
        return subprocess.run([app, *args], capture_output=True, text=True, timeout=timeout)
    return _run


@pytest.fixture
def example():
    def _example(name):
        return (ROOT / "examples" / name).read_text()
    return _example


def proxy_starter(app, tmp_path, started):
    """A function that starts an etemenanki-app process (a Proxy) and
    appends it to started, for a fixture's teardown to stop."""
    def _start(text, n_ports=1, **kw):
        p = Proxy(app, tmp_path, text, n_ports, **kw)
        started.append(p)
        return p.start()
    return _start


@pytest.fixture
def start_proxy(app, tmp_path):
    """Starts etemenanki-app processes; every one is stopped at teardown
    (SIGTERM, then SIGKILL), and only those, and must exit 0."""
    started = []
    yield proxy_starter(app, tmp_path, started)
    stop_cleanly(started, "proxy")


@pytest.fixture
def procs(app, tmp_path):
    """Like start_proxy, but teardown only stops them (SIGTERM, then
    SIGKILL) and does not look at how they exited."""
    started = []
    yield proxy_starter(app, tmp_path, started)
    for p in started:
        p.stop()


@pytest.fixture
def pki(tmp_path):
    """A self-signed certificate for proxy.test (SAN DNS:proxy.test only):
    the paths (cert, key)."""
    return make_cert(tmp_path, "proxy.test", "DNS:proxy.test")


# One of each per test module, as each module had before they were shared.

@pytest.fixture(scope="module")
def echo():
    s = EchoServer()
    yield s
    s.close()


@pytest.fixture(scope="module")
def udp_echo():
    s = UdpEcho()
    yield s
    s.close()


@pytest.fixture(scope="module")
def udp_echo_b():
    """A second UDP echo, on a port of its own: a second peer of one
    association."""
    s = UdpEcho()
    yield s
    s.close()
