"""What the first diagnostics do not need, loaded on first use and off the event loop.

- ``"fix layer"``: code actions, fix-all and hover (``actions.py``, ``hover.py``; behind them ``autofix``
  and ``lsp/fixes.py``), and libcst, which every fix is built with: importing libcst took ~95 ms of the
  ~510 ms from spawning the server to its first diagnostics.  Loaded by the first code action, hover or fix-all,
  or, so that none of them waits for it, just after the first findings are out (``GradguardServer.record``).
  Whether fixes can be built in this interpreter (``fixes.unavailable``) is known once it is loaded: a server
  without libcst says so then, once (``on_loaded``).
  Once it is loaded, the code attrs and dataclasses generated so far is saved compiled for the next start
  (``generated_code.save``).
- ``"closed files"``: workspace mode's analysis of the files on disk (``closed_files.py``: worker processes,
  the result cache), off by default.

Each is imported in a thread (the default executor) by whoever asks first; a later ask waits for the same
import, or gets the modules at once.  This is the one place in ``gradguard.lsp`` that imports a gradguard module
by name at run time: ``tests/test_import_graph.py`` reads ``MODULES`` and counts each entry as an import of this
module, so its cycle checks see these edges.  The modules loaded here take the server as a ``Protocol`` and never
import ``server.py``.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable
from types import ModuleType

from ..fixes import unavailable
from . import generated_code

FIX_LAYER = "fix layer"
CLOSED_FILES = "closed files"
MODULES: dict[str, tuple[str, ...]] = {
    FIX_LAYER: ("gradguard.lsp.actions", "gradguard.lsp.hover"),
    CLOSED_FILES: ("gradguard.lsp.closed_files",),
}


def _import(name: str) -> tuple[ModuleType, ...]:
    """In a thread: the modules of entry ``name`` (and for the fix layer, libcst behind it)."""
    modules = tuple(importlib.import_module(module) for module in MODULES[name])
    if name == FIX_LAYER:
        unavailable()  # imports libcst, or finds it missing; cached for every later ask
        generated_code.save()  # the start's and the fix layer's generated code, compiled: the next start reads it
    return modules


class OnDemand:
    """The entries of ``MODULES``, each loaded once.  ``on_loaded(name)`` runs on the event loop when entry
    ``name`` has been loaded."""

    def __init__(self, on_loaded: Callable[[str], None] = lambda name: None) -> None:
        self.on_loaded = on_loaded
        self._loads: dict[str, asyncio.Future] = {}

    def start(self, name: str) -> asyncio.Future:
        """Start loading entry ``name`` unless it is loading or loaded; its future either way."""
        future = self._loads.get(name)
        if future is None:
            future = self._loads[name] = asyncio.get_running_loop().run_in_executor(None, _import, name)
            future.add_done_callback(lambda done: None if done.cancelled() or done.exception() else self.on_loaded(name))
        return future

    async def load(self, name: str) -> tuple[ModuleType, ...]:
        """The modules of entry ``name`` (in ``MODULES`` order), loaded now if they are not yet.  A caller that
        is cancelled does not cancel the import others may wait for."""
        return await asyncio.shield(self.start(name))

    def loaded(self, name: str) -> bool:
        future = self._loads.get(name)
        return future is not None and future.done() and not future.cancelled() and future.exception() is None
