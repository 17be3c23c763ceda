"""GG103 fix forms read off the run's facts: a value rebound with grad mode off is computed with grad mode on for
that statement alone (under ``set_grad_enabled(False)`` too), and none is offered inside ``inference_mode``, where
turning grad mode on gives no graph.  torch runs each fixed program against the intended one."""

from __future__ import annotations

import textwrap

import pytest
from gradguard.config import Config
from gradguard.autofix.writer import fix_text
from gradients import grads_equal
from programs import found, run_program

torch = pytest.importorskip("torch")

_REBOUND = """
import copy
import torch
import torch.nn.functional as F


def train(fixed=False):
    torch.manual_seed(0)
    student = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4))
    teacher = copy.deepcopy(student).requires_grad_(False)
    x, x_aug = torch.randn(6, 4), torch.randn(6, 4)
    pred = student(x)
    {switch}
        target = teacher(x_aug)
        pred = teacher(pred)
        target = teacher(target)
    loss = F.mse_loss(pred, target) + 0.1 * F.mse_loss(student(x_aug), x_aug)
    loss.backward()
    return [p.grad for p in student.parameters()]


def intended():
    torch.manual_seed(0)
    student = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4))
    teacher = copy.deepcopy(student).requires_grad_(False)
    x, x_aug = torch.randn(6, 4), torch.randn(6, 4)
    pred = teacher(student(x))
    with torch.no_grad():
        target = teacher(teacher(x_aug))
    loss = F.mse_loss(pred, target) + 0.1 * F.mse_loss(student(x_aug), x_aug)
    loss.backward()
    return [p.grad for p in student.parameters()]
"""


@pytest.mark.parametrize("switch", ["with torch.no_grad():", "with torch.set_grad_enabled(False):"])
def test_a_value_rebound_with_grad_mode_off_is_computed_with_it_on(switch):
    src = textwrap.dedent(_REBOUND).replace("{switch}", switch)
    (diag,) = found("GG103", src)
    assert diag.fix is not None and diag.fix.safe
    out = fix_text(src, "t.py", Config(jedi=False)).fixed
    assert "with torch.enable_grad():\n            pred = teacher(pred)\n        target = teacher(target)" in out
    assert not found("GG103", out)
    assert grads_equal(run_program(out), run_program(out, "intended"))


def test_no_grad_mode_fix_inside_inference_mode():
    src = textwrap.dedent(_REBOUND).replace("{switch}", "with torch.inference_mode():")
    (diag,) = found("GG103", src)
    assert diag.fix is None


_HOOK = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(3, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
{body}
        self.last = loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def train():
    torch.manual_seed(0)
    model = Regressor()
    model.configure_optimizers().zero_grad()
    model.training_step((torch.randn(4, 3), torch.randn(4, 1)), 1).backward()
    return [p.grad for p in model.parameters()]
"""


def test_the_loss_bound_on_every_path_is_returned_unsafe():
    src = _HOOK.replace("{body}", "        loss = F.mse_loss(self.net(x), y)")
    (diag,) = found("GG103", src)
    assert diag.fix is not None and not diag.fix.safe and "author" in diag.fix.title
    out = fix_text(src, "t.py", Config(jedi=False), unsafe=True).fixed
    assert "        self.last = loss\n        return loss\n" in out and not found("GG103", out)
    assert all(g is not None for g in run_program(out))


def test_no_return_of_a_loss_bound_on_some_paths_only():
    body = ("        if batch_idx % 2:\n            loss = F.mse_loss(self.net(x), y)\n"
            "        else:\n            loss = F.l1_loss(self.net(x), y)")
    (diag,) = found("GG103", _HOOK.replace("{body}", body))
    assert diag.fix is None


_GATHER = """
import numpy as np
import torch


def train(intended=False):
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 6)
    idx_a, idx_b = np.array([0, 2, 5]), np.array([1, 1, 4])
    h = lin(torch.randn(3, 4))
    if intended:
        a, b = h[:, torch.as_tensor(idx_a)], h[:, torch.as_tensor(idx_b)]
    else:
{gather}
    (a * b).sum().backward()
    return [lin.weight.grad, lin.bias.grad]
"""


@pytest.mark.parametrize("gather", [
    "        arr = h.detach().numpy()\n"
    "        a = torch.from_numpy(np.take(arr, idx_a, axis=1))\n"
    "        b = torch.from_numpy(np.take(arr, idx_b, 1))",
    "        arr = h.detach().cpu().numpy()\n"
    "        a, b = torch.from_numpy(np.take(arr, idx_a, axis=1)), torch.from_numpy(np.take(arr * 1.0, idx_b, axis=1))",
])
def test_an_array_gathered_by_np_take_in_several_rebuilds_is_indexed_in_torch(gather):
    src = _GATHER.replace("{gather}", gather)
    (diag,) = found("GG103", src)
    assert diag.fix is not None and not diag.fix.safe and "the other rebuild of `arr` keeps the graph" in diag.fix.title
    out = fix_text(src, "t.py", Config(jedi=False), unsafe=True).fixed
    assert "numpy()" not in out and "np.take" not in out and not found("GG103", out)
    assert grads_equal(run_program(out), run_program(out.replace("def train(intended=False)", "def train(intended=True)")))


def test_no_take_rewrite_when_the_array_is_read_outside_a_rebuild():
    gather = ("        arr = h.detach().numpy()\n"
              "        a = torch.from_numpy(np.take(arr, idx_a, axis=1))\n"
              "        b = torch.from_numpy(np.take(arr, idx_b, axis=1)) * float(arr.mean())")
    (diag,) = found("GG103", _GATHER.replace("{gather}", gather))
    assert diag.fix is None
