"""Issue 14, GG107: a gradient asked for (retain_grad() before the write, a hook registered or ``inputs=``
after it) of a tensor written in place.  Each program is first run with torch: the gradient it gets differs
from the one of the unwritten values (positives) or equals it (negatives)."""

from __future__ import annotations

import runpy

import pytest

torch = pytest.importorskip("torch")

PROGRAM = """\
import torch
import torch.nn as nn


def run(inplace=True, ask_written=False):
    torch.manual_seed(0)
    enc, head, x = nn.Linear(4, 6), nn.Linear(6, 1), torch.randn(5, 4)
    seen = []
    h = enc(x)
    {before}
    {use}
    out = h.mul_(0.5) if inplace else h.mul(0.5)
    t = out if ask_written else h
    {after}
    loss = early + head(torch.tanh(out)).pow(2).sum()
    {backward}
    return seen
"""
WRITE = 12
USE = "early = h.sum()"
NO_USE = "early = 0.0"
BACKWARD = "loss.backward()"
HOOK = "h.register_hook(lambda g: seen.append(g))"
HOOK_AFTER = "t.register_hook(lambda g: seen.append(g))"
GRAD = "seen.extend(torch.autograd.grad(loss, inputs=[t]))"
# name -> (before the write, the earlier use, after the write, the backward line)
POSITIVES = {
    "retain_grad_before_write": ("h.retain_grad(); seen.append(h)", NO_USE, "pass", BACKWARD),
    "hook_after_write": ("pass", USE, HOOK_AFTER, BACKWARD),
    "grad_inputs_after_write": ("pass", USE, "pass", GRAD),
}
# name -> (the program's parts, whether the gradient meant is of the written values)
NEGATIVES = {
    "hook_before_write": ((HOOK, USE, "pass", BACKWARD), False),
    "grad_inputs_no_earlier_use": (("pass", NO_USE, "pass", GRAD), True),
    "hook_after_write_no_earlier_use": (("pass", NO_USE, HOOK_AFTER, BACKWARD), True),
}


def _program(script, name, parts):
    before, use, after, backward = parts
    return script(PROGRAM.format(before=before, use=use, after=after, backward=backward), name=f"{name}.py")


def _asked(path, inplace, ask_written=False):
    seen = runpy.run_path(str(path))["run"](inplace, ask_written)
    return seen[0].grad if seen[0].grad_fn is not None or seen[0].retains_grad else seen[0]


@pytest.mark.parametrize("name", POSITIVES)
def test_gradient_asked_of_a_written_tensor_is_reported(name, script, probe):
    path = _program(script, name, POSITIVES[name])
    assert not torch.allclose(_asked(path, True), _asked(path, False)), "torch: the asked gradient changes"
    result = probe(path, entry="run")
    assert result.status == "completed", result.detail
    [finding] = result.findings
    assert (finding.code, finding.kind, finding.site.line) == ("GG107", "silent", WRITE)
    assert finding.message.startswith("`h.mul_(0.5)` changes in place a tensor whose gradient is"), finding.message
    assert not result.sandbox.get("tracer_errors")


@pytest.mark.parametrize("name", NEGATIVES)
def test_gradient_asked_as_meant_is_not_reported(name, script, probe):
    parts, written = NEGATIVES[name]
    path = _program(script, name, parts)
    assert torch.allclose(_asked(path, True), _asked(path, False, written)), "torch: the gradient meant"
    result = probe(path, entry="run")
    assert result.status == "completed", result.detail
    assert result.findings == [], [f.message for f in result.findings]
