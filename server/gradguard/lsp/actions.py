"""Code actions, the same for a text file and a notebook cell: a diagnostic's own fix (preferred when safe),
"suppress" a code on its line, and ``source.fixAll.gradguard`` (also ``gradguard.applyAllFixes``) applying every
safe fix of the document (of the cell, for a notebook) as the fix planner of ``gradguard check --fix`` chooses
them.  Every edit names the version of the part it was computed on, so a client refuses it once the text has
moved on.  Without libcst no fix is offered (the server said so once); "suppress" still is.
"""

from __future__ import annotations

import asyncio
from typing import Any

from lsprotocol import types

from ..fixes import plan
from ..suppressions import add_code
from ..text import code_units, split_lines
from . import convert, fixes
from .server import GradguardServer

FIX_ALL_KIND = f"{types.CodeActionKind.SourceFixAll.value}.gradguard"  # source.fixAll.gradguard
FIX_ALL_TITLE = "Fix all gradguard issues"


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


def fix_edit(ls: GradguardServer, fix: dict[str, Any], uri: str, version: int | None) -> types.WorkspaceEdit | None:
    """A fix of a diagnostic's data as one edit: each edit is in the part its ``uri`` and ``version`` name (a
    notebook cell's), else in the diagnostic's own document ``uri`` at ``version``."""
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
        if ls.document_of(part) is None:  # closed meanwhile
            return None
        lines = split_lines(ls.workspace.get_text_document(part).source)
        changes.append(_document_edit(part, versions[part], convert.fix_to_text_edits({"edits": edits}, lines, ls.encoding)))
    return types.WorkspaceEdit(document_changes=changes) if changes else None


def quick_fixes(ls: GradguardServer, uri: str, diagnostics: Any) -> list[types.CodeAction]:
    """The diagnostic's own fix, then "suppress on this line", for each gradguard diagnostic given.

    A diagnostic published for an older version than the text's is skipped: its positions are stale (a fresh
    publish is on its way).
    """
    document = ls.document_of(uri)
    doc = ls.workspace.get_text_document(uri)
    lines = split_lines(doc.source)
    shown = [d for _, d in document.published.get(uri, [])] if document is not None else []
    actions: list[types.CodeAction] = []
    seen: set[tuple[int, str]] = set()
    for diag, data, code in convert.actionable(diagnostics, shown, doc.version):
        fix = data.get("fix")
        edit = fix_edit(ls, fix, uri, doc.version) if isinstance(fix, dict) and fix.get("edits") else None
        if edit is not None:
            actions.append(types.CodeAction(title=str(fix.get("title") or f"Fix {code}"),
                                            kind=types.CodeActionKind.QuickFix, diagnostics=[diag],
                                            is_preferred=fix.get("safe") is True, edit=edit))
        line0 = diag.range.start.line
        if not 0 <= line0 < len(lines) or (line0, code) in seen:
            continue
        seen.add((line0, code))
        suppress = suppress_edit(lines[line0], line0, code, ls.encoding)
        if suppress is not None:
            actions.append(types.CodeAction(
                title=f"Suppress {code} on this line", kind=types.CodeActionKind.QuickFix, diagnostics=[diag],
                edit=types.WorkspaceEdit(document_changes=[_document_edit(uri, doc.version, [suppress])])))
    return actions


async def fix_all_edit(ls: GradguardServer, uri: str) -> tuple[types.WorkspaceEdit | None, plan.Plan | None]:
    """One versioned edit of part ``uri`` making every safe fix the planner chooses (None if none), and the plan.

    The planner re-analyses in the pool until no fix is left (``lsp/fixes.py`` turns its fixed text into
    edits).  A text with a syntax error gets no fix-all: the kept findings' fixes are for regions the parser
    could not check.
    """
    document = ls.document_of(uri)
    snap = document.snapshot(ls.workspace) if document is not None else None
    index = snap.index(uri) if snap is not None else None
    if index is None:
        return None, None
    job = document.fix_job(snap, uri, ls.path(document.uri), ls.config_for(document.uri))
    if job is None:
        return None, None
    before, after, done = await asyncio.get_running_loop().run_in_executor(ls.executor, job)
    if before == after:
        return None, done
    edits = convert.fix_to_text_edits({"edits": fixes.edits_between(before, after)}, split_lines(before), ls.encoding)
    edit = types.WorkspaceEdit(document_changes=[_document_edit(uri, snap.parts[index].version, edits)])
    return edit, done


def kind_matches(kind: str, only: Any) -> bool:
    """LSP kind filtering: ``kind`` is asked for when some entry of ``only`` is it or a prefix of it."""
    return not only or any(kind == str(k) or kind.startswith(f"{k}.") for k in only)


async def code_actions(ls: GradguardServer, params: types.CodeActionParams) -> list[types.CodeAction]:
    uri, only = params.text_document.uri, params.context.only
    if ls.document_of(uri) is None:
        return []
    actions: list[types.CodeAction] = []
    if kind_matches(types.CodeActionKind.QuickFix.value, only):
        actions.extend(quick_fixes(ls, uri, params.context.diagnostics))
    if kind_matches(FIX_ALL_KIND, only):
        edit, _ = await fix_all_edit(ls, uri)
        if edit is not None:
            actions.append(types.CodeAction(title=FIX_ALL_TITLE, kind=FIX_ALL_KIND, edit=edit))
    return actions
