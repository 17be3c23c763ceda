"""GG105 nograd-view-mutated: a view made under no_grad is modified in place with grad mode on."""

from __future__ import annotations

from ..diagnostics import Severity
from ..inference.events import Finding, Mutation
from .base import Example, Rule

MESSAGE = "A view was created in no_grad mode and is being modified inplace with grad mode enabled."


def check(mutation: Mutation):
    if not isinstance(mutation, Mutation) or mutation.kind != "write" or not mutation.grad_enabled:
        return
    if not any(t.nograd_view for t in mutation.target.view_chain()):
        return
    via = f" inside {mutation.via}" if mutation.via else ""
    yield Finding(
        "GG105",
        mutation.node,
        f'{mutation.how}{via} modifies a view that was made under `torch.no_grad()`; torch raises here: "{MESSAGE}" '
        "Make the view with grad mode on, or write under `torch.no_grad()` too, or clone it.",
        certain=mutation.grad_mode_known,
        related=[(mutation.target.origin, "the view is made under no_grad here")] if mutation.target.origin else [],
        data={"mutation": mutation},
    )


def fix(ctx, finding):
    """Make the view with grad mode on (and write out of place), else write under no_grad too."""
    from ..fixes import structural as S

    return S.fix_nograd_view(ctx, finding)


RULE = Rule(
    code="GG105",
    name="nograd-view-mutated",
    summary="A view made under `torch.no_grad()` of a tensor that requires grad is modified in place with grad on.",
    explanation="""
A view created while grad mode is off (`with torch.no_grad(): v = x[0]`, `chunk`/`unbind` inside no_grad,
or returned by a function decorated `@torch.no_grad()`) has no autograd history linking it to its base.
Writing to it later with grad mode on would leave the base's graph wrong, so torch raises: `A view was
created in no_grad mode and is being modified inplace with grad mode enabled.`
""",
    fix_advice="Make the view with grad mode on, do the write under `torch.no_grad()` as well, or `clone()` the view.",
    default_severity=Severity.ERROR,
    check=check,
    fix=fix,
    when_wrong="""
Only views of tensors that require grad are tracked. torch also raises when a no_grad view of a tensor that does
not require grad is later written with a value that does. That case is missed, because gradguard does not track
whether the written value requires grad.
""",
    invalid=(
        Example(
            """
import torch
x = torch.randn(3, 3, requires_grad=True)
y = x * 2
with torch.no_grad():
    row = y[0]
row.mul_(2)                         # GG105
""",
            raises=MESSAGE,
        ),
    ),
    valid=(
        Example(
            """
import torch
x = torch.randn(3, 3, requires_grad=True)
y = x * 2
with torch.no_grad():
    row = y[0]
    row.mul_(2)
"""
        ),
    ),
)
