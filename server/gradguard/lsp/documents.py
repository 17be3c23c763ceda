"""What the server analyses: a ``Document``, either one text file or a notebook whose code cells are analysed as
one program.  Both are seen through a ``Snapshot``: the parts (the file, or every cell) with their uri, text and
version, and a position map from a finding's ``cell`` to the part it is in.  So scheduling, publishing, code
actions, fix-all and hover have one path, and a notebook is that path with a position map.

Each diagnostic's ``data`` is its JSON (``Diagnostic.to_json``) plus the ``version`` of its part, without ``fix``:
diagnostics are published before their fixes are built (``api.analyze_source(..., fixes=False)``), and code
actions and hover ask ``fixes_job`` for the fixes of the findings they show, built once per published version.
Every edit of a notebook's fix names the ``uri`` and ``version`` of the cell it edits (a text file's edits are in
the diagnostic's own document).  Fix-all's planner jobs are the fix layer's (``lsp/fixes.py``, loaded on first use):
nothing here imports the planner or libcst.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.uris import from_fs_path

from .. import api
from .. import notebooks as nb
from ..config import Config
from ..diagnostics import SYNTAX_ERROR, Diagnostic, FileResult, FixSource
from ..text import split_lines
from . import convert
from .follow import follow_changes

if TYPE_CHECKING:  # pragma: no cover
    from ..probe.model import ProbeResult

Pair = tuple[Diagnostic, types.Diagnostic]  # a finding and what the client was shown for it
FixKey = tuple[str, int, int]  # a published finding of a part: its code, line and column (as in its ``data``)
FixData = dict[str, Any] | None  # a fix as in a diagnostic's ``data["fix"]``; None: the finding has none

# A document larger than this (characters, all cells of a notebook together) is not analysed: it gets one
# GG901 saying so.  An 8 MB document cost 1.1 GB and 11 s per keystroke; the largest real files are far below.
MAX_DOCUMENT_CHARS = int(os.environ.get("GRADGUARD_LSP_MAX_DOCUMENT_CHARS") or 2_000_000)


@dataclass(frozen=True)
class Part:
    """A text the client edits: the file, or one notebook cell."""

    uri: str
    text: str
    version: int | None
    code: bool = True  # False for a markdown cell: not analysed, but it counts in the cell numbers


@dataclass(frozen=True)
class Snapshot:
    """A document at one moment: what is analysed, and the position map back to the parts."""

    version: int | None
    parts: tuple[Part, ...]
    notebook: bool = False

    def part(self, cell: int | None) -> int | None:
        """The index of the part a finding's (or edit's) ``cell`` is in; None when it is in none."""
        if not self.notebook:
            return 0
        return cell - 1 if cell is not None and 1 <= cell <= len(self.parts) else None

    def index(self, uri: str) -> int | None:
        return next((i for i, p in enumerate(self.parts) if p.uri == uri), None)


def too_large(snap: Snapshot) -> int | None:
    """The size of ``snap`` when it is over ``MAX_DOCUMENT_CHARS``, else None."""
    size = sum(len(p.text) for p in snap.parts)
    return size if size > MAX_DOCUMENT_CHARS else None


@dataclass(frozen=True)
class Probed:
    """The runtime probe's result for one text of a document."""

    text: str
    result: ProbeResult


@dataclass(eq=False)
class Document:
    """The server's state for one open document (a text file or a notebook)."""

    uri: str
    task: asyncio.Task | None = None
    published: dict[str, list[Pair]] = field(default_factory=dict)  # part uri -> what the client was shown
    published_version: int | None = None  # the document version ``published`` was computed on
    published_snapshot: Snapshot | None = None  # ... and the snapshot it was computed on
    # The fixes of the published findings built so far, by part uri (``fixes_job``), and what builds the others:
    # the fix source of the newest current run, with its version.
    built_fixes: dict[str, dict[FixKey, FixData]] = field(default_factory=dict)
    fix_source: tuple[int | None, FixSource | None] = (None, None)
    revision: int = 0  # bumped when its findings change for another reason than its text (a probe result)
    # The engine's per-function cache: each run gets a copy and the copy of the newest current run replaces it,
    # so two runs of one document in the pool never share a dict.
    cache: dict = field(default_factory=dict)
    # Caches a newer run replaced, dropped once its findings are out (``release``): freeing the syntax tree of
    # half a 3,000-line file takes 3-4 ms, which need not sit between an edit and its diagnostics.
    retired: list[dict] = field(default_factory=list)
    notebook = False

    def snapshot(self, workspace: Any) -> Snapshot | None:
        raise NotImplementedError

    def analyse(self, snap: Snapshot, path: str, config: Config, cache: dict) -> FileResult:
        """In the pool: the findings of ``snap``; ``cache`` (a copy of the document's) is updated in place."""
        raise NotImplementedError

    def accept(self, result: FileResult, cache: dict, current: bool) -> list[Diagnostic]:
        """On the event loop: the findings to show for a finished run (``current``: of the newest text)."""
        if current:
            self.retired.append(self.cache)
            self.cache = cache
        return list(result.diagnostics)

    def release(self) -> None:
        """Free what the runs whose findings are out replaced (after the reply, off the edit's path)."""
        self.retired.clear()

    def keep_fixes(self, version: int | None, result: FileResult) -> None:
        """A current run finished: its findings' fixes are built from ``result`` when asked for."""
        self.fix_source = (version, result.fixes)

    def show(self, snap: Snapshot, pairs: dict[str, list[Pair]]) -> None:
        """``pairs`` (of ``snap``) are what the client is shown now."""
        self.published, self.published_version, self.published_snapshot = pairs, snap.version, snap
        self.built_fixes = {}

    def fix_source_now(self) -> FixSource | None:
        """The fix source of the findings published now (None when they came from another run)."""
        version, source = self.fix_source
        return source if version == self.published_version else None

    def known_fixes(self, uri: str) -> dict[FixKey, FixData]:
        """The fixes of part ``uri``'s published findings built so far."""
        return self.built_fixes.get(uri, {})

    def fixes_job(self, uri: str, keys: Iterable[FixKey]) -> Callable[[], dict[FixKey, FixData]] | None:
        """The job (for the pool) building the fixes of the published findings of part ``uri`` that ``keys``
        name and that are not built yet; None when there is none.  Hand its result to ``remember_fixes``.
        The findings of a run with a syntax error (kept from the last good text) get none: they were found
        in another text than the one shown."""
        known, source, snap = self.known_fixes(uri), self.fix_source_now(), self.published_snapshot
        wanted = set(keys) - known.keys()
        diags = [d for d, _ in self.published.get(uri, []) if key_of(d) in wanted]
        if not diags or snap is None or source is None:
            return None  # without a source, not known (see above): neither a fix nor "no fix"

        def run() -> dict[FixKey, FixData]:
            return {key_of(d): fix_data(snap, d) for d in source.checked(diags)}

        return run

    def shown_at(self, uri: str, position: types.Position) -> list[Pair]:
        """What part ``uri`` shows (pairs of a finding and its LSP diagnostic) whose range holds ``position``."""
        return [(d, lsp) for d, lsp in self.published.get(uri, []) if _contains(lsp.range, position)]

    def remember_fixes(self, version: int | None, uri: str, built: dict[FixKey, FixData]) -> None:
        if version == self.published_version:
            self.built_fixes.setdefault(uri, {}).update(built)

    def may_fix(self, uris: list[str], fixes_work: bool) -> bool:
        """Whether the findings shown in ``uris`` may have a safe fix: one is known to, or one whose rule has
        fixes has none built yet (cheap: for listing a fix-all, whose planner decides when it runs).
        ``fixes_work``: fixes can be built in this interpreter (``fixes.unavailable``)."""
        can_build = self.fix_source_now() is not None and fixes_work
        for uri in uris:
            known = self.known_fixes(uri)
            for d, _ in self.published.get(uri, []):
                if key_of(d) in known:
                    fix = known[key_of(d)]
                    if fix is not None and fix.get("edits") and fix.get("safe") is True:
                        return True
                elif can_build and d.code in api.FIX_BUILDERS:
                    return True
        return False

    def forget(self) -> None:
        """The configuration changed: nothing computed before may be reused."""
        self.cache = {}


@dataclass(eq=False)
class TextDocument(Document):
    """A text file.  A syntax error keeps the last good findings (except those on the error line) and adds it;
    kept findings follow the edits (``follow``)."""

    text: str = ""  # the text the server last saw (to follow edits with ``last_good``)
    last_good: list[Diagnostic] = field(default_factory=list)  # of the last run without a syntax error
    # The runtime probe (``probe_support``): its result for the text it ran on, merged into the findings while
    # the document has that text; a probe running now; a save during that run (it probes once more after it).
    probed: Probed | None = None
    probing: bool = False
    probe_again: bool = False

    def snapshot(self, workspace: Any) -> Snapshot:
        doc = workspace.get_text_document(self.uri)
        return Snapshot(doc.version, (Part(self.uri, doc.source, doc.version),))

    def analyse(self, snap: Snapshot, path: str, config: Config, cache: dict) -> FileResult:
        return api.analyze_source(snap.parts[0].text, path, config, cache=cache, fixes=False, own_file=False)

    def accept(self, result: FileResult, cache: dict, current: bool) -> list[Diagnostic]:
        syntax = [d for d in result.diagnostics if d.code == SYNTAX_ERROR]
        if result.error is not None and syntax:
            bad_lines = {d.line for d in syntax}
            return [d for d in self.last_good if d.line not in bad_lines] + syntax
        merged = list(result.diagnostics)
        if current:
            self.retired.append(self.cache)
            self.last_good, self.cache = merged, cache
        return merged

    def changed(self, new_text: str, changes: Any) -> None:
        """Move the kept findings along with the edits just applied to the text."""
        self.last_good = follow_changes(self.last_good, self.text, new_text, changes)
        self.text = new_text

    def forget(self) -> None:
        self.cache, self.last_good = {}, []


@dataclass(eq=False)
class NotebookDocument(Document):
    """A notebook: its code cells, in order, analysed as one program (``gradguard.notebooks``)."""

    notebook = True

    def snapshot(self, workspace: Any) -> Snapshot | None:
        notebook = workspace.get_notebook_document(notebook_uri=self.uri)
        if notebook is None:
            return None
        parts = []
        for cell in notebook.cells:
            doc = workspace.get_text_document(cell.document)
            code = cell.kind == types.NotebookCellKind.Code and (doc.language_id or "python") == "python"
            parts.append(Part(cell.document, doc.source, doc.version, code))
        return Snapshot(notebook.version, tuple(parts), notebook=True)

    def analyse(self, snap: Snapshot, path: str, config: Config, cache: dict) -> FileResult:
        program = nb.Program.from_cells([("code" if p.code else "markdown", p.text) for p in snap.parts])
        return api.analyze_program(program, path, config, cache, fixes=False)[0]


def to_lsp(snap: Snapshot, diags: list[Diagnostic], encoding: str, docs_url: str | None) -> dict[str, list[Pair]]:
    """The findings of ``snap`` as LSP diagnostics per part uri (every part has an entry), through the
    position map: each finding, related location and fix edit goes to the part it is in."""
    lines: dict[int, list[str]] = {}

    def lines_of(i: int) -> list[str]:
        if i not in lines:
            lines[i] = split_lines(snap.parts[i].text)
        return lines[i]

    out: dict[str, list[Pair]] = {p.uri: [] for p in snap.parts}
    for d in diags:
        i = snap.part(d.cell)
        if i is None:
            continue
        part = snap.parts[i]
        lsp = convert.to_lsp_diagnostic(d, part.uri, lines_of(i), encoding, docs_url, related=False)
        related = []
        for r in d.related:
            j = snap.part(r.cell)
            if j is not None:  # else: not in a part of this document
                rng = convert.to_range(lines_of(j), r.line, r.column, r.line, r.column, encoding)
                related.append(types.DiagnosticRelatedInformation(
                    location=types.Location(uri=snap.parts[j].uri, range=rng), message=r.message))
        lsp.related_information = related or None
        data = lsp.data if isinstance(lsp.data, dict) else {}
        data["version"] = part.version
        data.pop("fix", None)  # built on demand (``Document.fixes_job``): "fix": null would say it has none
        out[part.uri].append((d, lsp))
    return out


def key_of(d: Diagnostic) -> FixKey:
    return d.place


def data_key(data: dict[str, Any]) -> FixKey:
    """The ``key_of`` the diagnostic whose ``data`` this is (as published, or as a code action carries it)."""
    return data.get("code"), data.get("line"), data.get("column")


def fix_data(snap: Snapshot, d: Diagnostic) -> FixData:
    """The fix of ``d`` (a finding of ``snap``) as its ``data["fix"]``: each edit of a notebook's names the
    ``uri`` and ``version`` of the cell it is in; each edit of a fix made in another module of the project (``Fix.file``)
    names that file's ``uri`` and the ``base`` digest of the text it was made for; None when it has none, or an
    edit is outside every part."""
    fix = d.to_json()["fix"]
    if fix is not None and d.fix.file is not None:  # made in another module of the project, for the text it names
        for edit in fix["edits"]:
            edit["uri"], edit["base"] = from_fs_path(d.fix.file) or d.fix.file, d.fix.base
        return fix
    if fix is None or not snap.notebook:
        return fix
    for edit in fix["edits"]:
        j = snap.part(edit.get("cell"))
        if j is None:
            return None
        edit["uri"], edit["version"] = snap.parts[j].uri, snap.parts[j].version
    return fix


def _contains(rng: types.Range, pos: types.Position) -> bool:
    return (rng.start.line, rng.start.character) <= (pos.line, pos.character) <= (rng.end.line, rng.end.character)
