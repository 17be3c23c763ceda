"""GG002 leaf-mutated: an in-place write to a leaf tensor that requires grad, in grad mode."""

from __future__ import annotations

from ..diagnostics import Severity
from ..fixes import copies, inplace
from ..fixes.context import CannotFix
from ..fixes.writes import InPlaceWrite, root_name
from ..inference.events import Finding, Mutation
from ..inference.values import Grad
from .base import Example, Rule
from .common import LEAF_MESSAGE, call_path_related, grad_leaf

ADVICE = "Wrap parameter updates in `with torch.no_grad():`, or compute on a copy."


def check(mutation: Mutation):
    if not isinstance(mutation, Mutation) or mutation.kind != "write":
        return  # optimizer steps, .data writes and graph breaks have rules of their own
    target = mutation.target
    if not mutation.grad_enabled or target.base is not None or not grad_leaf(target):
        return
    kind = "a parameter" if target.param else "a leaf tensor that requires grad"
    subject = kind if target.label == kind else f"{target.label}, {kind},"
    related = [(target.origin, "created here as a leaf that requires grad")] if target.origin is not None else []
    yield Finding(
        "GG002",
        mutation.node,
        f'{mutation.how} modifies {subject} in place; torch raises here: "{LEAF_MESSAGE}" {ADVICE}',
        certain=target.requires_grad == Grad.YES and mutation.grad_mode_known,
        related=related + call_path_related(mutation),
        mutation=mutation,
    )


def fix(ctx, finding):
    """A parameter update or reset goes under ``torch.no_grad()``; a computation works on a copy."""
    fix = inplace.fix_or_none(lambda: copies.fix_leaf_write(ctx, finding))
    return fix if fix is not None else unread_update(ctx, finding)


def unread_update(ctx, finding):
    """A leaf written in place that nothing reads after the write, as the run went (no value read, no view, holder
    or escape: ``Report.clean``), and whose old value no graph took (it was not read before): under
    ``torch.no_grad()`` the write changes the same values, and nothing can tell it from the write autograd refused
    (safe).  ``a = Variable(torch.rand(5, 5), requires_grad=True); a.add_(noise)`` at the end of a script."""
    mutation = inplace.mutation_of(finding)
    if mutation.read_before or mutation.conflicts:
        raise CannotFix("a graph took the leaf's old value")
    write = InPlaceWrite.of_mutation(ctx, mutation)
    name, _ = root_name(write.target)
    if write.moment is None or name is None or write.value_use:
        raise CannotFix("no run of the write, or the write's result is used")
    report = write.sharing(ctx, name)
    if not report.clean or write.value_read_after(ctx, name):
        raise CannotFix(f"`{name}` is read after the write, or something else holds it")
    rw, desc = inplace.no_grad_wrap(ctx, write.stmt)
    return rw.fix(f"Update under `{desc}`: nothing reads `{name}` after the write", safe=True)


RULE = Rule(
    code="GG002",
    name="leaf-mutated",
    summary="In-place write to a leaf tensor that requires grad (a parameter or `requires_grad=True` input).",
    explanation="""
A leaf is a tensor autograd did not compute: a parameter, or a tensor created with `requires_grad=True`.
Its gradient is accumulated into `.grad`, so autograd forbids changing it in place while grad mode is on:
the write raises at once with `RuntimeError: a leaf Variable that requires grad is being used in an
in-place operation.`  Boolean-mask and index-tensor writes (`x[mask] = 0`) count too.  Inside
`torch.no_grad()` (optimizer updates, initialisation) the same write is allowed.
""",
    fix_advice="""
For parameter updates and initialisation: `with torch.no_grad(): p -= lr * p.grad`.  For computation:
work on a copy (`y = x.clone(); y += 1`) or out of place (`y = x + 1`).
""",
    default_severity=Severity.ERROR,
    check=check,
    fix=fix,
    when_wrong="""
Grad mode when a function starts is its caller's. In training code (a function that runs `backward()` or
`step()`) and in `forward`, gradguard knows grad mode is on, and the finding is an error. Elsewhere the finding is
a warning: a caller in another file may run the function under `torch.no_grad()`, and then the write is allowed.
`accelerate` does this when it converts models.
""",
    invalid=(
        Example(
            """
import torch
x = torch.zeros(3, requires_grad=True)
x += 1                 # GG002
""",
            raises=LEAF_MESSAGE,
        ),
    ),
    valid=(
        Example(
            """
import torch
x = torch.zeros(3, requires_grad=True)
with torch.no_grad():
    x += 1
"""
        ),
    ),
)
