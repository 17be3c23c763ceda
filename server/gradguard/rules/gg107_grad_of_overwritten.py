"""GG107 grad-of-overwritten: an in-place write to a tensor whose own gradient is asked for (retain_grad, a
hook, ``autograd.grad(inputs=...)``): torch answers for the value after the write, without an error."""

from __future__ import annotations

import ast

from ..diagnostics import Fix, Severity
from ..fixes.context import CannotFix, FixContext
from ..fixes.copies import copy_for_callers, copy_for_closure, copy_start, written_copy
from ..fixes.inplace import fix_or_none, mutation_of, starts_after
from ..fixes.writes import InPlaceWrite, root_name, short
from ..inference.events import Finding, Mutation
from ..messages import Message
from .base import Example, Rule

_RELATED = {
    "retain_grad": "`retain_grad()` is called here; torch moves it to the value after the write, so `.grad` is "
                   "the gradient of the written value",
    "register_hook": "the hook is registered here, after the write: it sees only the gradient of the written "
                     "value, not of the uses of the old one",
    "autograd.grad": "the gradient is asked for here: it is the written value's, and leaves out the uses of "
                     "the old one",
}


def check(mutation: Mutation):
    if not isinstance(mutation, Mutation) or not mutation.asks:
        return
    ask = mutation.asks[0]
    if ask.how == "retain_grad":
        text = ("{how} changes {label} after `retain_grad()` on {ask}: torch moves the retained gradient to the "
                "new value, so `.grad` is the gradient of the written tensor, not of the one retained (no error). "
                "Write out of place (bind the result to a new name), or retain the gradient of a clone.")
    else:
        text = ("{how} changes {label} after it was used, and its gradient is asked for on {ask}: torch answers "
                "for the written value only, leaving out the gradient of the uses before the write (no error). "
                "Write out of place (bind the result to a new name) so the gradient covers every use.")
    yield Finding(
        "GG107",
        mutation.node,
        Message.format(text, how=mutation.how, label=mutation.target.label, ask=ask.node),
        certain=mutation.target.requires_grad.name == "YES",
        related=[(a.node, _RELATED[a.how]) for a in mutation.asks],
        mutation=mutation,
    )


# ---- The fix --------------------------------------------------------------------------------------
def fix(ctx: FixContext, finding: Finding) -> Fix:
    """GG107: the tensor whose own gradient is asked for keeps its name and its value; the write becomes an
    out-of-place op bound to a new name, which the later uses read (``h_new = h.mul(mask)``).  The asks
    (``h.grad``, ``inputs=[h]``, a helper that registers a hook on ``h``) keep reading ``h``, so autograd
    answers for the tensor they name, over every use.  Unsafe when something else holds the tensor: it then
    keeps the old values."""
    mutation = mutation_of(finding)
    write = InPlaceWrite.of_mutation(ctx, mutation)
    name, direct = root_name(write.target)
    if name is None or not direct or write.kind not in ("augassign", "method") or write.value_use:
        raise CannotFix("not a whole-tensor write statement on a local name")
    stmt = write.stmt
    scope = ctx.scope_of(stmt)
    if ctx.loops_around(stmt, scope):
        raise CannotFix("the write is in a loop: earlier iterations would read the new name")
    asking = [a.node for a in mutation.asks]
    # The new name starts at the write, or before the `if`/`try`/`with` around it when reads follow that.
    anchor, reads = copy_start(ctx, scope, stmt, stmt, name,
                               lambda read: ctx.inside(read, stmt) or _asks_through(ctx, read, asking))
    if not any(starts_after(r, stmt) for r in reads):
        if not isinstance(ctx.function_of(stmt), ast.FunctionDef):
            raise CannotFix(f"`{name}` is not read after the write")
        # a helper's parameter, read by its callers: the helper returns a written copy they read instead; or a
        # closure's variable, read after its call: the closure writes a copy bound before the call
        keep, kept = (lambda read: _asks_through(ctx, read, asking),
                      f"the tensor keeps its old values, which the asks for `{name}` see")
        copied = fix_or_none(lambda: copy_for_callers(ctx, write, keep, kept))
        return copied or copy_for_closure(ctx, write, keep, kept)
    report = write.sharing(ctx, name)
    if not report.only_holders:
        raise CannotFix(report.reason())
    rw, desc, _ = written_copy(ctx, write, scope, name, anchor, reads)
    title = f"Write out of place into a new name, and keep `{name}` for its gradient: `{short(desc)}`"
    if report.clean:
        return rw.fix(title, safe=True)
    return rw.fix(f"{title} (unsafe: {report.reason()}, and now sees the unwritten values)", safe=False)


def _asks_through(ctx: FixContext, read: ast.Name, asking: list[ast.AST]) -> bool:
    """Is ``read`` where the gradient is asked for: inside the ask (``inputs=[h]``), or handed to the function
    that asks (``monitor.watch(h)`` where ``watch`` registers the hook)?"""
    if any(ctx.inside(read, a) for a in asking):
        return True
    call = ctx.parents.get(read)
    if not (isinstance(call, ast.Call) and read in call.args):
        return False
    callee = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", None)
    return any((fn := ctx.function_of(a)) is not None and fn.name == callee for a in asking)


RULE = Rule(
    code="GG107",
    name="grad-of-overwritten",
    summary="An in-place write to a tensor whose own gradient is asked for: torch silently answers for the new value.",
    explanation="""
autograd gives the gradient of one *version* of a tensor.  After `t.retain_grad()`, an in-place write
(`t.mul_(s)`, `t[mask] = 0`, `t.clamp_(min=0)`) moves the retained gradient to the written value: `t.grad`
is then the gradient of the new values, not of those `retain_grad()` was called on.  A hook registered
with `t.register_hook(f)` after the write, and `torch.autograd.grad(loss, inputs=[t])` after it, see only
the written version too: the gradient of every use of the old value is left out.  Nothing raises.
""",
    fix_advice="""
Write out of place (`t = t * s`, `t = t.masked_fill(mask, 0)`) and ask for the gradient of the tensor you
mean; or ask for it on a `clone()` taken before the write.
""",
    default_severity=Severity.WARNING,
    check=check,
    fix=fix,
    when_wrong="""
A write that does not change the derivative (`t.add_(c)` with no use of `t` before it) leaves the same
gradient; it is still flagged, since which version is meant is not visible.
""",
    invalid=(
        Example(
            """
import torch
w = torch.randn(3, requires_grad=True)
h = w * 2
h.retain_grad()
h.mul_(3)                           # GG107
(h * h).sum().backward()            # h.grad is the gradient of 3 * h
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
h.retain_grad()
s = h * 3
(s * s).sum().backward()
"""
        ),
    ),
)
