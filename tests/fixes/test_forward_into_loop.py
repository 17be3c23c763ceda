"""GG101's fix of a loop that steps once per loss of a list made before it from one forward (the fix in
``rules/gg101_optimizer_step_before_backward.py``): each loss, and the forward only it reads, is computed in the
loop after the previous step.  torch runs the fixed program with the gradients of the per-loss training it meant;
where the rewrite would change what else reads the list or the forward, no fix is offered."""

from __future__ import annotations

import textwrap

import pytest
from gradguard.autofix.writer import fix_text
from programs import found, run_program

torch = pytest.importorskip("torch")

_PROGRAM = """
import torch
import torch.nn.functional as F


def train():
    torch.manual_seed(0)
    trunk = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 6), torch.nn.Tanh())
    heads = torch.nn.ModuleList([torch.nn.Linear(6, 1) for _ in range(3)])
    opt = torch.optim.SGD(list(trunk.parameters()) + list(heads.parameters()), lr=0.1)
    x = torch.randn(5, 4)
    ys = [torch.randn(5, 1) for _ in range(3)]
    h = trunk(x)
    losses = [F.mse_loss(head(h), y) for head, y in zip(heads, ys)]
    for loss in losses:
        opt.zero_grad()
        loss.backward(retain_graph=True)
        opt.step()
    {after}
    return [p.grad for p in trunk.parameters()]
"""


def _program(after: str = "pass") -> str:
    return textwrap.dedent(_PROGRAM).replace("{after}", after)


def _intended():
    """One forward per loss, after the previous step: what a step per loss means."""
    torch.manual_seed(0)
    trunk = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 6), torch.nn.Tanh())
    heads = torch.nn.ModuleList([torch.nn.Linear(6, 1) for _ in range(3)])
    opt = torch.optim.SGD(list(trunk.parameters()) + list(heads.parameters()), lr=0.1)
    x = torch.randn(5, 4)
    ys = [torch.randn(5, 1) for _ in range(3)]
    for head, y in zip(heads, ys):
        loss = torch.nn.functional.mse_loss(head(trunk(x)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return [p.grad for p in trunk.parameters()]


def test_each_loss_and_its_forward_are_computed_in_the_loop():
    src = _program()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        run_program(src)
    (finding,) = found("GG101", src)
    assert not finding.fix.safe and "unsafe:" in finding.fix.title
    assert fix_text(src, "t.py").fixed == src  # only with --unsafe-fixes
    out = fix_text(src, "t.py", unsafe=True).fixed
    assert ("    for head, y in zip(heads, ys):\n        h = trunk(x)\n        loss = F.mse_loss(head(h), y)\n"
            "        opt.zero_grad()\n") in out
    assert "losses" not in out and not found("GG101", out)
    for got, want in zip(run_program(out), _intended(), strict=True):
        assert torch.allclose(got, want)


@pytest.mark.parametrize("change", [
    # the list is read again after the loop: it must keep every loss
    ("    pass\n", "    print(len(losses))\n"),
    # the forward is read again after the loop: it stays computed once, and the losses would still use it
    ("    pass\n", "    print(h.shape)\n"),
    # a comprehension's name is used after the loop, where the rewrite would leave the loop's last value in it
    ("    pass\n", "    head = None\n"),
    # the loop changes what the losses are computed from
    ("        opt.step()\n", "        opt.step()\n        x = x * 2\n"),
])
def test_no_fix_where_the_list_or_its_forward_serve_more_than_the_loop(change):
    src = _program().replace(*change)
    assert src != _program()
    (finding,) = found("GG101", src)
    assert finding.fix is None
