"""GG106 out-requires-grad: a call writes through ``out=`` while an input or the ``out=`` tensor requires grad."""

from __future__ import annotations

import ast

from ..diagnostics import Fix, Severity
from ..fixes.callers import through_callers
from ..fixes.context import CannotFix, FixContext
from ..fixes.inplace import RebindRewrite, is_parameter_update, mutation_of, no_grad_wrap, rebind_fix
from ..fixes.edits import Rewrite
from ..fixes.writes import InPlaceWrite, assign, code, param_escape, short, without_keyword

from ..inference.events import Finding, Mutation
from ..inference.values import Grad
from .base import Example, Rule
from .common import call_path_related

MESSAGE = ("functions with out=... arguments don't support automatic differentiation, "
           "but one of the arguments requires grad.")


def check(mutation: Mutation):
    if not isinstance(mutation, Mutation) or not mutation.out_argument or not mutation.grad_enabled:
        return
    target = mutation.target
    grad = max(mutation.value_grad, target.requires_grad)
    if grad == Grad.NO:
        return
    which = "an input requires" if target.requires_grad != Grad.YES else "the `out=` tensor requires"
    if target.requires_grad == Grad.YES and mutation.value_grad == Grad.YES:
        which = "an input and the `out=` tensor require"
    name = _called_name(mutation.node)
    origin = [] if target.param or target.origin is None else [(target.origin, "the `out=` tensor is made here")]
    yield Finding(
        "GG106",
        mutation.node,
        f'{mutation.how} while {which} grad; torch raises here: "{name}(): {MESSAGE}" '
        f"Bind the result instead (`{_out_source(mutation.node)} = {ast.unparse(mutation.node.func)}(...)` without `out=`), "
        "or, for a parameter update, make the call under `torch.no_grad()`.",
        certain=grad == Grad.YES and mutation.grad_mode_known,
        related=[*origin, *call_path_related(mutation)],
        mutation=mutation,
    )


def _called_name(node: ast.AST) -> str:
    """The name torch puts in front of its message: the function or method called (``torch.clamp`` -> ``clamp``)."""
    func = node.func if isinstance(node, ast.Call) else None
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else "<op>"


def _out_source(node: ast.AST) -> str:
    out = next((k.value for k in getattr(node, "keywords", ()) if k.arg == "out"), None)
    return ast.unparse(out) if out is not None else "result"


# ---- The fix --------------------------------------------------------------------------------------
def fix(ctx: FixContext, finding: Finding) -> Fix | None:
    """GG106: a parameter update or reset goes under ``torch.no_grad()``; a computation drops ``out=`` and binds
    the result (``buf = torch.mul(h, s)``), which autograd records.  Never an ``out=`` into a copy: that call
    would raise the same error."""
    mutation = mutation_of(finding)
    try:
        write = InPlaceWrite.of(ctx, mutation.node)  # torch refuses the call itself, wherever the tensors were made
    except KeyError:  # the engine's own call: a lambda's body that spreads the caller's `**kwargs`
        write = _lambda_called(ctx, mutation)
    write.moment = mutation.moment  # its frame is the innermost: depth -1
    if write.kind != "out":
        raise CannotFix("the write is not an out= call")
    leaf = mutation.target.requires_grad != Grad.NO and mutation.target.leaf and mutation.target.base is None
    if leaf and (mutation.value_grad == Grad.NO or is_parameter_update(ctx, mutation, write)):
        # plain values into a leaf (an initialisation), or an optimizer-style update
        rw, desc = no_grad_wrap(ctx, write.stmt)
        return rw.fix(f"Update under `{desc}`", safe=True)
    if write.call is not mutation.node:
        raise CannotFix("a computation in a lambda's call")
    try:
        rebind = RebindRewrite(ctx, write)
        fix = rebind_fix(rebind, "Compute out of place")
    except CannotFix:
        return _attribute_bound(ctx, mutation, write)
    # A helper's parameter, a plain tensor (no leaf of autograd's, no view) that only its caller holds: the helper
    # returns the result, and each call rebinds what it passed
    report, plain = rebind.report, mutation.target.requires_grad == Grad.NO and mutation.target.base is None
    if fix is None and plain and not (report.aliases_read_after or report.holders_read_after) \
            and report.escapes == [param_escape(rebind.name)]:
        rw, desc = rebind.rewrite()
        return through_callers(ctx, rw, write.stmt, rebind.name, f"Compute out of place: `{short(desc)}`", True,
                               moment=write.moment)
    return fix


def _lambda_called(ctx: FixContext, mutation: Mutation) -> InPlaceWrite:
    """The write as the call that runs it: ``op(init, out=logits)`` where ``op = lambda t, **kw: torch.exp(t, **kw)``,
    a lambda (its whole body the ``out=`` call) the run entered at that call, a statement of its own, which hands it
    the ``out=`` tensor.  Under ``torch.no_grad()`` there, the lambda's call runs as the bare call would."""
    site = mutation.entry()
    entered = mutation.moment.entered_at(site) if mutation.moment is not None else None
    out = next((k.value for k in getattr(mutation.node, "keywords", ()) if k.arg == "out"), None)
    stmt = ctx.statement_of(site)
    if entered is None or not isinstance(entered[1], ast.Lambda) or out is None or not ctx.inside(out, site) \
            or not (isinstance(stmt, ast.Expr) and stmt.value is site):
        raise CannotFix("the write is in a call the engine wrote out, not a lambda's statement handing it `out=`")
    return InPlaceWrite(stmt, "out", out, site)


def _attribute_bound(ctx: FixContext, mutation: Mutation, write: InPlaceWrite) -> Fix:
    """``torch.cat(xs, out=self.joined)`` -> ``self.joined = torch.cat(xs)``: the attribute holds the result, with
    its graph, where the run shows nothing but that object holding the ``out=`` tensor's memory (no other name, no
    escape but the stores into that attribute).  Unsafe: the attribute gets a new tensor, and a registered buffer then carries a graph."""
    target = write.target
    if write.value_use or not (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)):
        raise CannotFix("the out= tensor is not an attribute of a name")
    if mutation.target.param or mutation.target.base is not None or mutation.target.requires_grad != Grad.NO:
        raise CannotFix("the out= tensor is a parameter, a view or requires grad")
    moment = write.moment
    holders = moment.held_in_any_run() if moment is not None else []
    if moment is None or holders != [(target.value.id, "holder")] or not all(
            isinstance(site, ast.Assign) and all(isinstance(t, ast.Attribute) and t.attr == target.attr
                                                 for t in site.targets) for site in moment.escape_sites()):
        raise CannotFix("something besides the object holds the out= tensor")  # (its store there escapes)
    rw = Rewrite(ctx)
    new = assign(ctx.cst(target).deep_clone(), without_keyword(ctx.cst(write.call), "out"))
    rw.replace_node(ctx.cst(write.stmt), new)
    return rw.fix(f"Compute out of place: `{short(code(new))}` (unsafe: `{ctx.source(target)}` gets a new tensor, "
                  "with its graph)", safe=False)


RULE = Rule(
    code="GG106",
    name="out-requires-grad",
    summary="A call writes its result through `out=` while an input or the `out=` tensor requires grad.",
    explanation="""
Functions called with `out=` are not differentiable: autograd cannot record a write into memory the caller
chose.  So, with grad mode on, torch refuses the call itself when any of its arguments requires grad (an
input computed from parameters, a parameter, or the `out=` tensor):
`RuntimeError: clamp(): functions with out=... arguments don't support automatic differentiation, but one of
the arguments requires grad.`  Nothing is written.  Inside `torch.no_grad()` the same call is allowed (and is a
common way to update a parameter in place, `torch.clamp(p, -c, c, out=p)`).
""",
    fix_advice="""
For a computation, drop `out=` and bind the result: `buf = torch.mul(h, scale)` instead of
`torch.mul(h, scale, out=buf)`; autograd then records the op.  For a parameter update or reset, put the call
under `with torch.no_grad():`.
""",
    default_severity=Severity.ERROR,
    check=check,
    fix=fix,
    when_wrong="""
Grad mode when a function starts is its caller's, and whether an argument requires grad may come from a caller:
in a helper that no analysed code calls with a tensor that requires grad, the finding is a warning.
""",
    invalid=(
        Example(
            """
import torch
w = torch.randn(3, requires_grad=True)
h = w * 2
buf = torch.empty(3)
torch.mul(h, 0.5, out=buf)          # GG106
""",
            raises="mul(): " + MESSAGE,
        ),
        Example(
            """
import torch
p = torch.nn.Parameter(torch.randn(3))
torch.clamp(p, -0.1, 0.1, out=p)    # GG106
""",
            raises="clamp(): " + MESSAGE,
        ),
    ),
    valid=(
        Example(
            """
import torch
p = torch.nn.Parameter(torch.randn(3))
with torch.no_grad():
    torch.clamp(p, -0.1, 0.1, out=p)
"""
        ),
        Example(
            """
import torch
w = torch.randn(3, requires_grad=True)
buf = torch.empty(3)
torch.mul(w.detach(), 0.5, out=buf)
"""
        ),
    ),
)
