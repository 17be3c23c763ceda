"""GG104 element-loop-write: an element-by-element loop write that breaks autograd.

The advice depends on what the write is, and each kind is proven with torch on the fixtures
(tests/test_loop_advice.py):

- **stack** -- the loop fills a tensor row by row with values that carry gradient (an RNN's states, a
  recurrence): the tensor must carry that gradient, so the steps go in a list and ``torch.stack``.  Never
  ``torch.no_grad()`` there: the write then runs, and the model gets no gradient at all.
- **no_grad** -- a leaf written after a backward ran (pruning or clipping a parameter between steps): an
  update, which ``torch.no_grad()`` is for.
- **copy** -- a leaf written inside the computation (thresholding, a causal mask in ``forward``): under
  ``torch.no_grad()`` the written entries would still get gradient; write a clone, or mask out of place.
- otherwise the in-place rule's own advice, and the vectorised forms.
"""

from __future__ import annotations

import ast

from ..diagnostics import Fix, Severity, TextEdit
from ..fixes.context import CannotFix, FUNCTIONS, FixContext
from ..fixes.edits import renamed
from ..fixes.copies import fix_leaf_write, fresh_name
from ..fixes.inplace import fix_or_none
from ..fixes.moves import block_around, mutation_in
from ..inference.events import Finding, Mutation
from ..inference.values import Grad
from ..messages import Message
from ..statements import names, names_bound
from ..statements import walk as walk_statements
from . import gg001_saved_tensor_mutated, gg002_leaf_mutated, gg003_leaf_view_mutated, gg004_multi_view_mutated
from .base import Example, Rule

_UNDERLYING = (gg004_multi_view_mutated, gg003_leaf_view_mutated, gg002_leaf_mutated, gg001_saved_tensor_mutated)
_ADVICE = {m.RULE.code: getattr(m, "ADVICE", "") for m in _UNDERLYING}
_LEAF_CODES = ("GG002", "GG003")

STACK_ADVICE = (
    "The values written carry gradient, so what they fill must carry it too: collect each step in a list and "
    "`torch.stack` it (`steps.append(h)`, then `torch.stack(steps)`) instead of writing into a preallocated tensor."
)
STACK_NOT_NO_GRAD = " Under `torch.no_grad()` the write would run, but their gradient would be dropped."
NO_GRAD_ADVICE = (
    "It runs after a backward, as an update between steps: do it under `torch.no_grad()` "
    "(or vectorised: `w.masked_fill_(mask, 0)` / `w.clamp_(lo, hi)` under `torch.no_grad()`)."
)
COPY_ADVICE = (
    "It is part of the computation: write into a clone (`y = x.clone()` before the loop, then use `y`), or mask out "
    "of place (`torch.where(mask, 0, x)`, `x.masked_fill(mask, 0)`, `w * mask`); under `torch.no_grad()` the "
    "written entries would still get gradient."
)
VECTORISE_ADVICE = (
    " Besides, a Python loop over elements is slow; write it vectorised (a mask with `torch.where`/`masked_fill`, "
    "broadcasting such as `(x - x.amin(dim, keepdim=True)) / (x.amax(dim, keepdim=True) - x.amin(dim, keepdim=True))`, "
    "or collect the steps in a list and `torch.stack` them)."
)


def check(mutation: Mutation):
    if not isinstance(mutation, Mutation) or not mutation.element_loop or mutation.kind != "write":
        return
    for module in _UNDERLYING:
        found = list(module.RULE.check(mutation))
        if found:
            first = found[0]
            advice = advice_kind(mutation, first.code)
            message = first.message
            if advice is None:
                tail = VECTORISE_ADVICE
            else:
                message = message.removesuffix(_ADVICE[first.code])
                tail = {"stack": STACK_ADVICE + (STACK_NOT_NO_GRAD if first.code in _LEAF_CODES else ""),
                        "no_grad": NO_GRAD_ADVICE, "copy": COPY_ADVICE}[advice]
            yield Finding(
                "GG104",
                mutation.node,
                Message.format("element-by-element loop write: {underlying}{tail}", underlying=message, tail=tail),
                certain=first.certain,
                related=first.related,
                mutation=mutation, data={"underlying": first.code, "advice": advice},
            )
            return


def advice_kind(mutation: Mutation, underlying: str) -> str | None:
    """"stack", "no_grad", "copy", or None (the in-place rule's own advice): see the module docstring."""
    leaf = underlying in _LEAF_CODES
    if leaf and mutation.after_backward:
        return "no_grad"
    if mutation.value_grad != Grad.NO and not mutation.target.root().param and fills_rows(mutation.node):
        return "stack"
    return "copy" if leaf else None


def fills_rows(node: ast.AST) -> bool:
    """``buf[t] = value`` where ``value`` reads ``buf`` only at other indices, or not at all: the loop fills a
    tensor step by step (a recurrence reads earlier steps), rather than transforming each element where it is."""
    if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Subscript)):
        return False
    target = node.targets[0]
    if not isinstance(target.value, ast.Name):
        return False
    index = ast.dump(target.slice)
    return not any(
        isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id == target.value.id
        and ast.dump(n.slice) == index
        for n in ast.walk(node.value)
    )


# ---- The fix --------------------------------------------------------------------------------------
def fix(ctx: FixContext, finding: Finding) -> Fix | None:
    """The fix of the in-place rule behind the element-loop finding when it is safe (the loop stays; it becomes
    correct); else, where the loop fills a preallocated tensor step by step, the list + ``torch.stack`` rewrite
    (unsafe, see below); else the in-place rule's unsafe fix."""
    data = finding.data or {}
    code = data.get("underlying")
    build = ctx.builders.get(code or "")
    if code in ("GG002", "GG003"):
        # The message's advice decides, as torch proved it: `torch.no_grad()` only for an update between steps
        # (anywhere else it drops the gradient of what the loop writes), a copy for the computation.
        underlying = fix_or_none(lambda: fix_leaf_write(ctx, finding, update=data.get("advice") == "no_grad"))
    elif build is not None:
        underlying = fix_or_none(lambda: build(ctx, finding))
    else:
        underlying = None
    if underlying is not None and underlying.safe:
        return underlying
    stacked = fix_or_none(lambda: stack_steps(ctx, mutation_in(finding).node))
    if stacked is None and underlying is None:
        raise CannotFix("no fix for this element loop")
    return stacked or underlying


# ---- The fix that stacks a loop's steps ----------------------------------------------------------
# GG104's own rewrite: a loop that fills a preallocated tensor step by step collects the steps in a list and
# stacks them after the loop.
#
#     buf = torch.zeros(T, H)            buf_steps = []
#     buf[0] = f(x[0])                   buf_steps.append(f(x[0]))
#     for t in range(1, T):      ->      for t in range(1, T):
#         buf[t] = g(buf[t - 1], x[t])       buf_steps.append(g(buf_steps[t - 1], x[t]))
#     use(buf)                           buf = torch.stack(buf_steps)
#                                        use(buf)
#
# Only this shape, where the two programs compute the same rows: every row of the buffer is written, in order,
# exactly once (the writes before the loop are rows 0..a-1, the loop runs ``range(a, T)`` with ``T`` spelled as the
# buffer's first dimension), and every other use of the buffer until the loop ends reads an earlier row
# (``buf[t - c]``, ``1 <= c <= a``), which the list holds at the same index.  Always unsafe: the stacked tensor has
# the dtype and shape of the values written, where the buffer converted and broadcast them to its own (and a buffer
# made with ``requires_grad=True`` was a leaf whose ``.grad`` torch filled; the stack's is not).

_FACTORIES = {"torch.zeros", "torch.ones", "torch.empty"}
_LIKE_FACTORIES = {"torch.zeros_like", "torch.ones_like", "torch.empty_like"}
_KNOWN_KEYWORDS = {"requires_grad", "dtype", "device"}


def stack_steps(ctx: FixContext, write: ast.stmt) -> Fix:
    """The list + ``torch.stack`` rewrite of the loop around ``write`` (``buf[t] = value``); CannotFix unless the
    shape above is proven."""
    if not (isinstance(write, ast.Assign) and len(write.targets) == 1 and isinstance(write.targets[0], ast.Subscript)):
        raise CannotFix("not an indexed assignment")
    target = write.targets[0]
    if not isinstance(target.value, ast.Name) or not isinstance(target.slice, ast.Name):
        raise CannotFix("not `name[t] = ...`")
    buf, t = target.value.id, target.slice.id
    helper = _called_once_in_loop(ctx, write)
    loop = ctx.parents.get(helper or write)
    if not (isinstance(loop, ast.For) and any(s is (helper or write) for s in loop.body)):
        raise CannotFix("the write is not a statement of the loop's body")
    if not (isinstance(loop.target, ast.Name) and loop.target.id == t) or loop.orelse:
        raise CannotFix("the loop does not run over the written index")
    start, stop = _range(loop.iter)
    block = block_around(ctx, loop)
    if block is None:
        raise CannotFix("the loop is not in a plain block")
    scope = ctx.scope_of(loop)
    if not isinstance(scope, FUNCTIONS) or buf in ctx.names_in(scope).declared:
        raise CannotFix("the buffer is not a local of a function")
    index = next(i for i, s in enumerate(block) if s is loop)
    alloc_at = next((i for i in range(index - 1, -1, -1) if buf in names_bound(block[i])), None)
    if alloc_at is None:
        raise CannotFix("the buffer is not made in the loop's block")
    alloc = block[alloc_at]
    rows, unsafe = _allocation(ctx, alloc, buf)
    firsts = []
    for stmt in block[alloc_at + 1:index]:
        if buf not in names(stmt):
            continue
        if _row_write(stmt, buf) != len(firsts) or buf in names(stmt.value):
            raise CannotFix("the buffer is used between its allocation and the loop")
        firsts.append(stmt)
    if start != len(firsts) or not _same_size(ctx, stop, rows):
        raise CannotFix("the writes do not cover every row of the buffer exactly once, in order")
    _require_reads_of_earlier_rows(ctx, loop, write, buf, t, len(firsts))
    if buf in names(loop.iter) or any(isinstance(n, (ast.Break, ast.Continue)) for n in walk_statements(loop)):
        raise CannotFix("the loop can stop early or reads the buffer in its header")
    if any(d is not helper for use in ctx.names_in(scope).of(buf) for d in ctx.definitions_between(use, scope)):
        raise CannotFix("a nested function uses the buffer")

    torch = ctx.torch_name()
    if torch is None:
        raise CannotFix("`torch` is not imported by that name")
    steps = fresh_name(ctx, scope, f"{buf}_steps")
    for stmt in (alloc, *firsts, write, loop):
        ctx.require_own_lines(stmt)
    nl = ctx.newline
    edits = [_replace_statement(ctx, alloc, f"{steps} = []")]
    for stmt in firsts:
        edits.append(_replace_statement(ctx, stmt, f"{steps}.append({ctx.source(stmt.value)})"))
    edits.append(_replace_statement(ctx, write, f"{steps}.append({renamed(ctx, write.value, buf, steps)})"))
    after = loop.end_lineno + 1
    edits.append(TextEdit(after, 1, after, 1, f"{ctx.indent_of(loop)}{buf} = {torch}.stack({steps}){nl}"))
    edits.sort(key=lambda e: (e.line, e.column))
    why = "`{0}` becomes the stack of the values written, with their dtype and shape (the buffer converted and " \
          "broadcast them to its own)".format(buf)
    if unsafe:
        why += f"; {unsafe}"
    return Fix(f"Collect the steps in a list `{steps}` and `{torch}.stack` them after the loop (unsafe: {why})",
               False, tuple(edits))


def _called_once_in_loop(ctx: FixContext, write: ast.stmt) -> ast.FunctionDef | None:
    """The function ``write`` is the whole body of, when it is defined in a loop's body and called there, right
    after, once and with no arguments (``def update(): buf[t] = ...`` then ``update()``): the write then runs
    where that call is, and appending to the list in its place changes the list the loop sees (never a name)."""
    fn = ctx.parents.get(write)
    if not (isinstance(fn, ast.FunctionDef) and fn.body == [write] and not fn.decorator_list
            and not any([*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs, fn.args.vararg, fn.args.kwarg])):
        return None
    block = block_around(ctx, fn) or []
    k = next((k for k, st in enumerate(block) if st is fn), None)
    call = block[k + 1].value if k is not None and k + 1 < len(block) and isinstance(block[k + 1], ast.Expr) else None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == fn.name
            and not call.args and not call.keywords):
        return None
    uses = ctx.names_in(ctx.scope_of(fn)).of(fn.name)
    return fn if uses == [call.func] else None


def _range(it: ast.expr) -> tuple[int, ast.expr]:
    """``range(T)`` / ``range(a, T)`` with a literal ``a``: (a, T)."""
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" and not it.keywords):
        raise CannotFix("the loop is not over `range(...)`")
    if len(it.args) == 1:
        return 0, it.args[0]
    if len(it.args) == 2 and isinstance(it.args[0], ast.Constant) and type(it.args[0].value) is int:
        return it.args[0].value, it.args[1]
    raise CannotFix("the range has a step or a start that is not a literal")






def _allocation(ctx: FixContext, stmt: ast.stmt, buf: str) -> tuple[tuple[str, ...], str]:
    """The spellings of the buffer's row count, and what else the rewrite changes (for the title)."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
            and isinstance(stmt.value, ast.Call)):
        raise CannotFix("the buffer is not made by a factory call")
    call = stmt.value
    name = ctx.qual(call.func)
    if any(k.arg not in _KNOWN_KEYWORDS for k in call.keywords):
        raise CannotFix("the factory has keywords the rewrite does not know")
    unsafe = ""
    if any(k.arg == "requires_grad" for k in call.keywords):
        unsafe = f"`{buf}` is no longer a leaf, so `{buf}.grad` stays None"
    if name in _FACTORIES and call.args:
        first = call.args[0]
        if isinstance(first, (ast.Tuple, ast.List)) and len(call.args) == 1 and first.elts:
            first = first.elts[0]
        if isinstance(first, ast.Starred):
            raise CannotFix("the buffer's size is unpacked")
        return (_norm(ctx.source(first)),), unsafe
    if name in _LIKE_FACTORIES and len(call.args) == 1 and isinstance(call.args[0], ast.Name):
        x = call.args[0].id
        return (f"{x}.shape[0]", f"len({x})", f"{x}.size(0)", f"{x}.size()[0]"), unsafe
    raise CannotFix("the buffer is not made by torch.zeros/ones/empty(_like)")


def _norm(text: str) -> str:
    return "".join(text.split())


def _same_size(ctx: FixContext, stop: ast.expr, rows: tuple[str, ...]) -> bool:
    return _norm(ctx.source(stop)) in {_norm(r) for r in rows}


def _row_write(stmt: ast.stmt, buf: str) -> int | None:
    """``buf[k] = ...`` with a literal ``k``: k."""
    if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Subscript)
            and isinstance(stmt.targets[0].value, ast.Name) and stmt.targets[0].value.id == buf):
        index = stmt.targets[0].slice
        if isinstance(index, ast.Constant) and type(index.value) is int:
            return index.value
    return None


def _require_reads_of_earlier_rows(ctx: FixContext, loop: ast.For, write: ast.Assign, buf: str, t: str,
                                   written_before: int) -> None:
    """Every use of ``buf`` in the loop is the write's target or a read ``buf[t - c]`` of a row the list holds;
    ``t`` is never rebound."""
    names = ctx.names_in(ctx.scope_of(loop))
    if any(isinstance(n.ctx, ast.Store) and n is not loop.target and ctx.inside(n, loop) for n in names.of(t)):
        raise CannotFix("the loop variable is rebound in the loop")
    for node in names.of(buf):
        if node is write.targets[0].value or not ctx.inside(node, loop):
            continue
        read = ctx.parents.get(node)
        index = read.slice if isinstance(read, ast.Subscript) and read.value is node else None
        if not (isinstance(index, ast.BinOp) and isinstance(read.ctx, ast.Load) and isinstance(index.op, ast.Sub)
                and isinstance(index.left, ast.Name) and index.left.id == t and isinstance(index.right, ast.Constant)
                and type(index.right.value) is int and 1 <= index.right.value <= written_before):
            raise CannotFix("the loop uses the buffer other than reading an earlier row")


def _replace_statement(ctx: FixContext, stmt: ast.stmt, code: str) -> TextEdit:
    """``stmt``'s text (not its comment) replaced by ``code``."""
    line, column, end_line, end_column = ctx.char_range(stmt)  # 0-based columns; edits count from 1
    return TextEdit(line, column + 1, end_line, end_column + 1, code)


RULE = Rule(
    code="GG104",
    name="element-loop-write",
    summary="A Python loop writes a tensor element by element in a way autograd rejects (a leaf, or a saved slice).",
    explanation="""
Writing `t[i, j] = ...` in a Python loop is slow, and it breaks autograd when `t` is a leaf that requires
grad (or a view of one), or when an earlier iteration saved the slice it overwrites (the recurrence
`y[t] = y[t] * y[t - 1]` saves `y[t - 1]` for backward, and the next iteration writes it).  gradguard
reports these writes with the form to use instead.  Loops that write a fresh `clone()` and never
overwrite a saved slice work (they are only slow) and are not reported.
""",
    fix_advice="""
It depends on what the loop does, and gradguard's message says which case it sees:

- It fills a tensor step by step with values that carry gradient (an RNN's states, a recurrence, a survival
  curve): collect the steps in a list and `torch.stack` them.  Not `torch.no_grad()`: the write then runs, and
  nothing before it gets any gradient (even if the buffer was made with `requires_grad=True`).
- It updates a parameter after a backward (pruning, clipping between steps): do it under `torch.no_grad()`,
  vectorised as `w.masked_fill_(w.abs() < thr, 0)` or `w.clamp_(lo, hi)`.
- It is part of the computation on a leaf (thresholding, a causal mask in `forward`): write into a clone, or
  mask out of place (`torch.where(t < thr, 0, t)`, `t.masked_fill(t < thr, 0)`, `w * mask`).  Under
  `torch.no_grad()` the written entries would still get gradient.
- Element-wise transforms: vectorise (per-channel min-max is broadcasting over `amin`/`amax` with
  `keepdim=True`).

The quick fix keeps the loop and makes it correct (a clone where the slice is saved, the update under
`torch.no_grad()`); where the loop fills a preallocated `torch.zeros`/`ones`/`empty(_like)` buffer row by row
and no such fix is safe, it collects the steps in a list and stacks them after the loop (unsafe: the stack has
the dtype and shape of the values, where the buffer converted and broadcast them).
""",
    default_severity=Severity.ERROR,
    check=check,
    fix=fix,
    when_wrong="""
Only element loops that autograd rejects are reported. Loops that are slow but correct are not. Which advice the
message gives is decided from what gradguard sees: a backward earlier in the analysed code makes a leaf write an
update between steps; a write whose values require grad and that reads the tensor only at other indices fills it
step by step.  A helper called from another file after a backward is not seen, and then the message advises a
clone where `torch.no_grad()` was meant.
""",
    invalid=(
        Example(
            """
import torch
x = torch.randn(4, 4, requires_grad=True)
for i in range(4):
    for j in range(4):
        if x[i, j] < 0:
            x[i, j] = 0.0           # GG104
""",
            raises="a view of a leaf Variable that requires grad is being used in an in-place operation.",
        ),
    ),
    valid=(
        Example(
            """
import torch
x = torch.randn(4, 4, requires_grad=True)
y = torch.where(x < 0, torch.zeros_like(x), x)
y.sum().backward()
"""
        ),
    ),
)
