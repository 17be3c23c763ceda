"""GG004 on ``for row in t: row.mul_(c)``: the rows are pieces of ``t`` (its ``unbind``), which torch does not let a
write go through; the same elementwise op on the whole tensor is what the loop computes (``c`` broadcast against a
row's dimensions broadcasts the same way against ``t``'s trailing ones), so ``t = t.mul(c)``.

Offered only when the loop is that one statement, the op is elementwise, its arguments do not read the row, the
row's name is not read after the loop, and nothing else holds ``t``'s memory (then rebinding ``t`` is the write).
"""

from __future__ import annotations

import ast

from ..diagnostics import Fix, TextEdit
from .aliases import analyse
from .context import CannotFix, FixContext
from .writes import OUT_OF_PLACE_METHODS, Write

# In-place methods that act element by element (their arguments broadcast against the written tensor).
ELEMENTWISE = frozenset({
    "add", "sub", "mul", "div", "clamp", "clamp_min", "clamp_max", "clip", "pow", "neg", "abs", "exp", "log",
    "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "sin", "cos", "floor", "ceil", "round", "trunc", "reciprocal",
    "square", "lerp", "addcmul", "addcdiv", "masked_fill", "true_divide", "multiply", "subtract", "divide",
    "fmod", "remainder", "sign", "exp2", "expm1", "log1p", "log2", "log10", "nan_to_num",
})


def whole_tensor_instead_of_rows(ctx: FixContext, write: Write) -> Fix:
    stmt = write.stmt
    loop = ctx.parents.get(stmt)
    if not (isinstance(loop, ast.For) and loop.body == [stmt] and not loop.orelse
            and isinstance(loop.target, ast.Name) and isinstance(loop.iter, ast.Name)):
        raise CannotFix("not a one-statement loop over the rows of a named tensor")
    row, tensor = loop.target.id, loop.iter.id
    call = write.call
    if write.kind != "method" or write.value_use or not (isinstance(write.target, ast.Name) and write.target.id == row):
        raise CannotFix("not an in-place method on the loop's row")
    op = call.func.attr.removesuffix("_")
    if op not in ELEMENTWISE or op not in OUT_OF_PLACE_METHODS or not call.func.attr.endswith("_"):
        raise CannotFix("not an elementwise in-place op")
    if any(isinstance(n, ast.Name) and n.id in (row, tensor) for a in [*call.args, *call.keywords] for n in ast.walk(a)):
        raise CannotFix("the op's arguments read the row or the tensor")
    scope = ctx.scope_of(loop)
    if any(isinstance(n, ast.Name) and n.id == row and n is not loop.target and not _inside(ctx, n, loop)
           for n in ast.walk(scope)):
        raise CannotFix("the row's name is used outside the loop")
    report = analyse(ctx, loop, tensor)
    if not report.clean:
        raise CannotFix(report.reason())
    ctx.require_own_lines(loop)
    args = ctx.source(call)[len(ctx.source(call.func)):]
    new = f"{tensor} = {tensor}.{op}{args}"
    line, column, end_line, end_column = ctx.char_range(loop)
    return Fix(f"Write the whole tensor at once: `{new}` instead of each row of it", True,
               (TextEdit(line, column + 1, end_line, end_column + 1, new),))


def _inside(ctx: FixContext, node: ast.AST, outer: ast.AST) -> bool:
    return any(a is outer for a in ctx.ancestors(node))
