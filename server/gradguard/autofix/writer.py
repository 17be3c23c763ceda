"""Applying fixes to files: ``gradguard check --fix / --unsafe-fixes / --diff`` on ``.py`` files.

The fixes chosen and the passes made are the planner's (``plan.run``, with the analysis of
``api.analyze_source`` as its re-analysis): this module only reads and writes files.  Text whose fixed
version would not parse is left exactly as it was, with a message.  The result converges: running it again
changes nothing.  Notebooks use the same planner on the text of their cells (``fix_notebook``: the program
their code cells make is planned on, and each pass's edits are mapped back into the cells).
"""

from __future__ import annotations

import io
import os
import tokenize
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from .. import notebooks as nb
from .. import parsing
from ..api import analyze_notebook, analyze_program, analyze_source
from ..config import Config
from ..diagnostics import Diagnostic, FileResult, Fix
from ..inference.project import overlaid
from ..result_cache import atomic_write, digest_of
from ..text import unified_diff
from . import plan

CHANGED = "changed while fixing; not written (run gradguard again)"


class Changed(Exception):
    """The file on disk is no longer the bytes the fixes were computed from."""


def write_if_unchanged(path: Path, expected: bytes, new: bytes) -> None:
    """Replace ``path``'s content by ``new`` only if it still is ``expected``, byte for byte; else ``Changed``.

    The compare and the write are one step for every gradguard run: the file is locked (``flock`` on its
    inode) while it is compared, and the new content goes to a temporary file in the same folder (fsync'd,
    the original's mode and owner kept) renamed over it; a file with other hard links is rewritten in place
    instead, under the lock.  A second ``--fix`` run waiting on the lock then finds the new inode, or the new
    bytes, and refuses.  An editor does not take the lock; its write between the compare and
    the rename (microseconds) is the one window left.  A symlink is followed: its target is replaced."""
    target = Path(os.path.realpath(path))
    try:
        fd = os.open(target, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise Changed() from None
    try:
        try:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX)
        except (ImportError, OSError):
            pass  # no locks here: the compare below still catches all but a write racing it
        st = os.fstat(fd)
        try:
            now = os.stat(target)
        except FileNotFoundError:
            raise Changed() from None
        if (now.st_ino, now.st_dev) != (st.st_ino, st.st_dev):
            raise Changed()  # replaced (by another run's rename, or an editor's) since it was opened
        with os.fdopen(os.dup(fd), "rb") as f:
            if f.read() != expected:
                raise Changed()
        if st.st_nlink > 1:  # a rename would cut the other names off: rewrite this inode, still under the lock
            with open(target, "r+b") as f:
                f.write(new)
                f.truncate()
                f.flush()
                os.fsync(f.fileno())
            return
        atomic_write(target, new, like=st)
    finally:
        os.close(fd)


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
             result: FileResult | None = None, entries: Sequence[tuple[str, Path]] = (),
             file: Path | None = None) -> FixOutcome:
    """Apply fixes to ``text`` until none applies; ``result`` is its analysis when already known.

    ``entries``: the files (display path, path) whose analysis places findings in this one, the file ``file`` (a
    write in a module their training code calls, ``engine._placed``).  Each analysis of a text is then this file's own findings and those the entries'
    analyses place here, each entry analysed with that text read for this module (``project.overlaid``): the
    planner fixes this file's text with the fixes those findings carry, as it fixes its own.  Only the findings
    this file shows are fixed here (one an analysis of it places elsewhere is fixed in its own file)."""
    home = os.path.realpath(file if file is not None else path)
    first = result if result is not None else _analysis(text, path, config, entries, home)
    results = {text: first}

    def analyse(current: str) -> plan.Analysis:
        if current not in results:
            results[current] = _analysis(current, path, config, entries, home)
        return plan.Analysis.of([d for d in results[current].diagnostics if d.path == path])

    done = plan.run(text, analyse, unsafe, analyse(text))
    return FixOutcome(path, text, done.text, results[done.text], len(done.applied),
                      [f"{path}: {p}" for p in done.problems], len(first.diagnostics))


def _analysis(text: str, path: str, config: Config | None, entries: Sequence[tuple[str, Path]], home: str
              ) -> FileResult:
    """``text``'s analysis as ``path`` (the file ``home``), with the findings ``entries``' analyses place in it
    when they read ``text`` for it (see ``fix_text``)."""
    own = analyze_source(text, path, config)
    if not entries:
        return own
    placed = []
    for display, entry in entries:
        try:
            data = entry.read_bytes()
        except OSError:
            continue
        with overlaid({home: text}):
            found = analyze_source(data, display, config)
        placed += [d for d in found.diagnostics if d.path == path]
    kept = [d for d in own.diagnostics if d.path == path]
    taken = {d.place for d in kept}
    kept += [d for d in placed if d.place not in taken and not taken.add(d.place)]
    return replace(own, diagnostics=sorted(kept, key=lambda d: d.order))


def _encoding(data: bytes) -> str:
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError:
        encoding = "utf-8"
    return encoding


def fix_path(path: Path, display: str, config: Config | None = None, unsafe: bool = False, write: bool = True,
             result: FileResult | None = None, digest: str | None = None,
             entries: Sequence[tuple[str, Path]] = ()) -> FixOutcome:
    """Fix one file; write it back (same encoding, same line endings) when ``write`` and it changed.

    ``result`` is used as the analysis of the file only when ``digest`` says it is the analysis of the bytes
    read here; otherwise they are analysed again (the file changed since).  The fixed text is written only
    if the file is still, byte for byte, what was read (``write_if_unchanged``): one edited meanwhile is left
    as it is, with a "changed while fixing" problem.

    A file that cannot be read or written again keeps its findings (``result``, the analysis of the file as
    it is) and is marked ``write_failed``: reporting the fixed text's findings would claim fixes that
    never reached the disk.

    ``entries``: the files whose analysis places findings in this one (``fix_text``); the findings are then found
    again from the bytes read here, since the placed ones were made from the file as those analyses read it."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        return FixOutcome(display, "", "", result or FileResult(display), 0,
                          [f"{display}: cannot read the file to fix it: {exc.strerror or exc}"], write_failed=True)
    if result is not None and (digest is None or digest != digest_of(data) or entries):
        result = None  # the findings are of other bytes: their fixes would be applied to the wrong text
    text = parsing.decode(data)
    if isinstance(text, parsing.Unreadable):
        return FixOutcome(display, "", "", analyze_source(data, display, config))
    outcome = fix_text(text, display, config, unsafe, result, entries, path)
    if write and outcome.changed:
        try:
            write_if_unchanged(path, data, outcome.fixed.encode(_encoding(data)))
        except Changed:
            return FixOutcome(display, text, text, result or analyze_source(text, display, config),
                              0, [*outcome.problems, f"{display}: {CHANGED}"], outcome.before, write_failed=True)
        except (OSError, UnicodeEncodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            return FixOutcome(display, text, text, result or analyze_source(text, display, config), 0,
                              [*outcome.problems, f"{display}: cannot write the fixed file: {reason}"],
                              outcome.before, write_failed=True)
    return outcome


# --- notebooks -----------------------------------------------------------------


class CellsPlan:
    """The fix planner's view of a notebook: the program its code cells make is the text planned on
    (``plan.run``); this only maps each pass's edits back into the cells and rebuilds the program.

    ``only_cell``: offer only the fixes whose edits all lie in that cell (an editor's "Fix all" of one cell).
    Every program met is kept by its text, so ``program(plan.text)`` is the notebook the plan ends with."""

    def __init__(self, cells: list[tuple[str, str]], path: str, config: Config | None = None,
                 only_cell: int | None = None, cache: dict | None = None):
        program = nb.Program.from_cells(cells)
        self.path, self.config, self.only_cell, self.cache = path, config, only_cell, cache
        self._programs: dict[str, tuple[nb.Program, list[tuple[str, str]]]] = {program.text: (program, list(cells))}
        self._results: dict[str, tuple[FileResult, list[Diagnostic]]] = {}
        self.text = program.text

    def program(self, text: str) -> nb.Program:
        return self._programs[text][0]

    def result(self, text: str) -> tuple[FileResult, list[Diagnostic]]:
        """The analysis of ``text`` mapped to cells, and in program positions."""
        if text not in self._results:
            self._results[text] = analyze_program(self.program(text), self.path, self.config, self.cache)
        return self._results[text]

    def analyse(self, text: str) -> plan.Analysis:
        program, (_, raw) = self.program(text), self.result(text)
        candidates = []
        for d in raw:
            mapped = nb.map_fix(program, d.fix)
            if mapped is not None and (self.only_cell is None or all(e.cell == self.only_cell for e in mapped.edits)):
                candidates.append(plan.Candidate(d.fix, d.line))
        return plan.Analysis(tuple(candidates), len(raw))

    def apply(self, text: str, fixes: Sequence[Fix]) -> str:
        program, sources = self._programs[text]
        new_sources = nb.apply_to_cells(program, list(fixes))
        if new_sources is None:
            raise plan.PassRefused("a fix edits a line that is not Python in its cell")
        broken = [n for n, cell_text in new_sources.items() if nb.make_cell(n, cell_text).problem is not None]
        if broken:
            titles = "; ".join(f.title for f in fixes)
            raise plan.PassRefused(f"the fixed cell {broken[0]} would not parse ({titles})")
        cells = [(kind, new_sources.get(n, source)) for n, (kind, source) in enumerate(sources, start=1)]
        new = nb.Program.from_cells(cells)
        self._programs[new.text] = (new, cells)
        return new.text

    def run(self, unsafe: bool) -> plan.Plan:
        return plan.run(self.text, self.analyse, unsafe, apply=self.apply, unit="notebook")


def fix_notebook(path: Path, display: str, config: Config | None = None, unsafe: bool = False,
                 write: bool = True, result: FileResult | None = None, digest: str | None = None):
    """Fix one notebook's cells until no allowed fix is left (like ``fix_path``, whose rules for a
    file that cannot be read or written back, or that changed while it was fixed, hold here too)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        return NotebookFixOutcome(display, "", "", result or FileResult(display), 0,
                                  [f"{display}: cannot read the notebook to fix it: {exc.strerror or exc}"],
                                  write_failed=True)
    if result is not None and (digest is None or digest != digest_of(data)):
        result = None
    try:
        notebook = nb.Notebook.loads(data)
    except nb.NotebookError:
        return NotebookFixOutcome(display, "", "", result or analyze_notebook(data, display, config))
    cells = CellsPlan(notebook.sources(), display, config)
    first = cells.result(cells.text)[0]
    if notebook.upgraded:
        problem = f"{display}: an nbformat 3 notebook is not rewritten; save it as nbformat 4 first"
        return NotebookFixOutcome(display, "", "", first, 0, [problem], len(first.diagnostics))
    done = cells.run(unsafe)
    problems = [f"{display}: {p}" for p in done.problems]
    original = {c.number: c.source for c in cells.program(done.original).cells}
    program = cells.program(done.text)
    fixed = {c.number: c.source for c in program.cells}
    for cell in program.cells:
        if cell.source != original[cell.number]:
            notebook.set_source(cell.number, cell.source)
    before, after = _cells_text(original), _cells_text(fixed)
    outcome = NotebookFixOutcome(display, before, after, cells.result(done.text)[0], len(done.applied), problems,
                                 len(first.diagnostics))
    outcome.cells_before, outcome.cells_after = original, fixed
    if write and outcome.changed:
        try:
            write_if_unchanged(path, data, notebook.dumps().encode("utf-8"))
        except (Changed, OSError) as exc:
            why = CHANGED if isinstance(exc, Changed) else f"cannot write the fixed notebook: {exc.strerror or exc}"
            problems.append(f"{display}: {why}")
            return NotebookFixOutcome(display, before, before, result or first, 0, problems,
                                      len(first.diagnostics), write_failed=True)
    return outcome


def _cells_text(cells: dict[int, str]) -> str:
    return "".join(f"# cell {n}\n{text}\n" for n, text in sorted(cells.items()))


@dataclass
class NotebookFixOutcome(FixOutcome):
    """A ``FixOutcome`` whose diff is per cell: ``a/nb.ipynb:cell 5``."""

    cells_before: dict[int, str] = field(default_factory=dict)
    cells_after: dict[int, str] = field(default_factory=dict)

    def diff(self) -> str:
        before, after = self.cells_before, self.cells_after
        return "".join(
            unified_diff(before[n] + "\n", after.get(n, "") + "\n", f"{self.path}:cell {n}")
            for n in sorted(before)
            if before[n] != after.get(n, before[n])
        )


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
              write: bool, digests: dict[str, str] | None = None,
              origins: dict[str, list[str]] | None = None) -> FixRun:
    """Fix the files among ``results`` (keyed by display path in ``paths``) that have an allowed fix: a
    notebook's cells, a Python file's text.  ``digests``: the digest of the bytes each result is the analysis
    of (``batch.analyze_cached``); a result of other bytes than the file's now is not used to fix it.
    ``origins``: for a file that holds findings other files' analyses placed in it (``placed_origins``), those
    files: it is fixed with their findings too (``fix_text``), also when it was not checked itself."""
    digests, origins = digests or {}, origins or {}
    run = FixRun([], unsafe=unsafe, write=write)
    for result in results:
        path = paths.get(result.path)
        entries = [(e, paths[e]) for e in origins.get(result.path, ()) if e in paths]
        if path is None and entries and Path(result.path).is_file():
            path = Path(result.path)  # a module the checked files' training code calls, shown as they name it
        if path is None or result.error is not None or not fixable(result, unsafe):
            run.results.append(result)
            continue
        if nb.is_notebook(result.path):
            outcome = fix_notebook(path, result.path, config, unsafe, write, result, digests.get(result.path))
        else:
            outcome = fix_path(path, result.path, config, unsafe, write, result, digests.get(result.path), entries)
        run.outcomes.append(outcome)
        run.results.append(outcome.result)
    return run


def placed_origins(results: list[FileResult]) -> dict[str, list[str]]:
    """For each file that findings of other files' analyses are placed in (``engine._placed``), those files."""
    origins: dict[str, list[str]] = {}
    for r in results:
        for d in r.diagnostics:
            if d.path != r.path and r.path not in origins.setdefault(d.path, []):
                origins[d.path].append(r.path)
    return origins
