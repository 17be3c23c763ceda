"""The gradguard language server: a thin stdio shell (pygls 2) over ``api.analyze_source``.

- Push diagnostics on open/change/save (debounced, analysed in a thread pool, stale
  results dropped) and pull diagnostics (``textDocument/diagnostic``).
- A syntax error keeps the last good findings (except those on the error line) and adds GG900.
- Code actions: suppress a code on its line; a diagnostic's own fix when it has one.
- Hover over a flagged range: the message, the rule's summary and a link to its docs.
- Configuration: pyproject ``[tool.gradguard]`` of the workspace root, overridden by
  ``initializationOptions`` and ``workspace/didChangeConfiguration`` settings ``{"gradguard": {...}}``
  (keys present replace ``select``/``ignore``; ``severity`` entries are merged).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from .. import api
from ..config import Config, ConfigError, config_from_table, load_config
from ..diagnostics import SYNTAX_ERROR, Diagnostic, FileResult
from ..rules import RULES_BY_CODE
from . import convert

try:  # pragma: no cover - metadata is there when installed
    from importlib.metadata import version as _pkg_version

    VERSION = _pkg_version("gradguard")
except Exception:  # pragma: no cover
    VERSION = "0.0.0"

logger = logging.getLogger("gradguard.lsp")

DEFAULT_DEBOUNCE_SECONDS = 0.075
_IGNORE_COMMENT = re.compile(r"#\s*gradguard:\s*ignore(?P<bracket>\[(?P<codes>[^\]]*)\])?", re.IGNORECASE)


@dataclass
class DocState:
    """What the server remembers about one open document."""

    last_good: list[Diagnostic] = field(default_factory=list)  # of the last run without a syntax error
    published: list[tuple[Diagnostic, types.Diagnostic]] = field(default_factory=list)
    task: asyncio.Task | None = None


class GradguardServer(LanguageServer):
    def __init__(self, debounce: float = DEFAULT_DEBOUNCE_SECONDS) -> None:
        super().__init__("gradguard", VERSION, text_document_sync_kind=types.TextDocumentSyncKind.Incremental)
        self.debounce = debounce
        self.docs: dict[str, DocState] = {}
        self.file_config = Config()
        self.overrides: dict[str, Any] = {}
        self.config = Config()
        self.executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="gradguard-analysis")

    # ---- configuration -------------------------------------------------------------
    def warn(self, message: str) -> None:
        logger.warning(message)
        try:
            self.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning, message=f"gradguard: {message}"))
        except Exception:  # pragma: no cover - no client attached
            logger.exception("cannot show a message")

    def load_file_config(self) -> None:
        root = None
        try:
            root = self.workspace.root_path
        except Exception:
            pass
        try:
            self.file_config = load_config(Path(root)) if root else Config()
        except ConfigError as exc:
            self.warn(f"ignoring pyproject configuration: {exc}")
            self.file_config = Config()

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
        )

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
        loop = asyncio.get_running_loop()
        result: FileResult = await loop.run_in_executor(
            self.executor, functools.partial(api.analyze_source, text, self._path(uri), config)
        )
        state = self.docs.get(uri)
        if state is None:
            return None
        syntax = [d for d in result.diagnostics if d.code == SYNTAX_ERROR]
        if result.error is not None and syntax:
            bad_lines = {d.line for d in syntax}
            merged = [d for d in state.last_good if d.line not in bad_lines] + syntax
        else:
            merged = list(result.diagnostics)
            if self.workspace.get_text_document(uri).version == version:
                state.last_good = merged
        return version, merged, text

    def to_lsp(self, uri: str, text: str, diags: list[Diagnostic]) -> list[tuple[Diagnostic, types.Diagnostic]]:
        lines = convert.split_lines(text)
        return [(d, convert.to_lsp_diagnostic(d, uri, lines, self.encoding)) for d in diags]

    def schedule(self, uri: str, delay: float | None = None) -> None:
        state = self.docs.get(uri)
        if state is None:
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
            state.published = self.to_lsp(uri, text, diags)
            self.text_document_publish_diagnostics(
                types.PublishDiagnosticsParams(uri=uri, version=version, diagnostics=[l for _, l in state.published])
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


# ---- lifecycle and configuration -----------------------------------------------------
@server.feature(types.INITIALIZE)
@_safe()
def initialize(ls: GradguardServer, params: types.InitializeParams) -> None:
    ls.load_file_config()
    ls.set_overrides(params.initialization_options)


@server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
@_safe()
def did_change_configuration(ls: GradguardServer, params: types.DidChangeConfigurationParams) -> None:
    settings = params.settings
    if isinstance(settings, dict) and "gradguard" in settings:
        ls.load_file_config()
        ls.set_overrides(settings["gradguard"])
        for uri in list(ls.docs):
            ls.docs[uri].last_good = []
            ls.schedule(uri, delay=0)


@server.feature(types.SHUTDOWN)
@_safe()
def shutdown(ls: GradguardServer, params: Any = None) -> None:
    for state in ls.docs.values():
        if state.task is not None:
            state.task.cancel()
    ls.executor.shutdown(wait=False, cancel_futures=True)


# ---- text synchronisation ----------------------------------------------------------
@server.feature(types.TEXT_DOCUMENT_DID_OPEN)
@_safe()
def did_open(ls: GradguardServer, params: types.DidOpenTextDocumentParams) -> None:
    ls.docs.setdefault(params.text_document.uri, DocState())
    ls.schedule(params.text_document.uri, delay=0)


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
@_safe()
def did_change(ls: GradguardServer, params: types.DidChangeTextDocumentParams) -> None:
    ls.schedule(params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_SAVE)
@_safe()
def did_save(ls: GradguardServer, params: types.DidSaveTextDocumentParams) -> None:
    ls.schedule(params.text_document.uri, delay=0)


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
@_safe()
def did_close(ls: GradguardServer, params: types.DidCloseTextDocumentParams) -> None:
    uri = params.text_document.uri
    state = ls.docs.pop(uri, None)
    if state is not None and state.task is not None:
        state.task.cancel()
    ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))


# ---- pull diagnostics ----------------------------------------------------------------
@server.feature(
    types.TEXT_DOCUMENT_DIAGNOSTIC,
    types.DiagnosticOptions(identifier="gradguard", inter_file_dependencies=False, workspace_diagnostics=False),
)
@_safe(default=types.RelatedFullDocumentDiagnosticReport(items=[]))
async def pull_diagnostics(ls: GradguardServer, params: types.DocumentDiagnosticParams) -> types.RelatedFullDocumentDiagnosticReport:
    uri = params.text_document.uri
    outcome = await ls.analyse(uri)
    if outcome is None:
        return types.RelatedFullDocumentDiagnosticReport(items=[])
    _, diags, text = outcome
    return types.RelatedFullDocumentDiagnosticReport(items=[l for _, l in ls.to_lsp(uri, text, diags)])


# ---- hover ---------------------------------------------------------------------------
def _contains(rng: types.Range, pos: types.Position) -> bool:
    return (rng.start.line, rng.start.character) <= (pos.line, pos.character) <= (rng.end.line, rng.end.character)


@server.feature(types.TEXT_DOCUMENT_HOVER)
@_safe()
def hover(ls: GradguardServer, params: types.HoverParams) -> types.Hover | None:
    state = ls.docs.get(params.text_document.uri)
    if state is None:
        return None
    hits = [(d, l) for d, l in state.published if _contains(l.range, params.position)]
    if not hits:
        return None
    parts = []
    for diag, _ in hits:
        rule = RULES_BY_CODE.get(diag.code)
        if rule is None:
            parts.append(f"**gradguard {diag.code}**: {diag.message}")
        else:
            parts.append(
                f"**gradguard {rule.code} `{rule.name}`**: {diag.message}\n\n"
                f"{rule.summary}\n\n[{rule.code} documentation]({rule.url})"
            )
    return types.Hover(
        contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value="\n\n---\n\n".join(parts)),
        range=hits[0][1].range,
    )


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


@server.feature(
    types.TEXT_DOCUMENT_CODE_ACTION,
    types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix]),
)
@_safe(default=[])
def code_action(ls: GradguardServer, params: types.CodeActionParams) -> list[types.CodeAction]:
    uri = params.text_document.uri
    if uri not in ls.docs:
        return []
    only = params.context.only
    if only and not any(k == types.CodeActionKind.QuickFix or str(k).startswith("quickfix") for k in only):
        return []
    doc = ls.workspace.get_text_document(uri)
    lines = convert.split_lines(doc.source)
    encoding = ls.encoding
    actions: list[types.CodeAction] = []
    seen: set[tuple[int, str]] = set()
    for diag in params.context.diagnostics:
        if diag.source != convert.SOURCE or not isinstance(diag.data, dict):
            continue
        data = diag.data
        code = str(data.get("code") or diag.code or "")
        if not code or code == SYNTAX_ERROR:
            continue
        fix = data.get("fix")
        if isinstance(fix, dict) and fix.get("edits"):
            actions.append(
                types.CodeAction(
                    title=str(fix.get("title") or f"Fix {code}"),
                    kind=types.CodeActionKind.QuickFix,
                    diagnostics=[diag],
                    is_preferred=bool(fix.get("safe")),
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


def main(argv: list[str] | None = None) -> int:
    """Serve LSP on stdin/stdout (``gradguard lsp`` / ``python -m gradguard.lsp``)."""
    logging.basicConfig(level=os.environ.get("GRADGUARD_LOG_LEVEL", "WARNING"), format="gradguard-lsp %(levelname)s %(message)s")
    debounce_ms = os.environ.get("GRADGUARD_LSP_DEBOUNCE_MS")
    if debounce_ms:
        try:
            server.debounce = max(0.0, float(debounce_ms) / 1000)
        except ValueError:
            logger.warning("ignoring GRADGUARD_LSP_DEBOUNCE_MS=%r", debounce_ms)
    server.start_io()
    return 0
