"""A write to an element of a local list or dict, fixed by rebinding the element out of place.

    hs = [h]; hs[0].mul_(2)        ->  hs = [h]; h = hs[0] = hs[0].mul(2)
    d = {"h": h}; d["h"] /= n      ->  d = {"h": h}; d["h"] = d["h"] / n
    hs = [h]; hs[0][0] = 0         ->  hs = [h]; h = hs[0] = hs[0].clone(); hs[0][0] = 0

The write changed the one tensor the element and the name put in the display hold; after the fix both hold the
new tensor, so every later read through either sees the values it saw before.  Offered only where nothing else
can hold that tensor: the container is a list or dict display bound once, before the write in the same block
(so a loop around the write rebuilds it too), read nowhere before the write and only read by key after it; the element is a constant key of the display
holding a plain local name, and that name has no view, holder (but the container) or escape read later.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from ..diagnostics import Fix
from ..statements import block_of
from .aliases import analyse, value_read_after
from .callers import param_escape
from .context import FUNCTIONS, CannotFix, FixContext
from .edits import Rewrite
from .writes import Write, assign, aug_to_binop, clone_of, code, cst_mod, out_of_place, short

if TYPE_CHECKING:  # pragma: no cover
    from ..inference.events import Mutation


def rebind_element(ctx: FixContext, mutation: Mutation, copy_ok: bool = True) -> Fix:
    """The element write of ``mutation`` made out of place (CannotFix when some other holder could tell).  A write
    through a view of the element (``hs[0][0] = 0``) writes a copy of it instead, when ``copy_ok`` (the write does
    not itself evaluate the op whose save it breaks)."""
    write = Write.of(ctx, mutation.entry())
    element = write.target
    while isinstance(element, ast.Subscript) and not _is_element(element):
        element = element.value  # `hs[0][mask] = 0` writes a view of `hs[0]`
    if not _is_element(element):
        raise CannotFix("the written element is not `container[constant]`")
    direct = element is write.target
    if direct and write.kind not in ("augassign", "method"):
        raise CannotFix(f"no out-of-place form of a {write.kind} write to the element")
    if not direct and not copy_ok:
        raise CannotFix("the write evaluates the op whose save it breaks")
    if not direct and not (write.target.value is element and mutation.target.base is not None
                           and not (isinstance(write.target.slice, ast.Constant)
                                    and isinstance(write.target.slice.value, str))):
        # `acts[0]["h"].mul_(2)`: the element is a dict, not a tensor to copy; only one tensor index is known
        # to make the view the engine saw written
        raise CannotFix("the write is not to one index of the element's tensor")
    container, key = element.value.id, element.slice.value
    stmt = write.stmt
    fn = ctx.function_of(stmt)
    if not isinstance(fn, FUNCTIONS):
        raise CannotFix("the element write is not in a function")
    display = _display(ctx, fn, stmt, container)
    held = _held_name(display, key)
    if not _own_local(ctx, fn, held):
        # a free variable: the enclosing function's later reads cannot be seen here, and binding it would make
        # a new local (unbound where the display reads it)
        raise CannotFix(f"`{held}` is not a local of the function")
    _require_only_use(ctx, fn, stmt, container, display)
    report = analyse(ctx, stmt, held, write_call=write.call)
    seen_through = set(report.aliases_read_after) | set(report.holders_read_after)
    if seen_through - {container} or set(report.escapes) - {param_escape(held)}:
        raise CannotFix(report.reason())
    if container in report.aliases_read_after and not _only_rebinds_held(ctx, fn, stmt, container, held):
        raise CannotFix(report.reason())
    # a parameter: the caller no longer sees the write (as with a parameter's name rebound out of place)
    unsafe = f" (unsafe: {param_escape(held)})" if report.escapes else ""
    if any(isinstance(n, ast.Name) and n.id == held and isinstance(n.ctx, ast.Store)
           and display.lineno <= n.lineno <= stmt.end_lineno for n in ast.walk(fn)):
        raise CannotFix(f"`{held}` is bound again between the container and the write")
    cst = cst_mod()
    targets = [ctx.cst(element).deep_clone()]
    held_read = value_read_after(ctx, stmt, held)
    if held_read:
        targets.insert(0, cst.Name(held))
    elif unsafe and not any(isinstance(n, ast.Name) and n.id == container and n.lineno > stmt.end_lineno
                            for n in ast.walk(fn)):
        # nothing here reads the new value: the fix would drop the write the caller sees, not repair it
        raise CannotFix(f"neither `{held}` nor `{container}` is read after the write")
    rw = Rewrite(ctx)
    if not direct:
        copy = code(assign(targets[0], clone_of(ctx.cst(element).deep_clone()), *targets[1:]))
        rw.insert_before(stmt, copy)
        return _fix(rw, f"Write a copy of the element: `{short(copy)}`", unsafe)
    node = ctx.cst(stmt)
    if write.kind == "augassign":
        new = assign(targets[0], aug_to_binop(node), *targets[1:])
    elif not write.value_use:
        new = assign(targets[0], out_of_place(ctx, write.call), *targets[1:])
    elif isinstance(stmt, ast.Assign) and stmt.value is write.call:
        # `s = hs[0].exp_()`: `s = h = hs[0] = hs[0].exp()`
        new = node.with_changes(targets=[*node.targets, *(cst.AssignTarget(target=t) for t in targets)],
                                value=out_of_place(ctx, write.call))
    else:
        raise CannotFix("the in-place call's result is used inside an expression")
    rw.replace_node(node, new)
    return _fix(rw, f"Write the element out of place: `{short(code(new))}`", unsafe)


def _fix(rw: Rewrite, title: str, unsafe: str) -> Fix:
    fix = rw.fix(title + unsafe, safe=not unsafe)
    if fix is None:
        raise CannotFix("no edit")
    return fix


def _own_local(ctx: FixContext, fn: ast.AST, name: str) -> bool:
    """Is ``name`` a parameter of ``fn`` or bound in its own code (and not declared global or nonlocal)?"""
    nodes = [n for n in ast.walk(fn) if ctx.scope_of(n) is fn]
    if any(isinstance(n, (ast.Global, ast.Nonlocal)) and name in n.names for n in nodes):
        return False
    if name in {a.arg for a in ast.walk(fn.args) if isinstance(a, ast.arg)}:
        return True
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store) for n in nodes)


def _is_element(node: ast.expr) -> bool:
    """``name[constant]``."""
    return isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and isinstance(node.slice, ast.Constant)


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
    block = block_of(ctx.parents.get(stmt), stmt)
    if block is None:
        raise CannotFix("cannot tell the write's block")
    return block


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


def _only_rebinds_held(ctx: FixContext, fn: ast.AST, stmt: ast.stmt, container: str, held: str) -> bool:
    """Is every read of ``container`` after the write ``held = container[...]``?  Around a loop, another name
    bound to the element would keep this pass's tensor, which the next pass used to write."""
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and node.id == container and isinstance(node.ctx, ast.Load) \
                and node.lineno > stmt.end_lineno:
            element = ctx.parents.get(node)
            assign_ = ctx.parents.get(element)
            if not (isinstance(assign_, ast.Assign) and assign_.value is element and len(assign_.targets) == 1
                    and isinstance(assign_.targets[0], ast.Name) and assign_.targets[0].id == held):
                return False
    return True


def _nested(ctx: FixContext, node: ast.AST, fn: ast.AST) -> bool:
    for anc in ctx.ancestors(node):
        if anc is fn:
            return False
        if isinstance(anc, (*FUNCTIONS, ast.Lambda, ast.ClassDef)):
            return True
    return False
