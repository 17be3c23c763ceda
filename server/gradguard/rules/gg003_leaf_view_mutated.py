"""GG003 leaf-view-mutated: an in-place write through a view of a leaf that requires grad."""

from __future__ import annotations

import ast

from ..diagnostics import Fix, Severity, TextEdit
from ..fixes import copies
from ..fixes.context import CannotFix, FixContext
from ..inference.events import Finding, Mutation
from ..inference.values import Grad
from ..messages import Message
from .base import Example, Rule
from .common import LEAF_VIEW_MESSAGE, call_path_related, grad_leaf

ADVICE = "Do it under `torch.no_grad()` or on a clone."


def check(mutation: Mutation):
    if not isinstance(mutation, Mutation) or mutation.kind != "write":
        return  # optimizer steps, .data writes and graph breaks have rules of their own
    target = mutation.target
    if not mutation.grad_enabled or target.base is None:
        return
    root = target.root()
    if not grad_leaf(root) or root.storage is not target.storage:
        return
    related = [(root.origin, "the leaf is created here")] if root.origin is not None else []
    if mutation.view_site is not None:
        yield Finding(
            "GG003",
            mutation.view_site,
            Message.format(
                "this binds a view of {leaf}, a leaf that requires grad, and the in-place writes through it (as on "
                '{write}) raise: "{torch}" Bind a view of its detached tensor (`.detach()` here) to change the '
                "leaf's values without autograd, or write under `torch.no_grad()`.",
                leaf=root.label, write=mutation.node, torch=LEAF_VIEW_MESSAGE),
            certain=root.requires_grad == Grad.YES and mutation.grad_mode_known,
            related=[(mutation.node, "a write through the view raises here"), *related],
            mutation=mutation, data={"view_site": True},
        )
        return
    yield Finding(
        "GG003",
        mutation.node,
        f"{mutation.how} writes through a view of {root.label}, a leaf that requires grad; torch raises here: "
        f'"{LEAF_VIEW_MESSAGE}" {ADVICE}',
        certain=root.requires_grad == Grad.YES and mutation.grad_mode_known,
        related=related + call_path_related(mutation),
        mutation=mutation,
    )


def fix(ctx, finding):
    """Like GG002: ``torch.no_grad()`` for updates and resets, a copy of the leaf for computations.  At a view's
    binding: ``.detach()`` on the bound view (the writes then change the leaf's values, as they meant)."""
    if finding.data.get("view_site"):
        return _detach_bound_view(ctx, finding)
    return copies.fix_leaf_write(ctx, finding)


def _detach_bound_view(ctx: FixContext, finding: Finding) -> Fix:
    stmt = finding.node
    if not isinstance(stmt, ast.Assign) or not isinstance(stmt.value, (ast.Call, ast.Subscript, ast.Attribute)):
        raise CannotFix("the view is not bound by a plain assignment of a call, index or attribute")
    _, _, end_line, end_column = ctx.char_range(stmt.value)
    return Fix("Bind a detached view: `.detach()` on it", True,
               (TextEdit(end_line, end_column + 1, end_line, end_column + 1, ".detach()"),))


RULE = Rule(
    code="GG003",
    name="leaf-view-mutated",
    summary="In-place write through a view (`x[0]`, `x[:, 1]`, `.t()`, `.diagonal()`) of a leaf that requires grad.",
    explanation="""
Basic indexing (`x[0]`, `x[:, 1:]`), `.t()`, `.T`, `.diagonal()`, `.view()` and friends return views that
share the leaf's memory.  Writing through one changes the leaf in place, so torch raises at once:
`RuntimeError: a view of a leaf Variable that requires grad is being used in an in-place operation.`
""",
    fix_advice="""
Initialise under `with torch.no_grad():`, or build the value out of place
(`x = torch.cat([new_row, x[1:]])`, `torch.where(mask, v, x)`), or write into a clone.
""",
    default_severity=Severity.ERROR,
    check=check,
    fix=fix,
    when_wrong="""
Grad mode when a function starts is its caller's: outside training code and `forward`, the finding is a warning.
An index that gradguard cannot classify counts as basic indexing, so some advanced-index writes are reported
here rather than as GG002. torch raises at the same line either way.
""",
    invalid=(
        Example(
            """
import torch
w = torch.randn(3, 3, requires_grad=True)
w[0] = 0.0             # GG003
""",
            raises=LEAF_VIEW_MESSAGE,
        ),
    ),
    valid=(
        Example(
            """
import torch
w = torch.randn(3, 3, requires_grad=True)
with torch.no_grad():
    w[0] = 0.0
"""
        ),
    ),
)
