"""Shared fixtures: the binary under test and the example configs."""
import os
import pathlib
import subprocess

import pytest

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
