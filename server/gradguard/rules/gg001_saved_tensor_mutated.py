"""GG001 saved-tensor-mutated: an in-place write to a tensor an earlier op saved for backward."""

from __future__ import annotations

from ..diagnostics import Severity
from ..fixes import inplace as F
from ..inference.events import Finding, Mutation
from ..messages import Message
from .base import Example, Rule
from .common import SAVED_MESSAGE, conflict_related, first_conflict, where_it_raises

ADVICE = "Use an out-of-place op or clone first."


def check(mutation: Mutation):
    if not isinstance(mutation, Mutation) or mutation.kind != "write":
        return  # optimizer steps, .data writes and graph breaks have rules of their own
    if mutation.module is not None or mutation.functional_inplace:
        return  # inplace=True activations are GG005
    conflict = first_conflict(mutation)
    if conflict is None:
        return
    save = conflict.save
    what = {"output": "output", "weight": "weight"}.get(save.role, "input")
    yield Finding(
        "GG001",
        mutation.node,
        Message.format(
            "{how} modifies {label} in place, but `{op}` on {saved} saved it (as its {what}) for backward; {raises} "
            '"{torch}". {advice}',
            how=mutation.how, label=mutation.target.label, op=save.op, saved=save.node, what=what,
            raises=where_it_raises(conflict), torch=SAVED_MESSAGE, advice=ADVICE),
        certain=save.certain,
        related=conflict_related(conflict, mutation),
        data={"mutation": mutation},
    )


def fix(ctx, finding):
    """Rebind out of place when nothing else sees the memory; else clone where it is saved; else an unsafe
    rebinding when only containers, attributes or the caller could see the write."""
    return F.fix_saved_write(ctx, finding)


RULE = Rule(
    code="GG001",
    name="saved-tensor-mutated",
    summary="In-place write to a tensor that an earlier op saved for backward, before that backward runs.",
    explanation="""
Many ops keep a tensor for their backward: `sigmoid`, `tanh`, `exp`, `relu` and `softmax` keep their
**output**; `mul`, `div`, `pow`, `matmul`, `linear`, `layer_norm` and convolutions keep their **inputs**
(only those the gradient needs: in `a * b`, `b` is kept only if `a` requires grad).  An in-place write
(`+=`, `.add_()`, `x[i] = v`, `out=`, `.copy_()`, ...) bumps the tensor's version counter, and when
`backward()` later reaches the op it finds the saved tensor changed and raises
`RuntimeError: one of the variables needed for gradient computation has been modified by an inplace
operation`.  The write is reported even under `torch.no_grad()` (the counter still moves) and through
views and `.detach()` aliases (they share the counter).  Which op saves what comes from torch itself
(`gradguard/knowledge/torch_ops.json`, generated from the installed torch).
""",
    fix_advice="""
Write out of place (`y = y + 1` instead of `y += 1`, `y = y.masked_fill(mask, 0)` instead of
`y[mask] = 0`), or `clone()` the tensor before writing to the copy.
""",
    default_severity=Severity.ERROR,
    check=check,
    fix=fix,
    invalid=(
        Example(
            """
import torch
x = torch.randn(4, requires_grad=True)
y = torch.sigmoid(x)   # sigmoid saves its output y
y += 1                 # GG001
y.sum().backward()
""",
            raises=SAVED_MESSAGE,
        ),
        Example(
            """
import torch
w = torch.randn(3, requires_grad=True)
x = torch.randn(3)
z = x * w              # mul saves x for w's gradient
x.add_(1)              # GG001
z.sum().backward()
""",
            raises=SAVED_MESSAGE,
        ),
    ),
    valid=(
        Example(
            """
import torch
x = torch.randn(4, requires_grad=True)
y = x + 1              # add saves nothing
y += 1
y.sum().backward()
"""
        ),
        Example(
            """
import torch
x = torch.randn(4, requires_grad=True)
y = torch.sigmoid(x)
y = y + 1              # out of place
y.sum().backward()
"""
        ),
    ),
    when_wrong="""
It can miss writes hidden in functions it does not follow, and it assumes the saving op's graph reaches a
backward when the graph is returned or passed on.
""",
)
