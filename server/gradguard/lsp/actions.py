"""Code actions, the same for a text file and a notebook cell: a diagnostic's own fix (preferred when safe),
"suppress" a code on its line, ``source.fixAll.gradguard`` (also ``gradguard.applyAllFixes``) applying every
safe fix of the document (of the cell, for a notebook) as the fix planner of ``gradguard check --fix`` chooses
them, and for a notebook ``notebook.source.fixAll.gradguard``: the same planner over every cell at once.

Listing is cheap: each action carries only a small ``data`` (the uri, the document's version, which action) and
its edit is made by ``codeAction/resolve`` (the planner runs only for the fix-all actually chosen).  The fixes of
a text file's findings are not built by its analysis: listing builds those of the diagnostics asked about (their
titles, safe or not), once per published version (``GradguardServer.fixes_of``), and resolve reads them.  A client
that does not announce ``codeAction.resolveSupport`` for ``edit`` gets the edits at once.
A ``data`` of an older version than the document's resolves to no edit, never to a wrong one; every edit also
names the version of the part it was computed on.  Without libcst no fix is offered; "suppress" still is.

Part of the fix layer, loaded on first use (``on_demand.py``); what it needs of the server is ``ActionServer``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from concurrent.futures import Executor
from typing import Any, Protocol

from lsprotocol import types
from pygls.workspace import Workspace

from ..config import Config
from ..diagnostics import SYNTAX_ERROR
from ..autofix import plan
from ..fixes import unavailable
from ..suppressions import add_code
from ..text import code_units, split_lines, text_digest
from . import convert, fixes
from .convert import FIX_ALL_KIND, NOTEBOOK_FIX_ALL_KIND, PROBE_SOURCE
from .documents import Document, FixData, FixKey, data_key, too_large

FIX_ALL_TITLE = "Fix all gradguard issues"
NOTEBOOK_FIX_ALL_TITLE = "Fix all gradguard issues in the notebook"
FIX, SUPPRESS, FIX_ALL, NOTEBOOK_FIX_ALL = "fix", "suppress", "fixAll", "notebookFixAll"  # data["action"]


class ActionServer(Protocol):
    """What code actions need of the language server (``server.GradguardServer`` is one)."""

    executor: Executor

    @property
    def workspace(self) -> Workspace: ...

    @property
    def client_capabilities(self) -> types.ClientCapabilities | None: ...

    @property
    def encoding(self) -> str: ...

    def path(self, uri: str) -> str: ...

    def config_for(self, uri: str) -> Config: ...

    def document_of(self, uri: str) -> Document | None: ...

    async def fixes_of(self, document: Document, uri: str, keys: Iterable[FixKey]) -> dict[FixKey, FixData]: ...


def _document_edit(uri: str, version: int | None, edits: list[types.TextEdit]) -> types.TextDocumentEdit:
    return types.TextDocumentEdit(
        text_document=types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version), edits=edits
    )


def suppress_edit(line_text: str, line0: int, code: str, encoding: str) -> types.TextEdit | None:
    """Add ``code`` to the line's ``# gradguard: ignore[...]`` comment, or append one (``suppressions``)."""
    found = add_code(line_text, code)
    if found is None:
        return None
    start, end, new_text = found
    rng = types.Range(start=types.Position(line=line0, character=code_units(line_text[:start], encoding)),
                      end=types.Position(line=line0, character=code_units(line_text[:end], encoding)))
    return types.TextEdit(range=rng, new_text=new_text)


def fix_edit(ls: ActionServer, fix: dict[str, Any], uri: str, version: int | None) -> types.WorkspaceEdit | None:
    """A fix of a diagnostic's data as one edit: each edit is in the part its ``uri`` and ``version`` name (a
    notebook cell's), or in the file its ``uri`` names when it carries the ``base`` of that file's text (a finding
    placed in another module: that document's version when open, and no edit unless its text, open or on disk, is
    still the one the fix was made for), else in the diagnostic's own document ``uri`` at ``version``."""
    by_part: dict[str, list[dict[str, Any]]] = {}
    versions: dict[str, int | None] = {}
    for edit in fix.get("edits") or []:
        if not isinstance(edit, dict):
            return None
        part = edit.get("uri", uri)
        if not isinstance(part, str):
            return None
        by_part.setdefault(part, []).append(edit)
        versions[part] = edit.get("version", version)
    changes = []
    for part, edits in by_part.items():
        base = edits[0].get("base")  # an edit of another module of the project: of the text it was made for
        if base is not None:
            doc = ls.workspace.get_text_document(part)  # the open document's text, else the file's
            try:
                if text_digest(doc.source) != base:
                    return None  # that file changed since: no edit rather than one made for other lines
            except OSError:
                return None
            versions[part] = doc.version
        elif ls.document_of(part) is None:  # closed meanwhile
            return None
        lines = split_lines(ls.workspace.get_text_document(part).source)
        changes.append(_document_edit(part, versions[part], convert.fix_to_text_edits({"edits": edits}, lines, ls.encoding)))
    return types.WorkspaceEdit(document_changes=changes) if changes else None


def resolves_edits(caps: types.ClientCapabilities | None) -> bool:
    """Whether the client asks for an action's ``edit`` by ``codeAction/resolve`` (VS Code, Neovim 0.7+)."""
    action = caps.text_document.code_action if caps is not None and caps.text_document is not None else None
    support = action.resolve_support if action is not None else None
    return support is not None and "edit" in (support.properties or ())


def _version(ls: ActionServer, document: Document) -> int | None:
    """The document's version (a notebook's own): what every action's ``data`` names."""
    snap = document.snapshot(ls.workspace)
    return snap.version if snap is not None else None


def _data(uri: str, version: int | None, action: str, **where: Any) -> dict[str, Any]:
    return {"uri": uri, "version": version, "action": action, **where}


async def quick_fixes(ls: ActionServer, uri: str, diagnostics: Any) -> list[types.CodeAction]:
    """The diagnostic's own fix, then "suppress on this line", for each gradguard diagnostic given (no edits).
    Only these diagnostics' fixes are built (once per published version): the titles and safe or not.

    A diagnostic published for an older version than the text's is skipped: its positions are stale (a fresh
    publish is on its way).
    """
    document = ls.document_of(uri)
    doc = ls.workspace.get_text_document(uri)
    lines = split_lines(doc.source)
    shown = [d for _, d in document.published.get(uri, [])] if document is not None else []
    version = _version(ls, document) if document is not None else None
    actionable = list(convert.actionable(diagnostics, shown, doc.version))
    built = await ls.fixes_of(document, uri, [data_key(data) for _, data, _ in actionable]) if document else {}
    actions: list[types.CodeAction] = []
    seen: set[tuple[int, str]] = set()
    for diag, data, code in actionable:
        fix = built.get(data_key(data))
        if isinstance(fix, dict) and fix.get("edits"):
            actions.append(types.CodeAction(
                title=str(fix.get("title") or f"Fix {code}"), kind=types.CodeActionKind.QuickFix, diagnostics=[diag],
                is_preferred=fix.get("safe") is True,
                data=_data(uri, version, FIX, code=code, line=data.get("line"), column=data.get("column"))))
        line0 = diag.range.start.line
        if diag.source == PROBE_SOURCE:
            continue  # the probe reports what ran, whatever a comment says: no "suppress" for its own findings
        if not 0 <= line0 < len(lines) or (line0, code) in seen or add_code(lines[line0], code) is None:
            continue
        seen.add((line0, code))
        actions.append(types.CodeAction(title=f"Suppress {code} on this line", kind=types.CodeActionKind.QuickFix,
                                        diagnostics=[diag], data=_data(uri, version, SUPPRESS, code=code, line=line0)))
    return actions


async def _published_fix(ls: ActionServer, document: Document, uri: str, data: dict[str, Any]
                         ) -> dict[str, Any] | None:
    """The fix of the finding ``data`` names, published for the version it names.  By gradguard's own
    position of the finding, not the client's range: Neovim 0.7 sends back a range rebuilt from byte columns."""
    if document.published_version != data.get("version"):
        return None
    fix = (await ls.fixes_of(document, uri, [data_key(data)])).get(data_key(data))
    return fix if isinstance(fix, dict) and fix.get("edits") else None


def _suppression(ls: ActionServer, uri: str, data: dict[str, Any]) -> types.WorkspaceEdit | None:
    doc = ls.workspace.get_text_document(uri)
    lines, line0, code = split_lines(doc.source), data.get("line"), data.get("code")
    if not isinstance(line0, int) or not isinstance(code, str) or not 0 <= line0 < len(lines):
        return None
    edit = suppress_edit(lines[line0], line0, code, ls.encoding)
    return types.WorkspaceEdit(document_changes=[_document_edit(uri, doc.version, [edit])]) if edit else None


async def resolve(ls: ActionServer, action: types.CodeAction) -> types.CodeAction:
    """``codeAction/resolve``: the action with its edit, made now for the text ``data`` names; no edit when the
    document moved on (or closed) since the action was listed."""
    data = action.data if isinstance(action.data, dict) else {}
    uri = data.get("uri")
    document = ls.document_of(uri) if isinstance(uri, str) else None
    if document is None or _version(ls, document) != data.get("version"):
        return action
    kind = data.get("action")
    if kind == FIX:
        fix = await _published_fix(ls, document, uri, data)
        action.edit = fix_edit(ls, fix, uri, ls.workspace.get_text_document(uri).version) if fix else None
    elif kind == SUPPRESS:
        action.edit = _suppression(ls, uri, data)
    elif kind == FIX_ALL:
        action.edit = (await fix_all_edit(ls, uri))[0]
    elif kind == NOTEBOOK_FIX_ALL:
        action.edit = await notebook_fix_all_edit(ls, uri)
    return action


async def fix_all_edit(ls: ActionServer, uri: str) -> tuple[types.WorkspaceEdit | None, plan.Plan | None]:
    """One versioned edit of part ``uri`` making every safe fix the planner chooses (None if none), and the plan.

    The planner re-analyses in the pool until no fix is left (``lsp/fixes.py`` turns its fixed text into
    edits).  A text with a syntax error gets no fix-all: the kept findings' fixes are for regions the parser
    could not check.
    """
    document = ls.document_of(uri)
    snap = document.snapshot(ls.workspace) if document is not None else None
    index = snap.index(uri) if snap is not None else None
    if index is None or too_large(snap) is not None:
        return None, None
    job = fixes.fix_job(document, snap, uri, ls.path(document.uri), ls.config_for(document.uri))
    if job is None:
        return None, None
    before, after, done = await asyncio.get_running_loop().run_in_executor(ls.executor, job)
    if before == after:
        return None, done
    edits = convert.fix_to_text_edits({"edits": fixes.edits_between(before, after)}, split_lines(before), ls.encoding)
    edit = types.WorkspaceEdit(document_changes=[_document_edit(uri, snap.parts[index].version, edits)])
    return edit, done


async def notebook_fix_all_edit(ls: ActionServer, uri: str) -> types.WorkspaceEdit | None:
    """One edit of every cell the planner changes, run over the notebook ``uri`` is (a cell of)."""
    document = ls.document_of(uri)
    snap = document.snapshot(ls.workspace) if document is not None and document.notebook else None
    config = ls.config_for(document.uri) if document is not None else None
    job = fixes.notebook_fix_job(document, snap, ls.path(document.uri), config) \
        if snap is not None and too_large(snap) is None else None
    if job is None:
        return None
    after, _ = await asyncio.get_running_loop().run_in_executor(ls.executor, job)
    changes = []
    for part, new_text in zip(snap.parts, after):
        if new_text != part.text:
            edits = fixes.edits_between(part.text, new_text)
            text_edits = convert.fix_to_text_edits({"edits": edits}, split_lines(part.text), ls.encoding)
            changes.append(_document_edit(part.uri, part.version, text_edits))
    return types.WorkspaceEdit(document_changes=changes) if changes else None


def kind_matches(kind: str, only: Any) -> bool:
    """LSP kind filtering: ``kind`` is asked for when some entry of ``only`` is it or a prefix of it."""
    return not only or any(kind == str(k) or kind.startswith(f"{k}.") for k in only)


def _may_fix_all(document: Document, version: int | None, uris: list[str]) -> bool:
    """Whether to list a fix-all (cheap: the planner runs on resolve, and may still find nothing): what was
    shown for ``uris`` may offer a safe fix (``Document.may_fix``: no fix is built for this) and has no syntax
    error; or nothing is shown for this version yet."""
    if document.published_version != version:
        return True
    if any(lsp.code == SYNTAX_ERROR for uri in uris for _, lsp in document.published.get(uri, [])):
        return False
    return document.may_fix(uris, unavailable() is None)


def _fix_alls(ls: ActionServer, document: Document, uri: str, only: Any) -> list[types.CodeAction]:
    version, out = _version(ls, document), []
    if kind_matches(FIX_ALL_KIND, only) and _may_fix_all(document, version, [uri]):
        out.append(types.CodeAction(title=FIX_ALL_TITLE, kind=FIX_ALL_KIND, data=_data(uri, version, FIX_ALL)))
    if document.notebook and kind_matches(NOTEBOOK_FIX_ALL_KIND, only) \
            and _may_fix_all(document, version, list(document.published)):
        out.append(types.CodeAction(title=NOTEBOOK_FIX_ALL_TITLE, kind=NOTEBOOK_FIX_ALL_KIND,
                                    data=_data(uri, version, NOTEBOOK_FIX_ALL)))
    return out


async def code_actions(ls: ActionServer, params: types.CodeActionParams) -> list[types.CodeAction]:
    """The actions at the request's diagnostics and kinds; with their edits for a client that cannot resolve."""
    uri, only = params.text_document.uri, params.context.only
    document = ls.document_of(uri)
    if document is None:
        return []
    actions: list[types.CodeAction] = []
    if kind_matches(types.CodeActionKind.QuickFix.value, only):
        actions.extend(await quick_fixes(ls, uri, params.context.diagnostics))
    actions.extend(_fix_alls(ls, document, uri, only))
    if resolves_edits(ls.client_capabilities):
        return actions
    resolved = [await resolve(ls, action) for action in actions]
    return [action for action in resolved if action.edit is not None]
