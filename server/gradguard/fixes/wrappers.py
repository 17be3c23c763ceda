"""Fixes of writes made through a wrapper of a tensor's name: an alias chain (``out_ref = out; out_cur = out_ref;
out_cur.data.mul_(s)``), a one-off container (``tensors = {"out": out}; tensors["out"].data.mul_(s)``) or the
variable of a loop over a one-element list (``for t in [out]: t.data.mul_(s)``).

At the write the wrapper is the very object its name holds, so the write is fixed as the same write to the name
(``out.data.mul_(s)``): the text is changed there only, the caller's re-analysis (``Variant``, from ``api``)
finds the finding again in it, the rule's own fix is built on that text, and the fix offered is the difference
between the original and the result.  Only when the wrapper is plainly the name: every alias or container is
bound once, to the name (or its alias), before the write in the same block, the name is not rebound in between,
and nothing reads the wrapper after the write (it would still hold the old tensor once the fix rebinds the name).
A loop over one element runs its body once: the rule's fix is built with the loop read as ``if True:`` (as the
fixes know blocks that run once), and the loop's own line is put back in the result.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..diagnostics import Fix, TextEdit
from ..statements import block_of
from ..statements import walk as walk_statements
from ..text import apply_edits, diff_edits
from .context import LOOPS, FixContext
from .identity import Variant

if TYPE_CHECKING:  # pragma: no cover
    from ..inference.events import Finding

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
    found = ctx.once("wrapper", stmt, lambda: _wrapper_in(ctx, stmt))
    if found is None:
        return None
    wrapper, name, loop = found
    line, column, end_line, end_column = ctx.char_range(wrapper)
    changes = [TextEdit(line, column + 1, end_line, end_column + 1, name)]
    if loop is not None:  # `for t in [out]:` -> `if True:` (the same lines, run once)
        header = ctx.lines[loop.lineno - 1]
        indent = header[: len(header) - len(header.lstrip())]
        changes.append(TextEdit(loop.lineno, 1, loop.lineno, len(header.rstrip("\r\n")) + 1, f"{indent}if True:"))
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
    plain_lines, fixed_lines = plain.splitlines(keepends=True), fixed.splitlines(keepends=True)
    marker = plain_lines[loop.lineno - 1]
    where = [i for i, text in enumerate(fixed_lines) if text == marker]
    if len(where) != 1:
        return None
    fixed_lines[where[0]] = ctx.text.splitlines(keepends=True)[loop.lineno - 1]
    return "".join(fixed_lines)


def _wrapper_in(ctx: FixContext, stmt: ast.stmt) -> tuple[ast.expr, str, ast.For | None] | None:
    """The wrapper the write statement ``stmt`` writes through, the name it holds, and the one-element loop whose
    variable it is (None for an alias or a container element)."""
    fn = ctx.function_of(stmt)
    tried: set[str] = set()  # a name read many times in the statement is one question
    for node in ast.walk(stmt):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) \
                and isinstance(node.slice, ast.Constant):
            name = _container_element(ctx, fn, stmt, node)
            if name is not None:
                return node, name, None
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in tried:
            tried.add(node.id)
            name = _alias_of(ctx, fn, stmt, node.id)
            if name is not None:
                return node, name, None
            loop = _one_element_loop(ctx, fn, stmt, node.id)
            if loop is not None:
                return node, loop[1], loop[0]
    return None


def _one_element_loop(ctx: FixContext, fn: ast.AST, stmt: ast.stmt, variable: str) -> tuple[ast.For, str] | None:
    """``for variable in [name]:`` (or over a list bound once to ``[name]`` and read nowhere else) around ``stmt``,
    with ``variable`` read nowhere but in ``stmt``: the loop and ``name``."""
    loop = next((a for a in ctx.ancestors(stmt) if isinstance(a, ast.For)), None)
    if loop is None or ctx.function_of(loop) is not fn or loop.orelse or not isinstance(loop.target, ast.Name) \
            or loop.target.id != variable:
        return None
    names = ctx.names_in(fn)
    if any(isinstance(n, (ast.Break, ast.Continue)) for n in walk_statements(loop)) \
            or any(n is not loop.target and ctx.statement_of(n) is not stmt for n in names.of(variable)):
        return None
    items = loop.iter
    if isinstance(items, ast.Name):
        binding = _only_binding(ctx, fn, loop, items.id)
        if binding is None or any(isinstance(n.ctx, ast.Load) and n is not loop.iter for n in names.of(items.id)):
            return None
        items = binding.value
    else:
        binding = None
    if not (isinstance(items, (ast.List, ast.Tuple)) and len(items.elts) == 1 and isinstance(items.elts[0], ast.Name)):
        return None
    name = items.elts[0].id
    if binding is not None and _used_around(ctx, fn, stmt, name, binding) \
            or any(not isinstance(n.ctx, ast.Load) and ctx.inside(n, loop) for n in names.of(name)):
        return None
    return loop, name


def _container_element(ctx: FixContext, fn: ast.AST, stmt: ast.stmt, element: ast.Subscript) -> str | None:
    """``C[k]`` where ``C = {k: name}`` (or ``[name, ...]``, index ``k``) and ``C`` is read nowhere but in ``stmt``."""
    container = element.value.id
    binding = _only_binding(ctx, fn, stmt, container)
    if binding is None or any(isinstance(n.ctx, ast.Load) and ctx.statement_of(n) is not stmt
                              for n in ctx.names_in(fn).of(container)):
        return None
    value, key = binding.value, element.slice.value
    held = None
    if isinstance(value, ast.Dict) and None not in value.keys:
        held = next((v for k, v in zip(value.keys, value.values) if isinstance(k, ast.Constant) and k.value == key
                     and type(k.value) is type(key)), None)
    elif isinstance(value, (ast.List, ast.Tuple)) and type(key) is int and 0 <= key < len(value.elts) \
            and not any(isinstance(e, ast.Starred) for e in value.elts):
        held = value.elts[key]
    if not isinstance(held, ast.Name) or _used_around(ctx, fn, stmt, held.id, binding):
        return None
    return held.id


def _alias_of(ctx: FixContext, fn: ast.AST, stmt: ast.stmt, alias: str) -> str | None:
    """The name at the end of the chain ``alias = b``, ``b = c``, ... when ``alias`` is read nowhere after
    ``stmt`` and each link is a plain alias bound once before it; None when ``alias`` is no such alias."""
    name, links = alias, 0
    while True:
        binding = _only_binding(ctx, fn, stmt, name)
        if binding is None or not isinstance(binding.value, ast.Name):
            break
        if _used_around(ctx, fn, stmt, name) or _used_around(ctx, fn, stmt, binding.value.id, binding):
            return None
        name, links = binding.value.id, links + 1
    return name if links else None


def _only_binding(ctx: FixContext, fn: ast.AST, stmt: ast.stmt, name: str) -> ast.Assign | None:
    """The one statement of ``fn`` binding ``name`` when it is ``name = <value>``, before ``stmt`` in a block
    that holds ``stmt`` (or a statement around it); None otherwise."""
    names = ctx.names_in(fn)
    stores = [n for n in names.of(name) if not isinstance(n.ctx, ast.Load)]
    if len(stores) != 1 or name in names.arguments or name in names.declared:
        return None
    binding = ctx.parents.get(stores[0])
    if not (isinstance(binding, ast.Assign) and binding.targets == [stores[0]]):
        return None
    block = block_of(ctx.parents.get(binding), binding)
    around = [stmt, *(a for a in ctx.ancestors(stmt) if isinstance(a, ast.stmt))]
    if block is None or not any(s in block and block.index(s) > block.index(binding) for s in around):
        return None
    return binding


def _used_around(ctx: FixContext, fn: ast.AST, stmt: ast.stmt, name: str, since: ast.stmt | None = None) -> bool:
    """Whether ``name`` is read after ``stmt`` (``since`` None) or may be bound again between ``since`` and ``stmt``;
    or either anywhere in a loop around ``stmt``, which runs again."""
    loops = [a for a in ctx.ancestors(stmt) if isinstance(a, LOOPS)]
    for n in ctx.names_in(fn).of(name):
        if since is None and isinstance(n.ctx, ast.Load) and ctx.statement_of(n) is not stmt:
            later = (n.lineno, n.col_offset) > (stmt.end_lineno, stmt.end_col_offset)
        elif since is not None and not isinstance(n.ctx, ast.Load):
            later = since.end_lineno <= n.lineno <= stmt.lineno
        else:
            continue
        if later or any(ctx.inside(n, loop) for loop in loops):
            return True
    return False
