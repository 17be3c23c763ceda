"""An update a ``with`` block's exit makes (a context manager that copies the training weights back after its
``yield``) before the backward below the block: the statements up to that backward move into the block, so the
backward runs before the exit.  Not offered when a statement to move calls code that may read the weights (a
forward after the block: moved into it, it would see the weights the exit restores no more)."""

from __future__ import annotations

import pytest
from gradguard.config import Config
from gradguard.autofix.writer import fix_text
from programs import found, run_program

torch = pytest.importorskip("torch")

_PROGRAM = """
from contextlib import contextmanager

import torch
import torch.nn as nn


@contextmanager
def swapped(model, values):
    saved = [p.detach().clone() for p in model.parameters()]
    with torch.no_grad():
        for p, v in zip(model.parameters(), values):
            p.copy_(v)
    try:
        yield model
    finally:
        with torch.no_grad():
            for p, s in zip(model.parameters(), saved):
                p.copy_(s)


def train():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    values = [p.detach() * 0.5 for p in model.parameters()]
    x = torch.randn(5, 4)
    with swapped(model, values) as m:
        out = m(x)

    loss = out.pow(2).mean()
    loss.backward()
    return [p.grad for p in model.parameters()]
"""

_TITLE = "Backpropagate in the `with` block"


def test_the_backward_moves_into_the_block_and_runs_before_its_exit():
    (finding,) = found("GG101", _PROGRAM)
    assert finding.fix is not None and finding.fix.title.startswith(_TITLE) and not finding.fix.safe
    out = fix_text(_PROGRAM, "t.py", Config(jedi=False), unsafe=True).fixed
    assert "        loss = out.pow(2).mean()\n        loss.backward()\n" in out and not found("GG101", out)
    intended = _PROGRAM.replace("        out = m(x)\n\n    loss = out.pow(2).mean()\n    loss.backward()\n",
                                "        out = m(x)\n        out.pow(2).mean().backward()\n")
    for got, want in zip(run_program(out), run_program(intended), strict=True):
        assert torch.equal(got, want)
    # not offered when a statement to move runs a forward (in the block, it would see the weights swapped in)
    src = _PROGRAM.replace("    loss = out.pow(2).mean()\n", "    loss = out.pow(2).mean() + model(x).mean()\n")
    assert found("GG101", src) and not any(f.fix and f.fix.title.startswith(_TITLE) for f in found("GG101", src))
