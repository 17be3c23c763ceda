"""GG102 silent-data-write: a write through ``.data`` to a tensor a pending graph saved (no error, wrong grads)."""

from __future__ import annotations

from ..diagnostics import Severity
from ..inference.events import Finding, Mutation
from ..messages import Message
from .base import Example, Rule
from .common import conflict_related, first_conflict, where_it_reads


def check(mutation: Mutation):
    if not isinstance(mutation, Mutation) or mutation.kind != "data":
        return
    conflict = first_conflict(mutation)
    if conflict is None:
        return
    save = conflict.save
    yield Finding(
        "GG102",
        mutation.node,
        Message.format(
            "{how} changes {label} behind autograd's back: `{op}` on {saved} saved it for backward, and `.data` writes "
            "do not bump the version counter, so {reads} silently computes wrong gradients. Write after the backward, "
            "or use `with torch.no_grad():` on the tensor itself (then torch raises instead of lying).",
            how=mutation.how, label=mutation.target.label, op=save.op, saved=save.node, reads=where_it_reads(conflict)),
        certain=save.certain,
        related=conflict_related(conflict, mutation, silent=True),
        data={"mutation": mutation},
    )


def fix(ctx, finding):
    """Move the `.data` write after the backward that needs the old value."""
    from ..fixes import structural as S

    return S.fix_silent_data_write(ctx, finding)


RULE = Rule(
    code="GG102",
    name="silent-data-write",
    summary="A `.data` write changes a tensor that a pending graph saved: no error, silently wrong gradients.",
    explanation="""
`t.data` shares `t`'s memory but not its version counter.  A write through it (`w.data.clamp_()`,
`x.data.mul_()`, `x.data[mask] = 0`) changes a tensor autograd saved for backward without autograd
noticing: `backward()` runs and returns wrong gradients.  (`param.data = new` is different: it rebinds the
storage and the saved old one is kept, so that backward is not corrupted.)
""",
    fix_advice="""
Do the write after the backward that needs the old value, or write under `with torch.no_grad():` to the
tensor itself so that autograd's version check can see it.
""",
    default_severity=Severity.ERROR,
    check=check,
    fix=fix,
    when_wrong="""
A `.data` write to a saved tensor is flagged even when backward happens to mask out its effect: for example, the
written positions get zero gradient anyway. `p.data = new` is never flagged: it rebinds the storage, and torch
keeps the old one for backward.
""",
    invalid=(
        Example(
            """
import torch
w = torch.randn(3, requires_grad=True)
y = torch.sigmoid(w * 2)
y.data.mul_(0.5)                    # GG102
y.sum().backward()                  # runs, but w.grad is wrong
""",
            raises=None,
        ),
    ),
    valid=(
        Example(
            """
import torch
w = torch.randn(3, requires_grad=True)
y = torch.sigmoid(w * 2)
y.sum().backward()
w.data.mul_(0.5)
"""
        ),
    ),
)
