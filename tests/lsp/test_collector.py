"""The language server's garbage collection (``lsp/collector.py``): none during an analysis, cycles collected
once the process stops allocating, and the analysis of edits leaves no cycle behind (so that waiting costs no
memory)."""

from __future__ import annotations

import gc
import sys
import time
import weakref
from pathlib import Path

import pytest

from gradguard import api
from gradguard.lsp.collector import IdleCollector

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from bench_lsp import edit_lines, generate  # noqa: E402


class Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only a collection frees it


@pytest.fixture
def collector():
    before = gc.isenabled()
    running = IdleCollector(idle=0.2, min_pending=1).start()
    try:
        yield running
    finally:
        running.stop()
        gc.unfreeze()
        if not before:
            gc.disable()


def test_cycles_are_collected_when_allocation_pauses_not_before(collector) -> None:
    assert not gc.isenabled()
    node = Node()
    freed = weakref.ref(node)
    del node
    start = collector.collections
    deadline = time.monotonic() + 10
    while freed() is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert freed() is None and collector.collections > start


def test_a_busy_process_is_collected_past_the_limit() -> None:
    running = IdleCollector(idle=3600, min_pending=1, limit=50_000).start()  # never idle long enough
    try:
        node = Node()
        freed = weakref.ref(node)
        del node
        keep = [[] for _ in range(60_000)]  # tracked objects pending
        deadline = time.monotonic() + 10
        while freed() is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert freed() is None and running.collections >= 1 and keep
    finally:
        running.stop()
        gc.unfreeze()


def test_edits_leave_no_cycle_for_the_collector() -> None:
    """Why collecting during analyses was wasted work: reference counting frees every edit's garbage."""
    text = generate(600)
    lines = text.split("\n")
    spots = edit_lines(text, 4)
    cache: dict = {}
    api.analyze_source(text, "b.py", cache=cache)
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for i in range(8):
            line = spots[(i // 2) % len(spots)]
            edited = lines[:line] + ["    # edit"] + lines[line:] if i % 2 == 0 else lines
            api.analyze_source("\n".join(edited), "b.py", cache=cache)
        assert gc.collect() == 0
    finally:
        if enabled:
            gc.enable()
