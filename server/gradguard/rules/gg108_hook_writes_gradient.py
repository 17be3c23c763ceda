"""GG108 hook-writes-gradient: a gradient hook writes the gradient it is given in place, which other branches
of the graph may share: their gradients change silently."""

from __future__ import annotations

import ast

from ..diagnostics import Fix, Severity, TextEdit
from ..fixes.context import FUNCTIONS, CannotFix, FixContext
from ..fixes.edits import return_at_end
from ..fixes.writes import InPlaceWrite, aug_to_binop, code, out_of_place, short
from ..inference.events import Finding, HookWrite
from ..inference.hooks import OutputWrite
from ..knowledge.names import SHARING_ATTRS, VIEW_METHODS
from ..messages import Message
from ..statements import own_nodes
from .base import Example, Rule


def check(write: HookWrite):
    if not isinstance(write, HookWrite):
        return
    if isinstance(write, OutputWrite):  # a forward hook's output that is a view of a parameter (inference/hooks.py)
        parameter = write.parameter
        made = [(parameter.origin, "the parameter is created here")] if parameter.origin is not None else []
        yield Finding(
            "GG108",
            write.node,
            Message.format(
                "{how} writes the output this forward hook is given (registered with `register_forward_hook` on "
                "{registered}) in place, with grad mode off; that output is a view of {parameter}, so torch lets the "
                "write through and the parameter itself changes: every later forward, and its gradients, use the "
                "written values, without an error. Write into a clone of the output (and return it from the hook).",
                how=write.how, registered=write.registered, parameter=parameter.label),
            related=[(write.registered, "the hook is registered here with `register_forward_hook`"), *made],
            data={"hook_write": write},
        )
        return
    if write.register.endswith(".backward"):  # a custom Function's backward (see inference/extension_points.py)
        yield Finding(
            "GG108",
            write.node,
            Message.format(
                "{how} writes the gradient `{function}` is given (for the output of the `apply` on {applied}) in "
                "place: torch hands a custom Function's backward the gradient tensor itself, which the backward of a "
                "sum or residual also passes to its other inputs, and which is the caller's own tensor when given as "
                "`grad_outputs` to `autograd.grad` or `backward()`; a branch autograd runs later, or the caller's "
                "next use of that tensor, gets the written values, without an error. Return a new tensor instead.",
                how=write.how, function=write.register, applied=write.registered),
            related=[(write.registered, f"`{write.register.rsplit('.', 1)[0]}.apply` runs here")],
            data={"hook_write": write},
        )
        return
    yield Finding(
        "GG108",
        write.node,
        Message.format(
            "{how} writes the gradient this hook is given (registered with `{register}` on {registered}) in place: "
            "the backward of a sum or residual passes the same gradient tensor to each of its inputs, so a branch "
            "autograd runs after this hook gets the written gradient too, without an error. Return a new tensor "
            "from the hook instead.",
            how=write.how, register=write.register, registered=write.registered),
        related=[(write.registered, f"the hook is registered here with `{write.register}`")],
        data={"hook_write": write},
    )


# ---- The fix --------------------------------------------------------------------------------------
# GG108's rewrite: a gradient hook that writes its gradient in place returns a new one instead.
#
#     lambda g: g.clamp_(-c, c)          ->  lambda g: g.clamp(-c, c)
#     def f(g): g *= -lam; return g      ->  def f(g): g = g * -lam; return g
#     def f(g): g[pad] = 0               ->  def f(g): g = g.clone(); g[pad] = 0; return g
#     def f(m, go): go[0].mul_(s)        ->  def f(m, go): go = (go[0].mul(s), *go[1:]); return go
#
# torch passes on whatever a hook returns (a tensor hook's tensor, a backward pre-hook's tuple), so the rewritten
# hook gives the branch it is registered on the same gradient, and leaves the shared tensor other branches get
# alone.  Only where nothing else can see the old gradient: the hook reads its parameter only through
# non-view attributes, every ``return`` returns that parameter, and the function is used only as a hook.

# What a hook's result replaces: the gradient itself, a backward pre-hook's ``grad_output`` tuple, or a forward
# hook's output (which torch hands on to the rest of the forward).
_TUPLE_HOOKS = frozenset({"register_full_backward_pre_hook"})
_HOOK_REGISTERS = frozenset({"register_hook", "register_full_backward_pre_hook", "register_forward_hook"})


def fix(ctx: FixContext, finding: Finding) -> Fix:
    """Write out of place and return the new gradient (a tuple for a pre-hook); else clone it on the hook's entry."""
    hook: HookWrite | None = (finding.data or {}).get("hook_write")
    if hook is None:
        raise CannotFix("the finding carries no hook write")
    try:
        return _out_of_place(ctx, finding, hook)
    except CannotFix:
        return _clone_on_entry(ctx, hook)


def _out_of_place(ctx: FixContext, finding: Finding, hook: HookWrite) -> Fix:
    write = InPlaceWrite.of(ctx, finding.node)
    scope = ctx.scope_of(write.stmt if not isinstance(finding.node, ast.Call) else finding.node)
    backward = _is_function_backward(ctx, hook, scope)
    if not isinstance(scope, (*FUNCTIONS, ast.Lambda)) or not (backward or _is_registered(hook.registered, scope)):
        # a function the hook calls: its return value goes back to the hook, which need not pass it on
        raise CannotFix("the write is not in the hook's own body")
    param, new = _gradient_and_new_value(ctx, write, scope, hook.register in _TUPLE_HOOKS)
    if isinstance(scope, ast.Lambda):
        if scope.body is not write.call or write.kind != "method":
            raise CannotFix("a lambda that does more than the write")
        line, column, end_line, end_column = ctx.char_range(write.call)
        return _fix([TextEdit(line, column + 1, end_line, end_column + 1, new)], new, hook)
    if not backward:
        _require_only_hook_uses(ctx, scope)
    _require_no_other_reads(ctx, scope, write.stmt, param)
    returns = [n for n in own_nodes(scope) if isinstance(n, ast.Return)]
    if any(not _returns_gradient(r.value, param, backward) for r in returns) or backward and not returns:
        raise CannotFix("the hook returns something other than its gradient")
    if write.value_use:
        raise CannotFix("the in-place call's result is used")
    ctx.require_own_lines(write.stmt)
    indent = ctx.newline + ctx.indent_of(write.stmt)
    body = new if write.kind != "setitem" else f"{param} = {param}.clone(){indent}{ctx.source(write.stmt)}"
    line, column, end_line, end_column = ctx.char_range(write.stmt)
    edits = [TextEdit(line, column + 1, end_line, end_column + 1, body)]
    if not returns:
        edits.append(_return_at_end(ctx, scope, param))
    return _fix(edits, body.split(ctx.newline)[0] + ("" if returns else f"; return {param}"), hook)


def _clone_on_entry(ctx: FixContext, hook: HookWrite) -> Fix:
    """The hook's first statement clones the gradient parameter, so the write, wherever it is (a helper the hook
    calls, an alias of the parameter), lands on the hook's own copy; the hook returns it where it returned nothing.
    The run tells which function torch entered at the register call and which of its parameters brought the
    written memory in; a hook that returns None on some path, or a function used other than as a hook, refuses."""
    entered = hook.entered()
    if entered is None:
        raise CannotFix("no gradient parameter of a hook's run to clone")
    depth, fn = entered
    passed = hook.moment.callers_pass(depth)
    if isinstance(hook, OutputWrite) and isinstance(fn, ast.FunctionDef) and fn.args.args:
        # the module a forward hook is handed holds the parameter the output is a view of: the output is the last
        passed = [p for p in passed if p == fn.args.args[-1].arg]
    if not isinstance(fn, ast.FunctionDef) or len(passed) != 1:
        raise CannotFix("not one gradient parameter of a `def` hook")
    param, backward = passed[0], _is_function_backward(ctx, hook, fn)
    if not backward:
        _require_only_hook_uses(ctx, fn)
    own = list(own_nodes(fn))
    if any(isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await, ast.Global, ast.Nonlocal)) for n in own):
        raise CannotFix("a generator hook, or one that declares names global")
    returns = [n for n in own if isinstance(n, ast.Return)]
    if any(r.value is None or isinstance(r.value, ast.Constant) and r.value.value is None for r in returns):
        raise CannotFix("the hook returns None on some path: torch then passes on the written gradient")
    if not returns and (backward or any(isinstance(n, ast.Name) and n.id == param and not isinstance(n.ctx, ast.Load)
                                        for n in own)):
        raise CannotFix(f"`{param}` is rebound in a hook that returns nothing")
    first = fn.body[1] if len(fn.body) > 1 and ast.get_docstring(fn, clean=False) is not None else fn.body[0]
    ctx.require_own_lines(first)
    clone = f"{param} = {param}.clone()"
    if hook.register in _TUPLE_HOOKS:  # torch passes on the tuple the pre-hook returns: one of clones
        clone = f"{param} = tuple(None if g is None else g.clone() for g in {param})"
    edits = [TextEdit(first.lineno, 1, first.lineno, 1, f"{ctx.indent_of(first)}{clone}{ctx.newline}")]
    if not returns:
        edits.append(_return_at_end(ctx, fn, param))
    return Fix(f"Clone the {_given(hook)} the hook is given before anything writes it: `{clone}`"
               + ("" if returns else f"; return {param}"), True, tuple(sorted(edits, key=lambda e: (e.line, e.column))))


def _return_at_end(ctx: FixContext, fn: ast.FunctionDef, param: str) -> TextEdit:
    """``return param`` after the last statement of a hook that returned nothing (torch then uses the new value)."""
    ctx.require_own_lines(fn.body[-1])
    return return_at_end(ctx, fn, param)


def _fix(edits: list[TextEdit], desc: str, hook: HookWrite) -> Fix:
    return Fix(f"Return a new {_given(hook)} from the hook instead of writing it: `{short(desc)}`", True,
               tuple(sorted(edits, key=lambda e: (e.line, e.column))))


def _given(hook: HookWrite) -> str:
    """What the hook is handed and hands on: a gradient, or a forward hook's output."""
    return "output" if isinstance(hook, OutputWrite) else "gradient"


def _gradient_and_new_value(ctx: FixContext, write: InPlaceWrite, scope: ast.AST, as_tuple: bool) -> tuple[str, str]:
    """The hook's gradient parameter, and the code that computes its new value (a statement for a ``def``,
    an expression for a lambda)."""
    params = {a.arg for a in (*scope.args.posonlyargs, *scope.args.args)}
    target = write.target
    index = None
    if as_tuple:
        if not (isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant)
                and type(target.slice.value) is int and target.slice.value >= 0):
            raise CannotFix("a pre-hook write not on one item of its gradient tuple")
        index, target = target.slice.value, target.value
    if write.kind == "setitem" and not as_tuple:
        target = target.value
        while isinstance(target, ast.Subscript):
            target = target.value
    if not (isinstance(target, ast.Name) and target.id in params):
        raise CannotFix("the write is not on the hook's gradient parameter")
    param = target.id
    if write.kind == "setitem":
        if as_tuple:
            raise CannotFix("an item write into a pre-hook's gradient")
        return param, ""
    if write.kind == "method":
        value = code(out_of_place(ctx, write.call))
    elif write.kind == "augassign":
        value = code(aug_to_binop(ctx.cst(write.stmt)))
    else:
        raise CannotFix(f"a {write.kind} write")
    if isinstance(scope, ast.Lambda):
        if as_tuple:
            raise CannotFix("a lambda pre-hook")
        return param, value
    if index is None:
        return param, f"{param} = {value}"
    before = f"*{param}[:{index}], " if index else ""
    return param, f"{param} = ({before}{value}, *{param}[{index + 1}:])"


def _require_no_other_reads(ctx: FixContext, scope: ast.AST, write: ast.stmt, param: str) -> None:
    """Outside the write and the returns, the hook may read its gradient only through attributes that make no
    view (``g.norm()``, ``g.shape``): anything else could keep the old tensor, which the write used to change."""
    for node in ctx.names_in(scope).of(param):
        if ctx.inside(node, write):
            continue
        if node is getattr(scope.args, "vararg", None):
            continue
        parent = ctx.parents.get(node)
        returned = isinstance(parent, ast.Tuple) and isinstance(ctx.parents.get(parent), ast.Return)  # (checked there)
        if isinstance(parent, ast.Return) or returned or isinstance(node.ctx, ast.Param):
            continue
        if isinstance(node.ctx, ast.Store):
            raise CannotFix(f"`{param}` is assigned in the hook")
        if isinstance(parent, ast.Attribute) and parent.attr not in VIEW_METHODS | SHARING_ATTRS:
            continue
        raise CannotFix(f"`{param}` is read in the hook in a way that could keep it")


def _is_registered(register: ast.AST, scope: ast.AST) -> bool:
    """Is ``scope`` the function the register call hands to torch (by its name, a method's name, or the lambda
    itself)?"""
    if not (isinstance(register, ast.Call) and register.args):
        return False
    hook = register.args[0]
    if isinstance(scope, ast.Lambda):
        return hook is scope
    if isinstance(hook, ast.Attribute):  # `self.register_full_backward_pre_hook(self.scale_grad)`
        return hook.attr == scope.name
    return isinstance(hook, ast.Name) and hook.id == scope.name


def _is_function_backward(ctx: FixContext, hook: HookWrite, scope: ast.AST) -> bool:
    """Is ``scope`` the ``backward`` of the custom Function whose backward the run saw write its gradient?  torch
    passes on what it returns, one gradient per input of ``forward``, as it does a hook's result."""
    owner = ctx.parents.get(scope)
    return isinstance(scope, ast.FunctionDef) and scope.name == "backward" and isinstance(owner, ast.ClassDef) \
        and hook.register == f"{owner.name}.backward"


def _returns_gradient(value: ast.expr | None, param: str, backward: bool) -> bool:
    """Does the ``return`` hand on the gradient parameter itself (a Function's backward: as one of its items)?"""
    items = value.elts if backward and isinstance(value, ast.Tuple) else [value]
    return any(isinstance(v, ast.Name) and v.id == param for v in items) \
        and all(isinstance(v, (ast.Name, ast.Constant)) for v in items)


def _require_only_hook_uses(ctx: FixContext, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
    """The hook now returns the gradient where it may have returned None: every mention of the function must
    hand it to a register call, where torch uses that result (a direct call would ignore it)."""
    names = ctx.names_in(ctx.tree)
    for node in [*(n for n in names.of(fn.name) if isinstance(n.ctx, ast.Load)), *names.attribute(fn.name)]:
        call = ctx.parents.get(node)
        if not (isinstance(call, ast.Call) and node in call.args and isinstance(call.func, ast.Attribute)
                and call.func.attr in _HOOK_REGISTERS):
            raise CannotFix(f"`{fn.name}` is used other than as a hook")


RULE = Rule(
    code="GG108",
    name="hook-writes-gradient",
    summary="A gradient hook writes its gradient argument in place: other branches sharing it get wrong gradients.",
    explanation="""
A tensor hook (`t.register_hook(f)`) and a module's `register_full_backward_pre_hook(f)` receive the
gradient autograd is about to pass on.  torch does not copy it: the backward of `a + b` (a residual, a
sum of losses, token plus position embeddings) hands the *same* tensor to both inputs.  A hook that writes
it in place (`g.clamp_()`, `g.mul_()`, `g[mask] = 0`, `grad_output[0].mul_()`) changes the gradient of the
other branch too when autograd runs that branch after the hook (the branch made earlier in the forward),
and nothing raises.  torch's docs say a hook must not modify its argument.

A custom `torch.autograd.Function`'s `backward(ctx, grad)` is handed the gradient the same way: a write to
`grad` there changes the other terms of a sum the Function's output is in, or the caller's own tensor when it
was given as `grad_outputs` to `autograd.grad` (reused for the next batch, it is now the written one).

A forward hook (`m.register_forward_hook(f)`) is handed the module's output itself.  When that output is a view
of a parameter (a module that returns `self.table[:n]`, `self.weight.t()` or an `einops.repeat` of it), a write
to it under `torch.no_grad()` changes the parameter: every later forward and its gradients use the written
values, without an error.
""",
    fix_advice="""
Return the new gradient instead of writing it: `lambda g: g.clamp(-c, c)`, `return (grad_output[0] * s,)`.
""",
    default_severity=Severity.WARNING,
    check=check,
    fix=fix,
    when_wrong="""
Where the gradient a hook or a Function's backward gets is not shared (a parameter's, or an op's fresh
output), the write happens to do what a returned gradient would; it is still flagged, as that depends on
torch's internals.  When the gradient is an expanded tensor (from `.sum()`), torch raises instead.
""",
    invalid=(
        Example(
            """
import torch
w = torch.randn(3, requires_grad=True)
h = w * 2
branch = h.exp()
branch.register_hook(lambda g: g.clamp_(max=0.5))   # GG108
((h + branch) ** 2).sum().backward()                  # h's own path is clamped too
""",
            raises=None,
        ),
    ),
    valid=(
        Example(
            """
import torch
w = torch.randn(3, requires_grad=True)
h = w * 2
branch = h.exp()
branch.register_hook(lambda g: g.clamp(max=0.5))
((h + branch) ** 2).sum().backward()
"""
        ),
    ),
)
