"""The gradguard language server: a thin stdio shell (pygls 2) over ``api.analyze_source``.

- Diagnostics, whichever way the client supports: pulled (``textDocument/diagnostic``) by a client that
  declares ``textDocument.diagnostic``, else pushed on open/change/save (debounced, analysed in a thread
  pool, stale results dropped, only published for the version they were computed on).  Never both: a
  client that does both (Neovim 0.10+, VS Code) would show every finding twice.
- A syntax error keeps the last good findings (except those on the error line) and adds GG900.  Kept
  findings follow the edits (their lines shift with insertions/deletions above them; those on edited
  lines are dropped), so their positions and fixes stay valid for the current text.
- Each diagnostic's ``data`` is its JSON (``Diagnostic.to_json``) plus the ``version`` it was computed on.
- Code actions: a diagnostic's own fix when it has one (preferred when safe); suppress a code on its line;
  ``source.fixAll.gradguard`` applying every safe fix at once (also ``workspace/executeCommand``
  ``gradguard.applyAllFixes``).  Every edit names the document version it was computed on, so a client
  refuses it once the text has moved on.
- Fixes need libcst: without it the server says so once (a warning on ``initialized``) and offers no fix
  actions; findings and "suppress" still come.
- Hover over a flagged range: the message, the rule's summary and a link to its docs (``hover.py``: markdown
  only for a client that announces it).
- Configuration: pyproject ``[tool.gradguard]`` of the workspace root, overridden by
  ``initializationOptions`` and ``workspace/didChangeConfiguration`` settings ``{"gradguard": {...}}``
  (keys present replace ``select``/``ignore``; ``severity`` entries are merged).  The pyproject.toml is
  stat'ed on every document event and reloaded when it changed (every open document is re-analysed).
  ``"run": "onSave"`` beside ``"gradguard"`` makes a pushing server analyse on open and save only.  The server registers a
  ``workspace/didChangeWatchedFiles`` watcher for ``**/pyproject.toml`` when the client allows dynamic
  registration, so that a change shows without waiting for the next edit.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from .. import api
from ..config import Config, ConfigError, config_from_table, find_pyproject, load_config_file
from ..diagnostics import SYNTAX_ERROR, Diagnostic, FileResult
from ..fixes import plan
from ..fixes import unavailable as fixes_unavailable
from . import convert, fixes
from . import hover as hover_text
from . import notebooks as notebook_sync

try:  # pragma: no cover - metadata is there when installed
    from importlib.metadata import version as _pkg_version

    VERSION = _pkg_version("gradguard")
except Exception:  # pragma: no cover
    VERSION = "0.0.0"

logger = logging.getLogger("gradguard.lsp")

DEFAULT_DEBOUNCE_SECONDS = 0.075
FIX_ALL_KIND = f"{types.CodeActionKind.SourceFixAll.value}.gradguard"  # source.fixAll.gradguard
FIX_ALL_COMMAND = "gradguard.applyAllFixes"
FIX_ALL_TITLE = "Fix all gradguard issues"
PYPROJECT_GLOB = "**/pyproject.toml"
_IGNORE_COMMENT = re.compile(r"#\s*gradguard:\s*ignore(?P<bracket>\[(?P<codes>[^\]]*)\])?", re.IGNORECASE)


@dataclass
class DocState:
    """What the server remembers about one open document."""

    text: str = ""  # the text the server last saw (to follow edits with ``last_good``)
    last_good: list[Diagnostic] = field(default_factory=list)  # of the last run without a syntax error
    published: list[tuple[Diagnostic, types.Diagnostic]] = field(default_factory=list)
    published_version: int | None = None  # the version ``published`` was computed on
    task: asyncio.Task | None = None
    # The engine's per-function cache for this document (``api.analyze_source(cache=...)``).  Each run
    # gets a copy and the copy of the newest successful run replaces it, so two runs of one document in
    # the pool never share a dict.
    cache: dict = field(default_factory=dict)


def _shift(diag: Diagnostic, first: int, last: int, delta: int) -> Diagnostic | None:
    """``diag`` after lines ``first..last`` (1-based) were replaced by ``last - first + 1 + delta`` lines.

    None when the finding itself is on an edited line.  Related locations and fix edits below the edit
    move with it; a fix that touches the edited lines is dropped.
    """
    span = diag.span
    if span.end_line >= first and span.line <= last:
        return None
    if span.line > last:
        span = replace(span, line=span.line + delta, end_line=span.end_line + delta)
    related = tuple(replace(r, line=r.line + delta) if r.line > last else r for r in diag.related)
    fix = diag.fix
    if fix is not None:
        if any(e.end_line >= first and e.line <= last for e in fix.edits):
            fix = None
        else:
            fix = replace(
                fix,
                edits=tuple(
                    replace(e, line=e.line + delta, end_line=e.end_line + delta) if e.line > last else e
                    for e in fix.edits
                ),
            )
    return replace(diag, span=span, related=related, fix=fix)


def follow_changes(diags: list[Diagnostic], old_text: str, new_text: str, changes: Any) -> list[Diagnostic]:
    """Map findings of ``old_text`` through a didChange's ``changes`` (applied in order) onto ``new_text``.

    A ranged change replaces lines ``start..end``: findings there are dropped, those below shift by the
    change in line count.  Inserting whole lines (at column 0, text ending in a line break) or deleting
    whole lines edits no surviving line.  A whole-document change falls back to ``follow_edit``.
    """
    if not diags:
        return diags
    if any(getattr(c, "range", None) is None for c in changes):
        return follow_edit(diags, old_text, new_text)
    for change in changes:
        start, end, text = change.range.start, change.range.end, change.text
        breaks = len(convert.split_lines(text)) - 1
        first, last = start.line + 1, end.line + 1
        if start.character == 0 and end.character == 0 and (text == "" or text.endswith(("\n", "\r"))):
            last = end.line  # whole lines replaced: line end.line + 1 is untouched
        delta = breaks - (end.line - start.line)
        diags = [moved for d in diags if (moved := _shift(d, first, last, delta)) is not None]
        if not diags:
            break
    return diags


def follow_edit(diags: list[Diagnostic], old_text: str, new_text: str) -> list[Diagnostic]:
    """Map findings of ``old_text`` onto ``new_text``: the lines outside the changed block keep theirs.

    The changed block is what lies between the longest common run of leading and of trailing lines, so
    one edit (or several close together) costs one linear scan, and identical lines keep their findings.
    """
    if not diags or old_text == new_text:
        return diags
    old, new = convert.split_lines(old_text), convert.split_lines(new_text)
    prefix, limit = 0, min(len(old), len(new))
    while prefix < limit and old[prefix] == new[prefix]:
        prefix += 1
    suffix = 0
    while suffix < limit - prefix and old[-1 - suffix] == new[-1 - suffix]:
        suffix += 1
    first, last = prefix + 1, len(old) - suffix  # 1-based, inclusive; last < first for a pure insertion
    delta = (len(new) - suffix - prefix) - (len(old) - suffix - prefix)
    if last < first:  # pure insertion between lines prefix and prefix+1: nothing edited, shift below
        last = first - 1
    kept = []
    for d in diags:
        moved = _shift(d, first, last, delta)
        if moved is not None:
            kept.append(moved)
    return kept


class GradguardServer(LanguageServer):
    def __init__(self, debounce: float = DEFAULT_DEBOUNCE_SECONDS) -> None:
        super().__init__(
            "gradguard",
            VERSION,
            text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
            notebook_document_sync=notebook_sync.SYNC_OPTIONS,
        )
        self.debounce = debounce
        self.docs: dict[str, DocState] = {}
        self.file_config = Config()
        self.overrides: dict[str, Any] = {}
        self.config = Config()
        self.executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="gradguard-analysis")
        self.pull_mode = False  # the client pulls diagnostics (textDocument/diagnostic): never push
        self.refresh_support = False  # ... and accepts workspace/diagnostic/refresh
        self.config_generation = 0  # bumped on every configuration change (part of pull result ids)
        self.run_on_type = True  # push mode: analyse on every change, or (``"run": "onSave"``) on open/save only
        self.pyproject_stamp: tuple[int, int, int] | None = None  # of the pyproject.toml ``file_config`` came from

    def set_run(self, options: Any) -> None:
        """``{"run": "onType" | "onSave", ...}`` beside ``"gradguard"`` in initializationOptions or settings."""
        run = options.get("run") if isinstance(options, dict) else None
        if run in ("onType", "onSave"):
            self.run_on_type = run == "onType"
        elif run is not None:
            self.warn(f'"run" must be "onType" or "onSave", not {run!r}')
        probe_support.support(self).configure(self, options)  # "probe" and "trusted", beside "run"

    def set_client_capabilities(self, caps: types.ClientCapabilities | None) -> None:
        text_document = caps.text_document if caps is not None else None
        workspace = caps.workspace if caps is not None else None
        self.pull_mode = text_document is not None and text_document.diagnostic is not None
        self.refresh_support = bool(workspace and workspace.diagnostics and workspace.diagnostics.refresh_support)

    def can_watch_files(self) -> bool:
        caps = self.client_capabilities
        watched = caps.workspace.did_change_watched_files if caps and caps.workspace else None
        return bool(watched and watched.dynamic_registration)

    # ---- configuration -------------------------------------------------------------
    def warn(self, message: str) -> None:
        logger.warning(message)
        try:
            self.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning, message=f"gradguard: {message}"))
        except Exception:  # pragma: no cover - no client attached
            logger.exception("cannot show a message")

    def _pyproject(self) -> tuple[Path | None, tuple[int, int, int] | None]:
        """The workspace's pyproject.toml and its (mtime, size, inode): a few ``stat`` calls."""
        try:
            root = self.workspace.root_path
        except Exception:
            root = None
        pyproject = find_pyproject(Path(root)) if root else None
        try:
            st = pyproject.stat() if pyproject is not None else None
        except OSError:
            st = None
        return pyproject, (st.st_mtime_ns, st.st_size, st.st_ino) if st is not None else None

    def load_file_config(self) -> None:
        pyproject, self.pyproject_stamp = self._pyproject()
        try:
            self.file_config = load_config_file(pyproject) if pyproject is not None else Config()
        except ConfigError as exc:
            self.warn(f"ignoring pyproject configuration: {exc}")
            self.file_config = Config()

    def reload_if_pyproject_changed(self) -> None:
        """Reload ``[tool.gradguard]`` and re-analyse when the pyproject.toml changed on disk.

        Called on every document event, so that an edited pyproject.toml takes effect in every editor,
        also in those that cannot watch files for the server (Neovim on Linux has no
        ``workspace/didChangeWatchedFiles`` dynamic registration); a few stats, no read when unchanged.
        """
        if self._pyproject()[1] == self.pyproject_stamp:
            return
        self.load_file_config()
        self.set_overrides(self.overrides)
        self.reanalyse_all()

    def set_overrides(self, table: Any) -> None:
        if isinstance(table, dict) and isinstance(table.get("gradguard"), dict):
            table = table["gradguard"]
        if table is None:
            table = {}
        if not isinstance(table, dict):
            self.warn("settings must be an object like {\"select\": [...], \"ignore\": [...]}; using defaults")
            table = {}
        try:
            parsed = config_from_table(table)
        except ConfigError as exc:
            self.warn(f"ignoring editor settings: {exc}")
            table, parsed = {}, Config()
        self.overrides = table
        self.config = self.file_config.with_overrides(
            select=parsed.select if "select" in table else None,
            ignore=parsed.ignore if "ignore" in table else None,
            severity=parsed.severity,
            docs_url=parsed.docs_url,
        )

    def reanalyse_all(self) -> None:
        """The configuration changed: findings of every open document may be stale."""
        self.config_generation += 1
        notebook_sync.reanalyse_all(self)
        for uri, state in list(self.docs.items()):
            state.last_good = []
            state.cache = {}
            if not self.pull_mode:
                self.schedule(uri, delay=0)
        if self.pull_mode and self.refresh_support:
            try:
                self.workspace_diagnostic_refresh(None)
            except Exception:  # pragma: no cover - a client that cannot take it
                logger.exception("workspace/diagnostic/refresh failed")

    # ---- analysis ------------------------------------------------------------------
    @property
    def encoding(self) -> str:
        return self.workspace.position_encoding or types.PositionEncodingKind.Utf16

    def _path(self, uri: str) -> str:
        return to_fs_path(uri) or uri

    async def analyse(self, uri: str) -> tuple[int | None, list[Diagnostic], str] | None:
        """Analyse the current text of ``uri`` off the event loop; (version, merged findings, text)."""
        if uri not in self.docs:
            return None
        doc = self.workspace.get_text_document(uri)
        text, version, config = doc.source, doc.version, self.config
        cache = dict(self.docs[uri].cache)
        loop = asyncio.get_running_loop()
        result: FileResult = await loop.run_in_executor(
            self.executor, functools.partial(api.analyze_source, text, self._path(uri), config, cache=cache)
        )
        state = self.docs.get(uri)
        if state is None:
            return None
        current = self.workspace.get_text_document(uri).version == version and config is self.config
        syntax = [d for d in result.diagnostics if d.code == SYNTAX_ERROR]
        if result.error is not None and syntax:
            bad_lines = {d.line for d in syntax}
            merged = [d for d in state.last_good if d.line not in bad_lines] + syntax
        else:
            merged = list(result.diagnostics)
            if current:
                state.last_good = merged
                state.cache = cache
        return version, merged, text

    def text_changed(self, uri: str, changes: Any) -> None:
        """Move the kept findings of ``uri`` along with the edits just applied to its text."""
        state = self.docs.get(uri)
        if state is None:
            return
        new_text = self.workspace.get_text_document(uri).source
        state.last_good = follow_changes(state.last_good, state.text, new_text, changes)
        state.text = new_text

    def publishable(self, uri: str, version: int | None, text: str, diags: list[Diagnostic]) -> list[types.Diagnostic]:
        """Record what the client is shown for ``uri`` (hover and fix-all read it) and return it."""
        state = self.docs.get(uri)
        diags = probe_support.publishable(self, uri, text, diags)  # the runtime probe's result for this text
        pairs = self.to_lsp(uri, text, diags, version)
        probe_support.mark_sources(pairs)
        if state is not None:
            state.published, state.published_version = pairs, version
        return [l for _, l in pairs]

    def to_lsp(
        self, uri: str, text: str, diags: list[Diagnostic], version: int | None = None
    ) -> list[tuple[Diagnostic, types.Diagnostic]]:
        lines = convert.split_lines(text)
        pairs = []
        for d in diags:
            lsp = convert.to_lsp_diagnostic(d, uri, lines, self.encoding, self.config.docs_url)
            if isinstance(lsp.data, dict):
                lsp.data["version"] = version
            pairs.append((d, lsp))
        return pairs

    def schedule(self, uri: str, delay: float | None = None) -> None:
        state = self.docs.get(uri)
        if state is None or self.pull_mode:
            return
        if state.task is not None and not state.task.done():
            state.task.cancel()
        state.task = asyncio.get_running_loop().create_task(self._run(uri, self.debounce if delay is None else delay))

    async def _run(self, uri: str, delay: float) -> None:
        try:
            if delay > 0:
                await asyncio.sleep(delay)
            outcome = await self.analyse(uri)
            if outcome is None:
                return
            version, diags, text = outcome
            state = self.docs.get(uri)
            if state is None or self.workspace.get_text_document(uri).version != version:
                return  # closed or edited meanwhile: a newer run will publish
            self.text_document_publish_diagnostics(
                types.PublishDiagnosticsParams(uri=uri, version=version, diagnostics=self.publishable(uri, version, text, diags))
            )
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("analysis of %s failed", uri)


server = GradguardServer()


def _safe(default: Any = None) -> Callable:
    """Log any exception of a handler and return ``default``: a handler never kills the server."""

    def wrap(fn: Callable) -> Callable:
        if asyncio.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def run_async(*args: Any) -> Any:
                try:
                    return await fn(*args)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    logger.exception("%s failed", fn.__name__)
                    return default

            return run_async

        @functools.wraps(fn)
        def run(*args: Any) -> Any:
            try:
                return fn(*args)
            except Exception:
                logger.exception("%s failed", fn.__name__)
                return default

        return run

    return wrap


notebook_sync.register(server, _safe)  # notebookDocument/didOpen|didChange|didSave|didClose


# ---- lifecycle and configuration -----------------------------------------------------
@server.feature(types.INITIALIZE)
@_safe()
def initialize(ls: GradguardServer, params: types.InitializeParams) -> None:
    ls.set_client_capabilities(params.capabilities)
    ls.load_file_config()
    ls.set_overrides(params.initialization_options)
    ls.set_run(params.initialization_options)


@server.feature(types.INITIALIZED)
@_safe()
async def initialized(ls: GradguardServer, params: types.InitializedParams) -> None:
    if fixes_unavailable() is not None:  # findings still come; their fixes (and fix-all) cannot
        ls.warn(f"fixes are unavailable: {fixes_unavailable()}")
    if ls.can_watch_files():
        await ls.client_register_capability_async(
            types.RegistrationParams(
                registrations=[
                    types.Registration(
                        id="gradguard-pyproject-watcher",
                        method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                        register_options=types.DidChangeWatchedFilesRegistrationOptions(
                            watchers=[types.FileSystemWatcher(glob_pattern=PYPROJECT_GLOB)]
                        ),
                    )
                ]
            )
        )


@server.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
@_safe()
def did_change_watched_files(ls: GradguardServer, params: types.DidChangeWatchedFilesParams) -> None:
    if not any(c.uri.rsplit("/", 1)[-1] == "pyproject.toml" for c in params.changes):
        return
    ls.load_file_config()
    ls.set_overrides(ls.overrides)
    ls.reanalyse_all()


@server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
@_safe()
def did_change_configuration(ls: GradguardServer, params: types.DidChangeConfigurationParams) -> None:
    settings = params.settings
    if isinstance(settings, dict) and "gradguard" in settings:
        ls.set_run(settings)
        ls.load_file_config()
        ls.set_overrides(settings["gradguard"])
        ls.reanalyse_all()


@server.feature(types.SHUTDOWN)
@_safe()
def shutdown(ls: GradguardServer, params: Any = None) -> None:
    for state in ls.docs.values():
        if state.task is not None:
            state.task.cancel()
    notebook_sync.shutdown(ls)
    ls.executor.shutdown(wait=False, cancel_futures=True)
    probe_support.support(ls).shutdown()


# ---- text synchronisation ----------------------------------------------------------
@server.feature(types.TEXT_DOCUMENT_DID_OPEN)
@_safe()
def did_open(ls: GradguardServer, params: types.DidOpenTextDocumentParams) -> None:
    ls.reload_if_pyproject_changed()
    state = ls.docs.setdefault(params.text_document.uri, DocState())
    state.text = ls.workspace.get_text_document(params.text_document.uri).source
    ls.schedule(params.text_document.uri, delay=0)


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
@_safe()
def did_change(ls: GradguardServer, params: types.DidChangeTextDocumentParams) -> None:
    ls.reload_if_pyproject_changed()
    ls.text_changed(params.text_document.uri, params.content_changes)
    if ls.run_on_type:
        ls.schedule(params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_SAVE)
@_safe()
def did_save(ls: GradguardServer, params: types.DidSaveTextDocumentParams) -> None:
    ls.reload_if_pyproject_changed()  # also a pyproject.toml saved in an editor that sends it to us
    ls.schedule(params.text_document.uri, delay=0)
    probe_support.support(ls).on_save(ls, params.text_document.uri)  # only when enabled and trusted


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
@_safe()
def did_close(ls: GradguardServer, params: types.DidCloseTextDocumentParams) -> None:
    uri = params.text_document.uri
    state = ls.docs.pop(uri, None)
    if state is not None and state.task is not None:
        state.task.cancel()
    if not ls.pull_mode:
        ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))


# ---- pull diagnostics ----------------------------------------------------------------
@server.feature(
    types.TEXT_DOCUMENT_DIAGNOSTIC,
    types.DiagnosticOptions(identifier="gradguard", inter_file_dependencies=False, workspace_diagnostics=False),
)
@_safe(default=types.RelatedFullDocumentDiagnosticReport(items=[]))
async def pull_diagnostics(
    ls: GradguardServer, params: types.DocumentDiagnosticParams
) -> types.RelatedFullDocumentDiagnosticReport | types.RelatedUnchangedDocumentDiagnosticReport:
    uri = params.text_document.uri
    ls.reload_if_pyproject_changed()
    state = ls.docs.get(uri)
    if state is None:
        return types.RelatedFullDocumentDiagnosticReport(items=[])
    version = ls.workspace.get_text_document(uri).version
    result_id = f"{version}:{ls.config_generation}"
    if params.previous_result_id == result_id and state.published_version == version:
        return types.RelatedUnchangedDocumentDiagnosticReport(result_id=result_id)
    outcome = None
    for _ in range(5):  # the text may change while it is analysed: answer for the newest version
        outcome = await ls.analyse(uri)
        if outcome is None or uri not in ls.docs:
            return types.RelatedFullDocumentDiagnosticReport(items=[])
        if outcome[0] == ls.workspace.get_text_document(uri).version:
            break
    assert outcome is not None
    version, diags, text = outcome
    items = ls.publishable(uri, version, text, diags)
    return types.RelatedFullDocumentDiagnosticReport(items=items, result_id=f"{version}:{ls.config_generation}")


# ---- hover ---------------------------------------------------------------------------
@server.feature(types.TEXT_DOCUMENT_HOVER)
@_safe()
def hover(ls: GradguardServer, params: types.HoverParams) -> types.Hover | None:
    state = ls.docs.get(params.text_document.uri)
    shown = state.published if state is not None else notebook_sync.published(ls, params.text_document.uri)
    if shown is None:
        return None
    return hover_text.hover(shown, params.position, ls.client_capabilities, ls.config.docs_url)


# ---- code actions --------------------------------------------------------------------
def _suppress_edit(line_text: str, line0: int, code: str, encoding: str) -> types.TextEdit | None:
    """Add ``code`` to the line's ``# gradguard: ignore[...]`` comment, or append one."""
    stripped = line_text.rstrip()
    if stripped.endswith("\\"):
        return None  # a comment after a line continuation would break the code
    m = _IGNORE_COMMENT.search(line_text)
    if m is not None:
        if m.group("bracket") is None:
            return None  # a bare ignore already silences everything
        codes = [c.strip() for c in m.group("codes").split(",") if c.strip()]
        if code in (c.upper() for c in codes):
            return None
        new_inner = ", ".join([*codes, code])
        start = convert.code_units(line_text[: m.start("codes")], encoding)
        end = convert.code_units(line_text[: m.end("codes")], encoding)
        rng = types.Range(start=types.Position(line=line0, character=start), end=types.Position(line=line0, character=end))
        return types.TextEdit(range=rng, new_text=new_inner)
    start = convert.code_units(stripped, encoding)
    end = convert.code_units(line_text, encoding)
    rng = types.Range(start=types.Position(line=line0, character=start), end=types.Position(line=line0, character=end))
    return types.TextEdit(range=rng, new_text=f"  # gradguard: ignore[{code}]")


def _workspace_edit(uri: str, version: int | None, edits: list[types.TextEdit]) -> types.WorkspaceEdit:
    return types.WorkspaceEdit(
        document_changes=[
            types.TextDocumentEdit(
                text_document=types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version),
                edits=edits,
            )
        ]
    )


def _kind_matches(kind: str, only: Any) -> bool:
    """LSP kind filtering: ``kind`` is asked for when some entry of ``only`` is it or a prefix of it."""
    if not only:
        return True
    return any(kind == str(k) or kind.startswith(f"{k}.") for k in only)


async def fix_all_edit(ls: GradguardServer, uri: str) -> tuple[types.WorkspaceEdit | None, plan.Plan | None]:
    """One versioned WorkspaceEdit making every safe fix of ``uri`` (None if none), and the plan it came from.

    The fixes are chosen by the planner ``gradguard check --fix`` uses (``lsp/fixes.py``), re-analysing in the
    pool until none is left; its first pass starts from the findings published for the current version when
    there are.  A text with a syntax error gets no fix-all: the kept findings' fixes are for regions the parser
    could not check.
    """
    state = ls.docs.get(uri)
    if state is None:
        return None, None
    doc = ls.workspace.get_text_document(uri)
    text, version, config, path = doc.source, doc.version, ls.config, ls._path(uri)
    cache = dict(state.cache)
    analyse = functools.partial(api.analyze_source, path=path, config=config, cache=cache)
    loop = asyncio.get_running_loop()
    if state.published_version == version and version is not None:
        known = [d for d, _ in state.published]
    else:
        known = list((await loop.run_in_executor(ls.executor, analyse, text)).diagnostics)
    if any(d.code == SYNTAX_ERROR for d in known):
        return None, None
    done = await loop.run_in_executor(ls.executor, fixes.fix_all, text, analyse, known)
    if not done.changed:
        return None, done
    edits = convert.fix_to_text_edits({"edits": fixes.edits_between(done.original, done.text)}, convert.split_lines(text), ls.encoding)
    return _workspace_edit(uri, version, edits), done


@server.feature(
    types.TEXT_DOCUMENT_CODE_ACTION,
    types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL_KIND]),
)
@_safe(default=[])
async def code_action(ls: GradguardServer, params: types.CodeActionParams) -> list[types.CodeAction]:
    uri = params.text_document.uri
    if uri not in ls.docs:
        return await notebook_sync.code_actions(ls, params) or []
    only = params.context.only
    actions: list[types.CodeAction] = []
    if _kind_matches(types.CodeActionKind.QuickFix.value, only):
        actions.extend(quick_fixes(ls, uri, params.context.diagnostics))
    if _kind_matches(FIX_ALL_KIND, only):
        edit, _ = await fix_all_edit(ls, uri)
        if edit is not None:
            actions.append(
                types.CodeAction(
                    title=FIX_ALL_TITLE,
                    kind=FIX_ALL_KIND,
                    edit=edit,
                )
            )
    return actions


def quick_fixes(ls: GradguardServer, uri: str, diagnostics: Any) -> list[types.CodeAction]:
    """The diagnostic's own fix, then "suppress on this line", for each gradguard diagnostic given.

    A diagnostic published for an older version than the text's is skipped: its positions are stale
    (a fresh publish is on its way).
    """
    doc = ls.workspace.get_text_document(uri)
    lines = convert.split_lines(doc.source)
    encoding = ls.encoding
    actions: list[types.CodeAction] = []
    seen: set[tuple[int, str]] = set()
    state = ls.docs.get(uri)
    shown = [d for _, d in state.published] if state is not None else []
    for diag, data, code in convert.actionable(diagnostics, shown, doc.version):
        fix = data.get("fix")
        if isinstance(fix, dict) and fix.get("edits"):
            actions.append(
                types.CodeAction(
                    title=str(fix.get("title") or f"Fix {code}"),
                    kind=types.CodeActionKind.QuickFix,
                    diagnostics=[diag],
                    is_preferred=fix.get("safe") is True,
                    edit=_workspace_edit(uri, doc.version, convert.fix_to_text_edits(fix, lines, encoding)),
                )
            )
        line0 = diag.range.start.line
        if not 0 <= line0 < len(lines) or (line0, code) in seen:
            continue
        seen.add((line0, code))
        edit = _suppress_edit(lines[line0], line0, code, encoding)
        if edit is None:
            continue
        actions.append(
            types.CodeAction(
                title=f"Suppress {code} on this line",
                kind=types.CodeActionKind.QuickFix,
                diagnostics=[diag],
                edit=_workspace_edit(uri, doc.version, [edit]),
            )
        )
    return actions


@server.command(FIX_ALL_COMMAND)
@_safe(default={"applied": False, "fixes": 0})
async def apply_all_fixes(ls: GradguardServer, *args: Any) -> dict[str, Any]:
    """``gradguard.applyAllFixes`` with argument ``uri`` (or ``{"uri": ...}``): apply every safe fix.

    Sends one ``workspace/applyEdit``; returns ``{"applied": bool, "fixes": n, "skipped": m}``.
    """
    target = args[0] if args else None
    if isinstance(target, dict):
        target = target.get("uri")
    if not isinstance(target, str) or target not in ls.docs:
        ls.warn(f"{FIX_ALL_COMMAND}: pass the URI of an open document")
        return {"applied": False, "fixes": 0, "skipped": 0}
    edit, done = await fix_all_edit(ls, target)
    skipped = fixes.left_over(done) if done is not None else 0
    if edit is None:
        return {"applied": False, "fixes": 0, "skipped": skipped}
    response = await ls.workspace_apply_edit_async(types.ApplyWorkspaceEditParams(edit=edit, label=FIX_ALL_TITLE))
    applied = bool(getattr(response, "applied", False))
    return {"applied": applied, "fixes": len(done.applied) if applied else 0, "skipped": skipped}


from . import probe_support  # gradguard.probe command, "Confirm with probe" code lens, probe on save

probe_support.register(server)


def main(argv: list[str] | None = None) -> int:
    """Serve LSP on stdin/stdout (``gradguard lsp`` / ``python -m gradguard.lsp``)."""
    logging.basicConfig(level=os.environ.get("GRADGUARD_LOG_LEVEL", "WARNING"), format="gradguard-lsp %(levelname)s %(message)s")
    debounce_ms = os.environ.get("GRADGUARD_LSP_DEBOUNCE_MS")
    if debounce_ms:
        try:
            server.debounce = max(0.0, float(debounce_ms) / 1000)
        except ValueError:
            logger.warning("ignoring GRADGUARD_LSP_DEBOUNCE_MS=%r", debounce_ms)
    tune_garbage_collector()
    server.start_io()
    return 0


def tune_garbage_collector() -> None:
    """Every analysis allocates a tree of some 100k nodes per 3,000 lines, and CPython's default thresholds
    then run a full collection every few edits: 80-120 ms pauses that made the keystroke p95 ~140 ms in
    process (p50 ~25 ms).  Objects alive at start-up (the imported modules) are frozen out of collections and
    collections run less often: p95 ~60 ms (``bench/bench_lsp.py``).  Nothing relies on cycles being freed
    promptly; memory is bounded by the documents open."""
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 50, 100)
