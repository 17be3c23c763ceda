"""Workspace mode, as in pyright and ty: ``"diagnosticMode": "workspace"`` beside ``"gradguard"`` in
initializationOptions or settings (default ``"openFiles"``) reports every Python file and notebook of the
workspace folders, not only the open ones; and ``workspace/didChangeWorkspaceFolders``.

- A client that pulls diagnostics (``textDocument.diagnostic``) gets them from ``workspace/diagnostic``: one
  report per file, open documents with their in-editor text (and version), closed files with their disk text
  (``closed_files.py``).  A file unchanged since the client's ``previousResultIds`` (the same version, or the
  same mtime, size and inode, under the same configuration) gets an unchanged report and is not read.  A file
  that had findings and is gone (deleted, excluded, its folder removed, or workspace mode turned off) gets an
  empty report once.  In ``openFiles`` mode the answer is empty at once.
- A client that cannot pull gets the closed files' findings pushed (``textDocument/publishDiagnostics``) once
  it is initialized and again after every change of configuration or folders and after a document is closed;
  open documents are pushed as always.
- Work-done progress (begin, a report per chunk of files, end) goes to the client's ``workDoneToken``, else to a
  token the server creates (``window/workDoneProgress/create``) when the client supports that; only when
  there is something to analyse.  Cancelling (``$/cancelRequest``, or the progress's cancel button) stops
  scheduling work: no further chunk starts, and the request is answered with the RequestCancelled error.

The closed files' analysis (``closed_files.py``: worker processes, the result cache) is loaded the first time
workspace mode has work (``on_demand.py``).  What this needs of the server is ``WorkspaceServer``.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from concurrent.futures import Executor
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

from lsprotocol import types
from pygls.progress import Progress as WorkDoneProgress
from pygls.uris import from_fs_path
from pygls.workspace import Workspace

from ..config import Config, find_pyproject
from ..diagnostics import Diagnostic
from .documents import Document, NotebookDocument, Pair, Snapshot, TextDocument
from .folders import FolderConfigs
from .on_demand import CLOSED_FILES, OnDemand

if TYPE_CHECKING:  # pragma: no cover
    from . import closed_files

logger = logging.getLogger("gradguard.lsp")

MODES = ("openFiles", "workspace")
Report = types.WorkspaceFullDocumentDiagnosticReport | types.WorkspaceUnchangedDocumentDiagnosticReport


class WorkspaceServer(Protocol):
    """What workspace mode needs of the language server (``server.GradguardServer`` is one): its open documents
    and their one analysis path, the configuration of each folder, and the client."""

    documents: dict[str, Document]
    pull_mode: bool
    config_generation: int
    folder_configs: FolderConfigs
    workspace_diagnostics: WorkspaceDiagnostics

    @property
    def workspace(self) -> Workspace: ...

    @property
    def client_capabilities(self) -> types.ClientCapabilities | None: ...

    @property
    def work_done_progress(self) -> WorkDoneProgress: ...

    @property
    def encoding(self) -> str: ...

    def warn(self, message: str) -> None: ...

    def path(self, uri: str) -> str: ...

    def folder_paths(self) -> list[Path]: ...

    def config_for(self, uri: str) -> Config: ...

    def reload_if_pyproject_changed(self) -> None: ...

    def reanalyse_all(self) -> None: ...

    async def analyse(self, document: Document) -> tuple[Snapshot, list[Diagnostic]] | None: ...

    def record(self, document: Document, snap: Snapshot, diags: list[Diagnostic]) -> dict[str, list[Pair]]: ...

    def release_after_reply(self, document: Document) -> None: ...

    def text_document_publish_diagnostics(self, params: types.PublishDiagnosticsParams) -> None: ...


class Progress:
    """Work-done progress of one pass, begun only when there is work, on the client's token or one created."""

    def __init__(self, ls: WorkspaceServer, token: types.ProgressToken | None, task: asyncio.Task | None) -> None:
        self.ls, self.token, self.task = ls, token, task
        self.total = self.done = 0
        self.begun = False

    async def begin(self, total: int) -> None:
        caps = self.ls.client_capabilities
        if total == 0 or self.token is None and not (caps and caps.window and caps.window.work_done_progress):
            return
        if self.token is None:
            token = f"gradguard-workspace-{uuid.uuid4()}"
            try:
                await self.ls.work_done_progress.create_async(token)
            except Exception:  # the client refused the token: no progress, the work goes on
                logger.warning("window/workDoneProgress/create failed", exc_info=True)
                return
            self.token = token
        self.total, self.begun = total, True
        self.ls.work_done_progress.begin(self.token, types.WorkDoneProgressBegin(
            title="gradguard", message=f"0/{total} files", percentage=0, cancellable=True))
        cancel = self.ls.work_done_progress.tokens.get(self.token)
        if cancel is not None and self.task is not None:  # the client's cancel button cancels the pass
            cancel.add_done_callback(lambda _: self.task.cancel())

    def advance(self, n: int) -> None:
        if not self.begun or n == 0:
            return
        self.done += n
        self.ls.work_done_progress.report(self.token, types.WorkDoneProgressReport(
            message=f"{self.done}/{self.total} files", percentage=min(100, 100 * self.done // self.total)))

    def end(self, message: str) -> None:
        if not self.begun:
            return
        self.begun = False
        self.ls.work_done_progress.tokens.pop(self.token, None)
        self.ls.work_done_progress.end(self.token, types.WorkDoneProgressEnd(message=message))


class WorkspaceDiagnostics:
    """The mode, the worker pool (started when there is work) and what the client was given for files with
    findings.  ``threads``: where closed files are analysed when no worker process can start."""

    def __init__(self, threads: Executor, on_demand: OnDemand) -> None:
        self.mode = "openFiles"
        self.threads, self.on_demand = threads, on_demand
        self.pool: closed_files.Pool | None = None
        self.reported: dict[str, str] = {}  # uri -> result id, for the files last reported with findings
        self.push_task: asyncio.Task | None = None

    @property
    def on(self) -> bool:
        return self.mode == "workspace"

    def configure(self, ls: WorkspaceServer, options: Any) -> None:
        """``"diagnosticMode"`` beside ``"gradguard"``; the caller re-analyses on a change of settings."""
        mode = options.get("diagnosticMode") if isinstance(options, dict) else None
        if mode in MODES:
            self.mode = mode
        elif mode is not None:
            ls.warn(f'"diagnosticMode" must be "openFiles" or "workspace", not {mode!r}')

    def changed(self, ls: WorkspaceServer) -> None:
        """Settings, folders or files changed: a pushing server publishes the closed files again (a pulling
        client is asked to pull by ``workspace/diagnostic/refresh``)."""
        if ls.pull_mode or not (self.on or self.reported):
            return
        if self.push_task is not None and not self.push_task.done():
            self.push_task.cancel()
        self.push_task = asyncio.get_running_loop().create_task(self._push(ls))

    def closed(self, ls: WorkspaceServer, uri: str) -> None:
        """``uri`` was closed: what the client has for it is the editor's text, so its disk text is reported."""
        self.reported.pop(uri, None)
        self.changed(ls)

    async def pull(self, ls: WorkspaceServer, params: types.WorkspaceDiagnosticParams) -> types.WorkspaceDiagnosticReport:
        previous = {p.uri: p.value for p in params.previous_result_ids}
        return types.WorkspaceDiagnosticReport(items=await self.collect(ls, previous, params.work_done_token, True))

    async def _push(self, ls: WorkspaceServer) -> None:
        try:
            for report in await self.collect(ls, dict(self.reported), None, False):
                if isinstance(report, types.WorkspaceFullDocumentDiagnosticReport) and report.uri not in ls.documents:
                    ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(
                        uri=report.uri, diagnostics=list(report.items)))
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("workspace diagnostics failed")

    async def collect(self, ls: WorkspaceServer, previous: dict[str, str], token: types.ProgressToken | None,
                      with_open: bool) -> list[Report]:
        """A report for every file of the workspace folders (``with_open``: open documents too) and an empty one
        for each file reported with findings before that is no longer there."""
        reports: dict[str, Report] = {}
        if self.on:
            closed, = await self.on_demand.load(CLOSED_FILES)
            if self.pool is None:
                self.pool = closed.Pool(self.threads)
            found = await _survey(ls, closed)
            progress = Progress(ls, token, asyncio.current_task())
            try:
                await self._reports(ls, closed, found, previous, with_open, progress, reports)
            except BaseException as exc:
                progress.end("cancelled" if isinstance(exc, asyncio.CancelledError) else "stopped by an internal error")
                raise
            progress.end(f"{progress.total} files checked")
        for uri in self.reported:
            if uri not in reports and uri not in ls.documents:
                reports[uri] = types.WorkspaceFullDocumentDiagnosticReport(uri=uri, items=[])
        self.reported = {uri: r.result_id or "" for uri, r in reports.items()
                         if uri in self.reported and isinstance(r, types.WorkspaceUnchangedDocumentDiagnosticReport)
                         or isinstance(r, types.WorkspaceFullDocumentDiagnosticReport) and r.items}
        return list(reports.values())

    async def _reports(self, ls: WorkspaceServer, closed: ModuleType, found: list[closed_files.Found],
                       previous: dict[str, str], with_open: bool, progress: Progress, reports: dict[str, Report]
                       ) -> None:
        configs: dict[Path | None, Config] = {}
        groups: dict[int, tuple[Config, list[closed_files.Found]]] = {}
        opened: list[tuple[str, TextDocument]] = []
        for f in found:
            uri = from_fs_path(str(f.target.path)) or str(f.target.path)
            document = ls.documents.get(uri)
            if document is not None:
                if with_open and isinstance(document, TextDocument):
                    unchanged = _unchanged_open(ls, uri, document, previous.get(uri))
                    if unchanged is not None:
                        reports[uri] = unchanged
                    else:
                        opened.append((uri, document))
                elif with_open and isinstance(document, NotebookDocument):  # its cells are pushed
                    reports[uri] = types.WorkspaceFullDocumentDiagnosticReport(uri=uri, items=[])
                continue
            if f.pyproject not in configs:
                configs[f.pyproject] = ls.folder_configs.of_pyproject(f.pyproject, ls.warn)
            config = configs[f.pyproject]
            result_id = f"disk:{f.stamp}:{ls.config_generation}:{ls.folder_configs.serial(config)}"
            if previous.get(uri) == result_id:
                reports[uri] = types.WorkspaceUnchangedDocumentDiagnosticReport(uri=uri, result_id=result_id)
                continue
            reports[uri] = types.WorkspaceFullDocumentDiagnosticReport(uri=uri, items=[], result_id=result_id)
            groups.setdefault(id(config), (config, []))[1].append(f)
        await progress.begin(len(opened) + sum(len(g) for _, g in groups.values()))
        for uri, document in opened:
            reports[uri] = await _open_report(ls, uri, document)
            progress.advance(1)
        loop = asyncio.get_running_loop()
        for config, group in groups.values():
            assert self.pool is not None  # started by ``collect``
            results, crashes = await closed.analyse(self.pool, group, config, progress.advance)
            for f in group:
                uri = from_fs_path(str(f.target.path)) or str(f.target.path)
                report = reports[uri]
                if f.target.path in results:
                    report.items = await loop.run_in_executor(
                        None, closed.to_lsp, f.target.path, uri, list(results[f.target.path].diagnostics),
                        ls.encoding, config.docs_url)
                else:  # never an empty report for a file that was not analysed
                    why = crashes.get(f.target.path, f"{f.target.display} was not analysed")
                    report.items, report.result_id = [closed.crash_diagnostic(why)], None

    def shutdown(self) -> None:
        if self.push_task is not None:
            self.push_task.cancel()
        if self.pool is not None:
            self.pool.shutdown()


async def _survey(ls: WorkspaceServer, closed: ModuleType) -> list[closed_files.Found]:
    """The files of every workspace folder (the root when the client named no folder), off the event loop."""
    folders = ls.folder_paths() or ([Path(ls.path(ls.workspace.root_uri))] if ls.workspace.root_uri else [])
    excludes = {f: ls.folder_configs.of_pyproject(find_pyproject(f), ls.warn) for f in folders if f.is_dir()}
    return await asyncio.get_running_loop().run_in_executor(None, closed.survey, excludes)


def _open_result_id(ls: WorkspaceServer, uri: str, version: int | None) -> str:
    return f"open:{version}:{ls.config_generation}:{ls.folder_configs.serial(ls.config_for(uri))}"


def _unchanged_open(ls: WorkspaceServer, uri: str, document: TextDocument, previous: str | None) -> Report | None:
    """The unchanged report of an open document whose findings the client has for its current version, if so."""
    version = ls.workspace.get_text_document(uri).version
    result_id = _open_result_id(ls, uri, version)
    if previous != result_id or document.published_version != version:
        return None
    return types.WorkspaceUnchangedDocumentDiagnosticReport(uri=uri, result_id=result_id, version=version)


async def _open_report(ls: WorkspaceServer, uri: str, document: TextDocument) -> Report:
    """An open document's report: its in-editor text, down the server's one analysis path."""
    version = ls.workspace.get_text_document(uri).version
    outcome = await ls.analyse(document)
    if outcome is None:
        return types.WorkspaceFullDocumentDiagnosticReport(uri=uri, items=[], version=version)
    snap, diags = outcome
    items = [lsp for _, lsp in ls.record(document, snap, diags)[uri]]
    ls.release_after_reply(document)
    return types.WorkspaceFullDocumentDiagnosticReport(uri=uri, items=items, version=snap.version,
                                                       result_id=_open_result_id(ls, uri, snap.version))


def register(server: WorkspaceServer, safe: Callable[..., Any]) -> None:
    """Add ``workspace/diagnostic`` and ``workspace/didChangeWorkspaceFolders`` to ``server``."""

    @server.feature(types.WORKSPACE_DIAGNOSTIC)
    @safe(default=types.WorkspaceDiagnosticReport(items=[]))
    async def workspace_diagnostic(ls: WorkspaceServer, params: types.WorkspaceDiagnosticParams
                                   ) -> types.WorkspaceDiagnosticReport:
        ls.reload_if_pyproject_changed()
        return await ls.workspace_diagnostics.pull(ls, params)

    @server.feature(types.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS)
    @safe()
    def did_change_folders(ls: WorkspaceServer, params: types.DidChangeWorkspaceFoldersParams) -> None:
        ls.reanalyse_all()  # pygls has updated ls.workspace: each open file's folder, so configuration, may differ
