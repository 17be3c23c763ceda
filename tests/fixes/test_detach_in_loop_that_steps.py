"""A detach of the carried state called just after the loop that steps (once per sequence, where each step's
backward runs back into the frames before it) moves to the end of that loop's body; not when an iteration may
leave the body early (it would skip the detach), nor when another statement runs between the loop and the detach."""

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
    torch.manual_seed(2)
    cell, head = torch.nn.GRUCell(3, 5), torch.nn.Linear(5, 1)
    opt = torch.optim.SGD([*cell.parameters(), *head.parameters()], lr=0.1)
    h = torch.zeros(1, 5)
    out = []
    for frames in torch.randn(2, 3, 1, 3):
        for x in frames:
            opt.zero_grad()
            h = cell(x, h)
            loss = head(h).pow(2).mean()
            loss.backward(retain_graph=True)
            opt.step()
        h = h.detach()
        out.append(h)
    return out + [p.detach().clone() for p in [*cell.parameters(), *head.parameters()]]
"""

_TITLE = "Detach the state after each step"


def _fixes(src: str):
    return [d.fix for d in analyze_source(src, "t.py", Config(jedi=False)).diagnostics if d.fix is not None]


def test_the_detach_moves_to_the_end_of_the_loop_that_steps():
    assert any(f.title.startswith(_TITLE) and not f.safe for f in _fixes(_PROGRAM))
    out = fix_text(_PROGRAM, "t.py", Config(jedi=False), unsafe=True).fixed
    assert not analyze_source(out, "t.py", Config(jedi=False)).diagnostics
    intended = _PROGRAM.replace("            opt.step()\n        h = h.detach()\n",
                                "            opt.step()\n            h = h.detach()\n")
    assert intended != _PROGRAM
    for got, want in zip(run_program(out), run_program(intended), strict=True):
        assert torch.allclose(got, want)


@pytest.mark.parametrize("old, new", [
    # an iteration that leaves the body early would skip the detach
    ("            opt.step()\n", "            opt.step()\n            if loss.item() > 1e9:\n                continue\n"),
    # the state is read between the loop and the detach
    ("        h = h.detach()\n", "        out.append(h)\n        h = h.detach()\n"),
])
def test_not_moved_where_an_iteration_or_a_reader_would_see_another_state(old, new):
    src = _PROGRAM.replace(old, new)
    assert src != _PROGRAM
    assert not any(f.title.startswith(_TITLE) for f in _fixes(src))
