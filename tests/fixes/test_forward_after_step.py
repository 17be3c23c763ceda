"""GG101's fix that computes a forward after the step instead of before it (``rules/gg101_optimizer_step_before_backward.py``),
when the step sits inside an ``if``, ``try``, ``with`` or loop that shares a block with the backward: the forward
moves below that whole statement.  torch runs each fixed program with the gradients of the GAN step it meant (the
generator's loss through the updated discriminator); where the statement around the step uses what the forward
computes, nothing moves."""

from __future__ import annotations

import textwrap

import pytest
from gradguard.autofix.writer import fix_text
from programs import found, run_program

torch = pytest.importorskip("torch")

_PROGRAM = """
import torch
import torch.nn.functional as F


def train(flag=True):
    torch.manual_seed(0)
    G = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4))
    D = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    opt_G = torch.optim.SGD(G.parameters(), lr=0.1)
    opt_D = torch.optim.SGD(D.parameters(), lr=0.1)
    real, z = torch.randn(5, 4), torch.randn(5, 3)
    fake = G(z)
    g_logits = D(fake)
    d_loss = F.softplus(-D(real)).mean() + F.softplus(D(fake.detach())).mean()
    opt_D.zero_grad()
    d_loss.backward()
{step}
    g_loss = F.softplus(-g_logits).mean()
    opt_G.zero_grad()
    g_loss.backward()
    return [p.grad for p in G.parameters()]
"""

_STEPS = {
    "if": "    if flag:\n        opt_D.step()",
    "try": "    try:\n        opt_D.step()\n    finally:\n        pass",
    "with": "    with torch.enable_grad():\n        opt_D.step()",
    "loop": "    for _ in range(2):\n        opt_D.step()",
}


def _intended(step: str, flag: bool):
    """The generator's logits computed after the discriminator's step(s)."""
    src = textwrap.dedent(_PROGRAM).replace("{step}", step).replace("    g_logits = D(fake)\n", "")
    src = src.replace("    g_loss = F.softplus(-g_logits)", "    g_logits = D(fake)\n    g_loss = F.softplus(-g_logits)")
    scope: dict = {}
    exec(compile(src, "intended", "exec"), scope)  # noqa: S102 - the test's own program
    return scope["train"](flag)


@pytest.mark.parametrize("kind", sorted(_STEPS))
def test_the_forward_moves_below_the_statement_around_the_step(kind):
    src = textwrap.dedent(_PROGRAM).replace("{step}", _STEPS[kind])
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        run_program(src)
    (finding,) = found("GG101", src)
    assert not finding.fix.safe and "`g_logits = D(fake)` after the step" in finding.fix.title
    out = fix_text(src, "t.py", unsafe=True).fixed
    assert f"{_STEPS[kind]}\n    g_logits = D(fake)\n    g_loss" in out
    assert not found("GG101", out)
    scope: dict = {}
    exec(compile(out, "fixed", "exec"), scope)  # noqa: S102 - the test's own program
    for flag in (True, False):
        for got, want in zip(scope["train"](flag), _intended(_STEPS[kind], flag), strict=True):
            assert torch.allclose(got, want)


@pytest.mark.parametrize("step", [
    # the statement around the step rebinds what the forward reads: moving it below would read the new value
    "    if flag:\n        opt_D.step()\n        fake = fake * 2",
    # it reads what the forward computes: moving the forward below would leave it unbound there
    "    if flag:\n        opt_D.step()\n        print(g_logits.shape)",
    # control may leave it
    "    for _ in range(2):\n        opt_D.step()\n        break",
])
def test_nothing_moves_below_a_statement_that_uses_the_forward(step):
    src = textwrap.dedent(_PROGRAM).replace("{step}", step)
    (finding,) = found("GG101", src)
    assert finding.fix is None or "`g_logits = D(fake)` after the step" not in finding.fix.title


_CHANGED_IN_PLACE = """
import torch
import torch.nn as nn


class Trainer(nn.Module):
    def __init__(self):
        super().__init__()
        self.G = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 4))
        self.D = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
        self.opt_G = torch.optim.SGD(self.G.parameters(), lr=0.1)
        self.opt_D = torch.optim.SGD(self.D.parameters(), lr=0.1)

    def forward(self, real, z):
        fake = self.G(z)
        return {"wgan_d": self.D(fake).mean() - self.D(real).mean(), "wgan_g": -self.D(fake).mean()}, fake


def train():
    torch.manual_seed(0)
    trainer = Trainer()
    real, z = torch.randn(5, 4), torch.randn(5, 3)
    losses, fake = trainer(real, z)
    trainer.opt_D.zero_grad()
    losses["d"] = losses["wgan_d"] * 1.0
    losses["d"].backward()
    trainer.opt_D.step()
    trainer.opt_G.zero_grad()
    losses["wgan_g"].backward()
    trainer.opt_G.step()
    return losses["d"]
"""


def test_a_result_changed_in_place_before_the_step_is_not_computed_again():
    # `losses, fake = ...` computed again after the step would drop the "d" entry added before it
    src = textwrap.dedent(_CHANGED_IN_PLACE)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        run_program(src)
    (finding,) = found("GG101", src)
    assert finding.fix is None or "losses, fake = " not in finding.fix.title


_ACCUMULATED = """
import torch
import torch.nn.functional as F


def train():
    torch.manual_seed(0)
    G = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4))
    D = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    opt_G = torch.optim.SGD(G.parameters(), lr=0.1)
    opt_D = torch.optim.SGD(D.parameters(), lr=0.1)
    real, z = torch.randn(5, 4), torch.randn(5, 3)
    fake = G(z)
    g_loss, d_loss = 0, 0
    d_loss = d_loss + F.softplus(-D(real)).mean() + F.softplus(D(fake.detach())).mean()
    g_logits = D(fake)
    g_loss = g_loss + F.softplus(-g_logits).mean()
    g_loss = g_loss + fake.pow(2).mean()
    d_loss.backward()
    opt_D.step()
    opt_G.zero_grad()
    g_loss.backward()
    opt_G.step()
    return [p.detach().clone() for p in [*G.parameters(), *D.parameters()]]
"""


def test_a_loss_added_up_in_steps_moves_after_the_step_as_a_whole():
    # `g_loss = g_loss + a` then `g_loss = g_loss + b`: the later one rebinds what the earlier one reads, and both move
    # below the step in their order, so the earlier still reads the value before them
    src = textwrap.dedent(_ACCUMULATED)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        run_program(src)
    (finding,) = found("GG101", src)
    assert not finding.fix.safe and "after the step" in finding.fix.title
    out = fix_text(src, "t.py", unsafe=True).fixed
    assert not found("GG101", out)
    g_lines = ("    g_logits = D(fake)\n    g_loss = g_loss + F.softplus(-g_logits).mean()\n"
               "    g_loss = g_loss + fake.pow(2).mean()\n")
    intended = src.replace(g_lines, "").replace("    opt_D.step()\n", "    opt_D.step()\n" + g_lines)
    for got, want in zip(run_program(out), run_program(intended), strict=True):
        assert torch.allclose(got, want)
