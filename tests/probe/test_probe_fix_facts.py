"""The probe's facts reach the fix builders (issue 31 item 3): each program below is probed, every finding it makes
gets its fix from ``gradguard.probed_fixes`` (as a probe-only finding would), and torch proves the fix: the fixed
program runs clean and gives the gradients of ``reference()``.  Each program is one shape where a fact the probe
supplies (where a saving op's expression starts and ends, on which line of a statement) was lost before."""

from __future__ import annotations

import textwrap
import warnings
from pathlib import Path

import pytest
from programs import assert_fix_proven, load_program

torch = pytest.importorskip("torch")

from gradguard.probe import ProbeOptions
from gradguard.probe.merge import diagnostics
from gradguard.probed_fixes import fixes_for

# The saving matmul is the first term of a sum written over several lines: the probe names it on the statement's
# second line, by where it starts and ends (the sum starts at the same column).  The fix clones the saved row there.
SUM_OVER_LINES = '''
import torch


def unroll(xs, weights, copy):
    state = torch.zeros(len(weights), xs.shape[1], weights[0][1].shape[0])
    for x in xs:
        before = state.detach().clone()
        for k, (w_in, w_rec) in enumerate(weights):
            below = x if k == 0 else state[k - 1]
            if copy:
                below = below.clone()
            state[k] = torch.sigmoid(
                below @ w_in
                + before[k] @ w_rec
            )
    return state[-1]


def _grads(copy):
    torch.manual_seed(0)
    weights = [(torch.randn(3 if k == 0 else 4, 4, requires_grad=True), torch.randn(4, 4, requires_grad=True))
               for k in range(2)]
    unroll(torch.randn(3, 2, 3), weights, copy).sum().backward()
    return [w.grad for pair in weights for w in pair]


def run():
    return _grads(False)


def reference():
    return _grads(True)
'''

# The same on one line, the saving product inside a longer expression (`a * b + c` starts where `a * b` does).
PRODUCT_IN_SUM = '''
import torch


def run_(copy):
    torch.manual_seed(0)
    w = torch.randn(4, requires_grad=True)
    buf = torch.zeros(3, 4)
    total = 0
    for i in range(3):
        row = buf[i - 1] if i else w
        if copy:
            row = row.clone()
        buf[i] = row * w + 1.0
        total = total + buf[i].sum()
    (total + buf.sum()).backward()
    return [w.grad]


def run():
    return run_(False)


def reference():
    return run_(True)
'''


# An actor's objective is computed through two critics, then each critic steps, then the objective's backward runs:
# the probe places the finding at the objective's forward, the later step as its note.  GG101's fix computes the
# forward again after the steps (its first computation left unread), checked against the saves the probe saw.
FORWARD_BEFORE_TWO_STEPS = '''
import torch
import torch.nn as nn


class Agent:
    def __init__(self):
        torch.manual_seed(0)
        self.actor = nn.Sequential(nn.Linear(3, 2), nn.Tanh())
        self.critics = [nn.Sequential(nn.Linear(5, 6), nn.ReLU(), nn.Linear(6, 1)) for _ in range(2)]
        self.critic_opts = [torch.optim.SGD(c.parameters(), lr=0.1) for c in self.critics]
        self.actor_opt = torch.optim.SGD(self.actor.parameters(), lr=0.1)

    def critic_losses(self, s, a, target):
        return [(c(torch.cat([s, a], 1)) - target).pow(2).mean() for c in self.critics]

    def update(self, s, a, target):
        first, second = self.critics
        acted = torch.cat([s, self.actor(s)], 1)
        value = torch.min(first(acted), second(acted))
        objective = -value.mean()
        loss_1, loss_2 = self.critic_losses(s, a, target)
        self.critic_opts[0].zero_grad()
        loss_1.backward()
        self.critic_opts[0].step()
        self.critic_opts[1].zero_grad()
        loss_2.backward()
        self.critic_opts[1].step()
        self.actor_opt.zero_grad()
        objective.backward()
        return [p.grad for p in self.actor.parameters()]

    def update_late(self, s, a, target):
        first, second = self.critics
        acted = torch.cat([s, self.actor(s)], 1)
        for opt, loss in zip(self.critic_opts, self.critic_losses(s, a, target)):
            opt.zero_grad()
            loss.backward()
            opt.step()
        value = torch.min(first(acted), second(acted))
        objective = -value.mean()
        self.actor_opt.zero_grad()
        objective.backward()
        return [p.grad for p in self.actor.parameters()]


def _data():
    torch.manual_seed(1)
    return torch.randn(4, 3), torch.rand(4, 2), torch.randn(4, 1)


def run():
    return Agent().update(*_data())


def reference():
    return Agent().update_late(*_data())
'''


# A custom Function's backward writes the gradient into the memory of an input it saved, which is the output another
# Function saved for its own backward (`ctx.save_for_backward(out)`): the probe names each save by its
# `ctx.save_for_backward(...)` call, a call that returns None.  The fix clones the arguments saved there -- every
# argument of a call that saves several, since the probe does not say which one it was (the backward unpacks them
# under other names) -- never the call.
FUNCTION_BACKWARD_WRITES_SAVED_INPUT = '''
import torch


class Exponential(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = torch.exp(x)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return grad * out


class Gate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * torch.sigmoid(b)

    @staticmethod
    def backward(ctx, grad):
        first, second = ctx.saved_tensors
        gate = torch.sigmoid(second)
        grad_first = grad * gate
        grad_second = grad * first * gate * (1 - gate)
        first.copy_(grad_first)
        second.copy_(grad_second)
        return first, second


def _grads(copy):
    torch.manual_seed(0)
    x = torch.randn(3, 4, requires_grad=True)
    h = Exponential.apply(x)
    (Gate.apply(h.clone(), h.clone()) if copy else Gate.apply(h, h)).sum().backward()
    return [x.grad]


def run():
    return _grads(False)


def reference():
    return _grads(True)
'''

# The same with the output saved next to the input (`ctx.save_for_backward(x, out)`): both are cloned there.
OUTPUT_SAVED_WITH_INPUT = FUNCTION_BACKWARD_WRITES_SAVED_INPUT.replace(
    "ctx.save_for_backward(out)", "ctx.save_for_backward(x, out)").replace("(out,) = ctx", "_, out = ctx")


@pytest.mark.parametrize("source", [SUM_OVER_LINES, PRODUCT_IN_SUM, FORWARD_BEFORE_TWO_STEPS,
                                    FUNCTION_BACKWARD_WRITES_SAVED_INPUT, OUTPUT_SAVED_WITH_INPUT],
                         ids=["sum_over_lines", "product_in_sum", "forward_before_two_steps",
                              "function_backward_writes_saved_input", "output_saved_with_input"])
def test_fix_from_the_probes_saving_expression_is_proven(source: str, worker, tmp_path: Path):
    path = tmp_path / "program.py"
    text = textwrap.dedent(source)
    path.write_text(text, encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            load_program(path).run()
    result = worker.probe(path, ProbeOptions(entry="run", timeout=60))
    found = [d for d in diagnostics(result, str(path)) if d.path == str(path)]
    assert found and len({d.code for d in found}) == 1, [(d.code, d.line, d.message) for d in found]
    fixes = fixes_for(text, str(path), found)
    assert len(fixes) == len(found), "a finding got no fix"
    edits = list(dict.fromkeys(e for fix in fixes.values() for e in fix.edits))  # (two findings, one fix)
    assert_fix_proven(text, path, edits, tmp_path / "fixed.py")
