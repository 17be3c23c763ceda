"""GG105 nograd-view-mutated: a view made under no_grad is modified in place with grad mode on."""

from __future__ import annotations

from ..diagnostics import Severity
from ..fixes import structural as S
from ..inference.events import Finding, Mutation
from ..inference.values import Grad
from .base import Example, Rule
from .common import call_path_related

MESSAGE = "A view was created in no_grad mode and is being modified inplace with grad mode enabled."


def check(mutation: Mutation):
    if not isinstance(mutation, Mutation) or mutation.kind != "write" or not mutation.grad_enabled:
        return
    chain = list(mutation.target.view_chain())
    of_grad_tensor = any(t.nograd_view for t in chain)
    # A no_grad view of a tensor that does not require grad is refused only a value that requires grad.
    if not of_grad_tensor and not (any(t.nograd_plain_view for t in chain) and mutation.value_grad > Grad.NO):
        return
    origin = [(mutation.target.origin, "the view is made under no_grad here")] if mutation.target.origin else []
    certain = mutation.grad_mode_known and (of_grad_tensor or mutation.value_grad == Grad.YES)
    yield Finding(
        "GG105",
        mutation.node,
        f'{mutation.how} modifies a view that was made under `torch.no_grad()`; torch raises here: "{MESSAGE}" '
        "Make the view with grad mode on, or write under `torch.no_grad()` too, or clone it.",
        certain=certain,
        related=[*origin, *call_path_related(mutation)],
        data={"mutation": mutation},
    )


def fix(ctx, finding):
    """Make the view with grad mode on (and write out of place), else write under no_grad too."""
    return S.fix_nograd_view(ctx, finding)


RULE = Rule(
    code="GG105",
    name="nograd-view-mutated",
    summary="A view made under `torch.no_grad()` is modified in place with grad on (of a tensor that requires grad, "
            "or with a value that does).",
    explanation="""
A view created while grad mode is off (`with torch.no_grad(): v = x[0]`, `chunk`/`unbind` inside no_grad,
or returned by a function decorated `@torch.no_grad()`) has no autograd history linking it to its base.
Writing to it later with grad mode on would leave the base's graph wrong, so torch raises: `A view was
created in no_grad mode and is being modified inplace with grad mode enabled.`  The same holds for a no_grad
view of a tensor that does not require grad (a buffer slot, a memory bank row) when the value written into it
does: the write would have to give the view a history it cannot have.
""",
    fix_advice="Make the view with grad mode on, do the write under `torch.no_grad()` as well, or `clone()` the view. "
               "For a buffer written with a value that requires grad, write under `torch.no_grad()` (the buffer "
               "stores values, not a graph).",
    default_severity=Severity.ERROR,
    check=check,
    fix=fix,
    when_wrong="""
A view is tracked when the tensor it is a view of is known: made in the same function, a module's parameter,
or a buffer registered with `register_buffer`. A view of a tensor from a caller or another file is not, and a
write whose grad mode or value depends on a caller is reported as a warning.
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
        Example(
            """
import torch
bank = torch.zeros(4, 3)
with torch.no_grad():
    slot = bank[0]
w = torch.randn(3, requires_grad=True)
slot.copy_(w * 2)                   # GG105
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
