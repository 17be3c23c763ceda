"""GG004 multi-view-mutated: an in-place write to an output of unbind/split/chunk/unpacking/iteration."""

from __future__ import annotations

from ..diagnostics import Severity
from ..inference.events import Finding, Mutation
from ..inference.values import Grad
from .base import Example, Rule
from .common import call_path_related

MESSAGE = "Output 0 of Unbind is a view and is being modified inplace."


def check(mutation: Mutation):
    if not isinstance(mutation, Mutation) or mutation.kind != "write":
        return  # optimizer steps, .data writes and graph breaks have rules of their own
    target = mutation.target
    if not mutation.grad_enabled:
        return
    op = next((t.multi_view for t in target.view_chain() if t.multi_view), None)
    if op is None or target.requires_grad == Grad.NO:
        return
    origin = [(target.origin, f"the view comes from `{op.lower()}` here")] if target.origin is not None else []
    yield Finding(
        "GG004",
        mutation.node,
        f"{mutation.how} modifies a view returned by `{op.lower()}` (a function that returns several views of one "
        f'tensor); torch raises here: "Output N of {op} is a view and is being modified inplace". '
        "Rebind out of place or `clone()` the piece first.",
        certain=target.requires_grad == Grad.YES and mutation.grad_mode_known,
        related=[*origin, *call_path_related(mutation)],
        data={"mutation": mutation},
    )


def fix(ctx, finding):
    """Rebind the piece out of place (its sibling pieces are other memory); none when the whole tensor
    is read later and must see the write."""
    from ..fixes import inplace as F

    return F.fix_multi_view_write(ctx, finding)


RULE = Rule(
    code="GG004",
    name="multi-view-mutated",
    summary="In-place write to an output of `unbind`/`split`/`chunk`, tuple unpacking or iteration of a tensor.",
    explanation="""
`unbind`, `split`, `chunk` (and `a, b = t`, `for row in t`, which unbind) return several views of one
tensor.  Autograd cannot rebase a write to one of them, so in grad mode, for a tensor that requires grad,
it raises at once: `RuntimeError: Output 0 of Unbind is a view and is being modified inplace. This view
is the output of a function that returns multiple views...` (`chunk` reports `Split`).  Views of such
outputs (a slice, `.view()`) raise too.
""",
    fix_advice="""
Rebind out of place (`q = q * scale` instead of `q *= scale`), or clone the piece (`a = a.clone()`),
and reassemble with `torch.stack`/`torch.cat` if the whole tensor is needed.
""",
    default_severity=Severity.ERROR,
    check=check,
    fix=fix,
    when_wrong="""
It assumes that `a, b = t` and `for row in t` iterate a tensor. The message names the op that made the views.
When the write goes through a slice or view of a piece, torch names that (`Select`, `Slice`, `View`) instead.
Pieces made under `torch.no_grad()` raise a different error: that is GG105.
""",
    invalid=(
        Example(
            """
import torch
x = torch.randn(2, 3, requires_grad=True)
a, b = (x * 2).unbind(0)
a.mul_(2)              # GG004
""",
            raises=MESSAGE,
        ),
    ),
    valid=(
        Example(
            """
import torch
x = torch.randn(2, 3, requires_grad=True)
a, b = (x * 2).unbind(0)
a = a * 2
(a + b).sum().backward()
"""
        ),
    ),
)
