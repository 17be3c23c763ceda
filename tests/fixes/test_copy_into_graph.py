"""GG102 on ``x.data.copy_(values)`` the forward reads: the values go into the graph as the new ``x`` when they are
elementwise arithmetic that reads ``x`` (so they have its shape); otherwise no fix."""

from __future__ import annotations

import textwrap

import pytest
from gradguard.config import Config
from gradguard.autofix.writer import fix_text
from programs import found, run_program

torch = pytest.importorskip("torch")

_PROGRAM = """
import torch


def train():
    torch.manual_seed(12)
    lin = torch.nn.Linear(3, 2)
    x = torch.randn(4, 3)
    target = torch.randn(4, 2)
    y = lin(x)
    {copy}
    (y - target).pow(2).sum().backward()
    return [lin.weight.grad, lin.bias.grad]
"""


def test_copied_values_that_read_the_tensor_become_it_with_their_graph():
    src = textwrap.dedent(_PROGRAM).replace("{copy}", "y.data.copy_(0.25 * y.data - target / 2)")
    (diag,) = found("GG102", src)
    assert not diag.fix.safe and "the gradient now goes through it" in diag.fix.title
    out = fix_text(src, "t.py", Config(jedi=False), unsafe=True).fixed
    assert "    y = 0.25 * y - target / 2\n" in out and not found("GG102", out)
    for got, want in zip(run_program(out), run_program(src.replace("y.data.copy_(0.25 * y.data - target / 2)",
                                                     "y = 0.25 * y - 0.5 * target")), strict=True):
        assert torch.allclose(got, want)


@pytest.mark.parametrize("copy", [
    "y.data.copy_(target)",  # values that do not read `y`: `y = target` would have no graph to `lin`
    "y.data.copy_(y.data.flip(0))",  # not elementwise arithmetic on `y`
])
def test_other_copies_get_no_fix(copy):
    src = textwrap.dedent(_PROGRAM).replace("{copy}", copy)
    assert [d.fix for d in found("GG102", src)] == [None]
