"""The human format: one ``path:line:col: CODE message`` line per finding, like ruff.

A notebook's findings read ``notebook.ipynb:cell 3:5:9: GG001 ...``: line 5, column 9 of the third cell.

Editors and terminals turn ``path:line:col`` into links, so related locations
get the same prefix on their own indented ``note:`` lines.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
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


def run_lines(runs) -> list[str]:
    """``check --probe``: one ``probe: PATH: OUTCOME`` line per file asked for (``probe.model.FileOutcome``)."""
    return [f"probe: {run.path}: {_one_line(run.detail)}" for run in runs]


def render_runs(diagnostics: Sequence[Diagnostic], rules: Sequence[RuleInfo], runs) -> str:
    """The findings, then how the probe's run of each file ended."""
    return render(diagnostics, rules) + "".join(line + "\n" for line in run_lines(runs))


def statistics(diagnostics: Sequence[Diagnostic], rules: Sequence[RuleInfo] = ()) -> str:
    """Counts per code, most frequent first (``--statistics``)."""
    names = {r.code: r.name for r in rules}
    counts = Counter(d.code for d in diagnostics)
    rows = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    width = max((len(str(n)) for n in counts.values()), default=1)
    return "".join(f"{n:>{width}}  {code}  {names.get(code, '')}".rstrip() + "\n" for code, n in rows)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


@dataclass(frozen=True)
class Fixing:
    """What ``--fix`` (``written``) or ``--diff`` did, as the closing line tells it."""

    written: bool
    fixed: int  # findings the fixes remove
    files: int  # files they change
    unsafe_left: int = 0  # findings left that --unsafe-fixes would fix
    write_failures: int = 0  # files --fix could not write back; they keep their findings


def _found(diagnostics: Sequence[Diagnostic]) -> str:
    files = len({d.path for d in diagnostics})
    return f"{_plural(len(diagnostics), 'problem')} in {_plural(files, 'file')}"


def _fixable(diagnostics: Sequence[Diagnostic]) -> str:
    """How many a plain ``check`` could fix, as ruff says it: the findings whose fix ``--fix`` applies, and
    those only ``--unsafe-fixes`` would."""
    safe = sum(1 for d in diagnostics if d.fix is not None and d.fix.safe)
    unsafe = sum(1 for d in diagnostics if d.fix is not None and not d.fix.safe)
    parts = [f"{safe} fixable with --fix"] if safe else []
    if unsafe:
        parts.append(f"{unsafe} {'more ' if safe else ''}with --fix --unsafe-fixes")
    return f" ({', '.join(parts)})" if parts else ""


def _fix_clauses(diagnostics: Sequence[Diagnostic], fixing: Fixing) -> list[str]:
    clauses = []
    if fixing.fixed:
        verb = "fixed" if fixing.written else "would fix"
        clauses.append(f"{verb} {_plural(fixing.fixed, 'problem')} in {_plural(fixing.files, 'file')}")
    if fixing.write_failures:
        clauses.append(f"{_plural(fixing.write_failures, 'file')} could not be written")
    if diagnostics:
        verb = ("remains" if len(diagnostics) == 1 else "remain") if fixing.written else "would remain"
        more = f" ({fixing.unsafe_left} fixable with --unsafe-fixes)" if fixing.unsafe_left else ""
        clauses.append(f"{_found(diagnostics)} {verb}{more}")
    elif fixing.fixed:
        clauses.append("no problems remain" if fixing.written else "no problems would remain")
    return clauses


def summary(diagnostics: Sequence[Diagnostic], checked: int = 1, fixing: Fixing | None = None,
            crashed: int = 0, unprobed: int = 0, hidden: int = 0) -> str:
    """The closing line printed on stderr: the only place that says "All checks passed.", and it says so only
    when ``checked`` files were all analysed (``crashed``: files whose analysis failed; ``unprobed``: files
    asked for that the ``--probe`` run did not run to their end: stopped by an error it does not explain,
    timed out, could not run, or a notebook) and nothing is left; ``hidden``: findings a baseline left out,
    which are always counted, never passed over as an all-clear."""
    if fixing is not None:
        clauses = _fix_clauses(diagnostics, fixing)
    elif diagnostics:
        clauses = [f"found {_found(diagnostics)}{_fixable(diagnostics)}"]
    else:
        clauses = ["no new problems found" if hidden else "no problems found"] if unprobed or hidden else []
    if hidden:
        clauses.append(f"{_plural(hidden, 'finding')} hidden by the baseline")
    if crashed:
        clauses.append(f"{_plural(crashed, 'file')} could not be analysed (internal error)")
    if unprobed:
        clauses.append(f"the probe did not run {_plural(unprobed, 'file')} to {'its' if unprobed == 1 else 'their'} "
                       "end (see each file's outcome)")
    if not clauses:
        return "All checks passed." if checked else "No files were checked."
    text = "; ".join(clauses)
    return text[0].upper() + text[1:] + "."
