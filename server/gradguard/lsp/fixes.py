"""Merging the fixes carried in diagnostics' ``data`` into one set of non-overlapping edits (fix-all).

A fix is the JSON of ``Diagnostic.fix``::

    {"title": str, "safe": bool,
     "edits": [{"line", "column", "end_line", "end_column", "new_text"}, ...]}   # 1-based code points

``merge_fixes`` works on that plain data only (no LSP types, no document), so it is unit-tested directly.
The rules:

- only fixes with ``safe`` exactly ``True`` are applied;
- a fix is all or nothing: if any of its edits overlaps an edit of a fix already taken, the whole fix is
  skipped (the next analysis offers it again, on the fixed text);
- fixes are taken in document order (of their first edit), so the result does not depend on the order of
  the diagnostics; the same fix carried by two diagnostics is applied once;
- a malformed fix (missing or non-integer positions, an end before its start, edits of its own that overlap)
  is skipped, never guessed at.

Two edits overlap when they share any character of the original text, or when both start at the same
position (two insertions there, or an insertion and a replacement, would have an order the fixes do not
define).  Edits that only touch (one ends where the other starts) do not overlap.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

Pos = tuple[int, int]


@dataclass(frozen=True)
class Edit:
    start: Pos
    end: Pos
    new_text: str

    def to_json(self) -> dict[str, Any]:
        return {
            "line": self.start[0],
            "column": self.start[1],
            "end_line": self.end[0],
            "end_column": self.end[1],
            "new_text": self.new_text,
        }


@dataclass
class MergeResult:
    edits: list[dict[str, Any]] = field(default_factory=list)  # in document order, never overlapping
    applied: list[dict[str, Any]] = field(default_factory=list)  # the fixes taken
    skipped: list[tuple[dict[str, Any], str]] = field(default_factory=list)  # (fix, why), unsafe ones excluded


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def parse_edits(fix: Any) -> list[Edit] | None:
    """The edits of one fix, sorted; None when the fix is malformed."""
    if not isinstance(fix, dict) or not isinstance(fix.get("edits"), list) or not fix["edits"]:
        return None
    edits = []
    for raw in fix["edits"]:
        if not isinstance(raw, dict):
            return None
        line, column = _int(raw.get("line")), _int(raw.get("column"))
        end_line, end_column = _int(raw.get("end_line")), _int(raw.get("end_column"))
        new_text = raw.get("new_text")
        if None in (line, column, end_line, end_column) or not isinstance(new_text, str):
            return None
        start, end = (line, column), (end_line, end_column)
        if end < start:
            return None
        edits.append(Edit(start, end, new_text))  # type: ignore[arg-type]
    edits.sort(key=lambda e: (e.start, e.end))
    for a, b in pairwise(edits):
        if overlaps(a, b):
            return None
    return edits


def overlaps(a: Edit, b: Edit) -> bool:
    if a.start == b.start:
        return True
    return a.start < b.end and b.start < a.end


def merge_fixes(fixes: Iterable[Any]) -> MergeResult:
    """Choose the safe fixes that can be applied together; return their edits in document order."""
    result = MergeResult()
    candidates: list[tuple[tuple[Pos, Pos], int, dict[str, Any], list[Edit]]] = []
    seen: set[tuple[Edit, ...]] = set()
    for index, fix in enumerate(fixes):
        if not isinstance(fix, dict) or fix.get("safe") is not True:
            continue
        edits = parse_edits(fix)
        if edits is None:
            result.skipped.append((fix, "malformed"))
            continue
        key = tuple(edits)
        if key in seen:
            continue  # the same fix, carried by another diagnostic
        seen.add(key)
        candidates.append(((edits[0].start, edits[-1].end), index, fix, edits))
    candidates.sort(key=lambda c: (c[0], c[1]))
    taken: list[Edit] = []
    for _, _, fix, edits in candidates:
        if any(overlaps(e, t) for e in edits for t in taken):
            result.skipped.append((fix, "overlaps another fix"))
            continue
        taken.extend(edits)
        result.applied.append(fix)
    taken.sort(key=lambda e: (e.start, e.end))
    result.edits = [e.to_json() for e in taken]
    return result


def apply_edits(text: str, edits: Iterable[dict[str, Any]]) -> str:
    """Apply non-overlapping edits (1-based code-point positions) to ``text``; positions are clamped.

    Lines are split like the server splits them (``\\r\\n``, ``\\r``, ``\\n``).  Used by tests and by
    anything that wants the fixed text without an editor.
    """
    from .convert import _LINE_BREAK

    starts = [0] + [m.end() for m in _LINE_BREAK.finditer(text)]
    line_ends = [m.start() for m in _LINE_BREAK.finditer(text)] + [len(text)]

    def offset(line: int, column: int) -> int:
        index = max(0, min(line - 1, len(starts) - 1))
        return min(starts[index] + max(0, column - 1), line_ends[index])

    spans = sorted(
        ((offset(e["line"], e["column"]), offset(e["end_line"], e["end_column"]), e["new_text"]) for e in edits),
        key=lambda s: (s[0], s[1]),
    )
    out, cursor = [], 0
    for start, end, new_text in spans:
        start = max(start, cursor)
        out.append(text[cursor:start])
        out.append(new_text)
        cursor = max(cursor, end)
    out.append(text[cursor:])
    return "".join(out)
