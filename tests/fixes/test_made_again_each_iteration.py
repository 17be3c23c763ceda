"""A value made once before a loop that steps the weights it was made with, and that each iteration builds its
loss on (a GAN's fake scored in every generator step), is made again at the top of the loop's body; not when what
it is made from changes before the loop or in it, nor when the name is assigned more than once."""

from __future__ import annotations

import pytest
from gradguard.api import analyze_source
from gradguard.config import Config
from gradguard.autofix.writer import fix_text
from programs import run_program

torch = pytest.importorskip("torch")

_PROGRAM = """
import torch


def train():
    torch.manual_seed(5)
    G = torch.nn.Sequential(torch.nn.Linear(3, 6), torch.nn.Tanh(), torch.nn.Linear(6, 4))
    D = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 1))
    opt_G = torch.optim.SGD(G.parameters(), lr=0.1)
    noise = torch.randn(5, 3)
    for _ in range(2):
        fake = G(noise)
    for j in range(3):
        opt_G.zero_grad()
        err = -D(fake).mean()
        err.backward(retain_graph=True)
        opt_G.step()
    return [p.detach().clone() for p in G.parameters()]
"""

_TITLE = "Make `fake = G(noise)` again at the top of the loop that steps"


def _fixes(src: str):
    return [d.fix for d in analyze_source(src, "t.py", Config(jedi=False)).diagnostics if d.fix is not None]


def test_the_value_is_made_again_in_each_iteration():
    assert any(f.title.startswith(_TITLE) and not f.safe for f in _fixes(_PROGRAM))
    out = fix_text(_PROGRAM, "t.py", Config(jedi=False), unsafe=True).fixed
    assert not analyze_source(out, "t.py", Config(jedi=False)).diagnostics
    intended = _PROGRAM.replace("        opt_G.zero_grad()\n", "        fake = G(noise)\n        opt_G.zero_grad()\n")
    assert intended != _PROGRAM
    for got, want in zip(run_program(out), run_program(intended), strict=True):
        assert torch.allclose(got, want)


@pytest.mark.parametrize("old, new", [
    # what it is made from changes before the loop
    ("    for j in range(3):\n", "    noise = noise * 2\n    for j in range(3):\n"),
    # or in it
    ("        opt_G.step()\n", "        opt_G.step()\n        noise.mul_(0.5)\n"),
    # the name is assigned more than once
    ("    noise = torch.randn(5, 3)\n", "    noise = torch.randn(5, 3)\n    fake = G(noise)\n"),
    # an `if` holds the assignment apart from the loop: the loop may see no value made there
    ("    for _ in range(2):\n        fake = G(noise)\n", "    if noise.sum() > 0:\n        fake = G(noise)\n"),
])
def test_not_made_again_where_another_value_would_come_out(old, new):
    src = _PROGRAM.replace(old, new)
    assert src != _PROGRAM and analyze_source(src, "t.py", Config(jedi=False)).diagnostics
    assert not any(f.title.startswith(_TITLE) for f in _fixes(src))


def test_not_made_again_for_a_parameter_a_caller_may_give():
    src = _PROGRAM.replace("def train():\n", "def train(fake=None):\n") + "\n\ntrain()\n"
    assert analyze_source(src, "t.py", Config(jedi=False)).diagnostics
    assert not any(f.title.startswith(_TITLE) for f in _fixes(src))
