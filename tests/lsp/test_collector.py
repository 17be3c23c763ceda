"""The language server's garbage collection (``lsp/collector.py``): garbage that reached the old generation
is collected once the process pauses, not by CPython during edits; and the analysis of edits leaves no cycle
behind (why collecting during them was wasted work)."""

from __future__ import annotations

import gc
import sys
import time
import weakref
from pathlib import Path

from gradguard import api
from gradguard.lsp.collector import FULL_AFTER, IdleCollector

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from bench_lsp import edit_lines, generate  # noqa: E402


class Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only a collection frees it


def test_old_garbage_is_collected_when_the_process_pauses() -> None:
    collector = IdleCollector(idle=0.2).start()
    try:
        assert gc.get_threshold()[2] == FULL_AFTER
        node = Node()
        freed = weakref.ref(node)
        gc.collect(1)
        gc.collect(1)  # survived two collections: now in the old generation, which only a full one frees
        del node
        gc.collect(1)
        assert freed() is not None
        deadline = time.monotonic() + 10
        while freed() is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert freed() is None and collector.collections >= 1
    finally:
        collector.stop()
        gc.unfreeze()


def test_edits_leave_no_cycle_behind() -> None:
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
