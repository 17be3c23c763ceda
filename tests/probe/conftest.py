"""Shared by the probe tests: one warm worker per session (torch is imported once)."""

from __future__ import annotations

import socket
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

from gradguard.probe import ProbeOptions, ProbeWorker  # noqa: E402
from probe_corpus import probe_corpus  # noqa: E402


@pytest.fixture(scope="session")
def worker():
    with ProbeWorker() as w:
        yield w


@pytest.fixture
def script(tmp_path):
    """Write a script into a fresh project folder and return its path."""

    def write(source: str, name: str = "train.py") -> Path:
        path = tmp_path / "project" / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(textwrap.dedent(source), encoding="utf-8")
        return path

    return write


@pytest.fixture
def probe(worker):
    def run(path, **options):
        return worker.probe(path, ProbeOptions(**options))

    return run


@pytest.fixture(scope="session")
def corpus():
    """Every fixture probed once per session (test_probe_fixtures.py, test_agreement.py)."""
    return probe_corpus()


@pytest.fixture
def listener():
    """A TCP server on loopback the probed code must not reach (nothing but the test ever connects to it)."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    server.settimeout(0.5)
    yield server
    server.close()
