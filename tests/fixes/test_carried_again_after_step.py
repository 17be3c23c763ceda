"""A value the loop computes before the step and carries into its next iteration, where the next loss is built on
it, is computed again just after the step (``state = enc(obs[t + 1])`` copied below ``opt.step()``); not when what
it is computed from changes before the step, nor when code after the step reads it (it would see the value
computed again), nor when it is not a plain call's result."""

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
    torch.manual_seed(4)
    enc = torch.nn.Sequential(torch.nn.Linear(3, 6), torch.nn.Tanh(), torch.nn.Linear(6, 6))
    head = torch.nn.Linear(6, 2)
    opt = torch.optim.SGD([*enc.parameters(), *head.parameters()], lr=0.1)
    obs, seen = torch.randn(4, 3), []
    state = enc(obs[0])
    t = 0
    while t < 3:
        loss = head(state).pow(2).mean()
        state = enc(obs[t + 1])
        opt.zero_grad()
        loss.backward()
        opt.step()
        t += 1
    return seen + [p.detach().clone() for p in [*enc.parameters(), *head.parameters()]]
"""

_TITLE = "Compute `state = enc(obs[t + 1])` again after the step"


def _fixes(src: str):
    return [d.fix for d in analyze_source(src, "t.py", Config(jedi=False)).diagnostics if d.fix is not None]


def test_the_carried_value_is_computed_again_after_the_step():
    assert any(f.title.startswith(_TITLE) and not f.safe for f in _fixes(_PROGRAM))
    out = fix_text(_PROGRAM, "t.py", Config(jedi=False), unsafe=True).fixed
    assert not analyze_source(out, "t.py", Config(jedi=False)).diagnostics
    # the program meant: each iteration's state computed with the weights of that iteration
    intended = _PROGRAM.replace("        state = enc(obs[t + 1])\n", "").replace(
        "        loss = head(state)", "        state = enc(obs[t])\n        loss = head(state)")
    for got, want in zip(run_program(out), run_program(intended), strict=True):
        assert torch.allclose(got, want)


@pytest.mark.parametrize("old, new", [
    # what it is computed from changes before the step
    ("        opt.zero_grad()\n", "        obs = obs.flip(0)\n        opt.zero_grad()\n"),
    # code after the step reads it
    ("        t += 1\n", "        seen.append(state.detach())\n        t += 1\n"),
    # not a plain call's result
    ("        state = enc(obs[t + 1])\n", "        state = enc(obs[t + 1]) * 2\n"),
])
def test_not_computed_again_where_the_loop_would_see_another_value(old, new):
    src = _PROGRAM.replace(old, new)
    assert src != _PROGRAM and analyze_source(src, "t.py", Config(jedi=False)).diagnostics
    assert not any(f.title.startswith("Compute `state") and "again after the step" in f.title for f in _fixes(src))
