"""GG102 silent-data-write: a write through ``.data`` to a tensor a pending graph saved (no error, wrong grads)."""

from __future__ import annotations

from ..diagnostics import Severity
from ..fixes import CannotFix
from ..fixes import structural as S
from ..fixes.numpy_views import numpy_view_in_graph
from ..inference.events import Finding, Mutation
from ..inference.values import Grad, Tensor
from ..messages import Message
from .base import Example, Rule
from .common import call_path_related, conflict_related, first_conflict, where_it_reads


def check(mutation: Mutation):
    if not isinstance(mutation, Mutation):
        return
    if not mutation.conflicts and mutation.read_after is not None:
        yield _forward_changed(mutation)
        return
    if mutation.kind != "data":
        return
    conflict = first_conflict(mutation)
    if conflict is None:
        return
    save = conflict.save
    yield Finding(
        "GG102",
        mutation.node,
        Message.format(
            "{how} changes {label} behind autograd's back: `{op}` on {saved} saved it for backward, and {writes} "
            "do not bump the version counter, so {reads} silently computes wrong gradients. Write after the backward, "
            "or use `with torch.no_grad():` on the tensor itself (then torch raises instead of lying).",
            how=mutation.how, label=mutation.target.label, op=save.op, saved=save.node, reads=where_it_reads(conflict),
            writes="writes to a NumPy array over its memory" if "NumPy" in mutation.how else "`.data` writes"),
        certain=save.certain,
        related=conflict_related(conflict, mutation, silent=True),
        data={"mutation": mutation},
    )


def _forward_changed(mutation: Mutation) -> Finding:
    """A hidden write to a tensor with a grad_fn that a later backward reads: no error (no saved copy of it was
    changed), but the new values have no gradient path, so backward differentiates the old computation."""
    owner, sink = mutation.hidden_from, mutation.read_after
    hidden = _hidden_how(mutation)
    related = []
    if owner.origin is not None:
        related.append((owner.origin, Message.format("{label} is computed here, with a grad_fn", label=owner.label)))
    related += call_path_related(mutation)
    related.append((sink.node, "backward reads the changed values here, but differentiates them as if unchanged: "
                               "no error, wrong gradients" if sink.kind == "backward" else
                    "the forward returns a value computed from the changed tensor here; the backward through it "
                    "differentiates the values as if unchanged: no error, wrong gradients"))
    return Finding(
        "GG102",
        mutation.node,
        Message.format(
            "{how} changes {label}, which has a grad_fn, {hidden}: autograd records no operation for the change, "
            "so {reads} differentiates the values as if they were never changed (no error, wrong gradients). Make the change an operation of the graph (`{name} = {name} * mask`, `torch.where`, "
            "`.clamp()` out of place), or apply it to a detached copy (`.detach().clone()`) that backward never reads.",
            how=mutation.how, label=owner.label, hidden=hidden, name=_name(owner),
            reads=Message.format("the backward on {sink}" if sink.kind == "backward"
                                 else "backward through the value returned on {sink}", sink=sink.node)),
        certain=owner.requires_grad == Grad.YES,
        related=related,
        data={"mutation": mutation},
    )


def _hidden_how(mutation: Mutation) -> str:
    if mutation.kind == "data":
        return ("through a NumPy array that shares its memory" if "NumPy" in mutation.how
                else "through `.data`")
    if any(t.detached_from is not None for t in mutation.target.view_chain()):
        return "through a `.detach()` alias that shares its memory"
    return "with grad mode off (`torch.no_grad()`, `inference_mode` or a no-grad helper)"


def _name(owner: Tensor) -> str:
    label = owner.label
    return label.strip("`") if label.startswith("`") and label.count("`") == 2 else "t"


def fix(ctx, finding):
    """Move the `.data` write after the backward that needs the old value.  A hidden write the forward reads
    goes into the graph instead (moving it would change the forward): the same op out of place, with grad on;
    through a NumPy view, the torch twin of the NumPy op on the tensor itself."""
    mutation = finding.data["mutation"]
    if not mutation.conflicts:
        try:
            return S.write_in_graph(ctx, finding)
        except CannotFix:
            return numpy_view_in_graph(ctx, mutation)

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
