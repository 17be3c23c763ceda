"""LSP 3.17 notebook sync: a notebook's code cells analysed as one program, findings published per cell.

The server declares ``notebookDocumentSync`` for ``jupyter-notebook`` notebooks with Python cells (pygls keeps
the notebook and its cells as text documents in ``ls.workspace``).  On ``notebookDocument/didOpen``,
``didChange`` (debounced; not with ``"run": "onSave"``) and ``didSave`` the code cells, in notebook order, are
analysed with ``gradguard.notebooks`` (``Program.from_cells`` + ``map_diagnostic``), so a tensor saved in one
cell and mutated in a later one is found.  Each cell's findings are pushed to that cell's URI (cells whose
findings went away get an empty list), related locations point at the cell they are in, and
``didClose`` clears every cell.  Diagnostics of notebook cells are always pushed, also to a client that pulls
them for text documents: a pull for a cell URI is answered empty by the text-document handler, so nothing is
shown twice.

Each diagnostic's ``data`` is its JSON plus ``version`` (of its cell, when analysed) and, for every fix edit,
the ``uri`` and ``version`` of the cell it edits, so code actions need no state: a quick fix is a versioned
WorkspaceEdit of the right cell(s), "suppress" edits the diagnostic's cell, and ``source.fixAll.gradguard``
applies the safe fixes of the requested cell whose edits all lie in that cell, as the fix planner chooses them
(the one ``--fix`` uses, re-analysing the notebook until none is left).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass, field
from typing import Any

from lsprotocol import types

from .. import notebooks as nb
from ..diagnostics import SYNTAX_ERROR, Diagnostic
from . import convert, fixes

logger = logging.getLogger("gradguard.lsp")

NOTEBOOK_TYPE = "jupyter-notebook"
SYNC_OPTIONS = types.NotebookDocumentSyncOptions(
    notebook_selector=[
        types.NotebookDocumentFilterWithCells(notebook=NOTEBOOK_TYPE, cells=[types.NotebookCellLanguage(language="python")])
    ],
    save=True,
)


@dataclass
class NotebookState:
    """What the server remembers about one open notebook."""

    task: asyncio.Task | None = None
    published: dict[str, list[tuple[Diagnostic, types.Diagnostic]]] = field(default_factory=dict)  # cell uri ->
    version: int | None = None  # the notebook version ``published`` was computed on
    cache: dict = field(default_factory=dict)  # the engine's per-document cache for the cells' program


@dataclass(frozen=True)
class Snapshot:
    """The cells of a notebook at one moment: what is analysed, and how to reach each cell."""

    version: int | None
    uris: list[str]  # cell number - 1 -> cell uri
    texts: list[str]
    versions: list[int | None]
    kinds: list[str]  # "code" or "markdown"


def states(ls: Any) -> dict[str, NotebookState]:
    found = ls.__dict__.get("notebook_states")
    if found is None:
        found = ls.__dict__["notebook_states"] = {}
    return found


def snapshot(ls: Any, notebook_uri: str) -> Snapshot | None:
    notebook = ls.workspace.get_notebook_document(notebook_uri=notebook_uri)
    if notebook is None:
        return None
    uris, texts, versions, kinds = [], [], [], []
    for cell in notebook.cells:
        doc = ls.workspace.get_text_document(cell.document)
        code = cell.kind == types.NotebookCellKind.Code and (doc.language_id or "python") == "python"
        uris.append(cell.document)
        texts.append(doc.source)
        versions.append(doc.version)
        kinds.append("code" if code else "markdown")
    return Snapshot(notebook.version, uris, texts, versions, kinds)


def _analyse(snap: Snapshot, path: str, config: Any, cache: dict) -> list[Diagnostic]:
    """The cells as one program; ``cache`` (a copy of the notebook's) is updated in place."""
    program = nb.Program.from_cells(list(zip(snap.kinds, snap.texts)))
    return list(nb.analyze_program(program, path, config, cache)[0].diagnostics)


def to_lsp(ls: Any, snap: Snapshot, diags: list[Diagnostic]) -> dict[str, list[tuple[Diagnostic, types.Diagnostic]]]:
    """The findings of ``snap`` as LSP diagnostics per cell uri (every cell has an entry)."""
    lines = [convert.split_lines(t) for t in snap.texts]
    encoding = ls.encoding
    out: dict[str, list[tuple[Diagnostic, types.Diagnostic]]] = {uri: [] for uri in snap.uris}

    def cell_index(number: int | None) -> int | None:
        return number - 1 if number is not None and 1 <= number <= len(snap.uris) else None

    for d in diags:
        i = cell_index(d.cell)
        if i is None:
            continue
        lsp = convert.to_lsp_diagnostic(d, snap.uris[i], lines[i], encoding, ls.config.docs_url)
        related = []
        for r in d.related:
            j = cell_index(r.cell)
            if j is None:
                continue  # not in a cell of this notebook
            rng = convert.to_range(lines[j], r.line, r.column, r.line, r.column, encoding)
            related.append(types.DiagnosticRelatedInformation(location=types.Location(uri=snap.uris[j], range=rng), message=r.message))
        lsp.related_information = related or None
        data = lsp.data if isinstance(lsp.data, dict) else {}
        data["version"] = snap.versions[i]
        fix = data.get("fix")
        if isinstance(fix, dict):
            for edit in fix.get("edits", []):
                j = cell_index(edit.get("cell")) if isinstance(edit, dict) else None
                if j is None:
                    data["fix"] = None  # an edit outside the cells cannot be made
                    break
                edit["uri"], edit["version"] = snap.uris[j], snap.versions[j]
        out[snap.uris[i]].append((d, lsp))
    return out


def schedule(ls: Any, notebook_uri: str, delay: float | None = None) -> None:
    state = states(ls).get(notebook_uri)
    if state is None:
        return
    if state.task is not None and not state.task.done():
        state.task.cancel()
    state.task = asyncio.get_running_loop().create_task(_run(ls, notebook_uri, ls.debounce if delay is None else delay))


async def _run(ls: Any, notebook_uri: str, delay: float) -> None:
    try:
        if delay > 0:
            await asyncio.sleep(delay)
        snap = snapshot(ls, notebook_uri)
        if snap is None:
            return
        config = ls.config
        state = states(ls).get(notebook_uri)
        if state is None:
            return
        cache = dict(state.cache)  # a run that is cancelled or stale leaves the notebook's cache as it was
        loop = asyncio.get_running_loop()
        diags = await loop.run_in_executor(
            ls.executor, functools.partial(_analyse, snap, ls._path(notebook_uri), config, cache))
        current = snapshot(ls, notebook_uri)
        if states(ls).get(notebook_uri) is not state or current is None or current.version != snap.version \
                or config is not ls.config:
            return  # closed or edited meanwhile: a newer run will publish
        state.cache = cache
        published = to_lsp(ls, snap, diags)
        for uri in state.published:
            if uri not in published:  # a cell that was deleted (or is no longer code): clear it
                ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))
        for i, uri in enumerate(snap.uris):
            if published[uri] or state.published.get(uri):
                ls.text_document_publish_diagnostics(
                    types.PublishDiagnosticsParams(uri=uri, version=snap.versions[i], diagnostics=[l for _, l in published[uri]])
                )
        state.published = {uri: pairs for uri, pairs in published.items() if pairs}
        state.version = snap.version
    except asyncio.CancelledError:
        raise
    except Exception:
        logger.exception("analysis of notebook %s failed", notebook_uri)


def close(ls: Any, notebook_uri: str, cell_uris: list[str]) -> None:
    state = states(ls).pop(notebook_uri, None)
    if state is not None and state.task is not None:
        state.task.cancel()
    for uri in dict.fromkeys([*cell_uris, *(state.published if state else ())]):
        ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))


def reanalyse_all(ls: Any) -> None:
    for uri, state in list(states(ls).items()):
        state.cache = {}  # jedi on or off changes what the engine finds
        schedule(ls, uri, delay=0)


def shutdown(ls: Any) -> None:
    for state in states(ls).values():
        if state.task is not None:
            state.task.cancel()


def published(ls: Any, cell_uri: str) -> list[tuple[Diagnostic, types.Diagnostic]] | None:
    """What the client was shown for a notebook cell (None when ``cell_uri`` is no cell of an open notebook)."""
    notebook = ls.workspace.get_notebook_document(cell_uri=cell_uri)
    if notebook is None or notebook.uri not in states(ls):
        return None
    return states(ls)[notebook.uri].published.get(cell_uri, [])


# ---- code actions ----------------------------------------------------------------------
def _cell_edit(uri: str, version: int | None, edits: list[types.TextEdit]) -> types.TextDocumentEdit:
    return types.TextDocumentEdit(
        text_document=types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version), edits=edits
    )


def _fix_edit(ls: Any, fix: dict[str, Any]) -> types.WorkspaceEdit | None:
    """A fix of a cell diagnostic's data (every edit has its cell's ``uri`` and ``version``) as one edit."""
    by_cell: dict[str, list[dict[str, Any]]] = {}
    versions: dict[str, int | None] = {}
    for edit in fix.get("edits") or []:
        uri = edit.get("uri") if isinstance(edit, dict) else None
        if not isinstance(uri, str):
            return None
        by_cell.setdefault(uri, []).append(edit)
        versions[uri] = edit.get("version")
    changes = []
    for uri, edits in by_cell.items():
        if ls.workspace.get_notebook_document(cell_uri=uri) is None:  # a cell closed meanwhile
            return None
        doc = ls.workspace.get_text_document(uri)
        text_edits = convert.fix_to_text_edits({"edits": edits}, convert.split_lines(doc.source), ls.encoding)
        changes.append(_cell_edit(uri, versions[uri], text_edits))
    return types.WorkspaceEdit(document_changes=changes) if changes else None


def quick_fixes(ls: Any, uri: str, diagnostics: Any) -> list[types.CodeAction]:
    """Like ``server.quick_fixes`` for a notebook cell: the diagnostic's fix (in its cells), then suppress."""
    from .server import _suppress_edit

    doc = ls.workspace.get_text_document(uri)
    lines = convert.split_lines(doc.source)
    shown = published(ls, uri) or []
    actions: list[types.CodeAction] = []
    seen: set[tuple[int, str]] = set()
    for diag, data, code in convert.actionable(diagnostics, [d for _, d in shown], doc.version):
        fix = data.get("fix")
        if isinstance(fix, dict) and fix.get("edits"):
            edit = _fix_edit(ls, fix)
            if edit is not None:
                actions.append(
                    types.CodeAction(
                        title=str(fix.get("title") or f"Fix {code}"),
                        kind=types.CodeActionKind.QuickFix,
                        diagnostics=[diag],
                        is_preferred=fix.get("safe") is True,
                        edit=edit,
                    )
                )
        line0 = diag.range.start.line
        if not 0 <= line0 < len(lines) or (line0, code) in seen:
            continue
        seen.add((line0, code))
        suppress = _suppress_edit(lines[line0], line0, code, ls.encoding)
        if suppress is not None:
            actions.append(
                types.CodeAction(
                    title=f"Suppress {code} on this line",
                    kind=types.CodeActionKind.QuickFix,
                    diagnostics=[diag],
                    edit=types.WorkspaceEdit(document_changes=[_cell_edit(uri, doc.version, [suppress])]),
                )
            )
    return actions


async def fix_all_edit(ls: Any, uri: str) -> types.WorkspaceEdit | None:
    """The safe fixes of cell ``uri`` as one edit of that cell: the planner ``gradguard check --fix`` uses, on the
    notebook's program (``notebooks.CellsPlan``), offered only the fixes whose edits all lie in that cell."""
    notebook = ls.workspace.get_notebook_document(cell_uri=uri)
    state = states(ls).get(notebook.uri) if notebook is not None else None
    snap = snapshot(ls, notebook.uri) if state is not None else None
    if snap is None or uri not in snap.uris or any(d.code == SYNTAX_ERROR for d, _ in published(ls, uri) or []):
        return None
    number = snap.uris.index(uri) + 1
    cells = nb.CellsPlan(list(zip(snap.kinds, snap.texts)), ls._path(notebook.uri), ls.config, only_cell=number,
                         cache=dict(state.cache))
    done = await asyncio.get_running_loop().run_in_executor(ls.executor, cells.run, False)
    before = snap.texts[number - 1]
    after = next((c.source for c in cells.program(done.text).cells if c.number == number), before)
    if after == before:
        return None
    edits = convert.fix_to_text_edits({"edits": fixes.edits_between(before, after)}, convert.split_lines(before),
                                      ls.encoding)
    return types.WorkspaceEdit(document_changes=[_cell_edit(uri, snap.versions[number - 1], edits)])


async def code_actions(ls: Any, params: types.CodeActionParams) -> list[types.CodeAction] | None:
    """The code actions for a notebook cell; None when the document is no cell of an open notebook."""
    from .server import FIX_ALL_KIND, FIX_ALL_TITLE, _kind_matches

    uri = params.text_document.uri
    if published(ls, uri) is None:
        return None
    only = params.context.only
    actions: list[types.CodeAction] = []
    if _kind_matches(types.CodeActionKind.QuickFix.value, only):
        actions.extend(quick_fixes(ls, uri, params.context.diagnostics))
    if _kind_matches(FIX_ALL_KIND, only):
        edit = await fix_all_edit(ls, uri)
        if edit is not None:
            actions.append(types.CodeAction(title=FIX_ALL_TITLE, kind=FIX_ALL_KIND, edit=edit))
    return actions


# ---- synchronisation ---------------------------------------------------------------------
def register(server: Any, safe: Any) -> None:
    """Add the notebookDocument/* handlers to ``server`` (each wrapped by ``safe()``)."""

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_OPEN)
    @safe()
    def did_open_notebook(ls: Any, params: types.DidOpenNotebookDocumentParams) -> None:
        ls.reload_if_pyproject_changed()
        states(ls).setdefault(params.notebook_document.uri, NotebookState())
        schedule(ls, params.notebook_document.uri, delay=0)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
    @safe()
    def did_change_notebook(ls: Any, params: types.DidChangeNotebookDocumentParams) -> None:
        ls.reload_if_pyproject_changed()
        if ls.run_on_type:
            schedule(ls, params.notebook_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_SAVE)
    @safe()
    def did_save_notebook(ls: Any, params: types.DidSaveNotebookDocumentParams) -> None:
        ls.reload_if_pyproject_changed()
        schedule(ls, params.notebook_document.uri, delay=0)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CLOSE)
    @safe()
    def did_close_notebook(ls: Any, params: types.DidCloseNotebookDocumentParams) -> None:
        close(ls, params.notebook_document.uri, [c.uri for c in params.cell_text_documents])
