"""Putting a write hidden from autograd into the graph, shared by GG102 (a hidden write the forward reads) and
GG001 (a write under ``no_grad`` to a tensor a backward saved): the write becomes the same op out of place with
grad mode on, and the name is rebound to it (``out = out.mul(s)``, ``x = x.clamp(a, b)``, ``h = h.clone();
h[pad] = 0``), replacing the ``no_grad``/``inference_mode`` block it was alone in.  Always unsafe: the gradient
then goes through the op, where before it skipped it (a deliberate straight-through estimator loses that).
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from ..diagnostics import Fix, TextEdit
from ..statements import every_node
from .callers import through_callers
from .context import CannotFix, FixContext
from .moves import grad_off, mutation_in, no_grad_block, units
from .writes import InPlaceWrite, aug_to_binop, code, cst_mod, out_of_place, param_escape, short

if TYPE_CHECKING:  # pragma: no cover
    from ..inference.events import Finding


def write_in_graph(ctx: FixContext, finding: Finding) -> Fix:
    """GG102 on a tensor the forward reads later (and GG001's write under ``no_grad``): see the module's docstring."""
    cst = cst_mod()
    mutation = mutation_in(finding)
    owner = mutation.hidden_from
    if owner is None or owner.leaf:
        raise CannotFix("the written tensor has no grad_fn: no graph op to put the write in")
    write = InPlaceWrite.of_mutation(ctx, mutation)
    if write.value_use or write.kind not in ("method", "augassign", "setitem"):
        raise CannotFix("not a plain write statement")
    copied = write.kind == "method" and write.call.func.attr == "copy_"
    stmt = write.stmt
    # The write, or the statement around it alone (`if c:`, a loop) that the no_grad block holds: it stays, rewritten
    unit = next((u for u in units(ctx, stmt) if no_grad_block(ctx, u, inference=True)), stmt)
    block = no_grad_block(ctx, unit, inference=True)
    if block is not None and len(block.body) != 1:
        raise CannotFix("the no_grad block holds more than the write")
    if block is None and not mutation.grad_enabled and _no_grad_decorator(ctx, stmt) is None:
        # `with torch.no_grad(): if c: h[pad] = 0`: the rewrite would stay under no_grad, still off the graph
        raise CannotFix("grad mode is off around the write, in a block that is not the write's own")
    target = write.target.value if write.kind == "setitem" else write.target
    name = _unhidden_name(target)
    if name is None:
        raise CannotFix("the write is not on a local name, its `.data` or its `.detach()`")
    if any(isinstance(n, ast.Name) and n.id == name and not ctx.inside(n, stmt) for n in every_node(unit)):
        raise CannotFix("the control around the write reads the written tensor")
    if mutation.target.storage is not owner.storage:
        raise CannotFix("the write does not reach the memory of the tensor with the grad_fn")
    decorator = _no_grad_decorator(ctx, stmt) if block is None else None
    if block is None and decorator is None and target is write.target and isinstance(target, ast.Name):
        raise CannotFix("nothing hides the write from autograd here")
    report = write.sharing(ctx, name)
    through = not (report.aliases_read_after or report.holders_read_after) and report.escapes == [param_escape(name)]
    if not report.clean and not through:
        raise CannotFix(report.reason())
    if decorator is not None and not through:
        raise CannotFix("the no_grad decorator covers the whole function, not just the write")
    if through and decorator is None and block is None and isinstance(target, ast.Name):
        raise CannotFix("what hides the write is at the function's call, not in it")
    if copied:
        new = f"{name} = " + _copied_in_graph(ctx, write.call, name)
    elif write.kind == "method":
        new = f"{name} = " + code(_reads_in_graph(out_of_place(ctx, write.call, obj=cst.Name(name)), name))
    elif write.kind == "augassign":
        new = f"{name} = " + code(_reads_in_graph(aug_to_binop(ctx.cst(stmt)).with_changes(left=cst.Name(name)), name))
    else:
        outer = block if block is not None and unit is stmt else stmt
        value = ctx.source(stmt.value)
        if _hidden_reads(stmt.value, name):
            value = code(_reads_in_graph(ctx.cst(stmt.value), name))
        new = (f"{name} = {name}.clone(){ctx.newline}{ctx.indent_of(outer)}"
               f"{name}[{ctx.source(write.target.slice)}] = {value}")
    replaced = block if block is not None else stmt
    ctx.require_own_lines(replaced)
    line, column, end_line, end_column = ctx.char_range(replaced)
    edit = TextEdit(line, column + 1, end_line, end_column + 1, new)
    if unit is not stmt:  # the control stays, one level out, around the rewritten write
        ctx.require_own_lines(stmt)
        (a, b, c, d), lines = ctx.char_range(stmt), ctx.lines
        text = ctx.newline.join([*lines[unit.lineno - 1:a - 1], lines[a - 1][:b] + new + lines[c - 1][d:],
                                 *lines[c:unit.end_lineno]])
        cut = len(ctx.indent_of(unit)) - len(ctx.indent_of(block))
        edit = TextEdit(line, 1, end_line + 1, 1, "".join(t[cut:] + ctx.newline for t in text.split(ctx.newline)))
    first = new.split(ctx.newline)[0]
    title = f"Put the write in the graph: `{short(first)}` (unsafe: the gradient now goes through it, where it skipped it before)"
    if through:
        return through_callers(ctx, (edit,), stmt, name, title, False, (decorator,) if decorator is not None else (),
                               write.moment)
    return Fix(title, False, (edit,))


def _copied_in_graph(ctx: FixContext, call: ast.Call, name: str) -> str:
    """``x.data.copy_(0.5 * x.data + 0.5 * y)`` -> ``0.5 * x + 0.5 * y``: the copied values with their graph.  Only
    arithmetic that reads ``x`` itself elementwise, so the values have ``x``'s shape, as the copy gave them."""
    if len(call.args) != 1 or call.keywords:
        raise CannotFix("not a plain `copy_(values)`")
    value = call.args[0]
    if value.lineno != value.end_lineno:
        raise CannotFix("the copied values span lines")
    leaves, stack = [], [value]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
            stack.extend([node.left, node.right])
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            stack.append(node.operand)
        elif isinstance(node, ast.Constant) and type(node.value) in (int, float):
            continue
        elif isinstance(node, (ast.Name, ast.Attribute, ast.Call)):
            leaves.append(node)
        else:
            raise CannotFix("the copied values are not elementwise arithmetic")
    own = [leaf for leaf in leaves if _unhidden_name(leaf) == name]
    if not own or any(isinstance(n, ast.Name) and n.id == name for leaf in leaves if leaf not in own
                      for n in ast.walk(leaf)):
        raise CannotFix("the copied values do not read the written tensor elementwise")
    return code(_reads_in_graph(ctx.cst(value), name))  # (`own` are those reads: the other leaves do not read it)


def _no_grad_decorator(ctx: FixContext, stmt: ast.stmt) -> ast.expr | None:
    """The ``@torch.no_grad()`` that is the only decorator of the function around ``stmt``, if it is."""
    fn = ctx.function_of(stmt)
    return fn.decorator_list[0] if fn and len(fn.decorator_list) == 1 and grad_off(ctx, fn.decorator_list[0]) else None


def _hidden_reads(expr: ast.expr, name: str) -> bool:
    """Does ``expr`` read ``name.data`` or ``name.detach()``?"""
    return any(not isinstance(n, ast.Name) and _unhidden_name(n) == name for n in ast.walk(expr))


def _reads_in_graph(node: cst.CSTNode, name: str) -> cst.CSTNode:
    """``node`` with its reads of ``name.data`` and ``name.detach()`` made reads of ``name``: a write put in the
    graph that still computed its values from ``.data`` would leave them cut from it (the gradient lost again)."""
    cst = cst_mod()

    def hidden(n: cst.CSTNode) -> bool:
        if isinstance(n, cst.Attribute):
            return n.attr.value == "data" and isinstance(n.value, cst.Name) and n.value.value == name
        return (isinstance(n, cst.Call) and not n.args and isinstance(n.func, cst.Attribute)
                and n.func.attr.value == "detach" and isinstance(n.func.value, cst.Name) and n.func.value.value == name)

    class Unhide(cst.CSTTransformer):
        def on_leave(self, original, updated):
            return cst.Name(name) if hidden(updated) else updated

    return node.visit(Unhide())


def _unhidden_name(target: ast.expr) -> str | None:
    """``x``, ``x.data`` or ``x.detach()`` -> ``x``."""
    if isinstance(target, ast.Attribute) and target.attr == "data":
        target = target.value
    elif (isinstance(target, ast.Call) and isinstance(target.func, ast.Attribute) and target.func.attr == "detach"
          and not target.args and not target.keywords):
        target = target.func.value
    return target.id if isinstance(target, ast.Name) else None
