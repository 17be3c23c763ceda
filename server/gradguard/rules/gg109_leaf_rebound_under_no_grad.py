"""GG109 leaf-rebound-under-no-grad: ``w = w - lr * w.grad`` under no_grad makes ``w`` name a new tensor that does
not require grad, while the optimizer (or the next ``w.grad``) still expects gradients for the leaf."""

from __future__ import annotations

import ast

from ..diagnostics import Fix, Severity, TextEdit
from ..fixes.context import FUNCTIONS, CannotFix, FixContext
from ..fixes.writes import short
from ..inference.events import Finding, Rebind
from ..knowledge.names import BOOL_RESULTS, FLOAT_REDUCTIONS, OUT_OF_PLACE_METHODS
from ..messages import Message
from ..statements import block_of, blocks, names, own_nodes
from .base import Example, Rule


MESSAGE = "element 0 of tensors does not require grad and does not have a grad_fn"


def check(rebind: Rebind):
    if not isinstance(rebind, Rebind) or rebind.starved is None:
        return
    sink, read = rebind.reached, rebind.starved
    yield Finding(
        "GG109",
        rebind.node,
        Message.format(
            "this assignment under no_grad rebinds {name} to a new tensor that does not require grad: the leaf "
            "that required grad is left behind, so the backward on {sink} runs through values that get no "
            'gradient (or raises "{torch}" when nothing else requires grad), and {what} on {read} finds no '
            "gradient for {name}: it silently stops training. Update {name} in place (`-=`, `copy_(...)` or an "
            "in-place method such as `clamp_(...)`) so that it stays the same leaf.",
            name=rebind.name, sink=sink.node, torch=MESSAGE, what=read.what, read=read.node),
        related=[(sink.node, Message.format("the backward through the rebound {name}: it gets no gradient",
                                            name=rebind.name)),
                 (read.node, "reads the gradient that never arrives")],
        data={"rebind": rebind},
    )


# ---- The fix --------------------------------------------------------------------------------------
# GG109's rewrite: a leaf rebound under no_grad is updated in place instead, so it stays the leaf the optimizer
# holds and the next backward fills.
#
#     w = w - lr * w.grad        ->  w -= lr * w.grad; w.grad = None
#     emb = emb / emb.norm(...)  ->  emb /= emb.norm(...)
#     self.w = self.w.clamp(a, b) -> self.w.clamp_(a, b)
#     w = f(w)                   ->  w.copy_(f(w))
#
# The new tensor of a rebinding has no gradient, so an update that consumed ``w.grad`` also clears it (the next
# step would otherwise add the old gradient again).  An in-place update keeps ``w``'s shape and dtype where the
# new tensor could have taken others: a broadcast to a larger shape raises, but a wider float dtype is silently
# cast back, and ``copy_`` silently broadcasts a smaller result.  The fix is safe only when the code shows that the
# new value has ``w``'s dtype (and, for ``copy_``, its shape); otherwise it is offered as unsafe, saying so.

_AUGMENTED = {ast.Add: "+=", ast.Sub: "-=", ast.Mult: "*=", ast.Div: "/=", ast.Pow: "**="}
# Each has its in-place form ``m_``; same shape (given same-shape operands) and same float dtype.
_ELEMENTWISE = OUT_OF_PLACE_METHODS - BOOL_RESULTS
_SAME_TENSOR = frozenset({"grad", "data"})  # ``w.grad`` and ``w.data`` have ``w``'s shape and dtype
_UNSAFE = "unsafe: `{name}` keeps its {what}, which the new tensor may not have"


def fix(ctx: FixContext, finding: Finding) -> Fix:
    """The in-place form of the rebinding ``finding`` reports (one statement on its own lines)."""
    stmt = finding.node
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], (ast.Name, ast.Attribute))):
        raise CannotFix("not a plain rebinding of one name")
    ctx.require_own_lines(stmt)
    target, value = stmt.targets[0], stmt.value
    name = ast.unparse(target)
    update, unsafe_for = _in_place(ctx, name, value)
    edits = [TextEdit(*_one_based(ctx.char_range(stmt)), update)]
    title = f"Update `{name}` in place, so that it stays the leaf that gets gradients"
    clears = _reads_grad(value, name) and _clears_grad_next(ctx, stmt, name)
    if _reads_grad(value, name) and clears is not True:
        end = stmt.end_lineno
        eol = len(ctx.lines[end - 1]) + 1  # after a trailing comment
        clear = f"{name}.grad.zero_()" if clears == _AFTER_LOOP else f"{name}.grad = None"
        edits.append(TextEdit(end, eol, end, eol, f"{ctx.newline}{ctx.indent_of(stmt)}{clear}"))
        title += f", and clear the `{name}.grad` it used"
    title += f": `{short(update)}`"
    if unsafe_for:
        title += f" ({_UNSAFE.format(name=name, what=unsafe_for)})"
    elif isinstance(target, ast.Name) and not _callers_rebind(ctx, stmt, target.id):
        title += f" (unsafe: the tensor a caller passes as `{name}` is now changed in place)"
    else:
        return Fix(title, True, tuple(edits))
    return Fix(title, False, tuple(edits))


def _callers_rebind(ctx: FixContext, stmt: ast.stmt, name: str) -> bool:
    """Whether the in-place update reaches no caller's tensor that the rebinding left alone: ``name`` is not a
    parameter of the function around ``stmt``, or every use of that (plain) function is ``x = f(..., x, ...)``,
    which rebinds the caller's name to the returned tensor anyway."""
    fn = ctx.function_of(stmt)
    if fn is None:
        return True
    positional = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
    if name not in positional and name not in {a.arg for a in fn.args.kwonlyargs}:
        return True
    if ctx.class_of(fn) is not None or fn.decorator_list or ctx.scope_of(fn) is not ctx.tree:
        return False
    index = positional.index(name) if name in positional else None
    for node in ctx.names_in(ctx.tree).of(fn.name):
        if not isinstance(node.ctx, ast.Load):
            continue
        call = ctx.parents.get(node)
        assign = ctx.parents.get(call)
        if not (isinstance(call, ast.Call) and call.func is node and isinstance(assign, ast.Assign)
                and assign.value is call and len(assign.targets) == 1 and isinstance(assign.targets[0], ast.Name)):
            return False
        passed = [k.value for k in call.keywords if k.arg == name]
        if index is not None and index < len(call.args):
            passed.append(call.args[index])
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            return False
        if len(passed) != 1 or not (isinstance(passed[0], ast.Name) and passed[0].id == assign.targets[0].id):
            return False
    return True


def _one_based(char_range: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    line, column, end_line, end_column = char_range
    return line, column + 1, end_line, end_column + 1


def _in_place(ctx: FixContext, name: str, value: ast.expr) -> tuple[str, str]:
    """The in-place statement, and what of ``name`` it may keep that the rebinding would have changed ("" when
    the code shows nothing changes)."""
    same = _Same(ctx, name)
    if isinstance(value, ast.BinOp) and type(value.op) in _AUGMENTED and same.target(value.left):
        right = ctx.source(value.right)
        if "\n" in right:  # its parentheses are not part of its source, and it spans lines
            right = f"({right})"
        return f"{name} {_AUGMENTED[type(value.op)]} {right}", "" if same.dtype(value.right) else "dtype"
    func = value.func if isinstance(value, ast.Call) else None
    if isinstance(func, ast.Attribute) and same.target(func.value) and func.attr in _ELEMENTWISE:
        call = ctx.source(value)
        args = call[len(ctx.source(func)):]
        dtype = all(same.argument(a) for a in (*value.args, *(k.value for k in value.keywords)))
        return f"{name}.{func.attr}_{args}", "" if dtype else "dtype"
    if isinstance(value, (ast.Constant, ast.Name)) and not same.target(value):
        raise CannotFix("the new value is not computed from the leaf")
    missing = [what for what, kept in (("shape", same.shape(value)), ("dtype", same.dtype(value))) if not kept]
    return f"{name}.copy_({ctx.source(value)})", " and ".join(missing)


class _Same:
    """What the code shows about an expression compared with the rebound leaf ``name``."""

    def __init__(self, ctx: FixContext, name: str):
        self.ctx = ctx
        self.name = name

    def target(self, node: ast.AST) -> bool:
        return isinstance(node, (ast.Name, ast.Attribute)) and ast.unparse(node) == self.name

    def _of_target(self, node: ast.AST) -> bool:
        """``w``, ``w.grad``, ``w.data``: a tensor with ``w``'s shape and dtype."""
        return self.target(node) or (isinstance(node, ast.Attribute) and node.attr in _SAME_TENSOR
                                     and self.target(node.value))

    def dtype(self, node: ast.AST) -> bool:
        """``node`` has ``w``'s dtype, or is a Python number (which never widens a float tensor)."""
        if self._of_target(node) or _number(node):
            return True
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            return self.dtype(node.operand)
        if isinstance(node, ast.BinOp) and not isinstance(node.op, ast.MatMult):
            return self.dtype(node.left) and self.dtype(node.right)
        if isinstance(node, ast.Name):
            return _number_name(self.ctx, node)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            method = node.func.attr
            receiver = node.func.value
            if self.ctx.qual(receiver) == "torch":  # torch.clamp(w, ...)
                return (method in _ELEMENTWISE | FLOAT_REDUCTIONS and bool(node.args)
                        and all(self.argument(a) for a in (*node.args, *(k.value for k in node.keywords))))
            return (method in _ELEMENTWISE | FLOAT_REDUCTIONS and self.dtype(receiver)
                    and all(self.argument(a) for a in (*node.args, *(k.value for k in node.keywords))))
        return False

    def argument(self, node: ast.AST) -> bool:
        """A call's argument: a value of ``w``'s dtype, or a constant (``dim=1``, ``keepdim=True``, ``(0, 1)``)."""
        if isinstance(node, ast.Constant) and not isinstance(node.value, complex):
            return True
        if isinstance(node, ast.Tuple):
            return all(isinstance(e, ast.Constant) and type(e.value) is int for e in node.elts)
        return self.dtype(node)

    def shape(self, node: ast.AST) -> bool:
        """``node`` has at least ``w``'s shape: ``copy_`` then either takes it as it is or raises (a larger
        one does not broadcast into ``w``), never silently broadcasts a smaller one."""
        if self._of_target(node):
            return True
        if isinstance(node, ast.UnaryOp):
            return self.shape(node.operand)
        if isinstance(node, ast.BinOp) and not isinstance(node.op, ast.MatMult):
            return self.shape(node.left) or self.shape(node.right)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _ELEMENTWISE:
            if self.ctx.qual(node.func.value) == "torch":
                return bool(node.args) and self.shape(node.args[0])
            return self.shape(node.func.value)
        return False


def _number(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) in (int, float)


def _number_name(ctx: FixContext, name: ast.Name) -> bool:
    """A name that only ever holds a Python number: a parameter whose default is a number, or a name assigned
    only numbers, in the function (or module) that reads it, and nowhere assigned anything else."""
    scope = ctx.scope_of(name)
    bound = False
    if isinstance(scope, FUNCTIONS):
        args = scope.args
        positional = [*args.posonlyargs, *args.args]
        defaults = dict(zip([a.arg for a in positional[len(positional) - len(args.defaults):]], args.defaults))
        defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
        every = {a.arg for a in (*positional, *args.kwonlyargs)}
        if name.id in every:
            default = defaults.get(name.id)
            if default is None or not _number(default):
                return False
            bound = True
    if any(isinstance(n.ctx, ast.Store) and _in_own_loop_or_with(ctx, n, scope) for n in ctx.names_in(scope).of(name.id)):
        return False
    for node in own_nodes(scope):
        if isinstance(node, (ast.Global, ast.Nonlocal)) and name.id in node.names:
            return False
        targets = []
        if isinstance(node, ast.Assign):
            targets = [(t, node.value) for t in node.targets]
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)):
            targets = [(node.target, node.value)]
        for target, value in targets:
            if isinstance(target, ast.Name) and target.id == name.id:
                if value is None or not _number(value):
                    return False
                bound = True
            elif name.id in names(target):
                return False
    return bound


def _in_own_loop_or_with(ctx: FixContext, name: ast.Name, scope: ast.AST) -> bool:
    """Whether ``name`` lies in (the header or the body of) a ``for`` or ``with`` of ``scope``'s own code."""
    compound = False
    for anc in ctx.ancestors(name):
        if anc is scope:
            return compound
        if isinstance(anc, (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith)):
            compound = True
        elif isinstance(anc, (*FUNCTIONS, ast.Lambda, ast.ClassDef)):
            compound = False  # a loop inside a nested function is that function's own code
    return compound


def _reads_grad(value: ast.expr, name: str) -> bool:
    """The new value consumes ``name.grad`` (a manual update): the rebound name then has no gradient."""
    return any(isinstance(n, ast.Attribute) and n.attr == "grad" and ast.unparse(n.value) == name
               for n in ast.walk(value))


_AFTER_LOOP = "after the loop"  # the gradient is cleared after the loop the update ends


def _clears_grad_next(ctx: FixContext, stmt: ast.stmt, name: str) -> bool | str:
    """The statement that runs after ``stmt`` already clears ``name.grad`` (``w.grad = None``, ``w.grad.zero_()``),
    also when ``stmt`` ends a ``with torch.no_grad():`` block and the clearing follows the block.  CannotFix when
    ``stmt`` ends a function's body or a ``return`` follows it: what runs next is at its calls (clearing it there would break a
    ``w.grad.zero_()`` that follows a call)."""
    while True:
        parent = ctx.parents.get(stmt)
        block = block_of(parent, stmt)
        if block is None:
            return False
        index = next(i for i, s in enumerate(block) if s is stmt)
        if index + 1 < len(block):
            after = block[index + 1]
            if isinstance(after, ast.Return):
                raise CannotFix("the function returns after the update: whether the gradient is cleared after it is "
                                "up to the calls")
            return ast.unparse(after) in (f"{name}.grad = None", f"{name}.grad.zero_()")
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
            raise CannotFix("the update ends its function: whether the gradient is cleared after it is up to the calls")
        if isinstance(parent, (ast.For, ast.AsyncFor, ast.While)) and not parent.orelse:
            # the loop may end after the update, and a clearing after the loop (`w.grad.zero_()`) must not meet None:
            # the update then zeroes the gradient it used instead (the next iteration's backward fills it again)
            try:
                return _AFTER_LOOP if _clears_grad_next(ctx, parent, name) else False
            except CannotFix:
                return False
        # What runs after the end of a `with` block, an `if` branch, or a `try` block whose later blocks (its
        # `else`, its `finally`, in the order they run) only pass is the statement after the compound one.
        later = [b for _, b in blocks(parent)]
        later = later[next(i for i, b in enumerate(later) if b is block) + 1:]
        ends_try = isinstance(parent, ast.Try) and all(isinstance(s, ast.Pass) for b in later for s in b)
        if not (isinstance(parent, (ast.With, ast.AsyncWith, ast.If)) or ends_try):
            return False
        stmt = parent


RULE = Rule(
    code="GG109",
    name="leaf-rebound-under-no-grad",
    summary="A tensor that requires grad is rebound under `no_grad` (`w = w - lr * w.grad`): it stops getting gradients.",
    explanation="""
Under `torch.no_grad()`, `w = w - lr * w.grad` (or `w = w / w.norm()`, `self.w = self.w.clamp(...)`) does not
update `w`: it computes a new tensor that does not require grad and binds the name to it.  The leaf that
required grad, the one an optimizer holds, is left behind.  The next forward reads the new tensor, so the next
backward gives it no gradient: `w.grad` stays None (a `if w.grad is not None` guard then skips it forever), the
optimizer steps the old leaf without a gradient, and `w` silently stops training.  When nothing else requires
grad, that backward raises `element 0 of tensors does not require grad and does not have a grad_fn` instead.
It is flagged only when a backward runs through the rebound tensor and a gradient read (an optimizer's `step()`,
a `.grad` under no_grad) comes after it.
""",
    fix_advice="""
Update in place under `torch.no_grad()`: `w -= lr * w.grad`, `w.sub_(lr * w.grad)`, `w.copy_(w / w.norm())`,
`w.clamp_(-1, 1)`.  In manual gradient descent without an optimizer, rebinding is fine if the new tensor gets
grad back with `w.requires_grad_()` before the next forward.

The quick fix writes the in-place form (`w -= ...`, `w.clamp_(...)`, or `w.copy_(...)`) and, when the update
read `w.grad`, clears it (`w.grad = None`): the rebound tensor had no gradient, and the next step must not add
the used one again.  An in-place update keeps `w`'s dtype and shape, so the fix is unsafe (and says which) when
the code does not show that the new value has them: a float64 tensor in the update would have widened `w`,
and `copy_` broadcasts a smaller result over `w` where the rebinding would have shrunk it.
""",
    default_severity=Severity.ERROR,
    check=check,
    fix=fix,
    when_wrong="""
A rebinding followed by `requires_grad_()` on the new tensor is not flagged, even when an optimizer still holds
the old leaf (the optimizer then steps a tensor nothing uses). A method that rebinds `self.w` after its own
backward is found when the file calls it again (in a loop) after that; called only from other files, it is not.
""",
    invalid=(
        Example(
            """
import torch
w = torch.randn(3, requires_grad=True)
b = torch.zeros(1, requires_grad=True)
x, y = torch.randn(8, 3), torch.randn(8)
for _ in range(3):
    loss = ((x @ w + b - y) ** 2).mean()
    loss.backward()
    with torch.no_grad():
        if w.grad is not None:
            w = w - 0.1 * w.grad    # GG109
        b -= 0.1 * b.grad
        b.grad = None
""",
            raises=None,
        ),
    ),
    valid=(
        Example(
            """
import torch
w = torch.randn(3, requires_grad=True)
b = torch.zeros(1, requires_grad=True)
x, y = torch.randn(8, 3), torch.randn(8)
for _ in range(3):
    loss = ((x @ w + b - y) ** 2).mean()
    loss.backward()
    with torch.no_grad():
        w -= 0.1 * w.grad
        b -= 0.1 * b.grad
    w.grad = None
    b.grad = None
"""
        ),
    ),
)
