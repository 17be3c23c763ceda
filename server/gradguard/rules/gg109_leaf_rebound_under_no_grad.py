"""GG109 leaf-rebound-under-no-grad: ``w = w - lr * w.grad`` under no_grad makes ``w`` name a new tensor that does
not require grad, while the optimizer (or the next ``w.grad``) still expects gradients for the leaf."""

from __future__ import annotations

from ..diagnostics import Severity
from ..fixes.leaf_update import fix_leaf_update
from ..inference.events import Finding, Rebind
from ..messages import Message
from .base import Example, Rule

MESSAGE = "element 0 of tensors does not require grad and does not have a grad_fn"


def check(rebind: Rebind):
    if not isinstance(rebind, Rebind) or rebind.starved is None:
        return
    sink, read = rebind.reached, rebind.starved
    yield Finding(
        "GG109",
        rebind.node,
        Message.format(
            "this assignment under no_grad rebinds {name} to a new tensor that does not require grad: the leaf "
            "that required grad is left behind, so the backward on {sink} runs through values that get no "
            'gradient (or raises "{torch}" when nothing else requires grad), and {what} on {read} finds no '
            "gradient for {name}: it silently stops training. Update {name} in place (`-=`, `copy_(...)` or an "
            "in-place method such as `clamp_(...)`) so that it stays the same leaf.",
            name=rebind.name, sink=sink.node, torch=MESSAGE, what=read.what, read=read.node),
        related=[(sink.node, Message.format("the backward through the rebound {name}: it gets no gradient",
                                            name=rebind.name)),
                 (read.node, "reads the gradient that never arrives")],
        data={"rebind": rebind},
    )


RULE = Rule(
    code="GG109",
    name="leaf-rebound-under-no-grad",
    summary="A tensor that requires grad is rebound under `no_grad` (`w = w - lr * w.grad`): it stops getting gradients.",
    explanation="""
Under `torch.no_grad()`, `w = w - lr * w.grad` (or `w = w / w.norm()`, `self.w = self.w.clamp(...)`) does not
update `w`: it computes a new tensor that does not require grad and binds the name to it.  The leaf that
required grad, the one an optimizer holds, is left behind.  The next forward reads the new tensor, so the next
backward gives it no gradient: `w.grad` stays None (a `if w.grad is not None` guard then skips it forever), the
optimizer steps the old leaf without a gradient, and `w` silently stops training.  When nothing else requires
grad, that backward raises `element 0 of tensors does not require grad and does not have a grad_fn` instead.
It is flagged only when a backward runs through the rebound tensor and a gradient read (an optimizer's `step()`,
a `.grad` under no_grad) comes after it.
""",
    fix_advice="""
Update in place under `torch.no_grad()`: `w -= lr * w.grad`, `w.sub_(lr * w.grad)`, `w.copy_(w / w.norm())`,
`w.clamp_(-1, 1)`.  In manual gradient descent without an optimizer, rebinding is fine if the new tensor gets
grad back with `w.requires_grad_()` before the next forward.

The quick fix writes the in-place form (`w -= ...`, `w.clamp_(...)`, or `w.copy_(...)`) and, when the update
read `w.grad`, clears it (`w.grad = None`): the rebound tensor had no gradient, and the next step must not add
the used one again.  An in-place update keeps `w`'s dtype and shape, so the fix is unsafe (and says which) when
the code does not show that the new value has them: a float64 tensor in the update would have widened `w`,
and `copy_` broadcasts a smaller result over `w` where the rebinding would have shrunk it.
""",
    default_severity=Severity.ERROR,
    check=check,
    fix=fix_leaf_update,
    when_wrong="""
A rebinding followed by `requires_grad_()` on the new tensor is not flagged, even when an optimizer still holds
the old leaf (the optimizer then steps a tensor nothing uses). A method that rebinds `self.w` after its own
backward is found when the file calls it again (in a loop) after that; called only from other files, it is not.
""",
    invalid=(
        Example(
            """
import torch
w = torch.randn(3, requires_grad=True)
b = torch.zeros(1, requires_grad=True)
x, y = torch.randn(8, 3), torch.randn(8)
for _ in range(3):
    loss = ((x @ w + b - y) ** 2).mean()
    loss.backward()
    with torch.no_grad():
        if w.grad is not None:
            w = w - 0.1 * w.grad    # GG109
        b -= 0.1 * b.grad
        b.grad = None
""",
            raises=None,
        ),
    ),
    valid=(
        Example(
            """
import torch
w = torch.randn(3, requires_grad=True)
b = torch.zeros(1, requires_grad=True)
x, y = torch.randn(8, 3), torch.randn(8)
for _ in range(3):
    loss = ((x @ w + b - y) ** 2).mean()
    loss.backward()
    with torch.no_grad():
        w -= 0.1 * w.grad
        b -= 0.1 * b.grad
    w.grad = None
    b.grad = None
"""
        ),
    ),
)
