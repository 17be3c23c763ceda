"""The gradguard language server's state and its one analysis path (pygls 2, stdio); the handlers are in
``handlers.py`` and ``notebooks.py``, the entry point in ``main.py``.

- Diagnostics, whichever way the client supports: pulled (``textDocument/diagnostic``) by a client that
  declares ``textDocument.diagnostic``, else pushed on open/change/save (debounced, analysed in a thread
  pool, a run made stale by a newer edit cancelled or dropped, only published for the version it was
  computed on).  Never both: a client that does both (Neovim 0.10+, VS Code) would show every finding twice.
  Notebook cells are always pushed (a pull for a cell is answered empty).
- Every open document, a text file or a notebook, is a ``documents.Document``: one path schedules, analyses,
  converts and publishes it, and code actions, fix-all and hover read what it published.
- Configuration: ``settings.py``.  The pyproject.toml is stat'ed on every document event and reloaded when it
  changed (every open document is re-analysed).  ``"run": "onSave"`` beside ``"gradguard"`` makes a pushing
  server analyse on open and save only.
- Start-up imports what the first diagnostics need and no more: the fix layer (code actions, fix-all, hover and
  libcst behind them) and workspace mode's closed files load on first use, in a thread (``on_demand.py``); the
  fix layer also right after the first findings are out, so that the first code action need not wait for it.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from .. import __version__ as VERSION  # what `gradguard --version` says (reading the installed metadata: ~8 ms)
from ..config import Config
from ..diagnostics import UNREADABLE, Diagnostic, FileResult, Severity, Span
from ..fixes import unavailable as fixes_unavailable
from .documents import (MAX_DOCUMENT_CHARS, Document, FixData, FixKey, NotebookDocument, Snapshot, TextDocument,
                        to_lsp, too_large)
from .folders import FolderConfigs
from .on_demand import FIX_LAYER, OnDemand
from .probe_support import ProbeSupport, mark_sources
from .settings import Settings
from .stream import GradguardProtocol
from .workspace import WorkspaceDiagnostics

logger = logging.getLogger("gradguard.lsp")

DEFAULT_DEBOUNCE_SECONDS = 0.075


def too_large_result(path: str, size: int) -> FileResult:
    return FileResult(path, [Diagnostic(path, Span(1, 1, 1, 1), UNREADABLE, Severity.WARNING,
                                        f"this document is too large to analyse ({size / 1e6:.1f} MB; gradguard's "
                                        f"editor limit is {MAX_DOCUMENT_CHARS / 1e6:g} MB): `gradguard check` "
                                        "analyses it from the command line")], error="too large")
NOTEBOOK_SYNC = types.NotebookDocumentSyncOptions(
    notebook_selector=[types.NotebookDocumentFilterWithCells(
        notebook="jupyter-notebook", cells=[types.NotebookCellLanguage(language="python")])],
    save=True,
)


class GradguardServer(LanguageServer):
    def __init__(self, debounce: float = DEFAULT_DEBOUNCE_SECONDS) -> None:
        super().__init__("gradguard", VERSION, text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
                         notebook_document_sync=NOTEBOOK_SYNC, protocol_cls=GradguardProtocol)
        self.debounce = debounce
        self.documents: dict[str, Document] = {}  # by the uri of the text document or of the notebook
        self.settings = Settings()
        self.executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="gradguard-analysis")
        self.probe = ProbeSupport()
        self.pull_mode = False  # the client pulls diagnostics (textDocument/diagnostic): never push
        self.refresh_support = False  # ... and accepts workspace/diagnostic/refresh
        self.config_generation = 0  # bumped on every configuration change (part of pull result ids)
        self.instance = os.urandom(8).hex()  # so a result id of an earlier server never matches one of this one
        self.run_on_type = True  # push mode: analyse on every change, or (``"run": "onSave"``) on open/save only
        self.folder_configs = FolderConfigs(self.settings)  # multi-root: each folder's [tool.gradguard]
        self.on_demand = OnDemand(self._loaded)  # the fix layer and workspace mode's closed files, on first use
        self.workspace_diagnostics = WorkspaceDiagnostics(self.executor, self.on_demand)  # "diagnosticMode"

    def _loaded(self, name: str) -> None:
        """``on_demand`` loaded entry ``name``: the fix layer says once when fixes cannot be built here (findings
        still come; their fixes and fix-all cannot)."""
        if name == FIX_LAYER and fixes_unavailable() is not None:
            self.warn(f"fixes are unavailable: {fixes_unavailable()}")

    # ---- client and configuration ----------------------------------------------------------
    @property
    def config(self) -> Config:
        return self.settings.config

    def config_for(self, uri: str) -> Config:
        """The configuration of the file ``uri``: its workspace folder's (``folders.py``)."""
        return self.folder_configs.config_for(Path(self.path(uri)), self.folder_paths(), self.warn)

    def folder_paths(self) -> list[Path]:
        return [Path(self.path(f.uri)) for f in self.workspace.folders.values()]

    @property
    def encoding(self) -> str:
        return self.workspace.position_encoding or types.PositionEncodingKind.Utf16

    def set_client_capabilities(self, caps: types.ClientCapabilities | None) -> None:
        text_document = caps.text_document if caps is not None else None
        workspace = caps.workspace if caps is not None else None
        self.pull_mode = text_document is not None and text_document.diagnostic is not None
        self.refresh_support = bool(workspace and workspace.diagnostics and workspace.diagnostics.refresh_support)

    def can_watch_files(self) -> bool:
        caps = self.client_capabilities
        watched = caps.workspace.did_change_watched_files if caps and caps.workspace else None
        return bool(watched and watched.dynamic_registration)

    def set_run(self, options: Any) -> None:
        """``{"run": "onType" | "onSave", ...}`` beside ``"gradguard"`` in initializationOptions or settings."""
        run = options.get("run") if isinstance(options, dict) else None
        if run in ("onType", "onSave"):
            self.run_on_type = run == "onType"
        elif run is not None:
            self.warn(f'"run" must be "onType" or "onSave", not {run!r}')
        self.probe.configure(self, options)  # "probe" and "trusted", beside "run"
        self.workspace_diagnostics.configure(self, options)  # "diagnosticMode"

    def warn(self, message: str) -> None:
        logger.warning(message)
        try:
            self.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning, message=f"gradguard: {message}"))
        except Exception:  # pragma: no cover - no client attached
            logger.exception("cannot show a message")

    def _root(self) -> str | None:
        try:
            return self.workspace.root_path
        except Exception:
            return None

    def load_settings(self, overrides: Any) -> None:
        for warning in self.settings.load_file(self._root()) + self.settings.set_overrides(overrides):
            self.warn(warning)

    def reload_if_pyproject_changed(self) -> None:
        """Reload ``[tool.gradguard]`` and re-analyse when the pyproject.toml changed on disk.

        Called on every document event, so that an edited pyproject.toml takes effect in every editor, also in
        those that cannot watch files for the server (Neovim on Linux has no dynamic registration of
        ``workspace/didChangeWatchedFiles``); a few stats, no read when unchanged.
        """
        if not self.settings.pyproject_changed(self._root()):
            return
        self.reload_settings()

    def reload_settings(self) -> None:
        for warning in self.settings.reload(self._root()):
            self.warn(warning)
        self.reanalyse_all()

    def reanalyse_all(self) -> None:
        """The configuration changed: findings of every open document may be stale."""
        self.config_generation += 1
        for document in list(self.documents.values()):
            document.forget()  # jedi on or off changes what the engine finds
            self.schedule(document, delay=0)
        if self.pull_mode and self.refresh_support:
            try:
                self.workspace_diagnostic_refresh(None)
            except Exception:  # pragma: no cover - a client that cannot take it
                logger.exception("workspace/diagnostic/refresh failed")
        self.workspace_diagnostics.changed(self)

    # ---- documents -------------------------------------------------------------------------
    def path(self, uri: str) -> str:
        return to_fs_path(uri) or uri

    def open_text(self, uri: str) -> TextDocument:
        document = self.documents.get(uri)
        if not isinstance(document, TextDocument):
            document = self.documents[uri] = TextDocument(uri)
        document.text = self.workspace.get_text_document(uri).source
        return document

    def open_notebook(self, uri: str) -> NotebookDocument:
        document = self.documents.get(uri)
        if not isinstance(document, NotebookDocument):
            document = self.documents[uri] = NotebookDocument(uri)
        return document

    def document_of(self, uri: str) -> Document | None:
        """The open document ``uri`` is, or is a cell of."""
        found = self.documents.get(uri)
        if found is not None:
            return found
        notebook = self.workspace.get_notebook_document(cell_uri=uri)
        return self.documents.get(notebook.uri) if notebook is not None else None

    def close(self, uri: str, cells: list[str] | None = None) -> None:
        """Forget ``uri``; a pushing server clears what it showed (for a notebook: ``cells`` and every cell shown)."""
        document = self.documents.pop(uri, None)
        if document is not None and document.task is not None:
            document.task.cancel()
        self.workspace_diagnostics.closed(self, uri)  # a pushing server shows the closed file's disk findings
        if cells is None and self.pull_mode:
            return
        shown = document.published if document is not None else {}
        for part in [uri] if cells is None else dict.fromkeys([*cells, *shown]):
            self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=part, diagnostics=[]))

    def result_id(self, document: Document, version: int | None) -> str:
        """The pull result id of ``document`` at ``version``: it changes with anything that changes its findings
        (the text's version, the configuration, the pyproject.toml and its baseline file, a probe result), so
        an equal ``previousResultId`` may be answered "unchanged" without analysing."""
        key = f"{self.instance}:{version}:{self.config_generation}:{document.revision}"
        return hashlib.blake2b(key.encode(), digest_size=8).hexdigest()

    # ---- the analysis path -------------------------------------------------------------------
    def pushes(self, document: Document) -> bool:
        return not self.pull_mode or document.notebook

    def schedule(self, document: Document, delay: float | None = None) -> None:
        """Analyse ``document`` after ``delay`` (the debounce) and push its findings; a run in flight is cancelled."""
        if not self.pushes(document):
            return
        if document.task is not None and not document.task.done():
            document.task.cancel()
        document.task = asyncio.get_running_loop().create_task(
            self._run(document, self.debounce if delay is None else delay))

    async def _run(self, document: Document, delay: float) -> None:
        try:
            if delay > 0:
                await asyncio.sleep(delay)
            outcome = await self.analyse(document)
            if outcome is None or self.documents.get(document.uri) is not document:
                return
            snap, diags = outcome
            current = document.snapshot(self.workspace)
            if current is None or current.version != snap.version:
                return  # edited meanwhile: a newer run will publish
            self.publish(document, snap, diags)
            document.release()  # the findings are sent
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("analysis of %s failed", document.uri)

    async def analyse(self, document: Document) -> tuple[Snapshot, list[Diagnostic]] | None:
        """Analyse the current text of ``document`` in the pool; the snapshot analysed and its findings."""
        snap = document.snapshot(self.workspace)
        if snap is None:
            return None
        config, cache = self.config_for(document.uri), dict(document.cache)
        size = too_large(snap)
        if size is not None:  # not analysed; nothing of an earlier analysis kept either
            document.forget()
            cache, result = {}, too_large_result(self.path(document.uri), size)
        else:
            result = await asyncio.get_running_loop().run_in_executor(
                self.executor, document.analyse, snap, self.path(document.uri), config, cache)
        if self.documents.get(document.uri) is not document:
            return None
        now = document.snapshot(self.workspace)
        current = now is not None and now.version == snap.version and config is self.config_for(document.uri)
        if current:
            document.keep_fixes(snap.version, result)
        return snap, document.accept(result, cache, current)

    def release_after_reply(self, document: Document) -> None:
        """For a request handler: ``document.release()`` once the reply it is returning has been sent.  pygls
        sends it from the handler task's done callback, queued when the task finishes, so after this first hop."""
        loop = asyncio.get_running_loop()
        loop.call_soon(loop.call_soon, document.release)

    def record(self, document: Document, snap: Snapshot, diags: list[Diagnostic]) -> dict[str, list]:
        """What the client is to be shown for each part (hover, code actions and fix-all read it)."""
        if isinstance(document, TextDocument):  # the runtime probe's result for this text, if any
            diags = self.probe.merge(self, document, snap.parts[0].text, diags)
        pairs = to_lsp(snap, diags, self.encoding, self.config.docs_url)
        for shown in pairs.values():
            mark_sources(shown)
        document.show(snap, pairs)
        self._warm_up()
        return pairs

    def _warm_up(self) -> None:
        """Once the first findings are out (after the notification or reply that carries them is sent): load the
        fix layer in the background, so that the first code action or hover does not wait for it."""
        if not self.on_demand.loaded(FIX_LAYER):
            loop = asyncio.get_running_loop()
            loop.call_soon(loop.call_soon, self.on_demand.start, FIX_LAYER)

    async def fixes_of(self, document: Document, uri: str, keys: Iterable[FixKey]) -> dict[FixKey, FixData]:
        """The fixes of the published findings of part ``uri`` that ``keys`` name, built in the pool the first
        time they are asked for (code actions and hover: only for the findings they show).  A key left out is
        not known (the findings were kept from the last text that parsed, or the document moved on)."""
        version, keys = document.published_version, list(keys)
        job = document.fixes_job(uri, keys)
        if job is not None:
            document.remember_fixes(version, uri, await asyncio.get_running_loop().run_in_executor(self.executor, job))
        known = document.known_fixes(uri) if document.published_version == version else {}
        return {key: known[key] for key in keys if key in known}

    def publish(self, document: Document, snap: Snapshot, diags: list[Diagnostic]) -> None:
        """Push the findings of ``snap``: every part of a text file; the cells of a notebook whose findings
        changed from or to none, and an empty list for a cell that is gone."""
        before = document.published
        pairs = self.record(document, snap, diags)
        for uri in before:
            if uri not in pairs:
                self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))
        for part in snap.parts:
            if pairs[part.uri] or before.get(part.uri) or not snap.notebook:
                self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(
                    uri=part.uri, version=part.version, diagnostics=[lsp for _, lsp in pairs[part.uri]]))

    def shutdown_work(self) -> None:
        for document in self.documents.values():
            if document.task is not None:
                document.task.cancel()
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.workspace_diagnostics.shutdown()
        self.probe.shutdown()
