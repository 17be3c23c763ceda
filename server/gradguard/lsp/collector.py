"""Garbage collection between edits, not during them.

An analysis allocates a tree of some 100k nodes per 3,000 lines before the previous one is freed, so CPython's
collector ran during every edit: young collections of the new objects (4-6 ms an edit) and every few edits an
older one (30-110 ms), a large share of the line-edit p95 (``bench/bench_lsp.py``).  They find next to no
garbage: reference counting frees the old tree and the interpreter's values (ten edits through
``api.analyze_source`` leave nothing unreachable; through the server, about a thousand objects an edit, and
a closed document's tree).  So the automatic collector is off while the server runs, and a daemon thread
collects once the count of objects allocated and not freed has stood still for ``idle`` seconds (the user
stopped typing) with at least ``min_pending`` of them, or, for work that never pauses, as soon as ``limit``
are pending.  Objects alive at start-up (the imported modules) are frozen out of every collection.
"""

from __future__ import annotations

import gc
import threading
import time

IDLE_SECONDS = 0.5
POLL_SECONDS = 0.1
MIN_PENDING = 10_000  # fewer objects pending is not worth a collection, however idle
PENDING_LIMIT = 300_000  # collect at once past this many, idle or not (three 3,000-line trees)


class IdleCollector:
    """Runs ``gc.collect()`` in a daemon thread at the moments described in the module docstring."""

    def __init__(self, idle: float = IDLE_SECONDS, min_pending: int = MIN_PENDING, limit: int = PENDING_LIMIT) -> None:
        self.idle, self.min_pending, self.limit = idle, min_pending, limit
        self.collections = 0  # made by this collector
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="gradguard-gc", daemon=True)

    def start(self) -> IdleCollector:
        gc.collect()
        gc.freeze()  # start-up objects live as long as the process
        gc.disable()
        self._thread.start()
        return self

    def stop(self) -> None:
        """Back to CPython's own collector (the frozen objects stay frozen)."""
        self._stop.set()
        self._thread.join()
        gc.enable()

    def _watch(self) -> None:
        last, still_since = gc.get_count()[0], time.monotonic()
        while not self._stop.wait(min(POLL_SECONDS, self.idle)):
            pending, now = gc.get_count()[0], time.monotonic()
            if pending != last:
                last, still_since = pending, now
            if pending >= self.limit or (pending >= self.min_pending and now - still_since >= self.idle):
                gc.collect()
                self.collections += 1
                last, still_since = gc.get_count()[0], time.monotonic()
