"""GG005 inplace-activation-on-saved: an ``inplace=True`` activation overwrites a tensor saved for backward."""

from __future__ import annotations

from ..diagnostics import Severity
from ..fixes import inplace as F
from ..inference.events import Finding, Mutation
from ..messages import Message
from .base import Example, Rule
from .common import SAVED_MESSAGE, conflict_related, first_conflict, where_it_raises


def check(mutation: Mutation):
    if not isinstance(mutation, Mutation) or mutation.kind != "write":
        return  # optimizer steps, .data writes and graph breaks have rules of their own
    if mutation.module is None and not mutation.functional_inplace:
        return
    conflict = first_conflict(mutation)
    if conflict is None:
        return
    save = conflict.save
    ctor = mutation.module.ctor if mutation.module is not None else None
    what = "output" if save.role == "output" else "input"
    facts = dict(how=mutation.how, label=mutation.target.label, op=save.op, saved=save.node, what=what,
                 raises=where_it_raises(conflict), torch=SAVED_MESSAGE)
    if ctor is None:
        yield Finding(
            "GG005",
            mutation.node,
            Message.format(
                '{how} overwrites {label}, which `{op}` on {saved} saved (as its {what}) for backward; {raises} "{torch}". '
                "Use inplace=False here.", **facts),
            certain=save.certain,
            related=conflict_related(conflict, mutation),
            data={"mutation": mutation},
        )
        return
    # A module is reported once, where it is built: that is the line `inplace=False` changes.
    yield Finding(
        "GG005",
        ctor,
        Message.format(
            "{how}, built here, is applied on {applied} to {label}, which `{op}` on {saved} saved (as its {what}) for "
            'backward; {raises} "{torch}". Use inplace=False.', applied=mutation.node, **facts),
        certain=save.certain,
        related=[(mutation.node, "the module is applied here"), *conflict_related(conflict, mutation)],
        data={"mutation": mutation},
    )


def fix(ctx, finding):
    """``inplace=False`` (at the module's constructor for modules), ``F.relu_`` -> ``F.relu``."""
    return F.fix_inplace_activation(ctx, finding)


RULE = Rule(
    code="GG005",
    name="inplace-activation-on-saved",
    summary="`inplace=True` activation or dropout applied to a tensor that an earlier op saved for backward.",
    explanation="""
`nn.ReLU(inplace=True)`, `F.relu_`, `F.dropout(..., inplace=True)` and the other `inplace=` modules and
functions overwrite their input.  That is safe after ops that do not keep their output (convolution,
BatchNorm, Linear, add), and wrong after ops that do (`sigmoid`, `tanh`, `exp`, `softmax`, another
`relu`) or when a later op kept the input: `backward()` then raises `one of the variables needed for
gradient computation has been modified by an inplace operation`.  gradguard reports a module where it
is constructed (the line to change), with the call that applies it as a related location.
""",
    fix_advice="Pass `inplace=False` (or drop the keyword); use `F.relu` instead of `F.relu_`.",
    default_severity=Severity.ERROR,
    check=check,
    fix=fix,
    when_wrong="""
An `nn.Dropout(p, inplace=True)` module is flagged in any mode. It writes nothing in `eval()` mode, or when `p` is
0 but passed as a variable. A literal `p=0` is recognised. A real case is timm's TNT: it is correct by default
(`attn_drop=0`) and raises at backward with `attn_drop > 0`.
""",
    invalid=(
        Example(
            """
import torch
import torch.nn.functional as F
x = torch.randn(4, requires_grad=True)
y = torch.sigmoid(x)
z = F.relu(y, inplace=True)   # GG005
z.sum().backward()
""",
            raises=SAVED_MESSAGE,
        ),
    ),
    valid=(
        Example(
            """
import torch
import torch.nn as nn
x = torch.randn(2, 3, 8, 8, requires_grad=True)
conv, bn, act = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(inplace=True)
act(bn(conv(x))).sum().backward()
"""
        ),
    ),
)
