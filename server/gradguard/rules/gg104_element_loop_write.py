"""GG104 element-loop-write: an element-by-element loop write that breaks autograd."""

from __future__ import annotations

from ..diagnostics import Severity
from ..inference.events import Finding, Mutation
from ..messages import Message
from . import gg001_saved_tensor_mutated, gg002_leaf_mutated, gg003_leaf_view_mutated, gg004_multi_view_mutated
from .base import Example, Rule

_UNDERLYING = (gg004_multi_view_mutated, gg003_leaf_view_mutated, gg002_leaf_mutated, gg001_saved_tensor_mutated)


def check(mutation: Mutation):
    if not isinstance(mutation, Mutation) or not mutation.element_loop or mutation.kind != "write":
        return
    for module in _UNDERLYING:
        found = list(module.RULE.check(mutation))
        if found:
            first = found[0]
            yield Finding(
                "GG104",
                mutation.node,
                Message.format(
                    "element-by-element loop write: {underlying} Besides, a Python loop over elements is slow; "
                    "write it vectorised (a mask with `torch.where`/`masked_fill`, broadcasting such as "
                    "`(x - x.amin(dim, keepdim=True)) / (x.amax(dim, keepdim=True) - x.amin(dim, keepdim=True))`, "
                    "or collect the steps in a list and `torch.stack` them).",
                    underlying=first.message),
                certain=first.certain,
                related=first.related,
                data={"mutation": mutation, "underlying": first.code},
            )
            return


def fix(ctx, finding):
    """The fix of the in-place rule behind the finding."""
    from ..fixes import structural as S

    return S.fix_element_loop(ctx, finding)


RULE = Rule(
    code="GG104",
    name="element-loop-write",
    summary="A Python loop writes a tensor element by element in a way autograd rejects (a leaf, or a saved slice).",
    explanation="""
Writing `t[i, j] = ...` in a Python loop is slow, and it breaks autograd when `t` is a leaf that requires
grad (or a view of one), or when an earlier iteration saved the slice it overwrites (the recurrence
`y[t] = y[t] * y[t - 1]` saves `y[t - 1]` for backward, and the next iteration writes it).  gradguard
reports these writes with the vectorised form to use instead.  Loops that write a fresh `clone()` and never
overwrite a saved slice work (they are only slow) and are not reported.
""",
    fix_advice="""
Vectorise: thresholds become `torch.where(t < thr, 0, t)` or `t.masked_fill(t < thr, 0)`, per-channel
min-max becomes broadcasting over `amin`/`amax` with `keepdim=True`, recurrences collect each step in a
list and `torch.stack` it.
""",
    default_severity=Severity.ERROR,
    check=check,
    fix=fix,
    when_wrong="""
Only element loops that autograd rejects are reported. Loops that are slow but correct are not. The vectorised
form in the message is a suggestion for the common shapes: thresholds, min-max normalisation and recurrences.
""",
    invalid=(
        Example(
            """
import torch
x = torch.randn(4, 4, requires_grad=True)
for i in range(4):
    for j in range(4):
        if x[i, j] < 0:
            x[i, j] = 0.0           # GG104
""",
            raises="a view of a leaf Variable that requires grad is being used in an in-place operation.",
        ),
    ),
    valid=(
        Example(
            """
import torch
x = torch.randn(4, 4, requires_grad=True)
y = torch.where(x < 0, torch.zeros_like(x), x)
y.sum().backward()
"""
        ),
    ),
)
