"""GG101 optimizer-step-before-backward: parameters updated in place while a pending graph still needs them."""

from __future__ import annotations

from ..diagnostics import Severity
from ..fixes import structural as S
from ..inference.events import Finding, Mutation
from ..messages import Message
from .base import Example, Rule
from .common import SAVED_MESSAGE, conflict_related, first_conflict, where_it_raises


def check(mutation: Mutation):
    if not isinstance(mutation, Mutation) or mutation.kind == "data":
        return
    written = mutation.target.group or (mutation.target,)
    is_update = mutation.kind == "step" or (
        not mutation.grad_enabled and any(t.param or (t.leaf and t.requires_grad) for t in written))
    if not is_update:
        return
    conflict = first_conflict(mutation)
    if conflict is None:
        return
    save = conflict.save
    yield Finding(
        "GG101",
        mutation.node,
        Message.format(
            "{how} updates {label} in place while the graph built on {saved} (`{op}` saved {what}) is still waiting "
            'for its backward; {raises} "{torch}". Run every backward of that graph before the step, detach the graph '
            "boundary (e.g. `D(fake.detach())`), or recompute the forward after the step.",
            how=mutation.how, label=_updated(mutation), saved=save.node, op=save.op, what=_saved(save.role),
            raises=where_it_raises(conflict), torch=SAVED_MESSAGE),
        certain=save.certain,
        related=conflict_related(conflict, mutation),
        data={"mutation": mutation},
    )


def _saved(role: str) -> str:
    return {"weight": "a weight", "output": "its output"}.get(role, "an input")


def _updated(mutation: Mutation) -> str:
    """What the write updates: a step updates its optimizer's parameters (the step already names the optimizer)."""
    return "its parameters" if mutation.kind == "step" else mutation.target.label


def fix(ctx, finding):
    """Move the step (or update) after the last backward that needs the old weights; else move an early forward
    after the step (unsafe); in a truncated-BPTT loop kept alive with `retain_graph=True`, detach the carried
    state instead (unsafe)."""
    return S.fix_step_before_backward(ctx, finding)


RULE = Rule(
    code="GG101",
    name="optimizer-step-before-backward",
    summary="`optimizer.step()` (or a hand-written update) changes parameters a pending graph saved, before its backward.",
    explanation="""
`optimizer.step()` updates every parameter in place (under `no_grad`, but the version counter still moves).
Layers keep their weights for backward (`nn.Linear` saves its weight whenever its input requires grad;
torch reports it as "output 0 of AsStrided"), so a step between a forward and a later `backward()` of a
loss from that forward makes the backward raise `one of the variables needed for gradient computation has
been modified by an inplace operation`.  Typical cases: a GAN that steps the discriminator on `D(fake)`
and then backpropagates the generator loss through the same `D(fake)`; actor-critic and multi-task heads
that step one optimizer between two backwards of a shared graph; weight clipping or EMA updates between
forward and backward.  gradguard follows optimizers built from `model.parameters()` (also `list(...)`,
`itertools.chain`, param groups) and helper functions of the same file that step them.
""",
    fix_advice="""
Call `step()` after the last backward that needs the weights, give the discriminator `fake.detach()`, or
run a fresh forward after the step.
""",
    default_severity=Severity.ERROR,
    check=check,
    fix=fix,
    when_wrong="""
Parameters are tracked per module object within one file. The finding is missed, not guessed, when the
optimizer is built in another file or from parameters gathered in ways gradguard does not follow. A filter
such as `[p for p in model.parameters() if p.requires_grad]` or over `model.modules()` is read as all of the
model's parameters that require grad, so a filter on anything else (names, shapes) can give a finding on a
parameter the optimizer does not hold. A step is not flagged when the graph it would break is freed before the
next backward.
""",
    invalid=(
        Example(
            """
import torch
import torch.nn as nn
torch.manual_seed(0)
net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
opt = torch.optim.SGD(net.parameters(), lr=0.1)
out = net(torch.randn(5, 4))
out.mean().backward(retain_graph=True)
opt.step()                          # GG101
out.pow(2).mean().backward()
""",
            raises=SAVED_MESSAGE,
        ),
    ),
    valid=(
        Example(
            """
import torch
import torch.nn as nn
net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
opt = torch.optim.SGD(net.parameters(), lr=0.1)
out = net(torch.randn(5, 4))
(out.mean() + out.pow(2).mean()).backward()
opt.step()
"""
        ),
    ),
)
