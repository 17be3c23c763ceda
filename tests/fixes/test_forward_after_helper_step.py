"""GG101's fix that computes a forward after the step, where the finding is made by the analysis of the code that
calls the helper holding the step (the helper's own analysis does not know its optimizers), or by the module's own
code: the candidate is checked by analysing that code again too, so a move that leaves the step breaking the graph
(the loss moved, the forward it reads left before the step) is not offered, and the one that computes that forward
again after the step is.  torch runs each fixed program with the gradients the author meant: the actor's loss
computed through the critic's updated weights."""

from __future__ import annotations

import textwrap

import pytest
from gradguard.autofix.writer import fix_text
from programs import found

torch = pytest.importorskip("torch")

_MODELS = """
import torch
import torch.nn as nn

torch.manual_seed(0)
actor = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 2))
critic = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 1))
opt_a = torch.optim.SGD(actor.parameters(), lr=0.1)
opt_c = torch.optim.Adam(critic.parameters(), lr=0.01)
s, a, r = torch.randn(6, 3), torch.randn(6, 2), torch.randn(6, 1)
"""

# The update, one statement a line; `{pi}` is where the actor's forward through the critic is computed.
_BODY = """\
q = critic(torch.cat([s, a], 1))
{pi}critic_loss = (q - r).pow(2).mean()
opt_c.zero_grad()
critic_loss.backward()
opt_c.step()
{after}opt_a.zero_grad()
actor_loss.backward()
opt_a.step()
"""
_PI = "q_pi = critic(torch.cat([s, actor(s)], 1))\nactor_loss = -q_pi.mean()\n"

_SHAPES = {
    # the helper's step is found by the analysis of the module's code that calls it
    "helper called by the module": ("def update(actor, critic, opt_a, opt_c, s, a, r):\n{body}"
                                    "    return [p.grad.clone() for p in actor.parameters()]\n\n\n"
                                    "GRADS = update(actor, critic, opt_a, opt_c, s, a, r)\n"),
    # ... by the analysis of a function that calls it
    "helper called by a function": ("def update(actor, critic, opt_a, opt_c, s, a, r):\n{body}"
                                    "    return [p.grad.clone() for p in actor.parameters()]\n\n\n"
                                    "def train():\n    return update(actor, critic, opt_a, opt_c, s, a, r)\n\n\n"
                                    "GRADS = train()\n"),
    # the module's own code steps
    "module code": "{body}GRADS = [p.grad.clone() for p in actor.parameters()]\n",
}


def _program(shape: str, pi_before: bool) -> str:
    template = _SHAPES[shape]
    indent = "" if shape == "module code" else "    "
    body = _BODY.format(pi="" if not pi_before else _PI, after=_PI if not pi_before else "")
    return textwrap.dedent(_MODELS) + template.format(body=textwrap.indent(body, indent))


def _grads(src: str):
    scope: dict = {}
    exec(compile(src, "fixed", "exec"), scope)  # noqa: S102 - the test's own program
    return scope["GRADS"]


@pytest.mark.parametrize("shape", sorted(_SHAPES))
def test_the_forward_the_loss_reads_is_computed_after_the_step_too(shape):
    src = _program(shape, pi_before=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        _grads(src)
    (finding,) = found("GG101", src)
    assert finding.fix is not None and not finding.fix.safe
    assert "`q_pi = critic(torch.cat([s, actor(s)], 1))` after the step" in finding.fix.title
    plan = fix_text(src, "t.py", unsafe=True)
    assert not plan.problems
    assert not found("GG101", plan.fixed)
    for got, want in zip(_grads(plan.fixed), _grads(_program(shape, pi_before=False)), strict=True):
        assert torch.allclose(got, want)


_TWO_TERMS = """
import torch
import torch.nn as nn


def train(G, D, opt_g, opt_d, z, real):
    fake = G(z)
    d_loss = D(real).mean() - D(fake.detach()).mean()
    g_adv = -D(fake).mean()
    g_loss = g_adv
    g_rec = (fake - real).abs().mean()
    g_loss = g_loss + g_rec
    d_loss.backward()
    opt_d.step()
    opt_d.zero_grad()
    g_loss.backward()
    opt_g.step()


def main():
    torch.manual_seed(0)
    G = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 4))
    D = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    opt_g, opt_d = torch.optim.SGD(G.parameters(), lr=0.1), torch.optim.SGD(D.parameters(), lr=0.1)
    train(G, D, opt_g, opt_d, torch.randn(5, 3), torch.randn(5, 4))


main()
"""


def test_a_candidate_that_adds_lines_is_checked_where_the_caller_then_is():
    """The generator's loss sums two terms built before the discriminator's step; computing one of them again after
    it (a line more, so the caller below moves down) leaves the other's graph broken: no fix is offered."""
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        exec(compile(_TWO_TERMS, "t", "exec"), {})  # noqa: S102 - the test's own program
    (finding,) = found("GG101", _TWO_TERMS)
    plan = fix_text(_TWO_TERMS, "t.py", unsafe=True)
    assert not plan.problems, plan.problems
    if finding.fix is not None:
        exec(compile(plan.fixed, "fixed", "exec"), {})  # noqa: S102 - the test's own program
