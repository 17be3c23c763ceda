"""Full garbage collections when the user pauses, not during edits.

An analysis allocates a tree of some 100k nodes per 3,000 lines before the previous one is freed.  With
CPython's default thresholds that made a full collection every few edits (80-120 ms); freezing the start-up
objects and raising the young threshold to 10,000 (the previous setting) still cost 4-6 ms of young
collections an edit and a 30-110 ms middle one every few edits (``bench/bench_lsp.py``).  Almost none of it is
garbage: reference counting frees the old tree and the interpreter's values (ten edits through
``api.analyze_source`` leave nothing unreachable).  So the young generations keep CPython's own thresholds,
which collect the few cycles made while they are small and cheap, full collections are left to a daemon
thread that runs one once the collector's counts have stood still for ``idle`` seconds (the user stopped
typing), and CPython runs one itself only after ``FULL_AFTER`` middle collections (work that never pauses).
Objects alive at start-up (the imported modules) are frozen out of every collection.
"""

from __future__ import annotations

import gc
import threading
import time

IDLE_SECONDS = 0.5
POLL_SECONDS = 0.1
YOUNG_THRESHOLDS = (700, 10)  # CPython's defaults
FULL_AFTER = 1_000  # middle collections before CPython makes a full one itself (its default is 10)


class IdleCollector:
    """Runs full collections in a daemon thread when the process pauses (see the module docstring)."""

    def __init__(self, idle: float = IDLE_SECONDS) -> None:
        self.idle = idle
        self.collections = 0  # full collections made by this collector
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="gradguard-gc", daemon=True)
        self._saved = gc.get_threshold()

    def start(self) -> IdleCollector:
        gc.collect()
        gc.freeze()  # start-up objects live as long as the process
        gc.set_threshold(*YOUNG_THRESHOLDS, FULL_AFTER)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Back to the thresholds before ``start`` (the frozen objects stay frozen)."""
        self._stop.set()
        self._thread.join()
        gc.set_threshold(*self._saved)

    def _watch(self) -> None:
        last, still_since = gc.get_count(), time.monotonic()
        while not self._stop.wait(min(POLL_SECONDS, self.idle)):
            counts, now = gc.get_count(), time.monotonic()
            if counts != last:
                last, still_since = counts, now
            elif counts[2] > 0 and now - still_since >= self.idle:  # objects reached the old generation
                gc.collect()
                self.collections += 1
                last, still_since = gc.get_count(), time.monotonic()
