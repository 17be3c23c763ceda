"""Fix-all in the editor ("Fix all", ``source.fixAll.gradguard``, ``gradguard.applyAllFixes``): the fix
planner's result as edits of one document.

The planner (``fixes.plan.run``) chooses, orders and applies the safe fixes and re-analyses until none is left,
exactly as ``gradguard check --fix`` does; this module only turns its fixed text into the few edits that make
it (``edits.diff_edits``, 1-based code points), which ``convert`` maps to the client's positions.  So an
editor's "Fix all" and ``--fix`` give the same text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..diagnostics import Diagnostic, FileResult
from ..fixes import plan
from ..fixes.edits import diff_edits
from ..text import line_ends, line_starts


def fix_all(text: str, analyse: Callable[[str], FileResult], first: Sequence[Diagnostic] | None = None) -> plan.Plan:
    """The safe fixes of ``text`` planned to the end; ``analyse`` analyses a text as the server does, ``first``
    are the findings already known for ``text``."""
    known = plan.Analysis.of(first) if first is not None else None
    return plan.run(text, lambda t: plan.Analysis.of(analyse(t).diagnostics), unsafe=False, first=known)


def left_over(done: plan.Plan) -> int:
    """Safe fixes still offered once the plan is done (a fix refused, or one that did not remove its finding)."""
    return len(done.analysis.allowed(unsafe=False))


def edits_between(old: str, new: str) -> list[dict[str, Any]]:
    """The edits (``Diagnostic.to_json`` shape) that turn ``old`` into ``new``: the plan's original text into
    its fixed text, or a notebook cell's source into the one the plan leaves it with."""
    return [
        {"line": e.line, "column": e.column, "end_line": e.end_line, "end_column": e.end_column, "new_text": e.new_text}
        for e in diff_edits(old, new)
    ]


def apply_edits(text: str, edits: Any) -> str:
    """Apply non-overlapping edits (1-based code-point positions) to ``text``; positions are clamped.

    Lines are split like the server splits them (``\\r\\n``, ``\\r``, ``\\n``).  Used by tests and by
    anything that wants the fixed text without an editor.
    """
    starts, ends = line_starts(text), line_ends(text)

    def offset(line: int, column: int) -> int:
        index = max(0, min(line - 1, len(starts) - 1))
        return min(starts[index] + max(0, column - 1), ends[index])

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
