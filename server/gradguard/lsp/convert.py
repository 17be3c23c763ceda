"""Conversions between gradguard's data model and LSP types.

gradguard positions are 1-based lines and 1-based columns counted in code points.
LSP positions are 0-based lines and 0-based columns counted in the negotiated
position encoding's code units (UTF-16 unless the client offered another).
Lines, offsets and encodings are ``gradguard.text``'s.
"""

from __future__ import annotations

from typing import Any

import attrs
from lsprotocol import types

from ..diagnostics import SYNTAX_ERROR, Diagnostic, Severity
from ..doc_links import rule_doc_url
from ..text import code_points, code_units


SOURCE = "gradguard"
PROBE_SOURCE = "gradguard-probe"  # a finding only the runtime probe made (``probe_support``)
# The code action kinds of the fix-alls (``actions.py``), declared in the server's capabilities at start.
FIX_ALL_KIND = f"{types.CodeActionKind.SourceFixAll.value}.gradguard"  # source.fixAll.gradguard
NOTEBOOK_FIX_ALL_KIND = f"notebook.{FIX_ALL_KIND}"  # notebook.source.fixAll.gradguard

_SEVERITY = {
    Severity.ERROR: types.DiagnosticSeverity.Error,
    Severity.WARNING: types.DiagnosticSeverity.Warning,
    Severity.INFO: types.DiagnosticSeverity.Information,
}


def to_position(lines: list[str], line: int, column: int, encoding: str | None) -> types.Position:
    """A 1-based (line, code-point column) as an LSP Position in ``encoding``, clamped to the text."""
    if not lines:
        return types.Position(line=0, character=0)
    line0 = max(0, min(line - 1, len(lines) - 1))
    text = lines[line0]
    cp = max(0, min(column - 1, len(text)))
    return types.Position(line=line0, character=code_units(text[:cp], encoding))


def to_range(lines: list[str], line: int, column: int, end_line: int, end_column: int, encoding: str | None) -> types.Range:
    start = to_position(lines, line, column, encoding)
    end = to_position(lines, end_line, end_column, encoding)
    if (end.line, end.character) < (start.line, start.character):
        end = start
    return types.Range(start=start, end=end)


def end_of_line(lines: list[str], line0: int, encoding: str | None) -> types.Position:
    return types.Position(line=line0, character=code_units(lines[line0], encoding))


def to_lsp_diagnostic(
    diag: Diagnostic, uri: str, lines: list[str], encoding: str | None, docs_url: str | None = None,
    related: bool = True,
) -> types.Diagnostic:
    """One gradguard Diagnostic as an LSP Diagnostic; ``data`` carries its JSON for code actions.

    ``codeDescription.href`` is the rule's page under ``docs_url`` (default: the page shipped in the package),
    and absent when there is no page (GG900, GG901).  ``related=False``: the caller places related locations.
    """
    span = diag.span
    rng = to_range(lines, span.line, span.column, span.end_line, span.end_column, encoding)
    if diag.code == SYNTAX_ERROR and rng.start == rng.end:
        # A zero-width squiggle is invisible in most editors: cover one character (or the line end).
        text = lines[rng.start.line] if lines else ""
        cp = code_points(text, rng.start.character, encoding)
        if cp < len(text):
            rng = types.Range(start=rng.start, end=types.Position(line=rng.start.line, character=rng.start.character + code_units(text[cp], encoding)))
    href = rule_doc_url(diag.code, docs_url)
    related_information = [
        types.DiagnosticRelatedInformation(
            location=types.Location(uri=uri, range=to_range(lines, r.line, r.column, r.line, r.column, encoding)),
            message=r.message,
        )
        for r in (diag.related if related else ())
    ]
    return types.Diagnostic(
        range=rng,
        message=diag.message,
        severity=_SEVERITY.get(diag.severity, types.DiagnosticSeverity.Warning),
        code=diag.code,
        code_description=types.CodeDescription(href=href) if href is not None else None,
        source=SOURCE,
        related_information=related_information or None,
        data=diag.to_json(),
    )


def fix_to_text_edits(fix: dict[str, Any], lines: list[str], encoding: str | None) -> list[types.TextEdit]:
    """The ``fix`` of a diagnostic's JSON (edits with 1-based code-point positions) as LSP TextEdits."""
    return [
        types.TextEdit(
            range=to_range(lines, e["line"], e["column"], e["end_line"], e["end_column"], encoding),
            new_text=e["new_text"],
        )
        for e in fix.get("edits", [])
    ]


def diagnostic_version(diag: types.Diagnostic) -> int | None:
    """The document version a diagnostic was computed on (kept in its ``data``)."""
    data = diag.data if isinstance(diag.data, dict) else {}
    version = data.get("version")
    return version if isinstance(version, int) and not isinstance(version, bool) else None


def actionable(diagnostics, shown, doc_version: int | None):
    """The (diagnostic, data, code) of the client's diagnostics that can get code actions.

    Ours only (the probe's too), never the syntax error, never one computed on an older version than the document's.
    ``shown`` is what was published: for a client that drops ``data``, the diagnostic is found there again.
    """
    for diag in diagnostics or []:
        if diag.source not in (SOURCE, PROBE_SOURCE):
            continue
        if not isinstance(diag.data, dict):
            match = next((s for s in shown if s.range == diag.range and s.code == diag.code), None)
            if match is not None:
                diag = attrs.evolve(diag, data=match.data)
        if not isinstance(diag.data, dict):
            continue
        code = str(diag.data.get("code") or diag.code or "")
        if not code or code == SYNTAX_ERROR:
            continue
        version = diagnostic_version(diag)
        if version is not None and doc_version is not None and version != doc_version:
            continue  # stale: a fresh publish is on its way
        yield diag, diag.data, code
