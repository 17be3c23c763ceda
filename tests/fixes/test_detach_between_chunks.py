"""GG101's truncated-BPTT fix (``rules/gg101_optimizer_step_before_backward.py``) when the step sits inside an ``if``,
``try``, ``with`` or a loop of its own in the chunk loop's body: the state the chunk loop carries is detached at the
top of that loop (not of the statement around the step) and ``retain_graph=True`` is dropped.  torch runs the fixed
program with the gradients of truncated BPTT."""

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
    cell = torch.nn.GRUCell(3, 5)
    head = torch.nn.Linear(5, 1)
    opt = torch.optim.SGD(list(cell.parameters()) + list(head.parameters()), lr=0.1)
    xs, ys = torch.randn(6, 2, 3), torch.randn(6, 2, 1)
    h = torch.zeros(2, 5)
    for start in range(0, 6, 2):
        loss = 0.0
        for t in range(start, start + 2):
            h = cell(xs[t], h)
            loss = loss + F.mse_loss(head(h), ys[t])
        opt.zero_grad()
        loss.backward(retain_graph=True)
{step}
    return [p.grad for p in cell.parameters()]
"""

_STEPS = {
    "if": "        if start >= 0:\n            opt.step()",
    "loop": "        for _ in range(1):\n            opt.step()",
    "with": "        with torch.no_grad():\n            opt.step()",
}


@pytest.mark.parametrize("kind", sorted(_STEPS))
def test_the_chunk_loops_state_is_detached_when_the_step_is_nested_in_its_body(kind):
    src = textwrap.dedent(_PROGRAM).replace("{step}", _STEPS[kind])
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        run_program(src)
    (finding,) = found("GG101", src)
    assert not finding.fix.safe and "detach `h`" in finding.fix.title
    out = fix_text(src, "t.py", unsafe=True).fixed
    assert "    for start in range(0, 6, 2):\n        h = h.detach()\n        loss = 0.0\n" in out
    assert "loss.backward()\n" in out and "retain_graph" not in out
    assert not found("GG101", out)
    intended = src.replace("        loss = 0.0\n", "        h = h.detach()\n        loss = 0.0\n").replace(
        "loss.backward(retain_graph=True)", "loss.backward()")
    for got, want in zip(run_program(out), run_program(intended), strict=True):
        assert torch.allclose(got, want)
