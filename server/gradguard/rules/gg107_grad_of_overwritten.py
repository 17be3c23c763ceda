"""GG107 grad-of-overwritten: an in-place write to a tensor whose own gradient is asked for (retain_grad, a
hook, ``autograd.grad(inputs=...)``): torch answers for the value after the write, without an error."""

from __future__ import annotations

from ..diagnostics import Severity
from ..fixes import inplace as F
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
        data={"mutation": mutation},
    )


def fix(ctx, finding):
    """Write out of place into a new name; the tensor whose gradient is asked for keeps its values."""
    return F.fix_asked_write(ctx, finding)


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
