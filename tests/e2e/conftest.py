"""Shared fixtures: the binary under test and the example configs."""
import os
import pathlib
import subprocess

import pytest

from proxykit import Proxy, stop_cleanly

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


@pytest.fixture
def start_proxy(app, tmp_path):
    """Starts etemenanki-app processes; every one is stopped at teardown
    (SIGTERM, then SIGKILL), and only those, and must exit 0."""
    started = []

    def _start(text, n_ports=1, **kw):
        p = Proxy(app, tmp_path, text, n_ports, **kw)
        started.append(p)
        return p.start()

    yield _start
    stop_cleanly(started, "proxy")
