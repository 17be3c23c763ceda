"""GG105 when the view comes from a helper that makes it under no_grad (``@torch.no_grad()`` on it, or a
``with torch.no_grad():`` around its ``return``): the helper makes it with grad mode on, and the caller's write
goes out of place when torch would refuse it in place (a view of a leaf, one of several pieces).

Offered only when the helper does nothing but return views of its inputs (indexing, ``t()``, ``chunk``...), so
grad mode changes nothing in it but whether the views have history.  Always unsafe: every caller of the helper
then gets views with history wherever the input requires grad.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from ..diagnostics import Fix, TextEdit
from . import inplace as F
from .context import CannotFix, FixContext
from .writes import PIECES, VIEW_METHODS, Write, short

if TYPE_CHECKING:  # pragma: no cover
    from ..inference.events import Mutation



def helper_view_with_grad(ctx: FixContext, mutation: Mutation, origin: ast.AST) -> Fix:
    ret = ctx.statement_of(origin)
    fn = ctx.function_of(ret)
    if not isinstance(ret, ast.Return) or ret.value is not origin or fn is None \
            or fn is ctx.function_of(mutation.entry()):
        raise CannotFix("the view is not what a helper returns")
    if not _only_views(ctx, origin):
        raise CannotFix("the helper computes more than views: grad mode would change more than their history")
    body = fn.body[1:] if _docstring(fn.body[0]) else fn.body
    edits = []
    if body == [ret] and len(fn.decorator_list) == 1 and _is_no_grad(ctx, fn.decorator_list[0]):
        decorator = fn.decorator_list[0]
        if ctx.lines[decorator.lineno - 1].strip() != "@" + ctx.source(decorator):
            raise CannotFix("the decorator does not have its line to itself")
        edits.append(TextEdit(decorator.lineno, 1, decorator.lineno + 1, 1, ""))
        how = "without `@torch.no_grad()`"
    elif len(body) == 1 and isinstance(body[0], ast.With) and body[0].body == [ret] and not fn.decorator_list \
            and len(body[0].items) == 1 and _is_no_grad(ctx, body[0].items[0].context_expr) \
            and body[0].items[0].optional_vars is None and ret.lineno == ret.end_lineno:
        block = body[0]
        ctx.require_own_lines(block)
        ctx.require_own_lines(ret)
        line = ctx.lines[ret.lineno - 1].rstrip("\r\n")
        edits.append(TextEdit(block.lineno, 1, block.end_lineno + 1, 1,
                              ctx.indent_of(block) + line.lstrip() + ctx.newline))
        how = "outside its no_grad block"
    else:
        raise CannotFix("the helper does more than return the view under no_grad")
    title = f"Make the view with grad mode on: `{fn.name}` returns `{short(ctx.source(origin), 40)}` {how}"
    rebind = F.fix_or_none(lambda: F.Rebind(ctx, Write.of(ctx, mutation.entry())))
    built = F.fix_or_none(rebind.rewrite) if rebind is not None and rebind.direct and rebind.report.clean else None
    if built is not None:
        edits.extend(built[0].edits())
        title += f", then write out of place: `{short(built[1], 50)}`"
    else:
        root = mutation.target.root()
        if root.leaf or root.param:
            raise CannotFix("an in-place write to a view of a leaf would still raise")
        if _pieces(ctx, origin):
            raise CannotFix("an in-place write to one of several views of one call would still raise")
    title += f" (unsafe: every call of `{fn.name}` now gets views with history where its input requires grad)"
    return Fix(title, False, tuple(sorted(edits, key=lambda e: (e.line, e.column))))


def _only_views(ctx: FixContext, expr: ast.expr) -> bool:
    """Names, attributes, basic indexing with numbers and slices, and view methods with number arguments."""
    if isinstance(expr, ast.Name):
        return True
    if isinstance(expr, ast.Attribute):
        return _only_views(ctx, expr.value)
    if isinstance(expr, ast.Subscript):
        return _only_views(ctx, expr.value) and all(_plain_number(n) for n in ast.walk(expr.slice))
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in VIEW_METHODS \
            and expr.func.attr not in ("detach", "contiguous"):
        numbers = [*expr.args, *(k.value for k in expr.keywords)]
        return _only_views(ctx, expr.func.value) and all(_plain_number(n) for a in numbers for n in ast.walk(a))
    return False


def _plain_number(node: ast.AST) -> bool:
    """A part of an integer, a slice, ``None`` or ``...`` written out: basic indexing, never a copy."""
    if isinstance(node, ast.Constant):
        return node.value is None or node.value is Ellipsis or type(node.value) is int
    return isinstance(node, (ast.Tuple, ast.Slice, ast.UnaryOp, ast.USub, ast.Load))


def _pieces(ctx: FixContext, origin: ast.AST) -> bool:
    return isinstance(origin, ast.Call) and isinstance(origin.func, ast.Attribute) and origin.func.attr in PIECES


def _is_no_grad(ctx: FixContext, node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and ctx.qual(node.func) == "torch.no_grad" and not node.args and not node.keywords


def _docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)
