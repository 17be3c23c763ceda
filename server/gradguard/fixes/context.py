"""What a rule's ``fix`` hook works with: the file's text, its ``ast`` tree, and (parsed on demand) its libcst tree.

The engine's findings point at ``ast`` nodes.  A fix decides *what* to change by looking at the ``ast``
(cheap, already there) and *how* by building libcst nodes, so everything it does not touch -- formatting,
comments, the rest of the file -- comes back byte for byte.  libcst parses ~15x slower than ``ast`` (and
its position metadata costs twice that again), so it is imported only when a fix asks for a node, and it
parses only the statements a fix changes (``Segment``), never the whole file.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator, Mapping
from functools import cached_property
from itertools import takewhile
from typing import TYPE_CHECKING, TypeVar

from ..bounds import Unanalysed
from ..inference.imports import collect_imports, normalize, qualified_name
from ..messages import other_file
from ..parsing import first_line, source_lines
from ..statements import walk as walk_statements
from ..text import code_point_column, line_starts, newline
from .identity import FindingId, StillFound
from .index import FUNCTIONS, FunctionNames, Parents, function_names

if TYPE_CHECKING:  # pragma: no cover
    import libcst as cst

    from ..diagnostics import Fix
    from ..inference.events import Finding

T = TypeVar("T")
LOOPS = (ast.For, ast.AsyncFor, ast.While)
COMPOUND = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith)  # a segment parses their headers

# ast statement/expression types and the libcst types that render them: of the same name, or as listed.
_SAME_NAME = (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.AugAssign, ast.Assign, ast.AnnAssign, ast.Expr,
              ast.Return, ast.IfExp, ast.Tuple, ast.List)
_CST_TYPES = {
    **{kind: (kind.__name__,) for kind in _SAME_NAME},
    ast.BinOp: ("BinaryOperation",),
    ast.UnaryOp: ("UnaryOperation",),
    ast.Compare: ("Comparison",),
    ast.BoolOp: ("BooleanOperation",),
    ast.Constant: ("Integer", "Float", "Imaginary", "SimpleString", "ConcatenatedString", "Name"),
}


class CannotFix(Exception):
    """Raised inside fix builders for "this code has no fix we can stand behind"."""


# A rule's fix: a ``Fix`` for one of its findings, or None / ``CannotFix`` when it has none.
FixBuilder = Callable[["FixContext", "Finding"], "Fix | None"]


class FixContext:
    """One file, as the fixes of its findings see it.  ``still_found`` checks a candidate fix against the
    analysis; without it, a fix that needs that check is not offered.  ``module``: the project's module this file
    is, when not the analysed file; a node of any other file has no position here (``own``)."""

    def __init__(self, text: str, tree: ast.Module, path: str = "<string>", still_found: StillFound | None = None,
                 builders: Mapping[str, FixBuilder] | None = None, module: str | None = None):
        self.text = text
        self.tree = tree
        self.path = path
        self.module = module
        self.lines = source_lines(text)
        self._still_found = still_found
        # Each rule's fix builder by code, as the caller (``api``) hands them down: a fix that defers to another
        # rule's (GG104 to the in-place rule behind its loop) asks here instead of importing the rules.
        self.builders: Mapping[str, FixBuilder] = builders or {}
        self._segments: dict[int, Segment | CannotFix] = {}  # ``segment``, by the statement's id
        self._answers: dict[tuple[str, int], object] = {}  # ``once``, by question and node id

    def still_found(self, fixed: str, finding: FindingId) -> bool:
        """Whether ``finding`` is still found in ``fixed`` (this file's text with a candidate fix made)."""
        if self._still_found is None:
            raise CannotFix("no analysis to check the fix against")
        return self._still_found(fixed, finding)

    # ------------------------------------------------------------------ ast side
    @cached_property
    def parents(self) -> Parents:
        return Parents(self.tree)

    @cached_property
    def imports(self) -> dict[str, str]:
        return collect_imports(self.tree.body)

    def names_in(self, fn: ast.AST) -> FunctionNames:
        """Every ``Name`` of ``fn`` (nested scopes too) by identifier, in ``ast.walk`` order, and the names it
        declares ``global``/``nonlocal``: made once per function, so that a fix asking about each name of a
        long statement does not walk the whole function for each (quadratic: minutes on fuzzed programs)."""
        return self.once("names", fn, lambda: function_names(fn))

    def once(self, question: str, node: ast.AST, answer: Callable[[], T]) -> T:
        """``answer()`` to ``question`` about ``node``, worked out once per file: a statement may have hundreds
        of findings, and a fact about the statement must not cost its size again for each of them."""
        key = (question, id(node))
        if key not in self._answers:
            self._answers[key] = answer()
        return self._answers[key]  # type: ignore[return-value]

    def inside(self, node: ast.AST, outer: ast.AST) -> bool:
        """Whether ``node`` is ``outer`` or part of it (through the parents map, not a walk of ``outer``)."""
        return node is outer or any(a is outer for a in self.ancestors(node))

    def definitions_between(self, node: ast.AST, scope: ast.AST) -> list[ast.AST]:
        """The functions, lambdas and classes around ``node`` inside ``scope``, innermost first: code that runs
        elsewhere than ``scope``'s own (empty when ``node`` is ``scope``'s own code)."""
        around = takewhile(lambda anc: anc is not scope, self.ancestors(node))
        return [anc for anc in around if isinstance(anc, (*FUNCTIONS, ast.Lambda, ast.ClassDef))]

    def qual(self, node: ast.expr) -> str | None:
        q = qualified_name(node, self.imports)
        return normalize(q) if q else None

    def torch_name(self) -> str | None:
        """How this file spells the ``torch`` module (``import torch`` -> ``torch``), or None."""
        return next((local for local, qual in self.imports.items() if qual == "torch"), None)

    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        node = self.parents.get(node)
        while node is not None:
            yield node
            node = self.parents.get(node)

    def own(self, node: ast.AST) -> ast.AST:
        """``node``, when it is in this file; else ``CannotFix``: no edit is ever made at another file's lines."""
        if other_file(node) != self.module:
            raise CannotFix("the node is in another file than the one the fix edits")
        return node

    def statement_of(self, node: ast.AST) -> ast.stmt:
        self.own(node)
        while not isinstance(node, ast.stmt):
            node = self.parents[node]
        return node

    def scope_of(self, node: ast.AST) -> ast.AST:
        """The innermost function (or the module) whose code ``node`` is part of."""
        return next((anc for anc in self.ancestors(node) if isinstance(anc, (*FUNCTIONS, ast.Lambda, ast.Module))),
                    self.tree)

    def function_of(self, node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        scope = self.scope_of(node)
        return scope if isinstance(scope, FUNCTIONS) else None

    def class_of(self, node: ast.AST) -> ast.ClassDef | None:
        return next((anc for anc in self.ancestors(node) if isinstance(anc, ast.ClassDef)), None)

    def loops_around(self, node: ast.AST, scope: ast.AST | None = None) -> list[ast.AST]:
        """The loops (inside ``scope``) whose repeated part contains ``node``, innermost first."""
        scope = scope or self.scope_of(node)
        found = []
        child = node
        for anc in self.ancestors(node):
            if anc is scope:
                break
            repeated = isinstance(anc, LOOPS) and (
                any(child is s for s in anc.body)
                or child is getattr(anc, "target", None)
                or (isinstance(anc, ast.While) and child is anc.test)
            )
            if repeated:
                found.append(anc)
            child = anc
        return found

    def source(self, node: ast.AST) -> str:
        """``ast.get_source_segment`` without re-splitting the whole file on every call."""
        line, end = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
        if line is None or end is None or getattr(node, "end_col_offset", None) is None:
            return ""
        rng = self.char_range(node)  # CannotFix for a node of another file
        return self.text_in(rng) if 1 <= line <= end <= len(self.line_starts) else ""

    def text_in(self, rng: tuple[int, int, int, int | None]) -> str:
        """The file's text in (line, column, end_line, end_column), columns 0-based in code points (to the end of
        end_line when end_column is None)."""
        line, column, end_line, end_column = rng
        end = len(self.lines[end_line - 1]) if end_column is None else end_column
        return self.text[self.line_starts[line - 1] + column:self.line_starts[end_line - 1] + end]

    def char_range(self, node: ast.AST) -> tuple[int, int, int, int]:
        """(line, column, end_line, end_column) of an ``ast`` node, columns 0-based in code points."""
        self.own(node)
        return (
            node.lineno,
            self._chars(node.lineno, node.col_offset),
            node.end_lineno,
            self._chars(node.end_lineno, node.end_col_offset),
        )

    def _chars(self, line: int, byte_offset: int) -> int:
        return code_point_column(self.lines[line - 1] if 1 <= line <= len(self.lines) else "", byte_offset)

    # ---------------------------------------------------------------- libcst side
    def segment(self, node: ast.AST) -> Segment:
        """The parsed statement of ``node``; a statement libcst cannot take is refused once, not parsed again
        for each of its findings."""
        stmt = self.statement_of(node)
        if isinstance(stmt, COMPOUND) and node is not stmt \
                and not any(self.inside(node, part) for part in _header_parts(stmt)):  # in its body: not parsed
            raise CannotFix("the node is in a body, not in the header")
        known = self._segments.get(id(stmt))
        if known is None:
            try:
                known = Segment(self, stmt)
            except CannotFix as refused:
                known = refused
            self._segments[id(stmt)] = known
        if isinstance(known, CannotFix):
            raise CannotFix(*known.args)
        return known

    @cached_property
    def line_starts(self) -> list[int]:
        return line_starts(self.text)

    @cached_property
    def indent(self) -> str:
        """The file's indentation unit (from its first indented block), for code the fixes add."""
        for node in sorted((n for n in walk_statements(self.tree) if isinstance(n, ast.stmt)), key=lambda n: n.lineno):
            body = getattr(node, "body", None)
            if isinstance(body, list) and body and body[0].lineno > node.lineno:
                outer, inner = self.indent_of(node), self.indent_of(body[0])
                if len(inner) > len(outer):
                    return inner[len(outer):]
        return "    "

    @cached_property
    def newline(self) -> str:
        return newline(self.text)

    def cst(self, node: ast.AST) -> cst.CSTNode:
        """The libcst node that renders ``node`` (same range, same kind); CannotFix when there is none."""
        wanted = _CST_TYPES.get(type(node))
        if wanted is None:
            raise CannotFix(f"no libcst counterpart for {type(node).__name__}")
        key = self.char_range(node)
        for candidate in self.segment(node).index.get(key, []):
            if type(candidate).__name__ in wanted:
                return candidate
        raise CannotFix(f"cannot find the libcst node for {type(node).__name__} at {key}")

    def indent_of(self, stmt: ast.stmt) -> str:
        line = self.lines[self.own(stmt).lineno - 1]
        return line[: len(line) - len(line.lstrip())]

    def require_own_lines(self, stmt: ast.stmt) -> None:
        """CannotFix unless ``stmt`` has its lines to itself (no ``a; b``, no ``if c: a``), so that code can
        be inserted above it or around it."""
        line, column, end_line, end_column = self.char_range(stmt)
        if self.lines[line - 1][:column].strip():
            raise CannotFix("the statement does not start its line")
        tail = self.lines[end_line - 1][end_column:].strip()
        if tail and not tail.startswith("#"):
            raise CannotFix("the statement shares its line with another")
        for top in self.tree.body:  # the statements of those top-level ones that have a line in common with it
            if first_line(top) > stmt.end_lineno or stmt.lineno > top.end_lineno:
                continue
            for other in (top, *walk_statements(top)):
                if not isinstance(other, ast.stmt) or other.lineno > stmt.end_lineno or stmt.lineno > other.end_lineno:
                    continue  # no line in common
                if not (self.inside(other, stmt) or self.inside(stmt, other) and other.lineno < stmt.lineno):
                    raise CannotFix("the statement shares its lines with another")

    def segment_of(self, node: cst.CSTNode) -> Segment:
        for seg in self._segments.values():
            if isinstance(seg, Segment) and id(node) in seg.ranges:
                return seg
        raise CannotFix("the node is not part of a parsed statement")


# libcst's native parser nests ``a and b and c ...`` (a flat ``ast.BoolOp``, whatever its length, so never bounded
# by ``bounds``) one level per term, and past some 5,000 terms it crashes the whole process -- a segfault, not an
# exception (found by the 10,000-program fuzz).  Such a chain is never handed to libcst.
LIBCST_MAX_CHAIN = 1_000


def too_long_for_libcst(node: ast.AST) -> bool:
    """Whether ``node`` holds an ``and``/``or`` chain libcst may not survive parsing."""
    return any(isinstance(n, ast.BoolOp) and len(n.values) > LIBCST_MAX_CHAIN for n in ast.walk(node))


class Segment:
    """One statement of the file parsed by libcst.  A simple statement is parsed as it stands; for a node in
    the header of a compound statement (``for x in t.unbind(0):``) the header is parsed with a ``pass`` body.
    ``index`` maps file ranges to libcst nodes and ``ranges`` the nodes back to them; ``to_file`` turns the
    segment's positions into the file's."""

    def __init__(self, ctx: FixContext, stmt: ast.stmt):
        import libcst as cst
        from libcst.metadata import MetadataWrapper, PositionProvider

        self.line = stmt.lineno
        self.column = ctx._chars(stmt.lineno, stmt.col_offset)  # 0-based, code points
        compound = isinstance(stmt, COMPOUND)
        if compound:
            last = max(getattr(n, "end_lineno", stmt.lineno) for n in _header_parts(stmt))
            text = ctx.text_in((stmt.lineno, self.column, last, None))
            if stmt.body[0].lineno > last:
                text += ctx.newline + ctx.indent + "pass"
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Try, ast.Match)):
            raise CannotFix("a node in a def, class, try or match header")
        else:
            text = ctx.text_in(ctx.char_range(stmt))
        self.text = text
        parsed = _header_parts(stmt) if compound else [stmt]
        if any(isinstance(n, Unanalysed) for part in parsed for n in ast.walk(part)):
            # Too deep to analyse is too deep for libcst, whose native parser can even crash on it.
            raise CannotFix(f"line {stmt.lineno} is nested too deeply to rewrite")
        if any(too_long_for_libcst(part) for part in parsed):
            raise CannotFix(f"line {stmt.lineno} holds a chain of `and`/`or` too long to rewrite")
        try:
            self.module = cst.parse_module(
                text, config=cst.PartialParserConfig(default_indent=ctx.indent, default_newline=ctx.newline)
            )
            positions = MetadataWrapper(self.module, unsafe_skip_copy=True).resolve(PositionProvider)
        except Exception as exc:  # noqa: BLE001 - libcst may reject what ast accepts, or recurse too deep
            raise CannotFix(f"libcst cannot parse line {stmt.lineno}: {exc}") from None
        self.index: dict[tuple[int, int, int, int], list] = {}
        self.ranges: dict[int, tuple[int, int, int, int]] = {}  # a node's id -> its file range
        for cnode, rng in positions.items():
            key = (*self.to_file(rng.start.line, rng.start.column), *self.to_file(rng.end.line, rng.end.column))
            self.index.setdefault(key, []).append(cnode)
            self.ranges[id(cnode)] = key
        self.ranges.setdefault(id(self.module), (self.line, self.column, self.line, self.column))

    def to_file(self, line: int, column: int) -> tuple[int, int]:
        """A segment position (1-based line, 0-based column) as a file position."""
        return line + self.line - 1, column + (self.column if line == 1 else 0)


def _header_parts(stmt: ast.stmt) -> list[ast.AST]:
    if isinstance(stmt, (ast.If, ast.While)):
        return [stmt.test]
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        return [stmt.target, stmt.iter]
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        return [part for item in stmt.items for part in (item.context_expr, item.optional_vars) if part is not None]
    return []
