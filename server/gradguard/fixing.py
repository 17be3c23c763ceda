"""Applying fixes to files: ``gradguard check --fix / --unsafe-fixes / --diff`` on ``.py`` files.

The fixes chosen and the passes made are the planner's (``fixes.plan.run``, with the analysis of
``api.analyze_source`` as its re-analysis): this module only reads and writes files.  Text whose fixed
version would not parse is left exactly as it was, with a message.  The result converges: running it again
changes nothing.  Notebooks use the same planner on the text of their cells (``notebooks.fix_notebook``).
"""

from __future__ import annotations

import io
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

from . import parsing
from .api import analyze_source
from .config import Config
from .diagnostics import FileResult
from .fixes import plan
from .fixes.edits import unified_diff


@dataclass
class FixOutcome:
    path: str
    original: str
    fixed: str
    result: FileResult  # the analysis of the fixed text (of the original when nothing changed)
    applied: int = 0  # fixes applied
    problems: list[str] = field(default_factory=list)
    before: int = 0  # findings before fixing
    write_failed: bool = False  # --fix could not read or write the file: it is as it was, findings and all

    @property
    def changed(self) -> bool:
        return self.fixed != self.original

    @property
    def findings_fixed(self) -> int:
        return max(0, self.before - len(self.result.diagnostics)) if self.changed else 0

    def diff(self) -> str:
        return unified_diff(self.original, self.fixed, self.path)


def fixable(result: FileResult, unsafe: bool) -> int:
    """How many of ``result``'s findings carry a fix that ``--fix`` (with ``unsafe``) would apply."""
    return sum(1 for d in result.diagnostics if d.fix is not None and (d.fix.safe or unsafe))


def fix_text(text: str, path: str, config: Config | None = None, unsafe: bool = False,
             result: FileResult | None = None) -> FixOutcome:
    """Apply fixes to ``text`` until none applies; ``result`` is its analysis when already known."""
    first = result if result is not None else analyze_source(text, path, config)
    results = {text: first}

    def analyse(current: str) -> plan.Analysis:
        if current not in results:
            results[current] = analyze_source(current, path, config)
        return plan.Analysis.of(results[current].diagnostics)

    done = plan.run(text, analyse, unsafe, analyse(text))
    return FixOutcome(path, text, done.text, results[done.text], len(done.applied),
                      [f"{path}: {p}" for p in done.problems], len(first.diagnostics))


def _encoding(data: bytes) -> str:
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError:
        encoding = "utf-8"
    return encoding


def fix_path(path: Path, display: str, config: Config | None = None, unsafe: bool = False, write: bool = True,
             result: FileResult | None = None) -> FixOutcome:
    """Fix one file; write it back (same encoding, same line endings) when ``write`` and it changed.

    A file that cannot be read or written again keeps its findings (``result``, the analysis of the file as
    it is) and is marked ``write_failed``: reporting the fixed text's findings would claim fixes that
    never reached the disk."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        return FixOutcome(display, "", "", result or FileResult(display), 0,
                          [f"{display}: cannot read the file to fix it: {exc.strerror or exc}"], write_failed=True)
    text = parsing.decode(data)
    if isinstance(text, parsing.Unreadable):
        return FixOutcome(display, "", "", analyze_source(data, display, config))
    outcome = fix_text(text, display, config, unsafe, result)
    if write and outcome.changed:
        try:
            path.write_bytes(outcome.fixed.encode(_encoding(data)))
        except (OSError, UnicodeEncodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            return FixOutcome(display, text, text, result or analyze_source(text, display, config), 0,
                              [*outcome.problems, f"{display}: cannot write the fixed file: {reason}"],
                              outcome.before, write_failed=True)
    return outcome


@dataclass
class FixRun:
    """What ``--fix``/``--diff`` did over many files."""

    results: list[FileResult]  # the analysis after fixing, one per file
    outcomes: list[FixOutcome] = field(default_factory=list)
    unsafe: bool = False
    write: bool = True

    @property
    def diff(self) -> str:
        return "".join(o.diff() for o in sorted(self.outcomes, key=lambda o: o.path) if o.changed)

    @property
    def problems(self) -> list[str]:
        return [p for o in self.outcomes for p in o.problems]

    @property
    def fixed(self) -> int:
        """Findings the fixes remove (that --fix removed, or that --diff would)."""
        return sum(o.findings_fixed for o in self.outcomes)

    @property
    def files_changed(self) -> int:
        return sum(1 for o in self.outcomes if o.changed)

    @property
    def write_failures(self) -> int:
        """Files --fix could not read or write back (they keep their findings)."""
        return sum(1 for o in self.outcomes if o.write_failed)

    @property
    def unsafe_left(self) -> int:
        """Findings left that ``--unsafe-fixes`` would fix (0 when it was given)."""
        if self.unsafe:
            return 0
        return sum(1 for r in self.results for d in r.diagnostics if d.fix is not None and not d.fix.safe)


def run_fixes(results: list[FileResult], paths: dict[str, Path], config: Config | None, unsafe: bool,
              write: bool) -> FixRun:
    """Fix the files among ``results`` (keyed by display path in ``paths``) that have an allowed fix."""
    run = FixRun([], unsafe=unsafe, write=write)
    for result in results:
        path = paths.get(result.path)
        if path is None or result.error is not None or not fixable(result, unsafe):
            run.results.append(result)
            continue
        outcome = fix_path(path, result.path, config, unsafe, write, result)
        run.outcomes.append(outcome)
        run.results.append(outcome.result)
    return run
