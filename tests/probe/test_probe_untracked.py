"""Signal (a) of issue 14: a write autograd does not record (under no_grad, through `.data` or a `.detach()`
alias) to a graph tensor nothing saved, which the forward then reads before a backward.  Each program is
first run with torch: its gradients differ from the reference's (positives) or equal them (negatives)."""

from __future__ import annotations

import runpy

import pytest


torch = pytest.importorskip("torch")

PROGRAM = """\
import torch
import torch.nn as nn


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(4, 6)
        self.head = nn.Linear(6, 1)

    def forward(self, x, pad):
        h = self.enc(x)
        {write}
        return self.head(h).sum()


def _setup():
    torch.manual_seed(0)
    return Tagger(), torch.randn(5, 4), torch.tensor([False, True, False, True, False])


def run():
    model, x, pad = _setup()
    loss = model(x, pad)
    {after}
    return [model.enc.weight.grad]


def reference():
    model, x, pad = _setup()
    h = model.enc(x).masked_fill(pad.unsqueeze(1), 0.0)
    model.head(h).sum().backward()
    return [model.enc.weight.grad]
"""

BACKWARD = "loss.backward()"
POSITIVES = {
    "data": "h.data[pad] = 0.0",
    "no_grad": "with torch.no_grad():\n            h[pad] = 0.0",
    "detach_alias": "h.detach()[pad] = 0.0",
    "data_method": "h.data.mul_((~pad).float().unsqueeze(1))",
}
# The same writes where no gradient is computed afterwards, or the write is recorded by autograd.
NEGATIVES = {
    "no_backward": ("h.data[pad] = 0.0", "model.zero_grad()"),
    "tracked_write": ("h[pad] = 0.0", BACKWARD),
    "cut_then_write": ("h = h.detach()\n        h[pad] = 0.0", BACKWARD),
}


def _write(script, name, write, after):
    return script(PROGRAM.format(write=write, after=after), name=f"{name}.py")


def _gradients(path):
    module = runpy.run_path(str(path))
    return module["run"](), module["reference"]()


def _same(a, b):
    return all((x is None and y is None) or (x is not None and y is not None and torch.allclose(x, y))
               for x, y in zip(a, b))


@pytest.mark.parametrize("name", POSITIVES)
def test_untracked_write_read_by_the_forward_is_reported(name, script, probe):
    path = _write(script, name, POSITIVES[name], BACKWARD)
    got, want = _gradients(path)
    assert not _same(got, want), "torch: the gradients must differ from the reference"
    result = probe(path, entry="run")
    assert result.status == "completed", result.detail
    [finding] = result.findings
    assert (finding.code, finding.kind, finding.site.line) == ("GG102", "silent", 13 + POSITIVES[name].count("\n"))
    assert finding.message.startswith(f"`{POSITIVES[name].splitlines()[-1].strip()}` changes a tensor"), finding.message
    assert [n.site.line for n in finding.notes] == [14 + POSITIVES[name].count("\n"), 25 + POSITIVES[name].count("\n")]
    assert not result.sandbox.get("tracer_errors")


@pytest.mark.parametrize("name", NEGATIVES)
def test_recorded_or_unused_writes_are_not_reported(name, script, probe):
    write, after = NEGATIVES[name]
    path = _write(script, name, write, after)
    if after == BACKWARD and name == "tracked_write":
        got, want = _gradients(path)
        assert _same(got, want), "torch: a recorded write gives the reference's gradients"
    result = probe(path, entry="run")
    assert result.status == "completed", result.detail
    assert result.findings == [], [f.message for f in result.findings]
