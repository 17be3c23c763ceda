"""One loss backpropagated twice with an optimizer step between (``loss.backward(retain_graph=True); opt_c.step();
opt_a.zero_grad(); loss.backward()``) is backpropagated once, the step after it, when the step's gradients were
cleared just before the first backward and only ``zero_grad()``s run between: every step then applies what it
would have.  Anything else between, another loss, or a later step of gradients nothing cleared, and the form is
not offered."""

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
    torch.manual_seed(3)
    actor = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    critic = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    opt_a = torch.optim.SGD(actor.parameters(), lr=0.1, momentum=0.9)
    opt_c = torch.optim.SGD(critic.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(6, 4)
    for _ in range(2):
        other = critic(x).mean()
        loss = actor(x).pow(2).mean() + critic(x).pow(2).mean()
        opt_c.zero_grad()
        loss.backward(retain_graph=True)
        opt_c.step()
        opt_a.zero_grad()
        loss.backward()
        opt_a.step()
    return [p.detach().clone() for p in [*actor.parameters(), *critic.parameters()]]
"""

_TITLE = "Backpropagate `loss` once"


def _fixes(src: str):
    return [d.fix for d in analyze_source(src, "t.py", Config(jedi=False)).diagnostics if d.fix is not None]


def test_the_loss_is_backpropagated_once_and_every_step_applies_what_it_would_have():
    src = _PROGRAM
    assert any(f.title.startswith(_TITLE) and not f.safe for f in _fixes(src))
    out = fix_text(src, "t.py", Config(jedi=False), unsafe=True).fixed
    assert out.count("loss.backward(") == 1 and not analyze_source(out, "t.py", Config(jedi=False)).diagnostics
    # the program meant: both optimizers' gradients cleared, one backward, both steps
    intended = src.replace("        loss.backward(retain_graph=True)\n        opt_c.step()\n", "").replace(
        "        opt_a.step()\n", "        opt_c.step()\n        opt_a.step()\n")
    for got, want in zip(run_program(out), run_program(intended), strict=True):
        assert torch.allclose(got, want)


@pytest.mark.parametrize("old, new", [
    # the step's gradients hold what an earlier backward left: one backward fewer would change them
    ("        opt_c.zero_grad()\n", ""),
    # code between reads the weights the step changed
    ("        opt_a.zero_grad()\n", "        opt_a.zero_grad()\n        other = critic(x).mean()\n"),
    # another loss: its gradients are not the first backward's
    ("        loss.backward()\n", "        (loss + other).backward()\n"),
    # a later step applies gradients nothing cleared between the backwards: the second backward adds to them
    ("        opt_a.step()\n", "        opt_a.step()\n        opt_c.step()\n"),
])
def test_not_offered_where_one_backward_fewer_changes_a_step(old, new):
    src = _PROGRAM.replace(old, new)
    assert src != _PROGRAM
    assert not any(f.title.startswith(_TITLE) for f in _fixes(src))
