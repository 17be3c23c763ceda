"""GG102 through a NumPy view (the fix in ``rules/gg102_silent_data_write.py``): the write goes into the graph as the
torch twin of the NumPy op on the tensor itself (unsafe), and torch gives the fixed program the gradients of the op
done in torch."""

from __future__ import annotations

import textwrap

import pytest
from gradguard.config import Config
from gradguard.autofix.writer import fix_text
from programs import found

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

_PROGRAM = """
import numpy as np
import torch


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = torch.nn.Linear(3, 4)
        self.out = torch.nn.Linear(4, 2)

    def forward(self, x):
        h = self.inp(x)
        view = h.detach().numpy()
        {write}
        return self.out(torch.tanh(h))


def train():
    torch.manual_seed(2)
    block = Block()
    block(torch.randn(6, 3)).pow(2).sum().backward()
    return [p.grad for p in block.parameters()]
"""


def _grads(src: str) -> list:
    scope: dict = {}
    exec(compile(src, "fixed", "exec"), scope)  # noqa: S102 - our own test programs
    return scope["train"]()


@pytest.mark.parametrize("write, expected, intended", [
    ("np.clip(view, -0.2, 0.3, out=view)", "h = h.clamp(-0.2, 0.3)", "h = h.clamp(-0.2, 0.3)"),
    ("np.maximum(view, 0.0, out=view)", "h = h.clamp(min=0.0)", "h = torch.relu(h)"),
    ("view *= 0.5", "h = h * 0.5", "h = h * 0.5"),
    ("view[view < 0.1] = 0.0", "h = h.clone()\n        h[h < 0.1] = 0.0", "h = torch.where(h < 0.1, 0.0, h)"),
    ("for i in range(2):\n            view[i, 2:] = 1.5",
     "for i in range(2):\n            h = h.clone()\n            h[i, 2:] = 1.5", "h = torch.cat([torch.cat([h[:2, :2], "
     "torch.full((2, 2), 1.5)], 1), h[2:]])"),
])
def test_a_numpy_view_write_becomes_the_torch_op_on_the_tensor(write, expected, intended):
    src = textwrap.dedent(_PROGRAM).replace("{write}", write)
    (diag,) = found("GG102", src)
    assert diag.fix is not None and not diag.fix.safe and "unsafe:" in diag.fix.title
    assert fix_text(src, "t.py", Config(jedi=False)).fixed == src  # only with --unsafe-fixes
    out = fix_text(src, "t.py", Config(jedi=False), unsafe=True).fixed
    assert f"        {expected}\n" in out and not found("GG102", out)
    reference = src.replace(write, intended)
    for got, want in zip(_grads(out), _grads(reference), strict=True):
        assert torch.allclose(got, want, atol=1e-6)


@pytest.mark.parametrize("write", [
    # the array is read after the write: it would no longer see it
    "view *= 0.5\n        print(view.sum())",
    # a NumPy function without a torch twin here
    "np.cumsum(view, axis=1, out=view)",
    # an array operand NumPy broadcasts
    "view *= np.ones(4)",
])
def test_no_torch_twin_is_offered_where_the_meaning_could_change(write):
    src = textwrap.dedent(_PROGRAM).replace("{write}", write)
    assert [d.fix for d in found("GG102", src)] == [None]
