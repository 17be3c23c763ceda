"""The one analysis API.  The CLI, the language server and the tests all call these.

``analyze_source`` analyses Python, ``analyze_notebook`` a notebook's code cells as one program (``notebooks``
maps its findings back to cells), ``analyze_bytes`` and ``analyze_path`` pick by the file name.
``analyze_source`` never raises for bad input: unreadable bytes, binary data and
syntax errors come back as a single diagnostic with ``FileResult.error`` set.
"""

from __future__ import annotations

import ast
import gc
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from . import bounds, notebooks, parsing
from .autofix.build import Fixer, attach_fixes
from .baseline import fingerprinted
from .config import Config
from .diagnostics import NOT_ANALYSED, SYNTAX_ERROR, UNREADABLE, Diagnostic, FileResult, Severity, Span
from .engine import analyze_module, without_findings
from .fixes import FindingId, FixBuilder, StillFound, Variant, unavailable
from .inference.events import Finding, file_lines, span_of
from .inference.project import module_read, overlaid
from .messages import LineName, other_file, plain_line
from .rules import RULES_BY_CODE
from .suppressions import is_suppressed
from .text import text_digest

# Each rule's fix, handed down to the fix layer (which sits below the rules and imports none of them).
FIX_BUILDERS: dict[str, FixBuilder] = {code: rule.fix for code, rule in RULES_BY_CODE.items() if rule.fix is not None}

def _is_suppressed(diag: Diagnostic, lines: list[str]) -> bool:
    return 1 <= diag.line <= len(lines) and is_suppressed(diag.code, lines[diag.line - 1])


def _input_problem(path: str, code: str, message: str, line: int = 1, column: int = 1) -> FileResult:
    diag = Diagnostic(path, Span(line, column, line, column), code, Severity.ERROR, message)
    return FileResult(path, [diag], error=message)


_PARSED = "parsed"  # the per-document cache's entry for the last parse, a parsing.Parsed (its other keys: hex digests)


# While a file is analysed, the cyclic collector runs after this many new objects, not Python's default 700 (nor
# scans its older generations ten times as often as it would): parsing and the analysis make millions of objects
# that nearly all live until the end of the file, and collecting every 700 of them found nothing to free but
# cost about a seventh of the analysis (issue 27).  The language server runs with these thresholds always.
_COLLECT_THRESHOLDS = (10_000, 50, 100)


@contextmanager
def _fewer_collections():
    """The collector's thresholds raised to ``_COLLECT_THRESHOLDS`` for the block (left alone when the process
    already collects less often), and put back after it."""
    before = gc.get_threshold()
    if before[0] >= _COLLECT_THRESHOLDS[0]:
        yield
        return
    gc.set_threshold(*_COLLECT_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)


def analyze_source(source: str | bytes, path: str = "<string>", config: Config | None = None,
                   cache: dict | None = None, line_name: LineName = plain_line, fixes: bool = True,
                   own_file: bool = True) -> FileResult:
    """Analyse one Python source and return its findings, filtered and ranked by ``config``.

    ``cache``: an empty dict the caller keeps per document and passes again on the next edit; unchanged
    functions then reuse their findings (see ``engine.analyze_module``), and a keystroke inside a statement
    parses only that statement again (``parsing.reparse``).  ``line_name`` names the lines messages refer to
    (a notebook's "line 2 of cell 6").  ``fixes=False`` (the language server's diagnostics, which must not
    wait for fixes): the findings come without fixes, and ``FileResult.fixes`` builds them when asked.
    ``own_file``: a finding whose line to change is in another module of the project that the analysis followed
    a call into is reported in that file (its diagnostic's ``path`` is that file's, beside ``path``; no fix);
    ``False`` (the editor, which shows one document's diagnostics) reports it at the call in this file.
    """
    with _fewer_collections():
        return _analyze_source(source, path, config, cache, line_name, fixes, own_file)


def _analyze_source(source: str | bytes, path: str, config: Config | None, cache: dict | None,
                    line_name: LineName, fixes: bool, own_file: bool = True) -> FileResult:
    config = config or Config()
    text = parsing.decode(source) if isinstance(source, bytes) else source
    if isinstance(text, parsing.Unreadable):
        return _input_problem(path, UNREADABLE, text.reason)
    lines = parsing.source_lines(text)
    previous = cache.get(_PARSED) if cache is not None else None
    before = None
    if previous is not None:  # without fixes, the findings alone are mapped to the text (``parsing.Layout``)
        before = parsing.reparse(lines, previous) if fixes else parsing.reparse_changed_only(lines, previous)
    if before is None:
        # always: a syntax error is worth reporting even in a file with no candidates
        before = parsing.parse_document(text, lines)
    if isinstance(before, parsing.SyntaxProblem):
        return _input_problem(path, SYNTAX_ERROR, before.message, before.line, before.column)
    if not parsing.may_contain_findings(text):
        return FileResult(path)
    parsed = before.tree
    kept = []
    findings = analyze_module(parsed, path, before.tree_lines, use_jedi=config.jedi, cache=cache,
                              view_functions=config.view_functions, with_fixes=fixes, own_file=own_file)
    if cache is not None:
        cache[_PARSED] = before
    to_text = _TextPositions(before, line_name)
    for finding in findings:
        if finding.code == NOT_ANALYSED:  # not a rule: shown whatever --select says, like GG900/GG901
            diag = to_text.diagnostic(finding, path, config.severity_for(NOT_ANALYSED, Severity.ERROR))
        else:
            rule = RULES_BY_CODE[finding.code]
            if not config.enabled(rule.code):
                continue
            default = rule.default_severity if finding.certain else Severity.WARNING
            diag = to_text.diagnostic(finding, path, config.severity_for(rule.code, default))
        if not _is_suppressed(diag, lines if diag.path == path else file_lines(other_file(finding.node))):
            kept.append((finding, diag))
    kept = _fingerprinted(kept, lines, path)
    if config.baseline is not None:  # the editor's path; the CLI applies its baseline after its result cache
        kept = [(f, d) for f, d in kept if not config.baseline.hides(path, d)]
    on_demand = None
    if fixes:  # libcst runs only here, for files with findings
        diagnostics = attach_fixes(text, parsed, path, kept, FIX_BUILDERS, _still_found(before, path),
                                   _variant(before, path), _elsewhere(before, path, config))
    else:
        diagnostics = [d for _, d in kept]
        on_demand = FixesOnDemand(text, before, path, config, kept, dict(cache) if cache is not None else {},
                                  own_file)
    diagnostics += _skipped(before.skipped, path, lines, config, to_text)
    diagnostics.sort(key=lambda d: d.order)
    if on_demand is not None:
        on_demand.shown = len(diagnostics)
    return FileResult(path, diagnostics, fixes=on_demand)


class FixesOnDemand:
    """The fixes of one ``analyze_source(..., fixes=False)``, built when asked for, through the same builders
    and the same check (``_still_found``) as ``fixes=True``, so a finding gets the same fix either way.

    A finding the engine's cache moved before its fix was built (``Finding.data_stale``) is found again by
    analysing its function afresh, with the rest of that analysis's cache, and its fix is built from that.
    Built fixes stay on the findings (``fix_memo``), also in the caller's cache, for the next edits.  A parse
    whose statements kept their old line numbers (``parsing.Layout``) is no base for edits of the text: the
    text is parsed whole when the first fix is asked for, and each asked finding found again in it.
    """

    def __init__(self, text: str, before: parsing.Parsed, path: str, config: Config,
                 kept: list[tuple[Finding, Diagnostic]], cache: dict, own_file: bool = True):
        self.text, self.before, self.path, self.config, self.cache = text, before, path, config, cache
        self.own_file, self.shown = own_file, len(kept)  # ``shown``: every diagnostic of the analysis (GG903 too)
        self.findings = {d.place: f for f, d in kept}
        self._fixer: Fixer | None = None
        self._parsed = before if before.layout is None else None

    def _text_parse(self) -> parsing.Parsed:
        """The parse whose positions are the text's (parsed whole for a ``Layout``: it parsed when analysed)."""
        if self._parsed is None:
            parsed = parsing.parse_document(self.text, self.before.lines)
            assert not isinstance(parsed, parsing.SyntaxProblem), "the text parsed when it was analysed"
            self._parsed = parsed
        return self._parsed

    @property
    def fixer(self) -> Fixer:
        if self._fixer is None:
            parsed = self._text_parse()
            # (the findings' nodes are at the text's lines only when no statement kept its old ones: ``Layout``)
            self._fixer = Fixer(self.text, parsed.tree, self.path, FIX_BUILDERS, _still_found(parsed, self.path),
                                _variant(parsed, self.path), _elsewhere(parsed, self.path, self.config),
                                findings=self.findings.values() if self.before.layout is None else ())
        return self._fixer

    def fixed(self, diagnostics: Sequence[Diagnostic]) -> list[Diagnostic]:
        """``diagnostics`` (of this analysis; others are returned as they are) with their fixes."""
        if unavailable() is not None:  # as ``attach_fixes``: no fix at all rather than some
            return list(diagnostics)
        moved = self.before.layout is not None  # no finding's nodes are where the text's lines are

        def found_again(f: Finding) -> bool:
            return moved or (f.fix_memo is None and f.data_stale)

        asked = [self.findings.get(d.place) for d in diagnostics]
        again_of = [f for f in asked if f is not None and found_again(f)]
        fresh = self._analysed_again(again_of) if again_of else {}
        if fresh:
            self.fixer.know(fresh.values())  # a fix reads the other findings at writes of the same memory
        out = []
        for diag, finding in zip(diagnostics, asked):
            if finding is None:
                out.append(diag)
                continue
            if found_again(finding):
                again = fresh.get(self._text_place(finding))
                if again is None:  # not found again: no fix rather than one made for other lines
                    out.append(diag)
                    continue
                fix = self.fixer.fix(again)
                if not moved:
                    finding.fix_memo = (fix,)  # kept for the edits to come, as a built fix is
                out.append(diag.with_fix(fix))
                continue
            out.append(diag.with_fix(self.fixer.fix(finding)))
        return out

    def checked(self, diagnostics: Sequence[Diagnostic]) -> list[Diagnostic]:
        """``fixed``, but a fix the fix planner would refuse (``plan.make_pass``: alone, it must leave fewer
        findings) is no fix: an editor's quick fix of one finding is checked as ``--fix`` checks it."""
        from .autofix import plan  # the planner on first use: the server's start needs none of it (lsp/test_start.py)

        def analyse_with(file: str | None) -> Callable[[str], plan.Analysis]:
            """The findings once ``fixed`` is this text (with a copy of the cache), or is read for the module ``file``
            (no cache then: it knows only this file)."""
            def analyse(fixed: str) -> plan.Analysis:
                with overlaid({file: fixed} if file is not None else {}):
                    text, cache = (fixed, dict(self.cache)) if file is None else (self.text, None)
                    return plan.Analysis((), len(analyze_source(text, self.path, self.config, cache=cache,
                                                                own_file=self.own_file, fixes=False).diagnostics))
            return analyse

        out = []
        for diag in self.fixed(diagnostics):
            fix = diag.fix
            # a finding this analysis did not make (the probe's) is one more shown before its fix, as `--fix
            # --probe` counts it: its fix must still parse and add no finding
            shown = plan.Analysis((), self.shown + (diag.place not in self.findings))
            if fix is not None and fix.edits:
                base = self.text  # a fix made in another module is checked there, on the text it was made for
                if fix.file is not None:
                    module = module_read(fix.file)
                    base = module.text if module is not None and module.text is not None \
                        and text_digest(module.text) == fix.base else None
                if base is None or plan.make_pass(base, shown, [fix], analyse_with(fix.file), plan.apply_fixes)[1] is None:
                    diag = replace(diag, fix=None)
            out.append(diag)
        return out

    def _text_place(self, finding: Finding) -> tuple[str, int, int]:
        code, line, column = finding.place
        return code, self.before.text_line(line), column

    def _analysed_again(self, stale: list[Finding]) -> dict[tuple[str, int, int], Finding]:
        """The findings of this text with the functions of ``stale`` analysed afresh, by place."""
        involved = [g for f in stale for g in (f, *f.twins)]
        cache = without_findings(self.cache, involved)
        parsed = self._text_parse()
        found = analyze_module(parsed.tree, self.path, parsed.lines, use_jedi=self.config.jedi, cache=cache,
                               view_functions=self.config.view_functions, with_fixes=False)
        return {f.place: f for f in found if not f.data_stale or f.fix_memo is not None}


def _fingerprinted(kept: list[tuple[Finding, Diagnostic]], lines: list[str], path: str
                   ) -> list[tuple[Finding, Diagnostic]]:
    """The pairs, in their order, with fingerprints counted in line order (the order a baseline reads them in),
    each from the text of its own file (a finding placed in another module of the project: that file's)."""
    order = sorted(range(len(kept)), key=lambda i: kept[i][1].order)
    out = list(kept)
    for shown in dict.fromkeys(kept[i][1].path for i in order):
        mine = [i for i in order if kept[i][1].path == shown]
        text = lines if shown == path else file_lines(other_file(kept[mine[0]][0].node))
        for i, diag in zip(mine, fingerprinted([kept[i][1] for i in mine], text)):
            out[i] = (kept[i][0], diag)
    return out


def _still_found(before: parsing.Parsed, path: str) -> StillFound:
    """How a fix checks a candidate: analyse the text it would leave, parsing again only the function it
    changed (the check looks at no statement after it, but for a caller), and look for the same finding.

    The analyses of the last candidate text are kept by what they looked at (the functions around the lines, and
    whether the statements below the change were given their new positions): a second finding checked against
    the same text and functions (another rule's at the same write, the earlier writes ``Fixer._leaves`` asks
    about, the same fix built again) reads the same findings instead of analysing the text again."""
    last: list[tuple[str | None, dict]] = [(None, {})]  # (the candidate text, its findings by what was analysed)

    def check(fixed: str, finding: FindingId) -> bool:
        text, analysed = last[0]
        if text is not fixed and text != fixed:
            analysed = {}
            last[0] = (fixed, analysed)
        # A caller is analysed too when the finding is its analysis's: the statements below the change need their
        # new positions then (the caller may be one of them).
        scope = (finding.lines(), finding.caller_line is not None)
        if scope not in analysed:
            lines = parsing.source_lines(fixed)
            again = parsing.reparse(lines, before, positions_after=scope[1]) or parsing.parse_document(fixed, lines)
            analysed[scope] = (None if isinstance(again, parsing.SyntaxProblem) else
                               analyze_module(again.tree, path, lines, use_jedi=False, only_lines=scope[0]))
        found = analysed[scope]
        if found is None:
            return True
        return any(f.code == finding.code and (f.entry_line == finding.line or finding.backward_line in f.backward_lines)
                   for f in found)

    return check


def _elsewhere(parsed: parsing.Parsed, path: str, config: Config) -> Callable[[str], Fixer | None]:
    """How the fixes of findings placed in another module of the project (``engine._placed``) are built: with that
    module's text as the analysis read it (``project.module_read``), and checked by analysing this file again, its
    tree ``parsed`` (the analysis's own parse, positions the text's: not parsed again per candidate), with the
    candidate text read for that module instead of its file (``project.overlaid``).  The analysis only reads the
    tree (what it learns is its own, by node in its own run, or by the other module's nodes: ``mark_other_file``),
    so each candidate's analysis of it is the one a fresh parse gives.  A candidate still has the finding when this
    file's analysis places one of the same code there, at the line asked about."""

    def fixer_for(module: str) -> Fixer | None:
        read = module_read(module)
        if read is None or read.text is None:
            return None

        def check(fixed: str, finding: FindingId) -> bool:
            with overlaid({module: fixed}):
                found = analyze_module(parsed.tree, path, parsed.tree_lines, use_jedi=config.jedi,
                                       view_functions=config.view_functions, with_fixes=False, own_file=True)
                return any(f.code == finding.code and other_file(f.node) is not None
                           and Path(other_file(f.node)) == Path(module)
                           and finding.line in (f.node.lineno, f.entry_line)
                           or f.code == finding.code and finding.backward_line in f.backward_lines
                           for f in found)

        return Fixer(read.text, read.tree, module, FIX_BUILDERS, check, module=module)

    return fixer_for


def _variant(before: parsing.Parsed, path: str) -> Variant:
    """How a fix sees a variant of the text with as many lines (``fixes.wrappers``): its tree and findings (of the
    changed statements' functions, parsed again alone) and its own ``_still_found``."""

    def analyse(changed: str) -> tuple[ast.Module, list[Finding], StillFound] | None:
        lines = parsing.source_lines(changed)
        again = parsing.reparse(lines, before) or parsing.parse_document(changed, lines)
        if isinstance(again, parsing.SyntaxProblem):
            return None
        first = next((i for i, (a, b) in enumerate(zip(lines, before.lines), start=1) if a != b), 1)
        found = analyze_module(again.tree, path, lines, use_jedi=False, only_lines=(first,))
        return again.tree, found, _still_found(again, path)

    return analyse


def _skipped(placeholders: Sequence[bounds.Unanalysed], path: str, lines: list[str], config: Config,
             to_text: "_TextPositions") -> list[Diagnostic]:
    """One GG903 for each part of the tree that was too deep to analyse (``parsing.Parsed.skipped``), unless the
    configuration turns GG903 off (then, as for any rule, the user has said they do not want to hear it)."""
    out = []
    if not config.enabled(NOT_ANALYSED):
        return out
    for node in placeholders:
        if node.what == "the file":
            message = f"not analysed: the file {node.why}; nothing in it was checked"
        else:
            effect = "its value" if node.what == "the expression" else "what it assigns"
            message = (f"not analysed: {node.what} on {to_text.line_name(node.lineno)} {node.why}; it was skipped "
                       f"({effect} is unknown to the code after it) and the rest of the file was analysed")
        diag = Diagnostic(path, to_text.span(node), NOT_ANALYSED, config.severity_for(NOT_ANALYSED, Severity.ERROR),
                          message)
        if not _is_suppressed(diag, lines):
            out.append(diag)
    return out


class _TextPositions:
    """Findings made on a parse as diagnostics of its text: the tree's lines are the text's, or (a parse whose
    unchanged statements kept their line numbers, ``parsing.Layout``) are mapped to it, messages included."""

    def __init__(self, before: parsing.Parsed, line_name: LineName):
        self.before, self.tree_lines = before, before.tree_lines
        self.line_name = line_name if before.layout is None else (lambda line: line_name(before.text_line(line)))

    def span(self, node: ast.AST) -> Span:
        return self._in_text(span_of(node, self.tree_lines))

    def diagnostic(self, finding: Finding, path: str, severity: Severity) -> Diagnostic:
        diag = finding.to_diagnostic(path, severity, self.tree_lines, self.line_name)
        if self.before.layout is None or diag.path != path:
            return diag
        related = tuple(replace(r, line=self.before.text_line(r.line)) for r in diag.related)
        return replace(diag, span=self._in_text(diag.span), related=related)

    def _in_text(self, span: Span) -> Span:
        if self.before.layout is None:
            return span
        return replace(span, line=self.before.text_line(span.line), end_line=self.before.text_line(span.end_line))


def analyze_path(path: Path, config: Config | None = None, display_path: str | None = None) -> FileResult:
    """Read and analyse one file (a ``.ipynb`` as a notebook); a file that cannot be read gets one clear diagnostic."""
    shown = display_path or str(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        return _input_problem(shown, UNREADABLE, f"cannot read file: {exc.strerror or exc}")
    return analyze_bytes(data, shown, config)


def analyze_bytes(data: bytes, path: str, config: Config | None = None) -> FileResult:
    """Analyse a file's bytes: a notebook when ``path`` ends in ``.ipynb``, else Python source."""
    if notebooks.is_notebook(path):
        return analyze_notebook(data, path, config)
    return analyze_source(data, path, config)


def analyze_program(program: notebooks.Program, path: str, config: Config | None = None, cache: dict | None = None,
                    fixes: bool = True) -> tuple[FileResult, list[Diagnostic]]:
    """The analysis of a notebook's ``program`` mapped to cells, and the program-position diagnostics it came
    from (their messages already name cells).  ``fixes=False``: as ``analyze_source``'s, built on demand."""
    config = config or Config()
    # A notebook's findings map to its cells: one in a module it imports stays at the call in its cell.
    result = analyze_source(program.text, path, config, cache, program.line_name, fixes=fixes, own_file=False) \
        if program.text.strip() else FileResult(path)
    return notebooks.map_result(program, result, config), list(result.diagnostics)


def analyze_notebook(source: str | bytes | Path, path: str | None = None, config: Config | None = None,
                     cache: dict | None = None) -> FileResult:
    """Analyse a notebook given as a path, or as its bytes/text (then ``path`` is the name to report)."""
    if isinstance(source, Path):
        shown = path or str(source)
        try:
            source = source.read_bytes()
        except OSError as exc:
            return _input_problem(shown, UNREADABLE, f"cannot read file: {exc.strerror or exc}")
    else:
        shown = path or "<notebook>"
    try:
        notebook = notebooks.Notebook.loads(source)
    except notebooks.NotebookError as exc:
        return _input_problem(shown, UNREADABLE, str(exc))
    if notebook.language() != "python":
        return FileResult(shown)
    return analyze_program(notebook.program(), shown, config, cache)[0]
