"""Shared by the probe tests: one warm worker per session (torch is imported once)."""

from __future__ import annotations

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
