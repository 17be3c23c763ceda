"""GG102 on a NumPy view: a write to ``arr = t.detach().numpy()`` changes ``t`` behind autograd's back.  When the
forward reads ``t`` afterwards, the fix puts the write in the graph with the torch twin of the NumPy op, on ``t``
itself: ``np.clip(arr, a, b, out=arr)`` -> ``t = t.clamp(a, b)``, ``arr[i, n:] = 0.0`` -> ``t = t.clone()`` and
``t[i, n:] = 0.0``, ``arr *= 2`` -> ``t = t * 2``.

Offered only when ``arr`` is the view's one name, bound once from a local tensor name, and read nowhere but in
its binding and in this write (so nothing reads the array the write no longer changes).  Always unsafe, like
every hidden write put in the graph: the gradient now goes through the op, where it skipped it before.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from ..diagnostics import Fix, TextEdit
from .aliases import analyse
from .callers import param_escape, through_callers
from .context import FUNCTIONS, CannotFix, FixContext
from .writes import Write, short

if TYPE_CHECKING:  # pragma: no cover
    from ..inference.events import Mutation

_TO_NUMPY = ("detach", "cpu")
# np.f(arr, <numbers>, out=arr) -> the torch spelling, on the tensor's name ``{t}`` and the numbers ``{0}``, ``{1}``.
_OUT_TWINS = {
    "clip": "{t}.clamp({0}, {1})",
    "maximum": "{t}.clamp(min={0})",
    "minimum": "{t}.clamp(max={0})",
    "multiply": "{t} * {0}",
    "add": "{t} + {0}",
    "subtract": "{t} - {0}",
    "divide": "{t} / {0}",
    "true_divide": "{t} / {0}",
    "power": "{t} ** {0}",
    "negative": "-{t}",
    "abs": "{t}.abs()",
    "absolute": "{t}.abs()",
    "square": "{t}.square()",
    "sqrt": "{t}.sqrt()",
    "exp": "{t}.exp()",
    "log": "{t}.log()",
    "tanh": "{t}.tanh()",
}
_AUG = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**"}


def numpy_view_in_graph(ctx: FixContext, mutation: Mutation) -> Fix:
    owner = mutation.hidden_from
    if owner is None or owner.leaf or "NumPy" not in mutation.how:
        raise CannotFix("not a write through a NumPy view of a tensor with a grad_fn")
    if mutation.target.storage is not owner.storage:
        raise CannotFix("the write does not reach the memory of the tensor with the grad_fn")
    write = Write.of(ctx, mutation.entry())
    if write.value_use:
        raise CannotFix("the write's result is used")
    stmt = write.stmt
    array = write.target.value if write.kind == "setitem" else write.target
    if not isinstance(array, ast.Name):
        raise CannotFix("the array is not a local name")
    tensor = _viewed_tensor(ctx, stmt, array.id)
    new = _in_torch(ctx, write, array.id, tensor)
    report = analyse(ctx, stmt, tensor, write_call=write.call)
    through = report.escapes == [param_escape(tensor)]
    if report.holders_read_after or (report.escapes and not through) or set(report.aliases_read_after) - {array.id}:
        raise CannotFix(report.reason())
    ctx.require_own_lines(stmt)
    new = new.replace("\n", ctx.newline + ctx.indent_of(stmt))
    line, column, end_line, end_column = ctx.char_range(stmt)
    edit = TextEdit(line, column + 1, end_line, end_column + 1, new)
    title = (f"Put the write in the graph: `{short(new.splitlines()[-1])}` on the tensor instead of its NumPy view "
             "(unsafe: the gradient now goes through it, where it skipped it before)")
    if through:  # the tensor is the function's parameter: it returns the new one, its calls rebind theirs
        return through_callers(ctx, (edit,), stmt, tensor, title, False)
    return Fix(title, False, (edit,))


def _viewed_tensor(ctx: FixContext, stmt: ast.stmt, array: str) -> str:
    """The local tensor name ``array`` is the one NumPy view of: ``array = t.detach().numpy()``, bound once in the
    function before ``stmt``, in its block or one around it, and read only there and in ``stmt``."""
    scope = ctx.scope_of(stmt)
    if not isinstance(scope, FUNCTIONS):
        raise CannotFix("the array is not a function's local")
    stores, loads = [], []
    for node in ast.walk(scope):
        if isinstance(node, ast.Name) and node.id == array:
            if isinstance(stmt, ast.AugAssign) and node is stmt.target:
                continue  # the write itself
            (loads if isinstance(node.ctx, ast.Load) else stores).append(node)
        elif isinstance(node, (ast.Global, ast.Nonlocal)) and array in node.names:
            raise CannotFix("the array's name is global or nonlocal")
        elif isinstance(node, (*FUNCTIONS, ast.Lambda, ast.ClassDef)) and node is not scope \
                and any(isinstance(n, ast.Name) and n.id == array for n in ast.walk(node)):
            raise CannotFix("a nested scope uses the array")
    if len(stores) != 1:
        raise CannotFix("the array's name is bound more than once")
    binding = ctx.parents.get(stores[0])
    if not (isinstance(binding, ast.Assign) and binding.targets == [stores[0]] and binding.lineno < stmt.lineno):
        raise CannotFix("the array is not bound by a plain assignment before the write")
    if ctx.parents.get(binding) not in (ctx.parents.get(stmt), *ctx.ancestors(stmt)):
        raise CannotFix("the array's binding does not always run before the write")
    outer, inner = ctx.loops_around(binding, scope), ctx.loops_around(stmt, scope)
    if outer and inner[len(inner) - len(outer):] != outer:
        raise CannotFix("the array is bound in a loop the write is not in")
    if any(not any(a is stmt for a in [n, *ctx.ancestors(n)]) for n in loads):
        raise CannotFix("the array is read elsewhere than in the write")
    value = binding.value
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "numpy"
            and not value.args and not value.keywords):
        raise CannotFix("the array is not a `.numpy()` view")
    source = value.func.value
    while isinstance(source, ast.Call) and isinstance(source.func, ast.Attribute) \
            and source.func.attr in _TO_NUMPY and not source.args and not source.keywords:
        source = source.func.value
    if not isinstance(source, ast.Name):
        raise CannotFix("the view is not of a local tensor name")
    if any(isinstance(n, ast.Name) and n.id == source.id and isinstance(n.ctx, ast.Store)
           and binding.lineno < n.lineno < stmt.lineno for n in ast.walk(scope)):
        raise CannotFix("the tensor's name is bound again between the view and the write")
    return source.id


def _in_torch(ctx: FixContext, write: Write, array: str, tensor: str) -> str:
    """The write's statement spelled as the torch op on ``tensor``, rebinding it."""
    if write.kind == "out":
        call = write.call
        q = ctx.qual(call.func) or ""
        twin = _OUT_TWINS.get(q.removeprefix("numpy.")) if q.startswith("numpy.") else None
        first = call.args[0] if call.args else None
        if twin is None or len(call.keywords) != 1 or not (isinstance(first, ast.Name) and first.id == array):
            raise CannotFix("no torch twin for this NumPy call")
        numbers = call.args[1:]
        if not all(_number(n) for n in numbers) or twin.count("{") - 1 != len(numbers):
            raise CannotFix("the NumPy call's other arguments are not numbers")
        return f"{tensor} = " + twin.format(*(ctx.source(n) for n in numbers), t=tensor)
    if write.kind == "augassign" and type(write.stmt.op) in _AUG and _number(write.stmt.value):
        return f"{tensor} = {tensor} {_AUG[type(write.stmt.op)]} {ctx.source(write.stmt.value)}"
    if write.kind == "setitem" and _number(write.stmt.value):
        index = write.target.slice
        if not _plain_index(index, array):
            raise CannotFix("an index NumPy and torch may read differently")
        spelled = _renamed(ctx, index, array, tensor)
        return f"{tensor} = {tensor}.clone()\n{tensor}[{spelled}] = {ctx.source(write.stmt.value)}"
    raise CannotFix("no torch twin for this NumPy write")


def _number(node: ast.expr) -> bool:
    return all(isinstance(n, (ast.Constant, ast.UnaryOp, ast.BinOp, ast.operator, ast.unaryop)) for n in ast.walk(node)) \
        and all(isinstance(n.value, (int, float)) and not isinstance(n.value, bool)
                for n in ast.walk(node) if isinstance(n, ast.Constant))


def _plain_index(index: ast.expr, array: str) -> bool:
    """Integers, slices, names, and comparisons of the array with numbers: indexes that mean the same to NumPy
    and to torch."""
    for node in ast.walk(index):
        if isinstance(node, ast.Compare):
            if not (isinstance(node.left, ast.Name) and node.left.id == array and len(node.comparators) == 1
                    and _number(node.comparators[0])):
                return False
        elif isinstance(node, ast.Name):
            continue
        elif not isinstance(node, (ast.Tuple, ast.Slice, ast.Constant, ast.UnaryOp, ast.BinOp, ast.Load,
                                   ast.operator, ast.unaryop, ast.cmpop)):
            return False
        if isinstance(node, ast.Constant) and not (node.value is None or _number(node)):
            return False
    return True


def _renamed(ctx: FixContext, expr: ast.expr, old: str, new: str) -> str:
    text = ctx.source(expr)
    base_line, base_col = expr.lineno, expr.col_offset
    if expr.end_lineno != base_line:
        raise CannotFix("the index spans lines")
    names = sorted((n for n in ast.walk(expr) if isinstance(n, ast.Name) and n.id == old),
                   key=lambda n: n.col_offset, reverse=True)
    for n in names:
        start = ctx._chars(base_line, n.col_offset) - ctx._chars(base_line, base_col)
        text = text[:start] + new + text[start + len(old):]
    return text
