"""GG004 multi-view-mutated: an in-place write to an output of unbind/split/chunk/unpacking/iteration."""

from __future__ import annotations

import ast

from ..diagnostics import Severity
from ..fixes import inplace as F
from ..inference.events import Finding, Mutation
from ..inference.values import Grad
from .base import Example, Rule
from .common import call_path_related, piece_of, view_call

MESSAGE = "Output 0 of Unbind is a view and is being modified inplace."


def check(mutation: Mutation):
    if not isinstance(mutation, Mutation) or mutation.kind != "write":
        return  # optimizer steps, .data writes and graph breaks have rules of their own
    target = mutation.target
    if not mutation.grad_enabled:
        return
    piece = piece_of(target)
    if piece is None or target.requires_grad == Grad.NO:
        return
    op = piece.multi_view  # torch's node: chunk's pieces are outputs of Split
    what, condition = _source(piece)
    if piece is target:
        raises = f'"Output N of {op} is a view and is being modified inplace"'
    else:  # a slice or view of the piece: torch names that view's node
        raises = '"Output N of ... is a view and is being modified inplace. This view is the output of a function ' \
                 'that returns multiple views"'
    yield Finding(
        "GG004",
        mutation.node,
        f"{mutation.how} modifies {what}, one of several views of one tensor (torch's `{op}`); {condition}torch raises "
        f"here: {raises}. Rebind out of place or `clone()` the piece first.",
        certain=target.requires_grad == Grad.YES and mutation.grad_mode_known,
        related=[*([(piece.origin, "the piece is made here")] if piece.origin is not None else []),
                 *call_path_related(mutation)],
        data={"mutation": mutation},
    )


def _source(piece) -> tuple[str, str]:
    """The piece as the user made it -- the function they called (`chunk`, not torch's `Split`), or the
    unpacking or loop -- and the condition under which it is a view at all: unpacking a call's result unbinds
    only if the call returns one tensor, which the analysis may not know."""
    call = view_call(piece)
    if call is not None:
        return f"a piece returned by `{call}`", ""
    origin = piece.origin
    if isinstance(origin, ast.Assign):
        value = ast.unparse(origin.value)
        if isinstance(origin.value, ast.Call):
            return f"an element unpacked from `{value}`", f"if `{value}` returns one tensor (unpacking unbinds it), "
        return f"an element unpacked from `{value}` (unpacking a tensor unbinds it)", ""
    if isinstance(origin, ast.expr):
        return f"an element of `{ast.unparse(origin)}` taken by iteration (iterating a tensor unbinds it)", ""
    return "an output of a tensor's unbind", ""


def fix(ctx, finding):
    """Rebind the piece out of place (its sibling pieces are other memory); none when the whole tensor
    is read later and must see the write."""
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
