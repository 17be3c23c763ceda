"""The human format: one ``path:line:col: CODE message`` line per finding, like ruff.

A notebook's findings read ``notebook.ipynb:cell 3:5:9: GG001 ...``: line 5, column 9 of the third cell.

Editors and terminals turn ``path:line:col`` into links, so related locations
get the same prefix on their own indented ``note:`` lines.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

from ..diagnostics import Diagnostic
from . import RuleInfo


def _one_line(message: str) -> str:
    """Tools split this format on newlines, so a message never spans two."""
    return " ".join(part.strip() for part in message.splitlines() if part.strip())


def location(path: str, line: int, column: int, cell: int | None = None) -> str:
    """``path:line:col``; in a notebook ``path:cell N:line:col`` (the line and column are in the cell), as ruff."""
    return f"{path}:{line}:{column}" if cell is None else f"{path}:cell {cell}:{line}:{column}"


def render(diagnostics: Sequence[Diagnostic], rules: Sequence[RuleInfo] = ()) -> str:
    lines = []
    for d in diagnostics:
        lines.append(f"{location(d.path, d.span.line, d.span.column, d.cell)}: {d.code} {_one_line(d.message)}")
        for r in d.related:
            lines.append(f"    {location(r.path, r.line, r.column, r.cell)}: note: {_one_line(r.message)}")
    return "".join(line + "\n" for line in lines)


def statistics(diagnostics: Sequence[Diagnostic], rules: Sequence[RuleInfo] = ()) -> str:
    """Counts per code, most frequent first (``--statistics``)."""
    names = {r.code: r.name for r in rules}
    counts = Counter(d.code for d in diagnostics)
    rows = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    width = max((len(str(n)) for n in counts.values()), default=1)
    return "".join(f"{n:>{width}}  {code}  {names.get(code, '')}".rstrip() + "\n" for code, n in rows)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def summary(diagnostics: Sequence[Diagnostic]) -> str:
    """The closing line printed on stderr."""
    if not diagnostics:
        return "All checks passed."
    files = len({d.path for d in diagnostics})
    return f"Found {_plural(len(diagnostics), 'problem')} in {_plural(files, 'file')}."
