"""The entry point of ``gradguard lsp`` / ``python -m gradguard.lsp``: one server with every handler, on stdio."""

from __future__ import annotations

import gc
import logging
import os

from . import handlers, notebooks, probe_support, stream, workspace
from .server import GradguardServer


def build() -> GradguardServer:
    server = GradguardServer()
    handlers.register(server)
    notebooks.register(server, handlers.safe)
    probe_support.register(server)  # gradguard.probe command, "Confirm with probe" code lens
    workspace.register(server, handlers.safe)  # workspace/diagnostic, workspace folders
    return server


def main(argv: list[str] | None = None) -> int:
    """Serve LSP on stdin/stdout."""
    logging.basicConfig(level=os.environ.get("GRADGUARD_LOG_LEVEL", "WARNING"), format="gradguard-lsp %(levelname)s %(message)s")
    server = build()
    debounce_ms = os.environ.get("GRADGUARD_LSP_DEBOUNCE_MS")
    if debounce_ms:
        try:
            server.debounce = max(0.0, float(debounce_ms) / 1000)
        except ValueError:
            logging.getLogger("gradguard.lsp").warning("ignoring GRADGUARD_LSP_DEBOUNCE_MS=%r", debounce_ms)
    tune_garbage_collector()
    return stream.start_io(server)  # pygls's loop, made robust (stream.py); exit's code (0 after shutdown, else 1)


def tune_garbage_collector() -> None:
    """Every analysis allocates a tree of some 100k nodes per 3,000 lines, and CPython's default thresholds
    then run a full collection every few edits: 80-120 ms pauses that made the keystroke p95 ~140 ms in
    process (p50 ~25 ms).  Objects alive at start-up (the imported modules) are frozen out of collections and
    collections run less often: p95 ~60 ms (``bench/bench_lsp.py``).  Nothing relies on cycles being freed
    promptly; memory is bounded by the documents open.  No collection before the freeze: at this point it found
    13 unreachable objects and took 15-40 ms of the start (``bench/bench_coldstart.py``)."""
    gc.freeze()
    gc.set_threshold(10_000, 50, 100)
