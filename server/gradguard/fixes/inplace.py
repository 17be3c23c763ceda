"""Building blocks of the in-place rules' fixes (GG001-GG005, GG105-GG107), from the ``Mutation`` a finding
carries.  Each rule's own file picks among them (and adds what only it needs); each returns a ``Fix`` or
raises ``CannotFix``:

- **rebind** (``RebindRewrite``) -- write out of place and rebind the name: ``x = x + y``, ``x = x.add(y)``,
  ``b = torch.mul(a, s)`` for ``out=b``, or ``x = x.clone()`` before a write through a view of ``x``.
  Safe when no other name, container, attribute or caller can see the written memory afterwards
  (``InPlaceWrite.sharing``); unsafe when only containers/attributes/the caller could; none when a view of the
  memory is read later (the rebinding would drop a write the program relies on).
- **no_grad** -- a parameter update or reset (``is_parameter_update``): ``with torch.no_grad():`` around it.
- **inplace=False** / ``F.relu_`` -> ``F.relu`` at a call (``inplace_false``).

A leaf written as part of a computation keeps its name and has the code after the write read a copy
(``copies.py``).
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from ..diagnostics import Fix
from ..inference.scopes import bound_names
from ..inference.sharing import Report
from ..statements import chain_base
from .context import FUNCTIONS, CannotFix, FixContext
from .edits import Rewrite
from .moves import mutation_in
from .writes import (InPlaceWrite, assign, attribute_base, aug_to_binop, code, cst_mod, out_of_place, root_name, short,
                     starts_after, without_keyword)

if TYPE_CHECKING:  # pragma: no cover
    import libcst as cst

    from ..inference.events import Finding, Mutation


def mutation_of(finding: Finding) -> Mutation:
    mutation = mutation_in(finding)
    if mutation.in_container:
        raise CannotFix("the tensor is an element of a Python list or dict; the rewrites name tensors, not elements")
    return mutation


# ============================================================================ rebinding
class RebindRewrite:
    """Rewrite the write out of place and rebind the name it writes through."""

    def __init__(self, ctx: FixContext, write: InPlaceWrite, enclosing: bool = False):
        self.ctx, self.write = ctx, write
        name, direct = root_name(write.target)
        if write.kind == "functional" and name is None:
            # `F.relu(self.fc(x), inplace=True)`: the input is a temporary nobody else sees
            if not is_temporary(write.target):
                raise CannotFix("the input of the in-place function is not a local name")
        elif name is None:
            raise CannotFix("the written tensor is not a local name")
        self.local = name is None or _binds_locally(ctx, ctx.scope_of(write.stmt), name)
        if not self.local and not enclosing:  # (enclosing: the caller declares it, ``rebound_in_closure``)
            # `buf` of an enclosing function or the module: a binding here makes a local the enclosing code never sees
            raise CannotFix(f"`{name}` belongs to an enclosing scope; binding it here would not reach it")
        self.name, self.direct = name, direct
        self.report: Report = write.sharing(ctx, name) if name else Report("")

    def rewrite(self) -> tuple[Rewrite, str]:
        """The edit and a short description; CannotFix when this write has no rebinding form."""
        ctx, w, cst, rw, name = self.ctx, self.write, cst_mod(), Rewrite(self.ctx), self.name

        def replaced(old: cst.CSTNode, new: cst.CSTNode) -> tuple[Rewrite, str]:
            rw.replace_node(old, new)
            return rw, code(new)

        if w.kind == "functional" or w.kind == "method" and self.direct:
            new_value = not_inplace(ctx, w)  # (a method's out_of_place)
            if not w.value_use:
                if not self.direct:
                    raise CannotFix("the in-place function writes a view and its result is dropped")
                return replaced(ctx.cst(w.stmt), assign(cst.Name(name), new_value))
            stmt = w.stmt
            if name and not rebinds(stmt, name) and w.value_read_after(ctx, name):
                if w.kind == "method" and isinstance(stmt, ast.Assign) and stmt.value is w.call:
                    # `s = x.exp_()` and x is read later: `s = x = x.exp()`
                    small = ctx.cst(stmt)
                    targets = [*small.targets, cst.AssignTarget(target=cst.Name(name))]
                    return replaced(small, small.with_changes(targets=targets, value=new_value))
                raise CannotFix(f"`{name}` is read later and would miss the write")
            return replaced(ctx.cst(w.call), new_value)
        if not self.direct:
            # a write through a view of `name`: copy `name` first, then write the copy (not of a list a caller passed)
            moments = (w.moment, *w.moment.elsewhere) if w.moment is not None and w.depth == -1 else ()
            if any((name, "holder") in run.held() for moment in moments for run in moment.runs()):  # (any analysis's)
                raise CannotFix(f"`{name}` may hold the written tensor in a container: copying it would not copy it")
            rw.insert_before(w.stmt, f"{name} = {name}.clone()")
            return rw, f"{name} = {name}.clone()"
        if w.kind == "augassign":
            aug = ctx.cst(w.stmt)
            return replaced(aug, assign(aug.target.deep_clone(), aug_to_binop(aug), like=aug))
        if w.kind == "out":
            if w.value_use:
                raise CannotFix("the result of the out= call is used")
            return replaced(ctx.cst(w.stmt), assign(cst.Name(name), without_keyword(ctx.cst(w.call), "out")))
        raise CannotFix(f"no rebinding for {w.kind}")


def _binds_locally(ctx: FixContext, scope: ast.AST, name: str) -> bool:
    """Is ``name`` a local of ``scope`` (a parameter, or bound in it), or ``scope`` the module or a class body?"""
    # declared global or nonlocal: a binding here reaches the enclosing name (the alias report weighs that)
    return not isinstance(scope, FUNCTIONS) or name in ctx.once("locals", scope, lambda: bound_names(scope)) \
        or name in ctx.names_in(scope).declared


def is_temporary(expr: ast.expr) -> bool:
    """A call or arithmetic result that no name holds (``F.relu(self.fc(x))``)."""
    return isinstance(chain_base(expr), (ast.Call, ast.BinOp, ast.UnaryOp))


def rebinds(stmt: ast.stmt, name: str) -> bool:
    return isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets)


def not_inplace(ctx: FixContext, write: InPlaceWrite) -> cst.Call:
    """The write's call out of place: ``x.add_(y)`` -> ``x.add(y)``; ``F.relu_(x)`` -> ``F.relu(x)``;
    ``F.relu(x, inplace=True)`` -> ``F.relu(x, inplace=False)``."""
    if write.kind == "method":
        return out_of_place(ctx, write.call)
    cst, call_ast, call = cst_mod(), write.call, ctx.cst(write.call)
    func = call.func
    name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
    if name.endswith("_"):
        q = ctx.qual(call_ast.func) or ""
        twin = name[:-1]
        if isinstance(func, cst.Attribute):
            return call.with_changes(func=func.with_changes(attr=cst.Name(twin)))
        if q.startswith("torch.") and isinstance(func, cst.Name):
            raise CannotFix(f"`{name}` was imported by name; its twin `{twin}` may not be")
        raise CannotFix("unrecognised in-place function")
    return inplace_false(call)


def inplace_false(call: cst.Call, read_flag: bool = False) -> cst.Call:
    """Set an ``inplace=True`` keyword (or ``nn.ReLU(True)``) to False; ``read_flag``: also a flag read from a variable."""
    cst = cst_mod()
    args = list(call.args)
    for i, arg in enumerate(args):
        if arg.keyword is not None and arg.keyword.value == "inplace":
            if not (read_flag or isinstance(arg.value, cst.Name) and arg.value.value == "True"):
                raise CannotFix("inplace= is not the literal True")
            args[i] = arg.with_changes(value=cst.Name("False"))
            return call.with_changes(args=args)
    positional = [i for i, a in enumerate(args) if a.keyword is None and not a.star]
    trues = [i for i in positional if isinstance(args[i].value, cst.Name) and args[i].value.value == "True"]
    if len(trues) == 1:
        args[trues[0]] = args[trues[0]].with_changes(value=cst.Name("False"))
        return call.with_changes(args=args)
    raise CannotFix("no inplace=True to turn off")


# ============================================================================ no_grad
def no_grad_wrap(ctx: FixContext, stmt: ast.stmt) -> tuple[Rewrite, str]:
    rw = Rewrite(ctx)
    torch = rw.torch_module(stmt)
    rw.wrap_in_with(stmt, f"{torch}.no_grad()")
    return rw, f"with {torch}.no_grad():"


# ============================================================================ small helpers for the rules
def fix_or_none(build) -> Fix | None:
    try:
        return build()
    except CannotFix:
        return None


def is_parameter_update(ctx: FixContext, mutation: Mutation, write: InPlaceWrite) -> bool:
    """Is this leaf write an optimizer-style update or a reset, rather than part of a computation?"""
    stmt = write.stmt
    fn, scope = ctx.function_of(stmt), ctx.scope_of(stmt)
    while isinstance(scope, FUNCTIONS) and isinstance(ctx.scope_of(scope), FUNCTIONS):
        scope = ctx.scope_of(scope)  # a closure's write: the loops around it in the functions it is nested in count
    if any(ctx.inside(n, stmt) for n in ctx.names_in(scope).attribute("grad") if stmt.lineno <= n.lineno <= stmt.end_lineno):
        return True
    origin = mutation.target.root().origin
    for loop in ctx.loops_around(stmt, scope):
        if origin is not None and ctx.inside(origin, loop):
            continue  # a leaf made afresh in each iteration is not a parameter being trained
        if ctx.once("calls backward or step", loop, lambda loop=loop: any(
                isinstance(call := ctx.parents.get(n), ast.Call) and call.func is n and ctx.inside(n, loop)
                for attr in ("backward", "step") for n in ctx.names_in(scope).attribute(attr))):
            return True  # a leaf that outlives the training loop: a parameter, updated or reset
    path = [*mutation.call_path(), *(mutation.moment.call_sites() if mutation.moment else ())]  # (and a helper's run's)
    if any(isinstance(a, FUNCTIONS) and a.name == "forward" for node in (stmt, *path) for a in ctx.ancestors(node)):
        return False  # written while a module computes its output (in forward, or a function forward calls)
    root = mutation.target.root()
    if root.param:
        return True
    # An attribute of unknown make is taken for a parameter (`model.fc.weight`); one the analyser saw made by a
    # factory (`self.x = torch.randn(..., requires_grad=True)`) is a leaf like a local one, and the function
    # that writes it and calls backward after is computing with it.
    made_here = root.origin is not None and fn is not None and _backward_after(ctx, fn, stmt)
    return attribute_base(write.target) is not None and not made_here


def _backward_after(ctx: FixContext, fn: ast.AST, stmt: ast.stmt) -> bool:
    """Does ``fn`` call ``.backward()`` (or ``torch.autograd.backward/grad``) after ``stmt``, in its own body?"""
    names = ctx.names_in(fn)  # the functions a call may name: `x.backward`, `torch.autograd.grad`, an imported name
    for func in (*names.attribute("backward"), *names.attribute("grad"), *(n for i in ctx.imports for n in names.of(i))):
        if not (isinstance(node := ctx.parents.get(func), ast.Call) and node.func is func and starts_after(node, stmt)
                and not ctx.inside(node, stmt) and ctx.scope_of(node) is fn):
            continue
        if isinstance(func, ast.Attribute) and func.attr == "backward" \
                or (ctx.qual(func) or "") in ("torch.autograd.backward", "torch.autograd.grad"):
            return True
    return False


def rebind_fix(rebind: RebindRewrite, what: str) -> Fix | None:
    """Safe when nothing else sees the memory, unsafe when only containers/attributes/the caller do."""
    report = rebind.report
    if not (report.clean or report.only_holders):
        return None
    w = rebind.write
    if not report.clean and rebind.name and not w.value_use and not w.value_read_after(rebind.ctx, rebind.name):
        # `dst = torch.add(a, b)` for a parameter nothing here reads again: the new binding goes nowhere, and the
        # caller (or holder) that saw the write loses it -- that drops the write, it does not repair it
        return None
    if not report.clean and _loop_variable_unread(rebind.ctx, w.stmt, rebind.name):
        return None  # `for row in self.t: row = row.mul(2)`: nothing reads the new `row`; self.t loses every write
    built = fix_or_none(rebind.rewrite)
    if built is None:
        return None
    rw, desc = built
    return rw.fix(f"{what}: `{short(desc)}`" + ("" if report.clean else f" (unsafe: {report.reason()})"),
                  safe=report.clean)


def _loop_variable_unread(ctx: FixContext, stmt: ast.stmt, name: str) -> bool:
    """Is ``name`` the target of a ``for`` loop around ``stmt`` that reads it nowhere after ``stmt`` in its body?"""
    uses = ctx.names_in(ctx.scope_of(stmt)).of(name)
    for loop in ctx.loops_around(stmt):
        if isinstance(loop, (ast.For, ast.AsyncFor)) and any(ctx.inside(n, loop.target) for n in uses):
            return not any(isinstance(n.ctx, ast.Load) and starts_after(n, stmt) and not ctx.inside(n, stmt)
                           and any(ctx.inside(n, body_stmt) for body_stmt in loop.body) for n in uses)
    return False
