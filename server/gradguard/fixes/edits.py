"""Turning libcst node changes into ``TextEdit``s (applying them to a text is ``text.apply_edits``).

A fix is built as a small codemod: replace these libcst nodes, insert these statements before that line,
wrap that line in a ``with`` block.  ``Rewrite.edits()`` runs one transformer over each top-level statement
the fix touches (libcst parsed only those, see ``FixContext.segment``), renders it (libcst round-trips
everything it does not touch byte for byte) and turns the difference into the fewest, tightest
``TextEdit``s -- 1-based lines and columns in code points, like every position gradguard reports.
"""

from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..diagnostics import Fix, TextEdit
from ..statements import block_of
from ..text import diff_edits
from .context import CannotFix

if TYPE_CHECKING:  # pragma: no cover
    import libcst as cst

    from .context import FixContext, Segment


@dataclass
class Rewrite:
    """The changes one fix makes to one file: libcst node replacements (keyed by the original nodes), and
    code inserted above a statement or a ``with`` block opened around it."""

    ctx: FixContext
    replace: dict[int, tuple[cst.CSTNode, cst.CSTNode]] = field(default_factory=dict)
    before: dict[int, tuple[ast.stmt, list[str]]] = field(default_factory=dict)
    wrap: dict[int, tuple[ast.stmt, str]] = field(default_factory=dict)
    removed: dict[int, ast.stmt] = field(default_factory=dict)

    def replace_node(self, old: cst.CSTNode, new: cst.CSTNode) -> Rewrite:
        self.replace[id(old)] = (old, new)
        return self

    def remove_statement(self, stmt: ast.stmt) -> Rewrite:
        """Delete ``stmt`` and its lines (``pass`` in its place when its block would be left empty)."""
        self.ctx.require_own_lines(stmt)
        self.removed[id(stmt)] = stmt
        return self

    def insert_before(self, stmt: ast.stmt, code: str) -> Rewrite:
        """Insert the statement ``code`` on its own line above ``stmt``, at its indentation."""
        self.ctx.require_own_lines(stmt)
        self.before.setdefault(id(stmt), (stmt, []))[1].append(code)
        return self

    def torch_module(self, use: ast.stmt) -> str:
        """How the fix spells ``torch`` at ``use``: the file's own name for the module, else ``torch`` with an
        ``import torch`` added above the file's first import (a file that imports only ``torch.nn as nn``),
        when nothing else in the file is called ``torch`` and that import comes before ``use``."""
        name = self.ctx.torch_name()
        if name is not None:
            return name
        first = next((stmt for stmt in self.ctx.tree.body if isinstance(stmt, (ast.Import, ast.ImportFrom))
                      and getattr(stmt, "module", None) != "__future__"), None)  # (not `from __future__`)
        if first is None or first.lineno > use.lineno or not name_free_for_module(self.ctx, "torch"):
            raise CannotFix("torch is not imported as a module")
        if "import torch" not in self.before.get(id(first), (first, []))[1]:
            self.insert_before(first, "import torch")
        return "torch"

    def wrap_in_with(self, stmt: ast.stmt, header: str) -> Rewrite:
        """Put ``stmt`` in a ``with <header>:`` block."""
        self.ctx.require_own_lines(stmt)
        self.wrap[id(stmt)] = (stmt, header)
        return self

    def edits(self) -> tuple[TextEdit, ...]:
        """The changes as edits of the file: each statement with replacements is re-rendered by libcst and
        compared with its text; insertions and ``with`` headers go in front of their statement's first line."""
        import libcst as cst

        rewrite = self

        class Transformer(cst.CSTTransformer):
            def on_leave(self, original, updated):  # type: ignore[override]
                entry = rewrite.replace.get(id(original))
                return entry[1] if entry is not None and entry[0] is original else updated

        segments = {}
        for old, _ in self.replace.values():
            seg = self.ctx.segment_of(old)
            segments[id(seg)] = seg
        edits: list[TextEdit] = []
        for seg in segments.values():
            local = self._expression_edits(seg)
            if local is not None:
                edits.extend(local)
                continue
            new = seg.module.visit(Transformer()).code
            for e in diff_edits(seg.text, new):
                line, column = seg.to_file(e.line, e.column - 1)
                end_line, end_column = seg.to_file(e.end_line, e.end_column - 1)
                edits.append(TextEdit(line, column + 1, end_line, end_column + 1, e.new_text))
        ctx, nl = self.ctx, self.ctx.newline
        for key in {*self.before, *self.wrap}:
            stmt = (self.before.get(key) or self.wrap.get(key))[0]
            indent = ctx.indent_of(stmt)
            text = "".join(code + nl + indent for code in self.before.get(key, (None, []))[1])
            if key in self.wrap:
                text += f"with {self.wrap[key][1]}:{nl}{indent}{ctx.indent}"
            edits.append(TextEdit(stmt.lineno, len(indent) + 1, stmt.lineno, len(indent) + 1, text))
        for stmt in self.removed.values():
            if block_of(ctx.parents.get(stmt), stmt) == [stmt]:
                indent = ctx.indent_of(stmt)
                end = len(ctx.lines[stmt.end_lineno - 1]) + 1
                edits.append(TextEdit(stmt.lineno, len(indent) + 1, stmt.end_lineno, end, "pass"))
            elif stmt.end_lineno < len(ctx.lines):
                edits.append(TextEdit(stmt.lineno, 1, stmt.end_lineno + 1, 1, ""))
            else:  # the file's last line
                edits.append(TextEdit(stmt.lineno, 1, stmt.end_lineno, len(ctx.lines[-1]) + 1, ""))
        edits.sort(key=lambda e: (e.line, e.column, (e.end_line, e.end_column) != (e.line, e.column)))
        merged: list[TextEdit] = []
        for e in edits:  # an insertion where a replacement starts becomes part of that replacement
            last = merged[-1] if merged else None
            if last is not None and (last.line, last.column) == (e.line, e.column) == (last.end_line, last.end_column):
                merged[-1] = TextEdit(e.line, e.column, e.end_line, e.end_column, last.new_text + e.new_text)
            else:
                merged.append(e)
        edits = merged
        for a, b in itertools.pairwise(edits):
            if (b.line, b.column) < (a.end_line, a.end_column) or (a.line, a.column) == (b.line, b.column):
                raise CannotFix("the fix's own edits overlap")
        return tuple(edits)

    def _expression_edits(self, seg: Segment) -> list[TextEdit] | None:
        """The edits of ``seg``'s replacements made where each node stands, without rendering the whole
        statement again: the same edits when every replaced node is an expression (rendered the same wherever it
        stands) apart from the others and renders as its own text.  None otherwise.  A statement with hundreds of
        findings is then fixed at the cost of each node, not hundreds of times the statement's."""
        import libcst as cst

        changes = sorted((seg.ranges[id(old)], old, new) for old, new in self.replace.values() if id(old) in seg.ranges)
        if any(not isinstance(old, cst.BaseExpression) or not isinstance(new, cst.BaseExpression) for _, old, new in changes):
            return None
        if any(b[0][:2] < a[0][2:] for a, b in itertools.pairwise(changes)):
            return None  # nested or overlapping: the replacement of one holds the other
        edits = []
        for (line, column, end_line, end_column), old, new in changes:
            text = self.ctx.text_in((line, column, end_line, end_column))
            if seg.module.code_for_node(old) != text:
                return None  # the node owns whitespace around its range
            for e in diff_edits(text, seg.module.code_for_node(new)):
                first, last = e.line == 1, e.end_line == 1
                edits.append(TextEdit(line + e.line - 1, e.column + (column if first else 0),
                                      line + e.end_line - 1, e.end_column + (column if last else 0), e.new_text))
        return edits

    def fix(self, title: str, safe: bool, callers_checked: bool = False) -> Fix | None:
        edits = self.edits()
        return Fix(title, safe, edits, callers_checked) if edits else None


def return_at_end(ctx: FixContext, fn: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> TextEdit:
    """``return name`` on a line of its own after the last statement of ``fn``."""
    end = fn.body[-1].end_lineno
    column = len(ctx.lines[end - 1]) + 1
    return TextEdit(end, column, end, column, f"{ctx.newline}{ctx.indent_of(fn.body[0])}return {name}")


def renamed(ctx: FixContext, expr: ast.expr, old: str, new: str) -> str:
    """The source of ``expr`` with every ``old`` name spelled ``new``."""
    text = ctx.source(expr)
    line, column, _, _ = ctx.char_range(expr)
    parts = (n for n in ast.walk(expr) if isinstance(n, ast.Name) and n.id == old)
    names = sorted(parts, key=lambda n: (n.lineno, n.col_offset), reverse=True)
    lines = text.split("\n")
    for n in names:
        nl, nc, _, nec = ctx.char_range(n)
        row = nl - line
        offset = nc - (column if row == 0 else 0)
        end = offset + (nec - nc)
        lines[row] = lines[row][:offset] + new + lines[row][end:]
    return "\n".join(lines)


def name_free_for_module(ctx: FixContext, name: str) -> bool:
    """Whether a module-level ``import name`` gives no code of the file a new meaning for ``name``: nothing in the
    file binds it (the module's name index, ``FixContext.names_in``): no assignment, parameter, definition, ``except
    ... as``, ``match`` capture, nor import but ``import name`` / ``import name.sub``."""
    names = ctx.names_in(ctx.tree)
    return name not in {*names.parameters, *names.definitions, *names.bound} \
        and all(isinstance(n.ctx, ast.Load) for n in names.of(name))
