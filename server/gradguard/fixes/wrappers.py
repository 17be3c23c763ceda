"""Fixes of writes made through a wrapper of a tensor's name: an alias (``out_ref = out; out_cur = out_ref;
out_cur.data.mul_(s)``), a container's element (``tensors = {"out": out}; tensors["out"].data.mul_(s)``) or the
variable of a loop (``for t in [out]: t.data.mul_(s)``).

Where every run of the write shows the wrapper holding the very tensor a name of the function holds (``Moment.held``:
"same"), and nothing reads the wrapper after the write (it would still hold the old tensor once the fix rebinds the
name), the write is fixed as the same write to the name (``out.data.mul_(s)``): the text is changed there only, the
caller's re-analysis (``Variant``, from ``api``) finds the finding again in it, the rule's own fix is built on that
text, and the fix offered is the difference between the original and the result.  A loop whose variable is the
wrapper: the rule's fix is built with the loop read as ``if True:`` (as the fixes know blocks that run once), and
the loop's own line is put back in the result.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..diagnostics import Fix, TextEdit
from ..text import apply_edits, diff_edits, split_lines_kept
from .context import FixContext
from .identity import Variant
from .writes import InPlaceWrite, through_views

if TYPE_CHECKING:  # pragma: no cover
    from ..inference.events import Finding, Mutation

# Builds a fix in another context (the variant's): the Fixer's own build, without wrappers (none are left there).
Build = Callable[[FixContext, "Finding"], Fix | None]


def through_wrapper(ctx: FixContext, finding: Finding, variant: Variant, build: Build) -> Fix | None:
    """The finding's fix, made as the fix of the same write to the name the written wrapper holds; None when the
    write goes through no plain wrapper, or the rule has no fix for the write to the name either."""
    mutation = finding.mutation
    entry = mutation.entry() if mutation is not None else None
    stmt = ctx.statement_of(entry) if entry is not None else None
    if stmt is None or ctx.function_of(stmt) is None:
        return None
    found = _wrapper_in(ctx, mutation)
    if found is None:
        return None
    wrapper, name, loop = found
    line, column, end_line, end_column = ctx.char_range(wrapper)
    changes = [TextEdit(line, column + 1, end_line, end_column + 1, name)]
    if loop is not None:  # `for t in [out]:` -> `if True:` (the same lines, run once)
        end = len(ctx.lines[loop.lineno - 1]) + 1  # (the header's line, its comment too)
        changes.append(TextEdit(loop.lineno, len(ctx.indent_of(loop)) + 1, loop.lineno, end, "if True:"))
    plain = apply_edits(ctx.text, changes)
    seen = variant(plain)
    if seen is None:
        return None
    tree, findings, still_found = seen
    again = next((f for f in findings if f.code == finding.code and f.entry_line == stmt.lineno), None)
    if again is None:
        return None
    fix = build(FixContext(plain, tree, ctx.path, still_found, ctx.builders), again)
    if fix is None:
        return None
    fixed = apply_edits(plain, fix.edits)
    if loop is not None:
        fixed = _loop_header_back(ctx, loop, plain, fixed)
        if fixed is None:
            return None
    edits = diff_edits(ctx.text, fixed)
    if not edits:
        return None
    return Fix(f"{fix.title} (`{ctx.source(wrapper)}` is `{name}`)", fix.safe, edits, fix.callers_checked)


def _loop_header_back(ctx: FixContext, loop: ast.For, plain: str, fixed: str) -> str | None:
    """``fixed`` (made from ``plain``, where the loop's line read ``if True:``) with the loop's own line again;
    None when the fix changed that line or the lines around it moved."""
    plain_lines, fixed_lines = split_lines_kept(plain), split_lines_kept(fixed)
    marker = plain_lines[loop.lineno - 1]
    where = [i for i, text in enumerate(fixed_lines) if text == marker]
    if len(where) != 1:
        return None
    fixed_lines[where[0]] = split_lines_kept(ctx.text)[loop.lineno - 1]
    return "".join(fixed_lines)


def _wrapper_in(ctx: FixContext, mutation: Mutation) -> tuple[ast.expr, str, ast.For | None] | None:
    """The wrapper the write goes through: a name, or the item of a list or dict a name holds (``C["x"]``, ``C[0]``),
    in the written expression or what it is a view of, bound at every run of the write to one tensor of the written
    one's view chain (``Moment.place``: the written tensor itself, what it is a view of, a list or dict it is read
    out of) that another name of the function was bound to as well (the one read after it; when none is, the first
    bound); the wrapper's own name is read nowhere after the write but by the write's next runs.  With the loop
    whose variable the wrapper is."""
    write = InPlaceWrite.of_mutation(ctx, mutation)  # (CannotFix: the Fixer takes it for no fix)
    if write.moment is None:
        return None
    runs = write.moment.runs()
    for node in through_views(write.target):
        name, key = _name_and_key(node)
        places = [run.place(name, key, write.depth) for run in runs] if name is not None else [None]
        if None in places:
            continue
        frame = runs[0].frame_index(write.depth)
        names = [n for n, k, at, _ in runs[0].places if k is None and at == frame and (n, key) != (name, None)
                 and all(run.place(n, None, write.depth) == p for run, p in zip(runs, places))]
        read = [n for n in names if write.value_read_after(ctx, n)]
        own = node.value if isinstance(node, ast.Subscript) else node  # (read by the write's next runs: replaced too)
        if not names or len(read) > 1 or any((r.lineno, r.col_offset) != (own.lineno, own.col_offset)
                                          for r in write.moment.value_reads_after(name, write.depth)):
            return None
        fn = ctx.function_of(write.stmt)
        loop = next((a for a in ctx.ancestors(write.stmt) if isinstance(a, ast.For) and ctx.function_of(a) is fn), None)
        if loop is None or key is not None or not isinstance(loop.target, ast.Name) or loop.target.id != name:
            loop = None
        return node, (read or names)[0], loop
    return None


def _name_and_key(node: ast.expr) -> tuple[str | None, object]:
    """(name, None) of a name; (name, key) of a name's item by a constant key (``C["x"]``, ``C[0]``)."""
    if isinstance(node, ast.Name):
        return node.id, None
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and isinstance(node.slice, ast.Constant) \
            and node.slice.value is not None and not isinstance(node.slice.value, bool):
        return node.value.id, node.slice.value
    return None, None
