"""Fix-all in the editor ("Fix all", ``source.fixAll.gradguard``, ``gradguard.applyAllFixes``): the fix
planner's run for a document, and its result as edits of one document.

The planner (``autofix.plan.run``) chooses, orders and applies the safe fixes and re-analyses until none is left,
exactly as ``gradguard check --fix`` does (for a notebook: ``autofix.writer.CellsPlan`` over its program); this module
makes the job that runs it in the pool (``fix_job``, ``notebook_fix_job``) and turns its fixed text into the few
edits that make it (``text.diff_edits``, 1-based code points), which ``convert`` maps to the client's
positions.  So an editor's "Fix all" and ``--fix`` give the same text.  Part of the fix layer the server loads
on first use (``on_demand.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .. import api
from ..config import Config
from ..diagnostics import SYNTAX_ERROR, Diagnostic, FileResult
from ..autofix import plan, writer
from ..text import diff_edits
from .documents import Document, NotebookDocument, Snapshot, TextDocument

FixJob = Callable[[], tuple[str, str, plan.Plan]]  # run in the pool: (text before, text after, the plan)


def fix_job(document: Document, snap: Snapshot, uri: str, path: str, config: Config) -> FixJob | None:
    """The fix planner's run for part ``uri`` of ``document`` (at ``snap``), to be run in the pool; None when it
    has nothing to fix."""
    if isinstance(document, NotebookDocument):
        return _cell_fix_job(document, snap, uri, path, config)
    if isinstance(document, TextDocument):
        return _text_fix_job(document, snap, uri, path, config)
    return None


def _text_fix_job(document: TextDocument, snap: Snapshot, uri: str, path: str, config: Config) -> FixJob | None:
    text, cache, source = snap.parts[0].text, dict(document.cache), document.fix_source_now()
    shown = None
    if document.published_version == snap.version and snap.version is not None:
        shown = [d for d, _ in document.published.get(uri, [])]  # the planner's first pass: what is shown
        if any(d.code == SYNTAX_ERROR for d in shown):
            return None  # the kept findings' fixes are for regions the parser could not check

    def run() -> tuple[str, str, plan.Plan]:
        known = source.fixed(shown) if shown is not None and source is not None else None
        done = fix_all(text, lambda t: api.analyze_source(t, path, config, cache=cache, own_file=False), known)
        return text, done.text, done

    return run


def _cell_fix_job(document: NotebookDocument, snap: Snapshot, uri: str, path: str, config: Config) -> FixJob | None:
    """The safe fixes of cell ``uri``: the planner ``--fix`` uses on the notebook's program
    (``autofix.writer.CellsPlan``), offered only the fixes whose edits all lie in that cell."""
    index = snap.index(uri)
    if index is None or any(d.code == SYNTAX_ERROR for d, _ in document.published.get(uri, [])):
        return None
    number = index + 1
    cells = writer.CellsPlan([("code" if p.code else "markdown", p.text) for p in snap.parts], path, config,
                             only_cell=number, cache=dict(document.cache))
    before = snap.parts[index].text

    def run() -> tuple[str, str, plan.Plan]:
        done = cells.run(False)
        after = next((c.source for c in cells.program(done.text).cells if c.number == number), before)
        return before, after, done

    return run


def notebook_fix_job(document: NotebookDocument, snap: Snapshot, path: str, config: Config
                     ) -> Callable[[], tuple[list[str], plan.Plan]] | None:
    """The safe fixes of every cell at once (``notebook.source.fixAll``): the planner ``--fix`` uses on the
    notebook's program; the job gives each part's text after it (in ``snap.parts`` order) and the plan."""
    if any(d.code == SYNTAX_ERROR for pairs in document.published.values() for d, _ in pairs):
        return None
    cells = writer.CellsPlan([("code" if p.code else "markdown", p.text) for p in snap.parts], path, config,
                             cache=dict(document.cache))

    def run() -> tuple[list[str], plan.Plan]:
        done = cells.run(False)
        after = {c.number: c.source for c in cells.program(done.text).cells}
        return [after.get(n, p.text) for n, p in enumerate(snap.parts, start=1)], done

    return run


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
