"""A write to an element of a local list or dict, fixed by rebinding the element out of place.

    hs = [h]; hs[0].mul_(2)        ->  hs = [h]; h = hs[0] = hs[0].mul(2)
    d = {"h": h}; d["h"] /= n      ->  d = {"h": h}; d["h"] = d["h"] / n

The write changed the one tensor the element and the name put in the display hold; after the fix both hold the
new tensor, so every later read through either sees the values it saw before.  Offered only where nothing else
can hold that tensor: the container is a list or dict display bound once, just before the write in the same
block, read nowhere before the write and written nowhere else; the element is a constant key of the display
holding a plain local name, and that name has no view, holder (but the container) or escape read later.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from ..diagnostics import Fix
from .aliases import analyse, value_read_after
from .callers import param_escape
from .context import FUNCTIONS, CannotFix, FixContext
from .edits import Rewrite
from .writes import Write, assign, aug_to_binop, code, cst_mod, out_of_place, short

if TYPE_CHECKING:  # pragma: no cover
    from ..inference.events import Mutation


def rebind_element(ctx: FixContext, mutation: Mutation) -> Fix:
    """The element write of ``mutation`` made out of place (CannotFix when some other holder could tell)."""
    write = Write.of(ctx, mutation.entry())
    if write.kind not in ("augassign", "method") or write.value_use:
        raise CannotFix("not a whole-element augmented assignment or in-place method statement")
    target = write.target
    if not (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)
            and isinstance(target.slice, ast.Constant)):
        raise CannotFix("the written element is not `container[constant]`")
    container, key = target.value.id, target.slice.value
    stmt = write.stmt
    fn = ctx.function_of(stmt)
    if not isinstance(fn, FUNCTIONS) or ctx.loops_around(stmt, fn):
        raise CannotFix("the element write is not straight-line code of a function")
    display = _display(ctx, fn, stmt, container)
    held = _held_name(display, key)
    _require_only_use(ctx, fn, stmt, container, display)
    report = analyse(ctx, stmt, held)
    if report.aliases_read_after or set(report.holders_read_after) - {container} \
            or set(report.escapes) - {param_escape(held)}:
        raise CannotFix(report.reason())
    # a parameter: the caller no longer sees the write (as with a parameter's name rebound out of place)
    unsafe = f" (unsafe: {param_escape(held)})" if report.escapes else ""
    if any(isinstance(n, ast.Name) and n.id == held and isinstance(n.ctx, ast.Store)
           and display.lineno <= n.lineno <= stmt.end_lineno for n in ast.walk(fn)):
        raise CannotFix(f"`{held}` is bound again between the container and the write")
    cst = cst_mod()
    node = ctx.cst(stmt)
    element = ctx.cst(target)
    if write.kind == "augassign":
        value = aug_to_binop(node)
    else:
        value = out_of_place(ctx, write.call)
    targets = [element.deep_clone()]
    if value_read_after(ctx, stmt, held):
        targets.insert(0, cst.Name(held))
    new = assign(targets[0], value, *targets[1:])
    rw = Rewrite(ctx).replace_node(node, new)
    fix = rw.fix(f"Write the element out of place: `{short(code(new))}`{unsafe}", safe=not unsafe)
    if fix is None:
        raise CannotFix("no edit")
    return fix


def _display(ctx: FixContext, fn: ast.AST, stmt: ast.stmt, container: str) -> ast.Assign:
    """The one binding of ``container`` in ``fn``: a list or dict display earlier in the block of ``stmt``."""
    stores = [n for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id == container
              and not isinstance(n.ctx, ast.Load)]
    if len(stores) != 1 or any(isinstance(n, (ast.Global, ast.Nonlocal)) and container in n.names
                               for n in ast.walk(fn)):
        raise CannotFix(f"`{container}` is bound more than once")
    binding = ctx.parents.get(stores[0])
    if not (isinstance(binding, ast.Assign) and binding.targets == [stores[0]]
            and isinstance(binding.value, (ast.List, ast.Dict))):
        raise CannotFix(f"`{container}` is not bound to a list or dict display")
    block = _block_holding(ctx, stmt)
    if binding not in block or block.index(binding) > block.index(stmt):
        raise CannotFix(f"`{container}` is not bound before the write in its block")
    return binding


def _block_holding(ctx: FixContext, stmt: ast.stmt) -> list[ast.stmt]:
    parent = ctx.parents.get(stmt)
    for field in ("body", "orelse", "finalbody"):
        block = getattr(parent, field, None)
        if isinstance(block, list) and any(s is stmt for s in block):
            return block
    raise CannotFix("cannot tell the write's block")


def _held_name(display: ast.Assign, key: object) -> str:
    """The local name the display puts at ``key``."""
    value = display.value
    element = None
    if isinstance(value, ast.List):
        if type(key) is int and 0 <= key < len(value.elts) and not any(isinstance(e, ast.Starred) for e in value.elts):
            element = value.elts[key]
    else:
        keys = [k.value if isinstance(k, ast.Constant) else None for k in value.keys]
        if None not in keys and keys.count(key) == 1:
            element = value.values[keys.index(key)]
    if not isinstance(element, ast.Name):
        raise CannotFix("the element is not a name the display puts there")
    return element.id


def _require_only_use(ctx: FixContext, fn: ast.AST, stmt: ast.stmt, container: str, display: ast.Assign) -> None:
    """``container`` is read nowhere before the write (nothing can have kept a view of the element), and after it
    only read by key (it is never handed on, where it could be changed out of sight)."""
    inside = {id(n) for n in ast.walk(stmt)} | {id(n) for n in ast.walk(display)}
    for node in ast.walk(fn):
        if not (isinstance(node, ast.Name) and node.id == container) or id(node) in inside:
            continue
        parent = ctx.parents.get(node)
        if node.lineno <= stmt.end_lineno:
            raise CannotFix(f"`{container}` is used before the write")
        if not (isinstance(parent, ast.Subscript) and parent.value is node and isinstance(parent.ctx, ast.Load)):
            raise CannotFix(f"`{container}` is used otherwise than read by key after the write")
        if _nested(ctx, node, fn):
            raise CannotFix(f"a nested function reads `{container}`")


def _nested(ctx: FixContext, node: ast.AST, fn: ast.AST) -> bool:
    for anc in ctx.ancestors(node):
        if anc is fn:
            return False
        if isinstance(anc, (*FUNCTIONS, ast.Lambda, ast.ClassDef)):
            return True
    return False
