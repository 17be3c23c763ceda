"""GG102 on a `.data` write after the op that saved the tensor, whose backward runs where the write cannot move
after it (a caller of the forward): the op saves a clone instead, so the backward reads the values the forward
computed with -- the program's own gradients.  Not when the written values carry a graph the `.data` write drops
(``w.data /= w.norm()``: the values were meant for this step's computation, ``Mutation.value_grad``)."""

from __future__ import annotations

import textwrap

import torch
from gradguard.config import Config
from gradguard.autofix.writer import fix_text

from programs import found, run_program

PROGRAM = """
import torch
import torch.nn as nn


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 3))

    def forward(self, x):
        out = torch.sigmoid(x) * self.weight
        self.weight.data /= {divisor}
        return out


def train():
    torch.manual_seed(0)
    layer = Scaled()
    x = torch.randn(4, 3, requires_grad=True)
    layer(x).pow(2).sum().backward()
    return [layer.weight.grad, x.grad]
"""


def test_the_op_that_saved_the_parameter_saves_a_clone():
    src = textwrap.dedent(PROGRAM).replace("{divisor}", "2.0")
    (diag,) = found("GG102", src)
    assert diag.fix is not None and diag.fix.safe and "self.weight.clone()" in diag.fix.title
    out = fix_text(src, "t.py", Config(jedi=False)).fixed
    assert "torch.sigmoid(x) * self.weight.clone()" in out and "self.weight.data /= 2.0" in out
    assert not found("GG102", out)
    expected = run_program(src.replace("        self.weight.data /= 2.0\n", ""))
    for got, want in zip(run_program(out), expected):
        assert torch.allclose(got, want)


def test_no_clone_when_the_written_values_are_computed_with_grad():
    src = textwrap.dedent(PROGRAM).replace("{divisor}", "self.weight.norm()")
    (diag,) = found("GG102", src)
    assert diag.fix is None or "clone" not in diag.fix.title
