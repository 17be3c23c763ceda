"""The entry point of ``gradguard lsp`` / ``python -m gradguard.lsp``: one server with every handler, on stdio."""

from __future__ import annotations

import logging
import os

from . import handlers, notebooks, probe_support
from .collector import IdleCollector
from .server import GradguardServer


def build() -> GradguardServer:
    server = GradguardServer()
    handlers.register(server)
    notebooks.register(server, handlers.safe)
    probe_support.register(server)  # gradguard.probe command, "Confirm with probe" code lens
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
    server.start_io()
    return 0


def tune_garbage_collector() -> IdleCollector:
    """Collect garbage when the user pauses, not during analyses (``collector.py``)."""
    return IdleCollector().start()
