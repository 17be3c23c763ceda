"""GG110 discarded-update: an out-of-place op on a gradient (or a ``.data``) whose result nothing keeps."""

from __future__ import annotations

from ..diagnostics import Fix, Severity, TextEdit
from ..fixes.context import CannotFix, FixContext
from ..inference.events import DiscardedUpdate, Finding
from ..messages import Message
from .base import Example, Rule


def check(event):
    if not isinstance(event, DiscardedUpdate):
        return
    effect = ("so the update that reads it (an optimizer step) uses it unchanged" if event.gradient
              else "so it keeps its values")
    yield Finding(
        "GG110",
        event.node,
        Message.format(
            "`.{method}()` returns a new tensor, and this statement keeps none: {what} is not changed, {effect} "
            "(silently). `.{twin}()` changes it in place.", method=event.method, what=event.what, effect=effect,
            twin=event.twin),
        data={"twin": event.twin},
    )


# ---- The fix --------------------------------------------------------------------------------------
def fix(ctx: FixContext, finding: Finding) -> Fix:
    """Call the in-place twin: ``p.grad.clamp(-1, 1)`` becomes ``p.grad.clamp_(-1, 1)``.  The receiver is a
    gradient, a ``.data`` or a parameter under no_grad, which autograd lets change in place."""
    func = getattr(finding.node, "func", None)
    twin = finding.data.get("twin")
    if func is None or not hasattr(func, "attr") or twin is None:
        raise CannotFix("not a method call")
    line, column, end_line, end_column = ctx.char_range(func)
    start = end_column - len(func.attr)
    return Fix(f"Change it in place: `.{twin}()`", True,
               (TextEdit(end_line, start + 1, end_line, end_column + 1, twin),))


RULE = Rule(
    code="GG110",
    name="discarded-update",
    summary="An out-of-place op on a gradient or a `.data` is a statement of its own: its result is dropped and "
            "the tensor is unchanged.",
    explanation="""
`p.grad.data.clamp(-1, 1)` written as a statement of its own computes a clipped copy of the gradient and
throws it away: `clamp` is out of place, so `p.grad` keeps its values and the optimizer step that follows
uses the unclipped gradient.  Nothing raises.  The same holds for any out-of-place method that has an in-place
twin (`clamp`/`clamp_`, `mul`/`mul_`, `add`/`add_`, `div`/`div_`...) called on a gradient, on a tensor's `.data`, or on
a parameter under `torch.no_grad()`: those are updates, and as statements they update nothing.
""",
    fix_advice="Call the in-place twin (`p.grad.data.clamp_(-1, 1)`), or keep the result (`p.grad = p.grad.clamp(-1, 1)`).",
    default_severity=Severity.WARNING,
    check=check,
    fix=fix,
    when_wrong="""
Only gradients, `.data` and parameters under no_grad are considered: there the statement can only have been meant
as an update.  Elsewhere an unused result is dead code this rule leaves to general linters.
""",
    invalid=(
        Example(
            """
import torch
w = torch.nn.Parameter(torch.randn(3))
(w * 10).sum().backward()
w.grad.clamp(-1, 1)                 # GG110
"""
        ),
    ),
    valid=(
        Example(
            """
import torch
w = torch.nn.Parameter(torch.randn(3))
(w * 10).sum().backward()
w.grad.clamp_(-1, 1)
"""
        ),
    ),
)
