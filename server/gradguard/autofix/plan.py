"""The one fix planner: which fixes apply, in which order, together with which, and until when.

Every client applies fixes through ``run``: ``gradguard check --fix/--diff`` on a ``.py`` file, on a notebook
(the text its code cells make, ``notebooks.Program``) and the language server's "Fix all" /
``source.fixAll.gradguard``.  Clients only map positions: a notebook maps the chosen edits into its cells
(``apply``), the language server turns the fixed text into one versioned edit.  So the three can never
choose different edits for the same code.

One pass: the allowed fixes (safe ones; unsafe ones too with ``unsafe``) in document order, none sharing a
line with a fix already taken, at most one per function (``choose``), applied together.  Then the text is
analysed again (the ``analyse`` callback: the planner knows nothing of the engine) and the next pass decides on
the fixed code, until no allowed fix is left.  A pass is kept only when it parses and removes findings; a pass
whose code would not parse, or whose fixes overlap, leaves the text exactly as it was, with a problem.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .. import parsing
from ..diagnostics import Diagnostic, Fix, TextEdit
from ..statements import walk as walk_statements
from ..text import apply_edits

MAX_PASSES = 100  # each pass removes at least one finding, so this is never the limit in practice


@dataclass(frozen=True)
class Candidate:
    """A fix offered for one finding, and the finding's line (fixes are taken one per function and pass)."""

    fix: Fix
    line: int


@dataclass(frozen=True)
class Analysis:
    """What the planner needs to know of one analysis of a text."""

    candidates: tuple[Candidate, ...]
    findings: int  # a pass must lower this, or its fixes did not remove their findings

    @classmethod
    def of(cls, diagnostics: Sequence[Diagnostic]) -> Analysis:
        """The fixes of ``diagnostics`` (in the positions of the text they were found in)."""
        # (not a fix of another file's text: the editor's view of a finding placed in another module, ``Fix.file``)
        return cls(tuple(Candidate(d.fix, d.line) for d in diagnostics if d.fix is not None and d.fix.file is None),
                   len(diagnostics))

    def allowed(self, unsafe: bool) -> list[Candidate]:
        return [c for c in self.candidates if c.fix.edits and (c.fix.safe or unsafe)]


Analyse = Callable[[str], Analysis]
Apply = Callable[[str, Sequence[Fix]], str]


class PassRefused(Exception):
    """Raised by an ``apply`` callback: this pass cannot be made (its message says why); nothing is changed."""


@dataclass
class Plan:
    """What ``run`` did: the fixed text (``original`` when a pass was refused), the fixes applied, and why it
    stopped early, if it did (messages without the file's name: the client knows how to name it)."""

    original: str
    text: str
    analysis: Analysis  # of ``text``
    first: Analysis  # of ``original``
    applied: list[Fix] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.text != self.original


def run(text: str, analyse: Analyse, unsafe: bool = False, first: Analysis | None = None,
        apply: Apply | None = None, unit: str = "file") -> Plan:
    """Fix ``text`` until no allowed fix is left.  ``first``: its analysis, when known; ``apply``: how a pass's
    fixes make the next text (default: their edits applied to ``text``); ``unit`` names the text in problems."""
    first = first if first is not None else analyse(text)
    apply = apply or apply_fixes
    plan = Plan(text, text, first, first)
    current, analysis, applied = text, first, []
    for _ in range(MAX_PASSES):
        chosen = choose_in(current, analysis, unsafe)
        if not chosen:
            break
        new, new_analysis, problem, undo = make_pass(current, analysis, chosen, analyse, apply, unit)
        plan.problems.extend([problem] if problem else [])
        if undo:
            return plan
        if new_analysis is None:
            break
        current, analysis = new, new_analysis
        applied.extend(chosen)
    else:
        plan.problems.append(f"fixes did not settle after {MAX_PASSES} passes; the last pass is kept")
    plan.text, plan.analysis, plan.applied = current, analysis, applied
    return plan


def make_pass(current: str, analysis: Analysis, chosen: Sequence[Fix], analyse: Analyse, apply: Apply,
              unit: str = "file") -> tuple[str, Analysis | None, str | None, bool]:
    """One pass: (the fixed text, its analysis or None when the pass is not kept, why not, whether the passes
    before it are dropped too).  The one check of a fix, for ``run`` and an editor's
    quick fix alike (``api.FixesOnDemand.checked``: never one ``--fix`` would refuse)."""
    titles = "; ".join(f.title for f in chosen)
    try:
        new = apply(current, chosen)
    except ValueError:
        return current, None, f"the fixes overlap; {unit} left unchanged", True
    except PassRefused as refused:
        return current, None, f"{refused}; {unit} left unchanged", True
    if isinstance(parsing.parse(new), parsing.SyntaxProblem):
        return current, None, f"the fixed code would not parse ({titles}); {unit} left unchanged", True
    new_analysis = analyse(new) if new != current else None
    if new_analysis is not None and new_analysis.findings >= analysis.findings:
        # a fix that does not remove its finding would be offered (and applied) again and again
        return current, None, f"a fix did not remove its finding ({titles}); not applied", False
    return new, new_analysis, None, False


def apply_fixes(text: str, fixes: Sequence[Fix]) -> str:
    """The text with every edit of ``fixes`` made (``ValueError`` when two overlap)."""
    return apply_edits(text, [e for f in fixes for e in f.edits])


def choose_in(text: str, analysis: Analysis, unsafe: bool) -> list[Fix]:
    """One pass's fixes for ``text``: ``choose`` with each fix grouped by the function around its finding."""
    candidates = analysis.allowed(unsafe)
    return choose([c.fix for c in candidates], unsafe, functions_around(text, [c.line for c in candidates]))


def functions_around(text: str, lines: Sequence[int]) -> list[object]:
    """The innermost function (its first line; 0 for module level) around each of ``lines``."""
    tree = parsing.parse(text)
    spans = []
    if not isinstance(tree, parsing.SyntaxProblem):
        spans = [(n.lineno, n.end_lineno) for n in walk_statements(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    keys: list[object] = []
    for line in lines:
        inside = [s for s in spans if s[0] <= line <= s[1]]
        keys.append(max(inside)[0] if inside else 0)
    return keys


def _lines_touched(fix: Fix) -> list[tuple[int, int]]:
    return [(e.line, max(e.line, e.end_line)) for e in fix.edits]


def choose(fixes: Sequence[Fix], unsafe: bool, groups: Sequence[object] | None = None) -> list[Fix]:
    """The fixes to apply together: allowed ones, in document order, none sharing a line with another.

    Conflicts are decided per line, not per character: two fixes that edit the same statement are never
    applied in one pass (the next analysis offers the second again, on the fixed text).  With ``groups``
    (one key per fix, e.g. its function), at most one fix per group is taken: fixing one write often
    settles the next one in the same function (``y = y.mul(2)`` makes a later ``y[0] = 1`` harmless), so
    the next pass decides on the fixed code.  The same fix carried by two findings is applied once.  Ties
    (two fixes starting at one position) go to the title first in sort order, so the choice never depends on
    the order the findings came in.
    """
    keys = list(groups) if groups is not None else [object() for _ in fixes]
    order = sorted(range(len(fixes)), key=lambda i: (_start(fixes[i]), fixes[i].title, _edit_key(fixes[i])))
    taken: list[Fix] = []
    seen: set[tuple[TextEdit, ...]] = set()
    used: list[tuple[int, int]] = []
    used_groups: set[object] = set()
    for i in order:
        fix = fixes[i]
        if not fix.edits or (not fix.safe and not unsafe):
            continue
        key = tuple(sorted(fix.edits, key=lambda e: (e.line, e.column)))
        if key in seen:
            continue
        seen.add(key)
        spans = _lines_touched(fix)
        if keys[i] in used_groups or any(a <= d and c <= b for a, b in spans for c, d in used):
            continue
        used.extend(spans)
        used_groups.add(keys[i])
        taken.append(fix)
    return taken


def _start(fix: Fix) -> tuple[int, int]:
    return min(((e.line, e.column) for e in fix.edits), default=(0, 0))


def _edit_key(fix: Fix) -> tuple:
    return tuple(sorted((e.line, e.column, e.end_line, e.end_column, e.new_text) for e in fix.edits))
