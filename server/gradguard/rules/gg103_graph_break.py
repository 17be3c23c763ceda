"""GG103 graph-break: a tensor that requires grad is rebuilt without its graph and fed back into a loss."""

from __future__ import annotations

from ..diagnostics import Severity
from ..fixes import CannotFix
from ..fixes import structural as S
from ..fixes.rebuilds import keep_tensor
from ..inference.events import Finding, GraphBreak
from ..messages import Message
from .base import Example, Rule

MESSAGE = "element 0 of tensors does not require grad and does not have a grad_fn"


def check(event):
    if not isinstance(event, GraphBreak) or event.reached is None:
        return
    if event.cut:
        yield from _check_cut(event)
        return
    sink = event.reached
    where = Message.format("the backward on {sink}" if sink.kind == "backward" else
                           "backward through the value returned on {sink}", sink=sink.node)
    yield Finding(
        "GG103",
        event.node,
        Message.format(
            "{how}: values are read out of a tensor that requires grad and used again without their graph, so "
            "{where} gets no gradient through them (gradients silently become None or miss this term, or "
            'backward raises "{torch}"). Keep tensors: `torch.stack`/`torch.cat`, arithmetic on tensors instead of '
            "`.item()`/`float()`, no numpy round trips.",
            how=event.how, where=where, torch=MESSAGE),
        certain=event.certain,
        related=[(sink.node, "the backward that loses this gradient")],
        data={"of_tensor": True} if event.of_tensor else {},
    )


def _check_cut(event):
    """A `.detach()`/`.data` is a finding only when gradients the code uses never arrive through any backward."""
    if event.starved is None:
        return
    read = event.starved
    yield Finding(
        "GG103",
        event.node,
        Message.format(
            "{how} cuts the graph here: the backward on {sink} gets no gradient to what this value was computed "
            "from, and no other backward reaches it, so {what} on {read} finds those gradients None (those "
            "parameters never learn). Drop {how} if the gradient should flow; if the cut is meant, leave those "
            "parameters out of the optimizer.",
            how=event.how, sink=event.reached.node, what=read.what, read=read.node),
        certain=event.certain,
        related=[(event.reached.node, "the backward that gets no gradient through the cut"),
                 (read.node, "uses the gradients that never arrive")],
        data={"cut": True},
    )


def fix(ctx, finding):
    """Keep the tensors: `torch.stack` for `torch.tensor([...])`, the tensor for `.item()`/`float()` in arithmetic,
    in `sum(...)` of a generator, or bound to a name used in arithmetic (unsafe when the name has other uses);
    a copy of one tensor made with its graph, a list of tensors stacked, a NumPy round trip in torch ops (``rebuilds``);
    drop a `.detach()`/`.data` that starves parameters the optimizer updates."""
    if finding.data.get("cut"):
        return S.fix_cut(ctx, finding)
    try:
        return S.fix_graph_break(ctx, finding)
    except CannotFix:
        return keep_tensor(ctx, finding)


RULE = Rule(
    code="GG103",
    name="graph-break",
    summary="A tensor that requires grad is rebuilt without its graph (`torch.tensor(t)`, `.item()`, numpy) and used in a loss.",
    explanation="""
`torch.tensor(t)`, `torch.tensor([t1, t2])`, `t.new_tensor(...)`, `torch.from_numpy(t.detach().numpy())`
and arithmetic on `t.item()`/`float(t)`/`t.tolist()` make a new leaf from the *values* of `t`: the graph
that produced `t` is gone.  A loss built from it gives no gradient to what produced `t` (gradients stay
None or miss that term); if nothing else requires grad, `backward()` raises `element 0 of tensors does not
require grad and does not have a grad_fn`.  `torch.tensor(float(loss), requires_grad=True)` backpropagates
"successfully" and leaves every parameter's grad None.

`t.detach()` (and a returned `t.data` of an activation) cuts the graph the same way, usually on purpose.  It
is flagged only when parameters that `t` was computed from are updated by an optimizer's `step()` (or a
manual update reading their `.grad` under no_grad) and no backward of the function reaches them: a forward
returning `h.detach()`, a head fed `features.detach()` while the backbone is in the optimizer.  Their grads
stay None and they never learn.
""",
    fix_advice="Keep the tensors: `torch.stack([t1, t2])` instead of `torch.tensor([t1, t2])`, `loss` instead of "
               "`torch.tensor(loss.item())`, tensor ops instead of numpy.",
    default_severity=Severity.ERROR,
    check=check,
    fix=fix,
    when_wrong="""
Any value read out of a tensor that requires grad and fed back into a backward is flagged. That includes a
constant put there on purpose, such as a normalising term. Write `.detach()` to say that a value is meant to have
no gradient: it is not flagged. In helpers other than `forward`, returning such a value is not flagged, because
the caller may intend it.  A `.detach()` is meant when nothing optimised depends on it alone (a target network,
a stop-gradient in a loss, a frozen encoder left out of the optimizer, a detach for logging): those are not
flagged.
""",
    invalid=(
        Example(
            """
import torch
w = torch.randn(3, requires_grad=True)
a, b = (w * 2).sum(), (w * 3).sum()
loss = torch.tensor([a, b]).sum()   # GG103
loss.backward()
""",
            raises=MESSAGE,
        ),
    ),
    valid=(
        Example(
            """
import torch
w = torch.randn(3, requires_grad=True)
a, b = (w * 2).sum(), (w * 3).sum()
loss = torch.stack([a, b]).sum()
loss.backward()
print(loss.item())
"""
        ),
    ),
)
