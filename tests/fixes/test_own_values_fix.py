"""GG102 on ``w.data = f(w)`` in a forward: ``f(w)`` is bound to a name and read where the forward read the leaf's new
values, as the run recorded each op's read of them (``Mutation.own_reads``); the leaf keeps its own values.  Not
when an op read them some other way: a caller's read of the attribute, a name bound to the leaf before the write, a
layer's call reading it as its own weight."""

from __future__ import annotations

import textwrap

import pytest
import torch
from gradguard.autofix.writer import fix_text
from gradguard.config import Config

from programs import found, run_program

PROGRAM = """
import torch
import torch.nn as nn


class Gated(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 6)
        self.gain = nn.Parameter(torch.linspace(-1.0, 1.0, 6))

    def forward(self, x):
{forward}


def train():
    torch.manual_seed(0)
    net = Gated()
    x = torch.randn(4, 5)
    loss = {loss}
    loss.backward()
    return [net.gain.grad, net.fc.weight.grad]
"""
WRITE = "self.gain.data = self.gain.clamp(min=0)"


def _program(forward: str, loss: str = "net(x).pow(2).sum()") -> str:
    return textwrap.dedent(PROGRAM).replace("{forward}", textwrap.indent(forward, " " * 8)).replace("{loss}", loss)


@pytest.mark.parametrize("forward", [
    f"{WRITE}\nreturn self.fc(x) * self.gain",
    f"{WRITE}\nif x.sum() > 0:\n    return self.fc(x) * self.gain\nreturn self.fc(x) + self.gain",
    f"with torch.enable_grad():\n    {WRITE}\nreturn self.fc(x) * self.gain",  # the `with` runs it whenever the read runs
    f"try:\n    {WRITE}\nfinally:\n    pass\nreturn self.fc(x) * self.gain",
])
def test_the_computed_values_are_read_in_place_of_the_leaf(forward):
    src = _program(forward)
    (diag,) = found("GG102", src)
    assert diag.fix is not None and not diag.fix.safe
    out = fix_text(src, "t.py", Config(jedi=False), unsafe=True).fixed
    assert "gain = self.gain.clamp(min=0)" in out and ".data" not in out and "* self.gain" not in out
    expected = run_program(src.replace(WRITE, "gain = self.gain.clamp(min=0)").replace("self.gain\n", "gain\n"))
    assert all(torch.allclose(a, b) for a, b in zip(run_program(out), expected))


@pytest.mark.parametrize("forward,loss", [
    (f"{WRITE}\nreturn self.fc(x) * self.gain", "net(x).pow(2).sum() + net.gain.abs().sum()"),  # a caller reads it
    (f"g = self.gain\n{WRITE}\nreturn self.fc(x) * g", "net(x).pow(2).sum()"),  # a name bound to it before
    (f"if x.sum() > 0:\n    {WRITE}\nreturn self.fc(x) * self.gain", "net(x).pow(2).sum()"),  # may not run first
    (f"self.fc.weight.data = self.fc.weight.clamp(min=0)\nreturn self.fc(x)", "net(x).pow(2).sum()"),  # a layer's
])
def test_no_fix_where_an_op_reads_the_new_values_otherwise(forward, loss):
    (diag,) = found("GG102", _program(forward, loss))
    assert diag.fix is None
