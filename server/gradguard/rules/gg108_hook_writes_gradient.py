"""GG108 hook-writes-gradient: a gradient hook writes the gradient it is given in place, which other branches
of the graph may share: their gradients change silently."""

from __future__ import annotations

from ..diagnostics import Severity
from ..fixes.hooks import fix_hook_write
from ..inference.events import Finding, HookWrite
from ..messages import Message
from .base import Example, Rule


def check(write: HookWrite):
    if not isinstance(write, HookWrite):
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


def fix(ctx, finding):
    """Write out of place and return the new gradient (a tuple for a pre-hook)."""
    return fix_hook_write(ctx, finding)


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
""",
    fix_advice="""
Return the new gradient instead of writing it: `lambda g: g.clamp(-c, c)`, `return (grad_output[0] * s,)`.
""",
    default_severity=Severity.WARNING,
    check=check,
    fix=fix,
    when_wrong="""
Where the gradient a hook gets is not shared (a parameter's, or an op's fresh output), the write happens to
do what a returned gradient would; it is still flagged, as that depends on torch's internals.  When the
gradient is an expanded tensor (from `.sum()`), torch raises instead.
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
