"""An update made before the backward that needs the old values moves after it across ``opt.zero_grad()`` (which
touches only ``.grad``s) when the update reads and writes values only; across anything else, or for an update
that reads gradients or calls code we cannot see, it does not move."""

from __future__ import annotations

import textwrap

import pytest
from gradguard.api import analyze_source
from gradguard.config import Config
from gradguard.autofix.writer import fix_text
from programs import run_program

torch = pytest.importorskip("torch")

_PROGRAM = """
import torch


def train():
    torch.manual_seed(6)
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    loss = net(torch.randn(5, 3)).pow(2).mean()
    {update}
    opt.zero_grad(set_to_none=True)
    loss.backward()
    grads = [p.grad.clone() for p in net.parameters()]
    opt.step()
    return grads + [p.detach().clone() for p in net.parameters()]
"""


def _diags(src: str):
    return analyze_source(src, "t.py", Config(jedi=False)).diagnostics


@pytest.mark.parametrize("update", [
    "for p in net.parameters():\n        p.data.mul_(0.9)",
    "with torch.no_grad():\n        for p in net.parameters():\n            p.clamp_(-0.3, 0.3)",
    # a function defined inside the update and called there: its body is read like the rest of the update
    "for p in net.parameters():\n        def decay():\n            p.data.mul_(0.9)\n        decay()",
])
def test_an_update_moves_past_zero_grad_to_after_the_backward(update):
    src = textwrap.dedent(_PROGRAM).replace("    {update}\n", textwrap.indent(update, "    ") + "\n")
    fixes = [d.fix for d in _diags(src) if d.fix is not None]
    assert fixes and all(f.safe and "after `loss.backward()`" in f.title for f in fixes)
    out = fix_text(src, "t.py", Config(jedi=False)).fixed
    assert out.index("loss.backward()") < out.index(update.splitlines()[-1].strip()) and not _diags(out)
    # the intended program: the update after the backward, before the step (where the fix puts it)
    intended = src.replace(textwrap.indent(update, "    ") + "\n", "").replace(
        "    loss.backward()\n", "    loss.backward()\n" + textwrap.indent(update, "    ") + "\n")
    for got, want in zip(run_program(out), run_program(intended), strict=True):
        assert torch.allclose(got, want)


@pytest.mark.parametrize("update, between", [
    # the update reads gradients, which zero_grad clears
    ("for p in net.parameters():\n        p.data.add_(p.grad if p.grad is not None else 0.0)", ""),
    # a helper we do not look into
    ("for p in net.parameters():\n        p.data.mul_(0.9)\n        log(p)", ""),
    # a forward between the update and the backward reads the weights
    ("for p in net.parameters():\n        p.data.mul_(0.9)", "    extra = net(torch.randn(5, 3)).sum()\n"),
])
def test_no_move_past_code_that_could_see_the_difference(update, between):
    src = textwrap.dedent(_PROGRAM).replace("    {update}\n", textwrap.indent(update, "    ") + "\n" + between)
    src = src.replace("def train():", "def log(t):\n    pass\n\n\ndef train():")
    diags = _diags(src)
    assert diags and all(d.fix is None or "after `loss.backward()`" not in d.fix.title for d in diags)
