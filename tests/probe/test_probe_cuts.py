"""Issue 14, signal 4: a `.detach()`/`.data` whose result feeds a backward that gives trained parameters
upstream of it no gradient (GG103 "starved").  Intended cuts (a frozen encoder, a target network, a
stop-gradient beside the live path) are not reported.  Each program is first run with torch: the trunk
gets no gradient (positives) or its parameters are untrained or get one (negatives)."""

from __future__ import annotations

import runpy

import pytest

torch = pytest.importorskip("torch")

PROGRAM = """\
import torch
import torch.nn as nn


def run():
    torch.manual_seed(0)
    trunk, head, target = nn.Linear(4, 6), nn.Linear(6, 1), nn.Linear(4, 6)
    x = torch.randn(5, 4)
    {optimizer}
    h = trunk(x)
    feats = {cut}
    loss = head(feats).pow(2).sum()
    loss.backward()
    {step}
    return [p.grad for p in trunk.parameters()]
"""
CUT, BACKWARD, STEP = 11, 13, 14
BOTH = "opt = torch.optim.SGD([*trunk.parameters(), *head.parameters()], lr=0.1)"
HEAD_ONLY = "opt = torch.optim.SGD(head.parameters(), lr=0.1)"
MANUAL = """with torch.no_grad():
        for p in [*trunk.parameters(), *head.parameters()]:
            if p.grad is not None:
                p -= 0.1 * p.grad"""
# name -> (optimizer, cut, step, the related line: the step, or the update that reads .grad)
POSITIVES = {
    "detach_trained_by_optimizer": (BOTH, "h.detach()", "opt.step()", STEP),
    "data_trained_by_optimizer": (BOTH, "torch.tanh(h).data", "opt.step()", STEP),
    "detach_trained_by_hand": ("pass", "h.detach()", MANUAL, STEP + 2),
}
NEGATIVES = {
    "frozen_trunk": (HEAD_ONLY, "h.detach()", "opt.step()"),
    "target_network": (BOTH, "h + target(x).detach()", "opt.step()"),
    "stop_gradient_beside_the_live_path": (BOTH, "h * h.detach()", "opt.step()"),
    "detach_without_training": ("pass", "h.detach()", "pass"),
    # The trunk got its gradient from an earlier backward before the cut.
    "trained_by_an_earlier_backward": (BOTH + "; trunk(x).pow(2).sum().backward()", "h.detach()", "opt.step()"),
}


def _program(script, name, optimizer, cut, step):
    return script(PROGRAM.format(optimizer=optimizer, cut=cut, step=step), name=f"{name}.py")


@pytest.mark.parametrize("name", POSITIVES)
def test_cut_starving_trained_parameters_is_reported(name, script, probe):
    optimizer, cut, step, related = POSITIVES[name]
    path = _program(script, name, optimizer, cut, step)
    assert runpy.run_path(str(path))["run"]() == [None, None], "torch: the trunk gets no gradient"
    result = probe(path, entry="run")
    assert result.status == "completed", result.detail
    [finding] = result.findings
    assert (finding.code, finding.kind, finding.site.line) == ("GG103", "starved", CUT)
    assert finding.message.startswith(f"`{cut}` cuts the graph: 2 trained parameter tensor(s)"), finding.message
    assert sorted(n.site.line for n in finding.notes) == [BACKWARD, related]
    assert not result.sandbox.get("tracer_errors")


@pytest.mark.parametrize("name", NEGATIVES)
def test_intended_cut_is_not_reported(name, script, probe):
    path = _program(script, name, *NEGATIVES[name])
    grads = runpy.run_path(str(path))["run"]()
    trained = NEGATIVES[name][0].startswith(BOTH)
    assert all(g is not None for g in grads) if trained else grads == [None, None], "torch"
    result = probe(path, entry="run")
    assert result.status == "completed", result.detail
    assert result.findings == [], [f.message for f in result.findings]


REPLACED_AFTER_OPTIMIZER = """\
import torch
import torch.nn as nn


def shrink(model):
    keep = model[0].weight.detach().abs().sum(1).topk(3).indices.sort().values
    new = nn.Linear(4, 3)
    with torch.no_grad():
        new.weight.copy_(model[0].weight[keep])
        new.bias.copy_(model[0].bias[keep])
    model[0] = new
    model[2] = nn.Linear(3, 1)


def run():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    shrink(model)
    model(torch.randn(5, 4)).pow(2).sum().backward()
    return [p.grad for group in opt.param_groups for p in group["params"]]
"""


def test_cut_is_not_blamed_for_parameters_replaced_out_of_the_model(script, probe):
    """A helper picks, through a detached read of a layer's weight, the rows it copies into smaller layers that
    replace the old ones after the optimizer took them (bench/realworld 308): the optimizer's old parameters get no
    gradient because the model no longer uses them, not because of the cut -- the replacement's finding (at the
    optimizer, made before the call) says so, and no "starved" finding blames the detach."""
    path = script(REPLACED_AFTER_OPTIMIZER, name="replaced_after_optimizer.py")
    assert runpy.run_path(str(path))["run"]() == [None] * 4, "torch: the optimizer's parameters get no gradient"
    result = probe(path, entry="run")
    assert result.status == "completed", result.detail
    assert [(f.code, f.site.line) for f in result.findings] == [("GG103", 18)], [f.message for f in result.findings]
    assert not result.sandbox.get("tracer_errors")


TWO_LOSSES_EACH_CUTTING_THE_OTHER = """\
import torch
import torch.nn as nn


def run():
    torch.manual_seed(0)
    actor, critic = nn.Linear(3, 2), nn.Linear(3, 1)
    opt = torch.optim.Adam([*actor.parameters(), *critic.parameters()], lr=0.01)
    trained = set()
    for _ in range(2):
        x = torch.randn(4, 3)
        log_probs = torch.log_softmax(actor(x), 1)[:, 0]
        returns = (torch.randn(4) + log_probs).detach()
        advantages = returns - critic(x).squeeze(1)
        opt.zero_grad()
        advantages.pow(2).mean().backward(retain_graph=True)
        opt.step()
        trained |= {i for i, p in enumerate(opt.param_groups[0]["params"]) if p.grad is not None}
        opt.zero_grad()
        (-(log_probs * advantages.detach()).mean()).backward()
        opt.step()
        trained |= {i for i, p in enumerate(opt.param_groups[0]["params"]) if p.grad is not None}
    return sorted(trained)
"""


def test_cut_of_parameters_another_backward_trains_is_not_reported(script, probe):
    """An actor-critic update (bench/realworld 117): the critic loss reads detached returns computed from the actor,
    the policy loss a detached advantage computed by the critic, one optimizer steps after each backward.  At each
    step the other network's parameters have no gradient, but the other backward gives them one before its step:
    every parameter is trained, and neither cut is reported."""
    path = script(TWO_LOSSES_EACH_CUTTING_THE_OTHER, name="two_losses_each_cutting_the_other.py")
    assert runpy.run_path(str(path))["run"]() == [0, 1, 2, 3], "torch: every parameter gets a gradient at a step"
    result = probe(path, entry="run")
    assert result.status == "completed", result.detail
    assert result.findings == [], [f.message for f in result.findings]
    assert not result.sandbox.get("tracer_errors")
