"""Findings kept through a syntax error follow the edits: their lines move with insertions and deletions
above them, and those on edited lines are dropped, so their positions and fixes stay valid for the text."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..diagnostics import Diagnostic
from ..text import split_lines


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
        breaks = len(split_lines(text)) - 1
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
    old, new = split_lines(old_text), split_lines(new_text)
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
