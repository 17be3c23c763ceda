"""The copy fix of a leaf written inside an ``if``, ``try``, ``with`` or loop (GG002/GG003): the copy is bound just
before that statement (``x_new = x``, or ``x_new = x.clone()`` for a write through a view), the write updates the
copy, and every later read -- the next iteration's included -- reads it.  torch runs each fixed program, for every
path through it, with the gradients of the program the write meant; where the copy cannot serve every read, no
fix is offered."""

from __future__ import annotations

import textwrap

import pytest
import torch
import torch.nn.functional as F
from gradguard.autofix.writer import fix_text

from programs import found, run_program


def fixed(src: str) -> str:
    return fix_text(textwrap.dedent(src), "t.py", unsafe=True).fixed


def grads(src: str, entry: str = "train"):
    return [g.clone() for g in run_program(src, entry)]


IF_FLAG = """
import torch
def train(flag=True):
    torch.manual_seed(0)
    x = torch.randn(3, requires_grad=True)
    w = torch.randn(3, requires_grad=True)
    if flag:
        x[0] = 1
    (x * w).sum().backward()
    return [x.grad, w.grad]
"""


def intended_if(flag: bool):
    torch.manual_seed(0)
    x = torch.randn(3, requires_grad=True)
    w = torch.randn(3, requires_grad=True)
    y = x.clone()
    if flag:
        y[0] = 1
    (y * w).sum().backward()
    return [x.grad, w.grad]


def test_a_write_in_an_if_is_fixed_for_both_branches():
    text = fixed(IF_FLAG)
    assert "x_new = x.clone()\n    if flag:\n        x_new[0] = 1" in text
    assert not found("GG003", text)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        run_program(textwrap.dedent(IF_FLAG))
    scope: dict = {}
    exec(compile(text, "fixed", "exec"), scope)  # noqa: S102 - the test's own program
    for flag in (True, False):
        for got, want in zip(scope["train"](flag), intended_if(flag)):
            assert torch.allclose(got, want)


LOOP = """
import torch
def train():
    torch.manual_seed(0)
    x = torch.randn(3, requires_grad=True)
    for step in range(3):
        y = x * 2
        x += 0.5 * step
    (x * y).sum().backward()
    return [x.grad]
"""


def test_a_write_in_a_loop_accumulates_on_the_copy_bound_before_the_loop():
    text = fixed(LOOP)
    assert "x_new = x\n    for step in range(3):\n        y = x_new * 2\n        x_new = x_new + 0.5 * step" in text
    assert not found("GG002", text)
    torch.manual_seed(0)
    x = torch.randn(3, requires_grad=True)
    cur = x
    for step in range(3):
        y = cur * 2
        cur = cur + 0.5 * step
    (cur * y).sum().backward()
    (got,) = grads(text)
    assert torch.allclose(got, x.grad)


ATTRIBUTE_IN_TRY = """
import torch
import torch.nn as nn
import torch.nn.functional as F
class NonNeg(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(3, 4))
    def forward(self, x):
        try:
            self.weight.clamp_(min=0.0)
        finally:
            pass
        return F.linear(x, self.weight)
def train():
    torch.manual_seed(0)
    layer = NonNeg()
    layer(torch.randn(2, 4)).pow(2).sum().backward()
    return [layer.weight.grad]
"""


def test_an_attribute_written_in_a_try_is_copied_before_it():
    text = fixed(ATTRIBUTE_IN_TRY)
    assert "weight = self.weight\n        try:\n            weight = weight.clamp(min=0.0)" in text
    assert "F.linear(x, weight)" in text and not found("GG002", text)
    torch.manual_seed(0)
    weight = torch.nn.Parameter(torch.randn(3, 4))
    torch.nn.functional.linear(torch.randn(2, 4), weight.clamp(min=0.0)).pow(2).sum().backward()
    (got,) = grads(text)
    assert torch.allclose(got, weight.grad)


ATTRIBUTE_IN_LOOP = """
import torch
import torch.nn as nn
import torch.nn.functional as F
class Pinned(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 6))
    def forward(self, x):
        y = 0
        for _ in range(3):
            y = y + F.linear(x, self.weight).pow(2).sum()
            self.weight[0] = 0
        return y
def train():
    torch.manual_seed(0)
    layer = Pinned()
    layer(torch.randn(2, 6)).backward()
    return [layer.weight.grad]
"""


def test_an_attribute_written_in_a_loop_is_copied_before_the_loop():
    """The loop's first pass reads the weight as it was, the later passes read it written (on the copy)."""
    text = fixed(ATTRIBUTE_IN_LOOP)
    assert "weight = self.weight.clone()\n        for _ in range(3):" in text and "weight[0] = 0" in text
    assert not found("GG003", text)
    torch.manual_seed(0)
    weight = torch.nn.Parameter(torch.randn(4, 6))
    x, mask = torch.randn(2, 6), torch.tensor([0.0, 1.0, 1.0, 1.0]).unsqueeze(1)
    (F.linear(x, weight).pow(2).sum() + 2 * F.linear(x, weight * mask).pow(2).sum()).backward()
    (got,) = grads(text)
    assert torch.allclose(got, weight.grad)


VIEW_BOUND_BEFORE_THE_BLOCK = """
import torch
def train():
    torch.manual_seed(0)
    w = torch.randn(3, 4, requires_grad=True)
    x = torch.randn(2, 3)
    wt = w.t()
    for k in range(2):
        if k == 1:
            wt.mul_(2)
    (x @ w).pow(2).sum().backward()
    return [w.grad]
"""


@pytest.mark.parametrize("src", [
    VIEW_BOUND_BEFORE_THE_BLOCK,
    VIEW_BOUND_BEFORE_THE_BLOCK.replace("    wt = w.t()\n", "    wt = w.t()\n    wt2 = wt\n").replace("wt.mul_", "wt2.mul_"),
])
def test_a_write_in_a_block_through_a_view_bound_before_it_copies_the_leaf_before_the_view(src):
    """Also through a second name of the view (``wt2 = wt``): the leaf is copied before the view is taken."""
    text = fixed(src)
    assert "w_new = w.clone()\n    wt = w_new.t()" in text and "(x @ w_new)" in text and not found("GG003", text)
    torch.manual_seed(0)
    w = torch.randn(3, 4, requires_grad=True)
    (torch.randn(2, 3) @ (w * 2)).pow(2).sum().backward()
    (got,) = grads(text)
    assert torch.allclose(got, w.grad)


@pytest.mark.parametrize("src, why", [
    ("""
import torch
def train(flag):
    x = torch.randn(3, requires_grad=True)
    if flag:
        x = torch.randn(3, requires_grad=True)
        x += 1
    return (x * 2).sum()
""", "the name is bound again inside the block"),
    ("""
import torch
def train():
    out = 0
    for x in [torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)]:
        x += 1
        out = out + (x * 2).sum()
    return out
""", "the leaf is the loop's own variable"),
    ("""
import torch
def train(flag):
    x = torch.randn(3, requires_grad=True)
    if flag:
        x += x * 2
    return (x * 2).sum()
""", "the written value reads the leaf again"),
])
def test_no_copy_when_it_cannot_serve_every_read(src, why):
    (diag,) = found("GG002", textwrap.dedent(src))
    assert diag.fix is None or "Compute on a copy" not in diag.fix.title, why
