"""GG104 element-loop-write: an element-by-element loop write that breaks autograd.

The advice depends on what the write is, and each kind is proven with torch on the fixtures
(tests/test_loop_advice.py):

- **stack** -- the loop fills a tensor row by row with values that carry gradient (an RNN's states, a
  recurrence): the tensor must carry that gradient, so the steps go in a list and ``torch.stack``.  Never
  ``torch.no_grad()`` there: the write then runs, and the model gets no gradient at all.
- **no_grad** -- a leaf written after a backward ran (pruning or clipping a parameter between steps): an
  update, which ``torch.no_grad()`` is for.
- **copy** -- a leaf written inside the computation (thresholding, a causal mask in ``forward``): under
  ``torch.no_grad()`` the written entries would still get gradient; write a clone, or mask out of place.
- otherwise the in-place rule's own advice, and the vectorised forms.
"""

from __future__ import annotations

import ast

from ..diagnostics import Severity
from ..fixes import structural as S
from ..inference.events import Finding, Mutation
from ..inference.values import Grad
from ..messages import Message
from . import gg001_saved_tensor_mutated, gg002_leaf_mutated, gg003_leaf_view_mutated, gg004_multi_view_mutated
from .base import Example, Rule

_UNDERLYING = (gg004_multi_view_mutated, gg003_leaf_view_mutated, gg002_leaf_mutated, gg001_saved_tensor_mutated)
_ADVICE = {m.RULE.code: getattr(m, "ADVICE", "") for m in _UNDERLYING}
_LEAF_CODES = ("GG002", "GG003")

STACK_ADVICE = (
    "The values written carry gradient, so what they fill must carry it too: collect each step in a list and "
    "`torch.stack` it (`steps.append(h)`, then `torch.stack(steps)`) instead of writing into a preallocated tensor."
)
STACK_NOT_NO_GRAD = " Under `torch.no_grad()` the write would run, but their gradient would be dropped."
NO_GRAD_ADVICE = (
    "It runs after a backward, as an update between steps: do it under `torch.no_grad()` "
    "(or vectorised: `w.masked_fill_(mask, 0)` / `w.clamp_(lo, hi)` under `torch.no_grad()`)."
)
COPY_ADVICE = (
    "It is part of the computation: write into a clone (`y = x.clone()` before the loop, then use `y`), or mask out "
    "of place (`torch.where(mask, 0, x)`, `x.masked_fill(mask, 0)`, `w * mask`); under `torch.no_grad()` the "
    "written entries would still get gradient."
)
VECTORISE_ADVICE = (
    " Besides, a Python loop over elements is slow; write it vectorised (a mask with `torch.where`/`masked_fill`, "
    "broadcasting such as `(x - x.amin(dim, keepdim=True)) / (x.amax(dim, keepdim=True) - x.amin(dim, keepdim=True))`, "
    "or collect the steps in a list and `torch.stack` them)."
)


def check(mutation: Mutation):
    if not isinstance(mutation, Mutation) or not mutation.element_loop or mutation.kind != "write":
        return
    for module in _UNDERLYING:
        found = list(module.RULE.check(mutation))
        if found:
            first = found[0]
            advice = advice_kind(mutation, first.code)
            message = first.message
            if advice is None:
                tail = VECTORISE_ADVICE
            else:
                message = message.removesuffix(_ADVICE[first.code])
                tail = {"stack": STACK_ADVICE + (STACK_NOT_NO_GRAD if first.code in _LEAF_CODES else ""),
                        "no_grad": NO_GRAD_ADVICE, "copy": COPY_ADVICE}[advice]
            yield Finding(
                "GG104",
                mutation.node,
                Message.format("element-by-element loop write: {underlying}{tail}", underlying=message, tail=tail),
                certain=first.certain,
                related=first.related,
                data={"mutation": mutation, "underlying": first.code, "advice": advice},
            )
            return


def advice_kind(mutation: Mutation, underlying: str) -> str | None:
    """"stack", "no_grad", "copy", or None (the in-place rule's own advice): see the module docstring."""
    leaf = underlying in _LEAF_CODES
    if leaf and mutation.after_backward:
        return "no_grad"
    if mutation.value_grad != Grad.NO and not mutation.target.root().param and fills_rows(mutation.node):
        return "stack"
    return "copy" if leaf else None


def fills_rows(node: ast.AST) -> bool:
    """``buf[t] = value`` where ``value`` reads ``buf`` only at other indices, or not at all: the loop fills a
    tensor step by step (a recurrence reads earlier steps), rather than transforming each element where it is."""
    if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Subscript)):
        return False
    target = node.targets[0]
    if not isinstance(target.value, ast.Name):
        return False
    index = ast.dump(target.slice)
    return not any(
        isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id == target.value.id
        and ast.dump(n.slice) == index
        for n in ast.walk(node.value)
    )


def fix(ctx, finding):
    """The fix of the in-place rule behind the finding."""
    return S.fix_element_loop(ctx, finding)


RULE = Rule(
    code="GG104",
    name="element-loop-write",
    summary="A Python loop writes a tensor element by element in a way autograd rejects (a leaf, or a saved slice).",
    explanation="""
Writing `t[i, j] = ...` in a Python loop is slow, and it breaks autograd when `t` is a leaf that requires
grad (or a view of one), or when an earlier iteration saved the slice it overwrites (the recurrence
`y[t] = y[t] * y[t - 1]` saves `y[t - 1]` for backward, and the next iteration writes it).  gradguard
reports these writes with the form to use instead.  Loops that write a fresh `clone()` and never
overwrite a saved slice work (they are only slow) and are not reported.
""",
    fix_advice="""
It depends on what the loop does, and gradguard's message says which case it sees:

- It fills a tensor step by step with values that carry gradient (an RNN's states, a recurrence, a survival
  curve): collect the steps in a list and `torch.stack` them.  Not `torch.no_grad()`: the write then runs, and
  nothing before it gets any gradient (even if the buffer was made with `requires_grad=True`).
- It updates a parameter after a backward (pruning, clipping between steps): do it under `torch.no_grad()`,
  vectorised as `w.masked_fill_(w.abs() < thr, 0)` or `w.clamp_(lo, hi)`.
- It is part of the computation on a leaf (thresholding, a causal mask in `forward`): write into a clone, or
  mask out of place (`torch.where(t < thr, 0, t)`, `t.masked_fill(t < thr, 0)`, `w * mask`).  Under
  `torch.no_grad()` the written entries would still get gradient.
- Element-wise transforms: vectorise (per-channel min-max is broadcasting over `amin`/`amax` with
  `keepdim=True`).

The quick fix keeps the loop and makes it correct (a clone where the slice is saved, the update under
`torch.no_grad()`); where the loop fills a preallocated `torch.zeros`/`ones`/`empty(_like)` buffer row by row
and no such fix is safe, it collects the steps in a list and stacks them after the loop (unsafe: the stack has
the dtype and shape of the values, where the buffer converted and broadcast them).
""",
    default_severity=Severity.ERROR,
    check=check,
    fix=fix,
    when_wrong="""
Only element loops that autograd rejects are reported. Loops that are slow but correct are not. Which advice the
message gives is decided from what gradguard sees: a backward earlier in the analysed code makes a leaf write an
update between steps; a write whose values require grad and that reads the tensor only at other indices fills it
step by step.  A helper called from another file after a backward is not seen, and then the message advises a
clone where `torch.no_grad()` was meant.
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
