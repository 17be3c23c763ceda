"""Building fixes: ``Fixer`` is the one entry point the analysis calls (``attach_fixes`` when every fix is built at
once, the language server's on-demand path one finding at a time), and only for a file that has findings: it
builds one ``FixContext`` (libcst is parsed lazily, on the first fix that needs it) and asks each finding's rule
for its fix, through the builders the caller hands down (this layer imports no rule).  A fix that cannot be built
-- ``CannotFix``, or any bug in a fix builder -- leaves that diagnostic without a fix; it never loses the
diagnostic.  ``plan`` then chooses among the fixes and applies them.
"""

from __future__ import annotations

import ast
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from ..diagnostics import Diagnostic, Fix
from ..fixes import CannotFix, FindingId, FixBuilder, FixContext, StillFound, Variant, unavailable
from ..fixes.callers import fix_in_helper
from ..fixes.wrappers import through_wrapper
from ..inference.events import CHAIN_REASON
from ..messages import other_file
from ..text import apply_edits, line_after, text_digest

if TYPE_CHECKING:  # pragma: no cover
    from ..inference.events import Finding

log = logging.getLogger(__name__)


class Fixer:
    """Builds the fixes of one analysed text's findings, each once: the fix is kept on the finding and its twins
    (``fix_memo``), so the engine's per-document cache keeps it.  ``builders``: each rule's fix by code (the
    rules sit above this layer, so the caller hands them down); ``still_found``: the caller's re-analysis, for
    fixes that check a candidate against it (see ``FixContext``); ``variant``: its analysis of a changed text,
    for a write through a wrapper of a name (``wrappers``).  Safe to share between threads: the language
    server builds fixes on demand in its pool.  A finding placed in another module of the project (``engine._placed``)
    is fixed there, by the ``Fixer`` of that module (``module``) that the caller's ``elsewhere`` makes (the editor's
    view of it, ``Finding.placed``, too: its ``Fix`` then names that file)."""

    def __init__(self, text: str, tree: ast.Module, path: str, builders: Mapping[str, FixBuilder],
                 still_found: StillFound | None = None, variant: Variant | None = None,
                 elsewhere: Callable[[str], Fixer | None] | None = None, module: str | None = None,
                 findings: Iterable[Finding] = ()):
        self.path, self.builders, self.variant, self.module = path, builders, variant, module
        self.ctx = FixContext(text, tree, path, still_found, builders, module)
        # FixContext parses libcst and keeps segments lazily; reentrant: a fix asks for an earlier write's (``_leaves``)
        self._lock = threading.RLock()
        self._elsewhere, self._others = elsewhere, {}
        # ``findings``: the text's findings (those its positions are still the text's), by where their write is
        self._by_write: dict[tuple, list[Finding]] = {}
        self._earlier: dict[int, set[tuple]] = {}  # id of a finding -> ``_earlier_writes``
        self.know(findings)

    def know(self, findings: Iterable[Finding]) -> None:
        """Add findings of the text (those its positions are the text's) to those a fix reads the other writes of its
        memory from: the editor's findings moved before their fixes were built are known once found again."""
        for f in findings:
            if f.mutation is not None and not f.data_stale:
                known = self._by_write.setdefault(_where(f.mutation.node), [])
                if not any(k is f or (k.code, k.place) == (f.code, f.place) for k in known):
                    known.append(f)

    def fix(self, finding: Finding) -> Fix | None:
        """The finding's fix (None when its rule has none or cannot make one here); a bug in a builder only
        leaves the finding without a fix."""
        if finding.fix_memo is None:
            if finding.data_stale:  # its nodes are at other lines than the text's: the caller must analyse again
                raise ValueError(f"{finding.code} at line {finding.node.lineno} was moved before its fix was built")
            target = finding.placed or finding  # the editor's view of a placed finding: the fix of that one
            home = other_file(target.node)
            if home != self.module:
                with self._lock:
                    if home not in self._others:
                        self._others[home] = self._elsewhere(home) if self._elsewhere and home else None
                fixer = self._others[home]
                fix = fixer.fix(target) if fixer is not None else None
                if fix is not None and target is not finding:  # shown here, made there: it names its file
                    fix = replace(fix, file=home, base=text_digest(fixer.ctx.text))
                finding.fix_memo = (fix,)
            else:
                with self._lock:
                    if finding.fix_memo is None:
                        finding.fix_memo = (self._build(finding),)
        for twin in finding.twins:
            twin.fix_memo = finding.fix_memo
        return finding.fix_memo[0]

    def _build(self, finding: Finding) -> Fix | None:
        frames = finding.mutation.frames if finding.mutation is not None else ()
        if any(isinstance(site, (ast.With, ast.AsyncWith)) for site, _ in frames):
            # written as a `with` block ends (a context manager's exit): only a rule's fix that knows that order
            at_exit = getattr(self.builders.get(finding.code), "at_block_exit", None)
            return self._build_in(self.ctx, finding, at_exit) if at_exit is not None else None
        fix = self._build_in(self.ctx, finding)
        if fix is not None and finding.merged:
            fix = self._with_merged(fix, finding)
        if fix is None and self.variant is not None:  # a write through an alias chain or a one-off container
            fix = self._tried("wrapper fix", finding, through_wrapper, self.ctx, finding, self.variant, self._build_in)
        if fix is not None and (left := self._leaves(finding, fix)) is not None:
            log.debug("no fix for %s at %s:%s: it leaves the unfixed %s at line %s", finding.code, self.path,
                      finding.node.lineno, left.code, left.node.lineno)
            return None
        return self._with_later_writes(finding, fix) if fix is not None else None

    def _with_later_writes(self, finding: Finding, fix: Fix) -> Fix:
        """The fix of a write in a branch or loop, with the fixes (each on its own write's lines) of the later writes
        of its memory (``Moment.earlier_writes``) that can run without it: a run that skips it (a loop that runs
        once) hands them the memory this fix no longer writes, which their own fixes mend (the analysis of the fixed
        code may no longer be sure of it, to find it again)."""
        node = finding.mutation.node if finding.mutation is not None else None
        blocks = []
        for around in self.ctx.ancestors(node) if node is not None and not finding.merged else ():
            if isinstance(around, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                break
            blocks += [around] if isinstance(around, (ast.If, ast.For, ast.While, ast.Try)) else []
        later = [other for others in self._by_write.values() for other in others if blocks and other is not finding
                 and other.code == finding.code and _where(node) in self._earlier_writes(other)
                 and any(not self.ctx.inside(other.mutation.node, block) for block in blocks)]
        fixes = [(other, self._build_in(self.ctx, other)) for other in later]
        if not fixes or any(f is None or not _on_its_lines(f, other) for other, f in fixes):
            return fix
        every = (fix, *(f for _, f in fixes))
        edits = self._together(every)
        return fix if edits is None else Fix("; ".join(f.title for f in every), all(f.safe for f in every), edits)

    def _together(self, fixes: Sequence[Fix]) -> tuple | None:
        """The edits of ``fixes`` made together, or None where they overlap."""
        edits = tuple(e for f in fixes for e in f.edits)
        try:
            apply_edits(self.ctx.text, edits)
        except ValueError:
            return None
        return edits

    def _earlier_writes(self, finding: Finding) -> set[tuple]:
        """Where the earlier writes of the memory ``finding``'s write changes are (``Moment.earlier_writes``), once."""
        if id(finding) not in self._earlier:
            moment = finding.mutation.moment if finding.mutation is not None else None
            self._earlier[id(finding)] = {_where(n) for n in (moment.earlier_writes() if moment is not None else ())}
        return self._earlier[id(finding)]

    def _leaves(self, finding: Finding, fix: Fix) -> Finding | None:
        """A finding of this text at an earlier write of the memory ``finding``'s write changes (``Moment.earlier_writes``:
        it ran before, in any frame) that has no fix, and that ``fix`` leaves found: the fixed code still breaks
        there, before it reaches the write ``fix`` mends (a leaf written in place by a closure, then by its caller:
        computing the caller's write on a copy leaves the closure's).  None when there is none."""
        moment = finding.mutation.moment if finding.mutation is not None else None
        if moment is None or not self._by_write:
            return None
        fixed: str | None = None
        for node in moment.earlier_writes():
            for other in self._by_write.get(_where(node), ()):
                if other is finding or other.mutation is finding.mutation or self.fix(other) is not None:
                    continue
                try:
                    fixed = fixed if fixed is not None else apply_edits(self.ctx.text, fix.edits)
                    frames = other.mutation.frames  # (a helper's write its caller's run shows)
                    caller = line_after(fix.edits, frames[0][0].lineno) if frames else None
                    if not self.ctx.still_found(fixed, FindingId(other.code, line_after(fix.edits, other.entry_line),
                                                                 None, caller)):
                        continue
                except (CannotFix, ValueError):  # no analysis to ask: it is left as it was, as far as anyone knows
                    pass
                return other
        return None

    def _with_merged(self, fix: Fix, finding: Finding) -> Fix:
        """The fix of a finding that holds later writes of its chain, with theirs: mending the first write does not
        always hand the later ones another tensor (a second piece of one split, a leaf written again after an
        out-of-place rewrite of the first).  Only fixes that each edit their own write's lines go together (a fix
        that renames later reads was built for the text without the others' edits); else the first's fix alone."""
        later = [self._build_in(self.ctx, f) for f in finding.merged]
        if any(f is None or not _on_its_lines(f, w) for f, w in zip(later, finding.merged)) \
                or not _on_its_lines(fix, finding):
            return fix
        alone = apply_edits(self.ctx.text, fix.edits)
        unsettled = [(w, f) for w, f in zip(finding.merged, later) if self._still_written(alone, fix, finding, w)]
        if not unsettled:
            return fix
        edits = self._together((fix, *(f for _, f in unsettled)))
        if edits is None:
            return fix
        safe = fix.safe and all(f.safe for _, f in unsettled)  # the title names no line: a moved finding keeps it
        writes = "its later write" if len(unsettled) == 1 else f"its {len(unsettled)} later writes"
        return Fix(f"{fix.title}, and the same for {writes} (the related lines)", safe, edits)

    def _still_written(self, alone: str, fix: Fix, first: Finding, write: Finding) -> bool:
        """Whether a later write of a chain is still a chain write's finding (of any reason: a leaf written again
        after an out-of-place rewrite is then a write of what the rewrite saved) once the first's fix is made."""
        try:
            if not self.ctx.still_found(self.ctx.text, FindingId(first.code, first.entry_line)):
                return True  # the check does not see the chain at all (a helper's write its caller's values show)
            line = line_after(fix.edits, write.entry_line)
            return any(self.ctx.still_found(alone, FindingId(code, line)) for code in CHAIN_REASON)
        except CannotFix:  # no analysis to ask: mend it too (each of these fixes edits only its own write)
            return True

    def _build_in(self, ctx: FixContext, finding: Finding, build: FixBuilder | None = None) -> Fix | None:
        build = build or self.builders.get(finding.code)
        if build is None:
            return None
        fix = self._tried("fix", finding, build, ctx, finding)
        if fix is None:  # a write inside a helper the finding's story calls: fixed there, or through its calls
            fix = self._tried("helper fix", finding, fix_in_helper, build, ctx, finding)
        return fix

    def _tried(self, what: str, finding: Finding, build: Callable[..., Fix | None], *args: object) -> Fix | None:
        """``build(*args)``, or None when it raises: ``CannotFix``, or a bug in a fix builder (logged)."""
        try:
            return build(*args)
        except CannotFix:
            return None
        except Exception:
            log.debug("%s for %s at %s:%s failed", what, finding.code, self.path, finding.node.lineno, exc_info=True)
            return None


def attach_fixes(text: str, tree: ast.Module, path: str, pairs: Iterable[tuple[Finding, Diagnostic]],
                 builders: Mapping[str, FixBuilder], still_found: StillFound | None = None,
                 variant: Variant | None = None, elsewhere: Callable[[str], Fixer | None] | None = None
                 ) -> list[Diagnostic]:
    """The diagnostics of ``pairs``, each carrying its rule's fix when there is one (see ``Fixer``)."""
    pairs = list(pairs)
    if not pairs:
        return []
    if unavailable() is not None:  # every fix, not just the libcst ones: a partial set would mislead
        return [diag for _, diag in pairs]
    fixer = Fixer(text, tree, path, builders, still_found, variant, elsewhere, findings=[f for f, _ in pairs])
    return [diag.with_fix(fixer.fix(finding)) for finding, diag in pairs]


def _on_its_lines(fix: Fix, finding: Finding) -> bool:
    """Whether every edit of ``fix`` is within the lines of the finding's own node."""
    first, last = finding.node.lineno, getattr(finding.node, "end_lineno", None) or finding.node.lineno
    return all(first <= e.line and e.end_line <= last for e in fix.edits)


def _where(node: ast.AST) -> tuple:
    """A write's node as the text's findings and the run's writes both know it: by its file and position (a
    finding kept from an earlier analysis of the same text holds that analysis's nodes)."""
    return other_file(node), getattr(node, "lineno", 0), getattr(node, "col_offset", 0)
